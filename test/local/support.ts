// Shared by the end-to-end tests: one local pipeline (real handlers, fauxqs, the fake Stripe and
// EventBridge, the suite's PostgreSQL 18) driven by a small demo workload, then judged against the
// fake Stripe's OWN record of PaymentIntents — not against what the database believes.
import { inject } from 'vitest';
import { expect } from 'vitest';
import { buildWorkload, runWorkload, type Workload, type WorkloadRun } from '../../local/demo.ts';
import { REFUND_SCENARIOS } from '../../local/send-report.ts';
import type { FaultProfileName } from '../../local/fake-stripe/server.ts';
import type { PaymentIntentRecord, RefundRecord, RequestRecord } from '../../local/fake-stripe/types.ts';
import { startPipeline, type Pipeline, type PipelineOptions, type TimeLapse } from '../../local/pipeline.ts';

/** Tighter than the demo's: a test run of 60 orders should settle in well under a minute. */
export const TEST_TIME_LAPSE: TimeLapse = {
  keyWindowMs: 8_000,
  earlySearchAfterMs: 2_000,
  searchLagMs: 500,
  stripeTimeoutMs: 2_000,
  stripeMaxNetworkRetries: 1,
  unsettledReviewAfterMs: 60_000,
  processingSettleMs: 1_000,
  reconcileEveryMs: 1_000,
  retryBackoffScale: 0.05,
  // Manual capture: an authorization nothing settles lapses (at the fake, and for the reconciler) after 10 s.
  authorizationValidityMs: 10_000,
  authorizationLookMarginMs: 1_000,
};

/**
 * A local pipeline for a test: the suite's PostgreSQL, the fake Stripe without faults, the test's time
 * lapse, one poller, no logs and no metrics; `options` changes any of these.
 */
export function startTestPipeline(options: Partial<PipelineOptions> = {}): Promise<Pipeline> {
  return startPipeline({
    postgres: { kind: 'server', adminUrl: inject('pgAdminUrl') },
    stripe: { kind: 'fake', faults: 'none', seed: 1 },
    timeLapse: TEST_TIME_LAPSE,
    pollers: 1,
    logLevel: 'SILENT',
    metricsDisabled: true,
    ...options,
  });
}

export interface ProfileRun extends WorkloadRun {
  /** Ground truth: every PaymentIntent the fake Stripe ever created. */
  readonly paymentIntents: readonly PaymentIntentRecord[];
  /** Ground truth: every Refund the fake Stripe ever created. */
  readonly refunds: readonly RefundRecord[];
  /** Every request the fake Stripe answered (or lost). */
  readonly stripeRequests: readonly RequestRecord[];
  readonly workload: Workload;
  /** The charge operations. */
  readonly operations: readonly { order_id: string; status: string; external_id: string | null; review_reason: string | null; capture_method: 'manual' | null }[];
  readonly sentOrderIds: readonly string[];
  readonly elapsedMs: number;
  /** Every finding recorded (Stripe's events and the watch after a re-issue). */
  readonly findings: readonly { kind: string; payment_intent_id: string; source: string }[];
}

