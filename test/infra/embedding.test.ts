// Embedding the construct in a platform team's own network and database: subnet selection, a
// security group, an existing database (instance, cluster or proxy endpoint + secret) or an existing
// owner secret, each validated with an error that says what to pass.
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { afterAll, describe, expect, it } from 'vitest';
import { alarmNamesFor } from '../../lib/alarm-catalog.ts';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import type { ChargePipelineProps } from '../../lib/charge-pipeline-props.ts';
import { ChargePipelinePropsError } from '../../lib/validation.ts';
import { dependsOn, logicalId, newApp, ofType, removeSynthOutput, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

type Props = ChargePipelineProps | ((stack: cdk.Stack) => ChargePipelineProps);

function problemsOf(props: Props): readonly string[] {
  const stack = new cdk.Stack(newApp(), 'Validation');
  try {
    new ChargePipeline(stack, 'Charges', typeof props === 'function' ? props(stack) : props);
  } catch (error) {
    if (error instanceof ChargePipelinePropsError) return error.problems;
    throw error;
  }
  throw new Error('expected a ChargePipelinePropsError');
}

const vpcWith = (stack: cdk.Stack, ...types: ec2.SubnetType[]) =>
  new ec2.Vpc(stack, 'TheirVpc', {
    maxAzs: 2,
    natGateways: types.includes(ec2.SubnetType.PRIVATE_WITH_EGRESS) ? 1 : 0,
    subnetConfiguration: [
      ...(types.includes(ec2.SubnetType.PRIVATE_WITH_EGRESS) ? [{ name: 'public', subnetType: ec2.SubnetType.PUBLIC }] : []),
      ...types.map((subnetType) => ({ name: subnetType.toLowerCase(), subnetType })),
    ],
  });

const existingDatabase = (stack: cdk.Stack) => {
  const sg = new ec2.SecurityGroup(stack, 'TheirDbSg', { vpc: stack.node.findChild('TheirVpc') as ec2.IVpc });
  return {
    endpoint: new rds.Endpoint('proxy.proxy-abc.eu-west-1.rds.amazonaws.com', 5432),
    secret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Owner', 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:owner-AbCdEf'),
    databaseName: 'payments',
    connections: sg,
    sg,
  };
};

describe('embedding: validation', () => {
  it('refuses a VPC without subnets for the functions, saying what to pass', () => {
    const problems = problemsOf((s) => ({ vpc: vpcWith(s, ec2.SubnetType.PRIVATE_ISOLATED) }));
    expect(problems.join('\n')).toMatch(/functionSubnets: the vpc has no subnets matching Private.*pass functionSubnets selecting private subnets with a route to the internet/);
  });

  it('refuses a VPC without isolated subnets for the database, unless databaseSubnets or existingDatabase says where', () => {
    const problems = problemsOf((s) => ({ vpc: vpcWith(s, ec2.SubnetType.PRIVATE_WITH_EGRESS) }));
    expect(problems.join('\n')).toMatch(/databaseSubnets: the vpc has no subnets matching Isolated.*pass databaseSubnets .* or existingDatabase/);
  });

  it('refuses database props next to existingDatabase, subnet props without a vpc, bad names', () => {
    const problems = problemsOf((s) => {
      vpcWith(s, ec2.SubnetType.PRIVATE_WITH_EGRESS);
      return {
        vpc: s.node.findChild('TheirVpc') as ec2.IVpc,
        existingDatabase: { ...existingDatabase(s), databaseName: 'Bad-Name' },
        multiAz: true,
        databaseInstanceType: new ec2.InstanceType('t4g.small'),
        pipelineName: 'no spaces please',
        metricsNamespace: 'AWS/Lambda',
      };
    });
    expect(problems).toEqual(
      expect.arrayContaining([
        'multiAz configures the database the construct creates; it cannot be combined with existingDatabase',
        'databaseInstanceType configures the database the construct creates; it cannot be combined with existingDatabase',
        expect.stringMatching(/existingDatabase.databaseName must be a PostgreSQL identifier .* got 'Bad-Name'/),
        expect.stringMatching(/pipelineName must be 1-64 .* got 'no spaces please'/),
        expect.stringMatching(/metricsNamespace .* not start with 'AWS\/'/),
      ]),
    );
    expect(problemsOf({ functionSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS } })).toEqual([
      'functionSubnets refers to the VPC you bring; set vpc too (the VPC the construct creates has its own)',
    ]);
  });
});

