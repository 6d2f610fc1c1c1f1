// Partner events kept on the failure queue are replayed into the REAL stripe-events function and
// applied: the queue is a real SQS API (fauxqs) read by the real @aws-sdk/client-sqs, the function is
// invoked through the real @aws-sdk/client-lambda against a local Invoke API in front of the unchanged
// handler, on a real PostgreSQL and the fake Stripe. The messages are what AWS puts there:
//   - an on-failure destination record (AWS Lambda Developer Guide, "Capturing records of Lambda
//     asynchronous invocations": version, timestamp, requestContext {requestId, functionArn,
//     condition: RetriesExhausted, approximateInvokeCount}, requestPayload = the event,
//     responseContext {statusCode, executedVersion, functionError}, responsePayload);
//   - the EventBridge rule target's DLQ message, whose body is the event itself (Amazon EventBridge
//     User Guide, "Using dead-letter queues to process undelivered events").
import { LambdaClient } from '@aws-sdk/client-lambda';
import { CreateQueueCommand, GetQueueAttributesCommand, PurgeQueueCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import { findOperation } from '../../lambdas/payments/operations-store.ts';
import { partnerEventOf, redrivePartnerEvents } from '../../lambdas/stripe-events/redrive.ts';
import { runRedriveCli } from '../../lambdas/stripe-events/redrive-cli.ts';
import type { StripeEventJson } from '../../local/fake-stripe/webhooks.ts';
import { LOCAL_CREDENTIALS, startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { startLambdaEndpoint, type LambdaEndpoint } from '../ops/lambda-endpoint.ts';
import { chargeOrder } from '../support/orders.ts';
import { useHandlerHarness, type HandlerHarness } from './handler-harness.ts';
import { inboxRow, piEvent } from './support.ts';

let h: HandlerHarness;
useHandlerHarness('partner_redrive', (ready) => (h = ready));

const SOURCE = 'aws.partner/stripe.com/ed_test_redrive';
const FUNCTION = 'charges-stripe-events';
let sqs: LocalSqs;
let endpoint: LambdaEndpoint;
let queueUrl: string;
let lambda: LambdaClient;
/** How many of the next invocations fail as a crashed function would (FunctionError: Unhandled). */
let failNext = 0;

beforeAll(async () => {
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  // A standard queue, as the construct makes it (an on-failure destination cannot be FIFO).
  queueUrl = (await sqs.client.send(new CreateQueueCommand({ QueueName: 'partner-event-failures' }))).QueueUrl!;
  const handler = (await import('../../lambdas/stripe-events/handler.ts')).handler as unknown as (e: unknown, c: unknown) => Promise<unknown>;
  endpoint = await startLambdaEndpoint({
    [FUNCTION]: async (event, context) => {
      if (failNext > 0) {
        failNext--;
        throw new Error('connect ECONNREFUSED (the database is still down)');
      }
      // The function as the construct deploys it for the partner door.
      const saved = { input: process.env.STRIPE_EVENTS_INPUT, source: process.env.STRIPE_PARTNER_EVENT_SOURCE };
      Object.assign(process.env, { STRIPE_EVENTS_INPUT: 'eventbridge', STRIPE_PARTNER_EVENT_SOURCE: SOURCE });
      try {
        return await handler(event, context);
      } finally {
        process.env.STRIPE_EVENTS_INPUT = saved.input;
        if (saved.source === undefined) delete process.env.STRIPE_PARTNER_EVENT_SOURCE;
        else process.env.STRIPE_PARTNER_EVENT_SOURCE = saved.source;
      }
    },
  });
  lambda = new LambdaClient({ endpoint: endpoint.url, region: 'us-east-1', credentials: LOCAL_CREDENTIALS, maxAttempts: 1 });
});
afterAll(async () => {
  lambda?.destroy();
  await endpoint?.close();
  await sqs?.stop();
});

function partnerEvent(event: StripeEventJson) {
  return { version: '0', id: `eb-${event.id}`, 'detail-type': event.type, source: SOURCE, account: '111122223333', time: '2026-12-02T06:00:00Z', region: 'us-east-1', resources: [], detail: event };
}

/** The record Lambda's on-failure destination sends once the async retries are spent. */
function onFailureRecord(event: StripeEventJson) {
  return {
    version: '1.0',
    timestamp: '2026-12-02T06:03:10.123Z',
    requestContext: {
      requestId: 'e4b46cbf-b738-xmpl-8880-a18cdf61200e',
      functionArn: `arn:aws:lambda:us-east-1:111122223333:function:${FUNCTION}:$LATEST`,
      condition: 'RetriesExhausted',
      approximateInvokeCount: 3,
    },
    requestPayload: partnerEvent(event),
    responseContext: { statusCode: 200, executedVersion: '$LATEST', functionError: 'Unhandled' },
    responsePayload: { errorType: 'Error', errorMessage: 'connect ECONNREFUSED 10.0.3.17:5432' },
  };
}

/** An operation Stripe left processing, now succeeded at Stripe: its succeeded event settles it. */
async function processingThenSucceeded() {
  h.stripe.fake.injectFault({}, 'processing');
  const [r] = await new ChargeEngine({ db: h.db.pool, gateway: h.stripe.gateway }).processRequests([chargeOrder()]);
  const op = (await findOperation(h.db.pool, r!.operationId))!;
  expect(op.status).not.toBe('succeeded');
  h.stripe.fake.settle(op.externalId!, 'succeeded');
  return { op, event: piEvent(h.stripe.fake.paymentIntents({ operationId: op.id })[0]!) };
}

const send = (body: unknown) => sqs.client.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: typeof body === 'string' ? body : JSON.stringify(body) }));
const depth = async () =>
  Number((await sqs.client.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }))).Attributes?.ApproximateNumberOfMessages);

