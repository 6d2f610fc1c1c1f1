// OutcomeConsumer: one downstream consumer of the pipeline's outcome events, as a team instantiates
// it per consumer (lambdas/consumers/kit/ does the deduplication, ordering and policy):
//
//   pipeline bus ──rule (source + detail-types)──▶ SQS queue ──▶ consumer λ ──▶ its effect (e-mail, …)
//                         │ undeliverable            │ DLQ           │
//                         └──────────────▶ DLQ ◀─────┘               └──▶ PostgreSQL: outcome_consumer.*, its own schema, as its own role
//   alarms (CONSUMER_ALARM_CATALOG): DLQ, queue age, function errors, poison, abandoned, failed
//
// addReceiptNotifier() wires the first consumer, the receipt notifier, onto a ChargePipelineStack;
// bin/app.ts does so when asked (-c receiptNotifier=true).
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as cw from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { CONSUMER_METRICS } from '../lambdas/consumers/kit/metrics.ts';
import { isPolicy, type ConsumerPolicy } from '../lambdas/consumers/kit/types.ts';
import { DEFAULT_RECEIPTS_POLICY, RECEIPT_DETAIL_TYPES, RECEIPTS_DATABASE_ROLE, RECEIPTS_SCHEMAS } from '../lambdas/consumers/receipts/contract.ts';
import { PIPELINE, SQL_IDENTIFIER } from '../lambdas/runtime/settings.ts';
import { CONSUMER_ALARM_CATALOG, CONSUMER_METRICS_NAMESPACE, type ConsumerAlarmName } from './alarm-catalog.ts';
import type { ChargePipeline } from './charge-pipeline.ts';
import type { ConsumerDatabaseLogin } from './charge-pipeline-props.ts';
import { DeploymentSettingsError } from './config.ts';
import { existsSync } from 'node:fs';
import { LAMBDA_RDS_CA_BUNDLE, PROJECT_ROOT, prebuiltAssetDir, RDS_CA_BUNDLE_FILE, type PipelineLogLevel } from './pipeline-function.ts';
import { designFinding } from './nag.ts';
import { PipelineValidationError } from './validation.ts';

/** Where the consumer's migration folders are copied in its bundle (CONSUMER_MIGRATIONS_DIR). */
export const LAMBDA_CONSUMER_MIGRATIONS_DIR = '/var/task/consumer-migrations';
/** The receipt notifier's pre-built bundle in the npm package (dist/lambda-assets/receipts). */
export const RECEIPTS_ASSET = 'receipts';

