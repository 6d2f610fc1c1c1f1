// npm run bench:relay — the outbox relay's events per second on this machine (figures, not assertions):
// N unpublished outcome events swept by relayUnpublished through the real @aws-sdk/client-eventbridge
// to the project's fake PutEvents endpoint (0 ms latency), with one relay and with two overlapping.
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import pg from 'pg';
import { startFakeEventBridge } from '../local/fake-eventbridge/server.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { EventBridgePublisher, relayUnpublished } from '../lambdas/events/outbox.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';

const { values: args } = parseArgs({ options: { events: { type: 'string', default: '5000' }, json: { type: 'boolean', default: false } } });
const N = Number(args.events);

async function seed(pool: pg.Pool, n: number, batch: string) {
  // Settled operations and their unpublished events, generated in SQL (the guard trigger fires on UPDATE only).
  await pool.query(
    `WITH ops AS (
       INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id,
                                       attempts, first_attempted_at, settled_at, next_attempt_at)
       SELECT $2 || '-' || g, 1999, 'eur', 'cus_bench', 'pm_card_visa', 'succeeded', 'pi_' || g, 1, now(), now(), NULL
         FROM generate_series(1, $1::int) g
       RETURNING id, order_id, external_id
     )
     INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
     SELECT e.id, ops.id, 'Charge Succeeded',
            jsonb_build_object('version', 1, 'eventId', e.id, 'operationId', ops.id, 'orderId', ops.order_id,
                               'status', 'succeeded', 'amount', 1999, 'currency', 'eur', 'externalId', ops.external_id,
                               'reason', NULL, 'occurredAt', to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'))
       FROM (SELECT ops.*, uuidv7() AS event_id FROM ops) ops CROSS JOIN LATERAL (SELECT ops.event_id AS id) e`,
    [n, batch],
  );
}

async function main() {
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-relay-${process.pid}`) });
  const bus = await startFakeEventBridge();
  try {
    await createDatabase(server.adminUrl, 'bench');
    await migrate(server.urlFor('bench'), await loadMigrations());
    const pool = new pg.Pool({ connectionString: server.urlFor('bench'), max: 6 });
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' }, maxAttempts: 1 }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const runs: { label: string; events: number; seconds: number; perSecond: number; roundTrips: number; putEventsCalls: number }[] = [];
    const run = async (label: string, relays: number, pageSize: number) => {
      await seed(pool, N, `${label.replace(/\W+/g, '-')}`);
      bus.reset();
      const counted = countingDb(pool);
      const t0 = performance.now();
      const results = await Promise.all(Array.from({ length: relays }, () => relayUnpublished(counted, publisher, { pageSize })));
      const seconds = (performance.now() - t0) / 1000;
      const published = results.reduce((n, r) => n + r.published, 0);
      if (published !== N || bus.events().length !== N) throw new Error(`${label}: published ${published}, delivered ${bus.events().length}, expected ${N}`);
      runs.push({ label, events: N, seconds: Math.round(seconds * 100) / 100, perSecond: Math.round(N / seconds), roundTrips: counted.roundTrips, putEventsCalls: bus.calls().length });
    };
    await run('one relay, pages of 100', 1, 100);
    await run('one relay, pages of 10', 1, 10);
    await run('two overlapping relays, pages of 100', 2, 100);
    if (args.json) console.log(JSON.stringify({ machine: { cpus: os.cpus().length, node: process.version }, runs }, null, 2));
    else {
      console.log(`bench:relay — ${N} events per run, fake PutEvents at 0 ms, ${os.cpus().length} CPUs, Node ${process.version}`);
      for (const r of runs) {
        console.log(`  ${r.label.padEnd(40)} ${String(r.perSecond).padStart(6)} events/s  (${r.seconds} s, ${r.roundTrips} round trips, ${r.putEventsCalls} PutEvents calls)`);
      }
    }
    await pool.end();
  } finally {
    await bus.close();
    await server.stop();
  }
}

await main();
