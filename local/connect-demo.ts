// The demo's Connect entry (docs/model.md#connected-accounts): charges for two connected accounts
// beside the platform's own, and the ledger's account of them against the fake Stripe's record.
//
//   direct charges       `account`: made AS the connected account (Stripe-Account on every request),
//                        with the platform's application fee (but the second); the first on each account is refunded
//                        (a partial refund on the first account, a full one on the second): the
//                        refund operation takes its charge's account
//   destination charges  `transferDestination` and `applicationFeeAmount`: made on the platform,
//                        transferred to the account
//
// A section of its own in the order mix (its own PRNG, its own order ids `<tag>-connect-…`, sent
// after the platform orders): the platform orders of a seed are the same with it or without, and no
// other entry of the mix (refund scenarios, the duplicate charges made behind the pipeline's back)
// takes its orders. Only on the fake Stripe, which has these accounts (startPipeline gives them to it,
// and to the pipeline as STRIPE_CONNECTED_ACCOUNTS so their events are taken from the first one).
import type { Db } from '../lambdas/payments/db.ts';
import type { ChargeRequest, RefundRequest } from '../lambdas/producer/client.ts';
import type { PaymentIntentRecord, RefundRecord } from './fake-stripe/types.ts';
import { mulberry32 } from './random.ts';
import type { RefundScenario } from './send-report.ts';

/** The demo's two connected accounts (the fake Stripe is started with them). */
export const DEMO_CONNECTED_ACCOUNTS = ['acct_1DemoAlpha', 'acct_1DemoBravo'] as const;

/** Direct charges per account, and destination charges to each (at least one), as shares of the platform orders. */
const DIRECT_SHARE = 0.01;
/** At least two direct charges per account: one with a fee, one without. */
const DIRECT_AT_LEAST = 2;
const DESTINATION_SHARE = 0.005;
/** The platform's application fee, a share of the amount. */
const FEE_SHARE = 0.05;

export interface ConnectPlan {
  readonly orders: readonly ChargeRequest[];
  /** The refunds of direct charges, in the shape of the refund scenarios (demo.ts PlannedRefunds). */
  readonly refunds: readonly { readonly orderId: string; readonly scenario: RefundScenario; readonly requests: readonly RefundRequest[] }[];
}

/** The Connect orders of a run of `orders` platform orders: a direct charge (or more) on each account, destination charges to each, refunds of the first direct charges. */
export function planConnectOrders(options: { readonly orders: number; readonly seed: number; readonly tag: string; readonly customerId?: string }): ConnectPlan {
  const random = mulberry32(options.seed ^ 0xc0ec7);
  const direct = Math.max(DIRECT_AT_LEAST, Math.round(options.orders * DIRECT_SHARE));
  const destination = Math.max(1, Math.round(options.orders * DESTINATION_SHARE));
  const orders: ChargeRequest[] = [];
  const refunds: ConnectPlan['refunds'][number][] = [];
  const amount = () => 500 + Math.floor(random() * 95) * 100;
  const currency = () => (random() < 0.6 ? 'eur' : 'usd');
  DEMO_CONNECTED_ACCOUNTS.forEach((account, a) => {
    const letter = String.fromCharCode(97 + a);
    for (let i = 1; i <= direct; i++) {
      const value = amount();
      // A decline now and then (never the refunded one): a 402 made as the account.
      const paymentMethod = i > 1 && i % 4 === 0 ? 'pm_card_chargeDeclined' : 'pm_card_visa';
      const order: ChargeRequest = {
        orderId: `${options.tag}-connect-${letter}-direct-${i}`,
        amount: value,
        currency: currency(),
        customerId: options.customerId ?? `cus_demo_connect_${letter}`,
        paymentMethod,
        account,
        // The second without a fee: a direct charge need not take one (and without it Stripe would
        // take the charge on the platform too, were Stripe-Account not sent: the checker must see it).
        ...(i === 2 ? {} : { applicationFeeAmount: Math.max(1, Math.round(value * FEE_SHARE)) }),
      };
      orders.push(order);
      if (i === 1) {
        // The first account's: part of it back; the second's: all of it.
        const scenario: RefundScenario = a === 0 ? 'partial' : 'full';
        const refundAmount = scenario === 'full' ? value : Math.max(1, Math.floor(value * 0.4));
        refunds.push({ orderId: order.orderId, scenario, requests: [{ type: 'refund', orderId: order.orderId, refundId: `${order.orderId}-r1`, amount: refundAmount, reason: 'requested_by_customer' }] });
      }
    }
    for (let i = 1; i <= destination; i++) {
      const value = amount();
      orders.push({
        orderId: `${options.tag}-connect-${letter}-destination-${i}`,
        amount: value,
        currency: currency(),
        customerId: options.customerId ?? 'cus_demo_platform',
        paymentMethod: 'pm_card_visa',
        transferDestination: account,
        applicationFeeAmount: Math.max(1, Math.round(value * FEE_SHARE)),
      });
    }
  });
  return { orders, refunds };
}

// ── The ledger's section ─────────────────────────────────────────────────────────────────────────

