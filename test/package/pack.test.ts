// The construct as a package: `npm pack` (whose prepack step compiles lib/ and pre-bundles every
// function, the receipt notifier's too, and writes the SBOM of what the bundles hold), installed into
// a fresh CDK app in a temporary folder outside this repository, used from plain JavaScript, and
// synthesized with `node app.mjs`:
//   - examples/embedding/app.mjs: two pipelines in one stack;
//   - examples/shared-database/app.mjs: two stacks — a VPC and a pipeline in one; in the other a
//     second pipeline on the first one's database (existingDatabase), the receipt notifier and an
//     outcome consumer of the app's own.
// Then: no duplicate physical names, every alarm on its own instance's metrics, distinct database
// roles and databases per pipeline, the resource policies, cfn-lint without errors (in CI a missing
// cfn-lint fails the test; elsewhere it is reported as skipped), cdk-nag clean with only the app's own
// acknowledgements.
//
// Installing: `npm install --offline --legacy-peer-deps <tarball>` installs the package itself (it
// has no dependencies: the Lambda code is bundled); its peer dependencies aws-cdk-lib and constructs,
// and cdk-nag for the app, are linked from this project's node_modules, so the test needs neither the
// registry nor a populated npm cache.
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PIPELINE } from '../../lambdas/runtime/settings.ts';
import { CFN_LINT_VERSION, cfnLintErrors } from '../support/cfn-lint.ts';
import { PIPELINE_HANDLERS, PROJECT_ROOT } from '../../lib/pipeline-function.ts';

const run = promisify(execFile);
const PACKAGE = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { name: string };
const work = mkdtempSync(path.join(os.tmpdir(), 'pack-test-'));
const appDir = path.join(work, 'consumer-app');
const outdir = path.join(appDir, 'cdk.out');
const installed = path.join(appDir, 'node_modules', PACKAGE.name);

interface Resource {
  Type: string;
  Properties?: Record<string, any>;
}
let template: { Resources: Record<string, Resource> };
let synthOutput: string;
const sharedDir = path.join(appDir, 'shared');
const sharedOut = path.join(appDir, 'cdk.out-shared');
let shared: { platform: { Resources: Record<string, Resource> }; marketplace: { Resources: Record<string, Resource> } };
let sharedOutput: string;
let careless: { code: number; output: string } | undefined;

async function synth(app: string, out: string, cwd = appDir): Promise<{ code: number; output: string }> {
  return run(process.execPath, [app], { cwd, env: { ...process.env, CDK_OUTDIR: out }, maxBuffer: 64 * 1024 * 1024 }).then(
    ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
    (error: { code: number; stdout: string; stderr: string }) => ({ code: error.code, output: error.stdout + error.stderr }),
  );
}

beforeAll(async () => {
  const npm = (args: string[], cwd: string) => run('npm', args, { cwd, env: { ...process.env, npm_config_update_notifier: 'false' }, maxBuffer: 64 * 1024 * 1024 });
  const { stdout } = await npm(['pack', '--pack-destination', work, '--json', '--silent'], PROJECT_ROOT);
  const [{ filename }] = JSON.parse(stdout.slice(stdout.indexOf('['))) as [{ filename: string }];
  mkdirSync(appDir);
  writeFileSync(path.join(appDir, 'package.json'), JSON.stringify({ name: 'consumer-app', version: '1.0.0', private: true, type: 'module' }));
  await npm(['install', '--offline', '--legacy-peer-deps', '--no-audit', '--no-fund', path.join(work, filename)], appDir);
  for (const peer of ['aws-cdk-lib', 'constructs', 'cdk-nag']) {
    symlinkSync(path.join(PROJECT_ROOT, 'node_modules', peer), path.join(appDir, 'node_modules', peer), 'dir');
  }
  cpSync(path.join(PROJECT_ROOT, 'examples', 'embedding', 'app.mjs'), path.join(appDir, 'app.mjs'));
  // The second app beside the first, resolving the same node_modules (a folder below it).
  cpSync(path.join(PROJECT_ROOT, 'examples', 'shared-database'), sharedDir, { recursive: true });
  // The first app with one unacknowledged finding more: its synth must fail (the check is live).
  writeFileSync(
    path.join(appDir, 'careless.mjs'),
    readFileSync(path.join(appDir, 'app.mjs'), 'utf8').replace(
      "const app = new cdk.App();\nnew PaymentsStack(app, 'Payments');",
      "const app = new cdk.App();\nconst stack = new PaymentsStack(app, 'Payments');\nnew iam.Role(stack, 'Admin', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'), managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('AdministratorAccess')] });",
    ),
  );
  const [result, sharedResult, carelessResult] = await Promise.all([
    synth('app.mjs', outdir),
    synth(path.join(sharedDir, 'app.mjs'), sharedOut, sharedDir),
    synth('careless.mjs', path.join(appDir, 'cdk.out-careless')),
  ]);
  careless = carelessResult;
  synthOutput = result.output;
  sharedOutput = sharedResult.output;
  if (result.code !== 0) throw new Error(`synth of the consumer app failed:\n${result.output}`);
  if (sharedResult.code !== 0) throw new Error(`synth of the two-stack app failed:\n${sharedResult.output}`);
  template = JSON.parse(readFileSync(path.join(outdir, 'Payments.template.json'), 'utf8'));
  shared = {
    platform: JSON.parse(readFileSync(path.join(sharedOut, 'Platform.template.json'), 'utf8')),
    marketplace: JSON.parse(readFileSync(path.join(sharedOut, 'Marketplace.template.json'), 'utf8')),
  };
}, 180_000);

