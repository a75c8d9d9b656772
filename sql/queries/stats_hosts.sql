-- `pgpace stats`: the receiver hosts with a limit of their own (pgpace.host), after the
-- customers: the host, its windows, what its receivers sent in each window's last period
-- ("7/10,3120/50000": sends/COUNT per window, in the windows' order; '-' for none), its
-- connection cap ('default': [delivery] max_host_connections), and how many receivers
-- (customers' and endpoints' URLs) it covers (pgpace.host_for_url: host:port, then host).
-- Sends are the attempt log's (not the give-backs, nor items expired unsent), one probe of
-- delivery_attempt_customer per receiver and window. Only when $1 is NULL (all customers).
-- @params: customer
-- @columns: host limits used max_connections receivers
WITH h AS (
    SELECT t.*, array(SELECT c.id FROM pgpace.customer c
                       WHERE c.webhook_url IS NOT NULL
                         AND pgpace.host_for_url(c.webhook_url) = t.host) AS ids
      FROM pgpace.host t
     WHERE $1::text IS NULL
)
SELECT h.host, coalesce(nullif(array_to_string(h.limits, ','), ''), '-') AS limits,
       coalesce((SELECT string_agg(u.sent::text || '/' || x.count::text, ',' ORDER BY x.period_s)
                   FROM unnest(h.limits) AS w(w)
                  CROSS JOIN LATERAL pgpace.limit_window_parts(w.w) AS x
                  CROSS JOIN LATERAL (
                        SELECT count(*) AS sent
                          FROM unnest(h.ids) AS r(id)
                          JOIN pgpace.delivery_attempt da ON da.customer_id = r.id
                           AND da.started_at > now() - x.period_s * interval '1 second'
                           AND da.outcome <> 'released'
                           AND da.error_class IS DISTINCT FROM 'expired') u), '-') AS used,
       coalesce(h.max_connections::text, 'default') AS max_connections,
       cardinality(h.ids) AS receivers
  FROM h
 ORDER BY h.host
