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
import { runOps, type OpsContext } from './commands.ts';
import { failure, type OpsResponse } from './response.ts';
import { lazyGateway, lazyLookup, opsConfig, reviewPolicy } from './environment.ts';
import { UsageError } from './errors.ts';
import type { StripeLookup } from '../payments/review.ts';
import type { PaymentGateway } from '../payments/gateway.ts';

export interface OpsEvent {
  readonly command: readonly string[];
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

// Per container, like every pipeline function (runtime/resources.ts): the pool and the Stripe client.
let stripeLookup: (() => Promise<StripeLookup>) | undefined;
let stripeGateway: (() => Promise<PaymentGateway>) | undefined;

async function lambdaContext(env: NodeJS.ProcessEnv, context: Context | undefined): Promise<OpsContext> {
  const config = opsConfig(env);
  const pool: Pool = await getPool(config, (error) => logger.error('idle database connection failed', { error }));
  stripeLookup ??= lazyLookup(config);
  stripeGateway ??= lazyGateway(config);
  return {
    db: pool,
    stripe: stripeLookup,
    gateway: stripeGateway,
    enginePolicy: config.policy,
    publisher: () => getEventPublisher(config),
    policy: reviewPolicy(config, env),
    // The actor is what the caller says; the request id ties the audit event to CloudTrail's record
    // of the Invoke (when data events are on), which names the IAM principal that really called.
    transport: { kind: 'lambda', requestId: context?.awsRequestId ?? null, functionName: context?.functionName ?? null },
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
  // Inside the function there is no OS user: the CLI always names the actor when it forwards.
  const response = await runOps(argv, { defaultActor: null, context: () => lambdaContext(process.env, context) });
  logger.info('ops command', {
    command: response.command,
    exitCode: response.exitCode,
    ...(response.ok ? {} : { errorCode: response.error.code, error: response.error.message }),
  });
  return response;
};
