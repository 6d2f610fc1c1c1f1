// Who writes through the deployed ops function: the caller STS verifies, from an identity proof the CLI
// signs with the operator's credentials (the real SignatureV4 of the AWS SDK) and the function checks
// against a fake STS that verifies the signature for real (test/support/fake-sts.ts). Writes and raw-body
// reads are for the allow-listed operators; reads for anyone the function's IAM lets in. A forged
// Function URL event, a proof for another command or function, an old or reused proof: refused, and
// nothing is written. Locally (direct mode) the actor stays the name said, recorded as unverified.
import { randomUUID } from 'node:crypto';
import os from 'node:os';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { allowedBy, checkProofShape, commandDigest, functionNameOf, parseOperatorPrincipals, PROOF_MAX_AGE_MS } from '../../lambdas/ops/identity.ts';
import { signIdentityProof } from '../../lambdas/ops/sign.ts';
import type { OpsResponse } from '../../lambdas/ops/commands.ts';
import { recordRejectedMessages, RejectReason } from '../../lambdas/payments/rejected-store.ts';
import { resetResources } from '../../lambdas/runtime/resources.ts';
import { createTestDatabase } from '../support/db.ts';
import { startFakeSts, type FakeSts } from '../support/fake-sts.ts';
import { startStripe } from '../support/stripe.ts';
import { startLambdaEndpoint, type LambdaEndpoint } from './lambda-endpoint.ts';
import { auditEvents, cli, cliJson, engine, intoReviewNothingCharged, opsEnv, order, resultOf, type Harness } from './support.ts';

const ACCOUNT = '000000000000';
const ALICE = { arn: `arn:aws:sts::${ACCOUNT}:assumed-role/PaymentsOnCall/alice@example.com`, account: ACCOUNT, userId: 'AROAONCALL:alice@example.com' };
const MALLORY = { arn: `arn:aws:sts::${ACCOUNT}:assumed-role/PowerUser/mallory`, account: ACCOUNT, userId: 'AROAPOWER:mallory' };
const ALICE_KEYS = { accessKeyId: 'AKIDALICE', secretAccessKey: 'alice-secret' };
const MALLORY_KEYS = { accessKeyId: 'AKIDMALLORY', secretAccessKey: 'mallory-secret', sessionToken: 'mallory-session-token/+=' };
const ONCALL_ROLE = `arn:aws:iam::${ACCOUNT}:role/PaymentsOnCall`;

let h: Harness;
let sts: FakeSts;
let endpoint: LambdaEndpoint;
let handler: (typeof import('../../lambdas/ops/handler.ts'))['handler'];
let alice: NodeJS.ProcessEnv;
let mallory: NodeJS.ProcessEnv;

beforeAll(async () => {
  h = { db: await createTestDatabase('ops_identity'), stripe: await startStripe() };
  sts = await startFakeSts();
  sts.addPrincipal(ALICE_KEYS, ALICE);
  sts.addPrincipal(MALLORY_KEYS, MALLORY);
  const shell = { ...opsEnv(h), AWS_REGION: 'us-east-1', OPS_STS_ENDPOINT: sts.url };
  alice = { ...shell, AWS_ACCESS_KEY_ID: ALICE_KEYS.accessKeyId, AWS_SECRET_ACCESS_KEY: ALICE_KEYS.secretAccessKey, USER: 'alice' };
  mallory = { ...shell, AWS_ACCESS_KEY_ID: MALLORY_KEYS.accessKeyId, AWS_SECRET_ACCESS_KEY: MALLORY_KEYS.secretAccessKey, AWS_SESSION_TOKEN: MALLORY_KEYS.sessionToken, USER: 'mallory' };
  Object.assign(process.env, {
    DATABASE_URL: h.db.url,
    STRIPE_SECRET_KEY: 'sk_test_ops',
    STRIPE_API_BASE: h.stripe.fake.url,
    STRIPE_MAX_NETWORK_RETRIES: '0',
    OPS_SEARCH_SETTLE_MS: '0',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    AWS_REGION: 'us-east-1',
    OPS_STS_ENDPOINT: sts.url,
    OPS_OPERATOR_ARNS: ONCALL_ROLE,
  });
  ({ handler } = await import('../../lambdas/ops/handler.ts'));
  endpoint = await startLambdaEndpoint({ 'charge-ops': (event, context) => handler(event, context), 'other-ops': (event, context) => handler(event, context) });
});
afterAll(async () => {
  await endpoint.close();
  await sts.close();
  await resetResources();
  await h.stripe.close();
  await h.db.drop();
});

