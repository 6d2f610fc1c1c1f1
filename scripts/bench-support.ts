// What the benchmarks that drive the charge batch share (bench:batch, bench:refund-batch).
import { spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import path from 'node:path';
import { freePort } from '../local/postgres.ts';
import type { FakeStripeStats } from '../local/fake-stripe/types.ts';
import type { SQSRecord } from 'aws-lambda';

const root = path.resolve(import.meta.dirname, '..');

/** One FIFO record as the SQS event source hands it to the charge handler. */
export function sqsRecord(body: object, groupId: string): SQSRecord {
  const now = String(Date.now());
  return {
    messageId: randomUUID(),
    receiptHandle: randomUUID(),
    body: JSON.stringify(body),
    attributes: { ApproximateReceiveCount: '1', SentTimestamp: now, SenderId: 'bench', ApproximateFirstReceiveTimestamp: now, MessageGroupId: groupId },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:charge-requests.fifo',
    awsRegion: 'us-east-1',
  };
}

export interface StripeProcess {
  readonly url: string;
  /** GET /__fake/stats: counters that never drop (requests by endpoint, refunds, double charges). */
  stats(): Promise<FakeStripeStats>;
  stop(): Promise<void>;
}

/**
 * The fake Stripe in its own Node process, as Stripe is in its own data centre: its CPU work (form
 * parsing, JSON, the ledger) must not queue behind the handler's on one event loop and count as ours.
 * Inspected over its /__fake/ HTTP API (local/fake-stripe/control.ts).
 */
export async function startStripeProcess(latencyMs: number): Promise<StripeProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, ['--import', 'tsx', path.join(root, 'local/fake-stripe/cli.ts'), '--port', String(port), '--latency-ms', String(latencyMs)], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  await new Promise<void>((resolve, reject) => {
    child.once('exit', (code) => reject(new Error(`fake Stripe exited with ${code}`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      if (chunk.toString().includes('listening')) resolve();
    });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    stats: async () => (await (await fetch(`${url}/__fake/stats`)).json()) as FakeStripeStats,
    stop: () =>
      new Promise<void>((resolve) => {
        child.removeAllListeners('exit');
        child.once('exit', () => resolve());
        child.kill('SIGTERM');
      }),
  };
}
