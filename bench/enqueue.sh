#!/usr/bin/env bash
# enqueue.sh - what an enqueue costs a producer, each beside its baseline on the same cluster
# (issue 34), medians of --runs runs with min-max, conditions alternating run by run:
#
# - single: `SELECT pgpace.enqueue(...)` in its own transaction from --clients pgbench clients
#   for --seconds, against a plain INSERT of the same payload into a one-table queue (bigserial
#   key, jsonb payload, created_at). pgpace runs twice: with a leader running (the customer
#   paused, so the leader does nothing but read wake-ups, hot or cold as it decides) and with
#   the same leader at `wake_hot_per_s = 0` (every enqueue notifies, as before issue 34).
#   BASELINE_BUILD (a build of an earlier commit: DIR/src/pgpace) adds that version, its schema
#   in a database of its own, with its leader running too (and to the bulk tables below).
# - bulk: --items items into one customer: `pgpace enqueue --file` against graphile-worker's
#   `addJobs` (its JavaScript client from npm, version GRAPHILE_VERSION) of the same payloads,
#   each into a fresh database; and with fan-out: the same events into a customer with
#   --fanout endpoints (each subscribed to everything), against addJobs of the deliveries they
#   make (--fanout jobs an event). With BASELINE_BUILD, its `pgpace enqueue --file` runs in turn
#   with the others.
#
#   bash bench/enqueue.sh [--runs N] [--seconds S] [--clients C] [--items N] [--fanout N] [--bulk-only]
#
# --bulk-only skips the single-enqueue workload (and its table).
#
# Needs root on Debian 12 (installs postgresql-contrib for pgbench's server side, nodejs, npm),
# a build (BUILD, default ./build: src/pgpace). Prints Markdown (bench/ENQUEUE.md's tables) and
# writes the raw figures to bench/results/enqueue.csv. Everything it starts is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
GRAPHILE_VERSION=${GRAPHILE_VERSION:-0.18.0}
runs=3 seconds=10 clients=8 items=100000 fanout=3 bulk_only=0
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=${2:?}; shift ;;
    --seconds) seconds=${2:?}; shift ;;
    --clients) clients=${2:?}; shift ;;
    --items) items=${2:?}; shift ;;
    --fanout) fanout=${2:?}; shift ;;
    --bulk-only) bulk_only=1 ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "enqueue.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
pgpace=$BUILD/src/pgpace
[ -x "$pgpace" ] || { echo "enqueue.sh: no $pgpace (meson setup build && ninja -C build)" >&2; exit 1; }
if [ -n "${BASELINE_BUILD:-}" ] && [ ! -x "$BASELINE_BUILD/src/pgpace" ]; then
    echo "enqueue.sh: BASELINE_BUILD has no src/pgpace" >&2
    exit 1
fi
if ! command -v node >/dev/null || ! command -v npm >/dev/null || [ ! -x "$PGBIN/pgbench" ]; then
    apt-get update -qq && apt-get install -y -qq nodejs npm postgresql-15 >/dev/null
fi

# shellcheck source=bench/common.sh
. bench/common.sh
bench_private_cluster enqueue
started=$(date -u '+%Y-%m-%d %H:%M UTC')
csv=bench/results/enqueue.csv
mkdir -p bench/results
echo "workload,condition,run,value" >"$csv"
q() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At "$@"; }

# ---- single enqueue -----------------------------------------------------------------------------
payload='{"order": 12345, "status": "paid", "amount": "19.99", "currency": "EUR", "lines": [{"sku": "A-1", "qty": 2}]}'
printf "SELECT pgpace.enqueue('shop', '%s');\n" "$payload" >"$work/enqueue.sql"
printf "INSERT INTO plain_queue (customer, payload) VALUES ('shop', '%s');\n" "$payload" >"$work/plain.sql"

