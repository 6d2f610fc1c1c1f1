// npm run bench:batch — figures, not assertions (docs/proofs.md).
//   1. A batch of 10 distinct orders through the exported charge handler with the fake Stripe answering
//      after L = 200 ms: wall time (target ≤ 1.3 × L) beside a one-at-a-time baseline measured in the
//      same run (≈ 10 × L), and database round trips per batch (target ≤ 3, events published included).
//   2. The reconcile sweep over 1,000 open operations with 1,000,000 settled ones in the table, against
//      the same sweep with none (target ratio ≤ 1.5), and the plan of the real claim statement.
//   3. Each handler bundled by esbuild as lib/pipeline-function.ts bundles it: size, and the time to
//      import it in a fresh Node process.
// Real PostgreSQL 18 (embedded), the real stripe SDK over HTTP, the real EventBridge client against the
// fake PutEvents endpoint, on this machine. Options: --settled N (default 1000000), --open N (1000),
// --latency ms (200), --rounds N (5), --skip-sweep, --skip-bundles, --json.
import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { parseArgs, promisify } from 'node:util';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { build } from 'esbuild';
import pg from 'pg';
import { processChargeBatch } from '../lambdas/charge/batch.ts';
import { EventBridgePublisher } from '../lambdas/events/outbox.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import { collectGauges } from '../lambdas/reconcile/gauges.ts';
import { runReconcile, type ReconcileSettings } from '../lambdas/reconcile/sweep.ts';
import { claimDue } from '../lambdas/payments/operations-store.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { startFakeEventBridge } from '../local/fake-eventbridge/server.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { sqsRecord, startStripeProcess } from './bench-support.ts';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';

const { values: args } = parseArgs({
  options: {
    settled: { type: 'string', default: '1000000' },
    open: { type: 'string', default: '1000' },
    latency: { type: 'string', default: '200' },
    rounds: { type: 'string', default: '5' },
    'skip-sweep': { type: 'boolean', default: false },
    'skip-bundles': { type: 'boolean', default: false },
    json: { type: 'boolean', default: false },
  },
});
const SETTLED = Number(args.settled);
const OPEN = Number(args.open);
const LATENCY = Number(args.latency);
const ROUNDS = Number(args.rounds);
const run = promisify(execFile);
const root = path.resolve(import.meta.dirname, '..');

const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const ms = (x: number) => `${x.toFixed(0)} ms`;
const out: Record<string, unknown> = {};
const say = (line = '') => {
  if (!args.json) console.log(line);
};

const record = sqsRecord;
const orders = (n: number) =>
  Array.from({ length: n }, () => {
    const orderId = `bench-${randomUUID()}`;
    return record({ orderId, amount: 1999, currency: 'eur', customerId: 'cus_bench', paymentMethod: 'pm_card_visa' }, orderId);
  });
function context(remainingMs = 60_000): Context {
  const deadline = Date.now() + remainingMs;
  return { functionName: 'charge', awsRequestId: randomUUID(), getRemainingTimeInMillis: () => deadline - Date.now() } as unknown as Context;
}

