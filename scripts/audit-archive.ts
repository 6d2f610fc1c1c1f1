// npm run audit:archive -- --before <YYYY-MM> --refund-window-days <n> [--out <dir>] [--drop] [--dry-run]
//
// Detaches and exports the audit trail's months that nothing needs any more (lambdas/payments/audit-partitions.ts;
// docs/operations.md, "Archiving the audit trail"). Connects to DATABASE_URL as the owner role (the one
// `npm run migrate` uses): the application role may not detach or drop. Prints one line per partition;
// exit 0 when every partition it looked at was archived or kept for a stated reason, 1 otherwise.
import { parseArgs } from 'node:util';
import pg from 'pg';
import { archiveAuditPartitions, type PartitionVerdict } from '../lambdas/payments/audit-partitions.ts';
import { pathToFileURL } from 'node:url';
import { redact } from '../lambdas/runtime/redact.ts';

export const USAGE = `Usage: npm run audit:archive -- --before <YYYY-MM> --refund-window-days <n> [--out <dir>] [--drop] [--dry-run]
  --before <YYYY-MM>          archive months that ended before this month began (e.g. 2026-01: 2025-12 and older)
  --refund-window-days <n>    keep a month while any of its operations settled less than n days ago
                              (the longest time after a charge your business still refunds it)
  --out <dir>                 where the CSV files and manifests go (default .local/audit-archive)
  --drop                      drop each detached table once its file is written and counted again
  --dry-run                   say what would be archived; change nothing
DATABASE_URL: the owner role's URL (as for npm run migrate).`;

export function parseArchiveArgs(argv: readonly string[]): { before: Date; refundWindowDays: number; outDir: string; drop: boolean; dryRun: boolean } {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      before: { type: 'string' },
      'refund-window-days': { type: 'string' },
      out: { type: 'string', default: '.local/audit-archive' },
      drop: { type: 'boolean', default: false },
      'dry-run': { type: 'boolean', default: false },
    },
  });
  const month = /^(\d{4})-(0[1-9]|1[0-2])$/.exec(values.before ?? '');
  if (!month) throw new Error(`--before must be a month as YYYY-MM, got ${values.before ?? '(none)'}\n${USAGE}`);
  const days = Number(values['refund-window-days']);
  if (values['refund-window-days'] === undefined || !Number.isInteger(days) || days < 0) {
    throw new Error(`--refund-window-days must be a whole number of days ≥ 0, got ${values['refund-window-days'] ?? '(none)'}\n${USAGE}`);
  }
  return { before: new Date(Date.UTC(Number(month[1]), Number(month[2]) - 1, 1)), refundWindowDays: days, outDir: values.out, drop: values.drop, dryRun: values['dry-run'] };
}

export function describeVerdict(v: PartitionVerdict): string {
  switch (v.verdict) {
    case 'archived':
      return `${v.partition}: archived ${v.rows} rows to ${v.file} (sha256 ${v.sha256})${v.dropped ? ', table dropped' : ', table kept detached (drop it with --drop once the file is safe)'}`;
    case 'would_archive':
      return `${v.partition}: would archive ${v.rows} rows (dry run)`;
    case 'kept':
      return `${v.partition}: kept: ${v.reason}`;
  }
}

async function main(): Promise<number> {
  let args: ReturnType<typeof parseArchiveArgs>;
  try {
    args = parseArchiveArgs(process.argv.slice(2));
  } catch (error) {
    console.error(`audit:archive: ${error instanceof Error ? error.message : String(error)}`);
    return 1;
  }
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('audit:archive: DATABASE_URL is not set (the owner role, as for npm run migrate)');
    return 1;
  }
  const client = new pg.Client({ connectionString: url, application_name: 'audit-archive' });
  try {
    await client.connect();
    const verdicts = await archiveAuditPartitions(client, args);
    if (verdicts.length === 0) console.log(`audit:archive: no month of the trail ended before ${args.before.toISOString().slice(0, 7)}`);
    for (const v of verdicts) console.log(`audit:archive: ${describeVerdict(v)}`);
    return 0;
  } catch (error) {
    console.error(`audit:archive: failed: ${redact(error instanceof Error ? `${error.name}: ${error.message}` : String(error))}`);
    return 1;
  } finally {
    await client.end().catch(() => {});
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) process.exitCode = await main();
