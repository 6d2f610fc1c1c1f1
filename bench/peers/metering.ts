// What a contestant's store costs, measured the same way for every PostgreSQL contestant:
//   client side  every query a pg.Client sends to the run's database, except the bench's own
//                observer pool (application_name 'local-runtime'): count and wall time;
//   server side  pg_stat_statements (calls, execution time) for the run's database, without the
//                observer's statements, and WAL bytes from pg_current_wal_lsn() before and after.
//   CPU          what this process and the PostgreSQL server's processes spent, user + system
//                (cpuMeter): execution time is the wall time inside the executor only (waits for a
//                CPU or a lock included; parsing, commits and the server's background work left out).
import { readdir, readFile } from 'node:fs/promises';
import pg from 'pg';

const OBSERVER_APPLICATION = 'local-runtime';

export interface ClientMeter {
  /** Only queries to this database are counted. */
  database: string | null;
  count: number;
  wallMs: number;
  reset(database: string | null): void;
}

let meter: ClientMeter | null = null;

/** Patches pg.Client.prototype.query once per process (benchmarks only, never the product). */
export function clientMeter(): ClientMeter {
  if (meter) return meter;
  const m: ClientMeter = {
    database: null,
    count: 0,
    wallMs: 0,
    reset(database) {
      this.database = database;
      this.count = 0;
      this.wallMs = 0;
    },
  };
  const original = pg.Client.prototype.query as (...args: unknown[]) => unknown;
  (pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown }).query = function (this: pg.Client, ...args: unknown[]) {
    const params = (this as unknown as { connectionParameters?: { database?: string; application_name?: string } }).connectionParameters;
    if (m.database === null || params?.database !== m.database || params?.application_name === OBSERVER_APPLICATION) return original.apply(this, args);
    m.count += 1;
    const started = performance.now();
    const done = () => {
      m.wallMs += performance.now() - started;
    };
    const last = args.at(-1);
    if (typeof last === 'function') {
      args[args.length - 1] = (...cbArgs: unknown[]) => {
        done();
        return (last as (...a: unknown[]) => unknown)(...cbArgs);
      };
      return original.apply(this, args);
    }
    const result = original.apply(this, args);
    if (result && typeof (result as Promise<unknown>).then === 'function') (result as Promise<unknown>).then(done, done);
    return result;
  };
  meter = m;
  return m;
}

export interface ServerMeter {
  start(): Promise<void>;
  /** Since start(): statements the contestant's database executed, their execution time, WAL bytes. */
  read(): Promise<{ statements: number; execMs: number; walBytes: number; statementsAvailable: boolean; walByRelation: readonly WalShare[] | null }>;
}

/** WAL written for one relation (or, for records that touch none, one resource manager). */
export interface WalShare {
  /** A table or index of the run's database; `(no relation) Transaction` for commit records and so on. */
  readonly relation: string;
  readonly records: number;
  /** Whole record lengths, full-page images included. */
  readonly bytes: number;
  /** Of which full-page images (the first change to a page after a checkpoint). */
  readonly fpiBytes: number;
}

/**
 * Where the WAL between two positions went, per relation, read with pg_walinspect (PostgreSQL 16+):
 * each record is counted once, under the relation of its first block reference; a record with no
 * block (a commit, a running-transactions snapshot) under its resource manager. The sum is the
 * records' lengths; the rest of the LSN distance is page headers and alignment.
 */
