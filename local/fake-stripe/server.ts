// A fake Stripe API server that the REAL stripe SDK talks to over HTTP. It models the parts of Stripe
// the product's guarantees rest on (docs/fake-stripe.md): the idempotency layer (replay, parameter
// mismatch, 409 while in flight, pruning), Search lag, and faults on either side of the commit.
//
// One request's life (create):
//   auth ─ rate limit ─ [gate faults: 429/401/403] ─ idempotency lookup ─ validation ─ lock key
//     ─ hold() ─ latency ─ EXECUTE (+ commit faults) ─ store answer for the key ─ deliver (+ answer faults)
// Everything before "lock key" leaves no trace at Stripe; everything after it does, whatever the
// caller hears. A refund create (refunds.ts) lives the very same life: #idempotentPost with a PostKind.
// The late-commit faults (late-commits.ts) cut that life in two: the key is locked and answered (500)
// or left in flight now, and EXECUTE happens later.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { handleControl } from './control.ts';
import { faultStage, FaultPlan, matches, type ChosenFault, type RequestFacts, type RequestPhase } from './faults.ts';
import { IdempotencyStore, type KeyEntry, type Lookup, type StoredResponse } from './idempotency.ts';
import { LateCommits } from './late-commits.ts';
import { Ledger, type CreatedRange } from './ledger.ts';
import { RefundApi, type Answer, type OverRefundError, type RefundParams } from './refunds.ts';
import {
  FAULT_KINDS,
  type CancellationReason,
  type Endpoint,
  type FakeStripe,
  type FakeStripeOptions,
  type FakeStripeStats,
  type FaultKind,
  type FaultMatch,
  type FaultRates,
  type HoldHandle,
  type LateCommitFault,
  type LateCommitResult,
  type PaymentIntentFilter,
  type PaymentIntentJson,
  type PaymentIntentRecord,
  type RefundFilter,
  type RefundJson,
  type RefundRecord,
  type RefundSettleStatus,
  type RequestOutcome,
  type RequestRecord,
  type SettleStatus,
} from './types.ts';
import {
  cardOutcome,
  DECLINE_FAULT_OUTCOME,
  decodeForm,
  decodePage,
  encodePage,
  errors,
  fingerprint,
  FormError,
  integerParam,
  InvalidParam,
  metadataValue,
  parseSearchQuery,
  paymentMethodJson,
  queryMetadata,
  randomId,
  validateCreate,
  type CardOutcome,
  type CreateParams,
  type ErrorEnvelope,
  type FormObject,
} from './wire.ts';

export * from './types.ts';
export { FAULT_PROFILES, isFaultProfileName, sdkAttemptsWhenConnectionCloses, type FaultProfileName } from './faults.ts';

const HOST = '127.0.0.1';
/**
 * docs.stripe.com/rate-limits: the basic limiter allows 100 operations per second in live mode and 25
 * in sandboxes; each endpoint is limited to 25 requests per second by default, the Search API to 20
 * read operations per second. (Its 1,000 updates per PaymentIntent per hour are not modelled: the fake
 * has no update endpoint.)
 */
const STRIPE_PER_ENDPOINT_PER_SECOND = 25;
const STRIPE_SEARCH_PER_SECOND = 20;
export const STRIPE_TEST_MODE_RATE_LIMIT = { perSecond: 25 } as const;
const MAX_BODY_BYTES = 1 << 20;
/** 7 days: see FakeStripeOptions.authorizationExpiryMs. */
const AUTHORIZATION_EXPIRY_MS = 7 * 24 * 3_600_000;
/** Stripe's limit on Idempotency-Key length. */
const MAX_KEY_LENGTH = 255;
const SEARCH_DEFAULT_LIMIT = 10;
const SEARCH_MAX_LIMIT = 100;
/**
 * Longer than Node's 5 s default on purpose: stripe-node's agent keeps sockets forever, and a server
 * closing an idle one just as the SDK reuses it makes an ECONNRESET the SDK silently retries — noise
 * that looks like a lost response but was never injected.
 */
const KEEP_ALIVE_TIMEOUT_MS = 65_000;
/** stall_after_commit: one byte of whitespace this often, well under any client's idle timeout. */
const STALL_TRICKLE_MS = 250;

export async function startFakeStripe(options: FakeStripeOptions = {}): Promise<FakeStripe> {
  const fake = new FakeStripeServer(options);
  await fake.listen(options.port ?? 0);
  return fake;
}

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/** One /v1 request in progress. */
interface Exchange {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  readonly record: Mutable<RequestRecord>;
  /** reset() bumps the server's generation; an exchange from an older one must leave no trace. */
  readonly generation: number;
  latencyPaid: boolean;
  /** The connected account the request is made as (Stripe-Account), null: the platform. */
  account: string | null;
}

interface Hold {
  readonly match: FaultMatch;
  readonly arrived: PromiseWithResolvers<void>;
  readonly released: PromiseWithResolvers<void>;
  taken: boolean;
}

interface Counters {
  requests: Record<Endpoint | 'other', number>;
  answers: Record<string, number>;
  createsExecuted: number;
  refundCreatesExecuted: number;
  replays: number;
  idempotencyErrors: number;
  conflicts409: number;
  validationErrors: number;
  rateLimited: number;
  faults: Record<FaultKind, number>;
}

function freshCounters(): Counters {
  return {
    requests: { create: 0, retrieve: 0, search: 0, list: 0, capture: 0, cancel: 0, refund_create: 0, refund_retrieve: 0, refund_list: 0, other: 0 },
    answers: {},
    createsExecuted: 0,
    refundCreatesExecuted: 0,
    replays: 0,
    idempotencyErrors: 0,
    conflicts409: 0,
    validationErrors: 0,
    rateLimited: 0,
    faults: Object.fromEntries(FAULT_KINDS.map((k) => [k, 0])) as Record<FaultKind, number>,
  };
}

/** Tokens refill continuously; the burst is one second's worth, like a per-second limit. */
class TokenBucket {
  #tokens: number;
  #last: number;
  readonly #perSecond: number;

  constructor(perSecond: number, nowMs: number) {
    if (!(perSecond > 0)) throw new RangeError(`rateLimit.perSecond must be positive, got ${perSecond}`);
    this.#perSecond = perSecond;
    this.#tokens = perSecond;
    this.#last = nowMs;
  }

