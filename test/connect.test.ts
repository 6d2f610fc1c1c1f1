// Charges on connected accounts (Stripe Connect; docs/model.md#connected-accounts), on real PostgreSQL
// and the real stripe SDK over HTTP against the fake Stripe, which keeps objects, idempotency keys,
// List and Search per Stripe-Account (docs/fake-stripe.md#connect-stripe-account). Every Stripe
// request of an operation on a connected account is made AS that account, so the operation's key is
// scoped to it at Stripe and its evidence is read where its PaymentIntent is.
import { beforeEach, describe, expect, it } from 'vitest';
import { chargeOutcomeDetailSchema } from '../lambdas/events/contract.ts';
import { StripePaymentIntentLookup } from '../lambdas/ops/stripe-lookup.ts';
import { idempotencyKey, type EnginePolicy } from '../lambdas/payments/decisions.ts';
import { gatherStripeEvidence, loadOperationHistory } from '../lambdas/payments/review.ts';
import { createStripeClient } from '../lambdas/payments/stripe-gateway.ts';
import type { EngineOptions } from '../lambdas/payments/engine.ts';
import { OrderConflictError } from '../lambdas/payments/errors.ts';
import { FailureKind } from '../lambdas/payments/gateway.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { operationRow, shiftAuditTrail, type TestDatabase } from './support/db.ts';
import { driveOperation, FAST_LIST_POLICY, stepsOf, testEngine } from './support/engine.ts';
import { chargeOrderOfItsOwnCustomer, refundOf } from './support/orders.ts';
import type { StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';
import { runReconcile } from '../lambdas/reconcile/sweep.ts';

const A = 'acct_1ConnectAlpha';
const B = 'acct_1ConnectBravo';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('connect', (w) => ({ db, stripe } = w));
beforeEach(() => {
  stripe.fake.addConnectedAccount(A);
  stripe.fake.addConnectedAccount(B);
});

const engine = (policy: Partial<EnginePolicy> = {}, options: Partial<EngineOptions> = {}) =>
  testEngine({ db, stripe }, { policy: { ...FAST_LIST_POLICY, ...policy }, ...options });
const order = (overrides: Partial<ChargeInput> = {}) => chargeOrderOfItsOwnCustomer(overrides);
const row = (id: string) => operationRow(db.pool, id);
const lookup = () => new StripePaymentIntentLookup(createStripeClient({ apiKey: 'sk_test_ops', apiBase: stripe.fake.url, maxNetworkRetries: 0 }));
const requestsOf = (operationId: string) => stripe.fake.requests().filter((r) => r.operationId === operationId);

describe('a direct charge on a connected account', () => {
  it('is created on the account, under our key, and is retrievable only as that account', async () => {
    const input = order({ account: A, applicationFeeAmount: 150 });
    const id = await engine().requestCharge(input);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'succeeded', step: 'create' });

    expect(stripe.fake.paymentIntents({ account: null, operationId: id })).toEqual([]);
    expect(stripe.fake.paymentIntents({ account: B, operationId: id })).toEqual([]);
    const [pi, ...others] = stripe.fake.paymentIntents({ account: A, operationId: id });
    expect(others).toEqual([]);
    expect(pi).toMatchObject({ status: 'succeeded', stripeAccount: A, idempotencyKey: idempotencyKey(id, 0), application_fee_amount: 150 });
    expect(await row(id)).toMatchObject({ status: 'succeeded', external_id: pi!.id, stripe_account: A, application_fee_amount: '150', transfer_destination: null });
    expect(requestsOf(id).map((r) => [r.endpoint, r.account])).toEqual([['create', A]]);
    // The outcome event names the account (an additive field of the v1 detail).
    const { rows: outbox } = await db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1', [id]);
    expect(outbox.map((e) => [e.event_type, e.payload.account])).toEqual([['Charge Succeeded', A]]);
    expect(chargeOutcomeDetailSchema.parse(outbox[0].payload)).toMatchObject({ account: A });

    // Retrievable as A only: the platform and B are answered 404, as Stripe answers another account's object.
    expect(await stripe.gateway.retrievePaymentIntent(pi!.id, { account: A })).toMatchObject({ ok: true, value: { id: pi!.id, status: 'succeeded' } });
    expect(await stripe.gateway.retrievePaymentIntent(pi!.id)).toMatchObject({ ok: false, failure: { kind: FailureKind.notFound, httpStatus: 404 } });
    expect(await stripe.gateway.retrievePaymentIntent(pi!.id, { account: B })).toMatchObject({ ok: false, failure: { kind: FailureKind.notFound } });
  });

  it('an ambiguous create (500 after commit) is settled by the reconciler\'s List on the account', async () => {
    const input = order({ account: A });
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    const executions = await driveOperation(db.pool, engine(), id);
    expect(stepsOf(executions)).toEqual(['create', 'list']);
    const pis = stripe.fake.paymentIntents({ account: A, operationId: id });
    expect(pis).toHaveLength(1);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 0, external_id: pis[0]!.id });
    expect(stripe.fake.paymentIntents({ account: null, operationId: id })).toEqual([]);
    // Every request of the operation was made as A; the List too (on the platform it would prove absence).
    const lists = stripe.fake.requests().filter((r) => r.endpoint === 'list');
    expect(lists.length).toBeGreaterThan(0);
    expect(lists.every((r) => r.account === A)).toBe(true);
    expect(requestsOf(id).every((r) => r.account === A)).toBe(true);
  });

  it('a lost answer past the key window is settled by Search on the account, without a create', async () => {
    const input = order({ account: A });
    const id = await engine({ ambiguousResolution: 'review' }).requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'truncated_response_after_commit');
    expect((await engine({ ambiguousResolution: 'review' }).executeCharge(id)).status).toBe('unknown');
    expect(stripe.fake.pruneKeys()).toBeGreaterThan(0);
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);
    const settled = await engine({ ambiguousResolution: 'review' }).executeCharge(id);
    expect(settled).toMatchObject({ status: 'succeeded', step: 'search' });
    const searches = stripe.fake.requests().filter((r) => r.endpoint === 'search');
    expect(searches.length).toBeGreaterThan(0);
    expect(searches.every((r) => r.account === A)).toBe(true);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'create')).toHaveLength(1);
    expect((await row(id)).external_id).toBe(stripe.fake.paymentIntents({ account: A, operationId: id })[0]!.id);
  });

  it('the same key on the platform is another request: our key is scoped to the account at Stripe', async () => {
    const id = await engine().requestCharge(order({ account: A }));
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    const key = idempotencyKey(id, 0);
    const onA = stripe.fake.paymentIntents({ account: A, operationId: id })[0]!;
    // The same key and parameters as A's create, sent on the platform: a new PaymentIntent, not A's replayed.
    const platform = await stripe.gateway.createPaymentIntent({
      idempotencyKey: key,
      amount: onA.amount,
      currency: onA.currency,
      customerId: String(onA.customer),
      paymentMethod: 'pm_card_visa',
      metadata: { ...onA.metadata },
    });
    expect(platform).toMatchObject({ ok: true });
    expect(platform.ok && platform.value.id).not.toBe(onA.id);
  });

  it('a refund of it runs on the same account (the refund operation inherits it)', async () => {
    const input = order({ account: A });
    const chargeId = await engine().requestCharge(input);
    expect((await engine().executeCharge(chargeId)).status).toBe('succeeded');
    const result = await engine().processRefund(refundOf(input.orderId, { refundId: 'rf-connect', amount: 500 }));
    expect(result.execution?.status).toBe('succeeded');
    expect(await row(result.operationId!)).toMatchObject({ kind: 'refund', stripe_account: A, application_fee_amount: null, transfer_destination: null });
    expect(requestsOf(result.operationId!).map((r) => [r.endpoint, r.account])).toEqual([['refund_create', A]]);
    const { rows: outbox } = await db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1', [result.operationId]);
    expect(outbox.map((e) => [e.event_type, e.payload.account])).toEqual([['Refund Succeeded', A]]);
    const refund = stripe.fake.refunds({ operationId: result.operationId! });
    expect(refund).toHaveLength(1);
    expect(await stripe.gateway.retrieveRefund(refund[0]!.id, { account: A })).toMatchObject({ ok: true, value: { status: 'succeeded' } });
    expect(await stripe.gateway.retrieveRefund(refund[0]!.id)).toMatchObject({ ok: false, failure: { kind: FailureKind.notFound } });
  });
});

