// The inbox applier: works recorded Stripe events at least once, in any order, each effect written
// by the same fenced statements as every other outcome. The mirror image of the outbox relay.
//
//   inbox row (leased) ─▶ origin (judgeEventOrigin): another account, the other mode ─▶ refused: BEGIN finding (+ audit) + mark applied COMMIT
//                      ─▶ decide on the snapshot (event-decisions.ts): a hint
//                         ├─ settle / review (a PaymentIntent or a Refund): claim the operation's lease
//                         │   ─▶ retrieve with our key (no transaction open) ─▶ not confirmed (404, not ours): release, finding
//                         │   ─▶ decide AGAIN on Stripe's answer and the claimed row
//                         │       ├─ settle / review: BEGIN recordOutcomes (fenced) + mark applied COMMIT
//                         │       └─ anything else: release the lease untouched, then act on that decision
//                         ├─ duplicate charge / a refund failed after success: retrieve first, decide again,
//                         │   then BEGIN remedy refund | fact + finding + audit + mark applied COMMIT
//                         ├─ refund / dispute: BEGIN audit + outbox row + mark applied COMMIT
//                         ├─ contradiction / unrecorded: BEGIN finding (+ audit) + mark applied COMMIT
//                         └─ stale / foreign / ignored: mark applied
//
// Nothing that changes an operation or moves money rests on the snapshot: a signed event proves that
// Stripe delivered it to this endpoint, not that its object is ours (docs/decisions.md 2026-12-02).
// One retrieve per such event keeps the fast path: the operation still settles within the apply.
//
// Idempotent per event id: the row is marked applied in the same transaction as its effect, fenced by
// the row's apply lease — a second applier (the webhook's inline apply and a sweep, two sweeps) that
// lost the lease rolls its transaction back. An event for an operation whose lease another worker
// holds waits in the inbox until that lease ends: the worker's own write comes first, and the event
// is then judged against the state it wrote.
import { randomUUID } from 'node:crypto';
import type { Db } from './db.ts';
import { DEFAULT_POLICY, fromPaymentIntent, remedyAfterFailureRefundId, type DecisionContext, type EnginePolicy, type Outcome } from './decisions.ts';
import {
  aftermathOf,
  claimedOperationId,
  confirmRetrieved,
  decidePaymentIntentEvent,
  decideRefundAfterRetrieve,
  decideRefundEvent,
  eventObjectOf,
  judgeEventOrigin,
  paymentIntentOf,
  readStripeEvent,
  REFUND_EVENT_TYPES,
  refundOf,
  type EventOriginPolicy,
  type EventPaymentIntent,
  type EventRefund,
  type PaymentIntentEventDecision,
  type RefundEventDecision,
  type StripeEventView,
} from './event-decisions.ts';
import { FailureKind, type GatewayFailure, type GatewayResult, type PaymentGateway, type RefundView } from './gateway.ts';
import {
  appendEventAudit,
  claimDueEvents,
  claimForEvent,
  deferEvent,
  findOperationByExternalId,
  findRefundEventOperation,
  isRefusal,
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
  /**
   * True when this apply wrote a new finding — an unrecorded charge, a contradiction, a refund failed
   * after success, or a refused / unconfirmed event (inbox-store.ts isRefusal): alarm-worthy.
   */
  readonly newFinding: boolean;
}

