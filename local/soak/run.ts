// npm run -s soak -- --orders 10000 [--seed N] [--json] [--pollers 4] [--kill-rate 0.12] [--random-kill-rate 0.03]
//                  [--pg-restarts 2] [--pg-crashes 2] [--duplicates 0.3] [--refunds 0.2] [--authorizations 0.1] [--duplicate-charges 0.03] [--faults chaos|flaky|none]
//                  [--no-prune] [--no-webhooks] [--async-commit] [--quiescence-timeout-s 180] [--lambdas-dir DIR]
//                  [--batch-size 10] [--visibility-s 8] [--no-await-outbox] [--time-lapse soak|demo|fast]
// Exit code: 0 when every invariant holds and the pipeline settled; 1 otherwise; 2 on bad arguments.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { renderSoakCharts } from './charts.ts';
import { isFaultProfileName } from '../fake-stripe/server.ts';
import { DEMO_TIME_LAPSE } from '../pipeline.ts';
import { DEFAULT_SOAK, FAST_TIME_LAPSE, formatSoakReport, runSoak, soakQuiescenceTimeoutFor, soakTimeLapseFor } from './soak.ts';

function number(value: string | undefined, name: string, fallback: number): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`--${name} must be a non-negative number, got ${value}`);
    process.exit(2);
  }
  return n;
}

