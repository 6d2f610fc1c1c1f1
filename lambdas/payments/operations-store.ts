// All SQL of payment_operations, and of its audit trail and outbox rows that are written in the same
// statements. Every function is ONE round trip: the engine's budget is one statement before the
// Stripe call (request + claim) and one after it (outcome + audit event + outbox row).
// Values are always bound parameters; batches travel as one jsonb array parameter.
import { prepared, type Db } from './db.ts';
import type { AttemptStep, Outcome, WatchTimings } from './decisions.ts';
import type { EvidenceEvent } from './evidence.ts';
import { AUDIT_DETAIL } from './audit-trail.ts';
import type { AuthorizationInput, ChargeInput, ClaimedOperation, Operation, OperationKind, OperationStatus, RefundInput, RefundReason } from './types.ts';

/** Raw row shape of to_jsonb(payment_operations). */
interface OperationJson {
  id: string;
  kind?: OperationKind;
  refund_id?: string | null;
  parent_operation_id?: string | null;
  refund_reason?: RefundReason | null;
  refund_payment_intent?: string | null;
  failed_after_success_at?: string | null;
  failed_after_success_reason?: string | null;
  description?: string | null;
  statement_descriptor_suffix?: string | null;
  charge_metadata?: Record<string, string> | null;
  stripe_account?: string | null;
  application_fee_amount?: number | string | null;
  transfer_destination?: string | null;
  capture_method?: 'manual' | null;
  cancellation_reason?: 'expired' | null;
  order_id: string;
  amount: number | string;
  currency: string;
  customer_id: string;
  payment_method: string;
  status: OperationStatus;
  external_id: string | null;
  attempts: number;
  first_attempted_at: string | null;
  last_error: string | null;
  last_error_class: string | null;
  lease_token: string | null;
  lease_until: string | null;
  next_attempt_at: string | null;
  review_reason: string | null;
  key_generation: number;
  created_at: string;
  updated_at: string;
  settled_at: string | null;
}

const date = (value: string | null): Date | null => (value === null ? null : new Date(value));

export function toOperation(row: OperationJson): Operation {
  return {
    id: row.id,
    kind: row.kind ?? 'charge',
    refund:
      row.kind === 'refund' && row.refund_id && row.parent_operation_id
        ? {
            refundId: row.refund_id,
            parentOperationId: row.parent_operation_id,
            reason: row.refund_reason ?? null,
            paymentIntentId: row.refund_payment_intent ?? null,
            failedAfterSuccess: row.failed_after_success_at
              ? { at: new Date(row.failed_after_success_at), failureReason: row.failed_after_success_reason ?? null }
              : null,
          }
        : null,
    authorization:
      (row.kind === 'capture' || row.kind === 'cancel_authorization') && row.parent_operation_id
        ? { chargeOperationId: row.parent_operation_id, cancellationReason: row.cancellation_reason ?? null }
        : null,
    orderId: row.order_id,
    amount: Number(row.amount),
    currency: row.currency,
    customerId: row.customer_id,
    paymentMethod: row.payment_method,
    ...(row.description ? { description: row.description } : {}),
    ...(row.statement_descriptor_suffix ? { statementDescriptorSuffix: row.statement_descriptor_suffix } : {}),
    ...(row.charge_metadata && Object.keys(row.charge_metadata).length > 0 ? { metadata: row.charge_metadata } : {}),
    ...(row.stripe_account ? { account: row.stripe_account } : {}),
    ...(row.application_fee_amount !== null && row.application_fee_amount !== undefined ? { applicationFeeAmount: Number(row.application_fee_amount) } : {}),
    ...(row.transfer_destination ? { transferDestination: row.transfer_destination } : {}),
    ...(row.capture_method ? { captureMethod: row.capture_method } : {}),
    status: row.status,
    externalId: row.external_id,
    attempts: row.attempts,
    firstAttemptedAt: date(row.first_attempted_at),
    lastError: row.last_error,
    lastErrorClass: row.last_error_class,
    leaseToken: row.lease_token,
    leaseUntil: date(row.lease_until),
    nextAttemptAt: date(row.next_attempt_at),
    reviewReason: row.review_reason,
    keyGeneration: row.key_generation,
    createdAt: new Date(row.created_at),
    updatedAt: new Date(row.updated_at),
    settledAt: date(row.settled_at),
  };
}

/** A refund's charge as the claim saw it (CHARGE_OF). */
interface ChargeJson {
  status: OperationStatus;
  external_id: string | null;
}

function toClaimed(row: OperationJson, claimedAt: Date, charge: ChargeJson | null = null): ClaimedOperation {
  const op = toOperation(row);
  if (op.leaseToken === null || op.firstAttemptedAt === null) throw new Error(`operation ${op.id} was not claimed`);
  return {
    ...op,
    leaseToken: op.leaseToken,
    firstAttemptedAt: op.firstAttemptedAt,
    claimedAt,
    charge: charge ? { status: charge.status, paymentIntentId: charge.external_id } : null,
  };
}

/**
 * A refund row `r` (an alias of payment_operations) that holds part of its charge's amount: not
 * failed, and not failed by Stripe after it succeeded (migrations/009; Stripe counts only refunds that
 * hold money). The insert trigger of 009 (payment_operations_refund_rules) says the same in plpgsql;
 * the duplicate remedy's refunds (refund_payment_intent) are excluded by the callers, as there.
 * `ops refunds list` (lambdas/ops/commands.ts) counts refunded + in flight by the same rule in TypeScript.
 */
const REFUND_HOLDS = (r: string) => `${r}.status <> 'failed' AND ${r}.failed_after_success_at IS NULL`;

/** The charge operation's PaymentIntent (its external_id) of a refund row `p`; NULL for a charge (no parent). */
export const CHARGE_PAYMENT_INTENT = (p: string) => `(SELECT rpi.external_id FROM payment_operations rpi WHERE rpi.id = ${p}.parent_operation_id)`;

/**
 * The PaymentIntent a row `p` (an alias of payment_operations) refunds: the duplicate remedy's named
 * one, else its charge operation's; NULL for a charge. The SQL form of types.ts paymentIntentOfRefund.
 */
export const PAYMENT_INTENT_OF_REFUND = (p: string) => `CASE WHEN ${p}.kind = 'refund' THEN coalesce(${p}.refund_payment_intent,
  ${CHARGE_PAYMENT_INTENT(p)}) END`;

/** The charge of a refund row `x` (a CTE alias), read in the claim's statement: no extra round trip. */
const CHARGE_OF = (x: string) =>
  `(SELECT jsonb_build_object('status', chg.status, 'external_id', chg.external_id) FROM payment_operations chg WHERE chg.id = ${x}.parent_operation_id)`;

// The claim, shared by the three ways to claim (and an event's claim, inbox-store.ts claimForEvent).
// A claim takes the lease, starts the key window if it has not started (this is the moment BEFORE the
// first send), and moves next_attempt_at to the end of the lease: if this worker dies, the operation
// becomes due again exactly when the lease expires. $2 is the lease token, $3 the lease in ms.
export const CLAIM_SET = `
  lease_token = $2::uuid,
  lease_until = now() + $3::bigint * interval '1 millisecond',
  next_attempt_at = now() + $3::bigint * interval '1 millisecond',
  first_attempted_at = coalesce(p.first_attempted_at, now()),
  updated_at = now()`;

/**
 * A batch given as one jsonb array parameter, row by row: `${BATCH('$1')} AS x(col type, …)`. Not
 * jsonb_to_recordset, which is planned as 100 rows: against that, looking each row up by key looked
 * dearer than reading a table of a few thousand operations whole. batch_elements (migrations/025)
 * is planned as the ten rows a batch is at most.
 */