afterAll(() => rmSync(work, { recursive: true, force: true }));

const ofType = (type: string) => Object.entries(template.Resources).filter(([, r]) => r.Type === type);

describe('the npm package', () => {
  it('is compiled JS + declarations with the bundles inside, and neither sources nor dependencies to install', () => {
    const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8'));
    expect(manifest.dependencies ?? {}).toEqual({});
    expect(Object.keys(manifest.peerDependencies).sort()).toEqual(['aws-cdk-lib', 'constructs']);
    expect(existsSync(path.join(installed, 'dist', 'lib', 'index.js'))).toBe(true);
    expect(readFileSync(path.join(installed, 'dist', 'lib', 'index.d.ts'), 'utf8')).toMatch(/from '\.\/charge-pipeline\.js'/);
    for (const handler of PIPELINE_HANDLERS) {
      expect(readdirSync(path.join(installed, 'dist', 'lambda-assets', handler))).toEqual(expect.arrayContaining(['index.mjs', 'rds-ca']));
    }
    expect(readdirSync(path.join(installed, 'dist', 'lambda-assets', 'migrate', 'migrations'))).toEqual(
      readdirSync(path.join(PROJECT_ROOT, 'migrations')).filter((f) => f.endsWith('.sql')).sort(),
    );
    // no TypeScript source of the functions, no esbuild anywhere in the app
    const files = readdirSync(installed, { recursive: true }) as string[];
    expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
    expect(existsSync(path.join(appDir, 'node_modules', 'esbuild'))).toBe(false);
    expect(synthOutput).not.toMatch(/Bundling asset/);
  });

  it('synthesizes two pipelines in one stack from plain JavaScript, using the pre-built bundles', () => {
    const functions = ofType('AWS::Lambda::Function').filter(([, f]) => f.Properties!.Environment?.Variables?.PIPELINE_NAME);
    expect(functions).toHaveLength(2 * PIPELINE_HANDLERS.length);
    expect(new Set(functions.map(([, f]) => f.Properties!.Environment.Variables.PIPELINE_NAME)).size).toBe(2);
    const bundled = readFileSync(path.join(installed, 'dist', 'lambda-assets', 'charge', 'index.mjs'));
    const staged = readdirSync(outdir).filter((d) => d.startsWith('asset.') && existsSync(path.join(outdir, d, 'index.mjs')));
    expect(staged.some((d) => readFileSync(path.join(outdir, d, 'index.mjs')).equals(bundled))).toBe(true);
  });

  it('has no physical name twice', () => {
    // the properties that name a resource in the account (a second one of the same name fails to create)
    const NAME = /^(Name|QueueName|AlarmName|DashboardName|TopicName|FunctionName|RoleName|LogGroupName|ScheduleName|ArchiveName|DBInstanceIdentifier|DBSubnetGroupName|GroupName|AliasName)$/;
    const seen = new Map<string, string>();
    for (const [id, r] of Object.entries(template.Resources)) {
      for (const [key, value] of Object.entries(r.Properties ?? {})) {
        if (!NAME.test(key) || typeof value !== 'string') continue;
        const name = `${r.Type} ${key}=${value}`;
        expect(seen.get(name), `${id} and ${seen.get(name)}: ${name}`).toBeUndefined();
        seen.set(name, id);
      }
    }
    expect(seen.size).toBeGreaterThan(10);
  });

  it('alarms of one pipeline never watch the other\'s metrics', () => {
    const alarms = ofType('AWS::CloudWatch::Alarm').map(([, a]) => a.Properties!);
    expect(alarms.length).toBeGreaterThanOrEqual(2 * 16);
    // every alarm on the functions' own metrics names its pipeline, and there are two pipelines
    const pipelineOf = (dimensions: { Name: string; Value: unknown }[] = []) => dimensions.find((d) => d.Name === 'pipeline')?.Value;
    const own: unknown[] = [];
    for (const a of alarms) {
      if (a.Namespace === PIPELINE.metricsNamespace) own.push(pipelineOf(a.Dimensions));
      for (const m of a.Metrics ?? []) if (m.MetricStat?.Metric.Namespace === PIPELINE.metricsNamespace) own.push(pipelineOf(m.MetricStat.Metric.Dimensions));
    }
    expect(own.length).toBeGreaterThan(0);
    expect(own.every((value) => typeof value === 'string')).toBe(true);
    expect(new Set(own).size).toBe(2);
    // and no two alarms watch the same metric with the same dimensions
    const signature = (a: Record<string, any>) => JSON.stringify([a.Namespace, a.MetricName, a.Dimensions, a.Metrics, a.Threshold, a.ComparisonOperator]);
    expect(new Set(alarms.map(signature)).size).toBe(alarms.length);
  });

  it('is cdk-nag clean (and the check is live: an unacknowledged finding fails the synth)', () => {
    const report = JSON.parse(readFileSync(path.join(outdir, 'validation-report.json'), 'utf8'));
    expect(report.pluginReports.filter((p: { conclusion: string }) => p.conclusion !== 'success')).toEqual([]);
    expect(readFileSync(path.join(appDir, 'careless.mjs'), 'utf8')).toContain("'Admin'");
    const result = careless!;
    expect(result.code).not.toBe(0);
    expect(result.output).toMatch(/AwsSolutions-IAM4\[Policy::arn:<AWS::Partition>:iam::aws:policy\/AdministratorAccess\]/);
  });

  it('passes cfn-lint without an error, all three templates (in CI a missing cfn-lint fails this test)', (context) => {
    if (!CFN_LINT_VERSION) {
      if (process.env.CI === 'true') throw new Error('cfn-lint is not installed, and CI=true: install it (pip install cfn-lint) — in CI this check may not be skipped');
      context.skip();
      return;
    }
    // One cfn-lint run over the three: it is a Python process of its own, tens of seconds on a loaded
    // 2-core machine (seen: > 60 s for one template).
    const files = [path.join(outdir, 'Payments.template.json'), path.join(sharedOut, 'Platform.template.json'), path.join(sharedOut, 'Marketplace.template.json')];
    expect(cfnLintErrors(files), CFN_LINT_VERSION).toEqual([]);
  }, 180_000);
});

