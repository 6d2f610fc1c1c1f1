// The applier's transaction when PostgreSQL drops its connection mid-flight (57P01: an admin
// shutdown, a failover, a crash). Real PostgreSQL; the applier's backend is terminated while its
// BEGIN … COMMIT waits on a row lock another connection holds. The process must not crash (a checked-out
// pg client has no 'error' listener of pg-pool's), nothing of the transaction may stay written, the
// broken client must be destroyed rather than handed out again, and a later apply applies the event once.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readStripeEvent } from '../../lambdas/payments/event-decisions.ts';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import { claimDueEvents, recordStripeEvent } from '../../lambdas/payments/inbox-store.ts';
import { makeStripeEvent } from '../../local/fake-stripe/webhooks.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { count, inboxRow, testModeKeyOnly } from './support.ts';

const APP = 'applier-under-test';
let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('applier_conn');
});
afterAll(async () => {
  await db.drop();
});

/** A payment_intent.succeeded naming an operation the ledger does not have: applied as a finding + mark applied, in one transaction. */
async function recordUnrecordedCharge() {
  const operationId = randomUUID();
  const event = makeStripeEvent('payment_intent.succeeded', {
    id: `pi_${randomUUID().replace(/-/g, '').slice(0, 24)}`,
    object: 'payment_intent',
    amount: 1999,
    currency: 'usd',
    status: 'succeeded',
    customer: null,
    metadata: { operation_id: operationId, order_id: 'order-conn-1' },
  });
  const read = readStripeEvent(event);
  if (!read.ok) throw new Error(read.reason);
  const recorded = await recordStripeEvent(db.pool, read.event, 'webhook', null);
  expect(recorded.inserted).toBe(true);
  return { eventId: event.id, paymentIntentId: event.data.object.id as string };
}

