// npm run bench:cold — cold start per Lambda function, in figures (printed, never asserted):
// every pipeline handler bundled as the deploy bundles it (scripts/cold-bundles.ts), beside an empty
// module and a "floor" bundle of just stripe + pg + @aws-sdk/client-eventbridge. For each: the bundle's
// size, and the wall time of a fresh `node <bundle>` process (spawn to exit: Node's start-up, loading,
// compiling and evaluating the module), over N processes per bundle run round-robin across the
// bundles (one of each, again and again, the order rotated every round), so that a busy moment of
// the machine falls on every bundle alike. Printed: min / median / max, the median minus the empty
// module's (what the bundle itself costs), and that as a ratio to the floor's; the same for the CPU
// time each process used (less disturbed than wall time by others' load on a shared machine).
// Each process runs `node --input-type=module -e "await import(<bundle>)"` (the empty module too).
// Options: --processes N (10), --json, --why (the top packages of each bundle, from esbuild's
// metafile), --source-maps (bundle external source maps and run with --enable-source-maps, as the
// functions run in Lambda: NODE_OPTIONS in lib/pipeline-function.ts), --keep (print and keep the folder),
// --baseline DIR (also the handlers of another checkout, rows `<handler>@baseline`, in the same rounds:
//   git archive <commit> | tar -x -C DIR && ln -s "$PWD/node_modules" DIR/node_modules).
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { buildColdBundles, bytesByPackage, type ColdBundle } from './cold-bundles.ts';

const { values: args } = parseArgs({
  options: {
    processes: { type: 'string', default: '10' },
    json: { type: 'boolean', default: false },
    why: { type: 'boolean', default: false },
    'source-maps': { type: 'boolean', default: false },
    keep: { type: 'boolean', default: false },
    baseline: { type: 'string' },
  },
});
const PROCESSES = Number(args.processes);
if (!Number.isInteger(PROCESSES) || PROCESSES < 1) throw new Error(`--processes must be a positive integer, got ${args.processes}`);
const SOURCE_MAPS = args['source-maps'];

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};
const round = (n: number, d = 1) => Math.round(n * 10 ** d) / 10 ** d;
const kib = (bytes: number) => Math.round(bytes / 1024).toLocaleString('en-US');

/**
 * One fresh process importing the bundle: its wall time in ms (spawn to exit, seen from here) and the
 * CPU time it used (user + system, reported by the process itself once the import is done) — on a
 * shared machine the wall time also holds the wait for a free core, the CPU time does not.
 */
function runOnce(bundle: ColdBundle): { wallMs: number; cpuMs: number } {
  const script = `await import(${JSON.stringify(pathToFileURL(bundle.file).href)}); const u = process.cpuUsage(); process.stdout.write(String((u.user + u.system) / 1000));`;
  const started = process.hrtime.bigint();
  const run = spawnSync(process.execPath, [...(SOURCE_MAPS ? ['--enable-source-maps'] : []), '--input-type=module', '-e', script], {
    cwd: os.tmpdir(),
    // No AWS or database settings: the handlers read their configuration on the first invocation.
    env: { PATH: process.env.PATH ?? '', POWERTOOLS_METRICS_DISABLED: 'true', AWS_REGION: 'eu-west-1' },
    stdio: ['ignore', 'pipe', 'pipe'],
    timeout: 30_000,
  });
  const wallMs = Number(process.hrtime.bigint() - started) / 1e6;
  if (run.status !== 0) throw new Error(`node ${bundle.file} exited ${run.status ?? run.signal}: ${run.stderr.toString().slice(0, 2000)}`);
  return { wallMs, cpuMs: Number(run.stdout.toString()) };
}

