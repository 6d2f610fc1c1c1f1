// Hostile input against the REAL charge handler (lambdas/charge/handler.ts, configured only from the
// environment) on real PostgreSQL and the fake Stripe: random bytes, huge strings, 100,000-level JSON,
// wrong types, negative / fractional / overflowing amounts, unicode (lone surrogates, NUL), SQL-looking
// ids, 256 KB bodies, missing and extra fields, prototype keys, duplicate keys — mixed with valid
// requests in SQS batches of 1-10 — charges, and refunds (`type` absent / "charge" /
// "refund" / anything else, refund ids, amounts, reasons, missing and extra fields). For every record:
//   - the handler returns (never throws) and reports no record as failed (the database is healthy);
//   - it became an operation — a charge, or a refund operation (valid body; same parameters as the
//     body) — XOR a rejected_messages row with its message id (invalid body, a conflicting order, a
//     refund the rules refuse) — never both, never neither; a repeated refund is its first operation;
//   - whether it is valid, and what the refund rules make of a valid refund, is decided by an oracle
//     written here from docs/producers.md and docs/model.md, not by the product's parser: the two must agree;
//   - no PaymentIntent exists that a valid body did not ask for, and no Refund that a valid, accepted
//     refund body did not ask for (nothing charged or refunded from invalid input).
//
// The optional charge parameters too (`description`, `statementDescriptorSuffix`, `metadata`,
// valid and hostile): the oracle judges them from docs/producers.md, a repeat with other values (key
// order aside) is an order_conflict, and every PaymentIntent carries exactly the producer's metadata
// plus ours, and the description and suffix as sent.
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

// ── The oracle: docs/producers.md and the refund rules written out independently of lambdas/payments/message.ts ─

interface Valid {
  orderId: string;
  amount: number;
  currency: string;
  customerId: string;
  paymentMethod: string;
  /** The optional charge parameters, null when absent (an empty metadata object is none, too). */
  description: string | null;
  statementDescriptorSuffix: string | null;
  metadata: Record<string, string>;
}
interface ValidRefund {
  orderId: string;
  refundId: string;
  amount: number;
  reason: string | null;
}
type Parsed = ({ kind: 'charge' } & Valid) | ({ kind: 'refund' } & ValidRefund);
const KEYS = ['amount', 'currency', 'customerId', 'orderId', 'paymentMethod'];
/** docs/producers.md: optional charge parameters. */
const OPTIONAL_KEYS = ['description', 'metadata', 'statementDescriptorSuffix'];
/** docs/producers.md: the pipeline's own metadata keys, refused from a producer. */
const OUR_METADATA_KEYS = ['operation_id', 'order_id', 'key_generation', 'refund_id'];
/**
 * Text the pipeline must store (PostgreSQL text and jsonb hold no NUL, and UTF-8 has no lone
 * surrogates) and send to Stripe unchanged: anything else could not be kept exactly as sent.
 */
const storable = (s: string) => !s.includes('\u0000') && s.isWellFormed();
/**
 * docs/producers.md's rules. description: 1-1000 characters (docs.stripe.com/api/payment_intents/create
 * calls it "an arbitrary string attached to the object" and states no maximum there: 1000 is our
 * documented ceiling). statementDescriptorSuffix: 1-22 of letters, digits, space . - _ with at least
 * one letter (same page: "concatenated to the account's statement descriptor prefix to form the
 * complete statement descriptor", whose "22-character limit" the Statement Descriptor docs set).
 * metadata: an object of at most 20 keys of [a-z0-9_]{1,40}, none of ours nor `__proto__`, string values 1-500
 * (Stripe docs.stripe.com/api/metadata: keys <= 40, values <= 500 characters; an empty value
 * unsets a key, so it could not be carried on the PaymentIntent as sent).
 */
