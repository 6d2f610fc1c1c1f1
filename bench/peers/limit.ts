// The ceiling: the two statements a charge cannot avoid — one durable write before the Stripe call,
// one after — and nothing else, at the contestants' concurrency (pollers × batches of 10, or of 1 for
// the single-order runs; the calls of a batch concurrent) against the same PostgreSQL and a fake Stripe at the same latency.
// No lease, no audit trail, no outbox, no fence, no error handling: not a design, a yardstick.
import pg from 'pg';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import { createDatabase } from '../../local/postgres.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import { cpuMeter } from './metering.ts';
import type { Workload } from './schedule.ts';

export interface LimitResult {
  readonly latencyMs: number;
  readonly batchSize: number;
  readonly chargesPerSecond: number;
  readonly walBytesPerCharge: number;
  readonly roundTripsPerCharge: number;
  /** CPU per charge of this process and of the PostgreSQL server (null where /proc cannot be read), as the contestants' (metering.ts cpuMeter). */
  readonly rigCpuMsPerCharge: number;
  readonly serverCpuMsPerCharge: number | null;
}

export async function runLimit(adminUrl: string, workload: Workload, latencyMs: number, pollers: number, stripeTimeoutMs: number, batchSize = 10): Promise<LimitResult> {
  const name = `limit_${process.pid}_${latencyMs}_${batchSize}_${Date.now() % 100000}`;
  await createDatabase(adminUrl, name);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const pool = new pg.Pool({ connectionString: url.toString(), max: pollers * 2, application_name: 'bench-limit' });
  pool.on('error', () => {}); // an idle connection cut by the DROP DATABASE below
  const fake = await startFakeStripe({ latencyMs });
  const stripe = createStripeClient({ apiKey: 'sk_test_limit', apiBase: fake.url, timeoutMs: stripeTimeoutMs, maxNetworkRetries: 0 });
  let roundTrips = 0;
  try {
    await pool.query('CREATE TABLE limit_charges (order_id text PRIMARY KEY, status text NOT NULL, external_id text)');
    const lsn = (await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
    const orders = [...workload.orders];
    let next = 0;
    const cpu = cpuMeter(pool);
    await cpu.start();
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: pollers }, async () => {
        while (next < orders.length) {
          const batch = orders.slice(next, next + batchSize);
          next += batch.length;
          roundTrips += 2;
          await pool.query(`INSERT INTO limit_charges (order_id, status) SELECT unnest($1::text[]), 'pending'`, [batch.map((o) => o.orderId)]);
          const results = await Promise.all(
            batch.map((o) =>
              stripe.paymentIntents.create(
                { amount: o.amount, currency: o.currency, customer: o.customerId, payment_method: o.paymentMethod, confirm: true, off_session: true, metadata: { order_id: o.orderId } },
                { idempotencyKey: o.orderId },
              ),
            ),
          );
          await pool.query(
            `UPDATE limit_charges l SET status = u.status, external_id = u.id FROM unnest($1::text[], $2::text[], $3::text[]) AS u(order_id, status, id) WHERE l.order_id = u.order_id`,
            [batch.map((o) => o.orderId), results.map((r) => r.status), results.map((r) => r.id)],
          );
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    const used = await cpu.read();
    const wal = (await pool.query<{ bytes: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS bytes', [lsn])).rows[0]!.bytes;
    return { latencyMs, batchSize, chargesPerSecond: Math.round(orders.length / seconds), walBytesPerCharge: Number(wal) / orders.length, roundTripsPerCharge: roundTrips / orders.length,
      rigCpuMsPerCharge: used.rigMs / orders.length,
      serverCpuMsPerCharge: used.serverMs === null ? null : used.serverMs / orders.length,
    };
  } finally {
    await fake.close();
    await pool.end();
    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  }
}
