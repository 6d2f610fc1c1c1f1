// The servers bench:peers needs besides the pipeline's own: one PostgreSQL for every contestant
// (with pg_stat_statements preloaded), and dynalite for Powertools' DynamoDB persistence layer.
import type { AddressInfo } from 'node:net';
import pg from 'pg';
import dynalite from 'dynalite';
import { startEmbeddedPostgres, type EmbeddedPostgresHandle } from '../../local/postgres.ts';
import { temporaryDataDir } from '../../local/pipeline.ts';

export interface BenchPostgres {
  readonly adminUrl: string;
  readonly statementStats: boolean;
  stop(): Promise<void>;
}

/** Embedded PostgreSQL 18, restarted once with pg_stat_statements in shared_preload_libraries. */
export async function startBenchPostgres(): Promise<BenchPostgres> {
  const server: EmbeddedPostgresHandle = await startEmbeddedPostgres({ dataDir: temporaryDataDir('bench-peers') });
  let statementStats = false;
  try {
    const admin = new pg.Client({ connectionString: server.adminUrl });
    await admin.connect();
    await admin.query("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'");
    // BENCH_STATEMENTS=1 (a post-mortem): the statements run inside functions and triggers too.
    if (process.env.BENCH_STATEMENTS === '1') await admin.query("ALTER SYSTEM SET pg_stat_statements.track = 'all'");
    await admin.end();
    await server.restart();
    const again = new pg.Client({ connectionString: server.adminUrl });
    await again.connect();
    await again.query('CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
    await again.end();
    statementStats = true;
  } catch {
    statementStats = false; // counted on the client side only
  }
  return { adminUrl: server.adminUrl, statementStats, stop: () => server.stop() };
}

export interface Dynalite {
  readonly endpoint: string;
  /** HTTP requests served so far (each DynamoDB API call is one). */
  requests(): number;
  stop(): Promise<void>;
}

export async function startDynalite(): Promise<Dynalite> {
  // In memory (no `path`): memory-level, no files. The HTTP server is dynalite's own.
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  let requests = 0;
  server.on('request', () => {
    requests += 1;
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    requests: () => requests,
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
