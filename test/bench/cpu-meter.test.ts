// bench:peers' CPU columns (bench/peers/metering.ts cpuMeter): this process's CPU, and the
// PostgreSQL server's from /proc, counted for the work the server did and not for the wait.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, test } from 'vitest';
import { cpuMeter, parseStat } from '../../bench/peers/metering.ts';

describe('the CPU meter', () => {
  let pool: pg.Pool;
  beforeAll(() => {
    pool = new pg.Pool({ connectionString: inject('pgAdminUrl'), max: 2 });
  });
  afterAll(() => pool.end());

  test('reads /proc/<pid>/stat past a process name with spaces and parentheses', () => {
    // Fields: pid (comm) state ppid … utime(14) stime(15) cutime(16) cstime(17) …
    const line = '4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 50 7 3 20 0 1 0 100 0 0';
    expect(parseStat(line)).toEqual([17, 300, 10]);
  });

  test('a query the server spends a second on is the server’s CPU, not this process’s', async () => {
    const meter = cpuMeter(pool);
    await meter.start();
    await pool.query('SELECT count(*) FROM generate_series(1, 10000000)');
    const used = await meter.read();
    if (process.platform !== 'linux') {
      expect(used.serverMs).toBeNull();
      return;
    }
    // The server did the counting; this process only waited for the answer.
    expect(used.serverMs).toBeGreaterThan(100);
    expect(used.rigMs).toBeLessThan(used.serverMs!);
  });
});
