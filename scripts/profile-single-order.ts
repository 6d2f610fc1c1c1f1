// npx tsx scripts/profile-single-order.ts [charges]: where the time of ONE order at a time goes,
// this product's engine against the seed's port (scripts/seed-port.ts, as bench:engine runs it): each measured on the
// client (whole charge, the Stripe call alone) and on the server (pg_stat_statements: execution and
// planning time and WAL per statement), interleaved in ten rounds after the same warm-up.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startFakeStripe } from '../local/fake-stripe/server.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { ChargeEngine } from '../lambdas/payments/engine.ts';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { seedStyleCharge } from './seed-port.ts';

const N = Number(process.argv[2] ?? 2000);
const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `profile-single-${process.pid}`) });
const admin = new pg.Client({ connectionString: server.adminUrl });
await admin.connect();
await admin.query("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
await admin.query('ALTER SYSTEM SET pg_stat_statements.track_planning = on');
await admin.end();
await server.restart();
const fake = await startFakeStripe();
try {
  await createDatabase(server.adminUrl, 'bench');
  await migrate(server.urlFor('bench'), await loadMigrations());
  const pool = new pg.Pool({ connectionString: server.urlFor('bench'), max: 10 });
  await pool.query('CREATE EXTENSION pg_stat_statements');
  const gateway = new StripeGateway(createStripeClient({ apiKey: 'sk_test_bench', apiBase: fake.url, maxNetworkRetries: 0, timeoutMs: 5000 }));
  const engine = new ChargeEngine({ db: pool, gateway, actor: 'bench', concurrency: 10 });
  const order = (): ChargeInput => ({ orderId: `bench-${randomUUID()}`, amount: 1999, currency: 'eur', customerId: 'cus_bench', paymentMethod: 'pm_card_visa' });
  const stripeOnly = () =>
    gateway.createPaymentIntent({
      idempotencyKey: randomUUID(),
      amount: 1999,
      currency: 'eur',
      customerId: 'cus_bench',
      paymentMethod: 'pm_card_visa',
      metadata: { operation_id: randomUUID(), order_id: randomUUID(), key_generation: '0' },
    });
  for (let i = 0; i < 200; i++) {
    await engine.processRequests([order()]);
    await seedStyleCharge(pool, gateway, order());
    await stripeOnly();
  }
  await pool.query('SELECT pg_stat_statements_reset()');
  const ms = { ours: 0, seed: 0, stripe: 0 };
  for (let round = 0; round < 10; round++) {
    const size = Math.floor(N / 10);
    let t0 = performance.now();
    for (let i = 0; i < size; i++) await engine.processRequests([order()]);
    ms.ours += performance.now() - t0;
    t0 = performance.now();
    for (let i = 0; i < size; i++) await seedStyleCharge(pool, gateway, order());
    ms.seed += performance.now() - t0;
    t0 = performance.now();
    for (let i = 0; i < size; i++) await stripeOnly();
    ms.stripe += performance.now() - t0;
  }
  const n = Math.floor(N / 10) * 10;
  const per = (total: number) => `${(total / n).toFixed(3)} ms`;
  console.log(`${os.cpus().length} CPUs, ${n} charges each, interleaved: ours ${Math.round(n / (ms.ours / 1000))}/s (${per(ms.ours)}), seed's port ${Math.round(n / (ms.seed / 1000))}/s (${per(ms.seed)}), the Stripe call alone ${per(ms.stripe)}`);
  const { rows } = await pool.query<{ q: string; calls: string; exec: number; plan: number; wal: string }>(
    `SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 70) AS q, calls, total_exec_time AS exec, total_plan_time AS plan, wal_bytes AS wal
       FROM pg_stat_statements WHERE query ~* '^(WITH|INSERT INTO payment_operations|UPDATE payment_operations|SELECT status)' ORDER BY total_exec_time DESC LIMIT 8`,
  );
  console.log('per statement (server): exec ms, plan ms, WAL bytes');
  for (const r of rows) {
    const calls = Number(r.calls);
    console.log(`  ${r.q.padEnd(70)} ${(r.exec / calls).toFixed(3)}  ${(r.plan / calls).toFixed(3)}  ${Math.round(Number(r.wal) / calls)}`);
  }
  await pool.end();
} finally {
  await fake.close();
  await server.stop();
}
