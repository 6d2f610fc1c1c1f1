// "Another system" holding a key to the same Stripe account: it charges an order a second time behind
// the pipeline's back — its own idempotency key (`another-system:<order>`), the metadata the pipeline
// sends for the operation (operation_id, order_id, and the operation's CURRENT key_generation) — as a
// second integration's double send would. (It wrote key_generation 0 until 2026-12-01: when the chosen
// order's charge had been re-issued to generation 1 by the List step, the stray looked like our own
// generation-0 attempt succeeding after the re-issue, and the checker rightly called that an
// `unsafe_reissue` — of a re-issue the pipeline never made unsafe; test/local/pipeline-chaos failed on it once.) Only
// Stripe's events tell the product (a contradiction: the charge operation holds another
// PaymentIntent), and the duplicate-charge remedy refunds it. The demo and the soak drive the remedy
// end to end with it.
import type Stripe from 'stripe';
import type { Db } from '../lambdas/payments/db.ts';
import { createStripeClient } from '../lambdas/payments/stripe-gateway.ts';

export const ANOTHER_SYSTEM_KEY_PREFIX = 'another-system:';

export interface ChargedAgain {
  readonly orderId: string;
  readonly operationId: string;
  /** Null: the create failed (a fault); Stripe's record says whether it charged after all. */
  readonly paymentIntent: Stripe.PaymentIntent | null;
}

export class AnotherSystem {
  readonly #stripe: Stripe;

  constructor(apiBase: string, client: { readonly maxNetworkRetries: number; readonly timeoutMs: number }) {
    this.#stripe = createStripeClient({ apiKey: 'sk_test_another_system', apiBase, ...client });
  }

  /**
   * Charge again, with what its charge operation holds, each of these orders whose charge has
   * succeeded (the others are left out: nothing to double) — the first `limit` of them, in the order given. The fake's faults apply to this caller
   * too: the SDK's retries reuse the key, so one PaymentIntent per order at most.
   */
  async chargeAgain(db: Db, orderIds: readonly string[], limit: number = orderIds.length): Promise<ChargedAgain[]> {
    if (orderIds.length === 0 || limit <= 0) return [];
    const { rows } = await db.query<{ id: string; order_id: string; amount: string; currency: string; customer_id: string; payment_method: string; key_generation: number }>(
      `SELECT id::text, order_id, amount::text, currency, customer_id, payment_method, key_generation FROM payment_operations
        WHERE kind = 'charge' AND status = 'succeeded' AND order_id = ANY($1::text[])
        ORDER BY array_position($1::text[], order_id) LIMIT $2`,
      [[...orderIds], limit],
    );
    const charged: ChargedAgain[] = [];
    for (const op of rows) {
      const paymentIntent = await this.#stripe.paymentIntents
        .create(
          { amount: Number(op.amount), currency: op.currency, customer: op.customer_id, payment_method: op.payment_method, confirm: true, off_session: true, metadata: { operation_id: op.id, order_id: op.order_id, key_generation: String(op.key_generation) } },
          { idempotencyKey: `${ANOTHER_SYSTEM_KEY_PREFIX}${op.order_id}` },
        )
        .catch(() => null);
      charged.push({ orderId: op.order_id, operationId: op.id, paymentIntent });
    }
    return charged;
  }
}

/** Whether every one of these (extra) PaymentIntents has its remedy refund operation final, or in review. */
export async function remediesSettled(db: Db, paymentIntentIds: readonly string[]): Promise<boolean> {
  if (paymentIntentIds.length === 0) return true;
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM payment_operations WHERE refund_payment_intent = ANY($1::text[]) AND (status IN ('succeeded', 'failed') OR review_reason IS NOT NULL)`,
    [[...paymentIntentIds]],
  );
  return rows[0]!.n === paymentIntentIds.length;
}
