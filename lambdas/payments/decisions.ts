// The life of an operation as pure decisions: derive the key, judge the key window, choose the next
// step, read the answer, schedule the next attempt. No I/O here — every branch is tested exhaustively
// in test/decisions.test.ts, and the engine is thin I/O around these functions.
import { FailureKind, type GatewayFailure, type GatewayResult, type ListAnswer } from './gateway.ts';
import {
  REMEDY_REFUND_ID_PREFIX,
  isAuthorizationKind,
  paymentIntentOfRefund,
  type ClaimedOperation,
  type Operation,
  type OperationKind,
  type OperationStatus,
  type PaymentIntentView,
} from './types.ts';

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
   * How long an outcome event written with an outcome is kept from the outbox relay while the writer
   * publishes it at once (and how long a relay keeps the rows it claimed): a writer that dies after
   * its commit leaves its events to the relay when this runs out. Longer than one PutEvents call.
   */
  readonly publishLeaseMs: number;
  /**
   * An ambiguous operation older than this is looked up by Search before the next create: a 500
   * is replayed for the key's life, so only Search can show that the charge exists after all.
   * Search lags ("usually within a minute"), so it is not asked sooner.
   */
  readonly earlySearchAfterMs: number;
  /**
   * A PaymentIntent still processing / requiring action this long after the first send goes to a
   * human — a card's, or one whose payment method type is not known (UNSETTLED_REVIEW_AFTER_MS).
   */
  readonly unsettledReviewAfterMs: number;
  /**
   * The same bound for the payment method types that Stripe settles in days
   * (UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT, …_US_BANK_ACCOUNT): such a PaymentIntent is `processing`
   * for that long as a matter of course, and only later than that is it a human's business.
   */
  readonly unsettledReviewAfterMsByPaymentMethodType: Readonly<Record<string, number>>;
  /**
   * AMBIGUOUS_RESOLUTION. `auto`: an ambiguous create without a PaymentIntent id is settled by List
   * evidence (real time), and re-issued under a new key generation once List proved twice that
   * nothing exists. `review`: the path before List — retries with the same key, an early Search,
   * then Search after the key window and a human for anything Search cannot show.
   */
  readonly ambiguousResolution: 'auto' | 'review';
  /** Same-key re-sends of an ambiguous create (a lost answer is replayed at once) before List is asked instead. */
  readonly sameKeyResends: number;
  /** List is asked no sooner than this after the last send: covers Stripe-side processing of an in-flight request. */
  readonly listSettleMs: number;
  /** The list's `created` range is the send window widened by this on each side (clocks, processing). */
  readonly listWindowMarginMs: number;
  /** A re-issue needs two proofs of absence at least this far apart… */
  readonly proofSpacingMs: number;
  /** …the second at least this long after the last send. */
  readonly reissueAfterLastSendMs: number;
  /** Automatic re-issues per operation; once spent, a further proven absence goes to a human. */
  readonly maxAutoReissues: number;
  /**
   * REFUND_AUTO_REISSUE. A second Refund cannot be taken back (a second charge can: the duplicate
   * remedy refunds it), so a refund whose absence List proved goes to a human by default instead of
   * being re-issued by the machine; `true` lets the machine re-issue refunds too, under the watch.
   */
  readonly refundAutoReissue: boolean;
  /**
   * The watch over a re-issued operation (lambdas/payments/watch.ts): an older key generation's
   * request may still be committed by Stripe after the proofs of absence. Its first look, this long
   * after the re-issue…
   */
  readonly watchFirstAfterMs: number;
  /**
   * …and its last, this long after the retired generation's first send: once that key has aged past
   * Stripe's retention (at least 24 h), nothing more is expected from it.
   */
  readonly watchFinalAfterFirstSendMs: number;
  /**
   * Search failures that do not pass by themselves (400 unsupported query, 403 key without Search,
   * 404) before the operation goes to a human with the reason, instead of retrying forever. For a
   * kind without Search (a refund), its Lists failing that way.
   */
  readonly maxSearchFailures: number;
  readonly backoff: {
    /** Ambiguous answers: retry with the same key. */
    readonly ambiguous: Backoff;
    /** 429: Stripe asked us to slow down. */
    readonly rateLimited: Backoff;
    /** 401 / 403: someone must fix the key; don't hammer Stripe meanwhile. */
    readonly configuration: Backoff;
    /** processing / requires_action: settled later by retrieve. */
    readonly unsettled: Backoff;
    /** A Stripe event that could not be applied (Stripe unreachable, an unexpected error): looked at again. */
    readonly inbox: Backoff;
  };
}

const SECOND = 1000;
const MINUTE = 60 * SECOND;
const HOUR = 60 * MINUTE;

export const DEFAULT_POLICY: EnginePolicy = {
  keyWindowMs: 23 * HOUR,
  leaseMs: 2 * MINUTE,
  publishLeaseMs: MINUTE,
  earlySearchAfterMs: 10 * MINUTE,
  unsettledReviewAfterMs: 7 * 24 * HOUR,
  unsettledReviewAfterMsByPaymentMethodType: {
    // SEPA Direct Debit: "it can take up to 14 business days" to learn whether a payment succeeded
    // (docs.stripe.com/payments/sepa-debit), 7–8 on average: 14 business days are 20 calendar days,
    // 22 with the two TARGET holidays of Easter; a margin on top.
    sepa_debit: 24 * 24 * HOUR,
    // ACH Direct Debit: up to 4 business days to confirm success or failure
    // (docs.stripe.com/payments/ach-direct-debit): 6 calendar days over a weekend, 7 with a holiday.
    us_bank_account: 10 * 24 * HOUR,
  },
  ambiguousResolution: 'auto',
  sameKeyResends: 2,
  listSettleMs: 2 * MINUTE,
  listWindowMarginMs: 5 * MINUTE,
  proofSpacingMs: 10 * MINUTE,
  reissueAfterLastSendMs: 15 * MINUTE,
  maxAutoReissues: 2,
  refundAutoReissue: false,
  watchFirstAfterMs: 1 * HOUR,
  watchFinalAfterFirstSendMs: 25 * HOUR,
  maxSearchFailures: 3,
  backoff: {
    ambiguous: { baseMs: 2 * SECOND, capMs: 15 * MINUTE },
    rateLimited: { baseMs: 5 * SECOND, capMs: 5 * MINUTE },
    configuration: { baseMs: 1 * MINUTE, capMs: 30 * MINUTE },
    unsettled: { baseMs: 30 * SECOND, capMs: 1 * HOUR },
    inbox: { baseMs: 1 * SECOND, capMs: 15 * MINUTE },
  },
};

/**
 * How long a PaymentIntent may stay unsettled before a human is asked: by its payment method's type
 * when the answer told it (a SEPA debit takes days as a matter of course), else the card bound.
 */
export function unsettledBoundFor(policy: Pick<EnginePolicy, 'unsettledReviewAfterMs' | 'unsettledReviewAfterMsByPaymentMethodType'>, pi: Pick<PaymentIntentView, 'paymentMethodType'>): number {
  const type = pi.paymentMethodType;
  return (type ? policy.unsettledReviewAfterMsByPaymentMethodType[type] : undefined) ?? policy.unsettledReviewAfterMs;
}

const SLOW_REVIEW = / is still (processing|requires_action|pending) .+ after the first attempt(?: \(bound for [a-z_]+: .+\))?$/;

/**
 * Whether an operation is in review ONLY because its object was still unsettled past its bound (the
 * reason fromPaymentIntent writes): Stripe's final answer about that same object then settles it, as
 * a retrieve would have, had the bound been longer. Any other review waits for its human.
 */
export function isSlowReview(reviewReason: string | null): boolean {
  return reviewReason !== null && SLOW_REVIEW.test(reviewReason);
}

/** When the watch a re-issue starts looks (REISSUE_WATCH_FIRST_AFTER_MS, REISSUE_WATCH_FINAL_AFTER_MS; watch.ts). */
export interface WatchTimings {
  readonly firstAfterMs: number;
  readonly finalAfterFirstSendMs: number;
}

