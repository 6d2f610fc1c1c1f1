// List evidence and automatic re-issue (docs/model.md#evidence-list-before-search-and-the-machines-re-issue), on real PostgreSQL 18 and the real stripe SDK over
// HTTP against the fake Stripe's GET /v1/payment_intents. The policy's durations are shortened
// (settle 150 ms, proofs 200 ms apart, a re-issue at 400 ms after the last send) and the driver waits until
// the operation is due by the database's clock: nothing here asserts on time, only on order.
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { chargeOutcomeDetailSchema } from '../lambdas/events/contract.ts';
import { idempotencyKey, type EnginePolicy } from '../lambdas/payments/decisions.ts';
import { ChargeEngine, type EngineOptions } from '../lambdas/payments/engine.ts';
import type { Execution } from '../lambdas/payments/request-results.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { knownPaymentIntentIds, loadOperationHistory } from '../lambdas/payments/review.ts';
import { RequestRateLimiter } from '../lambdas/reconcile/rate-limiter.ts';
import { sdkAttemptsWhenConnectionCloses } from '../local/fake-stripe/faults.ts';
import { checkInvariants } from '../local/invariants.ts';
import { auditTrail, operationRow, type TestDatabase } from './support/db.ts';
import { FAST_LIST_POLICY, testEngine } from './support/engine.ts';
import { chargeOrderOfItsOwnCustomer as order } from './support/orders.ts';
import { plantPaymentIntent, type StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('evidence', (w) => ({ db, stripe } = w));

const engine = (policy: Partial<EnginePolicy> = {}, options: Partial<EngineOptions> = {}) =>
  testEngine({ db, stripe }, { policy: { ...FAST_LIST_POLICY, ...policy }, ...options });

const row = (id: string) => operationRow(db.pool, id);
const trail = (id: string) => auditTrail(db.pool, id);
async function outbox(id: string) {
  const { rows } = await db.pool.query('SELECT event_type, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at, event_id', [id]);
  return rows as { event_type: string; payload: Record<string, unknown> }[];
}

/** Wait (database clock) until the operation is due, or give up after ~10 s: never an assertion on time. */
async function untilDue(id: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await db.pool.query('SELECT next_attempt_at IS NULL OR next_attempt_at <= now() AS due FROM payment_operations WHERE id = $1', [id]);
    if (rows[0]?.due) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`operation ${id} never became due`);
}

/** Run the operation the way the reconciler would, claim after claim, until final or in review. */
async function drive(e: ChargeEngine, id: string, maxClaims = 30): Promise<Execution[]> {
  const executions: Execution[] = [];
  for (let i = 0; i < maxClaims; i++) {
    await untilDue(id);
    const execution = await e.executeCharge(id);
    executions.push(execution);
    const r = await row(id);
    if (r.status === 'succeeded' || r.status === 'failed' || r.review_reason !== null) return executions;
  }
  throw new Error(`operation ${id} still open after ${maxClaims} claims: ${executions.map((x) => x.step ?? x.disposition).join(' → ')}`);
}
/** Another order of the same customer (500 eur by card), the i-th: a PaymentIntent List must page past. */
const stranger = (input: ChargeInput, i: number): ChargeInput => ({ ...input, orderId: `other-${i}`, amount: 500, currency: 'eur', paymentMethod: 'pm_card_visa' });
const steps = (executions: readonly Execution[]) => executions.map((x) => (x.disposition === 'deferred' ? 'wait' : (x.step ?? x.disposition)));

async function invariantsHold(orderIds: string[]) {
  const report = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds, requireQuiescent: true });
  expect(report.violations).toEqual([]);
  return report;
}

