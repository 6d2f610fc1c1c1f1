// The inbox applier: works recorded Stripe events at least once, in any order, each effect written
// by the same fenced statements as every other outcome. The mirror image of the outbox relay.
//
//   inbox row (leased) ─▶ origin (judgeEventOrigin): another account, the other mode ─▶ refused: BEGIN finding (+ audit) + mark applied COMMIT
//                      ─▶ decide on the snapshot (event-decisions.ts): a hint
//                         ├─ settle / review (a PaymentIntent or a Refund): claim the operation's lease
//                         │   ─▶ retrieve with our key (no transaction open) ─▶ not confirmed (404, not ours): release, finding
//                         │   ─▶ decide AGAIN on Stripe's answer and the claimed row
//                         │       ├─ settle / review: BEGIN recordOutcomes (fenced) + mark applied COMMIT
//                         │       └─ anything else: release the lease untouched, then act on that decision
//                         ├─ duplicate charge / a refund failed after success: retrieve first, decide again,
//                         │   then BEGIN remedy refund | fact + finding + audit + mark applied COMMIT
//                         ├─ refund / dispute: BEGIN audit + outbox row + mark applied COMMIT
//                         ├─ contradiction / unrecorded: BEGIN finding (+ audit) + mark applied COMMIT
//                         └─ stale / foreign / ignored: mark applied
//
// Nothing that changes an operation or moves money rests on the snapshot: a signed event proves that
// Stripe delivered it to this endpoint, not that its object is ours (docs/decisions.md 2026-12-02).
// One retrieve per such event keeps the fast path: the operation still settles within the apply.
//
// Idempotent per event id: the row is marked applied in the same transaction as its effect, fenced by
// the row's apply lease — a second applier (the webhook's inline apply and a sweep, two sweeps) that
// lost the lease rolls its transaction back. An event for an operation whose lease another worker
// holds waits in the inbox until that lease ends: the worker's own write comes first, and the event
// is then judged against the state it wrote.
//
// This class is the applier's one entry point (the page loop and the dispatch by event type); each
// step lives in a module of its own:
//   event-confirmation.ts    origin (refused events) and confirmation by a retrieve with our own key
//   event-settle.ts          settling an operation: claim, retrieve, decide again, fenced write
//   event-payment-intent.ts  PaymentIntent events
//   event-refund.ts          refund events
//   event-aftermath.ts       a charge's aftermath: refunded, disputed, dispute closed
//   event-findings.ts        findings: unrecorded charge, contradiction, duplicate charge, refund failed after success
//   applier-context.ts       the options, resolved once; Applied; how a row's apply ends
import { randomUUID } from 'node:crypto';
import { applierContext, deferralDelayMs, finish, defer, type Applied, type ApplierContext, type ApplierOptions } from './applier-context.ts';
import { applyAftermath } from './event-aftermath.ts';
import { originPolicyFor, originPolicyOf, refuse } from './event-confirmation.ts';
import {
  claimedOperationId,
  judgeEventAccount,
  judgeEventOrigin,
  paymentIntentOf,
  readStripeEvent,
  REFUND_EVENT_TYPES,
  refundOf,
  type EventOriginPolicy,
} from './event-decisions.ts';
import { applyPaymentIntent, PAYMENT_INTENT_EVENTS } from './event-payment-intent.ts';
import { applyRefund } from './event-refund.ts';
import { claimDueEvents, deferEvent, findRefundEventOperation, isRefusal, type InboxRow } from './inbox-store.ts';
import { findOperation, type OutcomeEventRow } from './operations-store.ts';

export type { Applied, ApplierOptions } from './applier-context.ts';
export { deferralDelayMs } from './applier-context.ts';

export interface ApplySummary {
  readonly byOutcome: Readonly<Record<string, number>>;
  readonly applied: number;
  readonly deferred: number;
  readonly failed: number;
  readonly contradictions: number;
  readonly unrecordedCharges: number;
  /** New findings of refused or unconfirmed events (foreign_account, livemode_mismatch, unconfirmed). */
  readonly refused: number;
  readonly events: readonly OutcomeEventRow[];
  readonly errors: readonly string[];
}

export class StripeEventApplier {
  readonly #ctx: ApplierContext;

  constructor(options: ApplierOptions) {
    this.#ctx = applierContext(options);
  }

  /** The apply lease on inbox rows (the endpoint claims a new row at birth with it). */
  get leaseMs(): number {
    return this.#ctx.leaseMs;
  }

