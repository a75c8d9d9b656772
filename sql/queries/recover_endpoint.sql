-- `pgpace recover --endpoint`: sends an endpoint's deliveries of a time range again and
-- back-fills the customer's events of the range it has none of (sql/functions/12_recover.sql).
-- $5 'true': only dead letters (--failed); $6 NULL: at the endpoint's own pace; $7 'true': dry run.
-- @params: customer endpoint since until failed_only rate dry_run
-- @columns: category day items
SELECT r.category, r.day::text AS day, r.items
  FROM pgpace.recover_endpoint($1::text, $2::text, $3::timestamptz, $4::timestamptz,
                               $5::boolean, $6::float8, $7::boolean) r
