// Applies the plain SQL files of `migrations/` in name order. Each file runs in its own
// transaction and is recorded with its SHA-256; a session-level advisory lock keeps two deployers
// (two `cdk deploy`s, a deploy and a laptop) from racing; a file that changed after it was applied
// stops everything, because the database no longer matches what the repository says it is.
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { readdir, readFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { isConsumerSchemaName, PIPELINE, SQL_IDENTIFIER } from './settings.ts';

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

/**
 * The data-only role charge, reconcile and ops connect as (migrations/003_application_role.sql), as
 * the migration files name it. A pipeline whose application role has another name (one per
 * database: lib/database.ts applicationRoleFor) gets every grant the files make to this name handed
 * over to its own role in the same transaction (handOverGrants), so that two pipelines
 * on one server never share a login. Locally, and for the database named `charges`, it is the role.
 */
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
  /** Set this password on the application role and let it log in (AWS: from the application secret). */
  readonly applicationRolePassword?: Password;
  /**
   * The application role of this database (AWS: the application secret's username). Another name
   * than APPLICATION_ROLE gets, in each file's transaction, every privilege the files grant to
   * APPLICATION_ROLE in this database, and APPLICATION_ROLE keeps none of them. With a password, the
   * role is created if missing, may CONNECT to this database (and PUBLIC no longer may), and is
   * refused if it may connect to another database of the server: that is another pipeline's role.
   * @default APPLICATION_ROLE
   */
  readonly applicationRole?: string;
  /**
   * When the database does not exist: create it (CREATE DATABASE, connected to `maintenanceDatabase`
   * as the same login) or refuse, saying it must exist. A login that may not create it is refused
   * with the statement to run. @default false (refuse)
   */
  readonly createDatabase?: boolean;
  /** The database to connect to for CREATE DATABASE. @default 'postgres' */
  readonly maintenanceDatabase?: string;
  /**
   * Outcome consumers' own logins on this database (AWS: DB_CONSUMER_LOGINS): each role is created
   * if missing, may connect and create schemas, gets its password, and owns the schemas it names.
   * @default [] (none)
   */
  readonly consumerLogins?: readonly ConsumerLogin[];
  /**
   * Where applied files are recorded. A second set of migrations (an outcome consumer's, in its own
   * schema) keeps its own record, so neither set ever sees the other's files as "missing". A
   * schema-qualified name creates its schema first. @default 'schema_migrations' (the pipeline's)
   */
  readonly trackingTable?: string;
}

/**
 * An outcome consumer's login (lib/charge-pipeline.ts addConsumerDatabaseLogin): a role that may use
 * only its own schemas and nothing of the pipeline's. It runs its own migrations (the kit's and its
 * own, lambdas/consumers/kit/migrations.ts) as itself, so it needs CREATE on the database (CREATE
 * SCHEMA IF NOT EXISTS checks that privilege even when the schema exists) and owns what it creates.
 */
export interface ConsumerLogin {
  readonly role: string;
  readonly password: Password;
  /**
   * The schemas its migrations create. One that already exists, made by the owner (a consumer that
   * migrated as the owner before it had a login), is handed over with its tables and sequences; one
   * owned by any other role is refused (two consumers never share a schema).
   */
  readonly schemas: readonly string[];
}

/**
 * A password, or how to read it: a getter is called just before the role gets it, so that a
 * rotation promoted while this run waited for the migration lock is not undone by a password read
 * before (AWS: the migrate function re-reads the secret).
 */
export type Password = string | (() => Promise<string>);

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
/**
 * Applied migrations whose comments were reworded after they were applied — never their statements.
 * A database that recorded the earlier text's checksum is accepted when the file's statements (the
 * file without its comment lines) still hash to `statements`; anything else that changed still stops
 * everything. test/migrations.test.ts keeps each entry true of the file it names.
 */
