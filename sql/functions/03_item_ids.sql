-- 03_item_ids.sql - item ids, which carry their UTC day (the scheme is described in
-- sql/migrations/0007_item_partitions.sql).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- A new item's id: its UTC day (of the transaction's start, as created_at) in the high bits.
-- LANGUAGE sql with a standard body: names are bound at creation and the planner may inline it.
CREATE OR REPLACE FUNCTION pgpace.next_item_id() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN ((((now() AT TIME ZONE 'UTC')::date - DATE '1970-01-01')::bigint) << 33)
       | (nextval('pgpace.item_id_seq') & 8589934591);

-- The UTC day an item id belongs to (1970-01-01 for ids from before 0007), and a day's first id.
CREATE OR REPLACE FUNCTION pgpace.item_id_day(id bigint) RETURNS date
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN DATE '1970-01-01' + (id >> 33)::integer;

CREATE OR REPLACE FUNCTION pgpace.item_day_first_id(day date) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ((day - DATE '1970-01-01')::bigint) << 33;

-- Producers (USAGE on the schema) must not take ids.
REVOKE EXECUTE ON FUNCTION pgpace.next_item_id(), pgpace.item_id_day(bigint),
    pgpace.item_day_first_id(date) FROM PUBLIC;
