#!/usr/bin/env bash
# EPP benchmark: HTTP requests through cacheroute's endpoint picker
# (cacheroute-sidecar --epp-listen) against a no-op ext_proc processor
# (bench/epp/noop_extproc.cc), both driven by bench/epp/load.c with Envoy's
# full-duplex sequence. Builds nothing: give the binaries (defaults under
# build/). Figures and how to read them: bench/README.md, "EPP: requests
# through the picker, against a no-op ext_proc".
#
# Each server runs pinned to one CPU (--server-cpu), the driver to another
# (--client-cpu). Per body size: 64 streams (--streams) full sequence and
# request phase only, plus one stream at the smallest size (the latency
# floor), and one open-loop point at the largest size (--rate: requests
# started at a fixed rate below saturation, so its decision time is the
# server's work, not its queue). The servers alternate point by point, so a change in the
# machine's load hits both.
#
# CPU per request per phase: the server's utime+stime (/proc/PID/stat, all
# threads) over the driver's measured window divided by the requests it
# completed. The request phase is the run with --request-only (headers,
# body, the destination and the echoed body, then half-close: stream
# set-up and tear-down included); the response phase is the full run's
# figure minus it. "req per server CPU-s" is 1e6 / the full run's CPU
# us per request: what one core of the server would serve when saturated,
# which the req/s shows only when the server (not the driver, about as
# costly per request as the no-op) is the limit (server CPU % near 100).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
ORIG_CMD="$0$(printf ' %q' "$@")"

SIDECAR=$ROOT/build/server/cacheroute-sidecar
NOOP=$ROOT/build/bench/epp/cacheroute-epp-noop
LOAD=$ROOT/build/bench/epp/cacheroute-epp-load
SIZES="1024 32768 225280"
STREAMS=64
SECONDS_PER=10
WARMUP=2
RATE=50
SERVER_CPU=1
CLIENT_CPU=0
NOOP_ONLY=0
OUT=""
SIDECAR_ARGS=()

usage() {
  cat <<'EOF'
usage: bench/epp_bench.sh [options]
  --sidecar BIN       cacheroute-sidecar (default build/server/cacheroute-sidecar)
  --sidecar-arg ARG   extra argument for the sidecar (repeatable)
  --noop BIN          the no-op ext_proc (default build/bench/epp/cacheroute-epp-noop)
  --load BIN          the driver (default build/bench/epp/cacheroute-epp-load)
  --noop-only         measure the no-op alone
  --sizes LIST        chat body bytes, space separated (default "1024 32768 225280")
  --streams N         concurrent streams (default 64)
  --seconds S         measured seconds per point (default 10)
  --warmup S          seconds before each measure (default 2)
  --rate R            the open-loop point: R requests/s at the largest size
                      (default 50; 0 = none)
  --server-cpu N      the servers' CPU (default 1)
  --client-cpu N      the driver's CPU (default 0)
  --out FILE          also write the Markdown table to FILE
EOF
}

while (($#)); do
  case "$1" in
    --sidecar) SIDECAR=$2; shift ;;
    --sidecar-arg) SIDECAR_ARGS+=("$2"); shift ;;
    --noop) NOOP=$2; shift ;;
    --load) LOAD=$2; shift ;;
    --noop-only) NOOP_ONLY=1 ;;
    --sizes) SIZES=$2; shift ;;
    --streams) STREAMS=$2; shift ;;
    --seconds) SECONDS_PER=$2; shift ;;
    --warmup) WARMUP=$2; shift ;;
    --rate) RATE=$2; shift ;;
    --server-cpu) SERVER_CPU=$2; shift ;;
    --client-cpu) CLIENT_CPU=$2; shift ;;
    --out) OUT=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "epp_bench.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

log() { echo "epp_bench: $*" >&2; }
die() { log "$*"; exit 1; }
for bin in "$NOOP" "$LOAD"; do [[ -x $bin ]] || die "not built: $bin"; done
((NOOP_ONLY)) || [[ -x $SIDECAR ]] || die "not built: $SIDECAR (or --noop-only)"

