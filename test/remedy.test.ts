// The duplicate-charge remedy reached from each kind of evidence (docs/model.md, the duplicate-charge remedy): a Stripe event, the
// List step, an operator. Real PostgreSQL 18, the real stripe SDK against the fake Stripe, which
// holds the extra PaymentIntent for real: created through its API with our metadata, as a double
// send under another key would. Each test fails if its wiring to the remedy is removed.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { refundOutcomeDetailSchema, RefundDetailType } from '../lambdas/events/contract.ts';
import { duplicateRefundId, judgeDuplicateCharge, judgeListedCharges, remedyAfterFailureRefundId } from '../lambdas/payments/decisions.ts';
import { countingDb, type Db } from '../lambdas/payments/db.ts';
import { findOperation } from '../lambdas/payments/operations-store.ts';
import { createStripeClient } from '../lambdas/payments/stripe-gateway.ts';
import type { ChargeInput, Operation, PaymentIntentView } from '../lambdas/payments/types.ts';
import { runOps } from '../lambdas/ops/commands.ts';
import { render } from '../lambdas/ops/render.ts';
import { StripePaymentIntentLookup } from '../lambdas/ops/stripe-lookup.ts';
import { AnotherSystem } from '../local/another-system.ts';
import { checkInvariants } from '../local/invariants.ts';
import { collectGauges } from '../lambdas/reconcile/gauges.ts';
import type { PaymentIntentRecord } from '../local/fake-stripe/types.ts';
import { shiftAuditTrail, type TestDatabase } from './support/db.ts';
import { chargedOrder as charged, FAST_LIST_POLICY, testEngine } from './support/engine.ts';
import { chargeOrderOfItsOwnCustomer as order } from './support/orders.ts';
import { plantPaymentIntent, type StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';
import { deliverWebhook, piEvent, SECRET, testApplier } from './stripe-events/support.ts';
import { makeStripeEvent, refundJson, WebhookDispatcher } from '../local/fake-stripe/webhooks.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('remedy', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe }, { policy: FAST_LIST_POLICY });
const applier = () => testApplier({ db, stripe });
const deliver = (pi: PaymentIntentRecord) => deliverWebhook({ db, stripe }, piEvent(pi));

/** A PaymentIntent for the order made behind the pipeline's back (another key), as Stripe holds it. */
async function extraCharge(input: ChargeInput, operationId: string, overrides: { amount?: number; keyGeneration?: number } = {}): Promise<PaymentIntentRecord> {
  const sdk = createStripeClient({ apiKey: 'sk_test_engine', apiBase: stripe.fake.url, maxNetworkRetries: 0 });
  const pi = await sdk.paymentIntents.create(
    {
      amount: overrides.amount ?? input.amount,
      currency: input.currency,
      customer: input.customerId,
      payment_method: input.paymentMethod,
      confirm: true,
      off_session: true,
      metadata: { operation_id: operationId, order_id: input.orderId, key_generation: String(overrides.keyGeneration ?? 0) },
    },
    { idempotencyKey: `double-send-${randomUUID()}` },
  );
  expect(pi.status).toBe('succeeded');
  return stripe.fake.paymentIntents({ orderId: input.orderId }).find((p) => p.id === pi.id)!;
}

async function chargedOrder(input: ChargeInput = order()): Promise<{ input: ChargeInput; op: Operation }> {
  const { chargeId } = await charged(engine(), input);
  return { input, op: (await findOperation(db.pool, chargeId))! };
}

const refundOps = (orderId: string) =>
  db.pool.query(`SELECT * FROM payment_operations WHERE order_id = $1 AND kind = 'refund' ORDER BY created_at`, [orderId]).then((r) => r.rows);
const outbox = (operationId: string) =>
  db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at, event_id', [operationId]).then((r) => r.rows as { event_type: string; payload: Record<string, unknown> }[]);
const findings = (paymentIntentId: string) =>
  db.pool.query('SELECT kind, operation_id, resolved_at FROM stripe_event_findings WHERE payment_intent_id = $1', [paymentIntentId]).then((r) => r.rows);

/** The reconciler's gauge behind the DuplicateChargeRemedied alarm (every path counts: it reads the rows). */
const remediedGauge = async () => (await collectGauges(db.pool, 300)).duplicateChargesRemediedLastPeriod;

/** `expected`: violations a test planted on purpose (a proof of absence made wrong), not the remedy's to undo. */
async function netHolds(orderIds: string[], expected: readonly string[] = []) {
  const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds, requireQuiescent: true });
  // Exactly the planted kinds: one the checker stopped reporting would be a check lost.
  expect(report.violations.map((v) => v.kind).sort()).toEqual([...expected].sort());
}

