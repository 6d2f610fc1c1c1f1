// The run's last screen answers "did it work?": a verdict line (PASS with the invariants, or FAIL
// naming what broke), progress counts that say which are charges and which refunds (the charges'
// denominator does not grow as refunds join), and a Stripe request row that adds up.
import { describe, expect, it } from 'vitest';
import { verdictLine, type Ledger } from '../../local/ledger.ts';
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
    expect((r.create ?? 0) + (r.retrieve ?? 0) + (r.search ?? 0) + (r.list ?? 0) + (r.refunds ?? 0)).toBe(r.total);
    expect(r.refunds).toBeGreaterThan(0);
  }, 120_000);
});
