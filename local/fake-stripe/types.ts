// Public types of the fake Stripe server. Everything here is plain data so that the same shapes travel
// over the /__fake/ HTTP API (JSON) to another process (a soak worker, the CLI).

/**
 * Every fault the fake can inject, in the fixed order used to turn one random draw into a kind
 * (see faults.ts). The order is part of reproducibility: do not reorder, only append.
 */
export const FAULT_KINDS = [
  /** Charge executed and its response cached, then the socket is destroyed before any header. */
  'lost_response_after_commit',
  /** Charge executed; a 500 is answered AND cached for the key (Stripe replays 500s). */
  'error_500_after_commit',
  /** Nothing executed; a 500 is answered and cached for the key (retries keep getting 500). */
  'error_500_before_commit',
  /** Nothing executed, nothing cached: 429 comes before the idempotency layer. */
  'rate_limited_429',
  /** Charge executed and cached, then the request is never answered (until the client gives up). */
  'hang',
  /** Card declined: PaymentIntent created in requires_payment_method, 402 card_error cached. */
  'decline',
  /** PaymentIntent created with status 'processing' (settles later); on a refund create: the Refund is 'pending'. */
  'processing',
  /** 401 (an invalid_request_error on the wire; stripe-node's StripeAuthenticationError); nothing executed or cached. */
  'unauthorized_401',
  /** 403 (an invalid_request_error on the wire; stripe-node's StripePermissionError); nothing executed or cached. */
  'permission_403',
  // Added beyond the brief (scripted use only, in no profile):
  /**
   * Charge executed and cached, then a proxy in front of Stripe answers 502 with a JSON body that has
   * no `error` key. stripe-node resolves such a body as a SUCCESS (the SDK trap in ENVIRONMENT.md):
   * a gateway must check the resource shape / lastResponse.statusCode.
   */
  'proxy_502_after_commit',
  /**
   * Charge executed and cached; status line and headers (200) are sent, then the body is cut.
   * Unlike lost_response_after_commit, stripe-node never retries this one, so it yields a
   * StripeConnectionError after exactly one HTTP attempt whatever maxNetworkRetries is.
   */
  'truncated_response_after_commit',
  /**
   * Charge executed and cached; status 200 and headers are sent, then the body never comes: one
   * byte of whitespace at a time, often enough that no idle-socket timeout ever fires (stripe-node's
   * `timeout` is one). The caller is frozen after Stripe acted and before it could write anything —
   * what a worker killed at that moment leaves behind (bench:peers uses it as its crash).
   */
  'stall_after_commit',
  /**
   * A create (PaymentIntent or Refund) answered 500 — the 500 stored for the key and replayed, as
   * Stripe replays 500s — while NOTHING exists yet: the object is committed LATER (lateCommitMs, or
   * commitLate()), with the request's parameters, `created` = the commit. (Scripted use and random
   * rates; in no profile.)
   */
  'error_500_late_commit',
  /**
   * A create that takes its key and is never answered (the client times out, as under `hang`), but
   * executes nothing yet: the key stays in flight (re-sends get 409 idempotency_key_in_use) until the
   * LATER commit (lateCommitMs, or commitLate()) makes the object and stores its answer for the key.
   */
  'in_flight_then_commit',
  /**
   * A 429 `lock_timeout` with `Stripe-Should-Retry: true`: another request or Stripe process held the
   * object's lock too long (docs.stripe.com/rate-limits, "lock timeouts"; docs.stripe.com/error-codes
   * lock_timeout). Before the idempotency layer: nothing executed, nothing cached — and stripe-node
   * retries it (the header comes before its own rules), unlike a rate-limit 429. (Scripted use and
   * random rates; in no profile.)
   */
  'lock_timeout_429',
] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** The faults whose create is committed after Stripe answered it (or left it unanswered). */
export type LateCommitFault = Extract<FaultKind, 'error_500_late_commit' | 'in_flight_then_commit'>;

