// The whole pipeline on one machine, as a library: `npm start`, the end-to-end tests and the chaos
// soak all build it with startPipeline() and tear it down with stop().
//
//   producers ──▶ fauxqs (FIFO queue + FIFO DLQ, as in the stack)
//                   └──▶ SqsEventSource ──▶ charge handler (UNCHANGED) ──▶ PostgreSQL 18 (embedded)
//   LocalSchedule ──▶ reconcile handler (UNCHANGED)        │           └──▶ Stripe (fake / test mode)
//                                                          └──▶ outbox ──▶ fake EventBridge (PutEvents)
//
// The handlers are configured the only way they are on AWS: environment variables, read by
// lambdas/runtime/config.ts, with per-container resources in module scope (lambdas/runtime/
// resources.ts). Because they run in this process, every concurrent invocation shares that module
// scope — one warm "container" serving all pollers — so DB_POOL_MAX is sized for all of them, and
// only one pipeline may run in a process at a time (the environment is process-wide).
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import pg from 'pg';
import { DEFAULT_POLICY } from '../lambdas/payments/decisions.ts';
import { worstCaseCallMs } from '../lambdas/payments/call-budget.ts';
import { createStripeClient } from '../lambdas/payments/stripe-gateway.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { resetResources } from '../lambdas/runtime/resources.ts';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { SqsEventSource, type EventSourceCounters, type InvocationReport, type SqsHandler } from './event-source.ts';
import { startFakeEventBridge, type FakeEventBridge, type FaultRates as EventBridgeFaultRates } from './fake-eventbridge/server.ts';
import { DEMO_CONNECTED_ACCOUNTS } from './connect-demo.ts';
import { FAULT_PROFILES, startFakeStripe, type FakeStripe, type FakeStripeStats, type FaultProfileName } from './fake-stripe/server.ts';
import { createDatabase, startEmbeddedPostgres, type EmbeddedPostgresHandle } from './postgres.ts';
import { LocalSchedule, type RunReport, type ScheduleCounters, type ScheduledHandler } from './scheduler.ts';
import { startLocalSqs, type LocalSqs } from './sqs.ts';
import type { WebhookDispatcher } from './fake-stripe/webhooks.ts';
import { DEFAULT_DELIVERY_FAULTS, localWebhookSecret, startLocalWebhooks, startStripeObserver, startWebhookEndpoint, type LocalWebhookOptions, type LocalWebhooks, type WebhookEndpoint } from './stripe-events.ts';
import { controlApiTruth, fakeTruth, listApiTruth, unavailableTruth, type StripeTruth } from './stripe-truth.ts';

// ── The compressed clock ─────────────────────────────────────────────────────────────────────────

/**
 * Durations the outcome of a run depends on, shortened so that a demo reaches its end states in a
 * minute instead of a day. Not a uniform scale: each is chosen so that their ORDER is the real one —
 * search lag < early search < key window < key pruning — because the guarantees rest on that order.
 */
export interface TimeLapse {
  /** KEY_WINDOW_MS. Real: 23 h (Stripe keeps keys for at least 24 h). */
  readonly keyWindowMs: number;
  /** EARLY_SEARCH_AFTER_MS. Real: 10 min. Must exceed the search lag, or early searches see nothing. */
  readonly earlySearchAfterMs: number;
  /** The fake's Search lag. Real: "usually within a minute". */
  readonly searchLagMs: number;
  /** STRIPE_TIMEOUT_MS. Real: 10 s. */
  readonly stripeTimeoutMs: number;
  /** STRIPE_MAX_NETWORK_RETRIES. Real: 1. */
  readonly stripeMaxNetworkRetries: number;
  /** UNSETTLED_REVIEW_AFTER_MS. Real: 7 days. */
  readonly unsettledReviewAfterMs: number;
  /** The fake settles `processing` PaymentIntents after this. Real: bank-dependent, hours to days. */
  readonly processingSettleMs: number;
  /** The reconcile schedule. Real: rate(1 minute). */
  readonly reconcileEveryMs: number;
  /** RETRY_BACKOFF_SCALE: every retry delay multiplied by this. Real: 1 (2 s … 15 min for ambiguous answers). */
  readonly retryBackoffScale: number;
  /** LIST_SETTLE_MS. Real: 2 min. Default: the Stripe timeout + 0.5 s (config.ts wants ≥ STRIPE_TIMEOUT_MS). */
  readonly listSettleMs?: number;
  /** ABSENCE_PROOF_SPACING_MS. Real: 10 min. Default: the settle delay. */
  readonly proofSpacingMs?: number;
  /** REISSUE_AFTER_LAST_SEND_MS. Real: 15 min. Default: twice the settle delay. */
  readonly reissueAfterLastSendMs?: number;
  /**
   * AUTHORIZATION_VALIDITY_MS, and the fake's authorizationExpiryMs: how long an uncaptured
   * authorization lives. Real: 7 days. Default: none given (the real one, which a run never reaches).
   */
  readonly authorizationValidityMs?: number;
  /** AUTHORIZATION_EXPIRY_LOOK_MARGIN_MS. Real: 10 min. Default: a tenth of the validity. */
  readonly authorizationLookMarginMs?: number;
}

/** The List evidence timings of a time-lapse, in the real order: settle ≤ re-issue delay, all inside the key window. */
export function evidenceTimingsFor(t: TimeLapse): { listSettleMs: number; proofSpacingMs: number; reissueAfterLastSendMs: number } {
  const listSettleMs = t.listSettleMs ?? t.stripeTimeoutMs + 500;
  return { listSettleMs, proofSpacingMs: t.proofSpacingMs ?? listSettleMs, reissueAfterLastSendMs: t.reissueAfterLastSendMs ?? 2 * listSettleMs };
}

