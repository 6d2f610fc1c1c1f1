// The demo's manual-capture entry (docs/model.md#manual-capture): charges that only authorize
// (`capture: 'manual'`), then are settled by a message of their own on the order's FIFO group.
//
//   capture_full     captured for the whole authorized amount            → Charge Authorized, Charge Captured
//   capture_partial  captured for less (amount_to_capture; Stripe releases the rest)
//                                                                         → Charge Captured for the part
//   cancel           released by cancel_authorization                     → Authorization Canceled
//   expire           neither: Stripe lets it lapse (the time-lapse's validity, local/pipeline.ts), and
//                    the reconciler's expiry check reads it canceled      → Authorization Expired
//
// A section of its own in the order mix (its own PRNG, its own order ids `<tag>-auth-…`, sent after the
// platform orders), as local/connect-demo.ts is: the platform orders of a seed are the same with it or
// without, and no other entry of the mix (refund scenarios, duplicate charges) takes its orders.
import type { Db } from '../lambdas/payments/db.ts';
import type { AuthorizationRequest, ChargeRequest } from '../lambdas/producer/client.ts';
import type { PaymentIntentRecord } from './fake-stripe/types.ts';
import { mulberry32 } from './random.ts';

export const AUTHORIZATION_SCENARIOS = ['capture_full', 'capture_partial', 'cancel', 'expire'] as const;
export type AuthorizationScenario = (typeof AUTHORIZATION_SCENARIOS)[number];

/** Authorizations per scenario, as a share of the platform orders (at least one each). */
const PER_SCENARIO_SHARE = 0.005;

export interface PlannedAuthorization {
  readonly orderId: string;
  readonly scenario: AuthorizationScenario;
  /** What settles it, sent behind its charge on the order's group; none for `expire`. */
  readonly settlement: AuthorizationRequest | null;
}

export interface AuthorizationPlan {
  readonly orders: readonly ChargeRequest[];
  readonly authorizations: readonly PlannedAuthorization[];
}

/** The manual-capture orders of a run of `orders` platform orders: each scenario in turn, at least once. */
export function planAuthorizations(options: { readonly orders: number; readonly seed: number; readonly tag: string; readonly customerId?: string }): AuthorizationPlan {
  const random = mulberry32(options.seed ^ 0xa07c);
  const each = Math.max(1, Math.round(options.orders * PER_SCENARIO_SHARE));
  const orders: ChargeRequest[] = [];
  const authorizations: PlannedAuthorization[] = [];
  for (const scenario of AUTHORIZATION_SCENARIOS) {
    for (let i = 1; i <= each; i++) {
      const orderId = `${options.tag}-auth-${scenario.replace('_', '-')}-${i}`;
      const amount = 1_000 + Math.floor(random() * 90) * 100;
      orders.push({
        orderId,
        amount,
        currency: random() < 0.6 ? 'eur' : 'usd',
        customerId: options.customerId ?? `cus_demo_auth${String(1 + Math.floor(random() * 9)).padStart(2, '0')}`,
        paymentMethod: 'pm_card_visa',
        capture: 'manual',
      });
      const settlement: AuthorizationRequest | null =
        scenario === 'capture_full'
          ? { type: 'capture', orderId }
          : scenario === 'capture_partial'
            ? { type: 'capture', orderId, amount: Math.max(1, Math.floor(amount * (0.3 + random() * 0.5))) }
            : scenario === 'cancel'
              ? { type: 'cancel_authorization', orderId }
              : null;
      authorizations.push({ orderId, scenario, settlement });
    }
  }
  return { orders, authorizations };
}

// ── The ledger's section ─────────────────────────────────────────────────────────────────────────

export interface AuthorizationFigures {
  readonly orderId: string;
  /** The charge operation's status (succeeded: authorized), and what settled it: its capture or cancel (expired: the reconciler's record). */
  readonly charge: { readonly status: string; readonly authorized: number; readonly currency: string };
  readonly settlement: { readonly kind: 'capture' | 'cancel_authorization'; readonly status: string; readonly amount: number; readonly cancellationReason: string | null } | null;
  /** The fake Stripe's PaymentIntent: its status, amount_received, cancellation_reason; null without a record. */
  readonly atStripe: { readonly id: string; readonly status: string; readonly amount: number; readonly amountReceived: number; readonly cancellationReason: string | null } | null;
  /** Where the operations and Stripe's record disagree (empty: they agree). */
  readonly disagreements: readonly string[];
}

export interface AuthorizationLedger {
  readonly rows: readonly AuthorizationFigures[];
  readonly captured: number;
  readonly canceled: number;
  readonly expired: number;
  readonly held: number;
  readonly disagreements: number;
}

/**
 * Every manual charge, its settlement and its PaymentIntent at Stripe, side by side. Null when the run
 * made no manual charge. (The checker judges the same: captured_over_authorized, capture_mismatch, …)
 */
