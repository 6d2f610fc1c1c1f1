// One core, two entry points: the ops Lambda's handler answers exactly what `npm run ops -- … --json`
// prints, and the CLI's --lambda mode reaches it through the real @aws-sdk/client-lambda.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { OpsResponse } from '../../lambdas/ops/commands.ts';
import { recordRejectedMessages } from '../../lambdas/payments/rejected-store.ts';
import { resetResources } from '../../lambdas/runtime/resources.ts';
import { createTestDatabase } from '../support/db.ts';
import { startStripe } from '../support/stripe.ts';
import { startFakeSts, type FakeSts } from '../support/fake-sts.ts';
import { startLambdaEndpoint, type LambdaEndpoint } from './lambda-endpoint.ts';
import { auditEvents, cli, cliJson, engine, intoReviewChargedUnseen, intoReviewNothingCharged, opsEnv, order, resultOf, type Harness } from './support.ts';

let h: Harness;
let env: NodeJS.ProcessEnv;
let endpoint: LambdaEndpoint;
let sts: FakeSts;
let handler: (typeof import('../../lambdas/ops/handler.ts'))['handler'];

beforeAll(async () => {
  h = { db: await createTestDatabase('ops_lambda'), stripe: await startStripe() };
  sts = await startFakeSts();
  sts.addPrincipal({ accessKeyId: 'AKIDONCALL', secretAccessKey: 'oncall-secret' }, ONCALL);
  // The operator's shell: its AWS credentials sign the identity proof, checked by the fake STS.
  env = { ...opsEnv(h), AWS_ACCESS_KEY_ID: 'AKIDONCALL', AWS_SECRET_ACCESS_KEY: 'oncall-secret', AWS_REGION: 'us-east-1', OPS_STS_ENDPOINT: sts.url };
  // The function's environment, as the stack sets it (a URL here instead of the secret ARN).
  Object.assign(process.env, {
    DATABASE_URL: env.DATABASE_URL,
    STRIPE_SECRET_KEY: env.STRIPE_SECRET_KEY,
    STRIPE_API_BASE: env.STRIPE_API_BASE,
    STRIPE_MAX_NETWORK_RETRIES: '0',
    OPS_SEARCH_SETTLE_MS: '0',
    POWERTOOLS_LOG_LEVEL: 'WARN',
    AWS_REGION: 'us-east-1',
    OPS_STS_ENDPOINT: sts.url,
    OPS_OPERATOR_ARNS: 'arn:aws:iam::000000000000:role/payments/PaymentsOnCall',
  });
  // Imported once the environment is set: the logger reads its level when the module loads.
  ({ handler } = await import('../../lambdas/ops/handler.ts'));
  endpoint = await startLambdaEndpoint({
    'charge-ops': (event, context) => handler(event, context),
    broken: async () => {
      throw new Error('connect ECONNREFUSED 10.0.1.5:5432');
    },
  });
});
afterAll(async () => {
  await endpoint.close();
  await sts.close();
  await resetResources();
  await h.stripe.close();
  await h.db.drop();
});

/** Drop what depends on the moment of the call (the database clock, ages, Stripe's check time). */
function stable(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(stable);
  if (value && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value)
        .filter(([key]) => !['asOf', 'checkedAt'].includes(key) && !key.endsWith('Seconds'))
        .map(([key, v]) => [key, stable(v)]),
    );
  }
  return value;
}

const lambda = ['--lambda', 'charge-ops'];
const ONCALL = { arn: 'arn:aws:sts::000000000000:assumed-role/PaymentsOnCall/alice', account: '000000000000', userId: 'AROAEXAMPLE:alice' };