export async function walByRelation(databaseUrl: string, fromLsn: string, toLsn: string): Promise<WalShare[]> {
  const client = new pg.Client({ connectionString: databaseUrl, application_name: OBSERVER_APPLICATION });
  await client.connect();
  try {
    await client.query('CREATE EXTENSION IF NOT EXISTS pg_walinspect');
    const { rows } = await client.query<{ relation: string; records: string; bytes: string; fpi: string }>(
      `/* bench */
       WITH first_block AS (
              SELECT start_lsn, reldatabase, relfilenode, relforknumber
                FROM pg_get_wal_block_info($1::pg_lsn, $2::pg_lsn, false) WHERE block_id = 0),
            records AS (
              SELECT start_lsn, resource_manager, record_type, record_length, fpi_length FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn))
       SELECT CASE
                WHEN b.start_lsn IS NULL THEN '(no relation) ' || r.resource_manager
                WHEN b.reldatabase <> (SELECT oid FROM pg_database WHERE datname = current_database()) THEN '(another database)'
                ELSE coalesce(c.relname, '(catalog or dropped)') || CASE WHEN b.relforknumber = 0 THEN '' ELSE ' (fork ' || b.relforknumber || ')' END
              END || CASE WHEN $3::boolean THEN ' ' || r.record_type ELSE '' END AS relation,
              count(*)::bigint AS records, sum(r.record_length)::bigint AS bytes, sum(r.fpi_length)::bigint AS fpi
         FROM records r
         LEFT JOIN first_block b USING (start_lsn)
         LEFT JOIN pg_class c ON c.oid = pg_filenode_relation(0, b.relfilenode)
        GROUP BY 1 ORDER BY 3 DESC`,
      [fromLsn, toLsn, process.env.BENCH_WAL_BY_TYPE === '1'],
    );
    return rows.map((r) => ({ relation: r.relation, records: Number(r.records), bytes: Number(r.bytes), fpiBytes: Number(r.fpi) }));
  } finally {
    await client.end();
  }
}

/**
 * BENCH_STATEMENTS=1: where a run's server time and row bytes went, on stderr — the statements by
 * execution time (pg_stat_statements), and the stored size of this product's audit lines (by action),
 * operation rows and outbox rows where the run's database has them. For a post-mortem, not the report.
 */
async function printDiagnostics(admin: pg.Pool, database: string, databaseUrl: string | undefined): Promise<void> {
  const top = await admin.query<{ calls: string; ms: number; rows: string; query: string }>(
    `/* bench */ SELECT s.calls::bigint AS calls, s.total_exec_time::float8 AS ms, s.rows::bigint AS rows, left(regexp_replace(s.query, '\\s+', ' ', 'g'), 160) AS query
       FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
      WHERE d.datname = $1 AND s.query NOT LIKE '/* bench */%' ORDER BY s.total_exec_time DESC LIMIT 25`,
    [database],
  );
  for (const t of top.rows) process.stderr.write(`${t.ms.toFixed(0).padStart(7)} ms ${t.calls.padStart(7)} calls ${t.rows.padStart(7)} rows  ${t.query}\n`);
  if (!databaseUrl) return;
  const probe = new pg.Client({ connectionString: databaseUrl, application_name: OBSERVER_APPLICATION });
  await probe.connect();
  try {
    const { rows: [has] } = await probe.query<{ ours: boolean }>(`/* bench */ SELECT to_regclass('payment_operation_events') IS NOT NULL AS ours`);
    if (!has?.ours) return;
    const sizes = [
      `SELECT 'audit ' || action AS what, count(*)::int AS n, avg(pg_column_size(e.*))::int AS row_bytes, avg(pg_column_size(detail))::int AS detail_bytes FROM payment_operation_events e GROUP BY action`,
      `SELECT 'operation' AS what, count(*)::int AS n, avg(pg_column_size(p.*))::int AS row_bytes FROM payment_operations p`,
      `SELECT 'outbox' AS what, count(*)::int AS n, avg(pg_column_size(o.stored_payload))::int AS stored_payload_bytes FROM outcome_events o`,
    ];
    for (const sql of sizes) for (const r of (await probe.query(`/* bench */ ${sql}`)).rows) process.stderr.write(`${JSON.stringify(r)}\n`);
  } finally {
    await probe.end();
  }
}

