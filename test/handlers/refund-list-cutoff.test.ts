// The cut-off refund List, end to end: a PaymentIntent with more refunds than the List reader pages
// through (MAX_LIST_PAGES_FOR_PROOF pages of 100, lambdas/payments/decisions.ts) — its List proves
// nothing, so an ambiguous refund of it goes to review: never re-sent, never settled as "no refund".
// The pure half is test/evidence-decisions.test.ts; here every part is real: the producer client and
// fauxqs (SQS protocol), the charge batch as the handler calls it, PostgreSQL 18, the reconcile sweep,
// the stripe SDK over HTTP against the fake Stripe's Refunds API, whose List answers at most `limit`
// (1..100, Stripe's documented bound: docs.stripe.com/api/refunds/list) refunds a page, newest first.
import { randomUUID } from 'node:crypto';
import type Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { processChargeBatch, type ChargeBatchDeps } from '../../lambdas/charge/batch.ts';
import { idempotencyKey } from '../../lambdas/payments/decisions.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import { sendChargeRequest, sendRefundRequest } from '../../lambdas/producer/client.ts';
import { runReconcile, type ReconcileSettings } from '../../lambdas/reconcile/sweep.ts';
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
  db = await createTestDatabase('refund_list_cutoff');
  stripe = await startStripe();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
});
afterAll(async () => {
  await sqs?.stop();
  await stripe?.close();
  await db?.drop();
});

const deps = (): ChargeBatchDeps => ({ db: db.pool, gateway: stripe.gateway, publisher: null, minTimeToCallMs: 1_000, random: () => 0.5 });
const plenty = { remainingMs: () => 60_000 };
const settings: ReconcileSettings = {
  maxRequestsPerSecond: 1_000,
  maxSearchesPerSecond: 1_000,
  concurrency: 4,
  pageSize: 10,
  minTimeToCallMs: 1_000,
  safetyMarginMs: 500,
  maxRunMs: 0,
  rejectedWindowSeconds: 300,
};
/** The List right after the 500 (its settle delay after the last send is judged in test/evidence-decisions.test.ts). */
const reconcile = () => runReconcile({ db: db.pool, gateway: stripe.gateway, publisher: null, settings, policy: { listSettleMs: 0 }, random: () => 0.5 }, plenty);

/** The next message on the queue through the charge batch, acknowledged as the handler's response says. */
async function deliverNext() {
  let messages: Awaited<ReturnType<typeof receiveMessages>> = [];
  for (let tries = 0; messages.length === 0 && tries < 20; tries++) messages = await receiveMessages(queue, 10, { attempts: 1 });
  expect(messages).toHaveLength(1);
  const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(), plenty);
  await settleBatch(queue, messages, result.response);
  expect(result.response.batchItemFailures).toEqual([]);
  return result.records[0]!;
}

async function refundOperation(orderId: string, refundId: string) {
  const { rows } = await db.pool.query(`SELECT * FROM payment_operations WHERE order_id = $1 AND kind = 'refund' AND refund_id = $2`, [orderId, refundId]);
  expect(rows).toHaveLength(1);
  return rows[0];
}
const refundCreates = (operationId: string) => stripe.fake.requests().filter((r) => r.endpoint === 'refund_create' && r.operationId === operationId);

