// The metric names every outcome consumer publishes (plain data: the CDK construct's alarms read it too).
import type { BatchCounts } from './types.ts';

/** Metric names (namespace: the function's POWERTOOLS_METRICS_NAMESPACE; dimensions service, consumer, policy, pipeline). */
export const CONSUMER_METRICS = {
  records: 'ConsumerRecords',
  done: 'EffectsDone',
  duplicates: 'DuplicatesAbsorbed',
  stale: 'StaleEventsIgnored',
  poison: 'PoisonEvents',
  retries: 'EffectRetries',
  notExecuted: 'EffectsNotExecuted',
  abandoned: 'EffectsAbandoned',
  failed: 'EffectsFailed',
  busy: 'RecordsBusy',
  notRecorded: 'RecordsNotRecorded',
  effectCalls: 'EffectCalls',
  recovered: 'EffectsRecovered',
  keyExpired: 'IdempotencyKeyLifetimeExceeded',
} as const satisfies Record<keyof BatchCounts, string>;
