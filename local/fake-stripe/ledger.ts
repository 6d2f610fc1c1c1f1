// The fake's ground truth: every PaymentIntent ever created, whatever happened to the answer that
// announced it. Tests and the soak judge the product against this, never against what it was told.
import {
  PAYMENT_INTENT_STATUSES,
  type LastPaymentError,
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
}

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
  #seq = 0;

  create(params: CreateParams, outcome: CardOutcome, idempotencyKey: string | null, nowMs: number, requestId: string | null = null): PaymentIntentJson {
    let id = randomId('pi_', 24);
    while (this.#byId.has(id)) id = randomId('pi_', 24);
    const lastPaymentError: LastPaymentError | null =
      outcome.kind === 'decline'
        ? { type: 'card_error', code: outcome.code, decline_code: outcome.declineCode, message: outcome.message }
        : null;
    const pi: PaymentIntentJson = {
      id,
      object: 'payment_intent',
      amount: params.amount,
      currency: params.currency,
      customer: params.customer,
      payment_method: outcome.kind === 'decline' ? null : params.paymentMethod, // Stripe detaches a declined method
      status: outcome.kind === 'decline' ? 'requires_payment_method' : outcome.status,
      metadata: { ...params.metadata },
      description: params.description,
      statement_descriptor_suffix: params.statementDescriptorSuffix,
      created: Math.floor(nowMs / 1000),
      livemode: false,
      capture_method: 'automatic',
      confirmation_method: 'automatic',
      last_payment_error: lastPaymentError,
    };
    this.#seq += 1;
    this.#byId.set(id, { pi, history: [{ atMs: nowMs, pi }], seq: this.#seq, createdAtMs: nowMs, idempotencyKey, requestId });
    return pi;
  }

  /** Every PaymentIntent `ms` older (tests that move time forward). */
  age(ms: number): void {
    for (const entry of this.#byId.values()) {
      entry.createdAtMs -= ms;
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
    entry.pi = { ...entry.pi, status, last_payment_error: lastPaymentError };
    entry.history.push({ atMs: Date.now(), pi: entry.pi });
    return entry.pi;
  }

  /** Newest first; only PaymentIntents created at or before `visibleUpToMs`, each as it was then; `beforeSeq` continues a page. */
  search(
    clauses: readonly SearchClause[],
    visibleUpToMs: number,
    limit: number,
    beforeSeq: number | null,
  ): { data: PaymentIntentJson[]; nextBeforeSeq: number | null } {
    // Each PaymentIntent as Search sees it: its newest state made at or before visibleUpToMs.
    const seen = (e: Entry) => e.history.findLast((h) => h.atMs <= visibleUpToMs)?.pi;
    const hits = [...this.#byId.values()]
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
  ): { data: PaymentIntentJson[]; hasMore: boolean } | null {
    const newestFirst = (a: Entry, b: Entry) => b.pi.created - a.pi.created || b.seq - a.seq;
    const cursor = startingAfter === null ? null : this.#byId.get(startingAfter);
    if (cursor === undefined) return null;
    const { gt, gte, lt, lte } = filter.created;
    const hits = [...this.#byId.values()]
      .filter((e) => filter.customer === null || e.pi.customer === filter.customer)
      .filter((e) => (gt === undefined || e.pi.created > gt) && (gte === undefined || e.pi.created >= gte))
      .filter((e) => (lt === undefined || e.pi.created < lt) && (lte === undefined || e.pi.created <= lte))
      .filter((e) => cursor === null || newestFirst(cursor, e) < 0)
      .sort(newestFirst);
    return { data: hits.slice(0, limit).map((e) => e.pi), hasMore: hits.length > limit };
  }

  records(filter: { readonly operationId?: string; readonly orderId?: string } = {}): PaymentIntentRecord[] {
    return [...this.#byId.values()]
      .filter((e) => filter.operationId === undefined || e.pi.metadata.operation_id === filter.operationId)
      .filter((e) => filter.orderId === undefined || e.pi.metadata.order_id === filter.orderId)
      .sort((a, b) => a.seq - b.seq)
      .map((e) => ({ ...structuredClone(e.pi), idempotencyKey: e.idempotencyKey, createdAtMs: e.createdAtMs, requestId: e.requestId }));
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
    this.#seq = 0;
  }
}
