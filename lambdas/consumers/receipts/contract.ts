// What the receipt notifier subscribes to and how it behaves by default: plain data, read by the
// notifier and by its CDK wiring (lib/outcome-consumer.ts).
import type { ConsumerPolicy } from '../kit/types.ts';

/**
 * `Refund Succeeded`: a refund operation's success (docs/events.md#refund-events), its own operationId and
 * sequence; the detail carries the same receipt fields. `Charge Captured`: the capture of a charge that
 * only authorized (docs/events.md#authorize-now-capture-later) — the money is taken then, for the
 * captured amount; `Charge Authorized` takes nothing and is no receipt.
 */
export const RECEIPT_DETAIL_TYPES = ['Charge Succeeded', 'Charge Captured', 'Refund Succeeded'] as const;

/** docs/events.md#which-policy: a duplicate receipt is a small harm, a missing one a medium harm. */
export const DEFAULT_RECEIPTS_POLICY: ConsumerPolicy = 'at-least-once';

/** The role the notifier logs in as on the pipeline's database (ChargePipeline.addConsumerDatabaseLogin). */
export const RECEIPTS_DATABASE_ROLE = 'receipt_notifier';

/** The schemas its migrations create and its role owns: the kit's inbox, its own record (receiptMigrations). */
export const RECEIPTS_SCHEMAS = ['outcome_consumer', 'receipts'] as const;
