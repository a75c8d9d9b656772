SELECT s.name, s.value FROM pgpace.setting s WHERE $1::text IS NULL OR s.name = $1 ORDER BY s.name
