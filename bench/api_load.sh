#!/usr/bin/env bash
# api_load.sh - issue 33's load figure: what the management API and open tenant pages cost the
# leader's pacing. On a private PostgreSQL 15 (fsync on); writes bench/API_LOAD.md,
# bench/results/api_load.csv (per load), bench/results/api_load_windows.csv (per window) and the
# profiles bench/results/api_load_{statements,explain}.txt.
#
#   bash bench/api_load.sh [--quick]      (--quick: the full delivery load alone, not the light
#                                          one; same windows; into bench/results-quick/)
#
# The delivery load is bench/run's pacing workload: 1,000 spaced customers at integer rates
# 60..600/min (5,492 deliveries/s together), each with a backlog, all on one loopback
# `pgpace-receiver`, `max_host_connections = 1000` (as if each had its own host). One leader
# (`pgpace run`) runs for the whole benchmark, in two phases:
#   full   all 1,000 customers deliver (this 2-core machine's ceiling: the leader, PostgreSQL
#          and the receiver share it);
#   light  every tenth customer alone (100, 64..600/min, 553/s), the other 900 paused with
#          their items still queued: the same database, so the same API requests cost the
#          same, with headroom left (bench/run's 100-customer pacing column, which separates the
#          scheduler's accuracy from saturation). Not with --quick.
# In each phase, after a warm-up, windows of WIN_S seconds follow each other, RUNS of each load,
# alternating (none both, both none, none both):
#   none   nothing but the deliveries (the baseline);
#   both   the issue's load: API_RATE requests/s of the management API and PAGES open tenant
#          pages. API: a token with the read scope, API_CLIENTS clients at API_RATE/API_CLIENTS
#          requests/s each, every client cycling through ten requests: GET
#          /v1/customers?limit=100, five GET /v1/customers/NAME, GET
#          /v1/events?customer=NAME&limit=20 and its next page (cursor=next_cursor), GET
#          /v1/stats?customer=NAME, GET /v1/events?limit=20; NAME moves on every cycle. Pages:
#          each with its own customer's signed link (`pgpace portal-link --read-only`),
#          polling GET /v1/portal and GET /v1/portal/events?limit=50 every PAGE_S seconds
#          (what an open page does), phases spread over PAGE_S.
# Clients: bench's own python3 stdlib load generator, on this machine, keep-alive connections;
# a client's next request starts when due or, when its last answer came later, at once (no
# catching up, as curl --rate); a request not answered in TIMEOUT_S seconds counts as an error.
#
# Per window, from the receiver's log: |gap - 60/rate| between a customer's consecutive
# deliveries inside the window (p50, p99, p99.9), deliveries against the configured rates
# (delivered/configured); from /metrics before and after: the scheduled claim rounds' duration
# (pgpace_claim_duration_seconds{round="scheduled"}, quantiles interpolated in the buckets);
# from /proc: the leader's CPU, the CPU of its two PostgreSQL sessions (the claim connection
# and the API's own), the load generator's; the 1-minute load average; from the clients: answers
# per second, latency p50/p95, answers other than 2xx (timeouts included).
# After the full phase's windows, unmeasured: pg_stat_statements (track = all) over 30 s of the
# both load, and auto_explain's EXPLAIN (ANALYZE, BUFFERS) of the four slowest requests.
#
# Environment: BUILD (default ./build: src/pgpace, pgpace-receiver; use a release build),
# RUNS (3), WIN_S (60), WARM_S (30), API_RATE (50), API_CLIENTS (5), PAGES (20), PAGE_S (2),
# TIMEOUT_S (10), BENCH_PORT (the private PostgreSQL's port; the receiver takes the next one).
# Needs python3, curl, pg_stat_statements and auto_explain (postgresql-contrib). Every process
# it starts is stopped on exit, also on failure.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
BUILD=${BUILD:-$root/build}
PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
pgpace=$BUILD/src/pgpace
receiver=$BUILD/pgpace-receiver
[ -x "$pgpace" ] && [ -x "$receiver" ] ||
    { echo "api_load.sh: build first (meson setup build --buildtype=release -Db_ndebug=true && ninja -C build)" >&2; exit 1; }
for t in /usr/bin/python3 curl psql; do
    command -v "$t" >/dev/null || { echo "api_load.sh: $t is needed" >&2; exit 1; }
done

quick=0
case "${1:-}" in
--quick) quick=1 ;;
"") ;;
-h | --help) sed -n '2,50p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
*) echo "api_load.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
esac
RUNS=${RUNS:-3} WIN_S=${WIN_S:-60} WARM_S=${WARM_S:-30} API_RATE=${API_RATE:-50} API_CLIENTS=${API_CLIENTS:-5}
PAGES=${PAGES:-20} PAGE_S=${PAGE_S:-2} TIMEOUT_S=${TIMEOUT_S:-10}
CUSTOMERS=1000 RAMP_S=3 SETTLE_S=5 LOADS="none both"
if [ "$quick" = 1 ]; then
    PHASES="full" out=bench/results-quick report=bench/results-quick/API_LOAD.md
else
    PHASES="full light" out=bench/results report=bench/API_LOAD.md
fi
mkdir -p "$out"
csv=$out/api_load.csv
log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
started=$(date -u '+%Y-%m-%d %H:%M UTC') t_start=$SECONDS

work=$(mktemp -d /tmp/pgpace-apiload.XXXXXX)
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

# ---- the load generator ------------------------------------------------------------------------
# One line per request on --out: "end_unix_ms kind status latency_ms bytes" (status 0: timeout
# or connection error). Kinds: api_list, api_get, api_events, api_events_cursor, api_stats,
# api_events_all, page_portal, page_events.
cat >"$work/apiload.py" <<'PY'
import argparse, http.client, json, threading, time

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, required=True)
ap.add_argument("--token", default="")
ap.add_argument("--names", default="")
ap.add_argument("--api-rate", type=float, default=0)
ap.add_argument("--api-clients", type=int, default=5)
ap.add_argument("--pages", default="")  # file: one portal token a line
ap.add_argument("--page-interval", type=float, default=2)
ap.add_argument("--duration", type=float, required=True)
ap.add_argument("--timeout", type=float, default=10)
ap.add_argument("--out", required=True)
a = ap.parse_args()

lines = []
start = time.monotonic()
end = start + a.duration


