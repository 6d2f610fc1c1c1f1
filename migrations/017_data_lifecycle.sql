-- Data that does not grow for ever (docs/decisions.md "Data lifecycle", docs/operations.md "Retention").
--
-- The reconciler's retention phase (lambdas/payments/retention-store.ts) and the operator's `erase
-- customer` (lambdas/payments/erasure-store.ts) are the only writers that may remove anything, and
-- they do it through the lifecycle_* functions below ONLY: SECURITY DEFINER functions of the owner,
-- which the application role may execute and nothing else may. Each one sets the transaction-local
-- charges.lifecycle for its own statements, and the guards let through exactly its operation when
-- both hold — the setting, and the owner as current_user (inside the function); a session of the
-- application role cannot be the owner, so setting charges.lifecycle by hand gains it nothing:
--
--   outcome_events     delete a row published more than a day ago (a day below the least the setting
--                      accepts, OUTBOX_RETENTION_DAYS ≥ 2: a clock difference never refuses a valid one);
--   stripe_events      reduce an APPLIED row to what deduplication needs (payload and last_error set to
--                      NULL, nothing else changed); delete an applied, reduced row received more than
--                      four days ago (Stripe retries a delivery for up to three days,
--                      https://docs.stripe.com/webhooks#retries, plus a day) that no finding points at;
--   rejected_messages  set raw_body to NULL (with when and why), nothing else; never delete;
--   payment_operations erase the personal data of a FINAL operation (customer_id and payment_method
--                      become 'erased', description / statement_descriptor_suffix / last_error NULL,
--                      charge_metadata {}), once, recording erased_at; amounts, states, ids unchanged.
--
-- Everything else every guard refused, it still refuses, for every role. The audit trail
-- (payment_operation_events) stays append-only: it holds no personal data (ids, statuses, Stripe
-- request ids, error classes), and the erasure adds its own lines to it.
--
-- A role of its own (SET ROLE) would need role membership, which is server-wide and which an owner
-- may grant only for roles it administers: with two pipelines on one server (lib/database.ts
-- existingDatabase) the second's owner could not. Functions and their EXECUTE grant are per database,
-- and the migration runner hands them to the pipeline's own application role like its table grants.

-- ── The columns ──────────────────────────────────────────────────────────────────────────────────

-- A rejected message's body once removed: the row, its reason and body_sha256 (the evidence of what
-- came) stay.
ALTER TABLE rejected_messages
  ALTER COLUMN raw_body DROP NOT NULL,
  ADD COLUMN raw_body_removed_at  timestamptz,
  ADD COLUMN raw_body_removed_why text CHECK (raw_body_removed_why IN ('retention', 'erasure')),
  ADD CONSTRAINT rejected_body_or_its_removal CHECK (
    (raw_body IS NULL) = (raw_body_removed_at IS NOT NULL) AND (raw_body_removed_at IS NULL) = (raw_body_removed_why IS NULL)) NOT VALID;

-- An inbox row reduced to what deduplication needs: its event id, type, object id, Stripe's time and
-- the outcome stay as columns. Only an applied row may lose its payload (an open one is still worked).
ALTER TABLE stripe_events
  ALTER COLUMN payload DROP NOT NULL,
  ADD CONSTRAINT stripe_events_open_has_payload CHECK (payload IS NOT NULL OR applied_at IS NOT NULL) NOT VALID;

-- NOT VALID (both CHECKs): every existing row holds them (both columns were NOT NULL), so the scan that
-- would prove it, under the ALTER's exclusive lock, is skipped; new and updated rows are checked.

-- An operation whose personal data an operator erased.
ALTER TABLE payment_operations ADD COLUMN erased_at timestamptz;

-- The FK of stripe_event_findings.event_id is checked on every inbox delete: by index, not a scan.
CREATE INDEX stripe_event_findings_by_event ON stripe_event_findings (event_id) WHERE event_id IS NOT NULL;