export interface OutcomeConsumerProps {
  /** Names the consumer: inbox rows, idempotency keys, metric dimension, alarm names. `^[a-z][a-z0-9-]{0,62}$` */
  readonly consumerName: string;
  /** The failure this consumer accepts (docs/events.md#which-policy): passed to the function and shown in its metrics. */
  readonly policy: ConsumerPolicy;
  /** The pipeline's outcome-event bus. */
  readonly eventBus: events.IEventBus;
  /** @default PIPELINE.eventSource ('payments.charges') */
  readonly eventSource?: string;
  /** The detail-types the rule delivers (the consumer treats any other as poison). */
  readonly detailTypes: readonly string[];
  /**
   * The handler file (exports `handler`) of your project, bundled by the local esbuild from your
   * project's root (the folder of the lock file CDK finds from the working directory, or
   * `projectRoot`). One of `entry` or `code`.
   */
  readonly entry?: string;
  /**
   * The function's code, already bundled (no esbuild at synth): an asset folder with the handler
   * file (`handler`, default `index.handler`). It must carry the RDS CA bundle at
   * rds-ca/global-bundle.pem (copy RDS_CA_BUNDLE_FILE there) unless `environment` sets
   * DB_SSL_CA_FILE, and any `migrations` itself (CONSUMER_MIGRATIONS_DIR). One of `entry` or `code`.
   */
  readonly code?: lambda.Code;
  /** With `code`: the handler, file.export. @default 'index.handler' */
  readonly handler?: string;
  /** With `entry`: the root esbuild bundles from. @default - the folder of depsLockFilePath */
  readonly projectRoot?: string;
  /** With `entry`: the lock file. @default - the one CDK finds from the working directory up (your app's) */
  readonly depsLockFilePath?: string;
  /**
   * Migration folders bundled with the function, by name (the function applies them on start; kit
   * first). @default {} (the consumer migrates some other way)
   */
  readonly migrations?: Readonly<Record<string, string>>;
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  /**
   * The consumer's own login (JSON with username, password, host, port, dbname) on the database it
   * keeps its inbox in, which it alone reads: on the pipeline's database the secret of
   * `pipeline.addConsumerDatabaseLogin()` (a role that owns only its schemas), never the owner's; on
   * a database of the team's own, that database's secret. The function may read no other.
   */
  readonly databaseSecret: secretsmanager.ISecret;
  /** More variables for the function (the consumer's own settings). @default {} */
  readonly environment?: Readonly<Record<string, string>>;
  /** @default Duration.seconds(30) */
  readonly timeout?: cdk.Duration;
  /** Concurrent invocations (event source MaximumConcurrency, 2-1000). @default 2 */
  readonly maxConcurrency?: number;
  /** @default 10 */
  readonly batchSize?: number;
  /** Receives before a record that could not be recorded goes to the DLQ. @default 5 */
  readonly maxReceiveCount?: number;
  /** Where the alarms go. @default - alarms without actions (visible on the console only) */
  readonly alarmTopic?: sns.ITopic;
  /**
   * The pipeline whose events it consumes (`pipeline.pipelineName`): the `pipeline` dimension of its
   * metrics (PIPELINE_NAME) and the start of its alarm names, so that consumers of one name in two
   * pipelines of one account and region never share a metric or an alarm name.
   * @default - a name unique to this construct instance (its stack name and construct path, with a hash)
   */
  readonly pipelineName?: string;
  /** @default `${pipelineName}-${consumerName}-` */
  readonly alarmNamePrefix?: string;
  /** ConsumerOldestEventTooOld fires above this. @default Duration.minutes(15) */
  readonly oldestEventAgeAlarmThreshold?: cdk.Duration;
  /** @default CONSUMER_METRICS_NAMESPACE ('OutcomeConsumers') */
  readonly metricsNamespace?: string;
  /** @default 'INFO' */
  readonly logLevel?: PipelineLogLevel;
  /** @default RetentionDays.THREE_MONTHS */
  readonly logRetention?: logs.RetentionDays;
  /** @default RemovalPolicy.RETAIN for the log group */
  readonly removalPolicy?: cdk.RemovalPolicy;
}

export interface ConsumerAlarm {
  readonly name: ConsumerAlarmName;
  readonly meaning: string;
  readonly alarm: cw.Alarm;
}

const NAME = /^[a-z][a-z0-9-]{0,62}$/;
const PIPELINE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

/**
 * Where esbuild bundles an `entry` from: what the caller says; this repository for a handler of its
 * own (its lock file pins the kit's dependencies); else CDK's own search from the working directory
 * (the consumer's project, whose lock file pins its dependencies). Never the installed package's
 * folder, which has no lock file and holds no sources.
 */
function bundlingRoot(entry: string, projectRoot?: string, depsLockFilePath?: string): Pick<nodejs.NodejsFunctionProps, 'projectRoot' | 'depsLockFilePath'> {
  if (projectRoot || depsLockFilePath) return { ...(projectRoot ? { projectRoot } : {}), ...(depsLockFilePath ? { depsLockFilePath } : {}) };
  const lock = path.join(PROJECT_ROOT, 'package-lock.json');
  const inRepository = !path.relative(PROJECT_ROOT, path.resolve(entry)).startsWith('..') && existsSync(lock);
  return inRepository ? { projectRoot: PROJECT_ROOT, depsLockFilePath: lock } : {};
}

