// The real stripe SDK, over HTTP, against the project's fake Stripe server.
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import type { FakeStripe, FakeStripeOptions } from '../../local/fake-stripe/types.ts';
import { createStripeClient, StripeGateway } from '../../lambdas/payments/stripe-gateway.ts';

export interface StripeHarness {
  readonly fake: FakeStripe;
  readonly gateway: StripeGateway;
  close(): Promise<void>;
}

export async function startStripe(
  options: FakeStripeOptions = {},
  client: { timeoutMs?: number; maxNetworkRetries?: number } = {},
): Promise<StripeHarness> {
  const fake = await startFakeStripe(options);
  const stripe = createStripeClient({
    apiKey: 'sk_test_engine',
    apiBase: fake.url,
    timeoutMs: client.timeoutMs ?? 2_000,
    maxNetworkRetries: client.maxNetworkRetries ?? 0,
  });
  return { fake, gateway: new StripeGateway(stripe), close: () => fake.close() };
}
