// The reconcile Lambda, run by an EventBridge Scheduler schedule (every minute by default): settles
// open operations within a request-rate cap and a time budget, relays the outbox, publishes the
// gauges the alarms watch, and returns a summary. Wiring only: the run itself is runReconcile.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { worstCaseCallMs } from '../payments/call-budget.ts';
import { assertCallBudget, ConfigError, loadConfig, type RuntimeConfig } from '../runtime/config.ts';
import { clockFromContext, createLogger, createMetrics, describeError } from '../runtime/observability.ts';
import { getEventPublisher, getPool, getStripeGateway } from '../runtime/resources.ts';
import { METRICS, PIPELINE } from '../runtime/settings.ts';
import { acquireSweepLease, releaseSweepLease } from './sweep-lease.ts';
import { runReconcile, type ReconcileSummary } from './sweep.ts';

/** A lease outlives its invocation's deadline by this much (clock skew between Lambda and the database). */
const SWEEP_LEASE_MARGIN_MS = 5_000;

export const logger = createLogger();
export const metrics = createMetrics();

/** What the schedule sends (lib/reconciler.ts); anything else is accepted too (an operator's manual run). */
export interface ReconcileEvent {
  readonly source?: string;
  readonly scheduleArn?: string;
  readonly scheduledTime?: string;
  readonly attemptNumber?: number | string;
}

/** A run that could not do its job (database down): thrown so that the function's Errors alarm fires. */
export class ReconcileError extends Error {
  override readonly name = 'ReconcileError';
  readonly summary: ReconcileSummary;
  constructor(summary: ReconcileSummary) {
    super(`reconcile run failed: ${summary.errors.join('; ')}`);
    this.summary = summary;
  }
}

