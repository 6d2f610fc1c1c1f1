// Hostile input against the REAL charge handler (lambdas/charge/handler.ts, configured only from the
// environment) on real PostgreSQL and the fake Stripe: random bytes, huge strings, 100,000-level JSON,
// wrong types, negative / fractional / overflowing amounts, unicode (lone surrogates, NUL), SQL-looking
// ids, 256 KB bodies, missing and extra fields, prototype keys, duplicate keys — mixed with valid
// requests in SQS batches of 1-10. For every record:
//   - the handler returns (never throws) and reports no record as failed (the database is healthy);
//   - it became an operation (valid body; same parameters as the body) XOR a rejected_messages row
//     with its message id (invalid body, or a conflicting order) — never both, never neither;
//   - whether it is valid is decided by an oracle written here from DESIGN §7, not by the product's
//     parser: the two must agree;
//   - no PaymentIntent exists that a valid body did not ask for (nothing charged from invalid input).
//
//   FUZZ_RUNS=2000 npx vitest run test/proof/fuzz.test.ts   (batches; default 600 ≈ 3,300 bodies)
import { randomUUID } from 'node:crypto';
import type { SQSRecord } from 'aws-lambda';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_MAX_AMOUNT } from '../../lambdas/payments/message.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext, type SqsHandler } from '../support/sqs-event.ts';
import { startStripe, type StripeHarness } from '../support/stripe.ts';

const RUNS = Number(process.env.FUZZ_RUNS ?? 600);
const SEED = process.env.FUZZ_SEED === undefined ? undefined : Number(process.env.FUZZ_SEED);

let db: TestDatabase;
let stripe: StripeHarness;
let handler: SqsHandler;
let resetResources: () => Promise<void>;

beforeAll(async () => {
  db = await createTestDatabase('fuzz');
  stripe = await startStripe();
  Object.assign(process.env, {
    DATABASE_URL: db.url,
    STRIPE_API_BASE: stripe.fake.url,
    STRIPE_SECRET_KEY: 'sk_test_fuzz',
    STRIPE_TIMEOUT_MS: '5000',
    STRIPE_MAX_NETWORK_RETRIES: '0',
    POWERTOOLS_LOG_LEVEL: 'SILENT',
    POWERTOOLS_METRICS_DISABLED: 'true',
  });
  handler = (await import('../../lambdas/charge/handler.ts')).handler as unknown as SqsHandler;
  resetResources = (await import('../../lambdas/runtime/resources.ts')).resetResources;
});
afterAll(async () => {
  await resetResources?.();
  await stripe?.close();
  await db?.drop();
});

// ── The oracle: DESIGN §7 / §8 written out independently of lambdas/payments/message.ts ─────────

interface Valid {
  orderId: string;
  amount: number;
  currency: string;
  customerId: string;
  paymentMethod: string;
}
const KEYS = ['amount', 'currency', 'customerId', 'orderId', 'paymentMethod'];

function oracle(body: string): Valid | null {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return null;
  const o = json as Record<string, unknown>;
  if (Object.getPrototypeOf(o) !== Object.prototype) return null;
  const keys = Object.keys(o).sort();
  if (keys.length !== KEYS.length || keys.some((k, i) => k !== KEYS[i])) return null;
  const printable = (s: unknown, min: number, max: number) =>
    typeof s === 'string' && s.length >= min && s.length <= max && [...s].every((c) => c.charCodeAt(0) >= 0x21 && c.charCodeAt(0) <= 0x7e);
  const stripeId = (s: unknown, prefix: string) =>
    typeof s === 'string' && s.startsWith(`${prefix}_`) && s.length - prefix.length - 1 >= 1 && s.length - prefix.length - 1 <= 196 && /^[A-Za-z0-9_]+$/.test(s.slice(prefix.length + 1));
  if (!printable(o.orderId, 1, 128)) return null;
  if (typeof o.amount !== 'number' || !Number.isSafeInteger(o.amount) || o.amount < 1 || o.amount > DEFAULT_MAX_AMOUNT) return null;
  if (typeof o.currency !== 'string' || !/^[a-z]{3}$/.test(o.currency)) return null;
  if (!stripeId(o.customerId, 'cus') || !stripeId(o.paymentMethod, 'pm')) return null;
  return { orderId: o.orderId as string, amount: o.amount, currency: o.currency, customerId: o.customerId as string, paymentMethod: o.paymentMethod as string };
}

