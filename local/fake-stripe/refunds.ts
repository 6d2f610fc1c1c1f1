// The fake's Refunds API (docs/fake-stripe.md): what a refund is at Stripe, and the three endpoints' own logic.
// The HTTP pipeline (auth, faults, idempotency, holds, latency, delivery) is the server's, shared with
// PaymentIntents; this module only says how a refund is validated, executed, read and listed.
//
// What Stripe documents, and what the fake takes from it:
// - Create: POST /v1/refunds with `payment_intent` (or `charge`), optional `amount` ("A positive
//   integer ... how much of this charge to refund. Can refund only up to the remaining, unrefunded
//   amount of the charge"; omitted = the whole remainder), `reason` in duplicate | fraudulent |
//   requested_by_customer, `metadata[...]`. "You can optionally refund only part of a charge. You can
//   do so multiple times, until the entire charge has been refunded. Once entirely refunded, a charge
//   can't be refunded again. This method will raise an error when called on an already-refunded charge,
//   or when trying to refund more money than is left on a charge." (docs.stripe.com/api/refunds/create)
// - Idempotency: "Stripe's idempotency works by saving the resulting status code and body of the first
//   request made for any given idempotency key, regardless of whether it succeeds or fails ... We save
//   results only after the execution of an endpoint begins. If incoming parameters fail validation ...
//   we don't save the idempotent result." (docs.stripe.com/api/idempotent_requests). So here: malformed
//   parameters and an unknown PaymentIntent are validation (400, never stored); the refusals that depend
//   on the PaymentIntent's state at execution (not succeeded, already refunded, more than is left) are
//   the endpoint's answer, stored and replayed for the key like a 402 decline.
// - Errors (docs.stripe.com/error-codes): `charge_already_refunded` ("The charge you're attempting to
//   refund has already been refunded"); more than the unrefunded amount → `amount_too_large` ("The
//   specified amount is greater than the maximum amount allowed"), param `amount`, with Stripe's message
//   "Refund amount (…) is greater than unrefunded amount on charge (…)". Caution, seen in the wild
//   (edx/commerce-coordinator#360): Stripe has answered that refusal with an EMPTY code, so a client
//   must not rely on the code alone — type invalid_request_error + param amount + HTTP 400 is the
//   stable part (the fake sends either form: OverRefundError). A PaymentIntent without a successful charge: 400 invalid_request_error, param
//   payment_intent, "This PaymentIntent (pi_…) does not have a successful charge to refund." and no
//   documented code (none is sent here either).
// - Statuses (docs.stripe.com/api/refunds/object): pending, requires_action, succeeded, failed,
//   canceled; `pending_reason` (processing | insufficient_funds | charge_pending, API 2025-04-30+).
//   Test payment methods (docs.stripe.com/testing#refunds): `pm_card_pendingRefund` — the refund starts
//   `pending` and later succeeds; `pm_card_refundFail` — the refund first says `succeeded` and later
//   fails with failure_reason `expired_or_canceled_card` (both later changes send charge.refund.updated).
// - List: GET /v1/refunds?payment_intent=&charge=&limit=&starting_after=&ending_before= — "sorted
//   order, with the most recent refunds appearing first", limit 1–100 (default 10), `{object: 'list',
//   url, has_more, data}`, "If you provide a non-existent charge ID, this call raises an error"
//   (docs.stripe.com/api/refunds/list). Unlike Search, List is read in real time: no lag. An empty
//   `payment_intent=` / `charge=` is refused (parameter_invalid_empty), not read as no filter.
// - A refund made in the Dashboard is a Refund like any other (dashboardRefund): empty metadata, no key.
// What the unrefunded amount counts: refunds that are pending, requires_action or succeeded. A failed
// or canceled refund gives its amount back (Stripe returns the funds to the balance).
import type { StoredResponse } from './idempotency.ts';
import {
  REFUND_STATUSES,
  type PaymentIntentJson,
  type RefundFilter,
  type RefundJson,
  type RefundReason,
  type RefundRecord,
  type RefundSettleStatus,
  type RefundStatus,
} from './types.ts';
import {
  errors,
  invalid,
  InvalidParam,
  MAX_AMOUNT,
  metadataParam,
  metadataValue,
  randomId,
  stringParam,
  type ErrorEnvelope,
  type FormObject,
} from './wire.ts';

