// Contestant 1: this product, the charge handler and the reconciler UNCHANGED (loaded by the
// pipeline from lambdas/). Only its store is read here.
import type { Contestant } from '../contestant.ts';
import type { Belief } from '../truth.ts';

export const ours: Contestant = {
  id: 'ours',
  title: 'this product (handler + reconciler)',
  store: 'postgresql',
  async start(ctx) {
    return {
      async beliefs() {
        const { rows } = await ctx.observer.query<{ order_id: string; status: string; review_reason: string | null; settled_at: Date | null; updated_at: Date }>(
          '/* bench */ SELECT order_id, status, review_reason, settled_at, updated_at FROM payment_operations',
        );
        const out = new Map<string, Belief>();
        for (const r of rows) {
          if (r.status === 'succeeded' || r.status === 'failed') out.set(r.order_id, { state: r.status, finishedAtMs: (r.settled_at ?? r.updated_at).getTime() });
          else if (r.review_reason !== null) out.set(r.order_id, { state: 'review', finishedAtMs: r.updated_at.getTime() });
          else out.set(r.order_id, { state: 'open', finishedAtMs: null });
        }
        return out;
      },
      async stop() {},
    };
  },
};
