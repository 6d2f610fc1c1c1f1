// npm run bench:refund-batch — figures, not assertions: what working a batch's refunds side by side
// buys (059974b) over working them one after another (before it), through the charge batch itself.
//
//   mixed: batches of 10 records — 8 charges of new orders + 2 refunds of orders charged in the
//          batch before (20 % refunds, 10 orders and message groups per batch);
//   refunds only: batches of 10 refunds of 10 orders (the case 059974b names);
//
// each worked by processChargeBatch with the dependencies the charge handler builds from its default
// configuration (DB_POOL_MAX 2, CHARGE_CONCURRENCY 10, STRIPE_TIMEOUT_MS 10 s, 1 retry, an event bus),
// once with refundConcurrency 1 (one refund after another, as before 059974b) and once with the
// default (groups side by side, bounded by CHARGE_CONCURRENCY), interleaved in rounds so that a drift
// of the shared machine hits both alike. The fake Stripe runs in its own process and answers every
// request after --latency ms (default 30). Printed: operations/s, Stripe requests, database round
// trips per refund, the mean time of one refund request / outcome statement (pool wait included),
// and how long a batch's refund request statements span (first sent → last answered): the time the
// last refund's Stripe call waits behind them, which one batched statement would shorten.
// Real PostgreSQL 18 (embedded), the real stripe SDK over HTTP, the real EventBridge client against
// the fake PutEvents endpoint. Options: --batches N (per mode and shape, default 40), --latency ms
// (30), --rounds N (5), --pool-max N (DB_POOL_MAX, default the handler's: 2), --concurrency N
// (CHARGE_CONCURRENCY, default the handler's: 10; the stack deploys chargeStripeConcurrency 2), --json.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { SQSRecord } from 'aws-lambda';
import pg from 'pg';
import { processChargeBatch, type ChargeBatchDeps } from '../lambdas/charge/batch.ts';
import { EventBridgePublisher } from '../lambdas/events/outbox.ts';
import { worstCaseCallMs } from '../lambdas/payments/call-budget.ts';
import { countingDb, type Db } from '../lambdas/payments/db.ts';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import { loadConfig } from '../lambdas/runtime/config.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { startFakeEventBridge } from '../local/fake-eventbridge/server.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { sqsRecord, startStripeProcess, type StripeProcess } from './bench-support.ts';

const { values: args } = parseArgs({
  options: {
    batches: { type: 'string', default: '40' },
    latency: { type: 'string', default: '30' },
    rounds: { type: 'string', default: '5' },
    'pool-max': { type: 'string' },
    concurrency: { type: 'string' },
    json: { type: 'boolean', default: false },
  },
});
const BATCHES = Number(args.batches);
const LATENCY = Number(args.latency);
const ROUNDS = Math.max(1, Math.min(Number(args.rounds), BATCHES));
const root = path.resolve(import.meta.dirname, '..');

const REFUND_REQUEST = 'payments.request_refund_and_claim';

/** A Db that counts round trips (countingDb) and the client-side time of each named statement (pool wait included). */
function measuredDb(db: Db) {
  const byName = new Map<string, { count: number; ms: number }>();
  // The refund request statements of the batch in progress: from the first one sent to the last one answered.
  let requests: { first: number; last: number } | null = null;
  const counted = countingDb(db, ({ name: named, startedAt: t0, endedAt: t1 }) => {
    const name = named ?? 'unnamed';
    const entry = byName.get(name) ?? { count: 0, ms: 0 };
    entry.count += 1;
    entry.ms += t1 - t0;
    byName.set(name, entry);
    if (name === REFUND_REQUEST) requests = { first: Math.min(requests?.first ?? t0, t0), last: Math.max(requests?.last ?? t1, t1) };
  });
  return {
    db: counted as Db,
    snapshot: () => ({ roundTrips: counted.roundTrips, byName: new Map([...byName].map(([k, v]) => [k, { ...v }])) }),
    /** The span of the refund request statements since the last call, in ms (0: none), and a fresh start. */
    takeRequestSpan: () => {
      const span = requests ? requests.last - requests.first : 0;
      requests = null;
      return span;
    },
  };
}
type Snapshot = ReturnType<ReturnType<typeof measuredDb>['snapshot']>;

const chargeBody = (orderId: string) => ({ orderId, amount: 1999, currency: 'eur', customerId: 'cus_bench', paymentMethod: 'pm_card_visa' });
const refundBody = (orderId: string) => ({ type: 'refund', orderId, refundId: `rf-${randomUUID()}`, amount: 500, reason: 'requested_by_customer' });
const newOrders = (n: number) => Array.from({ length: n }, () => `bench-${randomUUID()}`);

