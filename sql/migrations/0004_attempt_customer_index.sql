-- 0004_attempt_customer_index.sql - per-customer reads of the attempt log (pgpace stats
-- --watch, "what happened to this customer's webhooks") without scanning whole days.
CREATE INDEX delivery_attempt_customer ON pgpace.delivery_attempt (customer_id, started_at);