export const BATCH = (param: string) => `batch_elements(${param}::jsonb) AS batch_row(element) CROSS JOIN LATERAL jsonb_to_record(batch_row.element)`;

/**
 * Open: not final. Said two ways, for two kinds of reader. The sweep walks the open operations, so
 * it names them as the partial index payment_operations_open does, and reads that index. A write
 * that names its rows (by id, by order) says the same of them the other way round — the status CHECK
 * allows four values, so "not final" is "pending or unknown" — which no plan can match to that index.
 * It then finds its rows by key, never by walking every open operation: planned for statistics that
 * saw no backlog, a write that may read the open index does exactly that, once per batch, during the
 * backlog (test/charge-path-plans.test.ts).
 */
const OPEN_FOR_SWEEP = `p.status IN ('pending', 'unknown')`;
const OPEN_BY_KEY = (r: string) => `${r}.status NOT IN ('succeeded', 'failed')`;

// Claimable: open, not waiting for a human, due, and nobody's live lease. A refund also waits until
// its order's charge is final (succeeded: refunded; failed: settled as failed without a call).
const claimable = (open: string) => `
  ${open} AND p.review_reason IS NULL
  AND p.next_attempt_at <= now()
  AND (p.lease_until IS NULL OR p.lease_until <= now())
  AND (p.kind = 'charge' OR EXISTS (SELECT 1 FROM payment_operations c
                                     WHERE c.id = p.parent_operation_id AND c.status IN ('succeeded', 'failed')))`;
const CLAIMABLE_BY_KEY = claimable(OPEN_BY_KEY('p'));

/**
 * The columns of an audit line that a claim writes, in the order the SELECTs below give them. The
 * claim's lease (token, end) is in columns of its own, not in `detail` (migrations/023): a uuid and a
 * timestamp in 24 bytes where the JSON keys and text took about 110, on two of a charge's three lines.
 * So is the claim's attempt number (migrations/029): 4 bytes where {"attempt": n} took 29.
 */
export const ATTEMPT_COLUMNS = 'operation_id, actor, action, from_status, to_status, key_generation, lease_token, lease_until, detail, attempt';

/** The request's audit line of each row of the CTE `inserted` ($4: the actor), with `detail`. */
const requestedLineOfInserted = (detail: string) =>
  `SELECT id, $4::text, 'requested', NULL, status, key_generation, NULL::uuid, NULL::timestamptz, ${detail}, NULL::int FROM inserted`;

/** The claim's audit line of each row of the CTE `inserted` that was claimed as it was made ($4: the actor). */
const ATTEMPT_LINE_OF_INSERTED = `SELECT id, $4::text, 'attempt_started', status, status, key_generation, lease_token, lease_until, '{}'::jsonb, attempts + 1
         FROM inserted WHERE lease_token IS NOT NULL`;

/**
 * The claim's audit line, one per row of the CTE `claimed c`: $4 is the actor. An event's claim
 * names the parameter that holds its Stripe event id, which the line then carries too.
 */
export const attemptStartedEvent = (options: { readonly stripeEventIdParam?: number } = {}) => `
  SELECT c.id, $4::text, 'attempt_started', c.status, c.status, c.key_generation, c.lease_token, c.lease_until,
         ${options.stripeEventIdParam === undefined ? `'{}'::jsonb` : `jsonb_build_object('stripeEventId', $${Math.trunc(options.stripeEventIdParam)}::text)`},
         c.attempts + 1
    FROM claimed c`;
const ATTEMPT_STARTED_EVENT = attemptStartedEvent();

export type RequestSource = 'inserted' | 'claimed' | 'existing';

export interface RequestRow {
  readonly index: number;
  readonly source: RequestSource;
  readonly operation: Operation;
  readonly claimed: ClaimedOperation | null;
}

/** requestAndClaim's statement; `refuse`: a concurrent insert of one of its orders fails it (see there). */
const requestAndClaimSql = (onConflict: 'refuse' | 'skip') => `WITH input AS (
       SELECT i.* FROM ${BATCH('$1')}
         AS i(idx int, order_id text, amount bigint, currency text, customer_id text, payment_method text,
              description text, statement_descriptor_suffix text, charge_metadata jsonb,
              stripe_account text, application_fee_amount bigint, transfer_destination text, capture_method text, claim boolean)
     ),
     inserted AS (
       INSERT INTO payment_operations AS p
         (order_id, amount, currency, customer_id, payment_method, description, statement_descriptor_suffix, charge_metadata,
          stripe_account, application_fee_amount, transfer_destination, capture_method,
          lease_token, lease_until, first_attempted_at, next_attempt_at)
       SELECT order_id, amount, currency, customer_id, payment_method, description, statement_descriptor_suffix, charge_metadata,
              stripe_account, application_fee_amount, transfer_destination, capture_method,
              CASE WHEN claim THEN $2::uuid END,
              CASE WHEN claim THEN now() + $3::bigint * interval '1 millisecond' END,
              CASE WHEN claim THEN now() END,
              CASE WHEN claim THEN now() + $3::bigint * interval '1 millisecond' ELSE now() END
         FROM input i
         -- Each order looked up by the order index. NOT EXISTS here was planned as a hash anti join
         -- over every operation when the table looked small next to the 100 rows the planner assumes
         -- for jsonb_to_recordset: a scan of the table per batch, with 5,000 analyzed operations
         -- (test/charge-path-plans.test.ts). A LATERAL subquery with LIMIT 1 runs once per order.
         LEFT JOIN LATERAL (SELECT true AS taken FROM payment_operations x WHERE x.order_id = i.order_id AND x.kind = 'charge' LIMIT 1) x ON true
        WHERE x.taken IS NULL
        ORDER BY idx
       ${onConflict === 'skip' ? `ON CONFLICT (order_id) WHERE kind = 'charge' DO NOTHING` : ''}
       RETURNING p.*
     ),
     claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
         FROM input i
        WHERE i.claim AND p.order_id = i.order_id AND p.kind = 'charge'
          AND (p.amount, p.currency, p.customer_id, p.payment_method)
              = (i.amount, i.currency, i.customer_id, i.payment_method)
          AND (p.description, p.statement_descriptor_suffix, p.charge_metadata,
               p.stripe_account, p.application_fee_amount, p.transfer_destination, p.capture_method)
              IS NOT DISTINCT FROM (i.description, i.statement_descriptor_suffix, i.charge_metadata,
               i.stripe_account, i.application_fee_amount, i.transfer_destination, i.capture_method)
          AND ${CLAIMABLE_BY_KEY}
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${requestedLineOfInserted(`'{}'::jsonb`)}
       UNION ALL
       ${ATTEMPT_LINE_OF_INSERTED}
       UNION ALL ${ATTEMPT_STARTED_EVENT}
     )
     SELECT i.idx, r.source, r.op, now() AS db_now
       FROM input i
       JOIN LATERAL (
         SELECT source, op FROM (
           SELECT 1 AS rank, 'inserted' AS source, to_jsonb(x) AS op FROM inserted x WHERE x.order_id = i.order_id
           UNION ALL
           SELECT 2, 'claimed', to_jsonb(x) FROM claimed x WHERE x.order_id = i.order_id
           UNION ALL
           SELECT 3, 'existing', to_jsonb(x) FROM payment_operations x WHERE x.order_id = i.order_id AND x.kind = 'charge'
         ) candidates ORDER BY rank LIMIT 1
       ) r ON true`;

/** A unique violation of the named index (SQLSTATE 23505), as pg reports it. */
function isUniqueViolation(error: unknown, constraint: string): boolean {
  return typeof error === 'object' && error !== null && (error as { code?: unknown }).code === '23505' && (error as { constraint?: unknown }).constraint === constraint;
}

