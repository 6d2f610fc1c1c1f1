// Configuration from the environment (docs/configuration.md): DATABASE_URL / STRIPE_SECRET_KEY locally,
// Secrets Manager ARNs on AWS. Parsed once, validated with clear messages, no secret ever logged.
import { DEFAULT_POLICY, type EnginePolicy } from '../payments/decisions.ts';
import { callBudgetProblem, worstCaseCallMs, type CallingFunction } from '../payments/call-budget.ts';
import { DEFAULT_AUTHORIZATION_VALIDITY_MS, EXPIRY_LOOK_MARGIN_MS } from '../payments/authorization-expiry.ts';
import { RETENTION_DEFAULTS, RETENTION_LIMITS, type RetentionSettings } from '../payments/retention-store.ts';

export { RETENTION_DEFAULTS, RETENTION_LIMITS };
import { ACCOUNT_ID } from '../payments/types.ts';
import { isConsumerSchemaName, PIPELINE } from './settings.ts';

export interface RuntimeConfig {
  readonly database: {
    /** Local: a full URL. */
    readonly url: string | undefined;
    /** AWS: the RDS-generated secret (JSON with host, port, username, password, dbname). */
    readonly secretArn: string | undefined;
    /** AWS, migrate only: the application role's secret, whose password migrate sets on the role. */
    readonly appSecretArn: string | undefined;
    /** AWS, migrate only: outcome consumers' logins (DB_CONSUMER_LOGINS), whose roles migrate creates. */
    readonly consumerLogins: readonly ConsumerLoginConfig[];
    /** Override the secret's host / port / dbname (an RDS Proxy or cluster endpoint, a credentials-only secret). */
    readonly host: string | undefined;
    readonly port: number | undefined;
    readonly name: string | undefined;
    /** off (local), require (encrypt, no verification), verify-full (encrypt, verify the CA and the host name). */
    readonly ssl: 'off' | 'require' | 'verify-full';
    /** verify-full: the PEM bundle of CAs to trust (the RDS bundle on AWS); unset: Node's default roots. */
    readonly caFile: string | undefined;
    /** Connections per container. A Lambda container serves one invocation at a time. */
    readonly poolMax: number;
    readonly statementTimeoutMs: number;
    readonly connectTimeoutMs: number;
    readonly applicationName: string;
    /** The migrate path's own limits (DB_STATEMENT_TIMEOUT_MS is the charge path's). */
    readonly migrationStatementTimeoutMs: number;
    readonly migrationLockTimeoutMs: number;
  };
  readonly stripe: {
    readonly apiKey: string | undefined;
    readonly secretArn: string | undefined;
    readonly apiBase: string | undefined;
    readonly timeoutMs: number;
    readonly maxNetworkRetries: number;
    /**
     * STRIPE_CONNECTED_ACCOUNTS: connected accounts whose Stripe events are taken before the pipeline
     * has an operation on them (an account it has an operation on is taken anyway). Empty: none.
     */
    readonly connectedAccounts: readonly string[];
  };
  readonly events: {
    /** Unset: events stay in the outbox (counted by the gauges) until a relay with a bus runs. */
    readonly busName: string | undefined;
    readonly source: string;
    /** Local PutEvents endpoint (the project's fake EventBridge). */
    readonly endpoint: string | undefined;
  };
  readonly charge: {
    /** Stripe calls in flight at once within one batch. */
    readonly concurrency: number;
    /** No Stripe call starts unless this much time is left in the invocation. */
    readonly safetyMarginMs: number;
    readonly maxAmount: number;
  };
  readonly reconcile: {
    /** Stripe requests per second this sweep may make (creates + retrieves + searches). */
    readonly maxRequestsPerSecond: number;
    /** Search requests per second (Stripe's Search limit is 20/s per account). */
    readonly maxSearchesPerSecond: number;
    readonly concurrency: number;
    readonly pageSize: number;
    /** No Stripe call starts unless the worst-case call time plus this is left in the invocation. */
    readonly safetyMarginMs: number;
    /**
     * A sweep stops starting work this long after it began (0 = only the invocation's time limits it).
     * Below the schedule's period, so that sweeps normally do not overlap and the request-rate budget
     * below is the reconciler's real rate, not a multiple of it.
     */
    readonly maxRunMs: number;
    /** Window of the RejectedMessagesLastPeriod gauge. */
    readonly rejectedWindowSeconds: number;
    /**
     * How long an uncaptured authorization lives at Stripe (AUTHORIZATION_VALIDITY_MS, default 7 days)
     * and how long after that the expiry check first looks (AUTHORIZATION_EXPIRY_LOOK_MARGIN_MS,
     * default 10 minutes): lambdas/payments/authorization-expiry.ts. The local time-lapse shortens both.
     */
    readonly authorizationExpiry: { readonly validityMs: number; readonly lookMarginMs: number };
  };
  /**
   * The reconciler's retention phase (lambdas/payments/retention-store.ts; docs/operations.md
   * "Retention"): bounds in days, and how much one run may remove. Checked at start (RETENTION_LIMITS).
   */
  readonly retention: RetentionSettings & {
    /** The phase stops starting batches this long after it began. */
    readonly maxRunMs: number;
  };
  /**
   * The engine's policy (handlers pass it to ChargeEngine). Only shortening is allowed: a key window
   * longer than 23 h would re-send keys Stripe may have pruned. The local runtime's "time-lapse"
   * mode shortens everything so that a demo reaches its end states in a minute.
   */
  readonly policy: Partial<EnginePolicy>;
  readonly region: string | undefined;
  /** Where this runs: `lambda` when Lambda set AWS_LAMBDA_FUNCTION_NAME, else `local` (a laptop, a bastion, the local runtime). */
  readonly runtime: 'lambda' | 'local';
}

