// Observability: the alarms of ALARM_CATALOG to an SNS topic (optional e-mail subscription), and a
// dashboard with the queue, the functions, the outcomes and the reconciler's gauges.
import * as cdk from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as subscriptions from 'aws-cdk-lib/aws-sns-subscriptions';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { METRICS, PIPELINE } from '../lambdas/runtime/settings.ts';
import { type AlarmName, describeAlarm } from './alarm-catalog.ts';

export type PipelineMetricName = (typeof METRICS)[keyof typeof METRICS];

/**
 * Where one pipeline instance's own metrics live: its namespace and the dimensions every metric it
 * publishes carries (service, and pipeline = the instance's name, added by the functions from
 * PIPELINE_NAME). Two instances in one account and region never share a metric, so one's alarms
 * never fire on the other's data. Anything that alarms on or graphs the functions' EMF metrics takes
 * this, never a namespace string.
 */
export interface PipelineMetrics {
  readonly namespace: string;
  readonly dimensionsMap: Readonly<Record<string, string>>;
}

/** The metrics identity of the instance named `pipelineName` publishing under `namespace`. */
export function pipelineMetrics(namespace: string, pipelineName: string): PipelineMetrics {
  return { namespace, dimensionsMap: { service: PIPELINE.serviceName, pipeline: pipelineName } };
}

/** A metric the functions publish as EMF, of the instance `metrics` identifies. */
export function pipelineMetric(metrics: PipelineMetrics, metricName: PipelineMetricName, props: cw.MetricOptions = {}): cw.Metric {
  return new cw.Metric({
    namespace: metrics.namespace,
    metricName,
    dimensionsMap: { ...metrics.dimensionsMap },
    period: cdk.Duration.minutes(5),
    ...props,
  });
}

export interface PipelineAlarm {
  readonly name: AlarmName;
  /** One line for the runbook. */
  readonly meaning: string;
  readonly alarm: cw.Alarm;
}

export interface ObservabilityProps {
  readonly metrics: PipelineMetrics;
  readonly queue: sqs.IQueue;
  readonly deadLetterQueue: sqs.IQueue;
  readonly chargeFunction: lambda.IFunction;
  readonly reconcileFunction: lambda.IFunction;
  /** The RDS instance on the dashboard (the construct's, or existingDatabase.instanceIdentifier). */
  readonly databaseInstanceIdentifier?: string;
  /**
   * The construct created the instance: only then the database alarms (a second pipeline on a shared
   * instance would page twice for one instance) and the rotation alarm.
   */
  readonly ownsDatabase: boolean;
  /** The rotation functions of the database secrets the construct rotates (DatabaseSecretRotationFailed). */
  readonly rotationFunctionNames: readonly string[];
  /** The example consumer's DLQ, when it exists. */
  readonly exampleConsumerDeadLetterQueue?: sqs.IQueue;
  readonly databaseConnectionsThreshold: number;
  /** AuthorizationsExpiring: more than this many authorizations within a day of expiring uncaptured. */
  readonly authorizationsExpiringThreshold: number;
  readonly eventBus: events.IEventBus;
  readonly exampleConsumerRule?: events.IRule;
  readonly alarmTopic?: sns.ITopic;
  readonly alarmEmail?: string;
  readonly alarmNamePrefix: string;
  readonly oldestMessageAgeThreshold: cdk.Duration;
  readonly oldestOpenOperationAgeThreshold: cdk.Duration;
  readonly oldestUnpublishedEventAgeThreshold: cdk.Duration;
  readonly dashboardName?: string;
  readonly removalPolicy: cdk.RemovalPolicy;
  /** Stripe events in (lib/stripe-events.ts): its alarms and dashboard row. */
  readonly stripeEvents?: {
    readonly function: lambda.IFunction;
    readonly oldestEventAgeThreshold: cdk.Duration;
    readonly silenceThreshold: cdk.Duration;
    /** StripeWebhookRejected: refused deliveries per 5 minutes, sustained for two periods. */
    readonly webhookRejectedPerFiveMinutes: number;
    /** eventbridge: the partner-event failure queue. */
    readonly partnerEventFailureQueue?: sqs.IQueue;
  };
}