/**
 * Make every request of a batch durable and claim the ones asked for, in ONE statement:
 * insert what is new (claimed at birth), claim what exists with the same parameters and is due, and
 * return what exists otherwise (settled, leased, in review, or conflicting — the caller compares).
 * Order ids must be distinct within one call. An index with no row came from a concurrent insert
 * that this statement's snapshot cannot see yet; the caller simply asks again.
 */
export async function requestAndClaim(
  db: Db,
  requests: readonly { readonly input: ChargeInput; readonly claim: boolean }[],
  leaseToken: string,
  leaseMs: number,
  actor: string,
): Promise<Map<number, RequestRow>> {
  const payload = requests.map(({ input, claim }, index) => ({
    idx: index,
    order_id: input.orderId,
    amount: input.amount,
    currency: input.currency,
    customer_id: input.customerId,
    payment_method: input.paymentMethod,
    description: input.description ?? null,
    statement_descriptor_suffix: input.statementDescriptorSuffix ?? null,
    charge_metadata: input.metadata ?? {},
    stripe_account: input.account ?? null,
    application_fee_amount: input.applicationFeeAmount ?? null,
    transfer_destination: input.transferDestination ?? null,
    capture_method: input.captureMethod ?? null,
    claim,
  }));
  const statement = async (onConflict: 'refuse' | 'skip') =>
    prepared<{ idx: number; source: RequestSource; op: OperationJson; db_now: Date }>(
      db,
      onConflict === 'refuse' ? 'payments.request_and_claim' : 'payments.request_and_claim_on_conflict',
      requestAndClaimSql(onConflict),
      [JSON.stringify(payload), leaseToken, leaseMs, actor],
    );
  // A plain INSERT of the orders this statement's snapshot does not hold: no speculative insertion,
  // so no confirmation record in the WAL (48 bytes a charge). An order inserted meanwhile by another
  // transaction makes it fail whole (unique violation, nothing written); then the same statement
  // with ON CONFLICT DO NOTHING, which takes that order as existing.
  let rows: { idx: number; source: RequestSource; op: OperationJson; db_now: Date }[];
  try {
    ({ rows } = await statement('refuse'));
  } catch (error) {
    if (!isUniqueViolation(error, 'payment_operations_one_charge_per_order')) throw error;
    ({ rows } = await statement('skip'));
  }
  const result = new Map<number, RequestRow>();
  for (const row of rows) {
    const operation = toOperation(row.op);
    const claimed = row.source === 'existing' || operation.leaseToken !== leaseToken ? null : toClaimed(row.op, row.db_now);
    result.set(row.idx, { index: row.idx, source: row.source, operation, claimed });
  }
  return result;
}

/**
 * How a refund request was taken: `inserted` / `claimed` / `existing` as for charges; otherwise refused,
 * with nothing written — `no_charge` (no charge operation for the order), `charge_failed` (the
 * charge is final-failed: nothing to refund), `exceeds_charge` (with the refunds of the order that
 * are not failed, it would refund more than was charged).
 */
export type RefundVerdict = RequestSource | 'no_charge' | 'charge_failed' | 'exceeds_charge' | 'not_captured';

export interface RefundRequestRow {
  readonly verdict: RefundVerdict;
  /** The refund operation (inserted, claimed or existing); null when refused. */
  readonly operation: Operation | null;
  readonly claimed: ClaimedOperation | null;
  /** The order's charge: its amount, and the sum of its refunds that hold money (REFUND_HOLDS; this one excluded if new; the duplicate remedy's never counted). */
  readonly chargeAmount: number | null;
  readonly refundedOrHeld: number;
}

/**
 * Make one refund request durable and claim it when its charge is final-succeeded, in ONE statement
 * (the refund's budget is the charge's: this round trip, the Stripe call, the outcome's). The rules
 * are judged in the statement and again by the insert trigger of migrations/007_refunds.sql, which
 * locks the charge's row: a concurrent refund of the same order that this statement's snapshot could
 * not see makes the trigger raise (check_violation refunds_within_charge), and the caller asks again,
 * seeing it then. A concurrent insert of the same refund id leaves no row: the caller asks again.
 */
export async function requestRefundAndClaim(
  db: Db,
  input: RefundInput,
  claim: boolean,
  leaseToken: string,
  leaseMs: number,
  actor: string,
  /** Merged into the `requested` audit event, in this statement (an operator's reason and identity). */
  requestedDetail: Readonly<Record<string, unknown>> = {},
): Promise<RefundRequestRow | null> {
  const { rows } = await prepared<{
    verdict: RefundVerdict;
    op: OperationJson | null;
    charge: ChargeJson | null;
    charge_amount: number | string | null;
    held: number | string;
    db_now: Date;
  }>(
    db,
    'payments.request_refund_and_claim',
    `WITH i AS (SELECT $1::text AS order_id, $5::text AS refund_id, $6::bigint AS amount, $7::text AS reason, $8::boolean AS claim),
     charge AS (SELECT c.* FROM payment_operations c, i WHERE c.order_id = i.order_id AND c.kind = 'charge'),
     -- What may be refunded: the charge's amount, or — a manual charge (migrations/019) — what its
     -- capture took; NULL while it is not captured (the refund is refused: cancel it instead).
     bound AS (SELECT CASE WHEN c.capture_method IS NULL THEN c.amount
                           ELSE (SELECT k.amount FROM payment_operations k
                                  WHERE k.parent_operation_id = c.id AND k.kind = 'capture' AND k.status = 'succeeded') END AS amount
                 FROM charge c),
     -- The duplicate remedy's refunds give back ANOTHER PaymentIntent: they do not count against the
     -- charge's amount (as in the trigger of 007/009; the property model found the difference). Nor
     -- does a refund Stripe failed after it succeeded (009): its amount is refundable again.
     held AS (SELECT coalesce(sum(r.amount), 0)::bigint AS held FROM payment_operations r, charge c
               WHERE r.parent_operation_id = c.id AND r.kind = 'refund' AND ${REFUND_HOLDS('r')} AND r.refund_payment_intent IS NULL),
     existing AS (SELECT r.* FROM payment_operations r, i WHERE r.order_id = i.order_id AND r.kind = 'refund' AND r.refund_id = i.refund_id),
     verdict AS (
       SELECT CASE WHEN EXISTS (SELECT 1 FROM existing) THEN 'existing'
                   WHEN NOT EXISTS (SELECT 1 FROM charge) THEN 'no_charge'
                   WHEN (SELECT status FROM charge) = 'failed' THEN 'charge_failed'
                   WHEN (SELECT amount FROM bound) IS NULL THEN 'not_captured'
                   WHEN (SELECT held FROM held) + i.amount > (SELECT amount FROM bound) THEN 'exceeds_charge'
                   ELSE 'insert' END AS v
         FROM i
     ),
     inserted AS (
       INSERT INTO payment_operations AS p
         (order_id, kind, refund_id, parent_operation_id, refund_reason, amount, currency, customer_id, payment_method,
          lease_token, lease_until, first_attempted_at, next_attempt_at)
       SELECT i.order_id, 'refund', i.refund_id, c.id, i.reason, i.amount, c.currency, c.customer_id, c.payment_method,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN $2::uuid END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() + $3::bigint * interval '1 millisecond' END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() + $3::bigint * interval '1 millisecond' ELSE now() END
         FROM i, charge c, verdict v WHERE v.v = 'insert'
       ON CONFLICT (order_id, refund_id) WHERE kind = 'refund' DO NOTHING
       RETURNING p.*
     ),
     claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
         FROM i, existing e
        WHERE i.claim AND p.id = e.id AND p.amount = i.amount AND p.refund_reason IS NOT DISTINCT FROM i.reason
          AND ${CLAIMABLE_BY_KEY}
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${requestedLineOfInserted(`$9::jsonb || jsonb_build_object('refundId', refund_id)`)}
       UNION ALL
       ${ATTEMPT_LINE_OF_INSERTED}
       UNION ALL ${ATTEMPT_STARTED_EVENT}
     ),
     chosen AS (
       SELECT 1 AS rank, 'inserted' AS source, to_jsonb(x) AS op, x.parent_operation_id FROM inserted x
       UNION ALL SELECT 2, 'claimed', to_jsonb(x), x.parent_operation_id FROM claimed x
       UNION ALL SELECT 3, 'existing', to_jsonb(x), x.parent_operation_id FROM existing x
     )
     SELECT CASE WHEN v.v = 'insert' OR v.v = 'existing' THEN coalesce(ch.source, 'missing') ELSE v.v END AS verdict,
            ch.op, ${CHARGE_OF('ch')} AS charge,
            (SELECT amount FROM bound) AS charge_amount, (SELECT held FROM held) AS held, now() AS db_now
       FROM verdict v LEFT JOIN LATERAL (SELECT * FROM chosen ORDER BY rank LIMIT 1) ch ON true`,
    [input.orderId, leaseToken, leaseMs, actor, input.refundId, input.amount, input.reason, claim, JSON.stringify(requestedDetail)],
  );
  const row = rows[0];
  if (!row || (row.verdict as string) === 'missing') return null;
  const operation = row.op ? toOperation(row.op) : null;
  const claimed = operation && row.verdict !== 'existing' && operation.leaseToken === leaseToken && row.op ? toClaimed(row.op, row.db_now, row.charge) : null;
  return {
    verdict: row.verdict,
    operation,
    claimed,
    chargeAmount: row.charge_amount === null ? null : Number(row.charge_amount),
    refundedOrHeld: Number(row.held),
  };
}

