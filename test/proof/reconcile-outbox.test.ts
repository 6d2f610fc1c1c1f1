// An outcome the RECONCILER records is written to the outbox leased for 60 s "to the recorder, to
// publish right away" (ChargeEngine publishLeaseMs); the run's relay skips leased rows. The chaos soak
// saw the consequence (the outbox drained a minute after every operation had settled): unless the run
// publishes its pages' events itself, every outcome it settles reaches EventBridge a minute late.
// Fixed in lambdas/reconcile/sweep.ts (each page's events published at once); this keeps it fixed.
import { randomUUID } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventBridgePublisher } from '../../lambdas/events/outbox.ts';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { runReconcile } from '../../lambdas/reconcile/sweep.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;

beforeAll(async () => {
  db = await createTestDatabase('reconcile_outbox');
  stripe = await startStripe();
  bus = await startFakeEventBridge();
});
afterAll(async () => {
  await bus?.close();
  await stripe?.close();
  await db?.drop();
});

describe('the reconciler publishes the outcomes it records', () => {
  it('an operation settled by a reconcile run has its outcome event published by that run', async () => {
    const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway });
    const id = await engine.requestCharge({ orderId: `ro-${randomUUID()}`, amount: 500, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' });
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' }, maxAttempts: 1 }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const summary = await runReconcile(
      {
        db: db.pool,
        gateway: stripe.gateway,
        publisher,
        settings: { maxRequestsPerSecond: 100, maxSearchesPerSecond: 20, concurrency: 4, pageSize: 10, minTimeToCallMs: 1000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 },
      },
      { remainingMs: () => 60_000 },
    );
    expect(summary.byOutcome.succeeded).toBe(1);
    const { rows } = await db.pool.query<{ published: boolean }>(`SELECT published_at IS NOT NULL AS published FROM outcome_events WHERE operation_id = $1`, [id]);
    expect(rows).toEqual([{ published: true }]);
    expect(bus.events().map((e) => (JSON.parse(e.rawDetail) as { operationId?: string }).operationId)).toContain(id);
  });

  it('an outcome whose writer died before publishing waits out PUBLISH_LEASE_MS (policy.publishLeaseMs), then the relay sends it', async () => {
    // The writer: records the outcome with its events leased to itself for the publish lease, and
    // never publishes (a worker killed after its commit). A shorter lease (a time-lapse run) hands
    // the events to the relay sooner; the default keeps them a minute.
    const policy = { publishLeaseMs: 1_500 };
    const short = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, policy });
    const long = new ChargeEngine({ db: db.pool, gateway: stripe.gateway });
    const order = (tag: string) => ({ orderId: `pl-${tag}-${randomUUID()}`, amount: 700, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' });
    const shortId = await short.requestCharge(order('short'));
    const longId = await long.requestCharge(order('long'));
    await short.executeCharge(shortId);
    await long.executeCharge(longId);
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' }, maxAttempts: 1 }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const relay = () =>
      runReconcile(
        {
          db: db.pool,
          gateway: stripe.gateway,
          publisher,
          policy,
          settings: { maxRequestsPerSecond: 100, maxSearchesPerSecond: 20, concurrency: 4, pageSize: 10, minTimeToCallMs: 1000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 },
        },
        { remainingMs: () => 60_000 },
      );
    const published = async (id: string) =>
      (await db.pool.query<{ published: boolean }>(`SELECT published_at IS NOT NULL AS published FROM outcome_events WHERE operation_id = $1`, [id])).rows.map((r) => r.published);
    await relay();
    expect(await published(shortId)).toEqual([false]); // still the writer's
    await new Promise((resolve) => setTimeout(resolve, 1_700));
    await relay();
    expect(await published(shortId)).toEqual([true]);
    expect(await published(longId)).toEqual([false]); // the default lease (60 s) still holds it
  });
});