/** The watch timings of a (partial) policy: an operator's re-issue is watched like the engine's. */
export function watchTimings(policy: Partial<EnginePolicy> = {}): WatchTimings {
  return {
    firstAfterMs: policy.watchFirstAfterMs ?? DEFAULT_POLICY.watchFirstAfterMs,
    finalAfterFirstSendMs: policy.watchFinalAfterFirstSendMs ?? DEFAULT_POLICY.watchFinalAfterFirstSendMs,
  };
}

// ── Keys and metadata ────────────────────────────────────────────────────────────────────────────

/**
 * Deterministic from the durable operation id, so every retry — after a crash, in another
 * process, days later — sends the same key. No personal data; well under Stripe's 255 characters.
 * A new generation exists only when an operator proved that nothing was charged.
 */
export function idempotencyKey(operationId: string, keyGeneration: number): string {
  return keyGeneration === 0 ? `payment-op:${operationId}` : `payment-op:${operationId}:g${keyGeneration}`;
}

/**
 * A capture's or cancel's key: the operation's, per recorded send (`attempts`). A send whose answer
 * was lost is re-sent — by a claim that finds it unrecorded — under the SAME key, so Stripe replays
 * it; a recorded send's successor gets a new one. Stripe stores a 500 under its key and replays it
 * for 24 hours (docs.stripe.com/api/idempotent_requests), and a capture sent again under its first
 * key would only read that 500 back while the PaymentIntent shows nothing captured. A new key is
 * safe here as it is nowhere else: Stripe captures or cancels a PaymentIntent once and refuses every
 * later try (payment_intent_unexpected_state), so no key, old or new, can act twice.
 */
export function authorizationKey(op: Pick<ClaimedOperation, 'id' | 'keyGeneration' | 'attempts'>): string {
  return `${idempotencyKey(op.id, op.keyGeneration)}:s${op.attempts}`;
}

/** What Search finds the PaymentIntent by once the key may be gone. */
export function paymentIntentMetadata(op: Pick<ClaimedOperation, 'id' | 'orderId' | 'keyGeneration'>): Record<string, string> {
  return { operation_id: op.id, order_id: op.orderId, key_generation: String(op.keyGeneration) };
}

