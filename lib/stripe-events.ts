// Stripe events in: one function, behind one of two doors, writing into the transactional inbox.
//
//   webhook:      Stripe ──HTTPS──▶ Function URL ──▶ stripe-events λ ──▶ PostgreSQL (stripe_events)
//   eventbridge:  Stripe ──▶ partner event bus ──▶ rule ──▶ stripe-events λ ──▶ (same)
//                                                    │ undeliverable  │ failed after Lambda's retries
//                                                    └──▶ partner-event failure queue ◀──┘ ──▶ alarm
//                                                         replayed by npm run redrive:partner-events
//                 reconcile λ applies what the inbox still holds, every minute
//
// The rule invokes the function asynchronously: once Lambda has accepted an event, the rule's own
// retries and DLQ are done with it, and a function that keeps failing (the database down) gets
// Lambda's retries only. The on-failure destination keeps what those retries did not record, on the
// same queue as the rule's DLQ, so one alarm and one replay cover both.
//
// Why a Function URL and not an HTTP API: the endpoint is one POST route whose only authentication
// is Stripe's signature over the raw body — API Gateway would add a service, a per-request price and
// latency, and nothing it offers is used (no routes, no authorizer: Stripe cannot sign AWS requests).
// What it would give — a WAF, a custom domain — can be had by putting CloudFront in front of the URL.
// The function's concurrency can be capped (`reservedConcurrency`) so a flood of forged requests
// can neither exhaust the account's concurrency nor the database's connections; Stripe retries what
// a throttle (429) turned away.
import * as cdk from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as destinations from 'aws-cdk-lib/aws-lambda-destinations';
import type * as logs from 'aws-cdk-lib/aws-logs';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { SUBSCRIBED_EVENT_TYPES } from '../lambdas/payments/stripe-event-types.ts';
import type { PipelineMetrics } from './observability.ts';
import { PipelineFunction, type PipelineLogLevel } from './pipeline-function.ts';
import { designFinding } from './nag.ts';

export type StripeEventsInput = 'webhook' | 'eventbridge' | 'none';

export interface StripeEventsProps {
  readonly input: Exclude<StripeEventsInput, 'none'>;
  readonly vpc: ec2.IVpc;
  readonly securityGroup: ec2.ISecurityGroup;
  /** What every pipeline function reads (database, Stripe key, bus). */
  readonly environment: Record<string, string>;
  /** The data-only application role's secret (DB_SECRET_ARN of `environment`), never the owner's. */
  readonly applicationDatabaseSecret: secretsmanager.ISecret;
  readonly stripeSecret: secretsmanager.ISecret;
  /** Lets the function publish the outcome events its applies write (refunds, disputes, settles). */
  readonly grantPutEvents: (grantee: iam.IGrantable) => iam.Grant;
  /**
   * The endpoint's signing secret (whsec_…), as SecretString or JSON {"secret": "whsec_…"}.
   * @default - a new secret, created EMPTY: deliveries get 503 (and Stripe retries them for three
   *   days) until an operator pastes the endpoint's signing secret from the Dashboard
   */
  readonly webhookSecret?: secretsmanager.ISecret;
  /**
   * eventbridge: the partner event bus, named after Stripe's partner event source
   * (aws.partner/stripe.com/ed_…), associated in the EventBridge console first.
   */
  readonly partnerEventBusName?: string;
  /** eventbridge: may replay the failure queue (receive and delete its messages, invoke the function). */
  readonly operatorRole?: iam.IRole;
  /** Caps the function's concurrency (a flood of forged requests, database connections). @default - unreserved (the pipeline passes 10) */
  readonly reservedConcurrency?: number;
  readonly logLevel: PipelineLogLevel;
  /** The instance's metrics identity (pipelineMetrics): its alarms read this instance's metrics only. */
  readonly metrics: PipelineMetrics;
  /** Where the function runs. @default PRIVATE_WITH_EGRESS subnets */
  readonly vpcSubnets?: ec2.SubnetSelection;
  readonly logRetention: logs.RetentionDays;
  readonly removalPolicy: cdk.RemovalPolicy;
}