export const DEMO_TIME_LAPSE: TimeLapse = {
  keyWindowMs: 20_000,
  earlySearchAfterMs: 3_000,
  searchLagMs: 1_000,
  // Not shorter: the fake shares this process's event loop, and a loaded loop makes a 2 s timeout
  // fire on answers that were on their way (harmless — ambiguous, settled later — but noisy).
  stripeTimeoutMs: 4_000,
  stripeMaxNetworkRetries: 1,
  unsettledReviewAfterMs: 120_000,
  processingSettleMs: 2_000,
  reconcileEveryMs: 2_000,
  // Ambiguous answers retried after 0.1 s … 45 s instead of 2 s … 15 min; processing re-read after 1.5 s.
  retryBackoffScale: 0.05,
  // An authorization lapses 20 s after it was made instead of 7 days (the demo's uncaptured one is
  // recorded expired a few seconds later); its capture or cancel is sent right behind it, FIFO.
  authorizationValidityMs: 20_000,
  authorizationLookMarginMs: 2_000,
};

/** The lease must outlast the longest gateway call (config.ts refuses a shorter one). */
/**
 * UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT / …_US_BANK_ACCOUNT of a time-lapse: the real bounds
 * (DEFAULT_POLICY) scaled like the card bound (real 7 days → timeLapse.unsettledReviewAfterMs).
 */
export function unsettledByTypeFor(timeLapse: Pick<TimeLapse, 'unsettledReviewAfterMs'>): Record<string, string> {
  const ratio = timeLapse.unsettledReviewAfterMs / DEFAULT_POLICY.unsettledReviewAfterMs;
  const scaled = (ms: number | undefined) => String(Math.max(1_000, Math.round((ms ?? DEFAULT_POLICY.unsettledReviewAfterMs) * ratio)));
  return {
    UNSETTLED_REVIEW_AFTER_MS_SEPA_DEBIT: scaled(DEFAULT_POLICY.unsettledReviewAfterMsByPaymentMethodType.sepa_debit),
    UNSETTLED_REVIEW_AFTER_MS_US_BANK_ACCOUNT: scaled(DEFAULT_POLICY.unsettledReviewAfterMsByPaymentMethodType.us_bank_account),
  };
}

export function leaseMsFor(t: Pick<TimeLapse, 'stripeTimeoutMs' | 'stripeMaxNetworkRetries'>): number {
  return worstCaseCallMs({ timeoutMs: t.stripeTimeoutMs, maxNetworkRetries: t.stripeMaxNetworkRetries }) + 1_000;
}

/**
 * When the fake forgets a key (standing for Stripe's pruning "after at least 24 h"). The window is
 * checked when an operation is claimed, and the create it allows may go out, with the SDK's retries,
 * until the lease ends: pruning must wait at least window + lease, or a late retry would meet a
 * forgotten key and charge again. Real life has an hour of margin for a call of seconds; compressed,
 * the margin is spelled out here.
 */
export function keyPruneAfterMsFor(t: TimeLapse): number {
  return t.keyWindowMs + leaseMsFor(t) + 2_000;
}

/** When the fake commits a late create in a time-lapsed run: after the re-issue its proofs allow. */
export function lateCommitMsFor(t: TimeLapse): number {
  const e = evidenceTimingsFor(t);
  return e.reissueAfterLastSendMs + e.proofSpacingMs + e.listSettleMs;
}

/**
 * The watch after a re-issue, compressed like the rest: its first look one "hour" after the re-issue
 * (the key window's 23rd part), its last one "hour" after the fake has pruned the retired key — and
 * never before config.ts's floor (KEY_WINDOW_MS × 24/23).
 */
export function watchTimingsFor(t: TimeLapse): { watchFirstAfterMs: number; watchFinalAfterFirstSendMs: number } {
  const hour = Math.max(1_000, Math.round(t.keyWindowMs / 23));
  return { watchFirstAfterMs: hour, watchFinalAfterFirstSendMs: Math.max(keyPruneAfterMsFor(t) + hour, Math.ceil((t.keyWindowMs * 24) / 23)) };
}

/** "time-lapse: 23 h key window shown as 20 s, …" — pruning: whether this runtime prunes the fake's keys. */
export function describeTimeLapse(t: TimeLapse, pruning = true): string {
  const s = (ms: number) => `${Number((ms / 1000).toFixed(1))} s`;
  const window = `time-lapse: ${DEFAULT_POLICY.keyWindowMs / 3_600_000} h key window shown as ${s(t.keyWindowMs)}`;
  return pruning ? `${window}, Stripe's ≥ 24 h key pruning as ${s(keyPruneAfterMsFor(t))}` : `${window} (keys are not pruned: that Stripe is not run by us)`;
}

// ── Options ──────────────────────────────────────────────────────────────────────────────────────

export type PostgresSetup =
  /** Start embedded PostgreSQL 18 on this folder; persistent keeps it (and past runs' databases). */
  | { readonly kind: 'embedded'; readonly dataDir: string; readonly persistent: boolean; readonly keepRuns?: number }
  /** Use a running server (its user may CREATE DATABASE): the test suite's, or your own. */
  | { readonly kind: 'server'; readonly adminUrl: string };

export type StripeSetup =
  | {
      readonly kind: 'fake';
      readonly faults?: FaultProfileName;
      readonly seed?: number;
      /** Added to every /v1 answer of the fake. Default 0. */
      readonly latencyMs?: number;
    }
  /** STRIPE_API_BASE (any Stripe-compatible server) and/or a real sk_test_ key. Never a live key. */
  | {
      readonly kind: 'external';
      readonly secretKey: string;
      readonly apiBase?: string;
      /**
       * The signing secret `stripe listen --forward-to <url>` prints (whsec_…): with it, the real
       * stripe-events handler listens on a local Function URL (`webhookPort`, default any free port)
       * and Stripe's events reach it through the Stripe CLI. Without it: polling only.
       */
      readonly webhookSecret?: string;
      readonly webhookPort?: number;
    };

