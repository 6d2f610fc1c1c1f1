// Refund, capture and cancel_authorization requests on the charge queue (docs/producers.md#refund-requests-the-same-queue): the producer client puts them in the order's
// message group (fauxqs, real SQS protocol), the charge handler's batch routes them by `type` to the
// same engine, after the batch's charges; rejections are durable rows, never Stripe calls.
import { createHash } from 'node:crypto';
import type { Message } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { processChargeBatch, type ChargeBatchDeps } from '../../lambdas/charge/batch.ts';
import { parseQueueMessage, refundDeduplicationId } from '../../lambdas/payments/message.ts';
import { refundRequestMessage, sendAuthorizationRequest, sendChargeRequest, sendRefundRequest } from '../../lambdas/producer/client.ts';
import { main as produce } from '../../lambdas/producer/cli.ts';
import { InvalidChargeRequestError } from '../../lambdas/producer/errors.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { receiveMessages, settleBatch, toSqsEvent, type QueueRef } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

let db: TestDatabase;
let stripe: StripeHarness;
let sqs: LocalSqs;
let queue: QueueRef;

beforeAll(async () => {
  db = await createTestDatabase('refund_batch');
  stripe = await startStripe();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
});
afterAll(async () => {
  await sqs.stop();
  await stripe.close();
  await db.drop();
});
beforeEach(() => stripe.fake.reset());

const deps: () => ChargeBatchDeps = () => ({ db: db.pool, gateway: stripe.gateway, publisher: null, minTimeToCallMs: 1_000, random: () => 0.5 });
const plenty = { remainingMs: () => 60_000 };

/** Receive n messages one at a time (fauxqs hides a group while one is in flight), in queue order. */
async function receiveInQueueOrder(n: number): Promise<Message[]> {
  const got: Message[] = [];
  for (let tries = 0; got.length < n && tries < 10 * n; tries++) {
    for (const m of await receiveMessages(queue, 10, { attempts: 1 })) {
      got.push(m);
      await settleBatch(queue, [m], { batchItemFailures: [] });
    }
  }
  expect(got).toHaveLength(n);
  return got.sort((a, b) => (BigInt(a.Attributes!.SequenceNumber!) < BigInt(b.Attributes!.SequenceNumber!) ? -1 : 1));
}

async function rejected(messageId: string) {
  const { rows } = await db.pool.query('SELECT reason_code, reason, order_id FROM rejected_messages WHERE message_id = $1', [messageId]);
  return rows[0];
}

describe('the message contract', () => {
  it('a refund body routes to the refund schema; a charge body with or without "type":"charge" to the charge schema', () => {
    const charge = chargeOrder();
    expect(parseQueueMessage(JSON.stringify(charge))).toMatchObject({ ok: true, kind: 'charge' });
    expect(parseQueueMessage(JSON.stringify({ type: 'charge', ...charge }))).toMatchObject({ ok: true, kind: 'charge' });
    expect(parseQueueMessage(JSON.stringify({ type: 'refund', orderId: 'o-1', refundId: 'r-1', amount: 5, reason: 'duplicate' }))).toMatchObject({
      ok: true,
      kind: 'refund',
      request: { orderId: 'o-1', refundId: 'r-1', amount: 5, reason: 'duplicate' },
    });
    const bad = parseQueueMessage(JSON.stringify({ type: 'refund', orderId: 'o-1', refundId: 'r-1', amount: 0, reason: 'because', extra: 1 }));
    expect(bad).toMatchObject({ ok: false, code: 'invalid_body', orderId: 'o-1' });
    expect(!bad.ok && bad.reason).toMatch(/amount: must be positive/);
    expect(!bad.ok && bad.reason).toMatch(/reason: must be duplicate, fraudulent or requested_by_customer/);
    expect(parseQueueMessage(JSON.stringify({ type: 'capture', ...charge }))).toMatchObject({ ok: false, code: 'invalid_body' });
  });

  it('MessageGroupId = orderId, MessageDeduplicationId = hex SHA-256 of refund:{orderId}:{refundId}:{digest of amount and reason}', () => {
    const message = refundRequestMessage({ type: 'refund', orderId: 'order-9', refundId: 'rf-2', amount: 100 });
    expect(message.MessageGroupId).toBe('order-9');
    const digest = createHash('sha256').update(JSON.stringify([100, null])).digest('hex');
    expect(message.MessageDeduplicationId).toBe(createHash('sha256').update(`refund:order-9:rf-2:${digest}`).digest('hex'));
    expect(refundDeduplicationId({ orderId: 'order-9', refundId: 'rf-2', amount: 100 })).toBe(message.MessageDeduplicationId);
    expect(JSON.parse(message.MessageBody)).toEqual({ type: 'refund', orderId: 'order-9', refundId: 'rf-2', amount: 100 });
  });

  it('sendRefundRequest refuses an invalid refund without sending', async () => {
    await expect(sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: 'o 1', refundId: 'r', amount: -1 })).rejects.toBeInstanceOf(InvalidChargeRequestError);
  });
});

