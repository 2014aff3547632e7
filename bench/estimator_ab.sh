#!/bin/sh
# Interleaved before/after rounds of estimator_bench (issue 14): each mode
# runs on BEFORE then AFTER, round after round, so both see the same machine.
#
# usage: bench/estimator_ab.sh BEFORE AFTER [rounds=3]
#   BEFORE, AFTER: estimator_bench binaries. A "before" binary of a tree
#   without cr_estimator_record_batch: build this bench there with a loop of
#   cr_estimator_record_weighted standing in for it (what cr_core_record did;
#   see bench/HISTORY.md).
set -eu
before=$1
after=$2
rounds=${3:-3}
run() {
    printf 'before: '
    "$before" "$@" | head -n 1
    printf 'after:  '
    "$after" "$@" | head -n 1
}
i=1
while [ "$i" -le "$rounds" ]; do
    echo "== round $i"
    run 1000000 1000 1 # memory at 1M owners (its first line)
    run --owners 1000000 --calls 20000000
    run --owners 1000000 --calls 20000000 --batch 1000
    run --owners 1000000 --calls 20000000 --batch 16
    run --owners 10000000 --max-owners 1000000 --calls 10000000 --batch 1000
    run --plan --owners 1000000 --repeats 3
    i=$((i + 1))
done
