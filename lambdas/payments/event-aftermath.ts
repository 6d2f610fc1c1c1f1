// A charge's aftermath (charge.refunded, charge.dispute.created, charge.dispute.closed): a fact about
// the operation that holds the charge's PaymentIntent — an audit line and an outbox row, no change of
// its outcome.
import { finish, inTransaction, lostLease, resultOf, type Applied, type ApplierContext } from './applier-context.ts';
import { refuse } from './event-confirmation.ts';
import { aftermathOf, judgeEventAccount, type StripeEventView } from './event-decisions.ts';
import { findOperationByExternalId, markApplied, recordAftermath, type InboxRow } from './inbox-store.ts';
import type { OutcomeEventRow } from './operations-store.ts';

const AFTERMATH_EVENT_TYPE = { refunded: 'Charge Refunded', disputed: 'Charge Disputed', dispute_closed: 'Charge Dispute Closed' } as const;

export async function applyAftermath(ctx: ApplierContext, row: InboxRow, event: StripeEventView): Promise<Applied> {
  const a = aftermathOf(event);
  if (!a) return finish(ctx, row, 'unreadable', null, `${event.type} without a readable charge or dispute`);
  const op = await findOperationByExternalId(ctx.db, a.paymentIntentId);
  if (!op) return finish(ctx, row, 'unknown_payment_intent', null, `${event.type} for ${a.paymentIntentId}, which no operation holds`);
  // A PaymentIntent id is unique at Stripe, but the event's `account` says whose: applied only to an operation of that account.
  const foreign = judgeEventAccount(event, op);
  if (foreign) return refuse(ctx, row, event, 'foreign_account', foreign);
  const written: { event: OutcomeEventRow | null } = { event: null };
  const done = await inTransaction(ctx.db, async (client) => {
    written.event = await recordAftermath(client, {
      operation: op,
      eventType: AFTERMATH_EVENT_TYPE[a.kind],
      kind: a.kind,
      amount: a.amount,
      amountRefunded: a.amountRefunded,
      currency: a.currency,
      chargeId: a.chargeId,
      disputeId: a.disputeId,
      disputeStatus: a.disputeStatus,
      disputeReason: a.disputeReason,
      stripeEventId: event.id,
      stripeCreatedAt: event.created,
      actor: ctx.actor,
    }, ctx.publishLeaseMs);
    return markApplied(client, row, 'aftermath', op.id);
  });
  if (!done) return lostLease(row);
  return { ...resultOf(row, 'aftermath', op.id, `${AFTERMATH_EVENT_TYPE[a.kind]} ${a.amount} ${a.currency}`), events: written.event ? [written.event] : [] };
}
