// The fake Stripe's event deliveries: Stripe events made from what happens in the fake's ledger
// (a PaymentIntent created or settled) and from "Dashboard" actions (a refund, a dispute), signed
// exactly as Stripe documents and POSTed to an endpoint — with the faults Stripe documents its
// deliveries may have.
//
// What Stripe documents and this file follows:
//   - signing (https://docs.stripe.com/webhooks#verify-manually): header
//     `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "${t}.${raw body}")>`, the
//     secret being the endpoint's whsec_… string used as the HMAC key as is; every delivery attempt
//     is signed afresh with its own timestamp;
//   - the event object (https://docs.stripe.com/api/events/object): id evt_…, object "event",
//     api_version, created (unix seconds), data.object (the resource at that moment),
//     data.previous_attributes for updates, livemode, pending_webhooks, request, type; and
//     `account` — "The connected account that originates the event" — on the events a Connect
//     platform's endpoint receives from its connected accounts ("These events include an account
//     attribute that identifies the relevant connected account"; absent otherwise). `livemode` is
//     the mode of the object ("If the object exists in live mode, the value is true"): a live
//     endpoint gets live events, a test endpoint test events (docs.stripe.com/keys: "Objects in one
//     mode aren't accessible to the other");
//   - delivery (https://docs.stripe.com/webhooks#retries, #event-ordering): at least once — the
//     same event may arrive more than once; no ordering guarantee; a delivery that gets no 2xx is
//     retried with exponential backoff for up to three days (live mode).
// Nothing here needs the server's internals: it watches the ledger through the FakeStripe interface.
import { createHmac } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { uniformFromHash } from './faults.ts';
import type { FakeStripe, PaymentIntentRecord, RefundRecord } from './types.ts';
import { randomId } from './wire.ts';

export const FAKE_API_VERSION = '2026-10-28.endive';

/** Stripe's documented scheme, independent of any SDK (the product verifies with the SDK: two implementations meet). */
export function signStripePayload(payload: string, secret: string, timestampSeconds: number): string {
  const signature = createHmac('sha256', secret).update(`${timestampSeconds}.${payload}`, 'utf8').digest('hex');
  return `t=${timestampSeconds},v1=${signature}`;
}

export interface StripeEventJson {
  readonly id: string;
  readonly object: 'event';
  /** Present on a connected account's event delivered to a Connect endpoint; absent otherwise (as Stripe sends it). */
  readonly account?: string;
  readonly api_version: string;
  readonly created: number;
  readonly data: { readonly object: Record<string, unknown>; readonly previous_attributes?: Record<string, unknown> };
  readonly livemode: boolean;
  readonly pending_webhooks: number;
  readonly request: { readonly id: string | null; readonly idempotency_key: string | null };
  readonly type: string;
}

/** Where an event comes from: a connected account (Connect) and the mode. Default: this account, test mode. */
/**
 * `request` of an event: "Information on the API request that triggers the event" — `id` the
 * request's Request-Id, `idempotency_key` the key it was sent with; both null for an event Stripe
 * made on its own (docs.stripe.com/api/events/object, request.id: "If null, the event was automatic").
 * So the event of a PaymentIntent's create names the create; a later settle names nothing.
 */
export interface EventRequest {
  readonly id: string | null;
  readonly idempotency_key: string | null;
}

const AUTOMATIC: EventRequest = { id: null, idempotency_key: null };

/** The request that made a ledger object (null: none, e.g. a Dashboard refund). */
function madeBy(record: { readonly requestId?: string | null; readonly idempotencyKey: string | null }): EventRequest {
  return record.requestId ? { id: record.requestId, idempotency_key: record.idempotencyKey } : AUTOMATIC;
}

export interface EventOrigin {
  /** A connected account's id (acct_…): the event carries it as `account`. Null / absent: the platform's own event. */
  readonly account?: string | null;
  /** The object's mode; the fake itself is test mode (sk_test_ keys), so false unless said. */
  readonly livemode?: boolean;
}