export async function runProfile(
  faults: FaultProfileName,
  options: { orders?: number; seed?: number; timeoutMs?: number; webhooks?: PipelineOptions['webhooks']; refunds?: number; duplicateCharges?: number; connect?: boolean; authorizations?: boolean } = {},
): Promise<ProfileRun> {
  const started = Date.now();
  const pipeline = await startTestPipeline({
    stripe: { kind: 'fake', faults, seed: options.seed ?? 42 },
    pollers: 4,
    ...(options.webhooks !== undefined ? { webhooks: options.webhooks } : {}),
  });
  try {
    // No pm_fake_processing orders: the fault profiles inject `processing` anyway, and each such
    // operation waits 15-60 s (the engine's backoff, which the time-lapse does not shorten) for its
    // retrieve; a few more of them would only make the test slower, not stronger.
    // A fifth of the orders refunded, every scenario of local/demo.ts at least once (REFUND_SCENARIOS);
    // `duplicateCharges` orders charged again behind the pipeline's back (the duplicate remedy; webhooks only).
    const workload = buildWorkload({
      orders: options.orders ?? 60,
      duplicates: 0.3,
      refunds: options.refunds ?? 0.2,
      duplicateCharges: options.duplicateCharges ?? 0,
      seed: options.seed ?? 42,
      tag: `e2e-${faults}`,
      processing: false,
      // Charges on the fake's two connected accounts (local/connect-demo.ts), as `npm start` makes them.
      connect: options.connect ?? false,
      // Manual-capture charges (local/authorization-demo.ts), as `npm start` makes them.
      authorizations: options.authorizations ?? false,
    });
    const run = await runWorkload(pipeline, workload, { timeoutMs: options.timeoutMs ?? 80_000 });
    const { rows } = await pipeline.db.query<ProfileRun['operations'][number]>(`SELECT order_id, status, external_id, review_reason, capture_method FROM payment_operations WHERE kind = 'charge'`);
    const findings = await pipeline.db.query<ProfileRun['findings'][number]>('SELECT kind, payment_intent_id, source FROM stripe_event_findings ORDER BY id');
    return {
      ...run,
      paymentIntents: pipeline.fakeStripe!.paymentIntents(),
      refunds: pipeline.fakeStripe!.refunds(),
      stripeRequests: pipeline.fakeStripe!.requests(),
      workload,
      operations: rows,
      sentOrderIds: run.send?.sentOrderIds ?? [],
      elapsedMs: Date.now() - started,
      findings: findings.rows,
    };
  } finally {
    await pipeline.stop();
  }
}

/** The product's promise, checked here directly against the fake's ground truth (and by the ledger). */
export function expectPromiseKept(run: ProfileRun): void {
  const { ledger } = run;
  const problems = ledger.invariants.violations.map((v) => `${v.kind} ${v.orderId ?? ''}: ${v.detail}`);
  expect(problems).toEqual([]);
  expect(run.outcome).toBe('settled');
  expect(ledger.invariants.doubleCharges).toBe(0);
  expect(ledger.invariants.lostOrders).toBe(0);

  // Refunds: every refunded order judged, and each scenario ended as it must.
  expectRefundsKept(run);

  // At most one succeeded PaymentIntent per order not refunded in full by the duplicate remedy, whatever the database says.
  const remedied = new Set(run.refunds.filter((r) => r.status === 'succeeded' && r.reason === 'duplicate').map((r) => r.payment_intent));
  const succeededByOrder = new Map<string, string[]>();
  for (const pi of run.paymentIntents) {
    if (pi.status !== 'succeeded' || (remedied.has(pi.id) && run.refunds.filter((r) => r.payment_intent === pi.id && r.status === 'succeeded').reduce((a, r) => a + r.amount, 0) === pi.amount)) continue;
    const order = pi.metadata.order_id ?? '?';
    succeededByOrder.set(order, [...(succeededByOrder.get(order) ?? []), pi.id]);
  }
  expect([...succeededByOrder].filter(([, ids]) => ids.length > 1)).toEqual([]);

  // Every order sent has exactly one operation, and each is final or in review with a reason.
  const byOrder = new Map(run.operations.map((op) => [op.order_id, op]));
  expect(run.sentOrderIds.filter((id) => !byOrder.has(id))).toEqual([]);
  expect(byOrder.size).toBe(run.operations.length);
  for (const op of run.operations) {
    if (op.status === 'succeeded' || op.status === 'failed') continue;
    expect(op.review_reason, `${op.order_id} is ${op.status} without a review reason`).toMatch(/\S/);
  }
  // succeeded ⇔ a succeeded PaymentIntent at Stripe, and it is the one the operation names (an
  // authorization's may be held or released: expectAuthorizationsKept judges those).
  for (const op of run.operations) {
    if (op.capture_method === 'manual') continue;
    const charged = succeededByOrder.get(op.order_id) ?? [];
    if (op.status === 'succeeded') expect(charged).toEqual([op.external_id]);
    if (op.status === 'failed') expect(charged).toEqual([]);
  }
  // Every outcome was announced, and the outbox is empty.
  expect(ledger.events.unpublished).toBe(0);
  expect(ledger.events.published).toBeGreaterThanOrEqual(ledger.operations.succeeded + ledger.operations.failed + ledger.operations.inReview);
  // The bad messages were rejected, not charged (and the refund requests that must make no refund).
  const { refund_conflict: _conflicts, refund_rejected: _refused, ...charges } = ledger.rejected.byReason;
  expect(charges).toEqual({ invalid_json: 1, invalid_body: 1, order_conflict: 1 });
}

