// npm run bench:scale [-- --settled 10000000 --open 1000 --review 100 --rounds 3 --json]
//
// What the pipeline's periodic and operator reads cost with a long history, against the same reads on
// an empty history: the reconcile sweep, `ops review list`, `ops stats` and the retention run, on one
// database holding --settled settled operations (each with its three audit rows, its published outbox
// event and an applied Stripe event, as a charge leaves them) and one holding none, both with the same
// --open due operations and --review operations in review. The history is two days old: inside every
// retention bound, so the retention run finds nothing due and its cost is that of finding so. Rounds alternate between the two, so a
// drift of the machine hits both alike. For every statement a command runs: the median time and the
// shared buffers its plan touched (EXPLAIN (ANALYZE, BUFFERS)) — the buffers say O(open) or O(all)
// whatever the machine's speed. Figures, not assertions. Real PostgreSQL 18 (embedded), the fake
// Stripe in its own process.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import { runReconcile, type ReconcileSettings } from '../lambdas/reconcile/sweep.ts';
import { listReviewQueue } from '../lambdas/payments/review.ts';
import { loadStats } from '../lambdas/ops/queries.ts';
import { RETENTION_DEFAULTS, runRetention } from '../lambdas/payments/retention-store.ts';
import { countingDb, type CountedStatement, type Db } from '../lambdas/payments/db.ts';
import { startStripeProcess } from './bench-support.ts';

