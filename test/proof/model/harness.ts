// The property model's world: the REAL engine on real PostgreSQL, the real stripe SDK against the fake
// Stripe, and a small interpreter that plays a generated list of commands — deliveries, duplicate
// and concurrent deliveries, workers killed or stalled at each step of an attempt, lease expiry,
// scripted Stripe faults, search lag, key pruning after the window, reconciler pages — then heals
// (faults off, PaymentIntents settled, the reconciler run until nothing changes, time moved on when
// only time can decide) and hands the result to the invariant checker.
//
// Determinism (so a failure replays from its seed and shrinks): order ids are fresh per run, but every
// decision the engine makes depends only on the command list — backoffs are an hour long so nothing
// becomes due by itself, leases are expired and backoffs elapsed only by commands, faults are scripted
// (random fault draws hash the idempotency key, which contains a fresh uuid: not replayable), and a
// stalled worker waits on a gate the interpreter opens, never on a timer.
//
// Refunds ride the same world: refund requests of an order (partial, the rest, full, more
// than is left, a repeat of an earlier refund id, the same id with another amount), possibly crashed,
// faults on the Refunds endpoints, pending refunds settled, and the duplicate-charge remedy — a second
// succeeded PaymentIntent made at Stripe behind the pipeline's back, and its evidence delivered (by an
// operator or a Stripe event, possibly several times) — and a refund Stripe fails after it said
// succeeded (migrations/009), its event told now, later, twice, or never (no events). Each request's verdict is predicted by
// refund-oracle.ts before it is made; after heal the oracle judges every order's money.
import { randomUUID } from 'node:crypto';
import type { Db } from '../../../lambdas/payments/db.ts';
import { ChargeEngine } from '../../../lambdas/payments/engine.ts';
import type { RefundRequestResult } from '../../../lambdas/payments/request-results.ts';
import type {
  CreatePaymentIntentRequest,
  AuthorizationActionRequest,
  CreateRefundRequest,
  GatewayResult,
  ListAnswer,
  ListRequest,
  PaymentGateway,
  RefundView,
  SearchPaymentIntentsRequest,
} from '../../../lambdas/payments/gateway.ts';
import type { AuthorizationInput, ChargeInput, OperationStatus, PaymentIntentView, RefundInput, RefundReason } from '../../../lambdas/payments/types.ts';
import { createStripeClient } from '../../../lambdas/payments/stripe-gateway.ts';
import { judgeAuthorization, predictManualRefund, predictSettlement, type AskedSettlement, type AuthorizationVerdict, type AuthorizedChargeState, type ManualRefundVerdict, type SettlementRow } from './authorization-oracle.ts';
import { checkExpiredAuthorizations } from '../../../lambdas/payments/authorization-expiry.ts';
import { holdsMoney, judgeOrder, predictRefund, type AcceptedRefund, type AskedRefund, type ChargeState, type RefundEnd, type RefundRow, type RefundVerdict } from './refund-oracle.ts';
import { faultCanTarget } from '../../../local/fake-stripe/faults.ts';
import type { FakeStripe, FaultKind, FaultMatch, HoldHandle, PaymentIntentRecord, RefundSettleStatus, SettleStatus } from '../../../local/fake-stripe/types.ts';
import { checkInvariants, heldAnAuthorization, type InvariantReport, type SentRefund } from '../../../local/invariants.ts';
import { StripeEventApplier } from '../../../lambdas/payments/event-applier.ts';
import { ReissueWatcher } from '../../../lambdas/payments/watcher.ts';
import { readStripeEvent } from '../../../lambdas/payments/event-decisions.ts';
import { DEFAULT_POLICY } from '../../../lambdas/payments/decisions.ts';
import type { TransactionalDb } from '../../../lambdas/payments/inbox-store.ts';
import { recordAndApply } from '../../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent, paymentIntentEventType, paymentIntentJson, refundJson } from '../../../local/fake-stripe/webhooks.ts';
import type { StripeEventView } from '../../../lambdas/payments/event-decisions.ts';

// ── Commands ─────────────────────────────────────────────────────────────────────────────────────

/** Where a worker dies or stalls in one attempt: claim ─▶ call ─▶ (Stripe works) ─▶ answer ─▶ record. */
export type CrashPoint = 'before_claim' | 'after_claim' | 'in_flight' | 'after_answer';
export type StallPoint = 'in_flight' | 'after_answer';

export type Command =
  /** One SQS batch; repeated indexes are duplicate deliveries of one order. */
  | { readonly t: 'deliver'; readonly orders: readonly number[] }
  /** The same order delivered to n workers at the same moment (a redelivery racing the first). */
  | { readonly t: 'concurrent'; readonly order: number; readonly n: number }
  /** A delivery racing a reconciler page. */
  | { readonly t: 'race'; readonly order: number }
  /** The same order id with another amount: a producer bug; never a second charge. */
  | { readonly t: 'conflict'; readonly order: number }
  /** A worker (charge handler or reconciler) SIGKILLed at a point; nothing it would write after is written. */
  | { readonly t: 'crash'; readonly via: 'deliver' | 'reconcile'; readonly order: number; readonly point: CrashPoint }
  /** A live worker stalled at a point until `release` (or heal): a zombie once its lease is expired. */
  | { readonly t: 'stall'; readonly via: 'deliver' | 'reconcile'; readonly order: number; readonly point: StallPoint }
  /** Let every stalled call and parked Stripe request go on, and wait for those workers. */
  | { readonly t: 'release' }
  /** Every lease of the run ends now (as after leaseMs). */
  | { readonly t: 'expire_leases' }
  /** Every backoff of the run has elapsed (next_attempt_at = now). */
  | { readonly t: 'backoff_elapses' }
  | { readonly t: 'reconcile'; readonly limit: number }
  /** A scripted fault for the order's next matching request(s) (the refund endpoints: its refunds'). */
  | { readonly t: 'fault'; readonly order: number; readonly kind: FaultKind; readonly times: number; readonly endpoint: FaultEndpoint }
  /**
   * A refund request of the order through the engine (the charge handler's refund path): a new refund
   * id of a size relative to what is left (`partial`, `rest`, `full`, `over` = one more than is left),
   * or an earlier refund id again (`repeat`: the same request; `other_amount`: a conflict). The
   * worker may be killed at a point of it (then SQS redelivers it at heal). `afterCharge`: the
   * producer sent the order's charge first (same FIFO group), so an order never sent is delivered
   * before the refund; otherwise the refund may come for an order that has no charge.
   */
  | {
      readonly t: 'refund';
      readonly order: number;
      readonly pick: 'new' | 'repeat' | 'other_amount';
      readonly size: 'partial' | 'rest' | 'full' | 'over';
      readonly reason: RefundReason | null;
      readonly crash: CrashPoint | null;
      readonly afterCharge: boolean;
    }
  /** Stripe (the card network) finishes the order's pending refunds. */
  | { readonly t: 'settle_refund'; readonly order: number; readonly status: RefundSettleStatus }
  /**
   * Stripe holds a second succeeded PaymentIntent for the order, made behind the pipeline's back (a
   * stray create of an old key generation naming our operation, or someone else's charge naming only
   * the order). Only once the order's charge succeeded: which one is extra is settled then.
   */
  | { readonly t: 'duplicate'; readonly order: number; readonly ours: boolean }
  /**
   * Evidence of the order's extra PaymentIntents reaches the product `copies` times at once: an
   * operator (engine.remedyDuplicateCharge) or, in runs with events, Stripe's event (inline or inbox).
   */
  | { readonly t: 'duplicate_evidence'; readonly order: number; readonly via: 'operator' | 'event'; readonly copies: number }
  | { readonly t: 'search_lag'; readonly lagging: boolean }
  /** Time moves past earlySearchAfterMs (11 minutes) for every operation of the run. */
  | { readonly t: 'early_search_time' }
  /**
   * 16 minutes pass (past the List settle delay, the spacing of two proofs of absence and the
   * re-issue delay after the last send) for every operation of the run, audit trail included.
   */
  | { readonly t: 'evidence_time' }
  /** A day passes: every key window of the run is over and Stripe prunes the keys. */
  | { readonly t: 'window_passes' }
  /**
   * Stripe commits now the order's creates it answered 500 or left unanswered BEFORE committing them
   * (the fault kinds error_500_late_commit and in_flight_then_commit): before the product's proofs of
   * absence (the List finds the object) or after its re-issue (only the watch after the re-issue, or
   * Stripe's event, can find it). Heal commits whatever is still pending once every operation is decided.
   */
  | { readonly t: 'commit_late'; readonly order: number }
  /** Stripe (or the customer) finishes the order's processing / requires_action PaymentIntents. */
  | { readonly t: 'settle'; readonly order: number; readonly status: SettleStatus }
  /**
   * Stripe tells (only when the run has `events`): an event for each of the order's PaymentIntents,
   * as it is now or an older `processing` snapshot, delivered `copies` times, applied at once
   * (the webhook's inline apply) — or only recorded, for the inbox sweep to apply.
   */
  | { readonly t: 'stripe_event'; readonly order: number; readonly snapshot: 'current' | 'old_processing'; readonly copies: number; readonly inline: boolean }
  /** The reconciler's pass over the inbox. */
  | { readonly t: 'apply_inbox' }
  /**
   * Stripe fails one of the order's refunds after it said succeeded (a card refund the issuer could
   * not process: the fake's documented succeeded → failed, settleRefund): the `pick`-th of the producer
   * refunds Stripe holds succeeded, the order's first, then the next orders' (so that the command finds
   * one more often than an order alone would have); its event (`refund.failed`, or the `refund.updated` of the
   * same change) is delivered `copies` times now (0: later — a `refund_event`, or heal), inline or
   * only recorded for the inbox sweep. Without Stripe events in the run nothing tells the product.
   * `reask`: then the producer, told the customer got nothing, asks for that amount again (a new refund
   * id) — refundable again only if the ledger learnt the failure by then.
   */
  | { readonly t: 'refund_fails_after_success'; readonly order: number; readonly pick: number; readonly type: 'refund.failed' | 'refund.updated'; readonly copies: number; readonly inline: boolean; readonly reask: boolean }
  /** Stripe redelivers the events of the order's refunds it failed after success (the same event ids). */
  | { readonly t: 'refund_event'; readonly copies: number; readonly inline: boolean }
  /**
   * Manual capture (docs/model.md#manual-capture; an order with `capture: 'manual'` is an authorize:
   * its charge only authorizes). A capture of all of it, of the whole amount named, of a part, or of
   * one more than was authorized (refused); the worker possibly killed at each point (redelivered at heal).
   */
  | { readonly t: 'capture'; readonly order: number; readonly size: 'all' | 'full' | 'partial' | 'over'; readonly crash: CrashPoint | null }
  | { readonly t: 'cancel_authorization'; readonly order: number; readonly crash: CrashPoint | null }
  /**
   * The order's authorization lapses: the model's clock moves past Stripe's validity for its hold
   * (the fake cancels it, `automatic`), and — with `check` — the reconciler's expiry check runs now
   * (heal runs it anyway).
   */
  | { readonly t: 'authorization_expires'; readonly order: number; readonly check: boolean }
  /** A refund of the order once its charge is final: of an uncaptured authorization refused (`not_captured`), else at most what was captured. */
  | { readonly t: 'refund_authorized'; readonly order: number; readonly size: 'partial' | 'full' | 'over' };

