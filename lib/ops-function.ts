// The ops function: the operator CLI's commands (review list / show / resolve / reissue, stats...)
// run inside the VPC, so on-call people never need a network path to the database. Only the
// configured operator role may invoke it through the function's resource policy.
import type * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import { Construct } from 'constructs';
import type { PipelineMetrics } from './observability.ts';
import { PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';

export interface OpsFunctionProps {
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly environment: Record<string, string>;
  /** The role operators assume; the only principal the resource policy lets invoke the function. */
  readonly operatorRole?: iam.IRole;
  readonly timeout: cdk.Duration;
  readonly logLevel: PipelineLogLevel;
  readonly metrics: PipelineMetrics;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
  /** Reserved concurrency. @default - unreserved */
  readonly reservedConcurrency?: number;
}

/**
 * The reserved (and so maximum) concurrency worth giving the ops function in production: operator
 * commands are run by people, a few at a time, and a loop invoking it must not take database
 * connections from the charge path. Not the default: Lambda refuses any reservation that leaves the
 * account fewer than 100 unreserved executions, so in a new or small account (a limit of 10) it would
 * fail the deploy (ChargePipelineProps.opsReservedConcurrency).
 */
export const OPS_FUNCTION_CONCURRENCY = 2;

export class OpsFunction extends Construct {
  readonly function: PipelineFunction;

  constructor(scope: Construct, id: string, props: OpsFunctionProps) {
    super(scope, id);
    this.function = new PipelineFunction(this, 'Function', {
      handler: 'ops',
      description: 'Charge pipeline: operator commands (review queue, audit trail, stats), invoked with IAM',
      vpc: props.vpc,
      securityGroup: props.securityGroup,
      timeout: props.timeout,
      memorySize: 256,
      environment: props.environment,
      logLevel: props.logLevel,
      metrics: props.metrics,
      vpcSubnets: props.vpcSubnets,
      logRetention: props.logRetention,
      removalPolicy: props.removalPolicy,
      // An operator command is run once, by a person who sees its result; never replayed.
      asyncRetryAttempts: 0,
      reservedConcurrentExecutions: props.reservedConcurrency,
    });
    if (props.operatorRole) {
      // A resource-based permission for that role's ARN: nothing is attached to the role itself,
      // which may live in another stack or account.
      this.function.addPermission('InvokeByOperatorRole', {
        principal: new iam.ArnPrincipal(props.operatorRole.roleArn),
        action: 'lambda:InvokeFunction',
      });
    }
  }
}
