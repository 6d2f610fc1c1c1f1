// Stripe Connect at the fake Stripe, through the REAL stripe SDK (stripe@23.1.0, its `stripeAccount`
// request option = the Stripe-Account header) over HTTP: objects and idempotency keys per account,
// List and Search per account, the refusal of an account the platform does not have, the Connect
// parameters of a create (application_fee_amount, transfer_data[destination]) and the `account` of
// a connected account's events. Sources: the comments in local/fake-stripe/ (server.ts, wire.ts, webhooks.ts).
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { startFakeStripe, type FakeStripe, type FakeStripeOptions } from '../local/fake-stripe/server.ts';
import { WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';

const A = 'acct_1AlphaConnected';
const B = 'acct_1BravoConnected';

async function fakeFor(ctx: TestContext, options: FakeStripeOptions = { connectedAccounts: [A, B] }): Promise<FakeStripe> {
  const fake = await startFakeStripe(options);
  ctx.onTestFinished(() => fake.close());
  return fake;
}

function sdk(fake: FakeStripe): Stripe {
  return new Stripe('sk_test_platform', { host: fake.host, port: fake.port, protocol: 'http', timeout: 5_000, maxNetworkRetries: 0 });
}

let counter = 0;
function payment(operationId = `op-cn-${++counter}`, overrides: Partial<Stripe.PaymentIntentCreateParams> = {}) {
  return {
    amount: 5000,
    currency: 'eur',
    payment_method: 'pm_card_visa',
    confirm: true,
    metadata: { operation_id: operationId, order_id: `order-${operationId}` },
    ...overrides,
  } satisfies Stripe.PaymentIntentCreateParams;
}

async function rejection(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (error) {
    return error as Stripe.errors.StripeError;
  }
  throw new Error('expected a rejection');
}

describe('Stripe Connect at the fake Stripe, through stripe-node', () => {
  test('an account the platform does not have, or no account id at all: 403 account_invalid, nothing made', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    for (const account of ['acct_1NotConnected', 'not-an-account']) {
      const error = await rejection(stripe.paymentIntents.create(payment(), { stripeAccount: account, idempotencyKey: `k-${account}` }));
      expect(error).toBeInstanceOf(Stripe.errors.StripePermissionError);
      expect(error).toMatchObject({ statusCode: 403, code: 'account_invalid' });
      expect(error.message).toContain(account);
      expect(await rejection(stripe.paymentIntents.list({}, { stripeAccount: account }))).toMatchObject({ statusCode: 403, code: 'account_invalid' });
    }
    expect(fake.paymentIntents()).toEqual([]);
    // A platform adds an account (the option, the module API, the control API).
    await fetch(`${fake.url}/__fake/connected_accounts`, { method: 'POST', body: JSON.stringify({ id: 'acct_1NotConnected' }) });
    expect(fake.connectedAccounts()).toEqual([A, B, 'acct_1NotConnected']);
    expect((await stripe.paymentIntents.create(payment(), { stripeAccount: 'acct_1NotConnected', idempotencyKey: 'k-now' })).status).toBe('succeeded');
    expect(() => fake.addConnectedAccount('cus_123')).toThrow(RangeError);
  });

  test('a PaymentIntent on account A is not there for B or the platform: 404 resource_missing on retrieve, capture and cancel', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(payment('op-scope', { capture_method: 'manual' }), { stripeAccount: A, idempotencyKey: 'k-scope' });
    expect(pi.status).toBe('requires_capture');
    expect((await stripe.paymentIntents.retrieve(pi.id, {}, { stripeAccount: A })).id).toBe(pi.id);
    for (const options of [{ stripeAccount: B }, {}]) {
      const missing = await rejection(stripe.paymentIntents.retrieve(pi.id, {}, options));
      expect(missing).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing', message: `No such payment_intent: '${pi.id}'` });
      expect(await rejection(stripe.paymentIntents.capture(pi.id, {}, { ...options, idempotencyKey: `k-scope-c-${options.stripeAccount ?? 'p'}` }))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
      expect(await rejection(stripe.paymentIntents.cancel(pi.id, {}, { ...options, idempotencyKey: `k-scope-x-${options.stripeAccount ?? 'p'}` }))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    }
    expect(fake.paymentIntents()[0]).toMatchObject({ status: 'requires_capture', stripeAccount: A });
    const captured = await stripe.paymentIntents.capture(pi.id, {}, { stripeAccount: A, idempotencyKey: 'k-scope-c' });
    expect(captured.status).toBe('succeeded');
    expect(fake.requests().filter((r) => r.endpoint === 'capture').map((r) => [r.account, r.status])).toEqual([
      [B, 404],
      [null, 404],
      [A, 200],
    ]);
  });

  test('idempotency keys per account: the same key on A, on B and on the platform is three requests; a mismatch on A is A’s alone', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const params = payment('op-key');
    const onA = await stripe.paymentIntents.create(params, { stripeAccount: A, idempotencyKey: 'k-shared' });
    const onB = await stripe.paymentIntents.create(params, { stripeAccount: B, idempotencyKey: 'k-shared' });
    const onPlatform = await stripe.paymentIntents.create(params, { idempotencyKey: 'k-shared' });
    expect(new Set([onA.id, onB.id, onPlatform.id]).size).toBe(3);
    expect(onB.lastResponse.headers['idempotent-replayed']).toBeUndefined();
    const replayA = await stripe.paymentIntents.create(params, { stripeAccount: A, idempotencyKey: 'k-shared' });
    expect(replayA.id).toBe(onA.id);
    expect(replayA.lastResponse.headers['idempotent-replayed']).toBe('true');
    // Other parameters under A's key: A's idempotency error; B never used it for those, but B's key is B's.
    const other = payment('op-key', { amount: 6000 });
    expect(await rejection(stripe.paymentIntents.create(other, { stripeAccount: A, idempotencyKey: 'k-shared' }))).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect((await stripe.paymentIntents.create(other, { stripeAccount: B, idempotencyKey: 'k-fresh' })).amount).toBe(6000);
    expect(fake.paymentIntents({ account: A })).toHaveLength(1);
    expect(fake.paymentIntents({ account: B })).toHaveLength(2);
    expect(fake.paymentIntents({ account: null })).toHaveLength(1);
    expect(fake.stats()).toMatchObject({ replays: 1, idempotencyErrors: 1 });
  });

  test('List and Search return only the account’s own PaymentIntents (the platform’s only its own); another account’s object is no cursor', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const a1 = await stripe.paymentIntents.create(payment('op-ls', { customer: 'cus_ls' }), { stripeAccount: A, idempotencyKey: 'k-ls-a1' });
    const a2 = await stripe.paymentIntents.create(payment('op-ls', { customer: 'cus_ls' }), { stripeAccount: A, idempotencyKey: 'k-ls-a2' });
    const b1 = await stripe.paymentIntents.create(payment('op-ls', { customer: 'cus_ls' }), { stripeAccount: B, idempotencyKey: 'k-ls-b1' });
    const p1 = await stripe.paymentIntents.create(payment('op-ls', { customer: 'cus_ls' }), { idempotencyKey: 'k-ls-p1' });
    const ids = (list: { data: { id: string }[] }) => list.data.map((p) => p.id).sort();
    expect(ids(await stripe.paymentIntents.list({ customer: 'cus_ls' }, { stripeAccount: A }))).toEqual([a1.id, a2.id].sort());
    expect(ids(await stripe.paymentIntents.list({ customer: 'cus_ls' }, { stripeAccount: B }))).toEqual([b1.id]);
    expect(ids(await stripe.paymentIntents.list({ customer: 'cus_ls' }))).toEqual([p1.id]);
    const query = "metadata['operation_id']:'op-ls'";
    expect(ids(await stripe.paymentIntents.search({ query }, { stripeAccount: A }))).toEqual([a1.id, a2.id].sort());
    expect(ids(await stripe.paymentIntents.search({ query }, { stripeAccount: B }))).toEqual([b1.id]);
    expect(ids(await stripe.paymentIntents.search({ query }))).toEqual([p1.id]);
    expect(await rejection(stripe.paymentIntents.list({ starting_after: a1.id }, { stripeAccount: B }))).toMatchObject({ statusCode: 400, code: 'resource_missing' });
  });

  test('a Refund is its PaymentIntent’s account’s: refunding, retrieving or listing it as another account finds nothing', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(payment('op-re'), { stripeAccount: A, idempotencyKey: 'k-re' });
    for (const options of [{ stripeAccount: B }, {}]) {
      const refused = await rejection(stripe.refunds.create({ payment_intent: pi.id }, { ...options, idempotencyKey: `k-re-${options.stripeAccount ?? 'p'}` }));
      expect(refused).toMatchObject({ statusCode: 400, code: 'resource_missing', param: 'payment_intent' });
    }
    const refund = await stripe.refunds.create({ payment_intent: pi.id, amount: 100 }, { stripeAccount: A, idempotencyKey: 'k-re-a' });
    expect((await stripe.refunds.retrieve(refund.id, {}, { stripeAccount: A })).amount).toBe(100);
    expect(await rejection(stripe.refunds.retrieve(refund.id, {}, { stripeAccount: B }))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    expect(await rejection(stripe.refunds.retrieve(refund.id))).toMatchObject({ statusCode: 404, code: 'resource_missing' });
    expect((await stripe.refunds.list({}, { stripeAccount: A })).data.map((r) => r.id)).toEqual([refund.id]);
    expect((await stripe.refunds.list({}, { stripeAccount: B })).data).toEqual([]);
    expect((await stripe.refunds.list({})).data).toEqual([]);
    // The module API (the Dashboard) sees every account.
    expect(fake.dashboardRefund(pi.id, 50).amount).toBe(50);
  });

  test('application_fee_amount and transfer_data[destination]: stored as sent; a fee needs a connected account (Stripe-Account or a destination); an unknown destination is refused', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const direct = await stripe.paymentIntents.create(payment('op-fee-1', { application_fee_amount: 150 }), { stripeAccount: A, idempotencyKey: 'k-fee-1' });
    expect(direct).toMatchObject({ application_fee_amount: 150, transfer_data: null });
    const destination = await stripe.paymentIntents.create(
      payment('op-fee-2', { application_fee_amount: 200, transfer_data: { destination: B, amount: 4000 } }),
      { idempotencyKey: 'k-fee-2' },
    );
    expect(destination).toMatchObject({ application_fee_amount: 200, transfer_data: { destination: B, amount: 4000 } });
    // A destination charge lives on the platform.
    expect(fake.paymentIntents({ operationId: 'op-fee-2' })[0]).toMatchObject({ stripeAccount: null, transfer_data: { destination: B, amount: 4000 } });

    const noAccount = await rejection(stripe.paymentIntents.create(payment('op-fee-3', { application_fee_amount: 100 }), { idempotencyKey: 'k-fee-3' }));
    expect(noAccount).toMatchObject({ statusCode: 400, param: 'application_fee_amount', type: 'StripeInvalidRequestError' });
    expect(noAccount.message).toMatch(/^Can only apply an application_fee_amount when the PaymentIntent is attempting a direct payment/);
    const unknown = await rejection(stripe.paymentIntents.create(payment('op-fee-4', { transfer_data: { destination: 'acct_1Nobody' } }), { idempotencyKey: 'k-fee-4' }));
    expect(unknown).toMatchObject({ statusCode: 400, code: 'resource_missing', param: 'transfer_data[destination]' });
    const tooBig = await rejection(stripe.paymentIntents.create(payment('op-fee-5', { application_fee_amount: 5001 }), { stripeAccount: A, idempotencyKey: 'k-fee-5' }));
    expect(tooBig).toMatchObject({ statusCode: 400, param: 'application_fee_amount' });
    // Validation refusals are never stored: the same key with the mistake fixed goes through.
    expect((await stripe.paymentIntents.create(payment('op-fee-3', { application_fee_amount: 100 }), { stripeAccount: A, idempotencyKey: 'k-fee-3' })).status).toBe('succeeded');
    expect(fake.paymentIntents().map((p) => p.metadata.operation_id)).toEqual(['op-fee-1', 'op-fee-2', 'op-fee-3']);
  });

  test('events of a connected account’s object carry `account`; the platform’s (a destination charge too) carry none; the control API reads the record per account', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const dispatcher = new WebhookDispatcher({ fake, endpoint: null, secret: 'whsec_connect' });
    ctx.onTestFinished(() => dispatcher.stop());
    const stripe = sdk(fake);
    const onA = await stripe.paymentIntents.create(payment('op-ev-a', { capture_method: 'manual' }), { stripeAccount: A, idempotencyKey: 'k-ev-a' });
    const onPlatform = await stripe.paymentIntents.create(payment('op-ev-p', { transfer_data: { destination: B } }), { idempotencyKey: 'k-ev-p' });
    dispatcher.poll();
    await stripe.paymentIntents.capture(onA.id, {}, { stripeAccount: A, idempotencyKey: 'k-ev-a-c' });
    dispatcher.poll();
    await stripe.refunds.create({ payment_intent: onA.id, amount: 100 }, { stripeAccount: A, idempotencyKey: 'k-ev-a-r' });
    dispatcher.poll();
    const of = (id: string) => dispatcher.events().filter((e) => e.data.object.id === id || e.data.object.payment_intent === id);
    expect(of(onA.id).map((e) => [e.type, e.account])).toEqual([
      ['payment_intent.amount_capturable_updated', A],
      ['payment_intent.succeeded', A],
      ['charge.captured', A],
      // The Refund is A's too (its PaymentIntent's account): its own events are A's.
      ['refund.created', A],
      ['charge.refunded', A],
    ]);
    // A change of the Refund's status and a dispute of A's charge: A's events as well.
    const [refund] = fake.refunds({ paymentIntentId: onA.id });
    fake.settleRefund(refund!.id, 'failed');
    dispatcher.poll();
    expect(dispatcher.events().filter((e) => e.data.object.id === refund!.id && e.type !== 'refund.created').map((e) => [e.type, e.account])).toEqual([
      ['refund.updated', A],
      ['refund.failed', A],
    ]);
    expect([dispatcher.dispute(onA.id, 'created')].map((e) => [e.type, e.account])).toEqual([['charge.dispute.created', A]]);
    expect(of(onPlatform.id).map((e) => [e.type, 'account' in e])).toEqual([['payment_intent.succeeded', false]]);
    const read = async (query: string) => ((await (await fetch(`${fake.url}/__fake/payment_intents?${query}`)).json()) as { data: { id: string; stripeAccount: string | null }[] }).data;
    expect((await read(`account=${A}`)).map((p) => p.id)).toEqual([onA.id]);
    expect((await read('account=platform')).map((p) => [p.id, p.stripeAccount])).toEqual([[onPlatform.id, null]]);
  });
});
