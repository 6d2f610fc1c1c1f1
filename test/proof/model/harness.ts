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
import { randomUUID } from 'node:crypto';
import type { Db } from '../../../lambdas/payments/db.ts';
import { ChargeEngine } from '../../../lambdas/payments/engine.ts';
import type {
  CreatePaymentIntentRequest,
  CreateRefundRequest,
  GatewayResult,
  ListAnswer,
  ListRequest,
  PaymentGateway,
  RefundView,
  SearchPaymentIntentsRequest,
} from '../../../lambdas/payments/gateway.ts';
import type { ChargeInput, PaymentIntentView } from '../../../lambdas/payments/types.ts';
import { faultCanTarget } from '../../../local/fake-stripe/faults.ts';
import type { FakeStripe, FaultKind, FaultMatch, HoldHandle, SettleStatus } from '../../../local/fake-stripe/types.ts';
import { checkInvariants, type InvariantReport } from '../../../local/invariants.ts';
import { StripeEventApplier } from '../../../lambdas/payments/event-applier.ts';
import { readStripeEvent } from '../../../lambdas/payments/event-decisions.ts';
import type { TransactionalDb } from '../../../lambdas/payments/inbox-store.ts';
import { recordAndApply } from '../../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent, paymentIntentEventType, paymentIntentJson } from '../../../local/fake-stripe/webhooks.ts';

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
  /** A scripted fault for the order's next matching request(s). */
  | { readonly t: 'fault'; readonly order: number; readonly kind: FaultKind; readonly times: number; readonly endpoint: 'any' | 'create' | 'retrieve' | 'search' | 'list' }
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
  /** Stripe (or the customer) finishes the order's processing / requires_action PaymentIntents. */
  | { readonly t: 'settle'; readonly order: number; readonly status: SettleStatus }
  /**
   * Stripe tells (only when the run has `events`): an event for each of the order's PaymentIntents,
   * as it is now or an older `processing` snapshot, delivered `copies` times, applied at once
   * (the webhook's inline apply) — or only recorded, for the inbox sweep to apply.
   */
  | { readonly t: 'stripe_event'; readonly order: number; readonly snapshot: 'current' | 'old_processing'; readonly copies: number; readonly inline: boolean }
  /** The reconciler's pass over the inbox. */
  | { readonly t: 'apply_inbox' };

export interface OrderSpec {
  readonly paymentMethod: string;
  readonly amount: number;
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
  | { readonly list: ListRequest };

function holdMatch(target: Target): FaultMatch {
  if ('create' in target) return { endpoint: 'create', idempotencyKey: target.create.idempotencyKey };
  if ('retrieve' in target) return { endpoint: 'retrieve', paymentIntentId: target.retrieve };
  if ('list' in target) return { endpoint: 'list', ...(target.list.scope.customer ? { customerId: target.list.scope.customer } : {}) };
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
    // The model has no refund commands yet: refunds pass straight through.
    return this.#real.createRefund(request);
  }

  retrieveRefund(id: string): Promise<GatewayResult<RefundView>> {
    return this.#real.retrieveRefund(id);
  }

