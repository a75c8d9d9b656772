-- Dead letters matching the filters ($1 customer, $2 carrier, $3 error text (ILIKE pattern
-- fragment), $4 since, $5 until; NULL = any), newest first, at most $6 rows.
SELECT d.item_id AS item, c.name AS customer, coalesce(d.carrier, '') AS carrier,
       d.attempts, coalesce(d.last_status::text, '-') AS status,
       to_char(d.failed_at, 'YYYY-MM-DD HH24:MI:SS') AS failed_at,
       left(replace(d.last_error, E'\n', ' '), 80) AS error
  FROM pgpace.dead_letter d JOIN pgpace.customer c ON c.id = d.customer_id
 WHERE ($1::text IS NULL OR c.name = $1)
   AND ($2::text IS NULL OR d.carrier = $2)
   AND ($3::text IS NULL OR d.last_error ILIKE '%' || $3 || '%')
   AND ($4::timestamptz IS NULL OR d.failed_at >= $4::timestamptz)
   AND ($5::timestamptz IS NULL OR d.failed_at < $5::timestamptz)
 ORDER BY d.failed_at DESC, d.item_id DESC
 LIMIT $6::integer
