// The outcome-consumer kit: deduplicated, ordered, policy-explicit consumers of the pipeline's
// outcome events. docs/events.md shows a consumer in a few lines.
export { countResults, createOutcomeConsumer, type BatchResult, type OutcomeConsumer, type OutcomeConsumerOptions } from './consumer.ts';
export { baseDetailSchema, parseRecordBody } from './envelope.ts';
export { ConsumerConfigError, EffectError, EffectFailure } from './errors.ts';
export { inboxCounts, type InboxCounts, type InboxState } from './inbox-store.ts';
export { kitMigrations, migrateConsumer, type MigrationSet } from './migrations.ts';
export { type EventOrdering, FACT_DETAIL_TYPES, orderingOf, orderKey, UNNUMBERED } from './ordering.ts';
export { isPolicy, POLICIES, type BatchCounts, type ConsumerPolicy, type Effect, type EffectContext, type OutcomeEvent, type QueueRecord, type RecordOutcome, type RecordResult } from './types.ts';
