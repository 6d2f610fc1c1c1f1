-- The payment operation: one row per business effect, written BEFORE the side effect happens.
-- Its id is the durable identity the Stripe idempotency key is derived from
-- (`payment-op:{id}`, generation 0), so a retry after any crash sends the same key.
-- Columns of the seed (section 5.1), plus: a lease (who may call Stripe for it now), the retry
-- schedule, the human-review flag and the key generation.

CREATE TABLE payment_operations (
  id                 uuid        PRIMARY KEY DEFAULT uuidv7(),
  order_id           text        NOT NULL CHECK (char_length(order_id) BETWEEN 1 AND 200),
  kind               text        NOT NULL DEFAULT 'charge' CHECK (kind IN ('charge')),
  amount             bigint      NOT NULL CHECK (amount > 0),
  currency           text        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
  customer_id        text        NOT NULL CHECK (char_length(customer_id) BETWEEN 1 AND 200),
  payment_method     text        NOT NULL CHECK (char_length(payment_method) BETWEEN 1 AND 200),
  -- pending: never known to have reached Stripe; unknown: may have reached it (ambiguous answer,
  -- or a PaymentIntent that is not settled yet); succeeded / failed: final, never changed again.
  status             text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'unknown', 'succeeded', 'failed')),
  external_id        text,       -- pi_…, once we know Stripe created it
  attempts           integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  -- Start of the idempotency-key window: written in the claim, before the first send. Measured
  -- from the first send and not from created_at, so an operation that waited in a queue for days
  -- is still sent normally.
  first_attempted_at timestamptz,
  last_error         text,
  last_error_class   text,
  -- The lease: a worker that claimed the operation may call Stripe until lease_until; its outcome
  -- is written only if lease_token is still its own (a late "zombie" write is discarded).
  lease_token        uuid,
  lease_until        timestamptz,
  -- When the reconciler may try again (backoff with jitter). NULL once final or in review.
  next_attempt_at    timestamptz DEFAULT now(),
  -- Non-null: no machine can decide; waiting for a human (`npm run ops -- review …`).
  review_reason      text,
  -- An operator who proved that nothing was charged may authorise a fresh key (generation + 1).
  key_generation     integer     NOT NULL DEFAULT 0 CHECK (key_generation >= 0),
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  settled_at         timestamptz,

  -- Business identity: one charge operation per order, whatever arrives twice.
  CONSTRAINT payment_operations_order_kind_key UNIQUE (order_id, kind),
  CONSTRAINT succeeded_has_external_id CHECK (status <> 'succeeded' OR external_id IS NOT NULL),
  CONSTRAINT final_is_settled CHECK (
    (status IN ('succeeded', 'failed')) = (settled_at IS NOT NULL)),
  CONSTRAINT final_has_no_work_left CHECK (
    status IN ('pending', 'unknown')
    OR (review_reason IS NULL AND next_attempt_at IS NULL AND lease_token IS NULL)),
  CONSTRAINT lease_is_whole CHECK ((lease_token IS NULL) = (lease_until IS NULL))
);

-- The reconcile sweep reads open operations only: O(open), not O(all). Settled rows, the vast
-- majority after a while, are not in this index at all.
CREATE INDEX payment_operations_open
  ON payment_operations (next_attempt_at)
  INCLUDE (status, created_at)
  WHERE status IN ('pending', 'unknown');

-- A final state is final in the database too, not only in the code that writes it; and the
-- parameters of an order never change (they are what the idempotency key stands for).
CREATE FUNCTION payment_operations_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF OLD.status IN ('succeeded', 'failed') THEN
    RAISE EXCEPTION 'payment operation % is final (%) and cannot change', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.order_id, NEW.kind, NEW.amount, NEW.currency, NEW.customer_id, NEW.payment_method)
     IS DISTINCT FROM
     (OLD.order_id, OLD.kind, OLD.amount, OLD.currency, OLD.customer_id, OLD.payment_method) THEN
    RAISE EXCEPTION 'the parameters of payment operation % cannot change', OLD.id
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER payment_operations_guard
  BEFORE UPDATE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_guard();

CREATE FUNCTION payment_operations_no_delete() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% rows are never deleted', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER payment_operations_no_delete
  BEFORE DELETE ON payment_operations
  FOR EACH ROW EXECUTE FUNCTION payment_operations_no_delete();

-- The audit trail: every request, claim, Stripe attempt, discarded late write and operator action,
-- append-only. This is what an on-call engineer and an auditor read.
CREATE TABLE payment_operation_events (
  id             bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  operation_id   uuid        NOT NULL REFERENCES payment_operations (id),
  occurred_at    timestamptz NOT NULL DEFAULT now(),
  actor          text        NOT NULL,
  action         text        NOT NULL CHECK (action IN (
                   'requested', 'attempt_started', 'outcome_recorded', 'outcome_discarded',
                   'lease_released', 'operator_resolved', 'operator_reissued', 'operator_note')),
  step           text        CHECK (step IN ('create', 'retrieve', 'search', 'early_search')),
  from_status    text,
  to_status      text,
  error_class    text,
  error_code     text,
  external_id    text,
  key_generation integer,
  detail         jsonb       NOT NULL DEFAULT '{}'::jsonb
);

CREATE INDEX payment_operation_events_by_operation ON payment_operation_events (operation_id, id);

CREATE FUNCTION append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END $$;

CREATE TRIGGER payment_operation_events_append_only
  BEFORE UPDATE OR DELETE ON payment_operation_events
  FOR EACH ROW EXECUTE FUNCTION append_only();

-- Messages we acknowledged without making an operation: not JSON, against the schema, or an
-- order that already exists with different parameters. Kept whole so nothing is silently lost.
CREATE TABLE rejected_messages (
  id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  message_id   text        NOT NULL,
  received_at  timestamptz NOT NULL DEFAULT now(),
  reason_code  text        NOT NULL CHECK (reason_code IN ('invalid_json', 'invalid_body', 'order_conflict')),
  reason       text        NOT NULL,
  order_id     text,
  operation_id uuid        REFERENCES payment_operations (id),
  body_sha256  text        NOT NULL,
  raw_body     text        NOT NULL,
  -- A redelivery of the same SQS message must not make a second row.
  CONSTRAINT rejected_messages_message_key UNIQUE (message_id)
);

CREATE INDEX rejected_messages_received ON rejected_messages (received_at);

CREATE TRIGGER rejected_messages_append_only
  BEFORE UPDATE OR DELETE ON rejected_messages
  FOR EACH ROW EXECUTE FUNCTION append_only();