describe('the refund List cut off at MAX_LIST_PAGES_FOR_PROOF pages', () => {
  it('a PaymentIntent with more than 2,000 refunds: an ambiguous refund (500 after commit, or before) → List of 20 pages, incomplete → review naming the List; zero re-sends, never "no refund"', { timeout: 120_000 }, async () => {
    // ── The charge, through the queue and the charge batch.
    const order = chargeOrder({ amount: 1_000_000 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, order);
    expect((await deliverNext()).fate).toMatchObject({ kind: 'processed', status: 'succeeded' });
    const [pi] = stripe.fake.paymentIntents({ orderId: order.orderId });
    expect(pi!.status).toBe('succeeded');

    // ── Refund A: Stripe makes the refund, then answers 500 (cached and replayed for the key).
    stripe.fake.injectFault({ endpoint: 'refund_create', orderId: order.orderId }, 'error_500_after_commit');
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: order.orderId, refundId: 'rf-lost', amount: 500, reason: 'requested_by_customer' });
    expect((await deliverNext()).fate).toMatchObject({ kind: 'processed', status: 'unknown' });
    const a = await refundOperation(order.orderId, 'rf-lost');
    expect(stripe.fake.refunds({ operationId: a.id })).toHaveLength(1);

    // ── 2,001 refunds of the same PaymentIntent made beside the pipeline (the Dashboard, a support
    // tool): newest first, A's own refund is now number 2,002 of the List — beyond 20 pages of 100.
    const client: Stripe = createStripeClient({ apiKey: 'sk_test_dashboard', apiBase: stripe.fake.url, timeoutMs: 5_000, maxNetworkRetries: 0 });
    // A fixed 2,001, not derived from the cap: with a higher cap (the cut-off not applied here) the
    // List would be read to its end, adopt A's refund and prove B's absence, and this test fails.
    const BESIDE = 2_001;
    for (let made = 0; made < BESIDE; ) {
      const n = Math.min(50, BESIDE - made);
      await Promise.all(Array.from({ length: n }, () => client.refunds.create({ payment_intent: pi!.id, amount: 1 }, { idempotencyKey: `dashboard-${randomUUID()}` })));
      made += n;
    }

    // ── Refund B: Stripe answers 500 before it made anything (also cached for the key).
    stripe.fake.injectFault({ endpoint: 'refund_create', orderId: order.orderId }, 'error_500_before_commit');
    await sendRefundRequest(sqs.client, sqs.queueUrl, { orderId: order.orderId, refundId: 'rf-none', amount: 500, reason: 'requested_by_customer' });
    expect((await deliverNext()).fate).toMatchObject({ kind: 'processed', status: 'unknown' });
    const b = await refundOperation(order.orderId, 'rf-none');
    expect(stripe.fake.refunds({ operationId: b.id })).toHaveLength(0);
    expect(stripe.fake.refunds({ paymentIntentId: pi!.id })).toHaveLength(BESIDE + 1);

    // ── The reconcile sweep: both are due; their 500s are replayed for their keys, so List is asked.
    await db.pool.query(`UPDATE payment_operations SET next_attempt_at = now() WHERE id = ANY($1::uuid[])`, [[a.id, b.id]]);
    const listsBefore = stripe.fake.requests().filter((r) => r.endpoint === 'refund_list').length;
    const summary = await reconcile();
    expect(summary).toMatchObject({ claimed: 2, byOutcome: { review: 2 }, stoppedBecause: 'drained' });

    const lists = stripe.fake.requests().filter((r) => r.endpoint === 'refund_list').slice(listsBefore);
    // 20 pages each and not one more, every one answered (2,000 objects read: Stripe's largest page, 100).
    expect(lists).toHaveLength(2 * 20);
    expect(lists.map((r) => r.status)).toEqual(lists.map(() => 200));
    for (const op of [a, b]) {
      const now = await refundOperation(order.orderId, op.refund_id);
      // In review with the reason naming the incomplete List; not settled (failed = "no refund"), not re-issued.
      expect(now).toMatchObject({ status: 'unknown', key_generation: 0, external_id: null });
      expect(now.review_reason).toMatch(/^List of the PaymentIntent's refunds has more than 20 pages .*: absence cannot be shown$/);
      const { rows: trail } = await db.pool.query(`SELECT detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'outcome_recorded' ORDER BY id DESC LIMIT 1`, [op.id]);
      expect(trail[0].detail).toMatchObject({ list: { scope: { payment_intent: pi!.id }, pages: 20, objects: 2_000, complete: false } });
      const { rows: events } = await db.pool.query(`SELECT event_type FROM outcome_events WHERE operation_id = $1`, [op.id]);
      expect(events.map((e) => e.event_type)).toEqual(['Refund Needs Review']);
      // Zero re-sends: the one create of the batch, under generation 0.
      expect(refundCreates(op.id).map((r) => r.idempotencyKey)).toEqual([idempotencyKey(op.id, 0)]);
    }
    expect(stripe.fake.refunds({ operationId: a.id })).toHaveLength(1);
    expect(stripe.fake.refunds({ operationId: b.id })).toHaveLength(0);

    // ── In review, neither is claimed again: a later sweep sends nothing and lists nothing.
    await db.pool.query(`UPDATE payment_operations SET next_attempt_at = now() WHERE id = ANY($1::uuid[])`, [[a.id, b.id]]);
    const requestsBefore = stripe.fake.requests().length;
    expect((await reconcile()).claimed).toBe(0);
    expect(stripe.fake.requests().slice(requestsBefore).filter((r) => r.endpoint.startsWith('refund_'))).toEqual([]);
  });
});
