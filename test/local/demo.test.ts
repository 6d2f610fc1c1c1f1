// The pure parts of the local runtime: the demo workload, the command line, the compressed clock.
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../lambdas/runtime/config.ts';
import { parseCliArgs } from '../../local/cli.ts';
import { AUTHORIZATION_SCENARIOS } from '../../local/authorization-demo.ts';
import { DEMO_CONNECTED_ACCOUNTS } from '../../local/connect-demo.ts';
import { buildWorkload, type SendStep } from '../../local/demo.ts';
import { REFUND_SCENARIOS } from '../../local/send-report.ts';
import { DEMO_TIME_LAPSE, describeTimeLapse, evidenceTimingsFor, keyPruneAfterMsFor, leaseMsFor, timeLapseEnvironment, watchTimingsFor, type TimeLapse } from '../../local/pipeline.ts';
import { TEST_TIME_LAPSE } from './support.ts';

describe('buildWorkload', () => {
  const w = buildWorkload({ orders: 500, duplicates: 0.3, seed: 7, tag: 'demo-t' });
  const of = <K extends SendStep['kind']>(kind: K) => w.steps.filter((s): s is Extract<SendStep, { kind: K }> => s.kind === kind);

  it('has the orders, once each, in chunks of ten for the producer client', () => {
    expect(w.orders).toHaveLength(500);
    expect(new Set(w.orders.map((o) => o.orderId)).size).toBe(500);
    expect(of('orders').every((s) => s.requests.length <= 10)).toBe(true);
    expect(of('orders').flatMap((s) => s.requests)).toEqual(w.orders);
  });

  it('repeats 30 % of the orders, a tenth of them as if after the 5-minute window, each after its original', () => {
    const repeats = [...of('duplicate'), ...of('late_duplicate')];
    expect(repeats).toHaveLength(150);
    expect(of('late_duplicate').length).toBe(15);
    const sentBefore = new Set<string>();
    for (const step of w.steps) {
      if (step.kind === 'orders') for (const r of step.requests) sentBefore.add(r.orderId);
      if (step.kind === 'duplicate' || step.kind === 'late_duplicate') expect(sentBefore.has(step.request.orderId)).toBe(true);
    }
  });

  it('ends with three messages the handler must reject, the conflict in its order’s group', () => {
    const bad = of('bad');
    expect(bad.map((b) => b.reason)).toEqual(['invalid_json', 'invalid_body', 'order_conflict']);
    const conflict = bad[2]!;
    const original = w.orders.find((o) => o.orderId === conflict.groupId)!;
    expect(JSON.parse(conflict.body)).toMatchObject({ orderId: original.orderId, amount: original.amount + 100 });
    expect(w.steps.slice(-3)).toEqual(bad);
  });

  it('mixes in declines and processing payment methods, and is reproducible from its seed', () => {
    expect(Object.keys(w.paymentMethods).sort()).toEqual(['pm_card_chargeDeclined', 'pm_card_insufficientFunds', 'pm_card_mastercard', 'pm_card_visa', 'pm_fake_processing']);
    expect(buildWorkload({ orders: 500, duplicates: 0.3, seed: 7, tag: 'demo-t' })).toEqual(w);
    expect(buildWorkload({ orders: 500, duplicates: 0.3, seed: 8, tag: 'demo-t' })).not.toEqual(w);
    expect(buildWorkload({ orders: 200, duplicates: 0, seed: 1, tag: 'x', processing: false }).paymentMethods.pm_fake_processing).toBeUndefined();
  });
});