export function makeStripeEvent(
  type: string,
  object: Record<string, unknown>,
  options: { createdMs?: number; previousAttributes?: Record<string, unknown>; apiVersion?: string; request?: EventRequest } & EventOrigin = {},
): StripeEventJson {
  return {
    id: randomId('evt_', 24),
    object: 'event',
    ...(options.account ? { account: options.account } : {}),
    api_version: options.apiVersion ?? FAKE_API_VERSION,
    created: Math.floor((options.createdMs ?? Date.now()) / 1000),
    data: { object: structuredClone(object), ...(options.previousAttributes ? { previous_attributes: options.previousAttributes } : {}) },
    livemode: options.livemode ?? false,
    pending_webhooks: 1,
    request: options.request ?? { id: null, idempotency_key: null },
    type,
  };
}

/**
 * The event type Stripe sends when a PaymentIntent enters a status (none for requires_confirmation).
 * requires_capture: `payment_intent.amount_capturable_updated` — "Occurs when a PaymentIntent has
 * funds to be captured" (docs.stripe.com/api/events/types); an authorization that is then captured
 * sends payment_intent.succeeded, one canceled or expired payment_intent.canceled.
 */
export function paymentIntentEventType(status: string): string | null {
  switch (status) {
    case 'succeeded':
      return 'payment_intent.succeeded';
    case 'processing':
      return 'payment_intent.processing';
    case 'requires_action':
      return 'payment_intent.requires_action';
    case 'canceled':
      return 'payment_intent.canceled';
    case 'requires_payment_method':
      return 'payment_intent.payment_failed';
    case 'requires_capture':
      return 'payment_intent.amount_capturable_updated';
    default:
      return null;
  }
}

/** The wire shape of a ledger record (the fake's bookkeeping fields removed). */
export function paymentIntentJson(record: PaymentIntentRecord): Record<string, unknown> {
  const { idempotencyKey: _key, createdAtMs: _at, requestId: _request, stripeAccount: _account, authorizationExpiresAtMs: _expires, ...pi } = record;
  return { ...pi, latest_charge: chargeIdOf(record.id) };
}

/** The wire shape of a Refund record (the fake's bookkeeping fields removed). */
export function refundJson(record: RefundRecord): Record<string, unknown> {
  const { idempotencyKey: _key, createdAtMs: _at, requestId: _request, paymentIntentOrderId: _order, paymentIntentOperationId: _op, ...refund } = record;
  return refund;
}

/** One charge per PaymentIntent in this fake; its id is derived so that refunds and disputes can name it. */
export const chargeIdOf = (paymentIntentId: string): string => `ch_${paymentIntentId.slice(3)}`;

export interface DeliveryFaults {
  /** Same event delivered a second time (another attempt, freshly signed). */
  readonly duplicate?: number;
  /** First attempt "lost" (no answer): retried later on Stripe's backoff. */
  readonly lost?: number;
  /** Extra delay before a delivery, uniform in [0, maxDelayMs]: reorders events. */
  readonly delayed?: number;
  readonly maxDelayMs?: number;
  /** A forged copy sent beside the real delivery: tampered body, wrong secret or stale timestamp (must be refused). */
  readonly badSignature?: number;
}

export interface WebhookDispatcherOptions {
  readonly fake: FakeStripe;
  /** Where to POST (the local endpoint); null: events are made but not delivered until setEndpoint(). */
  readonly endpoint: string | null;
  readonly secret: string;
  readonly faults?: DeliveryFaults;
  readonly seed?: number;
  /** How often the ledger is looked at for new PaymentIntents and status changes. */
  readonly pollMs?: number;
  /**
   * Stripe's retry schedule (minutes to hours, up to three days) multiplied by this; the local
   * time-lapse shrinks it. Default 1/3600 (an hour becomes a second).
   */
  readonly retryScale?: number;
  readonly maxAttempts?: number;
  /** false: watch the ledger only (settle times for the ledger's figures), deliver nothing. Default true. */
  readonly deliver?: boolean;
  /**
   * Also send the older `charge.refund.updated` beside every `refund.updated` (Stripe sends it "on
   * selected payment methods" only; an account may still be subscribed to it). Default false.
   */
  readonly chargeRefundUpdated?: boolean;
  /**
   * The Webhook Endpoint's `api_version` (docs.stripe.com/api/webhook_endpoints/create: "Events sent
   * to this endpoint will be generated with this Stripe Version instead of your account's default
   * Stripe Version"): events carry it, and it decides which refund events exist. Before
   * 2024-10-28.acacia (changelog "Adds created, updated, and failed events for all refund types")
   * a CARD refund sends no refund.created / refund.updated / refund.failed — only
   * `charge.refund.updated` when it changes (and charge.refunded when it is made). Default FAKE_API_VERSION.
   */
  readonly apiVersion?: string;
  /**
   * The endpoint's origin (setOrigin() changes it at run time): `account` makes it a Connect
   * endpoint receiving a connected account's events (each carries `account`); `livemode: true` a
   * live-mode endpoint (each event says `livemode: true`). Default: the platform's own, test mode.
   */
  readonly origin?: EventOrigin;
}

