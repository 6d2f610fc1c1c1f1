// Every alarm the pipeline defines, with the one line an on-call person needs first: what it means
// when it fires. The construct builds exactly these (a test checks both directions), and the
// runbook (docs/runbook.md) has one section per entry.
import { METRICS, PIPELINE } from '../lambdas/runtime/settings.ts';

export interface AlarmMetricRef {
  readonly namespace: string;
  readonly metricName: string;
}

export interface AlarmDescription {
  /** Stable name: the alarm's construct id and the suffix of its CloudWatch alarm name. */
  readonly name: string;
  /** One line for the runbook: what it means when this alarm fires. */
  readonly meaning: string;
  /** The metric(s) the alarm watches. */
  readonly metrics: readonly AlarmMetricRef[];
  /**
   * Built only in this configuration (alarmNamesFor says which alarms a configuration has):
   * stripeEvents: `stripeEvents` is 'webhook' or 'eventbridge'; partnerEvents: 'eventbridge';
   * ownDatabase: the construct created the database (never with existingDatabase: the owner of a
   * shared instance alarms on it, once); exampleConsumer: the example consumer queue exists.
   * @default - always built
   */
  readonly builtWith?: AlarmCondition;
}

export type AlarmCondition = 'stripeEvents' | 'partnerEvents' | 'ownDatabase' | 'exampleConsumer';

/** What decides which alarms of ALARM_CATALOG a pipeline has. */
export interface AlarmConfiguration {
  readonly stripeEvents: 'webhook' | 'eventbridge' | 'none';
  readonly ownDatabase: boolean;
  readonly exampleConsumer: boolean;
}

/** The names of the alarms a pipeline of this configuration builds, in catalog order. */
export function alarmNamesFor(config: AlarmConfiguration): AlarmName[] {
  const holds: Record<AlarmCondition, boolean> = {
    stripeEvents: config.stripeEvents !== 'none',
    partnerEvents: config.stripeEvents === 'eventbridge',
    ownDatabase: config.ownDatabase,
    exampleConsumer: config.exampleConsumer,
  };
  return ALARM_CATALOG.filter((entry: AlarmDescription) => entry.builtWith === undefined || holds[entry.builtWith]).map((entry) => entry.name);
}

const SQS = 'AWS/SQS';
const LAMBDA = 'AWS/Lambda';
const RDS = 'AWS/RDS';
/**
 * The functions' own metrics: the instance's metricsNamespace (default PIPELINE.metricsNamespace),
 * always with the dimensions service and pipeline = the instance's pipelineName (pipelineMetrics).
 */
const APP = PIPELINE.metricsNamespace;

