// The benchmarks' SVG charts: every figure is in the picture as text and in its description, bars
// are to scale, text is escaped, and a chart of impossible figures is refused.
import { describe, expect, it } from 'vitest';
import { renderBarChart } from '../../bench/svg-chart.ts';

const chart = {
  title: 'Charges per second <and> "more"',
  description: 'From a test & nothing else.',
  unit: 'charges/s',
  series: [{ name: 'at 0 ms' }, { name: 'at 50 ms' }],
  rows: [
    { label: 'this product', values: [600, 730] },
    { label: 'a peer', values: [300, null] },
  ],
};

describe('renderBarChart', () => {
  const svg = renderBarChart(chart);

  it('is an image with a title and a description that carries every figure', () => {
    expect(svg).toMatch(/^<svg xmlns="http:\/\/www\.w3\.org\/2000\/svg"[^>]* role="img" aria-labelledby="t d"/);
    expect(svg).toContain('<title id="t">Charges per second &lt;and&gt; &quot;more&quot;</title>');
    const desc = /<desc id="d">([^<]*)<\/desc>/.exec(svg)![1]!;
    expect(desc).toContain('From a test &amp; nothing else.');
    expect(desc).toContain('this product: at 0 ms 600 charges/s, at 50 ms 730 charges/s');
    expect(desc).toContain('a peer: at 0 ms 300 charges/s, at 50 ms no figure');
    expect(svg.trim().endsWith('</svg>')).toBe(true);
  });

  it('draws each bar to scale, labels it with its value, and a missing figure as a dash', () => {
    const widths = [...svg.matchAll(/<rect x="300" y="[\d.]+" width="([\d.]+)"/g)].map((m) => Number(m[1]));
    expect(widths).toHaveLength(3);
    const [a, b, c] = widths as [number, number, number];
    expect(b).toBeGreaterThan(a);
    expect(a / b).toBeCloseTo(600 / 730, 2);
    expect(c / b).toBeCloseTo(300 / 730, 2);
    for (const label of ['600 charges/s', '730 charges/s', '300 charges/s', '>–<']) expect(svg).toContain(label);
  });

  it('refuses figures it cannot draw', () => {
    expect(() => renderBarChart({ ...chart, rows: [{ label: 'x', values: [1] }] })).toThrow(/1 values for 2 series/);
    expect(() => renderBarChart({ ...chart, rows: [{ label: 'x', values: [-1, 2] }] })).toThrow(/not a non-negative number/);
    expect(() => renderBarChart({ ...chart, rows: [{ label: 'x', values: [Number.NaN, 2] }] })).toThrow(/not a non-negative number/);
    expect(() => renderBarChart({ ...chart, series: [] })).toThrow(/at least one series/);
  });
});

describe("bench:peers' charts", () => {
  const run = (contestant: string, latencyMs: number, chargesPerSecond: number, walBytes: number | null, counts: Record<string, number> = {}) => ({
    contestant,
    title: `title of ${contestant}`,
    latencyMs,
    chargesPerSecond,
    perOrder: { walBytes },
    judgement: { counts: { double: 0, lost: 0, unrecorded: 0, wrongly_failed: 0, open: 0, review: 0, ok: 10, ...counts } },
  });
  const report = {
    machine: { cpus: 2, node: 'v24', postgres: '18' },
    options: { orders: 10, seed: 1, latencies: [0, 50], pollers: 8, contestants: ['ours', 'naive'] },
    statementStats: true,
    faultRuns: [run('ours', 0, 0, null, { review: 3 }), run('naive', 0, 0, null, { double: 2 })],
    cleanRuns: [run('ours', 0, 600, 3000), run('ours', 50, 730, 3100), run('naive', 0, 870, 300), run('naive', 50, 140, 300)],
    limits: [{ latencyMs: 0, batchSize: 10, chargesPerSecond: 2100, walBytesPerCharge: 298, roundTripsPerCharge: 0.2 }, { latencyMs: 50, batchSize: 10, chargesPerSecond: 1200, walBytesPerCharge: 300, roundTripsPerCharge: 0.2 }],
    singleOrderRuns: [],
    singleOrderLimits: [],
  };

  it('draws the report it is given: faults, throughput at each latency with the limit, WAL', async () => {
    const { renderCharts } = await import('../../bench/peers/charts.ts');
    const charts = new Map(renderCharts(report as never).map((c) => [c.name, c.svg]));
    expect([...charts.keys()]).toEqual(['peers-faults.svg', 'peers-throughput.svg', 'peers-wal.svg']);
    expect(charts.get('peers-faults.svg')).toContain('title of naive: double charges 2, lost 0');
    expect(charts.get('peers-faults.svg')).toContain('title of ours: double charges 0, lost 0, charged, unrecorded 0, wrongly failed 0, left open 0, to review 3');
    expect(charts.get('peers-throughput.svg')).toContain('title of ours: Stripe at 0 ms 600 charges/s, Stripe at 50 ms 730 charges/s');
    expect(charts.get('peers-throughput.svg')).toContain('the limit: 2 statements, nothing else: Stripe at 0 ms 2,100 charges/s, Stripe at 50 ms 1,200 charges/s');
    expect(charts.get('peers-wal.svg')).toContain('title of naive: WAL bytes per charge 300 B');
  });
});
