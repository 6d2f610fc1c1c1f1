// The automatic re-issue's blind spots, end to end on real PostgreSQL 18 and the real stripe SDK over
// HTTP against the fake Stripe — with Stripe events OFF (polling only): the watch after a re-issue
// finds a late commit under the retired key and hands it to the remedy (a charge) or to a person (a
// refund); a key still in use proves nothing; the List reaches the moment of its proof. The policy's
// durations are shortened and the driver waits until things are due by the database's clock: nothing
// here asserts on time, only on order and on what Stripe holds.
import { randomUUID } from 'node:crypto';
import { beforeEach, describe, expect, it } from 'vitest';
import { watchTimings, type EnginePolicy } from '../lambdas/payments/decisions.ts';
import type { EngineOptions } from '../lambdas/payments/engine.ts';
import { reissueInReview } from '../lambdas/payments/review.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import { MAX_WATCH_FAILURES } from '../lambdas/payments/watch.ts';
import { ReissueWatcher } from '../lambdas/payments/watcher.ts';
import { claimDueWatches, findWatch, recordWatchLooks, watchGauges } from '../lambdas/payments/watch-store.ts';
import { auditTrail, operationRow, type TestDatabase } from './support/db.ts';
import { driveOperation, FAST_LIST_POLICY, stepsOf, testEngine, untilTrue } from './support/engine.ts';
import { chargeOrderOfItsOwnCustomer as order, refundOf } from './support/orders.ts';
import { plantPaymentIntent, type StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('reissue-watch', (w) => ({ db, stripe } = w));

/** The List policy of the other evidence tests, and a watch that looks 300 ms after the re-issue and last 1.5 s after the retired first send. */
const WATCH_POLICY: Partial<EnginePolicy> = { ...FAST_LIST_POLICY, sameKeyResends: 0, watchFirstAfterMs: 300, watchFinalAfterFirstSendMs: 1_500 };
const engine = (policy: Partial<EnginePolicy> = {}, options: Partial<EngineOptions> = {}) =>
  testEngine({ db, stripe }, { policy: { ...WATCH_POLICY, ...policy }, ...options });
const watcher = (policy: Partial<EnginePolicy> = {}) => new ReissueWatcher({ db: db.pool, gateway: stripe.gateway, actor: 'test', random: () => 0.5, policy: { ...WATCH_POLICY, ...policy } });
const row = (id: string) => operationRow(db.pool, id);
const trail = (id: string) => auditTrail(db.pool, id);
// Each test judges the watches it made: the ones earlier tests left open are closed first.
beforeEach(() => db.pool.query('UPDATE payment_operation_watches SET next_check_at = NULL, closed_at = now(), lease_token = NULL, lease_until = NULL WHERE next_check_at IS NOT NULL'));
const untilWatchDue = (id: string) => untilTrue(db.pool, 'SELECT next_check_at <= now() AS ok FROM payment_operation_watches WHERE operation_id = $1', id, 'watch due');

/** A charge whose first create met a 500 before commit: two proofs, the automatic re-issue, generation 1 succeeded. */
async function reissuedCharge(input: ChargeInput = order()): Promise<{ input: ChargeInput; id: string }> {
  const id = await engine().requestCharge(input);
  stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
  expect(stepsOf(await driveOperation(db.pool, engine(), id))).toEqual(['create', 'list', 'list', 'create']);
  expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 1 });
  return { input, id };
}

/** What Stripe holds for the order: succeeded PaymentIntents, and the amount refunded of each. */
function moneyAtStripe(orderId: string) {
  const succeeded = stripe.fake.paymentIntents({ orderId }).filter((p) => p.status === 'succeeded');
  const refunded = (pi: string) => stripe.fake.refunds().filter((r) => r.payment_intent === pi && r.status === 'succeeded').reduce((n, r) => n + r.amount, 0);
  return { succeeded: succeeded.length, unrefunded: succeeded.filter((p) => refunded(p.id) < p.amount).length };
}

