// The ops commands as the live page runs them: argv parsed by the CLI's parser, then run by the CLI's
// own transports — directly against a database (one pool for the page's life) or in the ops Lambda
// (IAM, with the identity proof the CLI signs). Same parser, same core, same audit detail.
import { setTimeout as sleep } from 'node:timers/promises';
import { runCommand, type OpsContext } from '../commands.ts';
import { directContext } from '../direct.ts';
import { OpsError, UsageError } from '../errors.ts';
import { invokeOpsFunction, type LambdaTarget } from '../lambda-client.ts';
import { forwardedArgv, parseInvocation, type Invocation } from '../parse.ts';
import { failure, type OpsResponse } from '../response.ts';
import type { OpsRunner } from './ops-source.ts';

function parsed(argv: readonly string[], defaultActor: string | null): Invocation | OpsResponse {
  try {
    return parseInvocation(argv, defaultActor);
  } catch (error) {
    if (error instanceof UsageError) return failure(null, error);
    throw error;
  }
}

const isResponse = (x: Invocation | OpsResponse): x is OpsResponse => 'ok' in x;

/** Against DATABASE_URL (or DB_SECRET_ARN), as `npm run ops -- <command>` without --lambda. */
export function directRunner(env: NodeJS.ProcessEnv, defaultActor: string | null): { run: OpsRunner; close: () => Promise<void> } {
  const direct = directContext(env);
  let context: Promise<OpsContext> | undefined;
  const once = () => (context ??= direct.context());
  return {
    run: async (argv) => {
      const invocation = parsed(argv, defaultActor);
      if (isResponse(invocation)) return invocation;
      if (invocation.transport.lambda) return failure(null, new UsageError('--lambda is chosen when the page starts, not per command'));
      try {
        return await runCommand(invocation.command, once);
      } catch (error) {
        // The pool could not be made (configuration): every later command would fail the same way.
        if (error instanceof OpsError) return failure(invocation.command.name === 'help' ? null : invocation.command.name, error);
        throw error;
      }
    },
    close: async () => {
      if (context) await context.catch(() => undefined);
      await direct.close();
    },
  };
}

/**
 * The identity proof signs the argv and the time to the second, and the ops function accepts a proof
 * once (identity.ts): the same command again within that second would be refused as a replay. A page
 * asks the same things over and over, so a repeat waits for the next second.
 */
const PROOF_SPACING_MS = 1_100;

/** In the ops Lambda, as `npm run ops -- <command> --lambda <function>`. */
export function lambdaRunner(target: LambdaTarget, env: NodeJS.ProcessEnv, defaultActor: string | null): { run: OpsRunner; close: () => Promise<void> } {
  const lastSent = new Map<string, Promise<number>>();
  const spaced = async (key: string): Promise<void> => {
    const previous = lastSent.get(key);
    let release!: (at: number) => void;
    lastSent.set(key, new Promise<number>((resolve) => (release = resolve)));
    const at = previous ? await previous : 0;
    const wait = at + PROOF_SPACING_MS - Date.now();
    if (wait > 0) await sleep(wait);
    release(Date.now());
  };
  return {
    run: async (argv) => {
      const invocation = parsed(argv, defaultActor);
      if (isResponse(invocation)) return invocation;
      await spaced(JSON.stringify(argv));
      try {
        return await invokeOpsFunction(target, forwardedArgv(invocation), env);
      } catch (error) {
        if (error instanceof OpsError) return failure(invocation.command.name === 'help' ? null : invocation.command.name, error);
        throw error;
      }
    },
    close: async () => {},
  };
}
