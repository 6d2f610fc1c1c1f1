-- Authorize now, capture later (docs/model.md#manual-capture, docs/decisions.md "manual capture").
--
-- Stripe: a PaymentIntent created with `capture_method=manual` and confirmed ends `requires_capture`:
-- the card is authorized, nothing is captured; POST /v1/payment_intents/:id/capture captures all or
-- part of it (`amount_to_capture`; the rest is released) and POST …/cancel releases it all
-- (docs.stripe.com/payments/place-a-hold-on-a-payment-method). An uncaptured card authorization
-- lasts 7 days for most cards; then Stripe cancels the PaymentIntent itself.
--
--   capture_method   'manual' on a charge operation that only authorizes; NULL: captured at once
--                    (every charge before this migration). A parameter of the order: never changes.
--   kind             + 'capture' and 'cancel_authorization': what settles an authorization. Each is
--                    a row pointing at its charge (parent_operation_id), like a refund; its amount is
--                    what it captures (at most the authorized amount) or releases (all of it).
--
-- Rules, here as in the code (lambdas/payments/authorization-requests.ts), so no writer can break them:
--   * at most ONE capture or cancel per authorization (a partial unique index): a capture after a
--     cancel, a second capture, a cancel after a capture are refused — by Stripe too, which answers
--     `payment_intent_unexpected_state`;
--   * only of the order's own charge, only of a manual one, never of a failed one, never more than
--     authorized, in its currency, on its account (copied, as 018 does for refunds);
--   * an expiry is recorded by the reconciler as the authorization's cancel (`cancellation_reason`
--     'expired'), inserted final, once it has read the canceled PaymentIntent with our key;
--   * a refund of a manual charge is made only after its capture succeeded, and at most what was
--     captured (the refund insert rules of 009, restated below with that one change).

ALTER TABLE payment_operations
  ADD COLUMN capture_method text CHECK (capture_method IN ('manual')),
  ADD COLUMN cancellation_reason text CHECK (cancellation_reason IN ('expired'));

ALTER TABLE payment_operations ADD CONSTRAINT capture_method_is_a_charge_s CHECK (capture_method IS NULL OR kind = 'charge');
ALTER TABLE payment_operations ADD CONSTRAINT cancellation_reason_is_a_cancel_s CHECK (cancellation_reason IS NULL OR kind = 'cancel_authorization');

-- The kind CHECK, widened (read back from the catalog, keeping what is there).
CREATE FUNCTION pg_temp.widen_in_check_019(tbl regclass, col text, additions text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  con record;
  allowed text[];
BEGIN
  SELECT c.conname, pg_get_constraintdef(c.oid) AS def INTO con
    FROM pg_constraint c
    JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
   WHERE c.conrelid = tbl AND c.contype = 'c' AND a.attname = col AND cardinality(c.conkey) = 1
     AND pg_get_constraintdef(c.oid) NOT LIKE '%IS NULL%';
  IF con IS NULL THEN
    RAISE EXCEPTION 'no CHECK constraint on %.%', tbl, col;
  END IF;
  SELECT array_agg(DISTINCT w ORDER BY w) INTO allowed
    FROM (SELECT w FROM (SELECT (regexp_matches(con.def, '''([^'']*)''', 'g'))[1] AS v) m,
                 LATERAL unnest(CASE WHEN v LIKE '{%}' THEN v::text[] ELSE ARRAY[v] END) AS w
          UNION SELECT unnest(additions)) x;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', tbl, con.conname);
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (ARRAY[%s]::text[]))', tbl, con.conname, col,
    (SELECT string_agg(quote_literal(v), ', ' ORDER BY v) FROM unnest(allowed) v));
END $$;

SELECT pg_temp.widen_in_check_019('payment_operations', 'kind', ARRAY['capture', 'cancel_authorization']);
SELECT pg_temp.widen_in_check_019('outcome_events', 'event_type', ARRAY[
  'Charge Authorized', 'Charge Captured', 'Charge Capture Failed', 'Charge Capture Needs Review', 'Charge Capture Reissued',
  'Authorization Canceled', 'Authorization Cancel Failed', 'Authorization Cancel Needs Review', 'Authorization Cancel Reissued',
  'Authorization Expired']);
SELECT pg_temp.widen_in_check_019('rejected_messages', 'reason_code', ARRAY['authorization_rejected', 'authorization_conflict']);
SELECT pg_temp.widen_in_check_019('payment_operation_events', 'step', ARRAY['expiry']);
DROP FUNCTION pg_temp.widen_in_check_019(regclass, text, text[]);

-- One capture or cancel per authorization, found by its charge.
CREATE UNIQUE INDEX payment_operations_one_settlement_per_authorization ON payment_operations (parent_operation_id)
  WHERE kind IN ('capture', 'cancel_authorization');

