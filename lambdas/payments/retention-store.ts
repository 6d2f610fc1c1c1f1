// Retention: what the pipeline removes once it is past its bound (docs/operations.md "Retention",
// docs/decisions.md "Data lifecycle"). Every removal is a call of one of migrations 017's and 020's lifecycle_*
// functions — the only way past the guards — in bounded batches: each call is ONE statement (its own
// transaction) that takes at most `batchSize` rows, oldest first, by index, FOR UPDATE SKIP LOCKED,
// so it never waits for a row lock the charge path holds, and holds locks only on rows nothing else
// writes any more. The cutoffs are computed from the caller's clock (injected: tests and the storage
// benchmark move it); the database refuses a cutoff inside its own floor, a day below each setting's
// minimum, so a clock difference never makes a valid setting fail.
import type { Db } from './db.ts';

/** The bounds, in days (lambdas/runtime/config.ts reads and checks them). */
export interface RetentionBounds {
  /** Published outbox rows older than this are deleted. */
  readonly outboxDays: number;
  /** Applied inbox rows older than this lose their payload (kept: id, type, object, created, outcome). */
  readonly stripeEventPayloadDays: number;
  /** Reduced inbox rows older than this are deleted (deduplication of a redelivery ends). */
  readonly stripeEventDays: number;
  /** Rejected messages older than this lose their raw body (kept: the row, reason, body_sha256). */
  readonly rejectedBodyDays: number;
  /** Records of an operator's read of raw bodies (operator_reads) older than this are deleted. */
  readonly operatorReadDays: number;
  /** Findings resolved longer ago than this are deleted (an open finding never is). */
  readonly resolvedFindingDays: number;
}

export interface RetentionSettings extends RetentionBounds {
  /** Rows per statement. */
  readonly batchSize: number;
  /** Statements per kind and run, at most. */
  readonly maxBatchesPerRun: number;
}

// In this order: a resolved finding goes before the inbox rows, so that the row it pinned can follow
// in the same run.
export const RETENTION_KINDS = ['outbox', 'stripeEventPayloads', 'resolvedFindings', 'stripeEvents', 'rejectedBodies', 'operatorReads'] as const;
export type RetentionKind = (typeof RETENTION_KINDS)[number];

/**
 * The retention bounds' defaults, and the least each accepts (docs/operations.md "Retention"). Each
 * least value is a day above the floor the database's lifecycle_* function refuses below (migration
 * 017), so that a clock difference between the function and the database never refuses a valid setting.
 *   - outbox 30 days (least 2): consumers deduplicate by eventId and have the event by then; the row
 *     is only history an operator may read (operations show);
 *   - Stripe event payload 4 days (least 4): Stripe retries a delivery for up to three days
 *     (https://docs.stripe.com/webhooks#retries), plus a day; only the row's columns are kept after;
 *   - Stripe event 30 days (least 5, and never before its payload): deduplication of a redelivery is
 *     the event id, kept as long as Stripe may send the event again — its automatic retries (3 days),
 *     and a resend from the Dashboard or API, possible for events of the last 30 days
 *     (https://docs.stripe.com/api/events: events are retrievable for 30 days);
 *   - rejected message body 14 days (least 2): time for an operator to read a refused body and have
 *     its producer fixed; the row, its reason and body_sha256 stay;
 *   - operator read 400 days (least 366): the record of who read raw bodies is an audit log; PCI DSS
 *     v4.0.1 requirement 10.5.1 keeps audit log history for at least 12 months (a leap year, and a
 *     month of margin for an audit that starts late); the rows are a few per command an operator runs;
 *   - resolved finding 90 days after its resolution (least 30): an explained incident stays readable
 *     (`ops findings list --all`) for a quarter of follow-ups — the dispute window of a card payment
 *     runs for months, and a finding is the first place to look; an OPEN finding is never removed (a
 *     person's work not done; its alarm stays up). The finding's Stripe event follows it at the inbox's
 *     own bound;
 *   - batch 1000 rows, at most 200 batches per kind and run, 10 s per run: well under the reconciler's
 *     budget, and several times 1,000 charges/s of inflow (a run a minute).
 */
