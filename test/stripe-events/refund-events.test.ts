// Refunds settled by Stripe's events (docs/model.md#refunds-settled-by-stripes-events): refund.created / refund.updated /
// refund.failed (and the older charge.refund.updated) made by the fake Stripe from its own ledger,
// signed, received by the real webhook path, applied on real PostgreSQL with the engine's own writes;
// the Refunds really made through the real stripe SDK against the fake.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { refundFactDetailSchema, refundOutcomeDetailSchema } from '../../lambdas/events/contract.ts';
import type pg from 'pg';
import { runOps } from '../../lambdas/ops/commands.ts';
import { render } from '../../lambdas/ops/render.ts';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import { inboxGauges, type TransactionalDb } from '../../lambdas/payments/inbox-store.ts';
import { claimById, findOperation, recordOutcomes } from '../../lambdas/payments/operations-store.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent, WebhookDispatcher, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import { checkInvariants } from '../../local/invariants.ts';
import { netChargedByOrder } from '../../local/stripe-truth.ts';
import type { TestDatabase } from '../support/db.ts';
import { chargedOrder as charged, testEngine } from '../support/engine.ts';
import { chargeOrder, refundOf } from '../support/orders.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { count, deliverWebhook, delivery, inboxRow, SECRET, testApplier, WEBHOOK_SETTINGS as settings } from './support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('refund_events', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe });
const applier = () => testApplier({ db, stripe });
const deliver = (event: StripeEventJson) => deliverWebhook({ db, stripe }, event);

const chargedOrder = async (overrides: Partial<ChargeInput> = {}): Promise<ChargeInput> => (await charged(engine(), chargeOrder(overrides))).input;
const outbox = (id: string) =>
  db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at, event_id', [id]).then((r) => r.rows as { event_type: string; payload: Record<string, unknown> }[]);
const retrieves = () => stripe.fake.requests().filter((r) => r.endpoint === 'refund_retrieve').length;
const refundAt = (operationId: string) => stripe.fake.refunds({ operationId })[0]!;
const findings = (refundId: string) => db.pool.query('SELECT * FROM stripe_event_findings WHERE payment_intent_id = $1', [refundId]).then((r) => r.rows);

/** The fake's events since the last call, of the refund types (what Stripe would send for its ledger's changes). */
function watcher(options: { chargeRefundUpdated?: boolean; apiVersion?: string } = {}) {
  const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET, ...options });
  let seen = 0;
  return {
    dispatcher,
    next(): StripeEventJson[] {
      dispatcher.poll();
      const all = dispatcher.events();
      const fresh = all.slice(seen);
      seen = all.length;
      return fresh.filter((e) => e.type.startsWith('refund.') || e.type === 'charge.refund.updated');
    },
    stop: () => dispatcher.stop(),
  };
}

/** A refund operation whose Refund Stripe left `pending` (pm_card_pendingRefund): the engine wrote `unknown` + its re_… id. */
async function pendingRefund() {
  const input = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund', amount: 2000 });
  const id = await engine().requestRefund(refundOf(input.orderId));
  expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown', step: 'create' });
  expect(refundAt(id).status).toBe('pending');
  return { input, id };
}

