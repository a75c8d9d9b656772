#!/usr/bin/env bash
# quickstart.sh - the README's first command: install, build, start a private PostgreSQL,
# migrate, seed customers in all three modes (one at a fractional rate) and a noisy carrier
# with a large backlog, and show what pgpace sees. Everything it starts is stopped and removed
# when it ends (also on Ctrl-C).
#
# The dispatcher (`pgpace run`) is being built; until it lands this shows the queue through
# `pgpace stats` rather than live deliveries.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

echo "== installing packages (Debian)"
bash tests/tools/install-deps.sh
echo "== building"
[ -d build ] || meson setup build >/dev/null
ninja -C build >/dev/null
pgpace=$root/build/src/pgpace

work=$(mktemp -d /tmp/pgpace-quickstart.XXXXXX)
chmod 755 "$work"
cleanup() {
    echo "== stopping PostgreSQL and removing $work"
    bash tests/tools/pgcluster.sh stop "$work/pg" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "== starting a private PostgreSQL 15"
eval "$(bash tests/tools/pgcluster.sh start "$work/pg" "${PGPACE_DEMO_PORT:-$((20000 + RANDOM % 20000))}")"
export PGHOST PGPORT PGUSER PGDATABASE=postgres

echo "== pgpace migrate"
"$pgpace" migrate

echo "== customers in all three modes"
hook=http://127.0.0.1:8080/hook
"$pgpace" customer set alpha   --mode spaced    --rate 60  --url $hook
"$pgpace" customer set bravo   --mode spaced    --rate 600 --burst 5 --url $hook
"$pgpace" customer set charlie --mode batch     --rate 120 --url $hook
"$pgpace" customer set delta   --mode batch     --rate 0.5 --url $hook
"$pgpace" customer set echo    --mode unlimited --rate 1   --url $hook
"$pgpace" carrier set noisy --max-per-round 10 --max-in-flight 20
"$pgpace" carrier set quiet --max-per-round 100

echo "== enqueue: a noisy carrier with a large backlog, and a little for everyone else"
{
    for i in $(seq 1 20000); do
        printf '{"customer":"echo","carrier":"noisy","kind":"replay","payload":{"n":%d}}\n' "$i"
    done
    for c in alpha bravo charlie delta; do
        for i in $(seq 1 50); do
            printf '{"customer":"%s","carrier":"quiet","payload":{"n":%d},"idempotency_key":"%s-%d"}\n' "$c" "$i" "$c" "$i"
        done
    done
} >"$work/items.jsonl"
"$pgpace" enqueue --file "$work/items.jsonl"
echo "   one more inside a producer's own transaction (rolled back: nothing is enqueued):"
psql -q -X -c "BEGIN; SELECT pgpace.enqueue('alpha', '{\"order\": 42}'); ROLLBACK;" >/dev/null
echo "   and committed, twice with the same idempotency key (one item):"
psql -q -X -At -c "SELECT pgpace.enqueue('alpha', '{\"order\": 43}', idempotency_key => 'order-43')"
psql -q -X -At -c "SELECT pgpace.enqueue('alpha', '{\"order\": 43}', idempotency_key => 'order-43')"

echo "== pgpace customer list"
"$pgpace" customer list
echo "== pgpace carrier list"
"$pgpace" carrier list
echo "== pgpace stats"
"$pgpace" stats
