// The migrate handler (what the CDK Trigger invokes on deploy) against real PostgreSQL 18: it applies
// MIGRATIONS_DIR and returns what it applied; it THROWS on a broken migration directory, a broken
// migration and an unreachable database — the Trigger turns the throw into a failed deploy.
// And `npm run migrate`: exit code 0 / 1 with a one-line reason.
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import { cp, mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, inject, it, vi } from 'vitest';
import { MIGRATION_LOCK_KEY } from '../../lambdas/runtime/migrations.ts';
import { describeError } from '../../lambdas/runtime/observability.ts';
import { createDatabase } from '../../local/postgres.ts';
import { databaseUrl } from '../support/db.ts';
import { useFakeSecrets } from '../support/fake-secrets.ts';
import { lambdaContext } from '../support/sqs-event.ts';

type MigrateHandler = (event: unknown, context: unknown) => Promise<{ applied: string[]; alreadyApplied: string[]; migrationsDir: string }>;
const run = promisify(execFile);

let handler: MigrateHandler;
let scratch: string;
let url: string;
const created: string[] = [];

async function freshDatabase(): Promise<string> {
  const name = `migrate_${Math.random().toString(16).slice(2, 12)}`;
  await createDatabase(inject('pgAdminUrl'), name); // empty: not cloned from the migrated template
  created.push(name);
  return databaseUrl(name);
}

