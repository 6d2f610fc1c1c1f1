// The ledger printed at the end of a local run: what went in, what the database believes, what
// Stripe holds, what went out on the bus — and the invariants that compare them. The checks are
// local/invariants.ts (checkInvariants) against the Stripe side's own record; this module gathers
// the inputs, adds the run's counters, and prints the result as text or JSON.
import { readSettleLag, readStripeEventsLedger, type SettleLag, type StripeEventsLedger } from './stripe-events.ts';
import type { Pipeline, PipelineSnapshot } from './pipeline.ts';
import { queuedGroups } from './pipeline.ts';
import { checkInvariants, type InvariantReport, type Violation } from './invariants.ts';
import type { SendReport } from './send-report.ts';
import { describeTimeLapse, keyPruneAfterMsFor, leaseMsFor } from './pipeline.ts';
import type { FakeStripeStats } from './fake-stripe/types.ts';
import { readRefundLedger, type RefundedOrder, type RefundLedger } from './refund-ledger.ts';
import { formatAuthorizationLines, readAuthorizationLedger, type AuthorizationLedger } from './authorization-demo.ts';
import { formatConnectLines, readConnectLedger, type ConnectLedger } from './connect-demo.ts';

export type RunOutcome = 'settled' | 'timeout' | 'interrupted';

export interface Ledger {
  readonly run: {
    readonly id: string;
    readonly outcome: RunOutcome;
    readonly startedAt: string;
    readonly finishedAt: string;
    readonly database: string;
    readonly stripe: string;
    readonly faults: string | null;
    readonly seed: number | null;
    readonly pollers: number;
    readonly batchSize: number;
    /** Kept running for messages from other producers (throughput then means nothing). */
    readonly serve: boolean;
    /** Null when the production durations were used. */
    readonly timeLapse: null | {
      readonly note: string;
      readonly keyWindowMs: number;
      readonly earlySearchAfterMs: number;
      readonly leaseMs: number;
      readonly keyPruneAfterMs: number;
      readonly searchLagMs: number;
      readonly stripeTimeoutMs: number;
      readonly reconcileEveryMs: number;
    };
  };
  readonly intake: {
    /** Distinct orders the demo put on the queue (null: no demo workload). */
    readonly ordersSent: number | null;
    readonly sendFailures: number;
    readonly duplicateSends: number;
    readonly duplicatesDroppedBySqs: number;
    readonly lateDuplicates: number;
    readonly badMessagesSent: number;
    readonly messagesDelivered: number;
    readonly redeliveries: number;
    readonly batches: number;
    readonly recordsReportedFailed: number;
    readonly handlerErrors: number;
    readonly handlerTimeouts: number;
    readonly stillQueued: number;
    readonly inDlq: number;
  };
  /** The charge operations (one per order); refund operations are under `refunds`. */
  readonly operations: {
    readonly total: number;
    readonly succeeded: number;
    readonly failed: number;
    readonly inReview: number;
    readonly open: number;
    readonly failedByReason: Readonly<Record<string, number>>;
    /** A few operations in review with their reasons (all of them are in the database). */
    readonly reviewSamples: readonly { readonly orderId: string; readonly reason: string }[];
  };
  readonly rejected: { readonly total: number; readonly byReason: Readonly<Record<string, number>> };
  /** Refunds: ours beside Stripe's, per order, with the counts and verdicts. */
  readonly refunds: RefundLedger;
  /**
   * Connect: per connected account (then the platform), its operations beside what the fake Stripe's
   * record holds on it (local/connect-demo.ts). Null when the run made no operation on or for one.
   */
  readonly connect: ConnectLedger | null;
  /**
   * Manual capture: per authorization, its charge and what settled it (capture, cancel, expiry) beside
   * its PaymentIntent at the fake Stripe (local/authorization-demo.ts), disagreements flagged. Null when
   * the run made no manual charge.
   */
  readonly authorizations: AuthorizationLedger | null;
  readonly stripe: {
    /** Where these figures come from. */
    readonly source: string;
    readonly available: boolean;
    readonly paymentIntents: number | null;
    readonly paymentIntentsByStatus: Readonly<Record<string, number>> | null;
    readonly requests: Readonly<Record<string, number>> | null;
    readonly faultsInjected: number | null;
    readonly faultsByKind: Readonly<Record<string, number>> | null;
    readonly keysPruned: number | null;
    readonly idempotentReplays: number | null;
  };
  readonly events: {
    readonly bus: string;
    /** Outbox rows published (each announced outcome once). */
    readonly published: number;
    /** Deliveries to the bus beyond the first per event (lost answers, failed entries re-sent). */
    readonly resent: number;
    readonly unpublished: number;
    readonly byType: Readonly<Record<string, number>>;
  };
  readonly invariants: {
    readonly ok: boolean;
    /** Null when Stripe's side cannot be read. */
    readonly doubleCharges: number | null;
    readonly lostOrders: number;
    readonly checked: readonly string[];
    readonly violationsByKind: Readonly<Record<string, number>>;
    readonly violations: readonly Violation[];
    readonly warnings: readonly string[];
  };
  /** Stripe events in (null: the run had no webhooks and no event was recorded). */
  readonly stripeEvents: StripeEventsLedger | null;
  /** Stripe settled a processing PaymentIntent → its operation final (null: Stripe's side not watched). */
  readonly settleLag: SettleLag | null;
  readonly timing: {
    readonly elapsedMs: number;
    /** First send → the last outcome (final or review): the pipeline's own time. */
    readonly processingMs: number | null;
    readonly settledOperations: number;
    /** settledOperations / processing time. */
    readonly chargesPerSecond: number | null;
    /** First send → the moment 90 % of the operations had reached their end state (the bulk, without the retry tail). */
    readonly ninetyPercentMs: number | null;
  };
}

