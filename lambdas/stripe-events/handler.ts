// The Stripe-events Lambda: ONE function, two doors, chosen by STRIPE_EVENTS_INPUT (the construct's
// `stripeEvents` prop), into the same inbox and applier (receive.ts):
//   webhook     behind a Lambda Function URL (auth NONE: Stripe cannot sign AWS requests; the
//               Stripe-Signature header is the authentication). Function URL event in
//               (APIGatewayProxyEventV2: body, isBase64Encoded, lower-case headers), { statusCode, body } out.
//   eventbridge invoked asynchronously by a rule on Stripe's partner event bus; `detail` is the
//               Stripe event. No signature — only Stripe's partner source puts events on that bus —
//               so the source is checked instead. An event that cannot be recorded (database down) is
//               thrown: Lambda retries it twice, then its on-failure destination (the partner-event
//               failure queue) keeps it until `npm run redrive:partner-events` replays it. The rule's
//               own DLQ (the same queue) only ever sees events EventBridge could not hand to Lambda:
//               once Lambda accepted an invocation, the rule's retries and DLQ are done with it.
// Wiring only: configuration, per-container resources, logging and metrics.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import { MetricUnit } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { APIGatewayProxyEventV2, APIGatewayProxyResultV2 } from 'aws-lambda';
import { loadConfig } from '../runtime/config.ts';
import { createLogger, createMetrics, describeError } from '../runtime/observability.ts';
import { refreshSecret, STALE_PROOF_REFRESH_MIN_AGE_MS } from '../runtime/secrets.ts';
import { METRICS } from '../runtime/settings.ts';
import { isRefusal } from '../payments/inbox-store.ts';
import { loadStripeEventsConfig, webhookSecrets, type StripeEventsConfig } from './config.ts';
import { receivePartnerEvent, receiveWebhook, RejectCode, toHttpAnswer, type PartnerEvent, type Reception, type WebhookSettings } from './receive.ts';
import { receiveDeps } from './resources.ts';

export const logger = createLogger();
export const metrics = createMetrics();

const isFunctionUrlEvent = (event: unknown): event is APIGatewayProxyEventV2 =>
  typeof event === 'object' && event !== null && typeof (event as { requestContext?: { http?: unknown } }).requestContext?.http === 'object';

async function webhook(event: APIGatewayProxyEventV2): Promise<APIGatewayProxyResultV2> {
  let reception: Reception;
  try {
    const config = loadConfig(process.env);
    const eventsConfig = loadStripeEventsConfig(process.env);
    if (eventsConfig.input !== 'webhook') throw new Error(`STRIPE_EVENTS_INPUT is ${eventsConfig.input}: this function takes no webhooks`);
    const request = { method: event.requestContext?.http?.method, body: event.body, isBase64Encoded: event.isBase64Encoded, headers: event.headers };
    const deps = () => receiveDeps(config, eventsConfig, logger);
    reception = await receiveWebhook(request, await webhookSettings(eventsConfig, config.region), deps);
    // Signed with a secret put after this container read it (a roll): read it once more and verify
    // again. At most once a minute (refreshSecret), so forged requests cannot make it read per request.
    const arn = eventsConfig.webhookSecretArn;
    if (reception.kind === 'rejected' && reception.code === RejectCode.signatureMismatch && arn && !eventsConfig.webhookSecret && refreshSecret(arn, STALE_PROOF_REFRESH_MIN_AGE_MS)) {
      reception = await receiveWebhook(request, await webhookSettings(eventsConfig, config.region), deps);
    }
  } catch (error) {
    logger.error('webhook handler not ready', describeError(error));
    reception = { kind: 'unavailable', detail: 'not configured' };
  }
  report(reception);
  return toHttpAnswer(reception);
}

async function webhookSettings(eventsConfig: StripeEventsConfig, region: string | undefined): Promise<WebhookSettings> {
  const secrets = await webhookSecrets(eventsConfig, region);
  if (secrets === null) logger.error('STRIPE_WEBHOOK_SECRET(_ARN) holds no signing secret: deliveries are refused with 503 until it does (Stripe retries for three days)');
  return { secret: secrets?.secret ?? null, previousSecret: secrets?.previousSecret ?? null, maxBodyBytes: eventsConfig.maxBodyBytes };
}

async function partnerEvent(event: PartnerEvent): Promise<{ readonly result: Reception['kind'] }> {
  const config = loadConfig(process.env);
  const eventsConfig = loadStripeEventsConfig(process.env);
  if (eventsConfig.input !== 'eventbridge') throw new Error(`STRIPE_EVENTS_INPUT is ${eventsConfig.input}: this function takes no EventBridge events`);
  const reception = await receivePartnerEvent(event, eventsConfig.partnerEventSource ?? null, await receiveDeps(config, eventsConfig, logger));
  report(reception);
  return { result: reception.kind };
}

function report(reception: Reception): void {
  switch (reception.kind) {
    case 'recorded':
      metrics.addMetric(METRICS.stripeEventsReceived, MetricUnit.Count, 1);
      metrics.addMetric(METRICS.stripeEventDuplicates, MetricUnit.Count, reception.duplicate ? 1 : 0);
      if (reception.applied?.newFinding) {
        // An unrecorded charge; an event refused for its account or mode, or not confirmed by our key;
        // else a contradiction or a refund that failed after it succeeded (event-applier.ts): all are
        // findings an operator resolves.
        const outcome = reception.applied.outcome;
        metrics.addMetric(
          outcome === 'unrecorded' ? METRICS.unrecordedCharges : isRefusal(outcome) ? METRICS.stripeEventsRefused : METRICS.stripeEventContradictions,
          MetricUnit.Count,
          1,
        );
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
      logger.warn('stripe event refused', { rejectCode: reception.code, detail: reception.detail.slice(0, 200) });
      return;
    case 'unavailable':
      metrics.addMetric(METRICS.stripeWebhookUnavailable, MetricUnit.Count, 1);
      logger.error('stripe event not recorded; Stripe will retry', { detail: reception.detail.slice(0, 300) });
  }
}

async function stripeEvents(event: APIGatewayProxyEventV2 | PartnerEvent): Promise<APIGatewayProxyResultV2 | { readonly result: Reception['kind'] }> {
  return isFunctionUrlEvent(event) ? webhook(event) : partnerEvent(event as PartnerEvent);
}

export const handler = middy(stripeEvents)
  // logEvent: false whatever POWERTOOLS_LOGGER_LOG_EVENT says: the event holds the raw body.
  .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
  .use(logMetrics(metrics));
