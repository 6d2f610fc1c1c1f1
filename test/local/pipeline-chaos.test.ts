// End to end, fault profile 'chaos': producer client → fauxqs → event source → the real charge handler →
// PostgreSQL 18 → fake Stripe; the real reconcile handler on a schedule; outbox → fake EventBridge.
import { describe, expect, it } from 'vitest';
import { expectConnectKept, expectPromiseKept, runProfile } from './support.ts';

describe("the local pipeline under the 'chaos' fault profile", () => {
  it('charges every order at most once, loses none, and settles or reviews every operation; every Connect object on its account', async () => {
    // One order charged a second time behind the pipeline's back: refunded by the product itself.
    // The demo's Connect orders too: the faults meet charges made as a connected account.
    const run = await runProfile('chaos', { duplicateCharges: 1, connect: true });
    expectPromiseKept(run);
    expectConnectKept(run);
    expect(run.ledger.operations.total).toBe(66);
    // One finding for the charge made behind its back; any other names a late charge of the product's
    // own (a create Stripe committed after the re-issue it allowed), which its remedy refunded in full.
    const extra = Object.values(run.send?.duplicateCharges ?? {});
    expect(extra).toHaveLength(1);
    const lateRefunded = (id: string) => {
      const pi = run.paymentIntents.find((p) => p.id === id);
      return pi?.idempotencyKey?.startsWith('payment-op:') === true && run.refunds.some((r) => r.payment_intent === id && r.reason === 'duplicate' && r.status === 'succeeded' && r.amount === pi.amount);
    };
    expect(run.findings.filter((f) => f.payment_intent_id === extra[0]).map((f) => f.kind)).toEqual(['contradiction']);
    expect(run.findings.filter((f) => f.payment_intent_id !== extra[0] && !(f.kind === 'contradiction' && lateRefunded(f.payment_intent_id)))).toEqual([]);
  }, 110_000);
});
