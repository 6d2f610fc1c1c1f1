-- A claim's lease has columns of its own in the audit trail (docs/decisions.md, "The audit trail keeps
-- a claim's lease in columns").
--
-- Every claim's `attempt_started` line carried its lease token and lease end in `detail` as JSON text
-- ({"leaseToken": "<36 characters>", "leaseUntil": "<32 characters>"}), and every outcome line the
-- token again: about 110 bytes of keys, text and entry headers on the claim's line and 50 on the
-- outcome's, written to the heap and the WAL for every charge. As a uuid and a timestamptz they are 24
-- bytes. From here writers put them in `lease_token` and `lease_until`; `detail` keeps the rest
-- (`attempt`, the Stripe event id of an event's claim, an outcome's Stripe status). Readers see one
-- shape whatever a line's age: the engine's evidence and `ops operations show` read the detail with the
-- two columns put back under their old keys (operations-store.ts AUDIT_DETAIL), so a line written
-- before this migration (keys in detail, columns NULL) reads as it always did.
--
-- Adding nullable columns without a default is a catalog change on the partitioned trail and on every
-- partition: no row is read or rewritten. The trail stays append-only (its trigger refuses UPDATE), so
-- an old line never gains the columns.
ALTER TABLE payment_operation_events
  ADD COLUMN lease_token uuid,
  ADD COLUMN lease_until timestamptz;
COMMENT ON COLUMN payment_operation_events.lease_token IS
  'The lease of the claim this line belongs to (attempt_started, and the outcome that ends it); before migration 023 in detail->>''leaseToken''.';
COMMENT ON COLUMN payment_operation_events.lease_until IS
  'When the claim''s lease ran out (attempt_started); before migration 023 in detail->>''leaseUntil''.';
