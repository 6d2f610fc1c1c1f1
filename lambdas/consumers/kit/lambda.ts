// The Lambda face of an outcome consumer: SQS event (from an EventBridge rule) in, SQSBatchResponse
// out, as a middy handler with Powertools logging and metrics. Wiring only — the decisions are the
// kit's core (consumer.ts). Metrics carry the consumer's name and POLICY as dimensions, so a
// dashboard and every alarm say which failure this consumer chose to accept, and the pipeline's name
// (PIPELINE_NAME, set by the construct and added by createMetrics), so that consumers of one name in
// two pipelines never share a metric.
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import type { Logger } from '@aws-lambda-powertools/logger';
import { MetricUnit, type Metrics } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context, SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { describeError } from '../../runtime/observability.ts';
import type { OutcomeConsumer } from './consumer.ts';
import { CONSUMER_METRICS } from './metrics.ts';
import type { BatchCounts } from './types.ts';

export { CONSUMER_METRICS } from './metrics.ts';

export function publishConsumerCounts(metrics: Metrics, counts: BatchCounts): void {
  for (const [key, name] of Object.entries(CONSUMER_METRICS) as [keyof BatchCounts, string][]) {
    metrics.addMetric(name, MetricUnit.Count, counts[key]);
  }
}

export interface ConsumerHandlerOptions {
  /** Builds the consumer once per container (pool, secrets, provider); a failure is retried on the next invocation. */
  readonly setup: () => Promise<OutcomeConsumer>;
  readonly logger: Logger;
  readonly metrics: Metrics;
  /** For the dimensions before setup succeeded (a failed setup is still counted under them). */
  readonly consumer: string;
  readonly policy: string;
}

export type SqsBatchHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse>;

export function createConsumerHandler(options: ConsumerHandlerOptions): middy.MiddyfiedHandler<SQSEvent, SQSBatchResponse> {
  const { logger, metrics } = options;
  metrics.setDefaultDimensions({ consumer: options.consumer, policy: options.policy });
  logger.appendPersistentKeys({ consumer: options.consumer, policy: options.policy });
  let consumer: Promise<OutcomeConsumer> | undefined;

  const handle = async (event: SQSEvent): Promise<SQSBatchResponse> => {
    const records = event.Records ?? [];
    let ready: OutcomeConsumer;
    try {
      consumer ??= options.setup();
      ready = await consumer;
    } catch (error) {
      consumer = undefined;
      // Nothing can be recorded: every record goes back to the queue (and to the DLQ, alarmed).
      logger.error('consumer not ready; every record goes back to the queue', describeError(error));
      metrics.addMetric(CONSUMER_METRICS.notRecorded, MetricUnit.Count, records.length);
      return { batchItemFailures: records.map((r) => ({ itemIdentifier: r.messageId })) };
    }
    const result = await ready.processBatch(records);
    publishConsumerCounts(metrics, result.counts);
    logger.info('batch done', { ...result.counts, failures: result.response.batchItemFailures.length });
    return { batchItemFailures: [...result.response.batchItemFailures] };
  };

  return middy(handle)
    .use(injectLambdaContext(logger, { resetKeys: false, logEvent: false }))
    .use(logMetrics(metrics));
}
