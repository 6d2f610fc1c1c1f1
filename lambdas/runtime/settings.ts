// Names and numbers shared by the CDK stack and the local runtime, so that `npm start` runs the
// pipeline configured exactly as `cdk deploy` configures it.

export const PIPELINE = {
  /** The database role the functions connect as (migrations/003_application_role.sql); the owner only migrates. */
  applicationRole: 'charges_app',
  queueName: 'charge-requests.fifo',
  dlqName: 'charge-requests-dlq.fifo',
  /** Receives before SQS moves a message to the DLQ (only records that could not be made durable fail). */
  maxReceiveCount: 5,
  /** The charge Lambda's timeout. */
  chargeFunctionTimeoutSeconds: 60,
  /** At least six times the function timeout (AWS guidance for SQS event sources). */
  visibilityTimeoutSeconds: 360,
  batchSize: 10,
  reconcileFunctionTimeoutSeconds: 120,
  reconcileSchedule: 'rate(1 minute)',
  eventBusName: 'charge-outcomes',
  eventSource: 'payments.charges',
  metricsNamespace: 'ChargePipeline',
  serviceName: 'charge-pipeline',
} as const;

/** A database role or schema name that SQL of ours names: a lowercase identifier, never input that could need quoting. */
export const SQL_IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** Whether `name` may be an outcome consumer's own schema: an identifier, not the pipeline's `public`, not the server's `pg_*`. */
export function isConsumerSchemaName(name: string): boolean {
  return SQL_IDENTIFIER.test(name) && name !== 'public' && !name.startsWith('pg_');
}

/** Metric names published as EMF (namespace PIPELINE.metricsNamespace, dimension service). Alarms use these. */
export const METRICS = {
  // charge handler, counts per invocation
  chargeSucceeded: 'ChargeSucceeded',
  chargeFailed: 'ChargeFailed',
  chargeLeftOpen: 'ChargeLeftOpen',
  rejectedMessages: 'RejectedMessages',
  /** Records whose MessageDeduplicationId is the first contract's (order id alone): producers not moved yet. */
  legacyDeduplicationIds: 'LegacyDeduplicationIds',
  recordsNotDurable: 'RecordsNotDurable',
  stripeAuthErrors: 'StripeAuthErrors',
  idempotencyErrors: 'StripeIdempotencyErrors',
  /** Charge or reconcile: the configuration was refused at start (e.g. no Stripe call could ever start). */
  configurationRefused: 'ConfigurationRefused',
  // reconciler gauges, one value per run
  openPending: 'OpenOperationsPending',
  openUnknown: 'OpenOperationsUnknown',
  oldestOpenAgeSeconds: 'OldestOpenOperationAgeSeconds',
  reviewQueueSize: 'ReviewQueueSize',
  rejectedLastPeriod: 'RejectedMessagesLastPeriod',
  /** Duplicate-charge remedies (refund operations of an extra PaymentIntent) created in the same window. */
  duplicateChargesRemedied: 'DuplicateChargesRemediedLastPeriod',
  /** Findings the watch after a re-issue made that nobody resolved (a second Refund, a late charge it could not remedy, a watch that could not look). */
  openWatchFindings: 'OpenReissueWatchFindings',
  /** Re-issued operations still under watch. */
  openWatches: 'OpenReissueWatches',
  /** Months of the audit trail whose rows went to its default partition, so no partition could be made for them (audit-partitions.ts). */
  auditMonthsWithoutPartition: 'AuditMonthsWithoutPartition',
  /** Manual-capture authorizations within a day of expiring at Stripe with no capture or cancel (authorization-expiry.ts). */
  authorizationsExpiringSoon: 'AuthorizationsExpiringSoon',
  unpublishedEvents: 'UnpublishedEvents',
  oldestUnpublishedEventAgeSeconds: 'OldestUnpublishedEventAgeSeconds',
  reconciledOperations: 'ReconciledOperations',
  /** Rows the retention phase removed or reduced in one run (all kinds). */
  retentionRowsRemoved: 'RetentionRowsRemoved',
  /** How far past its bound the oldest row still due for retention is (the largest over the kinds): the RetentionBehind alarm. */
  retentionOverdueSeconds: 'RetentionOverdueSeconds',
  // Stripe events in (lambdas/stripe-events), counts per invocation
  stripeEventsReceived: 'StripeEventsReceived',
  stripeEventDuplicates: 'StripeEventDuplicates',
  stripeWebhookRejected: 'StripeWebhookRejected',
  stripeWebhookUnavailable: 'StripeWebhookUnavailable',
  stripeEventContradictions: 'StripeEventContradictions',
  unrecordedCharges: 'UnrecordedCharges',
  /** Events refused for their account or mode, or not confirmed by our key's retrieve (a new finding each). */
  stripeEventsRefused: 'StripeEventsRefused',
  // … and the reconciler's inbox gauges
  stripeEventsApplied: 'StripeEventsApplied',
  inboxBacklog: 'StripeEventInboxBacklog',
  oldestInboxEventAgeSeconds: 'OldestStripeEventAgeSeconds',
  openContradictions: 'OpenStripeEventContradictions',
  openUnrecordedCharges: 'OpenUnrecordedCharges',
  /** Open findings of refused / unconfirmed events: the StripeEventRefused alarm. */
  openRefusedStripeEvents: 'OpenRefusedStripeEvents',
  /** Seconds the fast path has been silent while operations reach Stripe: the StripeEventsNotArriving alarm. */
  stripeEventsSilentSeconds: 'StripeEventsSilentSeconds',
} as const;
