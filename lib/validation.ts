// Props are checked before anything is built, and every problem is reported at once with the
// value that was given and the range that is allowed.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type { IConstruct } from 'constructs';
import { callBudgetProblem } from '../lambdas/payments/call-budget.ts';
import { RETENTION_DEFAULTS, RETENTION_LIMITS } from '../lambdas/payments/retention-store.ts';
import { ACCOUNT_ID } from '../lambdas/payments/types.ts';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { CHARGE_PIPELINE_DEFAULTS, type ChargePipelineProps } from './charge-pipeline-props.ts';
import { DATABASE_NAME_MAX_LENGTH } from './database.ts';
import { OPS_FUNCTION_CONCURRENCY } from './ops-function.ts';

/**
 * Props the construct refuses, every problem at once. A CDK ValidationError (cdk.Errors.isValidationError
 * is true; the CLI shows the construct's path with it), so tools that tell a user's mistake from a
 * construct's bug treat it as the former. It extends the class aws-cdk-lib's own constructs throw,
 * which its typings mark internal: the public contract is Errors.isValidationError.
 */
export class PipelineValidationError extends cdk.ValidationError {
  readonly problems: readonly string[];

  constructor(what: string, problems: readonly string[], scope: IConstruct, name = 'PipelineValidationError') {
    super(name as unknown as ConstructorParameters<typeof cdk.ValidationError>[0], `Invalid ${what}:\n  - ${problems.join('\n  - ')}`, scope);
    // aws-cdk-lib's constructor sets the prototype to its own class: keep this one's (instanceof).
    Object.setPrototypeOf(this, new.target.prototype);
    this.problems = problems;
  }
}

export class ChargePipelinePropsError extends PipelineValidationError {
  constructor(problems: readonly string[], scope: IConstruct) {
    super('ChargePipeline props', problems, scope, 'ChargePipelinePropsError');
  }
}

export const LOG_LEVELS = ['DEBUG', 'INFO', 'WARN', 'ERROR'] as const;

/** Lambda's limits for an SQS event source's MaximumConcurrency. */
export const EVENT_SOURCE_MAX_CONCURRENCY = { min: 2, max: 1000 } as const;
/** Stripe's documented defaults (live mode): searches per second, requests per second per account. */
export const STRIPE_LIMITS = { searchPerSecond: 20, accountPerSecond: 100, paymentIntentCreatesPerSecond: 25 } as const;

/** CHARGE_SAFETY_MARGIN_MS and RECONCILE_SAFETY_MARGIN_MS as the stack deploys them (the handlers' defaults). */
const DEFAULT_SAFETY_MARGIN_MS = 5_000;

const EMAIL = /^[^@\s]+@[^@\s]+\.[^@\s]+$/;
const FIFO_QUEUE_NAME = /^[A-Za-z0-9_-]{1,75}\.fifo$/;
const EVENT_BUS_NAME = /^[A-Za-z0-9._\-/]{1,256}$/;

