// The inbox applier: works recorded Stripe events at least once, in any order, each effect written
// by the same fenced statements as every other outcome. The mirror image of the outbox relay.
//
//   inbox row (leased) ─▶ decide (event-decisions.ts) ─┬─ settle / review (a PaymentIntent or a Refund): claim the operation's lease
//                                                      │   ─▶ snapshot or retrieve (no transaction open)
//                                                      │   ─▶ BEGIN recordOutcomes (fenced) + mark applied COMMIT
//                                                      ├─ refund / dispute: BEGIN audit + outbox row + mark applied COMMIT
//                                                      ├─ refund.* failed after success: BEGIN finding + audit + fact row + mark applied COMMIT
//                                                      ├─ contradiction / unrecorded: BEGIN finding (+ audit) + mark applied COMMIT
//                                                      └─ stale / foreign / ignored: mark applied
//
// Idempotent per event id: the row is marked applied in the same transaction as its effect, fenced by
// the row's apply lease — a second applier (the webhook's inline apply and a sweep, two sweeps) that
// lost the lease rolls its transaction back. An event for an operation whose lease another worker
// holds waits in the inbox until that lease ends: the worker's own write comes first, and the event
// is then judged against the state it wrote.
import { randomUUID } from 'node:crypto';
import type { Db } from './db.ts';
import { decideRetrieve, DEFAULT_POLICY, fromPaymentIntent, type DecisionContext, type EnginePolicy, type Outcome } from './decisions.ts';
import {
  aftermathOf,
  claimedOperationId,
  decidePaymentIntentEvent,
  decideRefundAfterRetrieve,
  decideRefundEvent,
  paymentIntentOf,
  readStripeEvent,
  REFUND_EVENT_TYPES,
  refundOf,
  type EventPaymentIntent,
  type EventRefund,
  type RefundEventDecision,
  type StripeEventView,
} from './event-decisions.ts';
import { FailureKind, type GatewayResult, type PaymentGateway } from './gateway.ts';
import {
  appendEventAudit,
  claimDueEvents,
  claimForEvent,
  deferEvent,
  findOperationByExternalId,
  findRefundEventOperation,
  markApplied,
  recordAftermath,
  recordFinding,
  recordRefundFailedAfterSuccess,
  type ApplyOutcome,
  type InboxRow,
  type TransactionalDb,
  WAITING_FOR_LEASE,
} from './inbox-store.ts';
import { findOperation, insertDuplicateRefund, recordOutcomes, releaseWrite, type OutcomeEventRow, type OutcomeWrite } from './operations-store.ts';
import type { ClaimedOperation, Operation, PaymentIntentView } from './types.ts';

export interface ApplierOptions {
  readonly db: TransactionalDb;
  /** Null: Stripe unreachable (no key). Events that need a retrieve wait; the rest is applied. */
  readonly gateway: PaymentGateway | null;
  readonly actor?: string;
  readonly policy?: Partial<EnginePolicy>;
  readonly random?: () => number;
  /** How long an inbox row is held while applied; must exceed one Stripe retrieve. Default: the operation lease. */
  readonly leaseMs?: number;
  /** Asked before each retrieve (the reconciler's rate limiter); false = do not call, the event waits. */
  readonly beforeCall?: () => Promise<boolean> | boolean;
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
  /** True when this apply wrote a new finding (unrecorded charge, contradiction): alarm-worthy. */
  readonly newFinding: boolean;
}

export interface ApplySummary {
  readonly byOutcome: Readonly<Record<string, number>>;
  readonly applied: number;
  readonly deferred: number;
  readonly failed: number;
  readonly contradictions: number;
  readonly unrecordedCharges: number;
  readonly events: readonly OutcomeEventRow[];
  readonly errors: readonly string[];
}

const PAYMENT_INTENT_EVENTS = new Set([
  'payment_intent.succeeded',
  'payment_intent.payment_failed',
  'payment_intent.canceled',
  'payment_intent.processing',
  'payment_intent.requires_action',
]);
const AFTERMATH_EVENT_TYPE = { refunded: 'Charge Refunded', disputed: 'Charge Disputed', dispute_closed: 'Charge Dispute Closed' } as const;

/** How an open operation learns from an event: to review, from the snapshot, or from a retrieve now. */
type OpenPlan =
  | { readonly kind: 'review'; readonly reason: string }
  | { readonly kind: 'snapshot'; readonly view: PaymentIntentView }
  | { readonly kind: 'retrieve'; readonly id: string; readonly retrieve: (gateway: PaymentGateway) => Promise<GatewayResult<PaymentIntentView>> };