export interface ApplySummary {
  readonly byOutcome: Readonly<Record<string, number>>;
  readonly applied: number;
  readonly deferred: number;
  readonly failed: number;
  readonly contradictions: number;
  readonly unrecordedCharges: number;
  /** New findings of refused or unconfirmed events (foreign_account, livemode_mismatch, unconfirmed). */
  readonly refused: number;
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

/** Connected accounts whose events are taken: none (every event with an `account` is refused). */
const CONNECTED_ACCOUNTS: ReadonlySet<string> = new Set();

/** What a decision was made on: the event's snapshot (a hint) or the object as our key retrieved it. */
type Evidence = 'snapshot' | 'stripe';

/** The object an event named, and how our key retrieves it. */
interface RetrieveTarget<T extends PaymentIntentView> {
  readonly objectName: 'PaymentIntent' | 'Refund';
  readonly snapshot: T;
  readonly retrieve: (gateway: PaymentGateway) => Promise<GatewayResult<T>>;
}

/** After the claim and the retrieve: write this outcome (fenced), or give the lease back and do something else. */
type OpenJudgement = { readonly kind: 'write'; readonly outcome: Outcome } | { readonly kind: 'elsewhere'; readonly reason: string; readonly act: () => Promise<Applied> };

type Retrieved<T> = { readonly ok: true; readonly object: T } | { readonly ok: false; readonly applied: Applied };

/** Decisions that write no outcome of the operation (the rest — settle, review — are judged after a claim). */
type RecordOnlyPaymentIntentDecision = Exclude<PaymentIntentEventDecision, { readonly kind: 'settle' | 'review' }>;
type RecordOnlyRefundDecision = Exclude<RefundEventDecision, { readonly kind: 'settle' }>;

/** Retries of an event that could not be applied: 1 s, 2 s, 4 s … capped at 15 min. */
export const deferralDelayMs = (attempts: number): number => Math.min(15 * 60_000, 1000 * 2 ** Math.min(Math.max(attempts, 0), 20));

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
const objectEvidence = (o: PaymentIntentView) => ({ id: o.id, status: o.status, amount: o.amount, currency: o.currency });

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

