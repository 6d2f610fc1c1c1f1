// `npm run ops -- erase customer <cus_…> --reason …` through the real CLI, on real PostgreSQL 18: the
// customer's personal data leaves every table of the pipeline; amounts, states and ids stay; other
// customers are untouched; it is refused (nothing changed) while an operation is open or an event
// not applied; and it is recorded — customer_erasures and an audit line per operation.
import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordRejectedMessages } from '../../lambdas/payments/rejected-store.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { asApplicationRole, daysAgo, finalCharge, inboxEvent, outcomeOf } from '../lifecycle/support.ts';
import { cli, cliJson, resultOf } from './support.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('erase');
});
afterAll(async () => {
  await db.drop();
});

const env = () => ({ DATABASE_URL: db.url, USER: 'alice' });
const customer = () => `cus_${randomBytes(6).toString('hex')}`;

describe('erase customer', () => {
  it("removes the customer's personal data, keeps what accounting needs, touches no one else, and records it", async () => {
    const now = new Date();
    const cus = customer();
    const other = customer();
    const charge = await finalCharge(db.pool, daysAgo(now, 3), { customerId: cus });
    const failed = await finalCharge(db.pool, daysAgo(now, 2), { customerId: cus, status: 'failed' });
    const untouched = await finalCharge(db.pool, daysAgo(now, 2), { customerId: other });
    const event = await inboxEvent(db.pool, daysAgo(now, 1), { operationId: charge.id, objectId: charge.externalId });
    const otherEvent = await inboxEvent(db.pool, daysAgo(now, 1), { operationId: untouched.id, objectId: untouched.externalId });
    // Rejected bodies: one naming the customer (invalid body), one of its order (a conflict), one of someone else.
    await recordRejectedMessages(db.pool, [
      { messageId: `m-${randomBytes(4).toString('hex')}`, reasonCode: 'invalid_body', reason: 'amount: expected number', rawBody: JSON.stringify({ customerId: cus, amount: 'x', email: 'jane@example.com' }) },
      { messageId: `m-${randomBytes(4).toString('hex')}`, reasonCode: 'order_conflict', reason: 'amount differs', orderId: charge.orderId, operationId: charge.id, rawBody: '{"conflict": true}' },
      { messageId: `m-${randomBytes(4).toString('hex')}`, reasonCode: 'invalid_body', reason: 'amount: expected number', rawBody: JSON.stringify({ customerId: other }) },
    ]);

    const { code, response } = await cliJson(['erase', 'customer', cus, '--reason', 'GDPR request #4711 (erasure)', '--actor', 'alice'], env());
    expect(code).toBe(0);
    const { erasure } = resultOf(response, 'erase customer');
    expect(erasure).toMatchObject({ operations: 2, stripeEvents: 1, rejectedBodies: 2 });
    expect([...erasure.operationIds].sort()).toEqual([charge.id, failed.id].sort());

    const { rows: ops } = await db.pool.query(
      `SELECT id, customer_id, payment_method, description, statement_descriptor_suffix, charge_metadata, last_error, amount, currency, status, order_id, external_id, erased_at IS NOT NULL AS erased
         FROM payment_operations WHERE id = ANY($1)`,
      [[charge.id, failed.id, untouched.id]],
    );
    const byId = new Map(ops.map((r) => [r.id as string, r]));
    for (const [id, status] of [[charge.id, 'succeeded'], [failed.id, 'failed']] as const) {
      expect(byId.get(id)).toMatchObject({
        customer_id: 'erased', payment_method: 'erased', description: null, statement_descriptor_suffix: null, charge_metadata: {}, last_error: null,
        amount: '1999', currency: 'eur', status, erased: true,
      });
    }
    expect(byId.get(charge.id)).toMatchObject({ order_id: charge.orderId, external_id: charge.externalId });
    expect(byId.get(untouched.id)).toMatchObject({ customer_id: other, payment_method: 'pm_card_visa', erased: false });
    expect(byId.get(untouched.id)!.description).not.toBeNull();

    const { rows: events } = await db.pool.query<{ event_id: string; payload: unknown; outcome: string }>('SELECT event_id, payload, outcome FROM stripe_events WHERE event_id = ANY($1)', [[event, otherEvent]]);
    expect(events.find((e) => e.event_id === event)).toMatchObject({ payload: null, outcome: 'stale' });
    expect(events.find((e) => e.event_id === otherEvent)!.payload).not.toBeNull();

    const { rows: rejected } = await db.pool.query<{ raw_body: string | null; raw_body_removed_why: string | null; body_sha256: string }>(
      'SELECT raw_body, raw_body_removed_why, body_sha256 FROM rejected_messages ORDER BY id',
    );
    expect(rejected.map((r) => r.raw_body_removed_why)).toEqual(['erasure', 'erasure', null]);
    expect(rejected[2]!.raw_body).toContain(other);
    expect(rejected.every((r) => /^[0-9a-f]{64}$/.test(r.body_sha256))).toBe(true);

    // The operator sees the body is gone, and why; the evidence of what came stays.
    const listed = resultOf((await cliJson(['rejected', 'list', '--order', charge.orderId], env())).response, 'rejected list');
    expect(listed.messages).toHaveLength(1);
    expect(listed.messages[0]).toMatchObject({ bodyBytes: null, bodyRemoved: { why: 'erasure' }, bodySha256: expect.stringMatching(/^[0-9a-f]{64}$/) });
    expect((await cli(['rejected', 'list', '--order', charge.orderId], env())).stdout).toContain('removed (erasure)');

    // Nowhere in the pipeline's tables does the customer id remain (the audit trail included).
    const { rows: anywhere } = await db.pool.query<{ n: number }>(
      `SELECT (SELECT count(*) FROM payment_operations p WHERE to_jsonb(p)::text LIKE '%' || $1 || '%')
            + (SELECT count(*) FROM payment_operation_events e WHERE to_jsonb(e)::text LIKE '%' || $1 || '%')
            + (SELECT count(*) FROM stripe_events s WHERE to_jsonb(s)::text LIKE '%' || $1 || '%')
            + (SELECT count(*) FROM rejected_messages r WHERE to_jsonb(r)::text LIKE '%' || $1 || '%')
            + (SELECT count(*) FROM customer_erasures c WHERE to_jsonb(c)::text LIKE '%' || $1 || '%') AS n`,
      [cus],
    );
    expect(Number(anywhere[0]!.n)).toBe(0);

    // Recorded: who, why, what, and the customer only by its SHA-256; an audit line on each operation.
    const { rows: record } = await db.pool.query('SELECT actor, verified, reason, customer_sha256, counts FROM customer_erasures WHERE id = $1', [erasure.erasureId]);
    expect(record[0]).toMatchObject({ actor: 'operator:alice', verified: false, reason: 'GDPR request #4711 (erasure)', counts: { operations: 2, stripeEvents: 1, rejectedBodies: 2 } });
    const { rows: audit } = await db.pool.query(
      `SELECT operation_id, actor, action, detail->>'command' AS command, (detail->>'erasureId')::bigint AS erasure FROM payment_operation_events WHERE action = 'operator_note' AND operation_id = ANY($1)`,
      [[charge.id, failed.id]],
    );
    expect(audit).toHaveLength(2);
    for (const line of audit) expect(line).toMatchObject({ actor: 'operator:alice', command: 'erase customer', erasure: String(erasure.erasureId) });

    expect(await outcomeOf(db.pool, 'UPDATE customer_erasures SET reason = $1 WHERE id = $2', ['x', erasure.erasureId])).toBe('23000: customer_erasures is append-only');

    // Again: nothing left to erase; recorded all the same.
    const again = resultOf((await cliJson(['erase', 'customer', cus, '--reason', 'asked twice'], env())).response, 'erase customer');
    expect(again.erasure).toMatchObject({ operations: 0, stripeEvents: 0, rejectedBodies: 0 });
  });

  it('is refused, nothing changed, while an operation of the customer is open', async () => {
    const now = new Date();
    const cus = customer();
    const done = await finalCharge(db.pool, daysAgo(now, 3), { customerId: cus });
    await finalCharge(db.pool, daysAgo(now, 1), { customerId: cus, status: 'pending' });
    const run = await cli(['erase', 'customer', cus, '--reason', 'GDPR'], env());
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/customer has 1 open operation\(s\): erase once they are final/);
    expect(run.stderr).toMatch(/Nothing was changed/);
    const { rows } = await db.pool.query('SELECT customer_id, erased_at FROM payment_operations WHERE id = $1', [done.id]);
    expect(rows[0]).toEqual({ customer_id: cus, erased_at: null });
  });

  it('is refused while a Stripe event of its operations is not applied yet', async () => {
    const now = new Date();
    const cus = customer();
    const op = await finalCharge(db.pool, daysAgo(now, 3), { customerId: cus });
    await inboxEvent(db.pool, daysAgo(now, 0), { applied: false, operationId: op.id, objectId: op.externalId });
    const run = await cli(['erase', 'customer', cus, '--reason', 'GDPR'], env());
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/Stripe event\(s\) of the customer's operations are not applied yet/);
  });

  it('takes a customer id and a reason, or nothing runs', async () => {
    expect((await cli(['erase', 'customer', 'jane@example.com', '--reason', 'x'], env())).stderr).toMatch(/must be a Stripe customer id cus_/);
    expect((await cli(['erase', 'customer', customer()], env())).stderr).toMatch(/--reason is required/);
  });

  it('only the erasure function erases: by hand, as the application role or the owner, the guard refuses', async () => {
    const cus = customer();
    const op = await finalCharge(db.pool, daysAgo(new Date(), 3), { customerId: cus });
    const erase = `UPDATE payment_operations SET erased_at = now(), customer_id = 'erased', payment_method = 'erased', description = NULL,
                          statement_descriptor_suffix = NULL, last_error = NULL, charge_metadata = '{}' WHERE id = $1`;
    expect(await outcomeOf(db.pool, erase, [op.id])).toMatch(/^23000: payment operation .* is final \(succeeded\) and cannot change$/);
    await asApplicationRole(db.pool, async (client) => {
      await client.query('BEGIN');
      await client.query(`SELECT set_config('charges.lifecycle', 'erasure', true)`);
      expect(await outcomeOf(client, erase, [op.id])).toMatch(/is final \(succeeded\) and cannot change/);
      await client.query('ROLLBACK');
      expect(await outcomeOf(client, 'INSERT INTO customer_erasures (actor, verified, reason, customer_sha256, operation_ids) VALUES ($1, false, $2, $3, $4)', ['x', 'y', 'a'.repeat(64), []]))
        .toBe('42501: permission denied for table customer_erasures');
    });
    // An open operation is never marked erased, even by the function's role: the function refuses first, the guard too.
    const open = await finalCharge(db.pool, daysAgo(new Date(), 1), { status: 'pending' });
    expect(await outcomeOf(db.pool, 'UPDATE payment_operations SET erased_at = now() WHERE id = $1', [open.id])).toMatch(/is open \(pending\); only a final operation can be erased/);
  });
});
