// The producer client: how a service puts "charge order X" on the queue (docs/producers.md). Imported by
// producer services, so it depends on the SQS client and the shared message contract only.
//
// Who retries what:
//   - a whole call (network error, 5xx, throttling) is retried by the AWS SDK itself (`maxAttempts` of
//     the SQSClient, 3 by default), resending the same entries;
//   - entries that SendMessageBatch reports as failed inside a 200 answer are NOT retried by the SDK:
//     `sendChargeRequests` resends those, and only those, with bounded attempts.
// Every resend carries the same MessageDeduplicationId (a hash of the order id and of the request's
// parameters), so SQS drops a copy that had in fact been stored within the last 5 minutes; later
// copies are caught by the charge handler, which keeps one operation per order. A request for the
// same order with other parameters has another id: it reaches the handler and is recorded as a
// conflict instead of being dropped by SQS unseen.
import { SendMessageBatchCommand, SendMessageCommand, type SQSClient, type SendMessageBatchRequestEntry } from '@aws-sdk/client-sqs';
import {
  DEFAULT_MAX_AMOUNT,
  authorizationDeduplicationId,
  authorizationRequestSchema,
  chargeRequestSchema,
  deduplicationId,
  refundDeduplicationId,
  refundRequestSchema,
  type AuthorizationRequest,
  type ChargeRequest,
  type RefundRequest,
} from '../payments/message.ts';
import { ChargeRequestSendError, InvalidChargeRequestError, type ChargeRequestIssue } from './errors.ts';

export type { AuthorizationRequest, ChargeRequest, RefundRequest } from '../payments/message.ts';

/** SendMessageBatch takes at most 10 entries. */
export const MAX_BATCH_ENTRIES = 10;
/**
 * Sum of the bodies in one SendMessageBatch. AWS raised the SQS limit to 1 MiB in 2025, but a queue's
 * MaximumMessageSize may still be 256 KiB, and 256 KiB is valid everywhere. A valid charge request
 * body is at most 67,868 bytes (every field at its longest, the description and metadata values in
 * six-byte JSON escapes: test/docs/figures.test.ts), so with large bodies this limit binds before
 * the 10-entry one.
 */
export const DEFAULT_MAX_BATCH_BYTES = 262_144;

export interface ValidationOptions {
  /** Highest accepted amount in minor units; default DEFAULT_MAX_AMOUNT. Use the consumer's setting. */
  readonly maxAmount?: number;
}

export interface SendOptions extends ValidationOptions {
  readonly abortSignal?: AbortSignal;
}