export class OutcomeConsumer extends Construct {
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;
  readonly rule: events.Rule;
  readonly function: lambda.Function;
  readonly eventSourceMapping: lambda.EventSourceMapping;
  readonly alarms: readonly ConsumerAlarm[];
  readonly consumerName: string;
  readonly policy: ConsumerPolicy;
  readonly metricsNamespace: string;
  /** The `pipeline` dimension of its metrics and the start of its alarm names. */
  readonly pipelineName: string;

  constructor(scope: Construct, id: string, props: OutcomeConsumerProps) {
    super(scope, id);
    const timeout = props.timeout ?? cdk.Duration.seconds(30);
    const maxConcurrency = props.maxConcurrency ?? 2;
    const batchSize = props.batchSize ?? 10;
    const maxReceiveCount = props.maxReceiveCount ?? 5;
    const problems: string[] = [];
    if (!NAME.test(props.consumerName)) problems.push(`consumerName must match ${NAME}, got '${props.consumerName}'`);
    if (!isPolicy(props.policy)) problems.push(`policy must be idempotent, at-least-once or at-most-once, got '${String(props.policy)}'`);
    if (props.detailTypes.length === 0) problems.push('detailTypes must name at least one detail-type');
    if ((props.entry === undefined) === (props.code === undefined)) problems.push('give exactly one of entry (a handler file esbuild bundles from your project) and code (a bundle already built)');
    if (props.code && (props.projectRoot || props.depsLockFilePath)) problems.push('projectRoot and depsLockFilePath apply to entry, not to code');
    if (props.entry && props.handler) problems.push('handler applies to code; with entry the file exports `handler`');
    if (!Number.isInteger(maxConcurrency) || maxConcurrency < 2 || maxConcurrency > 1000) problems.push(`maxConcurrency must be an integer from 2 to 1000, got ${maxConcurrency}`);
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10) problems.push(`batchSize must be an integer from 1 to 10, got ${batchSize}`);
    if (!Number.isInteger(maxReceiveCount) || maxReceiveCount < 1 || maxReceiveCount > 1000) problems.push(`maxReceiveCount must be an integer from 1 to 1000, got ${maxReceiveCount}`);
    if (!cdk.Token.isUnresolved(timeout.toSeconds()) && (timeout.toSeconds() < 5 || timeout.toSeconds() > 900)) problems.push(`timeout must be 5 s to 15 min, got ${timeout.toSeconds()} s`);
    if (props.pipelineName !== undefined && !cdk.Token.isUnresolved(props.pipelineName) && !PIPELINE_NAME.test(props.pipelineName)) {
      problems.push(`pipelineName must be 1-64 letters, digits, '-', '_' or '.', starting with a letter or digit, got '${props.pipelineName}'`);
    }
    if (problems.length > 0) throw new PipelineValidationError(`OutcomeConsumer props (${id})`, problems, this);

    this.consumerName = props.consumerName;
    this.policy = props.policy;
    this.metricsNamespace = props.metricsNamespace ?? CONSUMER_METRICS_NAMESPACE;
    this.pipelineName = props.pipelineName ?? cdk.Names.uniqueResourceName(this, { maxLength: 64, separator: '-' });
    const removalPolicy = props.removalPolicy ?? cdk.RemovalPolicy.RETAIN;

    // The lease outlasts one invocation; the visibility timeout outlasts the lease, so the delivery
    // after a crash finds the lease expired (kit/consumer.ts, leaseMs).
    const leaseSeconds = timeout.toSeconds() + 30;
    const visibilityTimeout = cdk.Duration.seconds(Math.max(6 * timeout.toSeconds(), leaseSeconds + 30));

