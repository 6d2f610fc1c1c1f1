// Production defaults and who acknowledges cdk-nag findings:
//   - the construct's defaults are for production (a Multi-AZ database, a NAT gateway per AZ); the
//     'dev' profile gives both up, and says so in its documentation;
//   - the construct acknowledges no finding itself: an app running cdk-nag sees every finding the
//     design leaves until it opts in (acknowledgeChargePipelineFindings), and each is documented.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { afterAll, describe, expect, it } from 'vitest';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import { acknowledgeChargePipelineFindings, chargePipelineFindings } from '../../lib/nag.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { logicalId, newApp, ofType, removeSynthOutput, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

describe('defaults', () => {
  it('are for production: a Multi-AZ database and a NAT gateway in each of the two AZs', () => {
    const { pipeline, resources } = synthPipeline();
    expect(resources[logicalId(pipeline.database!)]!.Properties).toMatchObject({ MultiAZ: true, DeletionProtection: true });
    expect(ofType(resources, 'AWS::EC2::NatGateway')).toHaveLength(2);
  });

  it('the dev profile gives both up; a prop set explicitly wins over the profile', () => {
    const dev = synthPipeline({ profile: 'dev' });
    expect(dev.resources[logicalId(dev.pipeline.database!)]!.Properties).toMatchObject({ MultiAZ: false });
    expect(ofType(dev.resources, 'AWS::EC2::NatGateway')).toHaveLength(1);
    const mixed = synthPipeline({ profile: 'dev', multiAz: true });
    expect(mixed.resources[logicalId(mixed.pipeline.database!)]!.Properties).toMatchObject({ MultiAZ: true });
    expect(() => synthPipeline({ profile: 'staging' as 'dev' })).toThrow(/profile must be 'production' or 'dev', got 'staging'/);
  });
});

describe('cdk-nag', () => {
  /** Synthesize a stack with the pipeline under AwsSolutionsChecks; the findings the synth fails on ('' when it passes). */
  function nag(acknowledge: boolean): string {
    const app = newApp({ context: { '@aws-cdk/core:validationReportJson': true } });
    const stack = new cdk.Stack(app, 'Nag');
    new ChargePipeline(stack, 'Charges', { alarmEmail: 'oncall@example.com' });
    if (acknowledge) acknowledgeChargePipelineFindings(app);
    cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    try {
      app.synth();
      return '';
    } catch (error) {
      return String((error as Error).message);
    }
  }

  it('the construct acknowledges nothing itself: every design finding shows until the app opts in', () => {
    const findings = nag(false);
    for (const rule of ['AwsSolutions-SMG4', 'AwsSolutions-IAM4', 'AwsSolutions-RDS11']) expect(findings).toContain(rule);
    expect(nag(true)).toBe('');
  }, 60_000);

  it('documents each finding it records, by rule, in docs/deploy.md', () => {
    const stack = new cdk.Stack(newApp(), 'Doc');
    new ChargePipeline(stack, 'Charges', { stripeEvents: 'webhook' });
    const rules = new Set(chargePipelineFindings(stack).map(({ finding }) => finding.id.replace(/\[.*$/, '')));
    expect(rules.size).toBeGreaterThan(3);
    const deploy = readFileSync(path.join(PROJECT_ROOT, 'docs', 'deploy.md'), 'utf8');
    const section = deploy.slice(deploy.indexOf('### cdk-nag'));
    for (const rule of rules) expect(section, rule).toContain(`\`${rule}\``);
  });
});
