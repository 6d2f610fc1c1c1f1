// Retention on real PostgreSQL 18, as the application role: exactly what is past each bound is
// removed (or reduced) and nothing else, in batches; a redelivered Stripe event is still a duplicate
// once its row was reduced; a batch never waits for, nor blocks, the charge path's writes; and every
// refusal the guards made before migration 017 they still make.
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStripeEvent } from '../../lambdas/payments/event-decisions.ts';
import { recordStripeEvent } from '../../lambdas/payments/inbox-store.ts';
import { retentionCutoffs, retentionOverdue, runRetention, type RetentionSettings } from '../../lambdas/payments/retention-store.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { runReconcile } from '../../lambdas/reconcile/sweep.ts';
import { ConfigError, loadConfig } from '../../lambdas/runtime/config.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { asApplicationRole, DAY_MS, daysAgo, finalCharge, inboxEvent, outboxRow, outcomeOf, rejectedRow } from './support.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('retention');
});
afterAll(async () => {
  await db.drop();
});

const SETTINGS: RetentionSettings = { outboxDays: 30, stripeEventPayloadDays: 4, stripeEventDays: 30, rejectedBodyDays: 14, operatorReadDays: 400, resolvedFindingDays: 90, batchSize: 2, maxBatchesPerRun: 1000 };
const NOTHING = { operatorReads: 0, resolvedFindings: 0 };