export interface LedgerInput {
  readonly pipeline: Pipeline;
  readonly outcome: RunOutcome;
  readonly send: SendReport | null;
  readonly finishedAt: Date;
  /** The last snapshot (counters at the end). */
  readonly snapshot: PipelineSnapshot;
  readonly serve?: boolean;
}

/** Kinds that need Stripe's side; skipped (and said so) when it cannot be read. */
const NEEDS_STRIPE = new Set(['double_charge', 'wrongly_failed', 'succeeded_without_charge', 'charge_mismatch', 'unrecorded_charge', 'net_amount', 'over_refund', 'succeeded_without_refund', 'refund_mismatch', 'unrecorded_refund', 'wrong_account', 'captured_over_authorized', 'captured_after_release', 'capture_mismatch', 'held_twice']);

export async function buildLedger(input: LedgerInput): Promise<Ledger> {
  const { pipeline: p, snapshot: s, send } = input;
  const db = p.db;

  const stillQueued = new Set(queuedGroups(p.sqs, 'queue'));
  const inDlq = queuedGroups(p.sqs, 'dlq');
  // An order still waiting in the queue (a run cut short) is not lost: it is where a producer left it.
  const sent = send ? send.sentOrderIds.filter((id) => !stillQueued.has(id)) : undefined;
  // A refund still queued is not lost either (its message group is its order).
  const sentRefunds = send ? send.sentRefunds.filter((r) => !stillQueued.has(r.orderId)) : undefined;
  const orderIds = send ? new Set(send.sentOrderIds) : undefined;

  const [truthPis, truthRefunds, stats] = await Promise.all([
    p.stripeTruth.paymentIntents(orderIds),
    // The refunds make the checker judge the net amount per order; a truth that cannot list them skips that.
    p.stripeTruth.refunds(orderIds).catch(() => null),
    p.stripeTruth.stats().catch(() => null),
  ]);
  const available = truthPis !== null;
  const report: InvariantReport = await checkInvariants({
    db,
    paymentIntents: truthPis ?? [],
    ...(truthRefunds ? { refunds: truthRefunds } : {}),
    ...(sent ? { sentOrderIds: sent } : {}),
    ...(sentRefunds ? { sentRefunds } : {}),
    dlqOrderIds: inDlq,
    requireQuiescent: input.outcome === 'settled',
  });
  const violations: Violation[] = available ? [...report.violations] : report.violations.filter((v) => !NEEDS_STRIPE.has(v.kind));

  // Every published outcome must really be on the bus (the fake EventBridge's own record).
  const busEvents = p.eventBridge.events();
  const onBus = new Map<string, number>();
  for (const e of busEvents) {
    const id = (e.detail as { eventId?: unknown } | undefined)?.eventId;
    if (typeof id === 'string') onBus.set(id, (onBus.get(id) ?? 0) + 1);
  }
  const [outbox, failedReasons, reviews, rejected, ends, charges] = await Promise.all([
    db.query<{ event_id: string; event_type: string; published: boolean; operation_id: string }>(
      'SELECT event_id::text, event_type, published_at IS NOT NULL AS published, operation_id::text FROM outcome_events',
    ),
    db.query<{ reason: string | null; n: number }>(
      `SELECT e.payload->>'reason' AS reason, count(*)::int AS n FROM outcome_events e WHERE event_type = 'Charge Failed' GROUP BY 1 ORDER BY 2 DESC`,
    ),
    db.query<{ order_id: string; review_reason: string }>(
      `SELECT order_id, review_reason FROM payment_operations WHERE review_reason IS NOT NULL AND status IN ('pending', 'unknown') ORDER BY updated_at LIMIT 3`,
    ),
    db.query<{ reason_code: string; n: number }>('SELECT reason_code, count(*)::int AS n FROM rejected_messages GROUP BY 1 ORDER BY 1'),
    db.query<{ p90: Date | null }>(
      `SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY coalesce(settled_at, updated_at)) AS p90
         FROM payment_operations WHERE status IN ('succeeded', 'failed') OR review_reason IS NOT NULL`,
    ),
    db.query<{ total: number; succeeded: number; failed: number; in_review: number; open: number }>(
      `SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded, count(*) FILTER (WHERE status = 'failed')::int AS failed,
              count(*) FILTER (WHERE status IN ('pending', 'unknown') AND review_reason IS NOT NULL)::int AS in_review,
              count(*) FILTER (WHERE status IN ('pending', 'unknown') AND review_reason IS NULL)::int AS open
         FROM payment_operations WHERE kind = 'charge'`,
    ),
  ]);
  for (const row of outbox.rows) {
    if (row.published && !onBus.has(row.event_id)) {
      violations.push({ kind: 'outbox_mismatch', operationId: row.operation_id, detail: `event ${row.event_id} marked published but never reached the bus` });
    }
  }
  const byType: Record<string, number> = {};
  for (const row of outbox.rows) byType[row.event_type] = (byType[row.event_type] ?? 0) + 1;
  const resent = [...onBus.values()].reduce((sum, n) => sum + n - 1, 0);

  const violationsByKind: Record<string, number> = {};
  for (const v of violations) violationsByKind[v.kind] = (violationsByKind[v.kind] ?? 0) + 1;
  const refunds = await readRefundLedger({ db, orderIds, send, paymentIntents: truthPis, refunds: truthRefunds, stats, requests: p.fakeStripe?.requests() ?? null, violations, expectedNet: report.expectedNet });
  const c = charges.rows[0]!;
  const connect = await readConnectLedger(db, truthPis, truthRefunds);
  const authorizations = await readAuthorizationLedger(db, truthPis);

  const settledOperations = report.byStatus.succeeded + report.byStatus.failed + report.inReview;
  const firstSend = send?.firstSendAt ?? null;
  const last = s.database.lastSettledAt;
  const processingMs = firstSend && last ? Math.max(1, last.getTime() - firstSend.getTime()) : null;
  const t = p.timeLapse;

  return {
    run: {
      id: p.runId,
      outcome: input.outcome,
      startedAt: p.startedAt.toISOString(),
      finishedAt: input.finishedAt.toISOString(),
      database: p.databaseName,
      stripe: p.stripeDescription,
      faults: p.faults,
      seed: p.seed,
      pollers: p.eventSource.concurrency,
      batchSize: p.eventSource.batchSize,
      serve: input.serve ?? false,
      timeLapse: t
        ? {
            note: describeTimeLapse(t, p.fakeStripe !== null),
            keyWindowMs: t.keyWindowMs,
            earlySearchAfterMs: t.earlySearchAfterMs,
            leaseMs: leaseMsFor(t),
            keyPruneAfterMs: keyPruneAfterMsFor(t),
            searchLagMs: t.searchLagMs,
            stripeTimeoutMs: t.stripeTimeoutMs,
            reconcileEveryMs: t.reconcileEveryMs,
          }
        : null,
    },
    intake: {
      ordersSent: send ? send.ordersSent : null,
      sendFailures: send?.sendFailures ?? 0,
      duplicateSends: send?.duplicateSends ?? 0,
      duplicatesDroppedBySqs: send?.duplicatesDroppedBySqs ?? 0,
      lateDuplicates: send?.lateDuplicates ?? 0,
      badMessagesSent: Object.values(send?.badMessages ?? {}).reduce((a, b) => a + b, 0),
      messagesDelivered: s.eventSource.records,
      redeliveries: s.eventSource.redeliveries,
      batches: s.eventSource.batches,
      recordsReportedFailed: s.eventSource.failedRecords,
      handlerErrors: s.eventSource.handlerErrors,
      handlerTimeouts: s.eventSource.timeouts,
      stillQueued: s.queue.waiting + s.queue.inFlight,
      inDlq: s.queue.dlq,
    },
    operations: {
      total: c.total,
      succeeded: c.succeeded,
      failed: c.failed,
      inReview: c.in_review,
      open: c.open,
      // No code: declined as seen by a later retrieve or search (the PaymentIntent's status), not by a 402.
      failedByReason: Object.fromEntries(failedReasons.rows.map((r) => [r.reason ?? 'declined (no code)', r.n])),
      reviewSamples: reviews.rows.map((r) => ({ orderId: r.order_id, reason: r.review_reason })),
    },
    rejected: { total: report.rejectedMessages, byReason: Object.fromEntries(rejected.rows.map((r) => [r.reason_code, r.n])) },
    refunds,
    connect,
    authorizations,
    stripe: stripeFigures(p.stripeTruth.description, available, report, stats),
    events: {
      bus: String(p.environment.EVENT_BUS_NAME ?? ''),
      published: outbox.rows.filter((r) => r.published).length,
      resent,
      unpublished: outbox.rows.filter((r) => !r.published).length,
      byType,
    },
    invariants: {
      ok: violations.length === 0,
      doubleCharges: available ? (violationsByKind.double_charge ?? 0) : null,
      lostOrders: violationsByKind.lost_order ?? 0,
      checked: [
        ...(available ? ['double charges', 'wrongly failed', 'succeeded without charge', 'charge mismatch', 'unrecorded charge', 'every object on the right account', 'authorizations told truly'] : []),
        ...(available && truthRefunds ? ['net amount per order', 'over-refunds', 'refunds told truly', 'unrecorded refunds'] : []),
        'lost orders',
        ...(sentRefunds && sentRefunds.length > 0 ? ['lost refunds'] : []),
        ...(report.quiescent ? ['unsettled'] : []),
        'audit trail',
        'outbox vs outcome',
        'published events on the bus',
      ],
      violationsByKind,
      violations,
      warnings: report.warnings.map((w) => `${w.orderId}: ${w.detail}`),
    },
    stripeEvents: p.webhooks ? await readStripeEventsLedger(db, p.webhooks) : p.webhookEndpoint ? await readStripeEventsLedger(db, p.webhookEndpoint) : null,
    settleLag: p.stripeObserver ? await readSettleLag(db, p.stripeObserver, p.webhooks ? 'webhooks' : 'polling') : null,
    timing: {
      elapsedMs: input.finishedAt.getTime() - p.startedAt.getTime(),
      processingMs,
      settledOperations,
      chargesPerSecond: processingMs ? round1((settledOperations / processingMs) * 1000) : null,
      ninetyPercentMs: firstSend && ends.rows[0]?.p90 ? Math.max(1, ends.rows[0].p90.getTime() - firstSend.getTime()) : null,
    },
  };
}

