// The REAL stripe-events Lambda on a test file's own database and fake Stripe, through both of its
// doors: signed webhooks POSTed over HTTP by the fake Stripe's dispatcher to a Function-URL stand-in
// in front of the unchanged handler (local/stripe-events.ts), and the handler invoked as EventBridge
// invokes it for the partner-bus door. Only what a test sends is delivered (the dispatcher does not
// watch the fake's ledger).
import { afterAll, beforeAll, beforeEach, expect } from 'vitest';
import type { EventOrigin, StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import { startLocalWebhooks, type LocalWebhooks } from '../../local/stripe-events.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { SECRET } from './support.ts';

type PartnerHandler = (event: unknown, context: unknown) => Promise<{ result: string }>;

export interface HandlerHarness {
  readonly db: TestDatabase;
  readonly stripe: StripeHarness;
  readonly webhooks: LocalWebhooks;
  /** Signed and POSTed by the fake Stripe to the local Function URL of the real handler; resolves once answered (200). */
  sendOverHttp(type: string, object: Record<string, unknown>, origin?: EventOrigin): Promise<StripeEventJson>;
  /** The partner-bus door: the function invoked with an EventBridge event whose detail is the Stripe event. */
  sendThroughEventBridge(event: StripeEventJson): Promise<void>;
  resetResources(): Promise<void>;
}

/** Starts the world in beforeAll and stops it in afterAll; `ready` receives it. `apiKeys`: the keys the fake takes. */
export function useHandlerHarness(label: string, ready: (h: HandlerHarness) => void, options: { readonly apiKeys?: readonly string[] } = {}): void {
  let h: (HandlerHarness & { stop(): Promise<void> }) | undefined;
  beforeAll(async () => {
    const db = await createTestDatabase(label);
    const stripe = await startStripe(options.apiKeys ? { apiKeys: [...options.apiKeys] } : {});
    Object.assign(process.env, {
      DATABASE_URL: db.url,
      STRIPE_SECRET_KEY: 'sk_test_engine',
      STRIPE_API_BASE: stripe.fake.url,
      STRIPE_TIMEOUT_MS: '2000',
      STRIPE_MAX_NETWORK_RETRIES: '0',
      STRIPE_WEBHOOK_SECRET: SECRET,
      STRIPE_EVENTS_INPUT: 'webhook',
      STRIPE_EVENTS_APPLY_INLINE: 'true',
      POWERTOOLS_METRICS_DISABLED: 'true',
      POWERTOOLS_LOG_LEVEL: 'SILENT',
    });
    const webhooks = await startLocalWebhooks(stripe.fake, SECRET, { watch: false });
    const handler = (await import('../../lambdas/stripe-events/handler.ts')).handler as unknown as PartnerHandler;
    const resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
    h = {
      db,
      stripe,
      webhooks,
      resetResources,
      async sendOverHttp(type, object, origin = {}) {
        const before = webhooks.answers()['200'] ?? 0;
        const event = webhooks.dispatcher.send(type, object, origin);
        await webhooks.dispatcher.drain();
        expect(webhooks.answers()['200'] ?? 0).toBe(before + 1); // acknowledged: Stripe does not retry a refusal that is recorded
        return event;
      },
      async sendThroughEventBridge(event) {
        process.env.STRIPE_EVENTS_INPUT = 'eventbridge';
        try {
          const partner = { version: '0', id: `eb-${event.id}`, 'detail-type': event.type, source: 'aws.partner/stripe.com/ed_test_harness', account: '111122223333', time: new Date().toISOString(), region: 'eu-west-1', resources: [], detail: event };
          expect(await handler(partner, lambdaContext(10_000, 'stripe-events'))).toEqual({ result: 'recorded' });
        } finally {
          process.env.STRIPE_EVENTS_INPUT = 'webhook';
        }
      },
      async stop() {
        await webhooks.stop();
        await resetResources();
        await stripe.close();
        await db.drop();
      },
    };
    ready(h);
  });
  afterAll(async () => {
    await h?.stop();
  });
  beforeEach(() => {
    h!.stripe.fake.reset();
    h!.webhooks.dispatcher.setOrigin({});
  });
}
