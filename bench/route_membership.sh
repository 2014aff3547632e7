#!/bin/bash
# Membership events in the replay (issue 25): every policy while the
# cluster changes under it. On each workload of bench/route_table.sh (the
# two shipped Mooncake traces, the Zipf sessions and the shared documents)
# on 8 shards caching 25% of the distinct blocks between them, one load
# each, an events file joins two endpoints (e8, e9), then drains e2, then
# fails e5, at 40%, 55%, 70% and 85% of the run's virtual duration (after
# the generated workloads' warm-up; every event has far more than 60 s
# before the next). Prints, per workload, a table per event and policy
# (hit ratio before, recovery, p99 TTFT before and after, moved, forced,
# moved/forced, and the moves of a control run with every event a mark:
# what the policy moves over the same span with nothing changing) and the
# hit ratio through the events, with the JSONs and the events files under
# OUT.
#
# usage: bench/route_membership.sh REPLAY OUT [WORKLOADS]
#   e.g. bench/route_membership.sh build-table/replay/cacheroute-replay /tmp/members
# REPLAY is the release build: cmake -S . -B build-table -DCMAKE_BUILD_TYPE=Release
#   -DBUILD_TESTING=OFF -DCMAKE_C_COMPILER=gcc && cmake --build build-table
#   --target cacheroute-replay
# Defaults: conv,syn,zipf,docs. Flags past WORKLOADS go to every run.
set -eu
REPLAY=${1:?usage: route_membership.sh REPLAY OUT [WORKLOADS]}
OUT=${2:?usage: route_membership.sh REPLAY OUT [WORKLOADS]}
WORKLOADS=${3:-conv,syn,zipf,docs}
shift $(($# < 3 ? $# : 3))
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
POLICIES=cacheroute,llmd-scorer,sglang-cache-aware,dynamo-kv,aibrix-prefix,min-ttft-exact
POLICIES=$POLICIES,sticky,chwbl,least-loaded,flat-lb,random
SHARDS=8
mkdir -p "$OUT"

workload() { # NAME -> input flags, the load scale, the virtual duration (s)
    case $1 in
    conv) IN=(--trace "$TRACES/mooncake_conversation_trace.jsonl") SCALE=1
          SPAN=$(trace_span "$TRACES/mooncake_conversation_trace.jsonl") ;;
    syn) IN=(--trace "$TRACES/mooncake_synthetic_trace.jsonl") SCALE=1
         SPAN=$(trace_span "$TRACES/mooncake_synthetic_trace.jsonl") ;;
    zipf) IN=(--generate --requests 100000 --sessions 1000 --gini 0.76 --system-blocks 4
              --first-blocks 60 --turn-blocks 2 --max-blocks 80 --rate 1 --warmup 30000)
          SCALE=8 SPAN=100000 ;;
    docs) IN=(--generate --requests 100000 --sessions 2000 --gini 0.76 --documents 200
              --document-blocks 16 --document-zipf 1.1 --system-blocks 2 --first-blocks 4
              --turn-blocks 1 --max-blocks 40 --rate 1 --warmup 30000)
          SCALE=30 SPAN=100000 ;;
    *) echo "route_membership.sh: unknown workload '$1' (conv, syn, zipf, docs)" >&2; exit 2 ;;
    esac
}

trace_span() { # a trace's last timestamp, s
    python3 -c "import json, sys
print(max(json.loads(l)['timestamp'] for l in open(sys.argv[1]) if l.strip()) / 1000)" "$1"
}

events() { # SPAN SCALE [mark] -> the events file on stdout (virtual seconds after the
    # scale); with mark, the same times as marks: the control run, nothing changes
    python3 -c "import sys
d = float(sys.argv[1]) / float(sys.argv[2])
for f, kind, ep in ((0.40, 'join', 'e8'), (0.55, 'join', 'e9'), (0.70, 'drain', 'e2'),
                    (0.85, 'fail', 'e5')):
    print('%.1f %s %s' % (f * d, sys.argv[3] if len(sys.argv) > 3 else kind, ep))" "$@"
}

