# common.sh - what the bench scripts share; sourced, not run (from the repository's root).
#
#   bench_private_cluster NAME   a private PostgreSQL 15 for the script's life: sets work (a
#                                temporary directory, removed on exit), port (BENCH_PORT or a
#                                random one in 20000-31999; the script may use the few above
#                                it) and exports PGHOST, PGPORT and PGUSER. Every PID the
#                                script adds to pids is stopped on exit, then the cluster.
#   pct P                        the P-th percentile (nearest rank) of the numbers on stdin
#   summary N...                 "median (min-max)" of its arguments
pids=()
bench_cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    bash tests/tools/pgcluster.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
bench_private_cluster() {
    work=$(mktemp -d "/tmp/pgpace-$1.XXXXXX")
    chmod 755 "$work"
    trap bench_cleanup EXIT
    port=${BENCH_PORT:-$((20000 + RANDOM % 12000))}
    eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "$port")"
    export PGHOST PGPORT PGUSER
}
pct() { sort -g | awk -v p="$1" '{ a[NR] = $1 } END { if (NR) { i = int(NR * p / 100 + 0.999); if (i < 1) i = 1; print a[i] } }'; }
summary() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { printf "%s (%s-%s)", a[int((NR + 1) / 2)], a[1], a[NR] }'; }
