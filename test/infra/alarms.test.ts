import * as cdk from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as sns from 'aws-cdk-lib/aws-sns';
import { afterAll, describe, expect, it } from 'vitest';
import { METRICS, PIPELINE } from '../../lambdas/runtime/settings.ts';
import { ALARM_CATALOG, type AlarmDescription, alarmNamesFor, type AlarmName } from '../../lib/alarm-catalog.ts';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import { type CfnResource, logicalId, newApp, ofType, removeSynthOutput, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

const { pipeline, resources } = synthPipeline();
const alarms = ofType(resources, 'AWS::CloudWatch::Alarm');
const byName = new Map(alarms.map(([, alarm]) => [alarm.Properties!.AlarmName as string, alarm]));
const alarm = (name: AlarmName): CfnResource => {
  const found = byName.get(`${pipeline.pipelineName}-${name}`);
  if (!found) throw new Error(`no alarm ${name}`);
  return found;
};
// Every metric of the functions carries this instance's pipeline name: no other pipeline's data.
const service = [
  { Name: 'pipeline', Value: pipeline.pipelineName },
  { Name: 'service', Value: PIPELINE.serviceName },
];
const dbDimension = () => [{ Name: 'DBInstanceIdentifier', Value: { Ref: logicalId(pipeline.database!) } }];
const fnDimension = (fn: cdk.IResource) => [{ Name: 'FunctionName', Value: { Ref: logicalId(fn) } }];
const queueDimension = (queue: cdk.IResource) => [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [logicalId(queue), 'QueueName'] } }];

interface Expected {
  namespace: string;
  metricName: string;
  dimensions: unknown;
  statistic: string;
  threshold: number;
  comparison?: string;
  evaluationPeriods?: number;
}