type Mode = 'one_after_another' | 'side_by_side';
type Shape = 'mixed' | 'refunds_only';
const MODES: readonly Mode[] = ['one_after_another', 'side_by_side'];
const SHAPES: readonly Shape[] = ['mixed', 'refunds_only'];

interface Tally {
  batches: number;
  charges: number;
  refunds: number;
  ms: number;
  /** Per batch: from the first refund request statement sent to the last one answered, summed. */
  requestSpanMs: number;
  roundTrips: number;
  stripe: { total: number; create: number; refundCreate: number };
  statements: Map<string, { count: number; ms: number }>;
}
const emptyTally = (): Tally => ({ batches: 0, charges: 0, refunds: 0, ms: 0, requestSpanMs: 0, roundTrips: 0, stripe: { total: 0, create: 0, refundCreate: 0 }, statements: new Map() });

async function main() {
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-refund-batch-pg-${process.pid}`) });
  const stripe: StripeProcess = await startStripeProcess(LATENCY);
  const bus = await startFakeEventBridge();
  try {
    await createDatabase(server.adminUrl, 'refund_batch');
    const url = server.urlFor('refund_batch');
    await migrate(url, await loadMigrations(path.join(root, 'migrations')));

    // The handler's configuration, from the environment it would have locally (defaults otherwise).
    const config = loadConfig({
      DATABASE_URL: url,
      STRIPE_API_BASE: stripe.url,
      STRIPE_SECRET_KEY: 'sk_test_bench',
      EVENT_BUS_NAME: 'charge-outcomes',
      EVENTS_ENDPOINT: bus.url,
      ...(args['pool-max'] ? { DB_POOL_MAX: args['pool-max'] } : {}),
      ...(args.concurrency ? { CHARGE_CONCURRENCY: args.concurrency } : {}),
    });
    const pool = new pg.Pool({ connectionString: url, max: config.database.poolMax });
    const measured = measuredDb(pool);
    const gateway = new StripeGateway(createStripeClient({ apiKey: config.stripe.apiKey!, apiBase: config.stripe.apiBase, timeoutMs: config.stripe.timeoutMs, maxNetworkRetries: config.stripe.maxNetworkRetries }));
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
      { busName: config.events.busName!, source: config.events.source },
    );
    // As lambdas/charge/handler.ts passes them.
    const handlerDeps: ChargeBatchDeps = {
      db: measured.db,
      gateway,
      publisher,
      maxAmount: config.charge.maxAmount,
      concurrency: config.charge.concurrency,
      policy: config.policy,
      minTimeToCallMs: worstCaseCallMs(config.stripe) + config.charge.safetyMarginMs,
      worstCallMs: worstCaseCallMs(config.stripe),
    };
    const depsOf = (mode: Mode): ChargeBatchDeps => (mode === 'one_after_another' ? { ...handlerDeps, refundConcurrency: 1 } : handlerDeps);
    const invoke = async (mode: Mode, records: readonly SQSRecord[]) => {
      const deadline = Date.now() + PIPELINE.chargeFunctionTimeoutSeconds * 1000;
      const t0 = performance.now();
      const result = await processChargeBatch(records, depsOf(mode), { remainingMs: () => deadline - Date.now() });
      const ms = performance.now() - t0;
      const notSucceeded = result.records.filter((r) => r.fate.kind !== 'processed' || r.fate.status !== 'succeeded');
      if (notSucceeded.length > 0) throw new Error(`${mode}: ${notSucceeded.length} record(s) did not succeed: ${JSON.stringify(notSucceeded[0])}`);
      return ms;
    };
    /** Orders charged and not yet refunded, per mode: what the next batches refund. */
    const charged: Record<Mode, string[]> = { one_after_another: [], side_by_side: [] };
    const chargeRecords = (mode: Mode, n: number) => {
      const ids = newOrders(n);
      charged[mode].push(...ids);
      return ids.map((id) => sqsRecord(chargeBody(id), id));
    };
    const refundRecords = (mode: Mode, n: number) => {
      const ids = charged[mode].splice(0, n);
      if (ids.length < n) throw new Error('not enough charged orders to refund');
      return ids.map((id) => sqsRecord(refundBody(id), id));
    };
    const batchOf = (mode: Mode, shape: Shape): { records: SQSRecord[]; charges: number; refunds: number } => {
      if (shape === 'refunds_only') return { records: refundRecords(mode, 10), charges: 0, refunds: 10 };
      // The refunds first in the records, the charges after: the batch still works its charges first.
      const refunds = refundRecords(mode, 2);
      const charges = chargeRecords(mode, 8);
      return { records: [charges[0]!, charges[1]!, refunds[0]!, ...charges.slice(2, 6), refunds[1]!, ...charges.slice(6)], charges: 8, refunds: 2 };
    };

    // Warm up both modes (pool connections, prepared statements, SDK sockets) and charge the orders
    // the first refunds need; the refunds-only shape gets its charged orders before each of its chunks.
    for (const mode of MODES) {
      for (let i = 0; i < 3; i++) await invoke(mode, chargeRecords(mode, 10));
      await invoke(mode, refundRecords(mode, 10));
    }
    // The charges alone, to take their round trips out of the per-refund figure.
    const before = measured.snapshot().roundTrips;
    await invoke('side_by_side', chargeRecords('side_by_side', 8));
    const chargeOnlyTrips = measured.snapshot().roundTrips - before;

    const tallies: Record<Shape, Record<Mode, Tally>> = {
      mixed: { one_after_another: emptyTally(), side_by_side: emptyTally() },
      refunds_only: { one_after_another: emptyTally(), side_by_side: emptyTally() },
    };
    const add = (tally: Tally, from: Snapshot, to: Snapshot) => {
      tally.roundTrips += to.roundTrips - from.roundTrips;
      for (const [name, v] of to.byName) {
        const was = from.byName.get(name) ?? { count: 0, ms: 0 };
        const entry = tally.statements.get(name) ?? { count: 0, ms: 0 };
        entry.count += v.count - was.count;
        entry.ms += v.ms - was.ms;
        tally.statements.set(name, entry);
      }
    };
    for (let round = 0; round < ROUNDS; round++) {
      const size = Math.floor(BATCHES / ROUNDS) + (round < BATCHES % ROUNDS ? 1 : 0);
      for (const shape of SHAPES) {
        for (const mode of round % 2 === 0 ? MODES : [...MODES].reverse()) {
          // Orders for this chunk's refunds-only batches, charged untimed.
          if (shape === 'refunds_only') for (let i = 0; i < size; i++) await invoke(mode, chargeRecords(mode, 10));
          const tally = tallies[shape][mode];
          const stats0 = await stripe.stats();
          const db0 = measured.snapshot();
          for (let i = 0; i < size; i++) {
            const batch = batchOf(mode, shape);
            measured.takeRequestSpan();
            tally.ms += await invoke(mode, batch.records);
            tally.requestSpanMs += measured.takeRequestSpan();
            tally.batches += 1;
            tally.charges += batch.charges;
            tally.refunds += batch.refunds;
          }
          add(tally, db0, measured.snapshot());
          const stats1 = await stripe.stats();
          tally.stripe.total += stats1.requests.total - stats0.requests.total;
          tally.stripe.create += stats1.requests.create - stats0.requests.create;
          tally.stripe.refundCreate += stats1.requests.refund_create - stats0.requests.refund_create;
        }
      }
    }
    const final = await stripe.stats();
    await pool.end();

    const summary = (shape: Shape, mode: Mode) => {
      const t = tallies[shape][mode];
      const perRefund = (name: string) => {
        const s = t.statements.get(name) ?? { count: 0, ms: 0 };
        return s.count === 0 ? 0 : +(s.ms / s.count).toFixed(2);
      };
      // Each refund's outcome is its own record_outcomes call; the charges' is one per batch (mixed).
      const outcomes = t.statements.get('payments.record_outcomes') ?? { count: 0, ms: 0 };
      const chargeBatches = shape === 'mixed' ? t.batches : 0;
      return {
        batches: t.batches,
        charges: t.charges,
        refunds: t.refunds,
        seconds: +(t.ms / 1000).toFixed(2),
        opsPerSecond: Math.round((t.charges + t.refunds) / (t.ms / 1000)),
        msPerBatch: +(t.ms / t.batches).toFixed(1),
        stripeRequests: t.stripe.total,
        stripeRequestsPerBatch: +(t.stripe.total / t.batches).toFixed(2),
        refundCreatesPerRefund: +(t.stripe.refundCreate / t.refunds).toFixed(2),
        dbRoundTripsPerBatch: +(t.roundTrips / t.batches).toFixed(2),
        dbRoundTripsPerRefund: +((t.roundTrips - (shape === 'mixed' ? chargeOnlyTrips * t.batches : 0)) / t.refunds).toFixed(2),
        refundRequestStatementMs: perRefund(REFUND_REQUEST),
        refundRequestSpanMsPerBatch: +(t.requestSpanMs / t.batches).toFixed(1),
        outcomeStatementMs: +(outcomes.count === 0 ? 0 : outcomes.ms / outcomes.count).toFixed(2),
        refundOutcomeWrites: outcomes.count - chargeBatches,
      };
    };
    const report = {
      date: new Date().toISOString(),
      machine: { cpus: os.cpus().length, load: os.loadavg().map((l) => +l.toFixed(1)), node: process.version },
      latencyMs: LATENCY,
      config: { poolMax: config.database.poolMax, concurrency: config.charge.concurrency, stripeTimeoutMs: config.stripe.timeoutMs, maxNetworkRetries: config.stripe.maxNetworkRetries },
      chargeOnlyBatchOf8RoundTrips: chargeOnlyTrips,
      results: Object.fromEntries(SHAPES.map((shape) => [shape, Object.fromEntries(MODES.map((mode) => [mode, summary(shape, mode)]))])),
      doubleCharges: final.doubleCharges,
    };
    if (args.json) {
      console.log(JSON.stringify(report, null, 2));
      return;
    }
    console.log(`bench:refund-batch on ${report.machine.cpus} CPUs (load ${report.machine.load.join(' ')}), Node ${report.machine.node}, PostgreSQL 18 (embedded)`);
    console.log(`fake Stripe in its own process, every request answered after ${LATENCY} ms; processChargeBatch with the handler's defaults`);
    console.log(`(DB_POOL_MAX ${report.config.poolMax}, CHARGE_CONCURRENCY ${report.config.concurrency}, event bus on); ${BATCHES} batches per shape and mode, interleaved in ${ROUNDS} rounds`);
    for (const shape of SHAPES) {
      console.log(shape === 'mixed' ? '\nmixed: 8 charges + 2 refunds of orders charged in the batch before (20 % refunds), 10 message groups' : '\nrefunds only: 10 refunds of 10 orders (10 message groups)');
      console.log(`  ${'refunds worked'.padEnd(34)} ${'ops/s'.padStart(6)} ${'ms/batch'.padStart(9)} ${'Stripe req/batch'.padStart(17)} ${'creates/refund'.padStart(15)} ${'DB trips/refund'.padStart(16)} ${'request stmt'.padStart(13)} ${'outcome stmt'.padStart(13)}`);
      for (const mode of MODES) {
        const s = summary(shape, mode);
        const label = mode === 'one_after_another' ? 'one after another (before 059974b)' : 'side by side (059974b)';
        console.log(
          `  ${label.padEnd(34)} ${String(s.opsPerSecond).padStart(6)} ${s.msPerBatch.toFixed(1).padStart(9)} ${s.stripeRequestsPerBatch.toFixed(2).padStart(17)} ${s.refundCreatesPerRefund.toFixed(2).padStart(15)} ${s.dbRoundTripsPerRefund.toFixed(2).padStart(16)} ${`${s.refundRequestStatementMs.toFixed(2)} ms`.padStart(13)} ${`${s.outcomeStatementMs.toFixed(2)} ms`.padStart(13)}`,
        );
      }
      const a = summary(shape, 'one_after_another');
      const b = summary(shape, 'side_by_side');
      console.log(`  side by side: ${(b.opsPerSecond / a.opsPerSecond).toFixed(2)}× the operations/s; ${(a.msPerBatch - b.msPerBatch).toFixed(1)} ms less per batch`);
      console.log(`  side by side, the refund request statements span ${b.refundRequestSpanMsPerBatch.toFixed(1)} ms of the ${b.msPerBatch.toFixed(1)} ms batch (first sent → last answered; one statement alone: ${a.refundRequestStatementMs.toFixed(2)} ms)`);
    }
    console.log(`\n(request stmt / outcome stmt: mean client-side time of one refund request statement and of one outcome statement, pool wait included;`);
    console.log(` a charge-only batch of 8 costs ${chargeOnlyTrips} round trips, taken out of the mixed per-refund figure; double charges at the fake Stripe: ${report.doubleCharges})`);
  } finally {
    await stripe.stop();
    await bus.close();
    await server.stop();
  }
}

await main();