export interface PipelineOptions {
  readonly postgres: PostgresSetup;
  readonly stripe: StripeSetup;
  /** null: the production durations (for real Stripe, whose keys we cannot prune). Default: DEMO_TIME_LAPSE. */
  readonly timeLapse?: TimeLapse | null;
  /** Charge invocations at once (the event source's maximum concurrency). Default 8. */
  readonly pollers?: number;
  /** Records per invocation, 1-10. Default 10. */
  readonly batchSize?: number;
  /** CHARGE_CONCURRENCY: Stripe calls in flight per invocation. Default 10. */
  readonly stripeConcurrency?: number;
  /** Default PIPELINE.chargeFunctionTimeoutSeconds. */
  readonly chargeTimeoutMs?: number;
  /** Default PIPELINE.reconcileFunctionTimeoutSeconds (a compressed clock may want it shorter). */
  readonly reconcileTimeoutMs?: number;
  /** Default PIPELINE.visibilityTimeoutSeconds. */
  readonly visibilityTimeoutSeconds?: number;
  /** Default PIPELINE.maxReceiveCount. */
  readonly maxReceiveCount?: number;
  /** fauxqs port; default any free port. */
  readonly sqsPort?: number;
  /** Random PutEvents failures of the fake EventBridge; default: matching the Stripe fault profile. */
  readonly eventBridgeFaults?: EventBridgeFaultRates | null;
  /** Default: PIPELINE.reconcileSchedule's minute, or the time-lapse's period. */
  readonly reconcileEveryMs?: number;
  /** Replace a handler (poller tests); default: the real ones under lambdas/. */
  readonly handlers?: { readonly charge?: SqsHandler; readonly reconcile?: ScheduledHandler };
  /** POWERTOOLS_LOG_LEVEL of the handlers. Default 'INFO'. */
  readonly logLevel?: 'DEBUG' | 'INFO' | 'WARN' | 'ERROR' | 'SILENT';
  /** POWERTOOLS_METRICS_DISABLED. Default false (EMF lines are printed, as on Lambda). */
  readonly metricsDisabled?: boolean;
  /** More environment for the handlers (wins over everything above). */
  readonly env?: Readonly<Record<string, string>>;
  /**
   * Stripe events in: the fake Stripe delivers signed webhooks (with delivery faults matching the
   * fault profile) to a local Function URL in front of the real stripe-events handler. null: polling
   * only. Default: on with the fake Stripe, off otherwise (a real Stripe needs `stripe listen`).
   */
  readonly webhooks?: LocalWebhookOptions | null;
  /** Observers. */
  readonly onInvocation?: (report: InvocationReport) => void;
  readonly onReconcile?: (report: RunReport) => void;
  /** Problems the pipeline notices itself (receive errors, a slow shutdown). */
  readonly log?: (line: string) => void;
}

/** Per Stripe fault profile, the EventBridge faults that go with it (so the outbox has work to do). */
export const EVENT_BRIDGE_FAULTS: Record<FaultProfileName, EventBridgeFaultRates | null> = {
  none: null,
  flaky: { entryFailure: 0.02, dropResponse: 0.01 },
  chaos: { entryFailure: 0.05, callError: 0.03, dropResponse: 0.03 },
};

// ── What the pipeline looks like at a moment ─────────────────────────────────────────────────────

export interface DatabaseCounts {
  /** Charge and refund operations together (the rest of the counts too; `refunds*` says how many are refunds). */
  readonly operations: number;
  readonly succeeded: number;
  readonly failed: number;
  /** Refund operations (the duplicate remedy's included), of `operations`. */
  readonly refunds: number;
  /** Refund operations succeeded, failed or in review: of `succeeded + failed + inReview`. */
  readonly refundsSettled: number;
  readonly refundsSucceeded: number;
  /** pending or unknown, not in review: the machines still work on them. */
  readonly open: number;
  readonly pending: number;
  /** unknown, not in review, without a PaymentIntent id: an ambiguous answer, retried with the same key. */
  readonly ambiguous: number;
  /** unknown, not in review, with a PaymentIntent id: created, not settled (processing). */
  readonly unsettled: number;
  /** In review, or a refund waiting for its charge, which is in review. */
  readonly inReview: number;
  readonly rejected: number;
  readonly outboxEvents: number;
  readonly unpublished: number;
  /** When the last operation reached its end state (final, or review). */
  readonly lastSettledAt: Date | null;
  /** Watches after a re-issue whose next look is due (the sweep takes them after its due operations). */
  readonly watchesDue: number;
}

const COUNTS_SQL = `
  SELECT o.*, r.rejected, e.outbox_events, e.unpublished, w.watches_due
    FROM (SELECT count(*)::int AS operations,
                 count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded,
                 count(*) FILTER (WHERE status = 'failed')::int AS failed,
                 count(*) FILTER (WHERE kind = 'refund')::int AS refunds,
                 count(*) FILTER (WHERE kind = 'refund' AND (status IN ('succeeded', 'failed') OR human))::int AS refunds_settled,
                 count(*) FILTER (WHERE kind = 'refund' AND status = 'succeeded')::int AS refunds_succeeded,
                 count(*) FILTER (WHERE status IN ('pending', 'unknown') AND NOT human)::int AS open,
                 count(*) FILTER (WHERE status = 'pending' AND NOT human)::int AS pending,
                 count(*) FILTER (WHERE status = 'unknown' AND NOT human AND external_id IS NULL)::int AS ambiguous,
                 count(*) FILTER (WHERE status = 'unknown' AND NOT human AND external_id IS NOT NULL)::int AS unsettled,
                 count(*) FILTER (WHERE status IN ('pending', 'unknown') AND human)::int AS in_review,
                 max(updated_at) FILTER (WHERE status IN ('succeeded', 'failed') OR human) AS last_settled_at
            -- Waiting for a human: in review, or a refund whose charge is (it goes once the charge is resolved).
            FROM (SELECT p.kind, p.status, p.external_id, p.updated_at,
                         p.review_reason IS NOT NULL OR coalesce(c.review_reason IS NOT NULL AND c.status IN ('pending', 'unknown'), false) AS human
                    FROM payment_operations p LEFT JOIN payment_operations c ON c.id = p.parent_operation_id) ops) o,
         (SELECT count(*)::int AS rejected FROM rejected_messages) r,
         (SELECT count(*)::int AS outbox_events, count(*) FILTER (WHERE published_at IS NULL)::int AS unpublished
            FROM outcome_events) e,
         (SELECT count(*)::int AS watches_due FROM payment_operation_watches WHERE next_check_at <= now()) w`;

