// Stripe-Should-Retry in what a create's failure means. stripe-node obeys the header before its own
// rules: a lock-timeout 429 (`true`) is retried inside the call, Stripe's own 500 (`false`) is not. A
// 429 / 401 / 403 proves that ITS attempt executed nothing; the gateway sees each attempt's answer, so
// a call whose every attempt was a lock timeout keeps the operation's status, while a 429 after a lost
// answer does not. Real PostgreSQL, the real SDK (one retry, as deployed) against the fake Stripe.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { findOperation } from '../lambdas/payments/operations-store.ts';
import { auditTrail, type TestDatabase } from './support/db.ts';
import { testEngine } from './support/engine.ts';
import { chargeOrder } from './support/orders.ts';
import { startStripe, type StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';

let db: TestDatabase;
useWorld('should_retry', (w) => {
  db = w.db;
});

/** The deployed client's retries (DEFAULT_STRIPE_MAX_NETWORK_RETRIES = 1). */
let stripe: StripeHarness;
beforeAll(async () => {
  stripe = await startStripe({}, { maxNetworkRetries: 1 });
});
afterAll(() => stripe.close());

const engine = () => testEngine({ db, stripe });
const creates = (id: string) => stripe.fake.requests().filter((r) => r.endpoint === 'create' && r.operationId === id);
const lastFailureDetail = async (id: string) => (await auditTrail(db.pool, id)).map((e) => e.detail as Record<string, unknown>).filter((d) => d.kind !== undefined).at(-1);

describe('Stripe-Should-Retry and what an attempt proves', () => {
  it('every attempt a lock timeout (the SDK retried it): nothing executed, the operation stays pending', async () => {
    const id = await engine().requestCharge(chargeOrder());
    stripe.fake.injectFault({ operationId: id }, 'lock_timeout_429', 2);
    expect((await engine().executeCharge(id)).status).toBe('pending');
    expect(creates(id).map((r) => [r.status, r.fault])).toEqual([
      [429, 'lock_timeout_429'],
      [429, 'lock_timeout_429'],
    ]);
    expect(await lastFailureDetail(id)).toMatchObject({ httpAttempts: 2, attemptsRefused: 2, stripeShouldRetry: true, lockTimeout: true });
    expect(stripe.fake.paymentIntents({ operationId: id })).toEqual([]);
  });

  it('a lock timeout the SDK’s retry got past: the charge is made in the one call', async () => {
    const id = await engine().requestCharge(chargeOrder());
    stripe.fake.injectFault({ operationId: id }, 'lock_timeout_429', 1);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    expect(creates(id).map((r) => r.status)).toEqual([429, 200]);
  });

  it('a 429 after a lost answer: the first attempt may have charged, so the operation is unknown', async () => {
    const id = await engine().requestCharge(chargeOrder());
    stripe.fake.injectFault({ operationId: id }, 'lost_response_after_commit', 1);
    stripe.fake.injectFault({ operationId: id }, 'rate_limited_429', 1);
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    expect(creates(id).map((r) => r.status)).toEqual(['lost', 429]);
    expect(await lastFailureDetail(id)).toMatchObject({ httpAttempts: 2, attemptsRefused: 1 });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown' });
  });

  it('Stripe’s own 500 says do not retry: one HTTP attempt, even with a retry allowed', async () => {
    const id = await engine().requestCharge(chargeOrder());
    stripe.fake.injectFault({ operationId: id }, 'error_500_before_commit', 1);
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    expect(creates(id)).toHaveLength(1);
    expect(await lastFailureDetail(id)).toMatchObject({ httpStatus: 500, httpAttempts: 1, stripeShouldRetry: false });
  });
});
