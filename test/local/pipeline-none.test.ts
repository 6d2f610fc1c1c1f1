// End to end, fault profile 'none': producer client → fauxqs → event source → the real charge handler →
// PostgreSQL 18 → fake Stripe; the real reconcile handler on a schedule; outbox → fake EventBridge.
import { describe, expect, it } from 'vitest';
import { expectPromiseKept, runProfile } from './support.ts';

describe("the local pipeline under the 'none' fault profile", () => {
  it('charges every order at most once, loses none, and settles or reviews every operation', async () => {
    // One order charged a second time behind the pipeline's back: refunded by the product itself.
    const run = await runProfile('none', { duplicateCharges: 1 });
    expectPromiseKept(run);
    expect(run.ledger.operations.total).toBe(60);
    expect(run.ledger.stripeEvents?.findings).toEqual({ contradiction: 1 });
  }, 110_000);
});
