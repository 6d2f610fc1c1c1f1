// Events whose signature (or door) proves only that Stripe delivered them — not that their object is
// ours — through the REAL stripe-events Lambda: over HTTP for the webhook door (the fake Stripe's
// dispatcher signs and POSTs to a Function-URL stand-in in front of the unchanged handler,
// local/stripe-events.ts), invoked as EventBridge invokes it for the partner-bus door. A Connect
// endpoint's event of another account, an event of the other mode, and an event through the
// EventBridge door whose object our key does not confirm: none changes an operation, each is a
// finding; the genuine event still settles the operation within its apply, after one retrieve.
import { describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { inboxGauges } from '../../lambdas/payments/inbox-store.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import type { Operation } from '../../lambdas/payments/types.ts';
import { makeStripeEvent, paymentIntentJson, type EventOrigin, type StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';
import { chargeOrder } from '../support/orders.ts';
import { createStripeClient, StripeGateway } from '../../lambdas/payments/stripe-gateway.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { useHandlerHarness, type HandlerHarness } from './handler-harness.ts';
import { count, delivery, inboxRow, testApplier, WEBHOOK_SETTINGS } from './support.ts';

const LIVE_KEY = 'sk_live_origin_test_key';
let h: HandlerHarness;
let db: HandlerHarness['db'];
let stripe: HandlerHarness['stripe'];
// The fake takes our test key and a live one (the fake has one ledger; its answers do not depend on the mode).
useHandlerHarness('event_origin', (ready) => ({ db, stripe } = h = ready), { apiKeys: ['sk_test_engine', LIVE_KEY] });

const engine = () => new ChargeEngine({ db: db.pool, gateway: stripe.gateway, actor: 'test', random: () => 0.5 });
const piOf = (operationId: string) => stripe.fake.paymentIntents({ operationId })[0]!;
const outbox = (id: string) => db.pool.query('SELECT event_type FROM outcome_events WHERE operation_id = $1 ORDER BY created_at', [id]).then((r) => r.rows.map((e) => e.event_type as string));
const findings = (eventId: string) =>
  db.pool.query('SELECT kind, operation_id, payment_intent_id, status, resolved_at FROM stripe_event_findings WHERE event_id = $1', [eventId]).then((r) => r.rows);
const lastAudit = (id: string) => db.pool.query('SELECT action, detail FROM payment_operation_events WHERE operation_id = $1 ORDER BY id DESC LIMIT 1', [id]).then((r) => r.rows[0]);
const requests = () => stripe.fake.requests().length;

/** An operation whose PaymentIntent Stripe left `processing`: open (unknown), holding its pi_…. */
async function processingOperation(): Promise<{ op: Operation; pi: PaymentIntentRecord }> {
  stripe.fake.injectFault({}, 'processing');
  const [r] = await engine().processRequests([chargeOrder()]);
  const op = (await findOperation(db.pool, r!.operationId))!;
  expect(op).toMatchObject({ status: 'unknown' });
  return { op, pi: piOf(op.id) };
}

/** An operation whose create Stripe answered 500 before executing it: open (unknown), no PaymentIntent. */
async function unansweredOperation(): Promise<Operation> {
  stripe.fake.injectFault({ endpoint: 'create' }, 'error_500_before_commit');
  const [r] = await engine().processRequests([chargeOrder()]);
  const op = (await findOperation(db.pool, r!.operationId))!;
  expect(op).toMatchObject({ status: 'unknown', externalId: null });
  return op;
}

const sendOverHttp = (type: string, object: Record<string, unknown>, origin: EventOrigin) => h.sendOverHttp(type, object, origin);
const sendThroughEventBridge = (event: StripeEventJson) => h.sendThroughEventBridge(event);

/** Nothing happened to the operation: its state, its outbox, no lease left behind. */
async function expectUntouched(op: Operation) {
  expect(await findOperation(db.pool, op.id)).toMatchObject({ status: op.status, externalId: op.externalId, reviewReason: null, leaseToken: null, keyGeneration: op.keyGeneration });
  expect(await outbox(op.id)).toEqual([]);
}

describe('the webhook door (signed, over HTTP): an event of another account or of the other mode is refused whole', () => {
  it("a Connect endpoint's payment_intent.succeeded from a connected account, naming our operation and amount → foreign_account: a finding, an audit line, no Stripe call, no state change", async () => {
    const { op, pi } = await processingOperation();
    const before = requests();
    const forged = await sendOverHttp('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { account: 'acct_1ConnectedElsewhere' });
    expect(forged.account).toBe('acct_1ConnectedElsewhere');
    expect(requests()).toBe(before);
    await expectUntouched(op);
    expect(await inboxRow(db.pool, forged.id)).toMatchObject({ outcome: 'foreign_account', operation_id: op.id, source: 'webhook' });
    expect(await findings(forged.id)).toEqual([{ kind: 'foreign_account', operation_id: op.id, payment_intent_id: pi.id, status: 'succeeded', resolved_at: null }]);
    expect(await lastAudit(op.id)).toMatchObject({ action: 'stripe_event', detail: { refused: 'foreign_account', account: 'acct_1ConnectedElsewhere', stripeEventId: forged.id } });
    expect(await inboxGauges(db.pool)).toMatchObject({ openRefusedEvents: 1, openContradictions: 0 });

    // The genuine event of the same change (this account, test mode) still settles it within its apply: one retrieve.
    stripe.fake.settle(pi.id, 'succeeded');
    const genuineBefore = requests();
    const genuine = await sendOverHttp('payment_intent.succeeded', paymentIntentJson(piOf(op.id)), {});
    expect(stripe.fake.requests().slice(genuineBefore).map((q) => q.endpoint)).toEqual(['retrieve']);
    expect(await inboxRow(db.pool, genuine.id)).toMatchObject({ outcome: 'settled' });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded', externalId: pi.id });
    expect(await outbox(op.id)).toEqual(['Charge Succeeded']);
  });

  it('a live-mode event while our key is test → livemode_mismatch, no state change', async () => {
    const { op, pi } = await processingOperation();
    const before = requests();
    const forged = await sendOverHttp('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { livemode: true });
    expect(forged.livemode).toBe(true);
    expect(requests()).toBe(before);
    await expectUntouched(op);
    expect(await inboxRow(db.pool, forged.id)).toMatchObject({ outcome: 'livemode_mismatch', operation_id: op.id });
    expect(await findings(forged.id)).toEqual([{ kind: 'livemode_mismatch', operation_id: op.id, payment_intent_id: pi.id, status: 'succeeded', resolved_at: null }]);
  });

  it('a test-mode event while our key is live → livemode_mismatch; a live one is ours and settles after one retrieve with the live key', async () => {
    // A live key is never sent anywhere but api.stripe.com (config.ts refuses STRIPE_API_BASE with
    // one), so the handler cannot run live against the fake: the applier is given a gateway whose key
    // mode is live, calling the fake (whose answers do not depend on the mode), and the signed
    // deliveries go through the same webhook path the handler runs (receiveWebhook).
    const { op, pi } = await processingOperation();
    const live = new StripeGateway(createStripeClient({ apiKey: LIVE_KEY, apiBase: stripe.fake.url, timeoutMs: 2_000, maxNetworkRetries: 0 }), { keyMode: 'live' });
    const world = { db, stripe };
    const deliver = (event: StripeEventJson) => receiveWebhook(delivery(event), WEBHOOK_SETTINGS, { db: db.pool, applier: testApplier(world, { gateway: live }), publisher: null });
    const forged = { ...makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }), livemode: false };
    await deliver(forged);
    await expectUntouched(op);
    expect(await inboxRow(db.pool, forged.id)).toMatchObject({ outcome: 'livemode_mismatch' });
    expect(await findings(forged.id)).toMatchObject([{ kind: 'livemode_mismatch', operation_id: op.id }]);

    stripe.fake.settle(pi.id, 'succeeded');
    const before = requests();
    const genuine = { ...makeStripeEvent('payment_intent.succeeded', paymentIntentJson(piOf(op.id))), livemode: true };
    await deliver(genuine);
    expect(stripe.fake.requests().slice(before).map((q) => q.endpoint)).toEqual(['retrieve']);
    expect(await inboxRow(db.pool, genuine.id)).toMatchObject({ outcome: 'settled' });
    expect(await findOperation(db.pool, op.id)).toMatchObject({ status: 'succeeded' });
  });

  it('a charge.refunded of a connected account is refused too: no Charge Refunded fact is published', async () => {
    const [r] = await engine().processRequests([chargeOrder({ amount: 3000 })]);
    const op = (await findOperation(db.pool, r!.operationId))!;
    const charge = { id: `ch_${op.externalId!.slice(3)}`, object: 'charge', amount: 3000, amount_refunded: 3000, currency: op.currency, payment_intent: op.externalId, metadata: {} };
    const forged = await sendOverHttp('charge.refunded', charge, { account: 'acct_1ConnectedElsewhere' });
    expect(await inboxRow(db.pool, forged.id)).toMatchObject({ outcome: 'foreign_account' });
    expect(await outbox(op.id)).toEqual(['Charge Succeeded']);
  });
});

describe('the EventBridge door (no signature): the object is retrieved with our key before anything changes', () => {
  it('a PaymentIntent Stripe does not know (404), naming an open operation and its amount → unconfirmed: a finding, one retrieve, no state change', async () => {
    const op = await unansweredOperation();
    const object = { id: 'pi_3ForgedNeverMade', object: 'payment_intent', status: 'succeeded', amount: op.amount, currency: op.currency, customer: op.customerId, metadata: { operation_id: op.id, order_id: op.orderId, key_generation: '0' } };
    const event = makeStripeEvent('payment_intent.succeeded', object);
    const before = requests();
    await sendThroughEventBridge(event);
    expect(stripe.fake.requests().slice(before).map((q) => [q.endpoint, q.paymentIntentId, q.status])).toEqual([['retrieve', 'pi_3ForgedNeverMade', 404]]);
    await expectUntouched(op);
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'unconfirmed', source: 'eventbridge', operation_id: op.id });
    expect(await findings(event.id)).toEqual([{ kind: 'unconfirmed', operation_id: op.id, payment_intent_id: 'pi_3ForgedNeverMade', status: 'succeeded', resolved_at: null }]);
    expect(await lastAudit(op.id)).toMatchObject({ action: 'stripe_event', detail: { unconfirmed: expect.stringMatching(/does not know it/) } });
  });

  it('our own PaymentIntent, but a snapshot saying succeeded (or canceled) while Stripe holds it processing → unconfirmed, the operation stays open', async () => {
    const { op, pi } = await processingOperation();
    for (const [type, status] of [['payment_intent.succeeded', 'succeeded'], ['payment_intent.canceled', 'canceled']] as const) {
      const event = makeStripeEvent(type, { ...paymentIntentJson(pi), status });
      await sendThroughEventBridge(event);
      expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'unconfirmed' });
      await expectUntouched(op);
    }
    expect(await count(db.pool, `stripe_event_findings WHERE kind = 'unconfirmed' AND payment_intent_id = $1`, [pi.id])).toBe(1);
  });

  it("another operation's real PaymentIntent presented as this operation's → unconfirmed (not ours): neither operation changes", async () => {
    const open = await unansweredOperation();
    const [paid] = await engine().processRequests([chargeOrder({ amount: open.amount, currency: open.currency, customerId: open.customerId })]);
    const other = (await findOperation(db.pool, paid!.operationId))!;
    expect(other.status).toBe('succeeded');
    const stolen = { ...paymentIntentJson(piOf(other.id)), metadata: { operation_id: open.id, order_id: open.orderId, key_generation: '0' } };
    const event = makeStripeEvent('payment_intent.succeeded', stolen);
    await sendThroughEventBridge(event);
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'unconfirmed' });
    await expectUntouched(open);
    expect(await findOperation(db.pool, other.id)).toMatchObject({ status: 'succeeded', externalId: other.externalId });
    expect((await findings(event.id))[0]).toMatchObject({ kind: 'unconfirmed', operation_id: open.id, payment_intent_id: other.externalId });
  });

  it('an event with an account through the EventBridge door → foreign_account, no call', async () => {
    const { op, pi } = await processingOperation();
    const event = makeStripeEvent('payment_intent.succeeded', { ...paymentIntentJson(pi), status: 'succeeded' }, { account: 'acct_1ConnectedElsewhere' });
    const before = requests();
    await sendThroughEventBridge(event);
    expect(requests()).toBe(before);
    expect(await inboxRow(db.pool, event.id)).toMatchObject({ outcome: 'foreign_account', source: 'eventbridge' });
    await expectUntouched(op);
  });
});
