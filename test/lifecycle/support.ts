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
    `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at, published_at)
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

/**
 * Moves orders' rows `days` into the past, as if the orders had been taken then: every timestamptz
 * column of their operations, audit trail, watches, outbox events (each event_id re-made as the
 * uuidv7 of its moved created_at, as uuidv7() would have made it then, and the payload's eventId with
 * it), Stripe events (by operation, or by object: the PaymentIntent of an operation) and findings, and
 * of the given rejected messages. Rows must be moved, not only the clock: the lifecycle functions and
 * the guards compare with the DATABASE's own clock (migration 017), so no clock a caller passes makes
 * a row written minutes ago due — by design. The guards are set aside for this session's move only
 * (session_replication_role = replica: the owner's connection), as bench:storage does.
 */
export async function ageRows(pool: pg.Pool, days: number, target: { orderIds: readonly string[]; rejectedIds?: readonly string[] }): Promise<{ operations: number; outbox: number; stripeEvents: number; rejected: number }> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('SET LOCAL session_replication_role = replica');
    // Every timestamptz column of a table, moved on the rows whose `key` is one of `keys` (the column
    // names come from the catalog, quoted by format's %I; the values are parameters).
    await client.query(`
      CREATE OR REPLACE FUNCTION pg_temp.shift_times(p_table regclass, p_key text, p_keys text[], p_days int) RETURNS integer LANGUAGE plpgsql AS $f$
      DECLARE sets text; n integer;
      BEGIN
        SELECT string_agg(format('%I = %I - make_interval(days => $2)', attname, attname), ', ') INTO sets
          FROM pg_attribute WHERE attrelid = p_table AND atttypid = 'timestamptz'::regtype AND attnum > 0 AND NOT attisdropped;
        EXECUTE format('UPDATE %s SET %s WHERE %I::text = ANY ($1)', p_table, sets, p_key) USING p_keys, p_days;
        GET DIAGNOSTICS n = ROW_COUNT;
        RETURN n;
      END $f$`);
    const { rows: ops } = await client.query<{ id: string; external_id: string | null }>(`SELECT id::text, external_id FROM payment_operations WHERE order_id = ANY($1::text[])`, [target.orderIds]);
    const opIds = ops.map((o) => o.id);
    const externals = ops.flatMap((o) => (o.external_id ? [o.external_id] : []));
    const { rows: events } = await client.query<{ event_id: string }>(`SELECT event_id FROM stripe_events WHERE operation_id = ANY($1::uuid[]) OR object_id = ANY($2::text[])`, [opIds, externals]);
    const eventIds = events.map((e) => e.event_id);
    const { rows: findings } = await client.query<{ id: string }>(`SELECT id::text FROM stripe_event_findings WHERE operation_id = ANY($1::uuid[]) OR event_id = ANY($2::text[])`, [opIds, eventIds]);
    const shift = async (table: string, key: string, keys: readonly string[]) =>
      (await client.query<{ n: number }>('SELECT pg_temp.shift_times($1::regclass, $2, $3::text[], $4) AS n', [table, key, keys, days])).rows[0]!.n;
    const operations = await shift('payment_operations', 'id', opIds);
    await shift('payment_operation_events', 'operation_id', opIds);
    await shift('payment_operation_watches', 'operation_id', opIds);
    const outbox = await shift('outcome_events', 'operation_id', opIds);
    await client.query(
      `UPDATE outcome_events o SET event_id = m.id, stored_payload = CASE WHEN o.stored_payload ? 'eventId' THEN jsonb_set(o.stored_payload, '{eventId}', to_jsonb(m.id::text)) ELSE o.stored_payload END
         FROM (SELECT event_id AS old,
                      (lpad(to_hex(floor(extract(epoch FROM created_at) * 1000)::bigint), 12, '0') || substr(replace(event_id::text, '-', ''), 13))::uuid AS id
                 FROM outcome_events WHERE operation_id = ANY($1::uuid[])) m
        WHERE o.event_id = m.old`,
      [opIds],
    );
    const stripeEvents = await shift('stripe_events', 'event_id', eventIds);
    await shift('stripe_event_findings', 'id', findings.map((f) => f.id));
    const { rows: rejectedRows } = await client.query<{ id: string }>(
      `SELECT id::text FROM rejected_messages WHERE order_id = ANY($1::text[]) OR id::text = ANY($2::text[])`,
      [target.orderIds, target.rejectedIds ?? []],
    );
    const rejected = await shift('rejected_messages', 'id', rejectedRows.map((r) => r.id));
    await client.query('COMMIT');
    return { operations, outbox, stripeEvents, rejected };
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}