const viaLambda = ['--lambda', 'charge-ops', '--yes'];
const via = () => [...viaLambda, '--endpoint', endpoint.url];
const errorOf = (response: OpsResponse) => (response.ok ? null : response.error);

async function operatorReads() {
  const { rows } = await h.db.pool.query<{ actor: string; verified: boolean; command: string; rejected_message_ids: string[]; detail: Record<string, unknown> }>(
    'SELECT actor, verified, command, rejected_message_ids, detail FROM operator_reads ORDER BY id',
  );
  return rows;
}

/** A Lambda Invoke as `aws lambda invoke` (or any PowerUser) makes it: any payload at all. */
const invoke = (event: unknown, functionName = 'charge-ops') =>
  handler(event, { functionName, awsRequestId: randomUUID() } as never);

describe('the ops function establishes who writes', () => {
  it('a write through the CLI is the verified caller\'s; --actor is only a note beside it', async () => {
    const id = await intoReviewNothingCharged(h);
    const run = await cli(['review', 'note', id, '--reason', 'INC-9 looked at it', '--actor', 'bob', ...via()], alice);
    expect(run.code).toBe(0);
    const note = (await auditEvents(h, id)).at(-1)!;
    expect(note).toMatchObject({ action: 'operator_note', actor: `operator:${ALICE.arn}` });
    expect(note.detail).toMatchObject({ identity: { verified: true, arn: ALICE.arn, allowedBy: ONCALL_ROLE }, actorNote: 'bob' });
  });

  it('a plain Invoke carries no identity: writes are refused, reads are answered', async () => {
    const id = await intoReviewNothingCharged(h);
    const before = (await auditEvents(h, id)).length;
    const answer = await invoke({ command: ['review', 'reissue', id, '--confirm-no-charge', '--reason', 'x', '--actor', 'alice'] });
    expect(errorOf(answer)).toMatchObject({ code: 'unauthorized', message: expect.stringMatching(/^review reissue writes: through the ops function only as a caller STS verified — run it with npm run ops -- … --lambda/) });
    expect(answer.exitCode).toBe(1);
    expect((await auditEvents(h, id)).length).toBe(before);
    expect(resultOf(await invoke({ command: ['review', 'show', id] }), 'review show').operation.id).toBe(id);
  });

  it('a forged Function URL event naming the on-call role is just an event: refused', async () => {
    const id = await intoReviewNothingCharged(h);
    const forged = {
      command: ['review', 'resolve', id, '--as', 'failed', '--reason', 'trust me'],
      requestContext: { authorizer: { iam: { userArn: ALICE.arn, accountId: ACCOUNT, callerId: ALICE.userId } }, http: { method: 'POST' } },
    };
    expect(errorOf(await invoke(forged))).toMatchObject({ code: 'unauthorized' });
    expect((await auditEvents(h, id)).some((e) => e.action === 'operator_resolved')).toBe(false);
  });

  it('a verified caller not on the allow-list reads, and may not write or read raw bodies', async () => {
    const id = await intoReviewNothingCharged(h);
    const reads = await cliJson(['review', 'show', id, ...via()], mallory);
    expect(reads.code).toBe(0);
    const write = await cliJson(['review', 'resolve', id, '--as', 'failed', '--reason', 'x', ...via()], mallory);
    expect(write.code).toBe(1);
    expect(errorOf(write.response)).toMatchObject({
      code: 'unauthorized',
      message: `${MALLORY.arn} may not run review resolve through the ops function: writes and raw-body reads are for the operators allowed by OPS_OPERATOR_ARNS (${ONCALL_ROLE}); reads are open to you`,
    });
    const bodies = await cliJson(['rejected', 'list', '--with-body', ...via()], mallory);
    expect(errorOf(bodies.response)).toMatchObject({ code: 'unauthorized' });
    expect((await auditEvents(h, id)).some((e) => e.action === 'operator_resolved' || e.action === 'operator_note')).toBe(false);
  });

  it('a proof signed for another command, another function, by an unknown key, too old, or used twice: refused', async () => {
    const id = await intoReviewNothingCharged(h);
    const write = ['review', 'note', id, '--reason', 'proof games'];
    const sign = (argv: readonly string[], options: { functionName?: string; signingDate?: Date; credentials?: typeof ALICE_KEYS } = {}) =>
      signIdentityProof({ argv, functionName: options.functionName ?? 'charge-ops', region: 'us-east-1', credentials: options.credentials ?? ALICE_KEYS, stsEndpoint: sts.url, ...(options.signingDate ? { signingDate: options.signingDate } : {}) });
    // Alice's proof of a read, sent with a write: the digest the function computes is not the one signed.
    const forRead = await sign(['stats']);
    expect(errorOf(await invoke({ command: write, identity: forRead }))).toMatchObject({ code: 'unauthorized', message: expect.stringMatching(/^STS refused the identity proof \(403 SignatureDoesNotMatch\)/) });
    // Signed for another function.
    expect(errorOf(await invoke({ command: write, identity: await sign(write, { functionName: 'other-ops' }) }))).toMatchObject({ code: 'unauthorized', message: expect.stringMatching(/SignatureDoesNotMatch/) });
    // Credentials STS does not know.
    expect(errorOf(await invoke({ command: write, identity: await sign(write, { credentials: { accessKeyId: 'AKIDNOBODY', secretAccessKey: 'x' } }) }))).toMatchObject({ message: expect.stringMatching(/InvalidClientTokenId/) });
    // Older than the function's window (STS itself would still honour it for 15 minutes).
    const old = await sign(write, { signingDate: new Date(Date.now() - PROOF_MAX_AGE_MS - 60_000) });
    expect(errorOf(await invoke({ command: write, identity: old }))).toMatchObject({ message: expect.stringMatching(/more than 5 minutes from now: run the command again/) });
    // Good once, then refused: a copied proof cannot be sent again.
    const good = await sign(write);
    expect(resultOf(await invoke({ command: write, identity: good }), 'review note').auditEvent.actor).toBe(`operator:${ALICE.arn}`);
    expect(errorOf(await invoke({ command: write, identity: good }))).toMatchObject({ code: 'unauthorized', message: expect.stringMatching(/^this identity proof was used already/) });
    expect((await auditEvents(h, id)).filter((e) => e.action === 'operator_note')).toHaveLength(1);
    // Not a proof at all.
    expect(errorOf(await invoke({ command: write, identity: { v: 1, query: 'Action=GetCallerIdentity&Version=2011-06-15&Extra=1' } }))).toMatchObject({ message: expect.stringMatching(/parameter a presigned GetCallerIdentity does not: Extra/) });
  });

  it('a refund made through the function carries its reason and the verified caller in its own requested event', async () => {
    const input = order();
    const e = engine(h);
    await e.executeCharge(await e.requestCharge(input));
    const run = await cliJson(['refunds', 'create', input.orderId, '--refund-id', 'r-1', '--amount', '100', '--reason', 'TICKET-12 customer asked', ...via()], alice);
    const refund = resultOf(run.response, 'refunds create');
    const requested = (await auditEvents(h, refund.operation.id)).filter((ev) => ev.action === 'requested');
    expect(requested).toHaveLength(1);
    expect(requested[0]).toMatchObject({ actor: `operator:${ALICE.arn}` });
    expect(requested[0]!.detail).toMatchObject({ refundId: 'r-1', reason: 'TICKET-12 customer asked', command: 'refunds create', identity: { verified: true, arn: ALICE.arn } });
    expect(refund.auditEvent).toMatchObject({ action: 'requested' });
    // The same refund id again makes nothing; the repeat is noted with who asked and why.
    const again = resultOf((await cliJson(['refunds', 'create', input.orderId, '--refund-id', 'r-1', '--amount', '100', '--reason', 'asked twice', ...via()], alice)).response, 'refunds create');
    expect(again.auditEvent).toMatchObject({ action: 'operator_note', actor: `operator:${ALICE.arn}`, detail: { reason: 'asked twice', repeated: true } });
  });
});

