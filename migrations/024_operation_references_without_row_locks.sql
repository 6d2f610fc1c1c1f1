-- The audit trail's and the outbox's rows are checked against their operation by one query per
-- statement, not by a foreign key (docs/decisions.md, 2026-12-03, "… an audit or outbox row's
-- operation is checked without a row lock …").
--
-- A foreign key checks each inserted row by locking the row it refers to (SELECT … FOR KEY SHARE), so
-- that no one deletes it or changes its key before the insert commits. That lock is a WAL record
-- (54 bytes) on the operation's row: one per charge, measured per record type with pg_walinspect
-- (`BENCH_WAL_BY_TYPE=1 npm run bench:peers -- --clean-only --contestants ours --latency 0`), and one
-- for every audit line or outbox row written for an operation outside an update of it (a watch's look,
-- an operator's note). Here it protects against nothing: an operation is never deleted (payment_operations_no_delete refuses every delete, since
-- 001) and, from this migration on, its id never changes (payment_operations_id_fixed). What the key
-- still gave is the check itself — no line or outbox row for an operation that does not exist — and
-- that is kept: after every INSERT statement into either table, one query over the statement's new
-- rows refuses the whole statement if any of them names an operation that does not exist, with the
-- SQLSTATE a foreign key raises (23503). The query sees what the inserting transaction sees, so an
-- operation inserted by the same statement (a charge's request and its audit lines are one statement)
-- or earlier in the same transaction counts.
--
-- The other foreign keys to payment_operations (Stripe events, findings, watches, rejected messages,
-- a refund's parent) stay: none of them is written by a charge.
--
-- On a live database: dropping the two constraints and creating three triggers are catalog changes;
-- the ALTERs lock the two tables briefly inside this migration's transaction, so no insert runs
-- unchecked in between. The rows already there were checked by the keys they were written under.

-- The statement's operation ids as an array, looked up by the primary key (`id = ANY`: an index probe
-- per id whatever the table's size or the statement's row count; a join with the transition table
-- could be planned as a scan of every operation). Only when one is missing are they probed one by one,
-- to name it.
CREATE FUNCTION payment_operation_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  ids uuid[] := ARRAY(SELECT DISTINCT operation_id FROM new_rows);
  missing uuid;
BEGIN
  IF (SELECT count(*) FROM payment_operations p WHERE p.id = ANY (ids)) = cardinality(ids) THEN
    RETURN NULL;
  END IF;
  SELECT u.id INTO missing FROM unnest(ids) AS u(id)
   WHERE NOT EXISTS (SELECT 1 FROM payment_operations p WHERE p.id = u.id) LIMIT 1;
  RAISE EXCEPTION 'a row inserted into % refers to payment operation %, which does not exist', TG_TABLE_NAME, missing
    USING ERRCODE = 'foreign_key_violation';
END $$;

ALTER TABLE payment_operation_events DROP CONSTRAINT payment_operation_events_operation_id_fkey;
CREATE TRIGGER payment_operation_events_operation_exists
  AFTER INSERT ON payment_operation_events
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION payment_operation_exists();

-- An outbox row's operation_id never changes after insert (outcome_events_guard), so inserts are all
-- there is to check.
ALTER TABLE outcome_events DROP CONSTRAINT outcome_events_operation_id_fkey;
CREATE TRIGGER outcome_events_operation_exists
  AFTER INSERT ON outcome_events
  REFERENCING NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION payment_operation_exists();

-- What the keys also refused: changing the id of an operation that has audit lines or outbox rows.
-- Nothing changes an id; now nothing can. Fires only for an UPDATE that sets id (UPDATE OF id), after
-- the row is written, so every other update costs nothing (an AFTER trigger takes no row lock).
CREATE FUNCTION payment_operations_id_fixed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'the id of payment operation % cannot change', OLD.id USING ERRCODE = 'integrity_constraint_violation';
END $$;
CREATE TRIGGER payment_operations_id_fixed
  AFTER UPDATE OF id ON payment_operations
  FOR EACH ROW WHEN (NEW.id IS DISTINCT FROM OLD.id) EXECUTE FUNCTION payment_operations_id_fixed();
