// Read-only reports for on-call: the numbers behind the gauges, and the rejected messages. Nothing
// here writes; every report is one round trip and reads the database clock (`asOf`), so ages agree
// with the reconciler's gauges whatever the operator's laptop clock says.
import { outboxGauges } from '../events/outbox.ts';
import type { Db } from '../payments/db.ts';

export interface Stats {
  readonly asOf: string;
  /** Every operation ever made, by status (operations in review included); settled ones estimated when totalsEstimated. */
  readonly operations: { readonly pending: number; readonly unknown: number; readonly succeeded: number; readonly failed: number; readonly total: number };
  /**
   * The same operations by kind, charges beside refunds, with those in review apart: `pending` and
   * `unknown` here are open and NOT in review (the machines still work on them), `inReview` is open
   * with a review reason (the local ledger's definitions, local/ledger.ts).
   */
  readonly byKind: Readonly<Record<'charge' | 'refund', KindCounts>>;
  /**
   * True on a large table (EXACT_TOTALS_BELOW_ROWS): the succeeded and failed figures (and totals) are
   * estimated from the table's statistics, not counted. Open and review figures are always counted.
   */
  readonly totalsEstimated: boolean;
  /**
   * Open and NOT in review: what the machines still work on. The same definitions as the reconciler's
   * gauges (OpenOperationsPending / OpenOperationsUnknown / OldestOpenOperationAgeSeconds), so these
   * are the numbers behind the OldestOpenOperationTooOld alarm.
   */
  readonly open: {
    readonly pending: number;
    readonly unknown: number;
    readonly oldestCreatedAt: string | null;
    readonly oldestAgeSeconds: number;
    readonly oldestOperationId: string | null;
    /** Due, and nobody's lease: what the next sweep takes. */
    readonly dueNow: number;
    /** A worker holds the lease now (a Stripe call may be in flight). */
    readonly leased: number;
  };
  /** Waiting for a human (ReviewQueueSize); `oldestSince` is when the oldest entered review. */
  readonly review: { readonly size: number; readonly oldestSince: string | null; readonly oldestAgeSeconds: number; readonly oldestOperationId: string | null };
  readonly rejected: { readonly last24h: number };
  readonly outbox: { readonly unpublished: number; readonly oldestUnpublishedAgeSeconds: number };
}

export interface KindCounts {
  readonly pending: number;
  readonly unknown: number;
  readonly inReview: number;
  readonly succeeded: number;
  readonly failed: number;
  readonly total: number;
}

const iso = (value: string | Date | null): string | null => (value === null ? null : new Date(value).toISOString());
const seconds = (value: number | null): number => Math.max(0, Math.round(value ?? 0));

/**
 * Below this many operations (the planner's count, pg_class.reltuples) the all-time figures are
 * counted; above it they are estimated from the table's statistics, so that `stats` — and the live
 * page, which reads it every few seconds — costs what is open, never the history (`npm run
 * bench:scale`; test/history-plans.test.ts). Open and review figures are always counted.
 */
export const EXACT_TOTALS_BELOW_ROWS = 200_000;

interface Totals {
  readonly exact: boolean;
  readonly byKindStatus: readonly { readonly kind: string; readonly status: string; readonly n: number }[];
}

/** The settled history by kind and status: counted on a small table, estimated on a large one. */
async function historyTotals(db: Db, exactBelowRows: number): Promise<Totals> {
  const { rows: est } = await db.query<{ rows: number; status: Record<string, number> | null; kind: Record<string, number> | null }>(
    `SELECT c.reltuples::float8 AS rows,
            (SELECT jsonb_object_agg(u.v, u.f) FROM pg_stats s, unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS u(v, f)
              WHERE s.schemaname = 'public' AND s.tablename = 'payment_operations' AND s.attname = 'status') AS status,
            (SELECT jsonb_object_agg(u.v, u.f) FROM pg_stats s, unnest(s.most_common_vals::text::text[], s.most_common_freqs) AS u(v, f)
              WHERE s.schemaname = 'public' AND s.tablename = 'payment_operations' AND s.attname = 'kind') AS kind
       FROM pg_class c WHERE c.oid = 'payment_operations'::regclass`,
  );
  const e = est[0];
  // Never analysed (reltuples -1), no statistics yet, or small: count.
  if (!e || e.rows < exactBelowRows || !e.status || !e.kind) {
    const { rows } = await db.query<{ kind: string; status: string; n: number }>(
      `SELECT kind, status, count(*)::int AS n FROM payment_operations GROUP BY kind, status`,
    );
    return { exact: true, byKindStatus: rows };
  }
  // Estimated: the final statuses' share of the table times each kind's share (kind and status taken
  // as independent). The statistics are as fresh as autovacuum's last ANALYZE.
  const byKindStatus: { kind: string; status: string; n: number }[] = [];
  for (const [kind, kf] of Object.entries(e.kind)) {
    for (const status of ['succeeded', 'failed']) byKindStatus.push({ kind, status, n: Math.round(e.rows * kf * (e.status[status] ?? 0)) });
  }
  return { exact: false, byKindStatus };
}

