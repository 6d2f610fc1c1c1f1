// The receipt notifier's Lambda: SQS (fed by the rule on the pipeline's bus) → SQSBatchResponse.
// Wiring only: configuration, the pool, the provider; the kit does the rest (kit/lambda.ts).
//
// Migrations: the notifier applies ITS OWN sets (outcome_consumer.*, receipts.*) once per container
// before the first batch, recorded and under the runner's advisory lock, so a team's consumer
// deploys with no Trigger of its own and never needs the pipeline's migrate function. On AWS it
// connects as its own role (receipt_notifier, lib ChargePipeline.addConsumerDatabaseLogin), which
// owns those schemas and nothing of the pipeline's. Turn it off (CONSUMER_MIGRATE_ON_START=false)
// where the function's database role may not run DDL.
import { createLogger, createMetrics, describeError } from '../../runtime/observability.ts';
import { loadConfig } from '../../runtime/config.ts';
import { databaseClientConfig } from '../../runtime/database.ts';
import { getPool, getSecretString } from '../../runtime/resources.ts';
import { parseSecretJson, secretReadEmpty } from '../../runtime/secrets.ts';
import type { OutcomeConsumer } from '../kit/consumer.ts';
import { ConsumerConfigError } from '../kit/errors.ts';
import { createConsumerHandler } from '../kit/lambda.ts';
import { migrateConsumer } from '../kit/migrations.ts';
import { loadReceiptsConfig } from './config.ts';
import { HttpEmailProvider } from './email-provider.ts';
import { createReceiptNotifier, receiptMigrations, templateRecipient } from './notifier.ts';

export const logger = createLogger();
export const metrics = createMetrics();

/** The secret holds the key, or JSON {"apiKey": "…"} (the stack creates it so, empty). */
async function emailKeyFromSecret(arn: string, region: string | undefined): Promise<string> {
  const raw = (await getSecretString(arn, region)).trim();
  const key = raw.startsWith('{') ? (parseSecretJson(arn, raw, '{"apiKey": "…"} or the key').apiKey ?? '') : raw;
  if (typeof key !== 'string' || key === '') {
    secretReadEmpty(arn); // kept briefly only: an operator is about to put the key
    throw new ConsumerConfigError('the e-mail API key secret is empty: put the key into it (docs/deploy.md, The receipt notifier)');
  }
  return key;
}

async function setup(): Promise<OutcomeConsumer> {
  const receipts = loadReceiptsConfig(process.env);
  const runtime = loadConfig(process.env);
  if (receipts.migrateOnStart) {
    await migrateConsumer(await databaseClientConfig(runtime), receiptMigrations(), (line) => logger.info(line));
  }
  const db = await getPool(runtime, (error) => logger.warn('idle database connection lost', describeError(error)));
  const apiKey = receipts.email.apiKey ?? (await emailKeyFromSecret(receipts.email.apiKeySecretArn!, runtime.region));
  return createReceiptNotifier({
    db,
    provider: new HttpEmailProvider({ apiBase: receipts.email.apiBase, apiKey, idempotencyKeys: receipts.email.idempotencyKeys, timeoutMs: receipts.email.timeoutMs }),
    policy: receipts.policy,
    name: receipts.name,
    from: receipts.from,
    recipient: templateRecipient(receipts.recipientTemplate),
    leaseMs: receipts.leaseMs,
    log: logger,
  });
}

export const handler = createConsumerHandler({
  setup,
  logger,
  metrics,
  consumer: process.env.RECEIPTS_CONSUMER_NAME || 'receipts',
  policy: process.env.RECEIPTS_POLICY || 'at-least-once',
});
