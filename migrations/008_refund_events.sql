-- Refunds settled by Stripe's events (docs/decisions.md 2026-12-01): the outbox
-- learns one more FACT, `Refund Failed After Success` — a refund operation that is final `succeeded`
-- (the request executed, Stripe said succeeded) whose Refund Stripe reports failed since (a card
-- refund the issuer could not process). The operation row is final and stays so
-- (payment_operations_guard); the fact is this outbox row, its audit line ('stripe_event') and an
-- open stripe_event_findings row (kind 'contradiction', keyed by the Refund id) for the operator.
-- Widened in place from the current definition, as 006 and 007 do.
CREATE FUNCTION pg_temp.widen_in_check_008(tbl regclass, col text, additions text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  con record;
  allowed text[];
BEGIN
  SELECT c.conname, pg_get_constraintdef(c.oid) AS def INTO con
    FROM pg_constraint c
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
   WHERE c.conrelid = tbl AND c.contype = 'c' AND a.attname = col AND cardinality(c.conkey) = 1;
  IF con IS NULL THEN
    RAISE EXCEPTION 'no CHECK constraint on %.%', tbl, col;
  END IF;
  -- Either form of the list: ARRAY['a'::text, …] or the single literal '{a,"b c"}'::text[].
  SELECT array_agg(DISTINCT w ORDER BY w) INTO allowed
    FROM (SELECT w FROM (SELECT (regexp_matches(con.def, '''([^'']*)''', 'g'))[1] AS v) m,
                 LATERAL unnest(CASE WHEN v LIKE '{%}' THEN v::text[] ELSE ARRAY[v] END) AS w
          UNION SELECT unnest(additions)) x;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, con.conname);
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (%L::text[]))', tbl, con.conname, col, allowed);
END $$;

SELECT pg_temp.widen_in_check_008('outcome_events', 'event_type', ARRAY['Refund Failed After Success']);
DROP FUNCTION pg_temp.widen_in_check_008(regclass, text, text[]);
