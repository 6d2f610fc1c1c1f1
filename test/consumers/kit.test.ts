// The consumer kit through its first user, the receipt notifier, against real PostgreSQL and the
// fake e-mail API over HTTP: deduplication, newest-sequence-wins, poison, and each policy's answer
// to ambiguity. Crashes of a real process are in crash.test.ts; delivery orders in order.property.test.ts.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { AftermathDetailType, chargeAftermathDetailSchema, type ChargeAftermathDetail } from '../../lambdas/events/contract.ts';
import { ConsumerConfigError } from '../../lambdas/consumers/kit/errors.ts';
import { FACT_DETAIL_TYPES, orderingOf } from '../../lambdas/consumers/kit/ordering.ts';
import { createOutcomeConsumer } from '../../lambdas/consumers/kit/consumer.ts';
import type { ConsumerPolicy, OutcomeEvent, QueueRecord } from '../../lambdas/consumers/kit/types.ts';
import { HttpEmailProvider } from '../../lambdas/consumers/receipts/email-provider.ts';
import { createReceiptNotifier, templateRecipient } from '../../lambdas/consumers/receipts/notifier.ts';
import { startFakeEmail, type FakeEmail } from '../../local/fake-email/server.ts';
import type { TestDatabase } from '../support/db.ts';
import { acceptedSends, consumerDatabase, delivery, envelopeBody, expireLeases, inboxRow, outcomeEvent } from './support.ts';

let db: TestDatabase;
let plain: FakeEmail; // a provider without idempotency keys
let keyed: FakeEmail; // one that deduplicates on them (Resend-like)

beforeAll(async () => {
  db = await consumerDatabase('consumer_kit');
  plain = await startFakeEmail({ idempotency: false });
  keyed = await startFakeEmail({ idempotency: true });
});
afterAll(async () => {
  await Promise.all([plain?.close(), keyed?.close()]);
  await db?.drop();
});
beforeEach(() => {
  plain.reset();
  keyed.reset();
});

let n = 0;
function notifier(policy: ConsumerPolicy, options: { provider?: FakeEmail; recipient?: string } = {}) {
  const fake = options.provider ?? (policy === 'idempotent' ? keyed : plain);
  n += 1;
  return createReceiptNotifier({
    db: db.pool,
    name: `t-${policy}-${n}`,
    policy,
    provider: new HttpEmailProvider({ apiBase: fake.url, apiKey: 're_test', idempotencyKeys: fake.idempotency, timeoutMs: 2_000 }),
    from: 'receipts@shop.example',
    recipient: templateRecipient(options.recipient ?? 'customer+{orderId}@example.com'),
  });
}

describe('the inbox absorbs duplicate deliveries', () => {
  it('runs the effect once for three deliveries of one event (each with a new envelope id and message id)', async () => {
    const consumer = notifier('at-least-once');
    const event = outcomeEvent();
    const first = await consumer.processBatch([delivery(event)]);
    const again = await consumer.processBatch([delivery(event), delivery(event, 2)]);
    expect(first.results.map((r) => r.outcome)).toEqual(['done']);
    expect(again.results.map((r) => r.outcome)).toEqual(['duplicate', 'duplicate']);
    expect(again.response.batchItemFailures).toEqual([]);
    expect(plain.sent()).toHaveLength(1);
    expect(plain.sent()[0]).toMatchObject({ to: [`customer+${event.orderId}@example.com`], subject: `Receipt for order ${event.orderId}`, idempotencyKey: null });
    expect(await inboxRow(db.pool, consumer.name, event.eventId)).toMatchObject({ state: 'done', attempts: 1, deliveries: 3, policy: 'at-least-once' });
  });

  it('works two copies of one event in the same batch one after the other: one effect, one duplicate, nothing reported', async () => {
    const consumer = notifier('at-least-once');
    const event = outcomeEvent();
    const other = outcomeEvent();
    const batch = await consumer.processBatch([delivery(event), delivery(other), delivery(event)]);
    expect(batch.results.map((r) => r.outcome)).toEqual(['done', 'done', 'duplicate']);
    expect(batch.response.batchItemFailures).toEqual([]);
    expect(plain.sent()).toHaveLength(2);
  });
});