IFS=, read -ra WL <<<"$WORKLOADS"
for w in "${WL[@]}"; do
    workload "$w"
    events "$SPAN" "$SCALE" >"$OUT/$w.events"
    events "$SPAN" "$SCALE" mark >"$OUT/$w.marks"
    for run in events marks; do
        echo "$(date -u +%H:%M:%S) $w ($run)" >&2
        "$REPLAY" "${IN[@]}" --shards "$SHARDS" \
            --shard-fraction "$(python3 -c "print(0.25 / $SHARDS)")" \
            --true-prefill 20,0.08,2e-6 --noise 0 --scale "$SCALE" --slo-p99-ms 60000 \
            --policies "$POLICIES" --events "$OUT/$w.$run" --json "$OUT/$w.$run.json" "$@" \
            >"$OUT/$w.$run.md"
    done
done

# The tables, from the JSONs: per event and policy, then through the events.
python3 - "$OUT" "${WL[@]}" <<'EOF' | tee "$OUT/table.md"
import json, math, sys

out, names = sys.argv[1], sys.argv[2:]
PEERS = ("llmd-scorer", "sglang-cache-aware", "dynamo-kv", "aibrix-prefix", "min-ttft-exact")

def f(x, fmt):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else fmt % x

for name in names:
    doc = json.load(open("%s/%s.events.json" % (out, name)))
    rows = doc["results"]
    # the control: the same run with every event a mark (nothing changes),
    # so each policy's own moves over the same span (spills, rebalancing)
    control = json.load(open("%s/%s.marks.json" % (out, name)))["results"]
    quiet = {r["policy"]: r["events"] for r in control}
    quiet_hit = {r["policy"]: r["hit_ratio_events"] for r in control}
    st = doc["inputs"]["trace_stats"]
    print("\n### %s (%d requests, scale %g, %.2f req/s offered)\n"
          % (name, st["requests"], rows[0]["scale"], rows[0]["offered_load_per_s"]))
    print("| event | policy | hit before | recovered (s) | p99 before (s) | p99 after (s) | "
          "moved | forced | moved/forced | moved without it | (moved - that)/forced |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    n_events = len(rows[0]["events"])
    notes = []
    for k in range(n_events):
        for r in rows:
            e = r["events"][k]
            ev = "%.0f s %s %s" % (e["at_s"], e["kind"], e["endpoint"])
            base = quiet[r["policy"]][k]["moved"]
            net = (e["moved"] - base) / e["forced"] if e["forced"] else None
            print("| %s | %s | %s | %s | %s | %s | %d | %d | %s | %d | %s |" % (
                ev, r["policy"], f(e["hit_ratio_before"], "%.3f"), f(e["recovered_s"], "%.0f"),
                f(e["ttft_p99_before_ms"] and e["ttft_p99_before_ms"] / 1000, "%.1f"),
                f(e["ttft_p99_after_ms"] and e["ttft_p99_after_ms"] / 1000, "%.1f"),
                e["moved"], e["forced"], f(e["moved_per_forced"], "%.2f"), base,
                f(net, "%.2f")))
            if r["policy"] == "cacheroute":
                if e["recovered_s"] is None:
                    notes.append("cacheroute does not recover within 60 s after %s" % ev)
                if e["moved_per_forced"] is not None and e["moved_per_forced"] > 1.2:
                    notes.append("cacheroute moves %.2fx the forced after %s"
                                 % (e["moved_per_forced"], ev))
    print("\n| policy | hit through the events | the same span without them | with - "
          "without | failed requests |\n|---|---:|---:|---:|---:|")
    cr = next(r for r in rows if r["policy"] == "cacheroute")["hit_ratio_events"]
    for r in rows:
        q = quiet_hit[r["policy"]]
        cost = r["hit_ratio_events"] - q if None not in (q, r["hit_ratio_events"]) else None
        print("| %s | %s | %s | %s | %d |" % (r["policy"], f(r["hit_ratio_events"], "%.3f"),
                                              f(q, "%.3f"), f(cost, "%+.3f"),
                                              r["failed_requests"]))
        if r["policy"] in PEERS and r["hit_ratio_events"] is not None and cr is not None \
                and r["hit_ratio_events"] > cr:
            notes.append("cacheroute (%.3f) is below %s (%.3f) through the events"
                         % (cr, r["policy"], r["hit_ratio_events"]))
    if notes:
        print("\nAgainst the targets: " + "; ".join(notes) + ".")
EOF
echo "$OUT/table.md" >&2