export type FaultEndpoint = 'any' | 'create' | 'retrieve' | 'search' | 'list' | 'refund_create' | 'refund_retrieve' | 'refund_list' | 'capture' | 'cancel';

export interface OrderSpec {
  readonly paymentMethod: string;
  readonly amount: number;
  /** 'manual': the charge only authorizes (capture_method=manual); captures and cancels settle it. */
  readonly capture?: 'manual';
}

export interface ModelRun {
  readonly orders: readonly OrderSpec[];
  readonly commands: readonly Command[];
  /** What heal does with PaymentIntents still processing / requiring action ('leave': a human decides). */
  readonly healSettle: SettleStatus | 'leave';
  /** Stripe events in: false = polling only (stripe_event / apply_inbox commands are no-ops). */
  readonly events?: boolean;
}

export interface ModelWorld {
  readonly db: Db;
  readonly fake: FakeStripe;
  /** Short client timeout: a hang costs little. */
  readonly gateway: PaymentGateway;
  /** Long client timeout, for a worker parked at Stripe whose answer must be the real one when released. */
  readonly patientGateway: PaymentGateway;
}

export interface RunResult {
  readonly report: InvariantReport;
  /** Model-level findings beyond the checker (engine threw, failed without evidence, …). */
  readonly problems: readonly string[];
  readonly orderIds: readonly string[];
  readonly healRounds: number;
  readonly timeSteps: number;
  /** How often the run took the List step, and re-issued automatically on proven absence. */
  readonly lists: number;
  readonly autoReissues: number;
  /** Every refund request's verdict (as predicted and found), and every accepted refund's end. */
  readonly refundVerdicts: Readonly<Partial<Record<RefundVerdict, number>>>;
  readonly refundEnds: Readonly<Partial<Record<RefundEnd, number>>>;
  /** Refund requests by the state of the order's charge when they came (none, open, succeeded, failed). */
  readonly refundsByCharge: Readonly<Partial<Record<ChargeState['kind'], number>>>;
  /** Extra PaymentIntents made at Stripe (duplicate commands that applied). */
  readonly duplicates: number;
  /** Refunds Stripe failed after they succeeded (refund_fails_after_success commands that found one). */
  readonly failedAfterSuccess: number;
  /** Refund requests of an order with such a refund, by whether the ledger had learnt it (its event applied) then. */
  readonly requestsAfterFailedRefund: Readonly<Partial<Record<'learnt' | 'not_learnt', number>>>;
  /** Creates Stripe committed late (after its 500 or its silence), and the PaymentIntents of them that charged after a re-issue. */
  readonly lateCommits: number;
  readonly lateChargesAfterReissue: number;
  /** Looks the watch after a re-issue took, and the remedies and findings they made. */
  readonly watchLooks: number;
  readonly watchRemedies: number;
  readonly watchFindings: number;
  /** Capture / cancel requests by verdict (predicted and found), refunds of manual orders by verdict, and how each authorization ended. */
  readonly authorizationVerdicts: Readonly<Record<string, number>>;
  readonly manualRefundVerdicts: Readonly<Record<string, number>>;
  readonly authorizationEnds: Readonly<Record<string, number>>;
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;
/** Long backoffs: in the model, nothing becomes due by the wall clock, only by a command. */
export const MODEL_POLICY = {
  backoff: {
    ambiguous: { baseMs: HOUR, capMs: DAY },
    rateLimited: { baseMs: HOUR, capMs: DAY },
    configuration: { baseMs: HOUR, capMs: DAY },
    unsettled: { baseMs: HOUR, capMs: DAY },
    // The inbox's retries as they were (heal applies the inbox until nothing is left).
    inbox: DEFAULT_POLICY.backoff.inbox,
  },
};

const KILLED = 'model: worker killed';

/** '16 minutes' → ms, for the few intervals the model moves time by. */
function intervalMs(interval: string): number {
  const m = /^(\d+) (minutes|hours|days)$/.exec(interval);
  if (!m) throw new Error(`model: unknown interval ${interval}`);
  return Number(m[1]) * { minutes: 60_000, hours: HOUR, days: DAY }[m[2] as 'minutes' | 'hours' | 'days'];
}

class WorkerKilled extends Error {
  override readonly name = 'WorkerKilled';
  constructor() {
    super(KILLED);
  }
}

/** Whether an error is (or was caused by) the simulated death of the worker. */
function killedBy(error: unknown): boolean {
  for (let e: unknown = error, depth = 0; e instanceof Error && depth < 5; e = e.cause, depth++) if (e instanceof WorkerKilled) return true;
  return false;
}

/** The database as a killed process sees it: the first `statements` reach it, nothing after. */
function dyingDb(db: Db, statements: number): Db {
  let left = statements;
  const query = (...args: unknown[]) => {
    if (left <= 0) return Promise.reject(new WorkerKilled());
    left -= 1;
    return (db.query as (...a: unknown[]) => Promise<unknown>)(...args);
  };
  return { query } as unknown as Db;
}

type GatewayMode =
  | { readonly kind: 'die_before_call' }
  | { readonly kind: 'die_in_flight' }
  | { readonly kind: 'stall_in_flight' }
  | { readonly kind: 'stall_after_answer' }
  | { readonly kind: 'normal' };

/** Where one gateway call goes at Stripe: what the fake's hold() must match to park exactly it. */
type Target =
  | { readonly create: CreatePaymentIntentRequest }
  | { readonly retrieve: string }
  | { readonly search: SearchPaymentIntentsRequest }
  | { readonly list: ListRequest }
  | { readonly refundCreate: CreateRefundRequest }
  | { readonly refundRetrieve: string }
  | { readonly refundList: ListRequest }
  | { readonly capture: AuthorizationActionRequest }
  | { readonly cancel: AuthorizationActionRequest };

function holdMatch(target: Target): FaultMatch {
  if ('create' in target) return { endpoint: 'create', idempotencyKey: target.create.idempotencyKey };
  if ('retrieve' in target) return { endpoint: 'retrieve', paymentIntentId: target.retrieve };
  if ('list' in target) return { endpoint: 'list', ...(target.list.scope.customer ? { customerId: target.list.scope.customer } : {}) };
  if ('refundCreate' in target) return { endpoint: 'refund_create', idempotencyKey: target.refundCreate.idempotencyKey };
  if ('refundRetrieve' in target) return { endpoint: 'refund_retrieve', refundId: target.refundRetrieve };
  if ('capture' in target) return { endpoint: 'capture', idempotencyKey: target.capture.idempotencyKey };
  if ('cancel' in target) return { endpoint: 'cancel', idempotencyKey: target.cancel.idempotencyKey };
  if ('refundList' in target) return { endpoint: 'refund_list', ...(target.refundList.scope.payment_intent ? { paymentIntentId: target.refundList.scope.payment_intent } : {}) };
  return { endpoint: 'search', operationId: target.search.operationId };
}

/** Parked things the interpreter releases on `release`, `window_passes` and heal. */
class Parking {
  readonly holds: HoldHandle[] = [];
  readonly gates: PromiseWithResolvers<void>[] = [];
  readonly workers: Promise<unknown>[] = [];

  async releaseAll(): Promise<void> {
    // Stripe first (parked requests execute now), then stalled workers may record what they heard.
    while (this.holds.length > 0 || this.gates.length > 0 || this.workers.length > 0) {
      for (const hold of this.holds.splice(0)) hold.release();
      for (const gate of this.gates.splice(0)) gate.resolve();
      await Promise.all(this.workers.splice(0));
    }
  }
}

/**
 * A PaymentGateway that kills or stalls its worker at a chosen point. A killed worker makes no call
 * after its death (the engine would go on to a create after a failed early search; a dead process
 * does not). A stalled worker stalls on its FIRST call only, so that releasing it lets it finish.
 */
class ModelGateway implements PaymentGateway {
  readonly #real: PaymentGateway;
  readonly #fake: FakeStripe;
  readonly #mode: GatewayMode;
  readonly #parking: Parking;
  #dead = false;
  #stalled = false;
  /** Resolves when this worker reached its stall point (or died): the interpreter then moves on. */
  readonly parked = Promise.withResolvers<void>();

