// The database's two logins and the migrate path's own limits, on real PostgreSQL 18:
//   - the application role (migrations/003_application_role.sql) can run the pipeline — the engine
//     records, charges and settles, the reconciler sweeps — with DML only, and cannot run DDL;
//   - migrate sets the role's password as a SCRAM verifier, and the role then logs in with it;
//   - a pool re-reads a rotated password once when the server refuses the old one;
//   - migrations take their own statement and lock timeouts, not the charge path's;
//   - the Stripe-events path (migrations/006_stripe_events.sql) works as that role too: the inbox
//     insert, the inline and the swept apply, refunds and disputes, findings — and never a delete.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { CredentialRefreshingPool, databaseClientConfig, INVALID_PASSWORD, startupOptions } from '../../lambdas/runtime/database.ts';
import { loadConfig } from '../../lambdas/runtime/config.ts';
import { loadMigrations, migrate, MigrationError, scramVerifier, type MigrationFile } from '../../lambdas/runtime/migrations.ts';
import { runReconcile } from '../../lambdas/reconcile/sweep.ts';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import { inboxGauges, listFindings, resolveFinding } from '../../lambdas/payments/inbox-store.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { WebhookDispatcher } from '../../local/fake-stripe/webhooks.ts';
import { delivery, piEvent, SECRET } from '../stripe-events/support.ts';
import { createDatabase } from '../../local/postgres.ts';
import { databaseUrl } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

const PASSWORD = `app-${randomBytes(12).toString('hex')}`;
// The pipeline's own application role (one per database: roles are server-wide, and charges_app may
// connect to the suite's other databases, which migrate refuses for a role it gives a password).
const APPLICATION_ROLE = `roles_app_${randomBytes(4).toString('hex')}`;
let name: string;
let ownerUrl: string;
let appUrl: string;
let app: pg.Pool;
let stripe: StripeHarness;

beforeAll(async () => {
  name = `roles_${randomBytes(4).toString('hex')}`;
  await createDatabase(inject('pgAdminUrl'), name);
  ownerUrl = databaseUrl(name);
  // What the migrate function does on AWS: the migrations, then the password from the app secret.
  await migrate(ownerUrl, await loadMigrations('migrations'), () => {}, { applicationRole: APPLICATION_ROLE, applicationRolePassword: PASSWORD });
  const url = new URL(ownerUrl);
  url.username = APPLICATION_ROLE;
  url.password = PASSWORD;
  appUrl = url.toString();
  app = new pg.Pool({ connectionString: appUrl, max: 4 });
  stripe = await startStripe();
});

afterAll(async () => {
  await app?.end();
  await stripe?.close();
  const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  await admin.query(`DROP ROLE IF EXISTS ${APPLICATION_ROLE}`);
  await admin.end();
});

