// An outbox row's occurredAt is read from its created_at (migrations/026): the payload, since 028 a
// function of the row (e.payload), builds the ISO text from immutable pieces, and must give exactly
// what to_char gave the writers before. Real PostgreSQL.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

const TO_CHAR = `to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`;

let db: TestDatabase;
let operationId: string;
beforeAll(async () => {
  db = await createTestDatabase('occurred_at');
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ('occurred-at', 1000, 'eur', 'cus_o', 'pm_card_visa') RETURNING id`,
  );
  operationId = rows[0]!.id;
});
afterAll(async () => {
  await db.drop();
});

describe("an outbox row's occurredAt is its created_at (026)", () => {
  it('is the text to_char gave, to the millisecond, over instants chosen to break a formatter, whatever the session zone', async () => {
    const client = await db.pool.connect();
    try {
      // The session's zone and date style must not matter: the text is UTC by construction.
      await client.query(`SET TimeZone = 'Pacific/Chatham'`);
      await client.query(`SET DateStyle = 'SQL, DMY'`);
      const { rows } = await client.query<{ derived: string; expected: string; created: string }>(
        `WITH instants(at) AS (
           SELECT unnest(ARRAY[
             '2026-12-31 23:59:59.999999+00', '2027-01-01 00:00:00+00', '2028-02-29 12:34:56.000999+00',
             '2026-03-29 00:59:59.9995+00', '2026-06-15 08:09:07.5+02', '2026-10-25 01:30:00.001+01',
             '2026-01-01 00:00:00.000001+00', '2099-09-09 09:09:09.09+00', '2001-02-03 04:05:06.789+00'
           ]::timestamptz[])
           UNION ALL
           SELECT generate_series('2026-01-01 00:00:00.000123+00'::timestamptz, '2027-01-01 00:00:00+00'::timestamptz,
                                  interval '1 day 1 hour 1 minute 1.001001 second')
         ),
         inserted AS (
           INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at)
           SELECT uuidv7(), $1::uuid, 'Charge Succeeded', jsonb_build_object('sequence', 1000 + row_number() OVER ()), at
             FROM instants
           RETURNING outcome_events.payload ->> 'occurredAt' AS derived, ${TO_CHAR} AS expected, created_at::text AS created
         )
         SELECT * FROM inserted`,
        [operationId],
      );
      expect(rows.length).toBeGreaterThan(300);
      expect(rows.filter((r) => r.derived !== r.expected)).toEqual([]);
      expect(rows.some((r) => r.derived === '2026-12-31T23:59:59.999Z')).toBe(true);
      expect(rows.some((r) => r.derived === '2028-02-29T12:34:56.000Z')).toBe(true);
    } finally {
      await client.query('RESET TimeZone; RESET DateStyle');
      client.release();
    }
  });

  it('a row that stored its occurredAt (written before 026) keeps it', async () => {
    const { rows } = await db.pool.query<{ occurred: string }>(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at)
       VALUES (uuidv7(), $1::uuid, 'Charge Succeeded', '{"sequence": 1, "occurredAt": "2026-11-30T10:00:00.123Z"}', '2026-12-01 00:00:00+00')
       RETURNING outcome_events.payload ->> 'occurredAt' AS occurred`,
      [operationId],
    );
    expect(rows[0]!.occurred).toBe('2026-11-30T10:00:00.123Z');
  });
});

describe('the published payload is a function of the row, not a column (028)', () => {
  it('no table of the schema has a virtual column: PostgreSQL 18 would rebuild it into every CHECK and trigger condition at every statement that writes the table', async () => {
    // The outbox's virtual payload made each outbox insert about 9 times dearer on the server
    // (docs/decisions.md). A virtual column added to any table (or partition) turns this red.
    const { rows } = await db.pool.query<{ relation: string; column: string }>(
      `SELECT c.relname AS relation, a.attname AS column
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND a.attgenerated = 'v' AND NOT a.attisdropped`,
    );
    expect(rows).toEqual([]);
  });

  it('reads as e.payload and payload(e), the same jsonb, with the ids, version and occurredAt from the row', async () => {
    const { rows } = await db.pool.query<{ attribute: Record<string, unknown>; call: Record<string, unknown>; event_id: string }>(
      `INSERT INTO outcome_events AS e (event_id, operation_id, event_type, stored_payload, created_at)
       VALUES (uuidv7(), $1::uuid, 'Charge Succeeded', '{"sequence": 7, "status": "succeeded"}', '2026-12-03 10:11:12.345678+00')
       RETURNING e.event_id::text, e.payload AS attribute, payload(e) AS call`,
      [operationId],
    );
    const [row] = rows;
    expect(row!.attribute).toEqual({ version: 1, occurredAt: '2026-12-03T10:11:12.345Z', sequence: 7, status: 'succeeded', eventId: row!.event_id, operationId });
    expect(row!.call).toEqual(row!.attribute);
  });

  it('a column the payload reads cannot be dropped while the function stands', async () => {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await expect(client.query('ALTER TABLE outcome_events DROP COLUMN stored_payload')).rejects.toThrow(/depends on|other objects depend/);
    } finally {
      await client.query('ROLLBACK');
      client.release();
    }
  });
});
