// Which fault, if any, a request gets: scripted faults first, then a reproducible random draw.
import { createHash } from 'node:crypto';
import { FAULT_KINDS, type Endpoint, type FaultKind, type FaultMatch, type FaultRates } from './types.ts';

/**
 * Named fault profiles for the CLI, `npm start` and the soak. Rates are per executing request — a
 * create (PaymentIntent or Refund), a capture or a cancel; a `decline` drawn for anything but a
 * PaymentIntent create (or a `processing` for a capture / cancel) is dropped, so those see slightly fewer faults.
 */
export const FAULT_PROFILES = {
  none: {},
  flaky: {
    lost_response_after_commit: 0.03,
    error_500_after_commit: 0.02,
    rate_limited_429: 0.03,
    decline: 0.02,
    processing: 0.02,
  },
  chaos: {
    lost_response_after_commit: 0.2,
    // "500s 5%": split so that both sides of the commit are exercised — a 500 after commit leaves a
    // charge behind, a 500 before commit leaves none, and the caller cannot tell them apart.
    error_500_after_commit: 0.03,
    error_500_before_commit: 0.02,
    rate_limited_429: 0.05,
    hang: 0.02,
    processing: 0.01,
    decline: 0.05,
    // Stripe commits the create later than it answered: after the product's proofs of absence and its
    // re-issue (the watch after a re-issue finds it), or while the key is still in use (409s until then).
    error_500_late_commit: 0.01,
    in_flight_then_commit: 0.005,
  },
} as const satisfies Record<string, FaultRates>;
export type FaultProfileName = keyof typeof FAULT_PROFILES;

export function isFaultProfileName(name: string): name is FaultProfileName {
  return Object.hasOwn(FAULT_PROFILES, name);
}

export function isFaultKind(value: unknown): value is FaultKind {
  return typeof value === 'string' && (FAULT_KINDS as readonly string[]).includes(value);
}

/**
 * When in a request's life a fault strikes.
 * - gate: before the idempotency layer (nothing executed, nothing cached), any request.
 * - commit: changes what the first execution of a key does and stores; ignored on a replay, where
 *   nothing executes.
 * - answer: after the answer is known (executed or replayed): the answer is lost, withheld or mangled.
 */
const FAULT_STAGE = {
  lost_response_after_commit: 'answer',
  error_500_after_commit: 'commit',
  error_500_before_commit: 'commit',
  rate_limited_429: 'gate',
  hang: 'answer',
  decline: 'commit',
  processing: 'commit',
  unauthorized_401: 'gate',
  permission_403: 'gate',
  proxy_502_after_commit: 'answer',
  truncated_response_after_commit: 'answer',
  stall_after_commit: 'answer',
  error_500_late_commit: 'commit',
  in_flight_then_commit: 'commit',
  lock_timeout_429: 'gate',
} as const satisfies Record<FaultKind, 'gate' | 'commit' | 'answer'>;
export type FaultStage = (typeof FAULT_STAGE)[FaultKind];

/** Endpoints that execute something under an idempotency key: PaymentIntent and Refund creates. */
export function executes(endpoint: Endpoint): boolean {
  return endpoint === 'create' || endpoint === 'refund_create' || endpoint === 'capture' || endpoint === 'cancel';
}

export function faultStage(kind: FaultKind, endpoint: Endpoint): FaultStage {
  // A retrieve, search or list commits nothing: a "500 after commit" there is simply a 500 instead of the answer.
  if (!executes(endpoint) && kind === 'error_500_after_commit') return 'answer';
  return FAULT_STAGE[kind];
}

/**
 * Faults that only mean something for a create (they shape what gets executed). A refund create takes
 * `processing` (the refund is created `pending`), the 500 before commit and the late commits; a card
 * decline has no meaning for a refund.
 */
const CREATE_ONLY: readonly FaultKind[] = ['error_500_before_commit', 'decline', 'processing', 'error_500_late_commit', 'in_flight_then_commit'];
const PAYMENT_INTENT_CREATE_ONLY: readonly FaultKind[] = ['decline'];

