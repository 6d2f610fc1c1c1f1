// The audit trail is found by operation through a block-range index (migrations/014_audit_trail_brin.sql),
// not a B-tree: an operation's rows are read from a few block ranges of a large trail, the late rows of
// an old operation included, and the read gives exactly that operation's rows in order.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

const OPERATIONS = 30_000;

interface PlanNode {
  'Node Type': string;
  'Index Name'?: string;
  'Lossy Heap Blocks'?: number;
  'Exact Heap Blocks'?: number;
  Plans?: PlanNode[];
}

const nodes = (plan: PlanNode): PlanNode[] => [plan, ...(plan.Plans ?? []).flatMap(nodes)];

describe('the audit trail by operation, without a B-tree', () => {
  let db: TestDatabase;
  let ids: string[];
  let tablePages: number;

  beforeAll(async () => {
    db = await createTestDatabase('audit_brin');
    // Operations created one after another (UUIDv7: ids in creation order), each with the three rows of
    // a charge written as it happened; then, much later, one more row for a few of the oldest.
    await db.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method)
       SELECT 'brin-' || g, 1000, 'eur', 'cus_brin', 'pm_card_visa' FROM generate_series(1, $1) g`,
      [OPERATIONS],
    );
    ids = (await db.pool.query<{ id: string }>(`SELECT id FROM payment_operations ORDER BY id`)).rows.map((r) => r.id);
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, detail)
       SELECT p.id, 'charge-handler', a.action, jsonb_build_object('leaseToken', gen_random_uuid())
         FROM payment_operations p CROSS JOIN (VALUES (1, 'requested'), (2, 'attempt_started'), (3, 'outcome_recorded')) AS a(n, action)
        ORDER BY p.id, a.n`,
    );
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action) SELECT unnest($1::uuid[]), 'ops:alice', 'operator_note'`,
      [ids.slice(0, 20)],
    );
    // What autosummarize does as each range fills, at once; and the statistics autovacuum would gather.
    // (The trail is partitioned by month, migrations/015: each partition has its own block-range index.)
    await db.pool.query(
      `SELECT brin_summarize_new_values(inhrelid::regclass) FROM pg_inherits WHERE inhparent = 'payment_operation_events_by_operation'::regclass`,
    );
    await db.pool.query('ANALYZE payment_operation_events');
    tablePages = (
      await db.pool.query<{ pages: number }>(
        `SELECT sum(c.relpages)::int AS pages FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'payment_operation_events'::regclass`,
      )
    ).rows[0]!.pages;
  }, 120_000);

  afterAll(async () => {
    await db?.drop();
  });

  async function trailOf(operationIds: string[]): Promise<{ rows: { operation_id: string; action: string }[]; plan: PlanNode[] }> {
    // The engine's evidence read (operations-store.ts loadEvidenceEvents), as it is written.
    const sql = `SELECT operation_id, action, step, occurred_at, key_generation, error_class, detail
                   FROM payment_operation_events WHERE operation_id = ANY($1::uuid[]) ORDER BY operation_id, id`;
    const explained = await db.pool.query<{ 'QUERY PLAN': { Plan: PlanNode }[] }>(`EXPLAIN (ANALYZE, FORMAT JSON) ${sql}`, [operationIds]);
    const rows = (await db.pool.query<{ operation_id: string; action: string }>(sql, [operationIds])).rows;
    return { rows, plan: nodes(explained.rows[0]!['QUERY PLAN'][0]!.Plan) };
  }

  it.each([
    ['an old operation with a late row', 5, ['requested', 'attempt_started', 'outcome_recorded', 'operator_note']],
    ['an operation from the middle', OPERATIONS / 2, ['requested', 'attempt_started', 'outcome_recorded']],
    ['the newest operation', OPERATIONS - 1, ['requested', 'attempt_started', 'outcome_recorded']],
  ])('%s: its rows, in order, from a few block ranges of the trail', async (_label, index, actions) => {
    const id = ids[index]!;
    const { rows, plan } = await trailOf([id]);
    expect(rows.map((r) => r.operation_id)).toEqual(actions.map(() => id));
    expect(rows.map((r) => r.action)).toEqual(actions);
    const scan = plan.find((n) => n['Node Type'] === 'Bitmap Index Scan');
    // A partition's own index of the partitioned one (which partition depends on the month the suite runs in).
    expect(scan?.['Index Name']).toMatch(/^payment_operation_events_/);
    const heap = plan.find((n) => n['Node Type'] === 'Bitmap Heap Scan')!;
    const blocks = (heap['Lossy Heap Blocks'] ?? 0) + (heap['Exact Heap Blocks'] ?? 0);
    // pages_per_range 8: the operation's own range or two, and the range its late row went to.
    expect(tablePages).toBeGreaterThan(1_000);
    expect(blocks).toBeLessThanOrEqual(4 * 8);
  });

  it('a batch of operations in one read, each with its own trail', async () => {
    const batch = [ids[3]!, ids[12_345]!, ids[29_000]!];
    const { rows } = await trailOf(batch);
    expect(rows.length).toBe(3 * 3 + 1);
    expect(new Set(rows.map((r) => r.operation_id))).toEqual(new Set(batch));
  });
});