function stripeFigures(description: string, available: boolean, report: InvariantReport, stats: FakeStripeStats | null): Ledger['stripe'] {
  const faultsByKind = stats ? Object.fromEntries(Object.entries(stats.faults).filter(([, n]) => n > 0)) : null;
  return {
    source: description,
    available,
    paymentIntents: available ? report.paymentIntents.total : null,
    paymentIntentsByStatus: available ? { ...report.paymentIntents.byStatus } : null,
    requests: stats
      ? {
          total: stats.requests.total,
          create: stats.requests.create,
          retrieve: stats.requests.retrieve,
          search: stats.requests.search,
          list: stats.requests.list ?? 0,
          // The Refunds API's requests, so that the row adds up (their detail is under Refunds).
          refunds: (stats.requests.refund_create ?? 0) + (stats.requests.refund_retrieve ?? 0) + (stats.requests.refund_list ?? 0),
          // An authorization's capture and cancel (manual capture), likewise.
          capture: stats.requests.capture ?? 0,
          cancel: stats.requests.cancel ?? 0,
        }
      : null,
    faultsInjected: stats ? Object.values(stats.faults).reduce((a, b) => a + b, 0) : null,
    faultsByKind,
    keysPruned: stats ? stats.keysPruned : null,
    idempotentReplays: stats ? stats.replays : null,
  };
}

