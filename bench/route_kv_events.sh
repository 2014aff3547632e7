#!/bin/bash
# KV events in the replay (issue 24, item 7): cacheroute's hit-prediction
# error with and without the simulated shards' KV events, on the workloads
# of bench/route_table.sh (8 shards, noise 0), in cacheroute-replay:
#   cache      the table's (LRU caches holding 25% of the distinct blocks in
#              total: --shard-fraction 0.03125) and a quarter of it
#              (0.0078125), where eviction bites
#   load       0.9x cacheroute's capacity in the table (bench/README.md,
#              "Routes against the deployed routers", r8-n0), and with the
#              small cache also 0.9x its own capacity there (measured by this
#              script with events off, 2026-12-02), so that its queues are
#              not minutes long; capacity from the table's scale grid
#   events     --kv-events off, on (stored at each prefill's end) and
#              dispatch (stored when the request is dispatched: a diagnostic)
# Each run writes its JSON and Markdown under OUT; the last step prints the
# table of bench/README.md ("KV events in the replay") into OUT/table.md:
# per workload, cache and mode, the hit ratio, p99 TTFT and prediction error
# (mean |predicted - served cached tokens|, and over the mean prompt) at the
# 0.9x load, and the capacity at the SLO.
#
# usage: bench/route_kv_events.sh REPLAY OUT [WORKLOADS] [MODES] [REPLAY FLAGS...]
#   e.g. bench/route_kv_events.sh build-rkrel/replay/cacheroute-replay /tmp/kv-events
#        bench/route_kv_events.sh B /tmp/kv conv off,on
# Defaults: conv,syn,zipf,docs; off,on,dispatch. Flags past MODES go to every
# run after the script's own. Seconds per run on one core: ~1 (traces) to
# ~60 (generated, the whole grid).
set -eu
REPLAY=${1:?usage: route_kv_events.sh REPLAY OUT [WORKLOADS] [MODES]}
OUT=${2:?usage: route_kv_events.sh REPLAY OUT [WORKLOADS] [MODES]}
WORKLOADS=${3:-conv,syn,zipf,docs}
MODES=${4:-off,on,dispatch}
shift $(($# < 4 ? $# : 4))
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
FRACTIONS=(0.03125 0.0078125)
mkdir -p "$OUT"

# scales LO HI STEP: LO..HI by STEP
scales() {
    python3 -c "import sys; lo, hi, st = map(float, sys.argv[1:]); n = round((hi - lo) / st)
print(','.join('%g' % round(lo + i * st, 6) for i in range(n + 1)))" "$@"
}

# workload NAME -> input flags, SLO, the table's grid (route_table.sh's at 8
# shards), AT, 0.9x the table's capacity (req/s) over the trace's rate
# (conv 6.525 / 3.4015, syn 5.970 / 3.9069, zipf 9.569 / 1.0029, docs
# 55.732 / 1.0029), and SMALL, 0.9x the small cache's capacity over it
# (conv 5.57, syn 3.65, zipf 5.55, docs 20.80 req/s)
workload() {
    case $1 in
    conv) IN=(--trace "$TRACES/mooncake_conversation_trace.jsonl")
          SLO=60000 GRID="1.2 3.2 0.1" AT=1.73 SMALL=1.47 ;;
    syn) IN=(--trace "$TRACES/mooncake_synthetic_trace.jsonl")
         SLO=60000 GRID="0.8 4.6 0.1" AT=1.38 SMALL=0.84 ;;
    zipf) IN=(--generate --requests 100000 --sessions 1000 --gini 0.76 --system-blocks 4
              --first-blocks 60 --turn-blocks 2 --max-blocks 80 --rate 1 --warmup 30000)
          SLO=20000 GRID="5 16 0.5" AT=8.59 SMALL=4.98 ;;
    docs) IN=(--generate --requests 100000 --sessions 2000 --gini 0.76 --documents 200
              --document-blocks 16 --document-zipf 1.1 --system-blocks 2 --first-blocks 4
              --turn-blocks 1 --max-blocks 40 --rate 1 --warmup 30000)
          SLO=20000 GRID="15 80 2.5" AT=50 SMALL=18.67 ;;
    *) echo "route_kv_events.sh: unknown workload '$1' (conv, syn, zipf, docs)" >&2; exit 2 ;;
    esac
}

IFS=, read -ra WL <<<"$WORKLOADS"
IFS=, read -ra MO <<<"$MODES"
for w in "${WL[@]}"; do
    workload "$w"
    for f in "${FRACTIONS[@]}"; do
        at=$AT
        [ "$f" = "${FRACTIONS[0]}" ] || at="$AT,$SMALL"
        # shellcheck disable=SC2086
        sc="$(scales $GRID),$at"
        for m in "${MO[@]}"; do
            name="$w-f$f-$m"
            echo "$(date -u +%H:%M:%S) $name" >&2
            "$REPLAY" "${IN[@]}" --shards 8 --shard-fraction "$f" --true-prefill 20,0.08,2e-6 \
                --noise 0 --scale "$sc" --slo-p99-ms "$SLO" --policies cacheroute \
                --kv-events "$m" --json "$OUT/$name.json" "$@" >"$OUT/$name.md"
            echo "$at" >"$OUT/$name.at"
        done
    done
done

python3 - "$OUT" "${WL[@]}" >"$OUT/table.md" <<'EOF'
import json, os, sys
out, workloads = sys.argv[1], sys.argv[2:]
print("| workload | cache | events | load (req/s) | hit ratio | p99 TTFT (s) | error (tokens) "
      "| error / mean prompt | capacity (req/s) |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|")
runs = sorted(n[:-5] for n in os.listdir(out) if n.endswith(".json"))
order = {"off": 0, "on": 1, "dispatch": 2}
key = lambda n: (workloads.index(n.split("-")[0]), -float(n.split("-")[1][1:]),
                 order.get(n.split("-")[2], 9))
for name in sorted((n for n in runs if n.split("-")[0] in workloads), key=key):
    w, f, m = name.split("-")
    with open(os.path.join(out, name + ".json")) as fh:
        doc = json.load(fh)
    with open(os.path.join(out, name + ".at")) as fh:
        ats = [float(x) for x in fh.read().split(",")]
    cap = doc["capacity"][0]
    for at in ats:
        r = next(x for x in doc["results"] if abs(x["scale"] - at) < 1e-9)
        err, share = r["hit_error_tokens"], r["hit_error_share"]
        print("| %s | %s | %s | %.2f | %.3f | %.1f | %s | %s | %.2f%s |" % (
            w, f[1:], m, r["offered_load_per_s"], r["hit_ratio"], r["ttft_p99_ms"] / 1000,
            "%.1f" % err if err is not None else "-",
            "%.4f" % share if share is not None else "-", cap["capacity_req_per_s"],
            "" if cap["bound"] == "interpolated" else " (%s)" % cap["bound"]))
EOF
echo "$OUT/table.md" >&2
