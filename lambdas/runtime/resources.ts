// Per-container resources, created on first use and reused by every invocation the container serves:
// the database pool, the secrets, the Stripe gateway, the EventBridge publisher. Lambda freezes the
// container between invocations; keeping these outside the handler is what makes a warm call cheap.
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import pg from 'pg';
import { EventBridgePublisher, type EventPublisher } from '../events/outbox.ts';
import { createStripeClient, StripeGateway } from '../payments/stripe-gateway.ts';
import { assertStripeConfigured, ConfigError, type RuntimeConfig } from './config.ts';

let secretsClient: SecretsManagerClient | undefined;
const secretCache = new Map<string, Promise<string>>();

/** A secret's string, fetched once per container. A failed fetch is not cached, so the next call retries. */
export function getSecretString(arn: string, region?: string): Promise<string> {
  let cached = secretCache.get(arn);
  if (!cached) {
    secretsClient ??= new SecretsManagerClient(region ? { region } : {});
    cached = secretsClient.send(new GetSecretValueCommand({ SecretId: arn })).then((answer) => {
      if (!answer.SecretString) throw new ConfigError(`secret ${arn} has no string value`);
      return answer.SecretString;
    });
    cached.catch(() => secretCache.delete(arn));
    secretCache.set(arn, cached);
  }
  return cached;
}

interface RdsSecret {
  host: string;
  port?: number | string;
  username: string;
  password: string;
  dbname?: string;
}

async function poolConfig(config: RuntimeConfig): Promise<pg.PoolConfig> {
  const db = config.database;
  const common: pg.PoolConfig = {
    max: db.poolMax,
    connectionTimeoutMillis: db.connectTimeoutMs,
    idleTimeoutMillis: 60_000,
    statement_timeout: db.statementTimeoutMs,
    application_name: db.applicationName,
    // verify-full: the server certificate must chain to a trusted CA — on Lambda, the RDS CA bundle
    // the runtime loads when NODE_EXTRA_CA_CERTS=/var/runtime/ca-cert.pem — and match the host.
    ...(db.ssl === 'off' ? {} : { ssl: { rejectUnauthorized: db.ssl === 'verify-full' } }),
  };
  if (db.url) return { ...common, connectionString: db.url };
  const secret = JSON.parse(await getSecretString(db.secretArn!, config.region)) as RdsSecret;
  if (!secret.host || !secret.username || !secret.password) throw new ConfigError('the database secret lacks host, username or password');
  return {
    ...common,
    host: secret.host,
    port: Number(secret.port ?? 5432),
    user: secret.username,
    password: secret.password,
    database: secret.dbname ?? 'postgres',
  };
}

let pool: Promise<pg.Pool> | undefined;

/**
 * The container's pool, bounded (DB_POOL_MAX). An idle connection that dies (a database restart, a
 * failover) must not crash the process: the error is reported and the pool replaces the connection.
 */
export function getPool(config: RuntimeConfig, onIdleError: (error: Error) => void = () => {}): Promise<pg.Pool> {
  if (!pool) {
    pool = poolConfig(config).then((settings) => {
      const created = new pg.Pool(settings);
      created.on('error', onIdleError);
      return created;
    });
    pool.catch(() => {
      pool = undefined;
    });
  }
  return pool;
}

let gateway: Promise<StripeGateway> | undefined;

export function getStripeGateway(config: RuntimeConfig): Promise<StripeGateway> {
  if (!gateway) {
    assertStripeConfigured(config);
    gateway = (async () => {
      let apiKey = config.stripe.apiKey;
      if (!apiKey) {
        const raw = await getSecretString(config.stripe.secretArn!, config.region);
        apiKey = raw.trim().startsWith('{') ? (JSON.parse(raw) as { apiKey?: string }).apiKey : raw.trim();
      }
      if (!apiKey) throw new ConfigError('the Stripe secret is empty: put the key into it (see README, Deploy)');
      return new StripeGateway(
        createStripeClient({ apiKey, apiBase: config.stripe.apiBase, timeoutMs: config.stripe.timeoutMs, maxNetworkRetries: config.stripe.maxNetworkRetries }),
      );
    })();
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
    publisher = config.events.busName
      ? new EventBridgePublisher(
          new EventBridgeClient({
            ...(config.region ? { region: config.region } : {}),
            ...(config.events.endpoint ? { endpoint: config.events.endpoint } : {}),
            // The relay has its own retry loop (the outbox); keep one call short and bounded.
            maxAttempts: 2,
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
  secretCache.clear();
  if (current) await (await current.catch(() => undefined))?.end();
}
