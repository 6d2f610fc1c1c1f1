// `npm run ops` as an operator runs it: a child process, exit codes and messages on the real streams.
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { intoReviewNothingCharged } from './support.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');
const TSX = path.join(ROOT, 'node_modules', '.bin', 'tsx');
const NEVER_IDLE = path.join(ROOT, 'test', 'support', 'pool-never-idles.mjs');

let db: TestDatabase;
let stripe: StripeHarness;

beforeAll(async () => {
  db = await createTestDatabase('ops_cli');
  stripe = await startStripe();
});
afterAll(async () => {
  await stripe.close();
  await db.drop();
});

function ops(args: readonly string[], env: NodeJS.ProcessEnv = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(
      TSX,
      ['lambdas/ops/cli.ts', ...args],
      // Only what an operator's shell would have: no DATABASE_URL unless the test gives one.
      { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, USER: 'alice', ...env }, timeout: 20_000 },
      (error, stdout, stderr) => {
        const code = error ? (typeof error.code === 'number' ? error.code : -1) : 0;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

describe('the ops CLI as a process', () => {
  it('no command → usage hint, exit 2', async () => {
    const run = await ops([]);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/error: no command given/);
    expect(run.stderr).toMatch(/--help/);
  });

  it('--lambda without a region → says how to give one, exit 2', async () => {
    // No region anywhere: no AWS_REGION, no profile file (HOME and the config file point at nothing).
    const home = os.tmpdir();
    const run = await ops(['stats', '--lambda', 'charges-ops'], { HOME: home, AWS_CONFIG_FILE: path.join(home, `none-${randomUUID()}`), AWS_SHARED_CREDENTIALS_FILE: path.join(home, `none-${randomUUID()}`) });
    expect(run.stderr).toMatch(/no AWS region for --lambda charges-ops: give --region <region>, or set AWS_REGION/);
    expect(run.code).toBe(2);
  });

  it('bad arguments → a clear message on stderr and exit 2, before any connection', async () => {
    const id = randomUUID();
    const cases: [string[], RegExp][] = [
      [['review', 'resolve', id, '--as', 'failed'], /--reason is required/],
      [['review', 'resolve', id, '--as', 'succeeded', '--reason', 'x'], /--as succeeded needs --payment-intent/],
      [['review', 'resolve', 'not-a-uuid', '--as', 'failed', '--reason', 'x'], /operation id must be a uuid/],
      [['review', 'reissue', id, '--reason', 'x'], /needs --confirm-no-charge/],
      [['review', 'list', '--older-then', '2h'], /Unknown option '--older-then'/],
      [['review', 'list', '--older-than', 'two hours'], /--older-than must be a duration/],
      [['review', 'resolve', id, '--as', 'failed', '--reason', 'two', 'words'], /quote a --reason with spaces/],
      [['payouts', 'list'], /unknown command "payouts"/],
      [['refunds', 'list'], /refunds list: missing <order-id>/],
    ];
    const runs = [];
    for (const [args] of cases) runs.push(await ops(args));
    runs.forEach((run, i) => {
      expect(run.code, cases[i]![0].join(' ')).toBe(2);
      expect(run.stderr, cases[i]![0].join(' ')).toMatch(cases[i]![1]);
      expect(run.stdout).toBe('');
    });
  });

  it('no database configured → exit 2 naming the variable (and --lambda)', async () => {
    const run = await ops(['stats']);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/DATABASE_URL.*--lambda <function-name>/);
  });

  it('happy path: stats --json prints the document, exit 0; a refused action exits 1', async () => {
    const stats = await ops(['stats', '--json'], { DATABASE_URL: db.url });
    expect(stats.code).toBe(0);
    expect(JSON.parse(stats.stdout)).toMatchObject({ ok: true, exitCode: 0, command: 'stats', result: { review: { size: 0 } } });
    const refused = await ops(['review', 'resolve', randomUUID(), '--as', 'failed', '--reason', 'x'], { DATABASE_URL: db.url, STRIPE_SECRET_KEY: 'sk_test_x' });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/refused: payment operation .* does not exist/);
  });

  it('an action that asks Stripe runs to completion and exits (no connection keeps the process alive)', async () => {
    const id = await intoReviewNothingCharged({ db, stripe });
    const env = { DATABASE_URL: db.url, STRIPE_SECRET_KEY: 'sk_test_x', STRIPE_API_BASE: stripe.fake.url, OPS_SEARCH_SETTLE_MS: '0' };
    // With idle connections kept for ever (the preload), a command that did not end its pool would
    // never exit: ops() kills it at its 20 s timeout, and a killed process has no exit code 0 — the
    // condition, where a bound on the run's duration (10 s: pg's idle timeout) failed on load.
    const run = await ops(['review', 'resolve', id, '--as', 'failed', '--reason', 'INC-9: no charge at Stripe'], { ...env, NODE_OPTIONS: `--import=${NEVER_IDLE}` });
    const url = new URL(db.url);
    // Only the target banner on stderr: where it went, and that the actor is only said.
    expect(run.stderr).toBe(
      `target: local pipeline — database ${url.hostname}:${url.port}${url.pathname} (DATABASE_URL), Stripe ${stripe.fake.url}, direct; actor operator:${os.userInfo().username} (as said, not verified)\n`,
    );
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/Resolved .* as failed/);
    expect(run.stdout).toContain(`by operator:${os.userInfo().username}`);
  });

  it('--help prints the command reference, exit 0', async () => {
    const run = await ops(['review', 'reissue', '--help']);
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/--confirm-no-charge/);
  });

  it('ui: serves the live page until Ctrl-C, then exits 0 (the entry module does not wait on itself)', async () => {
    // Node itself with tsx as a loader, not the tsx binary: that one runs the CLI in a child process and
    // relays Ctrl-C to it, and under load its relay once answered for the child (exit 130) — the signal
    // goes straight to the CLI here, as when Node runs it directly.
    const child = spawn(process.execPath, ['--import', 'tsx', 'lambdas/ops/cli.ts', 'ui'], { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME, USER: 'alice', DATABASE_URL: db.url }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    try {
      for (let i = 0; i < 200 && !/live page: http:\/\/127\.0\.0\.1:\d+\//.test(out); i++) await new Promise((r) => setTimeout(r, 100));
      const url = /live page: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(out)?.[1];
      expect(url, out).toBeDefined();
      expect(out).toMatch(/target: local pipeline — database 127\.0\.0\.1/);
      expect(out).toMatch(/read-only \(start with --allow-actions/);
      const state = (await (await fetch(new URL('/api/state', url))).json()) as { mode: string; actionsAllowed: boolean };
      expect(state).toMatchObject({ mode: 'ops', actionsAllowed: false });
      child.kill('SIGINT');
      const [code] = await exited;
      expect(code, out).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGKILL');
    }
  });
});
