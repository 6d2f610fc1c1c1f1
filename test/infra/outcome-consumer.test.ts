// The OutcomeConsumer construct and the receipt notifier wired into the default app (bin/app.ts,
// -c receiptNotifier=true): queue + DLQ, a rule on the pipeline's bus with the consumer's pattern,
// the function with a partial-batch event source, the alarms of CONSUMER_ALARM_CATALOG, and
// cdk-nag AwsSolutions clean.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { AwsSolutionsChecks } from 'cdk-nag';
import { afterAll, describe, expect, it } from 'vitest';
import { CONSUMER_ALARM_CATALOG } from '../../lib/alarm-catalog.ts';
import { ChargePipelineStack, stackNameFor } from '../../lib/charge-pipeline-stack.ts';
import { DeploymentSettingsError, settingsFromContext } from '../../lib/config.ts';
import { addReceiptNotifier, OutcomeConsumer, receiptNotifierFromContext } from '../../lib/outcome-consumer.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { type CfnResource, logicalId, newApp, ofType, removeSynthOutput } from './support.ts';

afterAll(removeSynthOutput);

/** What bin/app.ts builds for these -c values. */
function synthApp(context: Record<string, unknown>, builtinValidation = false) {
  const app = newApp({ context, builtinValidation });
  const settings = settingsFromContext((key) => app.node.tryGetContext(key));
  const receipts = receiptNotifierFromContext((key) => app.node.tryGetContext(key));
  const stack = new ChargePipelineStack(app, stackNameFor(settings.environment), { settings });
  const notifier = receipts ? addReceiptNotifier(stack, stack.pipeline, receipts) : null;
  const template = Template.fromStack(stack);
  return { app, stack, notifier, resources: template.toJSON().Resources as Record<string, CfnResource> };
}

// CloudFormation's own validation on: it is what refused an empty SecretString in a real synth.
const withReceipts = synthApp({ receiptNotifier: 'true', receiptsEmailApiBase: 'https://api.resend.com' }, true);
const consumer = withReceipts.notifier!.consumer;
const props = (construct: Parameters<typeof logicalId>[0]) => withReceipts.resources[logicalId(construct)]!.Properties!;

describe('the default app', () => {
  it('has no receipt notifier unless asked for', () => {
    const plain = synthApp({});
    expect(plain.notifier).toBeNull();
    expect(Object.keys(plain.resources).some((id) => id.includes('ReceiptNotifier'))).toBe(false);
  });

  it('refuses bad -c values for it, all at once, saying what to change', () => {
    const context = { receiptNotifier: 'true', receiptsPolicy: 'exactly-once', receiptsEmailApiBase: 'http://insecure' };
    expect(() => receiptNotifierFromContext((key) => (context as Record<string, unknown>)[key])).toThrow(DeploymentSettingsError);
    try {
      receiptNotifierFromContext((key) => (context as Record<string, unknown>)[key]);
    } catch (error) {
      expect((error as DeploymentSettingsError).problems).toEqual([
        "receiptsPolicy must be idempotent, at-least-once or at-most-once, got 'exactly-once'",
        "receiptsEmailApiBase must be the e-mail API's https URL (e.g. https://api.resend.com), got 'http://insecure'",
      ]);
    }
    const idem = { receiptNotifier: 'true', receiptsPolicy: 'idempotent', receiptsEmailApiBase: 'https://api.resend.com' };
    expect(() => receiptNotifierFromContext((key) => (idem as Record<string, unknown>)[key])).toThrow(/needs receiptsEmailIdempotency=true/);
  });
});

