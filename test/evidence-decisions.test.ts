// The List evidence decisions, pure and exhaustive (no I/O): which step an ambiguous operation takes,
// what a list proves, when the machine may re-issue, how a Search that keeps failing ends, and how the
// audit trail is read back into evidence.
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  chargeListSubject,
  chooseStep,
  decideCreate,
  decideList,
  MAX_INCOMPLETE_LISTS,
  MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW,
  decideSearch,
  DEFAULT_POLICY,
  judgeAutoReissue,
  judgeList,
  listWindow,
  needsEvidence,
  type DecisionContext,
  type EnginePolicy,
  type EvidenceHistory,
  type ListedObject,
} from '../lambdas/payments/decisions.ts';
import { summarizeEvidence, type EvidenceEvent } from '../lambdas/payments/evidence.ts';
import { lastPossibleSendAt } from '../lambdas/payments/audit-trail.ts';
import { FailureKind, type GatewayFailure, type ListAnswer } from '../lambdas/payments/gateway.ts';
import type { ClaimedOperation, PaymentIntentView } from '../lambdas/payments/types.ts';
import { claimedOperation, OP_ID, T0 } from './support/operations.ts';

const MIN = 60_000;
const HOUR = 60 * MIN;
const at = (ms: number) => new Date(T0.getTime() + ms);

/** Unknown after one attempt, claimed at T0 with a two-minute lease. */
const op = (overrides: Partial<ClaimedOperation> = {}): ClaimedOperation => claimedOperation({ status: 'unknown', attempts: 1, leaseUntil: at(2 * MIN), ...overrides });

const history = (overrides: Partial<EvidenceHistory> = {}): EvidenceHistory => ({
  firstSendAt: T0,
  lastSendAt: at(5_000),
  sameKeySends: 3,
  proofs: [],
  autoReissues: 0,
  listUnavailable: false,
  permanentSearchFailures: 0,
  ...overrides,
});

const ctx = (o: Partial<ClaimedOperation>, h: EvidenceHistory | null, policy: EnginePolicy = DEFAULT_POLICY): DecisionContext => ({ op: op(o), policy, random: () => 0.5, history: h });

const pi = (overrides: Partial<PaymentIntentView> = {}): PaymentIntentView => ({
  id: 'pi_1',
  status: 'succeeded',
  amount: 1999,
  currency: 'eur',
  customer: 'cus_1',
  metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '0' },
  ...overrides,
});
const listed = (items: PaymentIntentView[], complete = true): ListAnswer<PaymentIntentView> => ({ items, pages: 1, requestIds: ['req_1'], complete });
const failure = (kind: GatewayFailure['kind'], httpStatus?: number): GatewayFailure => ({ kind, errorClass: 'StripeX', message: 'x', ...(httpStatus ? { httpStatus } : {}) });

/** One line of an operation's audit trail, `ms` after T0. */
const ev = (action: string, ms: number, step: string | null = null, detail: Record<string, unknown> = {}, keyGeneration = 0): EvidenceEvent => ({
  action,
  step,
  occurredAt: at(ms).toISOString(),
  keyGeneration,
  detail,
});

