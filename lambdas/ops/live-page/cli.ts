// `npm run ops -- ui`: the live page against a pipeline, on 127.0.0.1. Its figures are the ops
// commands' (stats, review list, operations show --stripe), run as the CLI runs them — against
// DATABASE_URL, or in the ops Lambda with --lambda (IAM; you act as the identity STS verifies). Read-only
// unless started with --allow-actions; then resolve, re-issue and note are in the page, each after a
// confirmation step and run as the same ops command (the same required reason, the same audit detail).
import { once } from 'node:events';
import { parseArgs } from 'node:util';
import { osUser, targetOf, type CliIo } from '../target.ts';
import { EXIT, UsageError } from '../errors.ts';
import { parseInvocation } from '../parse.ts';
import { opsCommandsSource } from './ops-source.ts';
import { directRunner, lambdaRunner } from './runner.ts';
import { startLivePage, type LivePage } from './server.ts';

export const UI_USAGE = `Usage: npm run ops -- ui [options]

The live page on http://127.0.0.1:<port>/: counts (ops stats), the review queue (ops review list)
with each item's reason and evidence, one operation's timeline beside what Stripe holds (ops
operations show --stripe), refreshed live. Read-only unless started with --allow-actions.

Options:
  --port <port>            the page's port (default: any free one, printed)
  --allow-actions          resolve, re-issue and note from the page: each after a confirmation
                           step, run as the ops command itself (reason required, audited as the CLI's)
  --actor <name>           who acts, as the CLI's --actor (default: the OS user; with --lambda a
                           note beside the IAM identity STS verifies, which is the actor)
  --interval <seconds>     how often the figures are read (default 1; 5 with --lambda, at least 2)
  --lambda <function>      read (and act) through the ops Lambda (IAM) instead of DATABASE_URL
  --region <region>        AWS region for --lambda (default $AWS_REGION)
  --endpoint <url>         a local Lambda API endpoint for --lambda (tests, emulators)
  -h, --help

Ctrl-C stops the page.`;

export interface UiOptions {
  readonly port: number;
  readonly allowActions: boolean;
  readonly actor: string | null;
  readonly intervalMs: number;
  readonly transportArgv: readonly string[];
  readonly lambda: string | null;
  readonly region: string | undefined;
  readonly endpoint: string | undefined;
}

export function parseUiArgs(argv: readonly string[]): UiOptions | 'help' {
  let values;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        port: { type: 'string' },
        'allow-actions': { type: 'boolean' },
        actor: { type: 'string' },
        interval: { type: 'string' },
        lambda: { type: 'string' },
        region: { type: 'string' },
        endpoint: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError(`ui: ${(error as Error).message.split('. To specify')[0]}`);
  }
  if (values.help) return 'help';
  const port = values.port === undefined ? 0 : Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new UsageError(`ui: --port must be an integer in [0, 65535] (got "${values.port}")`);
  const interval = values.interval === undefined ? (values.lambda ? 5 : 1) : Number(values.interval);
  const least = values.lambda ? 2 : 0.2;
  if (!(interval >= least && interval <= 600)) throw new UsageError(`ui: --interval must be a number of seconds in [${least}, 600]${values.lambda ? ' with --lambda' : ''} (got "${values.interval}")`);
  if (values.actor !== undefined && !/^[\x21-\x7e]{1,100}$/.test(values.actor)) throw new UsageError('ui: --actor must be 1-100 printable characters without spaces');
  const transportArgv = [
    ...(values.lambda !== undefined ? ['--lambda', values.lambda] : []),
    ...(values.region !== undefined ? ['--region', values.region] : []),
    ...(values.endpoint !== undefined ? ['--endpoint', values.endpoint] : []),
  ];
  return {
    port,
    allowActions: values['allow-actions'] ?? false,
    actor: values.actor ?? null,
    intervalMs: Math.round(interval * 1000),
    transportArgv,
    lambda: values.lambda ?? null,
    region: values.region,
    endpoint: values.endpoint,
  };
}

/** Starts the page (for tests and runUi); the caller closes it. */
export async function startOpsUi(options: UiOptions, env: NodeJS.ProcessEnv, onError?: (error: unknown) => void): Promise<{ page: LivePage; banner: string }> {
  // The target as the CLI says it (its own check of --region / --endpoint without --lambda, too).
  const user = osUser(env);
  const target = targetOf(parseInvocation(['stats', ...options.transportArgv], user), env);
  const runner = options.lambda
    ? lambdaRunner({ functionName: options.lambda, region: options.region ?? env.AWS_REGION, endpoint: options.endpoint }, env, user)
    : directRunner(env, user);
  const actor = options.lambda ? null : `operator:${options.actor ?? user ?? 'unverified'}`;
  const page = await startLivePage({
    source: opsCommandsSource({
      run: runner.run,
      title: target.deployed ? 'Deployed pipeline' : 'Local pipeline',
      target: target.banner,
      actionsAllowed: options.allowActions,
      actor,
      actorName: options.actor,
      close: runner.close,
    }),
    port: options.port,
    actionsAllowed: options.allowActions,
    intervalMs: options.intervalMs,
    ...(onError ? { onError } : {}),
  });
  return { page, banner: target.banner };
}

export async function runUi(argv: readonly string[], env: NodeJS.ProcessEnv, io: CliIo): Promise<number> {
  let options: UiOptions;
  try {
    const parsed = parseUiArgs(argv);
    if (parsed === 'help') {
      io.out(UI_USAGE);
      return EXIT.ok;
    }
    options = parsed;
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    io.err(`error: ${error.message}`);
    return EXIT.usage;
  }
  let lastProblem = '';
  let started;
  try {
    started = await startOpsUi(options, env, (error) => {
      const text = error instanceof Error ? error.message : String(error);
      if (text !== lastProblem) io.err(`ui: could not read the figures: ${text}`);
      lastProblem = text;
    });
  } catch (error) {
    io.err(`error: ${error instanceof Error ? error.message : String(error)}`);
    return error instanceof UsageError ? EXIT.usage : EXIT.refused;
  }
  io.err(started.banner);
  io.out(`live page: ${started.page.url}`);
  io.out(
    options.allowActions
      ? '  actions allowed: resolve, re-issue and note from the page, each confirmed there and run as the ops command'
      : '  read-only (start with --allow-actions to resolve, re-issue and note from the page)',
  );
  io.out('Ctrl-C stops it.');
  await Promise.race([once(process, 'SIGINT'), once(process, 'SIGTERM')]);
  await started.page.close();
  return EXIT.ok;
}
