// The refund path: a refund request through the same engine as a charge — made durable (and claimed
// when its charge is final-succeeded) in one statement, executed by claimed-execution.ts.
import { randomUUID } from 'node:crypto';
import { executeClaimed } from './claimed-execution.ts';
import { skipped, type EngineContext } from './engine-context.ts';
import { RefundRejectedError } from './errors.ts';
import { requestRefundAndClaim, type RefundRequestRow } from './operations-store.ts';
import type { RefundRequestResult } from './request-results.ts';
import type { Operation, RefundInput } from './types.ts';

export interface RefundRequestOptions {
  readonly execute?: boolean;
  readonly canStart?: () => boolean;
  readonly requestedDetail?: Readonly<Record<string, unknown>>;
}

/** A concurrent refund of the same order committed first: the trigger of 007_refunds.sql said so. */
function isRefundRace(error: unknown): boolean {
  const e = error as { code?: unknown; constraint?: unknown };
  return e?.code === '23514' && e.constraint === 'refunds_within_charge';
}

/**
 * A refund request through the same engine as a charge: ONE statement makes it durable and claims it
 * when its charge is final-succeeded (a refund of an open charge waits, durable, until the charge
 * is final: the reconciler then claims it), the Stripe call, ONE statement records the outcome.
 * Rejections (conflict, no charge, failed charge, more than charged) are values, nothing is sent.
 */
export async function processRefundRequest(ctx: EngineContext, input: RefundInput, options: RefundRequestOptions = {}): Promise<RefundRequestResult> {
  const execute = options.execute ?? true;
  const claim = execute && (options.canStart?.() ?? true);
  const claimSent = ctx.now();
  const row = await requestRefundDurably(ctx, input, claim, options.requestedDetail);
  const reject = (code: RefundRejectedError['code'], message: string, existing: Operation | null = null): RefundRequestResult => ({
    input,
    operationId: null,
    rejection: new RefundRejectedError(code, input, message, existing),
    execution: null,
  });
  switch (row.verdict) {
    case 'no_charge':
      return reject('no_charge', `order ${input.orderId} has no charge to refund`);
    case 'charge_failed':
      return reject('charge_failed', `order ${input.orderId}: the charge failed, there is nothing to refund`);
    case 'not_captured':
      return reject('not_captured', `order ${input.orderId}: the charge is an authorization not captured (capture "manual"); there is nothing to refund — cancel the authorization instead`);
    case 'exceeds_charge':
      return reject('exceeds_charge',
        `refund ${input.refundId} of order ${input.orderId} (${input.amount}) would exceed the charge: ${row.refundedOrHeld} of ${row.chargeAmount} already refunded or in flight`);
  }
  const op = row.operation!;
  const fields = [op.amount !== input.amount ? 'amount' : null, (op.refund?.reason ?? null) !== input.reason ? 'reason' : null].filter((f) => f !== null);
  if (fields.length > 0) {
    return { ...reject('refund_conflict', `refund ${input.refundId} of order ${input.orderId} already exists as operation ${op.id} with a different ${fields.join(', ')}`, op), operationId: op.id };
  }
  const created = row.verdict === 'inserted';
  if (!row.claimed) return { input, operationId: op.id, rejection: null, execution: execute ? skipped(op) : null, created };
  try {
    const [execution] = await executeClaimed(ctx, [row.claimed], options.canStart, claimSent);
    return { input, operationId: op.id, rejection: null, execution: execution!, created };
  } catch (cause) {
    // Durable and claimed: the lease expires and the reconciler asks Stripe again with the same key.
    return { input, operationId: op.id, rejection: null, execution: null, outcomeNotRecorded: cause, created };
  }
}

/** The request statement, asked again when it read nothing back or a concurrent refund of the order won the race. */
async function requestRefundDurably(
  ctx: EngineContext,
  input: RefundInput,
  claim: boolean,
  requestedDetail: Readonly<Record<string, unknown>> | undefined,
): Promise<RefundRequestRow> {
  const token = randomUUID();
  for (let round = 0; ; round++) {
    if (round === 5) throw new Error(`could not read back refund ${input.refundId} of order ${input.orderId} after concurrent inserts`);
    try {
      const row = await requestRefundAndClaim(ctx.db, input, claim, token, ctx.policy.leaseMs, ctx.actor, requestedDetail);
      if (row !== null) return row;
    } catch (error) {
      // Another refund of the order committed while this statement waited on the charge's row lock:
      // asked again, the statement sees it and judges the sum with it.
      if (!isRefundRace(error)) throw error;
    }
  }
}
