// The checker must be able to fail: every violation kind is provoked here on a hand-broken state and
// must be reported, with its operation; the healthy states around it must pass. A checker that cannot
// fail proves nothing about the soak or the model that rely on it.
import { randomUUID } from 'node:crypto';
import { checkExpiredAuthorizations } from '../../lambdas/payments/authorization-expiry.ts';
import { reissueInReview } from '../../lambdas/payments/review.ts';
import { watchTimings } from '../../lambdas/payments/decisions.ts';
import { afterAll, describe, expect, it } from 'vitest';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import { checkInvariants, formatReport, VIOLATION_KINDS, type CheckInvariantsInput, type ViolationKind } from '../../local/invariants.ts';
import { readDatabaseCounts } from '../../local/pipeline.ts';
import type { TestDatabase } from '../support/db.ts';
import { driveOperation, FAST_LIST_POLICY, testEngine } from '../support/engine.ts';
import { chargeOrder } from '../support/orders.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { ageRows } from '../lifecycle/support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
// The fake's clock, on which authorizations expire: moved forward by a test, never slept on.
let clock = Date.now();
const DAY_MS = 24 * 3_600_000;
useWorld('invariants', (w) => ({ db, stripe } = w), { fake: { now: () => clock } });

const engine = () => testEngine({ db, stripe }, { actor: 'checker-test' });
/** This file's orders: `inv-…` (a test makes a stranger's order id from it), 1500 (what fakeSucceededPi forges). */
const order = (overrides: Partial<ChargeInput> = {}): ChargeInput => chargeOrder({ orderId: `inv-${randomUUID()}`, amount: 1500, ...overrides });

/** A small, healthy world made by the real engine: one success, one decline, one open, one in review. */
async function healthyWorld() {
  const e = engine();
  const paid = order();
  const declined = order({ paymentMethod: 'pm_card_chargeDeclined' });
  const open = order();
  const review = order();
  const [paidResult, declinedResult] = await e.processRequests([paid, declined]);
  const openId = await e.requestCharge(open);
  stripe.fake.injectFault({ operationId: openId }, 'error_500_before_commit');
  await e.executeCharge(openId); // unknown, nothing at Stripe
  const reviewId = await e.requestCharge(review);
  // Sent a day ago (so the key window is over) and Search finds nothing: a human must decide.
  await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours' WHERE id = $1`, [reviewId]);
  await e.executeCharge(reviewId);
  const orders = [paid, declined, open, review].map((o) => o.orderId);
  return {
    orders,
    paidId: paidResult!.operationId,
    declinedId: declinedResult!.operationId,
    openId,
    reviewId,
    paid,
    check: (overrides: Partial<CheckInvariantsInput> = {}) =>
      checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds: orders, sentOrderIds: orders, ...overrides }),
  };
}

/**
 * Manual capture by the real engine: authorizations captured in full, in part (600 of 1500), canceled,
 * one Stripe let expire (the fake's clock moved past its 7 days; the expiry check, told no validity
 * is left, recorded it), and one still held (made after that).
 */
async function authorizationWorld() {
  const e = engine();
  const inputs = { full: order({ captureMethod: 'manual' }), partial: order({ captureMethod: 'manual' }), canceled: order({ captureMethod: 'manual' }), expired: order({ captureMethod: 'manual' }) };
  const charged = await e.processRequests(Object.values(inputs));
  expect(charged.map((r) => r?.execution?.status)).toEqual(['succeeded', 'succeeded', 'succeeded', 'succeeded']);
  const settle = async (input: Parameters<ReturnType<typeof engine>['processAuthorization']>[0]) => {
    const result = await e.processAuthorization(input);
    expect(result.execution?.status).toBe('succeeded');
    return result.operationId!;
  };
  const captureFull = await settle({ kind: 'capture', orderId: inputs.full.orderId });
  const capturePartial = await settle({ kind: 'capture', orderId: inputs.partial.orderId, amount: 600 });
  const cancel = await settle({ kind: 'cancel_authorization', orderId: inputs.canceled.orderId });
  clock += 8 * DAY_MS;
  const run = await checkExpiredAuthorizations({ db: db.pool, gateway: stripe.gateway, validityMs: 0, lookMarginMs: 0 });
  expect(run.expired).toBe(1);
  const { rows } = await db.pool.query<{ id: string }>(
    `SELECT s.id::text FROM payment_operations s JOIN payment_operations c ON c.id = s.parent_operation_id WHERE c.order_id = $1 AND s.cancellation_reason = 'expired'`,
    [inputs.expired.orderId],
  );
  const held = order({ captureMethod: 'manual' });
  const [heldResult] = await e.processRequests([held]);
  const orders = [...Object.values(inputs), held].map((o) => o.orderId);
  const chargeOf = (i: number) => (i < 4 ? charged[i]! : heldResult!).operationId;
  const piOf = (orderId: string) => stripe.fake.paymentIntents().find((pi) => pi.metadata.order_id === orderId)!;
  return {
    inputs: { ...inputs, held },
    orders,
    ops: { full: chargeOf(0), partial: chargeOf(1), canceled: chargeOf(2), expired: chargeOf(3), held: chargeOf(4), captureFull, capturePartial, cancel, expiry: rows[0]!.id },
    piOf,
    /** The fake's record with one PaymentIntent replaced by `forged` (what Stripe would hold had it done otherwise). */
    forge: (orderId: string, forged: Partial<PaymentIntentRecord>) => stripe.fake.paymentIntents().map((pi) => (pi.metadata.order_id === orderId ? { ...pi, ...forged } : pi)),
    check: (overrides: Partial<CheckInvariantsInput> = {}) =>
      checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds: orders, sentOrderIds: orders, requireQuiescent: true, ...overrides }),
  };
}

function fakeSucceededPi(base: Partial<PaymentIntentRecord> & { metadata: Record<string, string> }): PaymentIntentRecord {
  return {
    id: `pi_forged_${randomUUID().replaceAll('-', '')}`,
    object: 'payment_intent',
    amount: 1500,
    currency: 'eur',
    customer: 'cus_test',
    payment_method: 'pm_card_visa',
    status: 'succeeded',
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    capture_method: 'automatic',
    confirmation_method: 'automatic',
    last_payment_error: null,
    idempotencyKey: null,
    createdAtMs: Date.now(),
    ...base,
  };
}

