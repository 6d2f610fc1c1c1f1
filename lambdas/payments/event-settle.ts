// Settling an operation on an event: claim the operation's lease, retrieve with our key, decide again
// on Stripe's answer and the claimed row, and write the outcome by the same fenced statement as every
// other outcome, with the inbox row's mark in one transaction.
import { randomUUID } from 'node:crypto';
import { finish, inTransaction, releaseOnly, resultOf, type Applied, type ApplierContext } from './applier-context.ts';
import type { DecisionContext, Outcome } from './decisions.ts';
import { retrieveConfirmed, type RetrieveTarget } from './event-confirmation.ts';
import type { StripeEventView } from './event-decisions.ts';
import { claimForEvent, deferEvent, markApplied, type ApplyOutcome, type InboxRow, WAITING_FOR_LEASE } from './inbox-store.ts';
import { recordOutcomes, type OutcomeEventRow, type OutcomeWrite } from './operations-store.ts';
import type { ClaimedOperation, Operation, PaymentIntentView } from './types.ts';

/** After the claim and the retrieve: write this outcome (fenced), or give the lease back and do something else. */
export type OpenJudgement = { readonly kind: 'write'; readonly outcome: Outcome } | { readonly kind: 'elsewhere'; readonly reason: string; readonly act: () => Promise<Applied> };

/** The operation to review, with the reason, status and external id untouched. */
export function reviewOutcome(claimed: ClaimedOperation, reason: string, detail: Record<string, unknown>): Outcome {
  return { status: claimed.status, externalId: null, reviewReason: reason, retryAfterMs: null, error: null, errorClass: null, errorCode: null, detail };
}

/**
 * Claim the operation's lease, retrieve the object with our key, decide again on Stripe's answer and
 * the CLAIMED row (`judge`), and write that outcome fenced — or give the lease back untouched and act
 * on the new decision. Never an outcome decided on the row read before the claim: between that read
 * and the claim the operation may have been re-issued, settled, or sent to review.
 */
export async function applyToOpen<T extends PaymentIntentView>(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  op: Operation,
  target: RetrieveTarget<T>,
  judge: (claimed: ClaimedOperation, now: T, decided: DecisionContext) => OpenJudgement,
  /** Decide again from what the operation is now (it became final or went to review meanwhile). */
  again: (now: Operation) => Promise<Applied>,
  options: { readonly inReview?: boolean } = {},
): Promise<Applied> {
  const claim = await claimForEvent(ctx.db, op.id, randomUUID(), ctx.policy.leaseMs, ctx.actor, event.id, options);
  if (claim === null) return finish(ctx, row, 'unknown_operation', null, `operation ${op.id} vanished`);
  if (claim.claimed === null) {
    if (claim.leaseUntil !== null) {
      // Another worker holds it and is talking to Stripe: its write comes first; the event is
      // judged against that write once the lease has ended (or is given back).
      await deferEvent(ctx.db, row, { until: claim.leaseUntil }, WAITING_FOR_LEASE, op.id);
      return resultOf(row, 'deferred', op.id, `waiting for the lease of operation ${op.id}`);
    }
    // Final or in review since we looked: decide again from what it is now.
    return again(claim.operation);
  }
  const claimed = claim.claimed;
  // A lease given back without an outcome restores the schedule the claim moved to the lease's end.
  const scheduleMs = op.nextAttemptAt ? Math.max(0, op.nextAttemptAt.getTime() - claimed.claimedAt.getTime()) : 0;
  const got = await retrieveConfirmed(ctx, row, event, claimed, { claimed, scheduleMs }, target);
  if (!got.ok) return got.applied;
  const verdict = judge(claimed, got.object, { op: claimed, policy: ctx.policy, random: ctx.random });
  if (verdict.kind === 'elsewhere') {
    await releaseOnly(ctx, claimed, `stripe event ${event.id}: decided again on Stripe's answer and the claimed row: ${verdict.reason}`, scheduleMs);
    return verdict.act();
  }
  return writeOutcome(ctx, row, claimed, verdict.outcome);
}

/** The settling write: the outcome (fenced by the claim's lease) and the row's mark, in one transaction. */
async function writeOutcome(ctx: ApplierContext, row: InboxRow, claimed: ClaimedOperation, outcome: Outcome): Promise<Applied> {
  const write: OutcomeWrite = {
    operationId: claimed.id,
    leaseToken: claimed.leaseToken,
    action: 'record',
    step: null,
    fromStatus: claimed.status,
    keyGeneration: claimed.keyGeneration,
    ...outcome,
  };
  const recorded: { event: OutcomeEventRow | null; outcome: ApplyOutcome } = { event: null, outcome: 'moved' };
  const applied = await inTransaction(ctx.db, async (client) => {
    const [result] = await recordOutcomes(client, [write], ctx.actor, ctx.publishLeaseMs);
    if (!result?.applied) return false;
    recorded.event = result.event;
    recorded.outcome = outcome.reviewReason ? 'review' : result.status === 'succeeded' || result.status === 'failed' ? 'settled' : 'moved';
    return markApplied(client, row, recorded.outcome, claimed.id);
  });
  if (!applied) {
    await deferEvent(ctx.db, row, { afterMs: 1000 }, 'outcome discarded (lease lost) or inbox lease lost', claimed.id).catch(() => {});
    return resultOf(row, 'deferred', claimed.id, 'outcome not written; judged again');
  }
  return { ...resultOf(row, recorded.outcome, claimed.id, outcome.reviewReason ?? `operation ${outcome.status}`), events: recorded.event ? [recorded.event] : [] };
}
