SELECT s.customer, s.mode, s.rate_per_minute AS rate, s.paused, s.due, s.in_flight, s.delayed,
       s.dead, coalesce(to_char(extract(epoch FROM s.oldest_due_age), 'FM999999990.000'), '-')
           AS oldest_due_s,
       s.breaker || coalesce(' until ' || to_char(s.breaker_open_until, 'HH24:MI:SS'), '') AS breaker
  FROM pgpace.customer_stats s
 WHERE $1::text IS NULL OR s.customer = $1
 ORDER BY s.customer