  listRefunds(request: ListRequest): Promise<GatewayResult<ListAnswer<RefundView>>> {
    return this.#real.listRefunds(request);
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
  }));
  const orderIds = orders.map((o) => o.orderId);
  const parking = new Parking();
  const problems: string[] = [];
  const sent = new Set<string>();
  const acked = new Set<string>();
  const policy = MODEL_POLICY;
  const engine = new ChargeEngine({ db, gateway: world.gateway, actor: 'model', random: () => 0.5, policy });
  const orderAt = (i: number) => orders[i % orders.length]!;
  const applier = new StripeEventApplier({ db: db as TransactionalDb, gateway: world.gateway, actor: 'model-events', random: () => 0.5, policy });
  const eventsOn = run.events ?? false;

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
    const { rows } = await db.query<{ id: string }>(`SELECT id FROM payment_operations WHERE order_id = $1`, [order.orderId]);
    return rows[0]?.id ?? null;
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
             detail = CASE WHEN e.detail ? 'provenAt'
                           THEN jsonb_set(e.detail, '{provenAt}', to_jsonb(to_char(((e.detail->>'provenAt')::timestamptz - '${interval}'::interval) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')))
                           ELSE e.detail END
        FROM payment_operations p
       WHERE p.id = e.operation_id AND p.order_id LIKE '${runId}-%';
      ALTER TABLE payment_operation_events ENABLE TRIGGER payment_operation_events_append_only;`);
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
  const worker = (via: 'deliver' | 'reconcile', order: ChargeInput, dbStatements: number | null, mode: GatewayMode, real = world.gateway) => {
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
    const running: Promise<unknown> = via === 'deliver' ? e.processRequests([order]) : e.reconcileDue(dbStatements === null ? 1 : 10);
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
        const [statements, mode]: [number, GatewayMode] =
          command.point === 'before_claim'
            ? [0, { kind: 'normal' }]
            : command.point === 'after_claim'
              ? [1, { kind: 'die_before_call' }]
              : command.point === 'in_flight'
                ? [1, { kind: 'die_in_flight' }]
                : [1, { kind: 'normal' }]; // after_answer: the answer came, the record never reaches the database
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
        await live('reconcileDue', engine.reconcileDue(command.limit));
        break;
      case 'fault': {
        const order = orderAt(command.order);
        const operationId = await operationIdOf(order);
        const endpoint = command.endpoint === 'any' ? undefined : command.endpoint;
        if (endpoint !== undefined && !faultCanTarget(command.kind, endpoint)) break;
        // By operation once it exists (then searches match too), else by order (creates, retrieves).
        // A list is asked by customer, not by operation.
        const match: FaultMatch =
          endpoint === 'list'
            ? { endpoint, customerId: order.customerId }
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
    }
  }

  // ── Heal: faults stop, Stripe settles, SQS redelivers what was never acknowledged, the reconciler
  // runs until nothing changes; when only time can decide, time moves on. ──
  await parking.releaseAll();
  fake.setSearchLag(0);
  for (const order of orders) if (sent.has(order.orderId) && !acked.has(order.orderId)) await deliver([order]);
  const snapshot = async () =>
    JSON.stringify((await scoped(`SELECT id, status, external_id, review_reason FROM payment_operations WHERE order_id = ANY($1) ORDER BY id`)).rows);
  const allDecided = async () =>
    (await scoped(`SELECT 1 FROM payment_operations WHERE order_id = ANY($1) AND status IN ('pending','unknown') AND review_reason IS NULL`)).rowCount === 0;
  // The List settle delay, then proofs of absence 16 minutes apart (a re-issue needs two; a re-issued
  // generation may need two more), then the early search, the key window, the unsettled review.
  const TIME_STEPS = ['3 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '16 minutes', '11 minutes', '24 hours', '8 days'];
  let timeSteps = 0;
  let healRounds = 0;
  for (; healRounds < 60; healRounds++) {
    if (run.healSettle !== 'leave') settleOpen(null, run.healSettle);
    await expireLeases();
    await backoffElapses();
    const before = await snapshot();
    const lastSeq = fake.requests().at(-1)?.seq ?? 0;
    await live('reconcileDue(heal)', engine.reconcileDue(50));
    if (eventsOn) {
      // The inbox sweep too; an event waiting for a lease the heal expired is due now.
      await db.query(`UPDATE stripe_events SET next_attempt_at = now() WHERE applied_at IS NULL`);
      await live('applyDue(heal)', applier.applyDue());
    }
    // Quiet: no state changed and no scripted fault fired (left-over faults are used up first).
    const faulted = fake.requests(lastSeq).some((r) => r.fault !== null);
    if (before !== (await snapshot()) || faulted) continue;
    if (await allDecided()) break;
    if (timeSteps === TIME_STEPS.length) break;
    const interval = TIME_STEPS[timeSteps++]!;
    await shiftTime(interval);
    if (interval === '24 hours') fake.pruneKeys();
  }

  const report = await checkInvariants({
    db,
    paymentIntents: fake.paymentIntents(),
    sentOrderIds: [...sent],
    orderIds,
    requireQuiescent: true,
  });
  if (fake.stats().doubleCharges !== 0) problems.push(`fake Stripe counts ${fake.stats().doubleCharges} double charge(s)`);
  if (eventsOn) {
    // Events drawn from the truth can never contradict a correct ledger, nor name an unknown operation.
    const ids = fake.paymentIntents().filter((pi) => orderIds.includes(pi.metadata.order_id ?? '')).map((pi) => pi.id);
    const findings = await db.query<{ kind: string; reason: string }>('SELECT kind, reason FROM stripe_event_findings WHERE payment_intent_id = ANY($1)', [ids]);
    for (const f of findings.rows) problems.push(`stripe event finding ${f.kind}: ${f.reason}`);
    const left = await db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM stripe_events WHERE applied_at IS NULL AND object_id = ANY($1)`,
      [ids],
    );
    if ((left.rows[0]?.n ?? 0) > 0) problems.push(`${left.rows[0]!.n} stripe event(s) never applied after heal`);
  }
  // "Failed" must rest on evidence at Stripe: in this model nothing is refused before execution, so a
  // failed operation has a declined / canceled PaymentIntent of its own.
  const failed = await scoped(`SELECT id, external_id FROM payment_operations WHERE order_id = ANY($1) AND status = 'failed'`);
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
  // Leave nothing claimable behind for later runs sharing the database.
  await scoped(`UPDATE payment_operations SET review_reason = 'model: retired after its run' WHERE order_id = ANY($1) AND status IN ('pending','unknown') AND review_reason IS NULL`);
  return { report, problems, orderIds, healRounds, timeSteps, lists, autoReissues };
}
