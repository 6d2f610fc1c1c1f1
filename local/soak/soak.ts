// The chaos soak: the whole local pipeline (local/pipeline.ts: fauxqs FIFO queue + DLQ, the Lambda-like
// event source, the schedule, embedded PostgreSQL 18, the fake Stripe, the fake EventBridge) with the
// UNCHANGED charge and reconcile handlers running in worker processes that are SIGKILLed at chosen
// points of an attempt (./worker.ts) and at random moments; PostgreSQL restarted (clean) and crashed
// (a backend SIGKILLed: the server drops every connection and runs crash recovery); Stripe faults by
// rate (the `chaos` profile: lost responses after commit 20 %, 500s 5 %, 429s 5 %, hangs 2 %,
// processing 1 %, declines 5 %); EventBridge faults; 30 % duplicate sends (half with the producer's
// deduplication id, half as resends SQS cannot deduplicate); refunds of a fifth of the orders instead
// of their duplicate (partial, split, full, repeated, conflicting, over-refunds: the same kills and
// faults meet them); conflicting orders and poison bodies; and
// idempotency keys pruned during the run on the time-lapse clock. Then the faults stop, the
// reconciler runs until nothing changes, and the invariant checker compares the database with the
// fake Stripe's ledger.
//
//   intake ──────────────── chaos on ─────────────────▶│ faults stop │── reconcile until quiet ──▶ check
//   sends, kills, PG restarts / crashes, Stripe + EB faults, key pruning    time to quiescence ─┘
import { createHash, randomUUID } from 'node:crypto';
import { createWriteStream, type WriteStream } from 'node:fs';
import { chmod, mkdtemp } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { SendMessageBatchCommand, type SendMessageBatchRequestEntry } from '@aws-sdk/client-sqs';
import type { Context, SQSEvent } from 'aws-lambda';
import pg from 'pg';
import { worstCaseCallMs } from '../../lambdas/payments/call-budget.ts';
import { authorizationRequestMessage, chargeRequestMessage, refundRequestMessage } from '../../lambdas/producer/client.ts';
import type { AuthorizationRequest, ChargeRequest, RefundRequest } from '../../lambdas/payments/message.ts';
import type { FakeStripeStats, FaultProfileName } from '../fake-stripe/server.ts';
import { checkInvariants, formatReport, type CheckInvariantsInput, type InvariantReport } from '../invariants.ts';
import { describeTimeLapse, keyPruneAfterMsFor, queuedGroups, queuedMessages, startPipeline, type Pipeline, type TimeLapse } from '../pipeline.ts';
import { ContainerPool, KILL_POINTS, type ContainerCounters, type KillKind, type KillPlan } from './containers.ts';
import { waitForPostgres } from '../postgres.ts';
import { ANOTHER_SYSTEM_KEY_PREFIX, AnotherSystem, remediesSettled } from '../another-system.ts';
import { DEFAULT_DELIVERY_FAULTS, readStripeEventsLedger, type StripeEventsLedger } from '../stripe-events.ts';
import { mulberry32 } from '../random.ts';

export interface SoakOptions {
  readonly orders: number;
  readonly seed: number;
  /** Orders sent twice (half with the producer's dedup id, half as a resend with a fresh one). */
  readonly duplicateRate: number;
  /** Orders also sent with another amount (a producer bug): must be rejected, never charged. */
  readonly conflictRate: number;
  /**
   * Orders that get refund requests INSTEAD of a duplicate send, so that the traffic stays
   * what it was: a partial refund, two partials summing to the amount, a full one, a refund sent twice
   * (once past SQS's deduplication), the same refund id with another amount, an over-refund.
   */
  readonly refundRate: number;
  /**
   * Orders (neither refunded nor sent twice) charged with `capture: "manual"` — authorized only — and
   * then captured in full, captured in part, captured above the authorization (refused) and then in
   * part, canceled, or left to expire (their hold aged past Stripe's 7 days at the fake and in the
   * database, so that the reconciler's expiry check records it). Default 0.1.
   */
  readonly authorizationRate?: number;
  /**
   * Orders (neither refunded nor declined) charged a second time behind the pipeline's back once their
   * charge succeeded, during the intake — another system, another idempotency key, the order's
   * metadata: the duplicate-charge remedy must refund each extra PaymentIntent once. Only Stripe's
   * event tells the product, so only with webhooks on.
   */
  readonly duplicateChargeRate: number;
  /** Poison bodies per order (not JSON, against the schema). */
  readonly poisonRate: number;
  /** Invocations whose container is told to SIGKILL itself at a chosen step. */
  readonly killRate: number;
  /** Invocations whose container the soak SIGKILLs at a random moment. */
  readonly randomKillRate: number;
  /** Clean PostgreSQL restarts (fast shutdown + start) during the intake. */
  readonly pgRestarts: number;
  /**
   * PostgreSQL crashes, alternating: the postmaster SIGKILLed then started again, and a backend
   * SIGKILLed (the postmaster drops every session and runs crash recovery). Both recover from the WAL.
   */
  readonly pgCrashes: number;
  readonly faults: FaultProfileName;
  /** Charge invocations at once (event-source pollers = charge containers). */
  readonly pollers: number;
  /** Records per charge invocation (1-10). */
  readonly batchSize: number;
  /** SQS visibility timeout: how long a failed (or killed) batch stays hidden before redelivery. */
  readonly visibilityTimeoutSeconds: number;
  /** Wait for the outbox to be published too, not only for every operation to settle. */
  readonly awaitOutbox: boolean;
  /** Let the fake forget keys older than the time-lapse's pruning age (Stripe's ≥ 24 h). */
  readonly pruneKeys: boolean;
  readonly timeLapse: TimeLapse;
  /** Give up waiting for quiescence after this (the report then says "not settled"). */
  readonly quiescenceTimeoutMs: number;
  readonly intakeTimeoutMs: number;
  /**
   * Commit asynchronously (`synchronous_commit = off` on the soak's database) to reproduce what the
   * first soaks found: a PostgreSQL crash then loses the last commits (WAL still in shared memory),
   * and operations whose charge already went out vanish. Default false: synchronous, as on RDS.
   */
  readonly asyncCommit: boolean;
  /** Where the handlers are imported from (default: this repository's lambdas/). */
  readonly lambdasDir?: string;
  /**
   * Stripe events in: the fake Stripe's signed webhooks (every delivery fault on) to the real
   * stripe-events handler, in this process, through the same PostgreSQL restarts and crashes.
   * false: polling only. Default true.
   */
  readonly webhooks?: boolean;
  readonly log?: (line: string) => void;
  /**
   * Run after the verdict, while the pipeline (its database, the fake Stripe, the webhook endpoint)
   * is still up: `check` judges the database again with the verdict's inputs (and `extra`), e.g.
   * after retention ran (test/lifecycle/soak-retention.test.ts).
   */
  readonly afterCheck?: (soak: SoakAfterCheck) => Promise<void>;
}

/** What afterCheck is given. */
export interface SoakAfterCheck {
  readonly pipeline: Pipeline;
  readonly report: SoakReport;
  check(extra?: Partial<Omit<CheckInvariantsInput, 'db'>>): Promise<InvariantReport>;
}

/**
 * The soak's clocks keep the real ORDER of durations — search lag < early search < key window < key
 * pruning — and, unlike a demo, the real PROPORTION between a lease and the key window (2 min vs 23 h
 * in production): a killed worker's operation waits for its lease, and if the lease were a large part
 * of the window, most of them would reach the end of the window and go to human review (correct, but
 * not the path production takes).
 */
export const SOAK_TIME_LAPSE: TimeLapse = {
  keyWindowMs: 60_000,
  earlySearchAfterMs: 3_000,
  searchLagMs: 1_000,
  stripeTimeoutMs: 1_000,
  stripeMaxNetworkRetries: 1,
  unsettledReviewAfterMs: 120_000,
  processingSettleMs: 2_000,
  reconcileEveryMs: 2_000,
  retryBackoffScale: 0.1,
};

/**
 * The soak's clocks scaled to its size. What the key window stands for is "long enough for every
 * evidence path to finish": in production 23 h against a reconciler that comes back every minute. On
 * one machine a large run's reconciler comes back much later (a backlog of thousands of operations at
 * 20 requests/s, a loaded CPU): with a fixed 60 s window a 10,000-order run sent hundreds of
 * operations to review "the key window has passed" that production would settle — a figure of the
 * machine, not of the product. So the window grows with the run — 50 ms per order, never under 60 s
 * — and the report says which it was.
 */
/**
 * How long the soak waits for quiescence after its faults stop: at least DEFAULT_SOAK's, and two key
 * windows of its time-lapse — the window scales with the run (soakTimeLapseFor), and so does what is
 * left when the faults stop (a 10,000-order run had 1,084 operations open then, and its proofs of
 * absence, re-issues, remedies and the watches' last looks all follow the compressed key window).
 */
export function soakQuiescenceTimeoutFor(t: TimeLapse): number {
  return Math.max(DEFAULT_SOAK.quiescenceTimeoutMs, 2 * t.keyWindowMs);
}

