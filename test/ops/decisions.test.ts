// The operator's judgements and the argument parser, without I/O.
import { describe, expect, it } from 'vitest';
import {
  checkReviewable,
  DEFAULT_REVIEW_POLICY,
  judgeNoEffect,
  judgeResolveSucceeded,
  type PaymentIntentEvidence,
  type RefundEvidence,
  type StripeEvidence,
} from '../../lambdas/payments/review.ts';
import { lastPossibleSendAt, type AuditEvent } from '../../lambdas/payments/audit-trail.ts';
import type { Operation } from '../../lambdas/payments/types.ts';
import { parseInvocation } from '../../lambdas/ops/parse.ts';
import { formatAmount, formatSeconds } from '../../lambdas/ops/render.ts';
import { operation } from '../support/operations.ts';

const T0 = Date.parse('2030-01-01T00:00:00Z');
const at = (minutes: number) => new Date(T0 + minutes * 60_000).toISOString();

/** An operation in review (the key window expired after two attempts), on this file's clock. */
const op = (overrides: Partial<Operation> = {}): Operation =>
  operation({
    id: '0190aaaa-0000-7000-8000-000000000001',
    paymentMethod: 'pm_1',
    status: 'unknown',
    attempts: 2,
    firstAttemptedAt: new Date(T0),
    nextAttemptAt: null,
    reviewReason: 'key window expired …',
    createdAt: new Date(T0),
    updatedAt: new Date(T0),
    ...overrides,
  });

let seq = 0;
const ev = (action: string, minutes: number, step: string | null = null): AuditEvent => ({
  id: ++seq,
  occurredAt: at(minutes),
  actor: 'engine',
  action,
  step,
  fromStatus: null,
  toStatus: null,
  errorClass: null,
  errorCode: null,
  externalId: null,
  keyGeneration: 0,
  detail: {},
});

const claim = (minutes: number, leaseToken: string): AuditEvent => ({ ...ev('attempt_started', minutes), detail: { leaseToken } });
const outcome = (action: string, minutes: number, step: string, leaseToken: string): AuditEvent => ({ ...ev(action, minutes, step), detail: { leaseToken } });

const pi = (status: string, overrides: Partial<PaymentIntentEvidence> = {}): PaymentIntentEvidence => ({
  id: `pi_${status}`,
  status,
  amount: 1999,
  currency: 'eur',
  metadata: { operation_id: op().id, order_id: 'order-1', key_generation: '0' },
  created: null,
  foundBy: ['search'],
  ...overrides,
});

const evidence = (pis: PaymentIntentEvidence[], complete = true): StripeEvidence => ({
  kind: 'charge',
  paymentIntents: pis,
  refunds: [],
  refundedPaymentIntent: null,
  unrelated: [],
  missing: [],
  complete,
  problems: complete ? [] : ['Search failed: StripeAPIError'],
  checkedAt: at(100),
});

