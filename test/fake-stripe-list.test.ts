// The fake Stripe's GET /v1/payment_intents, held to Stripe's documented List behaviour
// (docs.stripe.com/api/payment_intents/list, /api/pagination): customer and created[gt|gte|lt|lte]
// filters, limit 1–100 (default 10), starting_after cursors, newest first, has_more, real time (no
// Search lag), faults on List (429, 500, lost). Through the real stripe SDK where it can be.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type Stripe from 'stripe';
import { createStripeClient, StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import { startFakeStripe } from '../local/fake-stripe/server.ts';
import type { FakeStripe } from '../local/fake-stripe/types.ts';

let fake: FakeStripe;
let stripe: Stripe;
let gateway: StripeGateway;

beforeAll(async () => {
  fake = await startFakeStripe();
  stripe = createStripeClient({ apiKey: 'sk_test_list', apiBase: fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 });
  gateway = new StripeGateway(stripe);
});
afterAll(() => fake.close());
beforeEach(() => fake.reset());

async function create(customer: string, i: number) {
  return stripe.paymentIntents.create(
    { amount: 100 + i, currency: 'eur', customer, payment_method: 'pm_card_visa', confirm: true, off_session: true, metadata: { order_id: `o-${i}` } },
    { idempotencyKey: `list-test-${customer}-${i}` },
  );
}

const get = (query: string) => fetch(`${fake.url}/v1/payment_intents?${query}`, { headers: { Authorization: 'Bearer sk_test_list' } });

describe('GET /v1/payment_intents (the fake)', () => {
  it('lists a customer’s PaymentIntents newest first, 10 by default, with has_more, and only that customer’s', async () => {
    for (let i = 0; i < 12; i++) await create('cus_a', i);
    await create('cus_b', 99);
    const page = await stripe.paymentIntents.list({ customer: 'cus_a' });
    expect(page.object).toBe('list');
    expect(page.url).toBe('/v1/payment_intents');
    expect(page.data).toHaveLength(10);
    expect(page.has_more).toBe(true);
    expect(page.data.map((pi) => pi.amount)).toEqual([111, 110, 109, 108, 107, 106, 105, 104, 103, 102]);
    expect(page.data.every((pi) => pi.customer === 'cus_a')).toBe(true);
  });

  it('pages through more than 100 PaymentIntents with limit 100 and starting_after, each exactly once', async () => {
    for (let i = 0; i < 150; i++) await create('cus_many', i);
    const first = await stripe.paymentIntents.list({ customer: 'cus_many', limit: 100 });
    expect(first.data).toHaveLength(100);
    expect(first.has_more).toBe(true);
    const second = await stripe.paymentIntents.list({ customer: 'cus_many', limit: 100, starting_after: first.data.at(-1)!.id });
    expect(second.data).toHaveLength(50);
    expect(second.has_more).toBe(false);
    const ids = [...first.data, ...second.data].map((pi) => pi.id);
    expect(new Set(ids).size).toBe(150);
    expect(ids).toEqual(fake.paymentIntents().filter((pi) => pi.customer === 'cus_many').map((pi) => pi.id).reverse());
    // The gateway reads every page and keeps each page's Request-Id.
    const now = Math.floor(Date.now() / 1000);
    const listed = await gateway.listPaymentIntents({ scope: { customer: 'cus_many' }, createdGte: now - 60, createdLte: now + 60 });
    expect(listed.ok && listed.value).toMatchObject({ pages: 2, complete: true });
    expect(listed.ok && listed.value.items).toHaveLength(150);
    expect(listed.ok && listed.value.requestIds).toHaveLength(2);
  });

  it('filters on created with gt, gte, lt and lte (Unix seconds)', async () => {
    const pi = await create('cus_t', 1);
    const c = pi.created;
    const count = async (created: Stripe.RangeQueryParam | number) => (await stripe.paymentIntents.list({ customer: 'cus_t', created })).data.length;
    expect(await count({ gte: c, lte: c })).toBe(1);
    expect(await count({ gt: c })).toBe(0);
    expect(await count({ lt: c })).toBe(0);
    expect(await count({ gt: c - 1, lt: c + 1 })).toBe(1);
    expect(await count(c)).toBe(1);
    expect(await count({ lte: c - 1 })).toBe(0);
  });

  it('is real time: a PaymentIntent is listed at once, while Search does not show it yet', async () => {
    fake.setSearchLag(60_000);
    const pi = await create('cus_rt', 1);
    expect((await stripe.paymentIntents.list({ customer: 'cus_rt' })).data.map((x) => x.id)).toEqual([pi.id]);
    expect((await stripe.paymentIntents.search({ query: `metadata['order_id']:'o-1'` })).data).toHaveLength(0);
  });

  it('refuses what Stripe refuses: limit outside 1–100, a cursor that is no PaymentIntent, an unknown parameter', async () => {
    for (const query of ['limit=101', 'limit=0', 'limit=abc', 'starting_after=pi_nope', 'colour=blue', 'created[gte]=yesterday']) {
      const res = await get(query);
      expect(res.status, query).toBe(400);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');
    }
    await expect(stripe.paymentIntents.list({ limit: 101 })).rejects.toMatchObject({ type: 'StripeInvalidRequestError', statusCode: 400 });
  });

  it.each([
    ['rate_limited_429', 'StripeRateLimitError', 'rate_limited'],
    ['error_500_after_commit', 'StripeAPIError', 'ambiguous'],
    ['lost_response_after_commit', 'StripeConnectionError', 'ambiguous'],
    ['permission_403', 'StripePermissionError', 'permission'],
  ] as const)('faults on List too (%s): the gateway reads a failure, never an empty list', async (fault, errorClass, kind) => {
    await create('cus_f', 1);
    // The SDK retries a closed connection once even with maxNetworkRetries 0.
    fake.injectFault({ endpoint: 'list', customerId: 'cus_f' }, fault, fault === 'lost_response_after_commit' ? 2 : 1);
    const now = Math.floor(Date.now() / 1000);
    const listed = await gateway.listPaymentIntents({ scope: { customer: 'cus_f' }, createdGte: now - 60, createdLte: now + 60 });
    expect(listed).toMatchObject({ ok: false, failure: { errorClass, kind } });
    const again = await gateway.listPaymentIntents({ scope: { customer: 'cus_f' }, createdGte: now - 60, createdLte: now + 60 });
    expect(again.ok && again.value.items).toHaveLength(1);
    expect(fake.stats().requests.list).toBeGreaterThanOrEqual(2);
  });
});
