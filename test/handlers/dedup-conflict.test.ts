// What SQS FIFO deduplication lets through, end to end: requests sent with the producer client to a
// fauxqs FIFO queue (SQS's own 5-minute deduplication), delivered to the exported charge handler as
// the event source mapping would, charged through the real stripe SDK against the fake Stripe, on
// real PostgreSQL. An identical repeat is dropped by SQS; a conflicting one — same order or refund
// id, other parameters — must reach the handler and be recorded, never vanish
// (docs/producers.md#deduplication-ids).
import { readFileSync } from 'node:fs';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  chargeParametersDigest,
  deduplicationId,
  legacyDeduplicationId,
  legacyRefundDeduplicationId,
  refundDeduplicationId,
  type ChargeRequest,
} from '../../lambdas/payments/message.ts';
import { chargeRequestMessage, refundRequestMessage, sendChargeRequest, sendRefundRequest } from '../../lambdas/producer/client.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { deliverOnce, receiveMessages, settleBatch, toSqsEvent, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { processChargeBatch } from '../../lambdas/charge/batch.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;
let sqs: LocalSqs;
let queue: QueueRef;
let handler: SqsHandler;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('dedup_conflict');
  stripe = await startStripe();
  bus = await startFakeEventBridge();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_dedup_conflict',
    STRIPE_TIMEOUT_MS: '2000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    EVENT_BUS_NAME: 'charge-outcomes',
    EVENTS_ENDPOINT: bus.url,
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  handler = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources();
  await sqs.stop();
  await bus.close();
  await stripe.close();
  await db.drop();
});
beforeEach(() => {
  stripe.fake.reset();
  bus.reset();
});

/** Deliver until the queue is empty (fauxqs shows one message of a group at a time); the number delivered. */
async function drain(): Promise<number> {
  let delivered = 0;
  for (let turn = 0; turn < 20; turn++) {
    const { messages, released } = await deliverOnce(queue, handler);
    expect(released).toEqual([]);
    if (messages.length === 0) return delivered;
    delivered += messages.length;
  }
  throw new Error('queue did not drain in 20 turns');
}

const charges = (orderId: string) => stripe.fake.paymentIntents({ orderId }).filter((pi) => pi.status === 'succeeded');
const conflicts = async (orderId: string) =>
  (await db.pool.query<{ reason_code: string }>('SELECT reason_code FROM rejected_messages WHERE order_id = $1 ORDER BY received_at', [orderId])).rows.map((r) => r.reason_code);

describe('deduplication ids', () => {
  it('are equal for identical requests (metadata key order aside) and differ when any identifying parameter differs', () => {
    const base: ChargeRequest = { ...chargeOrder(), description: 'Order 1', metadata: { a: '1', b: '2' } };
    expect(deduplicationId({ ...base, metadata: { b: '2', a: '1' } })).toBe(deduplicationId(base));
    expect(deduplicationId({ ...base, type: 'charge' } as ChargeRequest)).toBe(deduplicationId(base));
    const variants: ChargeRequest[] = [
      { ...base, amount: base.amount + 1 },
      { ...base, currency: 'usd' },
      { ...base, customerId: 'cus_other' },
      { ...base, paymentMethod: 'pm_card_mastercard' },
      { ...base, description: 'Order 2' },
      { ...base, statementDescriptorSuffix: 'ORDER' },
      { ...base, metadata: { a: '1', b: '3' } },
      { ...base, orderId: `${base.orderId}-x` },
    ];
    const ids = new Set([base, ...variants].map((r) => deduplicationId(r)));
    expect(ids.size).toBe(variants.length + 1);
    for (const id of ids) expect(id).toMatch(/^[0-9a-f]{64}$/);
    expect(chargeParametersDigest(base)).toMatch(/^[0-9a-f]{64}$/);
    expect(deduplicationId(base)).not.toBe(legacyDeduplicationId(base.orderId));

    const refund = { orderId: base.orderId, refundId: 'rf-1', amount: 100 };
    expect(refundDeduplicationId(refund)).toBe(refundRequestMessage({ type: 'refund', ...refund }).MessageDeduplicationId);
    expect(refundDeduplicationId({ ...refund, amount: 101 })).not.toBe(refundDeduplicationId(refund));
    expect(refundDeduplicationId({ ...refund, reason: 'duplicate' })).not.toBe(refundDeduplicationId(refund));
    expect(refundDeduplicationId(refund)).not.toBe(legacyRefundDeduplicationId(refund.orderId, refund.refundId));
  });

  it('the example in docs/producers.md is the id the code makes', () => {
    const doc = readFileSync('docs/producers.md', 'utf8');
    const body = /^MessageBody +(\{.*\})$/m.exec(doc)?.[1];
    const id = /^MessageDeduplicationId +([0-9a-f]{64})$/m.exec(doc)?.[1];
    expect(body && id).toBeTruthy();
    expect(chargeRequestMessage(JSON.parse(body!) as ChargeRequest).MessageDeduplicationId).toBe(id);
  });
});

