// The receipt notifier's Lambda handler on the real path: the outbox relay's EventBridgePublisher
// puts outcome events on the fake bus (PutEvents over HTTP), a local rule forwards them to a
// fauxqs standard queue as EventBridge would (the whole event as the body), and the handler works
// what an SQS event source receives. It migrates its own schemas on start (never the pipeline's
// tables), answers with a partial batch response, and its metrics name the consumer and its policy.
import { randomUUID } from 'node:crypto';
import { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EventBridgePublisher } from '../../lambdas/events/outbox.ts';
import { CONSUMER_METRICS } from '../../lambdas/consumers/kit/lambda.ts';
import { RECEIPT_DETAIL_TYPES } from '../../lambdas/consumers/receipts/contract.ts';
import { startFakeEmail, type FakeEmail } from '../../local/fake-email/server.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { createStandardQueue, LocalEventRules } from '../../local/event-rules.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { deliverOnce, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { captureOutput as capture } from '../support/output.ts';

let db: TestDatabase;
let email: FakeEmail;
let bus: FakeEventBridge;
let sqs: LocalSqs;
let queue: QueueRef;
let rules: LocalEventRules;
let handler: SqsHandler;
let resetResources: () => Promise<void>;
const saved = { ...process.env };

beforeAll(async () => {
  db = await createTestDatabase('receipts_handler');
  email = await startFakeEmail({ idempotency: false });
  bus = await startFakeEventBridge();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  const q = await createStandardQueue(sqs.client, 'receipts-test');
  queue = { client: sqs.client, queueUrl: q.url, queueArn: q.arn, region: sqs.region };
  rules = new LocalEventRules({
    bus,
    sqs: sqs.client,
    region: sqs.region,
    rules: [{ name: 'receipts', pattern: { source: ['payments.charges'], detailType: [...RECEIPT_DETAIL_TYPES] }, queueUrl: q.url }],
  });
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    EMAIL_API_KEY: 're_test_handler',
    RECEIPTS_POLICY: 'at-least-once',
    POWERTOOLS_METRICS_NAMESPACE: 'ConsumerTest',
    POWERTOOLS_LOG_LEVEL: 'INFO',
    PIPELINE_NAME: 'payments-eu', // set by the OutcomeConsumer construct: the pipeline whose events it consumes
  });
  delete process.env.POWERTOOLS_METRICS_DISABLED;
  delete process.env.POWERTOOLS_DEV;
  delete process.env.EMAIL_API_BASE; // set by the first test, after it saw the refusal
  handler = (await import('../../lambdas/consumers/receipts/handler.ts')).handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources?.();
  process.env = saved;
  await sqs?.stop();
  await bus?.close();
  await email?.close();
  await db?.drop();
});

function outcome(eventType: string, orderId: string) {
  const eventId = randomUUID();
  const operationId = randomUUID();
  return {
    eventId,
    operationId,
    eventType,
    payload: { version: 1, eventId, operationId, orderId, status: 'succeeded', amount: 2500, currency: 'usd', externalId: 'pi_1', reason: null, occurredAt: new Date().toISOString(), sequence: 1 },
  };
}

