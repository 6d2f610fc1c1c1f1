// The Stripe webhook Lambda, behind a Lambda Function URL (auth NONE: Stripe cannot sign AWS
// requests; the Stripe-Signature header is the authentication). Function URL event in
// (APIGatewayProxyEventV2: body, isBase64Encoded, lower-case headers), { statusCode, body } out.
// Wiring only: verification, the inbox insert and the apply are receive.ts.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { APIGatewayProxyEventV2, APIGatewayProxyResultV2 } from 'aws-lambda';
import { loadConfig } from '../runtime/config.ts';
import { createLogger, createMetrics, describeError } from '../runtime/observability.ts';
import { METRICS } from '../runtime/settings.ts';
import { loadStripeEventsConfig, webhookSecret } from './config.ts';
import { receiveWebhook, toHttpAnswer, type Reception } from './receive.ts';
import { receiveDeps } from './resources.ts';

export const logger = createLogger();
export const metrics = createMetrics();

async function webhook(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyResultV2> {
  let reception: Reception;
  try {
    const config = loadConfig(process.env);
    const eventsConfig = loadStripeEventsConfig(process.env);
    const secret = await webhookSecret(eventsConfig, config.region);
    if (secret === null) logger.error('STRIPE_WEBHOOK_SECRET(_ARN) holds no signing secret: deliveries are refused with 503 until it does (Stripe retries for three days)');
    reception = await receiveWebhook(
      { method: event.requestContext?.http?.method, body: event.body, isBase64Encoded: event.isBase64Encoded, headers: event.headers },
      { secret, maxBodyBytes: eventsConfig.maxBodyBytes },
      () => receiveDeps(config, eventsConfig, logger),
    );
  } catch (error) {
    logger.error('webhook handler not ready', describeError(error));
    reception = { kind: 'unavailable', detail: 'not configured' };
  }
  report(reception);
  return toHttpAnswer(reception);
}

function report(reception: Reception): void {
  switch (reception.kind) {
    case 'recorded':
      metrics.addMetric(METRICS.stripeEventsReceived, MetricUnit.Count, 1);
      metrics.addMetric(METRICS.stripeEventDuplicates, MetricUnit.Count, reception.duplicate ? 1 : 0);
      if (reception.applied?.newFinding) {
        metrics.addMetric(reception.applied.outcome === 'contradiction' ? METRICS.stripeEventContradictions : METRICS.unrecordedCharges, MetricUnit.Count, 1);
      }
      logger.info('stripe event recorded', {
        stripeEventId: reception.eventId,
        eventType: reception.eventType,
        duplicate: reception.duplicate,
        ...(reception.applied ? { applied: reception.applied.outcome, operationId: reception.applied.operationId } : {}),
      });
      return;
    case 'rejected':
      metrics.addMetric(METRICS.stripeWebhookRejected, MetricUnit.Count, 1);
      // The code and a bounded detail; never the body, the header value or the secret.
      logger.warn('stripe webhook refused', { rejectCode: reception.code, detail: reception.detail.slice(0, 200) });
      return;
    case 'unavailable':
      metrics.addMetric(METRICS.stripeWebhookUnavailable, MetricUnit.Count, 1);
      logger.error('stripe webhook not recorded; Stripe will retry', { detail: reception.detail.slice(0, 300) });
  }
}

export const handler = middy(webhook)
  // logEvent: false whatever POWERTOOLS_LOGGER_LOG_EVENT says: the event holds the raw body.
  .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
  .use(logMetrics(metrics));
