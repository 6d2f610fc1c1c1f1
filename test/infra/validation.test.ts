import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { afterAll, describe, expect, it } from 'vitest';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import type { ChargePipelineProps } from '../../lib/charge-pipeline-props.ts';
import { DeploymentSettingsError, ENVIRONMENTS_CONTEXT_KEY, settingsFromContext } from '../../lib/config.ts';
import { ChargePipelinePropsError } from '../../lib/validation.ts';
import { OutcomeConsumer } from '../../lib/outcome-consumer.ts';
import { newApp, removeSynthOutput } from './support.ts';

afterAll(removeSynthOutput);

function build(props: ChargePipelineProps | ((stack: cdk.Stack) => ChargePipelineProps)): ChargePipeline {
  // Validation happens before anything is built: nothing is synthesized here.
  const stack = new cdk.Stack(newApp(), 'Validation');
  return new ChargePipeline(stack, 'Charges', typeof props === 'function' ? props(stack) : props);
}

function problemsOf(props: ChargePipelineProps | ((stack: cdk.Stack) => ChargePipelineProps)): readonly string[] {
  try {
    build(props);
  } catch (error) {
    if (error instanceof ChargePipelinePropsError) return error.problems;
    throw error;
  }
  throw new Error('expected a ChargePipelinePropsError');
}

