-- The dispatcher's view of customers: all of them ($1 NULL) or one (after a change NOTIFY),
-- with their breaker state so a new leader resumes an open breaker, and their failing streak.
-- A disabled customer is held like a paused one (`disabled`). The timeouts and the
-- throttle settings are 0 where the customer has none: the configured default applies.
-- `headers` are the extra header lines to send, the Authorization one included, separated by
-- LF ('' when none): no line holds a CR or LF (the table's constraints). base64 from encode()
-- breaks lines every 76 characters; translate() joins them. OAuth2 (auth 'oauth2') adds no line
-- here: the dispatcher fetches the token (src/dispatch/oauth.c) from the oauth_* columns, which
-- are NULL for the other schemes; the client secret is a secret like the headers.
-- `client_cert` and `client_key` are the PEM certificate (chain) and key for mutual TLS, NULL
-- when none; secrets too.
-- @params: customer_id
-- @columns: id name mode rate_per_minute burst webhook_url secrets max_in_flight paused
-- @columns: connect_timeout_ms request_timeout_ms breaker_state breaker_failures breaker_trips
-- @columns: breaker_open_until_us throttle_decrease throttle_increase throttle_floor disabled
-- @columns: failing_since_us headers oauth_token_url oauth_client_id oauth_client_secret
-- @columns: oauth_scope client_cert client_key proxy
SELECT c.id, c.name, c.mode, c.rate_per_minute, c.burst, c.webhook_url,
       array_to_string(c.signing_secrets, ' ') AS secrets,
       coalesce(c.max_in_flight, 0) AS max_in_flight, c.paused,
       coalesce(c.connect_timeout_ms, 0) AS connect_timeout_ms,
       coalesce(c.request_timeout_ms, 0) AS request_timeout_ms,
       coalesce(b.state, 'closed') AS breaker_state,
       coalesce(b.consecutive_failures, 0) AS breaker_failures,
       coalesce(b.trips, 0) AS breaker_trips,
       (extract(epoch FROM b.open_until) * 1000000)::bigint AS breaker_open_until_us,
       coalesce(c.throttle_decrease, 0) AS throttle_decrease,
       coalesce(c.throttle_increase, 0) AS throttle_increase,
       coalesce(c.throttle_floor, 0) AS throttle_floor,
       c.disabled_at IS NOT NULL AS disabled,
       (extract(epoch FROM h.failing_since) * 1000000)::bigint AS failing_since_us,
       array_to_string(c.extra_headers || CASE c.auth_scheme
           WHEN 'basic' THEN ARRAY['Authorization: Basic '
                                   || translate(encode(convert_to(c.auth_username || ':'
                                                                  || c.auth_secret, 'UTF8'),
                                                       'base64'), E'\n', '')]
           WHEN 'bearer' THEN ARRAY['Authorization: Bearer ' || c.auth_secret]
           ELSE '{}'::text[] END, E'\n') AS headers,
       c.oauth_token_url,
       CASE WHEN c.auth_scheme = 'oauth2' THEN c.auth_username END AS oauth_client_id,
       CASE WHEN c.auth_scheme = 'oauth2' THEN c.auth_secret END AS oauth_client_secret,
       c.oauth_scope,
       c.client_cert, c.client_key,
       c.proxy
  FROM pgpace.customer c
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id
  LEFT JOIN pgpace.customer_health h ON h.customer_id = c.id
 WHERE $1::bigint IS NULL OR c.id = $1::bigint
