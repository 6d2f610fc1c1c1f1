// The resource policies on the synthesized template (lib/perimeter.ts): each sensitive resource denies
// its one action to every principal but exactly the roles that need it — the Stripe key, the webhook
// signing secret, the intake queue, the outcome bus — and the Stripe secret has a key of its own. Also
// who may write through the ops function (OPS_OPERATOR_ARNS), and where the functions may go on 443.
import * as cdk from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { afterAll, describe, expect, it } from 'vitest';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import { type CfnResource, logicalId, newApp, ofType, removeSynthOutput, synthDefaultApp, synthPipeline } from './support.ts';

afterAll(removeSynthOutput);

const arnOf = (id: string) => ({ 'Fn::GetAtt': [id, 'Arn'] });
const roleArn = (fn: lambda.IFunction) => arnOf(logicalId(fn.role as never));
const sortKey = (v: unknown) => JSON.stringify(v);
const sorted = (values: readonly unknown[]) => [...values].sort((a, b) => sortKey(a).localeCompare(sortKey(b)));

/** The one exemption statement a resource policy holds for `action`: its exempt principals, and the rest of it. */
function denyStatement(statements: readonly Record<string, any>[], action: string) {
  const matching = statements.filter((s) => s.Action === action && s.Effect === 'Deny');
  expect(matching, action).toHaveLength(1);
  const { Condition, ...rest } = matching[0]!;
  expect(Object.keys(Condition)).toEqual(['ArnNotEquals']);
  expect(Object.keys(Condition.ArnNotEquals)).toEqual(['aws:PrincipalArn']);
  return { exempt: sorted(Condition.ArnNotEquals['aws:PrincipalArn']), rest };
}

function secretPolicy(resources: Record<string, CfnResource>, secret: secretsmanager.ISecret) {
  const policies = ofType(resources, 'AWS::SecretsManager::ResourcePolicy').filter(([, r]) => sortKey(r.Properties!.SecretId) === sortKey({ Ref: logicalId(secret as never) }));
  return policies.map(([, r]) => r.Properties!.ResourcePolicy.Statement as Record<string, any>[]);
}

function queueStatements(resources: Record<string, CfnResource>, pipeline: ChargePipeline) {
  const [policy] = ofType(resources, 'AWS::SQS::QueuePolicy').filter(([, r]) => sortKey(r.Properties!.Queues) === sortKey([{ Ref: logicalId(pipeline.queue as never) }]));
  return policy![1].Properties!.PolicyDocument.Statement as Record<string, any>[];
}

function busStatements(resources: Record<string, CfnResource>, pipeline: ChargePipeline) {
  return ofType(resources, 'AWS::Events::EventBusPolicy')
    .filter(([, r]) => sortKey(r.Properties!.EventBusName) === sortKey({ Ref: logicalId(pipeline.eventBus as never) }))
    .map(([, r]) => r.Properties!.Statement as Record<string, any>);
}