const { values: args } = parseArgs({
  options: {
    settled: { type: 'string', default: '1000000' },
    open: { type: 'string', default: '1000' },
    review: { type: 'string', default: '100' },
    rounds: { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
  },
});
const SETTLED = Number(args.settled);
const OPEN = Number(args.open);
const REVIEW = Number(args.review);
const ROUNDS = Number(args.rounds);
for (const [name, v, min] of [['settled', SETTLED, 0], ['open', OPEN, 1], ['review', REVIEW, 1], ['rounds', ROUNDS, 1]] as const) {
  if (!Number.isInteger(v) || v < min) throw new Error(`--${name} must be an integer ≥ ${min}, got ${args[name]}`);
}
const root = path.resolve(import.meta.dirname, '..');
const say = (line = '') => process.stderr.write(`${line}\n`);

/** Shared buffers a statement's plan touched, read in a transaction that is rolled back (a claim changes nothing). */
async function buffersOf(pool: pg.Pool, statement: CountedStatement): Promise<number> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const { rows } = await client.query<{ 'QUERY PLAN': { Plan: Record<string, number> }[] }>(`EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) ${statement.text}`, [...statement.values]);
    const plan = rows[0]!['QUERY PLAN'][0]!.Plan;
    return (plan['Shared Hit Blocks'] ?? 0) + (plan['Shared Read Blocks'] ?? 0);
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/**
 * History as charges leave it: final operations, three audit rows each, a published event, an applied
 * Stripe event — all four made by ONE set-based statement per chunk (INSERT … SELECT generate_series,
 * each table's rows from the operations the same statement inserted). Every row references an
 * operation of its own statement, so the references hold by construction: their checks (the Stripe
 * event's foreign key, a row lock and an index probe per row; the audit trail's and the outbox's
 * check by query per statement, migration 024) are set aside for this session's load
 * (session_replication_role = replica, which fires no trigger: no other insert trigger applies to
 * these rows — the refund and refund-failure ones are conditional on other kinds), and checked once
 * afterwards, set-based. The audit lines are as a charge writes them since migration 023 (the claim's
 * lease in lease_token / lease_until, not in detail).
 */
async function loadHistory(pool: pg.Pool, settled: number): Promise<void> {
  const chunk = 500_000;
  const client = await pool.connect();
  try {
    await client.query('SET session_replication_role = replica');
    for (let from = 1; from <= settled; from += chunk) {
      const to = Math.min(settled, from + chunk - 1);
      const t = performance.now();
      await client.query(
        `WITH ops AS (
           INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id,
                                           attempts, first_attempted_at, next_attempt_at, created_at, updated_at, settled_at, event_sequence)
           SELECT 'settled-' || g, 1000 + g % 5000, 'eur', 'cus_scale', 'pm_card_visa', CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
                  'pi_settled_' || g, 1, now() - interval '2 days', NULL, now() - interval '2 days', now() - interval '2 days', now() - interval '2 days', 1
             FROM generate_series($1::int, $2::int) AS g
           RETURNING id, status, external_id, order_id, amount),
         trail AS (
           INSERT INTO payment_operation_events (operation_id, occurred_at, actor, action, from_status, to_status, external_id, key_generation,
                                                 lease_token, lease_until, detail)
           SELECT o.id, now() - interval '2 days', 'charge-handler', a.action, a.from_status, coalesce(a.to_status, o.status),
                  CASE WHEN a.action = 'outcome_recorded' THEN o.external_id END, 0,
                  CASE WHEN a.action <> 'requested' THEN o.token END,
                  CASE WHEN a.action = 'attempt_started' THEN now() - interval '2 days' + interval '17 seconds' END,
                  CASE WHEN a.action = 'attempt_started' THEN '{"attempt": 1}'::jsonb
                       WHEN a.action = 'outcome_recorded' THEN jsonb_build_object('paymentIntentStatus', CASE WHEN o.status = 'succeeded' THEN 'succeeded' ELSE 'requires_payment_method' END) ELSE '{}'::jsonb END
             FROM (SELECT ops.*, gen_random_uuid() AS token FROM ops) o CROSS JOIN (VALUES ('requested', NULL, 'pending'), ('attempt_started', 'pending', 'pending'), ('outcome_recorded', 'pending', NULL)) AS a(action, from_status, to_status)),
         outbox AS (
           INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at, published_at, attempts)
           SELECT o.eid, o.id, CASE WHEN o.status = 'succeeded' THEN 'Charge Succeeded' ELSE 'Charge Failed' END,
                  jsonb_build_object('version', 1, 'eventId', o.eid, 'operationId', o.id, 'orderId', o.order_id, 'status', o.status,
                                     'amount', o.amount, 'currency', 'eur', 'externalId', o.external_id, 'sequence', 1),
                  now() - interval '2 days', now() - interval '2 days', 1
             FROM (SELECT ops.*, uuidv7() AS eid FROM ops) o)
         INSERT INTO stripe_events (event_id, event_type, stripe_created_at, object_id, source, received_at, payload, applied_at, outcome, operation_id)
         SELECT 'evt_' || o.external_id, 'payment_intent.succeeded', now() - interval '2 days', o.external_id, 'webhook', now() - interval '2 days',
                '{}'::jsonb, now() - interval '2 days', 'settled', o.id
           FROM ops o`,
        [from, to],
      );
      say(`  loaded ${to.toLocaleString('en')} of ${settled.toLocaleString('en')} settled charges (${((performance.now() - t) / 1000).toFixed(1)} s)`);
    }
  } finally {
    await client.query('RESET session_replication_role').catch(() => {});
    client.release();
  }
  // The references the load did not check, checked once: no row names a missing operation.
  const { rows } = await pool.query<{ trail: number; outbox: number; inbox: number }>(
    `SELECT (SELECT count(*)::int FROM payment_operation_events e WHERE NOT EXISTS (SELECT 1 FROM payment_operations p WHERE p.id = e.operation_id)) AS trail,
            (SELECT count(*)::int FROM outcome_events e WHERE NOT EXISTS (SELECT 1 FROM payment_operations p WHERE p.id = e.operation_id)) AS outbox,
            (SELECT count(*)::int FROM stripe_events e WHERE e.operation_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM payment_operations p WHERE p.id = e.operation_id)) AS inbox`,
  );
  if (rows[0]!.trail + rows[0]!.outbox + rows[0]!.inbox !== 0) throw new Error(`history rows naming no operation: ${JSON.stringify(rows[0])}`);
}

async function addWork(pool: pg.Pool, tag: string): Promise<void> {
  await pool.query(
    `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, next_attempt_at, created_at)
     SELECT 'open-' || $2::text || '-' || g, 1999, 'eur', 'cus_scale', 'pm_card_visa', now() - interval '1 second', now() - interval '1 minute'
       FROM generate_series(1, $1::int) AS g`,
    [OPEN, tag],
  );
}

async function main() {
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-scale-pg-${process.pid}`) });
  const stripe = await startStripeProcess(0);
  const pools: Record<'big' | 'empty', pg.Pool> = {} as never;
  try {
    const migrations = await loadMigrations(path.join(root, 'migrations'));
    for (const name of ['big', 'empty'] as const) {
      await createDatabase(server.adminUrl, `scale_${name}`);
      const url = server.urlFor(`scale_${name}`);
      await migrate(url, migrations);
      pools[name] = new pg.Pool({ connectionString: url, max: 4 });
      const t = performance.now();
      if (name === 'big' && SETTLED > 0) await loadHistory(pools[name], SETTLED);
      // The same review queue in both: operations a person must decide.
      await pools[name].query(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, review_reason, next_attempt_at, created_at, updated_at)
         SELECT 'review-' || g, 1999, 'eur', 'cus_scale', 'pm_card_visa', 'unknown', 'search_inconclusive', NULL, now() - interval '2 hours', now() - interval '1 hour'
           FROM generate_series(1, $1::int) AS g`,
        [REVIEW],
      );
      const v = performance.now();
      await pools[name].query('VACUUM ANALYZE');
      if (name === 'big') say(`  VACUUM ANALYZE: ${((performance.now() - v) / 1000).toFixed(1)} s`);
      say(`${name}: ready in ${((performance.now() - t) / 1000).toFixed(1)} s`);
    }
    const gateway = new StripeGateway(createStripeClient({ apiKey: 'sk_test_bench', apiBase: stripe.url, timeoutMs: 10_000, maxNetworkRetries: 1 }));
    const settings: ReconcileSettings = { maxRequestsPerSecond: 1e6, maxSearchesPerSecond: 1e6, concurrency: 8, pageSize: 50, minTimeToCallMs: 1_000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 };

    type Command = 'sweep' | 'review list' | 'stats' | 'retention';
    const commands: Record<Command, (db: Db, name: 'big' | 'empty') => Promise<unknown>> = {
      sweep: async (db, name) => {
        await addWork(pools[name], randomUUID());
        await pools[name].query('ANALYZE payment_operations');
        const summary = await runReconcile({ db, gateway, publisher: null, settings }, { remainingMs: () => 600_000 });
        if (summary.claimed !== OPEN || summary.stoppedBecause !== 'drained') throw new Error(`sweep ${name}: ${JSON.stringify(summary)}`);
      },
      'review list': (db) => listReviewQueue(db, { limit: 50 }),
      stats: (db) => loadStats(db),
      retention: (db) => runRetention(db, RETENTION_DEFAULTS, () => new Date()),
    };
    const times: Record<string, number[]> = {};
    const recorded: Record<string, CountedStatement[]> = {};
    for (let round = 0; round < ROUNDS; round++) {
      for (const name of round % 2 === 0 ? (['big', 'empty'] as const) : (['empty', 'big'] as const)) {
        for (const [command, run] of Object.entries(commands) as [Command, (typeof commands)[Command]][]) {
          const statements: CountedStatement[] = [];
          const db = countingDb(pools[name], (statement) => statements.push(statement));
          const t = performance.now();
          await run(db, name);
          (times[`${command}|${name}`] ??= []).push(performance.now() - t);
          recorded[`${command}|${name}`] = statements;
        }
      }
    }
    // Buffers per statement of the last round's run (a sweep's claims: after its work was done, nothing due).
    const report: { command: string; ms: { big: number; empty: number }; buffers: { big: number[]; empty: number[] }; statements: string[] }[] = [];
    for (const command of Object.keys(commands) as Command[]) {
      const buffers = { big: [] as number[], empty: [] as number[] };
      const statements: string[] = [];
      for (const name of ['big', 'empty'] as const) {
        const seen = new Set<string>();
        for (const statement of recorded[`${command}|${name}`]!) {
          if (seen.has(statement.text)) continue;
          seen.add(statement.text);
          if (name === 'big') statements.push(statement.text.replace(/\s+/g, ' ').trim().slice(0, 90));
          buffers[name].push(await buffersOf(pools[name], statement).catch(() => Number.NaN));
        }
      }
      report.push({ command, ms: { big: median(times[`${command}|big`]!), empty: median(times[`${command}|empty`]!) }, buffers, statements });
    }
    const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + (Number.isNaN(b) ? 0 : b), 0);
    if (args.json) {
      console.log(JSON.stringify({ settled: SETTLED, open: OPEN, review: REVIEW, rounds: ROUNDS, report }, null, 2));
    } else {
      console.log(`bench:scale — ${SETTLED.toLocaleString('en')} settled charges (each with 3 audit rows and a published event) against none; ${OPEN} due, ${REVIEW} in review in both; median of ${ROUNDS} alternating rounds; ${os.cpus().length} CPUs, PostgreSQL 18 (embedded)`);
      console.log('');
      console.log('| command | ms, with history | ms, empty | ratio | shared buffers, with history | shared buffers, empty |');
      console.log('|---|---:|---:|---:|---:|---:|');
      for (const r of report) {
        console.log(`| ${r.command} | ${r.ms.big.toFixed(1)} | ${r.ms.empty.toFixed(1)} | ${(r.ms.big / r.ms.empty).toFixed(2)} | ${sum(r.buffers.big)} | ${sum(r.buffers.empty)} |`);
      }
      console.log('');
      console.log('Per statement (shared buffers with history / empty), the first 90 characters of each:');
      for (const r of report) {
        r.statements.forEach((text, i) => console.log(`  ${r.command}: ${r.buffers.big[i]} / ${r.buffers.empty[i] ?? '–'}  ${text}`));
      }
    }
  } finally {
    for (const pool of Object.values(pools)) await pool?.end();
    await stripe.stop();
    await server.stop();
  }
}

await main();
