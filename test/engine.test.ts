// The charge engine on real PostgreSQL 18 and the real stripe SDK over HTTP against the fake Stripe.
// First every row of the seed algorithm's test table (the cases any such design must pass: bench/peers/contestants/seed.ts), then what this design adds beyond it.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { countingDb } from '../lambdas/payments/db.ts';
import { backoffDelay, DEFAULT_POLICY, idempotencyKey, watchTimings } from '../lambdas/payments/decisions.ts';
import type { EngineOptions } from '../lambdas/payments/engine.ts';
import { OrderConflictError } from '../lambdas/payments/errors.ts';
import { claimById, recordOutcomes, reissueAfterProof } from '../lambdas/payments/operations-store.ts';
import { lastPossibleSendAt } from '../lambdas/payments/audit-trail.ts';
import { loadOperationHistory } from '../lambdas/payments/review.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { auditTrail, operationRow, type TestDatabase } from './support/db.ts';
import { testEngine } from './support/engine.ts';
import { plantPaymentIntent, type StripeHarness } from './support/stripe.ts';
import { chargeOrder } from './support/orders.ts';
import { useWorld } from './support/world.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('engine', (w) => ({ db, stripe } = w));

const engine = (options: Partial<EngineOptions> = {}) => testEngine({ db, stripe }, options);

const order = (overrides: Partial<ChargeInput> = {}): ChargeInput => chargeOrder(overrides);
/** AMBIGUOUS_RESOLUTION=review: the Search path these tests describe (List evidence: test/evidence.test.ts). */
const SEARCH_PATH: Partial<EngineOptions> = { policy: { ambiguousResolution: 'review' } };

const row = (id: string) => operationRow(db.pool, id);
const events = (id: string) => auditTrail(db.pool, id);
/** The reconciler's clock, fast-forwarded: the operation is due now. */
const makeDue = (id: string) => db.pool.query('UPDATE payment_operations SET next_attempt_at = now() WHERE id = $1', [id]);
/** Pretend the first send happened `interval` earlier (e.g. '24 hours' = the key window is over). */
const sentAgo = (id: string, interval: string) =>
  db.pool.query(
    `UPDATE payment_operations SET first_attempted_at = now() - $2::interval, next_attempt_at = now() WHERE id = $1`,
    [id, interval],
  );
/** How far in the future the last write put next_attempt_at, by the database's clock of that write (ms). */
const backoffWritten = async (id: string) =>
  (await db.pool.query<{ ms: number }>('SELECT round(extract(epoch FROM next_attempt_at - updated_at) * 1000)::int AS ms FROM payment_operations WHERE id = $1', [id])).rows[0]!.ms;
const createsFor = (id: string) => stripe.fake.requests().filter((r) => r.endpoint === 'create' && r.operationId === id);
const callsFor = (id: string) => stripe.fake.requests().filter((r) => r.operationId === id);
const succeededAtStripe = (id: string) => stripe.fake.paymentIntents({ operationId: id }).filter((p) => p.status === 'succeeded');

