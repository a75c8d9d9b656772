-- Carrier caps; 0 means "the configured default".
SELECT c.name, coalesce(c.max_per_round, 0), coalesce(c.max_in_flight, 0) FROM pgpace.carrier c