// name → metric, statistic and threshold (defaults of the construct); the alarms only other
// configurations build are checked on those below.
type OtherConfigurations = 'ReconcilerNotRunning' | 'PartnerEventsNotRecorded' | 'DatabaseSecretRotationFailed' | 'ExampleConsumerDeadLetterQueueNotEmpty';
const EXPECTED: Record<Exclude<AlarmName, OtherConfigurations>, Expected> = {
  DeadLetterQueueNotEmpty: {
    namespace: 'AWS/SQS',
    metricName: 'ApproximateNumberOfMessagesVisible',
    dimensions: queueDimension(pipeline.deadLetterQueue),
    statistic: 'Maximum',
    threshold: 0,
  },
  OldestMessageTooOld: {
    namespace: 'AWS/SQS',
    metricName: 'ApproximateAgeOfOldestMessage',
    dimensions: queueDimension(pipeline.queue),
    statistic: 'Maximum',
    threshold: 600,
  },
  ChargeFunctionErrors: { namespace: 'AWS/Lambda', metricName: 'Errors', dimensions: fnDimension(pipeline.chargeFunction), statistic: 'Sum', threshold: 0 },
  ChargeFunctionThrottled: { namespace: 'AWS/Lambda', metricName: 'Throttles', dimensions: fnDimension(pipeline.chargeFunction), statistic: 'Sum', threshold: 0 },
  ReconcileFunctionErrors: { namespace: 'AWS/Lambda', metricName: 'Errors', dimensions: fnDimension(pipeline.reconcileFunction), statistic: 'Sum', threshold: 0 },
  ReconcileFunctionThrottled: { namespace: 'AWS/Lambda', metricName: 'Throttles', dimensions: fnDimension(pipeline.reconcileFunction), statistic: 'Sum', threshold: 0 },
  ReviewQueueNotEmpty: { namespace: 'ChargePipeline', metricName: METRICS.reviewQueueSize, dimensions: service, statistic: 'Maximum', threshold: 0 },
  OldestOpenOperationTooOld: { namespace: 'ChargePipeline', metricName: METRICS.oldestOpenAgeSeconds, dimensions: service, statistic: 'Maximum', threshold: 3600 },
  RejectedMessages: { namespace: 'ChargePipeline', metricName: METRICS.rejectedMessages, dimensions: service, statistic: 'Sum', threshold: 0 },
  StripeAuthErrors: { namespace: 'ChargePipeline', metricName: METRICS.stripeAuthErrors, dimensions: service, statistic: 'Sum', threshold: 0 },
  StripeIdempotencyErrors: { namespace: 'ChargePipeline', metricName: METRICS.idempotencyErrors, dimensions: service, statistic: 'Sum', threshold: 0 },
  ConfigurationRefused: { namespace: 'ChargePipeline', metricName: METRICS.configurationRefused, dimensions: service, statistic: 'Sum', threshold: 0 },
  OutcomeEventsNotPublished: {
    namespace: 'ChargePipeline',
    metricName: METRICS.oldestUnpublishedEventAgeSeconds,
    dimensions: service,
    statistic: 'Maximum',
    threshold: 300,
  },
  RetentionBehind: { namespace: 'ChargePipeline', metricName: METRICS.retentionOverdueSeconds, dimensions: service, statistic: 'Maximum', threshold: 86_400 },
  DuplicateChargeRemedied: { namespace: 'ChargePipeline', metricName: METRICS.duplicateChargesRemedied, dimensions: service, statistic: 'Maximum', threshold: 0 },
  ReissueWatchFinding: { namespace: 'ChargePipeline', metricName: METRICS.openWatchFindings, dimensions: service, statistic: 'Maximum', threshold: 0 },
  AuditPartitionsBehind: { namespace: 'ChargePipeline', metricName: METRICS.auditMonthsWithoutPartition, dimensions: service, statistic: 'Maximum', threshold: 0 },
  AuthorizationsExpiring: { namespace: 'ChargePipeline', metricName: METRICS.authorizationsExpiringSoon, dimensions: service, statistic: 'Maximum', threshold: 10 },
  // a rate: more than 10 refusals in each of two 5-minute periods (one stranger's request is no page)
  StripeWebhookRejected: { namespace: 'ChargePipeline', metricName: METRICS.stripeWebhookRejected, dimensions: service, statistic: 'Sum', threshold: 10, evaluationPeriods: 2 },
  StripeWebhookUnavailable: { namespace: 'ChargePipeline', metricName: METRICS.stripeWebhookUnavailable, dimensions: service, statistic: 'Sum', threshold: 0 },
  StripeEventBacklogTooOld: { namespace: 'ChargePipeline', metricName: METRICS.oldestInboxEventAgeSeconds, dimensions: service, statistic: 'Maximum', threshold: 600 },
  StripeEventContradiction: { namespace: 'ChargePipeline', metricName: METRICS.openContradictions, dimensions: service, statistic: 'Maximum', threshold: 0 },
  StripeEventRefused: { namespace: 'ChargePipeline', metricName: METRICS.openRefusedStripeEvents, dimensions: service, statistic: 'Maximum', threshold: 0 },
  StripeEventsNotArriving: { namespace: 'ChargePipeline', metricName: METRICS.stripeEventsSilentSeconds, dimensions: service, statistic: 'Maximum', threshold: 900 },
  UnrecordedCharge: { namespace: 'ChargePipeline', metricName: METRICS.openUnrecordedCharges, dimensions: service, statistic: 'Maximum', threshold: 0 },
  StripeEventsFunctionErrors: { namespace: 'AWS/Lambda', metricName: 'Errors', dimensions: fnDimension(pipeline.stripeEvents!.function), statistic: 'Sum', threshold: 0 },
  StripeEventsFunctionThrottled: { namespace: 'AWS/Lambda', metricName: 'Throttles', dimensions: fnDimension(pipeline.stripeEvents!.function), statistic: 'Sum', threshold: 0 },
  DatabaseFreeStorageLow: {
    namespace: 'AWS/RDS',
    metricName: 'FreeStorageSpace',
    dimensions: dbDimension(),
    statistic: 'Minimum',
    threshold: 2 * 1024 ** 3,
    comparison: 'LessThanThreshold',
  },
  DatabaseCpuCreditsLow: {
    namespace: 'AWS/RDS',
    metricName: 'CPUCreditBalance',
    dimensions: dbDimension(),
    statistic: 'Minimum',
    threshold: 20,
    comparison: 'LessThanThreshold',
  },
  DatabaseConnectionsHigh: {
    namespace: 'AWS/RDS',
    metricName: 'DatabaseConnections',
    dimensions: dbDimension(),
    statistic: 'Maximum',
    threshold: 80,
  },
};

