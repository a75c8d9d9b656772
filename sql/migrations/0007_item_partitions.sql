-- 0007_item_partitions.sql - delivered items are dropped by whole days, like the attempt log
-- and dead letters (retention never deletes rows one by one).
--
-- Item ids carry their day: id = (days since 1970-01-01 UTC) << 33 | (nextval & (2^33 - 1))
-- (pgpace.next_item_id(), the column default). pgpace.item is partitioned by RANGE (id), one
-- partition per UTC day (item_pYYYYMMDD), so a lookup by id still touches one partition and a
-- day can be dropped once nothing needs its items. Shift 33, not more: ids stay below 2^53 (until
-- the year 4840), so JSON and JavaScript consumers of {"id": ...} keep them exact, and a day still
-- has room for 8.6 billion ids.
--
-- Idempotency keys move to their own, unpartitioned table pgpace.item_key: a unique index on a
-- partitioned table must contain the partition key, and only a real unique index keeps today's
-- semantics under every isolation level (ON CONFLICT waits for a concurrent inserter of the same
-- key; a key taken by a transaction the snapshot cannot see is a serialization failure).
-- item.idempotency_key stays as a plain column: tools and tests read it.
--
-- Existing items keep their ids (webhook-id is derived from them): the old table becomes the
-- partition item_legacy. Its identity ids are far below any day's ids; its range ends at
-- greatest(2^33, max(id) + 1), i.e. it is "day 0" (1970-01-01), so every later day stays free for
-- its own partition. Attaching it scans it once to check that range (a CHECK constraint added
-- first would scan just the same); the scan only reads. An empty old table (a fresh install) is
-- dropped instead. The whole migration is one transaction holding pgpace.item, so enqueues wait
-- for it: 1.3 s for a million existing items, a third of them keyed (measured, 2 cores).

ALTER TABLE pgpace.item RENAME TO item_legacy;
ALTER INDEX pgpace.item_pkey RENAME TO item_legacy_pkey;
DROP INDEX pgpace.item_idempotency;
ALTER TABLE pgpace.item_legacy ALTER COLUMN id DROP IDENTITY;

CREATE SEQUENCE pgpace.item_id_seq AS bigint;

-- A new item's id: its UTC day (of the transaction's start, as created_at) in the high bits.
-- LANGUAGE sql with a standard body: names are bound at creation and the planner may inline it.
CREATE FUNCTION pgpace.next_item_id() RETURNS bigint
LANGUAGE sql VOLATILE PARALLEL UNSAFE
RETURN ((((now() AT TIME ZONE 'UTC')::date - DATE '1970-01-01')::bigint) << 33)
       | (nextval('pgpace.item_id_seq') & 8589934591);

-- The UTC day an item id belongs to (1970-01-01 for ids from before 0007), and a day's first id.
CREATE FUNCTION pgpace.item_id_day(id bigint) RETURNS date
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN DATE '1970-01-01' + (id >> 33)::integer;

CREATE FUNCTION pgpace.item_day_first_id(day date) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN ((day - DATE '1970-01-01')::bigint) << 33;

-- The payload record, as in 0001 (same columns, defaults and constraints), partitioned by day.
CREATE TABLE pgpace.item (
    id              bigint NOT NULL DEFAULT pgpace.next_item_id(),
    -- No foreign key: see 0001 (enqueue takes one KEY SHARE lock on the customer instead).
    customer_id     bigint NOT NULL,
    carrier         text CONSTRAINT item_carrier_valid CHECK (pgpace.valid_name(carrier)),
    kind            text CONSTRAINT item_kind_valid CHECK (length(kind) BETWEEN 1 AND 128),
    payload         jsonb NOT NULL,
    -- Unique per customer through pgpace.item_key, not through an index here.
    idempotency_key text CONSTRAINT item_idempotency_key_valid
                    CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    priority        smallint NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (id)
) PARTITION BY RANGE (id);

-- Whatever was granted on the old table (by an operator; pgpace itself grants nothing on it).
DO $$
DECLARE
    a record;
