// Secrets Manager reads, cached per container for a bounded time. Its own module so that a function
// needing only the database secret (migrate) does not bundle the Stripe and EventBridge clients with it.
//
// A value is kept SECRET_TTL_MS (5 min): a rolled Stripe key, a new webhook signing secret or a rotated
// password reaches every warm container within that, without a redeploy. A secret the stack created
// empty (or with no value at all) is kept EMPTY_SECRET_TTL_MS only — an operator is about to fill it —
// but is kept: an anonymous webhook request must not cost a GetSecretValue call each. A re-read that
// fails (Secrets Manager unreachable) keeps serving the value it replaces, and tries again
// FAILED_REFRESH_RETRY_MS later. A caller that has proof the value is stale (a password refused, a
// signature that does not match, a 401 from Stripe) asks for one fresh read with refreshSecret.
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from './config.ts';

export const SECRET_TTL_MS = 5 * 60_000;
export const EMPTY_SECRET_TTL_MS = 30_000;
export const FAILED_REFRESH_RETRY_MS = 30_000;
/** A stale value (a signature no secret verifies, a 401) is read again at most this often per container. */
export const STALE_PROOF_REFRESH_MIN_AGE_MS = 60_000;

interface CachedSecret {
  /** The read in flight, or its answer. */
  readonly value: Promise<string>;
  /** When the read was started (the cache's clock). */
  readonly readAt: number;
  /** Until when it is served without a new read. */
  expiresAt: number;
  /** The value it replaces, served if this read fails. */
  readonly previous: string | null;
  /** The value, once read. */
  settled: string | null;
}

let secretsClient: SecretsManagerClient | undefined;
const secretCache = new Map<string, CachedSecret>();
let clock: () => number = Date.now;

/** Tests: the clock the cache reads (never wall time in a test's verdict). Without an argument: Date.now. */
export function setSecretCacheClock(now?: () => number): void {
  clock = now ?? Date.now;
}

/** A secret with no value at all reads as "no string value"; like an empty one, it is not configured yet. */
export class EmptySecretError extends ConfigError {}

function read(arn: string, region: string | undefined): Promise<string> {
  secretsClient ??= new SecretsManagerClient(region ? { region } : {});
  return secretsClient.send(new GetSecretValueCommand({ SecretId: arn })).then((answer) => {
    if (!answer.SecretString) throw new EmptySecretError(`secret ${arn} has no string value`);
    return answer.SecretString;
  });
}

function start(arn: string, region: string | undefined, previous: string | null): CachedSecret {
  const now = clock();
  const entry: CachedSecret = { value: Promise.resolve(''), readAt: now, expiresAt: now + SECRET_TTL_MS, previous, settled: null };
  const value = read(arn, region).then(
    (text) => {
      entry.settled = text;
      return text;
    },
    (error: unknown) => {
      if (secretCache.get(arn) !== entry) throw error;
      if (error instanceof EmptySecretError) {
        // Not configured yet: remember that briefly, then ask again.
        entry.expiresAt = entry.readAt + EMPTY_SECRET_TTL_MS;
        throw error;
      }
      if (previous !== null) {
        // Secrets Manager failed: keep the value this read was to replace, and try again soon.
        entry.settled = previous;
        entry.expiresAt = clock() + FAILED_REFRESH_RETRY_MS;
        return previous;
      }
      // Nothing to fall back on: not cached, the next call reads again.
      secretCache.delete(arn);
      throw error;
    },
  );
  (entry as { value: Promise<string> }).value = value;
  value.catch(() => undefined);
  return entry;
}

/** A secret's string, from the container's cache while it is fresh (see the header). */
export function getSecretString(arn: string, region?: string): Promise<string> {
  const cached = secretCache.get(arn);
  if (cached && clock() < cached.expiresAt) return cached.value;
  const entry = start(arn, region, cached?.settled ?? cached?.previous ?? null);
  secretCache.set(arn, entry);
  return entry.value;
}

/** The value read holds nothing usable yet (an empty field of a JSON secret): keep it EMPTY_SECRET_TTL_MS only. */
export function secretReadEmpty(arn: string): void {
  const cached = secretCache.get(arn);
  if (cached) cached.expiresAt = Math.min(cached.expiresAt, cached.readAt + EMPTY_SECRET_TTL_MS);
}

/**
 * The cached value was shown stale (a signature that no current secret verifies, a 401): read it
 * again at the next call — unless the value held was read less than `minAgeMs` ago, so that a
 * stream of forged requests costs at most one read per that period. True when a re-read will happen.
 */
export function refreshSecret(arn: string, minAgeMs: number): boolean {
  const cached = secretCache.get(arn);
  if (!cached) return true;
  if (clock() - cached.readAt < minAgeMs) return false;
  cached.expiresAt = clock();
  return true;
}

/** Forget one cached secret (a refused password: read it anew now), or all. */
export function forgetSecrets(arn?: string): void {
  if (arn === undefined) secretCache.clear();
  else secretCache.delete(arn);
}

/** A database login secret as RDS and our CDK write it: a JSON object with username and password. */
export interface LoginSecret {
  readonly username: string;
  readonly password: string;
  readonly host?: string;
  readonly port?: number | string;
  readonly dbname?: string;
}

/**
 * Parse a login secret's string. Nothing of its content reaches an error: JSON.parse's own message
 * quotes the text's first characters (Node 24: `Unexpected token 'h', "hunter2-su"...`), which
 * describeError keeps and the logger and the deploy's failure message would show — so a secret that
 * is not JSON is named by its ARN only. With `expectedUser`, the username must be that role.
 */
export function parseLoginSecret(arn: string, raw: string, expectedUser?: string): LoginSecret {
  const secret = parseSecretJson(arn, raw, '{"username": …, "password": …}');
  const { username, password } = secret;
  const wanted = expectedUser === undefined ? 'a username' : `username "${expectedUser}"`;
  if (typeof username !== 'string' || username === '' || typeof password !== 'string' || password === '' || (expectedUser !== undefined && username !== expectedUser)) {
    throw new ConfigError(`the login secret ${arn} must hold ${wanted} and a password`);
  }
  return secret as unknown as LoginSecret;
}

/**
 * A secret's JSON object, or a ConfigError naming the secret by its ARN and the shape it must have:
 * never JSON.parse's own message, which quotes the text near the error (a key's first characters:
 * `Unexpected token 's', ..."apiKey": sk_live_ab"... is not valid JSON`). Not an object: {}.
 */
export function parseSecretJson(arn: string, raw: string, shape: string): Record<string, unknown> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw new ConfigError(`secret ${arn} is not JSON (it must be ${shape})`);
  }
  return (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed) ? parsed : {}) as Record<string, unknown>;
}