class Client:
    def __init__(self, bearer):
        self.bearer = bearer
        self.conn = None

    def get(self, kind, path):
        t0 = time.monotonic()
        status, body = 0, b""
        try:
            if self.conn is None:
                self.conn = http.client.HTTPConnection("127.0.0.1", a.port, timeout=a.timeout)
            self.conn.request("GET", path, headers={"Authorization": "Bearer " + self.bearer})
            r = self.conn.getresponse()
            body = r.read()
            status = r.status
            if r.will_close:
                self.conn.close()
                self.conn = None
        except Exception:
            if self.conn is not None:
                self.conn.close()
            self.conn = None
        t1 = time.monotonic()
        lines.append("%d %s %d %.3f %d" % (time.time() * 1000, kind, status, (t1 - t0) * 1000, len(body)))
        return status, body


def paced(interval, offset, step):
    due = start + offset
    while True:
        now = time.monotonic()
        if due > now:
            time.sleep(due - now)
        if time.monotonic() >= end:
            return
        step()
        due += interval
        now = time.monotonic()
        if due < now:
            due = now


def api_client(i, names):
    c = Client(a.token)
    state = {"k": 0, "cycle": i, "cursor": None}

    def step():
        k = state["k"]
        name = names[state["cycle"] % len(names)]
        if k == 0:
            c.get("api_list", "/v1/customers?limit=100")
        elif k == 2:
            st, body = c.get("api_events", "/v1/events?customer=%s&limit=20" % name)
            state["cursor"] = None
            if st == 200:
                try:
                    state["cursor"] = json.loads(body).get("next_cursor")
                except ValueError:
                    pass
        elif k == 4:
            cur = state["cursor"]
            if cur:
                c.get("api_events_cursor", "/v1/events?customer=%s&limit=20&cursor=%s" % (name, cur))
            else:
                c.get("api_events", "/v1/events?customer=%s&limit=20" % name)
        elif k == 6:
            c.get("api_stats", "/v1/stats?customer=%s" % name)
        elif k == 8:
            c.get("api_events_all", "/v1/events?limit=20")
        else:
            c.get("api_get", "/v1/customers/%s" % name)
        state["k"] = (k + 1) % 10
        if state["k"] == 0:
            state["cycle"] += a.api_clients

    interval = a.api_clients / a.api_rate
    paced(interval, i * interval / a.api_clients, step)


def page(i, n, token):
    c = Client(token)

    def step():
        c.get("page_portal", "/v1/portal")
        c.get("page_events", "/v1/portal/events?limit=50")

    paced(a.page_interval, i * a.page_interval / n, step)


threads = []
if a.api_rate > 0:
    names = [x for x in a.names.split(",") if x]
    for i in range(a.api_clients):
        threads.append(threading.Thread(target=api_client, args=(i, names)))
if a.pages:
    with open(a.pages) as f:
        toks = [x.strip() for x in f if x.strip()]
    for i, t in enumerate(toks):
        threads.append(threading.Thread(target=page, args=(i, len(toks), t)))
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(a.out, "w") as f:
    f.write("\n".join(lines) + ("\n" if lines else ""))
PY

# ---- PostgreSQL ----------------------------------------------------------------------------------
port=${BENCH_PORT:-$((20000 + RANDOM % 12000))}
rport=$((port + 1))
log "starting a private PostgreSQL 15 on port $port (fsync on)"
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "$port")"
cat >>"$work/pg/data/postgresql.conf" <<CONF
shared_preload_libraries = 'pg_stat_statements'
pg_stat_statements.track = none
CONF
if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$PGBIN/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w -t 60 restart >/dev/null
else
    "$PGBIN/pg_ctl" -D "$work/pg/data" -l "$work/pg/server.log" -w -t 60 restart >/dev/null
fi
export PGHOST PGPORT PGUSER
export PGOPTIONS="-c client_min_messages=warning"
base="host=$PGHOST port=$PGPORT user=$PGUSER"
admin="$base dbname=postgres"
d="$base dbname=bench_api"
q() { psql -X -q -At -v ON_ERROR_STOP=1 -d "$1" -c "$2"; }
now_ms() { date +%s%3N; }
secret="ARRAY['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw']"
payload='{"type":"order.created","order":{"id":12345,"total":99.5,"currency":"EUR"}}'

