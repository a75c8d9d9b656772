#!/usr/bin/env bash
# pgreplica.sh - a throw-away PostgreSQL 15 primary with one streaming standby, on loopback, for
# the failover test (tests/integration/dispatch/test_failover.c).
#
#   pgreplica.sh start DIR PORT1 PORT2 sync|async
#       initdb a primary into DIR/primary listening on 127.0.0.1:PORT1, create database
#       `pgpace`, clone it with pg_basebackup into DIR/standby (127.0.0.1:PORT2) streaming from
#       the primary as application_name `standby`, and wait until it streams. `sync` then sets
#       synchronous_standby_names = 'standby' on the primary (and waits until the standby is
#       the synchronous one): a commit returns only once the standby has flushed its WAL.
#       `async` leaves it empty. Only the primary gets that setting: the promoted standby must
#       not wait for a standby it does not have.
#   pgreplica.sh promote DIR [wait]   pg_ctl promote the standby (with `wait`: until it is done)
#   pgreplica.sh crash DIR            stop the primary in immediate mode (as a crash would)
#   pgreplica.sh stop DIR             stop both (immediate: nothing in them matters) and remove DIR
#
# As pgcluster.sh: the servers run as `postgres` when this runs as root (initdb refuses root),
# trust authentication on 127.0.0.1, fsync as PGCLUSTER_FSYNC says (default on; the test suite
# uses off), synchronous_commit on. Sockets are in DIR/primary and DIR/standby.
set -euo pipefail

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
usage="usage: pgreplica.sh start DIR PORT1 PORT2 sync|async | promote DIR [wait] | crash DIR | stop DIR"
cmd=${1:?$usage}
dir=${2:?$usage}
case "${PGCLUSTER_FSYNC:-on}" in on | off) ;; *) echo "pgreplica.sh: PGCLUSTER_FSYNC must be on or off" >&2; exit 2 ;; esac

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# psql on the primary (database postgres), one value out.
primary_sql() {
    as_pg "$PGBIN/psql" -X -q -At -h 127.0.0.1 -p "$(cat "$dir/primary.port")" -U postgres \
        -d postgres -v ON_ERROR_STOP=1 -c "$1"
}

# Waits up to 30 s for a query on the primary to print `want`.
wait_primary() {
    local sql=$1 want=$2 _
    for _ in $(seq 1 300); do
        [ "$(primary_sql "$sql" 2>/dev/null || true)" = "$want" ] && return 0
        sleep 0.1
    done
    echo "pgreplica.sh: timed out waiting for: $sql = $want" >&2
    return 1
}

fail_with_logs() {
    echo "pgreplica.sh: $1" >&2
    for f in "$dir"/primary/server.log "$dir"/standby/server.log "$dir"/basebackup.log; do
        [ -f "$f" ] && { echo "---- $f" >&2; tail -30 "$f" >&2; }
    done
    exit 1
}

case "$cmd" in
start)
    port1=${3:?$usage}
    port2=${4:?$usage}
    mode=${5:?$usage}
    case "$mode" in sync | async) ;; *) echo "pgreplica.sh: mode must be sync or async" >&2; exit 2 ;; esac
    mkdir -p "$dir/primary" "$dir/standby"
    if [ "$(id -u)" = 0 ]; then chown postgres:postgres "$dir" "$dir/primary" "$dir/standby"; fi
    chmod 700 "$dir" "$dir/primary" "$dir/standby"
    echo "$port1" >"$dir/primary.port"
    as_pg "$PGBIN/initdb" -D "$dir/primary/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        >"$dir/primary/initdb.log" 2>&1 || fail_with_logs "initdb failed"
    # initdb's pg_hba.conf already trusts replication connections from 127.0.0.1.
    cat >>"$dir/primary/data/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $port1
unix_socket_directories = '$dir/primary'
max_connections = 100
shared_buffers = 64MB
fsync = ${PGCLUSTER_FSYNC:-on}
synchronous_commit = on
wal_level = replica
max_wal_senders = 4
wal_keep_size = 256MB
log_min_messages = warning
log_min_error_statement = panic
CONF
    as_pg "$PGBIN/pg_ctl" -D "$dir/primary/data" -l "$dir/primary/server.log" -w -t 60 start \
        >/dev/null || fail_with_logs "the primary did not start"
    primary_sql "CREATE DATABASE pgpace" >/dev/null
    as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "$port1" -U postgres -D "$dir/standby/data" \
        -X stream -c fast >"$dir/basebackup.log" 2>&1 || fail_with_logs "pg_basebackup failed"
    # The copy carries the primary's postgresql.conf; later lines win.
    cat >>"$dir/standby/data/postgresql.conf" <<CONF
port = $port2
unix_socket_directories = '$dir/standby'
hot_standby = on
primary_conninfo = 'host=127.0.0.1 port=$port1 user=postgres application_name=standby'
CONF
    as_pg touch "$dir/standby/data/standby.signal"
    as_pg "$PGBIN/pg_ctl" -D "$dir/standby/data" -l "$dir/standby/server.log" -w -t 60 start \
        >/dev/null || fail_with_logs "the standby did not start"
    wait_primary "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'" 1 ||
        fail_with_logs "the standby does not stream"
    if [ "$mode" = sync ]; then
        primary_sql "ALTER SYSTEM SET synchronous_standby_names = 'standby'" >/dev/null
        primary_sql "SELECT pg_reload_conf()" >/dev/null
        wait_primary "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby'" sync ||
            fail_with_logs "the standby did not become synchronous"
    fi
    ;;
promote)
    wait_flag=(-W)
    [ "${3:-}" = wait ] && wait_flag=(-w -t 60)
    as_pg "$PGBIN/pg_ctl" -D "$dir/standby/data" "${wait_flag[@]}" promote >/dev/null ||
        fail_with_logs "pg_ctl promote failed"
    ;;
crash)
    as_pg "$PGBIN/pg_ctl" -D "$dir/primary/data" -m immediate -w -t 60 stop >/dev/null ||
        fail_with_logs "pg_ctl stop -m immediate failed"
    ;;
stop)
    for node in standby primary; do
        if [ -f "$dir/$node/data/postmaster.pid" ]; then
            as_pg "$PGBIN/pg_ctl" -D "$dir/$node/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
        fi
    done
    rm -rf "$dir"
    ;;
*)
    echo "pgreplica.sh: unknown command '$cmd' ($usage)" >&2
    exit 2
    ;;
esac
