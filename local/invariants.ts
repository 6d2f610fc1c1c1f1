// The invariant checker: the product's promise, judged against ground truth.
//
// The database says what the product BELIEVES; the fake Stripe's ledger (`paymentIntents()`) says
// what HAPPENED, whatever answers were lost on the way. Every check below compares the two, so a
// checker run after a chaos soak, a property-model run or `npm start` proves (or refutes):
//
//   nothing charged twice   — at most one succeeded PaymentIntent per order (given refunds: at most
//                             one that is not refunded in full)
//   the net amount          — (given refunds) per order, what Stripe kept = the amount asked − the
//                             refunds asked, or zero; never more refunded than charged
//   refunds told truly      — a succeeded refund operation names a succeeded Refund of its amount;
//                             every Refund that returns money is named by its operation
//   no unsafe re-issue      — no new key generation while an older one's PaymentIntent is or may become a charge
//   nothing lost            — every sent order has an operation, a rejected_messages row, or is in the DLQ;
//                             every sent refund request its refund operation or its rejected_messages row
//   nothing wrongly failed  — no operation `failed` while a succeeded PaymentIntent exists for it
//   nothing falsely paid    — no operation `succeeded` without the succeeded PaymentIntent it names
//   nothing unaccounted     — every succeeded PaymentIntent is known by its operation
//   nothing left hanging    — (quiescent) every operation final, or in review with a reason
//   a trail for everything  — an audit event per attempt; an outbox event per outcome, matching it
//   the right account       — every PaymentIntent and Refund on its operation's Stripe account (the
//                             connected account of a direct charge, the platform otherwise), a
//                             destination charge's transfer destination and fee as asked
//   authorizations told     — (manual capture) never captured more than authorized, never captured
//   truly                     once released (canceled or expired), a capture or release recorded as
//                             Stripe holds it, an authorization announced as Charge Authorized (never
//                             Charge Succeeded)
//
// It reads only: safe to run against a live pipeline (`requireQuiescent: false`) or at the end.
import type { Db } from '../lambdas/payments/db.ts';
import { PAYMENT_INTENT_OF_REFUND } from '../lambdas/payments/operations-store.ts';
import type { OperationStatus } from '../lambdas/payments/types.ts';
import type { PaymentIntentRecord, PaymentIntentStatus, RefundRecord } from './fake-stripe/types.ts';
import { netChargedByOrder } from './stripe-truth.ts';

export const VIOLATION_KINDS = [
  /** More than one succeeded PaymentIntent for one order. */
  'double_charge',
  /** A sent order with no operation, no rejected_messages row, and not in the DLQ. */
  'lost_order',
  /**
   * A sent refund request with no refund operation of its (order, refund id), no rejected_messages row
   * of its body, and not in the DLQ: acknowledged and gone (the lost_order of a refund).
   */
  'lost_refund',
  /** An operation `failed` while a succeeded PaymentIntent exists for it. */
  'wrongly_failed',
  /** An operation `succeeded` whose external_id is not a succeeded PaymentIntent. */
  'succeeded_without_charge',
  /** An operation `succeeded` on a PaymentIntent of another operation, amount or currency. */
  'charge_mismatch',
  /** A succeeded PaymentIntent that no operation knows (or, when quiescent, only an open one). */
  'unrecorded_charge',
  /** (quiescent) An operation still pending/unknown and not in human review. */
  'unsettled',
  /** The audit trail disagrees with the row: attempts vs outcome_recorded, requested, last transition. */
  'audit_mismatch',
  /** The outbox disagrees with the outcome: missing, extra, or with another status / payload. */
  'outbox_mismatch',
  /**
   * A re-issue (automatic or an operator's) under key generation n while a PaymentIntent of an earlier
   * generation is succeeded or may still charge: the double charge a re-issue can cause, caught even
   * before the second charge succeeds.
   */
  'unsafe_reissue',
  /**
   * (refunds given) The net amount Stripe kept for an order (succeeded PaymentIntents − succeeded
   * refunds) is not the amount asked minus the refunds the pipeline made (zero for a failed order).
   */
  'net_amount',
  /** (refunds given) More refunded than charged for an order. */
  'over_refund',
  /** A refund operation `succeeded` whose external_id is not a succeeded Refund at Stripe. */
  'succeeded_without_refund',
  /**
   * A refund operation `succeeded` on a Refund of another amount, PaymentIntent or operation (refunds
   * given); or, from the ledger alone, a failed-after-success mark without its fact event or a fact
   * event without the mark (migrations/009).
   */
  'refund_mismatch',
  /**
   * (refunds given) A Refund at Stripe that returns money (succeeded or pending) which no refund
   * operation names — none of ours, or (quiescent) only an open one not in review.
   */
  'unrecorded_refund',
  /**
   * An object at Stripe on another account than its operation's (docs/model.md#connected-accounts):
   * a PaymentIntent of a direct charge not on that connected account (on the platform, or another
   * account), a platform operation's PaymentIntent on a connected account, a Refund whose
   * PaymentIntent (a Refund belongs to its PaymentIntent's account) is not on the refund operation's
   * account; or a PaymentIntent whose transfer destination or application fee is not the one asked.
   */
  'wrong_account',
  /** (manual capture) A PaymentIntent whose amount_received exceeds what its charge authorized, or a capture operation of more than that. */
  'captured_over_authorized',
  /**
   * (manual capture) Money taken at Stripe (the PaymentIntent succeeded, amount_received > 0) of an
   * authorization the operations record as released: canceled, or expired (the reconciler's expiry check).
   */
  'captured_after_release',
  /**
   * (manual capture) The operations and Stripe disagree on an authorization: a capture recorded
   * succeeded whose PaymentIntent is not captured, or captured for another amount; a release recorded
   * whose PaymentIntent is still held; (quiescent) a PaymentIntent captured that no succeeded capture
   * records.
   */
  'capture_mismatch',
  /** (manual capture) A charge that only authorized, announced as 'Charge Succeeded' (it is 'Charge Authorized', then 'Charge Captured'). */
  'authorization_announced_as_charge',
  /**
   * (quiescent) A PaymentIntent of a retired key generation that Stripe committed after the re-issue
   * and that holds the amount (`requires_capture`), or held it until Stripe let it expire (`canceled`,
   * reason `automatic`), while its charge operation is final with another PaymentIntent or failed,
   * and no open finding names it: the customer held twice, and nobody told.
   */
  'held_twice',
] as const;
export type ViolationKind = (typeof VIOLATION_KINDS)[number];

export interface Violation {
  readonly kind: ViolationKind;
  readonly operationId?: string;
  readonly orderId?: string;
  readonly detail: string;
}

/**
 * Not a broken promise, but worth a human's eye in a report: a succeeded PaymentIntent whose
 * operation sits in human review without knowing it (the design sends "Search found nothing after
 * the key window" to review; Search lags, so the charge may exist). The review queue is where the
 * product says "no machine can decide": money is not lost, it waits for a person.
 */
export interface Warning {
  /**
   * charge_awaiting_review: as above; duplicate_awaiting_review: a second charge whose remedy refund
   * waits for a human (Stripe failed it, or its evidence could not settle it; not a refused key); refund_awaiting_review: a refund waiting for its charge, which
   * is in review (it goes once that human settles the charge), or a Refund whose operation is in review;
   * settlement_awaiting_review: a capture or cancel of an authorization whose charge is in review.
   */
  readonly kind: 'charge_awaiting_review' | 'duplicate_awaiting_review' | 'refund_awaiting_review' | 'settlement_awaiting_review' | 'refunded_twice_found' | 'late_charge_found' | 'late_hold_found';
  readonly operationId: string;
  readonly orderId: string;
  readonly detail: string;
}

/** A refund request as a producer sent it: `{"type":"refund","orderId":…,"refundId":…}`. */
export interface SentRefund {
  readonly orderId: string;
  readonly refundId: string;
  /**
   * The hex SHA-256 of the body as sent (UTF-8). Given, a rejection whose raw body retention removed
   * is still matched: by its body_sha256, which stays with the row (migration 017).
   */
  readonly bodySha256?: string;
}

