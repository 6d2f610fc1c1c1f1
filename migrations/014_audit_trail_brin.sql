-- The audit trail without a B-tree (docs/decisions.md, "The audit trail is found through a block-range index").
--
-- Every charge appends three audit rows, and each row's entry in the B-tree on (operation_id, id) cost
-- 80 bytes of WAL: 240 bytes a charge, the largest single index cost on the charge path
-- (`npm run bench:peers -- --clean-only --contestants ours --latency 0` prints the breakdown). The
-- trail is read by operation only (an operator's `operations show`, the engine's evidence for an
-- ambiguous attempt), never by id, and nothing needs its uniqueness: the identity column is unique by
-- construction and the table is append-only (its trigger).
--
-- Operation ids are UUIDv7, ordered by creation time, and an operation's rows are appended close to
-- where its first row went; a block-range (BRIN) index over operation_id finds them by reading a few
-- block ranges, and writes WAL only when a range is summarised, not per row. minmax-multi keeps the
-- few late rows of an old operation (a reconcile hours later, an operator's note) as points of their
-- range instead of widening it; autosummarize summarises each range as soon as it is full, so a
-- look-up never reads more than the newest range unsummarised.
-- Sources: PostgreSQL 18 documentation, "BRIN Indexes" (operator classes *_minmax_multi_ops,
-- pages_per_range, autosummarize), https://www.postgresql.org/docs/18/brin.html.
CREATE INDEX payment_operation_events_by_operation
  ON payment_operation_events USING brin (operation_id uuid_minmax_multi_ops)
  WITH (pages_per_range = 8, autosummarize = on);
ALTER TABLE payment_operation_events DROP CONSTRAINT payment_operation_events_pkey;
