// End to end with Stripe events on and off: the same workload through the whole local pipeline
// (real handlers, fauxqs, the fake Stripe, the suite's PostgreSQL), once with the fake Stripe's
// signed webhooks — duplicated, delayed, lost and retried, some forged — and once polling only.
// The promise holds both ways; with webhooks, events settle operations and no forgery gets in.
import { describe, expect, it } from 'vitest';
import { DEFAULT_DELIVERY_FAULTS } from '../../local/stripe-events.ts';
import { expectPromiseKept, runProfile } from '../local/support.ts';

describe("the local pipeline under 'chaos', Stripe events on and off", () => {
  it('with webhooks (every delivery fault on): the promise holds, forged deliveries are refused, every recorded event is applied or waiting', async () => {
    const run = await runProfile('chaos', { seed: 11, webhooks: { faults: { ...DEFAULT_DELIVERY_FAULTS, badSignature: 0.2 }, seed: 5 } });
    expectPromiseKept(run);
    const se = run.ledger.stripeEvents!;
    expect(se.delivery!.forgedSent).toBeGreaterThan(0);
    expect(se.delivery!.forgedAccepted).toBe(0);
    expect(se.rejected).toBe(se.delivery!.forgedRefused);
    expect(se.delivery!.duplicatesSent + se.delivery!.lostAttempts).toBeGreaterThan(0);
    expect(se.received).toBeGreaterThan(0);
    expect(se.applied + se.backlog).toBe(se.received);
    expect(se.applied).toBeGreaterThan(0);
    expect(se.findings).toEqual({});
    // Unrecorded charges and contradictions would be violations of the promise; none here.
    expect(se.appliedByOutcome.contradiction ?? 0).toBe(0);
    expect(se.appliedByOutcome.unrecorded ?? 0).toBe(0);
  }, 120_000);

  it('polling only: the promise holds, nothing is recorded as an event', async () => {
    const run = await runProfile('chaos', { seed: 11, webhooks: null });
    expectPromiseKept(run);
    expect(run.ledger.stripeEvents).toBeNull();
    expect(run.ledger.operations.total).toBe(60);
  }, 120_000);
});
