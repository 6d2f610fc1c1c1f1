// Per-container resources of the Stripe-events functions: the shared pool, Stripe gateway and
// publisher (lambdas/runtime/resources.ts) and one applier built on them.
import { StripeEventApplier } from '../payments/event-applier.ts';
import type { RuntimeConfig } from '../runtime/config.ts';
import { describeError, type LogSink } from '../runtime/observability.ts';
import { getEventPublisher, getPool, getStripeGateway } from '../runtime/resources.ts';
import type { StripeEventsConfig } from './config.ts';
import type { ReceiveDeps } from './receive.ts';

export async function receiveDeps(config: RuntimeConfig, eventsConfig: StripeEventsConfig, log: LogSink): Promise<ReceiveDeps> {
  const db = await getPool(config, (error) => log.warn('idle database connection lost', describeError(error)));
  if (!eventsConfig.applyInline) return { db, applier: null, publisher: null, log };
  // Without a Stripe key the events that need a retrieve wait in the inbox; the rest is applied.
  const gateway = await Promise.resolve().then(() => getStripeGateway(config)).catch((error: unknown) => {
    log.warn('Stripe key unavailable; events needing a retrieve wait for the reconciler', describeError(error));
    return null;
  });
  return {
    db,
    applier: new StripeEventApplier({ db, gateway, actor: 'stripe-events', policy: config.policy, connectedAccounts: config.stripe.connectedAccounts }),
    publisher: getEventPublisher(config),
    log,
  };
}
