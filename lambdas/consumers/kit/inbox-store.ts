// The kit's SQL, one module (outcome_consumer.* — migrations/001_consumer_inbox.sql). Every function
// is ONE statement, in autocommit: no transaction is ever open while an effect is in flight.
//
//   admit   arrival of a record: dedup by (consumer, eventId), newest-sequence-wins (state events;
//           facts are not ranked, ordering.ts), and the claim of the effect — all in one statement,
//           so a crash can never leave "seen but undecided".
//   settle  the effect's answer, fenced by the lease token of the claim.
//   poison  a record nobody can read, kept with its reason.
//
// The timeline the states protect (one event, one worker):
//
//   admit ──commit──▶ [attempting, lease] ──effect call──▶ provider ──answer──▶ settle ──commit──▶ [done]
//                         │                     ▲                               │
//                         │        crash here: the provider may have acted, the row still says
//                         │        "attempting". The next delivery decides by the row's policy:
//                         │          idempotent     run again with the same key (provider dedups)
//                         │          at-least-once  run again (a duplicate, accepted)
//                         │          at-most-once   abandoned, never run again (a miss, accepted)
//                         └─ the lease keeps a second delivery off it while the first still runs.
import type { Db } from '../../payments/db.ts';
import type { EventOrdering } from './ordering.ts';
import type { ConsumerPolicy } from './types.ts';

export type InboxState = 'attempting' | 'pending' | 'done' | 'stale' | 'abandoned' | 'failed';

export interface AdmitInput {
  readonly consumer: string;
  readonly eventId: string;
  readonly operationId: string;
  readonly sequence: number | null;
  /** ordering.ts: sequence, or -1 for an unnumbered event. */
  readonly orderKey: number;
  /**
   * ordering.ts: 'state' events are ranked (newest per operation wins); a 'fact' is not: it neither
   * reads nor moves the operation's head and is never stale — deduplicated by eventId only.
   */
  readonly ordering: EventOrdering;
  readonly detailType: string;
  readonly policy: ConsumerPolicy;
  readonly detail: unknown;
  readonly leaseToken: string;
  readonly leaseMs: number;
}

export interface Admission {
  readonly state: InboxState;
  /** null: the event was new (this statement inserted it). */
  readonly previousState: InboxState | null;
  /** This delivery holds the lease: run the effect now. */
  readonly claimed: boolean;
  readonly attempts: number;
  readonly deliveries: number;
  /** The policy recorded on the row (the one its first delivery was admitted under). */
  readonly policy: ConsumerPolicy;
  /** When the first attempt was claimed: the start of the provider's key lifetime. */
  readonly firstAttemptedAt: Date | null;
}

// The claim on an existing row: open (attempting or pending), not leased by a live worker, not an
// at-most-once attempt that may have run, and not superseded by a newer event in the meantime.
const CLAIMABLE = `(i.state = 'pending' OR (i.state = 'attempting' AND i.lease_until <= now() AND i.policy <> 'at-most-once'))
                   AND EXCLUDED.state <> 'stale'`;

