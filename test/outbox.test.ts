// The transactional outbox and its relay: real PostgreSQL, the real @aws-sdk/client-eventbridge
// against the project's fake PutEvents endpoint (which can fail single entries, answer 500, or drop
// the response after accepting), and the fake Stripe through the real stripe SDK.
import { randomUUID } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFakeEventBridge, type FakeEventBridge } from '../local/fake-eventbridge/server.ts';
import { chargeOutcomeDetailSchema, DetailType } from '../lambdas/events/contract.ts';
import { chunkEntries, entrySize, EventBridgePublisher, outboxGauges, publishLeased, relayUnpublished, type EventPublisher } from '../lambdas/events/outbox.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { ChargeEngine } from '../lambdas/payments/engine.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';
import { startStripe, type StripeHarness } from './support/stripe.ts';
import { chargeOrder } from './support/orders.ts';

let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;

beforeAll(async () => {
  db = await createTestDatabase('outbox');
  stripe = await startStripe();
  bus = await startFakeEventBridge();
});
afterAll(async () => {
  await bus.close();
  await stripe.close();
  await db.drop();
});
beforeEach(() => {
  stripe.fake.reset();
  bus.reset();
});

/** One SDK attempt per call: the relay's own retry loop is the outbox, and we want to see each fault. */
const publisher = () =>
  new EventBridgePublisher(
    new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'x', secretAccessKey: 'x' }, maxAttempts: 1 }),
    { busName: 'charge-outcomes', source: 'payments.charges' },
  );
const engine = () => new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
const order = (overrides: Partial<ChargeInput> = {}): ChargeInput => chargeOrder({ amount: 1250, customerId: 'cus_outbox', ...overrides });
async function outboxRows(operationId: string) {
  const { rows } = await db.pool.query('SELECT e.*, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at', [operationId]);
  return rows;
}
/** Everything unpublished (leased to earlier tests' callers or not), published now: tests start from an empty outbox. */
async function drain() {
  await db.pool.query('UPDATE outcome_events SET publish_lease_until = NULL WHERE published_at IS NULL');
  await relayUnpublished(db.pool, publisher());
  bus.reset();
}

describe('the outbox row is written with the outcome it announces', () => {
  it('every final outcome and every entry into review gets exactly one row; an open outcome gets none', async () => {
    const e = engine();
    const [ok, declined, open] = await e.processRequests([order(), order({ paymentMethod: 'pm_card_chargeDeclined' }), order()], {
      execute: false,
    });
    stripe.fake.injectFault({ operationId: open!.operationId }, 'rate_limited_429');
    for (const r of [ok, declined, open]) await e.executeCharge(r!.operationId);
    const review = await e.requestCharge(order());
    stripe.fake.injectFault({ operationId: review }, 'error_500_before_commit');
    await e.executeCharge(review);
    stripe.fake.pruneKeys();
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [review]);
    await e.executeCharge(review);

    const succeededRows = await outboxRows(ok!.operationId);
    expect(succeededRows.map((r) => r.event_type)).toEqual([DetailType.succeeded]);
    expect(succeededRows[0].payload).toMatchObject({ status: 'succeeded', orderId: ok!.input.orderId, amount: 1250, currency: 'eur', reason: null, version: 1, sequence: 1 });
    expect(succeededRows[0].payload.externalId).toMatch(/^pi_/);
    expect((await outboxRows(declined!.operationId)).map((r) => [r.event_type, r.payload.reason])).toEqual([[DetailType.failed, 'generic_decline']]);
    expect(await outboxRows(open!.operationId)).toEqual([]); // 429: still pending, nothing to announce
    const reviewRows = await outboxRows(review);
    expect(reviewRows.map((r) => r.event_type)).toEqual([DetailType.needsReview]);
    expect(reviewRows[0].payload.reason).toMatch(/List proves that no PaymentIntent exists.*key window \(23 h\) has passed/);
    // Every payload honours the published contract, and eventId is the row's key.
    for (const row of [...succeededRows, ...reviewRows]) {
      expect(chargeOutcomeDetailSchema.parse(row.payload).eventId).toBe(row.event_id);
    }
  });

  it('atomically: when the statement fails after the outcome write, neither the outcome nor the event exists', async () => {
    const input = order({ orderId: `poison-${randomUUID()}` });
    // An outbox constraint that rejects this order's event makes the one statement fail at its end.
    await db.pool.query(`ALTER TABLE outcome_events ADD CONSTRAINT test_poison CHECK (stored_payload->>'orderId' NOT LIKE 'poison-%')`);
    try {
      const id = await engine().requestCharge(input);
      await expect(engine().executeCharge(id)).rejects.toThrow(/test_poison/);
      const { rows } = await db.pool.query('SELECT status, attempts, lease_token FROM payment_operations WHERE id = $1', [id]);
      expect(rows[0]).toMatchObject({ status: 'pending', attempts: 0 }); // the outcome was not written…
      expect(rows[0].lease_token).not.toBeNull(); // …the claim stands until its lease expires
      expect(await outboxRows(id)).toEqual([]); // …and no event
      const { rows: audit } = await db.pool.query(`SELECT action FROM payment_operation_events WHERE operation_id = $1 ORDER BY id`, [id]);
      expect(audit.map((a) => a.action)).toEqual(['requested', 'attempt_started']);
    } finally {
      await db.pool.query('ALTER TABLE outcome_events DROP CONSTRAINT test_poison');
    }
  });

  it('costs no round trip: the charge path is 2 round trips with or without an event', async () => {
    const counted = countingDb(db.pool);
    const e = new ChargeEngine({ db: counted, gateway: stripe.gateway, random: () => 0.5 });
    await e.processRequests([order()]); // succeeded: an event is written
    const withEvent = counted.roundTrips;
    counted.reset();
    const rateLimited = order();
    stripe.fake.injectFault({ orderId: rateLimited.orderId }, 'rate_limited_429');
    await e.processRequests([rateLimited]); // still open: no event
    expect({ withEvent, withoutEvent: counted.roundTrips }).toEqual({ withEvent: 2, withoutEvent: 2 });
  });
});

