// The fake Stripe's late-commit faults, through the REAL stripe SDK (stripe@23.1.0) over HTTP: a
// create answered 500 (error_500_late_commit) or left in flight (in_flight_then_commit) whose object
// Stripe commits LATER — after the caller has proven by List that nothing exists. Every test starts
// its own server, so they run concurrently.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';
import { describe, test, type TestContext } from 'vitest';
import { FAULT_PROFILES } from '../local/fake-stripe/faults.ts';
import { LateCommits, type PendingCommit, type Scheduler } from '../local/fake-stripe/late-commits.ts';
import { chargeIdOf } from '../local/fake-stripe/refunds.ts';
import {
  FAULT_KINDS,
  startFakeStripe,
  type FakeStripe,
  type FakeStripeOptions,
  type LateCommitResult,
  type RequestRecord,
} from '../local/fake-stripe/server.ts';
import { WebhookDispatcher, type StripeEventJson } from '../local/fake-stripe/webhooks.ts';

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

/** A client that gives up quickly on a request nobody answers (in_flight_then_commit). */
const impatient = (fake: FakeStripe): Stripe => sdk(fake, { timeout: 150, maxNetworkRetries: 0 });

function charge(operationId: string, overrides: Partial<Stripe.PaymentIntentCreateParams> = {}) {
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

const searchFor = (operationId: string) => ({ query: `metadata['operation_id']:'${operationId}'` });

async function rejection(promise: Promise<unknown>): Promise<Stripe.errors.StripeError> {
  try {
    await promise;
  } catch (error) {
    return error as Stripe.errors.StripeError;
  }
  throw new Error('expected a rejection');
}

const byKey = (fake: FakeStripe, key: string): RequestRecord[] => fake.requests().filter((r) => r.idempotencyKey === key);
const outcomes = (fake: FakeStripe, key: string) => byKey(fake, key).map((r) => [r.status, r.fault, r.replayed]);

async function until(condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * `created` is in whole seconds: wait (for the condition, not for a guessed time) until the clock is
 * in a later second than `ms`, so that an object created at the commit cannot carry the request's second.
 */
const secondAfter = (ms: number) => until(() => Math.floor(Date.now() / 1000) > Math.floor(ms / 1000));
const seconds = (ms: number) => Math.floor(ms / 1000);

/**
 * Stripe's event deliveries for this fake, to a real local endpoint (signatures checked with the SDK).
 * `look()` makes the dispatcher look at the fake once and waits for every delivery: it returns the
 * events that arrived since the last look — so "none before the commit" is a fact, not a race.
 */
async function webhooksFor(ctx: Ctx, fake: FakeStripe): Promise<{ look(): Promise<StripeEventJson[]> }> {
  const secret = 'whsec_late_commit';
  const verifier = new Stripe('sk_test_verifier');
  const received: StripeEventJson[] = [];
  const endpoint = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
    req.on('end', () => {
      try {
        received.push(verifier.webhooks.constructEvent(body, String(req.headers['stripe-signature']), secret) as unknown as StripeEventJson);
        res.writeHead(200).end();
      } catch {
        res.writeHead(400).end();
      }
    });
  });
  await new Promise<void>((resolve) => endpoint.listen(0, '127.0.0.1', resolve));
  const dispatcher = new WebhookDispatcher({ fake, endpoint: `http://127.0.0.1:${(endpoint.address() as AddressInfo).port}/`, secret });
  ctx.onTestFinished(async () => {
    await dispatcher.stop();
    endpoint.closeAllConnections();
    await new Promise((resolve) => endpoint.close(resolve));
  });
  let seen = 0;
  return {
    async look() {
      dispatcher.poll();
      await dispatcher.drain();
      const fresh = received.slice(seen);
      seen = received.length;
      return fresh;
    },
  };
}

/** Deliveries run concurrently, so their arrival order is not Stripe's: compare them as a sorted set. */
const typesAndIds = (events: readonly StripeEventJson[]) => events.map((e) => [e.type, e.data.object.id]).sort();

