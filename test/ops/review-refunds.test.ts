// A refund in the review queue, end to end: put there by the REAL engine (a 500 whose evidence never
// came, a refund still pending, a key misused), judged by the operator tool on Refund evidence — List
// of the refunded PaymentIntent's refunds and a retrieve of every Refund id we hold — through the
// real stripe SDK against the fake Stripe, written by the same fenced statements as a charge's.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { duplicateRefundId, idempotencyKey } from '../../lambdas/payments/decisions.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import { claimById } from '../../lambdas/payments/operations-store.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { shiftAuditTrail } from '../support/db.ts';
import { chargedOrder } from '../support/engine.ts';
import { refundOf } from '../support/orders.ts';
import { useWorld } from '../support/world.ts';
import { auditEvents, cli, cliJson, engine, operationRow, opsEnv, order, outboxRows, resultOf, reviewReason, windowExpired, type Harness } from './support.ts';

let h: Harness;
let env: NodeJS.ProcessEnv;

// The fake is not reset between this file's tests (it never was here).
useWorld('ops_review_refunds', (w) => {
  h = w;
  env = opsEnv(h);
}, { resetFakeBeforeEach: false });

const because = ['--reason', 'TICKET-7: checked the refunds of the PaymentIntent', '--actor', 'alice'];

/** An order charged (succeeded) through the engine, and its PaymentIntent. */
async function charged(overrides: Partial<ChargeInput> = {}): Promise<{ input: ChargeInput; chargeId: string; paymentIntentId: string }> {
  const { input, chargeId } = await chargedOrder(engine(h), order(overrides));
  return { input, chargeId, paymentIntentId: (await operationRow(h, chargeId)).external_id as string };
}

const refundsAtStripe = (id: string) => h.stripe.fake.refunds({ operationId: id });

/**
 * Time passes: the operation's audit trail moved back, as if its last send was `interval` ago (past
 * the List settle delay, LIST_SETTLE_MS, default 2 min). The trail is append-only; shiftAuditTrail
 * sets its trigger aside for the shift.
 */
const sentAgo = (id: string, interval: string) => shiftAuditTrail(h.db.pool, id, interval);

/**
 * Nothing refunded: the create met a 500 before Stripe executed it; after the key window List of
 * the PaymentIntent's refunds shows none of ours, and with AMBIGUOUS_RESOLUTION=review a human
 * decides the re-issue → review. `beforeReview` runs just before the claim that puts it there.
 */
async function intoReviewNothingRefunded(beforeReview: (id: string) => Promise<void> = async () => {}, { settled = true } = {}) {
  const c = await charged({ amount: 1000 });
  const e = engine(h, { policy: { ambiguousResolution: 'review' } });
  const id = await e.requestRefund(refundOf(c.input.orderId, { amount: 400 }));
  h.stripe.fake.injectFault({ endpoint: 'refund_create', operationId: id }, 'error_500_before_commit');
  expect((await e.executeCharge(id)).status).toBe('unknown');
  await windowExpired(h, id);
  await beforeReview(id);
  await e.executeCharge(id);
  expect(await reviewReason(h, id)).toMatch(/List proves that no Refund exists/);
  expect(refundsAtStripe(id)).toHaveLength(0);
  if (settled) await sentAgo(id, '3 minutes');
  return { ...c, id };
}

/** A refund Stripe created `pending` (pm_card_pendingRefund) that stayed so past the engine's patience → review, its Refund id held. */
async function intoReviewRefundPending() {
  const c = await charged({ paymentMethod: 'pm_card_pendingRefund' });
  const id = await engine(h, { policy: { unsettledReviewAfterMs: 0 } }).requestRefund(refundOf(c.input.orderId));
  await engine(h, { policy: { unsettledReviewAfterMs: 0 } }).executeCharge(id);
  expect(await reviewReason(h, id)).toMatch(/^Refund re_\S+ is still pending/);
  const [refund] = refundsAtStripe(id);
  expect(refund).toMatchObject({ status: 'pending' });
  return { ...c, id, refundId: refund!.id };
}

/**
 * Somebody used the refund operation's key with another amount (a bug in key use): Stripe made THAT
 * refund, ours by metadata; the engine's create meets idempotency_error → review.
 */
