// Consumers of one name in two pipelines of one account and region: each consumer's metrics carry its
// pipeline's name as a dimension (PIPELINE_NAME of its function, and every alarm on an app metric),
// and their alarms have distinct names — before, both published {service, consumer, policy} in one
// namespace and were named after the stack only, so one pipeline's consumer fired (or masked) the
// other's alarms and the second could not even be deployed beside the first.
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import { afterAll, describe, expect, it } from 'vitest';
import { ChargePipeline } from '../../lib/charge-pipeline.ts';
import { OutcomeConsumer } from '../../lib/outcome-consumer.ts';
import { PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { type CfnResource, logicalId, newApp, ofType, removeSynthOutput } from './support.ts';

afterAll(removeSynthOutput);

const app = newApp();
const stack = new cdk.Stack(app, 'TwoPipelines');
const vpc = new ec2.Vpc(stack, 'Vpc', {
  maxAzs: 2,
  natGateways: 1,
  subnetConfiguration: [
    { name: 'public', subnetType: ec2.SubnetType.PUBLIC },
    { name: 'functions', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
    { name: 'database', subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
  ],
});
const consumerOf = (pipeline: ChargePipeline, id: string, pipelineName?: string) => {
  const again = id.includes('Again');
  const login = pipeline.addConsumerDatabaseLogin(`${id}Login`, again ? { role: 'receipts_again', schemas: ['receipts_again'] } : { role: 'receipt_notifier', schemas: ['outcome_consumer', 'receipts'] });
  return new OutcomeConsumer(stack, id, {
    consumerName: 'receipts',
    policy: 'at-least-once',
    eventBus: pipeline.eventBus,
    detailTypes: ['Charge Succeeded'],
    entry: path.join(PROJECT_ROOT, 'lambdas', 'consumers', 'receipts', 'handler.ts'),
    vpc,
    securityGroup: pipeline.functionsSecurityGroup,
    databaseSecret: login.secret,
    alarmTopic: pipeline.alarmTopic,
    metricsNamespace: pipeline.metricsNamespace,
    ...(pipelineName ? { pipelineName } : {}),
  });
};
const eu = new ChargePipeline(stack, 'Eu', { vpc, pipelineName: 'payments-eu', exampleConsumer: false });
const us = new ChargePipeline(stack, 'Us', { vpc, pipelineName: 'payments-us', exampleConsumer: false });
const euReceipts = consumerOf(eu, 'EuReceipts', eu.pipelineName);
const usReceipts = consumerOf(us, 'UsReceipts', us.pipelineName);
// Two more without a pipelineName: still apart (a name unique to each construct instance).
const a = consumerOf(eu, 'EuReceiptsAgain');
const b = consumerOf(us, 'UsReceiptsAgain');
const resources = Template.fromStack(stack).toJSON().Resources as Record<string, CfnResource>;
const alarmNames = (c: OutcomeConsumer) => c.alarms.map((x) => resources[logicalId(x.alarm)]!.Properties!.AlarmName as string);

describe('two pipelines, a consumer named receipts in each', () => {
  it('their functions publish under their own pipeline name', () => {
    const env = (c: OutcomeConsumer) => resources[logicalId(c.function)]!.Properties!.Environment.Variables;
    expect(env(euReceipts)).toMatchObject({ PIPELINE_NAME: 'payments-eu', POWERTOOLS_SERVICE_NAME: 'receipts' });
    expect(env(usReceipts)).toMatchObject({ PIPELINE_NAME: 'payments-us' });
    expect(env(a).PIPELINE_NAME).not.toBe(env(b).PIPELINE_NAME);
  });

  it('every alarm on an app metric names its own pipeline in its dimensions', () => {
    const dimensions = (c: OutcomeConsumer, name: string) => resources[logicalId(c.alarms.find((x) => x.name === name)!.alarm)]!.Properties!.Dimensions;
    for (const name of ['ConsumerPoisonEvents', 'ConsumerEffectsAbandoned', 'ConsumerEffectsFailed']) {
      expect(dimensions(euReceipts, name)).toEqual(expect.arrayContaining([{ Name: 'pipeline', Value: 'payments-eu' }, { Name: 'consumer', Value: 'receipts' }]));
      expect(dimensions(usReceipts, name)).toEqual(expect.arrayContaining([{ Name: 'pipeline', Value: 'payments-us' }]));
    }
    expect(euReceipts.metric('EffectsFailed').dimensions).toEqual({ service: 'receipts', consumer: 'receipts', policy: 'at-least-once', pipeline: 'payments-eu' });
  });

  it('their alarms have distinct names, named after the pipeline by default', () => {
    expect(alarmNames(euReceipts)[0]).toBe('payments-eu-receipts-ConsumerDeadLetterQueueNotEmpty');
    expect(alarmNames(usReceipts)[0]).toBe('payments-us-receipts-ConsumerDeadLetterQueueNotEmpty');
    const all = ofType(resources, 'AWS::CloudWatch::Alarm').map(([, r]) => r.Properties!.AlarmName as string);
    expect(new Set(all).size).toBe(all.length);
  });

  it('refuses a pipelineName that cannot be a dimension value', () => {
    expect(() => consumerOf(new ChargePipeline(stack, 'Third', { vpc, exampleConsumer: false }), 'Bad', 'not a name!')).toThrow(/pipelineName must be 1-64 letters/);
  });
});
