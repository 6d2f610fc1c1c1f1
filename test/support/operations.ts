// A claimed charge operation as the pure decision functions see it, on a fixed id and clock (T0):
// the decision tests override what each case is about.
import type { ClaimedOperation } from '../../lambdas/payments/types.ts';

export const OP_ID = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
export const T0 = new Date('2026-11-29T09:00:00Z');

/** Pending, never attempted, claimed at T0 with a one-minute lease. */
export function claimedOperation(overrides: Partial<ClaimedOperation> = {}): ClaimedOperation {
  return {
    id: OP_ID,
    kind: 'charge',
    refund: null,
    orderId: 'order-1',
    amount: 1999,
    currency: 'eur',
    customerId: 'cus_1',
    paymentMethod: 'pm_card_visa',
    status: 'pending',
    externalId: null,
    attempts: 0,
    firstAttemptedAt: T0,
    lastError: null,
    lastErrorClass: null,
    leaseToken: 'lease',
    leaseUntil: new Date(T0.getTime() + 60_000),
    nextAttemptAt: T0,
    reviewReason: null,
    keyGeneration: 0,
    createdAt: T0,
    updatedAt: T0,
    settledAt: null,
    claimedAt: T0,
    ...overrides,
  };
}
