// Authorize now, capture later (docs/model.md#manual-capture), on real PostgreSQL and the real stripe
// SDK over HTTP against the fake Stripe, which models requires_capture, partial capture, cancel and
// expiry as Stripe documents them (docs/fake-stripe.md#manual-capture). A charge that asks for
// `captureMethod: 'manual'` succeeds when the amount is held; a capture or cancel_authorization
// operation settles the authorization, through the same engine, judged by its PaymentIntent.
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { authorizationOutcomeDetailSchema } from '../lambdas/events/contract.ts';
import { countExpiringAuthorizations } from '../lambdas/payments/authorization-expiry.ts';
import { authorizationKey, idempotencyKey } from '../lambdas/payments/decisions.ts';
import { decidePaymentIntentEvent, type EventPaymentIntent } from '../lambdas/payments/event-decisions.ts';
import { runReconcile, type ReconcileSettings } from '../lambdas/reconcile/sweep.ts';
import type { ChargeEngine } from '../lambdas/payments/engine.ts';
import type { AuthorizationInput, ChargeInput, Operation } from '../lambdas/payments/types.ts';
import { createTestDatabase, operationRow, type TestDatabase } from './support/db.ts';
import { driveOperation, FAST_LIST_POLICY, stepsOf, testEngine } from './support/engine.ts';
import { chargeOrderOfItsOwnCustomer, refundOf } from './support/orders.ts';
import { startStripe, type StripeHarness } from './support/stripe.ts';

const DAY_MS = 24 * 3_600_000;
let db: TestDatabase;
let stripe: StripeHarness;
// The fake's clock, on which authorizations expire: moved by a test, never slept on.
let clock = Date.now();
beforeAll(async () => {
  db = await createTestDatabase('manual_capture');
  stripe = await startStripe({ now: () => clock });
});
afterAll(async () => {
  await stripe?.close();
  await db?.drop();
});
beforeEach(() => {
  stripe.fake.reset();
  clock = Date.now();
});

const A = 'acct_1CaptureAlpha';
const engine = (): ChargeEngine => testEngine({ db, stripe }, { policy: { ...FAST_LIST_POLICY, backoff: { ...FAST_LIST_POLICY.backoff!, unsettled: { baseMs: 20, capMs: 50 } } } });
const row = (id: string) => operationRow(db.pool, id);
const manual = (overrides: Partial<ChargeInput> = {}) => chargeOrderOfItsOwnCustomer({ amount: 5000, captureMethod: 'manual', ...overrides });
/** The requests that acted on a PaymentIntent (captures and cancels carry its id, not an operation's). */
const actionsOn = (pi: string) => stripe.fake.requests().filter((r) => r.paymentIntentId === pi && (r.endpoint === 'capture' || r.endpoint === 'cancel'));
const outboxOf = async (id: string) =>
  (await db.pool.query<{ event_type: string; payload: Record<string, unknown> }>('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at', [id])).rows;

async function authorized(input: ChargeInput = manual()): Promise<{ input: ChargeInput; chargeId: string; pi: string }> {
  const chargeId = await engine().requestCharge(input);
  expect(await engine().executeCharge(chargeId)).toMatchObject({ status: 'succeeded', step: 'create' });
  const charge = await row(chargeId);
  return { input, chargeId, pi: charge.external_id as string };
}

const capture = (orderId: string, amount?: number): AuthorizationInput => ({ kind: 'capture', orderId, ...(amount !== undefined ? { amount } : {}) });
const cancel = (orderId: string): AuthorizationInput => ({ kind: 'cancel_authorization', orderId });

describe('an authorization', () => {
  it('is created with capture_method=manual and succeeds when Stripe holds the amount (requires_capture), announced as Charge Authorized', async () => {
    const { chargeId, pi } = await authorized();
    const [held] = stripe.fake.paymentIntents({ operationId: chargeId });
    expect(held).toMatchObject({ id: pi, status: 'requires_capture', capture_method: 'manual', amount_capturable: 5000, amount_received: 0 });
    expect(await row(chargeId)).toMatchObject({ status: 'succeeded', capture_method: 'manual' });
    expect((await outboxOf(chargeId)).map((e) => [e.event_type, e.payload.status, e.payload.captureMethod])).toEqual([['Charge Authorized', 'succeeded', 'manual']]);
  });

  it('a charge captured at once is unchanged: Charge Succeeded, no captureMethod', async () => {
    const chargeId = await engine().requestCharge(chargeOrderOfItsOwnCustomer());
    await engine().executeCharge(chargeId);
    expect((await outboxOf(chargeId)).map((e) => [e.event_type, e.payload.captureMethod])).toEqual([['Charge Succeeded', undefined]]);
  });

  it('the same order asked again with capture at once is a conflict, not a second operation', async () => {
    const { input } = await authorized();
    const [result] = await engine().processRequests([{ ...input, captureMethod: undefined } as ChargeInput]);
    expect(result!.conflict?.fields).toEqual(['captureMethod']);
  });
});

