import { randomUUID } from 'node:crypto';
import { mkdtemp, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createDatabase } from '../local/postgres.ts';
import { COMMENT_REVISIONS, loadMigrations, migrate, MigrationError, statementsChecksum, type MigrationFile } from '../lambdas/runtime/migrations.ts';
import { inject } from 'vitest';
import { createTestDatabase, databaseUrl, liftOperationConstraints, type TestDatabase } from './support/db.ts';

async function emptyDatabase(label: string): Promise<string> {
  const name = `${label}_${Math.random().toString(36).slice(2, 10)}`;
  await createDatabase(inject('pgAdminUrl'), name);
  return databaseUrl(name);
}

function file(name: string, sql: string): MigrationFile {
  return { name, sql, checksum: `sum-of-${sql}` };
}

describe('migrations runner', () => {
  it('applies every file once, in order, and records it', async () => {
    const url = await emptyDatabase('mig_apply');
    const files = await loadMigrations(path.resolve('migrations'));
    const first = await migrate(url, files);
    expect(first.applied).toEqual(files.map((f) => f.name));
    const second = await migrate(url, files);
    expect(second.applied).toEqual([]);
    expect(second.alreadyApplied).toEqual(files.map((f) => f.name));
  });

  it('refuses to continue when an applied file has changed', async () => {
    const url = await emptyDatabase('mig_changed');
    await migrate(url, [file('001_a.sql', 'CREATE TABLE a (x int)')]);
    await expect(migrate(url, [file('001_a.sql', 'CREATE TABLE a (x bigint)')])).rejects.toThrow(/has changed/);
  });

  it('accepts an applied file whose comments alone were reworded, when it is listed with its earlier checksum', async () => {
    const url = await emptyDatabase('mig_comments');
    const [listed] = Object.entries(COMMENT_REVISIONS);
    const [name, revision] = listed!;
    // A database migrated before the rewording: the file's row holds the earlier text's checksum.
    await migrate(url, [{ name, sql: 'SELECT 1', checksum: revision.earlier[0]! }]);
    const dir = name.startsWith('001_consumer') ? 'lambdas/consumers/kit/migrations' : 'migrations';
    const now = (await loadMigrations(path.resolve(dir))).find((f) => f.name === name)!;
    expect(now.checksum).not.toBe(revision.earlier[0]);
    expect((await migrate(url, [now])).alreadyApplied).toEqual([name]);
    // Its statements changed too: refused as before.
    const changed = { ...now, sql: `${now.sql}\nSELECT 2;`, checksum: 'other' };
    await expect(migrate(url, [changed])).rejects.toThrow(/has changed/);
  });

  it('keeps every comment revision true of its file: the statements hash as recorded', async () => {
    const files = [...(await loadMigrations(path.resolve('migrations'))), ...(await loadMigrations(path.resolve('lambdas/consumers/kit/migrations')))];
    for (const [name, revision] of Object.entries(COMMENT_REVISIONS)) {
      const found = files.find((f) => f.name === name && statementsChecksum(f.sql) === revision.statements);
      expect(found, name).toBeDefined();
    }
  });

  it('refuses a missing applied file and a new file that sorts before an applied one', async () => {
    const url = await emptyDatabase('mig_order');
    await migrate(url, [file('002_b.sql', 'CREATE TABLE b (x int)')]);
    await expect(migrate(url, [])).rejects.toThrow(/missing/);
    await expect(
      migrate(url, [file('001_a.sql', 'CREATE TABLE a (x int)'), file('002_b.sql', 'CREATE TABLE b (x int)')]),
    ).rejects.toThrow(/sorts before/);
  });

  it('runs each file in its own transaction: a failing file leaves nothing of itself', async () => {
    const url = await emptyDatabase('mig_fail');
    const files = [
      file('001_ok.sql', 'CREATE TABLE ok (x int)'),
      file('002_bad.sql', 'CREATE TABLE half (x int); SELECT no_such_function();'),
    ];
    await expect(migrate(url, files)).rejects.toBeInstanceOf(MigrationError);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    const tables = await client.query(`SELECT relname FROM pg_class WHERE relname IN ('ok', 'half') ORDER BY 1`);
    const recorded = await client.query('SELECT name FROM schema_migrations');
    await client.end();
    expect(tables.rows.map((r) => r.relname)).toEqual(['ok']);
    expect(recorded.rows.map((r) => r.name)).toEqual(['001_ok.sql']);
  });

  it('two deployers at once: the advisory lock serialises them and each file is applied once', async () => {
    const url = await emptyDatabase('mig_race');
    // pg_sleep makes the first migrator hold the lock long enough for the second to queue behind it.
    const files = [file('001_slow.sql', 'SELECT pg_sleep(0.3); CREATE TABLE slow (x int)')];
    const results = await Promise.all([migrate(url, files), migrate(url, files)]);
    expect(results.map((r) => r.applied.length).sort()).toEqual([0, 1]);
  });

  it('004 numbers the events an outbox already holds: unpublished rows get their sequence, published ones stay as sent', async () => {
    const url = await emptyDatabase('mig_sequence');
    const files = await loadMigrations(path.resolve('migrations'));
    const index = files.findIndex((f) => f.name === '004_event_sequence.sql');
    expect(index).toBeGreaterThan(0);
    await migrate(url, files.slice(0, index));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, review_reason)
         VALUES ('o-seq', 100, 'eur', 'cus_1', 'pm_card_visa', 'waiting') RETURNING id`,
      );
      const id = rows[0].id;
      const event = async (createdAt: string, published: boolean) => {
        const eventId = randomUUID();
        await client.query(
          `INSERT INTO outcome_events (event_id, operation_id, event_type, payload, created_at, published_at)
           VALUES ($1::uuid, $2::uuid, 'Charge Needs Review', jsonb_build_object('eventId', $1::text), $3, $4)`,
          [eventId, id, createdAt, published ? createdAt : null],
        );
        return eventId;
      };
      const sent = await event('2026-11-30T10:00:00Z', true);
      const waiting = await event('2026-11-30T11:00:00Z', false);
      await migrate(url, files);
      const { rows: events } = await client.query(`SELECT event_id, e.payload FROM outcome_events e WHERE operation_id = $1`, [id]);
      const sequenceOf = (eventId: string) => events.find((e) => e.event_id === eventId)!.payload.sequence;
      expect({ sent: sequenceOf(sent), waiting: sequenceOf(waiting) }).toEqual({ sent: undefined, waiting: 2 });
      const { rows: op } = await client.query(`SELECT event_sequence FROM payment_operations WHERE id = $1`, [id]);
      expect(op[0].event_sequence).toBe(2); // the next event is number 3
      // The guard is back on after the backfill, and a second event with the same number is refused.
      await expect(client.query(`UPDATE outcome_events SET stored_payload = stored_payload || '{"x":1}' WHERE event_id = $1`, [waiting])).rejects.toThrow(/cannot change/);
      const duplicate = randomUUID();
      await expect(
        client.query(
          `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
           VALUES ($1::uuid, $2, 'Charge Failed', jsonb_build_object('eventId', $1::text, 'sequence', 2))`,
          [duplicate, id],
        ),
      ).rejects.toThrow(/outcome_events_operation_sequence/);
    } finally {
      await client.end();
    }
  });

  it('reads only files named like 001_name.sql', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'mig-'));
    await writeFile(path.join(dir, '001_fine.sql'), 'SELECT 1');
    await writeFile(path.join(dir, 'Oops.sql'), 'SELECT 1');
    await expect(loadMigrations(dir)).rejects.toThrow(/not of the form/);
  });
});

describe('022 on an outbox that already holds whole payloads', () => {
  it('renames the column and adds the virtual one without touching a row: old rows read exactly as before (through 026 and 028 too), the event number stays unique, the guard still refuses', async () => {
    const url = await emptyDatabase('mig_compact_outbox');
    const files = await loadMigrations(path.resolve('migrations'));
    const index = files.findIndex((f) => f.name.startsWith('022_'));
    expect(index).toBeGreaterThan(0);
    await migrate(url, files.slice(0, index));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, review_reason)
         VALUES ('o-compact', 100, 'eur', 'cus_1', 'pm_card_visa', 'waiting') RETURNING id`,
      );
      const id = rows[0].id as string;
      const eventId = randomUUID();
      // A payload as every writer stored it before 022: the row's ids, version 1 and its time inside it
      // (the time written apart from created_at, so that 026's occurredAt from the row would show).
      await client.query(
        `INSERT INTO outcome_events (event_id, operation_id, event_type, payload)
         VALUES ($1::uuid, $2::uuid, 'Charge Needs Review',
                 jsonb_build_object('version', 1, 'eventId', $1::text, 'operationId', $2::text, 'status', 'needs_review', 'reason', 'waiting',
                                    'occurredAt', '2026-11-30T10:00:00.123Z', 'sequence', 1))`,
        [eventId, id],
      );
      const before = (await client.query(`SELECT payload::text AS text FROM outcome_events WHERE event_id = $1`, [eventId])).rows[0].text as string;
      const filenode = async () => (await client.query(`SELECT pg_relation_filenode('outcome_events') AS n`)).rows[0].n as string;
      const node = await filenode();
      await migrate(url, files);
      expect(await filenode()).toBe(node); // not rewritten
      // Since 028 the payload is a function of the row (e.payload), no longer a column.
      const after = await client.query(`SELECT e.payload::text AS text, e.stored_payload::text AS stored FROM outcome_events e WHERE event_id = $1`, [eventId]);
      expect(after.rows[0].text).toBe(before);
      expect(after.rows[0].stored).toBe(before); // kept whole: the derived payload only repeats what it says
      await expect(
        client.query(
          `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES (uuidv7(), $1, 'Charge Failed', '{"sequence": 1}')`,
          [id],
        ),
      ).rejects.toThrow(/outcome_events_operation_sequence/);
      await expect(client.query(`UPDATE outcome_events SET stored_payload = stored_payload - 'reason' WHERE event_id = $1`, [eventId])).rejects.toThrow(/cannot change/);
      await expect(client.query(`INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1::uuid, $2, 'Charge Failed', jsonb_build_object('eventId', $3::text, 'sequence', 2))`, [randomUUID(), id, randomUUID()])).rejects.toThrow(/payload_carries_event_id/);
    } finally {
      await client.end();
    }
  });
});

