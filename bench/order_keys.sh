#!/usr/bin/env bash
# order_keys.sh - issue 32's measured figures: what ordered delivery (order keys, migration 0020)
# costs. On a private PostgreSQL 15 (fsync on); writes bench/ORDER_KEYS.md and
# bench/results/order_keys.csv, and the EXPLAIN of one claim round of each variant of (a)
# (bench/results/order_keys_explain_*.txt).
#
#   bash bench/order_keys.sh [--quick]      (--quick: fewer rounds and items, into bench/results-quick/)
#
# (a) Claim cost. 1,000 spaced endpoints (customers) with 500 queued items each, 500,000 in all;
#     half of each endpoint's first items in flight (lease running), as in a steady state:
#     - none:   no order keys;
#     - keys:   100 keys per endpoint (100,000 keys), 5 items each, enqueued in order (parked
#               behind their heads at commit, as every enqueue path does);
#     - gate:   the same keys with every item unparked: the claim's gate alone, without parking
#               (what parking saves).
#     ROUNDS claim rounds of sql/queries/run_claim.sql over the 1,000 endpoints, each timed alone
#     and released (bench/claimbench.c, the dispatcher's statement and parameters), one item and
#     ten items per endpoint. Also the cost of enqueueing the 500,000 keyed items against the
#     same without keys (one INSERT ... SELECT each, parking included).
# (b) One hot key. `pgpace run` against `pgpace-receiver` (answers 200 at once) over loopback:
#     one unlimited endpoint, HOT items with one order key, drained from a full queue; the same
#     with the gate alone (unparked), and without a key. Deliveries per second, the median
#     request time (the attempt log's duration) and the median gap between two requests at the
#     receiver: a key's next item is claimed when its head's outcome is written, so one key
#     goes at one request per (round trip + write of the outcome + next claim).
#
# Environment: BUILD (default ./build: src/pgpace, pgpace-receiver), RUNS (default 3), ROUNDS
# (default 30), HOT (default 3000), BENCH_PORT. Every process it starts is stopped on exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
pgpace=$BUILD/src/pgpace
receiver=$BUILD/pgpace-receiver
[ -x "$pgpace" ] && [ -x "$receiver" ] ||
    { echo "order_keys.sh: build first (meson setup build && ninja -C build)" >&2; exit 1; }

quick=0
[ "${1:-}" = --quick ] && quick=1
RUNS=${RUNS:-3}
if [ "$quick" = 1 ]; then
    ROUNDS=${ROUNDS:-10} HOT=${HOT:-1000} PER_KEY=2 out=bench/results-quick report=bench/results-quick/ORDER_KEYS.md
else
    ROUNDS=${ROUNDS:-30} HOT=${HOT:-3000} PER_KEY=5 out=bench/results report=bench/ORDER_KEYS.md
fi
ENDPOINTS=1000 KEYS=100
ITEMS=$((ENDPOINTS * KEYS * PER_KEY))
mkdir -p "$out"
csv=$out/order_keys.csv
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work=$(mktemp -d /tmp/pgpace-order.XXXXXX)
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

cc -O2 -std=gnu11 -Wall -Wextra bench/claimbench.c $(pkg-config --cflags libpq) \
    $(pkg-config --libs libpq) -lpthread -o "$work/claimbench"
cb=$work/claimbench

port=${BENCH_PORT:-$((20000 + RANDOM % 12000))}
log "starting a private PostgreSQL 15 on port $port (fsync on)"
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "$port")"
export PGHOST PGPORT PGUSER
export PGOPTIONS="-c client_min_messages=warning"
base="host=$PGHOST port=$PGPORT user=$PGUSER"
admin="$base dbname=postgres"
q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
conn() { echo "$base dbname=$1"; }
newdb() {
    q "$admin" "DROP DATABASE IF EXISTS $1 WITH (FORCE)"
    q "$admin" "CREATE DATABASE $1"
    "$pgpace" --db "$(conn "$1")" migrate >/dev/null
}
now_ms() { date +%s%3N; }

