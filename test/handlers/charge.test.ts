// The charge handler on real PostgreSQL 18, the real stripe SDK against the fake Stripe, the real
// EventBridge client against the fake PutEvents endpoint, and SQS events built from messages actually
// received from a fauxqs FIFO queue. The exported `handler` is driven as Lambda would; the batch
// function is driven directly where a failure must be injected at one exact statement.
import { randomUUID } from 'node:crypto';
import { SendMessageCommand, type Message } from '@aws-sdk/client-sqs';
import type { QueryConfig } from 'pg';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { processChargeBatch, type ChargeBatchDeps } from '../../lambdas/charge/batch.ts';
import { runReconcile, type ReconcileSettings } from '../../lambdas/reconcile/sweep.ts';
import type { Db } from '../../lambdas/payments/db.ts';
import { chargeRequestMessage, sendChargeRequest, sendChargeRequests } from '../../lambdas/producer/client.ts';
import type { ChargeRequest } from '../../lambdas/payments/message.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { startLocalSqs, type LocalSqs } from '../../local/sqs.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { deliverOnce, lambdaContext, receiveMessages, settleBatch, toSqsEvent, toSqsRecord, type QueueRef, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';
import { chargeOrder } from '../support/orders.ts';

let db: TestDatabase;
let stripe: StripeHarness;
let bus: FakeEventBridge;
let sqs: LocalSqs;
let queue: QueueRef;
let handler: SqsHandler;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('charge_handler');
  stripe = await startStripe();
  bus = await startFakeEventBridge();
  sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  queue = { client: sqs.client, queueUrl: sqs.queueUrl, queueArn: sqs.queueArn, region: sqs.region };
  // Exactly what the local runtime and the chaos soak set: the handler reads nothing else.
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_charge_handler',
    STRIPE_TIMEOUT_MS: '2000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    EVENT_BUS_NAME: 'charge-outcomes',
    EVENTS_ENDPOINT: bus.url,
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  const module = await import('../../lambdas/charge/handler.ts');
  handler = module.handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources();
  await sqs.stop();
  await bus.close();
  await stripe.close();
  await db.drop();
});
beforeEach(() => {
  stripe.fake.reset();
  bus.reset();
});

const order = (overrides: Partial<ChargeRequest> = {}): ChargeRequest => chargeOrder(overrides);

/** A message a producer would not send through the client: a poison body, or a resend after the 5-minute dedup window. */
async function sendRaw(body: string, groupId: string, dedupId = randomUUID()): Promise<void> {
  await sqs.client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl, MessageBody: body, MessageGroupId: groupId, MessageDeduplicationId: dedupId }));
}

/**
 * Receive `n` messages one at a time, deleting each, so that the next message of the same group shows
 * (fauxqs hides a group while one of its messages is in flight), and put them in queue order: a batch
 * real SQS could deliver, built from messages fauxqs really delivered.
 */
async function receiveInQueueOrder(n: number): Promise<Message[]> {
  const got: Message[] = [];
  for (let tries = 0; got.length < n && tries < 10 * n; tries++) {
    const batch = await receiveMessages(queue, 10, { attempts: 1 });
    for (const m of batch) {
      got.push(m);
      await settleBatch(queue, [m], { batchItemFailures: [] });
    }
  }
  expect(got).toHaveLength(n);
  return got.sort((a, b) => (BigInt(a.Attributes!.SequenceNumber!) < BigInt(b.Attributes!.SequenceNumber!) ? -1 : 1));
}

const operationOf = async (orderId: string) =>
  (await db.pool.query('SELECT * FROM payment_operations WHERE order_id = $1', [orderId])).rows[0] as Record<string, unknown> | undefined;
const succeededAtStripe = (orderId: string) => stripe.fake.paymentIntents({ orderId }).filter((pi) => pi.status === 'succeeded');
const creates = () => stripe.fake.requests().filter((r) => r.endpoint === 'create');