describe('List evidence inside the key window', () => {
  it('500 before commit → absence proven twice → automatic re-issue → exactly one charge, minutes (here: moments) after the first send', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    const executions = await drive(engine(), id);
    // Stripe's 500 is replayed for the key's life, so no same-key re-send: List twice, then the re-issue's create.
    expect(steps(executions)).toEqual(['create', 'list', 'list', 'create']);
    const r = await row(id);
    expect(r).toMatchObject({ status: 'succeeded', key_generation: 1 });
    const pis = stripe.fake.paymentIntents({ orderId: input.orderId });
    expect(pis).toHaveLength(1);
    expect(pis[0]).toMatchObject({ status: 'succeeded', idempotencyKey: idempotencyKey(id, 1) });
    expect(r.external_id).toBe(pis[0]!.id);

    const events = await trail(id);
    const proofs = events.filter((e) => e.step === 'list' && e.detail.absenceProven === true);
    expect(proofs).toHaveLength(2);
    for (const proof of proofs) {
      expect(proof.detail.list).toMatchObject({ scope: { customer: input.customerId }, pages: 1, complete: true });
      expect(proof.detail.list.requestIds).toHaveLength(1);
      expect(proof.detail.list.requestIds[0]).toMatch(/^req_/);
      expect(proof.detail.list.createdLte).toBeGreaterThan(proof.detail.list.createdGte);
    }
    const reissued = events.filter((e) => e.action === 'auto_reissued');
    expect(reissued).toHaveLength(1);
    expect(reissued[0]).toMatchObject({ actor: 'test', from_status: 'unknown', to_status: 'pending', key_generation: 1 });
    expect(reissued[0]!.detail).toMatchObject({ fromGeneration: 0, toGeneration: 1, absenceProven: true });
    expect(reissued[0]!.detail.proofs).toHaveLength(2);
    // Announced: a 'Charge Reissued' event, then the final one.
    expect((await outbox(id)).map((e) => [e.event_type, e.payload.status, e.payload.reason])).toEqual([
      ['Charge Reissued', 'reissued', 'absence_proven'],
      ['Charge Succeeded', 'succeeded', null],
    ]);
    for (const event of await outbox(id)) expect(chargeOutcomeDetailSchema.safeParse(event.payload).success).toBe(true);
    await invariantsHold([input.orderId]);
  });

  it('500 after commit → List finds it → adopted, no re-issue', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    const executions = await drive(engine(), id);
    expect(steps(executions)).toEqual(['create', 'list']);
    const r = await row(id);
    const pis = stripe.fake.paymentIntents({ orderId: input.orderId });
    expect(pis).toHaveLength(1);
    expect(r).toMatchObject({ status: 'succeeded', key_generation: 0, external_id: pis[0]!.id });
    expect((await trail(id)).filter((e) => e.action === 'auto_reissued')).toHaveLength(0);
    await invariantsHold([input.orderId]);
  });

  it('a lost answer is re-sent with the same key first (its replay is the cheapest evidence); List only after SAME_KEY_RESENDS', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // The answer of the first send and of both re-sends is lost; the charge happened once.
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'truncated_response_after_commit', 3);
    const executions = await drive(engine(), id);
    expect(steps(executions)).toEqual(['create', 'create', 'create', 'list']);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 0 });
    expect(stripe.fake.paymentIntents({ orderId: input.orderId })).toHaveLength(1);
    await invariantsHold([input.orderId]);
  });

  it('List finds two PaymentIntents for the operation, one still processing → review with the evidence, nothing adopted', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // A second PaymentIntent carrying this operation's id (another key): the key layer cannot explain
    // it, and it has not settled (two that both charged are the duplicate remedy's: test/remedy.test.ts).
    const plantedKey = `planted-${randomUUID()}`;
    stripe.fake.injectFault({ idempotencyKey: plantedKey }, 'processing');
    const planted = await plantPaymentIntent(stripe, input, id, { idempotencyKey: plantedKey, keyGeneration: 7 });
    expect(planted.ok).toBe(true);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    const executions = await drive(engine(), id);
    expect(steps(executions).at(-1)).toBe('list');
    const r = await row(id);
    expect(r).toMatchObject({ status: 'unknown', external_id: null, key_generation: 0, next_attempt_at: null });
    expect(r.review_reason).toMatch(/List of the customer's PaymentIntents found 2 objects for one operation/);
    const last = (await trail(id)).at(-1);
    expect(last.detail.listHits).toHaveLength(2);
    // The operator's `review show` retrieves what List found (review.ts knownPaymentIntentIds).
    const history = (await loadOperationHistory(db.pool, { operationId: id }))!;
    expect(knownPaymentIntentIds(history.operation, history.events).sort()).toEqual(stripe.fake.paymentIntents({ orderId: input.orderId }).map((p) => p.id).sort());
  });

  it('a PaymentIntent of the order with another amount → review, not adopted', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    await plantPaymentIntent(stripe, input, id, { idempotencyKey: `other-${randomUUID()}`, amount: input.amount + 1 });
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await drive(engine(), id);
    const r = await row(id);
    expect(r.review_reason).toMatch(/does not match the operation \(amount\); not adopted/);
    expect(r.external_id).toBeNull();
  });

  it('List reads every page: the operation’s PaymentIntent behind 150 newer ones of the same customer is found and adopted', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    const e = engine({ sameKeyResends: 0 });
    expect((await e.executeCharge(id)).status).toBe('unknown');
    for (let i = 0; i < 150; i++) {
      const other = await plantPaymentIntent(stripe, stranger(input, i), randomUUID(), { idempotencyKey: `other-${i}-${randomUUID()}` });
      expect(other.ok).toBe(true);
    }
    // The reconciler's own limiter (sweep.ts passes limiter.acquire as beforeCall).
    const limiter = new RequestRateLimiter({ requestsPerSecond: 1_000, searchesPerSecond: 1_000 });
    const pagesAsked: string[] = [];
    const counted = engine({ sameKeyResends: 0 }, { beforeCall: (step) => (pagesAsked.push(step), limiter.acquire(step, Number.POSITIVE_INFINITY)) });
    const executions = await drive(counted, id);
    expect(steps(executions)).toEqual(['list']);
    expect((await row(id))).toMatchObject({ status: 'succeeded', key_generation: 0 });
    const lists = stripe.fake.requests().filter((r) => r.endpoint === 'list');
    expect(lists).toHaveLength(2);
    expect(lists[1]!.path).toBe('/v1/payment_intents');
    // Both pages were counted against the request budget (item 5: List calls are in the rate budget).
    expect(pagesAsked).toEqual(['list', 'list']);
    expect(limiter.granted).toBe(2);
    const recorded = (await trail(id)).filter((x) => x.step === 'list').at(-1);
    expect(recorded.detail.list).toMatchObject({ pages: 2, objects: 151, complete: true });
  });

  it('a list stopped by the request budget after its first page proves nothing and is asked again later', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    expect((await engine({ sameKeyResends: 0 }).executeCharge(id)).status).toBe('unknown');
    for (let i = 0; i < 101; i++) {
      await plantPaymentIntent(stripe, stranger(input, i), randomUUID(), { idempotencyKey: `other-${i}-${randomUUID()}` });
    }
    let calls = 0;
    const stingy = engine({ sameKeyResends: 0 }, { beforeCall: () => ++calls === 1 });
    await untilDue(id);
    const execution = await stingy.executeCharge(id);
    expect(execution).toMatchObject({ step: 'list', status: 'unknown' });
    const recorded = (await trail(id)).at(-1);
    expect(recorded.detail.list).toMatchObject({ pages: 1, complete: false });
    expect(recorded.detail.absenceProven).toBeUndefined();
    expect((await row(id)).review_reason).toBeNull();
  });

  it.each([
    ['rate_limited_429', 1],
    ['error_500_after_commit', 1],
    ['lost_response_after_commit', sdkAttemptsWhenConnectionCloses(0)],
  ] as const)('List itself faulted (%s) → retried, never taken as absence', async (fault, times) => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    const e = engine({ sameKeyResends: 0 });
    expect((await e.executeCharge(id)).status).toBe('unknown');
    stripe.fake.injectFault({ endpoint: 'list', customerId: input.customerId }, fault, times);
    await untilDue(id);
    const faulted = await e.executeCharge(id);
    expect(faulted).toMatchObject({ step: 'list', status: 'unknown', disposition: 'attempted' });
    expect(faulted.outcome?.retryAfterMs).toBeGreaterThan(0);
    const afterFault = await trail(id);
    expect(afterFault.filter((x) => x.detail.absenceProven === true)).toHaveLength(0);
    expect((await row(id)).review_reason).toBeNull();
    // Once List answers, the evidence path goes on to its end: two proofs, a re-issue, one charge.
    const rest = await drive(e, id);
    expect(steps(rest)).toEqual(['list', 'list', 'create']);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 1 });
    expect(stripe.fake.paymentIntents({ orderId: input.orderId }).filter((p) => p.status === 'succeeded')).toHaveLength(1);
    await invariantsHold([input.orderId]);
  });

  it('a List that will not pass (403) marks List unavailable: the operation takes the Search path, not a re-issue', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    const e = engine({ sameKeyResends: 0, earlySearchAfterMs: 0 });
    await e.executeCharge(id);
    stripe.fake.injectFault({ endpoint: 'list', customerId: input.customerId }, 'permission_403');
    await untilDue(id);
    expect((await e.executeCharge(id)).step).toBe('list');
    expect((await trail(id)).at(-1).detail.listUnavailable).toBe(true);
    await untilDue(id);
    const next = await e.executeCharge(id);
    expect(next).toMatchObject({ step: 'early_search', status: 'succeeded' });
    expect((await row(id)).key_generation).toBe(0);
  });

  it('after MAX_AUTO_REISSUES re-issues, a further proven absence goes to a human', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // Every generation's create meets a 500 before commit: nothing is ever charged.
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit', 10);
    const e = engine({ sameKeyResends: 0, maxAutoReissues: 1 });
    const executions = await drive(e, id);
    // Generation 1's first proof already finds the re-issues spent: no second proof is needed to say so.
    expect(steps(executions)).toEqual(['create', 'list', 'list', 'create', 'list']);
    const r = await row(id);
    expect(r).toMatchObject({ status: 'unknown', key_generation: 1 });
    expect(r.review_reason).toMatch(/List proves that no PaymentIntent exists.*already re-issued automatically 1 time\(s\)/);
    expect(stripe.fake.paymentIntents({ orderId: input.orderId })).toHaveLength(0);
    await invariantsHold([input.orderId]);
  });
});

