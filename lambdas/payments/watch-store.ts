// All SQL of the watch after a re-issue (migrations/012_reissue_watch.sql; the decisions are watch.ts).
// The watch is started by the re-issue's own statement (watchOnReissueSql, in operations-store.ts
// reissueAfterProof and review.ts reissueInReview), so no re-issue can exist without its watch; a look
// is claimed (lease, SKIP LOCKED) and recorded (fenced by the lease) in one statement each, like an
// operation's attempt. Values are bound parameters; batches travel as one jsonb array parameter.
import { prepared, type Db } from './db.ts';
import type { DuplicateRemedy } from './decisions.ts';
import { toOperation } from './operations-store.ts';
import type { WatchedOperation, WatchFinding, WatchLook } from './watch.ts';

type OperationRow = Parameters<typeof toOperation>[0];

interface WatchJson {
  operation_id: string;
  watched_from: string;
  reissued_at: string;
  final_check_at: string;
  checks: number;
  failures: number;
  lease_token: string;
}

/**
 * Claim up to `limit` due watches (oldest due first; SKIP LOCKED, then a lease like an operation's),
 * each with its operation and, for a refund, its charge's PaymentIntent. Reads the partial index over
 * open watches only.
 */
export async function claimDueWatches(db: Db, limit: number, leaseToken: string, leaseMs: number): Promise<WatchedOperation[]> {
  const { rows } = await prepared<{ watch: WatchJson; op: OperationRow; charge_payment_intent: string | null; db_now: Date }>(
    db,
    'payments.claim_due_watches',
    `WITH due AS (
       SELECT w.operation_id FROM payment_operation_watches w
        WHERE w.next_check_at <= now() AND (w.lease_until IS NULL OR w.lease_until <= now())
        ORDER BY w.next_check_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
     ),
     claimed AS (
       UPDATE payment_operation_watches AS w SET
         lease_token = $2::uuid,
         lease_until = now() + $3::bigint * interval '1 millisecond',
         updated_at  = now()
         FROM due WHERE w.operation_id = due.operation_id
       RETURNING w.*
     )
     SELECT to_jsonb(c) AS watch, to_jsonb(p) AS op,
            (SELECT chg.external_id FROM payment_operations chg WHERE chg.id = p.parent_operation_id) AS charge_payment_intent,
            now() AS db_now
       FROM claimed c JOIN payment_operations p ON p.id = c.operation_id
      ORDER BY c.next_check_at`,
    [limit, leaseToken, leaseMs],
  );
  return rows.map((r) => ({
    watch: {
      operationId: r.watch.operation_id,
      watchedFrom: new Date(r.watch.watched_from),
      reissuedAt: new Date(r.watch.reissued_at),
      finalCheckAt: new Date(r.watch.final_check_at),
      checks: r.watch.checks,
      failures: r.watch.failures,
    },
    op: toOperation(r.op),
    chargePaymentIntentId: r.charge_payment_intent,
    claimedAt: new Date(r.db_now),
    leaseToken: r.watch.lease_token,
  }));
}

/** One look to record: the claim it belongs to, and what watch.ts decided. */
export interface WatchLookWrite {
  readonly watched: WatchedOperation;
  readonly look: WatchLook;
  /** The look's List evidence (window, scope) for the audit line. */
  readonly evidence: Readonly<Record<string, unknown>>;
}

export interface WatchLookResult {
  readonly operationId: string;
  /** False: the watch's lease was lost (another sweep took it over): nothing was written. */
  readonly applied: boolean;
  /** Remedy refund operations this look created (due at once for the reconciler). */
  readonly remediesCreated: number;
  /** Findings this look recorded that did not exist before. */
  readonly newFindings: number;
}

/**
 * Record a batch of looks in ONE statement, each fenced by its watch lease: the watch's next look (or
 * its close), an audit line `watch_checked` on the operation (looks that listed, or failed to), the
 * duplicate-charge remedy's refunds (only for a charge that succeeded; once per PaymentIntent, the
 * unique indexes of 007), and the findings (once per object, like an event's).
 */