export interface CheckInvariantsInput {
  readonly db: Db;
  /** Ground truth from the fake Stripe: `fake.paymentIntents()` (or GET /__fake/payment_intents). */
  readonly paymentIntents: readonly PaymentIntentRecord[];
  /**
   * Ground truth of refunds: `fake.refunds()`. Given, the net-amount invariant replaces "at most one
   * succeeded PaymentIntent" (a duplicate refunded in full is no double charge) and refund
   * operations are checked against it.
   */
  readonly refunds?: readonly RefundRecord[];
  /** Orders a producer sent: each must end somewhere visible. */
  readonly sentOrderIds?: readonly string[];
  /** Orders whose message is in the DLQ ("intake not recorded — redrive": visible, not lost). */
  readonly dlqOrderIds?: readonly string[];
  /**
   * Refund requests a producer sent (the body's orderId and refundId; repeats may be listed once or
   * more): each must end as the refund operation of its (order, refund id), a rejected_messages row
   * of its body, or in the DLQ — by its message group, the order id (`dlqOrderIds`). Give only the
   * requests that reached the queue, and that the pipeline worked: a caller that drives the engine
   * itself (no rejected_messages row for a refusal) gives only the requests it saw accepted.
   */
  readonly sentRefunds?: readonly SentRefund[];
  /**
   * After faults stopped and the reconciler ran until nothing changed: every operation must be final
   * or in review, and every succeeded PaymentIntent known by a succeeded operation. Default false.
   */
  readonly requireQuiescent?: boolean;
  /**
   * Judge only these orders' operations, rows and PaymentIntents (a shared database where other runs
   * left theirs, e.g. the property model). Default: everything in the database and the ledger.
   */
  readonly orderIds?: readonly string[];
  /**
   * Retention ran with this outbox cutoff (lambdas/payments/retention-store.ts): a published outbox
   * event created before it may be gone. An event is written in the transaction of its state change,
   * whose audit row (kept for ever) carries the same time: so an event is accepted as removed only when
   * that audit row is older than the cutoff; every event younger must still be there, and the ones
   * left keep their order. Default: none was removed, every event must be there.
   */
  readonly outboxRemovedBefore?: Date;
}

export interface InvariantReport {
  readonly ok: boolean;
  readonly quiescent: boolean;
  readonly operations: number;
  readonly byStatus: Readonly<Record<OperationStatus, number>>;
  /** Open operations waiting for a human (review_reason set). */
  readonly inReview: number;
  /** Open operations the machines still work on (not in review). */
  readonly open: number;
  readonly paymentIntents: { readonly total: number; readonly byStatus: Readonly<Partial<Record<PaymentIntentStatus, number>>> };
  readonly rejectedMessages: number;
  readonly sentOrders: number | null;
  /** Distinct refund requests (order, refund id) given as sent; null when none were given. */
  readonly sentRefunds: number | null;
  readonly dlqOrders: number;
  readonly outboxEvents: number;
  readonly violations: readonly Violation[];
  readonly violationsByKind: Readonly<Partial<Record<ViolationKind, number>>>;
  readonly warnings: readonly Warning[];
  /**
   * Given refunds: the net amount each settled order must have at Stripe (the charge less the refunds
   * the pipeline made and Stripe kept; 0 for a failed charge) — the figure the net_amount check used.
   */
  readonly expectedNet: ReadonlyMap<string, number>;
  /**
   * PaymentIntents Stripe created under a generation AFTER the operation was re-issued away from it (a
   * late commit no proof could see): their money is judged like any extra charge's.
   */
  readonly lateCommits: number;
  /** Their ids, and those of late authorizations that held (or held until they expired): what a finding about one of them is explained by. */
  readonly lateCommitIds: readonly string[];
}

interface OperationFacts {
  id: string;
  kind: 'charge' | 'refund' | 'capture' | 'cancel_authorization';
  /** Manual capture (migrations/019): 'manual' on a charge that only authorized; 'expired' on a cancel the expiry check recorded. */
  capture_method: 'manual' | null;
  cancellation_reason: 'expired' | null;
  /** 'outcome_recorded' events of the reconciler's expiry check (step 'expiry'): an outcome read, no attempt made. */
  expiry_recorded: number;
  refund_id: string | null;
  refund_payment_intent: string | null;
  /** A refund: the PaymentIntent it refunds (operations-store.ts PAYMENT_INTENT_OF_REFUND, the one definition). */
  refunded_payment_intent: string | null;
  /** The operation's mark (migrations/009): Stripe failed its Refund after it succeeded. */
  failed_after_success: boolean;
  parent_operation_id: string | null;
  order_id: string;
  status: OperationStatus;
  external_id: string | null;
  attempts: number;
  review_reason: string | null;
  last_error_class: string | null;
  amount: string;
  currency: string;
  /** Connect (migrations/018): the connected account it is made as (null: the platform), a destination charge's account, the fee. */
  stripe_account: string | null;
  transfer_destination: string | null;
  application_fee_amount: string | null;
  requested: number;
  started: number;
  recorded: number;
  discarded: number;
  released: number;
  operator_resolved: number;
  review_entries: number;
  last_to_status: string | null;
  key_generation: number;
  auto_reissues: number;
  /** When the operation was re-issued away from each key generation: { "0": iso, … } (null: never re-issued). */
  reissued_from: Record<string, string> | null;
  /** Refund ids (re_…) the watch after a re-issue found as a second Refund of this refund operation. */
  refunded_twice: string[] | null;
  watch_found: string[] | null;
  /** With outboxRemovedBefore: the final transition, entries into review and re-issues written before it (their events may be gone). */
  final_before_cutoff: boolean;
  review_entries_before_cutoff: number;
  auto_reissues_before_cutoff: number;
}

interface OutboxFacts {
  event_id: string;
  operation_id: string;
  event_type: string;
  payload: Record<string, unknown>;
}

const FINAL_EVENT_TYPE: Partial<Record<OperationStatus, string>> = { succeeded: 'Charge Succeeded', failed: 'Charge Failed' };
const REVIEW_EVENT_TYPE = 'Charge Needs Review';
/** Facts about a final operation (Stripe events in), not outcomes of it: contract.ts AftermathDetailType, RefundFactDetailType. */
const AFTERMATH_EVENT_TYPES = new Set(['Charge Refunded', 'Charge Disputed', 'Charge Dispute Closed', 'Refund Failed After Success']);
/** A succeeded refund operation whose Refund Stripe reports failed since (event-applier.ts): it gave nothing back. */
const REFUND_FAILED_AFTER_SUCCESS = 'Refund Failed After Success';
const REISSUE_EVENT_TYPE = 'Charge Reissued';
/** A refund operation's events (lambdas/events/contract.ts RefundDetailType). */
const REFUND_EVENT_TYPES = {
  succeeded: 'Refund Succeeded',
  duplicateRefunded: 'Charge Duplicate Refunded',
  failed: 'Refund Failed',
  review: 'Refund Needs Review',
  reissue: 'Refund Reissued',
} as const;
/**
 * A capture's and a cancel's events (lambdas/events/contract.ts AuthorizationDetailType); a manual
 * charge's final event is 'Charge Authorized'.
 */
const AUTHORIZATION_EVENT_TYPES = {
  authorized: 'Charge Authorized',
  capture: { succeeded: 'Charge Captured', failed: 'Charge Capture Failed', review: 'Charge Capture Needs Review', reissue: 'Charge Capture Reissued' },
  cancel_authorization: { succeeded: 'Authorization Canceled', failed: 'Authorization Cancel Failed', review: 'Authorization Cancel Needs Review', reissue: 'Authorization Cancel Reissued' },
  expired: 'Authorization Expired',
} as const;
/** What an authorized PaymentIntent may be once its charge succeeded: held, captured, released. */
const AUTHORIZED: readonly PaymentIntentStatus[] = ['requires_capture', 'succeeded', 'canceled'];
/** PaymentIntent statuses that are no charge and can never become one (review.ts movingObjects). */
const HARMLESS: readonly PaymentIntentStatus[] = ['canceled', 'requires_payment_method'];