/** Retries of an event that could not be applied: 1 s, 2 s, 4 s … capped at 15 min. */
export const deferralDelayMs = (attempts: number): number => Math.min(15 * 60_000, 1000 * 2 ** Math.min(Math.max(attempts, 0), 20));

export class StripeEventApplier {
  readonly #db: TransactionalDb;
  readonly #gateway: PaymentGateway | null;
  readonly #actor: string;
  readonly #policy: EnginePolicy;
  readonly #random: () => number;
  readonly #leaseMs: number;
  readonly #publishLeaseMs: number;
  readonly #beforeCall: ApplierOptions['beforeCall'];

  constructor(options: ApplierOptions) {
    this.#db = options.db;
    this.#gateway = options.gateway;
    this.#actor = options.actor ?? 'stripe-events';
    this.#policy = { ...DEFAULT_POLICY, ...options.policy, backoff: { ...DEFAULT_POLICY.backoff, ...options.policy?.backoff } };
    this.#random = options.random ?? Math.random;
    this.#leaseMs = options.leaseMs ?? this.#policy.leaseMs;
    this.#publishLeaseMs = this.#policy.publishLeaseMs;
    this.#beforeCall = options.beforeCall;
  }

  /** The apply lease on inbox rows (the endpoint claims a new row at birth with it). */
  get leaseMs(): number {
    return this.#leaseMs;
  }