    // One DLQ for both: events EventBridge could not deliver, and messages the consumer could not record.
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: cdk.Duration.days(14),
    });
    this.queue = new sqs.Queue(this, 'Queue', {
      // SQS-managed SSE: EventBridge cannot send to a queue encrypted with the AWS managed KMS key.
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: cdk.Duration.days(4),
      visibilityTimeout,
      deadLetterQueue: { queue: this.deadLetterQueue, maxReceiveCount },
    });
    this.rule = new events.Rule(this, 'Rule', {
      eventBus: props.eventBus,
      description: `Outcome consumer ${props.consumerName} (${props.policy}): ${props.detailTypes.join(', ')}`,
      eventPattern: { source: [props.eventSource ?? PIPELINE.eventSource], detailType: [...props.detailTypes] },
      targets: [
        new eventTargets.SqsQueue(this.queue, {
          deadLetterQueue: this.deadLetterQueue,
          retryAttempts: 185,
          maxEventAge: cdk.Duration.hours(24),
        }),
      ],
    });

    const migrations = props.migrations ?? {};
    const logGroup = new logs.LogGroup(this, 'FunctionLogs', {
      retention: props.logRetention ?? logs.RetentionDays.THREE_MONTHS,
      removalPolicy: removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    });
    const functionProps = {
      description: `Outcome consumer ${props.consumerName} (policy ${props.policy})`,
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      timeout,
      vpc: props.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [props.securityGroup],
      logGroup,
      environment: {
        NODE_OPTIONS: '--enable-source-maps',
        DB_SECRET_ARN: props.databaseSecret.secretArn,
        // verify-full against the RDS CA bundle copied into the asset, as the pipeline's functions do.
        DB_SSL: 'verify-full',
        DB_SSL_CA_FILE: LAMBDA_RDS_CA_BUNDLE,
        DB_POOL_MAX: '2',
        POWERTOOLS_SERVICE_NAME: props.consumerName,
        POWERTOOLS_METRICS_NAMESPACE: this.metricsNamespace,
        PIPELINE_NAME: this.pipelineName,
        POWERTOOLS_LOG_LEVEL: props.logLevel ?? 'INFO',
        CONSUMER_LEASE_MS: String(leaseSeconds * 1000),
        ...(Object.keys(migrations).length > 0 ? { CONSUMER_MIGRATIONS_DIR: LAMBDA_CONSUMER_MIGRATIONS_DIR } : { CONSUMER_MIGRATE_ON_START: 'false' }),
        ...props.environment,
      },
    } satisfies Partial<lambda.FunctionProps>;
    this.function = props.code
      ? new lambda.Function(this, 'Function', { ...functionProps, code: props.code, handler: props.handler ?? 'index.handler' })
      : new nodejs.NodejsFunction(this, 'Function', {
      ...functionProps,
      entry: props.entry,
      handler: 'handler',
      ...bundlingRoot(props.entry!, props.projectRoot, props.depsLockFilePath),
      bundling: {
        format: nodejs.OutputFormat.ESM,
        target: 'node24',
        mainFields: ['module', 'main'],
        banner: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
        minify: true,
        sourceMap: true,
        sourceMapMode: nodejs.SourceMapMode.DEFAULT,
        sourcesContent: false,
        externalModules: ['pg-native'],
        logLevel: nodejs.LogLevel.WARNING,
        commandHooks: {
          beforeBundling: () => [],
          beforeInstall: () => [],
          // The CA bundle by its absolute path: the project esbuild bundles from may be yours, not this package.
          afterBundling: (_inputDir: string, outputDir: string) => [
            `mkdir -p "${path.join(outputDir, path.dirname(path.relative('/var/task', LAMBDA_RDS_CA_BUNDLE)))}"`,
            `cp "${RDS_CA_BUNDLE_FILE}" "${path.join(outputDir, path.relative('/var/task', LAMBDA_RDS_CA_BUNDLE))}"`,
            ...Object.entries(migrations).map(
              ([name, dir]) => `mkdir -p "${path.join(outputDir, 'consumer-migrations')}" && cp -R "${dir}" "${path.join(outputDir, 'consumer-migrations', name)}"`,
            ),
          ],
        },
      },
    });
    props.databaseSecret.grantRead(this.function);
    if (this.function.role) {
      designFinding(this.function.role, 
        {
          id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
          reason: 'The AWS managed basic execution policy only lets the function write its own CloudWatch logs.',
        },
        {
          id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]',
          reason:
            'The AWS managed VPC access policy holds exactly the network-interface actions Lambda needs to run in the VPC, which only work on Resource *.',
        },
      );
    }

    this.function.addEventSource(
      new sources.SqsEventSource(this.queue, {
        batchSize,
        // The kit acknowledges what it recorded and reports what must be delivered again.
        reportBatchItemFailures: true,
        maxConcurrency,
      }),
    );
    const mapping = this.function.node.children.find((c): c is lambda.EventSourceMapping => c instanceof lambda.EventSourceMapping);
    if (!mapping) throw new Error('OutcomeConsumer: SqsEventSource did not create an event source mapping');
    this.eventSourceMapping = mapping;

    this.alarms = this.createAlarms(props);
  }

  /** A metric the consumer publishes (EMF; dimensions service = consumer name, consumer, policy, pipeline). */
  metric(metricName: (typeof CONSUMER_METRICS)[keyof typeof CONSUMER_METRICS], props: cw.MetricOptions = {}): cw.Metric {
    return new cw.Metric({
      namespace: this.metricsNamespace,
      metricName,
      dimensionsMap: { service: this.consumerName, consumer: this.consumerName, policy: this.policy, pipeline: this.pipelineName },
      period: cdk.Duration.minutes(5),
      statistic: cw.Stats.SUM,
      ...props,
    });
  }

  private createAlarms(props: OutcomeConsumerProps): ConsumerAlarm[] {
    const prefix = props.alarmNamePrefix ?? `${this.pipelineName}-${props.consumerName}-`;
    const five = cdk.Duration.minutes(5);
    const metrics: Record<ConsumerAlarmName, [cw.IMetric, number]> = {
      ConsumerDeadLetterQueueNotEmpty: [this.deadLetterQueue.metricApproximateNumberOfMessagesVisible({ statistic: cw.Stats.MAXIMUM, period: five }), 0],
      ConsumerOldestEventTooOld: [
        this.queue.metricApproximateAgeOfOldestMessage({ statistic: cw.Stats.MAXIMUM, period: five }),
        (props.oldestEventAgeAlarmThreshold ?? cdk.Duration.minutes(15)).toSeconds(),
      ],
      ConsumerFunctionErrors: [this.function.metricErrors({ statistic: cw.Stats.SUM, period: five }), 0],
      ConsumerPoisonEvents: [this.metric(CONSUMER_METRICS.poison), 0],
      ConsumerEffectsAbandoned: [this.metric(CONSUMER_METRICS.abandoned), 0],
      ConsumerEffectsFailed: [this.metric(CONSUMER_METRICS.failed), 0],
    };
    const action = props.alarmTopic ? new cwActions.SnsAction(props.alarmTopic) : undefined;
    return CONSUMER_ALARM_CATALOG.map(({ name, meaning }) => {
      const [metric, threshold] = metrics[name];
      const alarm = new cw.Alarm(this, name, {
        alarmName: `${prefix}${name}`,
        alarmDescription: `${props.consumerName} (${props.policy}): ${meaning}`,
        metric,
        threshold,
        comparisonOperator: cw.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cw.TreatMissingData.NOT_BREACHING,
      });
      if (action) {
        alarm.addAlarmAction(action);
        alarm.addOkAction(action);
      }
      return { name, meaning, alarm };
    });
  }
}