describe('the newest sequence per operation wins', () => {
  it('ignores an older event that arrives after a newer one of the same operation', async () => {
    const consumer = notifier('at-least-once');
    const charge = outcomeEvent({ sequence: 1 });
    const refund = outcomeEvent({ operationId: charge.operationId, orderId: charge.orderId, detailType: 'Refund Succeeded', sequence: 2 });
    const batch1 = await consumer.processBatch([delivery(refund)]);
    const batch2 = await consumer.processBatch([delivery(charge), delivery(refund)]);
    expect(batch1.results.map((r) => r.outcome)).toEqual(['done']);
    expect(batch2.results.map((r) => r.outcome)).toEqual(['stale', 'duplicate']);
    expect(plain.sent().map((m) => m.subject)).toEqual([`Refund for order ${charge.orderId}`]);
    expect(await inboxRow(db.pool, consumer.name, charge.eventId)).toMatchObject({ state: 'stale', attempts: 0 });
    const head = await db.pool.query('SELECT sequence, event_id::text FROM outcome_consumer.operation_heads WHERE consumer = $1', [consumer.name]);
    expect(head.rows).toEqual([{ sequence: '2', event_id: refund.eventId }]);
  });

  it('applies both when they arrive in order', async () => {
    const consumer = notifier('at-least-once');
    const charge = outcomeEvent({ sequence: 1 });
    const refund = outcomeEvent({ operationId: charge.operationId, orderId: charge.orderId, detailType: 'Refund Succeeded', sequence: 2 });
    await consumer.processBatch([delivery(charge)]);
    await consumer.processBatch([delivery(refund)]);
    expect(plain.sent().map((m) => m.subject)).toEqual([`Receipt for order ${charge.orderId}`, `Refund for order ${charge.orderId}`]);
  });

  it('drops an older event still waiting for a retry once a newer one has been applied', async () => {
    const consumer = notifier('at-least-once');
    const charge = outcomeEvent({ sequence: 1 });
    const refund = outcomeEvent({ operationId: charge.operationId, orderId: charge.orderId, detailType: 'Refund Succeeded', sequence: 2 });
    plain.injectFault('error500BeforeCommit');
    const first = await consumer.processBatch([delivery(charge)]);
    expect(first.results[0]?.outcome).toBe('retry');
    await consumer.processBatch([delivery(refund)]);
    const retried = await consumer.processBatch([delivery(charge, 2)]);
    expect(retried.results[0]?.outcome).toBe('stale');
    expect(plain.sent().map((m) => m.subject)).toEqual([`Refund for order ${charge.orderId}`]);
  });

  it('decides ten events of one operation admitted at the same moment one after the other: the newest is applied, none twice', async () => {
    const consumer = createReceiptNotifier({
      db: db.pool,
      name: 't-concurrent-heads',
      provider: new HttpEmailProvider({ apiBase: plain.url, apiKey: 're_test', idempotencyKeys: false }),
      from: 'receipts@shop.example',
      recipient: templateRecipient('c+{orderId}@example.com'),
      concurrency: 10,
    });
    const first = outcomeEvent({ sequence: 1 });
    const events = [first, ...Array.from({ length: 9 }, (_, i) => outcomeEvent({ operationId: first.operationId, orderId: `${first.orderId}-${i + 2}`, detailType: 'Refund Succeeded', sequence: i + 2 }))];
    const batch = await consumer.processBatch(events.reverse().map((e) => delivery(e)));
    expect(batch.response.batchItemFailures).toEqual([]);
    const { rows } = await db.pool.query<{ sequence: string; state: string }>('SELECT sequence, state FROM outcome_consumer.inbox WHERE consumer = $1 ORDER BY sequence', [consumer.name]);
    expect(rows.find((r) => r.sequence === '10')?.state).toBe('done');
    expect(rows.every((r) => r.state === 'done' || r.state === 'stale')).toBe(true);
    expect(plain.sent()).toHaveLength(rows.filter((r) => r.state === 'done').length);
    const head = await db.pool.query('SELECT sequence FROM outcome_consumer.operation_heads WHERE consumer = $1', [consumer.name]);
    expect(head.rows).toEqual([{ sequence: '10' }]);
  });

  it('treats an event without a sequence (a v1 producer) as older than every numbered one', async () => {
    const consumer = notifier('at-least-once');
    const legacy = outcomeEvent(); // no sequence
    const numbered = outcomeEvent({ operationId: legacy.operationId, orderId: legacy.orderId, detailType: 'Refund Succeeded', sequence: 1 });
    const alone = outcomeEvent(); // unnumbered, nothing else: applied
    expect((await consumer.processBatch([delivery(alone)])).results[0]?.outcome).toBe('done');
    expect((await consumer.processBatch([delivery(numbered)])).results[0]?.outcome).toBe('done');
    expect((await consumer.processBatch([delivery(legacy)])).results[0]?.outcome).toBe('stale');
    expect(plain.sent()).toHaveLength(2);
  });
});

