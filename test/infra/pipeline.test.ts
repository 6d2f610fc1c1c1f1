// The construct's template, box by box: intake queue and event source mapping, functions (and the
// secrets they must never carry), reconcile schedule, outcome events, ops function, deploy order,
// database and network. One file, so that aws-cdk-lib is loaded and the default pipeline is
// synthesized once for all of them.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { afterAll, describe, expect, it } from 'vitest';
import { PIPELINE } from '../../lambdas/runtime/settings.ts';
import { OUTCOME_DETAIL_TYPES } from '../../lib/outcome-events.ts';
import { LAMBDA_MIGRATIONS_DIR, LAMBDA_RDS_CA_BUNDLE } from '../../lib/pipeline-function.ts';
import {
  asArray,
  type CfnResource,
  dependsOn,
  logicalId,
  ofType,
  policyStatements,
  removeSynthOutput,
  synthPipeline,
} from './support.ts';

afterAll(removeSynthOutput);

/** The construct with its defaults, embedded in a plain stack. */
const base = synthPipeline();

describe('intake', () => {
  describe('the intake queue', () => {
    const { pipeline, resources } = base;
    const queue = resources[logicalId(pipeline.queue)]!;
    const dlq = resources[logicalId(pipeline.deadLetterQueue)]!;
    const chargeFn = resources[logicalId(pipeline.chargeFunction)]!;

    it('is FIFO, deduplicated by the producers ids, in high-throughput mode, encrypted', () => {
      // no physical name unless given: two pipelines in one stack or account never collide
      expect(queue.Properties!.QueueName).toBeUndefined();
      expect(queue.Properties).toMatchObject({
        FifoQueue: true,
        ContentBasedDeduplication: false,
        DeduplicationScope: 'messageGroup',
        FifoThroughputLimit: 'perMessageGroupId',
        SqsManagedSseEnabled: true,
      });
    });

    it('hides a received batch for at least six times the charge function timeout', () => {
      const timeout = chargeFn.Properties!.Timeout as number;
      expect(timeout).toBe(PIPELINE.chargeFunctionTimeoutSeconds);
      expect(queue.Properties!.VisibilityTimeout).toBeGreaterThanOrEqual(6 * timeout);
      expect(queue.Properties!.VisibilityTimeout).toBe(PIPELINE.visibilityTimeoutSeconds);
    });

    it('moves a request to a FIFO dead-letter queue after maxReceiveCount receives', () => {
      expect(queue.Properties!.RedrivePolicy).toEqual({
        deadLetterTargetArn: { 'Fn::GetAtt': [logicalId(pipeline.deadLetterQueue), 'Arn'] },
        maxReceiveCount: PIPELINE.maxReceiveCount,
      });
      expect(dlq.Properties!.QueueName).toBeUndefined();
      expect(dlq.Properties).toMatchObject({
        FifoQueue: true,
        SqsManagedSseEnabled: true,
        MessageRetentionPeriod: 14 * 24 * 3600,
      });
    });

    it('refuses any request not made over TLS, on both queues', () => {
      const policies = ofType(resources, 'AWS::SQS::QueuePolicy');
      for (const target of [logicalId(pipeline.queue), logicalId(pipeline.deadLetterQueue)]) {
        const policy = policies.find(([, p]) => JSON.stringify(p.Properties!.Queues) === JSON.stringify([{ Ref: target }]));
        expect(policy, `queue policy of ${target}`).toBeDefined();
        expect(policy![1].Properties!.PolicyDocument.Statement).toContainEqual(
          expect.objectContaining({
            Effect: 'Deny',
            Action: 'sqs:*',
            Condition: { Bool: { 'aws:SecureTransport': 'false' } },
            Principal: { AWS: '*' },
          }),
        );
      }
    });

    it('keeps the DLQ (charge requests parked for a human) when the stack is deleted, unless the removal policy is DESTROY', () => {
      expect(dlq).toMatchObject({ DeletionPolicy: 'Retain', UpdateReplacePolicy: 'Retain' });
      // The intake queue goes with the stack (drain it first), unless RETAIN: a kept queue nobody
      // reads would take producers' requests silently.
      expect(queue).toMatchObject({ DeletionPolicy: 'Delete' });
      const kept = synthPipeline({ removalPolicy: cdk.RemovalPolicy.RETAIN });
      expect(kept.resources[logicalId(kept.pipeline.deadLetterQueue)]).toMatchObject({ DeletionPolicy: 'Retain' });
      expect(kept.resources[logicalId(kept.pipeline.queue)]).toMatchObject({ DeletionPolicy: 'Retain' });
      const throwaway = synthPipeline({ removalPolicy: cdk.RemovalPolicy.DESTROY });
      expect(throwaway.resources[logicalId(throwaway.pipeline.deadLetterQueue)]).toMatchObject({ DeletionPolicy: 'Delete' });
    });

    it('says how long a request waits for the charge function (4 days unless configured), and refuses what SQS would', () => {
      expect(queue.Properties!.MessageRetentionPeriod).toBe(4 * 24 * 3600);
      const longer = synthPipeline({ queueRetentionPeriod: cdk.Duration.days(14) });
      expect(longer.resources[logicalId(longer.pipeline.queue)]!.Properties!.MessageRetentionPeriod).toBe(14 * 24 * 3600);
      expect(() => synthPipeline({ queueRetentionPeriod: cdk.Duration.days(15) })).toThrow(/queueRetentionPeriod must be from 1 minute to 14 days/);
    });

    it('lets only the intake queue use the DLQ when the intake queue has a name (RedriveAllowPolicy byQueue)', () => {
      const named = synthPipeline({ queueName: 'x-requests.fifo' });
      expect(named.resources[logicalId(named.pipeline.deadLetterQueue)]!.Properties!.RedriveAllowPolicy).toEqual({
        redrivePermission: 'byQueue',
        sourceQueueArns: [{ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':sqs:', { Ref: 'AWS::Region' }, ':', { Ref: 'AWS::AccountId' }, ':x-requests.fifo']] }],
      });
      // A name CloudFormation generates cannot be referred to without a cycle (the queue refers to the DLQ).
      expect(dlq.Properties!.RedriveAllowPolicy).toBeUndefined();
    });

    it('takes configured names and receive count', () => {
      const { pipeline: p, resources: r } = synthPipeline({
        queueName: 'x-requests.fifo',
        deadLetterQueueName: 'x-dlq.fifo',
        maxReceiveCount: 3,
      });
      expect(r[logicalId(p.queue)]!.Properties).toMatchObject({
        QueueName: 'x-requests.fifo',
        RedrivePolicy: { maxReceiveCount: 3 },
      });
      expect(r[logicalId(p.deadLetterQueue)]!.Properties!.QueueName).toBe('x-dlq.fifo');
    });
  });

  describe('the event source mapping', () => {
    it('feeds the charge function batches of 10 with partial batch responses and bounded concurrency', () => {
      const { pipeline, resources } = base;
      const mappings = ofType(resources, 'AWS::Lambda::EventSourceMapping');
      expect(mappings).toHaveLength(1);
      const [, mapping] = mappings[0]!;
      expect(mapping.Properties).toEqual({
        FunctionName: { Ref: logicalId(pipeline.chargeFunction) },
        EventSourceArn: { 'Fn::GetAtt': [logicalId(pipeline.queue), 'Arn'] },
        BatchSize: PIPELINE.batchSize,
        FunctionResponseTypes: ['ReportBatchItemFailures'],
        ScalingConfig: { MaximumConcurrency: 5 },
      });
    });

    it('takes the configured maximum concurrency', () => {
      const { resources } = synthPipeline({ chargeMaxConcurrency: 40, databaseMaxConnections: 110 }); // 2 × (40 + 10 + 2 + 2) + 2 connections
      const [, mapping] = ofType(resources, 'AWS::Lambda::EventSourceMapping')[0]!;
      expect(mapping.Properties!.ScalingConfig).toEqual({ MaximumConcurrency: 40 });
    });

    it('lets the charge function consume the queue; nothing else may receive from it', () => {
      const { pipeline, resources } = base;
      const queueArn = { 'Fn::GetAtt': [logicalId(pipeline.queue), 'Arn'] };
      const onQueue = policyStatements(resources).filter(({ statement }) => JSON.stringify(statement.Resource) === JSON.stringify(queueArn));
      expect(onQueue).toEqual([
        {
          owner: logicalId(pipeline.chargeFunction.role!.node.findChild('DefaultPolicy')),
          statement: {
            Effect: 'Allow',
            Action: [
              'sqs:ChangeMessageVisibility',
              'sqs:DeleteMessage',
              'sqs:GetQueueAttributes',
              'sqs:GetQueueUrl',
              'sqs:ReceiveMessage',
            ],
            Resource: queueArn,
          },
        },
      ]);
    });
  });
});

