#!/bin/bash
# bench/replica_rpc.sh: RecordArrival over gRPC with --state-backend on
# against off (issue 13: ">= 0.95x"). Starts a redis-server on a free
# loopback port, two sidecars on one pinned CPU each in turn (one standalone,
# one a replica of that Redis), fills both with the same 1M owners, then
# drives each with cacheroute-grpc-loadgen (1 owner per call, uniform over
# 1M, 8 connections, 256 in flight) in interleaved rounds and prints the
# calls/s of each round and the median ratio. Everything stops by itself.
#
# usage: bench/replica_rpc.sh SIDECAR LOADGEN [ROUNDS=5] [SECONDS=3] [OWNERS=1]
set -euo pipefail
sidecar=$1 loadgen=$2 rounds=${3:-5} secs=${4:-3} owners=${5:-1}
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

rport=$(port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no >"$work/redis.log" &
pids+=($!)
start() { # name extra-args...
    local name=$1 p
    shift
    p=$(port)
    taskset -c 1 "$sidecar" --threads 1 --metrics-listen "" --listen "127.0.0.1:$p" \
        --replan-interval 0 --max-owners 2000000 "$@" >"$work/$name.log" 2>&1 &
    pids+=($!)
    eval "addr_$name=127.0.0.1:$p"
    for _ in $(seq 50); do grep -q serving "$work/$name.log" && return; sleep 0.1; done
    echo "sidecar $name did not start:" >&2
    cat "$work/$name.log" >&2
    exit 2
}
start off
start on --state-backend "redis://127.0.0.1:$rport" --replica-id bench --cluster bench
lg() { taskset -c 0 "$loadgen" --target "$1" "${@:2}"; }
for n in off on; do
    a=addr_$n
    lg "${!a}" --dist cycle --ids 1000000 --owners 1000 --omit-routes --count 1000 \
        --concurrency 8 >/dev/null
done
run() { # addr -> calls/s
    lg "$1" --dist uniform --ids 1000000 --owners "$owners" --connections 8 --concurrency 256 \
        --duration "$secs" --warmup 0.5 | /usr/bin/python3 -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])["calls_per_s"])'
}
ratios=()
for r in $(seq "$rounds"); do
    if ((r % 2)); then x=$(run "$addr_off"); y=$(run "$addr_on"); else y=$(run "$addr_on"); x=$(run "$addr_off"); fi
    ratio=$(/usr/bin/python3 -c "print('%.3f' % ($y / $x))")
    ratios+=("$ratio")
    echo "round $r: backend off $x calls/s, on $y calls/s, on/off $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {print "median on/off: " a[int((NR+1)/2)]}'
grep -c "state backend" "$work/on.log" | sed 's/^/backend log lines: /'