/** What one late commit did (commitLate() returns them, oldest request first). */
export interface LateCommitResult {
  readonly fault: LateCommitFault;
  readonly endpoint: 'create' | 'refund_create' | 'capture' | 'cancel';
  readonly idempotencyKey: string | null;
  /** metadata.operation_id / order_id of the create. */
  readonly operationId: string | null;
  readonly orderId: string | null;
  /** The request that was answered 500 (or never answered): its `seq` in requests(). */
  readonly requestSeq: number;
  /**
   * The status a normal execution gave at the commit: 200; 402 for a declined card (the PaymentIntent
   * exists, requires_payment_method); 400 for a refund refused then (nothing made). For
   * in_flight_then_commit this answer is now stored for the key; error_500_late_commit keeps its 500.
   */
  readonly status: number;
  /** The PaymentIntent made (a create), refunded (a refund create), captured or canceled. */
  readonly paymentIntentId: string | null;
  /** The Refund made; null for a PaymentIntent create or a refund refused at the commit. */
  readonly refundId: string | null;
  /** When it was committed (epoch ms): the object's `created` is this, in seconds. */
  readonly committedAtMs: number;
}

export type FaultRates = Partial<Record<FaultKind, number>>;

/** What a random fault draw is keyed on: the Idempotency-Key of the create, or its metadata.order_id. */
export type FaultKeyBy = 'idempotency_key' | 'order';

export type Endpoint = 'create' | 'retrieve' | 'search' | 'list' | 'capture' | 'cancel' | RefundEndpoint;
/** The Refunds API (refunds.ts): POST /v1/refunds, GET /v1/refunds/:id, GET /v1/refunds. */
export type RefundEndpoint = 'refund_create' | 'refund_retrieve' | 'refund_list';

/** Which requests a scripted fault or a hold() applies to. Every given field must match; {} matches all. */
export interface FaultMatch {
  readonly endpoint?: Endpoint;
  /** metadata.operation_id of the create, of the retrieved PaymentIntent, or of the search query. */
  readonly operationId?: string;
  /** metadata.order_id, found the same way. */
  readonly orderId?: string;
  readonly idempotencyKey?: string;
  /** The retrieved PaymentIntent, or the one a replayed create answers with; for refunds, the refunded one. */
  readonly paymentIntentId?: string;
  /** The retrieved Refund, or the one a replayed refund create answers with. */
  readonly refundId?: string;
  /** The `customer` filter of a PaymentIntent list. */
  readonly customerId?: string;
}

export interface FakeStripeOptions {
  /** 0 (default) = a random free port. Always bound to 127.0.0.1. */
  readonly port?: number;
  /** Added before answering every /v1 request. For an executing create it elapses while the key is in flight. Default 0. */
  readonly latencyMs?: number;
  /** A PaymentIntent becomes visible to Search only this long after creation. Default 0. */
  readonly searchLagMs?: number;
  /**
   * 'processing' PaymentIntents become 'succeeded' after this, and refunds move on by themselves
   * ('pending' → 'succeeded'; a `pm_card_refundFail` refund 'succeeded' → 'failed'); null (default) =
   * only via settle() / settleRefund().
   */
  readonly processingSettleMs?: number | null;
  /**
   * Random faults on creates, reproducible from the seed. keyBy: what "the same request" is for the
   * draw — the Idempotency-Key (default), or metadata.order_id, so that callers with different keys
   * (or none) meet the same faults on the same orders (bench:peers). Default: none.
   */
  readonly faults?: { readonly seed: number; readonly rates: FaultRates; readonly keyBy?: FaultKeyBy };
  /**
   * Token buckets (burst = one second's worth); beyond one: 429 `rate_limit`. `perSecond` over all /v1
   * requests; with it, as Stripe documents (docs.stripe.com/rate-limits), a bucket per endpoint
   * (`perEndpointPerSecond`, default 25) and a tighter one for Search (`searchPerSecond`, default 20
   * read operations per second). `now` (epoch ms) is the buckets' clock, for tests. Default: unlimited.
   * STRIPE_TEST_MODE_RATE_LIMIT is Stripe's sandbox limits (25 per second).
   */
  readonly rateLimit?: {
    readonly perSecond: number;
    readonly perEndpointPerSecond?: number;
    readonly searchPerSecond?: number;
    readonly now?: () => number;
  };
  /** Accepted bearer keys; default: any key starting with sk_test_. */
  readonly apiKeys?: readonly string[];
  /** How many request records requests() keeps (oldest dropped first). Counters in stats() never drop. Default 100 000. */
  readonly requestLogLimit?: number;
  /**
   * How a refund of more than is left on the charge is refused: 'amount_too_large' (default, the code
   * docs.stripe.com/error-codes documents) or 'no_code' (param `amount`, no code: seen from Stripe, refunds.ts).
   */
  readonly overRefundError?: 'amount_too_large' | 'no_code';
  /**
   * How long after its request a late commit (error_500_late_commit, in_flight_then_commit) happens
   * by itself. null / undefined (default): only when commitLate() (POST /__fake/commit_late) releases it.
   */
  readonly lateCommitMs?: number | null;
  /**
   * How long a manual-capture authorization lives before Stripe cancels the uncaptured PaymentIntent
   * (cancellation_reason `automatic`), from its creation. Default 7 days: "Uncaptured PaymentIntents
   * are cancelled a set number of days (7 by default) after their creation" (the capture operation's
   * description in Stripe's OpenAPI spec, stripe-node 23.1.0 PaymentIntents.capture), and 7 days is
   * the customer-initiated card-not-present window of every brand (docs.stripe.com/payments/place-a-hold-on-a-payment-method).
   * A time-lapse sets it short.
   */
  readonly authorizationExpiryMs?: number;
  /**
   * The clock authorizations expire on (epoch ms). Default Date.now; a test brings its own and moves
   * it, never sleeping. Expiry is applied when the fake next looks (any /v1 request, paymentIntents(),
   * the control API) or when expireAuthorizations() is called.
   */
  readonly now?: () => number;
  /**
   * The connected accounts (acct_…) this platform has (Stripe Connect): a request may act as one of
   * them with `Stripe-Account`. Any other id is refused (account_invalid). addConnectedAccount() and
   * POST /__fake/connected_accounts add more. Default: none.
   */
  readonly connectedAccounts?: readonly string[];
}

