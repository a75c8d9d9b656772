UPDATE pgpace.setting s SET value = $2 WHERE s.name = $1 RETURNING s.name
