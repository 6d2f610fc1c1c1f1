// Manual capture at the fake Stripe, through the REAL stripe SDK (stripe@23.1.0) over HTTP: authorize
// (capture_method=manual), capture (whole or partial), cancel, the authorization's expiry on the
// fake's injected clock, idempotency and faults on capture / cancel, and the ground truth a test
// judges by. Sources of each behaviour: the comments in local/fake-stripe/ (server.ts, ledger.ts).
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { sdkAttemptsWhenConnectionCloses, startFakeStripe, type FakeStripe, type FakeStripeOptions } from '../local/fake-stripe/server.ts';
import { WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';

const DAY_MS = 24 * 3_600_000;

async function fakeFor(ctx: TestContext, options: FakeStripeOptions = {}): Promise<FakeStripe> {
  const fake = await startFakeStripe(options);
  ctx.onTestFinished(() => fake.close());
  return fake;
}

function sdk(fake: FakeStripe, opts: { maxNetworkRetries?: number; timeout?: number } = {}): Stripe {
  return new Stripe('sk_test_capture', {
    host: fake.host,
    port: fake.port,
    protocol: 'http',
    timeout: opts.timeout ?? 5_000,
    maxNetworkRetries: opts.maxNetworkRetries ?? 0,
  });
}

let counter = 0;
function authorize(operationId = `op-cap-${++counter}`, overrides: Partial<Stripe.PaymentIntentCreateParams> = {}) {
  return {
    amount: 2000,
    currency: 'eur',
    customer: 'cus_cap',
    payment_method: 'pm_card_visa',
    confirm: true,
    capture_method: 'manual',
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

describe('manual capture at the fake Stripe, through stripe-node', () => {
  test('capture_method=manual + confirm: requires_capture, the whole amount capturable, nothing received; a capture takes it all', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-whole'), { idempotencyKey: 'k-whole' });
    expect(pi).toMatchObject({ status: 'requires_capture', capture_method: 'manual', amount: 2000, amount_capturable: 2000, amount_received: 0, canceled_at: null, cancellation_reason: null });
    // An automatic one received everything at once.
    const auto = await stripe.paymentIntents.create(authorize('op-auto', { capture_method: 'automatic' }), { idempotencyKey: 'k-auto' });
    expect(auto).toMatchObject({ status: 'succeeded', amount_capturable: 0, amount_received: 2000 });

    const captured = await stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-whole-capture' });
    expect(captured).toMatchObject({ id: pi.id, status: 'succeeded', amount_received: 2000, amount_capturable: 0 });
    expect(captured.lastResponse.statusCode).toBe(200);
    expect(fake.paymentIntents({ operationId: 'op-whole' })).toMatchObject([{ status: 'succeeded', amount_received: 2000, amount_capturable: 0, authorizationExpiresAtMs: null }]);
    expect(fake.stats().requests.capture).toBe(1);
  });

  test('a manual-capture PaymentIntent that was processing settles to requires_capture (authorized, nothing received), not succeeded; a capture then takes it', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-proc', { payment_method: 'pm_fake_processing' }), { idempotencyKey: 'k-proc' });
    expect(pi).toMatchObject({ status: 'processing', amount_received: 0 });
    fake.settle(pi.id, 'succeeded');
    expect(await stripe.paymentIntents.retrieve(pi.id)).toMatchObject({ status: 'requires_capture', amount_capturable: 2000, amount_received: 0 });
    expect(fake.paymentIntents({ operationId: 'op-proc' })[0]!.authorizationExpiresAtMs).not.toBeNull();
    expect(await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 500 }, { idempotencyKey: 'k-proc-c' })).toMatchObject({ status: 'succeeded', amount_received: 500 });
  });

  test('a partial capture releases the rest; capturing again, capturing more than authorized, capturing what is not requires_capture: payment_intent_unexpected_state / amount_too_large', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-part'), { idempotencyKey: 'k-part' });

    const tooMuch = await rejection(stripe.paymentIntents.capture(pi.id, { amount_to_capture: 2001 }, { idempotencyKey: 'k-part-c1' }));
    expect(tooMuch).toBeInstanceOf(Stripe.errors.StripeInvalidRequestError);
    expect(tooMuch).toMatchObject({ statusCode: 400, code: 'amount_too_large', param: 'amount_to_capture' });
    expect(fake.paymentIntents({ operationId: 'op-part' })[0]).toMatchObject({ status: 'requires_capture', amount_capturable: 2000 });

    const part = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 750 }, { idempotencyKey: 'k-part-c2' });
    expect(part).toMatchObject({ status: 'succeeded', amount: 2000, amount_received: 750, amount_capturable: 0 });

    const again = await rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-part-c3' }));
    expect(again).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state', type: 'StripeInvalidRequestError' });
    expect(again.message).toBe('This PaymentIntent could not be captured because it has already been captured.');
    expect((again.raw as { payment_intent?: { id: string; status: string } }).payment_intent).toMatchObject({ id: pi.id, status: 'succeeded' });

    const auto = await stripe.paymentIntents.create(authorize('op-part-auto', { capture_method: 'automatic' }), { idempotencyKey: 'k-part-auto' });
    const notCapturable = await rejection(stripe.paymentIntents.capture(auto.id, {}, { idempotencyKey: 'k-part-c4' }));
    expect(notCapturable).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    expect(notCapturable.message).toBe(
      'This PaymentIntent could not be captured because it has a status of succeeded. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.',
    );
    const missing = await rejection(stripe.paymentIntents.capture('pi_missing', {}, { idempotencyKey: 'k-part-c5' }));
    expect(missing).toMatchObject({ statusCode: 404, code: 'resource_missing', param: 'intent' });
    const zero = await rejection(stripe.paymentIntents.capture(pi.id, { amount_to_capture: 0 }, { idempotencyKey: 'k-part-c6' }));
    expect(zero).toMatchObject({ statusCode: 400, code: 'amount_too_small' });

    // A refund can give back only what was captured.
    const over = await rejection(stripe.refunds.create({ payment_intent: pi.id, amount: 751 }, { idempotencyKey: 'k-part-r1' }));
    expect(over).toMatchObject({ statusCode: 400, code: 'amount_too_large' });
    const refund = await stripe.refunds.create({ payment_intent: pi.id }, { idempotencyKey: 'k-part-r2' });
    expect(refund.amount).toBe(750);
  });

  test('idempotency on capture: same key + same parameters replays (one capture); same key + other parameters is an idempotency_error', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-idem'), { idempotencyKey: 'k-idem' });
    const first = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 1500 }, { idempotencyKey: 'k-idem-c' });
    const replay = await stripe.paymentIntents.capture(pi.id, { amount_to_capture: 1500 }, { idempotencyKey: 'k-idem-c' });
    expect(replay).toMatchObject({ id: pi.id, status: 'succeeded', amount_received: 1500 });
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(replay.lastResponse.headers['original-request']).toBe(first.lastResponse.requestId);
    const other = await rejection(stripe.paymentIntents.capture(pi.id, { amount_to_capture: 1000 }, { idempotencyKey: 'k-idem-c' }));
    expect(other).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    // The key is the capture's: used for another endpoint (the create), it mismatches too.
    const create = await rejection(stripe.paymentIntents.create(authorize('op-idem'), { idempotencyKey: 'k-idem-c' }));
    expect(create).toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(fake.stats()).toMatchObject({ replays: 1, idempotencyErrors: 2 });
    expect(fake.paymentIntents({ operationId: 'op-idem' })[0]?.amount_received).toBe(1500);
    // A refusal at the commit is the key's answer too: the same capture again gets the same 400.
    const declined = await rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-idem-c2' }));
    const declinedAgain = await rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-idem-c2' }));
    expect([declined.code, declinedAgain.code]).toEqual(['payment_intent_unexpected_state', 'payment_intent_unexpected_state']);
    expect(declinedAgain.headers?.['idempotent-replayed']).toBe('true');
  });

  test('cancel: requires_capture → canceled with the reason given, nothing capturable; a succeeded one and an unknown reason are refused', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-cancel'), { idempotencyKey: 'k-cancel' });
    const badReason = await rejection(stripe.paymentIntents.cancel(pi.id, { cancellation_reason: 'bored' as 'abandoned' }, { idempotencyKey: 'k-cancel-0' }));
    expect(badReason).toMatchObject({ statusCode: 400, param: 'cancellation_reason' });
    const before = Math.floor(Date.now() / 1000);
    const canceled = await stripe.paymentIntents.cancel(pi.id, { cancellation_reason: 'requested_by_customer' }, { idempotencyKey: 'k-cancel-1' });
    expect(canceled).toMatchObject({ status: 'canceled', cancellation_reason: 'requested_by_customer', amount_capturable: 0, amount_received: 0 });
    expect(canceled.canceled_at).toBeGreaterThanOrEqual(before);
    const capture = await rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-cancel-2' }));
    expect(capture).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    const auto = await stripe.paymentIntents.create(authorize('op-cancel-auto', { capture_method: 'automatic' }), { idempotencyKey: 'k-cancel-auto' });
    const late = await rejection(stripe.paymentIntents.cancel(auto.id, {}, { idempotencyKey: 'k-cancel-3' }));
    expect(late).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    expect(late.message).toMatch(/^You cannot cancel this PaymentIntent because it has a status of succeeded\./);
    expect(fake.paymentIntents().map((p) => p.status)).toEqual(['canceled', 'succeeded']);
  });

  test('authorization expiry on the injected clock: Stripe cancels the uncaptured PaymentIntent (automatic) after 7 days by default; capture is then refused', async (ctx) => {
    const { expect } = ctx;
    let clock = Date.parse('2026-12-01T00:00:00Z');
    const fake = await fakeFor(ctx, { now: () => clock });
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-exp'), { idempotencyKey: 'k-exp' });
    const createdOnClock = clock;
    expect(fake.paymentIntents()[0]?.authorizationExpiresAtMs).toBe(createdOnClock + 7 * DAY_MS);
    clock = createdOnClock + 7 * DAY_MS - 1;
    expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('requires_capture');
    clock = createdOnClock + 7 * DAY_MS;
    const expired = await stripe.paymentIntents.retrieve(pi.id);
    expect(expired).toMatchObject({ status: 'canceled', cancellation_reason: 'automatic', amount_capturable: 0, canceled_at: Math.floor(clock / 1000) });
    const capture = await rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-exp-c' }));
    expect(capture).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    // The ground truth over the control API, as another process reads it.
    const truth = (await (await fetch(`${fake.url}/__fake/payment_intents?operation_id=op-exp`)).json()) as { data: { status: string; cancellation_reason: string; amount_received: number }[] };
    expect(truth.data).toMatchObject([{ status: 'canceled', cancellation_reason: 'automatic', amount_received: 0 }]);
  });

  test('a time-lapse sets the expiry short; expireAuthorizations() and POST /__fake/expire_authorizations apply it; a captured one never expires', async (ctx) => {
    const { expect } = ctx;
    let clock = 1_000_000;
    const fake = await fakeFor(ctx, { now: () => clock, authorizationExpiryMs: 60_000 });
    const stripe = sdk(fake);
    const keep = await stripe.paymentIntents.create(authorize('op-tl-1'), { idempotencyKey: 'k-tl-1' });
    await stripe.paymentIntents.create(authorize('op-tl-2'), { idempotencyKey: 'k-tl-2' });
    await stripe.paymentIntents.capture(keep.id, {}, { idempotencyKey: 'k-tl-1c' });
    clock += 59_999;
    expect(fake.expireAuthorizations()).toBe(0);
    clock += 1;
    const answer = (await (await fetch(`${fake.url}/__fake/expire_authorizations`, { method: 'POST' })).json()) as { expired: number };
    expect(answer.expired).toBe(1);
    expect(fake.paymentIntents().map((p) => [p.metadata.operation_id, p.status, p.cancellation_reason])).toEqual([
      ['op-tl-1', 'succeeded', null],
      ['op-tl-2', 'canceled', 'automatic'],
    ]);
  });

  test('expiry is judged when the capture commits: a capture held past the deadline finds the PaymentIntent canceled; Search (real time) shows the expiry at once', async (ctx) => {
    const { expect } = ctx;
    let clock = Date.now();
    const fake = await fakeFor(ctx, { now: () => clock, authorizationExpiryMs: 10_000 });
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-held'), { idempotencyKey: 'k-held' });
    const held = fake.hold({ endpoint: 'capture', paymentIntentId: pi.id });
    const capture = rejection(stripe.paymentIntents.capture(pi.id, {}, { idempotencyKey: 'k-held-c' }));
    await held.arrived;
    clock += 10_000;
    held.release();
    expect(await capture).toMatchObject({ statusCode: 400, code: 'payment_intent_unexpected_state' });
    expect(fake.paymentIntents()[0]).toMatchObject({ status: 'canceled', cancellation_reason: 'automatic', amount_received: 0 });
    // The injected clock is far ahead of real time; Search's lag is measured on real time.
    clock += 30 * DAY_MS;
    const found = await stripe.paymentIntents.search({ query: "metadata['operation_id']:'op-held'" });
    expect(found.data.map((p) => [p.status, p.cancellation_reason])).toEqual([['canceled', 'automatic']]);
  });

  test('faults on capture, as on creates: 500 before the commit (nothing captured, replayed), 500 after it (captured), a lost answer (captured; the key replays), 429 (nothing), a late commit', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const made = async (op: string) => (await stripe.paymentIntents.create(authorize(op), { idempotencyKey: `k-${op}` })).id;
    const received = (op: string) => fake.paymentIntents({ operationId: op })[0]?.amount_received;

    const before = await made('op-f1');
    fake.injectFault({ endpoint: 'capture', paymentIntentId: before }, 'error_500_before_commit');
    expect(await rejection(stripe.paymentIntents.capture(before, {}, { idempotencyKey: 'k-f1' }))).toMatchObject({ statusCode: 500, type: 'StripeAPIError' });
    expect(await rejection(stripe.paymentIntents.capture(before, {}, { idempotencyKey: 'k-f1' }))).toMatchObject({ statusCode: 500 });
    expect(fake.paymentIntents({ operationId: 'op-f1' })[0]).toMatchObject({ status: 'requires_capture', amount_received: 0 });
    expect((await stripe.paymentIntents.capture(before, {}, { idempotencyKey: 'k-f1-new' })).status).toBe('succeeded');

    const after = await made('op-f2');
    fake.injectFault({ endpoint: 'capture', operationId: 'op-f2' }, 'error_500_after_commit');
    expect(await rejection(stripe.paymentIntents.capture(after, { amount_to_capture: 900 }, { idempotencyKey: 'k-f2' }))).toMatchObject({ statusCode: 500 });
    expect(received('op-f2')).toBe(900);

    const lost = await made('op-f3');
    fake.injectFault({ endpoint: 'capture', paymentIntentId: lost }, 'lost_response_after_commit', sdkAttemptsWhenConnectionCloses(0));
    expect(await rejection(stripe.paymentIntents.capture(lost, {}, { idempotencyKey: 'k-f3' }))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(received('op-f3')).toBe(2000);
    const replay = await stripe.paymentIntents.capture(lost, {}, { idempotencyKey: 'k-f3' });
    expect(replay).toMatchObject({ status: 'succeeded', amount_received: 2000 });
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');

    const limited = await made('op-f4');
    fake.injectFault({ endpoint: 'capture', paymentIntentId: limited }, 'rate_limited_429');
    expect(await rejection(stripe.paymentIntents.capture(limited, {}, { idempotencyKey: 'k-f4' }))).toBeInstanceOf(Stripe.errors.StripeRateLimitError);
    expect(received('op-f4')).toBe(0);
    expect((await stripe.paymentIntents.capture(limited, {}, { idempotencyKey: 'k-f4' })).lastResponse.headers['idempotent-replayed']).toBeUndefined();

    const late = await made('op-f5');
    fake.injectFault({ endpoint: 'capture', paymentIntentId: late }, 'error_500_late_commit');
    expect(await rejection(stripe.paymentIntents.capture(late, { amount_to_capture: 1200 }, { idempotencyKey: 'k-f5' }))).toMatchObject({ statusCode: 500 });
    expect(fake.paymentIntents({ operationId: 'op-f5' })[0]?.status).toBe('requires_capture');
    const [commit] = fake.commitLate({ endpoint: 'capture' });
    expect(commit).toMatchObject({ endpoint: 'capture', status: 200, paymentIntentId: late });
    expect(fake.paymentIntents({ operationId: 'op-f5' })[0]).toMatchObject({ status: 'succeeded', amount_received: 1200 });
    // decline and processing mean nothing for a capture.
    expect(() => fake.injectFault({ endpoint: 'capture' }, 'decline')).toThrow(RangeError);
  });

  test('faults on cancel: a lost answer after the commit (canceled; the key replays it), a 500 before it (nothing canceled)', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(authorize('op-fc'), { idempotencyKey: 'k-fc' });
    fake.injectFault({ endpoint: 'cancel' }, 'error_500_before_commit');
    expect(await rejection(stripe.paymentIntents.cancel(pi.id, {}, { idempotencyKey: 'k-fc-1' }))).toMatchObject({ statusCode: 500 });
    expect(fake.paymentIntents()[0]?.status).toBe('requires_capture');
    fake.injectFault({ endpoint: 'cancel' }, 'lost_response_after_commit', sdkAttemptsWhenConnectionCloses(0));
    expect(await rejection(stripe.paymentIntents.cancel(pi.id, { cancellation_reason: 'abandoned' }, { idempotencyKey: 'k-fc-2' }))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(fake.paymentIntents()[0]).toMatchObject({ status: 'canceled', cancellation_reason: 'abandoned' });
    const replay = await stripe.paymentIntents.cancel(pi.id, { cancellation_reason: 'abandoned' }, { idempotencyKey: 'k-fc-2' });
    expect(replay.status).toBe('canceled');
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
 
    // in_flight_then_commit: the cancel takes its key and is never answered; re-sends meet 409 until
    // the late commit cancels it and stores its answer for the key.
    const other = await stripe.paymentIntents.create(authorize('op-fc-2'), { idempotencyKey: 'k-fc-b' });
    fake.injectFault({ endpoint: 'cancel', paymentIntentId: other.id }, 'in_flight_then_commit');
    const quick = new Stripe('sk_test_capture', { host: fake.host, port: fake.port, protocol: 'http', timeout: 300, maxNetworkRetries: 0 });
    expect(await rejection(quick.paymentIntents.cancel(other.id, {}, { idempotencyKey: 'k-fc-3' }))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(await rejection(stripe.paymentIntents.cancel(other.id, {}, { idempotencyKey: 'k-fc-3' }))).toMatchObject({ statusCode: 409, code: 'idempotency_key_in_use' });
    expect(fake.paymentIntents({ operationId: 'op-fc-2' })[0]?.status).toBe('requires_capture');
    expect(fake.commitLate({ endpoint: 'cancel' })).toMatchObject([{ fault: 'in_flight_then_commit', endpoint: 'cancel', status: 200, paymentIntentId: other.id }]);
    const stored = await stripe.paymentIntents.cancel(other.id, {}, { idempotencyKey: 'k-fc-3' });
    expect(stored).toMatchObject({ status: 'canceled', cancellation_reason: null });
    expect(stored.lastResponse.headers['idempotent-replayed']).toBe('true');
  });

  test('webhook events: amount_capturable_updated on the authorization (named by the create), then succeeded and charge.captured, or canceled, or canceled and charge.expired', async (ctx) => {
    const { expect } = ctx;
    let clock = 5_000_000;
    const fake = await fakeFor(ctx, { now: () => clock, authorizationExpiryMs: 1_000 });
    const dispatcher = new WebhookDispatcher({ fake, endpoint: null, secret: 'whsec_capture' });
    ctx.onTestFinished(() => dispatcher.stop());
    const stripe = sdk(fake);
    const captured = await stripe.paymentIntents.create(authorize('op-ev-1'), { idempotencyKey: 'k-ev-1' });
    const canceled = await stripe.paymentIntents.create(authorize('op-ev-2'), { idempotencyKey: 'k-ev-2' });
    const expired = await stripe.paymentIntents.create(authorize('op-ev-3'), { idempotencyKey: 'k-ev-3' });
    dispatcher.poll();
    await stripe.paymentIntents.capture(captured.id, { amount_to_capture: 300 }, { idempotencyKey: 'k-ev-1c' });
    await stripe.paymentIntents.cancel(canceled.id, { cancellation_reason: 'duplicate' }, { idempotencyKey: 'k-ev-2c' });
    clock += 1_000;
    dispatcher.poll();
    const of = (id: string) => dispatcher.events().filter((e) => e.data.object.id === id || e.data.object.payment_intent === id);
    expect(of(captured.id).map((e) => e.type)).toEqual(['payment_intent.amount_capturable_updated', 'payment_intent.succeeded', 'charge.captured']);
    expect(of(captured.id)[0]?.request).toEqual({ id: captured.lastResponse.requestId, idempotency_key: 'k-ev-1' });
    expect(of(captured.id)[2]?.data).toMatchObject({ object: { captured: true, amount_captured: 300, amount: 2000 }, previous_attributes: { captured: false } });
    expect(of(canceled.id).map((e) => e.type)).toEqual(['payment_intent.amount_capturable_updated', 'payment_intent.canceled']);
    expect(of(expired.id).map((e) => e.type)).toEqual(['payment_intent.amount_capturable_updated', 'payment_intent.canceled', 'charge.expired']);
    expect(of(expired.id)[1]?.data.object).toMatchObject({ cancellation_reason: 'automatic' });
    expect(of(expired.id)[2]?.data.object).toMatchObject({ captured: false, refunded: true, amount_captured: 0 });
  });
});
