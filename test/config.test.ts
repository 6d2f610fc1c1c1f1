// Configuration from the environment: defaults, and the values that are refused because they would
// weaken a guarantee (a key window past Stripe's retention, a lease shorter than one Stripe call).
import { describe, expect, it } from 'vitest';
import { DEFAULT_POLICY } from '../lambdas/payments/decisions.ts';
import { deferralDelayMs } from '../lambdas/payments/applier-context.ts';
import { assertCallBudget, ConfigError, loadConfig } from '../lambdas/runtime/config.ts';

const base = { DATABASE_URL: 'postgres://u:p@127.0.0.1:5432/db' };

describe('loadConfig', () => {
  it('needs a database, locally or on AWS', () => {
    expect(() => loadConfig({})).toThrow(ConfigError);
    expect(loadConfig({ DB_SECRET_ARN: 'arn:aws:secretsmanager:eu-west-1:1:secret:db' }).database.ssl).toBe('verify-full');
    expect(loadConfig(base).database.ssl).toBe('off');
  });

  it('reads DB_CONSUMER_LOGINS (migrate: the consumers’ logins to provision) and refuses a malformed one, saying what it must be', () => {
    expect(loadConfig(base).database.consumerLogins).toEqual([]);
    const logins = [{ secretArn: 'arn:aws:secretsmanager:eu-west-1:1:secret:receipts', schemas: ['outcome_consumer', 'receipts'] }];
    expect(loadConfig({ ...base, DB_CONSUMER_LOGINS: JSON.stringify(logins) }).database.consumerLogins).toEqual(logins);
    expect(() => loadConfig({ ...base, DB_CONSUMER_LOGINS: 'receipts' })).toThrow(/DB_CONSUMER_LOGINS must be a JSON list .* it is not JSON/);
    expect(() => loadConfig({ ...base, DB_CONSUMER_LOGINS: '{}' })).toThrow(/DB_CONSUMER_LOGINS must be a JSON list/);
    expect(() => loadConfig({ ...base, DB_CONSUMER_LOGINS: JSON.stringify([{ secretArn: 'arn:x', schemas: [] }]) })).toThrow(/DB_CONSUMER_LOGINS\[0\] must be .*at least one/);
    expect(() => loadConfig({ ...base, DB_CONSUMER_LOGINS: JSON.stringify([{ secretArn: 'arn:x', schemas: ['Receipts; DROP'] }]) })).toThrow(/DB_CONSUMER_LOGINS\[0\]/);
    // the same rule as the construct and the migrate run: never the pipeline's public, never pg_*
    for (const schema of ['public', 'pg_catalog']) {
      expect(() => loadConfig({ ...base, DB_CONSUMER_LOGINS: JSON.stringify([{ secretArn: 'arn:x', schemas: ['receipts', schema] }]) }), schema).toThrow(/DB_CONSUMER_LOGINS\[0\] must be .*other than public and pg_\*/);
    }
  });

  it('reads STRIPE_CONNECTED_ACCOUNTS (whose events are taken) and refuses a malformed one at start', () => {
    expect(loadConfig(base).stripe.connectedAccounts).toEqual([]);
    expect(loadConfig({ ...base, STRIPE_CONNECTED_ACCOUNTS: ' acct_1Alpha, acct_1Bravo,acct_1Alpha ' }).stripe.connectedAccounts).toEqual(['acct_1Alpha', 'acct_1Bravo']);
    for (const bad of ['acct_1Alpha,', 'cus_1', 'acct_1Alpha;acct_1Bravo', 'acct_', `acct_${'a'.repeat(65)}`]) {
      expect(() => loadConfig({ ...base, STRIPE_CONNECTED_ACCOUNTS: bad }), bad).toThrow(/STRIPE_CONNECTED_ACCOUNTS must be a comma-separated list of Stripe account ids/);
    }
  });

  it('keeps the production policy unless told otherwise', () => {
    const { policy } = loadConfig(base);
    expect(policy.keyWindowMs).toBe(DEFAULT_POLICY.keyWindowMs);
    expect(policy.backoff).toEqual(DEFAULT_POLICY.backoff);
  });

  it('reads PUBLISH_LEASE_MS (default a minute) and refuses one under a second', () => {
    expect(loadConfig(base).policy.publishLeaseMs).toBe(60_000);
    expect(loadConfig({ ...base, PUBLISH_LEASE_MS: '4000' }).policy.publishLeaseMs).toBe(4_000);
    expect(() => loadConfig({ ...base, PUBLISH_LEASE_MS: '10' })).toThrow(/PUBLISH_LEASE_MS/);
  });

  it('reads the unsettled bounds of the slow payment methods (defaults: SEPA debit 24 days, US bank account 10) and refuses one under a second', () => {
    expect(loadConfig(base).policy.unsettledReviewAfterMsByPaymentMethodType).toEqual(DEFAULT_POLICY.unsettledReviewAfterMsByPaymentMethodType);
    const set = loadConfig({ ...base, UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT: '5000', UNSETTLED_REVIEW_AFTER_MS_US_BANK_ACCOUNT: '6000' }).policy;
    expect(set.unsettledReviewAfterMsByPaymentMethodType).toEqual({ sepa_debit: 5_000, us_bank_account: 6_000 });
    expect(() => loadConfig({ ...base, UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT: '10' })).toThrow(/UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT/);
    expect(() => loadConfig({ ...base, UNSETTLED_REVIEW_AFTER_MS_US_BANK_ACCOUNT: 'soon' })).toThrow(/UNSETTLED_REVIEW_AFTER_MS_US_BANK_ACCOUNT/);
  });

  it('refuses a key window longer than 23 h: Stripe may have pruned the key by then', () => {
    expect(() => loadConfig({ ...base, KEY_WINDOW_MS: String(24 * 3_600_000) })).toThrow(/KEY_WINDOW_MS/);
    expect(loadConfig({ ...base, KEY_WINDOW_MS: '20000', AMBIGUOUS_RESOLUTION: 'review' }).policy.keyWindowMs).toBe(20_000);
  });

  it('reads the List evidence settings, and refuses timings that cannot work', () => {
    const { policy } = loadConfig(base);
    expect(policy).toMatchObject({
      ambiguousResolution: 'auto',
      sameKeyResends: 2,
      listSettleMs: 120_000,
      listWindowMarginMs: 300_000,
      proofSpacingMs: 600_000,
      reissueAfterLastSendMs: 900_000,
      maxAutoReissues: 2,
      maxSearchFailures: 3,
    });
    expect(loadConfig({ ...base, AMBIGUOUS_RESOLUTION: 'review', MAX_AUTO_REISSUES: '0' }).policy).toMatchObject({ ambiguousResolution: 'review', maxAutoReissues: 0 });
    expect(() => loadConfig({ ...base, AMBIGUOUS_RESOLUTION: 'sometimes' })).toThrow(/AMBIGUOUS_RESOLUTION must be one of auto, review, got "sometimes"/);
    expect(() => loadConfig({ ...base, MAX_AUTO_REISSUES: '-1' })).toThrow(/MAX_AUTO_REISSUES must be an integer/);
    expect(() => loadConfig({ ...base, MAX_SEARCH_FAILURES: '0' })).toThrow(/MAX_SEARCH_FAILURES must be an integer in \[1, 100\]/);
    // A list sooner than a request may still run at Stripe proves nothing.
    expect(() => loadConfig({ ...base, LIST_SETTLE_MS: '5000' })).toThrow(/LIST_SETTLE_MS \(5000\) must be at least STRIPE_TIMEOUT_MS \(10000\)/);
    expect(() => loadConfig({ ...base, REISSUE_AFTER_LAST_SEND_MS: '60000' })).toThrow(/REISSUE_AFTER_LAST_SEND_MS \(60000\) must be at least LIST_SETTLE_MS/);
    // Proofs that cannot fit in the key window would silently never re-issue: refused, with the way out.
    expect(() => loadConfig({ ...base, KEY_WINDOW_MS: '600000' })).toThrow(/must be below KEY_WINDOW_MS \(600000\).*AMBIGUOUS_RESOLUTION=review/);
    expect(() => loadConfig({ ...base, KEY_WINDOW_MS: '600000', AMBIGUOUS_RESOLUTION: 'review' })).not.toThrow();
  });

  it('reads the watch after a re-issue and the refund switch, and refuses what would leave a blind spot', () => {
    expect(loadConfig(base).policy).toMatchObject({ refundAutoReissue: false, watchFirstAfterMs: 3_600_000, watchFinalAfterFirstSendMs: 25 * 3_600_000 });
    expect(loadConfig({ ...base, REFUND_AUTO_REISSUE: 'on' }).policy.refundAutoReissue).toBe(true);
    expect(() => loadConfig({ ...base, REFUND_AUTO_REISSUE: 'yes' })).toThrow(/REFUND_AUTO_REISSUE must be one of off, on/);
    expect(() => loadConfig({ ...base, REFUND_AUTO_REISSUE: 'on', AMBIGUOUS_RESOLUTION: 'review' })).toThrow(/REFUND_AUTO_REISSUE=on needs AMBIGUOUS_RESOLUTION=auto/);
    // The last look must come after Stripe's 24 h retention (scaled with a shortened key window).
    expect(() => loadConfig({ ...base, REISSUE_WATCH_FINAL_AFTER_MS: String(23.5 * 3_600_000) })).toThrow(/REISSUE_WATCH_FINAL_AFTER_MS \(84600000\) must be at least 86400000/);
    expect(loadConfig({ ...base, REISSUE_WATCH_FINAL_AFTER_MS: String(24 * 3_600_000) }).policy.watchFinalAfterFirstSendMs).toBe(24 * 3_600_000);
    expect(() => loadConfig({ ...base, REISSUE_WATCH_FIRST_AFTER_MS: String(25 * 3_600_000) })).toThrow(/REISSUE_WATCH_FIRST_AFTER_MS .* must be below REISSUE_WATCH_FINAL_AFTER_MS/);
    expect(() => loadConfig({ ...base, KEY_WINDOW_MS: '23000', AMBIGUOUS_RESOLUTION: 'review', REISSUE_WATCH_FIRST_AFTER_MS: '1000', REISSUE_WATCH_FINAL_AFTER_MS: '23999' })).toThrow(/must be at least 24000/);
  });

  it('refuses a List window margin narrower than the clock skew allowed between the database and Stripe', () => {
    expect(() => loadConfig({ ...base, LIST_WINDOW_MARGIN_MS: '30000' })).toThrow(/LIST_WINDOW_MARGIN_MS \(30000\) must be at least STRIPE_CLOCK_SKEW_MS \(60000\)/);
    expect(loadConfig({ ...base, LIST_WINDOW_MARGIN_MS: '30000', STRIPE_CLOCK_SKEW_MS: '20000' }).policy.listWindowMarginMs).toBe(30_000);
    expect(loadConfig({ ...base, LIST_WINDOW_MARGIN_MS: '60000' }).policy.listWindowMarginMs).toBe(60_000);
  });

  it('refuses a lease that a worst-case Stripe call could outlast', () => {
    expect(() => loadConfig({ ...base, LEASE_MS: '30000' })).toThrow(/LEASE_MS must exceed/);
    expect(() => loadConfig({ ...base, LEASE_MS: '5000', STRIPE_TIMEOUT_MS: '1000', STRIPE_MAX_NETWORK_RETRIES: '0' })).not.toThrow();
  });

  it('refuses a Stripe call budget under which a function could never start a call, naming the bound', () => {
    const charge = (env: Record<string, string>) => () => assertCallBudget(loadConfig({ ...base, LEASE_MS: '600000', ...env }), 'charge', 60_000);
    const reconcile = (env: Record<string, string>) => () => assertCallBudget(loadConfig({ ...base, LEASE_MS: '600000', ...env }), 'reconcile', 120_000);
    expect(charge({})).not.toThrow(); // 10 s × (1 + 2) + 4 s + 5 s = 39 s < 60 s
    expect(charge({ STRIPE_TIMEOUT_MS: '16999' })).not.toThrow();
    expect(charge({ STRIPE_TIMEOUT_MS: '17000' })).toThrow(/charge function.*up to 55000 ms.*lower STRIPE_TIMEOUT_MS to at most 16999/);
    expect(charge({ CHARGE_SAFETY_MARGIN_MS: '30000' })).toThrow(/CHARGE_SAFETY_MARGIN_MS=30000/);
    expect(reconcile({ STRIPE_TIMEOUT_MS: '36999' })).not.toThrow();
    expect(reconcile({ STRIPE_TIMEOUT_MS: '37000' })).toThrow(/reconcile function.*at most 36999/);
    expect(reconcile({ STRIPE_TIMEOUT_MS: '37000' })).toThrow(ConfigError);
    // A function timeout below the worst-case call (e.g. changed outside the construct).
    expect(() => assertCallBudget(loadConfig(base), 'charge', 30_000)).toThrow(/30000 ms function timeout/);
  });

  it('RETRY_BACKOFF_SCALE scales every retry delay, base and cap', () => {
    const { policy } = loadConfig({ ...base, RETRY_BACKOFF_SCALE: '0.5' });
    expect(policy.backoff?.ambiguous).toEqual({ baseMs: DEFAULT_POLICY.backoff.ambiguous.baseMs / 2, capMs: DEFAULT_POLICY.backoff.ambiguous.capMs / 2 });
    expect(policy.backoff?.configuration.capMs).toBe(DEFAULT_POLICY.backoff.configuration.capMs / 2);
    // The inbox's retries too: a Stripe event that could not be applied is looked at again on the same clock.
    expect(policy.backoff?.inbox).toEqual({ baseMs: DEFAULT_POLICY.backoff.inbox.baseMs / 2, capMs: DEFAULT_POLICY.backoff.inbox.capMs / 2 });
    expect(deferralDelayMs(30, policy.backoff!.inbox)).toBe(DEFAULT_POLICY.backoff.inbox.capMs / 2);
    expect(() => loadConfig({ ...base, RETRY_BACKOFF_SCALE: '0' })).toThrow(/RETRY_BACKOFF_SCALE/);
    expect(() => loadConfig({ ...base, RETRY_BACKOFF_SCALE: 'fast' })).toThrow(/RETRY_BACKOFF_SCALE/);
  });

  it('names the variable and the rule when a number is malformed', () => {
    expect(() => loadConfig({ ...base, DB_POOL_MAX: '0' })).toThrow(/DB_POOL_MAX must be an integer in \[1, 100\]/);
    expect(() => loadConfig({ ...base, DB_SSL: 'maybe' })).toThrow(/DB_SSL must be one of off, require, verify-full/);
  });
});

