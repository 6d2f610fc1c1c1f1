// The default stack: one ChargePipeline configured from DeploymentSettings (CDK context), plus the
// outputs an operator needs after `cdk deploy`.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { Construct } from 'constructs';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { ChargePipeline } from './charge-pipeline.ts';
import type { DeploymentSettings, RemovalPolicyName } from './config.ts';
import type { PipelineLogLevel } from './pipeline-function.ts';

export interface ChargePipelineStackProps extends cdk.StackProps {
  readonly settings: DeploymentSettings;
}

const REMOVAL_POLICY: Record<RemovalPolicyName, cdk.RemovalPolicy> = {
  retain: cdk.RemovalPolicy.RETAIN,
  snapshot: cdk.RemovalPolicy.SNAPSHOT,
  destroy: cdk.RemovalPolicy.DESTROY,
};

export function stackNameFor(environment: string): string {
  return `ChargePipeline-${environment}`;
}

export class ChargePipelineStack extends cdk.Stack {
  readonly pipeline: ChargePipeline;

  constructor(scope: Construct, id: string, props: ChargePipelineStackProps) {
    super(scope, id, {
      description: `Exactly-once-effect charge pipeline (${props.settings.environment}): SQS FIFO -> Lambda -> PostgreSQL -> Stripe`,
      ...props,
    });
    const s = props.settings;
    const env = s.environment;

    this.pipeline = new ChargePipeline(this, 'Pipeline', {
      profile: s.profile,
      natGateways: s.natGateways,
      databaseInstanceType: s.dbInstanceClass ? new ec2.InstanceType(s.dbInstanceClass) : undefined,
      multiAz: s.multiAz,
      removalPolicy: s.removalPolicy ? REMOVAL_POLICY[s.removalPolicy] : undefined,
      deletionProtection: s.deletionProtection,
      databasePoolMax: s.databasePoolMax,
      stripeSecret: s.stripeSecretArn
        ? secretsmanager.Secret.fromSecretCompleteArn(this, 'StripeSecret', s.stripeSecretArn)
        : undefined,
      // Names carry the environment so that dev and prod can share an account and region.
      queueName: `${env}-${PIPELINE.queueName}`,
      deadLetterQueueName: `${env}-${PIPELINE.dlqName}`,
      eventBusName: `${env}-${PIPELINE.eventBusName}`,
      // This app keeps the example consumer (the construct's default is off): a queue of every
      // outcome event to look at by hand (ExampleConsumerQueueUrl).
      exampleConsumer: true,
      chargeMaxConcurrency: s.chargeMaxConcurrency,
      chargeStripeConcurrency: s.chargeStripeConcurrency,
      chargeReservedConcurrency: s.chargeReservedConcurrency,
      stripeEventsReservedConcurrency: s.stripeEventsReservedConcurrency,
      stripeConnectedAccounts: s.stripeConnectedAccounts,
      databaseMaxConnections: s.databaseMaxConnections,
      reconcileMaxRps: s.reconcileMaxRps,
      reconcileSearchMaxRps: s.reconcileSearchMaxRps,
      reconcileConcurrency: s.reconcileConcurrency,
      producerRoles: s.producerRoleArns?.map((arn, i) => iam.Role.fromRoleArn(this, `ProducerRole${i}`, arn, { mutable: false })),
      operatorRole: s.opsRoleArn
        ? iam.Role.fromRoleArn(this, 'OperatorRole', s.opsRoleArn, { mutable: false })
        : undefined,
      opsReservedConcurrency: s.opsReservedConcurrency,
      alarmEmail: s.alarmEmail,
      dashboardName: `${this.stackName}-${cdk.Aws.REGION}`,
      // One pipeline per stack here: the stack name names it (metrics dimension, alarm names).
      pipelineName: this.stackName,
      alarmNamePrefix: `${this.stackName}-`,
      logLevel: s.logLevel as PipelineLogLevel | undefined,
    });

    const p = this.pipeline;
    const output = (id: string, value: string, description: string) =>
      new cdk.CfnOutput(this, id, { value, description });
    output('QueueUrl', p.queue.queueUrl, 'Charge requests go here (npm run produce -- --queue-url ...)');
    output('DeadLetterQueueUrl', p.deadLetterQueue.queueUrl, 'Requests that could not be recorded; redrive after a fix');
    output('StripeSecretArn', p.stripeSecret.secretArn, 'Put the Stripe secret key here');
    output('DatabaseSecretArn', p.databaseSecret.secretArn, 'Database owner credentials (the migrate function only; rotated)');
    output('ApplicationDatabaseSecretArn', p.applicationDatabaseSecret.secretArn, 'Application role credentials (charge, reconcile, ops; rotated)');
    output('EventBusName', p.eventBus.eventBusName, 'Outcome events (source ' + PIPELINE.eventSource + ')');
    output('OpsFunctionName', p.opsFunction.functionName, 'Operator commands: aws lambda invoke / npm run ops -- --lambda');
    output('MigrateFunctionName', p.migrateFunction.functionName, 'Applies the migrations (runs on every deploy that changes them)');
    output('AlarmTopicArn', p.alarmTopic.topicArn, 'Alarm notifications');
    if (p.exampleConsumerQueue) {
      output('ExampleConsumerQueueUrl', p.exampleConsumerQueue.queueUrl, 'Every outcome event, for the example consumer');
    }
  }
}
