SELECT c.name, coalesce(c.max_per_round::text, 'default') AS max_per_round,
       coalesce(c.max_in_flight::text, 'default') AS max_in_flight, c.updated_at
  FROM pgpace.carrier c ORDER BY c.name
