// End to end, fault profile 'none': producer client → fauxqs → event source → the real charge handler →
// PostgreSQL 18 → fake Stripe; the real reconcile handler on a schedule; outbox → fake EventBridge.
import { describe, expect, it } from 'vitest';
import { expectAuthorizationsKept, expectConnectKept, expectPromiseKept, runProfile } from './support.ts';

describe("the local pipeline under the 'none' fault profile", () => {
  it('charges every order at most once, loses none, and settles or reviews every operation; every Connect object on its account; every authorization captured, canceled or expired as sent', async () => {
    // One order charged a second time behind the pipeline's back: refunded by the product itself.
    // With `npm start`'s Connect orders: two direct charges on each of two accounts (one with a fee,
    // one without), a destination charge to each, a refund of each account's first direct charge.
    // And `npm start`'s authorizations: one captured in full, one in part, one canceled, one left to
    // expire (the time-lapse's 10 s), each judged on the fake's record.
    const run = await runProfile('none', { duplicateCharges: 1, connect: true, authorizations: true });
    expectPromiseKept(run);
    expectConnectKept(run);
    expectAuthorizationsKept(run);
    expect(run.ledger.authorizations).toMatchObject({ captured: 2, canceled: 1, expired: 1, held: 0, disagreements: 0 });
    expect(run.ledger.operations.total).toBe(70);
    expect(run.ledger.stripeEvents?.findings).toEqual({ contradiction: 1 });
    expect(run.ledger.invariants.checked).toEqual(expect.arrayContaining(['every object on the right account', 'authorizations told truly']));
  }, 110_000);
});
