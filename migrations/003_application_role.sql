-- The application role: what charge, reconcile and ops connect as (least privilege, docs/deploy.md). It may
-- read and write the pipeline's rows and nothing else: no DDL (it owns nothing and may create nothing),
-- no TRUNCATE, no access to schema_migrations. Only the migrate function connects as the owner.
--
-- Created without a password and NOLOGIN: on AWS the migrate function sets the password from the
-- application secret the stack creates (and enables LOGIN) after the migrations ran; locally the
-- owner's DATABASE_URL is used and the role stays a role.
--
-- Roles are cluster-wide, so another database of the same server may have created it already, even
-- at the same moment (the migrations' advisory lock is per database): a duplicate is fine.
DO $$
BEGIN
  CREATE ROLE charges_app NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS;
EXCEPTION
  WHEN duplicate_object OR unique_violation THEN NULL;
END
$$;

DO $$
BEGIN
  EXECUTE format('GRANT CONNECT ON DATABASE %I TO charges_app', current_database());
END
$$;

-- PostgreSQL 15 and later already refuse CREATE on public to PUBLIC; say it, for older defaults.
REVOKE CREATE ON SCHEMA public FROM PUBLIC;
GRANT USAGE ON SCHEMA public TO charges_app;

GRANT SELECT, INSERT, UPDATE, DELETE ON
  payment_operations, payment_operation_events, rejected_messages, outcome_events
  TO charges_app;
GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO charges_app;

-- Tables and sequences later migrations create (as the owner) get the same DML grants by default;
-- a migration that must keep a table from the application revokes explicitly.
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO charges_app;
ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT USAGE, SELECT ON SEQUENCES TO charges_app;
