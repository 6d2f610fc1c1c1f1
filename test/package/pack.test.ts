// The construct as a package: `npm pack` (whose prepack step compiles lib/ and pre-bundles every
// function), installed into a fresh CDK app in a temporary folder outside this repository, used from
// plain JavaScript (examples/embedding/app.mjs: two pipelines in one stack, cdk-nag on), synthesized
// with `node app.mjs`. Then: no duplicate physical names, every alarm on its own instance's metrics,
// cfn-lint without errors (reported as skipped where cfn-lint is not installed), cdk-nag clean.
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

async function synth(app: string, out: string): Promise<{ code: number; output: string }> {
  return run(process.execPath, [app], { cwd: appDir, env: { ...process.env, CDK_OUTDIR: out }, maxBuffer: 64 * 1024 * 1024 }).then(
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
  const result = await synth('app.mjs', outdir);
  synthOutput = result.output;
  if (result.code !== 0) throw new Error(`synth of the consumer app failed:\n${result.output}`);
  template = JSON.parse(readFileSync(path.join(outdir, 'Payments.template.json'), 'utf8'));
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

  it('is cdk-nag clean (and the check is live: an unacknowledged finding fails the synth)', async () => {
    const report = JSON.parse(readFileSync(path.join(outdir, 'validation-report.json'), 'utf8'));
    expect(report.pluginReports.filter((p: { conclusion: string }) => p.conclusion !== 'success')).toEqual([]);
    const careless = readFileSync(path.join(appDir, 'app.mjs'), 'utf8').replace(
      "const app = new cdk.App();\nnew PaymentsStack(app, 'Payments');",
      "const app = new cdk.App();\nconst stack = new PaymentsStack(app, 'Payments');\nnew iam.Role(stack, 'Admin', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com'), managedPolicies: [iam.ManagedPolicy.fromAwsManagedPolicyName('AdministratorAccess')] });",
    );
    expect(careless).toContain("'Admin'");
    writeFileSync(path.join(appDir, 'careless.mjs'), careless);
    const result = await synth('careless.mjs', path.join(appDir, 'cdk.out-careless'));
    expect(result.code).not.toBe(0);
    expect(result.output).toMatch(/AwsSolutions-IAM4\[Policy::arn:<AWS::Partition>:iam::aws:policy\/AdministratorAccess\]/);
  }, 60_000);

  it.skipIf(!CFN_LINT_VERSION)('passes cfn-lint without an error', () => {
    expect(cfnLintErrors(path.join(outdir, 'Payments.template.json')), CFN_LINT_VERSION!).toEqual([]);
    // cfn-lint is a Python process of its own: tens of seconds on a loaded 2-core machine (seen: > 60 s).
  }, 180_000);
});
