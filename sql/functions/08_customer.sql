-- 08_customer.sql - creating, changing and deleting customers.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- Creates or updates a customer; NULL arguments leave the current value (or the default on
-- creation). Returns true when the customer was created. Used by `pgpace customer set` and
-- usable from SQL directly; the dispatcher picks changes up through the notify trigger on
-- pgpace.customer (09_notify.sql).
CREATE OR REPLACE FUNCTION pgpace.customer_set(
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

-- Sets a customer's timeouts: NULL leaves one as it is, 0 resets it to the configured default.
-- (A separate function: the timeouts came after customer_set, whose signature stayed as it was.)
CREATE OR REPLACE FUNCTION pgpace.customer_set_timeouts(name text, connect_timeout_ms integer,
                                             request_timeout_ms integer)
RETURNS void
LANGUAGE sql
SET search_path = pg_catalog, pg_temp
AS $$
    UPDATE pgpace.customer c SET
        connect_timeout_ms = CASE WHEN $2 IS NULL THEN c.connect_timeout_ms
                                  WHEN $2 = 0 THEN NULL ELSE $2 END,
        request_timeout_ms = CASE WHEN $3 IS NULL THEN c.request_timeout_ms
                                  WHEN $3 = 0 THEN NULL ELSE $3 END,
        updated_at = now()
     WHERE c.name = $1 AND ($2 IS NOT NULL OR $3 IS NOT NULL);
$$;

-- Sets a customer's throttle overrides (pacing that listens to the receiver, [delivery]
-- throttle_* in the configuration): NULL leaves one as it is, 0 resets it to the configured
-- default, as for the timeouts. A value out of its range is refused with the field's name
-- (SQLSTATE 22023) before anything changes; the CHECK constraints of pgpace.customer hold the
-- same ranges for any other writer. An unknown customer is an error (P0002) when something is
-- to be set.
CREATE OR REPLACE FUNCTION pgpace.customer_set_throttle(name text,
                                                        throttle_decrease double precision,
                                                        throttle_increase double precision,
                                                        throttle_floor double precision)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- NaN compares greater than every number, so each upper bound also refuses NaN.
    IF customer_set_throttle.throttle_decrease <> 0
       AND NOT (customer_set_throttle.throttle_decrease > 0
                AND customer_set_throttle.throttle_decrease < 1) THEN
        RAISE EXCEPTION 'throttle_decrease must be greater than 0 and less than 1, got %',
                        customer_set_throttle.throttle_decrease
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_decrease)';
    END IF;
    IF customer_set_throttle.throttle_increase <> 0
       AND NOT (customer_set_throttle.throttle_increase > 0
                AND customer_set_throttle.throttle_increase <= 1) THEN
        RAISE EXCEPTION 'throttle_increase must be greater than 0 and at most 1, got %',
                        customer_set_throttle.throttle_increase
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_increase)';
    END IF;
    IF customer_set_throttle.throttle_floor <> 0
       AND NOT (customer_set_throttle.throttle_floor > 0
                AND customer_set_throttle.throttle_floor <= 1) THEN
        RAISE EXCEPTION 'throttle_floor must be greater than 0 and at most 1, got %',
                        customer_set_throttle.throttle_floor
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_floor)';
    END IF;
    IF customer_set_throttle.throttle_decrease IS NULL
       AND customer_set_throttle.throttle_increase IS NULL
       AND customer_set_throttle.throttle_floor IS NULL THEN
        RETURN;
    END IF;
    UPDATE pgpace.customer c SET
        throttle_decrease = CASE WHEN customer_set_throttle.throttle_decrease IS NULL
                                 THEN c.throttle_decrease
                                 WHEN customer_set_throttle.throttle_decrease = 0 THEN NULL
                                 ELSE customer_set_throttle.throttle_decrease END,
        throttle_increase = CASE WHEN customer_set_throttle.throttle_increase IS NULL
                                 THEN c.throttle_increase
                                 WHEN customer_set_throttle.throttle_increase = 0 THEN NULL
                                 ELSE customer_set_throttle.throttle_increase END,
        throttle_floor = CASE WHEN customer_set_throttle.throttle_floor IS NULL
                              THEN c.throttle_floor
                              WHEN customer_set_throttle.throttle_floor = 0 THEN NULL
                              ELSE customer_set_throttle.throttle_floor END,
        updated_at = now()
     WHERE c.name = customer_set_throttle.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_throttle.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets a customer's max_age: how late its items may be sent, counted from when each is due (its
-- run_at, or its enqueue when that is later); an item not sent by then is dead-lettered as
-- 'expired'. NULL leaves it as it is, 0 removes the limit (as 0 resets the overrides above). It
-- applies to items enqueued from now on: each item's deadline is fixed at enqueue
-- (queue.expires_at), so the claim and the expiry sweep read one indexed column instead of
-- joining every row to its customer. Bounded like the column's CHECK (at most 365 days),
-- refused with SQLSTATE 22023 naming the field; an unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_max_age(name text, max_age interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set_max_age.max_age IS NULL THEN
        RETURN;
    END IF;
    IF customer_set_max_age.max_age < interval '0'
       OR customer_set_max_age.max_age > interval '365 days' THEN
        RAISE EXCEPTION 'max_age must be from 1 microsecond to 365 days (0: none), got %',
                        customer_set_max_age.max_age
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 removes the limit';
    END IF;
    UPDATE pgpace.customer c SET
        max_age = CASE WHEN customer_set_max_age.max_age > interval '0'
                       THEN customer_set_max_age.max_age END,
        updated_at = now()
     WHERE c.name = customer_set_max_age.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_max_age.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Deletes a customer. Refuses while it has pending items unless force, in which case its
-- items, queue rows, dead letters and idempotency keys go too. Returns the number of items
-- removed.
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

REVOKE EXECUTE ON FUNCTION
    pgpace.customer_set(text, text, double precision, integer, text, text[], integer, integer,
                        boolean, boolean),
    pgpace.customer_set_timeouts(text, integer, integer),
    pgpace.customer_set_throttle(text, double precision, double precision, double precision),
    pgpace.customer_set_max_age(text, interval),
    pgpace.customer_delete(text, boolean)
    FROM PUBLIC;