/**
 * How a capture / cancel_authorization request was taken: `inserted` / `claimed` / `existing` as for
 * refunds; otherwise refused with nothing written — `no_charge`, `not_manual` (captured at once),
 * `charge_failed`, `exceeds_authorization`, `already_settled` (the authorization's one capture or
 * cancel exists, of the other kind — an expiry is a cancel: migrations/019).
 */
export type AuthorizationVerdict = RequestSource | 'no_charge' | 'not_manual' | 'charge_failed' | 'exceeds_authorization' | 'already_settled';

export interface AuthorizationRequestRow {
  readonly verdict: AuthorizationVerdict;
  /** The capture or cancel operation (inserted, claimed or existing); the other kind's when already_settled; null otherwise. */
  readonly operation: Operation | null;
  readonly claimed: ClaimedOperation | null;
  /** The authorized amount (the charge's), when there is a charge. */
  readonly authorizedAmount: number | null;
}

/**
 * Make one capture or cancel of an authorization durable and claim it when its charge is final, in
 * ONE statement — the refund request's shape (requestRefundAndClaim): the rules judged here and again
 * by the insert trigger of migrations/019, which locks the charge's row; the partial unique index
 * (one capture or cancel per authorization) makes a concurrent request of either kind insert nothing,
 * and the caller asks again, seeing it then.
 */
export async function requestAuthorizationAndClaim(
  db: Db,
  input: AuthorizationInput,
  claim: boolean,
  leaseToken: string,
  leaseMs: number,
  actor: string,
): Promise<AuthorizationRequestRow | null> {
  const { rows } = await prepared<{ verdict: AuthorizationVerdict; op: OperationJson | null; charge: ChargeJson | null; authorized: number | string | null; db_now: Date }>(
    db,
    'payments.request_authorization_and_claim',
    `WITH i AS (SELECT $1::text AS order_id, $5::text AS kind, $6::bigint AS amount, $7::boolean AS claim),
     charge AS (SELECT c.* FROM payment_operations c, i WHERE c.order_id = i.order_id AND c.kind = 'charge'),
     settlement AS (SELECT s.* FROM payment_operations s, charge c
                     WHERE s.parent_operation_id = c.id AND s.kind IN ('capture', 'cancel_authorization')),
     verdict AS (
       SELECT CASE WHEN EXISTS (SELECT 1 FROM settlement x WHERE x.kind = i.kind) THEN 'existing'
                   WHEN EXISTS (SELECT 1 FROM settlement) THEN 'already_settled'
                   WHEN NOT EXISTS (SELECT 1 FROM charge) THEN 'no_charge'
                   WHEN (SELECT capture_method FROM charge) IS NULL THEN 'not_manual'
                   WHEN (SELECT status FROM charge) = 'failed' THEN 'charge_failed'
                   WHEN i.kind = 'capture' AND i.amount > (SELECT amount FROM charge) THEN 'exceeds_authorization'
                   ELSE 'insert' END AS v
         FROM i
     ),
     inserted AS (
       INSERT INTO payment_operations AS p
         (order_id, kind, parent_operation_id, amount, currency, customer_id, payment_method,
          lease_token, lease_until, first_attempted_at, next_attempt_at)
       SELECT i.order_id, i.kind, c.id, CASE WHEN i.kind = 'capture' THEN coalesce(i.amount, c.amount) ELSE c.amount END,
              c.currency, c.customer_id, c.payment_method,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN $2::uuid END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() + $3::bigint * interval '1 millisecond' END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() END,
              CASE WHEN i.claim AND c.status = 'succeeded' THEN now() + $3::bigint * interval '1 millisecond' ELSE now() END
         FROM i, charge c, verdict v WHERE v.v = 'insert'
       ON CONFLICT (parent_operation_id) WHERE kind IN ('capture', 'cancel_authorization') DO NOTHING
       RETURNING p.*
     ),
     claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
         FROM i, settlement e
        WHERE i.claim AND p.id = e.id AND e.kind = i.kind AND (i.amount IS NULL OR p.amount = i.amount)
          AND ${CLAIMABLE_BY_KEY}
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${requestedLineOfInserted(`'{}'::jsonb`)}
       UNION ALL
       ${ATTEMPT_LINE_OF_INSERTED}
       UNION ALL ${ATTEMPT_STARTED_EVENT}
     ),
     chosen AS (
       SELECT 1 AS rank, 'inserted' AS source, to_jsonb(x) AS op, x.parent_operation_id FROM inserted x
       UNION ALL SELECT 2, 'claimed', to_jsonb(x), x.parent_operation_id FROM claimed x
       UNION ALL SELECT 3, 'existing', to_jsonb(x), x.parent_operation_id FROM settlement x, i WHERE x.kind = i.kind
       UNION ALL SELECT 4, 'other', to_jsonb(x), x.parent_operation_id FROM settlement x
     )
     SELECT CASE WHEN v.v = 'insert' OR v.v = 'existing' THEN coalesce(ch.source, 'missing') ELSE v.v END AS verdict,
            ch.op, ${CHARGE_OF('ch')} AS charge, (SELECT amount FROM charge) AS authorized, now() AS db_now
       FROM verdict v LEFT JOIN LATERAL (SELECT * FROM chosen ORDER BY rank LIMIT 1) ch ON true`,
    [input.orderId, leaseToken, leaseMs, actor, input.kind, input.amount ?? null, claim],
  );
  const row = rows[0];
  if (!row || (row.verdict as string) === 'missing' || (row.verdict as string) === 'other') return null;
  const operation = row.op ? toOperation(row.op) : null;
  const claimed = operation && row.verdict !== 'existing' && row.verdict !== 'already_settled' && operation.leaseToken === leaseToken && row.op ? toClaimed(row.op, row.db_now, row.charge) : null;
  return { verdict: row.verdict, operation, claimed, authorizedAmount: row.authorized === null ? null : Number(row.authorized) };
}

