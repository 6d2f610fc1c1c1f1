// bench:peers says where a contestant's WAL goes, per table and index (pg_walinspect). The breakdown
// must name the relation that was written, count each record once, and add up to no more than the
// LSN distance it explains.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { walByRelation } from '../../bench/peers/metering.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('wal');
});
afterAll(async () => db.drop());

describe('the WAL breakdown', () => {
  it('puts 200 inserts under their table and its index, each record once, within the LSN distance', async () => {
    await db.pool.query('CREATE TABLE wal_probe (id bigint PRIMARY KEY, note text NOT NULL)');
    const from = (await db.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
    await db.pool.query("INSERT INTO wal_probe SELECT g, repeat('x', 100) FROM generate_series(1, 200) g");
    const { rows } = await db.pool.query<{ lsn: string; bytes: string }>('SELECT pg_current_wal_lsn()::text AS lsn, pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS bytes', [from]);
    const shares = await walByRelation(db.url, from, rows[0]!.lsn);
    const of = (relation: string) => shares.find((s) => s.relation === relation);
    expect(of('wal_probe')?.records).toBeGreaterThanOrEqual(200);
    // Each row's tuple (a 100-character note and a header) is in its record.
    expect(of('wal_probe')!.bytes).toBeGreaterThan(200 * 100);
    expect(of('wal_probe_pkey')?.records).toBeGreaterThanOrEqual(200);
    const counted = shares.reduce((a, s) => a + s.bytes, 0);
    expect(counted).toBeLessThanOrEqual(Number(rows[0]!.bytes));
    expect(shares.some((s) => s.relation.startsWith('(no relation) Transaction'))).toBe(true);
  });
});
