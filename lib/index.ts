// The public surface for CDK apps that embed the pipeline (the package root, see docs/deploy.md):
// the constructs users embed, their props and what they return, and the cdk-nag opt-in. The
// building blocks inside them (the queue, the functions, the database, the network) are not part
// of it: they change with the construct.
//
//   import { ChargePipeline } from 'exactly-once-charges';
//   const pipeline = new ChargePipeline(this, 'Charges', { alarmEmail: 'oncall@example.com' });
//   pipeline.grantSendChargeRequests(orderService);
export { ALARM_CATALOG, type AlarmDescription, type AlarmName, CONSUMER_ALARM_CATALOG, type ConsumerAlarmName } from './alarm-catalog.ts';
export { alarmNamesFor, type AlarmCondition, type AlarmConfiguration } from './alarm-catalog.ts';
export { ChargePipeline } from './charge-pipeline.ts';
export {
  CHARGE_PIPELINE_DEFAULTS,
  CHARGE_PIPELINE_PROFILES,
  type ChargePipelineProfile,
  type ChargePipelineProps,
  type ConsumerDatabaseLogin,
  type ConsumerDatabaseLoginOptions,
  type ExistingDatabase,
  type RetentionProps,
} from './charge-pipeline-props.ts';
export { applicationRoleFor } from './database.ts';
export { acknowledgeChargePipelineFindings, chargePipelineFindings, type DesignFinding } from './nag.ts';
export { type PipelineAlarm, type PipelineMetricName, type PipelineMetrics } from './observability.ts';
export { OPS_FUNCTION_CONCURRENCY } from './ops-function.ts';
export {
  addReceiptNotifier,
  type ConsumerAlarm,
  LAMBDA_CONSUMER_MIGRATIONS_DIR,
  OutcomeConsumer,
  type OutcomeConsumerProps,
  type ReceiptNotifier,
  type ReceiptNotifierSettings,
} from './outcome-consumer.ts';
export { OUTCOME_DETAIL_TYPES } from './outcome-events.ts';
export { type PipelineLogLevel, RDS_CA_BUNDLE_FILE } from './pipeline-function.ts';
export type { StripeEvents, StripeEventsInput } from './stripe-events.ts';
export { ChargePipelinePropsError, PipelineValidationError } from './validation.ts';
