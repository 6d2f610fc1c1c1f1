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
