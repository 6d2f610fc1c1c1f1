// npm run fake-stripe -- --port 12111 --faults flaky --seed 42
// Runs the fake Stripe server until Ctrl-C. Point the product at it with STRIPE_API_BASE.
import { parseArgs } from 'node:util';
import { FAULT_PROFILES, isFaultProfileName, startFakeStripe } from './server.ts';

const USAGE = `usage: fake-stripe [--port 12111] [--latency-ms 0] [--search-lag-ms 0] [--processing-settle-ms N]
                   [--faults none|flaky|chaos] [--seed N] [--rate-limit N]
                   [--over-refund-error amount_too_large|no_code] [--late-commit-ms N]
                   [--authorization-expiry-ms N] [--connected-account acct_… ...]`;

function numberOption(name: string, value: string | undefined): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    console.error(`--${name} must be a non-negative number, got ${value}\n${USAGE}`);
    process.exit(2);
  }
  return n;
}

const { values } = parseArgs({
  options: {
    port: { type: 'string', default: '12111' },
    'latency-ms': { type: 'string' },
    'search-lag-ms': { type: 'string' },
    'processing-settle-ms': { type: 'string' },
    faults: { type: 'string', default: 'none' },
    seed: { type: 'string' },
    'rate-limit': { type: 'string' },
    'over-refund-error': { type: 'string', default: 'amount_too_large' },
    'late-commit-ms': { type: 'string' },
    'authorization-expiry-ms': { type: 'string' },
    'connected-account': { type: 'string', multiple: true },
    help: { type: 'boolean', short: 'h' },
  },
});

if (values.help) {
  console.log(USAGE);
  process.exit(0);
}
const profile = values.faults;
if (!isFaultProfileName(profile)) {
  console.error(`--faults must be one of ${Object.keys(FAULT_PROFILES).join(', ')}, got ${profile}\n${USAGE}`);
  process.exit(2);
}
// A printed seed makes any run reproducible: pass it back with --seed.
const seed = numberOption('seed', values.seed) ?? Math.floor(Math.random() * 2 ** 31);
const rateLimit = numberOption('rate-limit', values['rate-limit']);
const overRefundError = values['over-refund-error'];
if (overRefundError !== 'amount_too_large' && overRefundError !== 'no_code') {
  console.error(`--over-refund-error must be amount_too_large or no_code, got ${overRefundError}\n${USAGE}`);
  process.exit(2);
}

const fake = await startFakeStripe({
  port: numberOption('port', values.port) ?? 12111,
  latencyMs: numberOption('latency-ms', values['latency-ms']),
  searchLagMs: numberOption('search-lag-ms', values['search-lag-ms']),
  processingSettleMs: numberOption('processing-settle-ms', values['processing-settle-ms']) ?? null,
  faults: { seed, rates: FAULT_PROFILES[profile] },
  ...(rateLimit !== undefined ? { rateLimit: { perSecond: rateLimit } } : {}),
  overRefundError,
  // Without it, the late-commit faults commit only when POST /__fake/commit_late releases them.
  lateCommitMs: numberOption('late-commit-ms', values['late-commit-ms']) ?? null,
  // Default 7 days (docs/fake-stripe.md, "Manual capture"); a time-lapse sets it short.
  ...(values['authorization-expiry-ms'] !== undefined ? { authorizationExpiryMs: numberOption('authorization-expiry-ms', values['authorization-expiry-ms'])! } : {}),
  connectedAccounts: values['connected-account'] ?? [],
});

console.log(`fake Stripe listening on ${fake.url} (faults: ${profile}, seed: ${seed})`);
console.log(`  STRIPE_API_BASE=${fake.url}   (any sk_test_… key is accepted)`);
console.log(`  inspect: curl ${fake.url}/__fake/stats`);

let stopping = false;
const stop = (): void => {
  if (stopping) return;
  stopping = true;
  const s = fake.stats();
  console.log(
    `\nstopping: ${s.requests.total} requests, ${s.paymentIntents.total} PaymentIntents, ${s.refunds.total} Refunds, double charges: ${s.doubleCharges}`,
  );
  void fake.close().then(() => process.exit(0));
};
process.on('SIGINT', stop);
process.on('SIGTERM', stop);
