// The receipt notifier: the kit's first user. On `Charge Succeeded` — and `Charge Captured`, the
// capture of an authorization (for the captured amount), and `Refund Succeeded`, a refund operation's
// success (their details carry the same orderId / amount / currency / occurredAt / externalId) — it
// sends the customer a receipt through an e-mail provider.
//
// Policy: at-least-once by default (docs/events.md#which-policy: a duplicate receipt is a small harm, a
// missing one a medium harm). `idempotent` when the provider deduplicates on keys (Resend does):
// then neither. `at-most-once` is allowed, and measured, but is the wrong choice for a receipt.
import path from 'node:path';
import { z } from 'zod';
import type { Db } from '../../payments/db.ts';
import type { LogSink } from '../../runtime/observability.ts';
import { createOutcomeConsumer, type OutcomeConsumer } from '../kit/consumer.ts';
import { ConsumerConfigError } from '../kit/errors.ts';
import { kitMigrations, type MigrationSet } from '../kit/migrations.ts';
import type { ConsumerPolicy, Effect } from '../kit/types.ts';
import { DEFAULT_RECEIPTS_POLICY, RECEIPT_DETAIL_TYPES } from './contract.ts';
import type { EmailProvider } from './email-provider.ts';

export { DEFAULT_RECEIPTS_POLICY, RECEIPT_DETAIL_TYPES } from './contract.ts';

/** What a receipt needs of the detail (lambdas/events/contract.ts; a refund's detail is assumed to carry the same). */
export const receiptDetailSchema = z.looseObject({
  orderId: z.string().min(1).max(128),
  amount: z.number().int().positive(),
  currency: z.string().regex(/^[a-z]{3}$/),
  occurredAt: z.iso.datetime(),
  externalId: z.string().nullable().optional(),
});
export type ReceiptDetail = z.infer<typeof receiptDetailSchema>;

/**
 * Who gets the receipt. Outcome events carry no personal data by design (no e-mail address), so a
 * deployment plugs in its customer directory here; the default renders a template with the order id
 * (for the local run and tests).
 */
export type RecipientLookup = (detail: ReceiptDetail) => Promise<string> | string;

export function templateRecipient(template: string): RecipientLookup {
  if (!template.includes('{orderId}') || !/^[^@\s]+@[^@\s]+$/.test(template.replace('{orderId}', 'x'))) {
    throw new ConsumerConfigError(`RECEIPTS_RECIPIENT_TEMPLATE must be an address containing {orderId}, got ${JSON.stringify(template)}`);
  }
  // Only characters an address local part takes without quoting.
  return (detail) => template.replace('{orderId}', detail.orderId.replace(/[^A-Za-z0-9._-]/g, '_'));
}

export interface ReceiptNotifierOptions {
  readonly db: Db;
  readonly provider: EmailProvider;
  /** @default at-least-once */
  readonly policy?: ConsumerPolicy;
  /** @default 'receipts' (a second instance, e.g. for a measurement, needs its own name) */
  readonly name?: string;
  readonly from: string;
  readonly recipient: RecipientLookup;
  readonly leaseMs?: number;
  /** idempotent only: the provider's key lifetime (kit default 23 h, under Resend's 24 h). */
  readonly keyLifetimeMs?: number;
  readonly concurrency?: number;
  readonly log?: LogSink;
}

export function receiptMigrations(baseDir = process.env.CONSUMER_MIGRATIONS_DIR): MigrationSet[] {
  return [
    kitMigrations(baseDir),
    { dir: baseDir ? path.join(baseDir, 'receipts') : path.join(import.meta.dirname, 'migrations'), trackingTable: 'receipts.schema_migrations' },
  ];
}

function formatAmount(amount: number, currency: string): string {
  // Two-decimal currencies only in this sketch; zero-decimal ones (jpy, krw) are shown as is.
  const zeroDecimal = ['jpy', 'krw', 'vnd', 'clp', 'isk', 'huf'].includes(currency);
  return `${zeroDecimal ? amount : (amount / 100).toFixed(2)} ${currency.toUpperCase()}`;
}

export function renderReceipt(detailType: string, detail: ReceiptDetail): { subject: string; text: string; kind: 'charge' | 'refund' } {
  const refund = detailType === 'Refund Succeeded';
  const money = formatAmount(detail.amount, detail.currency);
  return {
    kind: refund ? 'refund' : 'charge',
    subject: refund ? `Refund for order ${detail.orderId}` : `Receipt for order ${detail.orderId}`,
    text: `${refund ? 'We refunded' : 'We received your payment of'} ${money} for order ${detail.orderId} on ${detail.occurredAt}.${detail.externalId ? `\nReference: ${detail.externalId}` : ''}\n`,
  };
}

export function createReceiptNotifier(options: ReceiptNotifierOptions): OutcomeConsumer {
  const policy = options.policy ?? DEFAULT_RECEIPTS_POLICY;
  const name = options.name ?? 'receipts';
  if (policy === 'idempotent' && !options.provider.idempotencyKeys) {
    // The policy's promise rests on the provider deduplicating: refuse rather than pretend.
    throw new ConsumerConfigError('policy idempotent needs an e-mail provider that deduplicates on idempotency keys (EMAIL_PROVIDER_IDEMPOTENCY=true); choose at-least-once otherwise');
  }
  const { db, provider } = options;

  const sendReceipt: Effect<ReceiptDetail> = async (event, context) => {
    const receipt = renderReceipt(event.detailType, event.detail);
    const to = await options.recipient(event.detail);
    const sent = await provider.send(
      { from: options.from, to, subject: receipt.subject, text: receipt.text },
      context.idempotencyKey ? { idempotencyKey: context.idempotencyKey } : {},
    );
    // The notifier's own record (its schema). A second accepted send for the event counts up.
    await db.query({
      name: 'receipts-record-send',
      text: `INSERT INTO receipts.sent_receipts AS r (event_id, consumer, operation_id, order_id, kind, amount, currency, provider_message_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
             ON CONFLICT (event_id) DO UPDATE
                SET accepted_sends = r.accepted_sends + CASE WHEN r.provider_message_id = EXCLUDED.provider_message_id THEN 0 ELSE 1 END,
                    provider_message_id = EXCLUDED.provider_message_id, last_sent_at = now()`,
      values: [event.eventId, name, event.operationId, event.detail.orderId, receipt.kind, event.detail.amount, event.detail.currency, sent.id],
    });
    return { providerMessageId: sent.id, kind: receipt.kind };
  };

  return createOutcomeConsumer<ReceiptDetail>({
    name,
    db,
    policy,
    effect: sendReceipt,
    detailTypes: RECEIPT_DETAIL_TYPES,
    detailSchema: receiptDetailSchema,
    ...(options.leaseMs !== undefined ? { leaseMs: options.leaseMs } : {}),
    ...(options.keyLifetimeMs !== undefined ? { keyLifetimeMs: options.keyLifetimeMs } : {}),
    ...(options.concurrency !== undefined ? { concurrency: options.concurrency } : {}),
    ...(options.log ? { log: options.log } : {}),
  });
}