export interface SendBatchOptions extends SendOptions {
  /** Calls per entry including the first, for entries SQS reports as failed; default 5. */
  readonly maxAttempts?: number;
  /** Backoff before resending failed entries: full jitter over min(maxDelayMs, baseDelayMs·2^(n-1)). */
  readonly baseDelayMs?: number;
  readonly maxDelayMs?: number;
  /** Default DEFAULT_MAX_BATCH_BYTES. */
  readonly maxBatchBytes?: number;
  /** For tests: the jitter source (default Math.random) and the sleep. */
  readonly random?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

export interface SentChargeRequest {
  readonly orderId: string;
  readonly messageId: string;
  /** FIFO sequence number (absent when the queue does not return one). */
  readonly sequenceNumber?: string;
}

/** One result per input request, in input order. */
export type ChargeRequestResult =
  | (SentChargeRequest & {
      readonly ok: true;
      /** SendMessageBatch calls this order needed (1 unless SQS failed its entry before). */
      readonly attempts: number;
      /** Set when this request repeats the order at that index: it was not sent a second time. */
      readonly repeatOf?: number;
    })
  | {
      readonly ok: false;
      readonly orderId: string;
      readonly error: ChargeRequestSendError;
      readonly repeatOf?: number;
    };

/** What goes on the wire for one request (docs/producers.md#the-message-contract). */
export interface ChargeRequestMessage {
  readonly MessageBody: string;
  readonly MessageGroupId: string;
  readonly MessageDeduplicationId: string;
}

/**
 * The SQS message for a valid request. The body is built field by field so that it holds exactly the
 * contract's fields in a stable order, whatever else the caller's object carries.
 */
export function chargeRequestMessage(request: ChargeRequest): ChargeRequestMessage {
  const { orderId, amount, currency, customerId, paymentMethod, description, statementDescriptorSuffix, metadata, account, applicationFeeAmount, transferDestination, capture } = request;
  return {
    MessageBody: JSON.stringify({
      orderId,
      amount,
      currency,
      customerId,
      paymentMethod,
      ...(description !== undefined ? { description } : {}),
      ...(statementDescriptorSuffix !== undefined ? { statementDescriptorSuffix } : {}),
      ...(metadata !== undefined ? { metadata } : {}),
      ...(account !== undefined ? { account } : {}),
      ...(applicationFeeAmount !== undefined ? { applicationFeeAmount } : {}),
      ...(transferDestination !== undefined ? { transferDestination } : {}),
      ...(capture !== undefined ? { capture } : {}),
    }),
    // One group per order: orders never wait for each other, and two messages of one order are
    // never worked at the same time.
    MessageGroupId: orderId,
    MessageDeduplicationId: deduplicationId(request),
  };
}

/**
 * The SQS message of a refund (docs/producers.md#refund-requests-the-same-queue): the same queue and the same message group as its order's
 * charge, so FIFO orders it after the charge; deduplicated on `refund:{orderId}:{refundId}`.
 */
export function refundRequestMessage(request: RefundRequest): ChargeRequestMessage {
  const { orderId, refundId, amount, reason } = request;
  return {
    MessageBody: JSON.stringify({ type: 'refund', orderId, refundId, amount, ...(reason ? { reason } : {}) }),
    MessageGroupId: orderId,
    MessageDeduplicationId: refundDeduplicationId(request),
  };
}

/**
 * Send one refund request. Validated against the schema the charge handler applies (nothing sent
 * otherwise: InvalidChargeRequestError); ChargeRequestSendError once the SDK's retries are spent.
 */
export async function sendRefundRequest(
  sqs: SQSClient,
  queueUrl: string,
  request: RefundRequest | Omit<RefundRequest, 'type'>,
  options: SendOptions = {},
): Promise<SentChargeRequest> {
  const parsed = refundRequestSchema(options.maxAmount ?? DEFAULT_MAX_AMOUNT).safeParse({ ...request, type: 'refund' });
  if (!parsed.success) {
    const orderId = typeof (request as { orderId?: unknown }).orderId === 'string' ? (request as { orderId: string }).orderId : undefined;
    throw new InvalidChargeRequestError(
      parsed.error.issues.map((issue) => ({ index: 0, ...(orderId === undefined ? {} : { orderId }), path: issue.path.map(String).join('.') || '(request)', message: issue.message })),
    );
  }
  return sendOne(sqs, queueUrl, parsed.data.orderId, refundRequestMessage(parsed.data), options);
}

/**
 * The SQS message of a capture or a cancel of an authorization (docs/producers.md#authorize-now-capture-later):
 * the same queue and message group as its order's charge, so FIFO orders it after the charge.
 */
export function authorizationRequestMessage(request: AuthorizationRequest): ChargeRequestMessage {
  const body = request.type === 'capture' ? { type: 'capture', orderId: request.orderId, ...(request.amount !== undefined ? { amount: request.amount } : {}) } : { type: 'cancel_authorization', orderId: request.orderId };
  return { MessageBody: JSON.stringify(body), MessageGroupId: request.orderId, MessageDeduplicationId: authorizationDeduplicationId(request) };
}

/** Send one capture or cancel_authorization request, validated as the charge handler validates it. */
export async function sendAuthorizationRequest(sqs: SQSClient, queueUrl: string, request: AuthorizationRequest, options: SendOptions = {}): Promise<SentChargeRequest> {
  const parsed = authorizationRequestSchema(options.maxAmount ?? DEFAULT_MAX_AMOUNT).safeParse(request);
  if (!parsed.success) {
    const orderId = typeof (request as { orderId?: unknown }).orderId === 'string' ? (request as { orderId: string }).orderId : undefined;
    throw new InvalidChargeRequestError(
      parsed.error.issues.map((issue) => ({ index: 0, ...(orderId === undefined ? {} : { orderId }), path: issue.path.map(String).join('.') || '(request)', message: issue.message })),
    );
  }
  return sendOne(sqs, queueUrl, parsed.data.orderId, authorizationRequestMessage(parsed.data), options);
}

/** One SendMessage of a validated request's message: the answer, or ChargeRequestSendError. */
async function sendOne(
  sqs: SQSClient,
  queueUrl: string,
  orderId: string,
  message: Pick<SendMessageBatchRequestEntry, 'MessageBody' | 'MessageGroupId' | 'MessageDeduplicationId'>,
  options: SendOptions,
): Promise<SentChargeRequest> {
  let out;
  try {
    out = await sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, ...message }), options.abortSignal ? { abortSignal: options.abortSignal } : {});
  } catch (error) {
    throw sendError(orderId, error, 1);
  }
  if (!out.MessageId) {
    throw new ChargeRequestSendError({ orderId, code: 'MissingMessageId', message: 'SQS answered without a MessageId', senderFault: false, attempts: 1 });
  }
  return { orderId, messageId: out.MessageId, ...(out.SequenceNumber ? { sequenceNumber: out.SequenceNumber } : {}) };
}

