-- `pgpace carrier set`: pgpace.carrier_set (sql/functions/21_admin.sql). $2/$3: new caps (NULL
-- keeps the current value); $4/$5: reset the cap to the configured default.
SELECT pgpace.carrier_set($1::text, $2::integer, $3::integer, $4::boolean, $5::boolean) AS created
