-- Retention of the two records 017 left growing (docs/operations.md "Retention", docs/decisions.md
-- "Data lifecycle"): the operator's reads of raw bodies (operator_reads, 010) and the findings an
-- operator resolved (stripe_event_findings, 006). Removed by the reconciler's retention phase only,
-- through the SECURITY DEFINER functions below, like 017's: each sets charges.lifecycle for its own
-- statement, and the guards let through exactly its delete when both hold — the setting, and the owner
-- as current_user (lifecycle_may). Everything else they refused, they still refuse:
--
--   operator_reads         delete a row that occurred more than 365 days ago (a day below the least
--                          the setting accepts, OPERATOR_READ_RETENTION_DAYS ≥ 366: PCI DSS keeps audit
--                          log history for at least 12 months); never updated;
--   stripe_event_findings  delete a RESOLVED finding resolved more than 29 days ago (a day below
--                          RESOLVED_FINDING_RETENTION_DAYS ≥ 30); an OPEN finding is never deleted, by
--                          anyone: it is a person's work not done (its alarm gauge is up).
--
-- A finding pins its Stripe event (017's lifecycle_delete_inbox keeps a row a finding points at): once
-- the finding is gone, its reduced inbox row follows at the inbox's own bound.

-- 010's table had 001's shared append_only(); it gets a guard of its own with one exception.
CREATE FUNCTION operator_reads_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' AND lifecycle_may('retention') AND OLD.occurred_at < now() - interval '365 days' THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END $$;

DROP TRIGGER operator_reads_append_only ON operator_reads;
CREATE TRIGGER operator_reads_guard
  BEFORE UPDATE OR DELETE ON operator_reads
  FOR EACH ROW EXECUTE FUNCTION operator_reads_guard();

-- Findings had no trigger (the application role has no DELETE, 006): the owner could delete an open
-- one. Now no one can; a resolved one goes only by the retention function, past its floor. Updates
-- (the resolution, `ops findings resolve`) are not this guard's: they stay as they were.
CREATE FUNCTION stripe_event_findings_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF lifecycle_may('retention') AND OLD.resolved_at IS NOT NULL AND OLD.resolved_at < now() - interval '29 days' THEN
    RETURN OLD;
  END IF;
  IF OLD.resolved_at IS NULL THEN
    RAISE EXCEPTION 'finding % is open: an open finding is never deleted', OLD.id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RAISE EXCEPTION 'finding % is kept: resolved findings are removed by retention only', OLD.id USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER stripe_event_findings_guard
  BEFORE DELETE ON stripe_event_findings
  FOR EACH ROW EXECUTE FUNCTION stripe_event_findings_guard();

-- The rows due, oldest first, by index (both tables are small; the gauge reads one row of each).
CREATE INDEX operator_reads_occurred_at ON operator_reads (occurred_at);
CREATE INDEX stripe_event_findings_resolved ON stripe_event_findings (resolved_at) WHERE resolved_at IS NOT NULL;

-- As 017's: at most p_limit rows in ONE statement, chosen by index, oldest first, FOR UPDATE SKIP
-- LOCKED (a row another transaction holds — an operator resolving — is skipped this time, never
-- waited for); a cutoff inside the floor, or a batch outside 1-10000, is refused (lifecycle_check).
CREATE FUNCTION lifecycle_delete_operator_reads(p_occurred_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM lifecycle_check(p_occurred_before, interval '365 days', p_limit, 'operator reads');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  DELETE FROM operator_reads r
   WHERE r.id = ANY (ARRAY(
     SELECT o.id FROM operator_reads o
      WHERE o.occurred_at < p_occurred_before
      ORDER BY o.occurred_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

CREATE FUNCTION lifecycle_delete_resolved_findings(p_resolved_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM lifecycle_check(p_resolved_before, interval '29 days', p_limit, 'findings resolved');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  DELETE FROM stripe_event_findings f
   WHERE f.id = ANY (ARRAY(
     SELECT g.id FROM stripe_event_findings g
      WHERE g.resolved_at IS NOT NULL AND g.resolved_at < p_resolved_before
      ORDER BY g.resolved_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

REVOKE ALL ON FUNCTION lifecycle_delete_operator_reads(timestamptz, integer), lifecycle_delete_resolved_findings(timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lifecycle_delete_operator_reads(timestamptz, integer), lifecycle_delete_resolved_findings(timestamptz, integer) TO charges_app;