describe('two stacks: a second pipeline on the first one’s database, the receipt notifier and a consumer of the app’s own', () => {
  const all = () => [...Object.entries(shared.platform.Resources), ...Object.entries(shared.marketplace.Resources)];
  const byType = (t: { Resources: Record<string, Resource> }, type: string) => Object.entries(t.Resources).filter(([, r]) => r.Type === type);
  const loginUsers = (t: { Resources: Record<string, Resource> }) =>
    byType(t, 'AWS::SecretsManager::Secret')
      .map(([, r]) => r.Properties?.GenerateSecretString?.SecretStringTemplate as string | undefined)
      .filter((template): template is string => template !== undefined && template.includes('username'))
      .map((template) => JSON.parse(template).username as string);

  it('synthesizes across the stacks: the ingress into the database’s group is in the second stack', () => {
    const ingress = byType(shared.marketplace, 'AWS::EC2::SecurityGroupIngress').filter(([, r]) => r.Properties!.Description === 'PostgreSQL from the charge pipeline functions');
    expect(ingress).toHaveLength(1);
    expect(JSON.stringify(ingress[0]![1].Properties!.GroupId)).toMatch(/Fn::ImportValue|Fn::GetStackOutput/);
    expect(JSON.stringify(shared.platform)).not.toMatch(/Fn::ImportValue|Fn::GetStackOutput/);
  });

  it('gives each pipeline its own database and roles: no login name twice on the server', () => {
    expect(loginUsers(shared.platform).sort()).toEqual(['charges', 'charges_app']);
    expect(loginUsers(shared.marketplace).sort()).toEqual(['marketplace_app', 'marketplace_ledger', 'marketplace_receipts']);
    const users = [...loginUsers(shared.platform), ...loginUsers(shared.marketplace)];
    expect(new Set(users).size).toBe(users.length);
    const dbNames = (t: { Resources: Record<string, Resource> }) =>
      new Set(byType(t, 'AWS::Lambda::Function').map(([, f]) => f.Properties!.Environment?.Variables?.DB_NAME).filter((n) => n !== undefined));
    expect([...dbNames(shared.marketplace)]).toEqual(['marketplace']);
    expect([...dbNames(shared.platform)]).toEqual([]); // the instance's own secret names its database: charges
    const [[, instance]] = byType(shared.platform, 'AWS::RDS::DBInstance') as [[string, Resource]];
    expect(instance.Properties).toMatchObject({ DBName: 'charges', MultiAZ: true });
  });

  it('has no physical name twice across both stacks', () => {
    const NAME = /^(Name|QueueName|AlarmName|DashboardName|TopicName|FunctionName|RoleName|LogGroupName|ScheduleName|ArchiveName|DBInstanceIdentifier|DBSubnetGroupName|GroupName|AliasName)$/;
    const seen = new Map<string, string>();
    for (const [id, r] of all()) {
      for (const [key, value] of Object.entries(r.Properties ?? {})) {
        // A name given as a string, or computed (Fn::Join, from the stack name): never a reference to another resource.
        if (!NAME.test(key) || !(typeof value === 'string' || (typeof value === 'object' && value !== null && 'Fn::Join' in value))) continue;
        const name = `${r.Type} ${key}=${JSON.stringify(value)}`;
        expect(seen.get(name), `${id} and ${seen.get(name)}: ${name}`).toBeUndefined();
        seen.set(name, id);
      }
    }
    expect(seen.size).toBeGreaterThan(20);
  });

  it('builds the receipt notifier and the app’s consumer from code that needs no bundling (the pre-built notifier in the package)', () => {
    expect(sharedOutput).not.toMatch(/Bundling asset/);
    const bundled = readFileSync(path.join(installed, 'dist', 'lambda-assets', 'receipts', 'index.mjs'));
    const staged = readdirSync(sharedOut).filter((d) => d.startsWith('asset.') && existsSync(path.join(sharedOut, d, 'index.mjs')));
    expect(staged.some((d) => readFileSync(path.join(sharedOut, d, 'index.mjs')).equals(bundled))).toBe(true);
    const receipts = staged.find((d) => readFileSync(path.join(sharedOut, d, 'index.mjs')).equals(bundled))!;
    expect(readdirSync(path.join(sharedOut, receipts, 'consumer-migrations')).sort()).toEqual(['kit', 'receipts']);
    expect(existsSync(path.join(sharedOut, receipts, 'rds-ca', 'global-bundle.pem'))).toBe(true);
    const consumers = byType(shared.marketplace, 'AWS::Lambda::Function').filter(([, f]) => ['receipts', 'ledger'].includes(f.Properties!.Environment?.Variables?.POWERTOOLS_SERVICE_NAME));
    expect(consumers).toHaveLength(2);
    const receiptsFn = consumers.find(([, f]) => f.Properties!.Environment.Variables.POWERTOOLS_SERVICE_NAME === 'receipts')![1];
    expect(receiptsFn.Properties!.Environment.Variables).toMatchObject({ CONSUMER_MIGRATIONS_DIR: '/var/task/consumer-migrations', CONSUMER_MIGRATE_ON_START: 'true' });
  });

  it('reserves the webhook and charge functions’ concurrency by default', () => {
    // The webhook function behind the anonymous Function URL (the Checkout pipeline): reserved concurrency.
    const urls = byType(shared.platform, 'AWS::Lambda::Url');
    expect(urls).toHaveLength(1);
    const webhookId = urls[0]![1].Properties!.TargetFunctionArn['Fn::GetAtt'][0] as string;
    expect(shared.platform.Resources[webhookId]!.Properties!.ReservedConcurrentExecutions).toBeGreaterThan(0);
    for (const t of [shared.platform, shared.marketplace]) {
      // The charge function: a reservation that holds its event source's maximum concurrency.
      const [[, mapping]] = byType(t, 'AWS::Lambda::EventSourceMapping').filter(([, m]) => JSON.stringify(m.Properties!.EventSourceArn).includes('Intake')) as [[string, Resource]];
      const max = mapping.Properties!.ScalingConfig.MaximumConcurrency as number;
      expect(max).toBeGreaterThan(0);
      const chargeId = (mapping.Properties!.FunctionName as { Ref: string }).Ref;
      expect(t.Resources[chargeId]!.Properties!.ReservedConcurrentExecutions).toBeGreaterThanOrEqual(max);
    }
  });

  it('keeps partner events the function could not take: an on-failure destination and its alarm (the Marketplace pipeline)', () => {
    const t = shared.marketplace;
    const [[, rule]] = byType(t, 'AWS::Events::Rule').filter(([, r]) => JSON.stringify(r.Properties!.EventPattern ?? {}).includes('aws.partner/stripe.com')) as [[string, Resource]];
    const fnId = rule.Properties!.Targets[0].Arn['Fn::GetAtt'][0] as string;
    expect(t.Resources[fnId]!.Properties!.ReservedConcurrentExecutions).toBeGreaterThan(0);
    const configs = byType(t, 'AWS::Lambda::EventInvokeConfig').filter(([, c]) => JSON.stringify(c.Properties!.FunctionName).includes(fnId));
    expect(configs).toHaveLength(1);
    const queueArn = configs[0]![1].Properties!.DestinationConfig.OnFailure.Destination;
    const queueId = queueArn['Fn::GetAtt'][0] as string;
    expect(t.Resources[queueId]!.Type).toBe('AWS::SQS::Queue');
    const alarms = byType(t, 'AWS::CloudWatch::Alarm').filter(([, a]) => JSON.stringify(a.Properties!.Dimensions ?? a.Properties!.Metrics ?? []).includes(queueId));
    expect(alarms.map(([, a]) => String(JSON.stringify(a.Properties!.AlarmName)))).toEqual([expect.stringContaining('PartnerEventsNotRecorded')]);
  });

  it('puts resource policies on the Stripe key, the webhook secret where there is one, the intake queue and the bus, in both stacks', () => {
    for (const t of [shared.platform, shared.marketplace]) {
      const secretPolicies = byType(t, 'AWS::SecretsManager::ResourcePolicy').map(([, r]) => JSON.stringify(r.Properties!.SecretId));
      const stripe = byType(t, 'AWS::SecretsManager::Secret').find(([id]) => id.includes('StripeSecret'))![0];
      // The webhook signing secret exists where Stripe's events come by webhook (the Checkout pipeline).
      const webhooks = byType(t, 'AWS::SecretsManager::Secret').filter(([id]) => id.includes('WebhookSecret')).map(([id]) => id);
      expect(webhooks).toHaveLength(t === shared.platform ? 1 : 0);
      expect(secretPolicies).toEqual(expect.arrayContaining([JSON.stringify({ Ref: stripe }), ...webhooks.map((id) => JSON.stringify({ Ref: id }))]));
      const intake = byType(t, 'AWS::SQS::Queue').find(([id, q]) => id.includes('IntakeQueue') && q.Properties!.RedrivePolicy)![0];
      const queuePolicy = byType(t, 'AWS::SQS::QueuePolicy').find(([, p]) => JSON.stringify(p.Properties!.Queues) === JSON.stringify([{ Ref: intake }]))!;
      expect(JSON.stringify(queuePolicy[1].Properties!.PolicyDocument)).toContain('sqs:SendMessage');
      expect(byType(t, 'AWS::Events::EventBusPolicy').length).toBeGreaterThan(0);
    }
  });

  it('is cdk-nag clean with only the app’s own acknowledgements', () => {
    const report = JSON.parse(readFileSync(path.join(sharedOut, 'validation-report.json'), 'utf8'));
    expect(report.pluginReports.filter((p: { conclusion: string }) => p.conclusion !== 'success')).toEqual([]);
    expect(readFileSync(path.join(sharedDir, 'app.mjs'), 'utf8')).toContain('acknowledgeChargePipelineFindings(app)');
  });
});

describe('what the package declares', () => {
  it('is publishable (not private, publishConfig) and lists what its bundles hold in an SBOM, with the versions installed here', () => {
    const manifest = JSON.parse(readFileSync(path.join(installed, 'package.json'), 'utf8'));
    expect(manifest.private).toBeUndefined();
    expect(manifest.publishConfig).toMatchObject({ access: 'public' });
    const sbom = JSON.parse(readFileSync(path.join(installed, 'dist', 'sbom.cdx.json'), 'utf8'));
    expect(sbom).toMatchObject({ bomFormat: 'CycloneDX', metadata: { component: { name: PACKAGE.name } } });
    const versions = new Map<string, string>(sbom.components.map((c: { name: string; version: string }) => [c.name, c.version]));
    for (const name of ['pg', 'stripe', '@smithy/signature-v4', '@aws-sdk/client-secrets-manager', '@aws-lambda-powertools/logger']) {
      const installedVersion = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'node_modules', name, 'package.json'), 'utf8')).version;
      expect(versions.get(name), name).toBe(installedVersion);
    }
    // Every package a bundle imports is declared in this project's package.json (and so pinned by its lock file).
    const own = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8'));
    expect(Object.keys(own.devDependencies)).toContain('@smithy/signature-v4');
  });
});
