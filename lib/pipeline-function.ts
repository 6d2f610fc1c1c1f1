// One way to build every Lambda of the pipeline: Node 24 on ARM64, bundled by the local esbuild
// (no Docker) into an ES module with source maps, in the private subnets, with its own log group.
// Installed from the npm package, the same bundles come pre-built inside it (lambda-assets/, made by
// scripts/prebundle-lambdas.ts at `npm pack`): the consumer needs neither these sources nor esbuild.
import { existsSync } from 'node:fs';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import type { PipelineMetrics } from './observability.ts';
import { designFinding } from './nag.ts';

/** The repository root: `lambdas/`, `migrations/` and `package-lock.json` live here. */
export const PROJECT_ROOT = path.resolve(import.meta.dirname, '..');

/** Where the migrate function finds the SQL files copied into its asset (see `copyMigrations`). */
export const LAMBDA_MIGRATIONS_DIR = '/var/task/migrations';

/**
 * The Amazon RDS CA bundle the repository ships (lambdas/runtime/rds-ca/, see its README for where it
 * came from), copied into every function's asset and passed to `pg` as `ssl.ca` (DB_SSL_CA_FILE).
 * The runtime's own /var/runtime/ca-cert.pem is not relied on: reports against the Lambda base
 * images say it lacks the rds-ca-rsa2048-g1 generation, which would fail the first deploy's migration.
 */
export const RDS_CA_BUNDLE_SOURCE = 'lambdas/runtime/rds-ca/global-bundle.pem';
export const LAMBDA_RDS_CA_BUNDLE = '/var/task/rds-ca/global-bundle.pem';

/**
 * Pre-built bundles, one folder per handler, beside the compiled construct in the npm package
 * (dist/lambda-assets/<handler>/index.mjs). Absent in the repository: there the sources are bundled.
 */
const PREBUILT_ASSETS_DIR = path.resolve(import.meta.dirname, '..', 'lambda-assets');

/**
 * The RDS CA bundle as a file on this machine: the repository's, or in the npm package the copy
 * inside the pre-built bundles. For code built elsewhere that must carry it (OutcomeConsumer `code`).
 */
export const RDS_CA_BUNDLE_FILE = existsSync(path.join(PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE))
  ? path.join(PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE)
  : path.join(PREBUILT_ASSETS_DIR, 'charge', path.relative('/var/task', LAMBDA_RDS_CA_BUNDLE));

/** A pre-built bundle folder of the npm package (dist/lambda-assets/<name>), or undefined in the repository. */
export function prebuiltAssetDir(name: string): string | undefined {
  const dir = path.join(PREBUILT_ASSETS_DIR, name);
  return existsSync(path.join(dir, 'index.mjs')) ? dir : undefined;
}

/** Every handler folder under lambdas/ that becomes a function (and a pre-built bundle in the package). */
export const PIPELINE_HANDLERS = ['charge', 'reconcile', 'migrate', 'ops', 'stripe-events'] as const;
export type PipelineHandler = (typeof PIPELINE_HANDLERS)[number];
export type PipelineLogLevel = 'DEBUG' | 'INFO' | 'WARN' | 'ERROR';

export interface PipelineFunctionProps {
  /** The folder under `lambdas/` whose `handler.ts` exports `handler`. */
  readonly handler: PipelineHandler;
  readonly description: string;
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly timeout: cdk.Duration;
  readonly memorySize: number;
  /** Variables specific to this function; the common ones are added here. */
  readonly environment: Record<string, string>;
  readonly logLevel: PipelineLogLevel;
  /** The instance's metrics identity (pipelineMetrics): POWERTOOLS_METRICS_NAMESPACE and PIPELINE_NAME. */
  readonly metrics: PipelineMetrics;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets of the VPC */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** Reserved concurrency (also the maximum). @default - unreserved */
  readonly reservedConcurrentExecutions?: number;
  /** Copy the repository's `migrations/` folder into the asset (the migrate function). */
  readonly copyMigrations?: boolean;
  /** Retries of a failed asynchronous invocation (scheduled functions). @default Lambda's default (2) */
  readonly asyncRetryAttempts?: number;
  /** Oldest asynchronous event still worth running (scheduled functions). @default Lambda's default (6 h) */
  readonly asyncMaxEventAge?: cdk.Duration;
  /** Where an asynchronous invocation goes once its retries are spent. @default - nowhere (dropped) */
  readonly asyncOnFailure?: lambda.IDestination;
}

export function handlerEntry(handler: PipelineHandler): string {
  return path.join(PROJECT_ROOT, 'lambdas', handler, 'handler.ts');
}

// esbuild turns CommonJS dependencies (pg, parts of the AWS SDK) into ESM that still calls
// `require` for Node built-ins; give the module one.
const ESM_REQUIRE_BANNER =
  "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);";

