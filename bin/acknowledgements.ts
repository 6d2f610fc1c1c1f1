// The default app's own cdk-nag acknowledgements (bin/app.ts). The construct acknowledges nothing:
// it records the findings its design leaves, each with its reason (lib/nag.ts, docs/deploy.md
// "cdk-nag"), and this app agrees with every one of them; what an environment chose (the dev
// profile's single-AZ instance, deletion protection off) it acknowledges where it chose it.
import * as cdk from 'aws-cdk-lib';
import type * as rds from 'aws-cdk-lib/aws-rds';
import type { IConstruct } from 'constructs';
import type { ChargePipeline } from '../lib/charge-pipeline.ts';
import { acknowledgeChargePipelineFindings } from '../lib/nag.ts';

/** Call once everything is built (the receipt notifier too): findings recorded later are not covered. */
export function acknowledgeAppFindings(scope: IConstruct, pipeline: ChargePipeline, environment: string): void {
  acknowledgeChargePipelineFindings(scope);
  const database = pipeline.database?.node.defaultChild as rds.CfnDBInstance | undefined;
  if (!database) return;
  if (database.multiAz !== true) {
    cdk.Validations.of(database).acknowledge({
      id: 'AwsSolutions-RDS3',
      reason: `The ${environment} environment runs a single-AZ instance to halve its cost, accepting downtime and a restore from backup when its AZ fails (production is Multi-AZ).`,
    });
  }
  if (database.deletionProtection !== true) {
    cdk.Validations.of(database).acknowledge({
      id: 'AwsSolutions-RDS10',
      reason: `The ${environment} environment turned deletion protection off so that cdk destroy works, and its removal policy still decides whether a final snapshot is kept.`,
    });
  }
}
