// PaymentIntent events (payment_intent.succeeded / payment_failed / canceled / processing /
// requires_action) for the charge operation they name: decided on the snapshot, settled only on our
// key's retrieve (event-settle.ts), a duplicate charge's remedy only on Stripe's word.
import { defer, finish, inTransaction, lostLease, objectEvidence, resultOf, type Applied, type ApplierContext, type Evidence } from './applier-context.ts';
import { fromPaymentIntent } from './decisions.ts';
import { paymentIntentTarget, retrieveConfirmed } from './event-confirmation.ts';
import { decidePaymentIntentEvent, type EventPaymentIntent, type PaymentIntentEventDecision, type StripeEventView } from './event-decisions.ts';
import { findingOfPaymentIntent } from './event-findings.ts';
import { applyToOpen, reviewOutcome, type OpenJudgement } from './event-settle.ts';
import { appendEventAudit, markApplied, type InboxRow } from './inbox-store.ts';
import { accountOf } from './kinds.ts';
import type { Operation } from './types.ts';

export const PAYMENT_INTENT_EVENTS = new Set([
  'payment_intent.succeeded',
  'payment_intent.payment_failed',
  'payment_intent.canceled',
  'payment_intent.processing',
  'payment_intent.requires_action',
]);

/** Decisions that write no outcome of the operation (the rest — settle, review — are judged after a claim). */
type RecordOnlyPaymentIntentDecision = Exclude<PaymentIntentEventDecision, { readonly kind: 'settle' | 'review' }>;

function paymentIntentEvidence(event: StripeEventView, pi: EventPaymentIntent, evidenceOf: Evidence) {
  return { stripeEventId: event.id, eventType: event.type, paymentIntent: objectEvidence(pi), judgedOn: evidenceOf };
}

export async function applyPaymentIntent(ctx: ApplierContext, row: InboxRow, event: StripeEventView, pi: EventPaymentIntent, op: Operation | null, depth: number): Promise<Applied> {
  const decision = decidePaymentIntentEvent(op, pi);
  if (decision.kind !== 'settle' && decision.kind !== 'review') return recordPaymentIntent(ctx, row, event, pi, op, decision, 'snapshot', depth);
  // Settling or sending to review changes the operation: a hint until our key confirms it. Claim
  // the operation, retrieve the PaymentIntent, and decide again — on Stripe's answer, and on the
  // row as the claim found it (another key generation, another PaymentIntent, final meanwhile).
  const open = op!;
  const evidence = paymentIntentEvidence(event, pi, 'snapshot');
  return applyToOpen(
    ctx,
    row,
    event,
    open,
    paymentIntentTarget(pi, accountOf(open)),
    (claimed, now, decided): OpenJudgement => {
      const again = decidePaymentIntentEvent(claimed, now);
      const detail = { ...evidence, retrieved: objectEvidence(now), evidence: 'event+retrieve' };
      if (again.kind === 'settle') return { kind: 'write', outcome: fromPaymentIntent(decided, now, detail) };
      if (again.kind === 'review') return { kind: 'write', outcome: reviewOutcome(claimed, again.reason, detail) };
      return { kind: 'elsewhere', reason: again.reason, act: () => recordPaymentIntent(ctx, row, event, now, claimed, again, 'stripe', depth) };
    },
    (now) => (depth > 1 ? finish(ctx, row, 'stale', open.id, 'operation changed while the event was applied') : applyPaymentIntent(ctx, row, event, pi, now, depth + 1)),
    // An operation in review only for being slow is settled by its PaymentIntent's final state
    // (event-decisions.ts settlesSlowReview); the claim must then take it in review.
    { inReview: open.reviewReason !== null },
  );
}

/** A PaymentIntent event's decision that writes no outcome of the operation. */
async function recordPaymentIntent(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  pi: EventPaymentIntent,
  op: Operation | null,
  decision: RecordOnlyPaymentIntentDecision,
  evidenceOf: Evidence,
  depth: number,
): Promise<Applied> {
  const evidence = paymentIntentEvidence(event, pi, evidenceOf);
  switch (decision.kind) {
    case 'ignore':
      return finish(ctx, row, decision.outcome, op?.id ?? null, decision.reason);
    case 'stale':
      return finish(ctx, row, 'stale', op!.id, decision.reason);
    case 'await_final':
      return defer(ctx, row, op!.id, decision.reason);
    case 'duplicate_charge':
      if (evidenceOf === 'snapshot') {
        // A remedy moves money (a refund of the extra PaymentIntent): the extra one is retrieved
        // with our key and judged again on what Stripe holds (judgeDuplicateCharge, inside the decision).
        const target = paymentIntentTarget(pi, accountOf(op!));
        const got = await retrieveConfirmed(ctx, row, event, op!, null, target);
        if (!got.ok) return got.applied;
        const again = decidePaymentIntentEvent(op, got.object);
        // The operation is final (a duplicate is judged against a succeeded charge only): it never changes.
        if (again.kind === 'settle' || again.kind === 'review') throw new Error(`a final operation ${op!.id} cannot be ${again.kind}d`);
        return recordPaymentIntent(ctx, row, event, got.object, op, again, 'stripe', depth);
      }
      return findingOfPaymentIntent(ctx, row, event, pi, op, decision, evidence);
    case 'unrecorded':
    case 'contradiction':
      // Only recorded: a finding and an alarm, on what the event says (nothing changes).
      return findingOfPaymentIntent(ctx, row, event, pi, op, decision, evidence);
    case 'in_review': {
      const done = await inTransaction(ctx.db, async (client) => {
        await appendEventAudit(client, op!, ctx.actor, { ...evidence, note: decision.reason }, pi.id);
        return markApplied(client, row, 'in_review', op!.id);
      });
      return done ? resultOf(row, 'in_review', op!.id, decision.reason) : lostLease(row);
    }
  }
}
