// "The newest sequence per operation wins": the order key of an event, and the rule for events that
// carry no sequence.
//
// Producers number each operation's events (detail.sequence, strictly increasing per operation).
// An event is APPLIED (its effect runs) only if its key is above the newest key already applied for
// its operation; an older one arriving later is recorded as `stale` and acknowledged. Re-deliveries
// of the applied event have an equal key and are deduplicated by the inbox, not by this rule.
//
// Events without a sequence (published before migrations/004_event_sequence.sql numbered them, or
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
export const UNNUMBERED = -1;

export function orderKey(sequence: number | null): number {
  return sequence ?? UNNUMBERED;
}
