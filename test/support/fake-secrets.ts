// A Secrets Manager endpoint for the real @aws-sdk/client-secrets-manager, GetSecretValue only, as the
// API reference documents it (https://docs.aws.amazon.com/secretsmanager/latest/apireference/API_GetSecretValue.html):
// awsJson1_1 — POST /, `X-Amz-Target: secretsmanager.GetSecretValue`, body `{"SecretId": …}` (an ARN
// or a name); the answer `{ARN, Name, VersionId, SecretString, VersionStages, CreatedDate}`; an
// unknown secret is a 400 `ResourceNotFoundException`. Signatures are not checked. Point the SDK
// at it with AWS_ENDPOINT_URL_SECRETS_MANAGER (the SDK's service-specific endpoint variable).
import { randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll } from 'vitest';

export interface FakeSecrets {
  readonly url: string;
  /** Create or replace a secret's string (a new version, as PutSecretValue or a rotation makes). */
  put(arn: string, value: string): void;
  /** GetSecretValue calls received, by SecretId. */
  reads(arn: string): number;
  /**
   * While true every call is answered 500 InternalServiceError (a Secrets Manager outage as the API
   * reference lists it: "An error occurred on the server side"); the SDK retries it, then fails.
   */
  setUnavailable(unavailable: boolean): void;
  close(): Promise<void>;
}

async function startFakeSecrets(): Promise<FakeSecrets> {
  const secrets = new Map<string, { value: string; versionId: string; created: number }>();
  const reads = new Map<string, number>();
  let unavailable = false;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const answer = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-requestid': randomUUID() });
        res.end(JSON.stringify(body));
      };
      if (req.method !== 'POST' || req.headers['x-amz-target'] !== 'secretsmanager.GetSecretValue') {
        return answer(400, { __type: 'InvalidRequestException', message: `not supported by the fake: ${String(req.headers['x-amz-target'])}` });
      }
      const { SecretId } = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as { SecretId?: string };
      reads.set(SecretId ?? '', (reads.get(SecretId ?? '') ?? 0) + 1);
      if (unavailable) return answer(500, { __type: 'InternalServiceError', message: 'An error occurred on the server side.' });
      const secret = SecretId ? secrets.get(SecretId) : undefined;
      if (!secret) return answer(400, { __type: 'ResourceNotFoundException', message: "Secrets Manager can't find the specified secret." });
      return answer(200, {
        ARN: SecretId,
        Name: SecretId!.split(':').at(-1),
        VersionId: secret.versionId,
        SecretString: secret.value,
        VersionStages: ['AWSCURRENT'],
        CreatedDate: secret.created,
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    put(arn, value) {
      secrets.set(arn, { value, versionId: randomUUID(), created: Date.now() / 1000 });
    },
    reads: (arn) => reads.get(arn) ?? 0,
    setUnavailable(on) {
      unavailable = on;
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * Registers a describe's (or file's) hooks: the fake started before its tests, the real SDK pointed at
 * it (a region and test credentials: the SDK signs, the fake does not check), and the environment and
 * the server restored after. Returns a getter of the running fake.
 */
export function useFakeSecrets(): () => FakeSecrets {
  let secrets: FakeSecrets | undefined;
  const env = { ...process.env };
  beforeAll(async () => {
    secrets = await startFakeSecrets();
    Object.assign(process.env, { AWS_ENDPOINT_URL_SECRETS_MANAGER: secrets.url, AWS_REGION: 'eu-west-1', AWS_ACCESS_KEY_ID: 'AKIDEXAMPLE', AWS_SECRET_ACCESS_KEY: 'secret-example' });
  });
  afterAll(async () => {
    process.env = env;
    await secrets?.close();
  });
  return () => {
    if (!secrets) throw new Error('useFakeSecrets: the fake is started in beforeAll; read it inside a test');
    return secrets;
  };
}