export const RETENTION_DEFAULTS = {
  outboxDays: 30,
  stripeEventPayloadDays: 4,
  stripeEventDays: 30,
  rejectedBodyDays: 14,
  operatorReadDays: 400,
  resolvedFindingDays: 90,
  batchSize: 1000,
  maxBatchesPerRun: 200,
  maxRunMs: 10_000,
} as const;

export const RETENTION_LIMITS = {
  outboxDays: 2,
  stripeEventPayloadDays: 4,
  stripeEventDays: 5,
  rejectedBodyDays: 2,
  operatorReadDays: 366,
  resolvedFindingDays: 30,
} as const;

/** The environment variable of each bound (the construct's `retention` prop writes them). */
export const RETENTION_VARIABLES = {
  outboxDays: 'OUTBOX_RETENTION_DAYS',
  stripeEventPayloadDays: 'STRIPE_EVENT_PAYLOAD_RETENTION_DAYS',
  stripeEventDays: 'STRIPE_EVENT_RETENTION_DAYS',
  rejectedBodyDays: 'REJECTED_BODY_RETENTION_DAYS',
  operatorReadDays: 'OPERATOR_READ_RETENTION_DAYS',
  resolvedFindingDays: 'RESOLVED_FINDING_RETENTION_DAYS',
  batchSize: 'RETENTION_BATCH_SIZE',
  maxBatchesPerRun: 'RETENTION_MAX_BATCHES',
} as const;

const DAY_MS = 86_400_000;

/** The moment before which each kind's rows are due, at `now`. */
export function retentionCutoffs(bounds: RetentionBounds, now: Date): Readonly<Record<RetentionKind, Date>> {
  const before = (days: number) => new Date(now.getTime() - days * DAY_MS);
  return {
    outbox: before(bounds.outboxDays),
    stripeEventPayloads: before(bounds.stripeEventPayloadDays),
    stripeEvents: before(bounds.stripeEventDays),
    rejectedBodies: before(bounds.rejectedBodyDays),
    operatorReads: before(bounds.operatorReadDays),
    resolvedFindings: before(bounds.resolvedFindingDays),
  };
}

// The function each kind calls: fixed names, never input.
const FUNCTION: Readonly<Record<RetentionKind, string>> = {
  outbox: 'lifecycle_delete_published_outbox',
  stripeEventPayloads: 'lifecycle_reduce_inbox',
  stripeEvents: 'lifecycle_delete_inbox',
  rejectedBodies: 'lifecycle_remove_rejected_bodies',
  operatorReads: 'lifecycle_delete_operator_reads',
  resolvedFindings: 'lifecycle_delete_resolved_findings',
};

