// countingDb (lambdas/payments/db.ts): the round-trip counter the budgets are held to, and its
// optional per-statement hook (scripts/bench-refund-batch.ts times each named statement with it).
// Real PostgreSQL 18.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countingDb, prepared, type CountedStatement } from '../lambdas/payments/db.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('db_counting');
});
afterAll(() => db?.drop());

describe('countingDb', () => {
  it('counts every round trip; the hook sees each statement once, named or not, answered or failed, and the error still reaches the caller', async () => {
    const seen: CountedStatement[] = [];
    const counted = countingDb(db.pool, (s) => seen.push(s));
    expect((await counted.query<{ one: number }>('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
    expect((await prepared<{ two: number }>(counted, 'test.two', 'SELECT $1::int AS two', [2])).rows).toEqual([{ two: 2 }]);
    await expect(counted.query('SELECT 1 / 0')).rejects.toMatchObject({ code: '22012' });
    expect(counted.roundTrips).toBe(3);
    expect(seen.map((s) => s.name)).toEqual([null, 'test.two', null]);
    expect(seen.every((s) => s.endedAt >= s.startedAt)).toBe(true);

    // Without a hook: the same count, nothing else.
    const plain = countingDb(db.pool);
    await plain.query('SELECT 1');
    expect(plain.roundTrips).toBe(1);
    plain.reset();
    expect(plain.roundTrips).toBe(0);
  });
});
