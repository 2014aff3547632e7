#!/usr/bin/env bash
# gRPC benchmark: cacheroute-sidecar against the C++ async "ceiling" server
# (bench/grpc/ceiling_server.cc), driven by h2load over loopback.
# See bench/grpc/README.md. Every run is bounded (-n requests, a timeout) and
# both servers are stopped on exit.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=/usr/bin/python3           # Debian's python: has python3-grpcio
HELPER=("$PY" "$HERE/grpc_bench.py")
ORIG_CMD="$0$(printf ' %q' "$@")"

usage() {
  cat <<'EOF'
usage: bench/grpc/run.sh [options]
  --sidecar BIN        cacheroute-sidecar to test (default: build/server/, then
                       the newest build-*/server/cacheroute-sidecar)
  --sidecar-arg ARG    extra argument for the sidecar (repeatable)
  --ceiling BIN        ceiling server (default: build bench/grpc into
                       build-bench-grpc/ with cmake, incrementally)
  --ceiling-only       do not run the sidecar (ceiling figures only)
  --quick              small request counts, one round (smoke run, ~15 s)
  --rounds N           measured rounds per scenario and target (default 5)
  --scenarios LIST     comma-separated subset of a,b,c,d,r,s (h2load, one
                       fixed body) and e,f,g,h,i,j,k (cacheroute-grpc-loadgen,
                       varied owners; see README.md) (default a,b,c,d)
  --loadgen BIN        load generator for e..k (default: built with the
                       ceiling)
  --lg-seconds S       measured seconds per loadgen run (default 3; --quick 0.5)
  --out FILE           also write the Markdown results table to FILE
  --threads N          server threads, both servers (default: number of
                       server CPUs)
  --server-cpus LIST   CPUs (taskset list) for the servers
  --client-cpus LIST   CPUs for h2load (defaults: split the machine, h2load on
                       the first half, servers on the second; 2 CPUs: 0 | 1)
  --h2load-threads N   h2load -t (default: number of client CPUs)
  --no-pin             no taskset; servers and h2load share the CPUs
  --latency-same-cpu   scenario b: run h2load on the server's CPUs (one call
                       in flight: no cross-CPU wake-up per call)
  --no-response-check  only require grpc-status OK from the sidecar's check
                       calls, not a matching response (recorded=, reason, ...)
  --timeout S          limit per h2load run in seconds (default 120)
  --quiet-budget S     seconds at most spent waiting for other programs to
                       go idle and measuring noisy runs again (default 90)
EOF
}

SIDECAR="" CEILING="" LOADGEN="" LG_SECONDS="" CEILING_ONLY=0 QUICK=0 ROUNDS="" SCENARIOS="a,b,c,d"
OUT="" THREADS="" SERVER_CPUS="" CLIENT_CPUS="" H2_THREADS="" PIN=1
RESPONSE_CHECK=1 H2_TIMEOUT=120 LAT_SAME_CPU=0 QUIET_BUDGET="" MAX_ATTEMPTS=""
SIDECAR_ARGS=()
while (($#)); do
  case "$1" in
    --sidecar) SIDECAR=$2; shift 2 ;;
    --sidecar-arg) SIDECAR_ARGS+=("$2"); shift 2 ;;
    --sidecar-arg=*) SIDECAR_ARGS+=("${1#*=}"); shift ;;
    --ceiling) CEILING=$2; shift 2 ;;
    --loadgen) LOADGEN=$2; shift 2 ;;
    --lg-seconds) LG_SECONDS=$2; shift 2 ;;
    --ceiling-only) CEILING_ONLY=1; shift ;;
    --quick) QUICK=1; shift ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --server-cpus) SERVER_CPUS=$2; shift 2 ;;
    --client-cpus) CLIENT_CPUS=$2; shift 2 ;;
    --h2load-threads) H2_THREADS=$2; shift 2 ;;
    --no-pin) PIN=0; shift ;;
    --latency-same-cpu) LAT_SAME_CPU=1; shift ;;
    --no-response-check) RESPONSE_CHECK=0; shift ;;
    --timeout) H2_TIMEOUT=$2; shift 2 ;;
    --quiet-budget) QUIET_BUDGET=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

