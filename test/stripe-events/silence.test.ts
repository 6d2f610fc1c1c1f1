// The fast path's silence gauge (inbox-store.ts inboxGauges, eventsSilentSeconds; the reconciler
// publishes it as StripeEventsSilentSeconds, the StripeEventsNotArriving alarm watches it): how long
// operations have been reaching Stripe with no Stripe event arriving since. Real PostgreSQL, the real
// engine against the fake Stripe; times are moved in the database, never waited for.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { inboxGauges } from '../../lambdas/payments/inbox-store.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import { runReconcile } from '../../lambdas/reconcile/sweep.ts';
import type { TestDatabase } from '../support/db.ts';
import { testEngine } from '../support/engine.ts';
import { chargeOrder } from '../support/orders.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { deliverWebhook, piEvent } from './support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('event_silence', (w) => ({ db, stripe } = w));

const silent = async () => (await inboxGauges(db.pool)).eventsSilentSeconds;

/** An operation Stripe answered (a processing PaymentIntent: open, holding its pi_…), first sent `minutesAgo`. */
async function answeredOperation(minutesAgo: number) {
  stripe.fake.injectFault({}, 'processing');
  const [r] = await testEngine({ db, stripe }).processRequests([chargeOrder()]);
  const op = (await findOperation(db.pool, r!.operationId))!;
  expect(op).toMatchObject({ status: 'unknown', externalId: expect.stringMatching(/^pi_/) });
  await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - $2::int * interval '1 minute' WHERE id = $1`, [op.id, minutesAgo]);
  return op;
}

/** An inbox row received `minutesAgo` (rows are never updated: inserted with that time). */
async function eventReceived(minutesAgo: number) {
  await db.pool.query(
    `INSERT INTO stripe_events (event_id, event_type, stripe_created_at, source, payload, received_at, applied_at, outcome)
     VALUES ($1, 'payment_intent.succeeded', now(), 'webhook', '{}'::jsonb, now() - $2::int * interval '1 minute', now(), 'foreign')`,
    [`evt_${randomUUID().replaceAll('-', '')}`, minutesAgo],
  );
}

describe('eventsSilentSeconds', () => {
  it('grows from the first send of the oldest operation Stripe answered after the newest event; an arriving event ends it; idle or unanswered operations never count', async () => {
    // Nothing sent, nothing received: silent for 0 s (an idle system never alarms).
    expect(await silent()).toBe(0);

    // A create Stripe answered 500 before executing it: no PaymentIntent, so no event is owed.
    stripe.fake.injectFault({ endpoint: 'create' }, 'error_500_before_commit');
    const [unanswered] = await testEngine({ db, stripe }).processRequests([chargeOrder()]);
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '50 minutes' WHERE id = $1`, [unanswered!.operationId]);
    expect(await findOperation(db.pool, unanswered!.operationId)).toMatchObject({ externalId: null });
    expect(await silent()).toBe(0);

    // The newest event 30 minutes ago; operations Stripe answered 40 (before it: its event may be
    // that one) and 20 and 10 minutes ago: silent since the 20-minute one.
    await eventReceived(30);
    await answeredOperation(40);
    const first = await answeredOperation(20);
    await answeredOperation(10);
    const seconds = await silent();
    expect(seconds).toBeGreaterThanOrEqual(20 * 60);
    expect(seconds).toBeLessThan(30 * 60);

    // The reconciler reads the same gauge (and publishes it: StripeEventsSilentSeconds).
    const run = await runReconcile(
      {
        db: db.pool,
        gateway: null,
        publisher: null,
        inboxDb: db.pool,
        settings: { maxRequestsPerSecond: 10, maxSearchesPerSecond: 5, concurrency: 1, pageSize: 10, minTimeToCallMs: 0, safetyMarginMs: 0, maxRunMs: 0, rejectedWindowSeconds: 300 },
      },
      { remainingMs: () => 60_000 },
    );
    expect(run.gauges?.inbox?.eventsSilentSeconds).toBeGreaterThanOrEqual(20 * 60);

    // An event arrives (the operation's own, through the real webhook path): the fast path is on again.
    stripe.fake.settle(first.externalId!, 'succeeded');
    await deliverWebhook({ db, stripe }, piEvent(stripe.fake.paymentIntents({ operationId: first.id })[0]!));
    expect(await silent()).toBe(0);

    // The operation it settled was sent before the event arrived: it never counts.
    expect(await findOperation(db.pool, first.id)).toMatchObject({ status: 'succeeded' });
    expect(await silent()).toBe(0);
  });
});