// ── Bodies ───────────────────────────────────────────────────────────────────────────────────────

/** A small pool of order ids, so that repeats and conflicts happen; plus SQL-looking valid ones. */
const orderId = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom('fz-a', 'fz-b', 'fz-c').map((s) => `${s}-${RUN_TAG}`) },
  { weight: 4, arbitrary: fc.stringMatching(/^[\x21-\x7e]{1,40}$/).map((s) => `fz-${RUN_TAG}-${s}`.slice(0, 128)) },
  fc.constantFrom(
    `x');DELETE/**/FROM/**/payment_operations;--`,
    `'||pg_sleep(10)||'`,
    `1;DROP/**/TABLE/**/rejected_messages`,
    `$1::uuid`,
    `\\x00'"\``,
  ).map((s) => `${s}-${RUN_TAG}`),
);
const RUN_TAG = randomUUID().slice(0, 8);

const validRequest = fc.record({
  orderId,
  amount: fc.oneof(fc.constant(1), fc.constant(DEFAULT_MAX_AMOUNT), fc.integer({ min: 1, max: DEFAULT_MAX_AMOUNT })),
  currency: fc.constantFrom('eur', 'usd', 'jpy'),
  customerId: fc.oneof(fc.constant('cus_test'), fc.stringMatching(/^cus_[A-Za-z0-9_]{1,196}$/)),
  paymentMethod: fc.oneof({ weight: 4, arbitrary: fc.constant('pm_card_visa') }, fc.constant('pm_card_chargeDeclined'), fc.stringMatching(/^pm_[A-Za-z0-9_]{1,40}$/)),
});

const hostileValue = fc.oneof(
  fc.constantFrom<unknown>(
    null, true, false, 0, -0, -1, -99_999_999, 1.5, 0.1, 100_000_000, Number.MAX_SAFE_INTEGER, 2 ** 53, 2 ** 63, -(2 ** 31),
    '', ' ', '100', '1e3', 'NaN', '\u0000', '\uD800', '\uDFFF', 'é', '日本', '🙂', 'EUR', 'eu', 'euro', 'cus_', 'pm_', 'cus_ space',
    'pm_card_visa\u0000', 'cus_test\n', [], {}, [1], { amount: 1 }, 'a'.repeat(129), 'x'.repeat(10_000),
    "'; DROP TABLE payment_operations; --", 'cus_test" OR "1"="1',
  ),
  fc.string({ unit: 'binary', maxLength: 50 }),
  fc.double(),
  fc.integer(),
  fc.bigInt().map((b) => Number(b)),
);

