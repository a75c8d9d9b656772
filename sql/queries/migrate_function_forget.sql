-- Rows of function files this binary does not have ($1: the names it has): their functions
-- were dropped by a migration, or the database was migrated by a newer pgpace before.
-- @params: names
-- @columns: name
DELETE FROM pgpace.schema_function f WHERE f.name <> ALL ($1::text[]) RETURNING f.name
