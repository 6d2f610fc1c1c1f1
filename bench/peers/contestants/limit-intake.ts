// The limit behind the same intake: the limit's two statements (one batched write before the Stripe
// calls, one after; bench/peers/limit.ts) run inside the rig's SQS handler, so it pays what every
// contestant pays here and the bare limit does not — fauxqs's receive and delete, the event source,
// the fake Lambda runtime, all on the same CPUs. Clean runs only: no lease, no fence, no audit, no
// outbox, no recovery; a failed call fails the whole batch back to SQS. Not a design, a yardstick.
import pg from 'pg';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { paymentIntentParams, statusRowBeliefs, type Contestant } from '../contestant.ts';

export const limitBehindIntake: Contestant = {
  id: 'limit-intake',
  title: 'the limit behind the same SQS intake',
  store: 'postgresql',
  async start(ctx) {
    const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 10, application_name: 'peer-limit-intake' });
    pool.on('error', () => {}); // idle connections die when the run's database is dropped
    await pool.query('CREATE TABLE IF NOT EXISTS limit_intake_charges (order_id text PRIMARY KEY, status text NOT NULL, external_id text, updated_at timestamptz NOT NULL DEFAULT now())');
    const stripe = ctx.stripe();
    return {
      async charge(event) {
        const orders = event.Records.map((r) => JSON.parse(r.body) as ChargeRequest);
        try {
          await pool.query(`INSERT INTO limit_intake_charges (order_id, status) SELECT unnest($1::text[]), 'pending' ON CONFLICT DO NOTHING`, [orders.map((o) => o.orderId)]);
          const results = await Promise.all(orders.map((o) => stripe.paymentIntents.create(paymentIntentParams(o), { idempotencyKey: o.orderId })));
          await pool.query(
            `UPDATE limit_intake_charges l SET status = u.status, external_id = u.id, updated_at = now()
               FROM unnest($1::text[], $2::text[], $3::text[]) AS u(order_id, status, id) WHERE l.order_id = u.order_id`,
            [orders.map((o) => o.orderId), results.map((r) => (r.status === 'requires_payment_method' ? 'failed' : r.status)), results.map((r) => r.id)],
          );
          return { batchItemFailures: [] };
        } catch {
          return { batchItemFailures: event.Records.map((r) => ({ itemIdentifier: r.messageId })) };
        }
      },
      reconcile: null,
      beliefs: () => statusRowBeliefs(ctx.observer, 'limit_intake_charges'),
      stop: () => pool.end(),
    };
  },
};