/** One outcome consumer's login: its secret (username = the role, password) and the schemas it owns. */
export interface ConsumerLoginConfig {
  readonly secretArn: string;
  readonly schemas: readonly string[];
}

/**
 * DB_CONSUMER_LOGINS: JSON `[{"secretArn": "arn:…", "schemas": ["outcome_consumer", "receipts"]}]`,
 * written by the CDK construct (ChargePipeline.addConsumerDatabaseLogin). Unset or empty: none.
 */
function consumerLogins(raw: string | undefined): ConsumerLoginConfig[] {
  if (raw === undefined) return [];
  const shape = 'a JSON list of {"secretArn": "arn:…", "schemas": ["name", …]}';
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(`DB_CONSUMER_LOGINS must be ${shape}; it is not JSON`);
  }
  if (!Array.isArray(parsed)) throw new ConfigError(`DB_CONSUMER_LOGINS must be ${shape}`);
  return parsed.map((entry: unknown, i) => {
    const e = entry as { secretArn?: unknown; schemas?: unknown };
    const ok =
      typeof e === 'object' && e !== null && typeof e.secretArn === 'string' && e.secretArn !== '' &&
      Array.isArray(e.schemas) && e.schemas.length > 0 && e.schemas.every((s) => typeof s === 'string' && isConsumerSchemaName(s));
    if (!ok) throw new ConfigError(`DB_CONSUMER_LOGINS[${i}] must be {"secretArn": "arn:…", "schemas": [lowercase identifiers other than public and pg_*, at least one]}`);
    return { secretArn: e.secretArn as string, schemas: [...(e.schemas as string[])] };
  });
}

/**
 * A comma-separated list of Stripe account ids (acct_…, message.ts ACCOUNT_ID). Anything else is
 * refused at start: a typo would silently refuse every event of the account it meant.
 */
function connectedAccounts(env: Env, name: string): string[] {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return [];
  const ids = raw.split(',').map((id) => id.trim());
  const bad = ids.findIndex((id) => !ACCOUNT_ID.test(id));
  if (bad >= 0) throw new ConfigError(`${name} must be a comma-separated list of Stripe account ids (acct_ and 1-64 letters or digits); entry ${bad + 1} is not one`);
  return [...new Set(ids)];
}

export class ConfigError extends Error {
  override readonly name = 'ConfigError';
}

type Env = Readonly<Record<string, string | undefined>>;

