-- A refund Stripe failed after it succeeded gives its amount back to the order (docs/decisions.md
-- 2026-12-01 "a refund Stripe failed after it succeeded is refundable again").
--
-- Stripe: a card refund can fail after it said `succeeded` (the issuer could not process it); the
-- Refund becomes `failed` with a `failure_reason`, and its `failure_balance_transaction` "reverses the
-- initial balance transaction" — the money is back in the merchant's balance and the customer was NOT
-- refunded (https://docs.stripe.com/refunds, "Failed refunds"; https://docs.stripe.com/api/refunds/object,
-- failure_reason and failure_balance_transaction). 008 records that as a fact (`Refund Failed After
-- Success`, its audit line, an open finding) and leaves the operation final `succeeded` — the request
-- executed. But the refund rules went on counting the amount against the charge, so it could never be
-- refunded again through the product. From here the operation carries the fact too:
--
--   failed_after_success_at      when the ledger learnt that Stripe failed the Refund: the created_at
--                                of its `Refund Failed After Success` fact; set once, never cleared;
--   failed_after_success_reason  Stripe's failure_reason then, the fact's `failureReason` (may be
--                                null: Stripe did not say).
--
-- The mark FOLLOWS THE FACT, in the database: an AFTER INSERT trigger on outcome_events (below) sets
-- it when the fact row is written, in the writer's statement and transaction. So code that writes the
-- fact without knowing the mark (008's event applier, still running during a deploy — migrations go
-- first, functions' code after — or rolled back to) marks the refund all the same; there is one writer
-- of the mark, and the event applier only writes the fact.
--
-- and a marked refund is not "refunded or in flight" (payment_operations_refund_rules below, and the
-- request statement in lambdas/payments/operations-store.ts). The operation's status stays `succeeded`.
--
-- Privileges (003): the application role already has UPDATE on the table; what it may change is said
-- by the guard, here as for every other column — the mark, once, on a refund ALREADY final succeeded
-- (never in the UPDATE that makes it so), and nothing else. No new grant: the mark trigger is not
-- SECURITY DEFINER, it runs as the role that inserts the fact (charges_app), whose UPDATE the guard
-- judges like any other.

ALTER TABLE payment_operations
  ADD COLUMN failed_after_success_at     timestamptz,
  ADD COLUMN failed_after_success_reason text CHECK (failed_after_success_reason IS NULL OR char_length(failed_after_success_reason) BETWEEN 1 AND 200);

ALTER TABLE payment_operations ADD CONSTRAINT failed_after_success_is_of_a_succeeded_refund CHECK (
  failed_after_success_at IS NULL OR (kind = 'refund' AND status = 'succeeded'));
ALTER TABLE payment_operations ADD CONSTRAINT failed_after_success_reason_has_its_mark CHECK (
  failed_after_success_reason IS NULL OR failed_after_success_at IS NOT NULL);

-- ONE update guard (001's payment_operations_guard and 007's payment_operations_refund_guard folded
-- into it): the one exception to "a final operation never changes" — setting the mark — has to be
-- judged where "final is final" is, and with every other column in view; two triggers would each
-- have to know about it. Same rules, same messages, in the order the two triggers raised them.
CREATE OR REPLACE FUNCTION payment_operations_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.failed_after_success_at IS NOT NULL
     AND (NEW.failed_after_success_at, NEW.failed_after_success_reason)
         IS DISTINCT FROM (OLD.failed_after_success_at, OLD.failed_after_success_reason) THEN
    RAISE EXCEPTION 'payment operation % is marked failed after success at Stripe; the mark is never changed or cleared', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.status IN ('succeeded', 'failed') THEN
    -- The mark, set once on a final succeeded refund, and NOTHING else (every column compared,
    -- including any a later migration adds).
    IF OLD.kind = 'refund' AND OLD.status = 'succeeded' AND OLD.failed_after_success_at IS NULL
       AND NEW.failed_after_success_at IS NOT NULL
       AND to_jsonb(NEW) - 'failed_after_success_at' - 'failed_after_success_reason'
         = to_jsonb(OLD) - 'failed_after_success_at' - 'failed_after_success_reason' THEN
      RETURN NEW;
    END IF;
    RAISE EXCEPTION 'payment operation % is final (%) and cannot change', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.order_id, NEW.kind, NEW.amount, NEW.currency, NEW.customer_id, NEW.payment_method)
     IS DISTINCT FROM
     (OLD.order_id, OLD.kind, OLD.amount, OLD.currency, OLD.customer_id, OLD.payment_method) THEN
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
  -- An open operation has no mark (the CHECK keeps it off anything but a succeeded refund), and it
  -- cannot get one on its way to final either: the mark is set only on a row that is ALREADY final
  -- succeeded (above), so pending → succeeded with the mark in one UPDATE is refused here — else the
  -- refund would stop holding its amount the moment it succeeded, without any fact from Stripe.
  IF NEW.failed_after_success_at IS NOT NULL OR NEW.failed_after_success_reason IS NOT NULL THEN
    RAISE EXCEPTION 'payment operation % is open (%); only a final succeeded refund can be marked failed after success', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