export async function loadStats(db: Db, options: { readonly exactTotalsBelowRows?: number } = {}): Promise<Stats> {
  // Open and review figures read the partial index of open operations: O(open). The all-time figures
  // come from historyTotals: counted while the table is small, estimated once it is large.
  const { rows } = await db.query<{
    as_of: Date;
    pending: number;
    unknown: number;
    oldest_open: Date | null;
    oldest_open_id: string | null;
    due_now: number;
    leased: number;
    review_size: number;
    oldest_review: Date | null;
    oldest_review_id: string | null;
    rejected_24h: number;
    all_pending: number;
    all_unknown: number;
    open_by_kind: Record<string, { pending: number; unknown: number; inReview: number }> | null;
  }>(
    `WITH open_ops AS (
       SELECT id, kind, status, created_at, updated_at, review_reason, next_attempt_at, lease_until
         FROM payment_operations WHERE status IN ('pending', 'unknown')
     ),
     oldest_open AS (SELECT id, created_at FROM open_ops WHERE review_reason IS NULL ORDER BY created_at, id LIMIT 1),
     oldest_review AS (SELECT id, updated_at FROM open_ops WHERE review_reason IS NOT NULL ORDER BY updated_at, id LIMIT 1)
     SELECT now() AS as_of,
            (SELECT count(*)::int FROM open_ops WHERE review_reason IS NULL AND status = 'pending') AS pending,
            (SELECT count(*)::int FROM open_ops WHERE review_reason IS NULL AND status = 'unknown') AS unknown,
            (SELECT created_at FROM oldest_open) AS oldest_open,
            (SELECT id FROM oldest_open) AS oldest_open_id,
            (SELECT count(*)::int FROM open_ops
              WHERE review_reason IS NULL AND next_attempt_at <= now() AND (lease_until IS NULL OR lease_until <= now())) AS due_now,
            (SELECT count(*)::int FROM open_ops WHERE lease_until > now()) AS leased,
            (SELECT count(*)::int FROM open_ops WHERE review_reason IS NOT NULL) AS review_size,
            (SELECT updated_at FROM oldest_review) AS oldest_review,
            (SELECT id FROM oldest_review) AS oldest_review_id,
            (SELECT count(*)::int FROM rejected_messages WHERE received_at > now() - interval '24 hours') AS rejected_24h,
            (SELECT count(*)::int FROM open_ops WHERE status = 'pending') AS all_pending,
            (SELECT count(*)::int FROM open_ops WHERE status = 'unknown') AS all_unknown,
            (SELECT jsonb_object_agg(kind, jsonb_build_object('pending', pending, 'unknown', unknown, 'inReview', in_review))
               FROM (SELECT kind,
                            count(*) FILTER (WHERE status = 'pending' AND review_reason IS NULL)::int AS pending,
                            count(*) FILTER (WHERE status = 'unknown' AND review_reason IS NULL)::int AS unknown,
                            count(*) FILTER (WHERE review_reason IS NOT NULL)::int AS in_review
                       FROM open_ops GROUP BY kind) k) AS open_by_kind`,
  );
  const row = rows[0]!;
  const totals = await historyTotals(db, options.exactTotalsBelowRows ?? EXACT_TOTALS_BELOW_ROWS);
  const outbox = await outboxGauges(db);
  const asOf = row.as_of.getTime();
  const age = (date: Date | null) => (date ? seconds((asOf - date.getTime()) / 1000) : 0);
  const settled = (kind: string | null, status: string) =>
    totals.byKindStatus.filter((t) => (kind === null || t.kind === kind) && t.status === status).reduce((a, t) => a + t.n, 0);
  const open = row.open_by_kind ?? {};
  const kindCounts = (kind: 'charge' | 'refund'): KindCounts => {
    const o = open[kind] ?? { pending: 0, unknown: 0, inReview: 0 };
    const succeeded = settled(kind, 'succeeded');
    const failed = settled(kind, 'failed');
    return { pending: o.pending, unknown: o.unknown, inReview: o.inReview, succeeded, failed, total: o.pending + o.unknown + o.inReview + succeeded + failed };
  };
  const byKind = { charge: kindCounts('charge'), refund: kindCounts('refund') };
  // Every open operation by status, in review or not (the open index), beside the settled ones.
  const operations = {
    pending: row.all_pending,
    unknown: row.all_unknown,
    succeeded: settled(null, 'succeeded'),
    failed: settled(null, 'failed'),
  };
  return {
    asOf: row.as_of.toISOString(),
    operations: { ...operations, total: operations.pending + operations.unknown + operations.succeeded + operations.failed },
    totalsEstimated: !totals.exact,
    byKind,
    open: {
      pending: row.pending,
      unknown: row.unknown,
      oldestCreatedAt: iso(row.oldest_open),
      oldestAgeSeconds: age(row.oldest_open),
      oldestOperationId: row.oldest_open_id,
      dueNow: row.due_now,
      leased: row.leased,
    },
    review: { size: row.review_size, oldestSince: iso(row.oldest_review), oldestAgeSeconds: age(row.oldest_review), oldestOperationId: row.oldest_review_id },
    rejected: { last24h: row.rejected_24h },
    outbox: { unpublished: outbox.unpublished, oldestUnpublishedAgeSeconds: seconds(outbox.oldestUnpublishedAgeSeconds) },
  };
}

