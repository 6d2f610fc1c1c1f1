// The default app's settings, read from CDK context: `-c key=value` on the command line wins over
// the environment's profile in cdk.json ("charge-pipeline:environments"), which wins over the
// construct's defaults. Values from the command line are strings; they are parsed and checked here,
// all at once, so a typo in a deploy command fails before anything is synthesized.

import { ACCOUNT_ID } from '../lambdas/payments/types.ts';

export const ENVIRONMENTS_CONTEXT_KEY = 'charge-pipeline:environments';
export const DEFAULT_ENVIRONMENT = 'dev';

export type RemovalPolicyName = 'retain' | 'snapshot' | 'destroy';

export interface DeploymentSettings {
  /** Names the stack (ChargePipeline-<environment>) and prefixes the queue and bus names. */
  readonly environment: string;
  readonly alarmEmail?: string;
  /** The construct's profile: 'production' (Multi-AZ, a NAT gateway per AZ) or 'dev' (neither). */
  readonly profile?: 'production' | 'dev';
  readonly natGateways?: number;
  /** e.g. t4g.micro (a leading "db." is accepted). */
  readonly dbInstanceClass?: string;
  readonly multiAz?: boolean;
  /** Complete ARN of an existing secret holding the Stripe key. */
  readonly stripeSecretArn?: string;
  readonly chargeMaxConcurrency?: number;
  readonly chargeStripeConcurrency?: number;
  readonly reconcileMaxRps?: number;
  readonly reconcileSearchMaxRps?: number;
  readonly reconcileConcurrency?: number;
  readonly databasePoolMax?: number;
  /** Reserved concurrency of the charge function, or 'unreserved'. */
  readonly chargeReservedConcurrency?: number | 'unreserved';
  /** Reserved concurrency of the Stripe-events function, or 'unreserved'. */
  readonly stripeEventsReservedConcurrency?: number | 'unreserved';
  /** The connections the pipeline may hold on the database at most. */
  readonly databaseMaxConnections?: number;
  /** The role operators assume to invoke the ops function. */
  readonly opsRoleArn?: string;
  /** Reserved concurrency of the ops function (the account needs 100 unreserved beside it). */
  readonly opsReservedConcurrency?: number;
  /** Roles that may send charge requests (the intake queue's policy denies everyone else). */
  readonly producerRoleArns?: readonly string[];
  /** Connected accounts whose Stripe events are taken before an operation exists on them (comma-separated acct_… ids). */
  readonly stripeConnectedAccounts?: readonly string[];
  readonly removalPolicy?: RemovalPolicyName;
  readonly deletionProtection?: boolean;
  readonly logLevel?: string;
}

export class DeploymentSettingsError extends Error {
  override readonly name = 'DeploymentSettingsError';
  readonly problems: readonly string[];

  constructor(problems: readonly string[]) {
    super(`Invalid deployment settings (CDK context):\n  - ${problems.join('\n  - ')}`);
    this.problems = problems;
  }
}

type Kind = 'string' | 'integer' | 'number' | 'boolean' | 'reservation';

const KEYS = {
  alarmEmail: 'string',
  profile: 'string',
  natGateways: 'integer',
  dbInstanceClass: 'string',
  multiAz: 'boolean',
  stripeSecretArn: 'string',
  chargeMaxConcurrency: 'integer',
  chargeStripeConcurrency: 'integer',
  reconcileMaxRps: 'number',
  reconcileSearchMaxRps: 'number',
  reconcileConcurrency: 'integer',
  databasePoolMax: 'integer',
  chargeReservedConcurrency: 'reservation',
  stripeEventsReservedConcurrency: 'reservation',
  databaseMaxConnections: 'integer',
  opsRoleArn: 'string',
  opsReservedConcurrency: 'integer',
  producerRoleArns: 'string',
  stripeConnectedAccounts: 'string',
  removalPolicy: 'string',
  deletionProtection: 'boolean',
  logLevel: 'string',
} as const satisfies Record<string, Kind>;

export const SETTING_KEYS = Object.keys(KEYS) as (keyof typeof KEYS)[];

const ENVIRONMENT_NAME = /^[a-z][a-z0-9-]{0,15}$/;
const INSTANCE_CLASS = /^(db\.)?[a-z][a-z0-9-]*\.[a-z0-9]+$/;
const SECRET_COMPLETE_ARN = /^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$/;
const ROLE_ARN = /^arn:aws[a-z-]*:iam::\d{12}:role\/[A-Za-z0-9/_+=,.@-]+$/;
const REMOVAL_POLICIES: readonly RemovalPolicyName[] = ['retain', 'snapshot', 'destroy'];

