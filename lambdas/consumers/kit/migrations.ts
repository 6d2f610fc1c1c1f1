// The kit's tables (outcome_consumer.*) and a consumer's own (its schema), each set applied by the
// pipeline's migrations runner with its OWN tracking table — so the pipeline's schema_migrations
// never sees them, and a consumer's migrations never touch the pipeline's tables.
import path from 'node:path';
import type pg from 'pg';
import { loadMigrations, migrate, type MigrationResult } from '../../runtime/migrations.ts';

export interface MigrationSet {
  readonly dir: string;
  /** `schema.schema_migrations` */
  readonly trackingTable: string;
}

/** Where the SQL files are: next to this module in the repository, or copied into a Lambda bundle. */
export function kitMigrations(baseDir = process.env.CONSUMER_MIGRATIONS_DIR): MigrationSet {
  return {
    dir: baseDir ? path.join(baseDir, 'kit') : path.join(import.meta.dirname, 'migrations'),
    trackingTable: 'outcome_consumer.schema_migrations',
  };
}

/** Apply the kit's migrations, then the consumer's, in that order. */
export async function migrateConsumer(
  connection: string | pg.ClientConfig,
  sets: readonly MigrationSet[],
  log: (line: string) => void = () => {},
): Promise<Record<string, MigrationResult>> {
  const out: Record<string, MigrationResult> = {};
  for (const set of sets) {
    const files = await loadMigrations(set.dir);
    if (files.length === 0) throw new Error(`no migration files in ${set.dir}`);
    out[set.trackingTable] = await migrate(connection, files, log, { trackingTable: set.trackingTable });
  }
  return out;
}
