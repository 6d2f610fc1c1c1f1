// Ctrl-C (and a process manager's SIGTERM) in the middle of `npm start` must leave nothing behind:
// no PostgreSQL server still running on the data folder, no port still bound — and still print the
// ledger of what happened so far.
import { spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { temporaryDataDir } from '../../local/pipeline.ts';

const ROOT = path.resolve(import.meta.dirname, '..', '..');
const dataDirs: string[] = [];

afterEach(async () => {
  // The data folder and the logs next to it: the whole temporary folder.
  for (const dir of dataDirs.splice(0)) await rm(path.dirname(dir), { recursive: true, force: true });
});

interface Started {
  readonly child: ChildProcess;
  readonly output: () => string;
  readonly exited: Promise<number | null>;
}

function start(command: string, args: readonly string[]): Started {
  let output = '';
  // detached: its own process group, so that the test can signal the whole group as a terminal does.
  const child = spawn(command, args, { cwd: ROOT, detached: true, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1' } });
  child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
  // npm re-raises the signal on itself once its child is done: "killed by SIGINT" is status 130 to a shell.
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : null))));
  return { child, output: () => output, exited };
}

async function waitFor(what: () => boolean, timeoutMs: number, describeState: () => string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!what()) {
    if (Date.now() > deadline) throw new Error(`timed out; output so far:\n${describeState()}`);
    await sleep(100);
  }
}

function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    server.listen(port, () => server.close(() => resolve(true)));
  });
}

/** PIDs of processes whose command line names the data folder (a postmaster and its children). */
function processesOn(dataDir: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const cmdline = readFileSync(`/proc/${entry}/cmdline`, 'utf8').replaceAll('\0', ' ');
      if (cmdline.includes(dataDir) && !cmdline.includes('vitest')) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

/** The ports `npm start` printed in its header. */
function portsIn(output: string): number[] {
  const patterns = [/PostgreSQL 18\s+127\.0\.0\.1:(\d+)/, /SQS \(fauxqs\)\s+http:\/\/127\.0\.0\.1:(\d+)/, /fake Stripe on http:\/\/127\.0\.0\.1:(\d+)/, /EventBridge\s+http:\/\/127\.0\.0\.1:(\d+)/];
  return patterns.map((p) => Number(output.match(p)?.[1]));
}

async function interruptMidRun(command: string, args: readonly string[], signal: NodeJS.Signals, wholeGroup: boolean) {
  const dataDir = temporaryDataDir('shutdown');
  dataDirs.push(dataDir);
  const run = start(command, [...args, '--orders', '2000', '--faults', 'flaky', '--data-dir', dataDir, '--log-level', 'SILENT']);
  try {
    // Mid-run: the header is out and charges are being made.
    await waitFor(() => /succeeded [1-9]/.test(run.output()), 60_000, run.output);
    const ports = portsIn(run.output());
    expect(ports.every((p) => Number.isInteger(p) && p > 0), `ports in:\n${run.output()}`).toBe(true);
    expect(processesOn(dataDir).length).toBeGreaterThan(0);

    if (wholeGroup) process.kill(-run.child.pid!, signal);
    else run.child.kill(signal);
    const code = await Promise.race([run.exited, sleep(45_000, 'still running')]);
    expect(code, run.output()).toBe(130);

    expect(run.output()).toMatch(/Ledger of run \S+ — interrupted/);
    expect(run.output()).toMatch(/double charges\s+0/);
    // The receipt notifiers ran too, and their figures are those so far: no wait for their retries.
    expect(run.output()).toMatch(/outcome consumers: interrupted, figures so far/);
    expect(run.output()).toMatch(/Outcome consumers: the receipt notifier/);
    for (const port of ports) expect(await portIsFree(port), `port ${port} still bound`).toBe(true);
    expect(processesOn(dataDir)).toEqual([]);
  } finally {
    if (run.child.exitCode === null && run.child.signalCode === null) {
      try {
        process.kill(-run.child.pid!, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

describe('npm start shuts down cleanly', () => {
  it('on Ctrl-C (SIGINT to the whole process group, as a terminal sends it) through npm start', async () => {
    await interruptMidRun('npm', ['start', '--'], 'SIGINT', true);
  }, 120_000);

  it('on SIGTERM to the runtime process alone (a process manager)', async () => {
    await interruptMidRun(process.execPath, ['--import', 'tsx', 'local/start.ts'], 'SIGTERM', false);
  }, 120_000);
});
