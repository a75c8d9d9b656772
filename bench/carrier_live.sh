#!/usr/bin/env bash
# carrier_live.sh - a live carrier's latency while another carrier of the same customer replays
# a backlog (issue 34), medians of --runs runs with min-max, conditions alternating run by run.
#
# One unlimited customer `shop` on one receiver host (pgpace-receiver over loopback). A producer
# enqueues a `live` item every --every-ms milliseconds, each `pgpace.enqueue` its own
# transaction; its latency is from the item's created_at (its transaction's start) to the
# receiver's arrival time. Conditions, with the same live producer for the same time:
# - alone:    nothing else queued (the baseline: the live carrier's own latency);
# - replay:   --items items of carrier `replay` enqueued in one `pgpace enqueue --file` just
#             before, in the default configuration (claim-ahead on);
# - noahead:  the same with `claim_ahead = 0` (claims only for free connections), for
#             comparison (not run unless listed in --conditions: it drains the replay at about
#             a tenth of the speed).
# - before:   the replay with BASELINE_BUILD's dispatcher (DIR/src/pgpace, an earlier commit;
#             added to the conditions when BASELINE_BUILD is set).
# A run lasts until the replay has drained (at most --max-s seconds). Reported: the live items'
# p50 and p99 latency, how many there were, the replay's deliveries/s.
#
#   bash bench/carrier_live.sh [--runs N] [--items N] [--every-ms MS] [--max-s S]
#                              [--delay-ms MS] [--conditions LIST]
#
# --delay-ms: the receiver answers every request MS milliseconds late (default 0: at once).
#
# Needs a build (BUILD, default ./build: src/pgpace and pgpace-receiver). Prints Markdown and
# writes each run's figures to bench/results/carrier_live.csv (carrier_live_delayMSms.csv with
# --delay-ms). Everything it starts is stopped
# on exit.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
runs=3 items=100000 every_ms=20 max_s=120 delay_ms=0 conditions="alone replay"
while [ $# -gt 0 ]; do
    case "$1" in
    --runs) runs=${2:?}; shift ;;
    --items) items=${2:?}; shift ;;
    --every-ms) every_ms=${2:?}; shift ;;
    --max-s) max_s=${2:?}; shift ;;
    --delay-ms) delay_ms=${2:?}; shift ;;
    --conditions) conditions=${2:?}; shift ;;
    -h | --help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "carrier_live.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
pgpace=$BUILD/src/pgpace receiver=$BUILD/pgpace-receiver
if [ -n "${BASELINE_BUILD:-}" ]; then
    [ -x "$BASELINE_BUILD/src/pgpace" ] || { echo "carrier_live.sh: BASELINE_BUILD has no src/pgpace" >&2; exit 1; }
    [[ " $conditions " == *" before "* ]] || conditions="$conditions before"
fi
for b in "$pgpace" "$receiver"; do
    [ -x "$b" ] || { echo "carrier_live.sh: no $b (meson setup build && ninja -C build)" >&2; exit 1; }
done

# shellcheck source=bench/common.sh
. bench/common.sh
bench_private_cluster carrier-live
rport=$((port + 1))
started=$(date -u '+%Y-%m-%d %H:%M UTC')
load0=$(cut -d' ' -f1-3 /proc/loadavg)
csv=bench/results/carrier_live.csv
[ "$delay_ms" = 0 ] || csv=bench/results/carrier_live_delay${delay_ms}ms.csv
mkdir -p bench/results
echo "condition,run,live_items,p50_ms,p99_ms,replay_per_s" >"$csv"
q() { PGOPTIONS="-c client_min_messages=warning" psql -X -q -At "$@"; }

rules=()
[ "$delay_ms" = 0 ] || rules=(--rule "/:200:delay=$delay_ms")
"$receiver" --port "$rport" --micros "${rules[@]}" >"$work/recv.log" 2>"$work/recv.err" &
pids+=($!)
for _ in $(seq 1 50); do grep -q listening "$work/recv.err" 2>/dev/null && break; sleep 0.1; done

awk -v n="$items" 'BEGIN { for (i = 1; i <= n; i++)
    printf("{\"customer\":\"shop\",\"carrier\":\"replay\",\"payload\":{\"n\":%d,\"text\":\"lorem ipsum dolor sit amet\"}}\n", i) }' \
    >"$work/replay.jsonl"