// ── The receipt notifier on the default stack ─────────────────────────────────────────────────────

export interface ReceiptNotifierSettings {
  readonly policy: ConsumerPolicy;
  /** EMAIL_API_BASE, e.g. https://api.resend.com */
  readonly emailApiBase: string;
  /** An existing secret holding the e-mail API key; default: a new empty one an operator fills. */
  readonly emailSecretArn?: string;
  /** Whether the provider deduplicates on Idempotency-Key (required for policy idempotent). */
  readonly emailIdempotency: boolean;
  readonly from?: string;
  /**
   * Its database role (roles are per server: a second pipeline on the same server, existingDatabase,
   * needs another name, or each migrate run would be refused the other's role). A lowercase identifier.
   * @default RECEIPTS_DATABASE_ROLE ('receipt_notifier')
   */
  readonly databaseRole?: string;
}

/**
 * `-c receiptNotifier=true -c receiptsEmailApiBase=https://api.resend.com [-c receiptsPolicy=…]
 * [-c receiptsEmailSecretArn=…] [-c receiptsEmailIdempotency=true] [-c receiptsFrom=…]
 * [-c receiptsDatabaseRole=…]`; null when
 * not asked for. Problems are reported all at once, as settingsFromContext does.
 */
export function receiptNotifierFromContext(tryGetContext: (key: string) => unknown): ReceiptNotifierSettings | null {
  const str = (key: string) => {
    const v = tryGetContext(key);
    return v === undefined || v === null || v === '' ? undefined : String(v);
  };
  const flag = (key: string) => {
    const v = str(key);
    return v === undefined ? undefined : v === 'true' ? true : v === 'false' ? false : (problems.push(`${key} must be true or false, got '${v}'`), undefined);
  };
  const problems: string[] = [];
  if (!flag('receiptNotifier')) {
    if (problems.length > 0) throw new DeploymentSettingsError(problems);
    return null;
  }
  const policy = str('receiptsPolicy') ?? DEFAULT_RECEIPTS_POLICY;
  if (!isPolicy(policy)) problems.push(`receiptsPolicy must be idempotent, at-least-once or at-most-once, got '${policy}'`);
  const emailApiBase = str('receiptsEmailApiBase');
  if (!emailApiBase || !/^https:\/\/\S+$/.test(emailApiBase)) problems.push(`receiptsEmailApiBase must be the e-mail API's https URL (e.g. https://api.resend.com), got '${emailApiBase ?? ''}'`);
  const emailSecretArn = str('receiptsEmailSecretArn');
  if (emailSecretArn && !/^arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[A-Za-z0-9/_+=.@-]+-[A-Za-z0-9]{6}$/.test(emailSecretArn)) {
    problems.push(`receiptsEmailSecretArn must be a complete Secrets Manager secret ARN, got '${emailSecretArn}'`);
  }
  const emailIdempotency = flag('receiptsEmailIdempotency') ?? false;
  if (policy === 'idempotent' && !emailIdempotency) problems.push('receiptsPolicy=idempotent needs receiptsEmailIdempotency=true (a provider that deduplicates on keys)');
  const databaseRole = str('receiptsDatabaseRole');
  if (databaseRole !== undefined && !SQL_IDENTIFIER.test(databaseRole)) problems.push(`receiptsDatabaseRole must be a lowercase identifier (${SQL_IDENTIFIER}), got '${databaseRole}'`);
  if (problems.length > 0) throw new DeploymentSettingsError(problems);
  const from = str('receiptsFrom');
  return {
    policy: policy as ConsumerPolicy,
    emailApiBase: emailApiBase!,
    emailIdempotency,
    ...(emailSecretArn ? { emailSecretArn } : {}),
    ...(from ? { from } : {}),
    ...(databaseRole ? { databaseRole } : {}),
  };
}

