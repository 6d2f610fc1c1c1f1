// The watch after a re-issue, as pure decisions (lambdas/payments/watch.ts): what one look at a
// re-issued operation's objects means, and when the next one comes. No I/O.
import { describe, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../lambdas/payments/decisions.ts';
import type { ListAnswer } from '../lambdas/payments/gateway.ts';
import type { Operation, PaymentIntentView } from '../lambdas/payments/types.ts';
import { deferLook, failedLook, judgeWatch, MAX_WATCH_FAILURES, watchListScope, watchListWindow, type WatchedOperation } from '../lambdas/payments/watch.ts';
import { operation, OP_ID, T0 } from './support/operations.ts';

const MIN = 60_000;
const HOUR = 60 * MIN;
const at = (ms: number) => new Date(T0.getTime() + ms);

/** A charge first sent at T0, re-issued at +20 min, succeeded with generation 1's pi_g1; looked at `claimedAt`. */
function watched(op: Partial<Operation> = {}, claimedAt = at(20 * MIN + HOUR), watch: Partial<WatchedOperation['watch']> = {}): WatchedOperation {
  return {
    op: operation({ status: 'succeeded', externalId: 'pi_g1', keyGeneration: 1, firstAttemptedAt: at(20 * MIN), settledAt: at(21 * MIN), ...op }),
    watch: { operationId: OP_ID, watchedFrom: T0, reissuedAt: at(20 * MIN), finalCheckAt: at(25 * HOUR), checks: 0, failures: 0, ...watch },
    chargePaymentIntentId: null,
    claimedAt,
    leaseToken: 'lease',
  };
}
const pi = (id: string, generation: number, o: Partial<PaymentIntentView> = {}): PaymentIntentView => ({
  id,
  status: 'succeeded',
  amount: 1999,
  currency: 'eur',
  customer: 'cus_1',
  metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: String(generation) },
  ...o,
});
const list = (items: PaymentIntentView[], complete = true): ListAnswer<PaymentIntentView> => ({ items, pages: 1, requestIds: ['req_1'], complete });
const fixed = () => 0.5;