export function validateChargePipelineProps(props: ChargePipelineProps, scope: IConstruct): void {
  const problems: string[] = [];
  const check = (ok: boolean, message: string) => {
    if (!ok) problems.push(message);
  };
  const integerIn = (name: string, value: number | undefined, min: number, max: number, why = '') => {
    if (value === undefined || cdk.Token.isUnresolved(value)) return;
    check(
      Number.isInteger(value) && value >= min && value <= max,
      `${name} must be an integer from ${min} to ${max}${why}, got ${value}`,
    );
  };
  const numberIn = (name: string, value: number | undefined, minExclusive: number, max: number, why = '') => {
    if (value === undefined || cdk.Token.isUnresolved(value)) return;
    check(
      Number.isFinite(value) && value > minExclusive && value <= max,
      `${name} must be a number above ${minExclusive} and at most ${max}${why}, got ${value}`,
    );
  };
  const durationAtLeast = (name: string, value: cdk.Duration | undefined, min: cdk.Duration) => {
    if (value === undefined || value.isUnresolved()) return;
    check(value.toSeconds() >= min.toSeconds(), `${name} must be at least ${min.toHumanString()}, got ${value.toHumanString()}`);
  };
  const name = (label: string, value: string | undefined, pattern: RegExp, rule: string) => {
    if (value === undefined || cdk.Token.isUnresolved(value)) return;
    check(pattern.test(value), `${label} ${rule}, got '${value}'`);
  };

  check(
    props.profile === undefined || props.profile === 'production' || props.profile === 'dev',
    `profile must be 'production' or 'dev', got '${String(props.profile)}'`,
  );

  // network
  check(
    !(props.vpc && props.natGateways !== undefined),
    'natGateways applies to the VPC the construct creates; it cannot be combined with vpc',
  );
  integerIn('natGateways', props.natGateways, 1, 2, ' (the functions reach Stripe through NAT; the VPC spans 2 AZs)');

  integerIn('opsReservedConcurrency', props.opsReservedConcurrency, 1, 1000);

  // queue
  if (props.queueRetentionPeriod && !props.queueRetentionPeriod.isUnresolved()) {
    const seconds = props.queueRetentionPeriod.toSeconds();
    check(seconds >= 60 && seconds <= 14 * 86_400, `queueRetentionPeriod must be from 1 minute to 14 days (SQS's limits), got ${props.queueRetentionPeriod.toHumanString()}`);
  }

  // database
  integerIn('databaseAllocatedStorageGiB', props.databaseAllocatedStorageGiB, 20, 65536);
  integerIn('databaseMaxAllocatedStorageGiB', props.databaseMaxAllocatedStorageGiB, 20, 65536);
  if (
    props.databaseAllocatedStorageGiB !== undefined &&
    props.databaseMaxAllocatedStorageGiB !== undefined &&
    props.databaseMaxAllocatedStorageGiB < props.databaseAllocatedStorageGiB
  ) {
    problems.push(
      `databaseMaxAllocatedStorageGiB (${props.databaseMaxAllocatedStorageGiB}) must not be below databaseAllocatedStorageGiB (${props.databaseAllocatedStorageGiB})`,
    );
  }
  if (props.backupRetention && !props.backupRetention.isUnresolved()) {
    const days = props.backupRetention.toDays({ integral: false });
    check(
      Number.isInteger(days) && days >= 1 && days <= 35,
      `backupRetention must be a whole number of days from 1 to 35 (backups are not optional for a payments database), got ${props.backupRetention.toHumanString()}`,
    );
  }
  check(
    !(props.deletionProtection === true && props.removalPolicy === cdk.RemovalPolicy.DESTROY),
    'deletionProtection: true contradicts removalPolicy: DESTROY (the stack could never be deleted)',
  );
  integerIn('databasePoolMax', props.databasePoolMax, 1, 50);

  // queue
  name('queueName', props.queueName, FIFO_QUEUE_NAME, 'must be 1-75 letters, digits, - or _ followed by .fifo');
  name('deadLetterQueueName', props.deadLetterQueueName, FIFO_QUEUE_NAME, 'must be 1-75 letters, digits, - or _ followed by .fifo');
  check(
    props.queueName === undefined || props.queueName !== props.deadLetterQueueName,
    'queueName and deadLetterQueueName must differ',
  );
  integerIn('maxReceiveCount', props.maxReceiveCount, 1, 1000);

  // charge function
  integerIn(
    'chargeMaxConcurrency',
    props.chargeMaxConcurrency,
    EVENT_SOURCE_MAX_CONCURRENCY.min,
    EVENT_SOURCE_MAX_CONCURRENCY.max,
    " (Lambda's limits for an SQS event source's maximum concurrency)",
  );
  integerIn(
    'chargeStripeConcurrency',
    props.chargeStripeConcurrency,
    1,
    PIPELINE.batchSize,
    ` (a batch holds at most ${PIPELINE.batchSize} records)`,
  );

  problems.push(...concurrencyProblems(props));

  // Stripe calls: the worst-case call plus the handlers' default margin (5 s) must fit in each
  // calling function's timeout, or no call would ever start and every order would stay pending.
  integerIn('stripeMaxNetworkRetries', props.stripeMaxNetworkRetries, 0, 5);
  const stripeTimeout = props.stripeTimeout && !props.stripeTimeout.isUnresolved() ? props.stripeTimeout.toMilliseconds() : undefined;
  if (stripeTimeout !== undefined) check(stripeTimeout >= 100, `stripeTimeout must be at least 100 ms, got ${props.stripeTimeout!.toHumanString()}`);
  const retries = props.stripeMaxNetworkRetries;
  if ((stripeTimeout ?? 100) >= 100 && (retries === undefined || (Number.isInteger(retries) && retries >= 0 && retries <= 5))) {
    for (const [fn, seconds] of [['charge', PIPELINE.chargeFunctionTimeoutSeconds], ['reconcile', PIPELINE.reconcileFunctionTimeoutSeconds]] as const) {
      const problem = callBudgetProblem(fn, seconds * 1000, {
        ...(stripeTimeout !== undefined ? { timeoutMs: stripeTimeout } : {}),
        ...(retries !== undefined ? { maxNetworkRetries: retries } : {}),
        safetyMarginMs: DEFAULT_SAFETY_MARGIN_MS,
      });
      if (problem) problems.push(`stripeTimeout / stripeMaxNetworkRetries (deployed as STRIPE_TIMEOUT_MS / STRIPE_MAX_NETWORK_RETRIES): ${problem}`);
    }
  }

  problems.push(...connectedAccountsProblems(props.stripeConnectedAccounts));

  // reconciler
  numberIn(
    'reconcileMaxRps',
    props.reconcileMaxRps,
    0,
    STRIPE_LIMITS.accountPerSecond,
    ` (Stripe allows ${STRIPE_LIMITS.accountPerSecond} requests/s per live account by default)`,
  );
  numberIn(
    'reconcileSearchMaxRps',
    props.reconcileSearchMaxRps,
    0,
    STRIPE_LIMITS.searchPerSecond,
    ` (Stripe allows ${STRIPE_LIMITS.searchPerSecond} searches/s by default)`,
  );
  integerIn('reconcileConcurrency', props.reconcileConcurrency, 1, 100);
  // The reconcile function refuses the same at start (lambdas/runtime/config.ts); refused here first.
  const r = props.retention ?? {};
  const MAX_DAYS = 36_500;
  integerIn('retention.outboxDays', r.outboxDays, RETENTION_LIMITS.outboxDays, MAX_DAYS);
  integerIn('retention.stripeEventPayloadDays', r.stripeEventPayloadDays, RETENTION_LIMITS.stripeEventPayloadDays, MAX_DAYS, " (Stripe retries a delivery for up to three days, and a day's margin)");
  integerIn('retention.stripeEventDays', r.stripeEventDays, RETENTION_LIMITS.stripeEventDays, MAX_DAYS);
  integerIn('retention.rejectedBodyDays', r.rejectedBodyDays, RETENTION_LIMITS.rejectedBodyDays, MAX_DAYS);
  integerIn('retention.operatorReadDays', r.operatorReadDays, RETENTION_LIMITS.operatorReadDays, MAX_DAYS, ' (PCI DSS keeps audit log history for at least 12 months)');
  integerIn('retention.resolvedFindingDays', r.resolvedFindingDays, RETENTION_LIMITS.resolvedFindingDays, MAX_DAYS);
  integerIn('retention.batchSize', r.batchSize, 1, 10_000);
  integerIn('retention.maxBatchesPerRun', r.maxBatchesPerRun, 1, 100_000);
  const payloadDays = r.stripeEventPayloadDays ?? RETENTION_DEFAULTS.stripeEventPayloadDays;
  const eventDays = r.stripeEventDays ?? RETENTION_DEFAULTS.stripeEventDays;
  check(eventDays >= payloadDays, `retention.stripeEventDays (${eventDays}) must be at least retention.stripeEventPayloadDays (${payloadDays}): an event is reduced before it is deleted`);

  // outcome events
  name('eventBusName', props.eventBusName, EVENT_BUS_NAME, 'must be 1-256 letters, digits, . _ - or /');
  check(props.eventBusName !== 'default', "eventBusName must not be 'default': the pipeline owns its bus");
  if (props.eventSource !== undefined && !cdk.Token.isUnresolved(props.eventSource)) {
    check(props.eventSource.trim().length > 0, 'eventSource must not be empty');
    check(!props.eventSource.startsWith('aws.'), `eventSource must not start with 'aws.' (reserved), got '${props.eventSource}'`);
  }
  durationAtLeast('eventArchiveRetention', props.eventArchiveRetention, cdk.Duration.days(1));

  // observability
  if (props.alarmEmail !== undefined && !cdk.Token.isUnresolved(props.alarmEmail)) {
    check(EMAIL.test(props.alarmEmail), `alarmEmail must be an e-mail address, got '${props.alarmEmail}'`);
  }
  durationAtLeast('oldestMessageAgeAlarmThreshold', props.oldestMessageAgeAlarmThreshold, cdk.Duration.minutes(1));
  durationAtLeast('oldestOpenOperationAgeAlarmThreshold', props.oldestOpenOperationAgeAlarmThreshold, cdk.Duration.minutes(1));
  durationAtLeast(
    'oldestUnpublishedEventAgeAlarmThreshold',
    props.oldestUnpublishedEventAgeAlarmThreshold,
    cdk.Duration.minutes(1),
  );
  integerIn('stripeWebhookRejectedAlarmThreshold', props.stripeWebhookRejectedAlarmThreshold, 1, 1_000_000, ' (refused deliveries per 5 minutes)');
  integerIn('authorizationsExpiringAlarmThreshold', props.authorizationsExpiringAlarmThreshold, 0, 10_000_000, ' (authorizations within a day of expiring uncaptured)');
  if (props.logLevel !== undefined) {
    check(
      (LOG_LEVELS as readonly string[]).includes(props.logLevel),
      `logLevel must be one of ${LOG_LEVELS.join(', ')}, got '${props.logLevel}'`,
    );
  }

  problems.push(...embeddingProblems(props));

  if (problems.length > 0) throw new ChargePipelinePropsError(problems, scope);
}