async function main() {
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'bench-batch-'));
  // Not inside the mkdtemp folder: that one is 0700 and the server runs as the postgres user.
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-batch-pg-${process.pid}`) });
  const stripe = await startStripeProcess(LATENCY);
  let sweepStripe: Awaited<ReturnType<typeof startStripeProcess>> | undefined;
  const bus = await startFakeEventBridge();
  try {
    await createDatabase(server.adminUrl, 'batch');
    const url = server.urlFor('batch');
    await migrate(url, await loadMigrations(path.join(root, 'migrations')));

    // ── 1. The charge batch ────────────────────────────────────────────────────────────────────────
    Object.assign(process.env, {
      DATABASE_URL: url,
      STRIPE_API_BASE: stripe.url,
      STRIPE_SECRET_KEY: 'sk_test_bench',
      EVENT_BUS_NAME: 'charge-outcomes',
      EVENTS_ENDPOINT: bus.url,
      POWERTOOLS_LOG_LEVEL: 'SILENT',
      POWERTOOLS_METRICS_DISABLED: 'true',
    });
    const { handler } = await import('../lambdas/charge/handler.ts');
    const invoke = (event: SQSEvent) => (handler as unknown as (e: SQSEvent, c: Context) => Promise<SQSBatchResponse>)(event, context());
    // Warm the container: pool connections, SDK clients, prepared statements, JIT.
    for (let i = 0; i < 3; i++) {
      await invoke({ Records: orders(10) });
      await invoke({ Records: orders(1) });
    }

    const batchTimes: number[] = [];
    const singleTimes: number[] = [];
    for (let round = 0; round < ROUNDS; round++) {
      let t = performance.now();
      const response = await invoke({ Records: orders(10) });
      batchTimes.push(performance.now() - t);
      if (response.batchItemFailures.length > 0) throw new Error('the batch reported failures');
      const ten = orders(10);
      t = performance.now();
      for (const r of ten) await invoke({ Records: [r] }); // one message per invocation, one after the other
      singleTimes.push(performance.now() - t);
    }
    // Round trips: the same batch function, its Db counted (the handler's own pool is private).
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    const counted = countingDb(pool);
    const gateway = new StripeGateway(createStripeClient({ apiKey: 'sk_test_bench', apiBase: stripe.url, timeoutMs: 10_000, maxNetworkRetries: 1 }));
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const deps = { db: counted, gateway, concurrency: 10, minTimeToCallMs: 39_000 };
    await processChargeBatch(orders(10), { ...deps, publisher }, { remainingMs: () => 60_000 }); // warm the prepared statements
    counted.reset();
    const counts = await processChargeBatch(orders(10), { ...deps, publisher }, { remainingMs: () => 60_000 });
    const tripsWithEvents = counted.roundTrips;
    counted.reset();
    await processChargeBatch(orders(10), { ...deps, publisher: null }, { remainingMs: () => 60_000 });
    const tripsWithoutEvents = counted.roundTrips;
    counted.reset();
    await processChargeBatch([...orders(9), record({ orderId: 1 }, 'poison')], { ...deps, publisher }, { remainingMs: () => 60_000 });
    const tripsWithReject = counted.roundTrips;
    await pool.end();
    if (counts.counts.succeeded !== 10 || counts.counts.eventsPublished !== 10) throw new Error(`unexpected batch result ${JSON.stringify(counts.counts)}`);

    const batch = median(batchTimes);
    const single = median(singleTimes);
    out.batch = { latencyMs: LATENCY, batchMs: Math.round(batch), oneAtATimeMs: Math.round(single), batchOverLatency: +(batch / LATENCY).toFixed(2), speedup: +(single / batch).toFixed(1), roundTrips: { withEvents: tripsWithEvents, withoutEvents: tripsWithoutEvents, withOneReject: tripsWithReject }, rounds: ROUNDS };
    say(`1. Charge batch, fake Stripe latency L = ${LATENCY} ms (median of ${ROUNDS}, warm container)`);
    say(`   10 distinct orders, one invocation:     ${ms(batch)}  = ${(batch / LATENCY).toFixed(2)} × L   (target ≤ 1.3 × L)`);
    say(`   the same, one message per invocation:   ${ms(single)}  = ${(single / LATENCY).toFixed(2)} × L   (baseline ≈ 10 × L; ${(single / batch).toFixed(1)}× slower)`);
    say(`   database round trips per batch:         ${tripsWithEvents} with events published (request+claim, outcomes+audit+outbox, mark published)`);
    say(`                                           ${tripsWithoutEvents} without an event bus; ${tripsWithReject} when the batch holds a rejected body   (target ≤ 3)`);
    say();

    // ── 2. The reconcile sweep: O(open), not O(all) ─────────────────────────────────────────────────
    if (!args['skip-sweep']) {
      sweepStripe = await startStripeProcess(0);
      const sweepGateway = new StripeGateway(createStripeClient({ apiKey: 'sk_test_bench', apiBase: sweepStripe.url, timeoutMs: 10_000, maxNetworkRetries: 1 }));
      const settings: ReconcileSettings = { maxRequestsPerSecond: 1e6, maxSearchesPerSecond: 1e6, concurrency: 8, pageSize: 50, minTimeToCallMs: 1_000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 };
      const dbs = { big: SETTLED, empty: 0 } as const;
      const pools: Record<string, pg.Pool> = {};
      const loadMs: Record<string, number> = {};
      for (const [name, settled] of Object.entries(dbs)) {
        await createDatabase(server.adminUrl, `sweep_${name}`);
        const sweepUrl = server.urlFor(`sweep_${name}`);
        await migrate(sweepUrl, await loadMigrations(path.join(root, 'migrations')));
        const sweepPool = new pg.Pool({ connectionString: sweepUrl, max: 4 });
        pools[name] = sweepPool;
        const t = performance.now();
        if (settled > 0) {
          // Settled history as the store leaves it (final, no lease, nothing scheduled), in one
          // INSERT … SELECT: the guard trigger fires on UPDATE / DELETE only.
          await sweepPool.query(
            `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id,
                                             attempts, first_attempted_at, next_attempt_at, created_at, updated_at, settled_at)
             SELECT 'settled-' || g, 1000 + g % 5000, 'eur', 'cus_bench', 'pm_card_visa', CASE WHEN g % 10 = 0 THEN 'failed' ELSE 'succeeded' END,
                    'pi_settled_' || g, 1, now() - (g % 43200) * interval '1 minute', NULL,
                    now() - (g % 43200) * interval '1 minute', now(), now() - (g % 43200) * interval '1 minute'
               FROM generate_series(1, $1::int) AS g`,
            [settled],
          );
        }
        await sweepPool.query('VACUUM ANALYZE payment_operations');
        loadMs[name] = Math.round(performance.now() - t);
      }
      const results: Record<string, { sweepMs: number[]; claimMs: number[]; gaugesMs: number[]; roundTrips: number[] }> = {
        big: { sweepMs: [], claimMs: [], gaugesMs: [], roundTrips: [] },
        empty: { sweepMs: [], claimMs: [], gaugesMs: [], roundTrips: [] },
      };
      // Rounds alternate between the two databases, so that a drift of the machine hits both alike.
      for (let round = 0; round < 3; round++) {
        for (const name of round % 2 === 0 ? ['big', 'empty'] : ['empty', 'big']) {
          const sweepPool = pools[name]!;
          const r = results[name]!;
          await sweepPool.query(
            `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, next_attempt_at, created_at)
             SELECT 'open-' || $2::text || '-' || g, 1999, 'eur', 'cus_bench', 'pm_card_visa', now() - interval '1 second', now() - interval '1 minute'
               FROM generate_series(1, $1::int) AS g`,
            [OPEN, randomUUID()],
          );
          await sweepPool.query('ANALYZE payment_operations');
          const counting = countingDb(sweepPool);
          const start = performance.now();
          const summary = await runReconcile({ db: counting, gateway: sweepGateway, publisher: null, settings }, { remainingMs: () => 600_000 });
          r.sweepMs.push(performance.now() - start);
          r.roundTrips.push(counting.roundTrips);
          if (summary.claimed !== OPEN || summary.stoppedBecause !== 'drained') throw new Error(`sweep ${name}: ${JSON.stringify(summary)}`);
          // The real claim statement alone, with nothing due: the scan every page starts with.
          const client = await sweepPool.connect();
          try {
            await claimDue(client, 50, randomUUID(), 60_000, 'bench'); // prepared on this connection
            const c0 = performance.now();
            for (let i = 0; i < 20; i++) await claimDue(client, 50, randomUUID(), 60_000, 'bench');
            r.claimMs.push((performance.now() - c0) / 20);
          } finally {
            client.release();
          }
          const g0 = performance.now();
          await collectGauges(sweepPool, 300);
          r.gaugesMs.push(performance.now() - g0);
        }
      }
      // The plan of the REAL claim statement: prepared on one connection under the store's name by
      // running it once, then EXPLAIN EXECUTE of that prepared statement.
      let plan = '';
      let gaugePlan = '';
      const client = await pools.big!.connect();
      try {
        await claimDue(client, 50, randomUUID(), 60_000, 'bench');
        plan = (await client.query(`EXPLAIN EXECUTE "payments.claim_due"(50, '${randomUUID()}', 60000, 'bench')`)).rows.map((r) => r['QUERY PLAN'] as string).join('\n');
        gaugePlan = (
          await client.query(
            `EXPLAIN SELECT count(*) FILTER (WHERE status = 'pending' AND review_reason IS NULL), min(created_at) FROM payment_operations WHERE status IN ('pending', 'unknown')`,
          )
        ).rows.map((r) => r['QUERY PLAN'] as string).join('\n');
      } finally {
        client.release();
      }
      for (const pool of Object.values(pools)) await pool.end();

      const big = median(results.big!.sweepMs);
      const empty = median(results.empty!.sweepMs);
      out.sweep = {
        settled: SETTLED,
        open: OPEN,
        loadMs,
        sweepMs: { withSettled: Math.round(big), withoutSettled: Math.round(empty), all: results },
        ratio: +(big / empty).toFixed(2),
        roundTripsPerSweep: { withSettled: median(results.big!.roundTrips), withoutSettled: median(results.empty!.roundTrips) },
        claimStatementMs: { withSettled: +median(results.big!.claimMs).toFixed(3), withoutSettled: +median(results.empty!.claimMs).toFixed(3) },
        gaugesMs: { withSettled: +median(results.big!.gaugesMs).toFixed(1), withoutSettled: +median(results.empty!.gaugesMs).toFixed(1) },
        claimPlan: plan,
        gaugePlan,
      };
      say(`2. Reconcile sweep of ${OPEN} open operations (fake Stripe latency 0, rate cap off, concurrency 8, pages of 50; median of 3, alternating)`);
      say(`   with ${SETTLED.toLocaleString('en')} settled rows:  ${ms(big)}   (${median(results.big!.roundTrips)} round trips)`);
      say(`   with 0 settled rows:  ${' '.repeat(Math.max(0, SETTLED.toLocaleString('en').length - 1))}${ms(empty)}   (${median(results.empty!.roundTrips)} round trips)   ratio ${(big / empty).toFixed(2)}   (target ≤ 1.5)`);
      say(`   claim statement, nothing due: ${median(results.big!.claimMs).toFixed(3)} ms vs ${median(results.empty!.claimMs).toFixed(3)} ms;  gauges (3 queries): ${median(results.big!.gaugesMs).toFixed(1)} ms vs ${median(results.empty!.gaugesMs).toFixed(1)} ms`);
      say(`   (loading ${SETTLED.toLocaleString('en')} settled rows + VACUUM ANALYZE: ${(loadMs.big! / 1000).toFixed(1)} s)`);
      say(`   plan of the claim statement (EXPLAIN EXECUTE "payments.claim_due", ${SETTLED.toLocaleString('en')} settled rows):`);
      for (const line of plan.split('\n')) say(`     ${line}`);
      say('   plan of the open-operations gauge:');
      for (const line of gaugePlan.split('\n')) say(`     ${line}`);
      say();
    }

    // ── 3. Bundles, as lib/pipeline-function.ts builds them ────────────────────────────────────────
    if (!args['skip-bundles']) {
      const bundles: Record<string, unknown> = {};
      say('3. Handlers bundled by esbuild like the CDK stack (ESM, node24, minified, external source map, only pg-native external)');
      for (const name of ['charge', 'reconcile', 'migrate'] as const) {
        const outdir = path.join(dataDir, `bundle-${name}`);
        const outfile = path.join(outdir, 'index.mjs');
        const t = performance.now();
        await build({
          entryPoints: [path.join(root, 'lambdas', name, 'handler.ts')],
          bundle: true,
          platform: 'node',
          target: 'node24',
          format: 'esm',
          mainFields: ['module', 'main'],
          banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
          minify: true,
          sourcemap: true,
          sourcesContent: false,
          external: ['pg-native'],
          outfile,
          logLevel: 'warning',
        });
        const buildMs = performance.now() - t;
        const size = (await stat(outfile)).size;
        const mapSize = (await stat(`${outfile}.map`)).size;
        const imports: number[] = [];
        const processes: number[] = [];
        for (let i = 0; i < 5; i++) {
          const p0 = performance.now();
          const { stdout } = await run(process.execPath, ['--enable-source-maps', '--input-type=module', '-e', `const t = performance.now(); await import(${JSON.stringify(outfile)}); console.log(performance.now() - t);`], {
            env: { PATH: process.env.PATH, POWERTOOLS_LOG_LEVEL: 'SILENT' },
          });
          processes.push(performance.now() - p0);
          imports.push(Number(stdout.trim()));
        }
        bundles[name] = { bytes: size, mapBytes: mapSize, buildMs: Math.round(buildMs), importMs: +median(imports).toFixed(1), processMs: Math.round(median(processes)) };
        say(`   ${name.padEnd(9)} ${(size / 1024).toFixed(0).padStart(5)} KiB (+ ${(mapSize / 1024).toFixed(0)} KiB map)   import ${median(imports).toFixed(0).padStart(4)} ms in a fresh node (whole process ${median(processes).toFixed(0)} ms; median of 5)`);
      }
      out.bundles = bundles;
      say(`   (node ${process.version}, ${os.cpus()[0]?.model ?? 'cpu'} × ${os.cpus().length}, ${process.arch}; Lambda runs ARM64)`);
    }

    const { resetResources } = await import('../lambdas/runtime/resources.ts');
    await resetResources();
  } finally {
    await bus.close();
    await stripe.stop();
    await sweepStripe?.stop();
    await server.stop();
    await rm(dataDir, { recursive: true, force: true });
  }
  if (args.json) console.log(JSON.stringify(out, null, 2));
}

await main();
