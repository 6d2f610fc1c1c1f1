// The fake Stripe's Refunds API, exercised through the REAL stripe SDK (stripe@23.1.0) over HTTP:
// stripe.refunds.create / retrieve / list. Every test starts its own server, so they run concurrently.
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { chargeIdOf } from '../local/fake-stripe/refunds.ts';
import {
  sdkAttemptsWhenConnectionCloses,
  startFakeStripe,
  type FakeStripe,
  type FakeStripeOptions,
  type RefundRecord,
  type RequestRecord,
} from '../local/fake-stripe/server.ts';
import { WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';
import { controlApiTruth, fakeTruth, listApiTruth, netChargedByOrder } from '../local/stripe-truth.ts';

type Ctx = TestContext;

async function fakeFor(ctx: Ctx, options: FakeStripeOptions = {}): Promise<FakeStripe> {
  const fake = await startFakeStripe(options);
  ctx.onTestFinished(() => fake.close());
  return fake;
}

/** A real SDK client. Retries and timeout are always explicit (the SDK defaults are 2 and 80 s). */
function sdk(fake: FakeStripe, opts: { maxNetworkRetries?: number; timeout?: number } = {}): Stripe {
  return new Stripe('sk_test_fake', {
    host: fake.host,
    port: fake.port,
    protocol: 'http',
    timeout: opts.timeout ?? 5_000,
    maxNetworkRetries: opts.maxNetworkRetries ?? 0,
  });
}

let counter = 0;
/** A succeeded (unless the payment method says otherwise) PaymentIntent of its own order. */
async function charged(
  stripe: Stripe,
  overrides: Partial<Stripe.PaymentIntentCreateParams> & { order?: string } = {},
): Promise<Stripe.Response<Stripe.PaymentIntent>> {
  const n = ++counter;
  const { order, ...params } = overrides;
  return stripe.paymentIntents.create(
    {
      amount: 1299,
      currency: 'jpy',
      customer: 'cus_123',
      payment_method: 'pm_card_visa',
      confirm: true,
      off_session: true,
      metadata: { operation_id: `op-c${n}`, order_id: order ?? `order-${n}`, key_generation: '0' },
      ...params,
    },
    { idempotencyKey: `k-charge-${n}` },
  );
}

function refundParams(pi: Stripe.PaymentIntent, extra: Partial<Stripe.RefundCreateParams> = {}): Stripe.RefundCreateParams {
  return {
    payment_intent: pi.id,
    metadata: { operation_id: `op-r-${pi.id}`, order_id: pi.metadata.order_id ?? '' },
    ...extra,
  };
}

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

describe.concurrent('fake Stripe Refunds through stripe-node', () => {
  describe('create', () => {
    test('a full refund by default: the unrefunded remainder, with the fields Stripe documents', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const refund = await stripe.refunds.create(refundParams(pi, { reason: 'requested_by_customer' }), { idempotencyKey: 'k-r1' });
      expect(refund).toMatchObject({
        object: 'refund',
        amount: 1299,
        currency: 'jpy',
        payment_intent: pi.id,
        charge: chargeIdOf(pi.id),
        status: 'succeeded',
        reason: 'requested_by_customer',
        metadata: { operation_id: `op-r-${pi.id}`, order_id: pi.metadata.order_id },
        customer: pi.customer,
        payment_method: pi.payment_method,
      });
      // Optional, not nullable, in Stripe's published schema: absent until they have a value.
      expect(refund).not.toHaveProperty('failure_reason');
      expect(refund).not.toHaveProperty('pending_reason');
      expect(refund).not.toHaveProperty('failure_balance_transaction');
      expect(refund.id).toMatch(/^re_[0-9A-Za-z]{24}$/);
      expect(refund.charge).toMatch(/^ch_/);
      expect(refund.balance_transaction).toMatch(/^txn_/);
      expect(refund.lastResponse.statusCode).toBe(200);
      expect(refund.lastResponse.idempotencyKey).toBe('k-r1');
      expect(fake.refunds()).toEqual([
        expect.objectContaining({
          id: refund.id,
          idempotencyKey: 'k-r1',
          paymentIntentOrderId: pi.metadata.order_id,
          paymentIntentOperationId: pi.metadata.operation_id,
        }),
      ]);
      expect(fake.stats()).toMatchObject({
        refundCreatesExecuted: 1,
        createsExecuted: 1,
        refunds: { total: 1, byStatus: { succeeded: 1 } },
        requests: { refund_create: 1, create: 1, total: 2 },
      });
      expect(fake.requests().at(-1)).toMatchObject({ endpoint: 'refund_create', refundId: refund.id, paymentIntentId: pi.id });
    });

    test('partial refunds sum up to the amount; then charge_already_refunded (400), stored for its key', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const a = await stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-p1' });
      const b = await stripe.refunds.create(refundParams(pi, { amount: 999 }), { idempotencyKey: 'k-p2' });
      expect([a.amount, b.amount]).toEqual([300, 999]);
      const done = await rejection(stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-p3' }));
      expect(done).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(done).toMatchObject({ statusCode: 400, code: 'charge_already_refunded', type: 'StripeInvalidRequestError' });
      expect(done.message).toBe(`Charge ${chargeIdOf(pi.id)} has already been refunded.`);
      // The refusal came from the executing endpoint, so Stripe saved it: the same key replays it.
      const again = await rejection(stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-p3' }));
      expect(again.headers?.['idempotent-replayed']).toBe('true');
      expect(fake.refunds({ paymentIntentId: pi.id }).map((r) => r.amount)).toEqual([300, 999]);
    });

    test('a charged-back charge (a dispute, not an inquiry) is refused with charge_disputed (400), stored for its key; an inquiry does not block, a won dispute lifts it', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const dashboard = new WebhookDispatcher({ fake, endpoint: null, secret: 'whsec_test', deliver: false });
      const opened = dashboard.dispute(pi.id, 'created');
      expect(opened.data.object).toMatchObject({ object: 'dispute', payment_intent: pi.id, is_charge_refundable: false });
      const refused = await rejection(stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-d1' }));
      // docs.stripe.com/error-codes#charge-disputed: "The charge you're attempting to refund has been charged back."
      expect(refused).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(refused).toMatchObject({ statusCode: 400, code: 'charge_disputed', type: 'StripeInvalidRequestError' });
      expect(refused.raw).toMatchObject({ type: 'invalid_request_error' });
      expect(refused.message).toBe(`Charge ${chargeIdOf(pi.id)} has been charged back; cannot issue a refund.`);
      const again = await rejection(stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-d1' }));
      expect(again.headers?.['idempotent-replayed']).toBe('true');
      expect(fake.refunds({ paymentIntentId: pi.id })).toEqual([]);
      dashboard.dispute(pi.id, 'closed', 'won');
      expect(await stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-d2' })).toMatchObject({ status: 'succeeded', amount: 1299 });
      // An inquiry (warning_needs_response) takes no funds: the charge can be refunded.
      const asked = await charged(stripe);
      dashboard.dispute(asked.id, 'created', 'warning_needs_response');
      expect(await stripe.refunds.create(refundParams(asked), { idempotencyKey: 'k-d3' })).toMatchObject({ status: 'succeeded' });
    });

    test('amount omitted after a partial refund = the remainder', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      await stripe.refunds.create(refundParams(pi, { amount: 1000 }), { idempotencyKey: 'k-rem1' });
      const rest = await stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-rem2' });
      expect(rest.amount).toBe(299);
    });

    test('over-refund refused: 400 amount_too_large on param amount, nothing refunded; replayed for the key', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      await stripe.refunds.create(refundParams(pi, { amount: 1000 }), { idempotencyKey: 'k-o1' });
      const over = await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-o2' }));
      expect(over).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(over).toMatchObject({ statusCode: 400, code: 'amount_too_large', param: 'amount' });
      expect(over.message).toBe('Refund amount (¥300) is greater than unrefunded amount on charge (¥299)');
      const tooMuch = await rejection(stripe.refunds.create(refundParams(await charged(stripe), { amount: 1300 }), { idempotencyKey: 'k-o3' }));
      expect(tooMuch).toMatchObject({ statusCode: 400, code: 'amount_too_large' });
      expect(fake.refunds({ paymentIntentId: pi.id }).map((r) => r.amount)).toEqual([1000]);
      const replay = await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-o2' }));
      expect(replay).toMatchObject({ statusCode: 400, code: 'amount_too_large' });
      expect(replay.headers?.['idempotent-replayed']).toBe('true');
      expect(fake.stats().refundCreatesExecuted).toBe(1);
    });

    test('over-refund refused in the code-less form Stripe has been seen to send (overRefundError no_code): param amount, no code; switchable by the control API', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx, { overRefundError: 'no_code' });
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      await stripe.refunds.create(refundParams(pi, { amount: 1000 }), { idempotencyKey: 'k-nc1' });
      const over = await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-nc2' }));
      expect(over).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(over).toMatchObject({ statusCode: 400, param: 'amount', type: 'StripeInvalidRequestError' });
      expect(over.code).toBeUndefined();
      expect(over.message).toBe('Refund amount (¥300) is greater than unrefunded amount on charge (¥299)');
      const config = (body: unknown) => fetch(`${fake.url}/__fake/config`, { method: 'POST', body: JSON.stringify(body) });
      expect((await config({ overRefundError: 'sometimes' })).status).toBe(400);
      expect((await config({ overRefundError: 'amount_too_large' })).status).toBe(200);
      expect(await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-nc3' }))).toMatchObject({ code: 'amount_too_large', param: 'amount' });
      // The answer stored for k-nc2 is replayed as it was (Stripe saves the first result for a key).
      expect((await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-nc2' }))).code).toBeUndefined();
      await expect(startFakeStripe({ overRefundError: 'none' as never })).rejects.toThrow(/overRefundError must be one of amount_too_large, no_code/);
    });

    test('a Dashboard refund (dashboardRefund, POST /__fake/dashboard_refund) is a Refund: empty metadata, no key, listed, counted against the charge', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const dash = fake.dashboardRefund(pi.id, 1000);
      expect(dash).toMatchObject({ object: 'refund', amount: 1000, payment_intent: pi.id, charge: chargeIdOf(pi.id), status: 'succeeded', metadata: {} });
      expect(fake.refunds({ paymentIntentId: pi.id })).toMatchObject([{ id: dash.id, idempotencyKey: null }]);
      expect((await stripe.refunds.list({ payment_intent: pi.id })).data.map((r) => r.id)).toEqual([dash.id]);
      expect((await stripe.refunds.retrieve(dash.id)).amount).toBe(1000);
      // What is left is what the Dashboard refund left: 299.
      expect(await rejection(stripe.refunds.create(refundParams(pi, { amount: 300 })))).toMatchObject({ code: 'amount_too_large' });
      const control = (body: unknown) => fetch(`${fake.url}/__fake/dashboard_refund`, { method: 'POST', body: JSON.stringify(body) });
      const over = await control({ paymentIntentId: pi.id, amount: 300 });
      expect(over.status).toBe(400);
      expect(((await over.json()) as { error: { message: string } }).error.message).toMatch(/greater than unrefunded amount/);
      expect((await control({ paymentIntentId: 'pi_nope' })).status).toBe(400);
      const rest = await control({ paymentIntentId: pi.id });
      expect(rest.status).toBe(200);
      expect(await rest.json()).toMatchObject({ object: 'refund', amount: 299, metadata: {} });
      expect(() => fake.dashboardRefund(pi.id)).toThrow(/has already been refunded/);
      expect(fake.stats().refundCreatesExecuted).toBe(0); // no POST /v1/refunds ran
    });

    test('the unrefunded amount is judged at execution: a concurrent refund that commits first is counted', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const hold = fake.hold({ endpoint: 'refund_create', idempotencyKey: 'k-race-a' });
      const a = rejection(stripe.refunds.create(refundParams(pi, { amount: 800 }), { idempotencyKey: 'k-race-a' }));
      await hold.arrived; // A holds its key, parked before it executes
      const b = await stripe.refunds.create(refundParams(pi, { amount: 800 }), { idempotencyKey: 'k-race-b' });
      expect(b.status).toBe('succeeded');
      hold.release();
      expect(await a).toMatchObject({ statusCode: 400, code: 'amount_too_large' });
      expect(fake.refunds().map((r) => r.amount)).toEqual([800]);
    });

    test('a PaymentIntent that has not succeeded: 400 on param payment_intent, no code, nothing refunded', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const slow = await charged(stripe, { payment_method: 'pm_fake_processing' });
      const declinedError = await rejection(charged(stripe, { payment_method: 'pm_card_chargeDeclined' }));
      const declined = declinedError.payment_intent!;
      for (const [pi, key] of [
        [slow, 'k-ns1'],
        [declined, 'k-ns2'],
      ] as const) {
        const error = await rejection(stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: key }));
        expect(error).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
        expect(error).toMatchObject({ statusCode: 400, param: 'payment_intent', code: undefined });
        expect(error.message).toBe(`This PaymentIntent (${pi.id}) does not have a successful charge to refund.`);
      }
      // Once the processing payment succeeds, a NEW request can refund it; the old key keeps its answer.
      fake.settle(slow.id, 'succeeded');
      expect((await rejection(stripe.refunds.create({ payment_intent: slow.id }, { idempotencyKey: 'k-ns1' }))).statusCode).toBe(400);
      expect((await stripe.refunds.create({ payment_intent: slow.id }, { idempotencyKey: 'k-ns3' })).status).toBe('succeeded');
      expect(fake.refunds()).toHaveLength(1);
    });

    test('validation (never stored): unknown PaymentIntent, bad amount, bad reason, unknown parameter, neither id', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const missing = await rejection(stripe.refunds.create({ payment_intent: 'pi_nope' }, { idempotencyKey: 'k-v' }));
      expect(missing).toMatchObject({ statusCode: 400, code: 'resource_missing', param: 'payment_intent' });
      expect(await rejection(stripe.refunds.create({ payment_intent: pi.id, amount: 0 }))).toMatchObject({
        code: 'parameter_invalid_integer',
        param: 'amount',
      });
      expect(
        await rejection(stripe.refunds.create({ payment_intent: pi.id, reason: 'changed_my_mind' as Stripe.RefundCreateParams.Reason })),
      ).toMatchObject({ code: 'parameter_invalid_string', param: 'reason' });
      expect(await rejection(stripe.refunds.create({ payment_intent: pi.id, colour: 'red' } as Stripe.RefundCreateParams))).toMatchObject({
        code: 'parameter_unknown',
        param: 'colour',
      });
      expect(await rejection(stripe.refunds.create({ amount: 100 }))).toMatchObject({ code: 'parameter_missing' });
      expect(await rejection(stripe.refunds.create({ charge: 'ch_nope' }))).toMatchObject({ code: 'resource_missing', param: 'charge' });
      // Nothing was stored for k-v, so the same key with fixed parameters simply executes.
      const fixed = await stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'k-v' });
      expect(fixed.lastResponse.headers['idempotent-replayed']).toBeUndefined();
      expect(fake.stats()).toMatchObject({ validationErrors: 6, idempotencyErrors: 0, refundCreatesExecuted: 1 });
    });

    test('by charge: the PaymentIntent’s derived charge id refunds it too', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const refund = await stripe.refunds.create({ charge: chargeIdOf(pi.id), amount: 99 });
      expect(refund).toMatchObject({ payment_intent: pi.id, amount: 99 });
    });
  });

  describe('the idempotency layer (the same as for PaymentIntents)', () => {
    test('same key + same params → the stored refund, replayed; one refund', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const first = await stripe.refunds.create(refundParams(pi, { amount: 500, reason: 'duplicate' }), { idempotencyKey: 'k-i1' });
      const second = await stripe.refunds.create(refundParams(pi, { amount: 500, reason: 'duplicate' }), { idempotencyKey: 'k-i1' });
      expect(second.id).toBe(first.id);
      expect(second.lastResponse.headers['idempotent-replayed']).toBe('true');
      expect(second.lastResponse.headers['original-request']).toBe(first.lastResponse.requestId);
      expect(fake.refunds()).toHaveLength(1);
      expect(byKey(fake, 'k-i1').map((r) => [r.replayed, r.refundId])).toEqual([
        [false, first.id],
        [true, first.id],
      ]);
    });

    test('same key + other params → StripeIdempotencyError; a key of a PaymentIntent create used for a refund, too', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      await stripe.refunds.create(refundParams(pi, { amount: 500 }), { idempotencyKey: 'k-m' });
      const other = await rejection(stripe.refunds.create(refundParams(pi, { amount: 501 }), { idempotencyKey: 'k-m' }));
      expect(other).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
      expect(other.statusCode).toBe(400);
      const crossed = await rejection(stripe.refunds.create(refundParams(pi, { amount: 1 }), { idempotencyKey: pi.lastResponse.idempotencyKey! }));
      expect(crossed).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
      expect(fake.refunds()).toHaveLength(1);
      expect(fake.stats().idempotencyErrors).toBe(2);
    });

    test('same key while the first is in flight → 409 idempotency_key_in_use; one refund', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const hold = fake.hold({ endpoint: 'refund_create', idempotencyKey: 'k-c' });
      const first = stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-c' });
      await hold.arrived;
      const conflict = await rejection(stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-c' }));
      expect(conflict).toBeInstanceOf(Stripe.errors.StripeAPIError);
      expect(conflict).toMatchObject({ statusCode: 409, code: 'idempotency_key_in_use' });
      hold.release();
      const done = await first;
      expect((await stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-c' })).id).toBe(done.id);
      expect(fake.refunds()).toHaveLength(1);
      expect(fake.stats().conflicts409).toBe(1);
    });

    test('after pruning, the same request executes again: a second refund (what List evidence guards against)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const first = await stripe.refunds.create(refundParams(pi, { amount: 400 }), { idempotencyKey: 'k-prune' });
      expect(fake.pruneKeys({ idempotencyKey: 'k-prune' })).toBe(1);
      const second = await stripe.refunds.create(refundParams(pi, { amount: 400 }), { idempotencyKey: 'k-prune' });
      expect(second.id).not.toBe(first.id);
      expect(fake.refunds({ paymentIntentId: pi.id }).map((r) => r.idempotencyKey)).toEqual(['k-prune', 'k-prune']);
    });
  });

  describe('faults on refunds', () => {
    test('lost answer after commit: StripeConnectionError, the refund exists; the same key replays it (one refund)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake, { maxNetworkRetries: 0 });
      const pi = await charged(stripe);
      fake.injectFault({ endpoint: 'refund_create', idempotencyKey: 'k-lost' }, 'lost_response_after_commit', sdkAttemptsWhenConnectionCloses(0));
      const lost = await rejection(stripe.refunds.create(refundParams(pi, { amount: 700 }), { idempotencyKey: 'k-lost' }));
      expect(lost).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      const [made] = fake.refunds({ paymentIntentId: pi.id });
      expect(made).toMatchObject({ amount: 700, status: 'succeeded', idempotencyKey: 'k-lost' });
      const replay = await stripe.refunds.create(refundParams(pi, { amount: 700 }), { idempotencyKey: 'k-lost' });
      expect(replay.id).toBe(made!.id);
      expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
      expect(byKey(fake, 'k-lost').map((r) => [r.status, r.replayed])).toEqual([
        ['lost', false],
        ['lost', true],
        [200, true],
      ]);
      expect(fake.refunds()).toHaveLength(1);
    });

    test('500 after commit: the refund exists and the 500 is replayed; 500 before commit: no refund, 500 replayed', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      fake.injectFault({ idempotencyKey: 'k-5a' }, 'error_500_after_commit');
      fake.injectFault({ idempotencyKey: 'k-5b' }, 'error_500_before_commit');
      const after = await rejection(stripe.refunds.create(refundParams(pi, { amount: 100 }), { idempotencyKey: 'k-5a' }));
      expect(after).toBeInstanceOf(Stripe.errors.StripeAPIError);
      expect(after.statusCode).toBe(500);
      expect(fake.refunds().map((r) => r.amount)).toEqual([100]);
      const before = await rejection(stripe.refunds.create(refundParams(pi, { amount: 200 }), { idempotencyKey: 'k-5b' }));
      expect(before.statusCode).toBe(500);
      expect(fake.refunds().map((r) => r.amount)).toEqual([100]);
      for (const key of ['k-5a', 'k-5b']) {
        const again = await rejection(
          stripe.refunds.create(refundParams(pi, { amount: key === 'k-5a' ? 100 : 200 }), { idempotencyKey: key }),
        );
        expect(again.statusCode).toBe(500);
        expect(again.headers?.['idempotent-replayed']).toBe('true');
      }
      expect(fake.refunds()).toHaveLength(1);
      expect(fake.stats().faults).toMatchObject({ error_500_after_commit: 1, error_500_before_commit: 1 });
    });

    test('429: StripeRateLimitError, nothing executed, nothing stored; hang: StripeConnectionError, the refund exists', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      fake.injectFault({ endpoint: 'refund_create' }, 'rate_limited_429');
      expect(await rejection(stripe.refunds.create(refundParams(pi, { amount: 10 }), { idempotencyKey: 'k-429' }))).toBeInstanceOf(
        Stripe.errors.StripeRateLimitError,
      );
      expect(fake.refunds()).toHaveLength(0);
      const next = await stripe.refunds.create(refundParams(pi, { amount: 10 }), { idempotencyKey: 'k-429' });
      expect(next.lastResponse.headers['idempotent-replayed']).toBeUndefined();

      fake.injectFault({ endpoint: 'refund_create', idempotencyKey: 'k-hang' }, 'hang');
      const hung = await rejection(
        sdk(fake, { timeout: 150 }).refunds.create(refundParams(pi, { amount: 20 }), { idempotencyKey: 'k-hang' }),
      );
      expect(hung).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      expect(byKey(fake, 'k-hang').map((r) => r.status)).toEqual(['hung']);
      expect(fake.refunds().map((r) => r.amount)).toEqual([10, 20]);
    });

    test('retrieve and list take the read faults (500, lost, 429), matched by order; decline cannot target refunds', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe, { order: 'order-faulty' });
      const refund = await stripe.refunds.create(refundParams(pi, { amount: 5 }));
      fake.injectFault({ endpoint: 'refund_list', orderId: 'order-faulty' }, 'error_500_after_commit');
      fake.injectFault({ endpoint: 'refund_retrieve', refundId: refund.id }, 'lost_response_after_commit', 2);
      fake.injectFault({ endpoint: 'refund_list' }, 'rate_limited_429');
      expect((await rejection(stripe.refunds.list({ payment_intent: pi.id }))).statusCode).toBe(500);
      expect(await rejection(stripe.refunds.retrieve(refund.id))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
      expect(await rejection(stripe.refunds.list({ payment_intent: pi.id }))).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
      expect((await stripe.refunds.list({ payment_intent: pi.id })).data.map((r) => r.id)).toEqual([refund.id]);
      expect(() => fake.injectFault({ endpoint: 'refund_create' }, 'decline')).toThrow(/only applies to creates of PaymentIntents/);
      expect(() => fake.injectFault({ endpoint: 'refund_list' }, 'processing')).toThrow(/only applies to creates/);
    });

    test('random faults apply to refund creates too, reproducibly (here: every refund drawn processing → pending)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      fake.setFaultRates({ processing: 1 }, 7);
      const refund = await stripe.refunds.create(refundParams(pi, { amount: 50 }), { idempotencyKey: 'k-rand' });
      expect(refund).toMatchObject({ status: 'pending', pending_reason: 'processing' });
      expect(byKey(fake, 'k-rand')[0]).toMatchObject({ fault: 'processing', faultSource: 'random' });
    });
  });

  describe('statuses later: pending → succeeded | failed | canceled', () => {
    test('processing fault → pending; settleRefund() moves it on; a replay keeps the old snapshot', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      fake.injectFault({ endpoint: 'refund_create' }, 'processing', 3);
      const a = await stripe.refunds.create(refundParams(pi, { amount: 100 }), { idempotencyKey: 'k-s1' });
      const b = await stripe.refunds.create(refundParams(pi, { amount: 200 }), { idempotencyKey: 'k-s2' });
      const c = await stripe.refunds.create(refundParams(pi, { amount: 300 }), { idempotencyKey: 'k-s3' });
      expect([a, b, c].map((r) => r.status)).toEqual(['pending', 'pending', 'pending']);
      fake.settleRefund(a.id, 'succeeded');
      fake.settleRefund(b.id, 'failed');
      fake.settleRefund(c.id, 'canceled');
      const settled = await stripe.refunds.retrieve(a.id);
      expect(settled.status).toBe('succeeded');
      expect(settled).not.toHaveProperty('pending_reason');
      expect(settled).not.toHaveProperty('failure_reason');
      expect(await stripe.refunds.retrieve(b.id)).toMatchObject({ status: 'failed', failure_reason: 'expired_or_canceled_card' });
      expect((await stripe.refunds.retrieve(b.id)).failure_balance_transaction).toMatch(/^txn_/);
      expect(await stripe.refunds.retrieve(c.id)).toMatchObject({ status: 'canceled' });
      expect((await stripe.refunds.create(refundParams(pi, { amount: 100 }), { idempotencyKey: 'k-s1' })).status).toBe('pending');
      expect(() => fake.settleRefund(a.id, 'canceled')).toThrow(/cannot become canceled/);
      expect(() => fake.settleRefund(b.id, 'succeeded')).toThrow(/is failed/);
      expect(() => fake.settleRefund('re_nope', 'succeeded')).toThrow(/no such Refund/);
      expect(fake.stats().refunds.byStatus).toMatchObject({ succeeded: 1, failed: 1, canceled: 1, pending: 0 });
    });

    test('a failed or canceled refund gives its amount back; a pending one holds it', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      fake.injectFault({ endpoint: 'refund_create' }, 'processing');
      const pending = await stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-h1' });
      expect(pending).toMatchObject({ status: 'pending', amount: 1299 });
      expect(await rejection(stripe.refunds.create(refundParams(pi, { amount: 1 }), { idempotencyKey: 'k-h2' }))).toMatchObject({
        code: 'charge_already_refunded',
      });
      fake.settleRefund(pending.id, 'failed');
      const again = await stripe.refunds.create(refundParams(pi), { idempotencyKey: 'k-h3' });
      expect(again).toMatchObject({ status: 'succeeded', amount: 1299 });
    });

    test('Stripe’s test cards: pm_card_pendingRefund starts pending, pm_card_refundFail succeeds then fails (by themselves with processingSettleMs)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx, { processingSettleMs: 30 });
      const stripe = sdk(fake);
      const slowPi = await charged(stripe, { payment_method: 'pm_card_pendingRefund' });
      const failPi = await charged(stripe, { payment_method: 'pm_card_refundFail' });
      const slow = await stripe.refunds.create(refundParams(slowPi));
      const fail = await stripe.refunds.create(refundParams(failPi));
      expect(slow).toMatchObject({ status: 'pending', pending_reason: 'processing' });
      expect(fail.status).toBe('succeeded');
      await until(() => fake.refunds().every((r) => r.status !== 'pending') && fake.refunds().some((r) => r.status === 'failed'));
      expect((await stripe.refunds.retrieve(slow.id)).status).toBe('succeeded');
      expect(await stripe.refunds.retrieve(fail.id)).toMatchObject({ status: 'failed', failure_reason: 'expired_or_canceled_card' });

      const manual = await fakeFor(ctx); // no processingSettleMs: they wait for settleRefund()
      const manualStripe = sdk(manual);
      const waiting = await manualStripe.refunds.create(refundParams(await charged(manualStripe, { payment_method: 'pm_card_pendingRefund' })));
      expect(waiting.status).toBe('pending');
      expect(manual.refunds()[0]?.status).toBe('pending');
    });
  });

  describe('retrieve and list', () => {
    test('retrieve: the refund as it is now, or 404 resource_missing', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const refund = await stripe.refunds.create(refundParams(await charged(stripe), { amount: 9 }));
      expect(await stripe.refunds.retrieve(refund.id)).toMatchObject({ id: refund.id, amount: 9, status: 'succeeded' });
      const missing = await rejection(stripe.refunds.retrieve('re_nope'));
      expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing' });
      expect(fake.requests().slice(-2).map((r) => [r.endpoint, r.status, r.refundId])).toEqual([
        ['refund_retrieve', 200, refund.id],
        ['refund_retrieve', 404, 're_nope'],
      ]);
    });

    test('list by PaymentIntent: newest first, limit + has_more, starting_after / ending_before, auto-pagination', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const other = await charged(stripe);
      const made: string[] = [];
      for (let i = 1; i <= 5; i++) made.push((await stripe.refunds.create(refundParams(pi, { amount: i }))).id);
      await stripe.refunds.create(refundParams(other, { amount: 1 }));
      const newest = [...made].reverse();

      const page1 = await stripe.refunds.list({ payment_intent: pi.id, limit: 2 });
      expect(page1).toMatchObject({ object: 'list', url: '/v1/refunds', has_more: true });
      expect(page1.data.map((r) => r.id)).toEqual(newest.slice(0, 2));
      const page2 = await stripe.refunds.list({ payment_intent: pi.id, limit: 2, starting_after: page1.data[1]!.id });
      expect(page2.data.map((r) => r.id)).toEqual(newest.slice(2, 4));
      const page3 = await stripe.refunds.list({ payment_intent: pi.id, limit: 2, starting_after: page2.data[1]!.id });
      expect(page3).toMatchObject({ has_more: false });
      expect(page3.data.map((r) => r.id)).toEqual(newest.slice(4));
      const back = await stripe.refunds.list({ payment_intent: pi.id, limit: 2, ending_before: newest[4]! });
      expect(back.data.map((r) => r.id)).toEqual(newest.slice(2, 4));
      expect(back.has_more).toBe(true);

      const all = await stripe.refunds.list({ payment_intent: pi.id, limit: 2 }).autoPagingToArray({ limit: 100 });
      expect(all.map((r) => r.id)).toEqual(newest);
      expect((await stripe.refunds.list({ limit: 100 })).data).toHaveLength(6); // no filter: every refund
      expect((await stripe.refunds.list({ payment_intent: other.id })).data).toHaveLength(1);
      expect((await stripe.refunds.list({ charge: chargeIdOf(pi.id) })).data).toHaveLength(5);
    });

    test('list filters by created and expands data.payment_intent; other expansions are refused', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const refund = await stripe.refunds.create(refundParams(pi, { amount: 3 }));
      const now = refund.created;
      expect((await stripe.refunds.list({ created: { gte: now } })).data).toHaveLength(1);
      expect((await stripe.refunds.list({ created: { gt: now } })).data).toHaveLength(0);
      expect((await stripe.refunds.list({ created: { lte: now - 1 } })).data).toHaveLength(0);
      expect((await stripe.refunds.list({ created: now })).data).toHaveLength(1);
      const expanded = await stripe.refunds.list({ payment_intent: pi.id, expand: ['data.payment_intent'] });
      expect(expanded.data[0]?.payment_intent).toMatchObject({ id: pi.id, object: 'payment_intent', metadata: pi.metadata });
      expect(await rejection(stripe.refunds.list({ expand: ['data.charge'] }))).toMatchObject({ statusCode: 400, param: 'expand[0]' });
      expect(await rejection(stripe.refunds.list({ colour: 'red' } as Stripe.RefundListParams))).toMatchObject({ code: 'parameter_unknown' });
    });

    test('list is real time (no Search lag), and refuses an unknown PaymentIntent, cursor or limit', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx, { searchLagMs: 60_000 });
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      const refund = await stripe.refunds.create(refundParams(pi));
      expect((await stripe.refunds.list({ payment_intent: pi.id })).data.map((r) => r.id)).toEqual([refund.id]);
      expect(await rejection(stripe.refunds.list({ payment_intent: 'pi_nope' }))).toMatchObject({
        statusCode: 400,
        code: 'resource_missing',
        param: 'payment_intent',
      });
      expect(await rejection(stripe.refunds.list({ payment_intent: pi.id, starting_after: 're_nope' }))).toMatchObject({
        code: 'resource_missing',
        param: 'starting_after',
      });
      expect(await rejection(stripe.refunds.list({ payment_intent: pi.id, limit: 101 }))).toMatchObject({
        code: 'parameter_invalid_integer',
        param: 'limit',
      });
    });

    test('list with an empty payment_intent= or charge= is refused (parameter_invalid_empty), not read as "every refund of the account"', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe);
      await stripe.refunds.create(refundParams(pi, { amount: 10 }));
      for (const param of ['payment_intent', 'charge'] as const) {
        const refused = await rejection(stripe.refunds.list({ [param]: '' }));
        expect(refused).toMatchObject({ statusCode: 400, code: 'parameter_invalid_empty', param });
        expect(refused.message).toBe(`You passed an empty string for '${param}'. We assume empty values are an attempt to unset a parameter; however '${param}' cannot be unset. You should remove '${param}' from your request or supply a non-empty value.`);
      }
      const raw = await fetch(`${fake.url}/v1/refunds?payment_intent=&limit=100`, { headers: { Authorization: 'Bearer sk_test_fake' } });
      expect(raw.status).toBe(400);
      // Without the parameter at all: every refund (Stripe's documented "no filter").
      expect((await stripe.refunds.list()).data).toHaveLength(1);
    });
  });

  describe('ground truth', () => {
    test('net amount charged per order = succeeded PaymentIntents − succeeded refunds (a duplicate refunded → the amount asked)', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      // A duplicate charge of order-dup, the extra one refunded in full; a partial refund of order-part
      // with one more still pending; a declined order; a fully refunded order.
      const dup1 = await charged(stripe, { order: 'order-dup' });
      const dup2 = await charged(stripe, { order: 'order-dup' });
      await stripe.refunds.create(refundParams(dup2, { reason: 'duplicate' }));
      const part = await charged(stripe, { order: 'order-part' });
      await stripe.refunds.create(refundParams(part, { amount: 299 }));
      fake.injectFault({ endpoint: 'refund_create' }, 'processing');
      await stripe.refunds.create(refundParams(part, { amount: 100 }));
      await rejection(charged(stripe, { order: 'order-declined', payment_method: 'pm_card_chargeDeclined' }));
      const gone = await charged(stripe, { order: 'order-gone' });
      await stripe.refunds.create(refundParams(gone));

      const net = netChargedByOrder(fake.paymentIntents(), fake.refunds());
      expect(net.get('order-dup')).toEqual({
        orderId: 'order-dup',
        charged: 2598,
        succeededPaymentIntents: 2,
        refunded: 1299,
        refundPending: 0,
        net: 1299,
        unrefundedPaymentIntents: 1,
      });
      expect(net.get('order-part')).toMatchObject({ charged: 1299, refunded: 299, refundPending: 100, net: 1000 });
      expect(net.get('order-gone')).toMatchObject({ net: 0, unrefundedPaymentIntents: 0 });
      expect(net.has('order-declined')).toBe(false);
      expect(fake.refunds({ orderId: 'order-dup' }).map((r) => r.payment_intent)).toEqual([dup2.id]);
      expect(dup1.id).not.toBe(dup2.id);
    });

    test('the List-API truth (what real Stripe offers) finds this run’s refunds by the refunded PaymentIntent’s order', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      // The run's window opens before its first object (a second back: `created` is in whole seconds).
      const runStarted = new Date(Date.now() - 1_000);
      const mine = await charged(stripe, { order: 'order-mine' });
      const theirs = await charged(stripe, { order: 'order-theirs' });
      // The refund's own metadata may say anything (a Dashboard refund has none): the PaymentIntent decides.
      const a = await stripe.refunds.create({ payment_intent: mine.id, amount: 10 });
      await stripe.refunds.create({ payment_intent: theirs.id, amount: 20, metadata: { order_id: 'order-mine' } });
      const truth = listApiTruth(stripe, runStarted, 'the fake, as if it were Stripe');
      const found = await truth.refunds(new Set(['order-mine']));
      expect(found?.map((r) => [r.id, r.payment_intent, r.paymentIntentOrderId, r.amount])).toEqual([[a.id, mine.id, 'order-mine', 10]]);
      expect(await truth.refunds()).toHaveLength(2);
      // Nothing created since a minute after now: the window is honoured.
      expect(await listApiTruth(stripe, new Date(Date.now() + 120_000), 'later').refunds()).toEqual([]);
    });

    test('the truth adapters and the /__fake/ control API carry refunds; settle_refund; reset forgets them', async (ctx) => {
      const { expect } = ctx;
      const fake = await fakeFor(ctx);
      const stripe = sdk(fake);
      const pi = await charged(stripe, { order: 'order-ctl' });
      fake.injectFault({ endpoint: 'refund_create' }, 'processing');
      const refund = await stripe.refunds.create(refundParams(pi, { amount: 10 }));

      const viaControl = await controlApiTruth(fake.url);
      const remote = (await viaControl!.refunds()) as RefundRecord[];
      expect(remote.map((r) => [r.id, r.status, r.paymentIntentOrderId])).toEqual([[refund.id, 'pending', 'order-ctl']]);
      expect(await fakeTruth(fake).refunds()).toEqual(remote);
      const filtered = await fetch(`${fake.url}/__fake/refunds?order_id=order-other`);
      expect(((await filtered.json()) as { data: unknown[] }).data).toEqual([]);

      const settle = (body: unknown) =>
        fetch(`${fake.url}/__fake/settle_refund`, { method: 'POST', body: JSON.stringify(body) });
      expect((await settle({ refundId: refund.id, status: 'exploded' })).status).toBe(400);
      expect((await settle({ refundId: refund.id, status: 'succeeded' })).status).toBe(200);
      expect((await settle({ refundId: refund.id, status: 'canceled' })).status).toBe(400); // succeeded cannot be canceled
      expect((await stripe.refunds.retrieve(refund.id)).status).toBe('succeeded');
      const stats = (await (await fetch(`${fake.url}/__fake/stats`)).json()) as { refunds: { total: number } };
      expect(stats.refunds.total).toBe(1);
      const faults = await fetch(`${fake.url}/__fake/faults`, {
        method: 'POST',
        body: JSON.stringify({ match: { endpoint: 'refund_retrieve', refundId: refund.id }, fault: 'error_500_after_commit' }),
      });
      expect(faults.status).toBe(200);
      expect((await rejection(stripe.refunds.retrieve(refund.id))).statusCode).toBe(500);

      fake.reset();
      expect(fake.refunds()).toEqual([]);
      expect(fake.stats().refunds.total).toBe(0);
    });
  });
});
