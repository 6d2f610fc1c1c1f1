// The handlers must run the engine with the policy their configuration declares
// (lambdas/runtime/config.ts: KEY_WINDOW_MS, EARLY_SEARCH_AFTER_MS, LEASE_MS, UNSETTLED_REVIEW_AFTER_MS
// — "handlers pass it to ChargeEngine"). The chaos soak's first run found them falling back to the
// defaults: a shortened key window was ignored, the time-lapse runtime pruned keys after ~30 s while
// the engine still trusted its key for 23 h, re-sent a create with a forgotten key, and Stripe executed
// it a second time — 14 double charges in 100 orders. Fixed (both handlers pass config.policy); this
// keeps it fixed, on the observable effect: no create after the configured window, Search decides.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ChargeEngine } from '../../lambdas/payments/engine.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import type { SQSRecord } from 'aws-lambda';

let db: TestDatabase;
let stripe: StripeHarness;
let charge: SqsHandler;
let reconcile: (event: unknown, context: ReturnType<typeof lambdaContext>) => Promise<unknown>;
let resetResources: () => Promise<void>;

const KEY_WINDOW_MS = 20_000;

beforeAll(async () => {
  db = await createTestDatabase('handler_policy');
  stripe = await startStripe();
  // What the local time-lapse runtime sets (local/pipeline.ts DEMO_TIME_LAPSE).
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_handler_policy',
    STRIPE_TIMEOUT_MS: '1000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    KEY_WINDOW_MS: String(KEY_WINDOW_MS),
    EARLY_SEARCH_AFTER_MS: '3000',
    // The List evidence timings, compressed like the rest (local/pipeline.ts evidenceTimingsFor).
    LIST_SETTLE_MS: '1500',
    ABSENCE_PROOF_SPACING_MS: '1500',
    REISSUE_AFTER_LAST_SEND_MS: '3000',
    LIST_WINDOW_MARGIN_MS: '1000',
    STRIPE_CLOCK_SKEW_MS: '1000',
    LEASE_MS: '9000',
    CHARGE_SAFETY_MARGIN_MS: '0',
    RECONCILE_SAFETY_MARGIN_MS: '0',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  charge = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  reconcile = (await import('../../lambdas/reconcile/handler.ts')).handler as unknown as typeof reconcile;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources?.();
  await stripe?.close();
  await db?.drop();
});
beforeEach(() => stripe.fake.reset());

const order = (): ChargeInput => ({ orderId: `policy-${randomUUID()}`, amount: 700, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' });

/**
 * An order whose first create executed at Stripe but answered 500 (replayed for the key's life), sent
 * 60 s ago — three key windows of the configured 20 s — and whose key Stripe has since forgotten.
 */
async function ambiguousAndPastTheWindow(): Promise<{ input: ChargeInput; id: string }> {
  const input = order();
  const engine = new ChargeEngine({ db: db.pool, gateway: stripe.gateway, random: () => 0.5 });
  const id = await engine.requestCharge(input);
  stripe.fake.injectFault({ operationId: id }, 'error_500_after_commit');
  expect((await engine.executeCharge(id)).status).toBe('unknown');
  await db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '60 seconds', next_attempt_at = now() WHERE id = $1`, [id]);
  stripe.fake.pruneKeys();
  return { input, id };
}

const createsAfter = (seq: number, id: string) => stripe.fake.requests(seq).filter((r) => r.endpoint === 'create' && r.operationId === id);
const lastSeq = () => stripe.fake.requests().at(-1)?.seq ?? 0;
const succeeded = (id: string) => stripe.fake.paymentIntents({ operationId: id }).filter((pi) => pi.status === 'succeeded');

describe('the handlers run the engine with the configured policy (KEY_WINDOW_MS …)', () => {
  it('the reconcile handler never creates after the configured key window: Search decides', async () => {
    const { id } = await ambiguousAndPastTheWindow();
    const seq = lastSeq();
    await reconcile({ source: 'aws.scheduler', scheduledTime: new Date().toISOString() }, lambdaContext(60_000, 'reconcile'));
    expect(createsAfter(seq, id)).toEqual([]);
    expect(succeeded(id)).toHaveLength(1);
    const { rows } = await db.pool.query(`SELECT status, external_id FROM payment_operations WHERE id = $1`, [id]);
    expect(rows[0]).toMatchObject({ status: 'succeeded', external_id: succeeded(id)[0]!.id });
  });

  it('the charge handler, given a redelivery, never creates after the configured key window', async () => {
    const { input, id } = await ambiguousAndPastTheWindow();
    const seq = lastSeq();
    const record: SQSRecord = {
      messageId: randomUUID(),
      receiptHandle: 'r',
      body: JSON.stringify(input),
      attributes: { ApproximateReceiveCount: '2', SentTimestamp: String(Date.now()), SenderId: 'x', ApproximateFirstReceiveTimestamp: String(Date.now()), MessageGroupId: input.orderId },
      messageAttributes: {},
      md5OfBody: '',
      eventSource: 'aws:sqs',
      eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:charge-requests.fifo',
      awsRegion: 'us-east-1',
    };
    const response = await charge({ Records: [record] }, lambdaContext(60_000));
    expect(response?.batchItemFailures ?? []).toEqual([]);
    expect(createsAfter(seq, id)).toEqual([]);
    expect(succeeded(id)).toHaveLength(1); // the second create would have charged again
  });
});