describe('ChargePipeline props validation', () => {
  it.each<[string, ChargePipelineProps, RegExp]>([
    ['no NAT gateway', { natGateways: 0 }, /natGateways must be an integer from 1 to 2 .*got 0/],
    ['three NAT gateways', { natGateways: 3 }, /natGateways .* got 3/],
    ['a fractional concurrency', { chargeMaxConcurrency: 2.5 }, /chargeMaxConcurrency must be an integer from 2 to 1000/],
    ['an event-source concurrency of 1', { chargeMaxConcurrency: 1 }, /chargeMaxConcurrency .* got 1/],
    ['more Stripe calls than a batch holds', { chargeStripeConcurrency: 11 }, /chargeStripeConcurrency must be an integer from 1 to 10 \(a batch holds at most 10 records\), got 11/],
    ['a reconcile rate above the account limit', { reconcileMaxRps: 101 }, /reconcileMaxRps .* at most 100 .*got 101/],
    ['a zero reconcile rate', { reconcileMaxRps: 0 }, /reconcileMaxRps must be a number above 0/],
    ['a search rate above Stripe\'s', { reconcileSearchMaxRps: 25 }, /reconcileSearchMaxRps .* at most 20 .*got 25/],
    ['a pool of 0', { databasePoolMax: 0 }, /databasePoolMax must be an integer from 1 to 50, got 0/],
    ['a charge reservation below the event source\'s concurrency', { chargeMaxConcurrency: 8, chargeReservedConcurrency: 5 }, /chargeReservedConcurrency \(5\) must be at least chargeMaxConcurrency \(8\)/],
    ['a reservation of 0 (Lambda would throttle every invocation)', { stripeEventsReservedConcurrency: 0 }, /stripeEventsReservedConcurrency must be a positive integer or 'unreserved', got 0/],
    ['more connections than the database share', { chargeMaxConcurrency: 30, databasePoolMax: 2 }, /could hold 90 database connections, more than databaseMaxConnections \(80\): databasePoolMax 2 × \(chargeMaxConcurrency 30 \+ stripeEventsReservedConcurrency 10 \+ reconcile 2 \+ ops 2\) \+ 2/],
    ['a Stripe-events cap the database cannot hold', { stripeEventsReservedConcurrency: 40, databaseMaxConnections: 60 }, /could hold 100 database connections, more than databaseMaxConnections \(60\)/],
    ['a connection share of 0', { databaseMaxConnections: 0 }, /databaseMaxConnections must be a positive integer, got 0/],
    ['a standard queue name', { queueName: 'charges' }, /queueName must be .* followed by \.fifo, got 'charges'/],
    ['a DLQ name with spaces', { deadLetterQueueName: 'my dlq.fifo' }, /deadLetterQueueName .*got 'my dlq.fifo'/],
    ['the same name twice', { queueName: 'a.fifo', deadLetterQueueName: 'a.fifo' }, /must differ/],
    ['the default bus', { eventBusName: 'default' }, /eventBusName must not be 'default'/],
    ['a reserved source', { eventSource: 'aws.payments' }, /eventSource must not start with 'aws.'/],
    ['an empty source', { eventSource: ' ' }, /eventSource must not be empty/],
    ['a bad e-mail', { alarmEmail: 'oncall' }, /alarmEmail must be an e-mail address, got 'oncall'/],
    ['no backups', { backupRetention: cdk.Duration.days(0) }, /backupRetention must be a whole number of days from 1 to 35/],
    ['too long backups', { backupRetention: cdk.Duration.days(36) }, /backupRetention .* got 36 days/],
    ['an undeletable throwaway', { deletionProtection: true, removalPolicy: cdk.RemovalPolicy.DESTROY }, /deletionProtection: true contradicts removalPolicy: DESTROY/],
    ['storage below the RDS minimum', { databaseAllocatedStorageGiB: 10 }, /databaseAllocatedStorageGiB must be an integer from 20/],
    ['a ceiling below the storage', { databaseAllocatedStorageGiB: 100, databaseMaxAllocatedStorageGiB: 50 }, /databaseMaxAllocatedStorageGiB \(50\) must not be below databaseAllocatedStorageGiB \(100\)/],
    ['a 10-second alarm threshold', { oldestMessageAgeAlarmThreshold: cdk.Duration.seconds(10) }, /oldestMessageAgeAlarmThreshold must be at least 1 minute, got 10 seconds/],
    ['an archive kept 0 days', { eventArchiveRetention: cdk.Duration.hours(1) }, /eventArchiveRetention must be at least 1 day/],
    ['an unknown log level', { logLevel: 'TRACE' as 'INFO' }, /logLevel must be one of DEBUG, INFO, WARN, ERROR, got 'TRACE'/],
    ['a Stripe timeout no charge call could fit (17 s × 3 + 4 s + 5 s = 60 s)', { stripeTimeout: cdk.Duration.seconds(17) }, /stripeTimeout .*no Stripe call can ever start in the charge function.*at most 16999/],
    ['a Stripe timeout no reconcile call could fit', { stripeTimeout: cdk.Duration.seconds(40) }, /no Stripe call can ever start in the reconcile function/],
    ['too many SDK retries for the charge function', { stripeMaxNetworkRetries: 5, stripeTimeout: cdk.Duration.seconds(8) }, /charge function.*up to 68000 ms/],
    ['six SDK retries', { stripeMaxNetworkRetries: 6 }, /stripeMaxNetworkRetries must be an integer from 0 to 5, got 6/],
    ['an outbox kept one day', { retention: { outboxDays: 1 } }, /retention\.outboxDays must be an integer from 2 to 36500, got 1/],
    ['Stripe event payloads dropped inside Stripe\'s retries', { retention: { stripeEventPayloadDays: 3 } }, /retention\.stripeEventPayloadDays must be an integer from 4 to 36500 \(Stripe retries a delivery for up to three days/],
    ['Stripe events deleted before their payloads', { retention: { stripeEventDays: 6, stripeEventPayloadDays: 8 } }, /retention\.stripeEventDays \(6\) must be at least retention\.stripeEventPayloadDays \(8\)/],
    ['a retention batch above the functions\' limit', { retention: { batchSize: 20_000 } }, /retention\.batchSize must be an integer from 1 to 10000/],
    ['a connected account id that is not one', { stripeConnectedAccounts: ['acct_1Alpha', 'acct-1Bravo'] }, /stripeConnectedAccounts\[1\] must be a Stripe account id \(acct_ and 1-64 letters or digits\), got "acct-1Bravo"/],
    ['a connected account given as a key or a name', { stripeConnectedAccounts: ['sk_test_123'] }, /stripeConnectedAccounts\[0\] must be a Stripe account id .*got "sk_test_123"/],
    ['a connected account with a comma in it (it would split in STRIPE_CONNECTED_ACCOUNTS)', { stripeConnectedAccounts: ['acct_1Alpha,acct_1Bravo'] }, /stripeConnectedAccounts\[0\] must be a Stripe account id/],
    ['an empty connected account id', { stripeConnectedAccounts: [''] }, /stripeConnectedAccounts\[0\] must be a Stripe account id .*got ""/],
    ['more connected accounts than a function environment holds', { stripeConnectedAccounts: Array.from({ length: 40 }, (_, i) => `acct_${String(i).padStart(60, 'x')}`) }, /stripeConnectedAccounts deploys as STRIPE_CONNECTED_ACCOUNTS of 2639 characters, more than 2048/],
    ['operator reads kept under a year', { retention: { operatorReadDays: 365 } }, /retention\.operatorReadDays must be an integer from 366 to 36500 \(PCI DSS keeps audit log history for at least 12 months\)/],
    ['resolved findings kept under a month', { retention: { resolvedFindingDays: 29 } }, /retention\.resolvedFindingDays must be an integer from 30 to 36500/],
  ])('rejects %s', (_label, props, message) => {
    const problems = problemsOf(props);
    expect(problems.some((problem) => message.test(problem)), problems.join('\n')).toBe(true);
  });

  it('rejects natGateways together with a VPC of the user', () => {
    const problems = problemsOf((stack) => ({ vpc: new ec2.Vpc(stack, 'Vpc'), natGateways: 2 }));
    expect(problems).toContain('natGateways applies to the VPC the construct creates; it cannot be combined with vpc');
  });

  it('reports every problem at once, before building anything', () => {
    const stack = new cdk.Stack(newApp(), 'Validation');
    expect(() => new ChargePipeline(stack, 'Charges', { natGateways: 0, alarmEmail: 'x', chargeMaxConcurrency: 5000 })).toThrow(
      /Invalid ChargePipeline props:\n {2}- natGateways.*\n {2}- chargeMaxConcurrency.*\n {2}- alarmEmail/,
    );
    // nothing of the pipeline was created
    expect(stack.node.tryFindChild('Charges')?.node.children ?? []).toHaveLength(0);
  });

  it('accepts the limits themselves', () => {
    expect(() =>
      build({
        natGateways: 2,
        chargeMaxConcurrency: 1000,
        databaseMaxConnections: 2030, // 2 × (1000 + 10 + 2 + 2) + 2 connections
        chargeStripeConcurrency: 10,
        reconcileMaxRps: 100,
        reconcileSearchMaxRps: 20,
        backupRetention: cdk.Duration.days(35),
        oldestMessageAgeAlarmThreshold: cdk.Duration.minutes(1),
        alarmEmail: 'payments-oncall+alarms@example.com',
        stripeTimeout: cdk.Duration.millis(16_999), // 3 × 16.999 + 4 + 5 s < 60 s
        stripeMaxNetworkRetries: 1,
        stripeConnectedAccounts: ['acct_1', `acct_${'Z9'.repeat(32)}`],
      }),
    ).not.toThrow();
  });
});

describe('deployment settings from CDK context', () => {
  const profiles = {
    dev: { removalPolicy: 'snapshot', deletionProtection: false, multiAz: false },
    prod: { multiAz: true, natGateways: 2, dbInstanceClass: 't4g.medium', deletionProtection: true },
  };
  const context = (values: Record<string, unknown>) => (key: string) =>
    key === ENVIRONMENTS_CONTEXT_KEY ? profiles : values[key];

  it('defaults to the dev profile', () => {
    expect(settingsFromContext(context({}))).toEqual({
      environment: 'dev',
      removalPolicy: 'snapshot',
      deletionProtection: false,
      multiAz: false,
    });
  });

  it('lets -c values (strings) override the profile, and parses them', () => {
    expect(
      settingsFromContext(
        context({
          environment: 'prod',
          natGateways: '1',
          multiAz: 'false',
          dbInstanceClass: 'db.r7g.large',
          chargeMaxConcurrency: '50',
          reconcileMaxRps: '12.5',
          removalPolicy: 'RETAIN',
          alarmEmail: 'oncall@example.com',
          opsRoleArn: 'arn:aws:iam::123456789012:role/oncall',
          stripeSecretArn: 'arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-key-AbC123',
          logLevel: 'debug',
        }),
      ),
    ).toEqual({
      environment: 'prod',
      natGateways: 1,
      multiAz: false,
      dbInstanceClass: 'r7g.large',
      deletionProtection: true,
      chargeMaxConcurrency: 50,
      reconcileMaxRps: 12.5,
      removalPolicy: 'retain',
      alarmEmail: 'oncall@example.com',
      opsRoleArn: 'arn:aws:iam::123456789012:role/oncall',
      stripeSecretArn: 'arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-key-AbC123',
      logLevel: 'DEBUG',
    });
  });

  it('reports every bad value with the key, the value and what is expected', () => {
    let error: unknown;
    try {
      settingsFromContext(
        context({
          environment: 'Prod',
          natGateways: 'two',
          multiAz: 'yes',
          chargeMaxConcurrency: '2.5',
          removalPolicy: 'keep',
          stripeSecretArn: 'arn:aws:secretsmanager:us-east-1:123456789012:secret:stripe-key',
          opsRoleArn: 'oncall',
          dbInstanceClass: 'large',
        }),
      );
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(DeploymentSettingsError);
    const problems = (error as DeploymentSettingsError).problems.join('\n');
    expect(problems).toMatch(/environment must be 1-16 lowercase letters.*got 'Prod'/);
    expect(problems).toMatch(/natGateways must be an integer, got 'two'/);
    expect(problems).toMatch(/multiAz must be true or false, got 'yes'/);
    expect(problems).toMatch(/chargeMaxConcurrency must be an integer, got '2.5'/);
    expect(problems).toMatch(/removalPolicy must be one of retain, snapshot, destroy, got 'keep'/);
    expect(problems).toMatch(/stripeSecretArn must be the complete secret ARN/);
    expect(problems).toMatch(/opsRoleArn must be an IAM role ARN/);
    expect(problems).toMatch(/dbInstanceClass must look like t4g.micro/);
  });

  it('-c stripeConnectedAccounts is a comma-separated list of account ids, each checked', () => {
    expect(settingsFromContext(context({ stripeConnectedAccounts: ' acct_1Alpha, acct_1Bravo ' })).stripeConnectedAccounts).toEqual(['acct_1Alpha', 'acct_1Bravo']);
    expect(() => settingsFromContext(context({ stripeConnectedAccounts: 'acct_1Alpha,bravo' }))).toThrow(
      /stripeConnectedAccounts must be comma-separated Stripe account ids \(acct_ and 1-64 letters or digits\), got 'bravo'/,
    );
  });

  it('rejects an unknown key in a profile', () => {
    expect(() =>
      settingsFromContext((key) => (key === ENVIRONMENTS_CONTEXT_KEY ? { dev: { natGateway: 1 } } : undefined)),
    ).toThrow(/charge-pipeline:environments.dev has an unknown setting 'natGateway'/);
  });
});

describe('validation errors are CDK ValidationErrors', () => {
  it('the pipeline’s props, a consumer login and an OutcomeConsumer’s props: cdk.Errors.isValidationError, at the construct’s path, every problem listed', () => {
    const caught = (work: () => unknown): unknown => {
      try {
        work();
      } catch (error) {
        return error;
      }
      throw new Error('expected a throw');
    };
    const props = caught(() => build({ natGateways: 0, chargeMaxConcurrency: 1 })) as ChargePipelinePropsError;
    expect(cdk.Errors.isValidationError(props)).toBe(true);
    expect(props).toBeInstanceOf(ChargePipelinePropsError);
    expect(props.problems).toHaveLength(2);
    expect(props.constructPath).toBe('Validation/Charges');
    const pipeline = build({});
    const login = caught(() => pipeline.addConsumerDatabaseLogin('X', { role: 'Bad Role', schemas: [] }));
    expect(cdk.Errors.isValidationError(login)).toBe(true);
    expect(String((login as Error).message)).toMatch(/Invalid consumer database login \(X\):\n {2}- role must be a lowercase identifier/);
    const consumer = caught(
      () =>
        new OutcomeConsumer(cdk.Stack.of(pipeline), 'Bad', {
          consumerName: 'Bad Name',
          policy: 'at-least-once',
          eventBus: pipeline.eventBus,
          detailTypes: ['Charge Succeeded'],
          vpc: pipeline.vpc,
          securityGroup: pipeline.functionsSecurityGroup,
          databaseSecret: pipeline.databaseSecret,
        }),
    );
    expect(cdk.Errors.isValidationError(consumer)).toBe(true);
    expect(String((consumer as Error).message)).toMatch(/consumerName must match[\s\S]*give exactly one of entry .* and code/);
  });
});
