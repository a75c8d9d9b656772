-- `pgpace events`: the latest $5 operator events matching the filters, oldest first.
-- $1 customer name (its own events and its endpoints': an endpoint's events are recorded under
-- its row's name, "acme/crm"), $6 one endpoint of it ('default': the customer's own receiver),
-- $2 since, $3 until, $4 kind (each NULL: any). customer and endpoint are read from the name as
-- recorded (the endpoint may be deleted since): "acme/crm" is customer acme, endpoint crm, and a
-- customer's own events are its "default" endpoint's.
-- @params: customer since until kind limit endpoint
-- @columns: at kind customer endpoint detail handled
SELECT to_char(x.at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.MS"Z"') AS at, x.kind,
       split_part(x.customer, '/', 1) AS customer,
       CASE WHEN position('/' IN x.customer) > 0 THEN substr(x.customer, position('/' IN x.customer) + 1)
            ELSE 'default' END AS endpoint,
       x.detail::text AS detail, CASE WHEN x.handled_at IS NULL THEN 'no' ELSE 'yes' END AS handled
  FROM (SELECT e.* FROM pgpace.event e
         WHERE ($1::text IS NULL
                OR CASE WHEN $6::text IS NULL
                        THEN e.customer = $1::text OR starts_with(e.customer, $1::text || '/')
                        WHEN $6::text = 'default' THEN e.customer = $1::text
                        ELSE e.customer = $1::text || '/' || $6::text END)
           AND ($2::timestamptz IS NULL OR e.at >= $2::timestamptz)
           AND ($3::timestamptz IS NULL OR e.at < $3::timestamptz)
           AND ($4::text IS NULL OR e.kind = $4::text)
         ORDER BY e.at DESC, e.id DESC
         LIMIT $5::integer) x
 ORDER BY x.at, x.id