  /** Whose events are taken: our key's mode (none without a key), the setting's connected accounts (and, per event, any the pipeline has an operation on). */
  get originPolicy(): EventOriginPolicy {
    return originPolicyOf(this.#ctx);
  }

  /** Apply every due row, page by page, until none is left or `canContinue` says stop. One bad row never blocks the others. */
  async applyDue(options: { pageSize?: number; canContinue?: () => boolean } = {}): Promise<ApplySummary> {
    const byOutcome: Record<string, number> = {};
    const events: OutcomeEventRow[] = [];
    const errors: string[] = [];
    let applied = 0;
    let deferred = 0;
    let failed = 0;
    let contradictions = 0;
    let unrecordedCharges = 0;
    let refused = 0;
    while (options.canContinue?.() ?? true) {
      const page = await claimDueEvents(this.#ctx.db, options.pageSize ?? 50, randomUUID(), this.#ctx.leaseMs);
      if (page.length === 0) break;
      for (const row of page) {
        const result = await this.applySafely(row);
        if (result.outcome !== 'deferred') applied++;
        else if (result.reason.startsWith('error:')) {
          failed++;
          errors.push(`${row.eventId}: ${result.reason}`);
        } else deferred++;
        byOutcome[result.outcome] = (byOutcome[result.outcome] ?? 0) + 1;
        if (result.newFinding && result.outcome === 'unrecorded') unrecordedCharges++;
        else if (result.newFinding && isRefusal(result.outcome)) refused++;
        else if (result.newFinding) contradictions++; // a contradiction, or a refund failed after it succeeded
        events.push(...result.events);
      }
      // Every deferral is into the future, so the next page holds other rows; a short page was the last.
      if (page.length < (options.pageSize ?? 50)) break;
    }
    return { byOutcome, applied, deferred, failed, contradictions, unrecordedCharges, refused, events, errors };
  }

  /** apply(), but an unexpected error defers the row with backoff instead of escaping. */
  async applySafely(row: InboxRow): Promise<Applied> {
    try {
      return await this.apply(row);
    } catch (error) {
      const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      await deferEvent(this.#ctx.db, row, { afterMs: deferralDelayMs(row.attempts, this.#ctx.policy.backoff.inbox) }, `error: ${message}`, null).catch(() => {});
      return { eventId: row.eventId, eventType: row.eventType, outcome: 'deferred', operationId: null, reason: `error: ${message.slice(0, 300)}`, events: [], newFinding: false };
    }
  }

  /** Apply one inbox row this caller holds the apply lease of. */
  async apply(row: InboxRow): Promise<Applied> {
    const ctx = this.#ctx;
    const read = readStripeEvent(row.payload);
    if (!read.ok) return finish(ctx, row, 'unreadable', null, read.reason);
    const event = read.event;
    // Whose event is it? Before anything in it is believed — for every type, facts included.
    // A connected account's event is taken when the pipeline has an operation on that account (or the
    // setting lists it); it is then applied only to an operation of that account (judgeEventAccount).
    const origin = judgeEventOrigin(event, await originPolicyFor(ctx, event));
    if (origin.kind === 'wait') return defer(ctx, row, null, origin.reason);
    if (origin.kind === 'refused') return refuse(ctx, row, event, origin.outcome, origin.reason);
    if (PAYMENT_INTENT_EVENTS.has(event.type)) {
      const pi = paymentIntentOf(event);
      if (!pi) return finish(ctx, row, 'unreadable', null, `${event.type} without a readable PaymentIntent`);
      const operationId = claimedOperationId(pi);
      const op = operationId ? await findOperation(ctx.db, operationId) : null;
      const foreign = op ? judgeEventAccount(event, op) : null;
      if (foreign) return refuse(ctx, row, event, 'foreign_account', foreign);
      return applyPaymentIntent(ctx, row, event, pi, op, 0);
    }
    if (event.type === 'charge.refunded' || event.type === 'charge.dispute.created' || event.type === 'charge.dispute.closed') {
      return applyAftermath(ctx, row, event);
    }
    if (REFUND_EVENT_TYPES.has(event.type)) {
      const refund = refundOf(event);
      if (!refund) return finish(ctx, row, 'unreadable', null, `${event.type} without a readable Refund`);
      // Ours by the operation id we put in its metadata, else by the Refund id an operation recorded.
      const claimedId = claimedOperationId(refund);
      const found = await findRefundEventOperation(ctx.db, claimedId, refund.id);
      const foreign = found ? judgeEventAccount(event, found.operation) : null;
      if (foreign) return refuse(ctx, row, event, 'foreign_account', foreign);
      return applyRefund(ctx, row, event, refund, found?.operation ?? null, found?.chargePaymentIntentId ?? null, 0, 'snapshot');
    }
    return finish(ctx, row, 'ignored_type', null, `${event.type} is not acted on`);
  }
}
