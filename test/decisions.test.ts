// The pure decisions, exhaustively and without I/O: every row of the classification table (docs/model.md), every step of the claim / call / record cycle, and
// property checks over generated operations and answers for the invariants that must always hold.
import fc from 'fast-check';
import Stripe from 'stripe';
import { describe, expect, it } from 'vitest';
import {
  backoffDelay,
  chooseStep,
  decideCreate,
  decideEarlySearch,
  decideRetrieve,
  decideSearch,
  DEFAULT_POLICY,
  formatDuration,
  idempotencyKey,
  paymentIntentMetadata,
  statusOfPaymentIntent,
  withinKeyWindow,
  type DecisionContext,
  type Outcome,
} from '../lambdas/payments/decisions.ts';
import { FailureKind, type GatewayFailure, type GatewayResult } from '../lambdas/payments/gateway.ts';
import { classifyStripeError } from '../lambdas/payments/stripe-gateway.ts';
import type { ClaimedOperation, OperationStatus, PaymentIntentView } from '../lambdas/payments/types.ts';
import { claimedOperation, OP_ID, T0 } from './support/operations.ts';

const HOUR = 3_600_000;
const op = claimedOperation;

const ctx = (overrides: Partial<ClaimedOperation> = {}, random = () => 0.5): DecisionContext => ({
  op: op(overrides),
  policy: DEFAULT_POLICY,
  random,
});

function pi(status: string, overrides: Partial<PaymentIntentView> = {}): PaymentIntentView {
  return { id: 'pi_1', status, amount: 1999, currency: 'eur', metadata: { operation_id: OP_ID, order_id: 'order-1', key_generation: '0' }, ...overrides };
}
const ok = <T,>(value: T): GatewayResult<T> => ({ ok: true, value });
const fail = (kind: GatewayFailure['kind'], extra: Partial<GatewayFailure> = {}): GatewayResult<never> => ({
  ok: false,
  failure: { kind, errorClass: 'StripeSomething', message: 'boom', ...extra },
});

describe('idempotency key', () => {
  it('is derived from the operation id alone, deterministic, and short', () => {
    expect(idempotencyKey(OP_ID, 0)).toBe(`payment-op:${OP_ID}`);
    expect(idempotencyKey(OP_ID, 0)).toBe(idempotencyKey(OP_ID, 0));
    expect(idempotencyKey(OP_ID, 2)).toBe(`payment-op:${OP_ID}:g2`);
    expect(idempotencyKey(OP_ID, 2)).not.toBe(idempotencyKey(OP_ID, 1));
    expect(idempotencyKey(OP_ID, 999).length).toBeLessThanOrEqual(255);
  });
  it('carries no order or customer data; the metadata carries what Search needs', () => {
    const key = idempotencyKey(OP_ID, 0);
    expect(key).not.toContain('order-1');
    expect(paymentIntentMetadata(op({ keyGeneration: 3 }))).toEqual({ operation_id: OP_ID, order_id: 'order-1', key_generation: '3' });
  });
});

describe('key window', () => {
  it('starts at the first send: never sent means inside the window', () => {
    expect(withinKeyWindow(null, new Date(T0.getTime() + 72 * HOUR))).toBe(true);
  });
  it('is 23 h, open below and closed at the boundary', () => {
    expect(withinKeyWindow(T0, new Date(T0.getTime() + 23 * HOUR - 1))).toBe(true);
    expect(withinKeyWindow(T0, new Date(T0.getTime() + 23 * HOUR))).toBe(false);
    expect(withinKeyWindow(T0, new Date(T0.getTime() + 25 * HOUR))).toBe(false);
  });
});

