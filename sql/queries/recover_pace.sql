-- `pgpace recover`: the customer's recovery pace after the run (sql/functions/12_recover.sql),
-- for its report: no row when its recovered items go at its own pace.
-- @params: customer
-- @columns: rate_per_minute
SELECT rp.rate_per_minute
  FROM pgpace.recovery_pace rp
  JOIN pgpace.customer c ON c.id = rp.customer_id
 WHERE c.name = $1::text
