// Two pipelines on one database server (the second through existingDatabase), on real PostgreSQL 18
// with an owner like RDS's master user (not a superuser; CREATEROLE, CREATEDB):
//   - each pipeline's application role is its own (<databaseName>_app): migrating the second does
//     not touch the first one's password, so the first keeps logging in, on every redeploy of either;
//   - each role may CONNECT to, and read and write in, its own database only — PUBLIC's CONNECT is
//     revoked and what the migration files grant to charges_app is handed to the pipeline's role;
//   - the second pipeline's database is created by its first migrate run, or refused with what to do;
//   - a role that already reaches another database (another pipeline's) is refused, not re-passworded.
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { APPLICATION_ROLE, loadMigrations, migrate, type MigrationFile } from '../../lambdas/runtime/migrations.ts';
import { createDatabase } from '../../local/postgres.ts';
import { databaseUrl } from '../support/db.ts';

const suffix = randomBytes(4).toString('hex');
// Roles are cluster-wide: names of this file's own, dropped at the end.
const OWNER = `owner_pr_${suffix}`;
const WEAK_OWNER = `weak_pr_${suffix}`;
const FIRST = `first_${suffix}`;
const SECOND = `second_${suffix}`;
const role = (database: string) => `${database}_app`;
const PASSWORDS = {
  owner: `owner-${randomBytes(12).toString('hex')}`,
  first: `first-${randomBytes(12).toString('hex')}`,
  second: `second-${randomBytes(12).toString('hex')}`,
};
const databases = [FIRST, SECOND, `third_${suffix}`, `fourth_${suffix}`];
let files: MigrationFile[];

function urlAs(database: string, user: string, password: string): string {
  const url = new URL(databaseUrl(database));
  url.username = user;
  url.password = password;
  return url.toString();
}

