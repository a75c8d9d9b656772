-- Creates what the migration runner itself needs; runs under the migration advisory lock.
CREATE SCHEMA IF NOT EXISTS pgpace;
CREATE TABLE IF NOT EXISTS pgpace.schema_migration (
    version    integer PRIMARY KEY,
    name       text NOT NULL,
    checksum   text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
