// The pure decisions of Stripe events in, every branch without I/O.
import { describe, expect, it } from 'vitest';
import {
  aftermathOf,
  claimedOperationId,
  confirmRetrieved,
  decidePaymentIntentEvent,
  decideRefundAfterRetrieve,
  decideRefundEvent,
  judgeEventOrigin,
  readStripeEvent,
  refundOf,
  type EventOriginPolicy,
  type EventPaymentIntent,
  type EventRefund,
} from '../../lambdas/payments/event-decisions.ts';
import { stripeKeyMode } from '../../lambdas/payments/gateway.ts';
import type { Operation } from '../../lambdas/payments/types.ts';
import { makeStripeEvent } from '../../local/fake-stripe/webhooks.ts';

const OP_ID = '0190a4f0-0000-7000-8000-000000000001';
const op = (overrides: Partial<Operation> = {}): Operation => ({
  id: OP_ID, kind: 'charge', refund: null, orderId: 'order-1', amount: 1000, currency: 'eur', customerId: 'cus_1', paymentMethod: 'pm_card_visa',
  status: 'unknown', externalId: 'pi_1', attempts: 1, firstAttemptedAt: new Date(), lastError: null, lastErrorClass: null,
  leaseToken: null, leaseUntil: null, nextAttemptAt: new Date(), reviewReason: null, keyGeneration: 0,
  createdAt: new Date(), updatedAt: new Date(), settledAt: null, ...overrides,
});
const pi = (overrides: Partial<EventPaymentIntent> = {}): EventPaymentIntent => ({
  id: 'pi_1', status: 'succeeded', amount: 1000, currency: 'eur', customer: 'cus_1',
  metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '0' }, ...overrides,
});
const kind = (o: Operation | null, p: EventPaymentIntent) => {
  const d = decidePaymentIntentEvent(o, p);
  return d.kind === 'ignore' ? `ignore:${d.outcome}` : d.kind;
};

describe('decidePaymentIntentEvent', () => {
  it('open operation: every status is a settle — which the applier makes only on the retrieved PaymentIntent (no snapshot is trusted alone)', () => {
    for (const status of ['succeeded', 'canceled', 'processing', 'requires_action', 'requires_payment_method', 'requires_capture']) expect(kind(op(), pi({ status }))).toBe('settle');
    expect(kind(op({ status: 'pending', externalId: null }), pi())).toBe('settle');
  });

  it('open operation: not ours, not this one → review when money may move, ignored otherwise', () => {
    expect(kind(op(), pi({ customer: 'cus_2' }))).toBe('review');
    expect(kind(op(), pi({ amount: 999 }))).toBe('review');
    expect(kind(op(), pi({ metadata: { operation_id: OP_ID, order_id: 'order-2' } }))).toBe('review');
    expect(kind(op({ keyGeneration: 1 }), pi())).toBe('review');
    expect(kind(op({ keyGeneration: 1 }), pi({ status: 'canceled' }))).toBe('ignore:other_payment_intent');
    // A second PaymentIntent that charged the order while the operation holds another: which one is
    // the extra is known only once the operation is final (then: duplicate_charge, below).
    expect(kind(op(), pi({ id: 'pi_2' }))).toBe('await_final');
    expect(kind(op(), pi({ id: 'pi_2', status: 'processing' }))).toBe('review');
    expect(kind(op(), pi({ id: 'pi_2', amount: 999 }))).toBe('review');
    expect(kind(op(), pi({ id: 'pi_2', status: 'requires_payment_method' }))).toBe('ignore:other_payment_intent');
    expect(kind(op({ reviewReason: 'x' }), pi())).toBe('in_review');
  });

  it('final operation: agreeing or older events are stale; contradictions are named', () => {
    const succeeded = op({ status: 'succeeded' });
    expect(kind(succeeded, pi())).toBe('stale');
    expect(kind(succeeded, pi({ status: 'processing' }))).toBe('stale');
    expect(kind(succeeded, pi({ status: 'canceled' }))).toBe('contradiction');
    // A second charge of the order (its amount, currency, customer): the duplicate-charge remedy.
    expect(kind(succeeded, pi({ id: 'pi_2' }))).toBe('duplicate_charge');
    expect(kind(succeeded, pi({ id: 'pi_2', metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '1' } }))).toBe('duplicate_charge');
    // Money we cannot explain (another amount, customer, currency or order) stays a contradiction for a human.
    expect(kind(succeeded, pi({ id: 'pi_2', amount: 999 }))).toBe('contradiction');
    expect(kind(succeeded, pi({ id: 'pi_2', customer: 'cus_2' }))).toBe('contradiction');
    expect(kind(succeeded, pi({ id: 'pi_2', currency: 'usd' }))).toBe('contradiction');
    expect(kind(succeeded, pi({ id: 'pi_2', metadata: { operation_id: OP_ID, order_id: 'order-2' } }))).toBe('contradiction');
    expect(kind(succeeded, pi({ id: 'pi_2', status: 'processing' }))).toBe('contradiction');
    expect(kind(succeeded, pi({ id: 'pi_2', status: 'canceled' }))).toBe('stale');
    const failed = op({ status: 'failed' });
    expect(kind(failed, pi())).toBe('contradiction');
    expect(kind(failed, pi({ status: 'processing' }))).toBe('stale');
    expect(kind(failed, pi({ id: 'pi_2', status: 'processing' }))).toBe('contradiction');
    expect(kind(failed, pi({ status: 'requires_payment_method' }))).toBe('stale');
  });

  it('no operation: ours and money may move → unrecorded; foreign or harmless → ignored', () => {
    expect(kind(null, pi())).toBe('unrecorded');
    expect(kind(null, pi({ status: 'processing' }))).toBe('unrecorded');
    expect(kind(null, pi({ status: 'canceled' }))).toBe('ignore:unknown_operation');
    expect(kind(null, pi({ metadata: {} }))).toBe('ignore:foreign');
  });
});