BEGIN
    FOR a IN
        SELECT x.privilege_type, x.grantee, x.is_grantable
          FROM pg_class c, aclexplode(c.relacl) x
         WHERE c.oid = 'pgpace.item_legacy'::regclass AND x.grantee <> c.relowner
    LOOP
        EXECUTE format('GRANT %s ON pgpace.item TO %s%s', a.privilege_type,
                       CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                            ELSE quote_ident(pg_get_userbyid(a.grantee)) END,
                       CASE WHEN a.is_grantable THEN ' WITH GRANT OPTION' ELSE '' END);
    END LOOP;
END
$$;

-- Idempotency keys: the unique index the partitioned item cannot have. No foreign key to item
-- (its days are dropped); rows are written only by pgpace's enqueue functions.
CREATE TABLE pgpace.item_key (
    customer_id     bigint NOT NULL,
    idempotency_key text NOT NULL,
    item_id         bigint NOT NULL
);
INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id)
SELECT l.customer_id, l.idempotency_key, l.id FROM pgpace.item_legacy l
 WHERE l.idempotency_key IS NOT NULL;
ALTER TABLE pgpace.item_key ADD PRIMARY KEY (customer_id, idempotency_key);
-- Retention deletes the keys of a dropped day by item id range.
CREATE INDEX item_key_item ON pgpace.item_key (item_id);

-- Id ranges of dropped partitions whose keys are still to be deleted (pgpace.purge_item_keys).
CREATE TABLE pgpace.item_key_purge (
    lo bigint PRIMARY KEY,
    hi bigint NOT NULL
);

DO $$
DECLARE
    bound bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pgpace.item_legacy) THEN
        DROP TABLE pgpace.item_legacy;
        RETURN;
    END IF;
    SELECT greatest(8589934592, max(l.id) + 1) INTO bound FROM pgpace.item_legacy l;
    EXECUTE format('ALTER TABLE pgpace.item ATTACH PARTITION pgpace.item_legacy '
                   'FOR VALUES FROM (MINVALUE) TO (%s)', bound);
END
$$;

-- Catches ids outside the created days (a missed ensure run, explicit ids), so that enqueue can
-- never fail for want of a partition. Retention never drops it.
CREATE TABLE pgpace.item_default PARTITION OF pgpace.item DEFAULT;

-- Creates the partition of pgpace.item for one UTC day unless it exists. Returns whether it
-- created it. A day with ids already in the DEFAULT partition is skipped (creating it would fail
-- on them): those items stay in the DEFAULT partition.
CREATE FUNCTION pgpace.create_item_partition(day date)
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
CREATE FUNCTION pgpace.ensure_item_partitions(days_ahead integer)
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
CREATE FUNCTION pgpace.drop_item_partitions(keep interval)
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
CREATE FUNCTION pgpace.purge_item_keys(batch integer)
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

SELECT pgpace.ensure_item_partitions(7);

-- The enqueue functions, with identical signatures, behaviour, messages and SQLSTATEs; only the
-- idempotency check moved to pgpace.item_key. CREATE OR REPLACE keeps their grants.
CREATE OR REPLACE FUNCTION pgpace.enqueue(
    customer        text,
    payload         jsonb,
    carrier         text DEFAULT NULL,
    kind            text DEFAULT NULL,
    run_at          timestamptz DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    priority        integer DEFAULT 0)
RETURNS bigint
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    cust_id      bigint;
    cust_max     integer;
    item_id      bigint;
    new_id       bigint;
    size_limit   bigint;
    payload_size bigint;
