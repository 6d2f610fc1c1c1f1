-- The audit trail partitioned by month (docs/decisions.md, "The audit trail is partitioned by month").
--
-- The trail only grows: three or more rows a charge, for ever. Partitioned by the time a row was written
-- (occurred_at), a month that nothing needs any more can be detached and exported whole
-- (`npm run audit:archive`, docs/operations.md), with no DELETE of millions of rows and no bloat.
--
-- The table that holds the trail so far is not rewritten: it becomes the first partition as it is,
-- covering every time up to the first day of next month. PostgreSQL reads it once to check that bound
-- (under this file's lock, bounded by MIGRATE_STATEMENT_TIMEOUT_MS) and copies no row. Later months get
-- partitions of their own, made ahead of time by payment_operation_events_prepare_partitions (below),
-- which the reconciler calls on every run; a row whose month has no partition yet goes to the default
-- partition, so writing the trail never fails for want of one.
--
-- Sources: PostgreSQL 18 documentation, "Table Partitioning" (5.12: attaching an existing table, the
-- CHECK that spares the scan, default partitions) and ALTER TABLE (ATTACH PARTITION: a partition may
-- not have an identity column of its own; it shares the partitioned table's),
-- https://www.postgresql.org/docs/18/ddl-partitioning.html, https://www.postgresql.org/docs/18/sql-altertable.html.

-- 1. The trail so far, under another name, keeps its rows, constraints and index.
ALTER TABLE payment_operation_events RENAME TO payment_operation_events_before_partitions;
ALTER INDEX payment_operation_events_by_operation RENAME TO payment_operation_events_before_partitions_by_operation;
DROP TRIGGER payment_operation_events_append_only ON payment_operation_events_before_partitions;

-- 2. The partitioned trail: the same columns, defaults and CHECK constraints (same names, so the
--    migrations that widen a CHECK list find them), the same identity, continued where it stopped.
CREATE TABLE payment_operation_events
  (LIKE payment_operation_events_before_partitions INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING IDENTITY)
  PARTITION BY RANGE (occurred_at);
SELECT setval(pg_get_serial_sequence('payment_operation_events', 'id'),
              (SELECT last_value FROM payment_operation_events_id_seq) + 1, false);
ALTER TABLE payment_operation_events_before_partitions ALTER COLUMN id DROP IDENTITY;
ALTER SEQUENCE payment_operation_events_id_seq1 RENAME TO payment_operation_events_id_seq;
ALTER TABLE payment_operation_events
  ADD CONSTRAINT payment_operation_events_operation_id_fkey FOREIGN KEY (operation_id) REFERENCES payment_operations (id);
CREATE INDEX payment_operation_events_by_operation
  ON ONLY payment_operation_events USING brin (operation_id uuid_minmax_multi_ops)
  WITH (pages_per_range = 8, autosummarize = on);
-- Every partition, present and future, refuses UPDATE and DELETE as the trail always has.
CREATE TRIGGER payment_operation_events_append_only
  BEFORE UPDATE OR DELETE ON payment_operation_events
  FOR EACH ROW EXECUTE FUNCTION append_only();

-- 3. The trail so far becomes the first partition; its index and foreign key become the partitioned ones'.
DO $$
DECLARE
  bound timestamptz := (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
BEGIN
  EXECUTE format('ALTER TABLE payment_operation_events ATTACH PARTITION payment_operation_events_before_partitions
                    FOR VALUES FROM (MINVALUE) TO (%L)', bound);
END $$;
ALTER INDEX payment_operation_events_by_operation
  ATTACH PARTITION payment_operation_events_before_partitions_by_operation;
CREATE TABLE payment_operation_events_default PARTITION OF payment_operation_events DEFAULT;

-- 4. Partitions ahead of time. The application role may not create tables (003); this function, run
--    with its owner's rights, creates only partitions of this table, named after their month, and
--    waits at most half a second for the lock (a charge's insert must never queue behind it).
--    Returns one row per month it looked at: the partition, whether it made it now, and the rows of
--    that month already in the default partition (then it makes nothing: see docs/operations.md).
CREATE FUNCTION payment_operation_events_prepare_partitions(months_ahead integer)
RETURNS TABLE (partition_name text, created boolean, default_rows bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public SET lock_timeout = '500ms' AS $$
DECLARE
  first_month timestamptz := date_trunc('month', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
  lo timestamptz;
  hi timestamptz;
  covered timestamptz;
BEGIN
  IF months_ahead IS NULL OR months_ahead < 0 OR months_ahead > 24 THEN
    RAISE EXCEPTION 'months_ahead must be 0..24, got %', months_ahead USING ERRCODE = 'invalid_parameter_value';
  END IF;
  -- Months the first partition already covers need nothing.
  SELECT (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz INTO covered
    FROM pg_class c WHERE c.oid = 'public.payment_operation_events_before_partitions'::regclass;
  FOR i IN 0..months_ahead LOOP
    lo := first_month + make_interval(months => i);
    hi := lo + interval '1 month';
    partition_name := 'payment_operation_events_' || to_char(lo AT TIME ZONE 'UTC', 'YYYY_MM');
    CONTINUE WHEN covered IS NOT NULL AND hi <= covered;
    IF to_regclass('public.' || quote_ident(partition_name)) IS NOT NULL THEN
      created := false;
      default_rows := 0;
      RETURN NEXT;
      CONTINUE;
    END IF;
    SELECT count(*) INTO default_rows FROM public.payment_operation_events_default WHERE occurred_at >= lo AND occurred_at < hi;
    IF default_rows > 0 THEN
      created := false;
      RETURN NEXT;
      CONTINUE;
    END IF;
    EXECUTE format('CREATE TABLE public.%I PARTITION OF public.payment_operation_events FOR VALUES FROM (%L) TO (%L)', partition_name, lo, hi);
    created := true;
    RETURN NEXT;
  END LOOP;
END $$;
REVOKE ALL ON FUNCTION payment_operation_events_prepare_partitions(integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION payment_operation_events_prepare_partitions(integer) TO charges_app;

SELECT count(*) FROM payment_operation_events_prepare_partitions(2);