export const COMMENT_REVISIONS: Readonly<Record<string, { readonly earlier: readonly string[]; readonly statements: string }>> = {
  '002_outcome_events.sql': { earlier: ['7afc41fa6e4aecb61094a389787ef61419499cf4af26f2bc464b039933a6870b'], statements: '8306014b29da36c6f1973cad149fe2bb32dbe1d31abc4c6726251d307ceaa79c' },
  '003_application_role.sql': { earlier: ['c8df44b68cbf5310100d4f647a924c1c5c6bc7e09aaced38839e7a43d46d68ad'], statements: '286e97e3ac86361bb48c354c9429159008ff90b952f08c5499217ab7bd9c6fbb' },
  '005_list_evidence.sql': { earlier: ['a2d84e320b479246e7bf1f9c76009d0c065d83f5244ed7b687ee87d5b59e1d54'], statements: '586322ee28d0226529c8613ffda74be740200fcdc41421b0f550803da4fa8173' },
  '006_stripe_events.sql': { earlier: ['aa154b98d4dbd1a75d254c3d233ddbe2d84bee0f5d5374ab604b1de04ccf3d56'], statements: 'e4b06561fe0dc60413ac64fb8f32e8ef2c73b75276792cefc4bae23eaf427974' },
  '007_refunds.sql': { earlier: ['675576b5c7e2244f5c5ccdb66bea987a7a1b9849c2ea2eea009dbf334c8a328e'], statements: '1d5799b93a5122de18a88845cbac3a5b7a20c90eb2d216f7cadcf9f617c32120' },
  '008_refund_events.sql': { earlier: ['d72f868e85763820cb958fa4a6c29e99feaf1dd9693e241f487acd79afc9a442'], statements: '77608e43ae0921f595ac49914611ec89d6210a8875b30e22bda27befe29bc6f3' },
  '009_refund_failed_after_success.sql': { earlier: ['e70d57bc77c01b44fe1954f1a0f2f914ff18b58afd7c2721921e7e81b6e3f027'], statements: 'd18cc64ada9f5f4e8a812033558eb01ea61d5fb7fc40db34e8f983b34e062c58' },
  '001_consumer_inbox.sql': { earlier: ['4787ff11c764e3f1f86bedbf4efe396cf2c2e22f12ecd5277bdeff93fa8ee170'], statements: 'd6db452987b3c9f51647fb8cf01ff39c0524d738d2ddd9613dbe157331004bdb' },
};

/** SHA-256 of a migration's statements: the file without its full-line `--` comments. */
export function statementsChecksum(sql: string): string {
  return createHash('sha256')
    .update(sql.split('\n').filter((line) => !line.trimStart().startsWith('--')).join('\n'))
    .digest('hex');
}

/** The recorded checksum is this file's, or an earlier text of it that differed in comments only. */
function sameMigration(file: MigrationFile, recorded: string): boolean {
  if (file.checksum === recorded) return true;
  const revision = COMMENT_REVISIONS[file.name];
  return revision !== undefined && revision.earlier.includes(recorded) && statementsChecksum(file.sql) === revision.statements;
}

