-- The transactional outbox for outcome events (docs/events.md). A row is written by the same statement
-- that records the outcome it announces — final state or entry into review — so there is no
-- outcome without its event and no event without its outcome. Publishing to EventBridge happens
-- afterwards, at least once: event_id is stable and is what consumers deduplicate on.

CREATE TABLE outcome_events (
  event_id       uuid        PRIMARY KEY,
  operation_id   uuid        NOT NULL REFERENCES payment_operations (id),
  event_type     text        NOT NULL CHECK (event_type IN ('Charge Succeeded', 'Charge Failed', 'Charge Needs Review')),
  -- The EventBridge `detail`, frozen at the moment of the outcome (schema: lambdas/events/contract.ts).
  payload        jsonb       NOT NULL,
  created_at     timestamptz NOT NULL DEFAULT now(),
  published_at   timestamptz,
  -- A relay (the charge handler right after recording, or the reconciler's sweep) leases a row
  -- while its PutEvents is in flight, so two relays never send the same row at the same moment.
  -- A relay that dies leaves the lease to expire; the next sweep re-sends (same event_id).
  publish_lease_until timestamptz,
  attempts       integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  last_error     text,
  CONSTRAINT payload_carries_event_id CHECK (payload ->> 'eventId' = event_id::text)
);

-- The relay sweeps unpublished rows only.
CREATE INDEX outcome_events_unpublished ON outcome_events (created_at) WHERE published_at IS NULL;
CREATE INDEX outcome_events_by_operation ON outcome_events (operation_id);

-- Once published, a row is history.
CREATE FUNCTION outcome_events_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
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

CREATE TRIGGER outcome_events_guard
  BEFORE UPDATE OR DELETE ON outcome_events
  FOR EACH ROW EXECUTE FUNCTION outcome_events_guard();
