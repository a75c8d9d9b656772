-- 08_customer.sql - creating, changing and deleting customers.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- A new signing secret: 256 bits from two v4 UUIDs (244 random bits), as Standard Webhooks
-- spells it. Used when the caller brings no secret.
CREATE OR REPLACE FUNCTION pgpace.new_signing_secret() RETURNS text
LANGUAGE sql VOLATILE
SET search_path = pg_catalog, pg_temp
RETURN 'whsec_' || encode(decode(replace(gen_random_uuid()::text || gen_random_uuid()::text, '-', ''), 'hex'), 'base64');

-- A limits argument (0019) in its stored form: NULL stays NULL (unchanged), '{}' clears, any
-- other list is pgpace.limits_normalize's canonical form. A bad list is refused with SQLSTATE
-- 22023 naming the field and the window ("limits: limit window '10/fortnight': unknown unit").
CREATE OR REPLACE FUNCTION pgpace.customer_limits_arg(limits text[])
RETURNS text[]
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    why text := pgpace.limits_error(limits);
BEGIN
    IF why IS NOT NULL THEN
        RAISE EXCEPTION 'limits: %', why
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'windows are COUNT/PERIOD: 10/s, 600/min, 100/10s, 50000/day (1 s to 7 days, at most 8, one per period)';
    END IF;
    IF limits IS NULL THEN
        RETURN NULL;
    END IF;
    RETURN pgpace.limits_normalize(limits);
END
$$;

-- Whether a receiver row as it is about to be written has a pace: a rate, or (spaced, batch)
-- limit windows; a customer without a receiver needs neither. The rule of the table's
-- customer_receiver_complete, refused here naming the field (23502).
CREATE OR REPLACE FUNCTION pgpace.check_receiver_pace(name text, mode text,
                                                      rate_per_minute double precision,
                                                      webhook_url text, limits text[])
RETURNS void
LANGUAGE plpgsql IMMUTABLE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF webhook_url IS NULL OR rate_per_minute IS NOT NULL THEN
        RETURN;
    END IF;
    IF coalesce(cardinality(limits), 0) = 0 THEN
        RAISE EXCEPTION 'limits: % would have neither a rate nor limit windows', quote_literal(name)
            USING ERRCODE = 'null_value_not_allowed',
                  HINT = 'give a rate (--rate) before clearing its windows';
    END IF;
    IF mode = 'unlimited' THEN
        RAISE EXCEPTION 'rate: % in mode unlimited needs a rate (its windows pace only spaced and batch sending)',
                        quote_literal(name)
            USING ERRCODE = 'null_value_not_allowed';
    END IF;
END
$$;

-- Creates or updates a customer; NULL arguments leave the current value (or the default on
-- creation). Returns true when the customer was created. Used by `pgpace customer set` and
-- usable from SQL directly; the dispatcher picks changes up through the notify trigger on
-- pgpace.customer (09_notify.sql).
-- limits (0019): the COUNT/PERIOD windows ('{}' clears them), stored as
-- pgpace.limits_normalize writes them; a bad list is refused (22023) naming the field and the
-- window. A spaced or batch receiver may have windows and no rate_per_minute: its pace is then
-- its shortest window's. ratelimit_headers: follow the limit the receiver announces.
--
-- Before `limits` and `ratelimit_headers`: the ten-argument form is dropped once, in this file's
-- transaction (with both, a call naming only the first arguments would match either).
DO $$
BEGIN
    IF to_regprocedure('pgpace.customer_set(text, text, double precision, integer, text, text[], '
                       'integer, integer, boolean, boolean)') IS NOT NULL THEN
        DROP FUNCTION pgpace.customer_set(text, text, double precision, integer, text, text[],
                                          integer, integer, boolean, boolean);
    END IF;