describe('the receipt notifier as an OutcomeConsumer', () => {
  it('takes the charge outcomes it needs from the pipeline bus — Refund Succeeded declared ahead of refunds — into its queue', () => {
    const rule = props(consumer.rule);
    expect(rule.EventBusName).toEqual({ Ref: logicalId(withReceipts.stack.pipeline.eventBus) });
    expect(rule.EventPattern).toEqual({ source: ['payments.charges'], 'detail-type': ['Charge Succeeded', 'Refund Succeeded'] });
    expect(rule.Targets).toEqual([
      expect.objectContaining({
        Arn: { 'Fn::GetAtt': [logicalId(consumer.queue), 'Arn'] },
        DeadLetterConfig: { Arn: { 'Fn::GetAtt': [logicalId(consumer.deadLetterQueue), 'Arn'] } },
        RetryPolicy: { MaximumEventAgeInSeconds: 86400, MaximumRetryAttempts: 185 },
      }),
    ]);
  });

  it('has a queue whose visibility outlasts the lease, which outlasts the function', () => {
    const queue = props(consumer.queue);
    expect(queue).toMatchObject({ SqsManagedSseEnabled: true, VisibilityTimeout: 180 });
    expect(queue.RedrivePolicy).toEqual({ deadLetterTargetArn: { 'Fn::GetAtt': [logicalId(consumer.deadLetterQueue), 'Arn'] }, maxReceiveCount: 5 });
    const fn = props(consumer.function);
    expect(fn.Timeout).toBe(30);
    expect(Number(fn.Environment.Variables.CONSUMER_LEASE_MS)).toBe(60_000);
    expect(60_000).toBeLessThan(queue.VisibilityTimeout * 1000);
  });

  it('runs the notifier at-least-once by default, on Node 24 in the VPC, with its migrations and its e-mail key by reference', () => {
    const fn = props(consumer.function);
    expect(fn).toMatchObject({ Runtime: 'nodejs24.x', Architectures: ['arm64'] });
    expect(fn.VpcConfig.SecurityGroupIds).toEqual([{ 'Fn::GetAtt': [logicalId(withReceipts.stack.pipeline.functionsSecurityGroup), 'GroupId'] }]);
    expect(fn.Environment.Variables).toMatchObject({
      RECEIPTS_POLICY: 'at-least-once',
      EMAIL_API_BASE: 'https://api.resend.com',
      EMAIL_API_KEY_SECRET_ARN: { Ref: logicalId(withReceipts.notifier!.emailSecret as secretsmanager.Secret) },
      EMAIL_PROVIDER_IDEMPOTENCY: 'false',
      CONSUMER_MIGRATIONS_DIR: '/var/task/consumer-migrations',
      POWERTOOLS_SERVICE_NAME: 'receipts',
      // the pipeline instance's namespace: two stacks never mix their consumers' metrics
      POWERTOOLS_METRICS_NAMESPACE: withReceipts.stack.pipeline.metricsNamespace,
      DB_SSL: 'verify-full',
      DB_SSL_CA_FILE: '/var/task/rds-ca/global-bundle.pem',
      // the owner's secret: the notifier applies its own schemas' migrations (docs/decisions.md)
      DB_SECRET_ARN: { Ref: logicalId(withReceipts.stack.pipeline.databaseSecret as secretsmanager.Secret) },
    });
    const [[, mapping]] = ofType(withReceipts.resources, 'AWS::Lambda::EventSourceMapping').filter(
      ([, m]) => JSON.stringify(m.Properties!.EventSourceArn).includes(logicalId(consumer.queue)),
    ) as [[string, CfnResource]];
    expect(mapping.Properties).toMatchObject({ FunctionResponseTypes: ['ReportBatchItemFailures'], BatchSize: 10, ScalingConfig: { MaximumConcurrency: 2 } });
  });

  it('builds every alarm of CONSUMER_ALARM_CATALOG, named per consumer, to the pipeline’s alarm topic; app metrics by consumer and policy', () => {
    expect(consumer.alarms.map((a) => a.name)).toEqual(CONSUMER_ALARM_CATALOG.map((a) => a.name));
    const alarms = new Map(ofType(withReceipts.resources, 'AWS::CloudWatch::Alarm').map(([, a]) => [a.Properties!.AlarmName as string, a.Properties!]));
    const topic = { Ref: logicalId(withReceipts.stack.pipeline.alarmTopic) };
    for (const { name, meaning } of CONSUMER_ALARM_CATALOG) {
      const alarm = alarms.get(`ChargePipeline-dev-receipts-${name}`);
      expect(alarm, name).toBeDefined();
      expect(alarm!.AlarmDescription).toBe(`receipts (at-least-once): ${meaning}`);
      expect(alarm!.AlarmActions).toEqual([topic]);
    }
    expect(alarms.get('ChargePipeline-dev-receipts-ConsumerEffectsAbandoned')).toMatchObject({
      Namespace: withReceipts.stack.pipeline.metricsNamespace,
      MetricName: 'EffectsAbandoned',
      Statistic: 'Sum',
      Threshold: 0,
      Dimensions: expect.arrayContaining([
        { Name: 'consumer', Value: 'receipts' },
        { Name: 'policy', Value: 'at-least-once' },
        { Name: 'service', Value: 'receipts' },
      ]),
    });
  });

  it('is cdk-nag AwsSolutions clean', () => {
    const report = new AwsSolutionsChecks(withReceipts.app).validateScope(withReceipts.app);
    const findings = report.violations.flatMap((v) => v.violatingResources.map((r) => `${v.ruleName} at ${r.constructPath}`));
    expect(findings).toEqual([]);
  });
});

describe('docs/deploy.md', () => {
  it('lists every consumer alarm with its meaning', () => {
    const doc = readFileSync(path.join(PROJECT_ROOT, 'docs/deploy.md'), 'utf8');
    for (const { name, meaning } of CONSUMER_ALARM_CATALOG) {
      expect(doc, name).toContain(`| \`${name}\` |`);
      expect(doc, name).toContain(meaning);
    }
  });
});

describe('OutcomeConsumer props', () => {
  it('are checked before anything is built, every problem at once', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'S');
    const vpc = new ec2.Vpc(stack, 'Vpc');
    expect(
      () =>
        new OutcomeConsumer(stack, 'Bad', {
          consumerName: 'Receipts!',
          policy: 'sometimes' as never,
          eventBus: new events.EventBus(stack, 'Bus'),
          detailTypes: [],
          entry: 'x.ts',
          vpc,
          securityGroup: new ec2.SecurityGroup(stack, 'Sg', { vpc }),
          databaseSecret: new secretsmanager.Secret(stack, 'Db'),
          maxConcurrency: 1,
        }),
    ).toThrow(/consumerName must match[\s\S]*policy must be[\s\S]*detailTypes must name[\s\S]*maxConcurrency must be/);
  });
});