const round1 = (n: number) => Math.round(n * 10) / 10;

// ── Text ─────────────────────────────────────────────────────────────────────────────────────────

export interface Style {
  readonly bold: (s: string) => string;
  readonly dim: (s: string) => string;
  readonly green: (s: string) => string;
  readonly red: (s: string) => string;
  readonly yellow: (s: string) => string;
}

export const PLAIN: Style = { bold: (s) => s, dim: (s) => s, green: (s) => s, red: (s) => s, yellow: (s) => s };
export const ANSI: Style = {
  bold: (s) => `\x1b[1m${s}\x1b[22m`,
  dim: (s) => `\x1b[2m${s}\x1b[22m`,
  green: (s) => `\x1b[32m${s}\x1b[39m`,
  red: (s) => `\x1b[31m${s}\x1b[39m`,
  yellow: (s) => `\x1b[33m${s}\x1b[39m`,
};

const FAULT_LABELS: Record<string, string> = {
  lost_response_after_commit: 'lost response',
  error_500_after_commit: '500 after commit',
  error_500_before_commit: '500 before commit',
  rate_limited_429: '429',
  hang: 'hang',
  decline: 'decline',
  processing: 'processing',
  unauthorized_401: '401',
  permission_403: '403',
  proxy_502_after_commit: '502 without error body',
  truncated_response_after_commit: 'truncated response',
  stall_after_commit: 'stall (crash)',
  error_500_late_commit: '500, committed later',
  in_flight_then_commit: 'in flight, committed later',
};

