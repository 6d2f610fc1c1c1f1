// The ops Lambda: the operator commands inside the VPC, so on-call people need IAM permission to
// invoke this function and no network path to the database. Wiring only: event → runOps → response.
//
// Event:    { "command": ["review", "list", "--older-than", "2h"] }       (the CLI's argv, verbatim)
// Answer:   the OpsResponse document `npm run ops -- … --json` prints:
//           { ok, exitCode, command, result } or { ok: false, exitCode, command, error: { code, message, details } }
//
// `aws lambda invoke --function-name <ops> --cli-binary-format raw-in-base64-out \
//    --payload '{"command":["stats"]}' out.json` works as well as `npm run ops -- stats --lambda <ops>`.
// Refusals and bad arguments are answers (exitCode 1 / 2), not function errors; only an unexpected
// failure (the database unreachable) is thrown, and counts in the function's Errors metric.
import { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import type { Pool } from 'pg';
import { getEventPublisher, getPool } from '../runtime/resources.ts';
import { PIPELINE } from '../runtime/settings.ts';
import { isAction } from './parse.ts';
import { readsRawBodies, runOps, type OpsContext, type OperatorIdentity } from './commands.ts';
import { failure, type OpsResponse } from './response.ts';
import { identitySettings, lazyGateway, lazyLookup, opsConfig, reviewPolicy } from './environment.ts';
import { UnauthorizedError, UsageError } from './errors.ts';
import { allowedBy, verifyIdentityProof, type IdentityProof } from './identity.ts';
import { recordIdentityProof } from './queries.ts';

export interface OpsEvent {
  readonly command: readonly string[];
  /** The caller's identity proof (identity.ts): what `npm run ops -- … --lambda` sends. Writes are refused without it. */
  readonly identity?: IdentityProof;
}

const logger = new Logger({ serviceName: PIPELINE.serviceName });

const MAX_ARGS = 40;
const MAX_ARG_LENGTH = 4_000;

function argvOf(event: unknown): string[] {
  const command = (event as { command?: unknown } | null)?.command;
  if (!Array.isArray(command) || command.length === 0 || !command.every((a) => typeof a === 'string')) {
    throw new UsageError('the event must be {"command": ["review", "list", …]}: the CLI arguments as an array of strings');
  }
  if (command.length > MAX_ARGS || command.some((a: string) => a.length > MAX_ARG_LENGTH)) {
    throw new UsageError(`at most ${MAX_ARGS} arguments of at most ${MAX_ARG_LENGTH} characters`);
  }
  return command as string[];
}

/**
 * Who calls, before anything is read: the identity proof verified with STS, the allow-list for
 * writes and raw-body reads (OPS_OPERATOR_ARNS), the proof used once. Reads need no proof: any
 * principal IAM lets invoke the function may run them (docs/decisions.md, who may write through ops).
 */
function gate(event: unknown, argv: readonly string[], context: Context | undefined, verified: (identity: OperatorIdentity) => void) {
  return async <C extends Parameters<NonNullable<Parameters<typeof runOps>[1]['gate']>>[0]>(command: C): Promise<C> => {
    const guarded = isAction(command) || readsRawBodies(command);
    const proof = (event as { identity?: unknown }).identity;
    if (proof === undefined) {
      if (!guarded) return command;
      throw new UnauthorizedError(
        `${command.name} writes${readsRawBodies(command) ? ' (reads raw bodies)' : ''}: through the ops function only as a caller STS verified — ` +
          'run it with npm run ops -- … --lambda <function>, which signs an identity proof with your AWS credentials (a plain lambda invoke carries none)',
      );
    }
    const settings = identitySettings(process.env, context?.functionName);
    const caller = await verifyIdentityProof(proof, { argv, audience: settings.functionName, stsEndpoint: settings.stsEndpoint, now: Date.now() });
    const entry = allowedBy(caller.arn, settings.operators);
    if (guarded && !entry) {
      throw new UnauthorizedError(
        `${caller.arn} may not run ${command.name} through the ops function: writes and raw-body reads are for the operators allowed by OPS_OPERATOR_ARNS ` +
          `(${settings.operators.length === 0 ? 'none: the construct\'s operatorRole / operatorPrincipals set it' : settings.operators.map((p) => p.arn).join(', ')}); reads are open to you`,
        { caller: caller.arn },
      );
    }
    const db = await getPool(opsConfig(process.env), (error) => logger.error('idle database connection failed', { error }));
    if (!(await recordIdentityProof(db, caller))) {
      throw new UnauthorizedError('this identity proof was used already: each command is signed anew (run it again with npm run ops)');
    }
    verified({ verified: true, method: 'sts:GetCallerIdentity', arn: caller.arn, account: caller.account, userId: caller.userId, allowedBy: entry?.arn ?? null });
    return isAction(command) ? { ...command, action: { ...command.action, actor: `operator:${caller.arn}` } } : command;
  };
}

async function lambdaContext(env: NodeJS.ProcessEnv, context: Context | undefined, identity: OperatorIdentity): Promise<OpsContext> {
  const config = opsConfig(env);
  const pool: Pool = await getPool(config, (error) => logger.error('idle database connection failed', { error }));
  return {
    db: pool,
    // Per invocation: each reads the Stripe key through the secret cache (5 minutes), never a container's life.
    stripe: lazyLookup(config),
    gateway: lazyGateway(config),
    enginePolicy: config.policy,
    publisher: () => getEventPublisher(config),
    policy: reviewPolicy(config, env),
    // The request id ties the audit event to CloudTrail's record of the Invoke (with data events on).
    transport: { kind: 'lambda', requestId: context?.awsRequestId ?? null, functionName: context?.functionName ?? null },
    identity,
  };
}

export const handler = async (event: unknown, context?: Context): Promise<OpsResponse> => {
  let argv: string[];
  try {
    argv = argvOf(event);
  } catch (error) {
    if (error instanceof UsageError) return failure(null, error);
    throw error;
  }
  const who: { identity: OperatorIdentity } = { identity: { verified: false } };
  // Inside the function there is no OS user: the actor is the verified caller; --actor is a note.
  const response = await runOps(argv, {
    defaultActor: null,
    actorOptional: true,
    gate: gate(event, argv, context, (verified) => {
      who.identity = verified;
    }),
    context: () => lambdaContext(process.env, context, who.identity),
  });
  logger.info('ops command', {
    command: response.command,
    exitCode: response.exitCode,
    caller: who.identity.verified ? who.identity.arn : null,
    ...(response.ok ? {} : { errorCode: response.error.code, error: response.error.message }),
  });
  return response;
};