die() { echo "run.sh: $*" >&2; exit 2; }
log() { echo "[$(date +%H:%M:%S)] $*" >&2; }

# ---- tools -------------------------------------------------------------------
command -v h2load >/dev/null || die "h2load not found (Debian: nghttp2-client)"
command -v protoc >/dev/null || die "protoc not found (Debian: protobuf-compiler)"
command -v taskset >/dev/null || die "taskset not found (Debian: util-linux)"
command -v timeout >/dev/null || die "timeout not found (coreutils)"
[[ -x $PY ]] || die "$PY not found"
"$PY" -c 'import grpc' 2>/dev/null ||
  die "$PY cannot import grpc (Debian: python3-grpcio)"

# ---- servers to test ---------------------------------------------------------
if ((!CEILING_ONLY)); then
  if [[ -z $SIDECAR ]]; then
    if [[ -x $ROOT/build/server/cacheroute-sidecar ]]; then
      SIDECAR=$ROOT/build/server/cacheroute-sidecar
    else
      SIDECAR=$(ls -1t "$ROOT"/build-*/server/cacheroute-sidecar 2>/dev/null | head -n1 || true)
    fi
    [[ -n $SIDECAR ]] || die "no cacheroute-sidecar in build/server/ or build-*/server/; pass --sidecar BIN or --ceiling-only"
  fi
  [[ -x $SIDECAR ]] || die "sidecar '$SIDECAR' is not an executable"
  SIDECAR=$(cd "$(dirname "$SIDECAR")" && pwd)/$(basename "$SIDECAR")
fi
if [[ -z $CEILING || -z $LOADGEN ]]; then
  log "building the ceiling server and the load generator in $ROOT/build-bench-grpc"
  build_log=$(mktemp)
  if ! { cmake -S "$HERE" -B "$ROOT/build-bench-grpc" -DCMAKE_BUILD_TYPE=Release &&
         cmake --build "$ROOT/build-bench-grpc" --target cacheroute-grpc-ceiling cacheroute-grpc-loadgen -j "$(nproc)"; } >"$build_log" 2>&1; then
    cat "$build_log" >&2; rm -f "$build_log"; die "building the ceiling server failed"
  fi
  rm -f "$build_log"
  [[ -n $CEILING ]] || CEILING=$ROOT/build-bench-grpc/cacheroute-grpc-ceiling
  [[ -n $LOADGEN ]] || LOADGEN=$ROOT/build-bench-grpc/cacheroute-grpc-loadgen
fi
[[ -x $CEILING ]] || die "ceiling '$CEILING' is not an executable"
[[ -x $LOADGEN ]] || die "load generator '$LOADGEN' is not an executable"
CEILING=$(cd "$(dirname "$CEILING")" && pwd)/$(basename "$CEILING")

