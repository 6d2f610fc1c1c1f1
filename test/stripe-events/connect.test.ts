// Events of connected accounts (docs/events.md, docs/model.md#connected-accounts), through the real
// webhook path on real PostgreSQL and the real stripe SDK against the fake Stripe, whose events of a
// connected account's objects carry the top-level `account`. An event with `account` is taken only
// from an account the pipeline has an operation on (or that the setting lists), applied only to an
// operation of that account, and confirmed by a retrieve made AS that account; any other is refused
// as foreign_account.
import { beforeEach, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { judgeEventAccount } from '../../lambdas/payments/event-decisions.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import type { ChargeInput, Operation } from '../../lambdas/payments/types.ts';
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import { makeStripeEvent, paymentIntentJson, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import type { TestDatabase } from '../support/db.ts';
import { chargeOrderOfItsOwnCustomer } from '../support/orders.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { useWorld } from '../support/world.ts';
import { delivery, inboxRow, testApplier, WEBHOOK_SETTINGS } from './support.ts';

const A = 'acct_1EventsAlpha';
const B = 'acct_1EventsBravo';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('connect_events', (w) => ({ db, stripe } = w));
beforeEach(() => {
  stripe.fake.addConnectedAccount(A);
  stripe.fake.addConnectedAccount(B);
});

const engine = () => new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
const findings = (eventId: string) => db.pool.query('SELECT kind, operation_id FROM stripe_event_findings WHERE event_id = $1', [eventId]).then((r) => r.rows);

/** An operation whose PaymentIntent Stripe left `processing` (open, unknown), on `account` (undefined: the platform). */
async function processingOperation(overrides: Partial<ChargeInput> = {}): Promise<{ op: Operation; pi: PaymentIntentRecord }> {
  stripe.fake.injectFault({}, 'processing');
  const [r] = await engine().processRequests([chargeOrderOfItsOwnCustomer(overrides)]);
  const op = (await findOperation(db.pool, r!.operationId))!;
  expect(op).toMatchObject({ status: 'unknown' });
  const pi = stripe.fake.paymentIntents({ operationId: op.id })[0]!;
  return { op, pi };
}

/** The event signed and delivered to the real webhook path, applied inline by an applier with `connectedAccounts`. */
async function deliver(event: StripeEventJson, connectedAccounts: readonly string[] = []) {
  await receiveWebhook(delivery(event), WEBHOOK_SETTINGS, { db: db.pool, applier: testApplier({ db, stripe }, { connectedAccounts }), publisher: null });
  return inboxRow(db.pool, event.id);
}

const succeeded = (pi: PaymentIntentRecord, account: string | null) =>
  makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { account });

async function expectUntouched(op: Operation) {
  expect(await findOperation(db.pool, op.id)).toMatchObject({ status: op.status, externalId: op.externalId, reviewReason: null, leaseToken: null });
}

describe('an event of a connected account the pipeline has an operation on', () => {
  it('is applied to that account\'s operation, confirmed by a retrieve made as the account', async () => {
    const { op, pi } = await processingOperation({ account: A });
    expect(pi.stripeAccount).toBe(A);
    stripe.fake.settle(pi.id, 'succeeded');
    const before = stripe.fake.requests().length;
    const row = await deliver(succeeded(stripe.fake.paymentIntents({ operationId: op.id })[0]!, A));
    expect(stripe.fake.requests().slice(before).map((q) => [q.endpoint, q.account])).toEqual([['retrieve', A]]);
    expect(row).toMatchObject({ outcome: 'settled', operation_id: op.id });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: pi.id });
  });

  it('naming a PaymentIntent of a platform operation: refused foreign_account, no Stripe call, nothing changes', async () => {
    await processingOperation({ account: A }); // the pipeline has an operation on A: A's events are taken
    const { op, pi } = await processingOperation();
    const before = stripe.fake.requests().length;
    const event = succeeded(pi, A);
    expect(await deliver(event)).toMatchObject({ outcome: 'foreign_account', operation_id: op.id });
    expect(await findings(event.id)).toEqual([{ kind: 'foreign_account', operation_id: op.id }]);
    expect(stripe.fake.requests().length).toBe(before);
    await expectUntouched(op);
  });

  it('naming an operation of another connected account: refused foreign_account', async () => {
    const { op, pi } = await processingOperation({ account: A });
    await processingOperation({ account: B });
    const before = stripe.fake.requests().length;
    const event = succeeded(pi, B);
    expect(await deliver(event)).toMatchObject({ outcome: 'foreign_account', operation_id: op.id });
    expect(await findings(event.id)).toEqual([{ kind: 'foreign_account', operation_id: op.id }]);
    expect(stripe.fake.requests().length).toBe(before);
    await expectUntouched(op);
  });

  it('a platform event naming an operation on a connected account: refused foreign_account', async () => {
    const { op, pi } = await processingOperation({ account: A });
    const event = succeeded(pi, null);
    expect(await deliver(event)).toMatchObject({ outcome: 'foreign_account', operation_id: op.id });
    await expectUntouched(op);
  });
});

describe('an event of any other connected account', () => {
  it('is refused as foreign_account whatever it names, unless the setting lists the account', async () => {
    const { op, pi } = await processingOperation({ account: A });
    const stranger = 'acct_1NeverSeen';
    const event = succeeded(pi, stranger);
    expect(await deliver(event)).toMatchObject({ outcome: 'foreign_account', operation_id: op.id });
    expect(await findings(event.id)).toEqual([{ kind: 'foreign_account', operation_id: op.id }]);
    await expectUntouched(op);

    // Listed, its events are taken — an event naming nothing of ours is then judged on what it names
    // (no operation id: not ours), and one naming A's operation is still refused: it is not B's.
    const unrelated = makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), id: 'pi_1NotOurs', metadata: {} }, { account: B });
    expect(await deliver(unrelated, [B])).toMatchObject({ outcome: 'foreign' });
    expect(await deliver(succeeded(pi, B), [B])).toMatchObject({ outcome: 'foreign_account', operation_id: op.id });
    await expectUntouched(op);
  });
});

describe('judgeEventAccount', () => {
  const op = (account?: string) => ({ id: 'op-1', ...(account ? { account } : {}) });
  it('the same account (or both the platform) is the operation\'s; any other pairing is not', () => {
    expect(judgeEventAccount({ account: null }, op())).toBeNull();
    expect(judgeEventAccount({ account: A }, op(A))).toBeNull();
    expect(judgeEventAccount({ account: A }, op())).toMatch(/comes from connected account acct_1EventsAlpha.*on the platform/);
    expect(judgeEventAccount({ account: B }, op(A))).toMatch(/on connected account acct_1EventsAlpha/);
    expect(judgeEventAccount({ account: null }, op(A))).toMatch(/a platform event/);
  });
});