describe('functions', () => {
  const STRIPE_SECRET_ARN = 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:stripe/live-key-AbCdEf';

  const { pipeline, resources } = base;
  const ours = {
    charge: pipeline.chargeFunction,
    reconcile: pipeline.reconcileFunction,
    migrate: pipeline.migrateFunction,
    ops: pipeline.opsFunction,
    'stripe-events': pipeline.stripeEvents!.function,
  };
  const fn = (name: keyof typeof ours): CfnResource => resources[logicalId(ours[name])]!;
  const env = (name: keyof typeof ours): Record<string, unknown> => fn(name).Properties!.Environment.Variables;

  describe('the pipeline functions', () => {
    it('are the five handlers of lambdas/, and every other function is a CDK custom-resource provider', () => {
      const functions = ofType(resources, 'AWS::Lambda::Function').map(([id]) => id);
      const ourIds = Object.values(ours).map((f) => logicalId(f));
      expect(functions).toEqual(expect.arrayContaining(ourIds));
      for (const id of functions.filter((id) => !ourIds.includes(id))) {
        // Trigger, log-retention and default-security-group providers: code owned by aws-cdk-lib.
        expect(id).toMatch(/CustomResourceProvider|LogRetention|Provider/);
      }
    });

    it.each(Object.keys(ours) as (keyof typeof ours)[])('%s runs Node.js 24 on arm64 in the private subnets', (name) => {
      expect(fn(name).Properties).toMatchObject({
        Runtime: 'nodejs24.x',
        Architectures: ['arm64'],
        Handler: 'index.handler',
        VpcConfig: { SecurityGroupIds: [{ 'Fn::GetAtt': [logicalId(pipeline.functionsSecurityGroup), 'GroupId'] }] },
      });
      const subnets = fn(name).Properties!.VpcConfig.SubnetIds as { Ref: string }[];
      const egress = pipeline.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnets;
      expect(subnets).toEqual(egress.map((subnet) => ({ Ref: logicalId(subnet) })));
    });

    it.each(Object.keys(ours) as (keyof typeof ours)[])('%s verifies the database certificate and maps its stack traces', (name) => {
      expect(env(name)).toMatchObject({
        // migrate connects as the owner; the others as the data-only application role
        DB_SECRET_ARN: { Ref: expect.stringMatching(name === 'migrate' ? /DatabaseCredentialsAttachment/ : /ApplicationCredentialsAttachment/) },
        DB_SSL: 'verify-full',
        DB_SSL_CA_FILE: LAMBDA_RDS_CA_BUNDLE,
        NODE_OPTIONS: '--enable-source-maps',
        POWERTOOLS_SERVICE_NAME: PIPELINE.serviceName,
        POWERTOOLS_METRICS_NAMESPACE: PIPELINE.metricsNamespace,
        PIPELINE_NAME: pipeline.pipelineName,
        POWERTOOLS_LOG_LEVEL: 'INFO',
      });
      // the runtime image's CA file is not relied on any more (it lacks rds-ca-rsa2048-g1)
      expect(env(name).NODE_EXTRA_CA_CERTS).toBeUndefined();
    });

    it('give migrate the application secret, whose password it sets on the data-only role, and nobody else the owner\'s', () => {
      expect(env('migrate')).toMatchObject({ DB_APP_SECRET_ARN: { Ref: logicalId(pipeline.applicationDatabaseSecret) } });
      for (const name of ['charge', 'reconcile', 'ops', 'stripe-events'] as const) {
        expect(env(name).DB_APP_SECRET_ARN, name).toBeUndefined();
        expect(JSON.stringify(env(name)), name).not.toContain(logicalId(pipeline.databaseSecret));
      }
    });

    it('give the charge, reconcile and ops functions the Stripe secret, the bus and a pool size', () => {
      for (const name of ['charge', 'reconcile', 'ops'] as const) {
        expect(env(name)).toMatchObject({
          STRIPE_SECRET_ARN: { Ref: logicalId(pipeline.stripeSecret) },
          EVENT_BUS_NAME: { Ref: logicalId(pipeline.eventBus) },
          EVENT_SOURCE: PIPELINE.eventSource,
          DB_POOL_MAX: '2',
        });
      }
      expect(env('charge')).toMatchObject({ CHARGE_CONCURRENCY: '2' });
      expect(env('reconcile')).toMatchObject({
        RECONCILE_MAX_RPS: '5',
        RECONCILE_SEARCH_MAX_RPS: '2',
        RECONCILE_CONCURRENCY: '4',
      });
      expect(env('migrate')).toMatchObject({ MIGRATIONS_DIR: LAMBDA_MIGRATIONS_DIR });
      expect(env('migrate')).not.toHaveProperty('STRIPE_SECRET_ARN');
    });

    it('pass the configured limits through', () => {
      const configured = synthPipeline({
        chargeStripeConcurrency: 10,
        reconcileMaxRps: 40,
        reconcileSearchMaxRps: 15,
        reconcileConcurrency: 16,
        databasePoolMax: 4,
        logLevel: 'DEBUG',
        stripeTimeout: cdk.Duration.seconds(8),
        stripeMaxNetworkRetries: 2,
        retention: { outboxDays: 7, stripeEventDays: 10, batchSize: 500, operatorReadDays: 730, resolvedFindingDays: 120 },
      });
      const vars = (f: cdk.IResource) => configured.resources[logicalId(f)]!.Properties!.Environment.Variables;
      // Retention's bounds reach the reconcile function only; unset ones keep its defaults.
      expect(vars(configured.pipeline.reconcileFunction)).toMatchObject({
        OUTBOX_RETENTION_DAYS: '7',
        STRIPE_EVENT_RETENTION_DAYS: '10',
        RETENTION_BATCH_SIZE: '500',
        OPERATOR_READ_RETENTION_DAYS: '730',
        RESOLVED_FINDING_RETENTION_DAYS: '120',
      });
      expect(vars(configured.pipeline.reconcileFunction)).not.toHaveProperty('REJECTED_BODY_RETENTION_DAYS');
      expect(vars(configured.pipeline.chargeFunction)).not.toHaveProperty('OUTBOX_RETENTION_DAYS');
      expect(vars(configured.pipeline.chargeFunction)).toMatchObject({
        CHARGE_CONCURRENCY: '10',
        DB_POOL_MAX: '4',
        POWERTOOLS_LOG_LEVEL: 'DEBUG',
        STRIPE_TIMEOUT_MS: '8000',
        STRIPE_MAX_NETWORK_RETRIES: '2',
      });
      expect(vars(configured.pipeline.reconcileFunction)).toMatchObject({ STRIPE_TIMEOUT_MS: '8000', STRIPE_MAX_NETWORK_RETRIES: '2' });
      expect(vars(configured.pipeline.reconcileFunction)).toMatchObject({
        RECONCILE_MAX_RPS: '40',
        RECONCILE_SEARCH_MAX_RPS: '15',
        RECONCILE_CONCURRENCY: '16',
      });
    });

    it('use the shared timeouts and never replay a scheduled sweep or an operator command', () => {
      expect(fn('charge').Properties!.Timeout).toBe(PIPELINE.chargeFunctionTimeoutSeconds);
      expect(fn('reconcile').Properties!.Timeout).toBe(PIPELINE.reconcileFunctionTimeoutSeconds);
      const invokeConfigs = ofType(resources, 'AWS::Lambda::EventInvokeConfig').map(([, r]) => r.Properties!);
      for (const name of ['reconcile', 'migrate', 'ops'] as const) {
        expect(invokeConfigs).toContainEqual(
          expect.objectContaining({ FunctionName: { Ref: logicalId(ours[name]) }, MaximumRetryAttempts: 0 }),
        );
      }
    });

    it('run with a role that carries only the VPC access policy (the basic execution policy is redundant beside it)', () => {
      for (const name of Object.keys(ours) as (keyof typeof ours)[]) {
        const role = resources[fn(name).Properties!.Role['Fn::GetAtt'][0] as string]!;
        const managed = JSON.stringify(role.Properties!.ManagedPolicyArns);
        expect(managed, name).toContain('service-role/AWSLambdaVPCAccessExecutionRole');
        expect(managed, name).not.toContain('AWSLambdaBasicExecutionRole');
        expect(role.Properties!.ManagedPolicyArns, name).toHaveLength(1);
      }
    });

    it('reserve no concurrency for the ops function unless asked (a reservation fails the deploy in a small account), and bound it when asked', () => {
      expect(fn('ops').Properties!.ReservedConcurrentExecutions).toBeUndefined();
      const bounded = synthPipeline({ opsReservedConcurrency: 2 });
      expect(bounded.resources[logicalId(bounded.pipeline.opsFunction)]!.Properties!.ReservedConcurrentExecutions).toBe(2);
      expect(() => synthPipeline({ opsReservedConcurrency: 0 })).toThrow(/opsReservedConcurrency must be an integer from 1 to 1000, got 0/);
    });

    it('trace with X-Ray when asked (active tracing and the two actions it needs), not by default', () => {
      expect(fn('charge').Properties!.TracingConfig).toBeUndefined();
      const traced = synthPipeline({ tracing: true });
      for (const f of [traced.pipeline.chargeFunction, traced.pipeline.reconcileFunction, traced.pipeline.opsFunction, traced.pipeline.migrateFunction, traced.pipeline.stripeEvents!.function]) {
        expect(traced.resources[logicalId(f)]!.Properties!.TracingConfig).toEqual({ Mode: 'Active' });
        const role = logicalId(f.role!);
        const statements = policyStatements(traced.resources).filter(({ owner, statement }) => JSON.stringify(traced.resources[owner]!.Properties!.Roles ?? []).includes(role) && JSON.stringify(statement.Action).includes('xray:'));
        expect(statements.map(({ statement }) => statement)).toEqual([expect.objectContaining({ Action: ['xray:PutTelemetryRecords', 'xray:PutTraceSegments'], Resource: '*' })]);
      }
    });

    it('are connectable as one security group (the pipeline is an ec2.IConnectable)', () => {
      const { pipeline: p } = base;
      expect(p.connections.securityGroups).toEqual([p.functionsSecurityGroup]);
    });

    it('write to their own log groups with a retention', () => {
      for (const name of Object.keys(ours) as (keyof typeof ours)[]) {
        const group = fn(name).Properties!.LoggingConfig.LogGroup.Ref as string;
        expect(resources[group]).toMatchObject({ Type: 'AWS::Logs::LogGroup', Properties: { RetentionInDays: 90 } });
      }
    });
  });

  // Anything that looks like a credential, in a name that is not an ARN reference or in any value.
  const SECRET_VALUE = /(sk|rk|pk)_(live|test)_[A-Za-z0-9]|whsec_|AKIA[0-9A-Z]{16}|-----BEGIN|postgres(ql)?:\/\/[^\s]*:[^\s]*@/;
  const SECRET_NAME = /(SECRET|PASSWORD|PASSWD|API_KEY|APIKEY|TOKEN|PRIVATE_KEY|CREDENTIAL)/i;

  describe('no secret in any function configuration', () => {
    it.each([
      ['the embedded construct', base],
      [
        'an imported Stripe secret',
        synthPipeline((stack) => ({
          stripeSecret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Stripe', STRIPE_SECRET_ARN),
        })),
      ],
    ])('%s', (_label, synthesized) => {
      let scanned = 0;
      for (const [id, resource] of ofType(synthesized.resources, 'AWS::Lambda::Function')) {
        const variables: Record<string, unknown> = resource.Properties?.Environment?.Variables ?? {};
        for (const [name, value] of Object.entries(variables)) {
          scanned++;
          const rendered = JSON.stringify(value);
          expect(rendered, `${id}.${name}`).not.toMatch(SECRET_VALUE);
          // Secrets Manager / SSM dynamic references would put the value into the configuration.
          expect(rendered, `${id}.${name}`).not.toMatch(/\{\{resolve:(secretsmanager|ssm-secure)/);
          if (SECRET_NAME.test(name)) {
            expect(name, `${id}.${name} carries a secret's ARN, never the secret`).toMatch(/_ARN$/);
            const isReference = typeof value === 'object' && value !== null && 'Ref' in value;
            const isArn = typeof value === 'string' && /^arn:aws[a-z-]*:secretsmanager:/.test(value);
            expect(isReference || isArn, `${id}.${name} = ${rendered}`).toBe(true);
          }
        }
      }
      expect(scanned).toBeGreaterThan(20);
    });

    it('creates the Stripe secret empty: the key never passes through the template', () => {
      const secret = base.resources[logicalId(pipeline.stripeSecret)]!;
      expect(secret.Properties!.SecretString).toEqual('{"apiKey":""}');
      expect(secret.Properties).not.toHaveProperty('GenerateSecretString');
    });
  });
});

describe('reconcile schedule', () => {
  describe('the reconcile schedule', () => {
    const { pipeline, resources } = base;
    const schedules = ofType(resources, 'AWS::Scheduler::Schedule');
    const reconcileArn = { 'Fn::GetAtt': [logicalId(pipeline.reconcileFunction), 'Arn'] };

    it('runs the reconcile function every minute, on time', () => {
      expect(schedules).toHaveLength(1);
      const [, schedule] = schedules[0]!;
      expect(schedule.Properties).toMatchObject({
        ScheduleExpression: PIPELINE.reconcileSchedule,
        State: 'ENABLED',
        FlexibleTimeWindow: { Mode: 'OFF' },
        Target: { Arn: reconcileArn, RoleArn: { 'Fn::GetAtt': [logicalId(pipeline.reconcileSchedule.node.scope!.node.findChild('ScheduleRole')), 'Arn'] } },
      });
      expect(PIPELINE.reconcileSchedule).toBe('rate(1 minute)');
    });

    it('retries a sweep a little and never delivers a stale one (not 185 retries over 24 h)', () => {
      const [, schedule] = schedules[0]!;
      expect(schedule.Properties!.Target.RetryPolicy).toEqual({ MaximumRetryAttempts: 2, MaximumEventAgeInSeconds: 60 });
      // The scheduler invokes asynchronously: Lambda's own retries of a failed sweep are off too.
      const invokeConfig = ofType(resources, 'AWS::Lambda::EventInvokeConfig').find(
        ([, r]) => r.Properties!.FunctionName.Ref === logicalId(pipeline.reconcileFunction),
      );
      expect(invokeConfig?.[1].Properties).toMatchObject({ MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 });
    });

    it('passes the scheduled time to the sweep, for its logs', () => {
      const [, schedule] = schedules[0]!;
      expect(JSON.parse(schedule.Properties!.Target.Input)).toEqual({
        source: 'aws.scheduler',
        scheduleArn: '<aws.scheduler.schedule-arn>',
        scheduledTime: '<aws.scheduler.scheduled-time>',
        attemptNumber: '<aws.scheduler.attempt-number>',
      });
    });

    it('assumes a role that only this account\'s scheduler can assume and that can only invoke the reconcile function', () => {
      const roleId = logicalId(pipeline.reconcileSchedule.node.scope!.node.findChild('ScheduleRole'));
      expect(resources[roleId]!.Properties!.AssumeRolePolicyDocument.Statement).toEqual([
        {
          Action: 'sts:AssumeRole',
          Effect: 'Allow',
          Principal: { Service: 'scheduler.amazonaws.com' },
          Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
        },
      ]);
      const statements = policyStatements(resources).filter(({ owner }) =>
        JSON.stringify(resources[owner]!.Properties!.Roles ?? []).includes(roleId),
      );
      expect(statements.map(({ statement }) => statement)).toEqual([
        {
          Action: 'lambda:InvokeFunction',
          Effect: 'Allow',
          Resource: [reconcileArn, { 'Fn::Join': ['', [reconcileArn, ':*']] }],
        },
      ]);
    });

    it('takes a configured schedule', () => {
      const { resources: r } = synthPipeline({ reconcileSchedule: scheduler.ScheduleExpression.expression('rate(2 minutes)') });
      expect(ofType(r, 'AWS::Scheduler::Schedule')[0]![1].Properties!.ScheduleExpression).toBe('rate(2 minutes)');
    });
  });
});

describe('outcome events', () => {
  const { pipeline, resources } = base;
  const busId = logicalId(pipeline.eventBus);

  describe('outcome events', () => {
    it('go to a custom bus', () => {
      // a bus must have a name: by default one unique to the construct instance (stack + path)
      expect(resources[busId]).toMatchObject({ Type: 'AWS::Events::EventBus', Properties: { Name: expect.stringMatching(/^EmbeddingStack-Charges-OutcomeEvents-.+/) } });
      const named = synthPipeline({ eventBusName: 'payments-outcomes' });
      expect(named.resources[logicalId(named.pipeline.eventBus)]!.Properties!.Name).toBe('payments-outcomes');
    });

    it('are archived for replay with a retention period', () => {
      const [[, archive]] = ofType(resources, 'AWS::Events::Archive') as [[string, CfnResource]];
      expect(archive.Properties).toMatchObject({
        SourceArn: { 'Fn::GetAtt': [busId, 'Arn'] },
        RetentionDays: 30,
        EventPattern: { source: [PIPELINE.eventSource] },
      });
      const longer = synthPipeline({ eventArchiveRetention: cdk.Duration.days(365) });
      expect(ofType(longer.resources, 'AWS::Events::Archive')[0]![1].Properties!.RetentionDays).toBe(365);
    });

    it('reach an example consumer queue through a rule when asked, with a dead-letter queue for failed deliveries', () => {
      const { pipeline, resources } = synthPipeline({ exampleConsumer: true });
      const [[, rule]] = ofType(resources, 'AWS::Events::Rule') as [[string, CfnResource]];
      const consumer = logicalId(pipeline.exampleConsumerQueue!);
      expect(rule.Properties).toMatchObject({
        EventBusName: { Ref: logicalId(pipeline.eventBus) },
        EventPattern: { source: [PIPELINE.eventSource], 'detail-type': [...OUTCOME_DETAIL_TYPES] },
        State: 'ENABLED',
      });
      const [target] = rule.Properties!.Targets as any[];
      expect(target.Arn).toEqual({ 'Fn::GetAtt': [consumer, 'Arn'] });
      const dlqId = target.DeadLetterConfig.Arn['Fn::GetAtt'][0] as string;
      expect(resources[consumer]!.Properties).toMatchObject({
        SqsManagedSseEnabled: true,
        RedrivePolicy: { deadLetterTargetArn: { 'Fn::GetAtt': [dlqId, 'Arn'] }, maxReceiveCount: 5 },
      });
      expect(resources[dlqId]!.Properties).toMatchObject({ SqsManagedSseEnabled: true });
    });

    it('follow the configured source, and the example consumer is off unless asked (a queue nobody reads, in production)', () => {
      expect(pipeline.exampleConsumerQueue).toBeUndefined();
      expect(ofType(resources, 'AWS::Events::Rule')).toHaveLength(0);
      const custom = synthPipeline({ eventSource: 'acme.payments' });
      expect(ofType(custom.resources, 'AWS::Events::Rule')).toHaveLength(0);
      expect(custom.pipeline.exampleConsumerQueue).toBeUndefined();
      expect(ofType(custom.resources, 'AWS::Events::Archive')[0]![1].Properties!.EventPattern).toEqual({ source: ['acme.payments'] });
      const env = custom.resources[logicalId(custom.pipeline.chargeFunction)]!.Properties!.Environment.Variables;
      expect(env.EVENT_SOURCE).toBe('acme.payments');
    });
  });

  describe('events:PutEvents', () => {
    it('is granted on the pipeline bus only, and only to the functions that relay the outbox', () => {
      const putEvents = policyStatements(resources).filter(({ statement }) =>
        asArray<string>(statement.Action).some((action) => action === 'events:PutEvents' || action === 'events:*' || action === '*'),
      );
      expect(putEvents.length).toBeGreaterThan(0);
      for (const { statement } of putEvents) {
        expect(statement).toEqual({ Action: 'events:PutEvents', Effect: 'Allow', Resource: { 'Fn::GetAtt': [busId, 'Arn'] } });
      }
      const roles = putEvents.flatMap(({ owner }) => resources[owner]!.Properties!.Roles as { Ref: string }[]).map((r) => r.Ref);
      expect(roles.sort()).toEqual(
        // (the Stripe-events function publishes what its inline applies write: refunds, disputes, settles)
        [pipeline.chargeFunction, pipeline.reconcileFunction, pipeline.opsFunction, pipeline.stripeEvents!.function].map((fn) => logicalId(fn.role!)).sort(),
      );
    });
  });
});

describe('ops function', () => {
  const OPERATOR_ROLE = 'arn:aws:iam::123456789012:role/payments-oncall';

  describe('the ops function', () => {
    it('may be invoked by the configured operator role, and by no other principal through its resource policy', () => {
      const { pipeline, resources } = synthPipeline((stack) => ({
        operatorRole: iam.Role.fromRoleArn(stack, 'Oncall', OPERATOR_ROLE, { mutable: false }),
      }));
      const ops = logicalId(pipeline.opsFunction);
      const permissions = ofType(resources, 'AWS::Lambda::Permission').filter(
        ([, p]) => JSON.stringify(p.Properties!.FunctionName).includes(ops),
      );
      expect(permissions.map(([, p]) => p.Properties)).toEqual([
        { Action: 'lambda:InvokeFunction', FunctionName: { 'Fn::GetAtt': [ops, 'Arn'] }, Principal: OPERATOR_ROLE },
      ]);
    });

    it('is invocable by no identity policy the stack writes (the operator role is not modified)', () => {
      const { pipeline, resources } = synthPipeline((stack) => ({
        operatorRole: iam.Role.fromRoleArn(stack, 'Oncall', OPERATOR_ROLE),
      }));
      const ops = logicalId(pipeline.opsFunction);
      const invokesOps = policyStatements(resources).filter(
        ({ statement }) =>
          asArray<string>(statement.Action).some((a) => a.startsWith('lambda:Invoke') || a === 'lambda:*') &&
          JSON.stringify(statement.Resource).includes(ops),
      );
      expect(invokesOps).toEqual([]);
    });

    it('gets no resource-based permission when no operator role is configured', () => {
      const { pipeline, resources } = base;
      const ops = logicalId(pipeline.opsFunction);
      expect(
        ofType(resources, 'AWS::Lambda::Permission').filter(([, p]) => JSON.stringify(p.Properties!.FunctionName).includes(ops)),
      ).toEqual([]);
    });

    it('reads the application role\'s secret and the Stripe secret and publishes on the bus, like the reconciler', () => {
      const { pipeline, resources } = base;
      const role = logicalId(pipeline.opsFunction.role!);
      const statements = policyStatements(resources)
        .filter(({ owner }) => JSON.stringify(resources[owner]!.Properties!.Roles ?? []).includes(role))
        .map(({ statement }) => statement);
      expect(statements).toEqual([
        {
          Action: ['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'],
          Effect: 'Allow',
          Resource: [
            { Ref: logicalId(pipeline.applicationDatabaseSecret) },
            { Ref: logicalId(pipeline.stripeSecret.node.defaultChild!) },
          ],
        },
        { Action: 'events:PutEvents', Effect: 'Allow', Resource: { 'Fn::GetAtt': [logicalId(pipeline.eventBus), 'Arn'] } },
      ]);
    });
  });
});

describe('deploy order', () => {
  const { pipeline, resources } = base;
  const triggers = ofType(resources, 'Custom::Trigger');
  const [triggerId, trigger] = triggers[0]!;

  describe('migrations on deploy', () => {
    it('run the migrate function synchronously through a Trigger whenever its version changes', () => {
      expect(triggers).toHaveLength(1);
      expect(trigger.Properties).toMatchObject({
        InvocationType: 'RequestResponse',
        ExecuteOnHandlerChange: true,
        Timeout: String((300 + 30) * 1000),
      });
      const version = trigger.Properties!.HandlerArn.Ref as string;
      expect(resources[version]).toMatchObject({
        Type: 'AWS::Lambda::Version',
        Properties: { FunctionName: { Ref: logicalId(pipeline.migrateFunction) } },
      });
    });

    it('run after the database, its secrets and its network rules exist', () => {
      const after = dependsOn(trigger);
      expect(after).toContain(logicalId(pipeline.database!));
      expect(after).toContain(logicalId(pipeline.databaseSecret));
      expect(after).toContain(logicalId(pipeline.applicationDatabaseSecret));
      // both halves of the functions -> database path: the database's ingress rule and the
      // functions' egress rule (which lives on the functions' security group, outside Database)
      const rules = (type: string) =>
        ofType(resources, type)
          .filter(([, r]) => JSON.stringify(r.Properties).includes(logicalId(pipeline.functionsSecurityGroup)) && r.Properties!.FromPort === 5432)
          .map(([id]) => id);
      expect(rules('AWS::EC2::SecurityGroupEgress')).toHaveLength(1);
      expect(rules('AWS::EC2::SecurityGroupIngress')).toHaveLength(1);
      for (const id of [...rules('AWS::EC2::SecurityGroupEgress'), ...rules('AWS::EC2::SecurityGroupIngress')]) expect(after).toContain(id);
    });

    it('start rotating the database secrets only after the migrations gave the application role its password', () => {
      const schedules = ofType(resources, 'AWS::SecretsManager::RotationSchedule');
      expect(schedules).toHaveLength(2);
      for (const [id, schedule] of schedules) {
        expect(dependsOn(schedule), id).toContain(triggerId);
        expect(schedule.Properties!.RotationRules).toMatchObject({ ScheduleExpression: 'rate(30 days)' });
      }
      const rotated = schedules.map(([, s]) => s.Properties!.SecretId.Ref).sort();
      expect(rotated).toEqual([logicalId(pipeline.databaseSecret), logicalId(pipeline.applicationDatabaseSecret)].sort());
    });

    it('run before the event source mapping and the schedule exist: nothing takes traffic on a schema that is not there', () => {
      expect(dependsOn(resources[logicalId(pipeline.chargeEventSourceMapping)]!)).toContain(triggerId);
      expect(dependsOn(resources[logicalId(pipeline.reconcileSchedule)]!)).toContain(triggerId);
    });

    it('run before the functions that use the schema are updated (expand first, then new code)', () => {
      for (const fn of [pipeline.chargeFunction, pipeline.reconcileFunction, pipeline.opsFunction]) {
        expect(dependsOn(resources[logicalId(fn)]!), fn.node.path).toContain(triggerId);
      }
      // and the trigger does not wait for them (no cycle)
      for (const fn of [pipeline.chargeFunction, pipeline.reconcileFunction, pipeline.opsFunction]) {
        expect(dependsOn(trigger)).not.toContain(logicalId(fn));
      }
    });

    it('fail the deploy when the migration fails (the trigger waits for the result)', () => {
      // RequestResponse: the trigger provider reads FunctionError and fails the custom resource,
      // which fails (and rolls back) the deploy. An Event invocation would not.
      expect(trigger.Properties!.InvocationType).toBe('RequestResponse');
      const providerToken = trigger.Properties!.ServiceToken['Fn::GetAtt'][0] as string;
      expect(resources[providerToken]!.Type).toBe('AWS::Lambda::Function');
      expect(resources[providerToken]!.Properties!.Timeout).toBeGreaterThanOrEqual(330);
    });
  });
});

describe('database and network', () => {
  const { pipeline, resources } = base;
  const instance = resources[logicalId(pipeline.database!)]!;

  describe('the database', () => {
    it('is PostgreSQL 18 (major version only, so minor upgrades never become a downgrade) with encrypted storage, not public, backed up, protected and snapshotted on delete', () => {
      expect(instance.Properties).toMatchObject({
        Engine: 'postgres',
        EngineVersion: '18',
        AutoMinorVersionUpgrade: true,
        DBInstanceClass: 'db.t4g.micro',
        StorageEncrypted: true,
        StorageType: 'gp3',
        PubliclyAccessible: false,
        MultiAZ: true,
        BackupRetentionPeriod: 7,
        DeletionProtection: true,
        DBName: 'charges',
        Port: '5432',
        CACertificateIdentifier: 'rds-ca-rsa2048-g1',
        EnableCloudwatchLogsExports: ['postgresql'],
      });
      expect(instance.DeletionPolicy).toBe('Snapshot');
      expect(instance.UpdateReplacePolicy).toBe('Snapshot');
    });

    it('requires TLS for every connection (rds.force_ssl = 1 in its parameter group)', () => {
      const groupId = instance.Properties!.DBParameterGroupName.Ref as string;
      expect(resources[groupId]).toMatchObject({
        Type: 'AWS::RDS::DBParameterGroup',
        Properties: { Family: 'postgres18', Parameters: { 'rds.force_ssl': '1' } },
      });
    });

    it('lives in the isolated subnets', () => {
      const subnetGroup = resources[instance.Properties!.DBSubnetGroupName.Ref as string]!;
      const isolated = pipeline.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_ISOLATED }).subnets;
      expect(subnetGroup.Properties!.SubnetIds).toEqual(isolated.map((subnet) => ({ Ref: logicalId(subnet) })));
      for (const subnet of isolated) {
        const routes = ofType(resources, 'AWS::EC2::Route').filter(
          ([, route]) =>
            JSON.stringify(route.Properties!.RouteTableId) === JSON.stringify({ Ref: logicalId(subnet.node.findChild('RouteTable')) }),
        );
        expect(routes, 'an isolated subnet has no route out').toHaveLength(0);
      }
    });

    it('keeps its credentials in a generated secret with host, port, user and dbname, and the password out of the template', () => {
      const secretId = logicalId(pipeline.databaseSecret.node.scope!);
      const secret = resources[secretId]!;
      expect(secret.Type).toBe('AWS::SecretsManager::Secret');
      expect(secret.Properties!.GenerateSecretString).toMatchObject({
        GenerateStringKey: 'password',
        SecretStringTemplate: JSON.stringify({ username: 'charges', dbname: 'charges' }),
      });
      expect(secret.Properties).not.toHaveProperty('SecretString');
      const [[, attachment]] = ofType(resources, 'AWS::SecretsManager::SecretTargetAttachment') as [[string, CfnResource]];
      expect(attachment.Properties).toMatchObject({
        SecretId: { Ref: secretId },
        TargetId: { Ref: logicalId(pipeline.database!) },
        TargetType: 'AWS::RDS::DBInstance',
      });
    });

    it('follows the environment: multi-AZ, a bigger class, no deletion protection, removal policies', () => {
      const prodLike = synthPipeline({
        multiAz: true,
        databaseInstanceType: new ec2.InstanceType('r7g.large'),
        removalPolicy: cdk.RemovalPolicy.RETAIN,
        backupRetention: cdk.Duration.days(35),
      });
      expect(prodLike.resources[logicalId(prodLike.pipeline.database!)]).toMatchObject({
        Properties: { MultiAZ: true, DBInstanceClass: 'db.r7g.large', DeletionProtection: true, BackupRetentionPeriod: 35 },
        DeletionPolicy: 'Retain',
      });
      const throwaway = synthPipeline({ removalPolicy: cdk.RemovalPolicy.DESTROY });
      expect(throwaway.resources[logicalId(throwaway.pipeline.database!)]).toMatchObject({
        Properties: { DeletionProtection: false },
        DeletionPolicy: 'Delete',
      });
      const dev = synthPipeline({ deletionProtection: false });
      expect(dev.resources[logicalId(dev.pipeline.database!)]).toMatchObject({
        Properties: { DeletionProtection: false },
        DeletionPolicy: 'Snapshot',
      });
    });
  });

  describe('the security groups (least privilege)', () => {
    const functionsSg = logicalId(pipeline.functionsSecurityGroup);
    const databaseSg = instance.Properties!.VPCSecurityGroups[0]['Fn::GetAtt'][0] as string;
    const groupId = (id: string) => ({ 'Fn::GetAtt': [id, 'GroupId'] });

    it('lets the database accept PostgreSQL from the functions and nothing else', () => {
      const ingress = [
        ...ofType(resources, 'AWS::EC2::SecurityGroupIngress').map(([, r]) => r.Properties!),
        ...ofType(resources, 'AWS::EC2::SecurityGroup').flatMap(([id, r]) =>
          (r.Properties!.SecurityGroupIngress ?? []).map((rule: object) => ({ ...rule, GroupId: groupId(id) })),
        ),
      ];
      const toDatabase = ingress.filter((rule) => JSON.stringify(rule.GroupId) === JSON.stringify(groupId(databaseSg)));
      // the functions, and the two secret-rotation functions (on the instance's port)
      const rotationSgs = ofType(resources, 'AWS::EC2::SecurityGroup')
        .filter(([id]) => /RotationSingleUserSecurityGroup|ApplicationRotationSecurityGroup/.test(id))
        .map(([id]) => id);
      expect(rotationSgs).toHaveLength(2);
      expect(toDatabase).toEqual(
        expect.arrayContaining([
          expect.objectContaining({ IpProtocol: 'tcp', FromPort: 5432, ToPort: 5432, SourceSecurityGroupId: groupId(functionsSg) }),
          ...rotationSgs.map((id) => expect.objectContaining({ IpProtocol: 'tcp', SourceSecurityGroupId: groupId(id) })),
        ]),
      );
      expect(toDatabase).toHaveLength(3);
      const toFunctions = ingress.filter((rule) => JSON.stringify(rule.GroupId) === JSON.stringify(groupId(functionsSg)));
      expect(toFunctions).toEqual([]);
      // the database opens no connection of its own
      expect(resources[databaseSg]!.Properties!.SecurityGroupEgress).toEqual([
        expect.objectContaining({ CidrIp: '255.255.255.255/32', Description: 'Disallow all traffic' }),
      ]);
    });

    it('lets the functions out on HTTPS (Stripe, AWS APIs) and to the database on 5432 only', () => {
      const inline = resources[functionsSg]!.Properties!.SecurityGroupEgress as object[];
      const standalone = ofType(resources, 'AWS::EC2::SecurityGroupEgress')
        .map(([, r]) => r.Properties!)
        .filter((rule) => JSON.stringify(rule.GroupId) === JSON.stringify(groupId(functionsSg)));
      expect(inline).toEqual([expect.objectContaining({ CidrIp: '0.0.0.0/0', IpProtocol: 'tcp', FromPort: 443, ToPort: 443 })]);
      expect(standalone).toEqual([
        expect.objectContaining({ IpProtocol: 'tcp', FromPort: 5432, ToPort: 5432, DestinationSecurityGroupId: groupId(databaseSg) }),
      ]);
    });
  });

  describe('the network', () => {
    it('has a NAT gateway per AZ by default, one when asked, and records its flows', () => {
      expect(ofType(resources, 'AWS::EC2::NatGateway')).toHaveLength(2);
      expect(ofType(resources, 'AWS::EC2::FlowLog')).toHaveLength(1);
      expect(ofType(synthPipeline({ natGateways: 1 }).resources, 'AWS::EC2::NatGateway')).toHaveLength(1);
    });

    it('can be a VPC the user brings', () => {
      const brought = synthPipeline((stack) => ({
        vpc: new ec2.Vpc(stack, 'Shared', {
          maxAzs: 2,
          natGateways: 1,
          subnetConfiguration: [
            { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
            { name: 'app', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
            { name: 'data', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
          ],
        }),
      }));
      expect(ofType(brought.resources, 'AWS::EC2::VPC')).toHaveLength(1);
      expect(ofType(brought.resources, 'AWS::EC2::FlowLog')).toHaveLength(0);
    });
  });
});