describe('refund events settle an open refund operation', () => {
  it('pending → succeeded: refund.updated settles it within the apply after ONE retrieve (the snapshot is a hint), with the Refund Succeeded the engine would publish', async () => {
    const { id } = await pendingRefund();
    const w = watcher();
    const [created] = w.next();
    expect(created).toMatchObject({ type: 'refund.created', data: { object: { object: 'refund', status: 'pending', metadata: { operation_id: id } } } });
    // pending: nothing final; the operation stays open on its schedule.
    expect(await deliver(created!)).toMatchObject({ kind: 'recorded', applied: { outcome: 'stale' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown' });

    stripe.fake.settleRefund(refundAt(id).id, 'succeeded');
    const [updated] = w.next();
    expect(updated).toMatchObject({ type: 'refund.updated', data: { object: { status: 'succeeded' }, previous_attributes: { status: 'pending' } } });
    const before = retrieves();
    expect(await deliver(updated!)).toMatchObject({ applied: { outcome: 'settled', operationId: id } });
    expect(retrieves()).toBe(before + 1); // our key confirmed it: Stripe's answer, not the snapshot, settled it
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', externalId: refundAt(id).id });
    const events = await outbox(id);
    expect(events.map((e) => e.event_type)).toEqual(['Refund Succeeded']);
    expect(refundOutcomeDetailSchema.safeParse(events[0]!.payload).success).toBe(true);
    expect(events[0]!.payload).toMatchObject({ status: 'succeeded', externalId: refundAt(id).id, kind: 'refund' });
    // Redelivered: the inbox drops it; the engine's next look changes nothing.
    expect(await deliver(updated!)).toMatchObject({ duplicate: true });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Succeeded']);
    await w.stop();
  });

  it('pending → failed: refund.failed settles it failed (Refund Failed); the refund.updated of the same change, after it, is stale', async () => {
    const { id } = await pendingRefund();
    const w = watcher();
    w.next();
    stripe.fake.settleRefund(refundAt(id).id, 'failed');
    const fresh = w.next();
    expect(fresh.map((e) => e.type)).toEqual(['refund.updated', 'refund.failed']);
    const failed = fresh.find((e) => e.type === 'refund.failed')!;
    const updated = fresh.find((e) => e.type === 'refund.updated')!;
    expect(failed.data.object).toMatchObject({ status: 'failed', failure_reason: 'expired_or_canceled_card' });
    expect(await deliver(failed)).toMatchObject({ applied: { outcome: 'settled' } });
    expect(await deliver(updated)).toMatchObject({ applied: { outcome: 'stale' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'failed' });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Failed']);
    await w.stop();
  });

  it('an event while a worker holds the refund operation\'s lease waits in the inbox, and is applied after that worker\'s write', async () => {
    const { id } = await pendingRefund();
    await db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [id]);
    const token = randomUUID();
    expect((await claimById(db.pool, id, token, 60_000, 'slow-worker'))?.claimed).not.toBeNull();
    const w = watcher();
    w.next();
    stripe.fake.settleRefund(refundAt(id).id, 'succeeded');
    const [updated] = w.next();
    expect(await deliver(updated!)).toMatchObject({ applied: { outcome: 'deferred' } });
    expect(await inboxRow(db.pool, updated!.id)).toMatchObject({ applied_at: null, operation_id: id });
    // The worker writes what it saw before the settle (still pending): not overtaken by the event.
    const [written] = await recordOutcomes(db.pool, [{
      operationId: id, leaseToken: token, action: 'record', step: 'retrieve', fromStatus: 'unknown', keyGeneration: 0,
      status: 'unknown', externalId: refundAt(id).id, reviewReason: null, retryAfterMs: 60_000, error: null, errorClass: null, errorCode: null, detail: {},
    }], 'slow-worker', 0);
    expect(written!.applied).toBe(true);
    const summary = await applier().applyDue();
    expect(summary.byOutcome).toMatchObject({ settled: 1 });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded' });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Succeeded']);
    await w.stop();
  });

  it('out of order: the failure arrives first, the older succeeded snapshot later → retrieved, stale; one Refund Failed, no finding', async () => {
    const input = await chargedOrder({ amount: 3000, paymentMethod: 'pm_card_refundFail' });
    const id = await engine().requestRefund(refundOf(input.orderId));
    // The Refund is made and succeeds, the answer is lost: the operation is unknown.
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'error_500_after_commit');
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown' });
    const w = watcher();
    const [created] = w.next();
    expect(created).toMatchObject({ type: 'refund.created', data: { object: { status: 'succeeded' } } });
    stripe.fake.settleRefund(refundAt(id).id, 'failed');
    const later = w.next();
    const failed = later.find((e) => e.type === 'refund.failed')!;
    expect(await deliver(failed)).toMatchObject({ applied: { outcome: 'settled' } });
    const before = retrieves();
    expect(await deliver(created!)).toMatchObject({ applied: { outcome: 'stale' } });
    expect(retrieves()).toBe(before + 1); // a succeeded snapshot against a failed operation is checked, not trusted
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'failed' });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Failed']);
    expect(await findings(refundAt(id).id)).toHaveLength(0);
    await w.stop();
  });
});

