// bench:storage on a few orders, as a child process (its own embedded PostgreSQL, fake Stripe and
// fake EventBridge): the report has every table and part, per charge, before and after retention,
// WAL and the projection; and retention removed what it bounds — the published outbox, the applied
// inbox — while the ledger and its audit trail are kept whole. Figures are not asserted.
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');

interface Part { rows: number; heap: number; toast: number; indexes: Record<string, number>; total: number }

describe('npm run bench:storage', () => {
  it('reports bytes per charge per table, heap / TOAST / each index, WAL, before and after retention, and the projection', async () => {
    // On failure, the child's own stderr (its progress and the error that stopped it) is the message.
    const { stdout } = await run(process.execPath, ['--import', 'tsx', path.join(ROOT, 'scripts/bench-storage.ts'), '--orders', '30', '--json'], {
      cwd: ROOT,
      maxBuffer: 16 * 1024 * 1024,
      timeout: 180_000,
    }).catch((error: { stderr?: string; signal?: string; code?: number }) => {
      throw new Error(`bench:storage exited with ${error.code ?? error.signal}:\n${error.stderr ?? ''}`);
    });
    const report = JSON.parse(stdout) as {
      orders: number;
      beforeRetentionPerCharge: Record<string, Part>;
      afterRetentionPerCharge: Record<string, Part>;
      asWrittenPerCharge: Record<string, Part>;
      retention: { removed: Record<string, number>; unfinished: string[] };
      wal: { charging: number; retention: number };
      totals: { beforePerCharge: number; afterPerCharge: number; walPerCharge: number };
      projection: { chargesPerSecond: number; byTable: Record<string, { withoutRetentionPerDay: number; withoutRetentionPerMonth: number; withRetentionKeptPerDay: number; steadyStateWindow: number }> };
      auditLinesNamingACustomer: number;
    };
    expect(report.orders).toBe(30);
    const tables = ['payment_operations', 'payment_operation_events', 'outcome_events', 'stripe_events', 'rejected_messages'];
    for (const when of [report.asWrittenPerCharge, report.beforeRetentionPerCharge, report.afterRetentionPerCharge]) {
      for (const table of tables) {
        expect(when[table], table).toMatchObject({ rows: expect.any(Number), heap: expect.any(Number), toast: expect.any(Number), total: expect.any(Number) });
        expect(Object.keys(when[table]!.indexes).length, table).toBeGreaterThan(0);
      }
    }
    const before = report.beforeRetentionPerCharge;
    const after = report.afterRetentionPerCharge;
    // Retention removed what it bounds, and nothing of the ledger or the trail.
    expect(before.outcome_events!.rows).toBeGreaterThan(0);
    expect(after.outcome_events!.rows).toBe(0);
    expect(before.stripe_events!.rows).toBeGreaterThan(0);
    expect(after.stripe_events!.rows).toBeLessThan(before.stripe_events!.rows);
    expect(after.payment_operations!.rows).toBe(before.payment_operations!.rows);
    expect(after.payment_operation_events!.rows).toBe(before.payment_operation_events!.rows);
    expect(report.retention.removed.outbox).toBe(before.outcome_events!.rows);
    expect(report.retention.unfinished).toEqual([]);
    expect(report.totals.afterPerCharge).toBeLessThan(report.totals.beforePerCharge);
    expect(report.wal.charging).toBeGreaterThan(0);
    expect(report.projection.chargesPerSecond).toBe(1000);
    expect(report.projection.byTable.outcome_events!.withRetentionKeptPerDay).toBe(0);
    expect(report.projection.byTable.outcome_events!.steadyStateWindow).toBeGreaterThan(0);
    expect(report.projection.byTable.payment_operations!.withoutRetentionPerMonth).toBe(report.projection.byTable.payment_operations!.withoutRetentionPerDay * 30);
    // The audit trail names no customer (docs/operations.md "Erasure").
    expect(report.auditLinesNamingACustomer).toBe(0);
  }, 240_000);
});