function chargeParams(o: Record<string, unknown>): Pick<Valid, 'description' | 'statementDescriptorSuffix' | 'metadata'> | null {
  const d = o.description;
  if (d !== undefined && (typeof d !== 'string' || d.length < 1 || d.length > 1000 || !storable(d))) return null;
  const sfx = o.statementDescriptorSuffix;
  if (sfx !== undefined && (typeof sfx !== 'string' || !/^[A-Za-z0-9 ._-]{1,22}$/.test(sfx) || !/[A-Za-z]/.test(sfx))) return null;
  const m = o.metadata;
  const metadata: Record<string, string> = {};
  if (m !== undefined) {
    if (typeof m !== 'object' || m === null || Array.isArray(m) || Object.getPrototypeOf(m) !== Object.prototype) return null;
    const entries = Object.entries(m);
    if (entries.length > 20) return null;
    for (const [k, v] of entries) {
      // `__proto__` fits the alphabet but no JavaScript object carries it as data: docs/producers.md refuses it.
      if (!/^[a-z0-9_]{1,40}$/.test(k) || OUR_METADATA_KEYS.includes(k) || k === '__proto__') return null;
      if (typeof v !== 'string' || v.length < 1 || v.length > 500 || !storable(v)) return null;
      Object.defineProperty(metadata, k, { value: v, enumerable: true, writable: true, configurable: true });
    }
  }
  return { description: (d as string | undefined) ?? null, statementDescriptorSuffix: (sfx as string | undefined) ?? null, metadata };
}
const sameMetadata = (a: Record<string, string>, b: Record<string, string>) =>
  JSON.stringify(Object.entries(a).sort(([x], [y]) => (x < y ? -1 : 1))) === JSON.stringify(Object.entries(b).sort(([x], [y]) => (x < y ? -1 : 1)));
const REFUND_KEYS = ['amount', 'orderId', 'refundId', 'type'];
/** `reason` is one of Stripe's. */
const REFUND_REASONS = ['duplicate', 'fraudulent', 'requested_by_customer'];
/**
 * The duplicate-charge remedy's refund id is derived from the extra PaymentIntent so that
 * it "can be created only once": a producer's refund id in that namespace would take the remedy's
 * place (one refund operation per (order, refund id)) and leave the extra charge unrefunded.
 */
const REMEDY_REFUND_ID_PREFIX = 'duplicate:';

const printable = (s: unknown, min: number, max: number) =>
  typeof s === 'string' && s.length >= min && s.length <= max && [...s].every((c) => c.charCodeAt(0) >= 0x21 && c.charCodeAt(0) <= 0x7e);
const minorUnits = (n: unknown): n is number => typeof n === 'number' && Number.isSafeInteger(n) && n >= 1 && n <= DEFAULT_MAX_AMOUNT;

function oracle(body: string): Parsed | null {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return null;
  }
  if (typeof json !== 'object' || json === null || Array.isArray(json)) return null;
  const o = json as Record<string, unknown>;
  if (Object.getPrototypeOf(o) !== Object.prototype) return null;
  // `"type":"refund"` is a refund; the charge body gains `"type":"charge"`, optional
  // (existing producers keep working); any other type is neither.
  if (o.type === 'refund') {
    const keys = Object.keys(o).filter((k) => k !== 'reason').sort();
    if (keys.length !== REFUND_KEYS.length || keys.some((k, i) => k !== REFUND_KEYS[i])) return null;
    if (!printable(o.orderId, 1, 128) || !printable(o.refundId, 1, 128) || (o.refundId as string).startsWith(REMEDY_REFUND_ID_PREFIX)) return null;
    if (!minorUnits(o.amount)) return null;
    if ('reason' in o && !REFUND_REASONS.includes(o.reason as string)) return null;
    return { kind: 'refund', orderId: o.orderId as string, refundId: o.refundId as string, amount: o.amount, reason: 'reason' in o ? (o.reason as string) : null };
  }
  if ('type' in o && o.type !== 'charge') return null;
  const keys = Object.keys(o).filter((k) => k !== 'type' && !OPTIONAL_KEYS.includes(k)).sort();
  if (keys.length !== KEYS.length || keys.some((k, i) => k !== KEYS[i])) return null;
  const stripeId = (s: unknown, prefix: string) =>
    typeof s === 'string' && s.startsWith(`${prefix}_`) && s.length - prefix.length - 1 >= 1 && s.length - prefix.length - 1 <= 196 && /^[A-Za-z0-9_]+$/.test(s.slice(prefix.length + 1));
  if (!printable(o.orderId, 1, 128)) return null;
  if (!minorUnits(o.amount)) return null;
  if (typeof o.currency !== 'string' || !/^[a-z]{3}$/.test(o.currency)) return null;
  if (!stripeId(o.customerId, 'cus') || !stripeId(o.paymentMethod, 'pm')) return null;
  const params = chargeParams(o);
  if (params === null) return null;
  return { kind: 'charge', orderId: o.orderId as string, amount: o.amount, currency: o.currency, customerId: o.customerId as string, paymentMethod: o.paymentMethod as string, ...params };
}