async function intoReviewRefundKeyMisused() {
  const c = await charged({ amount: 1000 });
  const e = engine(h);
  const input = refundOf(c.input.orderId, { amount: 300 });
  const id = await e.requestRefund(input);
  const rogue = await h.stripe.gateway.createRefund({
    idempotencyKey: idempotencyKey(id, 0),
    paymentIntentId: c.paymentIntentId,
    amount: 350,
    reason: null,
    metadata: { operation_id: id, order_id: c.input.orderId, refund_id: input.refundId, key_generation: '0' },
  });
  if (!rogue.ok) throw new Error('rogue refund failed');
  await e.executeCharge(id);
  expect(await reviewReason(h, id)).toMatch(/idempotency key/);
  return { ...c, id, rogueRefundId: rogue.value.id };
}

describe('review list, review show, operations show: a refund in review', () => {
  it('review list shows the kind, the refund id, the amount and the PaymentIntent refunded', async () => {
    const { id, paymentIntentId, input } = await intoReviewNothingRefunded();
    const listed = resultOf((await cliJson(['review', 'list'], env)).response, 'review list').operations.find((op) => op.id === id)!;
    expect(listed).toMatchObject({ kind: 'refund', amount: 400, inReview: true, refund: { refundId: expect.stringMatching(/^rf-/), paymentIntent: paymentIntentId } });
    const text = await cli(['review', 'list'], env);
    expect(text.stdout).toMatch(new RegExp(`${id}\\s+refund\\s+${input.orderId.slice(0, 30)}\\S*\\s+rf-\\S+\\s+${paymentIntentId}\\s+4\\.00 EUR`));
  });

  it('review show judges by Refund evidence: List of the PaymentIntent’s refunds, all generations, and what may be done', async () => {
    const { id, refundId } = await intoReviewRefundPending();
    const before = h.stripe.fake.requests().length;
    const shown = resultOf((await cliJson(['review', 'show', id], env)).response, 'review show');
    // The refund kind's reader: one List page and a retrieve of the Refund id held; no PaymentIntent look-up.
    expect(h.stripe.fake.requests().slice(before).map((r) => r.endpoint)).toEqual(['refund_list', 'refund_retrieve']);
    expect(shown.stripe).toMatchObject({ kind: 'refund', complete: true, paymentIntents: [], refunds: [{ id: refundId, status: 'pending', foundBy: ['list', 'retrieve'] }] });
    expect(shown.options).toEqual({
      proofFlag: '--refund',
      resolveSucceeded: [],
      notAcceptable: [],
      resolveFailed: { allowed: false, reason: expect.stringMatching(new RegExp(`may still move money \\(${refundId} pending\\)`)) },
      reissue: { allowed: false, reason: expect.stringMatching(/may still move money/) },
    });
    h.stripe.fake.settleRefund(refundId, 'succeeded');
    const text = await cli(['review', 'show', id], env);
    expect(text.code).toBe(0);
    expect(text.stdout).toMatch(/^Refund operation /);
    expect(text.stdout).toMatch(/List of pi_\S+'s refunds, all key generations/);
    expect(text.stdout).toContain(`--as succeeded --refund ${refundId}`);
    expect(text.stdout).toMatch(/resolve as failed: +refused — Stripe shows a succeeded Refund of this operation/);
  });

  it('operations show <order> lists the order’s refund operations; with --stripe on a refund it shows the Refund evidence', async () => {
    const { id, input, paymentIntentId } = await intoReviewNothingRefunded();
    const other = await engine(h).processRefund(refundOf(input.orderId, { refundId: 'rf-other', amount: 100 }));
    const byOrder = resultOf((await cliJson(['operations', 'show', input.orderId], env)).response, 'operations show');
    expect(byOrder.operation.kind).toBe('charge');
    expect(byOrder.orderRefunds).toEqual([
      expect.objectContaining({ id, kind: 'refund', status: 'unknown', inReview: true, amount: 400, refund: expect.objectContaining({ paymentIntent: paymentIntentId }) }),
      expect.objectContaining({ id: other.operationId, status: 'succeeded', amount: 100, refund: expect.objectContaining({ refundId: 'rf-other' }) }),
    ]);
    expect((await cli(['operations', 'show', input.orderId], env)).stdout).toMatch(/Refund operations of order/);
    const refund = resultOf((await cliJson(['operations', 'show', id, '--stripe'], env)).response, 'operations show');
    // The other operation's refund of the same PaymentIntent is shown, as not this operation's.
    expect(refund.stripe).toMatchObject({ kind: 'refund', refundedPaymentIntent: paymentIntentId, refunds: [], unrelated: [expect.objectContaining({ amount: 100 })] });
    expect(refund.options?.resolveFailed).toEqual({ allowed: true });
    const shown = resultOf((await cliJson(['refunds', 'show', id, '--stripe'], env)).response, 'refunds show');
    expect(shown.stripe?.kind).toBe('refund');
  });
});

describe('review resolve --as succeeded --refund re_…', () => {
  it('settles on THAT refund, ours, same amount and PaymentIntent, succeeded: Refund Succeeded in the outbox', async () => {
    const { id, refundId } = await intoReviewRefundPending();
    const early = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--refund', refundId, ...because], env);
    expect(early.response).toMatchObject({ ok: false, error: { code: 'refused', message: expect.stringMatching(new RegExp(`Refund ${refundId} is pending, not succeeded`)) } });
    h.stripe.fake.settleRefund(refundId, 'succeeded');
    const { code, response } = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--refund', refundId, ...because], env);
    expect(code).toBe(0);
    expect(resultOf(response, 'review resolve').operation).toMatchObject({ status: 'succeeded', externalId: refundId, inReview: false });
    const audit = (await auditEvents(h, id)).at(-1)!;
    expect(audit).toMatchObject({ action: 'operator_resolved', to_status: 'succeeded', external_id: refundId });
    expect(audit.detail).toMatchObject({ refund: refundId, evidence: { refunds: [expect.objectContaining({ id: refundId, status: 'succeeded' })] } });
    expect((await outboxRows(h, id)).map((r) => r.event_type)).toEqual(['Refund Needs Review', 'Refund Succeeded']);
  });

  it('is refused for a refund of another operation (another refund of the same PaymentIntent)', async () => {
    const { id, input } = await intoReviewNothingRefunded();
    const other = await engine(h).processRefund(refundOf(input.orderId, { amount: 400 }));
    const otherRefund = refundsAtStripe(other.operationId!)[0]!;
    expect(otherRefund).toMatchObject({ status: 'succeeded', amount: 400 });
    const run = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--refund', otherRefund.id, ...because], env);
    expect(run.response).toMatchObject({
      ok: false,
      error: { code: 'refused', message: `Refund ${otherRefund.id} does not belong to operation ${id}: its metadata.operation_id is ${other.operationId}` },
    });
    expect((await operationRow(h, id)).status).toBe('unknown');
  });

  it('is refused when the amount differs (the key misused), and --as failed / reissue too: money went back under our key', async () => {
    const { id, rogueRefundId } = await intoReviewRefundKeyMisused();
    const run = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--refund', rogueRefundId, ...because], env);
    expect(run.response).toMatchObject({ ok: false, error: { code: 'refused', message: expect.stringMatching(/does not match the operation: amount 350 ≠ 300/) } });
    const failed = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(failed.code).toBe(1);
    expect(failed.stderr).toMatch(/succeeded Refund of this operation .*none of them matches the operation .*escalate/);
    expect((await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env)).code).toBe(1);
    expect((await operationRow(h, id)).key_generation).toBe(0);
  });

  it('is refused when the Refund does not exist, and a PaymentIntent is not the proof of a refund', async () => {
    const { id, paymentIntentId } = await intoReviewNothingRefunded();
    const missing = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--refund', 're_doesnotexist', ...because], env);
    expect(missing.response).toMatchObject({ ok: false, error: { code: 'refused', message: 'Refund re_doesnotexist does not exist at Stripe' } });
    const wrong = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', paymentIntentId, ...because], env);
    expect(wrong).toMatchObject({ code: 2, response: { ok: false, error: { code: 'usage', message: expect.stringMatching(/is a refund: its proof is a Refund, given with --refund/) } } });
  });
});