describe('005_list_evidence widens the CHECK lists it touches, keeping what other migrations added', () => {
  it('adds list / auto_reissued / Charge Reissued and keeps a value a migration before it added', async () => {
    const url = await emptyDatabase('mig_widen');
    const all = await loadMigrations(path.resolve('migrations'));
    const before = all.filter((f) => f.name < '005');
    // Stands for another branch's migration (003/004) that widened the action list first.
    const other = file('004_other.sql', `
      ALTER TABLE payment_operation_events DROP CONSTRAINT payment_operation_events_action_check;
      ALTER TABLE payment_operation_events ADD CONSTRAINT payment_operation_events_action_check CHECK (action IN (
        'requested', 'attempt_started', 'outcome_recorded', 'outcome_discarded', 'lease_released',
        'operator_resolved', 'operator_reissued', 'operator_note', 'stripe_event_applied'))`);
    await migrate(url, [...before, other, ...all.filter((f) => f.name >= '005')]);
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows } = await client.query(`INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ('o-widen', 1, 'eur', 'cus_1', 'pm_1') RETURNING id`);
      const id = rows[0].id;
      const event = (action: string, step: string | null) =>
        client.query(`INSERT INTO payment_operation_events (operation_id, actor, action, step) VALUES ($1, 'test', $2, $3)`, [id, action, step]);
      await event('auto_reissued', null);
      await event('outcome_recorded', 'list');
      await event('stripe_event_applied', null); // the other migration's value survived
      await event('outcome_recorded', 'early_search');
      await expect(event('made_up', null)).rejects.toThrow(/payment_operation_events_action_check/);
      await expect(event('outcome_recorded', 'guess')).rejects.toThrow(/payment_operation_events_step_check/);
      const outbox = (eventId: string, type: string) =>
        client.query(`INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1, $2, $3, $4::jsonb)`, [eventId, id, type, JSON.stringify({ eventId })]);
      await outbox('01930000-0000-7000-8000-000000000001', 'Charge Reissued');
      await expect(outbox('01930000-0000-7000-8000-000000000002', 'Charge Maybe')).rejects.toThrow(/outcome_events_event_type_check/);
    } finally {
      await client.end();
    }
  });
});

