// An outcome consumer's own login on the pipeline's database (ChargePipeline.addConsumerDatabaseLogin,
// runtime/migrations.ts provisionConsumerLogin), on real PostgreSQL 18 with an owner like RDS's master
// user (not a superuser; CREATEROLE; owns the database):
//   - the migrate run creates the role and sets its password; connected as that role, the kit's and
//     the notifier's migrations apply (it creates and owns its schemas) and a receipt is sent and recorded;
//   - the role reads and writes NOTHING of the pipeline's: every public table refuses it;
//   - it may create schemas, so the pipeline's roles resolve names in public only: a schema named
//     after one of them cannot shadow payment_operations;
//   - schemas an older deploy made as the owner are handed over; a schema another role owns is refused.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { migrateConsumer } from '../../lambdas/consumers/kit/migrations.ts';
import { RECEIPTS_SCHEMAS } from '../../lambdas/consumers/receipts/contract.ts';
import { HttpEmailProvider } from '../../lambdas/consumers/receipts/email-provider.ts';
import { createReceiptNotifier, receiptMigrations, templateRecipient } from '../../lambdas/consumers/receipts/notifier.ts';
import { APPLICATION_ROLE, loadMigrations, migrate, MigrationError, type ConsumerLogin } from '../../lambdas/runtime/migrations.ts';
import { startFakeEmail, type FakeEmail } from '../../local/fake-email/server.ts';
import { createDatabase } from '../../local/postgres.ts';
import { databaseUrl } from '../support/db.ts';
import { delivery, outcomeEvent } from '../consumers/support.ts';

const suffix = randomBytes(4).toString('hex');
// Roles are cluster-wide: names of this file's own, dropped at the end.
const OWNER = `owner_${suffix}`;
const CONSUMER = `receipts_${suffix}`;
const OTHER = `other_${suffix}`;
// A role is one pipeline's consumer: a second database of the server gets a role of its own.
const HANDOVER = `handover_${suffix}`;
const GRANTED = `granted_${suffix}`;
const RENAMED = `renamed_${suffix}`;
const PASSWORDS = { owner: `owner-${randomBytes(12).toString('hex')}`, consumer: `cons-${randomBytes(12).toString('hex')}`, other: `other-${randomBytes(12).toString('hex')}` };
const SCHEMAS = [...RECEIPTS_SCHEMAS];
const databases: string[] = [];
const pools: pg.Pool[] = [];
let email: FakeEmail;

function urlAs(database: string, user: string, password: string): string {
  const url = new URL(databaseUrl(database));
  url.username = user;
  url.password = password;
  return url.toString();
}

async function asAdmin<T>(database: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: databaseUrl(database) });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

async function asOwner<T>(ownerUrl: string, work: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: ownerUrl });
  await client.connect();
  try {
    return await work(client);
  } finally {
    await client.end();
  }
}

