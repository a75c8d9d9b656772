-- The customers the start-up load reads whole (run_customers.sql by their ids) rather than by
-- run_customers_page.sql: those with a breaker row or a failing streak (health) to resume, and
-- those in a group of endpoints (a parent, or a customer with endpoints), whose tenant limit
-- and `grouped` need the joins. In id order, without repeats. Nearly every customer has none:
-- at 1,000,000 idle customers this is a few rows read by index (breaker and health hold only
-- customers that failed; the endpoints' index only endpoints).
-- @params:
-- @columns: id
SELECT b.customer_id AS id FROM pgpace.breaker b
UNION
SELECT h.customer_id FROM pgpace.customer_health h
UNION
SELECT e.parent_id FROM pgpace.customer e WHERE e.parent_id IS NOT NULL
UNION
SELECT e.id FROM pgpace.customer e WHERE e.parent_id IS NOT NULL
ORDER BY id