/**
 * The deployed STRIPE_CONNECTED_ACCOUNTS is this list joined by commas: a Lambda function's
 * environment holds 4 KB in all, so the list is bounded well inside it.
 */
export const CONNECTED_ACCOUNTS_MAX_CHARACTERS = 2048;

/**
 * stripeConnectedAccounts: every entry an account id of the shape the functions accept at start
 * (lambdas/runtime/config.ts; ACCOUNT_ID), so a typo fails the synth instead of every function's start.
 */
export function connectedAccountsProblems(accounts: readonly string[] | undefined): string[] {
  if (accounts === undefined || cdk.Token.isUnresolved(accounts)) return [];
  const problems: string[] = [];
  accounts.forEach((account, i) => {
    if (typeof account === 'string' && cdk.Token.isUnresolved(account)) {
      problems.push(`stripeConnectedAccounts[${i}] is a token: the list is checked and deployed as written, so give the account ids themselves`);
    } else if (typeof account !== 'string' || !ACCOUNT_ID.test(account)) {
      problems.push(`stripeConnectedAccounts[${i}] must be a Stripe account id (acct_ and 1-64 letters or digits), got ${JSON.stringify(account)}`);
    }
  });
  const joined = accounts.join(',');
  if (problems.length === 0 && joined.length > CONNECTED_ACCOUNTS_MAX_CHARACTERS) {
    problems.push(`stripeConnectedAccounts deploys as STRIPE_CONNECTED_ACCOUNTS of ${joined.length} characters, more than ${CONNECTED_ACCOUNTS_MAX_CHARACTERS} (a function's environment holds 4 KB in all)`);
  }
  return problems;
}

