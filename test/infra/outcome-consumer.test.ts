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
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { AwsSolutionsChecks } from 'cdk-nag';
import { acknowledgeAppFindings } from '../../bin/acknowledgements.ts';
import { afterAll, describe, expect, it } from 'vitest';
import { CONSUMER_ALARM_CATALOG } from '../../lib/alarm-catalog.ts';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import { ChargePipelineStack, stackNameFor } from '../../lib/charge-pipeline-stack.ts';
import { DeploymentSettingsError, settingsFromContext } from '../../lib/config.ts';
import { addReceiptNotifier, OutcomeConsumer, receiptNotifierFromContext } from '../../lib/outcome-consumer.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { CFN_LINT_VERSION, cfnLintErrors } from '../support/cfn-lint.ts';
import { asArray, type CfnResource, dependsOn, logicalId, newApp, ofType, policyStatements, removeSynthOutput } from './support.ts';

afterAll(removeSynthOutput);

/** What bin/app.ts builds for these -c values. */
function synthApp(context: Record<string, unknown>, builtinValidation = false) {
  const app = newApp({ context, builtinValidation });
  const settings = settingsFromContext((key) => app.node.tryGetContext(key));
  const receipts = receiptNotifierFromContext((key) => app.node.tryGetContext(key));
  const stack = new ChargePipelineStack(app, stackNameFor(settings.environment), { settings });
  const notifier = receipts ? addReceiptNotifier(stack, stack.pipeline, receipts) : null;
  acknowledgeAppFindings(app, stack.pipeline, settings.environment);
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
    const context = { receiptNotifier: 'true', receiptsPolicy: 'exactly-once', receiptsEmailApiBase: 'http://insecure', receiptsDatabaseRole: 'Receipts-2' };
    expect(() => receiptNotifierFromContext((key) => (context as Record<string, unknown>)[key])).toThrow(DeploymentSettingsError);
    try {
      receiptNotifierFromContext((key) => (context as Record<string, unknown>)[key]);
    } catch (error) {
      expect((error as DeploymentSettingsError).problems).toEqual([
        "receiptsPolicy must be idempotent, at-least-once or at-most-once, got 'exactly-once'",
        "receiptsEmailApiBase must be the e-mail API's https URL (e.g. https://api.resend.com), got 'http://insecure'",
        "receiptsDatabaseRole must be a lowercase identifier (/^[a-z_][a-z0-9_]{0,62}$/), got 'Receipts-2'",
      ]);
    }
    const idem = { receiptNotifier: 'true', receiptsPolicy: 'idempotent', receiptsEmailApiBase: 'https://api.resend.com' };
    expect(() => receiptNotifierFromContext((key) => (idem as Record<string, unknown>)[key])).toThrow(/needs receiptsEmailIdempotency=true/);
  });
});

