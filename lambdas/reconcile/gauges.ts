// The reconciler's gauges, one value per run (docs/architecture.md#the-reconcile-handler): open operations by status, the oldest open
// age, the review queue, rejected messages and duplicate-charge remedies in the last period, the
// outbox backlog, and — when the run works the Stripe event inbox — the inbox's backlog and open findings.
//
// Every query is O(open) or O(recent), never O(all): open operations through the partial index
// payment_operations_open (WHERE status IN ('pending', 'unknown') matches its predicate, so settled
// rows — the vast majority after a while — are never read), rejects through rejected_messages_received,
// the outbox through outcome_events_unpublished, the inbox through its partial indexes (inbox-store.ts).
import { countExpiringAuthorizations, DEFAULT_AUTHORIZATION_VALIDITY_MS } from '../payments/authorization-expiry.ts';
import type { Db } from '../payments/db.ts';
import { inboxGauges, type InboxGauges } from '../payments/inbox-store.ts';
import { countOpenOperations, countRecentRemedies } from '../payments/operations-store.ts';
import { countRecentRejects } from '../payments/rejected-store.ts';
import { watchGauges } from '../payments/watch-store.ts';
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
  /** Re-issued operations still under watch (watch.ts). */
  readonly openWatches: number;
  /** Findings the watch made that nobody resolved yet: a second Refund, a late charge it could not remedy, a watch that could not look. */
  readonly openWatchFindings: number;
  /** Manual-capture authorizations that expire at Stripe within a day with no capture or cancel (authorization-expiry.ts). */
  readonly authorizationsExpiringSoon: number;
  /** The Stripe event inbox's gauges; null when the run does not work the inbox (not read, not published). */
  readonly inbox: InboxGauges | null;
}

/** How far ahead an expiring authorization is counted: a day, time enough to capture or cancel it. */
export const AUTHORIZATION_EXPIRY_WARNING_MS = 24 * 3_600_000;

export async function collectGauges(
  db: Db,
  rejectedWindowSeconds: number,
  options: { readonly inbox?: boolean; readonly authorizationValidityMs?: number } = {},
): Promise<ReconcileGauges> {
  const [open, rejectedLastPeriod, remedied, outbox, inbox, watch, expiring] = await Promise.all([
    countOpenOperations(db),
    countRecentRejects(db, rejectedWindowSeconds),
    countRecentRemedies(db, rejectedWindowSeconds),
    outboxGauges(db),
    options.inbox ? inboxGauges(db) : null,
    watchGauges(db),
    countExpiringAuthorizations(db, options.authorizationValidityMs ?? DEFAULT_AUTHORIZATION_VALIDITY_MS, AUTHORIZATION_EXPIRY_WARNING_MS),
  ]);
  return {
    ...open,
    rejectedLastPeriod,
    duplicateChargesRemediedLastPeriod: remedied,
    unpublishedEvents: outbox.unpublished,
    oldestUnpublishedEventAgeSeconds: Math.round(outbox.oldestUnpublishedAgeSeconds),
    ...watch,
    authorizationsExpiringSoon: expiring,
    inbox,
  };
}