describe('a capture', () => {
  it('captures the whole authorization under its own key: Charge Captured, the charge refundable up to it', async () => {
    const { input, pi } = await authorized();
    const result = await engine().processAuthorization(capture(input.orderId));
    expect(result).toMatchObject({ rejection: null, created: true, execution: { status: 'succeeded', step: 'create' } });
    const id = result.operationId!;
    expect(await row(id)).toMatchObject({ kind: 'capture', status: 'succeeded', amount: '5000', external_id: pi });
    expect(stripe.fake.paymentIntents({ operationId: (await row(id)).parent_operation_id as string })[0]).toMatchObject({ status: 'succeeded', amount_received: 5000 });
    expect(actionsOn(pi).map((r) => [r.endpoint, r.idempotencyKey])).toEqual([['capture', `${idempotencyKey(id, 0)}:s0`]]);
    const events = await outboxOf(id);
    expect(events.map((e) => [e.event_type, e.payload.kind, e.payload.amount])).toEqual([['Charge Captured', 'capture', 5000]]);
    expect((await engine().processRefund(refundOf(input.orderId, { amount: 5000 }))).rejection).toBeNull();
  });

  it('a partial capture takes what it asks (the rest released); a refund above it is refused, one within it made', async () => {
    const { input } = await authorized();
    const result = await engine().processAuthorization(capture(input.orderId, 3000));
    expect(result.execution?.status).toBe('succeeded');
    const [pi] = stripe.fake.paymentIntents({ orderId: input.orderId });
    expect(pi).toMatchObject({ status: 'succeeded', amount: 5000, amount_received: 3000, amount_capturable: 0 });
    const over = await engine().processRefund(refundOf(input.orderId, { refundId: 'r-over', amount: 3001 }));
    expect(over.rejection).toMatchObject({ code: 'exceeds_charge' });
    expect(over.rejection?.message).toContain('3000');
    expect((await engine().processRefund(refundOf(input.orderId, { refundId: 'r-in', amount: 3000 }))).execution?.status).toBe('succeeded');
  });

  it('asked again is the same operation, with no second call; with another amount it is a conflict', async () => {
    const { input, pi } = await authorized();
    const first = await engine().processAuthorization(capture(input.orderId, 2000));
    const again = await engine().processAuthorization(capture(input.orderId, 2000));
    expect(again).toMatchObject({ operationId: first.operationId, rejection: null, created: false, execution: { disposition: 'skipped' } });
    const other = await engine().processAuthorization(capture(input.orderId, 2500));
    expect(other.rejection).toMatchObject({ code: 'authorization_conflict' });
    expect(actionsOn(pi)).toHaveLength(1);
  });

  it('is refused before anything is sent: above the authorization, of a charge captured at once, of no charge', async () => {
    const { input } = await authorized();
    expect((await engine().processAuthorization(capture(input.orderId, 5001))).rejection).toMatchObject({ code: 'exceeds_authorization' });
    const automatic = await engine().requestCharge(chargeOrderOfItsOwnCustomer());
    const auto = (await row(automatic)).order_id as string;
    expect((await engine().processAuthorization(capture(auto))).rejection).toMatchObject({ code: 'not_manual' });
    expect((await engine().processAuthorization(cancel(auto))).rejection?.message).toContain('refund it instead');
    expect((await engine().processAuthorization(capture('order-none'))).rejection).toMatchObject({ code: 'no_charge' });
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'capture')).toEqual([]);
  });

  it('a refund of an authorization not captured is refused with the reason (cancel it)', async () => {
    const { input } = await authorized();
    const refused = await engine().processRefund(refundOf(input.orderId, { amount: 100 }));
    expect(refused.rejection).toMatchObject({ code: 'not_captured' });
    expect(refused.rejection?.message).toMatch(/cancel the authorization instead/);
  });

  it('an answer lost after Stripe captured (500 after commit): the PaymentIntent, retrieved, settles it — one capture at Stripe', async () => {
    const { input, chargeId, pi } = await authorized();
    const requested = await engine().processAuthorization(capture(input.orderId), { execute: false });
    const id = requested.operationId!;
    stripe.fake.injectFault({ endpoint: 'capture' }, 'error_500_after_commit');
    const executions = await driveOperation(db.pool, engine(), id);
    expect(stepsOf(executions)).toEqual(['create', 'retrieve']);
    expect(await row(id)).toMatchObject({ status: 'succeeded' });
    expect(stripe.fake.paymentIntents({ operationId: chargeId })[0]).toMatchObject({ status: 'succeeded', amount_received: 5000 });
    expect(actionsOn(pi).map((r) => r.fault)).toEqual(['error_500_after_commit']);
  });

  it('a 500 before Stripe captured (stored under its key): the PaymentIntent still holds the amount, so it is sent again under the next send\'s key and captured once', async () => {
    const { input, chargeId, pi } = await authorized();
    const id = (await engine().processAuthorization(capture(input.orderId), { execute: false })).operationId!;
    stripe.fake.injectFault({ endpoint: 'capture' }, 'error_500_before_commit');
    const executions = await driveOperation(db.pool, engine(), id);
    expect(stepsOf(executions)).toEqual(['create', 'retrieve', 'create']);
    expect(await row(id)).toMatchObject({ status: 'succeeded' });
    // The first key holds Stripe's 500 (a re-send under it would read the 500 back); the third send's key is new.
    expect(actionsOn(pi).map((r) => [r.idempotencyKey, r.fault])).toEqual([
      [authorizationKey({ id, keyGeneration: 0, attempts: 0 }), 'error_500_before_commit'],
      [authorizationKey({ id, keyGeneration: 0, attempts: 2 }), null],
    ]);
    expect(stripe.fake.paymentIntents({ operationId: chargeId })[0]).toMatchObject({ status: 'succeeded', amount_received: 5000 });
  });

  it('of an authorization Stripe let expire: refused by Stripe (payment_intent_unexpected_state), failed as authorization_expired', async () => {
    const { input } = await authorized();
    clock += 8 * DAY_MS;
    const result = await engine().processAuthorization(capture(input.orderId));
    expect(result.execution).toMatchObject({ status: 'failed', step: 'create' });
    expect(await row(result.operationId!)).toMatchObject({ status: 'failed', last_error_class: 'AuthorizationState' });
    expect((await outboxOf(result.operationId!)).map((e) => [e.event_type, e.payload.reason])).toEqual([['Charge Capture Failed', 'authorization_expired']]);
  });

  it('on a connected account, the capture is made as that account', async () => {
    stripe.fake.addConnectedAccount(A);
    const { input, pi } = await authorized(manual({ account: A }));
    const result = await engine().processAuthorization(capture(input.orderId));
    expect(result.execution?.status).toBe('succeeded');
    expect(await row(result.operationId!)).toMatchObject({ stripe_account: A });
    expect(actionsOn(pi).map((r) => [r.endpoint, r.account])).toEqual([['capture', A]]);
    expect(stripe.fake.paymentIntents({ account: A, orderId: input.orderId })[0]).toMatchObject({ status: 'succeeded', amount_received: 5000 });
  });
});