# A database with pgpace's schema (by binary $2), a paused customer and a leader (extra INI $3).
make_db() {
    local db=$1 bin=$2 ini=$3
    q -d postgres -c "CREATE DATABASE $db"
    "$bin" --db "dbname=$db" migrate >/dev/null
    "$bin" --db "dbname=$db" customer set shop --rate 600 --url http://127.0.0.1:9/shop --paused >/dev/null
    printf '[database]\nconninfo = dbname=%s\n[delivery]\nallow_cidrs = 127.0.0.0/8\n[dispatcher]\n%s\n' \
        "$db" "$ini" >"$work/$db.ini"
    "$bin" --config "$work/$db.ini" run >"$work/$db.log" 2>&1 &
    pids+=($!)
}
declare -A tps
if [ "$bulk_only" = 0 ]; then
    make_db enq_pgpace "$pgpace" ""
    make_db enq_notify "$pgpace" "wake_hot_per_s = 0"
    conditions="plain pgpace notify"
    if [ -n "${BASELINE_BUILD:-}" ]; then
        make_db enq_before "$BASELINE_BUILD/src/pgpace" ""
        conditions="$conditions before"
    fi
    q -d postgres -c "CREATE DATABASE enq_plain"
    q -d enq_plain -c "CREATE TABLE plain_queue (id bigserial PRIMARY KEY, customer text NOT NULL,
                       payload jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
    sleep 2 # the leaders take the lead (their first statements are not measured)

    # Each run starts from empty tables after a checkpoint, so every condition pays the same
    # full-page writes.
    reset_db() {
        case $1 in
        plain) q -d enq_plain -c "TRUNCATE plain_queue" ;;
        *) q -d "enq_$1" -c "TRUNCATE pgpace.queue, pgpace.item" ;;
        esac
        q -d postgres -c "CHECKPOINT"
    }
    for r in $(seq 1 "$runs"); do
        for c in $conditions; do
            reset_db "$c"
            if [ "$c" = plain ]; then db=enq_plain script=plain.sql; else db=enq_$c script=enqueue.sql; fi
            out=$("$PGBIN/pgbench" -n -c "$clients" -j 2 -T "$seconds" -f "$work/$script" "$db" 2>&1)
            v=$(echo "$out" | awk '/^tps =/ {printf "%.0f", $3}')
            [ -n "$v" ] || { echo "enqueue.sh: pgbench failed for $c: $out" >&2; exit 1; }
            tps[$c]+="$v "
            echo "single,$c,$r,$v" >>"$csv"
        done
    done
fi

# ---- bulk ---------------------------------------------------------------------------------------
awk -v n="$items" 'BEGIN { for (i = 1; i <= n; i++)
    printf("{\"customer\":\"shop\",\"kind\":\"bench\",\"payload\":{\"n\":%d,\"text\":\"lorem ipsum dolor sit amet\"}}\n", i) }' \
    >"$work/items.jsonl"
