// End to end, fault profile 'none': producer client → fauxqs → event source → the real charge handler →
// PostgreSQL 18 → fake Stripe; the real reconcile handler on a schedule; outbox → fake EventBridge.
import { describe, expect, it } from 'vitest';
import { expectConnectKept, expectPromiseKept, runProfile } from './support.ts';

describe("the local pipeline under the 'none' fault profile", () => {
  it('charges every order at most once, loses none, and settles or reviews every operation; every Connect object on its account', async () => {
    // One order charged a second time behind the pipeline's back: refunded by the product itself.
    // With `npm start`'s Connect orders: two direct charges on each of two accounts (one with a fee,
    // one without), a destination charge to each, a refund of each account's first direct charge.
    const run = await runProfile('none', { duplicateCharges: 1, connect: true });
    expectPromiseKept(run);
    expectConnectKept(run);
    expect(run.ledger.operations.total).toBe(66);
    expect(run.ledger.stripeEvents?.findings).toEqual({ contradiction: 1 });
    expect(run.ledger.invariants.checked).toContain('every object on the right account');
  }, 110_000);
});
