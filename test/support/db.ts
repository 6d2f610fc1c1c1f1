// Each test file (or test) gets its own database cloned from the migrated template: real
// PostgreSQL 18, isolated, created in tens of milliseconds.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { createDatabase } from '../../local/postgres.ts';

export interface TestDatabase {
  readonly url: string;
  readonly name: string;
  /** A pool on the database; ended by drop(). */
  readonly pool: pg.Pool;
  drop(): Promise<void>;
}

export function databaseUrl(database: string): string {
  const parsed = new URL(inject('pgAdminUrl'));
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export async function createTestDatabase(label = 't'): Promise<TestDatabase> {
  const name = `${label.toLowerCase().replace(/[^a-z0-9_]/g, '_').slice(0, 30)}_${randomBytes(5).toString('hex')}`;
  await createDatabase(inject('pgAdminUrl'), name, inject('pgTemplate'));
  const url = databaseUrl(name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  // A test that stops or restarts PostgreSQL drops checked-out clients too, which pg-pool does not listen to.
  pool.on('connect', (client) => client.on('error', () => {}));
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end();
      const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
      await admin.connect();
      try {
        // pool.end() resolves once its clients are *asked* to end, not once their sessions are gone;
        // a FORCE drop that overtakes one terminates it (57P01), and the pool no longer listens for
        // that client's error: an uncaught exception in whatever test file runs next. So wait (a
        // little) for the pool's own sessions to leave; FORCE then only ends what a test leaked.
        for (let i = 0; i < 50; i++) {
          const { rows } = await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1', [name]);
          if (rows[0]!.n === 0) break;
          await new Promise((resolve) => setTimeout(resolve, 20));
        }
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await admin.end();
      }
    },
  };
}

/**
 * Time passes for an operation's audit trail: every line moved back by `interval` (a PostgreSQL
 * interval, e.g. '3 minutes'). The trail is append-only; its trigger is set aside for the shift only.
 */
export async function shiftAuditTrail(pool: pg.Pool, operationId: string, interval: string): Promise<void> {
  // One transaction on one connection: DDL is transactional in PostgreSQL, so no other session ever
  // sees the append-only trigger off, and a failure leaves it on.
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await client.query('ALTER TABLE payment_operation_events DISABLE TRIGGER payment_operation_events_append_only');
    // The lease end a claim recorded moves with it: the trail is as it would be, written that much earlier.
    await client.query(
      `UPDATE payment_operation_events SET occurred_at = occurred_at - $2::interval, lease_until = lease_until - $2::interval,
              detail = CASE WHEN detail ? 'leaseUntil' AND jsonb_typeof(detail->'leaseUntil') = 'string'
                            THEN jsonb_set(detail, '{leaseUntil}', to_jsonb(to_char(((detail->>'leaseUntil')::timestamptz - $2::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')))
                            ELSE detail END
        WHERE operation_id = $1`,
      [operationId, interval],
    );
    await client.query('ALTER TABLE payment_operation_events ENABLE TRIGGER payment_operation_events_append_only');
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/** The operation's row as stored, every column (undefined: no such operation). */
export async function operationRow(pool: pg.Pool, operationId: string) {
  const { rows } = await pool.query('SELECT * FROM payment_operations WHERE id = $1', [operationId]);
  return rows[0];
}

/** The operation's audit trail (payment_operation_events), oldest first, every column. */
export async function auditTrail(pool: pg.Pool, operationId: string) {
  const { rows } = await pool.query('SELECT * FROM payment_operation_events WHERE operation_id = $1 ORDER BY id', [operationId]);
  return rows;
}

/**
 * Drops the CHECK and foreign-key constraints of payment_operations inside the caller's open
 * transaction (they come back with its rollback). The operation's update guards fire after the row
 * is written (migrations/027), so a change that also breaks a constraint is refused by the
 * constraint first; without them, what refuses a change is the guard, and a test of a guard sees it.
 */
export async function liftOperationConstraints(client: pg.ClientBase): Promise<void> {
  const { rows } = await client.query<{ conname: string }>(
    `SELECT conname FROM pg_constraint WHERE conrelid = 'payment_operations'::regclass AND contype IN ('c', 'f') ORDER BY conname`,
  );
  if (rows.length === 0) throw new Error('payment_operations has no CHECK or foreign-key constraint to lift: is this the migrated schema?');
  // Names from the catalog, quoted as identifiers: no input reaches the statement.
  await client.query(`ALTER TABLE payment_operations ${rows.map((r) => `DROP CONSTRAINT ${client.escapeIdentifier(r.conname)}`).join(', ')}`);
}

/** One UPDATE of payment_operations with its constraints lifted, rolled back: the guard's refusal (rejects), or resolves if the guard let it through. */
export async function updateAgainstGuardOnly(pool: pg.Pool, sql: string, values: readonly unknown[]): Promise<void> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    await liftOperationConstraints(client);
    await client.query(sql, values as unknown[]);
  } finally {
    await client.query('ROLLBACK').catch(() => {});
    client.release();
  }
}