pause=$(awk -v ms="$every_ms" 'BEGIN { printf "%.3f", ms / 1000 }')
declare -A p50 p99 nlive rate
for r in $(seq 1 "$runs"); do
    for c in $conditions; do
        db=live_$c
        q -d postgres -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
        bin=$pgpace
        if [ "$c" = before ]; then
            [ -n "${BASELINE_BUILD:-}" ] || { echo "carrier_live.sh: before needs BASELINE_BUILD" >&2; exit 2; }
            bin=$BASELINE_BUILD/src/pgpace
        fi
        "$bin" --db "dbname=$db" migrate >/dev/null
        "$bin" --db "dbname=$db" customer set shop --mode unlimited --rate 1 --url "http://127.0.0.1:$rport/shop" >/dev/null
        extra=""
        [ "$c" = noahead ] && extra="claim_ahead = 0"
        printf '[database]\nconninfo = dbname=%s\n[dispatcher]\ninstance_name = live-%s\n%s\n[delivery]\nallow_cidrs = 127.0.0.0/8\n[log]\nlevel = warn\n' \
            "$db" "$c" "$extra" >"$work/$db.ini"
        "$bin" --config "$work/$db.ini" run 2>"$work/$db.log" &
        dpid=$!
        pids+=("$dpid")
        for _ in $(seq 1 100); do
            [ "$(q -d "$db" -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())")" != 0 ] && break
            sleep 0.1
        done
        before=$(wc -l <"$work/recv.log")
        t0=$(date +%s%N)
        [ "$c" = alone ] || "$bin" --db "dbname=$db" enqueue --file "$work/replay.jsonl" >/dev/null
        # The live producer, for as long as the replay takes (alone: 10 s): one statement at a
        # time, paced here (psql runs each as it arrives).
        (
            deadline=$(($(date +%s) + max_s))
            while :; do
                for _ in $(seq 1 50); do
                    echo "SELECT pgpace.enqueue('shop', '{\"live\":1}', carrier => 'live');"
                    sleep "$pause"
                done
                if [ "$c" = alone ]; then
                    [ $(($(date +%s%N) - t0)) -lt 10000000000 ] || break
                else
                    left=$(q -d "$db" -c "SELECT count(*) FROM pgpace.queue WHERE carrier = 'replay'")
                    [ "$left" -gt 0 ] && [ "$(date +%s)" -lt "$deadline" ] || break
                fi
            done
        ) | psql -X -q -d "$db" >/dev/null
        # Every live item arrived (a deadline, not a sleep).
        nl=$(q -d "$db" -c "SELECT count(*) FROM pgpace.item WHERE carrier = 'live'")
        for _ in $(seq 1 300); do
            [ "$(q -d "$db" -c "SELECT count(*) FROM pgpace.queue WHERE carrier = 'live'")" = 0 ] && break
            sleep 0.1
        done
        kill "$dpid" 2>/dev/null || true
        wait "$dpid" 2>/dev/null || true
        q -d "$db" -c "SELECT 'msg_' || id, (extract(epoch FROM created_at) * 1000000)::bigint FROM pgpace.item WHERE carrier = 'live'" |
            tr '|' ' ' >"$work/created.txt"
        tail -n +$((before + 1)) "$work/recv.log" >"$work/run.log"
        awk 'NR == FNR { c[$1] = $2; next } ($3 in c) && !seen[$3]++ { print ($1 - c[$3]) / 1000 }' \
            "$work/created.txt" "$work/run.log" >"$work/lat.txt"
        n=$(wc -l <"$work/lat.txt")
        [ "$n" = "$nl" ] || echo "carrier_live.sh: $c run $r: $n of $nl live items arrived" >&2
        a=$(pct 50 <"$work/lat.txt") b=$(pct 99 <"$work/lat.txt")
        rp=""
        if [ "$c" != alone ]; then
            # The replay's deliveries/s: from its first arrival to its last.
            rp=$(awk 'NR == FNR { c[$1] = 1; next } !($3 in c) { if (!n++) a = $1; b = $1 }
                      END { if (n > 1 && b > a) printf "%.0f", (n - 1) / ((b - a) / 1e6) }' "$work/created.txt" "$work/run.log")
            rate[$c]+="$rp "
        fi
        p50[$c]+="$a " p99[$c]+="$b " nlive[$c]+="$n "
        echo "$c,$r,$n,$a,$b,$rp" >>"$csv"
        echo "[$(date +%H:%M:%S)] $c run $r: $n live items, p50 $a ms, p99 $b ms${rp:+, replay $rp/s}" >&2
        q -d postgres -c "DROP DATABASE $db WITH (FORCE)"
    done
done

echo "Started $started; $(nproc) cores, $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo); load average $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end."
echo "$items replay items; a live item every $every_ms ms; the receiver answers after $delay_ms ms; medians of $runs runs (min-max)."
echo
echo "| condition | live items | live p50 ms | live p99 ms | replay deliveries/s |"
echo "|---|---|---|---|---|"
for c in $conditions; do
    # shellcheck disable=SC2086
    echo "| $c | $(summary ${nlive[$c]}) | $(summary ${p50[$c]}) | $(summary ${p99[$c]}) | $([ -n "${rate[$c]:-}" ] && summary ${rate[$c]} || echo -) |"
done