describe('the exported handler, SQS events from fauxqs', () => {
  it('a batch holding three copies of one order → one operation, one Stripe call, one charge; all acknowledged', async () => {
    const request = order();
    await sendChargeRequest(sqs.client, sqs.queueUrl, request);
    // Two more copies of the same order as SQS can hold them: sent again after the 5-minute dedup
    // window (another dedup id), same group, same body.
    const { MessageBody, MessageGroupId } = chargeRequestMessage(request);
    await sendRaw(MessageBody, MessageGroupId);
    await sendRaw(MessageBody, MessageGroupId);
    const messages = await receiveInQueueOrder(3);
    expect(new Set(messages.map((m) => m.MessageId)).size).toBe(3);

    const response = await handler(toSqsEvent(messages, queue), lambdaContext());

    expect(response).toEqual({ batchItemFailures: [] });
    expect(creates()).toHaveLength(1);
    expect(succeededAtStripe(request.orderId)).toHaveLength(1);
    expect(await operationOf(request.orderId)).toMatchObject({ status: 'succeeded' });
    // The outcome event went out at once, once.
    expect(bus.events().filter((e) => (e.detail as { orderId?: string }).orderId === request.orderId)).toHaveLength(1);

    // The same three delivered again (a redelivery after a lost acknowledgement): nothing new.
    const again = await handler(toSqsEvent(messages, queue), lambdaContext());
    expect(again).toEqual({ batchItemFailures: [] });
    expect(creates()).toHaveLength(1);
  });

  it('one poison body among ten → nine charged, one rejected_messages row, nothing in batchItemFailures', async () => {
    const nine = Array.from({ length: 9 }, () => order());
    const sent = await sendChargeRequests(sqs.client, sqs.queueUrl, nine);
    expect(sent.every((r) => r.ok)).toBe(true);
    const poison = '{"orderId": "poison-1", "amount": "12.99", oops';
    await sendRaw(poison, `poison-${randomUUID()}`);
    const turn = await deliverOnce(queue, handler);

    expect(turn.messages).toHaveLength(10);
    expect(turn.response).toEqual({ batchItemFailures: [] });
    expect(turn.deleted).toHaveLength(10);
    for (const request of nine) expect(succeededAtStripe(request.orderId)).toHaveLength(1);
    expect(stripe.fake.paymentIntents()).toHaveLength(9);
    const poisonMessage = turn.messages.find((m) => m.Body === poison)!;
    const { rows } = await db.pool.query('SELECT * FROM rejected_messages WHERE message_id = $1', [poisonMessage.MessageId]);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ reason_code: 'invalid_json', raw_body: poison, operation_id: null });
    expect(rows[0].body_sha256).toMatch(/^[0-9a-f]{64}$/);

    // A redelivery of the poison message makes no second row and is acknowledged again.
    const again = await handler(toSqsEvent([poisonMessage], queue), lambdaContext());
    expect(again).toEqual({ batchItemFailures: [] });
    expect((await db.pool.query('SELECT count(*)::int AS n FROM rejected_messages WHERE message_id = $1', [poisonMessage.MessageId])).rows[0].n).toBe(1);
  });

  it('schema failures are rejected with the failing fields named, never the values', async () => {
    const bad = JSON.stringify({ orderId: `order-${randomUUID()}`, amount: -5, currency: 'EUR', customerId: 'cus_x', paymentMethod: 'pm_secret_value_123', extra: true });
    await sendRaw(bad, `bad-${randomUUID()}`);
    const turn = await deliverOnce(queue, handler);
    expect(turn.response).toEqual({ batchItemFailures: [] });
    const { rows } = await db.pool.query('SELECT * FROM rejected_messages WHERE message_id = $1', [turn.messages[0]!.MessageId]);
    expect(rows[0].reason_code).toBe('invalid_body');
    expect(rows[0].reason).toMatch(/amount/);
    expect(rows[0].reason).toMatch(/currency/);
    expect(rows[0].reason).not.toContain('pm_secret_value_123');
    expect(rows[0].raw_body).toBe(bad); // kept whole: nothing silently lost
    expect(stripe.fake.requests()).toHaveLength(0);
  });

  it('an order that exists with other parameters → order_conflict row with the operation id, acknowledged, never charged', async () => {
    const first = order();
    await sendChargeRequest(sqs.client, sqs.queueUrl, first);
    expect((await deliverOnce(queue, handler)).response).toEqual({ batchItemFailures: [] });
    const existing = await operationOf(first.orderId);

    // Later (after the dedup window) the same order id with another amount.
    const conflicting = { ...first, amount: first.amount + 1 };
    const { MessageBody, MessageGroupId } = chargeRequestMessage(conflicting);
    await sendRaw(MessageBody, MessageGroupId);
    const turn = await deliverOnce(queue, handler);

    expect(turn.response).toEqual({ batchItemFailures: [] });
    const { rows } = await db.pool.query('SELECT * FROM rejected_messages WHERE message_id = $1', [turn.messages[0]!.MessageId]);
    expect(rows[0]).toMatchObject({ reason_code: 'order_conflict', operation_id: existing!.id, order_id: first.orderId });
    expect(rows[0].reason).toMatch(/amount/);
    expect(creates()).toHaveLength(1);
    expect(await operationOf(first.orderId)).toMatchObject({ status: 'succeeded', amount: String(first.amount) });
  });

  it('a charge naming a connected account is made on it; the same order naming another account → order_conflict, never charged', async () => {
    const account = 'acct_1HandlerConnected';
    stripe.fake.addConnectedAccount(account);
    stripe.fake.addConnectedAccount('acct_1HandlerOther');
    const first = order({ account, applicationFeeAmount: 100 });
    await sendChargeRequest(sqs.client, sqs.queueUrl, first);
    expect((await deliverOnce(queue, handler)).response).toEqual({ batchItemFailures: [] });
    const existing = await operationOf(first.orderId);
    expect(existing).toMatchObject({ status: 'succeeded', stripe_account: account, application_fee_amount: '100' });
    expect(stripe.fake.paymentIntents({ account, operationId: String(existing!.id) })).toHaveLength(1);
    expect(stripe.fake.paymentIntents({ account: null, operationId: String(existing!.id) })).toEqual([]);

    const { MessageBody, MessageGroupId } = chargeRequestMessage({ ...first, account: 'acct_1HandlerOther' });
    await sendRaw(MessageBody, MessageGroupId);
    const turn = await deliverOnce(queue, handler);
    expect(turn.response).toEqual({ batchItemFailures: [] });
    const { rows } = await db.pool.query('SELECT * FROM rejected_messages WHERE message_id = $1', [turn.messages[0]!.MessageId]);
    expect(rows[0]).toMatchObject({ reason_code: 'order_conflict', operation_id: existing!.id });
    expect(rows[0].reason).toMatch(/account/);
    expect(creates()).toHaveLength(1);
  });

  it('a declined card is final and acknowledged; EventBridge failing does not fail the batch (the rows wait for the sweep)', async () => {
    const declined = order({ paymentMethod: 'pm_card_chargeDeclined' });
    const fine = order();
    await sendChargeRequests(sqs.client, sqs.queueUrl, [declined, fine]);
    bus.injectFault({ kind: 'callError', times: 5 });
    const turn = await deliverOnce(queue, handler);

    expect(turn.response).toEqual({ batchItemFailures: [] });
    expect(await operationOf(declined.orderId)).toMatchObject({ status: 'failed' });
    expect(await operationOf(fine.orderId)).toMatchObject({ status: 'succeeded' });
    const { rows } = await db.pool.query(
      `SELECT e.event_type, e.published_at, e.attempts FROM outcome_events e JOIN payment_operations p ON p.id = e.operation_id
        WHERE p.order_id = ANY($1) ORDER BY e.event_type`,
      [[declined.orderId, fine.orderId]],
    );
    expect(rows.map((r) => r.event_type)).toEqual(['Charge Failed', 'Charge Succeeded']);
    expect(rows.every((r) => r.published_at === null && r.attempts === 1)).toBe(true);
  });

  it('too little time left → no Stripe call; the operations are recorded unclaimed, open and due; all acknowledged', async () => {
    const requests = [order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    // worst case of one call = (0 retries + 2) × 2 s + 1 × 2 s = 6 s, + CHARGE_SAFETY_MARGIN_MS 5 s.
    const turn = await deliverOnce(queue, handler, { remainingMs: 10_000 });

    expect(turn.response).toEqual({ batchItemFailures: [] });
    expect(stripe.fake.requests()).toHaveLength(0);
    for (const request of requests) {
      const op = await operationOf(request.orderId);
      expect(op).toMatchObject({ status: 'pending', lease_token: null, first_attempted_at: null, attempts: 0 });
      expect((op!.next_attempt_at as Date).getTime()).toBeLessThanOrEqual(Date.now());
    }
    // They are the reconciler's now: its next run settles them.
    const summary = await runReconcile({ db: db.pool, gateway: stripe.gateway, publisher: null, settings: reconcileSettings }, plenty);
    expect(summary.byOutcome.succeeded).toBeGreaterThanOrEqual(3);
    for (const request of requests) expect(succeededAtStripe(request.orderId)).toHaveLength(1);
  });

  it('no Stripe key yet (the stack creates the secret empty) → requests still recorded, unclaimed and due, acknowledged', async () => {
    const requests = [order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    delete process.env.STRIPE_SECRET_KEY;
    await resetResources();
    try {
      const turn = await deliverOnce(queue, handler);
      expect(turn.response).toEqual({ batchItemFailures: [] });
      expect(stripe.fake.requests()).toHaveLength(0);
      for (const request of requests) expect(await operationOf(request.orderId)).toMatchObject({ status: 'pending', lease_token: null, first_attempted_at: null });
    } finally {
      process.env.STRIPE_SECRET_KEY = 'sk_test_charge_handler';
      await resetResources();
    }
  });

  it('no database configuration → every record goes back to the queue', async () => {
    await sendChargeRequests(sqs.client, sqs.queueUrl, [order()]);
    delete process.env.DATABASE_URL;
    await resetResources();
    try {
      const turn = await deliverOnce(queue, handler);
      expect(turn.response!.batchItemFailures).toEqual([{ itemIdentifier: turn.messages[0]!.MessageId }]);
      expect(turn.released).toHaveLength(1);
    } finally {
      process.env.DATABASE_URL = db.url;
      await resetResources();
    }
    expect((await deliverOnce(queue, handler)).response).toEqual({ batchItemFailures: [] });
  });
});