WORK=$(mktemp -d)
declare -A PID=() ADDR=()
stop_server() {
  local name=$1
  [[ -n ${PID[$name]:-} ]] || return 0
  kill -TERM "${PID[$name]}" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "${PID[$name]}" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "${PID[$name]}" 2>/dev/null || true
  wait "${PID[$name]}" 2>/dev/null || true
  unset "PID[$name]"
}
stop_all() { local name; for name in "${!PID[@]}"; do stop_server "$name"; done; }
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

freeport() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# 8 fake engines: the bench never forwards, so nothing listens there.
ENDPOINTS=$WORK/endpoints.json
{
  printf '{"endpoints": ['
  for i in 0 1 2 3 4 5 6 7; do
    ((i)) && printf ', '
    printf '{"id": "engine-%d", "address": "10.0.0.%d:8000"}' "$i" $((i + 1))
  done
  printf ']}\n'
} >"$ENDPOINTS"

# start NAME CMD... (the command gets its listen flags here)
start() {
  local name=$1; shift
  local port
  port=$(freeport)
  ADDR[$name]=127.0.0.1:$port
  case $name in
    noop) taskset -c "$SERVER_CPU" "$@" --listen "${ADDR[$name]}" >"$WORK/$name.log" 2>&1 & ;;
    cacheroute) taskset -c "$SERVER_CPU" "$@" --listen "127.0.0.1:$(freeport)" \
                  --epp-listen "${ADDR[$name]}" >"$WORK/$name.log" 2>&1 & ;;
  esac
  PID[$name]=$!
  sleep 0.5
  kill -0 "${PID[$name]}" 2>/dev/null || { cat "$WORK/$name.log" >&2; die "$name did not start"; }
}

NOOP_CMD=("$NOOP" --threads 1)
SIDECAR_CMD=("$SIDECAR" --threads 1 --metrics-listen "" --endpoints-file "$ENDPOINTS"
             ${SIDECAR_ARGS[@]+"${SIDECAR_ARGS[@]}"})
TARGETS=(noop)
start noop "${NOOP_CMD[@]}"
if ((!NOOP_ONLY)); then
  TARGETS=(cacheroute noop)
  start cacheroute "${SIDECAR_CMD[@]}"
fi

