// An audit line or outbox row names an operation that exists, checked without locking the operation's
// row (migrations/024); a claim's lease is in columns of the audit trail, read back under its old keys
// (migrations/023). Real PostgreSQL, the real engine.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { claimById, loadEvidenceEvents, recordOutcomes } from '../lambdas/payments/operations-store.ts';
import { loadOperationHistory } from '../lambdas/payments/review.ts';
import { lastPossibleSendAt } from '../lambdas/payments/audit-trail.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('op_refs');
});
afterAll(async () => {
  await db.drop();
});

async function operation(orderId = `ref-${randomUUID()}`): Promise<string> {
  const { rows } = await db.pool.query<{ id: string }>(
    `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ($1, 1000, 'eur', 'cus_ref', 'pm_card_visa') RETURNING id`,
    [orderId],
  );
  return rows[0]!.id;
}

const outboxRow = (operationId: string) =>
  db.pool.query(
    `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
     VALUES (uuidv7(), $1, 'Charge Succeeded', jsonb_build_object('sequence', 1, 'status', 'succeeded'))`,
    [operationId],
  );

describe('an audit line or outbox row refers to an operation that exists (024)', () => {
  it('refuses an audit line for no operation, and the whole statement with it (SQLSTATE 23503, as a foreign key did)', async () => {
    const good = await operation();
    const missing = randomUUID();
    const insert = db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action) SELECT unnest($1::uuid[]), 'test', 'operator_note'`,
      [[good, missing]],
    );
    await expect(insert).rejects.toMatchObject({ code: '23503', message: expect.stringContaining(`payment operation ${missing}, which does not exist`) });
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM payment_operation_events WHERE operation_id = $1', [good]);
    expect(rows[0].n).toBe(0);
  });

  it('refuses an outbox row for no operation', async () => {
    await expect(outboxRow(randomUUID())).rejects.toMatchObject({ code: '23503', message: expect.stringMatching(/outcome_events refers to payment operation/) });
  });

  it('accepts lines for an operation made by the same statement, as a charge request writes them', async () => {
    const { rows } = await db.pool.query<{ n: number }>(
      `WITH op AS (
         INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ($1, 1000, 'eur', 'cus_ref', 'pm_card_visa') RETURNING id
       ), audit AS (
         INSERT INTO payment_operation_events (operation_id, actor, action) SELECT id, 'test', 'requested' FROM op RETURNING 1
       )
       SELECT count(*)::int AS n FROM audit`,
      [`ref-${randomUUID()}`],
    );
    expect(rows[0]!.n).toBe(1);
  });

  it('takes no lock on the operation’s row: an outcome written in an open transaction leaves it unlocked for others', async () => {
    // A foreign key's check locks the referenced row FOR KEY SHARE: a WAL record each time, and a
    // row whose xmax names the inserting transaction. The check by query locks nothing.
    const id = await operation();
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'operator_note')`, [id]);
      await client.query(`INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES (uuidv7(), $1, 'Charge Succeeded', '{"sequence": 1}')`, [id]);
      const { rows } = await client.query<{ xmax: string }>('SELECT xmax::text FROM payment_operations WHERE id = $1', [id]);
      expect(rows[0]!.xmax).toBe('0');
      // Another session may take the strongest lock without waiting.
      const other = await db.pool.connect();
      try {
        await other.query('BEGIN');
        await expect(other.query('SELECT 1 FROM payment_operations WHERE id = $1 FOR UPDATE NOWAIT', [id])).resolves.toMatchObject({ rowCount: 1 });
        await other.query('ROLLBACK');
      } finally {
        other.release();
      }
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  });

  it('an audit line and an outbox row write nothing to the WAL for the operation’s row (a foreign key wrote a LOCK record)', async () => {
    // Read from the WAL itself (pg_walinspect), for this database's operations table only.
    await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const id = await operation();
    const { rows: [start] } = await db.pool.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
    await db.pool.query(
      `WITH audit AS (INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'operator_note'))
       INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES (uuidv7(), $1, 'Charge Succeeded', '{"sequence": 1}')`,
      [id],
    );
    const { rows } = await db.pool.query<{ record_type: string }>(
      `SELECT r.record_type
         FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_insert_lsn()) r
         JOIN pg_get_wal_block_info($1::pg_lsn, pg_current_wal_insert_lsn(), false) b USING (start_lsn)
        WHERE b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND b.relfilenode = pg_relation_filenode('payment_operations')`,
      [start!.lsn],
    );
    expect(rows).toEqual([]);
  });

  it('an outcome write locks nothing before it updates: its WAL for the operation’s row is the update alone (a BEFORE UPDATE guard wrote a LOCK record first)', async () => {
    await db.pool.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const id = await operation();
    const token = randomUUID();
    expect((await claimById(db.pool, id, token, 60_000, 'worker'))?.claimed?.leaseToken).toBe(token);
    const { rows: [start] } = await db.pool.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn');
    const [result] = await recordOutcomes(
      db.pool,
      [{ operationId: id, leaseToken: token, action: 'record', step: 'create', fromStatus: 'pending', keyGeneration: 0, status: 'failed', externalId: null, reviewReason: null, retryAfterMs: null, error: 'declined', errorClass: 'StripeCardError', errorCode: 'card_declined', detail: {} }],
      'worker',
      1_000,
    );
    expect(result).toMatchObject({ applied: true, status: 'failed' });
    const { rows } = await db.pool.query<{ record_type: string }>(
      `SELECT r.record_type
         FROM pg_get_wal_records_info($1::pg_lsn, pg_current_wal_insert_lsn()) r
         JOIN pg_get_wal_block_info($1::pg_lsn, pg_current_wal_insert_lsn(), false) b USING (start_lsn)
        WHERE b.reldatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
          AND b.relfilenode = pg_relation_filenode('payment_operations')
        ORDER BY r.start_lsn`,
      [start!.lsn],
    );
    expect(rows.map((r) => r.record_type)).toEqual(['UPDATE']);
    // The guards still stand (they fire after the row is written, 027): a final row does not change.
    await expect(db.pool.query(`UPDATE payment_operations SET last_error = 'x' WHERE id = $1`, [id])).rejects.toThrow(/is final \(failed\) and cannot change/);
  });

  it('what the key also kept: an operation is never deleted and its id never changes', async () => {
    const id = await operation();
    await db.pool.query(`INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'requested')`, [id]);
    await expect(db.pool.query('UPDATE payment_operations SET id = uuidv7() WHERE id = $1', [id])).rejects.toThrow(`the id of payment operation ${id} cannot change`);
    await expect(db.pool.query('DELETE FROM payment_operations WHERE id = $1', [id])).rejects.toThrow(/never deleted/);
    // Setting id to itself changes nothing and passes (UPDATE OF id … WHEN it differs).
    await expect(db.pool.query('UPDATE payment_operations SET id = id WHERE id = $1', [id])).resolves.toMatchObject({ rowCount: 1 });
  });
});

