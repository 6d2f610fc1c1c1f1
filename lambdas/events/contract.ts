// The outcome-event contract (DESIGN §6) for consumers: order services, e-mail senders, ledgers.
// Delivery is at least once. Deduplicate on `detail.eventId`; it is stable across re-sends.

export const DEFAULT_EVENT_SOURCE = 'payments.charges';

export const DetailType = {
  succeeded: 'Charge Succeeded',
  failed: 'Charge Failed',
  needsReview: 'Charge Needs Review',
} as const;
export type DetailType = (typeof DetailType)[keyof typeof DetailType];

export const EVENT_VERSION = 1;

/** `detail` of every outcome event. Additive changes keep `version`; anything else bumps it. */
export interface ChargeOutcomeDetail {
  readonly version: 1;
  /** Stable id of this event: the same on every re-send. Consumers deduplicate on it. */
  readonly eventId: string;
  readonly operationId: string;
  readonly orderId: string;
  readonly status: 'succeeded' | 'failed' | 'needs_review';
  /** Minor units (cents). */
  readonly amount: number;
  readonly currency: string;
  /** The Stripe PaymentIntent id, when one is known. */
  readonly externalId: string | null;
  /** Review reason (needs_review) or failure code (failed, e.g. insufficient_funds); null on success. */
  readonly reason: string | null;
  /** When the outcome was recorded (ISO 8601, UTC). */
  readonly occurredAt: string;
}

/** JSON Schema (draft 2020-12) of `detail`, for consumers that validate or generate code. */
export const chargeOutcomeDetailSchema = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  $id: 'https://schemas.example.com/payments.charges/charge-outcome/v1.json',
  title: 'ChargeOutcomeDetail',
  description: 'detail of the Charge Succeeded / Charge Failed / Charge Needs Review events (source payments.charges)',
  type: 'object',
  additionalProperties: true,
  required: ['version', 'eventId', 'operationId', 'orderId', 'status', 'amount', 'currency', 'externalId', 'reason', 'occurredAt'],
  properties: {
    version: { const: 1 },
    eventId: { type: 'string', format: 'uuid' },
    operationId: { type: 'string', format: 'uuid' },
    orderId: { type: 'string', minLength: 1, maxLength: 128 },
    status: { enum: ['succeeded', 'failed', 'needs_review'] },
    amount: { type: 'integer', minimum: 1 },
    currency: { type: 'string', pattern: '^[a-z]{3}$' },
    externalId: { type: ['string', 'null'] },
    reason: { type: ['string', 'null'] },
    occurredAt: { type: 'string', format: 'date-time' },
  },
} as const;

/** The detail-type that announces a status. */
export function detailTypeOf(status: ChargeOutcomeDetail['status']): DetailType {
  return status === 'succeeded' ? DetailType.succeeded : status === 'failed' ? DetailType.failed : DetailType.needsReview;
}
