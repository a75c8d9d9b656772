#!/usr/bin/env bash
# tests/fuzz/run.sh - builds the libFuzzer targets (clang, ASan + UBSan) and runs each one for a
# bounded time, starting from the committed seeds in tests/fuzz/corpus/<target>/.
#
#   bash tests/fuzz/run.sh [options] [SECONDS_PER_TARGET] [TARGET...]
#
#   SECONDS_PER_TARGET   default 20 (CI uses 15)
#   TARGET...            a subset: config validate netcheck retry_after secret receiver
#   --update-corpus      afterwards, merge inputs that add coverage into tests/fuzz/corpus/<target>/
#                        (libFuzzer -merge=1: only new-coverage files are added, seeds are kept)
#   --build-only         build, print the directory of the binaries, run nothing
#   --jobs N             run N targets at a time (default 1)
#
# Without --update-corpus the committed corpus is only read: new inputs go to a temporary
# directory. Exit status is non-zero when a target fails to build or finds a crash, a sanitizer
# report, a leak, a timeout or an out-of-memory; the reproducer's path (kept, with the binaries)
# and its bytes in hex are printed. Last line: "fuzz: N targets passed, M failed".
#
# Environment: FUZZ_WORK=dir (default: a new /tmp/pgpace-fuzz.XXXXXX, deleted after a clean run),
# CC (default clang), FUZZ_ARGS (extra libFuzzer flags), FUZZ_STRICT=1 (also check the invariants
# of known, unfixed findings; see README), SKIP_INSTALL=1.
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fuzzdir="$root/tests/fuzz"
all_targets=(config validate netcheck retry_after secret receiver)

seconds=20
update=0
build_only=0
jobs=1
targets=()
while [ $# -gt 0 ]; do
    case "$1" in
        --update-corpus) update=1 ;;
        --build-only) build_only=1 ;;
        --jobs) shift; jobs=${1:-1} ;;
        -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        [0-9]*) seconds=$1 ;;
        *)
            found=0
            for t in "${all_targets[@]}"; do [ "$t" = "$1" ] && found=1; done
            [ $found = 1 ] || { echo "run.sh: unknown target or option '$1'" >&2; exit 2; }
            targets+=("$1") ;;
    esac
    shift
done
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# --- toolchain -------------------------------------------------------------------------------
CC=${CC:-clang}
probe_dir=$(mktemp -d /tmp/pgpace-fuzz-probe.XXXXXX)
fuzzer_works() {
    printf '#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n);\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe_dir/p.c"
    "$CC" -fsanitize=fuzzer,address,undefined "$probe_dir/p.c" -o "$probe_dir/p" >/dev/null 2>&1
}
if ! fuzzer_works; then
    # Debian 12: clang-14 with libFuzzer in libclang-rt-14-dev; the libraries the targets link.
    pkgs=(clang libclang-rt-14-dev libinih-dev libssl-dev libuv1-dev)
    if [ "${SKIP_INSTALL:-0}" != 1 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        echo "fuzz: installing ${pkgs[*]}"
        export DEBIAN_FRONTEND=noninteractive
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}"; } >/dev/null ||
            echo "fuzz: apt-get install failed" >&2
    fi
    if ! fuzzer_works; then
        rm -rf "$probe_dir"
        echo "fuzz: '$CC -fsanitize=fuzzer' does not work; install clang and libclang-rt-14-dev (as root: apt-get install clang libclang-rt-14-dev)" >&2
        echo "fuzz: 0 targets passed, ${#targets[@]} failed"
        exit 1
    fi
fi
rm -rf "$probe_dir"

# --- build -----------------------------------------------------------------------------------
if [ -n "${FUZZ_WORK:-}" ]; then
    work=$FUZZ_WORK
    mkdir -p "$work"
else
    work=$(mktemp -d /tmp/pgpace-fuzz.XXXXXX)
fi
bin="$work/bin"
mkdir -p "$bin"

# -fno-sanitize-recover: any UBSan finding aborts, so libFuzzer saves the input.
# shellcheck disable=SC2054 # the commas are inside -fsanitize=..., not separators
cflags=(-std=c17 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer
        -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
        -Wall -Wextra -Wno-unused-parameter -I"$root/src")
# FUZZ_STRICT=1 also checks the invariants of findings reported but not fixed yet (README).
[ "${FUZZ_STRICT:-0}" = 1 ] && cflags+=(-DFUZZ_STRICT)

# Sources and libraries per target: only the pure modules (none of them includes the generated
# pgpace_version.h or sql_embed.h).
sources_of() {
    case "$1" in
        config)      echo "src/config.c src/validate.c src/common.c" ;;
        validate)    echo "src/validate.c src/common.c" ;;
        netcheck)    echo "src/netcheck.c src/common.c" ;;
        retry_after) echo "src/backoff.c src/common.c" ;;
        secret)      echo "src/secret.c src/common.c" ;;
        receiver)    echo "" ;; # includes tests/lib/receiver.c itself
    esac
}
libs_of() {
    case "$1" in
        config)   echo "-linih" ;;
        secret)   echo "-lcrypto" ;;
        receiver) echo "-luv -lpthread" ;;
        *)        echo "" ;;
    esac
}
maxlen_of() {
    case "$1" in
        config|receiver) echo 8192 ;;
        *) echo 4096 ;;
    esac
}

