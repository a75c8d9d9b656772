#!/usr/bin/env bash
# quickstart.sh - the README's first command. Installs what it needs (Debian 12, as root),
# builds, starts a private PostgreSQL and a local webhook receiver, creates customers in all
# three modes (one at a fractional rate) and a noisy carrier with a large backlog, runs the
# dispatcher, and shows every second, per customer: configured rate, observed rate, the last
# gaps between webhooks, queue depth and in-flight items. Ctrl-C (or the time limit) prints a
# summary and stops everything it started.
#
#   bash src/demo/quickstart.sh [SECONDS]     default 60; PGPACE_DEMO_SECONDS works too
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
seconds=${1:-${PGPACE_DEMO_SECONDS:-60}}

build=${PGPACE_BUILD_DIR:-build}
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
    echo "== installing packages (Debian)"
    bash tests/tools/install-deps.sh
fi
echo "== building ($build)"
[ -d "$build" ] || meson setup "$build" >/dev/null
ninja -C "$build" >/dev/null
pgpace=$root/$build/src/pgpace
receiver=$root/$build/pgpace-receiver

work=$(mktemp -d /tmp/pgpace-quickstart.XXXXXX)
chmod 755 "$work"
pids=()
cleanup() {
    trap - EXIT INT TERM
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    bash tests/tools/pgcluster.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
    echo "== stopped the dispatcher, the receiver and PostgreSQL; removed $work"
}
trap cleanup EXIT
stop_requested=0
trap 'stop_requested=1' INT TERM

# Below the kernel's ephemeral range (32768+), where an outgoing connection may hold a port.
port=$((20000 + RANDOM % 12000))
echo "== starting a private PostgreSQL 15 on port $port"
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "$port")"
export PGHOST PGPORT PGUSER PGDATABASE=postgres

rport=$((port + 1))
echo "== starting the webhook receiver on 127.0.0.1:$rport"
"$receiver" --port "$rport" >"$work/received.log" 2>"$work/receiver.err" &
pids+=($!)
for _ in $(seq 1 50); do grep -q listening "$work/receiver.err" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$work/receiver.err" || { echo "the receiver did not start:"; cat "$work/receiver.err"; exit 1; }

"$pgpace" migrate >/dev/null
hook=http://127.0.0.1:$rport/c
echo "== customers: two spaced, two batch (one at 0.5/min), one unlimited with a noisy carrier"
"$pgpace" customer set alpha   --mode spaced    --rate 60   --url $hook/alpha >/dev/null
"$pgpace" customer set bravo   --mode spaced    --rate 600  --burst 5 --url $hook/bravo >/dev/null
"$pgpace" customer set charlie --mode batch     --rate 12   --url $hook/charlie >/dev/null
"$pgpace" customer set delta   --mode batch     --rate 0.5  --url $hook/delta >/dev/null
"$pgpace" customer set echo    --mode unlimited --rate 1    --max-in-flight 50 --url $hook/echo >/dev/null
"$pgpace" carrier set noisy --max-per-round 10 --max-in-flight 20 >/dev/null
{
    for i in $(seq 1 20000); do
        printf '{"customer":"echo","carrier":"noisy","kind":"replay","payload":{"n":%d}}\n' "$i"
    done
    for i in $(seq 1 200); do
        printf '{"customer":"echo","carrier":"quiet","payload":{"n":%d}}\n' "$i"
    done
    for c in alpha bravo charlie delta; do
        for i in $(seq 1 1000); do
            printf '{"customer":"%s","payload":{"n":%d},"idempotency_key":"%s-%d"}\n' "$c" "$i" "$c" "$i"
        done
    done
} >"$work/items.jsonl"
"$pgpace" enqueue --file "$work/items.jsonl"

# A short batch tick so batches are visible in a one-minute demo (default 60000).
tick_ms=5000
cat >"$work/pgpace.ini" <<INI
[database]
conninfo = host=$PGHOST port=$PGPORT user=$PGUSER dbname=postgres
[dispatcher]
instance_name = quickstart
batch_tick_ms = $tick_ms
[delivery]
; the demo's receiver is on loopback, which SSRF protection refuses unless allowed
allow_cidrs = 127.0.0.0/8
[http]
; the live status page, metrics and health of the demo's dispatcher (port 0: any free port,
; printed below from the dispatcher's log)
listen = 127.0.0.1:0
[log]
level = info
INI
echo "== starting the dispatcher (log: $work/pgpace.log)"
"$pgpace" --config "$work/pgpace.ini" run 2>"$work/pgpace.log" &
dispatcher_pid=$!
pids=("$dispatcher_pid" "${pids[@]}")

