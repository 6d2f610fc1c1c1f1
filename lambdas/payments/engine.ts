// The charge engine: durable operations, one Stripe attempt per claim, outcomes fenced by the lease.
//
//   request ─▶ claim (lease + first_attempted_at) ─▶ Stripe (no transaction open) ─▶ record (fenced)
//              └──────── one round trip ───────┘                                    └─ one round trip ─┘
//
// executeCharge / processRequests / reconcileDue may be called any number of times, concurrently,
// from any number of processes: the lease decides who calls Stripe, the key decides what Stripe
// does with a repeat, and the fence decides whose answer is written.
import { randomUUID } from 'node:crypto';
import type { Db } from './db.ts';
import {
  chooseStep,
  decideCreate,
  decideEarlySearch,
  decideList,
  decidePrecondition,
  decideRetrieve,
  judgeDuplicateCharge,
  type DuplicateVerdict,
  decideSearch,
  DEFAULT_POLICY,
  KIND_RULES,
  listWindow,
  needsEvidence,
  type AttemptStep,
  type DecisionContext,
  type EnginePolicy,
  type EvidenceHistory,
  type Outcome,
  type Step,
  watchTimings,
  withinKeyWindow,
  formatDuration,
} from './decisions.ts';
import { summarizeEvidence } from './evidence.ts';
import { KIND_ADAPTERS } from './kinds.ts';
import { OperationNotFoundError, OrderConflictError, RefundRejectedError } from './errors.ts';
import { OutcomesNotRecordedError, type Execution, type RefundRequestResult, type RequestResult } from './request-results.ts';
import { FailureKind, type GatewayResult, type PaymentGateway } from './gateway.ts';
import {
  claimById,
  claimDue,
  findOperation,
  insertDuplicateRefund,
  loadEvidenceEvents,
  recordOutcomes,
  reissueAfterProof,
  releaseWrite,
  requestAndClaim,
  requestRefundAndClaim,
  type OutcomeWrite,
  type RecordResult,
  type ReissueWrite,
  type RequestRow,
} from './operations-store.ts';
import type { ChargeInput, ClaimedOperation, Operation, PaymentIntentView, RefundInput } from './types.ts';

export interface EngineOptions {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  /** Written into the audit trail: 'charge-handler', 'reconciler', 'operator:alice'. */
  readonly actor?: string;
  readonly policy?: Partial<EnginePolicy>;
  /** Stripe calls in flight at once within one batch or page. */
  readonly concurrency?: number;
  /** Jitter source (tests make it deterministic). */
  readonly random?: () => number;
  /**
   * Called before every Stripe call; resolves when the call may start (a rate limiter). Returning
   * false means "do not start" — the operation is released, untouched, for a later run.
   */
  readonly beforeCall?: (step: Step['kind']) => Promise<boolean> | boolean;
  /**
   * A monotonic clock in ms (tests inject one): how long after its claim a call starts. The key window
   * is checked again right before a create goes out, since a rate limiter or a busy batch may hold it
   * past the window's end after a claim made inside it. Default performance.now.
   */
  readonly now?: () => number;
}

/** A concurrent refund of the same order committed first: the trigger of 007_refunds.sql said so. */
function isRefundRace(error: unknown): boolean {
  const e = error as { code?: unknown; constraint?: unknown };
  return e?.code === '23514' && e.constraint === 'refunds_within_charge';
}

const PARAMETERS = ['amount', 'currency', 'customerId', 'paymentMethod', 'description', 'statementDescriptorSuffix', 'metadata'] as const;

/** Absent, null and an empty metadata object all mean "none"; metadata compares by its sorted entries. */
function parameterValue(input: ChargeInput, field: (typeof PARAMETERS)[number]): unknown {
  const value = input[field];
  if (field === 'metadata') {
    const entries = Object.entries((value as Record<string, string> | null | undefined) ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return entries.length === 0 ? null : JSON.stringify(entries);
  }
  return value ?? null;
}

export function conflictingFields(existing: ChargeInput, requested: ChargeInput): (keyof ChargeInput)[] {
  return PARAMETERS.filter((field) => parameterValue(existing, field) !== parameterValue(requested, field));
}

/** A small bounded-concurrency map that keeps result order. */
export async function mapBounded<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index]!);
    }
  });
  await Promise.all(workers);
  return results;
}