describe('the invariant checker and automatic re-issues', () => {
  it('flags the double charge an automatic re-issue could cause: a generation-0 charge appearing after the re-issue', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await drive(engine(), id);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 1 });
    await invariantsHold([input.orderId]);
    // Plant what a wrong proof of absence would have missed: a charge under the old key generation
    // that existed BEFORE the re-issue (its record dated a moment before it).
    const planted = await plantPaymentIntent(stripe, input, id);
    if (!planted.ok) throw new Error('planted');
    const reissuedAt = Date.parse((await db.pool.query("SELECT occurred_at FROM payment_operation_events WHERE operation_id = $1 AND action = 'auto_reissued'", [id])).rows[0].occurred_at);
    const earlier = (pis: ReturnType<typeof stripe.fake.paymentIntents>) => pis.map((p) => (p.id === planted.value.id ? { ...p, createdAtMs: reissuedAt - 1_000 } : p));
    const report = await checkInvariants({ db: db.pool, paymentIntents: earlier(stripe.fake.paymentIntents()), orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violationsByKind).toEqual({ double_charge: 1, unsafe_reissue: 1 });
    expect(report.violations.find((v) => v.kind === 'unsafe_reissue')?.detail).toMatch(/re-issued to key generation 1 while PaymentIntent pi_\w+ of generation 0 is succeeded/);
    // The same charge committed by Stripe only after the re-issue (as planted: now) is a late commit —
    // no wrong proof — and still a double charge until the watch hands it to the remedy.
    const late = await checkInvariants({ db: db.pool, paymentIntents: stripe.fake.paymentIntents(), orderIds: [input.orderId], requireQuiescent: true });
    expect(late.violationsByKind).toEqual({ double_charge: 1 });
    expect(late.lateCommits).toBe(1);
  });

  it('flags an unsafe re-issue before any second charge: an older generation still processing', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    await drive(engine(), id);
    const planted = await plantPaymentIntent(stripe, input, id, { paymentMethod: 'pm_fake_processing' });
    if (!planted.ok) throw new Error('planted');
    // Dated before the re-issue: the proofs should have seen it.
    const reissuedAt = Date.parse((await db.pool.query("SELECT occurred_at FROM payment_operation_events WHERE operation_id = $1 AND action = 'auto_reissued'", [id])).rows[0].occurred_at);
    const pis = stripe.fake.paymentIntents().map((p) => (p.id === planted.value.id ? { ...p, createdAtMs: reissuedAt - 1_000 } : p));
    const report = await checkInvariants({ db: db.pool, paymentIntents: pis, orderIds: [input.orderId], requireQuiescent: true });
    expect(report.violationsByKind).toEqual({ unsafe_reissue: 1 });
  });
});