describe('the relay', () => {
  it('the charge path publishes its batch right away and marks the rows published (1 more round trip)', async () => {
    await drain();
    const results = await engine().processRequests([order(), order(), order()]);
    const events = results.flatMap((r) => (r.execution?.event ? [r.execution.event] : []));
    expect(events).toHaveLength(3);
    const counted = countingDb(db.pool);
    expect(await publishLeased(counted, publisher(), events)).toEqual({ published: 3, failed: 0 });
    expect(counted.roundTrips).toBe(1);
    expect(bus.calls()).toHaveLength(1);
    const published = bus.events();
    expect(published.map((e) => e.detailType)).toEqual([DetailType.succeeded, DetailType.succeeded, DetailType.succeeded]);
    expect(published.every((e) => e.source === 'payments.charges' && e.eventBusName === 'charge-outcomes')).toBe(true);
    expect((await outboxGauges(db.pool)).unpublished).toBe(0);
  });

  it('the publish mark is a prepared statement: planned once a connection, not at every publish', async () => {
    // Unnamed, it was parsed and planned at each of the 1,000 publishes of a single-order round
    // (pg_stat_statements: 1,000 plans, 0.18 ms each); named, a connection plans it as the others.
    const client = await db.pool.connect();
    try {
      await drain();
      const results = await engine().processRequests([order()]);
      const events = results.flatMap((r) => (r.execution?.event ? [r.execution.event] : []));
      expect(await publishLeased(client, publisher(), events)).toEqual({ published: 1, failed: 0 });
      const { rows } = await client.query<{ statement: string }>(`SELECT statement FROM pg_prepared_statements WHERE name = 'outbox_settle_publish'`);
      expect(rows).toHaveLength(1);
      expect(rows[0]!.statement).toMatch(/UPDATE outcome_events e/);
    } finally {
      client.release();
    }
  });

  it('stores the payload without the row’s own ids and time, and publishes byte for byte what a whole stored payload gave (migrations/022, 026)', async () => {
    await drain();
    const results = await engine().processRequests([order(), order({ paymentMethod: 'pm_card_chargeDeclined' })]);
    const events = results.flatMap((r) => (r.execution?.event ? [r.execution.event] : []));
    expect(events).toHaveLength(2);
    await publishLeased(db.pool, publisher(), events);
    const { rows } = await db.pool.query<{ event_id: string; stored: Record<string, unknown>; whole: Record<string, unknown> }>(
      `SELECT event_id, stored_payload AS stored,
              jsonb_build_object('version', 1, 'eventId', event_id, 'operationId', operation_id,
                                 'occurredAt', to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')) || stored_payload AS whole
         FROM outcome_events WHERE event_id = ANY($1::uuid[])`,
      [events.map((e) => e.eventId)],
    );
    expect(rows).toHaveLength(2);
    const sent = new Map(bus.events().map((e) => [(e.detail as { eventId: string }).eventId, e.rawDetail]));
    for (const row of rows) {
      expect(Object.keys(row.stored).filter((k) => ['eventId', 'operationId', 'version', 'occurredAt'].includes(k))).toEqual([]);
      expect(sent.get(row.event_id)).toBe(JSON.stringify(row.whole));
    }
  });

  it('a partial PutEvents failure re-sends only the failed entries', async () => {
    await drain();
    bus.reset();
    const results = await engine().processRequests([order(), order(), order(), order()]);
    const events = results.map((r) => r.execution!.event!);
    bus.injectFault({ kind: 'failEntries', indexes: [1, 3], errorCode: 'ThrottlingException' });
    expect(await publishLeased(db.pool, publisher(), events)).toEqual({ published: 2, failed: 2 });
    const { rows } = await db.pool.query(`SELECT event_id, last_error FROM outcome_events WHERE published_at IS NULL`);
    expect(rows.map((r) => r.event_id).sort()).toEqual([events[1]!.eventId, events[3]!.eventId].sort());
    expect(rows[0].last_error).toMatch(/ThrottlingException/);
    // The sweep (after the short rest a refused entry gets) sends exactly those two again.
    await db.pool.query(`UPDATE outcome_events SET publish_lease_until = now() WHERE published_at IS NULL`);
    expect(await relayUnpublished(db.pool, publisher())).toEqual({ published: 2, failed: 0 });
    const calls = bus.calls();
    expect(calls.map((c) => c.entryCount)).toEqual([4, 2]);
    const ids = bus.events().map((e) => (e.detail as { eventId: string }).eventId);
    expect(ids.sort()).toEqual(events.map((e) => e.eventId).sort()); // each delivered once
  });

  it('a 500 publishes nothing and loses nothing', async () => {
    await drain();
    bus.reset();
    const events = (await engine().processRequests([order(), order()])).map((r) => r.execution!.event!);
    bus.injectFault({ kind: 'callError' });
    expect(await publishLeased(db.pool, publisher(), events)).toEqual({ published: 0, failed: 2 });
    await db.pool.query(`UPDATE outcome_events SET publish_lease_until = now() WHERE published_at IS NULL`);
    expect(await relayUnpublished(db.pool, publisher())).toEqual({ published: 2, failed: 0 });
    expect(bus.events()).toHaveLength(2);
  });

  it('a lost response re-sends the whole call; the duplicate carries the same eventId and a consumer deduplicates', async () => {
    await drain();
    bus.reset();
    const events = (await engine().processRequests([order(), order()])).map((r) => r.execution!.event!);
    bus.injectFault({ kind: 'dropResponse' });
    expect(await publishLeased(db.pool, publisher(), events)).toEqual({ published: 0, failed: 2 }); // we cannot know
    await db.pool.query(`UPDATE outcome_events SET publish_lease_until = now() WHERE published_at IS NULL`);
    await relayUnpublished(db.pool, publisher());
    const delivered = bus.events();
    expect(delivered).toHaveLength(4); // at least once: each event went out twice
    expect(new Set(delivered.map((e) => e.eventId)).size).toBe(4); // EventBridge gave each copy its own id…
    const detailIds = delivered.map((e) => (e.detail as { eventId: string }).eventId);
    expect(new Set(detailIds)).toEqual(new Set(events.map((e) => e.eventId))); // …ours is stable

    // A consumer that records what it has seen (in its own table, in its own transaction) acts once.
    const seen = new Set<string>();
    const actions: string[] = [];
    for (const event of delivered) {
      const detail = chargeOutcomeDetailSchema.parse(event.detail);
      if (seen.has(detail.eventId)) continue;
      seen.add(detail.eventId);
      actions.push(`email order ${detail.orderId}: ${detail.status}`);
    }
    expect(actions).toHaveLength(2);
  });

  it('two relays at once never send one row in the same moment and never lose one', async () => {
    await drain();
    bus.reset();
    const inputs = Array.from({ length: 120 }, () => order());
    for (let i = 0; i < inputs.length; i += 10) await engine().processRequests(inputs.slice(i, i + 10));
    // Abandon the charge path's leases, as a handler that died before publishing would.
    await db.pool.query(`UPDATE outcome_events SET publish_lease_until = NULL WHERE published_at IS NULL`);
    expect((await outboxGauges(db.pool)).unpublished).toBe(120);
    // Relay A holds its first page (leased, not yet sent) until relay B has sent one of its own: the
    // two are truly at once, whatever the scheduler does (left to it, one relay sometimes took every
    // page before the other started), and B must skip the rows A holds.
    let bSent!: () => void;
    const bHasSent = new Promise<void>((resolve) => (bSent = resolve));
    let aLeased!: () => void;
    const aHasLeased = new Promise<void>((resolve) => (aLeased = resolve));
    const real = publisher();
    const held: EventPublisher = {
      async publish(events) {
        aLeased();
        await bHasSent;
        return real.publish(events);
      },
    };
    const signalling: EventPublisher = {
      async publish(events) {
        const results = await real.publish(events);
        bSent();
        return results;
      },
    };
    const relayA = relayUnpublished(db.pool, held, { pageSize: 7 });
    await aHasLeased;
    const relayB = relayUnpublished(db.pool, signalling, { pageSize: 7 });
    const [a, b] = await Promise.all([relayA, relayB]);
    expect(a.published + b.published).toBe(120);
    expect(a.published).toBeGreaterThan(0);
    expect(b.published).toBeGreaterThan(0);
    const detailIds = bus.events().map((e) => (e.detail as { eventId: string }).eventId);
    expect(detailIds).toHaveLength(120);
    expect(new Set(detailIds).size).toBe(120);
    expect(await outboxGauges(db.pool)).toMatchObject({ unpublished: 0 });
  });

  it('a published row is history: it cannot be changed or deleted', async () => {
    const [r] = await engine().processRequests([order()]);
    await publishLeased(db.pool, publisher(), [r!.execution!.event!]);
    await expect(db.pool.query(`UPDATE outcome_events SET stored_payload = '{}' WHERE event_id = $1`, [r!.execution!.event!.eventId])).rejects.toThrow(/already published/);
    await expect(db.pool.query(`DELETE FROM outcome_events WHERE event_id = $1`, [r!.execution!.event!.eventId])).rejects.toThrow(/never deleted/);
  });

  it('gauges report unpublished rows and the age of the oldest', async () => {
    await drain();
    const [r] = await engine().processRequests([order()]);
    await db.pool.query(`UPDATE outcome_events SET created_at = now() - interval '90 seconds' WHERE event_id = $1`, [r!.execution!.event!.eventId]);
    const gauges = await outboxGauges(db.pool);
    expect(gauges.unpublished).toBe(1);
    expect(gauges.oldestUnpublishedAgeSeconds).toBeGreaterThanOrEqual(90);
  });
});

describe('PutEvents limits', () => {
  it('chunks at 10 entries and at 256 KB', () => {
    const small = Array.from({ length: 23 }, (_, i) => ({ entry: { Source: 's', DetailType: 'd', Detail: `{"i":${i}}` } }));
    expect(chunkEntries(small).map((c) => c.length)).toEqual([10, 10, 3]);
    const big = Array.from({ length: 5 }, () => ({ entry: { Source: 's', DetailType: 'd', Detail: 'x'.repeat(100_000) } }));
    const chunks = chunkEntries(big);
    expect(chunks.map((c) => c.length)).toEqual([2, 2, 1]);
    for (const chunk of chunks) expect(chunk.reduce((n, c) => n + entrySize(c.entry), 0)).toBeLessThanOrEqual(256 * 1024);
  });
});
