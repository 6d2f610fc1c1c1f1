// The Stripe adapter: the real `stripe` SDK, our idempotency key on every create, explicit timeout
// and retries, and the error mapping of docs/model.md (the classification table). It never throws: every outcome is a value.
import Stripe from 'stripe';
import { DEFAULT_STRIPE_MAX_NETWORK_RETRIES, DEFAULT_STRIPE_TIMEOUT_MS } from './call-budget.ts';
import { MAX_LIST_PAGES_FOR_PROOF } from './decisions.ts';
import {
  FailureKind,
  type AccountScope,
  type AuthorizationActionRequest,
  type CreatePaymentIntentRequest,
  type CreateRefundRequest,
  type RefundView,
  type GatewayFailure,
  type GatewayResult,
  type ListAnswer,
  type ListRequest,
  type PaymentGateway,
  type SearchPaymentIntentsRequest,
  type StripeKeyMode,
  stripeKeyMode,
} from './gateway.ts';
import type { PaymentIntentView } from './types.ts';

export interface StripeClientOptions {
  readonly apiKey: string;
  /** e.g. http://127.0.0.1:12111 for the fake server or stripe-mock; default api.stripe.com. */
  readonly apiBase?: string | undefined;
  /** Per HTTP attempt. The SDK's default is 80 s — far too long inside a Lambda. */
  readonly timeoutMs?: number;
  /**
   * Retries inside one SDK call (same key, so safe). The SDK's default is 2 whatever its typings
   * say; we set it explicitly. Retries across calls are the database's job (next_attempt_at).
   */
  readonly maxNetworkRetries?: number;
}


/** How Stripe answered one HTTP attempt of a call sent with an idempotency key. */
interface AttemptAnswer {
  readonly status: number;
  /** Stripe-Should-Retry as sent: 'true' (a lock timeout), 'false' (Stripe's own 500), or absent. */
  readonly shouldRetry: string | null;
}

