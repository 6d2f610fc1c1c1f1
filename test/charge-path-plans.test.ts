// The charge path finds its rows by key: each order by the order index, each operation by its
// primary key, each outbox row by its event id — on a table of thousands of operations, and during a
// backlog the statistics have not seen (migrations/025, BATCH and OPEN_BY_KEY in operations-store.ts,
// settlePublishResults in outbox.ts). The plans are read from PostgreSQL itself: auto_explain, loaded
// into one session, sends every plan of that session — the statement's own and the queries of its
// triggers — to the client as a LOG message. Real PostgreSQL, the real engine.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordOutcomes, requestAndClaim, type OutcomeWrite } from '../lambdas/payments/operations-store.ts';
import { settlePublishResults } from '../lambdas/events/outbox.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

const OPERATIONS = 5_000;

/** A session whose every plan (its statements' and their triggers' queries) is pushed onto `sink`. */
async function explainingSession(url: string, sink: string[]): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  client.on('notice', (notice) => {
    if (notice.message?.includes('plan:')) sink.push(notice.message);
  });
  await client.query(`LOAD 'auto_explain'`);
  for (const setting of ['auto_explain.log_min_duration = 0', 'auto_explain.log_nested_statements = on', 'client_min_messages = log']) {
    await client.query(`SET ${setting}`);
  }
  return client;
}

/** Each claimed operation's outcome: succeeded with a PaymentIntent of its own. */
const succeeded = (requested: Awaited<ReturnType<typeof requestAndClaim>>, leaseToken: string): OutcomeWrite[] =>
  [...requested.values()].map((row) => ({
    operationId: row.claimed!.id,
    leaseToken,
    action: 'record',
    step: 'create',
    fromStatus: 'pending',
    keyGeneration: 0,
    status: 'succeeded',
    externalId: `pi_${randomUUID().replaceAll('-', '').slice(0, 24)}`,
    reviewReason: null,
    retryAfterMs: null,
    error: null,
    errorClass: null,
    errorCode: null,
    detail: {},
  }));

let db: TestDatabase;
let session: pg.Client;
const plans: string[] = [];

beforeAll(async () => {
  db = await createTestDatabase('plans');
  // Enough operations that hashing the whole table costs more than it looks to the planner, with
  // statistics as autovacuum keeps them (ANALYZE after the load).
  await db.pool.query(
    `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, attempts, first_attempted_at, settled_at, next_attempt_at)
     SELECT 'plan-seed-' || g, 1000, 'eur', 'cus_plan', 'pm_card_visa', 'succeeded', 'pi_plan_seed_' || g, 1, now(), now(), NULL FROM generate_series(1, $1::int) g`,
    [OPERATIONS],
  );
  await db.pool.query('ANALYZE payment_operations');
  session = await explainingSession(db.url, plans);
});
afterAll(async () => {
  await session?.end();
  await db.drop();
});

/** The plans logged while `run` ran. */
async function plansOf(run: () => Promise<unknown>): Promise<string[]> {
  plans.length = 0;
  await run();
  return [...plans];
}

const scansEveryOperation = (plan: string) => /Seq Scan on payment_operations\b/.test(plan) || /Hash (Right )?Anti Join/.test(plan);

const batch = () =>
  Array.from({ length: 10 }, () => ({
    input: { orderId: `plan-${randomUUID()}`, amount: 1000, currency: 'eur', customerId: 'cus_plan', paymentMethod: 'pm_card_visa' },
    claim: true,
  }));

describe("the charge path's lookups are probes by key (025)", () => {
  it("a charge request looks each of its orders up by the order index, not by hashing every operation", async () => {
    const logged = await plansOf(() => requestAndClaim(session, batch(), randomUUID(), 30_000, 'test'));
    const request = logged.filter((plan) => plan.includes('INSERT INTO payment_operations AS p'));
    expect(request).toHaveLength(1);
    expect(request[0]).toMatch(/Index (Only )?Scan using payment_operations_one_charge_per_order/);
    expect(request[0]!.split('\n').filter(scansEveryOperation)).toEqual([]);
  });

  it("the existence check keeps probing the primary key when its session planned it while the table held one operation", async () => {
    // PL/pgSQL keeps a query's plan for the session. 024's check, planned while payment_operations
    // held one row, went on reading the whole table as it grew (a sequential scan of 5,001 operations
    // here); 025's probes the primary key row by row.
    const small = await createTestDatabase('plans_cached');
    const sessionPlans: string[] = [];
    const client = await explainingSession(small.url, sessionPlans);
    try {
      await small.pool.query('ALTER TABLE payment_operations SET (autovacuum_enabled = off)');
      const { rows } = await small.pool.query<{ id: string }>(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ('cached-first', 1000, 'eur', 'cus_plan', 'pm_card_visa') RETURNING id`,
      );
      const line = (ids: readonly string[]) =>
        client.query({
          name: 'plans.audit_line',
          text: `INSERT INTO payment_operation_events (operation_id, actor, action, to_status, key_generation, detail) SELECT unnest($1::uuid[]), 'test', 'requested', 'pending', 0, '{}'`,
          values: [ids],
        });
      for (let i = 0; i < 8; i++) await line([rows[0]!.id]); // past the plan cache's five custom plans
      await small.pool.query(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method)
         SELECT 'cached-' || g, 1000, 'eur', 'cus_plan', 'pm_card_visa' FROM generate_series(1, $1::int) g`,
        [OPERATIONS],
      );
      const ids = (await small.pool.query<{ id: string }>(`SELECT id FROM payment_operations ORDER BY order_id DESC LIMIT 10`)).rows.map((r) => r.id);
      sessionPlans.length = 0;
      await line(ids);
      const checks = sessionPlans.filter((plan) => plan.includes('payment_operations p'));
      expect(checks).toHaveLength(1);
      expect(checks[0]).toMatch(/Index (Only )?Scan using payment_operations_pkey on payment_operations p\b/);
      expect(checks[0]!.split('\n').filter(scansEveryOperation)).toEqual([]);
    } finally {
      await client.end();
      await small.drop();
    }
  });

  it("the check that an audit line's or outbox row's operation exists probes the primary key once per row", async () => {
    const token = randomUUID();
    const logged = await plansOf(async () => {
      const requested = await requestAndClaim(session, batch(), token, 30_000, 'test');
      const writes = succeeded(requested, token);
      await recordOutcomes(session, writes, 'test', 3_000);
    });
    // Three INSERT statements into the two tables (the request's audit lines, the outcome's, the outbox).
    const checks = logged.filter((plan) => plan.includes('FROM new_rows n'));
    expect(checks).toHaveLength(3);
    for (const check of checks) {
      expect(check).toMatch(/Index (Only )?Scan using payment_operations_pkey on payment_operations/);
      expect(check.split('\n').filter(scansEveryOperation)).toEqual([]);
    }
  });
});

