// What a contestant's store costs, measured the same way for every PostgreSQL contestant:
//   client side  every query a pg.Client sends to the run's database, except the bench's own
//                observer pool (application_name 'local-runtime'): count and wall time;
//   server side  pg_stat_statements (calls, execution time) for the run's database, without the
//                observer's statements, and WAL bytes from pg_current_wal_lsn() before and after.
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
  read(): Promise<{ statements: number; execMs: number; walBytes: number; statementsAvailable: boolean }>;
}

/** Server-side figures; pg_stat_statements only if the server preloads it (the bench's does). */
export function serverMeter(admin: pg.Pool, database: string): ServerMeter {
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
      const wal = await admin.query<{ bytes: string }>('SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint AS bytes', [lsn]);
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
      }
      return { statements, execMs, walBytes: Number(wal.rows[0]!.bytes), statementsAvailable: available };
    },
  };
}
