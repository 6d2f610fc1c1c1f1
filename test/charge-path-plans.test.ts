// The charge path's lookups are probes by key, whatever the table's size (migrations/025 and the
// charge request in operations-store.ts). The plans are read from PostgreSQL itself: auto_explain,
// loaded into one session, sends every plan of that session — the statement's own and the queries
// of its triggers — to the client as a LOG message. Real PostgreSQL, the real engine.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { recordOutcomes, requestAndClaim, type OutcomeWrite } from '../lambdas/payments/operations-store.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

const OPERATIONS = 5_000;

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
  session = new pg.Client({ connectionString: db.url });
  await session.connect();
  session.on('notice', (notice) => {
    if (notice.message?.includes('plan:')) plans.push(notice.message);
  });
  await session.query(`LOAD 'auto_explain'`);
  for (const setting of ['auto_explain.log_min_duration = 0', 'auto_explain.log_nested_statements = on', 'client_min_messages = log']) {
    await session.query(`SET ${setting}`);
  }
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

  it("the check that an audit line's or outbox row's operation exists probes the primary key once per row", async () => {
    const token = randomUUID();
    const logged = await plansOf(async () => {
      const requested = await requestAndClaim(session, batch(), token, 30_000, 'test');
      const writes: OutcomeWrite[] = [...requested.values()].map((row) => ({
        operationId: row.claimed!.id,
        leaseToken: token,
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
