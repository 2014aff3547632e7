#!/usr/bin/env bash
# Smoke test for bench/epp (a ctest test; builds nothing).
#   bench/epp/smoke_test.sh NOOP_BIN LOAD_BIN
# Starts the no-op ext_proc and runs the load driver against it for a
# second at each body size (1 KB, 32 KB, 220 KB; a few streams), the full
# sequence and the request phase alone: every request must come back with
# its destination, every echoed byte counted, and status OK (the driver
# exits 1 otherwise). Then a bad flag must be a usage error. Asserts
# success only, never speed.
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 NOOP_BIN LOAD_BIN" >&2
  exit 2
fi
NOOP=$1 LOAD=$2
for bin in "$NOOP" "$LOAD"; do
  [[ -x $bin ]] || { echo "smoke_test: '$bin' is not an executable" >&2; exit 1; }
done
fail() { echo "smoke_test: FAIL: $*" >&2; exit 1; }

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$NOOP" --listen "127.0.0.1:$port" 2>/dev/null &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true' EXIT
for size in 1024 32768 225280; do
  for phase in "" --request-only; do
    out=$(timeout 60 "$LOAD" --target "127.0.0.1:$port" --streams 4 --body-bytes "$size" \
          --seconds 1 --warmup 0.2 --server-pid "$pid" $phase) ||
      fail "$size B ${phase:-full}: $out"
    echo "smoke_test: $out"
    [[ $out == *" errors=0 "* ]] || fail "$size B ${phase:-full}: errors: $out"
  done
done
rc=0
"$LOAD" --streams 0 >/dev/null 2>&1 || rc=$?
((rc == 2)) || fail "--streams 0 exited $rc, not 2"
kill -TERM "$pid"
wait "$pid" || fail "the no-op did not stop cleanly on SIGTERM"
pid=""
echo "smoke_test: OK"
