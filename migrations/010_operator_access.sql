-- What the operator tool records beside the audit trail of payment_operation_events.
--
-- operator_reads: who read producers' raw message bodies (`rejected list --with-body`): a body may
-- hold anything a producer sent. The row is written by the statement that reads the bodies
-- (lambdas/ops/queries.ts listRejected), so no body is shown without it. Append-only, like the trail.
CREATE TABLE operator_reads (
  id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  occurred_at          timestamptz NOT NULL DEFAULT now(),
  -- operator:<IAM ARN> when the ops function verified the caller with STS; operator:<name> (said, not proved) on a laptop or bastion.
  actor                text        NOT NULL,
  verified             boolean     NOT NULL,
  command              text        NOT NULL,
  what                 text        NOT NULL CHECK (what IN ('rejected_message_body')),
  rejected_message_ids bigint[]    NOT NULL,
  detail               jsonb       NOT NULL DEFAULT '{}'::jsonb
);

CREATE TRIGGER operator_reads_append_only
  BEFORE UPDATE OR DELETE ON operator_reads
  FOR EACH ROW EXECUTE FUNCTION append_only();

-- ops_identity_proofs: each identity proof the ops function accepted (lambdas/ops/identity.ts), by
-- its signature, so that one proof serves one command: a proof copied from a request cannot be sent
-- again within STS's 15 minutes. Rows older than a day are removed by the insert that adds one.
CREATE TABLE ops_identity_proofs (
  signature  text        PRIMARY KEY CHECK (signature ~ '^[0-9a-f]{64}$'),
  caller_arn text        NOT NULL,
  used_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX ops_identity_proofs_used_at ON ops_identity_proofs (used_at);