describe('lastPossibleSendAt', () => {
  const lease = DEFAULT_REVIEW_POLICY.leaseMs;

  it('is the outcome time of the last claim whose step may send (create, early_search)', () => {
    const events = [ev('requested', 0), ev('attempt_started', 0), ev('outcome_recorded', 1, 'create'), ev('attempt_started', 30), ev('outcome_recorded', 31, 'early_search')];
    expect(lastPossibleSendAt(events, lease)?.toISOString()).toBe(at(31));
  });

  it('ignores claims that only retrieved or searched, and released leases', () => {
    const events = [
      ev('attempt_started', 0),
      ev('outcome_recorded', 1, 'create'),
      ev('attempt_started', 60),
      ev('outcome_recorded', 61, 'search'),
      ev('attempt_started', 70),
      ev('lease_released', 70),
      ev('attempt_started', 80),
      ev('outcome_recorded', 81, 'retrieve'),
    ];
    expect(lastPossibleSendAt(events, lease)?.toISOString()).toBe(at(1));
  });

  it('a claim with no outcome (a dead worker, a zombie) may have sent until its lease ran out', () => {
    const events = [ev('attempt_started', 0), ev('outcome_recorded', 1, 'create'), ev('attempt_started', 10), ev('attempt_started', 20), ev('outcome_recorded', 21, 'search')];
    expect(lastPossibleSendAt(events, lease)?.getTime()).toBe(Date.parse(at(10)) + lease);
  });

  it('a discarded outcome still ended a send', () => {
    const events = [ev('attempt_started', 0), ev('outcome_discarded', 5, 'create')];
    expect(lastPossibleSendAt(events, lease)?.toISOString()).toBe(at(5));
  });

  it("a zombie's late outcome_discarded is its own claim's end, after the next claim's outcome", () => {
    // Claim a (lease 2 min) hangs; its lease runs out, b claims at 3 and records at 4; a's request
    // comes back at 9 and its write is discarded. a's request ran until 9, not until its lease end (2).
    const short = 2 * 60_000;
    const events = [
      claim(0, 'a'),
      claim(3, 'b'),
      outcome('outcome_recorded', 4, 'create', 'b'),
      outcome('outcome_discarded', 9, 'create', 'a'),
    ];
    expect(lastPossibleSendAt(events, short)?.toISOString()).toBe(at(9));
  });

  it("a claim is paired with its own outcome, not with the next outcome row (a zombie's write in between)", () => {
    // a's discarded write (at 4) lands between b's claim (3) and b's outcome (10): b ran until 10.
    const short = 2 * 60_000;
    const events = [claim(0, 'a'), claim(3, 'b'), outcome('outcome_discarded', 4, 'create', 'a'), outcome('outcome_recorded', 10, 'create', 'b')];
    expect(lastPossibleSendAt(events, short)?.toISOString()).toBe(at(10));
    // and b still running (no outcome yet): its lease end, not a's discarded write.
    expect(lastPossibleSendAt(events.slice(0, 3), short)?.getTime()).toBe(Date.parse(at(3)) + short);
  });

  it('never claimed → null', () => {
    expect(lastPossibleSendAt([ev('requested', 0)], lease)).toBeNull();
  });
});

describe('judgeNoEffect (resolve --as failed, reissue)', () => {
  const events = [ev('attempt_started', 0), ev('outcome_recorded', 1, 'create')];
  const later = new Date(T0 + 60 * 60_000);

  it('allows when complete evidence shows only failed PaymentIntents, after the settle period', () => {
    expect(judgeNoEffect(op(), evidence([pi('canceled'), pi('requires_payment_method')]), events, later)).toEqual({ allowed: true });
    expect(judgeNoEffect(op(), evidence([]), events, later)).toEqual({ allowed: true });
  });

  it.each(['succeeded', 'processing', 'requires_action', 'requires_capture', 'requires_confirmation', 'some_new_status'])(
    'refuses while a PaymentIntent is %s',
    (status) => {
      const verdict = judgeNoEffect(op(), evidence([pi('canceled'), pi(status)]), events, later);
      expect(verdict.allowed).toBe(false);
    },
  );

  it('refuses on incomplete evidence, even with nothing found', () => {
    expect(judgeNoEffect(op(), evidence([], false), events, later)).toEqual({ allowed: false, reason: expect.stringMatching(/incomplete/) });
  });

  it('refuses until Search can be trusted to show the last possible send', () => {
    const soon = new Date(T0 + 5 * 60_000);
    expect(judgeNoEffect(op(), evidence([]), events, soon)).toEqual({ allowed: false, reason: expect.stringContaining(`try again after ${at(11)}`) });
    expect(judgeNoEffect(op(), evidence([]), events, soon, { ...DEFAULT_REVIEW_POLICY, searchSettleMs: 0 })).toEqual({ allowed: true });
  });
});