describe('a cancel of an authorization', () => {
  it('releases it: Authorization Canceled; then no capture, no second cancel of the other kind, no refund', async () => {
    const { input, chargeId } = await authorized();
    const result = await engine().processAuthorization(cancel(input.orderId));
    expect(result.execution?.status).toBe('succeeded');
    expect(stripe.fake.paymentIntents({ operationId: chargeId })[0]).toMatchObject({ status: 'canceled', amount_capturable: 0 });
    expect((await outboxOf(result.operationId!)).map((e) => e.event_type)).toEqual(['Authorization Canceled']);
    const after = await engine().processAuthorization(capture(input.orderId));
    expect(after.rejection).toMatchObject({ code: 'already_settled' });
    expect(after.rejection?.message).toContain('it is canceled');
    expect((await engine().processRefund(refundOf(input.orderId, { amount: 100 }))).rejection).toMatchObject({ code: 'not_captured' });
  });

  it('after a capture is refused; a cancel that finds the PaymentIntent captured (by another hand) fails as authorization_captured', async () => {
    const { input, pi } = await authorized();
    await engine().processAuthorization(capture(input.orderId, 1000));
    expect((await engine().processAuthorization(cancel(input.orderId))).rejection).toMatchObject({ code: 'already_settled' });

    // Captured in the Dashboard, then a cancel asked: Stripe refuses, the error carries the PaymentIntent.
    const other = await authorized();
    await stripe.gateway.capturePaymentIntent({ idempotencyKey: 'dashboard-capture', paymentIntentId: other.pi });
    const result = await engine().processAuthorization(cancel(other.input.orderId));
    expect(result.execution).toMatchObject({ status: 'failed' });
    expect((await row(result.operationId!)).last_error).toMatch(/captured/);
    expect(pi).not.toBe(other.pi);
  });
});