describe('the alarms', () => {
  const built = alarmNamesFor({ stripeEvents: 'webhook', ownDatabase: true, exampleConsumer: pipeline.exampleConsumerQueue !== undefined });

  it('are exactly the catalog\'s for the configuration: every entry built has one alarm, and there is no other', () => {
    expect(pipeline.alarms.map((entry) => entry.name)).toEqual(built);
    expect([...byName.keys()].sort()).toEqual(built.map((name) => `${pipeline.pipelineName}-${name}`).sort());
  });

  it.each([
    ['eventbridge, own database', { stripeEvents: 'eventbridge', stripePartnerEventBusName: 'aws.partner/stripe.com/ed_test_alarms', exampleConsumer: true }, { stripeEvents: 'eventbridge', ownDatabase: true, exampleConsumer: true }],
    ['no Stripe events, no example consumer', { stripeEvents: 'none', exampleConsumer: false }, { stripeEvents: 'none', ownDatabase: true, exampleConsumer: false }],
  ] as const)('are exactly the catalog\'s for the configuration: %s', (_, props, config) => {
    expect(synthPipeline(props).pipeline.alarms.map((entry) => entry.name)).toEqual(alarmNamesFor(config));
  });

  it('every catalog entry is built by some configuration', () => {
    const some = new Set([
      ...alarmNamesFor({ stripeEvents: 'eventbridge', ownDatabase: true, exampleConsumer: true }),
    ]);
    expect(ALARM_CATALOG.map((entry) => entry.name).filter((name) => !some.has(name))).toEqual([]);
  });

  it('carry their one-line meaning as the alarm description', () => {
    for (const entry of ALARM_CATALOG.filter((e) => built.includes(e.name))) {
      expect(alarm(entry.name).Properties!.AlarmDescription).toBe(entry.meaning);
      expect(entry.meaning.length).toBeLessThan(240);
    }
    expect(pipeline.alarms.every((entry) => entry.meaning.length > 0)).toBe(true);
  });

  it.each(Object.entries(EXPECTED))('%s watches the right metric with the right threshold', (name, expected) => {
    const properties = alarm(name as AlarmName).Properties!;
    expect(properties).toMatchObject({
      Namespace: expected.namespace,
      MetricName: expected.metricName,
      Dimensions: expected.dimensions,
      Statistic: expected.statistic,
      Period: 300,
      Threshold: expected.threshold,
      ComparisonOperator: expected.comparison ?? 'GreaterThanThreshold',
      EvaluationPeriods: expected.evaluationPeriods ?? 1,
      TreatMissingData: 'notBreaching',
    });
    // the catalog names the same metric (what docs/runbook.md is checked against)
    const catalog = ALARM_CATALOG.find((entry) => entry.name === name)!;
    expect(catalog.metrics).toEqual([{ namespace: expected.namespace, metricName: expected.metricName }]);
  });

  it('ReconcilerNotRunning breaches when the sweep stops running or stops publishing gauges, and when data is missing', () => {
    const properties = alarm('ReconcilerNotRunning').Properties!;
    expect(properties).toMatchObject({
      ComparisonOperator: 'LessThanThreshold',
      Threshold: 1,
      EvaluationPeriods: 2,
      DatapointsToAlarm: 2,
      TreatMissingData: 'breaching',
    });
    const metrics = properties.Metrics as any[];
    expect(metrics.find((m) => m.Expression)?.Expression).toBe('MIN([FILL(invocations, 0), FILL(gauges, 0)])');
    expect(metrics.find((m) => m.Id === 'invocations')?.MetricStat).toEqual({
      Metric: { Namespace: 'AWS/Lambda', MetricName: 'Invocations', Dimensions: fnDimension(pipeline.reconcileFunction) },
      Period: 300,
      Stat: 'Sum',
    });
    expect(metrics.find((m) => m.Id === 'gauges')?.MetricStat).toEqual({
      Metric: { Namespace: 'ChargePipeline', MetricName: METRICS.reviewQueueSize, Dimensions: service },
      Period: 300,
      Stat: 'SampleCount',
    });
  });

  it('notify the alarm topic when they fire and when they recover', () => {
    const topic = { Ref: logicalId(pipeline.alarmTopic) };
    for (const [, a] of alarms) {
      expect(a.Properties!.AlarmActions).toEqual([topic]);
      expect(a.Properties!.OKActions).toEqual([topic]);
    }
  });

  it('take configured thresholds and name prefix', () => {
    const configured = synthPipeline({
      alarmNamePrefix: 'payments-',
      oldestMessageAgeAlarmThreshold: cdk.Duration.minutes(3),
      oldestOpenOperationAgeAlarmThreshold: cdk.Duration.hours(6),
      oldestUnpublishedEventAgeAlarmThreshold: cdk.Duration.minutes(2),
      stripeEventsSilenceAlarmThreshold: cdk.Duration.minutes(40),
    });
    const thresholds = Object.fromEntries(
      ofType(configured.resources, 'AWS::CloudWatch::Alarm').map(([, a]) => [a.Properties!.AlarmName, a.Properties!.Threshold]),
    );
    expect(thresholds).toMatchObject({
      'payments-OldestMessageTooOld': 180,
      'payments-OldestOpenOperationTooOld': 21600,
      'payments-OutcomeEventsNotPublished': 120,
      'payments-StripeEventsNotArriving': 2400,
    });
  });
});