END
$$;
CREATE OR REPLACE FUNCTION pgpace.customer_set(
    name                text,
    mode                text DEFAULT NULL,
    rate_per_minute     double precision DEFAULT NULL,
    burst               integer DEFAULT NULL,
    webhook_url         text DEFAULT NULL,
    signing_secrets     text[] DEFAULT NULL,
    max_in_flight       integer DEFAULT NULL,
    max_attempts        integer DEFAULT NULL,
    paused              boolean DEFAULT NULL,
    clear_max_in_flight boolean DEFAULT false,
    limits              text[] DEFAULT NULL,
    ratelimit_headers   boolean DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    windows text[] := pgpace.customer_limits_arg(customer_set.limits);
    cur     record;
BEGIN
    -- An endpoint's receiver settings are changed here too, by its full name
    -- "<customer>/<endpoint>" (it is created by pgpace.endpoint_add).
    IF customer_set.name IS NULL OR NOT (pgpace.valid_name(customer_set.name) OR EXISTS (
           SELECT 1 FROM pgpace.customer e WHERE e.name = customer_set.name AND e.parent_id IS NOT NULL)) THEN
        RAISE EXCEPTION 'invalid customer name %', coalesce(quote_literal(left(customer_set.name, 140)), 'NULL')
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'names are 1-128 characters of A-Z a-z 0-9 . _ : @ - starting with a letter or digit';
    END IF;
    PERFORM pgpace.check_signing_secrets(customer_set.signing_secrets);
    SELECT c.mode, c.rate_per_minute, c.webhook_url, c.limits INTO cur
      FROM pgpace.customer c WHERE c.name = customer_set.name FOR UPDATE;
    IF FOUND THEN
        -- What the row will be must still have a pace (the table's customer_receiver_complete),
        -- said here with the field's name rather than the constraint's.
        PERFORM pgpace.check_receiver_pace(customer_set.name,
                                           coalesce(customer_set.mode, cur.mode),
                                           coalesce(customer_set.rate_per_minute, cur.rate_per_minute),
                                           coalesce(customer_set.webhook_url, cur.webhook_url),
                                           coalesce(windows, cur.limits));
    END IF;
    UPDATE pgpace.customer c SET
        mode = coalesce(customer_set.mode, c.mode),
        rate_per_minute = coalesce(customer_set.rate_per_minute, c.rate_per_minute),
        burst = coalesce(customer_set.burst, c.burst),
        webhook_url = coalesce(customer_set.webhook_url, c.webhook_url),
        -- A customer without a receiver of its own gets a secret with its first URL.
        signing_secrets = coalesce(customer_set.signing_secrets, c.signing_secrets,
                                   CASE WHEN customer_set.webhook_url IS NOT NULL
                                        THEN ARRAY[pgpace.new_signing_secret()] END),
        max_in_flight = CASE WHEN customer_set.clear_max_in_flight THEN NULL
                             ELSE coalesce(customer_set.max_in_flight, c.max_in_flight) END,
        max_attempts = coalesce(customer_set.max_attempts, c.max_attempts),
        paused = coalesce(customer_set.paused, c.paused),
        limits = coalesce(windows, c.limits),
        ratelimit_headers = coalesce(customer_set.ratelimit_headers, c.ratelimit_headers),
        updated_at = now()
     WHERE c.name = customer_set.name;
    IF FOUND THEN
        RETURN false;
    END IF;
    -- A customer may be created without a receiver of its own (its endpoints are added with
    -- pgpace.endpoint_add); then its rate, the limit over all of its endpoints, is optional.
    IF customer_set.webhook_url IS NOT NULL AND customer_set.rate_per_minute IS NULL
       AND coalesce(cardinality(windows), 0) = 0 THEN
        RAISE EXCEPTION 'customer % does not exist; creating it with a webhook URL needs a rate (or limits)',
                        quote_literal(customer_set.name)
            USING ERRCODE = 'no_data_found';
    END IF;
    IF customer_set.webhook_url IS NULL AND customer_set.signing_secrets IS NOT NULL THEN
        RAISE EXCEPTION 'secret: customer % has no webhook URL to sign for (its endpoints have their own secrets)',
                        quote_literal(customer_set.name)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF position('/' IN customer_set.name) > 0 THEN
        RAISE EXCEPTION 'unknown endpoint %', quote_literal(customer_set.name)
            USING ERRCODE = 'no_data_found',
                  HINT = 'add endpoints with pgpace endpoint add <customer> <endpoint> --url ... --rate ...';
    END IF;
    PERFORM pgpace.check_receiver_pace(customer_set.name, coalesce(customer_set.mode, 'spaced'),
                                       customer_set.rate_per_minute, customer_set.webhook_url,
                                       coalesce(windows, '{}'));
    INSERT INTO pgpace.customer (name, mode, rate_per_minute, burst, webhook_url, signing_secrets,
                                 max_in_flight, max_attempts, paused, limits, ratelimit_headers)
    VALUES (customer_set.name, coalesce(customer_set.mode, 'spaced'), customer_set.rate_per_minute,
            coalesce(customer_set.burst, 1), customer_set.webhook_url,
            coalesce(customer_set.signing_secrets,
                     CASE WHEN customer_set.webhook_url IS NOT NULL
                          THEN ARRAY[pgpace.new_signing_secret()] END),
            CASE WHEN customer_set.clear_max_in_flight THEN NULL ELSE customer_set.max_in_flight END,
            coalesce(customer_set.max_attempts, 12), coalesce(customer_set.paused, false),
            coalesce(windows, '{}'), coalesce(customer_set.ratelimit_headers, true));
    RETURN true;
END
$$;

-- Sets a customer's timeouts: NULL leaves one as it is, 0 resets it to the configured default.
-- (A separate function: the timeouts came after customer_set, whose signature stayed as it was.)
CREATE OR REPLACE FUNCTION pgpace.customer_set_timeouts(name text, connect_timeout_ms integer,
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

-- Sets a customer's throttle overrides (pacing that listens to the receiver, [delivery]
-- throttle_* in the configuration): NULL leaves one as it is, 0 resets it to the configured
-- default, as for the timeouts. A value out of its range is refused with the field's name
-- (SQLSTATE 22023) before anything changes; the CHECK constraints of pgpace.customer hold the
-- same ranges for any other writer. An unknown customer is an error (P0002) when something is
-- to be set.
CREATE OR REPLACE FUNCTION pgpace.customer_set_throttle(name text,
                                                        throttle_decrease double precision,
                                                        throttle_increase double precision,
                                                        throttle_floor double precision)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    -- NaN compares greater than every number, so each upper bound also refuses NaN.
    IF customer_set_throttle.throttle_decrease <> 0
       AND NOT (customer_set_throttle.throttle_decrease > 0
                AND customer_set_throttle.throttle_decrease < 1) THEN
        RAISE EXCEPTION 'throttle_decrease must be greater than 0 and less than 1, got %',
                        customer_set_throttle.throttle_decrease
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_decrease)';
    END IF;
    IF customer_set_throttle.throttle_increase <> 0
       AND NOT (customer_set_throttle.throttle_increase > 0
                AND customer_set_throttle.throttle_increase <= 1) THEN
        RAISE EXCEPTION 'throttle_increase must be greater than 0 and at most 1, got %',
                        customer_set_throttle.throttle_increase
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_increase)';
    END IF;
    IF customer_set_throttle.throttle_floor <> 0
       AND NOT (customer_set_throttle.throttle_floor > 0
                AND customer_set_throttle.throttle_floor <= 1) THEN
        RAISE EXCEPTION 'throttle_floor must be greater than 0 and at most 1, got %',
                        customer_set_throttle.throttle_floor
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 resets it to the configured default ([delivery] throttle_floor)';
    END IF;
    IF customer_set_throttle.throttle_decrease IS NULL
       AND customer_set_throttle.throttle_increase IS NULL
       AND customer_set_throttle.throttle_floor IS NULL THEN
        RETURN;
    END IF;
    UPDATE pgpace.customer c SET
        throttle_decrease = CASE WHEN customer_set_throttle.throttle_decrease IS NULL
                                 THEN c.throttle_decrease
                                 WHEN customer_set_throttle.throttle_decrease = 0 THEN NULL
                                 ELSE customer_set_throttle.throttle_decrease END,
        throttle_increase = CASE WHEN customer_set_throttle.throttle_increase IS NULL
                                 THEN c.throttle_increase
                                 WHEN customer_set_throttle.throttle_increase = 0 THEN NULL
                                 ELSE customer_set_throttle.throttle_increase END,
        throttle_floor = CASE WHEN customer_set_throttle.throttle_floor IS NULL
                              THEN c.throttle_floor
                              WHEN customer_set_throttle.throttle_floor = 0 THEN NULL
                              ELSE customer_set_throttle.throttle_floor END,
        updated_at = now()
     WHERE c.name = customer_set_throttle.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_throttle.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets a customer's max_age: how late its items may be sent, counted from when each is due (its