describe('aftermath events are facts: deduplicated by eventId, applied each, never ranked against states', () => {
  // A consumer of the pipeline's final states AND of what follows them (a ledger, a CRM): the
  // aftermath events carry no sequence (lambdas/events/contract.ts), the state events do.
  let m = 0;
  function ledger() {
    m += 1;
    const applied: OutcomeEvent<Record<string, unknown>>[] = [];
    const consumer = createOutcomeConsumer({
      name: `t-facts-${m}`,
      db: db.pool,
      policy: 'at-least-once',
      detailTypes: ['Charge Succeeded', 'Charge Failed', 'Charge Needs Review', ...Object.values(AftermathDetailType)],
      effect: async (event) => {
        applied.push(event);
      },
    });
    return { consumer, applied };
  }
  /** An aftermath event exactly as the outbox publishes it (checked against the contract). */
  function aftermath(operationId: string, detailType: string, overrides: Partial<ChargeAftermathDetail> = {}): { eventId: string; body: string } {
    const kind = detailType === AftermathDetailType.refunded ? 'refunded' : detailType === AftermathDetailType.disputed ? 'disputed' : 'dispute_closed';
    const detail = chargeAftermathDetailSchema.parse({
      version: 1, eventId: randomUUID(), operationId, orderId: `order-${operationId.slice(0, 8)}`, kind,
      amount: 500, amountRefunded: kind === 'refunded' ? 500 : null, chargeAmount: 1299, currency: 'eur', externalId: 'pi_test_1',
      chargeId: 'ch_test_1', disputeId: kind === 'refunded' ? null : 'dp_test_1', disputeStatus: kind === 'refunded' ? null : 'needs_response',
      disputeReason: kind === 'refunded' ? null : 'fraudulent', stripeEventId: `evt_${randomUUID().slice(0, 8)}`,
      stripeCreatedAt: '2026-12-01T09:05:00.000Z', occurredAt: '2026-12-01T09:05:01.000Z', ...overrides,
    });
    expect(detail).not.toHaveProperty('sequence');
    const body = JSON.stringify({ version: '0', id: randomUUID(), 'detail-type': detailType, source: 'payments.charges', account: '000000000000', time: '2026-12-01T09:05:01Z', region: 'us-east-1', resources: [], detail });
    return { eventId: detail.eventId, body };
  }
  const deliver = (body: string): QueueRecord => delivery(body);
  const heads = (consumer: string) =>
    db.pool.query<{ sequence: string }>('SELECT sequence FROM outcome_consumer.operation_heads WHERE consumer = $1', [consumer]).then((r) => r.rows.map((h) => h.sequence));

  it('the kit knows the facts by detail-type: exactly the three aftermath types and the refund fact; the outcome types stay states', () => {
    expect([...FACT_DETAIL_TYPES].sort()).toEqual(['Charge Dispute Closed', 'Charge Disputed', 'Charge Refunded', 'Refund Failed After Success']);
    for (const state of ['Charge Succeeded', 'Charge Failed', 'Charge Needs Review', 'Charge Reissued', 'Refund Succeeded', 'Refund Failed']) expect(orderingOf(state)).toBe('state');
    expect(orderingOf('Refund Failed After Success')).toBe('fact');
  });

  it('a refund arriving AFTER the final state event is applied exactly once (not stale), however often it is delivered', async () => {
    const { consumer, applied } = ledger();
    const final = outcomeEvent({ sequence: 2 });
    const refund = aftermath(final.operationId, AftermathDetailType.refunded);
    expect((await consumer.processBatch([delivery(final)])).results.map((r) => r.outcome)).toEqual(['done']);
    const batch = await consumer.processBatch([deliver(refund.body), deliver(refund.body)]);
    expect(batch.results.map((r) => r.outcome)).toEqual(['done', 'duplicate']);
    expect((await consumer.processBatch([deliver(refund.body)])).results.map((r) => r.outcome)).toEqual(['duplicate']);
    expect(applied.map((e) => [e.detailType, e.sequence])).toEqual([['Charge Succeeded', 2], ['Charge Refunded', null]]);
    expect(await inboxRow(db.pool, consumer.name, refund.eventId)).toMatchObject({ state: 'done', attempts: 1, deliveries: 3 });
    // the fact neither read nor moved the operation's head
    expect(await heads(consumer.name)).toEqual(['2']);
  });

  it('a refund arriving BEFORE the final state event is applied once, and the state event is still applied after it', async () => {
    const { consumer, applied } = ledger();
    const final = outcomeEvent({ sequence: 1 });
    const refund = aftermath(final.operationId, AftermathDetailType.refunded);
    expect((await consumer.processBatch([deliver(refund.body)])).results.map((r) => r.outcome)).toEqual(['done']);
    expect(await heads(consumer.name)).toEqual([]);
    expect((await consumer.processBatch([delivery(final), deliver(refund.body)])).results.map((r) => r.outcome)).toEqual(['done', 'duplicate']);
    expect(applied.map((e) => e.detailType)).toEqual(['Charge Refunded', 'Charge Succeeded']);
    expect(await heads(consumer.name)).toEqual(['1']);
  });

  it('two partial refunds and a dispute of one charge are three facts: each applied once, none supersedes another', async () => {
    const { consumer, applied } = ledger();
    const final = outcomeEvent({ sequence: 1 });
    const facts = [
      aftermath(final.operationId, AftermathDetailType.refunded, { amount: 300, amountRefunded: 300 }),
      aftermath(final.operationId, AftermathDetailType.refunded, { amount: 200, amountRefunded: 500 }),
      aftermath(final.operationId, AftermathDetailType.disputed),
    ];
    // out of order, with the state in the middle and copies
    const batch = await consumer.processBatch([deliver(facts[2]!.body), deliver(facts[1]!.body), delivery(final), deliver(facts[0]!.body), deliver(facts[1]!.body)]);
    expect(batch.response.batchItemFailures).toEqual([]);
    expect(batch.counts).toMatchObject({ done: 4, duplicates: 1, stale: 0 });
    expect(applied.filter((e) => e.detailType !== 'Charge Succeeded').map((e) => e.eventId).sort()).toEqual(facts.map((f) => f.eventId).sort());
  });

  it('a fact waiting for a retry is run again on its next delivery even though a state event was applied meanwhile', async () => {
    let fail = true;
    const applied: string[] = [];
    const consumer = createOutcomeConsumer({
      name: 't-facts-retry',
      db: db.pool,
      policy: 'at-least-once',
      detailTypes: ['Charge Succeeded', AftermathDetailType.disputeClosed],
      effect: async (event) => {
        if (fail && event.detailType === AftermathDetailType.disputeClosed) throw new Error('provider timed out');
        applied.push(event.detailType);
      },
    });
    const final = outcomeEvent({ sequence: 1 });
    const closed = aftermath(final.operationId, AftermathDetailType.disputeClosed);
    expect((await consumer.processBatch([deliver(closed.body)])).results.map((r) => r.outcome)).toEqual(['retry']);
    fail = false;
    await consumer.processBatch([delivery(final)]);
    expect((await consumer.processBatch([deliver(closed.body)])).results.map((r) => r.outcome)).toEqual(['done']);
    expect(applied).toEqual(['Charge Succeeded', 'Charge Dispute Closed']);
  });

  it('a STATE event without a sequence is still ranked below the numbered ones of its operation (stale), as before', async () => {
    const { consumer, applied } = ledger();
    const numbered = outcomeEvent({ sequence: 1 });
    const legacy = outcomeEvent({ operationId: numbered.operationId, orderId: numbered.orderId, detailType: 'Charge Needs Review' }); // no sequence
    const refund = aftermath(numbered.operationId, AftermathDetailType.refunded);
    await consumer.processBatch([delivery(numbered)]);
    await consumer.processBatch([deliver(refund.body)]);
    expect((await consumer.processBatch([delivery(legacy)])).results.map((r) => r.outcome)).toEqual(['stale']);
    expect(applied.map((e) => e.detailType)).toEqual(['Charge Succeeded', 'Charge Refunded']);
    expect(await inboxRow(db.pool, consumer.name, legacy.eventId)).toMatchObject({ state: 'stale', attempts: 0 });
  });
});

