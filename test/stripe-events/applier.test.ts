// Applying Stripe events on real PostgreSQL, with the real engine and the real stripe SDK against the
// fake Stripe: settle, never undo, idempotent per event id, wait for a held lease, contradictions and
// unrecorded charges as findings, refunds and disputes as outcome events, the EventBridge door.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { chargeAftermathDetailSchema, chargeOutcomeDetailSchema } from '../../lambdas/events/contract.ts';
import { DEFAULT_POLICY } from '../../lambdas/payments/decisions.ts';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import { claimForEvent, inboxGauges } from '../../lambdas/payments/inbox-store.ts';
import { claimById, findOperation, recordOutcomes } from '../../lambdas/payments/operations-store.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import { checkInvariants } from '../../local/invariants.ts';
import { receivePartnerEvent, receiveWebhook, RejectCode } from '../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent, WebhookDispatcher, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import type { TestDatabase } from '../support/db.ts';
import { testEngine } from '../support/engine.ts';
import { chargeOrder } from '../support/orders.ts';
import { plantPaymentIntent, type StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { count, deliverWebhook, delivery, inboxRow, piEvent, SECRET, testApplier, WEBHOOK_SETTINGS as settings } from './support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('applier', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe });
const applier = () => testApplier({ db, stripe });
const deliver = (event: StripeEventJson) => deliverWebhook({ db, stripe }, event);

/** An operation whose PaymentIntent Stripe left `processing`: the engine wrote `unknown` + its id. */
async function processingOperation() {
  stripe.fake.injectFault({}, 'processing');
  const [r] = await engine().processRequests([chargeOrder()]);
  const op = (await findOperation(db.pool, r!.operationId))!;
  expect(op).toMatchObject({ status: 'unknown' });
  const pi = stripe.fake.paymentIntents({ operationId: op.id })[0]!;
  return { op, pi };
}
const truth = (operationId: string) => stripe.fake.paymentIntents({ operationId })[0]!;
const audit = (operationId: string) => db.pool.query('SELECT * FROM payment_operation_events WHERE operation_id = $1 ORDER BY id', [operationId]).then((r) => r.rows);
const outbox = (operationId: string) => db.pool.query('SELECT e.*, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at', [operationId]).then((r) => r.rows);

describe('payment_intent.* for an open operation', () => {
  it('Stripe settles a processing PaymentIntent → the succeeded event settles the operation at once, after one retrieve, with its outcome event', async () => {
    const { op } = await processingOperation();
    stripe.fake.settle(op.externalId!, 'succeeded');
    const before = stripe.fake.requests().length;
    const r = await deliver(piEvent(truth(op.id)));
    expect(r).toMatchObject({ kind: 'recorded', applied: { outcome: 'settled' } });
    expect(stripe.fake.requests().slice(before).map((q) => [q.endpoint, q.paymentIntentId])).toEqual([['retrieve', op.externalId]]);
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: op.externalId });
    const [event] = await outbox(op.id);
    expect(event).toMatchObject({ event_type: 'Charge Succeeded' });
    expect(chargeOutcomeDetailSchema.safeParse(event.payload).success).toBe(true);
    const line = (await audit(op.id)).find((a) => a.action === 'outcome_recorded' && a.detail.stripeEventId);
    expect(line).toMatchObject({ actor: 'stripe-events', to_status: 'succeeded', detail: { evidence: 'event+retrieve', retrieved: { id: op.externalId, status: 'succeeded' } } });
  });

  it('payment_failed is not trusted alone: the PaymentIntent is retrieved, and what Stripe says now decides', async () => {
    const { op } = await processingOperation();
    stripe.fake.settle(op.externalId!, 'requires_payment_method');
    const before = stripe.fake.requests().length;
    const r = await deliver(piEvent(truth(op.id)));
    expect(r).toMatchObject({ applied: { outcome: 'settled' } });
    expect(stripe.fake.requests().slice(before).map((q) => q.endpoint)).toEqual(['retrieve']);
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'failed' });
  });

  it('an old processing event that arrives after the PaymentIntent succeeded → retrieve says succeeded → succeeded', async () => {
    const { op, pi } = await processingOperation();
    const old = piEvent(pi, 'processing');
    stripe.fake.settle(op.externalId!, 'succeeded');
    expect(await deliver(old)).toMatchObject({ applied: { outcome: 'settled' } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
  });

  it('succeeded before processing → stays succeeded (the later-arriving older event is stale)', async () => {
    const { op, pi } = await processingOperation();
    const processing = piEvent(pi, 'processing');
    stripe.fake.settle(op.externalId!, 'succeeded');
    await deliver(piEvent(truth(op.id)));
    const r = await deliver(processing);
    expect(r).toMatchObject({ applied: { outcome: 'stale' } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await outbox(op.id)).toHaveLength(1);
  });

  it('the same event delivered five times → applied once', async () => {
    const { op } = await processingOperation();
    stripe.fake.settle(op.externalId!, 'succeeded');
    const event = piEvent(truth(op.id));
    const outcomes = [];
    for (let i = 0; i < 5; i++) outcomes.push(await deliver(event));
    expect(outcomes.map((o) => (o.kind === 'recorded' ? o.duplicate : null))).toEqual([false, true, true, true, true]);
    expect((await audit(op.id)).filter((a) => a.action === 'outcome_recorded' && a.detail.stripeEventId === event.id)).toHaveLength(1);
    expect(await outbox(op.id)).toHaveLength(1);
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'settled', attempts: 1 });
  });

  it('an event’s claim is the engine’s claim (one SET, one attempt_started line) plus its Stripe event id; a live lease is not taken twice', async () => {
    const { op } = await processingOperation();
    const before = (await db.pool.query('SELECT first_attempted_at, attempts, updated_at FROM payment_operations WHERE id = $1', [op.id])).rows[0];
    const token = randomUUID();
    const claim = await claimForEvent(db.pool, op.id, token, 60_000, 'stripe-events', 'evt_claim_test');
    expect(claim?.claimed).toMatchObject({ id: op.id, leaseToken: token });
    const { rows: [leased] } = await db.pool.query(
      `SELECT lease_token::text, lease_until = next_attempt_at AS due_when_lease_ends, lease_until > now() + interval '50 seconds' AS lease_ahead,
              first_attempted_at, updated_at > $2 AS touched FROM payment_operations WHERE id = $1`,
      [op.id, before.updated_at],
    );
    expect(leased).toMatchObject({ lease_token: token, due_when_lease_ends: true, lease_ahead: true, first_attempted_at: before.first_attempted_at, touched: true });
    const line = (await audit(op.id)).at(-1);
    expect(line).toMatchObject({
      actor: 'stripe-events', action: 'attempt_started', from_status: 'unknown', to_status: 'unknown', key_generation: 0,
      lease_token: token, attempt: before.attempts + 1, detail: { stripeEventId: 'evt_claim_test' },
    });
    // The lease (migrations/023) and the attempt (029) in their columns, the rest in detail.
    expect(line.lease_until).toBeInstanceOf(Date);
    expect(Object.keys(line.detail).sort()).toEqual(['stripeEventId']);
    const again = await claimForEvent(db.pool, op.id, randomUUID(), 60_000, 'stripe-events', 'evt_claim_test_2');
    expect(again).toMatchObject({ claimed: null, operation: { leaseToken: token } });
    expect(again && !again.claimed && again.leaseUntil).toBeInstanceOf(Date);
  });

  it('an event while a worker holds the lease waits in the inbox, and is applied after that worker’s write', async () => {
    const { op } = await processingOperation();
    await db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [op.id]);
    const token = randomUUID();
    const held = await claimById(db.pool, op.id, token, 60_000, 'slow-worker');
    expect(held?.claimed).not.toBeNull();
    stripe.fake.settle(op.externalId!, 'succeeded');
    const event = piEvent(truth(op.id));
    const r = await deliver(event);
    expect(r).toMatchObject({ applied: { outcome: 'deferred' } });
    const waiting = await inboxRow(db.pool, event.id);
    expect(waiting).toMatchObject({ applied_at: null, operation_id: op.id });
    // Due when the holder's lease ends (the database's own figure, not a distance from the test's clock).
    const { rows: [lease] } = await db.pool.query<{ lease_until: Date }>('SELECT lease_until FROM payment_operations WHERE id = $1', [op.id]);
    expect(waiting!.next_attempt_at.getTime()).toBe(lease!.lease_until.getTime());
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'unknown', leaseToken: token });

    // The worker writes what it learnt before the settle (still processing): its write is not overtaken.
    const [written] = await recordOutcomes(db.pool, [{
      operationId: op.id, leaseToken: token, action: 'record', step: 'retrieve', fromStatus: 'unknown', keyGeneration: 0,
      status: 'unknown', externalId: op.externalId, reviewReason: null, retryAfterMs: 60_000, error: null, errorClass: null, errorCode: null, detail: {},
    }], 'slow-worker', 0);
    expect(written!.applied).toBe(true);
    expect(await inboxGauges(db.pool)).toMatchObject({ backlog: 1 });

    // The reconciler's next pass: the worker wrote (its lease is given back), so the event is due at
    // once — not only when the lease would have ended.
    const summary = await applier().applyDue();
    expect(summary.byOutcome).toMatchObject({ settled: 1 });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await inboxGauges(db.pool)).toMatchObject({ backlog: 0 });
  });

  it('Stripe unreachable for the retrieve → the event waits in the inbox, the operation is released untouched', async () => {
    const { op, pi } = await processingOperation();
    const noStripe = new StripeEventApplier({ db: db.pool, gateway: null, random: () => 0.5 });
    const r = await receiveWebhook(delivery(piEvent(pi, 'processing')), settings, { db: db.pool, applier: noStripe, publisher: null });
    expect(r).toMatchObject({ applied: { outcome: 'deferred' } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'unknown', leaseToken: null });
  });

  it('no Stripe key yet: even an event that would only be recorded waits (its mode cannot be checked against ours); with the key it is applied', async () => {
    const event = makeStripeEvent('payment_intent.succeeded', {
      id: 'pi_waits_for_key', object: 'payment_intent', status: 'succeeded', amount: 500, currency: 'eur', customer: 'cus_x',
      metadata: { operation_id: randomUUID(), order_id: 'order-waits', key_generation: '0' },
    });
    const noKey = new StripeEventApplier({ db: db.pool, gateway: null, random: () => 0.5 });
    const r = await receiveWebhook(delivery(event), settings, { db: db.pool, applier: noKey, publisher: null });
    expect(r).toMatchObject({ applied: { outcome: 'deferred', reason: expect.stringMatching(/no Stripe key yet/) } });
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ applied_at: null });
    expect(await count(db.pool, `stripe_event_findings WHERE payment_intent_id = 'pi_waits_for_key'`)).toBe(0);
    await db.pool.query('UPDATE stripe_events SET next_attempt_at = now() WHERE event_id = $1', [event.id]);
    expect((await applier().applyDue()).byOutcome).toMatchObject({ unrecorded: 1 });
  });

  it('an event that waits is retried on the policy’s inbox backoff (backoff.inbox, which RETRY_BACKOFF_SCALE scales), not on a delay of its own', async () => {
    const event = makeStripeEvent('payment_intent.succeeded', {
      id: 'pi_waits_on_policy', object: 'payment_intent', status: 'succeeded', amount: 500, currency: 'eur', customer: 'cus_x',
      metadata: { operation_id: randomUUID(), order_id: 'order-waits-policy', key_generation: '0' },
    });
    const hour = 3_600_000;
    const patient = new StripeEventApplier({ db: db.pool, gateway: null, random: () => 0.5, policy: { backoff: { ...DEFAULT_POLICY.backoff, inbox: { baseMs: hour, capMs: hour } } } });
    const r = await receiveWebhook(delivery(event), settings, { db: db.pool, applier: patient, publisher: null });
    expect(r).toMatchObject({ applied: { outcome: 'deferred' } });
    const { rows: [row] } = await db.pool.query<{ wait_s: number }>('SELECT extract(epoch FROM next_attempt_at - now())::float8 AS wait_s FROM stripe_events WHERE event_id = $1', [event.id]);
    // An hour (the policy's), not the default's seconds.
    expect(row!.wait_s).toBeGreaterThan(hour / 1000 - 60);
    expect(row!.wait_s).toBeLessThanOrEqual(hour / 1000);
  });

  it('a PaymentIntent of another customer naming our operation is not adopted: review, decided on the PaymentIntent Stripe holds', async () => {
    const { op } = await processingOperation();
    // A real second PaymentIntent at Stripe, of another customer, carrying the operation's metadata.
    const planted = await plantPaymentIntent(stripe, { ...op, customerId: 'cus_somebody_else' }, op.id);
    expect(planted.ok).toBe(true);
    const other = stripe.fake.paymentIntents({ operationId: op.id }).find((p) => p.customer === 'cus_somebody_else')!;
    expect(await deliver(piEvent(other))).toMatchObject({ applied: { outcome: 'review' } });
    const after = (await findOperation(db.pool, op.id))!;
    expect(after.status).toBe('unknown');
    expect(after.reviewReason).toMatch(/customer/);
    expect((await outbox(op.id)).map((e) => e.event_type)).toEqual(['Charge Needs Review']);
  });

  it('a snapshot saying another customer than Stripe holds is not confirmed: a finding, no review, no state change', async () => {
    const { op, pi } = await processingOperation();
    const event = makeStripeEvent('payment_intent.processing', { ...piEvent(pi).data.object, customer: 'cus_somebody_else' });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unconfirmed', newFinding: true } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'unknown', reviewReason: null, leaseToken: null });
    expect(await outbox(op.id)).toEqual([]);
    expect(await count(db.pool, `stripe_event_findings WHERE kind = 'unconfirmed' AND payment_intent_id = $1`, [pi.id])).toBe(1);
  });

  it('an operation in review is never settled by an event: the event is noted for the operator', async () => {
    const { op, pi } = await processingOperation();
    await db.pool.query(`UPDATE payment_operations SET review_reason = 'test', next_attempt_at = NULL WHERE id = $1`, [op.id]);
    stripe.fake.settle(pi.id, 'succeeded');
    expect(await deliver(piEvent(truth(op.id)))).toMatchObject({ applied: { outcome: 'in_review' } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'unknown', reviewReason: 'test' });
    expect((await audit(op.id)).at(-1)).toMatchObject({ action: 'stripe_event' });
  });
});

