-- A claim's attempt number and an outcome's PaymentIntent status have columns of their own in the
-- audit trail (docs/decisions.md, 2026-12-03, "The audit trail keeps a claim's attempt and an
-- outcome's PaymentIntent status in columns"), as 023 did for the lease.
--
-- Every claim's `attempt_started` line carried its attempt number in `detail` as {"attempt": n}, and
-- nearly every outcome line the PaymentIntent's status as {"paymentIntentStatus": "<status>"}: 29 and
-- 41 bytes of jsonb, where an integer takes 4 and the status as text about 10, written to the heap and
-- the WAL for every charge. From here the charge path's writers put them in `attempt` and
-- `payment_intent_status`; `detail` keeps the rest. Readers see one shape whatever a line's age: the
-- engine's evidence, `ops operations show` and the trail's export read the detail with the columns put
-- back under their keys (audit-trail.ts AUDIT_DETAIL), so a line written before this migration (keys
-- in detail, columns NULL), or by a writer that still puts them in detail, reads as it always did.
--
-- Adding nullable columns without a default is a catalog change on the partitioned trail and on every
-- partition: no row is read or rewritten. The trail stays append-only (its trigger refuses UPDATE), so
-- an old line never gains the columns.
ALTER TABLE payment_operation_events
  ADD COLUMN attempt integer,
  ADD COLUMN payment_intent_status text;
COMMENT ON COLUMN payment_operation_events.attempt IS
  'The attempt this claim starts (attempt_started); before migration 029 in detail->>''attempt''.';
COMMENT ON COLUMN payment_operation_events.payment_intent_status IS
  'The PaymentIntent''s status an outcome was decided on, as Stripe gave it; before migration 029 (and from writers off the charge path) in detail->>''paymentIntentStatus''.';