/** The refund operation is due at once: one reconcile page executes it. */
async function sweepRefund(refundOperationId: string) {
  const swept = await engine().reconcileDue(100);
  expect(swept.find((e) => e.operationId === refundOperationId)).toMatchObject({ status: 'succeeded', step: 'create' });
}

async function expectRemedied(input: ChargeInput, chargeId: string, extraId: string, expectedViolations: readonly string[] = []) {
  const [refund] = await refundOps(input.orderId);
  expect(refund).toMatchObject({ refund_id: duplicateRefundId(extraId), refund_reason: 'duplicate', refund_payment_intent: extraId, parent_operation_id: chargeId, amount: String(input.amount), status: 'succeeded' });
  expect(stripe.fake.refunds({ orderId: input.orderId })).toMatchObject([{ payment_intent: extraId, amount: input.amount, reason: 'duplicate', status: 'succeeded' }]);
  const [event] = await outbox(refund.id);
  expect(event!.event_type).toBe(RefundDetailType.duplicateRefunded);
  expect(refundOutcomeDetailSchema.parse(event!.payload)).toMatchObject({ refundedPaymentIntent: extraId, refundReason: 'duplicate', chargeOperationId: chargeId });
  await netHolds([input.orderId], expectedViolations);
  return refund;
}

describe('evidence from a Stripe event', () => {
  it('signed delivery (twice) → inbox → applier → one refund operation → the reconciler refunds the extra PaymentIntent → Charge Duplicate Refunded; the finding stays for the alarm', async () => {
    const { input, op } = await chargedOrder();
    const extra = await extraCharge(input, op.id);
    const first = await deliver(extra);
    expect(first).toMatchObject({ kind: 'recorded', applied: { outcome: 'contradiction', newFinding: true, reason: expect.stringMatching(/refunded by remedy operation/) } });
    // At least once: the same event again, and another event of the same PaymentIntent.
    await deliver(extra);
    expect((await deliver(extra)).kind).toBe('recorded');
    const refunds = await refundOps(input.orderId);
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ status: 'pending', refund_payment_intent: extra.id });
    // The same audit detail as the List path's and the operator's: what is given back, from which charge, told by what.
    const requested = (await db.pool.query(`SELECT detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'requested'`, [refunds[0].id])).rows;
    expect(requested).toMatchObject([{ detail: { remedy: 'duplicate_charge', refundedPaymentIntent: extra.id, chargeOperationId: op.id, evidence: 'stripe_event' } }]);
    expect(await findings(extra.id)).toMatchObject([{ kind: 'contradiction', operation_id: op.id, resolved_at: null }]);
    await sweepRefund(refunds[0].id);
    await expectRemedied(input, op.id, extra.id);
    // The charge itself is untouched: still succeeded with its own PaymentIntent.
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: op.externalId });
  });

  it('a second PaymentIntent with another amount is money we cannot explain: a contradiction for a human, no refund', async () => {
    const { input, op } = await chargedOrder();
    const odd = await extraCharge(input, op.id, { amount: input.amount + 100 });
    expect(await deliver(odd)).toMatchObject({ applied: { outcome: 'contradiction', newFinding: true, reason: expect.not.stringMatching(/remedy/) } });
    expect(await refundOps(input.orderId)).toEqual([]);
    expect(await findings(odd.id)).toMatchObject([{ kind: 'contradiction' }]);
  });

  it('the event arrives while the operation is still open with another PaymentIntent → it waits; once the operation succeeds, the same event is the remedy', async () => {
    const input = order();
    stripe.fake.injectFault({}, 'processing');
    const [r] = await engine().processRequests([input]);
    const open = (await findOperation(db.pool, r!.operationId))!;
    expect(open).toMatchObject({ status: 'unknown' });
    const extra = await extraCharge(input, open.id);
    const waiting = await deliver(extra);
    expect(waiting).toMatchObject({ kind: 'recorded', applied: { outcome: 'deferred', reason: expect.stringMatching(/judged again once it is final/) } });
    expect(await findOperation(db.pool, open.id)).toMatchObject({ status: 'unknown', reviewReason: null });
    expect(await refundOps(input.orderId)).toEqual([]);
    // Stripe settles the operation's own PaymentIntent; its event settles the operation.
    stripe.fake.settle(open.externalId!, 'succeeded');
    const own = stripe.fake.paymentIntents({ operationId: open.id }).find((p) => p.id === open.externalId)!;
    expect(await deliver(own)).toMatchObject({ applied: { outcome: 'settled' } });
    // The waiting event's turn comes (made due now rather than waited for).
    await db.pool.query('UPDATE stripe_events SET next_attempt_at = now() WHERE event_id = (SELECT event_id FROM stripe_events WHERE applied_at IS NULL AND operation_id = $1)', [open.id]);
    const summary = await applier().applyDue();
    expect(summary.byOutcome).toMatchObject({ contradiction: 1 });
    const refunds = await refundOps(input.orderId);
    expect(refunds).toHaveLength(1);
    await sweepRefund(refunds[0].id);
    await expectRemedied(input, open.id, extra.id);
    expect(await findOperation(db.pool, open.id)).toMatchObject({ status: 'succeeded', externalId: open.externalId });
  });
});

