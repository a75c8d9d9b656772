#!/usr/bin/env bash
# endpoints.sh - issue 30's figures for endpoints: one event fanned out to 1, 10 and 100
# endpoints beside the same deliveries enqueued on their own (one item per customer), on a
# private PostgreSQL 15 (fsync on); writes bench/ENDPOINTS.md and bench/results/endpoints.csv.
#
#   bash bench/endpoints.sh [--quick]      (--quick: smaller, into bench/results-quick/)
#
# 1. Enqueue, SQL path: one producer (pgbench -M prepared, one client), one transaction per
#    event: `SELECT pgpace.enqueue('fanN', payload)`, against one transaction of N
#    `pgpace.enqueue('sK', payload)` calls to N customers without endpoints (the same
#    deliveries, each enqueued on its own). Per delivery: the statements' execution time
#    (pg_stat_statements, top level), the whole cluster's CPU (/proc, as bench/run's pgcpu) and
#    the WAL written; per event: the transaction's latency as pgbench sees it. Payloads of 78
#    bytes (bench/run's) and 2 kB.
# 2. Enqueue, bulk: `pgpace enqueue --file` of the same deliveries as events or as items.
# 3. Profile: pg_stat_statements of every statement (nested ones too) for the fan-out to 1 and
#    100 endpoints and the items on their own, and auto_explain's EXPLAIN (ANALYZE, BUFFERS) of
#    the statement inside pgpace.enqueue_fanout at 100 endpoints: results/endpoints_profile.txt.
# 4. End to end: `pgpace run` (default configuration) and one `pgpace-receiver`, every endpoint
#    unlimited on that receiver, a backlog of deliveries enqueued while they are paused, then
#    resumed at once: deliveries/s (receiver, first to last arrival), CPU per delivery of the
#    dispatcher, the receiver and the PostgreSQL cluster, from the resume to the last
#    acknowledgement.
# 5. Claim rounds: TENANTS customers with 5 endpoints each (spaced at 60/min, the customer's
#    limit 600/min) against 5 x TENANTS customers without endpoints (spaced at 60/min), one
#    transaction enqueuing a delivery for every endpoint (an event per customer, or an item per
#    customer): as bench/run's tenants workload measures a burst (its dispatcher settings, its
#    /metrics histograms), plus the claim statement's time from pg_stat_statements and the
#    dispatcher's CPU per round.
#
# Needs a build in BUILD (default ./build: src/pgpace, pgpace-receiver), pgbench and
# pg_stat_statements (postgresql-contrib), curl. Every process it starts is stopped on exit.
# BASELINE_BUILD (optional): another build whose SQL functions section 1 also measures the
# fan-out with (a database migrated by its src/pgpace), as "before" beside this build's: the
# figures of a change to pgpace.enqueue_fanout.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
pgpace=$BUILD/src/pgpace
receiver=$BUILD/pgpace-receiver
[ -x "$pgpace" ] && [ -x "$receiver" ] ||
    { echo "endpoints.sh: build first (meson setup build && ninja -C build)" >&2; exit 1; }
baseline=""
if [ -n "${BASELINE_BUILD:-}" ]; then
    baseline=$(cd "$BASELINE_BUILD" && pwd)/src/pgpace
    [ -x "$baseline" ] || { echo "endpoints.sh: BASELINE_BUILD has no src/pgpace" >&2; exit 1; }
    baseline_rev=$(git -C "$BASELINE_BUILD" rev-parse --short HEAD 2>/dev/null || cat "$BASELINE_BUILD/../REVISION" 2>/dev/null || echo unknown)
fi

quick=0
[ "${1:-}" = --quick ] && quick=1
# SECTIONS (optional): which of 1-5 to run, e.g. SECTIONS="4" (default all; the report shows n/a
# for the others).
SECTIONS=${SECTIONS:-1 2 3 4 5}
want() { [[ " $SECTIONS " == *" $1 "* ]]; }
FANOUTS="1 10 100"
RUNS=3
if [ "$quick" = 1 ]; then
    ENQ_DELIVERIES=3000 BULK_DELIVERIES=20000 E2E_DELIVERIES=10000 E2E_S=20 TENANTS=1000
    out=bench/results-quick report=bench/results-quick/ENDPOINTS.md
else
    ENQ_DELIVERIES=20000 BULK_DELIVERIES=100000 E2E_DELIVERIES=30000 E2E_S=30 TENANTS=10000
    out=bench/results report=bench/ENDPOINTS.md
fi
# OUT (optional): another directory for the report and the CSV (for a run of some SECTIONS).
[ -z "${OUT:-}" ] || { out=$OUT report=$OUT/ENDPOINTS.md; }
mkdir -p "$out"
csv=$out/endpoints.csv
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work=$(mktemp -d /tmp/pgpace-endpoints.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    bash tests/tools/pgcluster.sh stop "$work/pg" >/dev/null 2>&1
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port=${BENCH_PORT:-$((20000 + RANDOM % 12000))}
log "starting a private PostgreSQL 15 on port $port (fsync on)"
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "$port")"
cat >>"$work/pg/data/postgresql.conf" <<CONF
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = none
pg_stat_statements.max = 10000
CONF
as_pg() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
as_pg "$PGBIN/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w -t 60 restart >/dev/null
export PGHOST PGPORT PGUSER
base="host=$PGHOST port=$PGPORT user=$PGUSER"
admin="$base dbname=postgres"
q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
conn() { echo "$base dbname=$1"; }
newdb() { # NAME [PGPACE BINARY whose functions to install (default this build's)]
    q "$admin" "DROP DATABASE IF EXISTS $1 WITH (FORCE)"
    q "$admin" "CREATE DATABASE $1"
    "${2:-$pgpace}" --db "$(conn "$1")" migrate >/dev/null
    q "$(conn "$1")" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
}
pgss() { # track: none | top | all
    q "$admin" "ALTER SYSTEM SET pg_stat_statements.track = '$1'"
    q "$admin" "SELECT pg_reload_conf()" >/dev/null
    sleep 0.2
}
secret="ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']"
payload_small='{"type":"order.created","order":{"id":12345,"total":99.5,"currency":"EUR"}}'
payload_2k=$(python3 -c 'import json; print(json.dumps({"type": "order.created", "order": {"id": 12345, "lines": [{"sku": "SKU-%05d" % i, "name": "item %d of the order" % i, "qty": i % 7 + 1, "price": 9.99} for i in range(27)]}}, separators=(",", ":")))')

# ---- results: "section,system,param,metric,unit,median,min,max,runs,values" ----------------------
# A run of some SECTIONS into an existing report keeps the other sections' rows (and the report's
# earlier "Generated" lines): the report is written from the CSV.
csv_section() { case $1 in 1) echo enqueue ;; 2) echo bulk ;; 4) echo e2e ;; 5) echo claims ;; esac; }
merge=0 kept=""
if [ "$SECTIONS" != "1 2 3 4 5" ] && [ -s "$csv" ] && [ -s "$report" ]; then
    merge=1
    owned=",machine,"
    for n in $SECTIONS; do owned="$owned$(csv_section "$n"),"; done
    kept=$(awk -F, -v own="$owned" 'NR > 1 && index(own, "," $1 ",") == 0' "$csv")
    history=$(grep -E '^(Generated|Regenerated) by ' "$report" || true)