/** The API version that gave every refund its refund.created / .updated / .failed events. */
const REFUND_EVENTS_API_VERSION = '2024-10-28.acacia';

/** Stripe versions are dated: the date part orders them. */
function hasRefundEvents(apiVersion: string): boolean {
  return apiVersion.slice(0, 10) >= REFUND_EVENTS_API_VERSION.slice(0, 10);
}

export interface DeliveryStats {
  readonly eventsCreated: number;
  readonly attempts: number;
  /** Distinct events whose delivery got a 2xx. */
  readonly acknowledged: number;
  readonly duplicatesSent: number;
  readonly lostAttempts: number;
  readonly retries: number;
  readonly forgedSent: number;
  readonly forgedRefused: number;
  /** Forged deliveries the endpoint accepted: must stay 0. */
  readonly forgedAccepted: number;
  readonly non2xx: number;
  /** Events given up on after maxAttempts (Stripe's three days): the reconciler's polling still settles. */
  readonly abandoned: number;
  /** Deliveries still waiting (a delay, a retry) when the dispatcher was stopped. */
  readonly unfinished: number;
  readonly pending: number;
}

/** Stripe's documented backoff, roughly: minutes, then hours, up to three days in total. */
const RETRY_SCHEDULE_MS = [60_000, 5 * 60_000, 30 * 60_000, 2 * 3_600_000, 5 * 3_600_000, 10 * 3_600_000, 24 * 3_600_000, 24 * 3_600_000];

export class WebhookDispatcher {
  readonly #fake: FakeStripe;
  #endpoint: string | null;
  readonly #secret: string;
  #faults: DeliveryFaults;
  readonly #seed: number;
  /** How many events of one (type, order) were made: the delivery faults' draw is keyed by it. */
  readonly #sightings = new Map<string, number>();
  /** PaymentIntent id → its order (from the PaymentIntent's events), for the events of its Charge and Refunds. */
  readonly #orderOf = new Map<string, string>();
  readonly #pollMs: number;
  readonly #retryScale: number;
  readonly #maxAttempts: number;
  readonly #seen = new Map<string, string>();
  readonly #seenRefunds = new Set<string>();
  /** PaymentIntents whose charge had a dispute opened (dispute()): the Charge's `disputed`. */
  readonly #disputedCharges = new Set<string>();
  /** Each Refund's status when last looked at: a change is a refund.updated (and refund.failed). */
  readonly #refundStatus = new Map<string, string>();
  readonly #chargeRefundUpdated: boolean;
  readonly #apiVersion: string;
  readonly #refundEvents: boolean;
  readonly #deliverEvents: boolean;
  #origin: EventOrigin;
  /** When a PaymentIntent that was seen unsettled (processing, requires_action) was first seen settled. */
  readonly #settledAt = new Map<string, number>();
  readonly #events: StripeEventJson[] = [];
  readonly #inFlight = new Set<Promise<void>>();
  readonly #acknowledged = new Set<string>();
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #abort = new AbortController();
  #stats = { eventsCreated: 0, attempts: 0, duplicatesSent: 0, lostAttempts: 0, retries: 0, forgedSent: 0, forgedRefused: 0, forgedAccepted: 0, non2xx: 0, abandoned: 0, unfinished: 0 };

