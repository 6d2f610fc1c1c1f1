-- Refunds: a second operation kind on the same table, the same engine and the same audit trail
-- (docs/model.md "Refunds"). A refund operation is a row with kind = 'refund' that points
-- at its order's charge operation; its key is `payment-op:{id}` like a charge's, its Stripe object a
-- Refund (re_…) in external_id.
--
-- The rules the code enforces are enforced here too, so that no writer — a bug, an operator's psql —
-- can break them:
--   * one charge operation per order; one refund operation per (order_id, refund_id);
--   * a refund belongs to its order's charge operation (same order, same currency);
--   * a refund is never created for a charge that failed;
--   * the refunds of a charge that are not failed never add up to more than its amount — concurrent
--     inserts included: the insert trigger locks the charge's row (FOR UPDATE) before it sums, so two
--     refunds of one order are judged one after the other, each seeing the other's committed row
--     (READ COMMITTED: every statement of a plpgsql function takes a fresh snapshot);
--   * a refund's own parameters (refund id, charge, reason) never change, like a charge's.
-- The waiting rule — a refund is not sent before its charge is final — lives in the claim
-- (operations-store.ts CLAIMABLE): a refund of an open charge is simply not claimable yet.

ALTER TABLE payment_operations
  ADD COLUMN refund_id           text CHECK (refund_id IS NULL OR refund_id ~ '^[\x21-\x7e]{1,128}$'),
  ADD COLUMN parent_operation_id uuid REFERENCES payment_operations (id),
  ADD COLUMN refund_reason       text CHECK (refund_reason IS NULL OR refund_reason IN ('duplicate', 'fraudulent', 'requested_by_customer')),
  -- The duplicate-charge remedy refunds an EXTRA PaymentIntent of the order (not the one the charge
  -- operation holds): it is named here. NULL: the refund is of the charge's own PaymentIntent.
  ADD COLUMN refund_payment_intent text CHECK (refund_payment_intent IS NULL OR refund_payment_intent ~ '^pi_[A-Za-z0-9_]{1,250}$');

-- Charge parameters a producer may add (docs/producers.md): passed to Stripe, part of the order's parameters
-- (the guard below keeps them unchanged, like amount and currency). Never logged.
ALTER TABLE payment_operations
  ADD COLUMN description                 text  CHECK (description IS NULL OR char_length(description) BETWEEN 1 AND 1000),
  ADD COLUMN statement_descriptor_suffix text  CHECK (statement_descriptor_suffix IS NULL OR char_length(statement_descriptor_suffix) BETWEEN 1 AND 22),
  ADD COLUMN charge_metadata             jsonb NOT NULL DEFAULT '{}'::jsonb CHECK (jsonb_typeof(charge_metadata) = 'object');

-- The kind CHECK of 001, widened (read back from the catalog, as 005 does for its lists).
DO $$
DECLARE
  con text;
BEGIN
  SELECT c.conname INTO con
    FROM pg_constraint c JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
   WHERE c.conrelid = 'payment_operations'::regclass AND c.contype = 'c' AND a.attname = 'kind' AND cardinality(c.conkey) = 1;
  IF con IS NOT NULL THEN
    EXECUTE format('ALTER TABLE payment_operations DROP CONSTRAINT %I', con);
  END IF;
END $$;
ALTER TABLE payment_operations ADD CONSTRAINT payment_operations_kind_check CHECK (kind IN ('charge', 'refund'));

ALTER TABLE payment_operations ADD CONSTRAINT refund_has_its_identity CHECK (
  (kind = 'refund') = (refund_id IS NOT NULL AND parent_operation_id IS NOT NULL));

-- (order_id, kind) was the business identity while there was one kind; now a charge is one per
-- order and a refund one per (order, refund id).
ALTER TABLE payment_operations DROP CONSTRAINT payment_operations_order_kind_key;
CREATE UNIQUE INDEX payment_operations_one_charge_per_order ON payment_operations (order_id) WHERE kind = 'charge';
CREATE UNIQUE INDEX payment_operations_one_refund_per_id ON payment_operations (order_id, refund_id) WHERE kind = 'refund';
-- An extra PaymentIntent is refunded by one remedy operation, however often the evidence arrives.
CREATE UNIQUE INDEX payment_operations_one_remedy_per_payment_intent ON payment_operations (refund_payment_intent) WHERE refund_payment_intent IS NOT NULL;
ALTER TABLE payment_operations ADD CONSTRAINT remedy_is_a_duplicate_refund CHECK (
  refund_payment_intent IS NULL OR (kind = 'refund' AND refund_reason = 'duplicate'));
