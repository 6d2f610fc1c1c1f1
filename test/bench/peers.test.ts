// bench:peers' own building blocks: the shared fault schedule, the ground-truth checker on every
// contestant's store layout, and a small run that must SEE the naive handler's double charges — so
// the benchmark can never print "0" because it is blind.
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { inject } from 'vitest';
import { startFakeStripe, type FakeStripe } from '../../local/fake-stripe/server.ts';
import type { FaultKind, FaultRates, PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import type { TimeLapse } from '../../local/pipeline.ts';
import { CONTESTANTS } from '../../bench/peers/bench.ts';
import { dbos } from '../../bench/peers/contestants/dbos.ts';
import { durable } from '../../bench/peers/contestants/durable.ts';
import { naive } from '../../bench/peers/contestants/naive.ts';
import { runContestant } from '../../bench/peers/run.ts';
import { limitBehindIntake } from '../../bench/peers/contestants/limit-intake.ts';
import { faultFor, makeWorkload } from '../../bench/peers/schedule.ts';
import { startDynalite, type Dynalite } from '../../bench/peers/stores.ts';
import { judgeOrder } from '../../bench/peers/truth.ts';

/** Faults that apply to any create whatever its key's history (gate and answer stages). */
const KEY_INDEPENDENT: FaultRates = { rate_limited_429: 0.3, proxy_502_after_commit: 0.3 };

async function postCreate(fake: FakeStripe, orderId: string, key: string | null): Promise<void> {
  const body = new URLSearchParams({
    amount: '1000',
    currency: 'eur',
    customer: 'cus_peers',
    payment_method: 'pm_card_visa',
    confirm: 'true',
    off_session: 'true',
    'metadata[order_id]': orderId,
  });
  await fetch(`${fake.url}/v1/payment_intents`, {
    method: 'POST',
    headers: { Authorization: 'Bearer sk_test_x', 'Content-Type': 'application/x-www-form-urlencoded', ...(key ? { 'Idempotency-Key': key } : {}) },
    body,
  }).then((r) => r.text());
}

describe('the fault schedule', () => {
  test('same seed: the same faults on the same orders, whichever key (or none) the caller sends', async () => {
    const seed = 7;
    const orders = Array.from({ length: 20 }, (_, i) => `peer-order-${i}`);
    // Three key styles: this product's derived key, a key per attempt (the SDK's), no key at all.
    const styles: ((orderId: string, attempt: number) => string | null)[] = [
      (o) => `op-of-${o}`,
      (o, n) => `stripe-node-retry-${o}-${n}`,
      () => null,
    ];
    const seen: Map<string, (FaultKind | null)[]>[] = [];
    for (const style of styles) {
      const fake = await startFakeStripe({ faults: { seed, rates: KEY_INDEPENDENT, keyBy: 'order' } });
      try {
        for (const o of orders) for (let n = 1; n <= 3; n++) await postCreate(fake, o, style(o, n));
        const byOrder = new Map<string, (FaultKind | null)[]>();
        for (const r of fake.requests()) {
          const orderId = orders[Math.floor((r.seq - 1) / 3)]!;
          byOrder.set(orderId, [...(byOrder.get(orderId) ?? []), r.fault]);
        }
        seen.push(byOrder);
      } finally {
        await fake.close();
      }
    }
    const expected = new Map(orders.map((o) => [o, [1, 2, 3].map((n) => faultFor(seed, o, n, KEY_INDEPENDENT))]));
    for (const byOrder of seen) expect(byOrder).toEqual(expected);
    // The schedule is not trivially empty, and another seed is another schedule.
    expect([...expected.values()].flat().filter((f) => f !== null).length).toBeGreaterThan(10);
    const other = orders.map((o) => faultFor(seed + 1, o, 1, KEY_INDEPENDENT));
    expect(other).not.toEqual(orders.map((o) => expected.get(o)![0]));
  });

  test('the workload is a function of its seed: 1–3 sends per order', () => {
    const a = makeWorkload(3, 200);
    expect(makeWorkload(3, 200)).toEqual(a);
    const copies = new Map<string, number>();
    for (const s of a.sends) copies.set(s.orderId, (copies.get(s.orderId) ?? 0) + 1);
    expect(new Set(copies.values())).toEqual(new Set([1, 2, 3]));
    expect(copies.size).toBe(200);
  });

  test('stall_after_commit: Stripe executed, and the caller never gets past the call (the crash)', async () => {
    const fake = await startFakeStripe();
    fake.injectFault({ orderId: 'stalled' }, 'stall_after_commit');
    const stripe = new Stripe('sk_test_x', { host: fake.host, port: fake.port, protocol: 'http', timeout: 300, maxNetworkRetries: 0 });
    let settled: 'resolved' | 'rejected' | null = null;
    const call = stripe.paymentIntents
      .create({ amount: 1000, currency: 'eur', customer: 'cus_x', payment_method: 'pm_card_visa', confirm: true, metadata: { order_id: 'stalled' } })
      .then(
        () => (settled = 'resolved'),
        () => (settled = 'rejected'),
      );
    await new Promise((resolve) => setTimeout(resolve, 1_500)); // five client timeouts
    expect(settled).toBe(null);
    expect(fake.paymentIntents({ orderId: 'stalled' }).map((pi) => pi.status)).toEqual(['succeeded']);
    await fake.close(); // the "restart": the socket goes, the caller finally sees an error
    await call;
    expect(settled).toBe('rejected');
  });
});

describe('the ground-truth checker', () => {
  const pi = (status: PaymentIntentRecord['status']) => ({ status }) as PaymentIntentRecord;
  test.each([
    { pis: [pi('succeeded'), pi('succeeded')], belief: { state: 'succeeded' as const, finishedAtMs: 1 }, verdict: 'double' },
    { pis: [], belief: { state: 'succeeded' as const, finishedAtMs: 1 }, verdict: 'lost' },
    { pis: [], belief: undefined, verdict: 'lost' },
    { pis: [pi('succeeded')], belief: undefined, verdict: 'unrecorded' },
    { pis: [pi('succeeded')], belief: { state: 'failed' as const, finishedAtMs: 1 }, verdict: 'wrongly_failed' },
    { pis: [], belief: { state: 'failed' as const, finishedAtMs: 1 }, verdict: 'wrongly_failed' },
    { pis: [pi('requires_payment_method')], belief: { state: 'failed' as const, finishedAtMs: 1 }, verdict: 'ok' },
    { pis: [pi('processing')], belief: { state: 'open' as const, finishedAtMs: null }, verdict: 'open' },
    { pis: [pi('succeeded')], belief: { state: 'succeeded' as const, finishedAtMs: 1 }, verdict: 'ok' },
  ])('$verdict: $pis.length PaymentIntent(s), store says $belief.state', ({ pis, belief, verdict }) => {
    expect(judgeOrder(pis, belief)).toBe(verdict);
  });
});

describe('bench:peers runs', () => {
  let dynamo: Dynalite;
  beforeAll(async () => {
    dynamo = await startDynalite();
  });
  afterAll(() => dynamo.stop());

  /** A fast clock for the suite: 500 ms calls, a 6 s function, 7 s visibility. */
  const TEST_CLOCK: TimeLapse = {
    keyWindowMs: 20_000,
    earlySearchAfterMs: 1_000,
    searchLagMs: 200,
    stripeTimeoutMs: 500,
    stripeMaxNetworkRetries: 0,
    unsettledReviewAfterMs: 60_000,
    processingSettleMs: 500,
    reconcileEveryMs: 1_000,
    retryBackoffScale: 0.05,
  };

  /** What every run here shares: the test's server, dynalite and the compressed clock. */
  const rig = () => ({ adminUrl: inject('pgAdminUrl'), dynamoEndpoint: dynamo.endpoint, dynamoRequests: dynamo.requests, clock: TEST_CLOCK });

  // The yardstick behind the same intake too: its store is judged like a contestant's.
  test.each([...CONTESTANTS, limitBehindIntake].map((c) => [c.id, c] as const))(
    '%s: a planted double charge and a planted lost order are found in its store layout',
    async (_id, contestant) => {
      const workload = makeWorkload(11, 3, { duplicates: false });
      const victim = workload.orders[0]!;
      const result = await runContestant({
        ...rig(),
        contestant,
        workload,
        faults: false,
        latencyMs: 0,
        pollers: 2,
        // A second charge of the first order, behind the contestant's back.
        tamper: async (fake) => {
          const stripe = new Stripe('sk_test_x', { host: fake.host, port: fake.port, protocol: 'http', timeout: 5_000, maxNetworkRetries: 0 });
          await stripe.paymentIntents.create({
            amount: victim.amount,
            currency: victim.currency,
            customer: victim.customerId,
            payment_method: victim.paymentMethod,
            confirm: true,
            metadata: { order_id: victim.orderId },
          });
        },
        // An order that was accepted upstream and never reached the contestant.
        judgeAlso: ['order-that-vanished'],
      });
      expect(result.judgement.byOrder.get(victim.orderId)).toBe('double');
      expect(result.judgement.byOrder.get('order-that-vanished')).toBe('lost');
      expect(result.judgement.counts).toMatchObject({ double: 1, lost: 1, ok: 2 });
    },
    60_000,
  );

  // Each retries a failed Stripe call inside its step, with the step's default retries (DBOS: 3
  // attempts; durable functions: 6). A 429 is not cached under the key, so which orders come through
  // is known in advance from the schedule: those whose every attempt met a 429 end failed.
  test.each([
    { contestant: dbos, attempts: 3 },
    { contestant: durable, attempts: 6 },
  ])('$contestant.id: its step retries what Stripe rate-limits, and the judge reads its store', async ({ contestant, attempts }) => {
    const rates: FaultRates = { rate_limited_429: 0.35 };
    const workload = makeWorkload(21, 10, { duplicates: false });
    const result = await runContestant({ ...rig(), contestant, workload, faults: true, rates, quiet: false, latencyMs: 0, pollers: 4 });
    const limited = (orderId: string, n: number) => Array.from({ length: n }, (_, i) => faultFor(21, orderId, i + 1, rates)).every((f) => f === 'rate_limited_429');
    const retried = workload.orders.filter((o) => limited(o.orderId, 1));
    expect(retried.length).toBeGreaterThan(0);
    for (const o of workload.orders) expect(result.judgement.byOrder.get(o.orderId), o.orderId).toBe(limited(o.orderId, attempts) ? 'wrongly_failed' : 'ok');
    // A retried order cost Stripe more than one request: the retry happened in its step.
    expect(result.perOrder.stripeRequests * workload.orders.length).toBeGreaterThan(workload.orders.length);
  }, 90_000);

  test('the naive handler double-charges under 500s after commit, and the bench sees every one', async () => {
    const workload = makeWorkload(5, 12, { duplicates: false });
    const result = await runContestant({
      adminUrl: inject('pgAdminUrl'),
      dynamoEndpoint: dynamo.endpoint,
      dynamoRequests: dynamo.requests,
      contestant: naive,
      workload,
      faults: true,
      rates: { error_500_after_commit: 0.4 },
      quiet: false,
      maxReceiveCount: 2,
      latencyMs: 0,
      pollers: 4,
      clock: TEST_CLOCK,
    });
    // Which orders meet a 500 after commit on their first create is known in advance.
    const hit = workload.orders.filter((o) => faultFor(5, o.orderId, 1, { error_500_after_commit: 0.4 }) === 'error_500_after_commit');
    expect(hit.length).toBeGreaterThan(0);
    // Each was charged, got a 500, came back from SQS, and was charged again with a fresh SDK key
    // (unless its second create met the fault too, and its third, …).
    expect(result.judgement.counts.double).toBeGreaterThan(0);
    for (const o of hit) expect(['double', 'unrecorded', 'lost']).toContain(result.judgement.byOrder.get(o.orderId));
    expect(result.judgement.counts.double).toBe(hit.filter((o) => result.judgement.byOrder.get(o.orderId) === 'double').length);
  }, 60_000);
});
