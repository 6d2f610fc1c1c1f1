// Per-container resources, created on first use and reused by every invocation the container serves:
// the database pool, the secrets, the Stripe gateway, the EventBridge publisher. Lambda freezes the
// container between invocations; keeping these outside the handler is what makes a warm call cheap.
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import pg from 'pg';
import type Stripe from 'stripe';
import { EventBridgePublisher, type EventPublisher } from '../events/outbox.ts';
import {
  FailureKind,
  type AccountScope,
  type AuthorizationActionRequest,
  type CreatePaymentIntentRequest,
  type CreateRefundRequest,
  type GatewayResult,
  type ListAnswer,
  type ListRequest,
  type PaymentGateway,
  type RefundView,
  type SearchPaymentIntentsRequest,
  stripeKeyMode,
  type StripeKeyMode,
} from '../payments/gateway.ts';
import { createStripeClient, stripeGatewayFor } from '../payments/stripe-gateway.ts';
import type { PaymentIntentView } from '../payments/types.ts';
import { assertStripeConfigured, ConfigError, isLiveStripeKey, localOverrideProblem, type RuntimeConfig } from './config.ts';
import { CredentialRefreshingPool, databaseClientConfig, forgetDatabaseSecret } from './database.ts';
import { forgetSecrets, getSecretString, parseSecretJson, refreshSecret, secretReadEmpty, STALE_PROOF_REFRESH_MIN_AGE_MS } from './secrets.ts';

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
 * The Stripe key now: STRIPE_SECRET_KEY locally; on AWS the Secrets Manager secret, holding the key or
 * JSON {"apiKey": "…"}, as the container's secret cache holds it (secrets.ts: 5 minutes). The stack
 * creates that secret empty and an operator fills it in; an empty read is kept briefly only. A key
 * read from the secret is checked like STRIPE_SECRET_KEY at start: no local override with a live key.
 */
export async function currentStripeKey(config: RuntimeConfig): Promise<string> {
  assertStripeConfigured(config);
  let apiKey = config.stripe.apiKey;
  if (!apiKey) {
    const raw = await getSecretString(config.stripe.secretArn!, config.region);
    const value = raw.trim().startsWith('{') ? parseSecretJson(config.stripe.secretArn!, raw, '{"apiKey": "…"} or the key').apiKey : raw.trim();
    apiKey = typeof value === 'string' ? value.trim() : undefined;
  }
  if (!apiKey) {
    if (config.stripe.secretArn) secretReadEmpty(config.stripe.secretArn);
    throw new ConfigError('the Stripe secret is empty: put the key into it (see docs/deploy.md, Put the Stripe key)');
  }
  const problem = localOverrideProblem(config, isLiveStripeKey(apiKey));
  if (problem) throw new ConfigError(problem);
  return apiKey;
}

/** A Stripe client with the current key (currentStripeKey). */
export async function createConfiguredStripeClient(config: RuntimeConfig): Promise<Stripe> {
  return clientFor(config, await currentStripeKey(config));
}

const clientOptions = (config: RuntimeConfig, apiKey: string) => ({
  apiKey,
  apiBase: config.stripe.apiBase,
  timeoutMs: config.stripe.timeoutMs,
  maxNetworkRetries: config.stripe.maxNetworkRetries,
});
const clientFor = (config: RuntimeConfig, apiKey: string): Stripe => createStripeClient(clientOptions(config, apiKey));

/**
 * The functions' gateway: every call goes out with the key the secret holds now (a rolled key is used
 * within the cache's 5 minutes, by a new client; the same key keeps its client). A 401 says the key
 * held is refused: it is read again at the next call (once a minute at most), so a key rolled in the
 * Dashboard and put into the secret is picked up at once. If the key can no longer be read (the
 * secret emptied, a configuration refused), nothing is sent: the call answers as Stripe would to a
 * bad key, not executed.
 */
export class CurrentKeyGateway implements PaymentGateway {
  readonly #config: RuntimeConfig;
  #current: { readonly key: string; readonly gateway: PaymentGateway };

  constructor(config: RuntimeConfig, key: string, gateway: PaymentGateway = stripeGatewayFor(clientOptions(config, key))) {
    this.#config = config;
    this.#current = { key, gateway };
  }

  /**
   * The mode (live / test, from the key's prefix) of the key the calls go out with now: Stripe events
   * are trusted only from that mode (event-decisions.ts judgeEventOrigin). The key itself stays here.
   */
  get keyMode(): StripeKeyMode | null {
    return stripeKeyMode(this.#current.key);
  }

  createPaymentIntent(request: CreatePaymentIntentRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call((g) => g.createPaymentIntent(request));
  }
  retrievePaymentIntent(id: string, scope?: AccountScope): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call((g) => g.retrievePaymentIntent(id, scope));
  }
  searchPaymentIntents(request: SearchPaymentIntentsRequest): Promise<GatewayResult<PaymentIntentView[]>> {
    return this.#call((g) => g.searchPaymentIntents(request));
  }
  listPaymentIntents(request: ListRequest): Promise<GatewayResult<ListAnswer<PaymentIntentView>>> {
    return this.#call((g) => g.listPaymentIntents(request));
  }
  createRefund(request: CreateRefundRequest): Promise<GatewayResult<RefundView>> {
    return this.#call((g) => g.createRefund(request));
  }
  retrieveRefund(id: string, scope?: AccountScope): Promise<GatewayResult<RefundView>> {
    return this.#call((g) => g.retrieveRefund(id, scope));
  }
  capturePaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call((g) => g.capturePaymentIntent(request));
  }
  cancelPaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call((g) => g.cancelPaymentIntent(request));
  }
  listRefunds(request: ListRequest): Promise<GatewayResult<ListAnswer<RefundView>>> {
    return this.#call((g) => g.listRefunds(request));
  }

  async #call<T>(send: (gateway: PaymentGateway) => Promise<GatewayResult<T>>): Promise<GatewayResult<T>> {
    let key: string;
    try {
      key = await currentStripeKey(this.#config);
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      return { ok: false, failure: { kind: FailureKind.authentication, errorClass: 'ConfigError', message, httpAttempts: 0 } };
    }
    if (key !== this.#current.key) this.#current = { key, gateway: stripeGatewayFor(clientOptions(this.#config, key)) };
    const result = await send(this.#current.gateway);
    if (!result.ok && result.failure.kind === FailureKind.authentication && this.#config.stripe.secretArn) {
      refreshSecret(this.#config.stripe.secretArn, STALE_PROOF_REFRESH_MIN_AGE_MS);
    }
    return result;
  }
}

let gateway: Promise<PaymentGateway> | undefined;

/** The container's gateway, once a key could be read (rejected while the secret is empty). */
export function getStripeGateway(config: RuntimeConfig): Promise<PaymentGateway> {
  if (!gateway) {
    gateway = currentStripeKey(config).then((key) => new CurrentKeyGateway(config, key));
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