describe('choosing the next step', () => {
  const at = (hours: number) => new Date(T0.getTime() + hours * HOUR);
  it('retrieves when Stripe already made the PaymentIntent, inside or outside the window', () => {
    expect(chooseStep(op({ status: 'unknown', externalId: 'pi_9' }))).toEqual({ kind: 'retrieve', paymentIntentId: 'pi_9' });
    expect(chooseStep(op({ status: 'unknown', externalId: 'pi_9', claimedAt: at(30) })).kind).toBe('retrieve');
  });
  it('never creates after the window: search decides', () => {
    expect(chooseStep(op({ status: 'unknown', claimedAt: at(23) })).kind).toBe('search');
    // "pending" after the window may still be "sent, then crashed before the outcome was written".
    expect(chooseStep(op({ status: 'pending', claimedAt: at(24) })).kind).toBe('search');
  });
  it('creates (again, same key) inside the window', () => {
    expect(chooseStep(op({ status: 'pending' })).kind).toBe('create');
    expect(chooseStep(op({ status: 'unknown', claimedAt: new Date(T0.getTime() + 60_000) })).kind).toBe('create');
    expect(chooseStep(op({ status: 'pending', claimedAt: at(22) })).kind).toBe('create');
  });
  it('searches early for an operation that stayed ambiguous long enough for Search to see it', () => {
    const late = new Date(T0.getTime() + DEFAULT_POLICY.earlySearchAfterMs);
    expect(chooseStep(op({ status: 'unknown', claimedAt: late })).kind).toBe('early_search');
    expect(chooseStep(op({ status: 'unknown', claimedAt: new Date(late.getTime() - 1) })).kind).toBe('create');
  });
});

describe('PaymentIntent status → operation status', () => {
  it.each([
    ['succeeded', 'succeeded'],
    ['canceled', 'failed'],
    ['requires_payment_method', 'failed'],
    ['processing', 'unknown'],
    ['requires_action', 'unknown'],
    ['requires_capture', 'unknown'],
    ['requires_confirmation', 'unknown'],
    ['some_future_status', 'unknown'],
  ])('%s → %s', (piStatus, expected) => {
    expect(statusOfPaymentIntent(piStatus)).toBe(expected);
  });
});

describe('backoff', () => {
  const b = { baseMs: 1000, capMs: 60_000 };
  it('doubles per attempt, with jitter between half and the whole step, capped', () => {
    expect(backoffDelay(1, b, () => 0)).toBe(500);
    expect(backoffDelay(1, b, () => 1)).toBe(1000);
    expect(backoffDelay(3, b, () => 0)).toBe(2000);
    expect(backoffDelay(3, b, () => 1)).toBe(4000);
    expect(backoffDelay(50, b, () => 1)).toBe(60_000);
    expect(backoffDelay(0, b, () => 1)).toBe(1000);
  });
  it('stays within [step/2, step] for any attempt and any random value', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100 }), fc.double({ min: 0, max: 1, noNaN: true }), (attempt, r) => {
        const step = Math.min(b.capMs, b.baseMs * 2 ** Math.min(attempt - 1, 30));
        const d = backoffDelay(attempt, b, () => r);
        return d >= Math.floor(step / 2) && d <= step;
      }),
    );
  });
});