export const ALARM_CATALOG = [
  {
    name: 'DeadLetterQueueNotEmpty',
    meaning:
      'A charge request could not be recorded in the database after maxReceiveCount receives and is parked in the DLQ: nothing was charged for it yet; fix the cause, then redrive.',
    metrics: [{ namespace: SQS, metricName: 'ApproximateNumberOfMessagesVisible' }],
  },
  {
    name: 'OldestMessageTooOld',
    meaning:
      'The oldest charge request has waited on the queue longer than the threshold: intake is falling behind or a message group is stuck.',
    metrics: [{ namespace: SQS, metricName: 'ApproximateAgeOfOldestMessage' }],
  },
  {
    name: 'ChargeFunctionErrors',
    meaning:
      'The charge function crashed or timed out (a declined card is not an error): its batch is redelivered and may end in the DLQ.',
    metrics: [{ namespace: LAMBDA, metricName: 'Errors' }],
  },
  {
    name: 'ChargeFunctionThrottled',
    meaning:
      "Charge invocations were throttled: the account's Lambda concurrency is exhausted, so intake slows down.",
    metrics: [{ namespace: LAMBDA, metricName: 'Throttles' }],
  },
  {
    name: 'ReconcileFunctionErrors',
    meaning: 'A reconcile sweep crashed or timed out: open operations and unpublished events wait for the next sweep.',
    metrics: [{ namespace: LAMBDA, metricName: 'Errors' }],
  },
  {
    name: 'ReconcileFunctionThrottled',
    meaning: "A reconcile sweep was throttled: the account's Lambda concurrency is exhausted.",
    metrics: [{ namespace: LAMBDA, metricName: 'Throttles' }],
  },
  {
    name: 'ReconcilerNotRunning',
    meaning:
      'No reconcile sweep has run, or none has published its gauges, for 10 minutes: open operations are not being settled and the other gauge alarms are blind.',
    metrics: [
      { namespace: LAMBDA, metricName: 'Invocations' },
      { namespace: APP, metricName: METRICS.reviewQueueSize },
    ],
  },
  {
    name: 'ReviewQueueNotEmpty',
    meaning:
      'At least one operation waits for a human decision (key window expired without proof, idempotency-key misuse, conflicting order): resolve it with the ops tool.',
    metrics: [{ namespace: APP, metricName: METRICS.reviewQueueSize }],
  },
  {
    name: 'OldestOpenOperationTooOld',
    meaning:
      'An operation has stayed pending or unknown longer than the threshold: Stripe is failing or refusing, or a lease is stuck.',
    metrics: [{ namespace: APP, metricName: METRICS.oldestOpenAgeSeconds }],
  },
  {
    name: 'RejectedMessages',
    meaning:
      'A message was rejected (not JSON, bad schema, or an order that conflicts with an existing one) and recorded in rejected_messages: a producer bug; nothing was charged.',
    metrics: [{ namespace: APP, metricName: METRICS.rejectedMessages }],
  },
  {
    name: 'StripeAuthErrors',
    meaning:
      'Stripe refused the API key (401/403): the key is wrong, rolled or lacks a permission; charges stay pending until it is fixed.',
    metrics: [{ namespace: APP, metricName: METRICS.stripeAuthErrors }],
  },
  {
    name: 'StripeIdempotencyErrors',
    meaning:
      'Stripe reported an idempotency-key misuse (same key, different parameters): a bug; the operation went to human review.',
    metrics: [{ namespace: APP, metricName: METRICS.idempotencyErrors }],
  },
  {
    name: 'ConfigurationRefused',
    meaning:
      'The charge or reconcile function refused its configuration (e.g. a Stripe timeout under which no call could ever start inside the function timeout): no charge is attempted until it is fixed; requests are still recorded.',
    metrics: [{ namespace: APP, metricName: METRICS.configurationRefused }],
  },
  {
    name: 'OutcomeEventsNotPublished',
    meaning:
      'An outcome event has waited in the outbox longer than the threshold: PutEvents is failing and downstream services are not being told.',
    metrics: [{ namespace: APP, metricName: METRICS.oldestUnpublishedEventAgeSeconds }],
  },
  {
    name: 'RetentionBehind',
    meaning:
      'A row past its retention bound (a published outbox row, a Stripe event, a rejected body, an operator read, a resolved finding) has stayed more than a day: the reconciler\'s retention phase does not keep up or fails; the tables grow.',
    metrics: [{ namespace: APP, metricName: METRICS.retentionOverdueSeconds }],
  },
  {
    name: 'DuplicateChargeRemedied',
    meaning:
      'An order was charged twice and the duplicate-charge remedy created a refund of the extra PaymentIntent (from List, a Stripe event or an operator): find out why.',
    metrics: [{ namespace: APP, metricName: METRICS.duplicateChargesRemedied }],
  },
  {
    name: 'ReissueWatchFinding',
    meaning:
      'The watch over a re-issued operation found what no machine can settle: a Refund made twice, a late PaymentIntent the remedy may not refund, a late second hold of an authorization, or a watch that could not list for several looks.',
    metrics: [{ namespace: APP, metricName: METRICS.openWatchFindings }],
  },
  {
    name: 'AuthorizationsExpiring',
    meaning:
      'More authorizations than the threshold expire at Stripe within a day with no capture or cancel: the producer that captures them is down or behind; each one that lapses is a sale to charge again.',
    metrics: [{ namespace: APP, metricName: METRICS.authorizationsExpiringSoon }],
  },
  {
    name: 'AuditPartitionsBehind',
    meaning:
      "Rows of the audit trail for a coming month went to its default partition before the month's partition was made, so the reconciler can no longer make it: the month cannot be archived on its own until an operator moves the rows.",
    metrics: [{ namespace: APP, metricName: METRICS.auditMonthsWithoutPartition }],
  },
  {
    name: 'StripeWebhookRejected',
    meaning:
      'Deliveries to the Stripe-events endpoint are refused at a sustained rate (bad or missing signature, stale timestamp, oversize, not an event): a signing-secret mismatch, or a forging flood. Nothing was recorded.',
    metrics: [{ namespace: APP, metricName: METRICS.stripeWebhookRejected }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeWebhookUnavailable',
    meaning:
      'A Stripe event could not be recorded (no signing secret yet, database unreachable) and was answered 503: Stripe retries it for up to three days.',
    metrics: [{ namespace: APP, metricName: METRICS.stripeWebhookUnavailable }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventBacklogTooOld',
    meaning:
      'A recorded Stripe event has waited in the inbox longer than the threshold without being applied: the reconciler is not running, Stripe is unreachable, or an event keeps failing.',
    metrics: [{ namespace: APP, metricName: METRICS.oldestInboxEventAgeSeconds }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventContradiction',
    meaning:
      'A Stripe event contradicts a final operation (money moved for a failed one, a second succeeded PaymentIntent for an order, a succeeded refund that failed since): the state was not rewritten; a human must explain it.',
    metrics: [{ namespace: APP, metricName: METRICS.openContradictions }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventRefused',
    meaning:
      "A Stripe event was refused: from a connected account or the other mode than our key's, or our key's retrieve did not confirm it (unknown object, not ours). Nothing changed; polling settles. A misconfigured endpoint, or forged events.",
    metrics: [{ namespace: APP, metricName: METRICS.openRefusedStripeEvents }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventsNotArriving',
    meaning:
      'Operations reach Stripe but no Stripe event has arrived since, for longer than the threshold: the fast path is off (endpoint not registered, wrong signing secret, partner rule disabled). Polling still settles, slower.',
    metrics: [{ namespace: APP, metricName: METRICS.stripeEventsSilentSeconds }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'UnrecordedCharge',
    meaning:
      'Stripe reported a PaymentIntent carrying our metadata for an operation the ledger does not have: money may have moved that the ledger does not know of.',
    metrics: [{ namespace: APP, metricName: METRICS.openUnrecordedCharges }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventsFunctionErrors',
    meaning:
      'The Stripe-events function crashed or timed out (a refused or unrecorded delivery is not an error): webhook deliveries get a 5xx and Stripe retries them; partner events are retried, then kept on the failure queue.',
    metrics: [{ namespace: LAMBDA, metricName: 'Errors' }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'StripeEventsFunctionThrottled',
    meaning:
      'Stripe-events invocations were throttled at the reserved concurrency (a delivery burst or a flood of requests): webhook deliveries got 429 and Stripe retries them; partner events wait in Lambda\'s queue.',
    metrics: [{ namespace: LAMBDA, metricName: 'Throttles' }],
    builtWith: 'stripeEvents',
  },
  {
    name: 'PartnerEventsNotRecorded',
    meaning:
      'A Stripe partner event is on the failure queue: the function failed on it through all of Lambda\'s retries, or EventBridge could not invoke it. It is kept 14 days; fix the cause, then replay it (npm run redrive:partner-events).',
    metrics: [{ namespace: SQS, metricName: 'ApproximateNumberOfMessagesVisible' }],
    builtWith: 'partnerEvents',
  },
  {
    name: 'DatabaseFreeStorageLow',
    meaning:
      'The database has less than 2 GiB of free storage: autoscaling did not keep up or reached its ceiling; when it is full every charge fails to be recorded.',
    metrics: [{ namespace: RDS, metricName: 'FreeStorageSpace' }],
    builtWith: 'ownDatabase',
  },
  {
    name: 'DatabaseCpuCreditsLow',
    meaning:
      'The burstable database instance is running out of CPU credits: at 0 it is throttled to its baseline and every charge and sweep slows down.',
    metrics: [{ namespace: RDS, metricName: 'CPUCreditBalance' }],
    builtWith: 'ownDatabase',
  },
  {
    name: 'DatabaseConnectionsHigh',
    meaning:
      'The database has more connections than the threshold: containers or another client are near max_connections, after which new connections (and charges) are refused.',
    metrics: [{ namespace: RDS, metricName: 'DatabaseConnections' }],
    builtWith: 'ownDatabase',
  },
  {
    name: 'DatabaseSecretRotationFailed',
    meaning:
      "A rotation function of the database's secrets (owner, application role) failed: the rotation is left unfinished and Secrets Manager retries it; the old password keeps working until it finishes.",
    metrics: [{ namespace: LAMBDA, metricName: 'Errors' }],
    builtWith: 'ownDatabase',
  },
  {
    name: 'ExampleConsumerDeadLetterQueueNotEmpty',
    meaning:
      "An outcome event reached the example consumer's DLQ: EventBridge could not deliver it to the example queue, or it was received 5 times without being deleted.",
    metrics: [{ namespace: SQS, metricName: 'ApproximateNumberOfMessagesVisible' }],
    builtWith: 'exampleConsumer',
  },
] as const satisfies readonly AlarmDescription[];

export type AlarmName = (typeof ALARM_CATALOG)[number]['name'];

export function describeAlarm(name: AlarmName): AlarmDescription {
  const found = ALARM_CATALOG.find((entry) => entry.name === name);
  if (!found) throw new Error(`unknown alarm ${name}`);
  return found;
}

// ── Outcome consumers (lib/outcome-consumer.ts) ──────────────────────────────────────────────────
// Every OutcomeConsumer builds these, named `${pipelineName}-${consumerName}-${name}` by default;
// docs/runbook.md has one section per entry, after the pipeline's. Their app metrics carry the
// dimensions service, consumer, policy (lambdas/consumers/kit/lambda.ts) and pipeline (PIPELINE_NAME).
const CONSUMER = 'OutcomeConsumers';

export const CONSUMER_ALARM_CATALOG = [
  {
    name: 'ConsumerDeadLetterQueueNotEmpty',
    meaning:
      "An outcome event reached the consumer's DLQ: EventBridge could not deliver it, or the consumer could not record it after maxReceiveCount receives; its effect has not run. Fix, then redrive (the inbox absorbs repeats).",
    metrics: [{ namespace: SQS, metricName: 'ApproximateNumberOfMessagesVisible' }],
  },
  {
    name: 'ConsumerOldestEventTooOld',
    meaning: "The oldest outcome event has waited on the consumer's queue longer than the threshold: the consumer is failing or falling behind.",
    metrics: [{ namespace: SQS, metricName: 'ApproximateAgeOfOldestMessage' }],
  },
  {
    name: 'ConsumerFunctionErrors',
    meaning: 'The consumer function crashed or timed out: its batch is delivered again (the inbox decides per policy what a repeat does).',
    metrics: [{ namespace: LAMBDA, metricName: 'Errors' }],
  },
  {
    name: 'ConsumerPoisonEvents',
    meaning: 'A message on the consumer queue was not an outcome event the consumer can read; it was recorded in outcome_consumer.poison_events and acknowledged.',
    metrics: [{ namespace: CONSUMER, metricName: 'PoisonEvents' }],
  },
  {
    name: 'ConsumerEffectsAbandoned',
    meaning: 'An at-most-once effect met an ambiguous answer or an interrupted attempt and was given up: it may not have happened (the miss this policy accepts).',
    metrics: [{ namespace: CONSUMER, metricName: 'EffectsAbandoned' }],
  },
  {
    name: 'ConsumerEffectsFailed',
    meaning: "The consumer's provider refused an effect for good (a 4xx no retry can fix): recorded as failed, not retried.",
    metrics: [{ namespace: CONSUMER, metricName: 'EffectsFailed' }],
  },
] as const satisfies readonly AlarmDescription[];

export type ConsumerAlarmName = (typeof CONSUMER_ALARM_CATALOG)[number]['name'];

/** The default metrics namespace of outcome consumers (OutcomeConsumerProps.metricsNamespace). */
export const CONSUMER_METRICS_NAMESPACE = CONSUMER;
