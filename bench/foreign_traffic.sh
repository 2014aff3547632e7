#!/bin/bash
# Issue 32's replay with foreign traffic: a share of every workload's
# requests (30% by default, drawn from the seed) reaches the engines around
# the router, round-robin, and no policy routes or hears of it
# (--foreign-share); every policy sees the engines' queues only through a
# scrape of their /metrics every 100 ms of virtual time (--scrape-interval).
# Per workload (route_table.sh's, bench/workloads.sh) at 8 shards, noise 0,
# two runs:
#   scraped  cacheroute (fed each scrape: cr_core_engine_load) and the four
#            deployed routers, each reading what its deployment reads
#            (replay/README.md, "Foreign traffic and scrapes")
#   blind    cacheroute without scrapes: only its own routes
# then foreign_traffic.py turns the JSONs into the table of bench/README.md
# ("Foreign traffic in the replay"): capacity at the p99 SLO (of the
# requests the policy routed, against the whole offered load), cacheroute
# with scrapes over itself without and over the best peer, and the hit
# ratios at the best peer's highest load within the SLO.
#
# usage: bench/foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE] [REPLAY FLAGS...]
#   e.g. bench/foreign_traffic.sh build-rel/replay/cacheroute-replay /tmp/foreign
#        bench/foreign_traffic.sh B /tmp/f conv 0.3 --scale 1,1.5,2
# Defaults: conv,syn,zipf,docs; 0.3. Flags past SHARE go to every run after
# the script's own (the last of a flag given twice wins). Runs under nice:
# the machine is shared.
set -eu
REPLAY=${1:?usage: foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE]}
OUT=${2:?usage: foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE]}
WORKLOADS=${3:-conv,syn,zipf,docs}
SHARE=${4:-0.3}
shift $(($# < 4 ? $# : 4))
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
PEERS=llmd-scorer,sglang-cache-aware,dynamo-kv,aibrix-prefix
mkdir -p "$OUT"

. "$HERE/workloads.sh" # scales, workload

IFS=, read -ra WL <<<"$WORKLOADS"
for w in "${WL[@]}"; do
    workload "$w"
    # shellcheck disable=SC2086
    sc=$(scales $GRID 1)
    for mode in scraped blind; do
        if [ "$mode" = scraped ]; then
            FLAGS=(--scrape-interval 0.1 --policies "cacheroute,$PEERS")
        else
            FLAGS=(--scrape-interval 0 --policies cacheroute)
        fi
        echo "$(date -u +%H:%M:%S) $w-$mode" >&2
        nice "$REPLAY" "${IN[@]}" --shards 8 --shard-fraction 0.03125 \
            --true-prefill 20,0.08,2e-6 --noise 0 --scale "$sc" --slo-p99-ms "$SLO" \
            --foreign-share "$SHARE" "${FLAGS[@]}" --json "$OUT/$w-$mode.json" "$@" \
            >"$OUT/$w-$mode.md"
    done
done
python3 "$HERE/foreign_traffic.py" "$OUT" >"$OUT/table.md"
echo "$OUT/table.md" >&2
