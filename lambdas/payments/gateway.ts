// The gateway boundary: what the engine asks of a payment provider, and the answers it can get.
// An adapter (stripe-gateway.ts) turns SDK calls and exceptions into these values; it never throws,
// so that every answer — including "I do not know" — is something the engine records.
import type { PaymentIntentView } from './types.ts';

/**
 * How a failed call is to be read (docs/model.md, the classification table). The question that matters is not "did it fail" but
 * "do we now know whether Stripe executed it".
 */
export const FailureKind = {
  /** 402: Stripe executed the request and the card was declined. Final. */
  declined: 'declined',
  /** 400 (not idempotency): Stripe refused the request without executing it. Final. */
  invalidRequest: 'invalid_request',
  /** 404 on a retrieve: the PaymentIntent we hold an id for does not exist. Needs a human. */
  notFound: 'not_found',
  /** 429: not executed; try later. */
  rateLimited: 'rate_limited',
  /** 401: not executed; our configuration is wrong (alarm). */
  authentication: 'authentication',
  /** 403: not executed; our configuration is wrong (alarm). */
  permission: 'permission',
  /** Timeout, reset, 5xx, 409, unreadable answer: it may or may not have been executed. */
  ambiguous: 'ambiguous',
  /** Same key, other parameters: a bug in key use. Never swallowed. */
  idempotencyMisuse: 'idempotency_misuse',
} as const;
export type FailureKind = (typeof FailureKind)[keyof typeof FailureKind];

export interface GatewayFailure {
  readonly kind: FailureKind;
  /** The SDK's error class name, e.g. StripeConnectionError, or the raw JS error name. */
  readonly errorClass: string;
  readonly httpStatus?: number;
  /** Stripe's error code (card_declined, resource_missing, …) or decline code. */
  readonly code?: string;
  /** The parameter Stripe named (`amount` on an over-refund, whose code Stripe has been seen to leave empty). */
  readonly param?: string;
  readonly message: string;
  readonly requestId?: string;
  /** A declined create still creates a PaymentIntent; its id is evidence worth keeping. */
  readonly paymentIntent?: PaymentIntentView;
  /**
   * HTTP attempts the SDK made for this one call (it retries connection errors, 409 and 5xx under the
   * same key). A 429 / 401 / 403 proves only that ITS attempt was not executed: with more than one
   * attempt an earlier one may have executed and lost its answer. Absent: the adapter cannot tell.
   */
  readonly httpAttempts?: number;
  /**
   * How many of those attempts Stripe answered 429 / 401 / 403 — before its idempotency layer, so
   * they executed nothing. stripe-node retries a 429 that says `Stripe-Should-Retry: true` (a lock
   * timeout), so a call can end in a 429 after several attempts that were all refused: nothing
   * executed. Absent: the client does not report each attempt's answer.
   */
  readonly attemptsRefused?: number;
  /** The answer's Stripe-Should-Retry header: true (a lock timeout: retry), false (Stripe's own 500: a re-send is a replay). */
  readonly stripeShouldRetry?: boolean;
}

export type GatewayResult<T> = { readonly ok: true; readonly value: T } | { readonly ok: false; readonly failure: GatewayFailure };

/**
 * Which Stripe account a request is made AS (Connect: the Stripe-Account header, stripe-node's
 * `stripeAccount` request option; docs.stripe.com/connect/authentication). Null or absent: the
 * platform. Objects, idempotency keys, List and Search are the account's own: every request of an
 * operation on a connected account carries it (docs/model.md#connected-accounts).
 */
export interface AccountScope {
  readonly account?: string | null;
}

export interface CreatePaymentIntentRequest extends AccountScope {
  readonly idempotencyKey: string;
  readonly amount: number;
  readonly currency: string;
  readonly customerId: string;
  readonly paymentMethod: string;
  /** operation_id, order_id and key_generation: how Search finds it once the key is gone (plus the producer's own keys). */
  readonly metadata: Readonly<Record<string, string>>;
  readonly description?: string | null;
  readonly statementDescriptorSuffix?: string | null;
  /** Connect: the platform's fee (`application_fee_amount`). */
  readonly applicationFeeAmount?: number | null;
  /** Connect: a destination charge (`transfer_data[destination]`), made on the platform. */
  readonly transferDestination?: string | null;
  /** 'manual': authorize only (`capture_method=manual`); absent: Stripe's default, captured at once. */
  readonly captureMethod?: 'manual' | null;
}

/**
 * POST /v1/payment_intents/:id/capture (docs.stripe.com/api/payment_intents/capture) or …/cancel
 * (docs.stripe.com/api/payment_intents/cancel), with our key: they act on a PaymentIntent we hold.
 */
export interface AuthorizationActionRequest extends AccountScope {
  readonly idempotencyKey: string;
  readonly paymentIntentId: string;
  /** A capture's `amount_to_capture` (the rest is released); ignored by a cancel. */
  readonly amount?: number;
}