CREATE INDEX payment_operations_refunds_of ON payment_operations (parent_operation_id) WHERE kind = 'refund';

CREATE FUNCTION payment_operations_refund_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  charge record;
  held bigint;
BEGIN
  SELECT id, order_id, kind, amount, currency, status INTO charge
    FROM payment_operations WHERE id = NEW.parent_operation_id FOR UPDATE;
  IF charge.id IS NULL OR charge.kind <> 'charge' OR charge.order_id <> NEW.order_id THEN
    RAISE EXCEPTION 'refund % of order % must belong to the order''s charge operation', NEW.refund_id, NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_of_its_charge';
  END IF;
  IF NEW.currency <> charge.currency THEN
    RAISE EXCEPTION 'refund % is in %, its charge in %', NEW.refund_id, NEW.currency, charge.currency
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_of_its_charge';
  END IF;
  IF charge.status = 'failed' THEN
    RAISE EXCEPTION 'refund % of order %: the charge failed, there is nothing to refund', NEW.refund_id, NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_of_failed_charge';
  END IF;
  -- A remedy refunds another PaymentIntent (its own amount, Stripe's bound): not counted here.
  IF NEW.refund_payment_intent IS NOT NULL THEN
    RETURN NEW;
  END IF;
  SELECT coalesce(sum(amount), 0) INTO held
    FROM payment_operations
   WHERE parent_operation_id = charge.id AND kind = 'refund' AND status <> 'failed' AND refund_payment_intent IS NULL;
  IF held + NEW.amount > charge.amount THEN
    RAISE EXCEPTION 'refund % of order % (%) with % already refunded or in flight would exceed the charge (%)',
      NEW.refund_id, NEW.order_id, NEW.amount, held, charge.amount
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refunds_within_charge';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER payment_operations_refund_rules
  BEFORE INSERT ON payment_operations
  FOR EACH ROW WHEN (NEW.kind = 'refund') EXECUTE FUNCTION payment_operations_refund_rules();

CREATE FUNCTION payment_operations_refund_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.refund_id, NEW.parent_operation_id, NEW.refund_reason, NEW.refund_payment_intent,
      NEW.description, NEW.statement_descriptor_suffix, NEW.charge_metadata)
     IS DISTINCT FROM (OLD.refund_id, OLD.parent_operation_id, OLD.refund_reason, OLD.refund_payment_intent,
      OLD.description, OLD.statement_descriptor_suffix, OLD.charge_metadata) THEN
    RAISE EXCEPTION 'the refund parameters of payment operation % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER payment_operations_refund_guard
  BEFORE UPDATE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_refund_guard();

-- The audit trail learns the step of a refund settled without a Stripe call (its charge failed),
-- rejected_messages the refund reasons, and the outbox the refund events.
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
  -- The list is either 001's form (ARRAY['a'::text, …]) or the form 005 re-created it in
  -- ('{a,b}'::text[]): a quoted literal that is an array literal is read as one.
  SELECT array_agg(DISTINCT w ORDER BY w) INTO allowed
    FROM (SELECT w FROM (SELECT (regexp_matches(con.def, '''([^'']*)''', 'g'))[1] AS v) m,
                 LATERAL unnest(CASE WHEN v LIKE '{%}' THEN v::text[] ELSE ARRAY[v] END) AS w
          UNION SELECT unnest(additions)) x;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, con.conname);
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (%L::text[]))', tbl, con.conname, col, allowed);
END $$;

SELECT pg_temp.widen_in_check('payment_operation_events', 'step', ARRAY['precondition']);
-- A refund request that makes no refund operation is acknowledged and kept whole, with its reason:
-- refund_conflict (the refund id exists with another amount or reason), refund_rejected (no charge,
-- the charge failed, or more than was charged).
SELECT pg_temp.widen_in_check('rejected_messages', 'reason_code', ARRAY['refund_conflict', 'refund_rejected']);
SELECT pg_temp.widen_in_check('outcome_events', 'event_type', ARRAY['Refund Succeeded', 'Refund Failed', 'Refund Needs Review', 'Refund Reissued', 'Charge Duplicate Refunded']);
DROP FUNCTION pg_temp.widen_in_check(regclass, text, text[]);