describe('replaying the partner-event failure queue into the stripe-events function', () => {
  it('an on-failure destination record is replayed, recorded and applied: the operation settles, the message is gone', async () => {
    const { op, event } = await processingThenSucceeded();
    await send(onFailureRecord(event));

    const result = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(result.kept).toEqual([]);
    expect(result.replayed).toEqual([{ messageId: expect.any(String), stripeEventId: event.id }]);
    expect(endpoint.invocations.at(-1)!.event).toEqual(partnerEvent(event)); // the event itself, not the record
    expect(await inboxRow(h.db.pool, event.id)).toMatchObject({ source: 'eventbridge', outcome: 'settled' });
    expect(await findOperation(h.db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await depth()).toBe(0);
  });

  it('a message of the rule target\'s DLQ (the event itself) is replayed the same way', async () => {
    const { op, event } = await processingThenSucceeded();
    await send(partnerEvent(event));
    const result = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(result).toEqual({ replayed: [{ messageId: expect.any(String), stripeEventId: event.id }], kept: [] });
    expect(await findOperation(h.db.pool, op.id)).toMatchObject({ status: 'succeeded' });
  });

  it('a replay that fails again stays on the queue (taken once per run), and the next run records it; a second replay of a recorded event is a harmless duplicate', async () => {
    const { op, event } = await processingThenSucceeded();
    await send(onFailureRecord(event));
    failNext = 1;
    const first = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(first.replayed).toEqual([]);
    expect(first.kept).toEqual([{ messageId: expect.any(String), reason: expect.stringContaining('the function failed (Unhandled)') }]);
    expect(await inboxRow(h.db.pool, event.id)).toBeUndefined();
    expect(await depth()).toBe(1);

    const second = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(second.replayed.map((r) => r.stripeEventId)).toEqual([event.id]);
    expect(await findOperation(h.db.pool, op.id)).toMatchObject({ status: 'succeeded' });

    // The same event again (Lambda's retry had in fact recorded it): acknowledged, applied once.
    await send(partnerEvent(event));
    const again = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(again.replayed.map((r) => r.stripeEventId)).toEqual([event.id]);
    const { rows } = await h.db.pool.query('SELECT count(*)::int AS n FROM stripe_events WHERE event_id = $1', [event.id]);
    expect(rows[0].n).toBe(1);
  });

  it('a message that is no partner event is kept and said so; nothing is invoked', async () => {
    const before = endpoint.invocations.length;
    await send('not json at all');
    const result = await redrivePartnerEvents({ sqs: sqs.client, lambda, queueUrl, functionName: FUNCTION });
    expect(result).toEqual({ replayed: [], kept: [{ messageId: expect.any(String), reason: 'the body is not JSON' }] });
    expect(endpoint.invocations.length).toBe(before);
    expect(await depth()).toBe(1); // still there, visible
    await sqs.client.send(new PurgeQueueCommand({ QueueUrl: queueUrl }));
    expect(partnerEventOf(JSON.stringify({ requestContext: {}, requestPayload: 'x' }))).toEqual({ ok: false, reason: 'the invocation record has no event as requestPayload' });
  });

  it('the CLI prints the target and the depth without --yes, and replays with it', async () => {
    const { op, event } = await processingThenSucceeded();
    await send(onFailureRecord(event));
    const lines: string[] = [];
    const io = { out: (l: string) => lines.push(l), err: (l: string) => lines.push(l) };
    const args = ['--queue-url', queueUrl, '--function', FUNCTION, '--sqs-endpoint', sqs.endpoint, '--lambda-endpoint', endpoint.url];
    const env = { AWS_REGION: 'us-east-1' };
    expect(await runRedriveCli(args, io, env)).toBe(0);
    expect(lines).toEqual([`target: queue ${queueUrl} -> function ${FUNCTION} in us-east-1`, '1 message(s) waiting; run again with --yes to replay them']);
    expect(await inboxRow(h.db.pool, event.id)).toBeUndefined();

    lines.length = 0;
    expect(await runRedriveCli([...args, '--yes'], io, env)).toBe(0);
    expect(lines).toContainEqual(expect.stringMatching(new RegExp(`^replayed \\S+ ${event.id}$`)));
    expect(await findOperation(h.db.pool, op.id)).toMatchObject({ status: 'succeeded' });
    expect(await runRedriveCli(['--function', FUNCTION], io, {})).toBe(2);
  });
});
