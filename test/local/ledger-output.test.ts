// The run's last screen answers "did it work?": a verdict line (PASS with the invariants, or FAIL
// naming what broke), progress counts that say which are charges and which refunds (the charges'
// denominator does not grow as refunds join), a Stripe request row that adds up, and a scenario label that never
// contradicts its row.
import { describe, expect, it } from 'vitest';
import { scenarioLabel, verdictLine, type Ledger } from '../../local/ledger.ts';
import type { RecordedRefund, RefundedOrder } from '../../local/refund-ledger.ts';
import type { PipelineSnapshot } from '../../local/pipeline.ts';
import { createProgressView } from '../../local/progress.ts';
import { runProfile } from './support.ts';

function snapshot(database: Partial<PipelineSnapshot['database']>): PipelineSnapshot {
  return {
    at: new Date(10_000),
    database: { operations: 0, succeeded: 0, failed: 0, refunds: 0, refundsSettled: 0, refundsSucceeded: 0, open: 0, pending: 0, ambiguous: 0, unsettled: 0, inReview: 0, rejected: 0, outboxEvents: 0, unpublished: 0, lastSettledAt: null, ...database },
    eventSource: { records: 0, redeliveries: 0 },
    stripe: null,
    eventsAccepted: 0,
    schedule: { runs: 0 },
  } as unknown as PipelineSnapshot;
}

describe('the live progress line', () => {
  it('counts charges and refunds apart: 3 charges of 3 orders and 1 refund are 4/4, not a denominator that grew', () => {
    const lines: string[] = [];
    const view = createProgressView({ title: 't' }, { write: (s) => lines.push(s), tty: false, startedAt: new Date(0), plainEveryMs: 0 });
    const send = { done: true, ordersSent: 3, ordersPlanned: 3, duplicateSends: 0 } as unknown as Parameters<typeof view.update>[1];
    view.update(snapshot({ operations: 4, succeeded: 4, refunds: 1, refundsSettled: 1, refundsSucceeded: 1 }), send);
    const line = lines.at(-1)!;
    expect(line).toContain('settled 4/4 (charges 3/3, refunds 1/1)');
    expect(line).toContain('succeeded 4 (1 refunds)');
    expect(line).toContain('open 0');
  });
});

describe('the ledger of a run', () => {
  it('ends with PASS and the invariants; FAIL names what broke; the Stripe request row adds up', async () => {
    const run = await runProfile('flaky', { orders: 20, seed: 3, webhooks: null });
    const ledger = run.ledger;
    expect(verdictLine(ledger)).toMatch(/^PASS — double charges 0 · lost orders 0 · net amount off 0 · over-refunds 0 · unrecorded refunds 0 · \d+ invariants checked; every accepted order and refund settled or in review$/);
    const broken: Ledger = { ...ledger, invariants: { ...ledger.invariants, ok: false, violationsByKind: { double_charge: 1, net_amount: 2 } } };
    expect(verdictLine(broken)).toBe('FAIL — double charge 1 · net amount 2 (see Invariants above)');
    const late: Ledger = { ...ledger, run: { ...ledger.run, outcome: 'timeout' } };
    expect(verdictLine(late)).toMatch(/^FAIL — not settled before the timeout/);
    const r = ledger.stripe.requests!;
    expect((r.create ?? 0) + (r.retrieve ?? 0) + (r.search ?? 0) + (r.list ?? 0) + (r.refunds ?? 0) + (r.capture ?? 0) + (r.cancel ?? 0)).toBe(r.total);
    expect(r.refunds).toBeGreaterThan(0);
  }, 120_000);
});

describe('a scenario label on the ledger', () => {
  const order = (over: Partial<RefundedOrder>): RefundedOrder => ({
    orderId: 'o-1',
    scenario: 'full',
    charge: { status: 'succeeded', amount: 1000, currency: 'usd' },
    recorded: [],
    rejected: [],
    atStripe: [],
    net: 0,
    expectedNet: 0,
    verdict: 'ok',
    ...over,
  });
  const refund = (over: Partial<RecordedRefund>): RecordedRefund => ({
    operationId: 'op', refundId: 'o-1-r1', amount: 1000, status: 'succeeded', externalId: 're_1', reviewReason: null, errorCode: null, waited: false, remedyOf: null, ...over,
  });

  it('is the bare scenario when the row shows it played out', () => {
    expect(scenarioLabel(order({ recorded: [refund({})] }))).toBe('full');
    expect(scenarioLabel(order({ scenario: 'before_final', recorded: [refund({ waited: true })] }))).toBe('before_final');
    expect(scenarioLabel(order({ scenario: 'conflict', recorded: [refund({})], rejected: [{ code: 'refund_conflict', refundId: 'o-1-r1', amount: 1 }] }))).toBe('conflict');
    expect(scenarioLabel(order({ scenario: 'failed_charge', charge: { status: 'failed', amount: 1000, currency: 'usd' } }))).toBe('failed_charge');
    expect(scenarioLabel(order({ scenario: null }))).toBe('not the demo');
  });

  it('says what happened instead when the row departs from the plan', () => {
    expect(scenarioLabel(order({ charge: { status: 'failed', amount: 1000, currency: 'usd' }, rejected: [{ code: 'charge_failed', refundId: 'o-1-r1', amount: 1000 }] })))
      .toBe('full, but the charge failed, so nothing was refunded');
    expect(scenarioLabel(order({ scenario: 'before_final', recorded: [refund({ waited: false })] }))).toBe('before_final, but the charge was final first: nothing waited');
    expect(scenarioLabel(order({ scenario: 'conflict', recorded: [refund({})] }))).toBe('conflict, but no conflict was recorded');
    expect(scenarioLabel(order({ scenario: 'over_refund' }))).toBe('over_refund, but it was not rejected');
    expect(scenarioLabel(order({ scenario: 'duplicate_charge', recorded: [refund({})] }))).toBe('duplicate_charge, but no remedy was recorded');
    expect(scenarioLabel(order({ scenario: 'failed_charge' }))).toBe('failed_charge, but the charge succeeded');
    expect(scenarioLabel(order({ scenario: 'partial', recorded: [refund({ status: 'failed' })] }))).toBe('partial, but no refund succeeded');
  });
});
