// A reporter for measuring the suite's wall time, file by file (used next to the default one):
//   npx vitest run --reporter=default --reporter=./test/support/timing-reporter.ts
// For each test file: the wall time from the moment a worker took it to its end (what it costs the
// run: fork, import and collect — e.g. a CDK synth at module level — set-up, tests, teardown), the
// part of it that was import/collect, the tests' own duration, the worker, and the start offset.
// Prints the slowest files and the total; TIMING_OUT=<file> also writes every row as JSON.
// It measures only: nothing here changes what runs or how.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import type { Reporter, TestModule } from 'vitest/node';

interface Row {
  readonly file: string;
  readonly startS: number;
  readonly wallS: number;
  readonly collectS: number;
  readonly testsS: number;
  readonly worker: number;
  readonly tests: number;
  readonly state: string;
}

export default class TimingReporter implements Reporter {
  private readonly runStart = Date.now();
  private readonly started = new Map<string, number>();
  private readonly rows: Row[] = [];

  // Queued: a worker took the file (before its import); a file queued twice keeps the first time.
  onTestModuleQueued(module: TestModule): void {
    if (!this.started.has(module.moduleId)) this.started.set(module.moduleId, Date.now());
  }

  onTestModuleStart(module: TestModule): void {
    if (!this.started.has(module.moduleId)) this.started.set(module.moduleId, Date.now());
  }

  onTestModuleEnd(module: TestModule): void {
    const end = Date.now();
    const start = this.started.get(module.moduleId) ?? end;
    const d = module.diagnostic();
    this.rows.push({
      file: path.relative(process.cwd(), module.moduleId),
      startS: (start - this.runStart) / 1000,
      wallS: (end - start) / 1000,
      collectS: d.collectDuration / 1000,
      testsS: d.duration / 1000,
      worker: d.concurrencyId ?? 0,
      tests: [...module.children.allTests()].length,
      state: module.state(),
    });
  }

  onTestRunEnd(): void {
    const total = (Date.now() - this.runStart) / 1000;
    const rows = [...this.rows].sort((a, b) => b.wallS - a.wallS);
    const lines = [`\nslowest test files (of ${rows.length}; wall from a worker taking the file to its end):`];
    lines.push(`${'wall s'.padStart(7)} ${'collect'.padStart(7)} ${'tests'.padStart(7)} ${'start'.padStart(6)}  w  file`);
    for (const r of rows.slice(0, Number(process.env.TIMING_TOP ?? 20))) {
      lines.push(`${r.wallS.toFixed(1).padStart(7)} ${r.collectS.toFixed(1).padStart(7)} ${r.testsS.toFixed(1).padStart(7)} ${r.startS.toFixed(0).padStart(6)} ${String(r.worker).padStart(2)}  ${r.file}${r.state === 'passed' ? '' : ` (${r.state})`}`);
    }
    const sum = rows.reduce((s, r) => s + r.wallS, 0);
    lines.push(`files' wall summed ${sum.toFixed(0)} s; run ${total.toFixed(0)} s from the reporter's start`);
    process.stdout.write(`${lines.join('\n')}\n`);
    if (process.env.TIMING_OUT) writeFileSync(process.env.TIMING_OUT, JSON.stringify({ totalS: total, rows }, null, 2));
  }
}
