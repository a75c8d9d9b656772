-- `pgpace events`: the latest $5 operator events matching the filters, oldest first.
-- $1 customer name, $2 since, $3 until, $4 kind (each NULL: any).
-- @params: customer since until kind limit
-- @columns: at kind customer detail handled
SELECT to_char(x.at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS at, x.kind, x.customer,
       x.detail::text AS detail, CASE WHEN x.handled_at IS NULL THEN 'no' ELSE 'yes' END AS handled
  FROM (SELECT e.* FROM pgpace.event e
         WHERE ($1::text IS NULL OR e.customer = $1::text)
           AND ($2::timestamptz IS NULL OR e.at >= $2::timestamptz)
           AND ($3::timestamptz IS NULL OR e.at < $3::timestamptz)
           AND ($4::text IS NULL OR e.kind = $4::text)
         ORDER BY e.at DESC, e.id DESC
         LIMIT $5::integer) x
 ORDER BY x.at, x.id