describe('the application role', () => {
  it('logs in with the password migrate set, stored as a SCRAM verifier (never the password itself)', async () => {
    const { rows } = await app.query<{ user: string }>('SELECT current_user AS user');
    expect(rows[0]!.user).toBe(APPLICATION_ROLE);
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    const stored = await owner.query<{ rolpassword: string; rolcanlogin: boolean }>('SELECT rolpassword, rolcanlogin FROM pg_authid WHERE rolname = $1', [APPLICATION_ROLE]);
    await owner.end();
    expect(stored.rows[0]!.rolcanlogin).toBe(true);
    expect(stored.rows[0]!.rolpassword).toMatch(/^SCRAM-SHA-256\$4096:/);
    expect(stored.rows[0]!.rolpassword).not.toContain(PASSWORD);
  });

  it('runs the pipeline with DML only: records, charges, settles and sweeps', async () => {
    const engine = new ChargeEngine({ db: app, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
    const id = await engine.requestCharge(chargeOrder());
    expect(await engine.executeCharge(id)).toMatchObject({ status: 'succeeded', disposition: 'attempted', step: 'create' });
    const { rows } = await app.query<{ status: string }>('SELECT status FROM payment_operations WHERE id = $1', [id]);
    expect(rows[0]!.status).toBe('succeeded');

    // One left for the sweep: its answer was lost after Stripe charged (unknown), and it is due.
    const lost = await engine.requestCharge(chargeOrder());
    stripe.fake.injectFault({ operationId: lost }, 'truncated_response_after_commit');
    expect(await engine.executeCharge(lost)).toMatchObject({ status: 'unknown', disposition: 'attempted' });
    await app.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [lost]);
    const summary = await runReconcile(
      {
        db: app,
        gateway: stripe.gateway,
        publisher: null,
        settings: { maxRequestsPerSecond: 100, maxSearchesPerSecond: 10, concurrency: 2, pageSize: 10, minTimeToCallMs: 1_000, safetyMarginMs: 500, maxRunMs: 0, rejectedWindowSeconds: 300 },
      },
      { remainingMs: () => 60_000 },
    );
    // The sweep claimed it, re-sent the same key (Stripe replayed the charge), settled it: all as charges_app.
    expect(summary).toMatchObject({ claimed: 1, byOutcome: { succeeded: 1 }, released: 0, reconciled: 1, pages: 1, stripeRequests: 1, stoppedBecause: 'drained', errors: [] });
    expect(summary.byOutcome).toEqual({ succeeded: 1 });
    expect(summary.gauges).toMatchObject({ openPending: 0, openUnknown: 0, reviewQueueSize: 0 });
    const creates = stripe.fake.requests().filter((r) => r.operationId === lost);
    expect(creates.map((r) => [r.endpoint, r.idempotencyKey, r.replayed])).toEqual([
      ['create', `payment-op:${lost}`, false],
      ['create', `payment-op:${lost}`, true],
    ]);
    const swept = await app.query<{ status: string; external_id: string; actor: string }>(
      `SELECT p.status, p.external_id, e.actor FROM payment_operations p JOIN payment_operation_events e ON e.operation_id = p.id AND e.action = 'outcome_recorded' WHERE p.id = $1 ORDER BY e.id`,
      [lost],
    );
    const pis = stripe.fake.paymentIntents({ operationId: lost });
    expect(pis.map((pi) => pi.status)).toEqual(['succeeded']);
    expect(swept.rows).toEqual([
      { status: 'succeeded', external_id: pis[0]!.id, actor: 'test' },
      { status: 'succeeded', external_id: pis[0]!.id, actor: 'reconciler' },
    ]);
  });

  it.each([
    ['create a table', 'CREATE TABLE intruder (x int)', /permission denied for schema public/],
    ['alter a pipeline table', 'ALTER TABLE payment_operations ADD COLUMN x int', /must be owner of table payment_operations/],
    ['drop a pipeline table', 'DROP TABLE outcome_events', /must be owner of table outcome_events/],
    ['truncate', 'TRUNCATE rejected_messages', /permission denied for table rejected_messages/],
    ['drop a trigger (the append-only guard)', 'DROP TRIGGER payment_operation_events_append_only ON payment_operation_events', /must be owner/],
    ['read or rewrite the migrations record', 'SELECT * FROM schema_migrations', /permission denied for table schema_migrations/],
    ['create a role', 'CREATE ROLE intruder', /permission denied to create role/],
    ['create a function', 'CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $$ SELECT 1 $$', /permission denied for schema public/],
  ])('cannot %s', async (_label, sql, error) => {
    await expect(app.query(sql)).rejects.toThrow(error);
  });
});

describe('the runtime pool\'s search path', () => {
  it('is public for every connection as charges_app, whatever the role says: unpinned, reset, or set to another schema', async () => {
    const runtime = loadConfig({ DATABASE_URL: appUrl, STRIPE_SECRET_KEY: 'sk_test_search_path' });
    const pinned = new CredentialRefreshingPool({ ...(await databaseClientConfig(runtime)), max: 1 }, () => {});
    const owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    const path = async (pool: pg.Pool) => (await pool.query<{ search_path: string }>('SHOW search_path')).rows[0]!.search_path;
    try {
      // migrate pins the role's search path in its database; without that pin, a plain connection
      // has the default, and the runtime's connections still resolve in public.
      await owner.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${name} RESET search_path`);
      const plain = new pg.Pool({ connectionString: appUrl, max: 1 });
      try {
        expect(await path(plain)).toBe('"$user", public');
      } finally {
        await plain.end();
      }
      expect(await path(pinned)).toBe('public');
      await owner.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${name} SET search_path = public`);
      await owner.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${name} RESET search_path`);
      await owner.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${name} SET search_path = "$user", pg_temp, public`);
      await pinned.end();
      const fresh = new CredentialRefreshingPool({ ...(await databaseClientConfig(runtime)), max: 1 }, () => {});
      try {
        expect(await path(fresh)).toBe('public');
        const { rows } = await fresh.query<{ user: string }>('SELECT current_user AS user');
        expect(rows[0]!.user).toBe(APPLICATION_ROLE);
      } finally {
        await fresh.end();
      }
    } finally {
      await owner.query(`ALTER ROLE ${APPLICATION_ROLE} IN DATABASE ${name} RESET search_path`).catch(() => {});
      await owner.end();
    }
  });
  it('is not sent to an RDS Proxy endpoint, which refuses command-line options (its initQuery pins it there, docs/deploy.md)', () => {
    expect(startupOptions('charges.proxy-abc123def456.eu-west-1.rds.amazonaws.com')).toEqual({});
    expect(startupOptions('charges.proxy-abc123def456.cn-north-1.rds.amazonaws.com.cn')).toEqual({});
    for (const host of ['charges.abc123def456.eu-west-1.rds.amazonaws.com', 'charges.cluster-abc123def456.eu-west-1.rds.amazonaws.com', '127.0.0.1', undefined]) {
      expect(startupOptions(host), String(host)).toEqual({ options: '-c search_path=public' });
    }
  });
});

