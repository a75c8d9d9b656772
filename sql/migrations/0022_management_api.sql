-- 0022_management_api.sql - what the management API under /v1 and the tenant page keep
-- (issue 33; the API itself is sql/functions/21_api.sql):
-- - every write through the API is an operator event of kind `api_write` (who, what, when), so
--   `pgpace events` and the operator webhook show it beside the lifecycle events;
-- - the answers to POSTs that came with an Idempotency-Key, for 24 hours: a client that retries
--   after a lost answer gets the first answer again instead of a second change;
-- - the key that signs tenant page links (made here, never leaves the database: links are
--   signed and checked by SQL functions) and, per customer, the generation of its links:
--   `pgpace portal-link CUSTOMER --revoke` moves it on, which voids every link given out before.
ALTER TABLE pgpace.event DROP CONSTRAINT event_kind_valid;
ALTER TABLE pgpace.event ADD CONSTRAINT event_kind_valid
    CHECK (kind IN ('failing', 'recovered', 'breaker_open', 'disabled', 'enabled', 'paused',
                    'resumed', 'api_write')) NOT VALID;

CREATE TABLE pgpace.api_idempotency (
    actor        text NOT NULL,
    key          text NOT NULL
                 CONSTRAINT api_idempotency_key_valid
                 CHECK (length(key) BETWEEN 1 AND 255 AND key !~ '[[:cntrl:]]'),
    request_hash bytea NOT NULL,
    status       integer NOT NULL,
    etag         text,
    location     text,
    body         jsonb,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (actor, key)
);
CREATE INDEX api_idempotency_created ON pgpace.api_idempotency (created_at);

CREATE TABLE pgpace.portal_key (
    one      boolean PRIMARY KEY DEFAULT true CONSTRAINT portal_key_one CHECK (one),
    key      bytea NOT NULL CONSTRAINT portal_key_length CHECK (length(key) = 32)
);
INSERT INTO pgpace.portal_key (key)
VALUES (decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'));

CREATE TABLE pgpace.portal_generation (
    customer_id bigint PRIMARY KEY REFERENCES pgpace.customer (id) ON DELETE CASCADE,
    generation  integer NOT NULL DEFAULT 0
);

-- Whether the tenant page shows payloads (off by default: a payload may hold what the tenant's
-- own users sent, and the page is one link away from anyone it is forwarded to). Two indexes
-- serve the API and the tenant page: an event's deliveries (GET /v1/events/{id}), and a
-- customer's or an endpoint's items newest first (GET /v1/events?customer=..., its deliveries):
-- without it a list of one customer among many reads every item (the cost to an enqueue is in
-- bench/API_LOAD.md).
CREATE INDEX item_event ON pgpace.item (event_id) WHERE event_id IS NOT NULL;
CREATE INDEX item_customer ON pgpace.item (customer_id, id);
ALTER TABLE pgpace.setting DROP CONSTRAINT setting_value_valid;
ALTER TABLE pgpace.setting ADD CONSTRAINT setting_value_valid CHECK (
    CASE name
        WHEN 'max_payload_bytes' THEN value ~ '^[0-9]{1,10}$' AND value::bigint BETWEEN 1 AND 1073741824
        WHEN 'max_endpoints_per_customer' THEN value ~ '^[0-9]{1,6}$' AND value::bigint BETWEEN 1 AND 100000
        WHEN 'portal_show_payloads' THEN value IN ('on', 'off')
        ELSE false
    END);
INSERT INTO pgpace.setting (name, value) VALUES ('portal_show_payloads', 'off');
