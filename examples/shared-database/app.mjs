// A platform team's CDK app with two stacks and two charge pipelines on one database server, in
// plain JavaScript, with the construct installed from npm. test/package/pack.test.ts installs the
// packed tarball into a temporary app and synthesizes this file.
//
//   Platform:     the VPC and the first pipeline, which creates the database instance
//   Marketplace:  a second pipeline on that instance (existingDatabase: its own database and its own
//                 login), the receipt notifier, and an outcome consumer of the team's own
//
//   npx cdk synth --app "node app.mjs"          (or: node app.mjs, with CDK_OUTDIR set)
import { copyFileSync, mkdirSync, mkdtempSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as cdk from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { AwsSolutionsChecks } from 'cdk-nag';
import { acknowledgeChargePipelineFindings, addReceiptNotifier, ChargePipeline, OutcomeConsumer, OUTCOME_DETAIL_TYPES, RDS_CA_BUNDLE_FILE } from 'exactly-once-charges';

class PlatformStack extends cdk.Stack {
  constructor(scope, id, props) {
    super(scope, id, props);
    this.vpc = new ec2.Vpc(this, 'Network', {
      maxAzs: 2,
      natGateways: 2,
      subnetConfiguration: [
        { name: 'ingress', subnetType: ec2.SubnetType.PUBLIC, cidrMask: 24 },
        { name: 'apps', subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS, cidrMask: 20 },
        { name: 'data', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 },
      ],
    });
    this.vpc.addFlowLog('FlowLog');
    // The production profile (the default): Multi-AZ, a NAT gateway per AZ.
    // The webhook function behind its anonymous Function URL gets a concurrency of its own: a flood
    // of forged requests cannot take the database's connections or the account's concurrency.
    this.checkout = new ChargePipeline(this, 'Checkout', { vpc: this.vpc, alarmEmail: 'payments-oncall@example.com' });
  }
}

class MarketplaceStack extends cdk.Stack {
  constructor(scope, id, { platform, ...props }) {
    super(scope, id, props);
    const owner = platform.checkout;
    // Its own database on the first pipeline's instance (created by its first migrate run), and so its
    // own application role, marketplace_app: neither pipeline can log in to the other's database.
    const marketplace = new ChargePipeline(this, 'Marketplace', {
      vpc: platform.vpc,
      existingDatabase: {
        endpoint: owner.database.instanceEndpoint,
        secret: owner.databaseSecret,
        databaseName: 'marketplace',
        connections: owner.database,
      },
      alarmEmail: 'marketplace-oncall@example.com',
      // Stripe's events through its EventBridge partner source (the Checkout pipeline takes webhooks).
      stripeEvents: 'eventbridge',
      stripePartnerEventBusName: 'aws.partner/stripe.com/ed_test_marketplace',
      queueName: 'marketplace-charge-requests.fifo',
    });

    // The receipt notifier, pre-built in the package. Its role is per server: not the first
    // pipeline's receipt_notifier.
    addReceiptNotifier(this, marketplace, {
      policy: 'at-least-once',
      emailApiBase: 'https://api.resend.com',
      emailIdempotency: false,
      databaseRole: 'marketplace_receipts',
    });

    // A consumer of the team's own, bundled elsewhere: its asset carries the RDS CA bundle.
    const bundle = mkdtempSync(path.join(os.tmpdir(), 'ledger-consumer-'));
    copyFileSync(path.join(import.meta.dirname, 'ledger-consumer', 'index.mjs'), path.join(bundle, 'index.mjs'));
    mkdirSync(path.join(bundle, 'rds-ca'));
    copyFileSync(RDS_CA_BUNDLE_FILE, path.join(bundle, 'rds-ca', 'global-bundle.pem'));
    const login = marketplace.addConsumerDatabaseLogin('Ledger', { role: 'marketplace_ledger', schemas: ['ledger'] });
    const ledger = new OutcomeConsumer(this, 'Ledger', {
      consumerName: 'ledger',
      policy: 'at-least-once',
      eventBus: marketplace.eventBus,
      detailTypes: OUTCOME_DETAIL_TYPES,
      code: lambda.Code.fromAsset(bundle),
      vpc: platform.vpc,
      securityGroup: marketplace.functionsSecurityGroup,
      databaseSecret: login.secret,
      environment: login.environment,
      alarmTopic: marketplace.alarmTopic,
    });
    marketplace.migrationTrigger.executeBefore(ledger.function);

    const sellers = new iam.Role(this, 'SellerService', { assumedBy: new iam.ServicePrincipal('ecs-tasks.amazonaws.com') });
    marketplace.grantSendChargeRequests(sellers);
  }
}

const app = new cdk.App();
const platform = new PlatformStack(app, 'Platform');
new MarketplaceStack(app, 'Marketplace', { platform });
// This app's own cdk-nag acknowledgements: the construct makes none, and records the findings its
// design leaves (docs/deploy.md, "cdk-nag"); this app agrees with each of them.
acknowledgeChargePipelineFindings(app);
cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
app.synth();
