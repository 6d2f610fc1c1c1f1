// The refunds part of the ledger (docs/local.md#refunds-in-the-demo): per refunded order, the refunds the database recorded
// beside the refunds Stripe holds, the net amount Stripe kept and what it should be, and the counts
// the summary prints. The verdicts themselves are the invariant checker's (local/invariants.ts:
// net_amount, over_refund, unrecorded_refund, succeeded_without_refund, refund_mismatch); this module
// gathers what a reader needs to see them for each order.
import type { Db } from '../lambdas/payments/db.ts';
import type { RefundScenario, SendReport } from './send-report.ts';
import type { FakeStripeStats, PaymentIntentRecord, RefundRecord, RequestRecord } from './fake-stripe/types.ts';
import type { Violation } from './invariants.ts';
import { netChargedByOrder } from './stripe-truth.ts';

/** A refund request that made no refund operation: rejected_messages, with the engine's reason code. */
export interface RejectedRefund {
  /** refund_conflict, exceeds_charge, charge_failed, no_charge (RefundRejectedError codes). */
  readonly code: string;
  readonly refundId: string | null;
  readonly amount: number | null;
}

export interface RecordedRefund {
  readonly operationId: string;
  readonly refundId: string;
  readonly amount: number;
  readonly status: string;
  /** The Refund (re_…) the operation names. */
  readonly externalId: string | null;
  readonly reviewReason: string | null;
  /** The error code of a failed refund (charge_failed: its charge failed while it waited). */
  readonly errorCode: string | null;
  /** Requested while its charge was not final yet: it waited, durably, for the charge. */
  readonly waited: boolean;
  /** The duplicate-charge remedy: the extra PaymentIntent it refunds. */
  readonly remedyOf: string | null;
}

export interface StripeRefund {
  readonly id: string;
  readonly amount: number;
  readonly status: string;
  readonly paymentIntent: string;
}

export interface RefundedOrder {
  readonly orderId: string;
  /** The demo's scenario for this order (null: refunded by someone else, e.g. `npm run produce`). */
  readonly scenario: RefundScenario | 'duplicate_charge' | null;
  readonly charge: { readonly status: string; readonly amount: number; readonly currency: string } | null;
  readonly recorded: readonly RecordedRefund[];
  readonly rejected: readonly RejectedRefund[];
  /** Null when Stripe's refunds cannot be read. */
  readonly atStripe: readonly StripeRefund[] | null;
  /** Succeeded PaymentIntents − succeeded refunds at Stripe (null: not readable). */
  readonly net: number | null;
  /** What it must be: the amount asked minus the refunds recorded as succeeded, 0 for a failed charge; null while anything of the order is open. */
  readonly expectedNet: number | null;
  /** ok: net = expected; open: not judged yet (in flight or in review); violation: the checker named this order. */
  readonly verdict: 'ok' | 'open' | 'violation';
}

export interface RefundLedger {
  readonly requests: { readonly sent: number; readonly droppedBySqs: number; readonly late: number; readonly sendFailures: number } | null;
  /** Refund operations (the duplicate remedy's included). */
  readonly operations: {
    readonly total: number;
    readonly succeeded: number;
    readonly failed: number;
    readonly inReview: number;
    /** Open, not claimable: its charge is in review (the refund goes once a human settles the charge). */
    readonly waitingForChargeReview: number;
    readonly open: number;
    /** Requested while the charge was open: waited for it, durably. */
    readonly waitedForCharge: number;
    readonly failedByReason: Readonly<Record<string, number>>;
  };
  /** Refund requests that made no operation, by reason code. */
  readonly rejected: Readonly<Record<string, number>>;
  /** Refunds at Stripe by status (null: not readable). */
  readonly atStripe: Readonly<Record<string, number>> | null;
  /** Stripe requests on the refund endpoints (null: this Stripe does not count them). */
  readonly stripeRequests: { readonly create: number; readonly retrieve: number; readonly list: number; readonly perRefund: number | null } | null;
  /** Faults the fake injected into refund requests, by kind (null: its request log is not readable). */
  readonly faultsMet: Readonly<Record<string, number>> | null;
  readonly verdicts: {
    /** Orders whose net amount was judged (nothing of theirs open). */
    readonly netJudged: number;
    readonly netAmount: number;
    readonly overRefund: number;
    readonly unrecordedRefund: number;
    /** succeeded_without_refund + refund_mismatch. */
    readonly refundMisreported: number;
  } | null;
  readonly orders: readonly RefundedOrder[];
}

interface RefundRow {
  id: string;
  order_id: string;
  refund_id: string;
  amount: string;
  status: string;
  external_id: string | null;
  review_reason: string | null;
  last_error_class: string | null;
  error_code: string | null;
  refund_payment_intent: string | null;
  waited: boolean;
  charge_in_review: boolean;
}

