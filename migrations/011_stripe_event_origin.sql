-- Stripe events are trusted only from this account, in our key's mode, and only once our own key
-- confirms their object (lambdas/payments/event-decisions.ts judgeEventOrigin, confirmRetrieved;
-- docs/decisions.md 2026-12-02). A refused event is a finding like a contradiction, of its own kind:
--   foreign_account:   the event comes from a connected account (its `account`, Connect) or names an
--                      authentication context other than ours (`context`): its object is not ours;
--   livemode_mismatch: the event is of the other mode than our key's (test vs live), or does not say
--                      its mode, or our key's mode cannot be told from its prefix;
--   unconfirmed:       our key's retrieve of the object does not confirm the event: Stripe does not
--                      know it (404), it names another operation, another amount or currency, or it
--                      is not in the final status the event said it was in.
-- None of them changes an operation; the applier marks the inbox row applied with the same outcome.
ALTER TABLE stripe_event_findings DROP CONSTRAINT stripe_event_findings_kind_check;
ALTER TABLE stripe_event_findings ADD CONSTRAINT stripe_event_findings_kind_check
  CHECK (kind IN ('unrecorded_charge', 'contradiction', 'foreign_account', 'livemode_mismatch', 'unconfirmed'));

-- The reconciler's silence gauge (inbox-store.ts inboxGauges, eventsSilentSeconds): "no event has
-- arrived since the first send of an operation Stripe answered". Two index look-ups, never a scan:
-- the newest event received, and the oldest first send after it among answered operations.
-- first_attempted_at is written once per key generation (at the first claim) and external_id once
-- (at the answer), so the partial index costs one entry per answered operation.
CREATE INDEX stripe_events_received ON stripe_events (received_at);
CREATE INDEX payment_operations_first_sent_answered ON payment_operations (first_attempted_at) WHERE external_id IS NOT NULL;
