-- 0001_schema.sql - the pgpace data model.
-- Applied by `pgpace migrate` inside one transaction; the runner has already created the
-- `pgpace` schema and its `schema_migration` bookkeeping table.

-- Nothing in the schema is public; producers get exactly pgpace.enqueue (granted at the end,
-- after EXECUTE is revoked from PUBLIC on every function created here).
REVOKE ALL ON SCHEMA pgpace FROM PUBLIC;

-- Names of customers and carriers appear in logs, metrics labels and URLs of the admin API,
-- so they are restricted to a safe, printable alphabet.
CREATE FUNCTION pgpace.valid_name(name text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN name ~ '^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$';

-- A signing secret is `whsec_` followed by base64 of 24 to 64 random bytes (Standard Webhooks).
CREATE FUNCTION pgpace.valid_secrets(secrets text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
RETURN cardinality(secrets) BETWEEN 1 AND 4
   AND array_position(secrets, NULL) IS NULL
   AND (SELECT bool_and(s ~ '^whsec_[A-Za-z0-9+/]{32,88}={0,2}$') FROM unnest(secrets) AS s);

CREATE TABLE pgpace.customer (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name            text NOT NULL UNIQUE CONSTRAINT customer_name_valid CHECK (pgpace.valid_name(name)),
    mode            text NOT NULL DEFAULT 'spaced'
                    CONSTRAINT customer_mode_valid CHECK (mode IN ('spaced', 'batch', 'unlimited')),
    -- NaN compares greater than every number in PostgreSQL, so "< Infinity" also rejects NaN.
    rate_per_minute double precision NOT NULL
                    CONSTRAINT customer_rate_valid
                    CHECK (rate_per_minute > 0 AND rate_per_minute < 'Infinity'::float8),
    burst           integer NOT NULL DEFAULT 1
                    CONSTRAINT customer_burst_valid CHECK (burst BETWEEN 1 AND 1000000),
    webhook_url     text NOT NULL
                    CONSTRAINT customer_url_valid
                    CHECK (length(webhook_url) <= 2048
                           AND webhook_url ~* '^https?://[^\s/?#@]+(:[0-9]{1,5})?([/?#][^\s]*)?$'),
    -- First secret signs; during rotation every listed secret signs (one signature each).
    signing_secrets text[] NOT NULL
                    CONSTRAINT customer_secrets_valid CHECK (pgpace.valid_secrets(signing_secrets)),
    max_in_flight   integer CONSTRAINT customer_max_in_flight_valid CHECK (max_in_flight >= 1),
    max_attempts    integer NOT NULL DEFAULT 12
                    CONSTRAINT customer_max_attempts_valid CHECK (max_attempts BETWEEN 1 AND 1000),
    paused          boolean NOT NULL DEFAULT false,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgpace.carrier (
    name          text PRIMARY KEY CONSTRAINT carrier_name_valid CHECK (pgpace.valid_name(name)),
    -- NULL means "use the dispatcher's configured default".
    max_per_round integer CONSTRAINT carrier_max_per_round_valid CHECK (max_per_round >= 1),
    max_in_flight integer CONSTRAINT carrier_max_in_flight_valid CHECK (max_in_flight >= 1),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- The payload record. Written once at enqueue; never updated on the hot path.
CREATE TABLE pgpace.item (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- No foreign key: enqueue takes one KEY SHARE lock on the customer row per call (bulk: per
    -- customer, not per row), which guards against a concurrent delete just as a foreign key
    -- would, without its per-row trigger (measured 0.86 s per 100k bulk rows).
    customer_id     bigint NOT NULL,
    carrier         text CONSTRAINT item_carrier_valid CHECK (pgpace.valid_name(carrier)),
    kind            text CONSTRAINT item_kind_valid CHECK (length(kind) BETWEEN 1 AND 128),
    payload         jsonb NOT NULL,
    idempotency_key text CONSTRAINT item_idempotency_key_valid
                    CHECK (length(idempotency_key) BETWEEN 1 AND 255),
    -- As enqueued. Kept on the item (not only in queue) so the bulk loader can build queue
    -- rows straight from INSERT ... RETURNING instead of pre-assigning ids (0.9 s / 100k).
    priority        smallint NOT NULL DEFAULT 0,
    run_at          timestamptz NOT NULL DEFAULT now(),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX item_idempotency ON pgpace.item (customer_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;

-- Transient queue state, 1:1 with a pending item. Rows churn: keep them narrow, leave room on
-- each page for HOT updates of bookkeeping columns, and vacuum aggressively.
-- No foreign key to item: queue rows are only written by pgpace's own functions together with
-- their item, and the FK check would row-lock every fresh item (measured: 2.0 s instead of
-- 0.6 s per 100k bulk-enqueued rows). Deleting a customer removes its queue rows explicitly.
CREATE TABLE pgpace.queue (
    item_id        bigint PRIMARY KEY,
    customer_id    bigint NOT NULL,
    carrier        text NOT NULL DEFAULT '', -- '' when the item names none: keeps the index usable
    priority       smallint NOT NULL DEFAULT 0,
    -- When the row may next be claimed. A claim pushes it to now() + lease; NULL parks the row.
    next_action_at timestamptz,
    attempt        integer NOT NULL DEFAULT 0,
    max_attempts   integer NOT NULL,
    claim_token    bigint,
    claimed_by     text,
    claimed_at     timestamptz,
    last_error     text
) WITH (
    fillfactor = 80,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);
-- The one index the claim reads: (customer_id, priority DESC, next_action_at) with carrier
-- after customer_id, so that the claim probes each active (customer, carrier) pair: a carrier
-- holding 100,000 due items of a customer then costs one probe, and the other carriers' items of
-- that customer are found without reading past its backlog (one carrier cannot starve the rest).
-- Bookkeeping columns (attempt, claimed_by, last_error) are deliberately in no index.
CREATE INDEX queue_claim ON pgpace.queue (customer_id, carrier, priority DESC, next_action_at)
    WHERE next_action_at IS NOT NULL;

-- Per-customer scheduler state. UNLOGGED: losing it in a crash only makes every customer
-- eligible once, which GCRA tolerates; in exchange its updates write no WAL.
CREATE UNLOGGED TABLE pgpace.frontier (
    customer_id  bigint PRIMARY KEY REFERENCES pgpace.customer (id) ON DELETE CASCADE,
    tat          timestamptz,               -- GCRA theoretical arrival time (spaced mode)
    batch_credit double precision NOT NULL DEFAULT 0, -- carried fractional allowance (batch)
    last_tick    bigint                     -- last batch tick dispatched
);

CREATE TABLE pgpace.dead_letter (
    item_id     bigint PRIMARY KEY,
    customer_id bigint NOT NULL,
    carrier     text,
    attempts    integer NOT NULL,
    last_status integer,
    last_error  text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_letter_customer ON pgpace.dead_letter (customer_id, failed_at);

-- Attempt log, partitioned by day so retention drops whole partitions instead of deleting rows.
CREATE TABLE pgpace.delivery_attempt (
    item_id          bigint NOT NULL,
    customer_id      bigint NOT NULL,
    attempt          integer NOT NULL,
    started_at       timestamptz NOT NULL,
    duration_ms      double precision NOT NULL,
    http_status      integer,
    outcome          text NOT NULL
                     CONSTRAINT delivery_attempt_outcome_valid
                     CHECK (outcome IN ('success', 'retry', 'dead', 'paused', 'released')),
    error_class      text,
    response_excerpt text
) PARTITION BY RANGE (started_at);
CREATE INDEX delivery_attempt_item ON pgpace.delivery_attempt (item_id);
-- Catches rows outside the daily partitions (clock skew, a missed ensure_partitions run) so
-- that logging an attempt can never block finalising a delivery.
CREATE TABLE pgpace.delivery_attempt_default PARTITION OF pgpace.delivery_attempt DEFAULT;

-- Creates the daily partitions of `parent` from today (UTC) through `days_ahead` days ahead.
-- Returns how many it created. Safe to call repeatedly and concurrently with inserts.
CREATE FUNCTION pgpace.ensure_partitions(parent regclass, days_ahead integer)
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
CREATE FUNCTION pgpace.drop_partitions(parent regclass, keep interval)
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

SELECT pgpace.ensure_partitions('pgpace.delivery_attempt', 7);

-- Database-wide settings that every enqueue path (SQL, CLI, HTTP) must agree on.
CREATE TABLE pgpace.setting (
    name  text PRIMARY KEY,
    value text NOT NULL,
    CONSTRAINT setting_value_valid CHECK (
        CASE name
            WHEN 'max_payload_bytes' THEN value ~ '^[0-9]{1,10}$' AND value::bigint BETWEEN 1 AND 1073741824
            ELSE false
        END)
);
INSERT INTO pgpace.setting (name, value) VALUES ('max_payload_bytes', '262144');

-- Transactional enqueue. Call it inside the producer's own transaction: the item exists if and
-- only if that transaction commits, and the wake-up NOTIFY is delivered on commit only.
-- A repeated idempotency key for the same customer returns the existing item's id.
CREATE FUNCTION pgpace.enqueue(
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

    INSERT INTO pgpace.item AS i (customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
    VALUES (cust_id, enqueue.carrier, enqueue.kind, enqueue.payload, enqueue.idempotency_key,
            enqueue.priority, coalesce(enqueue.run_at, now()))
    ON CONFLICT (customer_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
    RETURNING i.id INTO item_id;

    IF item_id IS NULL THEN
        -- The key exists (possibly committed by a concurrent transaction we just waited for).
        SELECT i.id INTO item_id FROM pgpace.item i
         WHERE i.customer_id = cust_id AND i.idempotency_key = enqueue.idempotency_key;
        IF item_id IS NULL THEN
            RAISE EXCEPTION 'pgpace.enqueue: idempotency key % is taken by a transaction this snapshot cannot see',
                            quote_literal(enqueue.idempotency_key)
                USING ERRCODE = 'serialization_failure', HINT = 'retry the transaction';
        END IF;
        RETURN item_id;
    END IF;

    INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
    VALUES (item_id, cust_id, coalesce(enqueue.carrier, ''), enqueue.priority::smallint,
            coalesce(enqueue.run_at, now()), cust_max);

    -- Payload "<customer id> <carrier>": the dispatcher wakes that (customer, carrier) pair.
    PERFORM pg_notify('pgpace_enqueue', cust_id::text || ' ' || coalesce(enqueue.carrier, ''));
    RETURN item_id;
END
$$;

-- Bulk enqueue from the session's temporary table pgpace_bulk(line_no bigint, doc text), one
-- JSON object per line (blank lines are skipped) as documented for `pgpace enqueue --file`. All lines or none: the
-- first bad line raises an error naming its line number and field. Returns (inserted,
-- duplicates). SECURITY INVOKER: the caller needs INSERT on item and queue.
-- JIT off and a larger work_mem: the staging tables are fresh, so the planner's estimates are
-- guesses, and compiling for a one-shot load cost more than it saved (measured 0.56 s / 100k).
CREATE FUNCTION pgpace.enqueue_bulk(OUT inserted bigint, OUT duplicates bigint)
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

    -- Rows without a key cannot conflict (the unique index is partial), so only keyed rows pay
    -- for ON CONFLICT's speculative insertion (measured 18 us instead of ~8 us per row).
    WITH ins_plain AS (
        INSERT INTO pgpace.item (customer_id, carrier, kind, payload, priority, run_at)
        SELECT c.id, b.carrier, b.kind, b.payload,
               coalesce(b.priority::smallint, 0), coalesce(b.run_at::timestamptz, now())
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NULL
         ORDER BY b.line_no
        RETURNING id, customer_id, carrier, priority, run_at
    ), ins_keyed AS (
        INSERT INTO pgpace.item (customer_id, carrier, kind, payload, idempotency_key, priority, run_at)
        SELECT c.id, b.carrier, b.kind, b.payload, b.idempotency_key,
               coalesce(b.priority::smallint, 0), coalesce(b.run_at::timestamptz, now())
          FROM pgpace_bulk_row b JOIN pgpace_bulk_customer c ON c.name = b.customer
         WHERE b.idempotency_key IS NOT NULL
         ORDER BY b.line_no
        ON CONFLICT (customer_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
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

-- Creates or updates a customer; NULL arguments leave the current value (or the default on
-- creation). Returns true when the customer was created. Used by `pgpace customer set` and
-- usable from SQL directly; the dispatcher picks changes up through the notify trigger below.
CREATE FUNCTION pgpace.customer_set(
    name                text,
    mode                text DEFAULT NULL,
    rate_per_minute     double precision DEFAULT NULL,
    burst               integer DEFAULT NULL,
    webhook_url         text DEFAULT NULL,
    signing_secrets     text[] DEFAULT NULL,
    max_in_flight       integer DEFAULT NULL,
    max_attempts        integer DEFAULT NULL,
    paused              boolean DEFAULT NULL,
    clear_max_in_flight boolean DEFAULT false)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set.name IS NULL OR NOT pgpace.valid_name(customer_set.name) THEN
        RAISE EXCEPTION 'invalid customer name %', coalesce(quote_literal(left(customer_set.name, 140)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit';
    END IF;
    UPDATE pgpace.customer c SET
        mode = coalesce(customer_set.mode, c.mode),
        rate_per_minute = coalesce(customer_set.rate_per_minute, c.rate_per_minute),
        burst = coalesce(customer_set.burst, c.burst),
        webhook_url = coalesce(customer_set.webhook_url, c.webhook_url),
        signing_secrets = coalesce(customer_set.signing_secrets, c.signing_secrets),
        max_in_flight = CASE WHEN customer_set.clear_max_in_flight THEN NULL
                             ELSE coalesce(customer_set.max_in_flight, c.max_in_flight) END,
        max_attempts = coalesce(customer_set.max_attempts, c.max_attempts),
        paused = coalesce(customer_set.paused, c.paused),
        updated_at = now()
     WHERE c.name = customer_set.name;
    IF FOUND THEN
        RETURN false;
    END IF;
    IF customer_set.rate_per_minute IS NULL OR customer_set.webhook_url IS NULL THEN
        RAISE EXCEPTION 'customer % does not exist; creating it needs a rate and a webhook URL',
                        quote_literal(customer_set.name)
            USING ERRCODE = 'no_data_found';
    END IF;
    INSERT INTO pgpace.customer (name, mode, rate_per_minute, burst, webhook_url, signing_secrets,
                                 max_in_flight, max_attempts, paused)
    VALUES (customer_set.name, coalesce(customer_set.mode, 'spaced'), customer_set.rate_per_minute,
            coalesce(customer_set.burst, 1), customer_set.webhook_url,
            -- 256 bits from two v4 UUIDs (244 random bits) when the caller brings no secret.
            coalesce(customer_set.signing_secrets,
                     ARRAY['whsec_' || encode(decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64')]),
            CASE WHEN customer_set.clear_max_in_flight THEN NULL ELSE customer_set.max_in_flight END,
            coalesce(customer_set.max_attempts, 12), coalesce(customer_set.paused, false));
    RETURN true;
END
$$;

-- Deletes a customer. Refuses while it has pending items unless force, in which case its
-- items, queue rows and dead letters go too. Returns the number of items removed.
CREATE FUNCTION pgpace.customer_delete(name text, force boolean DEFAULT false)
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
    DELETE FROM pgpace.customer c WHERE c.id = cust_id;
    RETURN removed;
END
$$;

-- Live configuration: the dispatcher LISTENs and reloads a customer within the same second.
CREATE FUNCTION pgpace.notify_customer_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_customer', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END::text);
    RETURN NULL;
END
$$;
CREATE TRIGGER customer_changed AFTER INSERT OR UPDATE OR DELETE ON pgpace.customer
    FOR EACH ROW EXECUTE FUNCTION pgpace.notify_customer_change();

CREATE FUNCTION pgpace.notify_carrier_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_carrier', CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END);
    RETURN NULL;
END
$$;
CREATE TRIGGER carrier_changed AFTER INSERT OR UPDATE OR DELETE ON pgpace.carrier
    FOR EACH ROW EXECUTE FUNCTION pgpace.notify_carrier_change();

-- Per-customer view of the queue for `pgpace stats` and dashboards. A claimed row whose lease
-- has passed counts as due again, since the next claim will recover it.
CREATE VIEW pgpace.customer_stats AS
SELECT c.name AS customer, c.mode, c.rate_per_minute, c.burst, c.paused,
       coalesce(q.due, 0) AS due,
       coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed,
       coalesce(d.dead, 0) AS dead,
       now() - q.oldest_due AS oldest_due_age
  FROM pgpace.customer c
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE qq.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NOT NULL) AS in_flight,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NULL) AS delayed,
             min(qq.next_action_at) FILTER (WHERE qq.next_action_at <= now()) AS oldest_due
        FROM pgpace.queue qq WHERE qq.customer_id = c.id) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id) d ON true;

-- Running pgpace instances and which one leads (holds the leader advisory lock, class 'pgpa'
-- = 1885827169, key 2). Instances set application_name to 'pgpace:<instance name>'.
CREATE VIEW pgpace.instance AS
SELECT substr(a.application_name, 8) AS instance, a.pid, a.client_addr, a.backend_start,
       EXISTS (SELECT 1 FROM pg_locks l
                WHERE l.locktype = 'advisory' AND l.database = a.datid AND l.pid = a.pid
                  AND l.classid = 1885827169 AND l.objid = 2 AND l.objsubid = 2 AND l.granted)
           AS leader
  FROM pg_stat_activity a
 WHERE a.application_name LIKE 'pgpace:%' AND a.datname = current_database();

CREATE VIEW pgpace.leader AS SELECT * FROM pgpace.instance WHERE leader;

-- Producers: a login role granted pgpace_producer may call pgpace.enqueue and nothing else.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pgpace_producer') THEN
        CREATE ROLE pgpace_producer NOLOGIN;
    END IF;
END
$$;
-- PostgreSQL grants EXECUTE on new functions to PUBLIC, and a per-schema default privilege
-- cannot take that back, so revoke explicitly.
REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pgpace FROM PUBLIC;
GRANT USAGE ON SCHEMA pgpace TO pgpace_producer;
GRANT EXECUTE ON FUNCTION pgpace.enqueue(text, jsonb, text, text, timestamptz, text, integer) TO pgpace_producer;
