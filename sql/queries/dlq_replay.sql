-- `pgpace dlq replay`: pgpace.dlq_replay (sql/functions/21_admin.sql) with dlq_list.sql's filters
-- ($7 the endpoint) and the trickle's rate ($6).
-- @params: customer carrier error since until rate endpoint
-- @columns: replayed refused
SELECT r.replayed, r.refused
  FROM pgpace.dlq_replay($1::text, $2::text, $3::text, $4::timestamptz, $5::timestamptz,
                         $6::float8, $7::text) r
