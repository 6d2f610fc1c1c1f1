-- The receipt notifier's own record (lambdas/consumers/receipts/), in its own schema. Applied with
-- the tracking table receipts.schema_migrations. It never writes the pipeline's tables; the kit's
-- inbox (outcome_consumer.inbox) says what was decided for each event, this table says what the
-- e-mail provider accepted.

CREATE SCHEMA IF NOT EXISTS receipts;

CREATE TABLE receipts.sent_receipts (
  -- The outcome event the receipt is for (detail.eventId).
  event_id            uuid        PRIMARY KEY,
  consumer            text        NOT NULL,
  operation_id        uuid        NOT NULL,
  order_id            text        NOT NULL,
  kind                text        NOT NULL CHECK (kind IN ('charge', 'refund')),
  amount              bigint      NOT NULL CHECK (amount > 0),
  currency            text        NOT NULL,
  -- The provider's id of the LAST accepted send.
  provider_message_id text        NOT NULL,
  -- Sends the provider accepted for this event, as far as we know: 2 or more is a duplicate we
  -- caused (at-least-once after an ambiguous answer) — the accepted failure, made visible.
  -- A send whose answer we never saw (a crash) is not counted here: only the provider knows.
  accepted_sends      integer     NOT NULL DEFAULT 1 CHECK (accepted_sends >= 1),
  first_sent_at       timestamptz NOT NULL DEFAULT now(),
  last_sent_at        timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX sent_receipts_by_order ON receipts.sent_receipts (order_id);
