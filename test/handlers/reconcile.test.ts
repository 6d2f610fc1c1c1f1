// The reconciler on real PostgreSQL 18 and the real stripe SDK against the fake Stripe: two runs at
// once, the request-rate cap measured in the fake's own request log, the time budget, the outbox
// sweep and the gauges. The exported handler is driven with the environment the stack sets.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { recordRejectedMessages } from '../../lambdas/payments/rejected-store.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { RequestRateLimiter } from '../../lambdas/reconcile/rate-limiter.ts';
import type { TransactionalDb } from '../../lambdas/payments/inbox-store.ts';
import { runReconcile, type ReconcileSettings, type ReconcileSummary } from '../../lambdas/reconcile/sweep.ts';
import type { RequestRecord } from '../../local/fake-stripe/types.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { chargeOrder } from '../support/orders.ts';

type ReconcileHandler = (event: unknown, context: ReturnType<typeof lambdaContext>) => Promise<ReconcileSummary>;

let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;
let handler: ReconcileHandler;
let resetResources: () => Promise<void>;

const ENV = {
  STRIPE_SECRET_KEY: 'sk_test_reconcile',
  STRIPE_TIMEOUT_MS: '1000',
  STRIPE_MAX_NETWORK_RETRIES: '0',
  RECONCILE_SAFETY_MARGIN_MS: '500',
  RECONCILE_MAX_RPS: '20',
  RECONCILE_SEARCH_MAX_RPS: '5',
  RECONCILE_CONCURRENCY: '8',
  RECONCILE_PAGE_SIZE: '50',
  POWERTOOLS_LOG_LEVEL: 'SILENT',
  POWERTOOLS_METRICS_DISABLED: 'true',
};

beforeAll(async () => {
  stripe = await startStripe();
  bus = await startFakeEventBridge();
  Object.assign(process.env, ENV, { STRIPE_API_BASE: stripe.fake.url, EVENT_BUS_NAME: 'charge-outcomes', EVENTS_ENDPOINT: bus.url });
  handler = (await import('../../lambdas/reconcile/handler.ts')).handler as unknown as ReconcileHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await bus.close();
  await stripe.close();
});
// A database per test: the gauges and the "every due operation" assertions see only this test's rows.
beforeEach(async () => {
  db = await createTestDatabase('reconcile');
  process.env.DATABASE_URL = db.url;
  await resetResources();
  stripe.fake.reset();
  stripe.fake.setLatency(0);
  bus.reset();
});
afterEach(async () => {
  await resetResources();
  await db.drop();
});

const order = (overrides: Partial<ChargeInput> = {}): ChargeInput => chargeOrder({ amount: 1500, customerId: 'cus_reconcile', ...overrides });

/** n operations recorded and due, never attempted (as the charge handler leaves them when out of time). */
async function dueOperations(n: number, overrides: Partial<ChargeInput> = {}): Promise<string[]> {
  const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test' });
  const results = await engine.processRequests(Array.from({ length: n }, () => order(overrides)), { execute: false });
  return results.map((r) => r.operationId);
}

const settings = (overrides: Partial<ReconcileSettings> = {}): ReconcileSettings => ({
  maxRequestsPerSecond: 1000,
  maxSearchesPerSecond: 1000,
  concurrency: 4,
  pageSize: 5,
  minTimeToCallMs: 1_000,
  safetyMarginMs: 500,
  maxRunMs: 0,
  rejectedWindowSeconds: 300,
  ...overrides,
});
const plenty = { remainingMs: () => 60_000 };

