// bench:peers' figures as SVG charts (`--svg-dir`), beside the Markdown tables of renderReport: the
// same numbers from the same report, drawn (bench/svg-chart.ts). docs/compared.md shows them.
import { renderBarChart } from '../svg-chart.ts';
import type { BenchReport } from './bench.ts';
import type { RunResult } from './run.ts';

export interface ChartFile {
  readonly name: string;
  readonly svg: string;
}

const byContestant = (runs: readonly RunResult[]): RunResult[][] => {
  const m = new Map<string, RunResult[]>();
  for (const r of runs) m.set(r.contestant, [...(m.get(r.contestant) ?? []), r]);
  return [...m.values()];
};

export function renderCharts(report: BenchReport): ChartFile[] {
  const o = report.options;
  const command = `npm run bench:peers (${o.orders} orders, seed ${o.seed}, ${o.pollers} pollers × batches of 10, ${report.machine.cpus} CPUs)`;
  const files: ChartFile[] = [];
  if (report.faultRuns.length > 0) {
    const kinds = [
      ['double', 'double charges'],
      ['lost', 'lost'],
      ['unrecorded', 'charged, unrecorded'],
      ['wrongly_failed', 'wrongly failed'],
      ['open', 'left open'],
      ['review', 'to review'],
    ] as const;
    files.push({
      name: 'peers-faults.svg',
      svg: renderBarChart({
        title: 'Under faults: what went wrong, per contestant (orders)',
        description: `One seeded fault schedule for all, each order judged against the fake Stripe's record; ${command}.`,
        unit: '',
        series: kinds.map(([, name]) => ({ name })),
        rows: report.faultRuns.map((r) => ({ label: r.title, values: kinds.map(([k]) => r.judgement.counts[k]) })),
      }),
    });
  }
  if (report.cleanRuns.length > 0) {
    const groups = byContestant(report.cleanRuns);
    files.push({
      name: 'peers-throughput.svg',
      svg: renderBarChart({
        title: 'Without faults: charges settled per second',
        description: `Each order sent once, the fake Stripe answering after the given latency; ${command}.`,
        unit: 'charges/s',
        series: o.latencies.map((l) => ({ name: `Stripe at ${l} ms` })),
        rows: [
          ...groups.map((runs) => ({ label: runs[0]!.title, values: o.latencies.map((l) => runs.find((r) => r.latencyMs === l)?.chargesPerSecond ?? null) })),
          { label: 'the limit: 2 statements, nothing else', values: o.latencies.map((l) => report.limits.find((x) => x.latencyMs === l)?.chargesPerSecond ?? null) },
        ],
      }),
    });
    const withWal = groups.filter((runs) => runs.some((r) => r.perOrder.walBytes !== null));
    const base = (runs: RunResult[]) => runs.find((r) => r.latencyMs === o.latencies[0]) ?? runs[0]!;
    files.push({
      name: 'peers-wal.svg',
      svg: renderBarChart({
        title: 'WAL written per charge (PostgreSQL contestants)',
        description: `Bytes of write-ahead log per charge in the clean run at ${o.latencies[0]} ms; ${command}.`,
        unit: 'B',
        series: [{ name: 'WAL bytes per charge' }],
        rows: [
          ...withWal.map((runs) => ({ label: runs[0]!.title, values: [Math.round(base(runs).perOrder.walBytes!)] })),
          { label: 'the limit: 2 statements, nothing else', values: [report.limits[0] ? Math.round(report.limits[0].walBytesPerCharge) : null] },
        ],
      }),
    });
  }
  if (report.singleOrderRuns.length > 0) {
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
    files.push({
      name: 'peers-single-order.svg',
      svg: renderBarChart({
        title: 'One order per invocation: charges settled per second (median of interleaved rounds)',
        description: `Batch size 1 at ${report.singleOrderRuns[0]!.latencyMs} ms; ${command}.`,
        unit: 'charges/s',
        series: [{ name: 'charges/s' }],
        rows: [
          ...byContestant(report.singleOrderRuns).map((runs) => ({ label: runs[0]!.title, values: [median(runs.map((r) => r.chargesPerSecond))] })),
          { label: 'the limit: 2 statements, nothing else', values: [median(report.singleOrderLimits.map((l) => l.chargesPerSecond))] },
        ],
      }),
    });
  }
  return files;
}
