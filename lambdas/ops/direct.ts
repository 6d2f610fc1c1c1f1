// The CLI's direct transport: a small pool of its own for one command (not the Lambda container's
// per-container singletons), the Stripe look-up, and the outbox publisher when a bus is configured.
// The connection settings are the functions' own (DATABASE_URL locally, or the RDS secret with TLS
// from a bastion), so the tool reaches the database exactly as the pipeline does.
import os from 'node:os';
import pg from 'pg';
import { databaseClientConfig, getEventPublisher } from '../runtime/resources.ts';
import type { OpsContext } from './commands.ts';
import { lazyGateway, lazyLookup, opsConfig, reviewPolicy } from './environment.ts';
import { OpsConfigError } from './errors.ts';

function configFrom(env: NodeJS.ProcessEnv) {
  try {
    return opsConfig(env);
  } catch (error) {
    if (error instanceof OpsConfigError && !env.DATABASE_URL && !env.DB_SECRET_ARN) {
      throw new OpsConfigError(`${error.message} — or, on AWS, run the command in the ops function: --lambda <function-name>`);
    }
    throw error;
  }
}

export function directContext(env: NodeJS.ProcessEnv): { context: () => Promise<OpsContext>; close: () => Promise<void> } {
  let pool: pg.Pool | undefined;
  return {
    context: async () => {
      const config = configFrom(env);
      const policy = reviewPolicy(config, env);
      pool = new pg.Pool({ ...(await databaseClientConfig(config)), max: 2, application_name: 'ops-cli' });
      // An idle connection dropping must not crash the command; the query that needs it reports it.
      pool.on('error', () => {});
      return {
        db: pool,
        stripe: lazyLookup(config),
        gateway: lazyGateway(config),
        enginePolicy: config.policy,
        publisher: () => getEventPublisher(config),
        policy,
        transport: { kind: 'direct', host: os.hostname() },
      };
    },
    close: async () => {
      await pool?.end();
    },
  };
}
