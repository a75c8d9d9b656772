SELECT pg_try_advisory_lock($1::integer, $2::integer)