/** A new database owned by OWNER, as RDS creates it for its master user. */
async function ownedDatabase(label: string): Promise<{ name: string; ownerUrl: string }> {
  const name = `${label}_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('pgAdminUrl'), name);
  databases.push(name);
  await asAdmin(name, (c) => c.query(`ALTER DATABASE ${name} OWNER TO ${OWNER}`));
  return { name, ownerUrl: urlAs(name, OWNER, PASSWORDS.owner) };
}

const login = (overrides: Partial<ConsumerLogin> = {}): ConsumerLogin => ({ role: CONSUMER, password: PASSWORDS.consumer, schemas: SCHEMAS, ...overrides });

function pool(url: string): pg.Pool {
  const p = new pg.Pool({ connectionString: url, max: 2 });
  p.on('connect', (client) => client.on('error', () => {}));
  pools.push(p);
  return p;
}

beforeAll(async () => {
  email = await startFakeEmail({ idempotency: false });
  await asAdmin('postgres', async (c) => {
    await c.query(`CREATE ROLE ${OWNER} LOGIN CREATEROLE PASSWORD '${PASSWORDS.owner}'`);
    // On RDS the owner created charges_app (migrations/003) and so holds ADMIN on it; here another
    // database of the test server made it first.
    await c.query(`DO $$ BEGIN CREATE ROLE ${APPLICATION_ROLE} NOLOGIN; EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$`);
    await c.query(`GRANT ${APPLICATION_ROLE} TO ${OWNER} WITH ADMIN TRUE, INHERIT FALSE, SET FALSE`);
  });
});

afterAll(async () => {
  await Promise.all(pools.map((p) => p.end()));
  await email?.close();
  await asAdmin('postgres', async (c) => {
    for (const name of databases) await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    for (const role of [CONSUMER, OTHER, HANDOVER, GRANTED, RENAMED, OWNER]) await c.query(`DROP ROLE IF EXISTS ${role}`);
  });
});

/** What the old notifier (logged in as the owner) does on start, and what the runbook does as the owner. */
async function ownerStillWorks(ownerUrl: string): Promise<void> {
  const again = await migrateConsumer(ownerUrl, receiptMigrations());
  expect(again['receipts.schema_migrations']).toEqual({ applied: [], alreadyApplied: ['001_receipts.sql'] });
  const owner = pool(ownerUrl);
  await owner.query('SELECT count(*) FROM receipts.sent_receipts');
  await owner.query('SELECT count(*) FROM outcome_consumer.inbox');
  await owner.query('CREATE TABLE IF NOT EXISTS receipts.sent_receipts (event_id uuid)');
  await owner.query('CREATE TABLE IF NOT EXISTS outcome_consumer.owner_probe (x int)');
  await owner.query('DROP TABLE outcome_consumer.owner_probe');
}

it('names as the receipt notifier’s schemas (what the CDK login claims) exactly the schemas its migrations record in', () => {
  expect(receiptMigrations().map((set) => set.trackingTable.split('.')[0])).toEqual(SCHEMAS);
});

describe('a consumer login provisioned by the migrate run', () => {
  let db: { name: string; ownerUrl: string };
  let consumer: pg.Pool;
  beforeAll(async () => {
    db = await ownedDatabase('consumer_login');
    // What the migrate function does on AWS with DB_CONSUMER_LOGINS: the pipeline's migrations, then the login.
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login()] });
    consumer = pool(urlAs(db.name, CONSUMER, PASSWORDS.consumer));
  });

  it('logs in as its own role, applies the kit’s and the notifier’s migrations as itself and owns its schemas', async () => {
    const { rows } = await consumer.query<{ user: string }>('SELECT current_user AS user');
    expect(rows[0]!.user).toBe(CONSUMER);
    const applied = await migrateConsumer(urlAs(db.name, CONSUMER, PASSWORDS.consumer), receiptMigrations());
    expect(applied['outcome_consumer.schema_migrations']?.applied).toEqual(['001_consumer_inbox.sql']);
    expect(applied['receipts.schema_migrations']?.applied).toEqual(['001_receipts.sql']);
    const owners = await consumer.query<{ nspname: string; owner: string }>(
      `SELECT nspname, pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = ANY($1) ORDER BY nspname`,
      [SCHEMAS],
    );
    expect(owners.rows).toEqual(SCHEMAS.map((nspname) => ({ nspname, owner: CONSUMER })));
  });

  it('sends a receipt and records it in its own schemas', async () => {
    const notifier = createReceiptNotifier({
      db: consumer,
      name: 'receipts',
      policy: 'at-least-once',
      provider: new HttpEmailProvider({ apiBase: email.url, apiKey: 're_test', idempotencyKeys: false }),
      from: 'receipts@shop.example',
      recipient: templateRecipient('customer+{orderId}@example.com'),
    });
    const event = outcomeEvent();
    const result = await notifier.processBatch([delivery(event)]);
    expect(result.response.batchItemFailures).toEqual([]);
    expect(result.counts).toMatchObject({ done: 1, effectCalls: 1 });
    const recorded = await consumer.query('SELECT order_id FROM receipts.sent_receipts WHERE event_id = $1', [event.eventId]);
    expect(recorded.rows).toEqual([{ order_id: event.orderId }]);
    const inbox = await consumer.query('SELECT state FROM outcome_consumer.inbox WHERE event_id = $1', [event.eventId]);
    expect(inbox.rows).toEqual([{ state: 'done' }]);
  });

  it('leaves the owner able to read and migrate the consumer’s schemas (a rollback brings back a notifier that logs in as the owner; the runbook queries them as the owner)', async () => {
    await ownerStillWorks(db.ownerUrl);
  });

  it('is refused every pipeline table: no SELECT on any, no INSERT into the outbox, no UPDATE, DELETE or TRUNCATE', async () => {
    const tables = await asAdmin(db.name, (c) => c.query<{ tablename: string }>(`SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY tablename`));
    const names = tables.rows.map((r) => r.tablename);
    expect(names).toEqual(expect.arrayContaining(['payment_operations', 'outcome_events', 'payment_operation_events', 'rejected_messages', 'schema_migrations', 'stripe_events']));
    for (const table of names) {
      await expect(consumer.query(`SELECT * FROM ${table} LIMIT 1`), table).rejects.toThrow(new RegExp(`permission denied for table ${table}`));
    }
    await expect(
      consumer.query(`INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload) VALUES (gen_random_uuid(), gen_random_uuid(), 'Charge Succeeded', '{}')`),
    ).rejects.toThrow(/permission denied for table outcome_events/);
    await expect(consumer.query(`UPDATE payment_operations SET status = 'failed'`)).rejects.toThrow(/permission denied for table payment_operations/);
    await expect(consumer.query('DELETE FROM outcome_events')).rejects.toThrow(/permission denied for table outcome_events/);
    await expect(consumer.query('TRUNCATE payment_operations')).rejects.toThrow(/permission denied for table payment_operations/);
    await expect(consumer.query('CREATE TABLE public.intruder (x int)')).rejects.toThrow(/permission denied for schema public/);
    await expect(consumer.query(`GRANT ${APPLICATION_ROLE} TO ${CONSUMER}`)).rejects.toThrow(/permission denied to grant role/);
    await expect(consumer.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${db.name} RESET search_path`)).rejects.toThrow(/permission denied/);
  });

  it('cannot shadow payment_operations for the pipeline’s roles with a schema named after them', async () => {
    // The attack: a schema called like the owner, a payment_operations of its own in it, usable by the owner.
    await consumer.query(`CREATE SCHEMA ${OWNER}`);
    await consumer.query(`CREATE TABLE ${OWNER}.payment_operations (id uuid)`);
    await consumer.query(`GRANT USAGE ON SCHEMA ${OWNER} TO ${OWNER}`);
    await consumer.query(`GRANT SELECT, INSERT ON ${OWNER}.payment_operations TO ${OWNER}`);
    const owner = pool(db.ownerUrl);
    const schemaOf = `SELECT n.nspname AS schema, current_setting('search_path') AS path FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'payment_operations'::regclass`;
    const resolved = await owner.query<{ schema: string; path: string }>(schemaOf);
    expect(resolved.rows[0]).toEqual({ schema: 'public', path: 'public' });
    // …which the default search path ("$user", public) would have let through:
    const client = await owner.connect();
    try {
      await client.query(`SET search_path = "$user", public`);
      const shadowed = await client.query<{ schema: string }>(schemaOf);
      expect(shadowed.rows[0]!.schema).toBe(OWNER);
    } finally {
      client.release();
    }
    // The application role (whose password this file does not set: other files log in as it) has the same pin in this database.
    const settings = await asAdmin(db.name, (c) =>
      c.query<{ role: string; config: string[] }>(
        `SELECT pg_get_userbyid(setrole) AS role, setconfig AS config FROM pg_db_role_setting s JOIN pg_database d ON d.oid = s.setdatabase WHERE d.datname = $1 ORDER BY 1`,
        [db.name],
      ),
    );
    expect(settings.rows).toEqual(expect.arrayContaining([{ role: APPLICATION_ROLE, config: ['search_path=public'] }, { role: OWNER, config: ['search_path=public'] }]));
    await consumer.query(`DROP SCHEMA ${OWNER} CASCADE`);
  });

  it('refuses, on the next provisioning run, a schema the consumer made beyond its own (CREATE on the database lets it make any), naming it', async () => {
    await consumer.query('CREATE SCHEMA stray_one');
    await consumer.query('CREATE TABLE stray_one.t (x int)');
    try {
      await expect(migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login()] })).rejects.toThrow(
        new RegExp(`the role ${CONSUMER} owns schemas beyond its own \\(outcome_consumer, receipts\\): stray_one — drop them`),
      );
    } finally {
      await consumer.query('DROP SCHEMA stray_one CASCADE');
    }
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login()] });
  });

  it('is provisioned again harmlessly by the next deploy, with the secret’s current password (a rotation)', async () => {
    const rotated = `cons-rotated-${randomBytes(12).toString('hex')}`;
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ password: rotated })] });
    const after = pool(urlAs(db.name, CONSUMER, rotated));
    const { rows } = await after.query<{ n: number }>('SELECT count(*)::int AS n FROM receipts.sent_receipts');
    expect(rows[0]!.n).toBe(1);
    await expect(new pg.Client({ connectionString: urlAs(db.name, CONSUMER, PASSWORDS.consumer) }).connect()).rejects.toThrow(/password authentication failed/);
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login()] });
  });

  it('refuses a second login claiming a schema this consumer owns', async () => {
    const run = migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, {
      consumerLogins: [{ role: OTHER, password: PASSWORDS.other, schemas: ['receipts'] }],
    });
    await expect(run).rejects.toThrow(MigrationError);
    await expect(run).rejects.toThrow(new RegExp(`provisioning the consumer role ${OTHER} failed: schema receipts belongs to ${CONSUMER}`));
  });

  it('refuses an existing role of that name that is a member of another role (here: the application role)', async () => {
    const member = `member_${suffix}`;
    await asAdmin('postgres', (c) => c.query(`CREATE ROLE ${member} NOLOGIN IN ROLE ${APPLICATION_ROLE}`));
    try {
      const run = migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [{ role: member, password: PASSWORDS.other, schemas: ['member_own'] }] });
      await expect(run).rejects.toThrow(new RegExp(`the role ${member} already exists with an attribute or a role membership`));
    } finally {
      await asAdmin('postgres', (c) => c.query(`DROP ROLE ${member}`));
    }
  });

  it('refuses an existing role that holds a privilege outside its schemas (the owner granted it SELECT on payment_operations), naming the grant', async () => {
    const owner = pool(db.ownerUrl);
    await owner.query(`CREATE ROLE ${GRANTED} NOLOGIN`);
    await owner.query(`GRANT SELECT ON payment_operations TO ${GRANTED}`);
    await owner.query(`GRANT UPDATE (status) ON payment_operations TO ${GRANTED}`);
    await owner.query(`ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO ${GRANTED}`);
    await owner.query(`CREATE FUNCTION public.granted_probe() RETURNS int LANGUAGE sql SECURITY DEFINER AS 'SELECT count(*)::int FROM payment_operations'`);
    await owner.query(`GRANT EXECUTE ON FUNCTION public.granted_probe() TO ${GRANTED}`);
    const run = migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ role: GRANTED, schemas: ['granted_own'] })] });
    await expect(run).rejects.toThrow(MigrationError);
    await expect(run).rejects.toThrow(
      new RegExp(`the role ${GRANTED} already holds EXECUTE on function public\\.granted_probe, SELECT on public\\.payment_operations, UPDATE on columns of public\\.payment_operations, default privileges SELECT — a consumer login may use only its own schemas \\(granted_own\\)`),
    );
    // Nothing of the run stayed: no login, no CREATE on the database.
    const role = await owner.query(`SELECT rolcanlogin, has_database_privilege($1, current_database(), 'CREATE') AS can_create FROM pg_roles WHERE rolname = $1`, [GRANTED]);
    expect(role.rows).toEqual([{ rolcanlogin: false, can_create: false }]);
    await owner.query(`ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE SELECT ON TABLES FROM ${GRANTED}`);
    await owner.query(`REVOKE ALL ON payment_operations FROM ${GRANTED}`);
    await owner.query('DROP FUNCTION public.granted_probe()');
    await expect(migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ role: GRANTED, schemas: ['granted_own'] })] })).resolves.toBeDefined();
  });

  it('refuses the role on a second database of the server (two pipelines, one role name): naming the other database, never resetting its password', async () => {
    const second = await ownedDatabase('consumer_second');
    const run = migrate(second.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ password: PASSWORDS.other })] });
    await expect(run).rejects.toThrow(new RegExp(`the role ${CONSUMER} already holds CREATE on database ${db.name} .*give this consumer another role name`));
    // The first pipeline's consumer still logs in with its own password.
    const { rows } = await pool(urlAs(db.name, CONSUMER, PASSWORDS.consumer)).query<{ user: string }>('SELECT current_user AS user');
    expect(rows[0]!.user).toBe(CONSUMER);
  });

  it.each([
    ['the application role', login({ role: APPLICATION_ROLE }), /may not log in as the application role/],
    ['the owner itself', login({ role: OWNER }), /is the login running the migrations/],
    ['a role name that is not an identifier', login({ role: 'x"; DROP TABLE payment_operations; --' }), /must be a lowercase identifier/],
    ['the public schema', login({ schemas: ['public'] }), /other than public/],
    ['no schema', login({ schemas: [] }), /names no schema/],
    ['a short password', login({ password: 'short' }), /shorter than 16 characters/],
  ])('refuses %s', async (_label, bad, error) => {
    await expect(migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [bad] })).rejects.toThrow(error);
  });
});