export class StripeEvents extends Construct {
  readonly function: PipelineFunction;
  /** webhook: the endpoint to register in the Stripe Dashboard (Developers → Webhooks). */
  readonly functionUrl?: lambda.FunctionUrl;
  readonly webhookSecret?: secretsmanager.ISecret;
  /** eventbridge: the rule on the partner bus. */
  readonly rule?: events.Rule;
  /**
   * eventbridge: the partner-event failure queue, where events go that the function could not take:
   * the rule target's DLQ (EventBridge could not invoke it) and the function's on-failure destination
   * (Lambda's retries failed). Replayed with `npm run redrive:partner-events`.
   */
  readonly deadLetterQueue?: sqs.Queue;
  /** Exactly the event types to subscribe to (the applier acts on these; anything else is recorded and ignored). */
  readonly subscribedEvents: readonly string[] = SUBSCRIBED_EVENT_TYPES;

  constructor(scope: Construct, id: string, props: StripeEventsProps) {
    super(scope, id);
    if (props.input === 'eventbridge' && !props.partnerEventBusName?.startsWith('aws.partner/stripe.com/')) {
      throw new Error(
        `stripeEvents 'eventbridge' needs stripePartnerEventBusName: the partner event source Stripe created (aws.partner/stripe.com/…), got ${JSON.stringify(props.partnerEventBusName)}`,
      );
    }
    if (props.reservedConcurrency !== undefined && !cdk.Token.isUnresolved(props.reservedConcurrency) && (!Number.isInteger(props.reservedConcurrency) || props.reservedConcurrency < 1)) {
      throw new Error(`stripeEventsReservedConcurrency must be a positive integer, got ${props.reservedConcurrency}`);
    }

    const environment: Record<string, string> = {
      ...props.environment,
      STRIPE_EVENTS_INPUT: props.input,
      // The inline apply may retrieve the PaymentIntent once; Stripe waits for the answer, so the
      // call is kept short (a slow Stripe only defers the event to the reconciler's sweep).
      STRIPE_TIMEOUT_MS: '5000',
      STRIPE_MAX_NETWORK_RETRIES: '0',
    };
    if (props.input === 'webhook') {
      this.webhookSecret = props.webhookSecret ?? this.createWebhookSecret(props.removalPolicy);
      environment.STRIPE_WEBHOOK_SECRET_ARN = this.webhookSecret.secretArn;
    } else {
      environment.STRIPE_PARTNER_EVENT_SOURCE = props.partnerEventBusName!;
    }

    if (props.input === 'eventbridge') this.deadLetterQueue = this.createFailureQueue(props.removalPolicy);

    this.function = new PipelineFunction(this, 'Function', {
      handler: 'stripe-events',
      description: `Charge pipeline: Stripe events in (${props.input}) -> transactional inbox -> applier`, // ASCII: the IAM role description repeats it
      vpc: props.vpc,
      securityGroup: props.securityGroup,
      // Verify, one insert, an inline apply that may retrieve once (bounded by STRIPE_TIMEOUT_MS).
      timeout: cdk.Duration.seconds(30),
      memorySize: 512,
      environment,
      logLevel: props.logLevel,
      metrics: props.metrics,
      vpcSubnets: props.vpcSubnets,
      logRetention: props.logRetention,
      removalPolicy: props.removalPolicy,
      ...(props.input === 'eventbridge'
        ? { asyncRetryAttempts: 2, asyncMaxEventAge: cdk.Duration.hours(6), asyncOnFailure: new destinations.SqsDestination(this.deadLetterQueue!) }
        : { asyncRetryAttempts: 0 }),
      reservedConcurrentExecutions: props.reservedConcurrency,
    });

    // Least privilege: the application role's and Stripe's secrets, the signing secret, PutEvents on the outcome bus.
    props.applicationDatabaseSecret.grantRead(this.function);
    props.stripeSecret.grantRead(this.function);
    this.webhookSecret?.grantRead(this.function);
    props.grantPutEvents(this.function);
    if (this.deadLetterQueue && props.operatorRole) {
      this.deadLetterQueue.grantConsumeMessages(props.operatorRole);
      this.function.grantInvoke(props.operatorRole);
    }

    if (props.input === 'webhook') {
      this.functionUrl = this.function.addFunctionUrl({ authType: lambda.FunctionUrlAuthType.NONE, invokeMode: lambda.InvokeMode.BUFFERED });
      new cdk.CfnOutput(this, 'WebhookUrl', {
        description: 'Register this URL as a Stripe webhook endpoint (Dashboard → Developers → Webhooks), then put its signing secret into the webhook secret',
        value: this.functionUrl.url,
      });
      new cdk.CfnOutput(this, 'WebhookSecretArn', {
        description: 'Put the endpoint signing secret (whsec_…) here',
        value: this.webhookSecret!.secretArn,
      });
    } else {
      const bus = events.EventBus.fromEventBusName(this, 'PartnerBus', props.partnerEventBusName!);
      this.rule = new events.Rule(this, 'Rule', {
        description: 'Charge pipeline: Stripe partner events into the inbox',
        eventBus: bus,
        // https://docs.stripe.com/event-destinations/eventbridge: source is the partner event
        // source, detail-type the Stripe event type, detail the event itself.
        eventPattern: { source: events.Match.prefix('aws.partner/stripe.com/'), detailType: [...SUBSCRIBED_EVENT_TYPES] },
        targets: [
          new eventTargets.LambdaFunction(this.function, {
            retryAttempts: 8,
            maxEventAge: cdk.Duration.hours(24),
            deadLetterQueue: this.deadLetterQueue!,
          }),
        ],
      });
      new cdk.CfnOutput(this, 'PartnerEventRule', {
        description: 'Stripe events arrive through this rule on the partner event bus',
        value: this.rule.ruleName,
      });
      new cdk.CfnOutput(this, 'PartnerEventFailureQueueUrl', {
        description: 'Partner events the function could not take; replay them with npm run redrive:partner-events -- --queue-url <this> --function <StripeEventsFunctionName>',
        value: this.deadLetterQueue!.queueUrl,
      });
    }
    new cdk.CfnOutput(this, 'StripeEventsFunctionName', {
      description: 'The Stripe-events function (the target of npm run redrive:partner-events)',
      value: this.function.functionName,
    });
    new cdk.CfnOutput(this, 'SubscribedEvents', {
      description: 'Subscribe the Stripe endpoint / event destination to exactly these events',
      value: SUBSCRIBED_EVENT_TYPES.join(','),
    });
  }

  private createFailureQueue(removalPolicy: cdk.RemovalPolicy): sqs.Queue {
    const queue = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      // The longest SQS keeps a message: an outage found late still has its events to replay.
      retentionPeriod: cdk.Duration.days(14),
      removalPolicy: removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    });
    designFinding(queue, {
      id: 'AwsSolutions-SQS3',
      reason: 'This queue IS the dead-letter queue of the partner-event rule target and the on-failure destination of the function.',
    });
    return queue;
  }

  private createWebhookSecret(removalPolicy: cdk.RemovalPolicy): secretsmanager.Secret {
    const secret = new secretsmanager.Secret(this, 'WebhookSecret', {
      description: 'Stripe webhook endpoint signing secret (whsec_…) for the charge pipeline: put it as the SecretString (or JSON {"secret": "..."})',
      // Created empty, like the Stripe key: the value never passes through the template.
      secretObjectValue: { secret: cdk.SecretValue.unsafePlainText('') },
      removalPolicy: removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
    });
    designFinding(secret, {
      id: 'AwsSolutions-SMG4',
      reason: 'A webhook signing secret is rolled in the Stripe Dashboard and then put here by an operator, so Secrets Manager has no rotation function to run.',
    });
    return secret;
  }
}