/** Server-side figures; pg_stat_statements only if the server preloads it (the bench's does). */
export function serverMeter(admin: pg.Pool, database: string, databaseUrl?: string): ServerMeter {
  let lsn = '0/0';
  let available = false;
  return {
    async start() {
      lsn = (await admin.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
      try {
        await admin.query('SELECT pg_stat_statements_reset()');
        available = true;
      } catch {
        available = false;
      }
    },
    async read() {
      const wal = await admin.query<{ bytes: string; lsn: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS bytes, pg_current_wal_lsn()::text AS lsn', [lsn]);
      let statements = 0;
      let execMs = 0;
      if (available) {
        // The observer's statements (the pipeline's counts, the bench's belief reads) are left out.
        const { rows } = await admin.query<{ calls: string | null; ms: number | null }>(
          `SELECT sum(s.calls)::bigint AS calls, sum(s.total_exec_time)::float8 AS ms
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = $1 AND s.query NOT LIKE '%rejected_messages%' AND s.query NOT LIKE '/* bench */%'`,
          [database],
        );
        statements = Number(rows[0]?.calls ?? 0);
        execMs = rows[0]?.ms ?? 0;
        if (process.env.BENCH_STATEMENTS === '1') await printDiagnostics(admin, database, databaseUrl);
      }
      const shares = databaseUrl ? await walByRelation(databaseUrl, lsn, wal.rows[0]!.lsn).catch((error: unknown) => {
            // A figure missing says why (pg_walinspect not installed, no privilege), rather than nothing.
            process.stderr.write(`WAL breakdown unavailable: ${error instanceof Error ? error.message : String(error)}\n`);
            return null;
          })
        : null;
      return { statements, execMs, walBytes: Number(wal.rows[0]!.bytes), statementsAvailable: available, walByRelation: shares };
    },
  };
}

export interface CpuMeter {
  start(): Promise<void>;
  /**
   * CPU milliseconds since start(): this process (the rig: every contestant's handlers, the event
   * source, fauxqs, the fake Stripe and event bus run in it) and the PostgreSQL server (the
   * postmaster and its children, those that exited meanwhile included); the server's is null where
   * /proc cannot be read (not Linux).
   */
  read(): Promise<{ rigMs: number; serverMs: number | null }>;
}

/** /proc/<pid>/stat: [ppid, utime + stime, cutime + cstime] in clock ticks (fields 4, 14–15, 16–17; the name in field 2 may hold spaces). */
export function parseStat(text: string): [number, number, number] {
  const f = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // f[0] is field 3 (state): field n is f[n - 3].
  return [Number(f[1]), Number(f[11]) + Number(f[12]), Number(f[13]) + Number(f[14])];
}

/** Linux reports /proc times in USER_HZ, 100 a second on every architecture Node runs on. */
const TICK_MS = 10;

async function serverCpuMs(admin: pg.Pool): Promise<number | null> {
  try {
    const { rows: [me] } = await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    const [postmaster] = parseStat(await readFile(`/proc/${me!.pid}/stat`, 'utf8'));
    let ticks = 0;
    for (const entry of await readdir('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => null); // exited meanwhile
      if (stat === null) continue;
      const [ppid, own, reaped] = parseStat(stat);
      // The postmaster's reaped children's times cover the backends that disconnected.
      if (Number(entry) === postmaster) ticks += own + reaped;
      else if (ppid === postmaster) ticks += own;
    }
    return ticks * TICK_MS;
  } catch {
    return null;
  }
}

export function cpuMeter(admin: pg.Pool): CpuMeter {
  let rig = process.cpuUsage();
  let server: number | null = null;
  return {
    async start() {
      server = await serverCpuMs(admin);
      rig = process.cpuUsage();
    },
    async read() {
      const used = process.cpuUsage(rig);
      const now = await serverCpuMs(admin);
      return { rigMs: (used.user + used.system) / 1000, serverMs: now === null || server === null ? null : now - server };
    },
  };
}
