#!/usr/bin/python3
"""Plan over the wire against the library's own time, on the same rates.

    bench/plan_wire.py PLANNER_BENCH SIDECAR [SIDECAR ...] [--sessions N]
                       [--shards R] [--rounds K] [--calls M] [--save-request PATH]

The rates are planner_bench's (Zipf(1) over N sessions with qcap 10 and a
budget that admits all, owners cr_mix64(i), shuffled with the same seeded
generator), sent as one PlanRequest with that config. Each round runs
PLANNER_BENCH (its "plan: X ms (best of 3)" line: the library's
cr_planner_plan) and then M Plan calls over loopback to each SIDECAR
(each started once on 127.0.0.1:0), best of M, so they are interleaved
and a busy spell hits all of them (give a build before and one after a
change to compare them). The client sends pre-encoded bytes and keeps the answer's
bytes (no Python protobuf on either side of the timing). Prints each
round's library time and each sidecar's wire time, ratio, the answer's
sha256 (its first 16 hex digits), CPU seconds and minor page faults per
call, then per sidecar the best of each and the per-round ratios, and
whether every answer was the same bytes (exit status 1 when not).
Figures and dates: bench/README.md, under `bench/plan_wire.py`."""
import argparse
import hashlib
import json
import os
import re
import struct
import subprocess
import sys
import time

import grpc  # Debian's python3-grpcio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
sys.dont_write_bytecode = True
from harness import splitmix64 as mix64, varint  # noqa: E402  (cr_mix64, common/base.c)

PLAN = "/cacheroute.v1.CacheRoute/Plan"


def sessions(n, shards, qcap=10.0):
    """planner_bench's make_sessions: (owner as uint64, rate) pairs."""
    top = qcap * shards * 4
    r = [(mix64(i), top / (i + 1)) for i in range(n)]
    s = 42
    for i in range(n - 1, 0, -1):
        s = mix64(s)
        j = s % (i + 1)
        r[i], r[j] = r[j], r[i]
    return r


def plan_request(rates, shards, qcap=10.0, slots=1e12):
    config = b"\x08" + varint(shards) + b"\x11" + struct.pack("<d", qcap) + \
        b"\x19" + struct.pack("<d", slots)
    parts = [b"\x0a" + varint(len(config)) + config]
    for owner, rate in rates:
        body = b"\x08" + varint(owner) + b"\x11" + struct.pack("<d", rate)
        parts.append(b"\x12" + varint(len(body)) + body)
    return b"".join(parts)


def start(binary, max_bytes):
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--replan-interval", "0", "--sysfs-root", "/nonexistent",
                          "--max-message-bytes", str(max_bytes),
                          "--max-pending-reply-bytes", str(max_bytes),
                          "--memory-quota-bytes", str(4 * max_bytes)],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"serving"' in line:
            return p, json.loads(line)["port"]
    raise SystemExit("%s exited before serving" % binary)


def library_ms(planner_bench, n, shards):
    out = subprocess.run([planner_bench, str(n), str(shards), "3"], capture_output=True,
                         text=True, check=True).stdout
    return float(re.search(r"^plan: ([0-9.]+) ms", out, re.M).group(1))


def proc_stat(pid):
    """The process's fields of /proc/PID/stat past its name (stat(5)'s 3rd on)."""
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()


def cpu_s(pid):
    """The process's user + system CPU seconds, from /proc."""
    fields = proc_stat(pid)
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def minor_faults(pid):
    """The process's minor page faults so far (fresh pages touched)."""
    return int(proc_stat(pid)[7])


def wire_ms(call, body, calls, pid):
    """Best wall time of calls Plan calls, the answer's size and sha256
    prefix, the sidecar's CPU time per call (all its threads: less
    sensitive to a shared machine than wall time, though not to a shared
    cache) and its page faults per call."""
    best = float("inf")
    answer = b""
    c0, f0 = cpu_s(pid), minor_faults(pid)
    for _ in range(calls):
        t0 = time.perf_counter()
        answer = call(body, timeout=300)
        best = min(best, time.perf_counter() - t0)
    return (best * 1e3, len(answer), hashlib.sha256(answer).hexdigest()[:16],
            (cpu_s(pid) - c0) / calls * 1e3, (minor_faults(pid) - f0) / calls)


class Sidecar:
    """One sidecar binary serving on 127.0.0.1:0, its channel and Plan."""

    def __init__(self, binary, max_bytes):
        self.binary = binary
        self.p, port = start(binary, max_bytes)
        self.ch = grpc.insecure_channel("127.0.0.1:%d" % port,
                                        options=[("grpc.max_send_message_length", -1),
                                                 ("grpc.max_receive_message_length", -1)])
        self.call = self.ch.unary_unary(PLAN)
        self.wires = []
        self.digests = set()

    def close(self):
        self.ch.close()
        self.p.terminate()
        self.p.wait(30)


def summary(name, libs, wires):
    ratios = sorted(w / l for w, l in zip(wires, libs))
    print("%s: best library %.1f ms, best wire %.1f ms, wire/library %.2f (target <= 1.5); "
          "per-round ratio median %.2f, min %.2f, max %.2f"
          % (name, min(libs), min(wires), min(wires) / min(libs), ratios[len(ratios) // 2],
             ratios[0], ratios[-1]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("planner_bench")
    ap.add_argument("sidecars", nargs="*", help="one or more sidecar binaries, interleaved")
    ap.add_argument("--save-request", metavar="PATH",
                    help="write the request's bytes to PATH (for bench/plan_parts.c); "
                         "with no sidecar, only that")
    ap.add_argument("--sessions", type=int, default=1000000)
    ap.add_argument("--shards", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=3)
    a = ap.parse_args()
    body = plan_request(sessions(a.sessions, a.shards), a.shards)
    print("request %d bytes, %d sessions, %d shards" % (len(body), a.sessions, a.shards))
    if a.save_request:
        with open(a.save_request, "wb") as f:
            f.write(body)
    if not a.sidecars:
        return 0 if a.save_request else "no sidecar given (and no --save-request)"
    sidecars = []
    libs = []
    try:
        for b in a.sidecars:
            sidecars.append(Sidecar(b, 128 << 20))
            sidecars[-1].call(body, timeout=300)  # warm-up: first touch of its heap
        for k in range(a.rounds):
            lib = library_ms(a.planner_bench, a.sessions, a.shards)
            libs.append(lib)
            print("round %d: library %.1f ms" % (k + 1, lib), flush=True)
            for s in sidecars:
                wire, size, digest, cpu, faults = wire_ms(s.call, body, a.calls, s.p.pid)
                s.wires.append(wire)
                s.digests.add(digest)
                print("  %s: wire %.1f ms (answer %d bytes, sha256 %s, sidecar CPU %.1f ms/call, "
                      "%.0f page faults/call), wire/library %.2f"
                      % (s.binary, wire, size, digest, cpu, faults, wire / lib), flush=True)
    finally:
        for s in sidecars:
            s.close()
    for s in sidecars:
        summary(s.binary, libs, s.wires)
    digests = set().union(*(s.digests for s in sidecars))
    print("answers: %s" % ("the same bytes from every sidecar" if len(digests) == 1 else
                           "DIFFERENT bytes: %s" % ", ".join(sorted(digests))))
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
