-- `pgpace token create NAME --scope S...`: pgpace.token_create with the scopes as a comma list
-- and the secret's SHA-256 as hex (the secret itself never leaves the CLI but to the user).
-- @params: name scopes hash_hex
-- @columns: id
SELECT pgpace.token_create($1::text, string_to_array($2::text, ','), decode($3::text, 'hex')) AS id
