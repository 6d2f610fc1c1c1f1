// Lambda SQS events built from messages ACTUALLY received from a (fauxqs) queue, the way the Lambda
// event source mapping builds them, and a one-shot "event source" that receives, invokes a handler,
// deletes what it acknowledged and releases what it reported failed.
//
// Record shape: AWS Lambda developer guide, "Using Lambda with Amazon SQS" (example SQS message
// event, FIFO queue): camelCase keys, system attributes as strings, message attributes as
// { stringValue, binaryValue (base64), stringListValues, binaryListValues, dataType }.
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  ReceiveMessageCommand,
  type Message,
  type MessageAttributeValue,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent, SQSMessageAttribute, SQSMessageAttributes, SQSRecord, SQSRecordAttributes } from 'aws-lambda';

export interface QueueRef {
  readonly client: SQSClient;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly region: string;
}

function messageAttribute(value: MessageAttributeValue): SQSMessageAttribute {
  return {
    ...(value.StringValue !== undefined ? { stringValue: value.StringValue } : {}),
    ...(value.BinaryValue !== undefined ? { binaryValue: Buffer.from(value.BinaryValue).toString('base64') } : {}),
    stringListValues: value.StringListValues ?? [],
    binaryListValues: (value.BinaryListValues ?? []).map((b) => Buffer.from(b).toString('base64')),
    dataType: (value.DataType ?? 'String') as SQSMessageAttribute['dataType'],
  };
}

/** One ReceiveMessage result (asked with MessageSystemAttributeNames ['All']) as a Lambda SQS record. */
export function toSqsRecord(message: Message, queue: Pick<QueueRef, 'queueArn' | 'region'>): SQSRecord {
  if (!message.MessageId || !message.ReceiptHandle || message.Body === undefined) throw new Error('toSqsRecord: message lacks MessageId, ReceiptHandle or Body');
  const a = message.Attributes ?? {};
  const attributes: SQSRecordAttributes = {
    ApproximateReceiveCount: a.ApproximateReceiveCount ?? '1',
    SentTimestamp: a.SentTimestamp ?? String(Date.now()),
    SenderId: a.SenderId ?? '000000000000',
    ApproximateFirstReceiveTimestamp: a.ApproximateFirstReceiveTimestamp ?? String(Date.now()),
    ...(a.SequenceNumber ? { SequenceNumber: a.SequenceNumber } : {}),
    ...(a.MessageGroupId ? { MessageGroupId: a.MessageGroupId } : {}),
    ...(a.MessageDeduplicationId ? { MessageDeduplicationId: a.MessageDeduplicationId } : {}),
  };
  const messageAttributes: SQSMessageAttributes = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) messageAttributes[name] = messageAttribute(value);
  return {
    messageId: message.MessageId,
    receiptHandle: message.ReceiptHandle,
    body: message.Body,
    attributes,
    messageAttributes,
    md5OfBody: message.MD5OfBody ?? '',
    ...(message.MD5OfMessageAttributes ? { md5OfMessageAttributes: message.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN: queue.queueArn,
    awsRegion: queue.region,
  };
}

export function toSqsEvent(messages: readonly Message[], queue: Pick<QueueRef, 'queueArn' | 'region'>): SQSEvent {
  return { Records: messages.map((m) => toSqsRecord(m, queue)) };
}

/**
 * Receive up to `max` messages, in several receives if needed (fauxqs hands out one message per
 * group per receive, and hides a group while a message of it is in flight). Messages stay in flight.
 */
export async function receiveMessages(queue: QueueRef, max = 10, options: { visibilityTimeoutSeconds?: number; attempts?: number } = {}): Promise<Message[]> {
  const got: Message[] = [];
  for (let attempt = 0; attempt < (options.attempts ?? 3) && got.length < max; attempt++) {
    const out = await queue.client.send(
      new ReceiveMessageCommand({
        QueueUrl: queue.queueUrl,
        MaxNumberOfMessages: Math.min(10, max - got.length),
        WaitTimeSeconds: 0,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
        ...(options.visibilityTimeoutSeconds !== undefined ? { VisibilityTimeout: options.visibilityTimeoutSeconds } : {}),
      }),
    );
    got.push(...(out.Messages ?? []));
  }
  return got;
}

/** What the event source mapping does after the function returns: delete the acknowledged, release the failed. */
export async function settleBatch(queue: QueueRef, messages: readonly Message[], response: SQSBatchResponse | void | undefined): Promise<{ deleted: string[]; released: string[] }> {
  const failed = new Set((response?.batchItemFailures ?? []).map((f) => f.itemIdentifier));
  const deleted: string[] = [];
  const released: string[] = [];
  for (const message of messages) {
    if (failed.has(message.MessageId!)) {
      // Visible again at once (a real mapping waits for the visibility timeout; tests need no wait).
      await queue.client.send(new ChangeMessageVisibilityCommand({ QueueUrl: queue.queueUrl, ReceiptHandle: message.ReceiptHandle, VisibilityTimeout: 0 }));
      released.push(message.MessageId!);
    } else {
      await queue.client.send(new DeleteMessageCommand({ QueueUrl: queue.queueUrl, ReceiptHandle: message.ReceiptHandle }));
      deleted.push(message.MessageId!);
    }
  }
  return { deleted, released };
}

/** A Lambda context whose clock runs down from `remainingMs`. */
export function lambdaContext(remainingMs = 60_000, functionName = 'charge'): Context {
  const deadline = Date.now() + remainingMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${functionName}`,
    memoryLimitInMB: '512',
    awsRequestId: `req-${Math.random().toString(16).slice(2)}`,
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'local',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}

export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | void>;

/**
 * One turn of an event source mapping: receive up to `max`, invoke, settle. Returns what happened
 * (an empty queue gives an empty event and no invocation).
 */
export async function deliverOnce(
  queue: QueueRef,
  handler: SqsHandler,
  options: { max?: number; remainingMs?: number } = {},
): Promise<{ messages: Message[]; event: SQSEvent; response: SQSBatchResponse | null; deleted: string[]; released: string[] }> {
  const messages = await receiveMessages(queue, options.max ?? 10);
  const event = toSqsEvent(messages, queue);
  if (messages.length === 0) return { messages, event, response: null, deleted: [], released: [] };
  const response = (await handler(event, lambdaContext(options.remainingMs ?? 60_000))) ?? { batchItemFailures: [] };
  const settled = await settleBatch(queue, messages, response);
  return { messages, event, response, ...settled };
}
