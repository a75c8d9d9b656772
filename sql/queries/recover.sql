-- `pgpace recover`: sends a customer's items of a time range again (sql/functions/12_recover.sql).
-- $4 'true': only dead letters (--failed); $5 NULL: at the customer's own pace; $6 'true': dry run.
-- @params: customer since until failed_only rate dry_run
-- @columns: category day items
SELECT r.category, r.day::text AS day, r.items
  FROM pgpace.recover($1::text, $2::timestamptz, $3::timestamptz, $4::boolean, $5::float8,
                      $6::boolean) r