describe.concurrent('fake Stripe late commits through stripe-node', () => {
  test('error_500_late_commit, PaymentIntent: 500 now and replayed; List, Search and the ground truth see nothing; the commit makes it with our metadata and created = the commit; its event only then; the key still answers 500', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const hooks = await webhooksFor(ctx, fake);
    const stripe = sdk(fake);
    const params = charge('op-late');
    fake.injectFault({ operationId: 'op-late' }, 'error_500_late_commit');

    const first = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-late' }));
    const answeredAt = Date.now();
    expect(first).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(first).toMatchObject({ statusCode: 500, rawType: 'api_error', message: 'An unknown error occurred' });
    const again = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-late' }));
    expect(again).toMatchObject({ statusCode: 500 });
    expect(again.headers?.['idempotent-replayed']).toBe('true');

    // The caller's proof of absence — List twice, Search — finds nothing, and nothing is there.
    expect((await stripe.paymentIntents.list({ customer: 'cus_123' })).data).toEqual([]);
    expect((await stripe.paymentIntents.list({ customer: 'cus_123', created: { gte: seconds(answeredAt) - 60 } })).data).toEqual([]);
    expect((await stripe.paymentIntents.search(searchFor('op-late'))).data).toEqual([]);
    expect(fake.paymentIntents()).toEqual([]);
    expect(await hooks.look()).toEqual([]);
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 1, lateCommitsMade: 0, createsExecuted: 0 });

    await secondAfter(answeredAt);
    const before = Date.now();
    const committed = fake.commitLate({ operationId: 'op-late' });
    const after = Date.now();
    const [request] = byKey(fake, 'k-late');
    expect(committed).toEqual([
      {
        fault: 'error_500_late_commit',
        endpoint: 'create',
        idempotencyKey: 'k-late',
        operationId: 'op-late',
        orderId: 'order-op-late',
        requestSeq: request!.seq,
        status: 200,
        paymentIntentId: expect.stringMatching(/^pi_/),
        refundId: null,
        committedAtMs: expect.any(Number),
      } satisfies LateCommitResult,
    ]);
    const made = committed[0]!;
    expect(made.committedAtMs).toBeGreaterThanOrEqual(before);
    expect(made.committedAtMs).toBeLessThanOrEqual(after);

    const listed = await stripe.paymentIntents.list({ customer: 'cus_123' });
    expect(listed.data.map((p) => p.id)).toEqual([made.paymentIntentId]);
    const pi = listed.data[0]!;
    expect(pi).toMatchObject({ status: 'succeeded', amount: 1299, currency: 'jpy', payment_method: 'pm_card_visa' });
    expect(pi.metadata).toEqual(params.metadata);
    expect(pi.created).toBe(seconds(made.committedAtMs));
    expect(pi.created).toBeGreaterThan(seconds(answeredAt));
    expect((await stripe.paymentIntents.retrieve(pi.id)).status).toBe('succeeded');
    expect((await stripe.paymentIntents.search(searchFor('op-late'))).data.map((p) => p.id)).toEqual([pi.id]);
    expect(fake.paymentIntents()).toEqual([expect.objectContaining({ id: pi.id, idempotencyKey: 'k-late', createdAtMs: made.committedAtMs })]);

    // The answer stored for the key is the 500, as it was given.
    const afterCommit = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-late' }));
    expect(afterCommit).toMatchObject({ statusCode: 500 });
    expect(afterCommit.headers?.['idempotent-replayed']).toBe('true');
    expect(outcomes(fake, 'k-late')).toEqual([
      [500, 'error_500_late_commit', false],
      [500, null, true],
      [500, null, true],
    ]);
    expect(byKey(fake, 'k-late')[0]).toMatchObject({ paymentIntentId: pi.id, lateCommittedAt: made.committedAtMs });
    expect(byKey(fake, 'k-late')[1]).not.toHaveProperty('lateCommittedAt');

    const events = await hooks.look();
    expect(typesAndIds(events)).toEqual([['payment_intent.succeeded', pi.id]]);
    expect(events[0]!.data.object.metadata).toEqual(params.metadata);
    expect(events[0]!.created).toBeGreaterThanOrEqual(seconds(before));
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 0, lateCommitsMade: 1, createsExecuted: 1, faults: { error_500_late_commit: 1 } });
    expect(fake.commitLate()).toEqual([]);
  });

  test('error_500_late_commit, Refund: nothing listed and the charge untouched until the commit — after a re-issue under a new key, the commit makes the second refund, created = the commit, amount_refunded told only then', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(charge('op-paid'), { idempotencyKey: 'k-paid' });
    const hooks = await webhooksFor(ctx, fake);
    expect(typesAndIds(await hooks.look())).toEqual([['payment_intent.succeeded', pi.id]]);

    const orderId = pi.metadata.order_id!;
    const refund = (generation: number): Stripe.RefundCreateParams => ({
      payment_intent: pi.id,
      amount: 300,
      metadata: { operation_id: 'op-refund', order_id: orderId, key_generation: String(generation) },
    });
    fake.injectFault({ endpoint: 'refund_create', orderId }, 'error_500_late_commit');
    const first = await rejection(stripe.refunds.create(refund(0), { idempotencyKey: 'k-refund-0' }));
    const answeredAt = Date.now();
    expect(first).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(first).toMatchObject({ statusCode: 500, rawType: 'api_error' });
    const again = await rejection(stripe.refunds.create(refund(0), { idempotencyKey: 'k-refund-0' }));
    expect(again.headers?.['idempotent-replayed']).toBe('true');
    expect((await stripe.refunds.list({ payment_intent: pi.id })).data).toEqual([]);
    expect((await stripe.refunds.list({ payment_intent: pi.id })).data).toEqual([]);
    expect(fake.refunds()).toEqual([]);
    expect(await hooks.look()).toEqual([]);

    // Absence proven twice, the caller re-issues under a new key: a refund of 300 of the 1299.
    const reissued = await stripe.refunds.create(refund(1), { idempotencyKey: 'k-refund-1' });
    expect(reissued).toMatchObject({ status: 'succeeded', amount: 300 });
    const reissueEvents = await hooks.look();
    expect(typesAndIds(reissueEvents)).toEqual([['charge.refunded', chargeIdOf(pi.id)], ['refund.created', reissued.id]]);
    expect(reissueEvents.find((e) => e.type === 'charge.refunded')?.data).toMatchObject({ object: { amount_refunded: 300 }, previous_attributes: { amount_refunded: 0 } });

    await secondAfter(answeredAt);
    const before = Date.now();
    const committed = fake.commitLate({ endpoint: 'refund_create', paymentIntentId: pi.id });
    expect(committed).toEqual([
      {
        fault: 'error_500_late_commit',
        endpoint: 'refund_create',
        idempotencyKey: 'k-refund-0',
        operationId: 'op-refund',
        orderId,
        requestSeq: byKey(fake, 'k-refund-0')[0]!.seq,
        status: 200,
        paymentIntentId: pi.id,
        refundId: expect.stringMatching(/^re_/),
        committedAtMs: expect.any(Number),
      } satisfies LateCommitResult,
    ]);
    const made = committed[0]!;
    const listed = (await stripe.refunds.list({ payment_intent: pi.id })).data;
    expect(listed.map((r) => r.id)).toEqual([made.refundId, reissued.id]);
    expect(listed[0]).toMatchObject({ amount: 300, status: 'succeeded', created: seconds(made.committedAtMs) });
    expect(listed[0]!.metadata).toEqual(refund(0).metadata);
    expect(listed[0]!.created).toBeGreaterThan(seconds(answeredAt));
    expect((await stripe.refunds.retrieve(made.refundId!)).status).toBe('succeeded');

    const commitEvents = await hooks.look();
    expect(typesAndIds(commitEvents)).toEqual([['charge.refunded', chargeIdOf(pi.id)], ['refund.created', made.refundId]]);
    expect(commitEvents.find((e) => e.type === 'charge.refunded')?.data).toMatchObject({ object: { amount_refunded: 600 }, previous_attributes: { amount_refunded: 300 } });
    expect(commitEvents.every((e) => e.created >= seconds(before))).toBe(true);

    const afterCommit = await rejection(stripe.refunds.create(refund(0), { idempotencyKey: 'k-refund-0' }));
    expect(afterCommit).toMatchObject({ statusCode: 500 });
    expect(outcomes(fake, 'k-refund-0')).toEqual([
      [500, 'error_500_late_commit', false],
      [500, null, true],
      [500, null, true],
    ]);
    expect(byKey(fake, 'k-refund-0')[0]).toMatchObject({ refundId: made.refundId, lateCommittedAt: made.committedAtMs });
    expect(fake.stats()).toMatchObject({ refundCreatesExecuted: 2, lateCommitsPending: 0, lateCommitsMade: 1, refunds: { total: 2 } });
  });

  test('in_flight_then_commit, PaymentIntent: the call times out, re-sends get 409 idempotency_key_in_use (StripeAPIError) while nothing exists; after the commit the key replays 200 with the object, created = the commit', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const hooks = await webhooksFor(ctx, fake);
    const stripe = sdk(fake);
    const params = charge('op-flight');
    fake.injectFault({ operationId: 'op-flight' }, 'in_flight_then_commit');

    const timedOut = await rejection(impatient(fake).paymentIntents.create(params, { idempotencyKey: 'k-flight' }));
    const answeredAt = Date.now();
    expect(timedOut).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(timedOut.message).toMatch(/timeout/);
    // stripe-node 23.1.0 maps a 409 to StripeAPIError: generateV1Error makes StripeIdempotencyError
    // of an idempotency_error only on a 400 or 404 (node_modules/stripe/cjs/Error.js).
    const busy = await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-flight' }));
    expect(busy).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(busy).not.toBeInstanceOf(Stripe.errors.StripeIdempotencyError);
    expect(busy).toMatchObject({ statusCode: 409, code: 'idempotency_key_in_use', rawType: 'idempotency_error' });
    expect((await rejection(stripe.paymentIntents.create(params, { idempotencyKey: 'k-flight' })))).toMatchObject({ statusCode: 409 });
    expect((await stripe.paymentIntents.list({ customer: 'cus_123' })).data).toEqual([]);
    expect((await stripe.paymentIntents.search(searchFor('op-flight'))).data).toEqual([]);
    expect(fake.paymentIntents()).toEqual([]);
    expect(await hooks.look()).toEqual([]);
    expect(fake.stats()).toMatchObject({ conflicts409: 2, lateCommitsPending: 1, lateCommitsMade: 0, createsExecuted: 0, keysCached: 1 });

    await secondAfter(answeredAt);
    const [made] = fake.commitLate({ idempotencyKey: 'k-flight' });
    expect(made).toMatchObject({ fault: 'in_flight_then_commit', endpoint: 'create', status: 200, paymentIntentId: expect.stringMatching(/^pi_/) });

    const replay = await stripe.paymentIntents.create(params, { idempotencyKey: 'k-flight' });
    expect(replay.id).toBe(made!.paymentIntentId);
    expect(replay).toMatchObject({ status: 'succeeded', created: seconds(made!.committedAtMs) });
    expect(replay.created).toBeGreaterThan(seconds(answeredAt));
    expect(replay.metadata).toEqual(params.metadata);
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(replay.lastResponse.headers['original-request']).toBe(byKey(fake, 'k-flight')[0]!.requestId);
    expect((await stripe.paymentIntents.list({ customer: 'cus_123' })).data.map((p) => p.id)).toEqual([replay.id]);
    expect(outcomes(fake, 'k-flight')).toEqual([
      ['hung', 'in_flight_then_commit', false],
      [409, null, false],
      [409, null, false],
      [200, null, true],
    ]);
    expect(byKey(fake, 'k-flight')[0]).toMatchObject({ paymentIntentId: replay.id, lateCommittedAt: made!.committedAtMs });
    expect(typesAndIds(await hooks.look())).toEqual([['payment_intent.succeeded', replay.id]]);
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 0, lateCommitsMade: 1, createsExecuted: 1, replays: 1 });
  });

  test('in_flight_then_commit, Refund: 409 while in flight, nothing listed; after the commit the key replays the Refund', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    const pi = await stripe.paymentIntents.create(charge('op-paid'), { idempotencyKey: 'k-paid' });
    const params: Stripe.RefundCreateParams = { payment_intent: pi.id, metadata: { operation_id: 'op-rf', order_id: pi.metadata.order_id! } };
    fake.injectFault({ endpoint: 'refund_create' }, 'in_flight_then_commit');

    expect(await rejection(impatient(fake).refunds.create(params, { idempotencyKey: 'k-rf' }))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    const busy = await rejection(stripe.refunds.create(params, { idempotencyKey: 'k-rf' }));
    expect(busy).toBeInstanceOf(Stripe.errors.StripeAPIError);
    expect(busy).toMatchObject({ statusCode: 409, code: 'idempotency_key_in_use' });
    expect((await stripe.refunds.list({ payment_intent: pi.id })).data).toEqual([]);

    const [made] = fake.commitLate({ endpoint: 'refund_create' });
    expect(made).toMatchObject({ fault: 'in_flight_then_commit', endpoint: 'refund_create', status: 200, paymentIntentId: pi.id, refundId: expect.stringMatching(/^re_/) });
    const replay = await stripe.refunds.create(params, { idempotencyKey: 'k-rf' });
    expect(replay).toMatchObject({ id: made!.refundId, amount: 1299, status: 'succeeded' });
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect((await stripe.refunds.list({ payment_intent: pi.id })).data.map((r) => r.id)).toEqual([made!.refundId]);
    expect(outcomes(fake, 'k-rf')).toEqual([
      ['hung', 'in_flight_then_commit', false],
      [409, null, false],
      [200, null, true],
    ]);
    expect(fake.stats()).toMatchObject({ refundCreatesExecuted: 1, lateCommitsMade: 1 });
  });

  test('a decline at the commit: the PaymentIntent is made in requires_payment_method (payment_intent.payment_failed); in flight, its 402 is what the key stores; after a late 500, the key keeps its 500', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const hooks = await webhooksFor(ctx, fake);
    const stripe = sdk(fake);
    const declined = { payment_method: 'pm_card_chargeDeclined' };
    fake.injectFault({ operationId: 'op-d-flight' }, 'in_flight_then_commit');
    fake.injectFault({ operationId: 'op-d-500' }, 'error_500_late_commit');
    await rejection(impatient(fake).paymentIntents.create(charge('op-d-flight', declined), { idempotencyKey: 'k-d-flight' }));
    await rejection(stripe.paymentIntents.create(charge('op-d-500', declined), { idempotencyKey: 'k-d-500' }));
    expect(fake.paymentIntents()).toEqual([]);

    const committed = fake.commitLate();
    expect(committed.map((c) => [c.idempotencyKey, c.status])).toEqual([
      ['k-d-flight', 402],
      ['k-d-500', 402],
    ]);
    const [inFlight, after500] = committed.map((c) => c.paymentIntentId!);
    expect(fake.paymentIntents().map((p) => [p.id, p.status])).toEqual([
      [inFlight, 'requires_payment_method'],
      [after500, 'requires_payment_method'],
    ]);
    const card = await rejection(stripe.paymentIntents.create(charge('op-d-flight', declined), { idempotencyKey: 'k-d-flight' }));
    expect(card).toBeInstanceOf(Stripe.errors.StripeCardError);
    expect(card).toMatchObject({ statusCode: 402, code: 'card_declined', decline_code: 'generic_decline' });
    expect(card.headers?.['idempotent-replayed']).toBe('true');
    expect(card.payment_intent).toMatchObject({ id: inFlight, status: 'requires_payment_method' });
    expect(await rejection(stripe.paymentIntents.create(charge('op-d-500', declined), { idempotencyKey: 'k-d-500' }))).toMatchObject({ statusCode: 500 });
    expect(typesAndIds(await hooks.look())).toEqual([
      ['payment_intent.payment_failed', inFlight],
      ['payment_intent.payment_failed', after500],
    ].sort());
  });

  test('lateCommitMs: the commits happen by themselves (waited for through the stats); the request left in flight is still never answered', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx, { lateCommitMs: 20 });
    const stripe = sdk(fake);
    fake.injectFault({ operationId: 'op-auto-500' }, 'error_500_late_commit');
    fake.injectFault({ operationId: 'op-auto-flight' }, 'in_flight_then_commit');
    expect(await rejection(stripe.paymentIntents.create(charge('op-auto-500'), { idempotencyKey: 'k-auto-500' }))).toMatchObject({ statusCode: 500 });
    const unanswered = await rejection(impatient(fake).paymentIntents.create(charge('op-auto-flight'), { idempotencyKey: 'k-auto-flight' }));
    expect(unanswered).toBeInstanceOf(Stripe.errors.StripeConnectionError);

    await until(() => fake.stats().lateCommitsMade === 2);
    expect(fake.stats().lateCommitsPending).toBe(0);
    expect(fake.paymentIntents().map((p) => [p.metadata.operation_id, p.status]).sort()).toEqual([
      ['op-auto-500', 'succeeded'],
      ['op-auto-flight', 'succeeded'],
    ]);
    const replay = await stripe.paymentIntents.create(charge('op-auto-flight'), { idempotencyKey: 'k-auto-flight' });
    expect(replay.lastResponse.headers['idempotent-replayed']).toBe('true');
    expect(replay.id).toBe(fake.paymentIntents({ operationId: 'op-auto-flight' })[0]!.id);
    expect(await rejection(stripe.paymentIntents.create(charge('op-auto-500'), { idempotencyKey: 'k-auto-500' }))).toMatchObject({ statusCode: 500 });
    expect(byKey(fake, 'k-auto-flight')[0]).toMatchObject({ status: 'hung', lateCommittedAt: expect.any(Number) });
    expect(fake.commitLate()).toEqual([]);
    await expect(startFakeStripe({ lateCommitMs: -1 })).rejects.toThrow(/lateCommitMs must be a non-negative number/);
  });

  test('reset() drops pending late commits (and the keys they held); close() drops them with their timers', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx, { lateCommitMs: 600_000 });
    const stripe = sdk(fake);
    fake.injectFault({ endpoint: 'create' }, 'error_500_late_commit');
    fake.injectFault({ endpoint: 'create' }, 'in_flight_then_commit');
    await rejection(stripe.paymentIntents.create(charge('op-r1'), { idempotencyKey: 'k-r1' }));
    await rejection(impatient(fake).paymentIntents.create(charge('op-r2'), { idempotencyKey: 'k-r2' }));
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 2, keysCached: 2 });
    fake.reset();
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 0, lateCommitsMade: 0, keysCached: 0 });
    expect(fake.commitLate()).toEqual([]);
    expect(fake.paymentIntents()).toEqual([]);
    // The key left in flight is forgotten with everything else: it runs as a new request.
    const fresh = await stripe.paymentIntents.create(charge('op-r2'), { idempotencyKey: 'k-r2' });
    expect(fresh.lastResponse.headers['idempotent-replayed']).toBeUndefined();
    expect(fake.paymentIntents().map((p) => p.id)).toEqual([fresh.id]);

    const closing = await fakeFor(ctx, { lateCommitMs: 600_000 });
    closing.injectFault({}, 'error_500_late_commit');
    await rejection(sdk(closing).paymentIntents.create(charge('op-c1'), { idempotencyKey: 'k-c1' }));
    expect(closing.stats().lateCommitsPending).toBe(1);
    await closing.close();
    expect(closing.stats()).toMatchObject({ lateCommitsPending: 0, lateCommitsMade: 0 });
    expect(closing.commitLate()).toEqual([]);
    expect(closing.paymentIntents()).toEqual([]);
  });

  test('scripted and random like any fault: creates only, matched by the usual matchers, released selectively; the control API', async (ctx) => {
    const { expect } = ctx;
    const fake = await fakeFor(ctx);
    const stripe = sdk(fake);
    for (const endpoint of ['retrieve', 'search', 'list', 'refund_retrieve', 'refund_list'] as const) {
      expect(() => fake.injectFault({ endpoint }, 'error_500_late_commit')).toThrow(/only applies to creates/);
      expect(() => fake.injectFault({ endpoint }, 'in_flight_then_commit')).toThrow(/only applies to creates/);
    }
    // A retrieve does not spend a scripted late commit; a replay does not either.
    const paid = await stripe.paymentIntents.create(charge('op-s0'), { idempotencyKey: 'k-s0' });
    fake.injectFault({}, 'error_500_late_commit', 2);
    await stripe.paymentIntents.retrieve(paid.id);
    await stripe.paymentIntents.create(charge('op-s0'), { idempotencyKey: 'k-s0' });
    await rejection(stripe.paymentIntents.create(charge('op-s1'), { idempotencyKey: 'k-s1' }));
    await rejection(stripe.paymentIntents.create(charge('op-s2'), { idempotencyKey: 'k-s2' }));
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 2, faults: { error_500_late_commit: 2 } });

    const control = async (path: string, body: unknown) => {
      const response = await fetch(`${fake.url}/__fake/${path}`, { method: 'POST', body: JSON.stringify(body), headers: { 'Content-Type': 'application/json' } });
      return { status: response.status, body: (await response.json()) as { committed?: LateCommitResult[]; error?: { message: string } } };
    };
    expect(await control('commit_late', { match: { operationId: 'op-none' } })).toEqual({ status: 200, body: { committed: [] } });
    const one = await control('commit_late', { match: { orderId: 'order-op-s2' } });
    expect(one.body.committed?.map((c) => [c.idempotencyKey, c.status])).toEqual([['k-s2', 200]]);
    expect(fake.stats()).toMatchObject({ lateCommitsPending: 1, lateCommitsMade: 1 });
    expect((await control('commit_late', { match: { endpoint: 'nope' } })).status).toBe(400);
    expect((await control('faults', { match: { operationId: 'op-s3' }, fault: 'in_flight_then_commit' })).status).toBe(200);
    await rejection(impatient(fake).paymentIntents.create(charge('op-s3'), { idempotencyKey: 'k-s3' }));
    const rest = await control('commit_late', {});
    expect(rest.body.committed?.map((c) => [c.idempotencyKey, c.fault])).toEqual([
      ['k-s1', 'error_500_late_commit'],
      ['k-s3', 'in_flight_then_commit'],
    ]);
    const stats = (await (await fetch(`${fake.url}/__fake/stats`)).json()) as Record<string, unknown>;
    expect(stats).toMatchObject({ lateCommitsPending: 0, lateCommitsMade: 3 });

    // Random rates: drawn for PaymentIntent and Refund creates alike.
    const random = await fakeFor(ctx, { faults: { seed: 1, rates: { error_500_late_commit: 1 } } });
    const randomStripe = sdk(random);
    expect(await rejection(randomStripe.paymentIntents.create(charge('op-rand'), { idempotencyKey: 'k-rand' }))).toMatchObject({ statusCode: 500 });
    const [made] = random.commitLate();
    random.setFaultRates({ in_flight_then_commit: 1 });
    const refundParams = { payment_intent: made!.paymentIntentId!, metadata: { operation_id: 'op-rand-r' } };
    expect(await rejection(impatient(random).refunds.create(refundParams, { idempotencyKey: 'k-rand-r' }))).toBeInstanceOf(Stripe.errors.StripeConnectionError);
    expect(random.requests().map((r) => [r.endpoint, r.fault, r.faultSource])).toEqual([
      ['create', 'error_500_late_commit', 'random'],
      ['refund_create', 'in_flight_then_commit', 'random'],
    ]);
    expect(random.stats()).toMatchObject({ lateCommitsPending: 1, lateCommitsMade: 1 });
  });

  test('the fault kinds are appended, never reordered (reproducible draws); only the chaos profile has the late commits', ({ expect }) => {
    expect(FAULT_KINDS).toEqual([
      'lost_response_after_commit',
      'error_500_after_commit',
      'error_500_before_commit',
      'rate_limited_429',
      'hang',
      'decline',
      'processing',
      'unauthorized_401',
      'permission_403',
      'proxy_502_after_commit',
      'truncated_response_after_commit',
      'stall_after_commit',
      'error_500_late_commit',
      'in_flight_then_commit',
      'lock_timeout_429',
    ]);
    const late = (rates: Readonly<Record<string, number>>) => Object.fromEntries(Object.entries(rates).filter(([kind]) => kind.includes('late') || kind.includes('in_flight')));
    expect(Object.fromEntries(Object.entries(FAULT_PROFILES).map(([name, rates]) => [name, late(rates)]))).toEqual({
      none: {},
      flaky: {},
      chaos: { error_500_late_commit: 0.01, in_flight_then_commit: 0.005 },
    });
  });
});