/**
 * The `requested` audit detail of a duplicate-charge remedy's refund, the same from every path (a
 * Stripe event, an operator, the List step in recordOutcomes): which PaymentIntent it gives back, from
 * which charge operation; the caller's evidence is merged after it (`evidence` names its kind).
 */
const remedyRequestedDetail = (paymentIntent: string, chargeOperation: string) =>
  `jsonb_build_object('remedy', 'duplicate_charge', 'refundedPaymentIntent', ${paymentIntent}, 'chargeOperationId', ${chargeOperation})`;

/**
 * The duplicate-charge remedy's refund operation (decisions.ts judgeDuplicateCharge): reason
 * `duplicate`, the extra PaymentIntent named, its refund id derived from it — inserted once however
 * often the evidence arrives (unique (order_id, refund_id) and refund_payment_intent). Not claimed: the
 * charge is final-succeeded, so it is due at once for the caller or the reconciler. Null when it existed.
 */
export async function insertDuplicateRefund(
  db: Db,
  charge: Pick<Operation, 'id' | 'orderId'>,
  remedy: { readonly refundId: string; readonly paymentIntentId: string; readonly amount: number },
  actor: string,
  evidence: Readonly<Record<string, unknown>>,
): Promise<{ readonly id: string; readonly created: boolean } | null> {
  const { rows } = await db.query<{ id: string; created: boolean }>(
    `WITH inserted AS (
       INSERT INTO payment_operations AS p
         (order_id, kind, refund_id, parent_operation_id, refund_reason, refund_payment_intent, amount, currency, customer_id, payment_method)
       SELECT c.order_id, 'refund', $3::text, c.id, 'duplicate', $4::text, $5::bigint, c.currency, c.customer_id, c.payment_method
         FROM payment_operations c WHERE c.id = $1::uuid AND c.order_id = $2 AND c.kind = 'charge' AND c.status = 'succeeded'
       ON CONFLICT DO NOTHING
       RETURNING p.id, p.status, p.key_generation, p.parent_operation_id
     ),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, key_generation, detail)
       SELECT id, $6::text, 'requested', NULL, status, key_generation,
              ${remedyRequestedDetail('$4::text', 'parent_operation_id')} || $7::jsonb
         FROM inserted
     )
     SELECT id::text, true AS created FROM inserted
     UNION ALL
     -- Made before (the refund id is derived from the PaymentIntent): the same operation, not a second one.
     SELECT p.id::text, false FROM payment_operations p
      WHERE p.order_id = $2 AND p.kind = 'refund' AND p.refund_id = $3::text AND NOT EXISTS (SELECT 1 FROM inserted)`,
    [charge.id, charge.orderId, remedy.refundId, remedy.paymentIntentId, remedy.amount, actor, JSON.stringify(evidence)],
  );
  return rows[0] ?? null;
}

/** Whether any operation is on the connected account (the partial index of migrations/018). */
export async function hasOperationOnAccount(db: Db, account: string): Promise<boolean> {
  const { rows } = await prepared<{ found: boolean }>(
    db,
    'payments.has_operation_on_account',
    'SELECT EXISTS (SELECT 1 FROM payment_operations WHERE stripe_account = $1) AS found',
    [account],
  );
  return rows[0]?.found === true;
}

/** The refund operations of an order, oldest first. */
export async function findRefundsOfOrder(db: Db, orderId: string): Promise<Operation[]> {
  const { rows } = await db.query<{ op: OperationJson }>(
    `SELECT to_jsonb(p) AS op FROM payment_operations p WHERE p.order_id = $1 AND p.kind = 'refund' ORDER BY p.created_at, p.id`,
    [orderId],
  );
  return rows.map((r) => toOperation(r.op));
}

/** Claim one operation by id (the single-operation path and redeliveries). */
export async function claimById(
  db: Db,
  operationId: string,
  leaseToken: string,
  leaseMs: number,
  actor: string,
): Promise<{ claimed: ClaimedOperation | null; operation: Operation } | null> {
  const { rows } = await prepared<{ source: 'claimed' | 'existing'; op: OperationJson; db_now: Date; charge: ChargeJson | null }>(
    db,
    'payments.claim_by_id',
    `WITH claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
        WHERE p.id = $1::uuid AND ${CLAIMABLE_BY_KEY}
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${ATTEMPT_STARTED_EVENT}
     )
     SELECT 'claimed' AS source, to_jsonb(c) AS op, now() AS db_now, ${CHARGE_OF('c')} AS charge FROM claimed c
     UNION ALL
     SELECT 'existing', to_jsonb(p), now(), NULL FROM payment_operations p
      WHERE p.id = $1::uuid AND NOT EXISTS (SELECT 1 FROM claimed)`,
    [operationId, leaseToken, leaseMs, actor],
  );
  const row = rows[0];
  if (!row) return null;
  const operation = toOperation(row.op);
  return { operation, claimed: row.source === 'claimed' ? toClaimed(row.op, row.db_now, row.charge) : null };
}

/**
 * The reconciler's page: the due operations nobody holds, oldest schedule first. SKIP LOCKED lets
 * two sweeps run at once without waiting on each other; the lease then keeps them apart after commit.
 * Reads the partial index over open operations only.
 */
export async function claimDue(db: Db, limit: number, leaseToken: string, leaseMs: number, actor: string): Promise<ClaimedOperation[]> {
  const { rows } = await prepared<{ op: OperationJson; db_now: Date; charge: ChargeJson | null }>(
    db,
    'payments.claim_due',
    `WITH due AS (
       SELECT p.id FROM payment_operations p
        WHERE ${claimable(OPEN_FOR_SWEEP)}
        ORDER BY p.next_attempt_at
        LIMIT $1
        FOR UPDATE SKIP LOCKED
     ),
     claimed AS (
       UPDATE payment_operations AS p SET ${CLAIM_SET}
         FROM due WHERE p.id = due.id
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (${ATTEMPT_COLUMNS})
       ${ATTEMPT_STARTED_EVENT}
     )
     SELECT to_jsonb(c) AS op, now() AS db_now, ${CHARGE_OF('c')} AS charge FROM claimed c ORDER BY c.next_attempt_at`,
    [limit, leaseToken, leaseMs, actor],
  );
  return rows.map((row) => toClaimed(row.op, row.db_now, row.charge));
}

/**
 * One outcome to write. `release` gives the lease back without an attempt (not started for lack of
 * time, or a List that must wait for the settle delay: then due again after retryAfterMs).
 */
export interface OutcomeWrite extends Outcome {
  readonly operationId: string;
  readonly leaseToken: string;
  readonly action: 'record' | 'release';
  readonly step: AttemptStep | null;
  readonly fromStatus: OperationStatus;
  readonly keyGeneration: number;
}

export interface OutcomeEventRow {
  readonly eventId: string;
  readonly operationId: string;
  readonly eventType: string;
  readonly payload: Readonly<Record<string, unknown>>;
}

export interface RecordResult {
  readonly operationId: string;
  /** False: the lease was lost (someone else claimed it) or the operation was already final; nothing written but the audit line. */
  readonly applied: boolean;
  readonly status: OperationStatus | null;
  /** The outbox row written with this outcome, leased to the caller for an immediate publish. */
  readonly event: OutcomeEventRow | null;
}

/** A claim given back untouched (nothing sent, or nothing to decide now): due again after retryAfterMs (null: as it was). */
export function releaseWrite(op: ClaimedOperation, retryAfterMs: number | null, reason: string): OutcomeWrite {
  return {
    operationId: op.id,
    leaseToken: op.leaseToken,
    action: 'release',
    step: null,
    fromStatus: op.status,
    keyGeneration: op.keyGeneration,
    status: op.status,
    externalId: null,
    reviewReason: null,
    retryAfterMs,
    error: null,
    errorClass: null,
    errorCode: null,
    detail: { reason },
  };
}

