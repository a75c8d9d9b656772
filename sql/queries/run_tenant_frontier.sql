-- What a new leader resumes each shared tenant limit from (src/dispatch/tenant.c): the cell the
-- last leader stored with its claim rounds (pgpace.tenant_frontier), and the latest durable
-- traces of a send by any of the customer's endpoints, its own receiver included: the latest
-- attempt logged and the latest claim of a queue row still leased (its attempt not written
-- yet), within $2 microseconds. Run once when a leader takes over, never on the hot path.
--  $1 bigint[] the customers whose endpoints share their limit, $2 bigint how far back a send
--  still matters (the largest burst times period, capped).
-- @params: customer horizon_us
-- @columns: customer_id tat_us attempt_us claim_us
SELECT t.customer_id,
       (extract(epoch FROM tf.tat) * 1000000)::bigint AS tat_us,
       (extract(epoch FROM a.started_at) * 1000000)::bigint AS attempt_us,
       (extract(epoch FROM l.claimed_at) * 1000000)::bigint AS claim_us
  FROM unnest($1::bigint[]) AS t(customer_id)
  LEFT JOIN pgpace.tenant_frontier tf ON tf.customer_id = t.customer_id
  LEFT JOIN LATERAL (
       SELECT max(x.started_at) AS started_at
         FROM pgpace.customer e
        CROSS JOIN LATERAL (
              SELECT max(da.started_at) AS started_at
                FROM pgpace.delivery_attempt da
               WHERE da.customer_id = e.id
                 AND da.started_at > now() - $2::bigint * interval '1 microsecond'
                 AND da.started_at < now() + interval '1 hour') x
        WHERE e.id = t.customer_id OR e.parent_id = t.customer_id) a ON true
  LEFT JOIN LATERAL (
       SELECT max(y.claimed_at) AS claimed_at
         FROM pgpace.customer e
        CROSS JOIN LATERAL (
              SELECT max(q.claimed_at) AS claimed_at
                FROM pgpace.queue q
               WHERE q.customer_id = e.id
                 AND q.next_action_at IS NOT NULL
                 AND q.next_action_at > now() - $2::bigint * interval '1 microsecond'
                 AND q.claim_token IS NOT NULL
                 AND q.claimed_at > now() - $2::bigint * interval '1 microsecond') y
        WHERE e.id = t.customer_id OR e.parent_id = t.customer_id) l ON true