describe('the rules in SQL (migrations/019), whoever writes', () => {
  const insert = (sql: string, params: unknown[]) => db.pool.query(sql, params).then(() => 'inserted', (e: { code?: string; constraint?: string }) => `${e.code} ${e.constraint ?? ''}`.trim());
  const settlement = (kind: string, parent: string, orderId: string, amount: number) =>
    insert(
      `INSERT INTO payment_operations (order_id, kind, parent_operation_id, amount, currency, customer_id, payment_method)
       SELECT $1, $2, $3, $4, currency, customer_id, payment_method FROM payment_operations WHERE id = $3`,
      [orderId, kind, parent, amount],
    );

  it('one capture or cancel per authorization, at most the authorized amount, only of a manual charge', async () => {
    const { input, chargeId } = await authorized();
    expect(await settlement('capture', chargeId, input.orderId, 5001)).toBe('23514 capture_within_authorization');
    expect(await settlement('cancel_authorization', chargeId, input.orderId, 4000)).toBe('23514 capture_within_authorization');
    expect(await settlement('capture', chargeId, input.orderId, 4000)).toBe('inserted');
    expect(await settlement('cancel_authorization', chargeId, input.orderId, 5000)).toBe('23505 payment_operations_one_settlement_per_authorization');
    expect(await settlement('capture', chargeId, input.orderId, 1000)).toBe('23505 payment_operations_one_settlement_per_authorization');

    const automatic = await engine().requestCharge(chargeOrderOfItsOwnCustomer());
    expect(await settlement('capture', automatic, (await row(automatic)).order_id as string, 100)).toBe('23514 settles_an_authorization');
  });

  it('the capture method never changes', async () => {
    const { chargeId } = await authorized();
    const open = await engine().requestCharge(manual());
    for (const id of [chargeId, open]) {
      const outcome = await db.pool.query('UPDATE payment_operations SET capture_method = NULL WHERE id = $1', [id]).then(() => 'updated', (e: { code?: string }) => e.code);
      expect(outcome).toBe('23000');
    }
  });

  it('a refund of a manual charge is refused by the trigger until its capture succeeded, and bounded by it', async () => {
    const { input, chargeId } = await authorized();
    const refund = (refundId: string, amount: number) =>
      insert(
        `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method)
         SELECT $1, 'refund', $2, $3, $4, currency, customer_id, payment_method FROM payment_operations WHERE id = $3`,
        [input.orderId, refundId, chargeId, amount],
      );
    expect(await refund('r1', 100)).toBe('23514 refund_of_uncaptured_authorization');
    await engine().processAuthorization(capture(input.orderId, 1500));
    expect(await refund('r2', 1501)).toBe('23514 refunds_within_charge');
    expect(await refund('r3', 1500)).toBe('inserted');
  });
});

