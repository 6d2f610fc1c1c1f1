// The checker judges ONE moment of the database. It reads operations, then the outbox; a charge that
// commits in between (its status and its 'Charge Succeeded' in one transaction, as the engine writes
// them) must not show up half: an open operation next to its own success event is an outbox_mismatch
// that never existed. It did show up, in test/local/shutdown.test.ts on a loaded machine: a webhook
// settled an operation while the interrupted run was being judged.
// Here the commit is placed exactly between the two reads: the pool handed to the checker lets the
// charge commit just before the outbox read starts.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { checkInvariants } from '../../local/invariants.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

let db: TestDatabase;
let stripe: StripeHarness;

beforeAll(async () => {
  db = await createTestDatabase('invariants_snapshot');
  stripe = await startStripe();
});
afterAll(async () => {
  await stripe.close();
  await db.drop();
});

/** db.pool, except that the first statement reading the outbox first lets `between` commit. */
function poolCommittingBeforeOutboxRead(between: () => Promise<void>) {
  let done = false;
  const beforeOutbox = async (text: unknown) => {
    if (!done && typeof text === 'string' && text.includes('FROM outcome_events')) {
      done = true;
      await between();
    }
  };
  return {
    async query(text: string, values?: unknown[]) {
      await beforeOutbox(text);
      return db.pool.query(text, values);
    },
    async connect() {
      const client: pg.PoolClient = await db.pool.connect();
      return {
        async query(text: string, values?: unknown[]) {
          await beforeOutbox(text);
          return client.query(text, values);
        },
        release: (error?: Error) => client.release(error),
      };
    },
    get committed() {
      return done;
    },
  };
}

describe('the invariant checker', () => {
  it('reads operations and outbox from one snapshot: a charge committing between the reads is seen whole or not at all', async () => {
    const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'snapshot-test', random: () => 0.5 });
    const order = chargeOrder();
    const id = await engine.requestCharge(order);
    const pool = poolCommittingBeforeOutboxRead(async () => {
      await engine.executeCharge(id); // succeeded + 'Charge Succeeded', one transaction
    });
    const report = await checkInvariants({ db: pool as never, paymentIntents: stripe.fake.paymentIntents(), orderIds: [order.orderId], sentOrderIds: [order.orderId] });
    expect(pool.committed).toBe(true); // the commit did land between the reads
    expect(report.violations).toEqual([]);

    // And the charge is really there now: the next check sees it whole.
    const { rows } = await db.pool.query<{ status: string; events: number }>(
      `SELECT status, (SELECT count(*)::int FROM outcome_events WHERE operation_id = $1) AS events FROM payment_operations WHERE id = $1`,
      [id],
    );
    expect(rows[0]).toEqual({ status: 'succeeded', events: 1 });
    const after = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds: [order.orderId], sentOrderIds: [order.orderId], requireQuiescent: true });
    expect(after.violations).toEqual([]);
  });
});
