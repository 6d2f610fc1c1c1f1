// One contestant, one run: the workload through fauxqs and the local event source into the
// contestant's handler, against a fresh fake Stripe with the shared fault schedule; then quiet (the
// key windows pass and the fake prunes keys, as Stripe may after 24 h), then the contestant's own
// recovery to quiescence; then the fake's record judged against the contestant's store. Keys are
// pruned only in the quiet: the whole traffic phase stands for less than Stripe's 24 hours (on this
// clock an SQS redelivery is 10 s, a key window 50 s, and an order's duplicates come minutes apart).
import { SendMessageBatchCommand } from '@aws-sdk/client-sqs';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import type { FakeStripe, FaultRates } from '../../local/fake-stripe/types.ts';
import { keyPruneAfterMsFor, leaseMsFor, queuedGroups, startPipeline, type TimeLapse } from '../../local/pipeline.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import type { Contestant, RunningContestant } from './contestant.ts';
import { clientMeter, cpuMeter, serverMeter, type WalShare } from './metering.ts';
import { makeWorkload, PEER_FAULT_RATES, type Workload } from './schedule.ts';
import { judge, type Judgement } from './truth.ts';

/**
 * The compressed clock every contestant runs on. Chosen so that the ORDER of the real durations
 * holds: one SDK call < the function timeout < the visibility timeout; all of SQS's redeliveries
 * (maxReceiveCount × visibility) < the key window < Stripe's key pruning. Real: 10 s calls, 60 s
 * function, 360 s visibility, 23 h window, ≥ 24 h pruning.
 */
export const BENCH_CLOCK: TimeLapse = {
  keyWindowMs: 50_000,
  earlySearchAfterMs: 3_000,
  searchLagMs: 1_000,
  stripeTimeoutMs: 2_000,
  stripeMaxNetworkRetries: 0,
  unsettledReviewAfterMs: 120_000,
  processingSettleMs: 2_000,
  reconcileEveryMs: 2_000,
  // Retries after 40 ms … 18 s instead of 2 s … 15 min.
  retryBackoffScale: 0.02,
};
/** CHARGE_SAFETY_MARGIN_MS on this clock (the product's default is 5 s for a 60 s function). */
const SAFETY_MARGIN_MS = 1_000;
const MAX_RECEIVE_COUNT = 5;
/** Producers sending the workload at once (SendMessageBatch of 10 each). */
const PRODUCERS = 4;

/** How long the bench waits for a contestant's own background work (RunningContestant.settle). */
const SETTLE_TIMEOUT_MS = 160_000;

export function functionTimeoutMsFor(clock: TimeLapse): number {
  // The charge handler starts no call it could not finish (worst case + margin): room for one, plus a second.
  return leaseMsFor(clock) + SAFETY_MARGIN_MS + 1_000;
}

export interface RunOptions {
  readonly adminUrl: string;
  readonly dynamoEndpoint: string;
  readonly dynamoRequests: () => number;
  readonly contestant: Contestant;
  readonly workload: Workload;
  /** The shared seeded fault schedule (and the crash); false: a clean run (throughput). */
  readonly faults: boolean;
  readonly latencyMs: number;
  readonly pollers?: number;
  /** Records per invocation (the event source's batch size), 1-10. Default 10. */
  readonly batchSize?: number;
  readonly clock?: TimeLapse;
  /** SQS receives before the DLQ. Default 5, as deployed. */
  readonly maxReceiveCount?: number;
  /** Cap on the traffic phase. Default 20 min. */
  readonly trafficTimeoutMs?: number;
  /** Cap on the recovery phase. Default 120 s. */
  readonly recoveryTimeoutMs?: number;
  readonly log?: (line: string) => void;
  /** Fault rates of the schedule. Default PEER_FAULT_RATES. */
  readonly rates?: FaultRates;
  /** Wait for the key windows to pass and prune before recovery. Default true (with faults). */
  readonly quiet?: boolean;
  /** Plant something at the fake Stripe before judging (tests of the checker). */
  readonly tamper?: (fake: FakeStripe) => Promise<void>;
  /** Orders to judge that were never sent (a planted lost order). */
  readonly judgeAlso?: readonly string[];
}

