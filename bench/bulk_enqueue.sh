#!/usr/bin/env bash
# bulk_enqueue.sh - measures `pgpace enqueue --file` on N items (default 100,000) over R runs
# (default 3) against a private PostgreSQL 15 with fsync on, and prints a Markdown table with
# the machine, settings and the median and min-max.
#
#   bash bench/bulk_enqueue.sh [ITEMS] [RUNS]
# Needs a build in ./build (the quickstart or `meson setup build && ninja -C build`).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
items=${1:-100000}
runs=${2:-3}
pgpace=$root/build/src/pgpace
[ -x "$pgpace" ] || { echo "bulk_enqueue.sh: build first (meson setup build && ninja -C build)" >&2; exit 1; }

work=$(mktemp -d /tmp/pgpace-bench.XXXXXX)
chmod 755 "$work"
trap 'bash tests/tools/pgcluster.sh stop "$work/pg" >/dev/null 2>&1; rm -rf "$work"' EXIT
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" $((20000 + RANDOM % 12000)))"
export PGHOST PGPORT PGUSER

# 100 customers, 10 carriers, every third item with an idempotency key.
awk -v n="$items" 'BEGIN { for (i = 1; i <= n; i++) {
    key = (i % 3 == 0) ? sprintf(",\"idempotency_key\":\"k%d\"", i) : "";
    printf("{\"customer\":\"c%d\",\"carrier\":\"carrier%d\",\"kind\":\"bench\",\"payload\":{\"n\":%d,\"text\":\"lorem ipsum dolor sit amet\"}%s}\n", i % 100, i % 10, i, key) } }' >"$work/items.jsonl"

times=()
for r in $(seq 1 "$runs"); do
    psql -q -X -d postgres -c "SET client_min_messages = warning" -c "DROP DATABASE IF EXISTS bench" -c "CREATE DATABASE bench" >/dev/null
    "$pgpace" --db dbname=bench migrate >/dev/null
    for c in $(seq 0 99); do echo "SELECT pgpace.customer_set('c$c', rate_per_minute => 60, webhook_url => 'http://127.0.0.1/');"; done |
        psql -q -X -d bench >/dev/null
    start=$(date +%s%N)
    "$pgpace" --db dbname=bench enqueue --file "$work/items.jsonl" >/dev/null
    end=$(date +%s%N)
    times+=("$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.3f", (b - a) / 1e9 }')")
done
sorted=$(printf '%s\n' "${times[@]}" | sort -g)
median=$(echo "$sorted" | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
min=$(echo "$sorted" | head -1)
max=$(echo "$sorted" | tail -1)

echo "| machine | cores | PostgreSQL | fsync | items | runs | median s | min-max s | items/s (median) |"
echo "|---|---|---|---|---|---|---|---|---|"
printf '| %s | %s | %s | %s | %d | %d | %.2f | %.2f-%.2f | %.0f |\n' \
    "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)" "$(nproc)" \
    "$(psql -X -At -d postgres -c 'SHOW server_version')" "$(psql -X -At -d postgres -c 'SHOW fsync')" \
    "$items" "$runs" "$median" "$min" "$max" "$(awk -v n="$items" -v m="$median" 'BEGIN { print n / m }')"
