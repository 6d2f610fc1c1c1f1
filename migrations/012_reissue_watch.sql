-- The watch over a re-issued operation (docs/model.md "The watch after a re-issue").
--
-- A re-issue (the engine's after two proofs of absence, or an operator's `review reissue`) sends a new
-- key because nothing of the old one was found. A request under the old key can still be committed by
-- Stripe later (an answer that was a 500 or a timeout while the work went on, a key still in use): then
-- the order is charged — or refunded — twice, and with Stripe events off nothing would ever say so. So
-- a re-issued operation stays under watch, whatever state it ends in: the reconciler lists its objects
-- again (every generation, from the first send to the moment of the look) at least twice more — once
-- `REISSUE_WATCH_FIRST_AFTER_MS` after the re-issue, and once the retired generation's key has aged past
-- Stripe's retention (`REISSUE_WATCH_FINAL_AFTER_MS` after its first send) — and longer while any object
-- it finds may still move money. A late PaymentIntent that charged goes to the duplicate-charge remedy; a
-- late second Refund (which no machine can take back) becomes a finding and an alarm.
--
--   payment_operation_watches   one row per re-issued operation, written by the re-issue's own statement;
--   payment_operation_events    action 'watch_checked': what each look listed and decided (the evidence);
--   stripe_event_findings       findings the watch makes (source 'watch': no Stripe event behind them):
--                               kind 'refunded_twice' for a second Refund of one refund operation,
--                               'watch_blind' when its List could not be read for several looks in a row,
--                               'contradiction' for a late object it cannot explain.

CREATE TABLE payment_operation_watches (
  operation_id   uuid        PRIMARY KEY REFERENCES payment_operations (id),
  -- The operation's earliest send (key generation 0's first): every look lists from here.
  watched_from   timestamptz NOT NULL,
  -- The latest re-issue, and how many the operation has had.
  reissued_at    timestamptz NOT NULL,
  reissues       integer     NOT NULL DEFAULT 1 CHECK (reissues >= 1),
  -- The look after which the retired generations' keys are past Stripe's retention.
  final_check_at timestamptz NOT NULL,
  -- The next look; NULL once the watch is over (closed_at says when).
  next_check_at  timestamptz,
  checks         integer     NOT NULL DEFAULT 0 CHECK (checks >= 0),
  -- Looks in a row whose List could not be read to its end (reset by a complete one).
  failures       integer     NOT NULL DEFAULT 0 CHECK (failures >= 0),
  lease_token    uuid,
  lease_until    timestamptz,
  closed_at      timestamptz,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT watch_open_or_closed CHECK ((next_check_at IS NULL) = (closed_at IS NOT NULL)),
  CONSTRAINT watch_lease_is_whole CHECK ((lease_token IS NULL) = (lease_until IS NULL))
);

-- The reconciler's due watches: open ones only.
CREATE INDEX payment_operation_watches_due ON payment_operation_watches (next_check_at) WHERE next_check_at IS NOT NULL;

-- A watch is never deleted: it is the record that an operation was watched, and for how long.
CREATE TRIGGER payment_operation_watches_kept
  BEFORE DELETE ON payment_operation_watches
  FOR EACH ROW EXECUTE FUNCTION append_only();

-- The audit trail's new action (widened in place, keeping what other migrations added).
CREATE FUNCTION pg_temp.widen_in_check_012(tbl regclass, col text, additions text[]) RETURNS void
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
  EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I CHECK (%I = ANY (ARRAY[%s]::text[]))', tbl, con.conname, col,
    (SELECT string_agg(quote_literal(v), ', ' ORDER BY v) FROM unnest(allowed) v));
END $$;

SELECT pg_temp.widen_in_check_012('payment_operation_events', 'action', ARRAY['watch_checked']);
SELECT pg_temp.widen_in_check_012('stripe_event_findings', 'kind', ARRAY['refunded_twice', 'watch_blind']);
DROP FUNCTION pg_temp.widen_in_check_012(regclass, text, text[]);

-- A finding the watch made has no Stripe event behind it: its evidence is our own List, in `detail`.
ALTER TABLE stripe_event_findings
  ALTER COLUMN event_id DROP NOT NULL,
  ADD COLUMN source text NOT NULL DEFAULT 'stripe_event' CHECK (source IN ('stripe_event', 'watch')),
  ADD CONSTRAINT finding_has_its_evidence CHECK (source = 'watch' OR event_id IS NOT NULL);

CREATE INDEX stripe_event_findings_open_by_source ON stripe_event_findings (source, kind) WHERE resolved_at IS NULL;

-- Operations re-issued before this migration get a watch too: one look at once, and the last one a
-- day after their latest re-issue (the defaults' 25 h after a first send, which came before the
-- re-issue). Only re-issues of the last 7 days: an older key is long past Stripe's retention.
INSERT INTO payment_operation_watches (operation_id, watched_from, reissued_at, reissues, final_check_at, next_check_at)
SELECT r.operation_id,
       coalesce((SELECT min(s.occurred_at) FROM payment_operation_events s
                  WHERE s.operation_id = r.operation_id AND s.action = 'attempt_started'), r.last_reissue),
       r.last_reissue, r.reissues, r.last_reissue + interval '25 hours', now()
  FROM (SELECT operation_id, max(occurred_at) AS last_reissue, count(*)::int AS reissues
          FROM payment_operation_events
         WHERE action IN ('auto_reissued', 'operator_reissued')
         GROUP BY operation_id) r
 WHERE r.last_reissue > now() - interval '7 days'
ON CONFLICT (operation_id) DO NOTHING;

-- One remedy per extra PaymentIntent — but a remedy whose Refund Stripe failed AFTER it succeeded
-- (009's mark: the money went back to the merchant, the extra charge stands again) no longer is that
-- PaymentIntent's remedy: the index leaves marked rows out, so a new remedy for the same PaymentIntent
-- (refund id duplicate:{pi}:after:{re_…}, made by the event applier with the fact) can exist.
DROP INDEX payment_operations_one_remedy_per_payment_intent;
CREATE UNIQUE INDEX payment_operations_one_remedy_per_payment_intent ON payment_operations (refund_payment_intent)
  WHERE refund_payment_intent IS NOT NULL AND failed_after_success_at IS NULL;

-- The application role (003) checks and closes watches; it never deletes one (the trigger refuses too).
GRANT SELECT, INSERT, UPDATE ON payment_operation_watches TO charges_app;
REVOKE DELETE, TRUNCATE ON payment_operation_watches FROM charges_app;
