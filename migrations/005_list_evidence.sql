-- List evidence and automatic re-issue (docs/model.md "Evidence").
--
-- The audit trail learns one step and one action, and the outbox one event type:
--   step   'list'           GET /v1/payment_intents?customer=…&created[gte]=…&created[lte]=…, every page.
--                          Its outcome_recorded row is the evidence: the window, pages, Stripe request
--                          ids, and — when nothing matched — `absenceProven` at the claim's time. The
--                          engine's "may re-issue now?" is computed from these rows, never stored apart.
--   action 'auto_reissued' the engine's own re-issue under key_generation + 1, after absence was proven
--                          twice (the operator's is 'operator_reissued'; same SQL, same rules).
--   event  'Charge Reissued' announces it (consumers see the order is still being charged, on a new key).
--
-- Other migrations may widen the same CHECK lists (the column CHECKs of 001/002): instead of
-- restating a whole list — which would silently drop values another migration added — each list is
-- read back from the catalog and re-created with the new values added.

CREATE FUNCTION pg_temp.widen_in_check(tbl regclass, col text, additions text[]) RETURNS void
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
  SELECT array_agg(DISTINCT v ORDER BY v) INTO allowed
    FROM (SELECT (regexp_matches(con.def, '''([^'']*)''', 'g'))[1] AS v UNION SELECT unnest(additions)) x;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, con.conname);
  -- Written back as ARRAY['a', 'b', …] — one quoted literal per value, the form the reader above
  -- parses — not as the single literal '{a,b,…}'::text[], which a later widening would read as one value.
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (ARRAY[%s]::text[]))', tbl, con.conname, col,
    (SELECT string_agg(quote_literal(v), ', ' ORDER BY v) FROM unnest(allowed) v));
END $$;

SELECT pg_temp.widen_in_check('payment_operation_events', 'step', ARRAY['list']);
SELECT pg_temp.widen_in_check('payment_operation_events', 'action', ARRAY['auto_reissued']);
SELECT pg_temp.widen_in_check('outcome_events', 'event_type', ARRAY['Charge Reissued']);
DROP FUNCTION pg_temp.widen_in_check(regclass, text, text[]);

-- The engine reads an ambiguous operation's evidence (its audit trail) at each claim; the
-- existing (operation_id, id) index already serves that read.