describe('retention removes exactly what is past each bound', () => {
  it('outbox, inbox payloads, inbox rows, rejected bodies: past the bound removed in batches, the rest untouched', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 60));
    // Outbox: published 31 and 45 days ago go; published 29 days ago, and unpublished since 40 days, stay.
    const old1 = await outboxRow(db.pool, op.id, daysAgo(now, 45), daysAgo(now, 45));
    const old2 = await outboxRow(db.pool, op.id, daysAgo(now, 32), daysAgo(now, 31));
    const old3 = await outboxRow(db.pool, op.id, daysAgo(now, 31.5), daysAgo(now, 31));
    const recent = await outboxRow(db.pool, op.id, daysAgo(now, 29), daysAgo(now, 29));
    const stuck = await outboxRow(db.pool, op.id, daysAgo(now, 40), null);
    // Inbox: applied 2 days ago stays whole; 5 and 20 days ago lose their payload; 31 and 35 days ago
    // are deleted; 35 days ago with a finding is reduced and kept; an open one 40 days old stays whole.
    const fresh = await inboxEvent(db.pool, daysAgo(now, 2));
    const five = await inboxEvent(db.pool, daysAgo(now, 5));
    const twenty = await inboxEvent(db.pool, daysAgo(now, 20));
    const gone1 = await inboxEvent(db.pool, daysAgo(now, 31));
    const gone2 = await inboxEvent(db.pool, daysAgo(now, 35));
    const withFinding = await inboxEvent(db.pool, daysAgo(now, 35));
    await db.pool.query(
      `INSERT INTO stripe_event_findings (kind, payment_intent_id, event_id, reason) VALUES ('contradiction', 'pi_finding', $1, 'kept as evidence')`,
      [withFinding],
    );
    const open = await inboxEvent(db.pool, daysAgo(now, 40), { applied: false });
    // Rejected: 15 days lose the body; 13 days keep it.
    const rOld = await rejectedRow(db.pool, daysAgo(now, 15));
    const rOlder = await rejectedRow(db.pool, daysAgo(now, 100));
    const rNew = await rejectedRow(db.pool, daysAgo(now, 13));

    const cutoffs = retentionCutoffs(SETTINGS, now);
    const before = await retentionOverdue(db.pool, cutoffs);
    expect(before.outbox).toBeGreaterThanOrEqual(14 * 86_400);
    expect(before.stripeEventPayloads).toBeGreaterThanOrEqual(30 * 86_400);
    expect(before.rejectedBodies).toBeGreaterThanOrEqual(85 * 86_400);

    const run = await asApplicationRole(db.pool, (client) => runRetention(client, SETTINGS, () => now));
    expect(run.removed).toEqual({ outbox: 3, stripeEventPayloads: 5, stripeEvents: 2, rejectedBodies: 2, ...NOTHING });
    expect(run.batches).toBeGreaterThan(4); // batches of two
    expect(run.unfinished).toEqual([]);
    expect(run.maxOverdueSeconds).toBe(0);

    const { rows: outbox } = await db.pool.query<{ event_id: string }>('SELECT event_id FROM outcome_events ORDER BY event_id');
    expect(outbox.map((r) => r.event_id).sort()).toEqual([recent, stuck].sort());
    expect([old1, old2, old3].some((id) => outbox.some((r) => r.event_id === id))).toBe(false);

    const { rows: inbox } = await db.pool.query<{ event_id: string; reduced: boolean; outcome: string | null; event_type: string; object_id: string | null; stripe_created_at: Date }>(
      'SELECT event_id, payload IS NULL AS reduced, outcome, event_type, object_id, stripe_created_at FROM stripe_events',
    );
    const byId = new Map(inbox.map((r) => [r.event_id, r]));
    expect(byId.get(fresh)?.reduced).toBe(false);
    expect(byId.get(open)?.reduced).toBe(false);
    for (const id of [five, twenty, withFinding]) {
      // Reduced to what deduplication needs: the id, type, object, Stripe's time and the outcome stay.
      expect(byId.get(id)).toMatchObject({ reduced: true, outcome: 'stale', event_type: 'payment_intent.succeeded' });
      expect(byId.get(id)!.object_id).toMatch(/^pi_/);
    }
    expect(byId.has(gone1) || byId.has(gone2)).toBe(false);
    expect(inbox).toHaveLength(5);

    const { rows: rejected } = await db.pool.query<{ id: string; raw_body: string | null; body_sha256: string; reason: string; raw_body_removed_why: string | null }>(
      'SELECT id, raw_body, body_sha256, reason, raw_body_removed_why FROM rejected_messages ORDER BY id',
    );
    const rej = new Map(rejected.map((r) => [Number(r.id), r]));
    for (const id of [rOld, rOlder]) expect(rej.get(id)).toMatchObject({ raw_body: null, raw_body_removed_why: 'retention', reason: 'orderId: expected string' });
    expect(rej.get(rOld)!.body_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(rej.get(rNew)!.raw_body).toBe('{"orderId": 1}');

    // Again: nothing is due, nothing changes.
    const again = await asApplicationRole(db.pool, (client) => runRetention(client, SETTINGS, () => now));
    expect(again.removed).toEqual({ outbox: 0, stripeEventPayloads: 0, stripeEvents: 0, rejectedBodies: 0, ...NOTHING });
  });

  it('stops at its batch limit and says what is left; the overdue gauge shows it until a later run catches up', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 60));
    for (let i = 0; i < 5; i++) await outboxRow(db.pool, op.id, daysAgo(now, 50 + i), daysAgo(now, 50 + i));
    const limited = { ...SETTINGS, batchSize: 2, maxBatchesPerRun: 1 };
    const first = await asApplicationRole(db.pool, (client) => runRetention(client, limited, () => now));
    expect(first.removed.outbox).toBe(2);
    expect(first.unfinished).toEqual(['outbox']);
    expect(first.overdueSeconds.outbox).toBeGreaterThan(19 * 86_400);
    const rest = await asApplicationRole(db.pool, (client) => runRetention(client, { ...SETTINGS, batchSize: 10 }, () => now));
    expect(rest.removed.outbox).toBe(3);
    expect(rest.maxOverdueSeconds).toBe(0);
  });

  it('the clock decides: the same rows are kept today and removed once it is moved past the bound; never inside the database\'s own floor', async () => {
    // A database of its own: the other tests' rows are of other ages.
    const own = await createTestDatabase('retention_clock');
    try {
      await clockDecides(own);
    } finally {
      await own.drop();
    }
  });
});

async function clockDecides(db: TestDatabase): Promise<void> {
  {
    const base = new Date();
    const op = await finalCharge(db.pool, daysAgo(base, 10));
    const id = await outboxRow(db.pool, op.id, daysAgo(base, 10), daysAgo(base, 10));
    const bounds = { ...SETTINGS, outboxDays: 11, stripeEventPayloadDays: 6, stripeEventDays: 7, rejectedBodyDays: 4 };
    const today = await asApplicationRole(db.pool, (client) => runRetention(client, bounds, () => base));
    expect(today.removed.outbox).toBe(0);
    // Two days later (injected): the row is 12 days old, past its 11.
    const later = await asApplicationRole(db.pool, (client) => runRetention(client, bounds, () => new Date(base.getTime() + 2 * DAY_MS)));
    expect(later.removed.outbox).toBe(1);
    expect((await db.pool.query('SELECT 1 FROM outcome_events WHERE event_id = $1', [id])).rowCount).toBe(0);
    // The database's floor is on its own clock, a day below each setting's least value: a clock so
    // far ahead that a cutoff falls inside it is refused, whatever the caller says.
    await expect(asApplicationRole(db.pool, (client) => runRetention(client, bounds, () => new Date(base.getTime() + 20 * DAY_MS)))).rejects.toThrow(/are kept; asked for everything before/);
  }
}

