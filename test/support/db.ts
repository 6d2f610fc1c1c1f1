// Each test file (or test) gets its own database cloned from the migrated template: real
// PostgreSQL 18, isolated, created in tens of milliseconds.
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { inject } from 'vitest';
import { createDatabase } from '../../local/postgres.ts';

export interface TestDatabase {
  readonly url: string;
  readonly name: string;
  /** A pool on the database; ended by drop(). */
  readonly pool: pg.Pool;
  drop(): Promise<void>;
}

export function databaseUrl(database: string): string {
  const parsed = new URL(inject('pgAdminUrl'));
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

export async function createTestDatabase(label = 't'): Promise<TestDatabase> {
  const name = `${label.toLowerCase().replace(/[^a-z0-9_]/g, '_').slice(0, 30)}_${randomBytes(5).toString('hex')}`;
  await createDatabase(inject('pgAdminUrl'), name, inject('pgTemplate'));
  const url = databaseUrl(name);
  const pool = new pg.Pool({ connectionString: url, max: 10 });
  return {
    url,
    name,
    pool,
    async drop() {
      await pool.end();
      const admin = new pg.Client({ connectionString: inject('pgAdminUrl') });
      await admin.connect();
      try {
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      } finally {
        await admin.end();
      }
    },
  };
}
