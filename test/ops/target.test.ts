// Where an operator command goes is said before it runs, and a write against a deployed pipeline
// (the ops function, a deployed database from a bastion, a live Stripe key) needs --yes — refused
// before any connection without it. Test knobs are read in local runs only.
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { identitySettings, ignoredTestKnobs, reviewPolicy } from '../../lambdas/ops/environment.ts';
import { loadConfig } from '../../lambdas/runtime/config.ts';
import { startLambdaEndpoint, type LambdaEndpoint } from './lambda-endpoint.ts';
import { cli } from './support.ts';

/** The actor the CLI names from the OS user (os.userInfo first, then USER). */
const USER = os.userInfo().username;
const ID = '00000000-0000-4000-8000-000000000001';
const SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:charges-app-AbCdEf';
let endpoint: LambdaEndpoint;

beforeAll(async () => {
  endpoint = await startLambdaEndpoint({
    'charge-ops': async (event) => ({ ok: true, exitCode: 0, command: 'stats', result: { echoed: event } }),
  });
});
afterAll(async () => endpoint.close());

describe('the target banner and --yes', () => {
  const write = ['review', 'note', ID, '--reason', 'INC-1'];

  it('--lambda: says which function, region and how the caller is known; a write without --yes is exit 2 and nothing is sent', async () => {
    const env = { AWS_REGION: 'eu-west-1', AWS_ACCESS_KEY_ID: 'AKIDX', AWS_SECRET_ACCESS_KEY: 'x', USER: 'alice' };
    const run = await cli([...write, '--lambda', 'charge-ops', '--endpoint', endpoint.url], env);
    expect(run.code).toBe(2);
    expect(run.stderr.split('\n')).toEqual([
      `target: deployed pipeline — ops function charge-ops in eu-west-1 through the Lambda API at ${endpoint.url}; you act as the IAM identity STS verifies`,
      'error: review note writes to a deployed pipeline (the target above): check it, then run the command again with --yes',
      'Run with --help for usage.',
    ]);
    expect(endpoint.invocations).toHaveLength(0);
    // A read needs no --yes; the region option wins over AWS_REGION in the banner as in the call.
    const read = await cli(['stats', '--json', '--lambda', 'charge-ops', '--region', 'us-east-1', '--endpoint', endpoint.url], env);
    expect(read.stderr.split('\n')[0]).toBe(`target: deployed pipeline — ops function charge-ops in us-east-1 through the Lambda API at ${endpoint.url}; you act as the IAM identity STS verifies`);
    expect(endpoint.invocations).toHaveLength(1);
    // With --yes the write is sent (this stand-in answers anything).
    expect((await cli([...write, '--json', '--lambda', 'charge-ops', '--endpoint', endpoint.url, '--yes'], env)).code).toBe(0);
    expect(endpoint.invocations).toHaveLength(2);
  });

  it('direct against a deployed database (DB_SECRET_ARN) or with a live key: a write without --yes is exit 2 before any connection', async () => {
    const bastion = await cli(write, { DB_SECRET_ARN: SECRET_ARN, DB_HOST: 'charges.abc.eu-west-1.rds.amazonaws.com', AWS_REGION: 'eu-west-1', USER: 'alice' });
    expect(bastion.code).toBe(2);
    expect(bastion.stderr.split('\n')).toEqual([
      `target: deployed pipeline — database charges.abc.eu-west-1.rds.amazonaws.com secret ${SECRET_ARN} (DB_SECRET_ARN), Stripe api.stripe.com, direct; actor operator:${USER} (as said, not verified)`,
      'error: review note writes to a deployed pipeline (the target above): check it, then run the command again with --yes',
      'Run with --help for usage.',
    ]);
    // Live key, local URL: deployed too (real money); the knob is said to be ignored.
    const live = await cli(write, { DATABASE_URL: 'postgres://u:p@127.0.0.1:1/charges', STRIPE_SECRET_KEY: 'sk_live_x', OPS_SEARCH_SETTLE_MS: '0', USER: 'alice' });
    expect(live.code).toBe(2);
    expect(live.stderr.split('\n')[0]).toBe(
      `target: deployed pipeline — database 127.0.0.1:1/charges (DATABASE_URL), Stripe api.stripe.com (live key), direct; actor operator:${USER} (as said, not verified); OPS_SEARCH_SETTLE_MS is ignored (not a local run)`,
    );
  });

  it('a local pipeline: the banner says local, and no --yes is asked', async () => {
    // Port 1 refuses: the command fails connecting (exit 1), after the banner — not for want of --yes.
    const run = await cli(write, { DATABASE_URL: 'postgres://u:p@127.0.0.1:1/charges', STRIPE_SECRET_KEY: 'sk_test_x', DB_CONNECT_TIMEOUT_MS: '500', USER: 'alice' });
    expect(run.stderr.split('\n')[0]).toBe(`target: local pipeline — database 127.0.0.1:1/charges (DATABASE_URL), Stripe api.stripe.com, direct; actor operator:${USER} (as said, not verified)`);
    expect(run.code).toBe(1);
  });
});

describe('test knobs outside local runs', () => {
  const local = { DATABASE_URL: 'postgres://u:p@127.0.0.1/x', OPS_SEARCH_SETTLE_MS: '0' };
  const bastion = { DB_SECRET_ARN: SECRET_ARN, OPS_SEARCH_SETTLE_MS: '0' };
  const lambda = { ...bastion, AWS_LAMBDA_FUNCTION_NAME: 'charge-ops', AWS_REGION: 'eu-west-1' };

  it('OPS_SEARCH_SETTLE_MS is read locally only: against a deployed database, and in the ops function, Search gets the engine\'s delay', () => {
    expect(reviewPolicy(loadConfig(local), local).searchSettleMs).toBe(0);
    for (const env of [bastion, lambda]) {
      expect(reviewPolicy(loadConfig(env), env).searchSettleMs).toBe(600_000);
      expect(ignoredTestKnobs(loadConfig(env), env)).toEqual(['OPS_SEARCH_SETTLE_MS']);
    }
    expect(ignoredTestKnobs(loadConfig(local), local)).toEqual([]);
  });

  it('OPS_STS_ENDPOINT is refused in Lambda (it would decide who the caller is); without it the function asks STS in its region', () => {
    expect(() => identitySettings({ ...lambda, OPS_STS_ENDPOINT: 'http://127.0.0.1:9' }, 'charge-ops')).toThrow(/^OPS_STS_ENDPOINT is refused in Lambda/);
    expect(identitySettings(lambda, 'charge-ops')).toEqual({ functionName: 'charge-ops', stsEndpoint: 'https://sts.eu-west-1.amazonaws.com', operators: [] });
    expect(identitySettings({ ...local, OPS_STS_ENDPOINT: 'http://127.0.0.1:9' }, 'charge-ops').stsEndpoint).toBe('http://127.0.0.1:9');
    expect(() => identitySettings({ ...lambda, OPS_OPERATOR_ARNS: 'PowerUser' }, 'charge-ops')).toThrow(/^OPS_OPERATOR_ARNS: "PowerUser" is not an IAM role ARN/);
  });
});
