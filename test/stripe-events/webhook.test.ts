// The webhook door on real PostgreSQL: deliveries signed exactly as Stripe documents (our own HMAC in
// local/fake-stripe/webhooks.ts), verified by the real stripe SDK's webhook helper.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { countingDb } from '../../lambdas/payments/db.ts';
import { makeStripeEvent } from '../../local/fake-stripe/webhooks.ts';
import { receiveWebhook, RejectCode, toHttpAnswer, type Reception } from '../../lambdas/stripe-events/receive.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { count, delivery, inboxRow, SECRET } from './support.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('webhook');
});
afterAll(async () => {
  await db.drop();
});

const settings = { secret: SECRET, maxBodyBytes: 64 * 1024 };
const deps = () => ({ db: db.pool, applier: null, publisher: null });
const someEvent = () => makeStripeEvent('payment_intent.succeeded', { id: 'pi_unrelated', object: 'payment_intent', status: 'succeeded', amount: 100, currency: 'eur', metadata: {} });

function rejected(r: Reception): string {
  expect(r.kind).toBe('rejected');
  return r.kind === 'rejected' ? r.code : '';
}

describe('signature verification (stripe.webhooks.constructEventAsync, default tolerance)', () => {
  it('a valid signature → 200, the event is in the inbox', async () => {
    const event = someEvent();
    const r = await receiveWebhook(delivery(event), settings, deps());
    expect(toHttpAnswer(r)).toMatchObject({ statusCode: 200 });
    const row = await inboxRow(db.pool, event.id);
    expect(row).toMatchObject({ source: 'webhook', applied_at: null });
  });

  it('a base64-encoded body (Function URL) verifies over the decoded raw bytes', async () => {
    const event = someEvent();
    const r = await receiveWebhook(delivery(event, { base64: true }), settings, deps());
    expect(r.kind).toBe('recorded');
  });

  it('a missing signature → 400, nothing written', async () => {
    const event = someEvent();
    const request = { ...delivery(event), headers: { 'content-type': 'application/json' } };
    const r = await receiveWebhook(request, settings, deps());
    expect(rejected(r)).toBe(RejectCode.missingSignature);
    expect(toHttpAnswer(r).statusCode).toBe(400);
    expect(await inboxRow(db.pool, event.id)).toBeUndefined();
  });

  it('a malformed header → 400', async () => {
    const event = someEvent();
    const request = { ...delivery(event), headers: { 'stripe-signature': 'garbage' } };
    expect(rejected(await receiveWebhook(request, settings, deps()))).toBe(RejectCode.malformedSignature);
  });

  it('a tampered body (signed, then one digit changed) → 400, nothing written', async () => {
    const event = someEvent();
    const good = delivery(event);
    const r = await receiveWebhook({ ...good, body: good.body!.replace('"amount": 100', '"amount": 101') }, settings, deps());
    expect(rejected(r)).toBe(RejectCode.signatureMismatch);
    expect(await inboxRow(db.pool, event.id)).toBeUndefined();
  });

  it('signed with another secret → 400', async () => {
    const event = someEvent();
    const r = await receiveWebhook(delivery(event, { secret: 'whsec_someone_else' }), settings, deps());
    expect(rejected(r)).toBe(RejectCode.signatureMismatch);
    expect(await inboxRow(db.pool, event.id)).toBeUndefined();
  });

  it('a stale timestamp (older than the SDK default tolerance of 300 s) → 400; 299 s old is accepted', async () => {
    const event = someEvent();
    const now = Math.floor(Date.now() / 1000);
    expect(rejected(await receiveWebhook(delivery(event, { at: now - 301 }), settings, deps()))).toBe(RejectCode.staleTimestamp);
    expect(await inboxRow(db.pool, event.id)).toBeUndefined();
    expect((await receiveWebhook(delivery(event, { at: now - 290 }), settings, deps())).kind).toBe('recorded');
  });

  it('a body over the size limit → 413 before any parsing', async () => {
    const event = { ...someEvent(), padding: 'x'.repeat(70 * 1024) };
    const r = await receiveWebhook(delivery(event as never), settings, deps());
    expect(rejected(r)).toBe(RejectCode.tooLarge);
    expect(toHttpAnswer(r).statusCode).toBe(413);
  });

  it('correctly signed but not JSON → 400 invalid_json; signed JSON that is no event → 400 not_an_event', async () => {
    const now = Math.floor(Date.now() / 1000);
    const { signStripePayload } = await import('../../local/fake-stripe/webhooks.ts');
    const notJson = 'this is not json';
    expect(rejected(await receiveWebhook({ method: 'POST', body: notJson, headers: { 'stripe-signature': signStripePayload(notJson, SECRET, now) } }, settings, deps()))).toBe(RejectCode.invalidJson);
    const notEvent = JSON.stringify({ hello: 'world' });
    expect(rejected(await receiveWebhook({ method: 'POST', body: notEvent, headers: { 'stripe-signature': signStripePayload(notEvent, SECRET, now) } }, settings, deps()))).toBe(RejectCode.notAnEvent);
  });

  it('no secret configured yet → 503 (Stripe retries), nothing written', async () => {
    const event = someEvent();
    const r = await receiveWebhook(delivery(event), { ...settings, secret: null }, deps());
    expect(toHttpAnswer(r).statusCode).toBe(503);
    expect(await inboxRow(db.pool, event.id)).toBeUndefined();
  });

  it('the database down → 503 (Stripe retries), never 200', async () => {
    const broken = { query: () => Promise.reject(new Error('connect ECONNREFUSED')) };
    const r = await receiveWebhook(delivery(someEvent()), settings, { db: broken as never, applier: null, publisher: null });
    expect(toHttpAnswer(r).statusCode).toBe(503);
  });

  it('a GET → 405', async () => {
    expect(toHttpAnswer(await receiveWebhook({ method: 'GET' }, settings, deps())).statusCode).toBe(405);
  });
});

describe('the inbox', () => {
  it('the same event delivered five times → one row, four duplicates, all answered 200', async () => {
    const event = someEvent();
    const answers = [];
    for (let i = 0; i < 5; i++) answers.push(await receiveWebhook(delivery(event), settings, deps()));
    expect(answers.map((a) => toHttpAnswer(a).statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect(answers.map((a) => a.kind === 'recorded' && a.duplicate)).toEqual([false, true, true, true, true]);
    expect(await count(db.pool, 'stripe_events WHERE event_id = $1', [event.id])).toBe(1);
  });

  it('one round trip per event: the insert is the only statement', async () => {
    const counting = countingDb(db.pool);
    await receiveWebhook(delivery(someEvent()), settings, { db: counting, applier: null, publisher: null });
    expect(counting.roundTrips).toBe(1);
    await receiveWebhook(delivery(someEvent()), settings, { db: counting, applier: null, publisher: null });
    expect(counting.roundTrips).toBe(2);
  });

  it('an inbox row keeps what Stripe sent: its payload cannot change and rows are never deleted', async () => {
    const event = someEvent();
    await receiveWebhook(delivery(event), settings, deps());
    await expect(db.pool.query(`UPDATE stripe_events SET payload = '{}' WHERE event_id = $1`, [event.id])).rejects.toThrow(/cannot change/);
    await expect(db.pool.query(`DELETE FROM stripe_events WHERE event_id = $1`, [event.id])).rejects.toThrow(/never deleted/);
  });
});