/** The operator's tool (`npm run ops`) against this world's database and fake Stripe. */
const lookup = () => new StripePaymentIntentLookup(createStripeClient({ apiKey: 'sk_test_ops', apiBase: stripe.fake.url, maxNetworkRetries: 0 }));
const ops = (argv: string[], database: Db = db.pool) =>
  runOps(argv, {
    defaultActor: 'tester',
    context: () => ({ db: database, stripe: async () => lookup(), gateway: async () => stripe.gateway, transport: { kind: 'test' } }),
  });

describe('the remedy refund refused by Stripe: a human decides, never a final failed', () => {
  /** The remedy refund operation made by the event of the extra PaymentIntent, still pending. */
  async function remedyPending(input: ChargeInput, extra: PaymentIntentRecord) {
    await deliver(extra);
    const [refund] = await refundOps(input.orderId);
    expect(refund).toMatchObject({ status: 'pending', refund_payment_intent: extra.id });
    return refund;
  }

  /** `planted`: violations the test made on purpose (a refund made by hand beside the pipeline). */
  async function expectInReview(input: ChargeInput, chargeId: string, extraId: string, refundOperationId: string, reason: RegExp, planted: readonly string[] = []) {
    const row = (await findOperation(db.pool, refundOperationId))!;
    expect(row).toMatchObject({ status: 'unknown', reviewReason: expect.stringMatching(reason) });
    expect(row.reviewReason).toContain(extraId);
    expect(row.reviewReason).toMatch(/the extra charge stands/);
    // The checker reads it as a second charge that waits for a human, not as a double charge no one knows of.
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violations.map((v) => v.kind).sort()).toEqual([...planted].sort());
    expect(report.warnings).toMatchObject([{ kind: 'duplicate_awaiting_review', operationId: chargeId, orderId: input.orderId }]);
    // In review the reconciler leaves it alone: nothing more is sent.
    const sent = stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length;
    await db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [refundOperationId]);
    expect((await engine().reconcileDue(100)).find((e) => e.operationId === refundOperationId)).toBeUndefined();
    expect(stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length).toBe(sent);
  }

  it('the extra charge is disputed (charged back): the refund create is refused with charge_disputed → the remedy refund in review naming the refusal and the extra PaymentIntent, nothing refunded', async () => {
    const { input, op } = await chargedOrder();
    const extra = await extraCharge(input, op.id);
    const refund = await remedyPending(input, extra);
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET, deliver: false });
    dispatcher.dispute(extra.id, 'created');
    const [execution] = (await engine().reconcileDue(100)).filter((e) => e.operationId === refund.id);
    expect(execution).toMatchObject({ step: 'create', status: 'unknown' });
    const created = stripe.fake.requests().filter((q) => q.endpoint === 'refund_create' && q.paymentIntentId === extra.id);
    expect(created.map((q) => q.status)).toEqual([400]);
    expect(stripe.fake.refunds({ orderId: input.orderId })).toEqual([]);
    await expectInReview(input, op.id, extra.id, refund.id, /refund of pi_\w+ was refused by Stripe \(charge_disputed: Charge ch_\w+ has been charged back/);
    expect((await db.pool.query('SELECT last_error_class FROM payment_operations WHERE id = $1', [refund.id])).rows[0]).toMatchObject({ last_error_class: 'StripeInvalidRequestError' });
    // The runbook: the dispute decides. Won — the money is back with us, the customer charged twice
    // again — so the operator re-sends the remedy's refund under a new key; it now goes through.
    dispatcher.dispute(extra.id, 'closed', 'won');
    await shiftAuditTrail(db.pool, refund.id, '3 minutes'); // the tool's LIST_SETTLE_MS after the last send
    const reissued = await ops(['review', 'reissue', refund.id, '--confirm-no-charge', '--reason', 'dispute won: refund the duplicate', '--actor', 'alice']);
    expect(reissued, JSON.stringify(reissued)).toMatchObject({ ok: true });
    await engine().reconcileDue(100);
    expect(await findOperation(db.pool, refund.id)).toMatchObject({ status: 'succeeded', keyGeneration: 1, reviewReason: null });
    expect(stripe.fake.refunds({ orderId: input.orderId })).toMatchObject([{ payment_intent: extra.id, amount: input.amount, status: 'succeeded' }]);
    await netHolds([input.orderId]);
  });

  it('Stripe fails the remedy’s Refund AFTER it succeeded: a new remedy of the same extra PaymentIntent waits in review naming it (never the charge’s own), and review reissue refunds it under a new key', async () => {
    const { input, op } = await chargedOrder();
    const extra = await extraCharge(input, op.id);
    const refund = await remedyPending(input, extra);
    await sweepRefund(refund.id);
    const [first] = stripe.fake.refunds({ orderId: input.orderId });
    expect(first).toMatchObject({ payment_intent: extra.id, status: 'succeeded' });
    // The issuer could not take the money back: Stripe fails the Refund after it said succeeded.
    stripe.fake.settleRefund(first!.id, 'failed');
    const failed = makeStripeEvent('refund.failed', refundJson(stripe.fake.refunds({ orderId: input.orderId })[0]!));
    expect(await deliverWebhook({ db, stripe }, failed)).toMatchObject({ applied: { outcome: 'failed_after_success', operationId: refund.id } });
    // The failed remedy stays final succeeded, marked; a new remedy of the SAME extra PaymentIntent exists.
    const remedies = await refundOps(input.orderId);
    expect(remedies.map((r) => [r.refund_id, r.refund_payment_intent, r.status, r.failed_after_success_at !== null])).toEqual([
      [duplicateRefundId(extra.id), extra.id, 'succeeded', true],
      [remedyAfterFailureRefundId(extra.id, first!.id), extra.id, 'pending', false],
    ]);
    const again = remedies[1]!;
    // Its first claim sends nothing: a person decides, told which PaymentIntent is still charged twice.
    const sent = stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length;
    expect((await engine().reconcileDue(100)).find((e) => e.operationId === again.id)).toMatchObject({ step: 'precondition', status: 'pending' });
    expect(stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length).toBe(sent);
    const inReview = (await findOperation(db.pool, again.id))!;
    expect(inReview.reviewReason).toMatch(new RegExp(`Refund ${first!.id} of ${extra.id} was failed by Stripe after it succeeded: the extra charge stands again`));
    expect(inReview.reviewReason).not.toContain(op.externalId!);
    expect((await outbox(again.id)).map((e) => e.event_type)).toEqual(['Refund Needs Review']);
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violations).toEqual([]);
    expect(report.warnings).toMatchObject([{ kind: 'duplicate_awaiting_review', operationId: op.id }]);
    // The runbook: try the refund again under a new key (here the issuer takes it this time).
    const reissued = await ops(['review', 'reissue', again.id, '--confirm-no-charge', '--reason', 'issuer says retry', '--actor', 'alice']);
    expect(reissued, JSON.stringify(reissued)).toMatchObject({ ok: true });
    await engine().reconcileDue(100);
    expect(await findOperation(db.pool, again.id)).toMatchObject({ status: 'succeeded', keyGeneration: 1, reviewReason: null });
    expect(stripe.fake.refunds({ orderId: input.orderId }).map((r) => [r.payment_intent, r.status])).toEqual([[extra.id, 'failed'], [extra.id, 'succeeded']]);
    await netHolds([input.orderId]);
  });

  it('the extra charge was partly refunded by hand in the Dashboard: the full remedy refund is refused (amount_too_large), List shows no refund of ours → review, not failed; only the hand refund exists', async () => {
    const { input, op } = await chargedOrder();
    const extra = await extraCharge(input, op.id);
    const refund = await remedyPending(input, extra);
    // An operator refunds part of it by hand, beside the pipeline (the SDK, another key, no metadata of ours).
    const sdk = createStripeClient({ apiKey: 'sk_test_engine', apiBase: stripe.fake.url, maxNetworkRetries: 0 });
    await sdk.refunds.create({ payment_intent: extra.id, amount: 100 }, { idempotencyKey: `dashboard-${randomUUID()}` });
    const [refused] = (await engine().reconcileDue(100)).filter((e) => e.operationId === refund.id);
    expect(refused).toMatchObject({ step: 'create', status: 'unknown' });
    expect(refused!.outcome?.detail).toMatchObject({ settleByList: true, refusal: 'amount_too_large' });
    // List (due once the send settled: the trail moved back past the settle delay) finds only the hand refund: the refusal stands.
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = first_attempted_at - interval '1 second', next_attempt_at = now() WHERE id = $1`, [refund.id]);
    await shiftAuditTrail(db.pool, refund.id, '1 second');
    const [listed] = (await engine().reconcileDue(100)).filter((e) => e.operationId === refund.id);
    expect(listed).toMatchObject({ step: 'list', status: 'unknown' });
    expect(stripe.fake.refunds({ orderId: input.orderId })).toMatchObject([{ payment_intent: extra.id, amount: 100 }]);
    await expectInReview(input, op.id, extra.id, refund.id, /refund of pi_\w+ was refused by Stripe \(amount_too_large\) and List shows no refund of this operation/, ['unrecorded_refund']);
    // The runbook: refund the rest by hand, then resolve as failed — the hand refund does not block it.
    await sdk.refunds.create({ payment_intent: extra.id }, { idempotencyKey: `dashboard-${randomUUID()}` });
    await shiftAuditTrail(db.pool, refund.id, '3 minutes'); // the tool's LIST_SETTLE_MS after the last send
    const resolved = await ops(['review', 'resolve', refund.id, '--as', 'failed', '--reason', 'refunded by hand in two parts', '--actor', 'alice']);
    expect(resolved, JSON.stringify(resolved)).toMatchObject({ ok: true });
    expect(await findOperation(db.pool, refund.id)).toMatchObject({ status: 'failed', reviewReason: null });
    expect(stripe.fake.refunds({ orderId: input.orderId }).map((r) => r.amount)).toEqual([100, input.amount - 100]);
  });
});

describe('evidence from the List step', () => {
  async function row(id: string) {
    return (await db.pool.query('SELECT * FROM payment_operations WHERE id = $1', [id])).rows[0];
  }
  async function untilDue(id: string) {
    for (let i = 0; i < 500; i++) {
      if ((await db.pool.query('SELECT next_attempt_at IS NULL OR next_attempt_at <= now() AS due FROM payment_operations WHERE id = $1', [id])).rows[0]?.due) return;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    throw new Error(`operation ${id} never became due`);
  }
  /** Claim after claim, as the reconciler would, until `done` says so. */
  async function driveUntil(id: string, done: (r: Record<string, unknown>) => boolean) {
    for (let i = 0; i < 30; i++) {
      await untilDue(id);
      await engine().executeCharge(id);
      if (done(await row(id))) return;
    }
    throw new Error(`operation ${id}: condition never reached`);
  }

  it('key generations 0 and 1 both charged (the late one after the re-issue) → List settles the operation on generation 1 and, in the same write, the remedy refunds generation 0; the event of it later adds no second refund', async () => {
    const input = order();
    const gaugeBefore = await remediedGauge();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await driveUntil(id, (r) => r.key_generation === 1);
    // What the proofs of absence could not see: a generation-0 charge that lands after the re-issue.
    const late = await extraCharge(input, id, { keyGeneration: 0 });
    // Generation 1's create is executed but answered with a 500: List is the evidence.
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    await driveUntil(id, (r) => r.status === 'succeeded' || r.review_reason !== null);
    const settled = await row(id);
    const gen1 = stripe.fake.paymentIntents({ operationId: id }).find((p) => p.metadata.key_generation === '1')!;
    expect(settled).toMatchObject({ status: 'succeeded', review_reason: null, external_id: gen1.id, key_generation: 1 });
    const trail = (await db.pool.query(`SELECT * FROM payment_operation_events WHERE operation_id = $1 AND action = 'outcome_recorded' ORDER BY id`, [id])).rows;
    expect(trail.at(-1)).toMatchObject({ step: 'list', to_status: 'succeeded', detail: { duplicatesRefunded: [late.id] } });
    const refunds = await refundOps(input.orderId);
    expect(refunds).toHaveLength(1);
    expect(refunds[0]).toMatchObject({ refund_payment_intent: late.id, status: 'pending' });
    const requested = (await db.pool.query(`SELECT actor, detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'requested'`, [refunds[0].id])).rows;
    expect(requested).toMatchObject([{ actor: 'test', detail: { remedy: 'duplicate_charge', evidence: 'list', chargeOperationId: id } }]);
    expect((await outbox(id)).map((e) => e.event_type)).toEqual(['Charge Reissued', 'Charge Succeeded']);
    // No finding on this path: the alarm is DuplicateChargeRemedied, whose gauge counts the remedy row.
    expect(await remediedGauge()).toBe(gaugeBefore + 1);
    // The same duplicate shown again by an event: the finding, but not a second refund.
    expect(await deliver(late)).toMatchObject({ applied: { outcome: 'contradiction' } });
    expect(await refundOps(input.orderId)).toHaveLength(1);
    await sweepRefund(refunds[0].id);
    // Stripe created the generation-0 charge AFTER the re-issue: a late commit no proof could see, not
    // a re-issue on a wrong proof (no unsafe_reissue: the checker tells them apart by that moment); the
    // net amount charged — what the remedy restores — is the amount asked.
    await expectRemedied(input, id, late.id);
  });

  it("local/another-system (the demo's and the soak's double sender) names the operation's current key generation: a re-issued order charged again behind our back is a duplicate the remedy refunds, not an unsafe re-issue", async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await driveUntil(id, (r) => r.key_generation === 1);
    await driveUntil(id, (r) => r.status === 'succeeded');
    const [again] = await new AnotherSystem(stripe.fake.url, { maxNetworkRetries: 0, timeoutMs: 5_000 }).chargeAgain(db.pool, [input.orderId]);
    expect(again!.paymentIntent).toMatchObject({ status: 'succeeded', metadata: { operation_id: id, key_generation: '1' } });
    // With key_generation 0 (the driver before 2026-12-01) this read as our own generation-0 attempt
    // succeeding after the re-issue: unsafe_reissue (test/local/pipeline-chaos failed on it once).
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId] });
    expect(report.violations.map((v) => v.kind).sort()).toEqual(['double_charge', 'net_amount']); // not yet remedied: charged twice
    expect(await deliver(stripe.fake.paymentIntents({ operationId: id }).find((p) => p.id === again!.paymentIntent!.id)!)).toMatchObject({ applied: { outcome: 'contradiction' } });
    const [refund] = await refundOps(input.orderId);
    await sweepRefund(refund.id);
    await expectRemedied(input, id, again!.paymentIntent!.id);
  });

  it('judgeListedCharges (and judgeDuplicateCharge under it): the current generation is kept, then the highest below it, a tie by id; anything not certainly a charge of this operation is for a human', () => {
    const op = { id: 'op-1', kind: 'charge' as const, orderId: 'order-1', amount: 1000, currency: 'eur', customerId: 'cus_1', keyGeneration: 1 };
    const pi = (id: string, generation: string, overrides: Partial<PaymentIntentView> = {}): PaymentIntentView => ({
      id, status: 'succeeded', amount: 1000, currency: 'eur', customer: 'cus_1', metadata: { operation_id: 'op-1', order_id: 'order-1', key_generation: generation }, ...overrides,
    });
    const kept = (...pis: PaymentIntentView[]) => {
      const j = judgeListedCharges(op, pis);
      return j && [j.keep.id, j.remedies.map((r) => r.paymentIntentId)];
    };
    expect(kept(pi('pi_a', '0'), pi('pi_b', '1'))).toEqual(['pi_b', ['pi_a']]);
    expect(kept(pi('pi_b', '1'), pi('pi_a', '0'))).toEqual(['pi_b', ['pi_a']]);
    expect(kept(pi('pi_z', '0'), pi('pi_y', '0'))).toEqual(['pi_y', ['pi_z']]);
    expect(kept(pi('pi_a', '0'), pi('pi_b', '1'), pi('pi_c', '1'))).toEqual(['pi_b', ['pi_c', 'pi_a']]);
    // A generation the operation never reached is not "current": it loses to a real one.
    expect(kept(pi('pi_a', '5'), pi('pi_b', '0'))).toEqual(['pi_b', ['pi_a']]);
    expect(judgeListedCharges(op, [pi('pi_a', '0'), pi('pi_b', '1')])!.remedies).toEqual([{ refundId: 'duplicate:pi_a', paymentIntentId: 'pi_a', amount: 1000 }]);
    expect(kept(pi('pi_a', '0', { status: 'processing' }), pi('pi_b', '1'))).toBeNull();
    expect(kept(pi('pi_a', '0', { amount: 999 }), pi('pi_b', '1'))).toBeNull();
    expect(kept(pi('pi_a', '0', { customer: 'cus_2' }), pi('pi_b', '1'))).toBeNull();
    expect(kept(pi('pi_a', '0', { metadata: { order_id: 'order-1' } }), pi('pi_b', '1'))).toBeNull();
    expect(kept(pi('pi_b', '1'))).toBeNull();
    expect(judgeListedCharges({ ...op, kind: 'refund' }, [pi('pi_a', '0'), pi('pi_b', '1')])).toBeNull();
    // The one rule under all three paths: only the order's amount, currency and customer are refunded.
    const charge = { ...op, status: 'succeeded' as const, externalId: 'pi_own' };
    expect(judgeDuplicateCharge(charge, pi('pi_x', '0'))).toMatchObject({ kind: 'refund', refundId: 'duplicate:pi_x', amount: 1000 });
    expect(judgeDuplicateCharge(charge, pi('pi_x', '0', { customer: null }))).toMatchObject({ kind: 'refund' });
    expect(judgeDuplicateCharge(charge, pi('pi_x', '0', { amount: 1001 }))).toMatchObject({ kind: 'none', reason: expect.stringMatching(/is for 1001, the order for 1000/) });
    expect(judgeDuplicateCharge(charge, pi('pi_x', '0', { customer: 'cus_2' }))).toMatchObject({ kind: 'none', reason: expect.stringMatching(/another customer/) });
    expect(judgeDuplicateCharge(charge, pi('pi_x', '0', { currency: 'usd' }))).toMatchObject({ kind: 'none' });
    expect(judgeDuplicateCharge(charge, pi('pi_own', '0'))).toMatchObject({ kind: 'none' });
  });
});

describe('evidence from an operator', () => {
  const counted = () => countingDb(db.pool);
  const because = ['--reason', 'TICKET-15: two charges for one order', '--actor', 'alice'];

  it('review resolve --as succeeded with another succeeded PaymentIntent of the operation → resolved, and the other one refunded by the remedy (the operator as actor)', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // A second PaymentIntent of this operation (another key) that has not settled when List looks.
    const plantedKey = `planted-${randomUUID()}`;
    stripe.fake.injectFault({ idempotencyKey: plantedKey }, 'processing');
    const planted = await plantPaymentIntent(stripe, input, id, { idempotencyKey: plantedKey });
    expect(planted.ok && planted.value.status).toBe('processing');
    const plantedId = planted.ok ? planted.value.id : '';
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    for (let i = 0; i < 30; i++) {
      const r = (await db.pool.query('SELECT review_reason, next_attempt_at <= now() AS due FROM payment_operations WHERE id = $1', [id])).rows[0];
      if (r.review_reason) break;
      if (r.due) await engine().executeCharge(id);
      else await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect((await findOperation(db.pool, id))!.reviewReason).toMatch(/2 objects for one operation/);
    // Later both have charged; the operator keeps the engine's own one.
    stripe.fake.settle(plantedId, 'succeeded');
    const own = stripe.fake.paymentIntents({ operationId: id }).find((p) => p.id !== plantedId)!;
    const response = await ops(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', own.id, ...because]);
    expect(response).toMatchObject({ ok: true, command: 'review resolve' });
    const result = response.ok && response.command === 'review resolve' ? response.result : null;
    expect(result!.operation).toMatchObject({ status: 'succeeded', externalId: own.id });
    expect(result!.remedies).toMatchObject([{ paymentIntentId: plantedId, created: true, status: 'succeeded', disposition: 'attempted' }]);
    expect(result!.warnings.filter((w) => /charged more than once|not refunded/.test(w))).toEqual([]);
    const [refund] = await refundOps(input.orderId);
    const requested = (await db.pool.query(`SELECT actor, detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'requested'`, [refund.id])).rows;
    expect(requested).toMatchObject([{ actor: 'operator:alice', detail: { remedy: 'duplicate_charge', chargeOperationId: id, evidence: 'operator', by: 'operator', command: 'review resolve --as succeeded', reason: because[1] } }]);
    expect(render(response, false).stdout.join('\n')).toMatch(new RegExp(`duplicate ${plantedId}: refund operation ${refund.id} succeeded \\(created\\)`));
    await expectRemedied(input, id, plantedId);
  });

  it('refunds remedy <order> --payment-intent: checked at Stripe, refunded through the engine once; the charge\'s own, a foreign amount, an unknown id and an unsettled charge are refused with nothing sent', async () => {
    const { input, op } = await chargedOrder();
    const extra = await extraCharge(input, op.id);
    const gaugeBefore = await remediedGauge();
    const sql = counted();
    const stripeBefore = stripe.fake.requests().length;
    const made = await ops(['refunds', 'remedy', input.orderId, '--payment-intent', extra.id, ...because], sql);
    // What it costs: one retrieve (the check) and one refund create (the remedy), nothing else at Stripe.
    const calls = stripe.fake.requests().slice(stripeBefore).map((q) => q.endpoint);
    expect(calls).toEqual(['retrieve', 'refund_create']);
    console.log(`refunds remedy: ${sql.roundTrips} SQL round trips, ${calls.length} Stripe requests (${calls.join(', ')})`);
    expect(await remediedGauge()).toBe(gaugeBefore + 1);
    expect(made).toMatchObject({ ok: true, command: 'refunds remedy', result: { remedy: { paymentIntentId: extra.id, created: true, status: 'succeeded' }, refund: { kind: 'refund', status: 'succeeded', amount: input.amount } } });
    expect(render(made, false).stdout.join('\n')).toMatch(/Duplicate-charge remedy of pi_\w+ .*\n  refund operation .* succeeded .*\(created; attempted\)/);
    // The same evidence again: the same refund operation, nothing sent.
    const before = stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length;
    expect(await ops(['refunds', 'remedy', input.orderId, '--payment-intent', extra.id, ...because])).toMatchObject({ ok: true, result: { remedy: { created: false } } });
    expect(stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length).toBe(before);
    const [refund] = await refundOps(input.orderId);
    const requested = (await db.pool.query(`SELECT actor, detail FROM payment_operation_events WHERE operation_id = $1 AND action = 'requested'`, [refund.id])).rows;
    expect(requested).toMatchObject([{ actor: 'operator:alice', detail: { by: 'operator', command: 'refunds remedy', paymentIntent: { id: extra.id, status: 'succeeded' } } }]);
    await expectRemedied(input, op.id, extra.id);

    const refused = async (argv: string[], message: RegExp) => {
      const sent = stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length;
      expect(await ops(argv)).toMatchObject({ ok: false, exitCode: 1, error: { code: 'refused', message: expect.stringMatching(message) } });
      expect(stripe.fake.requests().filter((q) => q.endpoint === 'refund_create').length).toBe(sent);
    };
    await refused(['refunds', 'remedy', input.orderId, '--payment-intent', op.externalId!, ...because], /the charge's own PaymentIntent/);
    const odd = await extraCharge(input, op.id, { amount: input.amount + 1 });
    await refused(['refunds', 'remedy', input.orderId, '--payment-intent', odd.id, ...because], /not refunded as a duplicate: .* is for \d+, the order for/);
    await refused(['refunds', 'remedy', input.orderId, '--payment-intent', 'pi_doesnotexist', ...because], /does not exist at Stripe/);
    stripe.fake.injectFault({}, 'processing');
    const open = order();
    const [r] = await engine().processRequests([open]);
    await refused(['refunds', 'remedy', open.orderId, '--payment-intent', extra.id, ...because], /is unknown: which PaymentIntent is the extra one is not settled/);
    expect(await findOperation(db.pool, r!.operationId)).toMatchObject({ status: 'unknown' });
    expect(await refundOps(input.orderId)).toHaveLength(1);
    expect(await ops(['refunds', 'remedy', input.orderId, ...because])).toMatchObject({ ok: false, exitCode: 2 });
    // The remedy's refund ids are its own: an operator's refund cannot take one (it would make the remedy's insert a no-op).
    expect(await ops(['refunds', 'create', input.orderId, '--refund-id', `duplicate:${odd.id}`, '--amount', '1', ...because])).toMatchObject({
      ok: false, exitCode: 2, error: { code: 'usage', message: expect.stringMatching(/must not start with "duplicate:"/) },
    });
  });
});