describe('the watch after a re-issue, with Stripe events off', () => {
  it('a late commit of generation 0 after the re-issue is found and refunded by the remedy; the watch then looks once more and closes', async () => {
    const { input, id } = await reissuedCharge();
    const started = await findWatch(db.pool, id);
    expect(started).toMatchObject({ reissues: 1, checks: 0, closedAt: null });
    // Stripe commits the first key's request only now (the late commit the proofs could not see).
    const late = await plantPaymentIntent(stripe, input, id, { keyGeneration: 0 });
    if (!late.ok) throw new Error('planted');
    expect(moneyAtStripe(input.orderId)).toEqual({ succeeded: 2, unrefunded: 2 });

    await untilWatchDue(id);
    const first = await watcher().lookDue(10);
    expect(first).toMatchObject({ claimed: 1, looked: 1, remediesCreated: 1, newFindings: 0, closed: 0 });
    // The remedy's refund is an ordinary refund operation, due at once: the reconciler's next page sends it.
    const { rows: remedies } = await db.pool.query("SELECT id FROM payment_operations WHERE parent_operation_id = $1 AND refund_payment_intent = $2", [id, late.value.id]);
    expect(remedies).toHaveLength(1);
    expect((await engine().reconcileDue(10)).map((x) => x.status)).toEqual(['succeeded']);
    expect(moneyAtStripe(input.orderId)).toEqual({ succeeded: 2, unrefunded: 1 });
    const requested = (await trail(remedies[0]!.id)).find((e) => e.action === 'requested');
    expect(requested.detail).toMatchObject({ remedy: 'duplicate_charge', refundedPaymentIntent: late.value.id, chargeOperationId: id, evidence: 'watch' });

    await untilWatchDue(id);
    expect(await watcher().lookDue(10)).toMatchObject({ looked: 1, remediesCreated: 0, closed: 1 });
    expect(await findWatch(db.pool, id)).toMatchObject({ checks: 2, nextCheckAt: null });
    const looks = (await trail(id)).filter((e) => e.action === 'watch_checked');
    expect(looks).toHaveLength(2);
    expect(looks[0].detail).toMatchObject({ look: 1, duplicatesRefunded: [late.value.id], list: { scope: { customer: input.customerId } } });
    expect(looks[0].detail.objects.map((o: { id: string }) => o.id).sort()).toEqual([late.value.id, (await row(id)).external_id].sort());
  });

  it('a late hold of a manual-capture charge after the re-issue is a finding at the first look (the customer held twice); the watch goes on until Stripe releases it', async () => {
    const { input, id } = await reissuedCharge({ ...order(), captureMethod: 'manual' });
    expect(stripe.fake.paymentIntents({ orderId: input.orderId }).map((p) => p.status)).toEqual(['requires_capture']);
    const late = await plantPaymentIntent(stripe, input, id, { keyGeneration: 0, captureMethod: 'manual' });
    if (!late.ok) throw new Error('planted');
    expect(late.value.status).toBe('requires_capture');
    const before = (await watchGauges(db.pool)).openWatchFindings;

    await untilWatchDue(id);
    expect(await watcher().lookDue(10)).toMatchObject({ looked: 1, remediesCreated: 0, newFindings: 1, closed: 0 });
    const { rows } = await db.pool.query('SELECT kind, source, payment_intent_id, status, amount FROM stripe_event_findings WHERE operation_id = $1', [id]);
    expect(rows).toEqual([{ kind: 'contradiction', source: 'watch', payment_intent_id: late.value.id, status: 'requires_capture', amount: String(input.amount) }]);
    expect((await watchGauges(db.pool)).openWatchFindings).toBe(before + 1);
    // Nothing was captured or released behind the operator's back.
    expect(stripe.fake.paymentIntents({ orderId: input.orderId }).map((p) => p.status)).toEqual(['requires_capture', 'requires_capture']);

    // Stripe releases the hold (here: canceled with our key, as a person would): the next look finds it settled,
    // makes no second finding, and the watch ends at its last look.
    const released = await stripe.gateway.cancelPaymentIntent({ idempotencyKey: `release-${late.value.id}`, paymentIntentId: late.value.id });
    expect(released.ok).toBe(true);
    for (let look = 0; look < 5 && (await findWatch(db.pool, id))?.nextCheckAt; look++) {
      await untilWatchDue(id);
      expect(await watcher().lookDue(10)).toMatchObject({ looked: 1, newFindings: 0 });
    }
    expect(await findWatch(db.pool, id)).toMatchObject({ nextCheckAt: null });
  });

  it('without the watch the same late commit stays charged twice: the re-issue starts it in its own statement', async () => {
    // The watch row is what makes the reconciler look again: none exists for a charge never re-issued,
    // and the re-issue writes it with the key generation (the guard this test stands on).
    const plain = await engine().requestCharge(order());
    await driveOperation(db.pool, engine(), plain);
    expect(await findWatch(db.pool, plain)).toBeNull();
    const { id } = await reissuedCharge();
    expect(await findWatch(db.pool, id)).not.toBeNull();
  });

  it('nothing late: two looks, no remedy, no finding, closed', async () => {
    const { id } = await reissuedCharge();
    for (let look = 1; look <= 2; look++) {
      await untilWatchDue(id);
      expect(await watcher().lookDue(10)).toMatchObject({ looked: 1, remediesCreated: 0, newFindings: 0, closed: look === 2 ? 1 : 0 });
    }
    expect(await findWatch(db.pool, id)).toMatchObject({ checks: 2, nextCheckAt: null });
  });

  it('an operator’s re-issue is watched exactly like the engine’s', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    // With AMBIGUOUS_RESOLUTION=review the machine never re-issues: a person does.
    await driveOperation(db.pool, engine({ ambiguousResolution: 'review', earlySearchAfterMs: 0, keyWindowMs: 1_000 }), id);
    const r = await row(id);
    expect(r.review_reason).not.toBeNull();
    const reissued = await reissueInReview(db.pool, {
      fence: { operationId: id, status: r.status, reviewReason: r.review_reason, keyGeneration: 0 },
      actor: 'operator:test',
      detail: {},
      watch: watchTimings(WATCH_POLICY),
    });
    expect(reissued?.operation.keyGeneration).toBe(1);
    expect(await findWatch(db.pool, id)).toMatchObject({ reissues: 1, checks: 0, closedAt: null });
  });

  it('an operation still open when its watch is due is left to the engine: looked at later, not counted', async () => {
    const input = order();
    const id = await engine().requestCharge(input);
    // Generation 1's create too meets a 500 before commit: open (unknown) after the re-issue.
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit', 2);
    const e = engine();
    for (let i = 0; i < 4; i++) {
      await untilTrue(db.pool, 'SELECT next_attempt_at <= now() AS ok FROM payment_operations WHERE id = $1', id, 'due');
      await e.executeCharge(id);
    }
    expect(await row(id)).toMatchObject({ status: 'unknown', key_generation: 1 });
    await untilWatchDue(id);
    expect(await watcher().lookDue(10)).toMatchObject({ claimed: 1, looked: 0, deferred: 1 });
    expect(await findWatch(db.pool, id)).toMatchObject({ checks: 0, closedAt: null });
    expect((await trail(id)).filter((x) => x.action === 'watch_checked')).toHaveLength(0);
  });

  it('a look whose List keeps failing is retried, then gives up with a finding a person resolves (never silent, never open for ever)', async () => {
    const { input, id } = await reissuedCharge();
    stripe.fake.injectFault({ endpoint: 'list', customerId: input.customerId }, 'rate_limited_429', MAX_WATCH_FAILURES);
    const before = (await watchGauges(db.pool)).openWatchFindings;
    for (let i = 1; i <= MAX_WATCH_FAILURES; i++) {
      await untilWatchDue(id);
      expect(await watcher().lookDue(10)).toMatchObject({ failed: 1, closed: i === MAX_WATCH_FAILURES ? 1 : 0 });
    }
    expect(await findWatch(db.pool, id)).toMatchObject({ failures: MAX_WATCH_FAILURES, nextCheckAt: null });
    const { rows } = await db.pool.query("SELECT kind, source, event_id, payment_intent_id, reason FROM stripe_event_findings WHERE operation_id = $1", [id]);
    expect(rows).toEqual([{ kind: 'watch_blind', source: 'watch', event_id: null, payment_intent_id: id, reason: expect.stringMatching(/could not list .* 5 times in a row/) }]);
    expect((await watchGauges(db.pool)).openWatchFindings).toBe(before + 1);
  });

  it('a look is fenced by the watch lease: a stale sweep’s late write is discarded', async () => {
    const { id } = await reissuedCharge();
    await untilWatchDue(id);
    const [stale] = await claimDueWatches(db.pool, 1, randomUUID(), 60_000);
    expect(stale?.op.id).toBe(id);
    // Its lease runs out; another sweep claims and looks.
    await db.pool.query('UPDATE payment_operation_watches SET lease_until = now() WHERE operation_id = $1', [id]);
    expect(await watcher().lookDue(10)).toMatchObject({ looked: 1 });
    const [written] = await recordWatchLooks(db.pool, [{ watched: stale!, look: { kind: 'looked', remedies: [], findings: [], unsettled: [], nextCheckAt: null, finalCheckAt: new Date(), detail: {} }, evidence: {} }], 'stale');
    expect(written).toMatchObject({ applied: false });
    expect(await findWatch(db.pool, id)).toMatchObject({ checks: 1, closedAt: null });
  });
});