describe('events that the ledger cannot explain', () => {
  it('an event for an unknown PaymentIntent carrying our metadata → an unrecorded-charge finding, once', async () => {
    const ghost = randomUUID();
    const event = makeStripeEvent('payment_intent.succeeded', {
      id: 'pi_ghost1', object: 'payment_intent', status: 'succeeded', amount: 500, currency: 'eur', customer: 'cus_x',
      metadata: { operation_id: ghost, order_id: 'order-ghost', key_generation: '0' },
    });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unrecorded', newFinding: true } });
    const again = makeStripeEvent(event.type, event.data.object);
    expect(await deliver(again)).toMatchObject({ applied: { outcome: 'unrecorded', newFinding: false } });
    const { rows } = await db.pool.query(`SELECT * FROM stripe_event_findings WHERE payment_intent_id = 'pi_ghost1'`);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ kind: 'unrecorded_charge', claimed_operation_id: ghost, order_id: 'order-ghost', amount: '500', operation_id: null });
    expect((await inboxGauges(db.pool)).openUnrecordedCharges).toBeGreaterThanOrEqual(1);
  });

  it('a PaymentIntent without our metadata is foreign: applied, nothing else', async () => {
    const event = makeStripeEvent('payment_intent.succeeded', { id: 'pi_foreign', object: 'payment_intent', status: 'succeeded', amount: 5, currency: 'usd', metadata: {} });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'foreign' } });
  });

  it('a succeeded event for a failed operation → contradiction finding and audit line; the final state is not rewritten', async () => {
    stripe.fake.injectFault({}, 'decline');
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    expect(op.status).toBe('failed');
    const pi = truth(op.id);
    const event = piEvent(pi, 'succeeded');
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'contradiction', newFinding: true } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'failed' });
    expect(await count(db.pool, `stripe_event_findings WHERE kind = 'contradiction' AND operation_id = $1`, [op.id])).toBe(1);
    expect((await audit(op.id)).at(-1)).toMatchObject({ action: 'stripe_event', detail: { stripeEventId: event.id } });
  });

  it('a second succeeded PaymentIntent for one order → contradiction (and the remedy), once Stripe shows it; a second one that Stripe does not know → unconfirmed, no remedy', async () => {
    const order = chargeOrder();
    const [r] = await engine().processRequests([order]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    expect(op.status).toBe('succeeded');
    expect((await plantPaymentIntent(stripe, order, op.id)).ok).toBe(true);
    const second = stripe.fake.paymentIntents({ operationId: op.id }).find((p) => p.id !== op.externalId)!;
    expect(await deliver(piEvent(second))).toMatchObject({ applied: { outcome: 'contradiction' } });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: op.externalId });
    expect(await count(db.pool, `payment_operations WHERE refund_payment_intent = $1`, [second.id])).toBe(1);

    const forged = makeStripeEvent('payment_intent.succeeded', { ...piEvent(truth(op.id)).data.object, id: 'pi_second_one' });
    expect(await deliver(forged)).toMatchObject({ applied: { outcome: 'unconfirmed', newFinding: true } });
    expect(await count(db.pool, `payment_operations WHERE refund_payment_intent = 'pi_second_one'`)).toBe(0);
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: op.externalId });
  });
});