const REFUND_VIOLATIONS = new Set(['net_amount', 'over_refund', 'unrecorded_refund', 'succeeded_without_refund', 'refund_mismatch']);

export async function readRefundLedger(input: {
  readonly db: Db;
  readonly orderIds: ReadonlySet<string> | undefined;
  readonly send: SendReport | null;
  readonly paymentIntents: readonly PaymentIntentRecord[] | null;
  readonly refunds: readonly RefundRecord[] | null;
  readonly stats: FakeStripeStats | null;
  /** The fake's request log (in this process only). */
  readonly requests: readonly RequestRecord[] | null;
  readonly violations: readonly Violation[];
  /** The checker's expected net per settled order (InvariantReport.expectedNet): one rule, judged once. */
  readonly expectedNet: ReadonlyMap<string, number>;
}): Promise<RefundLedger> {
  const { db, send } = input;
  const scope = input.orderIds ? [...input.orderIds] : null;
  const [refundRows, rejectedRows] = await Promise.all([
    // waited: the refund's `requested` event came before its charge was settled (or the charge is still open).
    db.query<RefundRow>(
      `SELECT r.id::text, r.order_id, r.refund_id, r.amount::text, r.status, r.external_id, r.review_reason, r.last_error_class,
              (SELECT e.error_code FROM payment_operation_events e WHERE e.operation_id = r.id AND e.action = 'outcome_recorded' ORDER BY e.id DESC LIMIT 1) AS error_code,
              r.refund_payment_intent,
              (c.review_reason IS NOT NULL AND c.status IN ('pending', 'unknown')) AS charge_in_review,
              coalesce((SELECT min(e.occurred_at) FROM payment_operation_events e WHERE e.operation_id = r.id AND e.action = 'requested') < coalesce(c.settled_at, 'infinity'), false) AS waited
         FROM payment_operations r JOIN payment_operations c ON c.id = r.parent_operation_id
        WHERE r.kind = 'refund' AND ($1::text[] IS NULL OR r.order_id = ANY($1::text[]))
        ORDER BY r.order_id, r.created_at`,
      [scope],
    ),
    db.query<{ order_id: string | null; reason: string; raw_body: string }>(
      `SELECT order_id, reason, raw_body FROM rejected_messages
        WHERE reason_code IN ('refund_conflict', 'refund_rejected') AND ($1::text[] IS NULL OR order_id = ANY($1::text[]))
        ORDER BY id`,
      [scope],
    ),
  ]);

  const recordedByOrder = group(refundRows.rows, (r) => r.order_id);
  const rejectedByOrder = group(rejectedRows.rows.filter((r) => r.order_id !== null), (r) => r.order_id!);
  const stripeByOrder = input.refunds ? group(input.refunds.filter((r) => r.paymentIntentOrderId !== null), (r) => r.paymentIntentOrderId!) : null;
  const orderIds = new Set([...recordedByOrder.keys(), ...rejectedByOrder.keys(), ...(stripeByOrder?.keys() ?? [])]);
  if (input.orderIds) for (const id of [...orderIds]) if (!input.orderIds.has(id)) orderIds.delete(id);

  const { rows: chargeRows } = await db.query<{ order_id: string; status: string; amount: string; currency: string; review_reason: string | null }>(
    `SELECT order_id, status, amount::text, currency, review_reason FROM payment_operations WHERE kind = 'charge' AND order_id = ANY($1::text[])`,
    [[...orderIds]],
  );
  const charges = new Map(chargeRows.map((c) => [c.order_id, c]));
  const net = input.paymentIntents && input.refunds ? netChargedByOrder(input.paymentIntents, input.refunds) : null;
  const violatedOrders = new Set(input.violations.filter((v) => REFUND_VIOLATIONS.has(v.kind) && v.orderId).map((v) => v.orderId!));

  const orders: RefundedOrder[] = [...orderIds].sort().map((orderId) => {
    const charge = charges.get(orderId) ?? null;
    const recorded = (recordedByOrder.get(orderId) ?? []).map(toRecorded);
    const atStripe = stripeByOrder ? (stripeByOrder.get(orderId) ?? []).map((r) => ({ id: r.id, amount: r.amount, status: r.status, paymentIntent: r.payment_intent })) : null;
    const truth = net?.get(orderId);
    const expectedNet = input.expectedNet.get(orderId) ?? null;
    return {
      orderId,
      scenario: send?.refunds.scenarios[orderId] ?? (send?.duplicateCharges[orderId] ? 'duplicate_charge' : null),
      charge: charge ? { status: charge.review_reason ? 'in review' : charge.status, amount: Number(charge.amount), currency: charge.currency } : null,
      recorded,
      rejected: (rejectedByOrder.get(orderId) ?? []).map(toRejected),
      atStripe,
      net: net ? (truth?.net ?? 0) : null,
      expectedNet,
      verdict: violatedOrders.has(orderId) ? 'violation' : expectedNet === null ? 'open' : 'ok',
    };
  });

  const ops = refundRows.rows;
  const count = (f: (r: RefundRow) => boolean) => ops.filter(f).length;
  const failedByReason: Record<string, number> = {};
  for (const r of ops.filter((r) => r.status === 'failed')) {
    const reason = errorCode(r) ?? 'failed at Stripe';
    failedByReason[reason] = (failedByReason[reason] ?? 0) + 1;
  }
  const rejected: Record<string, number> = {};
  for (const r of rejectedRows.rows) {
    const code = toRejected(r).code;
    rejected[code] = (rejected[code] ?? 0) + 1;
  }
  const atStripe = input.refunds ? tally(input.refunds.filter((r) => !input.orderIds || input.orderIds.has(r.paymentIntentOrderId ?? '')).map((r) => r.status)) : null;
  const final = count((r) => r.status === 'succeeded' || r.status === 'failed');
  const st = input.stats;
  const stripeRequests = st
    ? {
        create: st.requests.refund_create ?? 0,
        retrieve: st.requests.refund_retrieve ?? 0,
        list: st.requests.refund_list ?? 0,
        perRefund: final === 0 ? null : Math.round((((st.requests.refund_create ?? 0) + (st.requests.refund_retrieve ?? 0) + (st.requests.refund_list ?? 0)) / final) * 100) / 100,
      }
    : null;
  const faultsMet = input.requests
    ? tally(input.requests.filter((r) => r.endpoint.startsWith('refund_') && r.fault !== null).map((r) => r.fault!))
    : null;
  const byKind = (kind: string) => input.violations.filter((v) => v.kind === kind).length;
  return {
    requests: send ? { sent: send.refunds.sent, droppedBySqs: send.refunds.droppedBySqs, late: send.refunds.late, sendFailures: send.refunds.failures } : null,
    operations: {
      total: ops.length,
      succeeded: count((r) => r.status === 'succeeded'),
      failed: count((r) => r.status === 'failed'),
      inReview: count((r) => (r.status === 'pending' || r.status === 'unknown') && r.review_reason !== null),
      waitingForChargeReview: count((r) => (r.status === 'pending' || r.status === 'unknown') && r.review_reason === null && r.charge_in_review),
      open: count((r) => (r.status === 'pending' || r.status === 'unknown') && r.review_reason === null && !r.charge_in_review),
      waitedForCharge: count((r) => r.waited),
      failedByReason,
    },
    rejected,
    atStripe,
    stripeRequests,
    faultsMet,
    verdicts: input.refunds
      ? {
          netJudged: orders.filter((o) => o.expectedNet !== null).length,
          netAmount: byKind('net_amount'),
          overRefund: byKind('over_refund'),
          unrecordedRefund: byKind('unrecorded_refund'),
          refundMisreported: byKind('succeeded_without_refund') + byKind('refund_mismatch'),
        }
      : null,
    orders,
  };
}

