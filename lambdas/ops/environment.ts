// Configuration shared by the two entry points: the runtime config (DESIGN §8), the review policy,
// and the Stripe look-up, created once and only when a command needs it.
import { DEFAULT_REVIEW_POLICY, type ReviewPolicy, type StripeLookup } from '../payments/review.ts';
import { ConfigError, loadConfig, type RuntimeConfig } from '../runtime/config.ts';
import { OpsConfigError } from './errors.ts';
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
 * The review policy of this deployment. The lease is the engine's (LEASE_MS), and so is a refund's
 * List settle delay (LIST_SETTLE_MS). How long after the last
 * possible send Search is trusted to show a PaymentIntent is the engine's own early-search delay
 * (EARLY_SEARCH_AFTER_MS, default 10 min) unless OPS_SEARCH_SETTLE_MS says otherwise (tests against a
 * fake whose Search has no lag).
 */
export function reviewPolicy(config: RuntimeConfig, env: Env): ReviewPolicy {
  const raw = env.OPS_SEARCH_SETTLE_MS;
  let searchSettleMs = config.policy.earlySearchAfterMs ?? DEFAULT_REVIEW_POLICY.searchSettleMs;
  if (raw !== undefined && raw !== '') {
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