describe('the receipt notifier Lambda', () => {
  it('refuses to start without EMAIL_API_BASE, sends every record back, and starts once it is set', async () => {
    await queue.client.send(new SendMessageCommand({ QueueUrl: queue.queueUrl, MessageBody: '{}' }));
    const { result, lines } = await capture(() => deliverOnce(queue, handler));
    expect(result.response?.batchItemFailures).toHaveLength(1);
    expect(lines.join('\n')).toMatch(/EMAIL_API_BASE is not set/);
    process.env.EMAIL_API_BASE = email.url;
    const again = await capture(() => deliverOnce(queue, handler));
    expect(again.result.response?.batchItemFailures).toEqual([]); // '{}' is poison now: recorded, acknowledged
  });

  it('sends a receipt for Charge Succeeded published on the bus; the bus re-sending it is absorbed; other types never reach it', async () => {
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const paid = outcome('Charge Succeeded', 'order-h1');
    const declined = outcome('Charge Failed', 'order-h2');
    expect((await publisher.publish([paid, declined])).every((r) => r.ok)).toBe(true);
    expect((await publisher.publish([paid])).every((r) => r.ok)).toBe(true); // an outbox re-send: new envelope id
    await rules.flush();
    const { result, lines } = await capture(() => deliverOnce(queue, handler));
    expect(result.messages).toHaveLength(2);
    expect(result.response?.batchItemFailures, lines.join('\n')).toEqual([]);
    expect(email.sent().map((m) => m.subject)).toEqual(['Receipt for order order-h1']);

    const emf = lines.map((l) => JSON.parse(l) as Record<string, any>).filter((l) => l._aws);
    expect(emf).toHaveLength(1);
    const directive = emf[0]!._aws.CloudWatchMetrics[0];
    expect(directive.Namespace).toBe('ConsumerTest');
    expect(directive.Dimensions[0]).toEqual(expect.arrayContaining(['consumer', 'policy', 'pipeline', 'service']));
    expect(directive.Dimensions[0]).toHaveLength(4); // exactly the construct's alarm dimensions
    expect(emf[0]).toMatchObject({ consumer: 'receipts', policy: 'at-least-once', pipeline: 'payments-eu', [CONSUMER_METRICS.done]: 1, [CONSUMER_METRICS.duplicates]: 1, [CONSUMER_METRICS.effectCalls]: 1 });
    const logs = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.message === 'effect done');
    expect(logs[0]).toMatchObject({ consumer: 'receipts', policy: 'at-least-once' });
  });

  it('an authorization is no receipt; its capture is, for the amount captured', async () => {
    const publisher = new EventBridgePublisher(
      new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }),
      { busName: 'charge-outcomes', source: 'payments.charges' },
    );
    const before = email.sent().length;
    const authorized = outcome('Charge Authorized', 'order-h3');
    const captured = outcome('Charge Captured', 'order-h3');
    // The capture's detail (authorizationOutcomeDetailSchema): its own operation, the charge's, the amount it took.
    Object.assign(captured.payload, { amount: 1800, kind: 'capture', chargeOperationId: authorized.operationId });
    expect((await publisher.publish([authorized, captured])).every((r) => r.ok)).toBe(true);
    await rules.flush();
    const { result, lines } = await capture(() => deliverOnce(queue, handler));
    expect(result.messages).toHaveLength(1);
    expect(result.response?.batchItemFailures, lines.join('\n')).toEqual([]);
    const sent = email.sent().slice(before);
    expect(sent.map((m) => m.subject)).toEqual(['Receipt for order order-h3']);
    expect(sent[0]!.text).toContain('We received your payment of 18.00 USD for order order-h3');
  });

  it('created only its own schemas: the kit’s and the notifier’s, each with its own migration record', async () => {
    const { rows } = await db.pool.query<{ table_schema: string; table_name: string }>(
      `SELECT table_schema, table_name FROM information_schema.tables WHERE table_schema IN ('outcome_consumer', 'receipts') ORDER BY 1, 2`,
    );
    expect(rows.map((r) => `${r.table_schema}.${r.table_name}`)).toEqual([
      'outcome_consumer.inbox',
      'outcome_consumer.operation_heads',
      'outcome_consumer.poison_events',
      'outcome_consumer.schema_migrations',
      'receipts.schema_migrations',
      'receipts.sent_receipts',
    ]);
    const pipeline = await db.pool.query<{ name: string }>('SELECT name FROM public.schema_migrations ORDER BY name');
    expect(pipeline.rows.every((r) => !r.name.includes('receipt') && !r.name.includes('consumer'))).toBe(true);
  });
});