export function soakTimeLapseFor(orders: number, base: TimeLapse = SOAK_TIME_LAPSE): TimeLapse {
  return { ...base, keyWindowMs: Math.max(base.keyWindowMs, Math.round(orders * 50)) };
}

/** CI's: a third of the size again (lease 4 s, window 12 s, keys pruned after 18 s). */
export const FAST_TIME_LAPSE: TimeLapse = {
  keyWindowMs: 12_000,
  earlySearchAfterMs: 1_500,
  searchLagMs: 500,
  stripeTimeoutMs: 500,
  stripeMaxNetworkRetries: 0,
  unsettledReviewAfterMs: 60_000,
  processingSettleMs: 1_000,
  reconcileEveryMs: 1_000,
  retryBackoffScale: 0.05,
};

export const DEFAULT_SOAK: Omit<SoakOptions, 'orders' | 'seed'> = {
  duplicateRate: 0.3,
  conflictRate: 0.01,
  refundRate: 0.2,
  duplicateChargeRate: 0.03,
  poisonRate: 0.005,
  killRate: 0.12,
  randomKillRate: 0.03,
  pgRestarts: 2,
  pgCrashes: 2,
  faults: 'chaos',
  pollers: 4,
  batchSize: 10,
  visibilityTimeoutSeconds: 8,
  awaitOutbox: true,
  pruneKeys: true,
  asyncCommit: false,
  timeLapse: SOAK_TIME_LAPSE,
  quiescenceTimeoutMs: 180_000,
  intakeTimeoutMs: 1_800_000,
};

/** The watch after a re-issue in a soak: the late commits the fake made, and what the watch did about them. */
export interface SoakWatch {
  /** Creates the fake committed after it answered (error_500_late_commit, in_flight_then_commit). */
  readonly lateCommitsMade: number;
  /** Of the PaymentIntents, those created under a generation after the operation was re-issued away from it. */
  readonly lateCommitsAfterReissue: number;
  readonly watches: number;
  readonly open: number;
  readonly looks: number;
  /** Remedy refunds the watch made (an event or a List may have made others first). */
  readonly remedies: number;
  readonly findings: number;
}

async function findingsByCause(db: pg.Pool, extra: readonly string[], lateCommits: readonly string[]): Promise<SoakReport['findingsByCause']> {
  const { rows } = await db.query<{ kind: string; payment_intent_id: string | null; reason: string; in_review: boolean }>(
    `SELECT f.kind, f.payment_intent_id, f.reason, p.review_reason IS NOT NULL AS in_review
       FROM stripe_event_findings f LEFT JOIN payment_operations p ON p.id = f.operation_id ORDER BY f.id`,
  );
  const duplicate: Record<string, number> = {};
  const lateCommit: Record<string, number> = {};
  const inReview: Record<string, number> = {};
  const unexplained: { kind: string; paymentIntentId: string | null; reason: string }[] = [];
  for (const r of rows) {
    const pi = r.payment_intent_id;
    const tally = pi !== null && extra.includes(pi) ? duplicate : pi !== null && lateCommits.includes(pi) ? lateCommit : r.in_review ? inReview : null;
    if (tally === null) unexplained.push({ kind: r.kind, paymentIntentId: r.payment_intent_id, reason: r.reason });
    else tally[r.kind] = (tally[r.kind] ?? 0) + 1;
  }
  return { duplicate, lateCommit, inReview, unexplained };
}

/** The cause of a review, from its reason: a short label (the reasons' wording is decisions.ts's). */
export function reviewCause(reason: string): string {
  const causes: readonly [RegExp, string][] = [
    [/REFUND_AUTO_REISSUE=off/, 'refund not re-issued by the machine'],
    [/the key window \([^)]*\) has passed/, 'absence proven after the key window'],
    [/key window expired/, 'Search after the key window'],
    [/MAX_AUTO_REISSUES/, 're-issues spent'],
    [/stopped before its end|more than \d+ pages/, 'List incomplete'],
    [/has failed \d+ times since the key window/, 'List failing after the key window'],
    [/duplicate-charge remedy/, 'remedy refund stands'],
    [/does not match the operation|objects for one operation|names this operation but does not match|second PaymentIntent/, 'unexplained object at Stripe'],
    [/still (processing|requires_action|pending)/, 'unsettled too long'],
    [/idempotency key/, 'idempotency-key misuse'],
  ];
  return causes.find(([pattern]) => pattern.test(reason))?.[1] ?? 'other';
}

export interface SoakReport {
  readonly ok: boolean;
  readonly settled: boolean;
  readonly seed: number;
  readonly orders: number;
  readonly timeLapse: string;
  readonly synchronousCommit: boolean;
  readonly durationMs: number;
  readonly intakeMs: number;
  /** From "faults stop" to nothing left for any machine (open 0, queue empty, outbox published). */
  readonly timeToQuiescenceMs: number | null;
  /** From "faults stop" to every outcome event published (null: not waited for, or not reached). */
  readonly timeToOutboxDrainedMs: number | null;
  readonly unpublishedEvents: number;
  readonly sends: { originals: number; duplicatesSameDedupId: number; duplicatesNewDedupId: number; conflicts: number; poison: number; refunds: number; /** Manual-capture charges among the originals. */ authorizations: number; /** Capture and cancel_authorization messages. */ authorizationRequests: number; total: number };
  /** The refunds: what was asked, what the database made of it, what Stripe holds. */
  readonly refunds: SoakRefunds;
  /** The manual-capture orders: what was asked, what the database made of it, what Stripe holds. */
  readonly authorizations: SoakAuthorizations;
  readonly stripeFaults: Readonly<Record<string, number>>;
  readonly stripe: Pick<FakeStripeStats, 'createsExecuted' | 'replays' | 'conflicts409' | 'idempotencyErrors' | 'keysPruned' | 'doubleCharges'> & { requests: number };
  readonly eventBridgeFaults: Readonly<Record<string, number>>;
  readonly kills: Readonly<Record<KillKind, number>>;
  readonly killsPlanned: Readonly<Record<KillKind, number>>;
  readonly containers: { charge: Omit<ContainerCounters, 'kills' | 'killsPlanned'>; reconcile: Omit<ContainerCounters, 'kills' | 'killsPlanned'> };
  readonly postgres: { restarts: number; crashes: number; postmasterKills: number; backendKills: number; downtimeMs: number };
  readonly eventSource: Record<string, number>;
  readonly reconcileRuns: { runs: number; errors: number; timeouts: number; overlaps: number };
  readonly queue: {
    left: number;
    dlq: number;
    /** The DLQ's messages by what they ask (the body's `type`; `poison` for the bodies sent as poison), and whether their order has an operation. */
    dlqByKind: Record<string, { withOperation: number; withoutOperation: number }>;
  };
  /** Why operations wait for a human, ids and times taken out, with counts. */
  readonly reviewReasons: Readonly<Record<string, number>>;
  /** Operations in review by cause and kind (reviewCause): what production would see, and why. */
  readonly reviewByCause: Readonly<Record<string, number>>;
  readonly watch: SoakWatch;
  /** Stripe events in (null: polling only). */
  readonly stripeEvents: StripeEventsLedger | null;
  /**
   * Every finding (stripe_event_findings, from events or the watch) by what explains it: a PaymentIntent
   * made behind the pipeline's back (the duplicates above), one Stripe committed late under a key the
   * operation had been re-issued away from (check.lateCommitIds), one about an operation in review (the
   * person is told: e.g. the watch finding the operation's own PaymentIntent succeeded after it went to
   * review as unsettled too long), or nothing the soak made — which would be a defect.
   */
  readonly findingsByCause: {
    readonly duplicate: Readonly<Record<string, number>>;
    readonly lateCommit: Readonly<Record<string, number>>;
    /** About an operation that ended waiting for a human: the finding is how that person is told. */
    readonly inReview: Readonly<Record<string, number>>;
    readonly unexplained: readonly { readonly kind: string; readonly paymentIntentId: string | null; readonly reason: string }[];
  };
  /** The List evidence path (docs/model.md#evidence-list-before-search-and-the-machines-re-issue): what it cost and how fast it settled what only it can settle. */
  readonly evidence: SoakEvidence;
  readonly check: InvariantReport;
}

export type SoakAuthorizationScenario = 'capture_full' | 'capture_partial' | 'over_capture' | 'cancel' | 'expire';

export interface SoakAuthorizations {
  readonly orders: number;
  readonly byScenario: Readonly<Partial<Record<SoakAuthorizationScenario, number>>>;
  /** Capture and cancel_authorization operations by kind and end state (`capture succeeded`, `cancel_authorization succeeded (expired)`, …). */
  readonly operations: Readonly<Record<string, number>>;
  /** Capture / cancel requests that made no operation, by the engine's reason code. */
  readonly rejected: Readonly<Record<string, number>>;
  /** The manual-capture PaymentIntents at Stripe by status (canceled split by cancellation_reason). */
  readonly atStripe: Readonly<Record<string, number>>;
  /** Captured in part: succeeded with amount_received below amount. */
  readonly partiallyCaptured: number;
  /**
   * Expire-scenario holds (PaymentIntents) aged past their validity at the fake. Every PaymentIntent of
   * an aged order that holds an authorization is aged with it, and Stripe cancels each (`automatic`):
   * an order seen holding two counts two here and one in agedOrders.
   */
  readonly aged: number;
  /** The expire-scenario orders aged (at the fake and in the database): each gets one recorded expiry. */
  readonly agedOrders: number;
  /**
   * The checker's violations split by order: on a manual-capture order, and on any other. The report
   * judges all of them (`ok`); the split says where they are.
   */
  readonly violationsByOrder: { readonly manual: Readonly<Record<string, number>>; readonly other: Readonly<Record<string, number>> };
}

