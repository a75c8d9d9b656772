-- 0018_endpoints.sql - a customer (tenant) has endpoints: receivers subscribed to event types,
-- each with its own limit, secrets, auth and health; one enqueued event fans out to every
-- endpoint whose subscription matches, in the producer's transaction.
--
-- The model (README, "Endpoints"):
-- - An endpoint is a row of pgpace.customer with parent_id set to its customer's row. Everything
--   the receiver side has (URL, mode, rate, burst, secrets, headers, auth, certificate, proxy,
--   timeouts, throttle, breaker, health, pause) is the row's own, exactly as a customer's is
--   today, so every part of the dispatcher that serves a customer serves an endpoint unchanged.
--   Its name is "<customer>/<endpoint>" (unique, like every name in the table); its short name
--   is endpoint_name, unique within the customer.
-- - A customer row (parent_id NULL) is the tenant. Its rate_per_minute is the tenant's limit over
--   all of its endpoints (the sender's plan), enforced by the dispatcher as one GCRA cell per
--   tenant (pgpace.tenant_frontier holds its state); NULL means no tenant limit, allowed only on a
--   customer without a webhook URL.
-- - A customer that has a webhook URL is itself an endpoint, shown as "default": every existing
--   customer is one customer with one endpoint, served exactly as before this migration (no row
--   moves, no item is re-sent or dropped; its items keep their ids and webhook-ids).
-- - event_types: the kinds an endpoint receives: exact names or a prefix ending in '*'
--   ('order.*'); NULL or empty: every kind. payload_filter: a JSON object the payload must
--   contain (jsonb @>); NULL: any payload.
--
-- Events: an enqueue to a customer that fans out writes one pgpace.item row for the event (its
-- customer's row, the payload, the idempotency key; `fanout` = the deliveries it made, and no
-- queue row) and one item row per matched endpoint (the delivery: payload NULL, event_id the
-- event's id), each with its queue row. Both live in the same day's item partition (their ids
-- come from the same transaction), so retention drops them together; every delivery of one
-- event is signed with the same webhook-id, msg_<event id>.
ALTER TABLE pgpace.customer
    ADD COLUMN parent_id bigint REFERENCES pgpace.customer (id),
    ADD COLUMN endpoint_name text,
    ADD COLUMN event_types text[]
        CONSTRAINT customer_event_types_valid
        CHECK (cardinality(event_types) <= 64 AND array_position(event_types, NULL) IS NULL),
    ADD COLUMN payload_filter jsonb
        CONSTRAINT customer_payload_filter_valid CHECK (jsonb_typeof(payload_filter) = 'object'),
    ALTER COLUMN webhook_url DROP NOT NULL,
    ALTER COLUMN signing_secrets DROP NOT NULL,
    ALTER COLUMN rate_per_minute DROP NOT NULL,
    DROP CONSTRAINT customer_name_valid,
    ADD CONSTRAINT customer_name_valid
        CHECK (CASE WHEN parent_id IS NULL
                    THEN endpoint_name IS NULL AND pgpace.valid_name(name)
                    ELSE pgpace.valid_name(endpoint_name) AND endpoint_name <> 'default'
                         AND pgpace.valid_name(split_part(name, '/', 1))
                         AND name = split_part(name, '/', 1) || '/' || endpoint_name END),
    -- An endpoint always has a receiver; a customer may have none (then its endpoints do).
    ADD CONSTRAINT customer_receiver_complete
        CHECK ((webhook_url IS NULL) = (signing_secrets IS NULL)
               AND (parent_id IS NULL OR webhook_url IS NOT NULL)
               AND (rate_per_minute IS NOT NULL OR (parent_id IS NULL AND webhook_url IS NULL)));
CREATE UNIQUE INDEX customer_endpoint_name ON pgpace.customer (parent_id, endpoint_name)
    WHERE parent_id IS NOT NULL;

-- Items: a delivery made by fan-out points at its event and holds no payload of its own; an
-- event row says how many deliveries it made (0: it matched no endpoint, and is kept for
-- `pgpace recover --endpoint` to back-fill an endpoint added later).
ALTER TABLE pgpace.item
    ADD COLUMN event_id bigint,
    ADD COLUMN fanout integer CONSTRAINT item_fanout_valid CHECK (fanout >= 0),
    ALTER COLUMN payload DROP NOT NULL,
    ADD CONSTRAINT item_payload_present
        CHECK ((payload IS NULL) = (event_id IS NOT NULL) AND (fanout IS NULL OR event_id IS NULL));

-- The tenant limit's GCRA cell, one row per customer whose endpoints share a limit. Logged (not
-- UNLOGGED like pgpace.frontier): a new leader must not send a tenant's next webhook sooner than
-- its limit allows after the old leader's last; the dispatcher writes it with each claim round
-- (src/dispatch/tenant.c), as an upper bound of the slots it handed out.
-- No foreign key: the claim statement writes it, and must not fail (or wait) because a
-- customer is being deleted meanwhile; pgpace.customer_delete removes the row.
CREATE TABLE pgpace.tenant_frontier (
    customer_id bigint PRIMARY KEY,
    tat         timestamptz NOT NULL
);

-- How many endpoints one customer may have (pgpace.endpoint_add refuses more).
ALTER TABLE pgpace.setting
    DROP CONSTRAINT setting_value_valid,
    ADD CONSTRAINT setting_value_valid CHECK (
        CASE name
            WHEN 'max_payload_bytes' THEN value ~ '^[0-9]{1,10}$' AND value::bigint BETWEEN 1 AND 1073741824
            WHEN 'max_endpoints_per_customer' THEN value ~ '^[0-9]{1,6}$' AND value::bigint BETWEEN 1 AND 100000
            ELSE false
        END);
INSERT INTO pgpace.setting (name, value) VALUES ('max_endpoints_per_customer', '100');
