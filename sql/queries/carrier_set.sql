-- $2/$3: new caps (NULL keeps the current value); $4/$5: reset the cap to the configured default.
INSERT INTO pgpace.carrier AS c (name, max_per_round, max_in_flight)
VALUES ($1, $2::integer, $3::integer)
ON CONFLICT (name) DO UPDATE SET
    max_per_round = CASE WHEN $4::boolean THEN NULL
                         ELSE coalesce(EXCLUDED.max_per_round, c.max_per_round) END,
    max_in_flight = CASE WHEN $5::boolean THEN NULL
                         ELSE coalesce(EXCLUDED.max_in_flight, c.max_in_flight) END,
    updated_at = now()
RETURNING (xmax = 0) AS created
