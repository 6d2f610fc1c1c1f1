// The fake's ground truth: every PaymentIntent ever created, whatever happened to the answer that
// announced it. Tests and the soak judge the product against this, never against what it was told.
import {
  PAYMENT_INTENT_STATUSES,
  type LastPaymentError,
  type CancellationReason,
  type PaymentIntentFilter,
  type PaymentIntentJson,
  type PaymentIntentRecord,
  type PaymentIntentStatus,
  type SettleStatus,
} from './types.ts';
import { clauseMatches, randomId, type CardOutcome, type CreateParams, type SearchClause } from './wire.ts';

/** A `created` filter of a list request, in Unix seconds; every given bound must hold. */
export interface CreatedRange {
  readonly gt?: number;
  readonly gte?: number;
  readonly lt?: number;
  readonly lte?: number;
}

interface Entry {
  pi: PaymentIntentJson;
  /**
   * What Search can show: each state with the moment it was made, oldest first. Stripe's Search lags
   * for new AND updated objects ("data is searchable in less than a minute … can lag up to an hour
   * during outages", docs.stripe.com/search#data-freshness): a search shows the newest state that is
   * at least searchLagMs old.
   */
  history: { atMs: number; pi: PaymentIntentJson }[];
  /** Creation order; search pages are cursors over it. */
  readonly seq: number;
  createdAtMs: number;
  readonly idempotencyKey: string | null;
  readonly requestId: string | null;
  /** The connected account it lives on (null: the platform): only requests made as it see it. */
  readonly account: string | null;
  /** requires_capture only: when the authorization expires (epoch ms). */
  expiresAtMs: number | null;
}

/** Who may see an entry: a request made as `account` (null: the platform) sees that account's objects only. */
const visibleTo = (account: string | null) => (e: Entry): boolean => e.account === account;

/** Statuses from which Stripe still moves a PaymentIntent on its own or on confirmation. */
const OPEN_STATUSES: readonly PaymentIntentStatus[] = [
  'processing',
  'requires_action',
  'requires_confirmation',
  'requires_payment_method',
  'requires_capture',
];

export class Ledger {
  #byId = new Map<string, Entry>();
  /**
   * The entries whose authorization has an end (expiresAtMs set, only ever at creation), in creation
   * order: what expire() looks at on every request, so that it does not read every PaymentIntent there
   * is. An entry leaves once its expiresAtMs is cleared (captured, canceled, settled otherwise).
   */
  #withHold = new Set<Entry>();
  #seq = 0;

