// What an event's snapshot may do, now that nothing that changes an operation rests on it: every
// settle (PaymentIntent and Refund, open or in review), the duplicate-charge remedy and a refund's
// failure after success are decided on the object as our own key retrieves it, and on the operation
// as the claim found it (not as it was read before the claim). Plus two deliveries of one event while
// the first is still unapplied, or still being applied: one effect. Real PostgreSQL, the real webhook
// path (receiveWebhook: signature, inbox insert, inline apply), the real SDK against the fake Stripe.
import { watchTimings } from '../../lambdas/payments/decisions.ts';
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { describe, expect, it } from 'vitest';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import type { TransactionalDb } from '../../lambdas/payments/inbox-store.ts';
import { claimById, findOperation, reissueAfterProof } from '../../lambdas/payments/operations-store.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { receiveWebhook, toHttpAnswer } from '../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent, paymentIntentJson, refundJson, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import type { TestDatabase } from '../support/db.ts';
import { chargedOrder as charged, testEngine } from '../support/engine.ts';
import { chargeOrder, refundOf } from '../support/orders.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { count, deliverWebhook, delivery, inboxRow, piEvent, testApplier, WEBHOOK_SETTINGS as settings } from './support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('event_confirm', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe });
const deliver = (event: StripeEventJson) => deliverWebhook({ db, stripe }, event);
const chargedOrder = async (overrides: Partial<ChargeInput> = {}) => charged(engine(), chargeOrder(overrides));
const outbox = (id: string) => db.pool.query('SELECT event_type FROM outcome_events WHERE operation_id = $1 ORDER BY created_at, event_id', [id]).then((r) => r.rows.map((e) => e.event_type as string));
const refundAt = (operationId: string) => stripe.fake.refunds({ operationId })[0]!;
const calls = (since: number) => stripe.fake.requests().slice(since).map((q) => q.endpoint);
const refundEvent = (type: string, operationId: string, status: string) => makeStripeEvent(type, { ...refundJson(refundAt(operationId)), status });

/** A refund operation whose Refund Stripe holds `pending` (pm_card_pendingRefund): open (unknown) with its re_…. */
async function pendingRefund() {
  const { input } = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund', amount: 2000 });
  const id = await engine().requestRefund(refundOf(input.orderId));
  expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown', step: 'create' });
  expect(refundAt(id).status).toBe('pending');
  return { input, id };
}

describe("a Refund's snapshot is a hint: the refund operation settles on the Refund Stripe holds", () => {
  it('a succeeded snapshot while Stripe still holds the Refund pending → one retrieve, stale: the operation stays open', async () => {
    const { id } = await pendingRefund();
    const before = stripe.fake.requests().length;
    expect(await deliver(refundEvent('refund.updated', id, 'succeeded'))).toMatchObject({ applied: { outcome: 'stale', operationId: id } });
    expect(calls(before)).toEqual(['refund_retrieve']);
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', leaseToken: null, reviewReason: null });
    expect(await outbox(id)).toEqual([]);
  });

  it('a failed or canceled snapshot (statuses a Refund never leaves) while Stripe holds it pending → unconfirmed: a finding, no Refund Failed', async () => {
    const { id } = await pendingRefund();
    for (const [type, status] of [['refund.failed', 'failed'], ['refund.updated', 'canceled']] as const) {
      const event = refundEvent(type, id, status);
      expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unconfirmed', operationId: id } });
      expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', leaseToken: null });
    }
    expect(await outbox(id)).toEqual([]);
    expect(await count(db.pool, `stripe_event_findings WHERE kind = 'unconfirmed' AND operation_id = $1`, [id])).toBe(1);
  });

  it('a refund in review is not settled by a succeeded snapshot Stripe does not confirm: noted, the review stays', async () => {
    const { input } = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund', amount: 2000 });
    const id = await engine().requestRefund(refundOf(input.orderId));
    await testEngine({ db, stripe }, { policy: { unsettledReviewAfterMs: 0 } }).executeCharge(id);
    const inReview = (await findOperation(db.pool, id))!;
    expect(inReview.reviewReason).toMatch(/still pending/);
    expect(await deliver(refundEvent('refund.updated', id, 'succeeded'))).toMatchObject({ applied: { outcome: 'in_review' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: inReview.reviewReason });
    expect(await outbox(id)).toEqual(['Refund Needs Review']);
    // Once Stripe holds it succeeded, the same kind of event settles it and clears the review.
    stripe.fake.settleRefund(refundAt(id).id, 'succeeded');
    expect(await deliver(refundEvent('refund.updated', id, 'succeeded'))).toMatchObject({ applied: { outcome: 'settled' } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', reviewReason: null });
  });

  it("a succeeded refund's failure that Stripe does not hold → unconfirmed: no fact, no mark, the amount is not refundable again", async () => {
    const { input } = await chargedOrder({ amount: 3000 });
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 1000 }));
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    const event = makeStripeEvent('refund.failed', { ...refundJson(refundAt(id)), status: 'failed', failure_reason: 'lost_or_stolen_card' });
    expect(await deliver(event)).toMatchObject({ applied: { outcome: 'unconfirmed' } });
    expect(await outbox(id)).toEqual(['Refund Succeeded']);
    const { rows } = await db.pool.query('SELECT status, failed_after_success_at FROM payment_operations WHERE id = $1', [id]);
    expect(rows[0]).toEqual({ status: 'succeeded', failed_after_success_at: null });
    // The real failure, which Stripe holds: the fact and the mark.
    stripe.fake.settleRefund(refundAt(id).id, 'failed');
    const real = makeStripeEvent('refund.failed', refundJson(refundAt(id)));
    expect(await deliver(real)).toMatchObject({ applied: { outcome: 'failed_after_success', newFinding: true } });
    expect(await outbox(id)).toEqual(['Refund Succeeded', 'Refund Failed After Success']);
  });
});

