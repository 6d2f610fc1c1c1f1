// The reconciler: an EventBridge Scheduler schedule that runs the reconcile sweep every minute. The
// sweep settles open operations, publishes what the outbox still holds, and emits the gauges the
// alarms watch.
import * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import { Construct } from 'constructs';
import type { PipelineMetrics } from './observability.ts';
import { PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';
import { designFinding } from './nag.ts';

export interface ReconcilerProps {
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly environment: Record<string, string>;
  readonly schedule: scheduler.ScheduleExpression;
  readonly maxRps: number;
  readonly searchMaxRps: number;
  readonly concurrency: number;
  readonly timeout: cdk.Duration;
  readonly logLevel: PipelineLogLevel;
  readonly metrics: PipelineMetrics;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
}

/**
 * A sweep is only worth running now: the next one starts a minute later and sees everything this one
 * would have. So a sweep is retried a little (a Scheduler-side delivery failure, up to a minute),
 * never replayed late; Lambda's own asynchronous retries (the scheduler invokes asynchronously) are
 * off for the same reason.
 */
export const SWEEP_RETRY = {
  retryAttempts: 2,
  maxEventAge: cdk.Duration.minutes(1),
} as const;

export class Reconciler extends Construct {
  readonly function: PipelineFunction;
  readonly schedule: scheduler.Schedule;

  constructor(scope: Construct, id: string, props: ReconcilerProps) {
    super(scope, id);
    this.function = new PipelineFunction(this, 'Function', {
      handler: 'reconcile',
      description: 'Charge pipeline: settles open operations, publishes the outbox, reports gauges',
      vpc: props.vpc,
      securityGroup: props.securityGroup,
      timeout: props.timeout,
      memorySize: 512,
      environment: {
        ...props.environment,
        RECONCILE_MAX_RPS: String(props.maxRps),
        RECONCILE_SEARCH_MAX_RPS: String(props.searchMaxRps),
        RECONCILE_CONCURRENCY: String(props.concurrency),
      },
      logLevel: props.logLevel,
      metrics: props.metrics,
      vpcSubnets: props.vpcSubnets,
      logRetention: props.logRetention,
      removalPolicy: props.removalPolicy,
      asyncRetryAttempts: 0,
      asyncMaxEventAge: SWEEP_RETRY.maxEventAge,
    });

    // Our own role (instead of the target's shared one) so that the finding below is acknowledged
    // on exactly this role. Only this account's schedules may assume it (confused deputy).
    const scheduleRole = new iam.Role(this, 'ScheduleRole', {
      description: 'Charge pipeline: lets the reconcile schedule invoke the reconcile function',
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com', {
        conditions: { StringEquals: { 'aws:SourceAccount': cdk.Stack.of(this).account } },
      }),
    });

    this.schedule = new scheduler.Schedule(this, 'Schedule', {
      description: 'Charge pipeline: reconcile sweep',
      schedule: props.schedule,
      target: new targets.LambdaInvoke(this.function, {
        role: scheduleRole,
        retryAttempts: SWEEP_RETRY.retryAttempts,
        maxEventAge: SWEEP_RETRY.maxEventAge,
        input: scheduler.ScheduleTargetInput.fromObject({
          source: 'aws.scheduler',
          scheduleArn: scheduler.ContextAttribute.scheduleArn,
          scheduledTime: scheduler.ContextAttribute.scheduledTime,
          attemptNumber: scheduler.ContextAttribute.attemptNumber,
        }),
      }),
    });

    const functionLogicalId = cdk.Stack.of(this).getLogicalId(this.function.node.defaultChild as cdk.CfnElement);
    designFinding(scheduleRole, {
      id: `AwsSolutions-IAM5[Resource::<${functionLogicalId}.Arn>:*]`,
      reason:
        "The wildcard only covers the reconcile function's own versions and aliases, which lambda:InvokeFunction grants add by default.",
    });
  }
}
