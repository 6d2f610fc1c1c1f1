// One reconcile run (docs/architecture.md#the-reconcile-handler): settle what is due, relay what the outbox still holds, measure.
// Knows nothing of Lambda or the environment; the handler passes dependencies and the clock in.
//
//   ┌ page: claim ≤ pageSize due operations (FOR UPDATE SKIP LOCKED + lease, one statement)
//   │       Stripe calls, ≤ concurrency at once, each waiting for a rate-limiter slot
//   │       outcomes recorded (one statement, fenced by the lease)
//   │       the page's outcome events published (PutEvents), marked published
//   └ again, until nothing is due or no call could start in time
//   relay the rest of the outbox ─▶ gauges
//
// Two runs at once (a slow sweep and the next scheduled one, or an operator's) are safe: SKIP LOCKED
// hands them disjoint pages, the lease keeps an operation claimed by one away from the other, and the
// fenced write discards a zombie's late outcome.
import { prepareAuditPartitions, type PreparedPartitions } from '../payments/audit-partitions.ts';
import type { Db } from '../payments/db.ts';
import { DEFAULT_POLICY, type EnginePolicy } from '../payments/decisions.ts';
import { ChargeEngine } from '../payments/engine.ts';
import type { Execution } from '../payments/request-results.ts';
import type { PaymentGateway } from '../payments/gateway.ts';
import { publishLeased, relayUnpublished, type EventPublisher } from '../events/outbox.ts';
import { describeError, silentLog, type InvocationClock, type LogSink } from '../runtime/observability.ts';
import { StripeEventApplier } from '../payments/event-applier.ts';
import type { TransactionalDb } from '../payments/inbox-store.ts';
import { ReissueWatcher, type WatchRun } from '../payments/watcher.ts';
import { runRetention, type RetentionRun, type RetentionSettings } from '../payments/retention-store.ts';
import { checkExpiredAuthorizations, type ExpiryRun } from '../payments/authorization-expiry.ts';
import { collectGauges, type ReconcileGauges } from './gauges.ts';
import { RequestRateLimiter } from './rate-limiter.ts';

export interface ReconcileSettings {
  readonly maxRequestsPerSecond: number;
  readonly maxSearchesPerSecond: number;
  readonly concurrency: number;
  readonly pageSize: number;
  /**
   * No Stripe call starts with less time left in the invocation than this: the worst-case duration
   * of one gateway call plus safetyMarginMs (so minTimeToCallMs − safetyMarginMs is the worst case).
   */
  readonly minTimeToCallMs: number;
  /** Time kept back at the end of the invocation for the relay and the gauges. */
  readonly safetyMarginMs: number;
  /** Stop starting work this long after the run began; 0 = no limit but the invocation's. */
  readonly maxRunMs: number;
  readonly rejectedWindowSeconds: number;
}

export interface ReconcileDeps {
  readonly db: Db;
  /** Null: Stripe cannot be reached (no key): no operation is claimed; relay and gauges still run. */
  readonly gateway: PaymentGateway | null;
  /** Null: no bus configured; the outbox is not relayed (the gauges still count it). */
  readonly publisher: EventPublisher | null;
  readonly settings: ReconcileSettings;
  readonly log?: LogSink;
  readonly policy?: Partial<EnginePolicy>;
  readonly random?: () => number;
  readonly actor?: string;
  /** Monotonic milliseconds (tests). */
  readonly now?: () => number;
  /**
   * How the rate limiter waits for a slot, on the `now` clock; default a timer. A test that gives
   * `now` gives this too (its clock moves when the limiter asks to wait), and asserts on the slots.
   */
  readonly sleep?: (ms: number) => Promise<void>;
  /**
   * Set: the Stripe event inbox is worked too — whatever the endpoint recorded but could not apply
   * (a held lease, Stripe unreachable, a crash) — and its gauges published. The same pool as `db`.
   */
  readonly inboxDb?: TransactionalDb;
  /**
   * Set: the run ends with the retention phase (retention-store.ts), bounded by its batch limits, its
   * own time budget (maxRunMs, on the `now` clock) and the invocation's safety margin.
   */
  readonly retention?: RetentionSettings & { readonly maxRunMs: number };
  /** The wall clock retention's cutoffs are computed from (tests and the storage benchmark move it). @default new Date() */
  readonly wallClock?: () => Date;
  /**
   * How long an uncaptured authorization lives at Stripe, and how long after that the expiry check
   * first looks (authorization-expiry.ts; the gauge uses the validity). @default 7 days, 10 minutes
   */
  readonly authorizationExpiry?: { readonly validityMs: number; readonly lookMarginMs: number };
  /** Connected accounts whose Stripe events are taken before the pipeline has an operation on them (STRIPE_CONNECTED_ACCOUNTS). */
  readonly connectedAccounts?: readonly string[];
}

