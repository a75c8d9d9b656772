-- Creates what the migration runner itself needs; runs under the migration advisory lock.
CREATE SCHEMA IF NOT EXISTS pgpace;
CREATE TABLE IF NOT EXISTS pgpace.schema_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- The function files (sql/functions) as last applied: one row per file of the binary that ran
-- `pgpace migrate` last; a file is re-applied when its checksum differs from its row's.
CREATE TABLE IF NOT EXISTS pgpace.schema_function (
    name       text PRIMARY KEY,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
-- One row: the digest of all those files together (migrate_functions_digest()), which
-- sql/queries/schema_version.sql reports so that a binary can tell whether the database's
-- functions are its own.
CREATE TABLE IF NOT EXISTS pgpace.schema_function_digest (
    one        boolean PRIMARY KEY DEFAULT true CONSTRAINT schema_function_digest_one CHECK (one),
    digest     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