/** The order's charge and the refunds accepted for it, as the oracle tracks them across batches. */
interface OrderBook {
  charge: Valid;
  refunds: Map<string, ValidRefund>;
}
type RefundVerdict = 'accepted' | 'repeat' | 'refund_conflict' | 'refund_rejected';

/**
 * The rules for a valid refund body (docs/producers.md): one refund per (order, refund id) — the same id with the
 * same amount and reason is the same refund again, with another amount or reason a conflict (nothing
 * sent); no charge, or a charge that failed: nothing to refund; the refunds that are not failed never
 * add up to more than the charge. Otherwise accepted (and, the charge being final here, sent).
 */
function refundVerdict(order: OrderBook | undefined, chargeStatus: string | null, r: ValidRefund): RefundVerdict {
  const same = order?.refunds.get(r.refundId);
  if (same) return same.amount === r.amount && same.reason === r.reason ? 'repeat' : 'refund_conflict';
  if (!order || chargeStatus === null || chargeStatus === 'failed') return 'refund_rejected';
  const held = [...order.refunds.values()].reduce((sum, x) => sum + x.amount, 0);
  return held + r.amount > order.charge.amount ? 'refund_rejected' : 'accepted';
}

// ── Bodies ───────────────────────────────────────────────────────────────────────────────────────

/** Pooled order ids: charges repeat and conflict on them, refunds mostly name them (so most refunds have a charge). */
const POOL = ['fz-a', 'fz-b', 'fz-c', 'fz-d', 'fz-e', 'fz-f'];
/** A small pool of order ids, so that repeats and conflicts happen; plus SQL-looking valid ones. */
const orderId = fc.oneof(
  { weight: 1, arbitrary: fc.constantFrom(...POOL).map((s) => `${s}-${RUN_TAG}`) },
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

/** Valid optional charge parameters: short and at the limits, unicode descriptions, up to 20 metadata keys. */
const metadataKey = fc.oneof(fc.stringMatching(/^[a-z0-9_]{1,12}$/), fc.constantFrom('a', 'x'.repeat(40), '0', '_', 'constructor', 'tostring')).filter((k) => !OUR_METADATA_KEYS.includes(k));
const metadataValue = fc.oneof(fc.string({ minLength: 1, maxLength: 20 }), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 8 }), fc.constant('v'.repeat(500)), fc.constantFrom(`'; DROP TABLE payment_operations; --`, 'a&b=c[d]', '%00', '\\u0000'));
const params = fc.record(
  {
    description: fc.oneof(fc.string({ minLength: 1, maxLength: 40 }), fc.string({ unit: 'grapheme', minLength: 1, maxLength: 20 }), fc.constant('d'.repeat(1000)), fc.constant('Order #1 & co. [x]=y')),
    statementDescriptorSuffix: fc.oneof(fc.stringMatching(/^[0-9 ._-]{0,5}[A-Za-z][A-Za-z0-9 ._-]{0,16}$/), fc.constantFrom('A', 'ORDER 1234567890.ABC_-', '1 a')),
    metadata: fc.oneof({ weight: 4, arbitrary: fc.dictionary(metadataKey, metadataValue, { maxKeys: 5 }) }, fc.dictionary(metadataKey, metadataValue, { minKeys: 15, maxKeys: 20 })),
  },
  { requiredKeys: [] },
).filter((p) => (p.description === undefined || storable(p.description)) && Object.values(p.metadata ?? {}).every(storable));

