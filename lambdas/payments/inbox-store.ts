// All SQL of the Stripe event inbox (stripe_events) and its findings (stripe_event_findings): the
// mirror image of the outbox. Recording an event is ONE statement (insert, deduplicated by Stripe's
// event id, claimed at birth for an immediate apply); everything else is the applier's bookkeeping.
// Values are always bound parameters.
import type pg from 'pg';
import { prepared, type Db } from './db.ts';
import type { StripeEventView } from './event-decisions.ts';
import { ATTEMPT_COLUMNS, attemptStartedEvent, CHARGE_PAYMENT_INTENT, CLAIM_SET, toOperation, type OutcomeEventRow } from './operations-store.ts';
import type { ClaimedOperation, Operation } from './types.ts';

/** A database that can also lend one connection for a transaction (a pg.Pool). */
export interface TransactionalDb extends Db {
  connect(): Promise<pg.PoolClient>;
}

export type EventSource = 'webhook' | 'eventbridge';

export interface InboxRow {
  readonly eventId: string;
  readonly eventType: string;
  readonly objectId: string | null;
  readonly source: EventSource;
  readonly receivedAt: Date;
  readonly attempts: number;
  readonly payload: Readonly<Record<string, unknown>>;
  /** The apply lease this worker holds on the row. */
  readonly leaseToken: string;
}

interface InboxJson {
  event_id: string;
  event_type: string;
  object_id: string | null;
  source: EventSource;
  received_at: string | Date;
  attempts: number;
  payload: Record<string, unknown>;
  apply_lease_token: string;
}

const toRow = (r: InboxJson): InboxRow => ({
  eventId: r.event_id,
  eventType: r.event_type,
  objectId: r.object_id,
  source: r.source,
  receivedAt: new Date(r.received_at),
  attempts: r.attempts,
  payload: r.payload,
  leaseToken: r.apply_lease_token,
});

export interface RecordEventResult {
  /** False: the event id was already in the inbox (a redelivery): nothing written. */
  readonly inserted: boolean;
  /** The row as inserted, leased to the caller (when a lease was asked for). */
  readonly claimed: InboxRow | null;
}

/**
 * The endpoint's one statement: insert the verified event unless its id is already there. With a
 * lease, the new row is claimed at birth so the caller may apply it at once; a redelivery returns
 * nothing and the caller answers 200 all the same.
 */
export async function recordStripeEvent(
  db: Db,
  event: StripeEventView,
  source: EventSource,
  lease: { readonly token: string; readonly ms: number } | null,
): Promise<RecordEventResult> {
  const { rows } = await prepared<InboxJson>(
    db,
    'inbox.record',
    `INSERT INTO stripe_events
       (event_id, event_type, stripe_created_at, object_id, api_version, livemode, source, payload, apply_lease_token, apply_lease_until)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9::uuid, CASE WHEN $9::uuid IS NULL THEN NULL ELSE now() + $10::bigint * interval '1 millisecond' END)
     ON CONFLICT (event_id) DO NOTHING
     RETURNING event_id, event_type, object_id, source, received_at, attempts, payload, apply_lease_token`,
    // livemode: the column is NOT NULL (false when the event did not say; the payload keeps what it
    // said, and the applier refuses an event that does not say its mode: judgeEventOrigin).
    [event.id, event.type, event.created, event.objectId, event.apiVersion, event.livemode ?? false, source, JSON.stringify(event.payload), lease?.token ?? null, lease?.ms ?? 0],
  );
  const row = rows[0];
  return { inserted: row !== undefined, claimed: row && lease ? toRow(row) : null };
}

/** The reason stored on an event that waits for another worker's operation lease. */
export const WAITING_FOR_LEASE = 'operation leased by another worker';

