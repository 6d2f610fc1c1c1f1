// What Stripe itself holds, for the ledger's Stripe-side figures and the invariant checks. The
// database says what the product believes; only this says what happened.
//
//   fake, in this process   every PaymentIntent and Refund ever created, request and fault counters (exact)
//   fake, another process   the same through its /__fake/ control API (`npm run fake-stripe`)
//   real Stripe test mode   the List API, PaymentIntents created since the run began, kept when their
//                           metadata names an order of this run. Real time (Search lags), but no
//                           request or fault counters: Stripe does not tell those
//   anything else           (stripe-mock, a proxy) unavailable: the ledger says so instead of guessing
import Stripe from 'stripe';
import type {
  FakeStripe,
  FakeStripeStats,
  PaymentIntentRecord,
  PaymentIntentStatus,
  RefundReason,
  RefundRecord,
  RefundStatus,
} from './fake-stripe/types.ts';

export type StripeTruthSource = 'fake' | 'fake-control-api' | 'stripe-list-api' | 'unavailable';

export interface StripeTruth {
  readonly source: StripeTruthSource;
  /** One line for the ledger. */
  readonly description: string;
  /** Every PaymentIntent of this run; null when unavailable. */
  paymentIntents(orderIds?: ReadonlySet<string>): Promise<PaymentIntentRecord[] | null>;
  /** Every Refund of this run's PaymentIntents (of `orderIds` when given); null when unavailable. */
  refunds(orderIds?: ReadonlySet<string>): Promise<RefundRecord[] | null>;
  /** Request, fault and key counters; null when Stripe does not tell. */
  stats(): Promise<FakeStripeStats | null>;
}

/** One order's money at Stripe, in minor units. */
export interface OrderNet {
  readonly orderId: string;
  /** Sum of its succeeded PaymentIntents' amounts, and how many there are. */
  readonly charged: number;
  readonly succeededPaymentIntents: number;
  /** Sum of the succeeded refunds of those PaymentIntents. */
  readonly refunded: number;
  /** Refunds not final yet (pending, requires_action): money that may still go back. */
  readonly refundPending: number;
  /** charged − refunded: what the customer paid in the end (the invariant: the amount asked, or 0). */
  readonly net: number;
  /** Succeeded PaymentIntents with no succeeded or pending refund covering them entirely. */
  readonly unrefundedPaymentIntents: number;
}

/**
 * Per order (metadata.order_id of the PaymentIntent): net amount charged = succeeded PaymentIntent
 * amounts − succeeded refund amounts. A refund counts for the order of the PaymentIntent it refunds,
 * whatever its own metadata says.
 */
export function netChargedByOrder(
  paymentIntents: readonly PaymentIntentRecord[],
  refunds: readonly RefundRecord[],
): Map<string, OrderNet> {
  const refundedByPi = new Map<string, { succeeded: number; pending: number }>();
  for (const r of refunds) {
    const sums = refundedByPi.get(r.payment_intent) ?? { succeeded: 0, pending: 0 };
    if (r.status === 'succeeded') sums.succeeded += r.amount;
    if (r.status === 'pending' || r.status === 'requires_action') sums.pending += r.amount;
    refundedByPi.set(r.payment_intent, sums);
  }
  const out = new Map<string, OrderNet>();
  for (const pi of paymentIntents) {
    const orderId = pi.metadata.order_id;
    if (orderId === undefined || pi.status !== 'succeeded') continue;
    const sums = refundedByPi.get(pi.id) ?? { succeeded: 0, pending: 0 };
    // What Stripe took: a manual capture's amount_received may be less than authorized (the rest released).
    const taken = pi.amount_received ?? pi.amount;
    const prev = out.get(orderId) ?? {
      orderId,
      charged: 0,
      succeededPaymentIntents: 0,
      refunded: 0,
      refundPending: 0,
      net: 0,
      unrefundedPaymentIntents: 0,
    };
    out.set(orderId, {
      orderId,
      charged: prev.charged + taken,
      succeededPaymentIntents: prev.succeededPaymentIntents + 1,
      refunded: prev.refunded + sums.succeeded,
      refundPending: prev.refundPending + sums.pending,
      net: prev.net + taken - sums.succeeded,
      unrefundedPaymentIntents: prev.unrefundedPaymentIntents + (sums.succeeded + sums.pending < taken ? 1 : 0),
    });
  }
  return out;
}

export function fakeTruth(fake: FakeStripe): StripeTruth {
  return {
    source: 'fake',
    description: `the fake Stripe's own record of every PaymentIntent (${fake.url})`,
    paymentIntents: async () => fake.paymentIntents(),
    refunds: async () => fake.refunds(),
    stats: async () => fake.stats(),
  };
}

