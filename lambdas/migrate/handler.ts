// The migrate Lambda: applies migrations/ (bundled into the asset, MIGRATIONS_DIR) to the database
// named by DB_SECRET_ARN (AWS) or DATABASE_URL (local). The CDK Trigger invokes it before anything
// that takes traffic is updated, on every deploy that changes the migrate function's version (its
// code, migrations or environment: lib/migrations.ts); it THROWS on any failure so that the Trigger fails
// the deploy and CloudFormation rolls back (lib/migrations.ts). Migrations are recorded and run
// under an advisory lock (runtime/migrations.ts), so a re-run or two at once are harmless.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import { loadConfig, type RuntimeConfig } from '../runtime/config.ts';
import { forgetSecrets, getSecretString, parseLoginSecret } from '../runtime/secrets.ts';
import { defaultMigrationsDir, loadMigrations, migrate, type ConsumerLogin, type MigrationResult, type Password } from '../runtime/migrations.ts';
import { createLogger, describeError } from '../runtime/observability.ts';
import { databaseClientConfig } from '../runtime/database.ts';

export const logger = createLogger();

export interface MigrateResult extends MigrationResult {
  readonly migrationsDir: string;
}

async function applyMigrations(): Promise<MigrateResult> {
  const migrationsDir = defaultMigrationsDir();
  // Every run reads the secrets as they are now: a warm container's copy from an earlier deploy
  // would put a password back that a rotation has since replaced (and lock that login out).
  forgetSecrets();
  try {
    const config = loadConfig(process.env);
    const files = await loadMigrations(migrationsDir);
    if (files.length === 0) throw new Error(`no migration files in ${migrationsDir}: the asset was built without them`);
    const application = await applicationLogin(config);
    // One client, not the pool: the advisory lock is per session and the run is a one-off.
    const result = await migrate(await databaseClientConfig(config), files, (line) => logger.info(line), {
      statementTimeoutMs: config.database.migrationStatementTimeoutMs,
      lockTimeoutMs: config.database.migrationLockTimeoutMs,
      applicationRole: application?.username,
      applicationRolePassword: application?.password,
      consumerLogins: await consumerLogins(config),
      // A pipeline on an existing server (existingDatabase) names a database of its own: the first
      // deploy creates it, or says it must exist when the owner login may not.
      createDatabase: true,
    });
    logger.info('migrations done', { applied: result.applied, alreadyApplied: result.alreadyApplied.length, migrationsDir });
    return { ...result, migrationsDir };
  } catch (error) {
    logger.error('migrations failed', { ...describeError(error), migrationsDir });
    throw error;
  }
}

/**
 * A login secret's password as a getter, read again when migrate sets it (after the migration lock
 * and the migrations): a rotation promoted meanwhile is not undone. The secret is read once now too,
 * so that a malformed one fails the run before any migration.
 */
async function passwordGetter(arn: string, region: string | undefined, role?: string): Promise<{ username: string; password: Password }> {
  const { username } = parseLoginSecret(arn, await getSecretString(arn, region), role);
  const password = async () => {
    forgetSecrets(arn);
    return parseLoginSecret(arn, await getSecretString(arn, region), username).password;
  };
  return { username, password };
}

/**
 * AWS: the application secret (DB_APP_SECRET_ARN): its username is this pipeline's application role
 * (one per database, lib/database.ts applicationRoleFor), its password what migrate sets on it.
 */
async function applicationLogin(config: RuntimeConfig): Promise<{ username: string; password: Password } | undefined> {
  const arn = config.database.appSecretArn;
  if (!arn) return undefined;
  return passwordGetter(arn, config.region);
}

/**
 * AWS: each outcome consumer's login (DB_CONSUMER_LOGINS): the role is the secret's username, the
 * password its password; migrate creates the role, hands it its schemas and sets the password.
 */
async function consumerLogins(config: RuntimeConfig): Promise<ConsumerLogin[]> {
  const logins: ConsumerLogin[] = [];
  for (const { secretArn, schemas } of config.database.consumerLogins) {
    const { username, password } = await passwordGetter(secretArn, config.region);
    logins.push({ role: username, password, schemas });
  }
  return logins;
}

export const handler = middy(applyMigrations).use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }));
