-- 17_endpoint_admin.sql - what an operator does with a customer's endpoints besides adding,
-- changing and deleting them (16_endpoints.sql): list them, pause and resume one, disable one and
-- enable it again. `pgpace endpoint list|pause|resume|disable|enable` call these; they are
-- usable from SQL directly by the owner (EXECUTE is revoked from PUBLIC: pgpace_producer only
-- enqueues). An endpoint is named by its customer and its own name; 'default' is the customer's
-- own receiver (its row, when it has a webhook URL). Unknown customer or endpoint: P0002
-- (pgpace.endpoint_row).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- A customer's endpoints, its own receiver ('default') first, then by name: the URL, mode and
-- rate of each (its receiver's limit), its subscription (`events`: the patterns separated by
-- commas, '*' for every kind), its payload filter ('-': none), its state (active, paused,
-- disabled, or paused,disabled), how many deliveries it has queued, and its limit windows
-- (0019: separated by commas, '-' for none).
--
-- Before `limits`: dropped once, in this file's transaction (CREATE OR REPLACE cannot add a
-- column to its result).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_proc p
                WHERE p.oid = to_regprocedure('pgpace.endpoint_list(text)')
                  AND NOT ('limits' = ANY (p.proargnames))) THEN
        DROP FUNCTION pgpace.endpoint_list(text);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgpace.endpoint_list(customer text)
RETURNS TABLE (endpoint text, url text, mode text, rate double precision, events text,
               filter text, state text, queued bigint, limits text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    cust_id bigint;
BEGIN
    SELECT c.id INTO cust_id FROM pgpace.customer c
     WHERE c.name = endpoint_list.customer AND c.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(endpoint_list.customer, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN QUERY
    SELECT CASE WHEN e.parent_id IS NULL THEN 'default' ELSE e.endpoint_name END,
           e.webhook_url, e.mode, e.rate_per_minute,
           coalesce(nullif(array_to_string(e.event_types, ','), ''), '*'),
           coalesce(e.payload_filter::text, '-'),
           CASE WHEN e.paused AND e.disabled_at IS NOT NULL THEN 'paused,disabled'
                WHEN e.paused THEN 'paused'
                WHEN e.disabled_at IS NOT NULL THEN 'disabled'
                ELSE 'active' END,
           (SELECT count(*) FROM pgpace.queue q WHERE q.customer_id = e.id),
           coalesce(nullif(array_to_string(e.limits, ','), ''), '-')
      FROM pgpace.customer e
     WHERE e.parent_id = cust_id OR (e.id = cust_id AND e.webhook_url IS NOT NULL)
     ORDER BY e.parent_id NULLS FIRST, e.endpoint_name;
END
$$;

-- Pauses (paused true) or resumes (false) one endpoint: its deliveries wait, nothing is dropped,
-- the customer's other endpoints go on. The customer_lifecycle trigger records the `paused` or
-- `resumed` event. Returns whether anything changed.
CREATE OR REPLACE FUNCTION pgpace.endpoint_pause(customer text, endpoint text,
                                                 paused boolean DEFAULT true)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep_id bigint := pgpace.endpoint_row(customer, endpoint);
BEGIN
    IF paused IS NULL THEN
        RAISE EXCEPTION 'paused: expected true or false' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    UPDATE pgpace.customer c SET paused = endpoint_pause.paused, updated_at = now()
     WHERE c.id = ep_id AND c.paused IS DISTINCT FROM endpoint_pause.paused;
    RETURN FOUND;
END
$$;

-- Disables one endpoint as an operator: the same state the health check leaves a failing one
-- in (pgpace.health_check: disabled_at set, disabled_reason saying why, here 'operator'), so the
-- dispatcher holds its deliveries exactly as it holds a health-disabled endpoint's (they wait;
-- nothing is dropped) and pgpace.endpoint_enable / customer_enable clears it. The
-- customer_lifecycle trigger records the `disabled` event (reason 'operator'). Returns false when
-- it was already disabled (its reason is kept).
CREATE OR REPLACE FUNCTION pgpace.endpoint_disable(customer text, endpoint text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep_id bigint := pgpace.endpoint_row(customer, endpoint);
BEGIN
    UPDATE pgpace.customer c
       SET disabled_at = now(), disabled_reason = 'operator', updated_at = now()
     WHERE c.id = ep_id AND c.disabled_at IS NULL;
    RETURN FOUND;
END
$$;

-- Enables a disabled endpoint (by the health check or an operator) as pgpace.customer_enable
-- does a customer: its deliveries are claimed again at once, its breaker and failing streak
-- start afresh, and the `enabled` event is recorded. Returns false when it was not disabled.
CREATE OR REPLACE FUNCTION pgpace.endpoint_enable(customer text, endpoint text)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    ep_id bigint := pgpace.endpoint_row(customer, endpoint);
    ep_name text;
BEGIN
    SELECT c.name INTO ep_name FROM pgpace.customer c WHERE c.id = ep_id;
    RETURN pgpace.customer_enable(ep_name);
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.endpoint_list(text),
    pgpace.endpoint_pause(text, text, boolean),
    pgpace.endpoint_disable(text, text),
    pgpace.endpoint_enable(text, text)
    FROM PUBLIC;
