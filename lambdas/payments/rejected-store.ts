// All SQL of rejected_messages: messages the charge handler acknowledged without making (or while
// refusing) an operation — not JSON, against the schema, or an order that conflicts with the one on
// record (docs/architecture.md#the-charge-handler, bad input). Kept whole so that nothing is silently lost; one round trip per batch (one per
// reject only when the batch statement fails).
import { createHash } from 'node:crypto';
import type { Db } from './db.ts';

export const RejectReason = {
  invalidJson: 'invalid_json',
  invalidBody: 'invalid_body',
  orderConflict: 'order_conflict',
  /** A refund id that exists with another amount or reason (nothing sent). */
  refundConflict: 'refund_conflict',
  /** A refund of an order without a charge, of a failed charge, or beyond what was charged (nothing sent). */
  refundRejected: 'refund_rejected',
  /** A capture of an existing capture with another amount (nothing sent). */
  authorizationConflict: 'authorization_conflict',
  /** A capture or cancel_authorization with no authorization to settle, above it, or after it was settled (nothing sent). */
  authorizationRejected: 'authorization_rejected',
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
  /** Hex SHA-256 of the body as received (UTF-8): the evidence of what came. */
  readonly sha256: string;
  /**
   * True when the body held characters PostgreSQL text cannot store: `text` is then the body as a
   * JSON string literal (escapes \u0000, \ud800 …), and JSON.parse(text) gives back the exact body.
   */
  readonly escaped: boolean;
}

// PostgreSQL text cannot hold U+0000, and a lone UTF-16 surrogate has no UTF-8 form. SQS refuses both
// in a body, but a JSON escape in the body (plain ASCII) becomes one in a parsed key, and the local
// runtime, a test or a future source may deliver them raw: text we cannot store would make the reject
// insert fail for ever and turn one poison message into a blocked message group.
const UNSTORABLE = /\u0000|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;
const UNSTORABLE_TEST = new RegExp(UNSTORABLE.source);

export function storedBody(raw: string): StoredBody {
  const sha256 = createHash('sha256').update(raw, 'utf8').digest('hex');
  // Lossless: JSON.stringify escapes a NUL and a lone surrogate (well-formed JSON.stringify, ES2019).
  if (UNSTORABLE_TEST.test(raw)) return { text: JSON.stringify(raw), sha256, escaped: true };
  return { text: raw, sha256, escaped: false };
}

/** Any other text of a row (reason, ids): what PostgreSQL cannot store becomes U+FFFD, and it is bounded. */
export function storableText(value: string, maxLength = 1_000): string {
  const text = value.replace(UNSTORABLE, '\uFFFD');
  return text.length > maxLength ? `${text.slice(0, maxLength)}…` : text;
}

const ESCAPED_NOTE = ' (raw_body is the body as a JSON string literal: it held characters PostgreSQL text cannot store; JSON.parse(raw_body) is the exact body, body_sha256 is of it)';

function toRow(r: RejectedMessage) {
  const body = storedBody(r.rawBody);
  const reason = storableText(r.reason);
  return {
    message_id: storableText(r.messageId, 200),
    reason_code: r.reasonCode,
    reason: body.escaped ? `${reason}${ESCAPED_NOTE}` : reason,
    order_id: r.orderId == null ? null : storableText(r.orderId, 200),
    operation_id: r.operationId ?? null,
    body_sha256: body.sha256,
    raw_body: body.text,
  };
}

export interface RejectWriteResult {
  /** Durable now: a new row, or the row an earlier delivery of the same message wrote. */
  readonly recorded: ReadonlySet<string>;
  /** Message ids whose own row could not be written (with the error): SQS delivers them again. */
  readonly failed: ReadonlyMap<string, unknown>;
}

const INSERT_REJECTS = `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, operation_id, body_sha256, raw_body)
     SELECT message_id, reason_code, reason, order_id, operation_id, body_sha256, raw_body
       FROM jsonb_to_recordset($1::jsonb)
         AS r(message_id text, reason_code text, reason text, order_id text, operation_id uuid, body_sha256 text, raw_body text)
     ON CONFLICT (message_id) DO NOTHING`;

/**
 * Record every reject of a batch: ONE statement when all goes well. ON CONFLICT (message_id) DO
 * NOTHING: a message we rejected but could not acknowledge (the function died after the insert)
 * comes back and finds its row. Every text is made storable first; should the batch statement still
 * fail, each reject is written on its own, so one row that cannot be written never takes the others
 * with it (only that message goes back to SQS). Never throws.
 */
export async function recordRejectedMessages(db: Db, rejects: readonly RejectedMessage[]): Promise<RejectWriteResult> {
  if (rejects.length === 0) return { recorded: new Set(), failed: new Map() };
  const rows = rejects.map(toRow);
  try {
    await db.query(INSERT_REJECTS, [JSON.stringify(rows)]);
    return { recorded: new Set(rejects.map((r) => r.messageId)), failed: new Map() };
  } catch {
    // Fall through: one row at a time.
  }
  const recorded = new Set<string>();
  const failed = new Map<string, unknown>();
  for (const [i, reject] of rejects.entries()) {
    try {
      await db.query(INSERT_REJECTS, [JSON.stringify([rows[i]])]);
      recorded.add(reject.messageId);
    } catch (error) {
      failed.set(reject.messageId, error);
    }
  }
  return { recorded, failed };
}

/** Rejected in the last `windowSeconds` (the reconciler's gauge). Reads rejected_messages_received. */
export async function countRecentRejects(db: Db, windowSeconds: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM rejected_messages WHERE received_at > now() - $1::int * interval '1 second'`,
    [windowSeconds],
  );
  return rows[0]?.n ?? 0;
}