describe('retention in the reconcile run', () => {

  it('runs as the last phase of a reconcile run, within its budget, and reports what it removed', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 90));
    await outboxRow(db.pool, op.id, daysAgo(now, 80), daysAgo(now, 80));
    await rejectedRow(db.pool, daysAgo(now, 80));
    const summary = await asApplicationRole(db.pool, (client) =>
      runReconcile(
        {
          db: client,
          gateway: null,
          publisher: null,
          settings: { maxRequestsPerSecond: 10, maxSearchesPerSecond: 1, concurrency: 1, pageSize: 10, minTimeToCallMs: 1000, safetyMarginMs: 100, maxRunMs: 0, rejectedWindowSeconds: 60 },
          retention: { ...SETTINGS, batchSize: 100, maxRunMs: 0 },
          wallClock: () => now,
        },
        { remainingMs: () => 60_000 },
      ),
    );
    expect(summary.retention?.removed.outbox).toBe(1);
    expect(summary.retention?.removed.rejectedBodies).toBe(1);
    expect(summary.retention?.maxOverdueSeconds).toBe(0);
    // No gateway: the sweep's error, not retention's.
    expect(summary.errors.filter((e) => e.startsWith('retention'))).toEqual([]);
  });
});

describe('deduplication after the payload was reduced', () => {
  it('a redelivery of a reduced event is still a duplicate, by the webhook door and by the store', async () => {
    const now = new Date();
    const eventId = await inboxEvent(db.pool, daysAgo(now, 6));
    await asApplicationRole(db.pool, (client) => runRetention(client, { ...SETTINGS, batchSize: 1000 }, () => now));
    const { rows } = await db.pool.query<{ payload: unknown }>('SELECT payload FROM stripe_events WHERE event_id = $1', [eventId]);
    expect(rows[0]!.payload).toBeNull();

    // Stripe delivers the same event again, signed (the real SDK's signature): 200, duplicate, nothing written.
    const secret = 'whsec_retention_test_secret';
    const event = { id: eventId, object: 'event', type: 'payment_intent.succeeded', created: Math.floor(now.getTime() / 1000) - 6 * 86_400, livemode: false, api_version: '2026-10-28.endive',
      data: { object: { id: 'pi_redelivered', object: 'payment_intent', status: 'succeeded', amount: 1999, currency: 'eur', metadata: {} } } };
    const body = JSON.stringify(event);
    const header = Stripe.webhooks.generateTestHeaderString({ payload: body, secret });
    const reception = await receiveWebhook({ method: 'POST', body, headers: { 'stripe-signature': header } }, { secret, maxBodyBytes: 262_144 }, { db: db.pool, applier: null, publisher: null });
    expect(reception).toMatchObject({ kind: 'recorded', duplicate: true });
    const read = readStripeEvent(event);
    if (!read.ok) throw new Error(read.reason);
    expect(await recordStripeEvent(db.pool, read.event, 'eventbridge', null)).toEqual({ inserted: false, claimed: null });
    const after = await db.pool.query<{ payload: unknown; outcome: string }>('SELECT payload, outcome FROM stripe_events WHERE event_id = $1', [eventId]);
    expect(after.rows[0]).toEqual({ payload: null, outcome: 'stale' });
  });
});