/** Probes the /__fake/ control API of a server given by STRIPE_API_BASE; null if it has none. */
export async function controlApiTruth(apiBase: string): Promise<StripeTruth | null> {
  const base = apiBase.replace(/\/+$/, '');
  const get = async <T>(path: string): Promise<T> => {
    const res = await fetch(`${base}${path}`, { signal: AbortSignal.timeout(5_000) });
    if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status}`);
    return (await res.json()) as T;
  };
  try {
    await get<FakeStripeStats>('/__fake/stats');
  } catch {
    return null;
  }
  return {
    source: 'fake-control-api',
    description: `the fake Stripe at ${base}, through its /__fake/ control API (its counters cover every run it served)`,
    paymentIntents: async () => (await get<{ data: PaymentIntentRecord[] }>('/__fake/payment_intents')).data,
    refunds: async () => (await get<{ data: RefundRecord[] }>('/__fake/refunds')).data,
    stats: () => get<FakeStripeStats>('/__fake/stats'),
  };
}

/** Real Stripe (test mode): the List API, filtered to this run's orders. */
export function listApiTruth(stripe: Stripe, runStartedAt: Date, label: string): StripeTruth {
  const truth: StripeTruth = {
    source: 'stripe-list-api',
    description: `${label}: List API, PaymentIntents created since the run began (request and fault counts are not available from Stripe)`,
    async paymentIntents(orderIds) {
      const out: PaymentIntentRecord[] = [];
      try {
        // A minute of slack for clock skew between this machine and Stripe.
        const gte = Math.floor(runStartedAt.getTime() / 1000) - 60;
        for await (const pi of stripe.paymentIntents.list({ created: { gte }, limit: 100 })) {
          const orderId = pi.metadata?.order_id;
          if (orderId === undefined || (orderIds && !orderIds.has(orderId))) continue;
          out.push({
            id: pi.id,
            object: 'payment_intent',
            amount: pi.amount,
            currency: pi.currency,
            customer: typeof pi.customer === 'string' ? pi.customer : (pi.customer?.id ?? null),
            payment_method: typeof pi.payment_method === 'string' ? pi.payment_method : (pi.payment_method?.id ?? null),
            status: pi.status as PaymentIntentStatus,
            metadata: { ...pi.metadata },
            description: pi.description ?? null,
            statement_descriptor_suffix: pi.statement_descriptor_suffix ?? null,
            created: pi.created,
            livemode: false,
            capture_method: 'automatic',
            confirmation_method: 'automatic',
            last_payment_error: null,
            idempotencyKey: null,
            createdAtMs: pi.created * 1000,
          });
        }
        return out;
      } catch {
        return null;
      }
    },
    async refunds(orderIds) {
      const out: RefundRecord[] = [];
      try {
        const gte = Math.floor(runStartedAt.getTime() / 1000) - 60;
        // Refunds come after their charge, so "created since the run began" covers this run's. The
        // order is the refunded PaymentIntent's (expanded), whatever the refund's own metadata says.
        const listed = stripe.refunds.list({ created: { gte }, limit: 100, expand: ['data.payment_intent'] });
        for await (const r of listed) {
          const pi = typeof r.payment_intent === 'object' ? r.payment_intent : null;
          const orderId = pi?.metadata?.order_id;
          if (pi === null || orderId === undefined || (orderIds && !orderIds.has(orderId))) continue;
          out.push({
            id: r.id,
            object: 'refund',
            amount: r.amount,
            balance_transaction: typeof r.balance_transaction === 'string' ? r.balance_transaction : (r.balance_transaction?.id ?? null),
            charge: typeof r.charge === 'string' ? r.charge : (r.charge?.id ?? ''),
            created: r.created,
            currency: r.currency,
            customer: typeof r.customer === 'string' ? r.customer : (r.customer?.id ?? null),
            ...(r.failure_reason ? { failure_reason: r.failure_reason } : {}),
            metadata: { ...r.metadata },
            payment_intent: pi.id,
            payment_method: typeof r.payment_method === 'string' ? r.payment_method : (r.payment_method?.id ?? null),
            reason: (r.reason as RefundReason | null) ?? null,
            receipt_number: null,
            source_transfer_reversal: null,
            status: r.status as RefundStatus,
            transfer_reversal: null,
            idempotencyKey: null,
            createdAtMs: r.created * 1000,
            paymentIntentOrderId: orderId,
            paymentIntentOperationId: pi.metadata.operation_id ?? null,
          });
        }
        return out;
      } catch {
        return null;
      }
    },
    stats: async () => null,
  };
  return truth;
}

export function unavailableTruth(reason: string): StripeTruth {
  return {
    source: 'unavailable',
    description: reason,
    paymentIntents: async () => null,
    refunds: async () => null,
    stats: async () => null,
  };
}
