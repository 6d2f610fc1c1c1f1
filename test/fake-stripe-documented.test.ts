// The fake Stripe where it follows Stripe's documentation at the pinned version (2026-10-28.endive)
// rather than being lenient: off-session authentication, the parameters of the version, the
// documented limits, and the Stripe-Should-Retry header stripe-node obeys. Through the REAL SDK.
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { startFakeStripe, type FakeStripe, type FakeStripeOptions, type RequestRecord } from '../local/fake-stripe/server.ts';

async function fakeFor(ctx: TestContext, options: FakeStripeOptions = {}): Promise<FakeStripe> {
  const fake = await startFakeStripe(options);
  ctx.onTestFinished(() => fake.close());
  return fake;
}

/** A real SDK client; retries explicit, and the first retry's sleep as short as the SDK allows. */
function sdk(fake: FakeStripe, maxNetworkRetries = 0): Stripe {
  return new Stripe('sk_test_fake', { host: fake.host, port: fake.port, protocol: 'http', timeout: 5_000, maxNetworkRetries });
}

let counter = 0;
function charge(overrides: Record<string, unknown> = {}): Stripe.PaymentIntentCreateParams {
  const op = `op-doc-${++counter}`;
  return {
    amount: 1299,
    currency: 'eur',
    customer: 'cus_123',
    payment_method: 'pm_card_visa',
    confirm: true,
    off_session: true,
    metadata: { operation_id: op, order_id: `order-${op}`, key_generation: '0' },
    ...overrides,
  } as Stripe.PaymentIntentCreateParams;
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

describe.concurrent('the fake Stripe as Stripe documents it', () => {
  test('an off-session card that needs authentication fails: 402 card_error authentication_required, requires_payment_method', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const error = await rejection(sdk(fake).paymentIntents.create(charge({ payment_method: 'pm_card_authenticationRequired' }), { idempotencyKey: 'k-auth' }));
    expect(error).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(error).toMatchObject({ statusCode: 402, type: 'StripeCardError', code: 'authentication_required', decline_code: 'authentication_required' });
    expect(error.payment_intent).toMatchObject({ status: 'requires_payment_method', last_payment_error: { code: 'authentication_required' } });
    const [pi] = fake.paymentIntents();
    expect(pi?.status).toBe('requires_payment_method');
    expect(fake.paymentIntents().filter((p) => p.status === 'requires_action')).toEqual([]);
  });

  test('error_on_requires_action: refused with automatic payment methods; without them it fails the payment as off_session does', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const { off_session: _o, ...onSession } = charge({ payment_method: 'pm_card_authenticationRequired' });
    const refused = await rejection(stripe.paymentIntents.create({ ...onSession, error_on_requires_action: true }, { idempotencyKey: 'k-eora' }));
    expect(refused).toMatchObject({ statusCode: 400, param: 'error_on_requires_action' });
    expect(fake.stats().createsExecuted).toBe(0);
    const failed = await rejection(
      stripe.paymentIntents.create({ ...onSession, error_on_requires_action: true, automatic_payment_methods: { enabled: false } }, { idempotencyKey: 'k-eora2' }),
    );
    expect(failed).toMatchObject({ statusCode: 402, code: 'authentication_required' });
  });

  test('payment_method_types is refused at this version; allowed_ / excluded_payment_method_types are taken and enforced', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const old = await rejection(stripe.paymentIntents.create(charge({ payment_method_types: ['card'] }), { idempotencyKey: 'k-pmt' }));
    expect(old).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(old).toMatchObject({ statusCode: 400, code: 'payment_method_types_no_longer_supported', param: 'payment_method_types' });
    expect(fake.stats().createsExecuted).toBe(0);

    const allowed = await stripe.paymentIntents.create(charge({ allowed_payment_method_types: ['card', 'sepa_debit'] }), { idempotencyKey: 'k-allowed' });
    expect(allowed.status).toBe('succeeded');
    const excluded = await stripe.paymentIntents.create(charge({ excluded_payment_method_types: ['us_bank_account'] }), { idempotencyKey: 'k-excluded' });
    expect(excluded.status).toBe('succeeded');
    const incompatible = await rejection(
      stripe.paymentIntents.create(charge({ payment_method: 'pm_fake_sepa_debit', allowed_payment_method_types: ['card'] }), { idempotencyKey: 'k-incompatible' }),
    );
    expect(incompatible).toMatchObject({ statusCode: 400, code: 'payment_intent_incompatible_payment_method' });
    const excludedCard = await rejection(stripe.paymentIntents.create(charge({ excluded_payment_method_types: ['card'] }), { idempotencyKey: 'k-nocard' }));
    expect(excludedCard).toMatchObject({ statusCode: 400, code: 'payment_intent_incompatible_payment_method' });
    expect(fake.stats().createsExecuted).toBe(2);
  });

  test('only async payment methods are processing on create: a SEPA debit and a US bank account; a card succeeds at once', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    for (const pm of ['pm_fake_sepa_debit', 'pm_fake_us_bank_account', 'pm_fake_processing']) {
      const pi = await stripe.paymentIntents.create(charge({ payment_method: pm }), { idempotencyKey: `k-${pm}` });
      expect(pi.status).toBe('processing');
    }
    for (const pm of ['pm_card_visa', 'pm_card_mastercard']) {
      const pi = await stripe.paymentIntents.create(charge({ payment_method: pm }), { idempotencyKey: `k-${pm}` });
      expect(pi.status).toBe('succeeded');
    }
  });

  test('documented limits: 50 metadata keys of 40 characters with values of 500, a description of 1,000, a statement descriptor suffix of 22', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const base = charge();
    const keys = (n: number) => Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, 'v']));
    const atLimits: Record<string, unknown>[] = [
      { metadata: { ...keys(47), ...base.metadata } },
      { metadata: { ...base.metadata, ['k'.repeat(40)]: 'v' } },
      { metadata: { ...base.metadata, long: 'v'.repeat(500) } },
      { description: 'd'.repeat(1000) },
      { statement_descriptor_suffix: 's'.repeat(22) },
    ];
    for (const [i, params] of atLimits.entries()) {
      const pi = await stripe.paymentIntents.create(charge(params), { idempotencyKey: `k-ok-${i}` });
      expect(pi.status).toBe('succeeded');
    }
    const overLimits: [Record<string, unknown>, string][] = [
      [{ metadata: { ...keys(48), ...base.metadata } }, 'metadata'],
      [{ metadata: { ...base.metadata, ['k'.repeat(41)]: 'v' } }, `metadata[${'k'.repeat(41)}]`],
      [{ metadata: { ...base.metadata, long: 'v'.repeat(501) } }, 'metadata[long]'],
      [{ description: 'd'.repeat(1001) }, 'description'],
      [{ statement_descriptor_suffix: 's'.repeat(23) }, 'statement_descriptor_suffix'],
    ];
    for (const [i, [params, param]] of overLimits.entries()) {
      const error = await rejection(stripe.paymentIntents.create(charge(params), { idempotencyKey: `k-over-${i}` }));
      expect(error).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
      expect(error).toMatchObject({ statusCode: 400, param });
    }
    expect(fake.stats().createsExecuted).toBe(atLimits.length);
  });

  test('Stripe-Should-Retry: false on a 500 — one HTTP attempt whatever maxNetworkRetries', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    fake.injectFault({ idempotencyKey: 'k-500' }, 'error_500_before_commit');
    const error = await rejection(sdk(fake, 2).paymentIntents.create(charge(), { idempotencyKey: 'k-500' }));
    expect(error).toMatchObject({ statusCode: 500, type: 'StripeAPIError' });
    expect(error.headers?.['stripe-should-retry']).toBe('false');
    expect(byKey(fake, 'k-500')).toHaveLength(1);
  });

  test('Stripe-Should-Retry: true on a lock-timeout 429 — the SDK retries it; a rate-limit 429 has no such header and is not retried', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    fake.injectFault({ idempotencyKey: 'k-lock' }, 'lock_timeout_429');
    const pi = await sdk(fake, 1).paymentIntents.create(charge(), { idempotencyKey: 'k-lock' });
    expect(pi.status).toBe('succeeded');
    expect(byKey(fake, 'k-lock').map((r) => [r.status, r.fault])).toEqual([
      [429, 'lock_timeout_429'],
      [200, null],
    ]);

    fake.injectFault({ idempotencyKey: 'k-lock0' }, 'lock_timeout_429');
    const lock = await rejection(sdk(fake, 0).paymentIntents.create(charge(), { idempotencyKey: 'k-lock0' }));
    expect(lock).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
    expect(lock).toMatchObject({ statusCode: 429, code: 'lock_timeout' });
    expect(lock.headers?.['stripe-should-retry']).toBe('true');

    fake.injectFault({ idempotencyKey: 'k-rate' }, 'rate_limited_429');
    const rate = await rejection(sdk(fake, 2).paymentIntents.create(charge(), { idempotencyKey: 'k-rate' }));
    expect(rate).toMatchObject({ statusCode: 429, code: 'rate_limit' });
    expect(rate.headers?.['stripe-should-retry']).toBeUndefined();
    expect(byKey(fake, 'k-rate')).toHaveLength(1);
    expect(fake.stats().createsExecuted).toBe(1);
  });

  test('HTTP Basic auth with the key as user name (curl -u sk_test_…:) is accepted like Bearer; a wrong key still 401', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const basic = (credential: string) => ({ Authorization: `Basic ${Buffer.from(credential).toString('base64')}` });
    const ok = await fetch(`${fake.url}/v1/payment_intents?limit=1`, { headers: basic('sk_test_fake:') });
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ object: 'list' });
    const wrong = await fetch(`${fake.url}/v1/payment_intents?limit=1`, { headers: basic('sk_live_nope:') });
    expect(wrong.status).toBe(401);
    const empty = await fetch(`${fake.url}/v1/payment_intents?limit=1`, { headers: basic(':') });
    expect(empty.status).toBe(401);
  });

  test('Search lags for updated objects too: a settled PaymentIntent shows its old status until the lag has passed; retrieve and List at once', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx, { searchLagMs: 60_000 });
    const stripe = sdk(fake);
    const params = charge({ payment_method: 'pm_fake_sepa_debit' });
    const pi = await stripe.paymentIntents.create(params, { idempotencyKey: 'k-lag' });
    const op = (params.metadata as Record<string, string>).operation_id;
    const search = async (extra = '') => (await stripe.paymentIntents.search({ query: `metadata['operation_id']:'${op}'${extra}` })).data.map((p) => p.status);
    expect(await search()).toEqual([]); // new: not searchable yet
    fake.ageRecords(61_000);
    expect(await search()).toEqual(['processing']);
    fake.settle(pi.id, 'succeeded');
    expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');
    expect((await stripe.paymentIntents.list({ customer: 'cus_123' })).data.find((p) => p.id === pi.id)?.status).toBe('succeeded');
    expect(await search()).toEqual(['processing']); // updated: Search still shows the state of a minute ago
    expect(await search(" AND status:'succeeded'")).toEqual([]);
    fake.ageRecords(61_000);
    expect(await search()).toEqual(['succeeded']);
    expect(await search(" AND status:'succeeded'")).toEqual(['succeeded']);
  });

  test('rate limits as documented: a bucket per endpoint (25/s) and for Search (20/s) beside the global one; time is the injected clock', async (ctx) => {
    const { expect } = ctx;
    let now = 1_000_000;
    const fake = await fakeFor(ctx, { rateLimit: { perSecond: 100, now: () => now } });
    const stripe = sdk(fake);
    const statuses = async (calls: (() => Promise<unknown>)[]) =>
      (await Promise.allSettled(calls.map((c) => c()))).map((r) => (r.status === 'fulfilled' ? 200 : (r.reason as Stripe.errors.StripeError).statusCode));
    const count = (xs: (number | undefined)[], code: number) => xs.filter((x) => x === code).length;
    const retrieves = await statuses(Array.from({ length: 26 }, () => () => stripe.paymentIntents.retrieve('pi_missing')));
    expect(count(retrieves, 429)).toBe(1); // the 26th retrieve in the same instant
    const searches = await statuses(Array.from({ length: 21 }, () => () => stripe.paymentIntents.search({ query: "status:'succeeded'" })));
    expect(count(searches, 429)).toBe(1); // the 21st search
    // Another endpoint has its own bucket: Lists are not slowed by the retrieves and searches.
    const lists = await statuses(Array.from({ length: 20 }, () => () => stripe.paymentIntents.list({ limit: 1 })));
    expect(count(lists, 429)).toBe(0);
    // The two refusals are the per-endpoint ones (67 requests stay under the global 100).
    expect(fake.stats().rateLimited).toBe(2);
    now += 1_000; // a second later every bucket is full again
    expect(count(await statuses(Array.from({ length: 25 }, () => () => stripe.paymentIntents.retrieve('pi_missing'))), 429)).toBe(0);
  });
});