describe('choosing the step of an ambiguous operation (AMBIGUOUS_RESOLUTION=auto)', () => {
  it('needs the audit trail only for ambiguous operations without a PaymentIntent id, or after the window', () => {
    expect(needsEvidence(op({ status: 'pending' }))).toBe(false);
    expect(needsEvidence(op({ status: 'unknown' }))).toBe(true);
    expect(needsEvidence(op({ status: 'unknown', externalId: 'pi_1' }))).toBe(false);
    expect(needsEvidence(op({ status: 'pending', claimedAt: at(24 * HOUR) }))).toBe(true);
  });

  it('re-sends the same key sameKeyResends times (a lost answer is replayed), then lists once the last send settled', () => {
    expect(chooseStep(op(), DEFAULT_POLICY, history({ sameKeySends: 1 }))).toEqual({ kind: 'create' });
    expect(chooseStep(op(), DEFAULT_POLICY, history({ sameKeySends: 2 }))).toEqual({ kind: 'create' });
    expect(chooseStep(op({ claimedAt: at(30_000) }), DEFAULT_POLICY, history({ sameKeySends: 3 }))).toEqual({ kind: 'wait', untilMs: at(5_000 + 2 * MIN).getTime() });
    expect(chooseStep(op({ claimedAt: at(5_000 + 2 * MIN) }), DEFAULT_POLICY, history({ sameKeySends: 3 }))).toEqual({ kind: 'list' });
  });

  it('a key that replays Stripe’s 500 is not re-sent: List as soon as the send settled', () => {
    expect(chooseStep(op({ claimedAt: at(5_000 + 2 * MIN) }), DEFAULT_POLICY, history({ sameKeySends: 1, keyReplaysError: true }))).toEqual({ kind: 'list' });
    const answer = { ok: false as const, failure: { kind: FailureKind.ambiguous, errorClass: 'StripeAPIError', httpStatus: 500, message: 'x' } };
    expect(decideCreate(ctx({ status: 'pending' }, null), answer).retryAfterMs).toBe(DEFAULT_POLICY.listSettleMs);
    // A proxy's 502 is not stored with the key: the same key may still reach Stripe.
    const proxy = { ok: false as const, failure: { kind: FailureKind.ambiguous, errorClass: 'UnexpectedResponse', httpStatus: 502, message: 'x' } };
    expect(decideCreate(ctx({ status: 'pending' }, null), proxy).retryAfterMs).toBeLessThan(DEFAULT_POLICY.listSettleMs);
  });

  it('once absence was proven, never sends under that key again: List again', () => {
    expect(chooseStep(op({ claimedAt: at(20 * MIN) }), DEFAULT_POLICY, history({ sameKeySends: 0, proofs: [at(3 * MIN)] }))).toEqual({ kind: 'list' });
  });

  it('a pending operation inside the window is simply created; a PaymentIntent id is retrieved', () => {
    expect(chooseStep(op({ status: 'pending' }), DEFAULT_POLICY, null)).toEqual({ kind: 'create' });
    expect(chooseStep(op({ externalId: 'pi_9' }), DEFAULT_POLICY, history())).toEqual({ kind: 'retrieve', paymentIntentId: 'pi_9' });
  });

  it('after the window List is the evidence; when List cannot answer, Search; with the switch on review, today’s steps', () => {
    const late = op({ claimedAt: at(24 * HOUR) });
    expect(chooseStep(late, DEFAULT_POLICY, history())).toEqual({ kind: 'list' });
    expect(chooseStep(late, DEFAULT_POLICY, history({ listUnavailable: true }))).toEqual({ kind: 'search' });
    const review = { ...DEFAULT_POLICY, ambiguousResolution: 'review' as const };
    expect(chooseStep(late, review, history())).toEqual({ kind: 'search' });
    expect(chooseStep(op({ claimedAt: at(11 * MIN) }), review, history())).toEqual({ kind: 'early_search' });
    expect(chooseStep(op({ claimedAt: at(1 * MIN) }), review, history())).toEqual({ kind: 'create' });
  });

  it('property: in auto mode nothing is ever created after the window, whatever the evidence', () => {
    fc.assert(
      fc.property(fc.integer({ min: 23 * HOUR, max: 30 * 24 * HOUR }), fc.nat({ max: 10 }), fc.boolean(), (age, sends, unavailable) => {
        const step = chooseStep(op({ claimedAt: at(age) }), DEFAULT_POLICY, history({ sameKeySends: sends, listUnavailable: unavailable }));
        expect(step.kind === 'list' || step.kind === 'search').toBe(true);
      }),
    );
  });

  it('the last same-key send that ends ambiguous schedules the next claim at the settle delay (List is due then)', () => {
    const last = decideCreate(ctx({}, history({ sameKeySends: 2 })), { ok: false, failure: failure(FailureKind.ambiguous, 500) });
    expect(last.retryAfterMs).toBe(DEFAULT_POLICY.listSettleMs);
    const earlier = decideCreate(ctx({}, history({ sameKeySends: 0 })), { ok: false, failure: failure(FailureKind.ambiguous, 500) });
    expect(earlier.retryAfterMs).toBeLessThan(DEFAULT_POLICY.listSettleMs);
  });
});

describe('what a list proves (judgeList, kind-agnostic)', () => {
  const subject = chargeListSubject(op());
  const obj = (o: Partial<ListedObject> = {}): ListedObject => ({ id: 'pi_1', status: 'succeeded', metadata: { operation_id: OP_ID }, fields: { amount: 1999, currency: 'eur', customer: 'cus_1' }, ...o });
  const answer = (items: ListedObject[], complete = true) => ({ items, pages: 1, requestIds: [], complete });

  it('adopts exactly one object of the operation that matches on every expected field', () => {
    expect(judgeList(subject, answer([obj()]))).toEqual({ kind: 'adopt', object: obj() });
  });
  it('never adopts a mismatch (amount, currency, customer) or one that names only the order', () => {
    for (const field of ['amount', 'currency', 'customer'] as const) {
      const wrong = obj({ fields: { ...obj().fields, [field]: field === 'amount' ? 1 : 'other' } });
      expect(judgeList(subject, answer([wrong]))).toMatchObject({ kind: 'contradiction', reason: expect.stringContaining(field) });
    }
    expect(judgeList(subject, answer([obj({ metadata: { order_id: 'order-1' } })]))).toMatchObject({ kind: 'contradiction', reason: expect.stringContaining('metadata.operation_id') });
  });
  it('several related objects are a contradiction, even when the list is incomplete', () => {
    expect(judgeList(subject, answer([obj(), obj({ id: 'pi_2' })], false))).toMatchObject({ kind: 'contradiction', related: [expect.anything(), expect.anything()] });
  });
  it('unrelated objects are ignored; an empty complete list is absence, an incomplete one proves nothing', () => {
    const stranger = obj({ id: 'pi_x', metadata: { operation_id: 'someone-else', order_id: 'order-2' } });
    expect(judgeList(subject, answer([stranger]))).toEqual({ kind: 'absent' });
    expect(judgeList(subject, answer([stranger], false))).toEqual({ kind: 'incomplete', pages: 1 });
  });
});

