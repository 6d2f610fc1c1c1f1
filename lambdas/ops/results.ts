// What the operator commands answer with: the JSON-safe views of an operation (ISO strings, no
// Dates) and each command's result (ResultOf). Its own module so that the response document
// (response.ts) and the renderer can name the results without importing the commands that make them.
import type { AuditEvent } from '../payments/audit-trail.ts';
import { idempotencyKey } from '../payments/decisions.ts';
import type { ErasureResult } from '../payments/erasure-store.ts';
import type { FindingRow } from '../payments/inbox-store.ts';
import { isInReview, type OutboxEvent, type StripeEvidence, type Verdict } from '../payments/review.ts';
import { paymentIntentOfRefund, type Operation } from '../payments/types.ts';
import type { RejectedMessage, Stats } from './queries.ts';

// ── Views (JSON-safe: ISO strings, no Dates) ─────────────────────────────────────────────────────

export interface OperationView {
  readonly id: string;
  readonly kind: Operation['kind'];
  readonly orderId: string;
  readonly amount: number;
  readonly currency: string;
  readonly customerId: string;
  readonly paymentMethod: string;
  /**
   * Connect (docs/model.md#connected-accounts): the connected account the operation is made AS (a
   * direct charge and its refunds: every Stripe request carries it as Stripe-Account, and `--stripe`
   * looks there); null: the platform. A destination charge's account, and the platform's fee.
   */
  readonly account: string | null;
  readonly transferDestination: string | null;
  readonly applicationFeeAmount: number | null;
  readonly status: Operation['status'];
  readonly inReview: boolean;
  readonly reviewReason: string | null;
  readonly keyGeneration: number;
  /** The key the engine sends for the current generation. */
  readonly idempotencyKey: string;
  readonly externalId: string | null;
  readonly attempts: number;
  readonly firstAttemptedAt: string | null;
  readonly lastError: string | null;
  readonly lastErrorClass: string | null;
  readonly leaseUntil: string | null;
  readonly nextAttemptAt: string | null;
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly settledAt: string | null;
  /**
   * A refund's own identity: its refund id and reason, its charge operation, and the PaymentIntent it
   * refunds (when the command read it: the duplicate remedy's, else the charge's). Null for a charge.
   */
  readonly refund: {
    readonly refundId: string;
    readonly reason: string | null;
    readonly chargeOperationId: string;
    readonly paymentIntent: string | null;
    /** Stripe failed the Refund after it succeeded (the operation's mark, migrations/009): it gave nothing back, and its amount is refundable again. */
    readonly failedAfterSuccess: { readonly failureReason: string | null; readonly at: string } | null;
  } | null;
}

const isoOrNull = (date: Date | null): string | null => (date === null ? null : date.toISOString());

/**
 * `paymentIntent`: for a refund, the PaymentIntent it refunds as the command read it
 * (review.ts OperationHistory.refundedPaymentIntent) or its charge's PaymentIntent — the view derives
 * the refunded one with the one definition (types.ts paymentIntentOfRefund).
 */
export function operationView(op: Operation, paymentIntent: string | null = null): OperationView {
  return {
    id: op.id,
    kind: op.kind,
    orderId: op.orderId,
    amount: op.amount,
    currency: op.currency,
    customerId: op.customerId,
    paymentMethod: op.paymentMethod,
    account: op.account ?? null,
    transferDestination: op.transferDestination ?? null,
    applicationFeeAmount: op.applicationFeeAmount ?? null,
    status: op.status,
    inReview: isInReview(op),
    reviewReason: op.reviewReason,
    keyGeneration: op.keyGeneration,
    idempotencyKey: idempotencyKey(op.id, op.keyGeneration),
    externalId: op.externalId,
    attempts: op.attempts,
    firstAttemptedAt: isoOrNull(op.firstAttemptedAt),
    lastError: op.lastError,
    lastErrorClass: op.lastErrorClass,
    leaseUntil: isoOrNull(op.leaseUntil),
    nextAttemptAt: isoOrNull(op.nextAttemptAt),
    createdAt: op.createdAt.toISOString(),
    updatedAt: op.updatedAt.toISOString(),
    settledAt: isoOrNull(op.settledAt),
    refund: op.refund
      ? {
          refundId: op.refund.refundId,
          reason: op.refund.reason,
          chargeOperationId: op.refund.parentOperationId,
          paymentIntent: paymentIntentOfRefund(op, paymentIntent),
          failedAfterSuccess: op.refund.failedAfterSuccess
            ? { failureReason: op.refund.failedAfterSuccess.failureReason, at: op.refund.failedAfterSuccess.at.toISOString() }
            : null,
        }
      : null,
  };
}

// ── Results ──────────────────────────────────────────────────────────────────────────────────────

export interface ReviewListResult {
  readonly asOf: string;
  readonly total: number;
  readonly operations: readonly (OperationView & {
    readonly inReviewSince: string;
    readonly inReviewSeconds: number;
    /** A charge: refund operations of its order that wait for it (not claimable while it is open; no review reason of their own). */
    readonly refundsWaiting: number;
  })[];
}