# The admin listener's port, from the dispatcher's admin_http_listening log line.
page=""
for _ in $(seq 1 100); do
    admin_port=$(sed -n 's/.*event=admin_http_listening.* port=\([0-9]*\).*/\1/p' "$work/pgpace.log" | head -1)
    [ -n "$admin_port" ] && { page="http://127.0.0.1:$admin_port/"; break; }
    kill -0 "$dispatcher_pid" 2>/dev/null || break
    sleep 0.1
done
echo "== status page: ${page:-(not found in the log)}  (live per-customer view; open it in a browser)"

# Per customer from the receiver's log ("<unix_ms> <path> <webhook-id> <bytes>"): deliveries,
# observed rate over the last 10 s (over the time since the first webhook while that is
# shorter, so that a customer on pace never reads low in the first seconds), webhooks of the
# last complete batch tick (ticks are aligned to multiples of batch_tick_ms, as the
# dispatcher's), and the last 3 gaps.
view() {
    local now_ms=$1
    awk -v now="$now_ms" -v tick="$tick_ms" '
        BEGIN { tick_end = int(now / tick) * tick; tick_start = tick_end - tick }
        { if (first == "" || $1 < first) first = $1
          split($2, p, "/"); c = p[3]; n[c]++; if (last[c]) { g3[c] = g2[c]; g2[c] = g1[c]; g1[c] = $1 - last[c] }
          last[c] = $1; if ($1 > now - 10000) recent[c]++
          if ($1 >= tick_start && $1 < tick_end) in_tick[c]++ }
        END { w = now - first; if (w > 10000) w = 10000; if (w < 1000) w = 1000
              for (c in n) printf "%s %d %.1f %d %s %s %s\n", c, n[c], recent[c] * 60000 / w, in_tick[c], g3[c], g2[c], g1[c] }' \
        "$work/received.log" | sort >"$work/view"
    psql -X -At -F' ' -c "SELECT customer, mode, rate_per_minute, due, in_flight, delayed, breaker || CASE WHEN paused THEN '/paused' ELSE '' END FROM pgpace.customer_stats ORDER BY customer" >"$work/stats"
    printf '%-8s %-9s %9s %-16s %9s %-22s %7s %9s %s\n' customer mode "rate" "observed" delivered "last gaps (ms)" queued in_flight breaker
    while read -r name mode rate due inflight delayed breaker; do
        read -r _ delivered observed in_tick g3 g2 g1 < <(grep "^$name " "$work/view" || echo "$name 0 0.0 0 - - -")
        # A batch customer's rate is an allowance per tick: per minute, a 5 s tick's 12 read as
        # 144/min, a violated limit. Shown as the last complete tick against the allowance.
        if [ "$mode" = batch ]; then
            shown_rate="$rate/tick"
            # The most one tick may carry: the rate rounded up (only a fraction carries over).
            observed="$in_tick of $(awk -v r="$rate" 'BEGIN { c = int(r); if (c < r) c++; print c }')/tick"
        elif [ "$mode" = unlimited ]; then
            shown_rate="-" # a work queue: no rate applies
            observed="$observed/min"
        else
            shown_rate="$rate/min"
            observed="$observed/min"
        fi
        printf '%-8s %-9s %9s %-16s %9s %-22s %7s %9s %s\n' "$name" "$mode" "$shown_rate" "$observed" "$delivered" \
            "${g3:--} ${g2:--} ${g1:--}" "$((due + delayed))" "$inflight" "$breaker"
    done <"$work/stats"
}

start=$(date +%s)
while [ "$stop_requested" = 0 ] && [ $(($(date +%s) - start)) -lt "$seconds" ]; do
    kill -0 "$dispatcher_pid" 2>/dev/null || { echo "the dispatcher exited; its log:"; cat "$work/pgpace.log"; exit 1; }
    out=$(view "$(date +%s%3N)")
    [ -t 1 ] && printf '\033[H\033[2J'
    echo "pgpace quickstart: $(($(date +%s) - start))s of ${seconds}s (Ctrl-C stops); observed = webhooks/min over the last 10 s, or since the first webhook (batch: in the last 5 s tick)"
    echo "status page: ${page:-none} (from this machine; elsewhere: ssh -L ${admin_port:-PORT}:127.0.0.1:${admin_port:-PORT} HOST)"
    echo "$out"
    echo
    echo "spaced: one webhook every 60/rate s (bravo may burst 5); batch: up to rate per 5 s tick (delta: one every 2nd tick);"
    echo "echo: unlimited, but its 'noisy' carrier is capped at 10 per round and 20 in flight, so 'quiet' items still flow."
    sleep 1
done

echo
echo "== summary after $(($(date +%s) - start)) s"
view "$(date +%s%3N)"
echo
echo "== stopping the dispatcher (SIGTERM: drains in-flight deliveries, releases the rest)"
kill -TERM "$dispatcher_pid"
wait "$dispatcher_pid" && echo "dispatcher exited 0"
pids=("${pids[@]:1}")
grep -E 'event=(leader_elected|stopped)' "$work/pgpace.log" || true
