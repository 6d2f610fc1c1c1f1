// The local event source must behave like Lambda's SQS event source mapping with
// ReportBatchItemFailures, against a real SQS API (fauxqs, shaped like the stack's queues):
// partial failures come back with a growing ApproximateReceiveCount, maxReceiveCount moves them to
// the DLQ, a thrown error / a timeout / an invalid response fails the whole batch, and whatever
// succeeded is deleted.
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { GetQueueAttributesCommand, ReceiveMessageCommand, SendMessageBatchCommand, SendMessageCommand } from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { failedIdsOf, SqsEventSource, type InvocationReport, type SqsHandler } from '../../local/event-source.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';

let sqs: LocalSqs;
let source: SqsEventSource | undefined;

beforeEach(async () => {
  // A one-second visibility timeout makes a redelivery take a second instead of six minutes.
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 1, maxReceiveCount: 3 });
});

afterEach(async () => {
  await source?.stop(5_000);
  source = undefined;
  await sqs.stop();
});

async function send(bodies: readonly { body: string; group: string }[]): Promise<void> {
  for (let i = 0; i < bodies.length; i += 10) {
    await sqs.client.send(
      new SendMessageBatchCommand({
        QueueUrl: sqs.queueUrl,
        Entries: bodies.slice(i, i + 10).map((b, j) => ({
          Id: `e${j}`,
          MessageBody: b.body,
          MessageGroupId: b.group,
          MessageDeduplicationId: createHash('sha256').update(`${b.group}:${b.body}`).digest('hex'),
        })),
      }),
    );
  }
}

function start(handler: SqsHandler, options: { concurrency?: number; functionTimeoutMs?: number; batchSize?: number; waitTimeSeconds?: number } = {}) {
  const reports: InvocationReport[] = [];
  source = new SqsEventSource({
    client: sqs.client,
    queueUrl: sqs.queueUrl,
    queueArn: sqs.queueArn,
    region: sqs.region,
    handler,
    concurrency: options.concurrency ?? 2,
    batchSize: options.batchSize ?? 10,
    functionTimeoutMs: options.functionTimeoutMs ?? 5_000,
    waitTimeSeconds: options.waitTimeSeconds ?? 1,
    onInvocation: (r) => reports.push(r),
  });
  source.start();
  return reports;
}

async function until(condition: () => boolean, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(20);
  }
}

async function untilAsync(condition: () => Promise<boolean>, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await sleep(50);
  }
}

async function depth(url: string): Promise<number> {
  const out = await sqs.client.send(
    new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] }),
  );
  return Number(out.Attributes?.ApproximateNumberOfMessages ?? 0) + Number(out.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0);
}

async function drain(url: string): Promise<SQSRecord[]> {
  // What is left in a queue, received with a visibility long enough not to see a message twice.
  const out = await sqs.client.send(
    new ReceiveMessageCommand({ QueueUrl: url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, VisibilityTimeout: 30, MessageSystemAttributeNames: ['All'] }),
  );
  return (out.Messages ?? []).map((m) => ({ body: m.Body, attributes: m.Attributes }) as unknown as SQSRecord);
}

const md5 = (text: string) => createHash('md5').update(text).digest('hex');

