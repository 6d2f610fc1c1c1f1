// Applies the plain SQL files of `migrations/` in name order. Each file runs in its own
// transaction and is recorded with its SHA-256; a session-level advisory lock keeps two deployers
// (two `cdk deploy`s, a deploy and a laptop) from racing; a file that changed after it was applied
// stops everything, because the database no longer matches what the repository says it is.
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { PIPELINE } from './settings.ts';

export interface MigrationFile {
  readonly name: string;
  readonly sql: string;
  readonly checksum: string;
}

export interface MigrationResult {
  readonly applied: string[];
  readonly alreadyApplied: string[];
}

export class MigrationError extends Error {
  override readonly name = 'MigrationError';
}

/** The data-only role charge, reconcile and ops connect as (migrations/003_application_role.sql). */
export const APPLICATION_ROLE = PIPELINE.applicationRole;

export interface MigrateOptions {
  /**
   * Limits of the migrate session, never the charge path's DB_STATEMENT_TIMEOUT_MS. The lock timeout
   * holds for each file's statements: a DDL lock that would queue behind a long transaction (and
   * block every charge on that table while it waits) fails the file instead.
   * @default 240 s and 5 s (MIGRATE_STATEMENT_TIMEOUT_MS, MIGRATE_LOCK_TIMEOUT_MS)
   */
  readonly statementTimeoutMs?: number;
  readonly lockTimeoutMs?: number;
  /** Set this password on APPLICATION_ROLE and let it log in (AWS: from the application secret). */
  readonly applicationRolePassword?: string;
  /**
   * Where applied files are recorded. A second set of migrations (an outcome consumer's, in its own
   * schema) keeps its own record, so neither set ever sees the other's files as "missing". A
   * schema-qualified name creates its schema first. @default 'schema_migrations' (the pipeline's)
   */
  readonly trackingTable?: string;
}

const LOCK_NOT_AVAILABLE = '55P03';
const QUERY_CANCELED = '57014';

/**
 * The SCRAM-SHA-256 verifier of a password (RFC 5802/7677, PostgreSQL's stored format). ALTER ROLE
 * gets the verifier, never the password, so the password is in no statement, log line or
 * pg_stat_activity row. The secrets are generated ASCII, which SASLprep leaves unchanged.
 */
export function scramVerifier(password: string, salt: Buffer = randomBytes(16), iterations = 4096): string {
  const salted = pbkdf2Sync(password, salt, iterations, 32, 'sha256');
  const clientKey = createHmac('sha256', salted).update('Client Key').digest();
  const storedKey = createHash('sha256').update(clientKey).digest();
  const serverKey = createHmac('sha256', salted).update('Server Key').digest();
  return `SCRAM-SHA-256$${iterations}:${salt.toString('base64')}$${storedKey.toString('base64')}:${serverKey.toString('base64')}`;
}

/** Arbitrary but fixed: the advisory lock every migrator of this schema takes. */
const MIGRATION_LOCK_KEY = 727_001_001;
const FILE_NAME = /^\d{3,}_[a-z0-9_]+\.sql$/;
/** `schema_migrations` or `some_schema.schema_migrations`: an identifier, never input. */
const TRACKING_TABLE = /^(?:([a-z_][a-z0-9_]{0,62})\.)?[a-z_][a-z0-9_]{0,62}$/;

export function defaultMigrationsDir(): string {
  return process.env.MIGRATIONS_DIR ?? path.resolve(process.cwd(), 'migrations');
}

export async function loadMigrations(dir: string = defaultMigrationsDir()): Promise<MigrationFile[]> {
  const names = (await readdir(dir)).filter((name) => name.endsWith('.sql')).sort();
  const files: MigrationFile[] = [];
  for (const name of names) {
    if (!FILE_NAME.test(name)) throw new MigrationError(`migration file name not of the form 001_name.sql: ${name}`);
    const sql = await readFile(path.join(dir, name), 'utf8');
    files.push({ name, sql, checksum: createHash('sha256').update(sql).digest('hex') });
  }
  return files;
}