  create(
    params: CreateParams,
    outcome: CardOutcome,
    idempotencyKey: string | null,
    nowMs: number,
    requestId: string | null = null,
    account: string | null = null,
    /** When an authorization made now expires, on the fake's authorization clock (epoch ms); null: never. */
    authorizationExpiresAtMs: number | null = null,
  ): PaymentIntentJson {
    let id = randomId('pi_', 24);
    while (this.#byId.has(id)) id = randomId('pi_', 24);
    const lastPaymentError: LastPaymentError | null =
      outcome.kind === 'decline'
        ? { type: 'card_error', code: outcome.code, decline_code: outcome.declineCode, message: outcome.message }
        : null;
    // A manual-capture payment that the card authorized stops at requires_capture with the whole
    // amount capturable (docs.stripe.com/payments/place-a-hold-on-a-payment-method: "the
    // PaymentIntent's status transitions to requires_capture"); an automatic one received it all.
    const authorized = outcome.kind === 'status' && outcome.status === 'succeeded' && params.captureMethod === 'manual';
    const status: PaymentIntentStatus = outcome.kind === 'decline' ? 'requires_payment_method' : authorized ? 'requires_capture' : outcome.status;
    const pi: PaymentIntentJson = {
      id,
      object: 'payment_intent',
      amount: params.amount,
      amount_capturable: status === 'requires_capture' ? params.amount : 0,
      amount_received: status === 'succeeded' ? params.amount : 0,
      currency: params.currency,
      customer: params.customer,
      payment_method: outcome.kind === 'decline' ? null : params.paymentMethod, // Stripe detaches a declined method
      status,
      metadata: { ...params.metadata },
      description: params.description,
      statement_descriptor_suffix: params.statementDescriptorSuffix,
      created: Math.floor(nowMs / 1000),
      livemode: false,
      capture_method: params.captureMethod,
      confirmation_method: 'automatic',
      last_payment_error: lastPaymentError,
      canceled_at: null,
      cancellation_reason: null,
      application_fee_amount: params.applicationFeeAmount,
      transfer_data: params.transferData,
    };
    this.#seq += 1;
    // Counted from the creation (a processing one that settles authorized keeps it: settle()).
    const expiresAtMs = status === 'requires_capture' || (status === 'processing' && params.captureMethod === 'manual') ? authorizationExpiresAtMs : null;
    const entry: Entry = { pi, history: [{ atMs: nowMs, pi }], seq: this.#seq, createdAtMs: nowMs, idempotencyKey, requestId, account, expiresAtMs };
    this.#byId.set(id, entry);
    if (expiresAtMs !== null) this.#withHold.add(entry);
    return pi;
  }

  /** The PaymentIntent as a request made as `account` (null: the platform) sees it: another account's is not there. */
  getIn(id: string, account: string | null): PaymentIntentJson | null {
    const entry = this.#byId.get(id);
    return entry !== undefined && entry.account === account ? entry.pi : null;
  }

  /**
   * Captures `amount` of a requires_capture PaymentIntent (the caller checked the state and the
   * amount): succeeded, amount_received the captured amount, nothing left capturable — a partial
   * capture releases the rest ("Any additional amount is automatically refunded", the
   * amount_to_capture parameter in stripe-dotnet's PaymentIntentCaptureOptions, generated from the spec).
   */
  capture(id: string, amount: number, applicationFeeAmount: number | null, nowMs: number): PaymentIntentJson {
    const entry = this.#entry(id);
    entry.pi = {
      ...entry.pi,
      status: 'succeeded',
      amount_received: amount,
      amount_capturable: 0,
      ...(applicationFeeAmount !== null ? { application_fee_amount: applicationFeeAmount } : {}),
    };
    entry.expiresAtMs = null;
    entry.history.push({ atMs: nowMs, pi: entry.pi });
    return entry.pi;
  }

  /**
   * Cancels a PaymentIntent (the caller checked the state): canceled, canceled_at now, the reason
   * given; an authorization's amount_capturable is released ("For PaymentIntents with a status of
   * requires_capture, the remaining amount_capturable is automatically refunded", stripe-node 23.1.0
   * PaymentIntents.cancel).
   */
  cancel(id: string, reason: CancellationReason | null, nowMs: number, canceledAtMs = nowMs): PaymentIntentJson {
    const entry = this.#entry(id);
    entry.pi = { ...entry.pi, status: 'canceled', amount_capturable: 0, canceled_at: Math.floor(canceledAtMs / 1000), cancellation_reason: reason };
    entry.expiresAtMs = null;
    entry.history.push({ atMs: nowMs, pi: entry.pi });
    return entry.pi;
  }

  /** Cancels, as Stripe does on its own (`automatic`), every authorization that expired at or before nowMs; returns their ids. */
  expire(nowMs: number, observedAtMs = Date.now()): string[] {
    const expired: string[] = [];
    for (const entry of this.#withHold) {
      if (entry.expiresAtMs === null) {
        this.#withHold.delete(entry);
        continue;
      }
      if (entry.expiresAtMs > nowMs || entry.pi.status !== 'requires_capture') continue;
      // canceled_at is when it expired on the authorization clock; Search (which runs on real time,
      // searchLagMs) learns of it from when the fake looked.
      this.cancel(entry.pi.id, 'automatic', observedAtMs, entry.expiresAtMs);
      expired.push(entry.pi.id);
    }
    return expired;
  }

  #entry(id: string): Entry {
    const entry = this.#byId.get(id);
    if (entry === undefined) throw new RangeError(`no such PaymentIntent: ${id}`);
    return entry;
  }

  /**
   * One authorization's hold `ms` nearer its end (a test that lets days pass for one order only):
   * Stripe cancels it (`automatic`) once its time is up, when the fake next looks.
   */
  ageAuthorization(id: string, ms: number): void {
    const entry = this.#entry(id);
    if (entry.expiresAtMs !== null) entry.expiresAtMs -= ms;
  }

  /** Every PaymentIntent `ms` older (tests that move time forward). */
  age(ms: number): void {
    for (const entry of this.#byId.values()) {
      entry.createdAtMs -= ms;
      if (entry.expiresAtMs !== null) entry.expiresAtMs -= ms;
      entry.pi = { ...entry.pi, created: Math.floor(entry.createdAtMs / 1000) };
      entry.history = entry.history.map((h) => ({ atMs: h.atMs - ms, pi: { ...h.pi, created: entry.pi.created } }));
    }
  }

  get(id: string): PaymentIntentJson | null {
    return this.#byId.get(id)?.pi ?? null;
  }

  /**
   * What Stripe would do later on its own (a 'processing' payment clearing or failing) or what a
   * customer would do (finishing 3-D Secure). Stored idempotent answers are NOT rewritten: a replay
   * still says 'processing' — only retrieve tells the truth, as with Stripe.
   */
  settle(id: string, status: SettleStatus): PaymentIntentJson {
    const entry = this.#byId.get(id);
    if (entry === undefined) throw new RangeError(`no such PaymentIntent: ${id}`);
    if (!OPEN_STATUSES.includes(entry.pi.status)) {
      throw new RangeError(`PaymentIntent ${id} is ${entry.pi.status}; a final status cannot be settled again`);
    }
    const lastPaymentError: LastPaymentError | null =
      status === 'requires_payment_method'
        ? { type: 'card_error', code: 'card_declined', decline_code: 'generic_decline', message: 'Your card was declined.' }
        : null;
    // A manual-capture PaymentIntent that settles well is authorized, not captured: "requires_capture"
    // ("If capture_method is manual … the PaymentIntent transitions to requires_capture", the
    // `status` of docs.stripe.com/api/payment_intents/object; money is received only by a capture).
    const authorized = status === 'succeeded' && entry.pi.capture_method === 'manual';
    entry.pi = {
      ...entry.pi,
      status: authorized ? 'requires_capture' : status,
      last_payment_error: lastPaymentError,
      ...(authorized ? { amount_capturable: entry.pi.amount, amount_received: 0 } : status === 'succeeded' ? { amount_received: entry.pi.amount } : {}),
      ...(status === 'canceled' ? { canceled_at: Math.floor(Date.now() / 1000), amount_capturable: 0 } : {}),
    };
    if (status !== 'succeeded' || entry.pi.capture_method !== 'manual') entry.expiresAtMs = null;
    entry.history.push({ atMs: Date.now(), pi: entry.pi });
    return entry.pi;
  }

  /** Newest first; only PaymentIntents created at or before `visibleUpToMs`, each as it was then; `beforeSeq` continues a page. */
  search(
    clauses: readonly SearchClause[],
    visibleUpToMs: number,
    limit: number,
    beforeSeq: number | null,
    account: string | null = null,
  ): { data: PaymentIntentJson[]; nextBeforeSeq: number | null } {
    // Each PaymentIntent as Search sees it: its newest state made at or before visibleUpToMs.
    const seen = (e: Entry) => e.history.findLast((h) => h.atMs <= visibleUpToMs)?.pi;
    const hits = [...this.#byId.values()]
      .filter(visibleTo(account))
      .filter((e) => e.createdAtMs <= visibleUpToMs)
      .filter((e) => beforeSeq === null || e.seq < beforeSeq)
      .map((e) => ({ seq: e.seq, pi: seen(e) ?? e.pi }))
      .filter((e) => clauses.every((c) => clauseMatches(c, e.pi)))
      .sort((a, b) => b.seq - a.seq);
    const page = hits.slice(0, limit);
    const last = page[page.length - 1];
    return {
      data: page.map((e) => e.pi),
      nextBeforeSeq: hits.length > limit && last !== undefined ? last.seq : null,
    };
  }

  /**
   * GET /v1/payment_intents: real time (no lag, unlike search), newest first — by `created`, then by
   * creation order within one second — filtered by customer and a `created` range (Unix seconds),
   * continuing after the PaymentIntent `startingAfter`. Null: no such PaymentIntent for the cursor.
   */
  list(
    filter: { readonly customer: string | null; readonly created: CreatedRange },
    limit: number,
    startingAfter: string | null,
    account: string | null = null,
  ): { data: PaymentIntentJson[]; hasMore: boolean } | null {
    const newestFirst = (a: Entry, b: Entry) => b.pi.created - a.pi.created || b.seq - a.seq;
    const found = startingAfter === null ? null : this.#byId.get(startingAfter);
    // Another account's object is no cursor here: it does not exist for this request.
    const cursor = found === null ? null : found !== undefined && found.account === account ? found : undefined;
    if (cursor === undefined) return null;
    const { gt, gte, lt, lte } = filter.created;
    const hits = [...this.#byId.values()]
      .filter(visibleTo(account))
      .filter((e) => filter.customer === null || e.pi.customer === filter.customer)
      .filter((e) => (gt === undefined || e.pi.created > gt) && (gte === undefined || e.pi.created >= gte))
      .filter((e) => (lt === undefined || e.pi.created < lt) && (lte === undefined || e.pi.created <= lte))
      .filter((e) => cursor === null || newestFirst(cursor, e) < 0)
      .sort(newestFirst);
    return { data: hits.slice(0, limit).map((e) => e.pi), hasMore: hits.length > limit };
  }

  records(filter: PaymentIntentFilter = {}): PaymentIntentRecord[] {
    return [...this.#byId.values()]
      .filter((e) => filter.account === undefined || e.account === filter.account)
      .filter((e) => filter.operationId === undefined || e.pi.metadata.operation_id === filter.operationId)
      .filter((e) => filter.orderId === undefined || e.pi.metadata.order_id === filter.orderId)
      .sort((a, b) => a.seq - b.seq)
      .map((e) => ({
        ...structuredClone(e.pi),
        idempotencyKey: e.idempotencyKey,
        createdAtMs: e.createdAtMs,
        requestId: e.requestId,
        stripeAccount: e.account,
        authorizationExpiresAtMs: e.expiresAtMs,
      }));
  }

  countByStatus(): Record<PaymentIntentStatus, number> {
    const counts = Object.fromEntries(PAYMENT_INTENT_STATUSES.map((s) => [s, 0])) as Record<PaymentIntentStatus, number>;
    for (const { pi } of this.#byId.values()) counts[pi.status] += 1;
    return counts;
  }

  /** Values of metadata[key] carried by more than one succeeded PaymentIntent: double charges. */
  doubleCharged(metadataKey: string): string[] {
    const succeeded = new Map<string, number>();
    for (const { pi } of this.#byId.values()) {
      const value = pi.metadata[metadataKey];
      if (pi.status === 'succeeded' && value !== undefined) succeeded.set(value, (succeeded.get(value) ?? 0) + 1);
    }
    return [...succeeded].filter(([, n]) => n > 1).map(([value]) => value);
  }

  get size(): number {
    return this.#byId.size;
  }

  clear(): void {
    this.#byId.clear();
    this.#withHold.clear();
    this.#seq = 0;
  }
}