export type PaymentIntentStatus =
  | 'requires_payment_method'
  | 'requires_confirmation'
  | 'requires_action'
  | 'processing'
  | 'requires_capture'
  | 'succeeded'
  | 'canceled';

export const PAYMENT_INTENT_STATUSES = [
  'requires_payment_method',
  'requires_confirmation',
  'requires_action',
  'processing',
  'requires_capture',
  'succeeded',
  'canceled',
] as const satisfies readonly PaymentIntentStatus[];

export interface LastPaymentError {
  readonly type: 'card_error';
  readonly code: string;
  readonly decline_code?: string;
  readonly message: string;
}

/** The PaymentIntent as Stripe serialises it (the subset this product reads). */
export interface PaymentIntentJson {
  readonly id: string;
  readonly object: 'payment_intent';
  readonly amount: number;
  readonly currency: string;
  readonly customer: string | null;
  readonly payment_method: string | null;
  readonly status: PaymentIntentStatus;
  readonly metadata: Readonly<Record<string, string>>;
  /** Stripe's PaymentIntent object carries both, null when not set (optional here for hand-made records). */
  readonly description?: string | null;
  readonly statement_descriptor_suffix?: string | null;
  /** Unix seconds. */
  readonly created: number;
  readonly livemode: false;
  /**
   * `manual`: a confirmed card payment stops at requires_capture until POST …/capture (or cancel, or
   * the authorization's expiry). `automatic_async` is accepted and behaves as `automatic` here.
   */
  readonly capture_method: 'automatic' | 'automatic_async' | 'manual';
  readonly confirmation_method: 'automatic';
  readonly last_payment_error: LastPaymentError | null;
  /**
   * What Stripe's PaymentIntent always carries (docs.stripe.com/api/payment_intents/object): the
   * amount that can still be captured (requires_capture), the amount received (captured), when and
   * why it was canceled, the Connect fee and destination. Optional here for hand-made records; the
   * fake's own objects always carry them.
   */
  readonly amount_capturable?: number;
  readonly amount_received?: number;
  readonly canceled_at?: number | null;
  readonly cancellation_reason?: CancellationReason | null;
  readonly application_fee_amount?: number | null;
  readonly transfer_data?: { readonly destination: string; readonly amount?: number } | null;
}