/**
 * Validate requests against the shared schema (the one the charge handler applies) and check that an
 * order repeated in the same call is repeated identically. Returns the parsed requests, or every issue.
 */
export function checkChargeRequests(
  inputs: readonly unknown[],
  options: ValidationOptions = {},
): { readonly requests: readonly ChargeRequest[]; readonly issues: readonly ChargeRequestIssue[] } {
  const schema = chargeRequestSchema(options.maxAmount ?? DEFAULT_MAX_AMOUNT);
  const requests: ChargeRequest[] = [];
  const issues: ChargeRequestIssue[] = [];
  const first = new Map<string, { readonly index: number; readonly body: string }>();
  inputs.forEach((input, index) => {
    const parsed = schema.safeParse(input);
    if (!parsed.success) {
      const orderId = parsedOrderId(schema, input);
      for (const issue of parsed.error.issues) {
        issues.push({
          index,
          ...(orderId === undefined ? {} : { orderId }),
          path: issue.path.map(String).join('.') || '(request)',
          message: issue.message,
        });
      }
      return;
    }
    const request = parsed.data;
    const body = chargeRequestMessage(request).MessageBody;
    const earlier = first.get(request.orderId);
    if (earlier === undefined) {
      first.set(request.orderId, { index, body });
    } else if (earlier.body !== body) {
      // Two different requests for one order in one call is the caller's bug: refused here, where the
      // caller can still see it (sent in separate calls, the second would be a recorded conflict).
      issues.push({
        index,
        orderId: request.orderId,
        path: '(request)',
        message: `repeats order ${request.orderId} of request #${earlier.index} with different fields`,
      });
      return;
    }
    requests.push(request);
  });
  return { requests, issues };
}

function parsedOrderId(schema: ReturnType<typeof chargeRequestSchema>, input: unknown): string | undefined {
  if (typeof input !== 'object' || input === null) return undefined;
  const result = schema.shape.orderId.safeParse((input as { orderId?: unknown }).orderId);
  return result.success ? result.data : undefined;
}

/**
 * Send one charge request. Throws InvalidChargeRequestError (nothing sent) or ChargeRequestSendError
 * once the SDK's own retries of the call are spent.
 */
export async function sendChargeRequest(
  sqs: SQSClient,
  queueUrl: string,
  request: ChargeRequest,
  options: SendOptions = {},
): Promise<SentChargeRequest> {
  const { requests, issues } = checkChargeRequests([request], options);
  const valid = requests[0];
  if (issues.length > 0 || valid === undefined) throw new InvalidChargeRequestError(issues);
  return sendOne(sqs, queueUrl, valid.orderId, chargeRequestMessage(valid), options);
}

