// Who may use the pipeline's resources, said by the resources themselves. Identity policies grant
// access only to the pipeline's own roles, but in the same account anything an identity policy
// allows is allowed unless a resource policy denies it — so a PowerUser could read the Stripe key,
// send a charge request for any stored customer, or put a forged `Charge Succeeded` on the bus. Each
// resource therefore carries an explicit Deny for every principal but the named roles (an explicit
// deny wins over any allow: https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_evaluation-logic.html).
// Being on an exemption list grants nothing: each role still needs its identity grant.
//
//   the Stripe secret   GetSecretValue: the charge, reconcile, ops and Stripe-events roles; encrypted with a
//                       customer managed KMS key (rotated yearly) when the construct creates it
//   the webhook secret  GetSecretValue: the Stripe-events role
//   the intake queue    SendMessage: producerRoles, grantSendChargeRequests' grantees, the operator role
//                       (a DLQ redrive sends as its caller), and the charge function's role
//   the outcome bus     PutEvents: the charge, reconcile, ops and Stripe-events roles and
//                       grantPutOutcomeEvents' grantees
//
// A secret passed in (stripeSecret, stripeWebhookSecret) is not the construct's to change: it gets no
// policy here, and docs/deploy.md says what to put on it.
import * as cdk from 'aws-cdk-lib';
import type * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { OperatorListError, parseOperatorPrincipals } from '../lambdas/ops/identity.ts';

/** A grantee's ARN for an exemption list: a role or a user; anything else cannot be named in aws:PrincipalArn. */
export function principalArnOf(scope: Construct, grantee: iam.IGrantable, what: string): string {
  const principal = grantee.grantPrincipal as Partial<iam.IRole & iam.IUser & iam.ArnPrincipal>;
  const arn = principal.roleArn ?? principal.userArn ?? principal.arn;
  if (typeof arn !== 'string') {
    throw new Error(
      `${scope.node.path}: ${what}: the grantee must be an IAM role or user (its ARN goes into the resource's policy, aws:PrincipalArn), got ${principal.constructor?.name ?? typeof principal}`,
    );
  }
  return arn;
}

/** A list that grows until synth (grants made after the constructor still count). */
class ArnList {
  readonly #arns: string[] = [];
  constructor(initial: readonly string[]) {
    this.#arns.push(...initial);
  }
  add(arn: string): void {
    if (!this.#arns.includes(arn)) this.#arns.push(arn);
  }
  get list(): string[] {
    return cdk.Lazy.uncachedList({ produce: () => [...this.#arns] });
  }
}

function denyAllBut(sid: string, actions: string[], resources: string[], exempt: ArnList): iam.PolicyStatement {
  return new iam.PolicyStatement({
    sid,
    effect: iam.Effect.DENY,
    principals: [new iam.AnyPrincipal()],
    actions,
    resources,
    conditions: { ArnNotEquals: { 'aws:PrincipalArn': exempt.list } },
  });
}

export interface PerimeterProps {
  readonly stripeSecret: secretsmanager.ISecret;
  /** The roles that read the Stripe key. */
  readonly stripeKeyReaders: readonly iam.IRole[];
  readonly webhookSecret?: secretsmanager.ISecret;
  readonly webhookSecretReaders: readonly iam.IRole[];
  readonly queue: sqs.IQueue;
  /** Roles exempt from the queue's deny from the start (producerRoles, the operator role, the charge role). */
  readonly senders: readonly string[];
  readonly eventBus: events.EventBus;
  readonly publishers: readonly iam.IRole[];
}

export class Perimeter extends Construct {
  readonly #senders: ArnList;
  readonly #publishers: ArnList;
  /** Whether each resource got its policy (false: a secret passed in, which is not the construct's). */
  readonly applied: { readonly stripeSecret: boolean; readonly webhookSecret: boolean };

  constructor(scope: Construct, id: string, props: PerimeterProps) {
    super(scope, id);
    const readers = new ArnList(props.stripeKeyReaders.map((r) => r.roleArn));
    const stripe = props.stripeSecret.addToResourcePolicy(denyAllBut('OnlyThePipelineReadsTheStripeKey', ['secretsmanager:GetSecretValue'], ['*'], readers));
    let webhook = false;
    if (props.webhookSecret) {
      const webhookReaders = new ArnList(props.webhookSecretReaders.map((r) => r.roleArn));
      webhook = props.webhookSecret.addToResourcePolicy(
        denyAllBut('OnlyStripeEventsReadsTheSigningSecret', ['secretsmanager:GetSecretValue'], ['*'], webhookReaders),
      ).statementAdded;
    }
    this.applied = { stripeSecret: stripe.statementAdded, webhookSecret: webhook };

    this.#senders = new ArnList(props.senders);
    props.queue.addToResourcePolicy(denyAllBut('OnlyNamedProducersSendChargeRequests', ['sqs:SendMessage'], [props.queue.queueArn], this.#senders));

    this.#publishers = new ArnList(props.publishers.map((r) => r.roleArn));
    props.eventBus.addToResourcePolicy(
      denyAllBut('OnlyThePipelinePublishesOutcomes', ['events:PutEvents'], [props.eventBus.eventBusArn], this.#publishers),
    );
  }

  /** Exempt a producer from the intake queue's deny (it still needs sqs:SendMessage of its own). */
  allowSender(arn: string): void {
    this.#senders.add(arn);
  }

  /** Exempt a publisher from the bus's deny (it still needs events:PutEvents of its own). */
  allowPublisher(arn: string): void {
    this.#publishers.add(arn);
  }
}

/**
 * The customer managed key of the Stripe secret the construct creates: a key of its own, rotated
 * every year by KMS, kept with the secret unless the removal policy is DESTROY.
 */
export function stripeSecretKey(scope: Construct, removalPolicy: cdk.RemovalPolicy): kms.Key {
  return new kms.Key(scope, 'StripeSecretKey', {
    description: 'Charge pipeline: encrypts the Stripe secret key (the secret policy names who may read it)',
    enableKeyRotation: true,
    removalPolicy: removalPolicy === cdk.RemovalPolicy.DESTROY ? cdk.RemovalPolicy.DESTROY : cdk.RemovalPolicy.RETAIN,
  });
}

/**
 * OPS_OPERATOR_ARNS of the ops function: the operator role and operatorPrincipals. Entries known at
 * synth are checked as the function will parse them, so a typo fails the synth, not the first write.
 */
export function operatorArns(scope: Construct, operatorRole: iam.IRole | undefined, principals: readonly string[] = []): string[] {
  for (const arn of principals) {
    if (cdk.Token.isUnresolved(arn)) continue;
    if (arn.includes(',')) throw new Error(`${scope.node.path}: operatorPrincipals: one ARN per entry, got "${arn}"`);
    try {
      parseOperatorPrincipals(arn);
    } catch (error) {
      if (error instanceof OperatorListError) throw new Error(`${scope.node.path}: operatorPrincipals: ${error.message.replace(/^OPS_OPERATOR_ARNS: /, '')}`);
      throw error;
    }
  }
  return [...(operatorRole ? [operatorRole.roleArn] : []), ...principals];
}
