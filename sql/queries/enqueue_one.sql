SELECT pgpace.enqueue($1, $2::jsonb, $3, $4, $5::timestamptz, $6, $7::integer, $8::timestamptz, $9, $10, $11, $12)
