// Configuration shared by the two entry points: the runtime config (docs/configuration.md), the review policy,
// and the Stripe look-up, created once and only when a command needs it.
import { DEFAULT_REVIEW_POLICY, type ReviewPolicy, type StripeLookup } from '../payments/review.ts';
import { ConfigError, loadConfig, runsInLambda, type RuntimeConfig } from '../runtime/config.ts';
import { OpsConfigError } from './errors.ts';
import { OperatorListError, parseOperatorPrincipals, stsEndpointOf, type OperatorPrincipal } from './identity.ts';
import type { PaymentGateway } from '../payments/gateway.ts';
import { StripeGateway } from '../payments/stripe-gateway.ts';
import { StripePaymentIntentLookup, stripeFromConfig } from './stripe-lookup.ts';

type Env = Readonly<Record<string, string | undefined>>;

export function opsConfig(env: Env): RuntimeConfig {
  try {
    return loadConfig(env);
  } catch (error) {
    if (error instanceof ConfigError) throw new OpsConfigError(error.message);
    throw error;
  }
}

/**
 * A local run: not in Lambda, and not against a deployed database (DB_SECRET_ARN: a bastion). Only
 * there are test knobs (OPS_SEARCH_SETTLE_MS, OPS_STS_ENDPOINT) read.
 */
export function isLocalRun(config: RuntimeConfig): boolean {
  return config.runtime === 'local' && config.database.secretArn === undefined;
}

/**
 * The review policy of this deployment. The lease is the engine's (LEASE_MS), and so is a refund's
 * List settle delay (LIST_SETTLE_MS). How long after the last possible send Search is trusted to show
 * a PaymentIntent is the engine's own early-search delay (EARLY_SEARCH_AFTER_MS, default 10 min);
 * OPS_SEARCH_SETTLE_MS, for tests against a fake whose Search has no lag, is read in a local run only
 * and ignored against a deployed pipeline (where a 0 would let a human act on a Search that lags).
 */
export function reviewPolicy(config: RuntimeConfig, env: Env): ReviewPolicy {
  const raw = env.OPS_SEARCH_SETTLE_MS;
  let searchSettleMs = config.policy.earlySearchAfterMs ?? DEFAULT_REVIEW_POLICY.searchSettleMs;
  if (raw !== undefined && raw !== '' && isLocalRun(config)) {
    const value = Number(raw);
    if (!Number.isInteger(value) || value < 0) throw new OpsConfigError(`OPS_SEARCH_SETTLE_MS must be a non-negative integer, got "${raw}"`);
    searchSettleMs = value;
  }
  return {
    searchSettleMs,
    // A refund's evidence is List (real time): the engine's own List settle delay, not Search's.
    listSettleMs: config.policy.listSettleMs ?? DEFAULT_REVIEW_POLICY.listSettleMs,
    leaseMs: config.policy.leaseMs ?? DEFAULT_REVIEW_POLICY.leaseMs,
  };
}

/** The test knobs set here that this run does not read (the CLI's banner says so). */
export function ignoredTestKnobs(config: RuntimeConfig, env: Env): string[] {
  return isLocalRun(config) ? [] : ['OPS_SEARCH_SETTLE_MS'].filter((name) => env[name] !== undefined && env[name] !== '');
}

export interface IdentitySettings {
  /** The function a proof must be bound to. */
  readonly functionName: string;
  readonly stsEndpoint: string;
  /** OPS_OPERATOR_ARNS: who may write (and read raw bodies) through the function. */
  readonly operators: readonly OperatorPrincipal[];
}

/**
 * How the ops function verifies its callers: STS in its own region (OPS_STS_ENDPOINT, a fake STS, only
 * outside Lambda: in Lambda it is refused, since whoever answers there names the caller), its own name
 * as the audience, and the allow-list.
 */
export function identitySettings(env: Env, functionName: string | undefined): IdentitySettings {
  const name = functionName ?? env.AWS_LAMBDA_FUNCTION_NAME;
  if (!name) throw new OpsConfigError('the ops function does not know its own name (no Lambda context, no AWS_LAMBDA_FUNCTION_NAME): no identity proof can be checked');
  const override = env.OPS_STS_ENDPOINT;
  if (override && runsInLambda(env)) {
    throw new OpsConfigError('OPS_STS_ENDPOINT is refused in Lambda (it would decide who the caller is): unset it, and callers are verified by STS in AWS_REGION');
  }
  if (!override && !env.AWS_REGION) throw new OpsConfigError('AWS_REGION is not set: the ops function verifies callers with STS in its region');
  let operators: OperatorPrincipal[];
  try {
    operators = parseOperatorPrincipals(env.OPS_OPERATOR_ARNS);
  } catch (error) {
    if (error instanceof OperatorListError) throw new OpsConfigError(error.message);
    throw error;
  }
  return { functionName: name, stsEndpoint: override || stsEndpointOf(env.AWS_REGION!), operators };
}

/** A lazy, memoised look-up: a failed creation (a missing key) is not cached, so the next call says so again. */
export function lazyLookup(config: RuntimeConfig): () => Promise<StripeLookup> {
  let created: Promise<StripeLookup> | undefined;
  return () => {
    if (!created) {
      created = stripeFromConfig(config).then((stripe) => new StripePaymentIntentLookup(stripe));
      created.catch(() => {
        created = undefined;
      });
    }
    return created;
  };
}

/** The engine's gateway for `refunds create`, lazy and memoised like the look-up. */
export function lazyGateway(config: RuntimeConfig): () => Promise<PaymentGateway> {
  let created: Promise<PaymentGateway> | undefined;
  return () => {
    if (!created) {
      created = stripeFromConfig(config).then((stripe) => new StripeGateway(stripe));
      created.catch(() => {
        created = undefined;
      });
    }
    return created;
  };
}
