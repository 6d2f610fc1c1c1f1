// Who is calling the deployed ops function, proved by AWS rather than said by the caller.
//
// The Lambda Invoke API hands a function the caller's payload and nothing about the caller, and any
// payload at all: a Function URL event with `requestContext.authorizer.iam.userArn` can be sent by
// anyone allowed lambda:InvokeFunction just as well as by the URL. So the identity travels as a
// proof the function checks with AWS itself — the pattern of Vault's AWS IAM auth method and of EKS's
// aws-iam-authenticator: the CLI presigns (SigV4, its own credentials) an STS GetCallerIdentity
// request that also signs two headers, the function's name and the SHA-256 of the exact argv; the
// function sends that request to STS with the two values IT computes and reads the caller's ARN from
// STS's answer. A signature made for another command or another function does not verify; nobody can
// sign for credentials they do not hold; GetCallerIdentity needs no permission (an explicit deny does
// not stop it: https://docs.aws.amazon.com/STS/latest/APIReference/API_GetCallerIdentity.html).
// The checks below follow aws-iam-authenticator's verifier (pkg/token/token.go): https, the STS host
// of the function's region, path "/", only the presign's query parameters, Action=GetCallerIdentity,
// the bound headers among the signed ones, `accept: application/json`, no redirects. STS honours a
// presigned GetCallerIdentity for 15 minutes after X-Amz-Date whatever X-Amz-Expires says (noted
// there too), so the function keeps its own, shorter window, and each proof is accepted once.
import { createHash } from 'node:crypto';
import { UnauthorizedError } from './errors.ts';

/** Signed headers binding a proof to one function and one command. */
export const PROOF_HEADERS = { audience: 'x-charge-ops-audience', command: 'x-charge-ops-command' } as const;

/** A proof older than this (by the function's clock) is refused; a minute of clock skew ahead is tolerated. */
export const PROOF_MAX_AGE_MS = 5 * 60_000;
const PROOF_MAX_FUTURE_MS = 60_000;
const MAX_PROOF_LENGTH = 4_096;
const STS_TIMEOUT_MS = 5_000;

/** What the CLI sends beside the argv: the presigned query string of an STS GetCallerIdentity request. */
export interface IdentityProof {
  readonly v: 1;
  readonly query: string;
}

/** The caller as STS named it. */
export interface VerifiedCaller {
  readonly arn: string;
  readonly account: string;
  readonly userId: string;
  /** The proof's signature: recorded so that each proof serves one command. */
  readonly signature: string;
}

/** The SHA-256 of the argv as sent (JSON), hex: what the command header carries. */
export function commandDigest(argv: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(argv)).digest('hex');
}

/** The function name a proof is bound to: a name, a full or partial ARN, with or without a qualifier. */
export function functionNameOf(nameOrArn: string): string {
  const arn = /^(?:arn:aws[a-z-]*:lambda:[a-z0-9-]+:\d{12}:function:)?([A-Za-z0-9_-]+)(?::[A-Za-z0-9$_-]+)?$/.exec(nameOrArn);
  if (arn) return arn[1]!;
  const partial = /^\d{12}:function:([A-Za-z0-9_-]+)(?::[A-Za-z0-9$_-]+)?$/.exec(nameOrArn);
  return partial ? partial[1]! : nameOrArn;
}

/** STS's regional endpoint, the one the CLI signs for and the function asks. */
export function stsEndpointOf(region: string): string {
  return `https://sts.${region}.amazonaws.com${region.startsWith('cn-') ? '.cn' : ''}`;
}

const ALLOWED_PARAMETERS = new Set([
  'action',
  'version',
  'x-amz-algorithm',
  'x-amz-credential',
  'x-amz-date',
  'x-amz-expires',
  'x-amz-security-token',
  'x-amz-signature',
  'x-amz-signedheaders',
]);

function amzDate(text: string): number | null {
  const m = /^(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})(\d{2})Z$/.exec(text);
  return m ? Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3]), Number(m[4]), Number(m[5]), Number(m[6])) : null;
}

