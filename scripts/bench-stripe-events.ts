// npm run bench:stripe-events — Stripe events in, in figures (printed, never asserted):
//   1. the webhook handler's bundle (esbuild, as the stack bundles it) and its cold import time in a
//      fresh Node process (median of 5);
//   2. inbox insert: database round trips per event (target 1) and its latency;
//   3. time from Stripe settling a `processing` PaymentIntent to the operation's final state, with
//      webhooks (the fake Stripe's signed deliveries → the endpoint → inline apply) vs polling only
//      (the reconciler's retrieve on the engine's backoff: 30 s doubling to 1 h), both on a
//      time-lapse clock (every retry delay and the reconcile period × SCALE), reported in real time.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { gzipSync } from 'node:zlib';
import { parseArgs } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { build } from 'esbuild';
import pg from 'pg';
import { countingDb } from '../lambdas/payments/db.ts';
import { DEFAULT_POLICY, type EnginePolicy } from '../lambdas/payments/decisions.ts';
import { ChargeEngine } from '../lambdas/payments/engine.ts';
import { StripeEventApplier } from '../lambdas/payments/event-applier.ts';
import { stripeGatewayFor } from '../lambdas/payments/stripe-gateway.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { receiveWebhook } from '../lambdas/stripe-events/receive.ts';
import { startFakeStripe } from '../local/fake-stripe/server.ts';
import { makeStripeEvent, signStripePayload, WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { mulberry32 } from '../local/random.ts';

const { values: args } = parseArgs({
  options: {
    operations: { type: 'string', default: '60' },
    inserts: { type: 'string', default: '500' },
    scale: { type: 'string', default: String(1 / 120) },
    json: { type: 'boolean', default: false },
  },
});
const OPS = Number(args.operations);
const INSERTS = Number(args.inserts);
const SCALE = Number(args.scale);
const SECRET = 'whsec_bench_0123456789abcdef';
const ROOT = path.resolve(import.meta.dirname, '..');

const pct = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;

// ── 1. Bundle and cold import ────────────────────────────────────────────────────────────────────

async function bundle(entry: string) {
  const outdir = mkdtempSync(path.join(os.tmpdir(), 'bench-bundle-'));
  const outfile = path.join(outdir, 'index.mjs');
  // The options of lib/pipeline-function.ts (esbuild via NodejsFunction), minus the source map.
  await build({
    entryPoints: [path.join(ROOT, entry)],
    outfile,
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    mainFields: ['module', 'main'],
    minify: true,
    external: ['pg-native'],
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    logLevel: 'error',
  });
  const bytes = statSync(outfile).size;
  const gzip = gzipSync(readFileSync(outfile)).byteLength;
  const imports: number[] = [];
  for (let i = 0; i < 5; i++) {
    const script = `const t = performance.now(); await import(${JSON.stringify(pathToFileURL(outfile).href)}); process.stdout.write(String(performance.now() - t));`;
    const out = execFileSync(process.execPath, ['--input-type=module', '-e', script], {
      cwd: os.tmpdir(),
      env: { PATH: process.env.PATH ?? '', POWERTOOLS_METRICS_DISABLED: 'true' },
    });
    imports.push(Number(out.toString()));
  }
  return { entry, bytes, gzipBytes: gzip, coldImportMsMedian: round(pct(imports, 50)), coldImportMsRuns: imports.map((t) => round(t)) };
}

// ── 2 and 3 need PostgreSQL and the fake Stripe ──────────────────────────────────────────────────

function scaledPolicy(scale: number): Partial<EnginePolicy> {
  const s = (b: { baseMs: number; capMs: number }) => ({ baseMs: Math.max(1, Math.round(b.baseMs * scale)), capMs: Math.max(1, Math.round(b.capMs * scale)) });
  const d = DEFAULT_POLICY.backoff;
  return { backoff: { ambiguous: s(d.ambiguous), rateLimited: s(d.rateLimited), configuration: s(d.configuration), unsettled: s(d.unsettled), inbox: s(d.inbox) } };
}

async function insertRoundTrips(pool: pg.Pool) {
  const counted = countingDb(pool);
  const times: number[] = [];
  for (let i = 0; i < INSERTS; i++) {
    const event = makeStripeEvent('payment_intent.succeeded', { id: `pi_bench_${i}`, object: 'payment_intent', status: 'succeeded', amount: 100, currency: 'eur', metadata: {} });
    const body = JSON.stringify(event);
    const t = performance.now();
    const r = await receiveWebhook(
      { method: 'POST', body, headers: { 'stripe-signature': signStripePayload(body, SECRET, Math.floor(Date.now() / 1000)) } },
      { secret: SECRET, maxBodyBytes: 256 * 1024 },
      { db: counted, applier: null, publisher: null },
    );
    times.push(performance.now() - t);
    if (r.kind !== 'recorded') throw new Error(`insert ${i}: ${JSON.stringify(r)}`);
  }
  return { events: INSERTS, roundTrips: counted.roundTrips, roundTripsPerEvent: counted.roundTrips / INSERTS, verifyAndInsertMsP50: round(pct(times, 50), 2), verifyAndInsertMsP95: round(pct(times, 95), 2) };
}

async function settleLatency(adminUrl: string, dbName: string, webhooks: boolean) {
  await createDatabase(adminUrl, dbName);
  const url = new URL(adminUrl);
  url.pathname = `/${dbName}`;
  await migrate(url.toString(), await loadMigrations(path.join(ROOT, 'migrations')));
  const pool = new pg.Pool({ connectionString: url.toString(), max: 8 });
  // An idle connection ended by the server (its shutdown at the end) is not a benchmark failure.
  pool.on('error', () => {});
  const fake = await startFakeStripe();
  const gateway = stripeGatewayFor({ apiKey: 'sk_test_bench', apiBase: fake.url, timeoutMs: 5_000, maxNetworkRetries: 0 });
  const policy = scaledPolicy(SCALE);
  const engine = new ChargeEngine({ db: pool, gateway, actor: 'bench', policy });
  const applier = new StripeEventApplier({ db: pool, gateway, policy });
  let server: ReturnType<typeof createServer> | null = null;
  let dispatcher: WebhookDispatcher | null = null;
  try {
    // OPS operations whose PaymentIntents Stripe leaves `processing`.
    fake.injectFault({}, 'processing', OPS);
    const inputs = Array.from({ length: OPS }, (_, i) => ({ orderId: `bench-${dbName}-${i}`, amount: 1000 + i, currency: 'eur', customerId: 'cus_bench', paymentMethod: 'pm_card_visa' }));
    await engine.processRequests(inputs);
    const { rows } = await pool.query<{ id: string; external_id: string }>(`SELECT id, external_id FROM payment_operations WHERE status = 'unknown'`);
    if (rows.length !== OPS) throw new Error(`expected ${OPS} processing operations, got ${rows.length}`);

    if (webhooks) {
      server = createServer((req, res) => {
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        req.on('end', () => {
          void receiveWebhook(
            { method: req.method, body: Buffer.concat(chunks).toString('utf8'), headers: { 'stripe-signature': String(req.headers['stripe-signature'] ?? '') } },
            { secret: SECRET, maxBodyBytes: 256 * 1024 },
            { db: pool, applier, publisher: null },
          ).then((r) => res.writeHead(r.kind === 'recorded' ? 200 : 400).end());
        });
      });
      await new Promise<void>((resolve) => server!.listen(0, '127.0.0.1', resolve));
      dispatcher = new WebhookDispatcher({ fake, endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`, secret: SECRET, pollMs: 20 });
      dispatcher.poll(); // the processing events of the creates, before the clock starts
      dispatcher.start();
    }

    // The reconciler, every minute × SCALE, as the schedule would run it (and the inbox sweep with it).
    let running = true;
    const periodMs = Math.max(10, Math.round(60_000 * SCALE));
    const reconciler = (async () => {
      while (running) {
        await engine.reconcileDue(100);
        if (webhooks) await applier.applyDue();
        await sleep(periodMs);
      }
    })();

    // Stripe settles each PaymentIntent at a random moment within 20 min (real) of its creation.
    const random = mulberry32(7);
    const settledAt = new Map<string, number>();
    const started = Date.now();
    const schedule = rows.map((r) => ({ ...r, at: started + random() * 20 * 60_000 * SCALE })).sort((a, b) => a.at - b.at);
    for (const s of schedule) {
      const wait = s.at - Date.now();
      if (wait > 0) await sleep(wait);
      fake.settle(s.external_id, 'succeeded');
      settledAt.set(s.id, Date.now());
    }
    // Wait until every operation is final.
    const deadline = Date.now() + 2 * 3_600_000 * SCALE + 30_000;
    for (;;) {
      const open = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM payment_operations WHERE status = 'unknown'`);
      if (open.rows[0]!.n === 0 || Date.now() > deadline) break;
      await sleep(20);
    }
    running = false;
    await reconciler;
    const finals = await pool.query<{ id: string; settled_at: Date; via_event: boolean }>(
      `SELECT p.id, p.settled_at,
              EXISTS (SELECT 1 FROM payment_operation_events e WHERE e.operation_id = p.id AND e.action = 'outcome_recorded'
                         AND e.to_status = 'succeeded' AND e.detail ? 'stripeEventId') AS via_event
         FROM payment_operations p WHERE p.status = 'succeeded'`,
    );
    const lags = finals.rows.map((r) => Math.max(0, r.settled_at.getTime() - settledAt.get(r.id)!));
    const real = (ms: number) => (webhooks ? ms : ms / SCALE);
    return {
      mode: webhooks ? 'webhooks (+ polling)' : 'polling only',
      operations: OPS,
      final: finals.rows.length,
      viaEvent: finals.rows.filter((r) => r.via_event).length,
      // Webhook latency is real time (nothing in it is scaled); polling latency is time-lapse time ÷ SCALE.
      realSecondsP50: round(real(pct(lags, 50)) / 1000, 2),
      realSecondsP95: round(real(pct(lags, 95)) / 1000, 2),
      realSecondsMax: round(real(Math.max(...lags)) / 1000, 2),
      stripeRequests: fake.stats().requests,
    };
  } finally {
    await dispatcher?.stop();
    await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
    await fake.close();
    await pool.end();
  }
}

async function main() {
  const bundles = [await bundle('lambdas/stripe-events/handler.ts'), await bundle('lambdas/charge/handler.ts')];
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-stripe-events-${process.pid}`) });
  try {
    await createDatabase(server.adminUrl, 'bench_inbox');
    await migrate(server.urlFor('bench_inbox'), await loadMigrations(path.join(ROOT, 'migrations')));
    const pool = new pg.Pool({ connectionString: server.urlFor('bench_inbox'), max: 2 });
    pool.on('error', () => {});
    const inbox = await insertRoundTrips(pool);
    await pool.end();
    const polling = await settleLatency(server.adminUrl, 'bench_polling', false);
    const withWebhooks = await settleLatency(server.adminUrl, 'bench_webhooks', true);
    const result = { scale: SCALE, bundles, inbox, settle: [polling, withWebhooks] };
    if (args.json) {
      console.log(JSON.stringify(result, null, 2));
      return;
    }
    console.log(`Stripe events in — node ${process.version}, ${os.cpus().length} CPUs`);
    for (const b of bundles) {
      console.log(`  bundle ${b.entry}: ${round(b.bytes / 1024)} KiB (${round(b.gzipBytes / 1024)} KiB gzip) · cold import median ${b.coldImportMsMedian} ms (runs ${b.coldImportMsRuns.join(', ')})`);
    }
    console.log(`  inbox: ${inbox.events} verified deliveries, ${inbox.roundTrips} round trips = ${inbox.roundTripsPerEvent} per event · verify + insert p50 ${inbox.verifyAndInsertMsP50} ms, p95 ${inbox.verifyAndInsertMsP95} ms`);
    console.log(`  Stripe settles a processing PaymentIntent → operation final (${OPS} operations, settles spread over 20 min; time-lapse × ${round(SCALE, 5)}, shown in real time):`);
    for (const s of [polling, withWebhooks]) {
      console.log(`    ${s.mode.padEnd(22)} p50 ${s.realSecondsP50} s · p95 ${s.realSecondsP95} s · max ${s.realSecondsMax} s · ${s.final}/${s.operations} final, ${s.viaEvent} by an event · Stripe requests ${s.stripeRequests.total} (retrieve ${s.stripeRequests.retrieve})`);
    }
  } finally {
    await server.stop();
  }
}

await main();
