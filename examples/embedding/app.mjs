// A platform team's own CDK app embedding two charge pipelines in one stack, in plain JavaScript,
// with the construct installed from npm (`npm install exactly-once-charges aws-cdk-lib constructs`).
// It is also what test/package/pack.test.ts installs the packed tarball into and synthesizes.
//
//   npx cdk synth --app "node app.mjs"          (or: node app.mjs, with CDK_OUTDIR set)
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as sns from 'aws-cdk-lib/aws-sns';
import { AwsSolutionsChecks } from 'cdk-nag';
import { acknowledgeChargePipelineFindings, ChargePipeline } from 'exactly-once-charges';

class PaymentsStack extends cdk.Stack {
  constructor(scope, id, props) {
    super(scope, id, props);

    // The team's network: the functions need private subnets with a NAT route (Stripe), the
    // databases isolated subnets in two AZs.
    const vpc = new ec2.Vpc(this, 'Network', {
      maxAzs: 2,
      natGateways: 2,
      subnetConfiguration: [
        { name: 'ingress', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'apps', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
        { name: 'data', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
    });
    vpc.addFlowLog('FlowLog');
    const onCall = new sns.Topic(this, 'OnCall', { enforceSSL: true });
    cdk.Validations.of(onCall).acknowledge({
      id: 'AwsSolutions-SNS2',
      reason: 'Alarm notifications carry alarm names and states only, and this example keeps the topic unencrypted to stay short.',
    });

    // Two pipelines side by side: each has its own queue, bus, database, metrics and alarms. Nothing
    // is named by hand; CloudFormation and the construct make every name unique to the instance.
    const checkout = new ChargePipeline(this, 'Checkout', {
      vpc,
      alarmTopic: onCall,
      multiAz: true,
    });
    const subscriptions = new ChargePipeline(this, 'Subscriptions', {
      vpc,
      alarmTopic: onCall,
      pipelineName: 'subscriptions',
      chargeMaxConcurrency: 2,
      exampleConsumer: false,
    });

    // A producer service may send charge requests to one of them, and read the outcomes' bus.
    const orders = new iam.Role(this, 'OrderService', { assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com') });
    checkout.grantSendChargeRequests(orders);

    new cdk.CfnOutput(this, 'CheckoutQueueUrl', { value: checkout.queue.queueUrl });
    new cdk.CfnOutput(this, 'SubscriptionsQueueUrl', { value: subscriptions.queue.queueUrl });
    new cdk.CfnOutput(this, 'CheckoutBus', { value: checkout.eventBus.eventBusName });
  }
}

const app = new cdk.App();
new PaymentsStack(app, 'Payments');
// The construct acknowledges no cdk-nag finding itself: this app opts in to the ones its design
// leaves, each documented with its reason (docs/deploy.md, "cdk-nag").
acknowledgeChargePipelineFindings(app);
cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