/**
 * Send many charge requests with SendMessageBatch (≤ 10 entries and ≤ maxBatchBytes per call, calls
 * one after another). All-or-nothing validation: if any request is invalid, InvalidChargeRequestError
 * lists every issue and nothing is sent, so a caller never has to work out which half of a bad input
 * went out. After that, the call never throws for SQS failures: each request gets a result, in input
 * order. An order repeated identically in one call is sent once; its repeats get the same result with
 * `repeatOf` (SQS would drop them anyway: same deduplication id).
 */
export async function sendChargeRequests(
  sqs: SQSClient,
  queueUrl: string,
  requests: readonly ChargeRequest[],
  options: SendBatchOptions = {},
): Promise<ChargeRequestResult[]> {
  const checked = checkChargeRequests(requests, options);
  if (checked.issues.length > 0) throw new InvalidChargeRequestError(checked.issues);

  const firstIndex = new Map<string, number>();
  const unique: { readonly index: number; readonly request: ChargeRequest }[] = [];
  checked.requests.forEach((request, index) => {
    if (!firstIndex.has(request.orderId)) {
      firstIndex.set(request.orderId, index);
      unique.push({ index, request });
    }
  });

  const byOrder = new Map<string, UniqueResult>();
  for (const chunk of splitIntoBatches(unique.map((u) => u.request), options.maxBatchBytes ?? DEFAULT_MAX_BATCH_BYTES)) {
    for (const [orderId, result] of await sendChunk(sqs, queueUrl, chunk, options)) byOrder.set(orderId, result);
  }

  return checked.requests.map((request, index) => {
    const result = byOrder.get(request.orderId);
    if (result === undefined) throw new Error(`internal: no result for order ${request.orderId}`);
    const first = firstIndex.get(request.orderId);
    return first === index || first === undefined ? result : { ...result, repeatOf: first };
  });
}

type UniqueResult = ChargeRequestResult;

/** Split into calls of ≤ 10 entries whose bodies sum to ≤ maxBytes (a lone oversized body goes alone). */
export function splitIntoBatches(requests: readonly ChargeRequest[], maxBytes: number = DEFAULT_MAX_BATCH_BYTES): ChargeRequest[][] {
  const out: ChargeRequest[][] = [];
  let current: ChargeRequest[] = [];
  let bytes = 0;
  for (const request of requests) {
    const size = Buffer.byteLength(chargeRequestMessage(request).MessageBody, 'utf8');
    if (current.length > 0 && (current.length === MAX_BATCH_ENTRIES || bytes + size > maxBytes)) {
      out.push(current);
      current = [];
      bytes = 0;
    }
    current.push(request);
    bytes += size;
  }
  if (current.length > 0) out.push(current);
  return out;
}