export async function readDatabaseCounts(db: pg.Pool | pg.Client): Promise<DatabaseCounts> {
  const { rows } = await db.query(COUNTS_SQL);
  const r = rows[0] as Record<string, number | Date | null>;
  return {
    operations: r.operations as number,
    succeeded: r.succeeded as number,
    failed: r.failed as number,
    refunds: r.refunds as number,
    refundsSettled: r.refunds_settled as number,
    refundsSucceeded: r.refunds_succeeded as number,
    open: r.open as number,
    pending: r.pending as number,
    ambiguous: r.ambiguous as number,
    unsettled: r.unsettled as number,
    inReview: r.in_review as number,
    rejected: r.rejected as number,
    outboxEvents: r.outbox_events as number,
    unpublished: r.unpublished as number,
    lastSettledAt: (r.last_settled_at as Date | null) ?? null,
    watchesDue: r.watches_due as number,
  };
}

export interface QueueCounts {
  /** Waiting to be received. */
  readonly waiting: number;
  /** Received and not yet deleted (being worked, or failed and waiting for the visibility timeout). */
  readonly inFlight: number;
  readonly dlq: number;
}

export interface PipelineSnapshot {
  readonly at: Date;
  readonly database: DatabaseCounts;
  readonly queue: QueueCounts;
  readonly eventSource: EventSourceCounters;
  readonly schedule: ScheduleCounters;
  /** Null for a Stripe whose counters we cannot read. */
  readonly stripe: FakeStripeStats | null;
  /** Entries the (fake) EventBridge accepted, re-sends included. */
  readonly eventsAccepted: number;
}

export interface SettledWhen {
  /** Has every message that will come been sent? (false keeps waiting, e.g. while the demo sends). */
  readonly intakeDone: () => boolean;
  readonly timeoutMs: number;
  /** Stops the wait early (Ctrl-C). */
  readonly signal?: AbortSignal;
  /** Each snapshot taken while waiting (progress view). */
  readonly onSnapshot?: (snapshot: PipelineSnapshot) => void;
  /** Default 250 ms. */
  readonly pollMs?: number;
}

export type SettleResult = { readonly kind: 'settled' | 'timeout' | 'aborted'; readonly snapshot: PipelineSnapshot };

/** Everything accepted has an end state and every outcome went out: nothing left for any machine. */
export function isSettled(s: PipelineSnapshot): boolean {
  return (
    s.queue.waiting === 0 &&
    s.queue.inFlight === 0 &&
    s.eventSource.inFlight === 0 &&
    s.database.open === 0 &&
    s.database.unpublished === 0 &&
    // Stripe still owes a create it answered 500 or left unanswered, or a look of the watch is due:
    // what either brings (a late PaymentIntent and its remedy) is part of the run.
    (s.stripe?.lateCommitsPending ?? 0) === 0 &&
    s.database.watchesDue === 0
  );
}

// ── The pipeline ─────────────────────────────────────────────────────────────────────────────────

export interface Pipeline {
  readonly runId: string;
  readonly region: string;
  readonly databaseName: string;
  readonly databaseUrl: string;
  /** A small pool of the runtime's own (observation and the ledger), separate from the handlers'. */
  readonly db: pg.Pool;
  readonly postgres: EmbeddedPostgresHandle | null;
  readonly sqs: LocalSqs;
  readonly fakeStripe: FakeStripe | null;
  readonly stripeTruth: StripeTruth;
  /** 'fake Stripe (in-process, faults: flaky, seed 42)' */
  readonly stripeDescription: string;
  readonly faults: FaultProfileName | null;
  readonly seed: number | null;
  readonly eventBridge: FakeEventBridge;
  /** Stripe events in from the fake Stripe (null: polling only, or a real Stripe). */
  readonly webhooks: LocalWebhooks | null;
  /** Stripe events in from a real Stripe through `stripe listen --forward-to` this endpoint's url (null: none). */
  readonly webhookEndpoint: WebhookEndpoint | null;
  /** Watches the fake's ledger for settle times (the webhooks' dispatcher, or an observer when they are off). */
  readonly stripeObserver: WebhookDispatcher | null;
  readonly eventSource: SqsEventSource;
  readonly schedule: LocalSchedule;
  readonly timeLapse: TimeLapse | null;
  readonly reconcileEveryMs: number;
  /** What the handlers were given (the Stripe key redacted). */
  readonly environment: Readonly<Record<string, string>>;
  readonly startedAt: Date;
  snapshot(): Promise<PipelineSnapshot>;
  /**
   * The intake only: the main queue's messages and the event source's invocations, read in this
   * process without a request. For a loop that waits for the queue to drain (bench:peers polls
   * every 100 ms): a snapshot also counts the database's tables and reads the fake Stripe's ledger,
   * work that grows with the run and would be measured as the pipeline's.
   */
  intake(): { readonly queue: Omit<QueueCounts, 'dlq'>; readonly eventSource: EventSourceCounters };
  waitUntilSettled(options: SettledWhen): Promise<SettleResult>;
  /** Stop taking work: pollers, schedule, key pruning (bounded waits). Data and servers stay up. */
  stopIntake(): Promise<{ readonly drained: boolean }>;
  /** Stop everything (idempotent): intake, the handlers' resources, the fakes, fauxqs, PostgreSQL. */
  stop(): Promise<void>;
}

let active: string | null = null;

const DEFAULT_KEEP_RUNS = 5;
const RUN_DB = /^run_\d{8}_\d{6}_[0-9a-f]{4}$/;

function runIdNow(): string {
  const iso = new Date().toISOString();
  return `${iso.slice(0, 10).replaceAll('-', '')}_${iso.slice(11, 19).replaceAll(':', '')}_${randomBytes(2).toString('hex')}`;
}