describe('retention and the charge path do not wait for each other', () => {
  it('with a retention batch holding its locks, the charge path writes the same operation and its outbox under a short lock_timeout; a second batch skips the locked rows', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 60), { status: 'pending' });
    const due = [];
    for (let i = 0; i < 4; i++) due.push(await outboxRow(db.pool, op.id, daysAgo(now, 40 + i), daysAgo(now, 40 + i)));
    const unpublished = await outboxRow(db.pool, op.id, daysAgo(now, 1), null);

    const retention = await db.pool.connect();
    const charge = await db.pool.connect();
    const other = await db.pool.connect();
    try {
      await retention.query('SET ROLE charges_app');
      await retention.query('BEGIN');
      const { rows } = await retention.query<{ n: number }>('SELECT lifecycle_delete_published_outbox($1, 2) AS n', [daysAgo(now, 30)]);
      expect(rows[0]!.n).toBe(2);
      // The batch's transaction is still open, its row locks held. The charge path, as the
      // application role, with a lock_timeout far below anything a wait would take: every write succeeds.
      await charge.query('SET ROLE charges_app');
      await charge.query(`SET lock_timeout = '100ms'`);
      await charge.query('BEGIN');
      await charge.query(`UPDATE payment_operations SET attempts = attempts + 1, updated_at = now() WHERE id = $1`, [op.id]);
      await charge.query(
        `WITH e AS (SELECT uuidv7() AS id) INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
         SELECT e.id, $1, 'Charge Needs Review', jsonb_build_object('eventId', e.id::text, 'sequence', 9999) FROM e`,
        [op.id],
      );
      await charge.query(`UPDATE outcome_events SET published_at = now() WHERE event_id = $1`, [unpublished]);
      await charge.query('COMMIT');

      // A second retention run meanwhile takes the other two due rows, not waiting for the first's.
      await other.query('SET ROLE charges_app');
      await other.query(`SET lock_timeout = '100ms'`);
      const second = await other.query<{ n: number }>('SELECT lifecycle_delete_published_outbox($1, 10) AS n', [daysAgo(now, 30)]);
      expect(second.rows[0]!.n).toBe(2);
      await retention.query('COMMIT');
    } finally {
      for (const c of [retention, charge, other]) {
        await c.query('ROLLBACK').catch(() => {});
        await c.query('RESET ROLE').catch(() => {});
        await c.query('RESET lock_timeout').catch(() => {});
        c.release();
      }
    }
    const left = await db.pool.query<{ event_id: string }>('SELECT event_id FROM outcome_events WHERE operation_id = $1', [op.id]);
    expect(left.rows.map((r) => r.event_id)).not.toEqual(expect.arrayContaining([due[0]]));
    expect(left.rowCount).toBe(2); // the unpublished one (published now) and the charge path's new one
  });

  it('a due row another transaction holds is skipped, not waited for', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 60));
    const held = await outboxRow(db.pool, op.id, daysAgo(now, 50), daysAgo(now, 50));
    const free = await outboxRow(db.pool, op.id, daysAgo(now, 49), daysAgo(now, 49));
    const holder = await db.pool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT 1 FROM outcome_events WHERE event_id = $1 FOR UPDATE', [held]);
      const n = await asApplicationRole(db.pool, async (client) => {
        await client.query(`SET lock_timeout = '100ms'`);
        try {
          return (await client.query<{ n: number }>('SELECT lifecycle_delete_published_outbox($1, 10) AS n', [daysAgo(now, 30)])).rows[0]!.n;
        } finally {
          await client.query('RESET lock_timeout');
        }
      });
      expect(n).toBe(1);
    } finally {
      await holder.query('ROLLBACK');
      holder.release();
    }
    const left = await db.pool.query<{ event_id: string }>('SELECT event_id FROM outcome_events WHERE event_id = ANY($1)', [[held, free]]);
    expect(left.rows.map((r) => r.event_id)).toEqual([held]);
  });
});