describe('after the key window', () => {
  it('a re-issue never happens under a key older than the window: List proves absence, a human decides', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    const e = engine({ sameKeyResends: 0 });
    await e.executeCharge(id);
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);
    const creates = stripe.fake.requests().filter((r) => r.endpoint === 'create').length;
    const executions = await drive(e, id);
    expect(steps(executions)).toEqual(['list']);
    const r = await row(id);
    expect(r).toMatchObject({ status: 'unknown', key_generation: 0 });
    expect(r.review_reason).toMatch(/List proves that no PaymentIntent exists.*key window \(23 h\) has passed/);
    expect(stripe.fake.requests().filter((x) => x.endpoint === 'create')).toHaveLength(creates);
    expect((await trail(id)).filter((x) => x.action === 'auto_reissued')).toHaveLength(0);
  });

  it('List is the primary evidence after the window: the charge a lost answer hid is adopted without Search', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'truncated_response_after_commit');
    const e = engine({ sameKeyResends: 0 });
    await e.executeCharge(id);
    stripe.fake.pruneKeys();
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);
    stripe.fake.setSearchLag(60_000); // Search could not see it anyway
    const executions = await drive(e, id);
    stripe.fake.setSearchLag(0);
    expect(steps(executions)).toEqual(['list']);
    expect(await row(id)).toMatchObject({ status: 'succeeded' });
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'search')).toHaveLength(0);
  });

  it.each(['review', 'auto'] as const)(
    'a Search that fails permanently after the window (403) ends in review with the reason after MAX_SEARCH_FAILURES attempts (AMBIGUOUS_RESOLUTION=%s)',
    async (mode) => {
      const input = order();
      const id = await engine().requestCharge(input);
      stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
      const e = engine({ ambiguousResolution: mode, sameKeyResends: 0, maxSearchFailures: 3 });
      await e.executeCharge(id);
      // auto: List is unavailable for this key too, so Search is the only evidence left.
      if (mode === 'auto') stripe.fake.injectFault({ endpoint: 'list', customerId: input.customerId }, 'permission_403', 10);
      stripe.fake.injectFault({ endpoint: 'search', operationId: id }, 'permission_403', 10);
      await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);
      const executions = await drive(e, id);
      expect(steps(executions)).toEqual(mode === 'auto' ? ['list', 'search', 'search', 'search'] : ['search', 'search', 'search']);
      const r = await row(id);
      expect(r.review_reason).toMatch(/Search failed 3 times and will not pass by itself \(StripePermissionError 403/);
      if (mode === 'auto') expect(r.review_reason).toMatch(/List is unavailable too/);
      expect(r.next_attempt_at).toBeNull();
    },
  );
});

describe('AMBIGUOUS_RESOLUTION=review keeps today’s path', () => {
  it('no List is ever asked: same-key creates, then an early Search, and a human after the window', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    const e = engine({ ambiguousResolution: 'review', earlySearchAfterMs: 300 });
    const executions: Execution[] = [];
    for (let i = 0; i < 100 && !steps(executions).includes('early_search'); i++) {
      await untilDue(id);
      executions.push(await e.executeCharge(id));
    }
    expect(steps(executions)).toContain('early_search');
    expect(steps(executions)).not.toContain('list');
    await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);
    const after = await drive(e, id);
    expect(steps(after)).toEqual(['search']);
    expect((await row(id)).review_reason).toMatch(/key window expired.*Search by metadata.operation_id found no PaymentIntent/);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'list')).toHaveLength(0);
    expect((await row(id)).key_generation).toBe(0);
  });
});