/** The handlers' settings that make a time-lapse (also what the ops tool needs to judge a review as they do). */
export function timeLapseEnvironment(timeLapse: TimeLapse): Record<string, string> {
  return {
    KEY_WINDOW_MS: String(timeLapse.keyWindowMs),
    EARLY_SEARCH_AFTER_MS: String(timeLapse.earlySearchAfterMs),
    LEASE_MS: String(leaseMsFor(timeLapse)),
    // Events a killed writer leaves leased go to the relay after this instead of a real
    // minute (the soak kills workers after their commit). The local bus answers in
    // milliseconds; a slower writer would only publish twice, with the same eventId.
    PUBLISH_LEASE_MS: '3000',
    UNSETTLED_REVIEW_AFTER_MS: String(timeLapse.unsettledReviewAfterMs),
    // The bounds of the slow payment methods shrink by the same ratio as the card bound.
    ...unsettledByTypeFor(timeLapse),
    RETRY_BACKOFF_SCALE: String(timeLapse.retryBackoffScale),
    LIST_SETTLE_MS: String(evidenceTimingsFor(timeLapse).listSettleMs),
    ABSENCE_PROOF_SPACING_MS: String(evidenceTimingsFor(timeLapse).proofSpacingMs),
    REISSUE_AFTER_LAST_SEND_MS: String(evidenceTimingsFor(timeLapse).reissueAfterLastSendMs),
    // The list's created range is in whole seconds anyway; Stripe's 5 min margin would cover a
    // compressed run's whole history.
    LIST_WINDOW_MARGIN_MS: '1000',
    // One machine, one clock: the fake Stripe and the database read the same one.
    STRIPE_CLOCK_SKEW_MS: '1000',
    REISSUE_WATCH_FIRST_AFTER_MS: String(watchTimingsFor(timeLapse).watchFirstAfterMs),
    REISSUE_WATCH_FINAL_AFTER_MS: String(watchTimingsFor(timeLapse).watchFinalAfterFirstSendMs),
    STRIPE_TIMEOUT_MS: String(timeLapse.stripeTimeoutMs),
    STRIPE_MAX_NETWORK_RETRIES: String(timeLapse.stripeMaxNetworkRetries),
    ...(timeLapse.authorizationValidityMs === undefined
      ? {}
      : {
          AUTHORIZATION_VALIDITY_MS: String(timeLapse.authorizationValidityMs),
          AUTHORIZATION_EXPIRY_LOOK_MARGIN_MS: String(timeLapse.authorizationLookMarginMs ?? Math.round(timeLapse.authorizationValidityMs / 10)),
        }),
  };
}