describe('poison events are recorded and acknowledged', () => {
  it('keeps each unreadable record with its reason, acknowledges it, and still works the good ones of the batch', async () => {
    const consumer = notifier('at-least-once');
    const good = outcomeEvent();
    const wrongType = envelopeBody(outcomeEvent({ detailType: 'Charge Failed' }));
    const noEventId = JSON.stringify({ ...JSON.parse(envelopeBody(outcomeEvent())), detail: { operationId: good.operationId, amount: 1 } });
    const badAmount = envelopeBody(outcomeEvent({ amount: -5 }));
    const records = [delivery('{not json'), delivery(wrongType), delivery(good), delivery(noEventId), delivery(badAmount), delivery('"a string"')];
    const batch = await consumer.processBatch(records);
    expect(batch.results.map((r) => r.outcome)).toEqual(['poison', 'poison', 'done', 'poison', 'poison', 'poison']);
    expect(batch.response.batchItemFailures).toEqual([]);
    const { rows } = await db.pool.query<{ message_id: string; reason: string }>(
      'SELECT message_id, reason FROM outcome_consumer.poison_events WHERE consumer = $1 ORDER BY first_seen_at, message_id',
      [consumer.name],
    );
    const reasons = new Map(rows.map((r) => [r.message_id, r.reason]));
    expect(reasons.get(records[0]!.messageId)).toBe('body is not JSON');
    expect(reasons.get(records[1]!.messageId)).toMatch(/detail-type "Charge Failed" is not one this consumer subscribed to/);
    expect(reasons.get(records[3]!.messageId)).toMatch(/^detail: eventId/);
    expect(reasons.get(records[4]!.messageId)).toMatch(/^detail: amount/);
    expect(reasons.get(records[5]!.messageId)).toMatch(/^not an EventBridge event/);
    expect(plain.sent()).toHaveLength(1);
    // A re-delivery of the same poison message counts, it is not a second row.
    await consumer.processBatch([records[0]!]);
    const again = await db.pool.query('SELECT deliveries FROM outcome_consumer.poison_events WHERE consumer = $1 AND message_id = $2', [consumer.name, records[0]!.messageId]);
    expect(again.rows).toEqual([{ deliveries: 2 }]);
  });
});

