#!/usr/bin/env bash
# bench/grpc/ab.sh: two cacheroute-sidecar builds side by side on one of
# run.sh's varied-owner loads, in interleaved rounds, reporting what each
# costs per call in server CPU (utime+stime over a fixed number of calls),
# which the client's own limits and other programs skew less than calls/s.
# With --perf, one more run of each under `perf record -g` and the share of
# the samples in libprotobuf-c and in the top symbols.
#
#   bench/grpc/ab.sh --a OLD/cacheroute-sidecar --b NEW/cacheroute-sidecar \
#     --loadgen build-rel/bench/grpc/cacheroute-grpc-loadgen --load j --rounds 5
#
# Loads (as in run.sh, estimator filled with the 1M ids first): g = 16
# owners/call; j = 1,000 owners/call, routes on; h = j with omit_routes;
# i = h over 10M ids into a table of 1M (--max-owners 1000000: every new
# owner evicts).
# The servers are pinned to the last CPU, the client to the others. Every
# run is bounded (--calls, a timeout) and both servers stop on exit.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=/usr/bin/python3
A="" B="" LOADGEN="" LOAD=j ROUNDS=5 CALLS="" PERF=0
while (($#)); do
  case "$1" in
    --a) A=$2; shift 2 ;;
    --b) B=$2; shift 2 ;;
    --loadgen) LOADGEN=$2; shift 2 ;;
    --load) LOAD=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --calls) CALLS=$2; shift 2 ;;
    --perf) PERF=1; shift ;;
    *) echo "usage: ab.sh --a BIN --b BIN --loadgen BIN [--load g|h|i|j] [--rounds N] [--calls N] [--perf]" >&2
       exit 2 ;;
  esac
done
[[ -x $A && -x $B && -x $LOADGEN ]] || { echo "ab.sh: --a, --b and --loadgen must be executables" >&2; exit 2; }
IDS=1000000 MAX_OWNERS=2000000
case "$LOAD" in
  g) LG=(--owners 16 --connections 8 --concurrency 256); : "${CALLS:=200000}" ;;
  h) LG=(--owners 1000 --omit-routes --connections 4 --concurrency 32 --ring 4096); : "${CALLS:=20000}" ;;
  i) LG=(--owners 1000 --omit-routes --connections 4 --concurrency 32 --ring 4096); : "${CALLS:=10000}"
     IDS=10000000 MAX_OWNERS=1000000 ;;
  j) LG=(--owners 1000 --connections 4 --concurrency 32 --ring 4096); : "${CALLS:=20000}" ;;
  *) echo "ab.sh: --load must be g, h, i or j" >&2; exit 2 ;;
esac
LG=(--dist uniform --ids "$IDS" "${LG[@]}")
last=$(($(nproc) - 1))
SERVER_PIN=(taskset -c "$last") CLIENT_PIN=(taskset -c "0-$((last > 0 ? last - 1 : 0))")
WORK=$(mktemp -d)
declare -A PID ADDR
cleanup() {
  for n in "${!PID[@]}"; do kill "${PID[$n]}" 2>/dev/null || true; wait "${PID[$n]}" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT

start() {  # start NAME BIN: a sidecar on a free port, estimator filled
  local port
  port=$("$PY" "$HERE/grpc_bench.py" freeport)
  "${SERVER_PIN[@]}" "$2" --threads 1 --metrics-listen "" --replan-interval 0 \
    --max-owners "$MAX_OWNERS" --listen "127.0.0.1:$port" >"$WORK/$1.log" 2>&1 &
  PID[$1]=$! ADDR[$1]=127.0.0.1:$port
  "$PY" "$HERE/grpc_bench.py" wait "${ADDR[$1]}" "${PID[$1]}" 30 || { cat "$WORK/$1.log" >&2; exit 1; }
  lg "$1" --dist cycle --ids 1000000 --owners 1000 --omit-routes --count 1000 --concurrency 8 >/dev/null
}
lg() { local n=$1; shift; "${CLIENT_PIN[@]}" timeout 300 "$LOADGEN" --target "${ADDR[$n]}" "$@"; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# measure NAME: server CPU microseconds per call and calls/s of one run.
measure() {
  local c0 c1 out
  lg "$1" "${LG[@]}" --count $((CALLS / 10)) --check >/dev/null  # warm-up
  c0=$(ticks "${PID[$1]}")
  out=$(lg "$1" "${LG[@]}" --count "$CALLS" --check)
  c1=$(ticks "${PID[$1]}")
  "$PY" -c 'import json,sys; j=json.loads(sys.argv[1]); t=int(sys.argv[2])*1e6/int(sys.argv[3])
print("%.1f %.0f" % (t / j["calls"], j["calls_per_s"]))' "$out" $((c1 - c0)) "$(getconf CLK_TCK)"
}

start a "$A"
start b "$B"
echo "load $LOAD: loadgen ${LG[*]} --count $CALLS; servers on CPU $last, 1 thread"
echo "| round | a: server us/call | b: server us/call | b/a | a calls/s | b calls/s |"
echo "|---:|---:|---:|---:|---:|---:|"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then read -r ua ra < <(measure a); read -r ub rb < <(measure b)
  else read -r ub rb < <(measure b); read -r ua ra < <(measure a); fi
  echo "| $r | $ua | $ub | $(awk -v a="$ua" -v b="$ub" 'BEGIN{printf "%.2f", b/a}') | $ra | $rb |"
done
((PERF)) || exit 0
for n in a b; do
  perf record -q -g -o "$WORK/$n.data" -p "${PID[$n]}" -- sleep 4 >/dev/null 2>&1 &
  prec=$!
  lg "$n" "${LG[@]}" --duration 4 >/dev/null || true
  wait "$prec" || true
  echo "perf $n: share of samples (self) by DSO, then the top symbols"
  perf report -q -i "$WORK/$n.data" --no-children -g none --sort dso 2>/dev/null | head -8 || true
  perf report -q -i "$WORK/$n.data" --no-children -g none --sort sym 2>/dev/null | grep -v "^$" | head -15 || true
done