/** A refund's metadata: the charge's, plus the producer's refund id. */
export function refundMetadata(op: Pick<ClaimedOperation, 'id' | 'orderId' | 'keyGeneration' | 'refund'>): Record<string, string> {
  return { ...paymentIntentMetadata(op), ...(op.refund ? { refund_id: op.refund.refundId } : {}) };
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
  | { readonly kind: 'early_search' }
  /** Real-time List of the customer's PaymentIntents in the send window: adopt, review, or prove absence. */
  | { readonly kind: 'list' }
  /** No call: the settle delay since the last send has not passed; due again at `untilMs` (database clock). */
  | { readonly kind: 'wait'; readonly untilMs: number };

/** The audit trail's step of an attempt: a Step, or a refund settled before any call (decidePrecondition). */
export type AttemptStep = Step['kind'] | 'precondition';

/**
 * What the audit trail says about an ambiguous operation, summarised for the decisions
 * (lambdas/payments/evidence.ts reads it from payment_operation_events). Plain data.
 */
export interface EvidenceHistory {
  /** Earliest moment a request for this operation may have been sent (any key generation). */
  readonly firstSendAt: Date | null;
  /** Latest moment a request that may have created a PaymentIntent was still running (any generation). */
  readonly lastSendAt: Date | null;
  /** Creates recorded under the current key generation. */
  readonly sameKeySends: number;
  /**
   * The last create under the current generation was answered by Stripe with a 500, which the key
   * replays for its life ("including 500 errors", Stripe's idempotency docs): re-sending it teaches
   * nothing, so List is asked without the same-key re-sends.
   */
  readonly keyReplaysError?: boolean;
  /**
   * The last create under the current generation was answered `409 idempotency_key_in_use`: Stripe
   * says the first request with the key is still running. Until it answers with its stored result,
   * nothing about the key is known, so no absence can be proven: the same key is sent again.
   */
  readonly keyInUse?: boolean;
  /**
   * Lists under the current generation that failed in a way that passes by itself (429, 5xx, lost),
   * asked after the key window ended: bounded by MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW, then a human.
   */
  readonly transientListFailuresAfterWindow?: number;
  /** Absences proven by List under the current generation AFTER the last send, oldest first. */
  readonly proofs: readonly Date[];
  /** Automatic re-issues so far (all generations). */
  readonly autoReissues: number;
  /** List failed in a way that does not pass (400 / 403 / 404) under the current generation. */
  readonly listUnavailable: boolean;
  /** Searches that failed that way under the current generation. */
  readonly permanentSearchFailures: number;
  /**
   * Lists that failed that way under the current generation. Counted for kinds without Search (a
   * refund): for them List is the only evidence, so its failures are bounded like Search's.
   */
  readonly permanentListFailures?: number;
  /**
   * Lists under the current generation that stopped before their end for lack of request budget
   * (each claim starts a list from its first page again): bounded by MAX_INCOMPLETE_LISTS.
   */
  readonly incompleteLists?: number;
  /**
   * The last create under the current generation was refused in a way evidence must settle (a refund's
   * charge_already_refunded / amount_too_large): List is asked at once, and absence means the refusal
   * stands — final failed with its code, never a re-issue.
   */
  readonly refusal?: string | null;
}

/** Whether chooseStep needs the audit trail for this claim (only ambiguous operations do: a rare, extra read). */
export function needsEvidence(op: ClaimedOperation, policy: EnginePolicy = DEFAULT_POLICY): boolean {
  if (op.externalId !== null) return false;
  return op.status === 'unknown' || !withinKeyWindow(op.firstAttemptedAt, op.claimedAt, policy);
}

export function chooseStep(op: ClaimedOperation, policy: EnginePolicy = DEFAULT_POLICY, history: EvidenceHistory | null = null): Step {
  // A capture or cancel acts on a PaymentIntent we hold: its state at Stripe (real time) is the
  // evidence, so an answer lost is learnt by a retrieve, never by Search or List; and a send is safe
  // at any time, under any key — Stripe captures or cancels a PaymentIntent once and refuses the
  // second (payment_intent_unexpected_state). Sent while nothing is known to have happened, else read.
  if (KIND_RULES[op.kind].actsOnPaymentIntent) {
    const paymentIntentId = op.charge?.paymentIntentId ?? null;
    if (op.status === 'unknown' && paymentIntentId !== null) return { kind: 'retrieve', paymentIntentId };
    return { kind: 'create' };
  }
  // Stripe said the first request with this key is still running (409 idempotency_key_in_use): only
  // the same key can learn what it did — once it finishes, Stripe replays its stored result. No List
  // or Search may stand in for that answer meanwhile: what they show is not final.
  if (op.externalId === null && op.status === 'unknown' && history?.keyInUse && withinKeyWindow(op.firstAttemptedAt, op.claimedAt, policy)) return { kind: 'create' };
  const step = chooseStepOfAnyKind(op, policy, history);
  // Refunds have no Search API: List (real time, for the PaymentIntent's whole life) stands in for
  // Search after the window, and inside it the same key is simply re-sent.
  if (!KIND_RULES[op.kind].searchable) {
    if (step.kind === 'search') return { kind: 'list' };
    // List failed for good and there is no Search to turn to: a further same-key send would only
    // replay what the key holds. List again, bounded by maxSearchFailures (decideList), then a human.
    if (history?.listUnavailable && (step.kind === 'early_search' || step.kind === 'create') && op.status === 'unknown') return { kind: 'list' };
    if (step.kind === 'early_search') return { kind: 'create' };
  }
  return step;
}

function chooseStepOfAnyKind(op: ClaimedOperation, policy: EnginePolicy, history: EvidenceHistory | null): Step {
  // Stripe already made it: a re-send would only replay the first answer, so read the current state.
  if (op.externalId !== null) return { kind: 'retrieve', paymentIntentId: op.externalId };
  const inWindow = withinKeyWindow(op.firstAttemptedAt, op.claimedAt, policy);
  // List cannot answer (or is switched off): the Search path.
  if (policy.ambiguousResolution === 'review' || history === null || history.listUnavailable) {
    // The claim set first_attempted_at, so "pending" here may still mean "sent, then crashed".
    if (!inWindow) return { kind: 'search' };
    if (op.status === 'unknown' && op.claimedAt.getTime() - op.firstAttemptedAt.getTime() >= policy.earlySearchAfterMs) {
      return { kind: 'early_search' };
    }
    return { kind: 'create' };
  }
  // After the window List is the evidence (real time); nothing is sent under the old key.
  if (!inWindow) return { kind: 'list' };
  if (op.status !== 'unknown') return { kind: 'create' };
  // A lost answer is replayed by a re-send with the same key: the cheapest evidence, tried first.
  if (history.proofs.length === 0 && !history.keyReplaysError && !history.refusal && history.sameKeySends <= policy.sameKeyResends) return { kind: 'create' };
  // Then no more sends: List, once whatever the last send may have started at Stripe has settled.
  const listFrom = (history.lastSendAt?.getTime() ?? Number.NEGATIVE_INFINITY) + policy.listSettleMs;
  if (op.claimedAt.getTime() < listFrom) return { kind: 'wait', untilMs: listFrom };
  return { kind: 'list' };
}

// ── Reading answers ──────────────────────────────────────────────────────────────────────────────

/**
 * PaymentIntent status → operation status. Only `succeeded` is success; a found PI is not a paid one
 * — but for a charge that only authorizes (captureMethod 'manual'), `requires_capture` is what it asked
 * for: the amount is held (docs.stripe.com/payments/place-a-hold-on-a-payment-method).
 */
export function statusOfPaymentIntent(paymentIntentStatus: string, op?: Pick<Operation, 'captureMethod'>): OperationStatus {
  if (paymentIntentStatus === 'succeeded') return 'succeeded';
  if (paymentIntentStatus === 'requires_capture' && op?.captureMethod === 'manual') return 'succeeded';
  if (paymentIntentStatus === 'canceled' || paymentIntentStatus === 'requires_payment_method') return 'failed';
  // processing, requires_action, requires_capture, requires_confirmation, anything new: not settled yet.
  return 'unknown';
}

/**
 * Refund status → operation status (docs.stripe.com/api/refunds/object: pending, requires_action,
 * succeeded, failed, canceled). pending / requires_action / anything new: settled later by retrieve.
 */
export function statusOfRefund(refundStatus: string): OperationStatus {
  if (refundStatus === 'succeeded') return 'succeeded';
  if (refundStatus === 'failed' || refundStatus === 'canceled') return 'failed';
  return 'unknown';
}

/**
 * What a kind of operation brings to the shared decisions: pure data and pure functions. The I/O
 * half of a kind (which endpoint creates, retrieves and lists its object) is lambdas/payments/kinds.ts.
 * A third kind adds one entry here and one adapter there; nothing else in the decisions changes.
 */
export interface KindRules {
  /** The Stripe object's status → the operation's (`op`: the operation's parameters, when known). */
  readonly statusOf: (status: string, op?: Pick<Operation, 'captureMethod'>) => OperationStatus;
  /**
   * The kind acts on a PaymentIntent we already hold (a capture, a cancel) instead of making an
   * object: no key window, no Search, no List — its evidence is the PaymentIntent (chooseStep).
   */
  readonly actsOnPaymentIntent: boolean;
  /** Whether Stripe offers Search for the object (charges: yes; refunds: no, List stands in). */
  readonly searchable: boolean;
  /** What the List step judges the kind's objects by. */
  readonly listSubject: (op: ClaimedOperation) => ListSubject;
  /** The filter of the kind's list endpoint for this operation. */
  readonly listScope: (op: ClaimedOperation) => Record<string, string>;
  /** The object's name in reasons an operator reads. */
  readonly objectName: string;
  /**
   * A refusal that may be caused by this very operation's earlier execution (a refund that did go
   * through, answer lost, then re-issued): not read as final, but settled by List evidence.
   */
  readonly settleRefusalByEvidence: (failure: GatewayFailure) => boolean;
}

/**
 * Refusals of a refund create that depend on what the PaymentIntent already has refunded
 * (docs.stripe.com/error-codes: charge_already_refunded; amount_too_large, which Stripe has been seen
 * to send with an empty code — param `amount` on a 400 is the stable part, docs/fake-stripe.md).
 */
export function isRefundRefusal(failure: GatewayFailure): boolean {
  return refusalCode(failure) !== null;
}

/**
 * The refusal's Stripe code: its own, or `amount_too_large` for the code-less form of the same
 * refusal (no code, `param: amount`; docs/fake-stripe.md) — the documented code, so that error_code and
 * the published event's `reason` only ever hold Stripe codes. Null when it is no such refusal.
 */
function refusalCode(failure: GatewayFailure): string | null {
  if (failure.kind !== FailureKind.invalidRequest) return null;
  if (failure.code === 'charge_already_refunded' || failure.code === 'amount_too_large') return failure.code;
  return failure.code === undefined && failure.param === 'amount' ? 'amount_too_large' : null;
}

/** What an authorization kind's answer is read by: its PaymentIntent's status for the operation. */
const authorizationRules = (objectName: string): KindRules => ({
  statusOf: () => 'unknown',
  actsOnPaymentIntent: true,
  searchable: false,
  listSubject: (op) => ({ ownerKey: 'operation_id', relatedBy: { operation_id: op.id }, expected: {} }),
  listScope: () => ({}),
  objectName,
  settleRefusalByEvidence: () => false,
});

export const KIND_RULES: Readonly<Record<OperationKind, KindRules>> = {
  charge: {
    statusOf: statusOfPaymentIntent,
    actsOnPaymentIntent: false,
    searchable: true,
    listSubject: (op) => chargeListSubject(op),
    listScope: (op) => ({ customer: op.customerId }),
    objectName: 'PaymentIntent',
    settleRefusalByEvidence: () => false,
  },
  refund: {
    statusOf: statusOfRefund,
    actsOnPaymentIntent: false,
    searchable: false,
    listSubject: (op) => refundListSubject(op),
    listScope: (op) => ({ payment_intent: paymentIntentOfRefund(op, op.charge?.paymentIntentId ?? null) ?? '' }),
    objectName: 'Refund',
    settleRefusalByEvidence: isRefundRefusal,
  },
  capture: authorizationRules('capture of PaymentIntent'),
  cancel_authorization: authorizationRules('cancel of PaymentIntent'),
};

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
  /**
   * True: absence is proven enough (judgeAutoReissue) — the write re-issues the operation under
   * key_generation + 1 (pending, due now), audited as `auto_reissued` and announced as an event.
   */
  readonly reissue?: boolean;
  /**
   * The duplicate-charge remedy decided with a success (judgeListedCharges): the refund operations
   * of the extra PaymentIntents, made by the same statement that records the success.
   */
  readonly remedies?: readonly DuplicateRemedy[];
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
  /** The audit trail's evidence, when chooseStep needed it (needsEvidence). */
  readonly history?: EvidenceHistory | null;
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
    ...(failure.attemptsRefused !== undefined ? { attemptsRefused: failure.attemptsRefused } : {}),
    ...(failure.stripeShouldRetry !== undefined ? { stripeShouldRetry: failure.stripeShouldRetry } : {}),
    ...(failure.code === 'lock_timeout' ? { lockTimeout: true } : {}),
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
 * The duplicate-charge remedy's refund (op.refund.paymentIntentId: the extra PaymentIntent it gives
 * back) would end `failed` — its Refund failed or was canceled at Stripe, or Stripe refused to make
 * it (the extra charge disputed: charge_disputed; partly refunded by hand: amount_too_large). The
 * extra PaymentIntent is still charged, and no machine can give the money back another way. Final
 * `failed` would leave a double charge no one is asked about (the promise: the net amount is the amount
 * asked): a human decides (docs/runbook.md, the duplicate-charge remedy). The one rule for every such
 * end; `what` names it, given the extra PaymentIntent. Null for any other operation: its `failed` stands.
 */
