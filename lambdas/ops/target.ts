// Who is at the keyboard and where a command goes (the target banner), apart from the CLI's entry
// module: the live page's `ops ui` (live-page/cli.ts) says both too, and the CLI loads it with a
// dynamic import while its own top-level await is still running, so it must not import cli.ts.
import os from 'node:os';
import { isAction, type Invocation } from './parse.ts';

export interface CliIo {
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
}

/** The OS user: who is at the keyboard, unless --actor says otherwise. */
export function osUser(env: NodeJS.ProcessEnv): string | null {
  try {
    const name = os.userInfo().username;
    if (name) return name;
  } catch {
    // No passwd entry (some containers): fall back to the environment.
  }
  return env.USER ?? env.USERNAME ?? null;
}

/**
 * Where a command goes, said before it runs (on stderr, so `--json` output stays one document):
 * deployed (the ops function, or a deployed database from a bastion: DB_SECRET_ARN, or a live Stripe
 * key) or local, which function or database, region, and whether the actor is verified.
 */
export interface Target {
  readonly deployed: boolean;
  readonly banner: string;
}

export function targetOf(invocation: Invocation, env: NodeJS.ProcessEnv): Target {
  const lambda = invocation.transport.lambda;
  if (lambda) {
    const region = invocation.transport.region ?? env.AWS_REGION ?? env.AWS_DEFAULT_REGION ?? '(the profile\'s region)';
    const via = invocation.transport.endpoint ? ` through the Lambda API at ${invocation.transport.endpoint}` : '';
    const ignored = env.OPS_SEARCH_SETTLE_MS ? '; OPS_SEARCH_SETTLE_MS here is ignored (the function has its own settings)' : '';
    return { deployed: true, banner: `target: deployed pipeline — ops function ${lambda} in ${region}${via}; you act as the IAM identity STS verifies${ignored}` };
  }
  const live = /^(sk|rk)_live_/.test(env.STRIPE_SECRET_KEY ?? '');
  const deployedDb = Boolean(env.DB_SECRET_ARN) && !env.DATABASE_URL;
  let database = '(no DATABASE_URL or DB_SECRET_ARN)';
  if (env.DATABASE_URL) {
    try {
      const url = new URL(env.DATABASE_URL);
      database = `${url.hostname}${url.port ? `:${url.port}` : ''}${url.pathname} (DATABASE_URL)`;
    } catch {
      database = '(DATABASE_URL is not a URL)';
    }
  } else if (env.DB_SECRET_ARN) {
    database = `${env.DB_HOST ?? 'the host in'} secret ${env.DB_SECRET_ARN} (DB_SECRET_ARN)`;
  }
  const stripe = env.STRIPE_API_BASE ?? 'api.stripe.com';
  const command = invocation.command;
  const actor = isAction(command) ? `; actor ${command.action.actor} (as said, not verified)` : '';
  const deployed = deployedDb || live;
  const ignored = deployed && env.OPS_SEARCH_SETTLE_MS ? '; OPS_SEARCH_SETTLE_MS is ignored (not a local run)' : '';
  return { deployed, banner: `target: ${deployed ? 'deployed' : 'local'} pipeline — database ${database}, Stripe ${stripe}${live ? ' (live key)' : ''}, direct${actor}${ignored}` };
}