describe('the alarms other configurations build', () => {
  it('PartnerEventsNotRecorded (eventbridge): any message on the partner-event failure queue', () => {
    const eb = synthPipeline({ stripeEvents: 'eventbridge', stripePartnerEventBusName: 'aws.partner/stripe.com/ed_test_alarms' });
    const entry = eb.pipeline.alarms.find((a) => a.name === 'PartnerEventsNotRecorded')!;
    expect(eb.resources[logicalId(entry.alarm)]!.Properties).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: queueDimension(eb.pipeline.stripeEvents!.deadLetterQueue!),
      Statistic: 'Maximum',
      Period: 300,
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      AlarmActions: [{ Ref: logicalId(eb.pipeline.alarmTopic) }],
    });
  });

  it('DatabaseSecretRotationFailed (own database): errors of both rotation functions, owner and application role, by the names their applications are given', () => {
    const entry = pipeline.alarms.find((a) => a.name === 'DatabaseSecretRotationFailed')!;
    const properties = resources[logicalId(entry.alarm)]!.Properties!;
    const applications = ofType(resources, 'AWS::Serverless::Application').map(([, r]) => r.Properties!.Parameters.functionName as string);
    expect(applications).toHaveLength(2);
    const metrics = properties.Metrics as any[];
    expect(metrics.find((m) => m.Expression)?.Expression).toBe('FILL(r0, 0) + FILL(r1, 0)');
    const watched = metrics.filter((m) => m.MetricStat).map((m) => m.MetricStat);
    expect(watched.map((m) => m.Metric.Dimensions[0].Value).sort()).toEqual([...applications].sort());
    for (const m of watched) expect(m).toMatchObject({ Metric: { Namespace: 'AWS/Lambda', MetricName: 'Errors' }, Stat: 'Sum', Period: 300 });
    expect(properties).toMatchObject({ Threshold: 0, ComparisonOperator: 'GreaterThanThreshold' });
  });

  it('ExampleConsumerDeadLetterQueueNotEmpty (example consumer): any message on its DLQ', () => {
    const ex = synthPipeline({ exampleConsumer: true });
    const entry = ex.pipeline.alarms.find((a) => a.name === 'ExampleConsumerDeadLetterQueueNotEmpty')!;
    const dlq = ex.pipeline.node.findAll().find((c) => c.node.id === 'ExampleConsumerDeadLetterQueue')!;
    expect(ex.resources[logicalId(entry.alarm)]!.Properties).toMatchObject({
      Namespace: 'AWS/SQS',
      MetricName: 'ApproximateNumberOfMessagesVisible',
      Dimensions: queueDimension(dlq as never),
      Threshold: 0,
    });
  });

  it('a second pipeline on the first one\'s database instance builds no database alarm (its owner pages once), but still graphs the instance', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'TwoOnOne');
    const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1, subnetConfiguration: [
      { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
      { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
    ] });
    const first = new ChargePipeline(stack, 'First', { vpc });
    const second = new ChargePipeline(stack, 'Second', {
      vpc,
      existingDatabase: {
        endpoint: first.database!.instanceEndpoint,
        secret: first.databaseSecret,
        databaseName: 'second',
        instanceIdentifier: first.database!.instanceIdentifier,
      },
    });
    const databaseAlarms = (ALARM_CATALOG as readonly AlarmDescription[]).filter((e) => e.builtWith === 'ownDatabase').map((e) => e.name);
    expect(first.alarms.map((a) => a.name)).toEqual(expect.arrayContaining(databaseAlarms));
    expect(second.alarms.map((a) => a.name).filter((n) => (databaseAlarms as string[]).includes(n))).toEqual([]);
    const all = Template.fromStack(stack).toJSON().Resources as Record<string, CfnResource>;
    const rdsAlarms = ofType(all, 'AWS::CloudWatch::Alarm').filter(([, a]) => a.Properties!.Namespace === 'AWS/RDS');
    expect(rdsAlarms).toHaveLength(3);
    const dashboard = all[logicalId(second.dashboard)]!;
    expect(JSON.stringify(dashboard.Properties!.DashboardBody)).toContain('DatabaseConnections');
  });

  it('a StripeWebhookRejected threshold of the user\'s, and a bad one refused', () => {
    const configured = synthPipeline({ stripeWebhookRejectedAlarmThreshold: 50 });
    const entry = configured.pipeline.alarms.find((a) => a.name === 'StripeWebhookRejected')!;
    expect(configured.resources[logicalId(entry.alarm)]!.Properties).toMatchObject({ Threshold: 50, EvaluationPeriods: 2 });
    expect(() => synthPipeline({ stripeWebhookRejectedAlarmThreshold: 0 })).toThrow(/stripeWebhookRejectedAlarmThreshold must be an integer from 1/);
  });
});