/** The live PaymentIntents of key generations their operation has left: committed after it left them (late), or before (unsafe). */
/**
 * A PaymentIntent that holds an authorization, or held one until Stripe let it expire (canceled,
 * reason `automatic`): what a late authorization after a re-issue did to the customer's funds.
 */
export const heldAnAuthorization = (pi: PaymentIntentRecord): boolean =>
  pi.status === 'requires_capture' || (pi.status === 'canceled' && pi.cancellation_reason === 'automatic');

function retiredGenerations(
  paymentIntents: readonly PaymentIntentRecord[],
  ownerOf: (pi: PaymentIntentRecord) => OperationFacts | null,
  harmless: readonly PaymentIntentStatus[] = HARMLESS,
): { late: PaymentIntentRecord[]; unsafe: { pi: PaymentIntentRecord; op: OperationFacts; generation: number }[] } {
  const late: PaymentIntentRecord[] = [];
  const unsafe: { pi: PaymentIntentRecord; op: OperationFacts; generation: number }[] = [];
  for (const pi of paymentIntents) {
    const op = ownerOf(pi);
    const generation = Number(pi.metadata.key_generation ?? 'NaN');
    if (op === null || !Number.isInteger(generation) || generation >= op.key_generation || harmless.includes(pi.status)) continue;
    const leftAt = op.reissued_from?.[String(generation)];
    if (leftAt !== undefined && pi.createdAtMs > Date.parse(leftAt)) late.push(pi);
    else unsafe.push({ pi, op, generation });
  }
  return { late, unsafe };
}

// One pass per table; the scope ($1, NULL = everything) is applied in SQL so a 10,000-order soak and a
// 3-order model run cost what they should.
const OPERATIONS_SQL = `
  WITH scope AS (
    SELECT p.* FROM payment_operations p WHERE $1::text[] IS NULL OR p.order_id = ANY($1::text[])
  ),
  audit AS (
    SELECT e.operation_id,
           count(*) FILTER (WHERE e.action = 'requested')::int         AS requested,
           count(*) FILTER (WHERE e.action = 'attempt_started')::int   AS started,
           count(*) FILTER (WHERE e.action = 'outcome_recorded')::int  AS recorded,
           count(*) FILTER (WHERE e.action = 'outcome_discarded')::int AS discarded,
           count(*) FILTER (WHERE e.action = 'lease_released')::int    AS released,
           count(*) FILTER (WHERE e.action = 'operator_resolved')::int AS operator_resolved,
           count(*) FILTER (WHERE e.action = 'auto_reissued')::int     AS auto_reissues,
           count(*) FILTER (WHERE e.action = 'outcome_recorded' AND e.detail ? 'reviewReason')::int AS review_entries,
           count(*) FILTER (WHERE e.action = 'outcome_recorded' AND e.step = 'expiry')::int AS expiry_recorded,
           (array_agg(e.to_status ORDER BY e.id DESC)
              FILTER (WHERE e.action IN ('outcome_recorded', 'operator_resolved')))[1] AS last_to_status,
           coalesce((array_agg(e.occurred_at < $2::timestamptz ORDER BY e.id DESC)
              FILTER (WHERE e.action IN ('outcome_recorded', 'operator_resolved')))[1], false) AS final_before_cutoff,
           count(*) FILTER (WHERE e.action = 'outcome_recorded' AND e.detail ? 'reviewReason' AND e.occurred_at < $2::timestamptz)::int AS review_entries_before_cutoff,
           count(*) FILTER (WHERE e.action = 'auto_reissued' AND e.occurred_at < $2::timestamptz)::int AS auto_reissues_before_cutoff
      FROM payment_operation_events e JOIN scope s ON s.id = e.operation_id
     GROUP BY e.operation_id
  )
  SELECT s.id::text, s.kind, s.refund_id, s.refund_payment_intent, ${PAYMENT_INTENT_OF_REFUND('s')} AS refunded_payment_intent,
         s.failed_after_success_at IS NOT NULL AS failed_after_success, s.parent_operation_id::text, s.order_id, s.status, s.external_id, s.attempts, s.review_reason, s.last_error_class, s.amount::text, s.currency,
         s.stripe_account, s.transfer_destination, s.application_fee_amount::text,
         s.capture_method, s.cancellation_reason, coalesce(a.expiry_recorded, 0) AS expiry_recorded,
         coalesce(a.requested, 0) AS requested, coalesce(a.started, 0) AS started,
         coalesce(a.recorded, 0) AS recorded, coalesce(a.discarded, 0) AS discarded,
         coalesce(a.released, 0) AS released, coalesce(a.operator_resolved, 0) AS operator_resolved,
         coalesce(a.review_entries, 0) AS review_entries, a.last_to_status,
         coalesce(a.final_before_cutoff, false) AS final_before_cutoff,
         coalesce(a.review_entries_before_cutoff, 0) AS review_entries_before_cutoff,
         coalesce(a.auto_reissues_before_cutoff, 0) AS auto_reissues_before_cutoff,
         s.key_generation, coalesce(a.auto_reissues, 0) AS auto_reissues,
         -- A re-issue is written under the NEW generation: generation g was left at the re-issue to g + 1 —
         -- as far as anyone could know, at the List proof it rested on (detail.provenAt, the claim before
         -- that List): a PaymentIntent Stripe created after it, even before the re-issue was written, is one
         -- no proof could see. An operator's re-issue carries no proof: its moment is when it was written.
         (SELECT jsonb_object_agg(x.g, x.at) FROM (
            SELECT (r.key_generation - 1)::text AS g, min(coalesce((r.detail->>'provenAt')::timestamptz, r.occurred_at)) AS at FROM payment_operation_events r
             WHERE r.operation_id = s.id AND r.action IN ('auto_reissued', 'operator_reissued') GROUP BY r.key_generation) x) AS reissued_from,
         (SELECT array_agg(f.payment_intent_id ORDER BY f.id) FROM stripe_event_findings f
           WHERE f.operation_id = s.id AND f.kind = 'refunded_twice') AS refunded_twice,
         -- What was found and told to a person: an open contradiction finding, made by the watch after a
         -- re-issue (ReissueWatchFinding) or, when the late object's Stripe event came first, by the event
         -- applier (StripeEventContradiction). The watch makes no second finding of an object already found.
         (SELECT array_agg(f.payment_intent_id ORDER BY f.id) FROM stripe_event_findings f
           WHERE f.operation_id = s.id AND f.kind = 'contradiction' AND f.resolved_at IS NULL) AS watch_found
    FROM scope s LEFT JOIN audit a ON a.operation_id = s.id`;

const OUTBOX_SQL = `
  SELECT e.event_id::text, e.operation_id::text, e.event_type, e.payload
    FROM outcome_events e JOIN payment_operations p ON p.id = e.operation_id
   WHERE $1::text[] IS NULL OR p.order_id = ANY($1::text[])
   ORDER BY e.created_at, e.event_id`;

// The body only when refund requests are judged, and only of the rows that can be one (a refund's
// rejection is matched by its refund id, read from the body the producer sent).
const REJECTED_SQL = `
  SELECT order_id, CASE WHEN $2::boolean AND raw_body LIKE '%"refund"%' THEN raw_body END AS raw_body,
         CASE WHEN $2::boolean AND raw_body IS NULL THEN body_sha256 END AS removed_body_sha256
    FROM rejected_messages
   WHERE $1::text[] IS NULL OR order_id = ANY($1::text[])`;

/**
 * The three reads, from ONE snapshot when the Db can lend a connection (a pg Pool): read on separate
 * connections, a commit landing between them (a webhook settling an operation while a run is being
 * judged, e.g. after Ctrl-C) showed an operation still open next to its own 'Charge Succeeded' — an
 * outbox_mismatch that never existed (seen in test/local/shutdown.test.ts under load). REPEATABLE
 * READ takes its snapshot at the first statement and keeps it for the others.
 */
