// Stripe test mode with real webhooks, as docs/quickstart.md tells it: `stripe listen --forward-to`
// the local endpoint, and STRIPE_WEBHOOK_SECRET set to the secret it prints. Here a separately
// started fake Stripe stands for Stripe (STRIPE_API_BASE, as `npm run fake-stripe` does) and its
// signed deliveries, pointed at the pipeline's endpoint, for the Stripe CLI forwarding them: the
// real stripe-events handler behind the endpoint records and applies them; a forged one is refused.
import { describe, expect, it } from 'vitest';
import { sendChargeRequest } from '../../lambdas/producer/client.ts';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import { WebhookDispatcher } from '../../local/fake-stripe/webhooks.ts';
import { readStripeEventsLedger } from '../../local/stripe-events.ts';
import { chargeOrder } from '../support/orders.ts';
import { startTestPipeline } from './support.ts';

describe('an external Stripe with STRIPE_WEBHOOK_SECRET', () => {
  it('gets a local endpoint for stripe listen --forward-to, behind which the real handler records and applies the events', async () => {
    const stripe = await startFakeStripe();
    const secret = 'whsec_stripe_listen_test';
    const pipeline = await startTestPipeline({
      stripe: { kind: 'external', secretKey: 'sk_test_stripe_listen', apiBase: stripe.url, webhookSecret: secret },
    });
    // The Stripe CLI's part: Stripe's events, signed with the listen secret, POSTed to the endpoint.
    const forwarder = new WebhookDispatcher({ fake: stripe, endpoint: pipeline.webhookEndpoint!.url, secret, retryScale: 1 / 3600 });
    const forger = new WebhookDispatcher({ fake: stripe, endpoint: pipeline.webhookEndpoint!.url, secret: 'whsec_not_the_one', maxAttempts: 1 });
    try {
      expect(pipeline.webhookEndpoint?.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/);
      expect(pipeline.webhooks).toBeNull();
      forwarder.start();
      const order = chargeOrder();
      await sendChargeRequest(pipeline.sqs.client, pipeline.sqs.queueUrl, order);
      expect((await pipeline.waitUntilSettled({ intakeDone: () => true, timeoutMs: 30_000 })).kind).toBe('settled');
      await forwarder.drain();
      const forged = forger.send('payment_intent.succeeded', stripe.paymentIntents({ orderId: order.orderId })[0]! as unknown as Record<string, unknown>);
      await forger.drain();
      // An event that met its operation still leased (the charge handler's own write in flight) is
      // recorded and applied later, by the reconciler's sweep: wait for the inbox to be worked off.
      let ledger = await readStripeEventsLedger(pipeline.db, pipeline.webhookEndpoint);
      for (let i = 0; i < 300 && ledger.applied < ledger.received; i++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        ledger = await readStripeEventsLedger(pipeline.db, pipeline.webhookEndpoint);
      }
      expect(ledger.received).toBeGreaterThan(0);
      expect(ledger.applied).toBe(ledger.received);
      expect(ledger.rejected).toBe(1);
      expect(ledger.delivery).toBeNull();
      expect(forged.id).toMatch(/^evt_/);
    } finally {
      await forwarder.stop();
      await forger.stop();
      await pipeline.stop();
      await stripe.close();
    }
  }, 90_000);
});