/** The most requests inside any window of `windowMs` (request arrival times at the fake Stripe). */
function maxInWindow(requests: readonly RequestRecord[], windowMs: number): number {
  const at = requests.map((r) => r.at).sort((a, b) => a - b);
  let best = 0;
  for (let i = 0, j = 0; i < at.length; i++) {
    while (at[i]! - at[j]! >= windowMs) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

describe('two reconcilers at once', () => {
  it('every operation is claimed and executed exactly once (SKIP LOCKED + leases), both runs get work', async () => {
    const ids = await dueOperations(60);
    stripe.fake.setLatency(25);
    // Two containers: two pools, two engines, overlapping pages.
    const poolA = new pg.Pool({ connectionString: db.url, max: 2 });
    const poolB = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const [a, b] = await Promise.all([
        runReconcile({ db: poolA, gateway: stripe.gateway, publisher: null, settings: settings(), actor: 'reconciler-a' }, plenty),
        runReconcile({ db: poolB, gateway: stripe.gateway, publisher: null, settings: settings(), actor: 'reconciler-b' }, plenty),
      ]);
      expect(a.claimed + b.claimed).toBe(60);
      expect(a.claimed).toBeGreaterThan(0);
      expect(b.claimed).toBeGreaterThan(0);
      expect((a.byOutcome.succeeded ?? 0) + (b.byOutcome.succeeded ?? 0)).toBe(60);
    } finally {
      await poolA.end();
      await poolB.end();
    }
    const creates = stripe.fake.requests().filter((r) => r.endpoint === 'create');
    expect(creates).toHaveLength(60);
    expect(new Set(creates.map((r) => r.operationId))).toEqual(new Set(ids));
    const { rows } = await db.pool.query(
      `SELECT operation_id, count(*) FILTER (WHERE action = 'attempt_started')::int AS claims, array_agg(DISTINCT actor) AS actors
         FROM payment_operation_events WHERE operation_id = ANY($1) AND action <> 'requested' GROUP BY operation_id`,
      [ids],
    );
    expect(rows).toHaveLength(60);
    expect(rows.every((r) => r.claims === 1 && r.actors.length === 1)).toBe(true);
    expect(new Set(rows.map((r) => r.actors[0]))).toEqual(new Set(['reconciler-a', 'reconciler-b']));
    expect((await db.pool.query(`SELECT count(*)::int AS n FROM payment_operations WHERE status = 'succeeded' AND id = ANY($1)`, [ids])).rows[0].n).toBe(60);
  });
});

describe('rate cap and time budget (the exported handler, configured by environment)', () => {
  it('keeps RECONCILE_MAX_RPS over all requests and RECONCILE_SEARCH_MAX_RPS over searches, measured at the fake Stripe', async () => {
    await dueOperations(30);
    // 8 operations past their key window: the step is Search (zero hits → review).
    const old = await dueOperations(8);
    await db.pool.query(
      `UPDATE payment_operations SET status = 'unknown', first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = ANY($1)`,
      [old],
    );
    // The Search path (AMBIGUOUS_RESOLUTION=review): with List evidence these would be list requests.
    process.env.AMBIGUOUS_RESOLUTION = 'review';
    const started = Date.now();
    const summary = await handler({ source: 'aws.scheduler', scheduledTime: new Date().toISOString() }, lambdaContext(60_000, 'reconcile')).finally(
      () => delete process.env.AMBIGUOUS_RESOLUTION,
    );
    const elapsed = Date.now() - started;

    expect(summary.claimed).toBe(38);
    expect(summary.byOutcome).toMatchObject({ succeeded: 30, review: 8 });
    expect(summary.stoppedBecause).toBe('drained');
    const all = stripe.fake.requests();
    const searches = all.filter((r) => r.endpoint === 'search');
    expect(all).toHaveLength(38);
    expect(searches).toHaveLength(8);
    // Spaced 1/rate apart: any one-second window holds at most rate + 1 (the burst is one request).
    expect(maxInWindow(all, 1000)).toBeLessThanOrEqual(21);
    expect(maxInWindow(searches, 1000)).toBeLessThanOrEqual(6);
    // 38 requests at 20/s need ≥ 37/20 s; 8 searches at 5/s need ≥ 7/5 s. The limiter spaces the
    // starts; the fake stamps arrivals, whose jitter on a loaded machine shortens a span by a few ms.
    expect(all.at(-1)!.at - all[0]!.at).toBeGreaterThanOrEqual(1850 - 60);
    expect(searches.at(-1)!.at - searches[0]!.at).toBeGreaterThanOrEqual(1400 - 60);
    expect(elapsed).toBeLessThan(10_000);
  });

  it('stops before its time budget: no call starts without worst-case time left; the rest is released, open and due', async () => {
    const ids = await dueOperations(60);
    process.env.RECONCILE_MAX_RPS = '10';
    try {
      // 6 s left: calls may start during the first 6 − 4.5 = 1.5 s only, ≈ 15 calls at 10/s.
      const context = lambdaContext(6_000, 'reconcile');
      const summary = await handler({}, context);
      const left = context.getRemainingTimeInMillis();

      expect(summary.stoppedBecause).toBe('time');
      // ≤ 1.5 s × 10/s + 1; fewer on a loaded machine (the claim itself eats into the window).
      expect(summary.byOutcome.succeeded).toBeGreaterThanOrEqual(5);
      expect(summary.byOutcome.succeeded).toBeLessThanOrEqual(16);
      expect(summary.released).toBe(50 - summary.byOutcome.succeeded!); // the rest of the page went back
      expect(summary.claimed).toBe(50); // the next page was never claimed
      expect(left).toBeGreaterThan(2_000); // finished well inside the invocation, margin intact
      const creates = stripe.fake.requests();
      expect(creates).toHaveLength(summary.byOutcome.succeeded!);
      expect(creates.at(-1)!.at - creates[0]!.at).toBeLessThanOrEqual(1_600);
      const { rows } = await db.pool.query(
        `SELECT count(*)::int AS n FROM payment_operations WHERE id = ANY($1) AND status = 'pending' AND lease_token IS NULL AND next_attempt_at <= now()`,
        [ids],
      );
      expect(rows[0].n).toBe(60 - summary.byOutcome.succeeded!);
      // The gauges still went out after the sweep stopped.
      expect(summary.gauges).toMatchObject({ openPending: 60 - summary.byOutcome.succeeded! });
    } finally {
      process.env.RECONCILE_MAX_RPS = ENV.RECONCILE_MAX_RPS;
    }
  });

  it('a short lease (time-lapse LEASE_MS) bounds the calls of a page: none starts after lease − worst case; the rest goes in the next page', async () => {
    const ids = await dueOperations(20);
    stripe.fake.setLatency(100);
    // Lease 1.5 s, worst-case call 0.5 s (minTimeToCallMs − safetyMarginMs): a page may start calls for 1 s.
    const summary = await runReconcile(
      { db: db.pool, gateway: stripe.gateway, publisher: null, policy: { leaseMs: 1_500 }, settings: settings({ concurrency: 1, pageSize: 20, minTimeToCallMs: 1_000, safetyMarginMs: 500 }) },
      plenty,
    );
    expect(summary.stoppedBecause).toBe('drained');
    expect(summary.gauges?.inbox).toBeNull(); // a run that does not work the inbox does not read (or publish) its gauges
    expect(summary.pages).toBeGreaterThanOrEqual(2); // the first page could not finish its 20 calls
    expect(summary.released).toBeGreaterThan(0);
    expect(summary.byOutcome.succeeded).toBe(20);
    const creates = stripe.fake.requests().filter((r) => r.endpoint === 'create');
    expect(creates).toHaveLength(20); // one call per operation: no run overtook a live lease
    const { rows } = await db.pool.query<{ operation_id: string; claimed_at: Date }>(
      `SELECT DISTINCT ON (operation_id) operation_id, occurred_at AS claimed_at FROM payment_operation_events
        WHERE operation_id = ANY($1) AND action = 'attempt_started' ORDER BY operation_id, id DESC`,
      [ids],
    );
    const claimedAt = new Map(rows.map((r) => [r.operation_id, r.claimed_at.getTime()]));
    // Started before claim + 1 s (the HTTP request arrives a little after the start; the claim's
    // timestamp is the database's, taken a little after the page began).
    for (const create of creates) expect(create.at - claimedAt.get(create.operationId!)!).toBeLessThan(1_000 + 150);
  });

  it('RECONCILE_MAX_RUN_MS ends a run long before the invocation would (so that sweeps do not pile up)', async () => {
    await dueOperations(40);
    stripe.fake.setLatency(100);
    const started = Date.now();
    const summary = await runReconcile(
      { db: db.pool, gateway: stripe.gateway, publisher: null, settings: settings({ concurrency: 2, pageSize: 4, maxRunMs: 600 }) },
      { remainingMs: () => 60_000 },
    );
    expect(summary.stoppedBecause).toBe('time');
    expect(Date.now() - started).toBeLessThan(3_000); // last calls start before 600 ms and take 100 ms; 60 s were left
    expect(summary.byOutcome.succeeded).toBeLessThan(40);
  });
});

describe('outbox sweep and gauges', () => {
  it('publishes its own outcomes at once and what the outbox still holds, then reports the gauges', async () => {
    const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
    // Two settled now (their events never published: as if the charge handler died before PutEvents).
    await engine.processRequests([order(), order({ paymentMethod: 'pm_card_chargeDeclined' })]);
    await db.pool.query(`UPDATE outcome_events SET publish_lease_until = NULL`);
    // One pending and due later, one unknown, one in review.
    const [pendingLater, unknown, review] = await dueOperations(3);
    await db.pool.query(`UPDATE payment_operations SET next_attempt_at = now() + interval '1 hour', created_at = now() - interval '10 minutes' WHERE id = $1`, [pendingLater]);
    await db.pool.query(`UPDATE payment_operations SET status = 'unknown', next_attempt_at = now() + interval '1 hour' WHERE id = $1`, [unknown]);
    await db.pool.query(`UPDATE payment_operations SET status = 'unknown', review_reason = 'test', next_attempt_at = NULL, created_at = now() - interval '2 days' WHERE id = $1`, [review]);
    // One rejected a minute ago (inside the 5-minute window), one an hour ago (outside).
    await recordRejectedMessages(db.pool, [{ messageId: `m-${randomUUID()}`, reasonCode: 'invalid_json', reason: 'body is not valid JSON', rawBody: 'x' }]);
    await db.pool.query(
      `INSERT INTO rejected_messages (message_id, received_at, reason_code, reason, body_sha256, raw_body)
       VALUES ($1, now() - interval '1 hour', 'invalid_json', 'body is not valid JSON', repeat('0', 64), 'y')`,
      [`m-${randomUUID()}`],
    );

    // And one due now: the run settles it and publishes its event itself, not a sweep later.
    const [due] = await dueOperations(1, { paymentMethod: 'pm_card_chargeDeclined' });

    const summary = await handler({}, lambdaContext(60_000, 'reconcile'));

    expect(summary.claimed).toBe(1);
    expect(summary.byOutcome).toEqual({ failed: 1 });
    expect(summary.published).toBe(3);
    expect(bus.events().map((e) => e.detailType).sort()).toEqual(['Charge Failed', 'Charge Failed', 'Charge Succeeded']);
    expect(bus.events().some((e) => (e.detail as { operationId?: string }).operationId === due)).toBe(true);
    const { oldestOpenAgeSeconds, inbox, ...counts } = summary.gauges!;
    // (the operation settled in this run is no longer open)
    expect(counts).toEqual({
      openPending: 1, openUnknown: 1, reviewQueueSize: 1, rejectedLastPeriod: 1, duplicateChargesRemediedLastPeriod: 0, unpublishedEvents: 0, oldestUnpublishedEventAgeSeconds: 0,
    });
    // The handler works the Stripe event inbox too: its gauges are read with the others. No event
    // ever arrived while Stripe answered these operations: the silence gauge counts from the oldest
    // first send (seconds ago in this test; its own test: test/stripe-events/silence.test.ts).
    const { eventsSilentSeconds, ...inboxCounts } = inbox!;
    expect(inboxCounts).toEqual({ backlog: 0, oldestBacklogAgeSeconds: 0, openContradictions: 0, openUnrecordedCharges: 0, openRefusedEvents: 0 });
    expect(eventsSilentSeconds).toBeGreaterThanOrEqual(0);
    // The review row is older, but it waits for a human: the age alarm watches what machines own.
    expect(oldestOpenAgeSeconds).toBeGreaterThanOrEqual(599);
    expect(oldestOpenAgeSeconds).toBeLessThan(660);
  });

  it('the Stripe event inbox failing to apply does not blind its gauges: the run reports the inbox error and still reads them', async () => {
    const eventId = `evt_${randomUUID().replaceAll('-', '')}`;
    await db.pool.query(
      `INSERT INTO stripe_events (event_id, event_type, stripe_created_at, source, payload) VALUES ($1, 'payment_intent.succeeded', now(), 'webhook', '{}'::jsonb)`,
      [eventId],
    );
    const broken = new Error('inbox connection refused');
    const inboxDb = { query: () => Promise.reject(broken), connect: () => Promise.reject(broken) } as unknown as TransactionalDb;
    try {
      const summary = await runReconcile({ db: db.pool, gateway: stripe.gateway, publisher: null, settings: settings(), inboxDb }, plenty);
      expect(summary.stripeEvents).toBeNull();
      expect(summary.errors).toEqual([expect.stringMatching(/^inbox: .*inbox connection refused/)]);
      expect(summary.gauges?.inbox).toMatchObject({ backlog: 1 });
    } finally {
      await db.pool.query(`UPDATE stripe_events SET applied_at = now(), outcome = 'foreign' WHERE event_id = $1`, [eventId]); // rows are never deleted
    }
  });

  it('the open-operations gauge reads the partial index, not the table', async () => {
    await dueOperations(5);
    await db.pool.query('ANALYZE payment_operations');
    await db.pool.query('SET enable_seqscan = off'); // on 5 rows the planner would rightly scan; ask what it CAN use
    const { rows } = await db.pool.query(
      `EXPLAIN SELECT count(*) FILTER (WHERE status = 'pending' AND review_reason IS NULL) FROM payment_operations WHERE status IN ('pending', 'unknown')`,
    );
    await db.pool.query('RESET enable_seqscan');
    expect(rows.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/payment_operations_open/);
  });

  it('a run whose database is unreachable throws (the Errors alarm fires) after trying everything', async () => {
    process.env.DATABASE_URL = 'postgres://postgres:postgres@127.0.0.1:1/nowhere';
    await resetResources();
    await expect(handler({}, lambdaContext(60_000, 'reconcile'))).rejects.toMatchObject({
      name: 'ReconcileError',
      message: expect.stringMatching(/sweep: .*ECONNREFUSED.*gauges: /),
      summary: { stoppedBecause: 'error', gauges: null },
    });
    process.env.DATABASE_URL = db.url;
  });
});

describe('without a Stripe key', () => {
  it('settles nothing but still relays the outbox and publishes the gauges, then throws', async () => {
    await dueOperations(2);
    delete process.env.STRIPE_SECRET_KEY;
    await resetResources();
    try {
      const failure = await handler({}, lambdaContext(60_000, 'reconcile')).then(
        () => null,
        (error: unknown) => error as { name: string; message: string; summary: ReconcileSummary },
      );
      expect(failure).toMatchObject({ name: 'ReconcileError', message: expect.stringMatching(/stripe: ConfigError/) });
      expect(failure!.summary).toMatchObject({ claimed: 0, stoppedBecause: 'error', gauges: { openPending: 2 } });
      expect(stripe.fake.requests()).toHaveLength(0);
    } finally {
      process.env.STRIPE_SECRET_KEY = ENV.STRIPE_SECRET_KEY;
    }
  });
});

describe('RequestRateLimiter (virtual clock)', () => {
  it('spaces requests 1/rate apart, searches 1/searchRate apart, and refuses a slot past the latest start', async () => {
    let now = 0;
    const limiter = new RequestRateLimiter({ requestsPerSecond: 10, searchesPerSecond: 2, now: () => now, sleep: async (ms) => void (now += ms) });
    const starts: number[] = [];
    for (let i = 0; i < 3; i++) {
      expect(await limiter.acquire('create', 10_000)).toBe(true);
      starts.push(now);
    }
    expect(starts).toEqual([0, 100, 200]);
    expect(await limiter.acquire('search', 10_000)).toBe(true);
    expect(now).toBe(300);
    expect(await limiter.acquire('early_search', 10_000)).toBe(true);
    expect(now).toBe(800); // the search bucket, not the overall one, decides
    expect(await limiter.acquire('retrieve', 10_000)).toBe(true);
    expect(now).toBe(900);
    expect(await limiter.acquire('search', 1_200)).toBe(false); // would start at 1300
    expect(await limiter.acquire('create', 1_000)).toBe(true); // the refusal took no slot
    expect(now).toBe(1_000);
    expect([limiter.granted, limiter.refused]).toEqual([7, 1]);
  });
});