async function readFacts(db: Db, scope: string[] | null, rejectedBodies: boolean, outboxRemovedBefore: Date | null) {
  const read = (on: Db) =>
    [
      // No cutoff: -infinity, before which nothing was written.
      () => on.query<OperationFacts>(OPERATIONS_SQL, [scope, outboxRemovedBefore ?? '-infinity']),
      () => on.query<OutboxFacts>(OUTBOX_SQL, [scope]),
      () => on.query<{ order_id: string | null; raw_body: string | null; removed_body_sha256: string | null }>(REJECTED_SQL, [scope, rejectedBodies]),
    ] as const;
  const lender = db as Db & { connect?: () => Promise<Db & { release: (error?: Error) => void }> };
  if (typeof lender.connect !== 'function') {
    // A single connection (a Client) or a wrapper: as before, its statements are what it is given.
    const [operations, outbox, rejected] = read(db);
    return Promise.all([operations(), outbox(), rejected()]);
  }
  const client = await lender.connect();
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    const [operations, outbox, rejected] = read(client);
    const facts = [await operations(), await outbox(), await rejected()] as const;
    await client.query('COMMIT');
    client.release();
    return facts;
  } catch (error) {
    client.release(error as Error); // a connection in an unknown state is not given back to the pool
    throw error;
  }
}

