// Builds what `npm pack` ships (the prepack step): the construct compiled to ES modules with
// declarations (dist/lib, and the settings it shares with the functions), and every function's
// bundle pre-built (dist/lambda-assets/<handler>/), so that a CDK app installing the package needs
// neither this repository's sources nor esbuild to synthesize.
//
// The bundles are made by synthesizing the very PipelineFunction the construct uses, from source, with
// bundling on, and copying its asset folders: the package carries exactly what `cdk synth` bundles
// here (same esbuild options, the RDS CA bundle, the migrations beside the migrate function).
import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { RECEIPT_DETAIL_TYPES } from '../lambdas/consumers/receipts/contract.ts';
import { pipelineMetrics } from '../lib/observability.ts';
import { OutcomeConsumer, RECEIPTS_ASSET } from '../lib/outcome-consumer.ts';
import { PIPELINE_HANDLERS, PipelineFunction, PROJECT_ROOT } from '../lib/pipeline-function.ts';

const DIST = path.join(PROJECT_ROOT, 'dist');
const ASSETS = path.join(DIST, 'lambda-assets');

function compile(): void {
  rmSync(DIST, { recursive: true, force: true });
  execFileSync(process.execPath, [path.join(PROJECT_ROOT, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', 'tsconfig.lib.json'], {
    cwd: PROJECT_ROOT,
    stdio: ['ignore', 2, 2],
  });
  // rewriteRelativeImportExtensions rewrites the .js files' imports; the declarations keep './x.ts',
  // which a consumer's TypeScript (without allowImportingTsExtensions) does not resolve.
  for (const entry of readdirSync(DIST, { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith('.d.ts')) continue;
    const file = path.join(entry.parentPath, entry.name);
    writeFileSync(file, readFileSync(file, 'utf8').replace(/(from\s+['"]\.{1,2}\/[^'"]+?)\.ts(['"])/g, '$1.js$2'));
  }
}

function bundle(): void {
  const outdir = mkdtempSync(path.join(os.tmpdir(), 'cdk.out-package-'));
  try {
    const app = new cdk.App({ outdir, context: { 'aws:cdk:enable-asset-metadata': true } });
    const stack = new cdk.Stack(app, 'PackageBundles');
    const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1 });
    const securityGroup = new ec2.SecurityGroup(stack, 'Sg', { vpc });
    const functions: { handler: string; fn: cdk.Resource }[] = PIPELINE_HANDLERS.map((handler) => ({
      handler,
      fn: new PipelineFunction(stack, handler, {
        handler,
        description: `package bundle: ${handler}`,
        vpc,
        securityGroup,
        timeout: cdk.Duration.minutes(1),
        memorySize: 256,
        environment: {},
        logLevel: 'INFO',
        metrics: pipelineMetrics('Bundle', 'bundle'),
        logRetention: logs.RetentionDays.ONE_DAY,
        removalPolicy: cdk.RemovalPolicy.DESTROY,
        copyMigrations: handler === 'migrate',
      }),
    }));
    // The receipt notifier (addReceiptNotifier), bundled as the repository bundles it: the kit, its
    // handler, the CA bundle and both migration folders, so that a package install needs no esbuild.
    const consumers = path.join(PROJECT_ROOT, 'lambdas', 'consumers');
    const receipts = new OutcomeConsumer(stack, 'Receipts', {
      consumerName: 'receipts',
      policy: 'at-least-once',
      eventBus: new events.EventBus(stack, 'Bus'),
      detailTypes: RECEIPT_DETAIL_TYPES,
      entry: path.join(consumers, 'receipts', 'handler.ts'),
      migrations: { kit: path.join(consumers, 'kit', 'migrations'), receipts: path.join(consumers, 'receipts', 'migrations') },
      vpc,
      securityGroup,
      databaseSecret: new secretsmanager.Secret(stack, 'Login'),
    });
    functions.push({ handler: RECEIPTS_ASSET, fn: receipts.function });
    app.synth();
    const template = JSON.parse(readFileSync(path.join(outdir, 'PackageBundles.template.json'), 'utf8')) as {
      Resources: Record<string, { Metadata?: Record<string, string> }>;
    };
    mkdirSync(ASSETS, { recursive: true });
    // The source maps name their inputs relative to where esbuild wrote them: read them there.
    const staged: { name: string; dir: string }[] = [];
    for (const { handler, fn } of functions) {
      const id = stack.getLogicalId(fn.node.defaultChild as cdk.CfnElement);
      const asset = template.Resources[id]?.Metadata?.['aws:asset:path'];
      if (!asset || !existsSync(path.join(outdir, asset, 'index.mjs'))) throw new Error(`no bundle for ${handler}`);
      cpSync(path.join(outdir, asset), path.join(ASSETS, handler), { recursive: true });
      staged.push({ name: handler, dir: path.join(outdir, asset) });
      console.error(`bundled ${handler}: ${readdirSync(path.join(ASSETS, handler)).join(', ')}`);
    }
    sbom(staged);
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

/**
 * What the bundles carry, for the consumer's scanners: the package has no dependencies to install (the
 * code is bundled), so `npm ls` and lock-file scanners see none. A CycloneDX SBOM (dist/sbom.cdx.json)
 * lists every npm package some bundle holds, with the version installed here (the lock file's), read
 * from each bundle's source map: the files esbuild put into it.
 */
function sbom(bundles: readonly { name: string; dir: string }[]): void {
  const components = new Map<string, { name: string; version: string; license?: string; bundles: Set<string> }>();
  for (const { name: bundleName, dir: bundleDir } of bundles) {
    const mapFile = path.join(bundleDir, 'index.mjs.map');
    if (!existsSync(mapFile)) throw new Error(`no source map for ${bundleName}: the SBOM reads the bundle's inputs from it`);
    const { sources } = JSON.parse(readFileSync(mapFile, 'utf8')) as { sources: string[] };
    for (const source of sources) {
      // …/node_modules/@scope/name/… or …/node_modules/name/…: the innermost package holds the file.
      const at = source.lastIndexOf('node_modules/');
      if (at < 0) continue;
      const name = /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(source.slice(at))?.[1];
      if (!name) continue;
      const dir = path.resolve(bundleDir, source.slice(0, at), 'node_modules', name);
      const manifestFile = path.join(dir, 'package.json');
      if (!existsSync(manifestFile)) throw new Error(`SBOM: no package.json for ${name} at ${dir} (from ${source} in ${bundleName})`);
      const manifest = JSON.parse(readFileSync(manifestFile, 'utf8')) as { version: string; license?: string };
      const key = `${name}@${manifest.version}`;
      const entry = components.get(key) ?? { name, version: manifest.version, license: manifest.license, bundles: new Set<string>() };
      entry.bundles.add(bundleName);
      components.set(key, entry);
    }
  }
  const own = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as { name: string; version: string };
  const document = {
    bomFormat: 'CycloneDX',
    specVersion: '1.5',
    version: 1,
    metadata: { component: { type: 'library', name: own.name, version: own.version, purl: `pkg:npm/${own.name}@${own.version}` } },
    components: [...components.values()]
      .sort((a, b) => a.name.localeCompare(b.name) || a.version.localeCompare(b.version))
      .map((c) => ({
        type: 'library',
        name: c.name,
        version: c.version,
        purl: `pkg:npm/${c.name.replace(/^@/, '%40')}@${c.version}`,
        ...(c.license ? { licenses: [{ expression: c.license }] } : {}),
        properties: [{ name: 'exactly-once-charges:bundles', value: [...c.bundles].sort().join(',') }],
      })),
  };
  writeFileSync(path.join(DIST, 'sbom.cdx.json'), `${JSON.stringify(document, null, 2)}\n`);
  console.error(`sbom: ${document.components.length} packages in the bundles`);
}

compile();
bundle();
