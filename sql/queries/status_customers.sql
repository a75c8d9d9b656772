-- GET /v1/status: what the database knows of the customers on the requested page ($1: their
-- ids, at most 500). Each count stops at 10,000 rows (`capped` says one did), so a customer's
-- deep backlog costs one bounded index scan, not a count of all of it: the statement shares the
-- leader's connection with the claims, and a poll must not hold them up (bench/RESULTS.md,
-- "Status endpoint"). When capped, due, in_flight and delayed are of the rows counted, so they
-- are lower bounds, as is oldest_due_s. effective_rate is the one the leader last wrote to the
-- frontier (a standby shows that; the leader its own, fresher one). The last attempt of the last
-- hour, one probe of delivery_attempt_customer: its error class and HTTP status when it failed
-- (as `pgpace stats` shows it), with its age in seconds.
-- @params: ids
-- @columns: customer_id due in_flight delayed dead capped oldest_due_s effective_rate
-- @columns: last_error_class last_error_status last_error_age_s
SELECT c.id AS customer_id, coalesce(q.due, 0) AS due, coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed, least(d.dead, 10000) AS dead,
       (q.n > 10000 OR d.dead > 10000) AS capped,
       extract(epoch FROM now() - q.oldest_due)::float8 AS oldest_due_s,
       least(coalesce(f.effective_rate, c.rate_per_minute), c.rate_per_minute)::float8
           AS effective_rate,
       CASE WHEN la.outcome NOT IN ('success', 'released')
            THEN coalesce(la.error_class, 'http') END AS last_error_class,
       CASE WHEN la.outcome NOT IN ('success', 'released') THEN la.http_status END
           AS last_error_status,
       CASE WHEN la.outcome NOT IN ('success', 'released')
            THEN extract(epoch FROM now() - la.started_at)::float8 END AS last_error_age_s
  FROM pgpace.customer c
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE x.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE x.next_action_at > now() AND x.claim_token IS NOT NULL)
                 AS in_flight,
             count(*) FILTER (WHERE x.next_action_at > now() AND x.claim_token IS NULL) AS delayed,
             min(x.next_action_at) FILTER (WHERE x.next_action_at <= now()) AS oldest_due,
             count(*) AS n
        FROM (SELECT qq.next_action_at, qq.claim_token FROM pgpace.queue qq
               WHERE qq.customer_id = c.id AND qq.next_action_at IS NOT NULL
               LIMIT 10001) x) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead
        FROM (SELECT 1 FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id LIMIT 10001) x) d
      ON true
  LEFT JOIN pgpace.frontier f ON f.customer_id = c.id
  LEFT JOIN LATERAL (
      SELECT da.outcome, da.error_class, da.http_status, da.started_at
        FROM pgpace.delivery_attempt da
       WHERE da.customer_id = c.id AND da.started_at > now() - interval '1 hour'
       ORDER BY da.started_at DESC LIMIT 1) la ON true
 WHERE c.id = ANY ($1::bigint[])