export async function startPipeline(options: PipelineOptions): Promise<Pipeline> {
  if (active !== null) throw new Error(`a local pipeline (${active}) is already running in this process: the handlers' environment is process-wide`);
  // The handlers refuse the local overrides (STRIPE_API_BASE, EVENTS_ENDPOINT, DB_SSL off) where
  // Lambda's own marker is set (lambdas/runtime/config.ts runsInLambda): this runtime is not Lambda and
  // never sets it, and one inherited from the shell would make every handler refuse to start.
  if (process.env.AWS_LAMBDA_FUNCTION_NAME || options.env?.AWS_LAMBDA_FUNCTION_NAME) {
    throw new Error('AWS_LAMBDA_FUNCTION_NAME is set: it marks a function running in Lambda, where the handlers refuse the local runtime\'s fakes; unset it to run the pipeline locally');
  }
  if (options.stripe.kind === 'external' && /^(sk|rk)_live_/.test(options.stripe.secretKey)) {
    throw new Error('refusing a live Stripe key: the local runtime only ever charges in test mode (sk_test_…)');
  }
  const runId = runIdNow();
  active = runId;
  const log = options.log ?? (() => {});
  const region = 'us-east-1';
  const startedAt = new Date();
  const cleanups: (() => Promise<unknown>)[] = [];
  const savedEnv = new Map<string, string | undefined>();
  const cleanup = async () => {
    for (const fn of cleanups.reverse()) await fn().catch((error: unknown) => log(`shutdown: ${String(error)}`));
    cleanups.length = 0;
    for (const [key, value] of savedEnv) {
      if (value === undefined) delete process.env[key];
      else process.env[key] = value;
    }
    savedEnv.clear();
  };

  try {
    // ── PostgreSQL: one database per run ─────────────────────────────────────────────────────
    // The fake Stripe forgets everything when the process ends. An operation left open by an
    // earlier run must never meet a new fake that has no record of it (it would look uncharged), so
    // every run gets a database of its own; earlier ones stay for inspection, the last few kept.
    let postgres: EmbeddedPostgresHandle | null = null;
    let adminUrl: string;
    if (options.postgres.kind === 'embedded') {
      await assertNoServerOn(options.postgres.dataDir);
      postgres = await startEmbeddedPostgres({ dataDir: options.postgres.dataDir, persistent: options.postgres.persistent });
      const pgHandle = postgres;
      cleanups.push(() => pgHandle.stop());
      adminUrl = postgres.adminUrl;
    } else {
      adminUrl = options.postgres.adminUrl;
    }
    const databaseName = `run_${runId}`;
    if (options.postgres.kind === 'embedded' && options.postgres.persistent) {
      await dropOldRuns(adminUrl, (options.postgres.keepRuns ?? DEFAULT_KEEP_RUNS) - 1);
    }
    await createDatabase(adminUrl, databaseName);
    const databaseUrl = withDatabase(adminUrl, databaseName);
    if (options.postgres.kind === 'server') {
      // A shared server: the database goes with the run.
      cleanups.push(() => dropDatabase(adminUrl, databaseName));
    }
    await migrate(databaseUrl, await loadMigrations(path.resolve(import.meta.dirname, '..', 'migrations')));
    const db = new pg.Pool({ connectionString: databaseUrl, max: 4, application_name: 'local-runtime' });
    db.on('error', (error) => log(`observer pool: ${error.message}`));
    // pg-pool only listens to idle clients: one dropped while checked out or being ended must not crash the run.
    db.on('connect', (client) => client.on('error', (error) => log(`observer client: ${error.message}`)));
    cleanups.push(() => db.end());

    // ── SQS ──────────────────────────────────────────────────────────────────────────────────
    const sqs = await startLocalSqs({
      region,
      ...(options.sqsPort !== undefined ? { port: options.sqsPort } : {}),
      ...(options.visibilityTimeoutSeconds !== undefined ? { visibilityTimeoutSeconds: options.visibilityTimeoutSeconds } : {}),
      ...(options.maxReceiveCount !== undefined ? { maxReceiveCount: options.maxReceiveCount } : {}),
    });
    cleanups.push(() => sqs.stop());

    // ── Stripe ───────────────────────────────────────────────────────────────────────────────
    const timeLapse = options.timeLapse === undefined ? DEMO_TIME_LAPSE : options.timeLapse;
    let fakeStripe: FakeStripe | null = null;
    let stripeTruth: StripeTruth;
    let stripeDescription: string;
    let stripeKey: string;
    let apiBase: string | undefined;
    let faults: FaultProfileName | null = null;
    let seed: number | null = null;
    if (options.stripe.kind === 'fake') {
      faults = options.stripe.faults ?? 'none';
      seed = options.stripe.seed ?? Math.floor(Math.random() * 2 ** 31);
      fakeStripe = await startFakeStripe({
        // Keyed by order and attempt, not by idempotency key: the keys are made of operation ids,
        // fresh in every run, so keyed by them one seed gave the same workload other faults.
        faults: { seed, rates: FAULT_PROFILES[faults], keyBy: 'order' },
        latencyMs: options.stripe.latencyMs ?? 0,
        searchLagMs: timeLapse?.searchLagMs ?? 0,
        processingSettleMs: timeLapse?.processingSettleMs ?? null,
        // A create the fake commits late (error_500_late_commit, in_flight_then_commit) is committed
        // this long after it was answered: after the second proof of absence and the re-issue it
        // allows (re-issue delay + a settle delay), the case the watch after a re-issue is for.
        lateCommitMs: timeLapse ? lateCommitMsFor(timeLapse) : null,
        // Stripe lets an uncaptured authorization lapse after the time-lapse's validity (as the reconciler is told).
        ...(timeLapse?.authorizationValidityMs !== undefined ? { authorizationExpiryMs: timeLapse.authorizationValidityMs } : {}),
        // The demo's connected accounts (local/connect-demo.ts): a request may act as one of them.
        connectedAccounts: [...DEMO_CONNECTED_ACCOUNTS],
      });
      const fake = fakeStripe;
      cleanups.push(() => fake.close());
      stripeTruth = fakeTruth(fakeStripe);
      stripeKey = LOCAL_FAKE_STRIPE_KEY;
      apiBase = fakeStripe.url;
      stripeDescription = `fake Stripe on ${fakeStripe.url} (faults: ${faults}, seed ${seed})`;
    } else {
      stripeKey = options.stripe.secretKey;
      apiBase = options.stripe.apiBase;
      if (apiBase) {
        stripeTruth =
          (await controlApiTruth(apiBase)) ??
          unavailableTruth(`${apiBase} has no /__fake/ control API: PaymentIntents at Stripe are not available`);
        stripeDescription = `Stripe-compatible server at ${apiBase}`;
      } else {
        if (!stripeKey.startsWith('sk_test_') && !stripeKey.startsWith('rk_test_')) throw new Error('STRIPE_SECRET_KEY must be a test-mode key (sk_test_…)');
        stripeTruth = listApiTruth(createStripeClient({ apiKey: stripeKey, timeoutMs: 20_000, maxNetworkRetries: 2 }), startedAt, 'Stripe test mode');
        stripeDescription = 'Stripe test mode (api.stripe.com)';
      }
    }

    // ── EventBridge ──────────────────────────────────────────────────────────────────────────
    const eventBridgeFaults = options.eventBridgeFaults !== undefined ? options.eventBridgeFaults : faults ? EVENT_BRIDGE_FAULTS[faults] : null;
    const eventBridge = await startFakeEventBridge(
      eventBridgeFaults ? { faultRates: { seed: (seed ?? 1) + 1, ...eventBridgeFaults } } : {},
    );
    cleanups.push(() => eventBridge.close());

    // ── The handlers' environment ────────────────────────────────────────────────────────────
    const pollers = options.pollers ?? 8;
    const reconcileEveryMs = options.reconcileEveryMs ?? timeLapse?.reconcileEveryMs ?? 60_000;
    const maxReconcileRuns = 2;
    const webhookOptions = options.webhooks !== undefined ? options.webhooks : fakeStripe ? { faults: faults && faults !== 'none' ? DEFAULT_DELIVERY_FAULTS : {}, seed: (seed ?? 1) + 2 } : null;
    const webhookSecret = webhookOptions && fakeStripe ? localWebhookSecret() : options.stripe.kind === 'external' ? (options.stripe.webhookSecret ?? null) : null;
    const env: Record<string, string> = {
      DATABASE_URL: databaseUrl,
      // One module scope serves every local invocation (see the header): room for all of them.
      DB_POOL_MAX: String(Math.min(100, pollers * 2 + maxReconcileRuns * 4)),
      STRIPE_SECRET_KEY: stripeKey,
      ...(apiBase ? { STRIPE_API_BASE: apiBase } : {}),
      EVENT_BUS_NAME: PIPELINE.eventBusName,
      EVENTS_ENDPOINT: eventBridge.url,
      AWS_REGION: region,
      CHARGE_CONCURRENCY: String(options.stripeConcurrency ?? 10),
      // The fake has no request budget; Stripe's per-endpoint limit is 25/s, its Search limit 20/s.
      RECONCILE_MAX_RPS: options.stripe.kind === 'fake' ? '50' : '20',
      RECONCILE_SEARCH_MAX_RPS: options.stripe.kind === 'fake' ? '20' : '5',
      // Below the period, so that sweeps normally do not overlap (config.ts, RECONCILE_MAX_RUN_MS).
      RECONCILE_MAX_RUN_MS: String(Math.max(500, Math.floor(reconcileEveryMs * 0.8))),
      ...(webhookSecret ? { STRIPE_WEBHOOK_SECRET: webhookSecret, STRIPE_EVENTS_INPUT: 'webhook' } : {}),
      // The fake's connected accounts: their Stripe events are taken from the first one, as a
      // deployment lists its accounts (the construct's stripeConnectedAccounts).
      ...(fakeStripe ? { STRIPE_CONNECTED_ACCOUNTS: DEMO_CONNECTED_ACCOUNTS.join(',') } : {}),
      POWERTOOLS_SERVICE_NAME: PIPELINE.serviceName,
      POWERTOOLS_METRICS_NAMESPACE: PIPELINE.metricsNamespace,
      POWERTOOLS_LOG_LEVEL: options.logLevel ?? 'INFO',
      ...(options.metricsDisabled ? { POWERTOOLS_METRICS_DISABLED: 'true' } : {}),
      ...(timeLapse ? timeLapseEnvironment(timeLapse) : {}),
      ...options.env,
    };
    for (const [key, value] of Object.entries(env)) {
      if (!savedEnv.has(key)) savedEnv.set(key, process.env[key]);
      process.env[key] = value;
    }
    // Resources cached by an earlier pipeline of this process (a pool on its database) must go.
    await resetResources();
    cleanups.push(() => resetResources());

    // Imported only now: the handlers' modules read part of their environment when they load.
    const chargeHandler = options.handlers?.charge ?? (await loadHandler<SqsHandler>('charge'));
    const reconcileHandler = options.handlers?.reconcile ?? (await loadHandler<ScheduledHandler>('reconcile'));
    let webhooks: LocalWebhooks | null = null;
    let webhookEndpoint: WebhookEndpoint | null = null;
    let stripeObserver: WebhookDispatcher | null = null;
    if (webhookSecret && fakeStripe && webhookOptions) {
      const started = await startLocalWebhooks(fakeStripe, webhookSecret, webhookOptions);
      webhooks = started;
      stripeObserver = started.dispatcher;
      cleanups.push(() => started.stop());
    } else if (webhookSecret && options.stripe.kind === 'external') {
      const endpoint = await startWebhookEndpoint(options.stripe.webhookPort ?? 0);
      webhookEndpoint = endpoint;
      cleanups.push(() => endpoint.stop());
    } else if (fakeStripe) {
      const observer = startStripeObserver(fakeStripe);
      stripeObserver = observer;
      cleanups.push(() => observer.stop());
    }

    // ── The event source, the schedule, Stripe's key pruning ─────────────────────────────────
    const eventSource = new SqsEventSource({
      client: sqs.client,
      queueUrl: sqs.queueUrl,
      queueArn: sqs.queueArn,
      region,
      handler: chargeHandler,
      functionName: 'charge',
      functionTimeoutMs: options.chargeTimeoutMs ?? PIPELINE.chargeFunctionTimeoutSeconds * 1000,
      batchSize: options.batchSize ?? PIPELINE.batchSize,
      concurrency: pollers,
      // Short polls keep an idle local run responsive; stop() aborts a pending poll anyway.
      waitTimeSeconds: 1,
      ...(options.onInvocation ? { onInvocation: options.onInvocation } : {}),
      onError: (error, during) => log(`event source ${during}: ${error instanceof Error ? error.message : String(error)}`),
    });
    const schedule = new LocalSchedule({
      handler: reconcileHandler,
      region,
      intervalMs: reconcileEveryMs,
      functionName: 'reconcile',
      maxConcurrentRuns: maxReconcileRuns,
      ...(options.reconcileTimeoutMs !== undefined ? { functionTimeoutMs: options.reconcileTimeoutMs } : {}),
      ...(options.onReconcile ? { onRun: options.onReconcile } : {}),
    });
    let pruner: NodeJS.Timeout | undefined;
    let intakeStopped: Promise<{ drained: boolean }> | null = null;
    const stopIntake = () =>
      (intakeStopped ??= (async () => {
        clearInterval(pruner);
        const [source, sweeps] = await Promise.all([eventSource.stop(15_000), schedule.stop(15_000)]);
        if (!source.drained) log(`event source: ${source.abandoned} invocation(s) still running after 15 s; stopping anyway`);
        if (!sweeps) log('reconcile: a sweep still running after 15 s; stopping anyway');
        return { drained: source.drained && sweeps };
      })());
    cleanups.push(stopIntake);

    eventSource.start();
    schedule.start();
    if (fakeStripe && timeLapse) {
      const fake = fakeStripe;
      const after = keyPruneAfterMsFor(timeLapse);
      pruner = setInterval(() => fake.pruneKeys({ olderThanMs: after }), 1_000);
      pruner.unref();
    }

    const snapshot = async (): Promise<PipelineSnapshot> => {
      const [database, stripe, dlqDepth] = await Promise.all([
        readDatabaseCounts(db),
        fakeStripe ? Promise.resolve(fakeStripe.stats()) : stripeTruth.source === 'fake-control-api' ? stripeTruth.stats().catch(() => null) : Promise.resolve(null),
        queueDepth(sqs, sqs.dlqUrl),
      ]);
      const main = inspect(sqs);
      return {
        at: new Date(),
        database,
        queue: { ...main, dlq: dlqDepth },
        eventSource: eventSource.counters(),
        schedule: schedule.counters(),
        stripe,
        eventsAccepted: eventBridge.events().length,
      };
    };

    const intake = () => ({ queue: inspect(sqs), eventSource: eventSource.counters() });

    let stopped: Promise<void> | null = null;
    const pipeline: Pipeline = {
      runId,
      region,
      databaseName,
      databaseUrl,
      db,
      postgres,
      sqs,
      fakeStripe,
      stripeTruth,
      stripeDescription,
      faults,
      seed,
      eventBridge,
      webhooks,
      webhookEndpoint,
      stripeObserver,
      eventSource,
      schedule,
      timeLapse,
      reconcileEveryMs,
      environment: { ...env, STRIPE_SECRET_KEY: redactKey(stripeKey) },
      startedAt,
      snapshot,
      intake,
      async waitUntilSettled(when) {
        const deadline = Date.now() + when.timeoutMs;
        for (;;) {
          const s = await snapshot();
          when.onSnapshot?.(s);
          if (when.intakeDone() && isSettled(s)) return { kind: 'settled', snapshot: s };
          if (when.signal?.aborted) return { kind: 'aborted', snapshot: s };
          if (Date.now() >= deadline) return { kind: 'timeout', snapshot: s };
          await sleep(when.pollMs ?? 250, undefined, when.signal ? { signal: when.signal } : {}).catch(() => {});
        }
      },
      stopIntake,
      stop: () =>
        (stopped ??= (async () => {
          await cleanup();
          active = null;
        })()),
    };
    return pipeline;
  } catch (error) {
    await cleanup();
    active = null;
    throw error;
  }
}