  take(nowMs: number): boolean {
    this.#tokens = Math.min(this.#perSecond, this.#tokens + ((nowMs - this.#last) / 1000) * this.#perSecond);
    this.#last = nowMs;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}

type Route =
  | { readonly endpoint: 'create' }
  | { readonly endpoint: 'search' }
  | { readonly endpoint: 'list' }
  | { readonly endpoint: 'retrieve'; readonly id: string }
  | { readonly endpoint: 'capture'; readonly id: string }
  | { readonly endpoint: 'cancel'; readonly id: string }
  | { readonly endpoint: 'refund_create' }
  | { readonly endpoint: 'refund_list' }
  | { readonly endpoint: 'refund_retrieve'; readonly id: string };

function route(method: string, pathname: string): Route | null {
  const refund = refundRoute(method, pathname);
  if (refund !== null) return refund;
  if (pathname === '/v1/payment_intents' && method === 'POST') return { endpoint: 'create' };
  if (pathname === '/v1/payment_intents' && method === 'GET') return { endpoint: 'list' };
  if (pathname === '/v1/payment_intents/search' && method === 'GET') return { endpoint: 'search' };
  const m = /^\/v1\/payment_intents\/([^/]+)$/.exec(pathname);
  if (m !== null && method === 'GET') return { endpoint: 'retrieve', id: decodeURIComponent(m[1] ?? '') };
  // docs.stripe.com/api/payment_intents/capture and /cancel: POST /v1/payment_intents/:id/capture | cancel.
  const action = /^\/v1\/payment_intents\/([^/]+)\/(capture|cancel)$/.exec(pathname);
  if (action !== null && method === 'POST') return { endpoint: action[2] === 'capture' ? 'capture' : 'cancel', id: decodeURIComponent(action[1] ?? '') };
  return null;
}

function refundRoute(method: string, pathname: string): Route | null {
  if (pathname === '/v1/refunds') {
    if (method === 'POST') return { endpoint: 'refund_create' };
    if (method === 'GET') return { endpoint: 'refund_list' };
    return null;
  }
  const m = /^\/v1\/refunds\/([^/]+)$/.exec(pathname);
  if (m !== null && method === 'GET') return { endpoint: 'refund_retrieve', id: decodeURIComponent(m[1] ?? '') };
  return null;
}

/**
 * One idempotent POST endpoint, as the shared pipeline (#idempotentPost) sees it: PaymentIntent
 * creates and Refund creates differ only in these four things.
 */
interface PostKind<P> {
  readonly endpoint: 'create' | 'refund_create' | 'capture' | 'cancel';
  readonly path: string;
  /** For fault matching and the request log, from the raw body (valid or not); `replayed` when the key has an answer. */
  facts(body: FormObject, key: string | null, replayed: StoredResponse | null, x: Exchange): RequestFacts;
  /** A refusal is answered (400 unless `status` says otherwise), never stored for the key. */
  validate(body: FormObject, x: Exchange): { readonly ok: true; readonly params: P } | { readonly ok: false; readonly error: ErrorEnvelope; readonly status?: number };
  /** The commit: runs once per key (or per request without one); its answer is stored for the key. nowMs: the moment it commits. */
  execute(x: Exchange, params: P, fault: FaultKind | null, nowMs: number): StoredResponse;
}

function nonNegative(name: string, value: number): number {
  if (!Number.isFinite(value) || value < 0) throw new RangeError(`${name} must be a non-negative number, got ${value}`);
  return value;
}

function header(req: IncomingMessage, name: string): string | null {
  const value = req.headers[name];
  return (Array.isArray(value) ? value[0] : value) ?? null;
}

class FakeStripeServer implements FakeStripe {
  readonly #server: Server;
  #port = 0;
  #latencyMs: number;
  #searchLagMs: number;
  readonly #processingSettleMs: number | null;
  readonly #apiKeys: readonly string[] | null;
  readonly #bucket: TokenBucket | null;
  /** Per endpoint (search: its own rate), made on first use; only with a global bucket. */
  readonly #endpointBuckets = new Map<Endpoint, TokenBucket>();
  readonly #rateNow: () => number;
  readonly #endpointRate: { readonly perEndpoint: number; readonly search: number } | null;
  readonly #plan: FaultPlan;
  readonly #faultKeyBy: 'idempotency_key' | 'order';
  readonly #keys = new IdempotencyStore();
  readonly #ledger = new Ledger();
  readonly #refunds: RefundApi;
  readonly #logLimit: number;
  #log: Mutable<RequestRecord>[] = [];
  #seq = 0;
  #counters = freshCounters();
  #holds: Hold[] = [];
  readonly #parked = new Set<Hold>();
  readonly #settleTimers = new Set<NodeJS.Timeout>();
  readonly #lateCommits: LateCommits;
  readonly #closing = new AbortController();
  #closed: Promise<void> | null = null;
  #generation = 0;
  readonly #authorizationExpiryMs: number;
  readonly #now: () => number;
  readonly #accounts: Set<string>;
  /** The account a Refunds API call is made as, while it runs (synchronously); undefined: every account. */
  #refundScope: string | null | undefined = undefined;

  constructor(options: FakeStripeOptions) {
    this.#latencyMs = nonNegative('latencyMs', options.latencyMs ?? 0);
    this.#searchLagMs = nonNegative('searchLagMs', options.searchLagMs ?? 0);
    this.#processingSettleMs =
      options.processingSettleMs == null ? null : nonNegative('processingSettleMs', options.processingSettleMs);
    this.#apiKeys = options.apiKeys ? [...options.apiKeys] : null;
    this.#rateNow = options.rateLimit?.now ?? Date.now;
    this.#bucket = options.rateLimit ? new TokenBucket(options.rateLimit.perSecond, this.#rateNow()) : null;
    this.#endpointRate = options.rateLimit
      ? { perEndpoint: options.rateLimit.perEndpointPerSecond ?? STRIPE_PER_ENDPOINT_PER_SECOND, search: options.rateLimit.searchPerSecond ?? STRIPE_SEARCH_PER_SECOND }
      : null;
    this.#plan = new FaultPlan(options.faults?.seed ?? 0, options.faults?.rates ?? {});
    this.#faultKeyBy = options.faults?.keyBy ?? 'idempotency_key';
    this.#logLimit = options.requestLogLimit ?? 100_000;
    // The Refunds API sees the PaymentIntents of the account a request is made as (#asAccount); the
    // module API (settle, a Dashboard refund) sees them all.
    this.#refunds = new RefundApi(
      (id) => (this.#refundScope === undefined ? this.#ledger.get(id) : this.#ledger.getIn(id, this.#refundScope)),
      this.#processingSettleMs,
      options.overRefundError,
    );
    this.#lateCommits = new LateCommits(options.lateCommitMs == null ? null : nonNegative('lateCommitMs', options.lateCommitMs));
    this.#authorizationExpiryMs = nonNegative('authorizationExpiryMs', options.authorizationExpiryMs ?? AUTHORIZATION_EXPIRY_MS);
    this.#now = options.now ?? Date.now;
    this.#accounts = new Set();
    for (const id of options.connectedAccounts ?? []) this.addConnectedAccount(id);
    this.#server = createServer((req, res) => this.#onRequest(req, res));
    this.#server.keepAliveTimeout = KEEP_ALIVE_TIMEOUT_MS;
  }

  async listen(port: number): Promise<void> {
    await new Promise<void>((resolve, reject) => {
      this.#server.once('error', reject);
      this.#server.listen(port, HOST, () => {
        this.#server.off('error', reject);
        resolve();
      });
    });
    this.#port = (this.#server.address() as AddressInfo).port;
  }

  get host(): string {
    return HOST;
  }

  get port(): number {
    return this.#port;
  }

  get url(): string {
    return `http://${HOST}:${this.#port}`;
  }

  // ------------------------------------------------------------------------------------ control API