BEGIN
    IF enqueue.customer IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: customer must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF enqueue.carrier IS NOT NULL AND NOT pgpace.valid_name(enqueue.carrier) THEN
        RAISE EXCEPTION 'pgpace.enqueue: invalid carrier %', quote_literal(left(enqueue.carrier, 140))
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'carrier names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit';
    END IF;
    IF enqueue.kind IS NOT NULL AND length(enqueue.kind) NOT BETWEEN 1 AND 128 THEN
        RAISE EXCEPTION 'pgpace.enqueue: kind must be 1 to 128 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.idempotency_key IS NOT NULL AND length(enqueue.idempotency_key) NOT BETWEEN 1 AND 255 THEN
        RAISE EXCEPTION 'pgpace.enqueue: idempotency_key must be 1 to 255 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF enqueue.run_at IS NOT NULL AND NOT isfinite(enqueue.run_at) THEN
        RAISE EXCEPTION 'pgpace.enqueue: run_at must be a finite timestamp'
            USING ERRCODE = 'invalid_datetime_format';
    END IF;
    IF enqueue.priority IS NULL OR enqueue.priority NOT BETWEEN -32768 AND 32767 THEN
        RAISE EXCEPTION 'pgpace.enqueue: priority must be between -32768 and 32767, got %', enqueue.priority
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    SELECT c.id, c.max_attempts INTO cust_id, cust_max
      FROM pgpace.customer c WHERE c.name = enqueue.customer
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'pgpace.enqueue: unknown customer %', quote_literal(left(enqueue.customer, 140))
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'create it first: pgpace customer set <name> --rate ... --url ...';
    END IF;

    SELECT s.value::bigint INTO size_limit FROM pgpace.setting s WHERE s.name = 'max_payload_bytes';
    payload_size := octet_length(enqueue.payload::text);
    IF payload_size > size_limit THEN
        RAISE EXCEPTION 'pgpace.enqueue: payload is % bytes, above the limit of % bytes', payload_size, size_limit
            USING ERRCODE = 'program_limit_exceeded',
                  HINT = 'the limit is the max_payload_bytes row of pgpace.setting';
    END IF;

    IF enqueue.idempotency_key IS NULL THEN
        INSERT INTO pgpace.item AS i (customer_id, carrier, kind, payload, priority, run_at)
        VALUES (cust_id, enqueue.carrier, enqueue.kind, enqueue.payload, enqueue.priority,
                coalesce(enqueue.run_at, now()))
        RETURNING i.id INTO item_id;
    ELSE
        -- The id first, so that the key row can name it; the item only when the key is new.
        new_id := pgpace.next_item_id();
        INSERT INTO pgpace.item_key AS k (customer_id, idempotency_key, item_id)
        VALUES (cust_id, enqueue.idempotency_key, new_id)
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING k.item_id INTO item_id;

        IF item_id IS NULL THEN
            -- The key exists (possibly committed by a concurrent transaction we just waited for).
            SELECT k.item_id INTO item_id FROM pgpace.item_key k
             WHERE k.customer_id = cust_id AND k.idempotency_key = enqueue.idempotency_key;
            IF item_id IS NULL THEN
                RAISE EXCEPTION 'pgpace.enqueue: idempotency key % is taken by a transaction this snapshot cannot see',
                                quote_literal(enqueue.idempotency_key)
                    USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
            END IF;
            RETURN item_id;
        END IF;

        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
        VALUES (new_id, cust_id, enqueue.carrier, enqueue.kind, enqueue.payload, enqueue.idempotency_key,
                enqueue.priority, coalesce(enqueue.run_at, now()));
    END IF;

    INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
    VALUES (item_id, cust_id, coalesce(enqueue.carrier, ''), enqueue.priority::smallint,
            coalesce(enqueue.run_at, now()), cust_max);

    -- Payload "<customer id> <carrier>": the dispatcher wakes that (customer, carrier) pair.
    PERFORM pg_notify('pgpace_enqueue', cust_id::text || ' ' || coalesce(enqueue.carrier, ''));
    RETURN item_id;
END
$$;

-- As in 0003; the `existed` pre-check reads pgpace.item_key.
CREATE OR REPLACE FUNCTION pgpace.enqueue_json(doc jsonb)
RETURNS TABLE (id bigint, created boolean)
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    allowed CONSTANT text[] := '{customer,payload,carrier,kind,run_at,idempotency_key,priority}';
    f          text;
    run_at     timestamptz;
    priority   integer := 0;
    existed    boolean := false;
    item_id    bigint;
    row_xmin   bigint;
    cur        bigint;
    msg        text;
    hint       text;
    v_state    text;
