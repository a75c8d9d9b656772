-- The dispatcher's view of customers, with their breaker state so a new leader resumes an open
-- breaker, and their failing streak: a page of all of them ($1 NULL: at most $3 with id > $2, in
-- id order; the start-up load reads 1,000,000 in pages of a few thousand, not one result of
-- hundreds of megabytes), or those whose ids $1 lists (change NOTIFYs, batched: a change to
-- 100,000 customers at once is a hundred statements, not 100,000). One statement for both, so
-- each branch is guarded by its parameters alone (a one-time filter in a generic plan) and every
-- row is found by its primary key: with `$1 IS NULL OR c.id = $1` the cached generic plan scanned
-- every customer for each reload (217 ms at 1,000,000).
-- The start-up load pages with run_customers_page.sql (the customer's row alone) and reads by
-- id here only the customers run_customers_extra.sql lists; the page branch stays the reference
-- those are checked against (test_queries.c) and what bench/run times as one statement.
-- A disabled customer is held like a paused one (`disabled`; since `disabled_at_us`, which the
-- status page shows). The timeouts and the throttle settings are 0 where the customer has none:
-- the configured default applies.
-- `headers` are the extra header lines to send, the Authorization one included, separated by
-- LF ('' when none): no line holds a CR or LF (the table's constraints). base64 from encode()
-- breaks lines every 76 characters; translate() joins them. OAuth2 (auth 'oauth2') adds no line
-- here: the dispatcher fetches the token (src/dispatch/oauth.c) from the oauth_* columns, which
-- are NULL for the other schemes; the client secret is a secret like the headers.
-- `client_cert` and `client_key` are the PEM certificate (chain) and key for mutual TLS, NULL
-- when none; secrets too.
-- Endpoints (0018): `tenant_id` is the customer an endpoint belongs to (a customer's own receiver:
-- its own id); `tenant_rate` and `tenant_burst` are that customer's limit over all of its
-- endpoints, NULL when it has none to share: no endpoints, no rate, or mode unlimited; `grouped`:
-- the row is one of several endpoints of its customer (fairness divides among customers first,
-- then among their endpoints). A customer
-- without a receiver of its own (no webhook URL) is no row: nothing is ever sent to it.
-- Limits (0019): `limit_windows` are the row's own windows and `tenant_limit_windows` its
-- customer's over all of its endpoints, in pgpace.limits_machine's form ('' for none);
-- `ratelimit_headers`: follow the limit the receiver announces in its answers.
-- `rate_per_minute` and `tenant_rate` are the pace: the lesser of the row's rate_per_minute and
-- its shortest window's rate (pgpace.limits_rate; least() skips a NULL, so a receiver with
-- windows and no rate is paced by its windows), and a customer with windows but no rate still
-- shares a limit over its endpoints.
-- The limit helpers are called only for rows that have windows (they are SQL functions with their
-- own search_path, so never inlined: a call each cost about 10 us a row, for every row), and
-- `grouped` probes the endpoints' index per row: as an EXISTS the planner hashed the whole
-- customer table for each page (1,000,000 customers: 200 pages of 300 ms, a minute to start).
-- The page's rows are read once, in id order, by its branch (no list of ids joined back to the
-- table: each join then ran through a cache of one miss per row, and the result was sorted), and
-- the tenant probe runs only for grouped rows: a page of 5,000 takes about 13 ms, not 40.
-- @params: customer_ids after_id page
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
       c.proxy,
       (extract(epoch FROM c.disabled_at) * 1000000)::bigint AS disabled_at_us,
       coalesce(c.parent_id, c.id) AS tenant_id,
       CASE WHEN cardinality(t.limits) > 0
            THEN least(t.rate_per_minute, pgpace.limits_rate(t.limits))
            ELSE t.rate_per_minute END AS tenant_rate,
       t.burst AS tenant_burst,
       c.parent_id IS NOT NULL OR e.id IS NOT NULL AS grouped,
       CASE WHEN cardinality(c.limits) > 0 THEN pgpace.limits_machine(c.limits) ELSE '' END
           AS limit_windows,
       CASE WHEN cardinality(t.limits) > 0 THEN pgpace.limits_machine(t.limits) ELSE '' END
           AS tenant_limit_windows,
       c.ratelimit_headers
  FROM ((SELECT cu.* FROM pgpace.customer cu
          WHERE $1::bigint[] IS NULL AND cu.id > $2::bigint AND cu.webhook_url IS NOT NULL
          ORDER BY cu.id LIMIT $3::int)
        UNION ALL
        (SELECT cc.* FROM (SELECT DISTINCT u.id FROM unnest($1::bigint[]) AS u(id)) ids
          -- OFFSET 0 keeps each join a probe by key (not a merge over the whole table).
          CROSS JOIN LATERAL (SELECT cc.* FROM pgpace.customer cc WHERE cc.id = ids.id
                               OFFSET 0) cc)) c
  LEFT JOIN LATERAL (SELECT bb.* FROM pgpace.breaker bb WHERE bb.customer_id = c.id OFFSET 0) b
         ON true
  LEFT JOIN LATERAL (SELECT hh.* FROM pgpace.customer_health hh WHERE hh.customer_id = c.id
                      OFFSET 0) h ON true
  LEFT JOIN LATERAL (SELECT ee.id FROM pgpace.customer ee WHERE ee.parent_id = c.id LIMIT 1) e
         ON true
 -- Only a grouped row has a customer with endpoints to share a limit with (an endpoint's
 -- parent has it as a child; a customer's own receiver, e): for the others (nearly all) the
 -- probe is skipped by a one-time filter.
  LEFT JOIN LATERAL (SELECT tt.rate_per_minute, tt.burst, tt.limits FROM pgpace.customer tt
                      WHERE (c.parent_id IS NOT NULL OR e.id IS NOT NULL)
                        AND tt.id = coalesce(c.parent_id, c.id)
                        AND (tt.rate_per_minute IS NOT NULL OR cardinality(tt.limits) > 0)
                        AND tt.mode <> 'unlimited'
                     OFFSET 0) t ON true
 WHERE c.webhook_url IS NOT NULL
 ORDER BY c.id