/** The answers the SDK's HTTP client got, by idempotency key, for the gateway over that client. */
class AttemptAnswers {
  readonly #listeners = new Set<(key: string, answer: AttemptAnswer) => void>();
  on(listener: (key: string, answer: AttemptAnswer) => void): void {
    this.#listeners.add(listener);
  }
  answered(key: string, answer: AttemptAnswer): void {
    for (const listener of this.#listeners) listener(key, answer);
  }
}

const answersOf = new WeakMap<Stripe, AttemptAnswers>();

/**
 * The SDK's own Node HTTP client, reporting each attempt's status and Stripe-Should-Retry. stripe-node
 * retries inside one call (RequestSender._shouldRetry) and tells only the last answer; its `response`
 * event is emitted for the last attempt only. What the earlier ones were decides what the call proves:
 * a 429 lock timeout (`Stripe-Should-Retry: true`) is retried by the SDK and, like every 429, 401 and
 * 403, was refused before Stripe's idempotency layer — nothing executed.
 */
function answeringHttpClient(answers: AttemptAnswers): NonNullable<Stripe.StripeConfig['httpClient']> {
  const inner = Stripe.createNodeHttpClient();
  return {
    getClientName: () => inner.getClientName(),
    makeRequest: async (host, port, path, method, headers, requestData, protocol, timeout) => {
      const response = await inner.makeRequest(host, port, path, method, headers, requestData, protocol, timeout);
      const key = headers['Idempotency-Key'];
      if (typeof key === 'string') {
        const retry = response.getHeaders()['stripe-should-retry'];
        answers.answered(key, { status: response.getStatusCode(), shouldRetry: typeof retry === 'string' ? retry : null });
      }
      return response;
    },
  };
}

export function createStripeClient(options: StripeClientOptions): Stripe {
  const answers = new AttemptAnswers();
  const config: Stripe.StripeConfig = {
    timeout: options.timeoutMs ?? DEFAULT_STRIPE_TIMEOUT_MS,
    maxNetworkRetries: options.maxNetworkRetries ?? DEFAULT_STRIPE_MAX_NETWORK_RETRIES,
    telemetry: false,
    httpClient: answeringHttpClient(answers),
  };
  if (options.apiBase) {
    const base = new URL(options.apiBase);
    const protocol = base.protocol.replace(':', '');
    if (protocol !== 'http' && protocol !== 'https') throw new Error(`STRIPE_API_BASE must be http(s): ${options.apiBase}`);
    config.host = base.hostname;
    config.port = base.port || (protocol === 'https' ? 443 : 80);
    config.protocol = protocol;
  }
  const stripe = new Stripe(options.apiKey, config);
  answersOf.set(stripe, answers);
  return stripe;
}

/** A client for the key and its gateway, which knows the key's mode (the key itself is not kept). */
export function stripeGatewayFor(options: StripeClientOptions): StripeGateway {
  return new StripeGateway(createStripeClient(options), { keyMode: stripeKeyMode(options.apiKey) });
}

type Call = 'create' | 'retrieve' | 'search' | 'list';

interface StripeErrorLike {
  type?: unknown;
  message?: unknown;
  statusCode?: unknown;
  code?: unknown;
  decline_code?: unknown;
  requestId?: unknown;
  payment_intent?: unknown;
  param?: unknown;
  name?: unknown;
  headers?: unknown;
}

/** The classification table of docs/model.md as code. Pure: the SDK's error object in, a classification out. */
export function classifyStripeError(error: unknown, call: Call): GatewayFailure {
  const e = (typeof error === 'object' && error !== null ? error : {}) as StripeErrorLike;
  const errorClass = typeof e.type === 'string' && e.type.startsWith('Stripe') ? e.type : typeof e.name === 'string' ? e.name : 'Error';
  const httpStatus = typeof e.statusCode === 'number' ? e.statusCode : undefined;
  const code = typeof e.decline_code === 'string' && e.decline_code ? e.decline_code : typeof e.code === 'string' ? e.code : undefined;
  const base = {
    errorClass,
    message: typeof e.message === 'string' ? e.message : String(error),
    ...(httpStatus !== undefined ? { httpStatus } : {}),
    ...(code ? { code } : {}),
    ...(typeof e.param === 'string' && e.param ? { param: e.param } : {}),
    ...(typeof e.requestId === 'string' ? { requestId: e.requestId } : {}),
    ...shouldRetryOf(e.headers),
  };
  switch (errorClass) {
    case 'StripeCardError': {
      const pi = toView(e.payment_intent);
      return { ...base, kind: FailureKind.declined, ...(pi ? { paymentIntent: pi } : {}) };
    }
    case 'StripeInvalidRequestError': {
      // payment_intent_unexpected_state carries the PaymentIntent as it is (a capture of one already
      // captured or canceled): evidence, as a decline's is.
      const pi = code === 'payment_intent_unexpected_state' ? toView(e.payment_intent) : undefined;
      return { ...base, kind: call === 'retrieve' && httpStatus === 404 ? FailureKind.notFound : FailureKind.invalidRequest, ...(pi ? { paymentIntent: pi } : {}) };
    }
    case 'StripeIdempotencyError':
      return { ...base, kind: FailureKind.idempotencyMisuse };
    case 'StripeRateLimitError':
      return { ...base, kind: FailureKind.rateLimited };
    case 'StripeAuthenticationError':
      return { ...base, kind: FailureKind.authentication };
    case 'StripePermissionError':
      return { ...base, kind: FailureKind.permission };
    default:
      // StripeConnectionError (timeout, reset), StripeAPIError (5xx, 409 key in use, bad JSON) and
      // anything unforeseen: we cannot tell whether Stripe executed it. Never "failed".
      return { ...base, kind: FailureKind.ambiguous };
  }
}

/** Stripe-Should-Retry of an error answer (stripe-node keeps the headers on the error). */
function shouldRetryOf(headers: unknown): { stripeShouldRetry?: boolean } {
  const value = typeof headers === 'object' && headers !== null ? (headers as Record<string, unknown>)['stripe-should-retry'] : undefined;
  return value === 'true' ? { stripeShouldRetry: true } : value === 'false' ? { stripeShouldRetry: false } : {};
}

function toView(raw: unknown): PaymentIntentView | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const pi = raw as Record<string, unknown>;
  if (pi.object !== 'payment_intent' || typeof pi.id !== 'string' || typeof pi.status !== 'string') return undefined;
  if (typeof pi.amount !== 'number' || typeof pi.currency !== 'string') return undefined;
  const metadata: Record<string, string> = {};
  if (typeof pi.metadata === 'object' && pi.metadata !== null) {
    for (const [key, value] of Object.entries(pi.metadata)) if (typeof value === 'string') metadata[key] = value;
  }
  return {
    id: pi.id,
    status: pi.status,
    amount: pi.amount,
    currency: pi.currency,
    metadata,
    ...(typeof pi.customer === 'string' || pi.customer === null ? { customer: pi.customer } : {}),
    ...paymentMethodTypeOf(pi.payment_method),
    ...(typeof pi.amount_received === 'number' ? { amountReceived: pi.amount_received } : {}),
    ...(typeof pi.cancellation_reason === 'string' || pi.cancellation_reason === null ? { cancellationReason: pi.cancellation_reason } : {}),
  };
}

