// ChargePipeline: the whole pipeline as one construct, so it can be embedded in any CDK app.
//
//   producer ──▶ SQS FIFO ──▶ charge λ ──▶ PostgreSQL (RDS) ──▶ Stripe
//                   │ DLQ         │              ▲     outbox ──▶ EventBridge bus ──▶ consumers
//                   ▼             ▼              │
//                alarms     Scheduler ──▶ reconcile λ (settles open operations, relays outbox, gauges)
//                           operator ──▶ ops λ (review queue)        migrate λ ◀── Trigger on deploy
//
// The default stack (bin/app.ts) is one use of it. Every child construct mirrors a box above.
import * as cdk from 'aws-cdk-lib';
import type * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type * as triggers from 'aws-cdk-lib/triggers';
import { Construct } from 'constructs';
import { isConsumerSchemaName, PIPELINE, SQL_IDENTIFIER } from '../lambdas/runtime/settings.ts';
import { ChargeFunction } from './charge-function.ts';
import { ChargeQueue } from './charge-queue.ts';
import { APPLICATION_USER, applicationRoleFor, DATABASE_NAME, DATABASE_USER, Database } from './database.ts';
import { Migrations } from './migrations.ts';
import { Network } from './network.ts';
import { Observability, type PipelineAlarm, type PipelineMetricName, type PipelineMetrics, pipelineMetric, pipelineMetrics } from './observability.ts';
import { OpsFunction } from './ops-function.ts';
import { OutcomeEvents } from './outcome-events.ts';
import { operatorArns, Perimeter, principalArnOf, stripeSecretKey } from './perimeter.ts';
import { Reconciler } from './reconciler.ts';
import { StripeEvents } from './stripe-events.ts';
import { CHARGE_PIPELINE_DEFAULTS, CHARGE_PIPELINE_PROFILES, type ChargePipelineProps, type ConsumerDatabaseLogin, type ConsumerDatabaseLoginOptions, type RetentionProps } from './charge-pipeline-props.ts';
import { RETENTION_VARIABLES } from '../lambdas/payments/retention-store.ts';
import { PipelineValidationError, validateChargePipelineProps } from './validation.ts';
import { designFinding } from './nag.ts';

/** A reserved-concurrency prop as Lambda takes it: the value, its default, or none ('unreserved'). */
function reserved(value: number | 'unreserved' | undefined, fallback: number): number | undefined {
  return value === 'unreserved' ? undefined : (value ?? fallback);
}

/**
 * The Lambda function names of the secret rotations the construct's database runs (a SecretRotation
 * names its function after the last 64 characters of its unique id).
 */
function rotationFunctionNames(database: Database | undefined): string[] {
  if (!database) return [];
  return database.node
    .findAll()
    .filter((c): c is secretsmanager.SecretRotation => c instanceof secretsmanager.SecretRotation)
    .map((rotation) => cdk.Names.uniqueId(rotation).slice(-64));
}

