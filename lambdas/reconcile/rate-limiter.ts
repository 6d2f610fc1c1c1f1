// The reconciler's cap on Stripe requests: two token buckets, one for every request and one for
// Search, shared by all the workers of one sweep and consulted through the engine's beforeCall.
//
// Implemented as GCRA ("virtual scheduling"): each bucket remembers when its next request may go;
// a caller reserves the later of the two slots synchronously — so concurrent workers queue up in
// order, never race — then sleeps until it. The burst is one request: requests are spaced
// 1/rate apart, so any one-second window holds at most rate + 1 of them, whatever the concurrency.
//
// Stripe's limits are per account and shared by every caller (the charge Lambdas too): this cap is
// the reconciler's share, per running sweep. See docs/architecture.md, The reconcile handler, for the numbers.
// With Connect, a request is made as a connected account or as the platform; the one cap spans them
// all, so no account is ever sent more than it (docs/decisions.md, "One request cap for every
// account"). What each account was granted is counted, for the run's summary.
import type { Step } from '../payments/decisions.ts';

export interface RateLimiterOptions {
  /** Every Stripe request: creates, retrieves, searches, and each page of a List. */
  readonly requestsPerSecond: number;
  /** Search requests (steps search and early_search), also counted in requestsPerSecond. */
  readonly searchesPerSecond: number;
  /** Monotonic milliseconds; default performance.now. */
  readonly now?: () => number;
  /** Waits `ms` on that clock; default a timer. Tests give both, and read the slots off their own clock. */
  readonly sleep?: (ms: number) => Promise<void>;
}

/** The key the platform's own requests are counted under (an account id always starts acct_). */
export const PLATFORM = 'platform';

const isSearch = (step: Step['kind']) => step === 'search' || step === 'early_search';

export class RequestRateLimiter {
  readonly #intervalMs: number;
  readonly #searchIntervalMs: number;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  #nextAt = -Infinity;
  #nextSearchAt = -Infinity;
  #granted = 0;
  #refused = 0;
  readonly #grantedByAccount = new Map<string, number>();

  constructor(options: RateLimiterOptions) {
    if (!(options.requestsPerSecond > 0) || !(options.searchesPerSecond > 0)) throw new RangeError('request rates must be positive');
    this.#intervalMs = 1000 / options.requestsPerSecond;
    this.#searchIntervalMs = 1000 / options.searchesPerSecond;
    this.#now = options.now ?? (() => performance.now());
    this.#sleep = options.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
  }

  /**
   * Wait for a slot for one request of this step. Resolves false — without taking a slot — only when
   * the slot would come after `latestStart` (same clock as `now`): the time budget would run out
   * while waiting, so the operation is better released for the next sweep. `account`: the Stripe
   * account the request is made as (Connect's Stripe-Account; null or absent: the platform).
   */
  async acquire(step: Step['kind'], latestStart: number, account: string | null = null): Promise<boolean> {
    const now = this.#now();
    const search = isSearch(step);
    const at = Math.max(now, this.#nextAt, search ? this.#nextSearchAt : -Infinity);
    if (at > latestStart) {
      this.#refused++;
      return false;
    }
    this.#nextAt = at + this.#intervalMs;
    if (search) this.#nextSearchAt = at + this.#searchIntervalMs;
    this.#granted++;
    const key = account ?? PLATFORM;
    this.#grantedByAccount.set(key, (this.#grantedByAccount.get(key) ?? 0) + 1);
    if (at > now) await this.#sleep(at - now);
    return true;
  }

  get granted(): number {
    return this.#granted;
  }

  get refused(): number {
    return this.#refused;
  }

  /** Requests granted per account (`platform` for the platform's own), most first. */
  get grantedByAccount(): Record<string, number> {
    return Object.fromEntries([...this.#grantedByAccount].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])));
  }
}
