// Stripe events in, as pure decisions: read an event, and decide what it may do to the operation it
// names. No I/O; the applier (event-applier.ts) is thin I/O around these functions, and the writes it
// makes are the engine's own (claim → retrieve → fromPaymentIntent → recordOutcomes).
//
// What Stripe documents and this file relies on (https://docs.stripe.com/webhooks, /api/events/object):
//   - an event is { id: "evt_…", object: "event", account?, type, created (unix s), api_version,
//     livemode, data: { object, previous_attributes? } }; data.object is the resource AS IT WAS when
//     the event was made (a snapshot, possibly older than the resource is now);
//   - `account` is "The connected account that originates the event": a Connect platform's endpoint
//     receives its connected accounts' events, which "include an account attribute"; `livemode` is
//     the mode the object exists in, and "Objects in one mode aren't accessible to the other"
//     (docs.stripe.com/keys);
//   - delivery is at least once and NOT in order ("Stripe doesn't guarantee delivery of events in
//     the order in which they're generated"); failed deliveries are retried for up to three days.
// Hence: an event is a hint, never a command. A signature proves that Stripe sent the event to this
// endpoint — not that the object is ours (a Connect endpoint signs every connected account's events;
// a test endpoint's events are signed too; the EventBridge door has no signature at all). So:
//   1. an event from another account, or from the other mode, is refused whole (judgeEventOrigin);
//   2. nothing that changes an operation is decided on the snapshot: the object is retrieved with
//      our own key (one retrieve), checked to be the one the event named (confirmRetrieved), and the
//      same decision is made again on what Stripe returned and on the operation as the claim found it;
//   3. what only records (a finding, a contradiction, an aftermath fact) may rest on the snapshot.
// zod/mini (see message.ts): this module is in the webhook and reconcile bundles.
import * as z from 'zod/mini';
import './zod-locale.ts';
import { isSlowReview, judgeDuplicateCharge, type DuplicateRemedy } from './decisions.ts';
import type { StripeKeyMode } from './gateway.ts';
import { paymentIntentOfRefund, type Operation, type PaymentIntentView } from './types.ts';

// The subscribed types live in a dependency-free module the construct imports (the npm package).
export { SUBSCRIBED_EVENT_TYPES, type SubscribedEventType } from './stripe-event-types.ts';

// ── Reading an event ─────────────────────────────────────────────────────────────────────────────

const stripeEventSchema = z.object({
  id: z.string().check(z.minLength(1), z.maxLength(255)),
  object: z.optional(z.literal('event')),
  account: z.optional(z.nullable(z.string().check(z.maxLength(255)))),
  context: z.optional(z.nullable(z.string().check(z.maxLength(255)))),
  type: z.string().check(z.minLength(1), z.maxLength(255)),
  created: z.number().check(z.int(), z.nonnegative()),
  api_version: z.optional(z.nullable(z.string())),
  livemode: z.optional(z.boolean()),
  data: z.object({
    object: z.looseObject({ id: z.optional(z.string().check(z.minLength(1), z.maxLength(255))), object: z.optional(z.string()) }),
    previous_attributes: z.optional(z.record(z.string(), z.unknown())),
  }),
});

/**
 * The parts of a Stripe event the inbox stores in columns, and `payload`: the event minimized to what
 * this pipeline reads (minimizeStripeEvent), never the whole object Stripe sent.
 */
export interface StripeEventView {
  readonly id: string;
  readonly type: string;
  readonly created: Date;
  readonly objectId: string | null;
  readonly apiVersion: string | null;
  /** The event's `livemode`; null when it does not say (Stripe always does: such an event is refused). */
  readonly livemode: boolean | null;
  /** The connected account the event comes from (Connect), or null: our own account's event. */
  readonly account: string | null;
  /** The authentication context needed to fetch the object ("context"), or null. */
  readonly context: string | null;
  readonly payload: Readonly<Record<string, unknown>>;
}

export type ReadResult = { readonly ok: true; readonly event: StripeEventView } | { readonly ok: false; readonly reason: string };

/** A parsed JSON value → a Stripe event, or the reason it is not one (first issue only; no values echoed). */
export function readStripeEvent(json: unknown): ReadResult {
  const parsed = stripeEventSchema.safeParse(json);
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    return { ok: false, reason: `not a Stripe event: ${issue ? `${issue.path.join('.') || '(root)'}: ${issue.message}` : 'invalid'}` };
  }
  const e = parsed.data;
  return {
    ok: true,
    event: {
      id: e.id,
      type: e.type,
      created: new Date(e.created * 1000),
      objectId: e.data.object.id ?? null,
      apiVersion: e.api_version ?? null,
      livemode: e.livemode ?? null,
      account: e.account || null,
      context: e.context || null,
      payload: minimizeStripeEvent(json as Record<string, unknown>),
    },
  };
}