export function faultCanTarget(kind: FaultKind, endpoint: Endpoint): boolean {
  if (endpoint === 'create') return true;
  if (endpoint === 'refund_create') return !PAYMENT_INTENT_CREATE_ONLY.includes(kind);
  // A capture or cancel executes under its key like a create (500 before / after the commit, late
  // commits, lost answers…); a card decline or a processing payment mean nothing for it.
  if (endpoint === 'capture' || endpoint === 'cancel') return kind !== 'decline' && kind !== 'processing';
  return !CREATE_ONLY.includes(kind);
}

/**
 * Where a request stands once the idempotency layer has looked at it:
 * - execute: it will run (first use of its key, or no key);
 * - replay: a stored response will be answered;
 * - rejected: it gets an error before anything runs (param mismatch, 409, validation).
 */
export type RequestPhase = 'execute' | 'replay' | 'rejected';

export function faultApplies(kind: FaultKind, endpoint: Endpoint, phase: RequestPhase): boolean {
  if (!faultCanTarget(kind, endpoint)) return false;
  const stage = faultStage(kind, endpoint);
  if (stage === 'gate') return true;
  if (stage === 'commit') return phase === 'execute';
  return phase !== 'rejected';
}

export function validateRates(rates: FaultRates): FaultRates {
  let sum = 0;
  for (const [kind, rate] of Object.entries(rates)) {
    if (!isFaultKind(kind)) throw new RangeError(`unknown fault kind: ${kind}`);
    if (typeof rate !== 'number' || !Number.isFinite(rate) || rate < 0 || rate > 1) {
      throw new RangeError(`fault rate for ${kind} must be a number in [0, 1], got ${String(rate)}`);
    }
    sum += rate;
  }
  // One uniform draw picks at most one kind, so the rates are slices of [0, 1).
  if (sum > 1 + 1e-9) throw new RangeError(`fault rates add up to ${sum}, more than 1`);
  return { ...rates };
}

/** A uniform number in [0, 1) that depends only on its inputs. */
export function uniformFromHash(...parts: readonly (string | number)[]): number {
  const digest = createHash('sha256').update(parts.join('\u0000')).digest();
  return digest.readUIntBE(0, 6) / 2 ** 48;
}

/**
 * The random fault for the n-th sighting of a key (n = 1 for its first request).
 *
 * Why a hash and not one PRNG stream: requests from many concurrent callers interleave differently on
 * every run; a shared stream would hand the same key a different fault each time. Hashing
 * (seed, key, n) makes "same seed + same requests per key ⇒ same faults", whatever the interleaving.
 */
export function drawRandomFault(seed: number, rates: FaultRates, key: string, sighting: number): FaultKind | null {
  const u = uniformFromHash('fake-stripe-fault', seed, key, sighting);
  let upper = 0;
  for (const kind of FAULT_KINDS) {
    upper += rates[kind] ?? 0;
    if (u < upper) return kind;
  }
  return null;
}

/** The facts about a request that a FaultMatch can test. */
export interface RequestFacts {
  readonly endpoint: Endpoint;
  readonly operationId: string | null;
  readonly orderId: string | null;
  readonly idempotencyKey: string | null;
  readonly paymentIntentId: string | null;
  /** Refund endpoints only. */
  readonly refundId?: string | null;
  /** A PaymentIntent list's `customer` filter. */
  readonly customerId?: string | null;
}

export function matches(match: FaultMatch, facts: RequestFacts): boolean {
  return (
    (match.endpoint === undefined || match.endpoint === facts.endpoint) &&
    (match.operationId === undefined || match.operationId === facts.operationId) &&
    (match.orderId === undefined || match.orderId === facts.orderId) &&
    (match.idempotencyKey === undefined || match.idempotencyKey === facts.idempotencyKey) &&
    (match.paymentIntentId === undefined || match.paymentIntentId === facts.paymentIntentId) &&
    (match.refundId === undefined || match.refundId === (facts.refundId ?? null)) &&
    (match.customerId === undefined || match.customerId === (facts.customerId ?? null))
  );
}

