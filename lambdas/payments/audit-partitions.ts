// The audit trail by month (migrations/015_audit_trail_partitions.sql): partitions made ahead of time,
// and a month nothing needs any more detached and exported whole (docs/operations.md, "Archiving the
// audit trail"). Plain TypeScript over a pg connection; the CLI is scripts/audit-archive.ts.
//
//   prepare   every reconcile run: this month and the next ones get their partition before a row needs
//             it (the database function, run with its owner's rights, makes nothing else);
//   archive   an operator's command: a partition whose month ended before `before`, none of whose
//             operations is still open, in review, or settled within the refund window, is detached
//             (in one transaction with that check), written to a CSV file with a manifest (rows,
//             SHA-256), counted again from the file, and dropped only when asked and only then.
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { once } from 'node:events';
import type pg from 'pg';
import type { Db } from './db.ts';
import { AUDIT_DETAIL } from './audit-trail.ts';

/** Months ahead of the current one that always have a partition. */
export const AUDIT_PARTITION_MONTHS_AHEAD = 2;

export interface PreparedPartitions {
  /** Partitions made by this call. */
  readonly created: readonly string[];
  /** Months whose rows already sit in the default partition: no partition is made for them (docs/operations.md). */
  readonly blocked: readonly { readonly partition: string; readonly defaultRows: number }[];
}

export async function prepareAuditPartitions(db: Db, monthsAhead = AUDIT_PARTITION_MONTHS_AHEAD): Promise<PreparedPartitions> {
  const { rows } = await db.query<{ partition_name: string; created: boolean; default_rows: string }>(
    'SELECT partition_name, created, default_rows FROM payment_operation_events_prepare_partitions($1)',
    [monthsAhead],
  );
  return {
    created: rows.filter((r) => r.created).map((r) => r.partition_name),
    blocked: rows.filter((r) => !r.created && Number(r.default_rows) > 0).map((r) => ({ partition: r.partition_name, defaultRows: Number(r.default_rows) })),
  };
}

export interface AuditPartition {
  readonly name: string;
  /** null: the first partition, which covers every time before its upper bound; or the default one. */
  readonly from: Date | null;
  /** null: the default partition. */
  readonly to: Date | null;
  readonly isDefault: boolean;
}

/** The trail's partitions, oldest first (bounds read from the catalog, never from input). */
export async function listAuditPartitions(db: Db): Promise<AuditPartition[]> {
  const { rows } = await db.query<{ name: string; bound: string }>(
    `SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound
       FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      WHERE i.inhparent = 'payment_operation_events'::regclass`,
  );
  const parsed = rows.map((r) => {
    if (r.bound === 'DEFAULT') return { name: r.name, from: null, to: null, isDefault: true };
    const m = /FROM \((?:MINVALUE|'([^']+)')\) TO \('([^']+)'\)/.exec(r.bound);
    if (!m) throw new Error(`unexpected partition bound of ${r.name}: ${r.bound}`);
    return { name: r.name, from: m[1] ? new Date(m[1]) : null, to: new Date(m[2]!), isDefault: false };
  });
  return parsed.sort((a, b) => (a.to?.getTime() ?? Infinity) - (b.to?.getTime() ?? Infinity));
}

export interface ArchiveOptions {
  /** Only partitions whose month ended on or before this moment. */
  readonly before: Date;
  /** An operation settled less than this many days before `now` may still be refunded: its month stays. */
  readonly refundWindowDays: number;
  /** Where the CSV files and manifests go. */
  readonly outDir: string;
  /** Drop the detached table once its file is written and counted. Default false (it stays, detached). */
  readonly drop?: boolean;
  /** Look and say, change nothing. */
  readonly dryRun?: boolean;
  /** The clock (tests: a time years ahead). Default Date.now. */
  readonly now?: () => number;
  /** Statement lock timeout for the detach, ms: a charge's insert must not queue behind it. Default 2000. */
  readonly lockTimeoutMs?: number;
}

export type PartitionVerdict =
  | { readonly partition: string; readonly verdict: 'archived'; readonly file: string; readonly rows: number; readonly sha256: string; readonly dropped: boolean }
  | { readonly partition: string; readonly verdict: 'would_archive'; readonly rows: number }
  | { readonly partition: string; readonly verdict: 'kept'; readonly reason: string };

/** The columns of the export, in order (the trail's, as migrations 001-015 define them). */
export const AUDIT_EXPORT_COLUMNS = [
  'id', 'operation_id', 'occurred_at', 'actor', 'action', 'step', 'from_status', 'to_status',
  'error_class', 'error_code', 'external_id', 'key_generation', 'detail',
] as const;

/**
 * Archives every partition that may be archived. Needs a single connection (detach and check in one
 * transaction) of the owner role: the application role may not detach or drop.
 */
export async function archiveAuditPartitions(client: pg.ClientBase, options: ArchiveOptions): Promise<PartitionVerdict[]> {
  const now = new Date((options.now ?? Date.now)());
  if (!(options.refundWindowDays >= 0)) throw new RangeError(`refundWindowDays must be a number of days ≥ 0, got ${options.refundWindowDays}`);
  if (options.before.getTime() > now.getTime()) throw new RangeError(`before (${options.before.toISOString()}) is in the future: a month still being written is never archived`);
  const verdicts: PartitionVerdict[] = [];
  for (const p of await listAuditPartitions(client)) {
    if (p.isDefault) continue;
    if (p.to!.getTime() > options.before.getTime()) continue;
    verdicts.push(await archiveOne(client, p, options, now));
  }
  return verdicts;
}

async function archiveOne(client: pg.ClientBase, p: AuditPartition, options: ArchiveOptions, now: Date): Promise<PartitionVerdict> {
  const table = client.escapeIdentifier(p.name);
  const refundHorizon = new Date(now.getTime() - options.refundWindowDays * 86_400_000);
  await client.query('BEGIN');
  try {
    await client.query(`SET LOCAL lock_timeout = ${Math.max(1, Math.floor(options.lockTimeoutMs ?? 2_000))}`);
    const needed = await stillNeeded(client, table, refundHorizon);
    if (needed > 0) {
      await client.query('ROLLBACK');
      return { partition: p.name, verdict: 'kept', reason: `${needed} of its operations are open, in review, or settled after ${refundHorizon.toISOString()} (within the refund window)` };
    }
    const rows = Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);
    if (options.dryRun) {
      await client.query('ROLLBACK');
      return { partition: p.name, verdict: 'would_archive', rows };
    }
    await client.query(`ALTER TABLE payment_operation_events DETACH PARTITION ${table}`);
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  }
  const exported = await exportPartition(client, p, table, options.outDir);
  const counted = Number((await client.query<{ n: string }>(`SELECT count(*) AS n FROM ${table}`)).rows[0]!.n);
  if (counted !== exported.rows) throw new Error(`export of ${p.name} wrote ${exported.rows} rows but the table holds ${counted}; nothing dropped, the table stays detached`);
  if (options.drop) await client.query(`DROP TABLE ${table}`);
  return { partition: p.name, verdict: 'archived', file: exported.file, rows: exported.rows, sha256: exported.sha256, dropped: options.drop === true };
}