describe('after the charge: refunds and disputes', () => {
  it('a Dashboard refund → a Refund at Stripe (listed, counted) whose refund.created is foreign, and a Charge Refunded event with the amounts; the charge stays succeeded', async () => {
    const [r] = await engine().processRequests([chargeOrder({ amount: 5000 })]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    const first = dispatcher.refund(op.externalId!, 1500);
    expect(first.map((e) => e.type).sort()).toEqual(['charge.refunded', 'refund.created']);
    const created = first.find((e) => e.type === 'refund.created')!;
    expect(created.data.object).toMatchObject({ object: 'refund', amount: 1500, payment_intent: op.externalId, metadata: {} });
    expect(await deliver(created)).toMatchObject({ applied: { outcome: 'foreign' } });
    const partial = first.find((e) => e.type === 'charge.refunded')!;
    expect(await deliver(partial)).toMatchObject({ applied: { outcome: 'aftermath' } });
    // The rest: what is left on the charge, as Stripe counts it (the first refund took 1500).
    const rest = dispatcher.refund(op.externalId!);
    for (const e of rest) await deliver(e);
    expect(() => dispatcher.refund(op.externalId!, 1)).toThrow(/already been refunded/);
    const listed = await createStripeClient({ apiKey: 'sk_test_refunds', apiBase: stripe.fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 }).refunds.list({ payment_intent: op.externalId! });
    expect(listed.data.map((x) => x.amount)).toEqual([3500, 1500]);
    const events = (await outbox(op.id)).filter((e) => e.event_type === 'Charge Refunded');
    expect(events.map((e) => [e.payload.amount, e.payload.amountRefunded])).toEqual([[1500, 1500], [3500, 5000]]);
    for (const e of events) expect(chargeAftermathDetailSchema.safeParse(e.payload).success).toBe(true);
    expect(events[0].payload).toMatchObject({ kind: 'refunded', chargeAmount: 5000, externalId: op.externalId, stripeEventId: partial.id });
    expect(events[0].payload.sequence).toBeUndefined();
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    // The invariant checker agrees: one final outcome event (sequence 1), the refunds beside it.
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), sentOrderIds: [op.orderId], orderIds: [op.orderId], requireQuiescent: true });
    expect(report.violations).toEqual([]);
  });

  it('a refund made through Stripe\'s Refunds API (the real SDK, the fake) → charge.refunded → Charge Refunded', async () => {
    const [r] = await engine().processRequests([chargeOrder({ amount: 4000 })]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    const sdk = createStripeClient({ apiKey: 'sk_test_refunds', apiBase: stripe.fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 });
    await sdk.refunds.create({ payment_intent: op.externalId!, amount: 1000 }, { idempotencyKey: `refund-${op.id}` });
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    dispatcher.poll();
    const made = dispatcher.events().filter((e) => e.type === 'charge.refunded');
    await dispatcher.stop();
    expect(made).toHaveLength(1);
    expect(made[0]!.data).toMatchObject({ object: { amount_refunded: 1000, payment_intent: op.externalId }, previous_attributes: { amount_refunded: 0 } });
    expect(await deliver(made[0]!)).toMatchObject({ applied: { outcome: 'aftermath' } });
    const [refunded] = (await outbox(op.id)).filter((e) => e.event_type === 'Charge Refunded');
    expect(refunded.payload).toMatchObject({ amount: 1000, amountRefunded: 1000, chargeAmount: 4000 });
  });

  it('a dispute opened and closed → Charge Disputed, Charge Dispute Closed', async () => {
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    await deliver(dispatcher.dispute(op.externalId!, 'created'));
    await deliver(dispatcher.dispute(op.externalId!, 'closed', 'lost'));
    const events = (await outbox(op.id)).filter((e) => e.event_type !== 'Charge Succeeded');
    expect(events.map((e) => [e.event_type, e.payload.disputeStatus])).toEqual([['Charge Disputed', 'needs_response'], ['Charge Dispute Closed', 'lost']]);
  });

  it('a refund for a PaymentIntent no operation holds is recorded as such', async () => {
    const event = makeStripeEvent('charge.refunded', { id: 'ch_x', object: 'charge', amount: 10, amount_refunded: 10, currency: 'eur', payment_intent: 'pi_nobody' });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unknown_payment_intent' } });
  });
});

