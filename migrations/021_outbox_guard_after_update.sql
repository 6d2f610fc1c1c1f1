-- The outbox's update guard fires after the row is written, not before (docs/decisions.md, "The
-- outbox's update guard fires after the update").
--
-- A BEFORE UPDATE row trigger makes PostgreSQL lock the row before it calls the trigger (so that the
-- trigger sees the version it is about to replace), and that lock is a WAL record of its own, on every
-- update, whether the guard refuses or not. Every charge updates its outbox row once (the publish):
-- 61 bytes of the ~3,000 a charge wrote (`npm run bench:peers -- --clean-only --contestants ours
-- --latency 0`, which prints the WAL per relation; read per record type, that was one LOCK record).
--
-- The guard never changes NEW: it lets the row through unchanged or raises. Raised from an AFTER row
-- trigger, the same error aborts the same statement and the update never commits; the caller sees the
-- same message. So the guard keeps its function and only changes when it fires on an update. Its
-- delete half stays BEFORE: it decides whether a delete happens (it returns OLD), and deletes are
-- retention's, never a charge's. (The operation's update guards were measured the same way: moving
-- them wrote no less WAL, the operation's two LOCK records per charge being the foreign keys' key-share
-- locks, so they stay as they are.)
--
-- Catalog changes only (no row is read or rewritten): DROP/CREATE TRIGGER take a brief lock on the
-- outbox inside this migration's transaction, so no update ever runs unguarded in between.

DROP TRIGGER outcome_events_guard ON outcome_events;
CREATE TRIGGER outcome_events_guard
  BEFORE DELETE ON outcome_events
  FOR EACH ROW EXECUTE FUNCTION outcome_events_guard();
CREATE TRIGGER outcome_events_guard_update
  AFTER UPDATE ON outcome_events
  FOR EACH ROW EXECUTE FUNCTION outcome_events_guard();