/** The applier's page: unapplied rows that are due and nobody holds, oldest Stripe time first (SKIP LOCKED). */
export async function claimDueEvents(db: Db, limit: number, token: string, leaseMs: number): Promise<InboxRow[]> {
  const { rows } = await prepared<InboxJson>(
    db,
    'inbox.claim_due',
    `WITH due AS (
       SELECT e.event_id FROM stripe_events e
        WHERE e.applied_at IS NULL
          AND (e.apply_lease_until IS NULL OR e.apply_lease_until <= now())
          -- Due by its schedule, or waiting for an operation's lease that has been given back
          -- (the worker wrote its outcome): then at once, not when the lease would have ended.
          AND (e.next_attempt_at <= now()
               OR (e.last_error = $4 AND EXISTS (
                     SELECT 1 FROM payment_operations p WHERE p.id = e.operation_id AND p.lease_token IS NULL)))
        ORDER BY e.next_attempt_at, e.stripe_created_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
     )
     UPDATE stripe_events e
        SET apply_lease_token = $2::uuid, apply_lease_until = now() + $3::bigint * interval '1 millisecond'
       FROM due WHERE e.event_id = due.event_id
     RETURNING e.event_id, e.event_type, e.object_id, e.source, e.received_at, e.attempts, e.payload, e.apply_lease_token, e.stripe_created_at`,
    [limit, token, leaseMs, WAITING_FOR_LEASE],
  );
  return rows.map(toRow);
}

/** What applying an event did; stored in stripe_events.outcome. */
export type ApplyOutcome =
  | 'settled' // the operation reached a final state from this event
  | 'moved' // the operation stayed open but learnt something (its PaymentIntent id, a new schedule)
  | 'review' // the operation went to human review because of this event
  | 'stale' // the operation was already final and the event agrees or is older
  | 'contradiction' // the event contradicts a final operation: finding + alarm
  | 'unrecorded' // our metadata, no operation: finding + alarm
  | 'in_review' // noted for the operator of an operation in review
  | 'aftermath' // refund / dispute recorded and announced
  | 'failed_after_success' // a refund operation's succeeded Refund failed at Stripe since: fact + finding + alarm
  | 'foreign' // not made by this pipeline
  | 'unknown_operation' // names an operation we do not have, nothing charged
  | 'unknown_payment_intent' // a refund / dispute for a PaymentIntent no operation holds
  | 'other_payment_intent' // a PaymentIntent that is not the operation's and charged nothing
  | 'ignored_type' // an event type this pipeline does not act on
  | 'unreadable' // the object inside is not what the type promises
  | 'foreign_account' // from a connected account (Connect) or another account's context: refused, a finding
  | 'livemode_mismatch' // from the other mode than our key's (or our key's mode is unknown): refused, a finding
  | 'unconfirmed'; // our own key's retrieve does not confirm it (404, not ours, never true): a finding, no state change

/** The findings of events that were refused or not confirmed: what the StripeEventRefused alarm counts. */
export const REFUSED_FINDING_KINDS = ['foreign_account', 'livemode_mismatch', 'unconfirmed'] as const;
export type RefusedFindingKind = (typeof REFUSED_FINDING_KINDS)[number];
export const isRefusal = (outcome: ApplyOutcome | 'deferred'): outcome is RefusedFindingKind => (REFUSED_FINDING_KINDS as readonly string[]).includes(outcome);

/** Mark the row applied, fenced by the apply lease (a second applier's late write changes nothing). */
export async function markApplied(db: Db, row: InboxRow, outcome: ApplyOutcome, operationId: string | null): Promise<boolean> {
  const { rowCount } = await db.query(
    `UPDATE stripe_events
        SET applied_at = now(), outcome = $3, operation_id = $4::uuid, attempts = attempts + 1,
            apply_lease_token = NULL, apply_lease_until = NULL, last_error = NULL
      WHERE event_id = $1 AND apply_lease_token = $2::uuid AND applied_at IS NULL`,
    [row.eventId, row.leaseToken, outcome, operationId],
  );
  return rowCount === 1;
}

/**
 * Give the row back unapplied, to be looked at again `until` (a held operation lease: when it ends,
 * database time) or `afterMs` from now (Stripe unreachable, an unexpected error).
 */