-- The operator's erasures, append-only like the trail: who, why, when, what was changed. The customer
-- is named by the SHA-256 of its id only (a second request for the same customer can be matched).
CREATE TABLE customer_erasures (
  id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  occurred_at     timestamptz NOT NULL DEFAULT now(),
  actor           text        NOT NULL,
  verified        boolean     NOT NULL,
  reason          text        NOT NULL CHECK (char_length(reason) BETWEEN 1 AND 2000),
  customer_sha256 text        NOT NULL CHECK (customer_sha256 ~ '^[0-9a-f]{64}$'),
  operation_ids   uuid[]      NOT NULL,
  counts          jsonb       NOT NULL DEFAULT '{}'::jsonb,
  detail          jsonb       NOT NULL DEFAULT '{}'::jsonb
);

CREATE TRIGGER customer_erasures_append_only
  BEFORE UPDATE OR DELETE ON customer_erasures
  FOR EACH ROW EXECUTE FUNCTION append_only();

-- ── The guards, narrowed ─────────────────────────────────────────────────────────────────────────

-- True inside a lifecycle_* function doing one of `operations` (header): the transaction-local setting
-- it set, and the owner of the pipeline's tables as current_user (a SECURITY DEFINER function's).
CREATE FUNCTION lifecycle_may(VARIADIC operations text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce(current_setting('charges.lifecycle', true), '') = ANY (operations)
     AND current_user = (SELECT pg_get_userbyid(c.relowner) FROM pg_class c WHERE c.oid = 'public.payment_operations'::regclass)
$$;

-- 002's guard; the one change is the delete of an old published row by the lifecycle role.
CREATE OR REPLACE FUNCTION outcome_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF lifecycle_may('retention') AND OLD.published_at IS NOT NULL AND OLD.published_at < now() - interval '1 day' THEN
      RETURN OLD;
    END IF;
    RAISE EXCEPTION 'outcome_events rows are never deleted' USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.published_at IS NOT NULL THEN
    RAISE EXCEPTION 'outcome event % is already published', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.event_id, NEW.operation_id, NEW.event_type, NEW.payload) IS DISTINCT FROM (OLD.event_id, OLD.operation_id, OLD.event_type, OLD.payload) THEN
    RAISE EXCEPTION 'outcome event % cannot change', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

-- 006's guard; the changes are the reduction and the delete, by the lifecycle role.
CREATE OR REPLACE FUNCTION stripe_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF lifecycle_may('retention') AND OLD.applied_at IS NOT NULL AND OLD.payload IS NULL
       AND OLD.received_at < now() - interval '4 days' THEN
      RETURN OLD;
    END IF;
    RAISE EXCEPTION 'stripe_events rows are never deleted' USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.applied_at IS NOT NULL THEN
    -- The reduction: payload and last_error to NULL, every other column as it was.
    IF lifecycle_may('retention', 'erasure') AND OLD.payload IS NOT NULL AND NEW.payload IS NULL AND NEW.last_error IS NULL
       AND to_jsonb(NEW) - 'payload' - 'last_error' = to_jsonb(OLD) - 'payload' - 'last_error' THEN
      RETURN NEW;
    END IF;
    RAISE EXCEPTION 'stripe event % is already applied', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.event_id, NEW.event_type, NEW.stripe_created_at, NEW.object_id, NEW.source, NEW.received_at, NEW.payload)
     IS DISTINCT FROM
     (OLD.event_id, OLD.event_type, OLD.stripe_created_at, OLD.object_id, OLD.source, OLD.received_at, OLD.payload) THEN
    RAISE EXCEPTION 'stripe event % cannot change', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

-- rejected_messages had 001's shared append_only(); it gets a guard of its own with one exception.
CREATE FUNCTION rejected_messages_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'UPDATE' AND lifecycle_may('retention', 'erasure')
     AND OLD.raw_body IS NOT NULL AND NEW.raw_body IS NULL
     AND NEW.raw_body_removed_at IS NOT NULL AND NEW.raw_body_removed_why IS NOT NULL
     AND NEW.raw_body_removed_why = current_setting('charges.lifecycle', true)
     AND (NEW.raw_body_removed_why = 'erasure' OR OLD.received_at < now() - interval '1 day')
     AND to_jsonb(NEW) - 'raw_body' - 'raw_body_removed_at' - 'raw_body_removed_why'
       = to_jsonb(OLD) - 'raw_body' - 'raw_body_removed_at' - 'raw_body_removed_why' THEN
    RETURN NEW;
  END IF;
  RAISE EXCEPTION '% is append-only', TG_TABLE_NAME USING ERRCODE = 'integrity_constraint_violation';