function integer(env: Env, name: string, fallback: number, min = 0, max = Number.MAX_SAFE_INTEGER): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) throw new ConfigError(`${name} must be an integer in [${min}, ${max}], got "${raw}"`);
  return value;
}

function number(env: Env, name: string, fallback: number, min: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min) throw new ConfigError(`${name} must be a number ≥ ${min}, got "${raw}"`);
  return value;
}

function oneOf<T extends string>(env: Env, name: string, allowed: readonly T[], fallback: T): T {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw)) throw new ConfigError(`${name} must be one of ${allowed.join(', ')}, got "${raw}"`);
  return raw as T;
}

/**
 * RETRY_BACKOFF_SCALE multiplies every retry delay (base and cap) of the policy: the local runtime's
 * time-lapse runs the same schedule faster. Only the timing of retries changes, never what is sent.
 */
function scaledBackoff(scale: number, env: Env): EnginePolicy['backoff'] {
  if (scale > 100) throw new ConfigError(`RETRY_BACKOFF_SCALE must be at most 100, got "${env.RETRY_BACKOFF_SCALE}"`);
  const scaled = (b: { baseMs: number; capMs: number }) => ({ baseMs: Math.max(1, Math.round(b.baseMs * scale)), capMs: Math.max(1, Math.round(b.capMs * scale)) });
  const d = DEFAULT_POLICY.backoff;
  return { ambiguous: scaled(d.ambiguous), rateLimited: scaled(d.rateLimited), configuration: scaled(d.configuration), unsettled: scaled(d.unsettled), inbox: scaled(d.inbox) };
}

const blank = (value: string | undefined) => (value === undefined || value === '' ? undefined : value);