describe('the List step’s outcome (decideList)', () => {
  const window = { createdGte: 0, createdLte: 1 };
  it('a failed list is never absence: 429 / 5xx / lost keep the status and retry', () => {
    for (const kind of [FailureKind.rateLimited, FailureKind.ambiguous, FailureKind.authentication]) {
      const outcome = decideList(ctx({}, history()), window, { ok: false, failure: failure(kind) });
      expect(outcome).toMatchObject({ status: 'unknown', reviewReason: null });
      expect(outcome.retryAfterMs).toBeGreaterThan(0);
      expect(outcome.detail.absenceProven).toBeUndefined();
      expect(outcome.reissue).toBeUndefined();
    }
  });
  it('a list that will not pass (400 / 403 / 404) marks List unavailable', () => {
    for (const kind of [FailureKind.invalidRequest, FailureKind.permission, FailureKind.notFound]) {
      expect(decideList(ctx({}, history()), window, { ok: false, failure: failure(kind) }).detail.listUnavailable).toBe(true);
    }
  });
  it('adopts the one match by its status (found ≠ paid)', () => {
    expect(decideList(ctx({}, history()), window, { ok: true, value: listed([pi()]) })).toMatchObject({ status: 'succeeded', externalId: 'pi_1' });
    expect(decideList(ctx({}, history()), window, { ok: true, value: listed([pi({ status: 'requires_payment_method' })]) })).toMatchObject({ status: 'failed', externalId: 'pi_1' });
    expect(decideList(ctx({}, history()), window, { ok: true, value: listed([pi({ status: 'processing' })]) })).toMatchObject({ status: 'unknown', externalId: 'pi_1', reviewReason: null });
  });
  it('the first proof of absence schedules the second; the second, late enough, re-issues', () => {
    const first = decideList(ctx({ claimedAt: at(3 * MIN) }, history()), window, { ok: true, value: listed([]) });
    expect(first).toMatchObject({ status: 'unknown', reviewReason: null, detail: { absenceProven: true, provenAt: at(3 * MIN).toISOString() } });
    // max(first proof + 10 min, last send + 15 min) − now
    expect(first.retryAfterMs).toBe(5_000 + 15 * MIN - 3 * MIN);
    const second = decideList(ctx({ claimedAt: at(5_000 + 15 * MIN) }, history({ proofs: [at(3 * MIN)] })), window, { ok: true, value: listed([]) });
    expect(second).toMatchObject({ status: 'pending', reissue: true, reviewReason: null, externalId: null });
  });
  it('a list cut by the page cap cannot show absence: review', () => {
    const outcome = decideList(ctx({}, history()), window, { ok: true, value: { items: [], pages: 20, requestIds: [], complete: false } });
    expect(outcome.reviewReason).toMatch(/more than 20 pages/);
  });
  it('a list stopped for request budget again and again goes to review instead of being claimed for ever (bench:peers livelock)', () => {
    // bench:peers, 2,000 orders of one customer: every claim's budget read 1–2 of the send window's
    // pages and stopped; each stop kept the operation open "quietly", attempts 20–40, never settled.
    const stopped = { ok: true as const, value: { items: [], pages: 2, requestIds: [], complete: false } };
    const first = decideList(ctx({}, history()), window, stopped);
    expect(first).toMatchObject({ status: 'unknown', reviewReason: null });
    expect(first.retryAfterMs).toBeGreaterThan(0);
    expect(decideList(ctx({}, history({ incompleteLists: MAX_INCOMPLETE_LISTS - 2 })), window, stopped).reviewReason).toBeNull();
    const last = decideList(ctx({}, history({ incompleteLists: MAX_INCOMPLETE_LISTS - 1 })), window, stopped);
    expect(last).toMatchObject({ status: 'unknown', retryAfterMs: null });
    expect(last.reviewReason).toMatch(new RegExp(`stopped before its end ${MAX_INCOMPLETE_LISTS} times`));
  });
});