const validRequest = fc.record({
  orderId,
  amount: fc.oneof(fc.constant(1), fc.constant(DEFAULT_MAX_AMOUNT), fc.integer({ min: 1, max: DEFAULT_MAX_AMOUNT })),
  currency: fc.constantFrom('eur', 'usd', 'jpy'),
  customerId: fc.oneof(fc.constant('cus_test'), fc.stringMatching(/^cus_[A-Za-z0-9_]{1,196}$/)),
  paymentMethod: fc.oneof({ weight: 4, arbitrary: fc.constant('pm_card_visa') }, fc.constant('pm_card_chargeDeclined'), fc.stringMatching(/^pm_[A-Za-z0-9_]{1,40}$/)),
  // Most pooled-order repeats then differ in them too (a conflict); the echo below repeats them exactly.
}).chain((r) => fc.option(params, { freq: 2, nil: undefined }).map((p) => ({ ...r, ...(p ?? {}) })));

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

/** Hostile charge parameters: wrong types, empty, too long, NUL, lone surrogates, unicode / uppercase / reserved keys, too many keys. */
const hostileText = fc.constantFrom<unknown>('', '\u0000', 'a\u0000b', '\uD800', 'x\uDFFF', 'd'.repeat(1001), 'S'.repeat(23), '12345', ' ', 'é', 'Ünïcode', '<b>', "a'b", 'a"b', '*', 'A\n', 5, 0, true, null, [], {}, ['a'], { a: 'b' });
const hostileKey = fc.constantFrom('', 'Order', 'ORDER_ID', 'ключ', 'clé', '日本', 'a-b', 'a b', 'a.b', 'a[b]', 'k'.repeat(41), '\u0000', '\uD800', ...OUR_METADATA_KEYS, '__proto__', 'operation_id ', 'Operation_id');
const mutatedParams = fc
  .tuple(validRequest, fc.constantFrom('description', 'statementDescriptorSuffix', 'metadata', 'metadata key', 'metadata value', 'too many keys'), fc.oneof(hostileText, hostileValue), hostileKey)
  .map(([request, how, value, key]) => {
    const copy: Record<string, unknown> = { ...request };
    const metadata = { ...((request as { metadata?: Record<string, string> }).metadata ?? {}) };
    if (how === 'description' || how === 'statementDescriptorSuffix' || how === 'metadata') copy[how] = value;
    else if (how === 'too many keys') for (let i = 0; Object.keys(metadata).length <= 20; i += 1) metadata[`k${i}`] = 'v';
    delete copy.metadata;
    const text = JSON.stringify(copy);
    if (how === 'description' || how === 'statementDescriptorSuffix' || how === 'metadata') return JSON.stringify({ ...copy, metadata: how === 'metadata' ? value : metadata });
    // Written out by hand, so that a `__proto__` key is an own key of the text, as a producer may send it.
    const entries = Object.entries(metadata).map(([k, v]) => `${JSON.stringify(k)}:${JSON.stringify(v)}`);
    if (how === 'metadata key') entries.push(`${JSON.stringify(key)}:"v"`);
    if (how === 'metadata value') entries.push(`"hostile":${JSON.stringify(value) ?? 'null'}`);
    return text.replace(/\}$/, `,"metadata":{${entries.join(',')}}}`);
  });

/** Charges as producers send them: without `type` (most), or with `"type":"charge"`. */
const validCharge = fc.tuple(validRequest, fc.boolean()).map(([r, typed]) => JSON.stringify(typed ? { type: 'charge', ...r } : r));