  constructor(real: PaymentGateway, fake: FakeStripe, mode: GatewayMode, parking: Parking) {
    this.#real = real;
    this.#fake = fake;
    this.#mode = mode;
    this.#parking = parking;
  }

  createPaymentIntent(request: CreatePaymentIntentRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call({ create: request }, () => this.#real.createPaymentIntent(request));
  }

  retrievePaymentIntent(id: string): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call({ retrieve: id }, () => this.#real.retrievePaymentIntent(id));
  }

  searchPaymentIntents(request: SearchPaymentIntentsRequest): Promise<GatewayResult<PaymentIntentView[]>> {
    return this.#call({ search: request }, () => this.#real.searchPaymentIntents(request));
  }

  listPaymentIntents(request: ListRequest): Promise<GatewayResult<ListAnswer<PaymentIntentView>>> {
    return this.#call({ list: request }, () => this.#real.listPaymentIntents(request));
  }

  createRefund(request: CreateRefundRequest): Promise<GatewayResult<RefundView>> {
    return this.#call({ refundCreate: request }, () => this.#real.createRefund(request));
  }

  retrieveRefund(id: string): Promise<GatewayResult<RefundView>> {
    return this.#call({ refundRetrieve: id }, () => this.#real.retrieveRefund(id));
  }

  listRefunds(request: ListRequest): Promise<GatewayResult<ListAnswer<RefundView>>> {
    return this.#call({ refundList: request }, () => this.#real.listRefunds(request));
  }

  capturePaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call({ capture: request }, () => this.#real.capturePaymentIntent(request));
  }

  cancelPaymentIntent(request: AuthorizationActionRequest): Promise<GatewayResult<PaymentIntentView>> {
    return this.#call({ cancel: request }, () => this.#real.cancelPaymentIntent(request));
  }

  #die(): never {
    this.#dead = true;
    this.parked.resolve();
    throw new WorkerKilled();
  }

