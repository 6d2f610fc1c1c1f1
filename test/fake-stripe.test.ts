// The fake Stripe server, exercised through the REAL stripe SDK (stripe@23.1.0) over HTTP.
// Every test starts its own server, so the tests run concurrently: stripe-node sleeps ≥ 500 ms before
// each retry and several tests below are about retries.
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { drawRandomFault, FAULT_PROFILES } from '../local/fake-stripe/faults.ts';
import {
  sdkAttemptsWhenConnectionCloses,
  startFakeStripe,
  type FakeStripe,
  type FakeStripeOptions,
  type FaultKind,
  type RequestRecord,
} from '../local/fake-stripe/server.ts';

type Ctx = TestContext;

async function fakeFor(ctx: Ctx, options: FakeStripeOptions = {}): Promise<FakeStripe> {
  const fake = await startFakeStripe(options);
  ctx.onTestFinished(() => fake.close());
  return fake;
}

/** A real SDK client. Retries and timeout are always explicit (the SDK defaults are 2 and 80 s). */
function sdk(fake: FakeStripe, opts: { maxNetworkRetries?: number; timeout?: number; key?: string } = {}): Stripe {
  return new Stripe(opts.key ?? 'sk_test_fake', {
    host: fake.host,
    port: fake.port,
    protocol: 'http',
    timeout: opts.timeout ?? 5_000,
    maxNetworkRetries: opts.maxNetworkRetries ?? 0,
  });
}

let counter = 0;
function charge(operationId = `op-${++counter}`, overrides: Partial<Stripe.PaymentIntentCreateParams> = {}) {
  return {
    amount: 1299,
    currency: 'jpy',
    customer: 'cus_123',
    payment_method: 'pm_card_visa',
    confirm: true,
    off_session: true,
    metadata: { operation_id: operationId, order_id: `order-${operationId}`, key_generation: '0' },
    ...overrides,
  } satisfies Stripe.PaymentIntentCreateParams;
}

/** Resolves to the rejection of a promise that must reject. */
async function rejection(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (error) {
    return error as Stripe.errors.StripeError;
  }
  throw new Error('expected a rejection');
}

const byKey = (fake: FakeStripe, key: string): RequestRecord[] => fake.requests().filter((r) => r.idempotencyKey === key);