export class ChargePipeline extends Construct implements ec2.IConnectable {
  readonly vpc: ec2.IVpc;
  /** The functions' security group (HTTPS out, PostgreSQL to the database). */
  readonly functionsSecurityGroup: ec2.ISecurityGroup;
  /** The database instance the construct created (undefined with existingDatabase). */
  readonly database?: rds.IDatabaseInstance;
  /** The owner's credentials (JSON with host, port, username, password, dbname): the migrate function only. */
  readonly databaseSecret: secretsmanager.ISecret;
  /** The data-only application role's credentials: charge, reconcile, ops and stripe-events connect with these. */
  readonly applicationDatabaseSecret: secretsmanager.ISecret;
  readonly stripeSecret: secretsmanager.ISecret;
  readonly queue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;
  readonly chargeFunction: lambda.IFunction;
  readonly chargeEventSourceMapping: lambda.IEventSourceMapping;
  readonly reconcileFunction: lambda.IFunction;
  readonly reconcileSchedule: scheduler.ISchedule;
  readonly migrateFunction: lambda.IFunction;
  readonly migrationTrigger: triggers.Trigger;
  readonly opsFunction: lambda.IFunction;
  /** Stripe events in; undefined when `stripeEvents` is 'none'. */
  readonly stripeEvents?: StripeEvents;
  readonly eventBus: events.IEventBus;
  readonly eventArchive: events.Archive;
  readonly exampleConsumerQueue?: sqs.IQueue;
  readonly alarmTopic: sns.ITopic;
  /** Every alarm with its one-line meaning, in ALARM_CATALOG order (docs/runbook.md covers each). */
  readonly alarms: readonly PipelineAlarm[];
  readonly dashboard: cw.Dashboard;
  /** This instance's name (the `pipeline` metric dimension). */
  readonly pipelineName: string;
  /** The database role charge, reconcile, ops and stripe-events log in as: one per database (applicationRoleFor). */
  readonly applicationRole: string;
  /** Where this instance's own metrics live: namespace + dimensions (see pipelineMetrics). */
  readonly metrics: PipelineMetrics;
  readonly metricsNamespace: string;
  /** The functions' security group as a connectable: `otherDatabase.connections.allowDefaultPortFrom(pipeline)`. */
  readonly connections: ec2.Connections;
  readonly #consumerLogins: ConsumerDatabaseLogin[] = [];
  /** The server (its endpoint's host, a token or a name) and database this instance uses. */
  #databaseClaim?: { readonly host: string; readonly databaseName: string };