describe('the charge handler routes refunds', () => {
  it('charge, partial refund, duplicate refund id with another amount, over-refund, in one message group and one batch', async () => {
    const charge = chargeOrder({ amount: 1000 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-a', amount: 400, reason: 'requested_by_customer' });
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-b', amount: 600 });
    // Another refund id for more than is left: rejected.
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-c', amount: 1 });
    const messages = await receiveInQueueOrder(4);

    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(), plenty);

    expect(result.response).toEqual({ batchItemFailures: [] });
    expect(result.records.map((r) => (r.fate.kind === 'processed' ? r.fate.status : r.fate.kind))).toEqual(['succeeded', 'succeeded', 'succeeded', 'rejected']);
    expect(await rejected(messages[3]!.MessageId!)).toMatchObject({ reason_code: 'refund_rejected', reason: expect.stringMatching(/^exceeds_charge: /), order_id: charge.orderId });
    expect(stripe.fake.refunds({ orderId: charge.orderId }).map((r) => r.amount).sort()).toEqual([400, 600]);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_create')).toHaveLength(2);
  });

  it('the same refund id with another amount → refund_conflict, recorded, nothing sent', async () => {
    const charge = chargeOrder({ amount: 1000 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-x', amount: 100 });
    const first = await receiveInQueueOrder(2);
    expect((await processChargeBatch(toSqsEvent(first, queue).Records, deps(), plenty)).response.batchItemFailures).toEqual([]);
    // The same refund id again after the first is final, other amount: another deduplication id
    // (the id carries a digest of amount and reason), so SQS lets it through.
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-x', amount: 200 });
    const [late] = await receiveInQueueOrder(1);
    const result = await processChargeBatch(toSqsEvent([late!], queue).Records, deps(), plenty);
    expect(result.records[0]!.fate).toMatchObject({ kind: 'rejected', reasonCode: 'refund_conflict' });
    expect(await rejected(late!.MessageId!)).toMatchObject({ reason_code: 'refund_conflict' });
    expect(stripe.fake.refunds({ orderId: charge.orderId })).toHaveLength(1);
  });

  it('a refund of a declined charge in the same batch → rejected (charge_failed), acknowledged, Stripe never asked to refund', async () => {
    const charge = chargeOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-f', amount: 100 });
    const messages = await receiveInQueueOrder(2);
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(), plenty);
    expect(result.response.batchItemFailures).toEqual([]);
    expect(result.records[1]!.fate).toMatchObject({ kind: 'rejected', reasonCode: 'refund_rejected' });
    expect(await rejected(messages[1]!.MessageId!)).toMatchObject({ reason: expect.stringMatching(/^charge_failed: /) });
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_create')).toHaveLength(0);
  });

  /** Two orders charged through the batch; their refunds, one record each (two message groups), in one batch. */
  async function twoChargedOrdersAndTheirRefunds() {
    const charges = [chargeOrder({ amount: 900 }), chargeOrder({ amount: 900 })];
    for (const charge of charges) await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    expect((await processChargeBatch(toSqsEvent(await receiveInQueueOrder(2), queue).Records, deps(), plenty)).response.batchItemFailures).toEqual([]);
    for (const [i, charge] of charges.entries()) await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: `rf-${i}`, amount: 100 });
    return { orders: charges.map((c) => c.orderId), records: toSqsEvent(await receiveInQueueOrder(2), queue).Records };
  }
  const refundRow = async (orderId: string) =>
    (await db.pool.query(`SELECT status, created_at, settled_at FROM payment_operations WHERE order_id = $1 AND kind = 'refund'`, [orderId])).rows[0];

  it('refunds of different message groups are worked side by side (059974b): both Stripe calls in flight at once', async () => {
    const { orders, records } = await twoChargedOrdersAndTheirRefunds();
    // Both refund creates parked at the fake: reached only if the second starts before the first has its answer.
    const holds = orders.map((orderId) => stripe.fake.hold({ endpoint: 'refund_create', orderId }));
    const batch = processChargeBatch(records, deps(), plenty);
    await Promise.all(holds.map((h) => h.arrived));
    for (const h of holds) h.release();
    const result = await batch;
    expect(result.records.map((r) => r.fate.kind === 'processed' && r.fate.status)).toEqual(['succeeded', 'succeeded']);
  });

  it('refundConcurrency 1 (what bench:refund-batch compares against): one refund after another, the second requested only after the first is recorded', async () => {
    const { orders, records } = await twoChargedOrdersAndTheirRefunds();
    // Two idle connections: what overlaps is decided by the code under test, not by a connection being set up.
    await Promise.all([db.pool.query('SELECT pg_sleep(0.05)'), db.pool.query('SELECT pg_sleep(0.05)')]);
    const first = stripe.fake.hold({ endpoint: 'refund_create', orderId: orders[0]! });
    const batch = processChargeBatch(records, { ...deps(), refundConcurrency: 1 }, plenty);
    await first.arrived;
    // The first refund's Stripe call is in flight: the second refund is not even requested yet.
    expect(await refundRow(orders[1]!)).toBeUndefined();
    first.release();
    const result = await batch;
    expect(result.records.map((r) => r.fate.kind === 'processed' && r.fate.status)).toEqual(['succeeded', 'succeeded']);
    const [a, b] = [await refundRow(orders[0]!), await refundRow(orders[1]!)];
    // Database clock: the second refund's request statement ran after the first refund's outcome statement.
    expect(b.created_at.getTime()).toBeGreaterThanOrEqual(a.settled_at.getTime());
  });

  it('npm run produce -- --refund sends a refund request the handler works', async () => {
    const charge = chargeOrder({ amount: 800 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    const out: string[] = [];
    const err: string[] = [];
    const code = await produce(
      ['--refund', 'rf-cli', '--order', charge.orderId, '--amount', '300', '--reason', 'fraudulent', '--queue-url', sqs.queueUrl, '--endpoint', sqs.endpoint, '--region', sqs.region],
      {},
      { out: (l) => out.push(l), err: (l) => err.push(l) },
    );
    expect({ code, err }).toEqual({ code: 0, err: [] });
    expect(out[0]).toMatch(new RegExp(`^sent ${charge.orderId} `));
    const messages = await receiveInQueueOrder(2);
    expect(messages[1]!.Attributes?.MessageDeduplicationId).toBe(refundDeduplicationId({ orderId: charge.orderId, refundId: 'rf-cli', amount: 300, reason: 'fraudulent' }));
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(), plenty);
    expect(result.records.map((r) => r.fate.kind === 'processed' && r.fate.status)).toEqual(['succeeded', 'succeeded']);
    expect(stripe.fake.refunds({ orderId: charge.orderId })).toMatchObject([{ amount: 300, reason: 'fraudulent' }]);
    // A bad refund from the CLI: nothing sent, exit 2.
    const bad = await produce(['--refund', 'rf-bad', '--order', charge.orderId, '--amount', '3', '--reason', 'nope', '--queue-url', sqs.queueUrl, '--endpoint', sqs.endpoint], {}, { out: () => {}, err: (l) => err.push(l) });
    expect(bad).toBe(2);
  });
});

describe('captures and cancels of an authorization on the same queue', () => {
  it('authorize, refund before capture, partial capture, a second capture, a cancel, then a refund: one group, one batch, in queue order', async () => {
    const charge = { ...chargeOrder({ amount: 1000 }), capture: 'manual' as const };
    await sendChargeRequest(sqs.client, sqs.queueUrl, charge);
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-early', amount: 100 });
    await sendAuthorizationRequest(sqs.client, sqs.queueUrl, { type: 'capture', orderId: charge.orderId, amount: 700 });
    await sendAuthorizationRequest(sqs.client, sqs.queueUrl, { type: 'capture', orderId: charge.orderId, amount: 200 });
    await sendAuthorizationRequest(sqs.client, sqs.queueUrl, { type: 'cancel_authorization', orderId: charge.orderId });
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: charge.orderId, refundId: 'rf-late', amount: 700 });
    const messages = await receiveInQueueOrder(6);

    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(), plenty);

    expect(result.response).toEqual({ batchItemFailures: [] });
    expect(result.records.map((r) => (r.fate.kind === 'processed' ? r.fate.status : r.fate.kind))).toEqual(['succeeded', 'rejected', 'succeeded', 'rejected', 'rejected', 'succeeded']);
    // Each refusal is a durable row with the reason the producer can act on; nothing of it reached Stripe.
    expect(await rejected(messages[1]!.MessageId!)).toMatchObject({ reason_code: 'refund_rejected', reason: expect.stringMatching(/^not_captured: /) });
    expect(await rejected(messages[3]!.MessageId!)).toMatchObject({ reason_code: 'authorization_conflict', order_id: charge.orderId });
    expect(await rejected(messages[4]!.MessageId!)).toMatchObject({ reason_code: 'authorization_rejected', reason: expect.stringMatching(/^already_settled: .*it is captured/) });
    const [pi] = stripe.fake.paymentIntents().filter((p) => p.metadata.order_id === charge.orderId);
    expect(pi).toMatchObject({ status: 'succeeded', amount: 1000, amount_received: 700 });
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'capture')).toHaveLength(1);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'cancel')).toHaveLength(0);
    expect(stripe.fake.refunds({ orderId: charge.orderId }).map((r) => r.amount)).toEqual([700]);
    const { rows } = await db.pool.query(`SELECT kind, status, amount::int FROM payment_operations WHERE order_id = $1 ORDER BY created_at`, [charge.orderId]);
    expect(rows).toEqual([
      { kind: 'charge', status: 'succeeded', amount: 1000 },
      { kind: 'capture', status: 'succeeded', amount: 700 },
      { kind: 'refund', status: 'succeeded', amount: 700 },
    ]);
  });
});
