#!/usr/bin/env bash
# pgcluster.sh - a private, throw-away PostgreSQL 15 cluster for tests, benchmarks and the demo.
#
#   pgcluster.sh start DIR [PORT]   initdb (as the postgres user when run as root) into DIR,
#                                   start it on PORT (default 55432) with its socket in DIR,
#                                   and print the variables to reach it (eval-able).
#   pgcluster.sh stop DIR           stop the cluster (fast mode) and remove DIR.
#
# initdb refuses to run as root, so everything server-side runs as `postgres` in a directory
# that user owns. The cluster listens on 127.0.0.1 only.
#
# PGCLUSTER_FSYNC=off starts it without fsync (default on: benchmarks, the soak and the demo
# measure a durable setup). The test suite uses off: it checks behaviour, not the disk, and a
# shared CI disk's flush stalls otherwise show up as late claims in its timing assertions.
# Commits still write their WAL before returning (synchronous_commit stays on), so a crash of
# PostgreSQL itself (immediate shutdown, kill -9) loses nothing; only an OS crash could.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
cmd=${1:?usage: pgcluster.sh start|stop DIR [PORT]}
dir=${2:?usage: pgcluster.sh start|stop DIR [PORT]}
port=${3:-55432}
case "${PGCLUSTER_FSYNC:-on}" in on | off) ;; *) echo "pgcluster.sh: PGCLUSTER_FSYNC must be on or off" >&2; exit 2 ;; esac

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$cmd" in
start)
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    as_pg "$PGBIN/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; exit 1; }
    cat >>"$dir/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
shared_buffers = 256MB
fsync = ${PGCLUSTER_FSYNC:-on}
synchronous_commit = on
log_min_messages = warning
log_min_error_statement = panic
CONF
    as_pg "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { cat "$dir/server.log" >&2; exit 1; }
    echo "export PGHOST=$dir PGPORT=$port PGUSER=postgres"
    ;;
stop)
    if [ -d "$dir/data" ]; then
        as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null 2>&1 ||
            as_pg "$PGBIN/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
*)
    echo "pgcluster.sh: unknown command '$cmd' (use start or stop)" >&2
    exit 2
    ;;
esac