export class ChargeEngine {
  readonly #db: Db;
  readonly #gateway: PaymentGateway;
  readonly #actor: string;
  readonly #policy: EnginePolicy;
  readonly #concurrency: number;
  readonly #random: () => number;
  readonly #publishLeaseMs: number;
  readonly #beforeCall: EngineOptions['beforeCall'];
  readonly #now: () => number;

  constructor(options: EngineOptions) {
    this.#db = options.db;
    this.#gateway = options.gateway;
    this.#actor = options.actor ?? 'engine';
    this.#policy = { ...DEFAULT_POLICY, ...options.policy, backoff: { ...DEFAULT_POLICY.backoff, ...options.policy?.backoff } };
    this.#concurrency = options.concurrency ?? 10;
    this.#random = options.random ?? Math.random;
    this.#publishLeaseMs = this.#policy.publishLeaseMs;
    this.#beforeCall = options.beforeCall;
    this.#now = options.now ?? (() => performance.now());
  }

  get policy(): EnginePolicy {
    return this.#policy;
  }

  /**
   * Make the operation durable before any side effect. The same order twice gives the same id; the
   * same order with other parameters is an OrderConflictError and never a second operation.
   */
  async requestCharge(input: ChargeInput): Promise<string> {
    const [result] = await this.processRequests([input], { execute: false });
    if (result!.conflict) throw result!.conflict;
    return result!.operationId;
  }