mkdir -p "$work/npm"
(cd "$work/npm" && npm install --silent --no-audit --no-fund "graphile-worker@$GRAPHILE_VERSION" >/dev/null)
cp bench/graphile_add_jobs.mjs "$work/npm/"
# Seconds `pgpace enqueue --file` (binary $2) takes for the items into database $1.
timed_enqueue() {
    local t0 t1
    t0=$(date +%s%N)
    "$2" --db "dbname=$1" enqueue --file "$work/items.jsonl" >/dev/null
    t1=$(date +%s%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'
}
# One bulk run of binary $1 (condition $2 in bulk[] and the CSV, run $3): into one customer,
# then with fan-out, each into a fresh database.
bulk_pgpace() {
    local bin=$1 c=$2 r=$3 v n
    q -d postgres -c "DROP DATABASE IF EXISTS bulk_pgpace" -c "CREATE DATABASE bulk_pgpace"
    "$bin" --db dbname=bulk_pgpace migrate >/dev/null
    "$bin" --db dbname=bulk_pgpace customer set shop --rate 600 --url http://127.0.0.1:9/shop --paused >/dev/null
    q -d postgres -c "CHECKPOINT"
    v=$(timed_enqueue bulk_pgpace "$bin")
    bulk[$c]+="$v "
    echo "bulk,$c,$r,$v" >>"$csv"

    # Fan-out: the customer's events go to its endpoints (the customer has no receiver of its
    # own), a delivery each; graphile-worker adds the same number of jobs.
    q -d postgres -c "DROP DATABASE IF EXISTS bulk_fanout" -c "CREATE DATABASE bulk_fanout"
    "$bin" --db dbname=bulk_fanout migrate >/dev/null
    "$bin" --db dbname=bulk_fanout customer set shop --rate 600 --paused >/dev/null
    for e in $(seq 1 "$fanout"); do
        printf '[delivery]\nallow_cidrs = 127.0.0.0/8\n' >"$work/fanout.ini"
        "$bin" --config "$work/fanout.ini" --db dbname=bulk_fanout endpoint add shop "e$e" \
            --url "http://127.0.0.1:9/e$e" --rate 600 >/dev/null
    done
    q -d postgres -c "CHECKPOINT"
    v=$(timed_enqueue bulk_fanout "$bin")
    n=$(q -d bulk_fanout -c "SELECT count(*) FROM pgpace.queue")
    [ "$n" = $((items * fanout)) ] || { echo "enqueue.sh: fan-out made $n deliveries, not $((items * fanout))" >&2; exit 1; }
    bulk[${c}_fanout]+="$v "
    echo "bulk_fanout,$c,$r,$v" >>"$csv"
}
# One run of graphile-worker's addJobs, with $1 copies of each job (run $2).
bulk_graphile() {
    local copies=$1 r=$2 v url key=graphile
    [ "$copies" = 1 ] || key=graphile_fanout
    q -d postgres -c "DROP DATABASE IF EXISTS bulk_graphile" -c "CREATE DATABASE bulk_graphile"
    url="postgres://$PGUSER@/bulk_graphile?host=$PGHOST&port=$PGPORT"
    v=$(cd "$work/npm" && node graphile_add_jobs.mjs "$url" "$work/items.jsonl" "$copies")
    bulk[$key]+="$v "
    if [ "$copies" = 1 ]; then echo "bulk,graphile,$r,$v" >>"$csv"; else echo "bulk_fanout,graphile,$r,$v" >>"$csv"; fi
}
declare -A bulk
for r in $(seq 1 "$runs"); do
    bulk_pgpace "$pgpace" pgpace "$r"
    [ -z "${BASELINE_BUILD:-}" ] || bulk_pgpace "$BASELINE_BUILD/src/pgpace" before "$r"
    bulk_graphile 1 "$r"
    bulk_graphile "$fanout" "$r"
done

# ---- report -------------------------------------------------------------------------------------
stat() { # "median (min-max)" of the numbers in $1, with printf format $2
    echo "$1" | tr ' ' '\n' | grep . | sort -g | awk -v f="$2" '{a[NR] = $1} END {
        m = (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2
        printf(f " (" f "-" f ")", m, a[1], a[NR]) }'
}
median() { echo "$1" | tr ' ' '\n' | grep . | sort -g | awk '{a[NR] = $1} END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
opts="--runs $runs --seconds $seconds --clients $clients --items $items --fanout $fanout"
[ "$bulk_only" = 0 ] || opts="--runs $runs --items $items --fanout $fanout --bulk-only"
before_sha=
[ -z "${BASELINE_BUILD:-}" ] || before_sha=$(cd "$BASELINE_BUILD" && git rev-parse --short HEAD 2>/dev/null || echo before)
echo "Generated by \`${BASELINE_BUILD:+BASELINE_BUILD=($before_sha) }bench/enqueue.sh $opts\` on $started,"
echo "git $(git rev-parse --short HEAD 2>/dev/null): $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
echo "PostgreSQL $(q -d postgres -c 'SHOW server_version') (fsync $(q -d postgres -c 'SHOW fsync'), synchronous_commit"
echo "$(q -d postgres -c 'SHOW synchronous_commit'), shared_buffers $(q -d postgres -c 'SHOW shared_buffers')), load average at the end $(cut -d' ' -f1-3 /proc/loadavg)."
echo
if [ "$bulk_only" = 0 ]; then
    plain_m=$(median "${tps[plain]}")
    echo "| single enqueue, $clients clients, own transaction each | transactions/s | / plain INSERT |"
    echo "|---|---|---|"
    for c in $conditions; do
        case $c in
        plain) label="plain INSERT (baseline)" ;;
        pgpace) label="pgpace.enqueue, leader running (default wake_hot_per_s = 500)" ;;
        notify) label="pgpace.enqueue, leader at wake_hot_per_s = 0 (always NOTIFY)" ;;
        before) label="pgpace.enqueue, BASELINE_BUILD ($before_sha)" ;;
        esac
        printf '| %s | %s | %.2f |\n' "$label" "$(stat "${tps[$c]}" %.0f)" \
            "$(awk -v a="$(median "${tps[$c]}")" -v b="$plain_m" 'BEGIN { print a / b }')"
    done
    echo
fi
# One bulk table: $1 title, $2 what is counted, $3 how many, then "key:label" pairs of bulk[],
# the baseline (graphile-worker) first.
bulk_table() {
    local title=$1 what=$2 n=$3 g_m
    shift 3
    g_m=$(median "${bulk[${1%%:*}]}")
    echo "| $title | seconds | $what/s (median) | graphile / pgpace time |"
    echo "|---|---|---|---|"
    for c in "$@"; do
        local key=${c%%:*} label=${c#*:} m
        [ -n "${bulk[$key]:-}" ] || continue
        m=$(median "${bulk[$key]}")
        printf '| %s | %s | %.0f | %.2f |\n' "$label" "$(stat "${bulk[$key]}" %.2f)" \
            "$(awk -v n="$n" -v m="$m" 'BEGIN { print n / m }')" "$(awk -v g="$g_m" -v m="$m" 'BEGIN { print g / m }')"
    done
}
bulk_table "bulk, $items items into one customer" items "$items" \
    "graphile:graphile-worker $GRAPHILE_VERSION addJobs (baseline)" \
    "before:pgpace enqueue --file, BASELINE_BUILD ($before_sha)" "pgpace:pgpace enqueue --file"
echo
bulk_table "bulk with fan-out: $items events to $fanout endpoints ($((items * fanout)) deliveries)" \
    deliveries "$((items * fanout))" \
    "graphile_fanout:graphile-worker addJobs of the $((items * fanout)) jobs (baseline)" \
    "before_fanout:pgpace enqueue --file, $fanout endpoints, BASELINE_BUILD ($before_sha)" \
    "pgpace_fanout:pgpace enqueue --file, $fanout endpoints"