export interface RejectedMessage {
  readonly id: number;
  readonly messageId: string;
  readonly receivedAt: string;
  readonly reasonCode: string;
  readonly reason: string;
  readonly orderId: string | null;
  readonly operationId: string | null;
  readonly bodySha256: string;
  /** Null once the body was removed (bodyRemoved says why): body_sha256 stays the evidence of what came. */
  readonly bodyBytes: number | null;
  /** Why the raw body is gone (retention after REJECTED_BODY_RETENTION_DAYS, or a customer's erasure); null while it is kept. */
  readonly bodyRemoved: { readonly why: 'retention' | 'erasure'; readonly at: string } | null;
  /** Only when asked for (--with-body): a body may carry anything a producer sent. */
  readonly rawBody?: string;
}

export interface RejectedFilter {
  readonly sinceMs: number | null;
  /** Any of these codes; null: every code. */
  readonly reasonCodes: readonly string[] | null;
  readonly orderId: string | null;
  readonly limit: number;
  readonly withBody: boolean;
}

/**
 * Who reads producers' raw bodies (they may hold anything a producer sent): written to
 * operator_reads (migrations/010, append-only) by the same statement that reads them, so no body is
 * ever shown without its record.
 */
export interface RawBodyReader {
  readonly actor: string;
  readonly verified: boolean;
  readonly command: string;
  readonly detail: Readonly<Record<string, unknown>>;
}

