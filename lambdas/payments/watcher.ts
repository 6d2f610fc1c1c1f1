// The watch after a re-issue, as I/O: claim the due watches, list each operation's objects at Stripe
// (no transaction open), judge with watch.ts, record every look in one statement (watch-store.ts).
// The reconciler runs it after its due operations, under the same request budget.
//
//   claim (lease, SKIP LOCKED) ─▶ List of the kind (first send … now), every page ─▶ judgeWatch ─▶ record (fenced)
import { randomUUID } from 'node:crypto';
import type { Db } from './db.ts';
import { DEFAULT_POLICY, type EnginePolicy } from './decisions.ts';
import { mapBounded } from './engine.ts';
import { FailureKind, type GatewayResult, type ListAnswer, type PaymentGateway } from './gateway.ts';
import { accountOf, KIND_ADAPTERS } from './kinds.ts';
import type { PaymentIntentView } from './types.ts';
import { deferLook, failedLook, judgeWatch, watchListScope, watchListWindow, type WatchedOperation, type WatchLook } from './watch.ts';
import { claimDueWatches, recordWatchLooks, type WatchLookWrite } from './watch-store.ts';

export interface WatcherOptions {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  readonly actor?: string;
  readonly policy?: Partial<EnginePolicy>;
  /** Lists in flight at once. */
  readonly concurrency?: number;
  readonly random?: () => number;
  /**
   * Asked before every List page (the reconciler's rate limiter), with the account it is made as (null:
   * the platform); false: not now, the look is due again at once.
   */
  readonly beforeCall?: (account: string | null) => Promise<boolean> | boolean;
}

/** What one run of the watch did. */
export interface WatchRun {
  readonly claimed: number;
  /** Looks that listed and judged. */
  readonly looked: number;
  /** Watches of operations still open or in review, left for later. */
  readonly deferred: number;
  /** Looks whose List failed or stopped short. */
  readonly failed: number;
  /** Not started for lack of time or request budget. */
  readonly released: number;
  readonly remediesCreated: number;
  readonly newFindings: number;
  /** Watches this run closed. */
  readonly closed: number;
}

export class ReissueWatcher {
  readonly #db: Db;
  readonly #gateway: PaymentGateway;
  readonly #actor: string;
  readonly #policy: EnginePolicy;
  readonly #concurrency: number;
  readonly #random: () => number;
  readonly #beforeCall: WatcherOptions['beforeCall'];

  constructor(options: WatcherOptions) {
    this.#db = options.db;
    this.#gateway = options.gateway;
    this.#actor = options.actor ?? 'watch';
    this.#policy = { ...DEFAULT_POLICY, ...options.policy, backoff: { ...DEFAULT_POLICY.backoff, ...options.policy?.backoff } };
    this.#concurrency = options.concurrency ?? 4;
    this.#random = options.random ?? Math.random;
    this.#beforeCall = options.beforeCall;
  }

  /** One page of due watches: up to `limit` looks. `canStart` is asked before each (the invocation's time). */
  async lookDue(limit: number, canStart?: () => boolean): Promise<WatchRun> {
    const claimed = await claimDueWatches(this.#db, limit, randomUUID(), this.#policy.leaseMs);
    const looks = await mapBounded(claimed, this.#concurrency, (w) => this.#look(w, canStart));
    const results = await recordWatchLooks(this.#db, looks, this.#actor);
    const applied = new Set(results.filter((r) => r.applied).map((r) => r.operationId));
    const count = (kind: WatchLook['kind'] | 'released') =>
      looks.filter((l) => applied.has(l.watched.op.id) && (kind === 'released' ? l.released : !l.released && l.look.kind === kind)).length;
    return {
      claimed: claimed.length,
      looked: count('looked'),
      deferred: count('later'),
      failed: count('failed'),
      released: count('released'),
      remediesCreated: results.reduce((n, r) => n + r.remediesCreated, 0),
      newFindings: results.reduce((n, r) => n + r.newFindings, 0),
      closed: looks.filter((l) => applied.has(l.watched.op.id) && l.look.kind !== 'later' && l.look.nextCheckAt === null).length,
    };
  }

  /** Every due watch, page by page, while `canStart` allows and pages come back full. */
  async lookAllDue(pageSize: number, canStart?: () => boolean): Promise<WatchRun> {
    const total: { -readonly [K in keyof WatchRun]: number } = { claimed: 0, looked: 0, deferred: 0, failed: 0, released: 0, remediesCreated: 0, newFindings: 0, closed: 0 };
    while (canStart?.() ?? true) {
      const run = await this.lookDue(pageSize, canStart);
      for (const key of Object.keys(total) as (keyof WatchRun)[]) total[key] += run[key];
      // A page with a release ran out of budget; a short page was the last.
      if (run.claimed < pageSize || run.released > 0) break;
    }
    return total;
  }

  async #look(w: WatchedOperation, canStart?: () => boolean): Promise<WatchLookWrite & { readonly released: boolean }> {
    const window = watchListWindow(w, this.#policy);
    const scope = watchListScope(w);
    const evidence = { list: { scope, createdGte: window.createdGte, createdLte: window.createdLte } };
    const write = (look: WatchLook, released = false) => ({ watched: w, look, evidence, released });
    // Open: the engine's own evidence (its List reads every generation) has it. In review, the watch
    // still looks (judgeWatch tells the person what Stripe holds now), and changes nothing.
    if ((w.op.status === 'pending' || w.op.status === 'unknown') && w.op.reviewReason === null) return write(deferLook(w, this.#policy));
    if (scope === null) return write(failedLook(w, 'the refund operation names no PaymentIntent to list', this.#policy, this.#random));
    const mayCall = async () => (canStart?.() ?? true) && ((await this.#beforeCall?.(accountOf(w.op))) ?? true);
    // No budget now: given back untouched, due again at once for the next run.
    if (!(await mayCall())) return write({ kind: 'later', nextCheckAt: w.claimedAt, reason: 'not started: no time or request budget left' }, true);
    const answer = await guard(() => KIND_ADAPTERS[w.op.kind].list(this.#gateway, scope, window, mayCall, accountOf(w.op)));
    if (!answer.ok) return write(failedLook(w, `List failed: ${answer.failure.errorClass}${answer.failure.httpStatus ? ` ${answer.failure.httpStatus}` : ''}`, this.#policy, this.#random));
    return write(judgeWatch(w, answer.value, this.#policy, this.#random));
  }
}

/** A gateway is meant never to throw; if one does, the look failed (and is tried again), nothing more. */
async function guard(call: () => Promise<GatewayResult<ListAnswer<PaymentIntentView>>>): Promise<GatewayResult<ListAnswer<PaymentIntentView>>> {
  try {
    return await call();
  } catch (error) {
    const e = error instanceof Error ? error : new Error(String(error));
    return { ok: false, failure: { kind: FailureKind.ambiguous, errorClass: e.name, message: e.message } };
  }
}