export async function migrate(
  connection: string | pg.ClientConfig,
  files: readonly MigrationFile[],
  log: (line: string) => void = () => {},
  options: MigrateOptions = {},
): Promise<MigrationResult> {
  const table = options.trackingTable ?? 'schema_migrations';
  const match = TRACKING_TABLE.exec(table);
  if (!match) throw new MigrationError(`tracking table must be [schema.]name in lowercase identifiers, got ${JSON.stringify(table)}`);
  const statementTimeoutMs = options.statementTimeoutMs ?? 240_000;
  const lockTimeoutMs = options.lockTimeoutMs ?? 5_000;
  const client = new pg.Client(typeof connection === 'string' ? { connectionString: connection } : connection);
  await client.connect();
  try {
    // The session's own statement limit (it also bounds the wait for another migrator's lock).
    await client.query(`SELECT set_config('statement_timeout', $1, false)`, [`${statementTimeoutMs}ms`]);
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    try {
      // The name is checked above against an identifier pattern: no input reaches this SQL.
      if (match[1]) await client.query(`CREATE SCHEMA IF NOT EXISTS ${match[1]}`);
      await client.query(`
        CREATE TABLE IF NOT EXISTS ${table} (
          name       text PRIMARY KEY,
          checksum   text NOT NULL,
          applied_at timestamptz NOT NULL DEFAULT now()
        )`);
      const { rows } = await client.query<{ name: string; checksum: string }>(
        `SELECT name, checksum FROM ${table} ORDER BY name`,
      );
      const byName = new Map(files.map((file) => [file.name, file]));
      for (const row of rows) {
        const file = byName.get(row.name);
        if (!file) throw new MigrationError(`applied migration ${row.name} is missing from the migrations folder`);
        if (file.checksum !== row.checksum) {
          throw new MigrationError(
            `applied migration ${row.name} has changed since it was applied (checksum ${row.checksum.slice(0, 12)}… ≠ ${file.checksum.slice(0, 12)}…); write a new migration instead`,
          );
        }
      }
      const appliedNames = new Set(rows.map((row) => row.name));
      const pending = files.filter((file) => !appliedNames.has(file.name));
      const lastApplied = rows.at(-1)?.name;
      const early = lastApplied ? pending.find((file) => file.name < lastApplied) : undefined;
      if (early) throw new MigrationError(`migration ${early.name} sorts before the already applied ${lastApplied}`);

      for (const file of pending) {
        log(`applying ${file.name}`);
        await client.query('BEGIN');
        try {
          await client.query(`SELECT set_config('lock_timeout', $1, true)`, [`${lockTimeoutMs}ms`]);
          await client.query(file.sql);
          await client.query(`INSERT INTO ${table} (name, checksum) VALUES ($1, $2)`, [file.name, file.checksum]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new MigrationError(`migration ${file.name} failed: ${explain(error, statementTimeoutMs, lockTimeoutMs)}`, { cause: error });
        }
      }
      if (options.applicationRolePassword !== undefined) await setApplicationRolePassword(client, options.applicationRolePassword);
      return { applied: pending.map((file) => file.name), alreadyApplied: rows.map((row) => row.name) };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => {});
    }
  } finally {
    await client.end();
  }
}

function explain(error: unknown, statementTimeoutMs: number, lockTimeoutMs: number): string {
  const { code, message } = error as { code?: string; message?: string };
  if (code === LOCK_NOT_AVAILABLE) {
    return `${message} — it waited MIGRATE_LOCK_TIMEOUT_MS (${lockTimeoutMs} ms) for a lock another transaction holds; nothing of it was applied, so re-run the deploy when that transaction is gone`;
  }
  if (code === QUERY_CANCELED) {
    return `${message} — a statement ran longer than MIGRATE_STATEMENT_TIMEOUT_MS (${statementTimeoutMs} ms); nothing of it was applied (raise the limit, or build the index CONCURRENTLY by hand)`;
  }
  return String(message ?? error);
}

/** Give the application role its password (as a SCRAM verifier) and LOGIN. */
async function setApplicationRolePassword(client: pg.Client, password: string): Promise<void> {
  if (password.length < 16) throw new MigrationError(`the ${APPLICATION_ROLE} password from the application secret is shorter than 16 characters`);
  // ALTER ROLE takes no bind parameters: format() quotes the verifier on the server side.
  await client.query('BEGIN');
  try {
    await client.query(`SELECT set_config('charges.app_verifier', $1, true)`, [scramVerifier(password)]);
    await client.query(`DO $$ BEGIN
      EXECUTE format('ALTER ROLE %I WITH LOGIN PASSWORD %L', '${APPLICATION_ROLE}', current_setting('charges.app_verifier'));
    END $$`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw new MigrationError(`setting the ${APPLICATION_ROLE} password failed: ${(error as Error).message}`, { cause: error });
  }
}