-- run_at, or its enqueue when that is later); an item not sent by then is dead-lettered as
-- 'expired'. NULL leaves it as it is, 0 removes the limit (as 0 resets the overrides above). It
-- applies to items enqueued from now on: each item's deadline is fixed at enqueue
-- (queue.expires_at), so the claim and the expiry sweep read one indexed column instead of
-- joining every row to its customer. Bounded like the column's CHECK (at most 365 days),
-- refused with SQLSTATE 22023 naming the field; an unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_max_age(name text, max_age interval)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set_max_age.max_age IS NULL THEN
        RETURN;
    END IF;
    IF customer_set_max_age.max_age < interval '0'
       OR customer_set_max_age.max_age > interval '365 days' THEN
        RAISE EXCEPTION 'max_age must be from 1 microsecond to 365 days (0: none), got %',
                        customer_set_max_age.max_age
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = '0 removes the limit';
    END IF;
    UPDATE pgpace.customer c SET
        max_age = CASE WHEN customer_set_max_age.max_age > interval '0'
                       THEN customer_set_max_age.max_age END,
        updated_at = now()
     WHERE c.name = customer_set_max_age.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_max_age.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets what a dead-lettered item with an order key does to its key (0020_order_keys.sql), for a
-- customer's own receiver or an endpoint ("customer/endpoint"): 'skip' lets the key's next
-- item go, 'hold' stops the key until the dead letter is replayed or purged. NULL leaves it.
-- Applies to dead letters from then on: a key held now stays held until its head is replayed or
-- purged. An unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_order_on_dead(name text, order_on_dead text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set_order_on_dead.order_on_dead IS NULL THEN
        RETURN;
    END IF;
    IF customer_set_order_on_dead.order_on_dead NOT IN ('skip', 'hold') THEN
        RAISE EXCEPTION 'order_on_dead must be skip or hold, got %',
                        quote_literal(left(customer_set_order_on_dead.order_on_dead, 32))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgpace.customer c SET order_on_dead = customer_set_order_on_dead.order_on_dead,
                                 updated_at = now()
     WHERE c.name = customer_set_order_on_dead.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_order_on_dead.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets a customer's static extra headers: "Name: value" lines that replace the current set
-- ('{}' removes them all; NULL leaves them). They go with every webhook of the customer, after
-- the Standard Webhooks headers. Each line is checked and refused with SQLSTATE 22023 naming it
-- (headers[N], 1-based) and never quoting its value, which is a secret (an API key): the name
-- must be an HTTP token (RFC 9110) of at most 64 characters, not one the sender sets itself or
-- that would change the request's framing or routing (reserved, below), and not given twice
-- (names compare case-insensitively); the value (without the spaces or tabs around it) must be
-- 1 to 4096 bytes without control characters: no CR or LF that would start a header (or a
-- request) of its own. At most 20 lines. An unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_headers(name text, headers text[])
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    -- Set by the sender (the Standard Webhooks headers, content-type, user-agent, Expect),
    -- by libcurl from the request (host, content-length, the framing and connection headers),
    -- by the auth setting (authorization), or by trace context (traceparent, tracestate).
    reserved constant text[] := ARRAY['content-type', 'content-length', 'host', 'user-agent',
                                      'authorization', 'transfer-encoding', 'connection',
                                      'traceparent', 'tracestate', 'expect', 'keep-alive', 'te',
                                      'trailer', 'upgrade', 'proxy-connection'];
    line text;
    colon integer;
    hname text;
    hvalue text;
    i integer := 0;
    seen text[] := '{}';
    lines text[] := '{}';
BEGIN
    IF customer_set_headers.headers IS NULL THEN
        RETURN;
    END IF;
    IF cardinality(customer_set_headers.headers) > 20 THEN
        RAISE EXCEPTION 'headers: at most 20 extra headers, got %',
                        cardinality(customer_set_headers.headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH line IN ARRAY coalesce(customer_set_headers.headers, '{}') LOOP
        i := i + 1;
        colon := strpos(coalesce(line, ''), ':');
        IF colon = 0 THEN
            RAISE EXCEPTION 'headers[%]: expected "Name: value"', i
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        hname := substr(line, 1, colon - 1);
        hvalue := btrim(substr(line, colon + 1), E' \t');
        -- The name is not quoted: a mistyped line may have a secret before its colon.
        IF hname !~ '^[-!#$%&''*+.^_`|~0-9A-Za-z]{1,64}$' THEN
            RAISE EXCEPTION 'headers[%]: the name must be 1 to 64 characters of letters, digits and !#$%%&''*+-.^_`|~ (an HTTP token)', i
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF lower(hname) LIKE 'webhook-%' OR lower(hname) = ANY (reserved) THEN
            RAISE EXCEPTION 'headers[%]: % is reserved (pgpace sets it, or it would change the request''s framing)',
                            i, hname
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = CASE WHEN lower(hname) = 'authorization'
                                  THEN 'set receiver authentication with pgpace.customer_set_auth (customer set --auth)'
                                  ELSE 'reserved: webhook-* and ' || array_to_string(reserved, ', ') END;
        END IF;
        IF lower(hname) = ANY (seen) THEN
            RAISE EXCEPTION 'headers[%]: % is given twice', i, hname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF hvalue = '' THEN
            RAISE EXCEPTION 'headers[%]: the value of % is empty', i, hname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF hvalue ~ '[\x01-\x1f\x7f-\x9f]' THEN
            RAISE EXCEPTION 'headers[%]: the value of % contains a control character (CR, LF, tab, ...)', i, hname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF octet_length(hvalue) > 4096 THEN
            RAISE EXCEPTION 'headers[%]: the value of % is longer than 4096 bytes', i, hname
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        seen := seen || lower(hname);
        lines := lines || (hname || ': ' || hvalue);
    END LOOP;
    UPDATE pgpace.customer c SET extra_headers = lines, updated_at = now()
     WHERE c.name = customer_set_headers.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_headers.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets how the customer's webhooks authenticate to the receiver: scheme 'basic' (username and
-- secret, the password: an "Authorization: Basic base64(username:password)" header, RFC 7617),
-- 'bearer' (secret, the token: "Authorization: Bearer TOKEN", RFC 6750), 'none' (no
-- Authorization header), or NULL to leave it. The credentials are secrets like the headers:
-- refused with SQLSTATE 22023 naming the field (auth, auth.username, auth.password,
-- auth.token), never quoting them. A username is 1 to 256 bytes without a colon (RFC 7617) or a
-- control character; a password 1 to 1024 bytes without control characters; a token 1 to 4096
-- characters of the token68 syntax (letters, digits, -._~+/ then '=' padding). An unknown
-- customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_auth(name text, scheme text, username text,
                                                    secret text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set_auth.scheme IS NULL THEN
        RETURN;
    END IF;
    IF customer_set_auth.scheme = 'oauth2' THEN
        RAISE EXCEPTION 'auth: oauth2 takes a token URL and client credentials'
            USING ERRCODE = 'invalid_parameter_value',
                  HINT = 'set it with pgpace.customer_set_oauth2 (customer set --auth oauth2)';
    END IF;
    IF customer_set_auth.scheme NOT IN ('basic', 'bearer', 'none') THEN
        RAISE EXCEPTION 'auth: expected basic, bearer, oauth2 or none, got %',
                        quote_literal(left(customer_set_auth.scheme, 16))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF customer_set_auth.scheme = 'basic' THEN
        IF customer_set_auth.username IS NULL OR customer_set_auth.username = ''
           OR octet_length(customer_set_auth.username) > 256
           OR strpos(customer_set_auth.username, ':') > 0
           OR customer_set_auth.username ~ '[\x01-\x1f\x7f-\x9f]'
           OR strpos(customer_set_auth.username, chr(127)) > 0 THEN
            RAISE EXCEPTION 'auth.username: expected 1 to 256 bytes without a colon or a control character'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF customer_set_auth.secret IS NULL OR customer_set_auth.secret = ''
           OR octet_length(customer_set_auth.secret) > 1024
           OR customer_set_auth.secret ~ '[\x01-\x1f\x7f-\x9f]'
           OR strpos(customer_set_auth.secret, chr(127)) > 0 THEN
            RAISE EXCEPTION 'auth.password: expected 1 to 1024 bytes without a control character'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF customer_set_auth.scheme = 'bearer' THEN
        IF customer_set_auth.username IS NOT NULL THEN
            RAISE EXCEPTION 'auth.username: a bearer token has no username'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF customer_set_auth.secret IS NULL
           OR customer_set_auth.secret !~ '^[-A-Za-z0-9._~+/]+=*$'
           OR length(customer_set_auth.secret) > 4096 THEN
            RAISE EXCEPTION 'auth.token: expected 1 to 4096 characters of letters, digits and -._~+/ (then = padding)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF customer_set_auth.username IS NOT NULL OR customer_set_auth.secret IS NOT NULL THEN
        RAISE EXCEPTION 'auth: none takes no credentials'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgpace.customer c SET
        auth_scheme = nullif(customer_set_auth.scheme, 'none'),
        auth_username = CASE WHEN customer_set_auth.scheme = 'basic' THEN customer_set_auth.username END,
        auth_secret = CASE WHEN customer_set_auth.scheme <> 'none' THEN customer_set_auth.secret END,
        oauth_token_url = NULL,
        oauth_scope = NULL,
        updated_at = now()
     WHERE c.name = customer_set_auth.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_auth.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets the client certificate a customer's webhooks present to the receiver (mutual TLS):
-- cert_pem, the certificate in PEM (the leaf first, then any intermediates the receiver needs),
-- and key_pem, its unencrypted private key in PEM. NULL and NULL remove it. Both are secrets
-- (never quoted in a message). Only their shape is checked here, refused with SQLSTATE 22023
-- naming the field (client_cert, client_key): the PEM armour is there, at most 64 KiB each,
-- nothing but printable text and line breaks (a NUL cannot reach a text column; other control
-- characters are no PEM). Whether the certificate parses, the key matches it and it is valid
-- now needs OpenSSL: `pgpace customer set --client-cert` checks that before calling this, and
-- the dispatcher again when it loads the customer (a bad one fails its deliveries with
-- error_class client_cert). An encrypted key is refused: nothing could give its passphrase. An
-- unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_client_cert(name text, cert_pem text,
                                                           key_pem text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF (customer_set_client_cert.cert_pem IS NULL) <> (customer_set_client_cert.key_pem IS NULL) THEN
        RAISE EXCEPTION '%: a client certificate needs its key, and a key its certificate (NULL and NULL remove both)',
                        CASE WHEN customer_set_client_cert.cert_pem IS NULL
                             THEN 'client_cert' ELSE 'client_key' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF customer_set_client_cert.cert_pem IS NOT NULL THEN
        IF octet_length(customer_set_client_cert.cert_pem) > 65536 THEN
            RAISE EXCEPTION 'client_cert: longer than 65536 bytes'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF strpos(customer_set_client_cert.cert_pem, '-----BEGIN CERTIFICATE-----') = 0 THEN
            RAISE EXCEPTION 'client_cert: expected a PEM certificate (-----BEGIN CERTIFICATE-----)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF customer_set_client_cert.cert_pem ~ '[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]' THEN
            RAISE EXCEPTION 'client_cert: contains a control character (PEM is printable text)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- A combined key-and-certificate file would store a copy of the key outside the one
        -- secret column the dispatcher wipes after use.
        IF strpos(customer_set_client_cert.cert_pem, 'PRIVATE KEY') > 0 THEN
            RAISE EXCEPTION 'client_cert: holds a private key: give the certificate (and its chain) only, the key as client_key'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF octet_length(customer_set_client_cert.key_pem) > 65536 THEN
            RAISE EXCEPTION 'client_key: longer than 65536 bytes'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF strpos(customer_set_client_cert.key_pem, '-----BEGIN ENCRYPTED PRIVATE KEY-----') > 0
           OR strpos(customer_set_client_cert.key_pem, 'Proc-Type: 4,ENCRYPTED') > 0 THEN
            RAISE EXCEPTION 'client_key: passphrase-protected keys are not supported'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF customer_set_client_cert.key_pem !~ '-----BEGIN [A-Z ]*PRIVATE KEY-----' THEN
            RAISE EXCEPTION 'client_key: expected a PEM private key (-----BEGIN PRIVATE KEY-----)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF customer_set_client_cert.key_pem ~ '[\x01-\x08\x0b\x0c\x0e-\x1f\x7f]' THEN
            RAISE EXCEPTION 'client_key: contains a control character (PEM is printable text)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    END IF;
    UPDATE pgpace.customer c SET
        client_cert = customer_set_client_cert.cert_pem,
        client_key = customer_set_client_cert.key_pem,
        updated_at = now()
     WHERE c.name = customer_set_client_cert.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_client_cert.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

REVOKE EXECUTE ON FUNCTION pgpace.customer_set_client_cert(text, text, text) FROM PUBLIC;

-- Sets OAuth2 client credentials (RFC 6749 section 4.4) as the customer's receiver
-- authentication: the dispatcher POSTs grant_type=client_credentials (and the scope, if any) to
-- token_url with the client id and secret as HTTP Basic (RFC 6749 2.3.1) and sends the access
-- token it gets as "Authorization: Bearer TOKEN". token_url NULL leaves the authentication as
-- it is (the other arguments must be NULL then); 'none' and the other schemes are set by
-- customer_set_auth, which clears these. Each value is refused with SQLSTATE 22023 naming its
-- field (auth.token_url, auth.client_id, auth.client_secret, auth.scope), the credentials never
-- quoted: the URL http or https, at most 2048 characters, no whitespace or control character,
-- no userinfo; the client id 1 to 256 bytes and the secret 1 to 1024 bytes, neither with a
-- control character; the scope NULL or space-separated scope-tokens (RFC 6749 3.3), at most
-- 1024 characters. An unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_oauth2(name text, token_url text, client_id text,
                                                      client_secret text, scope text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
BEGIN
    IF customer_set_oauth2.token_url IS NULL THEN
        IF customer_set_oauth2.client_id IS NOT NULL OR customer_set_oauth2.client_secret IS NOT NULL
           OR customer_set_oauth2.scope IS NOT NULL THEN
            RAISE EXCEPTION 'auth.token_url: required with OAuth2 client credentials'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        RETURN;
    END IF;
    IF length(customer_set_oauth2.token_url) > 2048
       OR customer_set_oauth2.token_url !~* '^https?://[^\s/?#@]+(:[0-9]{1,5})?([/?#][^\s]*)?$'
       OR customer_set_oauth2.token_url ~ '[[:cntrl:]]' THEN
        RAISE EXCEPTION 'auth.token_url: expected an http:// or https:// URL of at most 2048 characters without whitespace, control characters or user info'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF customer_set_oauth2.client_id IS NULL OR customer_set_oauth2.client_id = ''
       OR octet_length(customer_set_oauth2.client_id) > 256
       OR customer_set_oauth2.client_id ~ '[[:cntrl:]]'
       OR strpos(customer_set_oauth2.client_id, chr(127)) > 0 THEN
        RAISE EXCEPTION 'auth.client_id: expected 1 to 256 bytes without a control character'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF customer_set_oauth2.client_secret IS NULL OR customer_set_oauth2.client_secret = ''
       OR octet_length(customer_set_oauth2.client_secret) > 1024
       OR customer_set_oauth2.client_secret ~ '[[:cntrl:]]'
       OR strpos(customer_set_oauth2.client_secret, chr(127)) > 0 THEN
        RAISE EXCEPTION 'auth.client_secret: expected 1 to 1024 bytes without a control character'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF customer_set_oauth2.scope IS NOT NULL
       AND (length(customer_set_oauth2.scope) > 1024
            OR customer_set_oauth2.scope !~ '^[!#-\[\]-~]+( [!#-\[\]-~]+)*$') THEN
        RAISE EXCEPTION 'auth.scope: expected scope tokens of printable ASCII (no quote or backslash) separated by single spaces, at most 1024 characters'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    UPDATE pgpace.customer c SET
        auth_scheme = 'oauth2',
        auth_username = customer_set_oauth2.client_id,
        auth_secret = customer_set_oauth2.client_secret,
        oauth_token_url = customer_set_oauth2.token_url,
        oauth_scope = customer_set_oauth2.scope,
        updated_at = now()
     WHERE c.name = customer_set_oauth2.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_oauth2.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Sets the customer's egress proxy: NULL or 'default' (the configured [delivery] proxy, with
-- its no_proxy list), 'direct' (never through a proxy), or the customer's own proxy
-- "http://HOST:PORT" (HOST a DNS name, an IPv4 address or a bracketed IPv6 address; the port
-- required; an optional trailing '/'), used for all of its webhooks. Refused with SQLSTATE
-- 22023 naming the field (proxy): other schemes (https://, socks5://), credentials
-- (user:password@: not supported, and never quoted back), paths, control characters or
-- whitespace, a port outside 1-65535, more than 255 bytes. An unknown customer is P0002.
CREATE OR REPLACE FUNCTION pgpace.customer_set_proxy(name text, proxy text)
RETURNS void
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    value text := nullif(customer_set_proxy.proxy, 'default');
    m text[];
BEGIN
    IF value IS NOT NULL AND value <> 'direct' THEN
        IF octet_length(value) > 255 THEN
            RAISE EXCEPTION 'proxy: longer than 255 bytes'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF value ~ '[[:cntrl:][:space:]]' OR strpos(value, chr(127)) > 0 OR value !~ '^[ -~]*$' THEN
            RAISE EXCEPTION 'proxy: contains whitespace, a control character (CR, LF, ...) or a non-ASCII character'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF split_part(split_part(split_part(value, '://', 2), '/', 1), '?', 1) LIKE '%@%' THEN
            RAISE EXCEPTION 'proxy: credentials (user:password@) in the proxy URL are not supported'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF value !~* '^http://' THEN
            RAISE EXCEPTION 'proxy: expected http://HOST:PORT, direct or default (https:// and SOCKS proxies are not supported)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- The scheme in lower case, as the table's constraint wants it.
        value := 'http://' || substr(value, 8);
        -- Labels of 1 to 63 characters (RFC 1035), as src/proxy.c checks them.
        m := regexp_match(value, '^http://([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*|\[([0-9A-Fa-f:.]+)\]):([0-9]{1,5})/?$');
        IF m IS NULL THEN
            RAISE EXCEPTION 'proxy: expected http://HOST:PORT (a host name, an IPv4 address or [IPv6], the port required, no path)'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF m[6]::integer NOT BETWEEN 1 AND 65535 THEN
            RAISE EXCEPTION 'proxy: the port must be a number from 1 to 65535'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF m[5] IS NOT NULL THEN
            BEGIN
                IF family(m[5]::inet) <> 6 OR masklen(m[5]::inet) <> 128 THEN
                    RAISE EXCEPTION 'not IPv6';
                END IF;
            EXCEPTION WHEN OTHERS THEN
                RAISE EXCEPTION 'proxy: invalid IPv6 address'
                    USING ERRCODE = 'invalid_parameter_value';
            END;
        END IF;
    END IF;
    UPDATE pgpace.customer c SET proxy = value, updated_at = now()
     WHERE c.name = customer_set_proxy.name;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %',
                        coalesce(quote_literal(left(customer_set_proxy.name, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

-- Deletes a customer. Refuses while it has pending items unless force, in which case its
-- items, queue rows, dead letters and idempotency keys go too. Returns the number of items
-- removed.
CREATE OR REPLACE FUNCTION pgpace.customer_delete(name text, force boolean DEFAULT false)
RETURNS bigint
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cust_id bigint;
    ids     bigint[];
    pending bigint;
    removed bigint;
BEGIN
    -- FOR UPDATE waits for enqueuers holding KEY SHARE on the row, so none can slip in after.
    SELECT c.id INTO cust_id FROM pgpace.customer c
     WHERE c.name = customer_delete.name AND c.parent_id IS NULL FOR UPDATE;
    IF NOT FOUND AND position('/' IN customer_delete.name) > 0 THEN
        RAISE EXCEPTION 'unknown customer %', quote_literal(left(customer_delete.name, 140))
            USING ERRCODE = 'no_data_found',
                  HINT = 'delete an endpoint with pgpace endpoint delete <customer> <endpoint>';
    ELSIF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', quote_literal(left(customer_delete.name, 140))
            USING ERRCODE = 'no_data_found';
    END IF;
    -- The customer and its endpoints go together.
    ids := ARRAY(SELECT c.id FROM pgpace.customer c WHERE c.parent_id = cust_id ORDER BY c.id FOR UPDATE)
           || cust_id;
    SELECT count(*) INTO pending FROM pgpace.queue q WHERE q.customer_id = ANY (ids);
    IF pending > 0 AND NOT force THEN
        RAISE EXCEPTION 'customer % has % pending item(s); nothing was deleted',
                        quote_literal(customer_delete.name), pending
            USING ERRCODE = 'dependent_objects_still_exist',
                  HINT = 'wait for them to drain, or delete with --force to drop them too';
    END IF;
    DELETE FROM pgpace.queue q WHERE q.customer_id = ANY (ids);
    DELETE FROM pgpace.dead_letter d WHERE d.customer_id = ANY (ids);
    DELETE FROM pgpace.item i WHERE i.customer_id = ANY (ids);
    GET DIAGNOSTICS removed = ROW_COUNT;
    DELETE FROM pgpace.item_key k WHERE k.customer_id = ANY (ids);
    DELETE FROM pgpace.tenant_frontier t WHERE t.customer_id = cust_id;
    DELETE FROM pgpace.customer c WHERE c.parent_id = cust_id;
    DELETE FROM pgpace.customer c WHERE c.id = cust_id;
    RETURN removed;
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.new_signing_secret(),
    pgpace.customer_limits_arg(text[]),
    pgpace.check_receiver_pace(text, text, double precision, text, text[]),
    pgpace.customer_set(text, text, double precision, integer, text, text[], integer, integer,
                        boolean, boolean, text[], boolean),
    pgpace.customer_set_timeouts(text, integer, integer),
    pgpace.customer_set_throttle(text, double precision, double precision, double precision),
    pgpace.customer_set_max_age(text, interval),
    pgpace.customer_set_order_on_dead(text, text),
    pgpace.customer_set_headers(text, text[]),
    pgpace.customer_set_auth(text, text, text, text),
    pgpace.customer_set_oauth2(text, text, text, text, text),
    pgpace.customer_set_proxy(text, text),
    pgpace.customer_delete(text, boolean)
    FROM PUBLIC;