describe('judgeResolveSucceeded', () => {
  it('needs the PaymentIntent to exist, be this operation’s, match amount and currency, and be succeeded', () => {
    expect(judgeResolveSucceeded(op(), 'pi_x', pi('succeeded', { id: 'pi_x' }))).toEqual({ allowed: true });
    expect(judgeResolveSucceeded(op(), 'pi_x', null).allowed).toBe(false);
    expect(judgeResolveSucceeded(op(), 'pi_x', pi('succeeded', { metadata: { operation_id: 'other' } }))).toEqual({
      allowed: false,
      reason: expect.stringMatching(/does not belong .* other/),
    });
    expect(judgeResolveSucceeded(op(), 'pi_x', pi('succeeded', { metadata: {} }))).toEqual({ allowed: false, reason: expect.stringMatching(/absent/) });
    expect(judgeResolveSucceeded(op(), 'pi_x', pi('succeeded', { currency: 'usd' }))).toEqual({ allowed: false, reason: expect.stringMatching(/currency usd ≠ eur/) });
    expect(judgeResolveSucceeded(op(), 'pi_x', pi('processing'))).toEqual({ allowed: false, reason: expect.stringMatching(/processing, not succeeded/) });
  });
});

// A refund: the same judgements, on Refund evidence (List of the refunded PaymentIntent's refunds).
const REFUNDED = 'pi_charge';
const refundOp = (overrides: Partial<Operation> = {}): Operation =>
  op({ kind: 'refund', amount: 500, refund: { refundId: 'rf-1', parentOperationId: '0190aaaa-0000-7000-8000-0000000000c0', reason: null, paymentIntentId: null }, ...overrides });
const re = (status: string, overrides: Partial<RefundEvidence> = {}): RefundEvidence => ({
  id: `re_${status}`,
  status,
  amount: 500,
  currency: 'eur',
  paymentIntent: REFUNDED,
  metadata: { operation_id: op().id, order_id: 'order-1', refund_id: 'rf-1', key_generation: '0' },
  created: null,
  foundBy: ['list'],
  ...overrides,
});
const refundEvidence = (refunds: RefundEvidence[], complete = true): StripeEvidence => ({
  kind: 'refund',
  paymentIntents: [],
  refunds,
  refundedPaymentIntent: REFUNDED,
  unrelated: [],
  missing: [],
  complete,
  problems: complete ? [] : [`List of ${REFUNDED}'s refunds stopped after 20 page(s), before its end`],
  checkedAt: at(100),
});