/** The inbox part of a run (null when not asked for, or when it failed: see errors). */
export interface StripeEventsRun {
  readonly applied: number;
  readonly deferred: number;
  readonly failed: number;
  readonly contradictions: number;
  readonly unrecordedCharges: number;
  /** New findings of events refused (account, mode) or not confirmed by our key. */
  readonly refused: number;
  readonly byOutcome: Readonly<Record<string, number>>;
}

export type StopReason =
  /** Nothing due was left (a page came back short). */
  | 'drained'
  /** The time budget (invocation or maxRunMs) ended, or a rate-limiter slot would have come too late. */
  | 'time'
  /** The database failed, or no Stripe gateway: the run did what it could and the handler reports the error. */
  | 'error';

export interface ReconcileSummary {
  /** Operations claimed in this run (an operation retried twice in one run counts twice). */
  readonly claimed: number;
  /** attempted → its new status (or 'review'); discarded / released / skipped as the engine reports. */
  readonly byOutcome: Readonly<Record<string, number>>;
  /** Claimed, then given back without a call (no time or rate budget left): due again at once. */
  readonly released: number;
  /** Operations Stripe was called for and whose outcome was written. */
  readonly reconciled: number;
  readonly pages: number;
  readonly stripeRequests: number;
  /** The same requests per Stripe account they were made as (`platform`, or a connected account's id), most first. */
  readonly stripeRequestsByAccount: Readonly<Record<string, number>>;
  readonly stripeAuthErrors: number;
  readonly idempotencyErrors: number;
  readonly published: number;
  readonly publishFailed: number;
  /** Null when they could not be computed (database down). */
  readonly gauges: ReconcileGauges | null;
  readonly stoppedBecause: StopReason;
  readonly durationMs: number;
  /** What failed, redacted (the handler throws when this is not empty). */
  readonly errors: readonly string[];
  readonly stripeEvents: StripeEventsRun | null;
  /** The watch over re-issued operations (null: no gateway, or it failed: see errors). */
  readonly watch: WatchRun | null;
  /** The audit trail's partitions made ahead (null: it failed, see errors). */
  readonly auditPartitions: PreparedPartitions | null;
  /** The retention phase (null: not configured, or it failed: see errors). */
  readonly retention: RetentionRun | null;
  /** The look at lapsed authorizations (null: no gateway, or it failed: see errors). */
  readonly authorizations: ExpiryRun | null;
}

const AUTH_ERRORS = new Set(['StripeAuthenticationError', 'StripePermissionError']);

function outcomeKey(execution: Execution): string {
  if (execution.disposition !== 'attempted') return execution.disposition;
  return execution.reviewReason ? 'review' : execution.status;
}