describe('the ops Lambda', () => {
  it('returns the same document as the CLI for the same command', async () => {
    const id = await intoReviewNothingCharged(h);
    const { id: charged } = await intoReviewChargedUnseen(h);
    for (const argv of [['stats'], ['review', 'list'], ['review', 'show', id], ['review', 'show', charged], ['rejected', 'list'], ['operations', 'show', id]]) {
      const fromCli = (await cliJson(argv, env)).response;
      const fromLambda = (await handler({ command: [...argv, '--json'] })) as OpsResponse;
      expect(fromLambda.ok, argv.join(' ')).toBe(true);
      expect(stable(fromLambda), argv.join(' ')).toEqual(stable(fromCli));
    }
    // Refusals too (a write through the function: signed, and confirmed with --yes).
    const argv = ['review', 'reissue', charged, '--confirm-no-charge', '--reason', 'r', '--actor', 'alice'];
    const refusedCli = (await cliJson(argv, env)).response;
    const refusedLambda = (await cliJson([...argv, ...lambda, '--endpoint', endpoint.url, '--yes'], env)).response;
    expect(refusedLambda).toMatchObject({ ok: false, exitCode: 1, error: { code: 'refused' } });
    expect(stable(refusedLambda)).toEqual(stable(refusedCli));
  });

  it('one command run three times at once through --lambda (the live page polling while a person reloads it): each gets a proof of its own, none is refused as used', async () => {
    const runs = await Promise.all([1, 2, 3].map(() => cliJson(['stats', ...lambda, '--endpoint', endpoint.url], env)));
    expect(runs.map((r) => [r.code, r.response.ok])).toEqual([[0, true], [0, true], [0, true]]);
    const proofs = endpoint.invocations.slice(-3).map((i) => (i.event as { identity?: { query?: string } }).identity?.query);
    expect(new Set(proofs).size).toBe(3);
  });

  it('the CLI with --lambda invokes it through @aws-sdk/client-lambda and prints the same', async () => {
    await intoReviewNothingCharged(h);
    const direct = (await cliJson(['review', 'list'], env)).response;
    const viaLambda = await cliJson(['review', 'list', ...lambda, '--endpoint', endpoint.url], env);
    expect(viaLambda.code).toBe(0);
    expect(stable(viaLambda.response)).toEqual(stable(direct));
    // What was sent: the argv minus the transport options, and the caller's identity proof.
    expect(endpoint.invocations.at(-1)?.event).toEqual({ command: ['review', 'list', '--json'], identity: { v: 1, query: expect.stringMatching(/^Action=GetCallerIdentity&/) } });

    const table = await cli(['stats', ...lambda, '--endpoint', endpoint.url], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/review queue/);
  });

  it('an action through the Lambda is the verified caller\'s, the CLI user beside it as a note, and records the invocation', async () => {
    const id = await intoReviewNothingCharged(h);
    const run = await cli(['review', 'resolve', id, '--as', 'failed', '--reason', 'INC-7 verified no charge', ...lambda, '--endpoint', endpoint.url, '--yes'], env);
    expect(run.code).toBe(0);
    const sent = endpoint.invocations.at(-1)!;
    expect(sent.event).toMatchObject({ command: ['review', 'resolve', id, '--as', 'failed', '--reason', 'INC-7 verified no charge', '--actor', os.userInfo().username] });
    const audit = (await auditEvents(h, id)).at(-1)!;
    expect(audit).toMatchObject({ action: 'operator_resolved', actor: `operator:${ONCALL.arn}`, to_status: 'failed' });
    expect(audit.detail).toMatchObject({
      reason: 'INC-7 verified no charge',
      transport: { kind: 'lambda', requestId: sent.requestId, functionName: 'charge-ops' },
      identity: { verified: true, method: 'sts:GetCallerIdentity', arn: ONCALL.arn, account: ONCALL.account, userId: ONCALL.userId, allowedBy: 'arn:aws:iam::000000000000:role/payments/PaymentsOnCall' },
      actorNote: os.userInfo().username,
    });
  });

  it('refusals and bad arguments come back as answers with exit codes, through the CLI too', async () => {
    const { id } = await intoReviewChargedUnseen(h);
    const refused = await cli(['review', 'resolve', id, '--as', 'failed', '--reason', 'x', ...lambda, '--endpoint', endpoint.url, '--yes'], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/refused: Stripe shows a succeeded PaymentIntent/);

    expect(await handler({})).toMatchObject({ ok: false, exitCode: 2, error: { code: 'usage', message: expect.stringMatching(/"command"/) } });
    expect(await handler({ command: 'stats' })).toMatchObject({ exitCode: 2 });
    expect(await handler({ command: ['stats', '--lambda', 'x'] })).toMatchObject({ exitCode: 2, error: { message: expect.stringMatching(/options of the CLI/) } });
    // Inside the function nobody is logged in: an action without an identity proof is refused.
    expect(await handler({ command: ['review', 'note', id, '--reason', 'x'] })).toMatchObject({
      exitCode: 1,
      error: { code: 'unauthorized', message: expect.stringMatching(/^review note writes: through the ops function only as a caller STS verified/) },
    });
    expect(await handler({ command: ['review', 'lsit'] })).toMatchObject({ exitCode: 2, error: { message: expect.stringMatching(/review has: list, show/) } });
  });

  it('a function failure is exit 1 with the function’s error; an unknown function too', async () => {
    const broken = await cli(['stats', '--lambda', 'broken', '--endpoint', endpoint.url], env);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toMatch(/the ops function broken failed \(Unhandled\): Error: connect ECONNREFUSED/);
    const missing = await cli(['stats', '--lambda', 'no-such-function', '--endpoint', endpoint.url], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/error: .*not found/i);
  });

  it('answers a command from `aws lambda invoke` shape without --json (the Lambda always answers JSON): stats of a known database, figure by figure', async () => {
    // A database of its own, so that the figures are this setup's only: one of each state.
    const known: Harness = { db: await createTestDatabase('ops_lambda_stats'), stripe: h.stripe };
    try {
      const e = engine(known);
      const paid = await e.requestCharge(order());
      expect((await e.executeCharge(paid)).status).toBe('succeeded');
      const declined = await e.requestCharge(order({ paymentMethod: 'pm_card_chargeDeclined' }));
      expect((await e.executeCharge(declined)).status).toBe('failed');
      const review = await intoReviewNothingCharged(known);
      const waiting = await e.requestCharge(order()); // durable, never attempted, due now
      await recordRejectedMessages(known.db.pool, [{ messageId: `m-${randomUUID()}`, reasonCode: 'invalid_json', reason: 'body is not valid JSON', rawBody: 'x' }]);
      process.env.DATABASE_URL = known.db.url;
      await resetResources();
      const stats = resultOf(await handler({ command: ['stats'] }), 'stats');
      expect(stats.operations).toEqual({ pending: 1, unknown: 1, succeeded: 1, failed: 1, total: 4 });
      expect(stats.open).toMatchObject({ pending: 1, unknown: 0, oldestOperationId: waiting, dueNow: 1, leased: 0 });
      expect(stats.review).toMatchObject({ size: 1, oldestOperationId: review });
      expect(stats.rejected).toEqual({ last24h: 1 });
      // Charge Succeeded, Charge Failed, Charge Needs Review: written, never published (no bus here).
      expect(stats.outbox.unpublished).toBe(3);
    } finally {
      process.env.DATABASE_URL = env.DATABASE_URL;
      await resetResources();
      await known.db.drop();
    }
  });
});

