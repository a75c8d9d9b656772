SELECT pgpace.customer_set($1, $2, $3::float8, $4::integer, $5, $6::text[], $7::integer,
                           $8::integer, $9::boolean, coalesce($10::boolean, false))
