-- Charges on connected accounts (Stripe Connect): direct charges and destination charges
-- (docs/model.md#connected-accounts, docs/decisions.md 2026-12-02 "charges on connected accounts").
--
-- Stripe: a request made with the Stripe-Account header is made AS the connected account — its
-- objects, its idempotency keys, its List and Search (https://docs.stripe.com/connect/authentication);
-- a direct charge is the connected account's own PaymentIntent, a destination charge is the
-- platform's with `transfer_data[destination]`, and `application_fee_amount` is the platform's share
-- (https://docs.stripe.com/connect/direct-charges, /connect/destination-charges).
--
--   stripe_account          the account every Stripe request of the operation is made as; NULL: the
--                           platform. A refund inherits its charge's (a refund of a direct charge is
--                           made on the connected account), set here by a trigger for every way a
--                           refund row is made (a producer's, an operator's, the duplicate remedy's);
--   application_fee_amount  the platform's fee, minor units, at most the amount; only on a charge that
--                           names a connected account (as itself or as its destination);
--   transfer_destination    a destination charge: made on the platform (stripe_account NULL).
--
-- They are parameters of the operation, like the amount: the update guard refuses changing them, and
-- a repeat of the order naming others is an order conflict (the request statement compares them).

ALTER TABLE payment_operations
  ADD COLUMN stripe_account         text CHECK (stripe_account ~ '^acct_[A-Za-z0-9]{1,64}$'),
  ADD COLUMN application_fee_amount bigint CHECK (application_fee_amount > 0),
  ADD COLUMN transfer_destination   text CHECK (transfer_destination ~ '^acct_[A-Za-z0-9]{1,64}$');

ALTER TABLE payment_operations ADD CONSTRAINT connect_parameters_are_a_charge_s CHECK (
  kind = 'charge'
  OR (application_fee_amount IS NULL AND transfer_destination IS NULL));

ALTER TABLE payment_operations ADD CONSTRAINT application_fee_from_a_connected_account CHECK (
  application_fee_amount IS NULL
  OR ((stripe_account IS NOT NULL OR transfer_destination IS NOT NULL) AND application_fee_amount <= amount));

ALTER TABLE payment_operations ADD CONSTRAINT direct_or_destination_charge CHECK (
  stripe_account IS NULL OR transfer_destination IS NULL);

-- The event applier asks "does the pipeline have an operation on this account?" of every event that
-- comes with an `account` (lambdas/payments/event-confirmation.ts). Only rows on a connected account
-- are in the index, and the column never changes: a platform charge writes nothing here.
CREATE INDEX payment_operations_by_stripe_account ON payment_operations (stripe_account) WHERE stripe_account IS NOT NULL;

-- A refund is made on its charge's account: copied from the charge, whatever the inserting
-- statement said; one naming another account is refused.
CREATE FUNCTION payment_operations_refund_account() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  account text;
BEGIN
  SELECT c.stripe_account INTO account FROM payment_operations c WHERE c.id = NEW.parent_operation_id;
  IF NEW.stripe_account IS NOT NULL AND NEW.stripe_account IS DISTINCT FROM account THEN
    RAISE EXCEPTION 'refund % of order % names account %, its charge is on %', NEW.refund_id, NEW.order_id, NEW.stripe_account, coalesce(account, 'the platform')
      USING ERRCODE = 'check_violation', CONSTRAINT = 'refund_on_its_charge_s_account';
  END IF;
  NEW.stripe_account := account;
  RETURN NEW;
END $$;

CREATE TRIGGER payment_operations_refund_account
  BEFORE INSERT ON payment_operations
  FOR EACH ROW WHEN (NEW.kind = 'refund')
  EXECUTE FUNCTION payment_operations_refund_account();

-- 017's update guard (009's, with the erasure at its top), with the Connect parameters among the
-- parameters that never change. Final rows were already covered (every column compared); an open row's
-- parameters now include them. The erasure never touches them (it compares every other column).
CREATE OR REPLACE FUNCTION payment_operations_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  -- Erasure (017): a final operation's personal data, once, by the lifecycle role; nothing else moves.
  IF lifecycle_may('erasure') AND OLD.status IN ('succeeded', 'failed')
     AND OLD.erased_at IS NULL AND NEW.erased_at IS NOT NULL
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
