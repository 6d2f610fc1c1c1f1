// Refunds: the second operation kind on the same engine, on real PostgreSQL 18 and the real stripe
// SDK against the fake Stripe's Refunds API. Every row of the charge table, for refunds, then the
// refund rules (in the database as well as in code), then the round trips.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { chargeOutcomeDetailSchema, refundOutcomeDetailSchema, RefundDetailType } from '../lambdas/events/contract.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { checkReviewable } from '../lambdas/payments/review.ts';
import { runOps } from '../lambdas/ops/commands.ts';
import { render } from '../lambdas/ops/render.ts';
import { findOperation } from '../lambdas/payments/operations-store.ts';
import { StripeEventApplier } from '../lambdas/payments/event-applier.ts';
import { createStripeClient } from '../lambdas/payments/stripe-gateway.ts';
import { receiveWebhook } from '../lambdas/stripe-events/receive.ts';
import { checkInvariants } from '../local/invariants.ts';
import { netChargedByOrder } from '../local/stripe-truth.ts';
import { delivery, piEvent, SECRET } from './stripe-events/support.ts';
import { DEFAULT_POLICY, idempotencyKey } from '../lambdas/payments/decisions.ts';
import { ChargeEngine, type EngineOptions } from '../lambdas/payments/engine.ts';
import { OrderConflictError, RefundRejectedError } from '../lambdas/payments/errors.ts';
import { parseQueueMessage } from '../lambdas/payments/message.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { auditTrail, operationRow, shiftAuditTrail, type TestDatabase } from './support/db.ts';
import { chargedOrder as charged, FAST_LIST_POLICY, testEngine } from './support/engine.ts';
import { chargeOrder, refundOf } from './support/orders.ts';
import type { StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('refunds', (w) => ({ db, stripe } = w));

const engine = (options: Partial<EngineOptions> = {}) => testEngine({ db, stripe }, options);

/** An order charged (succeeded) through the engine. */
const chargedOrder = (overrides: Partial<ChargeInput> = {}) => charged(engine(), chargeOrder(overrides));

const row = (id: string) => operationRow(db.pool, id);
const events = (id: string) => auditTrail(db.pool, id);
async function outbox(id: string) {
  const { rows } = await db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at', [id]);
  return rows as { event_type: string; payload: Record<string, unknown> }[];
}
const makeDue = (id: string) => db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [id]);
/** Move the audit trail and the key window back, as if the last send was `interval` ago. */
const sentAgo = (id: string, interval: string) =>
  Promise.all([
    db.pool.query(`UPDATE payment_operations SET first_attempted_at = first_attempted_at - $2::interval, next_attempt_at = now() WHERE id = $1`, [id, interval]),
    shiftAuditTrail(db.pool, id, interval),
  ]);
const refundCreates = (id: string) => stripe.fake.requests().filter((r) => r.endpoint === 'refund_create' && r.operationId === id);
const refundsAtStripe = (id: string) => stripe.fake.refunds({ operationId: id });

