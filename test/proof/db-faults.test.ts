// Database faults under the REAL charge handler (configured from the environment) with batches
// received from fauxqs, and the fake Stripe behind the real SDK:
//   - the database unreachable when the function starts (a cold container, nothing listening);
//   - the connection of the batch's request statement dropped (pg_terminate_backend) mid-statement;
//   - the connection of the outcome statement dropped after Stripe was called;
//   - a statement timeout on either statement (rows locked by another session, DB_STATEMENT_TIMEOUT_MS).
// Each time: every record is durable or in batchItemFailures, never neither; SQS redelivers the
// failed ones; the reconciler settles what was left open; and the invariant checker, against the
// fake's ground truth, finds one charge per order, nothing lost, every outcome with its trail.
// Refund requests ride in the batches whose request statements fail (database unreachable, a
// statement timeout): each must come back from SQS too — acknowledged without its refund operation
// or rejection, it would be gone (the checker's lost_refund; nothing else would tell).
import { randomUUID } from 'node:crypto';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import type { ChargeRequest, RefundRequest } from '../../lambdas/payments/message.ts';
import { sendChargeRequests, sendRefundRequest } from '../../lambdas/producer/client.ts';
import { checkInvariants, formatReport, type SentRefund } from '../../local/invariants.ts';
import { freePort } from '../../local/postgres.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { deliverOnce, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { chargeOrder } from '../support/orders.ts';

const APP = 'charge-under-test';

let db: TestDatabase;
let stripe: StripeHarness;
let sqs: LocalSqs;
let queue: QueueRef;
let handler: SqsHandler;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('db_faults');
  stripe = await startStripe();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    DB_APPLICATION_NAME: APP,
    DB_CONNECT_TIMEOUT_MS: '1000',
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_db_faults',
    STRIPE_TIMEOUT_MS: '2000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  delete process.env.EVENT_BUS_NAME;
  handler = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
}, 60_000);
afterAll(async () => {
  await resetResources?.();
  await sqs?.stop();
  await stripe?.close();
  await db?.drop();
});
beforeEach(async () => {
  stripe.fake.reset();
  delete process.env.DB_STATEMENT_TIMEOUT_MS;
  process.env.DATABASE_URL = db.url;
  await resetResources();
});

const order = (overrides: Partial<ChargeRequest> = {}): ChargeRequest => chargeOrder({ orderId: `dbf-${randomUUID()}`, amount: 4200, customerId: 'cus_db_faults', ...overrides });

/** Orders charged before the fault (one batch, the database up): what the refunds of a test refund. */
async function chargedOrders(n: number): Promise<ChargeRequest[]> {
  const requests = Array.from({ length: n }, () => order());
  await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
  const turn = await deliverOnce(queue, handler);
  expect(turn.response).toEqual({ batchItemFailures: [] });
  for (const r of requests) expect(stripe.fake.paymentIntents({ orderId: r.orderId }).map((pi) => pi.status)).toEqual(['succeeded']);
  return requests;
}

/** The fake's newest request so far: `requests(since)` are the ones after it. */
const lastRequestSeq = () => stripe.fake.requests().at(-1)?.seq ?? 0;

/** A refund request of each order, through the producer client (its own message group: the order's). */
async function sendRefunds(orders: readonly ChargeRequest[]): Promise<RefundRequest[]> {
  const refunds = orders.map((o): RefundRequest => ({ type: 'refund', orderId: o.orderId, refundId: `rf-${randomUUID()}`, amount: 1200, reason: 'requested_by_customer' }));
  for (const refund of refunds) await sendRefundRequest(sqs.client, sqs.queueUrl, refund);
  return refunds;
}

async function sendRaw(body: string, groupId: string): Promise<void> {
  await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: body, MessageGroupId: groupId, MessageDeduplicationId: randomUUID() }));
}

/** A session that blocks every write to payment_operations until released (a long migration, a stuck admin). */
async function lockOperations(): Promise<{ release(): Promise<void> }> {
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  await client.query('BEGIN');
  await client.query('LOCK TABLE payment_operations IN EXCLUSIVE MODE');
  return {
    async release() {
      await client.query('ROLLBACK').catch(() => {});
      await client.end();
    },
  };
}

