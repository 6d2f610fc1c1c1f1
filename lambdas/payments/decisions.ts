// The life of an operation as pure decisions: derive the key, judge the key window, choose the next
// step, read the answer, schedule the next attempt. No I/O here — every branch is tested exhaustively
// in test/decisions.test.ts, and the engine is thin I/O around these functions.
import { FailureKind, type GatewayFailure, type GatewayResult } from './gateway.ts';
import type { ClaimedOperation, OperationStatus, PaymentIntentView } from './types.ts';

export interface Backoff {
  readonly baseMs: number;
  readonly capMs: number;
}

export interface EnginePolicy {
  /**
   * How long after the first send the same key may be re-sent. Stripe keeps keys for *at least*
   * 24 h; the seed's 23 h leaves a margin. After it, a re-send could be a brand-new request.
   */
  readonly keyWindowMs: number;
  /**
   * How long a claim keeps other workers off an operation. Must exceed the longest gateway call
   * (timeout × (1 + SDK retries) + search) so that a live worker is never overtaken; a dead one is.
   */
  readonly leaseMs: number;
  /**
   * An ambiguous operation older than this is looked up by Search before the next create: a 500
   * is replayed for the key's life, so only Search can show that the charge exists after all.
   * Search lags ("usually within a minute"), so it is not asked sooner.
   */
  readonly earlySearchAfterMs: number;
  /** A PaymentIntent still processing / requiring action this long after the first send goes to a human. */
  readonly unsettledReviewAfterMs: number;
  readonly backoff: {
    /** Ambiguous answers: retry with the same key. */
    readonly ambiguous: Backoff;
    /** 429: Stripe asked us to slow down. */
    readonly rateLimited: Backoff;
    /** 401 / 403: someone must fix the key; don't hammer Stripe meanwhile. */
    readonly configuration: Backoff;
    /** processing / requires_action: settled later by retrieve. */
    readonly unsettled: Backoff;
  };
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

export const DEFAULT_POLICY: EnginePolicy = {
  keyWindowMs: 23 * HOUR,
  leaseMs: 2 * MINUTE,
  earlySearchAfterMs: 10 * MINUTE,
  unsettledReviewAfterMs: 7 * 24 * HOUR,
  backoff: {
    ambiguous: { baseMs: 2 * SECOND, capMs: 15 * MINUTE },
    rateLimited: { baseMs: 5 * SECOND, capMs: 5 * MINUTE },
    configuration: { baseMs: 1 * MINUTE, capMs: 30 * MINUTE },
    unsettled: { baseMs: 30 * SECOND, capMs: 1 * HOUR },
  },
};

// ── Keys and metadata ────────────────────────────────────────────────────────────────────────────

/**
 * Deterministic from the durable operation id, so every retry — after a crash, in another
 * process, days later — sends the same key. No personal data; well under Stripe's 255 characters.
 * A new generation exists only when an operator proved that nothing was charged.
 */
export function idempotencyKey(operationId: string, keyGeneration: number): string {
  return keyGeneration === 0 ? `payment-op:${operationId}` : `payment-op:${operationId}:g${keyGeneration}`;
}

/** What Search finds the PaymentIntent by once the key may be gone. */
export function paymentIntentMetadata(op: Pick<ClaimedOperation, 'id' | 'orderId' | 'keyGeneration'>): Record<string, string> {
  return { operation_id: op.id, order_id: op.orderId, key_generation: String(op.keyGeneration) };
}

// ── The key window ───────────────────────────────────────────────────────────────────────────────

/** Never sent ⇒ inside the window: the window starts at the first send, not at creation. */
export function withinKeyWindow(firstAttemptedAt: Date | null, now: Date, policy: EnginePolicy = DEFAULT_POLICY): boolean {
  return firstAttemptedAt === null || now.getTime() - firstAttemptedAt.getTime() < policy.keyWindowMs;
}

// ── The next step ────────────────────────────────────────────────────────────────────────────────

export type Step =
  | { readonly kind: 'create' }
  | { readonly kind: 'retrieve'; readonly paymentIntentId: string }
  /** After the window: never create; Search decides or a human does. */
  | { readonly kind: 'search' }
  /** Inside the window, ambiguous for a while: adopt exactly one hit, else create with the same key. */
  | { readonly kind: 'early_search' };

export function chooseStep(op: ClaimedOperation, policy: EnginePolicy = DEFAULT_POLICY): Step {
  // Stripe already made it: a re-send would only replay the first answer, so read the current state.
  if (op.externalId !== null) return { kind: 'retrieve', paymentIntentId: op.externalId };
  // The claim set first_attempted_at, so "pending" here may still mean "sent, then crashed".
  if (!withinKeyWindow(op.firstAttemptedAt, op.claimedAt, policy)) return { kind: 'search' };
  if (op.status === 'unknown' && op.claimedAt.getTime() - op.firstAttemptedAt.getTime() >= policy.earlySearchAfterMs) {
    return { kind: 'early_search' };
  }
  return { kind: 'create' };
}

// ── Reading answers ──────────────────────────────────────────────────────────────────────────────

/** PaymentIntent status → operation status. Only `succeeded` is success; a found PI is not a paid one. */
export function statusOfPaymentIntent(paymentIntentStatus: string): OperationStatus {
  if (paymentIntentStatus === 'succeeded') return 'succeeded';
  if (paymentIntentStatus === 'canceled' || paymentIntentStatus === 'requires_payment_method') return 'failed';
  // processing, requires_action, requires_capture, requires_confirmation, anything new: not settled yet.
  return 'unknown';
}

/** What the engine writes after an attempt. */
export interface Outcome {
  readonly status: OperationStatus;
  readonly externalId: string | null;
  /** Non-null: the operation waits for a human; the reconciler leaves it alone. */
  readonly reviewReason: string | null;
  /** When to try again; null when final or in review. */
  readonly retryAfterMs: number | null;
  readonly error: string | null;
  readonly errorClass: string | null;
  readonly errorCode: string | null;
  /** Evidence for the audit trail (search hits, HTTP status, request id). Never secrets. */
  readonly detail: Readonly<Record<string, unknown>>;
}

/** Exponential backoff with "equal jitter": at least half the step, capped. attempt ≥ 1. */
export function backoffDelay(attempt: number, backoff: Backoff, random: () => number = Math.random): number {
  const exponent = Math.min(Math.max(attempt, 1) - 1, 30);
  const step = Math.min(backoff.capMs, backoff.baseMs * 2 ** exponent);
  return Math.round(step / 2 + random() * (step / 2));
}

interface Context {
  readonly op: ClaimedOperation;
  readonly policy: EnginePolicy;
  readonly random: () => number;
}

const MAX_ERROR_TEXT = 500;

function failureFields(failure: GatewayFailure) {
  return {
    error: `${failure.errorClass}: ${failure.message}`.slice(0, MAX_ERROR_TEXT),
    errorClass: failure.errorClass,
    errorCode: failure.code ?? (failure.httpStatus !== undefined ? String(failure.httpStatus) : null),
  };
}

function failureDetail(failure: GatewayFailure): Record<string, unknown> {
  return {
    kind: failure.kind,
    ...(failure.httpStatus !== undefined ? { httpStatus: failure.httpStatus } : {}),
    ...(failure.httpAttempts !== undefined ? { httpAttempts: failure.httpAttempts } : {}),
    ...(failure.requestId ? { requestId: failure.requestId } : {}),
  };
}

/** A duration for a human: "23 h", "2.5 h", "12 min", "20 s". */
export function formatDuration(ms: number): string {
  if (ms >= HOUR) return `${Math.round((ms / HOUR) * 10) / 10} h`;
  if (ms >= MINUTE) return `${Math.round((ms / MINUTE) * 10) / 10} min`;
  return `${Math.round(ms / 100) / 10} s`;
}

/** The same status, tried again later: nothing was learnt. */
function stayOpen(ctx: Context, failure: GatewayFailure, backoff: Backoff, status: OperationStatus = ctx.op.status): Outcome {
  return {
    status,
    externalId: null,
    reviewReason: null,
    retryAfterMs: backoffDelay(ctx.op.attempts + 1, backoff, ctx.random),
    ...failureFields(failure),
    detail: failureDetail(failure),
  };
}

function toReview(reason: string, detail: Record<string, unknown>, failure?: GatewayFailure, externalId: string | null = null): Outcome {
  return {
    status: 'unknown',
    externalId,
    reviewReason: reason,
    retryAfterMs: null,
    ...(failure ? failureFields(failure) : { error: null, errorClass: null, errorCode: null }),
    detail: { ...detail, ...(failure ? failureDetail(failure) : {}) },
  };
}

/**
 * A failure that teaches nothing about the operation itself (throttled, misconfigured, unreachable).
 * `notExecutedStatus`: the status after a 429 / 401 / 403 (the operation's own, unless that answer
 * cannot prove nothing was executed).
 */
function transientFailure(ctx: Context, failure: GatewayFailure, ambiguousStatus: OperationStatus, notExecutedStatus: OperationStatus = ctx.op.status): Outcome {
  switch (failure.kind) {
    case FailureKind.rateLimited:
      return stayOpen(ctx, failure, ctx.policy.backoff.rateLimited, notExecutedStatus);
    case FailureKind.authentication:
    case FailureKind.permission:
      return stayOpen(ctx, failure, ctx.policy.backoff.configuration, notExecutedStatus);
    default:
      return stayOpen(ctx, failure, ctx.policy.backoff.ambiguous, ambiguousStatus);
  }
}

/** A PaymentIntent that Stripe says belongs to this operation: settle by its status. */
export function fromPaymentIntent(ctx: Context, pi: PaymentIntentView, detail: Record<string, unknown> = {}): Outcome {
  const { op } = ctx;
  const mismatch: string[] = [];
  if (pi.metadata.operation_id !== undefined && pi.metadata.operation_id !== op.id) mismatch.push('metadata.operation_id');
  if (pi.amount !== op.amount) mismatch.push('amount');
  if (pi.currency !== op.currency) mismatch.push('currency');
  if (mismatch.length > 0) {
    return toReview(`PaymentIntent ${pi.id} does not match the operation (${mismatch.join(', ')}); not adopted`,
      { ...detail, paymentIntent: { id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency } },
    );
  }
  const status = statusOfPaymentIntent(pi.status);
  const base = { externalId: pi.id, error: null, errorClass: null, errorCode: null };
  if (status !== 'unknown') {
    return { ...base, status, reviewReason: null, retryAfterMs: null, detail: { ...detail, paymentIntentStatus: pi.status } };
  }
  const age = op.claimedAt.getTime() - op.firstAttemptedAt.getTime();
  if (age >= ctx.policy.unsettledReviewAfterMs) {
    return toReview(`PaymentIntent ${pi.id} is still ${pi.status} ${formatDuration(age)} after the first attempt`,
      { ...detail, paymentIntentStatus: pi.status },
      undefined,
      pi.id,
    );
  }
  return {
    ...base,
    status: 'unknown',
    reviewReason: null,
    retryAfterMs: backoffDelay(op.attempts + 1, ctx.policy.backoff.unsettled, ctx.random),
    detail: { ...detail, paymentIntentStatus: pi.status },
  };
}

/** The answer to a create sent with the operation's key. */
export function decideCreate(ctx: Context, result: GatewayResult<PaymentIntentView>): Outcome {
  if (result.ok) return fromPaymentIntent(ctx, result.value);
  const failure = result.failure;
  switch (failure.kind) {
    case FailureKind.declined:
      // Executed and refused. Final; Stripe is never asked again for this operation.
      return {
        status: 'failed',
        externalId: failure.paymentIntent?.id ?? null,
        reviewReason: null,
        retryAfterMs: null,
        ...failureFields(failure),
        detail: failureDetail(failure),
      };
    case FailureKind.invalidRequest:
    case FailureKind.notFound:
      // Refused before execution (bad customer, bad parameters): nothing was charged. Final.
      return { status: 'failed', externalId: null, reviewReason: null, retryAfterMs: null, ...failureFields(failure), detail: failureDetail(failure) };
    case FailureKind.idempotencyMisuse:
      return toReview(`Stripe rejected the idempotency key ${idempotencyKey(ctx.op.id, ctx.op.keyGeneration)} as reused with other parameters: a bug in key use (${failure.message.slice(0, 200)})`,
        {},
        failure,
      );
    default:
      // Ambiguous → unknown, retried with the SAME key. 429 / 401 / 403 come before Stripe's
      // idempotency layer and prove only that THEIR attempt was not executed: status kept only when
      // it was certainly the call's sole HTTP attempt; after an SDK retry an earlier attempt may have
      // executed and lost its answer, so the operation is unknown (and the ambiguous path's evidence applies).
      return transientFailure(ctx, failure, 'unknown', failure.httpAttempts === 1 ? ctx.op.status : 'unknown');
  }
}

/** The answer to a retrieve of the PaymentIntent we hold the id of. */
export function decideRetrieve(ctx: Context, paymentIntentId: string, result: GatewayResult<PaymentIntentView>): Outcome {
  if (result.ok) return fromPaymentIntent(ctx, result.value);
  const failure = result.failure;
  if (failure.kind === FailureKind.notFound || failure.kind === FailureKind.invalidRequest || failure.kind === FailureKind.idempotencyMisuse) {
    return toReview(`retrieving PaymentIntent ${paymentIntentId} failed: ${failure.errorClass} ${failure.code ?? ''}`.trim(), {}, failure, paymentIntentId);
  }
  // A read changes nothing at Stripe: whatever went wrong, the status stays as it was.
  return transientFailure(ctx, failure, ctx.op.status);
}

function hitsEvidence(hits: readonly PaymentIntentView[]) {
  return hits.map((pi) => ({ id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency }));
}

/**
 * After the key window: a create could execute anew, so Search decides. Exactly one hit is adopted
 * and settled by its status (found ≠ paid); zero or several go to a human with the evidence.
 */
export function decideSearch(ctx: Context, result: GatewayResult<PaymentIntentView[]>): Outcome {
  if (!result.ok) return transientFailure(ctx, result.failure, ctx.op.status);
  const hits = result.value;
  const since = ctx.op.firstAttemptedAt.toISOString();
  if (hits.length === 1) return fromPaymentIntent(ctx, hits[0]!, { searchHits: hitsEvidence(hits) });
  const what =
    hits.length === 0
      ? 'found no PaymentIntent (not proof that none exists)'
      : `found ${hits.length} PaymentIntents (${hits.map((pi) => `${pi.id} ${pi.status}`).join(', ')})`;
  return toReview(`key window expired (first attempt ${since}, window ${formatDuration(ctx.policy.keyWindowMs)}); Search by metadata.operation_id ${what}`,
    { searchHits: hitsEvidence(hits) },
  );
}

/**
 * Inside the window, for an operation that stayed ambiguous: one hit is adopted; no hit (or a failed
 * search) proves nothing and the attempt goes on with a create under the same key; several hits
 * for one operation cannot be explained by the key layer and go to a human.
 */
export function decideEarlySearch(ctx: Context, result: GatewayResult<PaymentIntentView[]>): Outcome | 'create' {
  if (!result.ok) return 'create';
  const hits = result.value;
  if (hits.length === 0) return 'create';
  if (hits.length === 1) return fromPaymentIntent(ctx, hits[0]!, { searchHits: hitsEvidence(hits), earlySearch: true });
  return toReview(`Search found ${hits.length} PaymentIntents for one operation inside its key window (${hits.map((pi) => `${pi.id} ${pi.status}`).join(', ')})`,
    { searchHits: hitsEvidence(hits), earlySearch: true },
  );
}

export type DecisionContext = Context;
