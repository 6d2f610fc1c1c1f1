// The exported Lambdas, driven with the environment the stack sets: the webhook function behind its
// Function URL (record only, then the reconciler applies the leftovers and reports the inbox
// gauges), and what they print — never the body, never the signing secret.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import type { ReconcileSummary } from '../../lambdas/reconcile/sweep.ts';
import { ConfigError } from '../../lambdas/runtime/config.ts';
import { loadStripeEventsConfig } from '../../lambdas/stripe-events/config.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { chargeOrder } from '../support/orders.ts';
import { lambdaContext } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { delivery, inboxRow, piEvent, SECRET } from './support.ts';
import { captureOutput as capture } from '../support/output.ts';

type WebhookHandler = (event: APIGatewayProxyEventV2, context: unknown) => Promise<APIGatewayProxyStructuredResultV2>;
type ReconcileHandler = (event: unknown, context: unknown) => Promise<ReconcileSummary>;

let db: TestDatabase;
let stripe: StripeHarness;
let webhook: WebhookHandler;
let reconcile: ReconcileHandler;

beforeAll(async () => {
  db = await createTestDatabase('stripe_handlers');
  stripe = await startStripe();
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_SECRET_KEY: 'sk_test_handlers',
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_TIMEOUT_MS: '1000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    STRIPE_WEBHOOK_SECRET: SECRET,
    STRIPE_EVENTS_APPLY_INLINE: 'false',
    RECONCILE_SAFETY_MARGIN_MS: '500',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  webhook = (await import('../../lambdas/stripe-events/handler.ts')).handler as unknown as WebhookHandler;
  reconcile = (await import('../../lambdas/reconcile/handler.ts')).handler as unknown as ReconcileHandler;
});
afterAll(async () => {
  await (await import('../../lambdas/runtime/resources.ts')).resetResources();
  await stripe.close();
  await db.drop();
});

/** A Function URL event (payload format 2.0) around a signed delivery. */
function functionUrlEvent(request: ReturnType<typeof delivery>): APIGatewayProxyEventV2 {
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath: '/',
    rawQueryString: '',
    headers: request.headers as Record<string, string>,
    requestContext: { http: { method: 'POST', path: '/', protocol: 'HTTP/1.1', sourceIp: '3.18.12.63', userAgent: 'Stripe/1.0' } } as APIGatewayProxyEventV2['requestContext'],
    body: request.body ?? undefined,
    isBase64Encoded: request.isBase64Encoded ?? false,
  } as APIGatewayProxyEventV2;
}

describe('the webhook Lambda and the reconciler', () => {
  it('record only at the endpoint (1 statement), then the reconcile run applies the leftover and reports the inbox gauges', async () => {
    stripe.fake.injectFault({}, 'processing');
    const [r] = await new ChargeEngine({ db: db.pool, gateway: stripe.gateway }).processRequests([chargeOrder()]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    stripe.fake.settle(op.externalId!, 'succeeded');
    const event = piEvent(stripe.fake.paymentIntents({ operationId: op.id })[0]!);

    const request = delivery(event);
    const { result: answer, output } = await capture(() => webhook(functionUrlEvent(request), lambdaContext(10_000, 'stripe-webhook')));
    expect(answer).toMatchObject({ statusCode: 200 });
    expect(JSON.parse(answer.body!)).toEqual({ received: true, duplicate: false });
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ applied_at: null });
    expect(output).toContain('stripe event recorded');
    expect(output).not.toContain(SECRET);
    expect(output).not.toContain(op.externalId!);
    expect(output).not.toContain(request.headers!['stripe-signature']!);

    const summary = await reconcile({ source: 'aws.scheduler' }, lambdaContext(60_000, 'reconcile'));
    expect(summary.stripeEvents).toMatchObject({ applied: 1, byOutcome: { settled: 1 } });
    expect(summary.gauges?.inbox).toMatchObject({ backlog: 0, oldestBacklogAgeSeconds: 0 });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'settled' });
  });

  it('a forged delivery → 400 from the Lambda, logged by code only', async () => {
    const request = delivery(piEvent({ ...stripe.fake.paymentIntents()[0]! }), { secret: 'whsec_forger' });
    const { result, output } = await capture(() => webhook(functionUrlEvent(request), lambdaContext(10_000, 'stripe-webhook')));
    expect(result).toMatchObject({ statusCode: 400, body: JSON.stringify({ error: 'signature_mismatch' }) });
    expect(output).toContain('signature_mismatch');
    expect(output).not.toContain('whsec_');
    expect(output).not.toContain('"amount"');
  });
});

describe('the EventBridge door of the same Lambda', () => {
  it('STRIPE_EVENTS_INPUT=eventbridge: a partner event is recorded and applied; a Function URL request is refused', async () => {
    process.env.STRIPE_EVENTS_INPUT = 'eventbridge';
    process.env.STRIPE_EVENTS_APPLY_INLINE = 'true';
    try {
      stripe.fake.injectFault({}, 'processing');
      const [r] = await new ChargeEngine({ db: db.pool, gateway: stripe.gateway }).processRequests([chargeOrder()]);
      const op = (await findOperation(db.pool, r!.operationId))!;
      stripe.fake.settle(op.externalId!, 'succeeded');
      const event = piEvent(stripe.fake.paymentIntents({ operationId: op.id })[0]!);
      const partner = { version: '0', id: 'e1', 'detail-type': event.type, source: 'aws.partner/stripe.com/ed_test_1', account: '1', time: '', region: 'us-east-1', resources: [], detail: event };
      const result = await webhook(partner as never, lambdaContext(10_000, 'stripe-events'));
      expect(result).toEqual({ result: 'recorded' });
      expect(await inboxRow(db.pool, event.id)).toMatchObject({ source: 'eventbridge', outcome: 'settled' });
      expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
      // The wrong door: a webhook delivery to a function configured for EventBridge is not recorded.
      const refused = await capture(() => webhook(functionUrlEvent(delivery(piEvent(stripe.fake.paymentIntents()[0]!))), lambdaContext(10_000, 'stripe-events')));
      expect(refused.result).toMatchObject({ statusCode: 503 });
    } finally {
      process.env.STRIPE_EVENTS_INPUT = 'webhook';
      process.env.STRIPE_EVENTS_APPLY_INLINE = 'false';
    }
  });
});

describe('configuration', () => {
  it('refuses a signing secret that is not one, and bad bounds, with what to change', () => {
    expect(() => loadStripeEventsConfig({ STRIPE_WEBHOOK_SECRET: 'sk_test_oops' })).toThrow(ConfigError);
    expect(() => loadStripeEventsConfig({ STRIPE_WEBHOOK_SECRET: 'sk_test_oops' })).toThrow(/whsec_/);
    expect(() => loadStripeEventsConfig({ STRIPE_WEBHOOK_MAX_BODY_BYTES: '10' })).toThrow(/STRIPE_WEBHOOK_MAX_BODY_BYTES/);
    expect(() => loadStripeEventsConfig({ STRIPE_EVENTS_APPLY_INLINE: 'yes' })).toThrow(/true or false/);
    expect(() => loadStripeEventsConfig({ STRIPE_PARTNER_EVENT_SOURCE: 'my.bus' })).toThrow(/aws.partner\/stripe.com/);
    expect(loadStripeEventsConfig({})).toMatchObject({ maxBodyBytes: 256 * 1024, applyInline: true, webhookSecret: undefined });
  });
});
