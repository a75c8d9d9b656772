-- A page of the start-up load (at most $2 customers with id > $1, in id order) for the customers
-- with nothing in another table: run_customers.sql's columns, from the customer's row alone.
-- The customers with a breaker or health row, a parent or endpoints are listed first
-- (run_customers_extra.sql) and loaded by run_customers.sql; their rows here are skipped. For
-- the others those joins give nothing, and this says so without probing for it: breaker closed
-- and no streak, their own tenant with no limit to share, not grouped. The four joins' index
-- probes were 9 of a page's 14 ms (5,000 rows, 1,000,000 customers), and the page's server time
-- was as long as the leader's applying it.
-- The customer's own columns are computed as run_customers.sql does, guarded so a customer
-- without headers, auth or windows costs no call (array_to_string, encode, the limit helpers).
-- Keep the columns identical to run_customers.sql's (rows.c checks it at compile time).
-- @params: after_id page
-- @columns: id name mode rate_per_minute burst webhook_url secrets max_in_flight paused
-- @columns: connect_timeout_ms request_timeout_ms breaker_state breaker_failures breaker_trips
-- @columns: breaker_open_until_us throttle_decrease throttle_increase throttle_floor disabled
-- @columns: failing_since_us headers oauth_token_url oauth_client_id oauth_client_secret
-- @columns: oauth_scope client_cert client_key proxy disabled_at_us tenant_id tenant_rate
-- @columns: tenant_burst grouped limit_windows tenant_limit_windows ratelimit_headers
SELECT c.id, c.name, c.mode,
       CASE WHEN cardinality(c.limits) > 0
            THEN least(c.rate_per_minute, pgpace.limits_rate(c.limits))
            ELSE c.rate_per_minute END AS rate_per_minute,
       c.burst, c.webhook_url,
       array_to_string(c.signing_secrets, ' ') AS secrets,
       coalesce(c.max_in_flight, 0) AS max_in_flight, c.paused,
       coalesce(c.connect_timeout_ms, 0) AS connect_timeout_ms,
       coalesce(c.request_timeout_ms, 0) AS request_timeout_ms,
       'closed' AS breaker_state, 0 AS breaker_failures, 0 AS breaker_trips,
       NULL::bigint AS breaker_open_until_us,
       coalesce(c.throttle_decrease, 0) AS throttle_decrease,
       coalesce(c.throttle_increase, 0) AS throttle_increase,
       coalesce(c.throttle_floor, 0) AS throttle_floor,
       c.disabled_at IS NOT NULL AS disabled,
       NULL::bigint AS failing_since_us,
       CASE WHEN cardinality(c.extra_headers) = 0 AND coalesce(c.auth_scheme, '') NOT IN ('basic', 'bearer')
            THEN ''
            ELSE array_to_string(c.extra_headers || CASE c.auth_scheme
                WHEN 'basic' THEN ARRAY['Authorization: Basic '
                                        || translate(encode(convert_to(c.auth_username || ':'
                                                                       || c.auth_secret, 'UTF8'),
                                                            'base64'), E'\n', '')]
                WHEN 'bearer' THEN ARRAY['Authorization: Bearer ' || c.auth_secret]
                ELSE '{}'::text[] END, E'\n') END AS headers,
       c.oauth_token_url,
       CASE WHEN c.auth_scheme = 'oauth2' THEN c.auth_username END AS oauth_client_id,
       CASE WHEN c.auth_scheme = 'oauth2' THEN c.auth_secret END AS oauth_client_secret,
       c.oauth_scope,
       c.client_cert, c.client_key,
       c.proxy,
       (extract(epoch FROM c.disabled_at) * 1000000)::bigint AS disabled_at_us,
       c.id AS tenant_id,
       NULL::float8 AS tenant_rate, NULL::integer AS tenant_burst,
       false AS grouped,
       CASE WHEN cardinality(c.limits) > 0 THEN pgpace.limits_machine(c.limits) ELSE '' END
           AS limit_windows,
       '' AS tenant_limit_windows,
       c.ratelimit_headers
  FROM pgpace.customer c
 WHERE c.id > $1::bigint AND c.webhook_url IS NOT NULL
 ORDER BY c.id
 LIMIT $2::int
