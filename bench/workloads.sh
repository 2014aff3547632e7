# shellcheck shell=bash disable=SC2034 # IN, SLO, GRID: for the caller
# The replay benchmarks' workloads (sourced by route_table.sh and
# foreign_traffic.sh): each one's input flags, p99 SLO and scale grid per 8
# shards, and the grid's expansion. Needs HERE (the bench folder) and
# TRACES (the shipped traces' folder) set by the caller.
#   workloads  the two shipped Mooncake traces (p99 <= 60 s); multi-turn Zipf
#              sessions with ~36k-token prompts (p99 <= 20 s); shared
#              documents (p99 <= 20 s); the generated ones run 100,000
#              requests and leave the first 30,000 out of the figures
#              (--warmup: the generator starts every session cold at once,
#              and that storm would otherwise be the p99)

# scales LO HI STEP MULT: LO..HI by STEP, each times MULT
scales() {
    python3 -c "import sys; lo, hi, st, m = map(float, sys.argv[1:]); n = round((hi - lo) / st)
print(','.join('%g' % round((lo + i * st) * m, 6) for i in range(n + 1)))" "$@"
}

workload() { # NAME -> input flags, SLO, the scale grid per 8 shards
    case $1 in
    conv) IN=(--trace "$TRACES/mooncake_conversation_trace.jsonl")
          SLO=60000 GRID="1.2 3.2 0.1" ;;
    syn) IN=(--trace "$TRACES/mooncake_synthetic_trace.jsonl")
         SLO=60000 GRID="0.8 4.6 0.1" ;;
    zipf) IN=(--generate --requests 100000 --sessions 1000 --gini 0.76 --system-blocks 4
              --first-blocks 60 --turn-blocks 2 --max-blocks 80 --rate 1 --warmup 30000)
          SLO=20000 GRID="5 16 0.5" ;;
    docs) IN=(--generate --requests 100000 --sessions 2000 --gini 0.76 --documents 200
              --document-blocks 16 --document-zipf 1.1 --system-blocks 2 --first-blocks 4
              --turn-blocks 1 --max-blocks 40 --rate 1 --warmup 30000)
          SLO=20000 GRID="15 80 2.5" ;;
    *) echo "unknown workload '$1' (conv, syn, zipf, docs)" >&2; exit 2 ;;
    esac
}