/**
 * `cancellation_reason` (stripe-node 23.1.0 PaymentIntent.CancellationReason): the four a cancel
 * request may give (PaymentIntentCancelParams), and `automatic` — Stripe's own, when an uncaptured
 * authorization expires.
 */
export type CancellationReason = 'abandoned' | 'duplicate' | 'fraudulent' | 'requested_by_customer' | 'automatic';

/**
 * Ground truth about one PaymentIntent. Stripe's own fields are snake_case; the two camelCase fields
 * are the fake's bookkeeping and never appear on the wire.
 */
export interface PaymentIntentRecord extends PaymentIntentJson {
  /** The Idempotency-Key of the request that created it; null when it was sent without one. */
  readonly idempotencyKey: string | null;
  /** Creation time in epoch milliseconds (what searchLagMs is measured from). */
  readonly createdAtMs: number;
  /** The Request-Id of the API request that created it (its events' `request.id`); null when not made by an API request. */
  readonly requestId?: string | null;
  /**
   * The connected account it was created on (the create's `Stripe-Account` header); null: the
   * platform's own. Only requests made as that account see it (absent on hand-made records).
   */
  readonly stripeAccount?: string | null;
  /**
   * A manual-capture PaymentIntent in requires_capture: when its authorization expires (epoch ms,
   * creation + authorizationExpiryMs); null otherwise.
   */
  readonly authorizationExpiresAtMs?: number | null;
}

/**
 * What a /v1 request got: an HTTP status; 'lost' (socket destroyed before any byte); 'truncated'
 * (headers and half a body); 'hung' (never answered); 'aborted' (the client hung up before the answer
 * was ready); 'pending' while it is still being worked on.
 */
export type RequestOutcome = number | 'lost' | 'truncated' | 'hung' | 'aborted' | 'pending';

export interface RequestRecord {
  /** 1, 2, 3… in arrival order (also the cursor of GET /__fake/requests?since=). */
  readonly seq: number;
  /** Arrival time, epoch milliseconds. */
  readonly at: number;
  readonly method: string;
  readonly path: string;
  /** 'other' for unknown routes. */
  readonly endpoint: Endpoint | 'other';
  readonly idempotencyKey: string | null;
  readonly operationId: string | null;
  readonly paymentIntentId: string | null;
  /** The Refund retrieved, created or replayed (refund endpoints only). */
  readonly refundId?: string | null;
  /** The `Stripe-Account` header it was sent with (a connected account), null without one. */
  readonly account?: string | null;
  /** The fault that was applied (a drawn random fault that could not apply is not listed). */
  readonly fault: FaultKind | null;
  readonly faultSource: 'scripted' | 'random' | null;
  readonly status: RequestOutcome;
  /** True when the idempotency layer answered with a stored response. */
  readonly replayed: boolean;
  readonly requestId: string;
  /** Time until the answer (or the loss) in ms; null while pending or hung. */
  readonly durationMs: number | null;
  /**
   * Late-commit faults only: when the create was committed (epoch ms), null while it is pending;
   * absent on every other request.
   */
  readonly lateCommittedAt?: number | null;
}

export interface FakeStripeStats {
  readonly requests: { readonly total: number } & Readonly<Record<Endpoint | 'other', number>>;
  /** How requests ended, keyed by HTTP status ('200', '402', …) or 'lost' / 'truncated' / 'hung' / 'aborted'. */
  readonly answers: Readonly<Record<string, number>>;
  /** Creates that ran (each made a PaymentIntent, except error_500_before_commit which made none). */
  readonly createsExecuted: number;
  /** Refund creates that ran (each made a Refund, except error_500_before_commit and refused ones: see refunds.ts). */
  readonly refundCreatesExecuted: number;
  readonly refunds: { readonly total: number; readonly byStatus: Readonly<Record<RefundStatus, number>> };
  readonly replays: number;
  /** Same key, different parameters (400 idempotency_error). */
  readonly idempotencyErrors: number;
  /** Same key while the first request was in flight (409 idempotency_key_in_use). */
  readonly conflicts409: number;
  /** 400s from parameter validation (never cached). */
  readonly validationErrors: number;
  /** 429s from the token bucket (fault-injected 429s are under faults). */
  readonly rateLimited: number;
  readonly faults: Readonly<Record<FaultKind, number>>;
  readonly paymentIntents: { readonly total: number; readonly byStatus: Readonly<Record<PaymentIntentStatus, number>> };
  /** Number of metadata.operation_id values with more than one succeeded PaymentIntent. Must stay 0. */
  readonly doubleCharges: number;
  readonly doubleChargedOperations: readonly string[];
  /** The same, by metadata.order_id (the product's promise is per order). */
  readonly doubleChargedOrders: readonly string[];
  /** Idempotency keys currently remembered, and how many were forgotten by pruneKeys(). */
  readonly keysCached: number;
  readonly keysPruned: number;
  /** Creates answered (or left unanswered) by a late-commit fault whose commit has not happened yet. */
  readonly lateCommitsPending: number;
  /** Late commits that ran (whatever they made: see LateCommitResult.status). */
  readonly lateCommitsMade: number;
}