// ── What the inbox keeps of an event ─────────────────────────────────────────────────────────────
//
// Minimized at the door (docs/architecture.md "Stripe events in", the list of fields): the event's
// own fields the origin check reads, and of data.object only what the decisions in this file read —
// ids, status, amounts, currency, the three metadata keys the pipeline writes, a refund's
// failure_reason, a dispute's reason. Everything else Stripe puts in an object (billing and shipping
// details, receipt e-mail, card and payment-method details, descriptions, the producer's own
// metadata, latest_charge, …) is never stored. Idempotent: minimizing a minimized event changes nothing.

/** Event fields kept as they are. */
const EVENT_FIELDS = ['id', 'object', 'type', 'created', 'api_version', 'livemode', 'account', 'context'] as const;
/** data.object fields kept when they are strings or numbers. */
const OBJECT_SCALARS = ['id', 'object', 'status', 'amount', 'amount_refunded', 'currency', 'failure_reason', 'reason'] as const;
/** data.object fields that may be an id or an expanded object: kept as the id. */
const OBJECT_REFERENCES = ['customer', 'payment_intent', 'charge'] as const;
/** The metadata keys this pipeline writes on its PaymentIntents and Refunds (decisions.ts stripeMetadata). */
export const KEPT_METADATA_KEYS = ['operation_id', 'order_id', 'key_generation'] as const;
/** data.previous_attributes fields kept (a charge.refunded's earlier amount_refunded). */
const PREVIOUS_FIELDS = ['amount_refunded'] as const;

const scalar = (v: unknown): v is string | number | boolean | null => v === null || ['string', 'number', 'boolean'].includes(typeof v);

export function minimizeStripeEvent(event: Readonly<Record<string, unknown>>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const key of EVENT_FIELDS) if (key in event && scalar(event[key])) out[key] = event[key];
  const data = typeof event.data === 'object' && event.data !== null ? (event.data as Record<string, unknown>) : {};
  const object = typeof data.object === 'object' && data.object !== null ? (data.object as Record<string, unknown>) : {};
  const kept: Record<string, unknown> = {};
  for (const key of OBJECT_SCALARS) if (key in object && scalar(object[key])) kept[key] = object[key];
  for (const key of OBJECT_REFERENCES) {
    if (!(key in object)) continue;
    const id = idOf(object[key]);
    kept[key] = id;
  }
  if (typeof object.metadata === 'object' && object.metadata !== null) {
    const metadata: Record<string, string> = {};
    for (const key of KEPT_METADATA_KEYS) {
      const v = (object.metadata as Record<string, unknown>)[key];
      if (typeof v === 'string') metadata[key] = v;
    }
    kept.metadata = metadata;
  }
  const minimizedData: Record<string, unknown> = { object: kept };
  if (typeof data.previous_attributes === 'object' && data.previous_attributes !== null) {
    const previous: Record<string, unknown> = {};
    for (const key of PREVIOUS_FIELDS) {
      const v = (data.previous_attributes as Record<string, unknown>)[key];
      if (v !== undefined && scalar(v)) previous[key] = v;
    }
    minimizedData.previous_attributes = previous;
  }
  out.data = minimizedData;
  return out;
}

// ── Where an event comes from ────────────────────────────────────────────────────────────────────

/** Whose events this pipeline takes. */
export interface EventOriginPolicy {
  /**
   * The mode of our Stripe key (gateway.ts stripeKeyMode): only events of that mode are ours.
   * 'unrecognised': a key whose prefix says no mode — no event can be shown to be of ours, so every
   * one is refused (polling, with the key itself, still settles everything). 'no_key': no key yet —
   * the mode cannot be compared; the event waits in the inbox until there is one.
   */
  readonly keyMode: StripeKeyMode | 'unrecognised' | 'no_key';
  /**
   * Connected accounts (acct_…) whose events are taken: those the pipeline has an operation on, and
   * those of the STRIPE_CONNECTED_ACCOUNTS setting. Every other event with an `account` is refused.
   * A taken one is still applied only to an operation of that account (judgeEventAccount), and its
   * object is retrieved AS that account (Stripe-Account) before anything changes.
   */
  readonly connectedAccounts: ReadonlySet<string>;
}

export type OriginVerdict =
  | { readonly kind: 'accepted' }
  /** No key to compare the mode with yet: not refused, not applied — the event waits. */
  | { readonly kind: 'wait'; readonly reason: string }
  /** Not ours: a finding, the row applied with this outcome, never a state change. */
  | { readonly kind: 'refused'; readonly outcome: 'foreign_account' | 'livemode_mismatch'; readonly reason: string };

/**
 * Before anything is read out of an event: is it this account's, in our key's mode? A signature (or
 * the partner bus) proves only that Stripe delivered it to this endpoint. A Connect-enabled endpoint
 * delivers every connected account's events, signed with the same secret, and their objects carry
 * whatever metadata that account put on them; a test-mode event is signed too. Either could name
 * our operation and amount.
 */