# ---- CPU placement -----------------------------------------------------------
NPROC=$(nproc)
cpu_list() {  # expand a taskset list such as 0-3,6 into one CPU per line
  local part
  IFS=, read -ra parts <<<"$1"
  for part in "${parts[@]}"; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
cpu_count() { cpu_list "$1" | wc -l; }
join_cpus() { paste -sd, -; }
# The CPUs this script may use (a container's cpuset may not start at 0).
ALLOWED=$(taskset -cp $$ | sed 's/.*: *//')
mapfile -t ALLOWED_IDS < <(cpu_list "$ALLOWED")
if ((PIN)) && ((${#ALLOWED_IDS[@]} >= 2)); then
  # Split the allowed CPUs: the first half for h2load, the rest for servers.
  half=$((${#ALLOWED_IDS[@]} / 2))
  [[ -n $CLIENT_CPUS ]] || CLIENT_CPUS=$(printf '%s\n' "${ALLOWED_IDS[@]:0:half}" | join_cpus)
  [[ -n $SERVER_CPUS ]] || SERVER_CPUS=$(printf '%s\n' "${ALLOWED_IDS[@]:half}" | join_cpus)
  PIN_NOTE="h2load and the server under test on disjoint CPUs, so neither steals the other's CPU time; the idle server of the pair waits on the same CPUs"
else
  PIN=0
  CLIENT_CPUS=$ALLOWED SERVER_CPUS=$ALLOWED
  PIN_NOTE="not pinned: servers and h2load share the CPUs"
fi
[[ -n $THREADS ]] || THREADS=$(cpu_count "$SERVER_CPUS")
if [[ -z $H2_THREADS ]]; then
  H2_THREADS=$(cpu_count "$CLIENT_CPUS")
  ((PIN)) || H2_THREADS=$(((H2_THREADS + 1) / 2))
fi
SERVER_NCPU=$(cpu_count "$SERVER_CPUS")
# Command prefixes (arrays, not functions: a backgrounded function would run
# in a subshell, and $! would not be the server's pid).
SERVER_PIN=() CLIENT_PIN=() LAT_PIN=()
if ((PIN)); then
  SERVER_PIN=(taskset -c "$SERVER_CPUS") CLIENT_PIN=(taskset -c "$CLIENT_CPUS") LAT_PIN=("${CLIENT_PIN[@]}")
  ((LAT_SAME_CPU)) && LAT_PIN=("${SERVER_PIN[@]}")
fi

# ---- request counts ------------------------------------------------------------
if ((QUICK)); then
  [[ -n $ROUNDS ]] || ROUNDS=1
  N_TPUT=5000 N_LAT=1000 N_BATCH=500 WARM_DIV=5
  MAX_ATTEMPTS=1
  [[ -n $QUIET_BUDGET ]] || QUIET_BUDGET=0
else
  [[ -n $ROUNDS ]] || ROUNDS=5
  N_TPUT=100000 N_LAT=15000 N_BATCH=15000 WARM_DIV=10
fi
TPUT_C=8 TPUT_M=32 BATCH_C=4 BATCH_M=8
N_STREAMS=$((N_TPUT / 16))  # s: Routes streams of 16 messages (grpc_bench.py)
# Other programs (a compiler, a test suite) skew the figures: before each
# measured run wait until the machine is quiet, and measure a run again when
# other programs used more than OTHER_LIMIT CPUs during it; all this waiting
# and re-measuring is capped at QUIET_BUDGET seconds per invocation.
OTHER_LIMIT=0.10 RETRIES=0 WAITED=0 NOISY=0
((!QUICK)) || OTHER_LIMIT=1000  # --quick: runs too short to tell
[[ -n $MAX_ATTEMPTS ]] || MAX_ATTEMPTS=3
[[ -n $QUIET_BUDGET ]] || QUIET_BUDGET=90

# ---- work dir, cleanup -------------------------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/cacheroute-grpc-bench.XXXXXX")
declare -A PID=() ADDR=() EXIT_NOTE=()
stop_server() {  # stop_server NAME: SIGTERM, then SIGKILL after 5 s
  local name=$1 pid=${PID[$1]:-} i rc
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < 50; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    EXIT_NOTE[$name]="did not stop within 5 s of SIGTERM; killed"
  fi
  rc=0; wait "$pid" 2>/dev/null || rc=$?
  [[ -n ${EXIT_NOTE[$name]:-} ]] || EXIT_NOTE[$name]="exit status $rc after SIGTERM"
  unset "PID[$name]"
}
cleanup() {
  local name
  for name in "${!PID[@]}"; do stop_server "$name"; done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# start_server NAME CMD... : start on a free loopback port (CMD gets
# "--listen 127.0.0.1:PORT" appended), wait until it answers gRPC.
start_server() {
  local name=$1; shift
  local try port rc
  for try in 1 2 3; do
    port=$("${HELPER[@]}" freeport)
    ${SERVER_PIN[@]+"${SERVER_PIN[@]}"} "$@" --listen "127.0.0.1:$port" >"$WORK/$name.log" 2>&1 &
    PID[$name]=$!
    ADDR[$name]=127.0.0.1:$port
    rc=0; "${HELPER[@]}" wait "${ADDR[$name]}" "${PID[$name]}" 30 || rc=$?
    ((rc == 0)) && return 0
    if ((rc == 1)); then  # the process exited
      wait "${PID[$name]}" 2>/dev/null || true
      unset "PID[$name]"
      grep -qiE 'address|bind|port|in use' "$WORK/$name.log" && continue
      return 1
    fi
    stop_server "$name"
    return 1
  done
  return 1
}

TARGETS=(ceiling)
((CEILING_ONLY)) || TARGETS=(sidecar ceiling)

log "request bodies (protoc --encode)"
"${HELPER[@]}" bodies "$ROOT/proto" "$WORK/bodies"

CEILING_CMD=("$CEILING" --threads "$THREADS")
start_server ceiling "${CEILING_CMD[@]}" || { cat "$WORK/ceiling.log" >&2; die "the ceiling server did not start"; }
log "ceiling: ${ADDR[ceiling]} (pid ${PID[ceiling]})"
SIDECAR_CMD_STR="not run"
if ((!CEILING_ONLY)); then
  SIDECAR_CMD=("$SIDECAR" --threads "$THREADS" --metrics-listen "" ${SIDECAR_ARGS[@]+"${SIDECAR_ARGS[@]}"})
  if ! start_server sidecar "${SIDECAR_CMD[@]}"; then
    if grep -q -- 'metrics-listen' "$WORK/sidecar.log"; then
      log "the sidecar rejects --metrics-listen; starting it without"
      SIDECAR_CMD=("$SIDECAR" --threads "$THREADS" ${SIDECAR_ARGS[@]+"${SIDECAR_ARGS[@]}"})
      start_server sidecar "${SIDECAR_CMD[@]}" || { cat "$WORK/sidecar.log" >&2; die "the sidecar did not start"; }
    else
      cat "$WORK/sidecar.log" >&2; die "the sidecar did not start"
    fi
  fi
  log "sidecar: ${ADDR[sidecar]} (pid ${PID[sidecar]})"
  SIDECAR_CMD_STR="$(printf '%q ' "${SIDECAR_CMD[@]}")--listen 127.0.0.1:PORT"
  # The sidecar also reads CACHEROUTE_* variables; record any that are set.
  SIDECAR_ENV=$(env | grep '^CACHEROUTE_' | sort | tr '\n' ' ' || true)
  [[ -z $SIDECAR_ENV ]] || SIDECAR_CMD_STR="$SIDECAR_ENV$SIDECAR_CMD_STR"
fi

QUIET_DEADLINE=$((SECONDS + QUIET_BUDGET))
RESULTS=$WORK/results.tsv
: >"$RESULTS"
declare -A PARAMS=()
CLK_TCK=$(getconf CLK_TCK)

cpu_ticks() {  # utime+stime of a process, all threads
  awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0
}
busy_ticks() {  # non-idle ticks of the machine, hypervisor steal included
  awk '/^cpu / {print $2 + $3 + $4 + $7 + $8 + $9; exit}' /proc/stat
}
child_seconds() {  # user+sys seconds of this shell's finished children, as
  # saved by `times >FILE` (a builtin run in this shell: in a subshell it
  # would not see them)
  awk 'NR == 2 { s = 0
         for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); s += a[1] * 60 + a[2] }
         printf "%.3f", s }' "$1"
}

# check TARGET SCENARIO METHOD BODY SPEC -> sets CHECK_BYTES; 1 on failure
# (a stream method gets the body's messages as one stream: its .grpc file)
check() {
  local target=$1 scen=$2 method=$3 body=$4 spec=$5 out file=$WORK/bodies/$4.pb
  [[ $target == sidecar && $RESPONSE_CHECK == 1 ]] || spec=""
  [[ $method != Routes ]] || file=$WORK/bodies/$body.grpc
  if out=$("${HELPER[@]}" call "${ADDR[$target]}" "$method" "$file" ${spec:+--expect "$spec"} 2>&1); then
    CHECK_BYTES=${out#OK }
    return 0
  fi
  CHECK_FAIL="gRPC check call: ${out//$'\n'/ }"
  return 1
}

# run_load SERVER_TICKS0 SERVER_TICKS1 BUSY0 BUSY1 NS0 NS1 -> "cpu other":
# the server's CPU use in % of its CPUs, and the load other programs added in
# CPUs: the machine's busy time minus the server's and this shell's finished
# children's (the client, timeout, taskset; from `times` in $WORK/times0/1).
run_load() {
  awk -v d="$(($2 - $1))" -v b="$(($4 - $3))" \
      -v h0="$(child_seconds "$WORK/times0")" -v h1="$(child_seconds "$WORK/times1")" \
      -v hz="$CLK_TCK" -v ns="$(($6 - $5))" -v k="$SERVER_NCPU" 'BEGIN {
        w = ns / 1e9; o = ((b - d) / hz - (h1 - h0)) / w; if (o < 0) o = 0
        printf "%.0f %.2f\n", 100 * d / hz / w / k, o }'
}

over_limit() { awk -v o="$1" -v l="$OTHER_LIMIT" 'BEGIN { exit !(o > l) }'; }
budget_left() { ((SECONDS < QUIET_DEADLINE)); }
# Wait (within the budget) until the machine has been quiet for 0.5 s: our
# servers idle, so any busy time is other programs'.
wait_quiet() {
  local b0 b1 load waited=0
  while budget_left; do
    b0=$(busy_ticks); sleep 0.5; b1=$(busy_ticks)
    load=$(awk -v b="$((b1 - b0))" -v hz="$CLK_TCK" 'BEGIN { printf "%.2f", b / hz / 0.5 }')
    over_limit "$load" || break
    ((waited)) || log "  waiting for other programs to go idle ($load CPUs busy)"
    waited=1 WAITED=$((WAITED + 1))
  done
}

h2_threads() { echo $(($1 < H2_THREADS ? $1 : H2_THREADS)); }  # h2load: -t <= -c

# measure SCENARIO TARGET ROUND METHOD BODY N C M MIN_BYTES
# One discarded warm-up run, then the measured run. The measured run is
# repeated (at most MAX_ATTEMPTS times) while other processes took more than
# OTHER_LIMIT CPUs on average during it (e.g. a compiler running meanwhile).
measure() {
  local scen=$1 target=$2 round=$3 method=$4 body=$5 n=$6 c=$7 m=$8 minb=$9
  local url="http://${ADDR[$target]}/cacheroute.v1.CacheRoute/$method"
  local pin=(${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"})
  [[ $scen != b_* ]] || pin=(${LAT_PIN[@]+"${LAT_PIN[@]}"})
  local h2=(${pin[@]+"${pin[@]}"} timeout "$H2_TIMEOUT"
            h2load -t "$(h2_threads "$c")" -c "$c" -m "$m" -d "$WORK/bodies/$body.grpc"
            -H 'content-type: application/grpc' -H 'te: trailers')
  local out=$WORK/h2load.out lf=$WORK/h2load.log warm=$((n / WARM_DIV))
  local t0 t1 c0 c1 b0 b1 cpu other res rc attempt
  "${h2[@]}" -n "$warm" "$url" >/dev/null 2>&1 || true
  local noisy=0
  for ((attempt = 1; attempt <= MAX_ATTEMPTS; attempt++)); do
    wait_quiet
    rm -f "$lf"
    b0=$(busy_ticks); c0=$(cpu_ticks "${PID[$target]}"); times >"$WORK/times0"; t0=$(date +%s%N)
    rc=0
    "${h2[@]}" -n "$n" --log-file="$lf" "$url" >"$out" 2>&1 || rc=$?
    t1=$(date +%s%N); times >"$WORK/times1"; c1=$(cpu_ticks "${PID[$target]}"); b1=$(busy_ticks)
    # Server CPU use in % of its CPUs; other load in CPUs: the machine's busy
    # time minus the server's and h2load's (+ timeout, taskset).
    read -r cpu other < <(run_load "$c0" "$c1" "$b0" "$b1" "$t0" "$t1")
    if ((rc == 124)); then
      res="FAIL h2load timed out after ${H2_TIMEOUT}s"
    elif ((rc != 0)); then
      res="FAIL h2load exit status $rc: $(tail -n 2 "$out" | tr '\n' ' ')"
    else
      res=$("${HELPER[@]}" h2load "$out" "$n" "$lf" --min-bytes "$minb" || true)
    fi
    noisy=0
    [[ $res == OK* ]] || break
    over_limit "$other" || break
    noisy=1
    if ((attempt < MAX_ATTEMPTS)) && budget_left; then
      log "  $scen $target round $round: other programs used $other CPUs meanwhile; measuring again"
      RETRIES=$((RETRIES + 1))
    else
      break
    fi
  done
  NOISY=$((NOISY + noisy))
  if [[ $res == OK* ]]; then
    read -r _ rps p50 p99 rbytes <<<"$res"
    printf '%s\t%s\t%s\tOK\t%s\t%s\t%s\t%s\t\t%s\t%s\n' "$scen" "$target" "$round" "$rps" "$p50" "$p99" "$cpu" "$other" "$noisy" >>"$RESULTS"
    log "  $scen $target round $round: $rps calls/s, p50 ${p50} us, p99 ${p99} us, server CPU ${cpu}%, other load ${other} CPUs, ${rbytes} response B/call$( ((noisy)) && echo ' (noisy)')"
  else
    printf '%s\t%s\t%s\tFAIL\t\t\t\t\t%s\t\n' "$scen" "$target" "$round" "${res#FAIL }" >>"$RESULTS"
    log "  $scen $target round $round: ${res}"
  fi
}

# scenario KEY METHOD BODY SPEC N C M
scenario() {
  local key=$1 method=$2 body=$3 spec=$4 n=$5 c=$6 m=$7
  local target round i minb
  PARAMS[$key]="h2load -t $(h2_threads "$c") -c $c -m $m -n $n"
  if [[ $key == b_* ]] && ((PIN && LAT_SAME_CPU)); then PARAMS[$key]+=" (on the server's CPUs)"; fi
  declare -A ok=() minbytes=()
  log "scenario $key: $method ($body), ${PARAMS[$key]}"
  for target in "${TARGETS[@]}"; do
    if check "$target" "$key" "$method" "$body" "$spec"; then
      ok[$target]=1
      minbytes[$target]=$((5 + CHECK_BYTES / 2))
    else
      log "  $target: $CHECK_FAIL"
      printf '%s\t%s\t0\tFAIL\t\t\t\t\t%s\n' "$key" "$target" "$CHECK_FAIL" >>"$RESULTS"
    fi
  done
  for ((round = 1; round <= ROUNDS; round++)); do
    local order=("${TARGETS[@]}")
    if ((${#TARGETS[@]} == 2 && round % 2 == 0)); then order=("${TARGETS[1]}" "${TARGETS[0]}"); fi
    for target in "${order[@]}"; do
      [[ -n ${ok[$target]:-} ]] || continue
      measure "$key" "$target" "$round" "$method" "$body" "$n" "$c" "$m" "${minbytes[$target]}"
    done
  done
  for target in "${TARGETS[@]}"; do  # still healthy after the load?
    [[ -n ${ok[$target]:-} ]] || continue
    if ! check "$target" "$key" "$method" "$body" "$spec"; then
      log "  $target after the scenario: $CHECK_FAIL"
      printf '%s\t%s\t0\tFAIL\t\t\t\t\tafter the runs, %s\n' "$key" "$target" "$CHECK_FAIL" >>"$RESULTS"
    fi
  done
}

# shellcheck source=varied.sh
source "$HERE/varied.sh"

SEL_SPEC="select=bench-req-000001"
IFS=, read -ra WANT <<<"$SCENARIOS"
for s in "${WANT[@]}"; do
  case "$s" in
    a) scenario a RecordArrival ra1 "recorded=1,routes=1" "$N_TPUT" "$TPUT_C" "$TPUT_M" ;;
    b) scenario b_ra RecordArrival ra1 "recorded=1,routes=1" "$N_LAT" 1 1
       scenario b_sel SelectInjection sel_dry "$SEL_SPEC" "$N_LAT" 1 1 ;;
    c) scenario c RecordArrival ra1000 "recorded=1000,routes=0" "$N_BATCH" "$BATCH_C" "$BATCH_M" ;;
    d) scenario d_dry SelectInjection sel_dry "$SEL_SPEC" "$N_TPUT" "$TPUT_C" "$TPUT_M"
       # Last: dry_run=false reserves GPU/link time in the sidecar's timeline.
       scenario d_live SelectInjection sel_live "$SEL_SPEC" "$N_TPUT" "$TPUT_C" "$TPUT_M" ;;
    # Route with 64 block hashes; s: Routes streams of 16 such messages
    # (h2load sends them as one body; N_STREAMS streams, as many messages
    # as r's calls)
    r) scenario r Route route64 "decided=1" "$N_TPUT" "$TPUT_C" "$TPUT_M" ;;
    s) scenario s Routes routes64 "decided=1" "$N_STREAMS" "$TPUT_C" "$TPUT_M" ;;
    [e-k]) varied_scenario "$s" ;;
    *) die "unknown scenario '$s' (a, b, c, d, r, s, e, ..., k)" ;;
  esac
done

for name in "${!PID[@]}"; do stop_server "$name"; done

# ---- report ------------------------------------------------------------------
GIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo "no commit")
if [[ $GIT != "no commit" ]] && [[ -n $(git -C "$ROOT" status --porcelain 2>/dev/null | head -n1) ]]; then GIT="$GIT (dirty)"; fi
PARAMS_JSON=$(for k in "${!PARAMS[@]}"; do printf '%s\t%s\n' "$k" "${PARAMS[$k]}"; done)
export META_DATE=$(date -u '+%Y-%m-%d %H:%M UTC') META_NPROC=$NPROC \
  META_CPU=$(awk -F': *' '/^model name/ {print $2; exit}' /proc/cpuinfo) \
  META_KERNEL=$(uname -r) META_H2=$(h2load --version 2>/dev/null | head -n1) \
  META_GRPCPP=$(pkg-config --modversion grpc++ 2>/dev/null || echo unknown) \
  META_GIT=$GIT META_THREADS=$THREADS META_SCPUS=$SERVER_CPUS META_CCPUS=$CLIENT_CPUS \
  META_H2T=$H2_THREADS META_PIN=$PIN_NOTE META_PINNED=$PIN META_ROUNDS=$ROUNDS META_CMD=$ORIG_CMD \
  META_SIDECAR=$SIDECAR_CMD_STR META_CEILING="${CEILING_CMD[*]} --listen 127.0.0.1:PORT" \
  META_TARGETS="${TARGETS[*]}" META_PARAMS=$PARAMS_JSON META_RCHECK=$RESPONSE_CHECK META_QUICK=$QUICK \
  META_RETRIES=$RETRIES META_OTHER_LIMIT=$OTHER_LIMIT META_WARM_DIV=$WARM_DIV \
  META_WAITED=$WAITED META_NOISY=$NOISY META_QUIET_BUDGET=$QUIET_BUDGET META_ELAPSED=$SECONDS \
  META_EXIT="$(for k in "${!EXIT_NOTE[@]}"; do printf '%s: %s; ' "$k" "${EXIT_NOTE[$k]}"; done)"
"$PY" - "$WORK/meta.json" <<'EOF'
import json, os, sys
e = os.environ
json.dump({
    "date": e["META_DATE"], "nproc": e["META_NPROC"], "cpu_model": e["META_CPU"],
    "kernel": e["META_KERNEL"], "h2load_version": e["META_H2"],
    "grpcpp_version": e["META_GRPCPP"], "git": e["META_GIT"],
    "threads": e["META_THREADS"], "server_cpus": e["META_SCPUS"],
    "client_cpus": e["META_CCPUS"], "h2load_threads": e["META_H2T"],
    "pin_note": e["META_PIN"], "pinned": e["META_PINNED"] == "1", "rounds": e["META_ROUNDS"], "command": e["META_CMD"],
    "sidecar_cmd": e["META_SIDECAR"], "ceiling_cmd": e["META_CEILING"],
    "targets": e["META_TARGETS"].split(), "quick": e["META_QUICK"] == "1", "response_check": e["META_RCHECK"] == "1",
    "retries": e["META_RETRIES"], "other_limit": e["META_OTHER_LIMIT"],
    "warm_div": e["META_WARM_DIV"], "waited": int(e["META_WAITED"]) / 2,
    "noisy": int(e["META_NOISY"]), "quiet_budget": e["META_QUIET_BUDGET"],
    "elapsed": int(e["META_ELAPSED"]),
    "exit": e["META_EXIT"].strip().rstrip(";"),
    "params": dict(l.split("\t", 1) for l in e["META_PARAMS"].splitlines() if l),
}, open(sys.argv[1], "w"))
EOF
rc=0
"${HELPER[@]}" report "$RESULTS" "$WORK/meta.json" >"$WORK/report.md" || rc=$?
cat "$WORK/report.md"
if [[ -n $OUT ]]; then cp "$WORK/report.md" "$OUT"; log "results written to $OUT"; fi
exit "$rc"