  /** Whose events are taken: our key's mode (none without a key), no connected account. */
  get originPolicy(): EventOriginPolicy {
    return { keyMode: this.#gateway === null ? 'no_key' : (this.#gateway.keyMode ?? 'unrecognised'), connectedAccounts: CONNECTED_ACCOUNTS };
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
    let refused = 0;
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
        else if (result.newFinding && isRefusal(result.outcome)) refused++;
        else if (result.newFinding) contradictions++; // a contradiction, or a refund failed after it succeeded
        events.push(...result.events);
      }
      // Every deferral is into the future, so the next page holds other rows; a short page was the last.
      if (page.length < (options.pageSize ?? 50)) break;
    }
    return { byOutcome, applied, deferred, failed, contradictions, unrecordedCharges, refused, events, errors };
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
    // Whose event is it? Before anything in it is believed — for every type, facts included.
    const origin = judgeEventOrigin(event, this.originPolicy);
    if (origin.kind === 'wait') return this.#defer(row, null, origin.reason);
    if (origin.kind === 'refused') return this.#refuse(row, event, origin.outcome, origin.reason);
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
      return this.#applyRefund(row, event, refund, found?.operation ?? null, found?.chargePaymentIntentId ?? null, 0, 'snapshot');
    }
    return this.#finish(row, 'ignored_type', null, `${event.type} is not acted on`);
  }

  /**
   * An event from another account or the other mode: refused whole. A finding (one per kind and
   * object), an audit line on the operation its object names (if we have it), the row applied with
   * the refusal as its outcome. No operation changes, nothing is published, no remedy is made.
   */
  async #refuse(row: InboxRow, event: StripeEventView, outcome: 'foreign_account' | 'livemode_mismatch', reason: string): Promise<Applied> {
    const object = eventObjectOf(event);
    const op = object.claimedOperationId ? await findOperation(this.#db, object.claimedOperationId) : null;
    const detail = {
      stripeEventId: event.id,
      eventType: event.type,
      account: event.account,
      context: event.context,
      livemode: event.livemode,
      keyMode: this.originPolicy.keyMode,
      object: { id: object.id, object: object.object, status: object.status, amount: object.amount, currency: object.currency },
    };
    let newFinding = false;
    const done = await this.#transaction(async (client) => {
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
      if (op) await appendEventAudit(client, op, this.#actor, { ...detail, refused: outcome, reason }, object.id);
      return markApplied(client, row, outcome, op?.id ?? null);
    });
    return done ? { ...this.#result(row, outcome, op?.id ?? null, reason), newFinding } : this.#lostLease(row);
  }

  async #applyPaymentIntent(row: InboxRow, event: StripeEventView, pi: EventPaymentIntent, op: Operation | null, depth: number): Promise<Applied> {
    const decision = decidePaymentIntentEvent(op, pi);
    if (decision.kind !== 'settle' && decision.kind !== 'review') return this.#recordPaymentIntent(row, event, pi, op, decision, 'snapshot', depth);
    // Settling or sending to review changes the operation: a hint until our key confirms it. Claim
    // the operation, retrieve the PaymentIntent, and decide again — on Stripe's answer, and on the
    // row as the claim found it (another key generation, another PaymentIntent, final meanwhile).
    const open = op!;
    const evidence = paymentIntentEvidence(event, pi, 'snapshot');
    return this.#applyToOpen(
      row,
      event,
      open,
      { objectName: 'PaymentIntent', snapshot: pi, retrieve: async (gateway) => mapOk(await gateway.retrievePaymentIntent(pi.id), asEventPaymentIntent) },
      (claimed, now, ctx): OpenJudgement => {
        const again = decidePaymentIntentEvent(claimed, now);
        const detail = { ...evidence, retrieved: objectEvidence(now), evidence: 'event+retrieve' };
        if (again.kind === 'settle') return { kind: 'write', outcome: fromPaymentIntent(ctx, now, detail) };
        if (again.kind === 'review') return { kind: 'write', outcome: reviewOutcome(claimed, again.reason, detail) };
        return { kind: 'elsewhere', reason: again.reason, act: () => this.#recordPaymentIntent(row, event, now, claimed, again, 'stripe', depth) };
      },
      (now) => (depth > 1 ? this.#finish(row, 'stale', open.id, 'operation changed while the event was applied') : this.#applyPaymentIntent(row, event, pi, now, depth + 1)),
      // An operation in review only for being slow is settled by its PaymentIntent's final state
      // (event-decisions.ts settlesSlowReview); the claim must then take it in review.
      { inReview: open.reviewReason !== null },
    );
  }

  /** A PaymentIntent event's decision that writes no outcome of the operation. */
  async #recordPaymentIntent(
    row: InboxRow,
    event: StripeEventView,
    pi: EventPaymentIntent,
    op: Operation | null,
    decision: RecordOnlyPaymentIntentDecision,
    evidenceOf: Evidence,
    depth: number,
  ): Promise<Applied> {
    const evidence = paymentIntentEvidence(event, pi, evidenceOf);
    switch (decision.kind) {
      case 'ignore':
        return this.#finish(row, decision.outcome, op?.id ?? null, decision.reason);
      case 'stale':
        return this.#finish(row, 'stale', op!.id, decision.reason);
      case 'await_final':
        return this.#defer(row, op!.id, decision.reason);
      case 'duplicate_charge':
        if (evidenceOf === 'snapshot') {
          // A remedy moves money (a refund of the extra PaymentIntent): the extra one is retrieved
          // with our key and judged again on what Stripe holds (judgeDuplicateCharge, inside the decision).
          const target: RetrieveTarget<EventPaymentIntent> = { objectName: 'PaymentIntent', snapshot: pi, retrieve: async (gateway) => mapOk(await gateway.retrievePaymentIntent(pi.id), asEventPaymentIntent) };
          const got = await this.#retrieveConfirmed(row, event, op!, null, target);
          if (!got.ok) return got.applied;
          const again = decidePaymentIntentEvent(op, got.object);
          // The operation is final (a duplicate is judged against a succeeded charge only): it never changes.
          if (again.kind === 'settle' || again.kind === 'review') throw new Error(`a final operation ${op!.id} cannot be ${again.kind}d`);
          return this.#recordPaymentIntent(row, event, got.object, op, again, 'stripe', depth);
        }
        return this.#findingOfPaymentIntent(row, event, pi, op, decision, evidence);
      case 'unrecorded':
      case 'contradiction':
        // Only recorded: a finding and an alarm, on what the event says (nothing changes).
        return this.#findingOfPaymentIntent(row, event, pi, op, decision, evidence);
      case 'in_review': {
        const done = await this.#transaction(async (client) => {
          await appendEventAudit(client, op!, this.#actor, { ...evidence, note: decision.reason }, pi.id);
          return markApplied(client, row, 'in_review', op!.id);
        });
        return done ? this.#result(row, 'in_review', op!.id, decision.reason) : this.#lostLease(row);
      }
    }
  }

  /** An unrecorded charge, a contradiction, or a duplicate charge with its remedy (the last only on Stripe's word). */
  async #findingOfPaymentIntent(
    row: InboxRow,
    event: StripeEventView,
    pi: EventPaymentIntent,
    op: Operation | null,
    decision: Extract<PaymentIntentEventDecision, { readonly kind: 'unrecorded' | 'contradiction' | 'duplicate_charge' }>,
    evidence: Record<string, unknown>,
  ): Promise<Applied> {
    const kind = decision.kind === 'unrecorded' ? 'unrecorded_charge' : 'contradiction';
    const outcome: ApplyOutcome = decision.kind === 'unrecorded' ? 'unrecorded' : 'contradiction';
    // A second succeeded PaymentIntent of a succeeded charge: the duplicate-charge remedy refunds it,
    // in the same transaction as the finding, once however often the event comes.
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

  /**
   * A refund event (refund.created / updated / failed, charge.refund.updated) for the refund operation
   * it names, if any. `chargePaymentIntentId`: the charge's PaymentIntent, read with the operation
   * (findRefundEventOperation), from which decideRefundEvent derives the PaymentIntent the operation
   * refunds (types.ts paymentIntentOfRefund). A final charge's never changes, so a re-decision after a
   * claim or a retrieve reuses it.
   */
  async #applyRefund(
    row: InboxRow,
    event: StripeEventView,
    refund: EventRefund,
    op: Operation | null,
    chargePaymentIntentId: string | null,
    depth: number,
    evidenceOf: Evidence,
  ): Promise<Applied> {
    const decision = decideRefundEvent(op, refund, chargePaymentIntentId);
    if (decision.kind !== 'settle') return this.#recordRefund(row, event, refund, op, decision, evidenceOf, depth, chargePaymentIntentId);
    if (evidenceOf === 'stripe') throw new Error('a settle on Stripe\'s word is judged after the claim (#applyToOpen)');
    const open = op!;
    const evidence = refundEvidence(event, refund, 'snapshot');
    // In review too: a final, matching Refund naming the operation is what the operator would look
    // for — once our key shows Stripe holds it so; the settling write clears the review.
    return this.#applyToOpen(
      row,
      event,
      open,
      { objectName: 'Refund', snapshot: refund, retrieve: async (gateway) => mapOk(await gateway.retrieveRefund(refund.id), asEventRefund) },
      (claimed, now, ctx): OpenJudgement => {
        const again = decideRefundEvent(claimed, now, chargePaymentIntentId);
        if (again.kind === 'settle') return { kind: 'write', outcome: fromPaymentIntent(ctx, now, { ...evidence, retrieved: objectEvidence(now), evidence: 'event+retrieve' }) };
        return { kind: 'elsewhere', reason: again.reason, act: () => this.#recordRefund(row, event, now, claimed, again, 'stripe', depth, chargePaymentIntentId) };
      },
      (now) => (depth > 1 ? this.#finish(row, 'stale', open.id, 'operation changed while the event was applied') : this.#applyRefund(row, event, refund, now, chargePaymentIntentId, depth + 1, 'snapshot')),
      { inReview: true },
    );
  }

  /** A refund event's decision that writes no outcome of the operation (a fact, a finding, a note). */
  async #recordRefund(
    row: InboxRow,
    event: StripeEventView,
    refund: EventRefund,
    op: Operation | null,
    decision: RecordOnlyRefundDecision,
    evidenceOf: Evidence,
    depth: number,
    chargePaymentIntentId: string | null,
  ): Promise<Applied> {
    const evidence = refundEvidence(event, refund, evidenceOf);
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
      case 'failed_after_success':
        if (evidenceOf === 'snapshot') {
          // The fact makes the refund's amount refundable again (migrations/009's mark): recorded
          // only once our key shows Stripe holds the Refund failed.
          const target: RetrieveTarget<EventRefund> = { objectName: 'Refund', snapshot: refund, retrieve: async (gateway) => mapOk(await gateway.retrieveRefund(refund.id), asEventRefund) };
          const got = await this.#retrieveConfirmed(row, event, op!, null, target);
          if (!got.ok) return got.applied;
          return this.#applyRefund(row, event, got.object, op, chargePaymentIntentId, depth, 'stripe');
        }
        return this.#refundFinding(row, event, refund, op!, decision, evidence);
      case 'contradiction':
        return this.#refundFinding(row, event, refund, op!, decision, evidence);
      case 'retrieve': {
        // A FAILED operation and a succeeded snapshot: only recorded (a contradiction or stale), so
        // a failed retrieve is a contradiction to look at, not a state change.
        const mayCall = this.#gateway !== null && ((await this.#beforeCall?.()) ?? true);
        if (!mayCall || this.#gateway === null) return this.#defer(row, op!.id, 'no Stripe call possible now (no key or no request budget)');
        const answer = await this.#gateway.retrieveRefund(refund.id).catch(thrownAsAmbiguous);
        if (!answer.ok) {
          if (TRANSIENT.has(answer.failure.kind)) return this.#defer(row, op!.id, `retrieve failed: ${answer.failure.errorClass}`);
          const reason = `refund operation failed; a snapshot of ${refund.id} says succeeded and retrieving it failed (${answer.failure.errorClass}${answer.failure.code ? ` ${answer.failure.code}` : ''})`;
          return this.#refundFinding(row, event, refund, op!, { kind: 'contradiction', reason }, evidence);
        }
        const after = decideRefundAfterRetrieve(answer.value);
        const detail = { ...evidence, retrieved: { status: answer.value.status } };
        return after.kind === 'contradiction' ? this.#refundFinding(row, event, refund, op!, after, detail) : this.#finish(row, 'stale', op!.id, after.reason);
      }
    }
  }

  /** A contradiction, or a refund failed after success (with its fact): one finding per Refund (its id keys it). */
  async #refundFinding(
    row: InboxRow,
    event: StripeEventView,
    refund: EventRefund,
    op: Operation,
    decision: Extract<RefundEventDecision, { readonly kind: 'contradiction' | 'failed_after_success' }>,
    evidence: Record<string, unknown>,
  ): Promise<Applied> {
    // The same failure told by refund.failed, refund.updated and charge.refund.updated is recorded,
    // announced and alarmed once.
    const outcome: ApplyOutcome = decision.kind === 'contradiction' ? 'contradiction' : 'failed_after_success';
    const written: { event: OutcomeEventRow | null; newFinding: boolean } = { event: null, newFinding: false };
    const done = await this.#transaction(async (client) => {
      written.newFinding = await recordFinding(client, {
        kind: 'contradiction',
        paymentIntentId: refund.id,
        eventId: event.id,
        operationId: op.id,
        claimedOperationId: refund.metadata.operation_id ?? null,
        orderId: refund.metadata.order_id ?? op.orderId,
        amount: refund.amount,
        currency: refund.currency,
        status: refund.status,
        reason: decision.reason,
        detail: evidence,
      });
      if (!written.newFinding) return markApplied(client, row, 'stale', op.id);
      if (decision.kind === 'failed_after_success') {
        written.event = await recordRefundFailedAfterSuccess(client, {
          operation: op,
          refundStripeId: refund.id,
          paymentIntentId: refund.paymentIntentId,
          amount: refund.amount,
          currency: refund.currency,
          failureReason: refund.failureReason,
          stripeEventId: event.id,
          stripeCreatedAt: event.created,
          actor: this.#actor,
        }, this.#publishLeaseMs);
        // The duplicate-charge remedy's Refund failed after success: the extra charge stands again.
        // A new remedy of the same PaymentIntent, in the same transaction (the fact's trigger has just
        // marked the failed one, which no longer holds the PaymentIntent's one remedy): its first
        // claim puts it in review naming the PaymentIntent (decisions.ts decidePrecondition).
        const extra = op.refund?.paymentIntentId;
        if (extra && op.refund) {
          await insertDuplicateRefund(client, { id: op.refund.parentOperationId, orderId: op.orderId }, { refundId: remedyAfterFailureRefundId(extra, refund.id), paymentIntentId: extra, amount: op.amount }, this.#actor, {
            evidence: 'stripe_event',
            stripeEventId: event.id,
            eventType: event.type,
            afterFailedRefund: refund.id,
          });
        }
      } else {
        await appendEventAudit(client, op, this.#actor, { ...evidence, contradiction: decision.reason }, refund.id);
      }
      return markApplied(client, row, outcome, op.id);
    });
    if (!done) return this.#lostLease(row);
    if (!written.newFinding) return this.#result(row, 'stale', op.id, `already recorded for Refund ${refund.id}: ${decision.reason}`);
    return { ...this.#result(row, outcome, op.id, decision.reason), events: written.event ? [written.event] : [], newFinding: true };
  }

  /**
   * Claim the operation's lease, retrieve the object with our key, decide again on Stripe's answer and
   * the CLAIMED row (`judge`), and write that outcome fenced — or give the lease back untouched and act
   * on the new decision. Never an outcome decided on the row read before the claim: between that read
   * and the claim the operation may have been re-issued, settled, or sent to review.
   */
  async #applyToOpen<T extends PaymentIntentView>(
    row: InboxRow,
    event: StripeEventView,
    op: Operation,
    target: RetrieveTarget<T>,
    judge: (claimed: ClaimedOperation, now: T, ctx: DecisionContext) => OpenJudgement,
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
    // A lease given back without an outcome restores the schedule the claim moved to the lease's end.
    const scheduleMs = op.nextAttemptAt ? Math.max(0, op.nextAttemptAt.getTime() - claimed.claimedAt.getTime()) : 0;
    const got = await this.#retrieveConfirmed(row, event, claimed, { claimed, scheduleMs }, target);
    if (!got.ok) return got.applied;
    const verdict = judge(claimed, got.object, { op: claimed, policy: this.#policy, random: this.#random });
    if (verdict.kind === 'elsewhere') {
      await this.#releaseOnly(claimed, `stripe event ${event.id}: decided again on Stripe's answer and the claimed row: ${verdict.reason}`, scheduleMs);
      return verdict.act();
    }
    const outcome = verdict.outcome;
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

  /**
   * Retrieve the object an event named, with our key, and check it is the one the event named
   * (confirmRetrieved). Not now (no key, no request budget, a transient failure): the event waits
   * (and a held claim is given back). Not confirmed (404, not ours, a snapshot that never was true): a
   * finding, the row applied `unconfirmed`, no state change.
   */
  async #retrieveConfirmed<T extends PaymentIntentView>(
    row: InboxRow,
    event: StripeEventView,
    op: Operation,
    held: { readonly claimed: ClaimedOperation; readonly scheduleMs: number } | null,
    target: RetrieveTarget<T>,
  ): Promise<Retrieved<T>> {
    const later = async (reason: string): Promise<Retrieved<T>> => {
      if (held) await this.#releaseOnly(held.claimed, `stripe event ${row.eventId} not applied: ${reason}`, held.scheduleMs);
      return { ok: false, applied: await this.#defer(row, op.id, reason) };
    };
    const mayCall = this.#gateway !== null && ((await this.#beforeCall?.()) ?? true);
    if (!mayCall || this.#gateway === null) return later('no Stripe call possible now (no key or no request budget)');
    const answer = await target.retrieve(this.#gateway).catch(thrownAsAmbiguous);
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
    if (held) await this.#releaseOnly(held.claimed, `stripe event ${row.eventId} not confirmed: ${unconfirmed.reason}`, held.scheduleMs);
    return { ok: false, applied: await this.#unconfirmed(row, event, op, target, unconfirmed.reason, unconfirmed.detail) };
  }

  /** An event our key does not confirm: a finding (one per object), an audit line, the row applied `unconfirmed`. */
  async #unconfirmed<T extends PaymentIntentView>(row: InboxRow, event: StripeEventView, op: Operation, target: RetrieveTarget<T>, reason: string, extra: Record<string, unknown>): Promise<Applied> {
    const snapshot = target.snapshot;
    const detail = { stripeEventId: event.id, eventType: event.type, [target.objectName === 'PaymentIntent' ? 'paymentIntent' : 'refund']: objectEvidence(snapshot), ...extra };
    let newFinding = false;
    const done = await this.#transaction(async (client) => {
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
      await appendEventAudit(client, op, this.#actor, { ...detail, unconfirmed: reason }, snapshot.id);
      return markApplied(client, row, 'unconfirmed', op.id);
    });
    return done ? { ...this.#result(row, 'unconfirmed', op.id, reason), newFinding } : this.#lostLease(row);
  }

  /** Give the operation's lease back untouched (its schedule as it was before the claim). */
  async #releaseOnly(claimed: ClaimedOperation, reason: string, scheduleMs: number): Promise<void> {
    await recordOutcomes(this.#db, [releaseWrite(claimed, scheduleMs, reason)], this.#actor, this.#publishLeaseMs);
  }

  /** Leave the event in the inbox for later, on the deferral backoff. */
  async #defer(row: InboxRow, operationId: string | null, reason: string): Promise<Applied> {
    await deferEvent(this.#db, row, { afterMs: deferralDelayMs(row.attempts) }, reason, operationId);
    return this.#result(row, 'deferred', operationId, reason);
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

/** Retrieve failures that say nothing about the object: the event waits and is tried again. */
const TRANSIENT = new Set<string>([FailureKind.ambiguous, FailureKind.rateLimited, FailureKind.authentication, FailureKind.permission]);

/** A gateway that threw (it should not) is read as an ambiguous answer: the event waits. */
function thrownAsAmbiguous(error: unknown): { readonly ok: false; readonly failure: GatewayFailure } {
  return { ok: false, failure: { kind: FailureKind.ambiguous, errorClass: error instanceof Error ? error.name : 'Error', message: String(error) } };
}

function mapOk<A, B>(result: GatewayResult<A>, map: (value: A) => B): GatewayResult<B> {
  return result.ok ? { ok: true, value: map(result.value) } : result;
}

/** The operation to review, with the reason, status and external id untouched. */
function reviewOutcome(claimed: ClaimedOperation, reason: string, detail: Record<string, unknown>): Outcome {
  return { status: claimed.status, externalId: null, reviewReason: reason, retryAfterMs: null, error: null, errorClass: null, errorCode: null, detail };
}

function paymentIntentEvidence(event: StripeEventView, pi: EventPaymentIntent, evidenceOf: Evidence) {
  return { stripeEventId: event.id, eventType: event.type, paymentIntent: objectEvidence(pi), judgedOn: evidenceOf };
}

function refundEvidence(event: StripeEventView, refund: EventRefund, evidenceOf: Evidence) {
  return {
    stripeEventId: event.id,
    eventType: event.type,
    refund: { ...objectEvidence(refund), paymentIntent: refund.paymentIntentId, failureReason: refund.failureReason },
    judgedOn: evidenceOf,
  };
}