/** Refund ids: a small pool (repeats and conflicts), arbitrary printable ones, SQL-looking, the remedy's namespace. */
const refundIdArb = fc.oneof(
  { weight: 3, arbitrary: fc.constantFrom('rf-1', 'rf-2', 'rf-3') },
  { weight: 2, arbitrary: fc.stringMatching(/^[\x21-\x7e]{1,128}$/) },
  { weight: 1, arbitrary: fc.constantFrom(`r');DELETE/**/FROM/**/payment_operations;--`, 'duplicate:pi_123', 'duplicate:', 'Duplicate:pi_1', 'x'.repeat(128)) },
);
/** Refunds mostly of the pooled orders (charged earlier in the run, some declined), some of orders never charged. */
const validRefund = fc.record({
  type: fc.constant('refund' as const),
  orderId: fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...POOL).map((s) => `${s}-${RUN_TAG}`) }, { weight: 1, arbitrary: orderId }),
  refundId: refundIdArb,
  amount: fc.oneof(fc.constant(1), fc.integer({ min: 1, max: 5_000 }), fc.constant(DEFAULT_MAX_AMOUNT), fc.integer({ min: 1, max: DEFAULT_MAX_AMOUNT })),
  reason: fc.option(fc.constantFrom(...REFUND_REASONS), { nil: undefined }),
}).map((r) => JSON.stringify(r));
const REFUND_FIELDS = ['type', 'orderId', 'refundId', 'amount', 'reason'];

