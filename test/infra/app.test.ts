// The default app (bin/app.ts and cdk.json), what `npx cdk deploy -c …` builds, and cdk-nag's
// AwsSolutions pack over it, as bin/app.ts runs it: a new finding that nobody acknowledged fails
// this test (and `cdk synth`), and every acknowledgement carries a one-sentence reason.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { AwsSolutionsChecks } from 'cdk-nag';
import type { IConstruct } from 'constructs';
import { afterAll, describe, expect, it } from 'vitest';
import { PIPELINE } from '../../lambdas/runtime/settings.ts';
import { ALARM_CATALOG } from '../../lib/alarm-catalog.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { ChargePipelineStack } from '../../lib/charge-pipeline-stack.ts';
import { acknowledgeAppFindings } from '../../bin/acknowledgements.ts';
import { CDK_JSON, logicalId, newApp, ofType, removeSynthOutput, synthDefaultApp, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);


describe('cdk.json', () => {
  it('runs the app with tsx and synthesizes quietly and offline', () => {
    expect(CDK_JSON.app).toBe('npx tsx bin/app.ts');
    expect(CDK_JSON.notices).toBe(false);
    expect(CDK_JSON.context['cli-telemetry']).toBe(false);
  });

  it('pins no account or region (no AZ lookup, no credentials needed to synthesize)', () => {
    const source = readFileSync(path.join(import.meta.dirname, '../../bin/app.ts'), 'utf8');
    expect(source).not.toMatch(/env:\s*\{/);
    expect(source).toContain('Validations.of(app).addPlugins(new AwsSolutionsChecks(app))');
  });
});

const STRIPE_SECRET_ARN = 'arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe/live-AbCdEf';
const OPERATOR_ROLE_ARN = 'arn:aws:iam::123456789012:role/payments-oncall';

/** `npx cdk deploy` */
const dev = synthDefaultApp();
/** `npx cdk deploy -c environment=prod -c natGateways=1 -c alarmEmail=… -c stripeSecretArn=… -c opsRoleArn=… -c chargeMaxConcurrency=20` */
const prod = synthDefaultApp({
  environment: 'prod',
  natGateways: '1',
  alarmEmail: 'oncall@example.com',
  stripeSecretArn: STRIPE_SECRET_ARN,
  opsRoleArn: OPERATOR_ROLE_ARN,
  chargeMaxConcurrency: '20',
});

describe('docs/deploy.md', () => {
  it('lists every alarm the stack defines, with its meaning', () => {
    const doc = readFileSync(path.join(PROJECT_ROOT, 'docs/deploy.md'), 'utf8');
    for (const { name, meaning } of ALARM_CATALOG) {
      expect(doc, name).toContain(`| \`${name}\` |`);
      expect(doc, name).toContain(meaning);
    }
  });
});

describe('the default stack', () => {
  it('dev uses the construct’s dev profile (single-AZ, one NAT gateway); prod the production one, with the ops function’s concurrency reserved', () => {
    const db = (s: typeof dev) => s.resources[logicalId(s.pipeline.database!)]!.Properties!;
    expect(db(dev).MultiAZ).toBe(false);
    expect(ofType(dev.resources, 'AWS::EC2::NatGateway')).toHaveLength(1);
    expect(dev.resources[logicalId(dev.pipeline.opsFunction)]!.Properties!.ReservedConcurrentExecutions).toBeUndefined();
    expect(db(prod).MultiAZ).toBe(true);
    expect(prod.resources[logicalId(prod.pipeline.opsFunction)]!.Properties!.ReservedConcurrentExecutions).toBe(2);
  });

  it('is named after the environment, and so are its queues, bus and dashboard', () => {
    expect(dev.stack.stackName).toBe('ChargePipeline-dev');
    const props = (construct: Parameters<typeof logicalId>[0]) => dev.resources[logicalId(construct)]!.Properties!;
    expect(props(dev.pipeline.queue).QueueName).toBe(`dev-${PIPELINE.queueName}`);
    expect(props(dev.pipeline.deadLetterQueue).QueueName).toBe(`dev-${PIPELINE.dlqName}`);
    expect(props(dev.pipeline.eventBus).Name).toBe(`dev-${PIPELINE.eventBusName}`);
    expect(JSON.stringify(props(dev.pipeline.dashboard).DashboardName)).toContain('ChargePipeline-dev-');
  });

  it('uses the dev profile of cdk.json: single AZ, one NAT, no deletion protection, snapshot on delete', () => {
    const db = dev.resources[logicalId(dev.pipeline.database!)]!;
    expect(db.Properties).toMatchObject({ MultiAZ: false, DeletionProtection: false, DBInstanceClass: 'db.t4g.micro' });
    expect(db.DeletionPolicy).toBe('Snapshot');
    expect(ofType(dev.resources, 'AWS::EC2::NatGateway')).toHaveLength(1);
  });

  it('uses the prod profile when asked, and -c values win over it', () => {
    expect(prod.stack.stackName).toBe('ChargePipeline-prod');
    const db = prod.resources[logicalId(prod.pipeline.database!)]!;
    expect(db.Properties).toMatchObject({ MultiAZ: true, DeletionProtection: true, DBInstanceClass: 'db.t4g.medium' });
    expect(ofType(prod.resources, 'AWS::EC2::NatGateway')).toHaveLength(1); // -c natGateways=1 over the profile's 2
    expect(ofType(prod.resources, 'AWS::Lambda::EventSourceMapping')[0]![1].Properties!.ScalingConfig).toEqual({ MaximumConcurrency: 20 });
    expect(ofType(prod.resources, 'AWS::SNS::Subscription')[0]![1].Properties).toMatchObject({
      Protocol: 'email',
      Endpoint: 'oncall@example.com',
    });
  });

  it('imports a Stripe secret and an operator role by ARN', () => {
    // the database's owner and application role, and the webhook signing secret (created empty); no Stripe key secret
    const secrets = ofType(prod.resources, 'AWS::SecretsManager::Secret').map(([id]) => id);
    expect(secrets).toHaveLength(3);
    expect(secrets).toContain(logicalId(prod.pipeline.stripeEvents!.webhookSecret as never));
    expect(prod.resources[logicalId(prod.pipeline.chargeFunction)]!.Properties!.Environment.Variables.STRIPE_SECRET_ARN).toBe(
      STRIPE_SECRET_ARN,
    );
    expect(ofType(prod.resources, 'AWS::Lambda::Permission').map(([, p]) => p.Properties!.Principal)).toContain(OPERATOR_ROLE_ARN);
  });

  it('outputs what an operator needs after deploying', () => {
    const outputs = Object.keys(dev.template.toJSON().Outputs);
    expect(outputs).toEqual(
      expect.arrayContaining([
        'QueueUrl',
        'DeadLetterQueueUrl',
        'StripeSecretArn',
        'DatabaseSecretArn',
        'EventBusName',
        'OpsFunctionName',
        'MigrateFunctionName',
        'AlarmTopicArn',
        'ExampleConsumerQueueUrl',
      ]),
    );
  });
});

function findings(app: cdk.App): string[] {
  const report = new AwsSolutionsChecks(app).validateScope(app);
  return report.violations.flatMap((violation) =>
    violation.violatingResources.map((resource) => `${violation.ruleName} at ${resource.constructPath}: ${violation.description}`),
  );
}

/** The cdk-nag acknowledgements made in the app (aws-cdk-lib makes a few of its own, not cdk-nag's). */
function acknowledgements(root: IConstruct): { path: string; id: string; reason: string }[] {
  return root.node.findAll().flatMap((construct) =>
    construct.node.metadata
      .filter((entry) => entry.type === cdk.Validations.ACKNOWLEDGED_RULES_METADATA_KEY)
      .flatMap((entry) =>
        Object.entries(entry.data as Record<string, string>).map(([id, reason]) => ({
          path: construct.node.path,
          id: id.replace(/^annotation::/i, ''),
          reason,
        })),
      )
      .filter(({ id }) => id.startsWith('AwsSolutions-')),
  );
}

describe('cdk-nag AwsSolutions', () => {
  it.each([
    ['the dev environment (single AZ, no deletion protection)', dev],
    ['the prod environment (multi-AZ, imported Stripe secret, operator role)', prod],
    [
      'the construct embedded with everything brought in',
      synthPipeline((stack) => ({
        stripeSecret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Stripe', 'arn:aws:secretsmanager:us-east-1:123456789012:secret:k-AbCdEf'),
        operatorRole: iam.Role.fromRoleArn(stack, 'Oncall', 'arn:aws:iam::123456789012:role/oncall'),
        removalPolicy: cdk.RemovalPolicy.DESTROY,
        multiAz: true,
        exampleConsumer: false,
      })),
    ],
    [
      'the construct with Stripe events from an EventBridge partner bus',
      synthPipeline({ stripeEvents: 'eventbridge', stripePartnerEventBusName: 'aws.partner/stripe.com/ed_test_61SZqWQdxLbHL7HgR16S' }),
    ],
  ])('has no unacknowledged finding in %s', (_label, synthesized) => {
    // An embedding app opts in to the construct's design findings (synthDefaultApp does what bin/app.ts does).
    if (!(synthesized.stack instanceof ChargePipelineStack)) acknowledgeAppFindings(synthesized.app, synthesized.pipeline, 'embedded');
    expect(findings(synthesized.app)).toEqual([]);
  });

  it('gives every acknowledgement a one-sentence reason', () => {
    const all = [...acknowledgements(dev.app), ...acknowledgements(prod.app)];
    expect(all.length).toBeGreaterThan(0);
    for (const { path, id, reason } of all) {
      const where = `${id} at ${path}`;
      expect(reason.length, where).toBeGreaterThanOrEqual(40);
      expect(reason, where).toMatch(/^[A-Z'].*\.$/s);
      // one sentence: no full stop followed by a new sentence inside it
      expect(reason.slice(0, -1), where).not.toMatch(/[.!?]\s+[A-Z]/);
    }
  });

  it('acknowledges only these rules (a new one needs a reason and a reviewer)', () => {
    const ids = (app: cdk.App) => [...new Set(acknowledgements(app).map(({ id }) => id.replace(/<[^>]+>/g, '<…>')))].sort();
    expect(ids(dev.app)).toEqual([
      'AwsSolutions-IAM4[Policy::arn:<…>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
      'AwsSolutions-IAM4[Policy::arn:<…>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]',
      'AwsSolutions-IAM5[Resource::*]',
      'AwsSolutions-IAM5[Resource::<…>:*]',
      'AwsSolutions-RDS10',
      'AwsSolutions-RDS11',
      'AwsSolutions-RDS3',
      'AwsSolutions-SMG4',
    ]);
    // prod is multi-AZ with deletion protection: those two acknowledgements are not made there
    expect(ids(prod.app)).not.toContain('AwsSolutions-RDS3');
    expect(ids(prod.app)).not.toContain('AwsSolutions-RDS10');
  });

  it('still reports what nobody acknowledged (the check is live)', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'Careless');
    new iam.Role(stack, 'Admin', {
      assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
      managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('AdministratorAccess')],
    });
    expect(findings(app).join('\n')).toMatch(/AwsSolutions-IAM4\[Policy::arn:<AWS::Partition>:iam::aws:policy\/AdministratorAccess\] at Careless\/Admin/);
  });
});