BEGIN
    IF doc IS NULL OR jsonb_typeof(doc) <> 'object' THEN
        RAISE EXCEPTION 'body must be a JSON object'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT min(k) INTO f FROM jsonb_object_keys(doc - allowed) AS k;
    IF f IS NOT NULL THEN
        RAISE EXCEPTION 'unknown field % (allowed: %)', quote_literal(left(f, 64)),
                        array_to_string(allowed, ', ')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;

    IF jsonb_typeof(doc -> 'customer') IS DISTINCT FROM 'string' THEN
        RAISE EXCEPTION 'field customer: required, must be a string'
            USING ERRCODE = CASE WHEN coalesce(jsonb_typeof(doc -> 'customer'), 'null') = 'null'
                                 THEN 'null_value_not_allowed' ELSE 'invalid_parameter_value' END;
    END IF;
    IF coalesce(jsonb_typeof(doc -> 'payload'), 'null') = 'null' THEN
        RAISE EXCEPTION 'field payload: required, must not be null'
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
    FOREACH f IN ARRAY '{carrier,kind,run_at,idempotency_key}'::text[] LOOP
        IF coalesce(jsonb_typeof(doc -> f), 'null') NOT IN ('string', 'null') THEN
            RAISE EXCEPTION 'field %: must be a string', f
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END LOOP;
    IF coalesce(jsonb_typeof(doc -> 'priority'), 'null') <> 'null' THEN
        IF jsonb_typeof(doc -> 'priority') <> 'number'
           OR (doc ->> 'priority')::numeric NOT BETWEEN -32768 AND 32767
           OR (doc ->> 'priority')::numeric <> trunc((doc ->> 'priority')::numeric) THEN
            RAISE EXCEPTION 'field priority: must be an integer between -32768 and 32767'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        priority := (doc ->> 'priority')::integer;
    END IF;
    IF doc ->> 'run_at' IS NOT NULL THEN
        BEGIN
            run_at := (doc ->> 'run_at')::timestamptz;
        EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
            RAISE EXCEPTION 'field run_at: %', SQLERRM USING ERRCODE = SQLSTATE;
        END;
    END IF;

    IF doc ->> 'idempotency_key' IS NOT NULL THEN
        SELECT true INTO existed
          FROM pgpace.item_key k JOIN pgpace.customer c ON c.id = k.customer_id
         WHERE c.name = doc ->> 'customer' AND k.idempotency_key = doc ->> 'idempotency_key';
        existed := coalesce(existed, false);
    END IF;

    BEGIN
        item_id := pgpace.enqueue(customer        => doc ->> 'customer',
                                  payload         => doc -> 'payload',
                                  carrier         => doc ->> 'carrier',
                                  kind            => doc ->> 'kind',
                                  run_at          => run_at,
                                  idempotency_key => doc ->> 'idempotency_key',
                                  priority        => priority);
    EXCEPTION WHEN data_exception OR foreign_key_violation OR program_limit_exceeded THEN
        GET STACKED DIAGNOSTICS msg = MESSAGE_TEXT, hint = PG_EXCEPTION_HINT, v_state = RETURNED_SQLSTATE;
        msg := regexp_replace(msg, '^pgpace\.enqueue: ', '');
        -- pgpace.enqueue's messages start with the field ("kind must be ...", "payload is N
        -- bytes ...") or name it ("unknown customer 'x'", "invalid carrier 'x'").
        f := CASE WHEN msg ~ '^(customer|payload|carrier|kind|run_at|idempotency_key|priority) '
                  THEN substring(msg FROM '^([a-z_]+) ')
                  WHEN msg ~ '^unknown customer ' THEN 'customer'
                  WHEN msg ~ '^invalid carrier ' THEN 'carrier'
             END;
        IF f IS NULL THEN
            RAISE;
        END IF;
        IF msg ~ ('^' || f || ' ') THEN
            msg := regexp_replace(msg, '^[a-z_]+ (is )?', '');
        END IF;
        IF hint = '' THEN
            RAISE EXCEPTION 'field %: %', f, msg USING ERRCODE = v_state;
        END IF;
        RAISE EXCEPTION 'field %: %', f, msg USING ERRCODE = v_state, HINT = hint;
    END;

    IF existed THEN
        RETURN QUERY SELECT item_id, false;
        RETURN;
    END IF;
    -- The full (epoch-qualified) id of the row's xmin: the 32-bit xmin is within 2^31 of the
    -- current transaction id (the row was just written or waited for).
    SELECT i.xmin::text::bigint INTO row_xmin FROM pgpace.item i WHERE i.id = item_id;
    cur := pg_current_xact_id()::text::bigint;
    row_xmin := cur + (((row_xmin - (cur & 4294967295) + 2147483648) & 4294967295) - 2147483648);
    RETURN QUERY
        SELECT item_id, coalesce(pg_xact_status(row_xmin::text::xid8) = 'in progress', false);
