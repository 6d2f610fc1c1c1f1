// The capture and cancel path (docs/model.md#manual-capture): a capture or a release of a manual
// charge's authorization, made durable (and claimed once its charge is final) in one statement,
// executed by claimed-execution.ts like every other kind — only its adapter (kinds.ts) and its reading
// of the PaymentIntent (decisions.ts fromAuthorizedPaymentIntent) are its own.
import { randomUUID } from 'node:crypto';
import { executeClaimed } from './claimed-execution.ts';
import { skipped, type EngineContext } from './engine-context.ts';
import { AuthorizationRejectedError } from './errors.ts';
import { requestAuthorizationAndClaim, type AuthorizationRequestRow } from './operations-store.ts';
import type { Execution } from './request-results.ts';
import type { AuthorizationInput, Operation } from './types.ts';

export interface AuthorizationRequestResult {
  readonly input: AuthorizationInput;
  /** The capture or cancel operation; null when the request was rejected (nothing created, nothing sent). */
  readonly operationId: string | null;
  readonly rejection: AuthorizationRejectedError | null;
  /** Null for a rejection, when not asked to execute, or when the outcome could not be recorded. */
  readonly execution: Execution | null;
  /** Durable, but its outcome write failed (the reconciler settles it from the PaymentIntent). */
  readonly outcomeNotRecorded?: unknown;
  readonly created?: boolean;
}

const what = (input: AuthorizationInput) => (input.kind === 'capture' ? 'capture' : 'cancel of the authorization');

/** Why the other kind's operation stops this one: the authorization was captured, released, or expired. */
function settledBy(other: Operation): string {
  if (other.authorization?.cancellationReason === 'expired') return 'the authorization expired at Stripe';
  return other.kind === 'capture' ? `it is captured (operation ${other.id}, ${other.status})` : `it is canceled (operation ${other.id}, ${other.status})`;
}

export async function processAuthorizationRequest(
  ctx: EngineContext,
  input: AuthorizationInput,
  options: { readonly execute?: boolean; readonly canStart?: () => boolean } = {},
): Promise<AuthorizationRequestResult> {
  const execute = options.execute ?? true;
  const claim = execute && (options.canStart?.() ?? true);
  const claimSent = ctx.now();
  const row = await requestDurably(ctx, input, claim);
  const reject = (code: AuthorizationRejectedError['code'], message: string, existing: Operation | null = null): AuthorizationRequestResult => ({
    input,
    operationId: null,
    rejection: new AuthorizationRejectedError(code, input, message, existing),
    execution: null,
  });
  switch (row.verdict) {
    case 'no_charge':
      return reject('no_charge', `order ${input.orderId} has no charge: there is no authorization to settle`);
    case 'not_manual':
      return reject('not_manual', `order ${input.orderId} was charged with capture at once: there is no authorization to ${input.kind === 'capture' ? 'capture' : 'cancel'}${input.kind === 'cancel_authorization' ? ' (refund it instead)' : ''}`);
    case 'charge_failed':
      return reject('charge_failed', `order ${input.orderId}: the authorization failed, there is nothing to settle`);
    case 'exceeds_authorization':
      return reject('exceeds_authorization', `the capture of order ${input.orderId} (${input.amount}) exceeds the authorized ${row.authorizedAmount}`);
    case 'already_settled':
      return reject('already_settled', `order ${input.orderId}: no ${what(input)} is possible, ${settledBy(row.operation!)}`, row.operation);
  }
  const op = row.operation!;
  if (input.kind === 'capture' && input.amount !== undefined && input.amount !== op.amount) {
    return { ...reject('authorization_conflict', `the capture of order ${input.orderId} already exists as operation ${op.id} for ${op.amount}, not ${input.amount}`, op), operationId: op.id };
  }
  const created = row.verdict === 'inserted';
  if (!row.claimed) return { input, operationId: op.id, rejection: null, execution: execute ? skipped(op) : null, created };
  try {
    const [execution] = await executeClaimed(ctx, [row.claimed], options.canStart, claimSent);
    return { input, operationId: op.id, rejection: null, execution: execution!, created };
  } catch (cause) {
    return { input, operationId: op.id, rejection: null, execution: null, outcomeNotRecorded: cause, created };
  }
}

/** The request statement, asked again when a concurrent request of the authorization left it nothing to read back. */
async function requestDurably(ctx: EngineContext, input: AuthorizationInput, claim: boolean): Promise<AuthorizationRequestRow> {
  const token = randomUUID();
  for (let round = 0; round < 5; round++) {
    const row = await requestAuthorizationAndClaim(ctx.db, input, claim, token, ctx.policy.leaseMs, ctx.actor);
    if (row !== null) return row;
  }
  throw new Error(`could not read back the ${input.kind} of order ${input.orderId} after concurrent inserts`);
}
