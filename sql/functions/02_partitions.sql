-- 02_partitions.sql - daily partitions of the attempt log and the dead letters.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Creates the daily partitions of `parent` from today (UTC) through `days_ahead` days ahead.
-- Returns how many it created. Safe to call repeatedly and concurrently with inserts.
CREATE OR REPLACE FUNCTION pgpace.ensure_partitions(parent regclass, days_ahead integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    day date := (now() AT TIME ZONE 'UTC')::date;
    created integer := 0;
    child text;
    rel_name text;
    rel_schema text;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'ensure_partitions: days_ahead must be between 0 and 366, got %', days_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT c.relname, n.nspname INTO rel_name, rel_schema
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = parent;
    FOR i IN 0 .. days_ahead LOOP
        child := rel_name || '_p' || to_char(day + i, 'YYYYMMDD');
        IF to_regclass(format('%I.%I', rel_schema, child)) IS NULL THEN
            EXECUTE format('CREATE TABLE %I.%I PARTITION OF %s FOR VALUES FROM (%L) TO (%L)',
                           rel_schema, child, parent,
                           (day + i)::timestamp AT TIME ZONE 'UTC',
                           (day + i + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END
$$;

-- Drops daily partitions of `parent` whose whole range ended before now() - keep.
-- Returns how many it dropped.
CREATE OR REPLACE FUNCTION pgpace.drop_partitions(parent regclass, keep interval)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    part record;
    dropped integer := 0;
BEGIN
    IF keep IS NULL OR keep < interval '0' THEN
        RAISE EXCEPTION 'drop_partitions: keep must be a non-negative interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR part IN
        SELECT c.oid::regclass AS child, n.nspname, c.relname
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
          JOIN pg_namespace n ON n.oid = c.relnamespace
         WHERE i.inhparent = parent
           AND c.relname ~ '_p[0-9]{8}$'
           AND (to_date(right(c.relname, 8), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC'
               <= now() - keep
    LOOP
        EXECUTE format('DROP TABLE %I.%I', part.nspname, part.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.ensure_partitions(regclass, integer),
    pgpace.drop_partitions(regclass, interval) FROM PUBLIC;
