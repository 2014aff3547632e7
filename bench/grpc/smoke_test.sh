#!/usr/bin/env bash
# Smoke test for bench/grpc (a ctest test; builds nothing).
#   bench/grpc/smoke_test.sh CEILING_BIN
# Starts the ceiling server on a free loopback port, runs scenario a of run.sh
# with --quick against it only, and asserts that the gRPC check call and every
# h2load request succeeded and that the server stopped cleanly on SIGTERM.
# Asserts success only, never speed. Exit 77 (ctest SKIP_RETURN_CODE) when a
# tool it needs is missing.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if (($# != 1)); then
  echo "usage: $0 CEILING_BIN" >&2
  exit 2
fi
CEILING=$1
[[ -x $CEILING ]] || { echo "smoke_test: '$CEILING' is not an executable" >&2; exit 1; }

skip() { echo "smoke_test: SKIP: $*" >&2; exit 77; }
command -v h2load >/dev/null || skip "h2load not installed (Debian: nghttp2-client)"
command -v protoc >/dev/null || skip "protoc not installed (Debian: protobuf-compiler)"
[[ -x /usr/bin/python3 ]] && /usr/bin/python3 -c 'import grpc' 2>/dev/null ||
  skip "/usr/bin/python3 cannot import grpc (Debian: python3-grpcio)"

out=$(mktemp)
trap 'rm -f "$out"' EXIT
rc=0
# --no-pin: a test must not assume which CPUs it may use or that it runs alone.
timeout 100 bash "$HERE/run.sh" --ceiling "$CEILING" --ceiling-only --quick \
  --no-pin --scenarios a --rounds 1 >"$out" 2>&1 || rc=$?
cat "$out"
fail() { echo "smoke_test: FAIL: $*" >&2; exit 1; }
((rc == 0)) || fail "run.sh exited with status $rc"
grep -qE '^\[[0-9:]+\]   a ceiling round 1: [0-9.]+ calls/s' "$out" ||
  fail "no successful h2load run reported"
grep -q 'FAILED' "$out" && fail "a scenario failed"
grep -q 'ceiling: exit status 0 after SIGTERM' "$out" ||
  fail "the ceiling server did not stop cleanly on SIGTERM"
echo "smoke_test: PASS"
