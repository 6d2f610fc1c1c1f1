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
