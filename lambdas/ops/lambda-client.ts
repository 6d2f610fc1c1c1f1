// The CLI's `--lambda <function>` transport: the same argv, sent to the ops Lambda with IAM auth
// (the usual AWS credential chain: profile, SSO, an assumed operator role), with an identity proof
// signed by the same credentials (sign.ts), so that the function knows who calls.
import { InvokeCommand, LambdaClient, type LambdaClientConfig } from '@aws-sdk/client-lambda';
import type { OpsResponse } from './commands.ts';
import { OpsConfigError } from './errors.ts';
import type { OpsEvent } from './handler.ts';
import { signIdentityProof } from './sign.ts';

export interface LambdaTarget {
  readonly functionName: string;
  readonly region?: string | undefined;
  /** A local Lambda API (tests, emulators); without AWS credentials, placeholder ones are used. */
  readonly endpoint?: string | undefined;
}

/**
 * A SigV4 signature is dated to the second: the same command signed twice in one second is the same
 * proof, and the function refuses a proof it has seen (identity.ts). A caller that runs one command
 * often — the live page polls `stats` while a person reloads it — is given a new second for each
 * signing of the same command in this process, waiting for it if need be (at most a second).
 */
const lastSigned = new Map<string, number>();
async function nextSigningSecond(command: string): Promise<Date> {
  for (;;) {
    const second = Math.floor(Date.now() / 1000);
    const last = lastSigned.get(command);
    if (last === undefined || second > last) {
      lastSigned.set(command, second);
      if (lastSigned.size > 1000) lastSigned.delete(lastSigned.keys().next().value!);
      return new Date(second * 1000);
    }
    await new Promise((resolve) => setTimeout(resolve, (second + 1) * 1000 - Date.now() + 1));
  }
}

/** The function failed (threw, timed out, or answered something that is not an OpsResponse). */
export class OpsFunctionError extends Error {
  override readonly name = 'OpsFunctionError';
}

export async function invokeOpsFunction(target: LambdaTarget, argv: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<OpsResponse> {
  const config: LambdaClientConfig = {
    ...(target.region ? { region: target.region } : {}),
    ...(target.endpoint ? { endpoint: target.endpoint } : {}),
    ...(target.endpoint && !target.region && !env.AWS_REGION ? { region: 'us-east-1' } : {}),
    // A local Lambda API: the credentials of the environment given (placeholders without), never a profile's.
    ...(target.endpoint && !env.AWS_PROFILE
      ? {
          credentials: env.AWS_ACCESS_KEY_ID
            ? { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY ?? '', ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}) }
            : { accessKeyId: 'local', secretAccessKey: 'local' },
        }
      : {}),
    // An operator command runs once, seen by a person: a lost answer is reported, not re-sent
    // (a re-sent resolve would only be refused by its fence, but would confuse the reader).
    maxAttempts: 1,
  };
  const client = new LambdaClient(config);
  try {
    let region: string;
    try {
      region = await client.config.region();
    } catch (error) {
      // The SDK's own words are "Region is missing": say what to give instead (missing
      // configuration, exit 2, nothing read or written).
      throw new OpsConfigError(
        `no AWS region for --lambda ${target.functionName}: give --region <region>, or set AWS_REGION, or use a profile with a region (${error instanceof Error ? error.message : String(error)})`,
      );
    }
    // A fake STS only with a local Lambda API (--endpoint): against AWS the proof is for STS itself.
    const stsEndpoint = target.endpoint && env.OPS_STS_ENDPOINT ? env.OPS_STS_ENDPOINT : undefined;
    const signingDate = await nextSigningSecond(JSON.stringify([target.functionName, ...argv]));
    const identity = await signIdentityProof({ argv, functionName: target.functionName, region, credentials: () => client.config.credentials(), stsEndpoint, signingDate });
    const event: OpsEvent = { command: [...argv], identity };
    const out = await client.send(
      new InvokeCommand({ FunctionName: target.functionName, InvocationType: 'RequestResponse', Payload: new TextEncoder().encode(JSON.stringify(event)) }),
    );
    const text = out.Payload ? new TextDecoder().decode(out.Payload) : '';
    if (out.FunctionError) {
      let message = text;
      try {
        const error = JSON.parse(text) as { errorType?: string; errorMessage?: string };
        message = `${error.errorType ?? 'Error'}: ${error.errorMessage ?? text}`;
      } catch {
        // Not JSON: show it as it came.
      }
      throw new OpsFunctionError(`the ops function ${target.functionName} failed (${out.FunctionError}): ${message}`);
    }
    let response: unknown;
    try {
      response = JSON.parse(text);
    } catch {
      throw new OpsFunctionError(`the ops function ${target.functionName} answered something that is not JSON: ${text.slice(0, 200)}`);
    }
    const r = response as { ok?: unknown; exitCode?: unknown };
    if (typeof r?.ok !== 'boolean' || typeof r.exitCode !== 'number') {
      throw new OpsFunctionError(`${target.functionName} does not look like the ops function (answer: ${text.slice(0, 200)})`);
    }
    return response as OpsResponse;
  } finally {
    client.destroy();
  }
}
