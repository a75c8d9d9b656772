-- 04_item_partitions.sql - retention of items by whole days: partitions of pgpace.item and
-- the idempotency keys of dropped days.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Creates the partition of pgpace.item for one UTC day unless it exists. Returns whether it
-- created it. A day with ids already in the DEFAULT partition is skipped (creating it would fail
-- on them): those items stay in the DEFAULT partition.
CREATE OR REPLACE FUNCTION pgpace.create_item_partition(day date)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    child text := 'item_p' || to_char(day, 'YYYYMMDD');
    lo bigint := pgpace.item_day_first_id(day);
    hi bigint := pgpace.item_day_first_id(day + 1);
    taken boolean;
BEGIN
    IF day IS NULL THEN
        RAISE EXCEPTION 'create_item_partition: day must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF to_regclass(format('pgpace.%I', child)) IS NOT NULL THEN
        RETURN false;
    END IF;
    SELECT EXISTS (SELECT 1 FROM pgpace.item_default d WHERE d.id >= lo AND d.id < hi) INTO taken;
    IF taken THEN
        RETURN false;
    END IF;
    EXECUTE format('CREATE TABLE pgpace.%I PARTITION OF pgpace.item FOR VALUES FROM (%s) TO (%s)',
                   child, lo, hi);
    RETURN true;
END
$$;

-- Creates the item partitions from today (UTC) through `days_ahead` days ahead; returns how many
-- it created. Creating a partition locks pgpace.item, and while that request waits every enqueue
-- and claim queues behind it: when the lock is not granted within 200 ms (a long transaction
-- holds the table), the rest waits for the next run (hourly, and days are made 7 ahead) instead
-- of stalling enqueues and claims any longer.
CREATE OR REPLACE FUNCTION pgpace.ensure_item_partitions(days_ahead integer)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    day date := (now() AT TIME ZONE 'UTC')::date;
    created integer := 0;
BEGIN
    IF days_ahead IS NULL OR days_ahead < 0 OR days_ahead > 366 THEN
        RAISE EXCEPTION 'ensure_item_partitions: days_ahead must be between 0 and 366, got %', days_ahead
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 0 .. days_ahead LOOP
        BEGIN
            IF pgpace.create_item_partition(day + i) THEN
                created := created + 1;
            END IF;
        EXCEPTION WHEN lock_not_available THEN
            EXIT;
        END;
    END LOOP;
    RETURN created;
END
$$;

-- Retention of items by whole partitions; never deletes item rows. Drops a day's partition when
-- its range ended at least `keep` ago and none of its items is queued (pending, in flight, or
-- waiting for a retry) or dead-lettered: those still need their payload (delivery, dlq replay).
-- Ids cannot move (the webhook-id receivers de-duplicate on is derived from the id), so one such
-- item keeps its whole day; dead letters go after dead_letter_retention_days or `dlq purge`.
-- item_legacy (ids from before 0007) is dropped under the same conditions once its newest
-- created_at is older than `keep`. The DEFAULT partition is never dropped.
--
-- The final check and the drop run under an ACCESS EXCLUSIVE lock on pgpace.item, taken first
-- (taking a partition's lock before the parent's could deadlock with a claim): no transaction
-- that could still add a queue row for the day is then running. While the request waits, every
-- enqueue and claim queues behind it, so it waits at most 200 ms (a long transaction holds the
-- table); the rest then waits for the next run. The dropped ranges are recorded for
-- pgpace.purge_item_keys, which deletes their idempotency keys in batches.
-- Returns how many partitions it dropped.
CREATE OR REPLACE FUNCTION pgpace.drop_item_partitions(keep interval)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '200ms'
AS $$
DECLARE
    part record;
    cutoff timestamptz;
    newest timestamptz;
    first_id bigint;
    busy boolean;
    locked boolean := false;
    dropped integer := 0;
