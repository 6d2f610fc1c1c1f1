// The message contract (docs/producers.md): what a producer puts on the queue and what the charge handler
// accepts. One schema for both sides, so the producer refuses what the consumer would reject.
import { createHash } from 'node:crypto';
// zod/mini, not zod: the same checks, issues and messages (one core), at a fraction of the classic
// build's bundle and load time on the charge handler's cold start (docs/decisions.md, bench:cold).
import * as z from 'zod/mini';
import './zod-locale.ts';
import { ACCOUNT_ID, REFUND_REASONS, REMEDY_REFUND_ID_PREFIX } from './types.ts';

/** Stripe's ceiling for most currencies is 8 digits in minor units; deployments may lower it. */
export const DEFAULT_MAX_AMOUNT = 99_999_999;

/** Printable ASCII without spaces, ≤ 128: also the alphabet and size of an SQS FIFO MessageGroupId. */
const ORDER_ID = /^[\x21-\x7e]{1,128}$/;
const STRIPE_ID = (prefix: string) => new RegExp(`^${prefix}_[A-Za-z0-9_]{1,196}$`);
const ACCOUNT_MESSAGE = 'must be a Stripe account id (acct_ and 1-64 letters or digits)';

/** Keys the pipeline writes into a PaymentIntent's metadata itself: a producer may not set them. */
export const RESERVED_METADATA_KEYS: readonly string[] = ['operation_id', 'order_id', 'key_generation', 'refund_id'];
export const MAX_METADATA_KEYS = 20;

/**
 * Text we store and send as it came: PostgreSQL text and jsonb cannot hold NUL (the insert fails, and
 * the record would loop through redeliveries instead of being rejected), and a lone surrogate has no
 * UTF-8 form (it would be stored and sent changed). Found by test/proof/fuzz.test.ts.
 */
const storableText = (s: string) => !s.includes('\u0000') && s.isWellFormed();
const STORABLE = 'must not contain NUL or lone surrogates';

const metadataSchema = z
  .record(
    z.string().check(z.regex(/^[a-z0-9_]{1,40}$/, 'metadata keys must be 1-40 of [a-z0-9_]')),
    // Stripe: "an empty value unsets the key" — an empty value would not be on the PaymentIntent as sent.
    z
      .string()
      .check(
        z.minLength(1, 'metadata values must not be empty'),
        z.maxLength(500, 'metadata values must be at most 500 characters'),
        z.refine(storableText, `metadata values ${STORABLE}`),
      ),
  )
  .check(
    z.refine((m) => Object.keys(m).length <= MAX_METADATA_KEYS, `at most ${MAX_METADATA_KEYS} metadata keys`),
    z.refine((m) => !Object.keys(m).some((k) => RESERVED_METADATA_KEYS.includes(k)), `metadata may not set the pipeline's keys (${RESERVED_METADATA_KEYS.join(', ')})`),
  );

/**
 * A `__proto__` key (JSON.parse makes it an own key) fits the alphabet, but zod's record skips it
 * silently and no plain JavaScript object carries it as data: it would vanish on the way to the
 * ledger and to Stripe, so it is refused before the record is read (found by test/proof/fuzz.test.ts).
 */
const producerMetadataSchema = z.pipe(
  z.unknown().check(z.refine((m) => typeof m !== 'object' || m === null || !Object.hasOwn(m, '__proto__'), 'metadata key __proto__ is not allowed')),
  metadataSchema,
);

