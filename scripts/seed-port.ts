// The seed algorithm (bench/peers/contestants/seed.ts, docs/compared.md) on this product's table, as bench:engine and profile-single-order.ts run
// it: request_charge + execute_charge's happy path, statement for statement (four round trips).
import type { Db } from '../lambdas/payments/db.ts';
import { idempotencyKey } from '../lambdas/payments/decisions.ts';
import type { StripeGateway } from '../lambdas/payments/stripe-gateway.ts';
import type { ChargeInput } from '../lambdas/payments/types.ts';

/** The seed algorithm, statement for statement (request_charge, _load, _mark_attempt_started, _record). */
// (The seed's ON CONFLICT (order_id, kind): since migrations/007_refunds.sql the one-charge-per-order
// identity is the partial unique index on order_id WHERE kind = 'charge', the same arbiter.)
export async function seedStyleCharge(db: Db, gateway: StripeGateway, input: ChargeInput): Promise<string> {
  const inserted = await db.query<{ id: string }>(
    `INSERT INTO payment_operations (order_id, kind, amount, currency, customer_id, payment_method)
     VALUES ($1, 'charge', $2, $3, $4, $5) ON CONFLICT (order_id) WHERE kind = 'charge' DO NOTHING RETURNING id`,
    [input.orderId, input.amount, input.currency, input.customerId, input.paymentMethod],
  );
  let id = inserted.rows[0]?.id;
  if (!id) id = (await db.query<{ id: string }>(`SELECT id FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`, [input.orderId])).rows[0]!.id;
  const op = (
    await db.query<{ status: string }>(
      `SELECT status, external_id, (first_attempted_at IS NULL OR first_attempted_at > now() - interval '23 hours') AS within FROM payment_operations WHERE id = $1`,
      [id],
    )
  ).rows[0]!;
  if (op.status === 'succeeded' || op.status === 'failed') return op.status;
  await db.query('UPDATE payment_operations SET first_attempted_at = coalesce(first_attempted_at, now()) WHERE id = $1', [id]);
  const result = await gateway.createPaymentIntent({
    idempotencyKey: idempotencyKey(id, 0),
    amount: input.amount,
    currency: input.currency,
    customerId: input.customerId,
    paymentMethod: input.paymentMethod,
    metadata: { operation_id: id, order_id: input.orderId, key_generation: '0' },
  });
  const status = result.ok && result.value.status === 'succeeded' ? 'succeeded' : 'unknown';
  await db.query(
    `UPDATE payment_operations SET status = $2, external_id = $3, attempts = attempts + 1, updated_at = now(),
            settled_at = CASE WHEN $2 IN ('succeeded', 'failed') THEN now() END,
            next_attempt_at = CASE WHEN $2 IN ('succeeded', 'failed') THEN NULL ELSE next_attempt_at END
      WHERE id = $1 AND status IN ('pending', 'unknown')`,
    [id, status, result.ok ? result.value.id : null],
  );
  return status;
}