export type SoakRefundScenario = 'partial' | 'split' | 'full' | 'repeat' | 'conflict' | 'over_refund';

export interface SoakRefunds {
  readonly orders: number;
  readonly byScenario: Readonly<Partial<Record<SoakRefundScenario, number>>>;
  /** Refund operations by end state (in_review: open with a review reason). */
  readonly operations: Readonly<Record<string, number>>;
  /** Refund requests that made no operation, by the engine's reason code. */
  readonly rejected: Readonly<Record<string, number>>;
  /** Refunds at Stripe by status. */
  readonly atStripe: Readonly<Record<string, number>>;
  /** refund_create + refund_retrieve + refund_list at the fake. */
  readonly stripeRequests: number;
  /** The duplicate-charge remedy: orders chosen, extra PaymentIntents that succeeded at Stripe, and those refunded by a remedy operation. */
  readonly duplicates: { readonly targeted: number; readonly made: number; readonly remedied: number };
}

export interface SoakEvidence {
  readonly listRequests: number;
  readonly autoReissues: number;
  /** Every Stripe request of the run per operation that ended succeeded or failed. */
  readonly requestsPerSettledOperation: number;
  /** Operations whose create met a 500 before Stripe executed it (replayed for the key's life). */
  readonly fiveHundredBeforeCommit: {
    readonly operations: number;
    readonly final: number;
    readonly inReview: number;
    /** From the first send to the final state, in this run's compressed time (ms). */
    readonly firstSendToFinalMs: { readonly p50: number | null; readonly p90: number | null; readonly max: number | null };
  };
}

function percentile(sorted: readonly number[], p: number): number | null {
  if (sorted.length === 0) return null;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)]!;
}

/**
 * A thousand customers, as in a real shop: the List evidence asks for ONE customer's PaymentIntents in
 * a send window, which is a handful, not the whole soak's.
 */
function paymentMethodFor(r: number, i: number): Pick<ChargeRequest, 'paymentMethod' | 'customerId'> {
  const customerId = `cus_soak_${i % 1000}`;
  if (r < 0.02) return { paymentMethod: 'pm_card_chargeDeclined', customerId };
  if (r < 0.03) return { paymentMethod: 'pm_card_insufficientFunds', customerId };
  if (r < 0.04) return { paymentMethod: 'pm_fake_processing', customerId };
  if (r < 0.045) return { paymentMethod: 'pm_card_visa', customerId: 'cus_missing' }; // refused before execution: failed, no charge
  return { paymentMethod: 'pm_card_visa', customerId };
}

/** The refund requests of one order (amounts in minor units; the order's amount is 100 … 99,999). */
function planSoakRefund(order: ChargeRequest, random: () => number): { orderId: string; scenario: SoakRefundScenario; entries: SendMessageBatchRequestEntry[] } {
  const r = random();
  const scenario: SoakRefundScenario = r < 0.35 ? 'partial' : r < 0.55 ? 'split' : r < 0.7 ? 'full' : r < 0.8 ? 'repeat' : r < 0.9 ? 'conflict' : 'over_refund';
  const part = Math.max(1, Math.floor(order.amount * (0.1 + random() * 0.6)));
  const refund = (n: number, amount: number): RefundRequest => ({ type: 'refund', orderId: order.orderId, refundId: `${order.orderId}-r${n}`, amount, reason: 'requested_by_customer' });
  const entry = (request: RefundRequest, freshDedupId = false): SendMessageBatchRequestEntry => ({
    Id: 'x',
    ...refundRequestMessage(request),
    ...(freshDedupId ? { MessageDeduplicationId: randomUUID() } : {}),
  });
  const entries =
    scenario === 'split'
      ? [entry(refund(1, part)), entry(refund(2, order.amount - part))]
      : scenario === 'full'
        ? [entry(refund(1, order.amount))]
        : scenario === 'repeat'
          ? // Twice with the producer's dedup id (SQS drops one), once past it (the database absorbs it).
            [entry(refund(1, part)), entry(refund(1, part)), entry(refund(1, part), true)]
          : scenario === 'conflict'
            ? [entry(refund(1, part)), entry(refund(1, part + 1), true)]
            : scenario === 'over_refund'
              ? [entry(refund(1, order.amount + 1))]
              : [entry(refund(1, part))];
  return { orderId: order.orderId, scenario, entries };
}

/** The capture / cancel requests of one manual-capture order (none: left to expire). */
function planSoakAuthorization(order: ChargeRequest, random: () => number): { orderId: string; scenario: SoakAuthorizationScenario; entries: SendMessageBatchRequestEntry[] } {
  const r = random();
  const scenario: SoakAuthorizationScenario = r < 0.3 ? 'capture_full' : r < 0.55 ? 'capture_partial' : r < 0.65 ? 'over_capture' : r < 0.85 ? 'cancel' : 'expire';
  const part = Math.max(1, Math.floor(order.amount * (0.1 + random() * 0.8)));
  const entry = (request: AuthorizationRequest): SendMessageBatchRequestEntry => ({ Id: 'x', ...authorizationRequestMessage(request) });
  const capture = (amount?: number) => entry({ type: 'capture', orderId: order.orderId, ...(amount !== undefined ? { amount } : {}) });
  const entries =
    scenario === 'capture_full'
      ? [capture()]
      : scenario === 'capture_partial'
        ? [capture(part)]
        : scenario === 'over_capture'
          ? [capture(order.amount + 1), capture(part)]
          : scenario === 'cancel'
            ? [entry({ type: 'cancel_authorization', orderId: order.orderId })]
            : [];
  return { orderId: order.orderId, scenario, entries };
}

/** Past Stripe's 7 days and the expiry check's 10-minute margin (lambdas/payments/authorization-expiry.ts). */
const AUTHORIZATION_AGE_MS = 8 * 24 * 3_600_000;

const POISON = ['not json', '{"orderId":"x","amount":-1}', '{"orderId":"has space","amount":1,"currency":"eur","customerId":"cus_x","paymentMethod":"pm_x"}', '[]', '{"amount":1e309}'];