describe('checkInvariants on healthy states', () => {
  it('passes a world made by the engine, and counts it', async () => {
    const w = await healthyWorld();
    const report = await w.check();
    expect(report.violations).toEqual([]);
    expect(report).toMatchObject({
      ok: true,
      operations: 4,
      byStatus: { succeeded: 1, failed: 1, unknown: 2, pending: 0 },
      inReview: 1,
      open: 1,
      sentOrders: 4,
    });
    expect(report.paymentIntents.byStatus).toEqual({ succeeded: 1, requires_payment_method: 1 });
    expect(formatReport(report)).toContain('invariants: OK');
  });

  it('authorizations captured in full, in part, canceled, expired and still held: no violation, no warning, each PaymentIntent as recorded', async () => {
    const w = await authorizationWorld();
    // Refunds given: the net amount is judged too (what each capture took).
    const report = await w.check({ refunds: stripe.fake.refunds() });
    expect(report.violations).toEqual([]);
    expect(report.warnings).toEqual([]);
    expect([w.inputs.full, w.inputs.partial, w.inputs.canceled, w.inputs.expired, w.inputs.held].map((o) => {
      const pi = w.piOf(o.orderId);
      return [pi.status, pi.amount_received, pi.cancellation_reason ?? null];
    })).toEqual([['succeeded', 1500, null], ['succeeded', 600, null], ['canceled', 0, null], ['canceled', 0, 'automatic'], ['requires_capture', 0, null]]);
    // What Stripe kept: what each capture took, nothing of a released or held one.
    expect(w.orders.map((o) => report.expectedNet.get(o))).toEqual([1500, 600, 0, 0, 0]);
  });

  it('an open operation is fine while running, `unsettled` when quiescence is required', async () => {
    const w = await healthyWorld();
    expect((await w.check({ requireQuiescent: false })).ok).toBe(true);
    const report = await w.check({ requireQuiescent: true });
    expect(report.violations).toEqual([{ kind: 'unsettled', operationId: w.openId, orderId: expect.any(String), detail: expect.stringContaining('unknown') }]);
  });

  it('an order in rejected_messages or in the DLQ is not lost', async () => {
    const w = await healthyWorld();
    const rejected = `inv-rejected-${randomUUID()}`;
    const inDlq = `inv-dlq-${randomUUID()}`;
    await db.pool.query(
      `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, body_sha256, raw_body) VALUES ($1, 'invalid_body', 'amount: must be positive', $2, 'x', '{}')`,
      [randomUUID(), rejected],
    );
    const report = await w.check({ orderIds: [...w.orders, rejected, inDlq], sentOrderIds: [...w.orders, rejected, inDlq], dlqOrderIds: [inDlq] });
    expect(report.violations).toEqual([]);
    expect(report.rejectedMessages).toBe(1);
  });

  it('a succeeded charge unknown to an operation in review is a warning, not a violation', async () => {
    const w = await healthyWorld();
    const pi = fakeSucceededPi({ metadata: { operation_id: w.reviewId, order_id: w.orders[3]!, key_generation: '0' } });
    const report = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), pi], requireQuiescent: false });
    expect(report.ok).toBe(true);
    const quiescent = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), pi], orderIds: [w.orders[0]!, w.orders[3]!], sentOrderIds: [] , requireQuiescent: true });
    expect(quiescent.violations).toEqual([]);
    expect(quiescent.warnings).toEqual([expect.objectContaining({ kind: 'charge_awaiting_review', operationId: w.reviewId })]);
  });

  it('a refund waiting for a charge in review waits for a human with it: a warning and counted in review; waiting for an open charge it is `unsettled` when quiescent', async () => {
    const w = await healthyWorld();
    const before = await readDatabaseCounts(db.pool);
    const refund = (orderId: string) => engine().processRefund({ orderId, refundId: `rf-${randomUUID()}`, amount: 100, reason: null });
    const behindReview = await refund(w.orders[3]!);
    const behindOpen = await refund(w.orders[2]!);
    expect([behindReview.rejection, behindOpen.rejection]).toEqual([null, null]);
    const afterwards = await readDatabaseCounts(db.pool);
    // Not work for a machine (nothing can claim it until a person settles the charge): not `open`.
    expect(afterwards.inReview - before.inReview).toBe(1);
    expect(afterwards.open - before.open).toBe(1);
    const quiet = await w.check({ orderIds: [w.orders[3]!], sentOrderIds: [], requireQuiescent: true });
    expect(quiet.violations).toEqual([]);
    expect(quiet.warnings).toEqual([expect.objectContaining({ kind: 'refund_awaiting_review', operationId: behindReview.operationId, detail: expect.stringContaining('in review') })]);
    const stuck = await w.check({ orderIds: [w.orders[2]!], sentOrderIds: [], requireQuiescent: true });
    // Exactly those two: the open charge and the refund behind it.
    expect(stuck.violations.map((v) => [v.kind, v.operationId]).sort()).toEqual([['unsettled', w.openId], ['unsettled', behindOpen.operationId]].sort());
    expect(stuck.warnings).toEqual([]);
  });

  it('a refund waiting behind its charge in review waits for that human; behind an open charge not in review it is `unsettled`', async () => {
    const w = await healthyWorld();
    const refundOf = (orderId: string) => engine().requestRefund({ orderId, refundId: `rf-${randomUUID()}`, amount: 100, reason: null });
    await refundOf(w.orders[3]!); // the charge is in review
    const openRefundId = await refundOf(w.orders[2]!); // the charge is open, the machines still work on it
    const behindReview = await w.check({ orderIds: [w.orders[3]!], sentOrderIds: [], requireQuiescent: true });
    expect(behindReview.violations).toEqual([]);
    const behindOpen = await w.check({ orderIds: [w.orders[2]!], sentOrderIds: [], requireQuiescent: true });
    expect(behindOpen.violations.map((v) => [v.kind, v.operationId])).toEqual([['unsettled', w.openId], ['unsettled', openRefundId]]);
  });
});