describe('judgeNoEffect and judgeResolveSucceeded for a refund (Refund evidence)', () => {
  const events = [ev('attempt_started', 0), ev('outcome_recorded', 1, 'create')];
  const later = new Date(T0 + 60 * 60_000);

  it('allows when the complete List shows only failed or canceled refunds of ours', () => {
    expect(judgeNoEffect(refundOp(), refundEvidence([re('failed'), re('canceled')]), events, later)).toEqual({ allowed: true });
    expect(judgeNoEffect(refundOp(), refundEvidence([]), events, later)).toEqual({ allowed: true });
  });

  it.each(['succeeded', 'pending', 'requires_action', 'some_new_status'])('refuses while a refund of ours is %s (any key generation)', (status) => {
    const verdict = judgeNoEffect(refundOp(), refundEvidence([re('failed'), re(status, { metadata: { ...re(status).metadata, key_generation: '3' } })]), events, later);
    expect(verdict.allowed).toBe(false);
  });

  it('refuses on an incomplete List (cut off, or failed), even with nothing found', () => {
    expect(judgeNoEffect(refundOp(), refundEvidence([], false), events, later)).toEqual({ allowed: false, reason: expect.stringMatching(/incomplete .*stopped after 20 page/) });
  });

  it('the Search settle period does not apply (List is real time): the List settle delay after the last send, or after a lease end, does', () => {
    const { listSettleMs, leaseMs } = DEFAULT_REVIEW_POLICY;
    const lastOutcome = Date.parse(at(1));
    expect(judgeNoEffect(refundOp(), refundEvidence([]), events, new Date(lastOutcome + listSettleMs - 1))).toEqual({
      allowed: false,
      reason: expect.stringContaining(`try again after ${new Date(lastOutcome + listSettleMs).toISOString()}`),
    });
    const afterList = new Date(lastOutcome + listSettleMs);
    expect(judgeNoEffect(refundOp(), refundEvidence([]), events, afterList)).toEqual({ allowed: true });
    // The same trail for a charge waits out Search's (longer) settle period.
    expect(judgeNoEffect(op(), evidence([]), events, afterList).allowed).toBe(false);
    // A claim with no outcome may send until its lease end.
    const dead = [...events, ev('attempt_started', 1.5)];
    const leaseEnd = Date.parse(at(1.5)) + leaseMs;
    expect(judgeNoEffect(refundOp(), refundEvidence([]), dead, afterList)).toEqual({
      allowed: false,
      reason: expect.stringContaining(`ran until ${new Date(leaseEnd).toISOString()} at the latest`),
    });
    expect(judgeNoEffect(refundOp(), refundEvidence([]), dead, new Date(leaseEnd + listSettleMs))).toEqual({ allowed: true });
  });

  it('refuses evidence of the other kind (PaymentIntents cannot show that nothing was refunded)', () => {
    expect(judgeNoEffect(refundOp(), evidence([]), events, later)).toEqual({ allowed: false, reason: expect.stringMatching(/evidence gathered is a charge's/) });
  });

  it('resolve as succeeded: THAT refund, ours, same amount, currency and PaymentIntent, succeeded', () => {
    expect(judgeResolveSucceeded(refundOp(), 're_succeeded', re('succeeded'), REFUNDED)).toEqual({ allowed: true });
    expect(judgeResolveSucceeded(refundOp(), 're_x', null, REFUNDED)).toEqual({ allowed: false, reason: 'Refund re_x does not exist at Stripe' });
    expect(judgeResolveSucceeded(refundOp(), 're_succeeded', re('succeeded', { metadata: { operation_id: 'another' } }), REFUNDED)).toEqual({
      allowed: false,
      reason: expect.stringMatching(/^Refund re_succeeded does not belong .* another/),
    });
    expect(judgeResolveSucceeded(refundOp(), 're_succeeded', re('succeeded', { amount: 499 }), REFUNDED)).toEqual({ allowed: false, reason: expect.stringMatching(/amount 499 ≠ 500/) });
    expect(judgeResolveSucceeded(refundOp(), 're_succeeded', re('succeeded', { paymentIntent: 'pi_other' }), REFUNDED)).toEqual({
      allowed: false,
      reason: expect.stringMatching(/PaymentIntent pi_other ≠ pi_charge/),
    });
    expect(judgeResolveSucceeded(refundOp(), 're_succeeded', re('succeeded'), null)).toEqual({ allowed: false, reason: expect.stringMatching(/refunded PaymentIntent is not known/) });
    expect(judgeResolveSucceeded(refundOp(), 're_pending', re('pending'), REFUNDED)).toEqual({ allowed: false, reason: expect.stringMatching(/pending, not succeeded/) });
  });

  it('a succeeded refund of ours turns failed / reissue into "use resolve --as succeeded --refund"; one that does not match, into escalate', () => {
    expect(judgeNoEffect(refundOp(), refundEvidence([re('succeeded')]), events, later)).toEqual({ allowed: false, reason: expect.stringContaining('use review resolve --as succeeded --refund re_succeeded') });
    expect(judgeNoEffect(refundOp(), refundEvidence([re('succeeded', { amount: 900 })]), events, later)).toEqual({ allowed: false, reason: expect.stringMatching(/none of them matches .*escalate/) });
  });
});

describe('checkReviewable', () => {
  it('only an open operation in review, with no lease — of either kind', () => {
    expect(checkReviewable(op())).toEqual({ allowed: true });
    expect(checkReviewable(refundOp())).toEqual({ allowed: true });
    expect(checkReviewable(op({ status: 'succeeded', reviewReason: null, settledAt: new Date(T0) })).allowed).toBe(false);
    expect(checkReviewable(op({ reviewReason: null, nextAttemptAt: new Date(T0) }))).toEqual({ allowed: false, reason: expect.stringMatching(/engine still owns it/) });
    expect(checkReviewable(op({ leaseToken: 'x', leaseUntil: new Date(T0) })).allowed).toBe(false);
  });
});

describe('parseInvocation', () => {
  const id = '0190aaaa-0000-7000-8000-000000000001';

  it('keeps the transport options out of the argv it forwards', () => {
    const parsed = parseInvocation(['review', 'note', id, '--lambda', 'fn', '--reason', 'x y', '--region=eu-west-1', '--json'], 'alice');
    expect(parsed.transport).toEqual({ lambda: 'fn', region: 'eu-west-1' });
    expect(parsed.forwardArgv).toEqual(['review', 'note', id, '--reason', 'x y', '--json']);
    expect(parsed.command).toEqual({ name: 'review note', operationId: id, action: { actor: 'operator:alice', reason: 'x y', claimed: 'alice', claimedFrom: 'os-user' } });
    // --yes is the CLI's too: never forwarded.
    expect(parseInvocation(['review', 'note', id, '--reason', 'r', '--yes', '--lambda', 'fn'], 'alice')).toMatchObject({ confirmed: true, forwardArgv: ['review', 'note', id, '--reason', 'r'] });
  });

  it('an explicit --actor wins over the OS user; the operator: prefix is not doubled', () => {
    const parsed = parseInvocation(['review', 'note', id, '--reason', 'r', '--actor', 'operator:bob'], 'alice');
    expect(parsed.command).toMatchObject({ action: { actor: 'operator:bob' } });
  });

  it('help for a command, and for everything', () => {
    expect(parseInvocation(['review', 'show', '--help'], null).command).toEqual({ name: 'help', topic: 'review show' });
    expect(parseInvocation(['--help'], null).command).toEqual({ name: 'help', topic: null });
  });

  it.each([
    [['review'], /unknown command "review"; review has/],
    [['review', 'list', '--limit', '0'], /--limit must be an integer from 1 to 1000/],
    [['review', 'list', '--status', 'failed'], /--status must be one of pending, unknown/],
    [['review', 'list', 'extra'], /takes no positional arguments/],
    [['review', 'show'], /missing <operation-id>/],
    [['review', 'resolve', id, '--as', 'failed', '--payment-intent', 'pi_1', '--reason', 'r'], /--payment-intent goes with --as succeeded only/],
    [['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', 'ch_1', '--reason', 'r'], /must be a PaymentIntent id/],
    [['review', 'resolve', id, '--as', 'failed', '--refund', 're_1', '--reason', 'r'], /--refund goes with --as succeeded only/],
    [['review', 'resolve', id, '--as', 'succeeded', '--refund', 'pi_1', '--reason', 'r'], /--refund must be a Stripe Refund id re_/],
    [['review', 'resolve', id, '--as', 'succeeded', '--refund', 're_1', '--payment-intent', 'pi_1', '--reason', 'r'], /exclude each other/],
    [['review', 'resolve', id, '--as', 'succeeded', '--reason', 'r'], /needs --payment-intent pi_… \(a charge\) or --refund re_… \(a refund\)/],
    [['review', 'note', id, '--reason', '   '], /--reason is required/],
    [['review', 'note', id, '--reason', 'r', '--actor', 'two words'], /--actor must be/],
    [['stats', '--endpoint', 'http://x'], /only go with --lambda/],
  ])('%j → %s', (argv, message) => {
    expect(() => parseInvocation(argv, 'alice')).toThrow(message);
  });
});

describe('formatting', () => {
  it('amounts in the currency’s minor units', () => {
    expect(formatAmount(1999, 'eur')).toBe('19.99 EUR');
    expect(formatAmount(500, 'jpy')).toBe('500 JPY');
    expect(formatAmount(1234, 'kwd')).toBe('1.234 KWD');
  });
  it('durations', () => {
    expect(formatSeconds(42)).toBe('42s');
    expect(formatSeconds(3_700)).toBe('1h 01m');
    expect(formatSeconds(3 * 86_400 + 7_200)).toBe('3d 2h');
  });
});
