// How long one Stripe call may take, in one dependency-free place: the lease, the handlers' time
// checks and the configuration all reason about it, and the migrate function (which never calls
// Stripe) should not have to bundle the SDK to validate its configuration.

export const DEFAULT_STRIPE_TIMEOUT_MS = 10_000;
export const DEFAULT_STRIPE_MAX_NETWORK_RETRIES = 1;

/** Upper bound of one gateway call, for lease and time-budget arithmetic. */
export function worstCaseCallMs(options: { readonly timeoutMs?: number; readonly maxNetworkRetries?: number }): number {
  const timeout = options.timeoutMs ?? DEFAULT_STRIPE_TIMEOUT_MS;
  const retries = options.maxNetworkRetries ?? DEFAULT_STRIPE_MAX_NETWORK_RETRIES;
  // +1 attempt: the SDK retries a closed connection once even with retries disabled; + backoff (≤ 2 s each).
  return (retries + 2) * timeout + (retries + 1) * 2_000;
}

export type CallingFunction = 'charge' | 'reconcile';

export interface CallBudget {
  readonly timeoutMs?: number;
  readonly maxNetworkRetries?: number;
  /** What a handler keeps back after the worst-case call (CHARGE_ / RECONCILE_SAFETY_MARGIN_MS). */
  readonly safetyMarginMs: number;
}

/**
 * Why no Stripe call could ever start in a function with this timeout, or null when one can. A
 * handler starts a call only with the worst-case call plus its safety margin still left in the
 * invocation; when that is the whole timeout or more, every invocation skips every call and every
 * order stays pending without an error. The message names the settings to change and the bound.
 */
export function callBudgetProblem(fn: CallingFunction, functionTimeoutMs: number, budget: CallBudget): string | null {
  const worst = worstCaseCallMs(budget);
  const needed = worst + budget.safetyMarginMs;
  if (needed < functionTimeoutMs) return null;
  const timeout = budget.timeoutMs ?? DEFAULT_STRIPE_TIMEOUT_MS;
  const retries = budget.maxNetworkRetries ?? DEFAULT_STRIPE_MAX_NETWORK_RETRIES;
  // The largest per-attempt timeout that fits: (retries + 2) × t + (retries + 1) × 2 s + margin < function timeout.
  const fits = Math.floor((functionTimeoutMs - 1 - budget.safetyMarginMs - (retries + 1) * 2_000) / (retries + 2));
  const margin = fn === 'charge' ? 'CHARGE_SAFETY_MARGIN_MS' : 'RECONCILE_SAFETY_MARGIN_MS';
  return (
    `no Stripe call can ever start in the ${fn} function: one call may take up to ${worst} ms ` +
    `(STRIPE_TIMEOUT_MS=${timeout} per attempt, STRIPE_MAX_NETWORK_RETRIES=${retries}, plus the SDK's backoff), ` +
    `and with ${margin}=${budget.safetyMarginMs} that needs ${needed} ms of a ${functionTimeoutMs} ms function timeout; ` +
    (fits >= 100
      ? `lower STRIPE_TIMEOUT_MS to at most ${fits} (or the retries or the margin), or raise the function timeout above ${needed} ms`
      : `lower STRIPE_MAX_NETWORK_RETRIES or the margin, or raise the function timeout above ${needed} ms`)
  );
}
