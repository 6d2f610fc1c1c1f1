-- An outbox row's `occurredAt` is its own created_at, and is no longer stored twice (docs/decisions.md,
-- 2026-12-03, "An outbox row's occurredAt is read from its created_at").
--
-- Every writer of the outbox set the payload's occurredAt to now() formatted as ISO 8601 in UTC with
-- milliseconds (to_char … 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), in the statement whose transaction also
-- set created_at to now(): the same instant, written twice. As jsonb text, key and entry header, the
-- copy was about 40 of a charge's ~230 stored payload bytes, in the heap and in the WAL. From here the
-- writers leave it out, and the virtual column `payload` (migrations/022) puts it back from created_at.
--
-- A virtual column may use immutable functions only, and to_char is stable (it reads the session's
-- locale settings), so the same text is built from immutable pieces: the timestamp at time zone
-- 'UTC' (timezone(text, timestamptz), immutable), its fields by extract (immutable for a timestamp
-- without time zone), each padded with lpad. Milliseconds are truncated, as to_char's MS truncates.
-- test/outbox-occurred-at.test.ts compares the two over instants chosen to break a careless
-- formatter (the last microsecond of a year, a leap day, other zones' offsets) and a year of others.
--
-- A row that stored occurredAt keeps it: the stored payload comes after the derived key, so a stored
-- occurredAt wins, and every row written before this migration reads exactly as before.
--
-- Catalog changes only. PostgreSQL 18 refuses SET EXPRESSION on a virtual column of a table with
-- check constraints, so the column is dropped and added again with the new expression, inside this
-- migration's transaction (the ALTERs lock the outbox briefly; no reader sees it without the
-- column). A virtual column holds no data: nothing is read or rewritten. The table's grants cover
-- the new column as they covered the old one (there are no column grants on the outbox).
ALTER TABLE outcome_events DROP COLUMN payload;
ALTER TABLE outcome_events ADD COLUMN payload jsonb GENERATED ALWAYS AS (
  '{"version": 1}'::jsonb
  || ('{"occurredAt": "'
      || lpad(extract(year FROM created_at AT TIME ZONE 'UTC')::int::text, 4, '0') || '-'
      || lpad(extract(month FROM created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || '-'
      || lpad(extract(day FROM created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || 'T'
      || lpad(extract(hour FROM created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || ':'
      || lpad(extract(minute FROM created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || ':'
      || lpad(floor(extract(second FROM created_at AT TIME ZONE 'UTC'))::int::text, 2, '0') || '.'
      || lpad((floor(extract(microseconds FROM created_at AT TIME ZONE 'UTC') / 1000)::int % 1000)::text, 3, '0')
      || 'Z"}')::jsonb
  || stored_payload
  || ('{"eventId": "' || event_id::text || '", "operationId": "' || operation_id::text || '"}')::jsonb
) VIRTUAL;
COMMENT ON COLUMN outcome_events.stored_payload IS
  'The outcome fact as stored: the published payload (column payload) without eventId, operationId, version 1 and occurredAt (created_at), which payload adds from the row.';
COMMENT ON COLUMN outcome_events.payload IS
  'The published payload: stored_payload with eventId (event_id), operationId (operation_id), version (1 unless stored) and occurredAt (created_at in ISO 8601 UTC with milliseconds, unless stored).';