export function loadConfig(env: Env = process.env): RuntimeConfig {
  const config: RuntimeConfig = {
    database: {
      url: blank(env.DATABASE_URL),
      secretArn: blank(env.DB_SECRET_ARN),
      appSecretArn: blank(env.DB_APP_SECRET_ARN),
      consumerLogins: consumerLogins(blank(env.DB_CONSUMER_LOGINS)),
      host: blank(env.DB_HOST),
      port: blank(env.DB_PORT) === undefined ? undefined : integer(env, 'DB_PORT', 5432, 1, 65535),
      name: blank(env.DB_NAME),
      ssl: oneOf(env, 'DB_SSL', ['off', 'require', 'verify-full'], blank(env.DB_SECRET_ARN) ? 'verify-full' : 'off'),
      caFile: blank(env.DB_SSL_CA_FILE),
      poolMax: integer(env, 'DB_POOL_MAX', 2, 1, 100),
      statementTimeoutMs: integer(env, 'DB_STATEMENT_TIMEOUT_MS', 10_000, 100),
      connectTimeoutMs: integer(env, 'DB_CONNECT_TIMEOUT_MS', 5_000, 100),
      applicationName: blank(env.DB_APPLICATION_NAME) ?? blank(env.AWS_LAMBDA_FUNCTION_NAME) ?? 'charge-pipeline',
      // 0 = none. The default stays under the migrate function's 5 min timeout; an index build that
      // needs longer belongs in a CONCURRENTLY migration run by hand (docs/deploy.md).
      migrationStatementTimeoutMs: integer(env, 'MIGRATE_STATEMENT_TIMEOUT_MS', 240_000, 0, 3_600_000),
      // A DDL lock waits behind a long transaction and, while it waits, blocks every charge that
      // touches the table: give up quickly and fail the deploy instead (it is safe to re-run).
      migrationLockTimeoutMs: integer(env, 'MIGRATE_LOCK_TIMEOUT_MS', 5_000, 1, 600_000),
    },
    stripe: {
      apiKey: blank(env.STRIPE_SECRET_KEY),
      secretArn: blank(env.STRIPE_SECRET_ARN),
      apiBase: blank(env.STRIPE_API_BASE),
      timeoutMs: integer(env, 'STRIPE_TIMEOUT_MS', 10_000, 100),
      maxNetworkRetries: integer(env, 'STRIPE_MAX_NETWORK_RETRIES', 1, 0, 5),
      connectedAccounts: connectedAccounts(env, 'STRIPE_CONNECTED_ACCOUNTS'),
    },
    events: {
      busName: blank(env.EVENT_BUS_NAME),
      source: blank(env.EVENT_SOURCE) ?? PIPELINE.eventSource,
      endpoint: blank(env.EVENTS_ENDPOINT),
    },
    charge: {
      concurrency: integer(env, 'CHARGE_CONCURRENCY', 10, 1, 100),
      safetyMarginMs: integer(env, 'CHARGE_SAFETY_MARGIN_MS', 5_000, 0),
      maxAmount: integer(env, 'MAX_CHARGE_AMOUNT', 99_999_999, 1),
    },
    reconcile: {
      maxRequestsPerSecond: number(env, 'RECONCILE_MAX_RPS', 20, 0.1),
      maxSearchesPerSecond: number(env, 'RECONCILE_SEARCH_MAX_RPS', 5, 0.1),
      concurrency: integer(env, 'RECONCILE_CONCURRENCY', 8, 1, 100),
      pageSize: integer(env, 'RECONCILE_PAGE_SIZE', 50, 1, 1000),
      safetyMarginMs: integer(env, 'RECONCILE_SAFETY_MARGIN_MS', 5_000, 0),
      maxRunMs: integer(env, 'RECONCILE_MAX_RUN_MS', 50_000, 0),
      rejectedWindowSeconds: integer(env, 'RECONCILE_REJECTED_WINDOW_SECONDS', 300, 1),
      authorizationExpiry: {
        validityMs: integer(env, 'AUTHORIZATION_VALIDITY_MS', DEFAULT_AUTHORIZATION_VALIDITY_MS, 1_000),
        lookMarginMs: integer(env, 'AUTHORIZATION_EXPIRY_LOOK_MARGIN_MS', EXPIRY_LOOK_MARGIN_MS, 0),
      },
    },
    retention: {
      outboxDays: integer(env, 'OUTBOX_RETENTION_DAYS', RETENTION_DEFAULTS.outboxDays, RETENTION_LIMITS.outboxDays, 36_500),
      stripeEventPayloadDays: integer(env, 'STRIPE_EVENT_PAYLOAD_RETENTION_DAYS', RETENTION_DEFAULTS.stripeEventPayloadDays, RETENTION_LIMITS.stripeEventPayloadDays, 36_500),
      stripeEventDays: integer(env, 'STRIPE_EVENT_RETENTION_DAYS', RETENTION_DEFAULTS.stripeEventDays, RETENTION_LIMITS.stripeEventDays, 36_500),
      rejectedBodyDays: integer(env, 'REJECTED_BODY_RETENTION_DAYS', RETENTION_DEFAULTS.rejectedBodyDays, RETENTION_LIMITS.rejectedBodyDays, 36_500),
      operatorReadDays: integer(env, 'OPERATOR_READ_RETENTION_DAYS', RETENTION_DEFAULTS.operatorReadDays, RETENTION_LIMITS.operatorReadDays, 36_500),
      resolvedFindingDays: integer(env, 'RESOLVED_FINDING_RETENTION_DAYS', RETENTION_DEFAULTS.resolvedFindingDays, RETENTION_LIMITS.resolvedFindingDays, 36_500),
      batchSize: integer(env, 'RETENTION_BATCH_SIZE', RETENTION_DEFAULTS.batchSize, 1, 10_000),
      maxBatchesPerRun: integer(env, 'RETENTION_MAX_BATCHES', RETENTION_DEFAULTS.maxBatchesPerRun, 1, 100_000),
      maxRunMs: integer(env, 'RETENTION_MAX_RUN_MS', RETENTION_DEFAULTS.maxRunMs, 0, 600_000),
    },
    policy: {
      keyWindowMs: integer(env, 'KEY_WINDOW_MS', DEFAULT_POLICY.keyWindowMs, 1_000, DEFAULT_POLICY.keyWindowMs),
      earlySearchAfterMs: integer(env, 'EARLY_SEARCH_AFTER_MS', DEFAULT_POLICY.earlySearchAfterMs, 0),
      leaseMs: integer(env, 'LEASE_MS', DEFAULT_POLICY.leaseMs, 1_000),
      publishLeaseMs: integer(env, 'PUBLISH_LEASE_MS', DEFAULT_POLICY.publishLeaseMs, 1_000),
      unsettledReviewAfterMs: integer(env, 'UNSETTLED_REVIEW_AFTER_MS', DEFAULT_POLICY.unsettledReviewAfterMs, 1_000),
      unsettledReviewAfterMsByPaymentMethodType: {
        sepa_debit: integer(env, 'UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT', DEFAULT_POLICY.unsettledReviewAfterMsByPaymentMethodType.sepa_debit!, 1_000),
        us_bank_account: integer(env, 'UNSETTLED_REVIEW_AFTER_MS_US_BANK_ACCOUNT', DEFAULT_POLICY.unsettledReviewAfterMsByPaymentMethodType.us_bank_account!, 1_000),
      },
      backoff: scaledBackoff(number(env, 'RETRY_BACKOFF_SCALE', 1, 0.001), env),
      ambiguousResolution: oneOf<EnginePolicy['ambiguousResolution']>(env, 'AMBIGUOUS_RESOLUTION', ['auto', 'review'], DEFAULT_POLICY.ambiguousResolution),
      sameKeyResends: integer(env, 'SAME_KEY_RESENDS', DEFAULT_POLICY.sameKeyResends, 0, 10),
      listSettleMs: integer(env, 'LIST_SETTLE_MS', DEFAULT_POLICY.listSettleMs, 0),
      listWindowMarginMs: integer(env, 'LIST_WINDOW_MARGIN_MS', DEFAULT_POLICY.listWindowMarginMs, 1_000),
      proofSpacingMs: integer(env, 'ABSENCE_PROOF_SPACING_MS', DEFAULT_POLICY.proofSpacingMs, 1),
      reissueAfterLastSendMs: integer(env, 'REISSUE_AFTER_LAST_SEND_MS', DEFAULT_POLICY.reissueAfterLastSendMs, 1),
      maxAutoReissues: integer(env, 'MAX_AUTO_REISSUES', DEFAULT_POLICY.maxAutoReissues, 0, 10),
      refundAutoReissue: oneOf(env, 'REFUND_AUTO_REISSUE', ['off', 'on'], DEFAULT_POLICY.refundAutoReissue ? 'on' : 'off') === 'on',
      watchFirstAfterMs: integer(env, 'REISSUE_WATCH_FIRST_AFTER_MS', DEFAULT_POLICY.watchFirstAfterMs, 1),
      watchFinalAfterFirstSendMs: integer(env, 'REISSUE_WATCH_FINAL_AFTER_MS', DEFAULT_POLICY.watchFinalAfterFirstSendMs, 1),
      maxSearchFailures: integer(env, 'MAX_SEARCH_FAILURES', DEFAULT_POLICY.maxSearchFailures, 1, 100),
    },
    region: blank(env.AWS_REGION),
    runtime: runsInLambda(env) ? 'lambda' : 'local',
  };
  refuseLocalOverrides(config, env);
  if (!config.database.url && !config.database.secretArn) throw new ConfigError('set DATABASE_URL (local) or DB_SECRET_ARN (AWS)');
  // A lease shorter than one worst-case Stripe call would let a second worker in while the first is
  // still waiting for its answer: harmless for money (same key), but wasteful and noisy (409s).
  const worstCall = worstCaseCallMs(config.stripe);
  if ((config.policy.leaseMs ?? DEFAULT_POLICY.leaseMs) <= worstCall) {
    throw new ConfigError(`LEASE_MS must exceed the worst-case Stripe call (${worstCall} ms for STRIPE_TIMEOUT_MS × retries)`);
  }
  checkEvidencePolicy(config.policy, config.stripe.timeoutMs, integer(env, 'STRIPE_CLOCK_SKEW_MS', DEFAULT_CLOCK_SKEW_MS, 0));
  checkRetention(config.retention);
  return config;
}