  /** The databases the app's other ChargePipelines use (the same endpoint token or host name, the same database name). */
  static #otherClaims(self: ChargePipeline): { host: string; databaseName: string; path: string }[] {
    return self.node.root.node
      .findAll()
      .filter((c): c is ChargePipeline => c instanceof ChargePipeline && c !== self && c.#databaseClaim !== undefined)
      .map((p) => ({ ...p.#databaseClaim!, path: p.node.path }));
  }
  readonly #perimeter: Perimeter;
  private readonly databaseConstruct?: Database;
  private readonly migrations: Migrations;
  private readonly removalPolicy: cdk.RemovalPolicy;
  /** existingDatabase: the endpoint variables (its login secrets hold no host). */
  private readonly endpointEnvironment: Readonly<Record<string, string>> = {};

  constructor(scope: Construct, id: string, props: ChargePipelineProps = {}) {
    super(scope, id);
    validateChargePipelineProps(props, this);

    const d = CHARGE_PIPELINE_DEFAULTS;
    const profile = CHARGE_PIPELINE_PROFILES[props.profile ?? 'production'];
    const removalPolicy = props.removalPolicy ?? cdk.RemovalPolicy.SNAPSHOT;
    this.removalPolicy = removalPolicy;
    const logRetention = props.logRetention ?? logs.RetentionDays.THREE_MONTHS;
    const logLevel = props.logLevel ?? d.logLevel;
    const eventSource = props.eventSource ?? PIPELINE.eventSource;
    // Unique per instance by default: the stack name (unique per account and region) and the path.
    this.pipelineName = props.pipelineName ?? cdk.Names.uniqueResourceName(this, { maxLength: 64, separator: '-' });
    this.metricsNamespace = props.metricsNamespace ?? PIPELINE.metricsNamespace;
    this.metrics = pipelineMetrics(this.metricsNamespace, this.pipelineName);
    const common = { logLevel, metrics: this.metrics, logRetention, removalPolicy, vpcSubnets: props.functionSubnets };

    const network = new Network(this, 'Network', {
      vpc: props.vpc,
      natGateways: props.natGateways ?? profile.natGateways,
      functionsSecurityGroup: props.functionsSecurityGroup,
      httpsEgress: props.functionsHttpsEgress,
      logRetention,
      removalPolicy,
    });
    this.vpc = network.vpc;
    this.functionsSecurityGroup = network.functionsSecurityGroup;
    this.connections = new ec2.Connections({ securityGroups: [network.functionsSecurityGroup] });
    const placement = { vpc: this.vpc, securityGroup: network.functionsSecurityGroup };

    // The database: created here, or the one the user brings. What the functions read comes out of it.
    let databaseEnv: Record<string, string>;
    let applicationEnv: Record<string, string>;
    let databaseReady: Construct[];
    let rotations: Construct[] = [];
    let databaseInstanceIdentifier: string | undefined;
    const existing = props.existingDatabase;
    if (existing) {
      // Two pipelines of this app on one database would settle each other's operations: refuse it
      // here, where both are known (the server's own check is the role's: lambdas/runtime/migrations.ts).
      const sharing = ChargePipeline.#otherClaims(this).find((claim) => claim.host === existing.endpoint.hostname && claim.databaseName === existing.databaseName);
      if (sharing) {
        throw new PipelineValidationError('ChargePipeline props', [
          `existingDatabase.databaseName '${existing.databaseName}' is the database of the pipeline at ${sharing.path} on that server: give this pipeline a database of its own (the migrate function creates it)`,
        ], this);
      }
      this.databaseSecret = existing.secret;
      this.applicationRole = applicationRoleFor(existing.databaseName);
      this.applicationDatabaseSecret = this.createLoginSecret('ApplicationDatabaseSecret', this.applicationRole, 'the application role');
      const port = existing.endpoint.port;
      const existingIngress: Construct[] = [];
      if (existing.connections) {
        // The rules live here, not on the database's groups (connections.allowFrom would put the
        // ingress in the database's stack, referring to this one's group: a cycle when the database
        // is another stack's). This stack refers to the database's groups, as it refers to its endpoint.
        existing.connections.connections.securityGroups.forEach((group, i) => {
          const ingress = new ec2.CfnSecurityGroupIngress(this, i === 0 ? 'DatabaseIngress' : `DatabaseIngress${i + 1}`, {
            groupId: group.securityGroupId,
            ipProtocol: 'tcp',
            fromPort: port,
            toPort: port,
            sourceSecurityGroupId: this.functionsSecurityGroup.securityGroupId,
            description: 'PostgreSQL from the charge pipeline functions',
          });
          existingIngress.push(ingress);
          this.functionsSecurityGroup.addEgressRule(group, ec2.Port.tcp(port), 'PostgreSQL to the charge pipeline database');
        });
      } else {
        this.functionsSecurityGroup.addEgressRule(ec2.Peer.ipv4(this.vpc.vpcCidrBlock), ec2.Port.tcp(port), 'PostgreSQL to the charge pipeline database');
      }
      const endpointEnv = {
        DB_HOST: existing.endpoint.hostname,
        DB_PORT: cdk.Tokenization.stringifyNumber(port),
        DB_NAME: existing.databaseName,
      };
      this.endpointEnvironment = endpointEnv;
      this.#databaseClaim = { host: existing.endpoint.hostname, databaseName: existing.databaseName };
      databaseEnv = { DB_SECRET_ARN: this.databaseSecret.secretArn, ...endpointEnv };
      applicationEnv = { DB_SECRET_ARN: this.applicationDatabaseSecret.secretArn, ...endpointEnv };
      // A first migration waits for the rules that let it in.
      databaseReady = existingIngress;
      databaseInstanceIdentifier = existing.instanceIdentifier;
    } else {
      const database = new Database(this, 'Database', {
        vpc: this.vpc,
        subnets: props.databaseSubnets,
        clientSecurityGroup: network.functionsSecurityGroup,
        instanceType: props.databaseInstanceType ?? new ec2.InstanceType(d.databaseInstanceType),
        multiAz: props.multiAz ?? profile.multiAz,
        allocatedStorageGiB: props.databaseAllocatedStorageGiB ?? d.databaseAllocatedStorageGiB,
        maxAllocatedStorageGiB: props.databaseMaxAllocatedStorageGiB ?? d.databaseMaxAllocatedStorageGiB,
        backupRetention: props.backupRetention ?? cdk.Duration.days(d.backupRetentionDays),
        deletionProtection: props.deletionProtection ?? removalPolicy !== cdk.RemovalPolicy.DESTROY,
        removalPolicy,
        logRetention,
        ownerSecret: props.databaseSecret,
        rotationInterval: props.databaseSecretRotation ?? cdk.Duration.days(d.databaseSecretRotationDays),
        rotationSubnets: props.functionSubnets,
      });
      this.databaseConstruct = database;
      this.applicationRole = APPLICATION_USER;
      this.#databaseClaim = { host: database.instance.instanceEndpoint.hostname, databaseName: DATABASE_NAME };
      this.database = database.instance;
      this.databaseSecret = database.secret;
      this.applicationDatabaseSecret = database.applicationSecret;
      databaseEnv = { DB_SECRET_ARN: this.databaseSecret.secretArn };
      applicationEnv = { DB_SECRET_ARN: this.applicationDatabaseSecret.secretArn };
      databaseReady = database.readyForClients;
      rotations = database.rotations;
      databaseInstanceIdentifier = database.instance.instanceIdentifier;
    }

    this.stripeSecret = props.stripeSecret ?? this.createStripeSecret(removalPolicy);

    const chargeTimeout = cdk.Duration.seconds(PIPELINE.chargeFunctionTimeoutSeconds);
    // No physical names unless given: CloudFormation generates unique ones (FIFO ones end in .fifo).
    const intake = new ChargeQueue(this, 'Intake', {
      queueName: props.queueName,
      deadLetterQueueName: props.deadLetterQueueName,
      maxReceiveCount: props.maxReceiveCount ?? PIPELINE.maxReceiveCount,
      visibilityTimeout: cdk.Duration.seconds(
        Math.max(PIPELINE.visibilityTimeoutSeconds, 6 * PIPELINE.chargeFunctionTimeoutSeconds),
      ),
      removalPolicy,
      retentionPeriod: props.queueRetentionPeriod ?? cdk.Duration.days(d.queueRetentionDays),
    });
    this.queue = intake.queue;
    this.deadLetterQueue = intake.deadLetterQueue;

    const outcomes = new OutcomeEvents(this, 'OutcomeEvents', {
      eventBusName: props.eventBusName,
      eventSource,
      archiveRetention: props.eventArchiveRetention ?? cdk.Duration.days(d.eventArchiveRetentionDays),
      exampleConsumer: props.exampleConsumer ?? false,
    });
    this.eventBus = outcomes.eventBus;
    this.eventArchive = outcomes.archive;
    this.exampleConsumerQueue = outcomes.exampleConsumerQueue;

    // What the functions read. Secrets are referenced by ARN and fetched at run time: no secret
    // value is ever in the template or the function configuration. TLS: verify-full against the
    // RDS CA bundle in the asset (DB_SSL_CA_FILE, set by PipelineFunction).
    const tls = { DB_SSL: 'verify-full' };
    const pipelineEnv = {
      ...applicationEnv,
      ...tls,
      DB_POOL_MAX: String(props.databasePoolMax ?? d.databasePoolMax),
      STRIPE_SECRET_ARN: this.stripeSecret.secretArn,
      EVENT_BUS_NAME: this.eventBus.eventBusName,
      EVENT_SOURCE: eventSource,
      ...(props.stripeTimeout ? { STRIPE_TIMEOUT_MS: String(props.stripeTimeout.toMilliseconds()) } : {}),
      ...(props.stripeMaxNetworkRetries !== undefined ? { STRIPE_MAX_NETWORK_RETRIES: String(props.stripeMaxNetworkRetries) } : {}),
    };

    // Connect: whose events the two appliers take before an operation exists on the account (the
    // receiver's inline apply, the reconciler's sweep); validated above. Absent: none listed.
    const connectedAccounts = [...new Set(props.stripeConnectedAccounts ?? [])];
    const connectEnv: Record<string, string> = connectedAccounts.length > 0 ? { STRIPE_CONNECTED_ACCOUNTS: connectedAccounts.join(',') } : {};

    const migrations = new Migrations(this, 'Migrations', {
      ...placement,
      ...common,
      environment: { ...databaseEnv, ...tls, DB_APP_SECRET_ARN: this.applicationDatabaseSecret.secretArn },
      // The database, and the security-group rules that let the function reach it (the egress rule
      // lives on the functions' group): a first migration run before them would time out.
      after: [...databaseReady, network.functionsSecurityGroup],
    });
    this.migrations = migrations;
    this.migrateFunction = migrations.function;
    this.migrationTrigger = migrations.trigger;

    const charge = new ChargeFunction(this, 'Charge', {
      ...placement,
      ...common,
      queue: this.queue,
      environment: pipelineEnv,
      maxConcurrency: props.chargeMaxConcurrency ?? d.chargeMaxConcurrency,
      stripeConcurrency: props.chargeStripeConcurrency ?? d.chargeStripeConcurrency,
      reservedConcurrency: reserved(props.chargeReservedConcurrency, props.chargeMaxConcurrency ?? d.chargeMaxConcurrency),
      timeout: chargeTimeout,
    });
    this.chargeFunction = charge.function;
    this.chargeEventSourceMapping = charge.eventSourceMapping;

    const reconciler = new Reconciler(this, 'Reconciler', {
      ...placement,
      ...common,
      environment: { ...pipelineEnv, ...connectEnv, ...retentionEnvironment(props.retention) },
      schedule: props.reconcileSchedule ?? scheduler.ScheduleExpression.expression(PIPELINE.reconcileSchedule),
      maxRps: props.reconcileMaxRps ?? d.reconcileMaxRps,
      searchMaxRps: props.reconcileSearchMaxRps ?? d.reconcileSearchMaxRps,
      concurrency: props.reconcileConcurrency ?? d.reconcileConcurrency,
      timeout: cdk.Duration.seconds(PIPELINE.reconcileFunctionTimeoutSeconds),
    });
    this.reconcileFunction = reconciler.function;
    this.reconcileSchedule = reconciler.schedule;

    const ops = new OpsFunction(this, 'Ops', {
      ...placement,
      ...common,
      // Who may write through it (lambdas/ops/identity.ts): verified with STS, then looked up here.
      environment: { ...pipelineEnv, OPS_OPERATOR_ARNS: operatorArns(this, props.operatorRole, props.operatorPrincipals).join(',') },
      operatorRole: props.operatorRole,
      timeout: cdk.Duration.seconds(d.opsFunctionTimeoutSeconds),
      reservedConcurrency: props.opsReservedConcurrency,
    });
    this.opsFunction = ops.function;

    const stripeEventsInput = props.stripeEvents ?? 'webhook';
    if (stripeEventsInput !== 'none') {
      this.stripeEvents = new StripeEvents(this, 'StripeEvents', {
        ...placement,
        ...common,
        input: stripeEventsInput,
        environment: { ...pipelineEnv, ...connectEnv },
        applicationDatabaseSecret: this.applicationDatabaseSecret,
        stripeSecret: this.stripeSecret,
        grantPutEvents: (grantee) => outcomes.grantPutEvents(grantee),
        webhookSecret: props.stripeWebhookSecret,
        partnerEventBusName: props.stripePartnerEventBusName,
        reservedConcurrency: reserved(props.stripeEventsReservedConcurrency, d.stripeEventsReservedConcurrency),
        operatorRole: props.operatorRole,
      });
    }

    // Least privilege: migrate reads the owner's secret and the application secret (to set the
    // role's password); the others read the application secret only, and publish to this bus only.
    this.databaseSecret.grantRead(this.migrateFunction);
    this.applicationDatabaseSecret.grantRead(this.migrateFunction);
    for (const fn of [this.chargeFunction, this.reconcileFunction, this.opsFunction]) {
      this.applicationDatabaseSecret.grantRead(fn);
      this.stripeSecret.grantRead(fn);
      outcomes.grantPutEvents(fn);
    }

    if (props.tracing) {
      for (const fn of [charge.function, reconciler.function, ops.function, migrations.function, ...(this.stripeEvents ? [this.stripeEvents.function] : [])]) enableTracing(fn);
    }

    // Resource policies (lib/perimeter.ts): the identity grants above are the only way in.
    const pipelineRoles = [charge.function, reconciler.function, ops.function, ...(this.stripeEvents ? [this.stripeEvents.function] : [])].map((fn) => fn.role!);
    this.#perimeter = new Perimeter(this, 'Perimeter', {
      stripeSecret: this.stripeSecret,
      stripeKeyReaders: pipelineRoles,
      webhookSecret: this.stripeEvents?.webhookSecret,
      webhookSecretReaders: this.stripeEvents ? [this.stripeEvents.function.role!] : [],
      queue: this.queue,
      senders: [charge.function.role!.roleArn, ...(props.operatorRole ? [props.operatorRole.roleArn] : []), ...(props.producerRoles ?? []).map((r) => r.roleArn)],
      eventBus: outcomes.eventBus,
      publishers: pipelineRoles,
    });

    // Nothing takes traffic before the schema is there: on the first deploy the event source
    // mapping and the schedule are created only after the migrations succeeded; on later deploys
    // the functions' new code lands only after the new migrations ran (expand first, then code).
    // The secret rotations start only once the role exists and has its password.
    migrations.runBefore(
      charge.eventSourceMapping,
      reconciler.schedule,
      charge.function,
      reconciler.function,
      ops.function,
      ...(this.stripeEvents ? [this.stripeEvents.function] : []),
      ...rotations,
    );

    const observability = new Observability(this, 'Observability', {
      metrics: this.metrics,
      queue: this.queue,
      deadLetterQueue: this.deadLetterQueue,
      chargeFunction: this.chargeFunction,
      reconcileFunction: this.reconcileFunction,
      databaseInstanceIdentifier,
      ownsDatabase: this.databaseConstruct !== undefined,
      rotationFunctionNames: rotationFunctionNames(this.databaseConstruct),
      exampleConsumerDeadLetterQueue: outcomes.exampleConsumerDeadLetterQueue,
      databaseConnectionsThreshold: props.databaseConnectionsAlarmThreshold ?? d.databaseConnectionsAlarmThreshold,
      authorizationsExpiringThreshold: props.authorizationsExpiringAlarmThreshold ?? d.authorizationsExpiringAlarmThreshold,
      eventBus: this.eventBus,
      exampleConsumerRule: outcomes.exampleConsumerRule,
      alarmTopic: props.alarmTopic,
      alarmEmail: props.alarmEmail,
      alarmNamePrefix: props.alarmNamePrefix ?? `${this.pipelineName}-`,
      oldestMessageAgeThreshold:
        props.oldestMessageAgeAlarmThreshold ?? cdk.Duration.minutes(d.oldestMessageAgeAlarmMinutes),
      oldestOpenOperationAgeThreshold:
        props.oldestOpenOperationAgeAlarmThreshold ?? cdk.Duration.minutes(d.oldestOpenOperationAgeAlarmMinutes),
      oldestUnpublishedEventAgeThreshold:
        props.oldestUnpublishedEventAgeAlarmThreshold ?? cdk.Duration.minutes(d.oldestUnpublishedEventAgeAlarmMinutes),
      dashboardName: props.dashboardName,
      removalPolicy,
      stripeEvents: this.stripeEvents
        ? {
            function: this.stripeEvents.function,
            oldestEventAgeThreshold: props.oldestStripeEventAgeAlarmThreshold ?? cdk.Duration.minutes(d.oldestStripeEventAgeAlarmMinutes),
            silenceThreshold: props.stripeEventsSilenceAlarmThreshold ?? cdk.Duration.minutes(d.stripeEventsSilenceAlarmMinutes),
            webhookRejectedPerFiveMinutes: props.stripeWebhookRejectedAlarmThreshold ?? d.stripeWebhookRejectedAlarmThreshold,
            partnerEventFailureQueue: this.stripeEvents.deadLetterQueue,
          }
        : undefined,
    });
    this.alarmTopic = observability.alarmTopic;
    this.alarms = observability.alarms;
    this.dashboard = observability.dashboard;
  }

  /**
   * An outcome consumer's own login on the pipeline's database, instead of the owner's: the role
   * may connect, create schemas and use what it creates (its migrations run as itself), and nothing
   * of the pipeline's tables. Its secret is generated, attached and rotated like the application
   * role's (not rotated with existingDatabase, as that one); the migrate function creates the role,
   * hands it its schemas and sets the password on every run (DB_CONSUMER_LOGINS). Create or update
   * the consumer's function only after that: `pipeline.migrationTrigger.executeBefore(fn)`.
   */
  addConsumerDatabaseLogin(id: string, options: ConsumerDatabaseLoginOptions): ConsumerDatabaseLogin {
    const problems: string[] = [];
    const { role, schemas } = options;
    if (!SQL_IDENTIFIER.test(role)) problems.push(`role must be a lowercase identifier (${SQL_IDENTIFIER}), got '${role}'`);
    if (role === PIPELINE.applicationRole || role === this.applicationRole || role === DATABASE_USER) problems.push(`role '${role}' is the pipeline's own; give the consumer a role of its own`);
    if (this.#consumerLogins.some((l) => l.role === role)) problems.push(`role '${role}' has a login already`);
    if (schemas.length === 0) problems.push('schemas must name at least one schema (those its migrations create)');
    for (const schema of schemas) {
      if (!isConsumerSchemaName(schema)) problems.push(`schema must be a lowercase identifier other than public and pg_*, got '${schema}'`);
      const holder = this.#consumerLogins.find((l) => l.schemas.includes(schema));
      if (holder) problems.push(`schema '${schema}' belongs to the login of '${holder.role}' already: two consumers never share a schema`);
    }
    if (problems.length > 0) throw new PipelineValidationError(`consumer database login (${id})`, problems, this);

    let secret: secretsmanager.ISecret;
    if (this.databaseConstruct) {
      const login = this.databaseConstruct.addLogin(`Consumer${id}`, role);
      secret = login.secret;
      this.migrationTrigger.executeAfter(...login.ready);
      this.migrations.runBefore(...login.rotations);
    } else {
      secret = this.createLoginSecret(`Consumer${id}DatabaseSecret`, role, `the outcome consumer role`);
    }
    secret.grantRead(this.migrateFunction);
    const login: ConsumerDatabaseLogin = { role, schemas: [...schemas], secret, environment: { ...this.endpointEnvironment } };
    if (this.#consumerLogins.length === 0) {
      // Resolved at synth, so every login added before then is in it.
      const stack = cdk.Stack.of(this);
      this.migrations.function.addEnvironment(
        'DB_CONSUMER_LOGINS',
        cdk.Lazy.string({ produce: () => stack.toJsonString(this.#consumerLogins.map((l) => ({ secretArn: l.secret.secretArn, schemas: l.schemas }))) }),
      );
    }
    this.#consumerLogins.push(login);
    return login;
  }

  /** A login's secret for a database the construct did not create (no host: DB_HOST has it). */
  private createLoginSecret(id: string, role: string, what: string): secretsmanager.Secret {
    const secret = new secretsmanager.Secret(this, id, {
      description: `Charge pipeline: ${what} (${role}) password; the migrate function sets it on the role`,
      generateSecretString: {
        secretStringTemplate: JSON.stringify({ username: role }),
        generateStringKey: 'password',
        passwordLength: 32,
        excludePunctuation: true,
      },
      removalPolicy: this.removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    });
    designFinding(secret, {
      id: 'AwsSolutions-SMG4',
      reason:
        'The database is not the construct\'s, so no rotation target is known; the migrate function re-applies this secret\'s password on every run, so rotating it is: put a new password, then invoke the migrate function.',
    });
    return secret;
  }

  private createStripeSecret(removalPolicy: cdk.RemovalPolicy): secretsmanager.Secret {
    const secret = new secretsmanager.Secret(this, 'StripeSecret', {
      description:
        'Stripe secret API key for the charge pipeline: put the key as the SecretString (or JSON {"apiKey": "..."})',
      // Created empty: the functions refuse to call Stripe ("the Stripe secret is empty") until an
      // operator puts the key; the key itself never passes through the template.
      secretObjectValue: { apiKey: cdk.SecretValue.unsafePlainText('') },
      // A key of its own (rotated yearly): the key policy, not only the account's default key, guards it.
      encryptionKey: stripeSecretKey(this, removalPolicy),
      // Kept unless DESTROY: deleting it would make whoever redeploys hunt for the key again.
      removalPolicy: removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    });
    designFinding(secret, {
      id: 'AwsSolutions-SMG4',
      reason:
        'A Stripe key is rolled in the Stripe dashboard and then put here by an operator, so Secrets Manager has no rotation function to run.',
    });
    return secret;
  }

  /** Let a producer send charge requests (sqs:SendMessage on the intake queue). */
  grantSendChargeRequests(grantee: iam.IGrantable): iam.Grant {
    this.#perimeter.allowSender(principalArnOf(this, grantee, 'grantSendChargeRequests'));
    return this.queue.grantSendMessages(grantee);
  }

  /** Let a principal run operator commands (lambda:InvokeFunction on the ops function). */
  grantInvokeOps(grantee: iam.IGrantable): iam.Grant {
    return this.opsFunction.grantInvoke(grantee);
  }

  /** Let a principal put the Stripe key into the secret (e.g. a rotation job). */
  grantPutStripeKey(grantee: iam.IGrantable): iam.Grant {
    return this.stripeSecret.grantWrite(grantee);
  }

  /** Let a principal publish outcome events on the bus (a test harness, a replay tool). */
  grantPutOutcomeEvents(grantee: iam.IGrantable): iam.Grant {
    this.#perimeter.allowPublisher(principalArnOf(this, grantee, 'grantPutOutcomeEvents'));
    return this.eventBus.grantPutEventsTo(grantee);
  }

  /** Any metric this instance's functions publish (EMF; namespace and dimensions of `metrics`). */
  metric(metricName: PipelineMetricName, props?: cw.MetricOptions): cw.Metric {
    return pipelineMetric(this.metrics, metricName, props);
  }

  /** Operations waiting for a human (gauge, published by every sweep). */
  metricReviewQueueSize(props?: cw.MetricOptions): cw.Metric {
    return this.metric('ReviewQueueSize', { statistic: 'Maximum', ...props });
  }

  /** Age of the oldest open operation in seconds (gauge). */
  metricOldestOpenOperationAge(props?: cw.MetricOptions): cw.Metric {
    return this.metric('OldestOpenOperationAgeSeconds', { statistic: 'Maximum', ...props });
  }

  /** Age of the oldest unpublished outcome event in seconds (gauge). */
  metricOldestUnpublishedEventAge(props?: cw.MetricOptions): cw.Metric {
    return this.metric('OldestUnpublishedEventAgeSeconds', { statistic: 'Maximum', ...props });
  }

  /** Charges that succeeded (count). */
  metricChargeSucceeded(props?: cw.MetricOptions): cw.Metric {
    return this.metric('ChargeSucceeded', { statistic: 'Sum', ...props });
  }

  /** Charges that failed for good (count). */
  metricChargeFailed(props?: cw.MetricOptions): cw.Metric {
    return this.metric('ChargeFailed', { statistic: 'Sum', ...props });
  }

  /** Messages rejected as malformed or conflicting (count). */
  metricRejectedMessages(props?: cw.MetricOptions): cw.Metric {
    return this.metric('RejectedMessages', { statistic: 'Sum', ...props });
  }
}

/** X-Ray active tracing on a function, with the two actions it needs (which only work on Resource *). */
function enableTracing(fn: lambda.Function): void {
  (fn.node.defaultChild as lambda.CfnFunction).tracingConfig = { mode: lambda.Tracing.ACTIVE };
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['xray:PutTraceSegments', 'xray:PutTelemetryRecords'], resources: ['*'] }));
  const policy = fn.role?.node.tryFindChild('DefaultPolicy');
  if (policy) {
    designFinding(policy, {
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'X-Ray accepts trace segments and telemetry records on Resource * only (the actions have no resource type).',
    });
  }
}

/** The retention fields given, as the reconcile function's variables (unset ones keep its defaults). */
function retentionEnvironment(retention: RetentionProps | undefined): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [field, variable] of Object.entries(RETENTION_VARIABLES) as [keyof RetentionProps, string][]) {
    const value = retention?.[field];
    if (value !== undefined) env[variable] = String(value);
  }
  return env;
}
