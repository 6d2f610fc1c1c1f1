// The property model's refund oracle: what a refund request MAY come to, and what every order's money
// at Stripe MUST be after heal — written from the refund rules of docs/model.md, never read from the product
// (lambdas/payments/operations-store.ts, decisions.ts). Its inputs are observations: the state of the
// order's charge just before a request (Stripe and the engine decide that), the refunds it saw
// accepted, and after the run the fake Stripe's ledger. Each rule below quotes the issue it comes from.
import type { PaymentIntentRecord, RefundRecord } from '../../../local/fake-stripe/types.ts';
import type { OperationStatus, RefundReason } from '../../../lambdas/payments/types.ts';

/** The order's charge operation as observed right before a refund request. */
export type ChargeState =
  | { readonly kind: 'none' }
  | { readonly kind: 'open' | 'succeeded' | 'failed'; readonly amount: number };

export interface AskedRefund {
  readonly refundId: string;
  readonly amount: number;
  readonly reason: RefundReason | null;
}

/** A producer refund the model saw accepted, with its operation's status as observed now. */
export interface AcceptedRefund extends AskedRefund {
  readonly operationId: string;
  readonly status: OperationStatus;
  /**
   * Stripe failed its Refund after it said succeeded AND the ledger learnt it: Stripe's event telling
   * it was delivered and applied (the inbox row of that event is applied). False while Stripe holds it
   * succeeded, while the event is only on its way, and in a run without Stripe events (polling never
   * looks at a final refund again: the product cannot know).
   */
  readonly failedAfterSuccessLearnt?: boolean;
}

/**
 * What holds money of the charge — docs/model.md, refund rules: "what holds money: a refund that is
 * pending, unknown or succeeded — not a failed one, not one Stripe failed after it succeeded (marked)";
 * migrations/009's header: "a marked refund is not 'refunded or in flight'", and the mark follows the
 * fact ("when the ledger learnt that Stripe failed the Refund"). So a refund Stripe failed after it
 * succeeded gives its amount back ONLY once the ledger learnt it; before that (or never, without
 * events) it still counts, and a new refund of that amount is `exceeds_charge`.
 */
export function holdsMoney(r: AcceptedRefund): boolean {
  return r.status !== 'failed' && r.failedAfterSuccessLearnt !== true;
}

export type RefundVerdict = 'accepted' | 'repeat' | 'no_charge' | 'charge_failed' | 'exceeds_charge' | 'refund_conflict';

/**
 * The verdict on one refund request:
 * - "one refund operation per (order_id, refund_id); the same refund id with another amount → conflict,
 *   recorded, nothing sent" — the same id with the same amount and reason is a repeat of the request
 *   (at-least-once delivery), answered with the refund operation it already made;
 * - no charge operation for the order: nothing to refund (the producer orders a refund after its charge);
 * - "a refund of a failed … order → rejected with the reason once the charge is final-failed";
 * - "the sum of an order's refunds never exceeds its charged amount": the refunds that hold money
 *   count (holdsMoney: succeeded, or still in flight); a failed one gives its amount back, and so does
 *   one Stripe failed after it succeeded, once the ledger learnt it;
 * - otherwise accepted — also while the charge is open: "a refund waits (durably, acknowledged) until
 *   the order's charge is final".
 * The duplicate remedy's refunds are not in `accepted` (they give back another PaymentIntent, not
 * the amount asked).
 */
export function predictRefund(charge: ChargeState, accepted: readonly AcceptedRefund[], ask: AskedRefund): { verdict: RefundVerdict; operationId?: string } {
  const same = accepted.find((r) => r.refundId === ask.refundId);
  if (same) return same.amount === ask.amount && same.reason === ask.reason ? { verdict: 'repeat', operationId: same.operationId } : { verdict: 'refund_conflict' };
  if (charge.kind === 'none') return { verdict: 'no_charge' };
  if (charge.kind === 'failed') return { verdict: 'charge_failed' };
  const held = accepted.filter(holdsMoney).reduce((sum, r) => sum + r.amount, 0);
  if (held + ask.amount > charge.amount) return { verdict: 'exceeds_charge' };
  return { verdict: 'accepted' };
}

/** A refund operation's row after heal. */
export interface RefundRow {
  readonly id: string;
  readonly refundId: string;
  readonly status: OperationStatus;
  readonly externalId: string | null;
  readonly reviewReason: string | null;
  readonly amount: number;
  readonly reason: RefundReason | null;
  readonly paymentIntent: string | null;
  /** The operation's mark (migrations/009): the ledger recorded that Stripe failed its Refund after it succeeded. */
  readonly failedAfterSuccess: boolean;
}

