// `npm run produce` without a queue URL: it looks up the queue the default app creates for an
// environment (<environment>-charge-requests.fifo, stack ChargePipeline-<environment>), and says how
// to get the URL from the stack's outputs when there is no such queue — it used to look up
// charge-requests.fifo, a name no deployed stack has. The real @aws-sdk/client-sqs against fauxqs.
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { main, queueNameFor, USAGE } from '../lambdas/producer/cli.ts';
import { stackNameFor } from '../lib/charge-pipeline-stack.ts';
import { synthDefaultApp } from './infra/support.ts';
import { startLocalSqs, type LocalSqs } from '../local/sqs.ts';

let sqs: LocalSqs;
beforeAll(async () => {
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
});
afterAll(async () => {
  await sqs?.stop();
});

const order = ['--order', 'lookup-1', '--amount', '1299', '--currency', 'eur', '--customer', 'cus_Lookup', '--payment-method', 'pm_card_visa'];
async function run(args: string[], env: NodeJS.ProcessEnv = {}) {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(args, { AWS_REGION: 'us-east-1', ...env }, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, out, err };
}

describe('npm run produce: which queue without --queue-url', () => {
  it('is the name the default app gives the queue of the environment (checked against the synthesized stack)', () => {
    expect(queueNameFor('prod', false)).toBe(`prod-${PIPELINE.queueName}`);
    expect(queueNameFor(undefined, false)).toBe(`dev-${PIPELINE.queueName}`);
    expect(queueNameFor(undefined, true)).toBe(PIPELINE.queueName); // the local runtime's (npm start)
    for (const environment of ['dev', 'prod']) {
      const { stack, resources } = synthDefaultApp({ environment });
      expect(stack.stackName).toBe(stackNameFor(environment));
      const queueNames = Object.values(resources).filter((r) => r.Type === 'AWS::SQS::Queue').map((r) => r.Properties?.QueueName);
      expect(queueNames).toContain(queueNameFor(environment, false));
    }
  });

  it('with no such queue: fails saying to pass the stack\'s QueueUrl output, and sends nothing', async () => {
    const { code, err } = await run([...order, '--endpoint', sqs.endpoint, '--environment', 'staging']);
    expect(code).toBe(1);
    expect(err.join('\n')).toMatch(/no queue named staging-charge-requests\.fifo in us-east-1: pass --queue-url with the pipeline stack's QueueUrl output \(aws cloudformation describe-stacks --stack-name <stack> --query "Stacks\[0\]\.Outputs\[\?OutputKey=='QueueUrl'\]\.OutputValue" --output text\)/);
  });

  it('finds and sends to the environment\'s queue (--environment, or CHARGE_PIPELINE_ENVIRONMENT)', async () => {
    const fifo = { FifoQueue: 'true', ContentBasedDeduplication: 'false' };
    const { QueueUrl } = await sqs.client.send(new CreateQueueCommand({ QueueName: `dev-${PIPELINE.queueName}`, Attributes: fifo }));
    const { code, out } = await run([...order, '--endpoint', sqs.endpoint], { CHARGE_PIPELINE_ENVIRONMENT: 'dev' });
    expect(code).toBe(0);
    expect(out[0]).toMatch(/^sent lookup-1 \S+$/);
    const received = await sqs.client.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }));
    expect(received.Messages?.map((m) => JSON.parse(m.Body!).orderId)).toEqual(['lookup-1']);
  });

  it('the usage says where the URL comes from', () => {
    expect(USAGE).toContain("Stacks[0].Outputs[?OutputKey=='QueueUrl'].OutputValue");
    expect(USAGE).toContain(`<name>-${PIPELINE.queueName}`);
  });
});