describe("the operator's review of an operation on a connected account", () => {
  it('reads the evidence as the account: the PaymentIntent is found by Search and retrieve, never "absent" for looking on the platform', async () => {
    const input = order({ account: A });
    const id = await engine({ ambiguousResolution: 'review' }).requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'truncated_response_after_commit');
    expect((await engine({ ambiguousResolution: 'review' }).executeCharge(id)).status).toBe('unknown');
    const history = (await loadOperationHistory(db.pool, { operationId: id }))!;
    const before = stripe.fake.requests().length;
    const evidence = await gatherStripeEvidence(lookup(), history.operation, history.events);
    const pi = stripe.fake.paymentIntents({ account: A, operationId: id })[0]!;
    expect(evidence).toMatchObject({ complete: true, missing: [] });
    expect(evidence.paymentIntents.map((p) => p.id)).toEqual([pi.id]);
    const asked = stripe.fake.requests().slice(before);
    expect(asked.length).toBeGreaterThan(0);
    expect(asked.every((r) => r.account === A)).toBe(true);
  });
});

describe('an account the platform does not have', () => {
  it('is refused by Stripe before anything executes (403 account_invalid): the operation stays open, nothing is charged anywhere', async () => {
    const id = await engine().requestCharge(order({ account: 'acct_1NotThePlatforms' }));
    const execution = await engine().executeCharge(id);
    expect(execution.status).toBe('pending');
    expect(await row(id)).toMatchObject({ status: 'pending', last_error_class: 'StripePermissionError', external_id: null, review_reason: null });
    expect(stripe.fake.paymentIntents({ operationId: id })).toEqual([]);
    // Refused before the body is read: the request is known by our key.
    expect(stripe.fake.requests().filter((r) => r.idempotencyKey === idempotencyKey(id, 0)).map((r) => r.status)).toEqual([403]);
  });
});

