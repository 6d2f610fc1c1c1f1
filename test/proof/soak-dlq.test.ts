// The soak's account of its DLQ (local/soak/soak.ts dlqMessagesByKind): every message by what it
// asks, and whether its order has an operation — a count in the DLQ is explained, not just reported.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dlqMessagesByKind } from '../../local/soak/soak.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('soak_dlq');
  await db.pool.query(`INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ('recorded-order', 100, 'eur', 'cus_1', 'pm_1')`);
});
afterAll(() => db.drop());

describe('what the soak says its DLQ holds', () => {
  it('by the body’s type, poison and unreadable bodies apart, and by whether the order has an operation', async () => {
    const charge = (orderId: string) => JSON.stringify({ orderId, amount: 100, currency: 'eur', customerId: 'cus_1', paymentMethod: 'pm_1' });
    expect(
      await dlqMessagesByKind(db.pool, [
        { groupId: 'recorded-order', body: charge('recorded-order') },
        { groupId: 'recorded-order', body: JSON.stringify({ type: 'refund', orderId: 'recorded-order', refundId: 'r-1', amount: 10 }) },
        { groupId: 'unknown-order', body: charge('unknown-order') },
        { groupId: 'unknown-order', body: JSON.stringify({ type: 'capture', orderId: 'unknown-order' }) },
        { groupId: 'poison-run-7', body: 'not json' },
        { groupId: 'another-order', body: 'not json either' },
      ]),
    ).toEqual({
      charge: { withOperation: 1, withoutOperation: 1 },
      refund: { withOperation: 1, withoutOperation: 0 },
      capture: { withOperation: 0, withoutOperation: 1 },
      poison: { withOperation: 0, withoutOperation: 1 },
      unreadable: { withOperation: 0, withoutOperation: 1 },
    });
    expect(await dlqMessagesByKind(db.pool, [])).toEqual({});
  });
});