describe('one look at a re-issued charge', () => {
  it('lists from the first send to the moment of the look; a charge by its customer, a refund by its PaymentIntent', () => {
    const w = watched();
    expect(watchListWindow(w)).toEqual({
      createdGte: Math.floor((T0.getTime() - DEFAULT_POLICY.listWindowMarginMs) / 1000),
      createdLte: Math.ceil((w.claimedAt.getTime() + DEFAULT_POLICY.listWindowMarginMs) / 1000),
    });
    expect(watchListScope(w)).toEqual({ customer: 'cus_1' });
    const refund = { ...w, op: operation({ kind: 'refund', refund: { refundId: 'r1', parentOperationId: 'c', reason: null, paymentIntentId: null } }), chargePaymentIntentId: 'pi_charge' };
    expect(watchListScope(refund)).toEqual({ payment_intent: 'pi_charge' });
    expect(watchListScope({ ...refund, chargePaymentIntentId: null })).toBeNull();
  });

  it('a late PaymentIntent of the retired generation that charged goes to the duplicate-charge remedy; the watch looks again at the last look', () => {
    const look = judgeWatch(watched(), list([pi('pi_g1', 1), pi('pi_g0_late', 0)]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', findings: [], unsettled: [], nextCheckAt: at(25 * HOUR) });
    if (look.kind !== 'looked') throw new Error('looked');
    expect(look.remedies).toEqual([{ refundId: 'duplicate:pi_g0_late', paymentIntentId: 'pi_g0_late', amount: 1999 }]);
  });

  it('nothing late: no remedy, no finding; after the last look the watch is over', () => {
    expect(judgeWatch(watched(), list([pi('pi_g1', 1)]), DEFAULT_POLICY, fixed)).toMatchObject({ kind: 'looked', remedies: [], findings: [], nextCheckAt: at(25 * HOUR) });
    expect(judgeWatch(watched({}, at(25 * HOUR)), list([pi('pi_g1', 1)]), DEFAULT_POLICY, fixed)).toMatchObject({ kind: 'looked', nextCheckAt: null });
  });

  it('ignores objects of other operations, failed or canceled ones, and the operation’s own', () => {
    const others = [pi('pi_other', 0, { metadata: { operation_id: 'someone-else' } }), pi('pi_dead', 0, { status: 'requires_payment_method' }), pi('pi_gone', 0, { status: 'canceled' }), pi('pi_g1', 1)];
    expect(judgeWatch(watched(), list(others), DEFAULT_POLICY, fixed)).toMatchObject({ kind: 'looked', remedies: [], findings: [], unsettled: [] });
  });

  it('a late one that may still charge keeps the watch going past its last look until it settles; 7 days on, a finding', () => {
    const processing = pi('pi_g0_late', 0, { status: 'processing' });
    const look = judgeWatch(watched({}, at(25 * HOUR)), list([pi('pi_g1', 1), processing]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], findings: [], unsettled: ['pi_g0_late'] });
    if (look.kind !== 'looked') throw new Error('looked');
    expect(look.nextCheckAt!.getTime()).toBeGreaterThan(at(25 * HOUR).getTime());
    const stale = judgeWatch(watched({}, at(7 * 24 * HOUR)), list([pi('pi_g1', 1), processing]), DEFAULT_POLICY, fixed);
    expect(stale).toMatchObject({ kind: 'looked', nextCheckAt: null, findings: [{ kind: 'contradiction', objectId: 'pi_g0_late', status: 'processing' }] });
  });

  it('a late hold (requires_capture) of an authorization that succeeded with another is a finding at once; the watch stays until it settles, and 7 days on adds none', () => {
    const manual = { captureMethod: 'manual' as const };
    const held = pi('pi_g0_late', 0, { status: 'requires_capture' });
    const look = judgeWatch(watched(manual), list([pi('pi_g1', 1, { status: 'requires_capture' }), held]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], unsettled: ['pi_g0_late'], findings: [{ kind: 'contradiction', objectId: 'pi_g0_late', status: 'requires_capture' }] });
    if (look.kind !== 'looked') throw new Error('looked');
    expect(look.findings[0]!.reason).toMatch(/succeeded with pi_g1: a second authorization holds the customer's funds .*cancel it by hand/);
    expect(look.nextCheckAt).not.toBeNull();
    // Still held when the unsettled bound is reached: the one finding, and the watch ends.
    const stale = judgeWatch(watched(manual, at(7 * 24 * HOUR)), list([pi('pi_g1', 1), held]), DEFAULT_POLICY, fixed);
    expect(stale).toMatchObject({ kind: 'looked', nextCheckAt: null, findings: [{ kind: 'contradiction', objectId: 'pi_g0_late' }] });
    if (stale.kind !== 'looked') throw new Error('looked');
    expect(stale.findings).toHaveLength(1);
    // Released by Stripe's expiry (canceled): nothing more to say.
    expect(judgeWatch(watched(manual), list([pi('pi_g1', 1), pi('pi_g0_late', 0, { status: 'canceled' })]), DEFAULT_POLICY, fixed)).toMatchObject({ kind: 'looked', findings: [], unsettled: [] });
    // A charge that failed while a late hold holds the customer's funds: a finding too.
    const failed = judgeWatch(watched({ ...manual, status: 'failed', externalId: 'pi_declined' }), list([pi('pi_declined', 1, { status: 'requires_payment_method' }), held]), DEFAULT_POLICY, fixed);
    expect(failed).toMatchObject({ kind: 'looked', findings: [{ kind: 'contradiction', objectId: 'pi_g0_late' }] });
    if (failed.kind !== 'looked') throw new Error('looked');
    expect(failed.findings[0]!.reason).toMatch(/announced failed and the customer's funds are held/);
  });

  it('a late one the remedy may not refund (another amount) is a finding, not a refund', () => {
    const look = judgeWatch(watched(), list([pi('pi_g1', 1), pi('pi_odd', 0, { amount: 5 })]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], findings: [{ kind: 'contradiction', objectId: 'pi_odd', amount: 5 }] });
  });

  it('a charge that failed and a late PaymentIntent that charged: a finding (announced failed, charged)', () => {
    const look = judgeWatch(watched({ status: 'failed', externalId: 'pi_declined' }), list([pi('pi_declined', 1, { status: 'requires_payment_method' }), pi('pi_g0_late', 0)]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], findings: [{ kind: 'contradiction', objectId: 'pi_g0_late' }] });
  });

  it('settled on an OLDER generation’s PaymentIntent while the current one was sent: the last look waits for the current key to age too', () => {
    const w = watched({ externalId: 'pi_g0', keyGeneration: 1, firstAttemptedAt: at(20 * MIN) });
    const look = judgeWatch(w, list([pi('pi_g0', 0)]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', finalCheckAt: at(20 * MIN + 25 * HOUR), nextCheckAt: at(20 * MIN + 25 * HOUR) });
    // Settled on the current generation: the retired key's last look stands.
    expect(judgeWatch(watched(), list([pi('pi_g1', 1)]), DEFAULT_POLICY, fixed)).toMatchObject({ finalCheckAt: at(25 * HOUR) });
  });

  it('a list cut short proves nothing: looked again with backoff; after MAX_WATCH_FAILURES in a row, a finding and the watch ends', () => {
    const short = judgeWatch(watched(), list([pi('pi_g1', 1), pi('pi_g0_late', 0)], false), DEFAULT_POLICY, fixed);
    expect(short).toMatchObject({ kind: 'failed', finding: null });
    expect(short.nextCheckAt!.getTime()).toBeGreaterThan(watched().claimedAt.getTime());
    const last = failedLook(watched({}, undefined, { failures: MAX_WATCH_FAILURES - 1 }), 'List failed: StripeAPIError 500', DEFAULT_POLICY, fixed);
    expect(last).toMatchObject({ kind: 'failed', nextCheckAt: null, finding: { kind: 'watch_blind', objectId: OP_ID } });
  });

  it('an operation still open is not judged: looked at again later', () => {
    const w = watched({ status: 'unknown', externalId: null });
    expect(deferLook(w)).toMatchObject({ kind: 'later', nextCheckAt: new Date(w.claimedAt.getTime() + DEFAULT_POLICY.watchFirstAfterMs) });
  });

  it('an operation in review whose proof of absence a late commit contradicted: every charged PaymentIntent is a finding, nothing else changes, the watch goes on', () => {
    // Re-issued twice, the third generation "proven absent" too: in review. Then Stripe commits all three.
    const w = watched({ status: 'unknown', externalId: null, keyGeneration: 2, reviewReason: 'List proves that no PaymentIntent exists for this operation' }, at(30 * HOUR));
    const look = judgeWatch(w, list([pi('pi_g0', 0), pi('pi_g1', 1), pi('pi_g2', 2), pi('pi_g1_declined', 1, { status: 'requires_payment_method' })]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], unsettled: [], nextCheckAt: new Date(w.claimedAt.getTime() + DEFAULT_POLICY.watchFirstAfterMs) });
    if (look.kind !== 'looked') throw new Error('looked');
    expect(look.findings.map((f) => [f.kind, f.objectId])).toEqual([['contradiction', 'pi_g0'], ['contradiction', 'pi_g1'], ['contradiction', 'pi_g2']]);
    expect(look.findings[0]!.reason).toMatch(/in review \(List proves that no PaymentIntent exists.*\): Stripe holds 3 PaymentIntent\(s\) of it now/);
    // Nothing at Stripe: no finding, and still not over while the review lasts.
    expect(judgeWatch(w, list([]), DEFAULT_POLICY, fixed)).toMatchObject({ kind: 'looked', findings: [], nextCheckAt: new Date(w.claimedAt.getTime() + DEFAULT_POLICY.watchFirstAfterMs) });
  });
});

describe('one look at a re-issued refund', () => {
  const refund = (o: Partial<Operation> = {}) =>
    watched({ kind: 'refund', refund: { refundId: 'r1', parentOperationId: 'charge', reason: null, paymentIntentId: null }, externalId: 're_g1', ...o });
  const re = (id: string, generation: number, o: Partial<PaymentIntentView> = {}) => pi(id, generation, o);

  it('a second Refund of the operation that gave or may give money back: refunded_twice, never a remedy', () => {
    const look = judgeWatch({ ...refund(), chargePaymentIntentId: 'pi_charge' }, list([re('re_g1', 1), re('re_g0_late', 0)]), DEFAULT_POLICY, fixed);
    expect(look).toMatchObject({ kind: 'looked', remedies: [], unsettled: [], findings: [{ kind: 'refunded_twice', objectId: 're_g0_late' }] });
    const pending = judgeWatch(refund(), list([re('re_g1', 1), re('re_g0_late', 0, { status: 'pending' })]), DEFAULT_POLICY, fixed);
    expect(pending).toMatchObject({ kind: 'looked', unsettled: ['re_g0_late'], findings: [{ kind: 'refunded_twice', objectId: 're_g0_late', status: 'pending' }] });
  });

  it('a late Refund that failed or was canceled gave nothing back: no finding', () => {
    expect(judgeWatch(refund(), list([re('re_g1', 1), re('re_dead', 0, { status: 'failed' }), re('re_gone', 0, { status: 'canceled' })]), DEFAULT_POLICY, fixed)).toMatchObject({ findings: [], unsettled: [] });
  });

  it('a refund that failed and a late Refund that succeeded: a contradiction finding', () => {
    expect(judgeWatch(refund({ status: 'failed', externalId: null }), list([re('re_g0_late', 0)]), DEFAULT_POLICY, fixed)).toMatchObject({ findings: [{ kind: 'contradiction', objectId: 're_g0_late' }] });
  });
});