  /** Apply every due row, page by page, until none is left or `canContinue` says stop. One bad row never blocks the others. */
  async applyDue(options: { pageSize?: number; canContinue?: () => boolean } = {}): Promise<ApplySummary> {
    const byOutcome: Record<string, number> = {};
    const events: OutcomeEventRow[] = [];
    const errors: string[] = [];
    let applied = 0;
    let deferred = 0;
    let failed = 0;
    let contradictions = 0;
    let unrecordedCharges = 0;
    while (options.canContinue?.() ?? true) {
      const page = await claimDueEvents(this.#db, options.pageSize ?? 50, randomUUID(), this.#leaseMs);
      if (page.length === 0) break;
      for (const row of page) {
        const result = await this.applySafely(row);
        if (result.outcome !== 'deferred') applied++;
        else if (result.reason.startsWith('error:')) {
          failed++;
          errors.push(`${row.eventId}: ${result.reason}`);
        } else deferred++;
        byOutcome[result.outcome] = (byOutcome[result.outcome] ?? 0) + 1;
        if (result.newFinding && result.outcome === 'unrecorded') unrecordedCharges++;
        else if (result.newFinding) contradictions++; // a contradiction, or a refund failed after it succeeded
        events.push(...result.events);
      }
      // Every deferral is into the future, so the next page holds other rows; a short page was the last.
      if (page.length < (options.pageSize ?? 50)) break;
    }
    return { byOutcome, applied, deferred, failed, contradictions, unrecordedCharges, events, errors };
  }

  /** apply(), but an unexpected error defers the row with backoff instead of escaping. */
  async applySafely(row: InboxRow): Promise<Applied> {
    try {
      return await this.apply(row);
    } catch (error) {
      const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
      await deferEvent(this.#db, row, { afterMs: deferralDelayMs(row.attempts) }, `error: ${message}`, null).catch(() => {});
      return { eventId: row.eventId, eventType: row.eventType, outcome: 'deferred', operationId: null, reason: `error: ${message.slice(0, 300)}`, events: [], newFinding: false };
    }
  }

  /** Apply one inbox row this caller holds the apply lease of. */
  async apply(row: InboxRow): Promise<Applied> {
    const read = readStripeEvent(row.payload);
    if (!read.ok) return this.#finish(row, 'unreadable', null, read.reason);
    const event = read.event;
    if (PAYMENT_INTENT_EVENTS.has(event.type)) {
      const pi = paymentIntentOf(event);
      if (!pi) return this.#finish(row, 'unreadable', null, `${event.type} without a readable PaymentIntent`);
      const operationId = claimedOperationId(pi);
      const op = operationId ? await findOperation(this.#db, operationId) : null;
      return this.#applyPaymentIntent(row, event, pi, op, 0);
    }
    if (event.type === 'charge.refunded' || event.type === 'charge.dispute.created' || event.type === 'charge.dispute.closed') {
      return this.#applyAftermath(row, event);
    }
    if (REFUND_EVENT_TYPES.has(event.type)) {
      const refund = refundOf(event);
      if (!refund) return this.#finish(row, 'unreadable', null, `${event.type} without a readable Refund`);
      // Ours by the operation id we put in its metadata, else by the Refund id an operation recorded.
      const claimedId = claimedOperationId(refund);
      const found = await findRefundEventOperation(this.#db, claimedId, refund.id);
      return this.#applyRefund(row, event, refund, found?.operation ?? null, found?.chargePaymentIntentId ?? null, 0);
    }
    return this.#finish(row, 'ignored_type', null, `${event.type} is not acted on`);
  }

  async #applyPaymentIntent(row: InboxRow, event: StripeEventView, pi: EventPaymentIntent, op: Operation | null, depth: number): Promise<Applied> {
    const decision = decidePaymentIntentEvent(op, pi);
    const evidence = { stripeEventId: event.id, eventType: event.type, paymentIntent: { id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency } };
    switch (decision.kind) {
      case 'ignore':
        return this.#finish(row, decision.outcome, op?.id ?? null, decision.reason);
      case 'stale':
        return this.#finish(row, 'stale', op!.id, decision.reason);
      case 'await_final':
        await deferEvent(this.#db, row, { afterMs: deferralDelayMs(row.attempts) }, decision.reason, op!.id);
        return this.#result(row, 'deferred', op!.id, decision.reason);
      case 'unrecorded':
      case 'contradiction':
      case 'duplicate_charge': {
        const kind = decision.kind === 'unrecorded' ? 'unrecorded_charge' : 'contradiction';
        const outcome: ApplyOutcome = decision.kind === 'unrecorded' ? 'unrecorded' : 'contradiction';
        // A second succeeded PaymentIntent of a succeeded charge: the duplicate-charge remedy (issue 15)
        // refunds it, in the same transaction as the finding, once however often the event comes.
        const remedy = decision.kind === 'duplicate_charge' ? decision.remedy : null;
        let remedyOperationId: string | null = null;
        let newFinding = false;
        const done = await this.#transaction(async (client) => {
          if (op && remedy) {
            const made = await insertDuplicateRefund(client, op, remedy, this.#actor, { evidence: 'stripe_event', stripeEventId: event.id, eventType: event.type });
            remedyOperationId = made?.created ? made.id : null;
          }
          newFinding = await recordFinding(client, {
            kind,
            paymentIntentId: pi.id,
            eventId: event.id,
            operationId: op?.id ?? null,
            claimedOperationId: pi.metadata.operation_id ?? null,
            orderId: pi.metadata.order_id ?? null,
            amount: pi.amount,
            currency: pi.currency,
            status: pi.status,
            reason: decision.reason,
            detail: evidence,
          });
          if (op) await appendEventAudit(client, op, this.#actor, { ...evidence, contradiction: decision.reason }, pi.id);
          return markApplied(client, row, outcome, op?.id ?? null);
        });
        const reason = remedyOperationId ? `${decision.reason}; refunded by remedy operation ${remedyOperationId}` : decision.reason;
        return done ? { ...this.#result(row, outcome, op?.id ?? null, reason), newFinding } : this.#lostLease(row);
      }
      case 'in_review': {
        const done = await this.#transaction(async (client) => {
          await appendEventAudit(client, op!, this.#actor, { ...evidence, note: decision.reason }, pi.id);
          return markApplied(client, row, 'in_review', op!.id);
        });
        return done ? this.#result(row, 'in_review', op!.id, decision.reason) : this.#lostLease(row);
      }
      case 'review':
      case 'settle': {
        const plan: OpenPlan =
          decision.kind === 'review'
            ? { kind: 'review', reason: decision.reason }
            : decision.evidence === 'snapshot'
              ? { kind: 'snapshot', view: pi }
              : { kind: 'retrieve', id: pi.id, retrieve: (gateway) => gateway.retrievePaymentIntent(pi.id) };
        return this.#applyToOpen(row, event, op!, plan, evidence, (now) =>
          depth > 1 ? this.#finish(row, 'stale', op!.id, 'operation changed while the event was applied') : this.#applyPaymentIntent(row, event, pi, now, depth + 1),
        );
      }
    }
  }

  /** A refund event (refund.created / updated / failed, charge.refund.updated) for the refund operation it names, if any. */
  /**
   * `chargePaymentIntentId`: the charge's PaymentIntent, read with the operation (findRefundEventOperation),
   * from which decideRefundEvent derives the PaymentIntent the operation refunds (types.ts
   * paymentIntentOfRefund). A final charge's never changes, so a re-decision after a settle reuses it.
   */
  async #applyRefund(row: InboxRow, event: StripeEventView, refund: EventRefund, op: Operation | null, chargePaymentIntentId: string | null, depth: number): Promise<Applied> {
    const decision = decideRefundEvent(op, refund, chargePaymentIntentId);
    const evidence = {
      stripeEventId: event.id,
      eventType: event.type,
      refund: { id: refund.id, status: refund.status, amount: refund.amount, currency: refund.currency, paymentIntent: refund.paymentIntentId, failureReason: refund.failureReason },
    };
    return this.#applyRefundDecision(row, event, refund, op, decision, evidence, depth, chargePaymentIntentId);
  }

  async #applyRefundDecision(
    row: InboxRow,
    event: StripeEventView,
    refund: EventRefund,
    op: Operation | null,
    decision: RefundEventDecision,
    evidence: Record<string, unknown>,
    depth: number,
    chargePaymentIntentId: string | null,
  ): Promise<Applied> {
    switch (decision.kind) {
      case 'ignore':
        return this.#finish(row, decision.outcome, op?.id ?? null, decision.reason);
      case 'stale':
        return this.#finish(row, 'stale', op!.id, decision.reason);
      case 'in_review': {
        const done = await this.#transaction(async (client) => {
          await appendEventAudit(client, op!, this.#actor, { ...evidence, note: decision.reason }, refund.id);
          return markApplied(client, row, 'in_review', op!.id);
        });
        return done ? this.#result(row, 'in_review', op!.id, decision.reason) : this.#lostLease(row);
      }
      case 'contradiction':
      case 'failed_after_success': {
        // One finding per Refund (its id keys it): the same failure told by refund.failed,
        // refund.updated and charge.refund.updated is recorded, announced and alarmed once.
        const outcome: ApplyOutcome = decision.kind === 'contradiction' ? 'contradiction' : 'failed_after_success';
        const written: { event: OutcomeEventRow | null; newFinding: boolean } = { event: null, newFinding: false };
        const done = await this.#transaction(async (client) => {
          written.newFinding = await recordFinding(client, {
            kind: 'contradiction',
            paymentIntentId: refund.id,
            eventId: event.id,
            operationId: op!.id,
            claimedOperationId: refund.metadata.operation_id ?? null,
            orderId: refund.metadata.order_id ?? op!.orderId,
            amount: refund.amount,
            currency: refund.currency,
            status: refund.status,
            reason: decision.reason,
            detail: evidence,
          });
          if (!written.newFinding) return markApplied(client, row, 'stale', op!.id);
          if (decision.kind === 'failed_after_success') {
            written.event = await recordRefundFailedAfterSuccess(client, {
              operation: op!,
              refundStripeId: refund.id,
              paymentIntentId: refund.paymentIntentId,
              amount: refund.amount,
              currency: refund.currency,
              failureReason: refund.failureReason,
              stripeEventId: event.id,
              stripeCreatedAt: event.created,
              actor: this.#actor,
            }, this.#publishLeaseMs);
          } else {
            await appendEventAudit(client, op!, this.#actor, { ...evidence, contradiction: decision.reason }, refund.id);
          }
          return markApplied(client, row, outcome, op!.id);
        });
        if (!done) return this.#lostLease(row);
        if (!written.newFinding) return this.#result(row, 'stale', op!.id, `already recorded for Refund ${refund.id}: ${decision.reason}`);
        return { ...this.#result(row, outcome, op!.id, decision.reason), events: written.event ? [written.event] : [], newFinding: true };
      }
      case 'retrieve': {
        const mayCall = this.#gateway !== null && ((await this.#beforeCall?.()) ?? true);
        if (!mayCall || this.#gateway === null) {
          await deferEvent(this.#db, row, { afterMs: deferralDelayMs(row.attempts) }, 'no Stripe call possible now (no key or no request budget)', op!.id);
          return this.#result(row, 'deferred', op!.id, 'no Stripe call possible now (no key or no request budget)');
        }
        const answer = await this.#gateway.retrieveRefund(refund.id).catch((error: unknown) => ({
          ok: false as const,
          failure: { kind: FailureKind.ambiguous, errorClass: error instanceof Error ? error.name : 'Error', message: String(error) },
        }));
        if (!answer.ok) {
          if (TRANSIENT.has(answer.failure.kind)) {
            await deferEvent(this.#db, row, { afterMs: deferralDelayMs(row.attempts) }, `retrieve failed: ${answer.failure.errorClass}`, op!.id);
            return this.#result(row, 'deferred', op!.id, `retrieve failed: ${answer.failure.errorClass}`);
          }
          if (op!.status !== 'failed') {
            // In review: without Stripe's answer the review stands; the snapshot is noted for the operator.
            const note = `a snapshot of ${refund.id} says succeeded and retrieving it failed (${answer.failure.errorClass}); the review stands`;
            return this.#applyRefundDecision(row, event, refund, op, { kind: 'in_review', reason: note }, evidence, depth, chargePaymentIntentId);
          }
          const reason = `refund operation failed; a snapshot of ${refund.id} says succeeded and retrieving it failed (${answer.failure.errorClass}${'code' in answer.failure && answer.failure.code ? ` ${answer.failure.code}` : ''})`;
          return this.#applyRefundDecision(row, event, refund, op, { kind: 'contradiction', reason }, evidence, depth, chargePaymentIntentId);
        }
        return this.#applyRefundDecision(row, event, refund, op, decideRefundAfterRetrieve(answer.value, op!), { ...evidence, retrieved: { status: answer.value.status } }, depth, chargePaymentIntentId);
      }
      case 'settle':
        return this.#applyToOpen(row, event, op!, { kind: 'snapshot', view: refund }, { ...evidence }, async (now) => {
          if (depth > 1) return this.#finish(row, 'stale', op!.id, 'operation changed while the event was applied');
          return this.#applyRefund(row, event, refund, now, chargePaymentIntentId, depth + 1);
        }, { inReview: true });
    }
  }

  /** Claim the operation's lease, decide its outcome with the engine's decisions, write it fenced. */
  async #applyToOpen(
    row: InboxRow,
    event: StripeEventView,
    op: Operation,
    plan: OpenPlan,
    evidence: Record<string, unknown>,
    /** Decide again from what the operation is now (it became final or went to review meanwhile). */
    again: (now: Operation) => Promise<Applied>,
    options: { readonly inReview?: boolean } = {},
  ): Promise<Applied> {
    const claim = await claimForEvent(this.#db, op.id, randomUUID(), this.#policy.leaseMs, this.#actor, event.id, options);
    if (claim === null) return this.#finish(row, 'unknown_operation', null, `operation ${op.id} vanished`);
    if (claim.claimed === null) {
      if (claim.leaseUntil !== null) {
        // Another worker holds it and is talking to Stripe: its write comes first; the event is
        // judged against that write once the lease has ended (or is given back).
        await deferEvent(this.#db, row, { until: claim.leaseUntil }, WAITING_FOR_LEASE, op.id);
        return this.#result(row, 'deferred', op.id, `waiting for the lease of operation ${op.id}`);
      }
      // Final or in review since we looked: decide again from what it is now.
      return again(claim.operation);
    }
    const claimed = claim.claimed;
    const ctx: DecisionContext = { op: claimed, policy: this.#policy, random: this.#random };
    let outcome: Outcome;
    if (plan.kind === 'review') {
      outcome = { status: claimed.status, externalId: null, reviewReason: plan.reason, retryAfterMs: null, error: null, errorClass: null, errorCode: null, detail: evidence };
    } else if (plan.kind === 'snapshot') {
      // A PaymentIntent or a Refund: the kind's rules read its status (decisions.ts KIND_RULES).
      outcome = fromPaymentIntent(ctx, plan.view, { ...evidence, evidence: 'event' });
    } else {
      const mayCall = this.#gateway !== null && ((await this.#beforeCall?.()) ?? true);
      if (!mayCall || this.#gateway === null) return this.#release(row, claimed, 'no Stripe call possible now (no key or no request budget)', deferralDelayMs(row.attempts));
      const answer = await plan.retrieve(this.#gateway).catch((error: unknown) => ({
        ok: false as const,
        failure: { kind: FailureKind.ambiguous, errorClass: error instanceof Error ? error.name : 'Error', message: String(error) },
      }));
      if (!answer.ok && TRANSIENT.has(answer.failure.kind)) {
        return this.#release(row, claimed, `retrieve failed: ${answer.failure.errorClass}`, deferralDelayMs(row.attempts));
      }
      outcome = decideRetrieve(ctx, plan.id, answer);
      outcome = { ...outcome, detail: { ...outcome.detail, ...evidence, evidence: 'event+retrieve' } };
    }
    const write: OutcomeWrite = {
      operationId: claimed.id,
      leaseToken: claimed.leaseToken,
      action: 'record',
      step: null,
      fromStatus: claimed.status,
      keyGeneration: claimed.keyGeneration,
      ...outcome,
    };
    const recorded: { event: OutcomeEventRow | null; outcome: ApplyOutcome } = { event: null, outcome: 'moved' };
    const applied = await this.#transaction(async (client) => {
      const [result] = await recordOutcomes(client, [write], this.#actor, this.#publishLeaseMs);
      if (!result?.applied) return false;
      recorded.event = result.event;
      recorded.outcome = outcome.reviewReason ? 'review' : result.status === 'succeeded' || result.status === 'failed' ? 'settled' : 'moved';
      return markApplied(client, row, recorded.outcome, claimed.id);
    });
    if (!applied) {
      await deferEvent(this.#db, row, { afterMs: 1000 }, 'outcome discarded (lease lost) or inbox lease lost', claimed.id).catch(() => {});
      return this.#result(row, 'deferred', claimed.id, 'outcome not written; judged again');
    }
    return { ...this.#result(row, recorded.outcome, claimed.id, outcome.reviewReason ?? `operation ${outcome.status}`), events: recorded.event ? [recorded.event] : [] };
  }

  /** Give the operation's lease back untouched and leave the event for later. */
  async #release(row: InboxRow, claimed: ClaimedOperation, reason: string, afterMs: number): Promise<Applied> {
    await recordOutcomes(this.#db, [releaseWrite(claimed, null, `stripe event ${row.eventId} not applied: ${reason}`)], this.#actor, this.#publishLeaseMs);
    await deferEvent(this.#db, row, { afterMs }, reason, claimed.id);
    return this.#result(row, 'deferred', claimed.id, reason);
  }

  async #applyAftermath(row: InboxRow, event: StripeEventView): Promise<Applied> {
    const a = aftermathOf(event);
    if (!a) return this.#finish(row, 'unreadable', null, `${event.type} without a readable charge or dispute`);
    const op = await findOperationByExternalId(this.#db, a.paymentIntentId);
    if (!op) return this.#finish(row, 'unknown_payment_intent', null, `${event.type} for ${a.paymentIntentId}, which no operation holds`);
    const written: { event: OutcomeEventRow | null } = { event: null };
    const done = await this.#transaction(async (client) => {
      written.event = await recordAftermath(client, {
        operation: op,
        eventType: AFTERMATH_EVENT_TYPE[a.kind],
        kind: a.kind,
        amount: a.amount,
        amountRefunded: a.amountRefunded,
        currency: a.currency,
        chargeId: a.chargeId,
        disputeId: a.disputeId,
        disputeStatus: a.disputeStatus,
        disputeReason: a.disputeReason,
        stripeEventId: event.id,
        stripeCreatedAt: event.created,
        actor: this.#actor,
      }, this.#publishLeaseMs);
      return markApplied(client, row, 'aftermath', op.id);
    });
    if (!done) return this.#lostLease(row);
    return { ...this.#result(row, 'aftermath', op.id, `${AFTERMATH_EVENT_TYPE[a.kind]} ${a.amount} ${a.currency}`), events: written.event ? [written.event] : [] };
  }

  async #finish(row: InboxRow, outcome: ApplyOutcome, operationId: string | null, reason: string): Promise<Applied> {
    const done = await markApplied(this.#db, row, outcome, operationId);
    return done ? this.#result(row, outcome, operationId, reason) : this.#lostLease(row);
  }

  #result(row: InboxRow, outcome: Applied['outcome'], operationId: string | null, reason: string): Applied {
    return { eventId: row.eventId, eventType: row.eventType, outcome, operationId, reason, events: [], newFinding: false };
  }

  #lostLease(row: InboxRow): Applied {
    return this.#result(row, 'deferred', null, 'inbox lease lost to another applier; nothing written by this one');
  }

  /** BEGIN … COMMIT on one connection; `work` returning false rolls everything back. */
  async #transaction(work: (client: Db) => Promise<boolean>): Promise<boolean> {
    const client = await this.#db.connect();
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
}

/** Retrieve failures that say nothing about the PaymentIntent: the event waits and is tried again. */
const TRANSIENT = new Set<string>([FailureKind.ambiguous, FailureKind.rateLimited, FailureKind.authentication, FailureKind.permission]);