async function until(condition: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe.concurrent('fake Stripe through stripe-node', () => {
  describe('creating PaymentIntents', () => {
    test('create → succeeded, with the fields and headers the product reads', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const before = Math.floor(Date.now() / 1000);
      const pi = await sdk(fake).paymentIntents.create(charge('op-a'), { idempotencyKey: 'k-a' });
      const after = Math.ceil(Date.now() / 1000);
      expect(pi).toMatchObject({
        object: 'payment_intent',
        amount: 1299,
        currency: 'jpy',
        customer: 'cus_123',
        payment_method: 'pm_card_visa',
        status: 'succeeded',
        metadata: { operation_id: 'op-a', order_id: 'order-op-a', key_generation: '0' },
        livemode: false,
        capture_method: 'automatic',
        confirmation_method: 'automatic',
        last_payment_error: null,
      });
      expect(pi.id).toMatch(/^pi_[0-9A-Za-z]{24}$/);
      // Stamped while the request was being answered (Unix seconds), however long that took.
      expect(pi.created).toBeGreaterThanOrEqual(before);
      expect(pi.created).toBeLessThanOrEqual(after);
      expect(pi.lastResponse.statusCode).toBe(200);
      expect(pi.lastResponse.requestId).toMatch(/^req_/);
      expect(pi.lastResponse.idempotencyKey).toBe('k-a');
      expect(fake.paymentIntents()).toHaveLength(1);
      expect(fake.paymentIntents({ operationId: 'op-a' })[0]).toMatchObject({ id: pi.id, idempotencyKey: 'k-a' });
    });

    test('same key + same params → the stored answer, replayed; one PaymentIntent', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const first = await stripe.paymentIntents.create(charge('op-r'), { idempotencyKey: 'k-r' });
      const second = await stripe.paymentIntents.create(charge('op-r'), { idempotencyKey: 'k-r' });
      expect(second.id).toBe(first.id);
      expect(second.lastResponse.headers['idempotent-replayed']).toBe('true');
      expect(second.lastResponse.headers['original-request']).toBe(first.lastResponse.requestId);
      expect(fake.paymentIntents()).toHaveLength(1);
      expect(byKey(fake, 'k-r').map((r) => r.replayed)).toEqual([false, true]);
      expect(fake.stats()).toMatchObject({ createsExecuted: 1, replays: 1 });
    });

    test('same key + other params → StripeIdempotencyError (400), nothing executed', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      await stripe.paymentIntents.create(charge('op-m'), { idempotencyKey: 'k-m' });
      const error = await rejection(stripe.paymentIntents.create(charge('op-m', { amount: 1300 }), { idempotencyKey: 'k-m' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
      expect(error.statusCode).toBe(400);
      expect(error.message).toMatch(/same parameters they were first used with/);
      expect(fake.paymentIntents()).toHaveLength(1);
      expect(fake.stats().idempotencyErrors).toBe(1);
    });

    test('same key while the first is in flight → 409 (StripeAPIError); with a retry the SDK gets the replay', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const hold = fake.hold({ idempotencyKey: 'k-c', endpoint: 'create' });
      const first = sdk(fake).paymentIntents.create(charge('op-c'), { idempotencyKey: 'k-c' });
      await hold.arrived; // the first request holds the key, parked before it executes

      const conflict = await rejection(sdk(fake).paymentIntents.create(charge('op-c'), { idempotencyKey: 'k-c' }));
      expect(conflict).toBeInstanceOf(Stripe.errors.StripeAPIError);
      expect(conflict.statusCode).toBe(409);
      expect(conflict.code).toBe('idempotency_key_in_use');

      // stripe-node retries a 409 (when retries are allowed): release the first during the SDK's back-off.
      const patient = sdk(fake, { maxNetworkRetries: 1 }).paymentIntents.create(charge('op-c'), { idempotencyKey: 'k-c' });
      await until(() => byKey(fake, 'k-c').filter((r) => r.status === 409).length === 2);
      hold.release();
      const [a, b] = await Promise.all([first, patient]);
      expect(b.id).toBe(a.id);
      expect(b.lastResponse.headers['idempotent-replayed']).toBe('true');
      expect(byKey(fake, 'k-c').map((r) => r.status)).toEqual([200, 409, 409, 200]);
      expect(fake.paymentIntents()).toHaveLength(1);
      expect(fake.stats().conflicts409).toBe(2);
    });

    test('a request without an Idempotency-Key simply executes every time', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const send = () =>
        fetch(`${fake.url}/v1/payment_intents`, {
          method: 'POST',
          headers: { Authorization: 'Bearer sk_test_curl', 'Content-Type': 'application/x-www-form-urlencoded' },
          body: 'amount=500&currency=usd&metadata[operation_id]=op-nokey',
        });
      expect((await send()).status).toBe(200);
      expect((await send()).status).toBe(200);
      const pis = fake.paymentIntents({ operationId: 'op-nokey' });
      expect(pis).toHaveLength(2);
      expect(pis.map((p) => p.status)).toEqual(['requires_payment_method', 'requires_payment_method']); // not confirmed
      expect(pis[0]!.idempotencyKey).toBeNull();
    });
  });

  describe('payment-method behaviours', () => {
    test('decline → StripeCardError with the PaymentIntent in requires_payment_method; replayed on retry', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const params = charge('op-d', { payment_method: 'pm_card_chargeDeclined' });
      const error = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-d' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeCardError);
      expect(error).toMatchObject({ statusCode: 402, code: 'card_declined', decline_code: 'generic_decline' });
      expect(error.payment_intent).toMatchObject({ status: 'requires_payment_method', metadata: { operation_id: 'op-d' } });
      expect(fake.paymentIntents({ operationId: 'op-d' }).map((p) => p.status)).toEqual(['requires_payment_method']);

      const again = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-d' }));
      expect(again).toBeInstanceOf(Stripe.errors.StripeCardError);
      expect(again.headers?.['idempotent-replayed']).toBe('true');
      expect(again.payment_intent?.id).toBe(error.payment_intent?.id);
      expect(fake.paymentIntents()).toHaveLength(1);
    });

    test('insufficient funds, authentication required (on session), processing (an async payment method)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const poor = await rejection(
        stripe.paymentIntents.create(charge('op-f', { payment_method: 'pm_card_insufficientFunds' }), { idempotencyKey: 'k-f' }),
      );
      expect(poor).toMatchObject({ statusCode: 402, decline_code: 'insufficient_funds' });
      // On session a customer is there to authenticate: the PaymentIntent waits for the action.
      const { off_session: _off, ...onSession } = charge('op-3ds', { payment_method: 'pm_card_authenticationRequired' });
      const threeDs = await stripe.paymentIntents.create(onSession, { idempotencyKey: 'k-3ds' });
      expect(threeDs.status).toBe('requires_action');
      const slow = await stripe.paymentIntents.create(charge('op-p', { payment_method: 'pm_fake_processing' }), {
        idempotencyKey: 'k-p',
      });
      expect(slow.status).toBe('processing');
    });

    test('invalid params → 400 StripeInvalidRequestError, not cached: the same key works once fixed', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const { amount: _omitted, ...withoutAmount } = charge('op-v');
      const missing = await rejection(
        stripe.paymentIntents.create(withoutAmount as Stripe.PaymentIntentCreateParams, { idempotencyKey: 'k-v' }),
      );
      expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(missing).toMatchObject({ statusCode: 400, code: 'parameter_missing', param: 'amount' });

      const notInteger = await rejection(
        stripe.paymentIntents.create(charge('op-v', { amount: 12.5 }), { idempotencyKey: 'k-v' }),
      );
      expect(notInteger).toMatchObject({ code: 'parameter_invalid_integer', param: 'amount' });

      const noCustomer = await rejection(
        stripe.paymentIntents.create(charge('op-v', { customer: 'cus_missing' }), { idempotencyKey: 'k-v' }),
      );
      expect(noCustomer).toMatchObject({ statusCode: 400, code: 'resource_missing', param: 'customer' });

      // None of those was stored for k-v, so other (valid) parameters are no idempotency error.
      const fixed = await stripe.paymentIntents.create(charge('op-v'), { idempotencyKey: 'k-v' });
      expect(fixed.status).toBe('succeeded');
      expect(fake.stats()).toMatchObject({ validationErrors: 3, idempotencyErrors: 0, createsExecuted: 1 });
    });

    test('processing settles via settle(), and by itself with processingSettleMs; replays keep the old snapshot', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      fake.injectFault({ operationId: 'op-s1' }, 'processing');
      const pi = await stripe.paymentIntents.create(charge('op-s1'), { idempotencyKey: 'k-s1' });
      expect(pi.status).toBe('processing');
      fake.settle(pi.id, 'succeeded');
      expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');
      // Stripe replays the answer as it was first given; only retrieve tells the present.
      expect((await stripe.paymentIntents.create(charge('op-s1'), { idempotencyKey: 'k-s1' })).status).toBe('processing');
      expect(() => fake.settle(pi.id, 'canceled')).toThrow(/final status/);

      const auto = await fakeFor(ctx, { processingSettleMs: 30 });
      const autoStripe = sdk(auto);
      const slow = await autoStripe.paymentIntents.create(charge('op-s2', { payment_method: 'pm_fake_processing' }), {
        idempotencyKey: 'k-s2',
      });
      expect(slow.status).toBe('processing');
      await until(() => auto.paymentIntents()[0]?.status === 'succeeded');
      expect((await autoStripe.paymentIntents.retrieve(slow.id)).status).toBe('succeeded');
    });

    test('retrieve: the PaymentIntent, or 404 resource_missing', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await stripe.paymentIntents.create(charge('op-g'), { idempotencyKey: 'k-g' });
      expect(await stripe.paymentIntents.retrieve(pi.id)).toMatchObject({ id: pi.id, status: 'succeeded' });
      const missing = await rejection(stripe.paymentIntents.retrieve('pi_doesnotexist'));
      expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing' });
      expect(fake.requests().map((r) => [r.endpoint, r.status])).toEqual([
        ['create', 200],
        ['retrieve', 200],
        ['retrieve', 404],
      ]);
    });

    test('auth: a wrong key → StripeAuthenticationError; unknown routes → 404', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const wrong = await rejection(sdk(fake, { key: 'sk_live_oops' }).paymentIntents.create(charge(), { idempotencyKey: 'k-w' }));
      expect(wrong).toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
      expect(wrong.statusCode).toBe(401);
      expect(wrong.message).not.toContain('sk_live_oops'); // keys are redacted even here
      const pinned = await fakeFor(ctx, { apiKeys: ['sk_test_only_this'] });
      expect(await rejection(sdk(pinned).paymentIntents.retrieve('pi_x'))).toBeInstanceOf(Stripe.errors.StripeAuthenticationError);
      expect(await rejection(sdk(pinned, { key: 'sk_test_only_this' }).paymentIntents.retrieve('pi_x'))).toMatchObject({
        statusCode: 404,
      });
      const unknown = await fetch(`${fake.url}/v1/customers`, { headers: { Authorization: 'Bearer sk_test_x' } });
      expect(unknown.status).toBe(404);
      expect(await unknown.json()).toMatchObject({ error: { type: 'invalid_request_error' } });
      expect(fake.paymentIntents()).toHaveLength(0);
    });
  });

  describe('faults, and what stripe-node makes of them', () => {
    test('500 after commit: StripeAPIError, the charge exists, the 500 is replayed; Stripe-Should-Retry: false keeps the SDK to one attempt', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ operationId: 'op-5a' }, 'error_500_after_commit');
      const error = await rejection(sdk(fake).paymentIntents.create(charge('op-5a'), { idempotencyKey: 'k-5a' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeAPIError);
      expect(error.statusCode).toBe(500);
      expect(fake.paymentIntents({ operationId: 'op-5a' }).map((p) => p.status)).toEqual(['succeeded']);
      expect(error.headers?.['stripe-should-retry']).toBe('false');
      // Stripe says "do not retry" on its 500s, and stripe-node obeys before its own 5xx rule: even
      // with a retry allowed, a re-send is one HTTP attempt that gets the stored 500 again.
      const retried = await rejection(
        sdk(fake, { maxNetworkRetries: 2 }).paymentIntents.create(charge('op-5a'), { idempotencyKey: 'k-5a' }),
      );
      expect(retried).toBeInstanceOf(Stripe.errors.StripeAPIError);
      expect(retried.headers?.['idempotent-replayed']).toBe('true');
      expect(retried.headers?.['stripe-should-retry']).toBe('false');
      expect(byKey(fake, 'k-5a').map((r) => [r.status, r.replayed])).toEqual([
        [500, false],
        [500, true],
      ]);
      expect(fake.paymentIntents()).toHaveLength(1);
    });

    test('500 before commit: StripeAPIError, no charge, and the key keeps answering 500', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ idempotencyKey: 'k-5b' }, 'error_500_before_commit');
      const stripe = sdk(fake);
      for (let i = 0; i < 3; i++) {
        const error = await rejection(stripe.paymentIntents.create(charge('op-5b'), { idempotencyKey: 'k-5b' }));
        expect(error).toMatchObject({ statusCode: 500 });
      }
      expect(byKey(fake, 'k-5b').map((r) => r.replayed)).toEqual([false, true, true]);
      expect(fake.paymentIntents()).toHaveLength(0);
      expect(fake.stats().createsExecuted).toBe(0);
    });

    test('lost response: one loss is silently healed by the SDK’s free reconnect retry, even with maxNetworkRetries 0', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ operationId: 'op-l1' }, 'lost_response_after_commit', 1);
      const pi = await sdk(fake, { maxNetworkRetries: 0 }).paymentIntents.create(charge('op-l1'), { idempotencyKey: 'k-l1' });
      expect(pi.status).toBe('succeeded');
      expect(byKey(fake, 'k-l1').map((r) => [r.status, r.replayed])).toEqual([
        ['lost', false],
        [200, true],
      ]);
    });

    test('lost response: with `times` = the SDK’s attempts, the caller gets StripeConnectionError; the charge exists', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const attempts = sdkAttemptsWhenConnectionCloses(0);
      expect(attempts).toBe(2);
      fake.injectFault({ operationId: 'op-l2' }, 'lost_response_after_commit', attempts);
      const stripe = sdk(fake, { maxNetworkRetries: 0 });
      const error = await rejection(stripe.paymentIntents.create(charge('op-l2'), { idempotencyKey: 'k-l2' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      expect((error.detail as { code?: string } | undefined)?.code).toBe('ECONNRESET');
      expect(byKey(fake, 'k-l2').map((r) => r.status)).toEqual(['lost', 'lost']);
      const [charged] = fake.paymentIntents({ operationId: 'op-l2' });
      expect(charged?.status).toBe('succeeded');
      // The next call with the same key learns the truth.
      const replay = await stripe.paymentIntents.create(charge('op-l2'), { idempotencyKey: 'k-l2' });
      expect(replay.id).toBe(charged?.id);
    });

    test('truncated response: one attempt, never retried (even with retries), StripeConnectionError', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ operationId: 'op-t' }, 'truncated_response_after_commit');
      const error = await rejection(
        sdk(fake, { maxNetworkRetries: 2 }).paymentIntents.create(charge('op-t'), { idempotencyKey: 'k-t' }),
      );
      expect(error).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      expect(error.requestId).toMatch(/^req_/); // the headers did arrive
      expect(byKey(fake, 'k-t').map((r) => r.status)).toEqual(['truncated']);
      expect(fake.paymentIntents({ operationId: 'op-t' })).toHaveLength(1);
    });

    test('hang: StripeConnectionError after the client timeout, not retried; the charge exists', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ operationId: 'op-h' }, 'hang');
      const error = await rejection(
        sdk(fake, { maxNetworkRetries: 0, timeout: 150 }).paymentIntents.create(charge('op-h'), { idempotencyKey: 'k-h' }),
      );
      expect(error).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      expect(error.message).toMatch(/timeout/);
      // No hidden retry: the SDK rejects only after its last attempt, and the fake saw one request.
      expect(byKey(fake, 'k-h').map((r) => r.status)).toEqual(['hung']);
      expect(fake.paymentIntents({ operationId: 'op-h' }).map((p) => p.status)).toEqual(['succeeded']);
      const replay = await sdk(fake).paymentIntents.create(charge('op-h'), { idempotencyKey: 'k-h' });
      expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
    });

    test('429 (fault and token bucket): StripeRateLimitError, not cached, nothing executed', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake, { maxNetworkRetries: 1 }); // the SDK does not retry a 429 by itself
      fake.injectFault({ operationId: 'op-429' }, 'rate_limited_429');
      const error = await rejection(stripe.paymentIntents.create(charge('op-429'), { idempotencyKey: 'k-429' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
      expect(fake.paymentIntents()).toHaveLength(0);
      const next = await stripe.paymentIntents.create(charge('op-429'), { idempotencyKey: 'k-429' });
      expect(next.status).toBe('succeeded');
      expect(byKey(fake, 'k-429').map((r) => [r.status, r.replayed])).toEqual([
        [429, false],
        [200, false], // executed, not replayed: the 429 was never stored
      ]);

      const limited = await fakeFor(ctx, { rateLimit: { perSecond: 2 } });
      const results = await Promise.allSettled([1, 2, 3].map(() => sdk(limited).paymentIntents.retrieve('pi_x')));
      const classes = results.map((r) => (r.status === 'rejected' ? (r.reason as Error).constructor.name : 'ok'));
      expect(classes.sort()).toEqual(['StripeInvalidRequestError', 'StripeInvalidRequestError', 'StripeRateLimitError']);
      expect(limited.stats().rateLimited).toBe(1);
    });

    test('401 / 403 faults: StripeAuthenticationError / StripePermissionError, nothing executed', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      fake.injectFault({ operationId: 'op-auth' }, 'unauthorized_401');
      fake.injectFault({ operationId: 'op-auth' }, 'permission_403');
      expect(await rejection(stripe.paymentIntents.create(charge('op-auth'), { idempotencyKey: 'k-auth' }))).toBeInstanceOf(
        Stripe.errors.StripeAuthenticationError,
      );
      expect(await rejection(stripe.paymentIntents.create(charge('op-auth'), { idempotencyKey: 'k-auth' }))).toBeInstanceOf(
        Stripe.errors.StripePermissionError,
      );
      expect(fake.paymentIntents()).toHaveLength(0);
      expect((await stripe.paymentIntents.create(charge('op-auth'), { idempotencyKey: 'k-auth' })).status).toBe('succeeded');
    });

    test('decline fault; commit faults are not consumed by replays', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await stripe.paymentIntents.create(charge('op-df'), { idempotencyKey: 'k-df' });
      fake.injectFault({ operationId: 'op-df' }, 'decline');
      // A replay executes nothing, so the decline waits for the next execution of this operation.
      expect((await stripe.paymentIntents.create(charge('op-df'), { idempotencyKey: 'k-df' })).id).toBe(pi.id);
      const error = await rejection(stripe.paymentIntents.create(charge('op-df'), { idempotencyKey: 'k-df-2' }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeCardError);
      expect(fake.paymentIntents({ operationId: 'op-df' }).map((p) => p.status)).toEqual(['succeeded', 'requires_payment_method']);
    });

    test('SDK trap: a 502 whose body has no `error` key RESOLVES as if it were a PaymentIntent', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      fake.injectFault({ operationId: 'op-502' }, 'proxy_502_after_commit');
      const result = await sdk(fake, { maxNetworkRetries: 0 }).paymentIntents.create(charge('op-502'), {
        idempotencyKey: 'k-502',
      });
      // No exception. What came back is the proxy's body, with the real status only on lastResponse.
      expect({ ...result }).toEqual({ message: 'Bad Gateway' });
      expect(result.object).toBeUndefined();
      expect(result.id).toBeUndefined();
      expect(result.lastResponse.statusCode).toBe(502);
      expect(result.lastResponse.requestId).toBeUndefined(); // not Stripe talking
      expect(fake.paymentIntents({ operationId: 'op-502' })).toHaveLength(1); // but the charge happened

      // With a retry allowed, the SDK retries the 5xx and the replay brings the real PaymentIntent.
      fake.injectFault({ operationId: 'op-502b' }, 'proxy_502_after_commit');
      const healed = await sdk(fake, { maxNetworkRetries: 1 }).paymentIntents.create(charge('op-502b'), {
        idempotencyKey: 'k-502b',
      });
      expect(healed).toMatchObject({ object: 'payment_intent', status: 'succeeded' });
      expect(byKey(fake, 'k-502b').map((r) => r.status)).toEqual([502, 200]);
    });

    test('scripted faults on retrieve and search', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await stripe.paymentIntents.create(charge('op-rs'), { idempotencyKey: 'k-rs' });
      fake.injectFault({ endpoint: 'retrieve', paymentIntentId: pi.id }, 'error_500_after_commit');
      fake.injectFault({ endpoint: 'search', operationId: 'op-rs' }, 'rate_limited_429');
      expect(await rejection(stripe.paymentIntents.retrieve(pi.id))).toMatchObject({ statusCode: 500 });
      expect(
        await rejection(stripe.paymentIntents.search({ query: "metadata['operation_id']:'op-rs'" })),
      ).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
      expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');
      expect(() => fake.injectFault({ endpoint: 'retrieve' }, 'decline')).toThrow(/only applies to creates/);
    });

    test('random faults are reproducible from the seed, whatever the interleaving', async (ctx) => {
      const { expect } = ctx;
      const rates = { ...FAULT_PROFILES.chaos, hang: 0 }; // hang only costs time here
      const keys = Array.from({ length: 40 }, (_, i) => `k-rand-${i}`);
      const run = async (order: readonly string[], seed: number) => {
        const fake = await fakeFor(ctx, { faults: { seed, rates } });
        const stripe = sdk(fake, { maxNetworkRetries: 0 });
        await Promise.allSettled(order.map((k) => stripe.paymentIntents.create(charge(`op-${k}`), { idempotencyKey: k })));
        const faults = new Map<string, (FaultKind | null)[]>();
        for (const r of fake.requests()) faults.set(r.idempotencyKey!, [...(faults.get(r.idempotencyKey!) ?? []), r.fault]);
        return faults;
      };
      const [forward, backward, otherSeed] = await Promise.all([run(keys, 7), run([...keys].reverse(), 7), run(keys, 8)]);
      for (const k of keys) expect(backward.get(k)).toEqual(forward.get(k));
      expect(keys.some((k) => JSON.stringify(otherSeed.get(k)) !== JSON.stringify(forward.get(k)))).toBe(true);
      // And they are exactly the pure draw for (seed, key, n-th sighting) — dropping commit faults on replays.
      for (const k of keys) {
        const first = forward.get(k)![0];
        expect(first).toBe(drawRandomFault(7, rates, k, 1));
      }
      expect([...forward.values()].flat().filter((f) => f !== null).length).toBeGreaterThan(5);
    });
  });

  describe('search, pruning, control', () => {
    test('search lag: invisible, then visible', async (ctx) => {
      const { expect } = ctx;
      // A lag no run outlasts, then the record made older than it: invisible, then visible, on the
      // fake's bookkeeping clock (a 120 ms lag and a 150 ms sleep once raced a slow search).
      const fake = await fakeFor(ctx, { searchLagMs: 60_000 });
      const stripe = sdk(fake);
      await stripe.paymentIntents.create(charge('op-lag'), { idempotencyKey: 'k-lag' });
      const query = "metadata['operation_id']:'op-lag'";
      expect((await stripe.paymentIntents.search({ query })).data).toHaveLength(0);
      fake.ageRecords(60_000);
      expect((await stripe.paymentIntents.search({ query })).data).toHaveLength(1);
    });

    test('search by metadata and status, newest first, with pages', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const ids: string[] = [];
      for (let i = 0; i < 5; i++) {
        ids.push((await stripe.paymentIntents.create(charge('op-page'), { idempotencyKey: `k-page-${i}` })).id);
      }
      await stripe.paymentIntents.create(charge('op-other'), { idempotencyKey: 'k-other' });
      await rejection(
        stripe.paymentIntents.create(charge('op-page', { payment_method: 'pm_card_chargeDeclined' }), { idempotencyKey: 'k-page-d' }),
      );

      const query = "metadata['operation_id']:'op-page' AND status:'succeeded'";
      const seen: string[] = [];
      let page: string | undefined;
      for (;;) {
        const result = await stripe.paymentIntents.search({ query, limit: 2, ...(page ? { page } : {}) });
        expect(result.object).toBe('search_result');
        expect(result.next_page === null).toBe(!result.has_more);
        seen.push(...result.data.map((p) => p.id));
        if (!result.has_more) break;
        page = result.next_page!;
      }
      expect(seen).toEqual([...ids].reverse());
      // Double quotes work too; the declined one is found by status.
      const declined = await stripe.paymentIntents.search({
        query: 'metadata["operation_id"]:"op-page" AND status:"requires_payment_method"',
      });
      expect(declined.data).toHaveLength(1);
      // The SDK's auto-pagination follows next_page.
      expect(await stripe.paymentIntents.search({ query, limit: 2 }).autoPagingToArray({ limit: 10 })).toHaveLength(5);

      const unsupported = await rejection(stripe.paymentIntents.search({ query: "amount>100 OR metadata['a']:'b'" }));
      expect(unsupported).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(unsupported.param).toBe('query');
    });

    test('a pruned key is a new request: a second PaymentIntent (a double charge)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const first = await stripe.paymentIntents.create(charge('op-prune'), { idempotencyKey: 'k-prune' });
      expect(fake.pruneKeys({ olderThanMs: 60_000 })).toBe(0); // too young
      expect(fake.pruneKeys({ idempotencyKey: 'k-prune' })).toBe(1);
      const second = await stripe.paymentIntents.create(charge('op-prune'), { idempotencyKey: 'k-prune' });
      expect(second.id).not.toBe(first.id);
      expect(second.lastResponse.headers['idempotent-replayed']).toBeUndefined();
      expect(fake.stats()).toMatchObject({
        doubleCharges: 1,
        doubleChargedOperations: ['op-prune'],
        doubleChargedOrders: ['order-op-prune'],
        keysPruned: 1,
      });
    });

    test('the /__fake/ HTTP API', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const control = async (method: 'GET' | 'POST', path: string, body?: unknown) => {
        const response = await fetch(`${fake.url}/__fake/${path}`, {
          method,
          ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } }),
        });
        return { status: response.status, body: (await response.json()) as Record<string, unknown> };
      };

      expect(await control('POST', 'faults', { match: { operationId: 'op-http' }, fault: 'processing', times: 1 })).toMatchObject({
        status: 200,
      });
      const pi = await stripe.paymentIntents.create(charge('op-http'), { idempotencyKey: 'k-http' });
      expect(pi.status).toBe('processing');
      const listed = await control('GET', 'payment_intents?operation_id=op-http');
      expect(listed.body.data).toEqual([expect.objectContaining({ id: pi.id, status: 'processing', idempotencyKey: 'k-http' })]);
      expect((await control('POST', 'settle', { paymentIntentId: pi.id, status: 'succeeded' })).status).toBe(200);
      expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');

      const requests = await control('GET', 'requests?since=1');
      expect(requests.body.data).toEqual([expect.objectContaining({ seq: 2, endpoint: 'retrieve', status: 200 })]);
      const stats = await control('GET', 'stats');
      expect(stats.body).toMatchObject({ requests: { total: 2, create: 1, retrieve: 1 }, faults: { processing: 1 } });

      expect((await control('POST', 'prune_keys', {})).body).toEqual({ pruned: 1 });
      expect((await control('POST', 'fault_rates', { profile: 'chaos', seed: 3 })).status).toBe(200);
      expect((await control('POST', 'fault_rates', { rates: { rate_limited_429: 2 } })).status).toBe(400);
      expect((await control('POST', 'faults', { fault: 'nope' })).status).toBe(400);
      expect((await control('POST', 'settle', { paymentIntentId: 'pi_nope', status: 'succeeded' })).status).toBe(400);
      expect((await control('POST', 'config', { latencyMs: 0, searchLagMs: 0 })).status).toBe(200);
      expect((await control('POST', 'reset')).status).toBe(200);
      expect(fake.paymentIntents()).toHaveLength(0);
      expect(fake.requests()).toHaveLength(0);
      expect(fake.stats().requests.total).toBe(0);
    });

    test('close() with a hanging request and a parked request does not hang', async (ctx) => {
      const { expect } = ctx;
      const fake = await startFakeStripe();
      fake.injectFault({ operationId: 'op-close' }, 'hang');
      const hold = fake.hold({ operationId: 'op-parked' });
      const stripe = sdk(fake, { timeout: 30_000 });
      const hanging = rejection(stripe.paymentIntents.create(charge('op-close'), { idempotencyKey: 'k-close' }));
      const parked = rejection(stripe.paymentIntents.create(charge('op-parked'), { idempotencyKey: 'k-parked' }));
      await hold.arrived;
      await until(() => fake.requests().some((r) => r.status === 'hung'));
      fake.setLatency(10_000);
      const sleeping = rejection(stripe.paymentIntents.retrieve('pi_sleeping')); // stuck in the 10 s latency
      await until(() => fake.requests().length === 3);
      // close() ends all three: had it waited for the hang (no end), the 30 s client timeout or the
      // 10 s latency, the test would time out; and each caller sees its connection destroyed, not an
      // answer (the latency's end would have answered pi_sleeping with a 404).
      await fake.close();
      for (const error of await Promise.all([hanging, parked, sleeping])) {
        expect(error).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      }
      // Nothing executed after close(): the parked create never made a PaymentIntent.
      expect(fake.paymentIntents({ operationId: 'op-parked' })).toHaveLength(0);
    });
  });
});