END
$$;

-- As in 0001, except the final insert: keyed lines take their ids first and insert their keys
-- into pgpace.item_key (ON CONFLICT DO NOTHING, in line order, so a key repeated within the file
-- keeps its first line); only lines whose key was new insert an item. Unkeyed lines insert
-- plainly and pay for no conflict check. SECURITY INVOKER: the caller needs INSERT on item,
-- item_key and queue and USAGE on item_id_seq.
CREATE OR REPLACE FUNCTION pgpace.enqueue_bulk(OUT inserted bigint, OUT duplicates bigint)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
SET jit = off
SET work_mem = '64MB'
AS $$
DECLARE
    bad record;
    size_limit bigint;
    allowed CONSTANT text[] := '{customer,payload,carrier,kind,run_at,idempotency_key,priority}';
BEGIN
    SELECT s.value::bigint INTO size_limit FROM pgpace.setting s WHERE s.name = 'max_payload_bytes';

    -- Parse every line at once; only when that fails, walk the lines to name the bad one.
    BEGIN
        CREATE TEMP TABLE pgpace_bulk_doc ON COMMIT DROP AS
            SELECT b.line_no, b.doc::jsonb AS j FROM pg_temp.pgpace_bulk b WHERE b.doc !~ '^\s*$';
    EXCEPTION WHEN data_exception THEN
        FOR bad IN SELECT b.line_no, b.doc FROM pg_temp.pgpace_bulk b
                    WHERE b.doc !~ '^\s*$' ORDER BY b.line_no LOOP
            BEGIN
                PERFORM bad.doc::jsonb;
            EXCEPTION WHEN data_exception THEN
                RAISE EXCEPTION 'line %: not valid JSON (%)', bad.line_no, SQLERRM
                    USING ERRCODE = 'invalid_text_representation';
            END;
        END LOOP;
        RAISE;
    END;

    SELECT d.line_no,
           CASE WHEN jsonb_typeof(d.j) <> 'object' THEN 'expected a JSON object'
                ELSE format('unknown field %s (allowed: %s)',
                            (SELECT min(k) FROM jsonb_object_keys(d.j - allowed) k),
                            array_to_string(allowed, ', '))
           END AS msg
      INTO bad FROM pgpace_bulk_doc d
     WHERE jsonb_typeof(d.j) <> 'object' OR (d.j - allowed) <> '{}'::jsonb
     ORDER BY d.line_no LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- One extraction per line; the types of the optional fields are checked only where present.
    CREATE TEMP TABLE pgpace_bulk_row ON COMMIT DROP AS
        SELECT d.line_no, r.*,
               jsonb_typeof(d.j -> 'customer') AS customer_type,
               CASE WHEN r.payload IS NOT NULL THEN octet_length(r.payload::text) END AS payload_size,
               CASE WHEN jsonb_typeof(d.j -> 'carrier') NOT IN ('string', 'null') THEN 'carrier'
                    WHEN jsonb_typeof(d.j -> 'kind') NOT IN ('string', 'null') THEN 'kind'
                    WHEN jsonb_typeof(d.j -> 'run_at') NOT IN ('string', 'null') THEN 'run_at'
                    WHEN jsonb_typeof(d.j -> 'idempotency_key') NOT IN ('string', 'null') THEN 'idempotency_key'
                    WHEN jsonb_typeof(d.j -> 'priority') NOT IN ('number', 'null') THEN 'priority'
               END AS mistyped
          FROM pgpace_bulk_doc d,
               jsonb_to_record(d.j) AS r(customer text, payload jsonb, carrier text, kind text,
                                         run_at text, idempotency_key text, priority text);
    ANALYZE pgpace_bulk_row;

    SELECT b.line_no, msg INTO bad FROM pgpace_bulk_row b
      LEFT JOIN pgpace.customer c ON c.name = b.customer
      CROSS JOIN LATERAL (SELECT CASE
          WHEN b.customer_type IS DISTINCT FROM 'string' THEN 'field customer: required, must be a string'
          WHEN c.id IS NULL THEN format('field customer: unknown customer %s', quote_literal(left(b.customer, 140)))
          WHEN b.payload IS NULL OR b.payload = 'null'::jsonb THEN 'field payload: required, must not be null'
          WHEN b.payload_size > size_limit
            THEN format('field payload: %s bytes, above the limit of %s bytes', b.payload_size, size_limit)
          WHEN b.mistyped = 'priority' THEN 'field priority: must be an integer between -32768 and 32767'
          WHEN b.mistyped IS NOT NULL THEN format('field %s: must be a string', b.mistyped)
          WHEN NOT pgpace.valid_name(b.carrier)
            THEN 'field carrier: must be 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit'
          WHEN length(b.kind) NOT BETWEEN 1 AND 128 THEN 'field kind: must be 1 to 128 characters'
          WHEN length(b.idempotency_key) NOT BETWEEN 1 AND 255
            THEN 'field idempotency_key: must be 1 to 255 characters'
          WHEN b.priority !~ '^-?[0-9]{1,5}$' OR b.priority::integer NOT BETWEEN -32768 AND 32767
            THEN 'field priority: must be an integer between -32768 and 32767'
          END AS msg) m
     WHERE m.msg IS NOT NULL
     ORDER BY b.line_no LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Timestamps: cast them all; on failure name the first line that does not parse.
    BEGIN
        SELECT b.line_no, 'field run_at: must be a finite timestamp' AS msg INTO bad
          FROM pgpace_bulk_row b
         WHERE b.run_at IS NOT NULL AND NOT isfinite(b.run_at::timestamptz)
         ORDER BY b.line_no LIMIT 1;
    EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
        FOR bad IN SELECT b.line_no, b.run_at FROM pgpace_bulk_row b
                    WHERE b.run_at IS NOT NULL ORDER BY b.line_no LOOP
            BEGIN
                PERFORM bad.run_at::timestamptz;
            EXCEPTION WHEN invalid_datetime_format OR datetime_field_overflow THEN
                RAISE EXCEPTION 'line %: field run_at: %', bad.line_no, SQLERRM
                    USING ERRCODE = 'invalid_datetime_format';
            END;
        END LOOP;
        RAISE;
    END;
    IF bad.msg IS NOT NULL THEN
        RAISE EXCEPTION 'line %: %', bad.line_no, bad.msg USING ERRCODE = 'invalid_datetime_format';
    END IF;

    -- One KEY SHARE lock per customer (not per row, as a foreign key would take) keeps a
    -- concurrent `customer delete` from orphaning these items.
    CREATE TEMP TABLE pgpace_bulk_customer ON COMMIT DROP AS
        SELECT c.id, c.name, c.max_attempts FROM pgpace.customer c
         WHERE c.name IN (SELECT DISTINCT b.customer FROM pgpace_bulk_row b)
           FOR KEY SHARE;
    IF (SELECT count(*) FROM pgpace_bulk_customer)
       < (SELECT count(DISTINCT b.customer) FROM pgpace_bulk_row b) THEN
        RAISE EXCEPTION 'a customer named in the file was deleted during the load'
            USING ERRCODE = 'foreign_key_violation';
    END IF;

    -- Rows without a key cannot conflict, so only keyed rows pay for ON CONFLICT's speculative
    -- insertion (into the narrow pgpace.item_key). `keyed` is materialised once (it is volatile
    -- and read twice), so each keyed line has one id for its key and its item.
    WITH ins_plain AS (
        INSERT INTO pgpace.item (customer_id, carrier, kind, payload, priority, run_at)
        SELECT c.id, b.carrier, b.kind, b.payload,
               coalesce(b.priority::smallint, 0), coalesce(b.run_at::timestamptz, now())
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NULL
         ORDER BY b.line_no
        RETURNING id, customer_id, carrier, priority, run_at
    ), keyed AS (
        SELECT pgpace.next_item_id() AS id, b.line_no, c.id AS customer_id, b.carrier, b.kind,
               b.payload, b.idempotency_key, coalesce(b.priority::smallint, 0) AS priority,
               coalesce(b.run_at::timestamptz, now()) AS run_at
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NOT NULL
    ), ins_key AS (
        INSERT INTO pgpace.item_key (customer_id, idempotency_key, item_id)
        SELECT k.customer_id, k.idempotency_key, k.id FROM keyed k
         ORDER BY k.line_no
        ON CONFLICT (customer_id, idempotency_key) DO NOTHING
        RETURNING item_id
    ), ins_keyed AS (
        INSERT INTO pgpace.item (id, customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
        SELECT k.id, k.customer_id, k.carrier, k.kind, k.payload, k.idempotency_key, k.priority, k.run_at
          FROM keyed k JOIN ins_key n ON n.item_id = k.id
         ORDER BY k.line_no
        RETURNING id, customer_id, carrier, priority, run_at
    ), ins AS (
        SELECT * FROM ins_plain UNION ALL SELECT * FROM ins_keyed
    ), q AS (
        INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
        SELECT ins.id, ins.customer_id, coalesce(ins.carrier, ''), ins.priority, ins.run_at, c.max_attempts
          FROM ins JOIN pgpace_bulk_customer c ON c.id = ins.customer_id
        RETURNING customer_id, carrier
    ), notified AS (
        SELECT count(pg_notify('pgpace_enqueue', x.customer_id::text || ' ' || x.carrier))
          FROM (SELECT DISTINCT customer_id, carrier FROM q) x
    )
    SELECT (SELECT count(*) FROM q), (SELECT count(*) FROM pgpace_bulk_row) - (SELECT count(*) FROM q)
      INTO inserted, duplicates
      FROM notified;
END
$$;

-- As in 0001, and a forced delete removes the customer's idempotency keys too.
CREATE OR REPLACE FUNCTION pgpace.customer_delete(name text, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cust_id bigint;
    pending bigint;
    removed bigint;
BEGIN
    -- FOR UPDATE waits for enqueuers holding KEY SHARE on the row, so none can slip in after.
    SELECT c.id INTO cust_id FROM pgpace.customer c WHERE c.name = customer_delete.name FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', quote_literal(left(customer_delete.name, 140))
            USING ERRCODE = 'no_data_found';
    END IF;
    SELECT count(*) INTO pending FROM pgpace.queue q WHERE q.customer_id = cust_id;
    IF pending > 0 AND NOT force THEN
        RAISE EXCEPTION 'customer % has % pending item(s); nothing was deleted',
                        quote_literal(customer_delete.name), pending
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'wait for them to drain, or delete with --force to drop them too';
    END IF;
    DELETE FROM pgpace.queue q WHERE q.customer_id = cust_id;
    DELETE FROM pgpace.dead_letter d WHERE d.customer_id = cust_id;
    DELETE FROM pgpace.item i WHERE i.customer_id = cust_id;
    GET DIAGNOSTICS removed = ROW_COUNT;
    DELETE FROM pgpace.item_key k WHERE k.customer_id = cust_id;
    DELETE FROM pgpace.customer c WHERE c.id = cust_id;
    RETURN removed;
END
$$;

-- New functions are executable by PUBLIC by default; producers (USAGE on the schema) must not
-- take ids or run housekeeping.
REVOKE EXECUTE ON FUNCTION pgpace.next_item_id(), pgpace.item_id_day(bigint),
    pgpace.item_day_first_id(date), pgpace.create_item_partition(date),
    pgpace.ensure_item_partitions(integer), pgpace.drop_item_partitions(interval),
    pgpace.purge_item_keys(integer) FROM PUBLIC;