/** The handler module under lambdas/<name>/handler.ts, imported as Lambda would load it. */
async function loadHandler<H>(name: 'charge' | 'reconcile'): Promise<H> {
  const file = path.resolve(import.meta.dirname, '..', 'lambdas', name, 'handler.ts');
  if (!existsSync(file)) throw new Error(`lambdas/${name}/handler.ts does not exist yet: the local runtime runs the real handlers`);
  const mod = (await import(file)) as { handler?: H };
  if (typeof mod.handler !== 'function') throw new Error(`lambdas/${name}/handler.ts does not export a handler function`);
  return mod.handler;
}

/** fauxqs' own view of the queue (reads only; no receive, no visibility change). */
function inspect(sqs: LocalSqs): Omit<QueueCounts, 'dlq'> {
  const name = sqs.queueUrl.split('/').at(-1)!;
  const q = sqs.server.inspectQueue(name);
  return { waiting: (q?.messages.ready.length ?? 0) + (q?.messages.delayed.length ?? 0), inFlight: q?.messages.inflight.length ?? 0 };
}

async function queueDepth(sqs: LocalSqs, url: string): Promise<number> {
  const out = await sqs.client.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
  );
  return Number(out.Attributes?.ApproximateNumberOfMessages ?? 0) + Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
}

/** The messages of a queue as fauxqs holds them (group id = order id, and the body), for saying what is in the DLQ. */
export function queuedMessages(sqs: LocalSqs, which: 'queue' | 'dlq'): { groupId: string | null; body: string }[] {
  const name = (which === 'queue' ? sqs.queueUrl : sqs.dlqUrl).split('/').at(-1)!;
  const q = sqs.server.inspectQueue(name);
  if (!q) return [];
  return [...q.messages.ready, ...q.messages.delayed, ...q.messages.inflight.map((i) => i.message)].map((m) => ({ groupId: m.messageGroupId ?? null, body: m.body }));
}