/** The proof's own shape, before anything is sent: the parameters of a presigned GetCallerIdentity, nothing else. */
export function checkProofShape(proof: unknown, now: number): { readonly query: string; readonly signature: string } {
  const p = proof as Partial<IdentityProof> | null;
  if (typeof p !== 'object' || p === null || p.v !== 1 || typeof p.query !== 'string' || p.query.length === 0 || p.query.length > MAX_PROOF_LENGTH) {
    throw new UnauthorizedError('the identity proof is malformed: expected {"v": 1, "query": "<presigned GetCallerIdentity query>"} (npm run ops -- … --lambda makes it)');
  }
  const params = new URLSearchParams(p.query);
  const seen = new Map<string, string>();
  for (const [key, value] of params) {
    const lower = key.toLowerCase();
    if (!ALLOWED_PARAMETERS.has(lower)) throw new UnauthorizedError(`the identity proof has a parameter a presigned GetCallerIdentity does not: ${key.slice(0, 40)}`);
    if (seen.has(lower)) throw new UnauthorizedError(`the identity proof repeats ${key}`);
    seen.set(lower, value);
  }
  if (seen.get('action') !== 'GetCallerIdentity' || seen.get('version') !== '2011-06-15' || seen.get('x-amz-algorithm') !== 'AWS4-HMAC-SHA256') {
    throw new UnauthorizedError('the identity proof is not a SigV4-presigned STS GetCallerIdentity (Action, Version, X-Amz-Algorithm)');
  }
  const signed = (seen.get('x-amz-signedheaders') ?? '').split(';');
  for (const header of ['host', PROOF_HEADERS.audience, PROOF_HEADERS.command]) {
    if (!signed.includes(header)) throw new UnauthorizedError(`the identity proof does not sign the ${header} header: it is not bound to this function and command`);
  }
  const expires = Number(seen.get('x-amz-expires'));
  if (!Number.isInteger(expires) || expires < 0 || expires > 900) throw new UnauthorizedError('the identity proof has no valid X-Amz-Expires (0-900)');
  const signedAt = amzDate(seen.get('x-amz-date') ?? '');
  if (signedAt === null) throw new UnauthorizedError('the identity proof has no valid X-Amz-Date');
  if (now - signedAt > PROOF_MAX_AGE_MS || signedAt - now > PROOF_MAX_FUTURE_MS) {
    throw new UnauthorizedError(`the identity proof was signed at ${new Date(signedAt).toISOString()}, more than ${PROOF_MAX_AGE_MS / 60_000} minutes from now: run the command again (and check this machine's clock)`);
  }
  const signature = seen.get('x-amz-signature') ?? '';
  if (!/^[0-9a-f]{64}$/.test(signature)) throw new UnauthorizedError('the identity proof has no valid X-Amz-Signature');
  return { query: p.query, signature };
}

export interface VerifyOptions {
  /** The argv the function received (the command header is computed from it, never read from the proof). */
  readonly argv: readonly string[];
  /** This function's name. */
  readonly audience: string;
  /** `stsEndpointOf(AWS_REGION)`; locally, a fake STS. */
  readonly stsEndpoint: string;
  readonly now: number;
  readonly fetch?: typeof fetch;
}

/**
 * Ask STS who signed the proof, with this function's name and the digest of the argv it received as
 * the bound headers. Throws UnauthorizedError when STS refuses (another command, function or region;
 * expired; not a signature at all) or cannot be asked (nothing is then assumed about the caller).
 */
export async function verifyIdentityProof(proof: unknown, options: VerifyOptions): Promise<VerifiedCaller> {
  const { query, signature } = checkProofShape(proof, options.now);
  const endpoint = new URL(options.stsEndpoint);
  let response: Response;
  try {
    response = await (options.fetch ?? fetch)(`${endpoint.origin}/?${query}`, {
      method: 'GET',
      headers: { [PROOF_HEADERS.audience]: options.audience, [PROOF_HEADERS.command]: commandDigest(options.argv), accept: 'application/json' },
      redirect: 'manual',
      signal: AbortSignal.timeout(STS_TIMEOUT_MS),
    });
  } catch (error) {
    throw new UnauthorizedError(`the caller could not be verified: STS (${endpoint.host}) did not answer (${(error as Error).name}); nothing was done — run the command again`);
  }
  const text = await response.text().catch(() => '');
  if (response.status !== 200) {
    const code = /"Code"\s*:\s*"([A-Za-z]+)"|<Code>([A-Za-z]+)<\/Code>/.exec(text);
    throw new UnauthorizedError(
      `STS refused the identity proof (${response.status}${code ? ` ${code[1] ?? code[2]}` : ''}): it was signed for another command, function or region, or has expired — run the command again with --lambda ${options.audience}`,
    );
  }
  let result: { Arn?: unknown; Account?: unknown; UserId?: unknown } | undefined;
  try {
    result = (JSON.parse(text) as { GetCallerIdentityResponse?: { GetCallerIdentityResult?: typeof result } }).GetCallerIdentityResponse?.GetCallerIdentityResult;
  } catch {
    result = undefined;
  }
  const arn = typeof result?.Arn === 'string' ? result.Arn : '';
  const account = typeof result?.Account === 'string' ? result.Account : '';
  if (!/^arn:aws[a-z-]*:(iam|sts)::\d{12}:[\x21-\x7e]{1,1900}$/.test(arn) || !/^\d{12}$/.test(account) || typeof result?.UserId !== 'string') {
    throw new UnauthorizedError('STS answered the identity proof with something that is not a caller identity');
  }
  return { arn, account, userId: result.UserId, signature };
}