async function waitFor<T>(what: string, probe: () => Promise<T | undefined>): Promise<T> {
  for (let i = 0; i < 500; i++) {
    const value = await probe();
    if (value !== undefined) return value;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error(`gave up waiting for ${what}`);
}

/**
 * Claim the event, hold its inbox row's lock from another connection so the applier's transaction
 * waits mid-flight (finding inserted, `UPDATE stripe_events … applied` blocked), then end that
 * statement from outside with `interrupt` (pg_terminate_backend / pg_cancel_backend) and let it finish.
 */
async function interruptMidTransaction(interrupt: 'pg_terminate_backend' | 'pg_cancel_backend') {
  // A bare pool as a caller may build one (pg-pool's own 'error' listener only, as lambdas/ops/direct.ts
  // does) — deliberately NOT the test pool from support/db.ts, whose per-client 'error' listener (like
  // lambdas/runtime/resources.ts's) would hide a missing listener in the applier. max 1: a client handed
  // back to the pool would be the one every next statement gets.
  const pool = new pg.Pool({ connectionString: db.url, max: 1, application_name: APP });
  pool.on('error', () => {});
  const uncaught: unknown[] = [];
  const onUncaught = (error: unknown) => uncaught.push(error);
  process.on('uncaughtException', onUncaught);
  process.on('unhandledRejection', onUncaught);
  const blocker = new pg.Client({ connectionString: db.url });
  await blocker.connect();
  // Looks on from outside the blocker's transaction (pg_stat_activity is a snapshot per transaction).
  const observer = new pg.Client({ connectionString: db.url });
  await observer.connect();
  const close = async () => {
    process.off('uncaughtException', onUncaught);
    process.off('unhandledRejection', onUncaught);
    await blocker.end();
    await observer.end();
    await pool.end();
  };
  try {
    const { eventId, paymentIntentId } = await recordUnrecordedCharge();
    const applier = new StripeEventApplier({ db: pool, gateway: testModeKeyOnly(), actor: 'stripe-events' });
    const [row] = await claimDueEvents(pool, 10, randomUUID(), 60_000);
    expect(row?.eventId).toBe(eventId);

    // NO KEY UPDATE, not UPDATE: the finding's foreign key check (KEY SHARE on this row) must pass,
    // so the transaction has written its finding when the UPDATE waits.
    await blocker.query('BEGIN');
    await blocker.query('SELECT 1 FROM stripe_events WHERE event_id = $1 FOR NO KEY UPDATE', [eventId]);
    const applying = applier.applySafely(row!);
    const waiting = await waitFor('the applier to wait on the row lock', async () => {
      const { rows } = await observer.query<{ pid: number; query: string }>(
        // A row lock (the blocker's): a loaded server also makes a statement wait a moment on a
        // relation-extension lock, which is 'Lock' too and passes by itself (seen: the finding's INSERT).
        `SELECT pid, query FROM pg_stat_activity WHERE application_name = $1 AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple') AND state = 'active'`,
        [APP],
      );
      return rows[0];
    });
    expect(waiting.query).toMatch(/UPDATE stripe_events/);
    // The finding is written inside the open transaction (so a rollback has something to undo).
    const { rows: locks } = await observer.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE l.pid = $1 AND c.relname = 'stripe_event_findings' AND l.mode = 'RowExclusiveLock'`,
      [waiting.pid],
    );
    expect(locks[0]!.n).toBe(1);

    const { rows: sent } = await observer.query<{ ok: boolean }>(`SELECT ${interrupt}($1) AS ok`, [waiting.pid]);
    expect(sent[0]!.ok).toBe(true);
    if (interrupt === 'pg_terminate_backend') {
      await waitFor('the terminated backend to leave', async () => {
        const { rows } = await observer.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [waiting.pid]);
        return rows.length === 0 ? true : undefined;
      });
    }
    // Let the applier's deferral through.
    await blocker.query('ROLLBACK');
    const result = await applying;
    // Give any late socket 'end' → 'error' of the dead client a chance to surface before looking.
    await new Promise((resolve) => setImmediate(resolve));
    await new Promise((resolve) => setTimeout(resolve, 50));
    return { pool, applier, uncaught, eventId, paymentIntentId, pid: waiting.pid, result, close };
  } catch (error) {
    await close();
    throw error;
  }
}

describe('the connection dies inside the applier transaction', () => {
  it('57P01 mid-transaction: no uncaught error, nothing written, the broken client destroyed, the event applied once later', async () => {
    const t = await interruptMidTransaction('pg_terminate_backend');
    try {
      expect(t.uncaught).toEqual([]);
      expect(t.result).toMatchObject({ eventId: t.eventId, outcome: 'deferred' });
      expect(t.result.reason).toMatch(/^error: .*terminat/i);
      // Nothing half-written: the finding rolled back with the transaction; the event not applied, deferred with its error.
      expect(await count(db.pool, 'stripe_event_findings WHERE payment_intent_id = $1', [t.paymentIntentId])).toBe(0);
      const after = await inboxRow(db.pool, t.eventId);
      expect(after).toMatchObject({ applied_at: null, outcome: null });
      expect(after!.last_error).toMatch(/terminat/i);
      // The broken client is gone: the pool's one connection is a new backend, idle, not the dead pid.
      expect(t.pool.totalCount).toBe(1);
      expect(t.pool.idleCount).toBe(1);
      const { rows: now } = await t.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      expect(now[0]!.pid).not.toBe(t.pid);

      // The deferral's backoff (1 s) is not waited for: make the row due now.
      await db.pool.query('UPDATE stripe_events SET next_attempt_at = now() WHERE event_id = $1', [t.eventId]);
      const second = await t.applier.applyDue();
      expect(second).toMatchObject({ applied: 1, failed: 0, unrecordedCharges: 1 });
      expect(await inboxRow(db.pool, t.eventId)).toMatchObject({ outcome: 'unrecorded' });
      expect((await inboxRow(db.pool, t.eventId))!.applied_at).not.toBeNull();
      expect(await count(db.pool, 'stripe_event_findings WHERE payment_intent_id = $1', [t.paymentIntentId])).toBe(1);
      // Exactly once: another pass finds nothing to do (an applied row is never due again).
      expect(await t.applier.applyDue()).toMatchObject({ applied: 0, failed: 0 });
      expect(await count(db.pool, 'stripe_event_findings WHERE payment_intent_id = $1', [t.paymentIntentId])).toBe(1);
      expect(t.uncaught).toEqual([]);
    } finally {
      await t.close();
    }
  });

  it('a statement cancelled mid-transaction (57014, the connection alive): rolled back, and that client is not handed out again', async () => {
    // pg-pool itself drops a client whose connection is dead, so the terminate case above cannot tell
    // whether #transaction releases with its error. Here the connection survives: only
    // client.release(error) keeps a client whose transaction failed (its ROLLBACK may have failed too)
    // out of the pool.
    const t = await interruptMidTransaction('pg_cancel_backend');
    try {
      expect(t.uncaught).toEqual([]);
      expect(t.result).toMatchObject({ eventId: t.eventId, outcome: 'deferred' });
      expect(t.result.reason).toMatch(/^error: .*cancel/i);
      expect(await count(db.pool, 'stripe_event_findings WHERE payment_intent_id = $1', [t.paymentIntentId])).toBe(0);
      expect(await inboxRow(db.pool, t.eventId)).toMatchObject({ applied_at: null, outcome: null });
      const { rows: now } = await t.pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
      expect(now[0]!.pid).not.toBe(t.pid);
      // The cancelled session was ended, not left idle (or idle in a transaction) on the server.
      await waitFor('the released session to end', async () => {
        const { rows } = await db.pool.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [t.pid]);
        return rows.length === 0 ? true : undefined;
      });
      await db.pool.query('UPDATE stripe_events SET next_attempt_at = now() WHERE event_id = $1', [t.eventId]);
      expect(await t.applier.applyDue()).toMatchObject({ applied: 1, failed: 0, unrecordedCharges: 1 });
      expect(await count(db.pool, 'stripe_event_findings WHERE payment_intent_id = $1', [t.paymentIntentId])).toBe(1);
    } finally {
      await t.close();
    }
  });
});