describe('each policy keeps its promise when the answer is lost', () => {
  it('at-least-once: a lost answer is retried (reported) and sends a second receipt — the accepted duplicate', async () => {
    const consumer = notifier('at-least-once');
    const event = outcomeEvent();
    plain.injectFault('lostResponse');
    const first = await consumer.processBatch([delivery(event)]);
    expect(first.results[0]).toMatchObject({ outcome: 'retry', acknowledged: false });
    expect(first.response.batchItemFailures).toHaveLength(1);
    const second = await consumer.processBatch([delivery(event, 2)]);
    expect(second.results[0]).toMatchObject({ outcome: 'done', acknowledged: true });
    expect(plain.sent()).toHaveLength(2);
    expect(await inboxRow(db.pool, consumer.name, event.eventId)).toMatchObject({ state: 'done', attempts: 2 });
  });

  it('idempotent: the retry carries the same key {consumer}:{eventId}; the provider replays, one receipt', async () => {
    const consumer = notifier('idempotent');
    const event = outcomeEvent();
    keyed.injectFault('lostResponse');
    expect((await consumer.processBatch([delivery(event)])).results[0]?.outcome).toBe('retry');
    keyed.injectFault('error500AfterCommit');
    expect((await consumer.processBatch([delivery(event, 2)])).results[0]?.outcome).toBe('done'); // replayed before any fault
    expect(keyed.sent()).toHaveLength(1);
    expect(keyed.sent()[0]?.idempotencyKey).toBe(`${consumer.name}:${event.eventId}`);
    expect(keyed.stats().replays).toBe(1);
    expect(await acceptedSends(db.pool, event.eventId)).toBe(1);
  });

  it('idempotent: a retry after the provider’s key lifetime is made, flagged and counted — the provider may act twice', async () => {
    const consumer = notifier('idempotent');
    const event = outcomeEvent();
    keyed.injectFault('lostResponse');
    expect((await consumer.processBatch([delivery(event)])).results[0]?.outcome).toBe('retry');
    // A day later: the provider pruned the key (Resend: 24 h), and the kit knows the first attempt's age.
    await db.pool.query(`UPDATE outcome_consumer.inbox SET first_attempted_at = now() - interval '25 hours' WHERE consumer = $1`, [consumer.name]);
    keyed.forgetKeys();
    const late = await consumer.processBatch([delivery(event, 2)]);
    expect(late.results[0]).toMatchObject({ outcome: 'done', keyExpired: true });
    expect(late.counts.keyExpired).toBe(1);
    expect(keyed.sent()).toHaveLength(2); // the duplicate the key could no longer prevent
  });

  it('at-most-once: an ambiguous answer is given up and acknowledged; a 500 before sending is the accepted miss', async () => {
    const consumer = notifier('at-most-once');
    const sentButLost = outcomeEvent();
    const neverSent = outcomeEvent();
    plain.injectFault('lostResponse', { match: (r) => String(r.body.subject).includes(sentButLost.orderId) });
    plain.injectFault('error500BeforeCommit', { match: (r) => String(r.body.subject).includes(neverSent.orderId) });
    const batch = await consumer.processBatch([delivery(sentButLost), delivery(neverSent)]);
    expect(batch.results.map((r) => [r.outcome, r.acknowledged])).toEqual([
      ['abandoned', true],
      ['abandoned', true],
    ]);
    const redelivered = await consumer.processBatch([delivery(sentButLost, 2), delivery(neverSent, 2)]);
    expect(redelivered.results.map((r) => [r.outcome, r.effectCalls])).toEqual([
      ['duplicate', 0],
      ['duplicate', 0],
    ]);
    expect(plain.sent().map((m) => m.subject)).toEqual([`Receipt for order ${sentButLost.orderId}`]); // one sent, one missed, none twice
    expect(await inboxRow(db.pool, consumer.name, neverSent.eventId)).toMatchObject({ state: 'abandoned', attempts: 1 });
  });

  it.each(['idempotent', 'at-least-once', 'at-most-once'] as const)('%s: a 429 (documented as not executed) is retried under every policy', async (policy) => {
    const consumer = notifier(policy);
    const fake = policy === 'idempotent' ? keyed : plain;
    const event = outcomeEvent();
    fake.injectFault('rateLimited');
    const first = await consumer.processBatch([delivery(event)]);
    expect(first.results[0]).toMatchObject({ outcome: 'not_executed', acknowledged: false });
    expect((await inboxRow(db.pool, consumer.name, event.eventId))?.state).toBe('pending');
    expect((await consumer.processBatch([delivery(event, 2)])).results[0]?.outcome).toBe('done');
    expect(fake.sent()).toHaveLength(1);
  });

  it('a refusal for good (400: the sender address is not valid) is recorded as failed and acknowledged, never retried', async () => {
    const event = outcomeEvent();
    const refusing = createReceiptNotifier({
      db: db.pool,
      name: 't-refused',
      provider: new HttpEmailProvider({ apiBase: plain.url, apiKey: 're_test', idempotencyKeys: false }),
      from: 'not an address',
      recipient: templateRecipient('customer+{orderId}@example.com'),
    });
    const batch = await refusing.processBatch([delivery(event)]);
    expect(batch.results[0]).toMatchObject({ outcome: 'failed', acknowledged: true, error: expect.stringMatching(/400 validation_error/) });
    expect((await refusing.processBatch([delivery(event, 2)])).results[0]).toMatchObject({ outcome: 'duplicate', effectCalls: 0 });
    expect(plain.stats().requests).toBe(1);
  });
});