  /**
   * Attempt the operation once if it is claimable. Safe to call any number of times, concurrently:
   * a final operation is returned as it is and Stripe is not called again.
   */
  async executeCharge(operationId: string): Promise<Execution> {
    const token = randomUUID();
    const claimSent = this.#now();
    const found = await claimById(this.#db, operationId, token, this.#policy.leaseMs, this.#actor);
    if (!found) throw new OperationNotFoundError(operationId);
    if (!found.claimed) return skipped(found.operation);
    const [execution] = await this.#executeClaimed([found.claimed], undefined, claimSent);
    return execution!;
  }

  /**
   * The batch path of the charge handler: every request made durable and (when `execute`) claimed in
   * one round trip, the Stripe calls made concurrently, every outcome recorded in one round trip.
   * Repeats of one order inside the batch share one operation and cause at most one call.
   * `canStart` is asked before each Stripe call (the handler's remaining-time check).
   * Throws before anything is durable (the request statement failed), or OutcomesNotRecordedError
   * when every request is durable but the outcomes could not be written.
   */
  async processRequests(
    inputs: readonly ChargeInput[],
    options: { execute?: boolean; canStart?: () => boolean } = {},
  ): Promise<RequestResult[]> {
    const execute = options.execute ?? true;
    const firstIndexOfOrder = new Map<string, number>();
    const distinct: ChargeInput[] = [];
    for (const input of inputs) {
      if (!firstIndexOfOrder.has(input.orderId)) {
        firstIndexOfOrder.set(input.orderId, distinct.length);
        distinct.push(input);
      }
    }
    // Claim only when there is time to use the claim: a claim starts the key window.
    const claim = execute && (options.canStart?.() ?? true);
    const token = randomUUID();
    const rows = new Map<number, RequestRow>();
    let missing = distinct.map((input, index) => ({ input, index }));
    const claimSent = this.#now();
    for (let round = 0; missing.length > 0; round++) {
      if (round === 5) throw new Error(`could not read back ${missing.length} operation(s) after concurrent inserts`);
      const got = await requestAndClaim(this.#db, missing.map(({ input }) => ({ input, claim })), token, this.#policy.leaseMs, this.#actor);
      const stillMissing: typeof missing = [];
      missing.forEach((item, position) => {
        const row = got.get(position);
        if (row) rows.set(item.index, row);
        else stillMissing.push(item);
      });
      missing = stillMissing;
    }

    const results = (executions: ReadonlyMap<string, Execution> | null): RequestResult[] =>
      inputs.map((input) => {
        const row = rows.get(firstIndexOfOrder.get(input.orderId)!)!;
        const fields = conflictingFields(row.operation, input);
        if (fields.length > 0) {
          return { input, operationId: row.operation.id, conflict: new OrderConflictError(row.operation, input, fields), execution: null };
        }
        const execution = executions?.get(row.operation.id) ?? (execute && executions ? skipped(row.operation) : null);
        return { input, operationId: row.operation.id, conflict: null, execution };
      });

    // From here on every request is durable, whatever happens to the outcomes.
    const claimed = [...rows.values()].flatMap((row) => (row.claimed ? [row.claimed] : []));
    const executions = new Map<string, Execution>();
    if (claimed.length > 0) {
      try {
        for (const execution of await this.#executeClaimed(claimed, options.canStart, claimSent)) executions.set(execution.operationId, execution);
      } catch (cause) {
        throw new OutcomesNotRecordedError(results(null), cause);
      }
    }
    return results(executions);
  }

  /** Make a refund durable (not executed): its operation id, or the RefundRejectedError. */
  async requestRefund(input: RefundInput): Promise<string> {
    const result = await this.processRefund(input, { execute: false });
    if (result.rejection) throw result.rejection;
    return result.operationId!;
  }

  /**
   * A refund request through the same engine as a charge: ONE statement makes it durable and claims it
   * when its charge is final-succeeded (a refund of an open charge waits, durable, until the charge
   * is final: the reconciler then claims it), the Stripe call, ONE statement records the outcome.
   * Rejections (conflict, no charge, failed charge, more than charged) are values, nothing is sent.
   */
  async processRefund(
    input: RefundInput,
    options: { execute?: boolean; canStart?: () => boolean; requestedDetail?: Readonly<Record<string, unknown>> } = {},
  ): Promise<RefundRequestResult> {
    const execute = options.execute ?? true;
    const claim = execute && (options.canStart?.() ?? true);
    const token = randomUUID();
    let row = null;
    const claimSent = this.#now();
    for (let round = 0; row === null; round++) {
      if (round === 5) throw new Error(`could not read back refund ${input.refundId} of order ${input.orderId} after concurrent inserts`);
      try {
        row = await requestRefundAndClaim(this.#db, input, claim, token, this.#policy.leaseMs, this.#actor, options.requestedDetail);
      } catch (error) {
        // Another refund of the order committed while this statement waited on the charge's row lock:
        // asked again, the statement sees it and judges the sum with it.
        if (!isRefundRace(error)) throw error;
      }
    }
    const reject = (code: RefundRejectedError['code'], message: string, existing: Operation | null = null): RefundRequestResult => ({
      input,
      operationId: null,
      rejection: new RefundRejectedError(code, input, message, existing),
      execution: null,
    });
    switch (row.verdict) {
      case 'no_charge':
        return reject('no_charge', `order ${input.orderId} has no charge to refund`);
      case 'charge_failed':
        return reject('charge_failed', `order ${input.orderId}: the charge failed, there is nothing to refund`);
      case 'exceeds_charge':
        return reject('exceeds_charge',
          `refund ${input.refundId} of order ${input.orderId} (${input.amount}) would exceed the charge: ${row.refundedOrHeld} of ${row.chargeAmount} already refunded or in flight`);
    }
    const op = row.operation!;
    const fields = [op.amount !== input.amount ? 'amount' : null, (op.refund?.reason ?? null) !== input.reason ? 'reason' : null].filter((f) => f !== null);
    if (fields.length > 0) {
      return { ...reject('refund_conflict', `refund ${input.refundId} of order ${input.orderId} already exists as operation ${op.id} with a different ${fields.join(', ')}`, op), operationId: op.id };
    }
    const created = row.verdict === 'inserted';
    if (!row.claimed) return { input, operationId: op.id, rejection: null, execution: execute ? skipped(op) : null, created };
    try {
      const [execution] = await this.#executeClaimed([row.claimed], options.canStart, claimSent);
      return { input, operationId: op.id, rejection: null, execution: execution!, created };
    } catch (cause) {
      // Durable and claimed: the lease expires and the reconciler asks Stripe again with the same key.
      return { input, operationId: op.id, rejection: null, execution: null, outcomeNotRecorded: cause, created };
    }
  }

  /**
   * The duplicate-charge remedy: evidence (an operator, a List, a Stripe event) shows `pi` for the
   * order of a succeeded charge operation that holds another PaymentIntent. When judgeDuplicateCharge
   * says it is a second charge, a refund operation (reason duplicate, refund id derived from the
   * PaymentIntent id) is created — once, however often the evidence comes — and executed now.
   */
  async remedyDuplicateCharge(
    chargeOperationId: string,
    pi: PaymentIntentView,
    evidence: Readonly<Record<string, unknown>> = {},
  ): Promise<{ readonly verdict: DuplicateVerdict; readonly refundOperationId: string | null; readonly created: boolean; readonly execution: Execution | null }> {
    const charge = await findOperation(this.#db, chargeOperationId);
    if (!charge) throw new OperationNotFoundError(chargeOperationId);
    const verdict = judgeDuplicateCharge(charge, pi);
    if (verdict.kind !== 'refund') return { verdict, refundOperationId: null, created: false, execution: null };
    const made = await insertDuplicateRefund(this.#db, charge, verdict, this.#actor, evidence);
    const execution = made ? await this.executeCharge(made.id) : null;
    return { verdict, refundOperationId: made?.id ?? null, created: made?.created ?? false, execution };
  }

  /**
   * One page of the reconcile sweep: claim up to `limit` due operations (SKIP LOCKED) and execute
   * them. Returns nothing to do as an empty array.
   */
  async reconcileDue(limit: number, canStart?: () => boolean): Promise<Execution[]> {
    const claimSent = this.#now();
    const claimed = await claimDue(this.#db, limit, randomUUID(), this.#policy.leaseMs, this.#actor);
    if (claimed.length === 0) return [];
    return this.#executeClaimed(claimed, canStart, claimSent);
  }

  /** Attempt each claimed operation (bounded concurrency), then record all outcomes in one round trip. */
  /**
   * `claimSent`: this clock's time just before the claim statement was sent. The database dated the
   * claim (claimedAt) no earlier, so claimedAt + (now − claimSent) is never earlier than the
   * database's clock now — a slow claim statement (a loaded or restarting database) counts too.
   */
  async #executeClaimed(claimed: readonly ClaimedOperation[], canStart?: () => boolean, claimSent: number = this.#now()): Promise<Execution[]> {
    const claimedLocally = claimSent;
    const histories = await this.#evidence(claimed);
    const sinceClaim = () => this.#now() - claimedLocally;
    const attempts = await mapBounded(claimed, this.#concurrency, (op) => this.#attempt(op, histories.get(op.id) ?? null, canStart, sinceClaim));
    const writes: OutcomeWrite[] = [];
    const reissues: ReissueWrite[] = [];
    for (const { op, step, outcome, waitUntilMs, notStarted } of attempts) {
      if (waitUntilMs !== undefined) {
        writes.push(releaseWrite(op, Math.max(0, waitUntilMs - op.claimedAt.getTime()), `List waits for the settle delay after the last send, until ${new Date(waitUntilMs).toISOString()}`));
      } else if (outcome === null) {
        writes.push(releaseWrite(op, null, notStarted ?? 'not started: no time or request budget left'));
      } else if (outcome.reissue) {
        reissues.push({ operationId: op.id, leaseToken: op.leaseToken, fromStatus: op.status, keyGeneration: op.keyGeneration, detail: outcome.detail });
      } else {
        writes.push({ operationId: op.id, leaseToken: op.leaseToken, action: 'record', step: step!, fromStatus: op.status, keyGeneration: op.keyGeneration, ...outcome });
      }
    }
    const [recordedRows, reissuedRows] = await Promise.all([
      recordOutcomes(this.#db, writes, this.#actor, this.#publishLeaseMs),
      reissueAfterProof(this.#db, reissues, this.#actor, this.#publishLeaseMs, watchTimings(this.#policy)),
    ]);
    const recorded = new Map<string, RecordResult>([...recordedRows, ...reissuedRows].map((r) => [r.operationId, r]));
    return attempts.map(({ op, step, outcome, waitUntilMs }) => {
      const result = recorded.get(op.id);
      if (waitUntilMs !== undefined) return { operationId: op.id, status: result?.status ?? op.status, disposition: 'deferred' as const, step: 'wait' as const };
      if (outcome === null) return { operationId: op.id, status: result?.status ?? op.status, disposition: 'released' as const };
      if (!result?.applied) return { operationId: op.id, status: op.status, disposition: 'discarded' as const, step: step!, outcome };
      return {
        operationId: op.id,
        status: result.status ?? outcome.status,
        disposition: 'attempted' as const,
        step: step!,
        outcome,
        reviewReason: outcome.reviewReason,
        event: result.event,
      };
    });
  }

  /** The audit-trail evidence of the claimed operations that need it (ambiguous ones only): one read. */
  async #evidence(claimed: readonly ClaimedOperation[]): Promise<Map<string, EvidenceHistory>> {
    const needing = claimed.filter((op) => needsEvidence(op, this.#policy));
    const histories = new Map<string, EvidenceHistory>();
    if (needing.length === 0) return histories;
    const events = await loadEvidenceEvents(this.#db, needing.map((op) => op.id));
    for (const op of needing) histories.set(op.id, summarizeEvidence(op, events.get(op.id) ?? [], this.#policy));
    return histories;
  }

  /** One attempt: choose the step, make the call(s), decide the outcome. Null: not started. */
  async #attempt(
    op: ClaimedOperation,
    history: EvidenceHistory | null,
    canStart?: () => boolean,
    sinceClaim: () => number = () => 0,
  ): Promise<{ op: ClaimedOperation; step: AttemptStep | null; outcome: Outcome | null; waitUntilMs?: number; notStarted?: string }> {
    const ctx: DecisionContext = { op, policy: this.#policy, random: this.#random, history };
    // A refund of a charge that failed: settled without a call (its audit step is 'precondition').
    const precondition = decidePrecondition(op);
    if (precondition) return { op, step: 'precondition', outcome: precondition };
    const kind = KIND_ADAPTERS[op.kind];
    const step = chooseStep(op, this.#policy, history);
    if (step.kind === 'wait') return { op, step: step.kind, outcome: null, waitUntilMs: step.untilMs };
    const mayCall = async (kind: Step['kind']) => (canStart?.() ?? true) && ((await this.#beforeCall?.(kind)) ?? true);
    if (!(await mayCall(step.kind))) return { op, step: null, outcome: null };
    // Nothing goes out under a key older than the window: the claim judged it, but a create may start
    // later than its claim (the rate limiter's wait, the calls queued ahead of it in a batch). Given
    // back untouched, due at once: the next claim, after the window, takes the List path.
    const create = async (): Promise<{ op: ClaimedOperation; step: AttemptStep | null; outcome: Outcome | null; notStarted?: string }> => {
      const now = new Date(op.claimedAt.getTime() + sinceClaim());
      if (!withinKeyWindow(op.firstAttemptedAt, now, this.#policy)) {
        return { op, step: null, outcome: null, notStarted: `not sent: the key window (${formatDuration(this.#policy.keyWindowMs)}) ended between the claim and the call` };
      }
      return { op, step: step.kind, outcome: decideCreate(ctx, await this.#create(op)) };
    };
    switch (step.kind) {
      case 'retrieve':
        return { op, step: step.kind, outcome: decideRetrieve(ctx, step.paymentIntentId, await guard(() => kind.retrieve(this.#gateway, step.paymentIntentId))) };
      case 'search':
        return { op, step: step.kind, outcome: decideSearch(ctx, await guard(() => this.#gateway.searchPaymentIntents({ operationId: op.id, keyGeneration: op.keyGeneration }))) };
      case 'list': {
        // Every page after the first is one more request against the same budget.
        const window = listWindow(op, history, this.#policy);
        const answer = await guard(() => kind.list(this.#gateway, KIND_RULES[op.kind].listScope(op), window, () => mayCall('list')));
        return { op, step: step.kind, outcome: decideList(ctx, window, answer) };
      }
      case 'early_search': {
        const decided = decideEarlySearch(ctx, await guard(() => this.#gateway.searchPaymentIntents({ operationId: op.id, keyGeneration: op.keyGeneration })));
        if (decided !== 'create') return { op, step: step.kind, outcome: decided };
        // Nothing found (or Search unavailable): the same key, inside its window, is still safe.
        // If the budget says no now, the search was still worth it; the create waits for next time.
        if (!(await mayCall('create'))) return { op, step: null, outcome: null };
        return create();
      }
      case 'create':
        return create();
    }
  }

  async #create(op: ClaimedOperation): Promise<GatewayResult<PaymentIntentView>> {
    return guard(() => KIND_ADAPTERS[op.kind].create(this.#gateway, op));
  }
}

/**
 * A gateway is meant never to throw; if one does anyway (a bug, an SDK surprise), the call may have
 * gone out, so the answer is "ambiguous" — recorded, retried with the same key — not a lost batch.
 */
async function guard<T>(call: () => Promise<GatewayResult<T>>): Promise<GatewayResult<T>> {
  try {
    return await call();
  } catch (error) {
    const e = error instanceof Error ? error : new Error(String(error));
    return { ok: false, failure: { kind: FailureKind.ambiguous, errorClass: e.name, message: e.message } };
  }
}

function skipped(op: Operation): Execution {
  return { operationId: op.id, status: op.status, disposition: 'skipped', reviewReason: op.reviewReason };
}