export const MIGRATION_LOCK_KEY = 727_001_001;
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
  const applicationRole = options.applicationRole ?? APPLICATION_ROLE;
  if (!SQL_IDENTIFIER.test(applicationRole)) throw new MigrationError(`the application role must be a lowercase identifier (${SQL_IDENTIFIER}), got ${JSON.stringify(applicationRole)}`);
  const handOver = applicationRole !== APPLICATION_ROLE;
  const config: pg.ClientConfig = typeof connection === 'string' ? { connectionString: connection } : connection;
  const client = await connectCreatingDatabase(config, options);
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
        if (!sameMigration(file, row.checksum)) {
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
          // The files grant to and revoke from APPLICATION_ROLE (a REVOKE DELETE after the default
          // privileges granted it, 006). So, in the file's transaction, the pipeline's role lends its
          // privileges back to that name, the file runs as written, and the role takes them all
          // again: no other session ever sees APPLICATION_ROLE hold anything in this database, whose
          // login (the pipeline whose database is `charges`) would then reach it.
          if (handOver) await handOverGrants(client, applicationRole, APPLICATION_ROLE);
          await client.query(file.sql);
          if (handOver) await handOverGrants(client, APPLICATION_ROLE, applicationRole);
          await client.query(`INSERT INTO ${table} (name, checksum) VALUES ($1, $2)`, [file.name, file.checksum]);
          await client.query('COMMIT');
        } catch (error) {
          await client.query('ROLLBACK');
          throw new MigrationError(`migration ${file.name} failed: ${explain(error, statementTimeoutMs, lockTimeoutMs)}`, { cause: error });
        }
      }
      if (options.applicationRolePassword !== undefined) {
        await provisionApplicationRole(client, applicationRole);
        await setRolePassword(client, applicationRole, options.applicationRolePassword, 'application');
      }
      for (const login of options.consumerLogins ?? []) await provisionConsumerLogin(client, login, applicationRole);
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

const INVALID_CATALOG_NAME = '3D000';
const DUPLICATE_DATABASE = '42P04';
const UNIQUE_VIOLATION = '23505';
const INSUFFICIENT_PRIVILEGE = '42501';