export async function listRejected(
  db: Db,
  filter: RejectedFilter,
  reader?: RawBodyReader,
): Promise<{ asOf: string; total: number; messages: RejectedMessage[] }> {
  if (filter.withBody && !reader) throw new Error('listRejected: raw bodies are only read with the reader recorded');
  const { rows } = await db.query<{ as_of: Date; total: number; items: RejectedRow[] }>(
    `WITH matching AS (
       SELECT * FROM rejected_messages r
        WHERE ($1::bigint IS NULL OR r.received_at > now() - $1::bigint * interval '1 millisecond')
          AND ($2::text[] IS NULL OR r.reason_code = ANY ($2::text[]))
          AND ($3::text IS NULL OR r.order_id = $3::text)
     ),
     page AS (SELECT * FROM matching ORDER BY received_at DESC, id DESC LIMIT $4),
     audit AS (
       INSERT INTO operator_reads (actor, verified, command, what, rejected_message_ids, detail)
       SELECT $6::text, $7::boolean, $8::text, 'rejected_message_body', coalesce(array_agg(p.id ORDER BY p.id), '{}'), $9::jsonb
         FROM page p HAVING $5::boolean
     )
     SELECT now() AS as_of,
            (SELECT count(*)::int FROM matching) AS total,
            coalesce((SELECT jsonb_agg(jsonb_build_object(
                        'id', m.id, 'message_id', m.message_id, 'received_at', m.received_at, 'reason_code', m.reason_code,
                        'reason', m.reason, 'order_id', m.order_id, 'operation_id', m.operation_id, 'body_sha256', m.body_sha256,
                        'body_bytes', octet_length(m.raw_body), 'raw_body', CASE WHEN $5::boolean THEN m.raw_body END,
                        'raw_body_removed_why', m.raw_body_removed_why, 'raw_body_removed_at', m.raw_body_removed_at)
                        ORDER BY m.received_at DESC, m.id DESC)
                        FROM page m), '[]'::jsonb) AS items`,
    [
      filter.sinceMs,
      filter.reasonCodes,
      filter.orderId,
      filter.limit,
      filter.withBody,
      reader?.actor ?? null,
      reader?.verified ?? false,
      reader?.command ?? null,
      JSON.stringify(reader?.detail ?? {}),
    ],
  );
  const row = rows[0]!;
  return { asOf: row.as_of.toISOString(), total: row.total, messages: row.items.map((r) => toRejected(r, filter.withBody)) };
}

/** The record of raw-body reads, newest first (operator_reads). */
export async function listRawBodyReads(db: Db, limit = 50): Promise<readonly { id: number; occurredAt: string; actor: string; verified: boolean; command: string; rejectedMessageIds: number[]; detail: Record<string, unknown> }[]> {
  const { rows } = await db.query<{ id: string; occurred_at: Date; actor: string; verified: boolean; command: string; rejected_message_ids: string[]; detail: Record<string, unknown> }>(
    `SELECT id, occurred_at, actor, verified, command, rejected_message_ids, detail FROM operator_reads ORDER BY id DESC LIMIT $1`,
    [limit],
  );
  return rows.map((r) => ({ id: Number(r.id), occurredAt: r.occurred_at.toISOString(), actor: r.actor, verified: r.verified, command: r.command, rejectedMessageIds: r.rejected_message_ids.map(Number), detail: r.detail }));
}

interface RejectedRow {
  id: number | string;
  message_id: string;
  received_at: string;
  reason_code: string;
  reason: string;
  order_id: string | null;
  operation_id: string | null;
  body_sha256: string;
  body_bytes: number | null;
  raw_body: string | null;
  raw_body_removed_why?: 'retention' | 'erasure' | null;
  raw_body_removed_at?: string | null;
}

function toRejected(row: RejectedRow, withBody: boolean): RejectedMessage {
  return {
    id: Number(row.id),
    messageId: row.message_id,
    receivedAt: new Date(row.received_at).toISOString(),
    reasonCode: row.reason_code,
    reason: row.reason,
    orderId: row.order_id,
    operationId: row.operation_id,
    bodySha256: row.body_sha256,
    bodyBytes: row.body_bytes,
    bodyRemoved: row.raw_body_removed_why && row.raw_body_removed_at ? { why: row.raw_body_removed_why, at: new Date(row.raw_body_removed_at).toISOString() } : null,
    ...(withBody && row.raw_body !== null ? { rawBody: row.raw_body } : {}),
  };
}

/**
 * Accept an identity proof once (ops_identity_proofs, migrations/010): false when its signature was
 * used before. Proofs older than a day (STS honours one for 15 minutes) are removed by the same statement.
 */
export async function recordIdentityProof(db: Db, caller: { readonly signature: string; readonly arn: string }): Promise<boolean> {
  const { rows } = await db.query<{ signature: string }>(
    `WITH expired AS (DELETE FROM ops_identity_proofs WHERE used_at < now() - interval '1 day')
     INSERT INTO ops_identity_proofs (signature, caller_arn) VALUES ($1, $2) ON CONFLICT (signature) DO NOTHING RETURNING signature`,
    [caller.signature, caller.arn],
  );
  return rows.length === 1;
}