describe('embedding: a VPC with other subnet layouts', () => {
  const { pipeline, resources } = synthPipeline((s) => {
    const vpc = vpcWith(s, ec2.SubnetType.PRIVATE_WITH_EGRESS);
    return {
      vpc,
      // the database in the same private subnets as the functions (no isolated tier)
      databaseSubnets: { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      functionsSecurityGroup: new ec2.SecurityGroup(s, 'TheirFunctionsSg', { vpc, allowAllOutbound: false }),
      databaseSecret: new secretsmanager.Secret(s, 'TheirOwnerSecret', {
        generateSecretString: { secretStringTemplate: '{"username":"owner"}', generateStringKey: 'password', excludePunctuation: true },
      }),
    };
  });

  it('puts the database in the selected subnets and the functions in their security group', () => {
    const [[, subnetGroup]] = ofType(resources, 'AWS::RDS::DBSubnetGroup') as [[string, any]];
    const selected = pipeline.vpc.selectSubnets({ subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }).subnets;
    expect(subnetGroup.Properties.SubnetIds).toEqual(selected.map((subnet) => ({ Ref: logicalId(subnet) })));
    expect(resources[logicalId(pipeline.chargeFunction)]!.Properties!.VpcConfig.SecurityGroupIds).toEqual([
      { 'Fn::GetAtt': [logicalId(pipeline.functionsSecurityGroup), 'GroupId'] },
    ]);
    expect(pipeline.functionsSecurityGroup.node.id).toBe('TheirFunctionsSg');
  });

  it('uses the given owner secret for the instance', () => {
    const instance = resources[logicalId(pipeline.database!)]!;
    expect(JSON.stringify(instance.Properties!.MasterUsername)).toContain('TheirOwnerSecret');
    expect(ofType(resources, 'AWS::SecretsManager::Secret').map(([id]) => id).filter((id) => id.includes('DatabaseCredentials'))).toEqual([]);
  });
});

describe('embedding: an existing database (an RDS Proxy endpoint and its owner secret)', () => {
  let theirSg: ec2.SecurityGroup | undefined;
  const { pipeline, resources } = synthPipeline((s) => {
    const vpc = vpcWith(s, ec2.SubnetType.PRIVATE_WITH_EGRESS);
    const db = existingDatabase(s);
    theirSg = db.sg;
    return { vpc, existingDatabase: { endpoint: db.endpoint, secret: db.secret, databaseName: db.databaseName, connections: db.connections } };
  });
  const env = (fn: cdk.IResource) => resources[logicalId(fn)]!.Properties!.Environment.Variables;

  it('creates no database, no owner secret and no database alarm', () => {
    expect(pipeline.database).toBeUndefined();
    expect(ofType(resources, 'AWS::RDS::DBInstance')).toEqual([]);
    const names = pipeline.alarms.map((a) => a.name);
    expect(names).toEqual(alarmNamesFor({ stripeEvents: 'webhook', ownDatabase: false, exampleConsumer: pipeline.exampleConsumerQueue !== undefined }));
  });

  it('points every function at the endpoint; migrate as the owner, the others as the application role', () => {
    for (const fn of [pipeline.migrateFunction, pipeline.chargeFunction, pipeline.reconcileFunction, pipeline.opsFunction]) {
      expect(env(fn)).toMatchObject({ DB_HOST: 'proxy.proxy-abc.eu-west-1.rds.amazonaws.com', DB_PORT: '5432', DB_NAME: 'payments', DB_SSL: 'verify-full' });
    }
    expect(env(pipeline.migrateFunction).DB_SECRET_ARN).toBe('arn:aws:secretsmanager:eu-west-1:111111111111:secret:owner-AbCdEf');
    expect(env(pipeline.migrateFunction).DB_APP_SECRET_ARN).toEqual({ Ref: logicalId(pipeline.applicationDatabaseSecret) });
    expect(env(pipeline.chargeFunction).DB_SECRET_ARN).toEqual({ Ref: logicalId(pipeline.applicationDatabaseSecret) });
  });

  it('lets the functions into the database\'s security group, and migrates once that rule exists', () => {
    const ingress = ofType(resources, 'AWS::EC2::SecurityGroupIngress').filter(
      ([, r]) => JSON.stringify(r.Properties!.GroupId) === JSON.stringify({ 'Fn::GetAtt': [logicalId(theirSg!), 'GroupId'] }),
    );
    expect(ingress.map(([, r]) => r.Properties)).toEqual([
      expect.objectContaining({ FromPort: 5432, ToPort: 5432, SourceSecurityGroupId: { 'Fn::GetAtt': [logicalId(pipeline.functionsSecurityGroup), 'GroupId'] } }),
    ]);
    const [[, trigger]] = ofType(resources, 'Custom::Trigger') as [[string, (typeof resources)[string]]];
    const egress = ofType(resources, 'AWS::EC2::SecurityGroupEgress').filter(([, r]) => r.Properties!.FromPort === 5432);
    expect(egress).toHaveLength(1);
    expect(dependsOn(trigger)).toContain(egress[0]![0]);
  });
});
