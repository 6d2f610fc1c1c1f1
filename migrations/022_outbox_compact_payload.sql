-- The outbox stores what its row's own columns do not already say (docs/decisions.md, "The outbox
-- stores its payload without the row's own ids").
--
-- Every outbox payload repeated three things the row holds anyway: `eventId` (the event_id column,
-- a CHECK made them equal), `operationId` (operation_id) and `version` (1, a constant). As jsonb text
-- keys and values, with their entry headers, they were about 130 of the payload's ~410 bytes, written
-- to the heap and the WAL once per outcome. From here the stored column, `stored_payload`, holds the
-- rest, and `payload` is a virtual generated column (PostgreSQL 18: computed when read, never stored)
-- that puts the three back. jsonb keeps an object's keys in one canonical order whatever order they
-- were built in, so the payload read — and the EventBridge detail the relay sends, JSON.stringify of
-- it — is byte for byte what a full stored payload gave.
--
-- On a database that already holds rows: the column is renamed (a catalog change: the unique index on
-- the event number and the CHECK follow it, being bound to the column, not its name) and the virtual
-- column is added without a rewrite. An existing row keeps its full payload in stored_payload; the
-- virtual column then sets the three keys to the values they already have, so it reads exactly as
-- before. No row is read or rewritten; the ALTERs take a brief exclusive lock on the outbox inside
-- this migration's transaction.
--
-- Writers insert stored_payload (a virtual column takes no value); `version` is stored only if it is
-- ever other than 1, and then wins. Triggers see no virtual columns (they are NULL in NEW and OLD), so
-- the functions that read or compare the payload read stored_payload.
ALTER TABLE outcome_events RENAME COLUMN payload TO stored_payload;
ALTER TABLE outcome_events ADD COLUMN payload jsonb GENERATED ALWAYS AS (
  '{"version": 1}'::jsonb
  || stored_payload
  || ('{"eventId": "' || event_id::text || '", "operationId": "' || operation_id::text || '"}')::jsonb
) VIRTUAL;
COMMENT ON COLUMN outcome_events.stored_payload IS
  'The outcome fact as stored: the published payload (column payload) without eventId, operationId and version 1, which payload adds from the row.';
COMMENT ON COLUMN outcome_events.payload IS
  'The published payload: stored_payload with eventId (event_id), operationId (operation_id) and version (1 unless stored).';

-- The CHECK of 002 (payload_carries_event_id) now reads stored_payload: a full payload of a row from
-- before this migration must still carry its own event id; a compact one carries none (NULL passes).

-- 017's guard, with the stored column compared (the virtual one is NULL in a trigger).
CREATE OR REPLACE FUNCTION outcome_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF lifecycle_may('retention') AND OLD.published_at IS NOT NULL AND OLD.published_at < now() - interval '1 day' THEN
      RETURN OLD;
    END IF;
    RAISE EXCEPTION 'outcome_events rows are never deleted' USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.published_at IS NOT NULL THEN
    RAISE EXCEPTION 'outcome event % is already published', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.event_id, NEW.operation_id, NEW.event_type, NEW.stored_payload) IS DISTINCT FROM (OLD.event_id, OLD.operation_id, OLD.event_type, OLD.stored_payload) THEN
    RAISE EXCEPTION 'outcome event % cannot change', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

-- 009's mark, reading the stored column (failureReason is stored as it was).
CREATE OR REPLACE FUNCTION outcome_events_mark_refund_failed_after_success() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE payment_operations
     SET failed_after_success_at = NEW.created_at,
         failed_after_success_reason = nullif(left(NEW.stored_payload ->> 'failureReason', 200), '')
   WHERE id = NEW.operation_id AND kind = 'refund' AND status = 'succeeded' AND failed_after_success_at IS NULL;
  RETURN NULL;
END $$;