const FIVE_MINUTES = cdk.Duration.minutes(5);
/**
 * RetentionBehind: the oldest row past its bound has stayed a day more. A run a minute removes what
 * became due since the last one; a day of slack rides out a reconciler outage or a backlog after a
 * bound was lowered, and is far below what a day of growth costs at any real rate.
 */
export const RETENTION_BEHIND_THRESHOLD_SECONDS = 86_400;

/**
 * Thresholds of the database alarms. Storage autoscaling adds space when 10 % is left, at most every
 * 6 hours, and never past its ceiling: 2 GiB left means it did not (or cannot) keep up. A burstable
 * instance (db.t4g) throttles to its baseline CPU at 0 credits; 20 is hours of warning on a micro
 * (an instance class without credits publishes no CPUCreditBalance: missing data, no alarm).
 */
export const DATABASE_ALARMS = { freeStorageBytes: 2 * 1024 ** 3, cpuCreditBalance: 20 } as const;

export class Observability extends Construct {
  readonly alarmTopic: sns.ITopic;
  readonly alarms: readonly PipelineAlarm[];
  readonly dashboard: cw.Dashboard;

  constructor(scope: Construct, id: string, props: ObservabilityProps) {
    super(scope, id);
    this.alarmTopic = props.alarmTopic ?? this.createTopic(props.removalPolicy);
    if (props.alarmEmail) {
      this.alarmTopic.addSubscription(new subscriptions.EmailSubscription(props.alarmEmail));
    }

    const app = (name: PipelineMetricName, options: cw.MetricOptions = {}) =>
      pipelineMetric(props.metrics, name, options);
    const sum = { statistic: cw.Stats.SUM, period: FIVE_MINUTES };
    const max = { statistic: cw.Stats.MAXIMUM, period: FIVE_MINUTES };
    const alarms: PipelineAlarm[] = [];
    const action = new cwActions.SnsAction(this.alarmTopic);

    const add = (
      name: AlarmName,
      metric: cw.IMetric,
      threshold: number,
      options: Partial<Pick<cw.AlarmProps, 'comparisonOperator' | 'evaluationPeriods' | 'datapointsToAlarm' | 'treatMissingData'>> = {},
    ) => {
      const { meaning } = describeAlarm(name);
      const alarm = new cw.Alarm(this, name, {
        alarmName: `${props.alarmNamePrefix}${name}`,
        alarmDescription: meaning,
        metric,
        threshold,
        comparisonOperator: options.comparisonOperator ?? cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: options.evaluationPeriods ?? 1,
        datapointsToAlarm: options.datapointsToAlarm ?? options.evaluationPeriods ?? 1,
        treatMissingData: options.treatMissingData ?? cw.TreatMissingData.NOT_BREACHING,
      });
      alarm.addAlarmAction(action);
      alarm.addOkAction(action);
      alarms.push({ name, meaning, alarm });
      return alarm;
    };

    // Intake
    add('DeadLetterQueueNotEmpty', props.deadLetterQueue.metricApproximateNumberOfMessagesVisible(max), 0);
    add(
      'OldestMessageTooOld',
      props.queue.metricApproximateAgeOfOldestMessage(max),
      props.oldestMessageAgeThreshold.toSeconds(),
    );
    // Functions
    add('ChargeFunctionErrors', props.chargeFunction.metricErrors(sum), 0);
    add('ChargeFunctionThrottled', props.chargeFunction.metricThrottles(sum), 0);
    add('ReconcileFunctionErrors', props.reconcileFunction.metricErrors(sum), 0);
    add('ReconcileFunctionThrottled', props.reconcileFunction.metricThrottles(sum), 0);
    // The reconciler runs every minute and publishes its gauges each run. If either is missing for
    // two 5-minute periods, nothing settles open operations and the gauge alarms below see nothing.
    add(
      'ReconcilerNotRunning',
      new cw.MathExpression({
        expression: 'MIN([FILL(invocations, 0), FILL(gauges, 0)])',
        usingMetrics: {
          invocations: props.reconcileFunction.metricInvocations(sum),
          gauges: app(METRICS.reviewQueueSize, { statistic: cw.Stats.SAMPLE_COUNT, period: FIVE_MINUTES }),
        },
        label: 'reconcile runs that published gauges',
        period: FIVE_MINUTES,
      }),
      1,
      {
        comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD,
        evaluationPeriods: 2,
        treatMissingData: cw.TreatMissingData.BREACHING,
      },
    );
    // Gauges and counters the functions publish
    add('ReviewQueueNotEmpty', app(METRICS.reviewQueueSize, max), 0);
    add(
      'OldestOpenOperationTooOld',
      app(METRICS.oldestOpenAgeSeconds, max),
      props.oldestOpenOperationAgeThreshold.toSeconds(),
    );
    add('RejectedMessages', app(METRICS.rejectedMessages, sum), 0);
    add('StripeAuthErrors', app(METRICS.stripeAuthErrors, sum), 0);
    add('StripeIdempotencyErrors', app(METRICS.idempotencyErrors, sum), 0);
    add('ConfigurationRefused', app(METRICS.configurationRefused, sum), 0);
    add(
      'OutcomeEventsNotPublished',
      app(METRICS.oldestUnpublishedEventAgeSeconds, max),
      props.oldestUnpublishedEventAgeThreshold.toSeconds(),
    );
    // Retention (lambdas/payments/retention-store.ts): a day past its bound is a phase that does not
    // keep up (the inflow outgrows RETENTION_BATCH_SIZE × RETENTION_MAX_BATCHES a run) or fails.
    add('RetentionBehind', app(METRICS.retentionOverdueSeconds, max), RETENTION_BEHIND_THRESHOLD_SECONDS);
    add('DuplicateChargeRemedied', app(METRICS.duplicateChargesRemedied, max), 0);
    // The watch after a re-issue: polling's own safety net, with Stripe events or without.
    add('ReissueWatchFinding', app(METRICS.openWatchFindings, max), 0);
    // Manual capture: authorizations about to lapse at Stripe with nobody capturing or releasing them.
    add('AuthorizationsExpiring', app(METRICS.authorizationsExpiringSoon, max), props.authorizationsExpiringThreshold);
    // The audit trail's months: one that lost its partition to the default one (runbook).
    add('AuditPartitionsBehind', app(METRICS.auditMonthsWithoutPartition, max), 0);
    // Stripe events in: refused deliveries, deliveries Stripe must retry, a stuck inbox, and what
    // the events showed that the ledger cannot explain (open findings keep their gauge up).
    if (props.stripeEvents) {
      // A rate, not one request: anyone may POST to the URL, and a stranger's curl is no page. A wrong
      // signing secret refuses every delivery (a sustained rate at any real traffic); at a trickle,
      // StripeEventsNotArriving says the fast path is off.
      add('StripeWebhookRejected', app(METRICS.stripeWebhookRejected, sum), props.stripeEvents.webhookRejectedPerFiveMinutes, { evaluationPeriods: 2 });
      add('StripeWebhookUnavailable', app(METRICS.stripeWebhookUnavailable, sum), 0);
      add('StripeEventBacklogTooOld', app(METRICS.oldestInboxEventAgeSeconds, max), props.stripeEvents.oldestEventAgeThreshold.toSeconds());
      add('StripeEventContradiction', app(METRICS.openContradictions, max), 0);
      // Refused and unconfirmed events: open findings keep the gauge up until an operator resolves them.
      add('StripeEventRefused', app(METRICS.openRefusedStripeEvents, max), 0);
      // The fast path silent while operations reach Stripe (the reconciler's gauge; 0 when idle). A
      // reconciler that stops publishing is ReconcilerNotRunning's: missing data is not a breach here.
      add('StripeEventsNotArriving', app(METRICS.stripeEventsSilentSeconds, max), props.stripeEvents.silenceThreshold.toSeconds());
      add('UnrecordedCharge', app(METRICS.openUnrecordedCharges, max), 0);
      add('StripeEventsFunctionErrors', props.stripeEvents.function.metricErrors(sum), 0);
      add('StripeEventsFunctionThrottled', props.stripeEvents.function.metricThrottles(sum), 0);
      if (props.stripeEvents.partnerEventFailureQueue) {
        add('PartnerEventsNotRecorded', props.stripeEvents.partnerEventFailureQueue.metricApproximateNumberOfMessagesVisible(max), 0);
      }
    }
    // The database, when it is the construct's: whoever owns a shared instance alarms on it, once.
    if (props.ownsDatabase && props.databaseInstanceIdentifier) {
      const rdsMetric = (metricName: string, statistic: string) =>
        new cw.Metric({
          namespace: 'AWS/RDS',
          metricName,
          dimensionsMap: { DBInstanceIdentifier: props.databaseInstanceIdentifier! },
          statistic,
          period: FIVE_MINUTES,
        });
      const below = { comparisonOperator: cw.ComparisonOperator.LESS_THAN_THRESHOLD };
      add('DatabaseFreeStorageLow', rdsMetric('FreeStorageSpace', cw.Stats.MINIMUM), DATABASE_ALARMS.freeStorageBytes, below);
      add('DatabaseCpuCreditsLow', rdsMetric('CPUCreditBalance', cw.Stats.MINIMUM), DATABASE_ALARMS.cpuCreditBalance, below);
      add('DatabaseConnectionsHigh', rdsMetric('DatabaseConnections', cw.Stats.MAXIMUM), props.databaseConnectionsThreshold);
      // A rotation is a Lambda function's four steps; a failed step is that function's error, and
      // Secrets Manager leaves the rotation pending and retries it.
      const rotations = props.rotationFunctionNames.map((functionName) => new cw.Metric({ namespace: 'AWS/Lambda', metricName: 'Errors', dimensionsMap: { FunctionName: functionName }, ...sum }));
      if (rotations.length > 0) {
        add(
          'DatabaseSecretRotationFailed',
          rotations.length === 1
            ? rotations[0]!
            : new cw.MathExpression({
                expression: rotations.map((_, i) => `FILL(r${i}, 0)`).join(' + '),
                usingMetrics: Object.fromEntries(rotations.map((m, i) => [`r${i}`, m])),
                label: 'rotation function errors',
                period: FIVE_MINUTES,
              }),
          0,
        );
      }
    }
    if (props.exampleConsumerDeadLetterQueue) {
      add('ExampleConsumerDeadLetterQueueNotEmpty', props.exampleConsumerDeadLetterQueue.metricApproximateNumberOfMessagesVisible(max), 0);
    }
    this.alarms = alarms;

    this.dashboard = this.createDashboard(props, app);
  }