/**
 * Reserved concurrency and the database's connections. The charge function's reservation must hold
 * the event source's maximum concurrency (an event source mapping does not count reserved
 * concurrency and is throttled above it: AWS Lambda Developer Guide, "Configuring scaling behavior
 * for SQS event source mappings"); everything that may connect at once must fit
 * databaseMaxConnections.
 */
function concurrencyProblems(props: ChargePipelineProps): string[] {
  const problems: string[] = [];
  const reservation = (name: string, value: unknown): number | 'unreserved' | undefined | null => {
    if (value === undefined || value === 'unreserved') return value;
    if (typeof value === 'number' && cdk.Token.isUnresolved(value)) return undefined;
    if (typeof value === 'number' && Number.isInteger(value) && value >= 1) return value;
    problems.push(`${name} must be a positive integer or 'unreserved', got ${JSON.stringify(value)}`);
    return null;
  };
  const charge = reservation('chargeReservedConcurrency', props.chargeReservedConcurrency);
  const stripeEvents = reservation('stripeEventsReservedConcurrency', props.stripeEventsReservedConcurrency);
  const maxConnections = props.databaseMaxConnections;
  if (maxConnections !== undefined && !cdk.Token.isUnresolved(maxConnections) && !(Number.isInteger(maxConnections) && maxConnections >= 1)) {
    problems.push(`databaseMaxConnections must be a positive integer, got ${maxConnections}`);
    return problems;
  }
  const d = CHARGE_PIPELINE_DEFAULTS;
  const maxConcurrency = props.chargeMaxConcurrency ?? d.chargeMaxConcurrency;
  const pool = props.databasePoolMax ?? d.databasePoolMax;
  // Out of their own bounds (reported above) or tokens: nothing to add up.
  const usable = (v: number, min: number, max: number) => !cdk.Token.isUnresolved(v) && Number.isInteger(v) && v >= min && v <= max;
  if (!usable(maxConcurrency, EVENT_SOURCE_MAX_CONCURRENCY.min, EVENT_SOURCE_MAX_CONCURRENCY.max) || !usable(pool, 1, 50)) return problems;
  if (typeof charge === 'number' && charge < maxConcurrency) {
    problems.push(
      `chargeReservedConcurrency (${charge}) must be at least chargeMaxConcurrency (${maxConcurrency}): the event source would be throttled above it; raise it, lower chargeMaxConcurrency, or set 'unreserved'`,
    );
  }
  const stripeEventsCount = props.stripeEvents === 'none' || stripeEvents === 'unreserved' || stripeEvents === null ? 0 : (stripeEvents ?? d.stripeEventsReservedConcurrency);
  const reconcile = 2; // a sweep every minute, up to 2 minutes long
  const budget = maxConnections ?? d.databaseMaxConnections;
  const worst = pool * (maxConcurrency + stripeEventsCount + reconcile + OPS_FUNCTION_CONCURRENCY) + 2;
  if (worst > budget) {
    problems.push(
      `the functions could hold ${worst} database connections, more than databaseMaxConnections (${budget}): databasePoolMax ${pool} × (chargeMaxConcurrency ${maxConcurrency} + stripeEventsReservedConcurrency ${stripeEventsCount} + reconcile ${reconcile} + ops ${OPS_FUNCTION_CONCURRENCY}) + 2 (migrate, a rotation); lower one of them, or raise databaseMaxConnections with the instance's max_connections`,
    );
  }
  return problems;
}