describe('the EventBridge door: the same inbox, the same applier', () => {
  it('a partner event (detail = the Stripe event) settles the operation; the source is checked', async () => {
    const { op } = await processingOperation();
    stripe.fake.settle(op.externalId!, 'succeeded');
    const stripeEvent = piEvent(truth(op.id));
    const partner = { version: '0', id: randomUUID(), 'detail-type': stripeEvent.type, source: 'aws.partner/stripe.com/ed_test_123', account: '111122223333', time: new Date().toISOString(), region: 'eu-west-1', resources: [], detail: stripeEvent };
    const deps = { db: db.pool, applier: applier(), publisher: null };
    expect(await receivePartnerEvent(partner, null, deps)).toMatchObject({ kind: 'recorded', applied: { outcome: 'settled' } });
    expect(await inboxRow(db.pool, stripeEvent.id)).toMatchObject({ source: 'eventbridge' });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    // The same event by webhook as well (both doors open during a migration): a duplicate, nothing more.
    expect(await deliver(stripeEvent)).toMatchObject({ kind: 'recorded', duplicate: true });

    const wrong = await receivePartnerEvent({ ...partner, source: 'my.app' }, null, deps);
    expect(wrong).toMatchObject({ kind: 'rejected', code: RejectCode.wrongSource });
    const otherDestination = await receivePartnerEvent(partner, 'aws.partner/stripe.com/ed_live_999', deps);
    expect(otherDestination).toMatchObject({ kind: 'rejected', code: RejectCode.wrongSource });
    expect(await receivePartnerEvent({ ...partner, detail: { nope: 1 } }, null, deps)).toMatchObject({ kind: 'rejected', code: RejectCode.notAnEvent });
  });
});