// ── The allow-list ───────────────────────────────────────────────────────────────────────────────

/**
 * One allowed operator: an IAM role (any of its sessions: STS names a role's caller
 * `arn:aws:sts::<account>:assumed-role/<role name>/<session>`, without the role's path), one session
 * of a role, or an IAM user. Root and wildcards are not accepted.
 */
export type OperatorPrincipal =
  | { readonly kind: 'role'; readonly partition: string; readonly account: string; readonly name: string; readonly arn: string }
  | { readonly kind: 'session'; readonly partition: string; readonly account: string; readonly name: string; readonly session: string; readonly arn: string }
  | { readonly kind: 'user'; readonly partition: string; readonly account: string; readonly name: string; readonly arn: string };

const ROLE = /^arn:(aws[a-z-]*):iam::(\d{12}):role\/(?:[\x21-\x7e]*\/)?([\w+=,.@-]{1,64})$/;
const SESSION = /^arn:(aws[a-z-]*):sts::(\d{12}):assumed-role\/([\w+=,.@-]{1,64})\/([\w+=,.@-]{2,64})$/;
const USER = /^arn:(aws[a-z-]*):iam::(\d{12}):user\/(?:[\x21-\x7e]*\/)?([\w+=,.@-]{1,64})$/;

/** OPS_OPERATOR_ARNS: a comma-separated list of role, role-session or user ARNs. Anything else is refused, named. */
export function parseOperatorPrincipals(raw: string | undefined): OperatorPrincipal[] {
  if (raw === undefined || raw.trim() === '') return [];
  return raw.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '').map((arn) => {
    let m = ROLE.exec(arn);
    if (m) return { kind: 'role', partition: m[1]!, account: m[2]!, name: m[3]!, arn };
    m = SESSION.exec(arn);
    if (m) return { kind: 'session', partition: m[1]!, account: m[2]!, name: m[3]!, session: m[4]!, arn };
    m = USER.exec(arn);
    if (m) return { kind: 'user', partition: m[1]!, account: m[2]!, name: m[3]!, arn };
    throw new OperatorListError(arn);
  });
}

export class OperatorListError extends Error {
  override readonly name = 'OperatorListError';
  readonly entry: string;
  constructor(entry: string) {
    super(
      `OPS_OPERATOR_ARNS: "${entry.slice(0, 200)}" is not an IAM role ARN (arn:aws:iam::<account>:role/<name>), a role session ` +
        '(arn:aws:sts::<account>:assumed-role/<role>/<session>) or an IAM user ARN (arn:aws:iam::<account>:user/<name>)',
    );
    this.entry = entry;
  }
}

/** Names are unique in an account regardless of case (IAM), so they compare so; account and session exactly. */
const sameName = (a: string, b: string) => a.toLowerCase() === b.toLowerCase();

/** The allow-list entry the caller (an ARN STS returned) matches, or null. */
export function allowedBy(callerArn: string, principals: readonly OperatorPrincipal[]): OperatorPrincipal | null {
  const session = SESSION.exec(callerArn);
  const user = USER.exec(callerArn);
  for (const p of principals) {
    if (session && p.partition === session[1] && p.account === session[2] && sameName(p.name, session[3]!)) {
      if (p.kind === 'role' || (p.kind === 'session' && p.session === session[4])) return p;
    }
    if (user && p.kind === 'user' && p.partition === user[1] && p.account === user[2] && sameName(p.name, user[3]!)) return p;
  }
  return null;
}
