-- An endpoint's row: its full name (what customer_set.sql and customer_get.sql take; the
-- customer's own for 'default') and its signing secrets, newest first, space-separated (for
-- --rotate-secret). Unknown customer or endpoint: P0002 from pgpace.endpoint_row, which the
-- subquery runs once.
-- @params: customer endpoint
-- @columns: name secrets
SELECT c.name, array_to_string(c.signing_secrets, ' ') AS secrets
  FROM (SELECT pgpace.endpoint_row($1::text, $2::text) AS id) r
  JOIN pgpace.customer c ON c.id = r.id
