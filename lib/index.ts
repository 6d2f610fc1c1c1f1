// The public surface for CDK apps that embed the pipeline:
//
//   import { ChargePipeline } from '<this package>/lib/index.ts';
//   const pipeline = new ChargePipeline(this, 'Charges', { alarmEmail: 'oncall@example.com' });
//   pipeline.grantSendChargeRequests(orderService);
export { ALARM_CATALOG, type AlarmDescription, type AlarmName, CONSUMER_ALARM_CATALOG, type ConsumerAlarmName } from './alarm-catalog.ts';
export { ChargeFunction, type ChargeFunctionProps } from './charge-function.ts';
export { CHARGE_PIPELINE_DEFAULTS, ChargePipeline, type ChargePipelineProps } from './charge-pipeline.ts';
export { ChargePipelineStack, type ChargePipelineStackProps, stackNameFor } from './charge-pipeline-stack.ts';
export { ChargeQueue, type ChargeQueueProps } from './charge-queue.ts';
export { type DeploymentSettings, DeploymentSettingsError, settingsFromContext } from './config.ts';
export { Database, type DatabaseProps } from './database.ts';
export { Migrations, type MigrationsProps } from './migrations.ts';
export { Network, type NetworkProps } from './network.ts';
export { Observability, type PipelineAlarm, type PipelineMetricName } from './observability.ts';
export { OpsFunction, type OpsFunctionProps } from './ops-function.ts';
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
export { PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';
export { Reconciler, type ReconcilerProps, SWEEP_RETRY } from './reconciler.ts';
export { ChargePipelinePropsError } from './validation.ts';
