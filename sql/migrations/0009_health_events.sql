-- 0009_health_events.sql - a customer's health lifecycle and the operator events that record
-- it. Tables only (the functions are in sql/functions/14_health.sql).
--
-- A customer whose deliveries have all failed for [health] disable_after is disabled: its items
-- wait, as with a pause, until `pgpace customer enable`. Every lifecycle change (failing,
-- recovered, breaker open too long, disabled, enabled, paused, resumed) is a row of
-- pgpace.event, announced by NOTIFY; the leader logs it, counts it and (optionally) posts it to
-- an operator webhook.

-- disabled_at: when health disabled the customer (NULL: enabled). Separate from `paused`: a
-- pause is an operator's or a receiver's (410) decision, a disable is pgpace's; enabling
-- clears only the disable, and each shows for what it is.
ALTER TABLE pgpace.customer
    ADD COLUMN disabled_at timestamptz,
    ADD COLUMN disabled_reason text
        CONSTRAINT customer_disabled_reason_valid CHECK (length(disabled_reason) <= 1000);

-- A customer's failing streak, while it lasts: the first failed attempt after its last success
-- (recorded once breaker_failures attempts in a row failed: the `failing` event), deleted by
-- the next success (`recovered`). The disable check starts from it and confirms against the
-- attempt log (no success since, enough failed attempts), so a lost `recovered` write cannot
-- disable a healthy customer.
CREATE TABLE pgpace.customer_health (
    customer_id   bigint PRIMARY KEY REFERENCES pgpace.customer (id) ON DELETE CASCADE,
    failing_since timestamptz NOT NULL,
    last_error    text,
    updated_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX customer_health_since ON pgpace.customer_health (failing_since);

-- The breaker's open spell: opened_at, its first trip (kept across reopenings); open_event_at,
-- when the "open too long" event was recorded for it.
ALTER TABLE pgpace.breaker
    ADD COLUMN opened_at timestamptz,
    ADD COLUMN open_event_at timestamptz;

-- Operator events, partitioned by day like the attempt log and retained as long
-- (attempt_retention_days). `customer` keeps the name as it was (the customer may be deleted
-- since); `handled_at` is set by the leader once it has logged the event and, when an operator
-- webhook is configured, the webhook was accepted; a refused post is tried again from
-- `next_post_at` (backing off with `post_attempts`), so one bad event never holds up the rest.
CREATE SEQUENCE pgpace.event_id_seq AS bigint;
CREATE TABLE pgpace.event (
    id          bigint NOT NULL DEFAULT nextval('pgpace.event_id_seq'),
    at          timestamptz NOT NULL DEFAULT now(),
    kind        text NOT NULL
                CONSTRAINT event_kind_valid
                CHECK (kind IN ('failing', 'recovered', 'breaker_open', 'disabled', 'enabled',
                                'paused', 'resumed')),
    customer_id bigint,
    customer    text NOT NULL,
    detail      jsonb NOT NULL DEFAULT '{}'::jsonb,
    handled_at  timestamptz,
    post_attempts integer NOT NULL DEFAULT 0,
    next_post_at timestamptz
) PARTITION BY RANGE (at);
ALTER SEQUENCE pgpace.event_id_seq OWNED BY pgpace.event.id;
CREATE INDEX event_customer ON pgpace.event (customer_id, at);
CREATE INDEX event_at ON pgpace.event (at, id);
-- The leader's work list: events not handled yet (few at any time).
CREATE INDEX event_unhandled ON pgpace.event (id) WHERE handled_at IS NULL;
CREATE TABLE pgpace.event_default PARTITION OF pgpace.event DEFAULT;
SELECT pgpace.ensure_partitions('pgpace.event', 7);
