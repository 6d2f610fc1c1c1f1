// The real stripe SDK, over HTTP, against the project's fake Stripe server.
import { randomUUID } from 'node:crypto';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import type { FakeStripe, FakeStripeOptions } from '../../local/fake-stripe/types.ts';
import { type StripeGateway, stripeGatewayFor } from '../../lambdas/payments/stripe-gateway.ts';

export interface StripeHarness {
  readonly fake: FakeStripe;
  readonly gateway: StripeGateway;
  close(): Promise<void>;
}

export async function startStripe(
  options: FakeStripeOptions = {},
  client: { timeoutMs?: number; maxNetworkRetries?: number; apiKey?: string } = {},
): Promise<StripeHarness> {
  const fake = await startFakeStripe(options);
  // A test-mode key, as the fake accepts by default: the gateway knows its mode (test).
  const gateway = stripeGatewayFor({
    apiKey: client.apiKey ?? 'sk_test_engine',
    apiBase: fake.url,
    timeoutMs: client.timeoutMs ?? 2_000,
    maxNetworkRetries: client.maxNetworkRetries ?? 0,
  });
  return { fake, gateway, close: () => fake.close() };
}

/**
 * A PaymentIntent for `order` carrying `operationId`'s metadata, made through the gateway under a key
 * that is not the engine's (a double send under another key, another system, a stranger): what the
 * List, the checker or the remedy must then explain. Key generation 0 and the order's own amount and
 * payment method unless said.
 */
export function plantPaymentIntent(
  harness: StripeHarness,
  order: ChargeInput,
  operationId: string,
  options: { readonly idempotencyKey?: string; readonly amount?: number; readonly paymentMethod?: string; readonly keyGeneration?: number; readonly captureMethod?: 'manual' } = {},
) {
  return harness.gateway.createPaymentIntent({
    idempotencyKey: options.idempotencyKey ?? `planted-${randomUUID()}`,
    amount: options.amount ?? order.amount,
    currency: order.currency,
    customerId: order.customerId,
    paymentMethod: options.paymentMethod ?? order.paymentMethod,
    ...(options.captureMethod ? { captureMethod: options.captureMethod } : {}),
    metadata: { operation_id: operationId, order_id: order.orderId, key_generation: String(options.keyGeneration ?? 0) },
  });
}
