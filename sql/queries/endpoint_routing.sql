-- `pgpace endpoint set --events/--filter/--no-filter`: an endpoint's subscription ($3 text[],
-- '{}' for every kind; NULL keeps) and payload filter ($4 a JSON object; NULL keeps; $5 true
-- removes it).
-- @params: customer endpoint events filter clear_filter
SELECT pgpace.endpoint_set_routing($1::text, $2::text, $3::text[], $4::jsonb,
                                   coalesce($5::boolean, false))