/**
 * The Connect orders of the workload (local/connect-demo.ts), judged on the fake Stripe's own record,
 * which keeps every object under the account it was made on: a direct charge's PaymentIntents only
 * under its account — never on the platform or the other account — and every request of its
 * operation (and of its refund's) made as it; a destination charge's on the platform, transferred to
 * its account with the fee asked; the ledger's per-account counts agree, and no event of the
 * accounts was refused.
 */
export function expectAuthorizationsKept(run: ProfileRun): void {
  const ledger = run.ledger.authorizations;
  expect(ledger).not.toBeNull();
  const planned = new Map(run.workload.authorizations.map((a) => [a.orderId, a]));
  expect(ledger!.rows.map((r) => r.orderId).sort()).toEqual([...planned.keys()].sort());
  expect(ledger!.disagreements).toBe(0);
  for (const row of ledger!.rows) {
    const plan = planned.get(row.orderId)!;
    if (row.charge.status !== 'succeeded') continue; // declined: nothing held (its capture or cancel was refused)
    const pi = row.atStripe!;
    expect(pi.amount, row.orderId).toBe(row.charge.authorized);
    if (plan.scenario === 'capture_full' || plan.scenario === 'capture_partial') {
      const asked = plan.settlement?.type === 'capture' && plan.settlement.amount !== undefined ? plan.settlement.amount : row.charge.authorized;
      expect([row.settlement, pi.status, pi.amountReceived], row.orderId).toEqual([{ kind: 'capture', status: 'succeeded', amount: asked, cancellationReason: null }, 'succeeded', asked]);
      if (plan.scenario === 'capture_partial') expect(asked).toBeLessThan(row.charge.authorized);
    } else {
      const expired = plan.scenario === 'expire';
      expect([row.settlement, pi.status, pi.cancellationReason, pi.amountReceived], row.orderId).toEqual([
        { kind: 'cancel_authorization', status: 'succeeded', amount: row.charge.authorized, cancellationReason: expired ? 'expired' : null },
        'canceled',
        expired ? 'automatic' : null,
        0,
      ]);
    }
  }
  // Announced as authorizations, never as charges: Charge Authorized, then Charge Captured / Authorization Canceled / Expired.
  const byType = run.ledger.events.byType;
  const authorized = ledger!.rows.filter((r) => r.charge.status === 'succeeded').length;
  expect(byType['Charge Authorized']).toBe(authorized);
  expect((byType['Charge Captured'] ?? 0) + (byType['Authorization Canceled'] ?? 0) + (byType['Authorization Expired'] ?? 0)).toBe(authorized);
  expect(byType['Authorization Expired'] ?? 0).toBe(ledger!.expired);
}