function toRecorded(r: RefundRow): RecordedRefund {
  return {
    operationId: r.id,
    refundId: r.refund_id,
    amount: Number(r.amount),
    status: r.status,
    externalId: r.external_id,
    reviewReason: r.review_reason,
    errorCode: r.status === 'failed' ? errorCode(r) : null,
    waited: r.waited,
    remedyOf: r.refund_payment_intent,
  };
}

/** A failed refund's reason: the code of its last recorded outcome (charge_failed, a Stripe code), else the error class. */
function errorCode(r: RefundRow): string | null {
  return r.error_code ?? r.last_error_class;
}

/** The batch handler writes `${code}: ${message}` (lambdas/charge/batch.ts); the body is the request. */
function toRejected(r: { reason: string; raw_body: string }): RejectedRefund {
  let body: { refundId?: unknown; amount?: unknown } = {};
  try {
    body = JSON.parse(r.raw_body) as typeof body;
  } catch {
    // kept whole in rejected_messages; nothing more to show here
  }
  return {
    code: r.reason.match(/^([a-z_]+):/)?.[1] ?? 'refund_rejected',
    refundId: typeof body.refundId === 'string' ? body.refundId : null,
    amount: typeof body.amount === 'number' ? body.amount : null,
  };
}

function group<T>(rows: readonly T[], key: (row: T) => string): Map<string, T[]> {
  const out = new Map<string, T[]>();
  for (const row of rows) out.set(key(row), [...(out.get(key(row)) ?? []), row]);
  return out;
}

function tally(values: readonly string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const v of values) out[v] = (out[v] ?? 0) + 1;
  return out;
}
