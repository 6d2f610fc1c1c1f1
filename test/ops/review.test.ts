// The operator commands end to end: the CLI (in-process, direct mode) on real PostgreSQL 18 and the
// fake Stripe through the real SDK, with operations put into review by the real engine.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { idempotencyKey } from '../../lambdas/payments/decisions.ts';
import { createStripeClient } from '../../lambdas/payments/stripe-gateway.ts';
import { collectGauges } from '../../lambdas/reconcile/gauges.ts';
import { createTestDatabase } from '../support/db.ts';
import { startStripe } from '../support/stripe.ts';
import {
  auditEvents,
  cli,
  cliJson,
  createKeys,
  engine,
  intoReviewChargedUnseen,
  intoReviewKeyMisused,
  intoReviewNothingCharged,
  intoReviewProcessing,
  operationRow,
  opsEnv,
  order,
  outboxRows,
  resultOf,
  type Harness,
} from './support.ts';

let h: Harness;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  h = { db: await createTestDatabase('ops_review'), stripe: await startStripe() };
  env = opsEnv(h);
});
afterAll(async () => {
  await h.stripe.close();
  await h.db.drop();
});
beforeEach(() => {
  h.stripe.fake.setSearchLag(0);
});

const because = ['--reason', 'TICKET-1: checked the Stripe dashboard', '--actor', 'alice'];

describe('review list', () => {
  it('lists what waits for a human, oldest first, with filters; and tables by default', async () => {
    const first = await intoReviewNothingCharged(h);
    const { id: second } = await intoReviewKeyMisused(h);
    await h.db.pool.query(`UPDATE payment_operations SET updated_at = now() - interval '3 hours' WHERE id = $1`, [first]);

    const all = resultOf((await cliJson(['review', 'list'], env)).response, 'review list');
    const ids = all.operations.map((op) => op.id);
    expect(ids).toContain(first);
    expect(ids).toContain(second);
    expect(ids.indexOf(first)).toBeLessThan(ids.indexOf(second));
    const listed = all.operations.find((op) => op.id === first)!;
    expect(listed).toMatchObject({ amount: 1999, currency: 'eur', status: 'unknown', inReview: true, keyGeneration: 0 });
    expect(listed.reviewReason).toMatch(/key window expired/);
    expect(listed.inReviewSeconds).toBeGreaterThanOrEqual(3 * 3600 - 5);

    const old = resultOf((await cliJson(['review', 'list', '--older-than', '2h'], env)).response, 'review list');
    expect(old.operations.map((op) => op.id)).toContain(first);
    expect(old.operations.map((op) => op.id)).not.toContain(second);

    const misuse = resultOf((await cliJson(['review', 'list', '--reason-contains', 'IDEMPOTENCY KEY'], env)).response, 'review list');
    expect(misuse.operations.map((op) => op.id)).toEqual(expect.arrayContaining([second]));
    expect(misuse.operations.map((op) => op.id)).not.toContain(first);

    const one = resultOf((await cliJson(['review', 'list', '--limit', '1'], env)).response, 'review list');
    expect(one.operations).toHaveLength(1);
    expect(one.total).toBeGreaterThanOrEqual(2);

    const table = await cli(['review', 'list'], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/IN REVIEW\s+OPERATION\s+KIND\s+ORDER\s+REFUND ID\s+PAYMENT INTENT\s+AMOUNT/);
    expect(table.stdout).toContain('19.99 EUR');
    expect(table.stdout).toContain(first);
  });
});