/** Operations with rows in the partition that the reconciler, the ops tool or a refund may still need. */
async function stillNeeded(client: pg.ClientBase, table: string, refundHorizon: Date): Promise<number> {
  const { rows } = await client.query<{ n: string }>(
    `SELECT count(*) AS n FROM payment_operations p
      WHERE p.id IN (SELECT DISTINCT operation_id FROM ${table})
        AND (p.status IN ('pending', 'unknown') OR p.review_reason IS NOT NULL OR p.settled_at > $1
             OR EXISTS (SELECT 1 FROM payment_operations r
                         WHERE r.parent_operation_id = p.id AND (r.status IN ('pending', 'unknown') OR r.settled_at > $1)))`,
    [refundHorizon],
  );
  return Number(rows[0]!.n);
}

async function exportPartition(client: pg.ClientBase, p: AuditPartition, table: string, outDir: string): Promise<{ file: string; rows: number; sha256: string }> {
  await mkdir(outDir, { recursive: true });
  const file = path.join(outDir, `${p.name}.csv`);
  const out = createWriteStream(file, { flags: 'wx' });
  const hash = createHash('sha256');
  const write = async (line: string) => {
    hash.update(line);
    if (!out.write(line)) await once(out, 'drain');
  };
  let rows = 0;
  let first: string | null = null;
  let last: string | null = null;
  await write(`${AUDIT_EXPORT_COLUMNS.join(',')}\n`);
  await client.query('BEGIN READ ONLY');
  try {
    await client.query(
      `DECLARE audit_export NO SCROLL CURSOR FOR
         SELECT id, operation_id, to_char(occurred_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS occurred_at,
                actor, action, step, from_status, to_status, error_class, error_code, external_id, key_generation,
                -- The claim's lease back under its old keys (migrations/023): one export format for every month.
                ${AUDIT_DETAIL('e')}::text AS detail
           FROM ${table} e ORDER BY id`,
    );
    for (;;) {
      const page = await client.query<Record<(typeof AUDIT_EXPORT_COLUMNS)[number], string | number | null>>('FETCH 5000 FROM audit_export');
      if (page.rows.length === 0) break;
      for (const r of page.rows) {
        await write(`${AUDIT_EXPORT_COLUMNS.map((c) => csvField(r[c])).join(',')}\n`);
        first ??= String(r.occurred_at);
        last = String(r.occurred_at);
        rows += 1;
      }
    }
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    out.destroy();
    throw error;
  }
  out.end();
  await once(out, 'finish');
  const sha256 = hash.digest('hex');
  const manifest = {
    table: 'payment_operation_events',
    partition: p.name,
    from: p.from?.toISOString() ?? null,
    to: p.to?.toISOString() ?? null,
    rows,
    firstOccurredAt: first,
    lastOccurredAt: last,
    columns: AUDIT_EXPORT_COLUMNS,
    format: 'CSV (RFC 4180), a header line, UTF-8; detail is the JSON text of the row',
    sha256,
  };
  await writeFile(path.join(outDir, `${p.name}.manifest.json`), `${JSON.stringify(manifest, null, 2)}\n`, { flag: 'wx' });
  return { file, rows, sha256 };
}

/** RFC 4180: a field with a comma, a quote or a line break is quoted, its quotes doubled; NULL is empty. */
export function csvField(value: string | number | null | undefined): string {
  if (value === null || value === undefined) return '';
  const s = String(value);
  return /[",\r\n]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}