export function judgeEventOrigin(event: Pick<StripeEventView, 'account' | 'context' | 'livemode'>, policy: EventOriginPolicy): OriginVerdict {
  if (event.account !== null && !policy.connectedAccounts.has(event.account)) {
    return { kind: 'refused', outcome: 'foreign_account', reason: `the event comes from connected account ${event.account}, not from this account: its object is not ours` };
  }
  if (event.context !== null) {
    return { kind: 'refused', outcome: 'foreign_account', reason: `the event needs authentication context ${event.context} to fetch its object: not this account's own` };
  }
  if (policy.keyMode === 'no_key') return { kind: 'wait', reason: 'no Stripe key yet: the event\'s mode cannot be compared with ours' };
  const mode = event.livemode === null ? null : event.livemode ? 'live' : 'test';
  if (policy.keyMode === 'unrecognised') {
    return { kind: 'refused', outcome: 'livemode_mismatch', reason: `our Stripe key is neither sk_live_/rk_live_ nor sk_test_/rk_test_: its mode is unknown, so no ${mode ?? 'unmarked'}-mode event is trusted` };
  }
  if (mode === null) return { kind: 'refused', outcome: 'livemode_mismatch', reason: `the event does not say its mode (no livemode); our key is ${policy.keyMode}` };
  if (mode !== policy.keyMode) return { kind: 'refused', outcome: 'livemode_mismatch', reason: `a ${mode}-mode event, and our key is ${policy.keyMode}: objects of one mode are not the other's` };
  return { kind: 'accepted' };
}

/**
 * An event is applied only to an operation of the account it comes from: a connected account's
 * event to an operation on that account, a platform event (no `account`) to a platform operation.
 * Metadata is whatever the account that made the object wrote — a connected account can name the id
 * of a platform operation, or of another account's — so the operation id in it is a claim, and the
 * account is where the claim is checked. Null: the same account; otherwise why not (refused
 * `foreign_account`).
 */
export function judgeEventAccount(event: Pick<StripeEventView, 'account'>, op: Pick<Operation, 'id' | 'account'>): string | null {
  const ours = op.account ?? null;
  if (event.account === ours) return null;
  if (event.account === null) return `a platform event, and operation ${op.id} is on connected account ${ours}: its object is not the platform's`;
  return `the event comes from connected account ${event.account}, and operation ${op.id} is ${ours === null ? 'on the platform' : `on connected account ${ours}`}: its object is not that operation's`;
}

// ── The objects inside ───────────────────────────────────────────────────────────────────────────

