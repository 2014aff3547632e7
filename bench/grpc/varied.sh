# shellcheck shell=bash
# bench/grpc/varied.sh: scenarios e..k of run.sh, driven by
# cacheroute-grpc-loadgen (a new body per call, owners from a seeded
# distribution) instead of h2load. Sourced by run.sh: uses its servers
# (start_server, stop_server, ADDR, PID, SIDECAR_CMD), placement (CLIENT_PIN)
# and bookkeeping (RESULTS, PARAMS, wait_quiet, run_load).
#
# Each scenario starts its own sidecar(s) with the settings it needs (so no
# scenario inherits another's estimator), fills the estimator first where the
# load draws from tracked owners, then measures sidecar(s) and ceiling in
# interleaved rounds, and stops its sidecar(s).

LG_WARMUP=0.5
[[ -n $LG_SECONDS ]] || { ((QUICK)) && LG_SECONDS=0.5 || LG_SECONDS=3; }
((!QUICK)) || LG_WARMUP=0.1
LG_TIMEOUT=120
# Same in-flight load as h2load's a (-c 8 -m 32) and c (-c 4 -m 8).
LG_SMALL=(--connections 8 --concurrency 256)
# Building a 1,000-owner body costs the client ~11 us (uniform; Zipf ~30),
# about a quarter of its CPU at the ceiling's rate, so these cycle a ring of
# 4,096 pre-built bodies: 4M draws, more distinct ids than --max-owners 1M,
# so scenario i keeps evicting.
LG_BATCH=(--connections 4 --concurrency 32 --ring 4096)
LG_1M=(--dist uniform --ids 1000000)
LG_TRACK=(--replan-interval 0 --max-owners 2000000)  # 1M ids: no eviction

# varied_def KEY: sets V_LG (loadgen args), V_SC (sidecar args), V_FILL (ids
# to record once before measuring; 0 = none), V_TABLE (1 = also measure a
# sidecar with a table of --ids sessions installed).
varied_def() {
  V_FILL=0 V_TABLE=0 V_SC=("${LG_TRACK[@]}")
  case "$1" in
    e) V_LG=(--dist fixed --owners 1 "${LG_SMALL[@]}") V_SC=(--replan-interval 0) ;;
    f) V_LG=("${LG_1M[@]}" --owners 1 "${LG_SMALL[@]}") V_FILL=1000000 ;;
    g) V_LG=("${LG_1M[@]}" --owners 16 "${LG_SMALL[@]}") V_FILL=1000000 ;;
    h) V_LG=("${LG_1M[@]}" --owners 1000 --omit-routes "${LG_BATCH[@]}") V_FILL=1000000 ;;
    i) V_LG=(--dist uniform --ids 10000000 --owners 1000 --omit-routes "${LG_BATCH[@]}")
       V_SC=(--replan-interval 0 --max-owners 1000000) V_FILL=1000000 ;;
    j) V_LG=("${LG_1M[@]}" --owners 1000 "${LG_BATCH[@]}") V_FILL=1000000 V_TABLE=1 ;;
    k) V_LG=(--method stream --dist fixed --owners 1 --streams 8 --concurrency 32 --connections 8
             --deadline 10)
       V_SC=(--replan-interval 0) ;;
  esac
}

# lg TARGET ARGS...: one loadgen run against TARGET (its JSON line on stdout).
lg() {
  local target=$1; shift
  ${CLIENT_PIN[@]+"${CLIENT_PIN[@]}"} timeout "$LG_TIMEOUT" "$LOADGEN" \
    --target "${ADDR[$target]}" --threads "$H2_THREADS" "$@"
}