describe('the alarm topic', () => {
  it('is encrypted with a rotating key CloudWatch may use, and refuses plain HTTP', () => {
    const [[topicId, topic]] = ofType(resources, 'AWS::SNS::Topic') as [[string, CfnResource]];
    const keyId = topic.Properties!.KmsMasterKeyId['Fn::GetAtt'][0] as string;
    expect(resources[keyId]!.Properties).toMatchObject({ EnableKeyRotation: true });
    expect(resources[keyId]!.Properties!.KeyPolicy.Statement).toContainEqual(
      expect.objectContaining({
        Principal: { Service: 'cloudwatch.amazonaws.com' },
        Action: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        // this account's alarms only (confused deputy)
        Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
      }),
    );
    const [[, policy]] = ofType(resources, 'AWS::SNS::TopicPolicy') as [[string, CfnResource]];
    expect(policy.Properties!.Topics).toEqual([{ Ref: topicId }]);
    expect(policy.Properties!.PolicyDocument.Statement).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ Effect: 'Deny', Condition: { Bool: { 'aws:SecureTransport': 'false' } } }),
        expect.objectContaining({
          Effect: 'Allow',
          Principal: { Service: 'cloudwatch.amazonaws.com' },
          Action: 'sns:Publish',
          Condition: expect.objectContaining({ StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } }),
        }),
      ]),
    );
  });

  it('has no subscription unless an e-mail address is given', () => {
    expect(ofType(resources, 'AWS::SNS::Subscription')).toHaveLength(0);
    const withEmail = synthPipeline({ alarmEmail: 'oncall@example.com' });
    expect(ofType(withEmail.resources, 'AWS::SNS::Subscription').map(([, s]) => s.Properties)).toEqual([
      { Protocol: 'email', Endpoint: 'oncall@example.com', TopicArn: { Ref: logicalId(withEmail.pipeline.alarmTopic) } },
    ]);
  });

  it('can be one the user brings', () => {
    const brought = synthPipeline((s) => ({ alarmTopic: new sns.Topic(s, 'OnCall') }));
    expect(ofType(brought.resources, 'AWS::SNS::Topic')).toHaveLength(1);
    // No key for a topic (the one KMS key is the Stripe secret's, lib/perimeter.ts).
    expect(ofType(brought.resources, 'AWS::KMS::Key').map(([id]) => id)).toEqual([logicalId(brought.pipeline.node.findChild('StripeSecretKey') as never)]);
    for (const [, a] of ofType(brought.resources, 'AWS::CloudWatch::Alarm')) {
      expect(a.Properties!.AlarmActions).toEqual([{ Ref: logicalId(brought.pipeline.alarmTopic) }]);
    }
  });
});

