// Migrations on deploy: a Trigger invokes the migrate function (synchronously) once the database is
// available and before anything that takes traffic is created or updated. The function throws on a
// failed migration, the Trigger turns that into a failed custom resource, and the deploy rolls back.
import * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as triggers from 'aws-cdk-lib/triggers';
import { Construct } from 'constructs';
import type { PipelineMetrics } from './observability.ts';
import { LAMBDA_MIGRATIONS_DIR, PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';

export interface MigrationsProps {
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  /** DB_* variables (no pool: the migrator uses one client). */
  readonly environment: Record<string, string>;
  /** What must exist before migrating: the database and its secret. */
  readonly after: Construct[];
  readonly logLevel: PipelineLogLevel;
  readonly metrics: PipelineMetrics;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
}

export const MIGRATE_TIMEOUT = cdk.Duration.minutes(5);

export class Migrations extends Construct {
  readonly function: PipelineFunction;
  readonly trigger: triggers.Trigger;

  constructor(scope: Construct, id: string, props: MigrationsProps) {
    super(scope, id);
    this.function = new PipelineFunction(this, 'Function', {
      handler: 'migrate',
      description: 'Charge pipeline: applies the SQL migrations bundled with it (run on deploy)',
      vpc: props.vpc,
      securityGroup: props.securityGroup,
      timeout: MIGRATE_TIMEOUT,
      memorySize: 256,
      environment: { ...props.environment, MIGRATIONS_DIR: LAMBDA_MIGRATIONS_DIR },
      logLevel: props.logLevel,
      metrics: props.metrics,
      vpcSubnets: props.vpcSubnets,
      logRetention: props.logRetention,
      removalPolicy: props.removalPolicy,
      copyMigrations: true,
      // Never replayed by Lambda: the trigger invokes synchronously and reports the error itself.
      asyncRetryAttempts: 0,
    });

    // Re-runs whenever the function's version changes, which a new or changed migration file does
    // (the SQL is in the asset). Migrations are recorded and locked, so a re-run is harmless.
    this.trigger = new triggers.Trigger(this, 'OnDeploy', {
      handler: this.function,
      invocationType: triggers.InvocationType.REQUEST_RESPONSE,
      timeout: MIGRATE_TIMEOUT.plus(cdk.Duration.seconds(30)),
      executeOnHandlerChange: true,
      executeAfter: props.after,
    });
  }

  /** Create or update these only after the migrations ran (and not at all if they failed). */
  runBefore(...scopes: Construct[]): void {
    this.trigger.executeBefore(...scopes);
  }
}
