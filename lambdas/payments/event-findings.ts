// Findings: what an event shows that the operations do not — an unrecorded charge, a contradiction,
// a duplicate charge (with its remedy), a refund failed after it succeeded (with its fact and, for a
// remedy's Refund, a new remedy). Each is recorded once per object, with an audit line and the inbox
// row's mark in one transaction; nothing here changes an operation's outcome.
import type { Db } from './db.ts';
import { inTransaction, lostLease, resultOf, type Applied, type ApplierContext } from './applier-context.ts';
import { remedyAfterFailureRefundId } from './decisions.ts';
import type { EventPaymentIntent, EventRefund, PaymentIntentEventDecision, RefundEventDecision, StripeEventView } from './event-decisions.ts';
import { appendEventAudit, markApplied, recordFinding, recordRefundFailedAfterSuccess, type ApplyOutcome, type InboxRow } from './inbox-store.ts';
import { insertDuplicateRefund, type OutcomeEventRow } from './operations-store.ts';
import type { Operation } from './types.ts';

/** An unrecorded charge, a contradiction, or a duplicate charge with its remedy (the last only on Stripe's word). */
export async function findingOfPaymentIntent(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  pi: EventPaymentIntent,
  op: Operation | null,
  decision: Extract<PaymentIntentEventDecision, { readonly kind: 'unrecorded' | 'contradiction' | 'duplicate_charge' }>,
  evidence: Record<string, unknown>,
): Promise<Applied> {
  const kind = decision.kind === 'unrecorded' ? 'unrecorded_charge' : 'contradiction';
  const outcome: ApplyOutcome = decision.kind === 'unrecorded' ? 'unrecorded' : 'contradiction';
  // A second succeeded PaymentIntent of a succeeded charge: the duplicate-charge remedy refunds it,
  // in the same transaction as the finding, once however often the event comes.
  const remedy = decision.kind === 'duplicate_charge' ? decision.remedy : null;
  let remedyOperationId: string | null = null;
  let newFinding = false;
  const done = await inTransaction(ctx.db, async (client) => {
    if (op && remedy) {
      const made = await insertDuplicateRefund(client, op, remedy, ctx.actor, { evidence: 'stripe_event', stripeEventId: event.id, eventType: event.type });
      remedyOperationId = made?.created ? made.id : null;
    }
    newFinding = await recordFinding(client, {
      kind,
      paymentIntentId: pi.id,
      eventId: event.id,
      operationId: op?.id ?? null,
      claimedOperationId: pi.metadata.operation_id ?? null,
      orderId: pi.metadata.order_id ?? null,
      amount: pi.amount,
      currency: pi.currency,
      status: pi.status,
      reason: decision.reason,
      detail: evidence,
    });
    if (op) await appendEventAudit(client, op, ctx.actor, { ...evidence, contradiction: decision.reason }, pi.id);
    return markApplied(client, row, outcome, op?.id ?? null);
  });
  const reason = remedyOperationId ? `${decision.reason}; refunded by remedy operation ${remedyOperationId}` : decision.reason;
  return done ? { ...resultOf(row, outcome, op?.id ?? null, reason), newFinding } : lostLease(row);
}

/** A contradiction, or a refund failed after success (with its fact): one finding per Refund (its id keys it). */
export async function refundFinding(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  refund: EventRefund,
  op: Operation,
  decision: Extract<RefundEventDecision, { readonly kind: 'contradiction' | 'failed_after_success' }>,
  evidence: Record<string, unknown>,
): Promise<Applied> {
  // The same failure told by refund.failed, refund.updated and charge.refund.updated is recorded,
  // announced and alarmed once.
  const outcome: ApplyOutcome = decision.kind === 'contradiction' ? 'contradiction' : 'failed_after_success';
  const written: { event: OutcomeEventRow | null; newFinding: boolean } = { event: null, newFinding: false };
  const done = await inTransaction(ctx.db, async (client) => {
    written.newFinding = await recordFinding(client, {
      kind: 'contradiction',
      paymentIntentId: refund.id,
      eventId: event.id,
      operationId: op.id,
      claimedOperationId: refund.metadata.operation_id ?? null,
      orderId: refund.metadata.order_id ?? op.orderId,
      amount: refund.amount,
      currency: refund.currency,
      status: refund.status,
      reason: decision.reason,
      detail: evidence,
    });
    if (!written.newFinding) return markApplied(client, row, 'stale', op.id);
    if (decision.kind === 'failed_after_success') {
      written.event = await recordFailedAfterSuccess(ctx, client, event, refund, op);
    } else {
      await appendEventAudit(client, op, ctx.actor, { ...evidence, contradiction: decision.reason }, refund.id);
    }
    return markApplied(client, row, outcome, op.id);
  });
  if (!done) return lostLease(row);
  if (!written.newFinding) return resultOf(row, 'stale', op.id, `already recorded for Refund ${refund.id}: ${decision.reason}`);
  return { ...resultOf(row, outcome, op.id, decision.reason), events: written.event ? [written.event] : [], newFinding: true };
}

/** Inside refundFinding's transaction: the fact of a refund failed after success, and for a remedy's Refund a new remedy. */
async function recordFailedAfterSuccess(ctx: ApplierContext, client: Db, event: StripeEventView, refund: EventRefund, op: Operation): Promise<OutcomeEventRow> {
  const fact = await recordRefundFailedAfterSuccess(client, {
    operation: op,
    refundStripeId: refund.id,
    paymentIntentId: refund.paymentIntentId,
    amount: refund.amount,
    currency: refund.currency,
    failureReason: refund.failureReason,
    stripeEventId: event.id,
    stripeCreatedAt: event.created,
    actor: ctx.actor,
  }, ctx.publishLeaseMs);
  // The duplicate-charge remedy's Refund failed after success: the extra charge stands again.
  // A new remedy of the same PaymentIntent, in the same transaction (the fact's trigger has just
  // marked the failed one, which no longer holds the PaymentIntent's one remedy): its first
  // claim puts it in review naming the PaymentIntent (decisions.ts decidePrecondition).
  const extra = op.refund?.paymentIntentId;
  if (extra && op.refund) {
    await insertDuplicateRefund(client, { id: op.refund.parentOperationId, orderId: op.orderId }, { refundId: remedyAfterFailureRefundId(extra, refund.id), paymentIntentId: extra, amount: op.amount }, ctx.actor, {
      evidence: 'stripe_event',
      stripeEventId: event.id,
      eventType: event.type,
      afterFailedRefund: refund.id,
    });
  }
  return fact;
}
