// The audit trail partitioned by month (migrations/015_audit_trail_partitions.sql, lambdas/payments/audit-partitions.ts):
// the migration on a database that already holds a trail, partitions made ahead, and a month archived
// — detached, exported, counted — only when nothing needs it.
import { mkdtemp, readFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { createHash, randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import { createDatabase } from '../local/postgres.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { archiveAuditPartitions, csvField, listAuditPartitions, prepareAuditPartitions } from '../lambdas/payments/audit-partitions.ts';
import { parseArchiveArgs } from '../scripts/audit-archive.ts';
import { runReconcile } from '../lambdas/reconcile/sweep.ts';
import { createTestDatabase, databaseUrl, type TestDatabase } from './support/db.ts';

const DAY = 86_400_000;

async function insertOperations(pool: pg.Pool, prefix: string, n: number, status: 'pending' | 'succeeded' = 'succeeded'): Promise<string[]> {
  const { rows } = await pool.query<{ id: string }>(
    status === 'succeeded'
      ? `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, settled_at, next_attempt_at)
         SELECT $1 || g, 1000, 'eur', 'cus_part', 'pm_card_visa', 'succeeded', 'pi_' || $1 || g, now(), NULL FROM generate_series(1, $2) g RETURNING id`
      : `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method)
         SELECT $1 || g, 1000, 'eur', 'cus_part', 'pm_card_visa' FROM generate_series(1, $2) g RETURNING id`,
    [prefix, n],
  );
  return rows.map((r) => r.id);
}

async function trail(pool: pg.Pool, ids: readonly string[], occurredAt = 'now()'): Promise<void> {
  // occurredAt is a constant of this file, never input.
  await pool.query(
    `INSERT INTO payment_operation_events (operation_id, actor, action, detail, occurred_at)
     SELECT id, 'charge-handler', a, jsonb_build_object('note', 'a "quoted", comma' || chr(10) || 'line'), ${occurredAt}
       FROM unnest($1::uuid[]) id CROSS JOIN unnest(ARRAY['requested', 'attempt_started', 'outcome_recorded']) a`,
    [ids],
  );
}

describe('migration 015 on a database that already holds a trail', () => {
  let url: string;
  let pool: pg.Pool;

  beforeAll(async () => {
    const name = `part_mig_${Math.random().toString(36).slice(2, 10)}`;
    await createDatabase(inject('pgAdminUrl'), name);
    url = databaseUrl(name);
    const files = await loadMigrations(path.resolve('migrations'));
    await migrate(url, files.filter((f) => f.name < '015'));
    pool = new pg.Pool({ connectionString: url, max: 4 });
    await trail(pool, await insertOperations(pool, 'before-', 200));
    await migrate(url, files);
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
  });

  it('keeps every row, in the first partition, and goes on numbering after them', async () => {
    const { rows } = await pool.query<{ partition: string; n: number; max: string }>(
      `SELECT tableoid::regclass::text AS partition, count(*)::int AS n, max(id)::text AS max FROM payment_operation_events GROUP BY 1`,
    );
    expect(rows).toEqual([{ partition: 'payment_operation_events_before_partitions', n: 600, max: expect.any(String) }]);
    const [op] = await insertOperations(pool, 'after-', 1);
    const { rows: next } = await pool.query<{ id: string }>(`INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'requested') RETURNING id::text`, [op]);
    expect(BigInt(next[0]!.id)).toBeGreaterThan(BigInt(rows[0]!.max));
  });

  it('still refuses what the trail always refused, in old rows and new partitions alike', async () => {
    await expect(pool.query(`UPDATE payment_operation_events SET actor = 'x' WHERE id = (SELECT min(id) FROM payment_operation_events)`)).rejects.toThrow(/append-only/);
    await expect(pool.query(`DELETE FROM payment_operation_events`)).rejects.toThrow(/append-only/);
    const [op] = await insertOperations(pool, 'ahead-', 1);
    await pool.query(`INSERT INTO payment_operation_events (operation_id, actor, action, occurred_at) VALUES ($1, 'test', 'requested', now() + interval '40 days')`, [op]);
    await expect(pool.query(`DELETE FROM payment_operation_events WHERE occurred_at > now() + interval '30 days'`)).rejects.toThrow(/append-only/);
    await expect(pool.query(`INSERT INTO payment_operation_events (operation_id, actor, action) VALUES (uuidv7(), 'test', 'requested')`)).rejects.toThrow(/refers to payment operation .*, which does not exist/);
    await expect(pool.query(`INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'made_up')`, [op])).rejects.toThrow(/payment_operation_events_action_check/);
    await expect(pool.query(`INSERT INTO payment_operation_events (id, operation_id, actor, action) VALUES (1, $1, 'test', 'requested')`, [op])).rejects.toThrow(/cannot insert a non-DEFAULT value into column "id"/);
  });

  it('routes a row of a coming month to that month, made ahead by the migration', async () => {
    const { rows } = await pool.query<{ partition: string }>(
      `SELECT tableoid::regclass::text AS partition FROM payment_operation_events WHERE occurred_at > now() + interval '30 days'`,
    );
    expect(rows).toHaveLength(1);
    expect(rows[0]!.partition).toMatch(/^payment_operation_events_\d{4}_\d{2}$/);
  });

  it('a migration that widens the action list (as 005-012 do) still finds its CHECK by name', async () => {
    const { rows } = await pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_constraint WHERE conrelid = 'payment_operation_events'::regclass AND conname = 'payment_operation_events_action_check'`,
    );
    expect(rows[0]!.n).toBe(1);
  });
});

describe('partitions ahead, and archiving a month', () => {
  let db: TestDatabase;
  let owner: pg.Client;

  beforeAll(async () => {
    db = await createTestDatabase('audit_part');
    owner = new pg.Client({ connectionString: db.url });
    await owner.connect();
  });

  afterAll(async () => {
    await owner?.end();
    await db?.drop();
  });

  it('prepare makes each month once, and leaves a month alone whose rows are already in the default partition', async () => {
    const again = await prepareAuditPartitions(db.pool);
    expect(again).toEqual({ created: [], blocked: [] });
    const [op] = await insertOperations(db.pool, 'far-', 1);
    // Five months ahead: past the two the migration made, so the row goes to the default partition.
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, occurred_at)
       VALUES ($1, 'test', 'requested', date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' + interval '5 months' + interval '3 days')`,
      [op],
    );
    const far = await prepareAuditPartitions(db.pool, 6);
    expect(far.created).toHaveLength(3);
    expect(far.blocked).toEqual([{ partition: expect.stringMatching(/^payment_operation_events_\d{4}_\d{2}$/), defaultRows: 1 }]);
    expect(far.created).not.toContain(far.blocked[0]!.partition);
    const { rows } = await db.pool.query<{ partition: string }>(`SELECT tableoid::regclass::text AS partition FROM payment_operation_events WHERE operation_id = $1`, [op]);
    expect(rows[0]!.partition).toBe('payment_operation_events_default');
    await expect(prepareAuditPartitions(db.pool, 25)).rejects.toThrow(/months_ahead must be 0\.\.24/);
  });

  it('every reconcile run makes a missing month again, and reports a failure to make it instead of failing quietly', async () => {
    const reconcileSettings = { maxRequestsPerSecond: 10, maxSearchesPerSecond: 10, concurrency: 1, pageSize: 5, minTimeToCallMs: 1_000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 };
    const run = () => runReconcile({ db: db.pool, gateway: null, publisher: null, settings: reconcileSettings }, { remainingMs: () => 60_000 });
    // The first month after the first partition: within the two months every run makes.
    const next = (await listAuditPartitions(db.pool)).filter((p) => !p.isDefault && p.from !== null)[0]!;
    await owner.query(`DROP TABLE ${owner.escapeIdentifier(next.name)}`);
    const made = await run();
    expect(made.auditPartitions?.created).toContain(next.name);
    // The function the run calls is gone: the run says so in its errors (the handler then fails the invocation).
    await owner.query('ALTER FUNCTION payment_operation_events_prepare_partitions(integer) RENAME TO prepare_partitions_elsewhere');
    try {
      const failed = await run();
      expect(failed.auditPartitions).toBeNull();
      expect(failed.errors.some((e) => e.startsWith('partitions: '))).toBe(true);
    } finally {
      await owner.query('ALTER FUNCTION prepare_partitions_elsewhere(integer) RENAME TO payment_operation_events_prepare_partitions');
    }
  });

  it('the application role may prepare partitions but not create a table itself', async () => {
    const app = new pg.Client({ connectionString: db.url });
    await app.connect();
    try {
      await app.query('SET ROLE charges_app');
      await expect(prepareAuditPartitions(app, 2)).resolves.toEqual({ created: [], blocked: [] });
      await expect(app.query('CREATE TABLE not_allowed (x int)')).rejects.toThrow(/permission denied/);
    } finally {
      await app.end();
    }
  });

  it('archives a month only when none of its operations is still needed, and writes exactly its rows', async () => {
    const settled = await insertOperations(db.pool, 'old-', 50);
    await trail(db.pool, settled);
    // A claim's line as written since migration 023: its lease in columns, which the export puts back in detail.
    const leaseToken = randomUUID();
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, lease_token, lease_until, detail)
       VALUES ($1, 'charge-handler', 'attempt_started', $2, '2026-01-02T03:04:05.678Z', '{"attempt": 1}')`,
      [settled[0], leaseToken],
    );
    const open = await insertOperations(db.pool, 'open-', 1, 'pending');
    await trail(db.pool, open);
    const outDir = await mkdtemp(path.join(os.tmpdir(), 'audit-archive-'));
    // Three years from now, every month the test database has is over, and the settled operations
    // are far outside a 365-day refund window.
    const later = Date.now() + 3 * 365 * DAY;
    const first = (await listAuditPartitions(db.pool))[0]!;
    expect(first.name).toBe('payment_operation_events_before_partitions');
    const before = new Date(first.to!.getTime());
    const options = { before, refundWindowDays: 365, outDir, now: () => later };

    // An open operation keeps its month, whatever its age.
    const kept = await archiveAuditPartitions(owner, options);
    expect(kept).toEqual([{ partition: first.name, verdict: 'kept', reason: expect.stringMatching(/^1 of its operations are open, in review, or settled after/) }]);
    // Settled within the window (the clock only a year on): kept as well.
    await db.pool.query(`UPDATE payment_operations SET status = 'failed', settled_at = now(), next_attempt_at = NULL, last_error = 'card_declined' WHERE id = $1`, [open[0]]);
    const recent = await archiveAuditPartitions(owner, { ...options, now: () => Date.now() + 100 * DAY });
    expect(recent[0]).toMatchObject({ verdict: 'kept' });
    expect(await archiveAuditPartitions(owner, { ...options, dryRun: true })).toEqual([{ partition: first.name, verdict: 'would_archive', rows: expect.any(Number) }]);

    const rowsBefore = (await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM ONLY payment_operation_events_before_partitions`)).rows[0]!.n;
    const archived = await archiveAuditPartitions(owner, { ...options, drop: true });
    expect(archived).toEqual([{ partition: first.name, verdict: 'archived', file: path.join(outDir, `${first.name}.csv`), rows: rowsBefore, sha256: expect.stringMatching(/^[0-9a-f]{64}$/), dropped: true }]);
    const csv = await readFile(path.join(outDir, `${first.name}.csv`), 'utf8');
    const manifest = JSON.parse(await readFile(path.join(outDir, `${first.name}.manifest.json`), 'utf8')) as { rows: number; sha256: string };
    expect(manifest.rows).toBe(rowsBefore);
    expect(manifest.sha256).toBe(createHash('sha256').update(csv).digest('hex'));
    // A field with a quote, a comma and a line break survives as one quoted field.
    expect(csv).toContain(csvField('{"note": "a \\"quoted\\", comma\\nline"}'));
    expect(csv).toContain(csvField(`{"attempt": 1, "leaseToken": "${leaseToken}", "leaseUntil": "2026-01-02T03:04:05.678+00:00"}`));
    // Gone from the trail and from the database; the rest of the trail is untouched and still written.
    expect((await listAuditPartitions(db.pool)).map((p) => p.name)).not.toContain(first.name);
    expect((await db.pool.query(`SELECT to_regclass('payment_operation_events_before_partitions') AS t`)).rows[0].t).toBeNull();
    const [op] = await insertOperations(db.pool, 'after-archive-', 1);
    await trail(db.pool, [op!]);
    expect((await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM payment_operation_events WHERE operation_id = $1`, [op])).rows[0]!.n).toBe(3);
  });

  it('refuses a bound in the future and bad arguments, saying what to change', async () => {
    await expect(archiveAuditPartitions(owner, { before: new Date(Date.now() + DAY), refundWindowDays: 30, outDir: os.tmpdir() })).rejects.toThrow(/in the future/);
    expect(() => parseArchiveArgs(['--before', '2026-13', '--refund-window-days', '30'])).toThrow(/--before must be a month as YYYY-MM/);
    expect(() => parseArchiveArgs(['--before', '2026-01'])).toThrow(/--refund-window-days must be a whole number/);
    expect(parseArchiveArgs(['--before', '2026-01', '--refund-window-days', '365', '--drop'])).toMatchObject({ before: new Date('2026-01-01T00:00:00Z'), refundWindowDays: 365, drop: true, dryRun: false });
  });
});
