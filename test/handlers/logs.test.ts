// What the exported handlers print: stdout captured while the REAL charge handler works a batch with
// a poison body, a declined card and a conflicting order, and while the reconciler runs. Every line
// is scanned: no Stripe key, no PaymentMethod id, no raw body, no database password. The EMF lines
// carry exactly the metric names the CDK alarms use (METRICS), in the stack's namespace and service.
import { randomUUID } from 'node:crypto';
import { SendMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargeRequestMessage, sendChargeRequests } from '../../lambdas/producer/client.ts';
import type { ChargeRequest } from '../../lambdas/payments/message.ts';
import { METRICS, PIPELINE } from '../../lambdas/runtime/settings.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { deliverOnce, lambdaContext, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { chargeOrder } from '../support/orders.ts';
import { captureOutput as capture } from '../support/output.ts';

const SECRET_KEY = 'sk_test_LOGSCAN_9f8e7d6c5b4a';
const POISON_MARKER = 'POISON-MARKER-31337';
let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;
let sqs: LocalSqs;
let queue: QueueRef;
let charge: SqsHandler;
let reconcile: (event: unknown, context: unknown) => Promise<unknown>;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('handler_logs');
  stripe = await startStripe({ apiKeys: [SECRET_KEY] });
  bus = await startFakeEventBridge();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: SECRET_KEY,
    STRIPE_TIMEOUT_MS: '2000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    EVENT_BUS_NAME: 'charge-outcomes',
    EVENTS_ENDPOINT: bus.url,
    // As chatty as it gets, metrics on, and an attempt to make Powertools log the whole event.
    POWERTOOLS_LOG_LEVEL: 'DEBUG',
    POWERTOOLS_LOGGER_LOG_EVENT: 'true',
  });
  delete process.env.POWERTOOLS_METRICS_DISABLED;
  delete process.env.POWERTOOLS_DEV;
  charge = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  reconcile = (await import('../../lambdas/reconcile/handler.ts')).handler as unknown as typeof reconcile;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources();
  await sqs.stop();
  await bus.close();
  await stripe.close();
  await db.drop();
});

const order = (overrides: Partial<ChargeRequest> = {}): ChargeRequest => chargeOrder({ amount: 4200, customerId: 'cus_logscan', paymentMethod: 'pm_logscanSuccess4242', ...overrides });

function forbidden(line: string): string[] {
  const found: string[] = [];
  if (line.includes(SECRET_KEY) || /sk_(test|live)_[A-Za-z0-9]/.test(line)) found.push('stripe key');
  if (/\bpm_[A-Za-z0-9]/.test(line)) found.push('payment method id');
  if (line.includes(POISON_MARKER)) found.push('raw body');
  if (line.includes('"Body"') || line.includes('"body"')) found.push('an SQS body field');
  if (/postgres:postgres@/.test(line)) found.push('database password');
  return found;
}