/** One batch of one kind: how many rows it removed (or reduced). */
export async function retentionBatch(db: Db, kind: RetentionKind, before: Date, batchSize: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT ${FUNCTION[kind]}($1::timestamptz, $2::int) AS n`, [before, batchSize]);
  return rows[0]?.n ?? 0;
}

export interface RetentionRun {
  /** Rows removed (or reduced) per kind. */
  readonly removed: Readonly<Record<RetentionKind, number>>;
  readonly batches: number;
  /** Kinds that still had due rows when the run stopped (batch limit or time). */
  readonly unfinished: readonly RetentionKind[];
  /** Per kind: how far past its bound the oldest row still due is, in seconds (0: none due). */
  readonly overdueSeconds: Readonly<Record<RetentionKind, number>>;
  /** The largest of overdueSeconds: the RetentionBehind alarm's gauge. */
  readonly maxOverdueSeconds: number;
}

/**
 * Work each kind in turn, a batch at a time, until none of it is due, `maxBatchesPerRun` batches of it
 * were run, or `canContinue` says stop; then measure what is still due. Inbox payloads come before
 * inbox rows (a row is deleted only once reduced, so this run deletes what it just reduced); the
 * per-kind batch limit keeps one big backlog from taking the whole run from the others.
 */
export async function runRetention(
  db: Db,
  settings: RetentionSettings,
  now: () => Date,
  canContinue: () => boolean = () => true,
): Promise<RetentionRun> {
  const cutoffs = retentionCutoffs(settings, now());
  const removed = Object.fromEntries(RETENTION_KINDS.map((kind) => [kind, 0])) as Record<RetentionKind, number>;
  const unfinished: RetentionKind[] = [];
  let batches = 0;
  for (const kind of RETENTION_KINDS) {
    for (let batch = 0; ; batch++) {
      if (batch >= settings.maxBatchesPerRun || !canContinue()) {
        unfinished.push(kind);
        break;
      }
      const n = await retentionBatch(db, kind, cutoffs[kind], settings.batchSize);
      batches++;
      removed[kind] += n;
      if (n < settings.batchSize) break;
    }
  }
  const overdueSeconds = await retentionOverdue(db, cutoffs);
  return { removed, batches, unfinished, overdueSeconds, maxOverdueSeconds: Math.max(0, ...Object.values(overdueSeconds)) };
}

/**
 * How far behind retention is: per kind, the cutoff minus the time of the oldest row still due (each
 * through the index its batches use, one row read). A gauge that grows means retention does not keep
 * up with what comes in (a batch size too small for the traffic) or does not run.
 */
export async function retentionOverdue(db: Db, cutoffs: Readonly<Record<RetentionKind, Date>>): Promise<Record<RetentionKind, number>> {
  const { rows } = await db.query<{ outbox: number | null; payloads: number | null; events: number | null; bodies: number | null; reads: number | null; findings: number | null }>(
    `SELECT extract(epoch FROM $1::timestamptz - (SELECT e.published_at FROM outcome_events e
                                                  WHERE e.event_id < lifecycle_uuidv7_floor($1::timestamptz) AND e.published_at < $1::timestamptz
                                                  ORDER BY e.event_id LIMIT 1))::float8 AS outbox,
            extract(epoch FROM $2::timestamptz - (SELECT s.received_at FROM stripe_events s
                                                  WHERE s.payload IS NOT NULL AND s.received_at < $2::timestamptz AND s.applied_at IS NOT NULL
                                                  ORDER BY s.received_at LIMIT 1))::float8 AS payloads,
            extract(epoch FROM $3::timestamptz - (SELECT s.received_at FROM stripe_events s
                                                  WHERE s.received_at < $3::timestamptz AND s.payload IS NULL AND s.applied_at IS NOT NULL
                                                    AND NOT EXISTS (SELECT 1 FROM stripe_event_findings f WHERE f.event_id = s.event_id)
                                                  ORDER BY s.received_at LIMIT 1))::float8 AS events,
            extract(epoch FROM $4::timestamptz - (SELECT m.received_at FROM rejected_messages m
                                                  WHERE m.raw_body IS NOT NULL AND m.received_at < $4::timestamptz
                                                  ORDER BY m.received_at LIMIT 1))::float8 AS bodies,
            extract(epoch FROM $5::timestamptz - (SELECT r.occurred_at FROM operator_reads r
                                                  WHERE r.occurred_at < $5::timestamptz
                                                  ORDER BY r.occurred_at LIMIT 1))::float8 AS reads,
            extract(epoch FROM $6::timestamptz - (SELECT f.resolved_at FROM stripe_event_findings f
                                                  WHERE f.resolved_at IS NOT NULL AND f.resolved_at < $6::timestamptz
                                                  ORDER BY f.resolved_at LIMIT 1))::float8 AS findings`,
    [cutoffs.outbox, cutoffs.stripeEventPayloads, cutoffs.stripeEvents, cutoffs.rejectedBodies, cutoffs.operatorReads, cutoffs.resolvedFindings],
  );
  const r = rows[0];
  const seconds = (v: number | null | undefined) => Math.max(0, Math.round(v ?? 0));
  return {
    outbox: seconds(r?.outbox),
    stripeEventPayloads: seconds(r?.payloads),
    resolvedFindings: seconds(r?.findings),
    stripeEvents: seconds(r?.events),
    rejectedBodies: seconds(r?.bodies),
    operatorReads: seconds(r?.reads),
  };
}
