// What a ChargePipeline is built from: its props, the profiles and the defaults. Its own module so
// that the props' validation (validation.ts) reads them without importing the construct, which runs
// that validation first thing.
import type * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type * as scheduler from 'aws-cdk-lib/aws-scheduler';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type { PipelineLogLevel } from './pipeline-function.ts';
import type { StripeEventsInput } from './stripe-events.ts';

/**
 * What the defaults are for. 'production': a Multi-AZ database and a NAT gateway per AZ (the charge
 * path survives the loss of an AZ). 'dev': a single-AZ database and one NAT gateway, which gives up
 * both — when the database's AZ fails, charges wait (in the queue, up to its retention) until the
 * instance is restored from backup (minutes to hours, the last minutes of writes at risk); when the
 * NAT gateway's AZ fails, no function reaches Stripe or the AWS APIs — for about half the monthly
 * cost of the instance and one NAT gateway less (docs/deploy.md, "Profiles"). Props set explicitly
 * win over either profile.
 */
export type ChargePipelineProfile = 'production' | 'dev';

export const CHARGE_PIPELINE_PROFILES = {
  production: { multiAz: true, natGateways: 2 },
  dev: { multiAz: false, natGateways: 1 },
} as const satisfies Record<ChargePipelineProfile, { multiAz: boolean; natGateways: number }>;

export interface ChargePipelineProps {
  /** The defaults' purpose (ChargePipelineProfile). @default 'production' */
  readonly profile?: ChargePipelineProfile;

  // ── network ──────────────────────────────────────────────────────────────────────────────────
  /**
   * An existing VPC to deploy into. It needs PRIVATE_WITH_EGRESS subnets (the functions reach
   * Stripe through them) and PRIVATE_ISOLATED subnets (the database) in at least two AZs.
   * @default - a new VPC over 2 AZs: public, private-with-egress and isolated subnets, flow logs on
   */
  readonly vpc?: ec2.IVpc;
  /**
   * NAT gateways of the new VPC: 2 (one per AZ) keeps Stripe and the AWS APIs reachable when one AZ
   * fails; 1 is cheaper. Not allowed together with `vpc`.
   * @default 2 (profile 'dev': 1)
   */
  readonly natGateways?: number;
  /** The functions' subnets (they need a route to Stripe on the internet). @default PRIVATE_WITH_EGRESS subnets */
  readonly functionSubnets?: ec2.SubnetSelection;
  /** The database's subnets, in at least two AZs. Not with existingDatabase. @default PRIVATE_ISOLATED subnets */
  readonly databaseSubnets?: ec2.SubnetSelection;
  /**
   * The functions' security group. The construct adds its egress rules (HTTPS, PostgreSQL to the
   * database), so it must be mutable.
   * @default - a new group with no other egress
   */
  readonly functionsSecurityGroup?: ec2.ISecurityGroup;
  /**
   * Where the functions may open HTTPS (443) connections: Stripe's API, and the AWS APIs they call
   * (Secrets Manager, EventBridge, STS). Security groups cannot name a host, and api.stripe.com has
   * no small fixed address set, so the default is anywhere; a platform team that keeps a prefix list
   * of Stripe's API addresses and interface endpoints for the AWS APIs narrows it here
   * (docs/deploy.md, "Egress").
   * @default [ec2.Peer.anyIpv4()]
   */
  readonly functionsHttpsEgress?: readonly ec2.IPeer[];