export async function recordWatchLooks(db: Db, writes: readonly WatchLookWrite[], actor: string): Promise<WatchLookResult[]> {
  if (writes.length === 0) return [];
  const payload = writes.map(({ watched, look, evidence }) => {
    const findings: WatchFinding[] = look.kind === 'looked' ? [...look.findings] : look.kind === 'failed' && look.finding ? [look.finding] : [];
    const remedies: DuplicateRemedy[] = look.kind === 'looked' ? [...look.remedies] : [];
    return {
      operation_id: watched.op.id,
      lease_token: watched.leaseToken,
      looked: look.kind === 'looked',
      failed: look.kind === 'failed',
      next_check_at: look.nextCheckAt?.toISOString() ?? null,
      final_check_at: look.kind === 'looked' ? look.finalCheckAt.toISOString() : null,
      audit: look.kind !== 'later',
      detail: {
        ...evidence,
        ...(look.kind === 'looked' ? look.detail : look.kind === 'failed' ? { failed: look.reason, nextCheckAt: look.nextCheckAt?.toISOString() ?? null } : {}),
      },
      remedies,
      findings,
    };
  });
  const { rows } = await prepared<{ operation_id: string; applied: boolean; remedies: number; findings: number }>(
    db,
    'payments.record_watch_looks',
    `WITH w AS (
       SELECT * FROM jsonb_to_recordset($1::jsonb) AS w(
         operation_id uuid, lease_token uuid, looked boolean, failed boolean, next_check_at timestamptz,
         final_check_at timestamptz, audit boolean, detail jsonb, remedies jsonb, findings jsonb)
     ),
     upd AS (
       UPDATE payment_operation_watches AS x SET
         checks         = x.checks + CASE WHEN w.looked THEN 1 ELSE 0 END,
         failures       = CASE WHEN w.failed THEN x.failures + 1 WHEN w.looked THEN 0 ELSE x.failures END,
         final_check_at = greatest(x.final_check_at, coalesce(w.final_check_at, x.final_check_at)),
         next_check_at  = w.next_check_at,
         closed_at      = CASE WHEN w.next_check_at IS NULL THEN now() END,
         lease_token    = NULL,
         lease_until    = NULL,
         updated_at     = now()
         FROM w
        WHERE x.operation_id = w.operation_id AND x.lease_token = w.lease_token
       RETURNING x.operation_id
     ),
     op AS (SELECT p.*, w.audit, w.detail, w.remedies, w.findings FROM payment_operations p JOIN upd u ON u.operation_id = p.id JOIN w ON w.operation_id = p.id),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT id, $2::text, 'watch_checked', status, status, external_id, key_generation, detail FROM op WHERE audit
     ),
     remedy AS (
       INSERT INTO payment_operations AS r
         (order_id, kind, refund_id, parent_operation_id, refund_reason, refund_payment_intent, amount, currency, customer_id, payment_method)
       SELECT c.order_id, 'refund', d."refundId", c.id, 'duplicate', d."paymentIntentId", d.amount, c.currency, c.customer_id, c.payment_method
         FROM op c CROSS JOIN LATERAL jsonb_to_recordset(c.remedies) AS d("refundId" text, "paymentIntentId" text, amount bigint)
        WHERE c.kind = 'charge' AND c.status = 'succeeded'
       ON CONFLICT DO NOTHING
       RETURNING r.id, r.status, r.key_generation, r.refund_payment_intent, r.parent_operation_id
     ),
     remedy_audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, key_generation, detail)
       SELECT id, $2::text, 'requested', NULL, status, key_generation,
              jsonb_build_object('remedy', 'duplicate_charge', 'refundedPaymentIntent', refund_payment_intent,
                                 'chargeOperationId', parent_operation_id, 'evidence', 'watch')
         FROM remedy
     ),
     finding AS (
       INSERT INTO stripe_event_findings
         (kind, payment_intent_id, event_id, operation_id, claimed_operation_id, order_id, amount, currency, status, reason, detail, source)
       SELECT f.kind, f."objectId", NULL, o.id, o.id::text, o.order_id, f.amount, f.currency, f.status, left(f.reason, 1000), o.detail, 'watch'
         FROM op o CROSS JOIN LATERAL jsonb_to_recordset(o.findings) AS f(kind text, "objectId" text, amount bigint, currency text, status text, reason text)
       ON CONFLICT (kind, payment_intent_id) DO NOTHING
       RETURNING operation_id
     )
     SELECT w.operation_id::text, u.operation_id IS NOT NULL AS applied,
            (SELECT count(*)::int FROM remedy r WHERE r.parent_operation_id = w.operation_id) AS remedies,
            (SELECT count(*)::int FROM finding f WHERE f.operation_id = w.operation_id) AS findings
       FROM w LEFT JOIN upd u ON u.operation_id = w.operation_id`,
    [JSON.stringify(payload), actor],
  );
  return rows.map((r) => ({ operationId: r.operation_id, applied: r.applied, remediesCreated: r.remedies, newFindings: r.findings }));
}

/** The watch's gauges: open watches, and open findings it made (the ReissueWatchFinding alarm). O(open). */
export async function watchGauges(db: Db): Promise<{ readonly openWatches: number; readonly openWatchFindings: number }> {
  const { rows } = await db.query<{ watches: number; findings: number }>(
    `SELECT (SELECT count(*)::int FROM payment_operation_watches WHERE next_check_at IS NOT NULL) AS watches,
            (SELECT count(*)::int FROM stripe_event_findings WHERE resolved_at IS NULL AND source = 'watch') AS findings`,
  );
  return { openWatches: rows[0]?.watches ?? 0, openWatchFindings: rows[0]?.findings ?? 0 };
}

/** The watch of one operation, for the operator tool and tests; null when it was never re-issued. */
export async function findWatch(db: Db, operationId: string): Promise<{
  readonly watchedFrom: Date;
  readonly reissuedAt: Date;
  readonly reissues: number;
  readonly finalCheckAt: Date;
  readonly nextCheckAt: Date | null;
  readonly checks: number;
  readonly failures: number;
  readonly closedAt: Date | null;
} | null> {
  const { rows } = await db.query<{ w: Record<string, string | number | null> }>(
    'SELECT to_jsonb(w) AS w FROM payment_operation_watches w WHERE w.operation_id = $1::uuid',
    [operationId],
  );
  const w = rows[0]?.w;
  if (!w) return null;
  const date = (v: unknown) => (v === null || v === undefined ? null : new Date(String(v)));
  return {
    watchedFrom: date(w.watched_from)!,
    reissuedAt: date(w.reissued_at)!,
    reissues: Number(w.reissues),
    finalCheckAt: date(w.final_check_at)!,
    nextCheckAt: date(w.next_check_at),
    checks: Number(w.checks),
    failures: Number(w.failures),
    closedAt: date(w.closed_at),
  };
}
