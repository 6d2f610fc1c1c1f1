// Per-container resources, created on first use and reused by every invocation the container serves:
// the database pool, the secrets, the Stripe gateway, the EventBridge publisher. Lambda freezes the
// container between invocations; keeping these outside the handler is what makes a warm call cheap.
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import pg from 'pg';
import type Stripe from 'stripe';
import { EventBridgePublisher, type EventPublisher } from '../events/outbox.ts';
import { createStripeClient, type StripeGateway, stripeGatewayFor } from '../payments/stripe-gateway.ts';
import { assertStripeConfigured, ConfigError, type RuntimeConfig } from './config.ts';
import { CredentialRefreshingPool, databaseClientConfig, forgetDatabaseSecret } from './database.ts';
import { forgetSecrets, getSecretString, parseSecretJson } from './secrets.ts';

export { getSecretString } from './secrets.ts';
export { databaseClientConfig } from './database.ts';

async function poolConfig(config: RuntimeConfig): Promise<pg.PoolConfig> {
  return { ...(await databaseClientConfig(config)), max: config.database.poolMax, idleTimeoutMillis: 60_000 };
}

let pool: Promise<pg.Pool> | undefined;

/**
 * The container's pool, bounded (DB_POOL_MAX). An idle connection that dies (a database restart, a
 * failover) must not crash the process: the error is reported and the pool replaces the connection.
 */
export function getPool(config: RuntimeConfig, onIdleError: (error: Error) => void = () => {}): Promise<pg.Pool> {
  if (!pool) {
    pool = poolConfig(config).then((settings) => {
      const created = new CredentialRefreshingPool(settings, () => forgetDatabaseSecret(config));
      created.on('error', onIdleError);
      // pg-pool listens for a client's errors only while it is idle: one the server drops while it is
      // checked out, or while it is being ended (pool.end() does not wait for the socket), would raise
      // an uncaught 'error'. Every client keeps a listener for its whole life; the query in flight, if
      // any, still gets the error itself.
      created.on('connect', (client) => client.on('error', onIdleError));
      return created;
    });
    pool.catch(() => {
      pool = undefined;
    });
  }
  return pool;
}

/**
 * The Stripe key from the configuration: STRIPE_SECRET_KEY locally; on AWS the Secrets Manager
 * secret, holding the key or JSON {"apiKey": "…"}. The stack creates that secret empty and an operator
 * fills it in: an empty read is forgotten, so a warm container sees the key as soon as it is there.
 */
async function configuredStripeKey(config: RuntimeConfig): Promise<string> {
  assertStripeConfigured(config);
  let apiKey = config.stripe.apiKey;
  if (!apiKey) {
    const raw = await getSecretString(config.stripe.secretArn!, config.region);
    const value = raw.trim().startsWith('{') ? parseSecretJson(config.stripe.secretArn!, raw, '{"apiKey": "…"} or the key').apiKey : raw.trim();
    apiKey = typeof value === 'string' ? value : undefined;
  }
  if (!apiKey) {
    if (config.stripe.secretArn) forgetSecrets(config.stripe.secretArn);
    throw new ConfigError('the Stripe secret is empty: put the key into it (see docs/deploy.md, Put the Stripe key)');
  }
  return apiKey;
}

const clientOptions = (config: RuntimeConfig, apiKey: string) => ({
  apiKey,
  apiBase: config.stripe.apiBase,
  timeoutMs: config.stripe.timeoutMs,
  maxNetworkRetries: config.stripe.maxNetworkRetries,
});

/** The Stripe client from the configuration (configuredStripeKey). */
export async function createConfiguredStripeClient(config: RuntimeConfig): Promise<Stripe> {
  return createStripeClient(clientOptions(config, await configuredStripeKey(config)));
}

let gateway: Promise<StripeGateway> | undefined;

export function getStripeGateway(config: RuntimeConfig): Promise<StripeGateway> {
  if (!gateway) {
    // The gateway knows its key's mode (live / test, from the key's prefix): Stripe events are
    // trusted only from that mode (event-decisions.ts judgeEventOrigin). The key itself stays in the client.
    gateway = configuredStripeKey(config).then((apiKey) => stripeGatewayFor(clientOptions(config, apiKey)));
    gateway.catch(() => {
      gateway = undefined;
    });
  }
  return gateway;
}

let publisher: EventPublisher | null | undefined;

/** Null when no bus is configured: events then wait in the outbox, visible in the gauges. */
export function getEventPublisher(config: RuntimeConfig): EventPublisher | null {
  if (publisher === undefined) {
    const local = config.events.endpoint !== undefined;
    publisher = config.events.busName
      ? new EventBridgePublisher(
          new EventBridgeClient({
            // A local PutEvents endpoint (EVENTS_ENDPOINT) needs no region and checks no signature;
            // the SDK still wants both. On Lambda AWS_REGION and the role's keys are always set.
            ...(config.region ? { region: config.region } : local ? { region: 'us-east-1' } : {}),
            ...(local ? { endpoint: config.events.endpoint } : {}),
            ...(local && !process.env.AWS_ACCESS_KEY_ID ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
            // The relay has its own retry loop (the outbox); keep one call short and bounded. The SDK
            // sets no request timeout of its own: a hung PutEvents would hold the charge handler
            // (bounded there by a deadline) and the sweep until the function times out.
            maxAttempts: 2,
            requestHandler: { connectionTimeout: 2_000, requestTimeout: 5_000, throwOnRequestTimeout: true },
          }),
          { busName: config.events.busName, source: config.events.source },
        )
      : null;
  }
  return publisher;
}

/** Forget everything (tests and the local runtime reconfigure between runs). */
export async function resetResources(): Promise<void> {
  const current = pool;
  pool = undefined;
  gateway = undefined;
  publisher = undefined;
  forgetSecrets();
  if (current) await (await current.catch(() => undefined))?.end();
}
