// A local stand-in for Lambda's SQS event source mapping (with ReportBatchItemFailures), in front of
// the UNCHANGED charge handler. What it does, and where each behaviour comes from:
//
//   poller ──ReceiveMessage(≤ batchSize, all system attributes, long poll)──▶ records
//          ──SQSEvent, built field by field as Lambda builds it──▶ handler(event, context)
//          ──▶ returned: delete every record NOT in batchItemFailures (DeleteMessageBatch)
//              threw / timed out / invalid response: delete nothing (the whole batch failed)
//
//   - Failed records are left alone: they reappear when their visibility timeout ends, as with Lambda
//     (which does not change the visibility of failed records either).
//   - One in-flight batch per message group and "maxReceiveCount → DLQ" are the queue's own doing
//     (fauxqs honours FIFO group locking and the redrive policy; see local/sqs.ts), not emulated here.
//   - `concurrency` pollers, each with at most one invocation in flight: Lambda's maximum concurrency
//     of the event source (ScalingConfig.MaximumConcurrency).
//   - An invalid partial batch response (an itemIdentifier that is empty or not a message id of the
//     batch) fails the whole batch, as Lambda does; an empty or missing list means "all succeeded".
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  DeleteMessageBatchCommand,
  ReceiveMessageCommand,
  type Message,
  type MessageAttributeValue,
  type SQSClient,
} from '@aws-sdk/client-sqs';
import type { Context, SQSBatchResponse, SQSEvent, SQSMessageAttributes, SQSRecord, SQSRecordAttributes } from 'aws-lambda';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { invoke, type FunctionSettings } from './lambda-runtime.ts';

export type SqsHandler = (event: SQSEvent, context: Context) => Promise<SQSBatchResponse | void | undefined | null>;

export interface EventSourceOptions {
  readonly client: SQSClient;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly region: string;
  readonly handler: SqsHandler;
  /** Default 'charge'. */
  readonly functionName?: string;
  /** Default PIPELINE.chargeFunctionTimeoutSeconds (60 s), as deployed. */
  readonly functionTimeoutMs?: number;
  /** Records per invocation, 1-10. Default PIPELINE.batchSize (10). */
  readonly batchSize?: number;
  /** Pollers, i.e. invocations at once (the event source's maximum concurrency). Default 5. */
  readonly concurrency?: number;
  /** Long poll of each ReceiveMessage (Lambda uses 20 s). Stop aborts a poll at once. Default 20. */
  readonly waitTimeSeconds?: number;
  /** Called after each invocation, its deletes done. */
  readonly onInvocation?: (report: InvocationReport) => void;
  /** Receive and delete errors (the poller backs off and goes on). */
  readonly onError?: (error: unknown, during: 'receive' | 'delete') => void;
}

export type InvocationOutcome =
  /** Returned; every record not in batchItemFailures was deleted. */
  | 'ok'
  /** Returned with some batchItemFailures: those stay in the queue. */
  | 'partial'
  /** Threw: whole batch failed. */
  | 'error'
  /** Ran out of time: whole batch failed. */
  | 'timeout'
  /** Returned an itemIdentifier that is not a message id of the batch: whole batch failed. */
  | 'invalid_response';

export interface InvocationReport {
  readonly requestId: string;
  readonly event: SQSEvent;
  readonly outcome: InvocationOutcome;
  /** Message ids left in the queue to be delivered again. */
  readonly failedMessageIds: readonly string[];
  readonly deleted: number;
  readonly durationMs: number;
  readonly error?: unknown;
}

export interface EventSourceCounters {
  /** Invocations (one per non-empty receive). */
  readonly batches: number;
  /** Records handed to the handler, redeliveries included. */
  readonly records: number;
  /** Records whose ApproximateReceiveCount was above 1: seen before. */
  readonly redeliveries: number;
  /** Records deleted after the handler succeeded with them. */
  readonly deleted: number;
  /** Records left in the queue: reported in batchItemFailures or part of a failed batch. */
  readonly failedRecords: number;
  readonly handlerErrors: number;
  readonly timeouts: number;
  readonly invalidResponses: number;
  readonly receiveErrors: number;
  readonly deleteErrors: number;
  /** Invocations running now. */
  readonly inFlight: number;
  /** Timed-out invocations whose handler is still running in the background. */
  readonly zombies: number;
}

export interface StopResult {
  /** True when every invocation (timed-out ones included) finished within the bound. */
  readonly drained: boolean;
  /** Invocations still running when the bound ran out. */
  readonly abandoned: number;
}

/** The system attributes Lambda passes in a record, in the order it lists them. */
const RECORD_ATTRIBUTES = [
  'ApproximateReceiveCount',
  'AWSTraceHeader',
  'SentTimestamp',
  'SequenceNumber',
  'MessageGroupId',
  'SenderId',
  'MessageDeduplicationId',
  'ApproximateFirstReceiveTimestamp',
  'DeadLetterQueueSourceArn',
] as const;