// A backlog the statistics do not know of: Stripe was down, work piled up, and the last ANALYZE saw
// none of it (autovacuum re-analyzes a table only once a tenth of it has changed). Planned for what
// the statistics say — almost nothing open, almost nothing unpublished — a write that reads the open
// index or the unpublished index walks the whole backlog for every batch. Each of the charge path's
// writes finds its rows by key instead.
describe('with a backlog the statistics do not know of, every write of a charge finds its rows by key', () => {
  const BACKLOG = 3_000;
  let backlog: TestDatabase;
  let client: pg.Client;
  const logged: string[] = [];

  beforeAll(async () => {
    backlog = await createTestDatabase('plans_backlog');
    for (const table of ['payment_operations', 'outcome_events']) await backlog.pool.query(`ALTER TABLE ${table} SET (autovacuum_enabled = off)`);
    await backlog.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, attempts, first_attempted_at, settled_at, next_attempt_at)
       SELECT 'settled-' || g, 1000, 'eur', 'cus_plan', 'pm_card_visa', 'succeeded', 'pi_settled_' || g, 1, now(), now(), NULL FROM generate_series(1, $1::int) g`,
      [OPERATIONS],
    );
    await backlog.pool.query(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, published_at)
       SELECT uuidv7(), id, 'Charge Succeeded', jsonb_build_object('sequence', 1, 'status', 'succeeded'), now() FROM payment_operations`,
    );
    await backlog.pool.query('ANALYZE payment_operations, outcome_events');
    // The backlog, after the statistics: open and due operations, and events nobody published.
    await backlog.pool.query(
      `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, next_attempt_at)
       SELECT 'backlog-' || g, 1000, 'eur', 'cus_plan', 'pm_card_visa', now() - interval '1 minute' FROM generate_series(1, $1::int) g`,
      [BACKLOG],
    );
    await backlog.pool.query(
      `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload)
       SELECT uuidv7(), id, 'Charge Succeeded', jsonb_build_object('sequence', 2, 'status', 'succeeded') FROM payment_operations WHERE order_id LIKE 'settled-%'
        ORDER BY order_id LIMIT $1`,
      [BACKLOG],
    );
    client = await explainingSession(backlog.url, logged);
  });
  afterAll(async () => {
    await client?.end();
    await backlog.drop();
  });

  it('the request, the outcome and the publish mark read neither the open index nor the unpublished one', async () => {
    logged.length = 0;
    const token = randomUUID();
    const requests = batch();
    // Asked twice: the second time every order exists and is claimed by the UPDATE of the request.
    await requestAndClaim(client, requests.map((r) => ({ ...r, claim: false })), token, 30_000, 'test');
    const claimed = await requestAndClaim(client, requests, token, 30_000, 'test');
    const writes = succeeded(claimed, token);
    expect(writes).toHaveLength(10);
    const recorded = await recordOutcomes(client, writes, 'test', 3_000);
    await settlePublishResults(client, recorded.map((r) => ({ eventId: r.event!.eventId, ok: true as const })));

    const requestPlans = logged.filter((plan) => plan.includes('INSERT INTO payment_operations AS p'));
    const outcomePlan = logged.filter((plan) => plan.includes('upd AS ('));
    const markPlan = logged.filter((plan) => plan.includes('SET published_at = CASE'));
    expect([requestPlans.length, outcomePlan.length, markPlan.length]).toEqual([2, 1, 1]);
    for (const plan of [...requestPlans, ...outcomePlan]) {
      expect(plan).not.toMatch(/on payment_operations_open\b|using payment_operations_open\b/);
      expect(plan).not.toMatch(/Seq Scan on payment_operations\b/);
    }
    expect(markPlan[0]).not.toMatch(/outcome_events_unpublished/);
    expect(markPlan[0]).not.toMatch(/Seq Scan on outcome_events\b/);
    // And what they wrote is what they were asked to write.
    const { rows } = await backlog.pool.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM outcome_events WHERE event_id = ANY ($1::uuid[]) AND published_at IS NOT NULL`,
      [recorded.map((r) => r.event!.eventId)],
    );
    expect(rows[0]!.n).toBe(10);
  });
});