/** What the operator may do with an operation in review, judged on the evidence just gathered. */
export interface ReviewOptions {
  /** The option that names the proof: `--payment-intent` (a charge) or `--refund` (a refund). */
  readonly proofFlag: '--payment-intent' | '--refund';
  /** PaymentIntents (a charge) or Refunds (a refund) `resolve --as succeeded` would accept. */
  readonly resolveSucceeded: readonly string[];
  /** Succeeded ones it would refuse, and why (another amount, another operation, another PaymentIntent). */
  readonly notAcceptable: readonly { readonly id: string; readonly reason: string }[];
  /** `resolve --as failed` and `reissue` rest on the same proof: nothing was or will be charged (refunded). */
  readonly resolveFailed: Verdict;
  readonly reissue: Verdict;
}

export interface OperationDetailResult {
  readonly asOf: string;
  readonly operation: OperationView;
  readonly auditTrail: readonly AuditEvent[];
  readonly outcomeEvents: readonly OutboxEvent[];
  /** Messages for this order that were rejected (e.g. the same order with other parameters). */
  readonly rejectedMessages: readonly RejectedMessage[];
  /** The refund operations of the order (a charge's refunds; a refund's siblings and itself), oldest first. */
  readonly orderRefunds: readonly OperationView[];
  /** What Stripe holds for the operation; null when not asked (see stripeSkipped). */
  readonly stripe: StripeEvidence | null;
  readonly stripeSkipped: string | null;
  /** Null unless the operation is in review and Stripe was asked. */
  readonly options: ReviewOptions | null;
}

export interface ActionResult {
  readonly operation: OperationView;
  readonly auditEvent: AuditEvent;
  /** The outbox row written with a resolution (Charge Succeeded / Charge Failed). */
  readonly outcomeEvent: OutboxEvent | null;
  /** true / false: published now or not (the relay retries); null: no bus here, the relay's sweep sends it. */
  readonly published: boolean | null;
  readonly evidence: StripeEvidence | null;
  readonly warnings: readonly string[];
  /** `review resolve --as succeeded`: the duplicate-charge remedy of every other succeeded PaymentIntent of the operation. */
  readonly remedies?: readonly RemedyView[];
}

/** One refund operation of the duplicate-charge remedy, as a command made (or found) it. */
export interface RemedyView {
  readonly paymentIntentId: string;
  readonly refundOperationId: string | null;
  /** False: it existed already (the same evidence came before: an event, a List, another operator). */
  readonly created: boolean;
  /** The refund operation's status after this command (pending: the reconciler sends it). */
  readonly status: Operation['status'] | null;
  readonly disposition: string | null;
}

export interface RefundRemedyResult {
  readonly charge: OperationView;
  readonly remedy: RemedyView;
  readonly refund: OperationView | null;
}

export interface ReissueResult extends ActionResult {
  readonly previousKey: string;
  readonly newKey: string;
}

export interface NoteResult {
  readonly operation: OperationView;
  readonly auditEvent: AuditEvent;
}

export interface RejectedListResult {
  readonly asOf: string;
  readonly total: number;
  readonly messages: readonly RejectedMessage[];
}

export interface ResultOf {
  readonly help: { readonly usage: string };
  readonly 'review list': ReviewListResult;
  readonly 'review show': OperationDetailResult;
  readonly 'review resolve': ActionResult;
  readonly 'review reissue': ReissueResult;
  readonly 'review note': NoteResult;
  readonly 'operations show': OperationDetailResult;
  readonly 'rejected list': RejectedListResult;
  readonly 'findings list': FindingsListResult;
  readonly 'findings resolve': FindingResolveResult;
  readonly 'refunds list': RefundsListResult;
  readonly 'refunds show': OperationDetailResult;
  readonly 'refunds create': RefundCreateResult;
  readonly 'refunds remedy': RefundRemedyResult;
  readonly 'erase customer': EraseCustomerResult;
  readonly stats: Stats;
}

export interface EraseCustomerResult {
  readonly erasure: ErasureResult;
}

export interface RefundCreateResult {
  readonly operation: OperationView;
  /** What the engine did now: attempted (and the status), skipped (exists / waits for its charge), … */
  readonly disposition: string | null;
  readonly auditEvent: AuditEvent | null;
}

export interface RefundsListResult {
  readonly asOf: string;
  readonly orderId: string;
  readonly charge: OperationView;
  readonly refunds: readonly (OperationView & {
    readonly refundId: string;
    readonly refundReason: string | null;
    readonly refundedPaymentIntent: string | null;
    /** Stripe failed the Refund after it succeeded (the operation's mark, migrations/009, written with the `Refund Failed After Success` fact): it gave nothing back. */
    readonly failedAfterSuccess: { readonly failureReason: string | null; readonly at: string } | null;
  })[];
  /** Refunds that succeeded (and stayed so), and those still open (pending / unknown), of the charge's own PaymentIntent. */
  readonly refunded: number;
  /** Succeeded refunds that Stripe failed since (the operation's mark, migrations/009): not given back, and refundable again. */
  readonly reversed: number;
  readonly inFlight: number;
  /** What a further refund may still ask for (charged amount − refunded − in flight); 0 for a charge that did not succeed. */
  readonly left: number;
}

export interface FindingsListResult {
  readonly asOf: string;
  readonly total: number;
  readonly findings: readonly FindingRow[];
}

export interface FindingResolveResult {
  readonly finding: FindingRow;
}