describe('buildWorkload: refunds', () => {
  const base = { orders: 500, duplicates: 0.3, seed: 7, tag: 'demo-t' };
  const w = buildWorkload({ ...base, refunds: 0.2 });
  const orderOf = new Map(w.orders.map((o) => [o.orderId, o]));
  const refundSteps = w.steps.filter((s): s is Extract<SendStep, { kind: 'refund' | 'late_refund' }> => s.kind === 'refund' || s.kind === 'late_refund');

  it('refunds a fifth of the orders, every scenario in turn, and leaves the charges of the seed as they were', () => {
    expect(w.refunds).toHaveLength(100);
    expect(new Set(w.refunds.map((r) => r.orderId)).size).toBe(100);
    expect(new Set(w.refunds.map((r) => r.scenario))).toEqual(new Set(REFUND_SCENARIOS));
    const plain = buildWorkload(base);
    expect(plain.refunds).toEqual([]);
    expect(w.orders).toEqual(plain.orders);
    expect(buildWorkload({ ...base, refunds: 0.2 })).toEqual(w);
    expect(buildWorkload({ ...base, refunds: 0 }).steps).toEqual(plain.steps);
  });

  it('sends every refund after its order, on the order’s group, a rival after its original', () => {
    const sent = new Set<string>();
    const refundsSent = new Set<string>();
    for (const step of w.steps) {
      if (step.kind === 'orders') for (const r of step.requests) sent.add(r.orderId);
      if (step.kind === 'refund' || step.kind === 'late_refund') {
        expect(sent.has(step.request.orderId), step.request.orderId).toBe(true);
        if (step.after !== step.request.orderId) expect(refundsSent.has(step.after), step.after).toBe(true);
        if (step.kind === 'refund' && !step.repeat) refundsSent.add(`refund:${step.request.orderId}:${step.request.refundId}`);
      }
    }
  });

  it('makes each scenario what its name says', () => {
    for (const plan of w.refunds) {
      const order = orderOf.get(plan.orderId)!;
      const steps = refundSteps.filter((s) => s.request.orderId === plan.orderId);
      const amounts = plan.requests.map((r) => r.amount);
      switch (plan.scenario) {
        case 'partial':
          expect(amounts[0]).toBeLessThan(order.amount);
          expect(steps.map((s) => s.kind)).toEqual(['refund']);
          break;
        case 'full':
          expect(amounts).toEqual([order.amount]);
          break;
        case 'split':
          expect(amounts).toHaveLength(2);
          expect(amounts[0]! + amounts[1]!).toBe(order.amount);
          expect(new Set(plan.requests.map((r) => r.refundId)).size).toBe(2);
          break;
        case 'repeat':
          // The same request three times: twice by the producer (one SQS deduplicates), once past the window.
          expect(steps.map((s) => [s.kind, s.kind === 'refund' && s.repeat === true])).toEqual([['refund', false], ['refund', true], ['late_refund', false]]);
          expect(new Set(steps.map((s) => JSON.stringify(s.request))).size).toBe(1);
          break;
        case 'conflict':
          expect(steps.map((s) => s.kind)).toEqual(['refund', 'late_refund']);
          expect(steps[1]!.request).toMatchObject({ refundId: steps[0]!.request.refundId, amount: steps[0]!.request.amount + 1 });
          break;
        case 'over_refund':
          expect(amounts[0]).toBeGreaterThan(order.amount);
          break;
        case 'before_final':
          expect(order.paymentMethod).toBe('pm_fake_processing');
          break;
        case 'failed_charge':
          expect(['pm_card_chargeDeclined', 'pm_card_insufficientFunds']).toContain(order.paymentMethod);
          break;
      }
    }
  });

  it('picks the orders to charge again behind the pipeline’s back among cards that succeed and orders not refunded', () => {
    const d = buildWorkload({ ...base, refunds: 0.2, duplicateCharges: 3 });
    expect(d.duplicateCharges).toHaveLength(3);
    const refunded = new Set(d.refunds.map((r) => r.orderId));
    for (const id of d.duplicateCharges) {
      expect(refunded.has(id)).toBe(false);
      expect(['pm_card_visa', 'pm_card_mastercard']).toContain(orderOf.get(id)!.paymentMethod);
    }
    expect(buildWorkload({ ...base, refunds: 0.2, duplicateCharges: 3 }).duplicateCharges).toEqual(d.duplicateCharges);
    expect(w.duplicateCharges).toEqual([]);
  });

  it('without processing or declined orders, before_final takes a card that succeeds and failed_charge becomes a partial refund', () => {
    const few = buildWorkload({ orders: 40, duplicates: 0, seed: 3, tag: 'x', processing: false, refunds: 1 });
    const methods = new Map(few.orders.map((o) => [o.orderId, o.paymentMethod]));
    for (const plan of few.refunds.filter((p) => p.scenario === 'before_final')) expect(methods.get(plan.orderId)).not.toBe('pm_fake_processing');
    const declined = few.orders.filter((o) => o.paymentMethod.includes('Declined') || o.paymentMethod.includes('insufficient')).length;
    expect(few.refunds.filter((p) => p.scenario === 'failed_charge').length).toBeLessThanOrEqual(declined);
  });
});