-- The authorizations the reconciler watches for expiry: final manual charges (few, and they leave
-- the index never — the settlement row is the other side, found by the unique index above).
CREATE INDEX payment_operations_authorizations ON payment_operations (first_attempted_at)
  WHERE capture_method = 'manual' AND status = 'succeeded';

CREATE FUNCTION payment_operations_authorization_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  charge record;
BEGIN
  SELECT id, order_id, kind, amount, currency, status, capture_method, stripe_account INTO charge
    FROM payment_operations WHERE id = NEW.parent_operation_id FOR UPDATE;
  IF charge.id IS NULL OR charge.kind <> 'charge' OR charge.order_id <> NEW.order_id OR NEW.currency <> charge.currency THEN
    RAISE EXCEPTION '% of order % must belong to the order''s charge operation', NEW.kind, NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'settles_its_authorization';
  END IF;
  IF charge.capture_method IS DISTINCT FROM 'manual' THEN
    RAISE EXCEPTION '% of order %: the charge was captured at once, there is no authorization to settle', NEW.kind, NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'settles_an_authorization';
  END IF;
  IF charge.status = 'failed' THEN
    RAISE EXCEPTION '% of order %: the authorization failed, there is nothing to settle', NEW.kind, NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'settles_an_authorization';
  END IF;
  IF NEW.kind = 'capture' AND NEW.amount > charge.amount THEN
    RAISE EXCEPTION 'capture of order % (%) would exceed the authorization (%)', NEW.order_id, NEW.amount, charge.amount
      USING ERRCODE = 'check_violation', CONSTRAINT = 'capture_within_authorization';
  END IF;
  IF NEW.kind = 'cancel_authorization' AND NEW.amount <> charge.amount THEN
    RAISE EXCEPTION 'cancel of order % releases the whole authorization (%), not %', NEW.order_id, charge.amount, NEW.amount
      USING ERRCODE = 'check_violation', CONSTRAINT = 'capture_within_authorization';
  END IF;
  -- An expiry is recorded only as what the reconciler read: final, with the PaymentIntent.
  IF NEW.cancellation_reason = 'expired' AND (NEW.status <> 'succeeded' OR NEW.external_id IS NULL) THEN
    RAISE EXCEPTION 'the expiry of order %''s authorization is recorded final, with its PaymentIntent', NEW.order_id
      USING ERRCODE = 'check_violation', CONSTRAINT = 'settles_its_authorization';
  END IF;
  NEW.stripe_account := charge.stripe_account;
  RETURN NEW;
END $$;

CREATE TRIGGER payment_operations_authorization_rules
  BEFORE INSERT ON payment_operations
  FOR EACH ROW WHEN (NEW.kind IN ('capture', 'cancel_authorization'))
  EXECUTE FUNCTION payment_operations_authorization_rules();

-- capture_method and cancellation_reason are parameters: the guard of 018 compares a fixed list of
-- columns on open rows, so these two are kept by a trigger of their own rather than a fourth
-- restatement of that function.
CREATE FUNCTION payment_operations_capture_parameters_kept() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF (NEW.capture_method, NEW.cancellation_reason) IS DISTINCT FROM (OLD.capture_method, OLD.cancellation_reason) THEN
    RAISE EXCEPTION 'the capture parameters of payment operation % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

-- Named to fire after 018's guard (triggers fire in name order), whose refusal of a final row comes first.
CREATE TRIGGER payment_operations_keep_capture_parameters
  BEFORE UPDATE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_capture_parameters_kept();

-- 009's refund insert rules, with one change: a manual charge is refundable only once captured, and
-- only up to what its capture took (the rest of the authorization was released, not charged).
CREATE OR REPLACE FUNCTION payment_operations_refund_rules() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  charge record;
  held bigint;
  bound bigint;
BEGIN
  SELECT id, order_id, kind, amount, currency, status, capture_method INTO charge
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
  bound := charge.amount;
  IF charge.capture_method = 'manual' THEN
    SELECT c.amount INTO bound FROM payment_operations c
     WHERE c.parent_operation_id = charge.id AND c.kind = 'capture' AND c.status = 'succeeded';
    IF bound IS NULL THEN
      RAISE EXCEPTION 'refund % of order %: the authorization is not captured; cancel it instead', NEW.refund_id, NEW.order_id
        USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_of_uncaptured_authorization';
    END IF;
  END IF;
  IF NEW.refund_payment_intent IS NOT NULL THEN
    RETURN NEW;
  END IF;
  SELECT coalesce(sum(amount), 0) INTO held
    FROM payment_operations
   WHERE parent_operation_id = charge.id AND kind = 'refund' AND status <> 'failed' AND refund_payment_intent IS NULL
     AND failed_after_success_at IS NULL;
  IF held + NEW.amount > bound THEN
    RAISE EXCEPTION 'refund % of order % (%) with % already refunded or in flight would exceed the charge (%)',
      NEW.refund_id, NEW.order_id, NEW.amount, held, bound
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refunds_within_charge';
  END IF;
  RETURN NEW;
END $$;