describe('every row of the charge table, for refunds', () => {
  it('a refund: POST /v1/refunds with the PaymentIntent, amount, metadata and the key payment-op:{id}; Refund Succeeded in the outbox', async () => {
    const { input, chargeId } = await chargedOrder();
    const result = await engine().processRefund(refundOf(input.orderId, { refundId: 'rf-1', amount: 700 }));
    expect(result.execution).toMatchObject({ status: 'succeeded', disposition: 'attempted', step: 'create' });
    const id = result.operationId!;
    const [refund] = refundsAtStripe(id);
    const charge = await row(chargeId);
    expect(refund).toMatchObject({ amount: 700, payment_intent: charge.external_id, status: 'succeeded', reason: 'requested_by_customer', idempotencyKey: idempotencyKey(id, 0) });
    expect(refund!.metadata).toMatchObject({ operation_id: id, order_id: input.orderId, refund_id: 'rf-1' });
    expect(await row(id)).toMatchObject({ kind: 'refund', status: 'succeeded', external_id: refund!.id, parent_operation_id: chargeId, refund_id: 'rf-1' });
    const [event] = await outbox(id);
    expect(event).toMatchObject({ event_type: 'Refund Succeeded', payload: { operationId: id, orderId: input.orderId, amount: 700, externalId: refund!.id, sequence: 1 } });
  });

  it('answer lost → unknown, then the same key → one refund at Stripe, succeeded', async () => {
    const { input } = await chargedOrder();
    const id = await engine().requestRefund(refundOf(input.orderId));
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'truncated_response_after_commit');
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    expect(refundsAtStripe(id)).toHaveLength(1);
    await makeDue(id);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    expect(refundCreates(id).map((r) => r.idempotencyKey)).toEqual([idempotencyKey(id, 0), idempotencyKey(id, 0)]);
    expect(refundCreates(id)[1]!.replayed).toBe(true);
    expect(refundsAtStripe(id)).toHaveLength(1);
    expect((await row(id)).external_id).toBe(refundsAtStripe(id)[0]!.id);
  });

  it('Stripe 500 after commit (replayed for the key) → List of the PaymentIntent’s refunds adopts the refund, no second create', async () => {
    const { input } = await chargedOrder();
    const id = await engine().requestRefund(refundOf(input.orderId));
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'error_500_after_commit');
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    await sentAgo(id, '3 minutes'); // past the List settle delay
    const second = await engine().executeCharge(id);
    expect(second).toMatchObject({ status: 'succeeded', step: 'list' });
    expect(refundCreates(id)).toHaveLength(1);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_list')).toHaveLength(1);
    expect((await row(id)).external_id).toBe(refundsAtStripe(id)[0]!.id);
  });

  it('Stripe 500 before commit → List proves absence twice, spaced → re-issued under g1 → exactly one refund (REFUND_AUTO_REISSUE=on)', async () => {
    // The proof spacing and the delay after the last send shortened (their judgement: test/evidence-decisions.test.ts).
    // Refunds are re-issued by the machine only when asked (a second Refund cannot be taken back): test/reissue-watch.test.ts.
    const fast = engine({ policy: { listSettleMs: 0, proofSpacingMs: 1, reissueAfterLastSendMs: 0, refundAutoReissue: true } });
    const { input } = await chargedOrder();
    const id = await fast.requestRefund(refundOf(input.orderId));
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'error_500_before_commit');
    expect((await fast.executeCharge(id)).status).toBe('unknown');
    await makeDue(id);
    const firstProof = await fast.executeCharge(id);
    expect(firstProof).toMatchObject({ status: 'unknown', step: 'list' });
    expect(firstProof.outcome?.detail).toMatchObject({ absenceProven: true });
    await makeDue(id);
    const reissued = await fast.executeCharge(id);
    expect(reissued).toMatchObject({ status: 'pending', step: 'list' });
    expect((await row(id)).key_generation).toBe(1);
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Reissued']);
    expect((await fast.executeCharge(id)).status).toBe('succeeded');
    expect(refundsAtStripe(id)).toHaveLength(1);
    expect(refundsAtStripe(id)[0]!.idempotencyKey).toBe(idempotencyKey(id, 1));
  });

  it('429 → stays pending, retried later with the same key, nothing executed by the 429', async () => {
    const { input } = await chargedOrder();
    const id = await engine().requestRefund(refundOf(input.orderId));
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'rate_limited_429');
    const first = await engine().executeCharge(id);
    expect(first.status).toBe('pending');
    expect(refundsAtStripe(id)).toHaveLength(0);
    await makeDue(id);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    expect(refundsAtStripe(id)).toHaveLength(1);
  });

  it('a pending refund is settled by retrieve (pending → succeeded), never re-created', async () => {
    const { input } = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund' });
    const id = await engine().requestRefund(refundOf(input.orderId));
    const first = await engine().executeCharge(id);
    expect(first).toMatchObject({ status: 'unknown', step: 'create' });
    const [refund] = refundsAtStripe(id);
    expect(refund!.status).toBe('pending');
    await makeDue(id);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown', step: 'retrieve' });
    stripe.fake.settleRefund(refund!.id, 'succeeded');
    await makeDue(id);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'succeeded', step: 'retrieve' });
    expect(refundCreates(id)).toHaveLength(1);
  });

  it('a pending refund that fails at Stripe → Refund Failed', async () => {
    const { input } = await chargedOrder({ paymentMethod: 'pm_card_pendingRefund' });
    const id = await engine().requestRefund(refundOf(input.orderId));
    await engine().executeCharge(id);
    stripe.fake.settleRefund(refundsAtStripe(id)[0]!.id, 'failed');
    await makeDue(id);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'failed', step: 'retrieve' });
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Failed']);
  });

  it('decline-like refusal (charge_already_refunded: refunded by hand in the Dashboard) → settled by List: none of ours → failed with the code', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    // Someone refunds the whole charge outside the pipeline.
    const pi = (await row(chargeId)).external_id as string;
    const outside = await fetch(`${stripe.fake.url}/v1/refunds`, {
      method: 'POST',
      headers: { Authorization: 'Bearer sk_test_engine', 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ payment_intent: pi }),
    });
    expect(outside.status).toBe(200);
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 300 }));
    const first = await engine().executeCharge(id);
    expect(first).toMatchObject({ status: 'unknown', step: 'create' });
    expect(first.outcome?.detail).toMatchObject({ settleByList: true, refusal: 'charge_already_refunded' });
    await sentAgo(id, '3 minutes');
    const settled = await engine().executeCharge(id);
    expect(settled).toMatchObject({ status: 'failed', step: 'list' });
    expect((await row(id)).last_error).toMatch(/charge_already_refunded/);
    expect(refundCreates(id)).toHaveLength(1);
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Failed']);
  });

  it('refusal after a lost answer under an earlier generation → List finds OUR refund and adopts it (evidence, not a guess)', async () => {
    const { input } = await chargedOrder({ amount: 500 });
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 500 }));
    // The refund executes, its answer is lost; then (simulating a re-issue) the next send uses g1.
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'truncated_response_after_commit');
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    await db.pool.query('UPDATE payment_operations SET key_generation = 1, next_attempt_at = now() WHERE id = $1', [id]);
    const refused = await engine().executeCharge(id);
    expect(refused.outcome?.detail).toMatchObject({ settleByList: true });
    await sentAgo(id, '3 minutes');
    const adopted = await engine().executeCharge(id);
    expect(adopted).toMatchObject({ status: 'succeeded', step: 'list' });
    expect(refundsAtStripe(id)).toHaveLength(1);
    expect((await row(id)).external_id).toBe(refundsAtStripe(id)[0]!.id);
  });

  it('the same, with the over-refund refused in the code-less form Stripe has been seen to send (no code, param amount) → settled by List evidence, not failed', async () => {
    stripe.fake.setOverRefundError('no_code');
    try {
      const { input } = await chargedOrder({ amount: 1000 });
      const id = await engine().requestRefund(refundOf(input.orderId, { amount: 600 }));
      stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'truncated_response_after_commit');
      expect((await engine().executeCharge(id)).status).toBe('unknown');
      await db.pool.query('UPDATE payment_operations SET key_generation = 1, next_attempt_at = now() WHERE id = $1', [id]);
      // 600 more of the 400 left: refused, and the refusal carries no code (only param amount).
      const refused = await engine().executeCharge(id);
      const answer = stripe.fake.requests().filter((r) => r.endpoint === 'refund_create' && r.operationId === id).at(-1)!;
      expect(answer).toMatchObject({ status: 400, idempotencyKey: idempotencyKey(id, 1) });
      expect(refused).toMatchObject({ status: 'unknown' });
      // Recorded under Stripe's documented code, the form kept beside it.
      expect(refused.outcome?.detail).toMatchObject({ settleByList: true, refusal: 'amount_too_large', refusalWithoutCode: true });
      await sentAgo(id, '3 minutes');
      const adopted = await engine().executeCharge(id);
      expect(adopted).toMatchObject({ status: 'succeeded', step: 'list' });
      expect((await row(id)).external_id).toBe(refundsAtStripe(id)[0]!.id);
      expect(refundsAtStripe(id)).toHaveLength(1);
    } finally {
      stripe.fake.setOverRefundError('amount_too_large');
    }
  });

  it.each(['amount_too_large', 'no_code'] as const)(
    'a Dashboard refund took part of the charge, then ours asks more than is left → refused (%s) → List: only the Dashboard Refund, not ours → failed with the refusal',
    async (form) => {
      stripe.fake.setOverRefundError(form);
      try {
        const { input, chargeId } = await chargedOrder({ amount: 1000 });
        const pi = (await row(chargeId)).external_id as string;
        const dashboard = stripe.fake.dashboardRefund(pi, 700);
        // The product counts only its own refunds: 500 of 1000 passes its rules and is sent.
        const id = await engine().requestRefund(refundOf(input.orderId, { amount: 500 }));
        const first = await engine().executeCharge(id);
        expect(first).toMatchObject({ status: 'unknown', step: 'create' });
        expect(first.outcome?.detail).toMatchObject({ settleByList: true });
        await sentAgo(id, '3 minutes');
        const settled = await engine().executeCharge(id);
        expect(settled).toMatchObject({ status: 'failed', step: 'list' });
        expect((await row(id)).last_error).toBe(`refused by Stripe (amount_too_large) and List shows no refund of this operation`); // both forms: the documented code
        expect(refundCreates(id)).toHaveLength(1);
        expect(stripe.fake.refunds({ paymentIntentId: pi }).map((r) => r.id)).toEqual([dashboard.id]);
        expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Refund Failed']);
      } finally {
        stripe.fake.setOverRefundError('amount_too_large');
      }
    },
  );

  it('the gateway never lists refunds for an empty PaymentIntent id (Stripe refuses payment_intent=; a lenient server would list the whole account): a clear error, nothing sent', async () => {
    const before = stripe.fake.requests().length;
    for (const empty of ['', ' ']) {
      await expect(stripe.gateway.listRefunds({ scope: { payment_intent: empty }, createdGte: 0, createdLte: 2_000_000_000 })).rejects.toThrow(
        /listRefunds needs a PaymentIntent id in scope\.payment_intent, got an empty one.*nothing was sent/,
      );
    }
    expect(stripe.fake.requests().length).toBe(before);
  });
});