describe('review resolve --as failed (a refund)', () => {
  it('settles when the complete List shows no refund of ours — a Dashboard refund of the same PaymentIntent is not ours — with Refund Failed', async () => {
    const { id, paymentIntentId } = await intoReviewNothingRefunded();
    // Someone refunds part of the charge by hand in the Dashboard (no metadata).
    const outside = await fetch(`${h.stripe.fake.url}/v1/refunds`, {
      method: 'POST',
      headers: { Authorization: 'Bearer sk_test_ops', 'Content-Type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ payment_intent: paymentIntentId, amount: '200' }),
    });
    expect(outside.status).toBe(200);
    // The default Search settle period (10 min) does not apply: List is real time (the trail is 3 min old).
    const { code, response } = await cliJson(['review', 'resolve', id, '--as', 'failed', ...because], { ...env, OPS_SEARCH_SETTLE_MS: '' });
    expect(code).toBe(0);
    const result = resultOf(response, 'review resolve');
    expect(result.operation).toMatchObject({ status: 'failed', inReview: false });
    expect(result.evidence).toMatchObject({ kind: 'refund', complete: true, refunds: [], unrelated: [expect.objectContaining({ amount: 200, metadata: {} })] });
    const failed = (await outboxRows(h, id)).at(-1)!;
    expect(failed).toMatchObject({ event_type: 'Refund Failed', payload: expect.objectContaining({ status: 'failed', reason: 'operator_resolved' }) });
  });

  it('is refused while a refund of ours is pending (it may still succeed), whatever its key generation', async () => {
    const { id, refundId } = await intoReviewRefundPending();
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(new RegExp(`may still move money \\(${refundId} pending\\)`));
    expect((await operationRow(h, id)).status).toBe('unknown');
  });

  it('is refused when the List is incomplete (it failed): the absence of a refund is not shown', async () => {
    const { id, paymentIntentId } = await intoReviewNothingRefunded();
    h.stripe.fake.injectFault({ endpoint: 'refund_list', paymentIntentId }, 'rate_limited_429');
    const run = await cliJson(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.response).toMatchObject({
      ok: false,
      error: { code: 'refused', message: expect.stringMatching(new RegExp(`incomplete \\(List of ${paymentIntentId}'s refunds failed: StripeRateLimitError`)) },
    });
    expect((await operationRow(h, id)).status).toBe('unknown');
    // Asked again once List answers: settled.
    expect((await cli(['review', 'resolve', id, '--as', 'failed', ...because], env)).code).toBe(0);
  });

  it('is refused while a request may still be running until its lease end (a worker that died mid-send)', async () => {
    const { id } = await intoReviewNothingRefunded(async (refundOp) => {
      // A claim whose worker dies before it records anything: its request may run until the lease
      // end. The lease is made to have run out in the database, as if its time had passed.
      const dead = await claimById(h.db.pool, refundOp, randomUUID(), 600_000, 'dead-worker');
      expect(dead?.claimed).not.toBeNull();
      await h.db.pool.query('UPDATE payment_operations SET lease_until = now(), next_attempt_at = now() WHERE id = $1', [refundOp]);
    });
    // Its trail is 3 minutes old (past LIST_SETTLE_MS after the last recorded outcome), but the dead
    // claim's lease (LEASE_MS, 10 min) has not ended: it may still be sending.
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], { ...env, LEASE_MS: '600000' });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/ran until \S+ at the latest \(its outcome, or the lease end of a claim that recorded none\).*try again after/);
    expect((await operationRow(h, id)).status).toBe('unknown');
    // The lease end the claim RECORDED decides, not the reader's LEASE_MS: a reader configured with a
    // 30 s lease is refused all the same (it would otherwise take a claim still sending for finished).
    const shortReader = await cli(['review', 'resolve', id, '--as', 'failed', ...because], { ...env, LEASE_MS: '30000' });
    expect(shortReader.code).toBe(1);
    expect(shortReader.stderr).toMatch(/ran until \S+ at the latest/);
    // Once that lease end (+ LIST_SETTLE_MS) is past: allowed.
    await sentAgo(id, '13 minutes');
    const later = await cli(['review', 'resolve', id, '--as', 'failed', ...because], { ...env, LEASE_MS: '30000' });
    expect(later.stderr).toMatch(/^target: local pipeline — [^\n]*\(as said, not verified\)$/);
    expect(later.code).toBe(0);
  });

  it('is refused until the List settle delay has passed since the last send (Stripe may still be executing it)', async () => {
    const { id } = await intoReviewNothingRefunded(undefined, { settled: false });
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/Stripe may still be executing it 120 s after \(LIST_SETTLE_MS\).*try again after/);
    await sentAgo(id, '3 minutes');
    expect((await cli(['review', 'resolve', id, '--as', 'failed', ...because], env)).code).toBe(0);
  });
});