describe('the seed algorithm’s test table', () => {
  it('the same order requested twice → the same operation id', async () => {
    const input = order();
    const a = await engine().requestCharge(input);
    const b = await engine().requestCharge({ ...input });
    expect(b).toBe(a);
    const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM payment_operations WHERE order_id = $1', [input.orderId]);
    expect(rows[0].n).toBe(1);
  });

  it('response lost → first run unknown, second succeeded, one charge at Stripe', async () => {
    const id = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'truncated_response_after_commit');
    const first = await engine().executeCharge(id);
    expect(first).toMatchObject({ status: 'unknown', disposition: 'attempted' });
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1); // it did happen at Stripe
    await makeDue(id);
    const second = await engine().executeCharge(id);
    expect(second.status).toBe('succeeded');
    expect(createsFor(id).map((r) => r.idempotencyKey)).toEqual([idempotencyKey(id, 0), idempotencyKey(id, 0)]);
    expect(createsFor(id)[1]!.replayed).toBe(true);
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
    expect((await row(id)).external_id).toBe(stripe.fake.paymentIntents({ operationId: id })[0]!.id);
  });

  it('❌ a new key per retry (the anti-pattern) charges twice — what the durable key prevents', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id }, 'truncated_response_after_commit');
    const naive = (key: string) => plantPaymentIntent(stripe, input, id, { idempotencyKey: key });
    const first = await naive(`naive-${randomUUID()}`);
    expect(first.ok).toBe(false); // the caller saw a timeout…
    const retry = await naive(`naive-${randomUUID()}`); // …and "retried" with a fresh key
    expect(retry.ok).toBe(true);
    expect(succeededAtStripe(id)).toHaveLength(2); // the customer is charged twice

    // The same fault under the engine: one charge.
    const safe = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: safe }, 'truncated_response_after_commit');
    await engine().executeCharge(safe);
    await makeDue(safe);
    await engine().executeCharge(safe);
    expect(succeededAtStripe(safe)).toHaveLength(1);
  });

  it('key window expired and the key pruned → settled by search without any create, one charge', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'truncated_response_after_commit');
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown');
    expect(stripe.fake.pruneKeys()).toBeGreaterThan(0);
    await sentAgo(id, '24 hours');
    const before = createsFor(id).length;
    const result = await engine(SEARCH_PATH).executeCharge(id);
    expect(result).toMatchObject({ status: 'succeeded', step: 'search' });
    expect(createsFor(id).length).toBe(before); // no create after the window
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
  });

  it('decline → failed, and Stripe is never called again for it', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_card_chargeDeclined' }));
    const result = await engine().executeCharge(id);
    expect(result.status).toBe('failed');
    const r = await row(id);
    expect(r.last_error_class).toBe('StripeCardError');
    expect(r.external_id).toMatch(/^pi_/); // the declined PaymentIntent is kept as evidence
    const calls = callsFor(id).length;
    expect((await engine().executeCharge(id)).disposition).toBe('skipped');
    expect((await engine().reconcileDue(100)).map((e) => e.operationId)).not.toContain(id);
    expect(callsFor(id).length).toBe(calls);
  });

  it('processing → unknown, later settled by retrieve, with one create', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_fake_processing' }));
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    const pi = stripe.fake.paymentIntents({ operationId: id })[0]!;
    expect((await row(id)).external_id).toBe(pi.id);
    await makeDue(id);
    expect((await engine().executeCharge(id)).status).toBe('unknown'); // still processing: retrieve, no create
    stripe.fake.settle(pi.id, 'succeeded');
    await makeDue(id);
    const settled = await engine().executeCharge(id);
    expect(settled).toMatchObject({ status: 'succeeded', step: 'retrieve' });
    expect(createsFor(id)).toHaveLength(1);
  });

  it('search after the window finds requires_payment_method → failed, not success', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order({ paymentMethod: 'pm_card_chargeDeclined' }));
    // The decline happened at Stripe, but its answer never arrived: we only know "unknown".
    stripe.fake.injectFault({ operationId: id }, 'truncated_response_after_commit');
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown');
    stripe.fake.pruneKeys();
    await sentAgo(id, '24 hours');
    expect(await engine(SEARCH_PATH).executeCharge(id)).toMatchObject({ status: 'failed', step: 'search' });
    expect((await row(id)).external_id).toBe(stripe.fake.paymentIntents({ operationId: id })[0]!.id);
  });

  it('search after the window finds nothing → stays unknown, with a review reason', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'error_500_before_commit'); // nothing was executed
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown');
    stripe.fake.pruneKeys();
    await sentAgo(id, '24 hours');
    const result = await engine(SEARCH_PATH).executeCharge(id);
    expect(result.status).toBe('unknown');
    const r = await row(id);
    expect(r.review_reason).toMatch(/key window expired.*found no PaymentIntent/);
    expect(r.next_attempt_at).toBeNull();
    // In review, the reconciler leaves it alone: no more calls.
    const calls = stripe.fake.requests().length;
    expect(await engine(SEARCH_PATH).reconcileDue(100)).toEqual([]);
    expect(stripe.fake.requests().length).toBe(calls);
  });

  it('created three days ago but never sent → sent normally (the window starts at the first send)', async () => {
    const id = await engine().requestCharge(order());
    await db.pool.query(`UPDATE payment_operations SET created_at = now() - interval '3 days' WHERE id = $1`, [id]);
    const result = await engine().executeCharge(id);
    expect(result).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(createsFor(id)).toHaveLength(1);
  });

  it('while Stripe holds the request, the engine holds no transaction (seen from pg_stat_activity)', async () => {
    const pool = new pg.Pool({ connectionString: db.url, application_name: 'engine-under-test', max: 2 });
    try {
      const e = engine({ db: pool });
      const id = await e.requestCharge(order());
      const hold = stripe.fake.hold({ operationId: id, endpoint: 'create' });
      const running = e.executeCharge(id);
      await hold.arrived;
      const { rows } = await db.pool.query(
        `SELECT state, xact_start FROM pg_stat_activity WHERE application_name = 'engine-under-test' AND datname = current_database()`,
      );
      const { rows: locks } = await db.pool.query(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid)
          WHERE a.application_name = 'engine-under-test' AND l.locktype IN ('relation', 'tuple', 'transactionid')`,
      );
      hold.release();
      expect(rows.length).toBeGreaterThan(0); // the engine's pooled connection is there…
      for (const backend of rows) {
        expect(backend.state).toBe('idle'); // …idle, not "idle in transaction"
        expect(backend.xact_start).toBeNull();
      }
      expect(locks[0].n).toBe(0); // …and holds no lock
      expect((await running).status).toBe('succeeded');
    } finally {
      await pool.end();
    }
  });
});

describe('beyond the seed', () => {
  it('500 before commit: replayed for the key’s life, no PaymentIntent, never failed', async () => {
    const id = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'error_500_before_commit');
    for (let i = 0; i < 3; i++) {
      expect((await engine().executeCharge(id)).status).toBe('unknown');
      await makeDue(id);
    }
    expect(createsFor(id).slice(1).every((r) => r.replayed && r.status === 500)).toBe(true);
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(0);
    expect((await row(id)).status).toBe('unknown');
  });

  it('500 after commit: the replayed 500 hides a charge; early search inside the window adopts it', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'error_500_after_commit');
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown');
    await makeDue(id);
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown'); // the same key replays the 500
    await sentAgo(id, '11 minutes');
    const result = await engine(SEARCH_PATH).executeCharge(id);
    expect(result).toMatchObject({ status: 'succeeded', step: 'early_search' });
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
    expect(createsFor(id)).toHaveLength(2);
  });

  it('early search finding nothing goes on with a create under the same key', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'rate_limited_429');
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'truncated_response_after_commit');
    await engine(SEARCH_PATH).executeCharge(id); // 429: pending
    await makeDue(id);
    expect((await engine(SEARCH_PATH).executeCharge(id)).status).toBe('unknown');
    stripe.fake.setSearchLag(60_000); // Search cannot see it yet: "not found" proves nothing
    await sentAgo(id, '11 minutes');
    const result = await engine(SEARCH_PATH).executeCharge(id);
    stripe.fake.setSearchLag(0);
    expect(result).toMatchObject({ status: 'succeeded', step: 'early_search' });
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
  });

  it('a non-2xx answer without an error body (the SDK resolves it as success) is read as ambiguous, not as paid', async () => {
    const id = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'proxy_502_after_commit');
    const first = await engine().executeCharge(id);
    expect(first).toMatchObject({ status: 'unknown', disposition: 'attempted' });
    expect(first.outcome).toMatchObject({ errorClass: 'UnexpectedResponse', externalId: null });
    await makeDue(id);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
  });

  it('429 → stays pending with next_attempt_at in the future; not retried before it', async () => {
    const id = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'rate_limited_429');
    expect((await engine().executeCharge(id)).status).toBe('pending');
    const r = await row(id);
    expect(r.status).toBe('pending');
    expect(r.last_error_class).toBe('StripeRateLimitError');
    // Due after the rate-limit backoff (jitter fixed at 0.5), counted from the write itself.
    expect(await backoffWritten(id)).toBe(backoffDelay(1, DEFAULT_POLICY.backoff.rateLimited, () => 0.5));
    expect((await engine().executeCharge(id)).disposition).toBe('skipped');
    await makeDue(id);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(1);
  });

  it('401 → stays pending with the configuration backoff; nothing executed', async () => {
    const id = await engine().requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'unauthorized_401');
    expect((await engine().executeCharge(id)).status).toBe('pending');
    const r = await row(id);
    expect(r.last_error_class).toBe('StripeAuthenticationError');
    expect(await backoffWritten(id)).toBe(backoffDelay(1, DEFAULT_POLICY.backoff.configuration, () => 0.5));
    expect(stripe.fake.paymentIntents({ operationId: id })).toHaveLength(0);
  });

  it.each([
    ['rate_limited_429', 'StripeRateLimitError'],
    ['unauthorized_401', 'StripeAuthenticationError'],
    ['permission_403', 'StripePermissionError'],
  ] as const)("an SDK retry hides a first attempt that charged (answer lost, the retry gets %s) → unknown, never 'pending'", async (fault, errorClass) => {
    const id = await engine().requestCharge(order());
    // Attempt 1 executes and its connection closes before the answer; stripe-node retries a closed
    // connection once even with maxNetworkRetries 0 (fake-stripe/faults.ts); attempt 2 meets the fault.
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'lost_response_after_commit');
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, fault);
    const first = await engine().executeCharge(id);
    expect(createsFor(id)).toHaveLength(2); // two HTTP attempts in one SDK call
    expect(succeededAtStripe(id)).toHaveLength(1); // …and the first one charged
    expect(first.status).toBe('unknown');
    const r = await row(id);
    expect(r).toMatchObject({ status: 'unknown', last_error_class: errorClass });
    const outcome = (await events(id)).find((e) => e.action === 'outcome_recorded');
    expect(outcome.detail).toMatchObject({ httpAttempts: 2 });
    // The ambiguous path settles it under the same key: the replay of attempt 1's success.
    await makeDue(id);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'succeeded', step: 'create' });
    expect(succeededAtStripe(id)).toHaveLength(1);
  });

  it('idempotency_error → review with the key named, never swallowed', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // Somebody used this operation's key with other parameters (a bug in key use).
    await stripe.gateway.createPaymentIntent({
      idempotencyKey: idempotencyKey(id, 0),
      amount: input.amount + 1,
      currency: input.currency,
      customerId: input.customerId,
      paymentMethod: input.paymentMethod,
      metadata: {},
    });
    const result = await engine().executeCharge(id);
    expect(result.status).toBe('unknown');
    const r = await row(id);
    expect(r.last_error_class).toBe('StripeIdempotencyError');
    expect(r.review_reason).toContain(idempotencyKey(id, 0));
  });

  it('two executeCharge calls racing on one operation → one create at Stripe', async () => {
    stripe.fake.setLatency(150);
    try {
      const id = await engine().requestCharge(order());
      const results = await Promise.all([engine().executeCharge(id), engine().executeCharge(id), engine().executeCharge(id)]);
      expect(results.filter((r) => r.disposition === 'attempted')).toHaveLength(1);
      expect(results.filter((r) => r.disposition === 'skipped')).toHaveLength(2);
      expect(createsFor(id)).toHaveLength(1);
      expect((await row(id)).status).toBe('succeeded');
    } finally {
      stripe.fake.setLatency(0);
    }
  });

  it('a stale lease holder’s late write is discarded and says so in the audit trail', async () => {
    const id = await engine().requestCharge(order());
    const hold = stripe.fake.hold({ operationId: id, endpoint: 'create' });
    const zombie = engine({ actor: 'zombie' }).executeCharge(id);
    await hold.arrived;
    // The zombie's lease runs out while its call hangs; another worker takes over and settles it.
    await db.pool.query(`UPDATE payment_operations SET lease_until = now() - interval '1 second', next_attempt_at = now() WHERE id = $1`, [id]);
    const rescuer = await engine({ actor: 'rescuer' }).executeCharge(id);
    // The zombie's request is still in flight at Stripe under the same key: 409, ambiguous.
    expect(rescuer).toMatchObject({ status: 'unknown', disposition: 'attempted' });
    expect(rescuer.outcome?.errorCode).toBe('idempotency_key_in_use');
    hold.release();
    const late = await zombie;
    expect(late.disposition).toBe('discarded'); // its "succeeded" arrived after it lost the lease
    expect((await row(id)).status).toBe('unknown');
    await makeDue(id);
    expect(await engine({ actor: 'rescuer' }).executeCharge(id)).toMatchObject({ status: 'succeeded', step: 'create' });
    const trail = await events(id);
    expect(trail.filter((e) => e.action === 'outcome_recorded').map((e) => e.actor)).toEqual(['rescuer', 'rescuer']);
    expect(trail.find((e) => e.action === 'outcome_discarded')).toMatchObject({ actor: 'zombie', to_status: null });
    expect(succeededAtStripe(id)).toHaveLength(1);
  });

  it("the ops' last possible send is the zombie's own late outcome, not its lease end (claims paired by lease token)", async () => {
    const leaseMs = 300;
    const id = await engine().requestCharge(order());
    const hold = stripe.fake.hold({ operationId: id, endpoint: 'create' });
    const zombie = engine({ actor: 'zombie', policy: { leaseMs } }).executeCharge(id);
    await hold.arrived;
    // Its lease really runs out (no forged timestamps), then a rescuer claims and records.
    await new Promise((resolve) => setTimeout(resolve, leaseMs + 100));
    await makeDue(id);
    expect(await engine({ actor: 'rescuer', policy: { leaseMs } }).executeCharge(id)).toMatchObject({ disposition: 'attempted' });
    await new Promise((resolve) => setTimeout(resolve, 200));
    hold.release();
    expect((await zombie).disposition).toBe('discarded');
    const history = await loadOperationHistory(db.pool, { operationId: id });
    const discarded = history!.events.find((e) => e.action === 'outcome_discarded')!;
    const claims = history!.events.filter((e) => e.action === 'attempt_started');
    expect(claims.map((e) => typeof e.detail.leaseToken)).toEqual(['string', 'string']);
    expect(discarded.detail.leaseToken).toBe(claims[0]!.detail.leaseToken);
    // The zombie's request ran until its write was discarded: that is the last possible send.
    expect(lastPossibleSendAt(history!.events, leaseMs)?.toISOString()).toBe(discarded.occurredAt);
  });

  it('a final state is never overwritten, even by a write that carries the right lease token', async () => {
    const id = await engine().requestCharge(order());
    const claimed = await db.pool.query(
      `UPDATE payment_operations SET lease_token = gen_random_uuid(), lease_until = now() + interval '1 minute' WHERE id = $1 RETURNING lease_token`,
      [id],
    );
    const token = claimed.rows[0].lease_token as string;
    const write = {
      operationId: id, leaseToken: token, action: 'record' as const, step: 'create' as const, fromStatus: 'pending' as const,
      keyGeneration: 0, externalId: null, reviewReason: null, retryAfterMs: null, error: null, errorClass: null, errorCode: null, detail: {},
    };
    const [first] = await recordOutcomes(db.pool, [{ ...write, status: 'failed' }], 'test', 1000);
    expect(first!.applied).toBe(true);
    const [second] = await recordOutcomes(db.pool, [{ ...write, status: 'succeeded', externalId: 'pi_forged' }], 'test', 1000);
    expect(second!.applied).toBe(false);
    expect((await row(id)).status).toBe('failed');
    // And the database itself refuses, whoever writes.
    await expect(db.pool.query(`UPDATE payment_operations SET status = 'pending', settled_at = NULL WHERE id = $1`, [id])).rejects.toThrow(/final/);
  });

  it("a stale worker's automatic re-issue is fenced by its lease token: discarded while a live worker's same-key create is in flight", async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // Worker A claims (the engine's claim statement, its own token) and goes quiet: it will come back
    // with a re-issue decided from the List it made under that claim.
    const tokenA = randomUUID();
    const claimedA = await claimById(db.pool, id, tokenA, 120_000, 'worker-a');
    expect(claimedA?.claimed?.leaseToken).toBe(tokenA);
    // A's lease runs out; worker B claims and is mid-create under generation 0's key.
    await db.pool.query(`UPDATE payment_operations SET lease_until = now() - interval '1 second', next_attempt_at = now() WHERE id = $1`, [id]);
    const hold = stripe.fake.hold({ operationId: id, endpoint: 'create' });
    const workerB = engine({ actor: 'worker-b' }).executeCharge(id);
    await hold.arrived;
    const leasedByB = await row(id);
    expect(leasedByB.lease_token).not.toBe(tokenA);

    // A's re-issue write, as the engine writes it (its old token, the generation it saw, its proof):
    // status and generation still match, only the token does not.
    const proof = { absenceProven: true, provenAt: new Date().toISOString(), list: { scope: { customer: input.customerId }, pages: 1, complete: true } };
    const [late] = await reissueAfterProof(db.pool, [{ operationId: id, leaseToken: tokenA, fromStatus: 'pending', keyGeneration: 0, detail: proof }], 'worker-a', 60_000, watchTimings());
    expect(late).toEqual({ operationId: id, applied: false, status: null, event: null });
    expect(await row(id)).toMatchObject({ key_generation: 0, status: 'pending', lease_token: leasedByB.lease_token, attempts: 0 });

    hold.release();
    expect(await workerB).toMatchObject({ status: 'succeeded', disposition: 'attempted', step: 'create' });
    const r = await row(id);
    expect(r).toMatchObject({ status: 'succeeded', key_generation: 0, attempts: 1 });
    const trail = await events(id);
    expect(trail.map((e) => [e.action, e.actor, e.key_generation])).toEqual([
      ['requested', 'test', 0],
      ['attempt_started', 'worker-a', 0],
      ['attempt_started', 'worker-b', 0],
      ['outcome_discarded', 'worker-a', 0],
      ['outcome_recorded', 'worker-b', 0],
    ]);
    expect(trail[3]).toMatchObject({ step: 'list', to_status: null, lease_token: tokenA, detail: { discardedStatus: 'pending', absenceProven: true } });
    // No re-issue was announced; one charge, under generation 0's key, the one the row names.
    const { rows: outbox } = await db.pool.query('SELECT event_type FROM outcome_events WHERE operation_id = $1', [id]);
    expect(outbox.map((e) => e.event_type)).toEqual(['Charge Succeeded']);
    const pis = stripe.fake.paymentIntents({ orderId: input.orderId });
    expect(pis.map((pi) => [pi.id, pi.status, pi.idempotencyKey])).toEqual([[r.external_id, 'succeeded', idempotencyKey(id, 0)]]);
  });

  it('conflicting parameters for one order → typed error, one operation, nothing charged', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    for (const change of [{ amount: 2000 }, { currency: 'usd' }, { customerId: 'cus_other' }, { paymentMethod: 'pm_card_mastercard' }]) {
      const error = await engine().requestCharge({ ...input, ...change }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OrderConflictError);
      expect((error as OrderConflictError).existing.id).toBe(id);
      expect((error as OrderConflictError).fields).toEqual(Object.keys(change));
    }
    const [result] = await engine().processRequests([{ ...input, amount: 5 }]);
    expect(result!.conflict).toBeInstanceOf(OrderConflictError);
    expect(result!.execution).toBeNull();
    expect(stripe.fake.requests()).toHaveLength(0);
    expect((await row(id)).amount).toBe('1999');
  });

  it('a batch with three copies of one order and a conflicting copy → one operation, one call', async () => {
    const input = order();
    const results = await engine().processRequests([input, { ...input }, { ...input, amount: 1 }, { ...input }]);
    expect(new Set(results.map((r) => r.operationId)).size).toBe(1);
    expect(results.map((r) => r.conflict === null)).toEqual([true, true, false, true]);
    expect(createsFor(results[0]!.operationId)).toHaveLength(1);
    expect(results[0]!.execution?.status).toBe('succeeded');
  });

  it('an audit event for every attempt, and a claim event before every call', async () => {
    const id = await engine(SEARCH_PATH).requestCharge(order());
    stripe.fake.injectFault({ operationId: id }, 'rate_limited_429');
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_after_commit');
    // 429, then a 500 after commit replayed twice: all four leave the operation open.
    for (let i = 0; i < 4; i++) {
      expect((await engine(SEARCH_PATH).executeCharge(id)).status).not.toBe('succeeded');
      await makeDue(id);
    }
    await sentAgo(id, '11 minutes');
    expect((await engine(SEARCH_PATH).executeCharge(id)).step).toBe('early_search');
    const r = await row(id);
    expect(r.status).toBe('succeeded');
    const trail = await events(id);
    const recorded = trail.filter((e) => e.action === 'outcome_recorded');
    expect(recorded).toHaveLength(r.attempts);
    expect(trail.filter((e) => e.action === 'attempt_started')).toHaveLength(r.attempts);
    expect(callsFor(id).length).toBeGreaterThanOrEqual(r.attempts);
    expect(trail[0]).toMatchObject({ action: 'requested', to_status: 'pending' });
    expect(recorded.map((e) => e.error_class)).toEqual(['StripeRateLimitError', 'StripeAPIError', 'StripeAPIError', 'StripeAPIError', null]);
  });

  it('no time left: the claim is not taken, the key window does not start, the operation stays due', async () => {
    const input = order();
    const [result] = await engine().processRequests([input], { canStart: () => false });
    expect(result!.execution?.disposition).toBe('skipped');
    const r = await row(result!.operationId);
    expect(r).toMatchObject({ status: 'pending', first_attempted_at: null, lease_token: null });
    expect(stripe.fake.requests()).toHaveLength(0);
  });

  it('a claimed operation not started for lack of budget is released, due again, without an attempt', async () => {
    let budget = 1;
    const e = engine({ beforeCall: () => budget-- > 0 });
    const results = await e.processRequests([order(), order()]);
    expect(results.map((r) => r.execution?.disposition).sort()).toEqual(['attempted', 'released']);
    const released = results.find((r) => r.execution?.disposition === 'released')!;
    const r = await row(released.operationId);
    expect(r).toMatchObject({ status: 'pending', attempts: 0, lease_token: null });
    expect(r.next_attempt_at.getTime()).toBeLessThanOrEqual(Date.now() + 1000);
    expect((await events(released.operationId)).map((ev) => ev.action)).toEqual(['requested', 'attempt_started', 'lease_released']);
  });
});

describe('round trips (the budget of docs/model.md: two statements a charge)', () => {
  it('a fresh charge costs 2 round trips; a repeated delivery of a settled operation costs 1', async () => {
    const counted = countingDb(db.pool);
    const e = engine({ db: counted });
    const input = order();
    await e.processRequests([input]);
    expect(counted.roundTrips).toBe(2);
    counted.reset();
    const [again] = await e.processRequests([input]);
    expect(again!.execution?.status).toBe('succeeded');
    expect(counted.roundTrips).toBe(1);
    counted.reset();
    await e.processRequests(Array.from({ length: 10 }, () => order()));
    expect(counted.roundTrips).toBe(2); // a batch of 10 is still one statement before and one after
  });
});

describe('an order inserted by another transaction while the request statement runs', () => {
  it('the plain insert fails whole on the unique index, and the same statement with ON CONFLICT takes the order as existing: one operation, nothing lost', async () => {
    const input = order();
    const other = order();
    // Another writer holds an uncommitted insert of the same order: our statement's snapshot does
    // not see it, so its insert waits on the unique index and then fails (23505) once that commits.
    const blocker = await db.pool.connect();
    try {
      await blocker.query('BEGIN');
      const { rows: [theirs] } = await blocker.query<{ id: string }>(
        `INSERT INTO payment_operations (order_id, amount, currency, customer_id, payment_method) VALUES ($1, $2, $3, $4, $5) RETURNING id`,
        [input.orderId, input.amount, input.currency, input.customerId, input.paymentMethod],
      );
      const counted = countingDb(db.pool);
      const requesting = engine({ db: counted }).processRequests([input, other]);
      await waitForLockWait();
      await blocker.query('COMMIT');
      const [mine, second] = await requesting;
      expect(mine!.operationId).toBe(theirs!.id);
      expect(second!.execution).toMatchObject({ status: 'succeeded', disposition: 'attempted' });
      // The failed statement, the one with ON CONFLICT, and the outcome.
      expect(counted.roundTrips).toBe(3);
      const { rows } = await db.pool.query('SELECT count(*)::int AS n FROM payment_operations WHERE order_id = ANY($1)', [[input.orderId, other.orderId]]);
      expect(rows[0].n).toBe(2);
    } finally {
      blocker.release();
    }
  });
});

async function waitForLockWait(): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await db.pool.query(`SELECT 1 FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event IN ('transactionid', 'tuple') AND state = 'active'`);
    if (rows.length > 0) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('the request statement never waited on the other insert');
}
