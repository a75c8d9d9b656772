#!/usr/bin/env bash
# tenants_startup.sh - the leader's start-up at many idle customers, one build beside another
# (issue 34; bench/TENANTS_PROFILE.md section 11): bench/run's tenants idle data at --size shops
# (spaced 60/min, one item each, paused; 4 whales of 250,000 items; the probe paused and without
# items: no receiver is needed) and `pgpace run` with that workload's configuration (log level
# debug), builds alternating run by run (before, after, before, ...). Per run: seconds from exec
# to the customers_loaded line, CPU of the leader and of the backend that served the load up to
# then (/proc/PID/stat), RSS once the first backstop pass is done and 5 s more, and the load
# average. Bytes per idle customer: that RSS less the RSS of the same binary with no shops, over
# the customers.
#
#   bash bench/tenants_startup.sh [--size N] [--runs N] BEFORE_PGPACE AFTER_PGPACE
#
# Needs a PostgreSQL whose role may CREATE DATABASE, reached by the usual PG* variables (e.g.
# those tests/tools/pgcluster.sh prints), and two pgpace binaries (release builds: meson setup
# DIR . --buildtype=release -Db_ndebug=true). The schema is AFTER's (`migrate`). Creates and
# drops bench_startup and bench_startup0. Prints one line per run and a Markdown table.
set -euo pipefail
size=1000000 runs=3
while [ $# -gt 2 ]; do
    case "$1" in
    --size) size=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) echo "tenants_startup.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
[ $# -eq 2 ] || { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
bins=("$1" "$2") labels=(before after)
work=$(mktemp -d)
pid=""
cleanup() {
    [ -n "$pid" ] && kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
q() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
secret="ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']"
payload='{"type":"order.created","order":{"id":12345,"total":99.5,"currency":"EUR"}}'
rurl=http://127.0.0.1:9/c # never called: every customer is paused
port=$((20000 + RANDOM % 12000))

for db in bench_startup bench_startup0; do
    q postgres "DROP DATABASE IF EXISTS $db WITH (FORCE)"
    q postgres "CREATE DATABASE $db"
    "${bins[1]}" --db "dbname=$db" migrate >/dev/null
    q "$db" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets, paused)
             SELECT 'whale' || g, 'spaced', 600, '$rurl/w' || g, $secret, true FROM generate_series(1, 4) g ORDER BY g"
    q "$db" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets, paused)
             VALUES ('probe', 'spaced', 600, '$rurl/probe', $secret, true)"
done
d=bench_startup
echo "data: $size shops ..." >&2
q $d "WITH i AS (INSERT INTO pgpace.item (customer_id, payload)
                 SELECT c.id, '$payload' FROM generate_series(1, 250000) g, pgpace.customer c
                  WHERE c.name LIKE 'whale%' ORDER BY g, c.id RETURNING id, customer_id, run_at)
      INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
      SELECT id, customer_id, '', 0, run_at, 12 FROM i"
q $d "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets, paused)
      SELECT 'shop' || lpad(g::text, 7, '0'), 'spaced', 60, '$rurl/s' || g, $secret, true
        FROM generate_series(1, $size) g"
q $d "WITH i AS (INSERT INTO pgpace.item (customer_id, payload)
                 SELECT id, '$payload' FROM pgpace.customer WHERE name LIKE 'shop%' ORDER BY id
                 RETURNING id, customer_id, run_at)
      INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
      SELECT id, customer_id, '', 0, run_at, 12 FROM i"
for t in item queue customer; do q $d "VACUUM ANALYZE pgpace.$t"; done
customers=$(q $d "SELECT count(*) FROM pgpace.customer")

cpu_s() { awk '{ printf "%.2f", ($14 + $15) / 100 }' "/proc/$1/stat" 2>/dev/null; }
# run BIN DB WAIT_BACKSTOP -> "loaded_s leader_cpu_s backend_cpu_s rss_kb"
run() {
    local log=$work/run.log ini=$work/run.ini l t0 tl bpid lcpu bcpu
    cat >"$ini" <<INI
[database]
conninfo = dbname=$2
[dispatcher]
instance_name = bench-startup
max_in_flight = 10000
[delivery]
allow_cidrs = 127.0.0.0/8
max_host_connections = 4096
max_connections = 1000
[http]
listen = 127.0.0.1:$port
[log]
level = debug
INI
    : >"$log"
    t0=$(date +%s%3N)
    "$1" --config "$ini" run 2>>"$log" &
    pid=$!
    until grep -q 'event=customers_loaded ' "$log"; do
        kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
        sleep 0.05
    done
    lcpu=$(cpu_s "$pid")
    bpid=$(grep 'event=db_connected' "$log" | grep -v 'channels=0' | head -1 | sed 's/.*backend_pid=\([0-9]*\).*/\1/')
    bcpu=$(cpu_s "$bpid")
    l=$(grep -m1 'event=customers_loaded ' "$log")
    tl=$(date -d "$(echo "$l" | sed 's/^ts=\([^ ]*\) .*/\1/')" +%s%3N)
    if [ "$3" = 1 ]; then
        local end=$((SECONDS + 300))
        until grep -q 'event=backstop_pass ' "$log" || [ $SECONDS -ge $end ]; do sleep 0.5; done
        sleep 5
    fi
    local out
    out="$(awk -v a="$t0" -v b="$tl" 'BEGIN { printf "%.2f", (b - a) / 1000 }') $lcpu $bcpu $(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")"
    kill -TERM "$pid"; wait "$pid" 2>/dev/null || true
    pid=""
    echo "$out" # after it stopped: the next run takes its port
}

declare -A base vals
for i in 0 1; do base[$i]=$(run "${bins[$i]}" bench_startup0 1 | awk '{ print $4 }'); done
for r in $(seq 1 "$runs"); do
    for i in 0 1; do
        load0=$(cut -d' ' -f1 /proc/loadavg)
        read -r s lc bc rss < <(run "${bins[$i]}" $d 1)
        bpc=$(awk -v k="$rss" -v b="${base[$i]}" -v n="$customers" 'BEGIN { printf "%.0f", (k - b) * 1024 / n }')
        load1=$(cut -d' ' -f1 /proc/loadavg)
        echo "${labels[$i]} run $r: loaded ${s} s, leader CPU ${lc} s, backend CPU ${bc} s, RSS ${rss} kB, ${bpc} B/customer, load ${load0}-${load1}" >&2
        vals[$i,loaded]+=" $s" vals[$i,leader]+=" $lc" vals[$i,backend]+=" $bc"
        vals[$i,bytes]+=" $bpc" vals[$i,load]+=" $load0 $load1"
    done
done
# shellcheck source=bench/common.sh
. "$(dirname "${BASH_SOURCE[0]}")/common.sh" # summary: "median (min-max)"
echo "| at $customers customers | before | after |"
echo "|---|---|---|"
for m in loaded:"customers_loaded, s" leader:"leader CPU to then, s" backend:"its backend's CPU, s" bytes:"bytes per idle customer"; do
    echo "| ${m#*:} | $(summary ${vals[0,${m%%:*}]}) | $(summary ${vals[1,${m%%:*}]}) |"
done
echo "| load average during the runs | $(tr ' ' '\n' <<<"${vals[0,load]}" | grep . | sort -g | sed -n '1p;$p' | paste -sd-) | $(tr ' ' '\n' <<<"${vals[1,load]}" | grep . | sort -g | sed -n '1p;$p' | paste -sd-) |"
for db in bench_startup bench_startup0; do q postgres "DROP DATABASE $db WITH (FORCE)"; done
