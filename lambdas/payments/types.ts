// The vocabulary of the payments domain. Plain data; no I/O, no Lambda, no CDK.

export const OperationStatus = {
  pending: 'pending', // never known to have reached Stripe
  unknown: 'unknown', // may have reached Stripe, or reached it and is not settled yet
  succeeded: 'succeeded',
  failed: 'failed',
} as const;
export type OperationStatus = (typeof OperationStatus)[keyof typeof OperationStatus];

export const OPEN_STATUSES: readonly OperationStatus[] = ['pending', 'unknown'];
export const isFinal = (status: OperationStatus): boolean => status === 'succeeded' || status === 'failed';

/** What a producer asks for (docs/producers.md), in the engine's terms. */
export interface ChargeInput {
  readonly orderId: string;
  readonly amount: number;
  readonly currency: string;
  readonly customerId: string;
  readonly paymentMethod: string;
  /** Optional charge parameters, passed to Stripe; part of the order's parameters (a repeat with others is a conflict). */
  readonly description?: string;
  readonly statementDescriptorSuffix?: string;
  readonly metadata?: Record<string, string>;
  /**
   * Connect (docs/model.md#connected-accounts). `account`: the connected account the charge is made
   * AS (a direct charge): every Stripe request of the operation — and of its refunds — carries it as
   * Stripe-Account; absent: the platform. `applicationFeeAmount`: the platform's fee. `transferDestination`:
   * a destination charge, made on the platform, transferred to that account. Parameters of the order.
   */
  readonly account?: string;
  readonly applicationFeeAmount?: number;
  readonly transferDestination?: string;
  /**
   * Manual capture (docs/model.md#manual-capture): 'manual' authorizes only — the PaymentIntent is
   * created with `capture_method=manual` and the operation succeeds when Stripe holds the amount
   * (`requires_capture`); a capture or cancel_authorization operation settles it later. Absent:
   * captured at once. A parameter of the order.
   */
  readonly captureMethod?: 'manual';
}

/**
 * A Stripe account id: `acct_` and letters and digits (e.g. `acct_1032D82eZvKYlo2C`, the shape of
 * docs.stripe.com/api/accounts/object `id`). Sent as the Stripe-Account header, so nothing else;
 * migrations/018 checks the same shape.
 */
export const ACCOUNT_ID = /^acct_[A-Za-z0-9]{1,64}$/;

/** The kinds of business effect one engine carries (lambdas/payments/kinds.ts: one adapter each). */
export type OperationKind = 'charge' | 'refund' | 'capture' | 'cancel_authorization';

/** The kinds that settle a manual charge's authorization: they act on its PaymentIntent, they make no object. */
export const AUTHORIZATION_KINDS = ['capture', 'cancel_authorization'] as const;
export type AuthorizationKind = (typeof AUTHORIZATION_KINDS)[number];
export const isAuthorizationKind = (kind: OperationKind): kind is AuthorizationKind => kind === 'capture' || kind === 'cancel_authorization';

/** A capture or a release of a manual charge's authorization, as a producer asks for it. */
export interface AuthorizationInput {
  readonly kind: AuthorizationKind;
  readonly orderId: string;
  /** A capture's amount (at most the authorized; the rest is released). Absent: all of it. A cancel releases all. */
  readonly amount?: number;
}

/** What a capture / cancel_authorization operation is of (migrations/019). */
export interface AuthorizationFields {
  /** The order's charge operation, the authorization it settles. */
  readonly chargeOperationId: string;
  /** 'expired': not asked for — the reconciler recorded that Stripe let the authorization expire. */
  readonly cancellationReason: 'expired' | null;
}

export const REFUND_REASONS = ['duplicate', 'fraudulent', 'requested_by_customer'] as const;

/**
 * The duplicate-charge remedy's refund ids are `duplicate:{PaymentIntent id}` (decisions.ts
 * duplicateRefundId): one per extra PaymentIntent, because the id is unique per order. A producer's
 * refund id there would take the remedy's place and leave the extra charge unrefunded: refused.
 */
export const REMEDY_REFUND_ID_PREFIX = 'duplicate:';
export type RefundReason = (typeof REFUND_REASONS)[number];

