// One error hierarchy for the domain. Errors are identified by `name` and carry what a caller needs.
// OutcomesNotRecordedError, which carries a batch's request results, is in request-results.ts.
import type { AuthorizationInput, ChargeInput, Operation, RefundInput } from './types.ts';

export class PaymentsError extends Error {
  override readonly name: string = 'PaymentsError';
}

/**
 * The order already has an operation with different parameters. Never a second operation, never a
 * charge: the message is rejected and a human looks (the producer has a bug or two orders share an id).
 */
export class OrderConflictError extends PaymentsError {
  override readonly name = 'OrderConflictError';
  readonly existing: Operation;
  readonly requested: ChargeInput;
  readonly fields: readonly (keyof ChargeInput)[];
  constructor(existing: Operation, requested: ChargeInput, fields: readonly (keyof ChargeInput)[]) {
    super(`order ${existing.orderId} already has operation ${existing.id} with a different ${fields.join(', ')}`);
    this.existing = existing;
    this.requested = requested;
    this.fields = fields;
  }
}

/**
 * A refund request that makes no refund operation, and why: `refund_conflict` (the refund id exists
 * with another amount or reason), `no_charge` (the order has no charge), `charge_failed` (its charge
 * failed: nothing to refund), `exceeds_charge` (with the order's other refunds, more than was charged),
 * `not_captured` (a manual charge whose authorization is not captured: cancel it instead).
 * Nothing is sent to Stripe; the message is recorded as rejected with this reason.
 */
export class RefundRejectedError extends PaymentsError {
  override readonly name = 'RefundRejectedError';
  readonly code: 'refund_conflict' | 'no_charge' | 'charge_failed' | 'exceeds_charge' | 'not_captured';
  readonly requested: RefundInput;
  readonly existing: Operation | null;
  constructor(code: RefundRejectedError['code'], requested: RefundInput, message: string, existing: Operation | null = null) {
    super(message);
    this.code = code;
    this.requested = requested;
    this.existing = existing;
  }
}

export class OperationNotFoundError extends PaymentsError {
  override readonly name = 'OperationNotFoundError';
  readonly operationId: string;
  constructor(operationId: string) {
    super(`payment operation ${operationId} does not exist`);
    this.operationId = operationId;
  }
}

/**
 * A capture or cancel_authorization request that makes no operation (migrations/019): `no_charge`,
 * `not_manual` (the charge was captured at once), `charge_failed` (the authorization failed),
 * `exceeds_authorization` (a capture above the authorized amount), `already_settled` (the
 * authorization has its one capture or cancel — or expired — already, of the other kind), or
 * `authorization_conflict` (the same kind exists with another amount). Nothing is sent to Stripe;
 * the message is recorded as rejected with this reason.
 */
export class AuthorizationRejectedError extends PaymentsError {
  override readonly name = 'AuthorizationRejectedError';
  readonly code: 'no_charge' | 'not_manual' | 'charge_failed' | 'exceeds_authorization' | 'already_settled' | 'authorization_conflict';
  readonly requested: AuthorizationInput;
  readonly existing: Operation | null;
  constructor(code: AuthorizationRejectedError['code'], requested: AuthorizationInput, message: string, existing: Operation | null = null) {
    super(message);
    this.code = code;
    this.requested = requested;
    this.existing = existing;
  }
}