  private createTopic(removalPolicy: cdk.RemovalPolicy): sns.Topic {
    // CloudWatch can publish to an encrypted topic only through a customer managed key that lets it.
    const key = new kms.Key(this, 'AlarmTopicKey', {
      description: 'Charge pipeline alarm topic encryption',
      enableKeyRotation: true,
      // Nothing stays encrypted under it once the topic is gone (SNS keeps no messages).
      removalPolicy: removalPolicy === cdk.RemovalPolicy.RETAIN ? cdk.RemovalPolicy.RETAIN : cdk.RemovalPolicy.DESTROY,
      pendingWindow: cdk.Duration.days(7),
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AllowCloudWatchAlarmsToPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        resources: ['*'],
        // This account's alarms only (confused deputy), as on the topic policy below.
        conditions: { StringEquals: { 'aws:SourceAccount': cdk.Stack.of(this).account } },
      }),
    );
    const topic = new sns.Topic(this, 'AlarmTopic', {
      displayName: 'Charge pipeline alarms',
      masterKey: key,
      enforceSSL: true,
    });
    // The topic policy CDK writes replaces SNS's default one, which is what let same-account
    // CloudWatch alarms publish; say it explicitly, for this account's alarms only.
    const stack = cdk.Stack.of(this);
    topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'AllowThisAccountsAlarmsToPublish',
        principals: [new iam.ServicePrincipal('cloudwatch.amazonaws.com')],
        actions: ['sns:Publish'],
        resources: [topic.topicArn],
        conditions: {
          StringEquals: { 'aws:SourceAccount': stack.account },
          ArnLike: { 'aws:SourceArn': `arn:${stack.partition}:cloudwatch:${stack.region}:${stack.account}:alarm:*` },
        },
      }),
    );
    return topic;
  }

  private createDashboard(
    props: ObservabilityProps,
    app: (name: PipelineMetricName, options?: cw.MetricOptions) => cw.Metric,
  ): cw.Dashboard {
    const sum = (name: PipelineMetricName) => app(name, { statistic: cw.Stats.SUM, period: cdk.Duration.minutes(1) });
    const gauge = (name: PipelineMetricName) => app(name, { statistic: cw.Stats.MAXIMUM, period: cdk.Duration.minutes(1) });
    const fn = (f: lambda.IFunction, label: string) => [
      f.metricInvocations({ label: `${label} invocations`, period: cdk.Duration.minutes(1) }),
      f.metricErrors({ label: `${label} errors`, period: cdk.Duration.minutes(1) }),
      f.metricThrottles({ label: `${label} throttles`, period: cdk.Duration.minutes(1) }),
    ];
    const width = 8;

    const dashboard = new cw.Dashboard(this, 'Dashboard', {
      dashboardName: props.dashboardName,
      defaultInterval: cdk.Duration.hours(3),
    });
    dashboard.addWidgets(
      new cw.AlarmStatusWidget({
        title: 'Alarms',
        alarms: this.alarms.map((entry) => entry.alarm),
        width: 24,
        height: 4,
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Queue: requests waiting and in flight',
        width,
        left: [
          props.queue.metricApproximateNumberOfMessagesVisible({ label: 'visible' }),
          props.queue.metricApproximateNumberOfMessagesNotVisible({ label: 'in flight' }),
          props.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ label: 'DLQ' }),
        ],
      }),
      new cw.GraphWidget({
        title: 'Queue: age of the oldest request (s)',
        width,
        left: [props.queue.metricApproximateAgeOfOldestMessage({ label: 'oldest' })],
        leftAnnotations: [{ value: props.oldestMessageAgeThreshold.toSeconds(), label: 'alarm' }],
      }),
      new cw.GraphWidget({
        title: 'Outcomes per minute',
        width,
        left: [
          sum(METRICS.chargeSucceeded),
          sum(METRICS.chargeFailed),
          sum(METRICS.chargeLeftOpen),
          sum(METRICS.reconciledOperations),
        ],
        // Requests still sent with the first contract's deduplication id: 0 once every producer moved.
        right: [sum(METRICS.legacyDeduplicationIds)],
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Charge function',
        width,
        left: fn(props.chargeFunction, 'charge'),
        right: [props.chargeFunction.metricDuration({ statistic: cw.Stats.p(99), label: 'p99 duration' })],
      }),
      new cw.GraphWidget({
        title: 'Reconcile function',
        width,
        left: fn(props.reconcileFunction, 'reconcile'),
        right: [props.reconcileFunction.metricDuration({ statistic: cw.Stats.MAXIMUM, label: 'max duration' })],
      }),
      new cw.GraphWidget({
        title: 'Problems (should stay at 0)',
        width,
        left: [
          sum(METRICS.rejectedMessages),
          sum(METRICS.recordsNotDurable),
          sum(METRICS.stripeAuthErrors),
          sum(METRICS.idempotencyErrors),
          sum(METRICS.configurationRefused),
        ],
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Open operations',
        width,
        left: [gauge(METRICS.openPending), gauge(METRICS.openUnknown), gauge(METRICS.reviewQueueSize)],
      }),
      new cw.GraphWidget({
        title: 'Oldest open operation / unpublished event (s)',
        width,
        left: [gauge(METRICS.oldestOpenAgeSeconds), gauge(METRICS.oldestUnpublishedEventAgeSeconds)],
      }),
      new cw.GraphWidget({
        title: 'Outbox, rejected messages, duplicate charges remedied',
        width,
        left: [gauge(METRICS.unpublishedEvents), gauge(METRICS.rejectedLastPeriod), gauge(METRICS.duplicateChargesRemedied)],
      }),
      new cw.GraphWidget({
        title: 'Re-issued operations under watch, open watch findings, audit months without a partition, authorizations expiring',
        width,
        left: [gauge(METRICS.openWatches), gauge(METRICS.openWatchFindings), gauge(METRICS.auditMonthsWithoutPartition), gauge(METRICS.authorizationsExpiringSoon)],
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Retention: rows removed per minute, overdue (s)',
        width,
        left: [sum(METRICS.retentionRowsRemoved)],
        right: [gauge(METRICS.retentionOverdueSeconds)],
      }),
    );
    dashboard.addWidgets(
      new cw.GraphWidget({
        title: 'Stripe events in (per minute)',
        width,
        left: [
          sum(METRICS.stripeEventsReceived),
          sum(METRICS.stripeEventDuplicates),
          sum(METRICS.stripeEventsApplied),
          sum(METRICS.stripeWebhookRejected),
          sum(METRICS.stripeWebhookUnavailable),
        ],
        ...(props.stripeEvents
          ? {
              right: [
                props.stripeEvents.function.metricErrors({ label: 'function errors', period: cdk.Duration.minutes(1) }),
                props.stripeEvents.function.metricThrottles({ label: 'function throttles', period: cdk.Duration.minutes(1) }),
                ...(props.stripeEvents.partnerEventFailureQueue
                  ? [props.stripeEvents.partnerEventFailureQueue.metricApproximateNumberOfMessagesVisible({ label: 'partner events on the failure queue', period: cdk.Duration.minutes(1) })]
                  : []),
              ],
            }
          : {}),
      }),
      new cw.GraphWidget({
        title: 'Stripe event inbox: backlog; oldest and silent for (s)',
        width,
        left: [gauge(METRICS.inboxBacklog)],
        right: [gauge(METRICS.oldestInboxEventAgeSeconds), gauge(METRICS.stripeEventsSilentSeconds)],
      }),
      new cw.GraphWidget({
        title: 'Contradictions, unrecorded charges, refused events (should stay at 0)',
        width,
        left: [
          gauge(METRICS.openContradictions),
          gauge(METRICS.openUnrecordedCharges),
          gauge(METRICS.openRefusedStripeEvents),
          sum(METRICS.stripeEventContradictions),
          sum(METRICS.unrecordedCharges),
          sum(METRICS.stripeEventsRefused),
        ],
      }),
    );
    const databaseMetric = (metricName: string, label: string) =>
      new cw.Metric({
        namespace: 'AWS/RDS',
        metricName,
        dimensionsMap: { DBInstanceIdentifier: props.databaseInstanceIdentifier ?? '' },
        statistic: cw.Stats.MAXIMUM,
        period: cdk.Duration.minutes(1),
        label,
      });
    const eventWidgets: cw.IWidget[] = [];
    const consumerRule = props.exampleConsumerRule;
    if (consumerRule) {
      const rule = (metricName: string, label: string) =>
        new cw.Metric({
          namespace: 'AWS/Events',
          metricName,
          dimensionsMap: { EventBusName: props.eventBus.eventBusName, RuleName: consumerRule.ruleName },
          statistic: cw.Stats.SUM,
          period: cdk.Duration.minutes(1),
          label,
        });
      eventWidgets.push(
        new cw.GraphWidget({
          title: 'Example consumer rule',
          width,
          left: [rule('MatchedEvents', 'matched'), rule('Invocations', 'delivered'), rule('FailedInvocations', 'failed')],
          ...(props.exampleConsumerDeadLetterQueue ? { right: [props.exampleConsumerDeadLetterQueue.metricApproximateNumberOfMessagesVisible({ label: 'DLQ' })] } : {}),
        }),
      );
    }
    const databaseWidgets: cw.IWidget[] = props.databaseInstanceIdentifier
      ? [
          new cw.GraphWidget({
            title: 'Database: connections and CPU',
            width,
            left: [databaseMetric('DatabaseConnections', 'connections')],
            right: [databaseMetric('CPUUtilization', 'CPU %'), databaseMetric('CPUCreditBalance', 'CPU credits')],
          }),
          new cw.GraphWidget({
            title: 'Database: free storage (bytes)',
            width,
            left: [databaseMetric('FreeStorageSpace', 'free storage')],
          }),
        ]
      : [];
    if (databaseWidgets.length + eventWidgets.length > 0) dashboard.addWidgets(...databaseWidgets, ...eventWidgets);
    return dashboard;
  }
}
