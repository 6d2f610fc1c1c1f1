// The producer client and CLI with the real @aws-sdk/client-sqs against fauxqs (a real SQS API in
// process). fauxqs cannot fail single batch entries, so a small HTTP proxy in front of it does: it
// turns chosen entries of a SendMessageBatch into failures, either before SQS sees them (the normal
// partial failure) or after SQS stored them (the ambiguous case), and records every call it relays.
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  ChangeMessageVisibilityCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  type Message,
  type SQSClient,
  type SendMessageBatchRequestEntry,
} from '@aws-sdk/client-sqs';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { deduplicationId, type ChargeRequest } from '../lambdas/payments/message.ts';
import { backoffMs, sendChargeRequest, sendChargeRequests, splitIntoBatches } from '../lambdas/producer/client.ts';
import { ChargeRequestSendError, InvalidChargeRequestError } from '../lambdas/producer/errors.ts';
import { localSqsClient, startLocalSqs, type LocalSqs } from '../local/sqs.ts';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));

function order(orderId: string, amount = 1299): ChargeRequest {
  return { orderId, amount, currency: 'eur', customerId: 'cus_Test123', paymentMethod: 'pm_card_visa' };
}

/** Receive until the queue is empty, deleting each message. FIFO: delete unlocks the group. */
async function drain(client: SQSClient, queueUrl: string): Promise<Message[]> {
  const all: Message[] = [];
  for (;;) {
    const out = await client.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 0, MessageSystemAttributeNames: ['All'] }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) return all;
    for (const m of messages) {
      all.push(m);
      await client.send(new DeleteMessageCommand({ QueueUrl: queueUrl, ReceiptHandle: m.ReceiptHandle }));
    }
  }
}

async function visibleCount(client: SQSClient, queueUrl: string): Promise<number> {
  const out = await client.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }));
  return Number(out.Attributes?.ApproximateNumberOfMessages);
}

interface EntryFailure {
  readonly code: string;
  readonly senderFault: boolean;
  /** true: SQS stores the message and the proxy reports it failed anyway (the ambiguous case). */
  readonly stored: boolean;
  /** Batch calls in which this order fails; default 1. */
  times?: number;
}

