-- A page of the start-up load: at most $2 customers with id > $1, in id order, from the
-- customer's row alone and only the columns every customer has. The customers with a breaker or
-- health row, a parent or endpoints are listed before the pages (run_customers_extra.sql) and
-- `whole` marks those with headers, auth (OAuth2 too), a client certificate, a proxy or limit
-- windows: the leader reads both whole, by id, with run_customers.sql; their rows here are
-- skipped. For every other customer this row is run_customers.sql's, the columns not here at
-- their values for a customer with none of those (customer_page_row_parse, rows.c;
-- test_queries.c checks it): no headers, no auth, no certificate or proxy, breaker closed and
-- no streak, its own tenant with no limit to share, not grouped, no windows.
-- At 1,000,000 customers the whole row's four per-row joins and its header and limit
-- expressions were most of a page's 14 ms of server time, and its 36 text columns were what
-- PostgreSQL spent most on sending and the leader on reading (bench/TENANTS_PROFILE.md 11).
-- @params: after_id page
-- @columns: id name mode rate_per_minute burst webhook_url secrets max_in_flight paused
-- @columns: connect_timeout_ms request_timeout_ms throttle_decrease throttle_increase
-- @columns: throttle_floor disabled disabled_at_us ratelimit_headers whole
SELECT c.id, c.name, c.mode, c.rate_per_minute, c.burst, c.webhook_url,
       array_to_string(c.signing_secrets, ' ') AS secrets,
       coalesce(c.max_in_flight, 0) AS max_in_flight, c.paused,
       coalesce(c.connect_timeout_ms, 0) AS connect_timeout_ms,
       coalesce(c.request_timeout_ms, 0) AS request_timeout_ms,
       coalesce(c.throttle_decrease, 0) AS throttle_decrease,
       coalesce(c.throttle_increase, 0) AS throttle_increase,
       coalesce(c.throttle_floor, 0) AS throttle_floor,
       c.disabled_at IS NOT NULL AS disabled,
       (extract(epoch FROM c.disabled_at) * 1000000)::bigint AS disabled_at_us,
       c.ratelimit_headers,
       cardinality(c.extra_headers) > 0 OR c.auth_scheme IS NOT NULL
           OR c.oauth_token_url IS NOT NULL OR c.client_cert IS NOT NULL
           OR c.client_key IS NOT NULL OR c.proxy IS NOT NULL OR cardinality(c.limits) > 0
           AS whole
  FROM pgpace.customer c
 WHERE c.id > $1::bigint AND c.webhook_url IS NOT NULL
 ORDER BY c.id
 LIMIT $2::int