END $$;

DROP TRIGGER rejected_messages_append_only ON rejected_messages;
CREATE TRIGGER rejected_messages_guard
  BEFORE UPDATE OR DELETE ON rejected_messages
  FOR EACH ROW EXECUTE FUNCTION rejected_messages_guard();

-- 009's guard, unchanged but for the erasure at its top (one guard judges every change of the row, as
-- 009 decided; a second trigger could not let through what this one refuses).
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
  IF NEW.failed_after_success_at IS NOT NULL OR NEW.failed_after_success_reason IS NOT NULL THEN
    RAISE EXCEPTION 'payment operation % is open (%); only a final succeeded refund can be marked failed after success', OLD.id, OLD.status
      USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;


-- ── The lifecycle functions ──────────────────────────────────────────────────────────────────────
--
-- Each retention function removes at most p_limit rows in ONE statement (its own short transaction:
-- the caller runs it outside any other): the rows are chosen by primary key through an index, oldest
-- first, locked FOR UPDATE SKIP LOCKED — a row some other transaction holds is skipped this time,
-- never waited for — so retention never waits for the charge path's row locks and holds only the
-- rows it removes, which nothing else writes any more. The bound each one accepts is the smallest its
-- setting does (lambdas/runtime/config.ts); a later one is always fine.

-- The smallest uuidv7 of a moment (RFC 9562, section 5.7: 48 bits of Unix milliseconds first): every outbox
-- row (event_id = uuidv7(), written at created_at ≤ published_at) published before `at` sorts below
-- it, so the primary key finds them without an index on published_at.
CREATE FUNCTION lifecycle_uuidv7_floor(at timestamptz) RETURNS uuid
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT (lpad(to_hex(floor(extract(epoch FROM at) * 1000)::bigint), 12, '0') || '70008000000000000000')::uuid
$$;