export interface ReceiptNotifier {
  readonly consumer: OutcomeConsumer;
  readonly emailSecret: secretsmanager.ISecret;
  /** Its own role on the pipeline's database (settings.databaseRole, RECEIPTS_DATABASE_ROLE by default), owning RECEIPTS_SCHEMAS only. */
  readonly databaseLogin: ConsumerDatabaseLogin;
}

/**
 * The receipt notifier as an OutcomeConsumer of this pipeline (its bus, VPC, database). It logs in
 * as its own role, which the pipeline's migrate function creates: an e-mail sender never holds the
 * owner's credentials, nor any that reach payment_operations or the outbox (docs/decisions.md).
 */
export function addReceiptNotifier(scope: Construct, pipeline: ChargePipeline, settings: ReceiptNotifierSettings): ReceiptNotifier {
  const emailSecret = settings.emailSecretArn
    ? secretsmanager.Secret.fromSecretCompleteArn(scope, 'ReceiptsEmailSecret', settings.emailSecretArn)
    : new secretsmanager.Secret(scope, 'ReceiptsEmailSecret', {
        description: 'E-mail API key of the receipt notifier: put the key as the SecretString (or JSON {"apiKey": "..."})',
        // Created empty, as the Stripe secret is: the notifier refuses to start ("the e-mail API key
        // secret is empty") and every event waits on its queue until an operator puts the key.
        secretObjectValue: { apiKey: cdk.SecretValue.unsafePlainText('') },
        removalPolicy: cdk.RemovalPolicy.RETAIN,
      });
  if (!settings.emailSecretArn) {
    designFinding(emailSecret, {
      id: 'AwsSolutions-SMG4',
      reason: 'An e-mail API key is rolled in the provider dashboard and then put here by an operator, so Secrets Manager has no rotation function to run.',
    });
  }
  const receipts = path.join(PROJECT_ROOT, 'lambdas', 'consumers');
  // From the npm package: the bundle built at `npm pack` (scripts/build-package.ts), with its CA
  // bundle and both migration folders inside; in the repository: bundled from the sources.
  const prebuilt = prebuiltAssetDir(RECEIPTS_ASSET);
  const code = prebuilt
    ? { code: lambda.Code.fromAsset(prebuilt), environment: { CONSUMER_MIGRATIONS_DIR: LAMBDA_CONSUMER_MIGRATIONS_DIR, CONSUMER_MIGRATE_ON_START: 'true' } }
    : {
        entry: path.join(receipts, 'receipts', 'handler.ts'),
        migrations: { kit: path.join(receipts, 'kit', 'migrations'), receipts: path.join(receipts, 'receipts', 'migrations') },
      };
  const databaseLogin = pipeline.addConsumerDatabaseLogin('ReceiptNotifier', { role: settings.databaseRole ?? RECEIPTS_DATABASE_ROLE, schemas: RECEIPTS_SCHEMAS });
  const consumer = new OutcomeConsumer(scope, 'ReceiptNotifier', {
    consumerName: 'receipts',
    policy: settings.policy,
    eventBus: pipeline.eventBus,
    detailTypes: RECEIPT_DETAIL_TYPES,
    ...(prebuilt ? { code: code.code } : { entry: code.entry, migrations: code.migrations }),
    vpc: pipeline.vpc,
    securityGroup: pipeline.functionsSecurityGroup,
    databaseSecret: databaseLogin.secret,
    environment: {
      ...(prebuilt ? code.environment : {}),
      ...databaseLogin.environment,
      RECEIPTS_POLICY: settings.policy,
      EMAIL_API_BASE: settings.emailApiBase,
      EMAIL_API_KEY_SECRET_ARN: emailSecret.secretArn,
      EMAIL_PROVIDER_IDEMPOTENCY: String(settings.emailIdempotency),
      ...(settings.from ? { RECEIPTS_FROM: settings.from } : {}),
    },
    alarmTopic: pipeline.alarmTopic,
    // The pipeline instance's own namespace and name: two pipelines in one account never mix their consumers' metrics or alarm names.
    metricsNamespace: pipeline.metricsNamespace,
    pipelineName: pipeline.pipelineName,
  });
  emailSecret.grantRead(consumer.function);
  // Its role exists (and has its password) only once the migrations ran: first deploy and every later one.
  pipeline.migrationTrigger.executeBefore(consumer.function);
  return { consumer, emailSecret, databaseLogin };
}
