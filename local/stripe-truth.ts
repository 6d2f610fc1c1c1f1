// What Stripe itself holds, for the ledger's Stripe-side figures and the invariant checks. The
// database says what the product believes; only this says what happened.
//
//   fake, in this process   every PaymentIntent ever created, request and fault counters (exact)
//   fake, another process   the same through its /__fake/ control API (`npm run fake-stripe`)
//   real Stripe test mode   the List API, PaymentIntents created since the run began, kept when their
//                           metadata names an order of this run. Real time (Search lags), but no
//                           request or fault counters: Stripe does not tell those
//   anything else           (stripe-mock, a proxy) unavailable: the ledger says so instead of guessing
import Stripe from 'stripe';
import type { FakeStripe, FakeStripeStats, PaymentIntentRecord, PaymentIntentStatus } from './fake-stripe/types.ts';

export type StripeTruthSource = 'fake' | 'fake-control-api' | 'stripe-list-api' | 'unavailable';

export interface StripeTruth {
  readonly source: StripeTruthSource;
  /** One line for the ledger. */
  readonly description: string;
  /** Every PaymentIntent of this run; null when unavailable. */
  paymentIntents(orderIds?: ReadonlySet<string>): Promise<PaymentIntentRecord[] | null>;
  /** Request, fault and key counters; null when Stripe does not tell. */
  stats(): Promise<FakeStripeStats | null>;
}

export function fakeTruth(fake: FakeStripe): StripeTruth {
  return {
    source: 'fake',
    description: `the fake Stripe's own record of every PaymentIntent (${fake.url})`,
    paymentIntents: async () => fake.paymentIntents(),
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
    stats: () => get<FakeStripeStats>('/__fake/stats'),
  };
}

/** Real Stripe (test mode): the List API, filtered to this run's orders. */
export function listApiTruth(stripe: Stripe, runStartedAt: Date, label: string): StripeTruth {
  return {
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
    stats: async () => null,
  };
}

export function unavailableTruth(reason: string): StripeTruth {
  return { source: 'unavailable', description: reason, paymentIntents: async () => null, stats: async () => null };
}