/** Group ids (= order ids) of the messages in a queue, for "still queued" and "in the DLQ". */
export function queuedGroups(sqs: LocalSqs, which: 'queue' | 'dlq'): string[] {
  const name = (which === 'queue' ? sqs.queueUrl : sqs.dlqUrl).split('/').at(-1)!;
  const q = sqs.server.inspectQueue(name);
  if (!q) return [];
  return [...q.messages.ready, ...q.messages.delayed, ...q.messages.inflight.map((i) => i.message)].flatMap((m) =>
    m.messageGroupId ? [m.messageGroupId] : [],
  );
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}

/** The key the handlers send the in-process fake Stripe: a constant, not a secret (printed by --serve). */
export const LOCAL_FAKE_STRIPE_KEY = 'sk_test_local_runtime';

function redactKey(key: string): string {
  return key.length > 12 ? `${key.slice(0, 8)}…${key.slice(-4)}` : '…';
}

async function adminQuery(adminUrl: string, fn: (client: pg.Client) => Promise<void>): Promise<void> {
  const client = new pg.Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await fn(client);
  } finally {
    await client.end();
  }
}

async function dropDatabase(adminUrl: string, name: string): Promise<void> {
  if (!RUN_DB.test(name)) throw new Error(`not a run database: ${name}`);
  await adminQuery(adminUrl, async (c) => {
    await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  });
}

/** Keep the newest `keep` run databases of a persistent cluster; drop the rest. */
async function dropOldRuns(adminUrl: string, keep: number): Promise<void> {
  await adminQuery(adminUrl, async (c) => {
    const { rows } = await c.query<{ datname: string }>(`SELECT datname FROM pg_database WHERE datname LIKE 'run\\_%' ORDER BY datname DESC`);
    for (const { datname } of rows.filter((r) => RUN_DB.test(r.datname)).slice(Math.max(0, keep))) {
      await c.query(`DROP DATABASE IF EXISTS ${datname} WITH (FORCE)`);
    }
  });
}

/**
 * A data folder for a throwaway cluster (tests, benchmarks; pair with persistent: false):
 * `<tmp>/charges-<label>-…/pg`, so that whatever goes next to it (`npm start` puts its logs in the
 * parent) stays in a folder of its own. Not created here: initdb runs as the `postgres` OS user when
 * we are root, and must be able to create the data folder itself.
 */
export function temporaryDataDir(label = 'pipeline'): string {
  return path.join(os.tmpdir(), `charges-${label}-${process.pid}-${randomBytes(4).toString('hex')}`, 'pg');
}

/**
 * A server left running on the folder (a run killed with SIGKILL cannot stop its PostgreSQL) would
 * make the next start fail with a cryptic lock error: say what it is and how to stop it.
 */
export async function assertNoServerOn(dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return;
  const pid = Number((await readFile(pidFile, 'utf8')).split('\n')[0]);
  if (Number.isInteger(pid) && pid > 0 && isAlive(pid)) {
    throw new Error(`a PostgreSQL server (pid ${pid}) from an earlier run is still running on ${dataDir}; stop it with: kill ${pid}`);
  }
}

/** `--fresh`: delete the data folder (refused while a server still runs on it). */
export async function resetDataDir(dataDir: string): Promise<void> {
  await assertNoServerOn(dataDir);
  await rm(dataDir, { recursive: true, force: true });
}

export function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}