function remedyStands(op: ClaimedOperation, what: (extraPaymentIntentId: string) => string, detail: Record<string, unknown>, failure?: GatewayFailure, externalId: string | null = null): Outcome | null {
  const extra = op.kind === 'refund' ? op.refund?.paymentIntentId : null;
  if (!extra) return null;
  return toReview(`the duplicate-charge remedy's ${what(extra)}: the extra charge stands — return the money another way, then resolve`, detail, failure, externalId);
}

/** A refusal of the remedy's refund create, as the operator reads it: the code and Stripe's message. */
function refusalText(failure: GatewayFailure): string {
  return `${failure.code ?? `${failure.errorClass}${failure.param ? ` param ${failure.param}` : ''}`}: ${failure.message.slice(0, 200)}`;
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
  if (isAuthorizationKind(op.kind)) return fromAuthorizedPaymentIntent(ctx, pi, detail);
  const mismatch: string[] = [];
  if (pi.metadata.operation_id !== undefined && pi.metadata.operation_id !== op.id) mismatch.push('metadata.operation_id');
  if (pi.amount !== op.amount) mismatch.push('amount');
  if (pi.currency !== op.currency) mismatch.push('currency');
  if (mismatch.length > 0) {
    return toReview(`${KIND_RULES[op.kind].objectName} ${pi.id} does not match the operation (${mismatch.join(', ')}); not adopted`,
      { ...detail, paymentIntent: { id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency } },
    );
  }
  const status = KIND_RULES[op.kind].statusOf(pi.status, op);
  const base = { externalId: pi.id, error: null, errorClass: null, errorCode: null };
  if (status === 'failed') {
    const remedy = remedyStands(op, (extra) => `Refund ${pi.id} of ${extra} is ${pi.status} at Stripe`, { ...detail, paymentIntentStatus: pi.status }, undefined, pi.id);
    if (remedy) return remedy;
  }
  if (status !== 'unknown') {
    return { ...base, status, reviewReason: null, retryAfterMs: null, detail: { ...detail, paymentIntentStatus: pi.status } };
  }
  const age = op.claimedAt.getTime() - op.firstAttemptedAt.getTime();
  const bound = unsettledBoundFor(ctx.policy, pi);
  if (age >= bound) {
    const which = pi.paymentMethodType ? ` (bound for ${pi.paymentMethodType}: ${formatDuration(bound)})` : '';
    return toReview(`${KIND_RULES[op.kind].objectName} ${pi.id} is still ${pi.status} ${formatDuration(age)} after the first attempt${which}`,
      { ...detail, paymentIntentStatus: pi.status, ...(pi.paymentMethodType ? { paymentMethodType: pi.paymentMethodType } : {}) },
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

/**
 * Stripe's 409 `idempotency_key_in_use`: "another in-progress request using this Idempotent Key" —
 * the first request with the key has not finished at Stripe (docs.stripe.com/error-codes
 * idempotency_key_in_use). stripe-node reads a 409 as a StripeAPIError; the code tells it apart
 * from other 409s (a lock timeout, `lock_timeout`, is not about the key).
 */
export function isKeyInUse(failure: GatewayFailure): boolean {
  return failure.httpStatus === 409 && failure.code === 'idempotency_key_in_use';
}

/**
 * A 429 / 401 / 403 call of which NO attempt can have executed: it was the call's only HTTP attempt,
 * or every attempt was answered 429 / 401 / 403 — what stripe-node's retries of a lock timeout
 * (`Stripe-Should-Retry: true`) look like. Any other attempt (a lost connection, a 500, a 409) may
 * have executed and lost its answer.
 */
export function nothingExecuted(failure: GatewayFailure): boolean {
  if (failure.httpAttempts === 1) return true;
  return failure.httpAttempts !== undefined && failure.attemptsRefused !== undefined && failure.attemptsRefused === failure.httpAttempts;
}

/** Stripe's own 500 (not a proxy's): stored with the key and replayed to every re-send of it. */
export function isReplayedError(failure: GatewayFailure): boolean {
  return failure.kind === FailureKind.ambiguous && failure.errorClass === 'StripeAPIError' && failure.httpStatus === 500;
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
      if (isAuthorizationKind(ctx.op.kind) && failure.code === 'payment_intent_unexpected_state') {
        // Captured, canceled or expired already — perhaps by this very operation's earlier send whose
        // answer was lost. The PaymentIntent in the error (else a retrieve) says which.
        if (failure.paymentIntent) return fromAuthorizedPaymentIntent(ctx, failure.paymentIntent, { refused: failure.code });
        return { ...transientFailure(ctx, failure, 'unknown', 'unknown'), detail: { ...failureDetail(failure), settleByRetrieve: true } };
      }
      if (KIND_RULES[ctx.op.kind].settleRefusalByEvidence(failure)) {
        // "Already refunded" / "more than is left" may be this operation's own refund, executed by an
        // earlier send whose answer was lost: List of the PaymentIntent's refunds decides, not a guess.
        return {
          status: 'unknown',
          externalId: null,
          reviewReason: null,
          retryAfterMs: ctx.policy.listSettleMs,
          ...failureFields(failure),
          detail: { ...failureDetail(failure), settleByList: true, refusal: refusalCode(failure), ...(failure.code === undefined ? { refusalWithoutCode: true } : {}) },
        };
      }
      // Refused before execution (bad customer, bad parameters): nothing was charged. Final — unless
      // it is the remedy's refund (the extra charge disputed, charge_disputed): then a human decides.
      return remedyStands(ctx.op, (extra) => `refund of ${extra} was refused by Stripe (${refusalText(failure)})`, { refused: failure.code ?? null }, failure) ??
        { status: 'failed', externalId: null, reviewReason: null, retryAfterMs: null, ...failureFields(failure), detail: failureDetail(failure) };
    case FailureKind.idempotencyMisuse:
      return toReview(`Stripe rejected the idempotency key ${idempotencyKey(ctx.op.id, ctx.op.keyGeneration)} as reused with other parameters: a bug in key use (${failure.message.slice(0, 200)})`,
        {},
        failure,
      );
    default: {
      // Ambiguous → unknown, retried with the SAME key. 429 / 401 / 403 come before Stripe's
      // idempotency layer and prove only that THEIR attempt was not executed: status kept only when
      // it was certainly the call's sole HTTP attempt; after an SDK retry an earlier attempt may have
      // executed and lost its answer, so the operation is unknown (and the ambiguous path's evidence applies).
      const outcome = transientFailure(ctx, failure, 'unknown', nothingExecuted(failure) ? ctx.op.status : 'unknown');
      // The key's first request is still running at Stripe: the same key again, soon (chooseStep), and
      // recorded as such — while it is the key's last answer, no absence can be proven (evidence.ts).
      if (isKeyInUse(failure)) return { ...outcome, detail: { ...outcome.detail, keyInUse: true } };
      // The last same-key send of the List path: the next claim is List's, due once the send settled.
      const sends = (ctx.history?.sameKeySends ?? 0) + 1;
      const lastSend = sends > ctx.policy.sameKeyResends || isReplayedError(failure);
      if (failure.kind === FailureKind.ambiguous && ctx.policy.ambiguousResolution === 'auto' && lastSend && !ctx.history?.listUnavailable) {
        return { ...outcome, retryAfterMs: Math.max(outcome.retryAfterMs ?? 0, ctx.policy.listSettleMs) };
      }
      return outcome;
    }
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
 * A failure of a read that will not pass by itself: 400 (a query this account cannot run, Search not
 * offered in its country), 403 (a restricted key without the permission), 404. Retrying the same read
 * teaches nothing; a bounded number of them sends the operation to a human with the reason.
 */
export function isPermanentReadFailure(failure: GatewayFailure): boolean {
  return failure.kind === FailureKind.invalidRequest || failure.kind === FailureKind.notFound || failure.kind === FailureKind.permission;
}

/**
 * After the key window: a create could execute anew, so Search decides. Exactly one hit is adopted
 * and settled by its status (found ≠ paid); zero or several go to a human with the evidence.
 * A Search that fails permanently is retried at most maxSearchFailures times, then a human is asked
 * why — never an open operation with no reason, retried forever.
 */
export function decideSearch(ctx: Context, result: GatewayResult<PaymentIntentView[]>): Outcome {
  const since = ctx.op.firstAttemptedAt.toISOString();
  const expired = `key window expired (first attempt ${since}, window ${formatDuration(ctx.policy.keyWindowMs)})`;
  if (!result.ok) {
    const failure = result.failure;
    if (!isPermanentReadFailure(failure)) return transientFailure(ctx, failure, ctx.op.status);
    const failures = (ctx.history?.permanentSearchFailures ?? 0) + 1;
    const evidence = { searchFailure: 'permanent', searchFailures: failures };
    if (failures >= ctx.policy.maxSearchFailures) {
      const list = ctx.history?.listUnavailable ? '; List is unavailable too' : '';
      return toReview(`${expired}; Search failed ${failures} times and will not pass by itself (${failure.errorClass} ${failure.httpStatus ?? ''} ${failure.code ?? ''}`.trimEnd() +
        `): check the key's permissions and whether Search is offered to this account${list}`,
        evidence,
        failure,
      );
    }
    const open = stayOpen(ctx, failure, ctx.policy.backoff.configuration);
    return { ...open, detail: { ...open.detail, ...evidence } };
  }
  const hits = result.value;
  if (hits.length === 1) return fromPaymentIntent(ctx, hits[0]!, { searchHits: hitsEvidence(hits) });
  const what =
    hits.length === 0
      ? 'found no PaymentIntent (not proof that none exists)'
      : `found ${hits.length} PaymentIntents (${hits.map((pi) => `${pi.id} ${pi.status}`).join(', ')})`;
  return toReview(`${expired}; Search by metadata.operation_id ${what}`,
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

// ── List evidence (real time) ────────────────────────────────────────────────────────────────────
//
// One step for every kind: list the objects a kind's list endpoint holds for the business effect's
// scope in its send window, then judge them by data the kind supplies (a ListSubject): which metadata
// names the effect, which fields must match. Charges: GET /v1/payment_intents?customer=…, matched
// on metadata.operation_id, amount, currency, customer. A refund kind supplies its own subject.

/** An object of a list, reduced to what the judgement compares. */
export interface ListedObject {
  readonly id: string;
  readonly status: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly fields: Readonly<Record<string, string | number | null | undefined>>;
}

export interface ListSubject {
  /** The metadata key that names the effect's owner (operation_id): only its own object is adoptable. */
  readonly ownerKey: string;
  /** metadata values that relate an object to this effect (operation_id, order_id): any one suffices. */
  readonly relatedBy: Readonly<Record<string, string>>;
  /** Fields an adoptable object must carry exactly. */
  readonly expected: Readonly<Record<string, string | number>>;
}

export type ListVerdict =
  | { readonly kind: 'adopt'; readonly object: ListedObject }
  /**
   * Several related objects, or one that does not match: a human decides, nothing is adopted.
   * `complete`: whether the list was read to its end (only then may "all of them charged" settle).
   */
  | { readonly kind: 'contradiction'; readonly reason: string; readonly related: readonly ListedObject[]; readonly complete: boolean }
  /** The list was read to its end and nothing in it relates to the effect. */
  | { readonly kind: 'absent' }
  /** The list was not read to its end: it proves nothing. */
  | { readonly kind: 'incomplete'; readonly pages: number };

/** Pure and kind-agnostic: what a complete real-time list says about one effect. */
export function judgeList(subject: ListSubject, answer: ListAnswer<ListedObject>): ListVerdict {
  const related = answer.items.filter((o) => Object.entries(subject.relatedBy).some(([key, value]) => o.metadata[key] === value));
  // Several objects for one effect are a contradiction wherever they were read (a human looks).
  if (related.length > 1) {
    return { kind: 'contradiction', reason: `${related.length} objects for one operation (${related.map((o) => `${o.id} ${o.status}`).join(', ')}); none adopted`, related, complete: answer.complete };
  }
  // A list cut short proves nothing — not absence, and not "only one": lists come newest first, so a
  // second object of the effect may sit on a page that was never read. Nothing is adopted from it.
  if (!answer.complete) return { kind: 'incomplete', pages: answer.pages };
  if (related.length === 1) {
    const only = related[0]!;
    const mismatch = [
      ...(only.metadata[subject.ownerKey] !== subject.relatedBy[subject.ownerKey] ? [`metadata.${subject.ownerKey}`] : []),
      ...Object.entries(subject.expected).filter(([field, value]) => only.fields[field] !== value).map(([field]) => field),
    ];
    if (mismatch.length === 0) return { kind: 'adopt', object: only };
    return { kind: 'contradiction', reason: `${only.id} does not match the operation (${mismatch.join(', ')}); not adopted`, related, complete: true };
  }
  return { kind: 'absent' };
}

/** The charge kind's subject and objects. */
export function chargeListSubject(op: Pick<ClaimedOperation, 'id' | 'orderId' | 'amount' | 'currency' | 'customerId'>): ListSubject {
  return {
    ownerKey: 'operation_id',
    relatedBy: { operation_id: op.id, order_id: op.orderId },
    expected: { amount: op.amount, currency: op.currency, customer: op.customerId },
  };
}

/**
 * The refund kind's subject: only its own operation_id relates a refund to it (the order's other
 * refunds carry the same order_id and are not contradictions), and amount and currency must match.
 */
export function refundListSubject(op: Pick<ClaimedOperation, 'id' | 'amount' | 'currency'>): ListSubject {
  return { ownerKey: 'operation_id', relatedBy: { operation_id: op.id }, expected: { amount: op.amount, currency: op.currency } };
}

export function paymentIntentListed(pi: PaymentIntentView): ListedObject {
  return { id: pi.id, status: pi.status, metadata: pi.metadata, fields: { amount: pi.amount, currency: pi.currency, customer: pi.customer } };
}

/** The list's `created` range in Unix seconds: the send window widened by the margin, rounded outwards. */
export interface ListWindow {
  readonly createdGte: number;
  readonly createdLte: number;
}

export function listWindow(op: ClaimedOperation, history: EvidenceHistory | null, policy: EnginePolicy = DEFAULT_POLICY): ListWindow {
  const first = Math.min(op.firstAttemptedAt.getTime(), history?.firstSendAt?.getTime() ?? Number.POSITIVE_INFINITY);
  const last = history?.lastSendAt?.getTime() ?? Number.NEGATIVE_INFINITY;
  // The window reaches the moment of the proof (the claim), not only the last send: a request Stripe
  // commits late, after the last send, exists when the List is asked and must be inside its range —
  // else waiting before the proof would buy nothing. The margin covers the clocks (the database's,
  // which dates the claim, and Stripe's, which dates `created`): LIST_WINDOW_MARGIN_MS ≥ the skew allowed.
  const end = Math.max(first, last, op.claimedAt.getTime());
  return {
    createdGte: Math.floor((first - policy.listWindowMarginMs) / 1000),
    createdLte: Math.ceil((end + policy.listWindowMarginMs) / 1000),
  };
}

export type ReissueVerdict =
  | { readonly kind: 'reissue' }
  /** Not yet: the next list is due at `nextProofAt` (database clock, ms). */
  | { readonly kind: 'prove_again'; readonly nextProofAt: number }
  | { readonly kind: 'review'; readonly reason: string };

/**
 * "May the machine re-issue now?", from the proofs of absence in the audit trail plus the one just
 * made. The operator's rules (review.ts: nothing that is or may become a charge, late enough after
 * the last send) made strict for a machine: two proofs at least proofSpacingMs apart, the second at
 * least reissueAfterLastSendMs after the last send, inside the key window, at most maxAutoReissues.
 */
export function judgeAutoReissue(op: ClaimedOperation, history: EvidenceHistory, provenAt: Date, policy: EnginePolicy = DEFAULT_POLICY): ReissueVerdict {
  if (policy.ambiguousResolution !== 'auto') return { kind: 'review', reason: 'AMBIGUOUS_RESOLUTION=review: a human decides every re-issue' };
  if (!withinKeyWindow(op.firstAttemptedAt, provenAt, policy)) {
    return { kind: 'review', reason: `the key window (${formatDuration(policy.keyWindowMs)}) has passed: the machine re-issues only inside it` };
  }
  if (history.autoReissues >= policy.maxAutoReissues) {
    return { kind: 'review', reason: `already re-issued automatically ${history.autoReissues} time(s), the most allowed (MAX_AUTO_REISSUES)` };
  }
  if (op.kind === 'refund' && !policy.refundAutoReissue) {
    // A late commit of the first Refund after a re-issue refunds the customer twice, and no machine can
    // take that back (a second charge it can: the duplicate remedy). A person decides by default.
    return { kind: 'review', reason: 'refunds are not re-issued automatically (REFUND_AUTO_REISSUE=off): a second Refund cannot be taken back' };
  }
  if (history.keyInUse) return { kind: 'prove_again', nextProofAt: provenAt.getTime() + policy.listSettleMs };
  const now = provenAt.getTime();
  const lastSend = history.lastSendAt?.getTime() ?? Number.NEGATIVE_INFINITY;
  const proofs = [...history.proofs.map((d) => d.getTime()), now].filter((t) => t > lastSend);
  // No proof after the last send (a list cannot be asked that early, but a clock may say so): start over.
  if (proofs.length === 0) return { kind: 'prove_again', nextProofAt: Math.max(lastSend + policy.listSettleMs, now + 1) };
  const first = Math.min(...proofs);
  if (now - first >= policy.proofSpacingMs && now - lastSend >= policy.reissueAfterLastSendMs) return { kind: 'reissue' };
  return { kind: 'prove_again', nextProofAt: Math.max(first + policy.proofSpacingMs, lastSend + policy.reissueAfterLastSendMs, now + 1) };
}

function listEvidence(answer: ListAnswer<unknown> | null, window: ListWindow, scope: Readonly<Record<string, string>>) {
  return {
    list: {
      scope,
      createdGte: window.createdGte,
      createdLte: window.createdLte,
      ...(answer ? { pages: answer.pages, requestIds: answer.requestIds, objects: answer.items.length, complete: answer.complete } : {}),
    },
  };
}

/**
 * The answer to the List step. A failed list is never absence: a transient failure is retried, one
 * that will not pass marks List unavailable (the next claim takes the Search path). A complete list:
 * exactly one matching PaymentIntent is adopted (List is real time, so its status is current);
 * several or a mismatch go to a human; none is absence proven at the claim's time — re-issued when
 * judgeAutoReissue allows, proven again later otherwise, a human after the window.
 */
export function decideList(ctx: Context, window: ListWindow, result: GatewayResult<ListAnswer<PaymentIntentView>>): Outcome {
  const { op, policy } = ctx;
  const rules = KIND_RULES[op.kind];
  const scope = rules.listScope(op);
  const what = op.kind === 'charge' ? "the customer's PaymentIntents" : "the PaymentIntent's refunds";
  if (!result.ok) {
    const failure = result.failure;
    const outcome = transientFailure(ctx, failure, op.status);
    if (!isPermanentReadFailure(failure)) {
      // Inside the key window a failing List is simply asked again (the window's end changes the
      // step anyway). After it, List is the last evidence there is: a List that keeps failing is
      // bounded like a Search that will not pass — a human with the reason, never open for ever.
      const afterWindow = !withinKeyWindow(op.firstAttemptedAt, op.claimedAt, policy);
      const failures = (ctx.history?.transientListFailuresAfterWindow ?? 0) + 1;
      const evidence = { ...listEvidence(null, window, scope), ...(afterWindow ? { listFailuresAfterWindow: failures } : {}) };
      if (afterWindow && failures >= MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW) {
        return toReview(`List of ${what} has failed ${failures} times since the key window (${formatDuration(policy.keyWindowMs)}) passed (last: ${failure.errorClass}${failure.httpStatus ? ` ${failure.httpStatus}` : ''}): ` +
          `absence cannot be shown and nothing may be sent under the old key; look the ${rules.objectName} up by hand, then resolve`,
          evidence,
          failure,
        );
      }
      return { ...outcome, detail: { ...outcome.detail, ...evidence } };
    }
    if (rules.searchable) return { ...outcome, detail: { ...outcome.detail, ...listEvidence(null, window, scope), listUnavailable: true } };
    // No Search to take over (a refund): List is the only evidence, so a List that will not pass is
    // bounded like a Search that will not pass — never an open operation retried forever, no reason.
    const failures = (ctx.history?.permanentListFailures ?? 0) + 1;
    const evidence = { ...listEvidence(null, window, scope), listUnavailable: true, listFailures: failures };
    if (failures >= policy.maxSearchFailures) {
      return toReview(`List of ${what} failed ${failures} times and will not pass by itself (${failure.errorClass} ${failure.httpStatus ?? ''} ${failure.code ?? ''}`.trimEnd() +
        `): nothing else can show whether this ${rules.objectName} exists — ${failure.kind === FailureKind.permission
          ? `give the key read permission for ${rules.objectName}s (a restricted key: ${rules.objectName}s Read)`
          : 'check the key and the account (test or live) and what the List request asks for'}, then resolve the operation`,
        evidence,
        failure,
      );
    }
    return { ...outcome, detail: { ...outcome.detail, ...evidence } };
  }
  const answer = result.value;
  const evidence = listEvidence(answer, window, scope);
  const verdict = judgeList(rules.listSubject(op), { ...answer, items: answer.items.map(op.kind === 'charge' ? paymentIntentListed : objectListed) });
  switch (verdict.kind) {
    case 'adopt':
      return fromPaymentIntent(ctx, answer.items.find((pi) => pi.id === verdict.object.id)!, evidence);
    case 'contradiction': {
      const listHits = verdict.related.map((o) => ({ id: o.id, status: o.status, ...o.fields }));
      // Settling on one and refunding the others needs every object of the operation in view: a list
      // cut short may hold a third on a page not read, which no later List would look for.
      const charged = verdict.complete ? judgeListedCharges(op, answer.items.filter((pi) => verdict.related.some((o) => o.id === pi.id))) : null;
      if (charged) {
        const settled = fromPaymentIntent(ctx, charged.keep, { ...evidence, listHits, duplicatesRefunded: charged.remedies.map((r) => r.paymentIntentId) });
        return { ...settled, remedies: charged.remedies };
      }
      return toReview(`List of ${what} found ${verdict.reason}`, { ...evidence, listHits });
    }
    case 'incomplete':
      if (answer.pages >= MAX_LIST_PAGES_FOR_PROOF) {
        return toReview(`List of ${what} has more than ${answer.pages} pages in the send window: absence cannot be shown`, evidence);
      }
      // Stopped for lack of request budget: nothing learnt, ask again soon — but not forever. A send
      // window holding more PaymentIntents than one claim's budget can page through is stopped at the
      // same page on every claim, so the operation would be claimed for ever without reaching a final
      // state or review (seen in bench:peers: one customer, attempts 20–40, lists of 1–2 pages each).
      if ((ctx.history?.incompleteLists ?? 0) + 1 >= MAX_INCOMPLETE_LISTS) {
        return toReview(
          `List of ${what} stopped before its end ${MAX_INCOMPLETE_LISTS} times (request budget, ${answer.pages} page(s) read at most this time): ` +
            'absence cannot be shown; look the operation up by hand',
          evidence,
        );
      }
      return { ...stayOpenQuietly(ctx), detail: evidence };
  }
  const provenAt = op.claimedAt;
  const proof = { ...evidence, absenceProven: true, provenAt: provenAt.toISOString() };
  const history = ctx.history ?? EMPTY_HISTORY;
  if (history.refusal) {
    // Stripe refused ("already refunded", "more than is left") and none of the refunds it holds for
    // the PaymentIntent is ours: the refusal is about someone else's refund. Final, with its code —
    // unless it is the remedy's refund (the extra charge refunded by hand, wholly or in part).
    const remedy = remedyStands(op, (extra) => `refund of ${extra} was refused by Stripe (${history.refusal}) and List shows no refund of this operation`, proof);
    if (remedy) return { ...remedy, errorClass: 'StripeInvalidRequestError', errorCode: history.refusal, error: `refused by Stripe (${history.refusal})` };
    return {
      status: 'failed',
      externalId: null,
      reviewReason: null,
      retryAfterMs: null,
      error: `refused by Stripe (${history.refusal}) and List shows no refund of this operation`,
      errorClass: 'StripeInvalidRequestError',
      errorCode: history.refusal,
      detail: proof,
    };
  }
  const judged = judgeAutoReissue(op, history, provenAt, policy);
  switch (judged.kind) {
    case 'reissue':
      return {
        status: 'pending',
        externalId: null,
        reviewReason: null,
        retryAfterMs: 0,
        error: null,
        errorClass: null,
        errorCode: null,
        detail: { ...proof, proofs: [...history.proofs.map((d) => d.toISOString()), provenAt.toISOString()], lastSendAt: history.lastSendAt?.toISOString() ?? null },
        reissue: true,
      };
    case 'prove_again':
      return { status: op.status, externalId: null, reviewReason: null, retryAfterMs: Math.max(0, judged.nextProofAt - provenAt.getTime()), error: null, errorClass: null, errorCode: null, detail: proof };
    case 'review':
      return toReview(`List proves that no ${rules.objectName} exists for this operation (${provenAt.toISOString()}), but it is not re-issued automatically: ${judged.reason}; ` +
        'if nothing else is known, `review reissue` authorises a new key', proof);
  }
}

// ── The duplicate-charge remedy ──────────────────────────────────────────────────────────────────

/** The refund id of the remedy for an extra PaymentIntent: derived from it, so it exists once. */
export function duplicateRefundId(paymentIntentId: string): string {
  return `${REMEDY_REFUND_ID_PREFIX}${paymentIntentId}`;
}

const AFTER_FAILURE = ':after:';

/**
 * The remedy made again after Stripe failed the remedy's Refund `failedRefundId` AFTER it succeeded
 * (the issuer could not return the money; the extra charge stands again): one per failed Refund.
 */
export function remedyAfterFailureRefundId(paymentIntentId: string, failedRefundId: string): string {
  return `${duplicateRefundId(paymentIntentId)}${AFTER_FAILURE}${failedRefundId}`;
}

/** The Refund a remedy-after-failure follows (remedyAfterFailureRefundId), or null for any other refund id. */
export function failedRefundOf(refundId: string): string | null {
  if (!refundId.startsWith(REMEDY_REFUND_ID_PREFIX)) return null;
  const at = refundId.indexOf(AFTER_FAILURE);
  return at === -1 ? null : refundId.slice(at + AFTER_FAILURE.length);
}

/** The refund operation the remedy makes for one extra PaymentIntent. */
export interface DuplicateRemedy {
  readonly refundId: string;
  readonly paymentIntentId: string;
  readonly amount: number;
}

export type DuplicateVerdict = ({ readonly kind: 'refund' } & DuplicateRemedy) | { readonly kind: 'none'; readonly reason: string };

/**
 * Evidence (an event, a List, an operator) shows a PaymentIntent for an order whose charge operation
 * succeeded with another one. Refund the extra one automatically only when it is certainly a second
 * charge of the same order: succeeded, ours by metadata (this operation or this order), same
 * currency. The charge operation's own PaymentIntent is never refunded by the remedy.
 */
export function judgeDuplicateCharge(
  charge: Pick<ClaimedOperation, 'id' | 'kind' | 'orderId' | 'status' | 'externalId' | 'amount' | 'currency' | 'customerId'>,
  pi: PaymentIntentView,
): DuplicateVerdict {
  if (charge.kind !== 'charge') return { kind: 'none', reason: `operation ${charge.id} is not a charge` };
  if (charge.status !== 'succeeded' || charge.externalId === null) return { kind: 'none', reason: `the charge is ${charge.status}: which PaymentIntent is the extra one is not settled` };
  if (pi.id === charge.externalId) return { kind: 'none', reason: `${pi.id} is the charge's own PaymentIntent` };
  if (pi.status !== 'succeeded') return { kind: 'none', reason: `${pi.id} is ${pi.status}: nothing to give back (yet)` };
  const ours = pi.metadata.operation_id === charge.id || pi.metadata.order_id === charge.orderId;
  if (!ours) return { kind: 'none', reason: `${pi.id} names neither operation ${charge.id} nor order ${charge.orderId}` };
  if (pi.currency !== charge.currency) return { kind: 'none', reason: `${pi.id} is in ${pi.currency}, the order in ${charge.currency}` };
  // A second charge of THIS order is the order's amount, to the order's customer: anything else is
  // money we cannot explain, and a human decides (no automatic refund of it: docs/model.md, the duplicate-charge remedy).
  if (pi.amount !== charge.amount) return { kind: 'none', reason: `${pi.id} is for ${pi.amount}, the order for ${charge.amount}` };
  if (pi.customer != null && pi.customer !== charge.customerId) return { kind: 'none', reason: `${pi.id} belongs to another customer than the order's` };
  return { kind: 'refund', refundId: duplicateRefundId(pi.id), paymentIntentId: pi.id, amount: pi.amount };
}

interface ListedCharges {
  /** The PaymentIntent the operation settles on. */
  readonly keep: PaymentIntentView;
  /** The others, each refunded by the remedy. */
  readonly remedies: readonly DuplicateRemedy[];
}

/**
 * A complete List shows several PaymentIntents of THIS charge operation and every one of them
 * charged (e.g. key generations 0 and 1 both succeeded: a proof of absence that came too early, a
 * send the proof could not see). The money is not in doubt, only which PaymentIntent the operation
 * keeps, so no human is needed (docs/decisions.md 2026-12-01): the operation settles on one
 * and the remedy refunds the others. The rule: the PaymentIntent of the operation's CURRENT key
 * generation (the one a replay of the key the engine sends now returns), else the highest generation
 * below it; a tie (a second key under one generation) by id. Each other one must pass
 * judgeDuplicateCharge against the kept one — the one rule of the remedy, shared with events and
 * operators. Null — a human decides, as before — when any related PaymentIntent is not certainly a
 * charge of this operation: still moving or failed, another amount, currency or customer, or
 * another operation_id.
 */
export function judgeListedCharges(
  op: Pick<ClaimedOperation, 'id' | 'kind' | 'orderId' | 'amount' | 'currency' | 'customerId' | 'keyGeneration'>,
  related: readonly PaymentIntentView[],
): ListedCharges | null {
  if (op.kind !== 'charge' || related.length < 2) return null;
  const certain = related.every(
    (pi) => pi.status === 'succeeded' && pi.metadata.operation_id === op.id && pi.amount === op.amount && pi.currency === op.currency && (pi.customer ?? op.customerId) === op.customerId,
  );
  if (!certain) return null;
  const generation = (pi: PaymentIntentView): number => {
    const g = Number(pi.metadata.key_generation);
    return Number.isInteger(g) && g >= 0 && g <= op.keyGeneration ? g : -1;
  };
  const [keep, ...others] = [...related].sort((a, b) => generation(b) - generation(a) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  const settled = { ...op, status: 'succeeded' as const, externalId: keep!.id };
  const remedies: DuplicateRemedy[] = [];
  for (const pi of others) {
    const verdict = judgeDuplicateCharge(settled, pi);
    if (verdict.kind !== 'refund') return null;
    remedies.push({ refundId: verdict.refundId, paymentIntentId: verdict.paymentIntentId, amount: verdict.amount });
  }
  return { keep: keep!, remedies };
}

/** Any kind's Stripe object (a Refund) for judgeList: amount and currency. */
export function objectListed(o: PaymentIntentView): ListedObject {
  return { id: o.id, status: o.status, metadata: o.metadata, fields: { amount: o.amount, currency: o.currency } };
}

/**
 * Before any call: a refund whose charge is final-failed has nothing to refund (its request came
 * while the charge was open, and waited). Final, with the reason; Stripe is never asked. Null: go on.
 */
export function decidePrecondition(op: ClaimedOperation): Outcome | null {
  // The remedy made again after Stripe failed its Refund after success: the same card's issuer just
  // refused to take the money back, so a machine sending again would most likely fail the same way
  // (days later). A person decides — `review reissue` sends it under a new key, or the money is
  // returned another way — naming the extra PaymentIntent, before anything is sent.
  const failed = op.kind === 'refund' && op.refund?.paymentIntentId && op.keyGeneration === 0 ? failedRefundOf(op.refund.refundId) : null;
  if (failed !== null && op.refund?.paymentIntentId) {
    return {
      ...toReview(
      `the duplicate-charge remedy's Refund ${failed} of ${op.refund.paymentIntentId} was failed by Stripe after it succeeded: the extra charge stands again — ` +
        '`review reissue` refunds it under a new key (it may fail the same way), or return the money another way, then resolve',
      { remedyAfterFailure: true, failedRefund: failed, refundedPaymentIntent: op.refund.paymentIntentId },
      ),
      // Nothing was sent: it stays what it is (pending), only in review.
      status: op.status,
    };
  }
  if (op.kind === 'charge' || op.charge?.status !== 'failed') return null;
  return {
    status: 'failed',
    externalId: null,
    reviewReason: null,
    retryAfterMs: null,
    error: op.kind === 'refund' ? `the order's charge failed: there is nothing to refund` : `the order's authorization failed: there is nothing to ${op.kind === 'capture' ? 'capture' : 'cancel'}`,
    errorClass: 'ChargeFailed',
    errorCode: 'charge_failed',
    detail: { chargeStatus: 'failed' },
  };
}

/** Budget-stopped lists (under one key generation) before a human is asked instead of listing again. */
export const MAX_INCOMPLETE_LISTS = 3;

/**
 * Lists failing in a way that passes by itself (429, 5xx, lost) after the key window, before a human
 * is asked: with the ambiguous backoff (capped at 15 min) about two hours of a Stripe outage.
 */
export const MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW = 10;

/** The List gateway's page cap (stripe-gateway.ts stops there): a list stopped there cannot show absence. */
export const MAX_LIST_PAGES_FOR_PROOF = 20;

const EMPTY_HISTORY: EvidenceHistory = {
  firstSendAt: null,
  lastSendAt: null,
  sameKeySends: 0,
  proofs: [],
  autoReissues: 0,
  listUnavailable: false,
  permanentSearchFailures: 0,
};

/** Nothing learnt and nothing wrong (a list stopped for budget): the same status, soon again. */
function stayOpenQuietly(ctx: Context): Outcome {
  return {
    status: ctx.op.status,
    externalId: null,
    reviewReason: null,
    retryAfterMs: backoffDelay(1, ctx.policy.backoff.rateLimited, ctx.random),
    error: null,
    errorClass: null,
    errorCode: null,
    detail: {},
  };
}

export type DecisionContext = Context;

// ── Captures and cancels of an authorization (docs/model.md#manual-capture) ─────────────────────
//
// What Stripe documents and this part relies on: a PaymentIntent confirmed with capture_method=manual
// waits in `requires_capture`; a capture moves it to `succeeded` with `amount_received` what was
// captured (the rest released), a cancel to `canceled`; either from any other status is refused with
// `payment_intent_unexpected_state`; an authorization not captured in time is canceled by Stripe with
// `cancellation_reason: automatic` (docs.stripe.com/api/payment_intents/capture, …/cancel,
// docs.stripe.com/payments/place-a-hold-on-a-payment-method). So the PaymentIntent alone, read in
// real time, says whether the operation happened.

/** Sends of a capture or cancel that Stripe has not yet shown to have happened, before a human looks. */
export const MAX_AUTHORIZATION_ATTEMPTS = 12;

/** Stripe's `cancellation_reason` of an authorization it let expire. */
export const EXPIRED_BY_STRIPE = 'automatic';

/**
 * A capture's or cancel's PaymentIntent, as Stripe holds it now: settle, send again, or a human.
 * Captured (by this capture: the amount it asked for) → succeeded; released → a capture failed
 * (`authorization_expired` / `authorization_canceled`), a cancel succeeded; still held → nothing
 * happened yet: `pending`, sent again after the backoff (safe: Stripe acts once).
 */
export function fromAuthorizedPaymentIntent(ctx: Context, pi: PaymentIntentView, detail: Record<string, unknown> = {}): Outcome {
  const { op } = ctx;
  const seen = { ...detail, paymentIntentStatus: pi.status, ...(pi.amountReceived !== undefined ? { amountReceived: pi.amountReceived } : {}), ...(pi.cancellationReason ? { cancellationReason: pi.cancellationReason } : {}) };
  const held = op.charge?.paymentIntentId ?? null;
  if (held !== null && pi.id !== held) {
    return toReview(`${op.kind} of ${held} was answered about another PaymentIntent, ${pi.id}; not adopted`, seen);
  }
  const settled = (status: OperationStatus, errorCode: string | null = null, error: string | null = null): Outcome => ({
    status,
    externalId: pi.id,
    reviewReason: null,
    retryAfterMs: null,
    error,
    errorClass: errorCode === null ? null : 'AuthorizationState',
    errorCode,
    detail: seen,
  });
  const released = pi.status === 'canceled';
  const releasedCode = pi.cancellationReason === EXPIRED_BY_STRIPE ? 'authorization_expired' : 'authorization_canceled';
  if (op.kind === 'capture') {
    if (pi.status === 'succeeded') {
      if (pi.amountReceived === op.amount) return settled('succeeded');
      return toReview(`PaymentIntent ${pi.id} is captured for ${pi.amountReceived ?? 'an unknown amount'}, this capture asked for ${op.amount}: captured otherwise (the Dashboard, another integration?); not adopted`, seen, undefined, pi.id);
    }
    if (released) return settled('failed', releasedCode, `the authorization of ${pi.id} was released (${pi.cancellationReason ?? 'canceled'}) before it was captured`);
  } else {
    if (released) return settled('succeeded');
    if (pi.status === 'succeeded') return settled('failed', 'authorization_captured', `the authorization of ${pi.id} was captured (${pi.amountReceived ?? '?'}): nothing to cancel; refund it instead`);
  }
  // Still held (requires_capture) — nothing happened yet — or a status Stripe may move on from.
  const attempts = op.attempts + 1;
  if (attempts >= MAX_AUTHORIZATION_ATTEMPTS) {
    return toReview(`${op.kind} of ${pi.id} sent ${attempts} times and Stripe still shows it ${pi.status}; look the PaymentIntent up, then resolve`, seen, undefined, pi.id);
  }
  return {
    status: pi.status === 'requires_capture' ? 'pending' : 'unknown',
    externalId: pi.id,
    reviewReason: null,
    retryAfterMs: backoffDelay(attempts, ctx.policy.backoff.unsettled, ctx.random),
    error: null,
    errorClass: null,
    errorCode: null,
    detail: seen,
  };
}