export async function deferEvent(
  db: Db,
  row: InboxRow,
  when: { readonly until: Date } | { readonly afterMs: number },
  reason: string,
  operationId: string | null,
): Promise<void> {
  await db.query(
    `UPDATE stripe_events
        SET apply_lease_token = NULL, apply_lease_until = NULL, attempts = attempts + 1,
            next_attempt_at = coalesce($3::timestamptz, now() + $4::bigint * interval '1 millisecond'), last_error = $5,
            operation_id = coalesce($6::uuid, operation_id)
      WHERE event_id = $1 AND apply_lease_token = $2::uuid AND applied_at IS NULL`,
    [row.eventId, row.leaseToken, 'until' in when ? when.until : null, 'afterMs' in when ? Math.max(0, Math.round(when.afterMs)) : 0, reason.slice(0, 500), operationId],
  );
}

// ── Operations, as the applier needs them ────────────────────────────────────────────────────────

/** The operation holding a Stripe object (a charge its pi_…, a refund its re_…). */
export async function findOperationByExternalId(db: Db, externalId: string): Promise<Operation | null> {
  const { rows } = await db.query<{ op: Parameters<typeof toOperation>[0] }>(
    `SELECT to_jsonb(p) AS op FROM payment_operations p WHERE p.external_id = $1 ORDER BY p.created_at LIMIT 1`,
    [externalId],
  );
  return rows[0] ? toOperation(rows[0].op) : null;
}

/**
 * A refund event's operation — the one its metadata names (`claimedId`, a uuid), else the first that
 * recorded the Refund id — with its charge's PaymentIntent (null for a charge or an unknown charge),
 * which decideRefundEvent needs to derive the PaymentIntent refunded: one statement, not an operation
 * read and then its charge's.
 */
export async function findRefundEventOperation(
  db: Db,
  claimedId: string | null,
  refundId: string,
): Promise<{ readonly operation: Operation; readonly chargePaymentIntentId: string | null } | null> {
  const { rows } = await db.query<{ op: Parameters<typeof toOperation>[0]; charge_payment_intent: string | null }>(
    `SELECT to_jsonb(p) AS op, ${CHARGE_PAYMENT_INTENT('p')} AS charge_payment_intent
       FROM payment_operations p
      WHERE p.id = $1::uuid OR p.external_id = $2
      ORDER BY (p.id = $1::uuid) IS TRUE DESC, p.created_at
      LIMIT 1`,
    [claimedId, refundId],
  );
  return rows[0] ? { operation: toOperation(rows[0].op), chargePaymentIntentId: rows[0].charge_payment_intent } : null;
}

export type EventClaim =
  | { readonly claimed: ClaimedOperation }
  /** Someone else's live lease: the event waits until it ends (their write comes first). */
  | { readonly claimed: null; readonly leaseUntil: Date; readonly operation: Operation }
  /** Final, or in review, by now: the caller decides again from this state. */
  | { readonly claimed: null; readonly leaseUntil: null; readonly operation: Operation };

/**
 * Take the operation's lease for applying an event: the same lease and fence as the engine's claims
 * (open, not in review, nobody's live lease), but whatever next_attempt_at says — an event is news
 * worth acting on before the next scheduled retrieve. The key window starts here if it had not (it
 * cannot really be unset: Stripe knows the PaymentIntent, so it was sent).
 */
export async function claimForEvent(
  db: Db,
  operationId: string,
  token: string,
  leaseMs: number,
  actor: string,
  stripeEventId: string,
  /** Claim an operation in review too: a refund's terminal, matching Refund settles it (event-decisions.ts decideRefundEvent). */
  options: { readonly inReview?: boolean } = {},
): Promise<EventClaim | null> {
  const { rows } = await prepared<{ source: 'claimed' | 'existing'; op: Parameters<typeof toOperation>[0]; db_now: Date }>(
    db,
    'inbox.claim_operation',
    `WITH claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
        WHERE p.id = $1::uuid AND p.status IN ('pending', 'unknown') AND (p.review_reason IS NULL OR $6::boolean)
          AND (p.lease_until IS NULL OR p.lease_until <= now())
       RETURNING p.*
     ),
     -- A claim is a claim: the audit trail shows it like the engine's (every claim ending —
     -- recorded, discarded, released — has its attempt_started).
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${attemptStartedEvent({ stripeEventIdParam: 5 })}
     )
     SELECT 'claimed' AS source, to_jsonb(c) AS op, now() AS db_now FROM claimed c
     UNION ALL
     SELECT 'existing', to_jsonb(p), now() FROM payment_operations p
      WHERE p.id = $1::uuid AND NOT EXISTS (SELECT 1 FROM claimed)`,
    [operationId, token, leaseMs, actor, stripeEventId, options.inReview ?? false],
  );
  const row = rows[0];
  if (!row) return null;
  const operation = toOperation(row.op);
  if (row.source === 'claimed') {
    return { claimed: { ...operation, leaseToken: operation.leaseToken!, firstAttemptedAt: operation.firstAttemptedAt!, claimedAt: row.db_now } };
  }
  const held = operation.leaseUntil !== null && operation.leaseUntil.getTime() > new Date(row.db_now).getTime() && (operation.status === 'pending' || operation.status === 'unknown');
  return held ? { claimed: null, leaseUntil: operation.leaseUntil!, operation } : { claimed: null, leaseUntil: null, operation };
}

