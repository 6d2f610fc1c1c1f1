// "The newest sequence per operation wins": the order key of an event, the rule for events that
// carry no sequence, and which events are not ranked at all (facts, below).
//
// Producers number each operation's events (detail.sequence, strictly increasing per operation).
// An event is APPLIED (its effect runs) only if its key is above the newest key already applied for
// its operation; an older one arriving later is recorded as `stale` and acknowledged. Re-deliveries
// of the applied event have an equal key and are deduplicated by the inbox, not by this rule.
//
// State events without a sequence (published before migrations/004_event_sequence.sql numbered them, or
// replayed from the archive of that time) get the key -1:
//   - An outbox row's payload is frozen when its outcome is recorded, so an unnumbered event
//     describes a fact recorded BEFORE any numbered event of the same operation: ranking it below
//     all of them is its true order, not a guess. A late re-send of it after a numbered event has
//     been applied is therefore stale, as it should be.
//   - Among themselves, unnumbered events are not ordered (all -1): each is applied once (inbox
//     dedup by eventId). We do NOT order them by occurredAt: it is the wall clock of whichever
//     writer recorded it, not an order, and the v1 pipeline emits at most one final event per
//     operation (plus a possible Needs Review before it), so there is nothing to reorder.
//   - Treating them as poison would drop every event in flight during the upgrade: a miss the
//     at-least-once consumers exist to prevent.
import { AftermathDetailType, RefundFactDetailType } from '../../events/contract.ts';

export const UNNUMBERED = -1;

export function orderKey(sequence: number | null): number {
  return sequence ?? UNNUMBERED;
}

// ── States and facts ─────────────────────────────────────────────────────────────────────────────
// Not every outcome event is a STATE of its operation. `Charge Refunded`, `Charge Disputed` and
// `Charge Dispute Closed` (lambdas/events/contract.ts, AftermathDetailType), and `Refund Failed After
// Success` (RefundFactDetailType), are FACTS about an operation that is already final: two partial refunds are two refunds, not a newer state replacing an older
// one. They carry no sequence (the counter lives on the operation row, immutable once final), so
// ranking them like states would put them at -1, below the final state event — stale, effect never
// run: a silent miss. A fact is therefore never ranked: it neither reads nor moves its operation's
// head, is deduplicated by eventId like every event, and is applied once, whatever came before or
// after it. Told apart by detail-type (the envelope's, which the consumer's rule routes on and every
// event carries, archived ones included), not by a detail field a producer could forget to set —
// an unknown or missing marker would fall back to "state" and bring the miss back.
export type EventOrdering = 'state' | 'fact';

/** The detail-types that are facts (applied each, never superseded). Everything else is a state. */
export const FACT_DETAIL_TYPES: readonly string[] = [...Object.values(AftermathDetailType), ...Object.values(RefundFactDetailType)];

export function orderingOf(detailType: string): EventOrdering {
  return FACT_DETAIL_TYPES.includes(detailType) ? 'fact' : 'state';
}
