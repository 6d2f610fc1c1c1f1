// All SQL of rejected_messages: messages the charge handler acknowledged without making (or while
// refusing) an operation — not JSON, against the schema, or an order that conflicts with the one on
// record (DESIGN §7). Kept whole so that nothing is silently lost; one round trip per batch.
import { createHash } from 'node:crypto';
import type { Db } from './db.ts';

export const RejectReason = {
  invalidJson: 'invalid_json',
  invalidBody: 'invalid_body',
  orderConflict: 'order_conflict',
} as const;
export type RejectReason = (typeof RejectReason)[keyof typeof RejectReason];

export interface RejectedMessage {
  /** The SQS message id: a redelivery of the same message makes no second row. */
  readonly messageId: string;
  readonly reasonCode: RejectReason;
  /** Names fields and rules, never values (the body may carry anything). */
  readonly reason: string;
  readonly orderId?: string | null;
  /** The existing operation an order_conflict collided with. */
  readonly operationId?: string | null;
  /** The body exactly as received. */
  readonly rawBody: string;
}

/** What goes into raw_body / body_sha256 for one received body. */
export interface StoredBody {
  readonly text: string;
  /** Hex SHA-256 of the body as received (UTF-8), before any replacement: the evidence of what came. */
  readonly sha256: string;
  /** True when characters PostgreSQL text cannot hold were replaced. */
  readonly altered: boolean;
}

// PostgreSQL text cannot hold U+0000, and a lone UTF-16 surrogate has no UTF-8 form. SQS refuses both
// in a body, but the local runtime, a test or a future source may not: a body we cannot store would
// make the reject insert fail for ever and turn one poison message into a blocked message group.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

export function storedBody(raw: string): StoredBody {
  const sha256 = createHash('sha256').update(raw, 'utf8').digest('hex');
  const text = raw.replace(UNSTORABLE, '\uFFFD');
  return { text, sha256, altered: text !== raw };
}

/**
 * Record every reject of a batch in ONE statement. ON CONFLICT (message_id) DO NOTHING: a message we
 * rejected but could not acknowledge (the function died after the insert) comes back and finds its row.
 * Returns the message ids that were new rows.
 */
export async function recordRejectedMessages(db: Db, rejects: readonly RejectedMessage[]): Promise<Set<string>> {
  if (rejects.length === 0) return new Set();
  const payload = rejects.map((r) => {
    const body = storedBody(r.rawBody);
    return {
      message_id: r.messageId,
      reason_code: r.reasonCode,
      reason: body.altered ? `${r.reason} (characters PostgreSQL cannot store were replaced by U+FFFD in raw_body; body_sha256 is of the original)` : r.reason,
      order_id: r.orderId ?? null,
      operation_id: r.operationId ?? null,
      body_sha256: body.sha256,
      raw_body: body.text,
    };
  });
  const { rows } = await db.query<{ message_id: string }>(
    `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, operation_id, body_sha256, raw_body)
     SELECT message_id, reason_code, reason, order_id, operation_id, body_sha256, raw_body
       FROM jsonb_to_recordset($1::jsonb)
         AS r(message_id text, reason_code text, reason text, order_id text, operation_id uuid, body_sha256 text, raw_body text)
     ON CONFLICT (message_id) DO NOTHING
     RETURNING message_id`,
    [JSON.stringify(payload)],
  );
  return new Set(rows.map((row) => row.message_id));
}

/** Rejected in the last `windowSeconds` (the reconciler's gauge). Reads rejected_messages_received. */
export async function countRecentRejects(db: Db, windowSeconds: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM rejected_messages WHERE received_at > now() - $1::int * interval '1 second'`,
    [windowSeconds],
  );
  return rows[0]?.n ?? 0;
}