describe('the guards still refuse what they refused', () => {
  it('outbox: no delete of an unpublished or recent row, by anyone; the application role has no DELETE; the setting by hand gains nothing', async () => {
    const now = new Date();
    const op = await finalCharge(db.pool, daysAgo(now, 60));
    const old = await outboxRow(db.pool, op.id, daysAgo(now, 50), daysAgo(now, 50));
    const unpublished = await outboxRow(db.pool, op.id, daysAgo(now, 50), null);
    // As the owner (the tests' connection): the guard.
    expect(await outcomeOf(db.pool, 'DELETE FROM outcome_events WHERE event_id = $1', [old])).toBe('23000: outcome_events rows are never deleted');
    expect(await outcomeOf(db.pool, 'UPDATE outcome_events SET attempts = 5 WHERE event_id = $1', [old])).toMatch(/^23000: outcome event .* is already published$/);
    await asApplicationRole(db.pool, async (client) => {
      expect(await outcomeOf(client, 'DELETE FROM outcome_events WHERE event_id = $1', [old])).toBe('42501: permission denied for table outcome_events');
      await client.query('BEGIN');
      await client.query(`SELECT set_config('charges.lifecycle', 'retention', true)`);
      expect(await outcomeOf(client, 'UPDATE outcome_events SET attempts = 5 WHERE event_id = $1', [old])).toMatch(/already published/);
      await client.query('ROLLBACK');
      // The function's own floor: nothing published in the last day, whatever the caller's clock says.
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_published_outbox($1, 10)', [new Date(now.getTime() + 30 * DAY_MS)])).toMatch(/^22023: outbox rows published of the last 1 day are kept/);
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_published_outbox($1, 0)', [daysAgo(now, 30)])).toMatch(/^22023: a retention batch is 1 to 10000 rows/);
    });
    // With the setting but not inside the function (current_user is not the owner-as-definer for charges_app).
    expect((await db.pool.query('SELECT 1 FROM outcome_events WHERE event_id = ANY($1)', [[old, unpublished]])).rowCount).toBe(2);
  });

  it('inbox: no delete of a row with its payload or an open row; no change of an applied row but the reduction; open rows are not reduced', async () => {
    const now = new Date();
    const applied = await inboxEvent(db.pool, daysAgo(now, 50));
    const open = await inboxEvent(db.pool, daysAgo(now, 50), { applied: false });
    expect(await outcomeOf(db.pool, 'DELETE FROM stripe_events WHERE event_id = $1', [applied])).toBe('23000: stripe_events rows are never deleted');
    expect(await outcomeOf(db.pool, `UPDATE stripe_events SET payload = NULL WHERE event_id = $1`, [applied])).toMatch(/^23000: stripe event .* is already applied$/);
    expect(await outcomeOf(db.pool, `UPDATE stripe_events SET outcome = 'settled' WHERE event_id = $1`, [applied])).toMatch(/already applied/);
    expect(await outcomeOf(db.pool, `UPDATE stripe_events SET payload = NULL WHERE event_id = $1`, [open])).toMatch(/cannot change|stripe_events_open_has_payload/);
    await asApplicationRole(db.pool, async (client) => {
      expect(await outcomeOf(client, 'DELETE FROM stripe_events WHERE event_id = $1', [applied])).toBe('42501: permission denied for table stripe_events');
      await client.query('BEGIN');
      await client.query(`SELECT set_config('charges.lifecycle', 'retention', true)`);
      expect(await outcomeOf(client, `UPDATE stripe_events SET payload = NULL, last_error = NULL WHERE event_id = $1`, [applied])).toMatch(/already applied/);
      await client.query('ROLLBACK');
      expect(await outcomeOf(client, 'SELECT lifecycle_reduce_inbox($1, 10)', [daysAgo(now, 2)])).toMatch(/^22023: inbox payloads received of the last 3 days are kept/);
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_inbox($1, 10)', [daysAgo(now, 3)])).toMatch(/^22023: inbox rows received of the last 4 days are kept/);
      // Deleting before reducing: nothing (a row must be reduced first).
      expect((await client.query<{ n: number }>('SELECT lifecycle_delete_inbox($1, 10) AS n', [daysAgo(now, 30)])).rows[0]!.n).toBe(0);
    });
  });

  it('rejected messages: never deleted, never changed but the body removed; as the application role not even that, by hand', async () => {
    const now = new Date();
    const id = await rejectedRow(db.pool, daysAgo(now, 50));
    expect(await outcomeOf(db.pool, 'DELETE FROM rejected_messages WHERE id = $1', [id])).toBe('23000: rejected_messages is append-only');
    expect(await outcomeOf(db.pool, `UPDATE rejected_messages SET reason = 'x' WHERE id = $1`, [id])).toBe('23000: rejected_messages is append-only');
    expect(await outcomeOf(db.pool, `UPDATE rejected_messages SET raw_body = NULL, raw_body_removed_at = now(), raw_body_removed_why = 'retention' WHERE id = $1`, [id])).toBe('23000: rejected_messages is append-only');
    await asApplicationRole(db.pool, async (client) => {
      expect(await outcomeOf(client, 'DELETE FROM rejected_messages WHERE id = $1', [id])).toBe('42501: permission denied for table rejected_messages');
      await client.query('BEGIN');
      await client.query(`SELECT set_config('charges.lifecycle', 'retention', true)`);
      expect(await outcomeOf(client, `UPDATE rejected_messages SET raw_body = NULL, raw_body_removed_at = now(), raw_body_removed_why = 'retention' WHERE id = $1`, [id])).toBe('23000: rejected_messages is append-only');
      await client.query('ROLLBACK');
      expect(await outcomeOf(client, 'SELECT lifecycle_remove_rejected_bodies($1, 10)', [now])).toMatch(/^22023: rejected bodies received of the last 1 day are kept/);
    });
    // The retention function, by the owner's definer rights, removes the body and nothing else.
    await asApplicationRole(db.pool, (client) => client.query('SELECT lifecycle_remove_rejected_bodies($1, 10)', [daysAgo(now, 14)]));
    const { rows } = await db.pool.query('SELECT raw_body, reason, reason_code, body_sha256 IS NOT NULL AS sha FROM rejected_messages WHERE id = $1', [id]);
    expect(rows[0]).toEqual({ raw_body: null, reason: 'orderId: expected string', reason_code: 'invalid_body', sha: true });
  });

  it('the lifecycle functions are the application role\'s and no one else\'s: PUBLIC may not execute them', async () => {
    const { rows } = await db.pool.query<{ proname: string; public: boolean; app: boolean }>(
      `SELECT p.proname, has_function_privilege('public', p.oid, 'EXECUTE') AS public, has_function_privilege('charges_app', p.oid, 'EXECUTE') AS app
         FROM pg_proc p WHERE p.proname IN ('lifecycle_delete_published_outbox', 'lifecycle_reduce_inbox', 'lifecycle_delete_inbox', 'lifecycle_remove_rejected_bodies', 'lifecycle_erase_customer',
                                            'lifecycle_delete_operator_reads', 'lifecycle_delete_resolved_findings')
        ORDER BY p.proname`,
    );
    expect(rows).toHaveLength(7);
    for (const r of rows) expect(r).toMatchObject({ public: false, app: true });
  });
});