export interface SearchPaymentIntentsRequest extends AccountScope {
  readonly operationId: string;
  readonly keyGeneration: number;
}

/**
 * A real-time list of the objects a kind's list endpoint holds in a scope and a `created` range
 * (charges: `GET /v1/payment_intents?customer=…`; refunds, later: `GET /v1/refunds?payment_intent=…`).
 * Every page is read, newest first; `complete: false` when the adapter stopped before the last page
 * (page cap or no request budget left): then absence is not shown.
 */
export interface ListRequest extends AccountScope {
  /** The list's filter, e.g. { customer: 'cus_…' }. */
  readonly scope: Readonly<Record<string, string>>;
  /** Unix seconds, inclusive (Stripe's `created[gte]` / `created[lte]`). */
  readonly createdGte: number;
  readonly createdLte: number;
  /**
   * Asked before every page after the first (each page is one request against the rate budget);
   * false stops the list there, incomplete.
   */
  readonly beforePage?: () => Promise<boolean> | boolean;
}

export interface ListAnswer<T> {
  readonly items: readonly T[];
  readonly pages: number;
  /** Stripe's Request-Id of every page: the audit trail's proof that the list was asked. */
  readonly requestIds: readonly string[];
  readonly complete: boolean;
}

export interface CreateRefundRequest extends AccountScope {
  readonly idempotencyKey: string;
  /** The PaymentIntent refunded: the order's charge (or, for the duplicate remedy, the extra one). */
  readonly paymentIntentId: string;
  readonly amount: number;
  readonly reason: string | null;
  /** operation_id, order_id, refund_id and key_generation: how List evidence finds it. */
  readonly metadata: Readonly<Record<string, string>>;
}

/**
 * A Stripe Refund reduced to what the engine reasons about, in the same shape as a PaymentIntent's
 * (id, status, amount, currency, metadata), so that the shared decisions read both.
 */
export interface RefundView extends PaymentIntentView {
  readonly paymentIntent: string | null;
  /** Why Stripe failed it (docs.stripe.com/api/refunds/object: failure_reason), once failed; absent or null otherwise. */
  readonly failureReason?: string | null;
}

/**
 * The mode a Stripe key works in. Stripe: "All Stripe API requests occur in either test mode or live
 * mode … Each mode has its own set of API keys. Objects in one mode aren't accessible to the other"
 * (docs.stripe.com/keys). Secret keys are `sk_live_…` / `sk_test_…`, restricted keys `rk_live_…` /
 * `rk_test_…` (the prefixes Stripe's own secret scanning matches). A key of any other shape has no
 * mode we can tell: null, and no event is trusted with it (event-decisions.ts judgeEventOrigin).
 */
export type StripeKeyMode = 'live' | 'test';

export function stripeKeyMode(apiKey: string): StripeKeyMode | null {
  if (apiKey.startsWith('sk_live_') || apiKey.startsWith('rk_live_')) return 'live';
  if (apiKey.startsWith('sk_test_') || apiKey.startsWith('rk_test_')) return 'test';
  return null;
}

export interface PaymentGateway {
  /**
   * The mode of the key this gateway calls Stripe with (stripeKeyMode); null or absent: not
   * recognisable. Events are trusted only from this mode (event-decisions.ts judgeEventOrigin).
   */
  readonly keyMode?: StripeKeyMode | null;
  createPaymentIntent(request: CreatePaymentIntentRequest): Promise<GatewayResult<PaymentIntentView>>;
  /** `scope.account`: retrieved AS that connected account (a PaymentIntent exists only for its own account). */
  retrievePaymentIntent(id: string, scope?: AccountScope): Promise<GatewayResult<PaymentIntentView>>;
  /** Not real time: "nothing found" proves nothing for a recent PaymentIntent. */
  searchPaymentIntents(request: SearchPaymentIntentsRequest): Promise<GatewayResult<PaymentIntentView[]>>;
  /** Real time: the customer's PaymentIntents created in the range (scope: { customer }). */
  listPaymentIntents(request: ListRequest): Promise<GatewayResult<ListAnswer<PaymentIntentView>>>;
  /** POST /v1/refunds with our key. */
  createRefund(request: CreateRefundRequest): Promise<GatewayResult<RefundView>>;
  retrieveRefund(id: string, scope?: AccountScope): Promise<GatewayResult<RefundView>>;
  /** Real time: every refund of a PaymentIntent (scope: { payment_intent }); the created range is not sent. */
  listRefunds(request: ListRequest): Promise<GatewayResult<ListAnswer<RefundView>>>;
  /** Capture an authorized PaymentIntent (manual capture), all or `amount` of it. */
  capturePaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>>;
  /** Release an authorized PaymentIntent (manual capture) whole. */
  cancelPaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>>;
}