/** An SQS message as Lambda puts it into an SQSEvent record. */
export function toSqsRecord(message: Message, queueArn: string, region: string): SQSRecord {
  const attributes: Record<string, string> = {};
  for (const name of RECORD_ATTRIBUTES) {
    const value = message.Attributes?.[name];
    if (value !== undefined) attributes[name] = value;
  }
  const messageAttributes: SQSMessageAttributes = {};
  for (const [name, value] of Object.entries(message.MessageAttributes ?? {})) messageAttributes[name] = toRecordAttribute(value);
  return {
    messageId: message.MessageId ?? '',
    receiptHandle: message.ReceiptHandle ?? '',
    body: message.Body ?? '',
    attributes: attributes as unknown as SQSRecordAttributes,
    messageAttributes,
    md5OfBody: message.MD5OfBody ?? '',
    ...(message.MD5OfMessageAttributes ? { md5OfMessageAttributes: message.MD5OfMessageAttributes } : {}),
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: region,
  };
}

/** Lambda's casing, binary values in base64, and the two always-empty list fields. */
function toRecordAttribute(value: MessageAttributeValue): SQSMessageAttributes[string] {
  return {
    ...(value.StringValue !== undefined ? { stringValue: value.StringValue } : {}),
    ...(value.BinaryValue !== undefined ? { binaryValue: Buffer.from(value.BinaryValue).toString('base64') } : {}),
    stringListValues: value.StringListValues ?? [],
    binaryListValues: (value.BinaryListValues ?? []).map((b) => Buffer.from(b).toString('base64')),
    dataType: value.DataType ?? 'String',
  };
}

/**
 * Which message ids failed, as Lambda reads a partial batch response. Null: the response is invalid
 * (Lambda then treats the whole batch as failed).
 */
export function failedIdsOf(response: unknown, batch: readonly SQSRecord[]): string[] | null {
  if (response === undefined || response === null) return [];
  if (typeof response !== 'object') return null;
  const failures = (response as { batchItemFailures?: unknown }).batchItemFailures;
  if (failures === undefined || failures === null) return [];
  if (!Array.isArray(failures)) return null;
  const ids = new Set(batch.map((r) => r.messageId));
  const failed = new Set<string>();
  for (const failure of failures) {
    const id = (failure as { itemIdentifier?: unknown } | null)?.itemIdentifier;
    if (typeof id !== 'string' || id === '' || !ids.has(id)) return null;
    failed.add(id);
  }
  return [...failed];
}

type MutableCounters = { -readonly [K in keyof EventSourceCounters]: EventSourceCounters[K] };