passed=0
failed=0
failed_names=()
buildable=()
for t in "${targets[@]}"; do
    srcs=()
    for s in $(sources_of "$t"); do srcs+=("$root/$s"); done
    # shellcheck disable=SC2046
    if (cd "$root" && "$CC" "${cflags[@]}" -o "$bin/fuzz_$t" "$fuzzdir/fuzz_$t.c" "${srcs[@]}" $(libs_of "$t")) \
        >"$work/build-$t.log" 2>&1; then
        buildable+=("$t")
        # Warnings are shown, not fatal: src/ is compiled here with other flags than meson's.
        [ -s "$work/build-$t.log" ] && sed "s|^|fuzz_$t build: |" "$work/build-$t.log"
    else
        cat "$work/build-$t.log" >&2
        echo "fuzz: FAILED $t: build failed" >&2
        failed=$((failed + 1))
        failed_names+=("$t")
    fi
done

if [ $build_only = 1 ]; then
    echo "fuzz: binaries in $bin"
    echo "fuzz: $((${#buildable[@]})) targets built, $failed failed"
    [ $failed -eq 0 ]
    exit
fi

# --- run -------------------------------------------------------------------------------------
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_target() {
    local t=$1
    local seeds="$fuzzdir/corpus/$t" out="$work/corpus/$t" art="$work/artifacts/$t/"
    rm -rf "$art" # a reused FUZZ_WORK keeps its corpus, not the last run's findings
    mkdir -p "$out" "$art" "$seeds"
    local dict=()
    [ -f "$fuzzdir/dict/$t.dict" ] && dict=(-dict="$fuzzdir/dict/$t.dict")
    # New inputs go to $out (the first directory); the seeds are only read.
    # shellcheck disable=SC2086
    "$bin/fuzz_$t" "$out" "$seeds" "${dict[@]}" \
        -max_total_time="$seconds" -max_len="$(maxlen_of "$t")" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$art" -print_final_stats=1 ${FUZZ_ARGS:-} >"$work/run-$t.log" 2>&1
    echo $? >"$work/rc-$t"
}

summarize() {
    local t=$1 rc
    rc=$(cat "$work/rc-$t" 2>/dev/null || echo 99)
    local execs cov ft units
    execs=$(grep -Eo 'stat::number_of_executed_units: *[0-9]+' "$work/run-$t.log" | grep -Eo '[0-9]+$' | tail -1)
    units=$(grep -Eo 'stat::average_exec_per_sec: *[0-9]+' "$work/run-$t.log" | grep -Eo '[0-9]+$' | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+' "$work/run-$t.log" | tail -1 | grep -Eo '[0-9]+')
    ft=$(grep -Eo 'ft: [0-9]+' "$work/run-$t.log" | tail -1 | grep -Eo '[0-9]+')
    local found
    found=$(find "$work/artifacts/$t" -type f 2>/dev/null | head -5)
    if [ "$rc" = 0 ] && [ -z "$found" ]; then
        echo "fuzz: ok     $t: ${execs:-?} execs (${units:-?}/s), cov ${cov:-?}, ft ${ft:-?}, corpus $(find "$work/corpus/$t" -type f | wc -l) new + $(find "$fuzzdir/corpus/$t" -type f | wc -l) seeds"
        return 0
    fi
    echo "fuzz: FAILED $t (libFuzzer exit $rc)" >&2
    # The finding itself (invariant message, sanitizer report head, UBSan line), not the whole log.
    grep -E -A 12 '(FUZZ INVARIANT|runtime error|ERROR: AddressSanitizer|ERROR: LeakSanitizer|ERROR: libFuzzer)' \
        "$work/run-$t.log" | grep -vE '^ *#([4-9]|[1-9][0-9]) .*(fuzzer::|libc|_start)' | head -30 >&2
    if [ -n "$found" ]; then
        local f
        for f in $found; do
            echo "fuzz: reproducer: $f" >&2
            echo "fuzz:   hex: $(head -c 512 "$f" | od -An -v -tx1 | tr -d ' \n')" >&2
            echo "fuzz:   rerun: $bin/fuzz_$t $f" >&2
        done
    else
        echo "fuzz: no reproducer was written; log: $work/run-$t.log" >&2
    fi
    return 1
}

ran=()
running=0
for t in "${buildable[@]}"; do
    echo "fuzz: running $t for ${seconds}s"
    run_target "$t" &
    running=$((running + 1))
    ran+=("$t")
    if [ "$running" -ge "$jobs" ]; then
        wait -n 2>/dev/null || wait
        running=$((running - 1))
    fi
done
wait

for t in "${ran[@]}"; do
    if summarize "$t"; then
        passed=$((passed + 1))
    else
        failed=$((failed + 1))
        failed_names+=("$t")
    fi
done

# --- corpus update (on demand) ----------------------------------------------------------------
if [ $update = 1 ]; then
    for t in "${ran[@]}"; do
        # Never merge from a run that crashed: its inputs may include the crasher's relatives.
        [ "$(cat "$work/rc-$t" 2>/dev/null)" = 0 ] || continue
        before=$(find "$fuzzdir/corpus/$t" -type f | wc -l)
        "$bin/fuzz_$t" -merge=1 -max_len="$(maxlen_of "$t")" "$fuzzdir/corpus/$t" "$work/corpus/$t" \
            >"$work/merge-$t.log" 2>&1 || { echo "fuzz: merge failed for $t (see $work/merge-$t.log)" >&2; continue; }
        after=$(find "$fuzzdir/corpus/$t" -type f | wc -l)
        echo "fuzz: corpus/$t: $before -> $after files"
    done
fi

if [ $failed -eq 0 ] && [ -z "${FUZZ_WORK:-}" ]; then
    rm -rf "$work"
elif [ $failed -gt 0 ]; then
    echo "fuzz: failed: ${failed_names[*]}; binaries, logs and reproducers kept in $work" >&2
fi
echo "fuzz: $passed targets passed, $failed failed"
[ $failed -eq 0 ]