describe('an attempt whose answer was never recorded (fault injected between effect and record)', () => {
  // The settle statement fails after the provider answered: the row stays "attempting" with a lease,
  // exactly as after a crash at that point. (A real killed process: crash.test.ts.)
  function failingSettle(pool: typeof db.pool) {
    let armed = true;
    return {
      query: ((config: unknown, values?: unknown) => {
        if (armed && typeof config === 'object' && config !== null && (config as { name?: string }).name === 'outcome-consumer-settle') {
          armed = false;
          return Promise.reject(new Error('connection terminated unexpectedly'));
        }
        return (pool.query as (a: unknown, b?: unknown) => Promise<unknown>)(config, values);
      }) as typeof pool.query,
    };
  }

  it.each([
    ['at-least-once', 2, 'done'],
    ['idempotent', 1, 'done'],
    ['at-most-once', 1, 'abandoned'],
  ] as const)('%s: the next delivery after the lease ran out gives %i receipt(s), state %s', async (policy, receipts, state) => {
    const fake = policy === 'idempotent' ? keyed : plain;
    const name = `t-unrecorded-${policy}`;
    const provider = new HttpEmailProvider({ apiBase: fake.url, apiKey: 're_test', idempotencyKeys: fake.idempotency });
    const make = (dbLike: typeof db.pool) =>
      createReceiptNotifier({ db: dbLike, name, policy, provider, from: 'receipts@shop.example', recipient: templateRecipient('c+{orderId}@example.com') });
    const event = outcomeEvent();
    const first = await make(failingSettle(db.pool) as typeof db.pool).processBatch([delivery(event)]);
    expect(first.results[0]).toMatchObject({ outcome: 'not_recorded', acknowledged: false });
    // Before the lease runs out, a re-delivery must not run it (the first worker may still be busy).
    expect((await make(db.pool).processBatch([delivery(event, 2)])).results[0]?.outcome).toBe('busy');
    await expireLeases(db.pool, name);
    const after = await make(db.pool).processBatch([delivery(event, 3)]);
    expect(after.results[0]?.acknowledged).toBe(true);
    expect(fake.sent()).toHaveLength(receipts);
    expect((await inboxRow(db.pool, name, event.eventId))?.state).toBe(state);
  });
});

describe('configuration is refused at start', () => {
  it('says what to change', () => {
    const provider = new HttpEmailProvider({ apiBase: plain.url, apiKey: 're_test', idempotencyKeys: false });
    expect(() => createReceiptNotifier({ db: db.pool, provider, policy: 'idempotent', from: 'a@b.c', recipient: () => 'x@y.z' })).toThrow(ConsumerConfigError);
    expect(() => createOutcomeConsumer({ name: 'Bad Name', db: db.pool, policy: 'sometimes' as ConsumerPolicy, effect: async () => {}, detailTypes: [] })).toThrow(
      /name must match[\s\S]*policy must be[\s\S]*detailTypes must name/,
    );
    expect(() => templateRecipient('no-placeholder@example.com')).toThrow(/RECEIPTS_RECIPIENT_TEMPLATE/);
  });
});