describe('the resource policies (default pipeline)', () => {
  const { pipeline, resources } = synthPipeline();
  const pipelineRoles = [pipeline.chargeFunction, pipeline.reconcileFunction, pipeline.opsFunction, pipeline.stripeEvents!.function].map(roleArn);

  it('the Stripe key: GetSecretValue denied to all but the charge, reconcile, ops and Stripe-events roles', () => {
    const policies = secretPolicy(resources, pipeline.stripeSecret);
    expect(policies).toHaveLength(1);
    expect(policies[0]).toHaveLength(1);
    const { exempt, rest } = denyStatement(policies[0]!, 'secretsmanager:GetSecretValue');
    expect(exempt).toEqual(sorted(pipelineRoles));
    expect(rest).toEqual({ Action: 'secretsmanager:GetSecretValue', Effect: 'Deny', Principal: { AWS: '*' }, Resource: '*', Sid: 'OnlyThePipelineReadsTheStripeKey' });
  });

  it('the Stripe key is encrypted with a customer managed key of its own, rotated, that decrypts for exactly those roles', () => {
    const secret = resources[logicalId(pipeline.stripeSecret as never)]!;
    const keyId = logicalId(pipeline.node.findChild('StripeSecretKey') as never);
    expect(secret.Properties!.KmsKeyId).toEqual(arnOf(keyId));
    const key = resources[keyId]!;
    expect(key.Properties).toMatchObject({ EnableKeyRotation: true });
    expect(key.DeletionPolicy).toBe('Retain');
    const decrypters = (key.Properties!.KeyPolicy.Statement as Record<string, any>[]).filter((s) => s.Action === 'kms:Decrypt');
    expect(decrypters).toHaveLength(1);
    expect(sorted(decrypters[0]!.Principal.AWS)).toEqual(sorted(pipelineRoles));
    expect(decrypters[0]!.Condition).toEqual({ StringEquals: { 'kms:ViaService': { 'Fn::Join': ['', ['secretsmanager.', { Ref: 'AWS::Region' }, '.amazonaws.com']] } } });
  });

  it('the webhook signing secret: GetSecretValue denied to all but the Stripe-events role', () => {
    const policies = secretPolicy(resources, pipeline.stripeEvents!.webhookSecret!);
    expect(policies).toHaveLength(1);
    expect(denyStatement(policies[0]!, 'secretsmanager:GetSecretValue').exempt).toEqual([roleArn(pipeline.stripeEvents!.function)]);
  });

  it('the intake queue: SendMessage denied to all but the charge role by default (no producer is named), beside the TLS rule', () => {
    const statements = queueStatements(resources, pipeline);
    expect(statements.map((s) => `${s.Effect} ${s.Action}`)).toEqual(['Deny sqs:*', 'Deny sqs:SendMessage']);
    const { exempt, rest } = denyStatement(statements, 'sqs:SendMessage');
    expect(exempt).toEqual([roleArn(pipeline.chargeFunction)]);
    expect(rest.Resource).toEqual(arnOf(logicalId(pipeline.queue as never)));
  });

  it('the outcome bus: PutEvents denied to all but the four pipeline roles, so a forged Charge Succeeded is refused', () => {
    const statements = busStatements(resources, pipeline);
    expect(statements).toHaveLength(1);
    const { exempt, rest } = denyStatement(statements, 'events:PutEvents');
    expect(exempt).toEqual(sorted(pipelineRoles));
    expect(rest).toMatchObject({ Effect: 'Deny', Principal: { AWS: '*' }, Resource: arnOf(logicalId(pipeline.eventBus as never)) });
  });

  it('no write goes through the ops function without an operator named (OPS_OPERATOR_ARNS empty)', () => {
    expect(resources[logicalId(pipeline.opsFunction as never)]!.Properties!.Environment.Variables.OPS_OPERATOR_ARNS).toBe('');
  });
});