describe('the duplicate-charge remedy decided from an event retrieves the extra PaymentIntent first', () => {
  it("another order's real PaymentIntent presented as this order's second charge → unconfirmed: no remedy refunds it", async () => {
    const a = await chargedOrder({ amount: 1500 });
    const b = await chargedOrder({ amount: 1500, currency: a.input.currency, customerId: a.input.customerId });
    const opA = (await findOperation(db.pool, a.chargeId))!;
    const opB = (await findOperation(db.pool, b.chargeId))!;
    const piB = stripe.fake.paymentIntents({ operationId: opB.id })[0]!;
    const forged = makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(piB), metadata: { operation_id: opA.id, order_id: opA.orderId, key_generation: '0' } });
    const before = stripe.fake.requests().length;
    expect(await deliver(forged)).toMatchObject({ applied: { outcome: 'unconfirmed', operationId: opA.id } });
    expect(calls(before)).toEqual(['retrieve']);
    expect(await count(db.pool, `payment_operations WHERE kind = 'refund' AND order_id = ANY($1)`, [[opA.orderId, opB.orderId]])).toBe(0);
    expect(await findOperation(db.pool, opB.id)).toMatchObject({ status: 'succeeded', externalId: piB.id });
  });
});

/** A pool whose `inbox.claim_operation` statement runs `before` first, once: the interleaving of a claim race. */
function interleavedPool(pool: pg.Pool, before: () => Promise<void>): TransactionalDb & { readonly fired: boolean } {
  let fired = false;
  return {
    get fired() {
      return fired;
    },
    query: (async (...args: unknown[]) => {
      const config = args[0] as { name?: string } | string;
      if (!fired && typeof config === 'object' && config.name === 'inbox.claim_operation') {
        fired = true;
        await before();
      }
      return (pool.query as (...a: unknown[]) => unknown)(...args);
    }) as TransactionalDb['query'],
    connect: () => pool.connect(),
  };
}

describe('the decision is made again on the CLAIMED row', () => {
  it('the operation is re-issued between the applier\'s read and its claim → the older generation\'s succeeded PaymentIntent does not settle generation 1: review, never Charge Succeeded', async () => {
    stripe.fake.injectFault({}, 'processing');
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    expect(op).toMatchObject({ status: 'unknown', keyGeneration: 0 });
    stripe.fake.settle(op.externalId!, 'succeeded');
    const event = piEvent(stripe.fake.paymentIntents({ operationId: op.id })[0]!);

    // Between the applier's read of the operation and its claim: a re-issue (the same store
    // functions the engine uses — claim, then the fenced re-issue to key generation 1).
    const racing = interleavedPool(db.pool, async () => {
      await db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [op.id]);
      const token = randomUUID();
      expect((await claimById(db.pool, op.id, token, 60_000, 'reissuer'))?.claimed).toBeTruthy();
      const [reissued] = await reissueAfterProof(db.pool, [{ operationId: op.id, leaseToken: token, fromStatus: 'unknown', keyGeneration: 0, detail: { test: 'claim race' } }], 'reissuer', 0, watchTimings());
      expect(reissued!.applied).toBe(true);
    });
    const applier = new StripeEventApplier({ db: racing, gateway: stripe.gateway, actor: 'stripe-events', random: () => 0.5 });
    const r2 = await receiveWebhook(delivery(event), settings, { db: racing, applier, publisher: null });
    expect(racing.fired).toBe(true);
    expect(r2).toMatchObject({ applied: { outcome: 'review' } });
    const after = (await findOperation(db.pool, op.id))!;
    expect(after).toMatchObject({ status: 'pending', keyGeneration: 1, externalId: null, leaseToken: null });
    expect(after.reviewReason).toMatch(/key generation 0 ≠ 1/);
    expect(await outbox(op.id)).toEqual(['Charge Reissued', 'Charge Needs Review']);
    const written = await db.pool.query(`SELECT key_generation, to_status FROM payment_operation_events WHERE operation_id = $1 AND action = 'outcome_recorded' AND detail ? 'stripeEventId'`, [op.id]);
    expect(written.rows).toEqual([{ key_generation: 1, to_status: 'pending' }]);
  });
});