export interface RunResult {
  readonly contestant: Contestant['id'];
  readonly title: string;
  readonly faults: boolean;
  readonly latencyMs: number;
  /** Records per invocation. */
  readonly batchSize: number;
  readonly orders: number;
  readonly messages: number;
  readonly judgement: Judgement;
  /** Orders that reached a final state per second, from the first send to the last final state. */
  readonly chargesPerSecond: number;
  readonly p50Ms: number | null;
  readonly p99Ms: number | null;
  readonly perOrder: {
    readonly dbRoundTrips: number | null;
    readonly dbClientMs: number | null;
    readonly serverStatements: number | null;
    readonly serverExecMs: number | null;
    /** CPU per order from the first send to the end of the run's phases: this process (the whole rig) and the PostgreSQL server. */
    readonly rigCpuMs: number;
    readonly serverCpuMs: number | null;
    readonly walBytes: number | null;
    /** Clean runs of a PostgreSQL contestant: the WAL per charge by relation (bytes, FPI bytes, records per charge). */
    readonly walByRelation: readonly WalShare[] | null;
    readonly dynamoRequests: number | null;
    readonly stripeRequests: number;
  };
  readonly phasesMs: { readonly traffic: number; readonly quiet: number; readonly recovery: number };
  /** Orders with a message in the DLQ at the end. */
  readonly dlq: number;
}

const percentile = (sorted: readonly number[], p: number): number | null =>
  sorted.length === 0 ? null : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;

