-- The outcome-consumer kit's tables (lambdas/consumers/kit/): one inbox for every consumer that uses
-- the kit, keyed by (consumer, event_id). In a schema of its own: a consumer never writes the
-- pipeline's tables, and the pipeline never reads these. Applied with the tracking table
-- outcome_consumer.schema_migrations (not the pipeline's schema_migrations).
--
-- An outbox publishes at least once, so every consumer must deduplicate. One row
-- per event a consumer has seen, written by ONE statement on arrival (kit/inbox-store.ts, admit):
-- a re-delivery finds its row and learns what was done with it.

CREATE SCHEMA IF NOT EXISTS outcome_consumer;

CREATE TABLE outcome_consumer.inbox (
  consumer           text        NOT NULL CHECK (consumer ~ '^[a-z][a-z0-9-]{0,62}$'),
  -- detail.eventId: the same on every re-send by the outbox (EventBridge's own envelope id is not).
  event_id           uuid        NOT NULL,
  operation_id       uuid        NOT NULL,
  -- detail.sequence; NULL for an event from a producer before sequences existed (see heads below).
  sequence           bigint      CHECK (sequence >= 0),
  detail_type        text        NOT NULL,
  -- The policy the consumer declared when the event arrived; its row is worked by that policy.
  policy             text        NOT NULL CHECK (policy IN ('idempotent', 'at-least-once', 'at-most-once')),
  --   attempting  the effect was (or is being) started: recorded BEFORE the call. What a crash in
  --               this state means is the policy's: run again (idempotent, at-least-once) or
  --               give up (at-most-once).
  --   pending     an attempt ended with a definite "not executed" answer (429, refused connection):
  --               safe to run again under every policy.
  --   done        the effect answered success and that answer is recorded.
  --   stale       a newer event of the same operation was applied first: ignored, no effect.
  --   abandoned   at-most-once only: an attempt may or may not have taken effect (ambiguous answer,
  --               or a crash after the claim); never tried again. The accepted miss.
  --   failed      the provider refused the effect for good (a 4xx that no retry can fix).
  state              text        NOT NULL CHECK (state IN ('attempting', 'pending', 'done', 'stale', 'abandoned', 'failed')),
  detail             jsonb       NOT NULL,
  deliveries         integer     NOT NULL DEFAULT 1 CHECK (deliveries >= 1),
  attempts           integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
  -- The worker running the effect. Claim and record are fenced by the token, so a slow invocation
  -- whose lease ran out cannot overwrite what a later one recorded.
  lease_token        uuid,
  lease_until        timestamptz,
  first_attempted_at timestamptz,
  done_at            timestamptz,
  result             jsonb,
  last_error         text,
  received_at        timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, event_id),
  CONSTRAINT attempting_has_lease CHECK (state <> 'attempting' OR (lease_token IS NOT NULL AND lease_until IS NOT NULL))
);

CREATE INDEX inbox_open ON outcome_consumer.inbox (consumer, updated_at) WHERE state IN ('attempting', 'pending');

-- The newest event applied per operation ("newest sequence wins"). An event without a sequence is
-- stored as -1: older than any numbered event (see kit/ordering.ts for why).
CREATE TABLE outcome_consumer.operation_heads (
  consumer     text        NOT NULL,
  operation_id uuid        NOT NULL,
  sequence     bigint      NOT NULL CHECK (sequence >= -1),
  event_id     uuid        NOT NULL,
  updated_at   timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, operation_id)
);

-- Messages that are not an outcome event this consumer can read (not JSON, not an EventBridge
-- envelope, a detail that fails the schema, a detail-type it did not subscribe to): recorded once
-- per SQS message and acknowledged, so one bad message never blocks the queue or loops to the DLQ.
CREATE TABLE outcome_consumer.poison_events (
  consumer      text        NOT NULL,
  message_id    text        NOT NULL,
  reason        text        NOT NULL,
  -- The raw body, cut at 64 KiB. Outcome events carry no card data or secrets (lambdas/events/contract.ts).
  body          text        NOT NULL,
  deliveries    integer     NOT NULL DEFAULT 1,
  first_seen_at timestamptz NOT NULL DEFAULT now(),
  last_seen_at  timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
