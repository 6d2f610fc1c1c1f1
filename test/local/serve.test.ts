// `npm start -- --serve`: the commands it prints work in a new shell (this run's database, the fake's
// key, the time-lapse's review settings), and Ctrl-C — the documented way to end it — exits 0 once
// everything had settled. npm runs scripts through `sh -c`, and dash, signalled by the terminal with
// the rest of the foreground group, died of the SIGINT after its child exited 0: npm then re-raised
// it (130). The start script execs tsx, so no shell stands between npm and the run.
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { serveCommands } from '../../local/cli.ts';
import { DEMO_TIME_LAPSE, LOCAL_FAKE_STRIPE_KEY, temporaryDataDir, timeLapseEnvironment } from '../../local/pipeline.ts';
import { opsConfig, reviewPolicy } from '../../lambdas/ops/environment.ts';
import { parseInvocation } from '../../lambdas/ops/parse.ts';

const ROOT = path.resolve(import.meta.dirname, '..', '..');

describe('the commands --serve prints', () => {
  const env = {
    DATABASE_URL: 'postgres://postgres:postgres@127.0.0.1:5555/run_x',
    STRIPE_API_BASE: 'http://127.0.0.1:4444',
    STRIPE_SECRET_KEY: 'sk_test_…time',
    ...timeLapseEnvironment(DEMO_TIME_LAPSE),
  };
  const settings = Object.keys(timeLapseEnvironment(DEMO_TIME_LAPSE));
  const parse = (text: string) => Object.fromEntries(text.trim().split('\n').map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]));

  it('give the ops tool the fake key itself (not an empty $STRIPE_SECRET_KEY) and the time-lapse, so that its configuration loads and judges as the handlers do', () => {
    const { ops, opsEnv, produce, note } = serveCommands(env, { sqsEndpoint: 'http://127.0.0.1:9324', stripeKey: LOCAL_FAKE_STRIPE_KEY, settings, opsEnvFile: '.local/ops.env' });
    expect(ops).toBe('env $(cat .local/ops.env) npm run ops --');
    const written = parse(opsEnv);
    expect(written.STRIPE_SECRET_KEY).toBe(LOCAL_FAKE_STRIPE_KEY);
    for (const name of ['DATABASE_URL', 'STRIPE_API_BASE', ...settings]) expect(written[name], name).toBe(env[name as keyof typeof env]);
    // What the ops tool does with it: its configuration loads (a lease shorter than production's
    // worst-case call, or proofs that do not fit the key window, are refused) and its review policy
    // is the time-lapse's, not production's 10 minutes.
    const config = opsConfig(written);
    expect(reviewPolicy(config, written).searchSettleMs).toBe(DEMO_TIME_LAPSE.earlySearchAfterMs);
    expect(note).toBeNull();
    expect(produce).toMatch(/^SQS_ENDPOINT=http:\/\/127\.0\.0\.1:9324 npm run produce -- --order /);
    expect(parseInvocation(['review', 'list'], 'alice').command.name).toBe('review list');
  });

  it('never write a real key: a note to export it instead', () => {
    const { opsEnv, note } = serveCommands(env, { sqsEndpoint: 'http://127.0.0.1:9324', stripeKey: null, settings, opsEnvFile: '.local/ops.env' });
    expect(opsEnv).not.toContain('STRIPE_SECRET_KEY');
    expect(note).toMatch(/export STRIPE_SECRET_KEY=/);
  });
});

describe('Ctrl-C ends a settled --serve run', () => {
  it('with exit 0 through npm start (SIGINT to the whole process group, as a terminal sends it)', async () => {
    expect((JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts.start).toMatch(/^exec node --import tsx /);
    const dataDir = temporaryDataDir('serve');
    let output = '';
    const child = spawn('npm', ['start', '--', '--serve', '--orders', '0', '--no-consumers', '--data-dir', dataDir, '--log-level', 'SILENT'], {
      cwd: ROOT,
      detached: true,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, NO_COLOR: '1' },
    });
    child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 + (os.constants.signals[signal] ?? 0) : null))));
    try {
      for (let i = 0; i < 600 && !/settled 0\/0|Ctrl-C prints the ledger/.test(output); i++) await sleep(100);
      expect(output).toMatch(/Ctrl-C prints the ledger/);
      // The live page, in the start-up block: on 127.0.0.1, read-only by default, this run's figures.
      const page = /live page\s+(http:\/\/127\.0\.0\.1:\d+\/) \(read-only/.exec(output);
      expect(page, output).not.toBeNull();
      const state = (await (await fetch(new URL('/api/state', page![1]))).json()) as { mode: string; actionsAllowed: boolean; flow: { charges: { total: number } } };
      expect(state).toMatchObject({ mode: 'local', actionsAllowed: false, flow: { charges: { total: 0 } } });
      expect((await fetch(page![1]!)).headers.get('content-type')).toMatch(/^text\/html/);
      process.kill(-child.pid!, 'SIGINT');
      const code = await Promise.race([exited, sleep(45_000, 'still running')]);
      expect(code, output).toBe(0);
      expect(output).toMatch(/Ledger of run \S+ — every accepted order settled/);
    } finally {
      if (child.exitCode === null && child.signalCode === null) {
        try {
          process.kill(-child.pid!, 'SIGKILL');
        } catch {
          // already gone
        }
      }
      await rm(path.dirname(dataDir), { recursive: true, force: true });
    }
  }, 90_000);
});