describe('buildWorkload: connected accounts', () => {
  const base = { orders: 500, duplicates: 0.3, seed: 7, tag: 'demo-t', refunds: 0.2, duplicateCharges: 2 };
  const w = buildWorkload({ ...base, connect: true });
  const plain = buildWorkload(base);
  const connectOrders = w.orders.filter((o) => o.account !== undefined || o.transferDestination !== undefined);
  const [A, B] = DEMO_CONNECTED_ACCOUNTS;

  it('charges on each of the two accounts (direct, with the fee) and for each (destination, with the fee), and refunds a direct charge on each', () => {
    for (const account of [A, B]) {
      const direct = connectOrders.filter((o) => o.account === account);
      expect(direct.length, account).toBe(5); // 1 % of 500 per account
      expect(direct.every((o) => o.transferDestination === undefined)).toBe(true);
      // A fee on all but the second (a direct charge need not take one).
      expect(direct.map((o) => o.applicationFeeAmount === undefined)).toEqual([false, true, false, false, false]);
      expect(direct.every((o) => o.applicationFeeAmount === undefined || (o.applicationFeeAmount > 0 && o.applicationFeeAmount <= o.amount))).toBe(true);
      const destination = connectOrders.filter((o) => o.transferDestination === account);
      expect(destination.length, account).toBeGreaterThanOrEqual(1);
      expect(destination.every((o) => o.account === undefined && o.applicationFeeAmount! > 0 && o.applicationFeeAmount! <= o.amount)).toBe(true);
      const refunded = w.refunds.filter((r) => direct.some((o) => o.orderId === r.orderId));
      expect(refunded.map((r) => r.scenario), account).toEqual([account === A ? 'partial' : 'full']);
      const order = direct.find((o) => o.orderId === refunded[0]!.orderId)!;
      expect(order.paymentMethod).toBe('pm_card_visa');
      expect(refunded[0]!.requests).toEqual([expect.objectContaining({ orderId: order.orderId, amount: account === A ? Math.floor(order.amount * 0.4) : order.amount })]);
    }
  });

  it('has two direct charges per account even in a small run (one with a fee, one without) and a destination charge to each', () => {
    const small = buildWorkload({ orders: 60, duplicates: 0, seed: 1, tag: 'x', connect: true }).orders.filter((o) => o.account !== undefined || o.transferDestination !== undefined);
    expect(small.map((o) => [o.account ?? null, o.transferDestination ?? null, o.applicationFeeAmount !== undefined])).toEqual([
      [A, null, true],
      [A, null, false],
      [null, A, true],
      [B, null, true],
      [B, null, false],
      [null, B, true],
    ]);
  });

  it('is a section of its own: the platform orders, duplicates, refunds and second charges of the seed are as without it; its orders are sent after them, its refunds after their order', () => {
    expect(w.orders.slice(0, plain.orders.length)).toEqual(plain.orders);
    expect(w.orders.slice(plain.orders.length)).toEqual(connectOrders);
    expect(w.refunds.slice(0, plain.refunds.length)).toEqual(plain.refunds);
    expect(w.duplicateCharges).toEqual(plain.duplicateCharges);
    expect(w.duplicateChargeCandidates).toEqual(plain.duplicateChargeCandidates);
    const connectIds = new Set(connectOrders.map((o) => o.orderId));
    expect(plain.steps.filter((s) => s.kind !== 'bad')).toEqual(w.steps.slice(0, plain.steps.length - 3));
    expect(w.steps.slice(-3).map((s) => s.kind)).toEqual(['bad', 'bad', 'bad']);
    const sent = new Set<string>();
    for (const step of w.steps) {
      if (step.kind === 'orders') for (const r of step.requests) sent.add(r.orderId);
      if ((step.kind === 'refund' || step.kind === 'late_refund') && connectIds.has(step.request.orderId)) expect(sent.has(step.request.orderId)).toBe(true);
    }
    expect(connectOrders.every((o) => o.orderId.startsWith('demo-t-connect-'))).toBe(true);
    expect(buildWorkload({ ...base, connect: true })).toEqual(w);
  });
});

