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

/**
 * The sweep on a clock of its own: it moves only when the rate limiter asks to wait (to the slot it
 * reserved), so every decision — which call starts, at which slot, which is released — is the same on
 * any machine, however slow. `waits` are the waits the limiter asked for, in order.
 */
function virtualClock(invocationMs = 60_000) {
  let now = 0;
  const waits: number[] = [];
  return {
    waits,
    now: () => now,
    sleep: async (ms: number) => {
      waits.push(ms);
      now = Math.max(now, now + ms);
      await new Promise((resolve) => setImmediate(resolve));
    },
    clock: { remainingMs: () => invocationMs - now },
  };
}

describe('rate cap and time budget, on the sweep\'s own clock', () => {
  it('RECONCILE_MAX_RPS spaces every request 1/rate apart: 30 creates at 20/s, 8 workers at once → the limiter asks each but the first to wait one slot (50 ms)', async () => {
    await dueOperations(30);
    const t = virtualClock();
    const summary = await runReconcile(
      { db: db.pool, gateway: stripe.gateway, publisher: null, settings: settings({ maxRequestsPerSecond: 20, maxSearchesPerSecond: 5, concurrency: 8, pageSize: 50 }), now: t.now, sleep: t.sleep },
      t.clock,
    );
    expect(summary).toMatchObject({ claimed: 30, byOutcome: { succeeded: 30 }, released: 0, stripeRequests: 30, stoppedBecause: 'drained', durationMs: 29 * 50 });
    // The slots: 0, 50, …, 1450 — one wait per request after the first, each one interval.
    expect(t.waits).toEqual(Array.from({ length: 29 }, () => 50));
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'create')).toHaveLength(30);
  });

  it('RECONCILE_SEARCH_MAX_RPS spaces searches on their own bucket: 8 searches at 5/s (under 20/s overall) → each but the first waits 200 ms', async () => {
    // 8 operations past their key window: the step is Search (zero hits → review).
    const old = await dueOperations(8);
    await db.pool.query(`UPDATE payment_operations SET status = 'unknown', first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = ANY($1)`, [old]);
    const t = virtualClock();
    const summary = await runReconcile(
      {
        db: db.pool,
        gateway: stripe.gateway,
        publisher: null,
        // The Search path (AMBIGUOUS_RESOLUTION=review): with List evidence these would be list requests.
        policy: { ambiguousResolution: 'review' },
        settings: settings({ maxRequestsPerSecond: 20, maxSearchesPerSecond: 5, concurrency: 8, pageSize: 50 }),
        now: t.now,
        sleep: t.sleep,
      },
      t.clock,
    );
    expect(summary).toMatchObject({ claimed: 8, byOutcome: { review: 8 }, stripeRequests: 8, stoppedBecause: 'drained', durationMs: 7 * 200 });
    expect(t.waits).toEqual(Array.from({ length: 7 }, () => 200));
    expect(stripe.fake.requests().map((r) => r.endpoint)).toEqual(Array.from({ length: 8 }, () => 'search'));
  });

  it('stops before its time budget: no call starts without worst-case time left; the rest is released, open and due', async () => {
    const ids = await dueOperations(60);
    // 6 s left, worst case 4.5 s: calls may start at slots up to 1.5 s only — at 10/s, slots 0 … 1500.
    const t = virtualClock(6_000);
    const summary = await runReconcile(
      { db: db.pool, gateway: stripe.gateway, publisher: null, settings: settings({ maxRequestsPerSecond: 10, concurrency: 8, pageSize: 50, minTimeToCallMs: 4_500, safetyMarginMs: 500 }), now: t.now, sleep: t.sleep },
      t.clock,
    );
    expect(summary).toMatchObject({ stoppedBecause: 'time', claimed: 50, byOutcome: { succeeded: 16, released: 34 }, released: 34, stripeRequests: 16, durationMs: 1_500 });
    expect(summary.byOutcome).toEqual({ succeeded: 16, released: 34 }); // the next page was never claimed
    expect(t.waits).toEqual(Array.from({ length: 15 }, () => 100));
    expect(t.clock.remainingMs()).toBe(4_500); // the worst-case call and the margin are still there
    expect(stripe.fake.requests()).toHaveLength(16);
    const { rows } = await db.pool.query(
      `SELECT count(*)::int AS n FROM payment_operations WHERE id = ANY($1) AND status = 'pending' AND lease_token IS NULL AND next_attempt_at <= now()`,
      [ids],
    );
    expect(rows[0].n).toBe(44);
    // The gauges still went out after the sweep stopped.
    expect(summary.gauges).toMatchObject({ openPending: 44 });
  });

  it('a short lease (time-lapse LEASE_MS) bounds the calls of a page: none starts after lease − worst case; the rest goes in the next page', async () => {
    const ids = await dueOperations(20);
    // Lease 1.5 s, worst-case call 0.5 s (minTimeToCallMs − safetyMarginMs): a page may start calls
    // for 1 s — at 10/s, slots 0 … 1000 (11 calls); the 9 others are released and the next page,
    // claimed at 1000, starts them at 1100 … 1900, inside its own window.
    const t = virtualClock();
    const summary = await runReconcile(
      {
        db: db.pool,
        gateway: stripe.gateway,
        publisher: null,
        policy: { leaseMs: 1_500 },
        settings: settings({ maxRequestsPerSecond: 10, concurrency: 1, pageSize: 20, minTimeToCallMs: 1_000, safetyMarginMs: 500 }),
        now: t.now,
        sleep: t.sleep,
      },
      t.clock,
    );
    expect(summary).toMatchObject({ stoppedBecause: 'drained', pages: 2, claimed: 29, released: 9, byOutcome: { succeeded: 20, released: 9 }, stripeRequests: 20, durationMs: 1_900 });
    expect(summary.gauges?.inbox).toBeNull(); // a run that does not work the inbox does not read (or publish) its gauges
    expect(t.waits).toEqual(Array.from({ length: 19 }, () => 100));
    const creates = stripe.fake.requests().filter((r) => r.endpoint === 'create');
    expect(creates).toHaveLength(20); // one call per operation: no run overtook a live lease
    expect(new Set(creates.map((r) => r.operationId))).toEqual(new Set(ids));
    const { rows } = await db.pool.query<{ claims: number; released: number; n: number }>(
      `SELECT claims, released, count(*)::int AS n FROM (
         SELECT operation_id, count(*) FILTER (WHERE action = 'attempt_started')::int AS claims, count(*) FILTER (WHERE action = 'lease_released')::int AS released
           FROM payment_operation_events WHERE operation_id = ANY($1) GROUP BY operation_id) x
        GROUP BY claims, released ORDER BY claims`,
      [ids],
    );
    expect(rows).toEqual([{ claims: 1, released: 0, n: 11 }, { claims: 2, released: 1, n: 9 }]);
  });

  it('RECONCILE_MAX_RUN_MS ends a run long before the invocation would (so that sweeps do not pile up)', async () => {
    await dueOperations(40);
    // 600 ms of run, 60 s of invocation: at 20/s the slots 0 … 600 (13 calls), in pages of 4.
    const t = virtualClock();
    const summary = await runReconcile(
      { db: db.pool, gateway: stripe.gateway, publisher: null, settings: settings({ maxRequestsPerSecond: 20, concurrency: 2, pageSize: 4, maxRunMs: 600 }), now: t.now, sleep: t.sleep },
      t.clock,
    );
    expect(summary).toMatchObject({ stoppedBecause: 'time', pages: 4, claimed: 16, released: 3, byOutcome: { succeeded: 13, released: 3 }, durationMs: 600 });
    expect(t.clock.remainingMs()).toBe(59_400);
  });
});

