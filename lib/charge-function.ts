// The charge function: SQS FIFO batches in, one durable operation per record, the first Stripe
// attempt inline, partial batch responses for records that could not be made durable.
import * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import type { PipelineMetrics } from './observability.ts';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';

export interface ChargeFunctionProps {
  readonly queue: sqs.IQueue;
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  /** Environment shared by the database-using functions (DB_*, Stripe, events, metrics). */
  readonly environment: Record<string, string>;
  /** Concurrent invocations the event source may run (ScalingConfig.MaximumConcurrency). */
  readonly maxConcurrency: number;
  /** Stripe calls in flight per invocation (CHARGE_CONCURRENCY). */
  readonly stripeConcurrency: number;
  /** Reserved concurrency (at least maxConcurrency: the event source does not count it). @default - unreserved */
  readonly reservedConcurrency?: number;
  readonly timeout: cdk.Duration;
  readonly logLevel: PipelineLogLevel;
  readonly metrics: PipelineMetrics;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
}

export class ChargeFunction extends Construct {
  readonly function: PipelineFunction;
  readonly eventSourceMapping: lambda.EventSourceMapping;

  constructor(scope: Construct, id: string, props: ChargeFunctionProps) {
    super(scope, id);
    this.function = new PipelineFunction(this, 'Function', {
      handler: 'charge',
      description: 'Charge pipeline: records each SQS charge request as an operation and makes the first Stripe attempt',
      vpc: props.vpc,
      securityGroup: props.securityGroup,
      timeout: props.timeout,
      memorySize: 512,
      environment: { ...props.environment, CHARGE_CONCURRENCY: String(props.stripeConcurrency) },
      logLevel: props.logLevel,
      metrics: props.metrics,
      vpcSubnets: props.vpcSubnets,
      logRetention: props.logRetention,
      removalPolicy: props.removalPolicy,
      reservedConcurrentExecutions: props.reservedConcurrency,
    });

    this.function.addEventSource(
      new sources.SqsEventSource(props.queue, {
        batchSize: PIPELINE.batchSize,
        // The handler acknowledges every record whose operation is durable and reports the rest.
        reportBatchItemFailures: true,
        // The knob that keeps Stripe's rate limit and the database's connections respected:
        // at most maxConcurrency x stripeConcurrency Stripe calls and maxConcurrency pools at once.
        maxConcurrency: props.maxConcurrency,
      }),
    );
    const mapping = this.function.node.children.find(
      (child): child is lambda.EventSourceMapping => child instanceof lambda.EventSourceMapping,
    );
    if (!mapping) throw new Error('ChargeFunction: SqsEventSource did not create an event source mapping');
    this.eventSourceMapping = mapping;
  }
}