describe('a refund operation in review', () => {
  it('a pending refund sent to review: refund.updated (pending) is noted for the operator; the final, matching Refund settles it and clears the review', async () => {
    const input = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund', amount: 2000 });
    const id = await engine().requestRefund(refundOf(input.orderId));
    // The engine's rule for an unsettled object (here at once instead of after 7 days): review.
    const impatient = testEngine({ db, stripe }, { policy: { unsettledReviewAfterMs: 0 } });
    await impatient.executeCharge(id);
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: expect.stringMatching(/still pending/) });
    const w = watcher();
    const [created] = w.next();
    expect(await deliver(created!)).toMatchObject({ applied: { outcome: 'in_review' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: expect.stringMatching(/still pending/) });

    stripe.fake.settleRefund(refundAt(id).id, 'succeeded');
    const [updated] = w.next();
    expect(await deliver(updated!)).toMatchObject({ applied: { outcome: 'settled' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', reviewReason: null });
    const events = await outbox(id);
    expect(events.map((e) => [e.event_type, e.payload.sequence])).toEqual([['Refund Needs Review', 1], ['Refund Succeeded', 2]]);
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violations).toEqual([]);
    await w.stop();
  });
});

describe('a refund that fails after it succeeded', () => {
  it('the operation stays succeeded; one fact event, one open finding (the alarm gauge), the net amount counts it as not refunded', async () => {
    const input = await chargedOrder({ amount: 4000, paymentMethod: 'pm_card_refundFail' });
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 1500 }));
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    const w = watcher({ chargeRefundUpdated: true });
    const [created] = w.next();
    expect(await deliver(created!)).toMatchObject({ applied: { outcome: 'stale' } });
    const refund = refundAt(id);

    // Before Stripe's failure is known the ledger and Stripe agree.
    const truth = () => ({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect((await checkInvariants(truth())).violations).toEqual([]);

    stripe.fake.settleRefund(refund.id, 'failed');
    const later = w.next();
    expect(later.map((e) => e.type)).toEqual(['refund.updated', 'charge.refund.updated', 'refund.failed']);
    // The checker sees the failure the ledger has not learnt yet: the invariant can fail.
    expect((await checkInvariants(truth())).violations.map((v) => v.kind).sort()).toEqual(['net_amount', 'succeeded_without_refund']);

    const [first, ...rest] = [later.find((e) => e.type === 'refund.failed')!, ...later.filter((e) => e.type !== 'refund.failed')];
    const applied = await deliver(first!);
    expect(applied).toMatchObject({ applied: { outcome: 'failed_after_success', operationId: id, newFinding: true } });
    // The same failure told by the other two events: recorded once.
    for (const e of rest) expect(await deliver(e)).toMatchObject({ applied: { outcome: 'stale', newFinding: false } });
    expect(await deliver(first!)).toMatchObject({ duplicate: true });

    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', externalId: refund.id });
    const events = await outbox(id);
    expect(events.map((e) => e.event_type)).toEqual(['Refund Succeeded', 'Refund Failed After Success']);
    const fact = events[1]!.payload;
    expect(refundFactDetailSchema.safeParse(fact).success).toBe(true);
    expect(fact).toMatchObject({ kind: 'refund_failed_after_success', operationId: id, orderId: input.orderId, amount: 1500, externalId: refund.id, failureReason: 'expired_or_canceled_card', stripeEventId: first!.id });
    expect(fact.sequence).toBeUndefined(); // a fact: never ranked against the operation's states

    const [finding] = await findings(refund.id);
    expect(finding).toMatchObject({ kind: 'contradiction', operation_id: id, status: 'failed', resolved_at: null });
    expect((await inboxGauges(db.pool)).openContradictions).toBe(1); // the StripeEventContradiction alarm's metric
    const audit = await db.pool.query("SELECT detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'stripe_event'", [id]);
    expect(audit.rows.map((r) => r.detail.aftermath)).toEqual(['refund_failed_after_success']);

    // Accounting: only refunds Stripe holds as succeeded count — for Stripe and for the ledger.
    const net = netChargedByOrder(stripe.fake.paymentIntents({ orderId: input.orderId }), stripe.fake.refunds({ orderId: input.orderId })).get(input.orderId)!;
    expect(net).toMatchObject({ charged: 4000, refunded: 0, net: 4000 });
    expect((await checkInvariants(truth())).violations).toEqual([]);

    // The operator sees it so: not refunded, and refundable again (the operation's mark, migrations/009).
    const listed = await runOps(['refunds', 'list', input.orderId, '--json'], {
      defaultActor: 'tester',
      context: () => ({ db: db.pool, stripe: () => Promise.reject(new Error('no Stripe look-ups')), transport: { kind: 'test' } }),
    });
    expect(listed).toMatchObject({
      ok: true,
      result: { refunded: 0, reversed: 1500, left: 4000, refunds: [{ id, status: 'succeeded', failedAfterSuccess: { failureReason: 'expired_or_canceled_card' } }] },
    });
    expect(render(listed, false).stdout.join('\n')).toMatch(/succeeded, then failed at Stripe \(expired_or_canceled_card\)/);
    await w.stop();
  });

  it('an endpoint on an API version before 2024-10-28.acacia gets only charge.refund.updated for a card refund: the failure after success still reaches the operation through it alone', async () => {
    const input = await chargedOrder({ amount: 2000, paymentMethod: 'pm_card_refundFail' });
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 800 }));
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    const w = watcher({ apiVersion: '2024-09-30.acacia' });
    expect(w.next()).toEqual([]); // no refund.created for this endpoint's version (charge.refunded only)
    const charged = w.dispatcher.events().filter((e) => e.type === 'charge.refunded');
    expect(charged.map((e) => e.api_version)).toEqual(['2024-09-30.acacia']);
    stripe.fake.settleRefund(refundAt(id).id, 'failed');
    const later = w.next();
    expect(later.map((e) => e.type)).toEqual(['charge.refund.updated']);
    expect(later[0]!.data).toMatchObject({ object: { object: 'refund', id: refundAt(id).id, status: 'failed' }, previous_attributes: { status: 'succeeded' } });
    expect(await deliver(later[0]!)).toMatchObject({ applied: { outcome: 'failed_after_success', operationId: id, newFinding: true } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded' });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Succeeded', 'Refund Failed After Success']);
    expect(await findings(refundAt(id).id)).toHaveLength(1);
    await w.stop();
    expect(() => new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET, apiVersion: 'latest' })).toThrow(/apiVersion must be a Stripe version/);
  });

  it('through the sweep (applyDue) the finding counts as a contradiction: the StripeEventContradictions metric', async () => {
    const input = await chargedOrder({ amount: 1000, paymentMethod: 'pm_card_refundFail' });
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 1000 }));
    await engine().executeCharge(id);
    const w = watcher();
    w.next();
    stripe.fake.settleRefund(refundAt(id).id, 'failed');
    const failed = w.next().find((e) => e.type === 'refund.failed')!;
    // Recorded only (as the webhook does with inline apply off); the sweep applies it.
    const recorded = await receiveWebhook(delivery(failed), settings, { db: db.pool, applier: null, publisher: null });
    expect(recorded).toMatchObject({ kind: 'recorded' });
    await db.pool.query('UPDATE stripe_events SET apply_lease_token = NULL, apply_lease_until = NULL, next_attempt_at = now() WHERE event_id = $1', [failed.id]);
    const summary = await applier().applyDue();
    expect(summary).toMatchObject({ contradictions: 1, unrecordedCharges: 0 });
    expect(summary.byOutcome.failed_after_success).toBe(1);
    expect(await inboxRow(db.pool, failed.id)).toMatchObject({ outcome: 'failed_after_success', operation_id: id });
    await w.stop();
  });
});

