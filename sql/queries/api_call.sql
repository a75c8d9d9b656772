-- One request of the management API or of a tenant page (admin_api.c hands it on, the
-- dispatcher runs this on its API connection): pgpace.api_call (sql/functions/22_api.sql), with
-- the path's segments as a JSON array ($2) and the query string as a JSON object ($3).
-- @params: method segments query body actor if_match idempotency_key portal_token
-- @columns: status etag location allow body
SELECT a.status, a.etag, a.location, a.allow, a.body::text AS body
  FROM pgpace.api_call($1::text, ARRAY(SELECT jsonb_array_elements_text($2::jsonb)), $3::jsonb,
                       $4::text, $5::text, $6::text, $7::text, $8::text) a