describe('checkInvariants detects every kind of broken promise', () => {
  const seen = new Set<ViolationKind>();
  afterAll(() => {
    // The list of kinds and the list of proofs must not drift apart.
    expect([...seen].sort()).toEqual([...VIOLATION_KINDS].sort());
  });
  /** One violation the planted defect must cause: its kind, operation (or none), order, and what its detail says. */
  interface Expected {
    readonly kind: ViolationKind;
    readonly operationId?: string;
    readonly orderId: string;
    readonly detail?: RegExp;
  }
  /**
   * The report holds EXACTLY these violations, in the checker's order (each kind is found in its own
   * pass): a checker that flags too much fails here as surely as one that misses the defect.
   */
  const expectViolations = (report: Awaited<ReturnType<typeof checkInvariants>>, expected: readonly Expected[]) => {
    expect(report.violations.map((v) => ({ kind: v.kind, operationId: v.operationId ?? null, orderId: v.orderId ?? null, detail: v.detail }))).toEqual(
      expected.map((e) => ({ kind: e.kind, operationId: e.operationId ?? null, orderId: e.orderId, detail: e.detail ? expect.stringMatching(e.detail) : expect.any(String) })),
    );
    expect(report.ok).toBe(expected.length === 0);
    for (const e of expected) {
      expect(formatReport(report)).toContain(e.kind);
      seen.add(e.kind);
    }
  };

  it('a clean world, every input given (refunds, sent orders and refunds, a rejection, the DLQ): exactly no violation and no warning', async () => {
    const w = await healthyWorld();
    const refund = await engine().processRefund({ orderId: w.paid.orderId, refundId: `rf-${randomUUID()}`, amount: 500, reason: null });
    expect(refund.execution?.status).toBe('succeeded');
    const rejected = `inv-rejected-${randomUUID()}`;
    const inDlq = `inv-dlq-${randomUUID()}`;
    await db.pool.query(
      `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, body_sha256, raw_body) VALUES ($1, 'refund_rejected', 'no_charge', $2, 'x', $3)`,
      [randomUUID(), rejected, JSON.stringify({ type: 'refund', orderId: rejected, refundId: 'rf-r', amount: 1 })],
    );
    const orders = [...w.orders, rejected, inDlq];
    const report = await w.check({
      refunds: stripe.fake.refunds(),
      orderIds: [...w.orders.filter((o) => o !== w.orders[2]), rejected, inDlq], // the open one is judged (and must be unsettled) below
      sentOrderIds: orders.filter((o) => o !== w.orders[2]),
      sentRefunds: [{ orderId: w.paid.orderId, refundId: refund.input.refundId }, { orderId: rejected, refundId: 'rf-r' }, { orderId: inDlq, refundId: 'rf-d' }],
      dlqOrderIds: [inDlq],
      requireQuiescent: true,
    });
    expect(report.violations).toEqual([]);
    expect(report.warnings).toEqual([]);
    expect(report).toMatchObject({ ok: true, sentOrders: 5, sentRefunds: 3, rejectedMessages: 1, dlqOrders: 1 });
  });

  it('double_charge: a second succeeded PaymentIntent for one order', async () => {
    const w = await healthyWorld();
    const real = stripe.fake.paymentIntents({ operationId: w.paidId })[0]!;
    const second = { ...real, id: `${real.id}_again`, idempotencyKey: 'a-fresh-key' };
    const report = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), second] });
    expectViolations(report, [{ kind: 'double_charge', operationId: w.paidId, orderId: w.paid.orderId, detail: new RegExp(`2 succeeded PaymentIntents: ${real.id} .*${second.id} \\(key a-fresh-key\\)`) }]);
  });

  it('double_charge: the real thing, a new key per retry (the anti-pattern) at the fake Stripe', async () => {
    const w = await healthyWorld();
    const metadata = { operation_id: w.paidId, order_id: w.paid.orderId, key_generation: '0' };
    const naive = await stripe.gateway.createPaymentIntent({ ...w.paid, idempotencyKey: `naive-${randomUUID()}`, metadata });
    expect(naive.ok).toBe(true);
    expectViolations(await w.check(), [{ kind: 'double_charge', operationId: w.paidId, orderId: w.paid.orderId, detail: /2 succeeded PaymentIntents: .*key naive-/ }]);
  });

  it('a double charge whose remedy waits for a human is a warning; one whose remedy Stripe refused as a key misuse is a violation', async () => {
    const w = await healthyWorld();
    const metadata = { operation_id: w.paidId, order_id: w.paid.orderId, key_generation: '0' };
    const extra = await stripe.gateway.createPaymentIntent({ ...w.paid, idempotencyKey: `another-system-${randomUUID()}`, metadata });
    if (!extra.ok) throw new Error('second charge not made');
    // The remedy's refund meets a 500 (nothing executed): unknown, then (hand-broken, as the key
    // window passing would) in review with the engine's reason.
    stripe.fake.injectFault({ endpoint: 'refund_create', paymentIntentId: extra.value.id }, 'error_500_before_commit');
    const remedy = await engine().remedyDuplicateCharge(w.paidId, extra.value);
    expect(remedy.execution).toMatchObject({ status: 'unknown' });
    const reason = 'List proves that no Refund exists for this operation, but it is not re-issued automatically: the key window has passed';
    await db.pool.query(`UPDATE payment_operations SET review_reason = $2, next_attempt_at = NULL WHERE id = $1`, [remedy.refundOperationId, reason]);
    const waiting = await w.check({ refunds: stripe.fake.refunds() });
    expect(waiting.violations).toEqual([]);
    expect(waiting.warnings).toEqual([{ kind: 'duplicate_awaiting_review', operationId: w.paidId, orderId: w.paid.orderId, detail: `${extra.value.id} still charged; the remedy waits for a human: ${reason}` }]);
    // The same remedy in review because Stripe refused its key (a bug in key use): still a double charge.
    await db.pool.query(`UPDATE payment_operations SET last_error_class = 'StripeIdempotencyError' WHERE id = $1`, [remedy.refundOperationId]);
    const misused = await w.check({ refunds: stripe.fake.refunds() });
    expectViolations(misused, [{ kind: 'double_charge', operationId: w.paidId, orderId: w.paid.orderId, detail: new RegExp(extra.value.id) }]);
    expect(misused.warnings).toEqual([]);
  });

  /** The healthy world plus a refund of 500 of the paid order through the engine. */
  async function refundedWorld() {
    const w = await healthyWorld();
    const refund = await engine().processRefund({ orderId: w.paid.orderId, refundId: `rf-${randomUUID()}`, amount: 500, reason: null });
    expect(refund.execution?.status).toBe('succeeded');
    const healthy = await w.check({ refunds: stripe.fake.refunds() });
    expect(healthy.violations).toEqual([]);
    return { ...w, refundOperationId: refund.operationId!, refund: stripe.fake.refunds({ operationId: refund.operationId! })[0]! };
  }

  it('net_amount: Stripe kept another amount than asked minus the refunds the pipeline made (a refund behind its back)', async () => {
    const w = await refundedWorld();
    const extra = { ...w.refund, id: 're_behind_the_back', amount: 100, metadata: {} };
    // The refund nobody asked for is also one no operation knows.
    expectViolations(await w.check({ refunds: [...stripe.fake.refunds(), extra] }), [
      { kind: 'net_amount', operationId: w.paidId, orderId: w.paid.orderId, detail: /^Stripe kept 900 \(1 succeeded PaymentIntents, 600 refunded\); expected 1000 \(succeeded, 500 refunded by the pipeline\)$/ },
      { kind: 'unrecorded_refund', orderId: w.paid.orderId, detail: /re_behind_the_back of 100 .*known by no refund operation/ },
    ]);
  });

  it('over_refund: more refunded than charged for an order', async () => {
    const w = await refundedWorld();
    const extra = { ...w.refund, id: 're_too_much', amount: 5000, metadata: {} };
    expectViolations(await w.check({ refunds: [...stripe.fake.refunds(), extra] }), [
      { kind: 'over_refund', operationId: w.paidId, orderId: w.paid.orderId, detail: /^refunded 5500 of 1500 charged$/ },
      { kind: 'net_amount', operationId: w.paidId, orderId: w.paid.orderId, detail: /^Stripe kept -4000 / },
      { kind: 'unrecorded_refund', orderId: w.paid.orderId, detail: /re_too_much of 5000/ },
    ]);
  });

  it('succeeded_without_refund: a refund operation succeeded on a Refund Stripe does not have', async () => {
    const w = await refundedWorld();
    // Stripe then kept the whole charge, which the ledger says was partly refunded.
    expectViolations(await w.check({ refunds: stripe.fake.refunds().filter((r) => r.id !== w.refund.id) }), [
      { kind: 'net_amount', operationId: w.paidId, orderId: w.paid.orderId, detail: /^Stripe kept 1500 .*expected 1000/ },
      { kind: 'succeeded_without_refund', operationId: w.refundOperationId, orderId: w.paid.orderId, detail: new RegExp(`^external_id ${w.refund.id} is no Refund at Stripe$`) },
    ]);
  });

  it('refund_mismatch: a refund operation succeeded on a Refund of another amount', async () => {
    const w = await refundedWorld();
    const changed = stripe.fake.refunds().map((r) => (r.id === w.refund.id ? { ...r, amount: 499 } : r));
    expectViolations(await w.check({ refunds: changed }), [
      { kind: 'net_amount', operationId: w.paidId, orderId: w.paid.orderId, detail: /^Stripe kept 1001 .*expected 1000/ },
      { kind: 'refund_mismatch', operationId: w.refundOperationId, orderId: w.paid.orderId, detail: new RegExp(`^Refund ${w.refund.id}: amount 499 ≠ 500$`) },
    ]);
  });

  it('unrecorded_refund: a refund at Stripe that no refund operation names (made behind the pipeline’s back)', async () => {
    const w = await refundedWorld();
    const extra = { ...w.refund, id: 're_nobody_knows', amount: 1, metadata: {} };
    expectViolations(await w.check({ refunds: [...stripe.fake.refunds(), extra] }), [
      { kind: 'net_amount', operationId: w.paidId, orderId: w.paid.orderId, detail: /^Stripe kept 999 / },
      { kind: 'unrecorded_refund', orderId: w.paid.orderId, detail: /^succeeded Refund re_nobody_knows of 1 on pi_\w+ \(operation_id none\) is known by no refund operation$/ },
    ]);
    // A failed one returned nothing: no violation at all.
    expect((await w.check({ refunds: [...stripe.fake.refunds(), { ...extra, status: 'failed' as const }] })).violations).toEqual([]);
  });

  it('unsafe_reissue: a new key generation while an older generation’s PaymentIntent may still charge', async () => {
    const w = await healthyWorld();
    const [op] = (await db.pool.query('SELECT * FROM payment_operations WHERE id = $1', [w.reviewId])).rows;
    const reissued = await reissueInReview(db.pool, {
      fence: { operationId: w.reviewId, status: op.status, reviewReason: op.review_reason, keyGeneration: 0 },
      actor: 'operator:test',
      detail: {},
      watch: watchTimings(),
    });
    expect(reissued?.operation.keyGeneration).toBe(1);
    // Created BEFORE the re-issue: the proof the re-issue rested on should have seen it.
    const older = fakeSucceededPi({ status: 'processing', createdAtMs: Date.now() - 3_600_000, metadata: { operation_id: w.reviewId, order_id: w.orders[3]!, key_generation: '0' } });
    expectViolations(await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), older] }), [
      { kind: 'unsafe_reissue', operationId: w.reviewId, orderId: w.orders[3]!, detail: new RegExp(`^re-issued to key generation 1 while PaymentIntent ${older.id} of generation 0 is processing$`) },
    ]);
    // A declined older generation is no charge and can never become one: no violation.
    const harmless = { ...older, status: 'requires_payment_method' as const };
    expect((await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), harmless] })).violations).toEqual([]);
  });

  it('a late commit — created by Stripe under a retired generation AFTER the re-issue — is no unsafe_reissue; its money is judged as an extra charge', async () => {
    const w = await healthyWorld();
    const [op] = (await db.pool.query('SELECT * FROM payment_operations WHERE id = $1', [w.reviewId])).rows;
    await reissueInReview(db.pool, {
      fence: { operationId: w.reviewId, status: op.status, reviewReason: op.review_reason, keyGeneration: 0 },
      actor: 'operator:test',
      detail: {},
      watch: watchTimings(),
    });
    const late = fakeSucceededPi({ status: 'processing', createdAtMs: Date.now() + 1_000, metadata: { operation_id: w.reviewId, order_id: w.orders[3]!, key_generation: '0' } });
    const report = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), late] });
    expect(report.violations).toEqual([]);
    expect(report.lateCommits).toBe(1);
    // The same one created a moment before the re-issue: unsafe.
    const before = { ...late, createdAtMs: Date.parse(String((await db.pool.query("SELECT max(occurred_at) AS at FROM payment_operation_events WHERE operation_id = $1 AND action = 'operator_reissued'", [w.reviewId])).rows[0].at)) - 1 };
    expect((await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), before] })).violations.map((v) => v.kind)).toEqual(['unsafe_reissue']);
  });

  it('held_twice: a late hold of a manual charge final with another, that no open finding names; found, the warning late_hold_found', async () => {
    // A manual charge whose first create met a 500 before commit: two proofs of absence, the automatic
    // re-issue, generation 1 held. Stripe then commits generation 0's authorization (forged here).
    const input = order({ captureMethod: 'manual' });
    const e = testEngine({ db, stripe }, { actor: 'checker-test', policy: { ...FAST_LIST_POLICY, sameKeyResends: 0 } });
    const id = await e.requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await driveOperation(db.pool, e, id);
    const [op] = (await db.pool.query('SELECT status, key_generation, external_id FROM payment_operations WHERE id = $1', [id])).rows;
    expect(op).toMatchObject({ status: 'succeeded', key_generation: 1 });
    const late = fakeSucceededPi({ status: 'requires_capture', capture_method: 'manual', createdAtMs: Date.now() + 1_000, metadata: { operation_id: id, order_id: input.orderId, key_generation: '0' } });
    const check = () => checkInvariants({ db: db.pool, paymentIntents: [...stripe.fake.paymentIntents(), late], orderIds: [input.orderId], sentOrderIds: [input.orderId], requireQuiescent: true });
    expectViolations(await check(), [
      { kind: 'held_twice', operationId: id, orderId: input.orderId, detail: new RegExp(`^PaymentIntent ${late.id} of key generation 0 holds 1500 \\(requires_capture\\) while the operation is succeeded with ${op.external_id}, and no open finding names it$`) },
    ]);
    const checkWith = (pi: PaymentIntentRecord) => checkInvariants({ db: db.pool, paymentIntents: [...stripe.fake.paymentIntents(), pi], orderIds: [input.orderId], sentOrderIds: [input.orderId], requireQuiescent: true });
    // Held until Stripe let the authorization expire, and nobody told: the same (and a finding about it is explained by it).
    const expired = await checkWith({ ...late, status: 'canceled', cancellation_reason: 'automatic' });
    expect(expired.lateCommitIds).toEqual([late.id]);
    expectViolations(expired, [
      { kind: 'held_twice', operationId: id, orderId: input.orderId, detail: /held 1500 \(until Stripe let it expire\) while the operation is succeeded/ },
    ]);
    // Released by a person (a cancel asked for): nothing to say.
    expect((await checkWith({ ...late, status: 'canceled', cancellation_reason: 'requested_by_customer' })).violations).toEqual([]);
    // Told: the watch's finding (as the watch after the re-issue writes it) makes it a warning.
    await db.pool.query(
      `INSERT INTO stripe_event_findings (kind, payment_intent_id, operation_id, claimed_operation_id, order_id, amount, currency, status, reason, detail, source)
       VALUES ('contradiction', $1, $2::uuid, $2::text, $3, 1500, 'eur', 'requires_capture', 'a second authorization holds the customer''s funds', '{}', 'watch')`,
      [late.id, id, input.orderId],
    );
    const told = await check();
    expect(told.violations).toEqual([]);
    expect(told.warnings).toEqual([expect.objectContaining({ kind: 'late_hold_found', operationId: id, detail: expect.stringContaining(late.id) })]);
  });

  it('a re-issue that names the List proof it rested on was left at that proof: Stripe created after it, even before the re-issue was written, is a late commit', async () => {
    const w = await healthyWorld();
    const [op] = (await db.pool.query('SELECT * FROM payment_operations WHERE id = $1', [w.reviewId])).rows;
    // The engine's automatic re-issue records the claim before its List as provenAt; here a re-issue
    // written ten seconds after such a proof.
    const provenAt = Date.now() - 10_000;
    await reissueInReview(db.pool, {
      fence: { operationId: w.reviewId, status: op.status, reviewReason: op.review_reason, keyGeneration: 0 },
      actor: 'operator:test',
      detail: { provenAt: new Date(provenAt).toISOString() },
      watch: watchTimings(),
    });
    const between = fakeSucceededPi({ status: 'processing', createdAtMs: provenAt + 5_000, metadata: { operation_id: w.reviewId, order_id: w.orders[3]!, key_generation: '0' } });
    const report = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), between] });
    expect(report.violations).toEqual([]);
    expect(report.lateCommitIds).toEqual([between.id]);
    // One that existed before the proof: the proof should have seen it.
    const before = { ...between, createdAtMs: provenAt - 1 };
    expect((await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), before] })).violations.map((v) => v.kind)).toEqual(['unsafe_reissue']);
  });

  it('lost_order: sent, but nowhere', async () => {
    const w = await healthyWorld();
    const lost = `inv-lost-${randomUUID()}`;
    expectViolations(await w.check({ orderIds: [...w.orders, lost], sentOrderIds: [...w.orders, lost] }), [
      { kind: 'lost_order', orderId: lost, detail: /^sent, but no operation, no rejected_messages row and not in the DLQ$/ },
    ]);
  });

  it('lost_refund: a refund request sent, acknowledged, and nowhere — not its operation, not its rejection, not the DLQ', async () => {
    const w = await refundedWorld();
    const made = await db.pool.query<{ refund_id: string }>(`SELECT refund_id FROM payment_operations WHERE id = $1`, [w.refundOperationId]);
    const rejectedBody = { type: 'refund', orderId: w.paid.orderId, refundId: 'rf-refused', amount: 99_999 };
    await db.pool.query(
      `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, body_sha256, raw_body) VALUES ($1, 'refund_rejected', 'exceeds_charge', $2, 'x', $3)`,
      [randomUUID(), w.paid.orderId, JSON.stringify(rejectedBody)],
    );
    const sentRefunds = [
      { orderId: w.paid.orderId, refundId: made.rows[0]!.refund_id }, // its operation
      { orderId: w.paid.orderId, refundId: made.rows[0]!.refund_id }, // a repeat: the same operation
      { orderId: w.paid.orderId, refundId: 'rf-refused' }, // its rejected_messages row
      { orderId: w.paid.orderId, refundId: 'rf-gone' }, // of an order that has both: lost all the same
      { orderId: w.orders[1]!, refundId: 'rf-of-declined' }, // nothing of it anywhere
    ];
    const report = await w.check({ refunds: stripe.fake.refunds(), sentRefunds });
    expectViolations(report, [
      { kind: 'lost_refund', orderId: w.paid.orderId, detail: /^refund rf-gone sent, but no refund operation, no rejected_messages row and not in the DLQ$/ },
      { kind: 'lost_refund', orderId: w.orders[1]!, detail: /^refund rf-of-declined sent/ },
    ]);
    expect(report.sentRefunds).toBe(4);
    // In the DLQ (its message group is its order), a refund is visible, not lost.
    expectViolations(await w.check({ refunds: stripe.fake.refunds(), sentRefunds, dlqOrderIds: [w.orders[1]!] }), [{ kind: 'lost_refund', orderId: w.paid.orderId, detail: /^refund rf-gone / }]);
  });

  it('wrongly_failed: failed, while its PaymentIntent succeeded', async () => {
    const w = await healthyWorld();
    const pis = stripe.fake.paymentIntents().map((pi) => (pi.metadata.operation_id === w.declinedId ? { ...pi, status: 'succeeded' as const } : pi));
    expectViolations(await w.check({ paymentIntents: pis }), [
      { kind: 'wrongly_failed', operationId: w.declinedId, orderId: w.orders[1]!, detail: /^operation is failed \(pi_\w+\) but PaymentIntent pi_\w+ succeeded$/ },
    ]);
  });

  it('succeeded_without_charge: succeeded, but its PaymentIntent is not (or does not exist)', async () => {
    const w = await healthyWorld();
    const processing = stripe.fake.paymentIntents().map((pi) => (pi.metadata.operation_id === w.paidId ? { ...pi, status: 'processing' as const } : pi));
    expectViolations(await w.check({ paymentIntents: processing }), [
      { kind: 'succeeded_without_charge', operationId: w.paidId, orderId: w.paid.orderId, detail: /^PaymentIntent pi_\w+ is processing, not succeeded$/ },
    ]);
    const missing = stripe.fake.paymentIntents().filter((pi) => pi.metadata.operation_id !== w.paidId);
    expectViolations(await w.check({ paymentIntents: missing }), [
      { kind: 'succeeded_without_charge', operationId: w.paidId, orderId: w.paid.orderId, detail: /^external_id pi_\w+ is no PaymentIntent at Stripe$/ },
    ]);
  });

  /**
   * Connect, made by the real engine against the fake (which keeps objects per Stripe-Account): a
   * direct charge on A with a fee and a refund of it (on A), a destination charge to B with a fee, a
   * platform charge. Healthy: no violation. The checker is then fed the fake's record with one fact
   * changed, as a pipeline that lost the Stripe-Account header (or sent another) would have left it.
   */
  async function connectWorld() {
    const A = 'acct_1CheckerAlpha';
    const B = 'acct_1CheckerBravo';
    stripe.fake.addConnectedAccount(A);
    stripe.fake.addConnectedAccount(B);
    const e = engine();
    const direct = order({ account: A, applicationFeeAmount: 75 });
    const destination = order({ transferDestination: B, applicationFeeAmount: 120 });
    const platform = order();
    const [d, t, p] = await e.processRequests([direct, destination, platform]);
    expect([d, t, p].map((r) => r?.execution?.status)).toEqual(['succeeded', 'succeeded', 'succeeded']);
    const refund = await e.processRefund({ orderId: direct.orderId, refundId: `rf-${randomUUID()}`, amount: 500, reason: null });
    expect(refund.execution?.status).toBe('succeeded');
    const orders = [direct, destination, platform].map((o) => o.orderId);
    const ids = { direct: d!.operationId, destination: t!.operationId, platform: p!.operationId, refund: refund.operationId! };
    const pis = stripe.fake.paymentIntents();
    const check = (paymentIntents = pis) => checkInvariants({ db: db.pool, paymentIntents, refunds: stripe.fake.refunds(), orderIds: orders, sentOrderIds: orders, requireQuiescent: true });
    /** The fake's record with the PaymentIntent of `operationId` changed. */
    const changed = (operationId: string, change: Partial<PaymentIntentRecord>) => pis.map((pi) => (pi.metadata.operation_id === operationId ? { ...pi, ...change } : pi));
    return { A, B, direct, destination, platform, ids, pis, check, changed };
  }

  it('wrong_account: a direct charge\'s PaymentIntent found on the platform or on another account, a platform charge\'s on a connected account', async () => {
    const w = await connectWorld();
    // Healthy: each on its account in the fake's own record (A's, the platform's for the other two).
    expect(w.pis.find((pi) => pi.metadata.operation_id === w.ids.direct)?.stripeAccount).toBe(w.A);
    const healthy = await w.check();
    expect(healthy.violations).toEqual([]);
    // On the platform: the charge's PaymentIntent, and the Refund made on it (a Refund is on its PaymentIntent's account).
    expectViolations(await w.check(w.changed(w.ids.direct, { stripeAccount: null })), [
      { kind: 'wrong_account', operationId: w.ids.direct, orderId: w.direct.orderId, detail: new RegExp(`^PaymentIntent pi_\\w+ is on the platform, the operation's account is ${w.A}$`) },
      { kind: 'wrong_account', operationId: w.ids.refund, orderId: w.direct.orderId, detail: new RegExp(`^Refund re_\\w+ is on the platform \\(its PaymentIntent pi_\\w+'s\\), the refund operation's account is ${w.A}$`) },
    ]);
    // On the other account.
    const onB = await w.check(w.changed(w.ids.direct, { stripeAccount: w.B }));
    expect(onB.violations.map((v) => [v.kind, v.operationId])).toEqual([['wrong_account', w.ids.direct], ['wrong_account', w.ids.refund]]);
    expect(onB.violations[0]!.detail).toContain(`is on ${w.B}, the operation's account is ${w.A}`);
    // A platform charge's PaymentIntent on a connected account.
    expectViolations(await w.check(w.changed(w.ids.platform, { stripeAccount: w.A })), [
      { kind: 'wrong_account', operationId: w.ids.platform, orderId: w.platform.orderId, detail: new RegExp(`is on ${w.A}, the operation's account is the platform$`) },
    ]);
  });

  it('wrong_account: a destination charge transferred elsewhere, or with another fee, than asked', async () => {
    const w = await connectWorld();
    expect(w.pis.find((pi) => pi.metadata.operation_id === w.ids.destination)).toMatchObject({ stripeAccount: null, transfer_data: { destination: w.B }, application_fee_amount: 120 });
    expectViolations(await w.check(w.changed(w.ids.destination, { transfer_data: { destination: w.A } })), [
      { kind: 'wrong_account', operationId: w.ids.destination, orderId: w.destination.orderId, detail: new RegExp(`transfer destination ${w.A} ≠ ${w.B} asked$`) },
    ]);
    expectViolations(await w.check(w.changed(w.ids.destination, { transfer_data: null, application_fee_amount: 121 })), [
      { kind: 'wrong_account', operationId: w.ids.destination, orderId: w.destination.orderId, detail: new RegExp(`transfer destination the platform ≠ ${w.B} asked; application fee 121 ≠ 120 asked$`) },
    ]);
    expectViolations(await w.check(w.changed(w.ids.direct, { application_fee_amount: null })), [
      { kind: 'wrong_account', operationId: w.ids.direct, orderId: w.direct.orderId, detail: /application fee none ≠ 75 asked$/ },
    ]);
  });

  it('charge_mismatch: succeeded on a PaymentIntent of another amount', async () => {
    const w = await healthyWorld();
    const pis = stripe.fake.paymentIntents().map((pi) => (pi.metadata.operation_id === w.paidId ? { ...pi, amount: pi.amount + 1 } : pi));
    expectViolations(await w.check({ paymentIntents: pis }), [
      { kind: 'charge_mismatch', operationId: w.paidId, orderId: w.paid.orderId, detail: /^PaymentIntent pi_\w+: amount 1501 ≠ 1500$/ },
    ]);
  });

  it('unrecorded_charge: a succeeded PaymentIntent no operation knows', async () => {
    const w = await healthyWorld();
    const strayOrder = w.orders[2]!.replace('inv-', 'inv-x');
    const stray = fakeSucceededPi({ metadata: { operation_id: randomUUID(), order_id: strayOrder, key_generation: '0' } });
    expectViolations(await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), stray], orderIds: [...w.orders, strayOrder], sentOrderIds: w.orders }), [
      { kind: 'unrecorded_charge', orderId: strayOrder, detail: new RegExp(`^succeeded PaymentIntent ${stray.id} \\(operation_id ${stray.metadata.operation_id}\\) has no operation$`) },
    ]);
  });

  it('unrecorded_charge: after quiescence a succeeded PaymentIntent whose operation is still open (not in review)', async () => {
    const w = await healthyWorld();
    const pi = fakeSucceededPi({ metadata: { operation_id: w.openId, order_id: w.orders[2]!, key_generation: '0' } });
    const running = await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), pi] });
    expect(running.violations).toEqual([]); // the reconciler may still find it
    // Quiescent, the open operation is also unsettled, as it is in the healthy world.
    expectViolations(await w.check({ paymentIntents: [...stripe.fake.paymentIntents(), pi], requireQuiescent: true }), [
      { kind: 'unrecorded_charge', operationId: w.openId, orderId: w.orders[2]!, detail: new RegExp(`^succeeded PaymentIntent ${pi.id}, but the operation is still unknown after quiescence$`) },
      { kind: 'unsettled', operationId: w.openId, orderId: w.orders[2]!, detail: /^still unknown \(1 attempts\) and not in review after quiescence$/ },
    ]);
  });

  it('unsettled: in review without a reason', async () => {
    const w = await healthyWorld();
    await db.pool.query(`UPDATE payment_operations SET review_reason = ' ' WHERE id = $1`, [w.openId]);
    expectViolations(await w.check(), [{ kind: 'unsettled', operationId: w.openId, orderId: w.orders[2]!, detail: /^in review with an empty reason$/ }]);
  });

  it('audit_mismatch: attempts without their outcome_recorded events, and a missing `requested`', async () => {
    const w = await healthyWorld();
    const orderId = `inv-noaudit-${randomUUID()}`;
    // Written behind the engine's back: a failed outcome with no trail at all (and so no outcome event either).
    const { rows } = await db.pool.query<{ id: string }>(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, attempts, settled_at, next_attempt_at)
       VALUES ($1, 100, 'eur', 'cus_test', 'pm_card_visa', 'failed', 1, now(), NULL) RETURNING id`,
      [orderId],
    );
    expectViolations(await w.check({ orderIds: [...w.orders, orderId] }), [
      { kind: 'audit_mismatch', operationId: rows[0]!.id, orderId, detail: /^0 'requested' events \(want 1\); attempts = 1 but 0 'outcome_recorded' events; row is failed but the last recorded transition is to nothing$/ },
      { kind: 'outbox_mismatch', operationId: rows[0]!.id, orderId, detail: /^want one 'Charge Failed', found \[\]$/ },
    ]);
  });

  it('audit_mismatch: an extra outcome_recorded event', async () => {
    const w = await healthyWorld();
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, step, from_status, to_status) VALUES ($1, 'forger', 'outcome_recorded', 'create', 'pending', 'succeeded')`,
      [w.paidId],
    );
    expectViolations(await w.check(), [
      { kind: 'audit_mismatch', operationId: w.paidId, orderId: w.paid.orderId, detail: /^attempts = 1 but 2 'outcome_recorded' events; 2 claim endings for 1 'attempt_started' events$/ },
    ]);
  });

  it('outbox_mismatch: an operation whose event sequences are not 1…n in write order', async () => {
    await healthyWorld();
    // An open operation whose review event is numbered 2 with no 1 before it (written by hand: no trail either).
    const orderId = `inv-seq-${randomUUID()}`;
    const open = await db.pool.query<{ id: string }>(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, review_reason, event_sequence)
       VALUES ($1, 100, 'eur', 'cus_test', 'pm_card_visa', 'unknown', 'forged', 2) RETURNING id`,
      [orderId],
    );
    const eventId = randomUUID();
    await db.pool.query(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1::uuid, $2::uuid, 'Charge Needs Review', jsonb_build_object('eventId', $1::text, 'operationId', $2::text, 'status', 'needs_review', 'reason', 'forged', 'sequence', 2))`,
      [eventId, open.rows[0]!.id],
    );
    expectViolations(await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds: [orderId] }), [
      { kind: 'audit_mismatch', operationId: open.rows[0]!.id, orderId, detail: /^0 'requested' events \(want 1\)$/ },
      { kind: 'outbox_mismatch', operationId: open.rows[0]!.id, orderId, detail: /^0 entries into review but 1 'Charge Needs Review' events; sequences \[2\] are not 1…1 in write order$/ },
    ]);
  });

  it('outbox_mismatch under retention: a missing event is accepted only when its state change is older than the cutoff the checker is told', async () => {
    const w = await healthyWorld();
    // The paid order's rows as if written ten days ago; the declined order's stay of now.
    await ageRows(db.pool, 10, { orderIds: [w.paid.orderId] });
    // Both final events gone, as retention would remove them (its guard set aside for the delete).
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL session_replication_role = replica');
      const gone = await client.query(`DELETE FROM outcome_events WHERE operation_id = ANY($1::uuid[])`, [[w.paidId, w.declinedId]]);
      expect(gone.rowCount).toBe(2);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    const missingPaid = { kind: 'outbox_mismatch', operationId: w.paidId, orderId: w.paid.orderId, detail: /^want one 'Charge Succeeded', found \[\]$/ } as const;
    const declinedOrder = w.orders[1]!;
    const missingDeclined = { kind: 'outbox_mismatch', operationId: w.declinedId, orderId: declinedOrder, detail: /^want one 'Charge Failed', found \[\]$/ } as const;
    const cutoff = (daysBack: number) => new Date(Date.now() - daysBack * 86_400_000);
    // Told of a cutoff five days back: the ten-day-old event may be gone, the one of today may not.
    expectViolations(await w.check({ outboxRemovedBefore: cutoff(5) }), [missingDeclined]);
    // A cutoff older than both, or none at all: neither was due, both are reported.
    const reported = (report: Awaited<ReturnType<typeof checkInvariants>>) => report.violations.map((v) => v.operationId).sort();
    expect(reported(await w.check({ outboxRemovedBefore: cutoff(20) }))).toEqual([w.paidId, w.declinedId].sort());
    expect(reported(await w.check())).toEqual([w.paidId, w.declinedId].sort());
    expectViolations(await w.check({ outboxRemovedBefore: cutoff(20) }), w.paidId < w.declinedId ? [missingPaid, missingDeclined] : [missingDeclined, missingPaid]);
  });

  it('outbox_mismatch: a final outcome without its event, or with a second one that contradicts it', async () => {
    const w = await healthyWorld();
    const { rows } = await db.pool.query<{ payload: Record<string, unknown> }>(`SELECT e.payload FROM outcome_events e WHERE operation_id = $1`, [w.paidId]);
    const eventId = randomUUID();
    await db.pool.query(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1, $2, 'Charge Failed', $3)`,
      [eventId, w.paidId, JSON.stringify({ ...rows[0]!.payload, eventId, status: 'failed', sequence: 2 })],
    );
    expectViolations(await w.check(), [
      { kind: 'outbox_mismatch', operationId: w.paidId, orderId: w.paid.orderId, detail: new RegExp(`^want one 'Charge Succeeded', found \\[Charge Succeeded, Charge Failed\\]; 'Charge Failed' ${eventId} disagrees on status failed$`) },
    ]);

    const orderId = `inv-noevent-${randomUUID()}`;
    const silent = await db.pool.query<{ id: string }>(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, settled_at, next_attempt_at)
       VALUES ($1, 100, 'eur', 'cus_test', 'pm_card_visa', 'failed', NULL, now(), NULL) RETURNING id`,
      [orderId],
    );
    // Written by hand, it has no trail either.
    expectViolations(await w.check({ orderIds: [orderId], sentOrderIds: [] }), [
      { kind: 'audit_mismatch', operationId: silent.rows[0]!.id, orderId, detail: /^0 'requested' events \(want 1\); row is failed but the last recorded transition is to nothing$/ },
      { kind: 'outbox_mismatch', operationId: silent.rows[0]!.id, orderId, detail: /^want one 'Charge Failed', found \[\]$/ },
    ]);
  });

  it('captured_over_authorized: Stripe received more than the charge authorized', async () => {
    const w = await authorizationWorld();
    const pi = w.piOf(w.inputs.full.orderId);
    expectViolations(await w.check({ paymentIntents: w.forge(w.inputs.full.orderId, { amount_received: 1600 }) }), [
      { kind: 'captured_over_authorized', operationId: w.ops.full, orderId: w.inputs.full.orderId, detail: new RegExp(`^PaymentIntent ${pi.id} received 1600, the charge authorized 1500$`) },
      // …and the capture recorded is not what Stripe holds.
      { kind: 'capture_mismatch', operationId: w.ops.captureFull, orderId: w.inputs.full.orderId, detail: /recorded 1500 captured, Stripe received 1600/ },
    ]);
  });

  it('captured_after_release: money taken at Stripe of an authorization recorded canceled, or expired', async () => {
    const w = await authorizationWorld();
    const captured = { status: 'succeeded', amount_received: 1500, cancellation_reason: null } as const;
    expectViolations(await w.check({ paymentIntents: w.forge(w.inputs.canceled.orderId, captured) }), [
      { kind: 'captured_after_release', operationId: w.ops.cancel, orderId: w.inputs.canceled.orderId, detail: /is captured \(1500\) though the authorization is recorded canceled/ },
    ]);
    expectViolations(await w.check({ paymentIntents: w.forge(w.inputs.expired.orderId, captured) }), [
      { kind: 'captured_after_release', operationId: w.ops.expiry, orderId: w.inputs.expired.orderId, detail: /is captured \(1500\) though the authorization is recorded expired/ },
    ]);
  });

  it('capture_mismatch: a capture recorded that Stripe did not make, a release recorded of one still held, a capture at Stripe nobody recorded', async () => {
    const w = await authorizationWorld();
    const held = { status: 'requires_capture', amount_received: 0, cancellation_reason: null } as const;
    expectViolations(await w.check({ paymentIntents: w.forge(w.inputs.partial.orderId, held) }), [
      { kind: 'capture_mismatch', operationId: w.ops.capturePartial, orderId: w.inputs.partial.orderId, detail: /recorded 600 captured, PaymentIntent pi_\w+ is requires_capture$/ },
    ]);
    expectViolations(await w.check({ paymentIntents: w.forge(w.inputs.canceled.orderId, held) }), [
      { kind: 'capture_mismatch', operationId: w.ops.cancel, orderId: w.inputs.canceled.orderId, detail: /recorded canceled .*is requires_capture$/ },
    ]);
    const elsewhere = w.forge(w.inputs.held.orderId, { status: 'succeeded', amount_received: 1500 });
    // Judged once quiescent: a capture still on its way may have been made before its answer is recorded.
    expectViolations(await w.check({ paymentIntents: elsewhere, requireQuiescent: false }), []);
    expectViolations(await w.check({ paymentIntents: elsewhere }), [
      { kind: 'capture_mismatch', operationId: w.ops.held, orderId: w.inputs.held.orderId, detail: /is captured \(1500\) and no succeeded capture operation records it$/ },
    ]);
  });

  it('authorization_announced_as_charge: a charge that only authorized, announced as Charge Succeeded', async () => {
    const w = await authorizationWorld();
    const { rows } = await db.pool.query<{ payload: Record<string, unknown> }>(`SELECT e.payload FROM outcome_events e WHERE operation_id = $1`, [w.ops.held]);
    expect(rows).toHaveLength(1);
    const eventId = randomUUID();
    await db.pool.query(`INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1, $2, 'Charge Succeeded', $3)`, [
      eventId,
      w.ops.held,
      JSON.stringify({ ...rows[0]!.payload, eventId, sequence: 2 }),
    ]);
    expectViolations(await w.check(), [
      { kind: 'authorization_announced_as_charge', operationId: w.ops.held, orderId: w.inputs.held.orderId, detail: new RegExp(`^'Charge Succeeded' ${eventId} announces a charge that only authorized`) },
    ]);
  });
});
