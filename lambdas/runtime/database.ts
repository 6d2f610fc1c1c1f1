// How to reach the database: a URL locally, the RDS-generated secret on AWS, with TLS and timeouts.
// Used by the pool (resources.ts) and by the migrate function's single client; its own module so that
// the migrate bundle carries no Stripe or EventBridge client.
import type pg from 'pg';
import { ConfigError, type RuntimeConfig } from './config.ts';
import { getSecretString } from './secrets.ts';

interface RdsSecret {
  host: string;
  port?: number | string;
  username: string;
  password: string;
  dbname?: string;
}

/** Client settings for the configured database; getPool adds the pool settings. */
export async function databaseClientConfig(config: RuntimeConfig): Promise<pg.ClientConfig> {
  const db = config.database;
  const common: pg.ClientConfig = {
    connectionTimeoutMillis: db.connectTimeoutMs,
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