export interface OrderAfterHeal {
  readonly orderId: string;
  /** The charge operation (null: never made). */
  readonly charge: { readonly id: string; readonly status: OperationStatus; readonly externalId: string | null; readonly amount: number; readonly inReview: boolean } | null;
  /** Producer refunds the model saw accepted (refund id → what was asked). */
  readonly accepted: readonly AskedRefund[];
  /** Extra succeeded PaymentIntents the model made Stripe hold for the order (the duplicate remedy's cases), and late charges after a re-issue of a charge that succeeded. */
  readonly extras: readonly string[];
  /** Late charges after a re-issue of a charge that failed, each told a person by an open finding (the harness checks it): left out of the money. */
  readonly toldLate?: readonly string[];
  readonly refundRows: readonly RefundRow[];
  readonly paymentIntents: readonly PaymentIntentRecord[];
  readonly refunds: readonly RefundRecord[];
  /** Refunds (Stripe ids) the model had Stripe fail after they succeeded (the fake's succeeded → failed). */
  readonly failedAfterSuccess: ReadonlySet<string>;
  /** Whether Stripe's events reach the product in this run: only then can the ledger learn such a failure. */
  readonly events: boolean;
}

const HOLDING: readonly string[] = ['pending', 'requires_action', 'succeeded'];
const isOpen = (s: OperationStatus) => s === 'pending' || s === 'unknown';

/** What the model tallies: every accepted refund by its end. */
export type RefundEnd = 'succeeded' | 'failed_after_success_learnt' | 'failed_after_success_unknown' | 'failed_charge_failed' | 'failed_at_stripe' | 'in_review' | 'waiting_for_charge_review' | 'remedy_succeeded' | 'remedy_in_review';

/**
 * After heal, per order:
 * - every accepted refund has exactly one operation; it ends succeeded with one succeeded Refund of
 *   its amount on the charge's PaymentIntent, or failed — "a refund of a failed … order → rejected
 *   once the charge is final-failed" (then nothing at Stripe), or because Stripe's Refund failed or
 *   was canceled — or waits for a human (in review, or behind a charge in review) with nothing
 *   succeeded at Stripe that it does not know;
 * - "a duplicate PaymentIntent found → exactly one automatic refund of the extra one (reason
 *   duplicate, refund id derived from the PaymentIntent id so it can be created only once)";
 * - no refund operation the model did not ask for and no remedy for (nothing refunded by itself);
 * - the net amount: "for every order, the net amount charged is the amount asked, or zero — at most
 *   one unrefunded succeeded PaymentIntent, and refunds never exceeding charges"; here "the amount
 *   asked" is the charge's amount less the producer refunds that succeeded;
 * - every Refund at Stripe is recorded: it is the external id of the refund operation that sent it.
 */