echo "case,variant,metric,unit,median,min,max,runs,values" >"$csv"
record() { # CASE VARIANT METRIC UNIT VALUE...
    local c=$1 v=$2 m=$3 u=$4
    shift 4
    [ $# -gt 0 ] || return 0
    printf '%s\n' "$@" | sort -g | awk -v c="$c" -v s="$v" -v m="$m" -v u="$u" '
        { v[NR] = $1; all = all (NR > 1 ? ";" : "") $1 }
        END { med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%s,%s,%s,%s,%.6g,%.6g,%.6g,%d,%s\n", c, s, m, u, med, v[1], v[NR], NR, all }' >>"$csv"
}
get() { # CASE VARIANT METRIC [FIELD]
    awk -F, -v c="$1" -v s="$2" -v m="$3" -v f="${4:-median}" '
        BEGIN { col = (f == "median") ? 5 : (f == "min") ? 6 : 7 }
        $1 == c && $2 == s && $3 == m { print $col; exit }' "$csv"
}
fmt() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { if (v == int(v) && v >= 100) printf "%d", v; else if (v >= 100) printf "%.0f", v; else if (v >= 10) printf "%.1f", v; else printf "%.2f", v }' || printf 'n/a'; }
cell() {
    local m lo hi; m=$(get "$1" "$2" "$3")
    [ -n "$m" ] || { printf 'n/a'; return; }
    lo=$(get "$1" "$2" "$3" min) hi=$(get "$1" "$2" "$3" max)
    if [ "$lo" = "$hi" ]; then fmt "$m"; else printf '%s (%s-%s)' "$(fmt "$m")" "$(fmt "$lo")" "$(fmt "$hi")"; fi
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print ""; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
secret="ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']"

# ---- (a) claim cost -----------------------------------------------------------------------------
# setup_claim DB VARIANT: 1,000 spaced customers (ids 1..1000), ITEMS items enqueued in order
# (item k of every key, then k + 1), half the endpoints' first KEYS/2 items in flight.
# Prints the seconds the enqueue statement took (commit included: parking runs then).
setup_claim() {
    local d=$1 v=$2 key t0 t1
    newdb "$d"
    q "$(conn "$d")" "INSERT INTO pgpace.customer (name, rate_per_minute, webhook_url, signing_secrets)
        SELECT 'c' || g, 60, 'http://127.0.0.1/', $secret FROM generate_series(1, $ENDPOINTS) g"
    if [ "$v" = none ]; then key=NULL; else key="'k' || k"; fi
    t0=$(now_ms)
    psql -X -q -v ON_ERROR_STOP=1 -d "$(conn "$d")" >/dev/null <<SQL
BEGIN;
CREATE TEMP TABLE src ON COMMIT DROP AS
SELECT pgpace.next_item_id() AS id, c, $key AS order_key,
       now() - interval '1 hour' + (s * $KEYS + k) * interval '1 ms' AS run_at
  FROM generate_series(1, $ENDPOINTS) c, generate_series(0, $((PER_KEY - 1))) s,
       generate_series(1, $KEYS) k
 ORDER BY s, k, c;
INSERT INTO pgpace.item (id, customer_id, payload, run_at, order_key)
SELECT id, c, '{"n": 1}', run_at, order_key FROM src;
INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts, order_key)
SELECT id, c, '', 0, run_at, 12, order_key FROM src;
COMMIT;
SQL
    t1=$(now_ms)
    # Half of each endpoint's heads in flight (the first KEYS/2 items in the claim's order).
    q "$(conn "$d")" "UPDATE pgpace.queue q SET attempt = 1, claim_token = 1, claimed_by = 'bench',
                             claimed_at = now(), next_action_at = now() + interval '1 hour'
                        FROM (SELECT item_id, row_number() OVER (PARTITION BY customer_id ORDER BY next_action_at) AS r
                                FROM pgpace.queue WHERE next_action_at IS NOT NULL) x
                       WHERE q.item_id = x.item_id AND x.r <= $((KEYS / 2))"
    if [ "$v" = gate ]; then
        q "$(conn "$d")" "UPDATE pgpace.queue q SET next_action_at = i.run_at FROM pgpace.item i
                           WHERE i.id = q.item_id AND q.next_action_at IS NULL"
    fi
    q "$(conn "$d")" "VACUUM ANALYZE pgpace.queue, pgpace.item, pgpace.customer"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1000 }'
}

# explain_round DB VARIANT: EXPLAIN (ANALYZE, BUFFERS) of one round (one item an endpoint), as
# the dispatcher sends it (jit off), rolled back.
explain_round() {
    local ids carriers ones zeros nulls bases periods
    ids=$(seq -s, 1 "$ENDPOINTS")
    carriers=$(printf '"",%.0s' $(seq 1 "$ENDPOINTS")); carriers=${carriers%,}
    ones=$(printf '1,%.0s' $(seq 1 "$ENDPOINTS")); ones=${ones%,}
    zeros=$(printf '0,%.0s' $(seq 1 "$ENDPOINTS")); zeros=${zeros%,}
    nulls=$(printf 'NULL,%.0s' $(seq 1 "$ENDPOINTS")); nulls=${nulls%,}
    bases=$(printf '%s,%.0s' "$(date +%s)000000" $(seq 1 "$ENDPOINTS")); bases=${bases%,}
    periods=$(printf '1000000,%.0s' $(seq 1 "$ENDPOINTS")); periods=${periods%,}
    echo "EXPLAIN (ANALYZE, BUFFERS) of one claim round, variant '$2': $ENDPOINTS spaced endpoints, one item"
    echo "each, $ITEMS items queued, half the endpoints' first items in flight ($(date -u +%Y-%m-%d))."
    echo
    psql -X -At -d "$(conn "$1")" <<SQL | grep -vE '^(BEGIN|PREPARE|ROLLBACK|SET)$'
BEGIN;
SET LOCAL jit = off;
PREPARE claim AS $(cat sql/queries/run_claim.sql);
EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING ON)
EXECUTE claim('{$ids}', '{$carriers}', '{$ones}', '{$ids}', '{$ones}', '{}', '{}', 100, 60, 42,
              'explain', '{$ids}', '{$bases}', '{$periods}', '{$nulls}', NULL, '{$zeros}', NULL,
              '{}', '{}');
ROLLBACK;
SQL
}