describe('a destination charge', () => {
  it('is made on the platform with transfer_data[destination] and the fee; its refund on the platform', async () => {
    const input = order({ transferDestination: B, applicationFeeAmount: 200 });
    const id = await engine().requestCharge(input);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    const [pi] = stripe.fake.paymentIntents({ account: null, operationId: id });
    expect(pi).toMatchObject({ transfer_data: { destination: B }, application_fee_amount: 200 });
    expect(stripe.fake.paymentIntents({ account: B, operationId: id })).toEqual([]);
    expect(requestsOf(id).map((r) => r.account ?? null)).toEqual([null]);
    const refund = await engine().processRefund(refundOf(input.orderId, { refundId: 'rf-destination', amount: 100 }));
    expect(refund.execution?.status).toBe('succeeded');
    expect(await row(refund.operationId!)).toMatchObject({ stripe_account: null });
    const { rows: outbox } = await db.pool.query('SELECT e.payload FROM outcome_events e WHERE operation_id IN ($1, $2)', [id, refund.operationId]);
    expect(outbox.length).toBe(2);
    expect(outbox.every((e) => !('account' in e.payload))).toBe(true); // a platform operation's detail is as before
  });
});

describe('the account, fee and destination are parameters of the order', () => {
  it('a repeat naming another account, fee or destination is an order conflict, never a second operation', async () => {
    const input = order({ account: A, applicationFeeAmount: 100 });
    const id = await engine().requestCharge(input);
    for (const [other, field] of [
      [{ ...input, account: B }, 'account'],
      [{ ...input, account: undefined, applicationFeeAmount: undefined }, 'account'],
      [{ ...input, applicationFeeAmount: 101 }, 'applicationFeeAmount'],
    ] as const) {
      const error = await engine().requestCharge(other).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OrderConflictError);
      expect((error as OrderConflictError).message).toContain(field);
    }
    expect(await engine().requestCharge({ ...input })).toBe(id);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM payment_operations WHERE order_id = $1', [input.orderId]);
    expect(rows[0].n).toBe(1);
    // A platform order repeated as a destination charge: a conflict too.
    const platform = order();
    await engine().requestCharge(platform);
    await expect(engine().requestCharge({ ...platform, transferDestination: B })).rejects.toBeInstanceOf(OrderConflictError);
  });

  it('the guard refuses changing them on an open operation; a refund naming another account is refused', async () => {
    const input = order({ account: A, applicationFeeAmount: 100 });
    const id = await engine().requestCharge(input);
    // Each change keeps the table's CHECKs (a fee needs an account; direct or destination, not both),
    // so what refuses it is the guard (which fires after the row is written: 027).
    for (const set of [
      "stripe_account = 'acct_1ConnectBravo'",
      'stripe_account = NULL, application_fee_amount = NULL',
      'application_fee_amount = 99',
      "stripe_account = NULL, transfer_destination = 'acct_1ConnectBravo'",
    ]) {
      await expect(db.pool.query(`UPDATE payment_operations SET ${set} WHERE id = $1`, [id])).rejects.toThrow(/the parameters of payment operation .* cannot change/);
    }
    // Both at once breaks the CHECK, which answers first: refused all the same.
    await expect(db.pool.query(`UPDATE payment_operations SET transfer_destination = 'acct_1ConnectBravo' WHERE id = $1`, [id])).rejects.toThrow(/direct_or_destination_charge/);
    expect(await row(id)).toMatchObject({ stripe_account: A, application_fee_amount: '100' });
    await expect(
      db.pool.query(
        `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method, stripe_account)
         VALUES ($1, 'refund', 'rf-x', $2, 10, 'eur', 'cus_x', 'pm_x', $3)`,
        [input.orderId, id, B],
      ),
    ).rejects.toThrow(/names account acct_1ConnectBravo, its charge is on acct_1ConnectAlpha/);
  });

  it('the database refuses a fee without a connected account, above the amount, or a charge both direct and destination', async () => {
    await expect(engine().requestCharge(order({ applicationFeeAmount: 10 }))).rejects.toThrow(/application_fee_from_a_connected_account/);
    await expect(engine().requestCharge(order({ account: A, applicationFeeAmount: 5000 }))).rejects.toThrow(/application_fee_from_a_connected_account/);
    await expect(engine().requestCharge(order({ account: A, transferDestination: B }))).rejects.toThrow(/direct_or_destination_charge/);
  });
});

