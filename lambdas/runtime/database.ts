// How to reach the database: a URL locally, a Secrets Manager secret on AWS, with TLS and timeouts.
// Used by the pool (resources.ts) and by the migrate function's single client; its own module so that
// the migrate bundle carries no Stripe or EventBridge client.
//
// TLS on AWS is verify-full against the RDS CA bundle the repository ships (DB_SSL_CA_FILE, see
// rds-ca/README.md): the server certificate must chain to one of those CAs and name the host we
// connected to (tls.checkServerIdentity against `servername`). Nothing depends on the CAs of the
// Lambda runtime image.
//
// The password is read from the secret for every new connection (pg calls `password` per connect),
// from the container's cache; when the server refuses it (a rotation changed it), the pool forgets
// the cached secret and connects once more with a fresh read (CredentialRefreshingPool).
import { readFileSync } from 'node:fs';
import net from 'node:net';
import pg from 'pg';
import { ConfigError, type RuntimeConfig } from './config.ts';
import { forgetSecrets, getSecretString, parseLoginSecret, type LoginSecret } from './secrets.ts';

/** PostgreSQL's invalid_password: the server refused the password (or the user does not exist). */
export const INVALID_PASSWORD = '28P01';

function isAuthenticationFailure(error: unknown): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === INVALID_PASSWORD;
}

const caCache = new Map<string, string>();

/** The PEM bundle of DB_SSL_CA_FILE, read once per container; a missing file is a configuration error. */
function readCaBundle(file: string): string {
  let pem = caCache.get(file);
  if (pem === undefined) {
    try {
      pem = readFileSync(file, 'utf8');
    } catch (error) {
      throw new ConfigError(`DB_SSL_CA_FILE ${file} cannot be read (${(error as Error).message})`);
    }
    if (!pem.includes('-----BEGIN CERTIFICATE-----')) throw new ConfigError(`DB_SSL_CA_FILE ${file} holds no PEM certificate`);
    caCache.set(file, pem);
  }
  return pem;
}

/** The `ssl` option for the configured mode; `host` is the name the certificate must carry. */
function sslOptions(config: RuntimeConfig, host: string | undefined): pg.ClientConfig['ssl'] {
  const db = config.database;
  if (db.ssl === 'off') return undefined;
  if (db.ssl === 'require') return { rejectUnauthorized: false };
  return {
    rejectUnauthorized: true,
    ...(db.caFile ? { ca: readCaBundle(db.caFile) } : {}),
    // SNI and the identity check use the host name (pg also sets this; never for an IP, RFC 6066).
    ...(host && net.isIP(host) === 0 ? { servername: host } : {}),
  };
}

function hostOfUrl(url: string): string | undefined {
  try {
    return new URL(url).hostname || undefined;
  } catch {
    return undefined;
  }
}

async function readSecret(arn: string, config: RuntimeConfig): Promise<LoginSecret> {
  return parseLoginSecret(arn, await getSecretString(arn, config.region));
}

/**
 * Every connection of ours resolves names in `public` first, whatever the role's settings: a libpq
 * startup option (pg sends `options` in the startup packet), which outranks `ALTER ROLE … SET` and
 * holds from the session's first statement. The role-level pin (runtime/migrations.ts
 * provisionConsumerLogin) reaches NEW sessions only (and psql, an ops shell); this one holds for a
 * session whatever was provisioned when. A constant: no input reaches it.
 *
 * Not through an RDS Proxy: it refuses the connection ("FATAL: Feature not supported: RDS Proxy
 * currently doesn't support command-line options", psycopg/psycopg2#1577, stac-utils/pgstac#156).
 * There the proxy's own `initQuery: 'SET search_path = public'` does the same for each connection it
 * opens (docs/deploy.md "RDS Proxy"), and the role-level pin holds meanwhile.
 */
const SEARCH_PATH_OPTION = '-c search_path=public';
const RDS_PROXY_HOST = /\.proxy-[a-z0-9]+\.[a-z0-9-]+\.rds\.amazonaws\.com(?:\.cn)?$/i;

/** The startup `options` for a connection to `host`: the search-path pin, unless it is an RDS Proxy endpoint. */
export function startupOptions(host: string | undefined): Pick<pg.ClientConfig, 'options'> {
  return host !== undefined && RDS_PROXY_HOST.test(host) ? {} : { options: SEARCH_PATH_OPTION };
}

/** Client settings for the configured database; getPool adds the pool settings. */
export async function databaseClientConfig(config: RuntimeConfig): Promise<pg.ClientConfig> {
  const db = config.database;
  const common: pg.ClientConfig = {
    connectionTimeoutMillis: db.connectTimeoutMs,
    statement_timeout: db.statementTimeoutMs,
    application_name: db.applicationName,
  };
  if (db.url) {
    const host = hostOfUrl(db.url);
    return { ...common, ...startupOptions(host), connectionString: db.url, ssl: sslOptions(config, host) };
  }
  const arn = db.secretArn!;
  const secret = await readSecret(arn, config);
  // DB_HOST / DB_PORT / DB_NAME win over the secret: an RDS Proxy or cluster endpoint, or a secret
  // that only holds a user's credentials (the application role's).
  const host = db.host ?? secret.host;
  if (!host) throw new ConfigError(`the database secret ${arn} has no host and DB_HOST is not set`);
  return {
    ...common,
    ...startupOptions(host),
    host,
    port: db.port ?? Number(secret.port ?? 5432),
    user: secret.username,
    // Read per connection, from the cache: after forgetDatabaseSecret() the next one reads it anew.
    password: async () => (await readSecret(arn, config)).password,
    database: db.name ?? secret.dbname ?? 'postgres',
    ssl: sslOptions(config, host),
  };
}

/** Forget the cached database secret, so that the next connection reads the current password. */
export function forgetDatabaseSecret(config: RuntimeConfig): void {
  if (config.database.secretArn) forgetSecrets(config.database.secretArn);
}

type ConnectCallback = (error: Error | undefined, client: pg.PoolClient | undefined, done: (release?: unknown) => void) => void;

/**
 * A pool that survives a password rotation: a connection refused with invalid_password makes it call
 * `refresh` (forget the cached secret) and connect once more. Once: a password that is still wrong
 * after a fresh read is a real failure, reported as such.
 */
export class CredentialRefreshingPool extends pg.Pool {
  private readonly refresh: () => void;

  constructor(config: pg.PoolConfig, refresh: () => void) {
    super(config);
    this.refresh = refresh;
  }

  override connect(): Promise<pg.PoolClient>;
  override connect(callback: ConnectCallback): void;
  override connect(callback?: ConnectCallback): Promise<pg.PoolClient> | void {
    const attempt = super.connect().catch((error: unknown) => {
      if (!isAuthenticationFailure(error)) throw error;
      this.refresh();
      return super.connect();
    });
    if (!callback) return attempt;
    attempt.then(
      (client) => callback(undefined, client, (release) => client.release(release as Error | boolean | undefined)),
      (error: Error) => callback(error, undefined, () => {}),
    );
  }
}