describe('refunds are not re-issued by the machine unless asked, and a second Refund the watch finds is a finding', () => {
  async function chargedOrder() {
    const input = order();
    const id = await engine().requestCharge(input);
    expect((await engine().executeCharge(id)).status).toBe('succeeded');
    return input;
  }

  it('by default a refund whose absence List proved goes to a person, not to a re-issue', async () => {
    const input = await chargedOrder();
    const result = await engine().processRefund(refundOf(input.orderId), { execute: false });
    const id = result.operationId!;
    stripe.fake.injectFault({ operationId: id, endpoint: 'refund_create' }, 'error_500_before_commit');
    const steps = stepsOf(await driveOperation(db.pool, engine(), id));
    // The first proof already says so: the operator's `review reissue` lists again before it acts.
    expect(steps).toEqual(['create', 'list']);
    const r = await row(id);
    expect(r).toMatchObject({ status: 'unknown', key_generation: 0 });
    expect(r.review_reason).toMatch(/REFUND_AUTO_REISSUE=off/);
    expect(await findWatch(db.pool, id)).toBeNull();
  });

  it('REFUND_AUTO_REISSUE on: re-issued, watched, and a late first Refund is refunded_twice — a finding and the alarm gauge, nothing automatic', async () => {
    const input = await chargedOrder();
    const policy = { refundAutoReissue: true };
    const id = (await engine(policy).processRefund(refundOf(input.orderId), { execute: false })).operationId!;
    stripe.fake.injectFault({ operationId: id, endpoint: 'refund_create' }, 'error_500_before_commit');
    expect(stepsOf(await driveOperation(db.pool, engine(policy), id))).toEqual(['create', 'list', 'list', 'create']);
    const r = await row(id);
    expect(r).toMatchObject({ status: 'succeeded', key_generation: 1 });
    // Stripe commits the first key's Refund late.
    const chargePi = stripe.fake.paymentIntents({ orderId: input.orderId })[0]!.id;
    const late = await stripe.gateway.createRefund({
      idempotencyKey: `planted-${randomUUID()}`,
      paymentIntentId: chargePi,
      amount: Number(r.amount),
      reason: null,
      metadata: { operation_id: id, order_id: input.orderId, refund_id: r.refund_id, key_generation: '0' },
    });
    if (!late.ok) throw new Error('planted');
    const before = (await watchGauges(db.pool)).openWatchFindings;
    await untilWatchDue(id);
    expect(await watcher(policy).lookDue(10)).toMatchObject({ looked: 1, remediesCreated: 0, newFindings: 1 });
    const { rows } = await db.pool.query('SELECT kind, source, payment_intent_id, amount FROM stripe_event_findings WHERE operation_id = $1', [id]);
    expect(rows).toEqual([{ kind: 'refunded_twice', source: 'watch', payment_intent_id: late.value.id, amount: String(r.amount) }]);
    expect((await watchGauges(db.pool)).openWatchFindings).toBe(before + 1);
    // The same late Refund seen again is the same finding.
    await untilWatchDue(id);
    expect(await watcher(policy).lookDue(10)).toMatchObject({ looked: 1, newFindings: 0 });
  });
});