describe('review show', () => {
  it('shows the operation, its whole audit trail, what Stripe holds (all generations) and what may be done', async () => {
    const { id, paymentIntentId } = await intoReviewChargedUnseen(h);
    const shown = resultOf((await cliJson(['review', 'show', id], env)).response, 'review show');
    expect(shown.operation).toMatchObject({ id, status: 'unknown', inReview: true, idempotencyKey: idempotencyKey(id, 0) });
    expect(shown.auditTrail.map((e) => e.action)).toEqual([
      'requested',
      'attempt_started',
      'outcome_recorded',
      'attempt_started',
      'outcome_recorded',
    ]);
    expect(shown.auditTrail.at(-1)).toMatchObject({ step: 'search', actor: 'test-engine' });
    expect(shown.outcomeEvents.map((e) => e.eventType)).toEqual(['Charge Needs Review']);
    // Search lags no more: now Stripe shows the charge the engine could not see.
    expect(shown.stripe?.complete).toBe(true);
    expect(shown.stripe?.paymentIntents).toEqual([expect.objectContaining({ id: paymentIntentId, status: 'succeeded', foundBy: ['retrieve', 'search'] })]);
    expect(shown.options).toEqual({
      proofFlag: '--payment-intent',
      resolveSucceeded: [paymentIntentId],
      notAcceptable: [],
      resolveFailed: { allowed: false, reason: expect.stringContaining('succeeded PaymentIntent') },
      reissue: { allowed: false, reason: expect.stringContaining('it was charged') },
    });

    const text = await cli(['review', 'show', id], env);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain('IN REVIEW');
    expect(text.stdout).toContain(`--as succeeded --payment-intent ${paymentIntentId}`);
    expect(text.stdout).toMatch(/Audit trail \(5 events\)/);
  });

  it('retrieves the external id (fresh status) and finds PaymentIntents of every key generation', async () => {
    const { id, paymentIntentId } = await intoReviewProcessing(h);
    // A PaymentIntent of another generation, made outside the engine, is still this operation's.
    const stripe = createStripeClient({ apiKey: 'sk_test_ops', apiBase: h.stripe.fake.url, maxNetworkRetries: 0 });
    const op = await operationRow(h, id);
    const other = await stripe.paymentIntents.create({
      amount: 1999,
      currency: 'eur',
      customer: 'cus_test',
      payment_method: 'pm_card_chargeDeclined',
      confirm: true,
      metadata: { operation_id: id, order_id: op.order_id, key_generation: '7' },
    }).catch((error: { payment_intent?: { id: string } }) => error.payment_intent!);
    const shown = resultOf((await cliJson(['review', 'show', id], env)).response, 'review show');
    const byId = new Map(shown.stripe!.paymentIntents.map((pi) => [pi.id, pi]));
    expect(byId.get(paymentIntentId)).toMatchObject({ status: 'processing', foundBy: ['retrieve', 'search'] });
    expect(byId.get(other.id)).toMatchObject({ status: 'requires_payment_method', metadata: expect.objectContaining({ key_generation: '7' }) });
    expect(shown.options?.reissue).toEqual({ allowed: false, reason: expect.stringContaining(`${paymentIntentId} processing`) });
  });

  it('without a Stripe key it still shows the database side, and says why Stripe is missing', async () => {
    const id = await intoReviewNothingCharged(h);
    const shown = resultOf((await cliJson(['review', 'show', id], { ...env, STRIPE_SECRET_KEY: '' })).response, 'review show');
    expect(shown.stripe).toBeNull();
    expect(shown.stripeSkipped).toMatch(/STRIPE_SECRET_KEY/);
    expect(shown.options).toBeNull();
  });

  it('an unknown operation is exit 1 with a clear message', async () => {
    const run = await cli(['review', 'show', randomUUID()], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/refused: payment operation .* does not exist/);
  });
});