describe('the retention settings', () => {
  const base = { DATABASE_URL: 'postgres://localhost/x' };
  it('have safe defaults', () => {
    expect(loadConfig(base).retention).toEqual({
      outboxDays: 30, stripeEventPayloadDays: 4, stripeEventDays: 30, rejectedBodyDays: 14, operatorReadDays: 400, resolvedFindingDays: 90,
      batchSize: 1000, maxBatchesPerRun: 200, maxRunMs: 10_000,
    });
  });
  it.each([
    [{ OUTBOX_RETENTION_DAYS: '1' }, /OUTBOX_RETENTION_DAYS must be an integer in \[2, 36500\], got "1"/],
    [{ STRIPE_EVENT_PAYLOAD_RETENTION_DAYS: '3' }, /STRIPE_EVENT_PAYLOAD_RETENTION_DAYS must be an integer in \[4, 36500\]/],
    [{ STRIPE_EVENT_RETENTION_DAYS: '4' }, /STRIPE_EVENT_RETENTION_DAYS must be an integer in \[5, 36500\]/],
    [{ STRIPE_EVENT_RETENTION_DAYS: '6', STRIPE_EVENT_PAYLOAD_RETENTION_DAYS: '7' }, /STRIPE_EVENT_RETENTION_DAYS \(6\) must be at least STRIPE_EVENT_PAYLOAD_RETENTION_DAYS \(7\)/],
    [{ REJECTED_BODY_RETENTION_DAYS: 'soon' }, /REJECTED_BODY_RETENTION_DAYS must be an integer/],
    [{ RETENTION_BATCH_SIZE: '20000' }, /RETENTION_BATCH_SIZE must be an integer in \[1, 10000\]/],
    [{ OPERATOR_READ_RETENTION_DAYS: '365' }, /OPERATOR_READ_RETENTION_DAYS must be an integer in \[366, 36500\], got "365"/],
    [{ RESOLVED_FINDING_RETENTION_DAYS: '29' }, /RESOLVED_FINDING_RETENTION_DAYS must be an integer in \[30, 36500\], got "29"/],
    [{ RESOLVED_FINDING_RETENTION_DAYS: 'a quarter' }, /RESOLVED_FINDING_RETENTION_DAYS must be an integer/],
  ])('refuse %o at start, saying what to change', (env, message) => {
    expect(() => loadConfig({ ...base, ...env })).toThrow(ConfigError);
    expect(() => loadConfig({ ...base, ...env })).toThrow(message);
  });
});

