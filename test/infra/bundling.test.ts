// The one test file that bundles for real (local esbuild, no Docker): the migrate function's asset
// is a self-contained ES module with its source map and the repository's migrations/ next to it,
// and that very bundle migrates a real, empty PostgreSQL (what the deploy-time Trigger runs) and
// throws when it cannot (what fails the deploy). Skipped while the handler does not exist.
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as logs from 'aws-cdk-lib/aws-logs';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createDatabase } from '../../local/postgres.ts';
import { handlerEntry, LAMBDA_MIGRATIONS_DIR, PipelineFunction, PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE } from '../../lib/pipeline-function.ts';
import { newApp, removeSynthOutput } from './support.ts';
import { pipelineMetrics } from '../../lib/observability.ts';

const migrationFiles = readdirSync(path.join(PROJECT_ROOT, 'migrations')).filter((name) => name.endsWith('.sql')).sort();
let bundle: string | undefined;

function bundleMigrateFunction(): string {
  const app = newApp({ bundling: true });
  const stack = new cdk.Stack(app, 'BundlingTest');
  const vpc = new ec2.Vpc(stack, 'Vpc', { natGateways: 1, maxAzs: 2 });
  new PipelineFunction(stack, 'Migrate', {
    handler: 'migrate',
    description: 'bundling test',
    vpc,
    securityGroup: new ec2.SecurityGroup(stack, 'Sg', { vpc }),
    timeout: cdk.Duration.minutes(1),
    memorySize: 256,
    environment: {},
    logLevel: 'ERROR',
    metrics: pipelineMetrics('Test', 'bundling-test'),
    logRetention: logs.RetentionDays.ONE_DAY,
    removalPolicy: cdk.RemovalPolicy.DESTROY,
    copyMigrations: true,
  });
  const assembly = app.synth();
  const found = readdirSync(assembly.directory)
    .filter((name) => name.startsWith('asset.'))
    .map((dir) => path.join(assembly.directory, dir))
    .find((dir) => existsSync(path.join(dir, 'index.mjs')));
  if (!found) throw new Error('no asset with index.mjs');
  return found;
}

/**
 * Runs the bundle's handler in a fresh Node process, as a new Lambda container would: Node's own
 * ES module loader, the bundle's own dependencies, nothing of the repository's node_modules used.
 */
function invokeBundle(env: Record<string, string>): Promise<unknown> {
  const script = `
    const { handler } = await import(${JSON.stringify(pathToFileURL(path.join(bundle!, 'index.mjs')).href)});
    const context = { functionName: 'migrate', awsRequestId: 'test', getRemainingTimeInMillis: () => 60000 };
    try {
      process.stdout.write('RESULT ' + JSON.stringify(await handler({}, context)) + '\\n');
    } catch (error) {
      process.stdout.write('ERROR ' + JSON.stringify(String(error?.message ?? error)) + '\\n');
      process.exitCode = 1;
    }`;
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      ['--enable-source-maps', '--input-type=module', '-e', script],
      { cwd: os.tmpdir(), env: { PATH: process.env.PATH ?? '', ...env }, timeout: 30_000 },
      (_error, stdout) => {
        const line = stdout.split('\n').find((l) => l.startsWith('RESULT ') || l.startsWith('ERROR '));
        if (!line) return reject(new Error(`no result from the bundle:\n${stdout}`));
        if (line.startsWith('ERROR ')) return reject(new Error(JSON.parse(line.slice(6)) as string));
        resolve(JSON.parse(line.slice(7)));
      },
    );
  });
}

const enabled = existsSync(handlerEntry('migrate'));

describe.skipIf(!enabled)('the bundled migrate function (local esbuild, no Docker)', () => {
  beforeAll(() => {
    bundle = bundleMigrateFunction();
  }, 60_000);
  afterAll(removeSynthOutput);

  it('is an ES module with a source map and the migrations next to it', () => {
    expect(readdirSync(bundle!)).toEqual(expect.arrayContaining(['index.mjs', 'index.mjs.map', 'migrations', 'rds-ca']));
    expect(readFileSync(path.join(bundle!, 'rds-ca', 'global-bundle.pem'), 'utf8')).toBe(readFileSync(path.join(PROJECT_ROOT, RDS_CA_BUNDLE_SOURCE), 'utf8'));
    expect(readdirSync(path.join(bundle!, 'migrations')).sort()).toEqual(migrationFiles);
    expect(LAMBDA_MIGRATIONS_DIR).toBe('/var/task/migrations');
  });

  it('migrates an empty PostgreSQL, and a second run applies nothing', async () => {
    const name = `bundle_${randomBytes(4).toString('hex')}`;
    const adminUrl = inject('pgAdminUrl');
    await createDatabase(adminUrl, name);
    const url = new URL(adminUrl);
    url.pathname = `/${name}`;
    const env = { DATABASE_URL: url.toString(), MIGRATIONS_DIR: path.join(bundle!, 'migrations'), POWERTOOLS_LOG_LEVEL: 'ERROR' };

    const first = (await invokeBundle(env)) as { applied: string[] };
    expect(first.applied.map((file) => file.replace(/\.sql$/, ''))).toEqual(migrationFiles.map((file) => file.replace(/\.sql$/, '')));
    const second = (await invokeBundle(env)) as { applied: string[]; alreadyApplied: string[] };
    expect(second.applied).toEqual([]);
    expect(second.alreadyApplied).toHaveLength(migrationFiles.length);

    const admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.end();
  });

  it('throws when it cannot migrate, which is what fails the deploy', async () => {
    const empty = mkdtempSync(path.join(os.tmpdir(), 'no-migrations-'));
    await expect(
      invokeBundle({ DATABASE_URL: inject('pgAdminUrl'), MIGRATIONS_DIR: empty, POWERTOOLS_LOG_LEVEL: 'CRITICAL' }),
    ).rejects.toThrow(/no migration files/);
  });
});
