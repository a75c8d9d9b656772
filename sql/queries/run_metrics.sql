-- Queue gauges for /metrics and the status page, one slice of the leader's queue-gauge pass
-- (src/dispatch/housekeeping.c): the customers with id > $1, at most $2 of them in id order,
-- each with its due, in flight and delayed items, the age of its oldest due item and its dead
-- letters, and the vacuum state of pgpace.queue (on every row). Counting a customer's queue per
-- page view would cost a deep backlog's scan on every poll (src/dispatch/status.c); counting
-- every customer in one statement cost 9 s at 1,000,000 customers and 1.7-3.4 s beside a
-- 1,000,000-item backlog, with every claim queued behind it. So a slice is a few thousand
-- customers, and a customer's queue is counted up to $3 rows: past that, due + in_flight +
-- delayed = $3 and the counts are lower bounds (rows are read in the claim index's order,
-- carrier, priority, then next_action_at, so the due rows of a one-carrier backlog come first
-- and its oldest due is exact; with several carriers it is the oldest among the rows read).
-- The ORDER BY is also what keeps this an index probe per customer: when a few customers hold
-- the whole queue, the statistics say every customer has (rows / those few) rows, and a bare
-- LIMIT made a sequential scan that stops early look cheaper than the index: a sequential scan
-- of the queue per customer, 104 s for a slice of 2,000 customers beside four 250,000-item
-- backlogs at 1,000,000 customers (0.19 s with the index), and every claim waited behind it
-- until statement_timeout. Ordered, a sequential scan would have to read and sort every row
-- first, which no estimate makes cheaper than the index that yields them in order.
-- Dead letters are counted by one range scan over the slice's ids (per customer they would be a
-- probe of every daily partition).
-- A claimed row whose lease has passed counts as due again, since the next claim will recover
-- it (as in pgpace.customer_stats). Naming next_action_at IS NOT NULL reads the partial claim
-- index (queue_claim).
-- Endpoints (0018) are rows here like customers ("acme/crm"). receiver: the row has a webhook
-- URL (a customer without one has nothing queued, and no series of its own: its dead letters,
-- what deleted endpoints left, count in the status page's total and its customer's row);
-- has_endpoints: a customer's row with endpoints (its own receiver's series then carry
-- endpoint="default", metrics.h); rate_per_minute and mode: the customer's, for the status page
-- of a customer without a receiver (its limit over its endpoints, its shortest window's rate
-- when that is lower; NULL: none). has_endpoints probes the endpoints' index per customer of the
-- slice (an EXISTS was planned as a hash of the whole customer table per slice: 37 ms at 100,000
-- customers, so the slice shrank to 50 and a pass took minutes), and the limit helper runs only
-- for customers with windows.
-- Ordered delivery (0020_order_keys.sql): waiting, the items parked behind their keys' heads
-- (counted up to $3 too; they are not in the counts above, which read the claim index);
-- blocked_keys, the keys waiting behind a failing head, and of them the one waiting longest
-- (oldest_blocked_age_s since its first waiting item was enqueued, 0 when none; its key)
-- (pgpace.order_blocked, 19_order.sql: one probe per such key).
-- @params: after_customer_id customers count_cap
-- @columns: customer due in_flight oldest_due_age_s dead_tuples vacuum_age_s dead customer_id
-- @columns: delayed receiver has_endpoints rate_per_minute mode waiting blocked_keys
-- @columns: oldest_blocked_age_s oldest_blocked_key
WITH c AS MATERIALIZED (
    SELECT cu.id, cu.name, cu.webhook_url IS NOT NULL AS receiver,
           cu.parent_id IS NULL AND e.id IS NOT NULL AS has_endpoints,
           CASE WHEN cardinality(cu.limits) > 0
                THEN least(cu.rate_per_minute, pgpace.limits_rate(cu.limits))
                ELSE cu.rate_per_minute END AS rate_per_minute, cu.mode
      FROM (SELECT cs.* FROM pgpace.customer cs
             WHERE cs.id > $1::bigint ORDER BY cs.id LIMIT $2::int) cu
      LEFT JOIN LATERAL (SELECT ee.id FROM pgpace.customer ee WHERE ee.parent_id = cu.id LIMIT 1) e
             ON true
), span AS (
    SELECT min(c.id) AS lo, max(c.id) AS hi FROM c
), dead AS (
    SELECT dl.customer_id, count(*) AS dead
      FROM pgpace.dead_letter dl, span
     WHERE dl.customer_id BETWEEN span.lo AND span.hi
     GROUP BY dl.customer_id
), blocked AS (
    SELECT b.* FROM span, pgpace.order_blocked(span.lo, span.hi) b
)
SELECT c.name AS customer, q.due, q.in_flight,
       coalesce(extract(epoch FROM now() - q.oldest_due), 0)::float8 AS oldest_due_age_s,
       coalesce(t.n_dead_tup, 0) AS dead_tuples,
       coalesce(extract(epoch FROM now() - greatest(t.last_autovacuum, t.last_vacuum)), -1)::float8
           AS vacuum_age_s,
       coalesce(d.dead, 0) AS dead, c.id AS customer_id, q.delayed, c.receiver, c.has_endpoints,
       c.rate_per_minute, c.mode,
       (SELECT count(*) FROM (SELECT 1 FROM pgpace.queue qp
                               WHERE qp.customer_id = c.id AND qp.next_action_at IS NULL
                               LIMIT $3::int) p) AS waiting,
       coalesce(b.blocked_keys, 0) AS blocked_keys,
       coalesce(extract(epoch FROM now() - b.oldest_waiting), 0)::float8 AS oldest_blocked_age_s,
       b.oldest_key AS oldest_blocked_key
  FROM c
 CROSS JOIN LATERAL (
      SELECT count(*) FILTER (WHERE x.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE x.next_action_at > now() AND x.claim_token IS NOT NULL)
                 AS in_flight,
             count(*) FILTER (WHERE x.next_action_at > now() AND x.claim_token IS NULL) AS delayed,
             min(x.next_action_at) FILTER (WHERE x.next_action_at <= now()) AS oldest_due
        FROM (SELECT qq.next_action_at, qq.claim_token FROM pgpace.queue qq
               WHERE qq.customer_id = c.id AND qq.next_action_at IS NOT NULL
               ORDER BY qq.carrier, qq.priority DESC, qq.next_action_at
               LIMIT $3::int) x) q
  LEFT JOIN dead d ON d.customer_id = c.id
  LEFT JOIN blocked b ON b.customer_id = c.id
  LEFT JOIN pg_stat_user_tables t ON t.relid = 'pgpace.queue'::regclass
 ORDER BY c.id