describe('SqsEventSource (Lambda SQS event source, ReportBatchItemFailures)', () => {
  it('builds the SQSEvent and context as Lambda does', async () => {
    await sqs.client.send(
      new SendMessageCommand({
        QueueUrl: sqs.queueUrl,
        MessageBody: '{"hello":"world"}',
        MessageGroupId: 'g-1',
        MessageDeduplicationId: 'd-1',
        MessageAttributes: { traceparent: { DataType: 'String', StringValue: 'abc' }, blob: { DataType: 'Binary', BinaryValue: Buffer.from('hi') } },
      }),
    );
    // The context's clock, read between two readings of ours: its deadline is fixed, 3 s after the
    // invocation began (between start() and the handler's entry), and it runs down with the clock.
    type Reading = { before: number; remaining: number; after: number };
    const read = (context: Context): Reading => {
      const before = Date.now();
      const remaining = context.getRemainingTimeInMillis();
      return { before, remaining, after: Date.now() };
    };
    let seen: { event: SQSEvent; context: Context; entered: number; first: Reading; later: Reading } | undefined;
    const started = Date.now();
    start(
      async (event, context) => {
        const entered = Date.now();
        const first = read(context);
        await sleep(60);
        seen = { event, context, entered, first, later: read(context) };
        return { batchItemFailures: [] };
      },
      { functionTimeoutMs: 3_000 },
    );
    await until(() => seen !== undefined);
    const record = seen!.event.Records[0]!;
    expect(seen!.event.Records).toHaveLength(1);
    expect(record).toMatchObject({
      body: '{"hello":"world"}',
      md5OfBody: md5('{"hello":"world"}'),
      eventSource: 'aws:sqs',
      eventSourceARN: sqs.queueArn,
      awsRegion: 'us-east-1',
      messageAttributes: {
        traceparent: { stringValue: 'abc', stringListValues: [], binaryListValues: [], dataType: 'String' },
        blob: { binaryValue: Buffer.from('hi').toString('base64'), stringListValues: [], binaryListValues: [], dataType: 'Binary' },
      },
    });
    expect(record.messageId).toMatch(/\S/);
    expect(record.receiptHandle).toMatch(/\S/);
    expect(Object.keys(record.attributes).sort()).toEqual(
      ['ApproximateFirstReceiveTimestamp', 'ApproximateReceiveCount', 'MessageDeduplicationId', 'MessageGroupId', 'SenderId', 'SentTimestamp', 'SequenceNumber'].sort(),
    );
    expect(record.attributes).toMatchObject({ ApproximateReceiveCount: '1', MessageGroupId: 'g-1', MessageDeduplicationId: 'd-1' });
    const ctx = seen!.context;
    expect(ctx.functionName).toBe('charge');
    expect(ctx.invokedFunctionArn).toBe('arn:aws:lambda:us-east-1:000000000000:function:charge');
    expect(ctx.awsRequestId).toMatch(/^[0-9a-f-]{36}$/);
    const { first, later, entered } = seen!;
    // deadline − now = remaining, so the deadline lies in [before + remaining, after + remaining] of each reading.
    for (const r of [first, later]) {
      expect(r.before + r.remaining).toBeLessThanOrEqual(entered + 3_000);
      expect(r.after + r.remaining).toBeGreaterThanOrEqual(started + 3_000);
    }
    // The same deadline both times: the clock ran down by exactly the time that passed between them.
    expect(later.before + later.remaining).toBeLessThanOrEqual(first.after + first.remaining);
    expect(later.after + later.remaining).toBeGreaterThanOrEqual(first.before + first.remaining);
    expect(later.remaining).toBeLessThan(first.remaining);
  });

  it('redelivers a record reported failed with a growing ApproximateReceiveCount, then moves it to the DLQ; deletes the rest', async () => {
    await send([
      { body: 'ok-1', group: 'a' },
      { body: 'poison', group: 'b' },
      { body: 'ok-2', group: 'c' },
    ]);
    const poisonCounts: number[] = [];
    const okSeen: string[] = [];
    const reports = start(async (event): Promise<SQSBatchResponse> => {
      const failures = [];
      for (const r of event.Records) {
        if (r.body === 'poison') {
          poisonCounts.push(Number(r.attributes.ApproximateReceiveCount));
          failures.push({ itemIdentifier: r.messageId });
        } else okSeen.push(r.body);
      }
      return { batchItemFailures: failures };
    });
    // maxReceiveCount 3: three deliveries, then the queue moves it to the DLQ on the next receive.
    await until(() => poisonCounts.length === 3);
    await untilAsync(async () => (await depth(sqs.dlqUrl)) === 1);
    await source!.stop();
    const dlq = await drain(sqs.dlqUrl);
    expect(poisonCounts).toEqual([1, 2, 3]);
    expect(okSeen.sort()).toEqual(['ok-1', 'ok-2']); // each once: deleted after success
    expect(dlq.map((m) => m.body)).toEqual(['poison']);
    expect(await drain(sqs.queueUrl)).toEqual([]);
    const counters = source!.counters();
    expect(counters).toMatchObject({ deleted: 2, failedRecords: 3, redeliveries: 2 });
    expect(reports.filter((r) => r.outcome === 'partial').length).toBe(3);
  });

  it('treats a thrown error as a failure of the whole batch', async () => {
    await send(Array.from({ length: 5 }, (_, i) => ({ body: `m${i}`, group: `g${i}` })));
    let firstBatch: string[] | null = null;
    const counts = new Map<string, number[]>();
    start(
      async (event) => {
        for (const r of event.Records) counts.set(r.messageId, [...(counts.get(r.messageId) ?? []), Number(r.attributes.ApproximateReceiveCount)]);
        if (firstBatch === null) {
          firstBatch = event.Records.map((r) => r.messageId);
          throw new Error('database unreachable');
        }
        return undefined; // no response at all: every record succeeded
      },
      { concurrency: 1 },
    );
    await until(() => source!.counters().deleted === 5);
    // Every record of the failed batch came back once more; nothing of it had been deleted.
    expect(firstBatch!.length).toBeGreaterThan(0);
    for (const id of firstBatch!) expect(counts.get(id)).toEqual([1, 2]);
    expect(source!.counters()).toMatchObject({ handlerErrors: 1, deleted: 5, failedRecords: firstBatch!.length });
    expect(await drain(sqs.queueUrl)).toEqual([]);
  });

  it('treats a timeout as a failure of the whole batch', async () => {
    await send([
      { body: 'slow', group: 'x' },
      { body: 'fast', group: 'y' },
    ]);
    let calls = 0;
    // The first invocation returns only once the source has given up on it (its timeout decided,
    // reported): however slow the machine, it can only be too late — never a sleep that must be long enough.
    const reports: InvocationReport[] = start(
      async (event) => {
        calls += 1;
        if (calls === 1) await until(() => reports.some((r) => r.outcome === 'timeout'));
        return { batchItemFailures: event.Records.length > 0 ? [] : [] };
      },
      { concurrency: 1, functionTimeoutMs: 300 },
    );
    await until(() => source!.counters().deleted === 2);
    expect(reports[0]).toMatchObject({ outcome: 'timeout', deleted: 0 });
    expect(reports[0]!.failedMessageIds).toHaveLength(reports[0]!.event.Records.length);
    expect(source!.counters().timeouts).toBe(1);
  });

  it('treats an itemIdentifier that is not in the batch as a failure of the whole batch', async () => {
    await send([{ body: 'only', group: 'z' }]);
    let calls = 0;
    const reports = start(async () => {
      calls += 1;
      return calls === 1 ? { batchItemFailures: [{ itemIdentifier: 'not-a-message-id' }] } : { batchItemFailures: [] };
    });
    await until(() => source!.counters().deleted === 1);
    expect(reports[0]).toMatchObject({ outcome: 'invalid_response', deleted: 0 });
    expect(reports[1]!.event.Records[0]!.attributes.ApproximateReceiveCount).toBe('2');
  });

  it('runs at most `concurrency` invocations at once, and never two batches of one message group', async () => {
    // 40 messages in 4 groups: FIFO keeps each group to one in-flight batch.
    await send(Array.from({ length: 40 }, (_, i) => ({ body: `m${i}`, group: `g${i % 4}` })));
    let running = 0;
    let maxRunning = 0;
    const busyGroups = new Set<string>();
    const overlaps: string[] = [];
    const order = new Map<string, number[]>();
    start(
      async (event) => {
        running += 1;
        maxRunning = Math.max(maxRunning, running);
        const groups = new Set(event.Records.map((r) => r.attributes.MessageGroupId!));
        for (const g of groups) {
          if (busyGroups.has(g)) overlaps.push(g);
          busyGroups.add(g);
        }
        for (const r of event.Records) order.set(r.attributes.MessageGroupId!, [...(order.get(r.attributes.MessageGroupId!) ?? []), Number(r.body.slice(1))]);
        await sleep(15);
        for (const g of groups) busyGroups.delete(g);
        running -= 1;
        return { batchItemFailures: [] };
      },
      { concurrency: 3 },
    );
    await until(() => source!.counters().deleted === 40);
    expect(maxRunning).toBeLessThanOrEqual(3);
    expect(overlaps).toEqual([]);
    // Per group, in send order.
    for (const [, bodies] of order) expect(bodies).toEqual([...bodies].sort((a, b) => a - b));
  });

  it('stop() aborts the long poll at once and waits for the batch in flight', async () => {
    await send([{ body: 'in-flight', group: 'q' }]);
    let finished = false;
    const stopping = Promise.withResolvers<void>();
    // Two pollers: one takes the message, the other sits in a 20 s long poll. The batch ends only
    // after stop() was called, so stop() must wait for it; and it must abort the long poll, or it
    // could not drain within its 10 s bound (the poll alone would take 20 s).
    start(
      async () => {
        await stopping.promise;
        finished = true;
        return { batchItemFailures: [] };
      },
      { waitTimeSeconds: 20 },
    );
    await until(() => source!.counters().inFlight === 1);
    const stopped = source!.stop(10_000);
    stopping.resolve();
    expect(await stopped).toEqual({ drained: true, abandoned: 0 });
    expect(finished).toBe(true);
    expect(source!.counters().deleted).toBe(1);
  });
});

describe('failedIdsOf (reading a partial batch response as Lambda does)', () => {
  const batch = [{ messageId: 'a' }, { messageId: 'b' }] as SQSRecord[];
  it.each([
    [undefined, []],
    [null, []],
    [{}, []],
    [{ batchItemFailures: [] }, []],
    [{ batchItemFailures: null }, []],
    [{ batchItemFailures: [{ itemIdentifier: 'b' }] }, ['b']],
    [{ batchItemFailures: [{ itemIdentifier: 'a' }, { itemIdentifier: 'a' }] }, ['a']],
  ])('%j → %j', (response, expected) => {
    expect(failedIdsOf(response, batch)).toEqual(expected);
  });
  it.each([[{ batchItemFailures: [{ itemIdentifier: '' }] }], [{ batchItemFailures: [{ itemIdentifier: 'zzz' }] }], [{ batchItemFailures: [{}] }], [{ batchItemFailures: 'a' }], ['a string']])(
    'invalid: %j fails the whole batch',
    (response) => {
      expect(failedIdsOf(response, batch)).toBeNull();
    },
  );
});
