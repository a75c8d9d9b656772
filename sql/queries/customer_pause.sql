UPDATE pgpace.customer c SET paused = $2::boolean, updated_at = now() WHERE c.name = $1 RETURNING c.id
