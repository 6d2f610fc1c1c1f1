// Payment methods Stripe settles in days (SEPA Direct Debit: up to 14 business days; ACH Direct
// Debit: up to 4) against the unsettled bound: the bound is the payment method type's, read from the
// PaymentIntent our retrieve expands; a card keeps the short one. Real PostgreSQL, the real SDK
// against the fake Stripe, the real webhook path. The clock is the database's: the first send is
// moved into the past (`sentAgo`), as the other engine tests do.
import { describe, expect, it } from 'vitest';
import { DEFAULT_POLICY, isSlowReview, unsettledBoundFor } from '../lambdas/payments/decisions.ts';
import { findOperation } from '../lambdas/payments/operations-store.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';
import type { TestDatabase } from './support/db.ts';
import { testEngine } from './support/engine.ts';
import { chargeOrder } from './support/orders.ts';
import type { StripeHarness } from './support/stripe.ts';
import { useWorld } from './support/world.ts';
import { deliverWebhook, piEvent } from './stripe-events/support.ts';

let db: TestDatabase;
let stripe: StripeHarness;
useWorld('async_methods', (w) => ({ db, stripe } = w));

const engine = () => testEngine({ db, stripe });
const order = (overrides: Partial<ChargeInput> = {}) => chargeOrder(overrides);
/** The first send `days` days ago, by the database's clock; due now. */
const sentDaysAgo = (id: string, days: number) =>
  db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - $2::int * interval '1 day', next_attempt_at = now() WHERE id = $1`, [id, days]);
const everInReview = async (id: string) =>
  (await db.pool.query(`SELECT count(*)::int AS n FROM outcome_events WHERE operation_id = $1 AND event_type LIKE '%Needs Review'`, [id])).rows[0].n as number;
const paymentIntentOf = (id: string) => stripe.fake.paymentIntents({ operationId: id })[0]!;

/** 10 business days: two weeks of the calendar. */
const TEN_BUSINESS_DAYS = 14;

describe('the unsettled bound is the payment method type’s', () => {
  it('defaults: SEPA debit 24 days, US bank account 10, card and unknown types the card bound (7)', () => {
    expect(unsettledBoundFor(DEFAULT_POLICY, { paymentMethodType: 'sepa_debit' })).toBe(24 * 86_400_000);
    expect(unsettledBoundFor(DEFAULT_POLICY, { paymentMethodType: 'us_bank_account' })).toBe(10 * 86_400_000);
    expect(unsettledBoundFor(DEFAULT_POLICY, { paymentMethodType: 'card' })).toBe(7 * 86_400_000);
    expect(unsettledBoundFor(DEFAULT_POLICY, {})).toBe(DEFAULT_POLICY.unsettledReviewAfterMs);
    expect(unsettledBoundFor(DEFAULT_POLICY, { paymentMethodType: 'klarna' })).toBe(DEFAULT_POLICY.unsettledReviewAfterMs);
  });

  it('a SEPA debit Stripe settles after 10 business days ends succeeded by polling, never in review', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_fake_sepa_debit' }));
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    expect(paymentIntentOf(id).status).toBe('processing');
    await sentDaysAgo(id, TEN_BUSINESS_DAYS);
    // Two weeks processing: past the card bound, well inside the SEPA one — still Stripe's to settle.
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown', step: 'retrieve' });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: null });
    stripe.fake.settle(paymentIntentOf(id).id, 'succeeded');
    await sentDaysAgo(id, TEN_BUSINESS_DAYS + 1);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'succeeded', step: 'retrieve' });
    expect(await everInReview(id)).toBe(0);
  });

  it('a SEPA debit Stripe settles after 10 business days ends succeeded by its event, never in review', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_fake_sepa_debit' }));
    await engine().executeCharge(id);
    await sentDaysAgo(id, TEN_BUSINESS_DAYS);
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    stripe.fake.settle(paymentIntentOf(id).id, 'succeeded');
    expect(await deliverWebhook({ db, stripe }, piEvent(paymentIntentOf(id)))).toMatchObject({ applied: { outcome: 'settled', operationId: id } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', reviewReason: null });
    expect(await everInReview(id)).toBe(0);
  });

  it('a US bank account debit is flagged only past its own bound', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_fake_us_bank_account' }));
    await engine().executeCharge(id);
    await sentDaysAgo(id, 8);
    expect(await engine().executeCharge(id)).toMatchObject({ status: 'unknown' });
    expect((await findOperation(db.pool, id))?.reviewReason).toBeNull();
    await sentDaysAgo(id, 10);
    await engine().executeCharge(id);
    expect((await findOperation(db.pool, id))?.reviewReason).toMatch(/still processing .* after the first attempt \(bound for us_bank_account: 240 h\)$/);
  });

  it('a card that stays processing for a week is still flagged', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_card_visa' }));
    stripe.fake.injectFault({ operationId: id }, 'processing');
    expect((await engine().executeCharge(id)).status).toBe('unknown');
    await sentDaysAgo(id, 7);
    await engine().executeCharge(id);
    const op = await findOperation(db.pool, id);
    expect(op?.reviewReason).toMatch(/^PaymentIntent pi_\S+ is still processing 168 h after the first attempt \(bound for card: 168 h\)$/);
    expect(isSlowReview(op!.reviewReason)).toBe(true);
    expect(await everInReview(id)).toBe(1); // what the SEPA tests see none of
  });

  it('in review only for being slow: its PaymentIntent’s final event settles it; a snapshot Stripe does not confirm does not', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_card_visa' }));
    stripe.fake.injectFault({ operationId: id }, 'processing');
    await engine().executeCharge(id);
    await sentDaysAgo(id, 8);
    await engine().executeCharge(id);
    const inReview = (await findOperation(db.pool, id))!;
    expect(isSlowReview(inReview.reviewReason)).toBe(true);
    const pi = paymentIntentOf(id);
    // Stripe still holds it processing: the succeeded snapshot is confirmed by nobody — a note.
    expect(await deliverWebhook({ db, stripe }, piEvent(pi, 'succeeded'))).toMatchObject({ applied: { operationId: id } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: inReview.reviewReason });
    stripe.fake.settle(pi.id, 'succeeded');
    expect(await deliverWebhook({ db, stripe }, piEvent(paymentIntentOf(id)))).toMatchObject({ applied: { outcome: 'settled', operationId: id } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'succeeded', reviewReason: null });
  });

  it('in review for another reason: the final event stays a note for the operator', async () => {
    const id = await engine().requestCharge(order({ paymentMethod: 'pm_card_visa' }));
    stripe.fake.injectFault({ operationId: id }, 'processing');
    await engine().executeCharge(id);
    await db.pool.query(`UPDATE payment_operations SET review_reason = 'an operator asked to look', next_attempt_at = NULL WHERE id = $1`, [id]);
    stripe.fake.settle(paymentIntentOf(id).id, 'succeeded');
    expect(await deliverWebhook({ db, stripe }, piEvent(paymentIntentOf(id)))).toMatchObject({ applied: { outcome: 'in_review', operationId: id } });
    expect(await findOperation(db.pool, id)).toMatchObject({ status: 'unknown', reviewReason: 'an operator asked to look' });
    expect(isSlowReview('an operator asked to look')).toBe(false);
  });
});
