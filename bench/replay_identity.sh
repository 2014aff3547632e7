#!/bin/bash
# Byte-identity check for restructurings: runs cacheroute-replay with every
# policy over both shipped traces and four generated workloads (Zipf
# sessions, shared documents, knowledge, and KV events) and writes one JSON
# per workload under OUT. Run it with the build before and the build after a
# change, then `diff -r OUT_BEFORE OUT_AFTER`: a restructuring must leave
# every byte as it was. Small loads and request counts keep it to ~2 min.
#
# usage: bench/replay_identity.sh REPLAY OUT
set -eu
REPLAY=${1:?usage: replay_identity.sh REPLAY OUT}
OUT=${2:?usage: replay_identity.sh REPLAY OUT}
HERE=$(cd "$(dirname "$0")" && pwd)
TRACES=${CR_TRACES:-$HERE/../../shared/traces}
ALL=cacheroute,flat-lb,sticky,chwbl,least-loaded,random,llmd-scorer,sglang-cache-aware,dynamo-kv,aibrix-prefix,min-ttft-exact
TRACE=(--shards 8 --shard-fraction 0.25 --true-prefill 20,0.08,2e-6 --slo-p99-ms 60000)
GEN=(--shards 8 --requests 8000 --sessions 300 --rate 40 --slo-p99-ms 20000)
mkdir -p "$OUT"
run() { # NAME FLAGS...
    name=$1; shift
    "$REPLAY" "$@" --json "$OUT/$name.json" > "$OUT/$name.md"
}
run conv --trace "$TRACES/mooncake_conversation_trace.jsonl" "${TRACE[@]}" --scale 1,2 --policies "$ALL"
run syn --trace "$TRACES/mooncake_synthetic_trace.jsonl" "${TRACE[@]}" --scale 1,2 --policies "$ALL"
run zipf --generate "${GEN[@]}" --system-blocks 4 --first-blocks 20 --turn-blocks 2 --max-blocks 40 \
    --scale 1,3 --policies "$ALL"
run docs --generate "${GEN[@]}" --documents 50 --document-blocks 8 --document-zipf 1.1 \
    --scale 1,3 --policies "$ALL"
run knowledge --generate "${GEN[@]}" --knowledge-tokens 2000 --scale 1,3 \
    --policies "$ALL,iws,always-text,always-kv,oracle"
run kv-events --generate "${GEN[@]}" --kv-events on --shard-blocks 256 --scale 1,3 --policies "$ALL"
run record --generate "${GEN[@]}" --call record --route-by bounded --scale 1 --policies cacheroute
echo "replay_identity: wrote $(ls "$OUT"/*.json | wc -l) JSON files under $OUT"
