// The CLI's half of the ops function's caller identity (identity.ts): an STS GetCallerIdentity
// request presigned with SigV4 by the operator's own credentials (the AWS SDK's credential chain:
// profile, SSO, an assumed role), signing the function's name and the digest of the argv as headers.
// Nothing is sent to STS here; the function does that, with the values it computes itself.
//
// The signer is the AWS SDK's own (@smithy/signature-v4, which @aws-sdk/client-lambda installs as a
// dependency of @aws-sdk/core); the hash is node:crypto's.
import { createHash, createHmac, type Hash, type Hmac } from 'node:crypto';
import { SignatureV4 } from '@smithy/signature-v4';
import { commandDigest, functionNameOf, PROOF_HEADERS, stsEndpointOf, type IdentityProof } from './identity.ts';

type SourceData = string | ArrayBuffer | ArrayBufferView;
const bytes = (data: SourceData): Buffer =>
  typeof data === 'string' ? Buffer.from(data, 'utf8') : ArrayBuffer.isView(data) ? Buffer.from(data.buffer, data.byteOffset, data.byteLength) : Buffer.from(data);

/** SHA-256 (HMAC-SHA256 with a secret), in the shape SignatureV4 takes. */
export class Sha256 {
  readonly #secret: SourceData | undefined;
  #hash: Hash | Hmac;
  constructor(secret?: SourceData) {
    this.#secret = secret;
    this.#hash = this.#fresh();
  }
  #fresh(): Hash | Hmac {
    return this.#secret === undefined ? createHash('sha256') : createHmac('sha256', bytes(this.#secret));
  }
  update(data: SourceData): void {
    this.#hash.update(bytes(data));
  }
  async digest(): Promise<Uint8Array> {
    return new Uint8Array(this.#hash.digest());
  }
  reset(): void {
    this.#hash = this.#fresh();
  }
}

export interface AwsCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  readonly sessionToken?: string | undefined;
}

export interface ProofRequest {
  /** The argv the function will receive, exactly. */
  readonly argv: readonly string[];
  /** `--lambda`: a name or an ARN; the proof names the function. */
  readonly functionName: string;
  readonly region: string;
  readonly credentials: AwsCredentials | (() => Promise<AwsCredentials>);
  /** Default: STS in `region`. A local run's fake STS otherwise (OPS_STS_ENDPOINT with --endpoint). */
  readonly stsEndpoint?: string | undefined;
  readonly signingDate?: Date;
}

/** The STS request the function will send, presigned: its query string is the proof. */
export async function signIdentityProof(request: ProofRequest): Promise<IdentityProof> {
  const endpoint = new URL(request.stsEndpoint ?? stsEndpointOf(request.region));
  const signer = new SignatureV4({ service: 'sts', region: request.region, credentials: request.credentials, sha256: Sha256 });
  const signed = await signer.presign(
    {
      method: 'GET',
      protocol: endpoint.protocol,
      hostname: endpoint.hostname,
      ...(endpoint.port ? { port: Number(endpoint.port) } : {}),
      path: '/',
      query: { Action: 'GetCallerIdentity', Version: '2011-06-15' },
      headers: {
        host: endpoint.host,
        [PROOF_HEADERS.audience]: functionNameOf(request.functionName),
        [PROOF_HEADERS.command]: commandDigest(request.argv),
      },
    },
    // STS honours it 15 minutes whatever this says; the function refuses it after 5 (identity.ts).
    { expiresIn: 60, ...(request.signingDate ? { signingDate: request.signingDate } : {}) },
  );
  const query = new URLSearchParams();
  for (const [key, value] of Object.entries(signed.query ?? {})) {
    for (const v of Array.isArray(value) ? value : [value]) if (v !== null && v !== undefined) query.append(key, v);
  }
  return { v: 1, query: query.toString() };
}
