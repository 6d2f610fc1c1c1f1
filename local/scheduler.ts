// A local stand-in for the EventBridge Scheduler schedule that runs the UNCHANGED reconcile handler.
// The stack runs it at rate(1 minute); locally it runs every few seconds, with the same event the
// schedule sends (lib/reconciler.ts: source, scheduleArn, scheduledTime, attemptNumber).
//
// Overlap: allowed, up to `maxConcurrentRuns` (default 2). On AWS a sweep may outlast its period and
// the next one starts anyway; the reconciler is built for that (claims with SKIP LOCKED, leases,
// fenced writes), so the local schedule does the same rather than hide it. Beyond the bound a tick is
// skipped (counted), so that a slow database does not pile up sweeps.
import { setTimeout as sleep } from 'node:timers/promises';
import type { Context } from 'aws-lambda';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { invoke, LOCAL_ACCOUNT_ID, type FunctionSettings, type InvocationResult } from './lambda-runtime.ts';

/** What the schedule's target input sends (lib/reconciler.ts). */
export interface ScheduledInvocation {
  readonly source: 'aws.scheduler';
  readonly scheduleArn: string;
  readonly scheduledTime: string;
  readonly attemptNumber: number;
}

export type ScheduledHandler = (event: ScheduledInvocation, context: Context) => Promise<unknown>;

export interface ScheduleOptions {
  readonly handler: ScheduledHandler;
  readonly region: string;
  /** Period between ticks. */
  readonly intervalMs: number;
  /** Default 'reconcile'. */
  readonly functionName?: string;
  /** Default PIPELINE.reconcileFunctionTimeoutSeconds (120 s). */
  readonly functionTimeoutMs?: number;
  /** Default 2. 1 = never overlap. */
  readonly maxConcurrentRuns?: number;
  /** Called after each run. */
  readonly onRun?: (report: RunReport) => void;
}

export interface RunReport {
  readonly event: ScheduledInvocation;
  readonly result: InvocationResult<unknown>;
  /** Another run was in flight when this one started. */
  readonly overlapped: boolean;
}

export interface ScheduleCounters {
  readonly runs: number;
  readonly running: number;
  readonly overlaps: number;
  readonly skipped: number;
  readonly errors: number;
  readonly timeouts: number;
  /** What the last run that returned returned (the reconciler's summary). */
  readonly lastSummary: unknown;
}

export class LocalSchedule {
  readonly #options: ScheduleOptions;
  readonly #settings: FunctionSettings;
  readonly #maxConcurrent: number;
  readonly #running = new Set<Promise<void>>();
  readonly #background = new Set<Promise<unknown>>();
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  #counters = { runs: 0, overlaps: 0, skipped: 0, errors: 0, timeouts: 0, lastSummary: undefined as unknown };

  constructor(options: ScheduleOptions) {
    if (!(options.intervalMs > 0)) throw new RangeError(`intervalMs must be positive, got ${options.intervalMs}`);
    this.#options = options;
    this.#maxConcurrent = Math.max(1, options.maxConcurrentRuns ?? 2);
    this.#settings = {
      functionName: options.functionName ?? 'reconcile',
      region: options.region,
      timeoutMs: options.functionTimeoutMs ?? PIPELINE.reconcileFunctionTimeoutSeconds * 1000,
    };
  }

  get scheduleArn(): string {
    return `arn:aws:scheduler:${this.#options.region}:${LOCAL_ACCOUNT_ID}:schedule/default/${this.#settings.functionName}-sweep`;
  }

  counters(): ScheduleCounters {
    return { ...this.#counters, running: this.#running.size };
  }

  /** First run at once, then one per interval. */
  start(): void {
    if (this.#timer || this.#stopped) return;
    const tick = () => {
      if (this.#stopped) return;
      this.runNow();
      this.#timer = setTimeout(tick, this.#options.intervalMs);
    };
    tick();
  }

  /** One run now (unless the overlap bound is reached). Resolves when it ends. */
  runNow(): Promise<void> {
    if (this.#stopped) return Promise.resolve();
    if (this.#running.size >= this.#maxConcurrent) {
      this.#counters.skipped += 1;
      return Promise.resolve();
    }
    const overlapped = this.#running.size > 0;
    if (overlapped) this.#counters.overlaps += 1;
    const now = new Date();
    const event: ScheduledInvocation = {
      source: 'aws.scheduler',
      scheduleArn: this.scheduleArn,
      // The scheduler sends whole seconds, in UTC, without milliseconds.
      scheduledTime: `${now.toISOString().slice(0, 19)}Z`,
      attemptNumber: 1,
    };
    this.#counters.runs += 1;
    const run = (async () => {
      const result = await invoke(this.#options.handler, event, this.#settings, (still) => {
        this.#background.add(still);
        void still.finally(() => this.#background.delete(still));
      });
      if (result.kind === 'returned') this.#counters.lastSummary = result.value;
      else if (result.kind === 'threw') this.#counters.errors += 1;
      else this.#counters.timeouts += 1;
      this.#options.onRun?.({ event, result, overlapped });
    })();
    this.#running.add(run);
    void run.finally(() => this.#running.delete(run));
    return run;
  }

  /** No new runs; wait up to `timeoutMs` for the runs in flight. True when all ended. */
  async stop(timeoutMs = 10_000): Promise<boolean> {
    this.#stopped = true;
    clearTimeout(this.#timer);
    const all = Promise.all([...this.#running, ...this.#background]).then(() => true);
    return Promise.race([all, sleep(timeoutMs, false, { ref: false })]);
  }
}