function checkRetention(r: RuntimeConfig['retention']): void {
  if (r.stripeEventDays < r.stripeEventPayloadDays) {
    throw new ConfigError(
      `STRIPE_EVENT_RETENTION_DAYS (${r.stripeEventDays}) must be at least STRIPE_EVENT_PAYLOAD_RETENTION_DAYS (${r.stripeEventPayloadDays}): ` +
        'an inbox row is reduced to its columns before it is deleted; raise the first or lower the second',
    );
  }
}

/**
 * The List evidence timings only mean something in this order: a list no sooner than a call could
 * still be running at Stripe (≥ STRIPE_TIMEOUT_MS), the re-issue no sooner than the first list, and
 * all of it inside the key window — else no machine re-issue could ever happen, silently.
 */
function checkEvidencePolicy(policy: Partial<EnginePolicy>, stripeTimeoutMs: number, clockSkewMs: number): void {
  const p = { ...DEFAULT_POLICY, ...policy };
  if (p.listWindowMarginMs < clockSkewMs) {
    throw new ConfigError(
      `LIST_WINDOW_MARGIN_MS (${p.listWindowMarginMs}) must be at least STRIPE_CLOCK_SKEW_MS (${clockSkewMs}), the clock difference allowed between the database and Stripe: ` +
        'a List whose range is narrower than the clocks differ can miss a PaymentIntent and prove an absence that is not one',
    );
  }
  // Stripe keeps keys at least 24 h; KEY_WINDOW_MS is 23 h of that. The watch's last look must come
  // after the retired key can no longer be in use — 24 h, as a shortened window (a time-lapse) scales it.
  const retention = Math.ceil((p.keyWindowMs * 24) / 23);
  if (p.watchFinalAfterFirstSendMs < retention) {
    throw new ConfigError(
      `REISSUE_WATCH_FINAL_AFTER_MS (${p.watchFinalAfterFirstSendMs}) must be at least ${retention} (Stripe's 24 h key retention, KEY_WINDOW_MS × 24/23): ` +
        'the watch after a re-issue must look again once the retired key has aged past it',
    );
  }
  if (p.watchFirstAfterMs >= p.watchFinalAfterFirstSendMs) {
    throw new ConfigError(`REISSUE_WATCH_FIRST_AFTER_MS (${p.watchFirstAfterMs}) must be below REISSUE_WATCH_FINAL_AFTER_MS (${p.watchFinalAfterFirstSendMs}): the watch looks at least twice`);
  }
  if (p.refundAutoReissue && p.ambiguousResolution !== 'auto') {
    throw new ConfigError('REFUND_AUTO_REISSUE=on needs AMBIGUOUS_RESOLUTION=auto (with review, a person decides every re-issue): unset one of them');
  }
  if (p.listSettleMs < stripeTimeoutMs) {
    throw new ConfigError(`LIST_SETTLE_MS (${p.listSettleMs}) must be at least STRIPE_TIMEOUT_MS (${stripeTimeoutMs}): a request may still be running at Stripe that long after it was sent`);
  }
  if (p.reissueAfterLastSendMs < p.listSettleMs) {
    throw new ConfigError(`REISSUE_AFTER_LAST_SEND_MS (${p.reissueAfterLastSendMs}) must be at least LIST_SETTLE_MS (${p.listSettleMs}): a re-issue rests on lists made after the settle delay`);
  }
  if (p.ambiguousResolution === 'auto' && p.reissueAfterLastSendMs + p.proofSpacingMs >= p.keyWindowMs) {
    throw new ConfigError(
      `REISSUE_AFTER_LAST_SEND_MS + ABSENCE_PROOF_SPACING_MS (${p.reissueAfterLastSendMs + p.proofSpacingMs}) must be below KEY_WINDOW_MS (${p.keyWindowMs}): ` +
        'the proofs of absence must fit inside the key window, or set AMBIGUOUS_RESOLUTION=review',
    );
  }
}

