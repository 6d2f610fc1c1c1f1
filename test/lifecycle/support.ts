// Rows of every age for the retention and erasure tests, written as the pipeline writes them (INSERTs
// are what the guards always allow), with the times they would have had that many days ago.
import { randomBytes, randomUUID } from 'node:crypto';
import type pg from 'pg';
import type { Db } from '../../lambdas/payments/db.ts';

export const DAY_MS = 86_400_000;

/** A uuidv7 of a given moment (RFC 9562, section 5.7), as uuidv7() would have made it then. */
export function uuidv7At(at: Date): string {
  const hex = at.getTime().toString(16).padStart(12, '0') + '7' + randomBytes(2).toString('hex').slice(0, 3) + ((8 + (randomBytes(1)[0]! & 3)).toString(16)) + randomBytes(8).toString('hex').slice(0, 15);
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20, 32)}`;
}

export const daysAgo = (now: Date, days: number) => new Date(now.getTime() - days * DAY_MS);

/** A final succeeded charge, created `at`. */
export async function finalCharge(db: Db, at: Date, overrides: { customerId?: string; status?: 'succeeded' | 'failed' | 'pending' } = {}): Promise<{ id: string; orderId: string; externalId: string }> {
  const orderId = `order-${randomUUID()}`;
  const externalId = `pi_${randomBytes(8).toString('hex')}`;
  const status = overrides.status ?? 'succeeded';
  const final = status !== 'pending';
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO payment_operations (id, order_id, amount, currency, customer_id, payment_method, status, external_id, created_at, updated_at,
                                     settled_at, next_attempt_at, description, charge_metadata, last_error)
     VALUES ($1, $2, 1999, 'eur', $3, 'pm_card_visa', $4, $5, $6, $6, CASE WHEN $7 THEN $6::timestamptz END, CASE WHEN $7 THEN NULL ELSE $6::timestamptz END,
             'Order for Jane Doe, 1 Main St', '{"email": "jane@example.com"}', CASE WHEN $4 = 'failed' THEN 'Your card was declined.' END)
     RETURNING id`,
    [uuidv7At(at), orderId, overrides.customerId ?? `cus_${randomBytes(6).toString('hex')}`, status, final ? externalId : null, at, final],
  );
  return { id: rows[0]!.id, orderId, externalId };
}

let sequence = 0;
/** An outbox row of the operation, created `createdAt`, published `publishedAt` (null: not yet). */
export async function outboxRow(db: Db, operationId: string, createdAt: Date, publishedAt: Date | null): Promise<string> {
  const eventId = uuidv7At(createdAt);
  sequence++;
  await db.query(
    `INSERT INTO outcome_events (event_id, operation_id, event_type, payload, created_at, published_at)
     VALUES ($1::uuid, $2, 'Charge Succeeded', jsonb_build_object('eventId', $1::text, 'sequence', $5::int), $3, $4)`,
    [eventId, operationId, createdAt, publishedAt, sequence],
  );
  return eventId;
}

/** An inbox row received `receivedAt`, applied then (or open), with a whole payload. */
export async function inboxEvent(db: Db, receivedAt: Date, options: { applied?: boolean; operationId?: string | null; objectId?: string; eventId?: string } = {}): Promise<string> {
  const eventId = options.eventId ?? `evt_${randomBytes(10).toString('hex')}`;
  const applied = options.applied ?? true;
  await db.query(
    `INSERT INTO stripe_events (event_id, event_type, stripe_created_at, object_id, source, received_at, payload, applied_at, outcome, operation_id, last_error)
     VALUES ($1, 'payment_intent.succeeded', $2, $3, 'webhook', $2, $4::jsonb, CASE WHEN $5 THEN $2::timestamptz END, CASE WHEN $5 THEN 'stale' END, $6, CASE WHEN $5 THEN NULL ELSE 'waiting' END)`,
    [eventId, receivedAt, options.objectId ?? `pi_${randomBytes(6).toString('hex')}`, JSON.stringify({ id: eventId, type: 'payment_intent.succeeded', data: { object: { id: 'pi_x' } } }), applied, options.operationId ?? null],
  );
  return eventId;
}

export async function rejectedRow(db: Db, receivedAt: Date, body = '{"orderId": 1}', orderId: string | null = null): Promise<number> {
  const { rows } = await db.query<{ id: string }>(
    `INSERT INTO rejected_messages (message_id, received_at, reason_code, reason, order_id, body_sha256, raw_body)
     VALUES ($1, $2, 'invalid_body', 'orderId: expected string', $3, encode(sha256(convert_to($4, 'UTF8')), 'hex'), $4) RETURNING id`,
    [randomUUID(), receivedAt, orderId, body],
  );
  return Number(rows[0]!.id);
}

/** A connection as the application role (what charge, reconcile and ops connect as), for `work`. */
export async function asApplicationRole<T>(pool: pg.Pool, work: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('SET ROLE charges_app');
    return await work(client);
  } finally {
    await client.query('RESET ROLE').catch(() => {});
    client.release();
  }
}

/** The SQLSTATE and message a statement fails with, or 'ok'. */
export async function outcomeOf(db: Db, sql: string, params: unknown[] = []): Promise<string> {
  try {
    await db.query(sql, params);
    return 'ok';
  } catch (error) {
    const e = error as { code?: string; message: string };
    return `${e.code}: ${e.message}`;
  }
}
