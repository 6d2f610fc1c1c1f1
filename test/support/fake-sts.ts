// An STS endpoint for the ops function's identity proofs: GetCallerIdentity by a SigV4-presigned GET,
// as the API reference documents it (https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html:
// no permission needed; the answer names Account, Arn and UserId of the signer), answered in JSON
// for `accept: application/json` as aws-iam-authenticator reads it. The signature IS checked: the
// request is signed again, with the secret key of the access key it names, over exactly the headers
// and parameters it says it signed, and compared — so a proof made for another command or function,
// or with a key the fake does not know, is refused (403 SignatureDoesNotMatch / InvalidClientTokenId,
// the common errors), and so is one older than 15 minutes (what STS honours a presigned call for).
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { SignatureV4 } from '@smithy/signature-v4';
import { Sha256, type AwsCredentials } from '../../lambdas/ops/sign.ts';

export interface StsPrincipal {
  readonly arn: string;
  readonly account: string;
  readonly userId: string;
}

export interface FakeSts {
  readonly url: string;
  /** Credentials the fake knows, and whom they belong to. */
  addPrincipal(credentials: AwsCredentials, principal: StsPrincipal): void;
  /** GetCallerIdentity calls answered, and how. */
  readonly calls: { readonly status: number; readonly arn: string | null }[];
  close(): Promise<void>;
}

const PRESIGNED_VALIDITY_MS = 15 * 60_000;

export async function startFakeSts(): Promise<FakeSts> {
  const principals = new Map<string, { credentials: AwsCredentials; principal: StsPrincipal }>();
  const calls: { status: number; arn: string | null }[] = [];
  const server = createServer((req, res) => {
    void (async () => {
      const answer = (status: number, body: unknown, arn: string | null = null) => {
        calls.push({ status, arn });
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(body));
      };
      const error = (status: number, code: string, message: string) =>
        answer(status, { Error: { Code: code, Message: message, Type: 'Sender' }, RequestId: 'fake' });
      const url = new URL(req.url ?? '/', 'http://fake');
      if (req.method !== 'GET' || url.pathname !== '/') return error(400, 'InvalidAction', 'the fake answers presigned GETs of / only');
      const params = url.searchParams;
      if (params.get('Action') !== 'GetCallerIdentity') return error(400, 'InvalidAction', 'GetCallerIdentity only');
      const [accessKeyId, shortDate, region, service] = (params.get('X-Amz-Credential') ?? '').split('/');
      const known = principals.get(accessKeyId ?? '');
      if (!known) return error(403, 'InvalidClientTokenId', 'The security token included in the request is invalid.');
      const date = params.get('X-Amz-Date') ?? '';
      const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(date);
      if (!m || shortDate !== date.slice(0, 8) || service !== 'sts') return error(400, 'IncompleteSignature', 'malformed X-Amz-Credential or X-Amz-Date');
      const signingDate = new Date(Date.UTC(+m[1]!, +m[2]! - 1, +m[3]!, +m[4]!, +m[5]!, +m[6]!));
      if (Date.now() > signingDate.getTime() + PRESIGNED_VALIDITY_MS) return error(403, 'ExpiredToken', 'Signature expired');
      const signedHeaders = (params.get('X-Amz-SignedHeaders') ?? '').split(';');
      const headers: Record<string, string> = {};
      for (const name of signedHeaders) {
        const value = req.headers[name];
        if (typeof value !== 'string') return error(403, 'SignatureDoesNotMatch', `signed header ${name} is missing`);
        headers[name] = value;
      }
      const query: Record<string, string> = {};
      for (const [key, value] of params) if (key !== 'X-Amz-Signature') query[key] = value;
      const signer = new SignatureV4({ service: 'sts', region: region!, credentials: known.credentials, sha256: Sha256 });
      const expected = await signer.presign(
        { method: 'GET', protocol: 'http:', hostname: headers.host?.split(':')[0] ?? '', path: '/', query, headers },
        { signingDate, expiresIn: Number(params.get('X-Amz-Expires')) },
      );
      if (expected.query?.['X-Amz-SignedHeaders'] !== params.get('X-Amz-SignedHeaders') || expected.query?.['X-Amz-Signature'] !== params.get('X-Amz-Signature')) {
        return error(403, 'SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.');
      }
      const p = known.principal;
      answer(200, { GetCallerIdentityResponse: { GetCallerIdentityResult: { Account: p.account, Arn: p.arn, UserId: p.userId }, ResponseMetadata: { RequestId: 'fake' } } }, p.arn);
    })().catch((e: unknown) => {
      res.writeHead(500);
      res.end(String(e));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    addPrincipal(credentials, principal) {
      principals.set(credentials.accessKeyId, { credentials, principal });
    },
    calls,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
