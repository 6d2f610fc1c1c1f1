// The property model's oracle for manual capture: what a capture, a cancel of an authorization or a
// refund of a manual order MAY come to, and what every authorization MUST be after heal — written
// from docs/model.md#manual-capture and Stripe's documented PaymentIntent (docs.stripe.com/api/payment_intents/capture:
// "amount_to_capture … must be less than or equal to the original amount"; a capture releases the
// rest; an uncaptured PaymentIntent is canceled after 7 days), never read from the product's SQL
// (migrations/019, lambdas/payments/operations-store.ts). Its inputs are observations: the order's
// charge operation and its settlement just before a request, and after the run the fake's ledger.
import type { PaymentIntentRecord, RefundRecord } from '../../../local/fake-stripe/types.ts';
import type { OperationStatus } from '../../../lambdas/payments/types.ts';

/** The order's charge operation right before a request (`manual`: made with capture_method=manual). */
export type AuthorizedChargeState =
  | { readonly kind: 'none' }
  | { readonly kind: 'open' | 'succeeded' | 'failed'; readonly manual: boolean; readonly amount: number };

/** The capture or cancel_authorization operation of the order's charge, as observed. */
export interface SettlementRow {
  readonly id: string;
  readonly kind: 'capture' | 'cancel_authorization';
  readonly status: OperationStatus;
  readonly amount: number;
  readonly cancellationReason: 'expired' | null;
  readonly reviewReason: string | null;
}

export interface AskedSettlement {
  readonly kind: 'capture' | 'cancel_authorization';
  /** A capture's amount; absent: all of it. */
  readonly amount?: number;
}

export type AuthorizationVerdict =
  | 'accepted'
  | 'repeat'
  | 'no_charge'
  | 'not_manual'
  | 'charge_failed'
  | 'exceeds_authorization'
  | 'already_settled'
  | 'authorization_conflict';

/**
 * The verdict on one capture / cancel request (docs/model.md#manual-capture):
 * - "one settlement per authorization": a second request of the same kind is the same request
 *   (at-least-once delivery) and answers with its operation — unless it is a capture of another
 *   amount, a conflict, nothing sent; a request of the other kind once one exists (a capture after a
 *   cancel or an expiry, a cancel after a capture) is refused;
 * - no charge: nothing to settle; a charge captured at once: no authorization (refund it instead);
 *   a failed charge: nothing was authorized;
 * - a capture "within the authorized amount": above it refused, nothing sent;
 * - otherwise accepted — also while the charge is open (it waits, durably, until the charge is final).
 */
export function predictSettlement(charge: AuthorizedChargeState, settlement: SettlementRow | null, ask: AskedSettlement): { verdict: AuthorizationVerdict; operationId?: string } {
  if (settlement !== null && settlement.kind === ask.kind) {
    if (ask.kind === 'capture' && ask.amount !== undefined && ask.amount !== settlement.amount) return { verdict: 'authorization_conflict', operationId: settlement.id };
    return { verdict: 'repeat', operationId: settlement.id };
  }
  if (settlement !== null) return { verdict: 'already_settled', operationId: settlement.id };
  if (charge.kind === 'none') return { verdict: 'no_charge' };
  if (!charge.manual) return { verdict: 'not_manual' };
  if (charge.kind === 'failed') return { verdict: 'charge_failed' };
  if (ask.kind === 'capture' && ask.amount !== undefined && ask.amount > charge.amount) return { verdict: 'exceeds_authorization' };
  return { verdict: 'accepted' };
}

export type ManualRefundVerdict = 'accepted' | 'not_captured' | 'exceeds_charge' | 'charge_failed' | 'refund_conflict' | 'repeat' | 'no_charge';

/**
 * A refund of a manual order, asked once its charge is final: "refunds only of what was captured" —
 * an authorization with no succeeded capture has nothing to refund (`not_captured`, "cancel it
 * instead"); a captured one refunds at most what was captured, less what its refunds hold.
 * `undefined`: the capture is still open, and the refund may wait for it or be refused — not predicted.
 */
export function predictManualRefund(charge: AuthorizedChargeState, settlement: SettlementRow | null, held: number, amount: number): ManualRefundVerdict | undefined {
  if (charge.kind === 'none') return 'no_charge';
  if (charge.kind === 'open') return undefined;
  if (charge.kind === 'failed') return 'charge_failed';
  if (!charge.manual) return amount + held > charge.amount ? 'exceeds_charge' : 'accepted';
  if (settlement === null || settlement.kind === 'cancel_authorization') return 'not_captured';
  if (settlement.status === 'failed') return 'not_captured';
  if (settlement.status !== 'succeeded') return undefined;
  return amount + held > settlement.amount ? 'exceeds_charge' : 'accepted';
}

/**
 * After heal, one order's authorization against Stripe's PaymentIntent:
 * - at most one settlement (one capture, or one cancel / expiry) per authorization;
 * - a charge captured at once has none;
 * - captured ≤ authorized (amount_received ≤ amount), never more than the capture asked, and nothing
 *   captured after a cancel or an expiry — whatever the settlement's state, a review included;
 * - the operations agree with the PaymentIntent (a cancel asked may find the hold lapsed first): no settlement → still requires_capture (an expiry
 *   Stripe made is recorded by the expiry check, which heal runs); a capture that succeeded → succeeded
 *   with amount_received its amount; a failed capture → nothing received; a cancel → canceled, an
 *   expiry → canceled `automatic`;
 * - refunds at Stripe never above what was captured;
 * - every settlement of a final charge final, or in review with a reason (one behind a charge in
 *   review waits for the person deciding it).
 */
