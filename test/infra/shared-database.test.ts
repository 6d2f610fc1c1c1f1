// Two pipelines on one database server: the first creates the instance in its stack, the second
// uses it from another stack through existingDatabase. Each has its own database and its own
// application role (the migrate side of it: test/runtime/pipeline-roles.test.ts), and the second
// stack holds the ingress rule that lets its functions in (no dependency cycle between the stacks).
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, describe, expect, it } from 'vitest';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import type { ExistingDatabase } from '../../lib/charge-pipeline-props.ts';
import { ChargePipelinePropsError } from '../../lib/validation.ts';
import { newApp, ofType, removeSynthOutput, type CfnResource } from './support.ts';

afterAll(removeSynthOutput);

const threeTierVpc = (stack: cdk.Stack) =>
  new ec2.Vpc(stack, 'Vpc', {
    maxAzs: 2,
    natGateways: 1,
    subnetConfiguration: [
      { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
      { name: 'private', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      { name: 'isolated', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
    ],
  });

function twoStacks(databaseName = 'charges_eu') {
  const app = newApp();
  const first = new cdk.Stack(app, 'First');
  const vpc = threeTierVpc(first);
  const owner = new ChargePipeline(first, 'Charges', { vpc });
  const second = new cdk.Stack(app, 'Second');
  const shared = new ChargePipeline(second, 'Charges', {
    vpc,
    existingDatabase: {
      endpoint: owner.database!.instanceEndpoint,
      secret: owner.databaseSecret,
      databaseName,
      connections: owner.database!,
    },
  });
  // Throws on a dependency cycle between the stacks.
  const assembly = app.synth();
  const resources = (stack: cdk.Stack) => (assembly.getStackByName(stack.stackName).template as { Resources: Record<string, CfnResource> }).Resources;
  return { app, first, second, owner, shared, resources };
}

const username = (secret: CfnResource) => JSON.parse(secret.Properties!.GenerateSecretString.SecretStringTemplate).username as string;

describe('a second pipeline on the first one’s database server, in another stack', () => {
  const { first, second, owner, shared, resources } = twoStacks();

  it('synthesizes: the ingress rule into the database’s group is in the second stack, none in the first refers to it', () => {
    const ingress = ofType(resources(second), 'AWS::EC2::SecurityGroupIngress').filter(([, r]) => r.Properties!.Description === 'PostgreSQL from the charge pipeline functions');
    expect(ingress).toHaveLength(1);
    // A reference to the first stack's output (Fn::ImportValue, or Fn::GetStackOutput under cdk.json's flags).
    expect(JSON.stringify(ingress[0]![1].Properties!.GroupId)).toMatch(/Fn::(ImportValue|GetStackOutput).*First|First.*DatabaseSecurityGroup/);
    expect(JSON.stringify(resources(first))).not.toMatch(/Fn::(ImportValue|GetStackOutput)/);
    const dependencies = second.dependencies.map((s) => s.stackName);
    expect(dependencies).toEqual(['First']);
    expect(first.dependencies).toEqual([]);
  });

  it('gives each pipeline its own database and its own application role', () => {
    expect(owner.applicationRole).toBe('charges_app');
    expect(shared.applicationRole).toBe('charges_eu_app');
    const secrets = (stack: cdk.Stack) =>
      ofType(resources(stack), 'AWS::SecretsManager::Secret')
        .filter(([, r]) => r.Properties?.GenerateSecretString?.SecretStringTemplate?.includes('username'))
        .map(([, r]) => username(r));
    expect(secrets(first)).toEqual(expect.arrayContaining(['charges', 'charges_app']));
    expect(secrets(second)).toEqual(['charges_eu_app']);
    const env = Template.fromStack(second).findResources('AWS::Lambda::Function');
    const names = new Set(Object.values(env).map((fn: any) => fn.Properties.Environment?.Variables?.DB_NAME).filter(Boolean));
    expect([...names]).toEqual(['charges_eu']);
  });

  it('refuses a consumer login named like the pipeline’s own role', () => {
    expect(() => shared.addConsumerDatabaseLogin('Clash', { role: 'charges_eu_app', schemas: ['receipts'] })).toThrow(/role 'charges_eu_app' is the pipeline's own/);
  });
});

describe('existingDatabase.databaseName', () => {
  const problemsOf = (databaseName: string | undefined) => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'S');
    const vpc = threeTierVpc(stack);
    const owner = new ChargePipeline(stack, 'Owner', { vpc });
    try {
      new ChargePipeline(stack, 'Second', {
        vpc,
        existingDatabase: { endpoint: owner.database!.instanceEndpoint, secret: owner.databaseSecret, databaseName } as ExistingDatabase,
      });
    } catch (error) {
      if (error instanceof ChargePipelinePropsError) return error.problems.join('\n');
      throw error;
    }
    return '';
  };

  it('is required: without it the second pipeline would settle the first one’s tables', () => {
    expect(problemsOf(undefined)).toMatch(/existingDatabase.databaseName is required: name this pipeline's own database on that server/);
  });

  it('is an identifier short enough for its role, and not one of the server’s own databases', () => {
    expect(problemsOf('x'.repeat(60))).toMatch(/at most 59 characters/);
    expect(problemsOf('postgres')).toMatch(/not the server's 'postgres'/);
    expect(problemsOf('charges_eu')).toBe('');
  });
});

describe('two pipelines of one app on one database', () => {
  it('is refused at synth: the second names the first one’s database (or a third names the second’s)', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'S');
    const vpc = threeTierVpc(stack);
    const owner = new ChargePipeline(stack, 'Owner', { vpc });
    const existing = (databaseName: string) => ({ endpoint: owner.database!.instanceEndpoint, secret: owner.databaseSecret, databaseName });
    expect(() => new ChargePipeline(stack, 'Second', { vpc, existingDatabase: existing('charges') })).toThrow(
      /existingDatabase.databaseName 'charges' is the database of the pipeline at S\/Owner on that server: give this pipeline a database of its own/,
    );
    new ChargePipeline(stack, 'Third', { vpc, existingDatabase: existing('charges_eu') });
    expect(() => new ChargePipeline(stack, 'Fourth', { vpc, existingDatabase: existing('charges_eu') })).toThrow(/'charges_eu' is the database of the pipeline at S\/Third/);
    new ChargePipeline(stack, 'Fifth', { vpc, existingDatabase: existing('charges_us') });
  });
});
