-- The charge path finds its rows by key (docs/decisions.md, 2026-12-03, "The charge path looks its
-- rows up one by one by key …"). Two checks that run for every charge, made cheaper without changing
-- what they refuse, and a way for a statement to tell the planner how large its batch is:
--
-- 1. payment_operation_exists (024), the check that an audit line's or outbox row's operation exists,
--    looked the statement's ids up with `count(*) … WHERE id = ANY (ids)`. PL/pgSQL keeps that
--    query's plan for the session, and a plan made while payment_operations was small is a scan of
--    every operation, kept as the table grows until its statistics change: seen at 5.8 ms for a
--    statement of 10 rows over 1,150 operations in bench:peers, where ten probes take hundredths of
--    a millisecond. Now each row of the statement is looked up by primary key: a LATERAL subquery
--    with LIMIT 1 runs once per row, and for one row the index is the plan on any table of more
--    than a few pages. Measured in bench:peers (2,000 orders, 0 ms): 0.23 → 0.06 ms per statement.
-- 2. payment_operations_guard (018) asked lifecycle_may('erasure') — a query — before anything else,
--    on every update of every operation. The erasure it allows applies only to a final row that is
--    being marked erased, so those tests come first; what is refused and the messages are unchanged.
--
-- Catalog changes only (CREATE [OR REPLACE] FUNCTION); the triggers that call them are untouched.

-- 3. batch_elements: the elements of a JSON array, for a statement that takes a batch as one jsonb
--    parameter. jsonb_to_recordset is planned as 100 rows; a batch is at most ten (an SQS batch). With
--    100, a lookup of each row by key (100 probes) looked dearer than reading a table of a few
--    thousand rows whole; with 10 it does not. The function is not inlined (it has a SET clause), so
--    the planner keeps its ROWS.
CREATE FUNCTION batch_elements(batch jsonb) RETURNS SETOF jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE ROWS 10
SET search_path = pg_catalog
AS $$ SELECT jsonb_array_elements(batch) $$;

CREATE OR REPLACE FUNCTION payment_operation_exists() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  missing uuid;
BEGIN
  SELECT n.operation_id INTO missing
    FROM new_rows n
    LEFT JOIN LATERAL (SELECT true AS found FROM payment_operations p WHERE p.id = n.operation_id LIMIT 1) p ON true
   WHERE p.found IS NULL
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  RAISE EXCEPTION 'a row inserted into % refers to payment operation %, which does not exist', TG_TABLE_NAME, missing
    USING ERRCODE = 'foreign_key_violation';
END $$;

-- 018's guard; the one change is the order of the erasure test's first conditions.
CREATE OR REPLACE FUNCTION payment_operations_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- Erasure (017): a final operation's personal data, once, by the lifecycle role; nothing else moves.
  -- The row's own columns are tested before the role (lifecycle_may runs a query): an update of an
  -- open operation — every claim and every outcome — never asks.
  IF OLD.status IN ('succeeded', 'failed') AND OLD.erased_at IS NULL AND NEW.erased_at IS NOT NULL
     AND lifecycle_may('erasure')
     AND NEW.customer_id = 'erased' AND NEW.payment_method = 'erased'
     AND NEW.description IS NULL AND NEW.statement_descriptor_suffix IS NULL AND NEW.last_error IS NULL
     AND NEW.charge_metadata = '{}'::jsonb
     AND to_jsonb(NEW) - 'erased_at' - 'customer_id' - 'payment_method' - 'description' - 'statement_descriptor_suffix' - 'last_error' - 'charge_metadata'
       = to_jsonb(OLD) - 'erased_at' - 'customer_id' - 'payment_method' - 'description' - 'statement_descriptor_suffix' - 'last_error' - 'charge_metadata' THEN
    RETURN NEW;
  END IF;
  IF OLD.failed_after_success_at IS NOT NULL
     AND (NEW.failed_after_success_at, NEW.failed_after_success_reason)
         IS DISTINCT FROM (OLD.failed_after_success_at, OLD.failed_after_success_reason) THEN
    RAISE EXCEPTION 'payment operation % is marked failed after success at Stripe; the mark is never changed or cleared', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.status IN ('succeeded', 'failed') THEN
    IF OLD.kind = 'refund' AND OLD.status = 'succeeded' AND OLD.failed_after_success_at IS NULL
       AND NEW.failed_after_success_at IS NOT NULL
       AND to_jsonb(NEW) - 'failed_after_success_at' - 'failed_after_success_reason'
         = to_jsonb(OLD) - 'failed_after_success_at' - 'failed_after_success_reason' THEN
      RETURN NEW;
    END IF;
    RAISE EXCEPTION 'payment operation % is final (%) and cannot change', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  -- Only the erasure sets erased_at, on a final row (which the block above then keeps as it is, but
  -- for a refund's failed-after-success mark): an open operation is never marked erased.
  IF NEW.erased_at IS NOT NULL THEN
    RAISE EXCEPTION 'payment operation % is open (%); only a final operation can be erased', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.order_id, NEW.kind, NEW.amount, NEW.currency, NEW.customer_id, NEW.payment_method,
      NEW.stripe_account, NEW.application_fee_amount, NEW.transfer_destination)
     IS DISTINCT FROM
     (OLD.order_id, OLD.kind, OLD.amount, OLD.currency, OLD.customer_id, OLD.payment_method,
      OLD.stripe_account, OLD.application_fee_amount, OLD.transfer_destination) THEN
    RAISE EXCEPTION 'the parameters of payment operation % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.refund_id, NEW.parent_operation_id, NEW.refund_reason, NEW.refund_payment_intent,
      NEW.description, NEW.statement_descriptor_suffix, NEW.charge_metadata)
     IS DISTINCT FROM (OLD.refund_id, OLD.parent_operation_id, OLD.refund_reason, OLD.refund_payment_intent,
      OLD.description, OLD.statement_descriptor_suffix, OLD.charge_metadata) THEN
    RAISE EXCEPTION 'the refund parameters of payment operation % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF NEW.failed_after_success_at IS NOT NULL OR NEW.failed_after_success_reason IS NOT NULL THEN
    RAISE EXCEPTION 'payment operation % is open (%); only a final succeeded refund can be marked failed after success', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;