// The local overrides point a function at a server of ours (the fake Stripe, the fake EventBridge) and
// weaker TLS: fine on a laptop and in the local runtime, refused where the function is deployed (Lambda
// sets AWS_LAMBDA_FUNCTION_NAME, the local runtime never does) or the key moves real money.
describe('local overrides, refused in Lambda and with a live key', () => {
  const aws = { DB_SECRET_ARN: 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:db-AbCdEf', AWS_LAMBDA_FUNCTION_NAME: 'charge-prod', AWS_REGION: 'eu-west-1' };
  const live = { ...base, STRIPE_SECRET_KEY: 'sk_live_0123456789' };

  it('in Lambda: STRIPE_API_BASE, EVENTS_ENDPOINT and any DB_SSL but verify-full are refused at start, saying what to change', () => {
    expect(loadConfig(aws).runtime).toBe('lambda');
    expect(() => loadConfig({ ...aws, STRIPE_API_BASE: 'https://stripe-mock.internal' })).toThrow(
      /^STRIPE_API_BASE is refused in Lambda \(the Stripe key would be sent to https:\/\/stripe-mock.internal\): unset it/,
    );
    expect(() => loadConfig({ ...aws, EVENTS_ENDPOINT: 'http://10.0.0.5:4010' })).toThrow(/^EVENTS_ENDPOINT is refused in Lambda .*: unset it/);
    expect(() => loadConfig({ ...aws, DB_SSL: 'require' })).toThrow(/^DB_SSL must be verify-full in Lambda, got "require": set DB_SSL=verify-full/);
    expect(() => loadConfig({ ...aws, DB_SSL: 'off' })).toThrow(/^DB_SSL must be verify-full in Lambda/);
    // a URL in Lambda defaults to off: refused too
    expect(() => loadConfig({ DATABASE_URL: 'postgres://u:p@db.internal/x', AWS_LAMBDA_FUNCTION_NAME: 'ops' })).toThrow(/^DB_SSL must be verify-full in Lambda, got "off"/);
    expect(loadConfig({ ...aws, DB_SSL: 'verify-full' }).database.ssl).toBe('verify-full');
    for (const error of [() => loadConfig({ ...aws, DB_SSL: 'require' }), () => loadConfig({ ...aws, STRIPE_API_BASE: 'https://x' })]) expect(error).toThrow(ConfigError);
  });

  it('with a live key, anywhere: STRIPE_API_BASE and EVENTS_ENDPOINT are refused (a restricted live key too)', () => {
    expect(() => loadConfig({ ...live, STRIPE_API_BASE: 'https://stripe-compatible.example' })).toThrow(/^STRIPE_API_BASE is refused with a live Stripe key/);
    expect(() => loadConfig({ ...base, STRIPE_SECRET_KEY: 'rk_live_abc', STRIPE_API_BASE: 'http://127.0.0.1:12111' })).toThrow(/^STRIPE_API_BASE is refused with a live Stripe key/);
    expect(() => loadConfig({ ...live, EVENTS_ENDPOINT: 'http://127.0.0.1:4010' })).toThrow(/^EVENTS_ENDPOINT is refused with a live Stripe key/);
    expect(loadConfig(live).stripe.apiKey).toBe('sk_live_0123456789');
  });

  it('locally (no AWS_LAMBDA_FUNCTION_NAME, a test key): the fakes on this machine over http, anything else over https only', () => {
    const local = { ...base, STRIPE_SECRET_KEY: 'sk_test_x' };
    expect(loadConfig(local).runtime).toBe('local');
    for (const apiBase of ['http://127.0.0.1:12111', 'http://localhost:12111', 'http://[::1]:12111', 'https://stripe-mock.internal:12111']) {
      expect(loadConfig({ ...local, STRIPE_API_BASE: apiBase, EVENTS_ENDPOINT: 'http://127.0.0.1:4010', DB_SSL: 'require' }).stripe.apiBase, apiBase).toBe(apiBase);
    }
    expect(() => loadConfig({ ...local, STRIPE_API_BASE: 'http://stripe-mock.internal:12111' })).toThrow(/^STRIPE_API_BASE must be https \(plain http only to this machine/);
    expect(() => loadConfig({ ...local, STRIPE_API_BASE: 'ftp://127.0.0.1' })).toThrow(/^STRIPE_API_BASE must be https/);
    expect(() => loadConfig({ ...local, STRIPE_API_BASE: 'not a url' })).toThrow(/^STRIPE_API_BASE must be a URL/);
    // an empty AWS_LAMBDA_FUNCTION_NAME is not Lambda (the variable is blank-means-unset, like every other)
    expect(loadConfig({ ...local, AWS_LAMBDA_FUNCTION_NAME: '' }).runtime).toBe('local');
  });
});
