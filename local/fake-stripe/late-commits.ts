// Late commits: a create Stripe answered with a 500 (error_500_late_commit) or did not answer at all
// (in_flight_then_commit) BEFORE it committed it. The object appears later — when the server's
// lateCommitMs elapses, or when commitLate() releases it — as a normal execution at that moment.
//
//   t ─────────────────────────────────────────────────────────────────────────────────────────▶
//   A:  key K ─lock─ 500, stored for K          ...                 commit: object made, created = now
//   B:         List: none   List: none   re-issue under key K2 ...          List: BOTH
//   A': key K ─lock─ (no answer; K stays in flight) ...             commit: object made, its answer stored for K
//   B':        key K → 409 idempotency_key_in_use ...                       key K → that answer, replayed
//
// This module keeps the pending commits and their timers; the server says what a commit does.
import { matches, type RequestFacts } from './faults.ts';
import type { FaultMatch, LateCommitFault, LateCommitResult } from './types.ts';

export interface PendingCommit {
  readonly fault: LateCommitFault;
  /** The create's facts, for commitLate(match). */
  readonly facts: RequestFacts;
  /** The request's seq: commits released together run oldest request first. */
  readonly requestSeq: number;
  /** The commit itself: runs once, synchronously, at the moment it is due. */
  readonly commit: () => LateCommitResult;
}

/** How a timer is set and cancelled: the real, unref'd setTimeout, unless a test brings its own clock. */
export interface Scheduler {
  set(run: () => void, ms: number): unknown;
  cancel(handle: unknown): void;
}

const REAL_TIMERS: Scheduler = {
  set: (run, ms) => setTimeout(run, ms).unref(),
  cancel: (handle) => clearTimeout(handle as NodeJS.Timeout),
};

export class LateCommits {
  /** Each pending commit and its timer (null: it waits for release()). */
  readonly #pending = new Map<PendingCommit, unknown>();
  #made = 0;
  readonly #delayMs: number | null;
  readonly #scheduler: Scheduler;

  /** delayMs null: a commit happens only when released. */
  constructor(delayMs: number | null, scheduler: Scheduler = REAL_TIMERS) {
    this.#delayMs = delayMs;
    this.#scheduler = scheduler;
  }

  add(pending: PendingCommit): void {
    const timer = this.#delayMs === null ? null : this.#scheduler.set(() => this.#onTimer(pending), this.#delayMs);
    this.#pending.set(pending, timer);
  }

  /** Commits now every pending commit whose create matches, oldest request first. */
  release(match: FaultMatch = {}): LateCommitResult[] {
    const due = [...this.#pending.keys()].filter((p) => matches(match, p.facts)).sort((a, b) => a.requestSeq - b.requestSeq);
    return due.map((p) => this.#run(p));
  }

  get pending(): number {
    return this.#pending.size;
  }

  get made(): number {
    return this.#made;
  }

  /** Forgets every pending commit and cancels its timer (close()): none of them will happen. */
  drop(): void {
    for (const timer of this.#pending.values()) if (timer !== null) this.#scheduler.cancel(timer);
    this.#pending.clear();
  }

  /** drop(), and the count of commits made starts again (reset()). */
  clear(): void {
    this.drop();
    this.#made = 0;
  }

  #run(pending: PendingCommit): LateCommitResult {
    const timer = this.#pending.get(pending);
    if (timer !== null && timer !== undefined) this.#scheduler.cancel(timer);
    this.#pending.delete(pending);
    this.#made += 1;
    return pending.commit();
  }

  #onTimer(pending: PendingCommit): void {
    if (!this.#pending.has(pending)) return;
    try {
      this.#run(pending);
    } catch (error) {
      // A bug in the fake must be loud, but a timer's exception would take the whole test process down.
      console.error('fake-stripe: late commit failed', error);
    }
  }
}