const n = (value: number) => value.toLocaleString('en-US');
const list = (record: Readonly<Record<string, number>>, label: (k: string) => string = (k) => k) =>
  Object.entries(record)
    .filter(([, v]) => v > 0)
    .map(([k, v]) => `${label(k)} ${n(v)}`)
    .join(' · ');
export const plural = (count: number, noun: string) => `${count} ${noun}${count === 1 ? '' : 's'}`;
export const seconds = (ms: number) => `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;

/**
 * The run's answer to "did it work?", for the very end of the output: PASS with the invariants that
 * held, or FAIL naming what broke (or that the run did not settle).
 */
export function verdictLine(ledger: Ledger, style: Style = PLAIN): string {
  const inv = ledger.invariants;
  if (!inv.ok) {
    const broke = Object.entries(inv.violationsByKind).map(([kind, count]) => `${kind.replaceAll('_', ' ')} ${n(count)}`);
    return style.red(style.bold(`FAIL — ${broke.join(' · ') || 'an invariant was violated'} (see Invariants above)`));
  }
  const held = `double charges 0 · lost orders 0${ledger.refunds.verdicts && ledger.refunds.orders.length > 0 ? ' · net amount off 0 · over-refunds 0 · unrecorded refunds 0' : ''} · ${n(inv.checked.length)} invariants checked`;
  if (ledger.run.outcome === 'timeout') return style.red(style.bold(`FAIL — not settled before the timeout: ${n(ledger.operations.open + ledger.refunds.operations.open)} operation(s) still open (${held} so far)`));
  if (ledger.run.outcome === 'interrupted') return style.yellow(style.bold(`INTERRUPTED — nothing broken so far: ${held}`));
  return style.green(style.bold(`PASS — ${held}; every accepted order and refund settled or in review`));
}

export function formatLedger(ledger: Ledger, style: Style = PLAIN): string {
  const { run, intake, operations: ops, stripe, events, invariants: inv, timing } = ledger;
  const out: string[] = [];
  const row = (label: string, value: string | number, note = '', indent = 4) =>
    out.push(`${' '.repeat(indent)}${padEnd(label, 28 - indent)}${String(typeof value === 'number' ? n(value) : value).padStart(7)}${note ? `   ${note}` : ''}`);
  const section = (title: string) => out.push(`  ${style.bold(title)}`);

  const outcome =
    run.outcome === 'settled'
      ? style.green('every accepted order settled or in review, outbox drained')
      : run.outcome === 'timeout'
        ? style.red('NOT settled before the timeout')
        : style.yellow('interrupted');
  out.push(style.bold(`Ledger of run ${run.id}`) + ` — ${outcome}`);
  out.push(`  ${run.stripe} · ${plural(run.pollers, 'poller')} × batches of ${run.batchSize}`);
  if (run.timeLapse) out.push(`  ${run.timeLapse.note}`);
  out.push('');

  section('Intake');
  if (intake.ordersSent !== null) {
    const dup = intake.duplicateSends
      ? `+ ${n(intake.duplicateSends)} duplicate sends (${n(intake.duplicatesDroppedBySqs)} dropped by SQS deduplication, ${n(intake.lateDuplicates)} arrived after its window)`
      : '';
    row('orders sent', intake.ordersSent, [dup, intake.sendFailures ? style.red(`${intake.sendFailures} not accepted by SQS`) : ''].filter(Boolean).join(' · '));
  }
  row(
    'messages delivered',
    intake.messagesDelivered,
    [`redeliveries ${n(intake.redeliveries)}`, `${n(intake.batches)} batches`, `DLQ ${n(intake.inDlq)}`, intake.stillQueued ? style.yellow(`still queued ${n(intake.stillQueued)}`) : '']
      .filter(Boolean)
      .join(' · '),
  );
  row('rejected messages', ledger.rejected.total, list(ledger.rejected.byReason));
  section('Charge operations');
  row('operations', ops.total, '', 4);
  row('succeeded', ops.succeeded, '', 6);
  row('failed', ops.failed, list(ops.failedByReason), 6);
  row('in review', ops.inReview, ops.inReview ? 'waiting for a human, with the evidence (npm run ops)' : '', 6);
  for (const r of ops.reviewSamples) out.push(`${' '.repeat(10)}${style.dim(`${r.orderId}: ${truncate(r.reason, 200)}`)}`);
  row('open', ops.open, ops.open ? style.yellow('still being worked on') : '', 6);
  formatRefunds(ledger.refunds, row, section, out, style);
  if (ledger.connect) {
    section(`Connected accounts — ${plural(ledger.connect.accounts.length - 1, 'account')} and the platform, each beside the fake Stripe's record on it`);
    out.push(...formatConnectLines(ledger.connect, n));
  }
  if (ledger.authorizations) {
    section(`Authorizations — manual capture, each beside its PaymentIntent at ${stripe.available ? "the fake Stripe's record" : 'Stripe (not readable: not compared)'}`);
    out.push(...formatAuthorizationLines(ledger.authorizations, n));
  }
  section(`Stripe — ${stripe.source}`);
  if (stripe.available) {
    const byStatus = Object.entries(stripe.paymentIntentsByStatus ?? {}).sort(([, a], [, b]) => b - a);
    row('PaymentIntents', stripe.paymentIntents ?? 0, list(Object.fromEntries(byStatus)));
  } else {
    row('PaymentIntents', 'n/a', 'this Stripe cannot be read back: double charges are not checked');
  }
  if (stripe.requests) {
    const r = stripe.requests;
    row('requests', r.total ?? 0, list({ 'PaymentIntent create': r.create ?? 0, retrieve: r.retrieve ?? 0, search: r.search ?? 0, list: r.list ?? 0, 'Refunds API': r.refunds ?? 0, capture: r.capture ?? 0, cancel: r.cancel ?? 0 }));
  }
  if (stripe.faultsInjected !== null) row('faults injected', stripe.faultsInjected, list(stripe.faultsByKind ?? {}, (k) => FAULT_LABELS[k] ?? k));
  if (stripe.keysPruned) row('idempotency keys pruned', stripe.keysPruned, 'forgotten by "Stripe" (time-lapse), never re-sent');
  section(`Events — EventBridge bus ${events.bus}`);
  row('published', events.published, [list(events.byType), `re-sent ${n(events.resent)}`, `unpublished ${n(events.unpublished)}`].filter(Boolean).join(' · '));
  const se = ledger.stripeEvents;
  if (se) {
    section(se.delivery ? 'Stripe events in — signed webhooks from the fake Stripe' : 'Stripe events in — signed webhooks from Stripe, through stripe listen');
    const d = se.delivery;
    if (d) {
      row('events made by Stripe', d.eventsCreated, list({ 'delivered (2xx)': d.acknowledged, 'sent twice': d.duplicatesSent, 'lost, retried': d.lostAttempts, retries: d.retries, 'still waiting': d.unfinished + d.pending }));
      row('forged deliveries', d.forgedSent, `refused ${n(d.forgedRefused)} · ${d.forgedAccepted ? style.red(`ACCEPTED ${n(d.forgedAccepted)}`) : 'accepted 0'}`);
    }
    row('recorded in the inbox', se.received, list({ applied: se.applied, 'duplicates absorbed': se.duplicates, 'rejected (400)': se.rejected, backlog: se.backlog }));
    if (se.applied) row('applied', se.applied, list(se.appliedByOutcome), 6);
    const findings = Object.values(se.findings).reduce((a, b) => a + b, 0);
    if (findings) row('findings', findings, style.yellow(list(se.findings)), 6);
    row('final state reached by', Object.values(se.finalVia).reduce((a, b) => a + b, 0), list(se.finalVia));
  }
  section('Invariants');
  const mark = (ok: boolean) => (ok ? style.green('✔') : style.red('✘'));
  if (inv.doubleCharges === null) row(`${style.yellow('?')} double charges`, 'n/a', 'must be 0 — not checkable against this Stripe');
  else row(`${mark(inv.doubleCharges === 0)} double charges`, inv.doubleCharges, 'must be 0', 4);
  row(`${mark(inv.lostOrders === 0)} lost orders`, inv.lostOrders, 'must be 0', 4);
  const rv = ledger.refunds.verdicts;
  const verdictKinds = ['double_charge', 'lost_order', ...(rv && ledger.refunds.orders.length > 0 ? ['net_amount', 'over_refund', 'unrecorded_refund'] : [])];
  if (rv && ledger.refunds.orders.length > 0) {
    row(`${mark(rv.netAmount === 0)} net amount off`, rv.netAmount, `must be 0 — net charged = amount − refunds made, or 0 (${plural(rv.netJudged, 'refunded order')} judged)`, 4);
    row(`${mark(rv.overRefund === 0)} over-refunds`, rv.overRefund, 'must be 0', 4);
    row(`${mark(rv.unrecordedRefund === 0)} unrecorded refunds`, rv.unrecordedRefund, "must be 0 — every Refund at Stripe is one we recorded", 4);
  }
  const others = Object.entries(inv.violationsByKind).filter(([k]) => !verdictKinds.includes(k));
  const shown = new Set(['double charges', 'lost orders', ...(verdictKinds.length > 2 ? ['net amount per order', 'over-refunds', 'unrecorded refunds'] : [])]);
  if (inv.ok) out.push(`    ${mark(true)} ${style.dim(`also checked: ${inv.checked.filter((c) => !shown.has(c)).join(', ')}`)}`);
  for (const [kind, count] of others) out.push(`    ${mark(false)} ${kind.replaceAll('_', ' ')}: ${count}`);
  for (const v of inv.violations.slice(0, 10)) out.push(`      ${style.red(`${v.kind}${v.orderId ? ` ${v.orderId}` : ''}: ${truncate(v.detail, 120)}`)}`);
  if (inv.violations.length > 10) out.push(`      … and ${inv.violations.length - 10} more`);
  for (const w of inv.warnings.slice(0, 5)) out.push(`    ${style.yellow('!')} ${truncate(w, 130)}`);
  section('Time');
  const lag = ledger.settleLag;
  if (lag && lag.count > 0) {
    out.push(
      `    Stripe settled a processing PaymentIntent → operation final (${n(lag.count)}, ${lag.mode === 'webhooks' ? 'by events, polling as the fallback' : 'polling only'}): ` +
        `p50 ${seconds(lag.p50Ms!)} · p95 ${seconds(lag.p95Ms!)} · max ${seconds(lag.maxMs!)}`,
    );
  }
  const rate = timing.chargesPerSecond !== null ? `${style.bold(`${n(timing.chargesPerSecond)} charges/s`)}` : 'n/a';
  out.push(`    elapsed ${seconds(timing.elapsedMs)} (from the pipeline's start-up to this ledger; the whole wait is on the last line)`);
  if (timing.processingMs !== null) {
    const bulk = timing.ninetyPercentMs !== null ? ` · 90 % of them within ${seconds(timing.ninetyPercentMs)}` : '';
    out.push(`    first send → last outcome ${seconds(timing.processingMs)} for ${n(timing.settledOperations)} operations${bulk}${run.serve ? '' : ` · throughput ${rate}`}`);
    if (run.faults && run.faults !== 'none' && !run.serve) {
      out.push(`    ${style.dim('(the tail after the bulk is the compressed clock at work: backoff, processing PaymentIntents, early searches, the key window)')}`);
    }
  }
  return out.join('\n');
}