export function settingsFromContext(tryGetContext: (key: string) => unknown): DeploymentSettings {
  const problems: string[] = [];
  const rawEnvironment = tryGetContext('environment') ?? DEFAULT_ENVIRONMENT;
  const environment = String(rawEnvironment);
  if (!ENVIRONMENT_NAME.test(environment)) {
    problems.push(`environment must be 1-16 lowercase letters, digits or '-', starting with a letter, got '${environment}'`);
  }

  const profiles = tryGetContext(ENVIRONMENTS_CONTEXT_KEY) ?? {};
  if (typeof profiles !== 'object' || profiles === null || Array.isArray(profiles)) {
    throw new DeploymentSettingsError([`${ENVIRONMENTS_CONTEXT_KEY} must be an object of environment profiles`]);
  }
  const profile: Record<string, unknown> = (profiles as Record<string, Record<string, unknown>>)[environment] ?? {};
  for (const key of Object.keys(profile)) {
    if (!(key in KEYS)) problems.push(`${ENVIRONMENTS_CONTEXT_KEY}.${environment} has an unknown setting '${key}'`);
  }

  const settings: Record<string, unknown> = { environment };
  for (const key of SETTING_KEYS) {
    const raw = tryGetContext(key) ?? profile[key];
    if (raw === undefined || raw === null || raw === '') continue;
    const parsed = parse(raw, KEYS[key]);
    if (parsed === undefined) {
      problems.push(`${key} must be ${article(KEYS[key])}, got '${String(raw)}'`);
      continue;
    }
    settings[key] = parsed;
  }

  const s = settings as { -readonly [K in keyof DeploymentSettings]: DeploymentSettings[K] };
  if (s.dbInstanceClass !== undefined) {
    if (INSTANCE_CLASS.test(s.dbInstanceClass)) s.dbInstanceClass = s.dbInstanceClass.replace(/^db\./, '');
    else problems.push(`dbInstanceClass must look like t4g.micro or db.r7g.large, got '${s.dbInstanceClass}'`);
  }
  if (s.stripeSecretArn !== undefined && !SECRET_COMPLETE_ARN.test(s.stripeSecretArn)) {
    problems.push(
      `stripeSecretArn must be the complete secret ARN, ending in the 6-character suffix Secrets Manager adds (aws secretsmanager describe-secret --secret-id <name> --query ARN), got '${s.stripeSecretArn}'`,
    );
  }
  if (s.opsRoleArn !== undefined && !ROLE_ARN.test(s.opsRoleArn)) {
    problems.push(`opsRoleArn must be an IAM role ARN (arn:aws:iam::<account>:role/<name>), got '${s.opsRoleArn}'`);
  }
  const producers = settings.producerRoleArns;
  if (typeof producers === 'string') {
    const arns = producers.split(',').map((a) => a.trim()).filter((a) => a !== '');
    const bad = arns.filter((a) => !ROLE_ARN.test(a));
    if (bad.length > 0) problems.push(`producerRoleArns must be comma-separated IAM role ARNs (arn:aws:iam::<account>:role/<name>), got '${bad.join("', '")}'`);
    s.producerRoleArns = arns;
  }
  const connected = settings.stripeConnectedAccounts;
  if (typeof connected === 'string') {
    const ids = connected.split(',').map((a) => a.trim()).filter((a) => a !== '');
    const bad = ids.filter((a) => !ACCOUNT_ID.test(a));
    if (bad.length > 0) problems.push(`stripeConnectedAccounts must be comma-separated Stripe account ids (acct_ and 1-64 letters or digits), got '${bad.join("', '")}'`);
    s.stripeConnectedAccounts = ids;
  }
  if (s.removalPolicy !== undefined) {
    const lower = s.removalPolicy.toLowerCase() as RemovalPolicyName;
    if (REMOVAL_POLICIES.includes(lower)) s.removalPolicy = lower;
    else problems.push(`removalPolicy must be one of ${REMOVAL_POLICIES.join(', ')}, got '${s.removalPolicy}'`);
  }
  if (s.logLevel !== undefined) s.logLevel = s.logLevel.toUpperCase();
  if (s.profile !== undefined && s.profile !== 'production' && s.profile !== 'dev') problems.push(`profile must be production or dev, got '${s.profile}'`);

  if (problems.length > 0) throw new DeploymentSettingsError(problems);
  return s as DeploymentSettings;
}

function parse(raw: unknown, kind: Kind): string | number | boolean | undefined {
  switch (kind) {
    case 'string':
      return typeof raw === 'string' ? raw.trim() : undefined;
    case 'boolean':
      if (raw === true || raw === 'true') return true;
      if (raw === false || raw === 'false') return false;
      return undefined;
    case 'reservation':
      if (raw === 'unreserved') return raw;
      return parse(raw, 'integer');
    case 'integer':
    case 'number': {
      const value = typeof raw === 'number' ? raw : typeof raw === 'string' && raw.trim() !== '' ? Number(raw) : NaN;
      if (!Number.isFinite(value)) return undefined;
      if (kind === 'integer' && !Number.isInteger(value)) return undefined;
      return value;
    }
  }
}

function article(kind: Kind): string {
  if (kind === 'reservation') return "an integer or 'unreserved'";
  return kind === 'integer' ? 'an integer' : kind === 'boolean' ? 'true or false' : `a ${kind}`;
}
