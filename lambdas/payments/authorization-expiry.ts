// Authorizations Stripe lets expire (docs/model.md#manual-capture): a manual charge nobody captured
// or canceled is canceled by Stripe itself (`cancellation_reason: automatic`) a set time after the
// PaymentIntent was made — 7 days by default ("Uncaptured PaymentIntents are cancelled a set number
// of days (7 by default) after their creation", docs.stripe.com/api/payment_intents/capture; 7 days
// for customer-initiated card payments of every brand, docs.stripe.com/payments/place-a-hold-on-a-payment-method).
//
// The reconciler runs this after its due operations, under the same request budget:
//
//   lapsed authorizations (first send + validity + margin ≤ now, no capture or cancel) ─▶ retrieve the
//   PaymentIntent with our key, as its account ─▶ canceled: the expiry recorded as the authorization's
//   cancel, final, announced Authorization Expired · captured outside the pipeline: a capture in review
//   · still held: looked at again next run
//
// No event settles this: an event is a hint; the retrieve, made with our key, is what is recorded.
import type { Db } from './db.ts';
import { EXPIRED_BY_STRIPE } from './decisions.ts';
import type { PaymentGateway } from './gateway.ts';
import { outboxInsertSql } from './operations-store.ts';

/** Stripe's default life of an uncaptured card authorization. */
export const DEFAULT_AUTHORIZATION_VALIDITY_MS = 7 * 24 * 3_600_000;
/**
 * How long after the estimated expiry the PaymentIntent is first looked at: Stripe's clock starts at
 * the PaymentIntent's creation, a moment after our first send; an early look only finds it held.
 */
export const EXPIRY_LOOK_MARGIN_MS = 10 * 60_000;

export interface ExpiryRun {
  /** Lapsed authorizations looked at. */
  readonly looked: number;
  /** Recorded as expired (Authorization Expired). */
  readonly expired: number;
  /** Found captured outside the pipeline: a capture operation in review. */
  readonly capturedElsewhere: number;
  /** Still held at Stripe, or the look failed: looked at again next run. */
  readonly stillHeld: number;
  readonly failed: number;
}

interface Lapsed {
  readonly id: string;
  readonly order_id: string;
  readonly external_id: string;
  readonly stripe_account: string | null;
}

/** The authorizations whose expiry has passed and that nothing settled yet, oldest first (the partial index of migrations/019). */
export async function findLapsedAuthorizations(db: Db, validityMs: number, limit: number, lookMarginMs: number = EXPIRY_LOOK_MARGIN_MS): Promise<Lapsed[]> {
  const { rows } = await db.query<Lapsed>(
    `SELECT c.id, c.order_id, c.external_id, c.stripe_account
       FROM payment_operations c
      WHERE c.capture_method = 'manual' AND c.status = 'succeeded' AND c.external_id IS NOT NULL
        AND c.first_attempted_at <= now() - ($1::bigint + $2::bigint) * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM payment_operations s
                         WHERE s.parent_operation_id = c.id AND s.kind IN ('capture', 'cancel_authorization'))
      ORDER BY c.first_attempted_at
      LIMIT $3`,
    [validityMs, lookMarginMs, limit],
  );
  return rows;
}

/**
 * Authorizations that expire within `withinMs` with nothing settling them: the AuthorizationsExpiring
 * gauge. The partial index holds manual charges only, and its scan stops at the window's edge.
 */