// Migration 020: the operator's reads and resolved findings, in a database of their own (the other
// tests' rows are of other ages).
describe('operator reads and resolved findings (migration 020)', () => {
  let own: TestDatabase;
  beforeAll(async () => {
    own = await createTestDatabase('retention_reads_findings');
  });
  afterAll(async () => {
    await own.drop();
  });

  const readAt = async (at: Date) =>
    (await own.pool.query<{ id: string }>(
      `INSERT INTO operator_reads (occurred_at, actor, verified, command, what, rejected_message_ids) VALUES ($1, 'operator:alice', false, 'rejected list --with-body', 'rejected_message_body', '{1}') RETURNING id`,
      [at],
    )).rows[0]!.id;
  const findingAt = async (foundAt: Date, resolvedAt: Date | null, eventId: string) =>
    (await own.pool.query<{ id: string }>(
      `INSERT INTO stripe_event_findings (kind, payment_intent_id, event_id, reason, found_at, resolved_at, resolved_by, resolution)
       VALUES ('contradiction', $1, $2, 'a second succeeded PaymentIntent', $3, $4, CASE WHEN $4::timestamptz IS NOT NULL THEN 'operator:alice' END, CASE WHEN $4::timestamptz IS NOT NULL THEN 'refunded by hand' END)
       RETURNING id`,
      [`pi_${eventId}`, eventId, foundAt, resolvedAt],
    )).rows[0]!.id;

  it('past the bound removed, inside it and every open finding kept; the event a removed finding pinned follows in the same run', async () => {
    const now = new Date();
    const readOld = await readAt(daysAgo(now, 401));
    const readOlder = await readAt(daysAgo(now, 900));
    const readKept = await readAt(daysAgo(now, 399));
    const evResolvedOld = await inboxEvent(own.pool, daysAgo(now, 200));
    const evResolvedRecent = await inboxEvent(own.pool, daysAgo(now, 200));
    const evOpen = await inboxEvent(own.pool, daysAgo(now, 200));
    const resolvedOld = await findingAt(daysAgo(now, 199), daysAgo(now, 91), evResolvedOld);
    const resolvedRecent = await findingAt(daysAgo(now, 199), daysAgo(now, 89), evResolvedRecent);
    const open = await findingAt(daysAgo(now, 199), null, evOpen);

    const cutoffs = retentionCutoffs(SETTINGS, now);
    const before = await retentionOverdue(own.pool, cutoffs);
    expect(before.operatorReads).toBeGreaterThanOrEqual(499 * 86_400);
    expect(before.resolvedFindings).toBeGreaterThanOrEqual(86_000);
    const run = await asApplicationRole(own.pool, (client) => runRetention(client, SETTINGS, () => now));
    expect(run.removed).toMatchObject({ operatorReads: 2, resolvedFindings: 1, stripeEvents: 1, stripeEventPayloads: 3 });
    expect(run.overdueSeconds).toMatchObject({ operatorReads: 0, resolvedFindings: 0 });
    expect(run.maxOverdueSeconds).toBe(0);

    const reads = (await own.pool.query<{ id: string }>('SELECT id FROM operator_reads ORDER BY id')).rows.map((r) => r.id);
    expect(reads).toEqual([readKept]);
    expect(reads).not.toContain(readOld);
    expect(reads).not.toContain(readOlder);
    const findings = (await own.pool.query<{ id: string }>('SELECT id FROM stripe_event_findings ORDER BY id')).rows.map((r) => r.id);
    expect(findings).toEqual([resolvedRecent, open]);
    expect(findings).not.toContain(resolvedOld);
    // The pinned events: the removed finding's went with it; the others stay, reduced.
    const events = new Map((await own.pool.query<{ event_id: string; reduced: boolean }>('SELECT event_id, payload IS NULL AS reduced FROM stripe_events')).rows.map((r) => [r.event_id, r.reduced]));
    expect(events.has(evResolvedOld)).toBe(false);
    expect(events.get(evResolvedRecent)).toBe(true);
    expect(events.get(evOpen)).toBe(true);

    // With the least bound (30 days) the resolved one of 89 days goes; an open finding found 40 years
    // ago, like the other open one, stays, whatever the bound.
    const ancient = await findingAt(daysAgo(now, 14_600), null, await inboxEvent(own.pool, daysAgo(now, 14_600)));
    const again = await asApplicationRole(own.pool, (client) => runRetention(client, { ...SETTINGS, resolvedFindingDays: 30 }, () => now));
    expect(again.removed.resolvedFindings).toBe(1);
    const left = (await own.pool.query<{ id: string }>('SELECT id FROM stripe_event_findings ORDER BY id')).rows.map((r) => r.id);
    expect(left).toEqual([open, ancient]);
  });

  it('operator reads: never updated; deleted by no one but the retention function, and by it only past its floor', async () => {
    const now = new Date();
    const old = await readAt(daysAgo(now, 800));
    const recent = await readAt(daysAgo(now, 10));
    // As the owner (the tests' connection): the guard.
    expect(await outcomeOf(own.pool, 'DELETE FROM operator_reads WHERE id = $1', [old])).toBe('23000: operator_reads is append-only');
    expect(await outcomeOf(own.pool, `UPDATE operator_reads SET actor = 'operator:mallory' WHERE id = $1`, [old])).toBe('23000: operator_reads is append-only');
    expect(await outcomeOf(own.pool, `UPDATE operator_reads SET actor = 'operator:mallory' WHERE id = $1`, [recent])).toBe('23000: operator_reads is append-only');
    await asApplicationRole(own.pool, async (client) => {
      expect(await outcomeOf(client, 'DELETE FROM operator_reads WHERE id = $1', [old])).toBe('42501: permission denied for table operator_reads');
      expect(await outcomeOf(client, `UPDATE operator_reads SET actor = 'x' WHERE id = $1`, [old])).toBe('42501: permission denied for table operator_reads');
      await client.query('BEGIN');
      await client.query(`SELECT set_config('charges.lifecycle', 'retention', true)`);
      expect(await outcomeOf(client, 'DELETE FROM operator_reads WHERE id = $1', [old])).toBe('42501: permission denied for table operator_reads');
      await client.query('ROLLBACK');
      // The function's own floor: nothing of the last 365 days, whatever the caller's clock says.
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_operator_reads($1, 10)', [daysAgo(now, 364)])).toMatch(/^22023: operator reads of the last 365 days are kept/);
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_operator_reads($1, 10001)', [daysAgo(now, 400)])).toMatch(/^22023: a retention batch is 1 to 10000 rows/);
    });
    // The owner with the setting set by hand, outside the function: the guard's own floor still keeps a recent row.
    await own.pool.query('BEGIN');
    await own.pool.query(`SELECT set_config('charges.lifecycle', 'retention', true)`);
    expect(await outcomeOf(own.pool, 'DELETE FROM operator_reads WHERE id = $1', [recent])).toBe('23000: operator_reads is append-only');
    await own.pool.query('ROLLBACK');
    expect((await own.pool.query('SELECT 1 FROM operator_reads WHERE id = ANY($1::bigint[])', [[old, recent]])).rowCount).toBe(2);
  });

  it('findings: an open one is deleted by no one; a resolved one only by the retention function, past its floor; resolving still works', async () => {
    const now = new Date();
    const openEvent = await inboxEvent(own.pool, daysAgo(now, 300));
    const resolvedEvent = await inboxEvent(own.pool, daysAgo(now, 300));
    const openOne = await findingAt(daysAgo(now, 300), null, openEvent);
    const resolvedOne = await findingAt(daysAgo(now, 300), daysAgo(now, 200), resolvedEvent);
    expect(await outcomeOf(own.pool, 'DELETE FROM stripe_event_findings WHERE id = $1', [openOne])).toBe(`23000: finding ${openOne} is open: an open finding is never deleted`);
    expect(await outcomeOf(own.pool, 'DELETE FROM stripe_event_findings WHERE id = $1', [resolvedOne])).toBe(`23000: finding ${resolvedOne} is kept: resolved findings are removed by retention only`);
    await asApplicationRole(own.pool, async (client) => {
      expect(await outcomeOf(client, 'DELETE FROM stripe_event_findings WHERE id = $1', [resolvedOne])).toBe('42501: permission denied for table stripe_event_findings');
      expect(await outcomeOf(client, 'SELECT lifecycle_delete_resolved_findings($1, 10)', [daysAgo(now, 28)])).toMatch(/^22023: findings resolved of the last 29 days are kept/);
      // The function with the oldest cutoff it accepts takes the resolved one and never the open one.
      expect((await client.query<{ n: number }>('SELECT lifecycle_delete_resolved_findings($1, 10) AS n', [daysAgo(now, 30)])).rows[0]!.n).toBeGreaterThanOrEqual(1);
      // Resolving (an update) is not the guard's: it works as before.
      expect(await outcomeOf(client, `UPDATE stripe_event_findings SET resolved_at = now(), resolved_by = 'operator:bob', resolution = 'explained' WHERE id = $1 AND resolved_at IS NULL`, [openOne])).toBe('ok');
    });
    expect((await own.pool.query('SELECT 1 FROM stripe_event_findings WHERE id = $1', [resolvedOne])).rowCount).toBe(0);
    // Just resolved: inside the floor, kept by any run.
    expect((await own.pool.query('SELECT 1 FROM stripe_event_findings WHERE id = $1', [openOne])).rowCount).toBe(1);
  });
});