describe('reading events', () => {
  it('an event needs id, type, created and data.object', () => {
    expect(readStripeEvent(makeStripeEvent('x.y', { id: 'o_1' })).ok).toBe(true);
    expect(readStripeEvent({ id: 'evt_1', type: 'x', created: 1 })).toMatchObject({ ok: false });
    expect(readStripeEvent('nope')).toMatchObject({ ok: false });
  });

  it('a refund amount is the change in amount_refunded (previous_attributes), not the total', () => {
    const e = readStripeEvent(makeStripeEvent('charge.refunded', { id: 'ch_1', object: 'charge', amount: 1000, amount_refunded: 700, currency: 'eur', payment_intent: 'pi_1' }, { previousAttributes: { amount_refunded: 200 } }));
    expect(e.ok && aftermathOf(e.event)).toMatchObject({ kind: 'refunded', amount: 500, amountRefunded: 700, chargeId: 'ch_1', paymentIntentId: 'pi_1' });
  });
});

describe('decideRefundEvent', () => {
  const CHARGE_ID = '0190a4f0-0000-7000-8000-0000000000c1';
  const refundOp = (overrides: Partial<Operation> = {}): Operation =>
    op({ kind: 'refund', amount: 400, externalId: 're_1', refund: { refundId: 'rf-1', parentOperationId: CHARGE_ID, reason: null, paymentIntentId: null }, ...overrides });
  const refund = (overrides: Partial<EventRefund> = {}): EventRefund => ({
    id: 're_1', status: 'succeeded', amount: 400, currency: 'eur', paymentIntentId: 'pi_1', failureReason: null,
    metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '0', refund_id: 'rf-1' }, ...overrides,
  });
  const decide = (o: Operation | null, r: EventRefund) => {
    const d = decideRefundEvent(o, r, 'pi_1');
    return d.kind === 'ignore' ? `ignore:${d.outcome}` : d.kind;
  };

  it('open operation: succeeded, failed and canceled settle by the snapshot; pending and requires_action change nothing', () => {
    for (const status of ['succeeded', 'failed', 'canceled']) expect(decide(refundOp(), refund({ status }))).toBe('settle');
    for (const status of ['pending', 'requires_action', 'something_new']) expect(decide(refundOp(), refund({ status }))).toBe('stale');
    // Not yet knowing its Refund id (the create answer was lost): adopted by operation id.
    expect(decide(refundOp({ externalId: null, status: 'pending' }), refund())).toBe('settle');
    // In review: a final, matching Refund settles it (the evidence the operator would look for); anything else is noted.
    expect(decide(refundOp({ reviewReason: 'still pending after 7 days' }), refund())).toBe('settle');
    expect(decide(refundOp({ reviewReason: 'still pending after 7 days' }), refund({ status: 'failed' }))).toBe('settle');
    expect(decide(refundOp({ reviewReason: 'still pending after 7 days' }), refund({ status: 'pending' }))).toBe('in_review');
    expect(decide(refundOp({ reviewReason: 'still pending after 7 days' }), refund({ amount: 1 }))).toBe('contradiction');
  });

  it("the remedy's refund in review holding its failed Refund: only a succeeded Refund settles it (the applier retrieves first and decides again on Stripe's), another failed copy is a note", () => {
    const remedyInReview = refundOp({ reviewReason: "the duplicate-charge remedy's Refund re_1 of pi_extra is failed at Stripe", refund: { refundId: 'dup', parentOperationId: CHARGE_ID, reason: 'duplicate', paymentIntentId: 'pi_extra' } });
    const remedyRefund = (status: string) => refund({ status, paymentIntentId: 'pi_extra' });
    expect(decideRefundEvent(remedyInReview, remedyRefund('succeeded'), 'pi_1').kind).toBe('settle');
    expect(decideRefundEvent(remedyInReview, remedyRefund('failed'), 'pi_1').kind).toBe('in_review');
    expect(decideRefundEvent(remedyInReview, remedyRefund('canceled'), 'pi_1').kind).toBe('in_review');
    // Not yet holding a Refund (its create was refused): a matching final Refund is still the evidence.
    expect(decideRefundEvent({ ...remedyInReview, externalId: null }, remedyRefund('succeeded'), 'pi_1').kind).toBe('settle');
  });

  it('ownership: another amount, currency, PaymentIntent, order, operation id or Refund id is a contradiction, whatever the status', () => {
    expect(decide(refundOp(), refund({ amount: 401 }))).toBe('contradiction');
    expect(decide(refundOp(), refund({ currency: 'usd' }))).toBe('contradiction');
    expect(decide(refundOp(), refund({ paymentIntentId: 'pi_2' }))).toBe('contradiction');
    expect(decide(refundOp(), refund({ metadata: { operation_id: OP_ID, order_id: 'order-2' } }))).toBe('contradiction');
    expect(decide(refundOp(), refund({ id: 're_2' }))).toBe('contradiction');
    expect(decide(refundOp({ status: 'succeeded' }), refund({ amount: 1, status: 'failed' }))).toBe('contradiction');
    // The remedy refunds the EXTRA PaymentIntent it names, not the charge's.
    const remedy = refundOp({ refund: { refundId: 'dup', parentOperationId: CHARGE_ID, reason: 'duplicate', paymentIntentId: 'pi_extra' } });
    expect(decideRefundEvent(remedy, refund({ paymentIntentId: 'pi_extra' }), 'pi_1').kind).toBe('settle');
    expect(decideRefundEvent(remedy, refund({ paymentIntentId: 'pi_1' }), 'pi_1').kind).toBe('contradiction');
  });

  it('final operation: never rewritten — a later failure of a succeeded refund is a fact; a succeeded snapshot against a failure is retrieved', () => {
    expect(decide(refundOp({ status: 'succeeded' }), refund({ status: 'failed', failureReason: 'lost_or_stolen_card' }))).toBe('failed_after_success');
    expect(decide(refundOp({ status: 'succeeded' }), refund({ status: 'canceled' }))).toBe('contradiction');
    expect(decide(refundOp({ status: 'succeeded' }), refund({ status: 'succeeded' }))).toBe('stale');
    expect(decide(refundOp({ status: 'succeeded' }), refund({ status: 'pending' }))).toBe('stale');
    expect(decide(refundOp({ status: 'failed' }), refund({ status: 'succeeded' }))).toBe('retrieve');
    expect(decide(refundOp({ status: 'failed' }), refund({ status: 'failed' }))).toBe('stale');
    expect(decide(refundOp({ status: 'failed' }), refund({ status: 'pending' }))).toBe('stale');
    expect(decideRefundAfterRetrieve(refund({ status: 'succeeded' })).kind).toBe('contradiction');
    expect(decideRefundAfterRetrieve(refund({ status: 'failed' })).kind).toBe('stale');
  });

  it('not ours: a Dashboard refund (no metadata, no operation) is foreign; a charge operation is no refund operation', () => {
    expect(decide(null, refund({ metadata: {} }))).toBe('ignore:foreign');
    expect(decide(null, refund())).toBe('ignore:unknown_operation');
    expect(decide(op({ status: 'succeeded' }), refund())).toBe('ignore:foreign');
  });

  it('reads the Refund inside every refund event type; anything else is not one', () => {
    const object = { id: 're_9', object: 'refund', amount: 300, currency: 'eur', status: 'failed', failure_reason: 'expired_or_canceled_card', payment_intent: 'pi_9', metadata: { operation_id: OP_ID.toUpperCase() } };
    for (const type of ['refund.created', 'refund.updated', 'refund.failed', 'charge.refund.updated']) {
      const e = readStripeEvent(makeStripeEvent(type, object));
      const r = e.ok ? refundOf(e.event) : null;
      expect(r).toMatchObject({ id: 're_9', status: 'failed', amount: 300, paymentIntentId: 'pi_9', failureReason: 'expired_or_canceled_card' });
      expect(claimedOperationId(r!)).toBe(OP_ID);
    }
    const charge = readStripeEvent(makeStripeEvent('refund.updated', { ...object, object: 'charge' }));
    expect(charge.ok && refundOf(charge.event)).toBeNull();
    const noAmount = readStripeEvent(makeStripeEvent('refund.updated', { ...object, amount: '300' }));
    expect(noAmount.ok && refundOf(noAmount.event)).toBeNull();
  });
});

