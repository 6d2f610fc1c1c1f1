// The message contract (DESIGN §8): what a producer puts on the queue and what the charge handler
// accepts. One schema for both sides, so the producer refuses what the consumer would reject.
import { createHash } from 'node:crypto';
import { z } from 'zod';

/** Stripe's ceiling for most currencies is 8 digits in minor units; deployments may lower it. */
export const DEFAULT_MAX_AMOUNT = 99_999_999;

/** Printable ASCII without spaces, ≤ 128: also the alphabet and size of an SQS FIFO MessageGroupId. */
const ORDER_ID = /^[\x21-\x7e]{1,128}$/;
const STRIPE_ID = (prefix: string) => new RegExp(`^${prefix}_[A-Za-z0-9_]{1,196}$`);

export function chargeRequestSchema(maxAmount: number = DEFAULT_MAX_AMOUNT) {
  return z.strictObject({
    orderId: z.string().regex(ORDER_ID, 'must be 1-128 printable ASCII characters without spaces'),
    amount: z
      .number()
      .int('must be an integer number of minor units')
      .positive('must be positive')
      .max(maxAmount, `must be at most ${maxAmount}`),
    currency: z.string().regex(/^[a-z]{3}$/, 'must be three lowercase letters (ISO 4217)'),
    customerId: z.string().regex(STRIPE_ID('cus'), 'must be a Stripe customer id (cus_…)'),
    paymentMethod: z.string().regex(STRIPE_ID('pm'), 'must be a Stripe PaymentMethod id (pm_…)'),
  });
}

export type ChargeRequest = z.infer<ReturnType<typeof chargeRequestSchema>>;

// Building a zod schema costs more than using it: one per maximum, built once (a deployment has one).
const schemas = new Map<number, ReturnType<typeof chargeRequestSchema>>();
function schemaFor(maxAmount: number): ReturnType<typeof chargeRequestSchema> {
  let schema = schemas.get(maxAmount);
  if (!schema) {
    schema = chargeRequestSchema(maxAmount);
    schemas.set(maxAmount, schema);
  }
  return schema;
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
  const reason = result.error.issues.slice(0, 5).map(describeIssue).join('; ');
  const orderId =
    typeof json === 'object' && json !== null && typeof (json as { orderId?: unknown }).orderId === 'string'
      ? ((json as { orderId: string }).orderId.match(ORDER_ID) ? (json as { orderId: string }).orderId : undefined)
      : undefined;
  return { ok: false, code: 'invalid_body', reason, ...(orderId ? { orderId } : {}) };
}

const KNOWN_FIELDS: ReadonlySet<string> = new Set(chargeRequestSchema().keyof().options);

/**
 * One issue as the reason column and the logs may carry it: only the schema's own field names and
 * the schema's own messages. An unknown key's name is producer-controlled text — it may hold a NUL
 * or a lone surrogate (which PostgreSQL text cannot store), a secret, or a forged log line — so it
 * is counted, never quoted (the key is in raw_body for whoever needs it).
 */
function describeIssue(issue: z.core.$ZodIssue): string {
  const path = issue.path.map((part) => (typeof part === 'string' && KNOWN_FIELDS.has(part) ? part : '(field)')).join('.') || '(body)';
  if (issue.code === 'unrecognized_keys') {
    const n = issue.keys.length;
    return `${path}: ${n} unknown field${n === 1 ? '' : 's'} (not named: a key is producer text; see raw_body)`;
  }
  return `${path}: ${issue.message}`;
}

/** DESIGN §8: MessageDeduplicationId = hex SHA-256 of `charge:{orderId}`; MessageGroupId = orderId. */
export function deduplicationId(orderId: string): string {
  return createHash('sha256').update(`charge:${orderId}`).digest('hex');
}