export async function runSoak(options: SoakOptions): Promise<SoakReport> {
  const log = options.log ?? (() => {});
  const random = mulberry32(options.seed);
  const started = performance.now();
  const runTag = randomUUID().slice(0, 6);
  const workDir = await mkdtemp(path.join(os.tmpdir(), 'charges-soak-'));
  // PostgreSQL runs as the `postgres` OS user when we are root: it must reach its data folder.
  await chmod(workDir, 0o755);
  const workerLog: WriteStream = createWriteStream(path.join(workDir, 'workers.log'));
  log(`soak: ${options.orders} orders, seed ${options.seed}, faults ${options.faults}; ${describeTimeLapse(options.timeLapse)}; worker logs: ${path.join(workDir, 'workers.log')}`);

  // ── The chaos switches and the containers ────────────────────────────────────────────────────
  let chaos = true;
  let pools: { charge: ContainerPool; reconcile: ContainerPool } | null = null;
  const poolsNow = () => (pools ??= { charge: new ContainerPool('charge', { ...process.env }, workerLog), reconcile: new ContainerPool('reconcile', { ...process.env }, workerLog) });
  const plan = (): KillPlan => {
    if (!chaos) return { killAt: null, killAfterMs: null };
    const r = random();
    if (r < options.killRate) return { killAt: KILL_POINTS[Math.floor(random() * KILL_POINTS.length)]!, killAfterMs: null };
    if (r < options.killRate + options.randomKillRate) return { killAt: null, killAfterMs: Math.floor(random() * 400) };
    return { killAt: null, killAfterMs: null };
  };
  const charge = (event: SQSEvent, context: Context) => poolsNow().charge.invoke(event, context.getRemainingTimeInMillis(), plan()) as Promise<never>;
  const reconcile = (event: unknown, context: Context) => poolsNow().reconcile.invoke(event, context.getRemainingTimeInMillis(), plan());

  const pipeline: Pipeline = await startPipeline({
    postgres: { kind: 'embedded', dataDir: path.join(workDir, 'pg'), persistent: false },
    stripe: { kind: 'fake', faults: options.faults, seed: options.seed, latencyMs: 3 },
    webhooks: options.webhooks === false ? null : { faults: DEFAULT_DELIVERY_FAULTS, seed: options.seed + 7 },
    timeLapse: options.timeLapse,
    pollers: options.pollers,
    batchSize: options.batchSize,
    // A killed container fails its batch; SQS shows the batch again after the visibility timeout.
    visibilityTimeoutSeconds: options.visibilityTimeoutSeconds,
    chargeTimeoutMs: 20_000,
    // The reconciler's deadline bounds its sweep lease (lambdas/reconcile/sweep-lease.ts): a sweep
    // SIGKILLed here holds the Stripe budget until that deadline, as a crashed one does on AWS for the
    // function's 2 minutes. On the soak's compressed clock 2 real minutes would outlast quiescence.
    // Refunds make that wait visible: a refund that waited for its charge is sent by the next sweep
    // only, so a killed sweep held them all for its deadline. Shorter, then, but never so short that
    // config.ts refuses it: room for the worst-case Stripe call, the safety margin below and a few
    // seconds of sweep (fast clock 8 s, soak clock 11 s).
    reconcileTimeoutMs: Math.max(8_000, worstCaseCallMs({ timeoutMs: options.timeLapse.stripeTimeoutMs, maxNetworkRetries: options.timeLapse.stripeMaxNetworkRetries }) + 1_000 + 3_000),
    handlers: { charge, reconcile },
    logLevel: 'ERROR',
    metricsDisabled: true,
    env: {
      // One pool per container process (the pipeline sizes it for one shared in-process container).
      DB_POOL_MAX: '3',
      DB_CONNECT_TIMEOUT_MS: '2000',
      DB_STATEMENT_TIMEOUT_MS: '10000',
      CHARGE_SAFETY_MARGIN_MS: '1000',
      RECONCILE_SAFETY_MARGIN_MS: '1000',
      ...(options.lambdasDir ? { SOAK_LAMBDAS_DIR: options.lambdasDir } : {}),
    },
    log: (line) => log(`pipeline: ${line}`),
  });
  const fake = pipeline.fakeStripe!;
  const postgres = pipeline.postgres!;
  const stopPruning = () => {
    // The pipeline's pruner runs every second; without pruning, keys simply outlive the soak.
    if (!options.pruneKeys) fake.pruneKeys = () => 0;
  };
  stopPruning();
  {
    // Per-database settings override the server's command line; sessions opened before this are
    // ended so that every connection commits as asked.
    const setting = options.asyncCommit ? 'off' : 'on';
    const c = new pg.Client({ connectionString: postgres.adminUrl });
    await c.connect();
    await c.query(`ALTER DATABASE ${pipeline.databaseName} SET synchronous_commit = ${setting}`);
    await c.query(`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, [pipeline.databaseName]);
    await c.end();
    const probe = new pg.Client({ connectionString: pipeline.databaseUrl });
    await probe.connect();
    const { rows } = await probe.query<{ synchronous_commit: string }>('SHOW synchronous_commit');
    await probe.end();
    if (rows[0]?.synchronous_commit !== setting) throw new Error(`synchronous_commit is ${rows[0]?.synchronous_commit} on the soak database, not ${setting}`);
  }
  log(`pipeline up: ${pipeline.stripeDescription}; keys pruned after ${keyPruneAfterMsFor(options.timeLapse)} ms`);

  // ── The messages ─────────────────────────────────────────────────────────────────────────────
  const entries: SendMessageBatchRequestEntry[] = [];
  const sentOrderIds: string[] = [];
  const sends = { originals: 0, duplicatesSameDedupId: 0, duplicatesNewDedupId: 0, conflicts: 0, poison: 0, refunds: 0, authorizations: 0, authorizationRequests: 0, total: 0 };
  /** Per refunded order, its refund messages in the order they must reach the queue (after the charge). */
  const refundPlans: { orderId: string; scenario: SoakRefundScenario; entries: SendMessageBatchRequestEntry[] }[] = [];
  const carriesCharge = new Map<SendMessageBatchRequestEntry, string>();
  const chargeRequests: ChargeRequest[] = [];
  /** Per manual-capture order, its capture / cancel messages (after the charge, as refunds). */
  const authorizationPlans: { orderId: string; scenario: SoakAuthorizationScenario; entries: SendMessageBatchRequestEntry[] }[] = [];
  // A PRNG of its own, so that the rest of the run's choices stay as they were.
  const pickAuthorization = mulberry32(options.seed ^ 0xa07);
  const authorizationRate = options.authorizationRate ?? 0.1;
  for (let i = 0; i < options.orders; i++) {
    const base: ChargeRequest = { orderId: `soak-${runTag}-${i}`, amount: 100 + Math.floor(random() * 99_900), currency: 'eur', ...paymentMethodFor(random(), i) };
    const manual = pickAuthorization() < authorizationRate;
    const request: ChargeRequest = manual ? { ...base, capture: 'manual' } : base;
    const message = chargeRequestMessage(request);
    sentOrderIds.push(request.orderId);
    chargeRequests.push(request);
    const original = { Id: 'x', ...message };
    entries.push(original);
    carriesCharge.set(original, request.orderId);
    sends.originals++;
    const refunded = random() < options.refundRate;
    if (manual) {
      sends.authorizations++;
      // Its captures and cancel instead of a refund or a duplicate (the draws above are made all the same).
      random();
      authorizationPlans.push(planSoakAuthorization(request, pickAuthorization));
    } else if (refunded) {
      refundPlans.push(planSoakRefund(request, random));
    } else if (random() < options.duplicateRate) {
      if (random() < 0.5) {
        const repeat = { Id: 'x', ...message };
        entries.push(repeat);
        carriesCharge.set(repeat, request.orderId);
        sends.duplicatesSameDedupId++;
      } else {
        entries.push({ Id: 'x', ...message, MessageDeduplicationId: randomUUID() });
        sends.duplicatesNewDedupId++;
      }
    }
    if (random() < options.conflictRate) {
      entries.push({ Id: 'x', ...chargeRequestMessage({ ...request, amount: request.amount + 1 }), MessageDeduplicationId: randomUUID() });
      sends.conflicts++;
    }
    if (random() < options.poisonRate) {
      entries.push({ Id: 'x', MessageBody: POISON[Math.floor(random() * POISON.length)]!, MessageGroupId: `poison-${runTag}-${i}`, MessageDeduplicationId: randomUUID() });
      sends.poison++;
    }
  }
  // The orders to charge again behind the pipeline's back (a PRNG of its own: the rest of the run is unchanged).
  const refundedOrders = new Set(refundPlans.map((p) => p.orderId));
  const pickDuplicate = mulberry32(options.seed ^ 0xd0b1e);
  // Candidates in the PRNG's order: a target whose charge never succeeds (declined, or in review on
  // the compressed clock) or whose second charge Stripe declines is replaced by the next candidate,
  // so that the run makes the extra PaymentIntents it planned whatever the chaos did to the first
  // picks (test/proof/soak once made none of 3: every target's charge had ended in review).
  const eligible = (options.webhooks === false ? [] : chargeRequests).filter((r) => !refundedOrders.has(r.orderId) && r.capture === undefined && r.paymentMethod === 'pm_card_visa' && r.customerId !== 'cus_missing');
  const duplicatesTargeted = eligible.filter(() => pickDuplicate() < options.duplicateChargeRate).length;
  const candidates = eligible.map((r) => ({ r, k: pickDuplicate() })).sort((a, b) => a.k - b.k).map((x) => x.r.orderId);
  const another = new AnotherSystem(fake.url, { maxNetworkRetries: 2, timeoutMs: 2_000 });
  /**
   * Charge again, behind the pipeline's back, candidates whose charge operation has succeeded, until
   * Stripe holds `duplicatesTargeted` extra PaymentIntents that charged or may (processing).
   */
  const chargeAgain = async (): Promise<void> => {
    const wanted = duplicatesTargeted - byAnotherSystem('succeeded').length - byAnotherSystem('processing').length;
    if (wanted <= 0 || candidates.length === 0) return;
    // Under the same Stripe faults: a declined one charges nothing, a processing one succeeds later;
    // Stripe's record says what came of it. A database fault leaves the candidates for the next call.
    const charged = await another.chargeAgain(pipeline.db, candidates, wanted).catch(() => []);
    for (const { orderId } of charged) candidates.splice(candidates.indexOf(orderId), 1);
  };
  const byAnotherSystem = (status: string) => fake.paymentIntents().filter((pi) => pi.idempotencyKey?.startsWith(ANOTHER_SYSTEM_KEY_PREFIX) && pi.status === status);
  const extraCharges = () => byAnotherSystem('succeeded');
  /** Every extra PaymentIntent that charged has its remedy refund final (or in review). */
  const remediesDone = async (): Promise<boolean> => {
    // One still processing at Stripe may yet charge (targets whose charge did not succeed are not charged again).
    if (byAnotherSystem('processing').length > 0) return false;
    return remediesSettled(pipeline.db, extraCharges().map((pi) => pi.id));
  };
  // Orders left to expire: once authorized (their charge operation succeeded with a requires_capture
  // PaymentIntent), their hold is aged past Stripe's validity at the fake and their first send as far
  // back in the database — days passing for them alone — so that the reconciler's expiry check (the
  // real one, default validity) finds each lapsed, retrieves it and records the expiry.
  const toExpire = new Set(authorizationPlans.filter((p) => p.scenario === 'expire').map((p) => p.orderId));
  const aged = new Set<string>();
  const agedHolds = new Set<string>();
  const ageExpiring = async (): Promise<void> => {
    if (aged.size === toExpire.size) return;
    const held = fake.paymentIntents().filter((pi) => pi.status === 'requires_capture' && toExpire.has(pi.metadata?.order_id ?? '') && !aged.has(pi.metadata?.order_id ?? ''));
    if (held.length === 0) return;
    const orderIds = held.map((pi) => pi.metadata!.order_id!);
    // A final operation cannot change (migrations/001's guard): the soak, which owns its database,
    // lifts the guard for this one transaction on one connection — DDL is transactional, so no other
    // session ever sees it off — to move only the first send's time, as test/support/db.ts moves a trail.
    const ageInDatabase = async (): Promise<{ rows: { order_id: string }[] }> => {
      const client = await pipeline.db.connect();
      try {
        await client.query('BEGIN');
        await client.query('ALTER TABLE payment_operations DISABLE TRIGGER payment_operations_guard');
        const out = await client.query<{ order_id: string }>(
          `UPDATE payment_operations SET first_attempted_at = first_attempted_at - $2::bigint * interval '1 millisecond'
            WHERE kind = 'charge' AND capture_method = 'manual' AND status = 'succeeded' AND order_id = ANY($1::text[]) RETURNING order_id`,
          [orderIds, AUTHORIZATION_AGE_MS],
        );
        await client.query('ALTER TABLE payment_operations ENABLE TRIGGER payment_operations_guard');
        await client.query('COMMIT');
        return out;
      } catch (error) {
        await client.query('ROLLBACK').catch(() => {});
        throw error;
      } finally {
        client.release();
      }
    };
    const { rows } = await ageInDatabase()
      .catch((error: unknown) => {
        log(`authorizations: aging failed (${error instanceof Error ? error.message : String(error)}); tried again`);
        return { rows: [] as { order_id: string }[] };
      });
    const done = new Set(rows.map((r) => r.order_id));
    for (const pi of held) {
      if (!done.has(pi.metadata!.order_id!)) continue;
      fake.ageAuthorization(pi.id, AUTHORIZATION_AGE_MS);
      agedHolds.add(pi.id);
      aged.add(pi.metadata!.order_id!);
    }
  };
  /** Every aged hold's expiry recorded (a cancel_authorization operation of its charge, final). */
  const expiriesRecorded = async (): Promise<boolean> => {
    // A hold still to age (its charge operation authorized, not yet aged) is work left too; one whose
    // charge operation waits for a person (in review) is not aged, and waits with it.
    const toAge = fake.paymentIntents().filter((pi) => pi.status === 'requires_capture' && toExpire.has(pi.metadata?.order_id ?? '') && !aged.has(pi.metadata?.order_id ?? ''));
    if (toAge.length > 0) {
      const { rows: [waiting] } = await pipeline.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM payment_operations WHERE kind = 'charge' AND capture_method = 'manual' AND status = 'succeeded' AND external_id = ANY($1::text[])`,
        [toAge.map((pi) => pi.id)],
      );
      if ((waiting?.n ?? 1) > 0) return false;
    }
    if (aged.size === 0) return true;
    const { rows } = await pipeline.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM payment_operations c
        WHERE c.kind = 'charge' AND c.order_id = ANY($1::text[])
          AND NOT EXISTS (SELECT 1 FROM payment_operations s WHERE s.parent_operation_id = c.id AND s.kind = 'cancel_authorization' AND s.status IN ('succeeded', 'failed'))`,
      [[...aged]],
    );
    return (rows[0]?.n ?? 1) === 0;
  };
  // Shuffled: duplicates and conflicts arrive in any order relative to their original.
  for (let i = entries.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  // Refunds go after their charge (same FIFO group), at a random later point: a refund's chunk is sent
  // once the chunk holding its charge has been accepted. A refund reaching the queue first would only
  // be rejected (no charge yet), which is right but tests nothing.
  const chunks: { entries: SendMessageBatchRequestEntry[]; after: number[] }[] = [];
  for (let i = 0; i < entries.length; i += 10) chunks.push({ entries: entries.slice(i, i + 10), after: [] });
  // The first chunk holding the charge's own message (the original, or its repeat with the same dedup id).
  const chargeChunk = new Map<string, number>();
  chunks.forEach((c, k) =>
    c.entries.forEach((e) => {
      const orderId = carriesCharge.get(e);
      if (orderId !== undefined && !chargeChunk.has(orderId)) chargeChunk.set(orderId, k);
    }),
  );
  const refundChunks: { at: number; chunk: { entries: SendMessageBatchRequestEntry[]; after: number[] } }[] = [];
  for (const plan of [...refundPlans, ...authorizationPlans.filter((p) => p.entries.length > 0)]) {
    const after = chargeChunk.get(plan.orderId)!;
    // A plan's messages stay together, in order, in one chunk of their own (at most 3 entries).
    refundChunks.push({ at: after + 1 + Math.floor(random() * Math.max(1, chunks.length - after)), chunk: { entries: plan.entries, after: [after] } });
  }
  refundChunks.sort((a, b) => a.at - b.at);
  const allChunks: typeof chunks = [];
  for (let k = 0, r = 0; k <= chunks.length; k++) {
    // Refund chunks keep pointing at their charge chunk's index in `chunks`: re-map once laid out.
    while (r < refundChunks.length && refundChunks[r]!.at <= k) allChunks.push(refundChunks[r++]!.chunk);
    if (k < chunks.length) allChunks.push(chunks[k]!);
  }
  const position = new Map(chunks.map((c, k) => [k, allChunks.indexOf(c)]));
  for (const c of allChunks) c.after = c.after.map((k) => position.get(k)!);
  sends.refunds = refundPlans.reduce((n, p) => n + p.entries.length, 0);
  sends.authorizationRequests = authorizationPlans.reduce((n, p) => n + p.entries.length, 0);
  sends.total = entries.length + sends.refunds + sends.authorizationRequests;

  let sending = true;
  const sender = (async () => {
    const accepted = allChunks.map(() => Promise.withResolvers<void>());
    let next = 0;
    await Promise.all(
      Array.from({ length: 4 }, async () => {
        while (next < allChunks.length) {
          const index = next++;
          const { entries: raw, after } = allChunks[index]!;
          await Promise.all(after.map((k) => accepted[k]!.promise));
          const chunk = raw.map((e, j) => ({ ...e, Id: `e${j}` }));
          for (let attempt = 0; ; attempt++) {
            try {
              const out = await pipeline.sqs.client.send(new SendMessageBatchCommand({ QueueUrl: pipeline.sqs.queueUrl, Entries: chunk }));
              if ((out.Failed ?? []).length > 0) throw new Error(`${out.Failed!.length} entries failed`);
              break;
            } catch (error) {
              if (attempt >= 5) throw error;
              await sleep(100 * 2 ** attempt);
            }
          }
          accepted[index]!.resolve();
        }
      }),
    );
    sending = false;
  })();

  // ── PostgreSQL: restarts and crashes spread over the intake ──────────────────────────────────
  const pgEvents: ('restart' | 'crash')[] = [];
  for (let i = 0; i < Math.max(options.pgRestarts, options.pgCrashes); i++) {
    if (i < options.pgRestarts) pgEvents.push('restart');
    if (i < options.pgCrashes) pgEvents.push('crash');
  }
  const pgStats = { restarts: 0, crashes: 0, postmasterKills: 0, backendKills: 0, downtimeMs: 0 };
  const admin = () => new pg.Client({ connectionString: postgres.adminUrl, connectionTimeoutMillis: 2000 });
  const waitUntilUp = () => waitForPostgres(postgres.adminUrl, 10 * 60_000);
  const pgFault = async (kind: 'restart' | 'crash') => {
    const t = performance.now();
    if (kind === 'restart') {
      await postgres.restart();
      pgStats.restarts++;
    } else if (pgStats.crashes % 2 === 0) {
      // The postmaster dies (SIGKILL): no shutdown checkpoint; the next start recovers from the WAL.
      await postgres.kill();
      await sleep(200);
      await postgres.restart();
      pgStats.crashes++;
      pgStats.postmasterKills++;
    } else {
      // One backend dies (SIGKILL): the postmaster treats it as a crash — every session is dropped
      // and the cluster goes through crash recovery, all while the postmaster itself lives on.
      const c = admin();
      c.on('error', () => {});
      await c.connect();
      const { rows } = await c.query<{ pid: number }>(`SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1`);
      const pid = rows[0]?.pid ?? (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      process.kill(pid, 'SIGKILL');
      await c.end().catch(() => {});
      await sleep(200);
      pgStats.crashes++;
      pgStats.backendKills++;
    }
    await waitUntilUp();
    pgStats.downtimeMs += performance.now() - t;
    log(`postgres ${kind}: back after ${Math.round(performance.now() - t)} ms`);
  };

  // ── Intake, under chaos ──────────────────────────────────────────────────────────────────────
  const progress = async (): Promise<number> => {
    try {
      const { rows } = await pipeline.db.query<{ n: number }>(
        `SELECT (SELECT count(*) FROM payment_operations WHERE kind = 'charge') + (SELECT count(DISTINCT order_id) FROM rejected_messages WHERE order_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM payment_operations p WHERE p.order_id = rejected_messages.order_id)) AS n`,
      );
      return Number(rows[0]!.n) / options.orders;
    } catch {
      return -1; // the database is down right now
    }
  };
  const intakeDeadline = Date.now() + options.intakeTimeoutMs;
  let nextPgEvent = 0;
  let lastLog = 0;
  for (;;) {
    await sleep(250);
    await chargeAgain();
    await ageExpiring();
    const done = await progress();
    if (done >= 0 && nextPgEvent < pgEvents.length && done >= (nextPgEvent + 1) / (pgEvents.length + 1)) {
      await pgFault(pgEvents[nextPgEvent++]!);
    }
    if (Date.now() - lastLog > 5_000) {
      lastLog = Date.now();
      const c = poolsNow().charge.counters;
      log(`intake: ${Math.max(0, Math.round(done * 100))} % of orders recorded; kills ${Object.values(c.kills).reduce((a, b) => a + b, 0)}; stripe requests ${fake.stats().requests.total}`);
    }
    if (!sending && done >= 0) {
      const snap = await pipeline.snapshot().catch(() => null);
      if (snap && snap.queue.waiting === 0 && snap.queue.inFlight === 0 && snap.eventSource.inFlight === 0 && nextPgEvent >= pgEvents.length) break;
    }
    if (Date.now() > intakeDeadline) {
      log('intake: time limit reached');
      break;
    }
  }
  await sender;
  const intakeMs = performance.now() - started;

  // ── Faults stop; the reconciler runs until nothing changes ───────────────────────────────────
  chaos = false;
  fake.setFaultRates({});
  pipeline.eventBridge.setFaultRates(null);
  const faultsStoppedAt = performance.now();
  log('faults stopped: no more kills, Stripe and EventBridge faults off; waiting for quiescence');
  // Two moments: every operation final or in review with nothing left in the queue (the promise),
  // and every outcome event published (the outbox drained).
  let settledAt: number | null = null;
  let drainedAt: number | null = null;
  const quiescenceDeadline = Date.now() + options.quiescenceTimeoutMs;
  // Late commits (the fake commits a create after it answered) are the one thing the watch after a
  // re-issue can find here. Once none is pending at the fake, the watches' remaining looks are brought
  // forward — as if their hour and their 25 hours had passed — and quiescence waits for them: a late
  // commit after the last look would otherwise be judged before any look could see it.
  let watchesBroughtForward = false;
  const watchesDue = async () =>
    Number((await pipeline.db.query<{ n: number }>('SELECT count(*)::int AS n FROM payment_operation_watches WHERE next_check_at <= now()')).rows[0]?.n ?? 0);
  // A step of this loop that never settles would stall the soak without a word (one run did, with no
  // timer and no pool request pending): a watchdog names the step it waits on, every 30 s, and
  // abandons nothing (a step may hold a transaction of its own).
  let step = 'snapshot';
  let stepSince = Date.now();
  const enter = (name: string) => {
    step = name;
    stepSince = Date.now();
  };
  const watchdog = setInterval(() => {
    const waited = Date.now() - stepSince;
    if (waited >= 30_000) log(`quiescence: still waiting on ${step} after ${Math.round(waited / 1000)} s`);
  }, 30_000);
  watchdog.unref();
  for (;;) {
    enter('snapshot');
    const snap = await pipeline.snapshot().catch(() => null);
    if (snap) {
      enter('charge again');
      await chargeAgain();
      enter('age expiring holds');
      await ageExpiring().catch(() => {});
      enter('remedies and expiries');
      let opsSettled =
        snap.database.open === 0 && snap.queue.waiting === 0 && snap.queue.inFlight === 0 && snap.eventSource.inFlight === 0 && (await remediesDone().catch(() => false)) &&
        (await expiriesRecorded().catch(() => false));
      const late = fake.stats();
      enter('watches');
      if (opsSettled && late.lateCommitsPending === 0 && late.lateCommitsMade > 0 && !watchesBroughtForward) {
        await pipeline.db.query('UPDATE payment_operation_watches SET next_check_at = now() WHERE next_check_at > now()');
        watchesBroughtForward = true;
      }
      opsSettled &&= late.lateCommitsPending === 0 && (!watchesBroughtForward || (await watchesDue().catch(() => 1)) === 0);
      if (opsSettled) settledAt ??= performance.now();
      else settledAt = null;
      if (opsSettled && snap.database.unpublished === 0) drainedAt ??= performance.now();
      if (settledAt !== null && (!options.awaitOutbox || drainedAt !== null)) break;
      if (Date.now() - lastLog > 5_000) {
        lastLog = Date.now();
        const d = snap.database;
        log(`quiescence: open ${d.open} (ambiguous ${d.ambiguous}, unsettled ${d.unsettled}), review ${d.inReview}, unpublished ${d.unpublished}, queue ${snap.queue.waiting}+${snap.queue.inFlight}`);
      }
    }
    if (Date.now() > quiescenceDeadline) {
      log('quiescence: time limit reached');
      break;
    }
    enter('sleep');
    await sleep(250);
  }
  clearInterval(watchdog);
  const settled = settledAt !== null;
  const timeToQuiescenceMs = settledAt === null ? null : Math.round(settledAt - faultsStoppedAt);
  const timeToOutboxDrainedMs = drainedAt === null ? null : Math.round(drainedAt - faultsStoppedAt);
  await pipeline.stopIntake();

  // ── The verdict ──────────────────────────────────────────────────────────────────────────────
  const dlqOrderIds = queuedGroups(pipeline.sqs, 'dlq');
  const dlqByKind = await dlqMessagesByKind(pipeline.db, queuedMessages(pipeline.sqs, 'dlq'));
  const left = queuedGroups(pipeline.sqs, 'queue').length;
  const checkInput: CheckInvariantsInput = {
    db: pipeline.db,
    paymentIntents: fake.paymentIntents(),
    // The net-amount invariant: Stripe's refunds — the requested ones and the remedies' — against the ledger's.
    refunds: fake.refunds(),
    sentOrderIds,
    // Every refund request the sender put on the queue (it throws when a chunk cannot be sent): each
    // must end as its refund operation or its rejection (lost_refund).
    // With the SHA-256 of each body as sent: a rejection whose raw body retention removed still matches.
    sentRefunds: refundPlans.flatMap((plan) =>
      plan.entries.map((e) => {
        const { orderId, refundId } = JSON.parse(e.MessageBody!) as RefundRequest;
        return { orderId, refundId, bodySha256: createHash('sha256').update(e.MessageBody!, 'utf8').digest('hex') };
      }),
    ),
    dlqOrderIds,
    requireQuiescent: true,
  };
  const check = await checkInvariants(checkInput);
  const stats = fake.stats();
  const refunds = await soakRefunds(pipeline.db, refundPlans, fake.refunds(), stats, { targeted: duplicatesTargeted, extra: extraCharges().map((pi) => pi.id) });
  const manualOrders = new Set(authorizationPlans.map((p) => p.orderId));
  const violationsByOrder = { manual: {} as Record<string, number>, other: {} as Record<string, number> };
  for (const v of check.violations) {
    const side = v.orderId !== undefined && manualOrders.has(v.orderId) ? violationsByOrder.manual : violationsByOrder.other;
    side[v.kind] = (side[v.kind] ?? 0) + 1;
  }
  const authorizations = { ...(await soakAuthorizations(pipeline.db, authorizationPlans, fake.paymentIntents(), { holds: agedHolds.size, orders: aged.size })), violationsByOrder };
  const reviewReasons: Record<string, number> = {};
  const reviewByCause: Record<string, number> = {};
  for (const { review_reason, kind } of (await pipeline.db.query<{ review_reason: string; kind: string }>(`SELECT review_reason, kind FROM payment_operations WHERE review_reason IS NOT NULL`)).rows) {
    const cause = `${reviewCause(review_reason)} (${kind})`;
    reviewByCause[cause] = (reviewByCause[cause] ?? 0) + 1;
    const reason = review_reason
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, '<id>')
      .replace(/\bpi_[A-Za-z0-9]+/g, 'pi_…')
      .replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, '<time>')
      .replace(/payment-op:<id>(:g\d+)?/g, 'payment-op:<id>')
      .slice(0, 160);
    reviewReasons[reason] = (reviewReasons[reason] ?? 0) + 1;
  }
  // ── The List evidence figures ──────────────────────────────────────────────────────────────
  const met500 = [...new Set(fake.requests().filter((r) => r.fault === 'error_500_before_commit' && r.operationId !== null).map((r) => r.operationId!))];
  const { rows: evidenceRows } = await pipeline.db.query<{ status: string; review: boolean; ms: number | null }>(
    `SELECT p.status, p.review_reason IS NOT NULL AS review,
            (extract(epoch FROM p.settled_at - min(e.occurred_at)) * 1000)::float8 AS ms
       FROM payment_operations p JOIN payment_operation_events e ON e.operation_id = p.id AND e.action = 'attempt_started'
      WHERE p.id = ANY($1::uuid[])
      GROUP BY p.id`,
    [met500],
  );
  const toFinal = evidenceRows.flatMap((r) => (r.ms === null ? [] : [Math.round(r.ms)])).sort((a, b) => a - b);
  const { rows: reissueRows } = await pipeline.db.query<{ n: number }>(`SELECT count(*)::int AS n FROM payment_operation_events WHERE action = 'auto_reissued'`);
  // The watch after a re-issue, and the late commits it is for.
  const { rows: [watchRow] } = await pipeline.db.query<{ watches: number; open: number; looks: number; remedies: number; findings: number }>(
    `SELECT (SELECT count(*)::int FROM payment_operation_watches) AS watches,
            (SELECT count(*)::int FROM payment_operation_watches WHERE next_check_at IS NOT NULL) AS open,
            (SELECT count(*)::int FROM payment_operation_events WHERE action = 'watch_checked') AS looks,
            (SELECT count(*)::int FROM payment_operation_events WHERE action = 'requested' AND detail->>'evidence' = 'watch') AS remedies,
            (SELECT count(*)::int FROM stripe_event_findings WHERE source = 'watch') AS findings`,
  );
  const watch: SoakWatch = {
    lateCommitsMade: stats.lateCommitsMade,
    lateCommitsAfterReissue: check.lateCommits,
    watches: watchRow?.watches ?? 0,
    open: watchRow?.open ?? 0,
    looks: watchRow?.looks ?? 0,
    remedies: watchRow?.remedies ?? 0,
    findings: watchRow?.findings ?? 0,
  };
  const settledOperations = check.byStatus.succeeded + check.byStatus.failed;
  const evidence: SoakEvidence = {
    listRequests: fake.stats().requests.list,
    autoReissues: reissueRows[0]?.n ?? 0,
    requestsPerSettledOperation: settledOperations === 0 ? 0 : Math.round((fake.stats().requests.total / settledOperations) * 100) / 100,
    fiveHundredBeforeCommit: {
      operations: met500.length,
      final: toFinal.length,
      inReview: evidenceRows.filter((r) => r.review).length,
      firstSendToFinalMs: { p50: percentile(toFinal, 50), p90: percentile(toFinal, 90), max: toFinal.at(-1) ?? null },
    },
  };
  const eventBridgeFaults: Record<string, number> = {};
  for (const call of pipeline.eventBridge.calls()) {
    if (call.outcome === 'accepted' || call.outcome === 'rejected') continue;
    eventBridgeFaults[call.outcome] = (eventBridgeFaults[call.outcome] ?? 0) + (call.outcome === 'partial' ? call.failedEntryCount : 1);
  }
  const es = pipeline.eventSource.counters();
  const sc = pipeline.schedule.counters();
  const p = poolsNow();
  const strip = ({ kills: _k, killsPlanned: _p, ...rest }: ContainerCounters) => ({ ...rest });
  const kills = Object.fromEntries(Object.keys(p.charge.counters.kills).map((k) => [k, p.charge.counters.kills[k as KillKind] + p.reconcile.counters.kills[k as KillKind]])) as Record<KillKind, number>;
  const killsPlanned = Object.fromEntries(Object.keys(p.charge.counters.killsPlanned).map((k) => [k, p.charge.counters.killsPlanned[k as KillKind] + p.reconcile.counters.killsPlanned[k as KillKind]])) as Record<KillKind, number>;
  const report: SoakReport = {
    ok: check.ok && settled,
    settled,
    seed: options.seed,
    orders: options.orders,
    timeLapse: describeTimeLapse(options.timeLapse),
    synchronousCommit: !options.asyncCommit,
    durationMs: Math.round(performance.now() - started),
    intakeMs: Math.round(intakeMs),
    timeToQuiescenceMs,
    timeToOutboxDrainedMs,
    unpublishedEvents: (await pipeline.snapshot().catch(() => null))?.database.unpublished ?? -1,
    sends,
    refunds,
    authorizations,
    stripeFaults: Object.fromEntries(Object.entries(stats.faults).filter(([, n]) => n > 0)),
    stripe: {
      requests: stats.requests.total,
      createsExecuted: stats.createsExecuted,
      replays: stats.replays,
      conflicts409: stats.conflicts409,
      idempotencyErrors: stats.idempotencyErrors,
      keysPruned: stats.keysPruned,
      doubleCharges: stats.doubleCharges,
    },
    eventBridgeFaults,
    kills,
    killsPlanned,
    containers: { charge: strip(p.charge.counters), reconcile: strip(p.reconcile.counters) },
    postgres: { ...pgStats, downtimeMs: Math.round(pgStats.downtimeMs) },
    eventSource: { batches: es.batches, records: es.records, redeliveries: es.redeliveries, failedRecords: es.failedRecords, handlerErrors: es.handlerErrors, timeouts: es.timeouts },
    reconcileRuns: { runs: sc.runs, errors: sc.errors, timeouts: sc.timeouts, overlaps: sc.overlaps },
    queue: { left, dlq: dlqOrderIds.length, dlqByKind },
    reviewReasons,
    reviewByCause,
    watch,
    stripeEvents: pipeline.webhooks ? await readStripeEventsLedger(pipeline.db, pipeline.webhooks).catch(() => null) : null,
    findingsByCause: await findingsByCause(pipeline.db, extraCharges().map((pi) => pi.id), check.lateCommitIds),
    evidence,
    check,
  };
  if (options.afterCheck) {
    try {
      await options.afterCheck({ pipeline, report, check: (extra = {}) => checkInvariants({ ...checkInput, ...extra, paymentIntents: fake.paymentIntents(), refunds: fake.refunds() }) });
    } finally {
      await p.charge.stop();
      await p.reconcile.stop();
      await pipeline.stop();
      workerLog.end();
    }
    return report;
  }
  await p.charge.stop();
  await p.reconcile.stop();
  await pipeline.stop();
  workerLog.end();
  return report;
}

async function soakRefunds(
  db: pg.Pool,
  plans: readonly { scenario: SoakRefundScenario }[],
  atStripe: readonly { status: string; payment_intent: string; reason: string | null }[],
  stats: FakeStripeStats,
  duplicates: { targeted: number; extra: readonly string[] },
): Promise<SoakRefunds> {
  const tally = (values: readonly string[]) => values.reduce<Record<string, number>>((out, v) => ({ ...out, [v]: (out[v] ?? 0) + 1 }), {});
  const [ops, rejected] = await Promise.all([
    db.query<{ state: string }>(`SELECT CASE WHEN review_reason IS NOT NULL AND status IN ('pending', 'unknown') THEN 'in_review' ELSE status END AS state FROM payment_operations WHERE kind = 'refund'`),
    // The batch handler writes `${code}: ${message}` (lambdas/charge/batch.ts).
    db.query<{ code: string }>(`SELECT substring(reason FROM '^([a-z_]+):') AS code FROM rejected_messages WHERE reason_code IN ('refund_conflict', 'refund_rejected')`),
  ]);
  return {
    orders: plans.length,
    byScenario: tally(plans.map((p) => p.scenario)),
    operations: tally(ops.rows.map((r) => r.state)),
    rejected: tally(rejected.rows.map((r) => r.code ?? 'refund_rejected')),
    atStripe: tally(atStripe.map((r) => r.status)),
    stripeRequests: (stats.requests.refund_create ?? 0) + (stats.requests.refund_retrieve ?? 0) + (stats.requests.refund_list ?? 0),
    duplicates: {
      targeted: duplicates.targeted,
      made: duplicates.extra.length,
      remedied: duplicates.extra.filter((pi) => atStripe.some((r) => r.payment_intent === pi && r.status === 'succeeded' && r.reason === 'duplicate')).length,
    },
  };
}

async function soakAuthorizations(
  db: pg.Pool,
  plans: readonly { orderId: string; scenario: SoakAuthorizationScenario }[],
  paymentIntents: readonly { status: string; amount: number; amount_received?: number; capture_method?: string | null; cancellation_reason?: string | null }[],
  aged: { readonly holds: number; readonly orders: number },
): Promise<Omit<SoakAuthorizations, 'violationsByOrder'>> {
  const tally = (values: readonly string[]) => values.reduce<Record<string, number>>((out, v) => ({ ...out, [v]: (out[v] ?? 0) + 1 }), {});
  const [ops, rejected] = await Promise.all([
    db.query<{ state: string }>(
      `SELECT kind || ' ' || CASE WHEN review_reason IS NOT NULL AND status IN ('pending', 'unknown') THEN 'in_review' ELSE status END
              || CASE WHEN cancellation_reason IS NOT NULL THEN ' (' || cancellation_reason || ')' ELSE '' END AS state
         FROM payment_operations WHERE kind IN ('capture', 'cancel_authorization')`,
    ),
    db.query<{ code: string }>(`SELECT coalesce(substring(reason FROM '^([a-z_]+):'), reason_code) AS code FROM rejected_messages WHERE reason_code IN ('authorization_rejected', 'authorization_conflict')`),
  ]);
  const manual = paymentIntents.filter((pi) => pi.capture_method === 'manual');
  return {
    orders: plans.length,
    byScenario: tally(plans.map((p) => p.scenario)),
    operations: tally(ops.rows.map((r) => r.state)),
    rejected: tally(rejected.rows.map((r) => r.code)),
    atStripe: tally(manual.map((pi) => (pi.status === 'canceled' && pi.cancellation_reason ? `canceled (${pi.cancellation_reason})` : pi.status))),
    partiallyCaptured: manual.filter((pi) => pi.status === 'succeeded' && (pi.amount_received ?? pi.amount) < pi.amount).length,
    aged: aged.holds,
    agedOrders: aged.orders,
  };
}

export function formatSoakReport(r: SoakReport): string {
  const sum = (o: Readonly<Record<string, number>>) => Object.values(o).reduce((a, b) => a + b, 0);
  const list = (o: Readonly<Record<string, number>>) => Object.entries(o).map(([k, v]) => `${k} ${v}`).join(', ') || 'none';
  const s = (ms: number | null) => (ms === null ? 'n/a' : `${(ms / 1000).toFixed(1)} s`);
  return [
    `chaos soak — ${r.orders} orders, seed ${r.seed}: ${r.ok ? 'PASS' : 'FAIL'}`,
    `  ${r.timeLapse}; PostgreSQL synchronous_commit ${r.synchronousCommit ? 'on (as on RDS)' : 'OFF (--async-commit: commits may be lost in a crash)'}`,
    `  sends ${r.sends.total}: ${r.sends.originals} originals, ${r.sends.duplicatesSameDedupId} duplicates (same dedup id), ${r.sends.duplicatesNewDedupId} duplicates (new dedup id), ${r.sends.conflicts} conflicting, ${r.sends.poison} poison, ${r.sends.refunds} refund requests`,
    `  refunds: ${r.refunds.orders} orders (${list(r.refunds.byScenario)}); operations ${list(r.refunds.operations)}; rejected ${list(r.refunds.rejected)}; at Stripe ${list(r.refunds.atStripe)}; ${r.refunds.stripeRequests} Stripe refund requests`,
    `  authorizations (manual capture): ${r.authorizations.orders} orders (${list(r.authorizations.byScenario)}), ${r.authorizations.aged} holds of ${r.authorizations.agedOrders} orders aged past their validity; operations ${list(r.authorizations.operations)}; rejected ${list(r.authorizations.rejected)}; at Stripe ${list(r.authorizations.atStripe)}, ${r.authorizations.partiallyCaptured} captured in part; violations on these orders ${list(r.authorizations.violationsByOrder.manual)}, on the others ${list(r.authorizations.violationsByOrder.other)}`,
    `  duplicate charges behind the pipeline's back: ${r.refunds.duplicates.targeted} orders targeted, ${r.refunds.duplicates.made} extra PaymentIntents succeeded, ${r.refunds.duplicates.remedied} refunded by the remedy`,
    `  Stripe faults injected (${sum(r.stripeFaults)}): ${list(r.stripeFaults)}`,
    `  Stripe: ${r.stripe.requests} requests, ${r.stripe.createsExecuted} creates executed, ${r.stripe.replays} replays, ${r.stripe.conflicts409} 409s, ${r.stripe.keysPruned} keys pruned, double charges ${r.stripe.doubleCharges}`,
    `  EventBridge faults: ${list(r.eventBridgeFaults)}`,
    `  kills (SIGKILL) ${sum(r.kills)}: ${list(r.kills)} (planned ${sum(r.killsPlanned)}); cold starts charge ${r.containers.charge.coldStarts}, reconcile ${r.containers.reconcile.coldStarts}; unexpected exits ${r.containers.charge.unexpectedExits + r.containers.reconcile.unexpectedExits}`,
    `  PostgreSQL: ${r.postgres.restarts} clean restarts, ${r.postgres.crashes} crashes (${r.postgres.postmasterKills} postmaster SIGKILL, ${r.postgres.backendKills} backend SIGKILL), ${s(r.postgres.downtimeMs)} down in total`,
    `  charge invocations ${r.containers.charge.invocations} (${r.eventSource.records} records, ${r.eventSource.redeliveries} redeliveries, ${r.eventSource.failedRecords} failed records); reconcile runs ${r.reconcileRuns.runs} (${r.reconcileRuns.errors} errors)`,
    `  queue left ${r.queue.left}, DLQ ${r.queue.dlq}${r.queue.dlq === 0 ? '' : ` (${Object.entries(r.queue.dlqByKind).map(([kind, n]) => `${kind} ${n.withOperation + n.withoutOperation}: ${n.withOperation} of orders with an operation, ${n.withoutOperation} without`).join('; ')})`}`,
    `  intake ${s(r.intakeMs)}; after the faults stopped: every operation settled in ${s(r.timeToQuiescenceMs)}${r.settled ? '' : ' (NOT SETTLED)'}, outbox drained in ${s(r.timeToOutboxDrainedMs)} (${r.unpublishedEvents} unpublished at the end); total ${s(r.durationMs)}`,
    ...(r.stripeEvents
      ? [
          `  Stripe events: ${r.stripeEvents.delivery?.eventsCreated ?? 0} made, ${r.stripeEvents.received} recorded, ${r.stripeEvents.applied} applied (${list(r.stripeEvents.appliedByOutcome)}), ${r.stripeEvents.backlog} waiting; ` +
            `${r.stripeEvents.delivery?.duplicatesSent ?? 0} sent twice, ${r.stripeEvents.delivery?.lostAttempts ?? 0} lost and retried, ${r.stripeEvents.delivery?.non2xx ?? 0} answered non-2xx (retried), ` +
            `forged ${r.stripeEvents.delivery?.forgedSent ?? 0} (accepted ${r.stripeEvents.delivery?.forgedAccepted ?? 0}); findings ${list(r.stripeEvents.findings)}; final via ${list(r.stripeEvents.finalVia)}`,
        ]
      : ['  Stripe events: off (polling only)']),
    `  List evidence: ${r.evidence.listRequests} list requests, ${r.evidence.autoReissues} automatic re-issues; ${r.evidence.requestsPerSettledOperation} Stripe requests per settled operation`,
    `  500 before commit: ${r.evidence.fiveHundredBeforeCommit.operations} operations, ${r.evidence.fiveHundredBeforeCommit.final} final, ${r.evidence.fiveHundredBeforeCommit.inReview} in review; first send → final p50 ${s(r.evidence.fiveHundredBeforeCommit.firstSendToFinalMs.p50)}, p90 ${s(r.evidence.fiveHundredBeforeCommit.firstSendToFinalMs.p90)}, max ${s(r.evidence.fiveHundredBeforeCommit.firstSendToFinalMs.max)} (compressed time)`,
    `  watch after a re-issue: ${r.watch.watches} operations watched (${r.watch.open} still open), ${r.watch.looks} looks; late commits made by the fake ${r.watch.lateCommitsMade}, ` +
      `${r.watch.lateCommitsAfterReissue} of them after a re-issue; ${r.watch.remedies} refunded by the watch's remedy, ${r.watch.findings} findings`,
    `  findings by cause: on extra charges ${list(r.findingsByCause.duplicate)}; on late commits after a re-issue ${list(r.findingsByCause.lateCommit)}; about operations in review ${list(r.findingsByCause.inReview)}; unexplained ${r.findingsByCause.unexplained.length}` +
      r.findingsByCause.unexplained.map((f) => `\n    ! ${f.kind} ${f.paymentIntentId ?? '(no PaymentIntent)'}: ${f.reason}`).join(''),
    `  review by cause: ${list(r.reviewByCause)}`,
    ...formatReport(r.check).split('\n').map((line) => `  ${line}`),
    ...Object.entries(r.reviewReasons).map(([reason, n]) => `    review ×${n}: ${reason}`),
  ].join('\n');
}


