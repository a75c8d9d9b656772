-- Session check, first and last steps on the checked connection (src/session_check.c): which
-- server session runs this statement. The server is named by its postmaster's start time, so
-- equal pids of two servers never look like one session. With $1 (a random nonce) set, the
-- nonce is written into the session (set_config, not local: it lasts as long as the session);
-- with $1 NULL it is only read. A pooler that hands the session to another client, or runs
-- this connection's next statement on another server session, shows in the pid or the nonce.
-- @params: nonce
-- @columns: pid server_start nonce
SELECT pg_backend_pid() AS pid,
       (extract(epoch FROM pg_postmaster_start_time()) * 1000000)::bigint AS server_start,
       CASE WHEN $1::text IS NULL THEN current_setting('pgpace.session_probe', true)
            ELSE set_config('pgpace.session_probe', $1::text, false)
       END AS nonce
