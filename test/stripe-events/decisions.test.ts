// The pure decisions of Stripe events in, every branch without I/O.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { chargeAftermathDetailJsonSchema } from '../../lambdas/events/contract.ts';
import { aftermathOf, decidePaymentIntentEvent, readStripeEvent, type EventPaymentIntent } from '../../lambdas/payments/event-decisions.ts';
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
  return d.kind === 'settle' ? `settle:${d.evidence}` : d.kind === 'ignore' ? `ignore:${d.outcome}` : d.kind;
};

describe('decidePaymentIntentEvent', () => {
  it('open operation: terminal snapshots are trusted, everything else is retrieved', () => {
    expect(kind(op(), pi({ status: 'succeeded' }))).toBe('settle:snapshot');
    expect(kind(op(), pi({ status: 'canceled' }))).toBe('settle:snapshot');
    for (const status of ['processing', 'requires_action', 'requires_payment_method', 'requires_capture']) expect(kind(op(), pi({ status }))).toBe('settle:retrieve');
    expect(kind(op({ status: 'pending', externalId: null }), pi())).toBe('settle:snapshot');
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

describe('the consumer contract', () => {
  it('the committed aftermath JSON Schema is the one generated from the code', () => {
    expect(JSON.parse(readFileSync('schemas/charge-aftermath-detail.v1.json', 'utf8'))).toEqual(chargeAftermathDetailJsonSchema());
  });
});
