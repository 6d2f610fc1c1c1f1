// npm run bench:peers [-- --orders 2000 --seed 42 --latency 0,50 --contestants ours,powertools,seed,naive,dbos,durable
//                        --single-order-rounds 3 --svg-dir docs/images --json --clean-only]
// Figures, not assertions. Progress on stderr, the tables (or JSON) on stdout.
// Post-mortems: BENCH_WAL_BY_TYPE=1 splits the WAL table by record type (INSERT, UPDATE, LOCK …);
// BENCH_STATEMENTS=1 prints the statements by server time and the stored row sizes on stderr;
// BENCH_WAL_MIN_SHARE=0 lists every relation (default: those under 1 % of the total in one row).
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { renderCharts } from './charts.ts';
import { CONTESTANTS, renderReport, runBench } from './bench.ts';
import type { Contestant } from './contestant.ts';

const { values } = parseArgs({
  options: {
    orders: { type: 'string', default: '2000' },
    seed: { type: 'string', default: '42' },
    latency: { type: 'string', default: '0,50' },
    contestants: { type: 'string', default: CONTESTANTS.map((c) => c.id).join(',') },
    pollers: { type: 'string', default: '8' },
    'single-order-rounds': { type: 'string', default: '3' },
    json: { type: 'boolean', default: false },
    'clean-only': { type: 'boolean', default: false },
    // Also write the figures as SVG charts (peers-*.svg) into this folder.
    'svg-dir': { type: 'string' },
  },
});
const orders = Number(values.orders);
const seed = Number(values.seed);
const pollers = Number(values.pollers);
const singleOrderRounds = Number(values['single-order-rounds']);
const latencies = values.latency.split(',').map(Number);
const ids = values.contestants.split(',') as Contestant['id'][];
const known = new Set(CONTESTANTS.map((c) => c.id));
const bad = ids.filter((id) => !known.has(id));
if (!Number.isInteger(orders) || orders < 1 || orders > 100_000) throw new Error(`--orders must be an integer in 1..100000, got ${values.orders}`);
if (!Number.isInteger(seed)) throw new Error(`--seed must be an integer, got ${values.seed}`);
if (!Number.isInteger(pollers) || pollers < 1 || pollers > 64) throw new Error(`--pollers must be an integer in 1..64, got ${values.pollers}`);
if (!Number.isInteger(singleOrderRounds) || singleOrderRounds < 0 || singleOrderRounds > 10) throw new Error(`--single-order-rounds must be an integer in 0..10, got ${values['single-order-rounds']}`);
if (latencies.some((l) => !Number.isFinite(l) || l < 0)) throw new Error(`--latency must be non-negative numbers, got ${values.latency}`);
if (bad.length > 0) throw new Error(`unknown contestant(s): ${bad.join(', ')} (known: ${[...known].join(', ')})`);

const started = Date.now();
const report = await runBench({ orders, seed, latencies, contestants: ids, pollers, singleOrderRounds, cleanRunOnly: values['clean-only'], log: (line) => process.stderr.write(`[${((Date.now() - started) / 1000).toFixed(0)} s] ${line}\n`) });
// JSON: the verdict of every order, as an object (a Map does not serialise).
const replacer = (_key: string, value: unknown) => (value instanceof Map ? Object.fromEntries(value) : value);
console.log(values.json ? JSON.stringify(report, replacer, 2) : renderReport(report));
if (values['svg-dir']) {
  await mkdir(values['svg-dir'], { recursive: true });
  for (const chart of renderCharts(report)) {
    await writeFile(path.join(values['svg-dir'], chart.name), chart.svg);
    process.stderr.write(`wrote ${path.join(values['svg-dir'], chart.name)}\n`);
  }
}
process.stderr.write(`bench:peers done in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
