-- 23_portal.sql - the tenant page's links and its API (/v1/portal/..., issue 33; README "The
-- tenant page").
--
-- A link is `<listener>/portal#<token>`: the token travels in the fragment, which browsers never
-- send to a server nor put in a Referer, and the page sends it back as its bearer token. A token
-- is base64url("v1\n<customer>\n<expires unix>\n<r|w>\n<generation>\n<nonce>") "." base64url of
-- its HMAC-SHA256 under pgpace.portal_key. Both the signing and the check happen here: the key
-- never leaves the database. A link is refused when its signature does not match (tampered),
-- when it expired, or when its customer's generation moved on (`pgpace portal-link CUSTOMER
-- --revoke`, or the customer was deleted and made again); each answer is a 401 that says which.
-- A link reads and changes its own customer only: every route looks rows up through it.
-- Repeatable: `pgpace migrate` re-applies this file whenever it changes (README,
-- "Migrations, functions and views"), so it must stay safe to run any number of times.

-- HMAC-SHA256 (RFC 2104) over PostgreSQL's sha256(): pgcrypto is not assumed.
CREATE OR REPLACE FUNCTION pgpace.hmac_sha256(key bytea, msg bytea)
RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    k    bytea := CASE WHEN length(key) > 64 THEN sha256(key) ELSE key END;
    ipad bytea;
    opad bytea;
BEGIN
    k := k || decode(repeat('00', 64 - length(k)), 'hex');
    ipad := k;
    opad := k;
    FOR i IN 0..63 LOOP
        ipad := set_byte(ipad, i, get_byte(k, i) # 54);
        opad := set_byte(opad, i, get_byte(k, i) # 92);
    END LOOP;
    RETURN sha256(opad || sha256(ipad || msg));
END
$$;

CREATE OR REPLACE FUNCTION pgpace.base64url(b bytea)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN rtrim(translate(encode(b, 'base64'), E'+/\n', '-_'), '=');

CREATE OR REPLACE FUNCTION pgpace.base64url_decode(t text)
RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
SET search_path = pg_catalog, pg_temp
RETURN decode(translate(t, '-_', '+/') || repeat('=', (4 - length(t) % 4) % 4), 'base64');

-- The id of customer `customer` (not an endpoint); unknown: P0002.
CREATE OR REPLACE FUNCTION pgpace.portal_customer_id(customer text)
RETURNS bigint
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust_id bigint;
BEGIN
    SELECT c.id INTO cust_id FROM pgpace.customer c
     WHERE c.name = customer AND c.parent_id IS NULL;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown customer %', coalesce(quote_literal(left(customer, 140)), 'NULL')
            USING ERRCODE = 'no_data_found';
    END IF;
    RETURN cust_id;
END
$$;

-- A signed link's token for customer `customer`, valid for `ttl` (1 minute to 30 days).
CREATE OR REPLACE FUNCTION pgpace.portal_token(customer text, ttl interval, read_only boolean)
RETURNS TABLE (token text, expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust_id bigint;
    gen     integer;
    expires timestamptz;
    payload text;
BEGIN
    cust_id := pgpace.portal_customer_id(customer);
    IF ttl IS NULL OR ttl < interval '1 minute' OR ttl > interval '30 days' THEN
        RAISE EXCEPTION 'ttl: must be from 1 minute to 30 days'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    INSERT INTO pgpace.portal_generation AS g (customer_id) VALUES (cust_id)
    ON CONFLICT ON CONSTRAINT portal_generation_pkey DO NOTHING;
    SELECT g.generation INTO gen FROM pgpace.portal_generation g WHERE g.customer_id = cust_id;
    expires := date_trunc('second', now() + ttl);
    payload := concat_ws(E'\n', 'v1', customer, extract(epoch FROM expires)::bigint::text,
                         CASE WHEN coalesce(read_only, false) THEN 'r' ELSE 'w' END, gen::text,
                         replace(gen_random_uuid()::text, '-', ''));
    RETURN QUERY
    SELECT pgpace.base64url(convert_to(payload, 'UTF8')) || '.'
           || pgpace.base64url(pgpace.hmac_sha256(k.key, convert_to(payload, 'UTF8'))),
           expires
      FROM pgpace.portal_key k;
END
$$;

-- Voids every link given out for `customer` so far. Returns the new generation.
CREATE OR REPLACE FUNCTION pgpace.portal_revoke(customer text)
RETURNS integer
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    cust_id bigint;
    gen     integer;
BEGIN
    cust_id := pgpace.portal_customer_id(customer);
    INSERT INTO pgpace.portal_generation AS g (customer_id, generation) VALUES (cust_id, 1)
    ON CONFLICT ON CONSTRAINT portal_generation_pkey
    DO UPDATE SET generation = g.generation + 1
    RETURNING g.generation INTO gen;
    RETURN gen;
END
$$;

-- The customer a token speaks for and whether it may change anything; a 401 problem (SQLSTATE
-- PA401) naming what is wrong otherwise. The signature is compared as digests of digests, so
-- the comparison's time says nothing about the expected value.
CREATE OR REPLACE FUNCTION pgpace.portal_check(token text, OUT customer pgpace.customer,
                                               OUT read_only boolean, OUT expires_at timestamptz)
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    parts   text[];
    payload bytea;
    f       text[];
    gen     integer;
BEGIN
    IF token IS NULL OR length(token) > 1200 OR token !~ '^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$' THEN
        PERFORM pgpace.api_fail(401, 'this link is not a tenant page link');
    END IF;
    parts := string_to_array(token, '.');
    BEGIN
        payload := pgpace.base64url_decode(parts[1]);
        IF sha256(pgpace.base64url_decode(parts[2]))
           <> sha256((SELECT pgpace.hmac_sha256(k.key, payload) FROM pgpace.portal_key k)) THEN
            payload := NULL;
        END IF;
        f := string_to_array(convert_from(payload, 'UTF8'), E'\n');
    EXCEPTION WHEN OTHERS THEN
        payload := NULL;
    END;
    IF payload IS NULL OR cardinality(f) <> 6 OR f[1] <> 'v1' THEN
        PERFORM pgpace.api_fail(401, 'this link''s signature does not match: ask for a new link');
    END IF;
    expires_at := to_timestamp(f[3]::bigint);
    IF expires_at <= now() THEN
        PERFORM pgpace.api_fail(401, 'this link expired: ask for a new link');
    END IF;
    SELECT c.* INTO customer FROM pgpace.customer c WHERE c.name = f[2] AND c.parent_id IS NULL;
    SELECT g.generation INTO gen FROM pgpace.portal_generation g WHERE g.customer_id = customer.id;
    IF customer.id IS NULL OR gen IS DISTINCT FROM f[5]::integer THEN
        PERFORM pgpace.api_fail(401, 'this link was revoked: ask for a new link');
    END IF;
    read_only := f[4] = 'r';
END
$$;

CREATE OR REPLACE FUNCTION pgpace.portal_show_payloads()
RETURNS boolean
LANGUAGE sql STABLE
SET search_path = pg_catalog, pg_temp
RETURN coalesce((SELECT s.value = 'on' FROM pgpace.setting s WHERE s.name = 'portal_show_payloads'),
                false);

-- /v1/portal/...: what a tenant page may read and do, for the link's customer alone.
CREATE OR REPLACE FUNCTION pgpace.api_portal(method text, segs text[], query jsonb, body jsonb,
                                             if_match text, token text)
RETURNS jsonb
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_variable
DECLARE
    who    record := pgpace.portal_check(token);
    cust   pgpace.customer := who.customer;
    n      integer := cardinality(segs);
    i      pgpace.item;
    rows   jsonb;
    r      record;
    answer jsonb;
    writes text[] := ARRAY['webhook_url', 'rate_per_minute', 'event_types', 'payload_filter',
                           'paused'];
BEGIN
    IF method <> 'GET' AND who.read_only THEN
        PERFORM pgpace.api_fail(403, 'this link is read-only');
    END IF;
    IF n = 1 THEN
        IF method <> 'GET' THEN
            RETURN pgpace.api_not_allowed('GET');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        SELECT coalesce(jsonb_agg(pgpace.api_endpoint_doc(e)
                                  || jsonb_build_object('etag', pgpace.api_etag(e.id, e.xmin))
                                  ORDER BY e.parent_id NULLS FIRST, e.endpoint_name), '[]')
          INTO rows FROM pgpace.customer e
         WHERE e.parent_id = cust.id OR (e.id = cust.id AND e.webhook_url IS NOT NULL);
        RETURN pgpace.api_answer(200, jsonb_build_object(
            'customer', cust.name, 'read_only', who.read_only,
            'expires_at', pgpace.api_time(who.expires_at),
            'show_payloads', pgpace.portal_show_payloads(),
            'rate_per_minute', cust.rate_per_minute, 'limits', to_jsonb(cust.limits),
            'paused', cust.paused, 'endpoints', rows));
    END IF;
    IF segs[2] = 'events' AND n = 2 THEN
        IF method <> 'GET' THEN
            RETURN pgpace.api_not_allowed('GET');
        END IF;
        PERFORM pgpace.api_params(query, ARRAY['status', 'kind', 'since', 'until', 'limit', 'cursor']);
        RETURN pgpace.api_answer(200, pgpace.api_item_list(
            'event', ARRAY(SELECT c.id FROM pgpace.customer c
                            WHERE c.id = cust.id OR c.parent_id = cust.id), query));
    END IF;
    IF segs[2] = 'events' AND n = 3 THEN
        IF method <> 'GET' THEN
            RETURN pgpace.api_not_allowed('GET');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        IF segs[3] ~ '^[0-9]{1,19}$' THEN
            SELECT x.* INTO i FROM pgpace.item x
             WHERE x.id = segs[3]::bigint AND x.event_id IS NULL
               AND x.customer_id IN (SELECT c.id FROM pgpace.customer c
                                      WHERE c.id = cust.id OR c.parent_id = cust.id);
        END IF;
        IF i.id IS NULL THEN
            PERFORM pgpace.api_fail(404, 'no such event');
        END IF;
        RETURN pgpace.api_answer(200, pgpace.api_event_doc(i, true, pgpace.portal_show_payloads()));
    END IF;
    IF segs[2] = 'endpoints' THEN
        IF n = 4 AND segs[4] NOT IN ('rotate-secret', 'pause', 'resume') OR n > 4 THEN
            PERFORM pgpace.api_fail(404, 'no such resource');
        END IF;
        IF n = 2 AND method <> 'POST' OR n = 3 AND method NOT IN ('GET', 'PATCH')
           OR n = 4 AND method <> 'POST' THEN
            RETURN pgpace.api_not_allowed(CASE n WHEN 2 THEN 'POST' WHEN 3 THEN 'GET, PATCH'
                                                 ELSE 'POST' END);
        END IF;
        IF method IN ('POST', 'PATCH') AND n <= 3 THEN
            PERFORM pgpace.api_members(body, CASE WHEN n = 2 THEN ARRAY['name'] ELSE '{}' END || writes);
        END IF;
        IF n = 3 AND segs[3] = 'default' AND method = 'PATCH'
           AND (body ? 'event_types' OR body ? 'payload_filter') THEN
            PERFORM pgpace.api_fail(400, 'event_types: the default endpoint gets every event',
                                    'event_types');
        END IF;
        answer := pgpace.api_endpoints(method, ARRAY['customers', cust.name] || segs[2:], query,
                                       body, if_match);
        IF answer ? 'location' AND answer ->> 'location' IS NOT NULL THEN
            answer := answer || jsonb_build_object('location',
                '/v1/portal/endpoints/' || (answer -> 'body' ->> 'name'));
        END IF;
        RETURN answer;
    END IF;
    IF segs[2] = 'test-event' AND n = 2 THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        PERFORM pgpace.api_members(coalesce(body, '{}'), ARRAY['kind']);
        SELECT e.id, e.deliveries INTO r
          FROM pgpace.enqueue_item(cust.name,
                                   jsonb_build_object('type', 'pgpace.test',
                                                      'sent_at', pgpace.api_time(now()),
                                                      'note', 'a test event sent from the tenant page'),
                                   NULL, coalesce(pgpace.api_text(body, 'kind'), 'pgpace.test'),
                                   NULL, NULL, 0, NULL, NULL, NULL, NULL, NULL) e;
        RETURN pgpace.api_answer(201, jsonb_build_object('id', r.id, 'deliveries', r.deliveries),
                                 NULL, NULL, cust.id);
    END IF;
    IF segs[2] = 'deliveries' AND n = 4 AND segs[4] = 'replay' THEN
        IF method <> 'POST' THEN
            RETURN pgpace.api_not_allowed('POST');
        END IF;
        PERFORM pgpace.api_params(query, '{}');
        IF segs[3] !~ '^[0-9]{1,19}$' OR NOT EXISTS (
               SELECT 1 FROM pgpace.dead_letter d JOIN pgpace.customer c ON c.id = d.customer_id
                WHERE d.item_id = segs[3]::bigint AND (c.id = cust.id OR c.parent_id = cust.id)) THEN
            PERFORM pgpace.api_fail(404, 'no failed delivery with that id');
        END IF;
        SELECT x.replayed, x.refused INTO r
          FROM pgpace.dlq_replay(NULL, NULL, NULL, NULL, NULL, 60, NULL, segs[3]::bigint) x;
        IF r.refused > 0 THEN
            PERFORM pgpace.api_fail(409, 'its endpoint is gone: it cannot be sent again');
        END IF;
        RETURN pgpace.api_answer(200, jsonb_build_object('replayed', r.replayed, 'refused', 0),
                                 NULL, NULL, cust.id);
    END IF;
    PERFORM pgpace.api_fail(404, 'no such resource');
    RETURN NULL;
END
$$;

REVOKE EXECUTE ON FUNCTION
    pgpace.hmac_sha256(bytea, bytea), pgpace.base64url(bytea), pgpace.base64url_decode(text),
    pgpace.portal_customer_id(text), pgpace.portal_token(text, interval, boolean),
    pgpace.portal_revoke(text),
    pgpace.portal_check(text), pgpace.portal_show_payloads(),
    pgpace.api_portal(text, text[], jsonb, jsonb, text, text)
    FROM PUBLIC;
