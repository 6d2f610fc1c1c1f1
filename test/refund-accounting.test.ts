// Refund accounting after Stripe failed a refund that had succeeded (migrations/009): the refund
// operation stays final `succeeded`, carries the mark (failed_after_success_at / _reason) written with
// its fact, and its amount is refundable again — in the engine's request statement, in the insert
// trigger, in `ops refunds list`, in the invariant checker. Real PostgreSQL 18, the real stripe SDK
// against the fake Stripe, Stripe's events signed and received by the real webhook path.
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { runOps } from '../lambdas/ops/commands.ts';
import { render } from '../lambdas/ops/render.ts';
import { findOperation } from '../lambdas/payments/operations-store.ts';
import type { ChargeInput, RefundInput } from '../lambdas/payments/types.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { WebhookDispatcher, type StripeEventJson } from '../local/fake-stripe/webhooks.ts';
import { checkInvariants } from '../local/invariants.ts';
import { createDatabase } from '../local/postgres.ts';
import { netChargedByOrder } from '../local/stripe-truth.ts';
import { databaseUrl, type TestDatabase, updateAgainstGuardOnly } from './support/db.ts';
import { chargedOrder as charged, testEngine } from './support/engine.ts';
import { chargeOrder, refundOf as refundRequest } from './support/orders.ts';
import type { StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';
import { deliverWebhook, SECRET } from './stripe-events/support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('refund_accounting', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe });
const deliver = (event: StripeEventJson) => deliverWebhook({ db, stripe }, event);
const refundOf = (orderId: string, amount: number): RefundInput => refundRequest(orderId, { amount });
const mark = (id: string) =>
  db.pool
    .query<{ at: Date | null; reason: string | null; status: string }>(
      'SELECT failed_after_success_at AS at, failed_after_success_reason AS reason, status FROM payment_operations WHERE id = $1',
      [id],
    )
    .then((r) => r.rows[0]!);
const ops = (args: string[]) =>
  runOps(args, {
    defaultActor: 'tester',
    context: () => ({ db: db.pool, stripe: () => Promise.reject(new Error('no Stripe look-ups')), transport: { kind: 'test' } }),
  });

const chargedOrder = (overrides: Partial<ChargeInput> = {}) => charged(engine(), chargeOrder(overrides));

/**
 * A refund of `amount` that succeeded at Stripe and that Stripe then failed (pm_card_refundFail: the
 * issuer could not process it), learnt by the pipeline from the signed refund.failed the fake makes
 * from its own ledger — the event applier's path, as in production.
 */
async function refundFailedAfterSuccess(orderId: string, amount: number): Promise<{ id: string; refundStripeId: string }> {
  const id = await engine().requestRefund(refundOf(orderId, amount));
  expect((await engine().executeCharge(id)).status).toBe('succeeded');
  const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
  try {
    dispatcher.poll();
    const refundStripeId = stripe.fake.refunds({ operationId: id })[0]!.id;
    stripe.fake.settleRefund(refundStripeId, 'failed');
    dispatcher.poll();
    const failed = dispatcher.events().find((e) => e.type === 'refund.failed' && (e.data.object as { id?: string }).id === refundStripeId)!;
    expect(await deliver(failed)).toMatchObject({ applied: { outcome: 'failed_after_success', operationId: id } });
    return { id, refundStripeId };
  } finally {
    await dispatcher.stop();
  }
}

/** A row straight into payment_operations, as an operator's psql or a buggy writer would: only the trigger judges it. */
const insertRefund = (orderId: string, chargeId: string, refundId: string, amount: number, extra: { paymentIntent?: string } = {}) =>
  db.pool.query<{ id: string }>(
    `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, refund_reason, refund_payment_intent, amount, currency, customer_id, payment_method)
     VALUES ($1, 'refund', $2, $3, $4, $5, $6, 'eur', 'cus_test', 'pm_card_visa') RETURNING id::text`,
    [orderId, refundId, chargeId, extra.paymentIntent ? 'duplicate' : null, extra.paymentIntent ?? null, amount],
  );

/** Settle a row made by insertRefund as the engine would (open → final is an allowed change). */
const settle = (id: string, status: 'succeeded' | 'failed', externalId: string | null = status === 'succeeded' ? `re_${randomUUID().replaceAll('-', '')}` : null) =>
  db.pool.query(
    `UPDATE payment_operations SET status = $2, external_id = $3, settled_at = now(), next_attempt_at = NULL WHERE id = $1`,
    [id, status, externalId],
  );

describe('a refund Stripe failed after it succeeded gives its amount back to the order', () => {
  it('the mark is written with the fact and the finding; a NEW refund of the full amount is accepted and sent; ops and the checker agree', async () => {
    const { input } = await chargedOrder({ amount: 4000, paymentMethod: 'pm_card_refundFail' });
    const first = await refundFailedAfterSuccess(input.orderId, 4000);

    // The operation stays final succeeded and carries the mark — in the SAME transaction as the fact
    // and the finding (now() is the transaction's start: one instant for all three rows).
    const marked = await mark(first.id);
    expect(marked).toMatchObject({ status: 'succeeded', reason: 'expired_or_canceled_card' });
    expect(marked.at).toBeInstanceOf(Date);
    const { rows: fact } = await db.pool.query(`SELECT created_at FROM outcome_events WHERE operation_id = $1 AND event_type = 'Refund Failed After Success'`, [first.id]);
    const { rows: finding } = await db.pool.query('SELECT found_at FROM stripe_event_findings WHERE payment_intent_id = $1', [first.refundStripeId]);
    expect([fact.length, finding.length]).toEqual([1, 1]);
    expect([fact[0].created_at.getTime(), finding[0].found_at.getTime()]).toEqual([marked.at!.getTime(), marked.at!.getTime()]);
    expect(await findOperation(db.pool, first.id)).toMatchObject({
      status: 'succeeded',
      refund: { failedAfterSuccess: { at: marked.at, failureReason: 'expired_or_canceled_card' } },
    });

    // The customer got nothing back: ops shows the whole amount as left.
    expect(await ops(['refunds', 'list', input.orderId, '--json'])).toMatchObject({ ok: true, result: { refunded: 0, reversed: 4000, inFlight: 0, left: 4000 } });

    // Before 009: `exceeds_charge` (4000 already refunded or in flight), nothing sent.
    const creates = () => stripe.fake.requests().filter((r) => r.endpoint === 'refund_create').length;
    const before = creates();
    const again = await engine().processRefund(refundOf(input.orderId, 4000));
    expect(again.rejection).toBeNull();
    expect(again.execution).toMatchObject({ status: 'succeeded' });
    expect(creates()).toBe(before + 1);
    const atStripe = stripe.fake.refunds({ orderId: input.orderId });
    expect(atStripe.map((r) => [r.amount, r.status]).sort()).toEqual([[4000, 'failed'], [4000, 'succeeded']]);

    // Now the whole charge is refunded: one cent more is refused, without a Stripe call.
    await expect(engine().requestRefund(refundOf(input.orderId, 1))).rejects.toMatchObject({ code: 'exceeds_charge' });
    expect(creates()).toBe(before + 1);

    // Stripe, the ledger, ops and the checker agree: 4000 charged, 4000 refunded (the second refund), 0 kept.
    const net = netChargedByOrder(stripe.fake.paymentIntents({ orderId: input.orderId }), stripe.fake.refunds({ orderId: input.orderId })).get(input.orderId)!;
    expect(net).toMatchObject({ charged: 4000, refunded: 4000, net: 0 });
    const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds: stripe.fake.refunds(), orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violations).toEqual([]);
    expect(report.expectedNet.get(input.orderId)).toBe(0);
    const listed = await ops(['refunds', 'list', input.orderId, '--json']);
    expect(listed).toMatchObject({ ok: true, result: { refunded: 4000, reversed: 4000, left: 0 } });
    expect(render(listed, false).stdout.join('\n')).toMatch(/succeeded, then failed at Stripe \(expired_or_canceled_card\)/);

    // operations show / refunds show read the mark too.
    const shown = await ops(['refunds', 'show', first.id, '--json']);
    expect(shown).toMatchObject({ ok: true, result: { operation: { refund: { failedAfterSuccess: { failureReason: 'expired_or_canceled_card' } } } } });
    expect(render(shown, false).stdout.join('\n')).toMatch(/succeeded, then FAILED at Stripe \(expired_or_canceled_card/);
  });

  it('the checker refuses a mark without its fact event, and a fact event without the mark', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const { rows } = await insertRefund(input.orderId, chargeId, 'marked-alone', 300);
    await settle(rows[0]!.id, 'succeeded');
    await db.pool.query(`UPDATE payment_operations SET failed_after_success_at = now() WHERE id = $1`, [rows[0]!.id]);
    const unmarked = (await insertRefund(input.orderId, chargeId, 'announced-alone', 300)).rows[0]!.id;
    await settle(unmarked, 'succeeded');
    // The fact's insert trigger marks its refund (009): a fact without the mark needs a writer that goes
    // around the trigger — the owner, with the trigger disabled for this one transaction.
    const eventId = randomUUID();
    const owner = await db.pool.connect();
    try {
      await owner.query('BEGIN');
      await owner.query('ALTER TABLE outcome_events DISABLE TRIGGER outcome_events_mark_refund_failed_after_success');
      await owner.query(
        `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES ($1::uuid, $2, 'Refund Failed After Success', jsonb_build_object('eventId', $1::text))`,
        [eventId, unmarked],
      );
      await owner.query('ALTER TABLE outcome_events ENABLE TRIGGER outcome_events_mark_refund_failed_after_success');
      await owner.query('COMMIT');
    } finally {
      owner.release();
    }
    expect(await mark(unmarked)).toMatchObject({ at: null });
    // A ledger-only rule: judged with Stripe's refunds and without them (a caller that passes none).
    for (const refunds of [stripe.fake.refunds(), undefined]) {
      const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), refunds, orderIds: [input.orderId] });
      const mismatches = report.violations.filter((v) => v.kind === 'refund_mismatch').map((v) => v.detail);
      expect(mismatches).toHaveLength(2);
      expect(mismatches).toEqual(expect.arrayContaining([expect.stringMatching(/marked failed after success without/), expect.stringMatching(/event without the operation's mark/)]));
    }
  });
});

describe('the database agrees: the insert trigger and the update guard (009)', () => {
  it('after the mark, the same full refund inserted straight in SQL passes the trigger; an over-refund is still refused', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const { rows } = await insertRefund(input.orderId, chargeId, 'sql-1', 1000);
    await settle(rows[0]!.id, 'succeeded');
    // Without the mark the charge is fully held: refused (the control).
    await expect(insertRefund(input.orderId, chargeId, 'sql-2', 1000)).rejects.toMatchObject({ code: '23514', constraint: 'refunds_within_charge' });
    await db.pool.query(`UPDATE payment_operations SET failed_after_success_at = now(), failed_after_success_reason = 'lost_or_stolen_card' WHERE id = $1`, [rows[0]!.id]);
    // Before 009: refunds_within_charge (1000 held). Now: accepted.
    await insertRefund(input.orderId, chargeId, 'sql-2', 1000);
    // sql-2 is in flight and holds the whole charge again.
    await expect(insertRefund(input.orderId, chargeId, 'sql-3', 1)).rejects.toMatchObject({ constraint: 'refunds_within_charge' });
  });

  it('the mark follows the fact: an outbox INSERT alone, as 008\'s code (old or rolled back) writes it as charges_app, marks the refund', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const id = (await insertRefund(input.orderId, chargeId, 'old-1', 1000)).rows[0]!.id;
    await settle(id, 'succeeded');
    const fact = async (operationId: string, failureReason: string | null) => {
      const client = await db.pool.connect();
      try {
        await client.query('BEGIN');
        await client.query('SET LOCAL ROLE charges_app');
        const eventId = randomUUID();
        // What 008's statement writes that matters here: the outbox row; the operation is not touched.
        const { rows } = await client.query<{ created_at: Date }>(
          `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
           VALUES ($1::uuid, $2::uuid, 'Refund Failed After Success',
                   jsonb_build_object('version', 1, 'eventId', $1::text, 'operationId', $2::uuid, 'kind', 'refund_failed_after_success', 'failureReason', $3::text))
           RETURNING created_at`,
          [eventId, operationId, failureReason],
        );
        await client.query('COMMIT');
        return rows[0]!.created_at;
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    };
    const at = await fact(id, 'lost_or_stolen_card');
    expect(await mark(id)).toEqual({ status: 'succeeded', at, reason: 'lost_or_stolen_card' });
    // A second fact of the same refund (a replay, an old writer) moves nothing.
    await fact(id, 'unknown');
    expect(await mark(id)).toEqual({ status: 'succeeded', at, reason: 'lost_or_stolen_card' });
    // …and the refund is not "refunded": ops, the trigger and the engine give the amount back.
    expect(await ops(['refunds', 'list', input.orderId, '--json'])).toMatchObject({ ok: true, result: { refunded: 0, reversed: 1000, left: 1000 } });
    await insertRefund(input.orderId, chargeId, 'old-2', 1000);

    // No reason from Stripe (null or empty): the mark without one. A fact of an open refund marks nothing.
    const other = await chargedOrder({ amount: 500 });
    const silent = (await insertRefund(other.input.orderId, other.chargeId, 'old-3', 200)).rows[0]!.id;
    const empty = (await insertRefund(other.input.orderId, other.chargeId, 'old-4', 200)).rows[0]!.id;
    const open = (await insertRefund(other.input.orderId, other.chargeId, 'old-5', 100)).rows[0]!.id;
    await settle(silent, 'succeeded');
    await settle(empty, 'succeeded');
    expect((await mark(silent)).at).toBeNull();
    expect(await fact(silent, null)).toEqual((await mark(silent)).at);
    expect(await fact(empty, '')).toEqual((await mark(empty)).at);
    expect([(await mark(silent)).reason, (await mark(empty)).reason]).toEqual([null, null]);
    await fact(open, 'unknown');
    expect(await mark(open)).toEqual({ status: 'pending', at: null, reason: null });
  });

  it('a refund in `failed` status gives its amount back, as before; a remedy refund is never counted, marked or not', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const failed = (await insertRefund(input.orderId, chargeId, 'f-1', 1000)).rows[0]!.id;
    await settle(failed, 'failed');
    const remedy = (await insertRefund(input.orderId, chargeId, 'duplicate:pi_extra_accounting', 1000, { paymentIntent: `pi_extra${randomUUID().replaceAll('-', '')}` })).rows[0]!.id;
    await settle(remedy, 'succeeded');
    const own = (await insertRefund(input.orderId, chargeId, 'f-2', 1000)).rows[0]!.id; // neither counts
    await settle(own, 'succeeded');
    await expect(insertRefund(input.orderId, chargeId, 'f-3', 1)).rejects.toMatchObject({ constraint: 'refunds_within_charge' });
    // Marking the remedy changes nothing: it never held any of the charge.
    await db.pool.query(`UPDATE payment_operations SET failed_after_success_at = now() WHERE id = $1`, [remedy]);
    await expect(insertRefund(input.orderId, chargeId, 'f-3', 1)).rejects.toMatchObject({ constraint: 'refunds_within_charge' });
    // The engine's request statement says the same as the trigger.
    await expect(engine().requestRefund(refundOf(input.orderId, 1))).rejects.toMatchObject({ code: 'exceeds_charge' });
    expect(await ops(['refunds', 'list', input.orderId, '--json'])).toMatchObject({ ok: true, result: { refunded: 1000, reversed: 0, inFlight: 0, left: 0 } });
  });

  it('the guard allows the mark once on a final succeeded refund, as the application role, and nothing else', async () => {
    const { input, chargeId } = await chargedOrder({ amount: 1000 });
    const id = (await insertRefund(input.orderId, chargeId, 'g-1', 400)).rows[0]!.id;
    const open = (await insertRefund(input.orderId, chargeId, 'g-2', 100)).rows[0]!.id;
    const failed = (await insertRefund(input.orderId, chargeId, 'g-3', 100)).rows[0]!.id;
    await settle(id, 'succeeded');
    await settle(failed, 'failed');
    // Each refused change twice: with the table's constraints (refused, by a CHECK or by the guard,
    // which fires after the row is written: 027) and without them, where what refuses is the guard.
    const update = async (set: string, target = id) => {
      const sql = `UPDATE payment_operations SET ${set} WHERE id = $1`;
      await expect(db.pool.query(sql, [target])).rejects.toMatchObject({ code: expect.stringMatching(/^23/) });
      return updateAgainstGuardOnly(db.pool, sql, [target]);
    };

    // The mark with anything else, on a final row: refused.
    await expect(update(`failed_after_success_at = now(), last_error = 'x'`)).rejects.toThrow(/is final \(succeeded\) and cannot change/);
    await expect(update(`failed_after_success_at = now(), updated_at = now() + interval '1 second'`)).rejects.toThrow(/is final/);
    await expect(update(`failed_after_success_at = now(), status = 'failed', external_id = NULL`)).rejects.toThrow(/is final/);
    // On a failed refund, a charge, an open refund: refused.
    await expect(update('failed_after_success_at = now()', failed)).rejects.toThrow(/is final \(failed\)/);
    await expect(update('failed_after_success_at = now()', chargeId)).rejects.toThrow(/is final \(succeeded\)/);
    await expect(update('failed_after_success_at = now()', open)).rejects.toThrow(/is open \(pending\); only a final succeeded refund can be marked/);
    // A reason without the mark: refused.
    await expect(update(`failed_after_success_reason = 'unknown'`)).rejects.toThrow(/is final/);

    // The mark alone, as the application role (the privileges of 003; no new grant): allowed.
    const client = await db.pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('SET LOCAL ROLE charges_app');
      await client.query(`UPDATE payment_operations SET failed_after_success_at = now(), failed_after_success_reason = 'unknown' WHERE id = $1`, [id]);
      // An OPEN refund cannot be settled succeeded and marked in one UPDATE (any time, any reason):
      // the mark would free its amount without any fact from Stripe (review of 009). The control: the
      // same settle without the mark is allowed.
      for (const set of [`failed_after_success_at = now(), failed_after_success_reason = 'unknown'`, `failed_after_success_at = '2000-01-01'`]) {
        await client.query('SAVEPOINT s');
        await expect(
          client.query(`UPDATE payment_operations SET status = 'succeeded', external_id = 're_open_marked', settled_at = now(), next_attempt_at = NULL, ${set} WHERE id = $1`, [open]),
        ).rejects.toThrow(/is open \(pending\); only a final succeeded refund can be marked/);
        await client.query('ROLLBACK TO SAVEPOINT s');
      }
      await client.query('SAVEPOINT s');
      await client.query(`UPDATE payment_operations SET status = 'succeeded', external_id = 're_open_marked', settled_at = now(), next_attempt_at = NULL WHERE id = $1`, [open]);
      await client.query('ROLLBACK TO SAVEPOINT s');
      // …and the application role cannot clear it.
      await client.query('SAVEPOINT s');
      await expect(client.query(`UPDATE payment_operations SET failed_after_success_at = NULL, failed_after_success_reason = NULL WHERE id = $1`, [id])).rejects.toThrow(/never changed or cleared/);
      await client.query('ROLLBACK TO SAVEPOINT s');
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    // Set once: never cleared, never moved, its reason never changed.
    await expect(update('failed_after_success_at = NULL, failed_after_success_reason = NULL')).rejects.toThrow(/never changed or cleared/);
    await expect(update(`failed_after_success_at = failed_after_success_at + interval '1 second'`)).rejects.toThrow(/never changed or cleared/);
    await expect(update(`failed_after_success_reason = 'lost_or_stolen_card'`)).rejects.toThrow(/never changed or cleared/);
    await expect(update(`last_error = 'x'`)).rejects.toThrow(/is final/);
    expect(await mark(id)).toMatchObject({ status: 'succeeded', reason: 'unknown' });

    // One update guard (007's folded in): an open refund's parameters still never change.
    await expect(update(`refund_id = 'changed'`, open)).rejects.toThrow(/the refund parameters of payment operation .* cannot change/);
    await expect(update('amount = 99', open)).rejects.toThrow(/the parameters of payment operation .* cannot change/);
    const { rows: triggers } = await db.pool.query(
      `SELECT tgname FROM pg_trigger WHERE tgrelid = 'payment_operations'::regclass AND NOT tgisinternal AND tgtype & 16 = 16 ORDER BY 1`,
    );
    // (019 keeps the capture parameters in a trigger of its own, fired after this guard; 024 refuses a
    // change of id, after the row is written.)
    expect(triggers.map((t) => t.tgname)).toEqual(['payment_operations_guard', 'payment_operations_id_fixed', 'payment_operations_keep_capture_parameters']);
  });
});

