#!/usr/bin/env node
// The default CDK app: one ChargePipelineStack, configured from CDK context (see lib/config.ts and
// "charge-pipeline:environments" in cdk.json), checked by cdk-nag's AwsSolutions pack: any new,
// unacknowledged finding fails the synth.
//
//   npx cdk deploy -c environment=prod -c alarmEmail=oncall@example.com
//
// No env (account/region) on purpose: the template stays environment-agnostic, so synth needs no
// AWS credentials and no AZ lookup; the CLI's profile decides where it is deployed.
import * as cdk from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { ChargePipelineStack, stackNameFor } from '../lib/charge-pipeline-stack.ts';
import { type DeploymentSettings, DeploymentSettingsError, settingsFromContext } from '../lib/config.ts';
import { acknowledgeAppFindings } from './acknowledgements.ts';
import { addReceiptNotifier, receiptNotifierFromContext, type ReceiptNotifierSettings } from '../lib/outcome-consumer.ts';

const app = new cdk.App();
let settings: DeploymentSettings;
// Optional: the receipt notifier, the first outcome consumer (-c receiptNotifier=true; docs/events.md).
let receipts: ReceiptNotifierSettings | null;
try {
  settings = settingsFromContext((key) => app.node.tryGetContext(key));
  receipts = receiptNotifierFromContext((key) => app.node.tryGetContext(key));
} catch (error) {
  // A typo in a -c value is the operator's to fix: say which, without a stack trace around it.
  if (!(error instanceof DeploymentSettingsError)) throw error;
  console.error(error.message);
  process.exit(1);
}

const stack = new ChargePipelineStack(app, stackNameFor(settings.environment), {
  settings,
  tags: { application: PIPELINE.serviceName, environment: settings.environment },
});
if (receipts) addReceiptNotifier(stack, stack.pipeline, receipts);

// This app's own cdk-nag acknowledgements (the construct makes none): bin/acknowledgements.ts.
acknowledgeAppFindings(app, stack.pipeline, settings.environment);

cdk.Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
