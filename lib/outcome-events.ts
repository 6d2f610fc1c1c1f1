// Outcome events: the custom EventBridge bus the outbox relays publish to, an archive to replay from,
// and an example consumer (a rule delivering every outcome to an SQS queue). Delivery is
// at-least-once: consumers deduplicate on detail.eventId.
import * as cdk from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';

/** The detail-types of the outcome events (the event contract of docs/events.md). */
export const OUTCOME_DETAIL_TYPES = ['Charge Succeeded', 'Charge Authorized', 'Charge Failed', 'Charge Needs Review', 'Charge Reissued'] as const;

export interface OutcomeEventsProps {
  /** @default - a name unique to the construct instance */
  readonly eventBusName?: string;
  readonly eventSource: string;
  readonly archiveRetention: cdk.Duration;
  readonly exampleConsumer: boolean;
}

export class OutcomeEvents extends Construct {
  readonly eventBus: events.EventBus;
  readonly archive: events.Archive;
  /** The example consumer's queue (undefined when exampleConsumer is false). */
  readonly exampleConsumerQueue?: sqs.Queue;
  readonly exampleConsumerDeadLetterQueue?: sqs.Queue;
  readonly exampleConsumerRule?: events.Rule;
  readonly eventSource: string;

  constructor(scope: Construct, id: string, props: OutcomeEventsProps) {
    super(scope, id);
    this.eventSource = props.eventSource;
    this.eventBus = new events.EventBus(this, 'Bus', {
      eventBusName: props.eventBusName ?? cdk.Names.uniqueResourceName(this, { maxLength: 256, separator: '-' }),
      description: 'Charge pipeline outcome events (Charge Succeeded / Failed / Needs Review)',
    });
    this.archive = this.eventBus.archive('Archive', {
      description: 'Charge pipeline outcome events, for replay to a consumer that lost some',
      eventPattern: { source: [props.eventSource] },
      retention: props.archiveRetention,
    });

    if (props.exampleConsumer) {
      // One queue is both the consumer queue's redrive target and the rule target's dead-letter
      // queue: events EventBridge could not deliver and messages the consumer could not process.
      this.exampleConsumerDeadLetterQueue = new sqs.Queue(this, 'ExampleConsumerDeadLetterQueue', {
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: cdk.Duration.days(14),
      });
      this.exampleConsumerQueue = new sqs.Queue(this, 'ExampleConsumerQueue', {
        // SQS-managed SSE: EventBridge cannot send to a queue encrypted with the AWS managed KMS key.
        encryption: sqs.QueueEncryption.SQS_MANAGED,
        enforceSSL: true,
        retentionPeriod: cdk.Duration.days(4),
        deadLetterQueue: { queue: this.exampleConsumerDeadLetterQueue, maxReceiveCount: 5 },
      });
      this.exampleConsumerRule = new events.Rule(this, 'ExampleConsumerRule', {
        eventBus: this.eventBus,
        description: 'Example consumer: every charge outcome to an SQS queue',
        eventPattern: { source: [props.eventSource], detailType: [...OUTCOME_DETAIL_TYPES] },
        targets: [
          new eventTargets.SqsQueue(this.exampleConsumerQueue, {
            deadLetterQueue: this.exampleConsumerDeadLetterQueue,
            retryAttempts: 185,
            maxEventAge: cdk.Duration.hours(24),
          }),
        ],
      });
    }
  }

  /** events:PutEvents on this bus, and on nothing else. */
  grantPutEvents(grantee: iam.IGrantable): iam.Grant {
    return this.eventBus.grantPutEventsTo(grantee);
  }
}
