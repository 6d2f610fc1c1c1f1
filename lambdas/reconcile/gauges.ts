// The reconciler's gauges, one value per run (DESIGN §5): open operations by status, the oldest open
// age, the review queue, rejected messages and duplicate-charge remedies in the last period, and the
// outbox backlog.
//
// Every query is O(open) or O(recent), never O(all): open operations through the partial index
// payment_operations_open (WHERE status IN ('pending', 'unknown') matches its predicate, so settled
// rows — the vast majority after a while — are never read), rejects through rejected_messages_received,
// the outbox through outcome_events_unpublished.
import type { Db } from '../payments/db.ts';
import { countOpenOperations, countRecentRemedies } from '../payments/operations-store.ts';
import { countRecentRejects } from '../payments/rejected-store.ts';
import { outboxGauges } from '../events/outbox.ts';

export interface ReconcileGauges {
  /** Open, not in review: what the machines still work on. */
  readonly openPending: number;
  readonly openUnknown: number;
  /** Age of the oldest open operation not in review, from when its request was recorded; 0 when none. */
  readonly oldestOpenAgeSeconds: number;
  /** Open operations waiting for a human (review_reason set). */
  readonly reviewQueueSize: number;
  readonly rejectedLastPeriod: number;
  /** Refund operations the duplicate-charge remedy created in the same window (a customer was charged twice). */
  readonly duplicateChargesRemediedLastPeriod: number;
  readonly unpublishedEvents: number;
  readonly oldestUnpublishedEventAgeSeconds: number;
}

export async function collectGauges(db: Db, rejectedWindowSeconds: number): Promise<ReconcileGauges> {
  const [open, rejectedLastPeriod, remedied, outbox] = await Promise.all([
    countOpenOperations(db),
    countRecentRejects(db, rejectedWindowSeconds),
    countRecentRemedies(db, rejectedWindowSeconds),
    outboxGauges(db),
  ]);
  return {
    ...open,
    rejectedLastPeriod,
    duplicateChargesRemediedLastPeriod: remedied,
    unpublishedEvents: outbox.unpublished,
    oldestUnpublishedEventAgeSeconds: Math.round(outbox.oldestUnpublishedAgeSeconds),
  };
}