# enqueue_fn DB VARIANT: seconds to enqueue ENQ items through pgpace.enqueue (what a producer
# calls), over 20 customers, 100 keys each (or none), in one statement and transaction.
ENQ=${ENQ:-20000}
enqueue_fn() {
    local d=$1 v=$2 key t0 t1
    newdb "$d"
    q "$(conn "$d")" "INSERT INTO pgpace.customer (name, rate_per_minute, webhook_url, signing_secrets)
        SELECT 'c' || g, 60, 'http://127.0.0.1/', $secret FROM generate_series(1, 20) g"
    if [ "$v" = none ]; then key=NULL; else key="'k' || (g / 20 % 100)"; fi
    t0=$(now_ms)
    q "$(conn "$d")" "SELECT count(pgpace.enqueue('c' || (1 + g % 20), '{\"n\": 1}', order_key => $key))
                        FROM generate_series(0, $((ENQ - 1))) g" >/dev/null
    t1=$(now_ms)
    q "$admin" "DROP DATABASE $d WITH (FORCE)"
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", (b - a) / 1000 }'
}
for v in none keys; do
    declare -a es=()
    for r in $(seq 1 "$RUNS"); do
        es+=("$(enqueue_fn bench_enq "$v")")
        log "(a) enqueue $v run $r: ${es[-1]} s for $ENQ items through pgpace.enqueue"
    done
    record enqueue "$v" enqueue_fn_s s "${es[@]}"
    unset es
done

claim_sql=sql/queries/run_claim.sql
finalize_sql=sql/queries/run_finalize.sql
for v in none keys gate; do
    declare -a p1=() p10=() enq=()
    for r in $(seq 1 "$RUNS"); do
        d=bench_ok
        enq+=("$(setup_claim "$d" "$v")")
        parked=$(q "$(conn "$d")" "SELECT count(*) FROM pgpace.queue WHERE next_action_at IS NULL")
        for lim in 1 10; do
            "$cb" round "$(conn "$d")" "$claim_sql" "$finalize_sql" --mode spaced \
                --customers 1-$ENDPOINTS --rounds "$ROUNDS" --limit "$lim" >"$work/r.txt"
            items=$(awk '{ print $6 }' "$work/r.txt" | median)
            ms=$(awk '{ print $4 }' "$work/r.txt" | median)
            if [ "$lim" = 1 ]; then p1+=("$ms"); else p10+=("$ms"); fi
            log "(a) $v run $r: limit $lim: round p50 $ms ms, $items items a round; $parked parked"
        done
        if [ "$r" = 1 ]; then
            explain_round "$d" "$v" >"$out/order_keys_explain_$v.txt"
        fi
        q "$admin" "DROP DATABASE $d WITH (FORCE)"
    done
    record claim "$v" round_ms_limit1 ms "${p1[@]}"
    record claim "$v" round_ms_limit10 ms "${p10[@]}"
    record claim "$v" enqueue_s s "${enq[@]}"
    unset p1 p10 enq