# ---- helpers ---------------------------------------------------------------------------------------
echo "load,metric,unit,median,min,max,runs,values" >"$csv"
wcsv=$out/api_load_windows.csv
echo "phase,seq,load,rep,start_unix_ms,metric,value" >"$wcsv"
record() { # LOAD METRIC UNIT VALUE...
    local l=$1 m=$2 u=$3
    shift 3
    [ $# -gt 0 ] || return 0
    printf '%s\n' "$@" | sort -g | awk -v l="$l" -v m="$m" -v u="$u" '
        { v[NR] = $1; all = all (NR > 1 ? ";" : "") $1 }
        END { med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
              printf "%s,%s,%s,%.6g,%.6g,%.6g,%d,%s\n", l, m, u, med, v[1], v[NR], NR, all }' >>"$csv"
}
get() { # LOAD METRIC [FIELD]
    awk -F, -v l="$1" -v m="$2" -v f="${3:-median}" '
        BEGIN { col = (f == "median") ? 4 : (f == "min") ? 5 : 6 }
        $1 == l && $2 == m { print $col; exit }' "$csv"
}
fmt() { [ -n "$1" ] && awk -v v="$1" 'BEGIN { a = v < 0 ? -v : v; if (v == int(v) && a < 1e6) printf "%d", v; else if (a >= 100) printf "%.0f", v; else if (a >= 10) printf "%.1f", v; else if (a >= 1) printf "%.2f", v; else printf "%.3f", v }' || printf 'n/a'; }
cell() { # LOAD METRIC -> "median (min-max)"
    local m lo hi; m=$(get "$1" "$2")
    [ -n "$m" ] || { printf 'n/a'; return; }
    lo=$(get "$1" "$2" min) hi=$(get "$1" "$2" max)
    if [ "$lo" = "$hi" ]; then fmt "$m"; else printf '%s (%s-%s)' "$(fmt "$m")" "$(fmt "$lo")" "$(fmt "$hi")"; fi
}
# Nearest-rank percentile of numbers on stdin ("" when none).
pct() { sort -g | awk -v p="$1" '{ v[NR] = $1 } END { if (!NR) exit; i = int(p / 100 * NR + 0.999999); if (i < 1) i = 1; if (i > NR) i = NR; print v[i] }'; }
clk_tck=$(getconf CLK_TCK)
cpu_us() { # PID -> user + system CPU so far, us (all threads); nothing when it is gone
    awk -v hz="$clk_tck" '{ sub(/^.*\) /, ""); split($0, f, " "); printf "%.0f\n", (f[12] + f[13]) * 1e6 / hz }' \
        "/proc/$1/stat" 2>/dev/null || true
}
metrics_hist() { # -> the claim and spacing histograms of /metrics
    curl -s --max-time 10 "http://127.0.0.1:$http/metrics" |
        grep -E '^pgpace_(claim_duration_seconds|spacing_error_seconds)_(bucket|sum|count)' || true
}
# From two metrics_hist snapshots: "count sum_s q50 q95 q99" (seconds, interpolated within the
# buckets as Prometheus' histogram_quantile does) of one histogram's difference (bench/run's).
hist_diff() { # BEFORE AFTER PREFIX [LABEL FILTER]
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

# ---- data ------------------------------------------------------------------------------------------
# A backlog of BACKLOG_S seconds at each customer's rate (about 1.3 M items, bench/run's pacing
# has 1.2 M), topped up before every window by what the delivering customers sent since the last
# top-up, so the queue keeps its size whatever the run's length (pgpace.item grows, as it does
# in production until retention drops a day's partition). Ids in the order the customers' rates
# would have enqueued them (item g of a customer at g / rate): every customer's newest events
# among the table's newest rows, as traffic leaves them.
BACKLOG_S=240
enqueue_backlog() { # SECONDS [CUSTOMER FILTER (SQL on c)]
    q "$d" "WITH i AS (INSERT INTO pgpace.item (customer_id, payload)
                       SELECT c.id, '$payload'
                         FROM generate_series(1, ceil(600 * $1 / 60.0)::int) g
                         JOIN pgpace.customer c ON g <= ceil(c.rate_per_minute * $1 / 60.0) AND ${2:-true}
                        ORDER BY g::float8 / c.rate_per_minute, c.id
                       RETURNING id, customer_id, run_at)
            INSERT INTO pgpace.queue (item_id, customer_id, carrier, priority, next_action_at, max_attempts)
            SELECT id, customer_id, '', 0, run_at, 12 FROM i"
}
log "1,000 spaced customers, a backlog of $BACKLOG_S s each"
q "$admin" "CREATE DATABASE bench_api"
"$pgpace" --db "$d" migrate >/dev/null
q "$d" "INSERT INTO pgpace.customer (name, mode, rate_per_minute, webhook_url, signing_secrets)
        SELECT 'p' || g, 'spaced', 60 + (g - 1) * 540 / ($CUSTOMERS - 1), 'http://127.0.0.1:$rport/c/p' || g, $secret
          FROM generate_series(1, $CUSTOMERS) g"
# "name rate" of the customers delivering in each phase.
q "$d" "SELECT 'p' || g || ' ' || (60 + (g - 1) * 540 / ($CUSTOMERS - 1)) FROM generate_series(1, $CUSTOMERS) g" >"$work/rates_full.txt"
awk '{ n = substr($1, 2) + 0 } n % 10 == 0' "$work/rates_full.txt" >"$work/rates_light.txt"
configured() { awk '{ s += $2 } END { printf "%.0f", s / 60 }' "$work/rates_$1.txt"; }
t0=$(now_ms)
enqueue_backlog "$BACKLOG_S"
q "$d" "VACUUM ANALYZE pgpace.item"; q "$d" "VACUUM ANALYZE pgpace.queue"; q "$d" "VACUUM ANALYZE pgpace.customer"
q "$d" "CHECKPOINT"
items=$(q "$d" "SELECT count(*) FROM pgpace.queue")
log "$items items queued in $(( ($(now_ms) - t0) / 1000 )) s (vacuum and checkpoint included)"
last_topup=$SECONDS

# API token (read scope) and the pages' customers: every 50th (p50 .. p1000, 86..600/min; all
# of them deliver in both phases).
token=$("$pgpace" --db "$d" token create bench-api --scope read 2>/dev/null)
page_names=$(seq 50 $((CUSTOMERS / PAGES)) "$CUSTOMERS" | head -n "$PAGES" | sed 's/^/p/' | paste -sd' ')
# The API's NAMEs: 50 customers spread over the rates, in a shuffled order (fixed).
api_names=$(seq 7 20 "$CUSTOMERS" | awk '{ print ($1 * 37) % 1000 + 1 }' | sed 's/^/p/' | paste -sd,)

# ---- receiver and leader -----------------------------------------------------------------------------
"$receiver" --port "$rport" >"$work/recv.log" 2>"$work/recv.err" &
recv_pid=$!
pids+=("$recv_pid")
for _ in $(seq 1 50); do grep -q listening "$work/recv.err" 2>/dev/null && break; sleep 0.1; done
grep -q listening "$work/recv.err" || { echo "api_load.sh: the receiver did not start" >&2; cat "$work/recv.err" >&2; exit 1; }
cat >"$work/pgpace.ini" <<INI
[database]
conninfo = $d
[dispatcher]
instance_name = bench-load
[delivery]
allow_cidrs = 127.0.0.0/8
max_host_connections = 1000
max_connections = 1000
[http]
listen = 127.0.0.1:0
[log]
level = info
INI
"$pgpace" --config "$work/pgpace.ini" run 2>"$work/pgpace.log" &
disp=$!
pids+=("$disp")
http=""
for _ in $(seq 1 100); do
    http=$(sed -n '/event=http_listening /{s/.*port=\([0-9]*\).*/\1/p;q}' "$work/pgpace.log")
    [ -n "$http" ] && grep -q event=leader_elected "$work/pgpace.log" && break
    sleep 0.1
done
grep -q event=leader_elected "$work/pgpace.log" && [ -n "$http" ] ||
    { echo "api_load.sh: the dispatcher did not become leader" >&2; cat "$work/pgpace.log" >&2; exit 1; }
: >"$work/pages.txt"
for n in $page_names; do
    link=$("$pgpace" --db "$d" portal-link "$n" --ttl 2h --read-only --base-url "http://127.0.0.1:$http" 2>/dev/null)
    echo "${link#*#}" >>"$work/pages.txt"
done
# The leader's two sessions: the claim connection and the API's own (application_name
# pgpace:INSTANCE and pgpace-api:INSTANCE, earlier pgpace:INSTANCE-api).
claim_pg="" api_pg=""
for _ in $(seq 1 100); do
    claim_pg=$(q "$d" "SELECT pid FROM pg_stat_activity WHERE application_name ~ '^pgpace.*bench-load' AND application_name !~ 'api' ORDER BY backend_start LIMIT 1")
    api_pg=$(q "$d" "SELECT pid FROM pg_stat_activity WHERE application_name ~ '^pgpace.*bench-load' AND application_name ~ 'api' ORDER BY backend_start LIMIT 1")
    [ -z "$claim_pg" ] || [ -z "$api_pg" ] || break
    sleep 0.1
done
[ -n "$claim_pg" ] && [ -n "$api_pg" ] ||
    { echo "api_load.sh: the leader's sessions were not found" >&2; psql -X -d "$d" -c "SELECT pid, application_name, state FROM pg_stat_activity" >&2; exit 1; }
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git -C "$root" status --porcelain -- src sql 2>/dev/null | grep -c . || true)
build_type=$(meson introspect --buildoptions "$BUILD" 2>/dev/null | /usr/bin/python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o.get("buildtype", "?"), "b_ndebug=" + str(o.get("b_ndebug", "?")))' 2>/dev/null || echo unknown)
log "leader up (admin listener on $http, build $build_type)"