const { values } = parseArgs({
  options: {
    orders: { type: 'string' },
    seed: { type: 'string' },
    json: { type: 'boolean', default: false },
    pollers: { type: 'string' },
    'kill-rate': { type: 'string' },
    'random-kill-rate': { type: 'string' },
    'pg-restarts': { type: 'string' },
    'pg-crashes': { type: 'string' },
    duplicates: { type: 'string' },
    refunds: { type: 'string' },
    authorizations: { type: 'string' },
    'duplicate-charges': { type: 'string' },
    faults: { type: 'string' },
    'no-prune': { type: 'boolean', default: false },
    'no-webhooks': { type: 'boolean', default: false },
    'async-commit': { type: 'boolean', default: false },
    'quiescence-timeout-s': { type: 'string' },
    'lambdas-dir': { type: 'string' },
    'batch-size': { type: 'string' },
    'visibility-s': { type: 'string' },
    'no-await-outbox': { type: 'boolean', default: false },
    'time-lapse': { type: 'string' },
    'svg-dir': { type: 'string' },
    help: { type: 'boolean', default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(`npm run -s soak -- [options]   the chaos soak (docs/proofs.md)
  --orders N               orders to send (default 1000)
  --seed N                 the soak's choices and the fake Stripe's fault draws (default: random, printed)
  --json                   the report as JSON on stdout (progress stays on stderr)
  --svg-dir DIR            also write the figures as SVG charts (soak-faults.svg, soak-outcomes.svg) into DIR
  --pollers N              charge containers at once (default ${DEFAULT_SOAK.pollers})
  --batch-size N           records per charge invocation, 1-10 (default ${DEFAULT_SOAK.batchSize})
  --kill-rate R            invocations SIGKILLed at a chosen step (default ${DEFAULT_SOAK.killRate})
  --random-kill-rate R     invocations SIGKILLed at a random moment (default ${DEFAULT_SOAK.randomKillRate})
  --pg-restarts N          clean PostgreSQL restarts during the intake (default ${DEFAULT_SOAK.pgRestarts})
  --pg-crashes N           PostgreSQL crashes: postmaster / backend SIGKILL, alternating (default ${DEFAULT_SOAK.pgCrashes})
  --duplicates R           orders sent twice (default ${DEFAULT_SOAK.duplicateRate})
  --refunds R              orders refunded instead of sent twice (default ${DEFAULT_SOAK.refundRate})
  --authorizations R       orders charged with capture "manual" instead, then captured (full, part,
                           above the authorization first), canceled or left to expire (default 0.1)
  --duplicate-charges R    orders charged again behind the pipeline's back once charged (the
                           duplicate remedy must refund them; webhooks only; default ${DEFAULT_SOAK.duplicateChargeRate})
  --faults P               Stripe fault profile: chaos | flaky | none (default ${DEFAULT_SOAK.faults})
  --time-lapse C           soak (a key window of 50 ms per order, at least 60 s) | demo (npm start's 20 s) | fast (CI's 12 s)
  --visibility-s N         SQS visibility timeout (default ${DEFAULT_SOAK.visibilityTimeoutSeconds})
  --no-prune               never let the fake forget idempotency keys
  --no-webhooks            polling only: the fake Stripe sends no signed webhooks
  --async-commit           synchronous_commit=off on the soak's database (reproduces lost commits)
  --no-await-outbox        stop waiting once every operation is settled
  --quiescence-timeout-s N give up waiting for quiescence (default: two of the run's key windows, at least ${DEFAULT_SOAK.quiescenceTimeoutMs / 1000})
  --lambdas-dir DIR        import the handlers from DIR instead of ./lambdas (a patched copy)`);
  process.exit(0);
}
const faults = values.faults ?? DEFAULT_SOAK.faults;
if (!isFaultProfileName(faults)) {
  console.error(`--faults must be none, flaky or chaos, got ${faults}`);
  process.exit(2);
}
const seed = number(values.seed, 'seed', Math.floor(Math.random() * 2 ** 31));
const lapse = values['time-lapse'] ?? 'soak';
if (lapse !== 'soak' && lapse !== 'demo' && lapse !== 'fast') {
  console.error(`--time-lapse must be soak (default: a key window of 50 ms per order, at least 60 s), demo (npm start's 20 s) or fast (CI's 12 s), got ${lapse}`);
  process.exit(2);
}
const json = values.json;
const orders = Math.floor(number(values.orders, 'orders', 1000));
const timeLapse = lapse === 'fast' ? FAST_TIME_LAPSE : lapse === 'demo' ? DEMO_TIME_LAPSE : soakTimeLapseFor(orders);
const report = await runSoak({
  ...DEFAULT_SOAK,
  orders,
  seed,
  faults,
  pollers: Math.max(1, Math.floor(number(values.pollers, 'pollers', DEFAULT_SOAK.pollers))),
  killRate: number(values['kill-rate'], 'kill-rate', DEFAULT_SOAK.killRate),
  randomKillRate: number(values['random-kill-rate'], 'random-kill-rate', DEFAULT_SOAK.randomKillRate),
  pgRestarts: Math.floor(number(values['pg-restarts'], 'pg-restarts', DEFAULT_SOAK.pgRestarts)),
  pgCrashes: Math.floor(number(values['pg-crashes'], 'pg-crashes', DEFAULT_SOAK.pgCrashes)),
  duplicateRate: number(values.duplicates, 'duplicates', DEFAULT_SOAK.duplicateRate),
  refundRate: Math.min(1, number(values.refunds, 'refunds', DEFAULT_SOAK.refundRate)),
  authorizationRate: Math.min(1, number(values.authorizations, 'authorizations', DEFAULT_SOAK.authorizationRate ?? 0.1)),
  duplicateChargeRate: Math.min(1, number(values['duplicate-charges'], 'duplicate-charges', DEFAULT_SOAK.duplicateChargeRate)),
  pruneKeys: !values['no-prune'],
  webhooks: !values['no-webhooks'],
  asyncCommit: values['async-commit'],
  batchSize: Math.min(10, Math.max(1, Math.floor(number(values['batch-size'], 'batch-size', DEFAULT_SOAK.batchSize)))),
  visibilityTimeoutSeconds: number(values['visibility-s'], 'visibility-s', DEFAULT_SOAK.visibilityTimeoutSeconds),
  awaitOutbox: !values['no-await-outbox'],
  timeLapse,
  quiescenceTimeoutMs: number(values['quiescence-timeout-s'], 'quiescence-timeout-s', soakQuiescenceTimeoutFor(timeLapse) / 1000) * 1000,
  ...(values['lambdas-dir'] ? { lambdasDir: values['lambdas-dir'] } : {}),
  // Progress goes to stderr so that --json output stays parseable.
  log: (line) => console.error(`[${new Date().toISOString().slice(11, 19)}] ${line}`),
});
if (json) console.log(JSON.stringify(report, null, 2));
else console.log(formatSoakReport(report));
if (values['svg-dir']) {
  await mkdir(values['svg-dir'], { recursive: true });
  for (const chart of renderSoakCharts(report)) await writeFile(path.join(values['svg-dir'], chart.name), chart.svg);
  console.error(`charts written to ${values['svg-dir']}: ${renderSoakCharts(report).map((c) => c.name).join(', ')}`);
}
process.exit(report.ok ? 0 : 1);