export async function runContestant(options: RunOptions): Promise<RunResult> {
  const clock = options.clock ?? BENCH_CLOCK;
  const log = options.log ?? (() => {});
  const { contestant, workload } = options;
  const orderIds = workload.orders.map((o) => o.orderId);
  const fake = await startFakeStripe({
    latencyMs: options.latencyMs,
    searchLagMs: clock.searchLagMs,
    processingSettleMs: clock.processingSettleMs,
    ...(options.faults ? { faults: { seed: workload.seed, rates: options.rates ?? PEER_FAULT_RATES, keyBy: 'order' as const } } : {}),
  });
  let running: RunningContestant | null = null;
  const delegate = {
    charge: (event: Parameters<NonNullable<RunningContestant['charge']>>[0], context: Parameters<NonNullable<RunningContestant['charge']>>[1]) =>
      running!.charge!(event, context),
    reconcile: async (event: Parameters<NonNullable<RunningContestant['reconcile']>>[0], context: Parameters<NonNullable<RunningContestant['reconcile']>>[1]) =>
      running?.reconcile ? running.reconcile(event, context) : { recovery: 'none' },
  };
  const functionTimeoutMs = functionTimeoutMsFor(clock);
  const pipeline = await startPipeline({
    postgres: { kind: 'server', adminUrl: options.adminUrl },
    stripe: { kind: 'external', secretKey: 'sk_test_bench_peers', apiBase: fake.url },
    timeLapse: clock,
    pollers: options.pollers ?? 8,
    batchSize: options.batchSize ?? 10,
    chargeTimeoutMs: functionTimeoutMs,
    // The reconciler's timeout on the same clock: it bounds the sweep lease (migration 003), so a
    // sweep frozen by a crash holds the Stripe budget for seconds, as a crashed one holds it for the
    // function's 2 minutes on AWS — not for 2 minutes of a clock on which a day lasts one.
    reconcileTimeoutMs: functionTimeoutMs,
    visibilityTimeoutSeconds: Math.ceil(functionTimeoutMs / 1000) + 1,
    maxReceiveCount: options.maxReceiveCount ?? MAX_RECEIVE_COUNT,
    eventBridgeFaults: null,
    logLevel: 'SILENT',
    metricsDisabled: true,
    env: { CHARGE_SAFETY_MARGIN_MS: String(SAFETY_MARGIN_MS), RECONCILE_SAFETY_MARGIN_MS: String(SAFETY_MARGIN_MS) },
    ...(contestant.id === 'ours' ? {} : { handlers: delegate }),
    log: (line) => log(`  pipeline: ${line}`),
  });
  const admin = new pg.Pool({ connectionString: options.adminUrl, max: 2, application_name: 'local-runtime' });
  admin.on('error', (error) => log(`  admin pool: ${error.message}`));
  try {
    running = await contestant.start({
      databaseUrl: pipeline.databaseUrl,
      observer: pipeline.db,
      stripe: () =>
        createStripeClient({ apiKey: 'sk_test_bench_peers', apiBase: fake.url, timeoutMs: clock.stripeTimeoutMs, maxNetworkRetries: clock.stripeMaxNetworkRetries }),
      keyWindowMs: clock.keyWindowMs,
      dynamoEndpoint: options.dynamoEndpoint,
    });
    const firstSentAt = new Map<string, number>();
    const sendAll = async (w: Workload) => {
      const byId = new Map(w.orders.map((o) => [o.orderId, o]));
      const chunks: (typeof w.sends)[] = [];
      for (let i = 0; i < w.sends.length; i += 10) chunks.push(w.sends.slice(i, i + 10));
      let next = 0;
      // Several producers at once, so the contestant's pace is measured and not one sender's: one
      // SendMessageBatch after another, on the thread the handlers share, took as long as a whole
      // clean run of this product took to settle.
      await Promise.all(
        Array.from({ length: PRODUCERS }, async () => {
          while (next < chunks.length) {
            const chunk = chunks[next++]!;
            const now = Date.now();
            for (const s of chunk) if (!firstSentAt.has(s.orderId)) firstSentAt.set(s.orderId, now);
            await pipeline.sqs.client.send(
              new SendMessageBatchCommand({
                QueueUrl: pipeline.sqs.queueUrl,
                Entries: chunk.map((s, j) => ({
                  Id: String(j),
                  MessageBody: JSON.stringify(byId.get(s.orderId)),
                  MessageGroupId: s.orderId,
                  // Duplicates that SQS's 5-minute deduplication does not catch (a resend later, another producer).
                  MessageDeduplicationId: `${s.orderId}:${s.copy}`,
                })),
              }),
            );
          }
        }),
      );
    };
    // The intake alone, read in this process: a snapshot would count the product's tables and read
    // the fake Stripe's ledger every 100 ms, work that grows with the run and lands in the measured
    // CPU and server time of whichever contestant is running.
    const drained = async () => {
      const s = pipeline.intake();
      return s.queue.waiting === 0 && s.queue.inFlight === 0 && s.eventSource.inFlight === 0;
    };
    const allFinal = async (ids: readonly string[], timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs;
      while (Date.now() < deadline) {
        const beliefs = await running!.beliefs(ids);
        if (ids.every((id) => beliefs.has(id) && beliefs.get(id)!.state !== 'open')) return;
        await sleep(100);
      }
    };

    // ── Warm-up (clean runs): connections opened, statements prepared, code compiled ─────────
    if (!options.faults) {
      const warm = makeWorkload(workload.seed + 1_000_003, (options.pollers ?? 8) * 10 * 2, { duplicates: false });
      await sendAll(warm);
      while (!(await drained())) await sleep(100);
      await allFinal(warm.orders.map((o) => o.orderId), 30_000);
      firstSentAt.clear();
      // The statistics a production database has: autovacuum analyzes a table once enough of it has
      // changed, but looks only once a minute (autovacuum_naptime), longer than a clean run. Left to
      // it, every contestant's statements would be planned for the empty tables of the migration.
      // A contestant's databases are the run's and any it made beside it (DBOS: `<run>_dbos`).
      const { rows: databases } = await admin.query<{ datname: string }>(
        `SELECT datname FROM pg_database WHERE datname = $1 OR starts_with(datname, $1 || '_')`,
        [pipeline.databaseName],
      );
      for (const { datname } of databases) {
        const url = new URL(options.adminUrl);
        url.pathname = `/${datname}`;
        const analyze = new pg.Client({ connectionString: url.toString(), application_name: 'local-runtime' });
        await analyze.connect();
        try {
          await analyze.query('ANALYZE');
        } finally {
          await analyze.end();
        }
      }
    }
    const server = serverMeter(admin, pipeline.databaseName, contestant.store === 'postgresql' && !options.faults ? pipeline.databaseUrl : undefined);
    await server.start();
    const cpu = cpuMeter(admin);
    await cpu.start();
    const client = clientMeter();
    client.reset(pipeline.databaseName);
    const dynamoBase = options.dynamoRequests();
    const stripeBase = fake.stats().requests.total;

    // ── Traffic ──────────────────────────────────────────────────────────────────────────────
    const t0 = Date.now();
    await sendAll(workload);
    const progress = setInterval(() => {
      // A progress line is only a line: a snapshot still in flight when the run ends meets a stopped
      // queue (ECONNREFUSED after the SDK's retries), and that must not become an unhandled
      // rejection that ends the whole bench (it did once, as the next contestant started).
      pipeline
        .snapshot()
        .then((s) =>
          log(`  ${contestant.id}: ${((Date.now() - t0) / 1000).toFixed(0)} s, queue ${s.queue.waiting}+${s.queue.inFlight} in flight, dlq ${s.queue.dlq}, stripe requests ${fake.stats().requests.total}`),
        )
        .catch(() => {});
    }, 5_000);
    try {
      // Bounded: a queue that never drains (a contestant stuck for good) ends the phase anyway,
      // and what it left shows up as open or lost.
      const trafficDeadline = Date.now() + (options.trafficTimeoutMs ?? 20 * 60_000);
      while (!(await drained()) && Date.now() < trafficDeadline) await sleep(100);
      if (Date.now() >= trafficDeadline) log(`  ${contestant.id}: the queue did not drain in time; judging what there is`);
      // A contestant that keeps working by itself once the queue is empty (a durable execution's own
      // retries: at most 150 s with the SDK's default strategy) is given that time before the quiet.
      if (running.settle) {
        const settleMs = options.recoveryTimeoutMs ?? SETTLE_TIMEOUT_MS;
        const settled = await Promise.race([running.settle().then(() => true), sleep(settleMs, false, { ref: false })]);
        if (!settled) log(`  ${contestant.id}: its own work did not settle in ${settleMs / 1000} s; judging what there is`);
      }
      const tTraffic = Date.now();

      // ── Quiet: every key older than the window plus a lease, then pruned (as Stripe may) ────
      // Only for a contestant with a recovery: without one, nothing happens after the queue is empty.
      let tQuiet = tTraffic;
      let tRecovery = tTraffic;
      const hasRecovery = contestant.id === 'ours' || running.reconcile !== null;
      if (options.faults && hasRecovery) {
        const lastCreate = fake.requests().filter((r) => r.endpoint === 'create').at(-1)?.at ?? tTraffic;
        const pruneAt = lastCreate + keyPruneAfterMsFor(clock);
        if (options.quiet !== false && pruneAt > Date.now()) {
          log(`  ${contestant.id}: quiet for ${((pruneAt - Date.now()) / 1000).toFixed(0)} s (key windows pass, then Stripe may prune)`);
          await sleep(pruneAt - Date.now());
        }
        if (options.quiet !== false) fake.pruneKeys();
        tQuiet = Date.now();

        // ── Recovery to quiescence: nothing open, or nothing changed for 3 reconcile periods ──
        {
          const deadline = Date.now() + (options.recoveryTimeoutMs ?? 120_000);
          let lastOpen = -1;
          let stableSince = Date.now();
          for (;;) {
            const beliefs = await running.beliefs(orderIds);
            const open = [...beliefs.values()].filter((b) => b.state === 'open').length;
            if (open !== lastOpen) {
              log(`  ${contestant.id}: recovery, ${open} open`);
              lastOpen = open;
              stableSince = Date.now();
            }
            // Stable for longer than the longest retry delay of the clock (15 min × the backoff scale).
            const stableMs = Math.max(3 * clock.reconcileEveryMs, 15 * 60_000 * clock.retryBackoffScale) + 5_000;
            if ((open === 0 && (await drained())) || Date.now() - stableSince > stableMs || Date.now() > deadline) break;
            await sleep(500);
          }
        }
        tRecovery = Date.now();
      } else if (!options.faults) {
        // A clean run ends when every order is final (the reconciler may finish a few).
        await allFinal(orderIds, 60_000);
        tQuiet = tRecovery = Date.now();
      }

      const used = await cpu.read();

      // ── Judge ──────────────────────────────────────────────────────────────────────────────
      if (running.describeOpen) log(`  ${contestant.id}: still open: ${await running.describeOpen()}`);
      await options.tamper?.(fake);
      const judged = [...orderIds, ...(options.judgeAlso ?? [])];
      const beliefs = await running.beliefs(judged);
      const judgement = judge(judged, fake.paymentIntents(), beliefs);
      const latencies: number[] = [];
      let lastFinal = t0;
      for (const [orderId, b] of beliefs) {
        if (b.finishedAtMs === null || !firstSentAt.has(orderId)) continue;
        latencies.push(b.finishedAtMs - firstSentAt.get(orderId)!);
        lastFinal = Math.max(lastFinal, b.finishedAtMs);
      }
      latencies.sort((a, b) => a - b);
      const finals = latencies.length;
      const n = orderIds.length;
      const srv = await server.read();
      const pgStore = contestant.store === 'postgresql';
      return {
        contestant: contestant.id,
        title: contestant.title,
        faults: options.faults,
        latencyMs: options.latencyMs,
        batchSize: options.batchSize ?? 10,
        orders: n,
        messages: workload.sends.length,
        judgement,
        chargesPerSecond: Math.round(finals / Math.max(0.001, (lastFinal - t0) / 1000)),
        p50Ms: percentile(latencies, 50),
        p99Ms: percentile(latencies, 99),
        perOrder: {
          dbRoundTrips: pgStore ? client.count / n : null,
          dbClientMs: pgStore ? client.wallMs / n : null,
          serverStatements: pgStore && srv.statementsAvailable ? srv.statements / n : null,
          serverExecMs: pgStore && srv.statementsAvailable ? srv.execMs / n : null,
          rigCpuMs: used.rigMs / n,
          serverCpuMs: used.serverMs === null ? null : used.serverMs / n,
          walBytes: pgStore ? srv.walBytes / n : null,
          walByRelation: pgStore && srv.walByRelation ? srv.walByRelation.map((w) => ({ ...w, bytes: w.bytes / n, fpiBytes: w.fpiBytes / n, records: w.records / n })) : null,
          dynamoRequests: contestant.store === 'dynamodb' ? (options.dynamoRequests() - dynamoBase) / n : null,
          stripeRequests: (fake.stats().requests.total - stripeBase) / n,
        },
        phasesMs: { traffic: tTraffic - t0, quiet: tQuiet - tTraffic, recovery: tRecovery - tQuiet },
        dlq: new Set(queuedGroups(pipeline.sqs, 'dlq')).size,
      };
    } finally {
      clearInterval(progress);
    }
  } finally {
    clientMeter().reset(null);
    // The fake first: a worker frozen by stall_after_commit gets its socket closed and finishes.
    await fake.close();
    await running?.stop();
    await pipeline.stop();
    await admin.end();
  }
}