/** What recordOutcomes and reissueAfterProof return per operation: applied or not, and the outbox row written. */
interface RecordedRow {
  id: string;
  applied: boolean;
  status: OperationStatus | null;
  event_id: string | null;
  event_type: string | null;
  event_payload: Record<string, unknown> | null;
}

const toRecordResult = (row: RecordedRow): RecordResult => ({
  operationId: row.id,
  applied: row.applied,
  status: row.status,
  event: row.event_id && row.event_type && row.event_payload ? { eventId: row.event_id, operationId: row.id, eventType: row.event_type, payload: row.event_payload } : null,
});

/**
 * Write a batch of outcomes in ONE statement: each fenced by its lease token and by open status
 * (a zombie's late write and a write over a final state are discarded, and say so in the audit
 * trail), with an audit event for every attempt, and — in the same transaction — an outbox row for
 * every final outcome and every entry into review.
 *
 *   worker A: claim(token a) ── Stripe ……………… (slow) ……………… record(a) ✗ discarded
 *   worker B:                   lease expires ─ claim(token b) ─ Stripe ─ record(b) ✓
 */
export async function recordOutcomes(
  db: Db,
  writes: readonly OutcomeWrite[],
  actor: string,
  publishLeaseMs: number,
): Promise<RecordResult[]> {
  if (writes.length === 0) return [];
  const payload = writes.map((w) => ({
    id: w.operationId,
    lease_token: w.leaseToken,
    action: w.action,
    step: w.step,
    from_status: w.fromStatus,
    key_generation: w.keyGeneration,
    status: w.status,
    external_id: w.externalId,
    review_reason: w.reviewReason,
    retry_after_ms: w.retryAfterMs,
    error: w.error,
    error_class: w.errorClass,
    error_code: w.errorCode,
    detail: w.detail,
    remedies: w.remedies ?? null,
  }));
  const { rows } = await prepared<RecordedRow>(
    db,
    'payments.record_outcomes',
    `WITH o AS (
       SELECT o.* FROM ${BATCH('$1')} AS o(
         id uuid, lease_token uuid, action text, step text, from_status text, key_generation int,
         status text, external_id text, review_reason text, retry_after_ms bigint,
         error text, error_class text, error_code text, detail jsonb, remedies jsonb)
     ),
     upd AS (
       UPDATE payment_operations AS p SET
         status           = CASE WHEN o.action = 'record' THEN o.status ELSE p.status END,
         external_id      = coalesce(o.external_id, p.external_id),
         attempts         = p.attempts + CASE WHEN o.action = 'record' THEN 1 ELSE 0 END,
         last_error       = CASE WHEN o.action = 'record' THEN o.error ELSE p.last_error END,
         last_error_class = CASE WHEN o.action = 'record' THEN o.error_class ELSE p.last_error_class END,
         review_reason    = CASE WHEN o.action = 'record' THEN o.review_reason ELSE p.review_reason END,
         next_attempt_at  = CASE
                              WHEN o.action = 'release' THEN now() + coalesce(o.retry_after_ms, 0) * interval '1 millisecond'
                              WHEN o.status IN ('succeeded', 'failed') OR o.review_reason IS NOT NULL THEN NULL
                              ELSE now() + o.retry_after_ms * interval '1 millisecond'
                            END,
         settled_at       = CASE WHEN o.action = 'record' AND o.status IN ('succeeded', 'failed') THEN now() END,
         -- The number of the outbox row this write produces (the same condition as the outcome CTE below).
         event_sequence   = p.event_sequence
                            + CASE WHEN o.action = 'record' AND (o.status IN ('succeeded', 'failed') OR o.review_reason IS NOT NULL)
                                   THEN 1 ELSE 0 END,
         lease_token      = NULL,
         lease_until      = NULL,
         updated_at       = now()
         FROM o
        WHERE p.id = o.id AND p.lease_token = o.lease_token AND ${OPEN_BY_KEY('p')}
       RETURNING p.id, p.order_id, p.status, p.external_id, p.review_reason, p.amount, p.currency, p.event_sequence
     ),
     audit AS (
       INSERT INTO payment_operation_events
         (operation_id, actor, action, step, from_status, to_status, error_class, error_code, external_id, key_generation, lease_token,
          payment_intent_status, detail)
       SELECT o.id, $2::text,
              CASE WHEN u.id IS NULL THEN 'outcome_discarded'
                   WHEN o.action = 'release' THEN 'lease_released'
                   ELSE 'outcome_recorded' END,
              o.step, o.from_status, u.status, o.error_class, o.error_code, coalesce(o.external_id, u.external_id),
              o.key_generation,
              -- The claim this outcome belongs to (its attempt_started carries the same token):
              -- a zombie's late write is paired with its own claim, not with the next one.
              o.lease_token,
              -- The PaymentIntent's status in a column of its own, not in detail (migrations/029).
              o.detail ->> 'paymentIntentStatus',
              coalesce(o.detail - 'paymentIntentStatus', '{}'::jsonb)
                || CASE WHEN o.review_reason IS NOT NULL THEN jsonb_build_object('reviewReason', o.review_reason) ELSE '{}'::jsonb END
                || CASE WHEN u.id IS NULL THEN jsonb_build_object('discardedStatus', o.status) ELSE '{}'::jsonb END
         FROM o LEFT JOIN upd u ON u.id = o.id
     ),
     -- The duplicate-charge remedy decided with this outcome (decisions.ts judgeListedCharges): its
     -- refund operations are made in the SAME statement as the charge's success, so no crash can
     -- leave a settled charge whose extra PaymentIntents nobody refunds. Only when the write applied
     -- and the charge succeeded; once per PaymentIntent (the unique indexes of 007_refunds.sql).
     remedy AS (
       INSERT INTO payment_operations AS r
         (order_id, kind, refund_id, parent_operation_id, refund_reason, refund_payment_intent, amount, currency, customer_id, payment_method)
       SELECT u.order_id, 'refund', d."refundId", u.id, 'duplicate', d."paymentIntentId", d.amount, u.currency, c.customer_id, c.payment_method
         FROM o JOIN upd u ON u.id = o.id AND u.status = 'succeeded'
         JOIN payment_operations c ON c.id = o.id
         CROSS JOIN LATERAL jsonb_to_recordset(o.remedies) AS d("refundId" text, "paymentIntentId" text, amount bigint)
        WHERE o.action = 'record' AND o.remedies IS NOT NULL
       ON CONFLICT DO NOTHING
       RETURNING r.id, r.status, r.key_generation, r.refund_payment_intent, r.parent_operation_id
     ),
     remedy_audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, key_generation, detail)
       SELECT id, $2::text, 'requested', NULL, status, key_generation,
              ${remedyRequestedDetail('refund_payment_intent', 'parent_operation_id')} || jsonb_build_object('evidence', 'list')
         FROM remedy
     ),
     outcome AS (
       SELECT u.*, o.error_code AS failure_code, uuidv7() AS event_id
         FROM upd u JOIN o ON o.id = u.id
        WHERE o.action = 'record' AND (u.status IN ('succeeded', 'failed') OR u.review_reason IS NOT NULL)
     ),
     outbox AS (
       ${outboxInsertSql('outcome', '$3')}
       RETURNING event_id, operation_id, event_type, outcome_events.payload
     )
     SELECT o.id, u.id IS NOT NULL AS applied, u.status,
            e.event_id, e.event_type, e.payload AS event_payload
       FROM o LEFT JOIN upd u ON u.id = o.id LEFT JOIN outbox e ON e.operation_id = o.id`,
    [JSON.stringify(payload), actor, publishLeaseMs],
  );
  return rows.map(toRecordResult);
}