/** The payment method's type, when the answer carried it expanded (`expand: ['payment_method']`). */
function paymentMethodTypeOf(raw: unknown): { paymentMethodType?: string } {
  if (typeof raw !== 'object' || raw === null) return {};
  const pm = raw as Record<string, unknown>;
  return pm.object === 'payment_method' && typeof pm.type === 'string' ? { paymentMethodType: pm.type } : {};
}

function toRefundView(raw: unknown): RefundView | undefined {
  if (typeof raw !== 'object' || raw === null) return undefined;
  const re = raw as Record<string, unknown>;
  if (re.object !== 'refund' || typeof re.id !== 'string' || typeof re.status !== 'string') return undefined;
  if (typeof re.amount !== 'number' || typeof re.currency !== 'string') return undefined;
  const metadata: Record<string, string> = {};
  if (typeof re.metadata === 'object' && re.metadata !== null) {
    for (const [key, value] of Object.entries(re.metadata)) if (typeof value === 'string') metadata[key] = value;
  }
  const pi = re.payment_intent;
  const paymentIntent = typeof pi === 'string' ? pi : typeof pi === 'object' && pi !== null && typeof (pi as { id?: unknown }).id === 'string' ? (pi as { id: string }).id : null;
  const failureReason = typeof re.failure_reason === 'string' ? re.failure_reason : null;
  return { id: re.id, status: re.status, amount: re.amount, currency: re.currency, metadata, paymentIntent, failureReason };
}

function checkedRefund(resource: unknown): GatewayResult<RefundView> {
  const status = lastStatus(resource);
  if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
  const view = toRefundView(resource);
  return view ? { ok: true, value: view } : unexpected(status, 'answer is not a Refund');
}

/**
 * stripe-node resolves a non-2xx answer whose body has no `error` key as if it were a success. Such
 * an answer tells us nothing about the charge: anything that is not a 2xx PaymentIntent is ambiguous.
 */
function unexpected(status: number | undefined, message: string): GatewayResult<never> {
  return {
    ok: false,
    failure: { kind: FailureKind.ambiguous, errorClass: 'UnexpectedResponse', ...(status !== undefined ? { httpStatus: status } : {}), message },
  };
}

function checkedPaymentIntent(resource: unknown): GatewayResult<PaymentIntentView> {
  const status = lastStatus(resource);
  if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
  const view = toView(resource);
  return view ? { ok: true, value: view } : unexpected(status, 'answer is not a PaymentIntent');
}