describe('two deliveries of one event before the first is applied: one effect', () => {
  /** A processing operation that Stripe has since settled, and its payment_intent.succeeded. */
  async function settledAtStripe() {
    stripe.fake.injectFault({}, 'processing');
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    stripe.fake.settle(op.externalId!, 'succeeded');
    return { op, event: piEvent(stripe.fake.paymentIntents({ operationId: op.id })[0]!) };
  }
  const effects = async (operationId: string, eventId: string) => ({
    outcomes: await count(db.pool, `payment_operation_events WHERE operation_id = $1 AND action = 'outcome_recorded' AND detail->>'stripeEventId' = $2`, [operationId, eventId]),
    events: await outbox(operationId),
  });

  it('the first copy recorded but not applied yet (inline apply off): the second is acknowledged as a duplicate, without applying; the sweep applies it once', async () => {
    const { op, event } = await settledAtStripe();
    const first = await receiveWebhook(delivery(event), settings, { db: db.pool, applier: null, publisher: null });
    expect(first).toMatchObject({ kind: 'recorded', duplicate: false, applied: null });
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ applied_at: null });
    const before = stripe.fake.requests().length;
    const second = await deliver(event);
    expect(toHttpAnswer(second).statusCode).toBe(200);
    expect(second).toMatchObject({ kind: 'recorded', duplicate: true, applied: null });
    expect(calls(before)).toEqual([]);
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'unknown' });

    const summary = await testApplier({ db, stripe }).applyDue();
    expect(summary).toMatchObject({ applied: 1, byOutcome: { settled: 1 } });
    expect(await effects(op.id, event.id)).toEqual({ outcomes: 1, events: ['Charge Succeeded'] });
    expect(calls(before)).toEqual(['retrieve']);
    expect(await testApplier({ db, stripe }).applyDue()).toMatchObject({ applied: 0 });
  });

  it('the first copy leased by an applier, mid-apply (its retrieve parked at Stripe): the second is acknowledged, a sweep does not take it, and the first apply is the one effect', async () => {
    const { op, event } = await settledAtStripe();
    const parked = stripe.fake.hold({ endpoint: 'retrieve', paymentIntentId: op.externalId! });
    const first = deliver(event);
    await parked.arrived;
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ applied_at: null });
    const second = await deliver(event);
    expect(toHttpAnswer(second).statusCode).toBe(200);
    expect(second).toMatchObject({ kind: 'recorded', duplicate: true, applied: null });
    // A sweep meanwhile: the row is leased by the first applier, the operation by its claim.
    expect(await testApplier({ db, stripe }).applyDue()).toMatchObject({ applied: 0, deferred: 0 });
    parked.release();
    expect(await first).toMatchObject({ kind: 'recorded', duplicate: false, applied: { outcome: 'settled' } });
    expect(await effects(op.id, event.id)).toEqual({ outcomes: 1, events: ['Charge Succeeded'] });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: op.externalId });
    expect(stripe.fake.requests().filter((q) => q.endpoint === 'retrieve').length).toBe(1);
  });
});

describe('the sweep counts refusals apart from contradictions (the StripeEventsRefused metric)', () => {
  it('a refused event recorded by the endpoint and applied by the sweep: refused 1, contradictions 0; again for the same object: no new finding', async () => {
    stripe.fake.injectFault({}, 'processing');
    const [r] = await engine().processRequests([chargeOrder()]);
    const pi = stripe.fake.paymentIntents({ operationId: r!.operationId })[0]!;
    const record = (e: StripeEventJson) => receiveWebhook(delivery(e), settings, { db: db.pool, applier: null, publisher: null });
    await record(makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { account: 'acct_1Elsewhere' }));
    expect(await testApplier({ db, stripe }).applyDue()).toMatchObject({ applied: 1, refused: 1, contradictions: 0, unrecordedCharges: 0, byOutcome: { foreign_account: 1 } });
    await record(makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { account: 'acct_1Elsewhere' }));
    expect(await testApplier({ db, stripe }).applyDue()).toMatchObject({ applied: 1, refused: 0, contradictions: 0, byOutcome: { foreign_account: 1 } });
    expect(await findOperation(db.pool, r!.operationId)).toMatchObject({ status: 'unknown' });
  });
});
