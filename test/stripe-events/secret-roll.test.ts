// The webhook Lambda reading its signing secret from Secrets Manager (the fake one, the real SDK) as
// the stack deploys it (STRIPE_WEBHOOK_SECRET_ARN), on the secret cache's injected clock: a delivery
// signed with a secret put after the container read it is verified after ONE re-read (at most once a
// minute, whatever a forger sends); during a roll both secrets verify; an empty secret costs one
// read per 30 s, not one per anonymous request.
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { makeStripeEvent } from '../../local/fake-stripe/webhooks.ts';
import { EMPTY_SECRET_TTL_MS, forgetSecrets, SECRET_TTL_MS, setSecretCacheClock, STALE_PROOF_REFRESH_MIN_AGE_MS } from '../../lambdas/runtime/secrets.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { useFakeSecrets } from '../support/fake-secrets.ts';
import { captureOutput } from '../support/output.ts';
import { lambdaContext } from '../support/sqs-event.ts';
import { delivery } from './support.ts';

type WebhookHandler = (event: APIGatewayProxyEventV2, context: unknown) => Promise<APIGatewayProxyStructuredResultV2>;

const fakeSecrets = useFakeSecrets();
const ARN = 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:stripe-webhook-AbCdEf';
let db: TestDatabase;
let webhook: WebhookHandler;
let now = 5_000_000;

beforeAll(async () => {
  db = await createTestDatabase('stripe_secret_roll');
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_SECRET_KEY: 'sk_test_roll',
    STRIPE_WEBHOOK_SECRET_ARN: ARN,
    STRIPE_EVENTS_APPLY_INLINE: 'false',
    POWERTOOLS_METRICS_DISABLED: 'true',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
  });
  delete process.env.STRIPE_WEBHOOK_SECRET;
  webhook = (await import('../../lambdas/stripe-events/handler.ts')).handler as unknown as WebhookHandler;
});
afterAll(async () => {
  await (await import('../../lambdas/runtime/resources.ts')).resetResources();
  await db.drop();
});
beforeEach(() => {
  forgetSecrets();
  setSecretCacheClock(() => now);
});
afterEach(() => setSecretCacheClock());

let n = 0;
/** A signed delivery of a fresh event through the Function URL, and the status it got. */
async function deliver(secret: string): Promise<number> {
  const event = makeStripeEvent('charge.dispute.created', { id: `dp_roll_${++n}`, object: 'dispute', charge: 'ch_x', payment_intent: 'pi_x', amount: 100, currency: 'eur', status: 'needs_response' });
  const request = delivery(event, { secret });
  const url = {
    version: '2.0',
    routeKey: '$default',
    rawPath: '/',
    rawQueryString: '',
    headers: request.headers,
    requestContext: { http: { method: 'POST', path: '/', protocol: 'HTTP/1.1', sourceIp: '3.18.12.63', userAgent: 'Stripe/1.0' } },
    body: request.body,
    isBase64Encoded: false,
  } as unknown as APIGatewayProxyEventV2;
  const { result } = await captureOutput(() => webhook(url, lambdaContext(10_000, 'stripe-webhook')));
  return result.statusCode!;
}

describe('the signing secret in Secrets Manager', () => {
  it('a delivery signed with a secret put since the read is accepted after one re-read, at most once a minute', async () => {
    const before = fakeSecrets().reads(ARN);
    const reads = () => fakeSecrets().reads(ARN) - before;
    fakeSecrets().put(ARN, '{"secret": "whsec_before"}');
    expect(await deliver('whsec_before')).toBe(200);
    expect(reads()).toBe(1);

    // The endpoint's secret was changed and put; this container read the old one 10 s ago.
    fakeSecrets().put(ARN, '{"secret": "whsec_after"}');
    now += 10_000;
    expect(await deliver('whsec_after')).toBe(400);
    expect(reads()).toBe(1);

    // A minute after the read, the same mismatch reads the secret once more and verifies with it.
    now += STALE_PROOF_REFRESH_MIN_AGE_MS;
    expect(await deliver('whsec_after')).toBe(200);
    expect(reads()).toBe(2);

    // Forgeries right after cost no read at all.
    for (let i = 0; i < 5; i++) expect(await deliver('whsec_forger')).toBe(400);
    expect(reads()).toBe(2);
    expect(await deliver('whsec_after')).toBe(200);
  });

  it('during a roll the new and the previous secret both verify; nothing else does', async () => {
    fakeSecrets().put(ARN, JSON.stringify({ secret: 'whsec_new', previous: 'whsec_old' }));
    expect(await deliver('whsec_old')).toBe(200);
    expect(await deliver('whsec_new')).toBe(200);
    expect(await deliver('whsec_other')).toBe(400);
    // The roll is over: the previous one is taken out, and within the cache's 5 minutes it no longer verifies.
    fakeSecrets().put(ARN, JSON.stringify({ secret: 'whsec_new' }));
    now += SECRET_TTL_MS;
    expect(await deliver('whsec_old')).toBe(400);
    expect(await deliver('whsec_new')).toBe(200);
  });

  it('empty (as the stack creates it): 503 to every delivery, one read per 30 s however many arrive', async () => {
    const before = fakeSecrets().reads(ARN);
    fakeSecrets().put(ARN, '{"secret": ""}');
    for (let i = 0; i < 10; i++) expect(await deliver('whsec_anyone')).toBe(503);
    expect(fakeSecrets().reads(ARN) - before).toBe(1);
    fakeSecrets().put(ARN, '{"secret": "whsec_pasted"}');
    now += EMPTY_SECRET_TTL_MS;
    expect(await deliver('whsec_pasted')).toBe(200);
    expect(fakeSecrets().reads(ARN) - before).toBe(2);
  });
});