describe('review reissue (a refund)', () => {
  it('authorises key generation + 1 on the same proof as failed; the next execution refunds once under the new key', async () => {
    const { id } = await intoReviewNothingRefunded();
    const { code, response } = await cliJson(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(code).toBe(0);
    expect(resultOf(response, 'review reissue')).toMatchObject({ previousKey: idempotencyKey(id, 0), newKey: idempotencyKey(id, 1), operation: { status: 'pending', keyGeneration: 1 } });
    expect((await auditEvents(h, id)).at(-1)).toMatchObject({ action: 'operator_reissued', detail: expect.objectContaining({ evidence: expect.objectContaining({ refunds: [] }) }) });
    const executed = await engine(h).reconcileDue(100);
    expect(executed.find((x) => x.operationId === id)).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(refundsAtStripe(id)).toEqual([expect.objectContaining({ status: 'succeeded', amount: 400, idempotencyKey: idempotencyKey(id, 1) })]);
  });

  it('is refused while a refund of ours is pending, and allowed once it failed at Stripe', async () => {
    const { id, refundId } = await intoReviewRefundPending();
    const refused = await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(new RegExp(`${refundId} pending`));
    h.stripe.fake.settleRefund(refundId, 'failed');
    await sentAgo(id, '3 minutes');
    const ok = await cliJson(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(ok.code).toBe(0);
    expect(resultOf(ok.response, 'review reissue').operation).toMatchObject({ keyGeneration: 1, externalId: null });
    expect((await auditEvents(h, id)).at(-1)).toMatchObject({ action: 'operator_reissued', external_id: refundId });
  });
});

describe('the duplicate-charge remedy’s refund in review', () => {
  it('is judged on the EXTRA PaymentIntent’s refunds (not the charge’s), and reissued refunds that one once', async () => {
    const c = await charged({ amount: 800 });
    // A second succeeded PaymentIntent for the order, made behind the pipeline's back.
    const sdk = createStripeClient({ apiKey: 'sk_test_ops', apiBase: h.stripe.fake.url, maxNetworkRetries: 0 });
    const extra = await sdk.paymentIntents.create(
      { amount: 800, currency: 'eur', customer: c.input.customerId, payment_method: c.input.paymentMethod, confirm: true, off_session: true, metadata: { operation_id: c.chargeId, order_id: c.input.orderId, key_generation: '1' } },
      { idempotencyKey: `someone-else-${randomUUID()}` },
    );
    const e = engine(h, { policy: { ambiguousResolution: 'review' } });
    h.stripe.fake.injectFault({ endpoint: 'refund_create', paymentIntentId: extra.id }, 'error_500_before_commit');
    const remedy = await e.remedyDuplicateCharge(c.chargeId, { id: extra.id, status: extra.status, amount: extra.amount, currency: extra.currency, metadata: extra.metadata });
    const id = remedy.refundOperationId!;
    expect(remedy.execution?.status).toBe('unknown');
    await windowExpired(h, id);
    await e.executeCharge(id);
    expect(await reviewReason(h, id)).toMatch(/List proves that no Refund exists/);
    await sentAgo(id, '3 minutes');
    // A refund of the charge's own PaymentIntent is no evidence about the remedy's.
    await engine(h).processRefund(refundOf(c.input.orderId, { amount: 100 }));

    const shown = resultOf((await cliJson(['review', 'show', id], env)).response, 'review show');
    expect(shown.operation.refund).toMatchObject({ refundId: duplicateRefundId(extra.id), reason: 'duplicate', paymentIntent: extra.id });
    expect(shown.stripe).toMatchObject({ kind: 'refund', complete: true, refundedPaymentIntent: extra.id, refunds: [], unrelated: [] });
    expect(shown.options?.reissue).toEqual({ allowed: true });
    expect((await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env)).code).toBe(0);
    await engine(h).reconcileDue(100);
    expect(h.stripe.fake.refunds({ paymentIntentId: extra.id })).toEqual([expect.objectContaining({ status: 'succeeded', amount: 800, idempotencyKey: idempotencyKey(id, 1) })]);
    expect((await outboxRows(h, id)).map((r) => r.event_type)).toEqual(['Refund Needs Review', 'Charge Duplicate Refunded']);
  });
});