  // ── database ─────────────────────────────────────────────────────────────────────────────────
  /** @default t4g.micro (db.t4g.micro) */
  readonly databaseInstanceType?: ec2.InstanceType;
  /** A standby in a second AZ with automatic failover (doubles the instance price). @default true (profile 'dev': false) */
  readonly multiAz?: boolean;
  /** @default 20 */
  readonly databaseAllocatedStorageGiB?: number;
  /** Storage autoscaling ceiling. @default 100 */
  readonly databaseMaxAllocatedStorageGiB?: number;
  /** Automated backups (point-in-time recovery window), 1 to 35 days. @default Duration.days(7) */
  readonly backupRetention?: cdk.Duration;
  /**
   * What happens to stateful resources when the stack is deleted or they leave it.
   * RETAIN keeps everything; SNAPSHOT takes a final database snapshot and keeps the database secret
   * and the log groups; DESTROY deletes everything.
   * @default RemovalPolicy.SNAPSHOT
   */
  readonly removalPolicy?: cdk.RemovalPolicy;
  /** Refuse to delete the database instance. @default true, unless removalPolicy is DESTROY */
  readonly deletionProtection?: boolean;
  /** Connections per function container (DB_POOL_MAX). @default 2 */
  readonly databasePoolMax?: number;
  /**
   * The owner credentials of the database the construct creates (JSON with username and password),
   * instead of generated ones. Not with existingDatabase.
   * @default - generated into a new secret
   */
  readonly databaseSecret?: secretsmanager.ISecret;
  /** Rotation interval of the database secrets the construct creates (owner and application role). @default Duration.days(30) */
  readonly databaseSecretRotation?: cdk.Duration;
  /**
   * Use this database (an instance, a cluster's writer or an RDS Proxy endpoint) instead of creating
   * one. The construct then creates no database, no owner secret and no rotation; the migrate
   * function creates the application role in it.
   * @default - a new RDS PostgreSQL instance
   */
  readonly existingDatabase?: ExistingDatabase;
  /** DatabaseConnectionsHigh fires above this many connections. @default 80 (of about 110 on db.t4g.micro) */
  readonly databaseConnectionsAlarmThreshold?: number;
  /**
   * AuthorizationsExpiring fires when more than this many manual-capture authorizations are within a
   * day of expiring at Stripe with no capture or cancel (money the merchant loses unless captured).
   * @default 10
   */
  readonly authorizationsExpiringAlarmThreshold?: number;

  // ── Stripe ───────────────────────────────────────────────────────────────────────────────────
  /**
   * The Secrets Manager secret holding the Stripe secret key: the key as SecretString, or JSON
   * `{"apiKey": "sk_…"}`. A secret encrypted with a customer managed key also needs kms:Decrypt
   * for the functions' roles (grant it on the key).
   * @default - a new secret holding `{"apiKey": ""}`; operators put the key (see docs/deploy.md)
   */
  readonly stripeSecret?: secretsmanager.ISecret;

  // ── queue ────────────────────────────────────────────────────────────────────────────────────
  /** @default PIPELINE.queueName ('charge-requests.fifo') */
  readonly queueName?: string;
  /** @default PIPELINE.dlqName ('charge-requests-dlq.fifo') */
  readonly deadLetterQueueName?: string;
  /** Receives before a record that could not be made durable goes to the DLQ. @default PIPELINE.maxReceiveCount (5) */
  readonly maxReceiveCount?: number;
  /**
   * How long the intake queue keeps a charge request no function received (an outage, the event
   * source turned off) before SQS drops it: 1 minute to 14 days. The DLQ keeps parked requests
   * 14 days. @default Duration.days(4)
   */
  readonly queueRetentionPeriod?: cdk.Duration;
  /**
   * The roles that may send charge requests: the intake queue's policy denies sqs:SendMessage to
   * every other principal (each still needs its own grant: grantSendChargeRequests adds both).
   * @default - none: only grantSendChargeRequests' grantees and the operator role (for a DLQ redrive)
   */
  readonly producerRoles?: readonly iam.IRole[];

  // ── charge function ──────────────────────────────────────────────────────────────────────────
  /**
   * Maximum concurrent charge invocations (event source ScalingConfig.MaximumConcurrency, 2-1000).
   * Stripe calls in flight ≤ chargeMaxConcurrency × chargeStripeConcurrency; database connections
   * ≈ chargeMaxConcurrency × databasePoolMax. See docs/deploy.md, "How to scale it".
   * @default 5
   */
  readonly chargeMaxConcurrency?: number;
  /**
   * Reserved concurrency of the charge function: account concurrency no other function (a retry
   * burst, a flood on the webhook URL) can take from the charge path. At least chargeMaxConcurrency
   * (an event source does not count reserved concurrency: below it, its invocations are throttled).
   * 'unreserved' for an account whose concurrency limit leaves nothing to reserve (Lambda keeps 100
   * of the account's concurrency unreserved; a new account may have a limit of 10).
   * @default chargeMaxConcurrency
   */
  readonly chargeReservedConcurrency?: number | 'unreserved';
  /**
   * The connections this pipeline may hold on the database at most: its share of max_connections.
   * Refused at synth when the functions could open more: databasePoolMax × (chargeMaxConcurrency +
   * the Stripe-events function's reserved concurrency + 2 reconcile + the ops function's) + 2
   * (migrate, a rotation). An unreserved Stripe-events function has no bound, and is not counted.
   * @default 80 (about 110 fit the default db.t4g.micro; leave room for operators and other clients)
   */
  readonly databaseMaxConnections?: number;
  /** Stripe calls in flight per charge invocation (CHARGE_CONCURRENCY), 1 to the batch size (10). @default 2 */
  readonly chargeStripeConcurrency?: number;
  /**
   * Per-attempt timeout of a Stripe call (STRIPE_TIMEOUT_MS of the charge, reconcile and ops
   * functions). Refused when the worst-case call (timeout × (retries + 2) + the SDK's backoff) plus
   * the 5 s safety margin does not fit in the charge (60 s) or reconcile (120 s) function timeout:
   * no call could ever start. @default Duration.seconds(10)
   */
  readonly stripeTimeout?: cdk.Duration;
  /** Retries inside one Stripe SDK call (STRIPE_MAX_NETWORK_RETRIES), 0-5. @default 1 */
  readonly stripeMaxNetworkRetries?: number;

