-- 09_notify.sql - live configuration: the dispatcher LISTENs and reloads a customer or a
-- carrier within the same second. The triggers that call these are made with their tables (0001).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

CREATE OR REPLACE FUNCTION pgpace.notify_customer_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        r := OLD;
    ELSE
        r := NEW;
    END IF;
    PERFORM pg_notify('pgpace_customer', r.id::text);
    -- Endpoints (0018) share their customer's limit: an endpoint added or removed changes
    -- whether the customer's own receiver shares it, and a change to the customer (its rate)
    -- changes every endpoint's. pg_notify folds repeats within a transaction.
    IF r.parent_id IS NOT NULL AND TG_OP <> 'UPDATE' THEN
        PERFORM pg_notify('pgpace_customer', r.parent_id::text);
    ELSIF r.parent_id IS NULL AND TG_OP = 'UPDATE' THEN
        PERFORM pg_notify('pgpace_customer', e.id::text)
           FROM pgpace.customer e WHERE e.parent_id = r.id;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION pgpace.notify_carrier_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_carrier', CASE WHEN TG_OP = 'DELETE' THEN OLD.name ELSE NEW.name END);
    RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.notify_customer_change(), pgpace.notify_carrier_change()
    FROM PUBLIC;