async function withClient<T>(url: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

const asAdmin = <T>(database: string, work: (client: pg.Client) => Promise<T>) => withClient(databaseUrl(database), work);

/** What the migrate function does on AWS for a pipeline whose database is `database`. */
const deploy = (database: string, password: string, extra: MigrationFile[] = [], applicationRole = role(database)) =>
  migrate(urlAs(database, OWNER, PASSWORDS.owner), [...files, ...extra], () => {}, { applicationRole, applicationRolePassword: password, createDatabase: true });

/** Logs in as the pipeline's role and does what the functions do: DML on its tables. */
async function works(database: string, password: string): Promise<string> {
  return withClient(urlAs(database, role(database), password), async (c) => {
    await c.query('SELECT count(*) FROM payment_operations');
    await c.query(`INSERT INTO rejected_messages (message_id, reason_code, reason, body_sha256, raw_body) VALUES ($1, 'invalid_json', 'test', 'x', '{')`, [`m-${randomBytes(4).toString('hex')}`]);
    return (await c.query<{ user: string }>('SELECT current_user AS user')).rows[0]!.user;
  });
}

beforeAll(async () => {
  files = await loadMigrations(path.resolve('migrations'));
  await asAdmin('postgres', async (c) => {
    await c.query(`CREATE ROLE ${OWNER} LOGIN CREATEROLE CREATEDB PASSWORD '${PASSWORDS.owner}'`);
    await c.query(`CREATE ROLE ${WEAK_OWNER} LOGIN CREATEROLE PASSWORD '${PASSWORDS.owner}'`);
  });
  // The first pipeline's database, as RDS creates it for its master user; the second's does not exist.
  await createDatabase(inject('pgAdminUrl'), FIRST);
  await asAdmin(FIRST, (c) => c.query(`ALTER DATABASE ${FIRST} OWNER TO ${OWNER}`));
});

afterAll(async () => {
  await asAdmin('postgres', async (c) => {
    for (const name of databases) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    for (const name of [role(FIRST), role(SECOND), WEAK_OWNER, OWNER]) await c.query(`DROP ROLE IF EXISTS ${name}`);
  });
});

describe('two pipelines on one server', () => {
  it('the second pipeline’s first deploy creates its database, and the first pipeline’s login keeps working', async () => {
    await deploy(FIRST, PASSWORDS.first);
    expect(await works(FIRST, PASSWORDS.first)).toBe(role(FIRST));

    const second = await deploy(SECOND, PASSWORDS.second);
    expect(second.applied).toEqual(files.map((f) => f.name));
    const owner = await asAdmin('postgres', (c) => c.query<{ owner: string }>('SELECT pg_get_userbyid(datdba) AS owner FROM pg_database WHERE datname = $1', [SECOND]));
    expect(owner.rows).toEqual([{ owner: OWNER }]);
    expect(await works(SECOND, PASSWORDS.second)).toBe(role(SECOND));
    // One shared login (every pipeline's role was charges_app) had its password replaced here.
    expect(await works(FIRST, PASSWORDS.first)).toBe(role(FIRST));

    // Redeploys of either (each re-applies its own password) leave the other alone.
    await deploy(FIRST, PASSWORDS.first);
    await deploy(SECOND, PASSWORDS.second);
    expect(await works(FIRST, PASSWORDS.first)).toBe(role(FIRST));
    expect(await works(SECOND, PASSWORDS.second)).toBe(role(SECOND));
  });

  it('neither role may connect to the other’s database, and charges_app keeps nothing in either', async () => {
    await expect(withClient(urlAs(SECOND, role(FIRST), PASSWORDS.first), async () => {})).rejects.toThrow(/permission denied for database/);
    await expect(withClient(urlAs(FIRST, role(SECOND), PASSWORDS.second), async () => {})).rejects.toThrow(/permission denied for database/);
    for (const database of [FIRST, SECOND]) {
      const other = database === FIRST ? role(SECOND) : role(FIRST);
      const { rows } = await asAdmin(database, (c) =>
        c.query<{ role: string; connect: boolean; tables: number; defaults: number }>(
          `SELECT r.rolname AS role, has_database_privilege(r.rolname, current_database(), 'CONNECT') AS connect,
                  (SELECT count(*)::int FROM pg_class c, aclexplode(c.relacl) a WHERE a.grantee = r.oid) AS tables,
                  (SELECT count(DISTINCT d.oid)::int FROM pg_default_acl d, aclexplode(d.defaclacl) a WHERE a.grantee = r.oid) AS defaults
             FROM pg_roles r WHERE r.rolname = ANY($1) ORDER BY r.rolname`,
          [[APPLICATION_ROLE, other, role(database)]],
        ),
      );
      const byRole = Object.fromEntries(rows.map((r) => [r.role, r]));
      expect(byRole[APPLICATION_ROLE]).toMatchObject({ connect: false, tables: 0, defaults: 0 });
      expect(byRole[other]).toMatchObject({ connect: false, tables: 0, defaults: 0 });
      expect(byRole[role(database)]!.connect).toBe(true);
      expect(byRole[role(database)]!.tables).toBeGreaterThan(5);
      expect(byRole[role(database)]!.defaults).toBe(2);
      // The lifecycle functions (migration 017: retention and erasure) are the pipeline's role's to run, no one else's.
      const { rows: fns } = await asAdmin(database, (c) =>
        c.query<{ own: boolean; template: boolean; other: boolean; public: boolean }>(
          `SELECT has_function_privilege($1, 'lifecycle_delete_published_outbox(timestamptz, integer)', 'EXECUTE') AS own,
                  has_function_privilege($2, 'lifecycle_delete_published_outbox(timestamptz, integer)', 'EXECUTE') AS template,
                  has_function_privilege($3, 'lifecycle_erase_customer(text, text, boolean, text, jsonb)', 'EXECUTE') AS other,
                  has_function_privilege('public', 'lifecycle_erase_customer(text, text, boolean, text, jsonb)', 'EXECUTE') AS public`,
          [role(database), APPLICATION_ROLE, other],
        ),
      );
      expect(fns[0]).toEqual({ own: true, template: false, other: false, public: false });
    }
    // And it runs them, as its own login: the owner (not a superuser here, as on RDS) is the definer,
    // and the guards let the function's removal through.
    await asAdmin(FIRST, async (c) => {
      const { rows } = await c.query<{ id: string }>(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method, status, external_id, settled_at, next_attempt_at)
         VALUES ('roles-retention', 100, 'eur', 'cus_roles', 'pm_card_visa', 'succeeded', 'pi_roles', now(), NULL) RETURNING id`,
      );
      const old = new Date(Date.now() - 40 * 86_400_000);
      const eventId = `${old.getTime().toString(16).padStart(12, '0').replace(/^(.{8})(.{4})$/, '$1-$2')}-7000-8000-000000000001`;
      await c.query(
        `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, created_at, published_at)
         VALUES ($1::uuid, $2, 'Charge Succeeded', jsonb_build_object('eventId', $1::text, 'sequence', 1), $3, $3)`,
        [eventId, rows[0]!.id, old],
      );
      await c.query(
        `INSERT INTO rejected_messages (message_id, received_at, reason_code, reason, body_sha256, raw_body) VALUES ('roles-m', $1, 'invalid_json', 'not JSON', repeat('0', 64), '{')`,
        [old],
      );
    });
    const removed = await withClient(urlAs(FIRST, role(FIRST), PASSWORDS.first), (c) =>
      c.query<{ outbox: number; bodies: number }>(
        `SELECT lifecycle_delete_published_outbox(now() - interval '30 days', 10) AS outbox, lifecycle_remove_rejected_bodies(now() - interval '14 days', 10) AS bodies`,
      ),
    );
    expect(removed.rows[0]).toEqual({ outbox: 1, bodies: 1 });
  });

  it('a later migration’s grants to charges_app and the owner’s default privileges reach the pipeline’s role only', async () => {
    const later: MigrationFile = {
      name: '999_later.sql',
      sql: 'CREATE TABLE later_facts (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text); CREATE TABLE later_granted (x int); GRANT SELECT ON later_granted TO charges_app;',
      checksum: 'later',
    };
    await deploy(SECOND, PASSWORDS.second, [later]);
    await withClient(urlAs(SECOND, role(SECOND), PASSWORDS.second), async (c) => {
      await c.query(`INSERT INTO later_facts (note) VALUES ('by default privileges')`);
      await c.query('SELECT * FROM later_granted');
    });
    const { rows } = await asAdmin(SECOND, (c) =>
      c.query(`SELECT has_table_privilege($1, 'later_facts', 'SELECT') AS facts, has_table_privilege($1, 'later_granted', 'SELECT') AS granted`, [APPLICATION_ROLE]),
    );
    expect(rows).toEqual([{ facts: false, granted: false }]);
  });

  it('refuses a role that reaches another database (another pipeline’s) instead of replacing its password', async () => {
    await expect(deploy(FIRST, 'not-the-second-ones-password', [], role(SECOND))).rejects.toThrow(
      new RegExp(`the role ${role(SECOND)} may connect to another database of this server too \\(${SECOND}\\).*existingDatabase.databaseName`),
    );
    expect(await works(SECOND, PASSWORDS.second)).toBe(role(SECOND));
  });

  it('a database that does not exist: refused with what to run when the owner may not create it, or when told not to create', async () => {
    const third = `third_${suffix}`;
    await expect(
      migrate(urlAs(third, WEAK_OWNER, PASSWORDS.owner), files, () => {}, { applicationRole: role(third), applicationRolePassword: PASSWORDS.second, createDatabase: true }),
    ).rejects.toThrow(new RegExp(`the database "${third}" does not exist and creating it failed \\(${WEAK_OWNER} may not create databases\\): create it first \\(CREATE DATABASE ${third} OWNER ${WEAK_OWNER}`));
    await expect(migrate(urlAs(`fourth_${suffix}`, OWNER, PASSWORDS.owner), files)).rejects.toThrow(
      new RegExp(`the database "fourth_${suffix}" does not exist: it must exist before the migrations run`),
    );
  });
});
