#!/usr/bin/env bash
# A cluster in a box: cacheroute as the endpoint picker (ext_proc) of 8 fake
# OpenAI engines, against round-robin on the same engines, and the replay's
# prediction for the same workload. Everything on 127.0.0.1; every process
# it starts is stopped on exit.
#
#   ./scripts/setup.sh          # once: packages and a build in build/
#   ./scripts/install-deps.sh scripts/deps-test.txt   # once: the Python packages, gnuplot
#   ./scripts/demo-epp.sh       # about 5 minutes; results in results/epp-demo/
#
# What runs (bench/README.md, "EPP demo: a cluster in a box"):
#   1. the workload: the first REQUESTS requests of the Mooncake conversation
#      trace as multi-turn chats, each 512-token block one message of 2 KiB
#      (bench/epp/drive.py), arrivals at trace time / TIME_SCALE;
#   2. 8 fake engines (bench/epp/fake_engine.py: an LRU prefix cache of
#      CACHE_BLOCKS blocks, one FIFO prefill queue with the replay's prefill
#      model, SSE with usage, /tokenize, vLLM KV events over ZeroMQ) and the
#      sidecar with --epp-listen, the engines as its endpoints file and
#      their KV events; the driver plays each request through the Envoy-like
#      ext_proc client (tests/epp/envoy_client.py), then to the engine it
#      picked;
#   3. fresh engines, the same workload round-robin (no picker);
#   4. cacheroute-replay on the same workload, cluster and prefill model;
#   5. the table (hit ratio, TTFT p50/p99, throughput; demo against replay)
#      and results/epp-demo/ttft_cdf.png.
# Environment: BUILD (build), OUT (results/epp-demo), REQUESTS (1000),
# TIME_SCALE (3), ENGINES (8), CACHE_BLOCKS (1344), CONCURRENCY (128),
# EPP_TOKENS (estimate; engine asks the engines' /tokenize, same ids here),
# PORT_BASE (18100: engines PORT_BASE+i, their KV events PORT_BASE+100+i,
# the picker PORT_BASE+200, the sidecar's gRPC PORT_BASE+201, metrics +202),
# TRACE (/work/shared/traces/mooncake_conversation_trace.jsonl: Mooncake's
# FAST25-release/traces/conversation_trace.jsonl, Apache-2.0, unchanged).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${OUT:-$ROOT/results/epp-demo}
REQUESTS=${REQUESTS:-1000}
TIME_SCALE=${TIME_SCALE:-3}
ENGINES=${ENGINES:-8}
CACHE_BLOCKS=${CACHE_BLOCKS:-1344}
CONCURRENCY=${CONCURRENCY:-128}
EPP_TOKENS=${EPP_TOKENS:-estimate}
PORT_BASE=${PORT_BASE:-18100}
TRACE=${TRACE:-/work/shared/traces/mooncake_conversation_trace.jsonl}
BLOCK_TOKENS=512 # the replay's (and Mooncake's) block
MODEL=demo-model
PY=/usr/bin/python3 # Debian's, with python3-grpcio, -zmq, -msgpack, -xxhash
SIDECAR=$BUILD/server/cacheroute-sidecar
REPLAY=$BUILD/replay/cacheroute-replay
# The replay's conversation-trace prefill (20 + 0.08 (L - s) + 2e-6 (L^2 -
# s^2) ms, bench/README.md) with time compressed TIME_SCALE times, arrivals
# and service alike: the queues are the replay's at scale 1, in 1/TIME_SCALE
# of the time.
PREFILL=$(awk -v k="$TIME_SCALE" 'BEGIN { printf "%.6g,%.6g,%.6g", 20 / k, 0.08 / k, 2e-6 / k }')

for f in "$SIDECAR" "$REPLAY"; do
    [[ -x $f ]] || { echo "demo-epp: $f not built (run ./scripts/setup.sh)" >&2; exit 2; }
done
[[ -r $TRACE ]] || { echo "demo-epp: no trace at $TRACE (set TRACE)" >&2; exit 2; }
if ! $PY -c "import grpc, google.protobuf, msgpack, xxhash, zmq" 2>/dev/null ||
    ! command -v protoc >/dev/null; then
    echo "demo-epp: run ./scripts/install-deps.sh scripts/deps-test.txt first" >&2
    exit 2
