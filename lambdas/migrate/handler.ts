// The migrate Lambda: applies migrations/ (bundled into the asset, MIGRATIONS_DIR) to the database
// named by DB_SECRET_ARN (AWS) or DATABASE_URL (local). The CDK Trigger invokes it on every deploy
// before anything that takes traffic is updated; it THROWS on any failure so that the Trigger fails
// the deploy and CloudFormation rolls back (lib/migrations.ts). Migrations are recorded and run
// under an advisory lock (runtime/migrations.ts), so a re-run or two at once are harmless.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import { loadConfig } from '../runtime/config.ts';
import { defaultMigrationsDir, loadMigrations, migrate, type MigrationResult } from '../runtime/migrations.ts';
import { createLogger, describeError } from '../runtime/observability.ts';
import { databaseClientConfig } from '../runtime/database.ts';

export const logger = createLogger();

export interface MigrateResult extends MigrationResult {
  readonly migrationsDir: string;
}

async function applyMigrations(): Promise<MigrateResult> {
  const migrationsDir = defaultMigrationsDir();
  try {
    const config = loadConfig(process.env);
    const files = await loadMigrations(migrationsDir);
    if (files.length === 0) throw new Error(`no migration files in ${migrationsDir}: the asset was built without them`);
    // One client, not the pool: the advisory lock is per session and the run is a one-off.
    const result = await migrate(await databaseClientConfig(config), files, (line) => logger.info(line));
    logger.info('migrations done', { applied: result.applied, alreadyApplied: result.alreadyApplied.length, migrationsDir });
    return { ...result, migrationsDir };
  } catch (error) {
    logger.error('migrations failed', { ...describeError(error), migrationsDir });
    throw error;
  }
}

export const handler = middy(applyMigrations).use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }));