/**
 * STRIPE_CLOCK_SKEW_MS: how far the database's clock (which dates every send and proof) and Stripe's
 * (which dates `created`) may differ. Both sides keep NTP time; a minute is a generous bound, and the
 * List window's margin (5 min by default) must cover it. A local run on one machine may set it lower.
 */
const DEFAULT_CLOCK_SKEW_MS = 60_000;

/**
 * Lambda sets AWS_LAMBDA_FUNCTION_NAME for every function it runs; nothing else here does: the local
 * runtime (local/) runs the same handlers in-process with its own environment and never sets it, and
 * refuses to start where it is set (local/pipeline.ts). So it is the one marker of "deployed".
 */
export function runsInLambda(env: Env): boolean {
  return blank(env.AWS_LAMBDA_FUNCTION_NAME) !== undefined;
}

/** A live-mode Stripe key (secret or restricted): real money. */
export function isLiveStripeKey(key: string | undefined): boolean {
  return key !== undefined && /^(sk|rk)_live_/.test(key.trim());
}

const LOOPBACK_HOSTS = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

/**
 * STRIPE_API_BASE and EVENTS_ENDPOINT point the functions at a local server (the fake Stripe,
 * stripe-mock, the fake EventBridge): the Stripe key goes to the first, every outcome event to the
 * second. Both are refused where the function runs in Lambda or the key is live, and so is any TLS
 * mode but verify-full in Lambda (`require` encrypts without checking who answers). Elsewhere an API
 * base must be https, or plain http to this machine (the fakes listen on 127.0.0.1).
 */
