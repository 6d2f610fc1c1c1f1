// docs/quickstart.md is a real run: its commands run here, in order, against a fresh local
// pipeline (the real handlers, fauxqs, the fake Stripe with its webhooks, the suite's PostgreSQL,
// the time-lapse of `npm start`), through the same CLI entry points (`main` of produce and ops) with
// the environment `--serve` writes to .local/ops.env, and every output line the page shows must
// come out of the run — ids, times, ports and durations aside. Lines cut short with … and the audit
// trail's rows (their JSON details) are not compared.
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { main as ops } from '../../lambdas/ops/cli.ts';
import { main as produce } from '../../lambdas/producer/cli.ts';
import { parseCliArgs, serveCommands } from '../../local/cli.ts';
import { DEMO_TIME_LAPSE, LOCAL_FAKE_STRIPE_KEY, timeLapseEnvironment } from '../../local/pipeline.ts';
import { startTestPipeline } from '../local/support.ts';

interface Step {
  readonly command: string;
  readonly output: readonly string[];
}

/** The `$ ` commands of the page's console blocks, each with the lines it printed. */
function steps(markdown: string): Step[] {
  const out: { command: string; output: string[] }[] = [];
  for (const block of markdown.matchAll(/```console\n([\s\S]*?)```/g)) {
    for (const line of block[1]!.split('\n')) {
      if (line.startsWith('$ ')) out.push({ command: line.slice(2), output: [] });
      else if (line.trim() !== '') out.at(-1)?.output.push(line);
    }
  }
  return out;
}

/** Shell words: plain, '…' and "…" (all the page uses). */
function words(command: string): string[] {
  return [...command.matchAll(/'([^']*)'|"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? m[3]!);
}

/** What differs from run to run. */
function normal(line: string): string {
  return line
    .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<uuid>')
    .replace(/\b(pi|re|ch|req|evt)_[A-Za-z0-9]+/g, '$1_<id>')
    .replace(/\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})/g, '<time>')
    .replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<port>')
    .replace(/run_\d{8}_\d{6}_[0-9a-f]{4}/g, 'run_<id>')
    .replace(/\b\d+s\b/g, '<n>s')
    .replace(/#\d+/g, '#<n>')
    .replace(/operator:\S+/g, 'operator:<user>')
    .replace(/\s+/g, ' ')
    .trim();
}

const compared = (line: string) => !line.includes('…') && !line.includes('{') && !/^\s*\d+\s+<time>/.test(normal(line));

describe('docs/quickstart.md', () => {
  const page = readFileSync('docs/quickstart.md', 'utf8');
  const all = steps(page);

  it('has the steps it promises', () => {
    expect(all.length).toBeGreaterThan(10);
    const start = all[0]!;
    expect(start.command).toMatch(/^npm start -- /);
    expect(parseCliArgs(words(start.command).slice(3))).toMatchObject({ serve: true, orders: 0, faults: 'none' });
  });

  it('prints what it shows when its commands are run', async () => {
    const pipeline = await startTestPipeline({ timeLapse: DEMO_TIME_LAPSE, pollers: 2 });
    try {
      const written = serveCommands(pipeline.environment, {
        sqsEndpoint: pipeline.sqs.endpoint,
        stripeKey: LOCAL_FAKE_STRIPE_KEY,
        settings: Object.keys(timeLapseEnvironment(DEMO_TIME_LAPSE)),
        opsEnvFile: '.local/ops.env',
      });
      // `set -a; . .local/ops.env; set +a`
      const env: NodeJS.ProcessEnv = { USER: 'quickstart', ...Object.fromEntries(written.opsEnv.trim().split('\n').map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)])) };
      /** Settled, and what Stripe's events say has arrived and been applied. */
      const settle = async () => {
        for (let round = 0; round < 2; round++) {
          pipeline.webhooks?.dispatcher.poll();
          await pipeline.webhooks?.dispatcher.drain();
          expect((await pipeline.waitUntilSettled({ intakeDone: () => true, timeoutMs: 60_000 })).kind).toBe('settled');
        }
      };
      const missing: string[] = [];
      for (const step of all.slice(1)) {
        const argv = words(step.command);
        const lines: string[] = [];
        const io = { out: (l: string) => lines.push(...l.split('\n')), err: (l: string) => lines.push(...l.split('\n')) };
        if (step.command.startsWith('set -a')) continue;
        if (argv[0] === 'curl') {
          const url = argv.find((w) => w.includes('/__fake/'))!.replace('$STRIPE_API_BASE', env.STRIPE_API_BASE!);
          const body = argv[argv.indexOf('-d') + 1]!;
          lines.push(await (await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body })).text());
        } else if (argv.slice(0, 4).join(' ') === 'npm run -s produce') {
          await produce(argv.slice(5), env, io);
        } else if (argv.slice(0, 4).join(' ') === 'npm run -s ops') {
          await settle();
          let args = argv.slice(5);
          // The page's operation id is its run's: act on the one in review now.
          if (args[0] === 'review' && args[1] === 'reissue') {
            const { rows } = await pipeline.db.query<{ id: string }>(`SELECT id FROM payment_operations WHERE review_reason IS NOT NULL`);
            expect(rows).toHaveLength(1);
            args = args.map((a) => (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/.test(a) ? rows[0]!.id : a));
          }
          await ops(args, env, io);
        } else {
          throw new Error(`quickstart: a command this test does not know how to run: ${step.command}`);
        }
        const got = new Set(lines.map(normal));
        for (const line of step.output.filter(compared)) if (!got.has(normal(line))) missing.push(`${step.command}\n    ${line}\n  got:\n    ${lines.join('\n    ')}`);
      }
      expect(missing).toEqual([]);
    } finally {
      await pipeline.stop();
    }
  }, 150_000);
});