// ── Audit lines, findings and aftermath events ───────────────────────────────────────────────────

/** An audit line on the operation for an event that was seen but is not an attempt. */
export async function appendEventAudit(
  db: Db,
  operation: Operation,
  actor: string,
  detail: Readonly<Record<string, unknown>>,
  externalId: string | null,
): Promise<void> {
  await db.query(
    `INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
     VALUES ($1::uuid, $2, 'stripe_event', $3, $3, $4, $5, $6::jsonb)`,
    [operation.id, actor, operation.status, externalId, operation.keyGeneration, JSON.stringify(detail)],
  );
}

export interface Finding {
  readonly kind: 'unrecorded_charge' | 'contradiction' | RefusedFindingKind;
  /**
   * The Stripe object the finding is about: a PaymentIntent, or for a refund finding the Refund
   * (re_…); for a refused event its data.object (a Charge, a Dispute …), or the event itself when it
   * names no object.
   */
  readonly paymentIntentId: string;
  readonly eventId: string;
  readonly operationId: string | null;
  readonly claimedOperationId: string | null;
  readonly orderId: string | null;
  /** As the event said (null when its object has none: a refused event's). */
  readonly amount: number | null;
  readonly currency: string | null;
  readonly status: string | null;
  readonly reason: string;
  readonly detail: Readonly<Record<string, unknown>>;
}

/** One row per (kind, PaymentIntent): the same finding seen again is not a second row. Returns whether it is new. */
export async function recordFinding(db: Db, finding: Finding): Promise<boolean> {
  const { rowCount } = await db.query(
    `INSERT INTO stripe_event_findings
       (kind, payment_intent_id, event_id, operation_id, claimed_operation_id, order_id, amount, currency, status, reason, detail)
     VALUES ($1, $2, $3, $4::uuid, $5, $6, $7, $8, $9, $10, $11::jsonb)
     ON CONFLICT (kind, payment_intent_id) DO NOTHING`,
    [finding.kind, finding.paymentIntentId, finding.eventId, finding.operationId, finding.claimedOperationId, finding.orderId,
      finding.amount, finding.currency, finding.status, finding.reason.slice(0, 1000), JSON.stringify(finding.detail)],
  );
  return rowCount === 1;
}

export interface AftermathWrite {
  readonly operation: Operation;
  readonly eventType: 'Charge Refunded' | 'Charge Disputed' | 'Charge Dispute Closed';
  readonly kind: 'refunded' | 'disputed' | 'dispute_closed';
  readonly amount: number;
  readonly amountRefunded: number | null;
  readonly currency: string;
  readonly chargeId: string | null;
  readonly disputeId: string | null;
  readonly disputeStatus: string | null;
  readonly disputeReason: string | null;
  readonly stripeEventId: string;
  readonly stripeCreatedAt: Date;
  readonly actor: string;
}

/**
 * A refund or dispute: the audit line and the outbox row (contract.ts, chargeAftermathDetailSchema)
 * in ONE statement. The operation row is not touched: a refunded charge still succeeded.
 */
