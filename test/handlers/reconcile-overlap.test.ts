// Two reconcile sweeps never spend the Stripe budget at once (the schedule fires every minute, a
// sweep may run 120 s): the second finds the sweep lease held, makes no Stripe call, and still relays
// the outbox and publishes the gauges. A lease whose holder's invocation is past its deadline lapses.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { acquireSweepLease, releaseSweepLease } from '../../lambdas/reconcile/sweep-lease.ts';
import type { ReconcileSummary } from '../../lambdas/reconcile/sweep.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { lambdaContext } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

type ReconcileHandler = (event: unknown, context: ReturnType<typeof lambdaContext>) => Promise<ReconcileSummary>;

let db: TestDatabase;
let stripe: StripeHarness;
let handler: ReconcileHandler;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('reconcile_overlap');
  stripe = await startStripe();
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_SECRET_KEY: 'sk_test_overlap',
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_TIMEOUT_MS: '1000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    RECONCILE_SAFETY_MARGIN_MS: '500',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  delete process.env.EVENT_BUS_NAME;
  handler = (await import('../../lambdas/reconcile/handler.ts')).handler as unknown as ReconcileHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources();
  await stripe.close();
  await db.drop();
});

async function dueOperation(): Promise<string> {
  const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test' });
  const [result] = await engine.processRequests([chargeOrder()], { execute: false });
  return result!.operationId;
}
const status = async (id: string) =>
  (await db.pool.query<{ status: string }>('SELECT status FROM payment_operations WHERE id = $1', [id])).rows[0]!.status;

describe('the sweep lease', () => {
  it('is held by one sweep at a time, and free again once given back', async () => {
    expect((await acquireSweepLease(db.pool, 'sweep-a', 60_000)).acquired).toBe(true);
    const second = await acquireSweepLease(db.pool, 'sweep-b', 60_000);
    expect(second).toMatchObject({ acquired: false, heldBy: 'sweep-a' });
    await releaseSweepLease(db.pool, 'sweep-b'); // not b's to give back: still a's
    expect((await acquireSweepLease(db.pool, 'sweep-c', 60_000)).acquired).toBe(false);
    await releaseSweepLease(db.pool, 'sweep-a');
    expect((await acquireSweepLease(db.pool, 'sweep-b', 60_000)).acquired).toBe(true);
    await releaseSweepLease(db.pool, 'sweep-b');
  });

  it('lapses when its holder\'s invocation is past its deadline (a crashed or timed-out sweep)', async () => {
    expect((await acquireSweepLease(db.pool, 'crashed', 60_000)).acquired).toBe(true);
    await db.pool.query(`UPDATE reconcile_sweep_lease SET lease_until = now() - interval '1 second'`);
    expect((await acquireSweepLease(db.pool, 'next', 60_000)).acquired).toBe(true);
    await releaseSweepLease(db.pool, 'next');
  });
});

describe('an overlapping sweep', () => {
  it('makes no Stripe call while another sweep holds the lease, still publishes its gauges, and the next free sweep settles', async () => {
    const id = await dueOperation();
    stripe.fake.reset();
    expect((await acquireSweepLease(db.pool, 'slow-sweep', 120_000)).acquired).toBe(true);

    const overlapping = await handler({}, lambdaContext(60_000, 'reconcile'));
    expect(stripe.fake.requests()).toEqual([]);
    expect(await status(id)).toBe('pending');
    expect(overlapping.gauges).toMatchObject({ openPending: 1 });

    await releaseSweepLease(db.pool, 'slow-sweep');
    await handler({}, lambdaContext(60_000, 'reconcile'));
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'create')).toHaveLength(1);
    expect(await status(id)).toBe('succeeded');
    // and the handler gave its lease back
    expect((await acquireSweepLease(db.pool, 'after', 1_000)).acquired).toBe(true);
  });
});