export interface HoldHandle {
  /** Resolves when a matching request has arrived and is parked. */
  readonly arrived: Promise<void>;
  /** Lets the parked request go on (or cancels the hold if nothing arrived yet). */
  release(): void;
}

export type SettleStatus = 'succeeded' | 'canceled' | 'requires_payment_method';

export interface PaymentIntentFilter {
  readonly operationId?: string;
  readonly orderId?: string;
  /** A connected account's PaymentIntents only; null: the platform's own; absent: all. */
  readonly account?: string | null;
}

export interface FakeStripe {
  readonly url: string;
  readonly host: string;
  readonly port: number;
  /** Stops listening and destroys every connection, hanging and parked ones included. */
  close(): Promise<void>;
  /** Scripted faults, consumed in order; they take precedence over random ones. times defaults to 1. */
  injectFault(match: FaultMatch, fault: FaultKind, times?: number): void;
  /** Forget cached keys (stands for Stripe pruning keys after > 24 h). Keys still in flight stay. Returns how many. */
  pruneKeys(filter?: { readonly olderThanMs?: number; readonly idempotencyKey?: string }): number;
  settle(paymentIntentId: string, status: SettleStatus): void;
  /** One requires_capture PaymentIntent's authorization `ms` nearer its end (Stripe cancels it, `automatic`, once lapsed). */
  ageAuthorization(paymentIntentId: string, ms: number): void;
  /**
   * Make every PaymentIntent `ms` older (`created` and the bookkeeping time): a test that moves time
   * forward for the product's records must move Stripe's with them, or a List by `created` would
   * see a world where our sends happened long before Stripe's objects.
   */
  ageRecords(ms: number): void;
  /**
   * Park the next matching /v1 request before it is processed, until release(). An executing create
   * (PaymentIntent or Refund) parks after taking its key (a concurrent request with the key meets 409), a replay before its
   * answer, a retrieve or search before it reads. Requests refused earlier (auth, 429, parameter
   * mismatch, 409, validation) are not parked.
   */
  hold(match: FaultMatch): HoldHandle;
  /** Ground truth: every Refund ever created, oldest first (`orderId` / `operationId` match the refunded PaymentIntent's metadata). */
  refunds(filter?: RefundFilter): RefundRecord[];
  /** What Stripe (or the card network) does to a refund later: see RefundSettleStatus. */
  settleRefund(refundId: string, status: RefundSettleStatus): void;
  /**
   * The cardholder's bank charged the PaymentIntent's charge back (a dispute, not an inquiry): while
   * `disputed`, a refund create of it is refused with `charge_disputed` (refunds.ts). `false`: the
   * dispute was won, the funds are back, refunds are allowed again. WebhookDispatcher.dispute() calls it.
   */
  setDisputed(paymentIntentId: string, disputed: boolean): void;
  /**
   * A refund made in the Dashboard: a Refund with empty metadata and no key, counted against the
   * charge, listed, announced like any other (amount omitted: what is left). More than is left: RangeError.
   */
  dashboardRefund(paymentIntentId: string, amount?: number): RefundJson;
  setOverRefundError(form: 'amount_too_large' | 'no_code'): void;
  /**
   * Commit now the pending late commits (error_500_late_commit, in_flight_then_commit) whose request
   * matches (endpoint, operationId, orderId, idempotencyKey, paymentIntentId — for a refund the
   * refunded one; {} or omitted: all), oldest request first, as a normal execution at this moment.
   */
  commitLate(match?: FaultMatch): LateCommitResult[];
  /** Ground truth: every PaymentIntent ever created, oldest first. */
  paymentIntents(filter?: PaymentIntentFilter): PaymentIntentRecord[];
  /** Cancels (cancellation_reason `automatic`) every requires_capture PaymentIntent whose authorization expired on the clock; returns how many. */
  expireAuthorizations(): number;
  /** A connected account Stripe-Account may name from now on (acct_…). */
  addConnectedAccount(id: string): void;
  connectedAccounts(): string[];
  /** Every /v1 request (up to requestLogLimit), oldest first; since = only those with seq > since. */
  requests(since?: number): RequestRecord[];
  stats(): FakeStripeStats;
  setFaultRates(rates: FaultRates, seed?: number): void;
  setLatency(ms: number): void;
  setSearchLag(ms: number): void;
  /** Forget everything (PaymentIntents, keys, logs, counters, scripted faults, pending holds and late commits); settings stay. */
  reset(): void;
}