describe('review resolve --as succeeded', () => {
  it('settles on a verified PaymentIntent: state, audit event and outbox event in one statement', async () => {
    const { id, paymentIntentId } = await intoReviewChargedUnseen(h);
    const { code, response } = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', paymentIntentId, ...because], env);
    expect(code).toBe(0);
    const result = resultOf(response, 'review resolve');
    expect(result.operation).toMatchObject({ status: 'succeeded', externalId: paymentIntentId, inReview: false, reviewReason: null });
    expect(result.outcomeEvent?.eventType).toBe('Charge Succeeded');
    expect(result.published).toBeNull(); // no bus here: the relay's sweep publishes it

    const row = await operationRow(h, id);
    expect(row).toMatchObject({ status: 'succeeded', external_id: paymentIntentId, review_reason: null, next_attempt_at: null, lease_token: null });
    expect(row.settled_at).toBeInstanceOf(Date);

    const audit = (await auditEvents(h, id)).at(-1)!;
    expect(audit).toMatchObject({ actor: 'operator:alice', action: 'operator_resolved', from_status: 'unknown', to_status: 'succeeded', external_id: paymentIntentId });
    expect(audit.detail).toMatchObject({
      reason: 'TICKET-1: checked the Stripe dashboard',
      resolution: 'succeeded',
      paymentIntent: paymentIntentId,
      transport: { kind: 'direct' },
      reviewed: { status: 'unknown', keyGeneration: 0, reviewReason: expect.stringContaining('key window expired') },
      evidence: { complete: true, paymentIntents: [expect.objectContaining({ id: paymentIntentId, status: 'succeeded' })] },
    });

    // The outbox row: the engine's payload shape (compared with the engine's own review event).
    const [needsReview, succeeded] = await outboxRows(h, id);
    expect(succeeded!.event_type).toBe('Charge Succeeded');
    expect(Object.keys(succeeded!.payload).sort()).toEqual(Object.keys(needsReview!.payload).sort());
    expect(succeeded!.payload).toMatchObject({
      version: 1,
      eventId: succeeded!.event_id,
      operationId: id,
      status: 'succeeded',
      amount: 1999,
      currency: 'eur',
      externalId: paymentIntentId,
      reason: null,
    });
    expect(succeeded!.published_at).toBeNull();
    // The operator's event comes after the engine's in the operation's sequence (consumers apply the highest).
    expect([needsReview!.payload.sequence, succeeded!.payload.sequence]).toEqual([1, 2]);

    // Final now: the engine never touches it again, and neither can an operator.
    expect((await engine(h).executeCharge(id)).disposition).toBe('skipped');
    const again = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/already succeeded \(final/);
  });

  it('is refused when the PaymentIntent does not exist', async () => {
    const { id } = await intoReviewChargedUnseen(h);
    const run = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', 'pi_doesNotExist123', ...because], env);
    expect(run.code).toBe(1);
    expect(run.response).toMatchObject({ ok: false, error: { code: 'refused', message: expect.stringMatching(/pi_doesNotExist123 does not exist/) } });
    expect((await operationRow(h, id)).status).toBe('unknown');
  });

  it('is refused when the PaymentIntent belongs to another operation', async () => {
    const { id } = await intoReviewChargedUnseen(h);
    const { paymentIntentId: foreign } = await intoReviewChargedUnseen(h);
    const run = await cli(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', foreign, ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(new RegExp(`${foreign} does not belong to operation ${id}`));
    expect(run.stderr).toContain('Nothing was changed.');
    expect((await operationRow(h, id)).status).toBe('unknown');
  });

  it('is refused when the PaymentIntent has another status, and accepted once it succeeded', async () => {
    const { id, paymentIntentId } = await intoReviewProcessing(h);
    const refused = await cli(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', paymentIntentId, ...because], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/is processing, not succeeded/);
    h.stripe.fake.settle(paymentIntentId, 'succeeded');
    const ok = await cli(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', paymentIntentId, ...because], env);
    expect(ok.code).toBe(0);
    expect(ok.stdout).toMatch(/Resolved .* as succeeded/);
  });

  it('is refused when amount or currency differ (a key misused with other parameters)', async () => {
    const { id, roguePaymentIntentId } = await intoReviewKeyMisused(h);
    const run = await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', roguePaymentIntentId, ...because], env);
    expect(run.code).toBe(1);
    if (run.response.ok) throw new Error('expected a refusal');
    expect(run.response.error.message).toMatch(/does not match the operation: amount 2099 ≠ 1999/);
    // The refusal carries the evidence, and is itself in the audit trail.
    expect(run.response.error.details).toMatchObject({ evidence: { paymentIntents: [expect.objectContaining({ id: roguePaymentIntentId })] } });
    const last = (await auditEvents(h, id)).at(-1)!;
    expect(last).toMatchObject({ action: 'operator_note', actor: 'operator:alice' });
    expect(last.detail).toMatchObject({ command: 'review resolve', refused: { code: 'refused' }, reason: because[1] });

    // Money moved under this operation's key, but not as ordered: no command settles it.
    const shown = resultOf((await cliJson(['review', 'show', id], env)).response, 'review show');
    expect(shown.options).toMatchObject({
      resolveSucceeded: [],
      notAcceptable: [{ id: roguePaymentIntentId, reason: expect.stringMatching(/amount 2099 ≠ 1999/) }],
      reissue: { allowed: false, reason: expect.stringMatching(/none of them matches the operation .* refund it in Stripe and escalate/) },
    });
    expect((await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env)).code).toBe(1);
  });
});

describe('review resolve --as failed', () => {
  it('settles when Stripe shows no charge at all, with a Charge Failed outbox event', async () => {
    const id = await intoReviewNothingCharged(h);
    const { code, response } = await cliJson(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(code).toBe(0);
    expect(resultOf(response, 'review resolve').operation).toMatchObject({ status: 'failed', inReview: false });
    const audit = (await auditEvents(h, id)).at(-1)!;
    expect(audit).toMatchObject({ action: 'operator_resolved', actor: 'operator:alice', to_status: 'failed' });
    expect(audit.detail).toMatchObject({ reason: because[1], evidence: { complete: true, paymentIntents: [] } });
    const failed = (await outboxRows(h, id)).at(-1)!;
    expect(failed).toMatchObject({ event_type: 'Charge Failed', payload: expect.objectContaining({ status: 'failed', reason: 'operator_resolved' }) });
  });

  it('is refused when a succeeded PaymentIntent exists', async () => {
    const { id, paymentIntentId } = await intoReviewChargedUnseen(h);
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(new RegExp(`succeeded PaymentIntent for this operation \\(${paymentIntentId}\\)`));
    expect(await operationRow(h, id)).toMatchObject({ status: 'unknown', settled_at: null });
    expect((await outboxRows(h, id)).map((r) => r.event_type)).toEqual(['Charge Needs Review']);
  });

  it('is refused while a PaymentIntent may still charge (processing)', async () => {
    const { id } = await intoReviewProcessing(h);
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/may still charge .* processing/);
  });

  it('is refused when Stripe cannot be asked (the evidence is incomplete)', async () => {
    const id = await intoReviewNothingCharged(h);
    h.stripe.fake.injectFault({ operationId: id, endpoint: 'search' }, 'rate_limited_429', 5);
    const run = await cliJson(['review', 'resolve', id, '--as', 'failed', ...because], env);
    expect(run.code).toBe(1);
    expect(run.response).toMatchObject({ ok: false, error: { code: 'refused', message: expect.stringMatching(/incomplete .*Search failed/) } });
    expect((await operationRow(h, id)).status).toBe('unknown');
  });

  it('waits until Search can be trusted to show the last possible send (default settle period)', async () => {
    const id = await intoReviewNothingCharged(h);
    const withDefault = { ...env, OPS_SEARCH_SETTLE_MS: '' };
    const run = await cli(['review', 'resolve', id, '--as', 'failed', ...because], withDefault);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/Search may not show it yet: try again after/);
  });
});

describe('review reissue', () => {
  it('authorises key generation + 1; the next execution sends the new key and the old key never again', async () => {
    const id = await intoReviewNothingCharged(h);
    const oldKey = idempotencyKey(id, 0);
    const newKey = idempotencyKey(id, 1);
    expect(createKeys(h, id)).toEqual([oldKey]);

    const { code, response } = await cliJson(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(code).toBe(0);
    const result = resultOf(response, 'review reissue');
    expect(result).toMatchObject({ previousKey: oldKey, newKey });
    expect(result.operation).toMatchObject({ status: 'pending', keyGeneration: 1, inReview: false, externalId: null, firstAttemptedAt: null });
    const audit = (await auditEvents(h, id)).at(-1)!;
    expect(audit).toMatchObject({ action: 'operator_reissued', actor: 'operator:alice', from_status: 'unknown', to_status: 'pending', key_generation: 1 });
    expect(audit.detail).toMatchObject({ reason: because[1], confirmedNoCharge: true, previousKey: oldKey, newKey, evidence: { complete: true } });

    // The reconciler's next sweep picks it up: due now, out of review.
    const executed = await engine(h).reconcileDue(100);
    expect(executed.find((x) => x.operationId === id)).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(createKeys(h, id)).toEqual([oldKey, newKey]);
    const pis = h.stripe.fake.paymentIntents({ operationId: id });
    expect(pis).toEqual([expect.objectContaining({ status: 'succeeded', idempotencyKey: newKey, metadata: expect.objectContaining({ key_generation: '1' }) })]);

    // Nothing ever sends the old key again.
    await engine(h).executeCharge(id);
    await engine(h).reconcileDue(100);
    expect(createKeys(h, id).filter((k) => k === oldKey)).toHaveLength(1);
    expect(h.stripe.fake.stats().doubleChargedOperations).not.toContain(id);
    // One sequence across generations: the review of generation 0, then the success of generation 1.
    expect((await outboxRows(h, id)).map((r) => [r.event_type, r.payload.sequence])).toEqual([
      ['Charge Needs Review', 1],
      ['Charge Succeeded', 2],
    ]);
  });

  it('is refused while a PaymentIntent of the operation is succeeded', async () => {
    const { id } = await intoReviewChargedUnseen(h);
    const run = await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/it was charged; use review resolve --as succeeded/);
    expect((await operationRow(h, id)).key_generation).toBe(0);
    expect((await auditEvents(h, id)).at(-1)).toMatchObject({ action: 'operator_note', detail: expect.objectContaining({ command: 'review reissue' }) });
  });

  it('is refused while a PaymentIntent is processing, and allowed once it failed', async () => {
    const { id, paymentIntentId } = await intoReviewProcessing(h);
    const refused = await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(new RegExp(`${paymentIntentId} processing`));
    h.stripe.fake.settle(paymentIntentId, 'canceled');
    const ok = await cliJson(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(ok.code).toBe(0);
    // The canceled PaymentIntent stays in the audit trail; the row starts over without it.
    expect(resultOf(ok.response, 'review reissue').operation.externalId).toBeNull();
    expect((await auditEvents(h, id)).at(-1)).toMatchObject({ action: 'operator_reissued', external_id: paymentIntentId });
  });

  it('is refused while a PaymentIntent requires action (3-D Secure could still charge)', async () => {
    // The engine's own creates are off-session, where Stripe fails a card that needs authentication
    // (402 authentication_required). An on-session PaymentIntent of the operation, made outside the
    // engine, waits for the customer's action instead — and could still charge.
    const id = await intoReviewNothingCharged(h);
    const op = await operationRow(h, id);
    const stripe = createStripeClient({ apiKey: 'sk_test_ops', apiBase: h.stripe.fake.url, maxNetworkRetries: 0 });
    const waiting = await stripe.paymentIntents.create({
      amount: 1999,
      currency: 'eur',
      customer: 'cus_test',
      payment_method: 'pm_card_authenticationRequired',
      confirm: true,
      metadata: { operation_id: id, order_id: op.order_id, key_generation: '0' },
    });
    expect(waiting.status).toBe('requires_action');
    const run = await cli(['review', 'reissue', id, '--confirm-no-charge', ...because], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/requires_action/);
  });

  it('is refused for an open operation that is not in review (the engine owns it) and for a final one', async () => {
    const e = engine(h);
    const open = await e.requestCharge(order());
    const openRun = await cli(['review', 'reissue', open, '--confirm-no-charge', ...because], env);
    expect(openRun.code).toBe(1);
    expect(openRun.stderr).toMatch(/not in review: the engine still owns it/);

    const done = await e.requestCharge(order());
    await e.executeCharge(done);
    const doneRun = await cli(['review', 'reissue', done, '--confirm-no-charge', ...because], env);
    expect(doneRun.code).toBe(1);
    expect(doneRun.stderr).toMatch(/already succeeded \(final/);
    expect((await operationRow(h, done)).key_generation).toBe(0);
  });

  it('two operators at once: the second write matches no row and fails cleanly (fenced on what it saw)', async () => {
    const id = await intoReviewNothingCharged(h);
    // Operator A's look-up is held at Stripe while operator B reissues.
    const hold = h.stripe.fake.hold({ operationId: id, endpoint: 'search' });
    const a = cliJson(['review', 'reissue', id, '--confirm-no-charge', '--reason', 'A', '--actor', 'anna'], env);
    await hold.arrived;
    const b = await cliJson(['review', 'reissue', id, '--confirm-no-charge', '--reason', 'B', '--actor', 'bob'], env);
    expect(b.code).toBe(0);
    hold.release();
    const late = await a;
    expect(late.code).toBe(1);
    expect(late.response).toMatchObject({ ok: false, error: { code: 'conflict', message: expect.stringMatching(/changed while the evidence was gathered/) } });
    const row = await operationRow(h, id);
    expect(row.key_generation).toBe(1); // not 2
    const actions = (await auditEvents(h, id)).filter((e) => e.action.startsWith('operator_')).map((e) => `${e.actor} ${e.action}`);
    expect(actions).toEqual(['operator:bob operator_reissued', 'operator:anna operator_note']);
  });
});

describe('review note', () => {
  it('appends an operator note (any operation) and changes nothing else', async () => {
    const id = await intoReviewNothingCharged(h);
    const before = await operationRow(h, id);
    const { code, response } = await cliJson(['review', 'note', id, '--reason', 'customer called; investigating', '--actor', 'carol'], env);
    expect(code).toBe(0);
    expect(resultOf(response, 'review note').auditEvent).toMatchObject({ action: 'operator_note', actor: 'operator:carol' });
    expect(await operationRow(h, id)).toEqual(before);
  });

  it('defaults the actor to the OS user', async () => {
    const id = await intoReviewNothingCharged(h);
    const run = await cliJson(['review', 'note', id, '--reason', 'looking'], { ...env });
    const expected = (await import('node:os')).userInfo().username;
    expect(resultOf(run.response, 'review note').auditEvent.actor).toBe(`operator:${expected}`);
  });
});

describe('operations show, rejected list, stats', () => {
  it('operations show finds an order, and an operation id too', async () => {
    const input = order();
    const e = engine(h);
    const id = await e.requestCharge(input);
    await e.executeCharge(id);
    const byOrder = resultOf((await cliJson(['operations', 'show', input.orderId], env)).response, 'operations show');
    expect(byOrder.operation).toMatchObject({ id, status: 'succeeded', orderId: input.orderId });
    expect(byOrder.auditTrail.map((a) => a.action)).toEqual(['requested', 'attempt_started', 'outcome_recorded']);
    expect(byOrder.outcomeEvents.map((o) => o.eventType)).toEqual(['Charge Succeeded']);
    expect(byOrder.stripe).toBeNull();
    const withStripe = resultOf((await cliJson(['operations', 'show', id, '--stripe'], env)).response, 'operations show');
    expect(withStripe.stripe?.paymentIntents.map((pi) => pi.status)).toEqual(['succeeded']);
    expect(withStripe.options).toBeNull(); // not in review: nothing to decide

    const missing = await cli(['operations', 'show', 'order-that-never-was'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toMatch(/no operation for order "order-that-never-was"/);
  });

  it('rejected list shows rejected messages, newest first, body only on request', async () => {
    const orderId = `order-${randomUUID()}`;
    await h.db.pool.query(
      `INSERT INTO rejected_messages (message_id, reason_code, reason, order_id, body_sha256, raw_body, received_at)
       VALUES ($1, 'invalid_body', 'amount: must be positive', $2, 'abc', '{"amount":-1}', now() - interval '2 days'),
              ($3, 'invalid_json', 'body is not valid JSON', NULL, 'def', 'not json', now())`,
      [`m-${randomUUID()}`, orderId, `m-${randomUUID()}`],
    );
    const all = resultOf((await cliJson(['rejected', 'list'], env)).response, 'rejected list');
    expect(all.messages[0]).toMatchObject({ reasonCode: 'invalid_json', bodyBytes: 8 });
    expect(all.messages[0]).not.toHaveProperty('rawBody');
    const recent = resultOf((await cliJson(['rejected', 'list', '--since', '24h'], env)).response, 'rejected list');
    expect(recent.messages.map((m) => m.reasonCode)).not.toContain('invalid_body');
    const forOrder = resultOf((await cliJson(['rejected', 'list', '--order', orderId, '--with-body'], env)).response, 'rejected list');
    expect(forOrder.messages).toEqual([expect.objectContaining({ orderId, rawBody: '{"amount":-1}' })]);
    const text = await cli(['rejected', 'list'], env);
    expect(text.stdout).toMatch(/RECEIVED\s+MESSAGE\s+CODE/);
    // More than one code, as docs/operations.md writes it: a comma-separated list.
    const both = resultOf((await cliJson(['rejected', 'list', '--reason-code', 'invalid_json,invalid_body'], env)).response, 'rejected list');
    expect(new Set(both.messages.map((m) => m.reasonCode))).toEqual(new Set(['invalid_json', 'invalid_body']));
    const one = resultOf((await cliJson(['rejected', 'list', '--reason-code', 'invalid_body', '--order', orderId], env)).response, 'rejected list');
    expect(one.messages.map((m) => m.reasonCode)).toEqual(['invalid_body']);
    const wrong = await cli(['rejected', 'list', '--reason-code', 'invalid_json,nope'], env);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/--reason-code must be one of .* \(got "nope"\)/);
  });

  it('stats counts by status, the oldest open operation, the review queue, rejected (24 h) and the outbox — as the gauges do', async () => {
    const before = resultOf((await cliJson(['stats'], env)).response, 'stats');
    const inReview = await intoReviewNothingCharged(h);
    const pending = await engine(h).requestCharge(order());
    await h.db.pool.query(`UPDATE payment_operations SET created_at = now() - interval '400 days' WHERE id = $1`, [pending]);
    await h.db.pool.query(`UPDATE payment_operations SET updated_at = now() - interval '500 days' WHERE id = $1`, [inReview]);
    const after = resultOf((await cliJson(['stats'], env)).response, 'stats');
    expect(after.operations.unknown).toBe(before.operations.unknown + 1);
    expect(after.operations.pending).toBe(before.operations.pending + 1);
    expect(after.open.pending).toBe(before.open.pending + 1);
    expect(after.open.unknown).toBe(before.open.unknown); // the new unknown one is in review
    expect(after.review.size).toBe(before.review.size + 1);
    expect(after.review.oldestOperationId).toBe(inReview);
    expect(after.open.oldestOperationId).toBe(pending);
    expect(after.open.oldestAgeSeconds).toBeGreaterThan(399 * 86_400);
    expect(after.outbox.unpublished).toBeGreaterThan(before.outbox.unpublished);

    // The same numbers the reconciler publishes as gauges (and the alarms watch).
    const gauges = await collectGauges(h.db.pool, 86_400);
    expect(gauges).toMatchObject({
      openPending: after.open.pending,
      openUnknown: after.open.unknown,
      reviewQueueSize: after.review.size,
      rejectedLastPeriod: after.rejected.last24h,
      unpublishedEvents: after.outbox.unpublished,
    });
    // The same row's age, read a moment later: no less than stats said (rounding aside), no more than
    // its age now by the database's clock — not "within 2 s", which a slow moment in between broke.
    const { rows: [age] } = await h.db.pool.query<{ now: number }>(`SELECT ceil(extract(epoch FROM now() - created_at))::int AS now FROM payment_operations WHERE id = $1`, [pending]);
    expect(gauges.oldestOpenAgeSeconds).toBeGreaterThanOrEqual(after.open.oldestAgeSeconds - 1);
    expect(gauges.oldestOpenAgeSeconds).toBeLessThanOrEqual(age!.now);

    const text = await cli(['stats'], env);
    expect(text.stdout).toMatch(/review queue\s+\d+/);
    expect(text.stdout).toMatch(/unpublished events\s+\d+/);
  });
});
