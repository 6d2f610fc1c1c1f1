// npm run bench:engine — figures, not assertions.
//   1. database round trips per fresh charge, per repeated delivery of a settled operation, and what
//      the seed's algorithm (request_charge + execute_charge, ported literally) costs for the same work;
//   2. charges per second against the fake Stripe with zero latency, sequential and batched;
//   3. refunds: round trips per refund and per repeated refund request, and a mixed
//      workload (batches of 10 charges, then refunds of 20 % of the orders).
// Real PostgreSQL 18 (embedded), the real stripe SDK over HTTP, on this machine.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { startFakeStripe } from '../local/fake-stripe/server.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { ChargeEngine } from '../lambdas/payments/engine.ts';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { seedStyleCharge } from './seed-port.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';

const { values: args } = parseArgs({ options: { charges: { type: 'string', default: '2000' }, json: { type: 'boolean', default: false } } });
const N = Number(args.charges);

const order = (): ChargeInput => ({ orderId: `bench-${randomUUID()}`, amount: 1999, currency: 'eur', customerId: 'cus_bench', paymentMethod: 'pm_card_visa' });

async function main() {
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-engine-${process.pid}`) });
  const stripeFake = await startFakeStripe();
  try {
    await createDatabase(server.adminUrl, 'bench');
    await migrate(server.urlFor('bench'), await loadMigrations());
    const pool = new pg.Pool({ connectionString: server.urlFor('bench'), max: 10 });
    const gateway = new StripeGateway(createStripeClient({ apiKey: 'sk_test_bench', apiBase: stripeFake.url, maxNetworkRetries: 0, timeoutMs: 5000 }));
    const counted = countingDb(pool);
    const engine = new ChargeEngine({ db: counted, gateway, actor: 'bench', concurrency: 10 });

    // 1. Round trips.
    const input = order();
    counted.reset();
    await engine.processRequests([input]);
    const fresh = counted.roundTrips;
    counted.reset();
    await engine.processRequests([input]);
    const repeated = counted.roundTrips;
    counted.reset();
    await engine.processRequests(Array.from({ length: 10 }, order));
    const batchOf10 = counted.roundTrips;
    counted.reset();
    const separate = order();
    await engine.requestCharge(separate);
    await engine.executeCharge((await pool.query(`SELECT id FROM payment_operations WHERE order_id = $1`, [separate.orderId])).rows[0].id);
    const requestThenExecute = counted.roundTrips; // the id lookup above went to the pool directly, not counted
    counted.reset();
    await seedStyleCharge(counted, gateway, order());
    const seedFresh = counted.roundTrips;
    // A refund of a charged order: the same budget as a charge, one statement before Stripe, one after.
    counted.reset();
    const refundId = `bench-refund-${randomUUID()}`;
    await engine.processRefund({ orderId: input.orderId, refundId, amount: 500, reason: 'requested_by_customer' });
    const freshRefund = counted.roundTrips;
    counted.reset();
    await engine.processRefund({ orderId: input.orderId, refundId, amount: 500, reason: 'requested_by_customer' });
    const repeatedRefund = counted.roundTrips;

    // 2. Throughput against zero latency.
    const timed = async (label: string, run: () => Promise<void>) => {
      const t0 = performance.now();
      await run();
      const seconds = (performance.now() - t0) / 1000;
      return { label, charges: N, seconds: Math.round(seconds * 100) / 100, perSecond: Math.round(N / seconds) };
    };
    // One order at a time, ours against the seed's port: warmed up alike and interleaved in ten
    // rounds, so that neither meets a colder process, a smaller table or a quieter machine than the
    // other (run one after the other, whichever ran first lost ~10-25 % on this 2-CPU machine).
    const WARM_UP = 200;
    for (let i = 0; i < WARM_UP; i++) {
      await engine.processRequests([order()]);
      await seedStyleCharge(pool, gateway, order());
    }
    const elapsed = { ours: 0, seed: 0 };
    const ROUNDS = 10;
    for (let round = 0; round < ROUNDS; round++) {
      const size = Math.floor(N / ROUNDS) + (round < N % ROUNDS ? 1 : 0);
      let t0 = performance.now();
      for (let i = 0; i < size; i++) await engine.processRequests([order()]);
      elapsed.ours += performance.now() - t0;
      t0 = performance.now();
      for (let i = 0; i < size; i++) await seedStyleCharge(pool, gateway, order());
      elapsed.seed += performance.now() - t0;
    }
    const interleaved = (label: string, ms: number) => ({ label, charges: N, seconds: Math.round(ms / 10) / 100, perSecond: Math.round(N / (ms / 1000)) });
    const sequential = interleaved('processRequests, one order at a time', elapsed.ours);
    const batched = await timed('processRequests, batches of 10 (Stripe calls concurrent)', async () => {
      for (let i = 0; i < N; i += 10) await engine.processRequests(Array.from({ length: Math.min(10, N - i) }, order));
    });
    const parallel = await timed('4 batches of 10 in flight at once', async () => {
      let next = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (next < N) {
            const size = Math.min(10, N - next);
            next += size;
            await engine.processRequests(Array.from({ length: size }, order));
          }
        }),
      );
    });
    const seedSequential = interleaved('the seed’s algorithm, one order at a time (interleaved with ours)', elapsed.seed);
    // Mixed: N charges in batches of 10, and a partial refund of every fifth order (20 % refunds).
    const mixedT0 = performance.now();
    let refunds = 0;
    for (let i = 0; i < N; i += 10) {
      const batch = Array.from({ length: Math.min(10, N - i) }, order);
      await engine.processRequests(batch);
      for (const [k, o] of batch.entries()) {
        if ((i + k) % 5 !== 0) continue;
        await engine.processRefund({ orderId: o.orderId, refundId: 'r1', amount: 500, reason: null });
        refunds++;
      }
    }
    const mixedMs = performance.now() - mixedT0;
    const mixed = { label: `mixed: batches of 10 charges + ${refunds} refunds (20 %)`, charges: N, seconds: Math.round(mixedMs / 10) / 100, perSecond: Math.round((N + refunds) / (mixedMs / 1000)) };

    const doubleCharges = stripeFake.stats().doubleCharges;
    const report = {
      machine: { cpus: os.cpus().length, node: process.version },
      roundTrips: {
        freshChargeBatchOf1: fresh,
        repeatedDeliveryOfSettled: repeated,
        freshBatchOf10: batchOf10,
        requestChargeThenExecuteCharge: requestThenExecute,
        seedAlgorithmFreshCharge: seedFresh,
        freshRefund,
        repeatedRefundRequest: repeatedRefund,
      },
      throughput: [sequential, batched, parallel, seedSequential, mixed],
      doubleCharges,
    };
    if (args.json) console.log(JSON.stringify(report, null, 2));
    else {
      console.log(`bench:engine on ${report.machine.cpus} CPUs, Node ${report.machine.node}, PostgreSQL 18 (embedded), fake Stripe at 0 ms latency`);
      console.log('database round trips');
      console.log(`  fresh charge (request + claim, record)           ${fresh}`);
      console.log(`  repeated delivery of a settled operation         ${repeated}`);
      console.log(`  fresh batch of 10 orders                         ${batchOf10}`);
      console.log(`  requestCharge() then executeCharge()             ${requestThenExecute}`);
      console.log(`  the seed's algorithm, fresh charge               ${seedFresh}`);
      console.log(`  fresh refund (request + claim, record)           ${freshRefund}`);
      console.log(`  repeated refund request (settled)                ${repeatedRefund}`);
      console.log(`throughput (${N} charges each)`);
      for (const t of report.throughput) console.log(`  ${t.label.padEnd(58)} ${String(t.perSecond).padStart(6)} ops/s  (${t.seconds} s)`);
      console.log(`double charges at the fake Stripe: ${doubleCharges}`);
    }
    await pool.end();
  } finally {
    await stripeFake.close();
    await server.stop();
  }
}

await main();