export function chargeRequestSchema(maxAmount: number = DEFAULT_MAX_AMOUNT) {
  return z.strictObject({
    /** Optional: a body without `type` is a charge, so producers written before refunds keep working. */
    type: z.optional(z.literal('charge', 'must be "charge" or "refund"')),
    orderId: z.string().check(z.regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces')),
    amount: amountSchema(maxAmount),
    currency: z.string().check(z.regex(/^[a-z]{3}$/, 'must be three lowercase letters (ISO 4217)')),
    customerId: z.string().check(z.regex(STRIPE_ID('cus'), 'must be a Stripe customer id (cus_…)')),
    paymentMethod: z.string().check(z.regex(STRIPE_ID('pm'), 'must be a Stripe PaymentMethod id (pm_…)')),
    // Optional charge parameters (docs/producers.md), passed to Stripe and part of the order's parameters: a
    // repeat of the order with other values is a conflict. Never logged.
    description: z.optional(
      z.string().check(z.minLength(1, 'must not be empty'), z.maxLength(1000, 'must be at most 1000 characters'), z.refine(storableText, STORABLE)),
    ),
    // Stripe: the suffix is at most 22 characters, Latin letters, digits and a few signs, at least one letter.
    statementDescriptorSuffix: z.optional(
      z.string().check(z.regex(/^(?=.*[A-Za-z])[A-Za-z0-9 .\-_]{1,22}$/, 'must be 1-22 of letters, digits, space . - _ with at least one letter')),
    ),
    metadata: z.optional(producerMetadataSchema),
    // Connect (docs/producers.md#connected-accounts): a direct charge made AS a connected account
    // (every Stripe request of the operation carries Stripe-Account), or a destination charge on the
    // platform that transfers to one. Parameters of the order like the amount.
    account: z.optional(z.string().check(z.regex(ACCOUNT_ID, ACCOUNT_MESSAGE))),
    applicationFeeAmount: z.optional(
      z.number().check(z.int('must be an integer number of minor units'), z.positive('must be positive'), z.maximum(maxAmount, `must be at most ${maxAmount}`)),
    ),
    transferDestination: z.optional(z.string().check(z.regex(ACCOUNT_ID, ACCOUNT_MESSAGE))),
    // Manual capture (docs/producers.md#authorize-now-capture-later): authorize only; a capture or
    // cancel_authorization message settles it later. Absent: captured at once.
    capture: z.optional(z.literal('manual', 'must be "manual" (absent: captured at once)')),
  }).check(
    // Stripe: an application fee is taken from a connected account — the one the charge is made as,
    // or the destination's transfer (docs.stripe.com/connect/direct-charges, /destination-charges).
    z.refine((r) => r.applicationFeeAmount === undefined || r.account !== undefined || r.transferDestination !== undefined, {
      message: 'needs an account or a transferDestination (a fee is taken from a connected account)',
      path: ['applicationFeeAmount'],
    }),
    z.refine((r) => r.applicationFeeAmount === undefined || r.applicationFeeAmount <= r.amount, {
      message: 'must be at most the amount',
      path: ['applicationFeeAmount'],
    }),
    // A destination charge is made on the platform; a direct charge is the connected account's own.
    z.refine((r) => r.account === undefined || r.transferDestination === undefined, {
      message: 'a charge is either on a connected account (account) or a destination charge on the platform (transferDestination), not both',
      path: ['transferDestination'],
    }),
  );
}

/** Minor units: an integer, positive, at most the deployment's maximum (the classic `.int().positive().max()`). */
function amountSchema(maxAmount: number) {
  return z.number().check(z.int('must be an integer number of minor units'), z.positive('must be positive'), z.maximum(maxAmount, `must be at most ${maxAmount}`));
}

export type ChargeRequest = z.infer<ReturnType<typeof chargeRequestSchema>>;

/**
 * A refund request (docs/producers.md#refund-requests-the-same-queue): on the same FIFO queue and in the same message group as its order's
 * charge, so that it is ordered after it. `amount` in minor units; `reason` one of Stripe's.
 */
export function refundRequestSchema(maxAmount: number = DEFAULT_MAX_AMOUNT) {
  return z.strictObject({
    type: z.literal('refund'),
    orderId: z.string().check(z.regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces')),
    refundId: z
      .string()
      .check(
        z.regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces'),
        z.refine((id) => !id.startsWith(REMEDY_REFUND_ID_PREFIX), `must not start with "${REMEDY_REFUND_ID_PREFIX}" (the duplicate-charge remedy's refund ids)`),
      ),
    amount: amountSchema(maxAmount),
    reason: z.optional(z.enum(REFUND_REASONS, `must be ${REFUND_REASONS.join(', ').replace(/, (?=[^,]*$)/, ' or ')}`)),
  });
}

export type RefundRequest = z.infer<ReturnType<typeof refundRequestSchema>>;

/**
 * A capture or a release of a manual charge's authorization (docs/producers.md#authorize-now-capture-later):
 * on the same queue and in the same message group as its order's charge. A capture's `amount` is at
 * most the authorized (absent: all of it; the rest is released, as Stripe does); a cancel has none.
 */
export function authorizationRequestSchema(maxAmount: number = DEFAULT_MAX_AMOUNT) {
  return z.union([
    z.strictObject({
      type: z.literal('capture'),
      orderId: z.string().check(z.regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces')),
      amount: z.optional(amountSchema(maxAmount)),
    }),
    z.strictObject({
      type: z.literal('cancel_authorization'),
      orderId: z.string().check(z.regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces')),
    }),
  ]);
}

export type AuthorizationRequest = z.infer<ReturnType<typeof authorizationRequestSchema>>;

// Building a zod schema costs more than using it: one per kind and maximum, built once (a deployment has one).
const built = new Map<string, unknown>();
function memo<T>(kind: 'charge' | 'refund' | 'authorization', maxAmount: number, build: (maxAmount: number) => T): T {
  const key = `${kind}:${maxAmount}`;
  if (!built.has(key)) built.set(key, build(maxAmount));
  return built.get(key) as T;
}
const schemaFor = (maxAmount: number) => memo('charge', maxAmount, chargeRequestSchema);
const refundSchemaFor = (maxAmount: number) => memo('refund', maxAmount, refundRequestSchema);
const authorizationSchemaFor = (maxAmount: number) => memo('authorization', maxAmount, authorizationRequestSchema);

export type QueueParseResult =
  | { readonly ok: true; readonly kind: 'charge'; readonly request: ChargeRequest }
  | { readonly ok: true; readonly kind: 'refund'; readonly request: RefundRequest }
  | { readonly ok: true; readonly kind: 'authorization'; readonly request: AuthorizationRequest }
  | { readonly ok: false; readonly code: 'invalid_json' | 'invalid_body'; readonly reason: string; readonly orderId?: string };

/**
 * One message of the queue, routed by `type` ("refund" → the refund schema; "capture" /
 * "cancel_authorization" → the authorization schema; absent or anything else → the charge schema,
 * which names a wrong `type`). Never throws.
 */
export function parseQueueMessage(body: string, maxAmount: number = DEFAULT_MAX_AMOUNT): QueueParseResult {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { ok: false, code: 'invalid_json', reason: 'body is not valid JSON' };
  }
  const type = typeof json === 'object' && json !== null ? (json as { type?: unknown }).type : undefined;
  if (type === 'capture' || type === 'cancel_authorization') return parseAuthorizationRequest(json);
  if (type !== 'refund') {
    const charge = parseChargeRequest(body, maxAmount);
    return charge.ok ? { ok: true, kind: 'charge', request: charge.request } : charge;
  }
  let result;
  try {
    result = refundSchemaFor(maxAmount).safeParse(json);
  } catch {
    return { ok: false, code: 'invalid_body', reason: 'body could not be validated' };
  }
  if (result.success) return { ok: true, kind: 'refund', request: result.data };
  const reason = result.error.issues.slice(0, 5).map((issue) => describeIssue(issue, REFUND_FIELDS)).join('; ');
  const orderId = (json as { orderId?: unknown }).orderId;
  return { ok: false, code: 'invalid_body', reason, ...(typeof orderId === 'string' && ORDER_ID.test(orderId) ? { orderId } : {}) };

  function parseAuthorizationRequest(parsed: unknown): QueueParseResult {
    let checked;
    try {
      checked = authorizationSchemaFor(maxAmount).safeParse(parsed);
    } catch {
      return { ok: false, code: 'invalid_body', reason: 'body could not be validated' };
    }
    if (checked.success) return { ok: true, kind: 'authorization', request: checked.data };
    // A union reports its branches' issues; the one of the message's own type is the one to name.
    const issues = checked.error.issues.flatMap((issue) => (issue.code === 'invalid_union' ? issue.errors.flat() : [issue]));
    const own = issues.filter((issue) => !(issue.code === 'invalid_value' && issue.path.length === 1 && issue.path[0] === 'type'));
    const why = (own.length > 0 ? own : issues).slice(0, 5).map((issue) => describeIssue(issue, AUTHORIZATION_FIELDS)).join('; ');
    const id = (parsed as { orderId?: unknown }).orderId;
    return { ok: false, code: 'invalid_body', reason: why, ...(typeof id === 'string' && ORDER_ID.test(id) ? { orderId: id } : {}) };
  }
}

export type ParseResult =
  | { readonly ok: true; readonly request: ChargeRequest }
  | { readonly ok: false; readonly code: 'invalid_json' | 'invalid_body'; readonly reason: string; readonly orderId?: string };

/**
 * Parse and validate one message body. Never throws, whatever the input: a bad body is a value to
 * record, not an exception that would make the batch fail and loop through redeliveries.
 * Reasons name the fields and rules, never the values (a body may carry anything).
 */
export function parseChargeRequest(body: string, maxAmount: number = DEFAULT_MAX_AMOUNT): ParseResult {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { ok: false, code: 'invalid_json', reason: 'body is not valid JSON' };
  }
  let result;
  try {
    result = schemaFor(maxAmount).safeParse(json);
  } catch {
    return { ok: false, code: 'invalid_body', reason: 'body could not be validated' };
  }
  if (result.success) return { ok: true, request: result.data };
  const reason = result.error.issues.slice(0, 5).map((issue) => describeIssue(issue)).join('; ');
  const orderId =
    typeof json === 'object' && json !== null && typeof (json as { orderId?: unknown }).orderId === 'string'
      ? ((json as { orderId: string }).orderId.match(ORDER_ID) ? (json as { orderId: string }).orderId : undefined)
      : undefined;
  return { ok: false, code: 'invalid_body', reason, ...(orderId ? { orderId } : {}) };
}

const KNOWN_FIELDS: ReadonlySet<string> = new Set(Object.keys(chargeRequestSchema().shape));
const REFUND_FIELDS: ReadonlySet<string> = new Set(Object.keys(refundRequestSchema().shape));
const AUTHORIZATION_FIELDS: ReadonlySet<string> = new Set(['type', 'orderId', 'amount']);

/**
 * One issue as the reason column and the logs may carry it: only the schema's own field names and
 * the schema's own messages. An unknown key's name is producer-controlled text — it may hold a NUL
 * or a lone surrogate (which PostgreSQL text cannot store), a secret, or a forged log line — so it
 * is counted, never quoted (the key is in raw_body for whoever needs it).
 */
function describeIssue(issue: z.core.$ZodIssue, fields: ReadonlySet<string> = KNOWN_FIELDS): string {
  const path = issue.path.map((part) => (typeof part === 'string' && fields.has(part) ? part : '(field)')).join('.') || '(body)';
  if (issue.code === 'unrecognized_keys') {
    const n = issue.keys.length;
    return `${path}: ${n} unknown field${n === 1 ? '' : 's'} (not named: a key is producer text; see raw_body)`;
  }
  return `${path}: ${issue.message}`;
}

// ── Deduplication ids ─────────────────────────────────────────────────────────────────────────────
// SQS FIFO drops a message whose MessageDeduplicationId it has seen in the last 5 minutes, silently:
// the sender is told "sent" either way. So the id must be equal exactly when the handler would treat
// two messages as the same request, and differ whenever it would treat them as a conflict — otherwise
// a conflicting send inside the window vanishes without a record. The id is therefore the order (and
// refund) id AND a digest of the parameters that identify the request (docs/producers.md#deduplication-ids).

/**
 * The parameters of a charge that decide "same request or conflict" (everything but `orderId` and
 * `type`), in a canonical form: fixed field order, absent fields as null, metadata keys sorted (the
 * handler compares metadata regardless of key order).
 */
export function chargeParametersDigest(request: Omit<ChargeRequest, 'orderId' | 'type'>): string {
  const metadata = request.metadata === undefined ? null : Object.entries(request.metadata).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  const canonical = JSON.stringify([
    request.amount,
    request.currency,
    request.customerId,
    request.paymentMethod,
    request.description ?? null,
    request.statementDescriptorSuffix ?? null,
    metadata,
    // Connect parameters: appended only when one is set, so that a platform charge's digest (and its
    // MessageDeduplicationId) is what it was before they existed.
    ...(request.account !== undefined || request.applicationFeeAmount !== undefined || request.transferDestination !== undefined
      ? [request.account ?? null, request.applicationFeeAmount ?? null, request.transferDestination ?? null]
      : []),
    // Likewise manual capture: appended only when asked.
    ...(request.capture !== undefined ? [`capture:${request.capture}`] : []),
  ]);
  return createHash('sha256').update(canonical).digest('hex');
}

/** The parameters of a refund that decide "same refund or conflict": amount and reason. */
export function refundParametersDigest(request: Pick<RefundRequest, 'amount' | 'reason'>): string {
  return createHash('sha256').update(JSON.stringify([request.amount, request.reason ?? null])).digest('hex');
}

/**
 * MessageDeduplicationId of a charge request: hex SHA-256 of `charge:{orderId}:{parametersDigest}`.
 * Identical repeats share it (SQS drops them within 5 minutes); a repeat with another amount,
 * currency, customer, payment method, description, suffix, metadata, account, fee or destination does not, so it reaches the
 * handler and is recorded as an `order_conflict`. MessageGroupId = orderId.
 */
export function deduplicationId(request: Omit<ChargeRequest, 'type'>): string {
  return createHash('sha256').update(`charge:${request.orderId}:${chargeParametersDigest(request)}`).digest('hex');
}

/**
 * MessageDeduplicationId of a refund request: hex SHA-256 of
 * `refund:{orderId}:{refundId}:{parametersDigest}`. MessageGroupId = orderId.
 */
export function refundDeduplicationId(request: Pick<RefundRequest, 'orderId' | 'refundId' | 'amount' | 'reason'>): string {
  return createHash('sha256').update(`refund:${request.orderId}:${request.refundId}:${refundParametersDigest(request)}`).digest('hex');
}

/**
 * The first contract's ids, hex SHA-256 of `charge:{orderId}` and `refund:{orderId}:{refundId}`.
 * Producers deployed before the change still send them, and the queue and the handler accept them
 * (the handler never reads the id: one operation per order and per refund id is what makes a repeat
 * harmless). With them, a conflicting send inside SQS's window is dropped by SQS unseen — the reason
 * to move; see docs/producers.md#moving-a-deployed-producer-to-the-new-ids.
 */
/**
 * MessageDeduplicationId of a capture or cancel_authorization request: hex SHA-256 of
 * `{type}:{orderId}:{amount or "all"}` — a repeat is the same request; a capture of another amount
 * reaches the handler and is recorded as an `authorization_conflict`. MessageGroupId = orderId.
 */
export function authorizationDeduplicationId(request: AuthorizationRequest): string {
  const amount = request.type === 'capture' && request.amount !== undefined ? String(request.amount) : 'all';
  return createHash('sha256').update(`${request.type}:${request.orderId}:${amount}`).digest('hex');
}

export function legacyDeduplicationId(orderId: string): string {
  return createHash('sha256').update(`charge:${orderId}`).digest('hex');
}

export function legacyRefundDeduplicationId(orderId: string, refundId: string): string {
  return createHash('sha256').update(`refund:${orderId}:${refundId}`).digest('hex');
}