export function localOverrideProblem(config: RuntimeConfig, liveKey: boolean): string | null {
  const where = config.runtime === 'lambda' ? 'in Lambda' : liveKey ? 'with a live Stripe key' : null;
  if (where !== null && config.stripe.apiBase !== undefined) {
    return `STRIPE_API_BASE is refused ${where} (the Stripe key would be sent to ${config.stripe.apiBase}): unset it, and the key goes to api.stripe.com only`;
  }
  if (where !== null && config.events.endpoint !== undefined) {
    return `EVENTS_ENDPOINT is refused ${where} (every outcome event would go to ${config.events.endpoint}): unset it, and events go to EventBridge in AWS_REGION`;
  }
  if (config.runtime === 'lambda' && config.database.ssl !== 'verify-full') {
    return `DB_SSL must be verify-full in Lambda, got "${config.database.ssl}": set DB_SSL=verify-full (with DB_SSL_CA_FILE, the RDS CA bundle the stack ships) or leave it unset with DB_SECRET_ARN`;
  }
  if (config.stripe.apiBase !== undefined) {
    let url: URL;
    try {
      url = new URL(config.stripe.apiBase);
    } catch {
      return `STRIPE_API_BASE must be a URL, got "${config.stripe.apiBase}"`;
    }
    const loopback = LOOPBACK_HOSTS.has(url.hostname);
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && loopback)) {
      return `STRIPE_API_BASE must be https (plain http only to this machine: 127.0.0.1, localhost, ::1), got "${config.stripe.apiBase}": the key travels in every request`;
    }
  }
  return null;
}

function refuseLocalOverrides(config: RuntimeConfig, env: Env): void {
  const problem = localOverrideProblem(config, isLiveStripeKey(blank(env.STRIPE_SECRET_KEY)));
  if (problem) throw new ConfigError(problem);
}

/** Require Stripe credentials only where Stripe is called (the migrate function needs none). */
export function assertStripeConfigured(config: RuntimeConfig): void {
  if (!config.stripe.apiKey && !config.stripe.secretArn) throw new ConfigError('set STRIPE_SECRET_KEY (local) or STRIPE_SECRET_ARN (AWS)');
}

/**
 * Refuse a configuration under which the function could never start a Stripe call (the worst-case
 * call and the safety margin do not fit in its timeout): every order would stay pending, silently.
 * Handlers check it at start against their function timeout, and again per invocation against the
 * time Lambda actually gives (a timeout changed outside the construct).
 */
export function assertCallBudget(config: RuntimeConfig, fn: CallingFunction, functionTimeoutMs: number): void {
  const problem = callBudgetProblem(fn, functionTimeoutMs, {
    ...config.stripe,
    safetyMarginMs: fn === 'charge' ? config.charge.safetyMarginMs : config.reconcile.safetyMarginMs,
  });
  if (problem) throw new ConfigError(problem);
}
