#!/usr/bin/python3
"""Issue 30 R3-10: the sidecar's peak RSS (VmHWM) while 4 maximum-size
Route calls run at once, and its RSS 3 s after they end.

    bench/route_memory.py SIDECAR [--calls N] [-- SIDECAR_FLAG ...]

A maximum-size Route: 4,096 requests of 8,192 one-byte block hashes each
(--max-route-hashes), 33.6 MB on the wire, the most decode per wire byte
(8 B a hash). Each call runs on its own channel; the figures and how each
call ended are printed. Figures and dates: bench/README.md, "Decode
memory"."""
import json
import os
import subprocess
import sys
import threading
import time

import grpc  # Debian's python3-grpcio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
sys.dont_write_bytecode = True
from harness import varint, wire_field  # noqa: E402

ROUTE = "/cacheroute.v1.CacheRoute/Route"


def mb(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def body(seed):
    hashes = bytes(1 + (seed + i) % 127 for i in range(8192))
    item = wire_field(2, 0, 8192 * 16) + wire_field(3, 2, hashes)
    return wire_field(1, 2, item) * 4096


def main():
    args = sys.argv[1:]
    extra = args[args.index("--") + 1:] if "--" in args else []
    args = args[:args.index("--")] if "--" in args else args
    calls = int(args[args.index("--calls") + 1]) if "--calls" in args else 4
    p = subprocess.Popen([args[0], "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--replan-interval", "0", "--sysfs-root", "/nonexistent"] + extra,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"serving"' in line:
            port = json.loads(line)["port"]
            break
    else:
        raise SystemExit("%s exited before serving" % args[0])
    threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
    bodies = [body(i) for i in range(calls)]
    base = mb(p.pid, "VmRSS")
    status = [None] * calls

    def one(i):
        ch = grpc.insecure_channel("127.0.0.1:%d" % port,
                                   options=[("grpc.max_send_message_length", -1),
                                            ("grpc.max_receive_message_length", -1)])
        try:
            ch.unary_unary(ROUTE)(bodies[i], timeout=300)
            status[i] = "OK"
        except grpc.RpcError as e:
            status[i] = "%s: %s" % (e.code().name, e.details()[:100])
        ch.close()

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.monotonic() - t0
    time.sleep(3)
    print("%s %s" % (args[0], " ".join(extra)))
    print("  %d x Route of %.1f MB: wall %.1f s, RSS before %.0f MB, peak (VmHWM) %.0f MB, "
          "3 s after %.0f MB" % (calls, len(bodies[0]) / 1e6, wall, base, mb(p.pid, "VmHWM"),
                                 mb(p.pid, "VmRSS")))
    for s in status:
        print("  " + s)
    p.terminate()
    p.wait(30)


if __name__ == "__main__":
    main()