export function expectConnectKept(run: ProfileRun): void {
  const connectOrders = run.workload.orders.filter((o) => o.account !== undefined || o.transferDestination !== undefined);
  expect(connectOrders.length, 'the workload has Connect orders').toBeGreaterThan(0);
  const accounts = [...new Set(connectOrders.flatMap((o) => [o.account, o.transferDestination]).filter((a): a is string => a !== undefined))].sort();
  expect(accounts, 'two connected accounts').toHaveLength(2);
  const byOrder = new Map(run.operations.map((op) => [op.order_id, op]));
  for (const order of connectOrders) {
    const where = order.account ?? null;
    // (A fault may have declined it before anything was made: none at all is judged by the invariants.)
    const pis = run.paymentIntents.filter((pi) => pi.metadata.order_id === order.orderId);
    expect(pis.map((pi) => pi.stripeAccount ?? null), `${order.orderId}: on ${where ?? 'the platform'} only`).toEqual(pis.map(() => where));
    for (const pi of pis) {
      expect(pi.transfer_data?.destination ?? null, `${order.orderId}: transfer destination`).toBe(order.transferDestination ?? null);
      expect(pi.application_fee_amount ?? null, `${order.orderId}: application fee`).toBe(order.applicationFeeAmount ?? null);
    }
    const op = byOrder.get(order.orderId)!;
    if (op.status === 'succeeded') expect(pis.find((pi) => pi.id === op.external_id)?.stripeAccount ?? null, `${order.orderId}: its PaymentIntent`).toBe(where);
  }
  // Not judged on nothing: each account has PaymentIntents of its own in the record.
  for (const account of accounts) expect(run.paymentIntents.some((pi) => pi.stripeAccount === account), `PaymentIntents on ${account}`).toBe(true);
  // Every request of a direct charge's operations (the charge, its refunds) made as its account.
  const operationIds = new Map(run.paymentIntents.map((pi) => [pi.metadata.operation_id, pi.stripeAccount ?? null]));
  for (const r of run.stripeRequests) {
    if (r.operationId === null || !operationIds.has(r.operationId)) continue;
    expect(r.account ?? null, `${r.endpoint} of ${r.operationId}`).toBe(operationIds.get(r.operationId));
  }
  for (const refund of run.refunds) {
    const pi = run.paymentIntents.find((p) => p.id === refund.payment_intent)!;
    const ofRefundOp = run.stripeRequests.filter((r) => r.endpoint === 'refund_create' && r.operationId === refund.metadata.operation_id);
    expect(ofRefundOp.map((r) => r.account ?? null), `the requests that made ${refund.id}`).toEqual(ofRefundOp.map(() => pi.stripeAccount ?? null));
  }
  // A refund of a direct charge on each account reached Stripe there.
  // (Unless a human is asked: the charge or the refund in review.)
  for (const plan of run.workload.refunds.filter((p) => connectOrders.some((o) => o.orderId === p.orderId && o.account !== undefined))) {
    const account = connectOrders.find((o) => o.orderId === plan.orderId)!.account!;
    const row = run.ledger.refunds.orders.find((o) => o.orderId === plan.orderId);
    const withHuman = row?.recorded.some((r) => r.reviewReason !== null) ?? false;
    const refunds = run.refunds.filter((r) => r.paymentIntentOrderId === plan.orderId && r.status === 'succeeded');
    if (byOrder.get(plan.orderId)?.status === 'succeeded' && !withHuman) expect(refunds.length, `${plan.orderId}: refunded on ${account}`).toBeGreaterThan(0);
    for (const r of refunds) expect(run.paymentIntents.find((pi) => pi.id === r.payment_intent)?.stripeAccount, `${r.id} on ${account}`).toBe(account);
  }
  // The ledger's section: each account, then the platform, counted as the fake's record counts.
  const connect = run.ledger.connect!;
  expect(connect.accounts.map((a) => a.account)).toEqual([...accounts, null]);
  for (const figures of connect.accounts) {
    const on = run.paymentIntents.filter((pi) => (pi.stripeAccount ?? null) === figures.account);
    expect(figures.atStripe?.paymentIntents, `${figures.account}: PaymentIntents`).toBe(on.length);
    if (figures.account !== null) {
      expect(figures.charges.operations, `${figures.account}: direct charges`).toBe(connectOrders.filter((o) => o.account === figures.account).length);
      expect(figures.destinationCharges.operations, `${figures.account}: destination charges`).toBe(connectOrders.filter((o) => o.transferDestination === figures.account).length);
      expect(figures.events.refused, `${figures.account}: events refused`).toBe(0);
    }
  }
}

/**
 * The refund scenarios of the workload (local/demo.ts REFUND_SCENARIOS), judged on the fake Stripe's
 * own record of Refunds and requests, beside the ledger's rows. A refund sent twice, an over-refund or
 * a conflicting refund that reached Stripe, a refund of a failed charge that was sent: each fails here.
 */
