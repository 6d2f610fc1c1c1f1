// Whose event is it, and is it true? Before anything in an event is believed: its origin (another
// account, the other mode: refused whole), and — before anything changes an operation or moves money
// — the object it names retrieved with our own key and checked against the snapshot (a signed event
// proves that Stripe delivered it to this endpoint, not that its object is ours).
import { appendEventAudit, markApplied, recordFinding, type InboxRow } from './inbox-store.ts';
import {
  defer,
  inTransaction,
  lostLease,
  objectEvidence,
  releaseOnly,
  resultOf,
  type Applied,
  type ApplierContext,
} from './applier-context.ts';
import { confirmRetrieved, eventObjectOf, type EventOriginPolicy, type EventPaymentIntent, type EventRefund, type StripeEventView } from './event-decisions.ts';
import { FailureKind, type GatewayFailure, type GatewayResult, type PaymentGateway, type RefundView } from './gateway.ts';
import { accountOf } from './kinds.ts';
import { findOperation, hasOperationOnAccount } from './operations-store.ts';
import type { ClaimedOperation, Operation, PaymentIntentView } from './types.ts';

/** Whose events are taken: our key's mode (none without a key), the connected accounts of the setting. */
export function originPolicyOf(ctx: ApplierContext): EventOriginPolicy {
  return { keyMode: ctx.gateway === null ? 'no_key' : (ctx.gateway.keyMode ?? 'unrecognised'), connectedAccounts: ctx.connectedAccounts };
}

/**
 * The origin policy for one event: the setting's accounts, and the event's own account when the
 * pipeline has an operation on it (one indexed look-up, only for an event that names an account).
 */
export async function originPolicyFor(ctx: ApplierContext, event: Pick<StripeEventView, 'account'>): Promise<EventOriginPolicy> {
  const policy = originPolicyOf(ctx);
  if (event.account === null || policy.connectedAccounts.has(event.account)) return policy;
  if (!(await hasOperationOnAccount(ctx.db, event.account))) return policy;
  return { ...policy, connectedAccounts: new Set([...policy.connectedAccounts, event.account]) };
}

/**
 * An event from another account or the other mode: refused whole. A finding (one per kind and
 * object), an audit line on the operation its object names (if we have it), the row applied with
 * the refusal as its outcome. No operation changes, nothing is published, no remedy is made.
 */
export async function refuse(ctx: ApplierContext, row: InboxRow, event: StripeEventView, outcome: 'foreign_account' | 'livemode_mismatch', reason: string): Promise<Applied> {
  const object = eventObjectOf(event);
  const op = object.claimedOperationId ? await findOperation(ctx.db, object.claimedOperationId) : null;
  const detail = {
    stripeEventId: event.id,
    eventType: event.type,
    account: event.account,
    context: event.context,
    livemode: event.livemode,
    keyMode: originPolicyOf(ctx).keyMode,
    object: { id: object.id, object: object.object, status: object.status, amount: object.amount, currency: object.currency },
  };
  let newFinding = false;
  const done = await inTransaction(ctx.db, async (client) => {
    newFinding = await recordFinding(client, {
      kind: outcome,
      paymentIntentId: object.id ?? event.id,
      eventId: event.id,
      operationId: op?.id ?? null,
      claimedOperationId: object.operationIdAsWritten,
      orderId: object.orderId,
      amount: object.amount,
      currency: object.currency,
      status: object.status,
      reason,
      detail,
    });
    if (op) await appendEventAudit(client, op, ctx.actor, { ...detail, refused: outcome, reason }, object.id);
    return markApplied(client, row, outcome, op?.id ?? null);
  });
  return done ? { ...resultOf(row, outcome, op?.id ?? null, reason), newFinding } : lostLease(row);
}

/** The object an event named, and how our key retrieves it. */
export interface RetrieveTarget<T extends PaymentIntentView> {
  readonly objectName: 'PaymentIntent' | 'Refund';
  readonly snapshot: T;
  readonly retrieve: (gateway: PaymentGateway) => Promise<GatewayResult<T>>;
}

export type Retrieved<T> = { readonly ok: true; readonly object: T } | { readonly ok: false; readonly applied: Applied };

const asEventPaymentIntent = (pi: PaymentIntentView): EventPaymentIntent => ({ ...pi, customer: pi.customer ?? null });
const asEventRefund = (refund: RefundView): EventRefund => ({
  id: refund.id,
  status: refund.status,
  amount: refund.amount,
  currency: refund.currency,
  metadata: refund.metadata,
  paymentIntentId: refund.paymentIntent,
  failureReason: refund.failureReason ?? null,
});

/**
 * The PaymentIntent an event named, retrieved with our key AS the operation's account (`account`:
 * Stripe-Account; null: the platform) — the only account that holds it.
 */
export function paymentIntentTarget(pi: EventPaymentIntent, account: string | null): RetrieveTarget<EventPaymentIntent> {
  return { objectName: 'PaymentIntent', snapshot: pi, retrieve: async (gateway) => mapOk(await gateway.retrievePaymentIntent(pi.id, { account }), asEventPaymentIntent) };
}