export interface RefundParams {
  readonly paymentIntentId: string;
  /** null: the whole unrefunded remainder, judged when the refund executes. */
  readonly amount: number | null;
  readonly reason: RefundReason | null;
  readonly metadata: Readonly<Record<string, string>>;
}

export type ValidatedRefund =
  | { readonly ok: true; readonly params: RefundParams }
  | { readonly ok: false; readonly error: ErrorEnvelope };

export const REFUND_REASONS: readonly RefundReason[] = ['duplicate', 'fraudulent', 'requested_by_customer'];

/** Statuses whose amount is taken from the charge (Stripe's amount_refunded). */
const HOLDING_STATUSES: readonly RefundStatus[] = ['pending', 'requires_action', 'succeeded'];

/** Parameters Stripe accepts on POST /v1/refunds that the fake tolerates and ignores. */
const IGNORED_PARAMS = new Set(['expand', 'instructions_email', 'refund_application_fee', 'reverse_transfer']);
/** Documented parameters for kinds of refunds the fake does not model (customer-balance refunds). */
const UNMODELLED_PARAMS = new Set(['currency', 'customer', 'origin']);

/** Stripe's test payment methods that shape what happens to a refund later (docs.stripe.com/testing#refunds). */
export const PENDING_REFUND_PAYMENT_METHOD = 'pm_card_pendingRefund';
export const FAILING_REFUND_PAYMENT_METHOD = 'pm_card_refundFail';

const LIST_DEFAULT_LIMIT = 10;
const LIST_MAX_LIMIT = 100;

/**
 * The charge of a PaymentIntent. The fake does not model Charges; like Stripe's own ids (pi_3Orq… /
 * ch_3Orq…), the charge id shares the PaymentIntent's suffix, so each can be derived from the other.
 */
export function chargeIdOf(paymentIntentId: string): string {
  return `ch_${paymentIntentId.slice('pi_'.length)}`;
}

function paymentIntentIdOfCharge(chargeId: string): string | null {
  return chargeId.startsWith('ch_') ? `pi_${chargeId.slice('ch_'.length)}` : null;
}

/** Minor units as Stripe's messages print them: ¥1,300, $12.99. */
function money(amount: number, currency: string): string {
  try {
    const format = new Intl.NumberFormat('en-US', { style: 'currency', currency: currency.toUpperCase() });
    return format.format(amount / 10 ** (format.resolvedOptions().maximumFractionDigits ?? 2));
  } catch {
    return `${amount} ${currency}`;
  }
}

// --------------------------------------------------------------------------------------- the record

interface Entry {
  refund: RefundJson;
  readonly seq: number;
  readonly createdAtMs: number;
  readonly idempotencyKey: string | null;
  readonly requestId: string | null;
  readonly paymentIntentOrderId: string | null;
  readonly paymentIntentOperationId: string | null;
}

/** Every refund ever created, whatever happened to the answer that announced it. */
export class RefundBook {
  #byId = new Map<string, Entry>();
  #seq = 0;