/** A valid request with one field replaced, removed, or an extra field added. */
const mutatedRequest = fc
  .tuple(validRequest, fc.constantFrom(...KEYS), hostileValue, fc.constantFrom('replace', 'remove', 'extra', 'proto'))
  .map(([request, key, value, how]) => {
    const copy: Record<string, unknown> = { ...request };
    if (how === 'replace') copy[key] = value;
    else if (how === 'remove') delete copy[key];
    else if (how === 'extra') copy[`x_${key}`] = value;
    else return JSON.stringify(copy).replace(/^\{/, '{"__proto__":{"amount":-1},');
    return JSON.stringify(copy);
  });

/** Hand-written JSON text: literals JSON.stringify cannot make (1e309, 2^53+1, -0, duplicate keys). */
const rawJson = fc
  .tuple(validRequest, fc.constantFrom('1e309', '-1e309', '9007199254740993', '-0', '0.0', '1.0', '1e2', '99999999.000000001', '0x10', '1_000', 'Infinity', 'NaN', '01', '+1'))
  .chain(([request, literal]) =>
    fc.constantFrom(
      JSON.stringify(request).replace(/"amount":\d+/, `"amount":${literal}`),
      JSON.stringify(request).replace(/^\{/, `{"amount":${literal},`),
      JSON.stringify(request).replace(/\}$/, `,"amount":-5}`),
    ),
  );

const garbage = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 300 }),
  fc.string({ unit: 'grapheme', maxLength: 100 }),
  fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes).toString('latin1')),
  fc.uint8Array({ maxLength: 200 }).map((bytes) => Buffer.from(bytes).toString('utf8')),
  fc.json(),
  fc.jsonValue().map((v) => JSON.stringify(v)),
  fc.constantFrom('', ' ', 'null', '[]', '{}', '"x"', '1', 'true', '{', '}', '{"orderId":', '\u0000', '\uFEFF{}', '{"a":1}\u0000'),
);

