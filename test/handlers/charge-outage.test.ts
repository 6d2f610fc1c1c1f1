// The database really stops (its own embedded PostgreSQL 18 server, stopped and restarted on the same
// port and data) while the exported charge handler works batches received from fauxqs:
//   - stopped before the batch statement → every record is in batchItemFailures; SQS redelivers them
//     after the restart and they settle, one charge each;
//   - stopped while Stripe is being called (after the batch statement committed) → the records are
//     acknowledged: their operations are durable, and after the lease the reconciler settles them by
//     replaying the same idempotency keys — still one charge each. A conflicting order in the same
//     batch could not get its rejected_messages row, so it alone (with its group) goes back to SQS.
import { randomUUID } from 'node:crypto';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { chargeRequestMessage, sendChargeRequests } from '../../lambdas/producer/client.ts';
import type { ChargeRequest } from '../../lambdas/payments/message.ts';
import { idempotencyKey } from '../../lambdas/payments/decisions.ts';
import { loadMigrations, migrate } from '../../lambdas/runtime/migrations.ts';
import { runReconcile } from '../../lambdas/reconcile/sweep.ts';
import { createDatabase, startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../../local/postgres.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { deliverOnce, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { chargeOrder } from '../support/orders.ts';

let server: EmbeddedPostgresHandle;
let dataDir: string;
let url: string;
let check: pg.Pool;
let stripe: StripeHarness;
let sqs: LocalSqs;
let queue: QueueRef;
let handler: SqsHandler;
let resetResources: () => Promise<void>;

// One server per test: the handle's stop() can be followed by one restart(), not by a second stop()
// (local/postgres.ts keeps a `stopped` flag); persistent, so that stop() keeps the data to restart.
async function startServer(): Promise<void> {
  dataDir = path.join(os.tmpdir(), `charge-outage-${process.pid}-${randomUUID()}`);
  server = await startEmbeddedPostgres({ dataDir, persistent: true });
  await createDatabase(server.adminUrl, 'charges');
  url = server.urlFor('charges');
  await migrate(url, await loadMigrations(path.resolve('migrations')));
  check = new pg.Pool({ connectionString: url, max: 2 });
  check.on('error', () => {}); // the test's own pool sees the stop too
  process.env.DATABASE_URL = url;
  await resetResources(); // the handler's container pool follows DATABASE_URL
}
async function stopServer(): Promise<void> {
  await resetResources();
  await check.end();
  await server.kill();
  await rm(dataDir, { recursive: true, force: true });
}

beforeAll(async () => {
  stripe = await startStripe();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
  Object.assign(process.env, {
    DB_CONNECT_TIMEOUT_MS: '1000',
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_outage',
    STRIPE_TIMEOUT_MS: '2000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  delete process.env.EVENT_BUS_NAME;
  handler = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
}, 120_000);
afterAll(async () => {
  await sqs.stop();
  await stripe.close();
});
beforeEach(startServer, 60_000);
afterEach(stopServer);

const order = (overrides: Partial<ChargeRequest> = {}): ChargeRequest => chargeOrder({ amount: 2500, currency: 'usd', customerId: 'cus_outage', ...overrides });
const succeededAtStripe = (orderId: string) => stripe.fake.paymentIntents({ orderId }).filter((pi) => pi.status === 'succeeded');

describe('the database stops during a batch', () => {
  it('stopped before the batch statement → every record in batchItemFailures; redelivered after the restart they settle, one charge each', async () => {
    const requests = Array.from({ length: 4 }, () => order());
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    await server.stop();

    const down = await deliverOnce(queue, handler);
    expect(down.messages).toHaveLength(4);
    expect(down.response!.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(down.messages.map((m) => m.MessageId).sort());
    expect(down.released).toHaveLength(4);
    expect(stripe.fake.requests()).toHaveLength(0);

    await server.restart();
    const up = await deliverOnce(queue, handler);
    expect(up.messages.map((m) => m.MessageId).sort()).toEqual(down.messages.map((m) => m.MessageId).sort());
    expect(up.messages.every((m) => m.Attributes!.ApproximateReceiveCount === '2')).toBe(true);
    expect(up.response).toEqual({ batchItemFailures: [] });
    for (const r of requests) expect(succeededAtStripe(r.orderId)).toHaveLength(1);
    expect((await deliverOnce(queue, handler)).messages).toHaveLength(0);
  });

  it('stopped while Stripe is called → durable records acknowledged, the conflict retried; after the restart: one charge per order', async () => {
    // An order on record with amount 2500, so that a later message for it with 9999 conflicts.
    const existing = order();
    await sendChargeRequests(sqs.client, sqs.queueUrl, [existing]);
    expect((await deliverOnce(queue, handler)).response).toEqual({ batchItemFailures: [] });

    const requests = [order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const conflicting = chargeRequestMessage({ ...existing, amount: 9999 });
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: conflicting.MessageBody, MessageGroupId: conflicting.MessageGroupId, MessageDeduplicationId: randomUUID() }));

    // Park the first order's create at Stripe; stop the database meanwhile; then let it go.
    const parked = stripe.fake.hold({ endpoint: 'create', orderId: requests[0]!.orderId });
    const turn = deliverOnce(queue, handler);
    await parked.arrived;
    await server.stop();
    parked.release();
    const result = await turn;

    expect(result.messages).toHaveLength(4);
    const conflictMessage = result.messages.find((m) => m.Body === conflicting.MessageBody)!;
    // Only the conflict (its reject row could not be written) goes back to SQS.
    expect(result.response).toEqual({ batchItemFailures: [{ itemIdentifier: conflictMessage.MessageId }] });
    for (const r of requests) expect(succeededAtStripe(r.orderId)).toHaveLength(1);

    await server.restart();
    const { rows: open } = await check.query(`SELECT id, status, lease_token FROM payment_operations WHERE order_id = ANY($1)`, [requests.map((r) => r.orderId)]);
    expect(open).toHaveLength(3);
    expect(open.every((op) => op.status === 'pending' && op.lease_token !== null)).toBe(true);

    // The conflict comes back and is rejected now.
    const redelivery = await deliverOnce(queue, handler);
    expect(redelivery.messages.map((m) => m.MessageId)).toEqual([conflictMessage.MessageId]);
    expect(redelivery.response).toEqual({ batchItemFailures: [] });
    expect((await check.query('SELECT reason_code FROM rejected_messages WHERE message_id = $1', [conflictMessage.MessageId])).rows).toEqual([{ reason_code: 'order_conflict' }]);

    // The leases expire (fast-forwarded here); the reconciler replays the same keys.
    await check.query(`UPDATE payment_operations SET lease_until = now(), next_attempt_at = now() WHERE order_id = ANY($1)`, [requests.map((r) => r.orderId)]);
    const db = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const summary = await runReconcile(
        {
          db,
          gateway: stripe.gateway,
          publisher: null,
          settings: { maxRequestsPerSecond: 100, maxSearchesPerSecond: 20, concurrency: 4, pageSize: 10, minTimeToCallMs: 1000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 },
        },
        { remainingMs: () => 60_000 },
      );
      expect(summary.byOutcome.succeeded).toBe(3);
    } finally {
      await db.end();
    }
    for (const r of requests) {
      expect(succeededAtStripe(r.orderId)).toHaveLength(1);
      const op = (await check.query('SELECT id, status FROM payment_operations WHERE order_id = $1', [r.orderId])).rows[0];
      expect(op.status).toBe('succeeded');
      const sent = stripe.fake.requests().filter((x) => x.endpoint === 'create' && x.operationId === op.id);
      expect(sent.map((x) => x.idempotencyKey)).toEqual([idempotencyKey(op.id, 0), idempotencyKey(op.id, 0)]);
      expect(sent[1]!.replayed).toBe(true);
    }
  });
});