describe('buildWorkload: authorizations (manual capture)', () => {
  const base = { orders: 500, duplicates: 0.3, seed: 7, tag: 'demo-t', refunds: 0.2, duplicateCharges: 2, connect: true };
  const w = buildWorkload({ ...base, authorizations: true });
  const plain = buildWorkload(base);
  const manual = w.orders.filter((o) => o.capture === 'manual');

  it('authorizes orders of its own, each scenario at least once: captured in full, in part (less than authorized), canceled, left to expire', () => {
    expect(w.authorizations.map((a) => a.scenario)).toEqual(AUTHORIZATION_SCENARIOS.flatMap((s) => [s, s, s])); // half a percent of 500 each
    expect(manual.map((o) => o.orderId)).toEqual(w.authorizations.map((a) => a.orderId));
    expect(manual.every((o) => o.paymentMethod === 'pm_card_visa' && o.orderId.startsWith('demo-t-auth-'))).toBe(true);
    for (const a of w.authorizations) {
      const order = manual.find((o) => o.orderId === a.orderId)!;
      if (a.scenario === 'capture_full') expect(a.settlement).toEqual({ type: 'capture', orderId: a.orderId });
      if (a.scenario === 'capture_partial') {
        expect(a.settlement).toMatchObject({ type: 'capture', orderId: a.orderId });
        const amount = (a.settlement as { amount: number }).amount;
        expect(amount).toBeGreaterThan(0);
        expect(amount).toBeLessThan(order.amount);
      }
      if (a.scenario === 'cancel') expect(a.settlement).toEqual({ type: 'cancel_authorization', orderId: a.orderId });
      if (a.scenario === 'expire') expect(a.settlement).toBeNull();
    }
    const small = buildWorkload({ orders: 20, duplicates: 0, seed: 1, tag: 'x', authorizations: true });
    expect(small.authorizations.map((a) => a.scenario)).toEqual([...AUTHORIZATION_SCENARIOS]);
  });

  it('is a section of its own, after the Connect orders: the rest of the seed is as without it; each capture or cancel is sent after its order', () => {
    expect(w.orders.slice(0, plain.orders.length)).toEqual(plain.orders);
    expect(w.orders.slice(plain.orders.length)).toEqual(manual);
    expect(w.refunds).toEqual(plain.refunds);
    expect(w.duplicateCharges).toEqual(plain.duplicateCharges);
    expect(plain.steps.filter((s) => s.kind !== 'bad')).toEqual(w.steps.slice(0, plain.steps.length - 3));
    const sent = new Set<string>();
    const settlements: string[] = [];
    for (const step of w.steps) {
      if (step.kind === 'orders') for (const r of step.requests) sent.add(r.orderId);
      if (step.kind === 'authorization') {
        expect(sent.has(step.request.orderId)).toBe(true);
        settlements.push(step.request.orderId);
      }
    }
    expect(settlements).toEqual(w.authorizations.filter((a) => a.settlement !== null).map((a) => a.orderId));
    expect(plain.authorizations).toEqual([]);
    expect(buildWorkload({ ...base, authorizations: true })).toEqual(w);
  });
});

describe('parseCliArgs', () => {
  it('has the documented defaults', () => {
    const args = parseCliArgs([]);
    expect(args).toMatchObject({ orders: 500, duplicates: 0.3, refunds: 0.2, duplicateCharges: 2, faults: 'flaky', serve: false, json: false, pollers: 8, batchSize: 10, timeLapse: true, compare: false, fresh: false });
  });
  it('refuses what it cannot mean', () => {
    expect(() => parseCliArgs(['--orders', '-1'])).toThrow(/--orders/);
    expect(() => parseCliArgs(['--faults', 'mild'])).toThrow(/--faults/);
    expect(() => parseCliArgs(['--batch-size', '11'])).toThrow(/--batch-size/);
    expect(() => parseCliArgs(['--refunds', '1.5'])).toThrow(/--refunds/);
    expect(parseCliArgs(['--refunds', '0'])).toMatchObject({ refunds: 0 });
    expect(() => parseCliArgs(['--serve', '--compare-one-at-a-time'])).toThrow(/do not go together/);
    // The live page: with --serve (any free port), or wherever --ui-port is given; actions only on request.
    expect(parseCliArgs([])).toMatchObject({ uiPort: null, allowActions: false });
    expect(parseCliArgs(['--serve'])).toMatchObject({ uiPort: 0, allowActions: false });
    expect(parseCliArgs(['--serve', '--no-ui'])).toMatchObject({ uiPort: null });
    expect(parseCliArgs(['--ui-port', '8080', '--allow-actions'])).toMatchObject({ uiPort: 8080, allowActions: true });
    expect(() => parseCliArgs(['--allow-actions'])).toThrow(/--allow-actions is for the live page/);
    expect(() => parseCliArgs(['--no-ui', '--ui-port', '1'])).toThrow(/--no-ui goes with neither/);
    expect(() => parseCliArgs(['--bogus'])).toThrow();
    expect(parseCliArgs(['-h'])).toBe('help');
  });
});

