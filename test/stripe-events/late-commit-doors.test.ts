// A late commit after an automatic re-issue, through every door: Stripe answers the first create 500,
// the product proves twice that nothing exists and re-issues (generation 1 charges), and only then does
// Stripe commit the first key's request (the fake's error_500_late_commit, released by the test). The
// order is charged twice; it must end refunded to one charge whether Stripe's events come as signed
// webhooks, through the EventBridge partner door, or not at all (polling only: the watch after the
// re-issue). The real stripe-events Lambda, the real engine, watch and remedy; the checker judges the
// money as the fake Stripe holds it.
import { describe, expect, it } from 'vitest';
import type { EnginePolicy } from '../../lambdas/payments/decisions.ts';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { ReissueWatcher } from '../../lambdas/payments/watcher.ts';
import { makeStripeEvent, paymentIntentJson } from '../../local/fake-stripe/webhooks.ts';
import { checkInvariants } from '../../local/invariants.ts';
import { driveOperation, FAST_LIST_POLICY, stepsOf, untilTrue } from '../support/engine.ts';
import { chargeOrderOfItsOwnCustomer as order } from '../support/orders.ts';
import { useHandlerHarness, type HandlerHarness } from './handler-harness.ts';

let h: HandlerHarness;
useHandlerHarness('late_commit_doors', (ready) => (h = ready));

const POLICY: Partial<EnginePolicy> = { ...FAST_LIST_POLICY, sameKeyResends: 0, watchFirstAfterMs: 300, watchFinalAfterFirstSendMs: 1_500 };
const engine = () => new ChargeEngine({ db: h.db.pool, gateway: h.stripe.gateway, actor: 'test', random: () => 0.5, policy: POLICY });

/** Charged under generation 1 after two proofs; then Stripe commits generation 0's request. */
async function lateCommitAfterReissue() {
  const input = order();
  const id = await engine().requestCharge(input);
  h.stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_late_commit');
  expect(stepsOf(await driveOperation(h.db.pool, engine(), id))).toEqual(['create', 'list', 'list', 'create']);
  const [committed] = h.stripe.fake.commitLate({ operationId: id });
  expect(committed).toMatchObject({ status: 200, fault: 'error_500_late_commit' });
  const late = h.stripe.fake.paymentIntents({ operationId: id }).find((p) => p.id === committed!.paymentIntentId)!;
  expect(late.metadata.key_generation).toBe('0');
  expect(h.stripe.fake.paymentIntents({ orderId: input.orderId }).filter((p) => p.status === 'succeeded')).toHaveLength(2);
  return { input, id, late };
}

/** The remedy's refund operation exists (made by whichever door), is sent by the reconciler's page, and the money is one charge. */
async function endsRefundedToOneCharge(input: { orderId: string }, id: string, lateId: string) {
  await untilTrue(h.db.pool, 'SELECT count(*) = 1 AS ok FROM payment_operations WHERE refund_payment_intent = $1', lateId, 'remedy');
  await engine().reconcileDue(100);
  const refunds = h.stripe.fake.refunds({ orderId: input.orderId });
  expect(refunds.map((r) => [r.payment_intent, r.amount, r.status])).toEqual([[lateId, h.stripe.fake.paymentIntents({ operationId: id })[0]!.amount, 'succeeded']]);
  const report = await checkInvariants({ db: h.db.pool, paymentIntents: h.stripe.fake.paymentIntents(), refunds: h.stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
  expect(report.violations).toEqual([]);
  expect(report.lateCommits).toBe(1);
}

describe('a late commit after an automatic re-issue ends refunded, through every door', () => {
  it('signed webhook: payment_intent.succeeded of the late PaymentIntent → one retrieve → the remedy', async () => {
    const { input, id, late } = await lateCommitAfterReissue();
    await h.sendOverHttp('payment_intent.succeeded', paymentIntentJson(late));
    await endsRefundedToOneCharge(input, id, late.id);
  });

  it('the EventBridge partner door: the same event, invoked as EventBridge invokes the function → the remedy', async () => {
    const { input, id, late } = await lateCommitAfterReissue();
    await h.sendThroughEventBridge(makeStripeEvent('payment_intent.succeeded', paymentIntentJson(late)));
    await endsRefundedToOneCharge(input, id, late.id);
  });

  it('no door at all (Stripe events off, polling only): the watch after the re-issue finds it → the remedy', async () => {
    const { input, id, late } = await lateCommitAfterReissue();
    await untilTrue(h.db.pool, 'SELECT next_check_at <= now() AS ok FROM payment_operation_watches WHERE operation_id = $1', id, 'watch due');
    const watcher = new ReissueWatcher({ db: h.db.pool, gateway: h.stripe.gateway, actor: 'test', random: () => 0.5, policy: POLICY });
    expect(await watcher.lookDue(100)).toMatchObject({ remediesCreated: 1 });
    await endsRefundedToOneCharge(input, id, late.id);
  });
});