fi
mkdir -p "$OUT"
rm -f "$OUT"/*.csv "$OUT"/*.json "$OUT"/*.dat "$OUT"/*.png "$OUT"/*.log

PIDS=()
stop_all() { # the last started first, each gone before the next: the sidecar before its engines
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null || true
        wait "${PIDS[i]}" 2>/dev/null || true
    done
    PIDS=()
}
trap stop_all EXIT
trap 'exit 130' INT TERM

wait_port() { # host:port, what
    local i
    for i in $(seq 1 100); do
        if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    echo "demo-epp: $2 did not open ${1} (see $OUT/*.log)" >&2
    exit 1
}

start_engines() { # log suffix
    local i
    for ((i = 0; i < ENGINES; i++)); do
        # --kv-namespace: the picker's namespace is the model (docs/epp.md),
        # so the engines name it in their events (a vLLM base model sends none).
        $PY "$ROOT/bench/epp/fake_engine.py" --port $((PORT_BASE + i)) \
            --kv-port $((PORT_BASE + 100 + i)) --kv-namespace "$MODEL" \
            --cache-blocks "$CACHE_BLOCKS" --block-tokens "$BLOCK_TOKENS" --prefill "$PREFILL" \
            --model "$MODEL" >"$OUT/engine-$i-$1.log" 2>&1 &
        PIDS+=($!)
    done
    for ((i = 0; i < ENGINES; i++)); do wait_port 127.0.0.1:$((PORT_BASE + i)) "engine $i"; done
}

echo "demo-epp: $REQUESTS requests of $(basename "$TRACE"), arrivals / $TIME_SCALE," \
     "$ENGINES engines of $CACHE_BLOCKS blocks, prefill $PREFILL ms; results in $OUT"
$PY "$ROOT/bench/epp/drive.py" --trace "$TRACE" --requests "$REQUESTS" \
    --block-tokens "$BLOCK_TOKENS" --write-trace "$OUT/workload.jsonl"

# ---- 1. cacheroute as the endpoint picker ----------------------------------
{
    echo '{"endpoints": ['
    for ((i = 0; i < ENGINES; i++)); do
        printf '  {"id": "engine-%d", "address": "127.0.0.1:%d"}%s\n' $i $((PORT_BASE + i)) \
            "$([[ $i -lt $((ENGINES - 1)) ]] && echo ,)"
    done
    echo ']}'
} >"$OUT/endpoints.json"
KV=()
for ((i = 0; i < ENGINES; i++)); do
    KV+=(--kv-events "$i=tcp://127.0.0.1:$((PORT_BASE + 100 + i))")
done

start_engines cacheroute
# The replay's cacheroute: the sidecar's defaults, its block size and index
# set to the cluster's (replay/README.md).
"$SIDECAR" --listen 127.0.0.1:$((PORT_BASE + 201)) --metrics-listen 127.0.0.1:$((PORT_BASE + 202)) \
    --epp-listen 127.0.0.1:$((PORT_BASE + 200)) --endpoints-file "$OUT/endpoints.json" \
    --n-shards "$ENGINES" --block-tokens "$BLOCK_TOKENS" --index-blocks "$CACHE_BLOCKS" \
    --epp-tokens "$EPP_TOKENS" "${KV[@]}" >"$OUT/sidecar.log" 2>&1 &
PIDS+=($!)
wait_port 127.0.0.1:$((PORT_BASE + 200)) "the sidecar's picker"
sleep 1 # the KV-event subscriptions
echo "demo-epp: cacheroute (through the picker) ..."
$PY "$ROOT/bench/epp/drive.py" --trace "$TRACE" --requests "$REQUESTS" --mode epp \
    --target 127.0.0.1:$((PORT_BASE + 200)) --time-scale "$TIME_SCALE" \
    --concurrency "$CONCURRENCY" --block-tokens "$BLOCK_TOKENS" --model "$MODEL" --out "$OUT"
curl -s "http://127.0.0.1:$((PORT_BASE + 202))/metrics" >"$OUT/sidecar-metrics.txt" 2>/dev/null ||
    true # the picker's own figures, for a look afterwards
stop_all

# ---- 2. round-robin on fresh engines ---------------------------------------
start_engines round-robin
ADDRS=$(for ((i = 0; i < ENGINES; i++)); do printf '127.0.0.1:%d,' $((PORT_BASE + i)); done)
echo "demo-epp: round-robin (no picker) ..."
$PY "$ROOT/bench/epp/drive.py" --trace "$TRACE" --requests "$REQUESTS" --mode rr \
    --engines "${ADDRS%,}" --time-scale "$TIME_SCALE" --concurrency "$CONCURRENCY" \
    --block-tokens "$BLOCK_TOKENS" --model "$MODEL" --out "$OUT"
stop_all

# ---- 3. the replay's prediction for the same workload ------------------------
"$REPLAY" --trace "$OUT/workload.jsonl" --shards "$ENGINES" --shard-blocks "$CACHE_BLOCKS" \
    --true-prefill "$PREFILL" --noise 0 --scale "$TIME_SCALE" --kv-events on \
    --policies cacheroute,round-robin --slo-p99-ms 60000 --series-window 10 \
    --json "$OUT/replay.json" --dump-routes "$OUT/replay-routes.csv" >"$OUT/replay.md"

# ---- 4. the figures ------------------------------------------------------------
$PY "$ROOT/bench/epp/report.py" "$OUT" | tee "$OUT/report.md"
echo "demo-epp: plot $OUT/ttft_cdf.png"