describe('what a re-issue rests on, end to end', () => {
  it('a PaymentIntent Stripe commits after last send + margin, before the second proof, is seen by that proof: adopted, never re-issued', async () => {
    // A margin of 1 s and a re-issue no sooner than 4.5 s after the last send; Stripe commits the
    // request at +3.6 s — outside [first send − 1 s, last send + 1 s] (the range before the mend), inside
    // [first send − 1 s, proof + 1 s].
    const policy = { listWindowMarginMs: 1_000, reissueAfterLastSendMs: 4_500 };
    const input = order();
    const id = await engine(policy).requestCharge(input);
    stripe.fake.injectFault({ operationId: id, endpoint: 'create' }, 'error_500_before_commit');
    const e = engine(policy);
    expect((await e.executeCharge(id)).status).toBe('unknown');
    await untilTrue(db.pool, 'SELECT next_attempt_at <= now() AS ok FROM payment_operations WHERE id = $1', id, 'due');
    expect(await e.executeCharge(id)).toMatchObject({ step: 'list', status: 'unknown' });
    await untilTrue(db.pool, "SELECT now() > (SELECT max(occurred_at) FROM payment_operation_events WHERE operation_id = $1 AND step = 'create') + interval '3600 milliseconds' AS ok", id, 'late moment');
    const late = await plantPaymentIntent(stripe, input, id, { keyGeneration: 0 });
    if (!late.ok) throw new Error('planted');
    const rest = await driveOperation(db.pool, e, id);
    expect(stepsOf(rest).filter((s) => s !== 'wait')).toEqual(['list']);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 0, external_id: late.value.id });
    expect(moneyAtStripe(input.orderId)).toEqual({ succeeded: 1, unrefunded: 1 });
  });

  it('409 idempotency_key_in_use: the same key is sent until Stripe answers with the stored result — no List, no re-issue, one charge', async () => {
    const input = order();
    // A lost answer is re-sent under the same key first (SAME_KEY_RESENDS, 2 by default): that re-send
    // is what meets the 409.
    const e = engine({ sameKeyResends: 2 });
    const id = await e.requestCharge(input);
    // The first create takes its key and is held at Stripe (still running); the client times out.
    const hold = stripe.fake.hold({ operationId: id, endpoint: 'create' });
    const first = e.executeCharge(id);
    await hold.arrived;
    const timedOut = await first;
    expect(timedOut.status).toBe('unknown');
    // Every re-send meets 409 in use while the first runs — long past the proofs' timings.
    const resends = [];
    for (let i = 0; i < 8; i++) {
      await untilTrue(db.pool, 'SELECT next_attempt_at <= now() AS ok FROM payment_operations WHERE id = $1', id, 'due');
      resends.push(await e.executeCharge(id));
    }
    expect(resends.map((x) => x.step)).toEqual(Array(8).fill('create'));
    expect(resends.every((x) => x.outcome?.detail.keyInUse === true)).toBe(true);
    expect(stripe.fake.requests().filter((r) => r.endpoint === 'list')).toHaveLength(0);
    hold.release();
    const rest = await driveOperation(db.pool, e, id);
    expect(stepsOf(rest)).toEqual(['create']);
    expect(await row(id)).toMatchObject({ status: 'succeeded', key_generation: 0 });
    expect(moneyAtStripe(input.orderId)).toEqual({ succeeded: 1, unrefunded: 1 });
  });
});

