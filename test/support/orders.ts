// A valid charge request with a fresh order id, and a valid refund request of an order; tests
// override what they are about.
import { randomUUID } from 'node:crypto';
import type { ChargeInput, RefundInput } from '../../lambdas/payments/types.ts';

export function chargeOrder(overrides: Partial<ChargeInput> = {}): ChargeInput {
  return {
    orderId: `order-${randomUUID()}`,
    amount: 1999,
    currency: 'eur',
    customerId: 'cus_test',
    paymentMethod: 'pm_card_visa',
    ...overrides,
  };
}

/** A charge request whose customer is its own: a List of the customer's PaymentIntents sees only this order's. */
export function chargeOrderOfItsOwnCustomer(overrides: Partial<ChargeInput> = {}): ChargeInput {
  return chargeOrder({ customerId: `cus_${randomUUID().slice(0, 8)}`, ...overrides });
}

/** A refund request of `orderId` with a fresh refund id (500, requested by the customer). */
export function refundOf(orderId: string, overrides: Partial<RefundInput> = {}): RefundInput {
  return { orderId, refundId: `rf-${randomUUID()}`, amount: 500, reason: 'requested_by_customer', ...overrides };
}
