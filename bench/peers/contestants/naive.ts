// Contestant 4: the naive handler. The Stripe SDK with its automatic per-call keys (stripe-node
// generates one per call and keeps it across its own retries), SQS redelivery as the retry, and the
// one precaution everybody takes: skip an order already recorded as done. Writes after the call.
import pg from 'pg';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { paymentIntentParams, fifoBatch, statusRowBeliefs, type Contestant } from '../contestant.ts';

export const naive: Contestant = {
  id: 'naive',
  title: 'naive (SDK keys, SQS retry)',
  store: 'postgresql',
  async start(ctx) {
    const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 10, application_name: 'peer-naive' });
    pool.on('error', () => {}); // idle connections die when the run's database is dropped
    await pool.query(`CREATE TABLE IF NOT EXISTS naive_charges (
      order_id text PRIMARY KEY, status text NOT NULL, payment_intent_id text, updated_at timestamptz NOT NULL DEFAULT now())`);
    const stripe = ctx.stripe();
    const save = (orderId: string, status: string, pi: string | null) =>
      pool.query(
        `INSERT INTO naive_charges (order_id, status, payment_intent_id) VALUES ($1, $2, $3)
         ON CONFLICT (order_id) DO UPDATE SET status = $2, payment_intent_id = $3, updated_at = now()`,
        [orderId, status, pi],
      );
    const chargeOne = async (body: string) => {
      const order = JSON.parse(body) as ChargeRequest;
      const done = await pool.query<{ status: string }>('SELECT status FROM naive_charges WHERE order_id = $1', [order.orderId]);
      if (done.rows[0]?.status === 'succeeded' || done.rows[0]?.status === 'failed') return;
      try {
        const pi = await stripe.paymentIntents.create(paymentIntentParams(order));
        await save(order.orderId, pi.status === 'requires_payment_method' ? 'failed' : pi.status, pi.id);
      } catch (error) {
        if ((error as { type?: string }).type === 'StripeCardError') {
          await save(order.orderId, 'failed', null);
          return;
        }
        throw error; // SQS delivers it again
      }
    };
    return {
      charge: async (event) => fifoBatch(event.Records, chargeOne),
      reconcile: null,
      beliefs: () => statusRowBeliefs(ctx.observer, 'naive_charges'),
      stop: () => pool.end(),
    };
  },
};