/** The Refund an event named, retrieved with our key as the operation's account. */
export function refundTarget(refund: EventRefund, account: string | null): RetrieveTarget<EventRefund> {
  return { objectName: 'Refund', snapshot: refund, retrieve: async (gateway) => mapOk(await gateway.retrieveRefund(refund.id, { account }), asEventRefund) };
}

/**
 * Retrieve the object an event named, with our key, and check it is the one the event named
 * (confirmRetrieved). Not now (no key, no request budget, a transient failure): the event waits
 * (and a held claim is given back). Not confirmed (404, not ours, a snapshot that never was true): a
 * finding, the row applied `unconfirmed`, no state change.
 */
export async function retrieveConfirmed<T extends PaymentIntentView>(
  ctx: ApplierContext,
  row: InboxRow,
  event: StripeEventView,
  op: Operation,
  held: { readonly claimed: ClaimedOperation; readonly scheduleMs: number } | null,
  target: RetrieveTarget<T>,
): Promise<Retrieved<T>> {
  const later = async (reason: string): Promise<Retrieved<T>> => {
    if (held) await releaseOnly(ctx, held.claimed, `stripe event ${row.eventId} not applied: ${reason}`, held.scheduleMs);
    return { ok: false, applied: await defer(ctx, row, op.id, reason) };
  };
  const mayCall = ctx.gateway !== null && ((await ctx.beforeCall?.(accountOf(op))) ?? true);
  if (!mayCall || ctx.gateway === null) return later('no Stripe call possible now (no key or no request budget)');
  const answer = await target.retrieve(ctx.gateway).catch(thrownAsAmbiguous);
  let unconfirmed: { reason: string; detail: Record<string, unknown> };
  if (!answer.ok) {
    if (TRANSIENT.has(answer.failure.kind)) return later(`retrieve failed: ${answer.failure.errorClass}`);
    const f = answer.failure;
    const what = f.kind === FailureKind.notFound ? 'Stripe does not know it under our key' : 'Stripe refused the retrieve';
    unconfirmed = {
      reason: `the event's ${target.objectName} ${target.snapshot.id}: ${what} (${f.errorClass}${f.httpStatus ? ` ${f.httpStatus}` : ''}${f.code ? ` ${f.code}` : ''})`,
      detail: { retrieve: { errorClass: f.errorClass, httpStatus: f.httpStatus ?? null, code: f.code ?? null, requestId: f.requestId ?? null } },
    };
  } else {
    const mismatch = confirmRetrieved(target.objectName, target.snapshot, answer.value);
    if (mismatch === null) return { ok: true, object: answer.value };
    unconfirmed = { reason: mismatch, detail: { retrieved: objectEvidence(answer.value) } };
  }
  if (held) await releaseOnly(ctx, held.claimed, `stripe event ${row.eventId} not confirmed: ${unconfirmed.reason}`, held.scheduleMs);
  return { ok: false, applied: await recordUnconfirmed(ctx, row, event, op, target, unconfirmed.reason, unconfirmed.detail) };
}

/** An event our key does not confirm: a finding (one per object), an audit line, the row applied `unconfirmed`. */
async function recordUnconfirmed<T extends PaymentIntentView>(ctx: ApplierContext, row: InboxRow, event: StripeEventView, op: Operation, target: RetrieveTarget<T>, reason: string, extra: Record<string, unknown>): Promise<Applied> {
  const snapshot = target.snapshot;
  const detail = { stripeEventId: event.id, eventType: event.type, [target.objectName === 'PaymentIntent' ? 'paymentIntent' : 'refund']: objectEvidence(snapshot), ...extra };
  let newFinding = false;
  const done = await inTransaction(ctx.db, async (client) => {
    newFinding = await recordFinding(client, {
      kind: 'unconfirmed',
      paymentIntentId: snapshot.id,
      eventId: event.id,
      operationId: op.id,
      claimedOperationId: snapshot.metadata.operation_id ?? null,
      orderId: snapshot.metadata.order_id ?? null,
      amount: snapshot.amount,
      currency: snapshot.currency,
      status: snapshot.status,
      reason,
      detail,
    });
    await appendEventAudit(client, op, ctx.actor, { ...detail, unconfirmed: reason }, snapshot.id);
    return markApplied(client, row, 'unconfirmed', op.id);
  });
  return done ? { ...resultOf(row, 'unconfirmed', op.id, reason), newFinding } : lostLease(row);
}

/** Retrieve failures that say nothing about the object: the event waits and is tried again. */
export const TRANSIENT = new Set<string>([FailureKind.ambiguous, FailureKind.rateLimited, FailureKind.authentication, FailureKind.permission]);

/** A gateway that threw (it should not) is read as an ambiguous answer: the event waits. */
export function thrownAsAmbiguous(error: unknown): { readonly ok: false; readonly failure: GatewayFailure } {
  return { ok: false, failure: { kind: FailureKind.ambiguous, errorClass: error instanceof Error ? error.name : 'Error', message: String(error) } };
}

function mapOk<A, B>(result: GatewayResult<A>, map: (value: A) => B): GatewayResult<B> {
  return result.ok ? { ok: true, value: map(result.value) } : result;
}
