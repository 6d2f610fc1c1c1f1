// The outcome-event contract (docs/events.md) for consumers: order services, e-mail senders, ledgers.
// Delivery is at least once. Deduplicate on `detail.eventId`: it is the same on every re-send.
// One source of truth: the zod schema below; the JSON Schema for consumers is generated from it
// (schemas/charge-outcome-detail.v1.json, kept in sync by test/contract-schemas.test.ts).
// Delivery is not in order either: an operation's state is the event with the highest `sequence`.
import * as z from 'zod';
import { REFUND_REASONS } from '../payments/types.ts';

export const DEFAULT_EVENT_SOURCE = 'payments.charges';

export const DetailType = {
  succeeded: 'Charge Succeeded',
  failed: 'Charge Failed',
  needsReview: 'Charge Needs Review',
  /**
   * Not an outcome yet: the engine proved by List that nothing was charged and re-issued the charge
   * under a new key generation; a Charge Succeeded / Failed / Needs Review follows for the order.
   */
  reissued: 'Charge Reissued',
} as const;
export type DetailType = (typeof DetailType)[keyof typeof DetailType];

export const EVENT_VERSION = 1;

export const chargeOutcomeDetailSchema = z
  .object({
    version: z.literal(1).describe('Additive changes keep the version; anything else bumps it.'),
    eventId: z.uuid().describe('Stable id of this event, the same on every re-send: deduplicate on it.'),
    operationId: z.uuid().describe('The payment operation (one per order).'),
    orderId: z.string().min(1).max(128),
    status: z.enum(['succeeded', 'failed', 'needs_review', 'reissued']),
    amount: z.number().int().positive().describe('Minor units (cents).'),
    currency: z.string().regex(/^[a-z]{3}$/),
    externalId: z.string().nullable().describe('The Stripe PaymentIntent id, when one is known.'),
    reason: z.string().nullable().describe('Review reason (needs_review), failure code (failed) or re-issue code (reissued: absence_proven); null on success.'),
    occurredAt: z.iso.datetime().describe('When the outcome was recorded (ISO 8601, UTC).'),
    // Added in v1 (additive: no field changed meaning) — docs/decisions.md, 2026-12-01.
    sequence: z
      .number()
      .int()
      .positive()
      .describe(
        "Position of this event among its operation's events (1, 2, 3 …), strictly increasing. Events can arrive out of order: apply the highest sequence seen per operationId, ignore lower ones.",
      ),
    // Added in v1 (additive: absent on every platform operation, as before) — docs/decisions.md, 2026-12-02.
    account: z
      .string()
      .regex(/^acct_[A-Za-z0-9]{1,64}$/)
      .optional()
      .describe('Stripe Connect: the connected account the operation was made on (a direct charge, or a refund of one); absent: the platform.'),
    // Added in v1 (additive: absent on every charge captured at once) — docs/decisions.md, 2026-12-02 "manual capture".
    captureMethod: z
      .literal('manual')
      .optional()
      .describe('Manual capture: the charge only authorized (Charge Authorized); a Charge Captured or Authorization Canceled / Expired follows. Absent: captured at once.'),
  })
  .describe('detail of the Charge Succeeded / Charge Authorized / Charge Failed / Charge Needs Review / Charge Reissued events');

/** `detail` of every outcome event. */
export type ChargeOutcomeDetail = z.infer<typeof chargeOutcomeDetailSchema>;

/**
 * JSON Schema (draft 2020-12) of an event's `detail`, for consumers that validate or generate code.
 * io 'input': no `additionalProperties: false`, so a validator built from the file keeps accepting
 * events when a field is added (what "additive changes keep the version" promises) — for every
 * detail alike. The committed files are EVENT_DETAIL_JSON_SCHEMAS written by `npm run schemas`.
 */
