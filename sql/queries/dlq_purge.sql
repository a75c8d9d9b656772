-- `pgpace dlq purge`: pgpace.dlq_purge (sql/functions/21_admin.sql) with dlq_list.sql's filters
-- ($6 the endpoint).
-- @params: customer carrier error since until endpoint
-- @columns: purged
SELECT pgpace.dlq_purge($1::text, $2::text, $3::text, $4::timestamptz, $5::timestamptz,
                        $6::text) AS purged
