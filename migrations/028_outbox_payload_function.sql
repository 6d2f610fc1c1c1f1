-- An outbox row's published payload is computed by a function of the row, payload(outcome_events),
-- instead of a virtual generated column (docs/decisions.md, 2026-12-03, "The outbox's published
-- payload is a function of the row, not a virtual column").
--
-- PostgreSQL 18 expands a table's virtual generated columns into every expression it compiles for a
-- statement that writes the table: each CHECK constraint, each trigger's WHEN condition, whether the
-- expression names the column or not (expand_generated_columns_in_expr). The outbox's payload (026)
-- is 16.5 KB of node text, read back and rebuilt four times for every statement that inserts an
-- outbox row and three times for every publish mark. Measured in a PL/pgSQL loop of 3,000 single-row
-- statements, triggers on: an insert 466 µs with the virtual column and 53 µs without it, a publish
-- mark 340 µs and 40 µs.
--
-- Nothing stored changes: the table keeps stored_payload, and the function builds the same jsonb from
-- it and the row's columns as 026's expression did (the expression is the same text, with `e.` before
-- each column). `e.payload` keeps working wherever the row has a name (PostgreSQL reads `e.payload`
-- as `payload(e)` when the table has no column of that name); `SELECT *` no longer includes it, and an
-- unqualified `payload` names nothing. Every reader in this repository names the row.
--
-- The function is written as an SQL-standard body (RETURN …), so its references are resolved when it
-- is created, not at every call through search_path, and PostgreSQL records its dependence on each
-- column it reads: dropping or retyping one of them is refused while the function exists. It is
-- IMMUTABLE, as the virtual column's expression had to be (timezone(text, timestamptz) and extract
-- from a timestamp without time zone are immutable; to_char is not).
--
-- Catalog changes only: a virtual column holds no data, so dropping it reads and rewrites nothing.
-- EXECUTE is PUBLIC's, as for every function that only computes (no table is read).
ALTER TABLE outcome_events DROP COLUMN payload;

CREATE FUNCTION payload(e outcome_events) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN '{"version": 1}'::jsonb
  || ('{"occurredAt": "'
      || lpad(extract(year FROM e.created_at AT TIME ZONE 'UTC')::int::text, 4, '0') || '-'
      || lpad(extract(month FROM e.created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || '-'
      || lpad(extract(day FROM e.created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || 'T'
      || lpad(extract(hour FROM e.created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || ':'
      || lpad(extract(minute FROM e.created_at AT TIME ZONE 'UTC')::int::text, 2, '0') || ':'
      || lpad(floor(extract(second FROM e.created_at AT TIME ZONE 'UTC'))::int::text, 2, '0') || '.'
      || lpad((floor(extract(microseconds FROM e.created_at AT TIME ZONE 'UTC') / 1000)::int % 1000)::text, 3, '0')
      || 'Z"}')::jsonb
  || e.stored_payload
  || ('{"eventId": "' || e.event_id::text || '", "operationId": "' || e.operation_id::text || '"}')::jsonb;

COMMENT ON FUNCTION payload(outcome_events) IS
  'The published payload of an outbox row (read as e.payload): stored_payload with eventId (event_id), operationId (operation_id), version (1 unless stored) and occurredAt (created_at in ISO 8601 UTC with milliseconds, unless stored).';
COMMENT ON COLUMN outcome_events.stored_payload IS
  'The outcome fact as stored: the published payload (payload(outcome_events), read as e.payload) without eventId, operationId, version 1 and occurredAt (created_at), which the function adds from the row.';