/** What a producer (or an operator, or the duplicate remedy) asks to refund. */
export interface RefundInput {
  readonly orderId: string;
  /** The producer's identity of this refund: one refund operation per (orderId, refundId). */
  readonly refundId: string;
  readonly amount: number;
  readonly reason: RefundReason | null;
}

/** A refund operation's own identity, on top of the order's parameters (copied from its charge). */
export interface RefundFields {
  readonly refundId: string;
  readonly parentOperationId: string;
  readonly reason: RefundReason | null;
  /**
   * The duplicate-charge remedy: the EXTRA PaymentIntent of the order this refund gives back. Null:
   * the refund is of the charge operation's own PaymentIntent.
   */
  readonly paymentIntentId: string | null;
  /**
   * Stripe failed the Refund after it had succeeded (migrations/009): the operation stays final
   * `succeeded` (the request executed), but the money is back with the merchant and the amount is
   * refundable again. Set once by the event applier with the `Refund Failed After Success` fact;
   * never cleared. Absent or null: not so.
   */
  readonly failedAfterSuccess?: { readonly at: Date; readonly failureReason: string | null } | null;
}

/**
 * THE PaymentIntent a refund operation gives money back from: the duplicate remedy's named extra one,
 * else its charge operation's (`chargePaymentIntentId`, the charge's external_id — final-succeeded
 * before the refund is claimed). Null for a charge, or while the charge's is unknown. The SQL form of
 * this one definition is operations-store.ts PAYMENT_INTENT_OF_REFUND. Not the event contract's
 * `refundedPaymentIntent` (contract.ts: the remedy's extra PaymentIntent only, null otherwise).
 */
export function paymentIntentOfRefund(op: Pick<Operation, 'kind' | 'refund'>, chargePaymentIntentId: string | null): string | null {
  if (op.kind !== 'refund' || op.refund === null) return null;
  return op.refund.paymentIntentId ?? chargePaymentIntentId;
}

/** A row of payment_operations as the engine sees it. */
export interface Operation extends ChargeInput {
  readonly id: string;
  readonly kind: OperationKind;
  /** Null for a charge. */
  readonly refund: RefundFields | null;
  /** A capture's or cancel's; null for every other kind. */
  readonly authorization?: AuthorizationFields | null;
  readonly status: OperationStatus;
  readonly externalId: string | null;
  readonly attempts: number;
  readonly firstAttemptedAt: Date | null;
  readonly lastError: string | null;
  readonly lastErrorClass: string | null;
  readonly leaseToken: string | null;
  readonly leaseUntil: Date | null;
  readonly nextAttemptAt: Date | null;
  readonly reviewReason: string | null;
  readonly keyGeneration: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  readonly settledAt: Date | null;
}

/** An operation this worker holds the lease of, with the database clock at the moment of the claim. */
export interface ClaimedOperation extends Operation {
  readonly leaseToken: string;
  readonly firstAttemptedAt: Date;
  readonly claimedAt: Date;
  /**
   * A refund's charge operation as it was at the claim (a refund is claimable only once it is
   * final): its status and its PaymentIntent, which the refund is made against. Null for a charge.
   */
  readonly charge?: { readonly status: OperationStatus; readonly paymentIntentId: string | null } | null;
}

/** The subset of a Stripe PaymentIntent the engine reasons about. */
export interface PaymentIntentView {
  readonly id: string;
  readonly status: string;
  readonly amount: number;
  readonly currency: string;
  readonly metadata: Readonly<Record<string, string>>;
  /** The customer it belongs to, when the answer said (List evidence compares it). */
  readonly customer?: string | null;
  /**
   * The type of its payment method (`card`, `sepa_debit`, `us_bank_account`, …) when the answer
   * carried the PaymentMethod expanded (a retrieve asks for it); absent or null: not known.
   */
  readonly paymentMethodType?: string | null;
  /** Captured so far (`amount_received`), when the answer said: what a capture took. */
  readonly amountReceived?: number;
  /** `cancellation_reason` of a canceled PaymentIntent (`automatic`: Stripe let the authorization expire; `requested_by_customer`, …). */
  readonly cancellationReason?: string | null;
}