export class PipelineFunction extends nodejs.NodejsFunction {
  constructor(scope: Construct, id: string, props: PipelineFunctionProps) {
    super(scope, id, pipelineFunctionProps(scope, id, props));
    if (this.role) {
      designFinding(this.role, {
        id: 'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaVPCAccessExecutionRole]',
        reason:
          'The AWS managed VPC access policy is the one Lambda documents for a function in a VPC, holding the network-interface actions (which only work on Resource *) and the CloudWatch Logs writes, and it is the only managed policy on the role.',
      });
    }
  }
}

/**
 * The function's own role. Created here rather than by Lambda so that it carries only the VPC access
 * policy: AWSLambdaBasicExecutionRole, which Lambda would add beside it, grants nothing the VPC access
 * policy does not (logs:CreateLogGroup/CreateLogStream/PutLogEvents on every log group).
 */
function functionRole(scope: Construct, id: string, description: string): iam.Role {
  return new iam.Role(scope, `${id}Role`, {
    description: `Execution role of: ${description}`.slice(0, 1000),
    assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'),
    managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('service-role/AWSLambdaVPCAccessExecutionRole')],
  });
}

/** The pre-built bundle of `handler` when running from the npm package, else undefined. */
function prebuiltCode(handler: PipelineHandler): lambda.Code | undefined {
  const dir = path.join(PREBUILT_ASSETS_DIR, handler);
  return existsSync(path.join(dir, 'index.mjs')) ? lambda.Code.fromAsset(dir) : undefined;
}

function pipelineFunctionProps(scope: Construct, id: string, props: PipelineFunctionProps): nodejs.NodejsFunctionProps {
  const entry = handlerEntry(props.handler);
  // Unit tests skip bundling (context aws:cdk:bundling-stacks = []). They must synthesize even before
  // a handler exists, so only then the code is a stub; a real synth always bundles the real file.
  const bundlingSkipped = !cdk.Stack.of(scope).bundlingRequired;
  const code =
    prebuiltCode(props.handler) ??
    (bundlingSkipped && !existsSync(entry)
      ? lambda.Code.fromInline(`// ${path.relative(PROJECT_ROOT, entry)}: bundling skipped`)
      : undefined);

  const logGroup = new logs.LogGroup(scope, `${id}Logs`, {
    retention: props.logRetention,
    removalPolicy: props.removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
  });

  return {
    description: props.description,
    entry,
    code,
    handler: 'index.handler',
    projectRoot: PROJECT_ROOT,
    depsLockFilePath: path.join(PROJECT_ROOT, 'package-lock.json'),
    runtime: lambda.Runtime.NODEJS_24_X,
    architecture: lambda.Architecture.ARM_64,
    memorySize: props.memorySize,
    timeout: props.timeout,
    vpc: props.vpc,
    vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
    securityGroups: [props.securityGroup],
    role: functionRole(scope, id, props.description),
    reservedConcurrentExecutions: props.reservedConcurrentExecutions,
    logGroup,
    retryAttempts: props.asyncRetryAttempts,
    maxEventAge: props.asyncMaxEventAge,
    onFailure: props.asyncOnFailure,
    environment: {
      NODE_OPTIONS: '--enable-source-maps',
      POWERTOOLS_SERVICE_NAME: PIPELINE.serviceName,
      POWERTOOLS_METRICS_NAMESPACE: props.metrics.namespace,
      PIPELINE_NAME: props.metrics.dimensionsMap.pipeline ?? '',
      DB_SSL_CA_FILE: LAMBDA_RDS_CA_BUNDLE,
      POWERTOOLS_LOG_LEVEL: props.logLevel,
      ...props.environment,
    },
    bundling: {
      format: nodejs.OutputFormat.ESM,
      target: 'node24',
      mainFields: ['module', 'main'],
      banner: ESM_REQUIRE_BANNER,
      minify: true,
      sourceMap: true,
      sourceMapMode: nodejs.SourceMapMode.DEFAULT,
      sourcesContent: false,
      // Bundle the AWS SDK too (pinned by package-lock, as tested) instead of the runtime's copy;
      // pg-native is an optional native add-on pg only loads when asked to.
      externalModules: ['pg-native'],
      logLevel: nodejs.LogLevel.WARNING,
      commandHooks: copyFilesHooks(props.copyMigrations ?? false),
    },
  };
}

/** Files the bundle needs beside index.mjs: the RDS CA bundle (every function), the SQL (migrate). */
function copyFilesHooks(copyMigrations: boolean): nodejs.ICommandHooks {
  return {
    beforeBundling: () => [],
    beforeInstall: () => [],
    // inputDir is the project root for local bundling; the functions read DB_SSL_CA_FILE and MIGRATIONS_DIR.
    afterBundling: (inputDir: string, outputDir: string) => [
      `mkdir -p "${path.join(outputDir, path.dirname(path.relative('/var/task', LAMBDA_RDS_CA_BUNDLE)))}"`,
      `cp "${path.join(inputDir, RDS_CA_BUNDLE_SOURCE)}" "${path.join(outputDir, path.relative('/var/task', LAMBDA_RDS_CA_BUNDLE))}"`,
      ...(copyMigrations ? [`cp -R "${path.join(inputDir, 'migrations')}" "${path.join(outputDir, 'migrations')}"`] : []),
    ],
  };
}