// ── The batch function with injected failures ─────────────────────────────────────────────────────

/** A Db that fails the statements `failIf` picks (an outage at one exact point of the batch). */
function failingDb(base: Db, failIf: (text: string, name: string | undefined) => boolean): Db {
  return {
    query(textOrConfig: string | QueryConfig, values?: unknown[]) {
      const text = typeof textOrConfig === 'string' ? textOrConfig : textOrConfig.text;
      const name = typeof textOrConfig === 'string' ? undefined : textOrConfig.name;
      if (failIf(text, name)) return Promise.reject(Object.assign(new Error('connection terminated unexpectedly'), { code: '57P01' }));
      return typeof textOrConfig === 'string' ? base.query(textOrConfig, values) : base.query(textOrConfig);
    },
  } as Db;
}

const deps = (db: Db, overrides: Partial<ChargeBatchDeps> = {}): ChargeBatchDeps => ({
  db,
  gateway: stripe.gateway,
  publisher: null,
  minTimeToCallMs: 1_000,
  random: () => 0.5,
  ...overrides,
});
const plenty = { remainingMs: () => 60_000 };
const reconcileSettings: ReconcileSettings = {
  maxRequestsPerSecond: 1000,
  maxSearchesPerSecond: 1000,
  concurrency: 8,
  pageSize: 50,
  minTimeToCallMs: 1_000,
  safetyMarginMs: 500,
  maxRunMs: 0,
  rejectedWindowSeconds: 300,
};
const ids = (messages: readonly Message[], ...indexes: number[]) => indexes.map((i) => ({ itemIdentifier: messages[i]!.MessageId! }));