describe('the dashboard', () => {
  it('shows every alarm, the queue, both functions, the outcomes and every gauge', () => {
    const [[, dashboard]] = ofType(resources, 'AWS::CloudWatch::Dashboard') as [[string, CfnResource]];
    // The body is a Fn::Join of JSON text and references; put a placeholder where each reference goes.
    const [, parts] = dashboard.Properties!.DashboardBody['Fn::Join'] as [string, unknown[]];
    const body = JSON.parse(parts.map((part) => (typeof part === 'string' ? part : 'REF')).join('')) as {
      widgets: { type: string; properties: { alarms?: string[]; metrics?: unknown[][] } }[];
    };
    const alarmWidget = body.widgets.find((widget) => widget.type === 'alarm');
    expect(alarmWidget?.properties.alarms).toHaveLength(pipeline.alarms.length);
    const shown = new Set(body.widgets.flatMap((widget) => (widget.properties.metrics ?? []).map((metric) => metric[1])));
    for (const name of Object.values(METRICS)) expect(shown, name).toContain(name);
    for (const name of ['ApproximateAgeOfOldestMessage', 'ApproximateNumberOfMessagesVisible', 'Invocations', 'Errors', 'Throttles', 'Duration', 'DatabaseConnections', 'FreeStorageSpace']) {
      expect(shown, name).toContain(name);
    }
  });
});

describe('two pipelines in one stack', () => {
  const app = newApp();
  const shared = new cdk.Stack(app, 'Shared');
  const vpc = new ec2.Vpc(shared, 'Vpc', { maxAzs: 2, natGateways: 1, subnetConfiguration: [
    { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
    { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
    { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
  ] });
  const dev = new ChargePipeline(shared, 'Dev', { vpc });
  const prod = new ChargePipeline(shared, 'Prod', { vpc });
  const twoResources = Template.fromStack(shared).toJSON().Resources as Record<string, CfnResource>;
  const alarmsOf = (p: ChargePipeline) =>
    p.alarms.map(({ alarm: a }) => twoResources[logicalId(a)]!.Properties!);

  it('publish and alarm on their own metrics: every app-metric alarm names its own pipeline', () => {
    expect(dev.pipelineName).not.toBe(prod.pipelineName);
    for (const p of [dev, prod]) {
      const dimensions = alarmsOf(p).flatMap((a) => [
        ...(a.Namespace === PIPELINE.metricsNamespace ? [a.Dimensions] : []),
        ...((a.Metrics ?? []) as any[]).filter((m) => m.MetricStat?.Metric.Namespace === PIPELINE.metricsNamespace).map((m) => m.MetricStat.Metric.Dimensions),
      ]);
      expect(dimensions.length).toBeGreaterThan(0);
      for (const d of dimensions) expect(d).toContainEqual({ Name: 'pipeline', Value: p.pipelineName });
    }
  });

  it('have alarms of distinct names, and functions that publish under their own pipeline name', () => {
    const names = [dev, prod].flatMap((p) => alarmsOf(p).map((a) => a.AlarmName as string));
    expect(new Set(names).size).toBe(names.length);
    for (const p of [dev, prod]) {
      const env = twoResources[logicalId(p.chargeFunction)]!.Properties!.Environment.Variables;
      expect(env.PIPELINE_NAME).toBe(p.pipelineName);
    }
  });

  it('take a namespace of their own when asked', () => {
    const custom = synthPipeline({ metricsNamespace: 'Payments/Charges', pipelineName: 'payments-eu' });
    const review = custom.pipeline.alarms.find((a) => a.name === 'ReviewQueueNotEmpty')!;
    expect(custom.resources[logicalId(review.alarm)]!.Properties).toMatchObject({
      AlarmName: 'payments-eu-ReviewQueueNotEmpty',
      Namespace: 'Payments/Charges',
      Dimensions: [{ Name: 'pipeline', Value: 'payments-eu' }, { Name: 'service', Value: PIPELINE.serviceName }],
    });
    expect(custom.pipeline.metricReviewQueueSize().dimensions).toEqual({ service: PIPELINE.serviceName, pipeline: 'payments-eu' });
  });

  it('have no physical name in common', () => {
    const NAMES = ['QueueName', 'Name', 'AlarmName', 'DashboardName', 'TopicName', 'FunctionName', 'RoleName', 'ScheduleName', 'LogGroupName'];
    const seen = new Map<string, string>();
    for (const [id, r] of Object.entries(twoResources)) {
      for (const key of NAMES) {
        const value = r.Properties?.[key];
        if (typeof value !== 'string') continue;
        const name = `${r.Type}:${value}`;
        expect(seen.get(name), `${id} and ${seen.get(name)} are both named ${value}`).toBeUndefined();
        seen.set(name, id);
      }
    }
  });
});