  create(pi: PaymentIntentJson, amount: number, params: RefundParams, pending: boolean, idempotencyKey: string | null, nowMs: number, requestId: string | null = null): RefundJson {
    let id = randomId('re_', 24);
    while (this.#byId.has(id)) id = randomId('re_', 24);
    const refund: RefundJson = {
      id,
      object: 'refund',
      amount,
      balance_transaction: randomId('txn_', 24),
      charge: chargeIdOf(pi.id),
      created: Math.floor(nowMs / 1000),
      currency: pi.currency,
      customer: pi.customer,
      metadata: { ...params.metadata },
      payment_intent: pi.id,
      payment_method: pi.payment_method,
      ...(pending ? { pending_reason: 'processing' as const } : {}),
      reason: params.reason,
      receipt_number: null,
      source_transfer_reversal: null,
      status: pending ? 'pending' : 'succeeded',
      transfer_reversal: null,
    };
    this.#seq += 1;
    this.#byId.set(id, {
      refund,
      seq: this.#seq,
      createdAtMs: nowMs,
      idempotencyKey,
      requestId,
      paymentIntentOrderId: pi.metadata.order_id ?? null,
      paymentIntentOperationId: pi.metadata.operation_id ?? null,
    });
    return refund;
  }

  get(id: string): RefundJson | null {
    return this.#byId.get(id)?.refund ?? null;
  }

  /**
   * What happens to a refund later. Stored idempotent answers are not rewritten (a replay still says
   * what the create said); retrieve and List tell the present, as with Stripe.
   */
  settle(id: string, status: RefundSettleStatus): RefundJson {
    const entry = this.#byId.get(id);
    if (entry === undefined) throw new RangeError(`no such Refund: ${id}`);
    const from = entry.refund.status;
    const allowed = from === 'pending' || from === 'requires_action' || (from === 'succeeded' && status === 'failed');
    if (!allowed) throw new RangeError(`Refund ${id} is ${from}; it cannot become ${status}`);
    const failed = status === 'failed' || status === 'canceled';
    const { pending_reason: _pending, ...rest } = entry.refund;
    entry.refund = {
      ...rest,
      status,
      ...(failed ? { failure_reason: status === 'failed' ? 'expired_or_canceled_card' : 'merchant_request', failure_balance_transaction: randomId('txn_', 24) } : {}),
    };
    return entry.refund;
  }

  /** What is taken from the PaymentIntent's charge: its pending, requires_action and succeeded refunds. */
  refundedAmount(paymentIntentId: string): number {
    let sum = 0;
    for (const { refund } of this.#byId.values()) {
      if (refund.payment_intent === paymentIntentId && HOLDING_STATUSES.includes(refund.status)) sum += refund.amount;
    }
    return sum;
  }

  /** Newest first, optionally of one PaymentIntent. */
  newestFirst(paymentIntentId: string | null): RefundJson[] {
    return [...this.#byId.values()]
      .filter((e) => paymentIntentId === null || e.refund.payment_intent === paymentIntentId)
      .sort((a, b) => b.seq - a.seq)
      .map((e) => e.refund);
  }

  records(filter: RefundFilter = {}): RefundRecord[] {
    return [...this.#byId.values()]
      .filter((e) => filter.paymentIntentId === undefined || e.refund.payment_intent === filter.paymentIntentId)
      .filter((e) => filter.orderId === undefined || e.paymentIntentOrderId === filter.orderId)
      .filter((e) => filter.operationId === undefined || e.refund.metadata.operation_id === filter.operationId)
      .sort((a, b) => a.seq - b.seq)
      .map((e) => ({
        ...structuredClone(e.refund),
        idempotencyKey: e.idempotencyKey,
        requestId: e.requestId,
        createdAtMs: e.createdAtMs,
        paymentIntentOrderId: e.paymentIntentOrderId,
        paymentIntentOperationId: e.paymentIntentOperationId,
      }));
  }

  countByStatus(): Record<RefundStatus, number> {
    const counts = Object.fromEntries(REFUND_STATUSES.map((s) => [s, 0])) as Record<RefundStatus, number>;
    for (const { refund } of this.#byId.values()) counts[refund.status] += 1;
    return counts;
  }

  get size(): number {
    return this.#byId.size;
  }

  clear(): void {
    this.#byId.clear();
    this.#seq = 0;
  }
}

// ------------------------------------------------------------------------------------------ the API

function checkedOverRefundError(form: OverRefundError): OverRefundError {
  if (!OVER_REFUND_ERRORS.includes(form)) throw new RangeError(`overRefundError must be one of ${OVER_REFUND_ERRORS.join(', ')}, got ${JSON.stringify(form)}`);
  return form;
}

export interface RefundReadFacts {
  readonly operationId: string | null;
  readonly orderId: string | null;
  readonly paymentIntentId: string | null;
  readonly refundId: string | null;
}

export interface ListQuery {
  readonly paymentIntentId: string | null;
  readonly limit: number;
  readonly startingAfter: string | null;
  readonly endingBefore: string | null;
  /** `created[gt|gte|lt|lte]` (Unix seconds); `created=N` is gte and lte N. */
  readonly created: { readonly gt?: number; readonly gte?: number; readonly lt?: number; readonly lte?: number };
  /** `expand[]=data.payment_intent`: each refund's payment_intent as the PaymentIntent object. */
  readonly expandPaymentIntent: boolean;
}

const LIST_PARAMS = new Set(['payment_intent', 'charge', 'limit', 'starting_after', 'ending_before']);

function parseListQuery(query: URLSearchParams): ListQuery {
  const created: { gt?: number; gte?: number; lt?: number; lte?: number } = {};
  let expandPaymentIntent = false;
  for (const [name, value] of query) {
    const range = /^created(?:\[(gt|gte|lt|lte)\])?$/.exec(name);
    if (range !== null) {
      if (!/^\d+$/.test(value)) invalid(`Invalid integer: ${value}`, 'parameter_invalid_integer', name);
      const bound = range[1] as 'gt' | 'gte' | 'lt' | 'lte' | undefined;
      if (bound === undefined) created.gte = created.lte = Number(value);
      else created[bound] = Number(value);
    } else if (/^expand(?:\[\d*\])?$/.test(name)) {
      // Refusing what is not modelled beats answering an id where the caller expects an object.
      if (value !== 'data.payment_intent') {
        invalid(`The fake Stripe server can only expand data.payment_intent on this list, not ${value}.`, 'parameter_invalid_string', name);
      }
      expandPaymentIntent = true;
    } else if (!LIST_PARAMS.has(name)) {
      invalid(`Received unknown parameter: ${name}`, 'parameter_unknown', name);
    }
  }
  const limitText = query.get('limit');
  const limit = limitText === null || limitText === '' ? LIST_DEFAULT_LIMIT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > LIST_MAX_LIMIT) {
    invalid(`Invalid limit: must be an integer between 1 and ${LIST_MAX_LIMIT}`, 'parameter_invalid_integer', 'limit');
  }
  const startingAfter = query.get('starting_after') || null;
  const endingBefore = query.get('ending_before') || null;
  if (startingAfter !== null && endingBefore !== null) {
    invalid('You may only specify one of these parameters: starting_after, ending_before.', 'parameter_invalid_string', 'ending_before');
  }
  // `payment_intent=` (an empty value) is not "no filter": Stripe reads an empty value as an attempt
  // to unset a parameter and refuses it where it cannot be unset — 400 invalid_request_error, code
  // `parameter_invalid_empty` (docs.stripe.com/error-codes: "One or more required values were not
  // provided"), message "You passed an empty string for '…'. We assume empty values are an attempt
  // to unset a parameter; however '…' cannot be unset. You should remove '…' from your request or
  // supply a non-empty value." Before this, the fake listed EVERY refund of the account for it.
  for (const name of ['payment_intent', 'charge'] as const) if (query.get(name) === '') refuseEmpty(name);
  const named = query.get('payment_intent');
  const charge = query.get('charge');
  // An unknown charge id maps to no PaymentIntent, which list() answers with resource_missing.
  const paymentIntentId = named ?? (charge === null ? null : (paymentIntentIdOfCharge(charge) ?? charge));
  return { paymentIntentId, limit, startingAfter, endingBefore, created, expandPaymentIntent };
}

function refuseEmpty(name: string): never {
  return invalid(
    `You passed an empty string for '${name}'. We assume empty values are an attempt to unset a parameter; however '${name}' cannot be unset. You should remove '${name}' from your request or supply a non-empty value.`,
    'parameter_invalid_empty',
    name,
  );
}

/**
 * How "more than is left on the charge" is refused. Stripe's error-code list documents
 * `amount_too_large` ("The specified amount is greater than the maximum amount allowed",
 * docs.stripe.com/error-codes), the default. Stripe has also been seen answering this very refusal
 * with NO code and param `amount` (edx/commerce-coordinator#360, 2025: "`ex.code` is empty,
 * `ex.param` is `amount`"; the message forms "Refund amount (…) is greater than unrefunded amount on
 * charge (…)" and, older, "… is greater than charge amount (…)", woocommerce-gateway-stripe#1315):
 * 'no_code' gives that form, so a client that reads only the code is caught.
 */
export type OverRefundError = 'amount_too_large' | 'no_code';
const OVER_REFUND_ERRORS: readonly OverRefundError[] = ['amount_too_large', 'no_code'];

export interface Answer {
  readonly status: number;
  readonly body: string;
}

/**
 * The Refunds endpoints' logic over the fake's PaymentIntents. `paymentIntent` looks one up in the
 * server's ledger; `settleAfterMs` (the server's processingSettleMs) lets refunds move on by themselves.
 */
export class RefundApi {
  readonly book = new RefundBook();
  readonly #paymentIntent: (id: string) => PaymentIntentJson | null;
  readonly #settleAfterMs: number | null;
  readonly #timers = new Set<NodeJS.Timeout>();
  /** PaymentIntents whose charge is charged back (a dispute): refunds of them are refused. */
  readonly #disputed = new Set<string>();
  #overRefundError: OverRefundError;

  constructor(paymentIntent: (id: string) => PaymentIntentJson | null, settleAfterMs: number | null, overRefundError: OverRefundError = 'amount_too_large') {
    this.#paymentIntent = paymentIntent;
    this.#settleAfterMs = settleAfterMs;
    this.#overRefundError = checkedOverRefundError(overRefundError);
  }

  setOverRefundError(form: OverRefundError): void {
    this.#overRefundError = checkedOverRefundError(form);
  }

  // ---------------------------------------------------------------------------------------- create

  /** Facts about a create for fault matching and the request log, from the raw body (valid or not). */
  createFacts(body: FormObject, replayed: StoredResponse | null): RefundReadFacts {
    const named = typeof body.payment_intent === 'string' && body.payment_intent !== '' ? body.payment_intent : null;
    const byCharge = typeof body.charge === 'string' ? paymentIntentIdOfCharge(body.charge) : null;
    return {
      operationId: metadataValue(body, 'operation_id'),
      orderId: metadataValue(body, 'order_id'),
      paymentIntentId: named ?? byCharge,
      refundId: replayed?.refundId ?? null,
    };
  }

  /** Stripe's validation: never executed, never stored, so a fixed request may reuse its key. */
  validateCreate(body: FormObject): ValidatedRefund {
    try {
      return { ok: true, params: this.#parseCreate(body) };
    } catch (error) {
      if (error instanceof InvalidParam) return { ok: false, error: error.envelope };
      throw error;
    }
  }

  #parseCreate(body: FormObject): RefundParams {
    for (const name of Object.keys(body)) {
      if (UNMODELLED_PARAMS.has(name)) {
        invalid(`The fake Stripe server does not model refunds with ${name} (customer-balance refunds).`, 'parameter_unknown', name);
      }
      if (!IGNORED_PARAMS.has(name) && !['payment_intent', 'charge', 'amount', 'reason', 'metadata'].includes(name)) {
        invalid(`Received unknown parameter: ${name}`, 'parameter_unknown', name);
      }
    }
    const named = stringParam(body, 'payment_intent');
    const charge = stringParam(body, 'charge');
    if (named === null && charge === null) {
      invalid('One of the following params should be provided for this request: payment_intent or charge.', 'parameter_missing', 'payment_intent');
    }
    const byCharge = charge === null ? null : paymentIntentIdOfCharge(charge);
    if (charge !== null && (byCharge === null || this.#paymentIntent(byCharge) === null)) {
      throw new InvalidParam(errors.resourceMissing('charge', charge, 'charge'));
    }
    if (named !== null && byCharge !== null && named !== byCharge) {
      invalid(`Charge ${charge} does not belong to PaymentIntent ${named}.`, 'parameter_invalid_string', 'charge');
    }
    const paymentIntentId = named ?? byCharge ?? '';
    if (this.#paymentIntent(paymentIntentId) === null) {
      throw new InvalidParam(errors.resourceMissing('payment_intent', paymentIntentId, 'payment_intent'));
    }

    const amountText = stringParam(body, 'amount');
    let amount: number | null = null;
    if (amountText !== null) {
      if (!/^-?\d+$/.test(amountText)) invalid(`Invalid integer: ${amountText}`, 'parameter_invalid_integer', 'amount');
      amount = Number(amountText);
      if (amount < 1) invalid('Invalid positive integer', 'parameter_invalid_integer', 'amount');
      if (amount > MAX_AMOUNT) invalid(`Amount must be no more than ${MAX_AMOUNT}.`, 'amount_too_large', 'amount');
    }

    const reasonText = stringParam(body, 'reason');
    if (reasonText !== null && !(REFUND_REASONS as readonly string[]).includes(reasonText)) {
      invalid(`Invalid reason: must be one of ${REFUND_REASONS.join(', ')}`, 'parameter_invalid_string', 'reason');
    }
    return { paymentIntentId, amount, reason: reasonText as RefundReason | null, metadata: metadataParam(body) };
  }

  /**
   * The commit of a refund create, judged on the PaymentIntent as it is NOW (after the request's hold
   * and latency): a concurrent refund of the same charge is counted. Synchronous on purpose — nothing
   * can slip between "how much is left" and "take it".
   */
  execute(
    params: RefundParams,
    fault: 'processing' | 'error_500_before_commit' | 'error_500_after_commit' | null,
    request: { readonly requestId: string; readonly idempotencyKey: string | null; readonly nowMs: number },
  ): StoredResponse {
    const { requestId } = request;
    const refused = (envelope: ErrorEnvelope): StoredResponse => ({
      status: 400,
      body: JSON.stringify(envelope),
      requestId,
      paymentIntentId: params.paymentIntentId,
      refundId: null,
    });
    if (fault === 'error_500_before_commit') {
      return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: params.paymentIntentId, refundId: null };
    }
    const judged = this.#judge(params);
    if (!judged.ok) return refused(judged.error);
    const { pi, amount } = judged;
    const refund = this.#take(pi, amount, params, fault === 'processing', request.idempotencyKey, request.nowMs, requestId);
    if (fault === 'error_500_after_commit') {
      return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: pi.id, refundId: refund.id };
    }
    return { status: 200, body: JSON.stringify(refund), requestId, paymentIntentId: pi.id, refundId: refund.id };
  }

  /** What is left on the charge now, and whether this refund fits in it. */
  #judge(params: RefundParams): { readonly ok: true; readonly pi: PaymentIntentJson; readonly amount: number } | { readonly ok: false; readonly error: ErrorEnvelope } {
    const pi = this.#paymentIntent(params.paymentIntentId);
    if (pi === null) return { ok: false, error: errors.resourceMissing('payment_intent', params.paymentIntentId, 'payment_intent') };
    if (pi.status !== 'succeeded') {
      return { ok: false, error: errors.invalidRequest(`This PaymentIntent (${pi.id}) does not have a successful charge to refund.`, undefined, 'payment_intent') };
    }
    if (this.#disputed.has(pi.id)) {
      // docs.stripe.com/error-codes#charge-disputed: "The charge you're attempting to refund has been
      // charged back." An invalid_request_error (HTTP 400) like every refusal of this endpoint; it
      // depends on the charge's state at execution, so it is stored for the key like the ones below.
      return { ok: false, error: errors.invalidRequest(`Charge ${chargeIdOf(pi.id)} has been charged back; cannot issue a refund.`, 'charge_disputed') };
    }
    // A partially captured payment (manual capture) can give back only what was captured: the
    // charge's amount_captured, the PaymentIntent's amount_received (the rest was released, never taken).
    const left = (pi.amount_received ?? pi.amount) - this.book.refundedAmount(pi.id);
    if (left <= 0) {
      return { ok: false, error: errors.invalidRequest(`Charge ${chargeIdOf(pi.id)} has already been refunded.`, 'charge_already_refunded') };
    }
    const amount = params.amount ?? left;
    if (amount > left) {
      const message = `Refund amount (${money(amount, pi.currency)}) is greater than unrefunded amount on charge (${money(left, pi.currency)})`;
      return { ok: false, error: errors.invalidRequest(message, this.#overRefundError === 'no_code' ? undefined : 'amount_too_large', 'amount') };
    }
    return { ok: true, pi, amount };
  }

  /** The Refund made, and what happens to it later (Stripe's test payment methods). */
  #take(pi: PaymentIntentJson, amount: number, params: RefundParams, processing: boolean, idempotencyKey: string | null, nowMs: number, requestId: string | null = null): RefundJson {
    const pending = processing || pi.payment_method === PENDING_REFUND_PAYMENT_METHOD;
    const refund = this.book.create(pi, amount, params, pending, idempotencyKey, nowMs, requestId);
    if (pending) this.#scheduleSettle(refund.id, 'pending', 'succeeded');
    else if (pi.payment_method === FAILING_REFUND_PAYMENT_METHOD) this.#scheduleSettle(refund.id, 'succeeded', 'failed');
    return refund;
  }

  /**
   * A refund made in the Dashboard (or by any other integration of the account): a Refund like any
   * other — listed by GET /v1/refunds, taken from what is left on the charge, announced by the same
   * events — only without our metadata (empty) and without an Idempotency-Key. "You can optionally
   * refund only part of a charge ... until the entire charge has been refunded" holds for it too, so
   * a refund of more than is left is refused (RangeError, with Stripe's message).
   * Stripe: "You can issue refunds using the API or the Dashboard" (docs.stripe.com/refunds).
   */
  dashboardRefund(paymentIntentId: string, amount: number | null, nowMs: number): RefundJson {
    if (amount !== null && (!Number.isInteger(amount) || amount < 1)) throw new RangeError(`a refund amount is a positive integer, got ${amount}`);
    const params: RefundParams = { paymentIntentId, amount, reason: null, metadata: {} };
    const judged = this.#judge(params);
    if (!judged.ok) throw new RangeError(judged.error.error.message);
    return this.#take(judged.pi, judged.amount, params, false, null, nowMs);
  }

  // ------------------------------------------------------------------------------------- retrieve

  retrieveFacts(id: string): RefundReadFacts {
    const known = this.book.get(id);
    return {
      operationId: known?.metadata.operation_id ?? null,
      orderId: known === null ? null : (this.#paymentIntent(known.payment_intent)?.metadata.order_id ?? null),
      paymentIntentId: known?.payment_intent ?? null,
      refundId: id,
    };
  }

  /** Read when the answer is made: a test may settle the refund while the request is parked. */
  retrieve(id: string): Answer {
    const refund = this.book.get(id);
    // A Refund belongs to its PaymentIntent's account: for another account it is not there.
    if (refund === null || this.#paymentIntent(refund.payment_intent) === null) return { status: 404, body: JSON.stringify(errors.resourceMissing('refund', id, 'id')) };
    return { status: 200, body: JSON.stringify(refund) };
  }

  // ----------------------------------------------------------------------------------------- list

  /** Malformed query parameters: refused before anything is read. */
  parseListQuery(query: URLSearchParams): { readonly ok: true; readonly query: ListQuery } | { readonly ok: false; readonly error: ErrorEnvelope } {
    try {
      return { ok: true, query: parseListQuery(query) };
    } catch (error) {
      if (error instanceof InvalidParam) return { ok: false, error: error.envelope };
      throw error;
    }
  }

  listFacts(query: ListQuery | null): RefundReadFacts {
    const pi = query?.paymentIntentId == null ? null : this.#paymentIntent(query.paymentIntentId);
    return {
      operationId: pi?.metadata.operation_id ?? null,
      orderId: pi?.metadata.order_id ?? null,
      paymentIntentId: query?.paymentIntentId ?? null,
      refundId: null,
    };
  }

  /** Real time: every refund that exists when the answer is made, newest first. */
  list(query: ListQuery): Answer {
    const refused = (envelope: ErrorEnvelope): Answer => ({ status: 400, body: JSON.stringify(envelope) });
    if (query.paymentIntentId !== null && this.#paymentIntent(query.paymentIntentId) === null) {
      return refused(errors.resourceMissing('payment_intent', query.paymentIntentId, 'payment_intent'));
    }
    const { gt, gte, lt, lte } = query.created;
    const all = this.book
      .newestFirst(query.paymentIntentId)
      .filter((r) => this.#paymentIntent(r.payment_intent) !== null)
      .filter((r) => (gt === undefined || r.created > gt) && (gte === undefined || r.created >= gte))
      .filter((r) => (lt === undefined || r.created < lt) && (lte === undefined || r.created <= lte));
    let page: RefundJson[];
    let hasMore: boolean;
    const cursor = query.startingAfter ?? query.endingBefore;
    if (cursor === null) {
      page = all.slice(0, query.limit);
      hasMore = all.length > query.limit;
    } else {
      const at = all.findIndex((r) => r.id === cursor);
      if (at < 0) {
        const param = query.startingAfter !== null ? 'starting_after' : 'ending_before';
        return refused(errors.resourceMissing('refund', cursor, param));
      }
      if (query.startingAfter !== null) {
        page = all.slice(at + 1, at + 1 + query.limit);
        hasMore = all.length > at + 1 + query.limit;
      } else {
        // ending_before walks towards newer refunds: the `limit` just before the cursor, newest first.
        page = all.slice(Math.max(0, at - query.limit), at);
        hasMore = at - query.limit > 0;
      }
    }
    const data = query.expandPaymentIntent
      ? page.map((r) => ({ ...r, payment_intent: this.#paymentIntent(r.payment_intent) ?? r.payment_intent }))
      : page;
    return { status: 200, body: JSON.stringify({ object: 'list', url: '/v1/refunds', has_more: hasMore, data }) };
  }

  // ----------------------------------------------------------------------------------------- later

  settle(id: string, status: RefundSettleStatus): RefundJson {
    return this.book.settle(id, status);
  }

  #scheduleSettle(id: string, from: RefundStatus, to: RefundSettleStatus): void {
    if (this.#settleAfterMs === null) return;
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      // Someone may have settled it by hand in the meantime; then there is nothing left to do.
      if (this.book.get(id)?.status === from) this.book.settle(id, to);
    }, this.#settleAfterMs);
    timer.unref();
    this.#timers.add(timer);
  }

  stopTimers(): void {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
  }

  setDisputed(paymentIntentId: string, disputed: boolean): void {
    if (disputed) this.#disputed.add(paymentIntentId);
    else this.#disputed.delete(paymentIntentId);
  }

  clear(): void {
    this.stopTimers();
    this.book.clear();
    this.#disputed.clear();
  }
}