export async function countExpiringAuthorizations(db: Db, validityMs: number, withinMs: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n
       FROM payment_operations c
      WHERE c.capture_method = 'manual' AND c.status = 'succeeded'
        AND c.first_attempted_at <= now() - ($1::bigint - $2::bigint) * interval '1 millisecond'
        AND c.first_attempted_at > now() - $1::bigint * interval '1 millisecond'
        AND NOT EXISTS (SELECT 1 FROM payment_operations s
                         WHERE s.parent_operation_id = c.id AND s.kind IN ('capture', 'cancel_authorization'))`,
    [validityMs, withinMs],
  );
  return rows[0]?.n ?? 0;
}

/**
 * Record what the retrieve showed, in one statement: the settlement row (final for an expiry, in
 * review for a capture made elsewhere), its audit lines and its outbox row. Nothing when a capture
 * or cancel got there first (the unique index of migrations/019).
 */
async function recordLook(
  db: Db,
  charge: Lapsed,
  look: { readonly kind: 'expired'; readonly detail: Record<string, unknown> } | { readonly kind: 'captured_elsewhere'; readonly amount: number; readonly detail: Record<string, unknown> },
  actor: string,
): Promise<boolean> {
  const expired = look.kind === 'expired';
  const { rows } = await db.query<{ id: string }>(
    `WITH inserted AS (
       INSERT INTO payment_operations AS p
         (order_id, kind, parent_operation_id, cancellation_reason, amount, currency, customer_id, payment_method,
          status, external_id, review_reason, attempts, first_attempted_at, next_attempt_at, settled_at, event_sequence)
       SELECT c.order_id, CASE WHEN $3 THEN 'cancel_authorization' ELSE 'capture' END, c.id,
              CASE WHEN $3 THEN 'expired' END, CASE WHEN $3 THEN c.amount ELSE $4::bigint END,
              c.currency, c.customer_id, c.payment_method,
              CASE WHEN $3 THEN 'succeeded' ELSE 'unknown' END, $2::text,
              CASE WHEN $3 THEN NULL ELSE $7::text END,
              0, now(), NULL, CASE WHEN $3 THEN now() END, 1
         FROM payment_operations c WHERE c.id = $1::uuid
       ON CONFLICT (parent_operation_id) WHERE kind IN ('capture', 'cancel_authorization') DO NOTHING
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, step, from_status, to_status, external_id, key_generation, detail)
       SELECT id, $5::text, 'requested', NULL, NULL, 'pending', NULL, 0, jsonb_build_object('by', 'expiry_check') FROM inserted
       UNION ALL
       SELECT id, $5::text, 'outcome_recorded', 'expiry', 'pending', status, external_id, 0,
              $6::jsonb || CASE WHEN review_reason IS NOT NULL THEN jsonb_build_object('reviewReason', review_reason) ELSE '{}'::jsonb END
         FROM inserted
     ),
     outcome AS (
       SELECT i.*, NULL::text AS failure_code, uuidv7() AS event_id FROM inserted i
     ),
     outbox AS (
       ${outboxInsertSql('outcome', '$8', 'inserted')}
       RETURNING event_id
     )
     SELECT id::text FROM inserted`,
    [
      charge.id,
      charge.external_id,
      expired,
      look.kind === 'captured_elsewhere' ? look.amount : null,
      actor,
      JSON.stringify(look.detail),
      look.kind === 'captured_elsewhere'
        ? `PaymentIntent ${charge.external_id} was captured (${look.amount}) outside the pipeline — the Dashboard or another integration: check it, then resolve --as succeeded --payment-intent ${charge.external_id}`
        : null,
      null,
    ],
  );
  return rows.length > 0;
}

/**
 * One pass over the lapsed authorizations: at most `limit`, each one retrieve (`beforeCall` is the
 * reconciler's rate limiter; false: not now). Never throws for Stripe; a database failure propagates
 * to the reconciler, which reports it.
 */
export async function checkExpiredAuthorizations(options: {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  readonly validityMs?: number;
  /** @default EXPIRY_LOOK_MARGIN_MS */
  readonly lookMarginMs?: number;
  readonly limit?: number;
  readonly actor?: string;
  /** Asked before each retrieve (the reconciler's rate limiter), with the account it is made as (null: the platform). */
  readonly beforeCall?: (account: string | null) => Promise<boolean> | boolean;
}): Promise<ExpiryRun> {
  const lapsed = await findLapsedAuthorizations(options.db, options.validityMs ?? DEFAULT_AUTHORIZATION_VALIDITY_MS, options.limit ?? 100, options.lookMarginMs);
  const run = { looked: 0, expired: 0, capturedElsewhere: 0, stillHeld: 0, failed: 0 };
  for (const charge of lapsed) {
    if (!(await (options.beforeCall?.(charge.stripe_account) ?? true))) break;
    run.looked++;
    const answer = await options.gateway.retrievePaymentIntent(charge.external_id, { account: charge.stripe_account });
    if (!answer.ok) {
      run.failed++;
      continue;
    }
    const pi = answer.value;
    const detail = { paymentIntentStatus: pi.status, cancellationReason: pi.cancellationReason ?? null, amountReceived: pi.amountReceived ?? null };
    if (pi.status === 'canceled') {
      // Expired (automatic) or released by another hand (the Dashboard): either way it is no longer held.
      if (await recordLook(options.db, charge, { kind: 'expired', detail: { ...detail, expiredByStripe: pi.cancellationReason === EXPIRED_BY_STRIPE } }, options.actor ?? 'reconciler')) run.expired++;
    } else if (pi.status === 'succeeded') {
      if (await recordLook(options.db, charge, { kind: 'captured_elsewhere', amount: pi.amountReceived ?? pi.amount, detail }, options.actor ?? 'reconciler')) run.capturedElsewhere++;
    } else {
      run.stillHeld++;
    }
  }
  return run;
}
