// Refund events (refund.created / updated / failed, charge.refund.updated) for the refund operation
// they name: decided on the snapshot, settled only on our key's retrieve (event-settle.ts), a refund
// failed after success recorded only once our key shows it failed.
import { defer, finish, inTransaction, lostLease, objectEvidence, resultOf, type Applied, type ApplierContext, type Evidence } from './applier-context.ts';
import { fromPaymentIntent } from './decisions.ts';
import { refundTarget, retrieveConfirmed, thrownAsAmbiguous, TRANSIENT } from './event-confirmation.ts';
import { decideRefundAfterRetrieve, decideRefundEvent, type EventRefund, type RefundEventDecision, type StripeEventView } from './event-decisions.ts';
import { refundFinding } from './event-findings.ts';
import { applyToOpen, type OpenJudgement } from './event-settle.ts';
import { appendEventAudit, markApplied, type InboxRow } from './inbox-store.ts';
import { accountOf } from './kinds.ts';
import type { Operation } from './types.ts';

/** Decisions that write no outcome of the operation (a settle is judged after a claim). */
type RecordOnlyRefundDecision = Exclude<RefundEventDecision, { readonly kind: 'settle' }>;

function refundEvidence(event: StripeEventView, refund: EventRefund, evidenceOf: Evidence) {
  return {
    stripeEventId: event.id,
    eventType: event.type,
    refund: { ...objectEvidence(refund), paymentIntent: refund.paymentIntentId, failureReason: refund.failureReason },
    judgedOn: evidenceOf,
  };
}

/**
 * A refund event (refund.created / updated / failed, charge.refund.updated) for the refund operation
 * it names, if any. `chargePaymentIntentId`: the charge's PaymentIntent, read with the operation
 * (findRefundEventOperation), from which decideRefundEvent derives the PaymentIntent the operation
 * refunds (types.ts paymentIntentOfRefund). A final charge's never changes, so a re-decision after a
 * claim or a retrieve reuses it.
 */
export async function applyRefund(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  refund: EventRefund,
  op: Operation | null,
  chargePaymentIntentId: string | null,
  depth: number,
  evidenceOf: Evidence,
): Promise<Applied> {
  const decision = decideRefundEvent(op, refund, chargePaymentIntentId);
  if (decision.kind !== 'settle') return recordRefund(ctx, row, event, refund, op, decision, evidenceOf, depth, chargePaymentIntentId);
  if (evidenceOf === 'stripe') throw new Error('a settle on Stripe\'s word is judged after the claim (applyToOpen)');
  const open = op!;
  const evidence = refundEvidence(event, refund, 'snapshot');
  // In review too: a final, matching Refund naming the operation is what the operator would look
  // for — once our key shows Stripe holds it so; the settling write clears the review.
  return applyToOpen(
    ctx,
    row,
    event,
    open,
    refundTarget(refund, accountOf(open)),
    (claimed, now, decided): OpenJudgement => {
      const again = decideRefundEvent(claimed, now, chargePaymentIntentId);
      if (again.kind === 'settle') return { kind: 'write', outcome: fromPaymentIntent(decided, now, { ...evidence, retrieved: objectEvidence(now), evidence: 'event+retrieve' }) };
      return { kind: 'elsewhere', reason: again.reason, act: () => recordRefund(ctx, row, event, now, claimed, again, 'stripe', depth, chargePaymentIntentId) };
    },
    (now) => (depth > 1 ? finish(ctx, row, 'stale', open.id, 'operation changed while the event was applied') : applyRefund(ctx, row, event, refund, now, chargePaymentIntentId, depth + 1, 'snapshot')),
    { inReview: true },
  );
}

/** A refund event's decision that writes no outcome of the operation (a fact, a finding, a note). */
async function recordRefund(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  refund: EventRefund,
  op: Operation | null,
  decision: RecordOnlyRefundDecision,
  evidenceOf: Evidence,
  depth: number,
  chargePaymentIntentId: string | null,
): Promise<Applied> {
  const evidence = refundEvidence(event, refund, evidenceOf);
  switch (decision.kind) {
    case 'ignore':
      return finish(ctx, row, decision.outcome, op?.id ?? null, decision.reason);
    case 'stale':
      return finish(ctx, row, 'stale', op!.id, decision.reason);
    case 'in_review': {
      const done = await inTransaction(ctx.db, async (client) => {
        await appendEventAudit(client, op!, ctx.actor, { ...evidence, note: decision.reason }, refund.id);
        return markApplied(client, row, 'in_review', op!.id);
      });
      return done ? resultOf(row, 'in_review', op!.id, decision.reason) : lostLease(row);
    }
    case 'failed_after_success':
      if (evidenceOf === 'snapshot') {
        // The fact makes the refund's amount refundable again (migrations/009's mark): recorded
        // only once our key shows Stripe holds the Refund failed.
        const target = refundTarget(refund, accountOf(op!));
        const got = await retrieveConfirmed(ctx, row, event, op!, null, target);
        if (!got.ok) return got.applied;
        return applyRefund(ctx, row, event, got.object, op, chargePaymentIntentId, depth, 'stripe');
      }
      return refundFinding(ctx, row, event, refund, op!, decision, evidence);
    case 'contradiction':
      return refundFinding(ctx, row, event, refund, op!, decision, evidence);
    case 'retrieve': {
      // A FAILED operation and a succeeded snapshot: only recorded (a contradiction or stale), so
      // a failed retrieve is a contradiction to look at, not a state change.
      const mayCall = ctx.gateway !== null && ((await ctx.beforeCall?.(accountOf(op!))) ?? true);
      if (!mayCall || ctx.gateway === null) return defer(ctx, row, op!.id, 'no Stripe call possible now (no key or no request budget)');
      const answer = await ctx.gateway.retrieveRefund(refund.id, { account: accountOf(op!) }).catch(thrownAsAmbiguous);
      if (!answer.ok) {
        if (TRANSIENT.has(answer.failure.kind)) return defer(ctx, row, op!.id, `retrieve failed: ${answer.failure.errorClass}`);
        const reason = `refund operation failed; a snapshot of ${refund.id} says succeeded and retrieving it failed (${answer.failure.errorClass}${answer.failure.code ? ` ${answer.failure.code}` : ''})`;
        return refundFinding(ctx, row, event, refund, op!, { kind: 'contradiction', reason }, evidence);
      }
      const after = decideRefundAfterRetrieve(answer.value);
      const detail = { ...evidence, retrieved: { status: answer.value.status } };
      return after.kind === 'contradiction' ? refundFinding(ctx, row, event, refund, op!, after, detail) : finish(ctx, row, 'stale', op!.id, after.reason);
    }
  }
}