/** An SQS API proxy in front of fauxqs that records SendMessageBatch calls and fails chosen entries. */
async function startFaultProxy(upstream: string) {
  const batchCalls: SendMessageBatchRequestEntry[][] = [];
  const operations: string[] = [];
  /** Keyed by MessageGroupId, i.e. by order. */
  const failures = new Map<string, EntryFailure>();

  const server = http.createServer((req, res) => {
    void (async () => {
      const chunks: Buffer[] = [];
      for await (const chunk of req) chunks.push(chunk as Buffer);
      const target = String(req.headers['x-amz-target'] ?? '');
      operations.push(target.replace('AmazonSQS.', ''));
      let body = Buffer.concat(chunks).toString('utf8');
      const injected: { Id: string; SenderFault: boolean; Code: string; Message: string }[] = [];
      const reportFailed = new Set<string>();
      if (target === 'AmazonSQS.SendMessageBatch') {
        const input = JSON.parse(body) as { QueueUrl: string; Entries: SendMessageBatchRequestEntry[] };
        batchCalls.push(input.Entries.map((e) => ({ ...e })));
        const forward = input.Entries.filter((entry) => {
          const failure = failures.get(entry.MessageGroupId ?? '');
          if (!failure || (failure.times ?? 1) <= 0) return true;
          failure.times = (failure.times ?? 1) - 1;
          const id = entry.Id ?? '';
          injected.push({ Id: id, SenderFault: failure.senderFault, Code: failure.code, Message: 'injected by the test proxy' });
          if (failure.stored) reportFailed.add(id);
          return failure.stored;
        });
        if (forward.length === 0) {
          respond(res, 200, { 'content-type': 'application/x-amz-json-1.0' }, JSON.stringify({ Successful: [], Failed: injected }));
          return;
        }
        body = JSON.stringify({ ...input, Entries: forward });
      }
      const headers = Object.fromEntries(
        Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k)) as [string, string][],
      );
      const upstreamResponse = await fetch(`${upstream}${req.url ?? '/'}`, { method: req.method ?? 'POST', headers, body });
      let text = await upstreamResponse.text();
      if (injected.length > 0 && upstreamResponse.ok) {
        const out = JSON.parse(text) as { Successful?: { Id: string }[]; Failed?: unknown[] };
        text = JSON.stringify({
          Successful: (out.Successful ?? []).filter((s) => !reportFailed.has(s.Id)),
          Failed: [...(out.Failed ?? []), ...injected],
        });
      }
      const passHeaders: Record<string, string> = {};
      for (const name of ['content-type', 'x-amzn-requestid', 'x-amzn-query-error']) {
        const value = upstreamResponse.headers.get(name);
        if (value) passHeaders[name] = value;
      }
      respond(res, upstreamResponse.status, passHeaders, text);
    })().catch((error: unknown) => {
      respond(res, 500, { 'content-type': 'text/plain' }, String(error));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    url,
    batchCalls,
    operations,
    fail(orderId: string, failure: EntryFailure) {
      failures.set(orderId, { ...failure });
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** A port nothing listens on (bound, then released). */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

function respond(res: http.ServerResponse, status: number, headers: Record<string, string>, text: string): void {
  res.writeHead(status, { ...headers, 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

let sqs: LocalSqs;
let proxy: Awaited<ReturnType<typeof startFaultProxy>>;
let client: SQSClient;
const noSleep = { sleep: async () => {} };

beforeEach(async () => {
  // A fresh emulator per test: queues, dedup cache and counters start empty (≈ 20 ms).
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  proxy = await startFaultProxy(sqs.endpoint);
  client = localSqsClient(proxy.url, sqs.region);
});
afterEach(async () => {
  client.destroy();
  await proxy.close();
  await sqs.stop();
});

describe('sendChargeRequest', () => {
  it('one order sent three times within five minutes leaves exactly one message on the queue', async () => {
    const request = order('order-1001');
    const first = await sendChargeRequest(client, sqs.queueUrl, request);
    const second = await sendChargeRequest(client, sqs.queueUrl, request);
    const third = await sendChargeRequests(client, sqs.queueUrl, [request]);

    // SQS accepted all three; fauxqs answers a deduplicated send with the original MessageId.
    expect(second.messageId).toBe(first.messageId);
    expect(third[0]).toMatchObject({ ok: true, messageId: first.messageId });
    const messages = await drain(sqs.client, sqs.queueUrl);
    expect(messages).toHaveLength(1);
    const [message] = messages;
    // The wire contract (docs/producers.md): exactly the five fields, group = order, dedup = sha256("charge:" + order + ":" + parameters digest).
    expect(JSON.parse(message?.Body ?? '')).toEqual(request);
    expect(Object.keys(JSON.parse(message?.Body ?? ''))).toEqual(['orderId', 'amount', 'currency', 'customerId', 'paymentMethod']);
    expect(message?.Attributes?.MessageGroupId).toBe('order-1001');
    expect(message?.Attributes?.MessageDeduplicationId).toBe(deduplicationId(request));
    expect(deduplicationId(request)).toMatch(/^[0-9a-f]{64}$/);
  });

  it('refuses a request with fields outside the contract (the schema is strict)', async () => {
    const wider = { ...order('order-1002'), note: 'internal' } as unknown as ChargeRequest;
    await expect(sendChargeRequest(client, sqs.queueUrl, wider)).rejects.toMatchObject({
      name: 'InvalidChargeRequestError',
      issues: [{ index: 0, orderId: 'order-1002', path: '(request)' }],
    });
  });

  it('refuses invalid input before sending: typed error with the issues, no call, queue empty', async () => {
    const bad = { ...order('order 1003'), amount: 0, currency: 'EUR' } as ChargeRequest;
    const error = await sendChargeRequest(client, sqs.queueUrl, bad).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidChargeRequestError);
    const issues = (error as InvalidChargeRequestError).issues;
    expect(issues.map((i) => i.path).sort()).toEqual(['amount', 'currency', 'orderId']);
    // Messages name the rule, never the value.
    expect((error as Error).message).not.toContain('EUR');

    // The batch form refuses the whole call: nothing of it is sent, every issue is listed.
    const batch = [order('order-1004'), { ...order('order-1005'), amount: 12.5 }, order('order-1006')];
    const batchError = await sendChargeRequests(client, sqs.queueUrl, batch).catch((e: unknown) => e);
    expect(batchError).toBeInstanceOf(InvalidChargeRequestError);
    expect((batchError as InvalidChargeRequestError).issues).toMatchObject([{ index: 1, orderId: 'order-1005', path: 'amount' }]);

    // One order twice with different amounts would silently lose one to deduplication: refused.
    const conflict = [order('order-1007', 100), order('order-1007', 200)];
    await expect(sendChargeRequests(client, sqs.queueUrl, conflict)).rejects.toMatchObject({
      issues: [{ index: 1, orderId: 'order-1007', message: expect.stringContaining('different fields') }],
    });

    expect(proxy.operations).toEqual([]);
    expect(await visibleCount(sqs.client, sqs.queueUrl)).toBe(0);
  });

  it('reports a failed send as ChargeRequestSendError with the SQS code', async () => {
    const missingQueue = sqs.queueUrl.replace('charge-requests.fifo', 'no-such-queue.fifo');
    const error = await sendChargeRequest(client, missingQueue, order('order-1008')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ChargeRequestSendError);
    expect(error).toMatchObject({ orderId: 'order-1008', code: 'QueueDoesNotExist', senderFault: true });
    // A client error is not retried by the SDK.
    expect((error as ChargeRequestSendError).cause).toMatchObject({ $metadata: { attempts: 1 } });
  });

  it('a network failure is retried by the SDK itself (3 attempts by default), then reported', async () => {
    const port = await closedPort();
    const offline = localSqsClient(`http://127.0.0.1:${port}`, sqs.region);
    try {
      const error = await sendChargeRequest(offline, sqs.queueUrl, order('order-1009')).catch((e: unknown) => e);
      expect(error).toMatchObject({ name: 'ChargeRequestSendError', code: 'ECONNREFUSED', senderFault: false });
      expect((error as ChargeRequestSendError).cause).toMatchObject({ $metadata: { attempts: 3 } });
    } finally {
      offline.destroy();
    }
  });
});

describe('sendChargeRequests', () => {
  it('sends 25 orders in 3 SendMessageBatch calls (10 + 10 + 5) and 25 messages arrive', async () => {
    const requests = Array.from({ length: 25 }, (_, i) => order(`order-2${String(i).padStart(3, '0')}`, 100 + i));
    const results = await sendChargeRequests(client, sqs.queueUrl, requests);

    expect(proxy.batchCalls.map((c) => c.length)).toEqual([10, 10, 5]);
    expect(results).toHaveLength(25);
    expect(results.every((r) => r.ok && r.attempts === 1)).toBe(true);
    expect(results.map((r) => r.orderId)).toEqual(requests.map((r) => r.orderId));
    for (const entry of proxy.batchCalls.flat()) {
      expect(entry.MessageDeduplicationId).toBe(deduplicationId(JSON.parse(entry.MessageBody ?? '{}') as ChargeRequest));
    }
    const messages = await drain(sqs.client, sqs.queueUrl);
    expect(messages).toHaveLength(25);
    expect(new Set(messages.map((m) => m.MessageId))).toEqual(new Set(results.map((r) => (r.ok ? r.messageId : ''))));
  });

  it('sends an order repeated within one call once; the repeat gets the same result', async () => {
    const results = await sendChargeRequests(client, sqs.queueUrl, [order('order-3001'), order('order-3002'), order('order-3001')]);
    expect(proxy.batchCalls.map((c) => c.map((e) => e.MessageGroupId))).toEqual([['order-3001', 'order-3002']]);
    expect(results[2]).toMatchObject({ ok: true, orderId: 'order-3001', repeatOf: 0 });
    expect(results[2]?.ok && results[0]?.ok && results[2].messageId === results[0].messageId).toBe(true);
    expect(await drain(sqs.client, sqs.queueUrl)).toHaveLength(2);
  });

  it('resends only the failed entries, with the same deduplication ids and bodies', async () => {
    const requests = Array.from({ length: 10 }, (_, i) => order(`order-400${i}`));
    proxy.fail('order-4002', { code: 'InternalError', senderFault: false, stored: false });
    proxy.fail('order-4007', { code: 'ServiceUnavailable', senderFault: false, stored: false });
    const delays: number[] = [];
    const results = await sendChargeRequests(client, sqs.queueUrl, requests, {
      random: () => 0.5,
      sleep: async (ms) => void delays.push(ms),
    });

    expect(proxy.batchCalls).toHaveLength(2);
    const [first, second] = proxy.batchCalls;
    expect(first).toHaveLength(10);
    const failedInFirst = first?.filter((e) => ['order-4002', 'order-4007'].includes(e.MessageGroupId ?? ''));
    // The second call carries exactly the two failed entries, unchanged: same ids, dedup ids, bodies.
    expect(second).toEqual(failedInFirst);
    expect(second?.map((e) => e.MessageDeduplicationId)).toEqual([deduplicationId(order('order-4002')), deduplicationId(order('order-4007'))]);
    expect(delays).toEqual([50]); // full jitter: 0.5 × min(2000, 100 · 2^0)

    expect(results.every((r) => r.ok)).toBe(true);
    expect(results.filter((r) => r.ok && r.attempts === 2).map((r) => r.orderId)).toEqual(['order-4002', 'order-4007']);
    expect(await drain(sqs.client, sqs.queueUrl)).toHaveLength(10);
  });

  it('an entry reported failed although SQS stored it is resent and deduplicated: still one message', async () => {
    proxy.fail('order-5001', { code: 'InternalError', senderFault: false, stored: true });
    const results = await sendChargeRequests(client, sqs.queueUrl, [order('order-5000'), order('order-5001')], noSleep);
    expect(proxy.batchCalls.map((c) => c.length)).toEqual([2, 1]);
    expect(results[1]).toMatchObject({ ok: true, orderId: 'order-5001', attempts: 2 });
    const messages = await drain(sqs.client, sqs.queueUrl);
    expect(messages.map((m) => m.Attributes?.MessageGroupId).sort()).toEqual(['order-5000', 'order-5001']);
  });

  it('does not resend an entry failed with SenderFault: true', async () => {
    proxy.fail('order-6001', { code: 'InvalidParameterValue', senderFault: true, stored: false });
    const results = await sendChargeRequests(client, sqs.queueUrl, [order('order-6000'), order('order-6001')], noSleep);
    expect(proxy.batchCalls).toHaveLength(1);
    expect(results[0]).toMatchObject({ ok: true });
    expect(results[1]).toMatchObject({ ok: false, orderId: 'order-6001' });
    const error = results[1]?.ok === false ? results[1].error : undefined;
    expect(error).toBeInstanceOf(ChargeRequestSendError);
    expect(error).toMatchObject({ code: 'InvalidParameterValue', senderFault: true, attempts: 1 });
  });

  it('gives up after maxAttempts with backoff and jitter, and reports the last error', async () => {
    proxy.fail('order-7001', { code: 'InternalError', senderFault: false, stored: false, times: 100 });
    const delays: number[] = [];
    const results = await sendChargeRequests(client, sqs.queueUrl, [order('order-7000'), order('order-7001')], {
      maxAttempts: 4,
      baseDelayMs: 100,
      maxDelayMs: 300,
      random: () => 0.99,
      sleep: async (ms) => void delays.push(ms),
    });
    expect(proxy.batchCalls.map((c) => c.length)).toEqual([2, 1, 1, 1]);
    expect(delays).toEqual([99, 198, 297]); // 0.99 × min(300, 100·2^(n-1))
    expect(results[1]).toMatchObject({ ok: false, error: { code: 'InternalError', senderFault: false, attempts: 4 } });
    expect(results[0]).toMatchObject({ ok: true, attempts: 1 });
  });

  it('reports a whole-call failure on every entry of the call, without throwing', async () => {
    const missingQueue = sqs.queueUrl.replace('charge-requests.fifo', 'no-such-queue.fifo');
    const results = await sendChargeRequests(client, missingQueue, [order('order-8000'), order('order-8001')], noSleep);
    expect(results.map((r) => (r.ok ? 'ok' : r.error.code))).toEqual(['QueueDoesNotExist', 'QueueDoesNotExist']);
  });

  it('splits batches by entry count and by summed body size', () => {
    const requests = Array.from({ length: 23 }, (_, i) => order(`o-${i}`));
    expect(splitIntoBatches(requests).map((c) => c.length)).toEqual([10, 10, 3]);
    const bodySize = Buffer.byteLength(JSON.stringify(order('o-10')));
    // Room for exactly three bodies of this size per call.
    expect(splitIntoBatches(requests.slice(10, 20), bodySize * 3).map((c) => c.length)).toEqual([3, 3, 3, 1]);
    expect(splitIntoBatches([order('o-1')], 1)).toHaveLength(1); // a lone body larger than the cap still goes (SQS judges it)
    expect(backoffMs(10, {}, () => 0.5)).toBe(1000); // capped at maxDelayMs 2000 by default
  });
});

// Pins what the pipeline tests rely on from fauxqs (see the comment in local/sqs.ts), so that an
// upgrade that changes it is noticed here rather than as a puzzling handler test.
describe('local SQS (fauxqs) FIFO semantics', () => {
  const receive = (queueUrl: string, visibility?: number) =>
    sqs.client
      .send(
        new ReceiveMessageCommand({
          QueueUrl: queueUrl,
          MaxNumberOfMessages: 10,
          MessageSystemAttributeNames: ['ApproximateReceiveCount', 'MessageGroupId'],
          ...(visibility === undefined ? {} : { VisibilityTimeout: visibility }),
        }),
      )
      .then((out) => out.Messages ?? []);

  it('creates the queues as the stack does', async () => {
    const out = await sqs.client.send(new GetQueueAttributesCommand({ QueueUrl: sqs.queueUrl, AttributeNames: ['All'] }));
    expect(out.Attributes).toMatchObject({
      FifoQueue: 'true',
      ContentBasedDeduplication: 'false',
      DeduplicationScope: 'messageGroup',
      FifoThroughputLimit: 'perMessageGroupId',
      VisibilityTimeout: '30',
    });
    expect(JSON.parse(out.Attributes?.RedrivePolicy ?? '{}')).toEqual({ deadLetterTargetArn: sqs.dlqArn, maxReceiveCount: 5 });
  });

  it('locks a group while one of its messages is in flight and hands out one message per group per receive', async () => {
    await sendChargeRequests(sqs.client, sqs.queueUrl, [order('g-1'), order('g-2')]);
    // A second message in group g-1 (another dedup id): FIFO keeps it behind the first.
    await sqs.client.send(
      new SendMessageBatchCommand({
        QueueUrl: sqs.queueUrl,
        Entries: [{ Id: 'x', MessageBody: '{}', MessageGroupId: 'g-1', MessageDeduplicationId: 'other' }],
      }),
    );
    const first = await receive(sqs.queueUrl);
    expect(first.map((m) => m.Attributes?.MessageGroupId).sort()).toEqual(['g-1', 'g-2']);
    expect(await receive(sqs.queueUrl)).toEqual([]);
    // ChangeMessageVisibility 0 releases the message and its group at once; the receive count goes on.
    const g1 = first.find((m) => m.Attributes?.MessageGroupId === 'g-1');
    await sqs.client.send(new ChangeMessageVisibilityCommand({ QueueUrl: sqs.queueUrl, ReceiptHandle: g1?.ReceiptHandle, VisibilityTimeout: 0 }));
    const again = await receive(sqs.queueUrl);
    expect(again.map((m) => [m.MessageId, m.Attributes?.ApproximateReceiveCount])).toEqual([[g1?.MessageId, '2']]);
  });

  it('makes a message visible again after its visibility timeout and moves it to the DLQ after maxReceiveCount', async () => {
    await sendChargeRequest(sqs.client, sqs.queueUrl, order('r-1'));
    const [m] = await receive(sqs.queueUrl, 1);
    expect(await receive(sqs.queueUrl)).toEqual([]);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const [back] = await receive(sqs.queueUrl, 0);
    expect(back?.MessageId).toBe(m?.MessageId);
    // Receives 3, 4 and 5 (visibility 0: back at once); the 6th exceeds maxReceiveCount 5.
    for (let i = 3; i <= 5; i++) expect((await receive(sqs.queueUrl, 0))[0]?.Attributes?.ApproximateReceiveCount).toBe(String(i));
    expect(await receive(sqs.queueUrl, 0)).toEqual([]);
    const dead = await receive(sqs.dlqUrl);
    expect(dead.map((d) => d.MessageId)).toEqual([m?.MessageId]);
    // fauxqs carries the receive count over into the DLQ (6 receives on the source queue, then this one).
    expect(dead[0]?.Attributes?.ApproximateReceiveCount).toBe('7');
  });
});

describe('npm run produce (CLI, spawned)', () => {
  function runCli(args: string[], env: Record<string, string> = {}) {
    return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
      const child = spawn('npx', ['tsx', 'lambdas/producer/cli.ts', ...args], {
        cwd: repoRoot,
        env: { ...process.env, QUEUE_URL: '', SQS_ENDPOINT: '', ...env },
      });
      let stdout = '';
      let stderr = '';
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', reject);
      child.on('close', (code) => resolve({ code, stdout, stderr }));
    });
  }

  it('sends one order given as flags', async () => {
    const { code, stdout, stderr } = await runCli([
      '--order', 'cli-1', '--amount', '4200', '--currency', 'usd', '--customer', 'cus_Cli', '--payment-method', 'pm_Cli',
      '--endpoint', sqs.endpoint, '--queue-url', sqs.queueUrl,
    ]);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const messages = await drain(sqs.client, sqs.queueUrl);
    expect(messages).toHaveLength(1);
    expect(stdout.trim()).toBe(`sent cli-1 ${messages[0]?.MessageId}`);
    expect(JSON.parse(messages[0]?.Body ?? '')).toEqual({ orderId: 'cli-1', amount: 4200, currency: 'usd', customerId: 'cus_Cli', paymentMethod: 'pm_Cli' });
  });

  it('sends one refund given as flags', async () => {
    const { code, stdout, stderr } = await runCli(['--refund', 'rf-cli-1', '--order', 'cli-r1', '--amount', '300', '--reason', 'duplicate', '--endpoint', sqs.endpoint, '--queue-url', sqs.queueUrl]);
    expect(stderr).toBe('');
    expect(code).toBe(0);
    const messages = await drain(sqs.client, sqs.queueUrl);
    expect(messages).toHaveLength(1);
    expect(stdout.trim()).toBe(`sent cli-r1 ${messages[0]?.MessageId}`);
    expect(JSON.parse(messages[0]?.Body ?? '')).toEqual({ type: 'refund', orderId: 'cli-r1', refundId: 'rf-cli-1', amount: 300, reason: 'duplicate' });
  });

  it('sends a JSONL file (endpoint and queue from the environment); refuses a file with a bad line', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'produce-'));
    try {
      const good = path.join(dir, 'orders.jsonl');
      await writeFile(good, [order('f-1'), order('f-2'), order('f-3')].map((r) => JSON.stringify(r)).join('\n') + '\n\n');
      const ok = await runCli(['--file', good], { SQS_ENDPOINT: sqs.endpoint, QUEUE_URL: sqs.queueUrl });
      expect(ok.code).toBe(0);
      expect(ok.stdout.trim().split('\n').map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['sent f-1', 'sent f-2', 'sent f-3']);
      expect(await drain(sqs.client, sqs.queueUrl)).toHaveLength(3);

      const bad = path.join(dir, 'bad.jsonl');
      await writeFile(bad, [JSON.stringify(order('f-4')), '{"orderId": "f-5",', JSON.stringify({ ...order('f-6'), amount: -1 })].join('\n'));
      const refused = await runCli(['--file', bad, '--endpoint', sqs.endpoint, '--queue-url', sqs.queueUrl]);
      expect(refused.code).toBe(2);
      expect(refused.stdout).toBe('');
      expect(refused.stderr).toContain('bad.jsonl:2: not valid JSON');
      expect(refused.stderr).toContain('bad.jsonl:3: amount: must be positive');
      expect(refused.stderr).toContain('nothing sent');
      expect(await visibleCount(sqs.client, sqs.queueUrl)).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('sends a JSONL file of charges and refunds in file order (a refund line is a refund, not a bad charge)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'produce-'));
    try {
      const file = path.join(dir, 'mixed.jsonl');
      const refund = { type: 'refund', orderId: 'm-1', refundId: 'rf-m1', amount: 300 };
      await writeFile(file, [JSON.stringify(order('m-1')), JSON.stringify(refund), JSON.stringify(order('m-2'))].join('\n') + '\n');
      const ok = await runCli(['--file', file], { SQS_ENDPOINT: sqs.endpoint, QUEUE_URL: sqs.queueUrl });
      expect(ok.stderr).toBe('');
      expect(ok.code).toBe(0);
      expect(ok.stdout.trim().split('\n').map((l) => l.split(' ').slice(0, 2).join(' '))).toEqual(['sent m-1', 'sent m-1', 'sent m-2']);
      const bodies = (await drain(sqs.client, sqs.queueUrl)).map((m) => JSON.parse(m.Body ?? '{}') as { type?: string; orderId: string });
      expect(bodies.filter((b) => b.type === 'refund')).toEqual([refund]);
      expect(bodies).toHaveLength(3);

      const bad = path.join(dir, 'bad-refund.jsonl');
      await writeFile(bad, [JSON.stringify(order('m-3')), JSON.stringify({ ...refund, orderId: 'm-3', amount: 0 })].join('\n'));
      const refused = await runCli(['--file', bad, '--endpoint', sqs.endpoint, '--queue-url', sqs.queueUrl]);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toContain('bad-refund.jsonl:2: amount: must be positive');
      expect(refused.stderr).not.toContain('must be "charge" or "refund"');
      expect(await visibleCount(sqs.client, sqs.queueUrl)).toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('rejects a bad argument with a clear message and exit status 2', async () => {
    const unknown = await runCli(['--ammount', '12', '--endpoint', sqs.endpoint]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("Unknown option '--ammount'");

    const badAmount = await runCli([
      '--order', 'cli-2', '--amount', '12,50', '--currency', 'eur', '--customer', 'cus_Cli', '--payment-method', 'pm_Cli',
      '--endpoint', sqs.endpoint, '--queue-url', sqs.queueUrl,
    ]);
    expect(badAmount.code).toBe(2);
    expect(badAmount.stderr).toContain('--amount must be a number');
    expect(await visibleCount(sqs.client, sqs.queueUrl)).toBe(0);
  });
});
