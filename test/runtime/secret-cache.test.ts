// The container's secret cache (lambdas/runtime/secrets.ts) against the fake Secrets Manager, with the
// real @aws-sdk/client-secrets-manager, on an injected clock (no verdict here depends on wall time):
// a value is kept 5 minutes, an empty secret 30 seconds, a failed re-read keeps the value it replaces,
// a value shown stale is read again at most once a minute — and the Stripe key that a 401 refuses is
// read again and used. (The webhook signing secret's roll, through the Lambda: test/stripe-events/secret-roll.test.ts.)
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import { FailureKind } from '../../lambdas/payments/gateway.ts';
import { loadConfig } from '../../lambdas/runtime/config.ts';
import { currentStripeKey, CurrentKeyGateway } from '../../lambdas/runtime/resources.ts';
import {
  EMPTY_SECRET_TTL_MS,
  FAILED_REFRESH_RETRY_MS,
  forgetSecrets,
  getSecretString,
  refreshSecret,
  SECRET_TTL_MS,
  setSecretCacheClock,
  STALE_PROOF_REFRESH_MIN_AGE_MS,
} from '../../lambdas/runtime/secrets.ts';
import { webhookSecrets, type StripeEventsConfig } from '../../lambdas/stripe-events/config.ts';
import { useFakeSecrets } from '../support/fake-secrets.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

const fakeSecrets = useFakeSecrets();
let arnSeq = 0;
/** A secret of its own per test: the fake's read counts are per ARN. */
const newArn = () => `arn:aws:secretsmanager:eu-west-1:111111111111:secret:cache-test-${++arnSeq}-AbCdEf`;

let now = 1_000_000;
beforeEach(() => {
  now = 1_000_000;
  forgetSecrets();
  setSecretCacheClock(() => now);
});
afterEach(() => setSecretCacheClock());

describe('a secret value', () => {
  it('is kept 5 minutes, then read again (a rolled key reaches a warm container without a redeploy)', async () => {
    const arn = newArn();
    fakeSecrets().put(arn, 'value-1');
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
    fakeSecrets().put(arn, 'value-2');
    now += SECRET_TTL_MS - 1;
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
    expect(fakeSecrets().reads(arn)).toBe(1);
    now += 1;
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-2');
    expect(fakeSecrets().reads(arn)).toBe(2);
    expect(SECRET_TTL_MS).toBe(300_000);
  });

  it('a re-read that fails keeps the value it replaces, and is tried again 30 s later', async () => {
    const arn = newArn();
    fakeSecrets().put(arn, 'value-1');
    await getSecretString(arn, 'eu-west-1');
    now += SECRET_TTL_MS;
    fakeSecrets().setUnavailable(true);
    try {
      expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
      const afterOutage = fakeSecrets().reads(arn);
      expect(afterOutage).toBeGreaterThan(1);
      now += FAILED_REFRESH_RETRY_MS - 1;
      expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
      expect(fakeSecrets().reads(arn)).toBe(afterOutage);
    } finally {
      fakeSecrets().setUnavailable(false);
    }
    fakeSecrets().put(arn, 'value-2');
    now += 1;
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-2');
  });

  it('a first read that fails is not kept: the next call reads again', async () => {
    const arn = newArn();
    fakeSecrets().setUnavailable(true);
    try {
      await expect(getSecretString(arn, 'eu-west-1')).rejects.toMatchObject({ name: 'InternalServiceError' });
    } finally {
      fakeSecrets().setUnavailable(false);
    }
    fakeSecrets().put(arn, 'value-1');
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
  });

  it('shown stale (refreshSecret) is read again at the next call — at most once a minute', async () => {
    const arn = newArn();
    fakeSecrets().put(arn, 'value-1');
    await getSecretString(arn, 'eu-west-1');
    fakeSecrets().put(arn, 'value-2');
    now += STALE_PROOF_REFRESH_MIN_AGE_MS - 1;
    expect(refreshSecret(arn, STALE_PROOF_REFRESH_MIN_AGE_MS)).toBe(false);
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-1');
    now += 1;
    expect(refreshSecret(arn, STALE_PROOF_REFRESH_MIN_AGE_MS)).toBe(true);
    expect(await getSecretString(arn, 'eu-west-1')).toBe('value-2');
    // Just read: a second proof of staleness right after does not read again.
    expect(refreshSecret(arn, STALE_PROOF_REFRESH_MIN_AGE_MS)).toBe(false);
    expect(fakeSecrets().reads(arn)).toBe(2);
  });
});