export async function readAuthorizationLedger(db: Db, paymentIntents: readonly PaymentIntentRecord[] | null): Promise<AuthorizationLedger | null> {
  const { rows } = await db.query<{
    order_id: string;
    status: string;
    amount: string;
    currency: string;
    external_id: string | null;
    s_kind: 'capture' | 'cancel_authorization' | null;
    s_status: string | null;
    s_amount: string | null;
    s_reason: string | null;
  }>(
    `SELECT c.order_id, c.status, c.amount::text, c.currency, c.external_id,
            s.kind AS s_kind, s.status AS s_status, s.amount::text AS s_amount, s.cancellation_reason AS s_reason
       FROM payment_operations c
       LEFT JOIN payment_operations s ON s.parent_operation_id = c.id AND s.kind IN ('capture', 'cancel_authorization')
      WHERE c.kind = 'charge' AND c.capture_method = 'manual'
      ORDER BY c.order_id`,
  );
  if (rows.length === 0) return null;
  const piById = new Map((paymentIntents ?? []).map((pi) => [pi.id, pi]));
  const figures = rows.map((r): AuthorizationFigures => {
    const pi = r.external_id === null ? undefined : piById.get(r.external_id);
    const settlement = r.s_kind === null ? null : { kind: r.s_kind, status: r.s_status!, amount: Number(r.s_amount), cancellationReason: r.s_reason };
    const atStripe = pi ? { id: pi.id, status: pi.status, amount: pi.amount, amountReceived: pi.amount_received ?? 0, cancellationReason: pi.cancellation_reason ?? null } : null;
    return { orderId: r.order_id, charge: { status: r.status, authorized: Number(r.amount), currency: r.currency }, settlement, atStripe, disagreements: paymentIntents ? authorizationDisagreements(r.status, Number(r.amount), settlement, atStripe) : [] };
  });
  const done = (kind: string, reason: string | null) => figures.filter((f) => f.settlement?.kind === kind && f.settlement.status === 'succeeded' && (kind === 'capture' || f.settlement.cancellationReason === reason)).length;
  return {
    rows: figures,
    captured: done('capture', null),
    canceled: done('cancel_authorization', null),
    expired: done('cancel_authorization', 'expired'),
    held: figures.filter((f) => f.charge.status === 'succeeded' && f.settlement === null).length,
    disagreements: figures.reduce((sum, f) => sum + f.disagreements.length, 0),
  };
}

/** What the operations say of one authorization against its PaymentIntent at Stripe. */
function authorizationDisagreements(status: string, authorized: number, settlement: AuthorizationFigures['settlement'], pi: AuthorizationFigures['atStripe']): string[] {
  if (status !== 'succeeded') return []; // never authorized: nothing held
  if (pi === null) return ['no PaymentIntent at Stripe'];
  const out: string[] = [];
  if (pi.amount !== authorized) out.push(`authorized ${pi.amount} at Stripe, ${authorized} recorded`);
  if (pi.amountReceived > pi.amount) out.push(`captured ${pi.amountReceived} of ${pi.amount} authorized`);
  const done = settlement?.status === 'succeeded' ? settlement : null;
  if (done?.kind === 'capture') {
    if (pi.status !== 'succeeded') out.push(`captured ${done.amount} recorded, the PaymentIntent is ${pi.status}`);
    else if (pi.amountReceived !== done.amount) out.push(`captured ${done.amount} recorded, Stripe received ${pi.amountReceived}`);
  } else if (done?.kind === 'cancel_authorization') {
    if (pi.status !== 'canceled') out.push(`${done.cancellationReason === 'expired' ? 'expired' : 'canceled'} recorded, the PaymentIntent is ${pi.status}${pi.amountReceived > 0 ? ` (received ${pi.amountReceived})` : ''}`);
    else if ((done.cancellationReason === 'expired') !== (pi.cancellationReason === 'automatic')) out.push(`${done.cancellationReason ?? 'canceled'} recorded, Stripe's cancellation_reason is ${pi.cancellationReason ?? 'none'}`);
  } else if (settlement === null || settlement.status === 'failed') {
    // Held, as far as the operations know: Stripe must not have captured it.
    if (pi.status === 'succeeded') out.push(`no capture recorded, Stripe received ${pi.amountReceived}`);
  }
  return out;
}

/** The ledger's text lines for the section (one row per authorization, then what disagrees). */
export function formatAuthorizationLines(ledger: AuthorizationLedger, n: (value: number) => string): string[] {
  const lines = [
    `    ${n(ledger.rows.length)} authorizations: ${n(ledger.captured)} captured, ${n(ledger.canceled)} canceled, ${n(ledger.expired)} expired, ${n(ledger.held)} still held · disagreements with Stripe ${n(ledger.disagreements)}`,
  ];
  for (const f of ledger.rows) {
    const s = f.settlement;
    const ours =
      f.charge.status !== 'succeeded'
        ? `charge ${f.charge.status}`
        : s === null
          ? 'authorized, nothing settled it'
          : s.kind === 'capture'
            ? `capture ${s.status} (${n(s.amount)})`
            : `${s.cancellationReason === 'expired' ? 'expiry' : 'cancel'} ${s.status}`;
    const stripe = f.atStripe
      ? `${f.atStripe.id} ${f.atStripe.status}${f.atStripe.cancellationReason ? ` (${f.atStripe.cancellationReason})` : ''}, received ${n(f.atStripe.amountReceived)}`
      : 'at Stripe: n/a';
    const mark = f.disagreements.length === 0 ? '✓' : `✗ ${f.disagreements.join('; ')}`;
    // A declined charge authorized nothing: the amount it asked for.
    const amount = `${f.charge.status === 'succeeded' ? 'authorized' : 'asked     '} ${n(f.charge.authorized).padStart(6)} ${f.charge.currency}`;
    lines.push(`    ${f.orderId.padEnd(36)} ${amount} · ${ours} · ${stripe} ${mark}`);
  }
  return lines;
}
