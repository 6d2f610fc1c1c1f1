// Minimized at the door: what the inbox stores of a Stripe event is the list in docs/architecture.md
// ("What the inbox keeps of an event") — by the webhook door and by the EventBridge door alike — and
// never the personal data a whole object carries (billing and shipping details, receipt e-mail,
// card details, descriptions, a producer's own metadata).
import Stripe from 'stripe';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { minimizeStripeEvent, readStripeEvent } from '../../lambdas/payments/event-decisions.ts';
import { receivePartnerEvent, receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('minimize');
});
afterAll(async () => {
  await db.drop();
});

const PERSONAL = ['jane@example.com', 'Jane Doe', '1 Main St', '4242', 'Order for Jane', 'loyalty-123', 'ch_latest', 'Berlin'];

/** A payment_intent.succeeded as Stripe renders one, with what a real PaymentIntent carries beside what we read. */
function wholeEvent(id: string) {
  return {
    id,
    object: 'event',
    api_version: '2026-10-28.endive',
    created: 1_780_000_000,
    livemode: false,
    pending_webhooks: 1,
    request: { id: 'req_123', idempotency_key: 'payment-op:x' },
    type: 'payment_intent.succeeded',
    data: {
      object: {
        id: 'pi_whole',
        object: 'payment_intent',
        amount: 1999,
        amount_received: 1999,
        currency: 'eur',
        status: 'succeeded',
        customer: { id: 'cus_whole', object: 'customer', email: 'jane@example.com', name: 'Jane Doe' },
        description: 'Order for Jane Doe',
        receipt_email: 'jane@example.com',
        shipping: { name: 'Jane Doe', address: { line1: '1 Main St', city: 'Berlin' } },
        latest_charge: 'ch_latest',
        payment_method: { id: 'pm_1', billing_details: { name: 'Jane Doe', email: 'jane@example.com' }, card: { last4: '4242', brand: 'visa' } },
        metadata: { operation_id: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', order_id: 'order-1', key_generation: '0', loyalty_id: 'loyalty-123' },
      },
      previous_attributes: { status: 'processing', receipt_email: null },
    },
  };
}

const KEPT = {
  id: 'evt_kept',
  object: 'event',
  type: 'payment_intent.succeeded',
  created: 1_780_000_000,
  api_version: '2026-10-28.endive',
  livemode: false,
  data: {
    object: {
      id: 'pi_whole', object: 'payment_intent', status: 'succeeded', amount: 1999, currency: 'eur', customer: 'cus_whole',
      metadata: { operation_id: '0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b', order_id: 'order-1', key_generation: '0' },
    },
    previous_attributes: {},
  },
};

describe('what the inbox keeps of an event', () => {
  it('is exactly the fields the applier reads, an expanded object as its id, and it is idempotent', () => {
    const minimized = minimizeStripeEvent(wholeEvent('evt_kept'));
    expect(minimized).toEqual(KEPT);
    expect(minimizeStripeEvent(minimized)).toEqual(minimized);
    const read = readStripeEvent(wholeEvent('evt_kept'));
    expect(read.ok && read.event.payload).toEqual(KEPT);
  });

  it('keeps what a refund, a charge.refunded and a dispute are read by', () => {
    const refund = minimizeStripeEvent({ id: 'evt_r', type: 'refund.failed', created: 1, data: { object: { id: 're_1', object: 'refund', status: 'failed', amount: 500, currency: 'eur', payment_intent: 'pi_1', failure_reason: 'expired_or_canceled_card', metadata: { operation_id: 'x', note: 'Jane' } } } });
    expect(refund.data).toEqual({ object: { id: 're_1', object: 'refund', status: 'failed', amount: 500, currency: 'eur', payment_intent: 'pi_1', failure_reason: 'expired_or_canceled_card', metadata: { operation_id: 'x' } } });
    const refunded = minimizeStripeEvent({ id: 'evt_c', type: 'charge.refunded', created: 1, data: { object: { id: 'ch_1', object: 'charge', amount_refunded: 700, currency: 'eur', payment_intent: { id: 'pi_1' }, billing_details: { email: 'jane@example.com' } }, previous_attributes: { amount_refunded: 200, refunds: {} } } });
    expect(refunded.data).toEqual({ object: { id: 'ch_1', object: 'charge', amount_refunded: 700, currency: 'eur', payment_intent: 'pi_1' }, previous_attributes: { amount_refunded: 200 } });
    const dispute = minimizeStripeEvent({ id: 'evt_d', type: 'charge.dispute.created', created: 1, data: { object: { id: 'dp_1', object: 'dispute', amount: 1999, currency: 'eur', status: 'needs_response', reason: 'fraudulent', charge: 'ch_1', payment_intent: 'pi_1', evidence: { customer_name: 'Jane Doe' } } } });
    expect(dispute.data).toEqual({ object: { id: 'dp_1', object: 'dispute', amount: 1999, currency: 'eur', status: 'needs_response', reason: 'fraudulent', charge: 'ch_1', payment_intent: 'pi_1' } });
  });

  it('is what both doors store: no personal data in the inbox row', async () => {
    const secret = 'whsec_minimize_test';
    const hook = wholeEvent('evt_by_webhook');
    const body = JSON.stringify(hook);
    const header = Stripe.webhooks.generateTestHeaderString({ payload: body, secret });
    expect(await receiveWebhook({ method: 'POST', body, headers: { 'stripe-signature': header } }, { secret, maxBodyBytes: 262_144 }, { db: db.pool, applier: null, publisher: null }))
      .toMatchObject({ kind: 'recorded', duplicate: false });
    const partner = wholeEvent('evt_by_bus');
    expect(await receivePartnerEvent({ source: 'aws.partner/stripe.com/ed_test', 'detail-type': partner.type, detail: partner }, null, { db: db.pool, applier: null, publisher: null }))
      .toMatchObject({ kind: 'recorded' });
    const { rows } = await db.pool.query<{ event_id: string; payload: Record<string, unknown>; row: string }>(
      `SELECT event_id, payload, to_jsonb(s)::text AS row FROM stripe_events s WHERE event_id IN ('evt_by_webhook', 'evt_by_bus') ORDER BY event_id`,
    );
    expect(rows).toHaveLength(2);
    for (const r of rows) {
      expect(r.payload).toEqual({ ...KEPT, id: r.event_id });
      for (const text of PERSONAL) expect(r.row, text).not.toContain(text);
    }
  });
});