function detailJsonSchema(name: string, title: string, schema: z.ZodType): Record<string, unknown> {
  return { $id: `urn:payments.charges:${name}:v1`, title, ...z.toJSONSchema(schema, { target: 'draft-2020-12', io: 'input' }) };
}

export function chargeOutcomeDetailJsonSchema(): Record<string, unknown> {
  return detailJsonSchema('charge-outcome-detail', 'ChargeOutcomeDetail', chargeOutcomeDetailSchema);
}

/**
 * Refund operations announce their outcomes the same way, through the same outbox, with
 * their own operationId and their own `sequence`: the detail is a charge's plus what names the
 * refund. externalId is the Stripe Refund (re_…).
 */
export const RefundDetailType = {
  succeeded: 'Refund Succeeded',
  failed: 'Refund Failed',
  needsReview: 'Refund Needs Review',
  /** The refund was proven absent at Stripe by List and re-issued under a new key generation. */
  reissued: 'Refund Reissued',
  /**
   * The duplicate-charge remedy's refund succeeded: a second succeeded PaymentIntent of the order
   * (refundedPaymentIntent) was given back in full. Failures and reviews of it are Refund Failed / Needs Review.
   */
  duplicateRefunded: 'Charge Duplicate Refunded',
} as const;
export type RefundDetailType = (typeof RefundDetailType)[keyof typeof RefundDetailType];

export const refundOutcomeDetailSchema = chargeOutcomeDetailSchema
  .omit({ captureMethod: true })
  .extend({
    operationId: z.uuid().describe('The refund operation (one per orderId + refundId).'),
    externalId: z.string().nullable().describe('The Stripe Refund id (re_…), when one is known.'),
    reason: z.string().nullable().describe('Review reason (needs_review), failure code (failed: charge_failed, charge_already_refunded, …) or re-issue code (reissued); null on success.'),
    kind: z.literal('refund'),
    refundId: z.string().min(1).max(128).describe("The producer's refund id."),
    chargeOperationId: z.uuid().describe("The order's charge operation, the one refunded."),
    refundReason: z.enum(REFUND_REASONS).nullable().describe("Stripe's refund reason, as requested."),
    refundedPaymentIntent: z
      .string()
      .optional()
      .describe('Duplicate-charge remedy only: the extra PaymentIntent refunded (not the one the charge operation holds).'),
  })
  .describe('detail of the Refund Succeeded / Refund Failed / Refund Needs Review / Refund Reissued / Charge Duplicate Refunded events');

export type RefundOutcomeDetail = z.infer<typeof refundOutcomeDetailSchema>;

export function refundOutcomeDetailJsonSchema(): Record<string, unknown> {
  return detailJsonSchema('refund-outcome-detail', 'RefundOutcomeDetail', refundOutcomeDetailSchema);
}

/**
 * Manual capture (docs/events.md#authorize-now-capture-later): a charge that only authorized is
 * announced as Charge Authorized (a charge detail with captureMethod 'manual'); its capture and its
 * release are operations of their own, with their own operationId and sequence.
 */
export const AuthorizationDetailType = {
  authorized: 'Charge Authorized',
  captured: 'Charge Captured',
  captureFailed: 'Charge Capture Failed',
  captureNeedsReview: 'Charge Capture Needs Review',
  captureReissued: 'Charge Capture Reissued',
  canceled: 'Authorization Canceled',
  /** Not asked for: Stripe let the authorization expire uncaptured; the reconciler read it so. */
  expired: 'Authorization Expired',
  cancelFailed: 'Authorization Cancel Failed',
  cancelNeedsReview: 'Authorization Cancel Needs Review',
  cancelReissued: 'Authorization Cancel Reissued',
} as const;
export type AuthorizationDetailType = (typeof AuthorizationDetailType)[keyof typeof AuthorizationDetailType];