describe('two sends of one order within the deduplication window, through SQS FIFO and the charge handler', () => {
  it('identical: SQS drops the second — one charge, no conflict', async () => {
    const request = chargeOrder();
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    expect(await drain()).toBe(1);
    expect(charges(request.orderId)).toHaveLength(1);
    expect(await conflicts(request.orderId)).toEqual([]);
  });

  it('another amount: the second reaches the handler — one charge, one recorded order_conflict', async () => {
    const request = chargeOrder({ amount: 1000 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    await sendChargeRequest(sqs.client, sqs.queueUrl, { ...request, amount: 2000 });
    expect(await drain()).toBe(2);
    expect(charges(request.orderId).map((pi) => pi.amount)).toEqual([1000]);
    expect(await conflicts(request.orderId)).toEqual(['order_conflict']);
  });

  it('a refund id reused with another amount: one Refund, one recorded refund_conflict; an identical repeat: nothing more', async () => {
    const request = chargeOrder({ amount: 1000 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    const refund = { orderId: request.orderId, refundId: 'rf-1', amount: 300 };
    await sendRefundRequest(sqs.client, sqs.queueUrl, refund);
    await sendRefundRequest(sqs.client, sqs.queueUrl, refund);
    await sendRefundRequest(sqs.client, sqs.queueUrl, { ...refund, amount: 400 });
    expect(await drain()).toBe(3);
    expect(stripe.fake.refunds({ orderId: request.orderId }).map((r) => r.amount)).toEqual([300]);
    expect(await conflicts(request.orderId)).toEqual(['refund_conflict']);
  });
});

describe('producers deployed before the change (the first contract’s ids)', () => {
  it('are accepted: a legacy-id message charges; the same request under both ids is one charge and no conflict', async () => {
    const request = chargeOrder();
    const { MessageBody, MessageGroupId } = chargeRequestMessage(request);
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody, MessageGroupId, MessageDeduplicationId: legacyDeduplicationId(request.orderId) }));
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    expect(await drain()).toBe(2);
    expect(charges(request.orderId)).toHaveLength(1);
    expect(await conflicts(request.orderId)).toEqual([]);
  });

  it('are counted (LegacyDeduplicationIds), so that operators see when the last producer has moved', async () => {
    const request = chargeOrder();
    const refund = { type: 'refund' as const, orderId: request.orderId, refundId: 'rf-old', amount: 100 };
    const { MessageBody, MessageGroupId } = chargeRequestMessage(request);
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody, MessageGroupId, MessageDeduplicationId: legacyDeduplicationId(request.orderId) }));
    const old = refundRequestMessage(refund);
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: old.MessageBody, MessageGroupId, MessageDeduplicationId: legacyRefundDeduplicationId(refund.orderId, refund.refundId) }));
    await sendChargeRequest(sqs.client, sqs.queueUrl, { ...request, orderId: `${request.orderId}-new` });
    const messages = await receiveMessages(queue, 10, { attempts: 5 });
    // fauxqs shows one message of a group at a time: take what came, work it, and the rest next.
    const all = [...messages];
    await settleBatch(queue, messages, { batchItemFailures: [] });
    for (let i = 0; i < 5 && all.length < 3; i++) {
      const more = await receiveMessages(queue, 10, { attempts: 1 });
      all.push(...more);
      await settleBatch(queue, more, { batchItemFailures: [] });
    }
    const sorted = all.sort((a, b) => (BigInt(a.Attributes!.SequenceNumber!) < BigInt(b.Attributes!.SequenceNumber!) ? -1 : 1));
    const deps = { db: db.pool, gateway: stripe.gateway, publisher: null, minTimeToCallMs: 1_000 };
    const result = await processChargeBatch(toSqsEvent(sorted, queue).Records, deps, { remainingMs: () => 60_000 });
    expect(result.records).toHaveLength(3);
    expect(result.counts.legacyDeduplicationIds).toBe(2);
  });
});
