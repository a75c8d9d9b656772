-- The CTE runs customer_set first (it may create the customer), then the timeouts ($11, $12),
-- the throttle overrides ($13-$15) and max_age ($16, an interval; 0 removes it); for each of
-- those NULL keeps the value, 0 resets it to the configured default. Then the extra headers
-- ($17, "Name: value" lines replacing the set; '{}' clears, NULL keeps) and the receiver
-- authentication ($18 basic|bearer|none, $19 username, $20 password or token; NULL keeps), or
-- OAuth2 client credentials ($21 token URL, $22 client id, $23 client secret, $24 scope; $21
-- NULL keeps). The limit windows ($25, a text[]: NULL keeps, '{}' clears) and whether to follow
-- the receiver's announced limit ($26) go to customer_set itself: a receiver may be created
-- with windows and no rate. What a dead item with an order key does to its key ($27, skip or
-- hold; NULL keeps) last. The receiver settings' table (src/receiver_settings.c) names these
-- parameters.
-- @params: name mode rate burst url secrets max_in_flight max_attempts paused
-- @params: clear_max_in_flight connect_timeout_ms request_timeout_ms throttle_decrease
-- @params: throttle_increase throttle_floor max_age headers auth_scheme auth_username
-- @params: auth_secret oauth_token_url oauth_client_id oauth_client_secret oauth_scope
-- @params: limits ratelimit_headers order_on_dead
WITH s AS (
    SELECT pgpace.customer_set($1, $2, $3::float8, $4::integer, $5, $6::text[], $7::integer,
                               $8::integer, $9::boolean, coalesce($10::boolean, false),
                               $25::text[], $26::boolean) AS created
)
SELECT s.created, pgpace.customer_set_timeouts($1, $11::integer, $12::integer),
       pgpace.customer_set_throttle($1, $13::float8, $14::float8, $15::float8),
       pgpace.customer_set_max_age($1, $16::interval),
       pgpace.customer_set_headers($1, $17::text[]),
       pgpace.customer_set_auth($1, $18, $19, $20),
       pgpace.customer_set_oauth2($1, $21, $22, $23, $24),
       pgpace.customer_set_order_on_dead($1, $27)
  FROM s