describe('log lines of the real handlers', () => {
  it('charge batch with a poison body, a decline and a conflict: record lines carry ids, no line carries a secret, EMF as the alarms expect', async () => {
    const ok = order();
    const declined = order({ paymentMethod: 'pm_card_chargeDeclined' });
    const conflictBase = order();
    await sendChargeRequests(sqs.client, sqs.queueUrl, [conflictBase]);
    await capture(() => deliverOnce(queue, charge));
    await sendChargeRequests(sqs.client, sqs.queueUrl, [ok, declined]);
    const poison = `{"orderId":"order-${randomUUID()}","paymentMethod":"pm_poisonCard999","note":"${POISON_MARKER}", broken`;
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: poison, MessageGroupId: `poison-${randomUUID()}`, MessageDeduplicationId: randomUUID() }));
    const conflict = chargeRequestMessage({ ...conflictBase, amount: 1, paymentMethod: 'pm_conflictCard777' });
    await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: conflict.MessageBody, MessageGroupId: conflict.MessageGroupId, MessageDeduplicationId: randomUUID() }));

    const { result, lines } = await capture(() => deliverOnce(queue, charge));

    expect(result.messages).toHaveLength(4);
    expect(result.response).toEqual({ batchItemFailures: [] });
    expect(lines.length).toBeGreaterThan(4);
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>); // every line is JSON
    for (const line of lines) expect(forbidden(line), line).toEqual([]);

    // One line per record with its ids. Powertools drops null attributes, so an id that does not exist
    // is absent: the poison body has neither order nor operation; everything else has both.
    const recordLines = parsed.filter((l) => typeof l.messageId === 'string');
    expect(recordLines).toHaveLength(4);
    expect(new Set(recordLines.map((l) => l.messageId))).toEqual(new Set(result.messages.map((m) => m.MessageId)));
    for (const l of recordLines.filter((x) => x.reasonCode !== 'invalid_json')) {
      expect(l.orderId).toEqual(expect.any(String));
      expect(l.operationId).toEqual(expect.any(String));
    }
    const byOrder = (id: string) => recordLines.find((l) => l.orderId === id)!;
    expect(byOrder(ok.orderId)).toMatchObject({ level: 'INFO', status: 'succeeded', operationId: expect.any(String), function_name: 'charge' });
    expect(byOrder(declined.orderId)).toMatchObject({ status: 'failed', errorClass: 'StripeCardError', operationId: expect.any(String) });
    expect(recordLines.find((l) => l.reasonCode === 'order_conflict')).toMatchObject({ orderId: conflictBase.orderId, operationId: expect.any(String), fields: ['amount', 'paymentMethod'] });
    const poisonLine = recordLines.find((l) => l.reasonCode === 'invalid_json')!;
    expect(poisonLine).not.toHaveProperty('orderId');
    expect(poisonLine).not.toHaveProperty('operationId');

    const emf = parsed.filter((l) => l._aws);
    expect(emf).toHaveLength(1);
    const directive = (emf[0]!._aws as { CloudWatchMetrics: { Namespace: string; Dimensions: string[][]; Metrics: { Name: string }[] }[] }).CloudWatchMetrics[0]!;
    expect(directive.Namespace).toBe(PIPELINE.metricsNamespace);
    expect(directive.Dimensions).toEqual([['service']]);
    expect(emf[0]!.service).toBe(PIPELINE.serviceName);
    expect(directive.Metrics.map((m) => m.Name).sort()).toEqual(
      [METRICS.chargeSucceeded, METRICS.chargeFailed, METRICS.chargeLeftOpen, METRICS.rejectedMessages, METRICS.legacyDeduplicationIds, METRICS.recordsNotDurable, METRICS.stripeAuthErrors, METRICS.idempotencyErrors, METRICS.configurationRefused].sort(),
    );
    expect(emf[0]).toMatchObject({ ChargeSucceeded: 1, ChargeFailed: 1, ChargeLeftOpen: 0, RejectedMessages: 2, RecordsNotDurable: 0, StripeAuthErrors: 0, StripeIdempotencyErrors: 0, ConfigurationRefused: 0 });
  });

  it('a Stripe key that Stripe refuses: StripeAuthErrors counted, the key never printed', async () => {
    await resetResources();
    process.env.STRIPE_SECRET_KEY = 'sk_test_REVOKED_0000111122223333';
    try {
      const r = order();
      await sendChargeRequests(sqs.client, sqs.queueUrl, [r]);
      const { result, lines } = await capture(() => deliverOnce(queue, charge));
      expect(result.response).toEqual({ batchItemFailures: [] });
      for (const line of lines) {
        expect(forbidden(line), line).toEqual([]);
        expect(line).not.toContain('REVOKED_0000111122223333');
      }
      const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l._aws)!;
      expect(emf).toMatchObject({ StripeAuthErrors: 1, ChargeLeftOpen: 1 });
    } finally {
      process.env.STRIPE_SECRET_KEY = SECRET_KEY;
      await resetResources();
    }
  });

  it('a Stripe timeout under which no call could ever start is refused with the fix, counted in ConfigurationRefused, and nothing is lost', async () => {
    // 17 s per attempt, 1 retry: one call may take 3 × 17 + 4 = 55 s, + 5 s margin = the whole 60 s.
    Object.assign(process.env, { STRIPE_TIMEOUT_MS: '17000', STRIPE_MAX_NETWORK_RETRIES: '1' });
    try {
      const r = order();
      await sendChargeRequests(sqs.client, sqs.queueUrl, [r]);
      const before = stripe.fake.requests().length;
      const { result, lines } = await capture(() => deliverOnce(queue, charge));
      expect(result.response).toEqual({ batchItemFailures: [] }); // recorded, due, for when it is fixed
      expect(stripe.fake.requests()).toHaveLength(before);
      const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>);
      const refusal = parsed.find((l) => l.level === 'ERROR' && String(l.message).includes('configuration refused'))!;
      expect(refusal.errorMessage).toMatch(/no Stripe call can ever start in the charge function.*lower STRIPE_TIMEOUT_MS to at most 16999/);
      expect(parsed.find((l) => l._aws)).toMatchObject({ ConfigurationRefused: 1 });
      const { rows } = await db.pool.query('SELECT status, attempts FROM payment_operations WHERE order_id = $1', [r.orderId]);
      expect(rows[0]).toMatchObject({ status: 'pending', attempts: 0 });

      // The reconciler refuses it too (37 s is its bound), still publishes its gauges, and fails the run.
      process.env.STRIPE_TIMEOUT_MS = '37000';
      const run = await capture(() => reconcile({}, lambdaContext(120_000, 'reconcile')).then(() => null, (error: unknown) => error));
      expect(String(run.result)).toMatch(/configuration: ConfigError: no Stripe call can ever start in the reconcile function/);
      expect(run.lines.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l._aws)).toMatchObject({ ConfigurationRefused: 1, ReviewQueueSize: expect.any(Number) });
    } finally {
      Object.assign(process.env, { STRIPE_TIMEOUT_MS: '2000', STRIPE_MAX_NETWORK_RETRIES: '0' });
      await resetResources();
    }
  });

  it('reconciler: the gauges go out as EMF with the alarm names, and no line carries a secret', async () => {
    const { result, lines } = await capture(() => reconcile({ source: 'aws.scheduler', scheduledTime: new Date().toISOString() }, lambdaContext(60_000, 'reconcile')));
    expect(result).toMatchObject({ stoppedBecause: expect.any(String) });
    for (const line of lines) expect(forbidden(line), line).toEqual([]);
    const emf = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l._aws);
    expect(emf).toHaveLength(1);
    const names = (emf[0]!._aws as { CloudWatchMetrics: { Metrics: { Name: string }[] }[] }).CloudWatchMetrics[0]!.Metrics.map((m) => m.Name).sort();
    expect(names).toEqual(
      [
        METRICS.reconciledOperations,
        METRICS.stripeAuthErrors,
        METRICS.idempotencyErrors,
        METRICS.configurationRefused,
        METRICS.openPending,
        METRICS.openUnknown,
        METRICS.oldestOpenAgeSeconds,
        METRICS.reviewQueueSize,
        METRICS.rejectedLastPeriod,
        METRICS.duplicateChargesRemedied,
        METRICS.openWatchFindings,
        METRICS.auditMonthsWithoutPartition,
        METRICS.authorizationsExpiringSoon,
        METRICS.openWatches,
        METRICS.unpublishedEvents,
        METRICS.oldestUnpublishedEventAgeSeconds,
        // the Stripe event inbox, worked by the same run
        METRICS.stripeEventsApplied,
        METRICS.stripeEventContradictions,
        METRICS.unrecordedCharges,
        METRICS.stripeEventsRefused,
        METRICS.inboxBacklog,
        METRICS.oldestInboxEventAgeSeconds,
        METRICS.openContradictions,
        METRICS.openUnrecordedCharges,
        METRICS.openRefusedStripeEvents,
        METRICS.stripeEventsSilentSeconds,
        // the retention phase, the run's last (RetentionBehind watches the overdue gauge)
        METRICS.retentionRowsRemoved,
        METRICS.retentionOverdueSeconds,
      ].sort(),
    );
    expect(emf[0]).toMatchObject({ RejectedMessagesLastPeriod: 2, ReviewQueueSize: 0, RetentionRowsRemoved: 0, RetentionOverdueSeconds: 0 });
  });
});