describe('a refund whose List is refused for good', () => {
  it('403 on every List (a restricted key without Refunds read) → a human after maxSearchFailures lists, told what to fix; no re-send, nothing refunded', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 800 });
    const charge = (await row(chargeId)).external_id as string;
    const id = await engine().requestRefund(refundOf(input.orderId, { amount: 800 }));
    // Stripe's own 500 is replayed for the key: List, not a same-key re-send, is the evidence.
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'error_500_before_commit');
    const bound = DEFAULT_POLICY.maxSearchFailures;
    stripe.fake.injectFault({ endpoint: 'refund_list', paymentIntentId: charge }, 'permission_403', bound);
    const e = engine({ policy: { ...FAST_LIST_POLICY, sameKeyResends: 0 } });
    expect(await e.executeCharge(id)).toMatchObject({ step: 'create', status: 'unknown' });
    const steps: string[] = [];
    for (let claim = 0; claim < 2 * bound && (await row(id)).review_reason === null; claim++) {
      await sentAgo(id, '1 second');
      steps.push((await e.executeCharge(id)).step ?? 'none');
    }
    expect(steps).toEqual(Array(bound).fill('list'));
    const inReview = await row(id);
    expect(inReview).toMatchObject({ status: 'unknown', last_error_class: 'StripePermissionError' });
    expect(inReview.review_reason).toMatch(new RegExp(`^List of the PaymentIntent's refunds failed ${bound} times and will not pass by itself \\(StripePermissionError 403.*Refunds Read`));
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_list' && r.paymentIntentId === charge).map((r) => r.status)).toEqual(Array(bound).fill(403));
    // In review the reconciler leaves it alone: no re-send, nothing at Stripe.
    await makeDue(id);
    expect((await e.reconcileDue(100)).find((x) => x.operationId === id)).toBeUndefined();
    expect(refundCreates(id)).toHaveLength(1);
    expect(refundsAtStripe(id)).toEqual([]);
  });
});