describe('the classification table (docs/model.md): reading the answer to a create', () => {
  it('200 succeeded → succeeded with the PaymentIntent id', () => {
    const o = decideCreate(ctx(), ok(pi('succeeded')));
    expect(o).toMatchObject({ status: 'succeeded', externalId: 'pi_1', reviewReason: null, retryAfterMs: null });
  });
  it.each(['canceled', 'requires_payment_method'])('200 %s → failed', (status) => {
    expect(decideCreate(ctx(), ok(pi(status)))).toMatchObject({ status: 'failed', externalId: 'pi_1', retryAfterMs: null });
  });
  it.each(['processing', 'requires_action', 'requires_capture'])('200 %s → unknown with the id, settled later by retrieve', (status) => {
    const o = decideCreate(ctx(), ok(pi(status)));
    expect(o).toMatchObject({ status: 'unknown', externalId: 'pi_1', reviewReason: null });
    expect(o.retryAfterMs).toBeGreaterThan(0);
  });
  it('402 card error → failed, never retried, keeping the declined PaymentIntent as evidence', () => {
    const o = decideCreate(ctx(), fail(FailureKind.declined, { code: 'insufficient_funds', httpStatus: 402, paymentIntent: pi('requires_payment_method') }));
    expect(o).toMatchObject({ status: 'failed', externalId: 'pi_1', retryAfterMs: null, errorCode: 'insufficient_funds' });
  });
  it('400 invalid request → failed with the code', () => {
    expect(decideCreate(ctx(), fail(FailureKind.invalidRequest, { code: 'resource_missing', httpStatus: 400 }))).toMatchObject({
      status: 'failed',
      errorCode: 'resource_missing',
      externalId: null,
    });
  });
  it.each<OperationStatus>(['pending', 'unknown'])('429 on the sole HTTP attempt → not executed: %s stays %s, retried later', (status) => {
    const o = decideCreate(ctx({ status }), fail(FailureKind.rateLimited, { httpStatus: 429, httpAttempts: 1 }));
    expect(o.status).toBe(status);
    expect(o.retryAfterMs).toBeGreaterThan(0);
    expect(o.reviewReason).toBeNull();
  });
  it.each([FailureKind.authentication, FailureKind.permission])('%s on the sole HTTP attempt → not executed: stays open with the long configuration backoff', (kind) => {
    const o = decideCreate(ctx({ attempts: 0 }, () => 0), fail(kind, { httpAttempts: 1 }));
    expect(o.status).toBe('pending');
    expect(o.retryAfterMs).toBe(DEFAULT_POLICY.backoff.configuration.baseMs / 2);
  });
  it.each([
    [FailureKind.rateLimited, 2],
    [FailureKind.authentication, 3],
    [FailureKind.permission, 2],
    [FailureKind.rateLimited, undefined],
  ])('%s after %s HTTP attempts (or an adapter that cannot tell) → unknown: an earlier attempt may have executed', (kind, httpAttempts) => {
    const o = decideCreate(ctx({ status: 'pending' }), fail(kind, httpAttempts === undefined ? {} : { httpAttempts }));
    expect(o).toMatchObject({ status: 'unknown', reviewReason: null });
    expect(o.retryAfterMs).toBeGreaterThan(0);
  });
  it('connection error / 500 / 409 → ambiguous: unknown, retried with the same key, never failed', () => {
    const o = decideCreate(ctx({ status: 'pending' }), fail(FailureKind.ambiguous, { errorClass: 'StripeConnectionError' }));
    expect(o).toMatchObject({ status: 'unknown', reviewReason: null, externalId: null, errorClass: 'StripeConnectionError' });
    expect(o.retryAfterMs).toBeGreaterThan(0);
  });
  it('idempotency error → unknown and in review with the key named, never swallowed', () => {
    const o = decideCreate(ctx(), fail(FailureKind.idempotencyMisuse, { httpStatus: 400 }));
    expect(o.status).toBe('unknown');
    expect(o.reviewReason).toContain(idempotencyKey(OP_ID, 0));
    expect(o.retryAfterMs).toBeNull();
  });
  it('a PaymentIntent that does not match the operation is not adopted', () => {
    const o = decideCreate(ctx(), ok(pi('succeeded', { amount: 1 })));
    expect(o.status).toBe('unknown');
    expect(o.reviewReason).toMatch(/does not match.*amount/);
    const other = decideCreate(ctx(), ok(pi('succeeded', { metadata: { operation_id: 'someone-else' } })));
    expect(other.reviewReason).toMatch(/metadata.operation_id/);
  });
  it('a PaymentIntent unsettled for longer than the limit goes to a human', () => {
    const late = new Date(T0.getTime() + DEFAULT_POLICY.unsettledReviewAfterMs);
    const o = decideCreate(ctx({ claimedAt: late }), ok(pi('processing')));
    expect(o).toMatchObject({ status: 'unknown', externalId: 'pi_1', retryAfterMs: null });
    expect(o.reviewReason).toMatch(/still processing/);
  });
});