describe('the receipt notifier as an OutcomeConsumer', () => {
  it('takes the charge outcomes it needs from the pipeline bus — a capture of an authorization and Refund Succeeded too — into its queue', () => {
    const rule = props(consumer.rule);
    expect(rule.EventBusName).toEqual({ Ref: logicalId(withReceipts.stack.pipeline.eventBus) });
    expect(rule.EventPattern).toEqual({ source: ['payments.charges'], 'detail-type': ['Charge Succeeded', 'Charge Captured', 'Refund Succeeded'] });
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
      // its own login, never the owner's (the next describe, docs/decisions.md)
      DB_SECRET_ARN: { Ref: logicalId(withReceipts.notifier!.databaseLogin.secret) },
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

describe('the receipt notifier’s database login', () => {
  const pipeline = withReceipts.stack.pipeline;
  const login = withReceipts.notifier!.databaseLogin;
  const loginRef = { Ref: logicalId(login.secret) };
  const ownerRef = { Ref: logicalId(pipeline.databaseSecret as secretsmanager.Secret) };
  const fnRole = logicalId(consumer.function.role!);
  /** The secrets a role's policies let it read, as the template names them. */
  const secretsReadBy = (role: string) =>
    policyStatements(withReceipts.resources)
      .filter(({ owner, statement }) => {
        const policy = withReceipts.resources[owner]!;
        const roles = policy.Type === 'AWS::IAM::Role' ? [{ Ref: owner }] : asArray(policy.Properties?.Roles);
        return roles.some((r: unknown) => JSON.stringify(r) === JSON.stringify({ Ref: role })) && asArray(statement.Action).some((a: string) => a.startsWith('secretsmanager:'));
      })
      .flatMap(({ statement }) => asArray(statement.Resource));

  it('is a role of its own, owning the kit’s and its own schemas', () => {
    expect(login).toMatchObject({ role: 'receipt_notifier', schemas: ['outcome_consumer', 'receipts'] });
    // the generated secret: that username, attached to the instance (host, port, dbname), retained
    const [[, secret]] = ofType(withReceipts.resources, 'AWS::SecretsManager::Secret').filter(([, r]) =>
      String(r.Properties?.GenerateSecretString?.SecretStringTemplate ?? '').includes('"receipt_notifier"'),
    ) as [[string, CfnResource]];
    expect(JSON.parse(secret.Properties!.GenerateSecretString.SecretStringTemplate)).toEqual({ username: 'receipt_notifier', dbname: 'charges' });
    expect(secret.DeletionPolicy).toBe('Retain');
    expect(props(login.secret as never)).toMatchObject({ TargetType: 'AWS::RDS::DBInstance' });
  });

  it('is all the function may read of the database: the owner’s and the application role’s secrets are not in its policy', () => {
    const readable = secretsReadBy(fnRole);
    expect(readable).toContainEqual(loginRef);
    expect(readable).not.toContainEqual(ownerRef);
    expect(readable).not.toContainEqual({ Ref: logicalId(pipeline.applicationDatabaseSecret) });
    expect(JSON.stringify(props(consumer.function).Environment.Variables)).not.toContain(logicalId(pipeline.databaseSecret as secretsmanager.Secret));
  });

  it('is created by the pipeline’s migrate function, which reads its secret, before the function is created or updated', () => {
    const migrate = props(pipeline.migrateFunction);
    expect(JSON.parse(JSON.stringify(migrate.Environment.Variables.DB_CONSUMER_LOGINS))).toEqual({
      'Fn::Join': ['', ['[{"secretArn":"', loginRef, '","schemas":["outcome_consumer","receipts"]}]']],
    });
    expect(secretsReadBy(logicalId((pipeline.migrateFunction as typeof consumer.function).role!))).toContainEqual(loginRef);
    const trigger = logicalId(pipeline.migrationTrigger.node.defaultChild as never);
    expect(dependsOn(withReceipts.resources[logicalId(consumer.function)]!)).toContain(trigger);
    // …after the secret is attached to the instance, so that the role gets the password the function reads
    expect(dependsOn(withReceipts.resources[trigger]!)).toContain(logicalId(login.secret));
  });

  it('is rotated like the application role’s, starting only after the migrations gave the role its password', () => {
    const schedules = ofType(withReceipts.resources, 'AWS::SecretsManager::RotationSchedule').filter(([, r]) => JSON.stringify(r.Properties!.SecretId) === JSON.stringify(loginRef));
    expect(schedules).toHaveLength(1);
    const [[, schedule]] = schedules as [[string, CfnResource]];
    expect(schedule.Properties!.RotationRules).toMatchObject({ ScheduleExpression: 'rate(30 days)' });
    const trigger = logicalId(pipeline.migrationTrigger.node.defaultChild as never);
    expect(dependsOn(schedule)).toContain(trigger);
  });

  it('with existingDatabase: a generated secret without a host, the endpoint in the function’s variables, re-applied by migrate instead of rotated', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'EmbeddingStack');
    const pipeline = new ChargePipeline(stack, 'Charges', {
      vpc: new ec2.Vpc(stack, 'TheirVpc', {
        maxAzs: 2,
        natGateways: 1,
        subnetConfiguration: [
          { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
          { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
        ],
      }),
      existingDatabase: {
        endpoint: new rds.Endpoint('proxy.proxy-abc.eu-west-1.rds.amazonaws.com', 5432),
        secret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Owner', 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:owner-AbCdEf'),
        databaseName: 'payments',
      },
    });
    const theirs = pipeline.addConsumerDatabaseLogin('Receipts', { role: 'receipt_notifier', schemas: ['outcome_consumer', 'receipts'] });
    const template = Template.fromStack(stack).toJSON().Resources as Record<string, CfnResource>;
    expect(theirs.environment).toEqual({ DB_HOST: 'proxy.proxy-abc.eu-west-1.rds.amazonaws.com', DB_PORT: '5432', DB_NAME: 'payments' });
    const secret = template[logicalId(theirs.secret)]!;
    expect(JSON.parse(secret.Properties!.GenerateSecretString.SecretStringTemplate)).toEqual({ username: 'receipt_notifier' });
    expect(ofType(template, 'AWS::SecretsManager::RotationSchedule').filter(([, r]) => JSON.stringify(r.Properties!.SecretId).includes(logicalId(theirs.secret)))).toEqual([]);
    expect(template[logicalId(pipeline.migrateFunction)]!.Properties!.Environment.Variables.DB_CONSUMER_LOGINS).toBeDefined();
  });

  it('takes its role name from receiptsDatabaseRole (a second pipeline on the same server needs another): the login, its secret’s username, DB_CONSUMER_LOGINS', () => {
    const app = newApp({ context: { receiptNotifier: 'true', receiptsEmailApiBase: 'https://api.resend.com', receiptsDatabaseRole: 'receipts_shop2' } });
    const settings = receiptNotifierFromContext((key) => app.node.tryGetContext(key))!;
    expect(settings.databaseRole).toBe('receipts_shop2');
    const stack = new ChargePipelineStack(app, stackNameFor('dev'), { settings: settingsFromContext(() => undefined) });
    const notifier = addReceiptNotifier(stack, stack.pipeline, settings);
    expect(notifier.databaseLogin.role).toBe('receipts_shop2');
    const resources = Template.fromStack(stack).toJSON().Resources as Record<string, CfnResource>;
    const templates = ofType(resources, 'AWS::SecretsManager::Secret').map(([, r]) => String(r.Properties?.GenerateSecretString?.SecretStringTemplate ?? ''));
    expect(templates.map((t) => (t ? (JSON.parse(t) as { username?: string }).username : undefined))).toContain('receipts_shop2');
    expect(JSON.stringify(resources)).not.toContain('receipt_notifier');
  });

  // Without cfn-lint the check is reported as skipped, never as passed.
  it.skipIf(!CFN_LINT_VERSION)('passes cfn-lint without an error (the template with the notifier and its login)', () => {
    const version = CFN_LINT_VERSION!;
    const file = path.join(withReceipts.app.outdir, withReceipts.stack.templateFile);
    expect(readFileSync(file, 'utf8')).toContain('receipt_notifier');
    expect(cfnLintErrors(file), version).toEqual([]);
  }, 120_000);

  it('refuses a second login on one of its schemas, the pipeline’s own roles and the public schema', () => {
    const app = newApp();
    const other = { stack: new ChargePipelineStack(app, stackNameFor('dev'), { settings: settingsFromContext(() => undefined) }) };
    other.stack.pipeline.addConsumerDatabaseLogin('First', { role: 'ledger', schemas: ['outcome_consumer', 'ledger'] });
    expect(() => other.stack.pipeline.addConsumerDatabaseLogin('Second', { role: 'mailer', schemas: ['outcome_consumer'] })).toThrow(
      /schema 'outcome_consumer' belongs to the login of 'ledger' already/,
    );
    expect(() => other.stack.pipeline.addConsumerDatabaseLogin('Third', { role: 'charges_app', schemas: ['public'] })).toThrow(
      /role 'charges_app' is the pipeline's own[\s\S]*other than public/,
    );
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