export async function recordAftermath(db: Db, w: AftermathWrite, publishLeaseMs: number): Promise<OutcomeEventRow> {
  const { rows } = await db.query<{ event_id: string; event_type: string; payload: Record<string, unknown> }>(
    `WITH e AS (SELECT uuidv7() AS event_id),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT $1::uuid, $2, 'stripe_event', $3, $3, $4, $5,
              jsonb_build_object('stripeEventId', $6::text, 'aftermath', $7::text, 'amount', $8::bigint, 'amountRefunded', $9::bigint,
                                 'chargeId', $10::text, 'disputeId', $11::text, 'disputeStatus', $12::text, 'disputeReason', $13::text,
                                 'outcomeEventId', e.event_id)
         FROM e
     )
     INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, publish_lease_until)
     SELECT e.event_id, $1::uuid, $14,
            jsonb_build_object(
              'orderId', $15::text, 'kind', $7::text,
              'amount', $8::bigint, 'amountRefunded', $9::bigint, 'chargeAmount', $16::bigint, 'currency', $17::text,
              'externalId', $4::text, 'chargeId', $10::text, 'disputeId', $11::text, 'disputeStatus', $12::text,
              'disputeReason', $13::text, 'stripeEventId', $6::text,
              'stripeCreatedAt', to_char($18::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
            now() + $19::bigint * interval '1 millisecond'
       FROM e
     RETURNING event_id, event_type, outcome_events.payload`,
    [w.operation.id, w.actor, w.operation.status, w.operation.externalId, w.operation.keyGeneration, w.stripeEventId, w.kind, w.amount,
      w.amountRefunded, w.chargeId, w.disputeId, w.disputeStatus, w.disputeReason, w.eventType, w.operation.orderId, w.operation.amount,
      w.currency, w.stripeCreatedAt, publishLeaseMs],
  );
  const row = rows[0]!;
  return { eventId: row.event_id, operationId: w.operation.id, eventType: row.event_type, payload: row.payload };
}

export interface RefundFailedAfterSuccessWrite {
  /** The refund operation: final `succeeded`, and it stays so. */
  readonly operation: Operation;
  readonly refundStripeId: string;
  readonly paymentIntentId: string | null;
  readonly amount: number;
  readonly currency: string;
  readonly failureReason: string | null;
  readonly stripeEventId: string;
  readonly stripeCreatedAt: Date;
  readonly actor: string;
}

/**
 * A succeeded refund that Stripe says failed since: the audit line and the outbox fact (contract.ts,
 * refundFactDetailSchema, `Refund Failed After Success`) in ONE statement. The operation stays final
 * `succeeded` — the request did execute; what changed is the money (docs/decisions.md, 2026-12-01 "a
 * refund that fails after it succeeded"). The operation's mark (failed_after_success_at / _reason),
 * with which its amount is no longer held against the charge, is NOT written here: the fact's insert
 * trigger sets it (migrations/009, outcome_events_mark_refund_failed_after_success) — one writer, so
 * code that knows only the fact marks the refund too. Its time is the fact's created_at (now()).
 */
export async function recordRefundFailedAfterSuccess(db: Db, w: RefundFailedAfterSuccessWrite, publishLeaseMs: number): Promise<OutcomeEventRow> {
  const refund = w.operation.refund;
  if (w.operation.kind !== 'refund' || refund === null) throw new Error(`operation ${w.operation.id} is not a refund operation`);
  const { rows } = await db.query<{ event_id: string; event_type: string; payload: Record<string, unknown> }>(
    `WITH e AS (SELECT uuidv7() AS event_id),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT $1::uuid, $2, 'stripe_event', $3, $3, $4, $5,
              jsonb_build_object('stripeEventId', $6::text, 'aftermath', 'refund_failed_after_success', 'amount', $7::bigint,
                                 'currency', $8::text, 'failureReason', $9::text, 'paymentIntentId', $10::text, 'outcomeEventId', e.event_id)
         FROM e
     )
     INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, publish_lease_until)
     SELECT e.event_id, $1::uuid, 'Refund Failed After Success',
            jsonb_build_object(
              'orderId', $11::text,
              'kind', 'refund_failed_after_success', 'refundId', $12::text, 'chargeOperationId', $13::uuid,
              'amount', $7::bigint, 'currency', $8::text, 'externalId', $4::text, 'paymentIntentId', $10::text,
              'failureReason', $9::text, 'stripeEventId', $6::text,
              'stripeCreatedAt', to_char($14::timestamptz AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')),
            now() + $15::bigint * interval '1 millisecond'
       FROM e
     RETURNING event_id, event_type, outcome_events.payload`,
    [w.operation.id, w.actor, w.operation.status, w.refundStripeId, w.operation.keyGeneration, w.stripeEventId, w.amount, w.currency,
      w.failureReason, w.paymentIntentId, w.operation.orderId, refund.refundId, refund.parentOperationId, w.stripeCreatedAt, publishLeaseMs],
  );
  const row = rows[0]!;
  return { eventId: row.event_id, operationId: w.operation.id, eventType: row.event_type, payload: row.payload };
}

