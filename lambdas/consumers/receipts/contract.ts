// What the receipt notifier subscribes to and how it behaves by default: plain data, read by the
// notifier and by its CDK wiring (lib/outcome-consumer.ts).
import type { ConsumerPolicy } from '../kit/types.ts';

/** `Refund Succeeded` is declared although refunds are not built yet: it matches nothing until they ship. */
export const RECEIPT_DETAIL_TYPES = ['Charge Succeeded', 'Refund Succeeded'] as const;

/** seed §7: a duplicate receipt is a small harm, a missing one a medium harm. */
export const DEFAULT_RECEIPTS_POLICY: ConsumerPolicy = 'at-least-once';
