// The charge Lambda: SQS FIFO batch in, partial batch response out (docs/architecture.md#the-charge-handler). Wiring only —
// configuration from the environment, per-container resources, logging and metrics as middleware;
// the batch logic is processChargeBatch (batch.ts).
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import type { Db } from '../payments/db.ts';
import type { PaymentGateway } from '../payments/gateway.ts';
import { worstCaseCallMs } from '../payments/call-budget.ts';
import { assertCallBudget, ConfigError, loadConfig, type RuntimeConfig } from '../runtime/config.ts';
import { clockFromContext, createLogger, createMetrics, describeError } from '../runtime/observability.ts';
import { getEventPublisher, getPool, getStripeGateway } from '../runtime/resources.ts';
import { METRICS, PIPELINE } from '../runtime/settings.ts';
import { processChargeBatch, type ChargeBatchCounts } from './batch.ts';

export const logger = createLogger();
export const metrics = createMetrics();

/** Stands in while the Stripe key cannot be had: never called, because no call may start (see below). */
const NO_GATEWAY: PaymentGateway = {
  createPaymentIntent: () => Promise.reject(new Error('Stripe is not configured')),
  retrievePaymentIntent: () => Promise.reject(new Error('Stripe is not configured')),
  searchPaymentIntents: () => Promise.reject(new Error('Stripe is not configured')),
  listPaymentIntents: () => Promise.reject(new Error('Stripe is not configured')),
  createRefund: () => Promise.reject(new Error('Stripe is not configured')),
  retrieveRefund: () => Promise.reject(new Error('Stripe is not configured')),
  listRefunds: () => Promise.reject(new Error('Stripe is not configured')),
  capturePaymentIntent: () => Promise.reject(new Error('Stripe is not configured')),
  cancelPaymentIntent: () => Promise.reject(new Error('Stripe is not configured')),
};

async function chargeBatch(event: SQSEvent, context: Context): Promise<SQSBatchResponse> {
  const records = event.Records ?? [];
  let config: RuntimeConfig;
  let db: Db;
  try {
    config = loadConfig(process.env);
    db = await getPool(config, (error) => logger.warn('idle database connection lost', describeError(error)));
  } catch (error) {
    // No configuration or no database secret: nothing of the batch can be made durable. Every record
    // goes back to SQS (and to the DLQ after maxReceiveCount, whose alarm says "intake not recorded").
    logger.error('charge handler not ready; every record goes back to the queue', describeError(error));
    publishCounts({ ...ZERO_COUNTS, notDurable: records.length });
    metrics.addMetric(METRICS.configurationRefused, MetricUnit.Count, error instanceof ConfigError ? 1 : 0);
    return { batchItemFailures: records.map((record) => ({ itemIdentifier: record.messageId })) };
  }

  const clock = clockFromContext(context, PIPELINE.chargeFunctionTimeoutSeconds * 1000);
  let gateway: PaymentGateway = NO_GATEWAY;
  let minTimeToCallMs = Infinity;
  let stripeUnavailable = false;
  let configurationRefused = false;
  try {
    // Refused when no call could ever start in this function (worst-case call + margin ≥ timeout):
    // checked against the construct's timeout and against what this invocation really has. Loudly
    // (log + ConfigurationRefused alarm); the requests are still made durable — unclaimed and due —
    // so nothing is lost while the configuration is fixed.
    assertCallBudget(config, 'charge', Math.min(PIPELINE.chargeFunctionTimeoutSeconds * 1000, clock.remainingMs()));
  } catch (error) {
    configurationRefused = true;
    logger.error('configuration refused; requests are recorded without a charge attempt', describeError(error));
  }
  if (!configurationRefused) {
    try {
      gateway = await getStripeGateway(config);
      // No call starts unless it can finish (worst case) before the timeout, with a margin left for
      // the outcome write: a call cut off by the timeout would leave an ambiguous operation behind.
      minTimeToCallMs = worstCaseCallMs(config.stripe) + config.charge.safetyMarginMs;
    } catch (error) {
      // No Stripe key yet (the stack creates the secret empty) or Secrets Manager unreachable: the
      // requests are still made durable — unclaimed and due — and the reconciler charges them once
      // the key is there. Counted as a Stripe key problem so that its alarm fires.
      stripeUnavailable = true;
      logger.error('Stripe key unavailable; requests are recorded without a charge attempt', describeError(error));
    }
  }

  const result = await processChargeBatch(
    records,
    {
      db,
      gateway,
      publisher: getEventPublisher(config),
      log: logger,
      maxAmount: config.charge.maxAmount,
      concurrency: config.charge.concurrency,
      policy: config.policy,
      minTimeToCallMs,
      worstCallMs: worstCaseCallMs(config.stripe),
    },
    clock,
  );
  const counts = { ...result.counts, stripeAuthErrors: result.counts.stripeAuthErrors + (stripeUnavailable ? 1 : 0) };
  publishCounts(counts);
  metrics.addMetric(METRICS.configurationRefused, MetricUnit.Count, configurationRefused ? 1 : 0);
  logger.info('batch done', { records: records.length, failures: result.response.batchItemFailures.length, ...counts });
  return result.response;
}

const ZERO_COUNTS: ChargeBatchCounts = {
  succeeded: 0,
  failed: 0,
  leftOpen: 0,
  rejected: 0,
  notDurable: 0,
  stripeAuthErrors: 0,
  idempotencyErrors: 0,
  eventsPublished: 0,
  eventsNotPublished: 0,
  legacyDeduplicationIds: 0,
};

function publishCounts(counts: ChargeBatchCounts): void {
  metrics.addMetric(METRICS.chargeSucceeded, MetricUnit.Count, counts.succeeded);
  metrics.addMetric(METRICS.chargeFailed, MetricUnit.Count, counts.failed);
  metrics.addMetric(METRICS.chargeLeftOpen, MetricUnit.Count, counts.leftOpen);
  metrics.addMetric(METRICS.rejectedMessages, MetricUnit.Count, counts.rejected);
  metrics.addMetric(METRICS.legacyDeduplicationIds, MetricUnit.Count, counts.legacyDeduplicationIds);
  metrics.addMetric(METRICS.recordsNotDurable, MetricUnit.Count, counts.notDurable);
  metrics.addMetric(METRICS.stripeAuthErrors, MetricUnit.Count, counts.stripeAuthErrors);
  metrics.addMetric(METRICS.idempotencyErrors, MetricUnit.Count, counts.idempotencyErrors);
}

export const handler = middy(chargeBatch)
  // logEvent: false whatever POWERTOOLS_LOGGER_LOG_EVENT says: the event holds raw bodies.
  .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
  .use(logMetrics(metrics));
