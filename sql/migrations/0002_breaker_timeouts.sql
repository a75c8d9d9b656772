-- 0002_breaker_timeouts.sql - per-customer circuit breaker state and delivery timeouts.

-- Written by the leader only on transitions (opened, half-open probe, closed), so it is an
-- ordinary logged table: a new leader resumes an open breaker instead of hammering a receiver
-- that is down.
CREATE TABLE pgpace.breaker (
    customer_id          bigint PRIMARY KEY REFERENCES pgpace.customer (id) ON DELETE CASCADE,
    state                text NOT NULL
                         CONSTRAINT breaker_state_valid CHECK (state IN ('closed', 'open', 'half_open')),
    consecutive_failures integer NOT NULL DEFAULT 0,
    trips                integer NOT NULL DEFAULT 0, -- consecutive openings; the cooldown doubles
    open_until           timestamptz,
    last_error           text,
    updated_at           timestamptz NOT NULL DEFAULT now()
);

-- NULL: the configured [delivery] connect_timeout_ms / request_timeout_ms.
ALTER TABLE pgpace.customer
    ADD COLUMN connect_timeout_ms integer
        CONSTRAINT customer_connect_timeout_valid CHECK (connect_timeout_ms BETWEEN 100 AND 600000),
    ADD COLUMN request_timeout_ms integer
        CONSTRAINT customer_request_timeout_valid CHECK (request_timeout_ms BETWEEN 100 AND 3600000);

-- Sets a customer's timeouts: NULL leaves one as it is, 0 resets it to the configured default.
-- (A separate function: editing customer_set's signature would mean re-creating it here.)
CREATE FUNCTION pgpace.customer_set_timeouts(name text, connect_timeout_ms integer,
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
REVOKE EXECUTE ON FUNCTION pgpace.customer_set_timeouts(text, integer, integer) FROM PUBLIC;

-- Appends the breaker to the per-customer view (CREATE OR REPLACE keeps existing columns).
CREATE OR REPLACE VIEW pgpace.customer_stats AS
SELECT c.name AS customer, c.mode, c.rate_per_minute, c.burst, c.paused,
       coalesce(q.due, 0) AS due,
       coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed,
       coalesce(d.dead, 0) AS dead,
       now() - q.oldest_due AS oldest_due_age,
       coalesce(b.state, 'closed') AS breaker,
       CASE WHEN b.state = 'open' THEN b.open_until END AS breaker_open_until
  FROM pgpace.customer c
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE qq.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NOT NULL) AS in_flight,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NULL) AS delayed,
             min(qq.next_action_at) FILTER (WHERE qq.next_action_at <= now()) AS oldest_due
        FROM pgpace.queue qq WHERE qq.customer_id = c.id) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id) d ON true
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id;