export const authorizationOutcomeDetailSchema = chargeOutcomeDetailSchema
  .omit({ captureMethod: true })
  .extend({
    operationId: z.uuid().describe('The capture or cancel operation (one per authorization).'),
    amount: z.number().int().positive().describe('Minor units: what the capture takes (the rest is released), or the whole authorization a cancel releases.'),
    externalId: z.string().nullable().describe('The Stripe PaymentIntent (pi_…) the operation acts on, when known.'),
    reason: z
      .string()
      .nullable()
      .describe('Review reason (needs_review) or failure code (failed: authorization_expired, authorization_canceled, authorization_captured, charge_failed, …); null on success.'),
    kind: z.enum(['capture', 'cancel_authorization']),
    chargeOperationId: z.uuid().describe("The order's charge operation, whose authorization this settles."),
    cancellationReason: z.literal('expired').optional().describe('Authorization Expired: Stripe let it expire uncaptured (not asked for).'),
  })
  .describe('detail of the Charge Captured / Charge Capture Failed / Needs Review / Reissued and Authorization Canceled / Expired / Cancel Failed / Needs Review / Reissued events');

export type AuthorizationOutcomeDetail = z.infer<typeof authorizationOutcomeDetailSchema>;

export function authorizationOutcomeDetailJsonSchema(): Record<string, unknown> {
  return detailJsonSchema('authorization-outcome-detail', 'AuthorizationOutcomeDetail', authorizationOutcomeDetailSchema);
}

/** The detail-type that announces a status. */
export function detailTypeOf(status: ChargeOutcomeDetail['status']): DetailType {
  if (status === 'reissued') return DetailType.reissued;
  return status === 'succeeded' ? DetailType.succeeded : status === 'failed' ? DetailType.failed : DetailType.needsReview;
}

// ── What happens to a charge after it settled (Stripe events in, docs/architecture.md#stripe-events-in) ─────────────────────
// A refund made in the Dashboard, a dispute opened or closed: learnt from Stripe's events
// (lambdas/payments/event-applier.ts) and announced through the same outbox, source and bus. The
// charge's own status stays what it is (a refunded charge still succeeded); these events say what
// followed. Schema: schemas/charge-aftermath-detail.v1.json (kept in sync by test/contract-schemas.test.ts).

export const AftermathDetailType = {
  refunded: 'Charge Refunded',
  disputed: 'Charge Disputed',
  disputeClosed: 'Charge Dispute Closed',
} as const;
export type AftermathDetailType = (typeof AftermathDetailType)[keyof typeof AftermathDetailType];

export const chargeAftermathDetailSchema = z
  .object({
    version: z.literal(1).describe('Additive changes keep the version; anything else bumps it.'),
    eventId: z.uuid().describe('Stable id of this event, the same on every re-send: deduplicate on it.'),
    operationId: z.uuid().describe('The payment operation (one per order).'),
    orderId: z.string().min(1).max(128),
    kind: z.enum(['refunded', 'disputed', 'dispute_closed']),
    amount: z.number().int().nonnegative().describe('Minor units: the amount of THIS refund, or the disputed amount.'),
    amountRefunded: z.number().int().nonnegative().nullable().describe('Refunded so far in total (refunds); null for disputes.'),
    chargeAmount: z.number().int().positive().describe('What the operation charged, minor units.'),
    currency: z.string().regex(/^[a-z]{3}$/),
    externalId: z.string().describe('The Stripe PaymentIntent id.'),
    chargeId: z.string().nullable().describe('The Stripe Charge id (ch_…), when the event names it.'),
    disputeId: z.string().nullable().describe('The Stripe Dispute id (dp_…) for dispute events.'),
    disputeStatus: z.string().nullable().describe('Stripe dispute status (needs_response, won, lost, …); null for refunds.'),
    disputeReason: z.string().nullable().describe('Stripe dispute reason (fraudulent, …); null for refunds.'),
    stripeEventId: z.string().min(1).describe('The Stripe event (evt_…) this was learnt from.'),
    stripeCreatedAt: z.iso.datetime().describe('When Stripe created that event (ISO 8601, UTC).'),
    occurredAt: z.iso.datetime().describe('When it was recorded here (ISO 8601, UTC).'),
  })
  .describe('detail of the Charge Refunded / Charge Disputed / Charge Dispute Closed events');