describe('the exported handler applies the rates it is configured with (decisions far from any timing)', () => {
  // The handler runs on the real clock. A rate of 0.1/s puts the second slot 10 s after the first,
  // past a budget of 14 s − 4.5 s (worst-case call + margin) = 9.5 s: refused at once, whenever the
  // first call started. Without the configured rate (the default 20/s) every call would start.
  it('RECONCILE_MAX_RPS: one call, the others released for the next run', async () => {
    const ids = await dueOperations(3);
    process.env.RECONCILE_MAX_RPS = '0.1';
    try {
      const summary = await handler({ source: 'aws.scheduler', scheduledTime: new Date().toISOString() }, lambdaContext(14_000, 'reconcile'));
      expect(summary).toMatchObject({ claimed: 3, byOutcome: { succeeded: 1, released: 2 }, stripeRequests: 1, stoppedBecause: 'time' });
      expect(stripe.fake.requests()).toHaveLength(1);
      const { rows } = await db.pool.query(`SELECT status, count(*)::int AS n FROM payment_operations WHERE id = ANY($1) GROUP BY status ORDER BY status`, [ids]);
      expect(rows).toEqual([{ status: 'pending', n: 2 }, { status: 'succeeded', n: 1 }]);
    } finally {
      process.env.RECONCILE_MAX_RPS = ENV.RECONCILE_MAX_RPS;
    }
  });

  it('RECONCILE_SEARCH_MAX_RPS: every create, one search; the other searches released', async () => {
    await dueOperations(2);
    const old = await dueOperations(3);
    await db.pool.query(`UPDATE payment_operations SET status = 'unknown', first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = ANY($1)`, [old]);
    Object.assign(process.env, { RECONCILE_SEARCH_MAX_RPS: '0.1', AMBIGUOUS_RESOLUTION: 'review' });
    try {
      const summary = await handler({}, lambdaContext(14_000, 'reconcile'));
      expect(summary).toMatchObject({ claimed: 5, byOutcome: { succeeded: 2, review: 1, released: 2 }, stripeRequests: 3, stoppedBecause: 'time' });
      expect(stripe.fake.requests().map((r) => r.endpoint).sort()).toEqual(['create', 'create', 'search']);
    } finally {
      process.env.RECONCILE_SEARCH_MAX_RPS = ENV.RECONCILE_SEARCH_MAX_RPS;
      delete process.env.AMBIGUOUS_RESOLUTION;
    }
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
      openPending: 1, openUnknown: 1, reviewQueueSize: 1, rejectedLastPeriod: 1, duplicateChargesRemediedLastPeriod: 0, unpublishedEvents: 0, oldestUnpublishedEventAgeSeconds: 0, openWatches: 0, openWatchFindings: 0, authorizationsExpiringSoon: 0,
    });
    // The handler works the Stripe event inbox too: its gauges are read with the others. No event
    // ever arrived while Stripe answered these operations: the silence gauge counts from the oldest
    // first send (seconds ago in this test; its own test: test/stripe-events/silence.test.ts).
    const { eventsSilentSeconds, ...inboxCounts } = inbox!;
    expect(inboxCounts).toEqual({ backlog: 0, oldestBacklogAgeSeconds: 0, openContradictions: 0, openUnrecordedCharges: 0, openRefusedEvents: 0 });
    expect(eventsSilentSeconds).toBeGreaterThanOrEqual(0);
    // The review row is older, but it waits for a human: the age alarm watches what machines own. The
    // gauge read that row's age during the run: at least the 10 minutes it was given, at most its age
    // now (the database's clock, read after the run; never a bound on how long the run took).
    const { rows: [after] } = await db.pool.query<{ age: number }>(`SELECT ceil(extract(epoch FROM now() - created_at))::int AS age FROM payment_operations WHERE id = $1`, [pendingLater]);
    expect(oldestOpenAgeSeconds).toBeGreaterThanOrEqual(599);
    expect(oldestOpenAgeSeconds).toBeLessThanOrEqual(after!.age);
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
    const waits: number[] = [];
    const limiter = new RequestRateLimiter({ requestsPerSecond: 10, searchesPerSecond: 2, now: () => now, sleep: async (ms) => void (waits.push(ms), (now += ms)) });
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
    // What it asked to wait, call by call (the first slot is free; the refusal asked nothing).
    expect(waits).toEqual([100, 100, 100, 500, 100, 100]);
  });
});
