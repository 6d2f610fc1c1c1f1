// What a request to the engine comes back as: what one execution did to an operation, the result of
// each charge and refund request, and the error that carries a batch's results when their outcomes
// could not be written. Its own module because the engine returns these and the error hierarchy
// would otherwise have to import the engine to name them.
import type { AttemptStep, Outcome } from './decisions.ts';
import { PaymentsError, type OrderConflictError, type RefundRejectedError } from './errors.ts';
import type { OutcomeEventRow } from './operations-store.ts';
import type { ChargeInput, OperationStatus, RefundInput } from './types.ts';

/** What happened to one operation in one execution. */
export interface Execution {
  readonly operationId: string;
  /** Status after this execution (or the current one when nothing was done). */
  readonly status: OperationStatus;
  /**
   * attempted: Stripe was called and the outcome written; discarded: Stripe was called but the lease
   * was lost, so the outcome was not written; released: not started for lack of time or budget;
   * deferred: claimed, but its List may not be asked before the settle delay since the last send
   * ends, so it was given back, due then; skipped: not claimable (final, in review, leased by
   * someone else, or not due yet).
   */
  readonly disposition: 'attempted' | 'discarded' | 'released' | 'deferred' | 'skipped';
  readonly step?: AttemptStep;
  readonly outcome?: Outcome;
  readonly reviewReason?: string | null;
  /** The outbox row written with this outcome, if any, leased to this caller for publishing. */
  readonly event?: OutcomeEventRow | null;
}

export interface RequestResult {
  readonly input: ChargeInput;
  readonly operationId: string;
  /** Null when the request was accepted; the conflict otherwise (nothing created, nothing charged). */
  readonly conflict: OrderConflictError | null;
  /** Null for a conflict, when not asked to execute, and inside an OutcomesNotRecordedError. */
  readonly execution: Execution | null;
}

export interface RefundRequestResult {
  readonly input: RefundInput;
  /** The refund operation; null when the request was rejected (nothing created, nothing sent). */
  readonly operationId: string | null;
  readonly rejection: RefundRejectedError | null;
  /** Null for a rejection, when not asked to execute, or when the outcome could not be recorded. */
  readonly execution: Execution | null;
  /** The refund is durable but its outcome write failed (the reconciler settles it, same key). */
  readonly outcomeNotRecorded?: unknown;
  /** This request made the operation (false: the same refund id was asked for before). */
  readonly created?: boolean;
}

/**
 * Every request of the batch is durable (its operation committed, claimed or not) but the outcomes of
 * the Stripe calls could not be written. Nothing is lost: the calls used the operations' keys, the
 * leases expire, the reconciler asks Stripe again with the same keys. `requests` says which
 * operation each input has (and which conflict), so a caller acknowledges them instead of making
 * the queue redeliver what the database already holds.
 */
export class OutcomesNotRecordedError extends PaymentsError {
  override readonly name = 'OutcomesNotRecordedError';
  readonly requests: readonly RequestResult[];
  constructor(requests: readonly RequestResult[], cause: unknown) {
    super(`the outcomes of ${requests.length} durable request(s) could not be recorded: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.requests = requests;
  }
}
