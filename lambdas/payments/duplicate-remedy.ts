// The duplicate-charge remedy, asked for by an operator or a List: a second PaymentIntent of a
// succeeded charge is refunded by a refund operation of its own, created once and executed now.
// (A Stripe event's remedy is made by the inbox applier, in the transaction of its finding.)
import { executeOperation } from './claimed-execution.ts';
import { judgeDuplicateCharge, type DuplicateVerdict } from './decisions.ts';
import type { EngineContext } from './engine-context.ts';
import { OperationNotFoundError } from './errors.ts';
import { findOperation, insertDuplicateRefund } from './operations-store.ts';
import type { Execution } from './request-results.ts';
import type { PaymentIntentView } from './types.ts';

export interface RemedyResult {
  readonly verdict: DuplicateVerdict;
  readonly refundOperationId: string | null;
  readonly created: boolean;
  readonly execution: Execution | null;
}

/**
 * The duplicate-charge remedy: evidence (an operator, a List, a Stripe event) shows `pi` for the
 * order of a succeeded charge operation that holds another PaymentIntent. When judgeDuplicateCharge
 * says it is a second charge, a refund operation (reason duplicate, refund id derived from the
 * PaymentIntent id) is created — once, however often the evidence comes — and executed now.
 */
export async function remedyDuplicateCharge(
  ctx: EngineContext,
  chargeOperationId: string,
  pi: PaymentIntentView,
  evidence: Readonly<Record<string, unknown>> = {},
): Promise<RemedyResult> {
  const charge = await findOperation(ctx.db, chargeOperationId);
  if (!charge) throw new OperationNotFoundError(chargeOperationId);
  const verdict = judgeDuplicateCharge(charge, pi);
  if (verdict.kind !== 'refund') return { verdict, refundOperationId: null, created: false, execution: null };
  const made = await insertDuplicateRefund(ctx.db, charge, verdict, ctx.actor, evidence);
  const execution = made ? await executeOperation(ctx, made.id) : null;
  return { verdict, refundOperationId: made?.id ?? null, created: made?.created ?? false, execution };
}
