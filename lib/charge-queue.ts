// The intake: an SQS FIFO queue (producers send MessageGroupId = orderId and their own deduplication
// id) in high-throughput mode, with a FIFO dead-letter queue for records that could not be made
// durable after maxReceiveCount receives.
import * as cdk from 'aws-cdk-lib';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';

export interface ChargeQueueProps {
  readonly queueName: string;
  readonly deadLetterQueueName: string;
  readonly maxReceiveCount: number;
  /** At least six times the consumer's timeout, so a slow batch is not redelivered while it runs. */
  readonly visibilityTimeout: cdk.Duration;
  readonly removalPolicy: cdk.RemovalPolicy;
}

export class ChargeQueue extends Construct {
  readonly queue: sqs.Queue;
  readonly deadLetterQueue: sqs.Queue;

  constructor(scope: Construct, id: string, props: ChargeQueueProps) {
    super(scope, id);
    // Kept only under RETAIN: the queues have fixed names, and a kept queue would block redeploying
    // the stack after a teardown (drain both queues before tearing down).
    const retained =
      props.removalPolicy === cdk.RemovalPolicy.RETAIN ? cdk.RemovalPolicy.RETAIN : cdk.RemovalPolicy.DESTROY;

    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      queueName: props.deadLetterQueueName,
      fifo: true,
      contentBasedDeduplication: false,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // The longest SQS allows: a parked request waits for a human to fix the cause and redrive it.
      retentionPeriod: cdk.Duration.days(14),
      removalPolicy: retained,
    });

    this.queue = new sqs.Queue(this, 'Queue', {
      queueName: props.queueName,
      fifo: true,
      // Producers send MessageDeduplicationId = sha256("charge:{orderId}"): a body-based id would let
      // two different bodies for one order through.
      contentBasedDeduplication: false,
      deduplicationScope: sqs.DeduplicationScope.MESSAGE_GROUP,
      fifoThroughputLimit: sqs.FifoThroughputLimit.PER_MESSAGE_GROUP_ID,
      visibilityTimeout: props.visibilityTimeout,
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      deadLetterQueue: { queue: this.deadLetterQueue, maxReceiveCount: props.maxReceiveCount },
      removalPolicy: retained,
    });
  }
}