export interface EventPaymentIntent extends PaymentIntentView {
  readonly customer: string | null;
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const int = (v: unknown): number | null => (typeof v === 'number' && Number.isInteger(v) ? v : null);
const idOf = (v: unknown): string | null => str(v) ?? (typeof v === 'object' && v !== null ? str((v as { id?: unknown }).id) : null);

function dataOf(event: StripeEventView): { object: Record<string, unknown>; previous: Record<string, unknown> } {
  const data = (event.payload as { data?: { object?: unknown; previous_attributes?: unknown } }).data ?? {};
  const object = typeof data.object === 'object' && data.object !== null ? (data.object as Record<string, unknown>) : {};
  const previous = typeof data.previous_attributes === 'object' && data.previous_attributes !== null ? (data.previous_attributes as Record<string, unknown>) : {};
  return { object, previous };
}

/**
 * The fields every Stripe object we settle by carries (id, status, amount, currency, string metadata),
 * when `data.object` is of that object type and has them all; null otherwise.
 */
function moneyObjectOf(event: StripeEventView, type: 'payment_intent' | 'refund') {
  const { object } = dataOf(event);
  const id = str(object.id);
  const status = str(object.status);
  const amount = int(object.amount);
  const currency = str(object.currency);
  if (object.object !== type || !id || !status || amount === null || !currency) return null;
  const metadata: Record<string, string> = {};
  if (typeof object.metadata === 'object' && object.metadata !== null) {
    for (const [k, v] of Object.entries(object.metadata)) if (typeof v === 'string') metadata[k] = v;
  }
  return { object, fields: { id, status, amount, currency, metadata } };
}

/** What an event's data.object says of itself, whatever its type: for the record of an event that is refused. */
export interface EventObjectSummary {
  readonly id: string | null;
  readonly object: string | null;
  readonly status: string | null;
  readonly amount: number | null;
  readonly currency: string | null;
  /** metadata.operation_id as written (any string), and the operation id it names if shaped like ours. */
  readonly operationIdAsWritten: string | null;
  readonly claimedOperationId: string | null;
  readonly orderId: string | null;
}

export function eventObjectOf(event: StripeEventView): EventObjectSummary {
  const { object } = dataOf(event);
  const metadata = typeof object.metadata === 'object' && object.metadata !== null ? (object.metadata as Record<string, unknown>) : {};
  const operationId = str(metadata.operation_id);
  return {
    id: str(object.id),
    object: str(object.object),
    status: str(object.status),
    amount: int(object.amount),
    currency: str(object.currency),
    operationIdAsWritten: operationId,
    claimedOperationId: operationId !== null && UUID.test(operationId) ? operationId.toLowerCase() : null,
    orderId: str(metadata.order_id),
  };
}

/** data.object of a payment_intent.* event, or null when it is not a PaymentIntent we can read. */
export function paymentIntentOf(event: StripeEventView): EventPaymentIntent | null {
  const read = moneyObjectOf(event, 'payment_intent');
  return read && { ...read.fields, customer: idOf(read.object.customer) };
}

/** What a charge.refunded / charge.dispute.* event says happened after the charge. */
export interface Aftermath {
  readonly kind: 'refunded' | 'disputed' | 'dispute_closed';
  readonly paymentIntentId: string;
  readonly chargeId: string | null;
  readonly disputeId: string | null;
  /** This refund's amount (amount_refunded minus what previous_attributes says it was), or the disputed amount. */
  readonly amount: number;
  readonly amountRefunded: number | null;
  readonly currency: string;
  readonly disputeStatus: string | null;
  readonly disputeReason: string | null;
}

export function aftermathOf(event: StripeEventView): Aftermath | null {
  const { object, previous } = dataOf(event);
  const paymentIntentId = idOf(object.payment_intent);
  const currency = str(object.currency);
  if (!paymentIntentId || !currency) return null;
  if (event.type === 'charge.refunded' && object.object === 'charge') {
    const total = int(object.amount_refunded);
    if (total === null) return null;
    // data.previous_attributes holds the changed fields' values before the update.
    const before = int(previous.amount_refunded) ?? 0;
    return {
      kind: 'refunded',
      paymentIntentId,
      chargeId: str(object.id),
      disputeId: null,
      amount: Math.max(0, total - before),
      amountRefunded: total,
      currency,
      disputeStatus: null,
      disputeReason: null,
    };
  }
  if ((event.type === 'charge.dispute.created' || event.type === 'charge.dispute.closed') && object.object === 'dispute') {
    const amount = int(object.amount);
    if (amount === null) return null;
    return {
      kind: event.type === 'charge.dispute.created' ? 'disputed' : 'dispute_closed',
      paymentIntentId,
      chargeId: idOf(object.charge),
      disputeId: str(object.id),
      amount,
      amountRefunded: null,
      currency,
      disputeStatus: str(object.status),
      disputeReason: str(object.reason),
    };
  }
  return null;
}

// ── What a PaymentIntent event may do ────────────────────────────────────────────────────────────

/** Statuses a PaymentIntent never leaves: a snapshot that says one of them cannot be older than a retrieve's answer. */
const PAYMENT_INTENT_TERMINAL: ReadonlySet<string> = new Set(['succeeded', 'canceled']);
/** Statuses in which money has moved or may still move without us asking again. */
const MONEY_MAY_MOVE = new Set(['succeeded', 'processing', 'requires_capture']);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The operation a PaymentIntent claims to belong to (metadata.operation_id), if it is shaped like one of ours. */
export function claimedOperationId(object: { readonly metadata: Readonly<Record<string, string>> }): string | null {
  const id = object.metadata.operation_id;
  return id !== undefined && UUID.test(id) ? id.toLowerCase() : null;
}

export type PaymentIntentEventDecision =
  /** Not ours (no operation metadata), or nothing to learn (a failed PI for an operation we never had). */
  | { readonly kind: 'ignore'; readonly outcome: 'foreign' | 'unknown_operation' | 'other_payment_intent'; readonly reason: string }
  /** Our metadata, no such operation, and money may have moved: a finding and an alarm. */
  | { readonly kind: 'unrecorded'; readonly reason: string }
  /** The operation is final and the event agrees with it, or is older than it. */
  | { readonly kind: 'stale'; readonly reason: string }
  /** The operation is final and the event contradicts it: a finding and an alarm, never a rewrite. */
  | { readonly kind: 'contradiction'; readonly reason: string }
  /**
   * The charge succeeded with another PaymentIntent and this one — the order's amount, currency and
   * customer — charged it again: the contradiction's finding and alarm, and the duplicate-charge
   * remedy's refund of this one (decisions.ts judgeDuplicateCharge), in the same transaction.
   */
  | { readonly kind: 'duplicate_charge'; readonly reason: string; readonly remedy: DuplicateRemedy }
  /**
   * Open, holding another PaymentIntent, and this one charged the order too: which one is the extra
   * cannot be said until the operation settles. The event waits in the inbox and is judged again then.
   */
  | { readonly kind: 'await_final'; readonly reason: string }
  /** The operation waits for a human: the event is noted in its audit trail for the operator. */
  | { readonly kind: 'in_review'; readonly reason: string }
  /**
   * Open, and the PaymentIntent cannot be adopted (another customer, another key generation, a second
   * PI): to review. Judged on a snapshot, it is a hint — the applier retrieves the PaymentIntent under
   * the operation's lease and decides again on Stripe's answer and the claimed row.
   */
  | { readonly kind: 'review'; readonly reason: string }
  /**
   * Open: settle or move it on by what Stripe holds (fromPaymentIntent). Judged on a snapshot, it is
   * a hint — the applier claims the operation, retrieves the PaymentIntent, and decides again.
   */
  | { readonly kind: 'settle' };

const describePi = (pi: EventPaymentIntent) => `PaymentIntent ${pi.id} (${pi.status}, ${pi.amount} ${pi.currency})`;

/** Statuses Stripe does not move a charge's PaymentIntent out of (requires_payment_method: it failed; a retry would be a new confirm). */
const FINAL_FOR_A_CHARGE = new Set(['succeeded', 'requires_payment_method', 'canceled']);

/**
 * An operation in review ONLY because its PaymentIntent was still unsettled past its bound (a SEPA
 * debit Stripe took longer to settle than the bound allowed): Stripe's final word about THAT
 * PaymentIntent is what the operator would wait for, so it settles the operation — once our key's
 * retrieve confirms it (the applier claims the operation in review and decides again). Any other
 * review, another PaymentIntent, or one that does not match, stays a note for the operator.
 */
function settlesSlowReview(op: Operation, pi: EventPaymentIntent, mismatched: boolean): boolean {
  return op.kind === 'charge' && isSlowReview(op.reviewReason) && op.externalId === pi.id && !mismatched && FINAL_FOR_A_CHARGE.has(pi.status);
}

export function decidePaymentIntentEvent(op: Operation | null, pi: EventPaymentIntent): PaymentIntentEventDecision {
  if (pi.metadata.operation_id === undefined) {
    return { kind: 'ignore', outcome: 'foreign', reason: `${describePi(pi)} carries no metadata.operation_id: not made by this pipeline` };
  }
  if (op === null) {
    return MONEY_MAY_MOVE.has(pi.status)
      ? { kind: 'unrecorded', reason: `${describePi(pi)} names operation ${pi.metadata.operation_id}, which the ledger does not have` }
      : { kind: 'ignore', outcome: 'unknown_operation', reason: `${describePi(pi)} names an operation the ledger does not have; nothing was charged` };
  }

  // Does the PaymentIntent really belong to this operation? (fromPaymentIntent checks amount and
  // currency too, for the open case; here they also decide whether a final operation is contradicted.)
  const mismatch: string[] = [];
  if (pi.amount !== op.amount) mismatch.push('amount');
  if (pi.currency !== op.currency) mismatch.push('currency');
  if (pi.customer !== null && pi.customer !== op.customerId) mismatch.push('customer');
  if (pi.metadata.order_id !== undefined && pi.metadata.order_id !== op.orderId) mismatch.push('metadata.order_id');
  const generation = pi.metadata.key_generation;
  const otherGeneration = generation !== undefined && generation !== String(op.keyGeneration);

  if (op.status === 'succeeded' || op.status === 'failed') {
    const same = op.externalId === pi.id;
    if (op.status === 'succeeded') {
      // An authorization (manual capture) is released by its cancel or by Stripe's expiry: what its
      // cancel_authorization operation — or the reconciler's expiry check, with our key — records.
      if (same && pi.status === 'canceled' && op.captureMethod === 'manual') {
        return { kind: 'stale', reason: `authorization ${pi.id} released (${pi.status}): its cancel or the reconciler's expiry check records it` };
      }
      if (same && pi.status === 'canceled') return { kind: 'contradiction', reason: `operation succeeded with ${pi.id}, but an event says it was canceled` };
      // The remedy's one rule (judgeDuplicateCharge) decides; anything it refuses stays a contradiction below.
      const verdict = !same && mismatch.length === 0 ? judgeDuplicateCharge(op, pi) : null;
      if (verdict?.kind === 'refund') {
        return { kind: 'duplicate_charge', reason: `operation succeeded with ${op.externalId}, and a second ${describePi(pi)} charged the same order`, remedy: verdict };
      }
      if (!same && MONEY_MAY_MOVE.has(pi.status)) {
        return { kind: 'contradiction', reason: `operation succeeded with ${op.externalId}, and a second ${describePi(pi)} exists for the same order` };
      }
      return { kind: 'stale', reason: same ? `operation already succeeded with ${pi.id}; event status ${pi.status}` : `${describePi(pi)} did not charge; operation succeeded with ${op.externalId}` };
    }
    if (pi.status === 'succeeded' || (!same && MONEY_MAY_MOVE.has(pi.status))) {
      return { kind: 'contradiction', reason: `operation failed${op.externalId ? ` (${op.externalId})` : ''}, but ${describePi(pi)} says money moved` };
    }
    return { kind: 'stale', reason: `operation already failed; event status ${pi.status}` };
  }

  if (op.reviewReason !== null && !settlesSlowReview(op, pi, mismatch.length > 0 || otherGeneration)) {
    return { kind: 'in_review', reason: `operation is in review; ${describePi(pi)} noted for the operator` };
  }
  if (op.kind === 'charge' && op.externalId !== null && op.externalId !== pi.id && pi.status === 'succeeded' && mismatch.length === 0) {
    return { kind: 'await_final', reason: `a second ${describePi(pi)} for an operation still open with ${op.externalId}: judged again once it is final` };
  }
  if (mismatch.length > 0 || otherGeneration) {
    const what = [...mismatch, ...(otherGeneration ? [`key generation ${generation} ≠ ${op.keyGeneration}`] : [])].join(', ');
    if (!MONEY_MAY_MOVE.has(pi.status)) return { kind: 'ignore', outcome: 'other_payment_intent', reason: `${describePi(pi)} does not match the operation (${what}) and charged nothing` };
    return { kind: 'review', reason: `${describePi(pi)} names this operation but does not match it (${what}); not adopted` };
  }
  if (op.externalId !== null && op.externalId !== pi.id) {
    if (!MONEY_MAY_MOVE.has(pi.status)) return { kind: 'ignore', outcome: 'other_payment_intent', reason: `${describePi(pi)} is not the operation's ${op.externalId} and charged nothing` };
    return { kind: 'review', reason: `a second ${describePi(pi)} for one operation (it holds ${op.externalId})` };
  }
  return { kind: 'settle' };
}

// ── What a Refund event may do (refund.created / refund.updated / refund.failed / charge.refund.updated) ──
//
// What Stripe documents and this part relies on:
//   - docs.stripe.com/api/refunds.md, "Events": refund.created, refund.updated ("Occurs whenever a
//     refund is updated"), refund.failed ("Occurs whenever a refund has failed"), and
//     charge.refund.updated ("on selected payment methods. For updates on all refunds, listen to
//     refund.updated instead"); data.object is the Refund in every one of them;
//   - changelog 2024-10-28.acacia "refund-webhook-update": those events apply to all refunds — for
//     an endpoint whose api_version is that or later. Events are rendered for the WEBHOOK ENDPOINT's
//     api_version ("The API version events are rendered as for this webhook endpoint",
//     docs.stripe.com/api/webhook_endpoints), not for the SDK's pinned 2026-10-28.endive: an older
//     endpoint sends a card refund's changes as charge.refund.updated only, which is why that event
//     is read exactly like refund.updated here (docs/deploy.md pins the endpoint's version);
//   - docs.stripe.com/api/refunds/object: status pending | requires_action | succeeded | failed |
//     canceled; failure_reason once failed; and docs.stripe.com/refunds ("failed refunds"): a card
//     refund can fail AFTER it said succeeded (the issuer cannot process it; the test card
//     pm_card_refundFail does exactly that, docs.stripe.com/testing#refunds). failed and canceled
//     are terminal; succeeded is not.
// Hence: a final snapshot (succeeded, failed, canceled) of an OPEN refund operation's Refund is a
// reason to retrieve it under the operation's lease, and Stripe's answer settles it (if it fails
// later, the failure is a fact of its own, below — recorded once Stripe confirms it); against a
// FAILED operation a succeeded snapshot may be older than the failure, so the Refund is retrieved
// before anything is concluded.

/** data.object of a refund event, in the engine's terms (a Refund is read like a PaymentIntent, kinds.ts). */
export interface EventRefund extends PaymentIntentView {
  readonly paymentIntentId: string | null;
  readonly failureReason: string | null;
}

export const REFUND_EVENT_TYPES: ReadonlySet<string> = new Set(['refund.created', 'refund.updated', 'refund.failed', 'charge.refund.updated']);

export function refundOf(event: StripeEventView): EventRefund | null {
  const read = moneyObjectOf(event, 'refund');
  return read && { ...read.fields, paymentIntentId: idOf(read.object.payment_intent), failureReason: str(read.object.failure_reason) };
}

export type RefundEventDecision =
  /** Not a refund of ours: a Dashboard refund (charge.refunded already tells it as a fact), or an operation we do not have. */
  | { readonly kind: 'ignore'; readonly outcome: 'foreign' | 'unknown_operation'; readonly reason: string }
  /** Nothing final yet (pending, requires_action), or the operation already is what the event says. */
  | { readonly kind: 'stale'; readonly reason: string }
  /** The Refund names the operation but does not match it, or contradicts its final state: finding + alarm, no state change. */
  | { readonly kind: 'contradiction'; readonly reason: string }
  /** The operation waits for a human: the event is noted in its audit trail. */
  | { readonly kind: 'in_review'; readonly reason: string }
  /**
   * Open (or in review), and the Refund is final: settle by it, as the engine would by a retrieve.
   * Judged on a snapshot, it is a hint — the applier claims the operation, retrieves the Refund and
   * decides again on Stripe's answer and the claimed row.
   */
  | { readonly kind: 'settle'; readonly reason: string }
  /** The operation failed and a succeeded snapshot says otherwise: retrieve the Refund now, then decide (decideRefundAfterRetrieve). */
  | { readonly kind: 'retrieve'; readonly reason: string }
  /**
   * The operation succeeded and the Refund failed since: the operation stays final, the failure is a
   * recorded fact that makes its amount refundable again — so, judged on a snapshot, a hint: the
   * Refund is retrieved and the fact recorded only when Stripe holds it failed.
   */
  | { readonly kind: 'failed_after_success'; readonly reason: string };

const describeRefund = (r: EventRefund) => `Refund ${r.id} (${r.status}, ${r.amount} ${r.currency})`;
/** Statuses a Refund never leaves (succeeded is not one: a card refund can fail after it). */
const REFUND_TERMINAL_FAILURE: ReadonlySet<string> = new Set(['failed', 'canceled']);

/**
 * The PaymentIntent a refund operation refunds: the duplicate remedy's extra one, else its charge's
 * (the caller looks the charge operation up; null when unknown).
 */
export function decideRefundEvent(op: Operation | null, refund: EventRefund, chargePaymentIntentId: string | null): RefundEventDecision {
  if (op === null) {
    return refund.metadata.operation_id === undefined
      ? { kind: 'ignore', outcome: 'foreign', reason: `${describeRefund(refund)} carries no metadata.operation_id and no operation holds it: not made by this pipeline (charge.refunded tells it as a fact)` }
      : { kind: 'ignore', outcome: 'unknown_operation', reason: `${describeRefund(refund)} names operation ${refund.metadata.operation_id}, which the ledger does not have` };
  }
  if (op.kind !== 'refund') {
    return { kind: 'ignore', outcome: 'foreign', reason: `${describeRefund(refund)} names ${op.kind} operation ${op.id}, not a refund operation` };
  }

  // Ownership: the same amount, currency, PaymentIntent, order and (once known) Refund id.
  const mismatch: string[] = [];
  if (refund.amount !== op.amount) mismatch.push(`amount ${refund.amount} ≠ ${op.amount}`);
  if (refund.currency !== op.currency) mismatch.push(`currency ${refund.currency} ≠ ${op.currency}`);
  const target = paymentIntentOfRefund(op, chargePaymentIntentId);
  if (target !== null && refund.paymentIntentId !== target) mismatch.push(`payment_intent ${refund.paymentIntentId ?? 'none'} ≠ ${target}`);
  if (refund.metadata.order_id !== undefined && refund.metadata.order_id !== op.orderId) mismatch.push('metadata.order_id');
  if (refund.metadata.operation_id !== undefined && refund.metadata.operation_id.toLowerCase() !== op.id) mismatch.push('metadata.operation_id');
  if (op.externalId !== null && op.externalId !== refund.id) mismatch.push(`the operation holds ${op.externalId}`);
  if (mismatch.length > 0) {
    return { kind: 'contradiction', reason: `${describeRefund(refund)} names refund operation ${op.id} but does not match it (${mismatch.join(', ')}); not adopted` };
  }

  if (op.status === 'succeeded') {
    if (refund.status === 'failed') {
      return { kind: 'failed_after_success', reason: `refund operation succeeded with ${refund.id}; Stripe now says it failed (${refund.failureReason ?? 'no failure_reason'}): the money did not reach the customer` };
    }
    if (refund.status === 'canceled') return { kind: 'contradiction', reason: `refund operation succeeded with ${refund.id}, but an event says it was canceled (a succeeded refund cannot be canceled)` };
    return { kind: 'stale', reason: `refund operation already succeeded with ${refund.id}; event status ${refund.status}` };
  }
  if (op.status === 'failed') {
    if (refund.status === 'succeeded') return { kind: 'retrieve', reason: `refund operation failed, a snapshot of ${refund.id} says succeeded: retrieved to tell an older snapshot from a contradiction` };
    return { kind: 'stale', reason: `refund operation already failed; event status ${refund.status}` };
  }

  if (op.refund?.paymentIntentId && op.reviewReason !== null && op.externalId === refund.id) {
    // The duplicate remedy's refund, in review while holding THIS Refund: its end at Stripe was
    // failed or canceled, which for a remedy is a review, not `failed` (decisions.ts remedyStands) —
    // so, unlike an ordinary refund, its failure does not end it and later events still reach it.
    // Stripe does not deliver events in order: an older `succeeded` snapshot must not clear that
    // review (the extra charge would stand with nobody asked). `settle` is retrieved like every
    // settle, and decided again on what Stripe holds now — only a Refund Stripe holds succeeded
    // settles; another failed/canceled copy of the same end is a note, not a second review (one
    // failure comes as refund.updated + refund.failed, maybe charge.refund.updated too).
    if (refund.status === 'succeeded') return { kind: 'settle', reason: `${describeRefund(refund)} settles the duplicate remedy's refund in review holding it` };
    return { kind: 'in_review', reason: `refund operation is in review holding ${refund.id}; ${describeRefund(refund)} is noted for the operator` };
  }
  if (refund.status === 'succeeded' || REFUND_TERMINAL_FAILURE.has(refund.status)) {
    // In review too: a signed, matching, final Refund naming this operation is the evidence the
    // operator would look for (what a retrieve would show); the settling write clears the review.
    return { kind: 'settle', reason: `${describeRefund(refund)} settles the open refund operation${op.reviewReason !== null ? ' (it was in review)' : ''}` };
  }
  if (op.reviewReason !== null) return { kind: 'in_review', reason: `refund operation is in review; ${describeRefund(refund)} is not final, noted for the operator` };
  // pending, requires_action, anything new: nothing final. A retrieve now would say the same; the
  // engine's own schedule (or the next event) settles it.
  return { kind: 'stale', reason: `${describeRefund(refund)} is not final yet; the operation stays ${op.status} on its schedule` };
}

/**
 * A succeeded snapshot of the Refund a FAILED operation holds, and what a retrieve of it says now:
 * succeeded now is money given back that the ledger says was not (a contradiction); anything else
 * means the snapshot was older than the failure.
 */
export function decideRefundAfterRetrieve(now: EventRefund | PaymentIntentView): RefundEventDecision {
  if (now.status === 'succeeded') {
    return { kind: 'contradiction', reason: `refund operation failed, but Stripe holds Refund ${now.id} as succeeded now: money was given back that the ledger says was not` };
  }
  return { kind: 'stale', reason: `refund operation already failed; Refund ${now.id} is ${now.status} now (the succeeded snapshot was older)` };
}

// ── What Stripe returned, against what the event said ────────────────────────────────────────────

/**
 * The object a snapshot named, as our own key retrieved it: is it the same object, and could the
 * snapshot be a true picture of it at some moment? Null: confirmed (the decision is then made again
 * on the retrieved object). A reason: the event is not confirmed — a finding, no state change:
 *   - another id, or metadata naming another operation (or none) than the snapshot named: not ours;
 *   - another amount, currency or customer: the pipeline never changes them on a PaymentIntent it
 *     made, and a Refund's never change;
 *   - a snapshot in a status the object never leaves (a PaymentIntent succeeded / canceled, a Refund
 *     failed / canceled) that Stripe does not hold now: the snapshot never was true.
 * A snapshot in any other status may simply be older than Stripe's answer: that is confirmed.
 */
export function confirmRetrieved(objectName: 'PaymentIntent' | 'Refund', snapshot: PaymentIntentView, retrieved: PaymentIntentView): string | null {
  const said = `the event's ${objectName} ${snapshot.id} (${snapshot.status}, ${snapshot.amount} ${snapshot.currency})`;
  const holds = `Stripe holds ${retrieved.id} as ${retrieved.status}, ${retrieved.amount} ${retrieved.currency}`;
  if (retrieved.id !== snapshot.id) return `${said}: Stripe answered with another object, ${retrieved.id}`;
  const claimed = claimedOperationId(snapshot);
  if (claimed !== null && claimedOperationId(retrieved) !== claimed) {
    return `${said} names operation ${claimed}; Stripe's names ${retrieved.metadata.operation_id ?? 'none'}: not ours`;
  }
  if (retrieved.amount !== snapshot.amount || retrieved.currency !== snapshot.currency) return `${said} is not what ${holds}`;
  if (typeof snapshot.customer === 'string' && typeof retrieved.customer === 'string' && snapshot.customer !== retrieved.customer) {
    return `${said} names customer ${snapshot.customer}; Stripe's belongs to another: not what Stripe holds`;
  }
  const terminal = objectName === 'PaymentIntent' ? PAYMENT_INTENT_TERMINAL : REFUND_TERMINAL_FAILURE;
  if (terminal.has(snapshot.status) && retrieved.status !== snapshot.status) {
    return `${said} says ${snapshot.status}, a status it never leaves, and ${holds}: the snapshot never was true`;
  }
  return null;
}