export interface ConnectAccountFigures {
  /** A connected account, or null for the platform's own charges (destination charges among them). */
  readonly account: string | null;
  /** Charge operations made as this account (a direct charge), or on the platform. */
  readonly charges: { readonly operations: number; readonly succeeded: number; readonly failed: number };
  /** Destination charges made on the platform for this account (for the platform: all of them, among its charges), and the fees of the succeeded ones. */
  readonly destinationCharges: { readonly operations: number; readonly succeeded: number; readonly fees: number };
  /** Refund operations made as this account, and how many succeeded. */
  readonly refunds: { readonly operations: number; readonly succeeded: number };
  /**
   * Stripe events from this account (a connected account's carry its id as `account`) recorded in the
   * inbox, and how many of them were refused as another account's (`foreign_account`): the pipeline
   * takes a connected account's events once it has an operation on it or lists it.
   */
  readonly events: { readonly received: number; readonly refused: number };
  /** What the fake Stripe's record holds on this account: PaymentIntents (by status) and Refunds (of its PaymentIntents). */
  readonly atStripe: { readonly paymentIntents: number; readonly succeeded: number; readonly refunds: number } | null;
}

export interface ConnectLedger {
  /** Each connected account the run charged on or for, then the platform; empty when nothing was. */
  readonly accounts: readonly ConnectAccountFigures[];
}

/**
 * Per account, the database beside the fake's record. Null when the run made no Connect operation.
 * (Whether every object IS on its operation's account is the checker's `wrong_account`, invariants.ts.)
 */
export async function readConnectLedger(db: Db, paymentIntents: readonly PaymentIntentRecord[] | null, refunds: readonly RefundRecord[] | null): Promise<ConnectLedger | null> {
  const { rows } = await db.query<{ account: string | null; destination: string | null; kind: 'charge' | 'refund'; status: string; n: number; fees: string | null }>(
    `SELECT stripe_account AS account, transfer_destination AS destination, kind, status, count(*)::int AS n,
            sum(application_fee_amount) FILTER (WHERE status = 'succeeded')::text AS fees
       FROM payment_operations GROUP BY 1, 2, 3, 4`,
  );
  if (!rows.some((r) => r.account !== null || r.destination !== null)) return null;
  const { rows: events } = await db.query<{ account: string | null; received: number; refused: number }>(
    `SELECT payload->>'account' AS account, count(*)::int AS received, count(*) FILTER (WHERE outcome = 'foreign_account')::int AS refused
       FROM stripe_events GROUP BY 1`,
  );
  const accounts = [...new Set(rows.flatMap((r) => [r.account, r.destination]).filter((a): a is string => a !== null))].sort();
  const count = (where: (r: (typeof rows)[number]) => boolean) => rows.filter(where).reduce((sum, r) => sum + r.n, 0);
  const accountOf = (pi: PaymentIntentRecord) => pi.stripeAccount ?? null;
  const piById = new Map((paymentIntents ?? []).map((pi) => [pi.id, pi]));
  const figures = (account: string | null): ConnectAccountFigures => {
    const mine = (r: (typeof rows)[number]) => r.account === account;
    // For an account: the destination charges made for it; for the platform: all of them (they are its charges).
    const toIt = (r: (typeof rows)[number]) => r.kind === 'charge' && (account === null ? r.destination !== null : r.destination === account);
    const pis = paymentIntents?.filter((pi) => accountOf(pi) === account) ?? null;
    return {
      account,
      charges: {
        operations: count((r) => mine(r) && r.kind === 'charge'),
        succeeded: count((r) => mine(r) && r.kind === 'charge' && r.status === 'succeeded'),
        failed: count((r) => mine(r) && r.kind === 'charge' && r.status === 'failed'),
      },
      destinationCharges: {
        operations: count(toIt),
        succeeded: count((r) => toIt(r) && r.status === 'succeeded'),
        fees: rows.filter((r) => toIt(r) && r.status === 'succeeded').reduce((sum, r) => sum + Number(r.fees ?? 0), 0),
      },
      refunds: { operations: count((r) => mine(r) && r.kind === 'refund'), succeeded: count((r) => mine(r) && r.kind === 'refund' && r.status === 'succeeded') },
      events: { received: events.find((e) => e.account === account)?.received ?? 0, refused: events.find((e) => e.account === account)?.refused ?? 0 },
      atStripe:
        pis === null
          ? null
          : {
              paymentIntents: pis.length,
              succeeded: pis.filter((pi) => pi.status === 'succeeded').length,
              // A Refund belongs to its PaymentIntent's account.
              refunds: (refunds ?? []).filter((r) => {
                const pi = piById.get(r.payment_intent);
                return pi !== undefined && accountOf(pi) === account;
              }).length,
            },
    };
  };
  return { accounts: [...accounts.map(figures), figures(null)] };
}

/** The ledger's text lines for the section (one row per account). */
export function formatConnectLines(ledger: ConnectLedger, n: (value: number) => string): string[] {
  return ledger.accounts.map((f) => {
    const who = f.account ?? 'the platform';
    const parts = [
      `${f.account ? 'direct charges' : 'charges'} ${n(f.charges.operations)} (${n(f.charges.succeeded)} succeeded, ${n(f.charges.failed)} failed)`,
      f.account
        ? `destination charges to it ${n(f.destinationCharges.operations)} (${n(f.destinationCharges.succeeded)} succeeded, fees ${n(f.destinationCharges.fees)})`
        : `destination charges among them ${n(f.destinationCharges.operations)}`,
      `refunds ${n(f.refunds.operations)} (${n(f.refunds.succeeded)} succeeded)`,
      `Stripe events ${n(f.events.received)} (refused as another account's ${n(f.events.refused)})`,
      f.atStripe ? `at Stripe on it: ${n(f.atStripe.paymentIntents)} PaymentIntents (${n(f.atStripe.succeeded)} succeeded), ${n(f.atStripe.refunds)} Refunds` : 'at Stripe: n/a',
    ];
    return `    ${who.padEnd(18)} ${parts.join(' · ')}`;
  });
}