describe('reading a retrieve', () => {
  it('settles by the current status', () => {
    expect(decideRetrieve(ctx({ status: 'unknown', externalId: 'pi_1' }), 'pi_1', ok(pi('succeeded'))).status).toBe('succeeded');
    expect(decideRetrieve(ctx({ status: 'unknown', externalId: 'pi_1' }), 'pi_1', ok(pi('canceled'))).status).toBe('failed');
  });
  it('a missing PaymentIntent goes to a human; a failed read changes nothing', () => {
    expect(decideRetrieve(ctx({ status: 'unknown', externalId: 'pi_1' }), 'pi_1', fail(FailureKind.notFound)).reviewReason).toMatch(/pi_1/);
    const o = decideRetrieve(ctx({ status: 'unknown', externalId: 'pi_1' }), 'pi_1', fail(FailureKind.ambiguous));
    expect(o).toMatchObject({ status: 'unknown', reviewReason: null });
  });
  it('a refund whose Refund failed is failed; the duplicate remedy\'s goes to a human (the extra charge stands)', () => {
    const refund = (paymentIntentId: string | null) =>
      ctx({ kind: 'refund', status: 'unknown', externalId: 're_1', refund: { refundId: paymentIntentId ? `duplicate:${paymentIntentId}` : 'rf-1', parentOperationId: 'charge-op', reason: paymentIntentId ? 'duplicate' : null, paymentIntentId } });
    const failedRefund = ok(pi('failed', { id: 're_1' }));
    expect(decideRetrieve(refund(null), 're_1', failedRefund)).toMatchObject({ status: 'failed', reviewReason: null, externalId: 're_1' });
    for (const status of ['failed', 'canceled']) {
      expect(decideRetrieve(refund('pi_extra'), 're_1', ok(pi(status, { id: 're_1' })))).toMatchObject({
        status: 'unknown',
        externalId: 're_1',
        reviewReason: expect.stringMatching(new RegExp(`remedy's Refund re_1 of pi_extra is ${status} at Stripe`)),
      });
    }
    expect(decideRetrieve(refund('pi_extra'), 're_1', ok(pi('succeeded', { id: 're_1' })))).toMatchObject({ status: 'succeeded', reviewReason: null });
  });
});