describe('schema constraints live in the database', () => {
  let db: TestDatabase;
  beforeAll(async () => {
    db = await createTestDatabase('schema');
  });
  afterAll(() => db.drop());

  const insert = (order: string, amount: number, currency = 'eur') =>
    db.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method)
       VALUES ($1, $2, $3, 'cus_1', 'pm_card_visa') RETURNING id`,
      [order, amount, currency],
    );

  it('rejects a non-positive amount, a bad currency and a second operation for one order', async () => {
    await expect(insert('o-zero', 0)).rejects.toThrow(/check constraint/);
    await expect(insert('o-neg', -5)).rejects.toThrow(/check constraint/);
    await expect(insert('o-cur', 100, 'EUR')).rejects.toThrow(/check constraint/);
    await insert('o-once', 100);
    await expect(insert('o-once', 100)).rejects.toThrow(/duplicate key/);
  });

  it('rejects an unknown status and a success without a PaymentIntent id', async () => {
    const { rows } = await insert('o-status', 100);
    const id = rows[0].id;
    await expect(db.pool.query(`UPDATE payment_operations SET status = 'done' WHERE id = $1`, [id])).rejects.toThrow(
      /check constraint/,
    );
    await expect(
      db.pool.query(
        `UPDATE payment_operations SET status = 'succeeded', settled_at = now(), next_attempt_at = NULL WHERE id = $1`,
        [id],
      ),
    ).rejects.toThrow(/succeeded_has_external_id/);
  });

  it('never changes a final operation, nor the parameters of any operation', async () => {
    const { rows } = await insert('o-final', 100);
    const id = rows[0].id;
    await expect(db.pool.query(`UPDATE payment_operations SET amount = 200 WHERE id = $1`, [id])).rejects.toThrow(
      /cannot change/,
    );
    await db.pool.query(
      `UPDATE payment_operations SET status = 'failed', settled_at = now(), next_attempt_at = NULL WHERE id = $1`,
      [id],
    );
    await expect(
      db.pool.query(`UPDATE payment_operations SET status = 'pending', settled_at = NULL WHERE id = $1`, [id]),
    ).rejects.toThrow(/is final/);
    await expect(db.pool.query(`DELETE FROM payment_operations WHERE id = $1`, [id])).rejects.toThrow(/never deleted/);
  });

  /**
   * A succeeded charge and a succeeded refund of it, written as the owner the way the engine's
   * statements leave them (inserted open, then settled: open → final is an allowed change).
   */
  async function succeededChargeAndRefund(): Promise<{ orderId: string; chargeId: string; refundId: string }> {
    const orderId = `o-guard-${randomUUID()}`;
    const chargeId = (await insert(orderId, 1000)).rows[0].id as string;
    await db.pool.query(`UPDATE payment_operations SET status = 'succeeded', external_id = 'pi_guard', attempts = 1, settled_at = now(), next_attempt_at = NULL WHERE id = $1`, [chargeId]);
    const { rows } = await db.pool.query(
      `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, refund_reason, amount, currency, customer_id, payment_method)
       VALUES ($1, 'refund', 'rf-guard', $2, 'requested_by_customer', 400, 'eur', 'cus_1', 'pm_card_visa') RETURNING id`,
      [orderId, chargeId],
    );
    const refundId = rows[0].id as string;
    await db.pool.query(`UPDATE payment_operations SET status = 'succeeded', external_id = 're_guard', attempts = 1, settled_at = now(), next_attempt_at = NULL WHERE id = $1`, [refundId]);
    return { orderId, chargeId, refundId };
  }

  /** Every column of payment_operations with an expression that changes its value, from the catalog: a column a later migration adds is covered too. */
  async function everyColumnChanged(): Promise<{ column: string; set: string }[]> {
    const { rows } = await db.pool.query<{ column_name: string; data_type: string }>(
      `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'public' AND table_name = 'payment_operations' ORDER BY ordinal_position`,
    );
    return rows.map(({ column_name: column, data_type: type }) => {
      const c = `"${column}"`;
      const changed: Record<string, string> = {
        uuid: 'gen_random_uuid()',
        text: `coalesce(${c} || 'x', 'x')`,
        integer: `coalesce(${c} + 1, 1)`,
        bigint: `coalesce(${c} + 1, 1)`,
        'timestamp with time zone': `coalesce(${c} + interval '1 second', now())`,
        jsonb: `coalesce(${c}, '{}'::jsonb) || '{"changed": true}'::jsonb`,
        boolean: `NOT coalesce(${c}, false)`,
      };
      if (!changed[type]) throw new Error(`no change expression for ${column} (${type}): add one, so that the guard is tried on it`);
      return { column, set: `${c} = ${changed[type]}` };
    });
  }

  /**
   * As the application role (003's privileges), one UPDATE per entry, each in a savepoint: what each one did.
   * The guards fire after the row is written (027), so a change that also breaks one of the table's
   * CHECK or foreign-key constraints is refused by that constraint first. `guardOnly` drops those
   * constraints inside the transaction (rolled back with it), so that what refuses is the guard.
   */
  async function asApplicationRole(id: string, sets: readonly string[], { guardOnly = true } = {}): Promise<(string | 'updated')[]> {
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      if (guardOnly) await liftOperationConstraints(client);
      await client.query('SET LOCAL ROLE charges_app');
      const outcomes: (string | 'updated')[] = [];
      for (const set of sets) {
        await client.query('SAVEPOINT s');
        try {
          const { rowCount } = await client.query(`UPDATE payment_operations SET ${set} WHERE id = $1`, [id]);
          outcomes.push(rowCount === 1 ? 'updated' : `${rowCount} rows`);
        } catch (error) {
          const e = error as { code?: string; message: string };
          outcomes.push(`${e.code}: ${e.message.replace(id, '<id>')}`);
        }
        await client.query('ROLLBACK TO SAVEPOINT s');
      }
      await client.query('ROLLBACK');
      return outcomes;
    } finally {
      client.release();
    }
  }

  it('a SUCCEEDED charge and a succeeded refund: every column change is refused by the guard, as the application role — the one exception is the failed-after-success mark on the refund', async () => {
    const { chargeId, refundId } = await succeededChargeAndRefund();
    const columns = await everyColumnChanged();
    // The catalog read is the list the guard is tried on: it holds every kind of column there is.
    expect(columns.map((c) => c.column)).toEqual(expect.arrayContaining(['id', 'status', 'external_id', 'amount', 'key_generation', 'lease_token', 'refund_id', 'charge_metadata', 'event_sequence', 'failed_after_success_at']));
    const final = (status: string) => `23000: payment operation <id> is final (${status}) and cannot change`;

    // The charge: nothing, not even the mark (it is a refund's).
    expect(await asApplicationRole(chargeId, columns.map((c) => c.set))).toEqual(columns.map(() => final('succeeded')));
    // With the table's constraints in place, some changes are refused by a CHECK first: still refused, every one.
    const constrained = await asApplicationRole(chargeId, columns.map((c) => c.set), { guardOnly: false });
    expect(constrained.filter((outcome) => !/^23(000|514|503): /.test(outcome))).toEqual([]);
    expect(constrained.filter((outcome) => outcome === final('succeeded')).length).toBeGreaterThan(columns.length / 2);

    // The refund: nothing but the mark (its time, with or without Stripe's reason, 009), and the
    // mark with anything else, or a reason without the mark, is refused too.
    const mark = columns.find((c) => c.column === 'failed_after_success_at')!;
    const others = columns.filter((c) => !c.column.startsWith('failed_after_success_'));
    expect(columns.length - others.length).toBe(2);
    expect(await asApplicationRole(refundId, others.map((c) => c.set))).toEqual(others.map(() => final('succeeded')));
    expect(await asApplicationRole(refundId, others.map((c) => `${mark.set}, ${c.set}`))).toEqual(others.map(() => final('succeeded')));
    expect(await asApplicationRole(refundId, [`failed_after_success_reason = 'unknown'`, mark.set, `${mark.set}, failed_after_success_reason = 'unknown'`])).toEqual([
      final('succeeded'),
      'updated',
      'updated',
    ]);

    // Marked (its one allowed change, made once): from then on nothing changes, the mark included.
    await db.pool.query(`UPDATE payment_operations SET failed_after_success_at = now(), failed_after_success_reason = 'unknown' WHERE id = $1`, [refundId]);
    const markNeverChanges = '23000: payment operation <id> is marked failed after success at Stripe; the mark is never changed or cleared';
    expect(await asApplicationRole(refundId, columns.map((c) => c.set))).toEqual(
      columns.map((c) => (c.column.startsWith('failed_after_success_') ? markNeverChanges : final('succeeded'))),
    );
    // And no statement moved anything: the rows are as settled (the mark aside).
    const { rows } = await db.pool.query(`SELECT id, status, external_id, amount::int, key_generation, attempts FROM payment_operations WHERE id = ANY($1) ORDER BY kind`, [[chargeId, refundId]]);
    expect(rows).toEqual([
      { id: chargeId, status: 'succeeded', external_id: 'pi_guard', amount: 1000, key_generation: 0, attempts: 1 },
      { id: refundId, status: 'succeeded', external_id: 're_guard', amount: 400, key_generation: 0, attempts: 1 },
    ]);
  });

  it('the refund insert rules, as the application role: a refund is of its own order’s CHARGE and in its currency (refund_of_its_charge)', async () => {
    const mine = await succeededChargeAndRefund();
    const theirs = await succeededChargeAndRefund();
    const client = await db.pool.connect();
    const tried: Record<string, string> = {};
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL ROLE charges_app');
      const refund = async (label: string, fields: { orderId: string; parent: string; currency: string }) => {
        await client.query('SAVEPOINT s');
        try {
          await client.query(
            `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method)
             VALUES ($1, 'refund', $2, $3, 100, $4, 'cus_1', 'pm_card_visa')`,
            [fields.orderId, `rf-${label}`, fields.parent, fields.currency],
          );
          tried[label] = 'inserted';
        } catch (error) {
          const e = error as { code?: string; constraint?: string };
          tried[label] = `${e.code} ${e.constraint}`;
        }
        await client.query('ROLLBACK TO SAVEPOINT s');
      };
      await refund('control', { orderId: mine.orderId, parent: mine.chargeId, currency: 'eur' });
      await refund('other-currency', { orderId: mine.orderId, parent: mine.chargeId, currency: 'usd' });
      await refund('another-orders-charge', { orderId: mine.orderId, parent: theirs.chargeId, currency: 'eur' });
      await refund('parent-is-a-refund', { orderId: mine.orderId, parent: mine.refundId, currency: 'eur' });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(tried).toEqual({
      control: 'inserted',
      'other-currency': '23514 refund_of_its_charge',
      'another-orders-charge': '23514 refund_of_its_charge',
      'parent-is-a-refund': '23514 refund_of_its_charge',
    });
  });

  it('keeps the audit trail append-only', async () => {
    const { rows } = await insert('o-audit', 100);
    await db.pool.query(
      `INSERT INTO payment_operation_events (operation_id, actor, action) VALUES ($1, 'test', 'requested')`,
      [rows[0].id],
    );
    await expect(db.pool.query(`UPDATE payment_operation_events SET actor = 'x'`)).rejects.toThrow(/append-only/);
    await expect(db.pool.query(`DELETE FROM payment_operation_events`)).rejects.toThrow(/append-only/);
  });
});