/** The database named by `config`, or where `connectionString` points. */
function databaseNameOf(config: pg.ClientConfig): string | undefined {
  if (config.database) return config.database;
  if (!config.connectionString) return undefined;
  const name = decodeURIComponent(new URL(config.connectionString).pathname.replace(/^\//, ''));
  return name === '' ? undefined : name;
}

/**
 * Connect to the database to migrate. One that does not exist is created when the options say so
 * (as the same login, from the maintenance database: a second pipeline on an existing server gets
 * its own database on its first deploy), or refused with what to do. The name is checked against
 * an identifier pattern and quoted: CREATE DATABASE takes no bind parameter.
 */
async function connectCreatingDatabase(config: pg.ClientConfig, options: MigrateOptions): Promise<pg.Client> {
  const first = new pg.Client(config);
  try {
    await first.connect();
    return first;
  } catch (error) {
    await first.end().catch(() => {});
    if ((error as { code?: string }).code !== INVALID_CATALOG_NAME) throw error;
  }
  const name = databaseNameOf(config) ?? '(unnamed)';
  const user = config.user ?? (config.connectionString ? decodeURIComponent(new URL(config.connectionString).username) : undefined) ?? 'the owner login';
  if (!options.createDatabase) {
    throw new MigrationError(`the database ${JSON.stringify(name)} does not exist: it must exist before the migrations run (CREATE DATABASE ${name} as ${user}, or a login that may)`);
  }
  if (!SQL_IDENTIFIER.test(name)) throw new MigrationError(`the database ${JSON.stringify(name)} does not exist, and a database this creates must be named by a lowercase identifier (${SQL_IDENTIFIER})`);
  const maintenance = options.maintenanceDatabase ?? 'postgres';
  const admin = new pg.Client(config.connectionString ? { ...config, connectionString: withDatabase(config.connectionString, maintenance) } : { ...config, database: maintenance });
  await admin.connect();
  try {
    await admin.query(`CREATE DATABASE ${admin.escapeIdentifier(name)}`);
  } catch (error) {
    const code = (error as { code?: string }).code;
    // Another migrator created it first: fine.
    if (code !== DUPLICATE_DATABASE && code !== UNIQUE_VIOLATION) {
      const why = code === INSUFFICIENT_PRIVILEGE ? `${user} may not create databases` : (error as Error).message;
      throw new MigrationError(`the database ${JSON.stringify(name)} does not exist and creating it failed (${why}): create it first (CREATE DATABASE ${name} OWNER ${user}, as a login that may), then deploy again`, { cause: error });
    }
  } finally {
    await admin.end();
  }
  const client = new pg.Client(config);
  await client.connect();
  return client;
}

function withDatabase(connectionString: string, database: string): string {
  const url = new URL(connectionString);
  url.pathname = `/${encodeURIComponent(database)}`;
  return url.toString();
}

/**
 * Hand every privilege `from` holds in this database to `to` (created NOLOGIN if missing) and take
 * it from `from`: on tables, views and sequences, on columns, functions and schemas, the default
 * privileges, and CONNECT / TEMPORARY on this database. Nothing when `from` does not exist. Names
 * travel as settings and are quoted by format().
 */
async function handOverGrants(client: pg.Client, from: string, to: string): Promise<void> {
  await client.query(`SELECT set_config('charges.template_role', $1, true), set_config('charges.target_role', $2, true)`, [from, to]);
  await client.query(`DO $$
  DECLARE
    template_role text := current_setting('charges.template_role');
    target_role text := current_setting('charges.target_role');
    template_oid oid;
    item record;
  BEGIN
    SELECT oid INTO template_oid FROM pg_roles WHERE rolname = template_role;
    IF template_oid IS NULL OR template_role = target_role THEN RETURN; END IF;
    BEGIN
      EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS', target_role);
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
    FOR item IN
      SELECT n.nspname, c.relname, CASE WHEN c.relkind = 'S' THEN 'SEQUENCE' ELSE 'TABLE' END AS kind,
             string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN LATERAL aclexplode(c.relacl) a
       WHERE a.grantee = template_oid GROUP BY n.nspname, c.relname, c.relkind
    LOOP
      EXECUTE format('GRANT %s ON %s %I.%I TO %I', item.privileges, item.kind, item.nspname, item.relname, target_role);
      EXECUTE format('REVOKE ALL ON %s %I.%I FROM %I', item.kind, item.nspname, item.relname, template_role);
    END LOOP;
    FOR item IN
      SELECT n.nspname, c.relname, t.attname, string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN LATERAL aclexplode(t.attacl) a
       WHERE a.grantee = template_oid GROUP BY n.nspname, c.relname, t.attname
    LOOP
      EXECUTE format('GRANT %s (%I) ON TABLE %I.%I TO %I', item.privileges, item.attname, item.nspname, item.relname, target_role);
      EXECUTE format('REVOKE ALL (%I) ON TABLE %I.%I FROM %I', item.attname, item.nspname, item.relname, template_role);
    END LOOP;
    FOR item IN
      SELECT p.oid::regprocedure::text AS signature, string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a
       WHERE a.grantee = template_oid GROUP BY p.oid
    LOOP
      EXECUTE format('GRANT %s ON FUNCTION %s TO %I', item.privileges, item.signature, target_role);
      EXECUTE format('REVOKE ALL ON FUNCTION %s FROM %I', item.signature, template_role);
    END LOOP;
    FOR item IN
      SELECT n.nspname, string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a
       WHERE a.grantee = template_oid GROUP BY n.nspname
    LOOP
      EXECUTE format('GRANT %s ON SCHEMA %I TO %I', item.privileges, item.nspname, target_role);
      EXECUTE format('REVOKE ALL ON SCHEMA %I FROM %I', item.nspname, template_role);
    END LOOP;
    FOR item IN
      SELECT pg_get_userbyid(d.defaclrole) AS owner, n.nspname,
             CASE d.defaclobjtype WHEN 'r' THEN 'TABLES' WHEN 'S' THEN 'SEQUENCES' WHEN 'f' THEN 'FUNCTIONS' WHEN 'T' THEN 'TYPES' WHEN 'n' THEN 'SCHEMAS' END AS kind,
             string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_default_acl d LEFT JOIN pg_namespace n ON n.oid = d.defaclnamespace CROSS JOIN LATERAL aclexplode(d.defaclacl) a
       WHERE a.grantee = template_oid GROUP BY d.defaclrole, n.nspname, d.defaclobjtype
    LOOP
      IF item.nspname IS NULL THEN
        EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I GRANT %s ON %s TO %I', item.owner, item.privileges, item.kind, target_role);
        EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I REVOKE ALL ON %s FROM %I', item.owner, item.kind, template_role);
      ELSE
        EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA %I GRANT %s ON %s TO %I', item.owner, item.nspname, item.privileges, item.kind, target_role);
        EXECUTE format('ALTER DEFAULT PRIVILEGES FOR ROLE %I IN SCHEMA %I REVOKE ALL ON %s FROM %I', item.owner, item.nspname, item.kind, template_role);
      END IF;
    END LOOP;
    FOR item IN
      SELECT string_agg(DISTINCT a.privilege_type, ', ') AS privileges
        FROM pg_database d CROSS JOIN LATERAL aclexplode(d.datacl) a
       WHERE d.datname = current_database() AND a.grantee = template_oid HAVING count(*) > 0
    LOOP
      EXECUTE format('GRANT %s ON DATABASE %I TO %I', item.privileges, current_database(), target_role);
      EXECUTE format('REVOKE ALL ON DATABASE %I FROM %I', current_database(), template_role);
    END LOOP;
  END $$`);
}

/**
 * The application role's login on this database, before its password (in one transaction):
 *   1. the role, created NOLOGIN if missing; one with an attribute or a role membership is refused;
 *   2. what the migration files granted to APPLICATION_ROLE here, handed over (another name only);
 *   3. CONNECT on this database for the role and for the login running this, none for PUBLIC: PUBLIC
 *      may connect to every new database, so another pipeline's role could open this one;
 *   4. refused if the role may connect to (or owns) another database of the server by name: roles
 *      are cluster-wide, so that is another pipeline's role — setting the password would break its
 *      logins, and the role would reach both databases;
 *   5. its search path in this database pinned to public (runtime/database.ts pins it per session too).
 */
async function provisionApplicationRole(client: pg.Client, role: string): Promise<void> {
  await client.query('BEGIN');
  try {
    if (role !== APPLICATION_ROLE) await handOverGrants(client, APPLICATION_ROLE, role);
    await client.query(`SELECT set_config('charges.application_role', $1, true)`, [role]);
    await client.query(`DO $$
    DECLARE
      app text := current_setting('charges.application_role');
      app_oid oid;
      elsewhere text;
    BEGIN
      IF app = current_user THEN
        RAISE EXCEPTION 'the application role % is the login running the migrations: give the pipeline a role of its own', app;
      END IF;
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS', app);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
      END;
      SELECT oid INTO app_oid FROM pg_roles WHERE rolname = app;
      IF EXISTS (SELECT FROM pg_roles WHERE oid = app_oid AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls))
         OR EXISTS (SELECT FROM pg_auth_members WHERE member = app_oid) THEN
        RAISE EXCEPTION 'the role % already exists with an attribute or a role membership: an application role has neither (drop or rename it)', app;
      END IF;
      SELECT string_agg(format('%I', d.datname), ', ' ORDER BY d.datname) INTO elsewhere
        FROM pg_database d
       WHERE d.datname <> current_database()
         AND (d.datdba = app_oid OR EXISTS (SELECT FROM aclexplode(d.datacl) a WHERE a.grantee = app_oid AND a.privilege_type = 'CONNECT'));
      IF elsewhere IS NOT NULL THEN
        RAISE EXCEPTION 'the role % may connect to another database of this server too (%): roles are server-wide, so it is another pipeline''s application role, whose password this run would replace; give this pipeline a database of its own (existingDatabase.databaseName; its role is <databaseName>_app), or revoke CONNECT on those from it', app, elsewhere;
      END IF;
      EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), app);
      EXECUTE format('GRANT CONNECT ON DATABASE %I TO %I', current_database(), current_user);
      EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM PUBLIC', current_database());
      EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = public', app, current_database());
    END $$`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw new MigrationError(`provisioning the application role ${role} failed: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * Give a role its password (as a SCRAM verifier) and LOGIN: the application role, and every
 * consumer login after provisionConsumerLogin made its role. `secret` names the secret in errors.
 */
async function setRolePassword(client: pg.Client, role: string, passwordOrGetter: Password, secret: string): Promise<void> {
  // Read now: the window in which a rotation can be undone is this one statement.
  const password = typeof passwordOrGetter === 'string' ? passwordOrGetter : await passwordOrGetter();
  if (password.length < 16) throw new MigrationError(`the ${role} password from the ${secret} secret is shorter than 16 characters`);
  // ALTER ROLE takes no bind parameters: format() quotes the name and the verifier on the server side.
  await client.query('BEGIN');
  try {
    await client.query(`SELECT set_config('charges.login_role', $1, true), set_config('charges.login_verifier', $2, true)`, [role, scramVerifier(password)]);
    await client.query(`DO $$ BEGIN
      EXECUTE format('ALTER ROLE %I WITH LOGIN PASSWORD %L', current_setting('charges.login_role'), current_setting('charges.login_verifier'));
    END $$`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw new MigrationError(`setting the ${role} password failed: ${(error as Error).message}`, { cause: error });
  }
}

/**
 * An outcome consumer's role, in one transaction (names travel as settings, quoted by format()):
 *   1. the role, NOLOGIN until step 5, with no attribute beyond LOGIN. One that exists already is
 *      refused if it has an attribute, a membership in any role, or any privilege outside its own
 *      schemas — CREATE on (or ownership of) another database included: roles are cluster-wide, so
 *      that is another pipeline's consumer of the same name, whose password this run would reset;
 *   2. CONNECT and CREATE on this database — its migrations create its schemas; a schema it owns
 *      beyond those it declares is refused on every run — and nothing on any pipeline table (it is
 *      granted none; the application role's default privileges name only charges_app);
 *   3. the search path of the pipeline's own roles in this database pinned to public: a role that
 *      may create schemas could otherwise create one named after charges_app (or the owner), which
 *      "$user" puts first, and shadow payment_operations with a table of its own (for NEW sessions:
 *      the runtime's connections also pin it at start-up, runtime/database.ts);
 *   4. its schemas: one the owner made earlier is handed over with its tables and sequences; one
 *      owned by another role is refused. The owner is a member of the role (SET, as ALTER … OWNER
 *      requires, and INHERIT, so that it still reads and migrates them: a rollback's notifier logs in
 *      as the owner);
 *   5. its password and LOGIN (setRolePassword).
 */
async function provisionConsumerLogin(client: pg.Client, login: ConsumerLogin, applicationRole: string): Promise<void> {
  const problems: string[] = [];
  if (!SQL_IDENTIFIER.test(login.role)) problems.push(`the consumer role must be a lowercase identifier, got ${JSON.stringify(login.role)}`);
  if (login.role === APPLICATION_ROLE || login.role === applicationRole) problems.push(`a consumer may not log in as the application role ${login.role}`);
  if (login.schemas.length === 0) problems.push(`the consumer role ${login.role} names no schema of its own`);
  for (const schema of login.schemas) {
    if (!isConsumerSchemaName(schema)) problems.push(`the consumer schema must be a lowercase identifier other than public and pg_*, got ${JSON.stringify(schema)}`);
  }
  if (problems.length > 0) throw new MigrationError(`consumer login: ${problems.join('; ')}`);
  await client.query('BEGIN');
  try {
    await client.query(
      `SELECT set_config('charges.consumer_role', $1, true), set_config('charges.consumer_schemas', $2, true), set_config('charges.application_role', $3, true)`,
      [login.role, login.schemas.join(','), applicationRole],
    );
    await client.query(`DO $$
    DECLARE
      consumer text := current_setting('charges.consumer_role');
      schema_name text;
      schema_owner text;
      relation record;
      own_schemas text[] := string_to_array(current_setting('charges.consumer_schemas'), ',');
      consumer_oid oid;
      foreign_grants text;
      stray_schemas text;
    BEGIN
      IF consumer = current_user THEN
        RAISE EXCEPTION 'the consumer role % is the login running the migrations', consumer;
      END IF;
      BEGIN
        EXECUTE format('CREATE ROLE %I NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS', consumer);
      EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
      END;
      SELECT oid INTO consumer_oid FROM pg_roles WHERE rolname = consumer;
      -- A role of that name made some other way may carry more: refuse it rather than hand it a login.
      IF EXISTS (SELECT FROM pg_roles WHERE rolname = consumer AND (rolsuper OR rolcreaterole OR rolcreatedb OR rolreplication OR rolbypassrls))
         OR EXISTS (SELECT FROM pg_auth_members m JOIN pg_roles r ON r.oid = m.member WHERE r.rolname = consumer) THEN
        RAISE EXCEPTION 'the role % already exists with an attribute or a role membership: a consumer login has neither (drop or rename it)', consumer;
      END IF;
      -- …or privileges: a role the owner made earlier with GRANT SELECT ON payment_operations would
      -- keep reading it. Anything granted to it by name on a relation, column, function or schema
      -- outside its own schemas, a default privilege naming it, or a database other than this one it
      -- may create in (or owns): another pipeline's consumer of the same name (roles are cluster-wide).
      -- (Indexes and TOAST tables follow their table; schemas the role owns are checked below.)
      SELECT string_agg(what, ', ' ORDER BY what COLLATE "C") INTO foreign_grants FROM (
        SELECT format('%s on %I.%I', string_agg(DISTINCT a.privilege_type, '/'), n.nspname, c.relname) AS what
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN LATERAL aclexplode(c.relacl) a
         WHERE a.grantee = consumer_oid AND n.nspname <> ALL (own_schemas) AND n.nspowner <> consumer_oid GROUP BY n.nspname, c.relname
        UNION ALL
        SELECT format('%s on columns of %I.%I', string_agg(DISTINCT a.privilege_type, '/'), n.nspname, c.relname)
          FROM pg_attribute t JOIN pg_class c ON c.oid = t.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace CROSS JOIN LATERAL aclexplode(t.attacl) a
         WHERE a.grantee = consumer_oid AND n.nspname <> ALL (own_schemas) AND n.nspowner <> consumer_oid GROUP BY n.nspname, c.relname
        UNION ALL
        SELECT format('%s on function %I.%I', string_agg(DISTINCT a.privilege_type, '/'), n.nspname, p.proname)
          FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace CROSS JOIN LATERAL aclexplode(p.proacl) a
         WHERE a.grantee = consumer_oid AND n.nspname <> ALL (own_schemas) AND n.nspowner <> consumer_oid GROUP BY n.nspname, p.proname
        UNION ALL
        SELECT format('ownership of %I.%I', n.nspname, c.relname)
          FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE c.relowner = consumer_oid AND n.nspname <> ALL (own_schemas) AND n.nspowner <> consumer_oid AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        UNION ALL
        SELECT format('%s on schema %I', string_agg(DISTINCT a.privilege_type, '/'), n.nspname)
          FROM pg_namespace n CROSS JOIN LATERAL aclexplode(n.nspacl) a
         WHERE a.grantee = consumer_oid AND n.nspname <> ALL (own_schemas) AND n.nspowner <> consumer_oid GROUP BY n.nspname
        UNION ALL
        SELECT format('default privileges %s', string_agg(DISTINCT a.privilege_type, '/'))
          FROM pg_default_acl d CROSS JOIN LATERAL aclexplode(d.defaclacl) a WHERE a.grantee = consumer_oid HAVING count(*) > 0
        UNION ALL
        SELECT format('%s on database %I', CASE WHEN d.datdba = consumer_oid THEN 'ownership' ELSE 'CREATE' END, d.datname)
          FROM pg_database d
         WHERE d.datname <> current_database()
           AND (d.datdba = consumer_oid OR EXISTS (SELECT FROM aclexplode(d.datacl) a WHERE a.grantee = consumer_oid AND a.privilege_type = 'CREATE'))
      ) grants;
      IF foreign_grants IS NOT NULL THEN
        RAISE EXCEPTION 'the role % already holds % — a consumer login may use only its own schemas (%): it is another pipeline''s consumer or an older grant; revoke those, or give this consumer another role name (addConsumerDatabaseLogin''s role; the receipt notifier: -c receiptsDatabaseRole=…, docs/deploy.md)', consumer, foreign_grants, array_to_string(own_schemas, ', ');
      END IF;
      -- CREATE on the database lets it make any schema (and a trusted extension in one): those beyond
      -- its declared ones are refused on every run, so that one it made is seen at the next deploy.
      SELECT string_agg(format('%I', nspname), ', ' ORDER BY nspname) INTO stray_schemas
        FROM pg_namespace WHERE nspowner = consumer_oid AND nspname <> ALL (own_schemas);
      IF stray_schemas IS NOT NULL THEN
        RAISE EXCEPTION 'the role % owns schemas beyond its own (%): % — drop them (as the owner: DROP SCHEMA … CASCADE) or declare them in its login', consumer, array_to_string(own_schemas, ', '), stray_schemas;
      END IF;
      EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO %I', current_database(), consumer);
      -- The owner keeps reading and migrating the consumer's schemas (INHERIT): a CloudFormation
      -- rollback brings back a notifier that logs in as the owner, and the runbook queries them as
      -- the owner. SET lets it hand a schema over (ALTER … OWNER TO needs it). Every run, so that a
      -- membership an earlier version granted WITH INHERIT FALSE is mended.
      EXECUTE format('GRANT %I TO %I WITH INHERIT TRUE, SET TRUE', consumer, current_user);
      IF EXISTS (SELECT FROM pg_roles WHERE rolname = current_setting('charges.application_role')) THEN
        EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = public', current_setting('charges.application_role'), current_database());
      END IF;
      EXECUTE format('ALTER ROLE %I IN DATABASE %I SET search_path = public', current_user, current_database());
      FOREACH schema_name IN ARRAY own_schemas LOOP
        SELECT pg_get_userbyid(nspowner) INTO schema_owner FROM pg_namespace WHERE nspname = schema_name;
        CONTINUE WHEN schema_owner IS NULL OR schema_owner = consumer;
        IF schema_owner <> current_user THEN
          RAISE EXCEPTION 'schema % belongs to %, not to the consumer role % (or to the owner, who would hand it over): two consumers never share a schema', schema_name, schema_owner, consumer;
        END IF;
        -- A new table owner needs CREATE on the schema; the schema changes hands last, while the
        -- owner can still reach its tables. Tables first (indexes and owned sequences follow).
        EXECUTE format('GRANT USAGE, CREATE ON SCHEMA %I TO %I', schema_name, consumer);
        FOR relation IN SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = schema_name AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
        LOOP
          EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', schema_name, relation.relname, consumer);
        END LOOP;
        FOR relation IN SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                        WHERE n.nspname = schema_name AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user) AND c.relkind = 'S'
        LOOP
          EXECUTE format('ALTER SEQUENCE %I.%I OWNER TO %I', schema_name, relation.relname, consumer);
        END LOOP;
        EXECUTE format('ALTER SCHEMA %I OWNER TO %I', schema_name, consumer);
      END LOOP;
    END $$`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK');
    throw new MigrationError(`provisioning the consumer role ${login.role} failed: ${(error as Error).message}`, { cause: error });
  }
  await setRolePassword(client, login.role, login.password, `${login.role} consumer`);
}