  constructor(options: WebhookDispatcherOptions) {
    this.#fake = options.fake;
    this.#endpoint = options.endpoint;
    this.#secret = options.secret;
    this.#faults = options.faults ?? {};
    this.#seed = options.seed ?? 1;
    this.#pollMs = options.pollMs ?? 50;
    this.#retryScale = options.retryScale ?? 1 / 3600;
    this.#maxAttempts = options.maxAttempts ?? RETRY_SCHEDULE_MS.length + 1;
    this.#deliverEvents = options.deliver ?? true;
    this.#chargeRefundUpdated = options.chargeRefundUpdated ?? false;
    this.#apiVersion = options.apiVersion ?? FAKE_API_VERSION;
    if (!/^\d{4}-\d{2}-\d{2}(\.\w+)?$/.test(this.#apiVersion)) throw new RangeError(`apiVersion must be a Stripe version like ${FAKE_API_VERSION}, got ${JSON.stringify(this.#apiVersion)}`);
    this.#refundEvents = hasRefundEvents(this.#apiVersion);
    this.#origin = options.origin ?? {};
  }

  /** An event as rendered for this endpoint's api_version, from this endpoint's origin (account, mode). */
  #event(
    type: string,
    object: Record<string, unknown>,
    previousAttributes?: Record<string, unknown>,
    request: EventRequest = AUTOMATIC,
    account: string | null = null,
  ): StripeEventJson {
    // An object of a connected account (made with Stripe-Account) is that account's event: it carries
    // `account` (docs.stripe.com/connect/webhooks: "These events include an account attribute that
    // identifies the relevant connected account"); the endpoint's origin decides it otherwise.
    const origin = account !== null ? { ...this.#origin, account } : this.#origin;
    return makeStripeEvent(type, object, { apiVersion: this.#apiVersion, ...origin, ...(previousAttributes ? { previousAttributes } : {}), request });
  }

  /**
   * From now on, events are made as a Connect endpoint receives a connected account's (`account`
   * set), or as a live-mode endpoint's (`livemode: true`) — or back to the platform's own test-mode
   * events with `{}`. What an integration meets when a Connect-enabled endpoint, or an endpoint of the
   * other mode, points at it.
   */
  setOrigin(origin: EventOrigin): void {
    this.#origin = origin;
  }

  /**
   * An event of `type` about `object` as given — an object of the ledger, or anything else (another
   * account's object, a snapshot that never existed) — from this endpoint's origin (or `origin`),
   * signed and delivered like every other event, with the configured faults.
   */
  send(type: string, object: Record<string, unknown>, origin: EventOrigin = this.#origin): StripeEventJson {
    return this.emit(makeStripeEvent(type, object, { apiVersion: this.#apiVersion, ...origin }));
  }

  /** PaymentIntent id → when Stripe settled it (first seen final after being seen processing / requiring action). */
  settleTimes(): ReadonlyMap<string, number> {
    return this.#settledAt;
  }

  setEndpoint(url: string | null): void {
    this.#endpoint = url;
  }

  setFaults(faults: DeliveryFaults): void {
    this.#faults = faults;
  }

  /** Watch the ledger and deliver what changes. */
  start(): void {
    if (this.#timer) return;
    this.#stopped = false;
    if (this.#abort.signal.aborted) this.#abort = new AbortController();
    // A poll reads the whole ledger: with many PaymentIntents (a 10,000-order soak) the next one
    // waits ten times as long as the last took, so watching never costs more than ~10 % of a core.
    const tick = () => {
      const started = performance.now();
      this.poll();
      if (this.#stopped) return;
      this.#timer = setTimeout(tick, Math.max(this.#pollMs, Math.round((performance.now() - started) * 10)));
      this.#timer.unref();
    };
    this.#timer = setTimeout(tick, this.#pollMs);
    this.#timer.unref();
  }

  /** Stop watching; requests in flight finish, waiting retries are given up (counted as pending at the end). */
  async stop(): Promise<void> {
    this.#stopped = true;
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#abort.abort();
    await this.drain();
  }

  /** false when stopped meanwhile. */
  async #wait(ms: number): Promise<boolean> {
    try {
      await sleep(ms, undefined, { signal: this.#abort.signal });
      return true;
    } catch {
      return false;
    }
  }

  /** Wait until every delivery started so far has been acknowledged or abandoned. */
  async drain(): Promise<void> {
    while (this.#inFlight.size > 0) await Promise.allSettled([...this.#inFlight]);
  }

  /** Every event made so far (ground truth for tests and the ledger view). */
  events(): readonly StripeEventJson[] {
    return this.#events;
  }

  stats(): DeliveryStats {
    return { ...this.#stats, acknowledged: this.#acknowledged.size, pending: this.#inFlight.size };
  }

  /** Look at the ledger once: an event for every new PaymentIntent status, and for every new Refund. */
  poll(): void {
    this.#pollRefunds();
    for (const pi of this.#fake.paymentIntents()) {
      const before = this.#seen.get(pi.id);
      if (before === pi.status) continue;
      this.#seen.set(pi.id, pi.status);
      if ((before === 'processing' || before === 'requires_action') && pi.status !== 'processing' && pi.status !== 'requires_action') this.#settledAt.set(pi.id, Date.now());
      if (!this.#deliverEvents) continue;
      const type = paymentIntentEventType(pi.status);
      const account = pi.stripeAccount ?? null;
      // The status the create answered is the create's event; a later change is Stripe's own.
      if (type) this.emit(this.#event(type, paymentIntentJson(pi), undefined, before === undefined ? madeBy(pi) : AUTOMATIC, account));
      // The Charge of an authorization (docs.stripe.com/api/events/types): `charge.captured` "Occurs
      // whenever a previously uncaptured charge is captured"; `charge.expired` "Occurs whenever an
      // uncaptured charge expires" — Stripe's own cancel of an expired authorization (`automatic`).
      if (before === 'requires_capture' && pi.status === 'succeeded') {
        this.emit(this.#event('charge.captured', this.#charge(pi, 0), { captured: false, amount_captured: 0 }, AUTOMATIC, account));
      } else if (before === 'requires_capture' && pi.status === 'canceled' && pi.cancellation_reason === 'automatic') {
        this.emit(this.#event('charge.expired', this.#charge(pi, 0, 'expired'), undefined, AUTOMATIC, account));
      }
    }
  }

  /**
   * Refunds made through the fake's Refunds API (or its control API, standing for the Dashboard):
   * "charge.refunded — occurs whenever a charge is refunded, including partial refunds", with the
   * charge as it is after the refund and data.previous_attributes.amount_refunded before it. A refund
   * that later fails or is canceled gives the money back to the charge.
   *
   * Beside it, the Refund's own events (docs.stripe.com/api/refunds.md, "Events"; for every refund
   * since API 2024-10-28.acacia, changelog "refund-webhook-update"), data.object being the Refund:
   * `refund.created` when it is first seen, `refund.updated` whenever its status changes (with
   * data.previous_attributes.status), and `refund.failed` when it becomes failed — a pending refund
   * that fails, or a card refund that fails after it said succeeded (pm_card_refundFail,
   * docs.stripe.com/testing#refunds). Optionally `charge.refund.updated` too (chargeRefundUpdated).
   */
  #pollRefunds(): void {
    const refunds = this.#fake.refunds();
    for (const refund of refunds) {
      this.#pollRefundStatus(refund);
      if (this.#seenRefunds.has(refund.id)) continue;
      this.#seenRefunds.add(refund.id);
      if (refund.status === 'failed' || refund.status === 'canceled') continue;
      const pi = this.#fake.paymentIntents().find((p) => p.id === refund.payment_intent);
      if (!pi) continue;
      // The Charge's amount_refunded as Stripe keeps it: the refunds that hold money (a failed or
      // canceled one gave its amount back), those already told before this one.
      const captured = pi.amount_received ?? pi.amount;
      const before = Math.min(captured, refunds
        .filter((r) => r.payment_intent === pi.id && r.id !== refund.id && this.#seenRefunds.has(r.id) && r.status !== 'failed' && r.status !== 'canceled')
        .reduce((sum, r) => sum + r.amount, 0));
      const after = Math.min(captured, before + refund.amount);
      if (this.#deliverEvents) this.emit(this.#event('charge.refunded', this.#charge(pi, after), { amount_refunded: before, refunded: before === captured }, madeBy(refund), pi.stripeAccount ?? null));
    }
  }

  #pollRefundStatus(refund: RefundRecord): void {
    const before = this.#refundStatus.get(refund.id);
    if (before === refund.status) return;
    this.#refundStatus.set(refund.id, refund.status);
    if (!this.#deliverEvents) return;
    const object = refundJson(refund);
    // A Refund is its PaymentIntent's account's (refunds.ts): a connected account's Refund is told by
    // that account's events, as its charge.refunded is.
    const account = this.#fake.paymentIntents().find((p) => p.id === refund.payment_intent)?.stripeAccount ?? null;
    if (before === undefined) {
      if (this.#refundEvents) this.emit(this.#event('refund.created', object, undefined, madeBy(refund), account));
      return;
    }
    const previousAttributes = { status: before, ...(refund.status !== 'pending' && before === 'pending' ? { pending_reason: 'processing' } : {}) };
    if (!this.#refundEvents) {
      // An endpoint on a version before 2024-10-28.acacia: a card refund's change is told by this alone.
      this.emit(this.#event('charge.refund.updated', object, previousAttributes, AUTOMATIC, account));
      return;
    }
    this.emit(this.#event('refund.updated', object, previousAttributes, AUTOMATIC, account));
    if (this.#chargeRefundUpdated) this.emit(this.#event('charge.refund.updated', object, previousAttributes, AUTOMATIC, account));
    if (refund.status === 'failed') this.emit(this.#event('refund.failed', object, previousAttributes, AUTOMATIC, account));
  }

  /**
   * The Charge of a succeeded PaymentIntent, with every field the published `charge` schema requires
   * (2026-09-30.endive: amount, amount_captured, amount_refunded, billing_details, captured, created,
   * currency, disputed, id, livemode, metadata, object, paid, refunded, status) and the ids it names.
   * `disputed`: "Whether the charge has been disputed" — once a dispute was opened here, won or not.
   */
  #charge(pi: PaymentIntentRecord, amountRefunded: number, phase: 'live' | 'expired' = 'live'): Record<string, unknown> {
    // An authorization is a charge not (yet) captured; once captured, amount_captured is what was
    // taken (a partial capture: less than amount). An expired one was never captured, and is
    // "marked as refunded" (docs.stripe.com/api/charges/capture: "Uncaptured payments expire a set
    // number of days after they are created (7 by default), after which they are marked as refunded").
    const uncaptured = pi.status === 'requires_capture' || phase === 'expired';
    const captured = uncaptured ? 0 : (pi.amount_received ?? pi.amount);
    const expired = phase === 'expired';
    return {
      id: chargeIdOf(pi.id),
      object: 'charge',
      amount: pi.amount,
      amount_captured: captured,
      amount_refunded: expired ? pi.amount : amountRefunded,
      billing_details: { address: null, email: null, name: null, phone: null },
      captured: !uncaptured,
      created: pi.created,
      currency: pi.currency,
      customer: pi.customer,
      disputed: this.#disputedCharges.has(pi.id),
      livemode: this.#origin.livemode ?? false,
      metadata: {},
      paid: true,
      payment_intent: pi.id,
      payment_method: pi.payment_method,
      refunded: expired || (captured > 0 && amountRefunded === captured),
      status: 'succeeded',
    };
  }

  /**
   * A refund made in the Dashboard: a Refund at the fake (empty metadata, no key; FakeStripe.dashboardRefund),
   * counted against the charge and listed by GET /v1/refunds; then the refunds are looked at, so its
   * events are made as for any Refund (refund.created, charge.refunded — per this endpoint's
   * api_version). Returns this refund's events (the look also makes those of any other refund not
   * yet seen). Stripe: a Dashboard refund is a Refund like one made through the API (docs.stripe.com/refunds).
   * More than is left on the charge: RangeError, as the Dashboard refuses it.
   */
  refund(paymentIntentId: string, amount?: number): StripeEventJson[] {
    const made = this.#events.length;
    const refund = this.#fake.dashboardRefund(paymentIntentId, amount);
    this.#pollRefunds();
    return this.#events.slice(made).filter((e) => e.data.object.id === refund.id || (e.type === 'charge.refunded' && e.data.object.payment_intent === paymentIntentId));
  }

  /**
   * A dispute opened by the cardholder's bank (created) or decided (closed: won / lost). A dispute
   * that is not an inquiry (`warning_…`) charges the charge back: the fake refuses refunds of it
   * (charge_disputed) until the dispute is won (docs.stripe.com/api/disputes/object: is_charge_refundable).
   */
  dispute(paymentIntentId: string, phase: 'created' | 'closed', status = phase === 'created' ? 'needs_response' : 'lost'): StripeEventJson {
    const pi = this.#record(paymentIntentId);
    const chargedBack = !status.startsWith('warning_') && !(phase === 'closed' && status === 'won');
    this.#fake.setDisputed(pi.id, chargedBack);
    this.#disputedCharges.add(pi.id);
    // Every field the published `dispute` schema requires (2026-09-30.endive); evidence empty, as
    // before the merchant answers.
    const dispute = {
      id: `dp_${pi.id.slice(3)}`,
      object: 'dispute',
      amount: pi.amount,
      balance_transactions: [],
      charge: chargeIdOf(pi.id),
      created: Math.floor(Date.now() / 1000),
      currency: pi.currency,
      enhanced_eligibility_types: [],
      evidence: {},
      evidence_details: { due_by: null, has_evidence: false, past_due: false, submission_count: 0 },
      is_charge_refundable: !chargedBack,
      livemode: this.#origin.livemode ?? false,
      metadata: {},
      payment_intent: pi.id,
      reason: 'fraudulent',
      status,
    };
    return this.emit(this.#event(`charge.dispute.${phase}`, dispute, undefined, AUTOMATIC, pi.stripeAccount ?? null));
  }

  /** Queue an event for delivery (with the configured faults). */
  emit(event: StripeEventJson): StripeEventJson {
    this.#events.push(event);
    this.#stats.eventsCreated++;
    const key = this.#faultKey(event);
    const copies = this.#draw(key, 'duplicate') < (this.#faults.duplicate ?? 0) ? 2 : 1;
    if (copies === 2) this.#stats.duplicatesSent++;
    for (let i = 0; i < copies; i++) this.#track(this.#deliver(event, `${key}:copy${i}`));
    if (this.#draw(key, 'forge') < (this.#faults.badSignature ?? 0)) {
      this.#stats.forgedSent++;
      this.#track(this.#forge(event, key));
    }
    return event;
  }

  /**
   * What an event's delivery faults are drawn from: its type, the order (and refund id) its object
   * names, and how many such events came before — not a stream of draws in the order events happen
   * to be made, nor the object's id (new in every run), so that one seed gives the same deliveries
   * the same faults run after run.
   */
  #faultKey(event: StripeEventJson): string {
    const object = event.data.object as { id?: unknown; object?: unknown; payment_intent?: unknown; metadata?: Record<string, unknown> | null };
    // A Charge or a Refund names its PaymentIntent, whose order its own events told before.
    if (object.object === 'payment_intent' && typeof object.id === 'string' && typeof object.metadata?.order_id === 'string') this.#orderOf.set(object.id, object.metadata.order_id);
    // …or, when its event comes first (which of the two is made first is timing), the PaymentIntent's own record.
    const orderOfPaymentIntent = (id: string) => this.#orderOf.get(id) ?? this.#fake.paymentIntents().find((p) => p.id === id)?.metadata.order_id;
    const orderId = object.metadata?.order_id ?? (typeof object.payment_intent === 'string' ? orderOfPaymentIntent(object.payment_intent) : undefined);
    const refundId = object.metadata?.refund_id;
    const subject = typeof orderId === 'string' ? `order:${orderId}${typeof refundId === 'string' ? `:refund:${refundId}` : ''}` : `object:${String(object.id)}`;
    const base = `${event.type}:${subject}`;
    const n = (this.#sightings.get(base) ?? 0) + 1;
    this.#sightings.set(base, n);
    return `${base}:${n}`;
  }

  #draw(key: string, what: string): number {
    return uniformFromHash('fake-stripe-webhook', this.#seed, key, what);
  }

  #record(paymentIntentId: string): PaymentIntentRecord {
    const pi = this.#fake.paymentIntents().find((p) => p.id === paymentIntentId);
    if (!pi) throw new RangeError(`no such PaymentIntent: ${paymentIntentId}`);
    return pi;
  }

  #track(work: Promise<void>): void {
    this.#inFlight.add(work);
    void work.finally(() => this.#inFlight.delete(work));
  }

  async #deliver(event: StripeEventJson, key: string): Promise<void> {
    const payload = JSON.stringify(event, null, 2);
    if (this.#draw(key, 'delayed') < (this.#faults.delayed ?? 0) && !(await this.#wait(Math.round(this.#draw(key, 'delay') * (this.#faults.maxDelayMs ?? 200))))) return this.#unfinished();
    for (let attempt = 1; attempt <= this.#maxAttempts; attempt++) {
      if (attempt > 1) {
        this.#stats.retries++;
        if (!(await this.#wait(Math.max(1, Math.round(RETRY_SCHEDULE_MS[Math.min(attempt - 2, RETRY_SCHEDULE_MS.length - 1)]! * this.#retryScale))))) return this.#unfinished();
      }
      while (this.#endpoint === null && !this.#stopped) if (!(await this.#wait(this.#pollMs))) return this.#unfinished();
      if (this.#endpoint === null || this.#stopped) return this.#unfinished();
      this.#stats.attempts++;
      if (attempt === 1 && this.#draw(key, 'lost') < (this.#faults.lost ?? 0)) {
        this.#stats.lostAttempts++;
        continue;
      }
      const status = await this.#post(payload, signStripePayload(payload, this.#secret, Math.floor(Date.now() / 1000)));
      if (status >= 200 && status < 300) {
        this.#acknowledged.add(event.id);
        return;
      }
      this.#stats.non2xx++;
    }
    this.#stats.abandoned++;
  }

  #unfinished(): void {
    this.#stats.unfinished++;
  }

  /** A copy that must never be accepted: tampered after signing, signed with another secret, or replayed too late. */
  async #forge(event: StripeEventJson, key: string): Promise<void> {
    const payload = JSON.stringify(event, null, 2);
    const now = Math.floor(Date.now() / 1000);
    const pick = Math.floor(this.#draw(key, 'forgery') * 3);
    const forged =
      pick === 0
        ? { body: payload.replace(/"amount": (\d+)/, (_, n: string) => `"amount": ${Number(n) + 1}`), header: signStripePayload(payload, this.#secret, now) }
        : pick === 1
          ? { body: payload, header: signStripePayload(payload, 'whsec_not_the_endpoint_secret', now) }
          : { body: payload, header: signStripePayload(payload, this.#secret, now - 3600) };
    while (this.#endpoint === null && !this.#stopped) if (!(await this.#wait(this.#pollMs))) return;
    if (this.#endpoint === null || this.#stopped) return;
    const status = await this.#post(forged.body, forged.header);
    if (status >= 200 && status < 300) this.#stats.forgedAccepted++;
    else this.#stats.forgedRefused++;
  }

  async #post(body: string, signature: string): Promise<number> {
    try {
      const answer = await fetch(this.#endpoint!, {
        method: 'POST',
        headers: { 'content-type': 'application/json; charset=utf-8', 'stripe-signature': signature, 'user-agent': 'Stripe/1.0 (+https://stripe.com/docs/webhooks)' },
        body,
        signal: AbortSignal.timeout(30_000),
      });
      await answer.arrayBuffer();
      return answer.status;
    } catch {
      return 0;
    }
  }
}