type Row = (label: string, value: string | number, note?: string, indent?: number) => void;

/** How many orders of each scenario the text ledger shows (all of them are in --json). */
const ORDERS_PER_SCENARIO = 1;

function formatRefunds(r: RefundLedger, row: Row, section: (title: string) => void, out: string[], style: Style): void {
  if (r.orders.length === 0 && (r.requests?.sent ?? 0) === 0) return;
  section(`Refunds — ${plural(r.orders.length, 'order')} with refunds`);
  if (r.requests) {
    row('refund requests sent', r.requests.sent,
      [`${n(r.requests.droppedBySqs)} repeats dropped by SQS deduplication`, `${n(r.requests.late)} as if after its window`, r.requests.sendFailures ? style.red(`${n(r.requests.sendFailures)} not accepted by SQS`) : ''].filter(Boolean).join(' · '));
  }
  const ops = r.operations;
  row('refund operations', ops.total, ops.waitedForCharge ? `${n(ops.waitedForCharge)} waited for their charge to be final` : '');
  row('succeeded', ops.succeeded, '', 6);
  row('failed', ops.failed, list(ops.failedByReason), 6);
  row('in review', ops.inReview, ops.inReview ? 'waiting for a human (npm run ops -- refunds list)' : '', 6);
  if (ops.waitingForChargeReview) row('charge in review', ops.waitingForChargeReview, 'waiting: sent once a human settles the charge', 6);
  row('open', ops.open, ops.open ? style.yellow('still being worked on') : '', 6);
  row('rejected, never sent', Object.values(r.rejected).reduce((a, b) => a + b, 0), list(r.rejected));
  if (r.atStripe) row('Refunds at Stripe', Object.values(r.atStripe).reduce((a, b) => a + b, 0), list(r.atStripe));
  if (r.stripeRequests) {
    const q = r.stripeRequests;
    row('Stripe refund requests', q.create + q.retrieve + q.list, [list({ create: q.create, retrieve: q.retrieve, list: q.list }), q.perRefund !== null ? `${q.perRefund} per final refund` : ''].filter(Boolean).join(' · '));
  }
  if (r.faultsMet && Object.keys(r.faultsMet).length > 0) row('faults met by refunds', Object.values(r.faultsMet).reduce((a, b) => a + b, 0), list(r.faultsMet, (k) => FAULT_LABELS[k] ?? k));
  const shown = sampleOrders(r.orders);
  if (shown.length > 0) {
    out.push(`    ${style.dim(`per order, ours beside Stripe's (${shown.length} of ${r.orders.length}: the first of each scenario, and every order not ok; all in --json):`)}`);
    for (const o of shown) out.push(...formatRefundedOrder(o, style));
  }
}

/** The first order of each scenario, then every order whose verdict is not ok. */
function sampleOrders(orders: readonly RefundedOrder[]): RefundedOrder[] {
  const seen = new Map<string, number>();
  return orders.filter((o) => {
    if (o.verdict !== 'ok') return true;
    const key = o.scenario ?? 'other';
    seen.set(key, (seen.get(key) ?? 0) + 1);
    return seen.get(key)! <= ORDERS_PER_SCENARIO;
  });
}

function formatRefundedOrder(o: RefundedOrder, style: Style): string[] {
  const verdict =
    o.verdict === 'ok' ? style.green('✔') : o.verdict === 'open' ? style.yellow('… open') : style.red('✘ violation');
  const net = o.net === null ? 'net n/a' : o.expectedNet === null ? `net ${n(o.net)}` : `net ${n(o.net)} = ${n(o.expectedNet)}${o.net === o.expectedNet ? '' : ' ✘'}`;
  const charge = o.charge ? `charge ${o.charge.status} ${n(o.charge.amount)} ${o.charge.currency}` : 'no charge';
  const lines = [`      ${o.orderId} ${style.dim(`(${scenarioLabel(o)})`)} · ${charge} · ${net} ${verdict}`];
  const ours = [
    ...o.recorded.map(
      (r) =>
        `${r.refundId} ${n(r.amount)} ${r.reviewReason ? 'in review' : r.status}${r.externalId ? ` ${r.externalId}` : ''}${r.errorCode ? ` (${r.errorCode})` : ''}${r.waited ? ' (waited for the charge)' : ''}${r.remedyOf ? ` (duplicate of ${r.remedyOf})` : ''}`,
    ),
    ...o.rejected.map((r) => `${r.refundId ?? '?'} ${r.amount === null ? '?' : n(r.amount)} rejected: ${r.code}`),
  ];
  lines.push(`        ours:   ${ours.join(' · ') || 'none'}`);
  lines.push(`        Stripe: ${o.atStripe === null ? 'n/a' : o.atStripe.map((s) => `${s.id} ${n(s.amount)} ${s.status}`).join(' · ') || 'none'}`);
  return lines;
}

/**
 * The scenario an order was planned for, and, when its row shows the plan could not play out (a fault
 * profile declined the charge, a processing card was final before its refund arrived, a conflict
 * never reached the handler), what happened instead, so that the label never contradicts its row.
 */
export function scenarioLabel(o: RefundedOrder): string {
  if (o.scenario === null) return 'not the demo';
  const chargeOk = o.charge?.status === 'succeeded';
  const codes = new Set(o.rejected.map((r) => r.code));
  const refunded = o.recorded.some((r) => r.status === 'succeeded');
  const departure = ((): string | null => {
    if (o.scenario === 'failed_charge') return chargeOk ? 'but the charge succeeded' : null;
    if (o.charge === null) return 'but no charge was recorded';
    if (!chargeOk) return `but the charge ${o.charge.status}, so nothing was refunded`;
    switch (o.scenario) {
      case 'before_final':
        return o.recorded.some((r) => r.waited) ? null : 'but the charge was final first: nothing waited';
      case 'conflict':
        return codes.has('refund_conflict') ? null : 'but no conflict was recorded';
      case 'over_refund':
        return codes.has('exceeds_charge') ? null : 'but it was not rejected';
      case 'duplicate_charge':
        return o.recorded.some((r) => r.remedyOf !== null) ? null : 'but no remedy was recorded';
      default:
        if (refunded || o.verdict === 'open') return null;
        return o.recorded.length === 0 ? 'but no refund was made' : 'but no refund succeeded';
    }
  })();
  return departure === null ? o.scenario : `${o.scenario}, ${departure}`;
}

/** padEnd that does not count ANSI colour codes. */
function padEnd(text: string, width: number): string {
  // eslint-disable-next-line no-control-regex
  const visible = text.replace(/\x1b\[[0-9;]*m/g, '').length;
  return text + ' '.repeat(Math.max(0, width - visible));
}

function truncate(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
