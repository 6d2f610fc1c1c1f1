// Operations as the pure decision and rendering functions see them, on a fixed id and clock (T0):
// the tests override what each case is about.
import type { ClaimedOperation, Operation } from '../../lambdas/payments/types.ts';

export const OP_ID = '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b';
export const T0 = new Date('2026-11-29T09:00:00Z');

/** A charge of 1999 eur, pending, never attempted, first sent at T0, nobody's lease. */
export function operation(overrides: Partial<Operation> = {}): Operation {
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
    leaseToken: null,
    leaseUntil: null,
    nextAttemptAt: T0,
    reviewReason: null,
    keyGeneration: 0,
    createdAt: T0,
    updatedAt: T0,
    settledAt: null,
    ...overrides,
  };
}

/** That operation claimed at T0 with a one-minute lease. */
export function claimedOperation(overrides: Partial<ClaimedOperation> = {}): ClaimedOperation {
  return {
    ...operation(),
    leaseToken: 'lease',
    leaseUntil: new Date(T0.getTime() + 60_000),
    firstAttemptedAt: T0,
    claimedAt: T0,
    ...overrides,
  };
}
