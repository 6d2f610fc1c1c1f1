// Shared by the end-to-end tests: one local pipeline (real handlers, fauxqs, the fake Stripe and
// EventBridge, the suite's PostgreSQL 18) driven by a small demo workload, then judged against the
// fake Stripe's OWN record of PaymentIntents — not against what the database believes.
import { inject } from 'vitest';
import { expect } from 'vitest';
import { buildWorkload, runWorkload, type WorkloadRun } from '../../local/demo.ts';
import type { FaultProfileName } from '../../local/fake-stripe/server.ts';
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import { startPipeline, type PipelineOptions, type TimeLapse } from '../../local/pipeline.ts';

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
};

export interface ProfileRun extends WorkloadRun {
  /** Ground truth: every PaymentIntent the fake Stripe ever created. */
  readonly paymentIntents: readonly PaymentIntentRecord[];
  readonly operations: readonly { order_id: string; status: string; external_id: string | null; review_reason: string | null }[];
  readonly sentOrderIds: readonly string[];
  readonly elapsedMs: number;
}

export async function runProfile(
  faults: FaultProfileName,
  options: { orders?: number; seed?: number; timeoutMs?: number; webhooks?: PipelineOptions['webhooks'] } = {},
): Promise<ProfileRun> {
  const started = Date.now();
  const pipeline = await startPipeline({
    postgres: { kind: 'server', adminUrl: inject('pgAdminUrl') },
    stripe: { kind: 'fake', faults, seed: options.seed ?? 42 },
    timeLapse: TEST_TIME_LAPSE,
    pollers: 4,
    logLevel: 'SILENT',
    metricsDisabled: true,
    ...(options.webhooks !== undefined ? { webhooks: options.webhooks } : {}),
  });
  try {
    // No pm_fake_processing orders: the fault profiles inject `processing` anyway, and each such
    // operation waits 15-60 s (the engine's backoff, which the time-lapse does not shorten) for its
    // retrieve; a few more of them would only make the test slower, not stronger.
    const workload = buildWorkload({ orders: options.orders ?? 60, duplicates: 0.3, seed: options.seed ?? 42, tag: `e2e-${faults}`, processing: false });
    const run = await runWorkload(pipeline, workload, { timeoutMs: options.timeoutMs ?? 80_000 });
    const { rows } = await pipeline.db.query<ProfileRun['operations'][number]>('SELECT order_id, status, external_id, review_reason FROM payment_operations');
    return {
      ...run,
      paymentIntents: pipeline.fakeStripe!.paymentIntents(),
      operations: rows,
      sentOrderIds: run.send?.sentOrderIds ?? [],
      elapsedMs: Date.now() - started,
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

  // At most one succeeded PaymentIntent per order, whatever the database says.
  const succeededByOrder = new Map<string, string[]>();
  for (const pi of run.paymentIntents) {
    if (pi.status !== 'succeeded') continue;
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
  // succeeded ⇔ a succeeded PaymentIntent at Stripe, and it is the one the operation names.
  for (const op of run.operations) {
    const charged = succeededByOrder.get(op.order_id) ?? [];
    if (op.status === 'succeeded') expect(charged).toEqual([op.external_id]);
    if (op.status === 'failed') expect(charged).toEqual([]);
  }
  // Every outcome was announced, and the outbox is empty.
  expect(ledger.events.unpublished).toBe(0);
  expect(ledger.events.published).toBeGreaterThanOrEqual(ledger.operations.succeeded + ledger.operations.failed + ledger.operations.inReview);
  // The bad messages were rejected, not charged.
  expect(ledger.rejected.byReason).toEqual({ invalid_json: 1, invalid_body: 1, order_conflict: 1 });
}