describe('raw bodies are read with a record of who read them', () => {
  it('through the function: the verified reader and the rows shown, in operator_reads; directly: the name said, unverified', async () => {
    const orderId = `order-${randomUUID()}`;
    await recordRejectedMessages(h.db.pool, [{ messageId: `m-${randomUUID()}`, reasonCode: RejectReason.invalidBody, reason: 'amount: must be positive', orderId, rawBody: '{"amount":-1,"card":"none"}' }]);
    const before = (await operatorReads()).length;
    const shown = resultOf((await cliJson(['rejected', 'list', '--order', orderId, '--with-body', ...via()], alice)).response, 'rejected list');
    expect(shown.messages.map((m) => m.rawBody)).toEqual(['{"amount":-1,"card":"none"}']);
    const direct = resultOf((await cliJson(['rejected', 'list', '--order', orderId, '--with-body'], alice)).response, 'rejected list');
    expect(direct.messages).toHaveLength(1);
    // Without --with-body nothing is recorded: no body was shown.
    await cliJson(['rejected', 'list', '--order', orderId], alice);
    const reads = (await operatorReads()).slice(before);
    expect(reads.map((r) => ({ actor: r.actor, verified: r.verified, command: r.command, ids: r.rejected_message_ids.map(Number) }))).toEqual([
      { actor: `operator:${ALICE.arn}`, verified: true, command: 'rejected list --with-body', ids: [shown.messages[0]!.id] },
      { actor: 'operator:unverified', verified: false, command: 'rejected list --with-body', ids: [shown.messages[0]!.id] },
    ]);
    expect(reads[1]!.detail).toMatchObject({ identity: { verified: false }, transport: { kind: 'direct' } });
    // The record cannot be edited away.
    await expect(h.db.pool.query('DELETE FROM operator_reads')).rejects.toThrow(/operator_reads is append-only/);
  });
});