export function judgeAuthorization(input: {
  readonly orderId: string;
  readonly charge: { readonly id: string; readonly status: OperationStatus; readonly manual: boolean; readonly amount: number; readonly externalId: string | null } | null;
  readonly settlements: readonly SettlementRow[];
  readonly paymentIntent: PaymentIntentRecord | null;
  readonly refunds: readonly RefundRecord[];
}): string[] {
  const problems: string[] = [];
  const { orderId, charge, settlements, paymentIntent: pi } = input;
  const say = (what: string) => problems.push(`order ${orderId}: ${what}`);
  if (settlements.length > 1) say(`${settlements.length} settlements of one authorization (${settlements.map((s) => `${s.kind} ${s.status}`).join(', ')})`);
  if (charge === null) {
    if (settlements.length > 0) say('a settlement without a charge');
    return problems;
  }
  if (!charge.manual) {
    if (settlements.length > 0) say(`a charge captured at once has a ${settlements[0]!.kind}`);
    return problems;
  }
  // A settlement waiting behind a charge a human must decide waits for that human (as a refund does).
  const chargeFinal = charge.status === 'succeeded' || charge.status === 'failed';
  for (const s of settlements) {
    if (chargeFinal && (s.status === 'pending' || s.status === 'unknown') && s.reviewReason === null) say(`${s.kind} ${s.id} left ${s.status} without a reason`);
  }
  if (charge.status !== 'succeeded') {
    if (settlements.some((s) => s.status === 'succeeded')) say(`a settlement succeeded of a charge that is ${charge.status}`);
    return problems;
  }
  if (pi === null) return [...problems, `order ${orderId}: the authorized charge names no PaymentIntent at Stripe (${charge.externalId})`];
  const received = pi.amount_received ?? 0;
  if (pi.capture_method !== 'manual') say(`PaymentIntent ${pi.id} is capture_method ${pi.capture_method}`);
  if (pi.amount !== charge.amount) say(`PaymentIntent ${pi.id} authorized ${pi.amount}, the charge asked ${charge.amount}`);
  if (received > pi.amount) say(`captured ${received} above the authorized ${pi.amount}`);
  const s = settlements[0];
  // Whatever the settlement's state (final or in review): in the model nobody else captures, so
  // nothing is captured beyond what a capture asked, and nothing at all once a cancel was asked.
  if (s?.kind === 'capture' && received > s.amount) say(`captured ${received}, more than capture ${s.id} asked (${s.amount}, ${s.status})`);
  if (s?.kind === 'cancel_authorization' && received > 0) say(`captured ${received} after cancel ${s.id} (${s.status}${s.cancellationReason ? `, ${s.cancellationReason}` : ''})`);
  if (s === undefined) {
    if (pi.status !== 'requires_capture') say(`no capture or cancel recorded, but PaymentIntent ${pi.id} is ${pi.status}${pi.cancellation_reason ? ` (${pi.cancellation_reason})` : ''}`);
  } else if (s.kind === 'capture' && s.status === 'succeeded') {
    if (pi.status !== 'succeeded' || received !== s.amount) say(`capture ${s.id} succeeded for ${s.amount}, PaymentIntent ${pi.id} is ${pi.status} with ${received} received`);
    if (s.amount > charge.amount) say(`capture ${s.id} of ${s.amount} above the authorized ${charge.amount}`);
  } else if (s.kind === 'capture' && s.status === 'failed') {
    if (received !== 0 || pi.status === 'succeeded') say(`capture ${s.id} failed, but PaymentIntent ${pi.id} is ${pi.status} with ${received} received`);
  } else if (s.kind === 'cancel_authorization' && s.status === 'succeeded') {
    if (pi.status !== 'canceled' || received !== 0) say(`cancel ${s.id} succeeded, PaymentIntent ${pi.id} is ${pi.status} with ${received} received (captured after a cancel or an expiry)`);
    // An expiry recorded is one Stripe made (automatic). A cancel asked may find the hold already
    // lapsed (canceled automatic): the release it asked for is what Stripe holds, so it may succeed.
    const automatic = pi.cancellation_reason === 'automatic';
    if (s.cancellationReason === 'expired' && !automatic) say(`cancel ${s.id} recorded ${s.cancellationReason ?? 'as asked'}, Stripe canceled it ${pi.cancellation_reason ?? 'without a reason'}`);
  } else if (s.kind === 'cancel_authorization' && s.status === 'failed') {
    if (pi.status === 'canceled') say(`cancel ${s.id} failed, but PaymentIntent ${pi.id} is canceled`);
  }
  const refunded = input.refunds.filter((r) => r.payment_intent === pi.id && (r.status === 'succeeded' || r.status === 'pending')).reduce((n, r) => n + r.amount, 0);
  if (refunded > received) say(`refunded ${refunded} of PaymentIntent ${pi.id}, which captured ${received}`);
  return problems;
}