describe('may the machine re-issue now? (judgeAutoReissue)', () => {
  const o = op();
  it('needs two proofs at least proofSpacingMs apart, the second at least reissueAfterLastSendMs after the last send', () => {
    const h = history({ lastSendAt: at(0) });
    expect(judgeAutoReissue(o, h, at(2 * MIN))).toEqual({ kind: 'prove_again', nextProofAt: at(15 * MIN).getTime() });
    expect(judgeAutoReissue(o, history({ lastSendAt: at(0), proofs: [at(2 * MIN)] }), at(11 * MIN))).toEqual({ kind: 'prove_again', nextProofAt: at(15 * MIN).getTime() });
    expect(judgeAutoReissue(o, history({ lastSendAt: at(0), proofs: [at(2 * MIN)] }), at(15 * MIN))).toEqual({ kind: 'reissue' });
    // Proofs made before the last send do not count.
    expect(judgeAutoReissue(o, history({ lastSendAt: at(10 * MIN), proofs: [at(2 * MIN)] }), at(25 * MIN))).toMatchObject({ kind: 'prove_again' });
    // A "proof" no later than the last send (clocks) is none: a finite next time, never a re-issue.
    expect(judgeAutoReissue(o, history({ lastSendAt: at(10 * MIN), proofs: [] }), at(10 * MIN))).toEqual({ kind: 'prove_again', nextProofAt: at(12 * MIN).getTime() });
  });
  it('never after the key window, never beyond MAX_AUTO_REISSUES, never with the switch on review', () => {
    const ready = history({ lastSendAt: at(0), proofs: [at(2 * MIN)] });
    expect(judgeAutoReissue(o, ready, at(23 * HOUR))).toMatchObject({ kind: 'review', reason: expect.stringContaining('key window') });
    expect(judgeAutoReissue(o, { ...ready, autoReissues: 2 }, at(20 * MIN))).toMatchObject({ kind: 'review', reason: expect.stringContaining('MAX_AUTO_REISSUES') });
    expect(judgeAutoReissue(o, ready, at(20 * MIN), { ...DEFAULT_POLICY, ambiguousResolution: 'review' })).toMatchObject({ kind: 'review' });
  });
  it('property: a re-issue always rests on two proofs spaced apart, after the last send, inside the window', () => {
    fc.assert(
      fc.property(fc.array(fc.nat({ max: 30 * HOUR }), { maxLength: 4 }), fc.nat({ max: 30 * HOUR }), fc.nat({ max: 30 * HOUR }), (proofs, lastSend, now) => {
        const h = history({ lastSendAt: at(lastSend), proofs: proofs.map(at) });
        const verdict = judgeAutoReissue(o, h, at(now));
        if (verdict.kind !== 'reissue') return;
        const after = proofs.filter((p) => p > lastSend);
        expect(now - lastSend).toBeGreaterThanOrEqual(DEFAULT_POLICY.reissueAfterLastSendMs);
        expect(now).toBeLessThan(DEFAULT_POLICY.keyWindowMs);
        expect(after.some((p) => now - p >= DEFAULT_POLICY.proofSpacingMs)).toBe(true);
      }),
    );
  });
});

describe('the list window', () => {
  it('spans the first send − margin to the last send + margin, in whole seconds rounded outwards', () => {
    const w = listWindow(op({ firstAttemptedAt: at(500) }), history({ firstSendAt: at(500), lastSendAt: at(90_500) }));
    expect(w.createdGte).toBe(Math.floor((T0.getTime() + 500 - 5 * MIN) / 1000));
    expect(w.createdLte).toBe(Math.ceil((T0.getTime() + 90_500 + 5 * MIN) / 1000));
  });
  it('starts at the earliest send of any key generation', () => {
    const w = listWindow(op({ firstAttemptedAt: at(HOUR), keyGeneration: 1 }), history({ firstSendAt: at(0), lastSendAt: at(HOUR) }));
    expect(w.createdGte).toBe(Math.floor((T0.getTime() - 5 * MIN) / 1000));
  });
});

describe('a Search that keeps failing after the window (the defect)', () => {
  const late = { claimedAt: at(24 * HOUR) };
  it('400 / 403 / 404 are counted and end in review with the reason after maxSearchFailures', () => {
    for (const kind of [FailureKind.invalidRequest, FailureKind.permission, FailureKind.notFound]) {
      const first = decideSearch(ctx(late, history({ permanentSearchFailures: 0 })), { ok: false, failure: failure(kind, 403) });
      expect(first).toMatchObject({ reviewReason: null, detail: { searchFailure: 'permanent', searchFailures: 1 } });
      const last = decideSearch(ctx(late, history({ permanentSearchFailures: 2 })), { ok: false, failure: failure(kind, 403) });
      expect(last.reviewReason).toMatch(/Search failed 3 times and will not pass by itself/);
      expect(last.retryAfterMs).toBeNull();
    }
  });
  it('a transient failure (429, 5xx) is retried and not counted', () => {
    const outcome = decideSearch(ctx(late, history({ permanentSearchFailures: 2 })), { ok: false, failure: failure(FailureKind.ambiguous, 500) });
    expect(outcome).toMatchObject({ reviewReason: null });
    expect(outcome.detail.searchFailure).toBeUndefined();
  });
});