/** The handler's backends waiting on a lock (i.e. stuck inside one of its statements). */
async function blockedHandlerBackends(): Promise<number[]> {
  for (let i = 0; i < 200; i++) {
    const { rows } = await db.pool.query<{ pid: number }>(
      `SELECT pid FROM pg_stat_activity WHERE application_name = $1 AND datname = current_database() AND wait_event_type = 'Lock'`,
      [APP],
    );
    if (rows.length > 0) return rows.map((r) => r.pid);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('the handler never blocked on the lock');
}

const terminate = (pids: number[]) => db.pool.query('SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid', [pids]);

/** SQS redelivers until the queue is empty (each failed record comes back at once: visibility 0). */
async function drainQueue(): Promise<number> {
  let turns = 0;
  for (;;) {
    const turn = await deliverOnce(queue, handler);
    if (turn.messages.length === 0) return turns;
    turns++;
    if (turns > 20) throw new Error('the queue does not drain');
  }
}

/** The reconciler, until nothing is open: leases expired and backoffs elapsed by fiat. */
async function reconcileUntilSettled(orderIds: string[]): Promise<void> {
  const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test-reconciler' });
  for (let round = 0; round < 10; round++) {
    await db.pool.query(
      `UPDATE payment_operations SET lease_until = CASE WHEN lease_token IS NULL THEN NULL ELSE now() END, next_attempt_at = now()
        WHERE order_id = ANY($1) AND status IN ('pending', 'unknown') AND review_reason IS NULL`,
      [orderIds],
    );
    if ((await engine.reconcileDue(100)).length === 0) return;
  }
}

async function expectInvariants(orderIds: string[], rejectedBodies: string[], refunds: readonly SentRefund[] = []): Promise<void> {
  await reconcileUntilSettled(orderIds);
  const report = await checkInvariants({
    db: db.pool,
    paymentIntents: stripe.fake.paymentIntents(),
    refunds: stripe.fake.refunds(),
    sentOrderIds: orderIds,
    sentRefunds: refunds,
    orderIds,
    requireQuiescent: true,
  });
  expect(report.violations, formatReport(report)).toEqual([]);
  expect(report.byStatus.succeeded).toBe(new Set(orderIds).size + refunds.length);
  // Each refund made once at Stripe, by its own operation.
  for (const r of refunds) expect(stripe.fake.refunds({ orderId: r.orderId }).map((x) => [x.amount, x.status])).toEqual([[1200, 'succeeded']]);
  expect(stripe.fake.stats().doubleCharges).toBe(0);
  // Each rejected body has exactly one row, however many times SQS delivered it.
  expect((await db.pool.query('SELECT count(*)::int AS n FROM rejected_messages WHERE raw_body = ANY($1)', [rejectedBodies])).rows[0].n).toBe(rejectedBodies.length);
}

/**
 * Every record of a turn: durable (its operation — a refund's own, by order and refund id — or a
 * rejected row for its message) or in batchItemFailures.
 */
async function expectDurableOrRetried(turn: Awaited<ReturnType<typeof deliverOnce>>): Promise<void> {
  const failed = new Set(turn.response!.batchItemFailures.map((f) => f.itemIdentifier));
  for (const m of turn.messages) {
    if (failed.has(m.MessageId!)) continue;
    const rejected = await db.pool.query('SELECT 1 FROM rejected_messages WHERE message_id = $1', [m.MessageId]);
    let body: { type?: unknown; orderId?: unknown; refundId?: unknown } = {};
    try {
      body = JSON.parse(m.Body!) as typeof body;
    } catch {}
    const op =
      typeof body.orderId !== 'string'
        ? { rowCount: 0 }
        : body.type === 'refund'
          ? await db.pool.query(`SELECT 1 FROM payment_operations WHERE order_id = $1 AND kind = 'refund' AND refund_id = $2`, [body.orderId, body.refundId])
          : await db.pool.query(`SELECT 1 FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`, [body.orderId]);
    expect((rejected.rowCount ?? 0) + (op.rowCount ?? 0), `acknowledged but not durable: ${m.Body}`).toBeGreaterThan(0);
  }
}

describe('database faults under the charge handler', () => {
  it('unreachable when the function starts (cold container, nothing listening) → every record retried, refunds too; after it is back, one charge and one refund each', async () => {
    const charged = await chargedOrders(2);
    const since = lastRequestSeq(); // the charges' requests came before the fault
    const requests = [order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const refunds = await sendRefunds(charged);
    const poison = `{"not":"a charge","id":"${randomUUID()}"}`;
    await sendRaw(poison, 'poison-cold');
    process.env.DATABASE_URL = `postgres://postgres:postgres@127.0.0.1:${await freePort()}/nothing`;
    await resetResources();

    const down = await deliverOnce(queue, handler);
    expect(down.messages).toHaveLength(6);
    expect(down.response!.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(down.messages.map((m) => m.MessageId!).sort());
    expect(stripe.fake.requests(since)).toHaveLength(0); // nothing can have been charged or refunded: nothing was durable

    process.env.DATABASE_URL = db.url;
    await resetResources();
    expect(await drainQueue()).toBeGreaterThan(0);
    await expectInvariants([...charged, ...requests].map((r) => r.orderId), [poison], refunds);
  });

  it('the request statement’s connection is killed mid-statement → the batch is retried, then settles', async () => {
    const requests = [order(), order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const lock = await lockOperations();
    const turn = deliverOnce(queue, handler);
    await terminate(await blockedHandlerBackends());
    await lock.release();
    const result = await turn;
    await expectDurableOrRetried(result);
    expect(result.response!.batchItemFailures).toHaveLength(requests.length);
    expect(stripe.fake.requests()).toHaveLength(0);
    await drainQueue();
    await expectInvariants(requests.map((r) => r.orderId), []);
  });

  it('the outcome statement’s connection is killed after Stripe charged → acknowledged (durable), settled by the reconciler with the same keys', async () => {
    const requests = [order(), order(), order()];
    const conflictWith = order();
    await sendChargeRequests(sqs.client, sqs.queueUrl, [conflictWith]);
    expect((await deliverOnce(queue, handler)).response).toEqual({ batchItemFailures: [] });
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const conflicting = JSON.stringify({ ...conflictWith, amount: 1 });
    await sendRaw(conflicting, conflictWith.orderId);

    // Park one create at Stripe (the claim is committed by then), lock the table, let Stripe answer:
    // the outcome statement blocks on the lock, and its connection is killed there.
    const parked = stripe.fake.hold({ endpoint: 'create', orderId: requests[0]!.orderId });
    const turn = deliverOnce(queue, handler);
    await parked.arrived;
    const lock = await lockOperations();
    parked.release();
    await terminate(await blockedHandlerBackends());
    await lock.release();
    const result = await turn;
    await expectDurableOrRetried(result);
    // The valid records are durable: acknowledged whatever their status (the database is the retry loop).
    const failedIds = new Set(result.response!.batchItemFailures.map((f) => f.itemIdentifier));
    const validMessages = result.messages.filter((m) => requests.some((r) => m.Body!.includes(r.orderId)));
    expect(validMessages.every((m) => !failedIds.has(m.MessageId!))).toBe(true);
    for (const r of requests) expect(stripe.fake.paymentIntents({ orderId: r.orderId })).toHaveLength(1);
    await drainQueue();
    await expectInvariants([...requests, conflictWith].map((r) => r.orderId), [conflicting]);
  });

  it('a statement timeout on the request statement (rows locked elsewhere) → retried, charges and refunds, nothing sent; later settled', async () => {
    const charged = await chargedOrders(2);
    const since = lastRequestSeq();
    process.env.DB_STATEMENT_TIMEOUT_MS = '300';
    await resetResources();
    const requests = [order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const refunds = await sendRefunds(charged);
    const lock = await lockOperations();
    const result = await deliverOnce(queue, handler);
    await lock.release();
    await expectDurableOrRetried(result);
    // The batch statement of the charges and each refund's own request statement timed out.
    expect(result.messages).toHaveLength(4);
    expect(result.response!.batchItemFailures.map((f) => f.itemIdentifier).sort()).toEqual(result.messages.map((m) => m.MessageId!).sort());
    expect(stripe.fake.requests(since)).toHaveLength(0);
    await drainQueue();
    await expectInvariants([...charged, ...requests].map((r) => r.orderId), [], refunds);
  });

  it('a statement timeout on the outcome statement → acknowledged (durable), one charge each after the reconciler', async () => {
    process.env.DB_STATEMENT_TIMEOUT_MS = '300';
    await resetResources();
    const requests = [order(), order(), order({ paymentMethod: 'pm_card_chargeDeclined' })];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const parked = stripe.fake.hold({ endpoint: 'create', orderId: requests[0]!.orderId });
    const turn = deliverOnce(queue, handler);
    await parked.arrived;
    const lock = await lockOperations();
    parked.release();
    const result = await turn;
    await lock.release();
    await expectDurableOrRetried(result);
    expect(result.response!.batchItemFailures).toEqual([]);
    await drainQueue();
    const orderIds = requests.map((r) => r.orderId);
    await reconcileUntilSettled(orderIds);
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), sentOrderIds: orderIds, orderIds, requireQuiescent: true });
    expect(report.violations, formatReport(report)).toEqual([]);
    expect(report.byStatus).toMatchObject({ succeeded: 2, failed: 1 });
  });
});
