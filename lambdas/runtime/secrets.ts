// Secrets Manager reads, once per container. Its own module so that a function needing only the
// database secret (migrate) does not bundle the Stripe and EventBridge clients with it.
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { ConfigError } from './config.ts';

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

/** Forget one cached secret (an empty one, so that a filled-in value is read next time), or all. */
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
