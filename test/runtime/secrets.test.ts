// A secret whose text is not JSON is named by its ARN only: Node 24's JSON.parse message quotes the
// text near the error (`Unexpected token 's', ..."apiKey": sk_live_ab"... is not valid JSON`), and
// describeError would carry it to the logs. The real SDK against the fake Secrets Manager endpoint.
// (The login secrets, through the migrate handler: test/handlers/migrate.test.ts.)
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../lambdas/runtime/config.ts';
import { describeError } from '../../lambdas/runtime/observability.ts';
import { createConfiguredStripeClient } from '../../lambdas/runtime/resources.ts';
import { forgetSecrets, parseLoginSecret, parseSecretJson } from '../../lambdas/runtime/secrets.ts';
import { webhookSecrets, type StripeEventsConfig } from '../../lambdas/stripe-events/config.ts';
import { useFakeSecrets } from '../support/fake-secrets.ts';

const ARN = 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:charges-stripe-AbCdEf';
const fakeSecrets = useFakeSecrets();

/** What a caller would log of the error: its message, its stack and describeError's fields. */
const everything = (error: unknown) => JSON.stringify([(error as Error).message, String((error as Error).stack), describeError(error)]);

describe('a secret that is not JSON', () => {
  it('parseSecretJson / parseLoginSecret: the ARN and the shape it must have, none of its text', () => {
    for (const raw of ['hunter2-supersecret', '{"apiKey": sk_live_abcdef123}', '{"username": "charges_app", "password": hunter2-x}']) {
      let error: unknown;
      try {
        parseLoginSecret(ARN, raw);
      } catch (e) {
        error = e;
      }
      expect(error, raw).toMatchObject({ name: 'ConfigError', message: `secret ${ARN} is not JSON (it must be {"username": …, "password": …})` });
      expect(everything(error), raw).not.toMatch(/hunter2|sk_live/);
    }
    expect(parseSecretJson(ARN, '"a string"', 'x')).toEqual({});
    expect(() => parseLoginSecret(ARN, '{"username": "charges_app", "password": "pw-0000000000000001"}', 'other')).toThrow(`the login secret ${ARN} must hold username "other" and a password`);
  });

  it('the Stripe key secret (JSON {"apiKey": …} or the key): refused naming the ARN, the key not quoted', async () => {
    fakeSecrets().put(ARN, '{"apiKey": sk_live_abcdef123}');
    forgetSecrets();
    const config = loadConfig({ DATABASE_URL: 'postgres://localhost/x', STRIPE_SECRET_ARN: ARN, AWS_REGION: 'eu-west-1' });
    const error = await createConfiguredStripeClient(config).then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ name: 'ConfigError', message: `secret ${ARN} is not JSON (it must be {"apiKey": "…"} or the key)` });
    expect(everything(error)).not.toContain('sk_live_abc');
  });

  it('the webhook signing secret (JSON {"secret": …} or the secret): refused naming the ARN, the secret not quoted', async () => {
    fakeSecrets().put(ARN, '{"secret": whsec_abcdef123}');
    forgetSecrets();
    const config = { webhookSecret: undefined, webhookSecretArn: ARN } as unknown as StripeEventsConfig;
    const error = await webhookSecrets(config, 'eu-west-1').then(() => undefined, (e: unknown) => e);
    expect(error).toMatchObject({ name: 'ConfigError', message: `secret ${ARN} is not JSON (it must be {"secret": "whsec_…"} or the secret)` });
    expect(everything(error)).not.toContain('whsec_abc');
    // …and the well-formed shapes still read.
    fakeSecrets().put(ARN, '{"secret": "whsec_abcdef123"}');
    forgetSecrets();
    expect(await webhookSecrets(config, 'eu-west-1')).toEqual({ secret: 'whsec_abcdef123', previousSecret: null });
  });
});