// ── Gauges ───────────────────────────────────────────────────────────────────────────────────────

export interface InboxGauges {
  /** Events recorded and not applied yet (waiting for a lease, for Stripe, or for the next sweep). */
  readonly backlog: number;
  /** Age of the oldest of them since it was received; 0 when none. */
  readonly oldestBacklogAgeSeconds: number;
  /** Findings no operator has resolved, by kind. */
  readonly openContradictions: number;
  readonly openUnrecordedCharges: number;
  /** Open findings of refused or unconfirmed events (REFUSED_FINDING_KINDS): the StripeEventRefused alarm. */
  readonly openRefusedEvents: number;
  /**
   * How long the fast path has been silent while charges flow: seconds since the first send of the
   * oldest operation that Stripe answered (it holds a pi_… / re_…) and that was first sent AFTER the
   * newest event the inbox recorded; 0 when there is none. Every object Stripe makes for an
   * operation makes a subscribed event within seconds (payment_intent.succeeded / .payment_failed /
   * .processing / .requires_action; refund.created or charge.refunded), so a value that keeps
   * growing means events are not arriving: an endpoint never registered, a wrong signing secret
   * (deliveries refused), a partner rule disabled. An idle system stays at 0; an operation settled
   * by its own event was sent before that event arrived, so it never counts.
   */
  readonly eventsSilentSeconds: number;
}

/**
 * Through the partial indexes over unapplied events and open findings — O(backlog + open findings) —
 * and, for the silence gauge, two index look-ups (migrations/010: the newest received_at, and the
 * oldest first send of an answered operation after it).
 */
export async function inboxGauges(db: Db): Promise<InboxGauges> {
  const { rows } = await db.query<{ backlog: number; oldest: number | null; contradictions: number; unrecorded: number; refused: number; silent: number | null }>(
    `SELECT (SELECT count(*)::int FROM stripe_events WHERE applied_at IS NULL) AS backlog,
            (SELECT extract(epoch FROM now() - min(received_at))::float8 FROM stripe_events WHERE applied_at IS NULL) AS oldest,
            (SELECT count(*)::int FROM stripe_event_findings WHERE resolved_at IS NULL AND kind = 'contradiction') AS contradictions,
            (SELECT count(*)::int FROM stripe_event_findings WHERE resolved_at IS NULL AND kind = 'unrecorded_charge') AS unrecorded,
            (SELECT count(*)::int FROM stripe_event_findings WHERE resolved_at IS NULL AND kind = ANY($1::text[])) AS refused,
            (SELECT extract(epoch FROM now() - min(p.first_attempted_at))::float8
               FROM payment_operations p
              WHERE p.external_id IS NOT NULL
                AND p.first_attempted_at > coalesce((SELECT max(received_at) FROM stripe_events), '-infinity'::timestamptz)) AS silent`,
    [REFUSED_FINDING_KINDS],
  );
  const r = rows[0];
  return {
    backlog: r?.backlog ?? 0,
    oldestBacklogAgeSeconds: Math.max(0, Math.round(r?.oldest ?? 0)),
    openContradictions: r?.contradictions ?? 0,
    openUnrecordedCharges: r?.unrecorded ?? 0,
    openRefusedEvents: r?.refused ?? 0,
    eventsSilentSeconds: Math.max(0, Math.round(r?.silent ?? 0)),
  };
}

// ── Findings, for the operator ───────────────────────────────────────────────────────────────────