# ---- windows -------------------------------------------------------------------------------------------
loadgen() { # LOAD DURATION_S OUT -> pid in $lg (none: nothing)
    lg=""
    [ "$1" = both ] || return 0
    /usr/bin/python3 "$work/apiload.py" --port "$http" --token "$token" --names "$api_names" --api-rate "$API_RATE" \
        --api-clients "$API_CLIENTS" --pages "$work/pages.txt" --page-interval "$PAGE_S" --duration "$2" \
        --timeout "$TIMEOUT_S" --out "$3" 2>>"$work/loadgen.err" &
    lg=$!
    pids+=("$lg")
}
# Before every window (in the pause before it): what the phase's delivering customers sent since
# the last top-up, back into their queues.
topped=0
topup() { # PHASE
    local dt=$((SECONDS - last_topup)) filter=true
    [ "$1" = light ] && filter="substr(c.name, 2)::int % 10 = 0"
    enqueue_backlog "$dt" "$filter"
    last_topup=$SECONDS topped=$((topped + 1))
}
window() { # PHASE LOAD REP -> "metric value" lines in $work/win_PHASE_LOAD_REP.txt
    local ph=$1 l=$2 r=$3 f=$work/win_$1_$2_$3.txt lgout=$work/lg_$1_$2_$3.txt
    local o0 o1 t0 t1 c0 c1 cc0 cc1 ca0 ca1 g0 g1 la cl sp
    topup "$ph"
    sleep "$SETTLE_S"
    o0=$(stat -c %s "$work/recv.log")
    loadgen "$l" $((RAMP_S + WIN_S)) "$lgout"
    sleep "$RAMP_S"
    metrics_hist >"$work/h0.txt"
    t0=$(now_ms) c0=$(cpu_us "$disp") cc0=$(cpu_us "$claim_pg") ca0=$(cpu_us "$api_pg") g0=""
    [ -z "$lg" ] || g0=$(cpu_us "$lg")
    sleep "$WIN_S"
    t1=$(now_ms) c1=$(cpu_us "$disp") cc1=$(cpu_us "$claim_pg") ca1=$(cpu_us "$api_pg") g1=""
    [ -z "$lg" ] || g1=$(cpu_us "$lg")
    metrics_hist >"$work/h1.txt"
    la=$(cut -d' ' -f1 /proc/loadavg)
    # The clients stop at the window's end; their last answers (and what the API still has
    # queued) come before the next window.
    if [ -n "$lg" ]; then wait "$lg" || true; fi
    local end=$((SECONDS + 60))
    while [ "$(q "$d" "SELECT state FROM pg_stat_activity WHERE pid = $api_pg")" = active ] && [ $SECONDS -lt $end ]; do sleep 0.2; done
    sleep 2
    o1=$(stat -c %s "$work/recv.log")
    {
        echo "loadavg $la"
        awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "leader_cpu_pct %.1f\n", (b - a) / ((t1 - t0) * 10) }'
        awk -v a="$cc0" -v b="$cc1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "pg_claim_session_cpu_pct %.1f\n", (b - a) / ((t1 - t0) * 10) }'
        awk -v a="$ca0" -v b="$ca1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "pg_api_session_cpu_pct %.1f\n", (b - a) / ((t1 - t0) * 10) }'
        [ -z "$g0" ] || [ -z "$g1" ] || awk -v a="$g0" -v b="$g1" -v t0="$t0" -v t1="$t1" 'BEGIN { printf "loadgen_cpu_pct %.1f\n", (b - a) / ((t1 - t0) * 10) }'
        cl=$(hist_diff "$work/h0.txt" "$work/h1.txt" pgpace_claim_duration_seconds 'round="scheduled"')
        sp=$(hist_diff "$work/h0.txt" "$work/h1.txt" pgpace_spacing_error_seconds)
        echo "$cl" | awk -v t0="$t0" -v t1="$t1" '{ printf "claim_rounds_per_s %.2f\n", $1 * 1000 / (t1 - t0)
            if ($1) printf "claim_mean_ms %.3f\n", $2 / $1 * 1000
            if ($3 != "nan") printf "claim_p50_ms %.3f\nclaim_p99_ms %.3f\n", $3 * 1000, $5 * 1000 }'
        echo "$sp" | awk '$5 != "nan" { printf "spacing_error_p99_ms %.3f\n", $5 * 1000 }'
        # The receiver's lines of the window: gaps between a customer's consecutive deliveries
        # inside it, against 60000/rate ms; deliveries against the configured rates.
        head -c "$o1" "$work/recv.log" | tail -c +$((o0 + 1)) |
            awk -v t0="$t0" -v t1="$t1" -v gapf="$work/gaps.txt" '
                NR == FNR { per["/c/" $1] = 60000 / $2; rate += $2; next }
                $1 < t0 || $1 >= t1 || !($2 in per) { next }
                { n++; if ($2 in last) { e = $1 - last[$2] - per[$2]; print (e < 0 ? -e : e) > gapf } last[$2] = $1 }
                END { printf "deliveries_per_s %.1f\ndelivered_vs_configured %.4f\n", n * 1000 / (t1 - t0), n / (rate / 60 * (t1 - t0) / 1000) }' \
                "$work/rates_$ph.txt" -
        echo "gap_error_p50_ms $(pct 50 <"$work/gaps.txt")"
        echo "gap_error_p99_ms $(pct 99 <"$work/gaps.txt")"
        echo "gap_error_p999_ms $(pct 99.9 <"$work/gaps.txt")"
        if [ -s "$lgout" ]; then
            awk -v t0="$t0" -v t1="$t1" '$1 >= t0 && $1 < t1' "$lgout" >"$work/lgw.txt"
            local g
            for g in api page; do
                awk -v g="$g" 'index($2, g "_") == 1 && $3 > 0' "$work/lgw.txt" >"$work/lgg.txt"
                [ -s "$work/lgg.txt" ] || continue
                awk -v g="$g" -v t0="$t0" -v t1="$t1" 'END { printf "%s_answers_per_s %.2f\n", g, NR * 1000 / (t1 - t0) }' "$work/lgg.txt"
                echo "${g}_p50_ms $(awk '{ print $4 }' "$work/lgg.txt" | pct 50)"
                echo "${g}_p95_ms $(awk '{ print $4 }' "$work/lgg.txt" | pct 95)"
            done
            awk '$3 < 200 || $3 > 299 { n++ } $3 == 0 { t++ } END { printf "non_2xx %d\nerrors_no_answer %d\n", n, t }' "$work/lgw.txt"
            awk '{ print $2, $4 }' "$work/lgw.txt" >>"$work/kinds_$ph.txt"
            awk '$3 != 0 && ($3 < 200 || $3 > 299) { print $2, $3 }' "$work/lgw.txt" >>"$work/bad_status.txt"
        fi
    } >"$f"
    rm -f "$work/gaps.txt"
    seq_n=$((seq_n + 1))
    echo "$l $f" >>"$work/seq_$ph.txt"
    awk -v p="$ph" -v n="$seq_n" -v l="$l" -v r="$r" -v t="$t0" 'NF == 2 && $2 != "" { printf "%s,%d,%s,%d,%s,%s,%s\n", p, n, l, r, t, $1, $2 }' "$f" >>"$wcsv"
    log "$ph $l #$r: gap error p50 $(awk '$1 == "gap_error_p50_ms" { print $2 }' "$f") p99 $(awk '$1 == "gap_error_p99_ms" { print $2 }' "$f") ms, delivered $(awk '$1 == "delivered_vs_configured" { print $2 }' "$f"), claim p50 $(awk '$1 == "claim_p50_ms" { print $2 }' "$f") p99 $(awk '$1 == "claim_p99_ms" { print $2 }' "$f") ms, leader $(awk '$1 == "leader_cpu_pct" { print $2 }' "$f") %; API $(awk '$1 == "api_answers_per_s" { print $2 }' "$f")/s p95 $(awk '$1 == "api_p95_ms" { print $2 }' "$f") ms, pages $(awk '$1 == "page_answers_per_s" { print $2 }' "$f")/s, non-2xx $(awk '$1 == "non_2xx" { print $2 }' "$f"); load $la"
}

