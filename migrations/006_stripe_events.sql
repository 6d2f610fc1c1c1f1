-- The transactional inbox for Stripe events (docs/architecture.md "Stripe events in"): the mirror image of the
-- outbox. Stripe delivers every event at least once, in no guaranteed order, retried for up to three
-- days (https://docs.stripe.com/webhooks#retries, #event-ordering). The endpoint records each event
-- with ONE statement, deduplicated by Stripe's event id (ON CONFLICT DO NOTHING), and answers 200;
-- the applier (lambdas/payments/event-applier.ts) works the rows at least once, each effect fenced
-- like every other write, and marks the row applied in the same transaction as its effect.

CREATE TABLE stripe_events (
  -- Stripe's event id (evt_…): a redelivery, a retry, an EventBridge copy of the same event all
  -- carry it, so it is the one key that makes the inbox idempotent.
  event_id          text        PRIMARY KEY CHECK (char_length(event_id) BETWEEN 1 AND 255),
  event_type        text        NOT NULL CHECK (char_length(event_type) BETWEEN 1 AND 255),
  -- event.created: when Stripe made the event (not when it reached us).
  stripe_created_at timestamptz NOT NULL,
  -- data.object.id: the PaymentIntent, Charge or Dispute the event is about.
  object_id         text,
  api_version       text,
  livemode          boolean     NOT NULL DEFAULT false,
  source            text        NOT NULL CHECK (source IN ('webhook', 'eventbridge')),
  received_at       timestamptz NOT NULL DEFAULT now(),
  -- The whole event as Stripe sent it (verified). Never logged.
  payload           jsonb       NOT NULL,

  -- The applier's bookkeeping. A row is open while applied_at IS NULL.
  applied_at        timestamptz,
  -- What applying it did (see event-applier.ts, ApplyOutcome): settled, moved, stale, contradiction, …
  outcome           text,
  operation_id      uuid        REFERENCES payment_operations (id),
  attempts          integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  -- When the applier may look at it again: an event for an operation whose lease is held waits
  -- until that lease ends (the worker's own write comes first).
  next_attempt_at   timestamptz NOT NULL DEFAULT now(),
  last_error        text,
  -- A worker applying the row holds it (same pattern as the operation lease and the outbox lease).
  apply_lease_token uuid,
  apply_lease_until timestamptz,
  CONSTRAINT stripe_events_applied_has_outcome CHECK ((applied_at IS NULL) OR (outcome IS NOT NULL)),
  CONSTRAINT stripe_events_lease_is_whole CHECK ((apply_lease_token IS NULL) = (apply_lease_until IS NULL))
);

-- The applier and the backlog gauge read open rows only: O(backlog), not O(all).
CREATE INDEX stripe_events_unapplied ON stripe_events (next_attempt_at) INCLUDE (received_at) WHERE applied_at IS NULL;
CREATE INDEX stripe_events_by_object ON stripe_events (object_id);
CREATE INDEX stripe_events_by_operation ON stripe_events (operation_id) WHERE operation_id IS NOT NULL;

-- A refund or dispute names the PaymentIntent, not the operation: find it without reading every row.
CREATE INDEX payment_operations_by_external_id ON payment_operations (external_id) WHERE external_id IS NOT NULL;

-- What Stripe sent never changes, and an applied event stays applied.
CREATE FUNCTION stripe_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    RAISE EXCEPTION 'stripe_events rows are never deleted' USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF OLD.applied_at IS NOT NULL THEN
    RAISE EXCEPTION 'stripe event % is already applied', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  IF (NEW.event_id, NEW.event_type, NEW.stripe_created_at, NEW.object_id, NEW.source, NEW.received_at, NEW.payload)
     IS DISTINCT FROM
     (OLD.event_id, OLD.event_type, OLD.stripe_created_at, OLD.object_id, OLD.source, OLD.received_at, OLD.payload) THEN
    RAISE EXCEPTION 'stripe event % cannot change', OLD.event_id USING ERRCODE = 'integrity_constraint_violation';
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER stripe_events_guard
  BEFORE UPDATE OR DELETE ON stripe_events
  FOR EACH ROW EXECUTE FUNCTION stripe_events_guard();

-- What an event showed that the ledger cannot explain, for a human:
--   unrecorded_charge: a PaymentIntent carrying our metadata for an operation we do not have
--                      (money moved that the ledger does not know of);
--   contradiction:     an event that contradicts a FINAL operation (a succeeded PaymentIntent for a
--                      failed operation, a second succeeded PaymentIntent for one order). A final
--                      state is never rewritten (payment_operations_guard); the finding is the review.
-- One row per (kind, PaymentIntent): the same finding delivered twice is one row.
CREATE TABLE stripe_event_findings (
  id                bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  kind              text        NOT NULL CHECK (kind IN ('unrecorded_charge', 'contradiction')),
  payment_intent_id text        NOT NULL,
  event_id          text        NOT NULL REFERENCES stripe_events (event_id),
  operation_id      uuid        REFERENCES payment_operations (id),
  -- metadata.operation_id / order_id as the PaymentIntent carries them (may name no operation).
  claimed_operation_id text,
  order_id          text,
  amount            bigint,
  currency          text,
  status            text,
  reason            text        NOT NULL,
  detail            jsonb       NOT NULL DEFAULT '{}'::jsonb,
  found_at          timestamptz NOT NULL DEFAULT now(),
  -- Set by an operator once explained (npm run ops); an open finding keeps its alarm gauge up.
  resolved_at       timestamptz,
  resolved_by       text,
  resolution        text,
  CONSTRAINT stripe_event_findings_key UNIQUE (kind, payment_intent_id)
);

CREATE INDEX stripe_event_findings_open ON stripe_event_findings (found_at) WHERE resolved_at IS NULL;

-- The audit trail learns one more action: an event that was applied to, or seen for, an operation
-- without being an attempt (a refund, a dispute, a stale or contradicting event). Settling events are
-- written by the engine's own outcome write and appear as 'outcome_recorded' with the event in detail.
-- The CHECKs are widened in place from their current definition, so that other migrations that
-- widen the same lists (in any order) keep their values. The catalog shows a list in either form,
-- depending on how its last writer wrote it: ARRAY['a'::text, …] (001/002/005) or the single
-- literal '{a,"b c"}'::text[] (a hand-written constraint might); both are read, and the list is
-- written back in the ARRAY[…] form.
CREATE FUNCTION pg_temp.check_values_006(def text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
  SELECT CASE
    WHEN def ~ '''\{[^'']*\}''::text\[\]' THEN (regexp_match(def, '''(\{[^'']*\})''::text\[\]'))[1]::text[]
    ELSE ARRAY(SELECT (regexp_matches(def, '''([^'']*)''', 'g'))[1])
  END
$$;

CREATE FUNCTION pg_temp.widen_check_006(p_table regclass, p_constraint text, p_column text, p_additions text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  definition text;
  allowed text[];
BEGIN
  SELECT pg_get_constraintdef(c.oid) INTO definition
    FROM pg_constraint c
   WHERE c.conrelid = p_table AND c.conname = p_constraint;
  allowed := pg_temp.check_values_006(coalesce(definition, ''));
  IF definition IS NULL OR position('= ANY' IN definition) = 0 OR cardinality(allowed) = 0 THEN
    RAISE EXCEPTION '% not found in the expected form: %', p_constraint, definition;
  END IF;
  SELECT array_agg(DISTINCT v ORDER BY v) INTO allowed FROM (SELECT unnest(allowed) AS v UNION SELECT unnest(p_additions)) x;
  EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', p_table, p_constraint);
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (ARRAY[%s]::text[]))', p_table, p_constraint, p_column,
                 (SELECT string_agg(quote_literal(v), ', ') FROM unnest(allowed) AS v));
END $$;

SELECT pg_temp.widen_check_006('payment_operation_events', 'payment_operation_events_action_check', 'action', ARRAY['stripe_event']);
-- The outbox carries what happened to a charge after it settled (contract.ts, ChargeAftermath).
SELECT pg_temp.widen_check_006('outcome_events', 'outcome_events_event_type_check', 'event_type',
                               ARRAY['Charge Refunded', 'Charge Disputed', 'Charge Dispute Closed']);
DROP FUNCTION pg_temp.widen_check_006(regclass, text, text, text[]);
DROP FUNCTION pg_temp.check_values_006(text);

-- The application role (charges_app, migration 003) records and applies events and resolves findings.
-- 003's default privileges already gave it DML on these tables; said explicitly here, and narrowed:
-- nothing deletes from the inbox or its findings (stripe_events_guard refuses it anyway).
GRANT SELECT, INSERT, UPDATE ON stripe_events, stripe_event_findings TO charges_app;
REVOKE DELETE, TRUNCATE ON stripe_events, stripe_event_findings FROM charges_app;