describe('a claim’s lease in columns of the audit trail (023)', () => {
  it('writes the lease to lease_token / lease_until and reads it back under the old keys, for the engine and for ops', async () => {
    const id = await operation();
    const token = randomUUID();
    const claim = await claimById(db.pool, id, token, 60_000, 'worker');
    expect(claim?.claimed?.leaseToken).toBe(token);
    await recordOutcomes(
      db.pool,
      [{ operationId: id, leaseToken: token, action: 'record', step: 'create', fromStatus: 'pending', keyGeneration: 0, status: 'failed', externalId: null, reviewReason: null, retryAfterMs: null, error: 'declined', errorClass: 'StripeCardError', errorCode: 'card_declined', detail: {} }],
      'worker',
      1_000,
    );
    const { rows: stored } = await db.pool.query(
      `SELECT action, lease_token::text, lease_until IS NOT NULL AS has_until, attempt, detail FROM payment_operation_events WHERE operation_id = $1 ORDER BY id`,
      [id],
    );
    // The attempt has a column of its own too, since 029.
    expect(stored).toEqual([
      { action: 'attempt_started', lease_token: token, has_until: true, attempt: 1, detail: {} },
      { action: 'outcome_recorded', lease_token: token, has_until: false, attempt: null, detail: {} },
    ]);
    const evidence = (await loadEvidenceEvents(db.pool, [id])).get(id)!;
    expect(evidence.map((e) => e.detail.leaseToken)).toEqual([token, token]);
    expect(Date.parse(String(evidence[0]!.detail.leaseUntil))).toBeGreaterThan(Date.parse(evidence[0]!.occurredAt));
    const history = await loadOperationHistory(db.pool, { operationId: id });
    expect(history!.events.map((e) => [e.action, e.detail.leaseToken])).toEqual([['attempt_started', token], ['outcome_recorded', token]]);
  });

  it('reads a line written before 023 (lease in detail, columns NULL) as it always read', async () => {
    const id = await operation();
    const token = randomUUID();
    const claimedAt = new Date(Date.now() - 120_000);
    const leaseUntil = new Date(claimedAt.getTime() + 30_000);
    // The trail as the writers left it before 023: a claim whose worker died (no outcome of its own).
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, step, occurred_at, detail)
       VALUES ($1, 'worker', 'attempt_started', NULL, $2, jsonb_build_object('attempt', 1, 'leaseToken', $3::text, 'leaseUntil', $4::timestamptz))`,
      [id, claimedAt, token, leaseUntil],
    );
    const evidence = (await loadEvidenceEvents(db.pool, [id])).get(id)!;
    expect(evidence[0]!.detail).toMatchObject({ attempt: 1, leaseToken: token });
    // The engine's reading rests on the recorded lease end, not on its own lease length.
    expect(lastPossibleSendAt(evidence, 999_999)?.getTime()).toBe(leaseUntil.getTime());
  });
});

describe("a claim's attempt and an outcome's PaymentIntent status in columns of the audit trail (029)", () => {
  it('writes them to attempt / payment_intent_status, keeps the rest of the detail, and reads them back under the old keys, for the engine and for ops', async () => {
    const id = await operation();
    const token = randomUUID();
    await claimById(db.pool, id, token, 60_000, 'worker');
    await recordOutcomes(
      db.pool,
      [{ operationId: id, leaseToken: token, action: 'record', step: 'create', fromStatus: 'pending', keyGeneration: 0, status: 'succeeded', externalId: 'pi_cols', reviewReason: null, retryAfterMs: null, error: null, errorClass: null, errorCode: null, detail: { paymentIntentStatus: 'succeeded', paymentMethodType: 'card' } }],
      'worker',
      1_000,
    );
    const { rows: stored } = await db.pool.query(
      `SELECT action, attempt, payment_intent_status, detail FROM payment_operation_events WHERE operation_id = $1 ORDER BY id`,
      [id],
    );
    expect(stored).toEqual([
      { action: 'attempt_started', attempt: 1, payment_intent_status: null, detail: {} },
      { action: 'outcome_recorded', attempt: null, payment_intent_status: 'succeeded', detail: { paymentMethodType: 'card' } },
    ]);
    const evidence = (await loadEvidenceEvents(db.pool, [id])).get(id)!;
    expect(evidence.map((e) => e.detail)).toEqual([
      { attempt: 1, leaseToken: token, leaseUntil: expect.any(String) },
      { paymentIntentStatus: 'succeeded', paymentMethodType: 'card', leaseToken: token },
    ]);
    const history = await loadOperationHistory(db.pool, { operationId: id });
    expect(history!.events.map((e) => [e.action, e.detail.attempt, e.detail.paymentIntentStatus])).toEqual([
      ['attempt_started', 1, undefined],
      ['outcome_recorded', undefined, 'succeeded'],
    ]);
  });

  it('reads a line written before 029 (keys in detail, columns NULL) as it always read', async () => {
    const id = await operation();
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action, step, to_status, detail)
       VALUES ($1, 'worker', 'attempt_started', NULL, 'pending', '{"attempt": 2}'),
              ($1, 'worker', 'outcome_recorded', 'create', 'succeeded', '{"paymentIntentStatus": "succeeded"}')`,
      [id],
    );
    const evidence = (await loadEvidenceEvents(db.pool, [id])).get(id)!;
    expect(evidence.map((e) => e.detail)).toEqual([{ attempt: 2 }, { paymentIntentStatus: 'succeeded' }]);
  });
});