  // ── reconciler ───────────────────────────────────────────────────────────────────────────────
  /** @default PIPELINE.reconcileSchedule (rate(1 minute)) */
  readonly reconcileSchedule?: scheduler.ScheduleExpression;
  /** Stripe requests per second one sweep may make (RECONCILE_MAX_RPS). @default 5 */
  readonly reconcileMaxRps?: number;
  /** Stripe Search requests per second one sweep may make (RECONCILE_SEARCH_MAX_RPS), ≤ 20. @default 2 */
  readonly reconcileSearchMaxRps?: number;
  /** Operations a sweep works on at once (RECONCILE_CONCURRENCY). @default 4 */
  readonly reconcileConcurrency?: number;
  /**
   * The reconcile run's retention phase (docs/operations.md "Retention"): days each kind of row is
   * kept, and how much one run may remove. Unset fields keep the function's defaults.
   * @default outbox 30 days, Stripe event payloads 4, Stripe events 30, rejected bodies 14; batches of 1000, 200 a run
   */
  readonly retention?: RetentionProps;

  // ── outcome events ───────────────────────────────────────────────────────────────────────────
  /** @default PIPELINE.eventBusName ('charge-outcomes') */
  readonly eventBusName?: string;
  /** The `source` of every outcome event. @default PIPELINE.eventSource ('payments.charges') */
  readonly eventSource?: string;
  /** How long the bus archive keeps events for replay. @default Duration.days(30) */
  readonly eventArchiveRetention?: cdk.Duration;
  /**
   * Create the example consumer (a rule delivering every outcome to an SQS queue nobody reads, to
   * look at events by hand). Off by default: in production it fills a queue for 4 days and costs a rule.
   * @default false
   */
  readonly exampleConsumer?: boolean;

  // ── Stripe events in (lib/stripe-events.ts) ───────────────────────────────────────────────────
  /**
   * How Stripe's events reach the inbox: 'webhook' (a Lambda Function URL; register it in the
   * Dashboard), 'eventbridge' (a rule on Stripe's partner event bus, `stripePartnerEventBusName`) or
   * 'none' (polling only: the reconciler retrieves open operations on its backoff).
   * @default 'webhook'
   */
  readonly stripeEvents?: StripeEventsInput;
  /** eventbridge: the partner event bus (= the partner event source name, aws.partner/stripe.com/…). */
  readonly stripePartnerEventBusName?: string;
  /** webhook: the endpoint signing secret. @default - a new secret created empty (operators paste the whsec_…) */
  readonly stripeWebhookSecret?: secretsmanager.ISecret;
  /**
   * Reserved (and so maximum) concurrency of the Stripe-events function: behind an anonymous
   * Function URL, a flood of requests (or a burst of Stripe's retries) must take neither the
   * account's concurrency nor the database's connections from the charge path; Stripe retries a
   * delivery a throttle (429) turned away, and Lambda an asynchronous partner event.
   * 'unreserved' drops the cap (and the connection bound). @default 10
   */
  readonly stripeEventsReservedConcurrency?: number | 'unreserved';
  /**
   * Stripe Connect: connected accounts (acct_…) whose Stripe events are taken before the pipeline has
   * an operation on them — STRIPE_CONNECTED_ACCOUNTS of the Stripe-events and reconcile functions
   * (the receiver's inline apply and the sweep's). An account the pipeline has an operation on is
   * taken without being listed; an event is still applied only to an operation of its own account
   * (docs/model.md#connected-accounts). Each id is checked at synth (acct_ and 1-64 letters or
   * digits, lambdas/payments/types.ts ACCOUNT_ID), as the functions check it at start.
   * @default - none: only the accounts the pipeline has operations on
   */
  readonly stripeConnectedAccounts?: readonly string[];
  /**
   * StripeWebhookRejected fires when more than this many deliveries are refused in each of two
   * 5-minute periods: anyone can POST to the URL, so one refusal is no page. @default 10
   */
  readonly stripeWebhookRejectedAlarmThreshold?: number;
  /** StripeEventBacklogTooOld fires above this. @default Duration.minutes(10) */
  readonly oldestStripeEventAgeAlarmThreshold?: cdk.Duration;
  /**
   * StripeEventsNotArriving fires when operations have reached Stripe for longer than this with no
   * Stripe event arriving since. @default Duration.minutes(15)
   */
  readonly stripeEventsSilenceAlarmThreshold?: cdk.Duration;