describe('migration 009 on a database that already holds the fact', () => {
  it('marks the refunds that carry a Refund Failed After Success event (its time, its failureReason) and no other; they are refundable again', async () => {
    const name = `mig_009_${Math.random().toString(36).slice(2, 10)}`;
    await createDatabase(inject('pgAdminUrl'), name);
    const url = databaseUrl(name);
    const files = await loadMigrations(path.resolve('migrations'));
    const index = files.findIndex((f) => f.name.startsWith('009_'));
    expect(index).toBeGreaterThan(0);
    await migrate(url, files.slice(0, index));
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      const { rows: charge } = await client.query(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, settled_at, next_attempt_at)
         VALUES ('o-009', 1000, 'eur', 'cus_1', 'pm_1', 'succeeded', 'pi_009', now(), NULL) RETURNING id`,
      );
      const refund = (refundId: string, amount: number) =>
        client.query(
          `INSERT INTO payment_operations (order_id, kind, refund_id, parent_operation_id, amount, currency, customer_id, payment_method, status, external_id, settled_at, next_attempt_at)
           VALUES ('o-009', 'refund', $1, $2, $3, 'eur', 'cus_1', 'pm_1', 'succeeded', 're_' || $1, now(), NULL) RETURNING id`,
          [refundId, charge[0].id, amount],
        ).then((r) => r.rows[0].id as string);
      const reversed = await refund('a', 600);
      const kept = await refund('b', 400);
      const eventId = randomUUID();
      await client.query(
        `INSERT INTO outcome_events (event_id, operation_id, event_type, payload, created_at)
         VALUES ($1::uuid, $2, 'Refund Failed After Success', jsonb_build_object('eventId', $1::text, 'failureReason', 'lost_or_stolen_card'), '2026-11-30T10:00:00Z')`,
        [eventId, reversed],
      );
      // A later fact of the same refund (a replay): the first one's time and reason are the mark's.
      await client.query(
        `INSERT INTO outcome_events (event_id, operation_id, event_type, payload, created_at)
         VALUES ($1::uuid, $2, 'Refund Failed After Success', jsonb_build_object('eventId', $1::text, 'failureReason', 'unknown'), '2026-11-30T11:00:00Z')`,
        [randomUUID(), reversed],
      );
      // Before 009 the rules hold all 1000.
      await expect(refund('c', 600)).rejects.toMatchObject({ constraint: 'refunds_within_charge' });

      await migrate(url, files);
      const { rows } = await client.query(
        `SELECT id, failed_after_success_at AS at, failed_after_success_reason AS reason FROM payment_operations WHERE kind = 'refund' ORDER BY refund_id`,
      );
      expect(rows).toEqual([
        { id: reversed, at: new Date('2026-11-30T10:00:00Z'), reason: 'lost_or_stolen_card' },
        { id: kept, at: null, reason: null },
      ]);
      await refund('c', 600); // 400 held: the reversed 600 is refundable again
      await expect(refund('d', 1)).rejects.toMatchObject({ constraint: 'refunds_within_charge' });
    } finally {
      await client.end();
      // Its own database (not the file's clone): dropped here, as test/support/db.ts drops the clones.
      const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
      await admin.connect();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).finally(() => admin.end());
    }
  });
});
