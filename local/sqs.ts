// A local SQS API for tests and `npm start`: fauxqs (an in-process emulator) with the charge queue and
// its DLQ created over the wire, with the attributes the CDK stack gives them (PIPELINE), so that the
// real @aws-sdk/client-sqs talks to the same shape of queue locally as on AWS.
//
// What fauxqs 2.4 really implements for FIFO queues (read in node_modules/fauxqs/dist/sqs, and
// exercised by test/producer.test.ts):
//   - Deduplication: a repeated MessageDeduplicationId within 5 minutes is accepted, not enqueued, and
//     answered with the ORIGINAL MessageId and SequenceNumber. The cache is per queue whatever
//     DeduplicationScope says (the attribute is stored, not honoured) and holds at most 10,000 ids: a
//     burst of more than 10,000 distinct sends within 5 minutes evicts the oldest ids early. For this
//     product group = orderId and dedup id = f(orderId), so queue scope and group scope agree.
//   - Ordering and locking: a group with a message in flight is skipped, but a receive takes at most ONE
//     message per group (real SQS may hand out several messages of one group in one receive). So a
//     fauxqs batch never holds two records of one group: the charge handler's "later records of a
//     failed group fail too" rule cannot be driven by a fauxqs batch; feed it a hand-built event.
//   - FifoThroughputLimit / DeduplicationScope: accepted and returned by GetQueueAttributes, no effect.
//   - Visibility timeout: honoured (queue default, or per ReceiveMessage); expiry puts the message back
//     at the head of its group. Expiry is noticed lazily: on a receive, and every 20 ms during a long
//     poll. Until then an expired receipt handle still works (ChangeMessageVisibility, DeleteMessage).
//   - ChangeMessageVisibility: honoured; 0 releases the message (and unlocks its group) at once; an
//     unknown receipt handle answers MessageNotInflight. DeleteMessage with an unknown handle succeeds.
//   - ApproximateReceiveCount (and ApproximateFirstReceiveTimestamp, SentTimestamp, MessageGroupId,
//     MessageDeduplicationId, SequenceNumber) are returned when asked for in MessageSystemAttributeNames.
//   - Redrive: on a receive, a message whose receive count would exceed maxReceiveCount is moved to the
//     DLQ instead of being returned (same MessageId, body and group; its receive count carries on: with
//     maxReceiveCount 2 the first receive from the DLQ reports ApproximateReceiveCount 4).
//     fauxqs does not check that a FIFO queue's DLQ is FIFO (AWS does), so we create it FIFO ourselves.
//   - Limits: 1 MiB per message and per batch (AWS raised its limit from 256 KiB in 2025), 10 entries
//     per batch, at most 10 messages per receive, WaitTimeSeconds ≤ 20.
//   - Not implemented: ReceiveRequestAttemptId, per-account throughput limits, throttling, IAM. State is
//     in memory only.
import { CreateQueueCommand, GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { startFauxqs, type FauxqsServer } from 'fauxqs';
import { PIPELINE } from '../lambdas/runtime/settings.ts';

export interface LocalSqsOptions {
  /** TCP port; default 0 (any free port). fauxqs listens on all interfaces. */
  readonly port?: number;
  /** Default 'us-east-1'; part of the queue URLs and ARNs. */
  readonly region?: string;
  /** Default PIPELINE.queueName. Must end in `.fifo`. */
  readonly queueName?: string;
  /** Default PIPELINE.dlqName. Must end in `.fifo`. */
  readonly dlqName?: string;
  /** Default PIPELINE.visibilityTimeoutSeconds (360); tests use a second or two. */
  readonly visibilityTimeoutSeconds?: number;
  /** Default PIPELINE.maxReceiveCount (5). */
  readonly maxReceiveCount?: number;
}

export interface LocalSqs {
  /** `http://127.0.0.1:<port>`: give it to SQSClient as `endpoint` (or to the CLI as `--endpoint`). */
  readonly endpoint: string;
  readonly region: string;
  readonly queueUrl: string;
  readonly queueArn: string;
  readonly dlqUrl: string;
  readonly dlqArn: string;
  /** A real SQS client on the endpoint, with static fake credentials. Destroyed by stop(). */
  readonly client: SQSClient;
  /** The emulator itself, for inspection (`inspectQueue(name)`) that does not change state. */
  readonly server: FauxqsServer;
  stop(): Promise<void>;
}

/** fauxqs checks no signature; the SDK still needs credentials to sign with. Never real ones here. */
export const LOCAL_CREDENTIALS = { accessKeyId: 'local', secretAccessKey: 'local' } as const;

export function localSqsClient(endpoint: string, region: string): SQSClient {
  return new SQSClient({ endpoint, region, credentials: LOCAL_CREDENTIALS });
}

export async function startLocalSqs(options: LocalSqsOptions = {}): Promise<LocalSqs> {
  const region = options.region ?? 'us-east-1';
  const queueName = options.queueName ?? PIPELINE.queueName;
  const dlqName = options.dlqName ?? PIPELINE.dlqName;
  const visibilityTimeoutSeconds = options.visibilityTimeoutSeconds ?? PIPELINE.visibilityTimeoutSeconds;
  const maxReceiveCount = options.maxReceiveCount ?? PIPELINE.maxReceiveCount;
  if (!queueName.endsWith('.fifo') || !dlqName.endsWith('.fifo')) {
    throw new Error(`startLocalSqs: FIFO queue names must end in .fifo (got ${queueName}, ${dlqName})`);
  }

  const server = await startFauxqs({ port: options.port ?? 0, logger: false, defaultRegion: region });
  const endpoint = `http://127.0.0.1:${server.port}`;
  const client = localSqsClient(endpoint, region);
  try {
    // The same attributes the stack sets, so local behaviour is configured as deployed behaviour.
    const fifo = {
      FifoQueue: 'true',
      // Dedup ids are explicit (hash of the order id): a body-hash would let two different bodies
      // for one order through, which is exactly what the deduplication id exists to stop.
      ContentBasedDeduplication: 'false',
      // High-throughput FIFO mode, as on AWS (fauxqs stores these two and ignores them).
      DeduplicationScope: 'messageGroup',
      FifoThroughputLimit: 'perMessageGroupId',
    };
    const dlq = await client.send(new CreateQueueCommand({ QueueName: dlqName, Attributes: fifo }));
    const dlqUrl = dlq.QueueUrl ?? fail('CreateQueue returned no QueueUrl for the DLQ');
    const dlqArn = await queueArn(client, dlqUrl);
    const queue = await client.send(
      new CreateQueueCommand({
        QueueName: queueName,
        Attributes: {
          ...fifo,
          VisibilityTimeout: String(visibilityTimeoutSeconds),
          RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount }),
        },
      }),
    );
    const queueUrl = queue.QueueUrl ?? fail('CreateQueue returned no QueueUrl');
    return {
      endpoint,
      region,
      queueUrl,
      queueArn: await queueArn(client, queueUrl),
      dlqUrl,
      dlqArn,
      client,
      server,
      async stop() {
        client.destroy();
        await server.stop();
      },
    };
  } catch (error) {
    client.destroy();
    await server.stop();
    throw error;
  }
}

async function queueArn(client: SQSClient, queueUrl: string): Promise<string> {
  const out = await client.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['QueueArn'] }));
  return out.Attributes?.QueueArn ?? fail(`no QueueArn for ${queueUrl}`);
}

function fail(message: string): never {
  throw new Error(message);
}