/**
 * The outbox row of an outcome, shared by every statement that settles an operation, sends it to
 * review or re-issues it automatically (a `pending` source row: 'Charge Reissued', reason =
 * failure_code), so the event contract
 * (lambdas/events/contract.ts) is written in one place. `source` is a CTE of the calling statement —
 * a constant, never input — with id, order_id, status, review_reason, amount, currency, external_id,
 * failure_code, event_id and event_sequence (the operation's counter, already advanced
 * by the calling statement's UPDATE of the row: migrations/004_event_sequence.sql); `leaseParam` is
 * the bound parameter of the publish lease in milliseconds (NULL: no lease, the relay's sweep
 * publishes it); `rows` where the operation's own columns are read — a CTE of the calling statement
 * (a constant) when the row is inserted by that statement, which its own snapshot cannot see.
 */
export function outboxInsertSql(source: string, leaseParam: string, rows = 'payment_operations'): string {
  // The kind and the refund's names are read from the row (they never change), joined once, so a
  // caller's source need not carry them: 'Charge …' for a charge, 'Refund …' for a refund
  // (lambdas/events/contract.ts). `s.` is the source's (the outcome just written), `k.` the row's.
  // The stored payload leaves out what the row's own columns say (eventId, operationId, version 1,
  // and occurredAt: the row's created_at, the same now()): payload(outcome_events) puts them back
  // when read as e.payload (migrations/022_outbox_compact_payload.sql, 026, 028).
  return `INSERT INTO outcome_events (event_id, operation_id, event_type, stored_payload, publish_lease_until)
       SELECT s.event_id, s.id,
              CASE WHEN s.status = 'succeeded' AND k.refund_payment_intent IS NOT NULL
                   THEN 'Charge Duplicate Refunded'
                   -- Manual capture (migrations/019): an authorization, its capture, its release.
                   WHEN s.status = 'succeeded' AND s.review_reason IS NULL AND k.capture_method = 'manual' THEN 'Charge Authorized'
                   WHEN s.status = 'succeeded' AND s.review_reason IS NULL AND k.kind = 'capture' THEN 'Charge Captured'
                   WHEN s.status = 'succeeded' AND s.review_reason IS NULL AND k.kind = 'cancel_authorization'
                   THEN CASE WHEN k.cancellation_reason = 'expired' THEN 'Authorization Expired' ELSE 'Authorization Canceled' END
                   ELSE CASE k.kind WHEN 'refund' THEN 'Refund ' WHEN 'capture' THEN 'Charge Capture '
                                    WHEN 'cancel_authorization' THEN 'Authorization Cancel ' ELSE 'Charge ' END ||
                        CASE WHEN s.review_reason IS NOT NULL THEN 'Needs Review'
                             WHEN s.status = 'succeeded' THEN 'Succeeded'
                             WHEN s.status = 'pending' THEN 'Reissued'
                             ELSE 'Failed' END
              END,
              jsonb_build_object(
                'orderId', s.order_id,
                'status', CASE WHEN s.review_reason IS NOT NULL THEN 'needs_review' WHEN s.status = 'pending' THEN 'reissued' ELSE s.status END,
                'amount', s.amount,
                'currency', s.currency,
                'externalId', s.external_id,
                'reason', coalesce(s.review_reason, CASE WHEN s.status IN ('failed', 'pending') THEN s.failure_code END),
                'sequence', s.event_sequence)
              -- A refund's detail names the refund (refundOutcomeDetailSchema); a charge's is unchanged.
              || CASE WHEN k.kind = 'refund'
                      THEN jsonb_build_object('kind', 'refund', 'refundId', k.refund_id,
                                              'chargeOperationId', k.parent_operation_id, 'refundReason', k.refund_reason)
                           || CASE WHEN k.refund_payment_intent IS NOT NULL
                                   THEN jsonb_build_object('refundedPaymentIntent', k.refund_payment_intent) ELSE '{}'::jsonb END
                      ELSE '{}'::jsonb END
              -- A capture or cancel names the charge it settles; a manual charge says it only authorized.
              || CASE WHEN k.kind IN ('capture', 'cancel_authorization')
                      THEN jsonb_build_object('kind', k.kind, 'chargeOperationId', k.parent_operation_id)
                           || CASE WHEN k.cancellation_reason IS NOT NULL THEN jsonb_build_object('cancellationReason', k.cancellation_reason) ELSE '{}'::jsonb END
                      WHEN k.capture_method IS NOT NULL THEN jsonb_build_object('captureMethod', k.capture_method)
                      ELSE '{}'::jsonb END
              -- An operation on a connected account names it (migrations/018); a platform one is unchanged.
              || CASE WHEN k.stripe_account IS NOT NULL THEN jsonb_build_object('account', k.stripe_account) ELSE '{}'::jsonb END,
              now() + ${leaseParam}::bigint * interval '1 millisecond'
         FROM ${source} AS s JOIN ${rows} k ON k.id = s.id`;
}

/**
 * A re-issue under key generation + 1: back to pending, out of review, due now, the key window and the
 * external id started over — the engine's next claim creates with `payment-op:{id}:g{n+1}` and never
 * sends the old key again. Shared by the operator's `review reissue` (review.ts) and the engine's
 * automatic re-issue (reissueAfterProof), so both mean exactly the same thing.
 */
export const REISSUE_SET = `
         key_generation     = p.key_generation + 1,
         status             = 'pending',
         review_reason      = NULL,
         first_attempted_at = NULL,
         external_id        = NULL,
         last_error         = NULL,
         last_error_class   = NULL,
         next_attempt_at    = now(),
         updated_at         = now()`;

/**
 * The watch a re-issue starts (or restarts; lambdas/payments/watch.ts), as a CTE body over the re-issue's `source` CTE, which has
 * `id` and `retired_first_sent_at` (the first send of the generation being retired: the old row's
 * first_attempted_at). `firstParam` / `finalParam` are the bound parameters of REISSUE_WATCH_FIRST_AFTER_MS
 * and REISSUE_WATCH_FINAL_AFTER_MS. A second re-issue keeps the earliest start and the latest final look.
 */
export function watchOnReissueSql(source: string, firstParam: string, finalParam: string): string {
  return `INSERT INTO payment_operation_watches AS w (operation_id, watched_from, reissued_at, final_check_at, next_check_at)
       SELECT s.id, coalesce(s.retired_first_sent_at, now()), now(),
              coalesce(s.retired_first_sent_at, now()) + ${finalParam}::bigint * interval '1 millisecond',
              now() + ${firstParam}::bigint * interval '1 millisecond'
         FROM ${source} AS s
       ON CONFLICT (operation_id) DO UPDATE SET
              watched_from   = least(w.watched_from, EXCLUDED.watched_from),
              reissued_at    = EXCLUDED.reissued_at,
              reissues       = w.reissues + 1,
              final_check_at = greatest(w.final_check_at, EXCLUDED.final_check_at),
              next_check_at  = EXCLUDED.next_check_at,
              closed_at      = NULL,
              lease_token    = NULL,
              lease_until    = NULL,
              updated_at     = now()`;
}

/** The `reason` of a 'Charge Reissued' event (a code, like a decline code). */
export const AUTO_REISSUE_REASON = 'absence_proven';

/** The List proof that allowed an automatic re-issue, for reissueAfterProof. */
export interface ReissueWrite {
  readonly operationId: string;
  readonly leaseToken: string;
  readonly fromStatus: OperationStatus;
  readonly keyGeneration: number;
  /** The list's evidence (window, pages, request ids, the proofs): the outcome's and the re-issue's detail. */
  readonly detail: Readonly<Record<string, unknown>>;
}

