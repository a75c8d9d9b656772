-- 0021_api_tokens.sql - tokens for the admin listener's API (issue 33): each has a name, the
-- scopes it grants (enqueue: POST /v1/items; read: GET of the API; write: its changes; status:
-- the status page) and the SHA-256 of its secret. The secret itself is never stored: `pgpace
-- token create` makes it, stores its hash and shows it once. A revoked token keeps its row (who
-- had it, until when) and grants nothing. A change NOTIFYs pgpace_token so that a running
-- dispatcher reloads the hashes it checks requests against.
CREATE TABLE pgpace.api_token (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name        text NOT NULL
                CONSTRAINT api_token_name_valid CHECK (pgpace.valid_name(name)),
    scopes      text[] NOT NULL
                CONSTRAINT api_token_scopes_valid
                CHECK (cardinality(scopes) BETWEEN 1 AND 4
                       AND scopes <@ ARRAY['enqueue', 'read', 'write', 'status']::text[]),
    token_hash  bytea NOT NULL
                CONSTRAINT api_token_hash_valid CHECK (length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    created_by  text NOT NULL DEFAULT current_user,
    revoked_at  timestamptz
);
CREATE UNIQUE INDEX api_token_name ON pgpace.api_token (name);
CREATE UNIQUE INDEX api_token_hash ON pgpace.api_token (token_hash);

CREATE FUNCTION pgpace.notify_token_change() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pgpace_token', '');
    RETURN NULL;
END
$$;
REVOKE EXECUTE ON FUNCTION pgpace.notify_token_change() FROM PUBLIC;
CREATE TRIGGER api_token_notify AFTER INSERT OR UPDATE OR DELETE ON pgpace.api_token
    FOR EACH STATEMENT EXECUTE FUNCTION pgpace.notify_token_change();