describe('LateCommits, the queue: every timer it sets is cancelled when its commit is released, dropped or cleared', () => {
  /** A clock of our own: timers are recorded, fired by hand. */
  function handClock(): Scheduler & { readonly timers: Map<number, { run: () => void; ms: number }> } {
    const timers = new Map<number, { run: () => void; ms: number }>();
    let next = 0;
    return {
      timers,
      set: (run, ms) => {
        next += 1;
        timers.set(next, { run, ms });
        return next;
      },
      cancel: (handle) => void timers.delete(handle as number),
    };
  }
  const made: string[] = [];
  const pending = (operationId: string, requestSeq: number): PendingCommit => ({
    fault: 'error_500_late_commit',
    requestSeq,
    facts: { endpoint: 'create', operationId, orderId: null, idempotencyKey: `k-${operationId}`, paymentIntentId: null },
    commit: () => {
      made.push(operationId);
      return { fault: 'error_500_late_commit', endpoint: 'create', idempotencyKey: `k-${operationId}`, operationId, orderId: null, requestSeq, status: 200, paymentIntentId: `pi_${operationId}`, refundId: null, committedAtMs: 0 };
    },
  });

  test('released, fired, dropped, cleared', ({ expect }) => {
    const clock = handClock();
    const queue = new LateCommits(500, clock);
    queue.add(pending('b', 2));
    queue.add(pending('a', 1));
    queue.add(pending('c', 3));
    expect([...clock.timers.values()].map((t) => t.ms)).toEqual([500, 500, 500]);
    expect(queue.release({ operationId: 'b' }).map((r) => r.operationId)).toEqual(['b']);
    expect(clock.timers.size).toBe(2);
    clock.timers.get(2)!.run(); // a's timer
    expect(made).toEqual(['b', 'a']);
    expect({ pending: queue.pending, made: queue.made, timers: clock.timers.size }).toEqual({ pending: 1, made: 2, timers: 1 });
    queue.drop();
    expect({ pending: queue.pending, made: queue.made, timers: clock.timers.size }).toEqual({ pending: 0, made: 2, timers: 0 });
    queue.add(pending('e', 5));
    queue.add(pending('d', 4));
    expect(queue.release().map((r) => r.operationId)).toEqual(['d', 'e']); // oldest request first
    queue.add(pending('f', 6));
    queue.clear();
    expect({ pending: queue.pending, made: queue.made, timers: clock.timers.size }).toEqual({ pending: 0, made: 0, timers: 0 });
    expect(made).toEqual(['b', 'a', 'd', 'e']);

    const manual = new LateCommits(null, clock);
    manual.add(pending('g', 7));
    expect(clock.timers.size).toBe(0);
    expect(manual.release().map((r) => r.operationId)).toEqual(['g']);
  });
});
