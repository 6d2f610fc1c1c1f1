// One way to build every Lambda of the pipeline: Node 24 on ARM64, bundled by the local esbuild
// (no Docker) into an ES module with source maps, in the private subnets, with its own log group.
import { existsSync } from 'node:fs';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { PIPELINE } from '../lambdas/runtime/settings.ts';

/** The repository root: `lambdas/`, `migrations/` and `package-lock.json` live here. */
export const PROJECT_ROOT = path.resolve(import.meta.dirname, '..');

/** Where the migrate function finds the SQL files copied into its asset (see `copyMigrations`). */
export const LAMBDA_MIGRATIONS_DIR = '/var/task/migrations';

/**
 * The Amazon CA bundle shipped in the managed Node.js runtimes. From Node.js 20 on, Lambda no longer
 * loads it by default ("CA certificate loading", Lambda developer guide, Building with Node.js):
 * without NODE_EXTRA_CA_CERTS pointing here, `verify-full` against RDS fails with
 * "unable to get local issuer certificate". It only helps a client that does not pass its own `ca`.
 */
export const LAMBDA_CA_BUNDLE = '/var/runtime/ca-cert.pem';

export type PipelineHandler = 'charge' | 'reconcile' | 'migrate' | 'ops' | 'stripe-events';
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
  readonly metricsNamespace: string;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
  /** Copy the repository's `migrations/` folder into the asset (the migrate function). */
  readonly copyMigrations?: boolean;
  /** Retries of a failed asynchronous invocation (scheduled functions). @default Lambda's default (2) */
  readonly asyncRetryAttempts?: number;
  /** Oldest asynchronous event still worth running (scheduled functions). @default Lambda's default (6 h) */
  readonly asyncMaxEventAge?: cdk.Duration;
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
      cdk.Validations.of(this.role).acknowledge(
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
  }
}

function pipelineFunctionProps(scope: Construct, id: string, props: PipelineFunctionProps): nodejs.NodejsFunctionProps {
  const entry = handlerEntry(props.handler);
  // Unit tests skip bundling (context aws:cdk:bundling-stacks = []). They must synthesize even before
  // a handler exists, so only then the code is a stub; a real synth always bundles the real file.
  const bundlingSkipped = !cdk.Stack.of(scope).bundlingRequired;
  const code =
    bundlingSkipped && !existsSync(entry)
      ? lambda.Code.fromInline(`// ${path.relative(PROJECT_ROOT, entry)}: bundling skipped`)
      : undefined;

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
    vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
    securityGroups: [props.securityGroup],
    logGroup,
    retryAttempts: props.asyncRetryAttempts,
    maxEventAge: props.asyncMaxEventAge,
    environment: {
      NODE_OPTIONS: '--enable-source-maps',
      POWERTOOLS_SERVICE_NAME: PIPELINE.serviceName,
      POWERTOOLS_METRICS_NAMESPACE: props.metricsNamespace,
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
      commandHooks: props.copyMigrations ? copyMigrationsHooks : undefined,
    },
  };
}

const copyMigrationsHooks: nodejs.ICommandHooks = {
  beforeBundling: () => [],
  beforeInstall: () => [],
  // inputDir is the project root for local bundling; the function reads MIGRATIONS_DIR.
  afterBundling: (inputDir: string, outputDir: string) => [
    `cp -R "${path.join(inputDir, 'migrations')}" "${path.join(outputDir, 'migrations')}"`,
  ],
};