describe('the live page through the ops Lambda (ops ui --lambda)', () => {
  it('reads through the function and writes as the IAM identity STS verifies, the --actor a note beside it', async () => {
    const { parseUiArgs, startOpsUi } = await import('../../lambdas/ops/live-page/cli.ts');
    const id = await intoReviewNothingCharged(h);
    const options = parseUiArgs([...lambda, '--endpoint', endpoint.url, '--allow-actions', '--actor', 'pat']);
    if (options === 'help') throw new Error('unexpected help');
    const { page, banner } = await startOpsUi(options, env);
    try {
      expect(banner).toMatch(/^target: deployed pipeline — ops function charge-ops/);
      const state = (await (await fetch(new URL('/api/state', page.url))).json()) as { mode: string; actor: string | null; review: { operations: { id: string }[] } };
      const listed = resultOf((await cliJson(['review', 'list', '--limit', '200'], env)).response, 'review list');
      expect(state).toMatchObject({ mode: 'ops', actor: null });
      expect(state.review.operations.map((o) => o.id)).toEqual(listed.operations.map((o) => o.id));
      const res = await fetch(new URL('/api/actions', page.url), {
        method: 'POST',
        headers: { 'Content-Type': 'application/json', Origin: new URL(page.url).origin },
        body: JSON.stringify({ operationId: id, action: 'note', reason: 'INC-9: looked at it from the page', confirmed: true }),
      });
      const body = (await res.json()) as { response: OpsResponse };
      expect(body.response, JSON.stringify(body)).toMatchObject({ ok: true, command: 'review note' });
      expect((await auditEvents(h, id)).at(-1)).toMatchObject({
        actor: `operator:${ONCALL.arn}`,
        action: 'operator_note',
        detail: { reason: 'INC-9: looked at it from the page', command: 'review note', transport: { kind: 'lambda' }, identity: { verified: true, arn: ONCALL.arn }, actorNote: 'pat' },
      });
    } finally {
      await page.close();
    }
  });
});
