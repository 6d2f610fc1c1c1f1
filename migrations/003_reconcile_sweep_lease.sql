-- One reconcile sweep at a time may spend the Stripe request budget (RECONCILE_MAX_RPS): the
-- schedule fires every minute and a sweep may run up to the function's timeout (120 s), so two could
-- otherwise overlap and double the rate. A sweep takes this single-row lease until the end of its
-- invocation; one that finds it held still relays the outbox and publishes the gauges, but makes no
-- Stripe call. A crashed or timed-out sweep's lease lapses at its invocation's deadline, when that
-- invocation can no longer be running. (lambdas/reconcile/sweep-lease.ts)
CREATE TABLE reconcile_sweep_lease (
  id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
  holder      text,
  lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO reconcile_sweep_lease DEFAULT VALUES;