const outDir = mkdtempSync(path.join(os.tmpdir(), 'bench-cold-'));
try {
  const bundles = await buildColdBundles(outDir, { sourceMaps: SOURCE_MAPS, ...(args.baseline ? { baseline: args.baseline } : {}) });
  const times = new Map<string, number[]>(bundles.map((b) => [b.name, []]));
  const cpu = new Map<string, number[]>(bundles.map((b) => [b.name, []]));
  runOnce(bundles[0]!); // warm the file system cache for node itself, not counted
  for (let round = 0; round < PROCESSES; round++) {
    for (let i = 0; i < bundles.length; i++) {
      const bundle = bundles[(round + i) % bundles.length]!;
      const { wallMs, cpuMs } = runOnce(bundle);
      times.get(bundle.name)!.push(wallMs);
      cpu.get(bundle.name)!.push(cpuMs);
    }
  }
  const medians = new Map(bundles.map((b) => [b.name, median(times.get(b.name)!)]));
  const empty = medians.get('empty')!;
  const floorCost = medians.get('floor')! - empty;
  const cpuMedians = new Map(bundles.map((b) => [b.name, median(cpu.get(b.name)!)]));
  const cpuEmpty = cpuMedians.get('empty')!;
  const cpuFloorCost = cpuMedians.get('floor')! - cpuEmpty;
  const rows = bundles.map((b) => {
    const t = times.get(b.name)!;
    const cost = medians.get(b.name)! - empty;
    return {
      name: b.name,
      kind: b.kind,
      bytes: b.bytes,
      kib: round(b.bytes / 1024),
      minMs: round(Math.min(...t)),
      medianMs: round(medians.get(b.name)!),
      maxMs: round(Math.max(...t)),
      overEmptyMs: round(cost),
      toFloor: b.name === 'empty' ? null : round(cost / floorCost, 2),
      cpuMedianMs: round(cpuMedians.get(b.name)!),
      cpuOverEmptyMs: round(cpuMedians.get(b.name)! - cpuEmpty),
      cpuToFloor: b.name === 'empty' ? null : round((cpuMedians.get(b.name)! - cpuEmpty) / cpuFloorCost, 2),
      ...(args.why ? { top: bytesByPackage(b).slice(0, 10) } : {}),
    };
  });
  const result = {
    date: new Date().toISOString(),
    node: process.version,
    processesPerBundle: PROCESSES,
    sourceMaps: SOURCE_MAPS,
    rows,
  };
  if (args.json) {
    process.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
  } else {
    const header = ['bundle', 'KiB', 'bytes', 'min ms', 'median ms', 'max ms', 'median − empty', '× floor', 'CPU ms', 'CPU − empty', 'CPU × floor'];
    const table = rows.map((r) => [
      r.name,
      kib(r.bytes),
      r.bytes.toLocaleString('en-US'),
      r.minMs.toFixed(1),
      r.medianMs.toFixed(1),
      r.maxMs.toFixed(1),
      r.name === 'empty' ? '—' : r.overEmptyMs.toFixed(1),
      r.toFloor === null ? '—' : r.toFloor.toFixed(2),
      r.cpuMedianMs.toFixed(1),
      r.name === 'empty' ? '—' : r.cpuOverEmptyMs.toFixed(1),
      r.cpuToFloor === null ? '—' : r.cpuToFloor.toFixed(2),
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...table.map((row) => row[i]!.length)));
    const line = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join('  ');
    console.log(`bench:cold — ${PROCESSES} fresh node processes per bundle, round-robin; ${process.version}${SOURCE_MAPS ? ', --enable-source-maps' : ''}; ${result.date}`);
    console.log(line(header));
    for (const row of table) console.log(line(row));
    console.log('Wall: spawn to exit, min/median/max. CPU: the process\'s user + system time after the import, median. A shared machine: compare within one run, not across runs.');
    if (args.why) {
      for (const b of bundles.filter((x) => x.name !== 'empty')) {
        console.log(`\n${b.name} (${kib(b.bytes)} KiB), top contributors:`);
        for (const { name, bytes } of bytesByPackage(b).slice(0, 10)) console.log(`  ${kib(bytes).padStart(6)} KiB  ${name}`);
      }
    }
  }
  if (args.keep) console.error(`bundles kept in ${outDir}`);
} finally {
  if (!args.keep) rmSync(outDir, { recursive: true, force: true });
}