# ---- profile (after the full phase's windows, not measured) -------------------------------------------
profile() {
    log "profile: pg_stat_statements (track = all) over 30 s of the both load; auto_explain of the slowest requests"
    q "$d" "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"
    q "$d" "ALTER SYSTEM SET pg_stat_statements.track = 'all'"; q "$d" "SELECT pg_reload_conf()" >/dev/null
    sleep 1
    q "$d" "SELECT pg_stat_statements_reset()" >/dev/null
    pa0=$(cpu_us "$api_pg") pc0=$(cpu_us "$claim_pg") pt0=$(now_ms)
    loadgen both 30 "$work/lg_profile.txt"
    wait "$lg" || true
    pa1=$(cpu_us "$api_pg") pc1=$(cpu_us "$claim_pg") pt1=$(now_ms)
    {
        echo "pg_stat_statements (track = all: the statements inside pgpace.api_call too) over 30 s of the"
        echo "both load ($API_RATE API requests/s and $PAGES tenant pages every $PAGE_S s) beside the deliveries,"
        echo "after the measured windows ($(date -u +%Y-%m-%d)). Top 20 by total time; a function's time includes"
        echo "the statements it runs, so the nested rows overlap their callers."
        echo "The API session's CPU over those 30 s: $(awk -v a="$pa0" -v b="$pa1" -v t0="$pt0" -v t1="$pt1" 'BEGIN { printf "%.0f", (b - a) / ((t1 - t0) * 10) }') % of a core; the claim session's:"
        echo "$(awk -v a="$pc0" -v b="$pc1" -v t0="$pt0" -v t1="$pt1" 'BEGIN { printf "%.0f", (b - a) / ((t1 - t0) * 10) }') %. Requests answered: $(awk '$3 > 0' "$work/lg_profile.txt" | wc -l) of $(wc -l <"$work/lg_profile.txt")."
        echo
        psql -X -d "$d" -c "SELECT left(regexp_replace(regexp_replace(query, '--[^\n]*\n', '', 'g'), '\s+', ' ', 'g'), 90) AS statement,
                calls, round(mean_exec_time::numeric, 2) AS mean_ms, round(max_exec_time::numeric, 1) AS max_ms,
                round(total_exec_time::numeric) AS total_ms, rows
              FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
             ORDER BY total_exec_time DESC LIMIT 20"
    } >"$out/api_load_statements.txt"
    q "$d" "ALTER SYSTEM SET pg_stat_statements.track = 'none'"; q "$d" "SELECT pg_reload_conf()" >/dev/null
    first_page=$(head -1 "$work/pages.txt") first_page_name=${page_names%% *}
    # Each request kind alone (10 in a row, one client, no other API load; the deliveries go
    # on): its own cost, without the queue the load makes in front of the API's connection.
    local cursor k
    cursor=$(curl -s -H "Authorization: Bearer $token" "http://127.0.0.1:$http/v1/events?customer=p500&limit=20" |
        /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin).get("next_cursor") or "")')
    for k in "api_list|/v1/customers?limit=100|$token" "api_get|/v1/customers/p500|$token" \
        "api_events|/v1/events?customer=p500&limit=20|$token" \
        "api_events_cursor|/v1/events?customer=p500&limit=20&cursor=$cursor|$token" \
        "api_stats|/v1/stats?customer=p500|$token" "api_events_all|/v1/events?limit=20|$token" \
        "page_portal|/v1/portal|$first_page" "page_events|/v1/portal/events?limit=50|$first_page"; do
        IFS='|' read -r kk path bearer <<<"$k"
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            curl -s -o /dev/null -w '%{http_code} %{time_total}\n' --max-time 30 -H "Authorization: Bearer $bearer" "http://127.0.0.1:$http$path"
        done >"$work/alone.txt"
        record "full_kind_$kk" alone_p50_ms ms "$(awk '{ print $2 * 1000 }' "$work/alone.txt" | pct 50)"
        awk -v k="$kk" '$1 !~ /^2/ { print k, $1 }' "$work/alone.txt" >>"$work/bad_status.txt"
    done
    explain_call() { # TITLE SEGMENTS QUERY PORTAL_TOKEN
        echo "==== $1"
        echo
        psql -X -q -d "$d" 2>&1 >/dev/null <<SQL | sed 's/^LOG:  //'
LOAD 'auto_explain';
SET auto_explain.log_min_duration = '5ms';
SET auto_explain.log_nested_statements = on;
SET auto_explain.log_analyze = on;
SET auto_explain.log_buffers = on;
SET auto_explain.log_timing = on;
SET jit = off;
SET client_min_messages = log;
SELECT a.status, length(a.body::text) FROM pgpace.api_call('GET', '$2'::text[], '$3'::jsonb, NULL, 'token:bench-api', NULL, NULL, $4) a;
SQL
        echo
    }
    {
        echo "auto_explain (ANALYZE, BUFFERS) of the statements over 5 ms inside pgpace.api_call for the"
        echo "slowest requests of the load (sql/queries/api_call.sql as the dispatcher runs it; jit off),"
        echo "after the measured windows, the deliveries still running; $(q "$d" "SELECT count(*) FROM pgpace.item") items in pgpace.item,"
        echo "$(q "$d" "SELECT count(*) FROM pgpace.queue") queued, $(q "$d" "SELECT count(*) FROM pgpace.delivery_attempt") attempts logged ($(date -u +%Y-%m-%d))."
        echo "Each partition of pgpace.item is scanned on its own: the empty ones' lines repeat."
        echo
        explain_call "GET /v1/events?customer=p500&limit=20" '{events}' '{"customer":"p500","limit":"20"}' NULL
        explain_call "GET /v1/stats?customer=p500" '{stats}' '{"customer":"p500"}' NULL
        explain_call "GET /v1/portal ($first_page_name's link)" '{portal}' '{}' "'$first_page'"
        explain_call "GET /v1/portal/events?limit=50 ($first_page_name's link)" '{portal,events}' '{"limit":"50"}' "'$first_page'"
    } | sed "s/$first_page/<the link's token>/g" >"$out/api_load_explain.txt"
}