function lastStatus(resource: unknown): number | undefined {
  const status = (resource as { lastResponse?: { statusCode?: unknown } } | null)?.lastResponse?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

// One customer's PaymentIntents in one operation's send window are normally a handful; the List reader
// stops, incomplete, at MAX_LIST_PAGES_FOR_PROOF pages (2,000 objects), past which it proves nothing.

/**
 * The request option that makes a call AS a connected account: stripe-node sends `stripeAccount` as
 * the Stripe-Account header (stripe-node README, "Using Stripe Connect"; docs.stripe.com/connect/authentication).
 * Nothing for the platform.
 */
function asAccount(scope: AccountScope): { stripeAccount?: string } {
  return scope.account ? { stripeAccount: scope.account } : {};
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

/**
 * Counts the HTTP attempts stripe-node makes per idempotency key. The SDK emits a `request` event on
 * its client for every attempt, retries included (RequestSender.makeRequest in stripe@23.1.0, and
 * stripe-node's README, "Request and response events"); a create's key is ours, so the events of one
 * call can be told apart from the others'. Two calls with one key at once (a zombie and its rescuer
 * in one process) share a count: they can only over-count, i.e. read a 429 as "may have executed".
 */
class AttemptCounter {
  readonly #byKey = new Map<string, { calls: number; attempts: number; refused: number }>();
  /** Whether this client reports each attempt's answer (a client made by createStripeClient). */
  readonly #seesAnswers: boolean;

  constructor(stripe: Stripe) {
    stripe.on('request', (event: Stripe.RequestEvent) => {
      const entry = event.idempotency_key === undefined ? undefined : this.#byKey.get(event.idempotency_key);
      if (entry) entry.attempts += 1;
    });
    const answers = answersOf.get(stripe);
    this.#seesAnswers = answers !== undefined;
    answers?.on((key, answer) => {
      const entry = this.#byKey.get(key);
      if (entry && REFUSED_BEFORE_EXECUTION.has(answer.status)) entry.refused += 1;
    });
  }

  async count<T>(key: string, call: () => Promise<T>): Promise<{ value: T; attempts: number; refused: number | undefined }> {
    const entry = this.#byKey.get(key) ?? { calls: 0, attempts: 0, refused: 0 };
    this.#byKey.set(key, entry);
    entry.calls += 1;
    const before = entry.attempts;
    const refusedBefore = entry.refused;
    try {
      const value = await call();
      return { value, attempts: entry.attempts - before, refused: this.#seesAnswers ? entry.refused - refusedBefore : undefined };
    } finally {
      entry.calls -= 1;
      if (entry.calls === 0) this.#byKey.delete(key);
    }
  }
}

/** Answers Stripe gives before its idempotency layer: the attempt executed nothing (a lock timeout is a 429 too). */
const REFUSED_BEFORE_EXECUTION = new Set([401, 403, 429]);

/** A failed call's attempt counts, for decisions.ts (httpAttempts; attemptsRefused when each answer was seen). */
function withAttempts(failure: GatewayFailure, attempts: number, refused: number | undefined): GatewayFailure {
  return { ...failure, httpAttempts: attempts, ...(refused !== undefined ? { attemptsRefused: refused } : {}) };
}

export class StripeGateway implements PaymentGateway {
  readonly #stripe: Stripe;
  readonly #attempts: AttemptCounter;
  readonly keyMode: StripeKeyMode | null;

  /** `keyMode`: the mode of the client's key (stripeKeyMode); without it the mode is unknown. stripeGatewayFor() derives it. */
  constructor(stripe: Stripe, options: { readonly keyMode?: StripeKeyMode | null } = {}) {
    this.#stripe = stripe;
    this.#attempts = new AttemptCounter(stripe);
    this.keyMode = options.keyMode ?? null;
  }

  async createPaymentIntent(request: CreatePaymentIntentRequest): Promise<GatewayResult<PaymentIntentView>> {
    const { value, attempts, refused } = await this.#attempts.count(request.idempotencyKey, () => this.#create(request));
    return value.ok ? value : { ok: false, failure: withAttempts(value.failure, attempts, refused) };
  }

  async #create(request: CreatePaymentIntentRequest): Promise<GatewayResult<PaymentIntentView>> {
    try {
      const pi = await this.#stripe.paymentIntents.create(
        {
          amount: request.amount,
          currency: request.currency,
          customer: request.customerId,
          payment_method: request.paymentMethod,
          confirm: true,
          off_session: true,
          metadata: { ...request.metadata },
          ...(request.description ? { description: request.description } : {}),
          ...(request.statementDescriptorSuffix ? { statement_descriptor_suffix: request.statementDescriptorSuffix } : {}),
          ...(request.applicationFeeAmount ? { application_fee_amount: request.applicationFeeAmount } : {}),
          ...(request.transferDestination ? { transfer_data: { destination: request.transferDestination } } : {}),
          ...(request.captureMethod ? { capture_method: request.captureMethod } : {}),
        },
        { idempotencyKey: request.idempotencyKey, ...asAccount(request) },
      );
      return checkedPaymentIntent(pi);
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'create') };
    }
  }

  async capturePaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#authorizationAction(request, () =>
      this.#stripe.paymentIntents.capture(
        request.paymentIntentId,
        request.amount !== undefined ? { amount_to_capture: request.amount } : {},
        { idempotencyKey: request.idempotencyKey, ...asAccount(request) },
      ),
    );
  }

  async cancelPaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#authorizationAction(request, () =>
      this.#stripe.paymentIntents.cancel(request.paymentIntentId, {}, { idempotencyKey: request.idempotencyKey, ...asAccount(request) }),
    );
  }

  /** A capture or cancel, counted and classified as a create is (it changes something at Stripe, under our key). */
  async #authorizationAction(request: AuthorizationActionRequest, call: () => Promise<unknown>): Promise<GatewayResult<PaymentIntentView>> {
    const { value, attempts, refused } = await this.#attempts.count(request.idempotencyKey, async (): Promise<GatewayResult<PaymentIntentView>> => {
      try {
        return checkedPaymentIntent(await call());
      } catch (error) {
        return { ok: false, failure: classifyStripeError(error, 'create') };
      }
    });
    return value.ok ? value : { ok: false, failure: withAttempts(value.failure, attempts, refused) };
  }

  async retrievePaymentIntent(id: string, scope: AccountScope = {}): Promise<GatewayResult<PaymentIntentView>> {
    try {
      // The PaymentMethod expanded: its type decides how long `processing` is normal (a SEPA debit
      // takes days; decisions.ts unsettledBoundFor). A GET: no idempotency key, nothing changes.
      const pi = await this.#stripe.paymentIntents.retrieve(id, { expand: ['payment_method'] }, asAccount(scope));
      return checkedPaymentIntent(pi);
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'retrieve') };
    }
  }

  async searchPaymentIntents(request: SearchPaymentIntentsRequest): Promise<GatewayResult<PaymentIntentView[]>> {
    // The query is built from a uuid and an integer we generated, never from producer input.
    if (!UUID.test(request.operationId) || !Number.isSafeInteger(request.keyGeneration)) {
      throw new Error(`refusing to build a search query from ${request.operationId}/${request.keyGeneration}`);
    }
    const query = `metadata['operation_id']:'${request.operationId}' AND metadata['key_generation']:'${request.keyGeneration}'`;
    try {
      const found: PaymentIntentView[] = [];
      let page: string | undefined;
      // One operation has one PaymentIntent, or a few in the cases a human must see; 3 pages is plenty.
      for (let pages = 0; pages < 3; pages++) {
        const result = await this.#stripe.paymentIntents.search({ query, limit: 100, ...(page ? { page } : {}) }, asAccount(request));
        const status = lastStatus(result);
        if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
        if (!Array.isArray(result.data)) return unexpected(status, 'search answer has no data');
        for (const item of result.data) {
          const view = toView(item);
          if (view) found.push(view);
        }
        if (!result.has_more || !result.next_page) break;
        page = result.next_page;
      }
      return { ok: true, value: found };
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'search') };
    }
  }

  async createRefund(request: CreateRefundRequest): Promise<GatewayResult<RefundView>> {
    const { value, attempts, refused } = await this.#attempts.count(request.idempotencyKey, async (): Promise<GatewayResult<RefundView>> => {
      try {
        const refund = await this.#stripe.refunds.create(
          {
            payment_intent: request.paymentIntentId,
            amount: request.amount,
            ...(request.reason ? { reason: request.reason as Stripe.RefundCreateParams.Reason } : {}),
            metadata: { ...request.metadata },
          },
          { idempotencyKey: request.idempotencyKey, ...asAccount(request) },
        );
        return checkedRefund(refund);
      } catch (error) {
        return { ok: false, failure: classifyStripeError(error, 'create') };
      }
    });
    return value.ok ? value : { ok: false, failure: withAttempts(value.failure, attempts, refused) };
  }

  async retrieveRefund(id: string, scope: AccountScope = {}): Promise<GatewayResult<RefundView>> {
    try {
      return checkedRefund(await this.#stripe.refunds.retrieve(id, {}, asAccount(scope)));
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'retrieve') };
    }
  }

  /**
   * GET /v1/refunds?payment_intent=…&limit=100, every page (newest first; docs.stripe.com/api/refunds/list:
   * real time). A PaymentIntent has a handful of refunds, so the whole list is read and the created
   * range is not sent: absence is then shown over the PaymentIntent's whole life.
   */
  async listRefunds(request: ListRequest): Promise<GatewayResult<ListAnswer<RefundView>>> {
    const paymentIntent = request.scope.payment_intent;
    if (paymentIntent === undefined) throw new Error('listRefunds needs scope.payment_intent');
    // Never `payment_intent=`: Stripe refuses an empty value (400 parameter_invalid_empty, "You passed
    // an empty string for 'payment_intent'"), and a Stripe-compatible server that read it as "no
    // filter" would answer with every refund of the account — evidence about nothing. Nothing is sent.
    if (paymentIntent.trim() === '') throw new Error('listRefunds needs a PaymentIntent id in scope.payment_intent, got an empty one: the refund operation names no PaymentIntent to list; nothing was sent');
    return readAllPages(
      request.beforePage,
      (startingAfter) =>
        this.#stripe.refunds.list({ payment_intent: paymentIntent, limit: 100, ...(startingAfter ? { starting_after: startingAfter } : {}) }, asAccount(request)),
      toRefundView,
      'Refund',
    );
  }

  /**
   * GET /v1/payment_intents?customer=…&created[gte]=…&created[lte]=…&limit=100, every page
   * (`has_more`, `starting_after` = the last id of the page; newest first: docs.stripe.com/api/pagination).
   * Real time, unlike Search. Stops, incomplete, at MAX_LIST_PAGES_FOR_PROOF or when beforePage says no.
   */
  async listPaymentIntents(request: ListRequest): Promise<GatewayResult<ListAnswer<PaymentIntentView>>> {
    const customer = request.scope.customer;
    if (customer === undefined) throw new Error('listPaymentIntents needs scope.customer');
    return readAllPages(
      request.beforePage,
      (startingAfter) =>
        this.#stripe.paymentIntents.list({
          customer,
          created: { gte: request.createdGte, lte: request.createdLte },
          limit: 100,
          ...(startingAfter ? { starting_after: startingAfter } : {}),
        }, asAccount(request)),
      toView,
      'PaymentIntent',
    );
  }
}

