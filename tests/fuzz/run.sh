#!/bin/sh
# Fuzzes each target of a -DCR_FUZZ=ON build for a bounded time and fails
# on the first crash, leak, timeout or failed invariant.
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS [JOBS [TARGET...]]
#
# Each target runs SECONDS (libFuzzer -max_total_time), JOBS targets at a
# time (default 1), every target by default. It starts from its seed corpus
# (tests/fuzz/corpus/<target>, never written) and BUILD_DIR/fuzz/corpus/
# <target> (what earlier runs found, kept); a crash's input goes to
# BUILD_DIR/fuzz/<target>-crash-* (or -leak-, -timeout-, -oom-), its log to
# BUILD_DIR/fuzz/<target>.log.
# One line a target: executions, coverage (edges), corpus size.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$1" && pwd)
seconds=$2
jobs=${3:-1}
[ $# -gt 3 ] && shift 3 || set --
# Every target has a seed corpus (tests/fuzz.cmake insists), so the folders
# there name them all.
targets=${*:-$(ls "$here/corpus")}
out=$build/fuzz
mkdir -p "$out"

# One target: 0 when it ran its time without a crash.
run_one() {
    t=$1
    mkdir -p "$out/corpus/$t"
    # -timeout: one input over 10 s is a hang; -rss_limit_mb: 2 GiB at most.
    if "$build/tests/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1 -artifact_prefix="$out/$t-" \
        "$out/corpus/$t" "$here/corpus/$t" >"$out/$t.log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$out/$t.log")
        cov=$(grep -o 'cov: [0-9]*' "$out/$t.log" | tail -n 1)
        corpus=$(ls "$out/corpus/$t" | wc -l)
        echo "fuzz_$t: ok, $runs runs in ${seconds}s, $cov, corpus $corpus"
    else
        echo "fuzz_$t: FAILED (log $out/$t.log):"
        grep -E 'ERROR|invariant|SUMMARY|Test unit written' "$out/$t.log" | head -n 8
        return 1
    fi
}

if [ "${CR_FUZZ_ONE:-}" ]; then
    run_one "$CR_FUZZ_ONE"
    exit
fi
# JOBS copies of this script at a time, one target each; xargs fails when any does.
printf '%s\n' $targets | xargs -P "$jobs" -I{} env CR_FUZZ_ONE={} sh "$0" "$build" "$seconds"