describe('Stripe events in, as the application role', () => {
  const settings = { secret: SECRET, maxBodyBytes: 256 * 1024 };
  const applier = () => new StripeEventApplier({ db: app, gateway: stripe.gateway, actor: 'stripe-events', random: () => 0.5 });
  const engine = () => new ChargeEngine({ db: app, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
  const outbox = (operationId: string) => app.query<{ event_type: string }>('SELECT event_type FROM outcome_events WHERE operation_id = $1 ORDER BY created_at', [operationId]).then((r) => r.rows.map((e) => e.event_type));

  it('records a signed event and applies it inline: the operation settles, with its outcome event', async () => {
    stripe.fake.injectFault({}, 'processing');
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(app, r!.operationId))!;
    expect(op.status).toBe('unknown');
    stripe.fake.settle(op.externalId!, 'succeeded');
    const pi = stripe.fake.paymentIntents({ operationId: op.id })[0]!;
    const received = await receiveWebhook(delivery(piEvent(pi)), settings, { db: app, applier: applier(), publisher: null });
    expect(received).toMatchObject({ kind: 'recorded', duplicate: false, applied: { outcome: 'settled' } });
    expect(await findOperation(app, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await outbox(op.id)).toEqual(['Charge Succeeded']);
  });

  it('records without applying, and the sweep applies it later: a refund and a dispute become aftermath events', async () => {
    const [r] = await engine().processRequests([chargeOrder({ amount: 3000 })]);
    const op = (await findOperation(app, r!.operationId))!;
    const dispatcher = new WebhookDispatcher({ fake: stripe.fake, endpoint: null, secret: SECRET });
    // A Dashboard refund is a Refund: refund.created (foreign: no operation_id) beside charge.refunded.
    for (const event of [...dispatcher.refund(op.externalId!, 1000), dispatcher.dispute(op.externalId!, 'created')]) {
      expect(await receiveWebhook(delivery(event), settings, { db: app, applier: null, publisher: null })).toMatchObject({ kind: 'recorded', duplicate: false });
    }
    expect((await inboxGauges(app)).backlog).toBe(3);
    const summary = await applier().applyDue();
    expect(summary).toMatchObject({ applied: 3, failed: 0, byOutcome: { aftermath: 2, foreign: 1 } });
    expect(await outbox(op.id)).toEqual(['Charge Succeeded', 'Charge Refunded', 'Charge Disputed']);
  });

  it('records a contradiction finding, lists it and resolves it', async () => {
    stripe.fake.injectFault({}, 'decline');
    const [r] = await engine().processRequests([chargeOrder()]);
    const op = (await findOperation(app, r!.operationId))!;
    expect(op.status).toBe('failed');
    const pi = stripe.fake.paymentIntents({ operationId: op.id })[0]!;
    expect(await receiveWebhook(delivery(piEvent(pi, 'succeeded')), settings, { db: app, applier: applier(), publisher: null })).toMatchObject({
      applied: { outcome: 'contradiction', newFinding: true },
    });
    const { findings } = await listFindings(app, { includeResolved: false, kind: 'contradiction', limit: 10 });
    const finding = findings.find((f) => f.operationId === op.id)!;
    expect(finding).toBeDefined();
    expect(await resolveFinding(app, finding.id, 'oncall', 'refunded by hand')).toMatchObject({ alreadyResolved: false, finding: { resolvedBy: 'oncall' } });
  });

  it.each([
    ['delete an inbox row', 'DELETE FROM stripe_events', /permission denied for table stripe_events/],
    ['delete a finding', 'DELETE FROM stripe_event_findings', /permission denied for table stripe_event_findings/],
    ['truncate the inbox', 'TRUNCATE stripe_events', /permission denied for table stripe_events/],
    ['drop the inbox guard', 'DROP TRIGGER stripe_events_guard ON stripe_events', /must be owner/],
  ])('cannot %s', async (_label, sql, error) => {
    await expect(app.query(sql)).rejects.toThrow(error);
  });
});

describe('a rotated password', () => {
  const role = `rot_${randomBytes(4).toString('hex')}`;
  let owner: pg.Client;
  beforeAll(async () => {
    owner = new pg.Client({ connectionString: ownerUrl });
    await owner.connect();
    await owner.query(`CREATE ROLE ${role} LOGIN PASSWORD '${scramVerifier('first-password-0001')}'`);
    // PUBLIC may not connect to a pipeline's database (migrate revokes it): a login is granted CONNECT.
    await owner.query(`GRANT CONNECT ON DATABASE ${name} TO ${role}`);
  });
  afterAll(async () => {
    await owner.query(`REVOKE CONNECT ON DATABASE ${name} FROM ${role}`);
    await owner.query(`DROP ROLE IF EXISTS ${role}`);
    await owner.end();
  });

  /** A pool as getPool builds it: the password read per connection from a (cached) secret. */
  function poolWith(secret: { cached: string; current: string }, reads: { n: number }) {
    const url = new URL(ownerUrl);
    return new CredentialRefreshingPool(
      { host: url.hostname, port: Number(url.port), database: name, user: role, password: async () => secret.cached, max: 2 },
      () => {
        reads.n += 1;
        secret.cached = secret.current; // forgetting the cache makes the next read fetch the current value
      },
    );
  }

  it('is read again, once, when the server refuses the cached one: the query succeeds', async () => {
    const secret = { cached: 'first-password-0001', current: 'second-password-0002' };
    const reads = { n: 0 };
    // the rotation: new password in the database and in the secret; the container still caches the old
    await owner.query(`ALTER ROLE ${role} PASSWORD '${scramVerifier(secret.current)}'`);
    const pool = poolWith(secret, reads);
    try {
      const { rows } = await pool.query<{ user: string }>('SELECT current_user AS user');
      expect(rows[0]!.user).toBe(role);
      expect(reads.n).toBe(1);
      // later connections use the fresh password without another read
      const client = await pool.connect();
      client.release();
      expect(reads.n).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('fails as an authentication error after that one re-read if the password is still wrong', async () => {
    const secret = { cached: 'wrong-password-0003', current: 'still-wrong-0004' };
    const reads = { n: 0 };
    const pool = poolWith(secret, reads);
    try {
      await expect(pool.query('SELECT 1')).rejects.toMatchObject({ code: INVALID_PASSWORD });
      expect(reads.n).toBe(1);
    } finally {
      await pool.end();
    }
  });
});

describe('the migrate path\'s limits', () => {
  const file = (n: string, sql: string): MigrationFile => ({ name: n, sql, checksum: `sum-${sql}` });

  it('does not inherit the charge path\'s statement timeout', async () => {
    const db = `mig_slow_${randomBytes(4).toString('hex')}`;
    await createDatabase(inject('pgAdminUrl'), db);
    // the functions' client config carries statement_timeout = DB_STATEMENT_TIMEOUT_MS (here 100 ms)
    const result = await migrate({ connectionString: databaseUrl(db), statement_timeout: 100 }, [file('001_slow.sql', 'SELECT pg_sleep(0.5)')]);
    expect(result.applied).toEqual(['001_slow.sql']);
  });

  it('stops a statement at its own limit, saying which limit and what to do', async () => {
    const db = `mig_limit_${randomBytes(4).toString('hex')}`;
    await createDatabase(inject('pgAdminUrl'), db);
    const run = migrate(databaseUrl(db), [file('001_long.sql', 'SELECT pg_sleep(5)')], () => {}, { statementTimeoutMs: 200 });
    await expect(run).rejects.toThrow(MigrationError);
    await expect(run).rejects.toThrow(/MIGRATE_STATEMENT_TIMEOUT_MS \(200 ms\).*nothing of it was applied/);
  });

  it('gives up on a lock held by a long transaction instead of queueing (and blocking the charge path) behind it', async () => {
    const db = `mig_lock_${randomBytes(4).toString('hex')}`;
    await createDatabase(inject('pgAdminUrl'), db);
    await migrate(databaseUrl(db), [file('001_t.sql', 'CREATE TABLE t (x int)')]);
    const longTransaction = new pg.Client({ connectionString: databaseUrl(db) });
    await longTransaction.connect();
    try {
      await longTransaction.query('BEGIN');
      await longTransaction.query('SELECT * FROM t'); // holds ACCESS SHARE until it ends
      const run = migrate(databaseUrl(db), [file('001_t.sql', 'CREATE TABLE t (x int)'), file('002_alter.sql', 'ALTER TABLE t ADD COLUMN y int')], () => {}, {
        lockTimeoutMs: 200,
      });
      await expect(run).rejects.toThrow(/002_alter.sql failed: .*MIGRATE_LOCK_TIMEOUT_MS \(200 ms\).*re-run the deploy/);
      // and nothing of it stayed: the transaction still reads t as it was, the file is not recorded
      const admin = new pg.Client({ connectionString: databaseUrl(db) });
      await admin.connect();
      const recorded = await admin.query('SELECT name FROM schema_migrations ORDER BY name');
      await admin.end();
      expect(recorded.rows.map((r) => r.name)).toEqual(['001_t.sql']);
    } finally {
      await longTransaction.query('ROLLBACK').catch(() => {});
      await longTransaction.end();
    }
  });
});
