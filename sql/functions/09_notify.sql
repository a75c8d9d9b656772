-- 09_notify.sql - live configuration: the dispatcher LISTENs and reloads a customer or a
-- carrier within the same second. The triggers that call these are made with their tables (0001).
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

CREATE OR REPLACE FUNCTION pgpace.notify_customer_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_customer', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END::text);
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