const PIPELINE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;
const METRICS_NAMESPACE = /^[A-Za-z0-9_.\-/#:]{1,255}$/;
const DATABASE_NAME = new RegExp(`^[a-z_][a-z0-9_]{0,${DATABASE_NAME_MAX_LENGTH - 1}}$`);
const RESERVED_DATABASES = ['postgres', 'rdsadmin', 'template0', 'template1'];

/** Props that build the database: meaningless (and so refused) with existingDatabase. */
const OWN_DATABASE_PROPS = [
  'databaseInstanceType',
  'multiAz',
  'databaseAllocatedStorageGiB',
  'databaseMaxAllocatedStorageGiB',
  'backupRetention',
  'deletionProtection',
  'databaseSubnets',
  'databaseSecret',
  'databaseSecretRotation',
] as const satisfies readonly (keyof ChargePipelineProps)[];

/**
 * Embedding in someone else's network and database: the names, and subnets that exist. A VPC that
 * lacks the subnets asked for fails here with what to pass, instead of deep in CDK.
 */
function embeddingProblems(props: ChargePipelineProps): string[] {
  const problems: string[] = [];
  if (props.pipelineName !== undefined && !cdk.Token.isUnresolved(props.pipelineName) && !PIPELINE_NAME.test(props.pipelineName)) {
    problems.push(`pipelineName must be 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit, got '${props.pipelineName}'`);
  }
  if (props.metricsNamespace !== undefined && !cdk.Token.isUnresolved(props.metricsNamespace)) {
    if (!METRICS_NAMESPACE.test(props.metricsNamespace) || props.metricsNamespace.startsWith('AWS/')) {
      problems.push(`metricsNamespace must be 1-255 of letters, digits and . - _ / # : and not start with 'AWS/', got '${props.metricsNamespace}'`);
    }
  }

  const existing = props.existingDatabase;
  if (existing) {
    for (const key of OWN_DATABASE_PROPS) {
      if (props[key] !== undefined) problems.push(`${key} configures the database the construct creates; it cannot be combined with existingDatabase`);
    }
    const name = existing.databaseName as string | undefined;
    if (name === undefined || name === '') {
      problems.push(
        "existingDatabase.databaseName is required: name this pipeline's own database on that server (the migrate function creates it if the owner login may); two pipelines on one server never share a database or a login",
      );
    } else if (cdk.Token.isUnresolved(name)) {
      problems.push("existingDatabase.databaseName must be a plain string, not a token: the application role's name (<databaseName>_app) is decided at synth");
    } else if (!DATABASE_NAME.test(name)) {
      problems.push(`existingDatabase.databaseName must be a PostgreSQL identifier (lowercase letters, digits, _) of at most ${DATABASE_NAME_MAX_LENGTH} characters, got '${name}'`);
    } else if (RESERVED_DATABASES.includes(name)) {
      problems.push(`existingDatabase.databaseName must be a database of the pipeline's own, not the server's '${name}'`);
    }
  }

  if (!props.vpc) {
    for (const key of ['functionSubnets', 'databaseSubnets', 'functionsSecurityGroup'] as const) {
      if (props[key] !== undefined) problems.push(`${key} refers to the VPC you bring; set vpc too (the VPC the construct creates has its own)`);
    }
    if (props.existingDatabase) problems.push('existingDatabase needs vpc: the VPC the database is reachable in');
    return problems;
  }
  const subnets = (
    label: string,
    selection: ec2.SubnetSelection,
    fix: string,
  ): ec2.SelectedSubnets | undefined => {
    try {
      return props.vpc!.selectSubnets(selection);
    } catch (error) {
      problems.push(`${label}: the vpc has no subnets matching ${describeSelection(selection)} (${firstLine(error)}); ${fix}`);
      return undefined;
    }
  };
  const functions = subnets(
    'functionSubnets',
    props.functionSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
    'pass functionSubnets selecting private subnets with a route to the internet (a NAT gateway): the functions call Stripe',
  );
  if (functions && functions.subnets.length === 0) problems.push('functionSubnets selects no subnet of the vpc');
  if (!existing) {
    const database = subnets(
      'databaseSubnets',
      props.databaseSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      'pass databaseSubnets selecting private subnets in at least two availability zones, or existingDatabase',
    );
    const zones = database?.availabilityZones.filter((zone) => !cdk.Token.isUnresolved(zone));
    if (database && zones && zones.length === database.availabilityZones.length && new Set(zones).size < 2) {
      problems.push(`databaseSubnets must span at least two availability zones (an RDS subnet group needs them), got ${new Set(zones).size}`);
    }
  }
  return problems;
}

function describeSelection(selection: ec2.SubnetSelection): string {
  if (selection.subnetType) return selection.subnetType;
  if (selection.subnetGroupName) return `subnet group '${selection.subnetGroupName}'`;
  if (selection.subnets) return `${selection.subnets.length} given subnets`;
  return 'the selection';
}

function firstLine(error: unknown): string {
  return String((error as Error).message ?? error).split('\n')[0]!;
}
