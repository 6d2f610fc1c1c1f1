// The alternative door: Stripe's Amazon EventBridge event destination. A rule on the partner event
// bus invokes this function asynchronously; `detail` is the Stripe event. There is no signature —
// only Stripe's partner source can put events on that bus — so the source is checked instead.
// An event that cannot be recorded (database down) is thrown: Lambda's async retries and the
// function's DLQ keep it. A malformed one is logged and counted, not retried.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import { loadConfig } from '../runtime/config.ts';
import { createLogger, createMetrics } from '../runtime/observability.ts';
import { METRICS } from '../runtime/settings.ts';
import { loadStripeEventsConfig } from './config.ts';
import { receivePartnerEvent, type PartnerEvent, type Reception } from './receive.ts';
import { receiveDeps } from './resources.ts';

export const logger = createLogger();
export const metrics = createMetrics();

async function partnerEvent(event: PartnerEvent): Promise<{ readonly result: Reception['kind'] }> {
  const config = loadConfig(process.env);
  const eventsConfig = loadStripeEventsConfig(process.env);
  const reception = await receivePartnerEvent(event, eventsConfig.partnerEventSource ?? null, await receiveDeps(config, eventsConfig, logger));
  if (reception.kind === 'recorded') {
    metrics.addMetric(METRICS.stripeEventsReceived, MetricUnit.Count, 1);
    metrics.addMetric(METRICS.stripeEventDuplicates, MetricUnit.Count, reception.duplicate ? 1 : 0);
    if (reception.applied?.newFinding) {
      metrics.addMetric(reception.applied.outcome === 'contradiction' ? METRICS.stripeEventContradictions : METRICS.unrecordedCharges, MetricUnit.Count, 1);
    }
    logger.info('stripe event recorded', { stripeEventId: reception.eventId, eventType: reception.eventType, duplicate: reception.duplicate, applied: reception.applied?.outcome });
  } else if (reception.kind === 'rejected') {
    metrics.addMetric(METRICS.stripeWebhookRejected, MetricUnit.Count, 1);
    logger.warn('partner event refused', { rejectCode: reception.code, detail: reception.detail.slice(0, 200) });
  }
  return { result: reception.kind };
}

export const handler = middy(partnerEvent)
  .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
  .use(logMetrics(metrics));
