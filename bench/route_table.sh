#!/bin/bash
# The routing table of issue 23: cacheroute's default route rule against the
# routers platform teams deploy (llm-d's scorer, SGLang's cache-aware
# router, Dynamo's KV router, AIBrix's prefix router) and min-ttft-exact,
# every policy on every workload, in cacheroute-replay:
#   workloads  the two shipped Mooncake traces (p99 <= 60 s); multi-turn Zipf
#              sessions with ~36k-token prompts (p99 <= 20 s); shared
#              documents (p99 <= 20 s)
#   cluster    8 or 64 shards whose LRU caches hold 25% of the trace's
#              distinct blocks in total; prefill 20 + 0.08 (L-s) + 2e-6 (L^2-s^2)
#              ms; noise 0 or 0.1
# Each run writes its JSON and plots (capacity.png: p99 against load, with
# the SLO) under OUT, and route_table.py turns the JSONs into the Markdown
# table of bench/README.md ("Routes against the deployed routers").
#
# usage: bench/route_table.sh REPLAY OUT [WORKLOADS] [SHARDS] [NOISES] [REPLAY FLAGS...]
#   e.g. bench/route_table.sh build-rel/replay/cacheroute-replay /tmp/route-table
#        bench/route_table.sh build-rel/replay/cacheroute-replay /tmp/t conv 8 0
#        bench/route_table.sh B /tmp/p conv,zipf 8 0 --policies cacheroute --route-planned on
# Defaults: conv,syn,zipf,docs; 8,64; 0,0.1. Flags past NOISES go to every
# run after the script's own (the last of a flag given twice wins). The generated workloads run
# 100,000 requests and leave the first 30,000 out of the figures (--warmup:
# the generator starts every session cold at once, and that storm would
# otherwise be the p99). Minutes per run on one core: ~1 (traces, 8 shards)
# to ~10 (generated, 64 shards).
set -eu
REPLAY=${1:?usage: route_table.sh REPLAY OUT [WORKLOADS] [SHARDS] [NOISES]}
OUT=${2:?usage: route_table.sh REPLAY OUT [WORKLOADS] [SHARDS] [NOISES]}
WORKLOADS=${3:-conv,syn,zipf,docs}
SHARDS=${4:-8,64}
NOISES=${5:-0,0.1}
shift $(($# < 5 ? $# : 5))
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
POLICIES=cacheroute,llmd-scorer,sglang-cache-aware,dynamo-kv,aibrix-prefix,min-ttft-exact
mkdir -p "$OUT"

# shellcheck source=bench/workloads.sh
. "$HERE/workloads.sh" # scales, workload

IFS=, read -ra WL <<<"$WORKLOADS"
IFS=, read -ra SH <<<"$SHARDS"
IFS=, read -ra NO <<<"$NOISES"
for w in "${WL[@]}"; do
    workload "$w"
    for r in "${SH[@]}"; do
        # the same load per shard: 8 times the arrivals on 64 shards
        # shellcheck disable=SC2086
        sc=$(scales $GRID "$(python3 -c "print($r / 8)")")
        frac=$(python3 -c "print(0.25 / $r)")
        for n in "${NO[@]}"; do
            name="$w-r$r-n$n"
            echo "$(date -u +%H:%M:%S) $name" >&2
            "$REPLAY" "${IN[@]}" --shards "$r" --shard-fraction "$frac" \
                --true-prefill 20,0.08,2e-6 --noise "$n" --scale "$sc" --slo-p99-ms "$SLO" \
                --policies "$POLICIES" --json "$OUT/$name.json" --plots "$OUT/$name" "$@" \
                >"$OUT/$name.md"
        done
    done
    # The ceiling no router passes: every reusable prefix hit (one shard
    # with a cache of every block) and the work spread perfectly, R x 1000 /
    # the mean prefill ms of the requests measured (route_table.py).
    "$REPLAY" "${IN[@]}" --shards 1 --shard-fraction 1 --true-prefill 20,0.08,2e-6 \
        --noise 0 --scale 0.001 --policies sticky --dump-routes "$OUT/$w-ceiling.csv" >/dev/null
done
python3 "$HERE/route_table.py" "$OUT"/*.json >"$OUT/table.md"
echo "$OUT/table.md" >&2
