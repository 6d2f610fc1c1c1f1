// What every step of the inbox applier works with: the options it was made with, resolved once,
// what one inbox row's apply returns (Applied), and the ways a row's apply ends — applied with an
// outcome, deferred for later, or lost to another applier — and the transaction an effect is written
// in together with the row's mark.
import type { Db } from './db.ts';
import { DEFAULT_POLICY, type Backoff, type EnginePolicy } from './decisions.ts';
import type { PaymentGateway } from './gateway.ts';
import { deferEvent, markApplied, type ApplyOutcome, type InboxRow, type TransactionalDb } from './inbox-store.ts';
import { recordOutcomes, releaseWrite, type OutcomeEventRow } from './operations-store.ts';
import type { ClaimedOperation, PaymentIntentView } from './types.ts';

export interface ApplierOptions {
  readonly db: TransactionalDb;
  /**
   * Our Stripe key: every retrieve, and the mode events must be of (its keyMode). Null: no key yet —
   * events wait in the inbox (their mode cannot be checked, and nothing settles without a retrieve),
   * except those refused for their account, which need no key.
   */
  readonly gateway: PaymentGateway | null;
  readonly actor?: string;
  readonly policy?: Partial<EnginePolicy>;
  readonly random?: () => number;
  /** How long an inbox row is held while applied; must exceed one Stripe retrieve. Default: the operation lease. */
  readonly leaseMs?: number;
  /**
   * Asked before each retrieve (the reconciler's rate limiter), with the account it is made as (null:
   * the platform); false = do not call, the event waits.
   */
  readonly beforeCall?: (account: string | null) => Promise<boolean> | boolean;
  /**
   * Connected accounts (acct_…) whose events are taken even before the pipeline has an operation on
   * one (the STRIPE_CONNECTED_ACCOUNTS setting). An account the pipeline has an operation on is taken
   * without being listed. Each event is still applied only to an operation of its own account.
   */
  readonly connectedAccounts?: Iterable<string>;
}

/** What happened to one inbox row. */
export interface Applied {
  readonly eventId: string;
  readonly eventType: string;
  /** 'deferred': left in the inbox for later (a held lease, Stripe unreachable, an error). */
  readonly outcome: ApplyOutcome | 'deferred';
  readonly operationId: string | null;
  readonly reason: string;
  /** Outbox rows written with the effect, leased to the caller for publishing. */
  readonly events: readonly OutcomeEventRow[];
  /**
   * True when this apply wrote a new finding — an unrecorded charge, a contradiction, a refund failed
   * after success, or a refused / unconfirmed event (inbox-store.ts isRefusal): alarm-worthy.
   */
  readonly newFinding: boolean;
}

/** ApplierOptions with every default applied. */
export interface ApplierContext {
  readonly db: TransactionalDb;
  readonly gateway: PaymentGateway | null;
  readonly actor: string;
  readonly policy: EnginePolicy;
  readonly random: () => number;
  /** The apply lease on inbox rows. */
  readonly leaseMs: number;
  readonly publishLeaseMs: number;
  readonly beforeCall: ApplierOptions['beforeCall'];
  readonly connectedAccounts: ReadonlySet<string>;
}

export function applierContext(options: ApplierOptions): ApplierContext {
  const policy = { ...DEFAULT_POLICY, ...options.policy, backoff: { ...DEFAULT_POLICY.backoff, ...options.policy?.backoff } };
  return {
    db: options.db,
    gateway: options.gateway,
    actor: options.actor ?? 'stripe-events',
    policy,
    random: options.random ?? Math.random,
    leaseMs: options.leaseMs ?? policy.leaseMs,
    publishLeaseMs: policy.publishLeaseMs,
    beforeCall: options.beforeCall,
    connectedAccounts: new Set(options.connectedAccounts ?? []),
  };
}

/** What a decision was made on: the event's snapshot (a hint) or the object as our key retrieved it. */
export type Evidence = 'snapshot' | 'stripe';

/**
 * Retries of an event that could not be applied: 1 s, 2 s, 4 s … capped at 15 min (the policy's
 * `backoff.inbox`, scaled like every retry delay by RETRY_BACKOFF_SCALE).
 */
export const deferralDelayMs = (attempts: number, backoff: Backoff = DEFAULT_POLICY.backoff.inbox): number =>
  Math.min(backoff.capMs, backoff.baseMs * 2 ** Math.min(Math.max(attempts, 0), 20));

export const objectEvidence = (o: PaymentIntentView) => ({ id: o.id, status: o.status, amount: o.amount, currency: o.currency });

/** Mark the row applied with `outcome` (no other effect). */
export async function finish(ctx: ApplierContext, row: InboxRow, outcome: ApplyOutcome, operationId: string | null, reason: string): Promise<Applied> {
  const done = await markApplied(ctx.db, row, outcome, operationId);
  return done ? resultOf(row, outcome, operationId, reason) : lostLease(row);
}

/** What one row's apply returns: no outbox rows, no new finding (the callers add theirs). */
export function resultOf(row: InboxRow, outcome: Applied['outcome'], operationId: string | null, reason: string): Applied {
  return { eventId: row.eventId, eventType: row.eventType, outcome, operationId, reason, events: [], newFinding: false };
}

/** The row's apply lease went to another applier before this one's mark: nothing of it was written. */
export function lostLease(row: InboxRow): Applied {
  return resultOf(row, 'deferred', null, 'inbox lease lost to another applier; nothing written by this one');
}

/** Leave the event in the inbox for later, on the deferral backoff. */
export async function defer(ctx: ApplierContext, row: InboxRow, operationId: string | null, reason: string): Promise<Applied> {
  await deferEvent(ctx.db, row, { afterMs: deferralDelayMs(row.attempts, ctx.policy.backoff.inbox) }, reason, operationId);
  return resultOf(row, 'deferred', operationId, reason);
}

/** Give the operation's lease back untouched (its schedule as it was before the claim). */
export async function releaseOnly(ctx: ApplierContext, claimed: ClaimedOperation, reason: string, scheduleMs: number): Promise<void> {
  await recordOutcomes(ctx.db, [releaseWrite(claimed, scheduleMs, reason)], ctx.actor, ctx.publishLeaseMs);
}

/** BEGIN … COMMIT on one connection; `work` returning false rolls everything back. */
export async function inTransaction(db: TransactionalDb, work: (client: Db) => Promise<boolean>): Promise<boolean> {
  const client = await db.connect();
  // A checked-out client has no error listener (pg-pool removes its idle one): a server that goes
  // away between two statements of this transaction would raise an uncaught 'error' and take the
  // process down. Keep the error; the next statement fails with it, and the broken client is
  // destroyed on release instead of going back to the pool.
  let broken: Error | undefined;
  const onError = (error: Error) => {
    broken = error;
  };
  client.on('error', onError);
  try {
    await client.query('BEGIN');
    const commit = await work(client);
    await client.query(commit ? 'COMMIT' : 'ROLLBACK');
    return commit;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    broken ??= error instanceof Error ? error : new Error(String(error));
    throw error;
  } finally {
    client.removeListener('error', onError);
    client.release(broken);
  }
}
