// A second set of migrations (the kit's, a consumer's) is recorded in its own tracking table: the
// pipeline's runner applies it without ever seeing the pipeline's files as "missing", and refuses
// a tracking-table name that is not a plain identifier.
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadMigrations, migrate } from '../../lambdas/runtime/migrations.ts';
import { migrateConsumer } from '../../lambdas/consumers/kit/migrations.ts';
import { receiptMigrations } from '../../lambdas/consumers/receipts/notifier.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('consumer_migrations'); // the pipeline's migrations are applied already
});
afterAll(async () => {
  await db?.drop();
});

describe('consumer migrations', () => {
  it('apply beside the pipeline’s, each set in its own record, and are idempotent', async () => {
    const first = await migrateConsumer(db.url, receiptMigrations());
    expect(first['outcome_consumer.schema_migrations']?.applied).toEqual(['001_consumer_inbox.sql']);
    expect(first['receipts.schema_migrations']?.applied).toEqual(['001_receipts.sql']);
    const second = await migrateConsumer(db.url, receiptMigrations());
    expect(second['receipts.schema_migrations']).toEqual({ applied: [], alreadyApplied: ['001_receipts.sql'] });
    // The pipeline's own record is untouched, and its runner still finds everything in order.
    const pipeline = await migrate(db.url, await loadMigrations(path.resolve('migrations')));
    expect(pipeline.applied).toEqual([]);
    expect(pipeline.alreadyApplied.some((name) => name.includes('consumer') || name.includes('receipt'))).toBe(false);
  });

  it('refuse a tracking table that is not [schema.]identifier', async () => {
    await expect(migrate(db.url, [], () => {}, { trackingTable: 'x; DROP TABLE payment_operations' })).rejects.toThrow(/tracking table must be/);
  });
});