describe('an empty secret (the stack creates them so)', () => {
  const stripeConfig = (arn: string) => loadConfig({ DATABASE_URL: 'postgres://u:p@127.0.0.1/x', STRIPE_SECRET_ARN: arn, AWS_REGION: 'eu-west-1' });

  it('the Stripe key {"apiKey": ""}: refused, kept 30 s (not one read per call), then read again', async () => {
    const arn = newArn();
    fakeSecrets().put(arn, '{"apiKey": ""}');
    for (let i = 0; i < 5; i++) await expect(currentStripeKey(stripeConfig(arn))).rejects.toThrow(/the Stripe secret is empty/);
    expect(fakeSecrets().reads(arn)).toBe(1);
    fakeSecrets().put(arn, '{"apiKey": "sk_test_put_by_an_operator"}');
    now += EMPTY_SECRET_TTL_MS - 1;
    await expect(currentStripeKey(stripeConfig(arn))).rejects.toThrow(/empty/);
    now += 1;
    expect(await currentStripeKey(stripeConfig(arn))).toBe('sk_test_put_by_an_operator');
    expect(fakeSecrets().reads(arn)).toBe(2);
  });

  it('the webhook secret {"secret": ""} or no value at all: none yet (503), kept 30 s', async () => {
    for (const empty of ['{"secret": ""}', '']) {
      const arn = newArn();
      fakeSecrets().put(arn, empty);
      const config = { webhookSecret: undefined, webhookSecretArn: arn } as unknown as StripeEventsConfig;
      for (let i = 0; i < 5; i++) expect(await webhookSecrets(config, 'eu-west-1'), empty).toBeNull();
      expect(fakeSecrets().reads(arn), empty).toBe(1);
      now += EMPTY_SECRET_TTL_MS;
      fakeSecrets().put(arn, '{"secret": "whsec_filled_in"}');
      expect(await webhookSecrets(config, 'eu-west-1'), empty).toEqual({ secret: 'whsec_filled_in', previousSecret: null });
    }
  });

  it('the webhook secret during a roll holds the new one and the previous one; anything but whsec_… is refused naming the ARN', async () => {
    const arn = newArn();
    const config = { webhookSecret: undefined, webhookSecretArn: arn } as unknown as StripeEventsConfig;
    fakeSecrets().put(arn, '{"secret": "whsec_new", "previous": "whsec_old"}');
    expect(await webhookSecrets(config, 'eu-west-1')).toEqual({ secret: 'whsec_new', previousSecret: 'whsec_old' });
    const other = newArn();
    fakeSecrets().put(other, '{"secret": "whsec_new", "previous": "sk_live_oops"}');
    const error = await webhookSecrets({ ...config, webhookSecretArn: other }, 'eu-west-1').then(() => null, (e: unknown) => e as Error);
    expect(error?.message).toMatch(new RegExp(`^secret ${other} must hold endpoint signing secrets \\(whsec_…\\)`));
    expect(error?.message).not.toContain('sk_live_oops');
  });
});

describe('the Stripe key a 401 refuses', () => {
  let stripe: StripeHarness;
  afterAll(async () => stripe?.close());

  it('is read again once (at most once a minute) and the new key is used; a key read from the secret follows the live-key rule', async () => {
    // The account accepts only the rolled key; the container still holds the old one.
    stripe ??= await startStripe({ apiKeys: ['sk_test_rolled'] });
    const arn = newArn();
    fakeSecrets().put(arn, 'sk_test_old');
    const config = loadConfig({
      DATABASE_URL: 'postgres://u:p@127.0.0.1/x',
      STRIPE_SECRET_ARN: arn,
      STRIPE_API_BASE: stripe.fake.url,
      STRIPE_MAX_NETWORK_RETRIES: '0',
      AWS_REGION: 'eu-west-1',
    });
    const gateway = new CurrentKeyGateway(config, await currentStripeKey(config));
    fakeSecrets().put(arn, 'sk_test_rolled');

    // Read 10 s ago: a 401 does not make it read again yet (forged or not, at most once a minute).
    now += 10_000;
    const refused = await gateway.retrievePaymentIntent('pi_missing');
    expect(refused).toMatchObject({ ok: false, failure: { kind: FailureKind.authentication, httpStatus: 401 } });
    expect((await gateway.retrievePaymentIntent('pi_missing')).ok === false && fakeSecrets().reads(arn)).toBe(1);

    now += STALE_PROOF_REFRESH_MIN_AGE_MS;
    expect(await gateway.retrievePaymentIntent('pi_missing')).toMatchObject({ ok: false, failure: { kind: FailureKind.authentication } });
    // …and the next call goes out with the rolled key: Stripe answers (404: it exists no more than before).
    expect(await gateway.retrievePaymentIntent('pi_missing')).toMatchObject({ ok: false, failure: { kind: FailureKind.notFound, httpStatus: 404 } });
    expect(fakeSecrets().reads(arn)).toBe(2);

    // A live key put into the secret while STRIPE_API_BASE points elsewhere: nothing is sent to it.
    const sentBefore = stripe.fake.requests().length;
    fakeSecrets().put(arn, 'sk_live_put_by_mistake');
    now += SECRET_TTL_MS;
    const live = await gateway.retrievePaymentIntent('pi_missing');
    expect(live).toMatchObject({ ok: false, failure: { kind: FailureKind.authentication, errorClass: 'ConfigError', message: expect.stringMatching(/^STRIPE_API_BASE is refused with a live Stripe key/) } });
    expect(JSON.stringify(live)).not.toContain('sk_live_put');
    expect(stripe.fake.requests().length).toBe(sentBefore);
  });
});