describe('refunds that are not ours, and refunds that do not match', () => {
  it('a Dashboard refund seen via refund.created / refund.updated: no operation made, counted once (by charge.refunded)', async () => {
    const input = await chargedOrder({ amount: 2500, paymentMethod: 'pm_card_pendingRefund' });
    const charge = (await db.pool.query("SELECT id, external_id FROM payment_operations WHERE order_id = $1 AND kind = 'charge'", [input.orderId])).rows[0];
    const sdk = createStripeClient({ apiKey: 'sk_test_dashboard', apiBase: stripe.fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 });
    const made = await sdk.refunds.create({ payment_intent: charge.external_id, amount: 700 });
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    dispatcher.poll();
    stripe.fake.settleRefund(made.id, 'succeeded');
    dispatcher.poll();
    const events = dispatcher.events().filter((e) => e.type === 'refund.created' || e.type === 'refund.updated' || e.type === 'charge.refunded');
    expect(events.map((e) => e.type).sort()).toEqual(['charge.refunded', 'refund.created', 'refund.updated']);
    const outcomes = [];
    for (const e of events) {
      const reception = await deliver(e);
      outcomes.push([e.type, reception.kind === 'recorded' ? reception.applied?.outcome : reception.kind]);
    }
    expect([...outcomes].sort()).toEqual([['charge.refunded', 'aftermath'], ['refund.created', 'foreign'], ['refund.updated', 'foreign']]);
    expect(await count(db.pool, "payment_operations WHERE order_id = $1 AND kind = 'refund'", [input.orderId])).toBe(0);
    const refunded = (await outbox(charge.id)).filter((e) => e.event_type === 'Charge Refunded');
    expect(refunded.map((e) => e.payload.amount)).toEqual([700]);
    await dispatcher.stop();
  });

  it("the fake's charge.refunded tells amount_refunded as Stripe keeps it: a Refund that failed gave its amount back", async () => {
    const input = await chargedOrder({ amount: 2500, paymentMethod: 'pm_card_pendingRefund' });
    const pi = (await db.pool.query("SELECT external_id FROM payment_operations WHERE order_id = $1 AND kind = 'charge'", [input.orderId])).rows[0].external_id;
    const sdk = createStripeClient({ apiKey: 'sk_test_dashboard', apiBase: stripe.fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 });
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    const first = await sdk.refunds.create({ payment_intent: pi, amount: 700 });
    dispatcher.poll();
    stripe.fake.settleRefund(first.id, 'failed');
    dispatcher.poll();
    await sdk.refunds.create({ payment_intent: pi, amount: 300 });
    dispatcher.poll();
    const told = dispatcher.events().filter((e) => e.type === 'charge.refunded').map((e) => (e.data.object as { amount_refunded: number }).amount_refunded);
    expect(told).toEqual([700, 300]); // it told 1000 while the failed 700 still counted
    await dispatcher.stop();
  });

  it('a Refund naming our operation with another amount or PaymentIntent → contradiction: finding, audit line, no state change', async () => {
    const { id } = await pendingRefund();
    const refund = refundAt(id);
    stripe.fake.settleRefund(refund.id, 'succeeded');
    const object = { ...structuredClone(stripe.fake.refunds({ operationId: id })[0]!) } as Record<string, unknown>;
    const wrongAmount = makeStripeEvent('refund.updated', { ...object, amount: (object.amount as number) + 1 });
    const applied = await deliver(wrongAmount);
    expect(applied).toMatchObject({ applied: { outcome: 'contradiction', newFinding: true } });
    expect(applied.kind === 'recorded' && applied.applied?.reason).toMatch(/amount 501 ≠ 500/);
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown' });
    expect(await outbox(id)).toEqual([]);
    expect(await findings(refund.id)).toHaveLength(1);

    const otherPi = makeStripeEvent('refund.updated', { ...object, id: 're_other_refund_1', payment_intent: 'pi_someone_else' });
    const second = await deliver(otherPi);
    expect(second.kind === 'recorded' && second.applied?.reason).toMatch(/payment_intent pi_someone_else ≠ pi_/);
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown' });

    // The genuine snapshot still settles it.
    expect(await deliver(makeStripeEvent('refund.updated', object))).toMatchObject({ applied: { outcome: 'settled' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded' });
  });

  it('a Refund naming an operation the ledger does not have → applied as unknown_operation, nothing written', async () => {
    const event = makeStripeEvent('refund.updated', { id: 're_ghost', object: 'refund', amount: 100, currency: 'eur', status: 'succeeded', payment_intent: 'pi_ghost', metadata: { operation_id: randomUUID() } });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unknown_operation' } });
    expect(await findings('re_ghost')).toHaveLength(0);
  });
});

/** The pool, counting every statement sent (its own and those of the connections it lends for a transaction). */
function countingPool(pool: pg.Pool): TransactionalDb & { readonly statements: number; reset(): void } {
  let statements = 0;
  return {
    get statements() {
      return statements;
    },
    reset() {
      statements = 0;
    },
    query: ((...args: Parameters<pg.Pool['query']>) => {
      statements++;
      return (pool.query as (...a: unknown[]) => unknown)(...args);
    }) as TransactionalDb['query'],
    async connect() {
      const client = await pool.connect();
      const query = client.query.bind(client) as (...a: unknown[]) => unknown;
      return new Proxy(client, {
        get(target, property) {
          if (property === 'query') return (...a: unknown[]) => (statements++, query(...a));
          const value = Reflect.get(target, property);
          return typeof value === 'function' ? value.bind(target) : value;
        },
      });
    },
  };
}

describe('what settling a pending refund costs, by event and by polling (printed; counts only)', () => {
  it('by event: one signed delivery and one retrieve; by polling: one retrieve per look on the backoff', async () => {
    const counted = countingPool(db.pool);
    // By event.
    const byEvent = await pendingRefund();
    const w = watcher();
    w.next();
    stripe.fake.settleRefund(refundAt(byEvent.id).id, 'succeeded');
    const [updated] = w.next();
    const stripeBefore = stripe.fake.requests().length;
    counted.reset();
    const applierCounted = new StripeEventApplier({ db: counted, gateway: stripe.gateway, actor: 'stripe-events', random: () => 0.5 });
    expect(await receiveWebhook(delivery(updated!), settings, { db: counted, applier: applierCounted, publisher: null })).toMatchObject({ applied: { outcome: 'settled' } });
    const eventStatements = counted.statements;
    const eventStripeCalls = stripe.fake.requests().length - stripeBefore;
    await w.stop();

    // By polling: the engine's retrieve once the refund is due again.
    const byPoll = await pendingRefund();
    stripe.fake.settleRefund(refundAt(byPoll.id).id, 'succeeded');
    await db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [byPoll.id]);
    const pollBefore = stripe.fake.requests().length;
    counted.reset();
    const polling = new ChargeEngine({ db: counted, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
    expect(await polling.executeCharge(byPoll.id)).toMatchObject({ status: 'succeeded', step: 'retrieve' });
    const pollStatements = counted.statements;
    const pollStripeCalls = stripe.fake.requests().length - pollBefore;

    console.log(
      `[refund events] settle a pending refund — by event: ${eventStatements} SQL statements (inbox insert + apply, BEGIN/COMMIT included), ` +
        `${eventStripeCalls} Stripe call (the retrieve that confirms it), as soon as Stripe delivers; by polling: ${pollStatements} SQL statements, ${pollStripeCalls} Stripe call(s) per look, ` +
        `and learnt only at the next look on the engine's backoff (30 s doubling to 1 h)`,
    );
    // One retrieve: a snapshot is a hint, our own key's answer settles (docs/decisions.md 2026-12-02).
    expect(eventStripeCalls).toBe(1);
    expect(pollStripeCalls).toBe(1);
    // The budget by event: the operation is read WITH its charge's PaymentIntent (findRefundEventOperation),
    // not read and then its charge read again (8 statements before).
    expect(eventStatements).toBe(7);
  });
});
