-- The operation's two update guards fire after the row is written, not before (docs/decisions.md,
-- "The operation's update guards fire after the update").
--
-- A BEFORE UPDATE row trigger makes PostgreSQL lock the row before the trigger is called (so that
-- the trigger is shown the version it is about to replace). The lock is a WAL record of its own, on
-- every update of the table, whatever the trigger decides: one LOCK per charge (the outcome write),
-- 55 of the ~2,510 bytes of WAL a charge wrote (`npm run bench:peers -- --clean-only --contestants
-- ours --latency 0`, WAL by record type with BENCH_WAL_BY_TYPE=1). Any BEFORE UPDATE row trigger
-- costs it, so both guards move, as 021 moved the outbox's.
--
-- Neither guard changes NEW: each lets the row through or raises. Raised from an AFTER row trigger,
-- the same error aborts the same statement, and the update never commits. What changes is which
-- refusal a caller sees when a change breaks a CHECK constraint of the table as well: the CHECK is
-- tested when the row is written, so it answers first. The tests that try the guard on every column
-- lift the table's CHECK and foreign-key constraints in a rolled-back transaction, so that the guard
-- is still seen refusing each column (test/migrations.test.ts).
--
-- The names are kept, and AFTER triggers fire in name order as BEFORE ones did: the guard's refusal
-- of a final row still comes before the capture parameters' (019).
--
-- Catalog changes only (no row is read or rewritten). DROP and CREATE TRIGGER take a brief lock on
-- the table inside this migration's transaction, so no update ever runs unguarded in between.

DROP TRIGGER payment_operations_guard ON payment_operations;
CREATE TRIGGER payment_operations_guard
  AFTER UPDATE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_guard();

DROP TRIGGER payment_operations_keep_capture_parameters ON payment_operations;
CREATE TRIGGER payment_operations_keep_capture_parameters
  AFTER UPDATE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_capture_parameters_kept();