/**
 * What the DLQ holds, so that a count there is explained: each message by the `type` of its body
 * (`charge`, `refund`, `capture`, `cancel_authorization`; `poison` for the soak's poison groups, and
 * `unreadable` for a body that is not JSON), and whether its order (the message group) has an
 * operation in the ledger. A message in the DLQ is visible, not lost (the checker counts it so), but
 * one whose order has no operation is a request nobody has recorded: redrive it.
 */
export async function dlqMessagesByKind(db: pg.Pool, messages: readonly { groupId: string | null; body: string }[]): Promise<Record<string, { withOperation: number; withoutOperation: number }>> {
  const orders = [...new Set(messages.flatMap((m) => (m.groupId ? [m.groupId] : [])))];
  const known = new Set(
    orders.length === 0
      ? []
      : (await db.query<{ order_id: string }>('SELECT DISTINCT order_id FROM payment_operations WHERE order_id = ANY($1::text[])', [orders])).rows.map((r) => r.order_id),
  );
  const out: Record<string, { withOperation: number; withoutOperation: number }> = {};
  for (const m of messages) {
    let kind: string;
    if (m.groupId?.startsWith('poison-')) kind = 'poison';
    else {
      try {
        const type = (JSON.parse(m.body) as { type?: unknown }).type;
        kind = typeof type === 'string' ? type : 'charge';
      } catch {
        kind = 'unreadable';
      }
    }
    const slot = (out[kind] ??= { withOperation: 0, withoutOperation: 0 });
    if (m.groupId !== null && known.has(m.groupId)) slot.withOperation += 1;
    else slot.withoutOperation += 1;
  }
  return out;
}