done

# ---- (b) one hot key ----------------------------------------------------------------------------
start_receiver() {
    local err=$work/recv.err
    rport=$((port + 1 + RANDOM % 1000))
    "$receiver" --port "$rport" >"$work/recv.log" 2>"$err" &
    rpid=$!
    pids+=("$rpid")
    for _ in $(seq 1 50); do grep -q listening "$err" 2>/dev/null && return 0; sleep 0.1; done
    echo "order_keys.sh: the receiver did not start" >&2; cat "$err" >&2; exit 1
}
hot_run() { # VARIANT RUN
    local v=$1 d=bench_hot key deadline t0 t1 n
    newdb "$d"
    start_receiver
    q "$(conn "$d")" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets, max_in_flight)
                      VALUES ('hot', 'unlimited', 60, 'http://127.0.0.1:$rport/c/hot', $secret, 100)"
    if [ "$v" = none ]; then key=NULL; else key="'order-1'"; fi
    q "$(conn "$d")" "SELECT count(pgpace.enqueue('hot', jsonb_build_object('seq', g), order_key => $key))
                        FROM generate_series(1, $HOT) g" >/dev/null
    if [ "$v" = gate ]; then
        q "$(conn "$d")" "UPDATE pgpace.queue q SET next_action_at = i.run_at FROM pgpace.item i
                           WHERE i.id = q.item_id AND q.next_action_at IS NULL"
    fi
    q "$(conn "$d")" "VACUUM ANALYZE pgpace.queue"
    cat >"$work/hot.ini" <<INI
[database]
conninfo = $(conn "$d")
[dispatcher]
instance_name = bench-hot
[delivery]
allow_cidrs = 127.0.0.0/8
[http]
listen = 127.0.0.1:0
[log]
level = warn
INI
    "$pgpace" --config "$work/hot.ini" run 2>"$work/hot.log" &
    dpid=$!
    pids+=("$dpid")
    deadline=$((SECONDS + 900))
    until [ "$(wc -l <"$work/recv.log")" -ge "$HOT" ]; do
        [ $SECONDS -lt $deadline ] || { echo "order_keys.sh: hot key not drained in 900 s" >&2; exit 1; }
        sleep 0.2
    done
    kill -TERM "$dpid"; wait "$dpid" || true
    kill -TERM "$rpid"; wait "$rpid" || true
    # Receiver lines: "arrival_ms path id body_len [status]" in arrival order.
    t0=$(head -1 "$work/recv.log" | cut -d' ' -f1)
    t1=$(sed -n "${HOT}p" "$work/recv.log" | cut -d' ' -f1)
    n=$HOT
    echo "$v $(awk -v n="$n" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", (n - 1) * 1000 / (b - a) }') \
$(awk 'NR > 1 { print $1 - p } { p = $1 }' "$work/recv.log" | median) \
$(q "$(conn "$d")" "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms) FROM pgpace.delivery_attempt")"
    q "$admin" "DROP DATABASE $d WITH (FORCE)"
}
for v in keys gate none; do
    declare -a rate=() gap=() dur=()
    for r in $(seq 1 "$RUNS"); do
        # (Command substitution waits for hot_run to end, its database dropped, before the next
        # run makes it again.)
        line=$(hot_run "$v" "$r")
        read -r _ rt gp du <<<"$line"
        log "(b) $v run $r: $rt deliveries/s, median gap $gp ms, median request $du ms"
        rate+=("$rt"); gap+=("$gp"); dur+=("$du")
    done
    record hot "$v" deliveries_per_s "/s" "${rate[@]}"
    record hot "$v" gap_ms ms "${gap[@]}"
    record hot "$v" request_ms ms "${dur[@]}"
    unset rate gap dur
done