describe('direct mode (a laptop, a bastion): the actor as said, marked unverified', () => {
  it('the OS user or --actor is the actor; the trail says nothing verified it', async () => {
    const id = await intoReviewNothingCharged(h);
    expect((await cli(['review', 'note', id, '--reason', 'local look'], alice)).code).toBe(0);
    expect((await cli(['review', 'note', id, '--reason', 'for carol', '--actor', 'carol'], alice)).code).toBe(0);
    const notes = (await auditEvents(h, id)).filter((e) => e.action === 'operator_note');
    expect(notes.map((n) => [n.actor, n.detail.identity])).toEqual([
      [`operator:${os.userInfo().username}`, { verified: false, claimed: os.userInfo().username, claimedFrom: 'os-user' }],
      ['operator:carol', { verified: false, claimed: 'carol', claimedFrom: '--actor' }],
    ]);
  });
});

describe('the proof and the allow-list, on their own', () => {
  it('binds the argv exactly and names the function in any of its spellings', () => {
    expect(commandDigest(['stats'])).not.toBe(commandDigest(['stats', '--json']));
    expect(commandDigest(['a b'])).not.toBe(commandDigest(['a', 'b']));
    for (const name of ['charge-ops', 'arn:aws:lambda:eu-west-1:123456789012:function:charge-ops', 'arn:aws:lambda:eu-west-1:123456789012:function:charge-ops:live', '123456789012:function:charge-ops']) {
      expect(functionNameOf(name), name).toBe('charge-ops');
    }
  });

  it('checkProofShape refuses what a presigned GetCallerIdentity is not', async () => {
    const now = Date.now();
    const proof = await signIdentityProof({ argv: ['stats'], functionName: 'f', region: 'eu-west-1', credentials: ALICE_KEYS, signingDate: new Date(now) });
    expect(checkProofShape(proof, now).signature).toMatch(/^[0-9a-f]{64}$/);
    const without = (param: string) => ({ v: 1, query: new URLSearchParams([...new URLSearchParams(proof.query)].filter(([k]) => k !== param)).toString() });
    expect(() => checkProofShape(without('X-Amz-Signature'), now)).toThrow(/X-Amz-Signature/);
    const unsigned = new URLSearchParams(proof.query);
    unsigned.set('X-Amz-SignedHeaders', 'host');
    expect(() => checkProofShape({ v: 1, query: unsigned.toString() }, now)).toThrow(/does not sign the x-charge-ops-audience header/);
    const action = new URLSearchParams(proof.query);
    action.set('Action', 'AssumeRole');
    expect(() => checkProofShape({ v: 1, query: action.toString() }, now)).toThrow(/not a SigV4-presigned STS GetCallerIdentity/);
    expect(() => checkProofShape(proof, now + PROOF_MAX_AGE_MS + 1)).toThrow(/more than 5 minutes/);
    expect(() => checkProofShape(proof, now - 61_000)).toThrow(/more than 5 minutes/);
    expect(() => checkProofShape({ query: proof.query }, now)).toThrow(/malformed/);
  });

  it('allows a role\'s sessions (whatever its path), one session, or a user; nothing else', () => {
    const list = parseOperatorPrincipals(
      [`arn:aws:iam::${ACCOUNT}:role/aws-reserved/sso.amazonaws.com/eu-west-1/AWSReservedSSO_OnCall_abc`, `arn:aws:sts::${ACCOUNT}:assumed-role/Breakglass/dana`, `arn:aws:iam::${ACCOUNT}:user/ops/erin`].join(', '),
    );
    const allowed = (arn: string) => allowedBy(arn, list)?.arn ?? null;
    expect(allowed(`arn:aws:sts::${ACCOUNT}:assumed-role/AWSReservedSSO_OnCall_abc/alice@example.com`)).toBe(list[0]!.arn);
    expect(allowed(`arn:aws:sts::${ACCOUNT}:assumed-role/awsreservedsso_oncall_abc/alice@example.com`)).toBe(list[0]!.arn);
    expect(allowed(`arn:aws:sts::${ACCOUNT}:assumed-role/Breakglass/dana`)).toBe(list[1]!.arn);
    expect(allowed(`arn:aws:sts::${ACCOUNT}:assumed-role/Breakglass/mallory`)).toBeNull();
    expect(allowed(`arn:aws:iam::${ACCOUNT}:user/ops/erin`)).toBe(list[2]!.arn);
    expect(allowed(`arn:aws:iam::${ACCOUNT}:user/erin`)).toBe(list[2]!.arn);
    expect(allowed(`arn:aws:sts::111111111111:assumed-role/AWSReservedSSO_OnCall_abc/alice`)).toBeNull();
    expect(allowed(`arn:aws:iam::${ACCOUNT}:root`)).toBeNull();
    expect(allowed(`arn:aws:sts::${ACCOUNT}:assumed-role/PowerUser/x`)).toBeNull();
    expect(parseOperatorPrincipals(undefined)).toEqual([]);
    for (const bad of [`arn:aws:iam::${ACCOUNT}:root`, 'arn:aws:iam::*:role/x', `arn:aws:iam::${ACCOUNT}:role/*`, 'PaymentsOnCall']) {
      expect(() => parseOperatorPrincipals(bad), bad).toThrow(/^OPS_OPERATOR_ARNS: .* is not an IAM role ARN/);
    }
  });
});