/**
 * Every page of a Stripe list (`has_more`, `starting_after` = the last id of the page:
 * docs.stripe.com/api/pagination), for any object kind. Stops, incomplete, at MAX_LIST_PAGES_FOR_PROOF or when
 * `beforePage` (the rate limiter) says no before a further page.
 */
async function readAllPages<T>(
  beforePage: (() => Promise<boolean> | boolean) | undefined,
  fetchPage: (startingAfter: string | undefined) => Promise<{ data: readonly { id?: string }[]; has_more: boolean }>,
  read: (item: never) => T | null | undefined,
  objectName: string,
): Promise<GatewayResult<ListAnswer<T>>> {
  const items: T[] = [];
  const requestIds: string[] = [];
  let startingAfter: string | undefined;
  try {
    for (let pages = 0; ; pages++) {
      if (pages === MAX_LIST_PAGES_FOR_PROOF || (pages > 0 && !((await beforePage?.()) ?? true))) {
        return { ok: true, value: { items, pages, requestIds, complete: false } };
      }
      const page = await fetchPage(startingAfter);
      const status = lastStatus(page);
      if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
      if (!Array.isArray(page.data) || typeof page.has_more !== 'boolean') return unexpected(status, 'list answer has no data / has_more');
      const requestId = (page as { lastResponse?: { requestId?: unknown } }).lastResponse?.requestId;
      if (typeof requestId === 'string') requestIds.push(requestId);
      for (const item of page.data) {
        const view = read(item as never);
        // An item we cannot read could be the one we look for: the list proves nothing then.
        if (!view) return unexpected(status, `list answer holds an object that is not a ${objectName}`);
        items.push(view);
      }
      const last = page.data[page.data.length - 1];
      if (!page.has_more) return { ok: true, value: { items, pages: pages + 1, requestIds, complete: true } };
      if (!last?.id) return unexpected(status, 'list answer says has_more but has no last id');
      startingAfter = last.id;
    }
  } catch (error) {
    return { ok: false, failure: classifyStripeError(error, 'list') };
  }
}
