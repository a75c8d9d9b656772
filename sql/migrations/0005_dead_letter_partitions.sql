-- 0005_dead_letter_partitions.sql - dead letters partitioned by day, so retention drops whole
-- days instead of deleting rows. Existing rows move to the DEFAULT partition,
-- which retention never drops: they stay until purged with `pgpace dlq purge`.
ALTER TABLE pgpace.dead_letter RENAME TO dead_letter_before_0005;
ALTER INDEX pgpace.dead_letter_customer RENAME TO dead_letter_before_0005_customer;

CREATE TABLE pgpace.dead_letter (
    item_id     bigint NOT NULL,
    customer_id bigint NOT NULL,
    carrier     text,
    attempts    integer NOT NULL,
    last_status integer,
    last_error  text NOT NULL,
    failed_at   timestamptz NOT NULL DEFAULT now(),
    -- Unique per item within a day; an item is dead-lettered again only after a replay, which
    -- removes its earlier row first.
    PRIMARY KEY (item_id, failed_at)
) PARTITION BY RANGE (failed_at);
CREATE INDEX dead_letter_customer ON pgpace.dead_letter (customer_id, failed_at);
CREATE INDEX dead_letter_item ON pgpace.dead_letter (item_id);
CREATE TABLE pgpace.dead_letter_default PARTITION OF pgpace.dead_letter DEFAULT;
SELECT pgpace.ensure_partitions('pgpace.dead_letter', 7);

INSERT INTO pgpace.dead_letter SELECT * FROM pgpace.dead_letter_before_0005;

-- The per-customer view pointed at the old table: the same definition, now on the new one.
CREATE OR REPLACE VIEW pgpace.customer_stats AS
SELECT c.name AS customer, c.mode, c.rate_per_minute, c.burst, c.paused,
       coalesce(q.due, 0) AS due,
       coalesce(q.in_flight, 0) AS in_flight,
       coalesce(q.delayed, 0) AS delayed,
       coalesce(d.dead, 0) AS dead,
       now() - q.oldest_due AS oldest_due_age,
       coalesce(b.state, 'closed') AS breaker,
       CASE WHEN b.state = 'open' THEN b.open_until END AS breaker_open_until
  FROM pgpace.customer c
  LEFT JOIN LATERAL (
      SELECT count(*) FILTER (WHERE qq.next_action_at <= now()) AS due,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NOT NULL) AS in_flight,
             count(*) FILTER (WHERE qq.next_action_at > now() AND qq.claim_token IS NULL) AS delayed,
             min(qq.next_action_at) FILTER (WHERE qq.next_action_at <= now()) AS oldest_due
        FROM pgpace.queue qq WHERE qq.customer_id = c.id) q ON true
  LEFT JOIN LATERAL (
      SELECT count(*) AS dead FROM pgpace.dead_letter dl WHERE dl.customer_id = c.id) d ON true
  LEFT JOIN pgpace.breaker b ON b.customer_id = c.id;

DROP TABLE pgpace.dead_letter_before_0005;