describe('reading the evidence back from the audit trail (summarizeEvidence)', () => {
  const policy = { leaseMs: 2 * MIN, keyWindowMs: DEFAULT_POLICY.keyWindowMs };

  it('counts same-key sends, keeps proofs made after the last send, and leaves out this claim', () => {
    const events = [
      ev('requested', 0),
      ev('attempt_started', 0),
      ev('outcome_recorded', 1_000, 'create'),
      ev('attempt_started', 3_000),
      ev('outcome_recorded', 4_000, 'create'),
      ev('attempt_started', 3 * MIN),
      ev('outcome_recorded', 3 * MIN + 100, 'list', { absenceProven: true, provenAt: at(3 * MIN).toISOString() }),
      ev('attempt_started', 20 * MIN), // this claim: it has sent nothing yet
    ];
    const h = summarizeEvidence(op({ claimedAt: at(20 * MIN) }), events, policy);
    expect(h).toMatchObject({ sameKeySends: 2, lastSendAt: at(4_000), firstSendAt: at(0), proofs: [at(3 * MIN)], autoReissues: 0, keyReplaysError: false });
    const replayed = summarizeEvidence(op(), [ev('attempt_started', 0), { ...ev('outcome_recorded', 1_000, 'create', { httpStatus: 500 }), errorClass: 'StripeAPIError' }, ev('attempt_started', 5_000)], policy);
    expect(replayed.keyReplaysError).toBe(true);
  });

  it('counts the lists that stopped before their end under the current generation only', () => {
    const stopped = { list: { pages: 2, complete: false } };
    const events = [
      ev('attempt_started', 0),
      ev('outcome_recorded', 1_000, 'create'),
      ev('attempt_started', 3 * MIN),
      ev('outcome_recorded', 3 * MIN + 100, 'list', stopped),
      ev('attempt_started', 4 * MIN),
      ev('outcome_recorded', 4 * MIN + 100, 'list', stopped),
      ev('attempt_started', 5 * MIN),
      ev('outcome_recorded', 5 * MIN + 100, 'list', { list: { pages: 1, complete: true } }),
      ev('attempt_started', 6 * MIN),
      ev('outcome_recorded', 6 * MIN + 100, 'list', stopped, 1),
      ev('attempt_started', 7 * MIN),
    ];
    expect(summarizeEvidence(op({ claimedAt: at(7 * MIN) }), events, policy).incompleteLists).toBe(2);
  });

  it('a claim without an outcome may have been sending until its lease ran out; proofs before that do not count', () => {
    const events = [
      ev('attempt_started', 0),
      ev('outcome_recorded', 1_000, 'create'),
      ev('attempt_started', 2 * MIN), // a worker that died in flight
      ev('attempt_started', 3 * MIN),
      ev('outcome_recorded', 3 * MIN, 'list', { absenceProven: true, provenAt: at(3 * MIN).toISOString() }),
      ev('attempt_started', 10 * MIN),
    ];
    const h = summarizeEvidence(op({ claimedAt: at(10 * MIN) }), events, policy);
    expect(h.lastSendAt).toEqual(at(4 * MIN));
    expect(h.proofs).toEqual([]);
  });

  it('reads List unavailability, permanent Search failures and re-issues, per key generation', () => {
    const events = [
      ev('attempt_started', 0),
      ev('outcome_recorded', 1, 'list', { listUnavailable: true }),
      ev('auto_reissued', 2, null, {}, 1),
      ev('attempt_started', 3, null, {}, 1),
      ev('outcome_recorded', 4, 'search', { searchFailure: 'permanent' }, 1),
      ev('attempt_started', 5, null, {}, 1),
    ];
    const h = summarizeEvidence(op({ keyGeneration: 1 }), events, policy);
    expect(h).toMatchObject({ listUnavailable: false, permanentSearchFailures: 1, autoReissues: 1 });
  });
});

