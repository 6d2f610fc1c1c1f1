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
      async describeOpen() {
        const { rows } = await ctx.observer.query<{ status: string; has_pi: boolean; leased: boolean; due_in_s: number | null; attempts: number; n: number }>(
          `/* bench */ SELECT status, external_id IS NOT NULL AS has_pi, lease_until > now() AS leased,
                  round(extract(epoch FROM next_attempt_at - now()))::int AS due_in_s, attempts, count(*)::int AS n
             FROM payment_operations WHERE status IN ('pending', 'unknown') AND review_reason IS NULL
            GROUP BY 1, 2, 3, 4, 5 ORDER BY n DESC LIMIT 8`,
        );
        // BENCH_DUMP_OPEN=<file>: the audit trail of up to 3 still-open operations, for a post-mortem.
        const dump = process.env.BENCH_DUMP_OPEN;
        if (dump) {
          const reviews = await ctx.observer.query(
            `/* bench */ SELECT left(review_reason, 90) AS reason, count(*)::int AS n FROM payment_operations WHERE review_reason IS NOT NULL GROUP BY 1 ORDER BY 2 DESC`,
          );
          const { appendFileSync } = await import('node:fs');
          appendFileSync(`${dump}.reviews`, `--- ${new Date().toISOString()}\n` + reviews.rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
        }
        if (dump && rows.length > 0) {
          const trail = await ctx.observer.query(
            `/* bench */ SELECT e.operation_id, e.occurred_at, e.actor, e.action, e.step, e.from_status, e.to_status, e.error_class, e.error_code, e.key_generation, e.detail
               FROM payment_operation_events e
              WHERE e.operation_id IN (SELECT id FROM payment_operations WHERE status IN ('pending', 'unknown') AND review_reason IS NULL ORDER BY attempts DESC LIMIT 3)
              ORDER BY e.operation_id, e.id`,
          );
          const { writeFileSync } = await import('node:fs');
          writeFileSync(dump, trail.rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
        }
        return rows.length === 0 ? 'none' : rows.map((r) => `${r.n}× ${r.status}${r.has_pi ? ' (pi)' : ''}${r.leased ? ' leased' : ''} attempts ${r.attempts} due in ${r.due_in_s} s`).join('; ');
      },
      async stop() {},
    };
  },
};