export class SqsEventSource {
  readonly #options: EventSourceOptions;
  readonly #settings: FunctionSettings;
  readonly #batchSize: number;
  readonly #concurrency: number;
  readonly #waitTimeSeconds: number;
  readonly #counters: MutableCounters = {
    batches: 0,
    records: 0,
    redeliveries: 0,
    deleted: 0,
    failedRecords: 0,
    handlerErrors: 0,
    timeouts: 0,
    invalidResponses: 0,
    receiveErrors: 0,
    deleteErrors: 0,
    inFlight: 0,
    zombies: 0,
  };
  readonly #abort = new AbortController();
  readonly #pollers: Promise<void>[] = [];
  readonly #zombies = new Set<Promise<unknown>>();
  #started = false;
  #stopping = false;

  constructor(options: EventSourceOptions) {
    const batchSize = options.batchSize ?? PIPELINE.batchSize;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10) throw new RangeError(`batchSize must be 1-10 (SQS receives at most 10), got ${batchSize}`);
    const concurrency = options.concurrency ?? 5;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be a positive integer, got ${concurrency}`);
    this.#options = options;
    this.#batchSize = batchSize;
    this.#concurrency = concurrency;
    this.#waitTimeSeconds = Math.min(20, Math.max(0, options.waitTimeSeconds ?? 20));
    this.#settings = {
      functionName: options.functionName ?? 'charge',
      region: options.region,
      timeoutMs: options.functionTimeoutMs ?? PIPELINE.chargeFunctionTimeoutSeconds * 1000,
    };
  }

  get batchSize(): number {
    return this.#batchSize;
  }

  get concurrency(): number {
    return this.#concurrency;
  }

  counters(): EventSourceCounters {
    return { ...this.#counters, zombies: this.#zombies.size };
  }

  start(): void {
    if (this.#started) throw new Error('event source already started');
    this.#started = true;
    for (let i = 0; i < this.#concurrency; i++) this.#pollers.push(this.#poll());
  }

  /**
   * Stop receiving (a pending long poll is aborted), then wait up to `timeoutMs` for the invocations
   * in flight, and for timed-out handlers still running, to finish.
   */
  async stop(timeoutMs = 10_000): Promise<StopResult> {
    this.#stopping = true;
    this.#abort.abort();
    const everything = Promise.all([...this.#pollers, ...this.#zombies]).then(() => true);
    const drained = await Promise.race([everything, sleep(timeoutMs, false, { ref: false })]);
    return { drained, abandoned: drained ? 0 : this.#counters.inFlight + this.#zombies.size };
  }

  async #poll(): Promise<void> {
    let failures = 0;
    while (!this.#stopping) {
      let messages: Message[];
      try {
        const out = await this.#options.client.send(
          new ReceiveMessageCommand({
            QueueUrl: this.#options.queueUrl,
            MaxNumberOfMessages: this.#batchSize,
            WaitTimeSeconds: this.#waitTimeSeconds,
            MessageSystemAttributeNames: ['All'],
            MessageAttributeNames: ['All'],
          }),
          { abortSignal: this.#abort.signal },
        );
        messages = out.Messages ?? [];
        failures = 0;
      } catch (error) {
        if (this.#stopping) return;
        this.#counters.receiveErrors += 1;
        this.#options.onError?.(error, 'receive');
        // Like the service's pollers: back off on errors instead of spinning.
        failures += 1;
        await sleep(Math.min(5_000, 100 * 2 ** failures), undefined, { ref: false });
        continue;
      }
      // A receive answered after stop() still hands over messages: they are simply not worked, and
      // reappear after their visibility timeout (as if this poller had died).
      if (messages.length === 0 || this.#stopping) continue;
      await this.#invoke(messages);
    }
  }

  async #invoke(messages: readonly Message[]): Promise<void> {
    const { queueArn, region } = this.#options;
    const event: SQSEvent = { Records: messages.map((m) => toSqsRecord(m, queueArn, region)) };
    const c = this.#counters;
    c.inFlight += 1;
    c.batches += 1;
    c.records += event.Records.length;
    c.redeliveries += event.Records.filter((r) => Number(r.attributes.ApproximateReceiveCount) > 1).length;
    try {
      const result = await invoke(this.#options.handler, event, this.#settings, (running) => {
        this.#zombies.add(running);
        void running.finally(() => this.#zombies.delete(running));
      });
      let outcome: InvocationOutcome;
      let failed: string[];
      let error: unknown;
      if (result.kind === 'returned') {
        const ids = failedIdsOf(result.value, event.Records);
        if (ids === null) {
          outcome = 'invalid_response';
          failed = event.Records.map((r) => r.messageId);
          c.invalidResponses += 1;
        } else {
          outcome = ids.length === 0 ? 'ok' : 'partial';
          failed = ids;
        }
      } else {
        outcome = result.kind === 'threw' ? 'error' : 'timeout';
        failed = event.Records.map((r) => r.messageId);
        error = result.error;
        if (result.kind === 'threw') c.handlerErrors += 1;
        else c.timeouts += 1;
      }
      c.failedRecords += failed.length;
      const failedSet = new Set(failed);
      const deleted = await this.#delete(event.Records.filter((r) => !failedSet.has(r.messageId)));
      this.#options.onInvocation?.({
        requestId: randomUUID(),
        event,
        outcome,
        failedMessageIds: failed,
        deleted,
        durationMs: result.durationMs,
        ...(error !== undefined ? { error } : {}),
      });
    } finally {
      c.inFlight -= 1;
    }
  }

  /** DeleteMessageBatch in tens; an entry that fails is tried once more, then left to reappear. */
  async #delete(records: readonly SQSRecord[]): Promise<number> {
    let deleted = 0;
    for (let i = 0; i < records.length; i += 10) {
      let entries = records.slice(i, i + 10).map((r, j) => ({ Id: `r${j}`, ReceiptHandle: r.receiptHandle }));
      for (let attempt = 1; attempt <= 2 && entries.length > 0; attempt++) {
        try {
          const out = await this.#options.client.send(new DeleteMessageBatchCommand({ QueueUrl: this.#options.queueUrl, Entries: entries }));
          deleted += out.Successful?.length ?? 0;
          const failedIds = new Set((out.Failed ?? []).map((f) => f.Id));
          entries = entries.filter((e) => failedIds.has(e.Id));
          if (entries.length > 0 && attempt === 2) {
            this.#counters.deleteErrors += entries.length;
            this.#options.onError?.(new Error(`DeleteMessageBatch failed for ${entries.length} entries: ${(out.Failed ?? []).map((f) => f.Code).join(', ')}`), 'delete');
          }
        } catch (error) {
          if (attempt === 2) {
            this.#counters.deleteErrors += entries.length;
            this.#options.onError?.(error, 'delete');
          }
        }
      }
    }
    this.#counters.deleted += deleted;
    return deleted;
  }
}