describe('the reconciler and authorizations Stripe lets expire', () => {
  const plenty = { remainingMs: () => 60_000 };
  const settings: ReconcileSettings = {
    maxRequestsPerSecond: 1000,
    maxSearchesPerSecond: 1000,
    concurrency: 4,
    pageSize: 50,
    minTimeToCallMs: 1_000,
    safetyMarginMs: 500,
    maxRunMs: 0,
    rejectedWindowSeconds: 300,
  };
  // Looked at as soon as Stripe's 7 days have passed on the fake's clock: no margin, and the
  // database's own clock (which dates first_attempted_at) need not move.
  const reconcile = () =>
    runReconcile({ db: db.pool, gateway: stripe.gateway, publisher: null, settings, authorizationExpiry: { validityMs: 0, lookMarginMs: 0 } }, plenty);

  it('an expired authorization is recorded, after a retrieve with our key, as its cancel (Authorization Expired); nothing can follow it', async () => {
    const { input, chargeId, pi } = await authorized();
    clock += 8 * DAY_MS;
    const summary = await reconcile();
    // (The file's earlier authorizations are looked at too: the fake forgot them between tests, so
    // their retrieves fail — counted, nothing recorded.)
    expect(summary.authorizations).toMatchObject({ expired: 1, capturedElsewhere: 0 });
    const { rows } = await db.pool.query(`SELECT * FROM payment_operations WHERE parent_operation_id = $1`, [chargeId]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ kind: 'cancel_authorization', cancellation_reason: 'expired', status: 'succeeded', external_id: pi, amount: '5000' });
    const events = await outboxOf(rows[0].id);
    expect(events.map((e) => [e.event_type, e.payload.cancellationReason, e.payload.chargeOperationId])).toEqual([['Authorization Expired', 'expired', chargeId]]);
    expect(authorizationOutcomeDetailSchema.parse(events[0]!.payload)).toMatchObject({ kind: 'cancel_authorization' });
    const trail = await db.pool.query(`SELECT action, step FROM payment_operation_events WHERE operation_id = $1 ORDER BY id`, [rows[0].id]);
    expect(trail.rows).toEqual([{ action: 'requested', step: null }, { action: 'outcome_recorded', step: 'expiry' }]);
    // The retrieve was made; nothing was sent to capture or cancel.
    expect(stripe.fake.requests().filter((r) => r.paymentIntentId === pi).map((r) => r.endpoint)).toEqual(['create', 'retrieve']);

    const late = await engine().processAuthorization(capture(input.orderId));
    expect(late.rejection?.message).toContain('the authorization expired at Stripe');
    expect((await engine().processRefund(refundOf(input.orderId, { amount: 100 }))).rejection).toMatchObject({ code: 'not_captured' });
    // A second run records nothing more for it.
    expect((await reconcile()).authorizations).toMatchObject({ expired: 0 });
    expect((await db.pool.query(`SELECT 1 FROM payment_operations WHERE parent_operation_id = $1`, [chargeId])).rowCount).toBe(1);
  });

  it('an authorization still held at Stripe is left alone and looked at again; one captured outside the pipeline becomes a capture in review', async () => {
    const held = await authorized();
    const elsewhere = await authorized();
    await stripe.gateway.capturePaymentIntent({ idempotencyKey: 'dashboard', paymentIntentId: elsewhere.pi, amount: 1200 });
    const summary = await reconcile();
    expect(summary.authorizations).toMatchObject({ expired: 0, capturedElsewhere: 1, stillHeld: 1 });
    expect(await db.pool.query('SELECT 1 FROM payment_operations WHERE parent_operation_id = $1', [held.chargeId]).then((r) => r.rowCount)).toBe(0);
    const { rows } = await db.pool.query(`SELECT * FROM payment_operations WHERE parent_operation_id = $1`, [elsewhere.chargeId]);
    expect(rows[0]).toMatchObject({ kind: 'capture', status: 'unknown', amount: '1200', external_id: elsewhere.pi });
    expect(rows[0].review_reason).toMatch(/captured \(1200\) outside the pipeline/);
    expect((await outboxOf(rows[0].id)).map((e) => e.event_type)).toEqual(['Charge Capture Needs Review']);
    expect((await reconcile()).authorizations).toMatchObject({ capturedElsewhere: 0, stillHeld: 1 });
  });

  it('the gauge counts authorizations within a day of expiry that nothing settles', async () => {
    const open = await authorized();
    const captured = await authorized();
    await engine().processAuthorization(capture(captured.input.orderId));
    // A validity of an hour: both were made just now, so both are within a day of it; the captured one is settled.
    expect(await countExpiringAuthorizations(db.pool, 3_600_000, DAY_MS)).toBeGreaterThanOrEqual(1);
    const before = await countExpiringAuthorizations(db.pool, 3_600_000, DAY_MS);
    await engine().processAuthorization(cancel(open.input.orderId));
    expect(await countExpiringAuthorizations(db.pool, 3_600_000, DAY_MS)).toBe(before - 1);
    // Seven days ahead is not within a day.
    expect(await countExpiringAuthorizations(db.pool, 7 * DAY_MS, DAY_MS)).toBe(0);
  });
});

describe('Stripe events of an authorization', () => {
  it('a canceled PaymentIntent of a manual charge is stale, not a contradiction; of a charge captured at once it still is one', () => {
    const op = { id: 'op', kind: 'charge', status: 'succeeded', externalId: 'pi_1', amount: 5000, currency: 'eur', customerId: 'cus_1', orderId: 'o', keyGeneration: 0, reviewReason: null } as unknown as Operation;
    const pi = { id: 'pi_1', status: 'canceled', amount: 5000, currency: 'eur', customer: 'cus_1', metadata: { operation_id: 'op', order_id: 'o', key_generation: '0' } } as EventPaymentIntent;
    expect(decidePaymentIntentEvent({ ...op, captureMethod: 'manual' }, pi)).toMatchObject({ kind: 'stale' });
    expect(decidePaymentIntentEvent(op, pi)).toMatchObject({ kind: 'contradiction' });
  });
});