const ADMIT_SQL = `
  WITH head AS (
    -- A state event: always touched (a row lock) so that two events of one operation admitted at
    -- the same moment are decided one after the other; GREATEST keeps the newest key.
    -- A fact ($11 false): not touched at all — it is not ranked (ordering.ts).
    INSERT INTO outcome_consumer.operation_heads AS h (consumer, operation_id, sequence, event_id)
    SELECT $1::text, $3::uuid, $5::bigint, $2::uuid WHERE $11::boolean
    ON CONFLICT (consumer, operation_id) DO UPDATE
       SET sequence = GREATEST(h.sequence, EXCLUDED.sequence),
           event_id = CASE WHEN EXCLUDED.sequence > h.sequence THEN EXCLUDED.event_id ELSE h.event_id END,
           updated_at = CASE WHEN EXCLUDED.sequence > h.sequence THEN now() ELSE h.updated_at END
    RETURNING h.sequence
  ),
  decision AS (
    -- Run the effect: a fact always; a state when it is (now) the newest of its operation.
    SELECT (NOT $11::boolean) OR coalesce((SELECT head.sequence = $5::bigint FROM head), false) AS newest
  )
  INSERT INTO outcome_consumer.inbox AS i
         (consumer, event_id, operation_id, sequence, detail_type, policy, state, detail,
          attempts, lease_token, lease_until, first_attempted_at)
  SELECT $1, $2, $3, $4, $6, $7,
         CASE WHEN d.newest THEN 'attempting' ELSE 'stale' END,
         $8::jsonb,
         CASE WHEN d.newest THEN 1 ELSE 0 END,
         CASE WHEN d.newest THEN $9::uuid END,
         CASE WHEN d.newest THEN now() + $10::bigint * interval '1 millisecond' END,
         CASE WHEN d.newest THEN now() END
    FROM decision d
  ON CONFLICT (consumer, event_id) DO UPDATE SET
    deliveries = i.deliveries + 1,
    updated_at = now(),
    state = CASE
      WHEN i.state = 'attempting' AND i.lease_until > now() THEN i.state           -- busy elsewhere
      WHEN i.state = 'attempting' AND i.policy = 'at-most-once' THEN 'abandoned'   -- may have run: never again
      WHEN i.state IN ('attempting', 'pending') AND EXCLUDED.state = 'stale' THEN 'stale'
      WHEN i.state IN ('attempting', 'pending') THEN 'attempting'                  -- claimed (again)
      ELSE i.state END,
    attempts = CASE WHEN ${CLAIMABLE} THEN i.attempts + 1 ELSE i.attempts END,
    lease_token = CASE WHEN ${CLAIMABLE} THEN $9::uuid
                       WHEN i.state = 'attempting' AND i.lease_until > now() THEN i.lease_token END,
    lease_until = CASE WHEN ${CLAIMABLE} THEN now() + $10::bigint * interval '1 millisecond'
                       WHEN i.state = 'attempting' AND i.lease_until > now() THEN i.lease_until END,
    first_attempted_at = CASE WHEN ${CLAIMABLE} THEN coalesce(i.first_attempted_at, now()) ELSE i.first_attempted_at END,
    last_error = CASE
      WHEN i.state = 'attempting' AND i.lease_until <= now() AND i.policy = 'at-most-once'
        THEN 'interrupted: an attempt was started and its answer never recorded; at-most-once does not run it again'
      ELSE i.last_error END
  -- RETURNING old.* is PostgreSQL 18 (the version this project runs everywhere, RDS included).
  RETURNING i.state, old.state AS previous_state, (i.lease_token IS NOT DISTINCT FROM $9::uuid AND i.state = 'attempting') AS claimed,
            i.attempts, i.deliveries, i.policy, i.first_attempted_at`;

/** Record the arrival of an event and decide, in one statement, what this delivery must do. */
export async function admit(db: Db, input: AdmitInput): Promise<Admission> {
  const { rows } = await db.query<{
    state: InboxState;
    previous_state: InboxState | null;
    claimed: boolean;
    attempts: number;
    deliveries: number;
    policy: ConsumerPolicy;
    first_attempted_at: Date | null;
  }>({
    name: 'outcome-consumer-admit',
    text: ADMIT_SQL,
    values: [
      input.consumer,
      input.eventId,
      input.operationId,
      input.sequence,
      input.orderKey,
      input.detailType,
      input.policy,
      JSON.stringify(input.detail),
      input.leaseToken,
      input.leaseMs,
      input.ordering === 'state',
    ],
  });
  const row = rows[0];
  if (!row) throw new Error(`admit returned no row for event ${input.eventId}`);
  return {
    state: row.state,
    previousState: row.previous_state,
    claimed: row.claimed,
    attempts: row.attempts,
    deliveries: row.deliveries,
    policy: row.policy,
    firstAttemptedAt: row.first_attempted_at,
  };
}