export async function checkInvariants(input: CheckInvariantsInput): Promise<InvariantReport> {
  const quiescent = input.requireQuiescent ?? false;
  const scope = input.orderIds ? [...input.orderIds] : null;
  const inScope = scope ? new Set(scope) : null;
  const [operationRows, outboxRows, rejectedRows] = await readFacts(input.db, scope, input.sentRefunds !== undefined, input.outboxRemovedBefore ?? null);
  const operations = operationRows.rows;
  const charges = operations.filter((op) => op.kind === 'charge');
  const refundOps = operations.filter((op) => op.kind === 'refund');
  const stripeRefunds = input.refunds ?? null;
  const paymentIntents = input.paymentIntents.filter((pi) => inScope === null || inScope.has(pi.metadata.order_id ?? ''));

  const violations: Violation[] = [];
  const warnings: Warning[] = [];
  const violate = (kind: ViolationKind, detail: string, op?: { id: string; order_id: string } | null, orderId?: string) =>
    violations.push({
      kind,
      ...(op ? { operationId: op.id } : {}),
      ...(op || orderId ? { orderId: op?.order_id ?? orderId } : {}),
      detail,
    });

  const byId = new Map(charges.map((op) => [op.id, op]));
  /** A manual charge's capture or cancel (at most one: the unique index of migrations/019), by the charge. */
  const settlementsOf = new Map<string, OperationFacts[]>();
  for (const op of operations) {
    if ((op.kind === 'capture' || op.kind === 'cancel_authorization') && op.parent_operation_id !== null) {
      settlementsOf.set(op.parent_operation_id, [...(settlementsOf.get(op.parent_operation_id) ?? []), op]);
    }
  }
  const byOrder = new Map(charges.map((op) => [op.order_id, op]));
  const piById = new Map(paymentIntents.map((pi) => [pi.id, pi]));
  /** The operation a PaymentIntent belongs to: by the operation id we put in its metadata, else by order. */
  const ownerOf = (pi: PaymentIntentRecord) =>
    byId.get(pi.metadata.operation_id ?? '') ?? byOrder.get(pi.metadata.order_id ?? '') ?? null;

  // ── Nothing charged twice ────────────────────────────────────────────────────────────────────
  const succeededByOrder = new Map<string, PaymentIntentRecord[]>();
  for (const pi of paymentIntents) {
    if (pi.status !== 'succeeded') continue;
    const order = pi.metadata.order_id ?? `(no order_id: ${pi.id})`;
    succeededByOrder.set(order, [...(succeededByOrder.get(order) ?? []), pi]);
  }
  const net = stripeRefunds ? netChargedByOrder(paymentIntents, stripeRefunds) : null;
  const expectedNet = new Map<string, number>();
  const refundsOfOrder = new Map<string, OperationFacts[]>();
  for (const r of refundOps) refundsOfOrder.set(r.order_id, [...(refundsOfOrder.get(r.order_id) ?? []), r]);
  // A PaymentIntent of a generation its operation has left. One Stripe created only AFTER the re-issue
  // (created later than the List proof it rested on, or than its write where it names none) is a late
  // commit under the retired key, which no proof could see: its money is judged like any extra charge
  // (double_charge / net_amount below: the watch after the re-issue must have handed it to the remedy,
  // or found it and told a person). One that existed when the generation was left is unsafe_reissue.
  const retired = retiredGenerations(paymentIntents, ownerOf);
  const lateCommitIds = new Set(retired.late.map((pi) => pi.id));
  for (const [orderId, pis] of succeededByOrder) {
    if (pis.length < 2) continue;
    // Given refunds: a second PaymentIntent refunded in full (the duplicate remedy) is no double charge.
    if (net && (net.get(orderId)?.unrefundedPaymentIntents ?? 0) < 2) continue;
    const op = byOrder.get(orderId) ?? null;
    // The remedy's refund of every extra one waits for a human: visible in the review queue with its
    // reason, as a charge in review is (charge_awaiting_review) — Stripe failed its Refund, or the
    // evidence could not settle it in time (List proved no Refund after the key window, …). A remedy
    // in review because Stripe refused its idempotency key is a bug in key use, not a case for a
    // person: the double charge stays a violation then (as it does with no remedy at all).
    const stripeFailed = (r: OperationFacts) => {
      const refund = r.external_id === null ? undefined : stripeRefunds?.find((x) => x.id === r.external_id);
      return refund !== undefined && (refund.status === 'failed' || refund.status === 'canceled');
    };
    const waitsForHuman = (r: OperationFacts) => stripeFailed(r) || r.last_error_class !== 'StripeIdempotencyError';
    const remediesInReview = (refundsOfOrder.get(orderId) ?? []).filter((r) => r.refund_payment_intent !== null && r.review_reason !== null && waitsForHuman(r));
    const extras = pis.filter((pi) => pi.id !== op?.external_id);
    if (op && extras.length > 0 && extras.every((pi) => remediesInReview.some((r) => r.refund_payment_intent === pi.id))) {
      warnings.push({ kind: 'duplicate_awaiting_review', operationId: op.id, orderId, detail: `${extras.map((pi) => pi.id).join(', ')} still charged; the remedy waits for a human: ${remediesInReview[0]!.review_reason}` });
      continue;
    }
    // The operation is in review and the watch after its re-issue told the person every one of them
    // (late commits after the proof of absence its review rests on): a person decides, knowing.
    if (op && op.review_reason !== null && (op.status === 'pending' || op.status === 'unknown') && pis.every((pi) => (op.watch_found ?? []).includes(pi.id))) {
      warnings.push({ kind: 'duplicate_awaiting_review', operationId: op.id, orderId, detail: `${pis.map((pi) => pi.id).join(', ')} charged while the operation is in review; the watch after the re-issue found them (open findings): ${op.review_reason}` });
      continue;
    }
    // The operation failed, and every succeeded PaymentIntent is a late commit after a re-issue that
    // the watch found: no machine refunds a charge it announced failed, and a person is told of each
    // (late_charge_found below, one per PaymentIntent) — as for one such late commit, so for two.
    if (op && op.status === 'failed' && pis.every((pi) => lateCommitIds.has(pi.id) && (op.watch_found ?? []).includes(pi.id))) continue;
    violate('double_charge', `${pis.length} succeeded PaymentIntents: ${pis.map((pi) => `${pi.id} (key ${pi.idempotencyKey ?? 'none'})`).join(', ')}`, op, orderId);
  }

  // ── No customer held twice untold ──────────────────────────────────────────────────────────────
  // A late commit after a re-issue that holds the amount (requires_capture), or held it until Stripe
  // let the authorization expire (canceled, reason automatic), while its operation is final with
  // another PaymentIntent (or failed): nothing in the pipeline captures or releases it, so a person
  // must have been told — an open finding from the watch after the re-issue or from the
  // PaymentIntent's Stripe event. Judged once quiescent: the watch looks an hour after the re-issue.
  const lateHolds = retiredGenerations(paymentIntents.filter(heldAnAuthorization), ownerOf, ['requires_payment_method']).late;
  if (quiescent) {
    for (const pi of lateHolds) {
      const op = ownerOf(pi);
      if (op === null || op.kind !== 'charge' || op.external_id === pi.id) continue;
      if (op.status !== 'succeeded' && op.status !== 'failed') continue;
      if ((op.watch_found ?? []).includes(pi.id)) {
        warnings.push({ kind: 'late_hold_found', operationId: op.id, orderId: op.order_id, detail: `PaymentIntent ${pi.id} committed after the re-issue and ${pi.status === 'canceled' ? 'held' : 'holds'} ${pi.amount}; the operation is ${op.status} with ${op.external_id ?? 'none'}; found (open contradiction finding)` });
      } else {
        violate('held_twice', `PaymentIntent ${pi.id} of key generation ${pi.metadata.key_generation} ${pi.status === 'canceled' ? 'held' : 'holds'} ${pi.amount} (${pi.status === 'canceled' ? 'until Stripe let it expire' : 'requires_capture'}) while the operation is ${op.status} with ${op.external_id ?? 'none'}, and no open finding names it`, op);
      }
    }
  }

  // ── No unsafe re-issue ───────────────────────────────────────────────────────────────────────
  // A PaymentIntent of a generation the operation left, that existed when it was left: the re-issue
  // rested on a proof of absence that was wrong (the PaymentIntents of retiredGenerations, judged
  // above the double charges so that those can tell a late commit from an extra charge).
  for (const { pi, op, generation } of retired.unsafe) {
    violate('unsafe_reissue', `re-issued to key generation ${op.key_generation} while PaymentIntent ${pi.id} of generation ${generation} is ${pi.status}`, op);
  }

  // ── The net amount, and refunds told truly ──────────────────────────────────────────────────
  // Refund operations that stay `succeeded` but whose Refund failed at Stripe since, as recorded (the
  // operation's mark, migrations/009): they refunded nothing, and Stripe's record (only succeeded
  // refunds count, netChargedByOrder) agrees only if the ledger discounts them too. A ledger-only
  // rule, judged with or without Stripe's refunds: the mark follows its fact event (the fact's insert
  // trigger), so one without the other means someone wrote around the trigger — a violation.
  const failedAfterSuccess = new Set(refundOps.filter((r) => r.failed_after_success).map((r) => r.id));
  const announced = new Set(outboxRows.rows.filter((e) => e.event_type === REFUND_FAILED_AFTER_SUCCESS).map((e) => e.operation_id));
  for (const r of refundOps) {
    if (failedAfterSuccess.has(r.id) !== announced.has(r.id)) {
      violate('refund_mismatch', failedAfterSuccess.has(r.id) ? 'marked failed after success without its Refund Failed After Success event' : 'Refund Failed After Success event without the operation\'s mark', r);
    }
  }

  if (net && stripeRefunds) {
    for (const op of charges) {
      const ours = refundsOfOrder.get(op.order_id) ?? [];
      const truth = net.get(op.order_id);
      if (truth && truth.refunded > truth.charged) violate('over_refund', `refunded ${truth.refunded} of ${truth.charged} charged`, op);
      // Judged once nothing of the order is in flight: a final charge, final refunds, none pending at Stripe.
      // A manual charge: and its capture or cancel final (one in review waits for a person).
      const settlements = settlementsOf.get(op.id) ?? [];
      const isFinal = (r: OperationFacts) => r.status === 'succeeded' || r.status === 'failed';
      const settled = isFinal(op) && ours.every(isFinal) && settlements.every(isFinal) && (truth?.refundPending ?? 0) === 0;
      if (!settled) continue;
      const asked = ours.filter((r) => r.status === 'succeeded' && r.refund_payment_intent === null && !failedAfterSuccess.has(r.id)).reduce((sum, r) => sum + Number(r.amount), 0);
      // What the order was to pay: its amount, or for an authorization what its capture took (nothing when released or still held).
      const taken = op.capture_method === 'manual' ? settlements.filter((c) => c.kind === 'capture' && c.status === 'succeeded').reduce((sum, c) => sum + Number(c.amount), 0) : Number(op.amount);
      const expected = op.status === 'succeeded' ? taken - asked : 0;
      expectedNet.set(op.order_id, expected);
      const kept = truth?.net ?? 0;
      // A second Refund of one refund operation that the watch after a re-issue FOUND (a finding and
      // the ReissueWatchFinding alarm: a person decides): money no machine can take back, told, not lost.
      const foundTwice = stripeRefunds
        .filter((x) => x.status === 'succeeded' && ours.some((r) => r.refunded_twice?.includes(x.id)))
        .reduce((sum, x) => sum + x.amount, 0);
      // A late charge of a failed operation that the watch found (late_charge_found below): told, not lost.
      const foundLate = paymentIntents
        .filter((pi) => pi.status === 'succeeded' && lateCommitIds.has(pi.id) && op.status === 'failed' && (op.watch_found ?? []).includes(pi.id))
        .reduce((sum, pi) => sum + pi.amount, 0);
      if (kept !== expected && foundLate > 0 && kept - foundLate === expected) {
        // reported as late_charge_found where the PaymentIntent is judged
      } else if (kept !== expected && foundTwice > 0 && kept + foundTwice === expected) {
        warnings.push({ kind: 'refunded_twice_found', operationId: op.id, orderId: op.order_id, detail: `refunded ${foundTwice} more than asked by a late second Refund; the watch after the re-issue found it (open finding)` });
      } else if (kept !== expected) {
        violate('net_amount', `Stripe kept ${kept} (${truth?.succeededPaymentIntents ?? 0} succeeded PaymentIntents, ${truth?.refunded ?? 0} refunded); expected ${expected} (${op.status}, ${asked} refunded by the pipeline)`, op);
      }
    }
    const refundById = new Map(stripeRefunds.map((r) => [r.id, r]));
    for (const r of refundOps) {
      if (r.status === 'succeeded') {
        const refund = r.external_id === null ? undefined : refundById.get(r.external_id);
        // Failed after it succeeded, and recorded so: told truly (the fact says what Stripe says).
        if (refund?.status === 'failed' && failedAfterSuccess.has(r.id)) continue;
        if (refund === undefined || refund.status !== 'succeeded') {
          violate('succeeded_without_refund', `external_id ${r.external_id ?? 'null'} is ${refund ? `a ${refund.status} Refund` : 'no Refund at Stripe'}`, r);
          continue;
        }
        const target = r.refunded_payment_intent;
        const wrong: string[] = [];
        if (String(refund.amount) !== r.amount) wrong.push(`amount ${refund.amount} ≠ ${r.amount}`);
        if (refund.payment_intent !== target) wrong.push(`payment_intent ${refund.payment_intent} ≠ ${target}`);
        if (refund.metadata.operation_id !== undefined && refund.metadata.operation_id !== r.id) wrong.push(`operation_id ${refund.metadata.operation_id}`);
        if (failedAfterSuccess.has(r.id)) wrong.push('recorded as failed after success, but Stripe holds it succeeded');
        if (wrong.length > 0) violate('refund_mismatch', `Refund ${refund.id}: ${wrong.join(', ')}`, r);
      } else if (r.status === 'failed') {
        const made = stripeRefunds.find((x) => x.metadata.operation_id === r.id && x.status === 'succeeded');
        if (made) violate('wrongly_failed', `refund operation is failed but Refund ${made.id} succeeded`, r);
      }
    }
    // Every Refund that returns money is known by the refund operation that made it (as every
    // succeeded PaymentIntent is by its charge, below). A failed or canceled one returned nothing.
    const named = new Set(refundOps.flatMap((r) => [...(r.external_id === null ? [] : [r.external_id]), ...(r.refunded_twice ?? [])]));
    const refundOpById = new Map(refundOps.map((r) => [r.id, r]));
    for (const refund of stripeRefunds) {
      if (refund.status === 'failed' || refund.status === 'canceled' || named.has(refund.id)) continue;
      const orderId = refund.paymentIntentOrderId ?? undefined;
      if (inScope !== null && !inScope.has(orderId ?? '')) continue;
      const op = refundOpById.get(refund.metadata.operation_id ?? '') ?? null;
      if (op?.status === 'failed' && refund.status === 'succeeded') continue; // wrongly_failed, above
      const open = op !== null && op.status !== 'succeeded' && op.status !== 'failed';
      if (open && !quiescent) continue; // its answer may still be on its way
      if (open && op.review_reason !== null) {
        warnings.push({ kind: 'refund_awaiting_review', operationId: op.id, orderId: op.order_id, detail: `${refund.status} Refund ${refund.id} exists; the refund operation waits for a human: ${op.review_reason}` });
        continue;
      }
      violate(
        'unrecorded_refund',
        `${refund.status} Refund ${refund.id} of ${refund.amount} on ${refund.payment_intent} (operation_id ${refund.metadata.operation_id ?? 'none'}) is ${op ? `not named by its operation, which is ${op.status}` : 'known by no refund operation'}`,
        op,
        orderId,
      );
    }
  }

  // ── Nothing lost ─────────────────────────────────────────────────────────────────────────────
  const rejectedOrders = new Set(rejectedRows.rows.flatMap((r) => (r.order_id === null ? [] : [r.order_id])));
  const dlq = new Set(input.dlqOrderIds ?? []);
  for (const orderId of new Set(input.sentOrderIds ?? [])) {
    if (!byOrder.has(orderId) && !rejectedOrders.has(orderId) && !dlq.has(orderId)) {
      violate('lost_order', 'sent, but no operation, no rejected_messages row and not in the DLQ', null, orderId);
    }
  }
  // …and every sent refund request: its refund operation (a repeat finds the first one, a conflict
  // the one it conflicts with), or its own rejection, or the DLQ. A refund the charge handler
  // acknowledged without writing either is gone (a request statement that failed, reported as done).
  const refundKey = (orderId: string, refundId: string) => JSON.stringify([orderId, refundId]);
  const sentRefunds = new Map((input.sentRefunds ?? []).map((r) => [refundKey(r.orderId, r.refundId), r]));
  if (sentRefunds.size > 0) {
    const made = new Set(refundOps.flatMap((r) => (r.refund_id === null ? [] : [refundKey(r.order_id, r.refund_id)])));
    const refused = new Set<string>();
    // A rejection whose body retention removed: matched by the SHA-256 of the body as sent, which stays.
    const bySha = new Map([...sentRefunds].flatMap(([key, r]) => (r.bodySha256 ? [[`${r.orderId}:${r.bodySha256}`, key] as const] : [])));
    for (const { order_id, removed_body_sha256 } of rejectedRows.rows) {
      const key = order_id !== null && removed_body_sha256 !== null ? bySha.get(`${order_id}:${removed_body_sha256}`) : undefined;
      if (key !== undefined) refused.add(key);
    }
    for (const { order_id, raw_body } of rejectedRows.rows) {
      if (order_id === null || raw_body === null) continue;
      try {
        const body = JSON.parse(raw_body) as { type?: unknown; orderId?: unknown; refundId?: unknown };
        if (body.type === 'refund' && body.orderId === order_id && typeof body.refundId === 'string') refused.add(refundKey(order_id, body.refundId));
      } catch {
        // Not JSON: no refund request's row.
      }
    }
    for (const [key, { orderId, refundId }] of sentRefunds) {
      if (!made.has(key) && !refused.has(key) && !dlq.has(orderId)) {
        violate('lost_refund', `refund ${refundId} sent, but no refund operation, no rejected_messages row and not in the DLQ`, null, orderId);
      }
    }
  }

  // ── Every succeeded PaymentIntent is known ───────────────────────────────────────────────────
  for (const pis of succeededByOrder.values()) {
    for (const pi of pis) {
      const op = ownerOf(pi);
      if (op === null) {
        violate('unrecorded_charge', `succeeded PaymentIntent ${pi.id} (operation_id ${pi.metadata.operation_id ?? 'none'}) has no operation`, null, pi.metadata.order_id);
      } else if (op.status === 'succeeded') {
        // Known iff the operation names it; a second one is already a double charge above.
        if (op.external_id !== pi.id && (succeededByOrder.get(op.order_id)?.length ?? 0) < 2) {
          violate('unrecorded_charge', `succeeded PaymentIntent ${pi.id} is not the one the operation names (${op.external_id})`, op);
        }
      } else if (op.status === 'failed' && lateCommitIds.has(pi.id) && (op.watch_found ?? []).includes(pi.id)) {
        // A retired generation's create Stripe committed after the re-issue, and the re-issued one failed:
        // the order was announced failed and is charged. No machine may refund a charge it announced
        // failed; the watch (or the late object's Stripe event) found it and a person is told (an open
        // finding, its alarm): reported, not lost.
        warnings.push({ kind: 'late_charge_found', operationId: op.id, orderId: op.order_id, detail: `PaymentIntent ${pi.id} committed after the re-issue; the operation failed; found (open contradiction finding)` });
      } else if (op.status === 'failed') {
        violate('wrongly_failed', `operation is failed (${op.external_id ?? 'no external id'}) but PaymentIntent ${pi.id} succeeded`, op);
      } else if (quiescent) {
        // Open at the end. In review: a person will see it (reported); otherwise `unsettled` below says it.
        if (op.review_reason !== null) {
          warnings.push({
            kind: 'charge_awaiting_review',
            operationId: op.id,
            orderId: op.order_id,
            detail: `succeeded PaymentIntent ${pi.id} exists; the operation waits for a human: ${op.review_reason}`,
          });
        } else {
          violate('unrecorded_charge', `succeeded PaymentIntent ${pi.id}, but the operation is still ${op.status} after quiescence`, op);
        }
      }
    }
  }

  // ── Every object on the right account ───────────────────────────────────────────────────────
  // Stripe keeps a connected account's objects apart from the platform's (docs.stripe.com/connect/authentication):
  // a direct charge's PaymentIntent must be on its account, any other on the platform; a Refund is on
  // its PaymentIntent's account, which must be its refund operation's. Every PaymentIntent of the
  // operation carries what was asked of a destination charge. A record without `stripeAccount` (one
  // not made through the API) is the platform's.
  const accountName = (account: string | null) => account ?? 'the platform';
  for (const pi of paymentIntents) {
    const op = ownerOf(pi);
    if (op === null) continue;
    const on = pi.stripeAccount ?? null;
    const wrong: string[] = [];
    if (on !== op.stripe_account) wrong.push(`is on ${accountName(on)}, the operation's account is ${accountName(op.stripe_account)}`);
    const destination = pi.transfer_data?.destination ?? null;
    if (destination !== op.transfer_destination) wrong.push(`transfer destination ${accountName(destination)} ≠ ${accountName(op.transfer_destination)} asked`);
    const fee = pi.application_fee_amount ?? null;
    const askedFee = op.application_fee_amount === null ? null : Number(op.application_fee_amount);
    if (fee !== askedFee) wrong.push(`application fee ${fee ?? 'none'} ≠ ${askedFee ?? 'none'} asked`);
    if (wrong.length > 0) violate('wrong_account', `PaymentIntent ${pi.id} ${wrong.join('; ')}`, op);
  }
  if (stripeRefunds) {
    const refundOpById = new Map(refundOps.map((r) => [r.id, r]));
    for (const refund of stripeRefunds) {
      const op = refundOpById.get(refund.metadata.operation_id ?? '');
      const pi = piById.get(refund.payment_intent);
      if (op === undefined || pi === undefined) continue; // not ours (unrecorded_refund says so), or a PaymentIntent out of scope
      const on = pi.stripeAccount ?? null;
      if (on !== op.stripe_account) violate('wrong_account', `Refund ${refund.id} is on ${accountName(on)} (its PaymentIntent ${pi.id}'s), the refund operation's account is ${accountName(op.stripe_account)}`, op);
    }
  }

  // ── Authorizations told truly ───────────────────────────────────────────────────────────────
  // A manual charge's PaymentIntent is held (requires_capture), captured (succeeded, amount_received
  // at most the amount authorized: the rest is released) or released (canceled: by our cancel, or by
  // Stripe after the validity, which the expiry check records as the authorization's cancel). Stripe
  // acts on an authorization once (docs.stripe.com/payments/place-a-hold-on-a-payment-method), and so
  // must the record: what the capture or cancel operation says is what Stripe holds.
  for (const op of charges) {
    if (op.capture_method !== 'manual') continue;
    const settlements = settlementsOf.get(op.id) ?? [];
    const authorized = Number(op.amount);
    for (const c of settlements) {
      if (c.kind === 'capture' && Number(c.amount) > authorized) violate('captured_over_authorized', `capture operation ${c.id} of ${c.amount}, the charge authorized ${authorized}`, c);
    }
    const pi = op.external_id === null ? undefined : piById.get(op.external_id);
    if (pi === undefined || op.status !== 'succeeded') continue; // no authorization to judge (succeeded_without_charge / wrongly_failed say what is wrong)
    const received = pi.amount_received ?? 0;
    if (received > Math.min(pi.amount, authorized)) violate('captured_over_authorized', `PaymentIntent ${pi.id} received ${received}, the charge authorized ${authorized}`, op);
    const captured = settlements.find((c) => c.kind === 'capture' && c.status === 'succeeded');
    const released = settlements.find((c) => c.kind === 'cancel_authorization' && c.status === 'succeeded');
    const taken = pi.status === 'succeeded' && received > 0;
    if (released && taken) {
      violate('captured_after_release', `PaymentIntent ${pi.id} is captured (${received}) though the authorization is recorded ${released.cancellation_reason === 'expired' ? 'expired' : 'canceled'} (operation ${released.id})`, released);
    } else if (released && pi.status !== 'canceled') {
      violate('capture_mismatch', `the authorization is recorded ${released.cancellation_reason === 'expired' ? 'expired' : 'canceled'} (operation ${released.id}), PaymentIntent ${pi.id} is ${pi.status}`, released);
    } else if (captured && !taken) {
      violate('capture_mismatch', `capture operation ${captured.id} recorded ${captured.amount} captured, PaymentIntent ${pi.id} is ${pi.status}${pi.cancellation_reason ? ` (${pi.cancellation_reason})` : ''}`, captured);
    } else if (captured && received !== Number(captured.amount)) {
      violate('capture_mismatch', `capture operation ${captured.id} recorded ${captured.amount} captured, Stripe received ${received} on ${pi.id}`, captured);
    } else if (!captured && !released && taken && quiescent) {
      // A capture still open may have been made at Stripe before its answer is recorded: judged once quiescent.
      const open = settlements.find((c) => c.status !== 'succeeded' && c.status !== 'failed' && c.review_reason !== null);
      if (open === undefined) violate('capture_mismatch', `PaymentIntent ${pi.id} is captured (${received}) and no succeeded capture operation records it`, op);
    }
  }

  // ── Per operation: outcome vs ground truth, settledness, audit, outbox ───────────────────────
  const outboxByOperation = new Map<string, OutboxFacts[]>();
  for (const event of outboxRows.rows) outboxByOperation.set(event.operation_id, [...(outboxByOperation.get(event.operation_id) ?? []), event]);
  const byStatus: Record<OperationStatus, number> = { pending: 0, unknown: 0, succeeded: 0, failed: 0 };
  let inReview = 0;
  let open = 0;

  for (const op of operations) {
    byStatus[op.status] += 1;
    const final = op.status === 'succeeded' || op.status === 'failed';
    if (!final) {
      if (op.review_reason !== null) inReview += 1;
      else open += 1;
    }

    if (op.kind === 'charge' && op.status === 'succeeded') {
      const pi = op.external_id === null ? undefined : piById.get(op.external_id);
      if (pi === undefined) violate('succeeded_without_charge', `external_id ${op.external_id ?? 'null'} is no PaymentIntent at Stripe`, op);
      else if (op.capture_method === 'manual' ? !AUTHORIZED.includes(pi.status) : pi.status !== 'succeeded') {
        violate('succeeded_without_charge', `PaymentIntent ${pi.id} is ${pi.status}, not ${op.capture_method === 'manual' ? AUTHORIZED.join(' / ') : 'succeeded'}`, op);
      }
      else {
        const mismatch: string[] = [];
        if (pi.metadata.operation_id !== undefined && pi.metadata.operation_id !== op.id) mismatch.push(`operation_id ${pi.metadata.operation_id}`);
        if (String(pi.amount) !== op.amount) mismatch.push(`amount ${pi.amount} ≠ ${op.amount}`);
        if (pi.currency !== op.currency) mismatch.push(`currency ${pi.currency} ≠ ${op.currency}`);
        if (mismatch.length > 0) violate('charge_mismatch', `PaymentIntent ${pi.id}: ${mismatch.join(', ')}`, op);
      }
    }

    // A refund waits (durably) until its charge is final: behind a charge in review it waits for that
    // human too, and is shown with it (`operations show <order>`); reported, not left hanging.
    // So does a capture or a cancel of an authorization: behind an authorization in review (its
    // charge's answer unknown) it can be neither sent nor refused until the human settles the charge.
    const parent = op.kind === 'refund' || op.kind === 'capture' || op.kind === 'cancel_authorization' ? byId.get(op.parent_operation_id ?? '') : undefined;
    const waitsForChargeReview = parent !== undefined && (parent.status === 'pending' || parent.status === 'unknown') && parent.review_reason !== null;
    if (quiescent && !final && op.review_reason === null && waitsForChargeReview) {
      warnings.push(
        op.kind === 'refund'
          ? { kind: 'refund_awaiting_review', operationId: op.id, orderId: op.order_id, detail: `the refund waits for its charge, which is in review: ${parent.review_reason}` }
          : { kind: 'settlement_awaiting_review', operationId: op.id, orderId: op.order_id, detail: `the ${op.kind} waits for its authorization, which is in review: ${parent.review_reason}` },
      );
    } else if (quiescent && !final && op.review_reason === null) {
      violate('unsettled', `still ${op.status} (${op.attempts} attempts) and not in review after quiescence`, op);
    }
    if (!final && op.review_reason !== null && op.review_reason.trim() === '') {
      violate('unsettled', 'in review with an empty reason', op);
    }

    // Audit: one `requested`, one `outcome_recorded` per counted attempt, every claim accounted for
    // at most once, and the last recorded transition is the state the row is in.
    const audit: string[] = [];
    if (op.requested !== 1) audit.push(`${op.requested} 'requested' events (want 1)`);
    // The expiry check records what it read (authorization-expiry.ts): an outcome, no attempt, no claim.
    const sent = op.recorded - op.expiry_recorded;
    if (sent !== op.attempts) audit.push(`attempts = ${op.attempts} but ${sent} 'outcome_recorded' events${op.expiry_recorded ? ` (besides ${op.expiry_recorded} of the expiry check)` : ''}`);
    if (sent + op.discarded + op.released > op.started) {
      audit.push(`${sent + op.discarded + op.released} claim endings for ${op.started} 'attempt_started' events`);
    }
    if (final && op.last_to_status !== op.status) audit.push(`row is ${op.status} but the last recorded transition is to ${op.last_to_status ?? 'nothing'}`);
    if (audit.length > 0) violate('audit_mismatch', audit.join('; '), op);

    // Outbox: exactly one final event for a final outcome (none for an open one), one review event per
    // entry into review, and every payload telling the truth about its operation.
    const events = outboxByOperation.get(op.id) ?? [];
    const refund = op.kind === 'refund';
    const settles = op.kind === 'capture' || op.kind === 'cancel_authorization' ? AUTHORIZATION_EVENT_TYPES[op.kind] : null;
    const reviewType = refund ? REFUND_EVENT_TYPES.review : (settles?.review ?? REVIEW_EVENT_TYPE);
    const reissueType = refund ? REFUND_EVENT_TYPES.reissue : (settles?.reissue ?? REISSUE_EVENT_TYPE);
    // Refunds and disputes (Stripe events in) follow a final outcome; they are not one. Nor is a re-issue.
    const allFinals = events.filter((e) => e.event_type !== reviewType && e.event_type !== reissueType && !AFTERMATH_EVENT_TYPES.has(e.event_type));
    // An authorization announced as a charge is a finding of its own (below), not also this one's.
    const manual = op.kind === 'charge' && op.capture_method === 'manual';
    const announcedAsCharge = manual ? allFinals.filter((e) => e.event_type === FINAL_EVENT_TYPE.succeeded) : [];
    for (const e of announcedAsCharge) violate('authorization_announced_as_charge', `'${e.event_type}' ${e.event_id} announces a charge that only authorized (want '${AUTHORIZATION_EVENT_TYPES.authorized}', then '${AUTHORIZATION_EVENT_TYPES.capture.succeeded}')`, op);
    const finals = allFinals.filter((e) => !announcedAsCharge.includes(e));
    const reissues = events.filter((e) => e.event_type === reissueType);
    const reviews = events.filter((e) => e.event_type === reviewType);
    const outbox: string[] = [];
    const wantFinal = settles
      ? op.status === 'succeeded'
        ? op.cancellation_reason === 'expired'
          ? AUTHORIZATION_EVENT_TYPES.expired
          : settles.succeeded
        : op.status === 'failed'
          ? settles.failed
          : undefined
      : manual && op.status === 'succeeded'
        ? AUTHORIZATION_EVENT_TYPES.authorized
        : !refund
      ? FINAL_EVENT_TYPE[op.status]
      : op.status === 'succeeded'
        ? op.refund_payment_intent
          ? REFUND_EVENT_TYPES.duplicateRefunded
          : REFUND_EVENT_TYPES.succeeded
        : op.status === 'failed'
          ? REFUND_EVENT_TYPES.failed
          : undefined;
    if (wantFinal === undefined && finals.length > 0) outbox.push(`open operation has ${finals.map((e) => `'${e.event_type}'`).join(', ')}`);
    // Retention may have removed an event written before its cutoff (outboxRemovedBefore), no other.
    const finalRemoved = wantFinal !== undefined && op.final_before_cutoff && finals.length === 0;
    if (wantFinal !== undefined && !finalRemoved && announcedAsCharge.length === 0 && (finals.length !== 1 || finals[0]!.event_type !== wantFinal)) {
      outbox.push(`want one '${wantFinal}', found [${finals.map((e) => e.event_type).join(', ')}]`);
    }
    for (const e of finals) {
      const p = e.payload;
      const wrong: string[] = [];
      if (p.operationId !== op.id) wrong.push('operationId');
      if (p.orderId !== op.order_id) wrong.push('orderId');
      if (p.status !== op.status) wrong.push(`status ${String(p.status)}`);
      if (String(p.amount) !== op.amount) wrong.push('amount');
      if (p.currency !== op.currency) wrong.push('currency');
      if ((p.externalId ?? null) !== op.external_id) wrong.push(`externalId ${String(p.externalId)} ≠ ${op.external_id}`);
      if (p.eventId !== e.event_id) wrong.push('eventId');
      if (wrong.length > 0) outbox.push(`'${e.event_type}' ${e.event_id} disagrees on ${wrong.join(', ')}`);
    }
    if (reissues.length > op.auto_reissues || reissues.length < op.auto_reissues - op.auto_reissues_before_cutoff) {
      outbox.push(`${op.auto_reissues} automatic re-issues but ${reissues.length} '${reissueType}' events`);
    }
    for (const e of reissues) {
      if (e.payload.status !== 'reissued' || e.payload.operationId !== op.id || e.payload.externalId !== null) {
        outbox.push(`'${reissueType}' ${e.event_id} has status ${String(e.payload.status)} / externalId ${String(e.payload.externalId)}`);
      }
    }
    if (reviews.length > op.review_entries || reviews.length < op.review_entries - op.review_entries_before_cutoff) {
      outbox.push(`${op.review_entries} entries into review but ${reviews.length} '${reviewType}' events`);
    }
    for (const e of reviews) {
      if (e.payload.status !== 'needs_review' || e.payload.operationId !== op.id || typeof e.payload.reason !== 'string' || e.payload.reason === '') {
        outbox.push(`'${reviewType}' ${e.event_id} has status ${String(e.payload.status)} / reason ${String(e.payload.reason)}`);
      }
    }
    // Sequence: 1, 2, … n in the order the events were written, so that the highest is the latest.
    // (Refunds and disputes are facts about a final charge, not states of it: they carry no sequence.)
    const stateEvents = events.filter((e) => !AFTERMATH_EVENT_TYPES.has(e.event_type));
    const sequences = stateEvents.map((e) => e.payload.sequence);
    const removable = (op.final_before_cutoff ? 1 : 0) + op.review_entries_before_cutoff + op.auto_reissues_before_cutoff;
    if (removable === 0) {
      if (sequences.some((n, i) => n !== i + 1)) outbox.push(`sequences [${sequences.map(String).join(', ')}] are not 1…${stateEvents.length} in write order`);
    } else {
      // Some removed: the ones left still rise in write order, within 1…(all the operation's state events).
      const all = (wantFinal === undefined ? 0 : 1) + op.review_entries + op.auto_reissues;
      if (sequences.some((n, i) => typeof n !== 'number' || n < 1 || n > all || (i > 0 && n <= (sequences[i - 1] as number)))) {
        outbox.push(`sequences [${sequences.map(String).join(', ')}] do not rise within 1…${all} in write order (retention removed events written before its cutoff)`);
      }
    }
    if (outbox.length > 0) violate('outbox_mismatch', outbox.join('; '), op);
  }

  const piByStatus: Partial<Record<PaymentIntentStatus, number>> = {};
  for (const pi of paymentIntents) piByStatus[pi.status] = (piByStatus[pi.status] ?? 0) + 1;
  const violationsByKind: Partial<Record<ViolationKind, number>> = {};
  for (const v of violations) violationsByKind[v.kind] = (violationsByKind[v.kind] ?? 0) + 1;

  return {
    ok: violations.length === 0,
    quiescent,
    operations: operations.length,
    byStatus,
    inReview,
    open,
    paymentIntents: { total: paymentIntents.length, byStatus: piByStatus },
    rejectedMessages: rejectedRows.rows.length,
    sentOrders: input.sentOrderIds ? new Set(input.sentOrderIds).size : null,
    sentRefunds: input.sentRefunds ? sentRefunds.size : null,
    dlqOrders: dlq.size,
    outboxEvents: outboxRows.rows.length,
    violations,
    violationsByKind,
    warnings,
    expectedNet,
    lateCommits: retired.late.length,
    // The late holds too (one Stripe let expire is no longer among the retired generations' late commits).
    lateCommitIds: [...new Set([...lateCommitIds, ...lateHolds.map((pi) => pi.id)])],
  };
}