  async #call<T>(target: Target, call: () => Promise<GatewayResult<T>>): Promise<GatewayResult<T>> {
    if (this.#dead) this.#die();
    const stallHere = !this.#stalled && (this.#mode.kind === 'stall_in_flight' || this.#mode.kind === 'stall_after_answer');
    if (stallHere) this.#stalled = true;
    switch (this.#mode.kind) {
      case 'normal':
        return call();
      case 'die_before_call':
        return this.#die();
      case 'die_in_flight': {
        // The request reaches Stripe and is parked there (holding its key); the process dies meanwhile.
        const hold = this.#fake.hold(holdMatch(target));
        this.#parking.holds.push(hold);
        let arrived = false;
        void hold.arrived.then(() => (arrived = true));
        const orphan = call();
        orphan.catch(() => {});
        const first = await Promise.race([hold.arrived.then(() => 'parked' as const), orphan.then(() => 'answered' as const)]);
        // Refused before the park (429, 409…): cancel the hold so it cannot catch a later request.
        if (first === 'answered' && !arrived) hold.release();
        return this.#die();
      }
      case 'stall_in_flight': {
        if (!stallHere) return call();
        const hold = this.#fake.hold(holdMatch(target));
        this.#parking.holds.push(hold);
        let arrived = false;
        void hold.arrived.then(() => {
          arrived = true;
          this.parked.resolve();
        });
        const result = await call();
        if (!arrived) hold.release();
        this.parked.resolve();
        return result;
      }
      case 'stall_after_answer': {
        const result = await call();
        if (!stallHere) return result;
        const gate = Promise.withResolvers<void>();
        this.#parking.gates.push(gate);
        this.parked.resolve();
        await gate.promise;
        return result;
      }
    }
  }
}

// ── The interpreter ──────────────────────────────────────────────────────────────────────────────

/** How a worker killed at a point is made: the database statements it gets, and its gateway. */
function crashAt(point: CrashPoint): [number, GatewayMode] {
  switch (point) {
    case 'before_claim':
      return [0, { kind: 'normal' }];
    case 'after_claim':
      return [1, { kind: 'die_before_call' }];
    case 'in_flight':
      return [1, { kind: 'die_in_flight' }];
    case 'after_answer':
      return [1, { kind: 'normal' }]; // the answer came, the record never reaches the database
  }
}

/** The model's own book of one order's refunds: what it asked, what it saw accepted, what SQS still holds. */
interface OrderRefundBook {
  readonly asked: AskedRefund[];
  readonly accepted: Map<string, AskedRefund & { readonly operationId: string }>;
  /** Refund requests whose worker died: SQS redelivers them (at heal). */
  readonly unacked: Map<string, AskedRefund>;
  /** Idempotency keys of the PaymentIntents made behind the pipeline's back (the extras, once succeeded). */
  readonly strayKeys: Set<string>;
  /** Refunds Stripe failed after they succeeded (Stripe id → the event telling it, redelivered with its id). */
  readonly failedAfterSuccess: Map<string, StripeEventView>;
  next: number;
}

const REFUND_VERDICT_OF_REJECTION: Readonly<Record<string, RefundVerdict>> = {
  no_charge: 'no_charge',
  charge_failed: 'charge_failed',
  exceeds_charge: 'exceeds_charge',
  refund_conflict: 'refund_conflict',
};

let runCounter = 0;

export async function playRun(world: ModelWorld, run: ModelRun, trace?: (line: string) => void): Promise<RunResult> {
  const { db, fake } = world;
  fake.reset();
  fake.setSearchLag(0);
  const runId = `m${(runCounter++).toString(36)}-${randomUUID().slice(0, 8)}`;
  const orders: ChargeInput[] = run.orders.map((spec, i) => ({
    orderId: `${runId}-o${i}`,
    amount: spec.amount,
    currency: 'eur',
    customerId: 'cus_model',
    paymentMethod: spec.paymentMethod,
    ...(spec.capture === 'manual' ? { captureMethod: 'manual' as const } : {}),
  }));
  const manualOrderIds = new Set(orders.filter((o) => o.captureMethod === 'manual').map((o) => o.orderId));
  const orderIds = orders.map((o) => o.orderId);
  const parking = new Parking();
  const problems: string[] = [];
  const sent = new Set<string>();
  const acked = new Set<string>();
  const policy = MODEL_POLICY;
  const engine = new ChargeEngine({ db, gateway: world.gateway, actor: 'model', random: () => 0.5, policy });
  const orderAt = (i: number) => orders[i % orders.length]!;
  const applier = new StripeEventApplier({ db: db as TransactionalDb, gateway: world.gateway, actor: 'model-events', random: () => 0.5, policy });
  // The watch after a re-issue, as the reconciler's sweep runs it after its due operations.
  const watcher = new ReissueWatcher({ db, gateway: world.gateway, actor: 'model-watch', random: () => 0.5, policy });
  const watchTally = { looks: 0, remedies: 0, findings: 0 };
  const watch = async (limit: number) => {
    const r = await live('watch.lookDue', watcher.lookDue(limit));
    if (r) {
      watchTally.looks += r.looked + r.failed;
      watchTally.remedies += r.remediesCreated;
      watchTally.findings += r.newFindings;
    }
  };
  let lateCommitsMade = 0;
  const commitLate = (orderId: string) => {
    lateCommitsMade += fake.commitLate({ orderId }).length;
  };
  const eventsOn = run.events ?? false;
  const book: OrderRefundBook[] = orders.map(() => ({ asked: [], accepted: new Map(), unacked: new Map(), strayKeys: new Set(), failedAfterSuccess: new Map(), next: 0 }));
  const refundVerdicts: Partial<Record<RefundVerdict, number>> = {};
  /**
   * The refund requests whose latest verdict (the oracle's, on the latest delivery) says a refund
   * operation of that id exists: the checker's lost_refund judges them. The model drives the engine,
   * not the charge handler, so a refused request leaves no rejected_messages row and is not given.
   */
  const mustHaveOperation = new Map<string, SentRefund>();
  const refundsByCharge: Partial<Record<ChargeState['kind'], number>> = {};
  let duplicates = 0;
  /** Refunds the run had Stripe fail after success; refund requests judged with one of the order's in view, by whether the ledger had learnt it. */
  let failedAfterSuccessMade = 0;
  const requestsAfterFailedRefund: Partial<Record<'learnt' | 'not_learnt', number>> = {};
  // Short timeout: a stray create that meets a scripted `hang` gives up soon (the PaymentIntent is found by its key).
  const strayStripe = createStripeClient({ apiKey: 'sk_test_model', apiBase: fake.url, timeoutMs: 1_000, maxNetworkRetries: 0 });

  /** A live engine call: any exception is a finding (the engine only throws when the database does). */
  const live = async <T>(what: string, work: Promise<T>): Promise<T | undefined> => {
    try {
      return await work;
    } catch (error) {
      problems.push(`${what} threw ${error instanceof Error ? `${error.name}: ${error.message}` : String(error)}`);
      return undefined;
    }
  };
  const deliver = async (inputs: ChargeInput[], via: ChargeEngine = engine) => {
    for (const input of inputs) sent.add(input.orderId);
    const results = await live('processRequests', via.processRequests(inputs));
    if (results) for (const input of inputs) acked.add(input.orderId);
    return results;
  };
  const scoped = (sql: string) => db.query(sql, [orderIds]);
  const operationIdOf = async (order: ChargeInput): Promise<string | null> => {
    const { rows } = await db.query<{ id: string }>(`SELECT id FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`, [order.orderId]);
    return rows[0]?.id ?? null;
  };
  const chargeOf = async (order: ChargeInput) =>
    (await db.query<{ id: string; status: OperationStatus; review_reason: string | null; external_id: string | null; amount: number }>(
      `SELECT id::text, status, review_reason, external_id, amount::int FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`,
      [order.orderId],
    )).rows[0] ?? null;
  const refundRowsOf = async (order: ChargeInput): Promise<RefundRow[]> =>
    (await db.query<{ id: string; refund_id: string; status: OperationStatus; external_id: string | null; review_reason: string | null; amount: number; refund_reason: RefundReason | null; refund_payment_intent: string | null; marked: boolean }>(
      `SELECT id::text, refund_id, status, external_id, review_reason, amount::int, refund_reason, refund_payment_intent, failed_after_success_at IS NOT NULL AS marked
         FROM payment_operations WHERE order_id = $1 AND kind = 'refund' ORDER BY created_at, id`,
      [order.orderId],
    )).rows.map((r) => ({ id: r.id, refundId: r.refund_id, status: r.status, externalId: r.external_id, reviewReason: r.review_reason, amount: r.amount, reason: r.refund_reason, paymentIntent: r.refund_payment_intent, failedAfterSuccess: r.marked }));
  /** What the oracle is given: the accepted producer refunds, with their operations' statuses now. */
  const acceptedNow = async (i: number): Promise<AcceptedRefund[]> => {
    const rows = new Map((await refundRowsOf(orders[i]!)).map((r) => [r.refundId, r]));
    // Learnt: the event telling that Stripe failed the refund after it succeeded is applied (the inbox's own record of it).
    const told = [...book[i]!.failedAfterSuccess.entries()];
    const applied = told.length === 0 || !eventsOn
      ? new Set<string>()
      : new Set((await db.query<{ event_id: string }>('SELECT event_id FROM stripe_events WHERE event_id = ANY($1) AND applied_at IS NOT NULL', [told.map(([, e]) => e.id)])).rows.map((r) => r.event_id));
    const learnt = new Set(told.filter(([, e]) => applied.has(e.id)).map(([refund]) => refund));
    return [...book[i]!.accepted.values()].map((a) => {
      const row = rows.get(a.refundId);
      return { ...a, status: row?.status ?? 'pending', failedAfterSuccessLearnt: row?.externalId != null && learnt.has(row.externalId) };
    });
  };
  /** Stripe's event about a refund it failed after success, `copies` times (a run without events: nothing reaches the product). */
  const deliverRefundEvent = async (event: StripeEventView, copies: number, inline: boolean) => {
    if (!eventsOn) return;
    for (let c = 0; c < copies; c++) await live('stripe event (refund)', recordAndApply(event, 'webhook', { db, applier: inline ? applier : null, publisher: null }));
  };
  /** The order's extra PaymentIntents: those made behind the pipeline's back that charged. */
  const extrasOf = (i: number) => fake.paymentIntents({ orderId: orders[i]!.orderId }).filter((pi) => pi.status === 'succeeded' && pi.idempotencyKey !== null && book[i]!.strayKeys.has(pi.idempotencyKey));
  /**
   * The order's late creates after a re-issue: PaymentIntents of the charge operation under a key
   * generation it has left (a create Stripe committed after the re-issue), other than the one it
   * names, and not the model's own extra charges.
   */
  const lateCreatesOf = async (i: number) => {
    const charge = await db.query<{ id: string; external_id: string | null; key_generation: number }>(
      `SELECT id::text, external_id, key_generation FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`,
      [orders[i]!.orderId],
    );
    const op = charge.rows[0];
    if (!op) return [];
    return fake
      .paymentIntents({ operationId: op.id })
      .filter((pi) => pi.id !== op.external_id && Number(pi.metadata.key_generation ?? 'NaN') < op.key_generation && !book[i]!.strayKeys.has(pi.idempotencyKey ?? ''));
  };
  /**
   * The late charges among them (succeeded). Extra charges like those of extrasOf, which nobody hands
   * to the product: the watch after the re-issue (or Stripe's event, in runs with events) must find each.
   */
  const lateChargesOf = async (i: number) => (await lateCreatesOf(i)).filter((pi) => pi.status === 'succeeded');

  /**
   * One refund request: the oracle predicts its verdict from what it observes now, the engine (or a
   * worker killed at `crash`) takes it, and the two must agree. A refused request sends nothing.
   */
  const requestRefund = async (i: number, ask: AskedRefund, crash: CrashPoint | null) => {
    const order = orders[i]!;
    const b = book[i]!;
    const charge = await chargeOf(order);
    const state: ChargeState =
      charge === null ? { kind: 'none' } : { kind: charge.status === 'succeeded' || charge.status === 'failed' ? charge.status : 'open', amount: charge.amount };
    const seen = await acceptedNow(i);
    const predicted = predictRefund(state, seen, ask);
    const sentKey = JSON.stringify([order.orderId, ask.refundId]);
    if (predicted.verdict === 'accepted' || predicted.verdict === 'repeat' || predicted.verdict === 'refund_conflict') mustHaveOperation.set(sentKey, { orderId: order.orderId, refundId: ask.refundId });
    else mustHaveOperation.delete(sentKey);
    if (b.failedAfterSuccess.size > 0) {
      const key = seen.some((r) => r.failedAfterSuccessLearnt === true) ? 'learnt' : 'not_learnt';
      requestsAfterFailedRefund[key] = (requestsAfterFailedRefund[key] ?? 0) + 1;
    }
    refundsByCharge[state.kind] = (refundsByCharge[state.kind] ?? 0) + 1;
    const input: RefundInput = { orderId: order.orderId, refundId: ask.refundId, amount: ask.amount, reason: ask.reason };
    const refundCreates = () => fake.stats().requests.refund_create;
    const before = refundCreates();
    const rowsBefore = (await refundRowsOf(order)).length;
    const what = `refund ${ask.refundId} (${ask.amount}, ${ask.reason}) of order ${order.orderId} [charge ${charge?.status ?? 'none'}${charge ? ` ${charge.amount}` : ''}]`;
    if (crash !== null) {
      const [statements, mode] = crashAt(crash);
      b.unacked.set(ask.refundId, ask);
      try {
        await worker({ refund: input }, order, statements, mode).running;
      } catch (error) {
        if (!killedBy(error)) problems.push(`crashed refund worker failed otherwise: ${String(error)}`);
      }
      const row = (await refundRowsOf(order)).find((r) => r.refundId === ask.refundId);
      if (predicted.verdict === 'accepted' && row) b.accepted.set(ask.refundId, { ...ask, operationId: row.id });
      else if (predicted.verdict === 'accepted' && statements > 0) problems.push(`${what}: the request statement ran but no refund operation exists`);
      else if (predicted.verdict !== 'accepted' && predicted.verdict !== 'repeat' && (await refundRowsOf(order)).length !== rowsBefore) problems.push(`${what}: refused (${predicted.verdict}) but an operation was made`);
      refundVerdicts[predicted.verdict] = (refundVerdicts[predicted.verdict] ?? 0) + 1;
      return;
    }
    const result: RefundRequestResult | undefined = await live('processRefund', engine.processRefund(input));
    if (!result) return;
    b.unacked.delete(ask.refundId);
    const found: RefundVerdict = result.rejection
      ? (REFUND_VERDICT_OF_REJECTION[result.rejection.code] ?? 'refund_conflict')
      : result.operationId !== null && [...b.accepted.values()].some((a) => a.operationId === result.operationId)
        ? 'repeat'
        : 'accepted';
    refundVerdicts[found] = (refundVerdicts[found] ?? 0) + 1;
    if (found !== predicted.verdict || (found === 'repeat' && result.operationId !== predicted.operationId)) {
      problems.push(`${what}: the oracle says ${predicted.verdict}, the engine ${found}${result.rejection ? ` (${result.rejection.message})` : ''}`);
    }
    if (result.rejection) {
      if (refundCreates() !== before) problems.push(`${what}: refused (${found}) but a refund create reached Stripe`);
      if ((await refundRowsOf(order)).length !== rowsBefore) problems.push(`${what}: refused (${found}) but an operation was made`);
    } else if (found === 'accepted' && result.operationId !== null) {
      b.accepted.set(ask.refundId, { ...ask, operationId: result.operationId });
    }
  };

  // ── Manual capture: the order's charge and its settlement as observed, and the requests ──────────
  const authorizationVerdicts: Record<string, number> = {};
  const manualRefundVerdicts: Record<string, number> = {};
  /** Capture / cancel requests a killed worker took: SQS redelivers them at heal. */
  const unackedSettlements: { i: number; ask: AskedSettlement }[] = [];
  const chargeStateOf = async (order: ChargeInput): Promise<AuthorizedChargeState> => {
    const { rows } = await db.query<{ status: OperationStatus; capture_method: string | null; amount: number }>(
      `SELECT status, capture_method, amount::int FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`,
      [order.orderId],
    );
    const c = rows[0];
    if (!c) return { kind: 'none' };
    return { kind: c.status === 'succeeded' || c.status === 'failed' ? c.status : 'open', manual: c.capture_method === 'manual', amount: c.amount };
  };
  const settlementsOf = async (order: ChargeInput): Promise<SettlementRow[]> =>
    (await db.query<{ id: string; kind: 'capture' | 'cancel_authorization'; status: OperationStatus; amount: number; cancellation_reason: 'expired' | null; review_reason: string | null }>(
      `SELECT id::text, kind, status, amount::int, cancellation_reason, review_reason FROM payment_operations
        WHERE order_id = $1 AND kind IN ('capture', 'cancel_authorization') ORDER BY created_at, id`,
      [order.orderId],
    )).rows.map((r) => ({ id: r.id, kind: r.kind, status: r.status, amount: r.amount, cancellationReason: r.cancellation_reason, reviewReason: r.review_reason }));
  const settlementRequests = () => fake.stats().requests.capture + fake.stats().requests.cancel;
  /** One capture or cancel: the oracle predicts, the engine (or a worker killed at `crash`) takes it, and the two must agree. */
  const requestSettlement = async (i: number, ask: AskedSettlement, crash: CrashPoint | null) => {
    const order = orders[i]!;
    const charge = await chargeStateOf(order);
    const before = await settlementsOf(order);
    const predicted = predictSettlement(charge, before[0] ?? null, ask);
    const input: AuthorizationInput = { kind: ask.kind, orderId: order.orderId, ...(ask.amount !== undefined ? { amount: ask.amount } : {}) };
    const what = `${ask.kind}${ask.amount !== undefined ? ` of ${ask.amount}` : ''} of order ${order.orderId} [charge ${charge.kind}${charge.kind !== 'none' ? ` ${charge.manual ? 'manual' : 'at once'} ${charge.amount}` : ''}]`;
    const sentBefore = settlementRequests();
    if (crash !== null) {
      const [statements, mode] = crashAt(crash);
      unackedSettlements.push({ i, ask });
      try {
        await worker({ authorization: input }, order, statements, mode).running;
      } catch (error) {
        if (!killedBy(error)) problems.push(`crashed ${ask.kind} worker failed otherwise: ${String(error)}`);
      }
      const after = await settlementsOf(order);
      if (predicted.verdict !== 'accepted' && predicted.verdict !== 'repeat' && after.length !== before.length) problems.push(`${what}: refused (${predicted.verdict}) but an operation was made`);
      authorizationVerdicts[`${ask.kind}:${predicted.verdict}`] = (authorizationVerdicts[`${ask.kind}:${predicted.verdict}`] ?? 0) + 1;
      return;
    }
    const result = await live('processAuthorization', engine.processAuthorization(input));
    if (!result) return;
    const found: AuthorizationVerdict = result.rejection ? result.rejection.code : before.some((s) => s.id === result.operationId) ? 'repeat' : 'accepted';
    authorizationVerdicts[`${ask.kind}:${found}`] = (authorizationVerdicts[`${ask.kind}:${found}`] ?? 0) + 1;
    if (found !== predicted.verdict || ((found === 'repeat' || found === 'authorization_conflict') && result.operationId !== predicted.operationId)) {
      problems.push(`${what}: the oracle says ${predicted.verdict}, the engine ${found}${result.rejection ? ` (${result.rejection.message})` : ''}`);
    }
    if (result.rejection) {
      // A refusal sends nothing and makes nothing, and says why.
      if (settlementRequests() !== sentBefore) problems.push(`${what}: refused (${found}) but a capture or cancel reached Stripe`);
      if ((await settlementsOf(order)).length !== before.length) problems.push(`${what}: refused (${found}) but an operation was made`);
      if (result.rejection.message.length === 0) problems.push(`${what}: refused without a reason`);
    }
  };
  /** The reconciler's expiry check, with the model's clock: every authorization nothing settled is looked at (the fake says whether it lapsed). */
  const expiryCheck = () => live('checkExpiredAuthorizations', checkExpiredAuthorizations({ db, gateway: world.gateway, validityMs: 0, lookMarginMs: 0, actor: 'model-expiry' }));
  let manualRefunds = 0;
  const requestManualRefund = async (i: number, size: 'partial' | 'full' | 'over') => {
    const order = orders[i]!;
    // Manual orders only: a charge captured at once has its refunds judged by the refund oracle.
    if (!manualOrderIds.has(order.orderId)) return;
    const charge = await chargeStateOf(order);
    if (charge.kind === 'none' || charge.kind === 'open') return;
    const settlement = (await settlementsOf(order))[0] ?? null;
    const mine = (await refundRowsOf(order)).filter((r) => r.refundId.startsWith('ra'));
    const held = mine.filter((r) => r.status !== 'failed').reduce((n, r) => n + r.amount, 0);
    const captured = settlement?.kind === 'capture' && settlement.status === 'succeeded' ? settlement.amount : charge.manual ? 0 : charge.amount;
    const left = Math.max(0, captured - held);
    const amount = { partial: Math.max(1, Math.floor(left / 2)), full: Math.max(1, left), over: left + 1 }[size];
    const predicted = predictManualRefund(charge, settlement, held, amount);
    const refundCreates = fake.stats().requests.refund_create;
    const result = await live('processRefund (manual)', engine.processRefund({ orderId: order.orderId, refundId: `ra${manualRefunds++}`, amount, reason: null }));
    if (!result) return;
    const found: ManualRefundVerdict = result.rejection ? (result.rejection.code as ManualRefundVerdict) : 'accepted';
    manualRefundVerdicts[found] = (manualRefundVerdicts[found] ?? 0) + 1;
    const what = `refund of ${amount} of order ${order.orderId} [charge ${charge.kind} ${charge.manual ? 'manual' : 'at once'} ${charge.amount}, ${settlement ? `${settlement.kind} ${settlement.status} ${settlement.amount}` : 'no settlement'}]`;
    if (predicted !== undefined && found !== predicted) problems.push(`${what}: the oracle says ${predicted}, the engine ${found}${result.rejection ? ` (${result.rejection.message})` : ''}`);
    if (result.rejection && fake.stats().requests.refund_create !== refundCreates) problems.push(`${what}: refused (${found}) but a refund create reached Stripe`);
    if (found === 'not_captured' && !/captur/i.test(result.rejection?.message ?? '')) problems.push(`${what}: refused not_captured without saying so (${result.rejection?.message})`);
  };

  /** Evidence of the order's extra PaymentIntents, `copies` times at once, by an operator or by Stripe's event. */
  const deliverDuplicateEvidence = async (i: number, pis: readonly PaymentIntentRecord[], via: 'operator' | 'event', copies: number, inline = true) => {
    const charge = await chargeOf(orders[i]!);
    for (const pi of pis) {
      if (via === 'event' && eventsOn) {
        const type = paymentIntentEventType(pi.status);
        const read = type ? readStripeEvent(makeStripeEvent(type, paymentIntentJson(pi))) : null;
        if (!read?.ok) continue;
        await Promise.all(
          Array.from({ length: copies }, () => live('stripe event (duplicate)', recordAndApply(read.event, 'webhook', { db, applier: inline ? applier : null, publisher: null }))),
        );
      } else if (charge !== null) {
        const view: PaymentIntentView = { id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency, metadata: pi.metadata, customer: pi.customer };
        await Promise.all(Array.from({ length: copies }, () => live('remedyDuplicateCharge', engine.remedyDuplicateCharge(charge.id, view, { by: 'model' }))));
      }
    }
  };

  const settleOpen = (orderId: string | null, status: SettleStatus) => {
    for (const pi of fake.paymentIntents(orderId === null ? {} : { orderId })) {
      if (pi.status === 'processing' || pi.status === 'requires_action') fake.settle(pi.id, status);
    }
  };
  /**
   * Time passes for everything the run recorded: the key windows, and the audit trail the List
   * evidence is read from (its send times and proofs of absence). The trail is append-only; the test
   * owns the table, so it lifts the trigger for this one transaction — only the model moves time.
   * (`interval` is one of this file's constants; the run id is generated here: no input in the SQL.)
   */
  const shiftTime = async (interval: string) => {
    // Every shift is longer than the List settle delay, which stands for the longest a request may be
    // worked on at Stripe after it was sent: nothing is still in flight once that much time passed.
    await parking.releaseAll();
    await scoped(
      `UPDATE payment_operations SET first_attempted_at = first_attempted_at - '${interval}'::interval
        WHERE order_id = ANY($1) AND first_attempted_at IS NOT NULL AND status IN ('pending', 'unknown')`,
    );
    await db.query(`
      ALTER TABLE payment_operation_events DISABLE TRIGGER payment_operation_events_append_only;
      UPDATE payment_operation_events e
         SET occurred_at = e.occurred_at - '${interval}'::interval,
             lease_until = e.lease_until - '${interval}'::interval,
             detail = CASE WHEN e.detail ? 'provenAt'
                           THEN jsonb_set(e.detail, '{provenAt}', to_jsonb(to_char(((e.detail->>'provenAt')::timestamptz - '${interval}'::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
                           WHEN e.detail ? 'leaseUntil'
                           THEN jsonb_set(e.detail, '{leaseUntil}', to_jsonb(to_char(((e.detail->>'leaseUntil')::timestamptz - '${interval}'::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
                           ELSE e.detail END
        FROM payment_operations p
       WHERE p.id = e.operation_id AND p.order_id LIKE '${runId}-%';
      ALTER TABLE payment_operation_events ENABLE TRIGGER payment_operation_events_append_only;`);
    // The watches after a re-issue: what they list from, and when they look.
    await scoped(
      `UPDATE payment_operation_watches w
          SET watched_from = watched_from - '${interval}'::interval, reissued_at = reissued_at - '${interval}'::interval,
              final_check_at = final_check_at - '${interval}'::interval, next_check_at = next_check_at - '${interval}'::interval
         FROM payment_operations p WHERE p.id = w.operation_id AND p.order_id = ANY($1)`,
    );
    // …and Stripe's: its PaymentIntents were created that much earlier too (List filters on `created`).
    fake.ageRecords(intervalMs(interval));
  };
  const expireLeases = () =>
    scoped(
      `UPDATE payment_operations SET lease_until = now() - interval '1 millisecond', next_attempt_at = least(next_attempt_at, now())
        WHERE order_id = ANY($1) AND lease_token IS NOT NULL AND status IN ('pending', 'unknown')`,
    );
  const backoffElapses = () =>
    scoped(
      `UPDATE payment_operations SET next_attempt_at = now()
        WHERE order_id = ANY($1) AND status IN ('pending', 'unknown') AND review_reason IS NULL AND next_attempt_at > now()`,
    );
  const windowPasses = async () => {
    // Nothing is in flight for a day: let parked requests finish first, then a day passes for all.
    await parking.releaseAll();
    await shiftTime('24 hours');
    fake.pruneKeys();
  };

  /** A worker that dies or stalls. `parked` resolves once it died, stalled, or finished without a call. */
  const worker = (via: 'deliver' | 'reconcile' | { refund: RefundInput } | { authorization: AuthorizationInput }, order: ChargeInput, dbStatements: number | null, mode: GatewayMode, real = world.gateway) => {
    const gateway = new ModelGateway(real, fake, mode, parking);
    const e = new ChargeEngine({
      db: dbStatements === null ? db : dyingDb(db, dbStatements),
      gateway,
      actor: `model-${mode.kind}`,
      random: () => 0.5,
      policy,
    });
    if (via === 'deliver') sent.add(order.orderId);
    // A stalled reconciler takes one operation, so that exactly one call stalls.
    const running: Promise<unknown> =
      via === 'deliver'
        ? e.processRequests([order])
        : via === 'reconcile'
          ? e.reconcileDue(dbStatements === null ? 1 : 10)
          : 'refund' in via
            ? e.processRefund(via.refund)
            : e.processAuthorization(via.authorization);
    return { running, parked: Promise.race([gateway.parked.promise, running.then(() => {}, () => {})]) };
  };

  for (const [step, command] of run.commands.entries()) {
    trace?.(`#${step} ${JSON.stringify(command)}`);
    switch (command.t) {
      case 'deliver':
        await deliver(command.orders.map(orderAt));
        break;
      case 'concurrent': {
        const order = orderAt(command.order);
        const engines = Array.from({ length: command.n }, () => new ChargeEngine({ db, gateway: world.gateway, actor: 'model-concurrent', random: () => 0.5, policy }));
        await Promise.all(engines.map((e) => deliver([order], e)));
        break;
      }
      case 'race':
        await Promise.all([deliver([orderAt(command.order)]), live('reconcileDue', engine.reconcileDue(10))]);
        break;
      case 'conflict': {
        const order = orderAt(command.order);
        const other = { ...order, amount: order.amount === 1 ? 2 : order.amount - 1 };
        await deliver([other]);
        break;
      }
      case 'crash': {
        const order = orderAt(command.order);
        const [statements, mode] = crashAt(command.point);
        try {
          await worker(command.via, order, statements, mode).running;
          // A killed worker that found nothing to claim never reaches the second statement: fine.
        } catch (error) {
          // The engine may wrap the death (OutcomesNotRecordedError, with the killed write as its cause).
          if (!killedBy(error)) problems.push(`crashed worker failed otherwise: ${String(error)}`);
        }
        break;
      }
      case 'stall': {
        const order = orderAt(command.order);
        const mode: GatewayMode = command.point === 'in_flight' ? { kind: 'stall_in_flight' } : { kind: 'stall_after_answer' };
        const real = command.point === 'in_flight' ? world.patientGateway : world.gateway;
        const stalled = worker(command.via, order, null, mode, real);
        parking.workers.push(
          stalled.running.then(
            () => {
              if (command.via === 'deliver') acked.add(order.orderId);
            },
            (error: unknown) => problems.push(`stalled worker threw ${String(error)}`),
          ),
        );
        // The next command starts only once the worker stands where it was told to stall.
        await stalled.parked;
        break;
      }
      case 'release':
        await parking.releaseAll();
        break;
      case 'expire_leases':
        await expireLeases();
        break;
      case 'backoff_elapses':
        await backoffElapses();
        break;
      case 'reconcile':
        // The sweep: due operations, then due watches.
        await live('reconcileDue', engine.reconcileDue(command.limit));
        await watch(command.limit);
        break;
      case 'commit_late':
        commitLate(orderAt(command.order).orderId);
        break;
      case 'fault': {
        const order = orderAt(command.order);
        const operationId = await operationIdOf(order);
        const endpoint = command.endpoint === 'any' ? undefined : command.endpoint;
        if (endpoint !== undefined && !faultCanTarget(command.kind, endpoint)) break;
        // By operation once it exists (then searches match too), else by order (creates, retrieves).
        // A list is asked by customer, not by operation. A refund endpoint: the order's refunds (a
        // refund create names the order in its metadata; a refund retrieve or list, by its PaymentIntent's).
        const match: FaultMatch =
          endpoint === 'list'
            ? { endpoint, customerId: order.customerId }
            : endpoint?.startsWith('refund_')
              ? { endpoint, orderId: order.orderId }
              : endpoint === 'capture' || endpoint === 'cancel'
                ? { endpoint }
              : { ...(operationId ? { operationId } : { orderId: order.orderId }), ...(endpoint ? { endpoint } : {}) };
        fake.injectFault(match, command.kind, command.times);
        break;
      }
      case 'search_lag':
        fake.setSearchLag(command.lagging ? 10 * DAY : 0);
        break;
      case 'early_search_time':
        await shiftTime('11 minutes');
        break;
      case 'evidence_time':
        await shiftTime('16 minutes');
        break;
      case 'window_passes':
        await windowPasses();
        break;
      case 'settle':
        settleOpen(orderAt(command.order).orderId, command.status);
        break;
      case 'stripe_event': {
        if (!eventsOn) break;
        for (const pi of fake.paymentIntents({ orderId: orderAt(command.order).orderId })) {
          const status = command.snapshot === 'current' ? pi.status : 'processing';
          const type = paymentIntentEventType(status);
          if (!type) continue;
          const read = readStripeEvent(makeStripeEvent(type, { ...paymentIntentJson(pi), status }));
          if (!read.ok) continue;
          for (let i = 0; i < command.copies; i++) {
            await live('stripe event', recordAndApply(read.event, 'webhook', { db, applier: command.inline ? applier : null, publisher: null }));
          }
        }
        break;
      }
      case 'apply_inbox':
        if (eventsOn) await live('applyDue', applier.applyDue());
        break;
      case 'refund': {
        const i = command.order % orders.length;
        const b = book[i]!;
        if (command.afterCharge && !sent.has(orders[i]!.orderId)) await deliver([orders[i]!]);
        let ask: AskedRefund;
        if (command.pick !== 'new' && b.asked.length > 0) {
          // An earlier refund id: one that was accepted when there is one (a conflict needs it), else any asked.
          const pool = b.accepted.size > 0 ? [...b.accepted.values()].map(({ refundId, amount, reason }) => ({ refundId, amount, reason })) : b.asked;
          const earlier = pool[['partial', 'rest', 'full', 'over'].indexOf(command.size) % pool.length]!;
          ask = command.pick === 'repeat' ? earlier : { ...earlier, amount: earlier.amount === 1 ? 2 : earlier.amount - 1 };
        } else {
          // Sized against what is left as the model sees it (the oracle still judges the request itself).
          const charged = orders[i]!.amount;
          const held = (await acceptedNow(i)).filter(holdsMoney).reduce((sum, r) => sum + r.amount, 0);
          const left = Math.max(0, charged - held);
          const amount = { partial: Math.max(1, Math.floor(left / 3)), rest: Math.max(1, left), full: charged, over: left + 1 }[command.size];
          ask = { refundId: `rf${b.next++}`, amount, reason: command.reason };
          b.asked.push(ask);
        }
        await requestRefund(i, ask, command.crash);
        break;
      }
      case 'settle_refund':
        for (const r of fake.refunds({ orderId: orderAt(command.order).orderId })) if (r.status === 'pending') fake.settleRefund(r.id, command.status);
        break;
      case 'duplicate': {
        const i = command.order % orders.length;
        const order = orders[i]!;
        const charge = await chargeOf(order);
        if (charge?.status !== 'succeeded') break;
        const key = `stray-${randomUUID()}`;
        book[i]!.strayKeys.add(key);
        duplicates += 1;
        // Stripe's documented create (POST /v1/payment_intents, confirm): the fake has no back door for
        // this, nor needs one. A scripted fault may meet it; what it made is found by its key.
        await strayStripe.paymentIntents
          .create(
            {
              // What the charge operation charged (a `conflict` command may have made it differ from the
              // model's first idea of the order): a second charge of the order. A PaymentIntent of another
              // amount is money no rule explains — a contradiction for a human, never refunded by the
              // remedy (judgeDuplicateCharge; docs/decisions.md).
              amount: charge.amount,
              currency: order.currency,
              customer: order.customerId,
              payment_method: 'pm_card_visa',
              confirm: true,
              off_session: true,
              metadata: command.ours ? { operation_id: charge.id, order_id: order.orderId } : { order_id: order.orderId },
            },
            { idempotencyKey: key },
          )
          .catch(() => {});
        break;
      }
      case 'duplicate_evidence':
        await deliverDuplicateEvidence(command.order % orders.length, extrasOf(command.order % orders.length), command.via, command.copies);
        break;
      case 'refund_fails_after_success': {
        // One of ours: a producer refund the model saw accepted (not the remedy's), that Stripe holds succeeded.
        const held = orders.flatMap((_, k) => {
          const i = (command.order + k) % orders.length;
          const ours = new Set([...book[i]!.accepted.values()].map((a) => a.operationId));
          return fake.refunds({ orderId: orders[i]!.orderId }).filter((r) => r.status === 'succeeded' && ours.has(r.metadata.operation_id ?? '')).map((r) => ({ i, id: r.id }));
        });
        if (held.length === 0) break;
        const { i, id } = held[command.pick % held.length]!;
        const b = book[i]!;
        fake.settleRefund(id, 'failed');
        failedAfterSuccessMade += 1;
        const now = fake.refunds({ orderId: orders[i]!.orderId }).find((r) => r.id === id)!;
        const json = makeStripeEvent(command.type, refundJson(now), command.type === 'refund.updated' ? { previousAttributes: { status: 'succeeded' } } : {});
        const read = readStripeEvent(json);
        if (!read.ok) {
          problems.push(`the fake's ${command.type} of ${id} does not read: ${read.reason}`);
          break;
        }
        b.failedAfterSuccess.set(id, read.event);
        await deliverRefundEvent(read.event, command.copies, command.inline);
        if (command.reask) {
          const ask: AskedRefund = { refundId: `rf${b.next++}`, amount: now.amount, reason: null };
          b.asked.push(ask);
          await requestRefund(i, ask, null);
        }
        break;
      }
      case 'capture': {
        const i = command.order % orders.length;
        if (!sent.has(orders[i]!.orderId)) await deliver([orders[i]!]);
        const authorized = orders[i]!.amount;
        const amount = { all: undefined, full: authorized, partial: Math.max(1, Math.floor(authorized / 3)), over: authorized + 1 }[command.size];
        await requestSettlement(i, { kind: 'capture', ...(amount !== undefined ? { amount } : {}) }, command.crash);
        break;
      }
      case 'cancel_authorization': {
        const i = command.order % orders.length;
        if (!sent.has(orders[i]!.orderId)) await deliver([orders[i]!]);
        await requestSettlement(i, { kind: 'cancel_authorization' }, command.crash);
        break;
      }
      case 'authorization_expires': {
        const order = orderAt(command.order);
        // Past Stripe's 7 days for this hold only (the fake cancels it, `automatic`, at its next look).
        for (const pi of fake.paymentIntents({ orderId: order.orderId })) if (pi.status === 'requires_capture') fake.ageAuthorization(pi.id, 8 * DAY);
        if (command.check) await expiryCheck();
        break;
      }
      case 'refund_authorized':
        await requestManualRefund(command.order % orders.length, command.size);
        break;
      case 'refund_event':
        for (const b of book) for (const event of b.failedAfterSuccess.values()) await deliverRefundEvent(event, command.copies, command.inline);
        break;
    }
    if (trace) {
      const ops = await scoped(`SELECT kind, status, key_generation, review_reason, external_id FROM payment_operations WHERE order_id = ANY($1) ORDER BY created_at`);
      trace(`   → ${JSON.stringify(ops.rows)}`);
    }
  }

  /**
   * Without Stripe events, a refund Stripe failed after it succeeded is one the product cannot know of
   * (polling never looks at a final refund again): its operation stays succeeded and unmarked, still
   * counted. The checker, judging the ledger against Stripe's refunds, must then say so — and only so:
   * `succeeded_without_refund` on exactly that operation (its Refund is `failed`, no fact recorded),
   * and `net_amount` on its order's charge only (Stripe kept more than the ledger thinks). Those are
   * the oracle's expected findings, set aside (and required); every other violation stands.
   */
  const expectBlindness = async (r: InvariantReport): Promise<InvariantReport> => {
    if (eventsOn) return r;
    const blind = new Map<string, string>(); // refund operation id → its order
    for (const [i, b] of book.entries()) {
      if (b.failedAfterSuccess.size === 0) continue;
      for (const row of await refundRowsOf(orders[i]!)) {
        if (row.status === 'succeeded' && row.externalId !== null && b.failedAfterSuccess.has(row.externalId)) blind.set(row.id, orders[i]!.orderId);
      }
    }
    if (blind.size === 0) return r;
    const blindOrders = new Set(blind.values());
    const expected = (v: InvariantReport['violations'][number]) =>
      (v.kind === 'succeeded_without_refund' && v.operationId !== undefined && blind.has(v.operationId)) ||
      (v.kind === 'net_amount' && v.orderId !== undefined && blindOrders.has(v.orderId));
    for (const id of blind.keys()) {
      if (!r.violations.some((v) => v.kind === 'succeeded_without_refund' && v.operationId === id)) {
        problems.push(`refund operation ${id}: Stripe failed its Refund after it succeeded and no event told it, yet the checker does not report succeeded_without_refund`);
      }
    }
    const violations = r.violations.filter((v) => !expected(v));
    const violationsByKind: Partial<Record<InvariantReport['violations'][number]['kind'], number>> = {};
    for (const v of violations) violationsByKind[v.kind] = (violationsByKind[v.kind] ?? 0) + 1;
    return { ...r, ok: violations.length === 0, violations, violationsByKind };
  };

  // ── Heal: faults stop, Stripe settles, SQS redelivers what was never acknowledged, the reconciler
  // runs until nothing changes; when only time can decide, time moves on. ──
  await parking.releaseAll();
  fake.setSearchLag(0);
  for (const order of orders) if (sent.has(order.orderId) && !acked.has(order.orderId)) await deliver([order]);
  for (const [i, b] of book.entries()) for (const ask of [...b.unacked.values()]) await requestRefund(i, ask, null);
  for (const { i, ask } of unackedSettlements.splice(0)) await requestSettlement(i, ask, null);
  // Stripe retries a webhook until it is acknowledged: every refund it failed after success is told at
  // least once (recorded again if it was: the inbox keeps one row per event id; the sweep below applies it).
  for (const b of book) for (const event of b.failedAfterSuccess.values()) await deliverRefundEvent(event, 1, false);
  // Evidence of every extra PaymentIntent reaches the product at least once (Stripe's event when the run
  // has events and the PaymentIntent names our operation; an operator otherwise — the event of one
  // naming no operation is "foreign" to the applier, so a person acts on what Stripe shows).
  const evidenced = new Set<string>();
  const evidenceDue = async () => {
    for (const [i] of book.entries()) {
      for (const pi of extrasOf(i)) {
        if (evidenced.has(pi.id)) continue;
        evidenced.add(pi.id);
        await deliverDuplicateEvidence(i, [pi], eventsOn && pi.metadata.operation_id !== undefined ? 'event' : 'operator', 1, false);
      }
      // A late charge after a re-issue: Stripe's event tells it in runs with events; in runs without,
      // nobody does — no operator either: the watch after the re-issue must find it by itself.
      if (!eventsOn) continue;
      for (const pi of await lateChargesOf(i)) {
        if (evidenced.has(pi.id)) continue;
        evidenced.add(pi.id);
        await deliverDuplicateEvidence(i, [pi], 'event', 1, false);
      }
    }
  };
  const snapshot = async () =>
    JSON.stringify((await scoped(`SELECT id, status, external_id, review_reason FROM payment_operations WHERE order_id = ANY($1) ORDER BY id`)).rows);
  const watchesOpen = async () =>
    (await scoped(`SELECT 1 FROM payment_operation_watches w JOIN payment_operations p ON p.id = w.operation_id WHERE p.order_id = ANY($1) AND w.next_check_at IS NOT NULL`)).rowCount !== 0;
  const allDecided = async () =>
    (await scoped(`SELECT 1 FROM payment_operations WHERE order_id = ANY($1) AND status IN ('pending','unknown') AND review_reason IS NULL`)).rowCount === 0;
  // The List settle delay, then proofs of absence 16 minutes apart (a re-issue needs two; a re-issued
  // generation may need two more), then the early search, the key window, the unsettled review — a
  // card's (7 days), then a SEPA debit's (pm_fake_processing: 24 days, DEFAULT_POLICY).
  const TIME_STEPS = ['3 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '11 minutes', '24 hours', '8 days', '17 days'];
  let timeSteps = 0;
  let healRounds = 0;
  for (; healRounds < 60; healRounds++) {
    if (run.healSettle !== 'leave') settleOpen(null, run.healSettle);
    // Pending refunds finish — succeed, or (with the runs that cancel what is open) fail or are
    // canceled; then every extra PaymentIntent that charged by now has had its evidence delivered.
    const refundEnd: RefundSettleStatus = run.healSettle === 'succeeded' ? 'succeeded' : run.healSettle === 'canceled' ? 'failed' : 'canceled';
    for (const r of fake.refunds()) if (r.status === 'pending' && orderIds.includes(r.paymentIntentOrderId ?? '')) fake.settleRefund(r.id, refundEnd);
    await evidenceDue();
    await expireLeases();
    await backoffElapses();
    const before = await snapshot();
    const lastSeq = fake.requests().at(-1)?.seq ?? 0;
    await live('reconcileDue(heal)', engine.reconcileDue(50));
    await watch(50);
    // The sweep's expiry check: holds the model's clock let lapse are recorded as expired.
    await expiryCheck();
    if (eventsOn) {
      // The inbox sweep too; an event waiting for a lease the heal expired is due now.
      await db.query(`UPDATE stripe_events SET next_attempt_at = now() WHERE applied_at IS NULL`);
      await live('applyDue(heal)', applier.applyDue());
    }
    // Quiet: no state changed and no scripted fault fired (left-over faults are used up first).
    const faulted = fake.requests(lastSeq).some((r) => r.fault !== null);
    if (before !== (await snapshot()) || faulted) continue;
    if (await allDecided()) {
      // Every operation decided: what Stripe still owes of the late commits comes now — after the
      // re-issues it allowed, the case only the watch (or an event) can see.
      if (fake.stats().lateCommitsPending > 0) {
        for (const order of orders) commitLate(order.orderId);
        continue;
      }
      // …and the watches of the run have taken their last looks (time moves on until they have).
      if (!(await watchesOpen())) break;
    }
    if (timeSteps === TIME_STEPS.length) break;
    const interval = TIME_STEPS[timeSteps++]!;
    await shiftTime(interval);
    if (interval === '24 hours') fake.pruneKeys();
  }

  const checked = await checkInvariants({
    db,
    paymentIntents: fake.paymentIntents(),
    // Given refunds, the checker judges the net amount per order (and a duplicate refunded in full is no double charge).
    refunds: fake.refunds(),
    // The manual-capture orders too: the checker judges authorizations (held, captured, released) as
    // local/invariants.ts knows them, beside the authorization oracle below.
    sentOrderIds: [...sent],
    sentRefunds: [...mustHaveOperation.values()],
    orderIds,
    requireQuiescent: true,
  });
  const report = await expectBlindness(checked);
  // The fake counts double charges by operation; the extra PaymentIntents the model made itself (the
  // duplicate remedy's cases, judged by the net amount) are left out of that count.
  const stray = new Set(book.flatMap((b) => [...b.strayKeys]));
  // Late charges after a re-issue are judged by their money (the checker, the oracle's remedies), not counted here.
  const late = new Set<string>();
  for (const [i] of orders.entries()) for (const pi of await lateChargesOf(i)) late.add(pi.id);
  // A late create Stripe never settled (processing: the run's healSettle 'leave') is no charge a
  // machine may refund: where a watch followed the re-issue, it ends by telling a person — an open
  // finding naming the PaymentIntent — and must have.
  const lateUnsettled = new Map<string, string>(); // PaymentIntent → its operation
  // A late authorization (manual capture) holds the customer's funds until Stripe lets it expire: the
  // checker's held_twice judges that a person was told (an open finding), so its finding is expected.
  const lateHeld = new Set<string>();
  for (const [i] of orders.entries()) {
    for (const pi of await lateCreatesOf(i)) {
      if (pi.status === 'processing' || pi.status === 'requires_action') lateUnsettled.set(pi.id, pi.metadata.operation_id!);
      if (heldAnAuthorization(pi)) lateHeld.add(pi.id);
    }
  }
  const untold = await db.query<{ id: string }>(
    `SELECT u.id FROM unnest($1::text[], $2::uuid[]) AS u(id, operation_id)
      WHERE EXISTS (SELECT 1 FROM payment_operation_watches w WHERE w.operation_id = u.operation_id)
        AND NOT EXISTS (SELECT 1 FROM stripe_event_findings f WHERE f.payment_intent_id = u.id AND f.resolved_at IS NULL)`,
    [[...lateUnsettled.keys()], [...lateUnsettled.values()]],
  );
  for (const { id } of untold.rows) problems.push(`late PaymentIntent ${id} left unsettled after a re-issue, watched, and nobody told`);
  const pipelineCharges = fake.paymentIntents().filter((pi) => pi.status === 'succeeded' && !stray.has(pi.idempotencyKey ?? '') && !late.has(pi.id) && pi.metadata.operation_id !== undefined);
  const twice = pipelineCharges.length - new Set(pipelineCharges.map((pi) => pi.metadata.operation_id)).size;
  if (twice !== 0) problems.push(`fake Stripe holds ${twice} second succeeded PaymentIntent(s) of one operation`);
  if (eventsOn) {
    // Events drawn from the truth can never contradict a correct ledger, nor name an unknown operation.
    // The extra PaymentIntents the model made are contradictions by design: their findings are expected.
    // So are those about an operation that ended waiting for a human (the checker's *_awaiting_review
    // warnings judge its money): there a finding is how the person is told — e.g. a create of the last
    // key generation Stripe committed after the re-issues were spent and absence proven.
    const ids = fake.paymentIntents().filter((pi) => orderIds.includes(pi.metadata.order_id ?? '') && !stray.has(pi.idempotencyKey ?? '')).map((pi) => pi.id);
    const findings = await db.query<{ kind: string; reason: string }>(
      `SELECT f.kind, f.reason FROM stripe_event_findings f
         LEFT JOIN payment_operations p ON p.id = f.operation_id
        WHERE f.payment_intent_id = ANY($1) AND p.review_reason IS NULL`,
      [ids.filter((id) => !late.has(id) && !lateUnsettled.has(id) && !lateHeld.has(id))],
    );
    for (const f of findings.rows) problems.push(`stripe event finding ${f.kind}: ${f.reason}`);
    const left = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM stripe_events WHERE applied_at IS NULL AND object_id = ANY($1)`,
      [[...ids, ...book.flatMap((b) => [...b.failedAfterSuccess.keys()])]],
    );
    if ((left.rows[0]?.n ?? 0) > 0) problems.push(`${left.rows[0]!.n} stripe event(s) never applied after heal`);
    // A refund Stripe failed after success, told: the fact (failed_after_success), or — its operation still
    // open when the event came — settled failed, or a repeat (stale). Never a contradiction: the event is the truth.
    const told = await db.query<{ object_id: string; outcome: string }>(
      `SELECT object_id, outcome FROM stripe_events WHERE object_id = ANY($1) AND outcome NOT IN ('failed_after_success', 'settled', 'stale')`,
      [book.flatMap((b) => [...b.failedAfterSuccess.keys()])],
    );
    for (const r of told.rows) problems.push(`the event of Refund ${r.object_id}, failed after it succeeded, was applied as ${r.outcome}`);
  }
  // "Failed" must rest on evidence at Stripe: in this model nothing is refused before execution, so a
  // failed operation has a declined / canceled PaymentIntent of its own.
  const failed = await scoped(`SELECT id, external_id FROM payment_operations WHERE order_id = ANY($1) AND kind = 'charge' AND status = 'failed'`);
  for (const row of failed.rows as { id: string; external_id: string | null }[]) {
    const evidence = fake.paymentIntents({ operationId: row.id }).filter((pi) => pi.status === 'requires_payment_method' || pi.status === 'canceled');
    if (evidence.length === 0) problems.push(`operation ${row.id} failed without a declined or canceled PaymentIntent`);
  }
  const lists = fake.stats().requests.list;
  const reissued = await scoped(
    `SELECT count(*)::int AS n FROM payment_operation_events e JOIN payment_operations p ON p.id = e.operation_id
      WHERE p.order_id = ANY($1) AND e.action = 'auto_reissued'`,
  );
  const autoReissues = (reissued.rows[0] as { n: number }).n;
  // The refund oracle judges every order's refunds and money against Stripe's ledger.
  const refundEnds: Partial<Record<RefundEnd, number>> = {};
  const authorizationEnds: Record<string, number> = {};
  for (const [i, order] of orders.entries()) {
    const charge = await chargeOf(order);
    const lateCharges = await lateChargesOf(i);
    // A late charge of an operation that failed (its re-issued create was declined): no machine refunds
    // an order it announced failed; a person must be told — an open finding naming the PaymentIntent.
    if (charge?.status === 'failed') {
      for (const pi of lateCharges) {
        const told = await db.query(`SELECT 1 FROM stripe_event_findings WHERE payment_intent_id = $1 AND resolved_at IS NULL`, [pi.id]);
        if (told.rowCount === 0) problems.push(`order ${order.orderId}: PaymentIntent ${pi.id} charged after the re-issue of an operation that failed, and no finding tells it`);
      }
    }
    const chargeRow = (await db.query<{ id: string; status: OperationStatus; capture_method: string | null; amount: number; external_id: string | null }>(
      `SELECT id::text, status, capture_method, amount::int, external_id FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`,
      [order.orderId],
    )).rows[0];
    const settlements = await settlementsOf(order);
    problems.push(
      ...judgeAuthorization({
        orderId: order.orderId,
        charge: chargeRow ? { id: chargeRow.id, status: chargeRow.status, manual: chargeRow.capture_method === 'manual', amount: chargeRow.amount, externalId: chargeRow.external_id } : null,
        settlements,
        paymentIntent: chargeRow?.external_id ? (fake.paymentIntents({ orderId: order.orderId }).find((pi) => pi.id === chargeRow.external_id) ?? null) : null,
        refunds: fake.refunds({ orderId: order.orderId }),
      }),
    );
    if (manualOrderIds.has(order.orderId)) {
      const end = chargeRow?.status !== 'succeeded' ? `charge ${chargeRow?.status ?? 'none'}` : settlements[0] ? `${settlements[0].kind}${settlements[0].cancellationReason ? ` (${settlements[0].cancellationReason})` : ''} ${settlements[0].status}` : 'held';
      authorizationEnds[end] = (authorizationEnds[end] ?? 0) + 1;
      continue;
    }
    const judged = judgeOrder({
      orderId: order.orderId,
      charge: charge && { id: charge.id, status: charge.status, externalId: charge.external_id, amount: charge.amount, inReview: charge.review_reason !== null },
      accepted: [...book[i]!.accepted.values()],
      extras: [...extrasOf(i), ...(charge?.status === 'succeeded' ? lateCharges : [])].map((pi) => pi.id),
      toldLate: charge?.status === 'failed' ? lateCharges.map((pi) => pi.id) : [],
      refundRows: await refundRowsOf(order),
      paymentIntents: fake.paymentIntents({ orderId: order.orderId }),
      refunds: fake.refunds({ orderId: order.orderId }),
      failedAfterSuccess: new Set(book[i]!.failedAfterSuccess.keys()),
      events: eventsOn,
    });
    problems.push(...judged.problems);
    for (const end of judged.ends) refundEnds[end] = (refundEnds[end] ?? 0) + 1;
  }
  // Leave nothing claimable behind for later runs sharing the database.
  // …nor a held authorization for their expiry checks (oldest first, a page at a time: a hundred left
  // by earlier runs would hide a later run's own): its first send far in the future, never lapsed.
  // A final row cannot change (migrations/001's guard): lifted for this one transaction, as shiftTime lifts the trail's.
  if (manualOrderIds.size > 0) {
    await db.query(`
      ALTER TABLE payment_operations DISABLE TRIGGER payment_operations_guard;
      UPDATE payment_operations SET first_attempted_at = now() + interval '100 years'
       WHERE order_id LIKE '${runId}-%' AND kind = 'charge' AND capture_method = 'manual' AND status = 'succeeded';
      ALTER TABLE payment_operations ENABLE TRIGGER payment_operations_guard;`);
  }
  await scoped(`UPDATE payment_operations SET review_reason = 'model: retired after its run' WHERE order_id = ANY($1) AND status IN ('pending','unknown') AND review_reason IS NULL`);
  return {
    report, problems, orderIds, healRounds, timeSteps, lists, autoReissues, refundVerdicts, refundEnds, refundsByCharge, duplicates,
    failedAfterSuccess: failedAfterSuccessMade, requestsAfterFailedRefund,
    lateCommits: lateCommitsMade, lateChargesAfterReissue: late.size,
    watchLooks: watchTally.looks, watchRemedies: watchTally.remedies, watchFindings: watchTally.findings,
    authorizationVerdicts, manualRefundVerdicts, authorizationEnds,
  };
}