DROP TRIGGER payment_operations_refund_guard ON payment_operations;
DROP FUNCTION payment_operations_refund_guard();

-- 007's insert rules, with one change: a refund Stripe failed after it succeeded holds nothing of the
-- charge (Stripe counts only refunds that hold money: a failed one does not, docs above).
CREATE OR REPLACE FUNCTION payment_operations_refund_rules() RETURNS trigger
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
  -- Held: every refund of the charge's own PaymentIntent that is not failed and that Stripe did not
  -- fail after it succeeded (the same predicate as operations-store.ts REFUND_HOLDS).
  SELECT coalesce(sum(amount), 0) INTO held
    FROM payment_operations
   WHERE parent_operation_id = charge.id AND kind = 'refund' AND status <> 'failed' AND refund_payment_intent IS NULL
     AND failed_after_success_at IS NULL;
  IF held + NEW.amount > charge.amount THEN
    RAISE EXCEPTION 'refund % of order % (%) with % already refunded or in flight would exceed the charge (%)',
      NEW.refund_id, NEW.order_id, NEW.amount, held, charge.amount
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refunds_within_charge';
  END IF;
  RETURN NEW;
END $$;

-- Refunds that carry the fact already (recorded under 008): marked now, from the fact's own row — the
-- moment it was recorded and Stripe's failure_reason it carried (the first, if several). The guard
-- above allows exactly this. Driven from the refund rows (succeeded, unmarked), each looked up in
-- outcome_events by operation (002's outcome_events_by_operation index), not by scanning the whole
-- outbox: this runs inside the migration's transaction, which holds ACCESS EXCLUSIVE on
-- payment_operations (the ALTER TABLEs above) until it commits.
UPDATE payment_operations p
   SET (failed_after_success_at, failed_after_success_reason) = (
         SELECT f.created_at, nullif(left(f.payload ->> 'failureReason', 200), '')
           FROM outcome_events f
          WHERE f.operation_id = p.id AND f.event_type = 'Refund Failed After Success'
          ORDER BY f.created_at, f.event_id
          LIMIT 1)
 WHERE p.kind = 'refund' AND p.status = 'succeeded' AND p.failed_after_success_at IS NULL
   AND EXISTS (SELECT 1 FROM outcome_events f WHERE f.operation_id = p.id AND f.event_type = 'Refund Failed After Success');

-- The mark follows the fact (header): whoever writes `Refund Failed After Success` marks its refund,
-- if it is a final succeeded refund not marked yet — a second fact of the same refund (a replayed
-- event, an old writer) moves nothing. A fact of anything else marks nothing; the invariant checker
-- reports a fact without its mark (local/invariants.ts, refund_mismatch).
CREATE FUNCTION outcome_events_mark_refund_failed_after_success() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE payment_operations
     SET failed_after_success_at = NEW.created_at,
         failed_after_success_reason = nullif(left(NEW.payload ->> 'failureReason', 200), '')
   WHERE id = NEW.operation_id AND kind = 'refund' AND status = 'succeeded' AND failed_after_success_at IS NULL;
  RETURN NULL;
END $$;

CREATE TRIGGER outcome_events_mark_refund_failed_after_success
  AFTER INSERT ON outcome_events
  FOR EACH ROW WHEN (NEW.event_type = 'Refund Failed After Success')
  EXECUTE FUNCTION outcome_events_mark_refund_failed_after_success();
