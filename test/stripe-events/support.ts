// Shared by the Stripe-events tests: signed deliveries as Stripe makes them, received by the real
// webhook path and applied on a test file's world, and inbox reads.
import type { Db } from '../../lambdas/payments/db.ts';
import { StripeEventApplier, type ApplierOptions } from '../../lambdas/payments/event-applier.ts';
import { type StripeGateway, stripeGatewayFor } from '../../lambdas/payments/stripe-gateway.ts';
import { makeStripeEvent, paymentIntentEventType, paymentIntentJson, signStripePayload, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import { receiveWebhook, type WebhookRequest } from '../../lambdas/stripe-events/receive.ts';
import type { World } from '../support/world.ts';

export const SECRET = 'whsec_test_endpoint_secret_0123456789';

/** A delivery exactly as Stripe makes it: the raw JSON body and its Stripe-Signature header. */
export function delivery(event: StripeEventJson, options: { secret?: string; at?: number; body?: string; base64?: boolean } = {}): WebhookRequest {
  const payload = JSON.stringify(event, null, 2);
  const header = signStripePayload(payload, options.secret ?? SECRET, options.at ?? Math.floor(Date.now() / 1000));
  const body = options.body ?? payload;
  return {
    method: 'POST',
    body: options.base64 ? Buffer.from(body, 'utf8').toString('base64') : body,
    isBase64Encoded: options.base64 ?? false,
    headers: { 'stripe-signature': header, 'content-type': 'application/json' },
  };
}

/** The applier as the webhook function runs it, on the world's database and fake Stripe (fixed jitter). */
export function testApplier(world: World, options: Partial<ApplierOptions> = {}): StripeEventApplier {
  return new StripeEventApplier({ db: world.db.pool, gateway: world.stripe.gateway, actor: 'stripe-events', random: () => 0.5, ...options });
}

/**
 * A gateway holding a test-mode key and no Stripe behind it (127.0.0.1, port 9: nothing listens):
 * for tests whose events are only recorded (an unrecorded charge, a contradiction) — their mode is
 * checked against the key's, and no call is made. A call would fail as unreachable (ambiguous).
 */
export function testModeKeyOnly(): StripeGateway {
  return stripeGatewayFor({ apiKey: 'sk_test_no_stripe_behind_it', apiBase: 'http://127.0.0.1:9', timeoutMs: 500, maxNetworkRetries: 0 });
}

export const WEBHOOK_SETTINGS = { secret: SECRET, maxBodyBytes: 256 * 1024 };

/** The event signed and delivered to the real webhook path: inbox insert, then the inline apply (no bus). */
export function deliverWebhook(world: World, event: StripeEventJson) {
  return receiveWebhook(delivery(event), WEBHOOK_SETTINGS, { db: world.db.pool, applier: testApplier(world), publisher: null });
}

/** A payment_intent.* event for a PaymentIntent as the fake's ledger holds it (status overridable: an older snapshot). */
export function piEvent(pi: PaymentIntentRecord, status: string = pi.status, type?: string): StripeEventJson {
  const t = type ?? paymentIntentEventType(status);
  if (t === null) throw new Error(`no payment_intent.* event for status ${status}`);
  return makeStripeEvent(t, { ...paymentIntentJson(pi), status });
}

export async function inboxRow(db: Db, eventId: string) {
  const { rows } = await db.query('SELECT * FROM stripe_events WHERE event_id = $1', [eventId]);
  return rows[0] as { applied_at: Date | null; outcome: string | null; operation_id: string | null; attempts: number; next_attempt_at: Date; last_error: string | null; source: string } | undefined;
}

export async function count(db: Db, sql: string, params: unknown[] = []): Promise<number> {
  const { rows } = await db.query<{ n: number }>(`SELECT count(*)::int AS n FROM ${sql}`, params);
  return rows[0]!.n;
}