/**
 * The engine's automatic re-issue after absence was proven (decisions.ts judgeAutoReissue), ONE
 * statement per batch: fenced like every outcome (lease token, open, not in review, same generation);
 * the List step's outcome_recorded row (the proof), then an `auto_reissued` row under the new
 * generation, and a 'Charge Reissued' outbox row leased to the caller. A lost fence writes only
 * outcome_discarded, as in recordOutcomes.
 */
export async function reissueAfterProof(db: Db, writes: readonly ReissueWrite[], actor: string, publishLeaseMs: number, watch: WatchTimings): Promise<RecordResult[]> {
  if (writes.length === 0) return [];
  const payload = writes.map((w) => ({
    id: w.operationId,
    lease_token: w.leaseToken,
    from_status: w.fromStatus,
    key_generation: w.keyGeneration,
    detail: w.detail,
  }));
  const { rows } = await prepared<RecordedRow>(
    db,
    'payments.reissue_after_proof',
    `WITH o AS (
       SELECT o.* FROM ${BATCH('$1')} AS o(id uuid, lease_token uuid, from_status text, key_generation int, detail jsonb)
     ),
     upd AS (
       UPDATE payment_operations AS p SET ${REISSUE_SET},
         attempts       = p.attempts + 1,
         -- The number of the 'Charge Reissued' outbox row this write produces (004_event_sequence.sql).
         event_sequence = p.event_sequence + 1,
         lease_token    = NULL,
         lease_until    = NULL
         FROM o
        WHERE p.id = o.id AND p.lease_token = o.lease_token AND ${OPEN_BY_KEY('p')}
          AND p.review_reason IS NULL AND p.key_generation = o.key_generation
       RETURNING p.id, p.order_id, p.status, p.external_id, p.review_reason, p.amount, p.currency, p.key_generation, p.event_sequence,
                 old.first_attempted_at AS retired_first_sent_at
     ),
     -- The re-issued operation stays under watch (watch.ts): a request under the retired key may still be committed late.
     watch AS (
       ${watchOnReissueSql('upd', '$5', '$6')}
     ),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, step, from_status, to_status, key_generation, lease_token, detail)
       SELECT id, $2::text, action, step, from_status, to_status, key_generation, lease_token, detail FROM (
         SELECT o.id, 1 AS ord, CASE WHEN u.id IS NULL THEN 'outcome_discarded' ELSE 'outcome_recorded' END AS action,
                'list' AS step, o.from_status, u.status AS to_status, o.key_generation, o.lease_token,
                o.detail || CASE WHEN u.id IS NULL THEN jsonb_build_object('discardedStatus', 'pending') ELSE '{}'::jsonb END AS detail
           FROM o LEFT JOIN upd u ON u.id = o.id
         UNION ALL
         SELECT u.id, 2, 'auto_reissued', NULL, o.from_status, u.status, u.key_generation, NULL::uuid,
                jsonb_build_object('fromGeneration', o.key_generation, 'toGeneration', u.key_generation) || o.detail
           FROM upd u JOIN o ON o.id = u.id
       ) x ORDER BY id, ord
     ),
     outcome AS (
       SELECT u.*, $4::text AS failure_code, uuidv7() AS event_id FROM upd u
     ),
     outbox AS (
       ${outboxInsertSql('outcome', '$3')}
       RETURNING event_id, operation_id, event_type, outcome_events.payload
     )
     SELECT o.id, u.id IS NOT NULL AS applied, u.status, e.event_id, e.event_type, e.payload AS event_payload
       FROM o LEFT JOIN upd u ON u.id = o.id LEFT JOIN outbox e ON e.operation_id = o.id`,
    [JSON.stringify(payload), actor, publishLeaseMs, AUTO_REISSUE_REASON, watch.firstAfterMs, watch.finalAfterFirstSendMs],
  );
  return rows.map(toRecordResult);
}

/** The audit trails of some operations, oldest first: what the engine's evidence is read from. */
export async function loadEvidenceEvents(db: Db, operationIds: readonly string[]): Promise<Map<string, EvidenceEvent[]>> {
  const result = new Map<string, EvidenceEvent[]>(operationIds.map((id) => [id, []]));
  if (operationIds.length === 0) return result;
  const { rows } = await prepared<{ operation_id: string; action: string; step: string | null; occurred_at: Date; key_generation: number | null; error_class: string | null; detail: Record<string, unknown> }>(
    db,
    'payments.load_evidence_events',
    `SELECT operation_id, action, step, occurred_at, key_generation, error_class, ${AUDIT_DETAIL('payment_operation_events')} AS detail
       FROM payment_operation_events WHERE operation_id = ANY($1::uuid[]) ORDER BY operation_id, id`,
    [operationIds],
  );
  for (const row of rows) {
    result.get(row.operation_id)?.push({
      action: row.action,
      step: row.step,
      occurredAt: new Date(row.occurred_at).toISOString(),
      keyGeneration: row.key_generation,
      errorClass: row.error_class,
      detail: row.detail ?? {},
    });
  }
  return result;
}

export async function findOperation(db: Db, operationId: string): Promise<Operation | null> {
  const { rows } = await db.query<{ op: OperationJson }>(
    'SELECT to_jsonb(p) AS op FROM payment_operations p WHERE p.id = $1::uuid',
    [operationId],
  );
  return rows[0] ? toOperation(rows[0].op) : null;
}

export async function findOperationByOrder(db: Db, orderId: string): Promise<Operation | null> {
  const { rows } = await db.query<{ op: OperationJson }>(
    `SELECT to_jsonb(p) AS op FROM payment_operations p WHERE p.order_id = $1 AND p.kind = 'charge'`,
    [orderId],
  );
  return rows[0] ? toOperation(rows[0].op) : null;
}

export interface OpenOperationCounts {
  /** Open and not in review: what the machines still work on. */
  readonly openPending: number;
  readonly openUnknown: number;
  /** Age of the oldest open operation not in review, since its request was recorded; 0 when none. */
  readonly oldestOpenAgeSeconds: number;
  /** Open operations waiting for a human (review_reason set). */
  readonly reviewQueueSize: number;
}

/**
 * Duplicate-charge remedies created in the last `windowSeconds` (whichever evidence made them: an
 * event, a List, an operator): the gauge behind the DuplicateChargeRemedied alarm. Reads the partial
 * index over remedy rows by creation time (migrations/016_remedy_gauge_index.sql): O(remedies in the
 * window), never the table.
 */
export async function countRecentRemedies(db: Db, windowSeconds: number): Promise<number> {
  const { rows } = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM payment_operations
      WHERE refund_payment_intent IS NOT NULL AND created_at > now() - $1::int * interval '1 second'`,
    [windowSeconds],
  );
  return rows[0]?.n ?? 0;
}

/** The reconciler's operation gauges, read through the partial index over open operations: O(open). */
export async function countOpenOperations(db: Db): Promise<OpenOperationCounts> {
  const { rows } = await db.query<{ pending: number; unknown: number; review: number; oldest: number | null }>(
    `SELECT count(*) FILTER (WHERE status = 'pending' AND review_reason IS NULL)::int AS pending,
            count(*) FILTER (WHERE status = 'unknown' AND review_reason IS NULL)::int AS unknown,
            count(*) FILTER (WHERE review_reason IS NOT NULL)::int AS review,
            extract(epoch FROM now() - min(created_at) FILTER (WHERE review_reason IS NULL))::float8 AS oldest
       FROM payment_operations
      WHERE status IN ('pending', 'unknown')`,
  );
  const row = rows[0];
  return {
    openPending: row?.pending ?? 0,
    openUnknown: row?.unknown ?? 0,
    reviewQueueSize: row?.review ?? 0,
    oldestOpenAgeSeconds: Math.max(0, Math.round(row?.oldest ?? 0)),
  };
}