BEGIN
    IF keep IS NULL OR keep < interval '0' THEN
        RAISE EXCEPTION 'drop_item_partitions: keep must be a non-negative interval'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    cutoff := now() - keep;
    FOR part IN
        SELECT c.relname, b[1] AS lo_text, b[2]::bigint AS hi
          FROM pg_inherits i
          JOIN pg_class c ON c.oid = i.inhrelid
         CROSS JOIN LATERAL regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                         '^FOR VALUES FROM \(''?([-0-9]+|MINVALUE)''?\) TO \(''?([-0-9]+)''?\)$') AS b
         WHERE i.inhparent = 'pgpace.item'::regclass AND b IS NOT NULL -- not the DEFAULT partition
         ORDER BY b[2]::bigint
    LOOP
        first_id := CASE WHEN part.lo_text = 'MINVALUE' THEN -9223372036854775808 ELSE part.lo_text::bigint END;
        -- Cheap checks first, without locks: most runs find nothing to drop.
        IF part.lo_text = 'MINVALUE' THEN
            -- item_legacy: ids follow creation, so the highest id's row is (about) the newest.
            EXECUTE format('SELECT l.created_at FROM pgpace.%I l ORDER BY l.id DESC LIMIT 1', part.relname)
               INTO newest;
            CONTINUE WHEN newest > cutoff;
        ELSE
            CONTINUE WHEN pgpace.item_id_day(part.hi)::timestamp AT TIME ZONE 'UTC' > cutoff;
        END IF;
        -- One statement, one snapshot: an item moving between queue and dead_letter is seen in one.
        SELECT EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id >= first_id AND q.item_id < part.hi)
            OR EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id >= first_id AND d.item_id < part.hi)
          INTO busy;
        CONTINUE WHEN busy;
        IF part.lo_text = 'MINVALUE' THEN
            -- Exactly, once, just before dropping (a sequential scan).
            EXECUTE format('SELECT max(l.created_at) FROM pgpace.%I l', part.relname) INTO newest;
            CONTINUE WHEN newest > cutoff;
        END IF;
        IF NOT locked THEN
            BEGIN
                LOCK TABLE pgpace.item IN ACCESS EXCLUSIVE MODE;
            EXCEPTION WHEN lock_not_available THEN
                EXIT;
            END;
            locked := true;
        END IF;
        SELECT EXISTS (SELECT 1 FROM pgpace.queue q WHERE q.item_id >= first_id AND q.item_id < part.hi)
            OR EXISTS (SELECT 1 FROM pgpace.dead_letter d WHERE d.item_id >= first_id AND d.item_id < part.hi)
          INTO busy;
        CONTINUE WHEN busy;
        EXECUTE format('DROP TABLE pgpace.%I', part.relname);
        INSERT INTO pgpace.item_key_purge (lo, hi) VALUES (first_id, part.hi) ON CONFLICT (lo) DO NOTHING;
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END
$$;

-- Deletes at most `batch` idempotency keys of dropped partitions (pgpace.item_key_purge), by item
-- id range on item_key's item_id index. The one row-by-row delete of retention: a unique index
-- cannot span partitions, so keys live in one table, and they are narrow. A key is forgotten
-- once its item's day is dropped; a repeat of it after that enqueues a new item.
-- Returns how many keys it deleted; fewer than `batch` means none are left.
CREATE OR REPLACE FUNCTION pgpace.purge_item_keys(batch integer)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
    n bigint;
    deleted bigint := 0;
BEGIN
    IF batch IS NULL OR batch < 1 THEN
        RAISE EXCEPTION 'purge_item_keys: batch must be at least 1, got %', batch
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR r IN SELECT p.lo, p.hi FROM pgpace.item_key_purge p ORDER BY p.lo LOOP
        -- item_id is unique here (one key per item): both steps are item_id index scans.
        DELETE FROM pgpace.item_key k
         WHERE k.item_id = ANY (ARRAY(SELECT k2.item_id FROM pgpace.item_key k2
                                       WHERE k2.item_id >= r.lo AND k2.item_id < r.hi
                                       ORDER BY k2.item_id LIMIT batch - deleted));
        GET DIAGNOSTICS n = ROW_COUNT;
        deleted := deleted + n;
        IF NOT EXISTS (SELECT 1 FROM pgpace.item_key k WHERE k.item_id >= r.lo AND k.item_id < r.hi) THEN
            DELETE FROM pgpace.item_key_purge p WHERE p.lo = r.lo;
        END IF;
        EXIT WHEN deleted >= batch;
    END LOOP;
    RETURN deleted;
END
$$;

-- Housekeeping is the dispatcher's, not the producers'.
REVOKE EXECUTE ON FUNCTION pgpace.create_item_partition(date),
    pgpace.ensure_item_partitions(integer), pgpace.drop_item_partitions(interval),
    pgpace.purge_item_keys(integer) FROM PUBLIC;