/** One chunk: send, then resend only the entries SQS failed without blaming the sender. */
async function sendChunk(
  sqs: SQSClient,
  queueUrl: string,
  chunk: readonly ChargeRequest[],
  options: SendBatchOptions,
): Promise<Map<string, UniqueResult>> {
  const maxAttempts = Math.max(1, options.maxAttempts ?? 5);
  const sleep = options.sleep ?? defaultSleep;
  const random = options.random ?? Math.random;
  const results = new Map<string, UniqueResult>();
  // Entry ids only need to be unique within a call; the position in the chunk keeps them stable
  // across resends, which makes the resend easy to follow in a trace.
  let pending = chunk.map((request, i) => ({ id: `m${i}`, request }));

  for (let attempt = 1; pending.length > 0; attempt++) {
    if (options.abortSignal?.aborted) {
      for (const { request } of pending) results.set(request.orderId, failure(sendError(request.orderId, abortError(options.abortSignal), attempt - 1)));
      break;
    }
    let out;
    try {
      out = await sqs.send(
        new SendMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: pending.map(({ id, request }): SendMessageBatchRequestEntry => ({ Id: id, ...chargeRequestMessage(request) })),
        }),
        options.abortSignal ? { abortSignal: options.abortSignal } : {},
      );
    } catch (error) {
      // The whole call failed after the SDK's own retries (or was refused outright): report it on every
      // entry of the call and go on with the next chunk.
      for (const { request } of pending) results.set(request.orderId, failure(sendError(request.orderId, error, attempt)));
      break;
    }

    const byId = new Map(pending.map((entry) => [entry.id, entry]));
    for (const ok of out.Successful ?? []) {
      const entry = ok.Id === undefined ? undefined : byId.get(ok.Id);
      // Without a MessageId the entry is left in byId and resent below as "SQS did not say".
      if (!entry || !ok.MessageId) continue;
      byId.delete(entry.id);
      results.set(entry.request.orderId, {
        ok: true,
        orderId: entry.request.orderId,
        messageId: ok.MessageId,
        ...(ok.SequenceNumber ? { sequenceNumber: ok.SequenceNumber } : {}),
        attempts: attempt,
      });
    }
    const retry: typeof pending = [];
    const lastError = new Map<string, ChargeRequestSendError>();
    for (const failed of out.Failed ?? []) {
      const entry = failed.Id === undefined ? undefined : byId.get(failed.Id);
      if (!entry) continue;
      byId.delete(entry.id);
      const error = new ChargeRequestSendError({
        orderId: entry.request.orderId,
        code: failed.Code ?? 'UnknownError',
        message: failed.Message ?? 'entry failed',
        senderFault: failed.SenderFault === true,
        attempts: attempt,
      });
      // A sender fault is SQS refusing what we sent; the same entry would be refused again.
      if (failed.SenderFault) results.set(entry.request.orderId, failure(error));
      else {
        retry.push(entry);
        lastError.set(entry.request.orderId, error);
      }
    }
    // An entry in neither list: SQS did not say. Resend it like a server-side failure (same dedup id).
    for (const entry of byId.values()) {
      retry.push(entry);
      lastError.set(
        entry.request.orderId,
        new ChargeRequestSendError({
          orderId: entry.request.orderId,
          code: 'MissingFromResponse',
          message: 'SQS reported neither success nor failure for this entry',
          senderFault: false,
          attempts: attempt,
        }),
      );
    }

    pending = retry;
    if (pending.length === 0) break;
    if (attempt >= maxAttempts) {
      for (const { request } of pending) {
        const error = lastError.get(request.orderId);
        if (error) results.set(request.orderId, failure(error));
      }
      break;
    }
    await sleep(backoffMs(attempt, options, random));
  }
  return results;
}

/** Full jitter: a random delay in [0, min(max, base·2^(attempt-1))). */
export function backoffMs(attempt: number, options: Pick<SendBatchOptions, 'baseDelayMs' | 'maxDelayMs'> = {}, random: () => number = Math.random): number {
  const base = options.baseDelayMs ?? 100;
  const cap = options.maxDelayMs ?? 2_000;
  return Math.floor(random() * Math.min(cap, base * 2 ** (attempt - 1)));
}

function failure(error: ChargeRequestSendError): UniqueResult {
  return { ok: false, orderId: error.orderId, error };
}

function sendError(orderId: string, error: unknown, attempts: number): ChargeRequestSendError {
  const e = (typeof error === 'object' && error !== null ? error : {}) as {
    name?: unknown;
    code?: unknown;
    message?: unknown;
    $fault?: unknown;
  };
  // SDK service errors carry the SQS code as `name`; Node network errors carry it as `code`.
  const code =
    typeof e.code === 'string' ? e.code : typeof e.name === 'string' && e.name !== 'Error' ? e.name : 'UnknownError';
  return new ChargeRequestSendError({
    orderId,
    code,
    message: typeof e.message === 'string' && e.message !== '' ? e.message : String(error),
    senderFault: e.$fault === 'client',
    attempts,
    cause: error,
  });
}

function abortError(signal: AbortSignal): Error {
  return Object.assign(new Error('aborted before sending', { cause: signal.reason }), { name: 'AbortError' });
}

function defaultSleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