describe('where an event comes from (judgeEventOrigin) and the key mode (stripeKeyMode)', () => {
  const policy = (keyMode: EventOriginPolicy['keyMode'], accounts: string[] = []): EventOriginPolicy => ({ keyMode, connectedAccounts: new Set(accounts) });
  const view = (fields: Record<string, unknown>) => {
    const read = readStripeEvent({ ...makeStripeEvent('payment_intent.succeeded', { id: 'pi_1' }), ...fields });
    if (!read.ok) throw new Error(read.reason);
    return read.event;
  };
  const verdict = (fields: Record<string, unknown>, p: EventOriginPolicy) => {
    const v = judgeEventOrigin(view(fields), p);
    return v.kind === 'refused' ? v.outcome : v.kind;
  };

  it('the key mode is its prefix; anything else is unrecognisable', () => {
    expect(['sk_live_a', 'rk_live_a', 'sk_test_a', 'rk_test_a', 'pk_live_a', 'sk_a', 'whsec_a', ''].map(stripeKeyMode)).toEqual(['live', 'live', 'test', 'test', null, null, null, null]);
  });

  it('an event of our mode and our own account is accepted; the other mode, a missing mode, or an unrecognisable key is refused', () => {
    expect(verdict({ livemode: false }, policy('test'))).toBe('accepted');
    expect(verdict({ livemode: true }, policy('live'))).toBe('accepted');
    expect(verdict({ livemode: true }, policy('test'))).toBe('livemode_mismatch');
    expect(verdict({ livemode: false }, policy('live'))).toBe('livemode_mismatch');
    expect(verdict({ livemode: undefined }, policy('test'))).toBe('livemode_mismatch');
    expect(verdict({ livemode: false }, policy('unrecognised'))).toBe('livemode_mismatch');
    expect(verdict({ livemode: true }, policy('unrecognised'))).toBe('livemode_mismatch');
    // The reason tells the operator what to change: the key, not the endpoint.
    expect(judgeEventOrigin(view({ livemode: false }), policy('unrecognised'))).toMatchObject({ reason: expect.stringMatching(/neither sk_live_\/rk_live_ nor sk_test_\/rk_test_/) });
    expect(judgeEventOrigin(view({ livemode: true }), policy('test'))).toMatchObject({ reason: expect.stringMatching(/a live-mode event, and our key is test/) });
    // No key yet: the mode cannot be compared — the event waits, it is not refused.
    expect(verdict({ livemode: false }, policy('no_key'))).toBe('wait');
  });

  it('an event of a connected account is refused whatever its mode, also without a key; the allow-list (empty today) is where Connect accounts would go', () => {
    expect(verdict({ account: 'acct_1Other', livemode: false }, policy('test'))).toBe('foreign_account');
    expect(verdict({ account: 'acct_1Other', livemode: true }, policy('no_key'))).toBe('foreign_account');
    expect(verdict({ account: 'acct_1Other', livemode: false }, policy('test', ['acct_1Allowed']))).toBe('foreign_account');
    expect(verdict({ account: 'acct_1Allowed', livemode: false }, policy('test', ['acct_1Allowed']))).toBe('accepted');
    expect(verdict({ account: null, livemode: false }, policy('test'))).toBe('accepted');
    // An authentication context (organizations, Connect): another account's object.
    expect(verdict({ context: 'acct_1Other', livemode: false }, policy('test'))).toBe('foreign_account');
  });
});

