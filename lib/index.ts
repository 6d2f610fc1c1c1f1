// The public surface for CDK apps that embed the pipeline (the package root, see docs/deploy.md):
//
//   import { ChargePipeline } from 'exactly-once-charges';
//   const pipeline = new ChargePipeline(this, 'Charges', { alarmEmail: 'oncall@example.com' });
//   pipeline.grantSendChargeRequests(orderService);
export { ALARM_CATALOG, type AlarmDescription, type AlarmName, CONSUMER_ALARM_CATALOG, type ConsumerAlarmName } from './alarm-catalog.ts';
export { alarmNamesFor, type AlarmCondition, type AlarmConfiguration } from './alarm-catalog.ts';
export { ChargeFunction, type ChargeFunctionProps } from './charge-function.ts';
export {
  CHARGE_PIPELINE_DEFAULTS,
  ChargePipeline,
  type ChargePipelineProps,
  type ConsumerDatabaseLogin,
  type ConsumerDatabaseLoginOptions,
  type ExistingDatabase,
} from './charge-pipeline.ts';
export { ChargePipelineStack, type ChargePipelineStackProps, stackNameFor } from './charge-pipeline-stack.ts';
export { ChargeQueue, type ChargeQueueProps } from './charge-queue.ts';
export { type DeploymentSettings, DeploymentSettingsError, settingsFromContext } from './config.ts';
export { APPLICATION_USER, DATABASE_ENGINE_VERSION, Database, type DatabaseLogin, type DatabaseProps } from './database.ts';
export { Migrations, type MigrationsProps } from './migrations.ts';
export { Network, type NetworkProps } from './network.ts';
export { DATABASE_ALARMS, Observability, type PipelineAlarm, type PipelineMetricName, type PipelineMetrics, pipelineMetric, pipelineMetrics } from './observability.ts';
export { OPS_FUNCTION_CONCURRENCY, OpsFunction, type OpsFunctionProps } from './ops-function.ts';
export {
  addReceiptNotifier,
  type ConsumerAlarm,
  LAMBDA_CONSUMER_MIGRATIONS_DIR,
  OutcomeConsumer,
  type OutcomeConsumerProps,
  type ReceiptNotifier,
  type ReceiptNotifierSettings,
  receiptNotifierFromContext,
} from './outcome-consumer.ts';
export { OUTCOME_DETAIL_TYPES, OutcomeEvents, type OutcomeEventsProps } from './outcome-events.ts';
export { PIPELINE_HANDLERS, PipelineFunction, type PipelineHandler, type PipelineLogLevel } from './pipeline-function.ts';
export { Reconciler, type ReconcilerProps, SWEEP_RETRY } from './reconciler.ts';
export { StripeEvents, type StripeEventsInput, type StripeEventsProps } from './stripe-events.ts';
export { ChargePipelinePropsError } from './validation.ts';