describe('the reconciler\'s request budget across accounts', () => {
  it('one cap spans the platform and every connected account, and the run counts what each account was sent', async () => {
    // Three operations left open by a 500 before Stripe committed: one on A, one on B, one on the platform.
    const ids: string[] = [];
    for (const account of [A, B, undefined]) {
      const id = await engine().requestCharge(order(account ? { account } : {}));
      stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
      expect((await engine().executeCharge(id)).status).toBe('unknown');
      ids.push(id);
    }
    // Past the List's settle delay since the send, and due: each one is asked of Stripe in this run.
    for (const id of ids) await shiftAuditTrail(db.pool, id, '1 minute');
    await db.pool.query(`UPDATE payment_operations SET next_attempt_at = now() WHERE id = ANY($1::uuid[])`, [ids]);
    // This file's other open operations (an account Stripe refuses, left open on purpose) wait for later.
    await db.pool.query(`UPDATE payment_operations SET next_attempt_at = now() + interval '1 day' WHERE status IN ('pending', 'unknown') AND NOT id = ANY($1::uuid[])`, [ids]);
    const before = stripe.fake.requests().length;
    const run = await runReconcile(
      {
        db: db.pool,
        gateway: stripe.gateway,
        publisher: null,
        policy: FAST_LIST_POLICY,
        settings: { maxRequestsPerSecond: 1_000, maxSearchesPerSecond: 100, concurrency: 4, pageSize: 50, minTimeToCallMs: 0, safetyMarginMs: 0, maxRunMs: 0, rejectedWindowSeconds: 300 },
      },
      { remainingMs: () => 60_000 },
    );
    // What the limiter granted, per account, is what the fake Stripe was sent, per Stripe-Account.
    const sent: Record<string, number> = {};
    for (const r of stripe.fake.requests().slice(before)) sent[r.account ?? 'platform'] = (sent[r.account ?? 'platform'] ?? 0) + 1;
    expect(run.stripeRequestsByAccount).toEqual(sent);
    expect(Object.keys(run.stripeRequestsByAccount).sort()).toEqual([A, B, 'platform'].sort());
    expect(Object.values(run.stripeRequestsByAccount).reduce((a, b) => a + b, 0)).toBe(run.stripeRequests);
  });
});
