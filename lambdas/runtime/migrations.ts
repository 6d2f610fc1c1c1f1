// Applies the plain SQL files of `migrations/` in name order. Each file runs in its own
// transaction and is recorded with its SHA-256; a session-level advisory lock keeps two deployers
// (two `cdk deploy`s, a deploy and a laptop) from racing; a file that changed after it was applied
// stops everything, because the database no longer matches what the repository says it is.
import { createHash } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';

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

/** Arbitrary but fixed: the advisory lock every migrator of this schema takes. */
const MIGRATION_LOCK_KEY = 727_001_001;
const FILE_NAME = /^\d{3,}_[a-z0-9_]+\.sql$/;
/** `schema_migrations` or `some_schema.schema_migrations`: an identifier, never input. */
const TRACKING_TABLE = /^(?:([a-z_][a-z0-9_]{0,62})\.)?[a-z_][a-z0-9_]{0,62}$/;

export interface MigrateOptions {
  /**
   * Where applied files are recorded. A second set of migrations (an outcome consumer's, in its own
   * schema) keeps its own record, so neither set ever sees the other's files as "missing". A
   * schema-qualified name creates its schema first. @default 'schema_migrations' (the pipeline's)
   */
  readonly trackingTable?: string;
}

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
  const client = new pg.Client(typeof connection === 'string' ? { connectionString: connection } : connection);
  await client.connect();
  try {
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
          await client.query(file.sql);
          await client.query(`INSERT INTO ${table} (name, checksum) VALUES ($1, $2)`, [file.name, file.checksum]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new MigrationError(`migration ${file.name} failed: ${(error as Error).message}`, { cause: error });
        }
      }
      return { applied: pending.map((file) => file.name), alreadyApplied: rows.map((row) => row.name) };
    } finally {
      await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => {});
    }
  } finally {
    await client.end();
  }
}
