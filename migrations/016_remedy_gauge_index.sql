-- The DuplicateChargeRemedied gauge reads remedy rows only, again (lambdas/payments/operations-store.ts
-- countRecentRemedies). It counts refund operations of an extra PaymentIntent made in the last window,
-- and was meant to read the partial index over remedy rows; since migration 012 narrowed that index
-- to remedies not failed after success, the gauge's condition no longer implies the index's, and every
-- reconcile run read the whole table (found by `npm run bench:scale`: thousands of buffers with a long
-- history against tens without). An index of its own over remedy rows, by creation time: only remedy
-- rows are in it, and no column of it ever changes, so no charge writes it and no update loses HOT.
CREATE INDEX payment_operations_remedies_by_created ON payment_operations (created_at) WHERE refund_payment_intent IS NOT NULL;