describe('nothing is sent under a key older than its window, even when the call starts late after its claim', () => {
  it('a create whose claim was inside the window but whose call would start after it is given back unsent; the next claim lists', async () => {
    // A monotonic clock the test advances: the rate limiter (beforeCall) "waits" 2 s past a 1.5 s window.
    let clock = 0;
    const late = engine({ keyWindowMs: 1_500, sameKeyResends: 0 }, { now: () => clock, beforeCall: () => ((clock += 2_000), true) });
    const input = order();
    const id = await late.requestCharge(input);
    const first = await late.executeCharge(id);
    expect(first).toMatchObject({ disposition: 'released', status: 'pending' });
    expect(stripe.fake.requests().filter((r) => r.operationId === id && r.endpoint === 'create')).toHaveLength(0);
    expect((await trail(id)).at(-1)).toMatchObject({ action: 'lease_released', detail: { reason: expect.stringMatching(/^not sent: the key window \(1\.5 s\) ended between the claim and the call$/) } });
    // Once the window has passed by the database's clock too, the engine lists instead of creating.
    await untilTrue(db.pool, "SELECT now() - first_attempted_at > interval '1600 milliseconds' AS ok FROM payment_operations WHERE id = $1", id, 'window passed');
    const next = await engine({ keyWindowMs: 1_500 }).executeCharge(id);
    expect(next.step).toBe('list');
    expect(stripe.fake.requests().filter((r) => r.operationId === id && r.endpoint === 'create')).toHaveLength(0);
  });
});