  // ── operators ────────────────────────────────────────────────────────────────────────────────
  /**
   * The role on-call people assume to run operator commands; the only principal the ops function's
   * resource policy allows to invoke it.
   * @default - no resource-based permission: only principals whose own IAM policies allow
   *   lambda:InvokeFunction on it (administrators) can invoke it
   */
  readonly operatorRole?: iam.IRole;
  /**
   * Who may write (and read raw bodies) through the ops function, besides `operatorRole`: IAM role
   * ARNs (any session of the role), role-session ARNs (arn:aws:sts::…:assumed-role/<role>/<session>)
   * or IAM user ARNs. The function verifies each caller with STS; reads stay open to any principal
   * allowed to invoke it (docs/operations.md).
   * @default - the operator role only; none without one (then no write goes through the function)
   */
  readonly operatorPrincipals?: readonly string[];
  /**
   * Reserved (and so maximum) concurrency of the ops function: 2 (OPS_FUNCTION_CONCURRENCY) keeps an
   * operator's loop from taking the charge path's database connections. Lambda refuses a reservation
   * that leaves the account fewer than 100 unreserved executions, so a new or small account (a limit
   * of 10) cannot deploy one. @default - unreserved (the default app's prod profile: 2)
   */
  readonly opsReservedConcurrency?: number;

  // ── observability ────────────────────────────────────────────────────────────────────────────
  /** Subscribe this address to the alarm topic (the recipient confirms by e-mail). @default - no subscription */
  readonly alarmEmail?: string;
  /** Send alarms to this topic instead of a new one. @default - a new topic encrypted with a new KMS key */
  readonly alarmTopic?: sns.ITopic;
  /**
   * This instance's name: the `pipeline` dimension of every metric its functions publish (so that
   * two pipelines in one account and region never read each other's metrics) and the default alarm
   * name prefix. 1-64 letters, digits, '-', '_' or '.'.
   * @default - unique per construct instance: its stack name and construct path, with a hash
   */
  readonly pipelineName?: string;
  /** CloudWatch namespace of the functions' metrics. @default PIPELINE.metricsNamespace ('ChargePipeline') */
  readonly metricsNamespace?: string;
  /** Prefix of every CloudWatch alarm name. @default `${pipelineName}-` */
  readonly alarmNamePrefix?: string;
  /** OldestMessageTooOld fires above this. @default Duration.minutes(10) */
  readonly oldestMessageAgeAlarmThreshold?: cdk.Duration;
  /** OldestOpenOperationTooOld fires above this. @default Duration.hours(1) */
  readonly oldestOpenOperationAgeAlarmThreshold?: cdk.Duration;
  /** OutcomeEventsNotPublished fires above this. @default Duration.minutes(5) */
  readonly oldestUnpublishedEventAgeAlarmThreshold?: cdk.Duration;
  /** @default - a name generated by CloudFormation */
  readonly dashboardName?: string;
  /**
   * AWS X-Ray active tracing on the pipeline's functions (Lambda's own segments: each invocation, its
   * duration and cold start; the functions' SDK and Stripe calls are not instrumented). The roles get
   * xray:PutTraceSegments and xray:PutTelemetryRecords. @default false
   */
  readonly tracing?: boolean;
  /** POWERTOOLS_LOG_LEVEL of every function. @default 'INFO' */
  readonly logLevel?: PipelineLogLevel;
  /** Retention of the functions', database's and flow logs' log groups. @default RetentionDays.THREE_MONTHS */
  readonly logRetention?: logs.RetentionDays;
}

