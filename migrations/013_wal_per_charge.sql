-- Fewer bytes of WAL per charge, every guarantee kept (docs/decisions.md, "WAL per charge").
--
-- Measured with `npm run bench:peers -- --clean-only --contestants ours --latency 0`, which breaks a
-- charge's WAL down per table and index (pg_walinspect): an index entry costs 64–80 bytes of WAL each
-- time a row is inserted or moved by an update that cannot stay on its page, and a row moved to another
-- page is written again whole. Two of the indexes only repeated another one, and the tables were packed
-- so full that every update of a row moved it.

-- The audit trail is read by operation only, in order (a trail, the trails of a batch): one index,
-- (operation_id, id), serves every read and is its primary key. The identity column stays unique by
-- construction; the index on id alone was written three times per charge and read by nothing.
CREATE UNIQUE INDEX payment_operation_events_operation_id ON payment_operation_events (operation_id, id);
ALTER TABLE payment_operation_events DROP CONSTRAINT payment_operation_events_pkey;
ALTER TABLE payment_operation_events ADD CONSTRAINT payment_operation_events_pkey PRIMARY KEY USING INDEX payment_operation_events_operation_id;
DROP INDEX payment_operation_events_by_operation;

-- The outbox by operation: one unique index on (operation, event number) replaces the plain index on
-- operation_id and the partial unique one on the number (rows from before event numbers have none, and
-- NULLs do not collide), keeping the name a refused duplicate is reported under.
CREATE UNIQUE INDEX outcome_events_operation_sequence_all ON outcome_events (operation_id, ((payload ->> 'sequence')::int));
DROP INDEX outcome_events_operation_sequence;
DROP INDEX outcome_events_by_operation;
ALTER INDEX outcome_events_operation_sequence_all RENAME TO outcome_events_operation_sequence;

-- Room on each page for a row's later versions: an update that finds room on the row's own page is
-- written as the changed bytes only, and, when no indexed column changed, adds no index entries (a HOT
-- update). Applies to pages filled from now on; no rewrite of what is there.
ALTER TABLE payment_operations SET (fillfactor = 70);
ALTER TABLE outcome_events SET (fillfactor = 70);