# lg_measure SCEN TARGET ROUND ARGS...: one measured run, into RESULTS.
lg_measure() {
  local scen=$1 target=$2 round=$3; shift 3
  local t0 t1 c0 c1 b0 b1 cpu other res rc=0 noisy=0
  wait_quiet
  b0=$(busy_ticks); c0=$(cpu_ticks "${PID[$target]}"); times >"$WORK/times0"; t0=$(date +%s%N)
  lg "$target" --warmup "$LG_WARMUP" --duration "$LG_SECONDS" "$@" >"$WORK/lg.json" 2>"$WORK/lg.err" || rc=$?
  t1=$(date +%s%N); times >"$WORK/times1"; c1=$(cpu_ticks "${PID[$target]}"); b1=$(busy_ticks)
  read -r cpu other < <(run_load "$c0" "$c1" "$b0" "$b1" "$t0" "$t1")
  res=$("${HELPER[@]}" loadgen "$WORK/lg.json" "$rc" "$WORK/lg.err" || true)
  over_limit "$other" && noisy=1
  NOISY=$((NOISY + noisy))
  if [[ $res == OK* ]]; then
    local rps p50 p99 aps
    read -r _ rps p50 p99 aps <<<"$res"
    printf '%s\t%s\t%s\tOK\t%s\t%s\t%s\t%s\t\t%s\t%s\t%s\n' "$scen" "$target" "$round" \
      "$rps" "$p50" "$p99" "$cpu" "$other" "$noisy" "$aps" >>"$RESULTS"
    log "  $scen $target round $round: $rps calls/s, $aps arrivals/s, p50 ${p50} us, p99 ${p99} us, server CPU ${cpu}%, other load ${other} CPUs$( ((noisy)) && echo ' (noisy)')"
  else
    printf '%s\t%s\t%s\tFAIL\t\t\t\t\t%s\t\n' "$scen" "$target" "$round" "${res#FAIL }" >>"$RESULTS"
    log "  $scen $target round $round: $res"
  fi
}

# varied_start NAME: a fresh sidecar for this scenario, estimator filled.
varied_start() {
  local name=$1
  start_server "$name" "${SIDECAR_CMD[@]}" "${V_SC[@]}" ||
    { cat "$WORK/$name.log" >&2; die "the sidecar ($name) did not start"; }
  ((V_FILL)) || return 0
  local ids=${V_LG[*]}; ids=${ids#*--ids }; ids=${ids%% *}
  lg "$name" --dist cycle --ids "$ids" --owners 1000 --omit-routes --count $((V_FILL / 1000)) \
    --concurrency 8 >/dev/null || die "filling the estimator of $name failed"
}

varied_scenario() {
  local key=$1 targets=(ceiling) round target main=0
  varied_def "$key"
  # run.sh's own sidecar (scenarios a..d) makes way for this scenario's.
  [[ -z ${PID[sidecar]:-} ]] || { main=1; stop_server sidecar; }
  PARAMS[$key]="${V_LG[*]}"
  if ((!CEILING_ONLY)); then
    varied_start sidecar
    targets=(sidecar "${targets[@]}")
    if ((V_TABLE)); then
      varied_start sidecar_t
      log "  installing a table of 1,000,000 sessions on sidecar_t"
      lg sidecar_t --install-table 1000000 --duration 0 >/dev/null ||
        die "installing the table failed"
      targets=(sidecar_t "${targets[@]}")
    fi
    PARAMS[$key]+="; sidecar: ${V_SC[*]}"
    ((V_FILL)) && PARAMS[$key]+="; estimator filled with $V_FILL owners first"
  fi
  log "scenario $key: loadgen ${PARAMS[$key]}"
  for ((round = 1; round <= ROUNDS; round++)); do
    local order=("${targets[@]}")
    ((round % 2)) || mapfile -t order < <(printf '%s\n' "${targets[@]}" | tac)
    for target in "${order[@]}"; do
      local check=()
      [[ $target == ceiling ]] || check=(--check)
      lg_measure "$key" "$target" "$round" "${V_LG[@]}" ${check[@]+"${check[@]}"}
    done
  done
  for target in "${targets[@]}"; do [[ $target == ceiling ]] || stop_server "$target"; done
  if ((main)); then
    start_server sidecar "${SIDECAR_CMD[@]}" || die "the sidecar did not restart"
  fi
}
