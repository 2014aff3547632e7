#!/usr/bin/env bash
# Smoke test for bench/grpc (a ctest test; builds nothing).
#   bench/grpc/smoke_test.sh CEILING_BIN LOADGEN_BIN
# 1. Runs scenarios a, r and s (h2load: RecordArrival, Route, Routes
#    streams), e and k (the load generator) of run.sh with --quick against
#    the ceiling only, and asserts that every call succeeded and that the
#    server stopped cleanly on SIGTERM.
# 2. Starts a ceiling itself and runs the load generator against it for a
#    second in each mode (every distribution, omit_routes, a ring, counted
#    calls, streams of several owners), asserting every call ended OK; then
#    asserts that a failed check (--check against the ceiling's empty
#    answers) fails the run, and that a bad flag is a usage error.
# Asserts success only, never speed. Exit 77 (ctest SKIP_RETURN_CODE) when a
# tool it needs is missing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# != 2)); then
  echo "usage: $0 CEILING_BIN LOADGEN_BIN" >&2
  exit 2
fi
CEILING=$1 LOADGEN=$2
for bin in "$CEILING" "$LOADGEN"; do
  [[ -x $bin ]] || { echo "smoke_test: '$bin' is not an executable" >&2; exit 1; }
done

skip() { echo "smoke_test: SKIP: $*" >&2; exit 77; }
command -v h2load >/dev/null || skip "h2load not installed (Debian: nghttp2-client)"
command -v protoc >/dev/null || skip "protoc not installed (Debian: protobuf-compiler)"
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import grpc' 2>/dev/null ||
  skip "/usr/bin/python3 cannot import grpc (Debian: python3-grpcio)"

out=$(mktemp) pid=""
cleanup() {
  rm -f "$out"
  [[ -z $pid ]] || { kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; }
}
trap cleanup EXIT
fail() { echo "smoke_test: FAIL: $*" >&2; exit 1; }

rc=0
# --no-pin: a test must not assume which CPUs it may use or that it runs alone.
timeout 100 bash "$HERE/run.sh" --ceiling "$CEILING" --loadgen "$LOADGEN" --ceiling-only \
  --quick --no-pin --scenarios a,r,s,e,k --rounds 1 --lg-seconds 0.3 >"$out" 2>&1 || rc=$?
cat "$out"
((rc == 0)) || fail "run.sh exited with status $rc"
for s in a r s e k; do  # h2load (a, r, s) or the load generator (e, k)
  grep -qE "^\[[0-9:]+\]   $s ceiling round 1: [0-9.]+ calls/s" "$out" ||
    fail "no successful run reported for scenario $s"
done
grep -q 'FAILED' "$out" && fail "a scenario failed"
grep -q 'ceiling: exit status 0 after SIGTERM' "$out" ||
  fail "the ceiling server did not stop cleanly on SIGTERM"

# 2. The load generator's modes, against a ceiling of our own.
PY=/usr/bin/python3 HELPER=$HERE/grpc_bench.py
port=$("$PY" "$HELPER" freeport)
"$CEILING" --threads 2 --listen "127.0.0.1:$port" 2>/dev/null &
pid=$!
"$PY" "$HELPER" wait "127.0.0.1:$port" "$pid" 30 || fail "the ceiling did not start"
lg() { timeout 60 "$LOADGEN" --target "127.0.0.1:$port" --threads 2 "$@"; }
modes=(
  "--dist fixed --duration 1"
  "--dist cycle --ids 1000 --owners 16 --duration 1"
  "--dist uniform --ids 1000000 --owners 16 --duration 1 --connections 4"
  "--dist zipf --zipf-s 1.1 --ids 10000000 --owners 100 --omit-routes --duration 1"
  "--dist uniform --owners 1000 --omit-routes --ring 64 --duration 1"
  "--dist uniform --count 2000 --concurrency 16"
  "--method stream --dist uniform --owners 8 --streams 4 --concurrency 8 --duration 1"
  "--method stream --count 2000 --streams 2 --warmup 0.2"
)
for m in "${modes[@]}"; do
  # shellcheck disable=SC2086 # each mode is a list of flags
  line=$(lg $m) || fail "loadgen $m: exit status $?: $line"
  echo "loadgen $m: $line"
  [[ $line == *'"errors": 0,'* && $line != *'"calls": 0,'* ]] || fail "loadgen $m: $line"
  if [[ $m == *--count* ]]; then
    [[ $line == *'"calls": 2000,'* ]] || fail "loadgen $m: not exactly 2000 calls: $line"
  fi
done
rc=0; line=$(lg --owners 3 --check --duration 0.3) || rc=$?
echo "loadgen --check against the ceiling: exit status $rc: $line"
((rc == 1)) && [[ $line == *'recorded=0 routes=0, want 3 and 3'* ]] ||
  fail "a failed --check did not fail the run"
rc=0; lg --dist bogus 2>/dev/null || rc=$?
((rc == 2)) || fail "--dist bogus: exit status $rc, want 2"
echo "smoke_test: PASS"