describe('refund rules, in code and in the database', () => {
  it('partial refunds summing to the charged amount all succeed; one cent more is refused without a Stripe call', async () => {
    const { input } = await chargedOrder({ amount: 1000 });
    for (const amount of [300, 300, 400]) {
      expect((await engine().processRefund(refundOf(input.orderId, { amount }))).execution?.status).toBe('succeeded');
    }
    const before = stripe.fake.requests().length;
    const over = await engine().processRefund(refundOf(input.orderId, { amount: 1 }));
    expect(over.rejection).toBeInstanceOf(RefundRejectedError);
    expect(over.rejection?.code).toBe('exceeds_charge');
    expect(over.rejection?.message).toMatch(/1000 of 1000/);
    expect(stripe.fake.requests().length).toBe(before);
    const refunded = stripe.fake.refunds({ orderId: input.orderId }).reduce((sum, r) => sum + r.amount, 0);
    expect(refunded).toBe(1000);
  });

  it('an over-refund in one request is refused without a Stripe call', async () => {
    const { input } = await chargedOrder({ amount: 1000 });
    const before = stripe.fake.requests().length;
    await expect(engine().requestRefund(refundOf(input.orderId, { amount: 1001 }))).rejects.toMatchObject({ code: 'exceeds_charge' });
    expect(stripe.fake.requests().length).toBe(before);
  });

  it('the same refund id twice → one operation, one refund; with another amount → conflict, nothing sent', async () => {
    const { input } = await chargedOrder();
    const refund = refundOf(input.orderId, { refundId: 'rf-same' });
    const a = await engine().processRefund(refund);
    const b = await engine().processRefund({ ...refund });
    expect(b.operationId).toBe(a.operationId);
    expect(b.execution?.disposition).toBe('skipped');
    const conflict = await engine().processRefund({ ...refund, amount: 501 });
    expect(conflict.rejection?.code).toBe('refund_conflict');
    expect(conflict.operationId).toBe(a.operationId);
    expect(refundsAtStripe(a.operationId!)).toHaveLength(1);
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM payment_operations WHERE order_id = $1 AND kind = 'refund'`, [input.orderId]);
    expect(rows[0].n).toBe(1);
  });

  it('a refund before its charge is final waits (durable, not claimable), then goes once the charge succeeded', async () => {
    const input = chargeOrder();
    const chargeId = await engine().requestCharge(input);
    stripe.fake.injectFault({ endpoint: 'create', orderId: input.orderId }, 'processing');
    expect((await engine().executeCharge(chargeId)).status).toBe('unknown'); // processing: not final
    const result = await engine().processRefund(refundOf(input.orderId));
    expect(result.rejection).toBeNull();
    expect(result.execution?.disposition).toBe('skipped');
    const id = result.operationId!;
    expect(await row(id)).toMatchObject({ status: 'pending', lease_token: null });
    // Neither the reconciler nor a direct execution claims it while the charge is open.
    const swept = await engine().reconcileDue(100);
    expect(swept.map((e) => e.operationId)).not.toContain(id);
    expect((await engine().executeCharge(id)).disposition).toBe('skipped');
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_create')).toHaveLength(0);
    // The charge settles; the next sweep claims the refund.
    stripe.fake.settle((await row(chargeId)).external_id, 'succeeded');
    await makeDue(chargeId);
    expect((await engine().executeCharge(chargeId)).status).toBe('succeeded');
    const next = await engine().reconcileDue(100);
    expect(next.find((e) => e.operationId === id)).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(refundsAtStripe(id)).toHaveLength(1);
  });

  it('a refund waiting for a charge that then fails → failed with the reason, Stripe never asked', async () => {
    const input = chargeOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    const chargeId = await engine().requestCharge(input);
    const id = await engine().requestRefund(refundOf(input.orderId));
    expect((await engine().executeCharge(chargeId)).status).toBe('failed');
    const done = await engine().executeCharge(id);
    expect(done).toMatchObject({ status: 'failed', step: 'precondition' });
    expect(await row(id)).toMatchObject({ status: 'failed', last_error: expect.stringMatching(/charge failed/) });
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_create')).toHaveLength(0);
    expect((await outbox(id)).map((e) => [e.event_type, e.payload.reason])).toEqual([['Refund Failed', 'charge_failed']]);
    expect((await events(id)).some((e) => e.step === 'precondition')).toBe(true);
  });

  it('a refund of a failed charge, or of an order without a charge → rejected with the reason', async () => {
    const input = chargeOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    await engine().executeCharge(await engine().requestCharge(input));
    await expect(engine().requestRefund(refundOf(input.orderId))).rejects.toMatchObject({ code: 'charge_failed' });
    await expect(engine().requestRefund(refundOf(`order-${randomUUID()}`))).rejects.toMatchObject({ code: 'no_charge' });
  });

  it('the database refuses what the code would: an over-refund insert, a refund of a failed charge, a second row for a refund id', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const insert = (refundId: string, amount: number, parent = chargeId) =>
      db.pool.query(
        `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method)
         VALUES ($1, 'refund', $2, $3, $4, 'eur', 'cus_test', 'pm_card_visa')`,
        [input.orderId, refundId, parent, amount],
      );
    await insert('db-1', 600);
    await expect(insert('db-2', 401)).rejects.toMatchObject({ code: '23514', constraint: 'refunds_within_charge' });
    await expect(insert('db-1', 100)).rejects.toMatchObject({ code: '23505' });
    await insert('db-3', 400);
    const failed = chargeOrder({ paymentMethod: 'pm_card_chargeDeclined' });
    const failedId = await engine().requestCharge(failed);
    await engine().executeCharge(failedId);
    await expect(
      db.pool.query(
        `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method)
         VALUES ($1, 'refund', 'x', $2, 1, 'eur', 'cus_test', 'pm_card_visa')`,
        [failed.orderId, failedId],
      ),
    ).rejects.toMatchObject({ constraint: 'refund_of_failed_charge' });
    await expect(db.pool.query(`UPDATE payment_operations SET refund_id = 'changed' WHERE order_id = $1 AND refund_id = 'db-1'`, [input.orderId])).rejects.toThrow(/cannot change/);
  });

  it('two refunds of one order raced on two connections: the one that waits on the charge lock is refused, the sum never exceeds the charge', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const a = new pg.Client({ connectionString: db.url });
    const b = new pg.Client({ connectionString: db.url });
    await Promise.all([a.connect(), b.connect()]);
    try {
      const insert = (client: pg.Client, refundId: string) =>
        client.query(
          `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method)
           VALUES ($1, 'refund', $2, $3, 700, 'eur', 'cus_test', 'pm_card_visa')`,
          [input.orderId, refundId, chargeId],
        );
      await a.query('BEGIN');
      await insert(a, 'race-a'); // holds the charge's row lock until commit
      await b.query('BEGIN');
      const raced = insert(b, 'race-b').then(() => 'inserted', (error: { constraint?: string }) => error.constraint);
      // b is blocked on the charge's row lock; it can only be judged once a commits.
      let waiting = 0;
      for (let i = 0; i < 500 && waiting === 0; i++) {
        const { rows } = await db.pool.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        waiting = rows[0].n;
        if (waiting === 0) await new Promise((resolve) => setTimeout(resolve, 10));
      }
      expect(waiting).toBe(1);
      await a.query('COMMIT');
      expect(await raced).toBe('refunds_within_charge');
      await b.query('ROLLBACK');
    } finally {
      await Promise.all([a.end(), b.end()]);
    }
  });

  it('two refunds of one order raced through the engine in two processes’ pools: one refund, one rejection, one Stripe call', async () => {
    const { input } = await chargedOrder({ amount: 1000 });
    const poolA = new pg.Pool({ connectionString: db.url, max: 2 });
    const poolB = new pg.Pool({ connectionString: db.url, max: 2 });
    try {
      const mk = (pool: pg.Pool) => new ChargeEngine({ db: pool, gateway: stripe.gateway, actor: 'racer', random: () => 0.5 });
      const results = await Promise.all([
        mk(poolA).processRefund(refundOf(input.orderId, { amount: 700 })),
        mk(poolB).processRefund(refundOf(input.orderId, { amount: 700 })),
      ]);
      expect(results.filter((r) => r.rejection?.code === 'exceeds_charge')).toHaveLength(1);
      expect(results.filter((r) => r.execution?.status === 'succeeded')).toHaveLength(1);
      expect(stripe.fake.requests().filter((r) => r.endpoint === 'refund_create')).toHaveLength(1);
      expect(stripe.fake.refunds({ orderId: input.orderId }).reduce((s, r) => s + r.amount, 0)).toBe(700);
    } finally {
      await Promise.all([poolA.end(), poolB.end()]);
    }
  });
});

describe('refund events: the contract', () => {
  it('every refund outcome row is a valid Refund detail (own operationId, own sequence, the refund named); a charge row is unchanged', async () => {
    const { input, chargeId } = await chargedOrder();
    const ok = await engine().processRefund(refundOf(input.orderId, { refundId: 'rf-ev', reason: 'duplicate' }));
    const [event] = await outbox(ok.operationId!);
    expect(event!.event_type).toBe(RefundDetailType.succeeded);
    const detail = refundOutcomeDetailSchema.parse(event!.payload);
    expect(detail).toMatchObject({ kind: 'refund', refundId: 'rf-ev', chargeOperationId: chargeId, refundReason: 'duplicate', sequence: 1, status: 'succeeded' });
    const [charge] = await outbox(chargeId);
    expect(charge!.payload).not.toHaveProperty('kind');
    chargeOutcomeDetailSchema.parse(charge!.payload);
  });
});

describe('the duplicate-charge remedy', () => {
  /** A second succeeded PaymentIntent for the order, made behind the pipeline's back (another key). */
  async function secondCharge(input: ChargeInput, chargeId: string) {
    const sdk = createStripeClient({ apiKey: 'sk_test_engine', apiBase: stripe.fake.url, maxNetworkRetries: 0 });
    const pi = await sdk.paymentIntents.create(
      { amount: input.amount, currency: input.currency, customer: input.customerId, payment_method: input.paymentMethod, confirm: true, off_session: true, metadata: { operation_id: chargeId, order_id: input.orderId, key_generation: '1' } },
      { idempotencyKey: `someone-else-${randomUUID()}` },
    );
    expect(pi.status).toBe('succeeded');
    return pi;
  }
  const view = (pi: { id: string; status: string; amount: number; currency: string; metadata: Record<string, string> }) => ({ id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency, metadata: pi.metadata });

  it('two succeeded PaymentIntents for one order → exactly one automatic refund of the extra one, even when the evidence comes twice; Charge Duplicate Refunded', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1500 });
    const extra = await secondCharge(input, chargeId);
    const first = await engine().remedyDuplicateCharge(chargeId, view(extra), { by: 'test' });
    expect(first).toMatchObject({ created: true, verdict: { kind: 'refund', refundId: `duplicate:${extra.id}`, amount: 1500 }, execution: { status: 'succeeded' } });
    const again = await engine().remedyDuplicateCharge(chargeId, view(extra));
    expect(again).toMatchObject({ created: false, refundOperationId: first.refundOperationId, execution: { disposition: 'skipped' } });
    const refunds = stripe.fake.refunds({ orderId: input.orderId });
    expect(refunds).toMatchObject([{ payment_intent: extra.id, amount: 1500, reason: 'duplicate', status: 'succeeded' }]);
    const [event] = await outbox(first.refundOperationId!);
    expect(event!.event_type).toBe(RefundDetailType.duplicateRefunded);
    expect(refundOutcomeDetailSchema.parse(event!.payload)).toMatchObject({ refundedPaymentIntent: extra.id, refundReason: 'duplicate', chargeOperationId: chargeId });
    // The net amount charged for the order is the amount asked.
    const net = netChargedByOrder(stripe.fake.paymentIntents({ orderId: input.orderId }), stripe.fake.refunds({ orderId: input.orderId })).get(input.orderId)!;
    expect(net).toMatchObject({ net: 1500, succeededPaymentIntents: 2, unrefundedPaymentIntents: 1 });
    // The remedy never touches the charge's own PaymentIntent, nor one that did not charge.
    const own = (await row(chargeId)).external_id as string;
    expect((await engine().remedyDuplicateCharge(chargeId, { ...view(extra), id: own })).verdict.kind).toBe('none');
    expect((await engine().remedyDuplicateCharge(chargeId, { ...view(extra), id: 'pi_other', status: 'requires_payment_method' })).verdict.kind).toBe('none');
  });

  it('the Stripe event of a second succeeded PaymentIntent (delivered twice) → the contradiction finding and one remedy refund, sent by the next sweep', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 900 });
    const extra = await secondCharge(input, chargeId);
    const record = stripe.fake.paymentIntents({ orderId: input.orderId }).find((pi) => pi.id === extra.id)!;
    const applier = new StripeEventApplier({ db: db.pool, gateway: stripe.gateway, actor: 'stripe-events', random: () => 0.5 });
    const deliver = () => receiveWebhook(delivery(piEvent(record)), { secret: SECRET, maxBodyBytes: 256 * 1024 }, { db: db.pool, applier, publisher: null });
    expect(await deliver()).toMatchObject({ applied: { outcome: 'contradiction', reason: expect.stringMatching(/refunded by remedy operation/) } });
    await deliver();
    const { rows } = await db.pool.query(`SELECT id FROM payment_operations WHERE order_id = $1 AND kind = 'refund'`, [input.orderId]);
    expect(rows).toHaveLength(1);
    const swept = await engine().reconcileDue(100);
    expect(swept.find((e) => e.operationId === rows[0].id)).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(stripe.fake.refunds({ orderId: input.orderId })).toMatchObject([{ payment_intent: extra.id, amount: 900, reason: 'duplicate' }]);
  });

  it('the invariant checker: net amount per order = amount asked − refunds asked; a duplicate left unrefunded is a violation, refunded it is not', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    await engine().processRefund(refundOf(input.orderId, { amount: 250 }));
    const check = () =>
      checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect((await check()).violations).toEqual([]);
    const extra = await secondCharge(input, chargeId);
    const broken = await check();
    expect(broken.violationsByKind).toMatchObject({ net_amount: 1 });
    await engine().remedyDuplicateCharge(chargeId, view(extra));
    const report = await check();
    expect(report.violations).toEqual([]);
  });

  it('the invariant checker catches a refund the ledger does not know, and a refund operation succeeded without its refund', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const ok = await engine().processRefund(refundOf(input.orderId, { amount: 100 }));
    // A refund at Stripe behind the pipeline's back: the net amount is no longer what was asked.
    await fetch(`${stripe.fake.url}/v1/refunds`, {
      method: 'POST',
      headers: { Authorization: 'Bearer sk_test_engine', 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ payment_intent: (await row(chargeId)).external_id, amount: '50' }),
    });
    // And a refund operation that claims success with a refund id Stripe does not have.
    await db.pool.query('ALTER TABLE payment_operations DISABLE TRIGGER payment_operations_guard');
    await db.pool.query(`UPDATE payment_operations SET external_id = 're_missing' WHERE id = $1`, [ok.operationId]).finally(() =>
      db.pool.query('ALTER TABLE payment_operations ENABLE TRIGGER payment_operations_guard'),
    );
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId] });
    expect(report.violationsByKind).toMatchObject({ net_amount: 1, succeeded_without_refund: 1 });
  });
});

describe('the review queue', () => {
  it('a refund in review is reviewable like any operation (judged on Refund evidence: test/ops/review-refunds.test.ts)', async () => {
    const { input } = await chargedOrder();
    const id = await engine().requestRefund(refundOf(input.orderId));
    stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'rate_limited_429');
    await engine().executeCharge(id);
    await db.pool.query(`UPDATE payment_operations SET review_reason = 'test: a person must look', next_attempt_at = NULL WHERE id = $1`, [id]);
    const verdict = checkReviewable((await findOperation(db.pool, id))!);
    expect(verdict).toEqual({ allowed: true });
  });
});

describe('ops: refunds list | show', () => {
  const ops = (argv: string[]) =>
    runOps(argv, {
      defaultActor: 'tester',
      context: () => ({ db: db.pool, stripe: () => Promise.reject(new Error('no Stripe look-ups')), gateway: async () => stripe.gateway, transport: { kind: 'test' } }),
    });

  it('refunds create: an operator refund through the same engine, the operator as actor; a refund beyond what is left is refused, nothing sent', async () => {
    const { input } = await chargedOrder({ amount: 1000 });
    const made = await ops(['refunds', 'create', input.orderId, '--refund-id', 'op-1', '--amount', '400', '--refund-reason', 'requested_by_customer', '--reason', 'TICKET-9: customer asked', '--actor', 'alice']);
    expect(made).toMatchObject({ ok: true, command: 'refunds create', result: { operation: { status: 'succeeded', amount: 400 }, disposition: 'attempted' } });
    const id = made.ok && made.command === 'refunds create' ? made.result.operation.id : '';
    expect((await events(id)).map((e) => [e.action, e.actor])).toEqual([
      ['requested', 'operator:alice'],
      ['attempt_started', 'operator:alice'],
      ['outcome_recorded', 'operator:alice'],
    ]);
    // The operator's reason is in the refund's own `requested` event, written by the statement that made it.
    expect((await events(id))[0]!.detail).toMatchObject({ refundId: 'op-1', reason: 'TICKET-9: customer asked', command: 'refunds create', identity: { verified: false, claimed: 'alice', claimedFrom: '--actor' } });
    expect(refundsAtStripe(id)).toMatchObject([{ amount: 400, reason: 'requested_by_customer' }]);
    const before = stripe.fake.requests().length;
    const refused = await ops(['refunds', 'create', input.orderId, '--refund-id', 'op-2', '--amount', '601', '--reason', 'TICKET-9', '--actor', 'alice']);
    expect(refused).toMatchObject({ ok: false, exitCode: 1, error: { code: 'refused', message: expect.stringMatching(/^exceeds_charge: /) } });
    expect(stripe.fake.requests().length).toBe(before);
    expect(await ops(['refunds', 'create', input.orderId, '--refund-id', 'op-3', '--amount', '1'])).toMatchObject({ ok: false, exitCode: 2 });
  });

  it('review list counts, beside a charge in review, the refunds of its order that wait for it (they have no review reason of their own)', async () => {
    const input = chargeOrder();
    const chargeId = await engine().requestCharge(input);
    stripe.fake.injectFault({ endpoint: 'create', orderId: input.orderId }, 'processing');
    expect((await engine().executeCharge(chargeId)).status).toBe('unknown');
    const waiting = await engine().processRefund(refundOf(input.orderId));
    expect(await row(waiting.operationId!)).toMatchObject({ status: 'pending', review_reason: null });
    // The charge goes to review (as the engine sends one whose evidence cannot settle it).
    await db.pool.query(`UPDATE payment_operations SET review_reason = 'a human decides', next_attempt_at = NULL WHERE id = $1`, [chargeId]);
    const response = await ops(['review', 'list', '--json']);
    if (!response.ok || response.command !== 'review list') throw new Error('review list failed');
    expect(response.result.operations.find((op) => op.id === chargeId)).toMatchObject({ kind: 'charge', refundsWaiting: 1 });
    expect(render(response, false).stdout.join('\n')).toMatch(/\[1 refund\(s\) of this order wait for it\] a human decides/);
  });

  it('refunds list shows the charge, each refund operation and what is left; refunds show one refund with its trail', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const a = await engine().processRefund(refundOf(input.orderId, { refundId: 'rf-ops-1', amount: 300 }));
    const response = await ops(['refunds', 'list', input.orderId, '--json']);
    expect(response).toMatchObject({
      ok: true,
      command: 'refunds list',
      result: { orderId: input.orderId, charge: { id: chargeId, status: 'succeeded' }, refunded: 300, inFlight: 0, left: 700, refunds: [{ id: a.operationId, refundId: 'rf-ops-1', amount: 300, status: 'succeeded' }] },
    });
    expect(render(response, false).stdout.join('\n')).toMatch(/rf-ops-1 .*300 eur/);
    const shown = await ops(['refunds', 'show', a.operationId!]);
    expect(shown).toMatchObject({ ok: true, command: 'refunds show' });
    expect(await ops(['refunds', 'show', chargeId])).toMatchObject({ ok: false, error: { code: 'not_found' } });
    expect(await ops(['refunds', 'list', 'no-such-order'])).toMatchObject({ ok: false, error: { code: 'not_found' } });
  });
});

describe('charge parameters: description, statementDescriptorSuffix, metadata', () => {
  it('passed to Stripe (the producer’s metadata beside ours), stored with the order; a repeat with other values is a conflict', async () => {
    const input = chargeOrder({ description: 'Order 77, two books', statementDescriptorSuffix: 'BOOKS 77', metadata: { shop: 'eu_1', cart_id: 'c42' } });
    const result = await engine().processRequests([input]);
    const id = result[0]!.operationId;
    expect(result[0]!.execution?.status).toBe('succeeded');
    const [pi] = stripe.fake.paymentIntents({ operationId: id });
    expect(pi!.metadata).toEqual({ shop: 'eu_1', cart_id: 'c42', operation_id: id, order_id: input.orderId, key_generation: '0' });
    expect(await row(id)).toMatchObject({ description: 'Order 77, two books', statement_descriptor_suffix: 'BOOKS 77', charge_metadata: { shop: 'eu_1', cart_id: 'c42' } });
    // The same metadata in another key order is the same order; other values conflict, nothing is sent.
    const same = await engine().processRequests([{ ...input, metadata: { cart_id: 'c42', shop: 'eu_1' } }]);
    expect(same[0]!.conflict).toBeNull();
    const before = stripe.fake.requests().length;
    const other = await engine().processRequests([{ ...input, metadata: { shop: 'eu_2', cart_id: 'c42' } }]);
    expect(other[0]!.conflict).toBeInstanceOf(OrderConflictError);
    expect(other[0]!.conflict!.fields).toEqual(['metadata']);
    const noDescription = await engine().processRequests([{ ...input, description: undefined } as ChargeInput]);
    expect(noDescription[0]!.conflict!.fields).toEqual(['description']);
    expect(stripe.fake.requests().length).toBe(before);
    // The database keeps them as the order's parameters too (an open operation: the final-state guard is not what refuses).
    const open = await engine().requestCharge(chargeOrder({ metadata: { shop: 'eu_1' } }));
    await expect(db.pool.query(`UPDATE payment_operations SET charge_metadata = '{}' WHERE id = $1`, [open])).rejects.toThrow(/parameters of payment operation .* cannot change/);
  });

  it('the schema: at most 20 keys of [a-z0-9_] ≤ 40, values ≤ 500, our reserved keys refused, the suffix as Stripe allows it', () => {
    const base = chargeOrder();
    const parse = (extra: Record<string, unknown>) => parseQueueMessage(JSON.stringify({ ...base, ...extra }));
    expect(parse({ metadata: { a: '1' }, description: 'x', statementDescriptorSuffix: 'SHOP 1' })).toMatchObject({ ok: true });
    expect(parse({ metadata: { order_id: 'x' } })).toMatchObject({ ok: false, reason: expect.stringMatching(/pipeline's keys/) });
    expect(parse({ metadata: Object.fromEntries(Array.from({ length: 21 }, (_, i) => [`k${i}`, 'v'])) })).toMatchObject({ ok: false, reason: expect.stringMatching(/at most 20/) });
    expect(parse({ metadata: { 'Bad-Key': 'v' } })).toMatchObject({ ok: false });
    expect(parse({ metadata: { k: 'v'.repeat(501) } })).toMatchObject({ ok: false, reason: expect.stringMatching(/at most 500/) });
    expect(parse({ statementDescriptorSuffix: '1234' })).toMatchObject({ ok: false });
    expect(parse({ statementDescriptorSuffix: 'A'.repeat(23) })).toMatchObject({ ok: false });
  });
});

describe('round trips', () => {
  it('a refund costs the charge’s 2 round trips: request + claim, then outcome + audit + outbox', async () => {
    const { input } = await chargedOrder();
    const counted = countingDb(db.pool);
    const e = new ChargeEngine({ db: counted, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
    const result = await e.processRefund(refundOf(input.orderId));
    expect(result.execution?.status).toBe('succeeded');
    expect(counted.roundTrips).toBe(2);
  });
});
