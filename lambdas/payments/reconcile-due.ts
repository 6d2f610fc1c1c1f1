// The reconcile loop's unit of work: one page of due operations, claimed and executed. The sweep
// (lambdas/reconcile/sweep.ts) calls it page after page while it has time and budget.
import { randomUUID } from 'node:crypto';
import { executeClaimed } from './claimed-execution.ts';
import type { EngineContext } from './engine-context.ts';
import { claimDue } from './operations-store.ts';
import type { Execution } from './request-results.ts';

/**
 * One page of the reconcile sweep: claim up to `limit` due operations (SKIP LOCKED) and execute
 * them. Returns nothing to do as an empty array.
 */
export async function reconcileDue(ctx: EngineContext, limit: number, canStart?: () => boolean): Promise<Execution[]> {
  const claimSent = ctx.now();
  const claimed = await claimDue(ctx.db, limit, randomUUID(), ctx.policy.leaseMs, ctx.actor);
  if (claimed.length === 0) return [];
  return executeClaimed(ctx, claimed, canStart, claimSent);
}