/** Fixed monsters: generated once, reused (they are big). */
const MONSTERS: readonly string[] = [
  '['.repeat(100_000) + ']'.repeat(100_000),
  '{"orderId":'.repeat(50_000) + '1' + '}'.repeat(50_000),
  `{"orderId":"fz-deep-${RUN_TAG}","amount":${'['.repeat(100_000)}1${']'.repeat(100_000)},"currency":"eur","customerId":"cus_test","paymentMethod":"pm_card_visa"}`,
  JSON.stringify({ orderId: `fz-big-${RUN_TAG}`, amount: 100, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa', padding: 'p'.repeat(256 * 1024) }),
  JSON.stringify({ orderId: 'o'.repeat(256 * 1024), amount: 100, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' }),
  'Z'.repeat(256 * 1024),
  '\u0000'.repeat(1024) + '\uD800'.repeat(1024),
  `{"orderId":"fz-nul-${RUN_TAG}\\u0000","amount":1,"currency":"eur","customerId":"cus_test","paymentMethod":"pm_card_visa"}`,
  `{"orderId":"fz-sur-${RUN_TAG}\\ud800","amount":1,"currency":"eur","customerId":"cus_test","paymentMethod":"pm_card_visa"}`,
];

const body = fc.oneof(
  { weight: 4, arbitrary: validRequest.map((r) => JSON.stringify(r)) },
  { weight: 4, arbitrary: mutatedRequest },
  { weight: 2, arbitrary: rawJson },
  { weight: 3, arbitrary: garbage },
  { weight: 1, arbitrary: fc.constantFrom(...MONSTERS) },
);

const batch = fc.array(fc.tuple(body, fc.boolean()), { minLength: 1, maxLength: 10 });

function record(text: string, groupByOrder: boolean): SQSRecord {
  // The producer groups by order id; a poison body has whatever group its sender gave it.
  const parsed = oracle(text);
  const group = groupByOrder && parsed ? parsed.orderId : `g-${randomUUID()}`;
  return {
    messageId: randomUUID(),
    receiptHandle: randomUUID(),
    body: text,
    attributes: {
      ApproximateReceiveCount: '1',
      SentTimestamp: String(Date.now()),
      SenderId: 'AIDAFUZZ',
      ApproximateFirstReceiveTimestamp: String(Date.now()),
      MessageGroupId: group,
      MessageDeduplicationId: randomUUID(),
    },
    messageAttributes: {},
    md5OfBody: '',
    eventSource: 'aws:sqs',
    eventSourceARN: 'arn:aws:sqs:us-east-1:000000000000:charge-requests.fifo',
    awsRegion: 'us-east-1',
  };
}

// ── The property ─────────────────────────────────────────────────────────────────────────────────

describe('hostile message bodies through the real charge handler', () => {
  /** orderId → the parameters of the first valid body seen for it (what the operation must carry). */
  const firstParams = new Map<string, Valid>();
  const tally = { batches: 0, bodies: 0, valid: 0, charged: 0, rejected: 0, conflicts: 0, monsters: 0, bytes: 0 };

  afterAll(() => {
    console.log(
      `fuzz: ${tally.bodies} bodies in ${tally.batches} batches (${(tally.bytes / 1e6).toFixed(1)} MB): ${tally.valid} valid → operations, ` +
        `${tally.rejected} rejected (${tally.conflicts} order conflicts), ${tally.monsters} monsters (100k-deep JSON, 256 KB, NUL / lone surrogates)`,
    );
  });

  it('every body becomes an operation or a rejected_messages row; nothing crashes, nothing invalid is charged', { timeout: 900_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(batch, async (items) => {
        const records = items.map(([text, grouped]) => record(text, grouped));
        const response = await handler({ Records: records }, lambdaContext(60_000));
        expect(response?.batchItemFailures ?? []).toEqual([]);

        const ids = records.map((r) => r.messageId);
        const rejected = new Map(
          (await db.pool.query<{ message_id: string; reason_code: string; order_id: string | null; body_sha256: string }>(
            `SELECT message_id, reason_code, order_id, body_sha256 FROM rejected_messages WHERE message_id = ANY($1)`,
            [ids],
          )).rows.map((r) => [r.message_id, r]),
        );
        for (const r of records) {
          tally.bodies += 1;
          tally.bytes += r.body.length;
          if (MONSTERS.includes(r.body)) tally.monsters += 1;
          const valid = oracle(r.body);
          const row = rejected.get(r.messageId);
          if (valid === null) {
            // Invalid: rejected, kept whole (the hash of exactly what came), and no operation made from it.
            expect(row, `invalid body not rejected: ${JSON.stringify(r.body.slice(0, 200))}`).toBeDefined();
            expect(row!.reason_code).toMatch(/^invalid_(json|body)$/);
            tally.rejected += 1;
            continue;
          }
          const first = firstParams.get(valid.orderId);
          const conflicting =
            first !== undefined && (first.amount !== valid.amount || first.currency !== valid.currency || first.customerId !== valid.customerId || first.paymentMethod !== valid.paymentMethod);
          if (first === undefined) firstParams.set(valid.orderId, valid);
          const { rows } = await db.pool.query(`SELECT amount::int, currency, customer_id, payment_method FROM payment_operations WHERE order_id = $1`, [valid.orderId]);
          expect(rows, `valid body made no operation: ${r.body.slice(0, 200)}`).toHaveLength(1);
          const expected = firstParams.get(valid.orderId)!;
          expect(rows[0]).toEqual({ amount: expected.amount, currency: expected.currency, customer_id: expected.customerId, payment_method: expected.paymentMethod });
          if (conflicting) {
            expect(row?.reason_code, `conflicting order not rejected: ${r.body}`).toBe('order_conflict');
            tally.conflicts += 1;
            tally.rejected += 1;
          } else {
            expect(row, `valid body also rejected: ${r.body.slice(0, 200)}`).toBeUndefined();
            tally.valid += 1;
          }
        }
        tally.batches += 1;
      }),
      { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }), verbose: 1 },
    );

    // Nothing charged that a valid body did not ask for, and at the parameters it asked for.
    for (const pi of stripe.fake.paymentIntents()) {
      const asked = firstParams.get(pi.metadata.order_id ?? '');
      expect(asked, `PaymentIntent ${pi.id} for order ${pi.metadata.order_id} no valid body asked for`).toBeDefined();
      expect({ amount: pi.amount, currency: pi.currency, customer: pi.customer }).toEqual({ amount: asked!.amount, currency: asked!.currency, customer: asked!.customerId });
      tally.charged += 1;
    }
    expect(stripe.fake.stats().doubleCharges).toBe(0);
    // The SQL-looking ids were data, not code: the tables are all there and still append-only.
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM pg_tables WHERE tablename IN ('payment_operations', 'rejected_messages', 'payment_operation_events', 'outcome_events')`);
    expect(rows[0].n).toBe(4);
  });
});