export type ChargeAftermathDetail = z.infer<typeof chargeAftermathDetailSchema>;

export function chargeAftermathDetailJsonSchema(): Record<string, unknown> {
  return detailJsonSchema('charge-aftermath-detail', 'ChargeAftermathDetail', chargeAftermathDetailSchema);
}

// ── What happens to a refund after it succeeded (Stripe events in) ───────────────────────────────
// A card refund can fail AFTER Stripe said it succeeded (the issuer cannot process it:
// docs.stripe.com/refunds, "failed refunds"; test card pm_card_refundFail). The refund operation
// stays final `succeeded` — the request executed, and a final state is never rewritten — and this
// FACT says what followed: the money did not reach the customer, Stripe returned it to the balance.
// A fact, like the Charge aftermath: never ranked against the operation's states (consumers kit,
// ordering.ts). Schema: schemas/refund-fact-detail.v1.json (kept in sync by test/contract-schemas.test.ts).

export const RefundFactDetailType = {
  failedAfterSuccess: 'Refund Failed After Success',
} as const;
export type RefundFactDetailType = (typeof RefundFactDetailType)[keyof typeof RefundFactDetailType];

export const refundFactDetailSchema = z
  .object({
    version: z.literal(1).describe('Additive changes keep the version; anything else bumps it.'),
    eventId: z.uuid().describe('Stable id of this event, the same on every re-send: deduplicate on it.'),
    operationId: z.uuid().describe('The refund operation (one per orderId + refundId); it stays succeeded.'),
    orderId: z.string().min(1).max(128),
    kind: z.literal('refund_failed_after_success'),
    refundId: z.string().min(1).max(128).describe("The producer's refund id."),
    chargeOperationId: z.uuid().describe("The order's charge operation, the one that was to be refunded."),
    amount: z.number().int().positive().describe('Minor units: the amount that did NOT reach the customer (the whole refund).'),
    currency: z.string().regex(/^[a-z]{3}$/),
    externalId: z.string().describe('The Stripe Refund id (re_…).'),
    paymentIntentId: z.string().nullable().describe('The refunded PaymentIntent (pi_…).'),
    failureReason: z.string().nullable().describe("Stripe's failure_reason (expired_or_canceled_card, lost_or_stolen_card, unknown, …)."),
    stripeEventId: z.string().min(1).describe('The Stripe event (evt_…) this was learnt from.'),
    stripeCreatedAt: z.iso.datetime().describe('When Stripe created that event (ISO 8601, UTC).'),
    occurredAt: z.iso.datetime().describe('When it was recorded here (ISO 8601, UTC).'),
  })
  .describe('detail of the Refund Failed After Success event');

export type RefundFactDetail = z.infer<typeof refundFactDetailSchema>;

export function refundFactDetailJsonSchema(): Record<string, unknown> {
  return detailJsonSchema('refund-fact-detail', 'RefundFactDetail', refundFactDetailSchema);
}

/** Every committed event schema (schemas/<file>) and the code it is generated from: `npm run schemas` writes them, test/contract-schemas.test.ts holds them equal. */
export const EVENT_DETAIL_JSON_SCHEMAS: Readonly<Record<string, () => Record<string, unknown>>> = {
  'charge-outcome-detail.v1.json': chargeOutcomeDetailJsonSchema,
  'refund-outcome-detail.v1.json': refundOutcomeDetailJsonSchema,
  'authorization-outcome-detail.v1.json': authorizationOutcomeDetailJsonSchema,
  'charge-aftermath-detail.v1.json': chargeAftermathDetailJsonSchema,
  'refund-fact-detail.v1.json': refundFactDetailJsonSchema,
};