fi
echo "section,system,param,metric,unit,median,min,max,runs,values" >"$csv"
[ -z "$kept" ] || echo "$kept" >>"$csv"
record() { # SECTION SYSTEM PARAM METRIC UNIT VALUE...
    local w=$1 s=$2 p=$3 m=$4 u=$5
    shift 5
    [ $# -gt 0 ] || return 0
    printf '%s\n' "$@" | sort -g | awk -v w="$w" -v s="$s" -v p="$p" -v m="$m" -v u="$u" '
        { v[NR] = $1; all = all (NR > 1 ? ";" : "") $1 }
        END { med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%s,%s,%s,%s,%s,%.6g,%.6g,%.6g,%d,%s\n", w, s, p, m, u, med, v[1], v[NR], NR, all }' >>"$csv"
}
get() { # SECTION SYSTEM PARAM METRIC FIELD(median|min|max)
    awk -F, -v w="$1" -v s="$2" -v p="$3" -v m="$4" -v f="$5" '
        BEGIN { col = (f == "median") ? 6 : (f == "min") ? 7 : 8 }
        $1 == w && $2 == s && $3 == p && $4 == m { print $col; exit }' "$csv"
}
fmt() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { if (v >= 100) printf "%.0f", v; else if (v >= 10) printf "%.1f", v; else printf "%.2f", v }' || printf 'n/a'; }
cell() { # SECTION SYSTEM PARAM METRIC -> "median (min-max)"
    local m; m=$(get "$1" "$2" "$3" "$4" median)
    [ -n "$m" ] || { printf 'n/a'; return; }
    printf '%s (%s-%s)' "$(fmt "$m")" "$(fmt "$(get "$1" "$2" "$3" "$4" min)")" "$(fmt "$(get "$1" "$2" "$3" "$4" max)")"
}
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.2f", a / b }' || printf 'n/a'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0 && a != "") printf "%.3f\n", a / b }'; }
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { if (!NR) { print "nan"; exit } i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'; }

# ---- CPU readings (as bench/run's) --------------------------------------------------------------
clk_tck=$(getconf CLK_TCK)
prof=$out/endpoints_profile.txt
cpu_us() { # PID
    awk -v hz="$clk_tck" '{ sub(/^.*\) /, ""); split($0, f, " "); printf "%.0f\n", (f[12] + f[13]) * 1e6 / hz }' \
        "/proc/$1/stat" 2>/dev/null || true
}
# The whole cluster's CPU so far (us): the postmaster's own, its reaped children's and every
# live child's, read until no child was reaped in between (bench/run: pg_cluster_cpu).
pg_cluster_cpu() {
    local pm v=""
    pm=$(head -1 "$work/pg/data/postmaster.pid")
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        v=$({ cat "/proc/$pm/stat" /proc/[0-9]*/stat "/proc/$pm/stat" 2>/dev/null || true; } |
            awk -v pm="$pm" -v hz="$clk_tck" '
                { pid = $1; sub(/^.*\) /, ""); split($0, f, " ") }
                pid == pm { if (!seen++) { own = f[12] + f[13]; first = f[14] + f[15] } last = f[14] + f[15]; next }
                f[2] == pm { kids += f[12] + f[13] }
                END { if (seen && first == last) printf "%.0f\n", (own + first + kids) * 1e6 / hz }')
        [ -z "$v" ] || break
    done
    echo "$v"
}
wal_lsn() { q "$admin" "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"; }
# What one harness session (psql, one statement) costs the cluster: taken off the CPU readings
# (bench/run's pgcpu does the same).
sess_us=0
measure_session() {
    local s0 s1 v=()
    for _ in 1 2 3; do
        s0=$(pg_cluster_cpu)
        for _ in $(seq 1 20); do q "$admin" "SELECT 1" >/dev/null; done
        s1=$(pg_cluster_cpu)
        v+=("$(awk -v a="$s0" -v b="$s1" 'BEGIN { printf "%.0f", (b - a) / 20 }')")
    done
    sess_us=$(printf '%s\n' "${v[@]}" | sort -g | sed -n 2p)
    record machine harness session postgres_cpu_us_per_session us "${v[@]}"
}

start_receiver() { # PORT LOGFILE -> pid in $rpid
    local err=$work/receiver-$1.err
    "$receiver" --port "$1" >"$2" 2>"$err" &
    rpid=$!
    pids+=("$rpid")
    for _ in $(seq 1 50); do grep -q listening "$err" 2>/dev/null && return 0; sleep 0.1; done
    echo "endpoints.sh: the receiver did not start" >&2; cat "$err" >&2; exit 1
}
start_dispatcher() { # DB NAME [EXTRA [dispatcher] LINES] [EXTRA [delivery] LINES] [HTTP LISTEN] -> pid in $dpid
    cat >"$work/$2.ini" <<INI
[database]
conninfo = $(conn "$1")
[dispatcher]
instance_name = bench-$2
${3:-}
[delivery]
allow_cidrs = 127.0.0.0/8
${4:-}
[http]
listen = ${5:-127.0.0.1:0}
[log]
level = warn
INI
    "$pgpace" --config "$work/$2.ini" run 2>"$work/$2.log" &
    dpid=$!
    pids+=("$dpid")
    for _ in $(seq 1 100); do
        [ "$(q "$(conn "$1")" "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")" != 0 ] && return 0
        sleep 0.1
    done
    echo "endpoints.sh: the dispatcher did not become leader" >&2; cat "$work/$2.log" >&2; exit 1
}
stop_pid() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# ======================================================================= machine
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)
cores=$(nproc)
mem=$(awk '/MemTotal/ { printf "%.0f GB", $2 / 1048576 }' /proc/meminfo)
pgver=$(q "$admin" "SHOW server_version")
settings=$(psql -X -At -F' = ' -d "$admin" -c "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN ('shared_buffers','fsync','synchronous_commit','wal_level','max_wal_size','work_mem','jit') ORDER BY name")
started=$(date -u '+%Y-%m-%d %H:%M UTC')
t_start=$(date +%s)
git_rev=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
declare -A load
load[start]=$(cut -d' ' -f1 /proc/loadavg)
measure_session

# ================================================================ 1-3. enqueue: SQL, bulk, profile
rport=$((port + 1))
# fanN: a customer without a URL (its endpoints receive) and without a limit of its own, with N
# endpoints; sK: customers without endpoints (each its own receiver, as before endpoints). All
# unlimited on one receiver (section 4).
make_customers() { # DB conninfo
    q "$1" "SELECT pgpace.customer_set('fan' || n) FROM unnest(ARRAY[${FANOUTS// /,}]) n" >/dev/null
    q "$1" "INSERT INTO pgpace.customer (name, parent_id, endpoint_name, mode, rate_per_minute, webhook_url, signing_secrets)
            SELECT c.name || '/e' || g, c.id, 'e' || g, 'unlimited', 1, 'http://127.0.0.1:$rport/c/' || c.name || '-e' || g, $secret
              FROM pgpace.customer c, generate_series(1, 100) g
             WHERE c.name LIKE 'fan%' AND g <= substr(c.name, 4)::int"
    q "$1" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets)
            SELECT 's' || g, 'unlimited', 1, 'http://127.0.0.1:$rport/c/s' || g, $secret FROM generate_series(1, 100) g"
    q "$1" "VACUUM ANALYZE pgpace.customer"
}
newdb bench_ep
d=$(conn bench_ep)
make_customers "$d"
if [ -n "$baseline" ]; then
    newdb bench_ep_base "$baseline"
    make_customers "$(conn bench_ep_base)"
fi
clear_items() { q "${1:-$d}" "TRUNCATE pgpace.item, pgpace.queue, pgpace.item_key, pgpace.dead_letter"; }

if want 1; then
log "1. enqueue, SQL path: fan-out to $FANOUTS endpoints vs as many items on their own, $ENQ_DELIVERIES deliveries a run"
pgss top
for size in small 2k; do
    if [ "$size" = small ]; then payload=$payload_small; else payload=$payload_2k; fi
    for n in $FANOUTS; do
        events=$((ENQ_DELIVERIES / n))
        [ "$events" -ge 50 ] || events=50
        echo "SELECT pgpace.enqueue('fan$n', '$payload');" >"$work/fan.sql"
        { echo "BEGIN;"; for g in $(seq 1 "$n"); do echo "SELECT pgpace.enqueue('s$g', '$payload');"; done; echo "COMMIT;"; } >"$work/single.sql"
        systems="fanout single"
        [ -z "$baseline" ] || systems="$systems fanout_before single_before"
        for sys in $systems; do
            script=$work/fan.sql; [ "${sys%_before}" = single ] && script=$work/single.sql
            db=$d; [ "${sys%_before}" != "$sys" ] && db=$(conn bench_ep_base)
            lat=() stmt=() pcpu=() wal=() l0=$(cut -d' ' -f1 /proc/loadavg)
            for r in $(seq 1 "$RUNS"); do
                clear_items "$db"
                q "$db" "CHECKPOINT"
                q "$db" "SELECT pg_stat_statements_reset()" >/dev/null
                local_g0=$(pg_cluster_cpu) w0=$(wal_lsn)
                "$PGBIN/pgbench" -n -M prepared -t "$events" -f "$script" "$db" >"$work/pgbench.out" 2>&1 ||
                    { cat "$work/pgbench.out" >&2; exit 1; }
                local_g1=$(pg_cluster_cpu) w1=$(wal_lsn)
                dl=$((events * n))
                [ "$(q "$db" "SELECT count(*) FROM pgpace.queue")" = "$dl" ] ||
                    { echo "endpoints.sh: $sys $n: expected $dl queued deliveries" >&2; exit 1; }
                lat+=("$(awk '/latency average/ { print $4 }' "$work/pgbench.out")")
                stmt+=("$(div "$(q "$db" "SELECT sum(total_exec_time) * 1000 FROM pg_stat_statements WHERE query LIKE '%pgpace.enqueue(%'")" "$dl")")
                # Two sessions come off: the first WAL reading's and pgbench's own (a producer keeps
                # its connection).
                pcpu+=("$(div "$((local_g1 - local_g0 - 2 * sess_us))" "$dl")")
                wal+=("$(div "$((w1 - w0))" "$dl")")
            done
            p="${size}_n$n"
            record enqueue "$sys" "$p" tx_latency_ms ms "${lat[@]}"
            record enqueue "$sys" "$p" stmt_us_per_delivery us "${stmt[@]}"
            record enqueue "$sys" "$p" postgres_cpu_us_per_delivery us "${pcpu[@]}"
            record enqueue "$sys" "$p" wal_bytes_per_delivery bytes "${wal[@]}"
            record enqueue "$sys" "$p" load_avg load "$l0"
            log "enqueue $sys $p: $(get enqueue "$sys" "$p" stmt_us_per_delivery median) us/delivery in statements, PostgreSQL $(get enqueue "$sys" "$p" postgres_cpu_us_per_delivery median) us CPU, $(get enqueue "$sys" "$p" wal_bytes_per_delivery median) WAL bytes, $(get enqueue "$sys" "$p" tx_latency_ms median) ms a transaction"
        done
    done
done
pgss none
fi

if want 2; then
log "2. enqueue, bulk file: $BULK_DELIVERIES deliveries a run"
for n in $FANOUTS; do
    awk -v n="$n" -v e="$((BULK_DELIVERIES / n))" -v p="$payload_small" \
        'BEGIN { for (i = 1; i <= e; i++) printf("{\"customer\":\"fan%d\",\"kind\":\"order.created\",\"payload\":%s}\n", n, p) }' >"$work/fan.jsonl"
    awk -v n="$n" -v e="$BULK_DELIVERIES" -v p="$payload_small" \
        'BEGIN { for (i = 0; i < e; i++) printf("{\"customer\":\"s%d\",\"kind\":\"order.created\",\"payload\":%s}\n", i % n + 1, p) }' >"$work/single.jsonl"
    for sys in fanout single; do
        file=$work/fan.jsonl; [ "$sys" = single ] && file=$work/single.jsonl
        tput=() pcpu=() wal=()
        for r in $(seq 1 "$RUNS"); do
            clear_items
            q "$d" "CHECKPOINT"
            g0=$(pg_cluster_cpu) w0=$(wal_lsn)
            t0=$(date +%s%N)
            "$pgpace" --db "$d" enqueue --file "$file" >"$work/bulk.out"
            t1=$(date +%s%N)
            g1=$(pg_cluster_cpu) w1=$(wal_lsn)
            [ "$(q "$d" "SELECT count(*) FROM pgpace.queue")" = "$BULK_DELIVERIES" ] ||
                { echo "endpoints.sh: bulk $sys $n: expected $BULK_DELIVERIES queued deliveries" >&2; cat "$work/bulk.out" >&2; exit 1; }
            tput+=("$(awk -v n="$BULK_DELIVERIES" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", n / ((b - a) / 1e9) }')")
            # The first WAL reading's session and the CLI's own come off.
            pcpu+=("$(div "$((g1 - g0 - 2 * sess_us))" "$BULK_DELIVERIES")")
            wal+=("$(div "$((w1 - w0))" "$BULK_DELIVERIES")")
        done
        record bulk "$sys" "n$n" deliveries_per_s per_s "${tput[@]}"
        record bulk "$sys" "n$n" postgres_cpu_us_per_delivery us "${pcpu[@]}"
        record bulk "$sys" "n$n" wal_bytes_per_delivery bytes "${wal[@]}"
        log "bulk $sys n$n: $(get bulk "$sys" "n$n" deliveries_per_s median) deliveries/s, PostgreSQL $(get bulk "$sys" "n$n" postgres_cpu_us_per_delivery median) us CPU, $(get bulk "$sys" "n$n" wal_bytes_per_delivery median) WAL bytes per delivery"
    done
done
fi

if want 3; then
log "3. profile"
{
    echo "# bench/endpoints.sh profile, $started, git $git_rev: $ENQ_DELIVERIES deliveries per run as in section 1 (78-byte payload)."
    echo "# pg_stat_statements with track = all (nested statements too; tracking them costs time of its own),"
    echo "# per call; rows: per call. Top-level statement first."
} >"$prof"
pgss all
specs=("fanout 1" "single 1" "fanout 100" "single 100")
[ -z "$baseline" ] || specs+=("fanout_before 1" "fanout_before 100")
for spec in "${specs[@]}"; do
    read -r sys n <<<"$spec"
    events=$((ENQ_DELIVERIES / n))
    db=$d; [ "$sys" = fanout_before ] && db=$(conn bench_ep_base)
    echo "SELECT pgpace.enqueue('fan$n', '$payload_small');" >"$work/fan.sql"
    { echo "BEGIN;"; for g in $(seq 1 "$n"); do echo "SELECT pgpace.enqueue('s$g', '$payload_small');"; done; echo "COMMIT;"; } >"$work/single.sql"
    script=$work/fan.sql; [ "$sys" = single ] && script=$work/single.sql
    clear_items "$db"
    q "$db" "SELECT pg_stat_statements_reset()" >/dev/null
    "$PGBIN/pgbench" -n -M prepared -t "$events" -f "$script" "$db" >/dev/null 2>&1
    {
        echo
        echo "## $sys$([ "$sys" = fanout_before ] && echo " (BASELINE_BUILD, git $baseline_rev)"), $n endpoint(s): $events transactions"
        psql -X -d "$db" -c "SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 72) AS statement, calls,
                                   round(mean_exec_time::numeric * 1000, 1) AS exec_us,
                                   round(rows::numeric / calls, 1) AS rows,
                                   round((shared_blks_hit + shared_blks_read)::numeric / calls, 1) AS blks,
                                   round(wal_bytes / calls) AS wal_bytes
                              FROM pg_stat_statements
                             WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                               AND query NOT LIKE '%pg_stat_statements%' AND calls >= $events
                             ORDER BY total_exec_time DESC LIMIT 12"
    } >>"$prof"
done
pgss none
[ -z "$baseline" ] || q "$admin" "DROP DATABASE bench_ep_base WITH (FORCE)"
# The statement inside pgpace.enqueue_fanout, as run there (auto_explain of nested statements,
# sent to this session): 100 endpoints.
clear_items
{
    echo
    echo "## auto_explain: pgpace.enqueue('fan100', ...), the statements it runs (ANALYZE, BUFFERS)"
    psql -X -d "$d" 2>&1 <<SQL | sed -n '/Query Text/,$p' | grep -v '^CONTEXT' || true
SET client_min_messages = log;
LOAD 'auto_explain';
SET auto_explain.log_min_duration = 0;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_level = log;
SELECT pgpace.enqueue('fan100', '$payload_small');
SELECT pgpace.enqueue('fan100', '$payload_small');
SQL
} >>"$prof"
# The WAL of one enqueue of each kind, record by record (pg_waldump between two readings of the
# insert position; after 20 of the same, so no record is a first change of its page since the
# last checkpoint). Whatever else the cluster writes meanwhile shows too (rare: it is idle).
clear_items
{
    echo
    echo "## pg_waldump: the WAL of one enqueue, 78-byte payload: a fan-out to one endpoint (fan1), an item on its own (s1)"
    for c in fan1 s1; do
        for _ in $(seq 1 20); do q "$d" "SELECT pgpace.enqueue('$c', '$payload_small')" >/dev/null; done
        a=$(q "$admin" "SELECT pg_current_wal_insert_lsn()")
        q "$d" "SELECT pgpace.enqueue('$c', '$payload_small')" >/dev/null
        b=$(q "$admin" "SELECT pg_current_wal_insert_lsn()")
        echo
        echo "### $c: $(q "$admin" "SELECT '$b'::pg_lsn - '$a'::pg_lsn") bytes"
        as_pg "$PGBIN/pg_waldump" -p "$work/pg/data/pg_wal" -s "$a" -e "$b" 2>/dev/null |
            sed -E 's/ lsn: [^,]*, prev [^,]*,//; s/ +/ /g' || true
    done
} >>"$prof"
fi

# ================================================================ 4. end to end
if want 4; then
log "4. end to end: $E2E_DELIVERIES deliveries a run to one receiver"
clear_items
rlog=$work/e2e-receiver.log # (the dispatcher logs to $work/e2e.log)
start_receiver "$rport" "$rlog"
recv_pid=$rpid
start_dispatcher bench_ep e2e
disp_pid=$dpid
sleep 3 # its first passes done: the pause below reaches a settled dispatcher
for n in $FANOUTS; do
    for sys in fanout single; do
        if [ "$sys" = fanout ]; then
            who="parent_id = (SELECT id FROM pgpace.customer WHERE name = 'fan$n')"
            enq="SELECT count(pgpace.enqueue('fan$n', '$payload_small')) FROM generate_series(1, $((E2E_DELIVERIES / n)))"
            path="/c/fan$n-"
        else
            who="name = ANY (ARRAY(SELECT 's' || g FROM generate_series(1, $n) g))"
            enq="SELECT count(pgpace.enqueue('s' || (g % $n + 1), '$payload_small')) FROM generate_series(0, $((E2E_DELIVERIES - 1))) g"
            path="/c/s"
        fi
        tput=() dcpu=() rcpu=() pcpu=() l0=$(cut -d' ' -f1 /proc/loadavg)
        for r in $(seq 1 "$RUNS"); do
            # Paused while the backlog is written: the run counts from the resume.
            q "$d" "UPDATE pgpace.customer SET paused = true WHERE $who"
            sleep 2
            q "$d" "$enq" >/dev/null
            q "$d" "CHECKPOINT"
            before=$(wc -l <"$rlog")
            c0=$(cpu_us "$disp_pid") r0=$(cpu_us "$recv_pid") g0=$(pg_cluster_cpu) nsess=1
            q "$d" "UPDATE pgpace.customer SET paused = false WHERE $who"
            end=$((SECONDS + E2E_S))
            while [ "$(tail -n +$((before + 1)) "$rlog" | grep -c " $path" || true)" -lt "$E2E_DELIVERIES" ] && [ $SECONDS -lt "$end" ]; do sleep 0.2; done
            # Acknowledged: the queue rows go with their outcome.
            while nsess=$((nsess + 1)) && [ "$(q "$d" "SELECT count(*) FROM pgpace.queue")" != 0 ] && [ $SECONDS -lt "$end" ]; do sleep 0.1; done
            c1=$(cpu_us "$disp_pid") r1=$(cpu_us "$recv_pid") g1=$(pg_cluster_cpu)
            got=$(tail -n +$((before + 1)) "$rlog" | grep -c " $path" || true)
            if [ "$got" != "$E2E_DELIVERIES" ]; then
                echo "- end to end $sys n$n run $r: $got of $E2E_DELIVERIES deliveries within $E2E_S s; queued then (count, claimed, attempts, last_error): $(q "$d" "SELECT count(*), count(claim_token), coalesce(max(attempt), 0), max(last_error) FROM pgpace.queue" | tr '|' ' '); dead letters: $(q "$d" "SELECT count(*), max(last_error) FROM pgpace.dead_letter" | tr '|' ' '); attempts by outcome: $(q "$d" "SELECT string_agg(outcome || '=' || n, ' ') FROM (SELECT outcome, count(*) n FROM pgpace.delivery_attempt GROUP BY 1) x"); lines before the resume: $(grep -c " $path" "$rlog" | awk -v t="$(tail -n +$((before + 1)) "$rlog" | grep -c " $path")" '{ print $1 - t }')" >>"$work/notes"
            fi
            tput+=("$(tail -n +$((before + 1)) "$rlog" | grep " $path" |
                awk 'NR == 1 { a = $1 } { b = $1; n++ } END { if (b > a) printf "%.0f", (n - 1) * 1000 / (b - a) }')")
            dcpu+=("$(div "$((c1 - c0))" "$got")")
            rcpu+=("$(div "$((r1 - r0))" "$got")")
            # The harness's sessions (the resume, the polls) come off.
            pcpu+=("$(div "$((g1 - g0 - nsess * sess_us))" "$got")")
            q "$d" "DELETE FROM pgpace.queue" >/dev/null
        done
        record e2e "$sys" "n$n" deliveries_per_s per_s "${tput[@]}"
        record e2e "$sys" "n$n" dispatcher_cpu_us_per_delivery us "${dcpu[@]}"
        record e2e "$sys" "n$n" receiver_cpu_us_per_delivery us "${rcpu[@]}"
        record e2e "$sys" "n$n" postgres_cpu_us_per_delivery us "${pcpu[@]}"
        record e2e "$sys" "n$n" load_avg load "$l0"
        log "e2e $sys n$n: $(get e2e "$sys" "n$n" deliveries_per_s median) deliveries/s; CPU us per delivery: pgpace $(get e2e "$sys" "n$n" dispatcher_cpu_us_per_delivery median), receiver $(get e2e "$sys" "n$n" receiver_cpu_us_per_delivery median), PostgreSQL $(get e2e "$sys" "n$n" postgres_cpu_us_per_delivery median)"
    done
done
stop_pid "$disp_pid"
stop_pid "$recv_pid"
fi
load[e2e]=$(cut -d' ' -f1 /proc/loadavg)
q "$admin" "DROP DATABASE bench_ep WITH (FORCE)"

# ================================================================ 5. claim rounds
if want 5; then
log "5. claim rounds: $TENANTS customers x 5 endpoints vs $((TENANTS * 5)) customers"
cport=$((port + 2)) hport=$((port + 3))
metrics() { curl -s --max-time 30 "http://127.0.0.1:$hport/metrics"; }
hist() { metrics | grep -E '^pgpace_(claim_duration_seconds|claim_wait_rounds)_(bucket|sum|count)' || true; }
# From two snapshots: "count sum q50 q95 q99" of one histogram's difference (bench/run's hist_diff).
hist_diff() { # BEFORE AFTER PREFIX [LABEL]
    awk -v pre="$3" -v lab="${4:-}" '
        function le(s) { sub(/.*le="/, "", s); sub(/".*/, "", s); return s }
        index($1, pre "_") != 1 || (lab != "" && index($1, lab) == 0) { next }
        { v = $2 + 0 }
        FNR == NR { a[$1] = v; next }
        { d = v - a[$1]
          if ($1 ~ /_bucket/) { n++; b[n] = le($1); c[n] = d }
          else if ($1 ~ /_sum/) sum = d; else if ($1 ~ /_count/) cnt = d }
        function q(p,  t, i, lo, prev) {
            if (cnt <= 0) return "nan"
            t = p * cnt; prev = 0; lo = 0
            for (i = 1; i <= n; i++) {
                if (c[i] >= t) {
                    if (b[i] == "+Inf") return lo
                    return lo + (b[i] - lo) * ((t - prev) / ((c[i] - prev) > 0 ? c[i] - prev : 1))
                }
                prev = c[i]; if (b[i] != "+Inf") lo = b[i]
            }
            return lo }
        END { printf "%d %.6f %s %s %s\n", cnt, sum, q(0.5), q(0.95), q(0.99) }' "$1" "$2"
}
claim_run() { # SYSTEM(fanout|single) DB
    local sys=$1 db=$2 cd total=$((TENANTS * 5)) rlog=$work/claims-$1-receiver.log
    cd=$(conn "$db")
    : >"$rlog"
    start_receiver "$cport" "$rlog"
    local rp=$rpid
    start_dispatcher "$db" "claims-$sys" "max_in_flight = 10000" "max_host_connections = 4096
max_connections = 1000" "127.0.0.1:$hport"
    local dp=$dpid
    for _ in $(seq 1 100); do metrics | grep -q '^pgpace_claim_duration_seconds' && break; sleep 0.2; done
    sleep 3
    local enq
    if [ "$sys" = fanout ]; then
        enq="SELECT count(pgpace.enqueue('t' || g, '$payload_small')) FROM generate_series(1, $TENANTS) g"
    else
        enq="SELECT count(pgpace.enqueue('p' || g, '$payload_small')) FROM generate_series(1, $total) g"
    fi
    local commit=() drain=() tput=() rounds=() rmean=() rp99=() per_round=() cpu_round=() cpu_pct=() stmt_ms=() stmt_calls=() l0
    l0=$(cut -d' ' -f1 /proc/loadavg)
    for r in $(seq 1 "$RUNS"); do
        q "$cd" "SELECT pg_stat_statements_reset()" >/dev/null
        hist >"$work/h0.txt"
        local off c0 t0 t1 n last c1
        off=$(wc -l <"$rlog")
        c0=$(cpu_us "$dp")
        t0=$(date +%s%3N)
        q "$cd" "$enq" >/dev/null
        t1=$(date +%s%3N)
        local end=$((SECONDS + 600))
        while [ "$(tail -n +$((off + 1)) "$rlog" | wc -l)" -lt "$total" ] && [ $SECONDS -lt "$end" ]; do sleep 0.5; done
        c1=$(cpu_us "$dp")
        read -r n last < <(tail -n +$((off + 1)) "$rlog" | awk '{ n++; if ($1 > m) m = $1 } END { printf "%.0f %.0f\n", n, m }')
        # The claims that find each pair empty after its delivery come a slot (1 s) later.
        sleep 2
        hist >"$work/h1.txt"
        [ "$n" -ge "$total" ] || echo "- claims $sys run $r: only $n of $total deliveries within 600 s" >>"$work/notes"
        local cl wr
        cl=$(hist_diff "$work/h0.txt" "$work/h1.txt" pgpace_claim_duration_seconds 'round="scheduled"')
        wr=$(hist_diff "$work/h0.txt" "$work/h1.txt" pgpace_claim_wait_rounds)
        commit+=("$((t1 - t0))")
        drain+=("$(awk -v a="$t0" -v b="$last" 'BEGIN { printf "%.2f", (b - a) / 1000 }')")
        tput+=("$(awk -v a="$t1" -v b="$last" -v n="$total" 'BEGIN { if (b > a) printf "%.0f", n * 1000 / (b - a) }')")
        rounds+=("$(echo "$cl" | awk '{ print $1 }')")
        rmean+=("$(echo "$cl" | awk '{ if ($1) printf "%.2f", $2 / $1 * 1000 }')")
        rp99+=("$(echo "$cl" | awk '$5 != "nan" { printf "%.2f", $5 * 1000 }')")
        per_round+=("$(echo "$wr" | awk -v r="$(echo "$cl" | awk '{ print $1 }')" '{ if (r) printf "%.0f", $1 / r }')")
        cpu_round+=("$(awk -v a="$c0" -v b="$c1" -v r="$(echo "$cl" | awk '{ print $1 }')" 'BEGIN { if (r) printf "%.2f", (b - a) / 1000 / r }')")
        cpu_pct+=("$(awk -v a="$c0" -v b="$c1" -v t0="$t1" -v t1="$last" 'BEGIN { if (t1 > t0) printf "%.1f", (b - a) / 10 / (t1 - t0) }')")
        local s
        s=$(q "$cd" "SELECT coalesce(sum(calls), 0), coalesce(round((sum(total_exec_time) / nullif(sum(calls), 0))::numeric, 2), 0)
                       FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
                        AND query LIKE '-- One claim round%'" | tr '|' ' ')
        stmt_calls+=("$(echo "$s" | awk '{ print $1 }')")
        stmt_ms+=("$(echo "$s" | awk '{ print $2 }')")
        q "$cd" "DELETE FROM pgpace.queue" >/dev/null
        sleep 2
    done
    record claims "$sys" "t$TENANTS" enqueue_commit_ms ms "${commit[@]}"
    record claims "$sys" "t$TENANTS" drain_s s "${drain[@]}"
    record claims "$sys" "t$TENANTS" deliveries_per_s per_s "${tput[@]}"
    record claims "$sys" "t$TENANTS" rounds rounds "${rounds[@]}"
    record claims "$sys" "t$TENANTS" round_mean_ms ms "${rmean[@]}"
    record claims "$sys" "t$TENANTS" round_p99_ms ms "${rp99[@]}"
    record claims "$sys" "t$TENANTS" pairs_per_round pairs "${per_round[@]}"
    record claims "$sys" "t$TENANTS" dispatcher_cpu_ms_per_round ms "${cpu_round[@]}"
    record claims "$sys" "t$TENANTS" dispatcher_cpu_pct percent "${cpu_pct[@]}"
    record claims "$sys" "t$TENANTS" claim_stmt_calls calls "${stmt_calls[@]}"
    record claims "$sys" "t$TENANTS" claim_stmt_mean_ms ms "${stmt_ms[@]}"
    record claims "$sys" "t$TENANTS" load_avg load "$l0"
    stop_pid "$dp"
    stop_pid "$rp"
    log "claims $sys: commit $(get claims "$sys" "t$TENANTS" enqueue_commit_ms median) ms, drained $(get claims "$sys" "t$TENANTS" drain_s median) s, $(get claims "$sys" "t$TENANTS" rounds median) rounds of $(get claims "$sys" "t$TENANTS" round_mean_ms median) ms (statement $(get claims "$sys" "t$TENANTS" claim_stmt_mean_ms median) ms), pgpace $(get claims "$sys" "t$TENANTS" dispatcher_cpu_ms_per_round median) ms CPU a round"
}
pgss top
newdb bench_ep_fan
q "$(conn bench_ep_fan)" "INSERT INTO pgpace.customer (name, rate_per_minute) SELECT 't' || g, 600 FROM generate_series(1, $TENANTS) g"
q "$(conn bench_ep_fan)" "INSERT INTO pgpace.customer (name, parent_id, endpoint_name, mode, rate_per_minute, webhook_url, signing_secrets)
                           SELECT c.name || '/e' || k, c.id, 'e' || k, 'spaced', 60, 'http://127.0.0.1:$cport/c/' || c.name || '-e' || k, $secret
                             FROM pgpace.customer c, generate_series(1, 5) k ORDER BY c.id, k"
q "$(conn bench_ep_fan)" "VACUUM ANALYZE pgpace.customer"
claim_run fanout bench_ep_fan
q "$admin" "DROP DATABASE bench_ep_fan WITH (FORCE)"
newdb bench_ep_flat
q "$(conn bench_ep_flat)" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets)
                            SELECT 'p' || g, 'spaced', 60, 'http://127.0.0.1:$cport/c/p' || g, $secret FROM generate_series(1, $((TENANTS * 5))) g"
q "$(conn bench_ep_flat)" "VACUUM ANALYZE pgpace.customer"
claim_run single bench_ep_flat
q "$admin" "DROP DATABASE bench_ep_flat WITH (FORCE)"
pgss none
fi
load[end]=$(cut -d' ' -f1 /proc/loadavg)
elapsed_min=$(awk -v s="$t_start" -v e="$(date +%s)" 'BEGIN { printf "%.1f", (e - s) / 60 }')

# ================================================================ report
rel() { realpath --relative-to="$(dirname "$report")" "$1"; }
row_enq() { # SIZE N -> table row
    local p="$1_n$2" fs ss
    fs=$(get enqueue fanout "$p" stmt_us_per_delivery median) ss=$(get enqueue single "$p" stmt_us_per_delivery median)
    local fc sc fw sw
    fc=$(get enqueue fanout "$p" postgres_cpu_us_per_delivery median) sc=$(get enqueue single "$p" postgres_cpu_us_per_delivery median)
    fw=$(get enqueue fanout "$p" wal_bytes_per_delivery median) sw=$(get enqueue single "$p" wal_bytes_per_delivery median)
    echo "| $1 | $2 | $(cell enqueue fanout "$p" tx_latency_ms) | $(cell enqueue single "$p" tx_latency_ms) | $(cell enqueue fanout "$p" stmt_us_per_delivery) | $(cell enqueue single "$p" stmt_us_per_delivery) | $(ratio "$fs" "$ss") | $(cell enqueue fanout "$p" postgres_cpu_us_per_delivery) | $(cell enqueue single "$p" postgres_cpu_us_per_delivery) | $(ratio "$fc" "$sc") | $(fmt "$fw") | $(fmt "$sw") | $(ratio "$fw" "$sw") | $(get enqueue fanout "$p" load_avg median) / $(get enqueue single "$p" load_avg median) |"
}
{
    echo "# Endpoints: fan-out of one event, measured"
    echo
    if [ "$merge" = 1 ]; then
        echo "$history" | grep '^Generated' || true
        echo
        while IFS= read -r l; do [ -z "$l" ] || { echo "$l"; echo; }; done < <(echo "$history" | grep '^Regenerated' || true)
        echo "Regenerated by \`SECTIONS=\"$SECTIONS\" bash bench/endpoints.sh$([ "$quick" = 1 ] && echo ' --quick')\` on $started in $elapsed_min min, git $git_rev (load average ${load[start]} at its start, ${load[end]} at its end): those sections and their rows in the CSV; the rest is from the run above."
        echo
    else
        echo "Generated by \`bash bench/endpoints.sh$([ "$quick" = 1 ] && echo ' --quick')\` on $started in $elapsed_min min, git $git_rev."
    fi
    echo "Every figure is the median of $RUNS runs with the min-max in parentheses, unless a row says"
    echo "otherwise; the raw values are in [\`$(rel "$csv")\`]($(rel "$csv"))."
    echo
    echo "## Machine"
    echo
    echo "| | |"
    echo "|---|---|"
    echo "| CPU | $cpu |"
    echo "| cores | $cores |"
    echo "| memory | $mem |"
    echo "| load average (1 min) at start / after end to end / end$([ "$merge" = 1 ] && echo " (of the last regeneration)") | ${load[start]} / ${load[e2e]} / ${load[end]} (other processes on the machine share its cores) |"
    echo "| PostgreSQL | $pgver (private cluster from tests/tools/pgcluster.sh, pg_stat_statements loaded, tracking only where said) |"
    while IFS= read -r l; do echo "| ${l%% = *} | ${l#* = } |"; done <<<"$settings"
    echo "| a harness psql session's cost to the cluster, taken off the CPU figures | $(cell machine harness session postgres_cpu_us_per_session) us |"
    echo
    echo "## The target"
    echo
    echo "Issue 30: *a delivery reached by fan-out costs the database no more than a delivery enqueued"
    echo "on its own (the payload is written once)*. Measured per delivery as PostgreSQL's CPU (the"
    echo "whole cluster, WAL writer and checkpointer included) and WAL, one event fanned out to N"
    echo "endpoints against N items enqueued on their own in one transaction (section 1):"
    echo
    echo "Why one endpoint misses on WAL: an event to one endpoint writes two item rows, the event (with"
    echo "the payload) and its delivery, each with its primary-key entry, and locks the endpoint's row"
    echo "(KEY SHARE: a WAL record); an item on its own is one row. The records of one enqueue of each"
    echo "are listed at the end of [\`$(rel "$prof")\`]($(rel "$prof")) (pg_waldump). From a few endpoints on, the"
    echo "payload written once and the one statement for all deliveries make up for it. The CPU at one"
    echo "endpoint is the same within the runs' spread (the statements' time is higher: section 1)."
    echo
    echo "| payload | endpoints | PostgreSQL CPU per delivery, fan-out / on its own | WAL per delivery, fan-out / on its own | verdict |"
    echo "|---|---|---|---|---|"
    for size in small 2k; do
        for n in $FANOUTS; do
            p="${size}_n$n"
            fc=$(get enqueue fanout "$p" postgres_cpu_us_per_delivery median) sc=$(get enqueue single "$p" postgres_cpu_us_per_delivery median)
            fw=$(get enqueue fanout "$p" wal_bytes_per_delivery median) sw=$(get enqueue single "$p" wal_bytes_per_delivery median)
            verdict=$(awk -v a="$(ratio "$fc" "$sc")" -v b="$(ratio "$fw" "$sw")" 'BEGIN { if (a == "n/a" || b == "n/a") print "not measured"; else if (a <= 1 && b <= 1) print "met"; else printf "**missed**: %s\n", (a > 1 ? "CPU " a "x" : "") (a > 1 && b > 1 ? ", " : "") (b > 1 ? "WAL " b "x" : "") }')
            echo "| $([ "$size" = small ] && echo "78 bytes" || echo "2 kB") | $n | $(fmt "$fc") / $(fmt "$sc") us = $(ratio "$fc" "$sc") | $(fmt "$fw") / $(fmt "$sw") bytes = $(ratio "$fw" "$sw") | $verdict |"
        done
    done
    echo
    echo "## 1. Enqueue, SQL path"
    echo
    echo "One producer session (\`pgbench -n -M prepared\`, one client, $ENQ_DELIVERIES deliveries a run), one"
    echo "transaction per event: *fan-out* \`SELECT pgpace.enqueue('fanN', payload)\` to a customer with N"
    echo "endpoints (subscribed to every kind, no filter); *on its own* \`BEGIN; SELECT"
    echo "pgpace.enqueue('s1', payload); ... ('sN', ...); COMMIT\`, N customers without endpoints, so the"
    echo "same N deliveries per transaction. Before each run the tables are emptied and checkpointed."
    echo "*Statements*: pg_stat_statements' execution time of the enqueue calls (top level; commit not"
    echo "included) per delivery. *PostgreSQL CPU*: the whole cluster's user + system CPU over the run,"
    echo "per delivery (commits, WAL writer included; the harness's own sessions taken off). *WAL*:"
    echo "\`pg_current_wal_insert_lsn()\` before and after, per delivery. *Transaction*: pgbench's latency"
    echo "average, client round trips included (N statements on their own, one for the fan-out)."
    echo
    echo "| payload | endpoints | transaction ms, fan-out | on their own | statements us/delivery, fan-out | on their own | ratio | PostgreSQL CPU us/delivery, fan-out | on their own | ratio | WAL bytes/delivery, fan-out | on their own | ratio | load avg |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for size in small 2k; do for n in $FANOUTS; do row_enq "$size" "$n"; done; done
    echo
    echo "Per event, fan-out: the transaction's time over N endpoints is the cost of one event (the"
    echo "time per delivery is that over N)."
    if [ -n "$baseline" ]; then
        echo
        echo "**Before and after** the change to \`pgpace.enqueue_fanout\` (and \`pgpace.subscribed\`,"
        echo "\`pgpace.fans_out\`), measured in this run the same way: *before* is a database migrated by"
        echo "the build in \`BASELINE_BUILD\` (git $baseline_rev), whose fan-out wrote each delivery with"
        echo "statements of its own in a loop, one endpoint at a time, and whose \`fans_out\` (asked by every"
        echo "enqueue, with endpoints or without) was a SQL function planned again in each transaction;"
        echo "see section 3 for the profile."
        echo
        echo "| payload | endpoints | fan-out: statements us/delivery, before | after | after / before | PostgreSQL CPU us/delivery, before | after | WAL bytes/delivery, before | after | on their own: statements us/delivery, before | after | PostgreSQL CPU us/delivery, before | after |"
        echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
        for size in small 2k; do
            for n in $FANOUTS; do
                p="${size}_n$n"
                echo "| $size | $n | $(cell enqueue fanout_before "$p" stmt_us_per_delivery) | $(cell enqueue fanout "$p" stmt_us_per_delivery) | $(ratio "$(get enqueue fanout "$p" stmt_us_per_delivery median)" "$(get enqueue fanout_before "$p" stmt_us_per_delivery median)") | $(cell enqueue fanout_before "$p" postgres_cpu_us_per_delivery) | $(cell enqueue fanout "$p" postgres_cpu_us_per_delivery) | $(fmt "$(get enqueue fanout_before "$p" wal_bytes_per_delivery median)") | $(fmt "$(get enqueue fanout "$p" wal_bytes_per_delivery median)") | $(cell enqueue single_before "$p" stmt_us_per_delivery) | $(cell enqueue single "$p" stmt_us_per_delivery) | $(cell enqueue single_before "$p" postgres_cpu_us_per_delivery) | $(cell enqueue single "$p" postgres_cpu_us_per_delivery) |"
            done
        done
    fi
    echo
    echo "## 2. Enqueue, bulk file"
    echo
    echo "\`pgpace enqueue --file\` of $BULK_DELIVERIES deliveries: as events (\`$BULK_DELIVERIES / N\` lines for fanN)"
    echo "or as items (\`$BULK_DELIVERIES\` lines spread over s1..sN). 78-byte payload, kind \`order.created\`."
    echo
    echo "| endpoints | deliveries/s, fan-out | on their own | PostgreSQL CPU us/delivery, fan-out | on their own | ratio | WAL bytes/delivery, fan-out | on their own |"
    echo "|---|---|---|---|---|---|---|---|"
    for n in $FANOUTS; do
        echo "| $n | $(cell bulk fanout "n$n" deliveries_per_s) | $(cell bulk single "n$n" deliveries_per_s) | $(cell bulk fanout "n$n" postgres_cpu_us_per_delivery) | $(cell bulk single "n$n" postgres_cpu_us_per_delivery) | $(ratio "$(get bulk fanout "n$n" postgres_cpu_us_per_delivery median)" "$(get bulk single "n$n" postgres_cpu_us_per_delivery median)") | $(cell bulk fanout "n$n" wal_bytes_per_delivery) | $(cell bulk single "n$n" wal_bytes_per_delivery) |"
    done
    echo
    echo "## 3. Profile"
    echo
    echo "Every statement's time per call (nested ones too) for a fan-out to 1 and 100 endpoints and the"
    echo "same items on their own, and EXPLAIN (ANALYZE, BUFFERS) of the statement inside"
    echo "\`pgpace.enqueue_fanout\` at 100 endpoints: [\`$(rel "$prof")\`]($(rel "$prof"))."
    echo
    echo "## 4. End to end"
    echo
    echo "\`pgpace run\` (default configuration: one host's \`max_host_connections\` 16, \`max_in_flight\`"
    echo "2000) against one \`pgpace-receiver\` on loopback, every endpoint (or customer) unlimited on it."
    echo "A backlog of $E2E_DELIVERIES deliveries is enqueued while its receivers are paused (\`$E2E_DELIVERIES / N\`"
    echo "events to fanN, or $E2E_DELIVERIES items over s1..sN), then one UPDATE resumes them. deliveries/s: the"
    echo "receiver's first to last arrival; CPU per delivery (user + system, \`/proc\`) from the resume to"
    echo "the last acknowledgement: the dispatcher, the receiver, the whole PostgreSQL cluster (less the"
    echo "harness's polling sessions)."
    echo
    echo "| endpoints | deliveries/s, fan-out | on their own | pgpace CPU us/delivery, fan-out | on their own | receiver CPU us, fan-out | on their own | PostgreSQL CPU us/delivery, fan-out | on their own | load avg |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    for n in $FANOUTS; do
        echo "| $n | $(cell e2e fanout "n$n" deliveries_per_s) | $(cell e2e single "n$n" deliveries_per_s) | $(cell e2e fanout "n$n" dispatcher_cpu_us_per_delivery) | $(cell e2e single "n$n" dispatcher_cpu_us_per_delivery) | $(cell e2e fanout "n$n" receiver_cpu_us_per_delivery) | $(cell e2e single "n$n" receiver_cpu_us_per_delivery) | $(cell e2e fanout "n$n" postgres_cpu_us_per_delivery) | $(cell e2e single "n$n" postgres_cpu_us_per_delivery) | $(get e2e fanout "n$n" load_avg median) / $(get e2e single "n$n" load_avg median) |"
    done
    echo
    echo "## 5. Claim rounds: $TENANTS customers x 5 endpoints"
    echo
    echo "*Fan-out*: $TENANTS customers (the customer's limit 600/min over its endpoints) with 5 endpoints"
    echo "each (spaced at 60/min), one transaction enqueuing an event for every customer (so a delivery"
    echo "for each of the $((TENANTS * 5)) endpoints, and a NOTIFY each). *On their own*: $((TENANTS * 5)) customers"
    echo "without endpoints (spaced at 60/min), one transaction enqueuing an item for each. \`pgpace"
    echo "run\` with bench/run's many-tenants settings (\`max_in_flight\` 10000, \`max_host_connections\`"
    echo "4096, \`max_connections\` 1000), one \`pgpace-receiver\`. *Commit*: the enqueue statement from"
    echo "psql; *drained*: from its start to the last arrival; deliveries/s from its end. Claim rounds"
    echo "(scheduled) from \`/metrics\` (\`pgpace_claim_duration_seconds\`, before and after, so the"
    echo "round's time as the dispatcher sees it, answer included; p99 interpolated in the buckets);"
    echo "*pairs per round*: the pairs claimed (\`pgpace_claim_wait_rounds\` observations) over the"
    echo "rounds; the claim statement (\`run_claim.sql\`) from pg_stat_statements; the dispatcher's CPU"
    echo "(\`/proc\`) per round, and as a share of one core from the commit to the last arrival."
    echo
    echo "| | fan-out: $TENANTS x 5 endpoints | on their own: $((TENANTS * 5)) customers |"
    echo "|---|---|---|"
    for m in "enqueue_commit_ms|enqueue commit, ms" "drain_s|drained, s" "deliveries_per_s|deliveries/s" "rounds|claim rounds" "round_mean_ms|round mean, ms" "round_p99_ms|round p99, ms" "pairs_per_round|pairs claimed per round" "claim_stmt_calls|claim statements" "claim_stmt_mean_ms|claim statement mean, ms" "dispatcher_cpu_ms_per_round|pgpace CPU per round, ms" "dispatcher_cpu_pct|pgpace CPU, % of a core" "load_avg|load avg at start"; do
        echo "| ${m#*|} | $(cell claims fanout "t$TENANTS" "${m%%|*}") | $(cell claims single "t$TENANTS" "${m%%|*}") |"
    done
    echo
    echo "## Notes from this run"
    echo
    if [ -s "$work/notes" ]; then cat "$work/notes"; else echo "- none"; fi
} >"$report"
log "wrote $report ($elapsed_min min)"