declare -A order=()
seq_n=0
for ph in $PHASES; do
    if [ "$ph" = light ]; then
        log "light phase: every tenth customer alone ($(configured light)/s), the other 900 paused"
        q "$d" "UPDATE pgpace.customer SET paused = true WHERE substr(name, 2)::int % 10 <> 0"
    fi
    log "$ph phase: warm-up $WARM_S s"
    sleep "$WARM_S"
    for r in $(seq 1 "$RUNS"); do
        if [ $((r % 2)) = 1 ]; then o=$LOADS; else o=$(tr ' ' '\n' <<<"$LOADS" | tac | paste -sd' '); fi
        for l in $o; do
            order[$ph]="${order[$ph]:-}${order[$ph]:+ }$l"
            window "$ph" "$l" "$r"
        done
    done
    if [ "$ph" = full ]; then
        profile
    fi
done
load_avgs=$(cat "$work"/win_*.txt | awk '$1 == "loadavg" { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { printf "%s-%s", v[1], v[NR] }')
stop_pid() { kill -TERM "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }
stop_pid "$disp"
stop_pid "$recv_pid"

# ---- results ------------------------------------------------------------------------------------------------
metrics="gap_error_p50_ms gap_error_p99_ms gap_error_p999_ms delivered_vs_configured deliveries_per_s
claim_rounds_per_s claim_mean_ms claim_p50_ms claim_p99_ms spacing_error_p99_ms leader_cpu_pct
pg_claim_session_cpu_pct pg_api_session_cpu_pct loadgen_cpu_pct loadavg api_answers_per_s api_p50_ms
api_p95_ms page_answers_per_s page_p50_ms page_p95_ms non_2xx errors_no_answer"
unit() { case $1 in *_ms) echo ms ;; *_pct) echo percent ;; *_per_s) echo per_s ;; delivered_vs_configured) echo ratio ;; non_2xx | errors_no_answer) echo requests ;; *) echo "" ;; esac; }
for ph in $PHASES; do
    for l in $LOADS; do
        for m in $metrics; do
            mapfile -t vals < <(cat "$work/win_${ph}_${l}"_*.txt | awk -v m="$m" '$1 == m && $2 != "" { print $2 }')
            record "${ph}_$l" "$m" "$(unit "$m")" "${vals[@]}"
        done
    done
    # Latency by request kind over the phase's windows with the API and the pages.
    for k in api_list api_get api_events api_events_cursor api_stats api_events_all page_portal page_events; do
        [ -s "$work/kinds_$ph.txt" ] || break
        awk -v k="$k" '$1 == k { print $2 }' "$work/kinds_$ph.txt" >"$work/k.txt"
        [ -s "$work/k.txt" ] || continue
        record "${ph}_kind_$k" latency_p50_ms ms "$(pct 50 <"$work/k.txt")"
        record "${ph}_kind_$k" latency_p95_ms ms "$(pct 95 <"$work/k.txt")"
        record "${ph}_kind_$k" requests_per_s per_s "$(awk -v n="$RUNS" -v w="$WIN_S" 'END { printf "%.2f", NR / (n * w) }' "$work/k.txt")"
    done
done
bad=$( [ -s "$work/bad_status.txt" ] && sort "$work/bad_status.txt" | uniq -c | awk '{ printf "%s%s %s x%d", (NR > 1 ? ", " : ""), $2, $3, $1 }' || true)