/** A refund body with one field replaced (by a hostile value or another `type`), removed, added, or a prototype key. */
const mutatedRefund = fc
  .tuple(validRefund, fc.constantFrom(...REFUND_FIELDS), fc.oneof(hostileValue, fc.constantFrom<unknown>('charge', 'Refund', 'refunds', 'REFUND', 'requested_by_customer ', 'other')), fc.constantFrom('replace', 'remove', 'extra', 'proto'))
  .map(([text, key, value, how]) => {
    const copy = JSON.parse(text) as Record<string, unknown>;
    if (how === 'replace') copy[key] = value;
    else if (how === 'remove') delete copy[key];
    else if (how === 'extra') copy[`x_${key}`] = value;
    else return JSON.stringify(copy).replace(/^\{/, '{"__proto__":{"amount":-1},');
    return JSON.stringify(copy);
  });

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

// Refunds take their share from the charges' weight: as many bodies per batch as before.
const body = fc.oneof(
  { weight: 3, arbitrary: validCharge },
  { weight: 2, arbitrary: mutatedRequest },
  { weight: 2, arbitrary: mutatedParams },
  { weight: 1, arbitrary: rawJson },
  { weight: 2, arbitrary: garbage },
  { weight: 1, arbitrary: fc.constantFrom(...MONSTERS) },
  { weight: 2, arbitrary: validRefund },
  { weight: 1, arbitrary: mutatedRefund },
);

const batch = fc.array(fc.tuple(body, fc.boolean()), { minLength: 1, maxLength: 10 });

/**
 * The same charge again with its metadata keys in reverse order (docs/producers.md: key order does
 * not matter — the same parameters, not a conflict): appended to a batch that has room.
 */
function echo(texts: readonly string[]): string | null {
  for (const text of texts) {
    const v = oracle(text);
    if (v?.kind !== 'charge' || Object.keys(v.metadata).length < 2) continue;
    const o = JSON.parse(text) as Record<string, unknown>;
    return JSON.stringify({ ...o, metadata: Object.fromEntries(Object.entries(v.metadata).reverse()) });
  }
  return null;
}

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
  /** orderId → the parameters of the first valid charge body seen for it, and the refunds accepted for it. */
  const books = new Map<string, OrderBook>();
  /** Refund operations the oracle accepted: operation id → what was asked. */
  const acceptedRefunds = new Map<string, ValidRefund>();
  const tally = { batches: 0, bodies: 0, valid: 0, withParams: 0, echoes: 0, charged: 0, rejected: 0, conflicts: 0, monsters: 0, bytes: 0, refunds: { accepted: 0, repeat: 0, refund_conflict: 0, refund_rejected: 0, invalid: 0 }, refunded: 0 };

  afterAll(() => {
    const r = tally.refunds;
    console.log(
      `fuzz: ${tally.bodies} bodies in ${tally.batches} batches (${(tally.bytes / 1e6).toFixed(1)} MB): ${tally.valid} valid → operations, ` +
        `(${tally.withParams} valid charge bodies (conflicts too) of an order with charge parameters, ${tally.echoes} repeated with metadata keys reversed), ${tally.rejected} rejected (${tally.conflicts} order conflicts), ${tally.monsters} monsters (100k-deep JSON, 256 KB, NUL / lone surrogates); ` +
        `refund bodies: ${r.accepted} accepted, ${r.repeat} repeats, ${r.refund_conflict} conflicts, ${r.refund_rejected} refused by the rules, ${r.invalid} invalid; ` +
        `${tally.charged} PaymentIntents, ${tally.refunded} Refunds at Stripe`,
    );
  });

  it('every body becomes an operation or a rejected_messages row; nothing crashes, nothing invalid is charged or refunded', { timeout: 900_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(batch, async (items) => {
        const records = items.map(([text, grouped]) => record(text, grouped));
        const again = records.length < 10 ? echo(items.map(([text]) => text)) : null;
        if (again !== null) {
          records.push(record(again, true));
          tally.echoes += 1;
        }
        const response = await handler({ Records: records }, lambdaContext(60_000));
        expect(response?.batchItemFailures ?? []).toEqual([]);

        const ids = records.map((r) => r.messageId);
        const rejected = new Map(
          (await db.pool.query<{ message_id: string; reason_code: string; order_id: string | null; body_sha256: string }>(
            `SELECT message_id, reason_code, order_id, body_sha256 FROM rejected_messages WHERE message_id = ANY($1)`,
            [ids],
          )).rows.map((r) => [r.message_id, r]),
        );
        const parsed = records.map((r) => ({ r, valid: oracle(r.body) }));
        // A refund is ordered after its order's charge. Within one batch the handler makes the
        // batch's charges durable first, then its refunds in record order (lambdas/charge/batch.ts):
        // charges are judged first here too.
        const ordered = [...parsed.filter((p) => p.valid?.kind !== 'refund'), ...parsed.filter((p) => p.valid?.kind === 'refund')];
        for (const { r, valid } of ordered) {
          tally.bodies += 1;
          tally.bytes += r.body.length;
          if (MONSTERS.includes(r.body)) tally.monsters += 1;
          const row = rejected.get(r.messageId);
          if (valid === null) {
            // Invalid: rejected, kept whole (the hash of exactly what came), and no operation made from it.
            expect(row, `invalid body not rejected: ${JSON.stringify(r.body.slice(0, 200))}`).toBeDefined();
            expect(row!.reason_code).toMatch(/^invalid_(json|body)$/);
            tally.rejected += 1;
            if (r.body.includes('"type":"refund"')) tally.refunds.invalid += 1;
            continue;
          }
          if (valid.kind === 'refund') {
            await checkRefund(r.body, valid, row);
            continue;
          }
          const first = books.get(valid.orderId)?.charge;
          const conflicting =
            first !== undefined &&
            (first.amount !== valid.amount || first.currency !== valid.currency || first.customerId !== valid.customerId || first.paymentMethod !== valid.paymentMethod ||
              first.description !== valid.description || first.statementDescriptorSuffix !== valid.statementDescriptorSuffix || !sameMetadata(first.metadata, valid.metadata));
          if (first === undefined) {
            const { kind: _kind, ...charge } = valid;
            books.set(valid.orderId, { charge, refunds: new Map() });
          }
          const { rows } = await db.pool.query(
            `SELECT amount::int, currency, customer_id, payment_method, description, statement_descriptor_suffix, charge_metadata FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`,
            [valid.orderId],
          );
          expect(rows, `valid body made no operation: ${r.body.slice(0, 200)}`).toHaveLength(1);
          const expected = books.get(valid.orderId)!.charge;
          expect(rows[0]).toEqual({
            amount: expected.amount, currency: expected.currency, customer_id: expected.customerId, payment_method: expected.paymentMethod,
            description: expected.description, statement_descriptor_suffix: expected.statementDescriptorSuffix, charge_metadata: expected.metadata,
          });
          if (Object.keys(expected.metadata).length + (expected.description ? 1 : 0) + (expected.statementDescriptorSuffix ? 1 : 0) > 0) tally.withParams += 1;
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
      const asked = books.get(pi.metadata.order_id ?? '')?.charge;
      expect(asked, `PaymentIntent ${pi.id} for order ${pi.metadata.order_id} no valid body asked for`).toBeDefined();
      expect({ amount: pi.amount, currency: pi.currency, customer: pi.customer }).toEqual({ amount: asked!.amount, currency: asked!.currency, customer: asked!.customerId });
      // Exactly the producer's metadata plus ours (nothing dropped, nothing overwritten), and the description and suffix as sent.
      const ours = Object.fromEntries(Object.entries(pi.metadata).filter(([k]) => OUR_METADATA_KEYS.includes(k)));
      expect(Object.keys(ours).sort(), `PaymentIntent ${pi.id}: our metadata`).toEqual(['key_generation', 'operation_id', 'order_id']);
      expect(pi.metadata, `PaymentIntent ${pi.id}: metadata`).toEqual({ ...asked!.metadata, ...ours });
      expect({ description: pi.description ?? null, suffix: pi.statement_descriptor_suffix ?? null }).toEqual({ description: asked!.description, suffix: asked!.statementDescriptorSuffix });
      tally.charged += 1;
    }
    expect(stripe.fake.stats().doubleCharges).toBe(0);
    // Nothing refunded that a valid, accepted refund body did not ask for; once each; never more than charged.
    const refundedByPi = new Map<string, number>();
    for (const refund of stripe.fake.refunds()) {
      const asked = acceptedRefunds.get(refund.metadata.operation_id ?? '');
      expect(asked, `Refund ${refund.id} (operation ${refund.metadata.operation_id}) no accepted refund body asked for`).toBeDefined();
      expect({ amount: refund.amount, order: refund.paymentIntentOrderId }).toEqual({ amount: asked!.amount, order: asked!.orderId });
      refundedByPi.set(refund.payment_intent, (refundedByPi.get(refund.payment_intent) ?? 0) + refund.amount);
      tally.refunded += 1;
    }
    expect(stripe.fake.refunds().length).toBe(new Set(stripe.fake.refunds().map((r) => r.metadata.operation_id)).size);
    for (const pi of stripe.fake.paymentIntents()) expect(refundedByPi.get(pi.id) ?? 0).toBeLessThanOrEqual(pi.amount);
    // The SQL-looking ids were data, not code: the tables are all there and still append-only.
    const { rows } = await db.pool.query(`SELECT count(*)::int AS n FROM pg_tables WHERE tablename IN ('payment_operations', 'rejected_messages', 'payment_operation_events', 'outcome_events')`);
    expect(rows[0].n).toBe(4);
  });

  /** A valid refund body: the oracle's verdict against what the handler wrote. */
  async function checkRefund(text: string, valid: ValidRefund, row: { reason_code: string } | undefined): Promise<void> {
    const { rows: charges } = await db.pool.query<{ status: string }>(`SELECT status FROM payment_operations WHERE order_id = $1 AND kind = 'charge'`, [valid.orderId]);
    const book = books.get(valid.orderId);
    const verdict = refundVerdict(book, charges[0]?.status ?? null, valid);
    tally.refunds[verdict] += 1;
    const { rows: ops } = await db.pool.query<{ id: string; amount: number; refund_reason: string | null; status: string }>(
      `SELECT id::text, amount::int, refund_reason, status FROM payment_operations WHERE order_id = $1 AND kind = 'refund' AND refund_id = $2`,
      [valid.orderId, valid.refundId],
    );
    const what = `${verdict}: ${text.slice(0, 300)}`;
    if (verdict === 'accepted' || verdict === 'repeat') {
      expect(row, `valid refund also rejected (${row?.reason_code}) — ${what}`).toBeUndefined();
      expect(ops, `accepted refund made no operation — ${what}`).toHaveLength(1);
      expect({ amount: ops[0]!.amount, reason: ops[0]!.refund_reason }).toEqual({ amount: valid.amount, reason: valid.reason });
      // The charge is final here (the fake answers at once, no faults): a refund of a succeeded charge is sent now.
      if (charges[0]?.status === 'succeeded') expect(ops[0]!.status, what).toBe('succeeded');
      if (verdict === 'accepted') {
        book!.refunds.set(valid.refundId, valid);
        acceptedRefunds.set(ops[0]!.id, valid);
      }
      return;
    }
    expect(row?.reason_code, `refund not rejected as ${verdict} — ${what}`).toBe(verdict);
    tally.rejected += 1;
    // Nothing made: a conflict leaves the first refund as it was, a refusal leaves no operation.
    if (verdict === 'refund_conflict') expect(ops.map((o) => acceptedRefunds.has(o.id)), what).toEqual([true]);
    else expect(ops, `refused refund made an operation — ${what}`).toHaveLength(0);
  }

  it('charge parameters the ledger could not keep as sent (NUL, lone surrogate, empty metadata value, a __proto__ key) are invalid_body rows, not a redelivery loop; valid ones reach the PaymentIntent as sent', async () => {
    const base = { amount: 700, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' };
    const bad: [string, string, RegExp][] = [
      [`fz-p1-${RUN_TAG}`, `"description":"a\\u0000b"`, /description: must not contain NUL or lone surrogates/],
      [`fz-p2-${RUN_TAG}`, `"metadata":{"k":"\\ud800"}`, /metadata values must not contain NUL or lone surrogates/],
      [`fz-p3-${RUN_TAG}`, `"metadata":{"k":""}`, /metadata values must not be empty/],
      [`fz-p4-${RUN_TAG}`, `"metadata":{"__proto__":"v"}`, /metadata key __proto__ is not allowed/],
    ];
    const good = `fz-p5-${RUN_TAG}`;
    const records = [
      ...bad.map(([orderId, param]) => record(JSON.stringify({ orderId, ...base }).replace(/\}$/, `,${param}}`), true)),
      record(JSON.stringify({ orderId: good, ...base, description: 'Two books — 日本', statementDescriptorSuffix: 'BOOKS 7', metadata: { shop: 'eu_1', constructor: 'x' } }), true),
    ];
    const response = await handler({ Records: records }, lambdaContext(60_000));
    expect(response?.batchItemFailures ?? []).toEqual([]);
    for (const [i, [orderId, , reason]] of bad.entries()) {
      const { rows } = await db.pool.query(`SELECT reason_code, reason FROM rejected_messages WHERE message_id = $1`, [records[i]!.messageId]);
      expect(rows).toEqual([{ reason_code: 'invalid_body', reason: expect.stringMatching(reason) }]);
      expect((await db.pool.query(`SELECT 1 FROM payment_operations WHERE order_id = $1`, [orderId])).rows).toEqual([]);
    }
    const [pi] = stripe.fake.paymentIntents({ orderId: good });
    expect(pi).toMatchObject({ description: 'Two books — 日本', statement_descriptor_suffix: 'BOOKS 7', metadata: { shop: 'eu_1', constructor: 'x', order_id: good, operation_id: expect.any(String), key_generation: '0' } });
    expect(Object.keys(pi!.metadata).sort()).toEqual(['constructor', 'key_generation', 'operation_id', 'order_id', 'shop']);
  });

  it('a producer refund id in the duplicate remedy\'s namespace (duplicate:{pi}) is refused as invalid, and nothing is refunded', async () => {
    const orderId = `fz-ns-${RUN_TAG}`;
    const charge = record(JSON.stringify({ orderId, amount: 700, currency: 'eur', customerId: 'cus_test', paymentMethod: 'pm_card_visa' }), true);
    const refund = record(JSON.stringify({ type: 'refund', orderId, refundId: 'duplicate:pi_3Abc', amount: 700 }), true);
    const response = await handler({ Records: [charge, refund] }, lambdaContext(60_000));
    expect(response?.batchItemFailures ?? []).toEqual([]);
    const { rows } = await db.pool.query(`SELECT reason_code, reason FROM rejected_messages WHERE message_id = $1`, [refund.messageId]);
    expect(rows).toEqual([{ reason_code: 'invalid_body', reason: expect.stringMatching(/refundId: must not start with "duplicate:"/) }]);
    const ops = await db.pool.query(`SELECT kind, status FROM payment_operations WHERE order_id = $1`, [orderId]);
    expect(ops.rows).toEqual([{ kind: 'charge', status: 'succeeded' }]);
    expect(stripe.fake.refunds().filter((r) => r.paymentIntentOrderId === orderId)).toEqual([]);
  });
});