/** A few lines for a terminal or a CI log: counts, then every violation with its operation. */
export function formatReport(report: InvariantReport, options: { maxViolations?: number } = {}): string {
  const max = options.maxViolations ?? 50;
  const s = report.byStatus;
  const lines = [
    `operations ${report.operations}: succeeded ${s.succeeded}, failed ${s.failed}, open ${report.open} (pending ${s.pending}, unknown ${s.unknown} incl. review), in review ${report.inReview}`,
    `PaymentIntents ${report.paymentIntents.total}: ${Object.entries(report.paymentIntents.byStatus).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`,
    `rejected messages ${report.rejectedMessages}, outbox events ${report.outboxEvents}${report.sentOrders === null ? '' : `, sent orders ${report.sentOrders}`}${report.sentRefunds === null ? '' : `, sent refunds ${report.sentRefunds}`}, in DLQ ${report.dlqOrders}`,
    report.ok
      ? `invariants: OK (0 violations${report.quiescent ? ', quiescent' : ''})`
      : `invariants: ${report.violations.length} VIOLATION(S) — ${Object.entries(report.violationsByKind).map(([k, v]) => `${k} ${v}`).join(', ')}`,
  ];
  for (const v of report.violations.slice(0, max)) {
    lines.push(`  ✗ ${v.kind}${v.operationId ? ` op ${v.operationId}` : ''}${v.orderId ? ` order ${v.orderId}` : ''}: ${v.detail}`);
  }
  if (report.violations.length > max) lines.push(`  … and ${report.violations.length - max} more`);
  for (const w of report.warnings.slice(0, 10)) lines.push(`  ! ${w.kind} op ${w.operationId} order ${w.orderId}: ${w.detail}`);
  if (report.warnings.length > 10) lines.push(`  … and ${report.warnings.length - 10} more warnings`);
  return lines.join('\n');
}
