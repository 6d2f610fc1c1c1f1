-- Outcome events can arrive out of order: the charge handler publishes its batch's events at once
-- and the reconciler's sweep re-sends whatever was not accepted, so a "Charge Needs Review" relayed
-- late can reach a consumer after the "Charge Succeeded" an operator's resolution wrote next.
-- Every event of an operation therefore carries `sequence` (1, 2, 3 …): strictly increasing across
-- that operation's events, and consumers apply the highest they have seen (docs/events.md).
--
-- The counter lives on the operation's row and is advanced by the very UPDATE that writes the
-- outcome the event announces (recordOutcomes, resolveInReview): that UPDATE holds the row lock and
-- sees the latest committed version, so two writers can never draw the same number — a counter
-- computed from max(outcome_events) would read a snapshot taken before the lock and could.
ALTER TABLE payment_operations
  ADD COLUMN event_sequence integer NOT NULL DEFAULT 0 CHECK (event_sequence >= 0);

-- Rows written before this migration: the ones not yet published get their sequence now (in the
-- order they were written), so every event published from here on carries one. Published rows are
-- history and stay as they were sent (a consumer orders a detail without `sequence` before any
-- detail with one). The guard forbids payload changes, so it is off for this one statement only,
-- inside this migration's transaction.
ALTER TABLE outcome_events DISABLE TRIGGER outcome_events_guard;
UPDATE outcome_events e
   SET payload = e.payload || jsonb_build_object('sequence', n.seq)
  FROM (SELECT event_id, row_number() OVER (PARTITION BY operation_id ORDER BY created_at, event_id) AS seq
          FROM outcome_events) n
 WHERE e.event_id = n.event_id AND e.published_at IS NULL;
ALTER TABLE outcome_events ENABLE TRIGGER outcome_events_guard;

-- The next event of an open operation is numbered after every event it already has, published or
-- not. A final operation gets no event ever again (and its row cannot change): its counter stays 0.
UPDATE payment_operations p
   SET event_sequence = c.n
  FROM (SELECT operation_id, count(*)::int AS n FROM outcome_events GROUP BY operation_id) c
 WHERE p.id = c.operation_id AND p.status IN ('pending', 'unknown');

-- The database enforces it too: one event per (operation, sequence).
CREATE UNIQUE INDEX outcome_events_operation_sequence
  ON outcome_events (operation_id, ((payload ->> 'sequence')::int))
  WHERE payload ? 'sequence';