describe('named producers, publishers and operators', () => {
  it('producerRoles, grantSendChargeRequests and the operator role are exempt on the queue; grantPutOutcomeEvents on the bus; both operators in OPS_OPERATOR_ARNS', () => {
    const app = newApp();
    const stack = new cdk.Stack(app, 'Grants');
    const refs = {
      producer: new iam.Role(stack, 'Producer', { assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com') }),
      granted: new iam.Role(stack, 'Granted', { assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com') }),
      replay: new iam.Role(stack, 'Replay', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') }),
      oncall: iam.Role.fromRoleArn(stack, 'OnCall', 'arn:aws:iam::123456789012:role/PaymentsOnCall', { mutable: false }),
    };
    const pipeline = new ChargePipeline(stack, 'Charges', { producerRoles: [refs.producer], operatorRole: refs.oncall, operatorPrincipals: ['arn:aws:iam::123456789012:user/breakglass'] });
    // Grants after the constructor count too (the lists are read at synth).
    pipeline.grantSendChargeRequests(refs.granted);
    pipeline.grantPutOutcomeEvents(refs.replay);
    const again = Template.fromStack(stack).toJSON().Resources as Record<string, CfnResource>;
    const resources = again;
    expect(denyStatement(queueStatements(again, pipeline), 'sqs:SendMessage').exempt).toEqual(
      sorted([roleArn(pipeline.chargeFunction), 'arn:aws:iam::123456789012:role/PaymentsOnCall', arnOf(logicalId(refs.producer)), arnOf(logicalId(refs.granted))]),
    );
    expect(denyStatement(busStatements(again, pipeline), 'events:PutEvents').exempt).toContainEqual(arnOf(logicalId(refs.replay)));
    expect(denyStatement(busStatements(again, pipeline), 'events:PutEvents').exempt).toHaveLength(5);
    expect(resources[logicalId(pipeline.opsFunction as never)]!.Properties!.Environment.Variables.OPS_OPERATOR_ARNS).toBe(
      'arn:aws:iam::123456789012:role/PaymentsOnCall,arn:aws:iam::123456789012:user/breakglass',
    );
  });

  it('refuses an operator that is not a role, role session or user ARN, and a grantee that is not a role or user', () => {
    for (const bad of ['PaymentsOnCall', 'arn:aws:iam::123456789012:root', 'arn:aws:iam::123456789012:role/a,arn:aws:iam::123456789012:role/b']) {
      expect(() => synthPipeline({ operatorPrincipals: [bad] }), bad).toThrow(/operatorPrincipals: /);
    }
    const { pipeline } = synthPipeline();
    expect(() => pipeline.grantSendChargeRequests(new iam.ServicePrincipal('sns.amazonaws.com'))).toThrow(/grantSendChargeRequests: the grantee must be an IAM role or user/);
  });
});

describe('what the construct does not own', () => {
  it('a Stripe secret passed in gets no policy and no key (docs/deploy.md says what to put on it); without Stripe events the key has three readers', () => {
    const { pipeline, resources } = synthPipeline((stack) => ({
      stripeSecret: secretsmanager.Secret.fromSecretCompleteArn(stack, 'Brought', 'arn:aws:secretsmanager:eu-west-1:123456789012:secret:stripe-AbCdEf'),
      stripeEvents: 'none',
    }));
    expect(ofType(resources, 'AWS::SecretsManager::ResourcePolicy').map(([id]) => id).filter((id) => id.includes('Stripe'))).toEqual([]);
    expect(pipeline.node.tryFindChild('StripeSecretKey')).toBeUndefined();
    const { resources: own, pipeline: p } = synthPipeline({ stripeEvents: 'none' });
    const { exempt } = denyStatement(secretPolicy(own, p.stripeSecret)[0]!, 'secretsmanager:GetSecretValue');
    expect(exempt).toEqual(sorted([p.chargeFunction, p.reconcileFunction, p.opsFunction].map(roleArn)));
  });
});

describe('egress', () => {
  it('443 goes anywhere by default; functionsHttpsEgress narrows it to exactly what is given; an empty list is refused', () => {
    const egress443 = (resources: Record<string, CfnResource>, pipeline: ChargePipeline) => {
      const group = logicalId(pipeline.functionsSecurityGroup as never);
      const inline = (resources[group]!.Properties!.SecurityGroupEgress ?? []) as Record<string, unknown>[];
      const standalone = ofType(resources, 'AWS::EC2::SecurityGroupEgress')
        .map(([, r]) => r.Properties as Record<string, unknown>)
        .filter((r) => sortKey(r.GroupId) === sortKey({ 'Fn::GetAtt': [group, 'GroupId'] }))
        .map(({ GroupId, ...rule }) => rule);
      return [...inline, ...standalone].filter((r) => r.FromPort === 443).map(({ Description, ...rule }) => rule);
    };
    const plain = synthPipeline();
    expect(egress443(plain.resources, plain.pipeline)).toEqual([{ CidrIp: '0.0.0.0/0', IpProtocol: 'tcp', FromPort: 443, ToPort: 443 }]);
    const narrowed = synthPipeline({ functionsHttpsEgress: [ec2.Peer.prefixList('pl-0123456789abcdef0'), ec2.Peer.ipv4('10.0.0.0/16')] });
    expect(sorted(egress443(narrowed.resources, narrowed.pipeline))).toEqual(
      sorted([
        { DestinationPrefixListId: 'pl-0123456789abcdef0', IpProtocol: 'tcp', FromPort: 443, ToPort: 443 },
        { CidrIp: '10.0.0.0/16', IpProtocol: 'tcp', FromPort: 443, ToPort: 443 },
      ]),
    );
    expect(() => synthPipeline({ functionsHttpsEgress: [] })).toThrow(/functionsHttpsEgress must name at least one peer/);
  });
});

describe('the default app', () => {
  it('-c producerRoleArns names the producers on the queue, -c opsRoleArn the operator in OPS_OPERATOR_ARNS; a malformed ARN fails the synth', () => {
    const producers = 'arn:aws:iam::123456789012:role/orders, arn:aws:iam::123456789012:role/billing';
    const { pipeline, resources } = synthDefaultApp({ producerRoleArns: producers, opsRoleArn: 'arn:aws:iam::123456789012:role/oncall', stripeConnectedAccounts: 'acct_1Alpha,acct_1Bravo' });
    // -c stripeConnectedAccounts reaches the construct's prop (checked and deployed by it: stripe-events.test.ts).
    expect(resources[logicalId(pipeline.stripeEvents!.function as never)]!.Properties!.Environment.Variables.STRIPE_CONNECTED_ACCOUNTS).toBe('acct_1Alpha,acct_1Bravo');
    expect(denyStatement(queueStatements(resources, pipeline), 'sqs:SendMessage').exempt).toEqual(
      sorted([roleArn(pipeline.chargeFunction), 'arn:aws:iam::123456789012:role/oncall', 'arn:aws:iam::123456789012:role/orders', 'arn:aws:iam::123456789012:role/billing']),
    );
    expect(resources[logicalId(pipeline.opsFunction as never)]!.Properties!.Environment.Variables.OPS_OPERATOR_ARNS).toBe('arn:aws:iam::123456789012:role/oncall');
    expect(() => synthDefaultApp({ producerRoleArns: 'arn:aws:iam::123456789012:role/orders,orders' })).toThrow(/producerRoleArns must be comma-separated IAM role ARNs .* got 'orders'/);
  });
});