declare -A R=()  # R[target,size,streams,phase,key] = value
# point TARGET SIZE STREAMS PHASE (full, request, or rate=R: full, open loop)
point() {
  local target=$1 size=$2 streams=$3 phase=$4 out kv
  local args=(--target "${ADDR[$target]}" --streams "$streams" --body-bytes "$size"
              --seconds "$SECONDS_PER" --warmup "$WARMUP" --server-pid "${PID[$target]}")
  [[ $phase != request ]] || args+=(--request-only)
  [[ $phase != rate=* ]] || args+=(--rate "${phase#rate=}")
  if ! out=$(taskset -c "$CLIENT_CPU" timeout $((${SECONDS_PER%.*} + ${WARMUP%.*} + 60)) "$LOAD" "${args[@]}" 2>"$WORK/load.err"); then
    log "  $target $size B x$streams $phase: FAILED: $(tail -n 3 "$WORK/load.err" | tr '\n' ' ') $out"
    R[$target,$size,$streams,$phase,ok]=0
    return
  fi
  R[$target,$size,$streams,$phase,ok]=1
  for kv in $out; do R[$target,$size,$streams,$phase,${kv%%=*}]=${kv#*=}; done
  log "  $target $size B x$streams $phase: $out"
}

POINTS=()
for size in $SIZES; do
  POINTS+=("$size $STREAMS full" "$size $STREAMS request")
done
FIRST=${SIZES%% *} LAST=${SIZES##* }
POINTS+=("$FIRST 1 full")
[[ $RATE == 0 ]] || POINTS+=("$LAST $STREAMS rate=$RATE")
for p in "${POINTS[@]}"; do
  read -r size streams phase <<<"$p"
  for target in "${TARGETS[@]}"; do point "$target" "$size" "$streams" "$phase"; done
done
stop_all

# ---- report ------------------------------------------------------------------
v() { echo "${R[$1,$2,$3,$4,$5]:-}"; }
num() { awk -v a="$1" -v b="$2" -v op="$3" 'BEGIN {
  if (a == "" || b == "" || (op == "/" && b + 0 == 0)) { print "-"; exit }
  if (op == "/") printf "%.2f", a / b; else printf "%.0f", a - b }'; }
fmt() { [[ -n $1 ]] && awk -v x="$1" 'BEGIN { printf "%.0f", x }' || echo "-"; }

GIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
[[ -z $(git -C "$ROOT" status --porcelain 2>/dev/null | head -n1) ]] || GIT="$GIT (dirty)"
{
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), tree $GIT, $(nproc) CPUs ($(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo)), load average $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  echo "Command: \`$ORIG_CMD\`"
  echo
  echo "- no-op: \`${NOOP_CMD[*]} --listen ADDR\`, on CPU $SERVER_CPU"
  ((NOOP_ONLY)) || echo "- cacheroute: \`${SIDECAR_CMD[*]} --listen ADDR --epp-listen ADDR\` (8 endpoints), on CPU $SERVER_CPU"
  echo "- driver: \`$(basename "$LOAD") --streams N --body-bytes B --seconds $SECONDS_PER --warmup $WARMUP [--request-only]\`, on CPU $CLIENT_CPU"
  echo
  echo "| body B | streams | server | req/s | ratio | req per server CPU-s | ratio | decision p50 / p99 µs | server CPU µs/req: all / request / response | server CPU % | driver CPU % | errors |"
  echo "|---:|---:|---|---:|---:|---:|---:|---|---|---:|---:|---:|"
  for p in "${POINTS[@]}"; do
    read -r size streams phase <<<"$p"
    [[ $phase != request ]] || continue
    label=$streams
    [[ $phase == full ]] || label="$streams, ${phase#rate=}/s offered"
    for target in "${TARGETS[@]}"; do
      if [[ $(v "$target" "$size" "$streams" "$phase" ok) != 1 ]]; then
        echo "| $size | $label | $target | FAILED | | | | | | | | |"
        continue
      fi
      rps=$(v "$target" "$size" "$streams" "$phase" rps)
      all=$(v "$target" "$size" "$streams" "$phase" server_cpu_us_per_req)
      noop_all=$(v noop "$size" "$streams" "$phase" server_cpu_us_per_req)
      ratio="-" cratio="-"
      if [[ $target == cacheroute ]]; then
        ratio=$(num "$rps" "$(v noop "$size" "$streams" "$phase" rps)" /)
        cratio=$(num "$noop_all" "$all" /)
      fi
      req=""
      [[ $phase != full ]] || req=$(v "$target" "$size" "$streams" request server_cpu_us_per_req)
      resp=$( [[ -n $req ]] && num "$all" "$req" - || echo "-")
      f() { v "$target" "$size" "$streams" "$phase" "$1"; }
      echo "| $(f body_bytes) | $label | $target | $(fmt "$rps") | $ratio | $(num 1000000 "$all" / | awk '{ printf "%.0f", $1 }') | $cratio | $(fmt "$(f decision_p50_us)") / $(fmt "$(f decision_p99_us)") | $(fmt "$all") / $(fmt "$req") / $resp | $(fmt "$(f server_cpu_pct)") | $(fmt "$(f driver_cpu_pct)") | $(f errors)$( [[ $phase != rate=* ]] || echo ", $(f late) late") |"
    done
  done
} >"$WORK/report.md"
cat "$WORK/report.md"
[[ -z $OUT ]] || cp "$WORK/report.md" "$OUT"