// ------------------------------------------------------------------------------------------ refunds

/** Stripe's Refund statuses (https://docs.stripe.com/api/refunds/object, `status`). */
export const REFUND_STATUSES = ['pending', 'requires_action', 'succeeded', 'failed', 'canceled'] as const;
export type RefundStatus = (typeof REFUND_STATUSES)[number];

/**
 * Where settleRefund() can take a refund: pending → succeeded | failed | canceled, and succeeded →
 * failed (Stripe documents that a card refund can fail asynchronously after it first said succeeded).
 */
export type RefundSettleStatus = 'succeeded' | 'failed' | 'canceled';

export type RefundReason = 'duplicate' | 'fraudulent' | 'requested_by_customer';

/**
 * The Refund as Stripe serialises it (https://docs.stripe.com/api/refunds/object, the subset
 * modelled). The published schema (test/fixtures/stripe-openapi/refund-endive-2026-09-30.json) has
 * `failure_balance_transaction`, `failure_reason` and `pending_reason` as optional, NOT nullable:
 * absent unless they have a value. `customer` and `payment_method` are nullable and always present.
 */
export interface RefundJson {
  readonly id: string;
  readonly object: 'refund';
  readonly amount: number;
  readonly balance_transaction: string | null;
  /** The refunded PaymentIntent's charge (the fake derives `ch_…` from the PaymentIntent id). */
  readonly charge: string;
  /** Unix seconds. */
  readonly created: number;
  readonly currency: string;
  /** The refunded PaymentIntent's customer. */
  readonly customer: string | null;
  /** Only once the refund failed or was canceled. */
  readonly failure_balance_transaction?: string;
  readonly failure_reason?: string;
  readonly metadata: Readonly<Record<string, string>>;
  readonly payment_intent: string;
  /** The refunded PaymentIntent's payment method. */
  readonly payment_method: string | null;
  /** Why a refund is pending (API 2025-04-30 and later); only while status is pending. */
  readonly pending_reason?: 'processing' | 'insufficient_funds' | 'charge_pending';
  readonly reason: RefundReason | null;
  readonly receipt_number: null;
  readonly source_transfer_reversal: null;
  readonly status: RefundStatus;
  readonly transfer_reversal: null;
}

/** Ground truth about one Refund; the camelCase fields are the fake's bookkeeping, never on the wire. */
export interface RefundRecord extends RefundJson {
  readonly idempotencyKey: string | null;
  /** The Request-Id of the API request that created it; null for a Dashboard refund. */
  readonly requestId?: string | null;
  readonly createdAtMs: number;
  /** metadata.order_id / operation_id of the refunded PaymentIntent (whatever the refund's own metadata says). */
  readonly paymentIntentOrderId: string | null;
  readonly paymentIntentOperationId: string | null;
}

export interface RefundFilter {
  readonly paymentIntentId?: string;
  /** Matches the refunded PaymentIntent's metadata.order_id. */
  readonly orderId?: string;
  /** Matches the refund's own metadata.operation_id (the refund operation that sent it). */
  readonly operationId?: string;
}
