// The outbox relay: publish outcome_events rows to EventBridge, at least once.
//
// Rows are written (and leased to the writer) by the same statement that records the outcome, so the
// charge handler can publish its batch's events at once. Whatever it could not publish — an entry
// EventBridge refused, a 500, a lost response, a crash — stays unpublished and the reconciler's sweep
// sends it again with the same eventId. A lease on each row keeps two relays from sending one row at
// the same moment; a lost response means the row IS sent again later, and consumers deduplicate.
import { PutEventsCommand, type EventBridgeClient, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import { prepared, type Db } from '../payments/db.ts';
import { BATCH, type OutcomeEventRow } from '../payments/operations-store.ts';

// ── Publishing ───────────────────────────────────────────────────────────────────────────────────

export type PublishResult = { readonly eventId: string; readonly ok: true } | { readonly eventId: string; readonly ok: false; readonly error: string };

export interface EventPublisher {
  publish(events: readonly OutcomeEventRow[]): Promise<PublishResult[]>;
}

export const PUT_EVENTS_MAX_ENTRIES = 10;
export const PUT_EVENTS_MAX_BYTES = 256 * 1024;

/** PutEvents entry size as AWS documents it: Time (14) + Source + DetailType + Detail + Resources, UTF-8. */
export function entrySize(entry: PutEventsRequestEntry): number {
  const bytes = (s: string | undefined) => (s ? Buffer.byteLength(s, 'utf8') : 0);
  return (entry.Time ? 14 : 0) + bytes(entry.Source) + bytes(entry.DetailType) + bytes(entry.Detail) + (entry.Resources ?? []).reduce((n, r) => n + bytes(r), 0);
}

/** Split entries into PutEvents calls of at most 10 entries and 256 KB. */
export function chunkEntries<T extends { entry: PutEventsRequestEntry }>(items: readonly T[]): T[][] {
  const chunks: T[][] = [];
  let current: T[] = [];
  let size = 0;
  for (const item of items) {
    const itemSize = entrySize(item.entry);
    if (current.length > 0 && (current.length === PUT_EVENTS_MAX_ENTRIES || size + itemSize > PUT_EVENTS_MAX_BYTES)) {
      chunks.push(current);
      current = [];
      size = 0;
    }
    current.push(item);
    size += itemSize;
  }
  if (current.length > 0) chunks.push(current);
  return chunks;
}

export class EventBridgePublisher implements EventPublisher {
  readonly #client: EventBridgeClient;
  readonly #busName: string;
  readonly #source: string;

  constructor(client: EventBridgeClient, options: { busName: string; source: string }) {
    this.#client = client;
    this.#busName = options.busName;
    this.#source = options.source;
  }

  toEntry(event: OutcomeEventRow): PutEventsRequestEntry {
    const occurredAt = typeof event.payload.occurredAt === 'string' ? new Date(event.payload.occurredAt) : undefined;
    return {
      EventBusName: this.#busName,
      Source: this.#source,
      DetailType: event.eventType,
      Detail: JSON.stringify(event.payload),
      ...(occurredAt ? { Time: occurredAt } : {}),
    };
  }

  async publish(events: readonly OutcomeEventRow[]): Promise<PublishResult[]> {
    const results: PublishResult[] = [];
    for (const chunk of chunkEntries(events.map((event) => ({ event, entry: this.toEntry(event) })))) {
      try {
        const answer = await this.#client.send(new PutEventsCommand({ Entries: chunk.map((c) => c.entry) }));
        // Entries in the answer are in request order; an entry with an ErrorCode was not accepted.
        chunk.forEach(({ event }, i) => {
          const entry = answer.Entries?.[i];
          if (entry?.EventId && !entry.ErrorCode) results.push({ eventId: event.eventId, ok: true });
          else results.push({ eventId: event.eventId, ok: false, error: `${entry?.ErrorCode ?? 'NoEntry'}: ${entry?.ErrorMessage ?? 'no result for entry'}` });
        });
      } catch (error) {
        // The whole call failed — or its answer was lost after EventBridge accepted it. Either way
        // the rows stay unpublished and are sent again (same eventId): at least once, never lost.
        const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
        for (const { event } of chunk) results.push({ eventId: event.eventId, ok: false, error: message.slice(0, 500) });
      }
    }
    return results;
  }
}

// ── The outbox table ─────────────────────────────────────────────────────────────────────────────

/**
 * Mark what was published and release what was not, in one round trip. The rows are named by event
 * id, and "not yet published" is written so that no plan can match it to the partial index
 * outcome_events_unpublished (num_nulls, not IS NULL): planned for statistics that saw no backlog of
 * unpublished rows, a mark that may read that index walks the whole backlog for every batch — and,
 * until a vacuum, the entries of every row already published (test/charge-path-plans.test.ts). The
 * sweep below is the one reader of that index. A named statement, like the charge path's others: a
 * connection plans it once, not at every publish (unnamed, each of a single-order round's publishes
 * was planned again: 0.18 ms of server CPU each).
 */
export async function settlePublishResults(db: Db, results: readonly PublishResult[]): Promise<void> {
  if (results.length === 0) return;
  await prepared(
    db,
    'outbox_settle_publish',
    `UPDATE outcome_events e
        SET published_at = CASE WHEN r.ok THEN now() END,
            attempts = e.attempts + 1,
            last_error = CASE WHEN r.ok THEN e.last_error ELSE r.error END,
            -- A refused entry rests a few seconds, so one sweep does not spin on it.
            publish_lease_until = CASE WHEN r.ok THEN NULL ELSE now() + interval '5 seconds' END
       FROM ${BATCH('$1')} AS r(event_id uuid, ok boolean, error text)
      WHERE e.event_id = r.event_id AND num_nulls(e.published_at) = 1`,
    [JSON.stringify(results.map((r) => ({ event_id: r.eventId, ok: r.ok, error: r.ok ? null : r.error })))],
  );
}

/** Lease a page of unpublished rows nobody is sending (SKIP LOCKED: overlapping sweeps don't wait). */
export async function claimUnpublished(db: Db, limit: number, leaseMs: number): Promise<OutcomeEventRow[]> {
  const { rows } = await db.query<{ event_id: string; operation_id: string; event_type: string; payload: Record<string, unknown> }>(
    `WITH due AS (
       SELECT event_id FROM outcome_events
        WHERE published_at IS NULL AND (publish_lease_until IS NULL OR publish_lease_until <= now())
        ORDER BY created_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
     )
     UPDATE outcome_events e SET publish_lease_until = now() + $2::bigint * interval '1 millisecond'
       FROM due WHERE e.event_id = due.event_id
     RETURNING e.event_id, e.operation_id, e.event_type, e.payload, e.created_at`,
    [limit, leaseMs],
  );
  return rows.map((r) => ({ eventId: r.event_id, operationId: r.operation_id, eventType: r.event_type, payload: r.payload }));
}

export interface RelaySummary {
  readonly published: number;
  readonly failed: number;
}

/** Publish events the caller holds the lease of (the charge handler, right after recording). */
export async function publishLeased(db: Db, publisher: EventPublisher, events: readonly OutcomeEventRow[]): Promise<RelaySummary> {
  if (events.length === 0) return { published: 0, failed: 0 };
  const results = await publisher.publish(events);
  await settlePublishResults(db, results);
  const published = results.filter((r) => r.ok).length;
  return { published, failed: results.length - published };
}

/** The reconciler's sweep: page through unpublished rows until none is left or time runs out. */
export async function relayUnpublished(
  db: Db,
  publisher: EventPublisher,
  options: { pageSize?: number; leaseMs?: number; canContinue?: () => boolean } = {},
): Promise<RelaySummary> {
  let published = 0;
  let failed = 0;
  while (options.canContinue?.() ?? true) {
    const page = await claimUnpublished(db, options.pageSize ?? 100, options.leaseMs ?? 60_000);
    if (page.length === 0) break;
    const summary = await publishLeased(db, publisher, page);
    published += summary.published;
    failed += summary.failed;
    // A page where nothing went out means EventBridge is unwell: stop, the next run tries again.
    if (summary.published === 0) break;
  }
  return { published, failed };
}

export interface OutboxGauges {
  readonly unpublished: number;
  readonly oldestUnpublishedAgeSeconds: number;
}

export async function outboxGauges(db: Db): Promise<OutboxGauges> {
  const { rows } = await db.query<{ unpublished: number; oldest: number | null }>(
    `SELECT count(*)::int AS unpublished, extract(epoch FROM now() - min(created_at))::float8 AS oldest
       FROM outcome_events WHERE published_at IS NULL`,
  );
  return { unpublished: rows[0]?.unpublished ?? 0, oldestUnpublishedAgeSeconds: Math.max(0, rows[0]?.oldest ?? 0) };
}
