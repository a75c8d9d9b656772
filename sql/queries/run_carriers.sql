-- Carrier caps; 0 means "the configured default".
-- @params:
-- @columns: name max_per_round max_in_flight
SELECT c.name, coalesce(c.max_per_round, 0) AS max_per_round,
       coalesce(c.max_in_flight, 0) AS max_in_flight
  FROM pgpace.carrier c