describe('what Stripe returned against what the event said (confirmRetrieved)', () => {
  const snap = pi();
  it('the same object, in the same or a later status: confirmed', () => {
    expect(confirmRetrieved('PaymentIntent', snap, pi())).toBeNull();
    expect(confirmRetrieved('PaymentIntent', pi({ status: 'processing' }), pi({ status: 'succeeded' }))).toBeNull();
    expect(confirmRetrieved('PaymentIntent', pi({ status: 'processing' }), pi({ status: 'requires_payment_method' }))).toBeNull();
    expect(confirmRetrieved('Refund', pi({ status: 'succeeded' }), pi({ status: 'failed' }))).toBeNull(); // a Refund may fail after it succeeded
  });

  it('not ours, another amount, currency or customer, or a status the object never leaves that Stripe does not hold: not confirmed', () => {
    expect(confirmRetrieved('PaymentIntent', snap, pi({ id: 'pi_2' }))).toMatch(/another object/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ metadata: { operation_id: '0190a4f0-0000-7000-8000-000000000002' } }))).toMatch(/not ours/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ metadata: {} }))).toMatch(/not ours/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ amount: 999 }))).toMatch(/is not what Stripe holds/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ currency: 'usd' }))).toMatch(/is not what Stripe holds/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ customer: 'cus_2' }))).toMatch(/customer/);
    expect(confirmRetrieved('PaymentIntent', snap, pi({ status: 'processing' }))).toMatch(/never leaves/);
    expect(confirmRetrieved('PaymentIntent', pi({ status: 'canceled' }), pi({ status: 'succeeded' }))).toMatch(/never leaves/);
    expect(confirmRetrieved('Refund', pi({ status: 'failed' }), pi({ status: 'succeeded' }))).toMatch(/never leaves/);
    expect(confirmRetrieved('Refund', pi({ status: 'canceled' }), pi({ status: 'pending' }))).toMatch(/never leaves/);
  });
});