export function expectRefundsKept(run: ProfileRun): void {
  const { refunds } = run.ledger;
  const planned = run.workload.refunds;
  expect(new Set(planned.map((p) => p.scenario)), 'every refund scenario planned').toEqual(new Set(REFUND_SCENARIOS));
  // The checker's verdict rows: zero, and every refunded order judged (nothing left open).
  expect(refunds.verdicts).toMatchObject({ netAmount: 0, overRefund: 0, unrecordedRefund: 0, refundMisreported: 0 });
  // Not judged only when a human is asked: a refund in review, or a charge in review (its refunds wait with it).
  const withHuman = (o: (typeof refunds.orders)[number]) => o.charge?.status === 'in review' || o.recorded.some((r) => r.reviewReason !== null);
  const judged = (o: (typeof refunds.orders)[number]) => o.verdict === 'ok' || (o.verdict === 'open' && withHuman(o));
  expect(refunds.orders.filter((o) => !judged(o)).map((o) => `${o.orderId} (${o.scenario}): ${o.verdict}`)).toEqual([]);
  const duplicated = run.send?.duplicateCharges ?? {};
  // The product's own late charges (a create Stripe committed after the re-issue it allowed: the chaos
  // profile's late commits), each refunded in full by the duplicate remedy — found by Stripe's event
  // or by the watch after the re-issue. Judged here like the duplicates made behind its back.
  const ownKey = (pi: PaymentIntentRecord | undefined) => pi?.idempotencyKey?.startsWith('payment-op:') ?? false;
  const lateRemedies = refunds.orders.flatMap((o) => o.recorded.filter((r) => r.remedyOf !== null && ownKey(run.paymentIntents.find((pi) => pi.id === r.remedyOf))).map((r) => ({ orderId: o.orderId, row: r })));
  for (const { orderId, row: r } of lateRemedies) {
    const pi = run.paymentIntents.find((x) => x.id === r.remedyOf)!;
    expect([r.amount, r.status], `${orderId}: the remedy of the late charge ${pi.id}`).toEqual([pi.amount, 'succeeded']);
    expect(run.refunds.filter((x) => x.payment_intent === pi.id && x.status === 'succeeded').map((x) => x.amount), `${orderId}: ${pi.id} refunded once, in full`).toEqual([pi.amount]);
  }
  const lateOnly = new Set(lateRemedies.map((l) => l.orderId).filter((id) => !planned.some((p) => p.orderId === id) && !(id in duplicated)));
  expect(refunds.orders.map((o) => o.orderId).sort()).toEqual([...planned.map((p) => p.orderId), ...Object.keys(duplicated), ...lateOnly].sort());
  // The duplicate remedy: each extra PaymentIntent refunded in full, once, by the product itself.
  if (run.ledger.stripeEvents) expect(Object.keys(duplicated).length, 'an order charged twice behind the pipeline’s back').toBe(run.workload.duplicateCharges.length);
  for (const [orderId, extra] of Object.entries(duplicated)) {
    const row = refunds.orders.find((o) => o.orderId === orderId)!;
    expect(row.recorded.filter((r) => r.remedyOf === extra).map((r) => [r.remedyOf, r.amount, r.status]), orderId).toEqual([[extra, row.charge!.amount, 'succeeded']]);
    expect(run.refunds.filter((r) => r.payment_intent === extra).map((r) => [r.payment_intent, r.amount, r.reason, r.status]), orderId).toEqual([[extra, row.charge!.amount, 'duplicate', 'succeeded']]);
    expect(row.net, orderId).toBe(row.charge!.amount);
  }
  expect(refunds.operations.open).toBe(0);

  const lateRemedied = new Set(lateRemedies.map((l) => l.row.remedyOf));
  const returning = (orderId: string) => run.refunds.filter((r) => r.paymentIntentOrderId === orderId && r.status !== 'failed' && r.status !== 'canceled' && !lateRemedied.has(r.payment_intent));
  for (const plan of planned) {
    const label = `${plan.orderId} (${plan.scenario})`;
    const judgedRow = refunds.orders.find((o) => o.orderId === plan.orderId)!;
    // The scenario is about the producer's refunds: a late charge's remedy on the same order is judged above.
    const row = { ...judgedRow, recorded: judgedRow.recorded.filter((r) => !lateRemedied.has(r.remedyOf)) };
    const charge = run.operations.find((op) => op.order_id === plan.orderId)!;
    const atStripe = returning(plan.orderId);
    if (row.charge?.status === 'in review') {
      // Its refunds wait, durably, unsent, until a human settles the charge.
      expect(atStripe, label).toEqual([]);
      expect(row.recorded.every((r) => r.status === 'pending'), label).toBe(true);
      continue;
    }
    // A refund in review (its answer ambiguous past the key window) holds at most the one Refund it may have made.
    if (row.recorded.some((r) => r.reviewReason !== null)) {
      expect(atStripe.length, label).toBeLessThanOrEqual(plan.requests.length);
      continue;
    }
    // Whatever the charge did, Stripe's net is the ledger's.
    expect(row.net, label).toBe(row.expectedNet);
    if (charge.status !== 'succeeded') {
      // A declined order (or a charge a fault declined): nothing refunded, nothing sent, every request
      // recorded with its reason — rejected, or a refund operation failed because its charge did.
      expect(atStripe, label).toEqual([]);
      expect(run.stripeRequests.filter((r) => r.endpoint === 'refund_create' && row.recorded.some((o) => o.operationId === r.operationId)), label).toEqual([]);
      const told = [...row.rejected.map((r) => r.code), ...row.recorded.map((r) => `${r.status}:${r.errorCode}`)];
      // Every refund id asked is told (an empty list would make the next check pass on nothing).
      expect(told.length, label).toBeGreaterThanOrEqual(new Set(plan.requests.map((r) => r.refundId)).size);
      expect(told.every((c) => ['charge_failed', 'exceeds_charge', 'refund_conflict', 'failed:charge_failed'].includes(c)), label).toBe(true);
      continue;
    }
    const [first, second] = plan.requests;
    const amounts = (rs: readonly { amount: number }[]) => rs.map((r) => r.amount).sort((a, b) => a - b);
    switch (plan.scenario) {
      case 'partial':
      case 'full':
      case 'before_final':
      case 'repeat':
      // A declined card whose create met the fake's `processing` fault settles as succeeded later: then
      // its refund of the whole amount is an ordinary full refund.
      case 'failed_charge':
        // One refund operation and ONE Refund at Stripe, however often the request came.
        expect(row.recorded.map((r) => [r.refundId, r.amount, r.status]), label).toEqual([[first!.refundId, first!.amount, 'succeeded']]);
        expect(amounts(atStripe), label).toEqual([first!.amount]);
        expect(row.net, label).toBe(row.charge!.amount - first!.amount);
        break;
      case 'split':
        expect(amounts(row.recorded.filter((r) => r.status === 'succeeded')), label).toEqual(amounts(plan.requests));
        expect(amounts(atStripe), label).toEqual(amounts(plan.requests));
        expect(row.net, label).toBe(0);
        break;
      case 'conflict':
        // The original goes through; the rival (same id, other amount) is recorded and never sent.
        expect(row.recorded.map((r) => [r.refundId, r.amount, r.status]), label).toEqual([[first!.refundId, first!.amount, 'succeeded']]);
        expect(row.rejected, label).toEqual([{ code: 'refund_conflict', refundId: second!.refundId, amount: second!.amount }]);
        expect(amounts(atStripe), label).toEqual([first!.amount]);
        break;
      case 'over_refund': {
        // Refused before any Stripe call: no operation, no refund request for the charge's PaymentIntent.
        expect(row.recorded, label).toEqual([]);
        expect(row.rejected, label).toEqual([{ code: 'exceeds_charge', refundId: first!.refundId, amount: first!.amount }]);
        expect(run.stripeRequests.filter((r) => r.endpoint === 'refund_create' && r.paymentIntentId === charge.external_id), label).toEqual([]);
        expect(atStripe, label).toEqual([]);
        break;
      }
    }
  }
  // The repeats: SQS dropped the producer's second send, the database absorbed the late one.
  const repeats = planned.filter((p) => p.scenario === 'repeat').length;
  expect(refunds.requests).toMatchObject({ droppedBySqs: repeats, sendFailures: 0 });
}