describe('the FIFO group rule (hand-built batches of really received messages)', () => {
  it('a reject that cannot be recorded drags every LATER record of its group, and only those; earlier ones and other groups go through', async () => {
    const a = order();
    const b = order();
    const c = order();
    const group = (r: ChargeRequest) => chargeRequestMessage(r);
    // Queue order: a1, b-poison, b1, c1, b2 (copy), a2 (copy)
    await sendRaw(group(a).MessageBody, a.orderId);
    await sendRaw('not json at all', b.orderId);
    await sendRaw(group(b).MessageBody, b.orderId);
    await sendRaw(group(c).MessageBody, c.orderId);
    await sendRaw(group(b).MessageBody, b.orderId);
    await sendRaw(group(a).MessageBody, a.orderId);
    const messages = await receiveInQueueOrder(6);
    expect(messages.map((m) => m.Attributes!.MessageGroupId)).toEqual([a, b, b, c, b, a].map((r) => r.orderId));

    const broken = failingDb(db.pool, (text) => text.includes('INSERT INTO rejected_messages'));
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(broken), plenty);

    expect(result.response.batchItemFailures).toEqual(ids(messages, 1, 2, 4));
    expect(result.records.map((r) => r.fate.kind)).toEqual(['processed', 'not_recorded', 'held_back', 'processed', 'held_back', 'processed']);
    // Group b never ran ahead of its failed record: no operation, no call.
    expect(await operationOf(b.orderId)).toBeUndefined();
    expect(succeededAtStripe(a.orderId)).toHaveLength(1);
    expect(succeededAtStripe(c.orderId)).toHaveLength(1);
    expect(stripe.fake.paymentIntents()).toHaveLength(2);

    // SQS redelivers b's three records in order; with the database healthy they settle, one charge.
    const redelivered = [messages[1]!, messages[2]!, messages[4]!];
    const retry = await processChargeBatch(toSqsEvent(redelivered, queue).Records, deps(db.pool), plenty);
    expect(retry.response.batchItemFailures).toEqual([]);
    expect(succeededAtStripe(b.orderId)).toHaveLength(1);
  });

  it('a failure AFTER the batch statement (a conflict that cannot be recorded) still drags the later, durable records of its group', async () => {
    const d = order();
    // d exists with amount X; the batch holds d (other amount → conflict), then d again (same amount → fine).
    await sendChargeRequest(sqs.client, sqs.queueUrl, d);
    const seed = await receiveInQueueOrder(1);
    expect((await processChargeBatch(toSqsEvent(seed, queue).Records, deps(db.pool), plenty)).response.batchItemFailures).toEqual([]);
    const other = order();
    await sendRaw(chargeRequestMessage({ ...d, amount: d.amount + 100 }).MessageBody, d.orderId);
    await sendRaw(chargeRequestMessage(d).MessageBody, d.orderId);
    await sendRaw(chargeRequestMessage(other).MessageBody, other.orderId);
    const messages = await receiveInQueueOrder(3);

    const broken = failingDb(db.pool, (text) => text.includes('INSERT INTO rejected_messages'));
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(broken), plenty);

    // The conflict could not be recorded → retried; the later copy of d is durable but must not
    // overtake it → retried too; the other group is acknowledged.
    expect(result.response.batchItemFailures).toEqual(ids(messages, 0, 1));
    expect(result.records[1]).toMatchObject({ fate: { kind: 'processed' }, retried: true, retryCause: 'earlier_record_of_group_failed' });
    expect(succeededAtStripe(d.orderId)).toHaveLength(1);
    expect(succeededAtStripe(other.orderId)).toHaveLength(1);
  });

  it('an unknown key named with a NUL or a lone surrogate: every reject of the batch is recorded, the key never reaches a reason or a log, and its group goes on', async () => {
    const n = order();
    const m = order();
    // JSON escapes (plain ASCII, so SQS takes them) that JSON.parse turns into a NUL and a lone
    // surrogate in a key name — text PostgreSQL cannot store, controlled by the producer.
    const withKey = (r: ChargeRequest, key: string) => chargeRequestMessage(r).MessageBody.replace(/}$/, `,"${key}":1}`);
    const nulKey = withKey(n, 'evil\\u0000key');
    const surrogateKey = withKey(m, 'evil\\ud800key');
    await sendRaw(nulKey, n.orderId);
    await sendRaw(chargeRequestMessage(n).MessageBody, n.orderId); // the same group, behind the poison
    await sendRaw(surrogateKey, m.orderId);
    await sendRaw('{"amount": -1}', `plain-${randomUUID()}`); // an ordinary reject in the same batch
    const messages = await receiveInQueueOrder(4);

    const lines: string[] = [];
    const capture = (level: string) => (message: string, ...attributes: Record<string, unknown>[]) => lines.push(JSON.stringify({ level, message, attributes }));
    const log = { debug: capture('debug'), info: capture('info'), warn: capture('warn'), error: capture('error') };
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(db.pool, { log }), plenty);

    expect(result.response.batchItemFailures).toEqual([]);
    expect(result.records.map((r) => r.fate.kind)).toEqual(['rejected', 'processed', 'rejected', 'rejected']);
    expect(succeededAtStripe(n.orderId)).toHaveLength(1);
    const { rows } = await db.pool.query(
      'SELECT message_id, reason, raw_body, body_sha256 FROM rejected_messages WHERE message_id = ANY($1) ORDER BY id',
      [[0, 2, 3].map((i) => messages[i]!.MessageId)],
    );
    expect(rows).toHaveLength(3);
    for (const row of rows) expect(row.reason).not.toMatch(/evil/);
    expect(rows.find((r) => r.message_id === messages[0]!.MessageId)!.reason).toMatch(/unknown field/);
    // The body is kept exactly as received (its escapes are plain text).
    expect(rows.find((r) => r.message_id === messages[0]!.MessageId)!.raw_body).toBe(nulKey);
    expect(rows.find((r) => r.message_id === messages[2]!.MessageId)!.raw_body).toBe(surrogateKey);
    expect(lines.join('\n')).not.toMatch(/evil/);
  });

  it('a reject row the database refuses fails alone: the batch insert falls back to one row at a time', async () => {
    const p = order();
    await sendRaw('{"refused-by-test": true}', p.orderId); // the row a constraint will refuse
    await sendRaw(chargeRequestMessage(p).MessageBody, p.orderId); // behind it in its group
    await sendRaw('not json', `ok-${randomUUID()}`);
    await sendRaw('{"amount": 0}', `ok-${randomUUID()}`);
    const messages = await receiveInQueueOrder(4);
    await db.pool.query(`ALTER TABLE rejected_messages ADD CONSTRAINT test_refuse CHECK (raw_body NOT LIKE '%refused-by-test%')`);
    try {
      const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(db.pool), plenty);
      expect(result.response.batchItemFailures).toEqual(ids(messages, 0, 1));
      expect(result.records.map((r) => r.fate.kind)).toEqual(['not_recorded', 'held_back', 'rejected', 'rejected']);
      const { rows } = await db.pool.query('SELECT message_id FROM rejected_messages WHERE message_id = ANY($1)', [messages.map((m) => m.MessageId)]);
      expect(rows.map((r) => r.message_id).sort()).toEqual([messages[2]!.MessageId, messages[3]!.MessageId].sort());
    } finally {
      await db.pool.query('ALTER TABLE rejected_messages DROP CONSTRAINT test_refuse');
    }
  });

  it('a body holding a raw NUL and a lone surrogate (not via SQS: the local runtime, a future source) is stored losslessly, escaped', async () => {
    const raw = `{"orderId":"x\u0000y","k":"\ud800"}`; // the characters themselves, not JSON escapes
    expect(raw).toContain('\u0000');
    const record = toSqsRecord({ MessageId: `raw-${randomUUID()}`, ReceiptHandle: 'hand-made', Body: raw, Attributes: { MessageGroupId: `raw-${randomUUID()}` } }, queue);
    const result = await processChargeBatch([record], deps(db.pool), plenty);
    expect(result.response.batchItemFailures).toEqual([]);
    const { rows } = await db.pool.query('SELECT reason, raw_body FROM rejected_messages WHERE message_id = $1', [record.messageId]);
    expect(JSON.parse(rows[0].raw_body)).toBe(raw);
    expect(rows[0].reason).toMatch(/JSON string literal/);
  });

  it('the batch statement itself fails → every valid record fails, and the rejects behind them in their groups too', async () => {
    const e = order();
    const f = order();
    await sendRaw(chargeRequestMessage(e).MessageBody, e.orderId);
    await sendRaw('{"orderId": 1}', e.orderId); // invalid, recorded fine, but behind a failed record of e
    await sendRaw('garbage', `poison-${randomUUID()}`); // invalid, its own group: acknowledged
    await sendRaw(chargeRequestMessage(f).MessageBody, f.orderId);
    const messages = await receiveInQueueOrder(4);

    const broken = failingDb(db.pool, (_text, name) => name === 'payments.request_and_claim');
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(broken), plenty);

    expect(result.response.batchItemFailures).toEqual(ids(messages, 0, 1, 3));
    expect(result.counts).toMatchObject({ notDurable: 3, rejected: 1 });
    expect(stripe.fake.requests()).toHaveLength(0);
  });

  it('the outcome write fails after the Stripe calls → acknowledged (durable; the reconciler owns them), never redelivered', async () => {
    const g = order();
    const h = order();
    await sendChargeRequests(sqs.client, sqs.queueUrl, [g, h]);
    const messages = await receiveMessages(queue, 2);
    const broken = failingDb(db.pool, (_text, name) => name === 'payments.record_outcomes');
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(broken), plenty);
    await settleBatch(queue, messages, result.response);

    expect(result.response.batchItemFailures).toEqual([]);
    expect(result.counts).toMatchObject({ leftOpen: 2, succeeded: 0 });
    for (const r of [g, h]) {
      expect(succeededAtStripe(r.orderId)).toHaveLength(1); // Stripe did charge…
      const op = await operationOf(r.orderId);
      expect(op).toMatchObject({ status: 'pending' }); // …the database does not know yet; the lease will expire
      expect(result.records.find((x) => x.orderId === r.orderId)).toMatchObject({ operationId: op!.id, fate: { disposition: 'outcome_not_recorded' } });
    }
  });
});