/** Where an attempt ends: its answer, as the policy reads it. */
export type Settlement =
  | { readonly to: 'done'; readonly result: Record<string, unknown> | null }
  /** Ambiguous under idempotent / at-least-once: stays attempting, lease released for the next delivery. */
  | { readonly to: 'retry'; readonly error: string }
  /** Definitely not executed: pending, safe to run again. */
  | { readonly to: 'pending'; readonly error: string }
  | { readonly to: 'abandoned'; readonly error: string }
  | { readonly to: 'failed'; readonly error: string };

const SETTLE_SQL = `
  UPDATE outcome_consumer.inbox
     SET state = CASE $4::text WHEN 'retry' THEN 'attempting' ELSE $4::text END,
         lease_token = CASE WHEN $4::text = 'retry' THEN lease_token END,
         lease_until = CASE WHEN $4::text = 'retry' THEN now() END,
         done_at = CASE WHEN $4::text = 'done' THEN now() END,
         result = CASE WHEN $4::text = 'done' THEN $5::jsonb ELSE result END,
         last_error = CASE WHEN $4::text = 'done' THEN last_error ELSE $6::text END,
         updated_at = now()
   WHERE consumer = $1 AND event_id = $2 AND lease_token = $3::uuid AND state = 'attempting'
  RETURNING 1`;

/**
 * Record the answer of the attempt this worker claimed. False: the lease was lost (another delivery
 * re-claimed it after it expired) and the newer worker's record stands.
 */
export async function settle(db: Db, key: { consumer: string; eventId: string; leaseToken: string }, settlement: Settlement): Promise<boolean> {
  const result = settlement.to === 'done' ? JSON.stringify(settlement.result) : null;
  const error = settlement.to === 'done' ? null : settlement.error.slice(0, 500);
  const { rowCount } = await db.query({
    name: 'outcome-consumer-settle',
    text: SETTLE_SQL,
    values: [key.consumer, key.eventId, key.leaseToken, settlement.to, result, error],
  });
  return (rowCount ?? 0) > 0;
}

const MAX_POISON_BODY = 64 * 1024;

/** Keep an unreadable record (once per SQS message; a re-delivery counts). */
export async function recordPoison(db: Db, input: { consumer: string; messageId: string; reason: string; body: string }): Promise<void> {
  await db.query({
    name: 'outcome-consumer-poison',
    text: `INSERT INTO outcome_consumer.poison_events (consumer, message_id, reason, body)
           VALUES ($1, $2, $3, $4)
           ON CONFLICT (consumer, message_id) DO UPDATE
              SET deliveries = outcome_consumer.poison_events.deliveries + 1, last_seen_at = now()`,
    values: [input.consumer, input.messageId, input.reason.slice(0, 500), input.body.slice(0, MAX_POISON_BODY)],
  });
}

export interface InboxCounts {
  readonly byState: Readonly<Record<InboxState, number>>;
  /** Deliveries beyond the first, absorbed by the inbox. */
  readonly redeliveries: number;
  readonly attempts: number;
  readonly poison: number;
}

/** For ledgers and tests: what one consumer's inbox holds. */
export async function inboxCounts(db: Db, consumer: string): Promise<InboxCounts> {
  const { rows } = await db.query<{ state: InboxState; n: number; redeliveries: number; attempts: number }>(
    `SELECT state, count(*)::int AS n, sum(deliveries - 1)::int AS redeliveries, sum(attempts)::int AS attempts
       FROM outcome_consumer.inbox WHERE consumer = $1 GROUP BY state`,
    [consumer],
  );
  const poison = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM outcome_consumer.poison_events WHERE consumer = $1', [consumer]);
  const byState: Record<InboxState, number> = { attempting: 0, pending: 0, done: 0, stale: 0, abandoned: 0, failed: 0 };
  let redeliveries = 0;
  let attempts = 0;
  for (const row of rows) {
    byState[row.state] = row.n;
    redeliveries += row.redeliveries;
    attempts += row.attempts;
  }
  return { byState, redeliveries, attempts, poison: poison.rows[0]?.n ?? 0 };
}