/** A database the pipeline uses instead of creating one (ChargePipelineProps.existingDatabase). */
export interface ExistingDatabase {
  /** The endpoint the functions connect to (DB_HOST, DB_PORT): an instance, a cluster writer, an RDS Proxy. */
  readonly endpoint: rds.Endpoint;
  /**
   * Owner credentials, JSON with username and password (an RDS-generated secret fits): the migrate
   * function only. The owner must be able to create tables and a role (CREATEROLE).
   */
  readonly secret: secretsmanager.ISecret;
  /**
   * The pipeline's own database on that server (DB_NAME): required, so that a second pipeline on a
   * server never lands on the first one's tables. The migrate function creates it if the owner login
   * may (CREATEDB), or fails the deploy saying it must exist. Its application role is
   * `<databaseName>_app` (at most 59 characters, a lowercase identifier).
   */
  readonly databaseName: string;
  /**
   * The database's security groups: the construct allows the functions in on the endpoint's port,
   * with ingress rules it creates in its own stack (the database may live in another stack).
   * @default - none; the functions may reach the VPC's CIDR on that port and you allow them in yourself
   */
  readonly connections?: ec2.IConnectable;
  /**
   * DBInstanceIdentifier: the instance's connections, CPU and storage on this pipeline's dashboard.
   * No database alarm is built for it: the instance's owner (the pipeline or team that created it)
   * alarms on it, once. @default - no database on the dashboard
   */
  readonly instanceIdentifier?: string;
}

/** An outcome consumer's own login on the pipeline's database (ChargePipeline.addConsumerDatabaseLogin). */
export interface ConsumerDatabaseLoginOptions {
  /** The database role, and the secret's username: a lowercase identifier, not the application role or the owner. */
  readonly role: string;
  /**
   * The schemas its migrations create and it owns (kit: `outcome_consumer`; the notifier: `receipts`).
   * Two logins never share one; `public` (the pipeline's) is refused.
   */
  readonly schemas: readonly string[];
}

export interface ConsumerDatabaseLogin {
  readonly role: string;
  readonly schemas: readonly string[];
  /** JSON with username and password (and host, port, dbname when the construct made the database): the consumer's DB_SECRET_ARN. */
  readonly secret: secretsmanager.ISecret;
  /** What else the consumer's function needs to reach the database: DB_HOST, DB_PORT, DB_NAME with existingDatabase; else none. */
  readonly environment: Readonly<Record<string, string>>;
}

export const CHARGE_PIPELINE_DEFAULTS = {
  databaseInstanceType: 't4g.micro',
  databaseAllocatedStorageGiB: 20,
  databaseMaxAllocatedStorageGiB: 100,
  backupRetentionDays: 7,
  databasePoolMax: 2,
  chargeMaxConcurrency: 5,
  chargeStripeConcurrency: 2,
  reconcileMaxRps: 5,
  reconcileSearchMaxRps: 2,
  reconcileConcurrency: 4,
  eventArchiveRetentionDays: 30,
  oldestMessageAgeAlarmMinutes: 10,
  oldestOpenOperationAgeAlarmMinutes: 60,
  oldestUnpublishedEventAgeAlarmMinutes: 5,
  oldestStripeEventAgeAlarmMinutes: 10,
  stripeEventsSilenceAlarmMinutes: 15,
  logLevel: 'INFO',
  opsFunctionTimeoutSeconds: 60,
  databaseSecretRotationDays: 30,
  databaseConnectionsAlarmThreshold: 80,
  authorizationsExpiringAlarmThreshold: 10,
  stripeWebhookRejectedAlarmThreshold: 10,
  stripeEventsReservedConcurrency: 10,
  databaseMaxConnections: 80,
  queueRetentionDays: 4,
} as const;

/** The retention bounds the reconcile function is deployed with (each an environment variable of it). */
export interface RetentionProps {
  /** OUTBOX_RETENTION_DAYS, ≥ 2. */
  readonly outboxDays?: number;
  /** STRIPE_EVENT_PAYLOAD_RETENTION_DAYS, ≥ 4 (Stripe's three days of retries, and a day). */
  readonly stripeEventPayloadDays?: number;
  /** STRIPE_EVENT_RETENTION_DAYS, ≥ 5 and ≥ stripeEventPayloadDays. */
  readonly stripeEventDays?: number;
  /** REJECTED_BODY_RETENTION_DAYS, ≥ 2. */
  readonly rejectedBodyDays?: number;
  /** OPERATOR_READ_RETENTION_DAYS, ≥ 366 (PCI DSS keeps audit log history for at least 12 months). */
  readonly operatorReadDays?: number;
  /** RESOLVED_FINDING_RETENTION_DAYS, ≥ 30: days after its resolution (an open finding is never removed). */
  readonly resolvedFindingDays?: number;
  /** RETENTION_BATCH_SIZE, 1-10000. */
  readonly batchSize?: number;
  /** RETENTION_MAX_BATCHES, 1-100000. */
  readonly maxBatchesPerRun?: number;
}