describe("the demo's authorization validity", () => {
  it('reaches the reconciler through the time-lapse settings (the fake is started with the same), and each capture is sent well inside it', () => {
    const config = loadConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x', ...timeLapseEnvironment(DEMO_TIME_LAPSE) });
    expect(config.reconcile.authorizationExpiry).toEqual({ validityMs: DEMO_TIME_LAPSE.authorizationValidityMs, lookMarginMs: DEMO_TIME_LAPSE.authorizationLookMarginMs });
    // Without the settings: Stripe's 7 days and the 10-minute margin.
    expect(loadConfig({ DATABASE_URL: 'postgres://x@127.0.0.1/x' }).reconcile.authorizationExpiry).toEqual({ validityMs: 7 * 24 * 3_600_000, lookMarginMs: 600_000 });
    // A capture goes right behind its charge: the validity outlasts a charge's worst case (a timeout and its retry).
    expect(DEMO_TIME_LAPSE.authorizationValidityMs!).toBeGreaterThan(leaseMsFor(DEMO_TIME_LAPSE));
  });
});

describe.each([
  ['the demo', DEMO_TIME_LAPSE],
  ['the end-to-end tests', TEST_TIME_LAPSE],
] as [string, TimeLapse][])('the compressed clock of %s', (_, t) => {
  it('keeps the real order: search lag < early search < key window < key pruning', () => {
    expect(t.searchLagMs).toBeLessThan(t.earlySearchAfterMs);
    expect(t.earlySearchAfterMs).toBeLessThan(t.keyWindowMs);
    // A create allowed at the end of the window may still go out until its lease ends.
    expect(keyPruneAfterMsFor(t)).toBeGreaterThan(t.keyWindowMs + leaseMsFor(t));
  });

  it('is a configuration the handlers accept (the lease outlasts the worst-case call)', () => {
    expect(() =>
      loadConfig({
        DATABASE_URL: 'postgres://x@127.0.0.1/x',
        KEY_WINDOW_MS: String(t.keyWindowMs),
        EARLY_SEARCH_AFTER_MS: String(t.earlySearchAfterMs),
        LEASE_MS: String(leaseMsFor(t)),
        STRIPE_TIMEOUT_MS: String(t.stripeTimeoutMs),
        STRIPE_MAX_NETWORK_RETRIES: String(t.stripeMaxNetworkRetries),
        UNSETTLED_REVIEW_AFTER_MS: String(t.unsettledReviewAfterMs),
        LIST_SETTLE_MS: String(evidenceTimingsFor(t).listSettleMs),
        ABSENCE_PROOF_SPACING_MS: String(evidenceTimingsFor(t).proofSpacingMs),
        REISSUE_AFTER_LAST_SEND_MS: String(evidenceTimingsFor(t).reissueAfterLastSendMs),
        LIST_WINDOW_MARGIN_MS: '1000',
        STRIPE_CLOCK_SKEW_MS: '1000',
        REISSUE_WATCH_FIRST_AFTER_MS: String(watchTimingsFor(t).watchFirstAfterMs),
        REISSUE_WATCH_FINAL_AFTER_MS: String(watchTimingsFor(t).watchFinalAfterFirstSendMs),
      }),
    ).not.toThrow();
  });
});

it('says what the time-lapse stands for', () => {
  expect(describeTimeLapse(DEMO_TIME_LAPSE)).toBe("time-lapse: 23 h key window shown as 20 s, Stripe's ≥ 24 h key pruning as 39 s");
});
