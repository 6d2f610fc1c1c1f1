// npm run bench:storage — what the pipeline's data costs, in figures (printed, never asserted):
//   1. N orders charged through the charge batch (lambdas/charge/batch.ts, the charge handler's core)
//      and the real engine against the fake Stripe, at the demo's payment-method shares (local/demo.ts:
//      88 % visa, 4 % mastercard, 3 % declined, 2 % insufficient funds; its 3 % `processing` are left
//      out: they stay open), 20 % of the succeeded orders refunded (the demo's `--refunds` share), 1 %
//      bodies a producer got wrong (rejected); every Stripe event the fake makes delivered signed to the
//      webhook path and applied inline, the outbox published to the fake EventBridge; one reconcile run;
//   2. bytes per charge, per table: heap, each index, TOAST (pg_table_size − heap: TOAST with the free
//      space and visibility maps), and WAL per charge (pg_current_wal_lsn before and after);
//   3. the same after retention (lambdas/payments/retention-store.ts, as the application role, the
//      default bounds): the data's clock is moved back by --age days (every time column, and each
//      outbox row's uuidv7 with it) rather than the wall clock forward — the database's own floor is
//      on its clock — then one retention run, then VACUUM FULL so sizes show what is kept;
//   4. a projection to 1,000 charges/s: per day and per month, without retention and with it (what is
//      kept for ever, and the steady-state size of what retention bounds).
// The machine is shared: timings are noisy; sizes and WAL are not (they depend on N a little, page
// granularity on small N).
import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { mkdir, writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { renderBarChart } from '../bench/svg-chart.ts';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { SQSRecord } from 'aws-lambda';
import pg from 'pg';
import { processChargeBatch } from '../lambdas/charge/batch.ts';
import { EventBridgePublisher } from '../lambdas/events/outbox.ts';
import { StripeEventApplier } from '../lambdas/payments/event-applier.ts';
import { runRetention } from '../lambdas/payments/retention-store.ts';
import { stripeGatewayFor } from '../lambdas/payments/stripe-gateway.ts';
import { runReconcile } from '../lambdas/reconcile/sweep.ts';
import { loadConfig, RETENTION_DEFAULTS } from '../lambdas/runtime/config.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { receiveWebhook } from '../lambdas/stripe-events/receive.ts';
import { startFakeEventBridge } from '../local/fake-eventbridge/server.ts';
import { startFakeStripe } from '../local/fake-stripe/server.ts';
import { WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { mulberry32 } from '../local/random.ts';
import { sqsRecord } from './bench-support.ts';

const { values: args } = parseArgs({
  options: {
    orders: { type: 'string', default: '2000' },
    age: { type: 'string', default: '40' },
    rate: { type: 'string', default: '1000' },
    json: { type: 'boolean', default: false },
    /** Measure with the erasure's optional customer index (what it costs a charge, in bytes and WAL). */
    'with-customer-index': { type: 'boolean', default: false },
    /** Also write the figures as an SVG chart (storage.svg) into this folder. */
    'svg-dir': { type: 'string' },
  },
});
const ORDERS = Number(args.orders);
const AGE_DAYS = Number(args.age);
const RATE = Number(args.rate);
const SECRET = 'whsec_bench_storage_0123456789';
const ROOT = path.resolve(import.meta.dirname, '..');
const TABLES = ['payment_operations', 'payment_operation_events', 'outcome_events', 'stripe_events', 'stripe_event_findings', 'rejected_messages', 'payment_operation_watches', 'customer_erasures'] as const;
/** How long retention keeps each bounded table's rows (the defaults): the window of its steady state. */
const WINDOW_DAYS: Partial<Record<(typeof TABLES)[number], number>> = {
  outcome_events: RETENTION_DEFAULTS.outboxDays,
  stripe_events: RETENTION_DEFAULTS.stripeEventDays,
  rejected_messages: RETENTION_DEFAULTS.rejectedBodyDays,
};
const SHARES: readonly (readonly [string, number])[] = [['pm_card_visa', 0.88], ['pm_card_mastercard', 0.04], ['pm_card_chargeDeclined', 0.03], ['pm_card_insufficientFunds', 0.02]];
const REFUND_SHARE = 0.2;
const REJECT_SHARE = 0.01;

const say = (line = '') => {
  if (!args.json) console.log(line);
};

export interface TableSize {
  readonly rows: number;
  readonly heap: number;
  readonly toast: number;
  readonly indexes: Readonly<Record<string, number>>;
  readonly total: number;
}
export type Sizes = Readonly<Record<string, TableSize>>;

async function sizes(pool: pg.Pool): Promise<Sizes> {
  const out: Record<string, TableSize> = {};
  for (const table of TABLES) {
    // A partitioned table (the audit trail, by month) holds nothing itself: its partitions are summed,
    // and a partitioned index is reported as the sum of its partitions' indexes.
    const { rows } = await pool.query<{ heap: string; toast: string; total: string; rows: number }>(
      `SELECT sum(pg_relation_size(t.relid)) AS heap, sum(pg_table_size(t.relid) - pg_relation_size(t.relid)) AS toast,
              sum(pg_total_relation_size(t.relid)) AS total, (SELECT count(*)::int FROM ${table}) AS rows
         FROM (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf AND relid <> $1::regclass
               UNION ALL SELECT $1::regclass WHERE (SELECT relkind FROM pg_class WHERE oid = $1::regclass) <> 'p') t`,
      [table],
    );
    const { rows: idx } = await pool.query<{ name: string; bytes: string }>(
      `SELECT c.relname AS name,
              CASE WHEN c.relkind = 'I' THEN (SELECT sum(pg_relation_size(p.relid)) FROM pg_partition_tree(i.indexrelid) p WHERE p.isleaf)
                   ELSE pg_relation_size(i.indexrelid) END AS bytes
         FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
        WHERE i.indrelid = $1::regclass ORDER BY c.relname`,
      [table],
    );
    out[table] = {
      rows: rows[0]!.rows,
      heap: Number(rows[0]!.heap),
      toast: Number(rows[0]!.toast),
      indexes: Object.fromEntries(idx.map((r) => [r.name, Number(r.bytes)])),
      total: Number(rows[0]!.total),
    };
  }
  return out;
}

const lsn = async (pool: pg.Pool) => (await pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
const walBetween = async (pool: pg.Pool, from: string, to: string) =>
  Number((await pool.query<{ n: string }>('SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn) AS n', [from, to])).rows[0]!.n);

const vacuumFull = async (pool: pg.Pool) => {
  for (const table of TABLES) await pool.query(`VACUUM (FULL, ANALYZE) ${table}`);
};

/** Per charge, rounded to the byte. */
function perCharge(s: Sizes, charges: number) {
  return Object.fromEntries(
    Object.entries(s).map(([table, t]) => [
      table,
      { rows: t.rows, heap: Math.round(t.heap / charges), toast: Math.round(t.toast / charges), indexes: Object.fromEntries(Object.entries(t.indexes).map(([k, v]) => [k, Math.round(v / charges)])), total: Math.round(t.total / charges) },
    ]),
  );
}

const human = (bytes: number) => {
  const units = ['B', 'kB', 'MB', 'GB', 'TB', 'PB'];
  let v = bytes;
  let u = 0;
  while (Math.abs(v) >= 1000 && u < units.length - 1) {
    v /= 1000;
    u++;
  }
  return `${v.toFixed(v >= 100 || u === 0 ? 0 : 1)} ${units[u]}`;
};

function context(): { remainingMs: () => number } {
  return { remainingMs: () => 60_000 };
}

async function main(): Promise<void> {
  const started = performance.now();
  const server = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-storage-pg-${process.pid}`) });
  const fake = await startFakeStripe();
  const bus = await startFakeEventBridge();
  let http: Server | null = null;
  let dispatcher: WebhookDispatcher | null = null;
  try {
    await createDatabase(server.adminUrl, 'storage');
    const url = server.urlFor('storage');
    await migrate(url, await loadMigrations(path.join(ROOT, 'migrations')));
    const pool = new pg.Pool({ connectionString: url, max: 6 });
    pool.on('error', () => {}); // an idle client's error when the server stops at the end
    if (args['with-customer-index']) await pool.query('CREATE INDEX payment_operations_by_customer ON payment_operations (customer_id)');
    const gateway = stripeGatewayFor({ apiKey: 'sk_test_bench_storage', apiBase: fake.url, timeoutMs: 10_000, maxNetworkRetries: 1 });
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const applier = new StripeEventApplier({ db: pool, gateway, actor: 'stripe-events' });
    http = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        void receiveWebhook(
          { method: req.method, body: Buffer.concat(chunks).toString('utf8'), headers: { 'stripe-signature': String(req.headers['stripe-signature'] ?? '') } },
          { secret: SECRET, maxBodyBytes: 256 * 1024 },
          { db: pool, applier, publisher },
        ).then((r) => res.writeHead(r.kind === 'recorded' ? 200 : r.kind === 'rejected' ? 400 : 503).end(), () => res.writeHead(503).end());
      });
    });
    await new Promise<void>((resolve) => http!.listen(0, '127.0.0.1', resolve));
    dispatcher = new WebhookDispatcher({ fake, endpoint: `http://127.0.0.1:${(http.address() as AddressInfo).port}/`, secret: SECRET, pollMs: 50 });
    dispatcher.start();

    const base = await sizes(pool);
    const walStart = await lsn(pool);

    // 1. The orders, ten to a batch (the event source's batch), their refunds in the next batch.
    const random = mulberry32(20261202);
    const pick = () => {
      let r = random();
      for (const [pm, share] of SHARES) if ((r -= share / SHARES.reduce((n, [, s]) => n + s, 0)) < 0) return pm;
      return SHARES[0]![0];
    };
    const orders = Array.from({ length: ORDERS }, (_, i) => ({
      orderId: `storage-${i}-${randomUUID().slice(0, 8)}`,
      amount: 100 + Math.floor(random() * 199) * 100 + (random() < 0.5 ? 99 : 0),
      currency: 'eur',
      customerId: `cus_storage${Math.floor(random() * 1e9)}`,
      paymentMethod: pick(),
    }));
    const deps = { db: pool, gateway, concurrency: 10, minTimeToCallMs: 39_000, publisher };
    let rejected = 0;
    const refundable: typeof orders = [];
    for (let i = 0; i < orders.length; i += 10) {
      const chunk = orders.slice(i, i + 10);
      const records: SQSRecord[] = chunk.map((o) => sqsRecord(o, o.orderId));
      if (random() < REJECT_SHARE * 10) {
        rejected++;
        records.push(sqsRecord({ orderId: `storage-bad-${i}`, amount: '19.99', currency: 'EUR', customerId: 'cus_storagebad', paymentMethod: 'pm_card_visa' }, `bad-${i}`));
      }
      await processChargeBatch(records, deps, context());
      for (const o of chunk) if ((o.paymentMethod === 'pm_card_visa' || o.paymentMethod === 'pm_card_mastercard') && random() < REFUND_SHARE) refundable.push(o);
      if (refundable.length >= 10 || i + 10 >= orders.length) {
        const refunds = refundable.splice(0).map((o) => sqsRecord({ type: 'refund', orderId: o.orderId, refundId: `r-${o.orderId}`, amount: Math.max(1, Math.floor(o.amount / 2)) }, o.orderId));
        if (refunds.length > 0) await processChargeBatch(refunds, deps, context());
      }
    }
    // Every event delivered and applied, then one reconcile run (what is left of the inbox, the relay).
    dispatcher.poll();
    await dispatcher.drain();
    await new Promise((resolve) => setTimeout(resolve, 200));
    dispatcher.poll();
    await dispatcher.drain();
    await runReconcile(
      {
        db: pool,
        gateway,
        publisher,
        settings: { maxRequestsPerSecond: 1e6, maxSearchesPerSecond: 1e6, concurrency: 8, pageSize: 100, minTimeToCallMs: 1_000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 },
        inboxDb: pool,
      },
      { remainingMs: () => 120_000 },
    );
    const walCharged = await lsn(pool);
    const asWritten = await sizes(pool);
    const { rows: statuses } = await pool.query<{ kind: string; status: string; n: number }>(`SELECT kind, status, count(*)::int AS n FROM payment_operations GROUP BY 1, 2 ORDER BY 1, 2`);
    const { rows: payloadBytes } = await pool.query<{ n: string }>(`SELECT coalesce(sum(pg_column_size(payload)), 0) AS n FROM stripe_events`);
    const { rows: auditNamingCustomer } = await pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM payment_operation_events WHERE detail::text LIKE '%cus_%'`);
    await vacuumFull(pool);
    const compacted = await sizes(pool);

    // 3. Retention: the data moved AGE_DAYS into the past, then one run as the application role.
    const client = await pool.connect();
    try {
      await client.query(`SET session_replication_role = replica`); // the guards are set aside for the move only (this session)
      await client.query(
        `UPDATE outcome_events o SET event_id = m.id, -- a stored payload carries no eventId (migrations/022); payload follows event_id
               
                created_at = o.created_at - $1::int * interval '1 day', published_at = o.published_at - $1::int * interval '1 day'
           FROM (SELECT event_id AS old,
                        (lpad(to_hex(floor(extract(epoch FROM created_at - $1::int * interval '1 day') * 1000)::bigint), 12, '0') || substr(replace(event_id::text, '-', ''), 13))::uuid AS id
                   FROM outcome_events) m
          WHERE o.event_id = m.old`,
        [AGE_DAYS],
      );
      await client.query(
        `UPDATE stripe_events SET received_at = received_at - $1::int * interval '1 day', stripe_created_at = stripe_created_at - $1::int * interval '1 day',
                                  applied_at = applied_at - $1::int * interval '1 day'`,
        [AGE_DAYS],
      );
      await client.query(`UPDATE rejected_messages SET received_at = received_at - $1::int * interval '1 day'`, [AGE_DAYS]);
      await client.query(`SET session_replication_role = origin`);
    } finally {
      client.release();
    }
    await vacuumFull(pool);
    const retentionSettings = loadConfig({ DATABASE_URL: url }).retention;
    const app = await pool.connect();
    let run;
    const walBeforeRetention = await lsn(pool);
    const t = performance.now();
    try {
      await app.query('SET ROLE charges_app');
      run = await runRetention(app, retentionSettings, () => new Date());
    } finally {
      await app.query('RESET ROLE');
      app.release();
    }
    const retentionMs = performance.now() - t;
    const walAfterRetention = await lsn(pool);
    await vacuumFull(pool);
    const afterRetention = await sizes(pool);
    await pool.end();

    // 4. Figures.
    const wal = await (async () => {
      const p = new pg.Pool({ connectionString: url, max: 1 });
      p.on('error', () => {}); // its client may still be closing when the server stops
      try {
        return { charging: await walBetween(p, walStart, walCharged), retention: await walBetween(p, walBeforeRetention, walAfterRetention) };
      } finally {
        await p.end();
      }
    })();
    const charges = ORDERS;
    const net = (s: Sizes): Sizes => Object.fromEntries(Object.entries(s).map(([k, v]) => {
      const b = base[k]!;
      return [k, { rows: v.rows, heap: v.heap - b.heap, toast: v.toast - b.toast, indexes: Object.fromEntries(Object.entries(v.indexes).map(([i, n]) => [i, n - (b.indexes[i] ?? 0)])), total: v.total - b.total }];
    }));
    const before = perCharge(net(compacted), charges);
    const after = perCharge(net(afterRetention), charges);
    const perDay = RATE * 86_400;
    const inboxPayloadPerCharge = Math.round(Number(payloadBytes[0]!.n) / charges);
    const projection = Object.fromEntries(
      TABLES.map((table) => {
        const b = before[table]!.total;
        const a = after[table]!.total;
        const window = WINDOW_DAYS[table];
        // The inbox keeps a payload STRIPE_EVENT_PAYLOAD_RETENTION_DAYS, the reduced row STRIPE_EVENT_RETENTION_DAYS.
        const payload = table === 'stripe_events' ? Math.min(b - a, inboxPayloadPerCharge) : 0;
        return [table, {
          withoutRetentionPerDay: b * perDay,
          withoutRetentionPerMonth: b * perDay * 30,
          withRetentionKeptPerDay: a * perDay,
          withRetentionKeptPerMonth: a * perDay * 30,
          // What retention bounds, at its steady state: the rows of the window, whole.
          steadyStateWindow: window === undefined ? 0 : (b - a - payload) * perDay * window + payload * perDay * RETENTION_DEFAULTS.stripeEventPayloadDays,
        }];
      }),
    );
    const totals = {
      beforePerCharge: Object.values(before).reduce((n, t) => n + t.total, 0),
      afterPerCharge: Object.values(after).reduce((n, t) => n + t.total, 0),
      walPerCharge: Math.round(wal.charging / charges),
      retentionWalPerCharge: Math.round(wal.retention / charges),
    };
    const report = {
      orders: ORDERS,
      operations: statuses,
      rejected,
      auditLinesNamingACustomer: auditNamingCustomer[0]!.n,
      inboxPayloadBytesPerCharge: inboxPayloadPerCharge,
      asWrittenPerCharge: perCharge(net(asWritten), charges),
      beforeRetentionPerCharge: before,
      afterRetentionPerCharge: after,
      retention: { removed: run.removed, batches: run.batches, unfinished: run.unfinished, ms: Math.round(retentionMs), rowsPerSecond: Math.round(Object.values(run.removed).reduce((n, x) => n + x, 0) / Math.max(0.001, retentionMs / 1000)), settings: retentionSettings, agedDays: AGE_DAYS },
      wal,
      totals,
      projection: { chargesPerSecond: RATE, byTable: projection },
      durationMs: Math.round(performance.now() - started),
    };
    if (args['svg-dir']) {
      await mkdir(args['svg-dir'], { recursive: true });
      const shown = Object.keys(before).filter((t) => before[t]!.total > 0 || after[t]!.total > 0);
      await writeFile(
        path.join(args['svg-dir'], 'storage.svg'),
        renderBarChart({
          title: 'Bytes per charge, by table, before and after retention',
          description: `npm run bench:storage, ${ORDERS} orders (heap, TOAST and indexes after VACUUM FULL; retention with the default bounds). All tables: ${totals.beforePerCharge} bytes per charge before, ${totals.afterPerCharge} after.`,
          unit: 'B',
          series: [{ name: 'before retention' }, { name: 'after retention' }],
          rows: shown.map((t) => ({ label: t, values: [before[t]!.total, after[t]!.total] })),
        }),
      );
    }
    if (args.json) {
      console.log(JSON.stringify(report, null, 2));
      return;
    }
    say(`bench:storage — ${ORDERS} orders (${statuses.map((s) => `${s.n} ${s.kind} ${s.status}`).join(', ')}; ${rejected} rejected bodies)`);
    say(`WAL while charging: ${human(wal.charging)} = ${totals.walPerCharge} B per charge; retention's own WAL: ${totals.retentionWalPerCharge} B per charge`);
    say(`audit lines naming a customer id: ${report.auditLinesNamingACustomer}; minimized inbox payloads: ${inboxPayloadPerCharge} B per charge (pg_column_size)`);
    say();
    say('bytes per charge (after VACUUM FULL)        before retention        after retention');
    say('table / part                              rows   bytes/charge       rows   bytes/charge');
    for (const table of TABLES) {
      const b = before[table]!;
      const a = after[table]!;
      say(`${table.padEnd(40)}${String(b.rows).padStart(6)} ${String(b.total).padStart(10)}     ${String(a.rows).padStart(8)} ${String(a.total).padStart(10)}`);
      say(`  heap${' '.repeat(36)}${' '.repeat(7)}${String(b.heap).padStart(10)}     ${' '.repeat(9)}${String(a.heap).padStart(10)}`);
      if (b.toast || a.toast) say(`  toast (+ fsm, vm)${' '.repeat(23)}${' '.repeat(7)}${String(b.toast).padStart(10)}     ${' '.repeat(9)}${String(a.toast).padStart(10)}`);
      for (const [index, n] of Object.entries(b.indexes)) say(`  ${index.slice(0, 38).padEnd(38)}${' '.repeat(7)}${String(n).padStart(10)}     ${' '.repeat(9)}${String(a.indexes[index] ?? 0).padStart(10)}`);
    }
    say(`${'all tables'.padEnd(40)}       ${String(totals.beforePerCharge).padStart(10)}     ${' '.repeat(9)}${String(totals.afterPerCharge).padStart(10)}`);
    say();
    say(`retention: ${JSON.stringify(run.removed)} in ${run.batches} batches, ${Math.round(retentionMs)} ms (${report.retention.rowsPerSecond} rows/s; noisy: shared machine)`);
    say();
    say(`projection at ${RATE} charges/s (${(perDay / 1e6).toFixed(1)} million charges a day; the Stripe events' window counts the payload for ${RETENTION_DEFAULTS.stripeEventPayloadDays} days and the reduced row for ${RETENTION_DEFAULTS.stripeEventDays}):`);
    say('table                                   no retention: /day    /month    | kept for ever: /day    /month  | retention window, steady');
    for (const table of TABLES) {
      const p = projection[table]!;
      say(`${table.padEnd(40)}${human(p.withoutRetentionPerDay).padStart(12)}${human(p.withoutRetentionPerMonth).padStart(10)}    | ${human(p.withRetentionKeptPerDay).padStart(12)}${human(p.withRetentionKeptPerMonth).padStart(10)}   | ${p.steadyStateWindow ? human(p.steadyStateWindow) : '-'}`);
    }
    const sum = (f: (p: (typeof projection)[string]) => number) => Object.values(projection).reduce((n, p) => n + f(p), 0);
    say(`${'all'.padEnd(40)}${human(sum((p) => p.withoutRetentionPerDay)).padStart(12)}${human(sum((p) => p.withoutRetentionPerMonth)).padStart(10)}    | ${human(sum((p) => p.withRetentionKeptPerDay)).padStart(12)}${human(sum((p) => p.withRetentionKeptPerMonth)).padStart(10)}   | ${human(sum((p) => p.steadyStateWindow))}`);
    say(`WAL at ${RATE} charges/s: ${human(totals.walPerCharge * perDay)} a day`);
  } finally {
    if (dispatcher) await dispatcher.stop();
    if (http) await new Promise<void>((resolve) => http!.close(() => resolve()));
    await bus.close();
    await fake.close();
    await server.stop();
  }
}

await main();
