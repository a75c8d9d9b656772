-- `pgpace customer get` (and `endpoint get`, by the endpoint's full name): every setting of the
-- row. `endpoints` counts what `pgpace endpoint list` shows: the row's own receiver ('default',
-- when it has a webhook URL) and its endpoints. `limits`: its windows, canonical, separated by
-- ", " ('none'); `ratelimit_headers`: on or off; `order_on_dead`: skip or hold.
SELECT c.name, c.mode, coalesce(c.rate_per_minute::text, '-') AS rate_per_minute,
       coalesce(nullif(array_to_string(c.limits, ', '), ''), 'none') AS limits,
       CASE WHEN c.ratelimit_headers THEN 'on' ELSE 'off' END AS ratelimit_headers,
       c.burst, c.webhook_url,
       (SELECT count(*) FROM pgpace.customer e WHERE e.parent_id = c.id)
         + (c.webhook_url IS NOT NULL)::integer AS endpoints,
       c.paused,
       coalesce(to_char(c.disabled_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'), 'no') AS disabled,
       coalesce(c.disabled_reason, '-') AS disabled_reason,
       coalesce(c.max_in_flight::text, 'unlimited') AS max_in_flight, c.max_attempts,
       coalesce(c.connect_timeout_ms::text, 'default') AS connect_timeout_ms,
       coalesce(c.request_timeout_ms::text, 'default') AS request_timeout_ms,
       coalesce(c.throttle_decrease::text, 'default') AS throttle_decrease,
       coalesce(c.throttle_increase::text, 'default') AS throttle_increase,
       coalesce(c.throttle_floor::text, 'default') AS throttle_floor,
       coalesce(c.max_age::text, 'none') AS max_age,
       c.order_on_dead,
       coalesce(b.state, 'closed') AS breaker,
       coalesce(to_char(h.failing_since AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS"Z"'), '-') AS failing_since,
       cardinality(c.signing_secrets) AS secrets, array_to_string(c.signing_secrets, ' ') AS secret_list,
       array_to_string(c.extra_headers, E'\n') AS headers,
       coalesce(c.auth_scheme, 'none') AS auth,
       CASE WHEN c.auth_scheme IN ('basic', 'oauth2') THEN c.auth_username || ':' || c.auth_secret
            ELSE c.auth_secret END AS auth_credentials,
       coalesce(c.oauth_token_url, '-') AS oauth_token_url,
       coalesce(c.oauth_scope, '-') AS oauth_scope,
       coalesce(c.proxy, 'default') AS proxy,
       c.client_cert, c.client_key,
       c.created_at, c.updated_at
  FROM pgpace.customer c LEFT JOIN pgpace.breaker b ON b.customer_id = c.id
  LEFT JOIN pgpace.customer_health h ON h.customer_id = c.id
 WHERE c.name = $1