# ---- report ---------------------------------------------------------------------------------------
ratio() { awk -v a="$(get claim "$1" "$3")" -v b="$(get claim "$2" "$3")" 'BEGIN { if (b > 0) printf "%.2f", a / b; else printf "n/a" }'; }
{
    echo "# Ordered delivery: what order keys cost"
    echo
    echo "Generated by \`bench/order_keys.sh\` on $(date -u +%Y-%m-%d): $(nproc) cores"
    echo "($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), PostgreSQL"
    echo "$(q "$admin" 'SHOW server_version') (shared_buffers $(q "$admin" 'SHOW shared_buffers'), fsync on), $RUNS runs of each"
    echo "variant: medians, with the runs' range in parentheses. Raw values: \`$csv\`."
    echo
    echo "## (a) Claim cost: 100,000 keys over 1,000 endpoints"
    echo
    echo "$ENDPOINTS spaced endpoints, $ITEMS items ($((ITEMS / ENDPOINTS)) per endpoint), half of each endpoint's first"
    echo "items in flight. A round is \`sql/queries/run_claim.sql\` over every endpoint (the dispatcher's"
    echo "statement and parameters, bench/claimbench.c), its median over $ROUNDS rounds; each round is"
    echo "released untimed, so every round sees the same queue."
    echo
    echo "| variant | round, 1 item an endpoint (ms) | round, 10 items an endpoint (ms) | INSERT ... SELECT of the $ITEMS items (s) |"
    echo "|---|---|---|---|"
    echo "| no keys | $(cell claim none round_ms_limit1) | $(cell claim none round_ms_limit10) | $(cell claim none enqueue_s) |"
    echo "| 100,000 keys ($KEYS an endpoint, $PER_KEY items a key) | $(cell claim keys round_ms_limit1) | $(cell claim keys round_ms_limit10) | $(cell claim keys enqueue_s) |"
    echo "| the same keys, gate alone (nothing parked) | $(cell claim gate round_ms_limit1) | $(cell claim gate round_ms_limit10) | - |"
    echo
    echo "Enqueue through \`pgpace.enqueue\` (what producers call), $ENQ items over 20 customers in one"
    echo "statement: $(cell enqueue none enqueue_fn_s) s without keys, $(cell enqueue keys enqueue_fn_s) s with 100 keys a customer"
    echo "(parking: a probe as each item is inserted, and a check at COMMIT for each parked one)."
    echo
    echo "Keys against none: $(ratio keys none round_ms_limit1)x (1 item), $(ratio keys none round_ms_limit10)x (10 items); the"
    echo "target was at most 1.3x. The gate alone: $(ratio gate none round_ms_limit1)x and $(ratio gate none round_ms_limit10)x. The plan of"
    echo "a round of each variant is in \`$out/order_keys_explain_{none,keys,gate}.txt\`."
    echo
    echo "## (b) One hot key"
    echo
    echo "One unlimited endpoint (max_in_flight 100) with $HOT queued items, \`pgpace-receiver\` answering"
    echo "200 at once over loopback; from the receiver's first request to its last."
    echo
    echo "| variant | deliveries/s | median gap between requests (ms) | median request (ms, attempt log) |"
    echo "|---|---|---|---|"
    echo "| one key | $(cell hot keys deliveries_per_s) | $(cell hot keys gap_ms) | $(cell hot keys request_ms) |"
    echo "| one key, gate alone (nothing parked) | $(cell hot gate deliveries_per_s) | $(cell hot gate gap_ms) | $(cell hot gate request_ms) |"
    echo "| no key (100 in flight) | $(cell hot none deliveries_per_s) | $(cell hot none gap_ms) | $(cell hot none request_ms) |"
    cat <<'TXT'

## Reading the figures

- A claimed item with an order key costs two index probes more than one without (the gate: no
  never-claimed item of its key below it in `queue_order`, no claimed item of its key in
  `queue_order_started`), and its claim, which moves it from the one index to the other, writes
  one index entry more. The EXPLAIN files show both: the index scans of `queue_claim` per
  endpoint with their two subplans, and the UPDATE of the claimed rows. The more items a round
  claims per endpoint, the more that share shows (the 10-item rounds). A first version kept
  every keyed row in `queue_order` and cost two more index entries per claim (1.56x and 2.1x).
- Parking is what keeps the cost independent of how deep a key is: with the gate alone, a
  claim reads past every item queued behind a head in flight (the 10-item rounds), and one hot
  key is claimed by walking its whole backlog each time.
- One key goes one request at a time: each waits for its predecessor's outcome to be written
  (a commit, fsync on) and for its own claim (another), so on loopback one key goes at a few
  hundred requests a second although a request takes well under a millisecond; over a network
  each request adds the receiver's round trip to that.
- Enqueue: each keyed item is checked as it is inserted (one probe), and each parked one again
  at COMMIT (its key's lock and two probes). The INSERT ... SELECT row is that cost alone (a
  plain insert is a few microseconds); through `pgpace.enqueue` it is a fraction of the call.
TXT
} >"$report"
log "wrote $report"