  close(): Promise<void> {
    this.#closed ??= (async () => {
      this.#closing.abort();
      for (const hold of [...this.#holds, ...this.#parked]) hold.released.resolve();
      this.#holds = [];
      this.#parked.clear();
      this.#clearTimers();
      this.#refunds.stopTimers();
      // A closed Stripe commits nothing more: pending late commits are dropped with their timers.
      this.#lateCommits.drop();
      const closed = new Promise<void>((resolve) => this.#server.close(() => resolve()));
      // Hanging and parked requests, and idle keep-alive sockets, would otherwise keep close() waiting.
      this.#server.closeAllConnections();
      await closed;
    })();
    return this.#closed;
  }

  injectFault(match: FaultMatch, fault: FaultKind, times = 1): void {
    this.#plan.inject(match, fault, times);
  }

  pruneKeys(filter: { readonly olderThanMs?: number; readonly idempotencyKey?: string } = {}): number {
    return this.#keys.prune(Date.now(), filter);
  }

  settle(paymentIntentId: string, status: SettleStatus): void {
    this.#ledger.settle(paymentIntentId, status);
  }

  /** One requires_capture PaymentIntent's expiry `ms` earlier (its authorization lapses sooner); applied at the next look. */
  ageAuthorization(paymentIntentId: string, ms: number): void {
    this.#ledger.ageAuthorization(paymentIntentId, nonNegative('ms', ms));
  }

  ageRecords(ms: number): void {
    this.#ledger.age(nonNegative('ms', ms));
  }

  hold(match: FaultMatch): HoldHandle {
    const hold: Hold = {
      match: { ...match },
      arrived: Promise.withResolvers<void>(),
      released: Promise.withResolvers<void>(),
      taken: false,
    };
    this.#holds.push(hold);
    return {
      arrived: hold.arrived.promise,
      release: () => {
        hold.released.resolve();
        if (!hold.taken) this.#holds = this.#holds.filter((h) => h !== hold);
      },
    };
  }

  refunds(filter: RefundFilter = {}): RefundRecord[] {
    return this.#refunds.book.records(filter);
  }

  settleRefund(refundId: string, status: RefundSettleStatus): void {
    this.#refunds.settle(refundId, status);
  }

  setDisputed(paymentIntentId: string, disputed: boolean): void {
    this.#refunds.setDisputed(paymentIntentId, disputed);
  }

  dashboardRefund(paymentIntentId: string, amount?: number): RefundJson {
    return this.#refunds.dashboardRefund(paymentIntentId, amount ?? null, Date.now());
  }

  setOverRefundError(form: OverRefundError): void {
    this.#refunds.setOverRefundError(form);
  }

  commitLate(match: FaultMatch = {}): LateCommitResult[] {
    return this.#lateCommits.release(match);
  }

  paymentIntents(filter: PaymentIntentFilter = {}): PaymentIntentRecord[] {
    this.expireAuthorizations();
    return this.#ledger.records(filter);
  }

  expireAuthorizations(): number {
    return this.#ledger.expire(this.#now()).length;
  }

  addConnectedAccount(id: string): void {
    if (!CONNECTED_ACCOUNT_ID.test(id)) throw new RangeError(`a connected account id looks like acct_…, got ${JSON.stringify(id)}`);
    this.#accounts.add(id);
  }

  connectedAccounts(): string[] {
    return [...this.#accounts];
  }

  requests(since = 0): RequestRecord[] {
    return this.#log.filter((r) => r.seq > since).map((r) => ({ ...r }));
  }

  stats(): FakeStripeStats {
    const c = this.#counters;
    const requests = c.requests;
    const doubleChargedOperations = this.#ledger.doubleCharged('operation_id');
    return {
      requests: { total: Object.values(requests).reduce((a, b) => a + b, 0), ...requests },
      answers: { ...c.answers },
      createsExecuted: c.createsExecuted,
      refundCreatesExecuted: c.refundCreatesExecuted,
      refunds: { total: this.#refunds.book.size, byStatus: this.#refunds.book.countByStatus() },
      replays: c.replays,
      idempotencyErrors: c.idempotencyErrors,
      conflicts409: c.conflicts409,
      validationErrors: c.validationErrors,
      rateLimited: c.rateLimited,
      faults: { ...c.faults },
      paymentIntents: { total: this.#ledger.size, byStatus: this.#ledger.countByStatus() },
      doubleCharges: doubleChargedOperations.length,
      doubleChargedOperations,
      doubleChargedOrders: this.#ledger.doubleCharged('order_id'),
      keysCached: this.#keys.size,
      keysPruned: this.#keys.pruned,
      lateCommitsPending: this.#lateCommits.pending,
      lateCommitsMade: this.#lateCommits.made,
    };
  }

  setFaultRates(rates: FaultRates, seed?: number): void {
    this.#plan.setRates(rates, seed);
  }

  setLatency(ms: number): void {
    this.#latencyMs = nonNegative('latencyMs', ms);
  }

  setSearchLag(ms: number): void {
    this.#searchLagMs = nonNegative('searchLagMs', ms);
  }

  reset(): void {
    this.#generation += 1;
    this.#ledger.clear();
    this.#refunds.clear();
    this.#keys.clear();
    this.#plan.clear();
    this.#log = [];
    this.#seq = 0;
    this.#counters = freshCounters();
    this.#clearTimers();
    this.#lateCommits.clear();
    // Parked requests belong to the old generation: let them go so they can be dropped.
    for (const hold of [...this.#holds, ...this.#parked]) hold.released.resolve();
    this.#holds = [];
    this.#parked.clear();
  }

  // --------------------------------------------------------------------------------------- routing

  #onRequest(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake-stripe');
    const work = url.pathname.startsWith('/__fake/')
      ? handleControl(this, req, res, url)
      : this.#onApi(req, res, url);
    work.catch((error: unknown) => {
      // A bug in the fake must be loud, not a plausible-looking Stripe 500.
      console.error('fake-stripe: internal error', error);
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify({ error: { type: 'fake_stripe_internal_error', message: String(error) } }));
      } else {
        res.destroy();
      }
    });
  }

  async #onApi(req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
    const method = req.method ?? 'GET';
    const matched = route(method, url.pathname);
    const x = this.#begin(req, res, method, url.pathname, matched?.endpoint ?? 'other');
    let bodyText: string;
    try {
      bodyText = await readBody(req);
    } catch (error) {
      if (!(error instanceof BodyTooLarge)) return this.#finish(x, 'aborted'); // the client went away mid-body
      return this.#send(x, 413, errors.invalidRequest(error.message));
    }

    const authError = this.#authenticate(req);
    if (authError !== null) return this.#send(x, 401, authError);
    if (this.#bucket !== null && !this.#bucket.take(this.#rateNow())) {
      this.#counters.rateLimited += 1;
      return this.#send(x, 429, errors.rateLimited());
    }
    if (matched !== null && !this.#endpointBucket(matched.endpoint)) {
      this.#counters.rateLimited += 1;
      return this.#send(x, 429, errors.rateLimited());
    }
    // Connect (docs.stripe.com/connect/authentication): `Stripe-Account: acct_…` makes the request as
    // that connected account; one this platform does not have is refused, nothing done.
    const stripeAccount = header(req, 'stripe-account');
    if (stripeAccount !== null) {
      if (!this.#accounts.has(stripeAccount)) {
        const key = header(req, 'authorization')?.replace(/^(Bearer|Basic)\s+/i, '') ?? '';
        return this.#send(x, 403, errors.accountInvalid(key, stripeAccount));
      }
      x.account = stripeAccount;
      x.record.account = stripeAccount;
    }
    if (matched === null) return this.#send(x, 404, errors.unknownRoute(method, url.pathname));
    // What Stripe did on its own meanwhile (an authorization expired) is there before this request is answered.
    this.expireAuthorizations();
    switch (matched.endpoint) {
      case 'create':
        return this.#create(x, bodyText);
      case 'retrieve':
        return this.#retrieve(x, matched.id, url.searchParams);
      case 'search':
        return this.#search(x, url.searchParams);
      case 'list':
        return this.#list(x, url.searchParams);
      case 'capture':
        return this.#idempotentPost(x, bodyText, this.#paymentIntentCapture(matched.id));
      case 'cancel':
        return this.#idempotentPost(x, bodyText, this.#paymentIntentCancel(matched.id));
      case 'refund_create':
        return this.#idempotentPost(x, bodyText, this.#refundCreate);
      case 'refund_retrieve':
        return this.#read(x, 'refund_retrieve', this.#asAccount(x, () => this.#refunds.retrieveFacts(matched.id)), () => this.#asAccount(x, () => this.#refunds.retrieve(matched.id)));
      case 'refund_list': {
        const parsed = this.#refunds.parseListQuery(url.searchParams);
        const facts = this.#asAccount(x, () => this.#refunds.listFacts(parsed.ok ? parsed.query : null));
        return this.#read(x, 'refund_list', facts, parsed.ok ? () => this.#asAccount(x, () => this.#refunds.list(parsed.query)) : parsed.error);
      }
    }
  }

  /**
   * Bearer auth, or HTTP Basic with the key as the user name and no password — the form Stripe's own
   * examples use (`curl -u sk_test_…:`; docs.stripe.com/api/authentication: "Authentication to the API
   * is performed with HTTP Basic Auth. Provide your API key as the basic auth username value. You do
   * not need to provide a password." — bearer auth is also accepted).
   */
  /** True when the endpoint's own bucket has a token (or there are no per-endpoint limits). */
  #endpointBucket(endpoint: Endpoint): boolean {
    if (this.#endpointRate === null) return true;
    let bucket = this.#endpointBuckets.get(endpoint);
    if (bucket === undefined) {
      bucket = new TokenBucket(endpoint === 'search' ? this.#endpointRate.search : this.#endpointRate.perEndpoint, this.#rateNow());
      this.#endpointBuckets.set(endpoint, bucket);
    }
    return bucket.take(this.#rateNow());
  }

  #authenticate(req: IncomingMessage): ErrorEnvelope | null {
    const authorization = header(req, 'authorization');
    const bearer = authorization === null ? null : /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    const basic = authorization === null ? null : /^Basic\s+([A-Za-z0-9+/=]+)\s*$/i.exec(authorization);
    const key = bearer?.[1] ?? (basic?.[1] ? basicUser(basic[1]) : undefined);
    if (key === undefined) return errors.noApiKey();
    const accepted = this.#apiKeys === null ? key.startsWith('sk_test_') : this.#apiKeys.includes(key);
    return accepted ? null : errors.invalidApiKey(key);
  }

  // -------------------------------------------------------------------------------------- endpoints

  #create(x: Exchange, bodyText: string): Promise<void> {
    return this.#idempotentPost(x, bodyText, this.#paymentIntentCreate);
  }

  readonly #paymentIntentCreate: PostKind<CreateParams> = {
    endpoint: 'create',
    path: '/v1/payment_intents',
    facts: (body, key, replayed) => ({
      endpoint: 'create',
      operationId: metadataValue(body, 'operation_id'),
      orderId: metadataValue(body, 'order_id'),
      idempotencyKey: key,
      paymentIntentId: replayed?.paymentIntentId ?? null,
    }),
    validate: (body, x) => validateCreate(body, { account: x.account, isConnectedAccount: (id) => this.#accounts.has(id) }),
    execute: (x, params, fault, nowMs) => this.#execute(x, params, fault, nowMs),
  };

  /** The facts of a request about an existing PaymentIntent (capture, cancel), as the caller's account sees it. */
  #actionFacts(endpoint: 'capture' | 'cancel', id: string, account: string | null, key: string | null): RequestFacts {
    const known = this.#ledger.getIn(id, account);
    return {
      endpoint,
      operationId: known?.metadata.operation_id ?? null,
      orderId: known?.metadata.order_id ?? null,
      idempotencyKey: key,
      paymentIntentId: id,
    };
  }

  /** A PaymentIntent id that names nothing for this account: 404 resource_missing, as a retrieve answers it. */
  #missing(id: string, x: Exchange): { readonly ok: false; readonly error: ErrorEnvelope; readonly status: number } | null {
    return this.#ledger.getIn(id, x.account) === null ? { ok: false, error: errors.resourceMissing('payment_intent', id, 'intent'), status: 404 } : null;
  }

  /**
   * POST /v1/payment_intents/:id/capture (docs.stripe.com/api/payment_intents/capture): "Capture the
   * funds of an existing uncaptured PaymentIntent when its status is requires_capture", optional
   * `amount_to_capture` ("must be less than or equal to the original amount. Defaults to the full
   * amount_capturable if it's not provided"), `application_fee_amount` (capped at what is captured).
   * Through the same idempotency pipeline and faults as a create: same key + same parameters replays,
   * other parameters are an idempotency_error. The status and amount are judged at the commit (a
   * refusal then is stored for the key, as any executed request's answer is).
   */
  #paymentIntentCapture(id: string): PostKind<{ readonly amountToCapture: number | null; readonly applicationFeeAmount: number | null }> {
    return {
      endpoint: 'capture',
      path: `/v1/payment_intents/${id}/capture`,
      facts: (_body, key, _replayed, x) => this.#actionFacts('capture', id, x.account, key),
      validate: (body, x) => {
        const missing = this.#missing(id, x);
        if (missing !== null) return missing;
        try {
          for (const name of Object.keys(body)) {
            if (!CAPTURE_PARAMS.has(name)) return { ok: false, error: errors.invalidRequest(`Received unknown parameter: ${name}`, 'parameter_unknown', name) };
          }
          const amountToCapture = integerParam(body.amount_to_capture, 'amount_to_capture');
          if (amountToCapture !== null && amountToCapture < 1) {
            return { ok: false, error: errors.invalidRequest('Amount must be at least 1.', 'amount_too_small', 'amount_to_capture') };
          }
          return { ok: true, params: { amountToCapture, applicationFeeAmount: integerParam(body.application_fee_amount, 'application_fee_amount') } };
        } catch (error) {
          if (error instanceof InvalidParam) return { ok: false, error: error.envelope };
          throw error;
        }
      },
      execute: (x, params, fault, nowMs) => {
        const requestId = x.record.requestId;
        if (fault === 'error_500_before_commit') return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: id };
        // Judged at the commit: an authorization that expired while the request waited is canceled by then.
        this.expireAuthorizations();
        const pi = this.#ledger.getIn(id, x.account);
        if (pi === null) return { status: 404, body: JSON.stringify(errors.resourceMissing('payment_intent', id, 'intent')), requestId, paymentIntentId: id };
        if (pi.status !== 'requires_capture') {
          const message =
            pi.status === 'succeeded' && pi.capture_method === 'manual'
              ? 'This PaymentIntent could not be captured because it has already been captured.'
              : `This PaymentIntent could not be captured because it has a status of ${pi.status}. Only a PaymentIntent with one of the following statuses may be captured: requires_capture.`;
          return { status: 400, body: JSON.stringify(errors.unexpectedState(message, pi)), requestId, paymentIntentId: id };
        }
        const capturable = pi.amount_capturable ?? pi.amount;
        const amount = params.amountToCapture ?? capturable;
        if (amount > capturable) {
          // Stripe's answer to a capture above the authorization (quoted in 202-ecommerce/stripe_official#98;
          // its code, amount_too_large, is docs.stripe.com/error-codes' "greater than the maximum amount allowed").
          const tooLarge = errors.invalidRequest(
            'The payment could not be captured because the requested capture amount is greater than the authorized amount.',
            'amount_too_large',
            'amount_to_capture',
          );
          return { status: 400, body: JSON.stringify(tooLarge), requestId, paymentIntentId: id };
        }
        const fee = params.applicationFeeAmount === null ? null : Math.min(params.applicationFeeAmount, amount);
        const captured = this.#ledger.capture(id, amount, fee, nowMs);
        if (fault === 'error_500_after_commit') return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: id };
        return { status: 200, body: JSON.stringify(captured), requestId, paymentIntentId: id };
      },
    };
  }

  /**
   * POST /v1/payment_intents/:id/cancel (docs.stripe.com/api/payment_intents/cancel): from
   * requires_payment_method, requires_capture, requires_confirmation or requires_action ("or, in rare
   * cases, processing" — not modelled: the fake refuses a processing one), with an optional
   * `cancellation_reason` of duplicate, fraudulent, requested_by_customer or abandoned. Any other
   * status: payment_intent_unexpected_state.
   */
  #paymentIntentCancel(id: string): PostKind<{ readonly reason: CancellationReason | null }> {
    return {
      endpoint: 'cancel',
      path: `/v1/payment_intents/${id}/cancel`,
      facts: (_body, key, _replayed, x) => this.#actionFacts('cancel', id, x.account, key),
      validate: (body, x) => {
        const missing = this.#missing(id, x);
        if (missing !== null) return missing;
        for (const name of Object.keys(body)) {
          if (name !== 'cancellation_reason' && name !== 'expand') return { ok: false, error: errors.invalidRequest(`Received unknown parameter: ${name}`, 'parameter_unknown', name) };
        }
        const reason = body.cancellation_reason;
        if (reason === undefined || reason === '') return { ok: true, params: { reason: null } };
        if (typeof reason !== 'string' || !(CANCEL_REASONS as readonly string[]).includes(reason)) {
          return { ok: false, error: errors.invalidRequest(`Invalid cancellation_reason: must be one of ${CANCEL_REASONS.join(', ')}`, 'parameter_invalid_string', 'cancellation_reason') };
        }
        return { ok: true, params: { reason: reason as CancellationReason } };
      },
      execute: (x, params, fault, nowMs) => {
        const requestId = x.record.requestId;
        if (fault === 'error_500_before_commit') return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: id };
        // Judged at the commit: an authorization that expired while the request waited is canceled by then.
        this.expireAuthorizations();
        const pi = this.#ledger.getIn(id, x.account);
        if (pi === null) return { status: 404, body: JSON.stringify(errors.resourceMissing('payment_intent', id, 'intent')), requestId, paymentIntentId: id };
        if (!CANCELABLE.includes(pi.status)) {
          const message = `You cannot cancel this PaymentIntent because it has a status of ${pi.status}. Only a PaymentIntent with one of the following statuses may be canceled: ${CANCELABLE.join(', ')}.`;
          return { status: 400, body: JSON.stringify(errors.unexpectedState(message, pi)), requestId, paymentIntentId: id };
        }
        const canceled = this.#ledger.cancel(id, params.reason, nowMs);
        if (fault === 'error_500_after_commit') return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: id };
        return { status: 200, body: JSON.stringify(canceled), requestId, paymentIntentId: id };
      },
    };
  }

  /** Refunds (refunds.ts) through the very same idempotency pipeline as PaymentIntent creates. */
  readonly #refundCreate: PostKind<RefundParams> = {
    endpoint: 'refund_create',
    path: '/v1/refunds',
    facts: (body, key, replayed, x) => ({ endpoint: 'refund_create', idempotencyKey: key, ...this.#asAccount(x, () => this.#refunds.createFacts(body, replayed)) }),
    validate: (body, x) => this.#asAccount(x, () => this.#refunds.validateCreate(body)),
    execute: (x, params, fault, nowMs) => this.#asAccount(x, () => {
      const commitFault =
        fault === 'processing' || fault === 'error_500_before_commit' || fault === 'error_500_after_commit' ? fault : null;
      const stored = this.#refunds.execute(params, commitFault, {
        requestId: x.record.requestId,
        idempotencyKey: x.record.idempotencyKey,
        nowMs,
      });
      x.record.refundId = stored.refundId ?? null;
      if (stored.refundId != null) this.#counters.refundCreatesExecuted += 1;
      return stored;
    }),
  };

  /**
   * Runs a (synchronous) Refunds API call as the request's account: a refund of another account's
   * PaymentIntent, or the retrieve / list of its refunds, finds nothing, as for the PaymentIntent itself.
   */
  #asAccount<T>(x: Exchange, call: () => T): T {
    this.#refundScope = x.account;
    try {
      return call();
    } finally {
      this.#refundScope = undefined;
    }
  }

  /**
   * The idempotency pipeline every create goes through (see the diagram in idempotency.ts): validate
   * and look the key up, gate faults, mismatch → 400, in flight → 409, replay, or lock the key → hold →
   * latency → execute → store → deliver.
   */
  async #idempotentPost<P>(x: Exchange, bodyText: string, kind: PostKind<P>): Promise<void> {
    let body: FormObject;
    try {
      body = decodeForm(bodyText);
    } catch (error) {
      if (!(error instanceof FormError)) throw error;
      return this.#rejectParams(x, errors.invalidRequest(error.message));
    }
    const key = x.record.idempotencyKey;
    if (key !== null && key.length > MAX_KEY_LENGTH) {
      return this.#rejectParams(
        x,
        errors.invalidRequest(`Idempotency-Key must be at most ${MAX_KEY_LENGTH} characters long.`, 'idempotency_key_too_long'),
      );
    }
    const params = fingerprint('POST', kind.path, body);
    // Keys are the account's own: the same key as another account is another request (idempotency.ts).
    const scope = x.account ?? '';
    const lookup: Lookup | { readonly kind: 'none' } = key === null ? { kind: 'none' } : this.#keys.lookup(key, params, scope);
    const validated = kind.validate(body, x);
    const phase: RequestPhase =
      lookup.kind === 'replay'
        ? 'replay'
        : lookup.kind === 'mismatch' || lookup.kind === 'in_flight' || !validated.ok
          ? 'rejected'
          : 'execute';
    const facts = kind.facts(body, key, lookup.kind === 'replay' ? lookup.response : null, x);
    x.record.operationId = facts.operationId;
    x.record.paymentIntentId = facts.paymentIntentId;
    if (facts.refundId !== undefined) x.record.refundId = facts.refundId;
    // Without a key, "the same request" for reproducible faults is the same parameters; keyed by
    // order, it is the order (a refund: the order and its refund id), whatever key (or none) the
    // caller sends — so the n-th create of an order meets the same fault in every run of one seed,
    // though the idempotency keys (made of fresh operation ids) differ from run to run.
    const byOrder = facts.refundId ? `order:${facts.orderId}:refund:${facts.refundId}` : `order:${facts.orderId}`;
    const randomKey = this.#faultKeyBy === 'order' && facts.orderId !== null ? byOrder : (key ?? `no-key:${params}`);
    const fault = this.#chooseFault(x, facts, phase, randomKey);
    if (fault !== null && faultStage(fault.kind, kind.endpoint) === 'gate') return this.#gateFault(x, fault.kind);

    if (lookup.kind === 'mismatch' && key !== null) {
      this.#counters.idempotencyErrors += 1;
      return this.#send(x, 400, errors.idempotencyMismatch(key));
    }
    if (lookup.kind === 'in_flight' && key !== null) {
      this.#counters.conflicts409 += 1;
      return this.#send(x, 409, errors.idempotencyInUse(key));
    }
    if (lookup.kind === 'replay') {
      await this.#park(facts);
      if (this.#stale(x)) return this.#drop(x);
      this.#counters.replays += 1;
      x.record.replayed = true;
      const stored = lookup.response;
      return this.#deliver(x, kind.endpoint, stored.status, stored.body, fault, {
        'Idempotent-Replayed': 'true',
        'Original-Request': stored.requestId,
      });
    }
    if (!validated.ok) return this.#rejectParams(x, validated.error, validated.status);

    // From here on the key is in flight: a concurrent request with it gets 409 until we store.
    const entry = key === null ? null : this.#keys.lock(key, params, Date.now(), scope);
    await this.#park(facts);
    await this.#payLatency(x);
    if (this.#stale(x)) {
      if (entry !== null) this.#keys.abandon(entry);
      return this.#drop(x);
    }
    if (fault?.kind === 'error_500_late_commit' || fault?.kind === 'in_flight_then_commit') {
      return this.#commitLater(x, kind, validated.params, facts, entry, fault.kind);
    }
    const stored = kind.execute(x, validated.params, fault?.kind ?? null, Date.now());
    if (entry !== null) this.#keys.complete(entry, stored);
    return this.#deliver(x, kind.endpoint, stored.status, stored.body, fault);
  }

  /**
   * A create whose commit comes after its answer. Now: error_500_late_commit answers 500 and stores
   * it for the key ("Subsequent requests with the same key return the same result, including 500
   * errors", docs.stripe.com/api/idempotent_requests); in_flight_then_commit answers nothing and
   * leaves the key in flight, so a re-send meets 409 idempotency_key_in_use (Stripe stores no result
   * for a request that "conflicts with another request that's executing concurrently", same page).
   * Nothing exists yet. Later (lateCommitMs, or commitLate()): the create executes as a normal one
   * at that moment — its card or what is left on the charge decides, `created` is the commit — and,
   * for in_flight_then_commit, its answer is stored for the key; the 500 stays the 500.
   */
  #commitLater<P>(x: Exchange, kind: PostKind<P>, params: P, facts: RequestFacts, entry: KeyEntry | null, fault: LateCommitFault): Promise<void> {
    x.record.lateCommittedAt = null;
    this.#lateCommits.add({
      fault,
      facts,
      requestSeq: x.record.seq,
      commit: () => {
        const committedAtMs = Date.now();
        const stored = kind.execute(x, params, null, committedAtMs);
        if (fault === 'in_flight_then_commit' && entry !== null) this.#keys.complete(entry, stored);
        x.record.lateCommittedAt = committedAtMs;
        return {
          fault,
          endpoint: kind.endpoint,
          idempotencyKey: facts.idempotencyKey,
          operationId: facts.operationId,
          orderId: facts.orderId,
          requestSeq: x.record.seq,
          status: stored.status,
          paymentIntentId: stored.paymentIntentId,
          refundId: stored.refundId ?? null,
          committedAtMs,
        };
      },
    });
    if (fault === 'in_flight_then_commit') {
      // As under `hang`: the socket stays open and silent until the client gives up (or close()).
      this.#finish(x, 'hung');
      return Promise.resolve();
    }
    const answered: StoredResponse = {
      status: 500,
      body: JSON.stringify(errors.apiError()),
      requestId: x.record.requestId,
      // Like a 500 before commit: no PaymentIntent made (for a refund: the one to be refunded).
      paymentIntentId: facts.paymentIntentId,
      refundId: null,
    };
    if (entry !== null) this.#keys.complete(entry, answered);
    return this.#send(x, answered.status, answered.body);
  }

  /** Runs a create (the "commit"): makes the PaymentIntent and the answer stored for its key. */
  #execute(x: Exchange, params: CreateParams, fault: FaultKind | null, nowMs: number): StoredResponse {
    const requestId = x.record.requestId;
    if (fault === 'error_500_before_commit') {
      return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: null };
    }
    const outcome: CardOutcome =
      fault === 'decline'
        ? DECLINE_FAULT_OUTCOME
        : fault === 'processing'
          ? { kind: 'status', status: 'processing' }
          : cardOutcome(params);
    const pi = this.#ledger.create(params, outcome, x.record.idempotencyKey, nowMs, x.record.requestId, x.account, this.#now() + this.#authorizationExpiryMs);
    this.#counters.createsExecuted += 1;
    x.record.paymentIntentId = pi.id;
    if (pi.status === 'processing') this.#scheduleSettle(pi.id);
    if (fault === 'error_500_after_commit') {
      return { status: 500, body: JSON.stringify(errors.apiError()), requestId, paymentIntentId: pi.id };
    }
    if (outcome.kind === 'decline') {
      const declined: ErrorEnvelope = {
        error: {
          type: 'card_error',
          code: outcome.code,
          decline_code: outcome.declineCode,
          message: outcome.message,
          param: '',
          payment_intent: pi,
        },
      };
      return { status: 402, body: JSON.stringify(declined), requestId, paymentIntentId: pi.id };
    }
    return { status: 200, body: JSON.stringify(pi), requestId, paymentIntentId: pi.id };
  }

  /**
   * GET /v1/payment_intents/:id, with `expand[]=payment_method` (docs.stripe.com/expand): the
   * PaymentMethod object in place of its id. Any other expansion is refused (400), not ignored — a
   * caller relying on it would otherwise read an id as an object.
   */
  async #retrieve(x: Exchange, id: string, query: URLSearchParams): Promise<void> {
    const expand = [...query.entries()].filter(([name]) => /^expand(?:\[\d*\])?$/.test(name)).map(([, value]) => value);
    const unknown = expand.find((value) => value !== 'payment_method');
    const known = this.#ledger.getIn(id, x.account);
    const facts: RequestFacts = {
      endpoint: 'retrieve',
      operationId: known?.metadata.operation_id ?? null,
      orderId: known?.metadata.order_id ?? null,
      idempotencyKey: x.record.idempotencyKey,
      paymentIntentId: id,
    };
    x.record.operationId = facts.operationId;
    x.record.paymentIntentId = id;
    const fault = this.#chooseFault(x, facts, unknown === undefined ? 'execute' : 'rejected', null);
    if (fault !== null && faultStage(fault.kind, 'retrieve') === 'gate') return this.#gateFault(x, fault.kind);
    if (unknown !== undefined) {
      return this.#rejectParams(x, errors.invalidRequest(`The fake Stripe server expands only payment_method here, not ${unknown}.`, 'parameter_invalid_string', 'expand'));
    }
    await this.#park(facts);
    await this.#payLatency(x);
    if (this.#stale(x)) return this.#drop(x);
    // Read after the hold and the latency: a test may settle() while the request is parked.
    // Another account's PaymentIntent is not there for this one: 404, as Stripe answers it.
    this.expireAuthorizations();
    const pi = this.#ledger.getIn(id, x.account);
    if (pi === null) {
      return this.#deliver(x, 'retrieve', 404, JSON.stringify(errors.resourceMissing('payment_intent', id, 'intent')), fault);
    }
    const body = expand.length > 0 && pi.payment_method !== null ? { ...pi, payment_method: paymentMethodJson(pi.payment_method, pi.customer, pi.created) } : pi;
    return this.#deliver(x, 'retrieve', 200, JSON.stringify(body), fault);
  }

  async #search(x: Exchange, query: URLSearchParams): Promise<void> {
    const text = query.get('query');
    const limitText = query.get('limit');
    const page = query.get('page');
    const parsed = text === null || text.trim() === '' ? null : parseSearchQuery(text);
    const clauses = parsed?.ok ? parsed.clauses : [];
    const facts: RequestFacts = {
      endpoint: 'search',
      operationId: queryMetadata(clauses, 'operation_id'),
      orderId: queryMetadata(clauses, 'order_id'),
      idempotencyKey: x.record.idempotencyKey,
      paymentIntentId: null,
    };
    x.record.operationId = facts.operationId;

    let rejection: ErrorEnvelope | null = null;
    const limit = limitText === null ? SEARCH_DEFAULT_LIMIT : Number(limitText);
    const beforeSeq = page === null || page === '' ? null : decodePage(page);
    if (parsed === null) rejection = errors.invalidRequest('Missing required param: query.', 'parameter_missing', 'query');
    else if (!parsed.ok) rejection = errors.invalidRequest(parsed.message, 'parameter_invalid_string', 'query');
    else if (!Number.isInteger(limit) || limit < 1 || limit > SEARCH_MAX_LIMIT) {
      rejection = errors.invalidRequest(
        `Invalid limit: must be an integer between 1 and ${SEARCH_MAX_LIMIT}`,
        'parameter_invalid_integer',
        'limit',
      );
    } else if (page !== null && page !== '' && beforeSeq === null) {
      rejection = errors.invalidRequest(`Invalid page: ${page}`, 'parameter_invalid_string', 'page');
    }

    const fault = this.#chooseFault(x, facts, rejection === null ? 'execute' : 'rejected', null);
    if (fault !== null && faultStage(fault.kind, 'search') === 'gate') return this.#gateFault(x, fault.kind);
    if (rejection !== null) return this.#rejectParams(x, rejection);
    await this.#park(facts);
    await this.#payLatency(x);
    if (this.#stale(x)) return this.#drop(x);
    // Visibility is judged when the answer is made, so a lagging PaymentIntent can appear mid-retry.
    const result = this.#ledger.search(clauses, Date.now() - this.#searchLagMs, limit, beforeSeq, x.account);
    const body = {
      object: 'search_result',
      url: '/v1/payment_intents/search',
      data: result.data,
      has_more: result.nextBeforeSeq !== null,
      next_page: result.nextBeforeSeq === null ? null : encodePage(result.nextBeforeSeq),
    };
    return this.#deliver(x, 'search', 200, JSON.stringify(body), fault);
  }

  /**
   * GET /v1/payment_intents, as Stripe documents it (docs.stripe.com/api/payment_intents/list and
   * /api/pagination): `customer`, `created` as a Unix timestamp or a dictionary of gt / gte / lt / lte,
   * `limit` 1-100 (default 10), `starting_after` an object id (the cursor); objects in reverse
   * chronological order; `{ object: "list", url, has_more, data }`. Unlike Search it is real time —
   * Stripe's Search docs: "For read-after-write flows that require immediate data availability, use
   * the various list APIs … These APIs aren't subject to the availability delay" — so no search lag
   * here. Faults (429 at the gate; 500, lost, hang in place of the answer) apply as to a retrieve.
   */
  async #list(x: Exchange, query: URLSearchParams): Promise<void> {
    const customer = query.get('customer');
    const facts: RequestFacts = {
      endpoint: 'list',
      operationId: null,
      orderId: null,
      idempotencyKey: x.record.idempotencyKey,
      paymentIntentId: null,
      customerId: customer,
    };
    const parsed = parseListQuery(query);
    const fault = this.#chooseFault(x, facts, parsed.ok ? 'execute' : 'rejected', null);
    if (fault !== null && faultStage(fault.kind, 'list') === 'gate') return this.#gateFault(x, fault.kind);
    if (!parsed.ok) return this.#rejectParams(x, parsed.error);
    await this.#park(facts);
    await this.#payLatency(x);
    if (this.#stale(x)) return this.#drop(x);
    // Read after the hold and the latency, like Stripe answering at the moment it answers.
    const result = this.#ledger.list({ customer, created: parsed.created }, parsed.limit, parsed.startingAfter, x.account);
    if (result === null) {
      return this.#rejectParams(x, errors.resourceMissing('payment_intent', parsed.startingAfter ?? '', 'starting_after'));
    }
    const body = { object: 'list', url: '/v1/payment_intents', has_more: result.hasMore, data: result.data };
    return this.#deliver(x, 'list', 200, JSON.stringify(body), fault);
  }

  /**
   * A read (refund retrieve and list): facts → faults → hold → latency → the answer, made last so a
   * parked request sees what changed meanwhile. An ErrorEnvelope instead of `answer` is a validation
   * refusal (after gate faults, before any hold).
   */
  async #read(x: Exchange, endpoint: Endpoint, facts: Omit<RequestFacts, 'endpoint' | 'idempotencyKey'>, answer: (() => Answer) | ErrorEnvelope): Promise<void> {
    const full: RequestFacts = { endpoint, idempotencyKey: x.record.idempotencyKey, ...facts };
    x.record.operationId = full.operationId;
    x.record.paymentIntentId = full.paymentIntentId;
    x.record.refundId = full.refundId ?? null;
    const rejection = typeof answer === 'function' ? null : answer;
    const fault = this.#chooseFault(x, full, rejection === null ? 'execute' : 'rejected', null);
    if (fault !== null && faultStage(fault.kind, endpoint) === 'gate') return this.#gateFault(x, fault.kind);
    if (typeof answer !== 'function') return this.#rejectParams(x, answer);
    await this.#park(full);
    await this.#payLatency(x);
    if (this.#stale(x)) return this.#drop(x);
    const made = answer();
    return this.#deliver(x, endpoint, made.status, made.body, fault);
  }

  // --------------------------------------------------------------------------------- fault helpers

  #chooseFault(x: Exchange, facts: RequestFacts, phase: RequestPhase, randomKey: string | null): ChosenFault | null {
    const fault = this.#plan.choose(facts, phase, randomKey);
    if (fault !== null) {
      x.record.fault = fault.kind;
      x.record.faultSource = fault.source;
      this.#counters.faults[fault.kind] += 1;
    }
    return fault;
  }

  /** Faults that strike before the idempotency layer: nothing executed, nothing cached. */
  #gateFault(x: Exchange, kind: FaultKind): Promise<void> {
    switch (kind) {
      case 'rate_limited_429':
        return this.#send(x, 429, errors.rateLimited());
      case 'unauthorized_401':
        return this.#send(x, 401, errors.invalidApiKey(header(x.req, 'authorization')?.replace(/^Bearer\s+/i, '') ?? ''));
      case 'permission_403':
        return this.#send(x, 403, errors.permission());
      case 'lock_timeout_429':
        return this.#send(x, 429, errors.lockTimeout(), { 'Stripe-Should-Retry': 'true' });
      default:
        throw new Error(`not a gate fault: ${kind}`);
    }
  }

  /** Validation failures: answered, never cached, nothing executed. */
  #rejectParams(x: Exchange, error: ErrorEnvelope, status = 400): Promise<void> {
    this.#counters.validationErrors += 1;
    return this.#send(x, status, error);
  }

  /**
   * Sends an answer that the server has (executed or replayed), unless an answer-stage fault takes it:
   * lost (socket destroyed before any byte — the SDK sees ECONNRESET), hung (never answered),
   * truncated (headers then half a body), or replaced by a proxy's 502 / a plain 500.
   */
  async #deliver(
    x: Exchange,
    endpoint: Endpoint,
    status: number,
    body: string,
    fault: ChosenFault | null,
    extraHeaders: Record<string, string> = {},
  ): Promise<void> {
    const kind = fault !== null && faultStage(fault.kind, endpoint) === 'answer' ? fault.kind : null;
    switch (kind) {
      case 'lost_response_after_commit': {
        await this.#payLatency(x);
        this.#finish(x, 'lost');
        x.req.socket.destroy();
        return;
      }
      case 'hang':
        // Keep the socket, say nothing. The client's timeout (or close()) ends it; nothing to clean here.
        this.#finish(x, 'hung');
        return;
      case 'stall_after_commit': {
        await this.#payLatency(x);
        if (this.#stale(x)) return this.#drop(x);
        x.res.writeHead(status, this.#headers(x, extraHeaders));
        // Leading whitespace is valid JSON, so nothing is wrong with the body yet: it just never
        // ends. close() destroys the socket, which stops the trickle.
        const trickle = setInterval(() => {
          if (x.res.destroyed || x.req.socket.destroyed) clearInterval(trickle);
          else x.res.write(' ');
        }, STALL_TRICKLE_MS);
        x.req.socket.once('close', () => clearInterval(trickle));
        this.#finish(x, 'hung');
        return;
      }
      case 'truncated_response_after_commit': {
        await this.#payLatency(x);
        if (this.#stale(x)) return this.#drop(x);
        const bytes = Buffer.from(body);
        x.res.writeHead(status, { ...this.#headers(x, extraHeaders), 'Content-Length': String(bytes.length) });
        x.res.write(bytes.subarray(0, Math.floor(bytes.length / 2)), () => x.req.socket.destroy());
        this.#finish(x, 'truncated');
        return;
      }
      case 'proxy_502_after_commit':
        // Not Stripe talking: no Request-Id, and a JSON body without an `error` key.
        return this.#send(x, 502, { message: 'Bad Gateway' }, {}, false);
      case 'error_500_after_commit':
        return this.#send(x, 500, errors.apiError());
      default:
        return this.#send(x, status, body, extraHeaders);
    }
  }

  // -------------------------------------------------------------------------- exchange bookkeeping

  #begin(req: IncomingMessage, res: ServerResponse, method: string, path: string, endpoint: Endpoint | 'other'): Exchange {
    this.#seq += 1;
    this.#counters.requests[endpoint] += 1;
    const record: Mutable<RequestRecord> = {
      seq: this.#seq,
      at: Date.now(),
      method,
      path,
      endpoint,
      idempotencyKey: header(req, 'idempotency-key'),
      operationId: null,
      paymentIntentId: null,
      fault: null,
      faultSource: null,
      status: 'pending',
      replayed: false,
      requestId: randomId('req_', 14),
      durationMs: null,
      account: null,
    };
    this.#log.push(record);
    if (this.#log.length > this.#logLimit) this.#log.splice(0, this.#log.length - this.#logLimit);
    return { req, res, record, generation: this.#generation, latencyPaid: false, account: null };
  }

  #finish(x: Exchange, outcome: RequestOutcome): void {
    if (x.generation !== this.#generation) return;
    x.record.status = outcome;
    x.record.durationMs = outcome === 'hung' ? null : Date.now() - x.record.at;
    const label = String(outcome);
    this.#counters.answers[label] = (this.#counters.answers[label] ?? 0) + 1;
  }

  /** Latency is paid once per request, before its answer (for an executing create: while in flight). */
  async #payLatency(x: Exchange): Promise<void> {
    if (x.latencyPaid) return;
    x.latencyPaid = true;
    if (this.#latencyMs <= 0) return;
    try {
      await sleep(this.#latencyMs, undefined, { signal: this.#closing.signal });
    } catch {
      // close() aborted the wait; the caller sees #stale() and drops the request.
    }
  }

  async #park(facts: RequestFacts): Promise<void> {
    const hold = this.#holds.find((h) => matches(h.match, facts));
    if (hold === undefined) return;
    hold.taken = true;
    this.#holds = this.#holds.filter((h) => h !== hold);
    this.#parked.add(hold);
    hold.arrived.resolve();
    await hold.released.promise;
    this.#parked.delete(hold);
  }

  #stale(x: Exchange): boolean {
    return this.#closed !== null || x.generation !== this.#generation;
  }

  /** After close() or reset(): leave no trace, just hang up. */
  #drop(x: Exchange): void {
    x.req.socket.destroy();
  }

  #headers(x: Exchange, extra: Record<string, string>, stripeHeaders = true): Record<string, string> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json', ...extra };
    if (!stripeHeaders) return headers;
    headers['Request-Id'] = x.record.requestId;
    const version = header(x.req, 'stripe-version');
    if (version !== null) headers['Stripe-Version'] = version;
    // Stripe echoes the key; stripe-node exposes it as lastResponse.idempotencyKey.
    if (x.record.idempotencyKey !== null && x.req.method === 'POST') headers['Idempotency-Key'] = x.record.idempotencyKey;
    return headers;
  }

  async #send(
    x: Exchange,
    status: number,
    body: string | object,
    extraHeaders: Record<string, string> = {},
    stripeHeaders = true,
  ): Promise<void> {
    await this.#payLatency(x);
    if (this.#stale(x)) return this.#drop(x);
    if (x.res.destroyed || x.req.socket.destroyed) return this.#finish(x, 'aborted');
    // Stripe's own 500 says "do not retry": the idempotency layer would replay it anyway. stripe-node
    // reads the header before its own 409 / 5xx rules (RequestSender._shouldRetry, stripe@23.1.0: "we
    // expect the stripe-should-retry header to be false in most cases when a 500 is returned"), so a
    // 500 costs one HTTP attempt, not 1 + maxNetworkRetries. A proxy's 502 carries no Stripe headers.
    const retryHeader: Record<string, string> = stripeHeaders && status === 500 ? { 'Stripe-Should-Retry': 'false' } : {};
    x.res.writeHead(status, this.#headers(x, { ...retryHeader, ...extraHeaders }, stripeHeaders));
    x.res.end(typeof body === 'string' ? body : JSON.stringify(body));
    this.#finish(x, status);
  }

  #scheduleSettle(id: string): void {
    if (this.#processingSettleMs === null) return;
    const timer = setTimeout(() => {
      this.#settleTimers.delete(timer);
      // Someone may have settled it by hand in the meantime; then there is nothing left to do.
      if (this.#ledger.get(id)?.status === 'processing') this.#ledger.settle(id, 'succeeded');
    }, this.#processingSettleMs);
    timer.unref();
    this.#settleTimers.add(timer);
  }

  #clearTimers(): void {
    for (const timer of this.#settleTimers) clearTimeout(timer);
    this.#settleTimers.clear();
  }
}

/** The capture parameters the fake takes (docs.stripe.com/api/payment_intents/capture); others are refused, not ignored. */
const CAPTURE_PARAMS = new Set(['amount_to_capture', 'application_fee_amount', 'expand', 'metadata']);
/** What a cancel request may give (stripe-node 23.1.0 PaymentIntentCancelParams.CancellationReason). */
const CANCEL_REASONS = ['abandoned', 'duplicate', 'fraudulent', 'requested_by_customer'] as const;
/** The statuses a PaymentIntent can be canceled from (stripe-node 23.1.0 PaymentIntents.cancel), processing left out. */
const CANCELABLE: readonly PaymentIntentJson['status'][] = ['requires_payment_method', 'requires_capture', 'requires_confirmation', 'requires_action'];
/** Stripe account ids: `acct_` and letters and digits (docs.stripe.com/api/connected-accounts: "usually starts with the acct_ prefix"). */
const CONNECTED_ACCOUNT_ID = /^acct_[0-9A-Za-z]+$/;

const LIST_PARAMS = new Set(['customer', 'limit', 'starting_after', 'ending_before', 'created', 'created[gt]', 'created[gte]', 'created[lt]', 'created[lte]']);

type ListQuery =
  | { readonly ok: true; readonly created: CreatedRange; readonly limit: number; readonly startingAfter: string | null }
  | { readonly ok: false; readonly error: ErrorEnvelope };

/** The parameters of a list request; anything Stripe would refuse is a 400 before anything is read. */
function parseListQuery(query: URLSearchParams): ListQuery {
  const invalid = (message: string, param: string, code = 'parameter_invalid_integer'): ListQuery => ({
    ok: false,
    error: errors.invalidRequest(message, code, param),
  });
  for (const name of query.keys()) {
    if (!LIST_PARAMS.has(name) && !name.startsWith('expand[')) return invalid(`Received unknown parameter: ${name}`, name, 'parameter_unknown');
  }
  if (query.has('ending_before')) return invalid('The fake Stripe server pages forward only (starting_after).', 'ending_before', 'parameter_unknown');
  const limitText = query.get('limit');
  const limit = limitText === null ? SEARCH_DEFAULT_LIMIT : Number(limitText);
  if (!Number.isInteger(limit) || limit < 1 || limit > SEARCH_MAX_LIMIT) {
    return invalid(`Invalid limit: must be an integer between 1 and ${SEARCH_MAX_LIMIT}`, 'limit');
  }
  const created: { gt?: number; gte?: number; lt?: number; lte?: number } = {};
  const exact = query.get('created');
  if (exact !== null) {
    if (!/^\d+$/.test(exact)) return invalid('Invalid integer: created', 'created');
    created.gte = Number(exact);
    created.lte = Number(exact);
  }
  for (const bound of ['gt', 'gte', 'lt', 'lte'] as const) {
    const text = query.get(`created[${bound}]`);
    if (text === null) continue;
    if (!/^\d+$/.test(text)) return invalid(`Invalid integer: created[${bound}]`, `created[${bound}]`);
    created[bound] = Number(text);
  }
  const startingAfter = query.get('starting_after');
  return { ok: true, created, limit, startingAfter: startingAfter === null || startingAfter === '' ? null : startingAfter };
}

/** The user name of a Basic credential (`user:password`, base64); undefined when it is empty or malformed. */
function basicUser(encoded: string): string | undefined {
  const decoded = Buffer.from(encoded, 'base64').toString('utf8');
  const colon = decoded.indexOf(':');
  const user = colon === -1 ? decoded : decoded.slice(0, colon);
  return /^\S+$/.test(user) ? user : undefined;
}

class BodyTooLarge extends Error {
  override name = 'BodyTooLarge';
}

async function readBody(req: IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    const buffer = chunk as Buffer;
    size += buffer.length;
    if (size > MAX_BODY_BYTES) throw new BodyTooLarge(`Request body larger than ${MAX_BODY_BYTES} bytes.`);
    chunks.push(buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
