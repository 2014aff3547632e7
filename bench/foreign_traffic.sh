#!/bin/bash
# Issue 32's replay with foreign traffic: a share of every workload's
# requests (30% by default, drawn from the seed) reaches the engines around
# the router, round-robin, and no policy routes or hears of it
# (--foreign-share); every policy sees the engines' queues only through a
# scrape of their /metrics every 100 ms of virtual time (--scrape-interval).
# Per workload (route_table.sh's, bench/workloads.sh; a grid of loads of
# its own, lower: the foreign share is served without affinity) at 8
# shards, noise 0, three runs, each with scrapes but the last:
#   peers    the four deployed routers, each reading what its deployment
#            reads (replay/README.md, "Foreign traffic and scrapes")
#   scraped  cacheroute, fed each scrape (cr_core_engine_load)
#   blind    cacheroute without scrapes: only its own routes
#   exact    (not by default) min-ttft-exact, told the truth: every
#            shard's whole backlog and cache, foreign work included; what a
#            greedy router could reach at best, the ceiling the others meet
# then foreign_traffic.py turns the JSONs into the table of bench/README.md
# ("Foreign traffic in the replay"): capacity at the p99 SLO (of the
# requests the policy routed, against the whole offered load), cacheroute
# with scrapes over itself without and over the best peer, and the hit
# ratios at the best peer's highest load within the SLO.
#
# usage: bench/foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE] [RUNS] [REPLAY FLAGS...]
#   e.g. bench/foreign_traffic.sh build-rel/replay/cacheroute-replay /tmp/foreign
#        bench/foreign_traffic.sh B /tmp/f conv 0.3 scraped,blind --scale 1,1.5,2
# Defaults: conv,syn,zipf,docs; 0.3; peers,scraped,blind (a run left out
# keeps its JSON in OUT from before). Flags past RUNS go to every run after
# the script's own (the last of a flag given twice wins). Runs under nice:
# the machine is shared.
set -eu
REPLAY=${1:?usage: foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE] [RUNS]}
OUT=${2:?usage: foreign_traffic.sh REPLAY OUT [WORKLOADS] [SHARE] [RUNS]}
WORKLOADS=${3:-conv,syn,zipf,docs}
SHARE=${4:-0.3}
RUNS=${5:-peers,scraped,blind}
shift $(($# < 5 ? $# : 5))
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
PEERS=llmd-scorer,sglang-cache-aware,dynamo-kv,aibrix-prefix
mkdir -p "$OUT"

# shellcheck source=bench/workloads.sh
. "$HERE/workloads.sh" # scales, workload

# The loads per workload, LO HI STEP (req/s over the trace's: --scale):
# around every policy's knee with 30% foreign traffic.
foreign_grid() {
    case $1 in
    conv) GRID="0.6 2.4 0.1" ;;
    syn) GRID="0.2 1.6 0.05" ;;
    zipf) GRID="2.8 3.6 0.1" ;;
    docs) GRID="8 20 1" ;;
    esac
}

IFS=, read -ra WL <<<"$WORKLOADS"
IFS=, read -ra RN <<<"$RUNS"
for w in "${WL[@]}"; do
    workload "$w"
    foreign_grid "$w"
    # shellcheck disable=SC2086
    sc=$(scales $GRID 1)
    for mode in "${RN[@]}"; do
        case $mode in
        peers) FLAGS=(--scrape-interval 0.1 --policies "$PEERS") ;;
        scraped) FLAGS=(--scrape-interval 0.1 --policies cacheroute) ;;
        blind) FLAGS=(--scrape-interval 0 --policies cacheroute) ;;
        exact) FLAGS=(--scrape-interval 0 --policies min-ttft-exact) ;;
        *) echo "foreign_traffic.sh: unknown run '$mode' (peers, scraped, blind, exact)" >&2; exit 2 ;;
        esac
        echo "$(date -u +%H:%M:%S) $w-$mode" >&2
        nice "$REPLAY" "${IN[@]}" --shards 8 --shard-fraction 0.03125 \
            --true-prefill 20,0.08,2e-6 --noise 0 --scale "$sc" --slo-p99-ms "$SLO" \
            --foreign-share "$SHARE" "${FLAGS[@]}" --json "$OUT/$w-$mode.json" "$@" \
            >"$OUT/$w-$mode.md"
    done
done
python3 "$HERE/foreign_traffic.py" "$OUT" >"$OUT/table.md"
echo "$OUT/table.md" >&2