CREATE FUNCTION lifecycle_check(p_before timestamptz, p_floor interval, p_limit integer, p_what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_before IS NULL OR p_before > now() - p_floor THEN
    RAISE EXCEPTION '% of the last % are kept; asked for everything before %', p_what, p_floor, p_before
      USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF p_limit IS NULL OR p_limit < 1 OR p_limit > 10000 THEN
    RAISE EXCEPTION 'a retention batch is 1 to 10000 rows, got %', p_limit USING ERRCODE = 'invalid_parameter_value';
  END IF;
END $$;

-- Published outbox rows: consumers deduplicate by event_id within their own horizon (docs/events.md);
-- the row is history once published.
CREATE FUNCTION lifecycle_delete_published_outbox(p_published_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM lifecycle_check(p_published_before, interval '1 day', p_limit, 'outbox rows published');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  DELETE FROM outcome_events o
   WHERE o.event_id = ANY (ARRAY(
     SELECT e.event_id FROM outcome_events e
      WHERE e.event_id < lifecycle_uuidv7_floor(p_published_before) AND e.published_at < p_published_before
      ORDER BY e.event_id
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

-- Applied inbox rows whose payload is no longer needed: the columns (event id, type, object id,
-- Stripe's time, outcome, operation) stay, and deduplication needs only the event id.
CREATE INDEX stripe_events_with_payload ON stripe_events (received_at) WHERE payload IS NOT NULL;

CREATE FUNCTION lifecycle_reduce_inbox(p_received_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  -- Stripe retries a delivery for up to three days (https://docs.stripe.com/webhooks#retries).
  PERFORM lifecycle_check(p_received_before, interval '3 days', p_limit, 'inbox payloads received');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  UPDATE stripe_events s SET payload = NULL, last_error = NULL
   WHERE s.event_id = ANY (ARRAY(
     SELECT e.event_id FROM stripe_events e
      WHERE e.payload IS NOT NULL AND e.received_at < p_received_before AND e.applied_at IS NOT NULL
      ORDER BY e.received_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

-- Reduced inbox rows, once no redelivery can come: a row a finding points at stays (the finding's
-- evidence), reduced.
CREATE FUNCTION lifecycle_delete_inbox(p_received_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM lifecycle_check(p_received_before, interval '4 days', p_limit, 'inbox rows received');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  DELETE FROM stripe_events s
   WHERE s.event_id = ANY (ARRAY(
     SELECT e.event_id FROM stripe_events e
      WHERE e.received_at < p_received_before AND e.payload IS NULL AND e.applied_at IS NOT NULL
        AND NOT EXISTS (SELECT 1 FROM stripe_event_findings f WHERE f.event_id = e.event_id)
      ORDER BY e.received_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

-- Rejected messages' raw bodies: the row, its reason and body_sha256 stay.
CREATE INDEX rejected_messages_with_body ON rejected_messages (received_at) WHERE raw_body IS NOT NULL;

CREATE FUNCTION lifecycle_remove_rejected_bodies(p_received_before timestamptz, p_limit integer) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  n integer;
BEGIN
  PERFORM lifecycle_check(p_received_before, interval '1 day', p_limit, 'rejected bodies received');
  PERFORM set_config('charges.lifecycle', 'retention', true);
  UPDATE rejected_messages r SET raw_body = NULL, raw_body_removed_at = now(), raw_body_removed_why = 'retention'
   WHERE r.id = ANY (ARRAY(
     SELECT m.id FROM rejected_messages m
      WHERE m.raw_body IS NOT NULL AND m.received_at < p_received_before
      ORDER BY m.received_at
      LIMIT p_limit
      FOR UPDATE SKIP LOCKED));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);
  RETURN n;
END $$;

-- The erasure finds a customer's operations by customer_id (refunds carry their charge's). No index is
-- made for it here: every charge would pay for one in WAL (an entry at the insert and again at the
-- outcome, which cannot be HOT), for a command run a few times a month. Where erasures must be fast on
-- a large table, build it by hand — CREATE INDEX CONCURRENTLY payment_operations_by_customer ON
-- payment_operations (customer_id) — and the erasure uses it (docs/deploy.md, docs/decisions.md).

-- A customer's personal data out of the pipeline's tables, in one transaction (docs/operations.md
-- "Erasure"): its FINAL operations lose customer_id, payment_method, description, statement
-- descriptor suffix, charge metadata and last error (amounts, currencies, states, order and Stripe
-- ids stay: accounting needs them); the applied inbox rows of those operations lose their payloads;
-- rejected messages of their orders, or whose body names the customer, lose their bodies. Refused
-- (nothing changed) while any of its operations is open or any of their events is not applied yet.
-- Recorded in customer_erasures and, per operation, as an operator_note in the audit trail.
CREATE FUNCTION lifecycle_erase_customer(p_customer text, p_actor text, p_verified boolean, p_reason text, p_detail jsonb) RETURNS jsonb
LANGUAGE plpgsql SECURITY DEFINER SET search_path = public, pg_temp AS $$
DECLARE
  ops uuid[];
  orders text[];
  externals text[];
  open_ops integer;
  open_events integer;
  n_ops integer;
  n_events integer;
  n_bodies integer;
  erasure bigint;
BEGIN
  IF p_customer IS NULL OR p_customer !~ '^cus_[A-Za-z0-9_]{1,250}$' THEN
    RAISE EXCEPTION 'a customer id is cus_… ' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  IF coalesce(btrim(p_reason), '') = '' OR coalesce(btrim(p_actor), '') = '' THEN
    RAISE EXCEPTION 'an erasure needs an actor and a reason' USING ERRCODE = 'invalid_parameter_value';
  END IF;
  SELECT coalesce(array_agg(p.id ORDER BY p.id), '{}'), coalesce(array_agg(DISTINCT p.order_id), '{}'),
         coalesce(array_agg(p.external_id) FILTER (WHERE p.external_id IS NOT NULL), '{}'),
         count(*) FILTER (WHERE p.status IN ('pending', 'unknown'))
    INTO ops, orders, externals, open_ops
    FROM (SELECT * FROM payment_operations WHERE customer_id = p_customer FOR UPDATE) p;
  IF open_ops > 0 THEN
    RAISE EXCEPTION 'customer has % open operation(s): erase once they are final (review list, operations show)', open_ops
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;
  SELECT count(*) INTO open_events FROM stripe_events
   WHERE (operation_id = ANY (ops) OR object_id = ANY (externals)) AND applied_at IS NULL;
  IF open_events > 0 THEN
    RAISE EXCEPTION '% Stripe event(s) of the customer''s operations are not applied yet: erase once the reconciler applied them', open_events
      USING ERRCODE = 'object_not_in_prerequisite_state';
  END IF;

  PERFORM set_config('charges.lifecycle', 'erasure', true);
  UPDATE payment_operations
     SET erased_at = now(), customer_id = 'erased', payment_method = 'erased', description = NULL,
         statement_descriptor_suffix = NULL, last_error = NULL, charge_metadata = '{}'::jsonb
   WHERE id = ANY (ops) AND erased_at IS NULL;
  GET DIAGNOSTICS n_ops = ROW_COUNT;
  UPDATE stripe_events SET payload = NULL, last_error = NULL
   WHERE (operation_id = ANY (ops) OR object_id = ANY (externals)) AND applied_at IS NOT NULL AND payload IS NOT NULL;
  GET DIAGNOSTICS n_events = ROW_COUNT;
  UPDATE rejected_messages SET raw_body = NULL, raw_body_removed_at = now(), raw_body_removed_why = 'erasure'
   WHERE raw_body IS NOT NULL AND (order_id = ANY (orders) OR operation_id = ANY (ops) OR strpos(raw_body, p_customer) > 0);
  GET DIAGNOSTICS n_bodies = ROW_COUNT;
  PERFORM set_config('charges.lifecycle', '', true);

  INSERT INTO customer_erasures (actor, verified, reason, customer_sha256, operation_ids, counts, detail)
  VALUES (p_actor, p_verified, left(p_reason, 2000), encode(sha256(convert_to(p_customer, 'UTF8')), 'hex'), ops,
          jsonb_build_object('operations', n_ops, 'stripeEvents', n_events, 'rejectedBodies', n_bodies), coalesce(p_detail, '{}'::jsonb))
  RETURNING id INTO erasure;
  INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, detail)
  SELECT p.id, p_actor, 'operator_note', p.status, p.status,
         coalesce(p_detail, '{}'::jsonb) || jsonb_build_object('command', 'erase customer', 'reason', left(p_reason, 2000), 'erasureId', erasure)
    FROM payment_operations p WHERE p.id = ANY (ops);
  RETURN jsonb_build_object('erasureId', erasure, 'operations', n_ops, 'operationIds', to_jsonb(ops),
                            'stripeEvents', n_events, 'rejectedBodies', n_bodies);
END $$;

-- ── Grants ───────────────────────────────────────────────────────────────────────────────────────

-- Functions are executable by PUBLIC unless said otherwise: the lifecycle ones by the application
-- role only (the migration runner hands the grant to the pipeline's own role, like its table grants).
REVOKE ALL ON FUNCTION lifecycle_delete_published_outbox(timestamptz, integer), lifecycle_reduce_inbox(timestamptz, integer),
  lifecycle_delete_inbox(timestamptz, integer), lifecycle_remove_rejected_bodies(timestamptz, integer),
  lifecycle_erase_customer(text, text, boolean, text, jsonb) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION lifecycle_delete_published_outbox(timestamptz, integer), lifecycle_reduce_inbox(timestamptz, integer),
  lifecycle_delete_inbox(timestamptz, integer), lifecycle_remove_rejected_bodies(timestamptz, integer),
  lifecycle_erase_customer(text, text, boolean, text, jsonb) TO charges_app;

-- The application role loses the deletes 003 gave it, which no code of it uses (the guards refused
-- them anyway): what is removed, the functions above remove.
REVOKE DELETE, TRUNCATE ON outcome_events, rejected_messages, payment_operations, payment_operation_events FROM charges_app;
-- 010's record of raw-body reads is append-only too (its trigger refuses); 003's default privileges
-- had given the role DELETE on it. ops_identity_proofs keeps its DELETE: the insert prunes old proofs.
REVOKE DELETE, UPDATE, TRUNCATE ON operator_reads FROM charges_app;
-- 003's default privileges gave it DML on what later migrations create: the erasure record is written
-- by lifecycle_erase_customer only, and read by anyone of the pipeline.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON customer_erasures FROM charges_app;
GRANT SELECT ON customer_erasures TO charges_app;
