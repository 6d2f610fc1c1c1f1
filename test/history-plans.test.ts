// What runs every minute, and what an operator runs, reads what is open — never the history. On a
// database holding a long settled history, every statement of the reconciler's gauges, `ops review
// list` and `ops stats` is planned without a sequential scan of the pipeline's growing tables
// (`npm run bench:scale` measures the same with buffers and milliseconds).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { collectGauges } from '../lambdas/reconcile/gauges.ts';
import { listReviewQueue } from '../lambdas/payments/review.ts';
import { loadStats } from '../lambdas/ops/queries.ts';
import { RETENTION_DEFAULTS, runRetention } from '../lambdas/payments/retention-store.ts';
import { countingDb, type CountedStatement, type Db } from '../lambdas/payments/db.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

const GROWING = /^(payment_operations|payment_operation_events(_\w+)?|outcome_events|stripe_events|rejected_messages)$/;

interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  Plans?: PlanNode[];
}
const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

describe('reads of what is open, on a long history', () => {
  let db: TestDatabase;

  beforeAll(async () => {
    db = await createTestDatabase('history_plans');
    await db.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, attempts, first_attempted_at, next_attempt_at, settled_at, created_at, updated_at)
       SELECT 'settled-' || g, 1000, 'eur', 'cus_hist', 'pm_card_visa', 'succeeded', 'pi_hist_' || g, 1, now() - interval '2 days', NULL, now() - interval '2 days', now() - interval '2 days', now() - interval '2 days'
         FROM generate_series(1, 50000) g`,
    );
    // Each settled charge's published outcome event and applied Stripe event; older rejected messages. All of it
    // inside the retention bounds (the retention run must find nothing due, and cost what finding so costs).
    await db.pool.query(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at, published_at, attempts)
       SELECT e.eid, e.id, 'Charge Succeeded', jsonb_build_object('version', 1, 'eventId', e.eid, 'sequence', 1), now() - interval '2 days', now() - interval '2 days', 1
         FROM (SELECT id, uuidv7() AS eid FROM payment_operations) e`,
    );
    await db.pool.query(
      `INSERT INTO stripe_events (event_id, event_type, stripe_created_at, object_id, source, received_at, payload, applied_at, outcome, operation_id)
       SELECT 'evt_' || p.external_id, 'payment_intent.succeeded', now() - interval '2 days', p.external_id, 'webhook', now() - interval '2 days', '{}'::jsonb,
              now() - interval '2 days', 'settled', p.id
         FROM payment_operations p`,
    );
    await db.pool.query(
      `INSERT INTO rejected_messages (message_id, received_at, reason_code, reason, body_sha256, raw_body)
       SELECT 'msg-' || g, now() - interval '10 days', 'invalid_json', 'not JSON', repeat('0', 64), '{' FROM generate_series(1, 20000) g`,
    );
    await db.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, review_reason, next_attempt_at)
       SELECT 'review-' || g, 1000, 'eur', 'cus_hist', 'pm_card_visa', 'unknown', 'search_inconclusive', NULL FROM generate_series(1, 5) g`,
    );
    await db.pool.query(`INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) SELECT 'open-' || g, 1000, 'eur', 'cus_hist', 'pm_card_visa' FROM generate_series(1, 5) g`);
    await db.pool.query('VACUUM ANALYZE');
  }, 120_000);

  afterAll(async () => {
    await db?.drop();
  });

  async function scansOfHistory(run: (db: Db) => Promise<unknown>): Promise<string[]> {
    const statements: CountedStatement[] = [];
    await run(countingDb(db.pool, (s) => statements.push(s)));
    const scans: string[] = [];
    for (const s of statements) {
      const { rows } = await db.pool.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`EXPLAIN (FORMAT JSON) ${s.text}`, [...s.values]);
      for (const n of nodes(rows[0]!['QUERY PLAN'][0]!.Plan)) {
        if (n['Node Type'] === 'Seq Scan' && GROWING.test(n['Relation Name'] ?? '')) scans.push(`${n['Relation Name']}: ${s.text.replace(/\s+/g, ' ').slice(0, 100)}`);
      }
    }
    return scans;
  }

  it("the reconciler's gauges", async () => {
    expect(await scansOfHistory((d) => collectGauges(d, 300, { inbox: true }))).toEqual([]);
  });

  it('ops review list', async () => {
    expect(await scansOfHistory((d) => listReviewQueue(d, { limit: 50 }))).toEqual([]);
  });

  it('the retention run, with nothing due: a few pages, not the history (its statements run inside owner functions, so pages are counted)', async () => {
    const statements: CountedStatement[] = [];
    const run = await runRetention(countingDb(db.pool, (s) => statements.push(s)), RETENTION_DEFAULTS, () => new Date());
    expect(run.removed).toEqual({ outbox: 0, stripeEventPayloads: 0, stripeEvents: 0, rejectedBodies: 0, operatorReads: 0, resolvedFindings: 0 });
    const { rows: pages } = await db.pool.query<{ n: number }>(
      `SELECT sum(relpages)::int AS n FROM pg_class WHERE relname IN ('outcome_events', 'stripe_events', 'rejected_messages')`,
    );
    let touched = 0;
    for (const s of statements) {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        const { rows } = await client.query<{ 'QUERY PLAN': { Plan: Record<string, number> }[] }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${s.text}`, [...s.values]);
        const plan = rows[0]!['QUERY PLAN'][0]!.Plan;
        touched += (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
      } finally {
        await client.query('ROLLBACK');
        client.release();
      }
    }
    expect(pages[0]!.n).toBeGreaterThan(1_000);
    expect(touched).toBeLessThan(pages[0]!.n / 10);
  });

  it('ops stats, on a table past the size it counts below: open figures counted, settled ones estimated', async () => {
    expect(await scansOfHistory((d) => loadStats(d, { exactTotalsBelowRows: 10_000 }))).toEqual([]);
    const estimated = await loadStats(db.pool, { exactTotalsBelowRows: 10_000 });
    const counted = await loadStats(db.pool, { exactTotalsBelowRows: Number.POSITIVE_INFINITY });
    expect(estimated.totalsEstimated).toBe(true);
    expect(counted.totalsEstimated).toBe(false);
    // Open and review figures are the same either way; the settled ones agree within the statistics' error.
    expect(estimated.open).toEqual(counted.open);
    expect(estimated.review).toEqual(counted.review);
    expect(estimated.byKind.charge.inReview).toBe(5);
    expect(counted.operations.succeeded).toBe(50_000);
    expect(Math.abs(estimated.operations.succeeded - 50_000)).toBeLessThan(2_500);
  });

});