beforeAll(async () => {
  process.env.POWERTOOLS_LOG_LEVEL = 'SILENT';
  handler = (await import('../../lambdas/migrate/handler.ts')).handler as unknown as MigrateHandler;
  scratch = await mkdtemp(path.join(os.tmpdir(), 'migrate-handler-'));
});
afterAll(async () => {
  await rm(scratch, { recursive: true, force: true });
  const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await admin.connect();
  try {
    for (const name of created) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
});
beforeEach(async () => {
  url = await freshDatabase();
  process.env.DATABASE_URL = url;
  process.env.MIGRATIONS_DIR = path.resolve('migrations');
});

async function tables(): Promise<string[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`);
    return rows.map((r) => r.tablename as string);
  } finally {
    await client.end();
  }
}

/** The repository's migration files, in the order they apply (more are added over time). */
const MIGRATION_FILES = readdirSync(path.resolve('migrations')).filter((f) => f.endsWith('.sql')).sort();

describe('migrate handler', () => {
  it('applies every migration of MIGRATIONS_DIR and says which; a second run applies nothing', async () => {
    const first = await handler({}, lambdaContext(60_000, 'migrate'));
    expect(first.applied).toEqual(MIGRATION_FILES);
    expect(first.applied.slice(0, 2)).toEqual(['001_payment_operations.sql', '002_outcome_events.sql']);
    expect(first.alreadyApplied).toEqual([]);
    expect(await tables()).toEqual(expect.arrayContaining(['payment_operations', 'rejected_messages', 'outcome_events', 'stripe_events', 'stripe_event_findings', 'schema_migrations']));
    const second = await handler({}, lambdaContext(60_000, 'migrate'));
    expect(second).toMatchObject({ applied: [], alreadyApplied: first.applied });
  });

  it('throws on a missing or empty migration directory, on a badly named file, and on SQL that fails (nothing half-applied)', async () => {
    process.env.MIGRATIONS_DIR = path.join(scratch, 'does-not-exist');
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/ENOENT/);

    const empty = path.join(scratch, 'empty');
    await cp(path.resolve('migrations'), empty, { recursive: true, filter: (src) => !src.endsWith('.sql') });
    process.env.MIGRATIONS_DIR = empty;
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/no migration files/);

    const misnamed = path.join(scratch, 'misnamed');
    await cp(path.resolve('migrations'), misnamed, { recursive: true });
    await writeFile(path.join(misnamed, '3-later.sql'), 'SELECT 1;');
    process.env.MIGRATIONS_DIR = misnamed;
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/not of the form/);

    const broken = path.join(scratch, 'broken');
    await cp(path.resolve('migrations'), broken, { recursive: true });
    await writeFile(path.join(broken, '003_broken.sql'), 'CREATE TABLE half_done (id int);\nSELECT no_such_function();');
    process.env.MIGRATIONS_DIR = broken;
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toMatchObject({ name: 'MigrationError', message: expect.stringMatching(/003_broken\.sql failed/) });
    // 001 and 002 committed; 003 rolled back whole.
    expect(await tables()).not.toContain('half_done');
  });

  it('throws when the database cannot be reached or is not configured', async () => {
    process.env.DATABASE_URL = 'postgres://postgres:postgres@127.0.0.1:1/nowhere';
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/ECONNREFUSED/);
    delete process.env.DATABASE_URL;
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toMatchObject({ name: 'ConfigError' });
  });
});

describe('migrate handler: the outcome consumers\' logins (DB_CONSUMER_LOGINS)', () => {
  // A role per test: each has a fresh database, and a role that may create in another one is refused.
  const roles: string[] = [];
  let role: string;
  let arn: string;
  const secretOf = (password: string, username: string | null = role) => JSON.stringify({ ...(username ? { username } : {}), password, dbname: 'charges' });
  // The real SDK against the fake endpoint (the SDK signs; the fake does not check).
  const fakeSecrets = useFakeSecrets();
  afterAll(async () => {
    const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
    await admin.connect();
    try {
      for (const name of created.splice(0)) await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      for (const name of roles) await admin.query(`DROP ROLE IF EXISTS ${name}`);
    } finally {
      await admin.end();
    }
  });
  beforeEach(() => {
    role = `receipts_mig_${Math.random().toString(16).slice(2, 10)}`;
    roles.push(role);
    arn = `arn:aws:secretsmanager:eu-west-1:111111111111:secret:${role}-AbCdEf`;
    process.env.DB_CONSUMER_LOGINS = JSON.stringify([{ secretArn: arn, schemas: ['outcome_consumer', 'receipts'] }]);
  });

  const loginAs = async (password: string) => {
    const u = new URL(url);
    u.username = role;
    u.password = password;
    const client = new pg.Client({ connectionString: u.toString() });
    await client.connect();
    try {
      return (await client.query<{ user: string }>('SELECT current_user AS user')).rows[0]!.user;
    } finally {
      await client.end();
    }
  };

  it('creates each role from its secret and sets the password the secret holds — read afresh on every run, so a rotation since a warm container\'s last run is not undone', async () => {
    fakeSecrets().put(arn, secretOf('first-password-0000001'));
    await handler({}, lambdaContext(60_000, 'migrate'));
    expect(await loginAs('first-password-0000001')).toBe(role);
    // The rotation function changes the password in the database, then in the secret; the next deploy's migrate must set the new one.
    fakeSecrets().put(arn, secretOf('rotated-password-000002'));
    const reads = fakeSecrets().reads(arn);
    await handler({}, lambdaContext(60_000, 'migrate'));
    expect(fakeSecrets().reads(arn)).toBe(reads + 2); // once to check it before any migration, once just before the password is set
    expect(await loginAs('rotated-password-000002')).toBe(role);
  });

  it('sets the password the secret holds when it sets it, not the one read before waiting for the migration lock (a rotation promoted meanwhile is kept)', async () => {
    fakeSecrets().put(arn, secretOf('before-rotation-0000005'));
    await handler({}, lambdaContext(60_000, 'migrate'));
    // Another migrator holds the lock: this run reads the secret, then waits.
    const locker = new pg.Client({ connectionString: url });
    await locker.connect();
    try {
      await locker.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
      const reads = fakeSecrets().reads(arn);
      const run = handler({}, lambdaContext(60_000, 'migrate'));
      for (;;) {
        const waiting = await locker.query<{ n: number }>(`SELECT count(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
        if (waiting.rows[0]!.n > 0) break;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(fakeSecrets().reads(arn)).toBe(reads + 1);
      // The rotation function, meanwhile: the new password in the database, then in the secret.
      const admin = new pg.Client({ connectionString: url });
      await admin.connect();
      await admin.query(`ALTER ROLE ${role} PASSWORD 'after-rotation-00000006'`);
      await admin.end();
      fakeSecrets().put(arn, secretOf('after-rotation-00000006'));
      await locker.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]);
      await run;
    } finally {
      await locker.end();
    }
    expect(await loginAs('after-rotation-00000006')).toBe(role);
  });

  it('gives the application secret’s password to the role that secret names (the pipeline’s own, <databaseName>_app), created by this run', async () => {
    const appRole = `${role}_app`;
    roles.push(appRole);
    fakeSecrets().put(arn, secretOf('consumer-password-00007'));
    fakeSecrets().put(`${arn}-app`, JSON.stringify({ username: appRole, password: 'app-password-0000000008' }));
    process.env.DB_APP_SECRET_ARN = `${arn}-app`;
    try {
      await handler({}, lambdaContext(60_000, 'migrate'));
    } finally {
      delete process.env.DB_APP_SECRET_ARN;
    }
    const u = new URL(url);
    u.username = appRole;
    u.password = 'app-password-0000000008';
    const client = new pg.Client({ connectionString: u.toString() });
    await client.connect();
    try {
      expect((await client.query('SELECT current_user AS user, count(*)::int AS n FROM payment_operations')).rows).toEqual([{ user: appRole, n: 0 }]);
    } finally {
      await client.end();
    }
  });

  it('throws, failing the deploy, on a secret without a username or password, or one it cannot read', async () => {
    fakeSecrets().put(arn, secretOf('some-password-00000003', null));
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/the login secret .* must hold a username and a password/);
    process.env.DB_CONSUMER_LOGINS = JSON.stringify([{ secretArn: `${arn}-missing`, schemas: ['receipts'] }]);
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toThrow(/can't find the specified secret/);
    process.env.DB_CONSUMER_LOGINS = 'not json';
    await expect(handler({}, lambdaContext(60_000, 'migrate'))).rejects.toMatchObject({ name: 'ConfigError', message: expect.stringMatching(/DB_CONSUMER_LOGINS/) });
  });

  it('names a secret that is not JSON by its ARN only: its text is in neither the error, its description nor the log line (each of the three login secrets)', async () => {
    // Node 24's JSON.parse message would quote the first characters: `Unexpected token 'h', "hunter2-su"...`.
    const password = 'hunter2-supersecret-0004';
    const { logger } = await import('../../lambdas/migrate/handler.ts');
    const logged = vi.spyOn(logger, 'error');
    const cases: [string, Record<string, string | undefined>][] = [
      ['consumer login', {}],
      ['application', { DB_APP_SECRET_ARN: `${arn}-app` }],
      ['database', { DB_SECRET_ARN: `${arn}-db`, DATABASE_URL: undefined, DB_HOST: '127.0.0.1' }],
    ];
    try {
      for (const [label, vars] of cases) {
        const saved = { ...process.env };
        for (const [name, value] of Object.entries(vars)) {
          if (value === undefined) delete process.env[name];
          else process.env[name] = value;
        }
        const secretArn = vars.DB_SECRET_ARN ?? vars.DB_APP_SECRET_ARN ?? arn;
        fakeSecrets().put(secretArn, password);
        logged.mockClear();
        const error = await handler({}, lambdaContext(60_000, 'migrate')).then(() => undefined, (e: unknown) => e as Error);
        process.env = saved;
        expect(error, label).toBeInstanceOf(Error);
        expect(error!.message, label).toBe(`secret ${secretArn} is not JSON (it must be {"username": …, "password": …})`);
        expect(logged, label).toHaveBeenCalledTimes(1);
        const everything = JSON.stringify([error!.message, String(error!.stack), describeError(error), logged.mock.calls]);
        expect(everything, label).toContain(secretArn);
        expect(everything, label).not.toContain('hunter2');
      }
    } finally {
      logged.mockRestore();
    }
  });
});

describe('npm run migrate (lambdas/runtime/migrate-cli.ts)', () => {
  const cli = (env: Record<string, string | undefined>) =>
    run(process.execPath, ['--import', 'tsx', 'lambdas/runtime/migrate-cli.ts'], { env: { ...process.env, ...env } }).then(
      (out) => ({ code: 0, ...out }),
      (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, stdout: error.stdout, stderr: error.stderr }),
    );

  it('applies with DATABASE_URL (exit 0); exit 1 with a clear message without it or on failure, never the password', async () => {
    const ok = await cli({ DATABASE_URL: url, MIGRATIONS_DIR: undefined });
    expect(ok.code).toBe(0);
    expect(ok.stdout).toContain(`applied ${MIGRATION_FILES.join(', ')}`);

    const missing = await cli({ DATABASE_URL: '' });
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/DATABASE_URL is not set/);

    const unreachable = await cli({ DATABASE_URL: 'postgres://admin:s3cr3t-pw@127.0.0.1:1/x' });
    expect(unreachable.code).toBe(1);
    expect(unreachable.stderr).toMatch(/migrate: failed: .*ECONNREFUSED/);
    expect(unreachable.stderr + unreachable.stdout).not.toContain('s3cr3t-pw');
  }, 60_000);
});