describe('remaining time', () => {
  it('the lease bounds the calls too: none starts after lease − worst-case call, the rest is released, open and due', async () => {
    const requests = [order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const messages = await receiveMessages(queue, 3);
    // Lease 1.5 s, worst-case call 1 s: calls may start during the first 0.5 s only. The first call
    // is held past that window, so with one call at a time the two others must not start (they
    // could not finish inside the lease that fences them) — plenty of invocation time left.
    const first = stripe.fake.hold({ endpoint: 'create' });
    const batch = processChargeBatch(
      toSqsEvent(messages, queue).Records,
      deps(db.pool, { concurrency: 1, policy: { leaseMs: 1_500 }, worstCallMs: 1_000, minTimeToCallMs: 1_000 }),
      plenty,
    );
    await first.arrived;
    await new Promise((resolve) => setTimeout(resolve, 700));
    first.release();
    const result = await batch;
    await settleBatch(queue, messages, result.response);

    expect(result.response.batchItemFailures).toEqual([]);
    expect(creates()).toHaveLength(1);
    const released = result.records.filter((r) => r.fate.kind === 'processed' && r.fate.disposition === 'released');
    expect(released).toHaveLength(2);
    for (const r of released) expect(await operationOf(r.orderId!)).toMatchObject({ status: 'pending', lease_token: null });
  });

  it('time running out mid-batch → the calls not started are released, open and due', async () => {
    const requests = [order(), order(), order()];
    await sendChargeRequests(sqs.client, sqs.queueUrl, requests);
    const messages = await receiveMessages(queue, 3);
    // Plenty of time until the first Stripe request has gone out, then too little.
    const clock = { remainingMs: () => (stripe.fake.requests().length >= 1 ? 500 : 60_000) };
    const result = await processChargeBatch(toSqsEvent(messages, queue).Records, deps(db.pool, { concurrency: 1 }), clock);
    await settleBatch(queue, messages, result.response);

    expect(result.response.batchItemFailures).toEqual([]);
    expect(creates()).toHaveLength(1);
    expect(result.counts).toMatchObject({ succeeded: 1, leftOpen: 2 });
    const released = result.records.filter((r) => r.fate.kind === 'processed' && r.fate.disposition === 'released');
    expect(released).toHaveLength(2);
    for (const r of released) {
      const op = await operationOf(r.orderId!);
      expect(op).toMatchObject({ status: 'pending', lease_token: null });
      expect((op!.next_attempt_at as Date).getTime()).toBeLessThanOrEqual(Date.now());
    }
  });
});