# Noise: the wider range (max - min) of the repetitions of the phase's two loads; a difference
# of medians within it is not a measured effect.
noise() { # PHASE METRIC
    local l w=0 lo hi
    for l in $LOADS; do
        lo=$(get "${1}_$l" "$2" min) hi=$(get "${1}_$l" "$2" max)
        [ -n "$lo" ] || continue
        w=$(awk -v a="$lo" -v b="$hi" -v w="$w" 'BEGIN { d = b - a; print (d > w) ? d : w }')
    done
    echo "$w"
}
# Measurable: the ranges do not overlap (every window with the API load on one side of every
# window without it; by chance 2 in 20 with 3 windows each, both sides counted).
verdict() { # PHASE METRIC
    local a b nz alo ahi blo bhi
    a=$(get "${1}_both" "$2") b=$(get "${1}_none" "$2") nz=$(noise "$1" "$2")
    [ -n "$a" ] && [ -n "$b" ] || { printf 'n/a'; return; }
    alo=$(get "${1}_both" "$2" min) ahi=$(get "${1}_both" "$2" max)
    blo=$(get "${1}_none" "$2" min) bhi=$(get "${1}_none" "$2" max)
    awk -v a="$a" -v b="$b" -v n="$nz" -v alo="$alo" -v ahi="$ahi" -v blo="$blo" -v bhi="$bhi" 'BEGIN {
        apart = (ahi + 0 < blo + 0) || (alo + 0 > bhi + 0)
        printf "%+.3g (noise %.3g): %s", a - b, n, apart ? "**measurable** (ranges apart)" : "not measurable (ranges overlap)" }'
}
# The pairs of adjacent windows (seq 1-2, 3-4, ..): "d1 / d2 / d3" (loaded - unloaded) and how
# many have the sign of the majority.
pairs() { # PHASE METRIC
    awk -v m="$2" '
        { split($0, a, " "); load[NR] = a[1]; file[NR] = a[2] }
        END {
            for (i = 1; i + 1 <= NR; i += 2) {
                for (j = i; j <= i + 1; j++) {
                    v[j] = ""
                    while ((getline line < file[j]) > 0) { split(line, f, " "); if (f[1] == m) v[j] = f[2] }
                    close(file[j])
                }
                if (v[i] == "" || v[i + 1] == "") continue
                d = (load[i] == "both") ? v[i] - v[i + 1] : v[i + 1] - v[i]
                n++; out = out (n > 1 ? " / " : "") sprintf("%+.3g", d)
                if (d > 0) pos++; else if (d < 0) neg++
            }
            if (!n) { printf "n/a"; exit }
            k = (pos > neg) ? pos : neg
            printf "%s (%s in %d of %d)", out, (pos > neg) ? "higher" : "lower", k, n }' "$work/seq_$1.txt"
}
plabel() { case $1 in full) echo "1,000 customers ($(configured full)/s)" ;; light) echo "100 customers ($(configured light)/s)" ;; esac; }
llabel() { case $1 in none) echo "no API" ;; both) echo "API $API_RATE req/s + $PAGES pages" ;; esac; }
elapsed=$(( (SECONDS - t_start + 59) / 60 ))
rel() { realpath -m --relative-to="$(dirname "$report")" "$1"; }
# The reading written by hand below the figures (from its marker line on) is kept.
kept=""
[ ! -f "$report" ] || kept=$(sed -n '/^<!-- written by hand/,$p' "$report")
{
    echo "# Management API and tenant pages beside a full delivery load"
    echo
    echo "Issue 33: \"50 polls/s of the API and 20 open tenant pages beside a full delivery load cost the"
    echo "leader's pacing nothing measurable (p99 gap error unchanged within noise)\"."
    echo
    echo "To reproduce (from the repository's root, as root on Debian 12 with postgresql-15,"
    echo "postgresql-contrib, python3 and curl; about $elapsed minutes on 2 cores$( [ "$quick" = 1 ] && echo ", --quick" )):"
    echo
    echo '```sh'
    echo 'meson setup build-release --buildtype=release -Db_ndebug=true -Dtests=disabled'
    echo 'ninja -C build-release'
    echo "BUILD=\$PWD/build-release bash bench/api_load.sh$( [ "$quick" = 1 ] && echo ' --quick')   # --quick: the full delivery load alone"
    echo '```'
    echo
    echo "Generated by \`bench/api_load.sh\` on $started: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)),"
    echo "$(awk '/MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo) GiB, PostgreSQL $(q "$admin" 'SHOW server_version' | cut -d' ' -f1) (shared_buffers $(q "$admin" 'SHOW shared_buffers'), fsync on, synchronous_commit on),"
    echo "pgpace at commit $commit$( [ "$dirty" = 0 ] || echo " with uncommitted changes in src/ or sql/"), built $build_type. The machine was shared with other work: the 1-minute load"
    echo "average at the windows' ends was $load_avgs (the benchmark's own processes make about 1.5-2 of it at the"
    echo "full load). Raw values: \`$csv\` (per load), \`$wcsv\` (per window, in order)."
    echo
    echo "## Settings"
    echo
    echo "- Delivery load: bench/run's pacing workload: $CUSTOMERS spaced customers at integer rates 60..600/min"
    echo "  ($(configured full) deliveries/s configured), each with a backlog of $BACKLOG_S s ($items items, ids in the order the"
    echo "  rates would have enqueued them), topped up before each window by what was sent since the last top-up"
    echo "  (the queue keeps its size, pgpace.item grows: $(q "$d" "SELECT count(*) FROM pgpace.item") rows at the end); one loopback"
    echo "  \`pgpace-receiver\` (200 at once), \`max_host_connections = 1000\`, \`max_connections = 1000\`, one leader for"
    echo "  the whole run."
    for ph in $PHASES; do
        case $ph in
        full) echo "- Phase full: all $CUSTOMERS customers deliver; $WARM_S s warm-up. Windows: ${order[$ph]}." ;;
        light) echo "- Phase light: every tenth customer alone (100, $(configured light)/s), the other 900 paused with their items still"
               echo "  queued (the same database: the API's requests cost the same); $WARM_S s warm-up. Windows: ${order[$ph]}." ;;
        esac
    done
    echo "- Windows of $WIN_S s, $RUNS of each load, alternating; $RAMP_S s of ramp before each and a pause of at least"
    echo "  $SETTLE_S s after it (until the API's session is idle)."
    echo "- API: $API_RATE requests/s offered by $API_CLIENTS clients (token with the read scope), each cycling through"
    echo "  \`/v1/customers?limit=100\`, 5 x \`/v1/customers/NAME\`, \`/v1/events?customer=NAME&limit=20\` and its next page"
    echo "  (\`cursor=\` its next_cursor), \`/v1/stats?customer=NAME\`, \`/v1/events?limit=20\` (NAME: 50 customers in turn)."
    echo "- Tenant pages: $PAGES read-only signed links (\`pgpace portal-link --read-only\`) of p50, p100, .., p1000,"
    echo "  each polling \`/v1/portal\` then \`/v1/portal/events?limit=50\` every $PAGE_S s ($((PAGES * 2 / PAGE_S)) requests/s offered)."
    echo "- Clients: a python3 load generator on this machine, keep-alive; the next request when due or, if the"
    echo "  last answer came later, at once (no catching up); no answer in $TIMEOUT_S s counts as an error."
    echo
    echo "## The leader's pacing"
    echo
    echo "Median of $RUNS windows, their range in parentheses. Gap error = |gap - 60/rate| between a customer's"
    echo "consecutive deliveries inside the window (receiver's log, whole ms), every delivering customer's."
    echo "Claim rounds: \`pgpace_claim_duration_seconds{round=\"scheduled\"}\` (buckets 1, 2.5, 5, 10, 25, 50, 100, 250 ms ..)."
    echo
    echo "| delivery load | API load | gap error p50 ms | gap error p99 ms | gap error p99.9 ms | delivered / configured | claim round p50 ms | claim round p99 ms | claim rounds/s | leader CPU % | claim session CPU % | load avg |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
    for ph in $PHASES; do
        for l in $LOADS; do
            k=${ph}_$l
            echo "| $(plabel "$ph") | $(llabel "$l") | $(cell "$k" gap_error_p50_ms) | $(cell "$k" gap_error_p99_ms) | $(cell "$k" gap_error_p999_ms) | $(cell "$k" delivered_vs_configured) | $(cell "$k" claim_p50_ms) | $(cell "$k" claim_p99_ms) | $(cell "$k" claim_rounds_per_s) | $(cell "$k" leader_cpu_pct) | $(cell "$k" pg_claim_session_cpu_pct) | $(cell "$k" loadavg) |"
        done
    done
    echo
    echo "CPU in % of one core: the leader process (all its threads: claims, deliveries, the admin listener),"
    echo "and the PostgreSQL backend of its claim connection."
    echo
    echo "Against the noise: the difference of the medians (with the API load - without); the noise, the"
    echo "wider range (max - min) of the $RUNS windows of either load in that phase; and measurable when the two"
    echo "loads' ranges do not overlap (all $RUNS windows with the API on one side of all $RUNS without: by chance"
    echo "in 2 of 20 orderings)."
    echo
    echo "| delivery load | gap error p99 ms | gap error p50 ms | delivered / configured | claim round p50 ms | claim round p99 ms | leader CPU % |"
    echo "|---|---|---|---|---|---|---|"
    for ph in $PHASES; do
        echo "| $(plabel "$ph") | $(verdict "$ph" gap_error_p99_ms) | $(verdict "$ph" gap_error_p50_ms) | $(verdict "$ph" delivered_vs_configured) | $(verdict "$ph" claim_p50_ms) | $(verdict "$ph" claim_p99_ms) | $(verdict "$ph" leader_cpu_pct) |"
    done
    echo
    echo "Pairs: the windows in their order make $RUNS pairs per phase (none both, both none, none both), each an"
    echo "unloaded and a loaded window next to each other, which a drift over the phase (the machine's other"
    echo "work, the growing tables) touches alike. Per pair, with the API load - without:"
    echo
    echo "| delivery load | gap error p50 ms | gap error p99 ms | delivered / configured | claim round p50 ms | claim round p99 ms |"
    echo "|---|---|---|---|---|---|"
    for ph in $PHASES; do
        printf '| %s ' "$(plabel "$ph")"
        for m in gap_error_p50_ms gap_error_p99_ms delivered_vs_configured claim_p50_ms claim_p99_ms; do
            printf '| %s ' "$(pairs "$ph" "$m")"
        done
        echo "|"
    done
    echo
    echo "The same sign in all $RUNS pairs happens by chance in 1 of 4 cases: read it as a direction, not a proof."
    echo
    echo "## The API's side"
    echo
    echo "| delivery load | API answers/s (offered $API_RATE) | API p50 ms | API p95 ms | page answers/s (offered $((PAGES * 2 / PAGE_S))) | page p50 ms | page p95 ms | non-2xx (no answer) | API session CPU % | load generator CPU % |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
    for ph in $PHASES; do
        k=${ph}_both
        echo "| $(plabel "$ph") | $(cell "$k" api_answers_per_s) | $(cell "$k" api_p50_ms) | $(cell "$k" api_p95_ms) | $(cell "$k" page_answers_per_s) | $(cell "$k" page_p50_ms) | $(cell "$k" page_p95_ms) | $(cell "$k" non_2xx) ($(cell "$k" errors_no_answer)) | $(cell "$k" pg_api_session_cpu_pct) | $(cell "$k" loadgen_cpu_pct) |"
    done
    echo
    echo "API session CPU: the PostgreSQL backend of the leader's API connection (without the API load:"
    echo "$(for ph in $PHASES; do printf '%s %s %%; ' "$ph" "$(fmt "$(get "${ph}_none" pg_api_session_cpu_pct)")"; done | sed 's/; $//')). By request kind: alone (10 in a row from one client after the"
    echo "full phase's windows, no other API load, the deliveries going on; NAME p500, the page p50's link), and"
    echo "over each phase's $RUNS windows with the API load (the time in the queue in front of the API's connection included):"
    echo
    echo "| request | alone, full phase: p50 ms | $(for ph in $PHASES; do printf '%s, loaded: p50 ms | p95 ms | answers/s | ' "$ph"; done | sed 's/ | $//') |"
    echo "|---|---$(for ph in $PHASES; do printf '|---|---|---'; done)|"
    for k in api_list:"/v1/customers?limit=100" api_get:"/v1/customers/NAME" api_events:"/v1/events?customer=NAME&limit=20" \
        api_events_cursor:"/v1/events?customer=NAME&limit=20&cursor=.." api_stats:"/v1/stats?customer=NAME" api_events_all:"/v1/events?limit=20" \
        page_portal:"/v1/portal (page)" page_events:"/v1/portal/events?limit=50 (page)"; do
        [ -n "$(get "full_kind_${k%%:*}" latency_p50_ms)" ] || continue
        printf '| `%s` | %s ' "${k#*:}" "$(fmt "$(get "full_kind_${k%%:*}" alone_p50_ms)")"
        for ph in $PHASES; do
            printf '| %s | %s | %s ' "$(fmt "$(get "${ph}_kind_${k%%:*}" latency_p50_ms)")" "$(fmt "$(get "${ph}_kind_${k%%:*}" latency_p95_ms)")" "$(fmt "$(get "${ph}_kind_${k%%:*}" requests_per_s)")"
        done
        echo "|"
    done
    [ -z "$bad" ] || { echo; echo "Answers other than 2xx (kind status xcount): $bad."; }
    echo
    echo "Profiles of the full phase: [\`$(rel "$out/api_load_statements.txt")\`]($(rel "$out/api_load_statements.txt")) (pg_stat_statements over 30 s"
    echo "of the API load), [\`$(rel "$out/api_load_explain.txt")\`]($(rel "$out/api_load_explain.txt")) (auto_explain of the slowest requests)."
    if [ -s "$work/loadgen.err" ]; then echo; echo "The load generator said: $(head -c 300 "$work/loadgen.err" | tr '\n' ' ')"; fi
    [ -z "$kept" ] || printf '\n%s\n' "$kept"
} >"$report"
log "wrote $report and $csv ($elapsed min)"
