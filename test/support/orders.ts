// A valid charge request with a fresh order id; tests override what they are about.
import { randomUUID } from 'node:crypto';
import type { ChargeInput } from '../../lambdas/payments/types.ts';

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