export async function runReconcile(deps: ReconcileDeps, clock: InvocationClock): Promise<ReconcileSummary> {
  const { settings } = deps;
  const log = deps.log ?? silentLog;
  const now = deps.now ?? (() => performance.now());
  const startedAt = now();
  // The latest moment a Stripe call may start: it must be able to finish (worst case) inside the
  // invocation, and the run should end before the next scheduled one starts (maxRunMs).
  const byInvocation = startedAt + clock.remainingMs() - settings.minTimeToCallMs;
  const latestStart = settings.maxRunMs > 0 ? Math.min(byInvocation, startedAt + settings.maxRunMs) : byInvocation;
  const canStart = () => now() < latestStart;
  // Within a page, a call must also end before the page's lease does, or another run could claim the
  // operation while this one still waits for Stripe (safe — same key, fenced write — but a 409 and a
  // wasted call). Binding only when the lease is short (LEASE_MS in a time-lapse run).
  const leaseMs = deps.policy?.leaseMs ?? DEFAULT_POLICY.leaseMs;
  const worstCallMs = Math.max(0, settings.minTimeToCallMs - settings.safetyMarginMs);
  let pageLatestStart = latestStart;
  const canStartInPage = () => now() < pageLatestStart;

  const limiter = new RequestRateLimiter({
    requestsPerSecond: settings.maxRequestsPerSecond,
    searchesPerSecond: settings.maxSearchesPerSecond,
    now,
    ...(deps.sleep ? { sleep: deps.sleep } : {}),
  });
  const gateway = deps.gateway;
  // What the engine and the watch after a re-issue share: the database, the key, the policy, the jitter.
  const worker = gateway && {
    db: deps.db,
    gateway,
    actor: deps.actor ?? 'reconciler',
    concurrency: settings.concurrency,
    ...(deps.policy ? { policy: deps.policy } : {}),
    ...(deps.random ? { random: deps.random } : {}),
  };
  const engine = worker && new ChargeEngine({
    ...worker,
    beforeCall: (step, account) => limiter.acquire(step, pageLatestStart, account),
  });

  const byOutcome: Record<string, number> = {};
  const errors: string[] = [];
  let published = 0;
  let publishFailed = 0;
  let claimed = 0;
  let pages = 0;
  let stripeAuthErrors = 0;
  let idempotencyErrors = 0;
  let stoppedBecause: StopReason = 'drained';
  try {
    for (;;) {
      if (!engine) {
        stoppedBecause = 'error';
        break;
      }
      // A claim starts a never-sent operation's key window and takes a lease: only claim what can run.
      if (!canStart()) {
        stoppedBecause = 'time';
        break;
      }
      pageLatestStart = Math.min(latestStart, now() + leaseMs - worstCallMs);
      const page = await engine.reconcileDue(settings.pageSize, canStartInPage);
      pages++;
      claimed += page.length;
      for (const execution of page) {
        const key = outcomeKey(execution);
        byOutcome[key] = (byOutcome[key] ?? 0) + 1;
        const errorClass = execution.outcome?.errorClass;
        if (errorClass && AUTH_ERRORS.has(errorClass)) stripeAuthErrors++;
        if (errorClass === 'StripeIdempotencyError') idempotencyErrors++;
        if (execution.disposition === 'attempted' || execution.disposition === 'discarded') {
          log.info('operation reconciled', {
            operationId: execution.operationId,
            step: execution.step,
            status: execution.status,
            disposition: execution.disposition,
            ...(errorClass ? { errorClass, errorCode: execution.outcome?.errorCode } : {}),
            ...(execution.reviewReason ? { inReview: true } : {}),
          });
        }
      }
      // The page's outcome events were written leased to this run, to publish at once: the relay
      // below skips leased rows, so without this they would wait for the lease (60 s) and a later run.
      const events = page.flatMap((execution) => (execution.event ? [execution.event] : []));
      if (deps.publisher && events.length > 0 && clock.remainingMs() > settings.safetyMarginMs) {
        try {
          const sent = await publishLeased(deps.db, deps.publisher, events);
          published += sent.published;
          publishFailed += sent.failed;
        } catch (error) {
          log.warn('outcome events of a page not published; a later sweep sends them', describeError(error));
        }
      }
      // Released = a call could not start in time. If the run's budget is spent, the rest waits for
      // the next run; if only the page's lease window closed, the released operations are due again
      // at once and the next page takes them — unless the page made no progress at all (a lease too
      // short for one call), which would only spin.
      if (page.some((execution) => execution.disposition === 'released')) {
        const leaseBound = pageLatestStart < latestStart;
        if (!leaseBound || !canStart() || page.every((execution) => execution.disposition === 'released')) {
          stoppedBecause = 'time';
          break;
        }
        continue;
      }
      if (page.length < settings.pageSize) break;
    }
  } catch (error) {
    stoppedBecause = 'error';
    const described = describeError(error);
    errors.push(`sweep: ${described.errorName}: ${described.errorMessage}`);
    // Operations claimed by the failed page keep their lease until it expires, then are due again.
    log.error('reconcile sweep failed', described);
  }

  // The watch over re-issued operations (watch.ts): a late commit under a retired key is found and
  // handed to the remedy, with Stripe events or without. After the due operations (they come first
  // for the budget), on the same rate limiter; the remedies it makes are due at once for the next run.
  let watch: WatchRun | null = null;
  if (worker && stoppedBecause !== 'error') {
    try {
      const watcher = new ReissueWatcher({
        ...worker,
        beforeCall: (account) => (canStart() ? limiter.acquire('list', latestStart, account) : false),
      });
      watch = await watcher.lookAllDue(settings.pageSize, canStart);
      if (watch.remediesCreated > 0 || watch.newFindings > 0) log.warn('the watch after a re-issue found a late object', { ...watch });
    } catch (error) {
      const described = describeError(error);
      errors.push(`watch: ${described.errorName}: ${described.errorMessage}`);
      log.error('watch after re-issue not run', described);
    }
  }

  // Authorizations Stripe let expire uncaptured (authorization-expiry.ts): each lapsed one looked up
  // once with our key, on the same rate limiter, and recorded as what the PaymentIntent shows.
  let authorizations: ExpiryRun | null = null;
  if (worker && stoppedBecause !== 'error') {
    try {
      authorizations = await checkExpiredAuthorizations({
        db: deps.db,
        gateway: worker.gateway,
        actor: worker.actor,
        limit: settings.pageSize,
        ...(deps.authorizationExpiry ? { validityMs: deps.authorizationExpiry.validityMs, lookMarginMs: deps.authorizationExpiry.lookMarginMs } : {}),
        beforeCall: (account) => (canStart() ? limiter.acquire('retrieve', latestStart, account) : false),
      });
      if (authorizations.expired > 0 || authorizations.capturedElsewhere > 0) log.warn('authorizations expired or captured outside the pipeline', { ...authorizations });
    } catch (error) {
      const described = describeError(error);
      errors.push(`authorizations: ${described.errorName}: ${described.errorMessage}`);
      log.error('expired authorizations not checked', described);
    }
  }

  // The inbox: Stripe events recorded but not applied yet. Before the relay, so that the outcome
  // events their effects wrote go out in this run. Retrieves share the sweep's rate limiter.
  let stripeEvents: StripeEventsRun | null = null;
  if (deps.inboxDb) {
    try {
      const applier = new StripeEventApplier({
        db: deps.inboxDb,
        gateway,
        actor: deps.actor ?? 'reconciler',
        ...(deps.policy ? { policy: deps.policy } : {}),
        ...(deps.connectedAccounts ? { connectedAccounts: deps.connectedAccounts } : {}),
        ...(deps.random ? { random: deps.random } : {}),
        beforeCall: (account) => (canStart() ? limiter.acquire('retrieve', latestStart, account) : false),
      });
      const run = await applier.applyDue({ canContinue: () => clock.remainingMs() > settings.safetyMarginMs });
      for (const error of run.errors.slice(0, 5)) errors.push(`inbox: ${error}`);
      if (deps.publisher && run.events.length > 0) {
        const sent = await publishLeased(deps.db, deps.publisher, run.events).catch(() => ({ published: 0, failed: run.events.length }));
        published += sent.published;
        publishFailed += sent.failed;
      }
      stripeEvents = { applied: run.applied, deferred: run.deferred, failed: run.failed, contradictions: run.contradictions, unrecordedCharges: run.unrecordedCharges, refused: run.refused, byOutcome: run.byOutcome };
    } catch (error) {
      const described = describeError(error);
      errors.push(`inbox: ${described.errorName}: ${described.errorMessage}`);
      log.error('stripe event inbox not worked', described);
    }
  }

  // The outbox: events the charge handler could not publish, or that a crash left leased.
  if (deps.publisher) {
    try {
      const relay = await relayUnpublished(deps.db, deps.publisher, {
        leaseMs: deps.policy?.publishLeaseMs ?? DEFAULT_POLICY.publishLeaseMs,
        canContinue: () => clock.remainingMs() > settings.safetyMarginMs,
      });
      published += relay.published;
      publishFailed += relay.failed;
      if (relay.failed > 0) log.warn('outcome events not published; the next run resends them', { ...relay });
    } catch (error) {
      const described = describeError(error);
      errors.push(`relay: ${described.errorName}: ${described.errorMessage}`);
      log.error('outbox relay failed', described);
    }
  }

  // The audit trail's partitions for this month and the next ones (audit-partitions.ts): a catalog
  // look-up on most runs, a CREATE once a month. A month whose rows already went to the default
  // partition gets none and raises AuditPartitionsBehind (docs/runbook.md).
  let auditPartitions: PreparedPartitions | null = null;
  try {
    auditPartitions = await prepareAuditPartitions(deps.db);
    if (auditPartitions.created.length > 0) log.info('audit trail partitions made', { created: auditPartitions.created });
    if (auditPartitions.blocked.length > 0) log.warn('audit trail months without a partition: their rows are in the default partition', { blocked: auditPartitions.blocked });
  } catch (error) {
    const described = describeError(error);
    errors.push(`partitions: ${described.errorName}: ${described.errorMessage}`);
    log.error('audit trail partitions not prepared', described);
  }

  // Retention last: it only removes what is past its bound, so it takes what time is left, never the
  // settling's. Every batch is one short statement that skips locked rows (retention-store.ts).
  let retention: RetentionRun | null = null;
  if (deps.retention) {
    const bounds = deps.retention;
    const retentionStart = now();
    try {
      retention = await runRetention(deps.db, bounds, deps.wallClock ?? (() => new Date()), () =>
        clock.remainingMs() > settings.safetyMarginMs && (bounds.maxRunMs === 0 || now() - retentionStart < bounds.maxRunMs));
      if (retention.unfinished.length > 0) log.info('retention left due rows for the next run', { unfinished: retention.unfinished, removed: retention.removed });
    } catch (error) {
      const described = describeError(error);
      errors.push(`retention: ${described.errorName}: ${described.errorMessage}`);
      log.error('retention not run', described);
    }
  }

  let gauges: ReconcileGauges | null = null;
  try {
    // The inbox's gauges with the others, whenever the run works the inbox: also when its apply
    // failed above, so that the backlog and findings alarms see the inbox then too.
    gauges = await collectGauges(deps.db, settings.rejectedWindowSeconds, {
      inbox: Boolean(deps.inboxDb),
      ...(deps.authorizationExpiry ? { authorizationValidityMs: deps.authorizationExpiry.validityMs } : {}),
    });
  } catch (error) {
    const described = describeError(error);
    errors.push(`gauges: ${described.errorName}: ${described.errorMessage}`);
    log.error('gauges not computed', described);
  }

  return {
    claimed,
    byOutcome,
    released: byOutcome.released ?? 0,
    reconciled: claimed - (byOutcome.released ?? 0) - (byOutcome.deferred ?? 0) - (byOutcome.skipped ?? 0) - (byOutcome.discarded ?? 0),
    pages,
    stripeRequests: limiter.granted,
    stripeRequestsByAccount: limiter.grantedByAccount,
    stripeAuthErrors,
    idempotencyErrors,
    published,
    publishFailed,
    gauges,
    stoppedBecause,
    durationMs: Math.round(now() - startedAt),
    errors,
    stripeEvents,
    watch,
    auditPartitions,
    retention,
    authorizations,
  };
}