interface ScriptedFault {
  readonly match: FaultMatch;
  readonly fault: FaultKind;
  remaining: number;
}

export interface ChosenFault {
  readonly kind: FaultKind;
  readonly source: 'scripted' | 'random';
}

/**
 * Scripted faults (consumed in order, each `times` requests) and the random rates.
 * A scripted fault is consumed only by a request it can apply to — a "decline" aimed at an operation
 * waits for the next create of that operation that actually executes, rather than being wasted on a
 * replay. A random draw that cannot apply is simply dropped (the draw still happened, which keeps the
 * per-key sequence reproducible).
 */
export class FaultPlan {
  #scripted: ScriptedFault[] = [];
  #rates: FaultRates;
  #seed: number;
  /** How many create requests each key (or, without a key, each parameter fingerprint) has made. */
  #sightings = new Map<string, number>();

  constructor(seed: number, rates: FaultRates) {
    this.#seed = seed;
    this.#rates = validateRates(rates);
  }

  get seed(): number {
    return this.#seed;
  }

  get rates(): FaultRates {
    return { ...this.#rates };
  }

  setRates(rates: FaultRates, seed?: number): void {
    this.#rates = validateRates(rates);
    if (seed !== undefined) this.#seed = seed;
  }

  inject(match: FaultMatch, fault: FaultKind, times: number): void {
    if (!isFaultKind(fault)) throw new RangeError(`unknown fault kind: ${String(fault)}`);
    if (!Number.isInteger(times) || times < 1) throw new RangeError(`times must be a positive integer, got ${times}`);
    if (match.endpoint !== undefined && !faultCanTarget(fault, match.endpoint)) {
      const which = PAYMENT_INTENT_CREATE_ONLY.includes(fault) ? 'creates of PaymentIntents' : 'creates';
      throw new RangeError(`fault ${fault} only applies to ${which}, not to ${match.endpoint}`);
    }
    this.#scripted.push({ match: { ...match }, fault, remaining: times });
  }

  /**
   * Called once per /v1 request. `randomKey` is the idempotency key (or a parameter fingerprint for a
   * create sent without one); random faults apply to creates (PaymentIntents and Refunds) only.
   */
  choose(facts: RequestFacts, phase: RequestPhase, randomKey: string | null): ChosenFault | null {
    let sighting = 0;
    if (executes(facts.endpoint) && randomKey !== null) {
      sighting = (this.#sightings.get(randomKey) ?? 0) + 1;
      this.#sightings.set(randomKey, sighting);
    }
    const index = this.#scripted.findIndex(
      (s) => matches(s.match, facts) && faultApplies(s.fault, facts.endpoint, phase),
    );
    const scripted = this.#scripted[index];
    if (scripted !== undefined) {
      scripted.remaining -= 1;
      if (scripted.remaining === 0) this.#scripted.splice(index, 1);
      return { kind: scripted.fault, source: 'scripted' };
    }
    if (sighting === 0 || randomKey === null) return null;
    const drawn = drawRandomFault(this.#seed, this.#rates, randomKey, sighting);
    if (drawn === null || !faultApplies(drawn, facts.endpoint, phase)) return null;
    return { kind: drawn, source: 'random' };
  }

  /** Forget scripted faults and sightings (reset()); rates and seed stay. */
  clear(): void {
    this.#scripted = [];
    this.#sightings.clear();
  }
}

/**
 * How many HTTP attempts stripe-node@23.1.0 makes for ONE call when every attempt's connection is
 * closed before the response headers (ECONNRESET/EPIPE), e.g. under lost_response_after_commit:
 * RequestSender._shouldRetry retries a closed connection once *before* looking at maxNetworkRetries
 * (stripe-node#1040), so it is max(2, maxNetworkRetries + 1), with ≥ 500 ms sleep between attempts.
 * Inject a lost_response fault with `times` = this number to make the caller really see the loss.
 */
export function sdkAttemptsWhenConnectionCloses(maxNetworkRetries: number): number {
  return Math.max(2, maxNetworkRetries + 1);
}