describe('after the key window: search decides', () => {
  const expired = { status: 'unknown' as const, claimedAt: new Date(T0.getTime() + 25 * HOUR) };
  it('one succeeded PaymentIntent → succeeded', () => {
    expect(decideSearch(ctx(expired), ok([pi('succeeded')]))).toMatchObject({ status: 'succeeded', externalId: 'pi_1' });
  });
  it('one requires_payment_method → failed, not success', () => {
    expect(decideSearch(ctx(expired), ok([pi('requires_payment_method')]))).toMatchObject({ status: 'failed', externalId: 'pi_1' });
  });
  it('none → stays unknown, in review, saying that absence is not proven', () => {
    const o = decideSearch(ctx(expired), ok([]));
    expect(o).toMatchObject({ status: 'unknown', retryAfterMs: null });
    expect(o.reviewReason).toMatch(/key window expired.*found no PaymentIntent \(not proof/);
  });
  it('states the window in readable units, also under a shortened (time-lapse) policy', () => {
    expect(decideSearch(ctx(expired), ok([])).reviewReason).toContain('window 23 h');
    const short: DecisionContext = { op: op(expired), policy: { ...DEFAULT_POLICY, keyWindowMs: 20_000 }, random: () => 0.5 };
    expect(decideSearch(short, ok([])).reviewReason).toContain('window 20 s');
    expect(formatDuration(90 * 60_000)).toBe('1.5 h');
    expect(formatDuration(12 * 60_000)).toBe('12 min');
  });
  it('several → review, listing them', () => {
    const o = decideSearch(ctx(expired), ok([pi('succeeded'), pi('succeeded', { id: 'pi_2' })]));
    expect(o.reviewReason).toMatch(/found 2 PaymentIntents \(pi_1 succeeded, pi_2 succeeded\)/);
    expect(o.detail).toMatchObject({ searchHits: [{ id: 'pi_1' }, { id: 'pi_2' }] });
  });
  it('search unavailable → nothing learnt, tried later', () => {
    expect(decideSearch(ctx(expired), fail(FailureKind.rateLimited))).toMatchObject({ status: 'unknown', reviewReason: null });
  });
});

describe('early search inside the window', () => {
  it('adopts exactly one hit; creates with the same key on none or on a failed search; reviews several', () => {
    expect(decideEarlySearch(ctx({ status: 'unknown' }), ok([pi('succeeded')]))).toMatchObject({ status: 'succeeded', externalId: 'pi_1' });
    expect(decideEarlySearch(ctx({ status: 'unknown' }), ok([]))).toBe('create');
    expect(decideEarlySearch(ctx({ status: 'unknown' }), fail(FailureKind.ambiguous))).toBe('create');
    const many = decideEarlySearch(ctx({ status: 'unknown' }), ok([pi('failed'), pi('succeeded', { id: 'pi_2' })]));
    expect(many).not.toBe('create');
    expect((many as Outcome).reviewReason).toMatch(/2 PaymentIntents/);
  });
});

describe('invariants over every answer (property-based)', () => {
  const statuses = fc.constantFrom('succeeded', 'canceled', 'requires_payment_method', 'processing', 'requires_action', 'requires_capture');
  const paymentIntent = fc.record({
    id: fc.constantFrom('pi_1', 'pi_2'),
    status: statuses,
    amount: fc.constantFrom(1999, 1),
    currency: fc.constantFrom('eur', 'usd'),
    metadata: fc.constant({ operation_id: OP_ID }),
  });
  const failure = fc.record({
    kind: fc.constantFrom(...Object.values(FailureKind)),
    errorClass: fc.constantFrom('StripeAPIError', 'StripeConnectionError', 'StripeCardError'),
    message: fc.string(),
  });
  const single: fc.Arbitrary<GatewayResult<PaymentIntentView>> = fc.oneof(
    paymentIntent.map((value) => ({ ok: true as const, value })),
    failure.map((f) => ({ ok: false as const, failure: f })),
  );
  const list: fc.Arbitrary<GatewayResult<PaymentIntentView[]>> = fc.oneof(
    fc.array(paymentIntent, { maxLength: 3 }).map((value) => ({ ok: true as const, value })),
    failure.map((f) => ({ ok: false as const, failure: f })),
  );
  const operation = fc.record({
    status: fc.constantFrom<OperationStatus>('pending', 'unknown'),
    attempts: fc.integer({ min: 0, max: 40 }),
    hoursSinceFirst: fc.double({ min: 0, max: 400, noNaN: true }),
  });
  const wellFormed = (o: Outcome, inputWasDecline: boolean) => {
    const final = o.status === 'succeeded' || o.status === 'failed';
    if (final) expect(o.reviewReason).toBeNull();
    if (final || o.reviewReason !== null) expect(o.retryAfterMs).toBeNull();
    else expect(o.retryAfterMs).toBeGreaterThan(0);
    if (o.status === 'succeeded') expect(o.externalId).not.toBeNull();
    if (o.reviewReason !== null) expect(o.status).toBe('unknown');
    if (o.status === 'failed' && !inputWasDecline) expect(o.externalId === null || o.externalId.startsWith('pi_')).toBe(true);
  };
  it('no outcome is both final and scheduled, success always has a PaymentIntent, review is always unknown', () => {
    fc.assert(
      fc.property(operation, single, list, ({ status, attempts, hoursSinceFirst }, answer, hits) => {
        const c = ctx({ status, attempts, claimedAt: new Date(T0.getTime() + hoursSinceFirst * HOUR) });
        wellFormed(decideCreate(c, answer), !answer.ok && answer.failure.kind === 'declined');
        wellFormed(decideRetrieve(c, 'pi_1', answer), false);
        wellFormed(decideSearch(c, hits), false);
        const early = decideEarlySearch(c, hits);
        if (early !== 'create') wellFormed(early, false);
      }),
      { numRuns: 2000 },
    );
  });
  it('an ambiguous answer never makes an operation failed, and success needs a matching succeeded PaymentIntent', () => {
    fc.assert(
      fc.property(operation, single, ({ status, attempts }, answer) => {
        const o = decideCreate(ctx({ status, attempts }), answer);
        if (!answer.ok && ['ambiguous', 'rate_limited', 'authentication', 'permission', 'idempotency_misuse'].includes(answer.failure.kind)) {
          expect(o.status).not.toBe('failed');
          expect(o.status).not.toBe('succeeded');
        }
        if (o.status === 'succeeded') {
          expect(answer.ok && answer.value.status === 'succeeded' && answer.value.amount === 1999 && answer.value.currency === 'eur').toBe(true);
        }
      }),
      { numRuns: 2000 },
    );
  });
  it('the step after the window is never a create', () => {
    fc.assert(
      fc.property(operation, fc.option(fc.constant('pi_1'), { nil: null }), ({ status, hoursSinceFirst }, externalId) => {
        const step = chooseStep(op({ status, externalId, claimedAt: new Date(T0.getTime() + hoursSinceFirst * HOUR) }));
        if (hoursSinceFirst >= 23) expect(step.kind === 'create' || step.kind === 'early_search').toBe(false);
        if (externalId) expect(step.kind).toBe('retrieve');
      }),
      { numRuns: 2000 },
    );
  });
});

describe('classifying stripe-node errors (the SDK error classes themselves)', () => {
  const E = Stripe.errors;
  it.each([
    ['StripeCardError', new E.StripeCardError({ message: 'declined', code: 'card_declined', decline_code: 'insufficient_funds', statusCode: 402 }), 'create', FailureKind.declined],
    ['StripeInvalidRequestError 400', new E.StripeInvalidRequestError({ message: 'bad', statusCode: 400, code: 'parameter_invalid_integer' }), 'create', FailureKind.invalidRequest],
    ['StripeInvalidRequestError 404 on retrieve', new E.StripeInvalidRequestError({ message: 'no such', statusCode: 404, code: 'resource_missing' }), 'retrieve', FailureKind.notFound],
    ['StripeInvalidRequestError 404 on create', new E.StripeInvalidRequestError({ message: 'no such', statusCode: 404, code: 'resource_missing' }), 'create', FailureKind.invalidRequest],
    ['StripeIdempotencyError', new E.StripeIdempotencyError({ message: 'keys…', statusCode: 400 }), 'create', FailureKind.idempotencyMisuse],
    ['StripeRateLimitError', new E.StripeRateLimitError({ message: 'slow', statusCode: 429 }), 'create', FailureKind.rateLimited],
    ['StripeAuthenticationError', new E.StripeAuthenticationError({ message: 'key', statusCode: 401 }), 'create', FailureKind.authentication],
    ['StripePermissionError', new E.StripePermissionError({ message: 'no', statusCode: 403 }), 'create', FailureKind.permission],
    ['StripeConnectionError', new E.StripeConnectionError({ message: 'timeout' }), 'create', FailureKind.ambiguous],
    ['StripeAPIError 500', new E.StripeAPIError({ message: 'oops', statusCode: 500 }), 'create', FailureKind.ambiguous],
    ['StripeAPIError 409', new E.StripeAPIError({ message: 'in use', statusCode: 409 }), 'create', FailureKind.ambiguous],
    ['a TypeError', new TypeError('surprise'), 'create', FailureKind.ambiguous],
    ['a thrown string', 'weird', 'create', FailureKind.ambiguous],
  ] as const)('%s → %s', (_name, error, call, kind) => {
    expect(classifyStripeError(error, call).kind).toBe(kind);
  });
  it('keeps the decline code and the declined PaymentIntent', () => {
    const failure = classifyStripeError(
      new Stripe.errors.StripeCardError({
        message: 'declined',
        code: 'card_declined',
        decline_code: 'insufficient_funds',
        statusCode: 402,
        payment_intent: { object: 'payment_intent', id: 'pi_9', status: 'requires_payment_method', amount: 5, currency: 'eur', metadata: {} } as never,
      }),
      'create',
    );
    expect(failure).toMatchObject({ code: 'insufficient_funds', httpStatus: 402, paymentIntent: { id: 'pi_9' } });
  });
});