describe('a consumer that migrated as the owner before it had a login', () => {
  it('gets its schemas handed over, with their tables: its migrations are already applied and its inbox works; and renamed the documented way', async () => {
    const db = await ownedDatabase('consumer_handover');
    await migrate(db.ownerUrl, await loadMigrations('migrations'));
    await migrateConsumer(db.ownerUrl, receiptMigrations()); // the old way: as the owner, on start
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ role: HANDOVER })] });
    const consumerUrl = urlAs(db.name, HANDOVER, PASSWORDS.consumer);
    const again = await migrateConsumer(consumerUrl, receiptMigrations());
    expect(again['outcome_consumer.schema_migrations']).toEqual({ applied: [], alreadyApplied: ['001_consumer_inbox.sql'] });
    const owners = await asAdmin(db.name, (c) =>
      c.query<{ owner: string }>(
        `SELECT DISTINCT pg_get_userbyid(c.relowner) AS owner FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ANY($1) AND c.relkind IN ('r', 'S')`,
        [SCHEMAS],
      ),
    );
    expect(owners.rows).toEqual([{ owner: HANDOVER }]);
    await ownerStillWorks(db.ownerUrl);
    const consumer = pool(consumerUrl);
    await consumer.query(`INSERT INTO outcome_consumer.poison_events (consumer, message_id, reason, body) VALUES ('receipts', 'm-1', 'test', '{}')`);
    await expect(consumer.query('SELECT * FROM payment_operations')).rejects.toThrow(/permission denied for table payment_operations/);

    // Renaming the role, as docs/deploy.md "Renaming a consumer role" says: back to the owner, deploy with the new name, drop the old.
    await asOwner(db.ownerUrl, (c) => c.query(`REASSIGN OWNED BY ${HANDOVER} TO CURRENT_USER`));
    await migrate(db.ownerUrl, await loadMigrations('migrations'), () => {}, { consumerLogins: [login({ role: RENAMED })] });
    await asOwner(db.ownerUrl, async (c) => {
      await c.query(`DROP OWNED BY ${HANDOVER}`);
      await c.query(`DROP ROLE ${HANDOVER}`);
    });
    const renamed = await migrateConsumer(urlAs(db.name, RENAMED, PASSWORDS.consumer), receiptMigrations());
    expect(renamed['receipts.schema_migrations']).toEqual({ applied: [], alreadyApplied: ['001_receipts.sql'] });
    const poison = await pool(urlAs(db.name, RENAMED, PASSWORDS.consumer)).query('SELECT message_id FROM outcome_consumer.poison_events');
    expect(poison.rows).toEqual([{ message_id: 'm-1' }]);
  });
});