export function judgeOrder(o: OrderAfterHeal): { problems: string[]; ends: RefundEnd[] } {
  const problems: string[] = [];
  const ends: RefundEnd[] = [];
  const say = (s: string) => problems.push(`order ${o.orderId}: ${s}`);
  const rowsById = new Map(o.refundRows.map((r) => [r.refundId, r]));
  const stripeRefundsOf = (operationId: string) => o.refunds.filter((r) => r.metadata.operation_id === operationId);

  // Every row is one the model asked for or a remedy of an extra PaymentIntent it made.
  for (const row of o.refundRows) {
    const asked = o.accepted.some((a) => a.refundId === row.refundId);
    const remedy = o.extras.some((pi) => row.refundId === `duplicate:${pi}`);
    if (!asked && !remedy) say(`refund operation ${row.id} (${row.refundId}) was never asked for`);
  }

  for (const ask of o.accepted) {
    const row = rowsById.get(ask.refundId);
    if (!row) {
      say(`accepted refund ${ask.refundId} has no operation`);
      continue;
    }
    if (row.amount !== ask.amount || row.reason !== ask.reason) say(`refund ${ask.refundId} is ${row.amount}/${row.reason}, asked ${ask.amount}/${ask.reason}`);
    const atStripe = stripeRefundsOf(row.id);
    const holding = atStripe.filter((r) => HOLDING.includes(r.status));
    if (holding.length > 1) say(`refund ${ask.refundId} was made ${holding.length} times at Stripe: ${holding.map((r) => r.id).join(', ')}`);
    const chargeStatus = o.charge?.status ?? null;
    if (chargeStatus === 'failed') {
      if (row.status !== 'failed') say(`refund ${ask.refundId} of a failed charge is ${row.status}`);
      if (atStripe.length > 0) say(`refund ${ask.refundId} of a failed charge reached Stripe`);
      ends.push('failed_charge_failed');
    } else if (chargeStatus === 'succeeded') {
      if (row.status === 'succeeded') {
        const made = atStripe.find((r) => r.id === row.externalId);
        // Stripe failed it after it succeeded (the model did, through the fake's documented control):
        // the operation stays succeeded; with events the ledger learnt it (the mark), without it cannot.
        const failedLater = made !== undefined && made.status === 'failed' && o.failedAfterSuccess.has(made.id);
        if (!made || (made.status !== 'succeeded' && !failedLater) || made.amount !== ask.amount || made.payment_intent !== o.charge!.externalId) {
          say(`refund ${ask.refundId} succeeded on ${row.externalId}, which is ${made ? `${made.status} ${made.amount} of ${made.payment_intent}` : 'no Refund of it at Stripe'}`);
        }
        if (failedLater && row.failedAfterSuccess !== o.events) {
          say(`refund ${ask.refundId}: Stripe failed ${made.id} after it succeeded; ${o.events ? 'its event was delivered, yet the operation is not marked' : 'no event told it, yet the operation is marked'}`);
        }
        if (!failedLater && row.failedAfterSuccess) say(`refund ${ask.refundId} is marked failed after success, but Stripe holds ${made?.id ?? 'nothing'} ${made?.status ?? ''}`);
        ends.push(failedLater ? (o.events ? 'failed_after_success_learnt' : 'failed_after_success_unknown') : 'succeeded');
      } else if (row.status === 'failed') {
        if (holding.length > 0) say(`refund ${ask.refundId} is failed, but Refund ${holding[0]!.id} is ${holding[0]!.status}`);
        if (!atStripe.some((r) => r.status === 'failed' || r.status === 'canceled')) say(`refund ${ask.refundId} failed without a failed or canceled Refund at Stripe`);
        ends.push('failed_at_stripe');
      } else if (row.reviewReason !== null) {
        ends.push('in_review');
      } else {
        say(`refund ${ask.refundId} of a succeeded charge is still ${row.status} after heal`);
      }
    } else {
      // The charge waits for a human: the refund waits for the charge, and nothing was sent.
      if (!isOpen(row.status) || atStripe.length > 0) say(`refund ${ask.refundId} of a charge that is ${chargeStatus} is ${row.status} with ${atStripe.length} Refund(s) at Stripe`);
      ends.push('waiting_for_charge_review');
    }
  }

  for (const pi of o.extras) {
    const remedies = o.refundRows.filter((r) => r.refundId === `duplicate:${pi}`);
    if (remedies.length !== 1) {
      say(`extra PaymentIntent ${pi} has ${remedies.length} remedy refund operations`);
      continue;
    }
    const row = remedies[0]!;
    if (row.reason !== 'duplicate' || row.paymentIntent !== pi) say(`remedy ${row.id} has reason ${row.reason} and refunds ${row.paymentIntent}`);
    const ofPi = o.refunds.filter((r) => r.payment_intent === pi && HOLDING.includes(r.status));
    if (row.status === 'succeeded') {
      const amount = o.paymentIntents.find((p) => p.id === pi)?.amount;
      if (ofPi.length !== 1 || ofPi[0]!.id !== row.externalId || ofPi[0]!.status !== 'succeeded' || ofPi[0]!.amount !== amount) {
        say(`remedy of ${pi} succeeded on ${row.externalId}; Stripe holds [${ofPi.map((r) => `${r.id} ${r.status} ${r.amount}`).join(', ')}] for it`);
      }
      ends.push('remedy_succeeded');
    } else if (row.reviewReason !== null) {
      ends.push('remedy_in_review');
    } else {
      say(`remedy of ${pi} is ${row.status} after heal`);
    }
  }

  // Every Refund at Stripe is the external id of the operation that sent it (pending ones were settled by heal).
  for (const r of o.refunds) {
    if (!HOLDING.includes(r.status)) continue;
    const row = o.refundRows.find((x) => x.id === r.metadata.operation_id);
    if (!row) say(`Refund ${r.id} at Stripe names no refund operation of the order (${r.metadata.operation_id ?? 'none'})`);
    else if (row.externalId !== r.id && row.reviewReason === null) say(`Refund ${r.id} (${r.status}) is not recorded: operation ${row.id} is ${row.status} with ${row.externalId}`);
  }

  // The money. Refunds never exceed a PaymentIntent; judged once nothing of the order waits for a human.
  const succeeded = o.paymentIntents.filter((p) => p.status === 'succeeded' && !(o.toldLate ?? []).includes(p.id));
  let net = 0;
  let unrefunded = 0;
  for (const p of succeeded) {
    const back = o.refunds.filter((r) => r.payment_intent === p.id && r.status === 'succeeded').reduce((s, r) => s + r.amount, 0);
    if (back > p.amount) say(`PaymentIntent ${p.id}: ${back} refunded of ${p.amount}`);
    net += p.amount - back;
    if (back < p.amount) unrefunded += 1;
  }
  const waiting = (o.charge !== null && (isOpen(o.charge.status) || o.charge.inReview)) || o.refundRows.some((r) => isOpen(r.status));
  if (!waiting) {
    if (unrefunded > 1) say(`${unrefunded} succeeded PaymentIntents not refunded in full`);
    // Refunded as asked: a refund that succeeded and that Stripe still holds succeeded — one Stripe failed
    // after it succeeded gave the customer nothing, whether the ledger learnt it or not (the money is Stripe's truth).
    const refundedAsked = o.accepted.reduce((s, a) => {
      const row = rowsById.get(a.refundId);
      return s + (row?.status === 'succeeded' && !(row.externalId !== null && o.failedAfterSuccess.has(row.externalId)) ? a.amount : 0);
    }, 0);
    const expected = o.charge?.status === 'succeeded' ? o.charge.amount - refundedAsked : 0;
    if (net !== expected) say(`net amount at Stripe ${net}, expected ${expected} (charge ${o.charge?.status ?? 'none'}, ${refundedAsked} refunded as asked)`);
  }
  return { problems, ends };
}