/** A finding as stored: what recordFinding wrote (amount, currency, status nullable in the table), and its resolution. */
export interface FindingRow extends Pick<Finding, 'paymentIntentId' | 'operationId' | 'claimedOperationId' | 'orderId' | 'reason'> {
  readonly id: number;
  /** An event's kinds, and the watch's (watch.ts): `refunded_twice`, `watch_blind`. */
  readonly kind: Finding['kind'] | 'refunded_twice' | 'watch_blind';
  /** The Stripe event behind it; null for a finding of the watch after a re-issue (its evidence is our own List). */
  readonly eventId: string | null;
  /** Who found it: a Stripe event, or the watch after a re-issue. */
  readonly source: 'stripe_event' | 'watch';
  readonly amount: number | null;
  readonly currency: string | null;
  readonly status: string | null;
  readonly foundAt: string;
  readonly resolvedAt: string | null;
  readonly resolvedBy: string | null;
  readonly resolution: string | null;
}

interface FindingJson {
  id: number | string;
  kind: FindingRow['kind'];
  payment_intent_id: string;
  event_id: string | null;
  source?: 'stripe_event' | 'watch';
  operation_id: string | null;
  claimed_operation_id: string | null;
  order_id: string | null;
  amount: number | string | null;
  currency: string | null;
  status: string | null;
  reason: string;
  found_at: string;
  resolved_at: string | null;
  resolved_by: string | null;
  resolution: string | null;
}

const toFinding = (r: FindingJson): FindingRow => ({
  id: Number(r.id),
  kind: r.kind,
  paymentIntentId: r.payment_intent_id,
  eventId: r.event_id,
  source: r.source ?? 'stripe_event',
  operationId: r.operation_id,
  claimedOperationId: r.claimed_operation_id,
  orderId: r.order_id,
  amount: r.amount === null ? null : Number(r.amount),
  currency: r.currency,
  status: r.status,
  reason: r.reason,
  foundAt: new Date(r.found_at).toISOString(),
  resolvedAt: r.resolved_at === null ? null : new Date(r.resolved_at).toISOString(),
  resolvedBy: r.resolved_by,
  resolution: r.resolution,
});

export async function listFindings(
  db: Db,
  filter: { readonly includeResolved: boolean; readonly kind: FindingRow['kind'] | null; readonly limit: number },
): Promise<{ asOf: string; total: number; findings: FindingRow[] }> {
  const { rows } = await db.query<{ as_of: Date; total: number; items: FindingJson[] }>(
    `WITH matching AS (
       SELECT * FROM stripe_event_findings f
        WHERE ($1::boolean OR f.resolved_at IS NULL) AND ($2::text IS NULL OR f.kind = $2::text)
     )
     SELECT now() AS as_of, (SELECT count(*)::int FROM matching) AS total,
            coalesce((SELECT jsonb_agg(to_jsonb(m) ORDER BY m.found_at, m.id)
                        FROM (SELECT * FROM matching ORDER BY found_at, id LIMIT $3) m), '[]'::jsonb) AS items`,
    [filter.includeResolved, filter.kind, filter.limit],
  );
  const row = rows[0]!;
  return { asOf: row.as_of.toISOString(), total: row.total, findings: row.items.map(toFinding) };
}

/**
 * An operator closes a finding, saying what was done. Fenced on "still open": two operators never
 * both resolve it. Null: no such finding; `alreadyResolved`: someone did first (nothing changed).
 */
export async function resolveFinding(
  db: Db,
  id: number,
  actor: string,
  resolution: string,
): Promise<{ readonly finding: FindingRow; readonly alreadyResolved: boolean } | null> {
  const { rows } = await db.query<{ changed: boolean; f: FindingJson }>(
    `WITH upd AS (
       UPDATE stripe_event_findings SET resolved_at = now(), resolved_by = $2, resolution = $3
        WHERE id = $1 AND resolved_at IS NULL
       RETURNING *
     )
     SELECT true AS changed, to_jsonb(u) AS f FROM upd u
     UNION ALL
     SELECT false, to_jsonb(f) FROM stripe_event_findings f WHERE f.id = $1 AND NOT EXISTS (SELECT 1 FROM upd)`,
    [id, actor, resolution.slice(0, 2000)],
  );
  const row = rows[0];
  return row ? { finding: toFinding(row.f), alreadyResolved: !row.changed } : null;
}
