// One error hierarchy for the domain. Errors are identified by `name` and carry what a caller needs.
import type { ChargeInput, Operation } from './types.ts';

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

export class OperationNotFoundError extends PaymentsError {
  override readonly name = 'OperationNotFoundError';
  readonly operationId: string;
  constructor(operationId: string) {
    super(`payment operation ${operationId} does not exist`);
    this.operationId = operationId;
  }
}