async function reconcile(event: ReconcileEvent | null | undefined, context: Context): Promise<ReconcileSummary> {
  let config: RuntimeConfig;
  try {
    config = loadConfig(process.env);
  } catch (error) {
    if (error instanceof ConfigError) metrics.addMetric(METRICS.configurationRefused, MetricUnit.Count, 1);
    throw error;
  }
  const db = await getPool(config, (error) => logger.warn('idle database connection lost', describeError(error)));
  const clock = clockFromContext(context, PIPELINE.reconcileFunctionTimeoutSeconds * 1000);
  // Without a Stripe key — or with a configuration under which no call could ever start (worst-case
  // call + margin ≥ the function timeout, refused here) — the sweep cannot run, but the outbox relay
  // and the gauges still can, and must, or the gauge alarms go blind exactly when something is
  // wrong. The run then throws. (getStripeGateway throws synchronously when no key is configured.)
  let refused = false;
  const gateway = await Promise.resolve()
    .then(() => {
      try {
        assertCallBudget(config, 'reconcile', Math.min(PIPELINE.reconcileFunctionTimeoutSeconds * 1000, clock.remainingMs()));
      } catch (error) {
        refused = true;
        throw error;
      }
      return getStripeGateway(config);
    })
    .catch((error: unknown) => {
      logger.error(refused ? 'configuration refused; no operation is settled this run' : 'Stripe key unavailable; no operation is settled this run', describeError(error));
      return { unavailable: describeError(error) };
    });
  metrics.addMetric(METRICS.configurationRefused, MetricUnit.Count, refused ? 1 : 0);
  if (event?.scheduledTime) logger.appendKeys({ scheduledTime: event.scheduledTime });
  // One sweep at a time spends the Stripe budget (sweep-lease.ts): a run that overlaps a slow one
  // relays the outbox and publishes the gauges, and leaves the operations to the lease holder.
  const holder = context.awsRequestId || randomUUID();
  // A database that cannot even give the lease fails the sweep the usual way, after the relay and
  // the gauges were tried (runReconcile reports it): no Stripe call without the lease.
  const lease = await acquireSweepLease(db, holder, clock.remainingMs() + SWEEP_LEASE_MARGIN_MS).catch((error: unknown) => {
    logger.warn('could not take the sweep lease; no Stripe call this run', describeError(error));
    return { acquired: false as const, failed: describeError(error) };
  });
  if (!lease.acquired && !('failed' in lease)) {
    logger.info('another sweep holds the Stripe budget; this run relays and measures only', {
      heldBy: 'heldBy' in lease ? lease.heldBy : undefined,
      heldUntil: 'heldUntil' in lease ? lease.heldUntil?.toISOString() : undefined,
    });
  }
  const summary = await runReconcile(
    {
      db,
      gateway: 'unavailable' in gateway || !lease.acquired ? null : gateway,
      publisher: getEventPublisher(config),
      log: logger,
      policy: config.policy,
      settings: {
        maxRequestsPerSecond: config.reconcile.maxRequestsPerSecond,
        maxSearchesPerSecond: config.reconcile.maxSearchesPerSecond,
        concurrency: config.reconcile.concurrency,
        pageSize: config.reconcile.pageSize,
        minTimeToCallMs: worstCaseCallMs(config.stripe) + config.reconcile.safetyMarginMs,
        safetyMarginMs: config.reconcile.safetyMarginMs,
        maxRunMs: config.reconcile.maxRunMs,
        rejectedWindowSeconds: config.reconcile.rejectedWindowSeconds,
      },
      inboxDb: db,
      retention: config.retention,
      connectedAccounts: config.stripe.connectedAccounts,
      authorizationExpiry: config.reconcile.authorizationExpiry,
    },
    clock,
  ).finally(() => (lease.acquired ? releaseSweepLease(db, holder).catch(() => {}) : undefined));

  metrics.addMetric(METRICS.reconciledOperations, MetricUnit.Count, summary.reconciled);
  if (summary.auditPartitions) metrics.addMetric(METRICS.auditMonthsWithoutPartition, MetricUnit.Count, summary.auditPartitions.blocked.length);
  metrics.addMetric(METRICS.stripeAuthErrors, MetricUnit.Count, summary.stripeAuthErrors);
  metrics.addMetric(METRICS.idempotencyErrors, MetricUnit.Count, summary.idempotencyErrors);
  const g = summary.gauges;
  if (g) {
    metrics.addMetric(METRICS.openPending, MetricUnit.Count, g.openPending);
    metrics.addMetric(METRICS.openUnknown, MetricUnit.Count, g.openUnknown);
    metrics.addMetric(METRICS.oldestOpenAgeSeconds, MetricUnit.Seconds, g.oldestOpenAgeSeconds);
    metrics.addMetric(METRICS.reviewQueueSize, MetricUnit.Count, g.reviewQueueSize);
    metrics.addMetric(METRICS.rejectedLastPeriod, MetricUnit.Count, g.rejectedLastPeriod);
    metrics.addMetric(METRICS.duplicateChargesRemedied, MetricUnit.Count, g.duplicateChargesRemediedLastPeriod);
    metrics.addMetric(METRICS.openWatchFindings, MetricUnit.Count, g.openWatchFindings);
    metrics.addMetric(METRICS.openWatches, MetricUnit.Count, g.openWatches);
    metrics.addMetric(METRICS.authorizationsExpiringSoon, MetricUnit.Count, g.authorizationsExpiringSoon);
    metrics.addMetric(METRICS.unpublishedEvents, MetricUnit.Count, g.unpublishedEvents);
    metrics.addMetric(METRICS.oldestUnpublishedEventAgeSeconds, MetricUnit.Seconds, g.oldestUnpublishedEventAgeSeconds);
    if (g.inbox) {
      metrics.addMetric(METRICS.inboxBacklog, MetricUnit.Count, g.inbox.backlog);
      metrics.addMetric(METRICS.oldestInboxEventAgeSeconds, MetricUnit.Seconds, g.inbox.oldestBacklogAgeSeconds);
      metrics.addMetric(METRICS.openContradictions, MetricUnit.Count, g.inbox.openContradictions);
      metrics.addMetric(METRICS.openUnrecordedCharges, MetricUnit.Count, g.inbox.openUnrecordedCharges);
      metrics.addMetric(METRICS.openRefusedStripeEvents, MetricUnit.Count, g.inbox.openRefusedEvents);
      metrics.addMetric(METRICS.stripeEventsSilentSeconds, MetricUnit.Seconds, g.inbox.eventsSilentSeconds);
    }
  }
  if (summary.retention) {
    const removed = Object.values(summary.retention.removed).reduce((a, b) => a + b, 0);
    metrics.addMetric(METRICS.retentionRowsRemoved, MetricUnit.Count, removed);
    metrics.addMetric(METRICS.retentionOverdueSeconds, MetricUnit.Seconds, summary.retention.maxOverdueSeconds);
  }
  const inbox = summary.stripeEvents;
  if (inbox) {
    metrics.addMetric(METRICS.stripeEventsApplied, MetricUnit.Count, inbox.applied);
    metrics.addMetric(METRICS.stripeEventContradictions, MetricUnit.Count, inbox.contradictions);
    metrics.addMetric(METRICS.unrecordedCharges, MetricUnit.Count, inbox.unrecordedCharges);
    metrics.addMetric(METRICS.stripeEventsRefused, MetricUnit.Count, inbox.refused);
  }
  const { errors, ...rest } = summary;
  logger.info('reconcile run done', { ...rest, errorCount: errors.length });
  if ('failed' in lease) throw new ReconcileError({ ...summary, errors: [`sweep: no sweep lease: ${lease.failed.errorName}: ${lease.failed.errorMessage}`, ...errors] });
  if ('unavailable' in gateway) {
    const what = refused ? 'configuration' : 'stripe';
    throw new ReconcileError({ ...summary, errors: [`${what}: ${gateway.unavailable.errorName}: ${gateway.unavailable.errorMessage}`, ...errors] });
  }
  if (errors.length > 0) throw new ReconcileError(summary);
  return summary;
}

export const handler = middy(reconcile)
  .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
  .use(logMetrics(metrics));