describe('a refund: a refused remedy goes to a human; a List refused for good is bounded', () => {
  const window = { createdGte: 0, createdLte: 1 };
  /** A refund operation; `extra`: the duplicate-charge remedy's refund of that PaymentIntent. */
  const refundOp = (extra: string | null, overrides: Partial<ClaimedOperation> = {}): Partial<ClaimedOperation> => ({
    kind: 'refund',
    refund: { refundId: extra ? `duplicate:${extra}` : 'rf-1', parentOperationId: 'charge-op', reason: extra ? 'duplicate' : null, paymentIntentId: extra },
    charge: { status: 'succeeded', paymentIntentId: 'pi_kept' },
    ...overrides,
  });
  const refused = (code: string | undefined, param?: string): GatewayFailure => ({
    kind: FailureKind.invalidRequest,
    errorClass: 'StripeInvalidRequestError',
    message: code === 'charge_disputed' ? 'Charge ch_extra has been charged back; cannot issue a refund.' : 'refused',
    httpStatus: 400,
    ...(code ? { code } : {}),
    ...(param ? { param } : {}),
  });

  it('a create refused before execution (charge_disputed): the remedy refund to review naming the refusal and the extra PaymentIntent; an ordinary refund final failed', () => {
    const remedy = decideCreate(ctx(refundOp('pi_extra', { status: 'pending' }), null), { ok: false, failure: refused('charge_disputed') });
    expect(remedy).toMatchObject({ status: 'unknown', retryAfterMs: null, errorCode: 'charge_disputed' });
    expect(remedy.reviewReason).toBe(
      "the duplicate-charge remedy's refund of pi_extra was refused by Stripe (charge_disputed: Charge ch_extra has been charged back; cannot issue a refund.): the extra charge stands — return the money another way, then resolve",
    );
    const ordinary = decideCreate(ctx(refundOp(null, { status: 'pending' }), null), { ok: false, failure: refused('charge_disputed') });
    expect(ordinary).toMatchObject({ status: 'failed', reviewReason: null, errorCode: 'charge_disputed' });
    // A refusal evidence must settle (maybe our own earlier refund) still goes to List first, remedy or not.
    for (const extra of ['pi_extra', null]) {
      expect(decideCreate(ctx(refundOp(extra, { status: 'pending' }), null), { ok: false, failure: refused(undefined, 'amount') })).toMatchObject({ status: 'unknown', reviewReason: null, detail: { settleByList: true, refusal: 'amount_too_large', refusalWithoutCode: true } });
    }
  });

  it('a refusal List shows is not ours (charge_already_refunded, amount_too_large): the remedy refund to review, an ordinary refund final failed with the code', () => {
    // (The code-less form of the over-refund refusal is recorded as amount_too_large: decideCreate.)
    for (const refusal of ['charge_already_refunded', 'amount_too_large']) {
      const h = history({ refusal });
      const remedy = decideList(ctx(refundOp('pi_extra'), h), window, { ok: true, value: listed([]) });
      expect(remedy).toMatchObject({ status: 'unknown', retryAfterMs: null, errorCode: refusal, detail: { absenceProven: true } });
      expect(remedy.reviewReason).toMatch(new RegExp(`^the duplicate-charge remedy's refund of pi_extra was refused by Stripe \\(${refusal}\\) and List shows no refund of this operation: the extra charge stands`));
      expect(decideList(ctx(refundOp(null), h), window, { ok: true, value: listed([]) })).toMatchObject({ status: 'failed', reviewReason: null, errorCode: refusal });
    }
  });

  it('a refund List that will not pass: counted, open below maxSearchFailures, then a human with what to fix; a charge keeps the Search path', () => {
    const forbidden: GatewayFailure = { kind: FailureKind.permission, errorClass: 'StripePermissionError', message: 'x', httpStatus: 403 };
    for (const extra of ['pi_extra', null]) {
      for (let before = 0; before < DEFAULT_POLICY.maxSearchFailures - 1; before++) {
        const open = decideList(ctx(refundOp(extra), history({ listUnavailable: before > 0, permanentListFailures: before })), window, { ok: false, failure: forbidden });
        expect(open).toMatchObject({ status: 'unknown', reviewReason: null, detail: { listUnavailable: true, listFailures: before + 1 } });
        expect(open.retryAfterMs).toBeGreaterThan(0);
      }
      const last = decideList(ctx(refundOp(extra), history({ listUnavailable: true, permanentListFailures: DEFAULT_POLICY.maxSearchFailures - 1 })), window, { ok: false, failure: forbidden });
      expect(last).toMatchObject({ status: 'unknown', retryAfterMs: null, detail: { listFailures: DEFAULT_POLICY.maxSearchFailures } });
      expect(last.reviewReason).toMatch(/^List of the PaymentIntent's refunds failed 3 times and will not pass by itself \(StripePermissionError 403\).*give the key read permission for Refunds \(a restricted key: Refunds Read\)/);
    }
    // A 404 (test key against a live object, …) is not a permission problem: the advice says so.
    const missing = decideList(ctx(refundOp(null), history({ listUnavailable: true, permanentListFailures: 2 })), window, { ok: false, failure: failure(FailureKind.notFound, 404) });
    expect(missing.reviewReason).toMatch(/check the key and the account \(test or live\)/);
    expect(missing.reviewReason).not.toMatch(/Refunds Read/);
    // A transient failure is not counted.
    expect(decideList(ctx(refundOp(null), history({ permanentListFailures: 2 })), window, { ok: false, failure: failure(FailureKind.ambiguous, 500) })).toMatchObject({ reviewReason: null });
    // A charge: List unavailable hands over to Search (which has its own bound), never a review here.
    expect(decideList(ctx({}, history({ permanentListFailures: 5 })), window, { ok: false, failure: forbidden })).toMatchObject({ reviewReason: null, detail: { listUnavailable: true } });
  });

  it('a refund whose List is unavailable lists again instead of re-sending the same key (nothing else can settle it); a charge takes the Search path', () => {
    const unavailable = history({ listUnavailable: true, permanentListFailures: 1 });
    expect(chooseStep(op(refundOp(null)), DEFAULT_POLICY, unavailable)).toEqual({ kind: 'list' });
    expect(chooseStep(op(refundOp('pi_extra', { claimedAt: at(30 * MIN) })), DEFAULT_POLICY, unavailable)).toEqual({ kind: 'list' });
    expect(chooseStep(op(refundOp(null, { claimedAt: at(25 * HOUR) })), DEFAULT_POLICY, unavailable)).toEqual({ kind: 'list' });
    expect(chooseStep(op({ claimedAt: at(30 * MIN) }), DEFAULT_POLICY, unavailable)).toEqual({ kind: 'early_search' });
    // List available: a refund inside the window re-sends its key as before.
    expect(chooseStep(op(refundOp(null)), DEFAULT_POLICY, history({ sameKeySends: 1 }))).toEqual({ kind: 'create' });
  });

  it('reads permanent List failures from the trail, per key generation', () => {
    const ev = (action: string, ms: number, step: string | null, detail: Record<string, unknown>, keyGeneration = 0): EvidenceEvent => ({ action, step, occurredAt: at(ms).toISOString(), keyGeneration, detail });
    const events = [
      ev('outcome_recorded', 1, 'list', { listUnavailable: true }),
      ev('outcome_recorded', 2, 'list', { listUnavailable: true }),
      ev('outcome_recorded', 3, 'list', {}),
      ev('outcome_recorded', 4, 'list', { listUnavailable: true }, 1),
    ];
    expect(summarizeEvidence(op(refundOp(null)), events, { leaseMs: 2 * MIN, keyWindowMs: DEFAULT_POLICY.keyWindowMs })).toMatchObject({ listUnavailable: true, permanentListFailures: 2 });
    expect(summarizeEvidence(op(refundOp(null, { keyGeneration: 1 })), events, { leaseMs: 2 * MIN, keyWindowMs: DEFAULT_POLICY.keyWindowMs })).toMatchObject({ permanentListFailures: 1 });
  });
});

// The automatic re-issue's blind spots: each case below failed on the code before its mend.
describe('what the re-issue rests on: the proof sees everything up to itself, a key still running proves nothing, a short list nothing', () => {
  const window = { createdGte: 0, createdLte: 1 };
  const inUse: GatewayFailure = {
    kind: FailureKind.ambiguous,
    errorClass: 'StripeAPIError',
    httpStatus: 409,
    code: 'idempotency_key_in_use',
    message: 'There is currently another in-progress request using this Idempotent Key',
  };

  it('the List window reaches the moment of the proof, not only the last send + margin', () => {
    // Last send at +5 s, the second proof at +15 min: a PaymentIntent Stripe committed at +10 min
    // exists when this List is asked and must lie inside its range.
    const proofAt = at(5_000 + 15 * MIN);
    const w = listWindow(op({ claimedAt: proofAt }), history({ firstSendAt: T0, lastSendAt: at(5_000) }));
    expect(w.createdLte).toBe(Math.ceil((proofAt.getTime() + DEFAULT_POLICY.listWindowMarginMs) / 1000));
    expect(w.createdLte * 1000).toBeGreaterThan(at(10 * MIN).getTime());
    // A claim earlier than the last possible send (a lease still running) keeps the send's end.
    const early = listWindow(op({ claimedAt: at(1_000) }), history({ firstSendAt: T0, lastSendAt: at(90_000) }));
    expect(early.createdLte).toBe(Math.ceil((T0.getTime() + 90_000 + DEFAULT_POLICY.listWindowMarginMs) / 1000));
  });

  it('409 idempotency_key_in_use: recorded as such, and the same key is sent again — never a List, whatever else the trail holds', () => {
    const answer = decideCreate(ctx({}, history({ sameKeySends: 5 })), { ok: false, failure: inUse });
    expect(answer).toMatchObject({ status: 'unknown', reviewReason: null, detail: { keyInUse: true, httpStatus: 409 } });
    // Not scheduled at the List settle delay: the key is asked again on the ambiguous backoff.
    expect(answer.retryAfterMs).toBeLessThan(DEFAULT_POLICY.listSettleMs);
    const running = history({ keyInUse: true, sameKeySends: 9, keyReplaysError: true, proofs: [at(3 * MIN)] });
    expect(chooseStep(op({ claimedAt: at(20 * MIN) }), DEFAULT_POLICY, running)).toEqual({ kind: 'create' });
    // A refund whose List is unavailable too; the review switch's Search path too.
    expect(chooseStep(op({ kind: 'refund', claimedAt: at(20 * MIN) }), DEFAULT_POLICY, { ...running, listUnavailable: true })).toEqual({ kind: 'create' });
    expect(chooseStep(op({ claimedAt: at(20 * MIN) }), { ...DEFAULT_POLICY, ambiguousResolution: 'review' }, running)).toEqual({ kind: 'create' });
    // After the key window nothing is sent under the old key: List is the evidence there.
    expect(chooseStep(op({ claimedAt: at(24 * HOUR) }), DEFAULT_POLICY, running)).toEqual({ kind: 'list' });
    // No absence is proven while the key's last answer is "in use".
    expect(judgeAutoReissue(op(), history({ keyInUse: true, lastSendAt: at(0), proofs: [at(2 * MIN)] }), at(20 * MIN))).toMatchObject({ kind: 'prove_again' });
  });

  it('the trail says "in use" only while it is the key’s LAST answer, under the current generation', () => {
    const policy = { leaseMs: 2 * MIN, keyWindowMs: DEFAULT_POLICY.keyWindowMs };
    const create = (ms: number, detail: Record<string, unknown>, generation = 0) => ({ ...ev('outcome_recorded', ms, 'create', detail, generation), errorClass: 'StripeAPIError' });
    const running = [ev('attempt_started', 0), create(1_000, { httpStatus: 409, keyInUse: true }), ev('attempt_started', 5_000)];
    expect(summarizeEvidence(op(), running, policy).keyInUse).toBe(true);
    const finished = [...running.slice(0, 2), ev('attempt_started', 2_000), create(3_000, { httpStatus: 500 }), ev('attempt_started', 5_000)];
    expect(summarizeEvidence(op(), finished, policy)).toMatchObject({ keyInUse: false, keyReplaysError: true });
    expect(summarizeEvidence(op({ keyGeneration: 1 }), running, policy).keyInUse).toBe(false);
  });

  it('a list cut short adopts nothing: one object of the operation on the pages read is no proof of "only one"', () => {
    const short = { items: [pi()], pages: 3, requestIds: [], complete: false };
    expect(judgeList(chargeListSubject(op()), { ...short, items: short.items.map((p) => ({ id: p.id, status: p.status, metadata: p.metadata, fields: { amount: p.amount, currency: p.currency, customer: p.customer } })) })).toEqual({ kind: 'incomplete', pages: 3 });
    const outcome = decideList(ctx({}, history()), window, { ok: true, value: short });
    expect(outcome).toMatchObject({ status: 'unknown', externalId: null, reviewReason: null });
  });

  it('a list cut short with every object it read charged settles nothing and refunds nothing: a human, not the remedy', () => {
    const both = [pi(), pi({ id: 'pi_2', metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '1' } })];
    const complete = decideList(ctx({ keyGeneration: 1 }, history()), window, { ok: true, value: listed(both) });
    expect(complete).toMatchObject({ status: 'succeeded', externalId: 'pi_2' });
    expect(complete.remedies).toHaveLength(1);
    const short = decideList(ctx({ keyGeneration: 1 }, history()), window, { ok: true, value: listed(both, false) });
    expect(short).toMatchObject({ status: 'unknown', externalId: null });
    expect(short.reviewReason).toMatch(/2 objects for one operation/);
    expect(short.remedies).toBeUndefined();
  });

  it('a refund is not re-issued by the machine unless REFUND_AUTO_REISSUE is on; a charge is', () => {
    const ready = history({ lastSendAt: at(0), proofs: [at(2 * MIN)] });
    const refund = op({ kind: 'refund' });
    expect(judgeAutoReissue(refund, ready, at(20 * MIN))).toMatchObject({ kind: 'review', reason: expect.stringContaining('REFUND_AUTO_REISSUE=off') });
    expect(judgeAutoReissue(refund, ready, at(20 * MIN), { ...DEFAULT_POLICY, refundAutoReissue: true })).toEqual({ kind: 'reissue' });
    expect(judgeAutoReissue(op(), ready, at(20 * MIN))).toEqual({ kind: 'reissue' });
    // Through decideList: the second proof of a refund goes to a human, with the proof in its evidence.
    const second = decideList(ctx({ kind: 'refund', claimedAt: at(5_000 + 15 * MIN) }, history({ proofs: [at(3 * MIN)] })), window, { ok: true, value: listed([]) });
    expect(second).toMatchObject({ status: 'unknown', retryAfterMs: null, detail: { absenceProven: true } });
    expect(second.reissue).toBeUndefined();
    expect(second.reviewReason).toMatch(/REFUND_AUTO_REISSUE=off/);
  });

  it('after the key window a List that keeps failing transiently is bounded: a human with the reason, not open for ever', () => {
    const late = { claimedAt: at(24 * HOUR) };
    const fail = { ok: false as const, failure: failure(FailureKind.ambiguous, 503) };
    const first = decideList(ctx(late, history({ transientListFailuresAfterWindow: 0 })), window, fail);
    expect(first).toMatchObject({ reviewReason: null, detail: { listFailuresAfterWindow: 1 } });
    const last = decideList(ctx(late, history({ transientListFailuresAfterWindow: MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW - 1 })), window, fail);
    expect(last.retryAfterMs).toBeNull();
    expect(last.reviewReason).toMatch(new RegExp(`failed ${MAX_TRANSIENT_LIST_FAILURES_AFTER_WINDOW} times since the key window`));
    // Inside the window the same failure is never counted towards review.
    const inside = decideList(ctx({}, history({ transientListFailuresAfterWindow: 99 })), window, fail);
    expect(inside.reviewReason).toBeNull();
    expect(inside.detail.listFailuresAfterWindow).toBeUndefined();
    // Read back from the trail: only transient List failures after the window, current generation.
    const policy = { leaseMs: 2 * MIN, keyWindowMs: DEFAULT_POLICY.keyWindowMs };
    const events = [
      ev('outcome_recorded', 1 * HOUR, 'list', { kind: 'ambiguous' }),
      ev('outcome_recorded', 23 * HOUR + 1, 'list', { kind: 'ambiguous' }),
      ev('outcome_recorded', 23 * HOUR + 2, 'list', { kind: 'rate_limited' }),
      ev('outcome_recorded', 23 * HOUR + 3, 'list', { kind: 'permission', listUnavailable: true }),
      ev('outcome_recorded', 23 * HOUR + 4, 'list', { absenceProven: true, provenAt: at(23 * HOUR + 4).toISOString() }),
      ev('outcome_recorded', 23 * HOUR + 5, 'list', { kind: 'ambiguous' }, 1),
    ];
    expect(summarizeEvidence(op(late), events, policy).transientListFailuresAfterWindow).toBe(2);
  });

  it('a claim without its outcome is read as sending until the lease end IT recorded, not the reader’s LEASE_MS', () => {
    const claim = ev('attempt_started', 0, null, { leaseUntil: at(10 * MIN).toISOString(), leaseToken: 'a' });
    expect(lastPossibleSendAt([claim], 2 * MIN)).toEqual(at(10 * MIN));
    // An older trail without leaseUntil: the reader's lease.
    expect(lastPossibleSendAt([ev('attempt_started', 0)], 2 * MIN)).toEqual(at(2 * MIN));
  });
});
