#!/usr/bin/python3
"""The cheap attacks of issue 12 items 1 and 4, measured against a real
sidecar binary: the sidecar's CPU seconds, its peak RSS growth (VmHWM) and
the wall time of each attack, and the status it ended in.

    bench/abuse.py SIDECAR [SIDECAR ...]

Each binary is started on 127.0.0.1:0 (its JSON log names the port),
attacked, and stopped. Requests are written byte by byte, so no stubs are
needed. Figures and dates: bench/README.md, under `bench/abuse.py`."""
import json
import os
import struct
import subprocess
import sys
import time

import grpc  # Debian's python3-grpcio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
sys.dont_write_bytecode = True
from harness import varint, wire_field  # noqa: E402

SERVICE = "/cacheroute.v1.CacheRoute/"


def field(number, wire_type, payload):
    """harness.wire_field, plus wire type 1 (a double)."""
    if wire_type == 1:
        return varint(number << 3 | 1) + struct.pack("<d", payload)
    return wire_field(number, wire_type, payload)


def planner_config(n_shards, qcap, slots):
    return field(1, 0, n_shards) + field(2, 1, qcap) + field(3, 1, slots)


def proc(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def cpu(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(binary):
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--replan-interval", "0", "--sysfs-root", "/nonexistent"],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"serving"' in line:
            return p, json.loads(line)["port"]
    raise SystemExit("%s exited before serving" % binary)


def attack(pid, channel, method, body):
    c0, h0, t0 = cpu(pid), proc(pid, "VmHWM"), time.monotonic()
    try:
        channel.unary_unary(SERVICE + method)(body, timeout=300)
        status = "OK"
    except grpc.RpcError as e:
        status = e.code().name
    return cpu(pid) - c0, proc(pid, "VmHWM") - h0, time.monotonic() - t0, status


def main():
    owners = b"".join(varint(o) for o in range(1, 2001))
    attacks = [
        ("Plan from_estimator, n_shards 65536, qcap 1e-9 (26 B)", "Plan",
         field(1, 2, planner_config(65536, 1e-9, 1000)) + field(3, 0, 1)),
        ("Plan, 2,000 explicit rates (28 KB)", "Plan",
         field(1, 2, planner_config(65536, 1e-9, 1000)) +
         b"".join(field(2, 2, field(1, 0, o) + field(2, 1, 1.0)) for o in range(1, 2001))),
        ("GetRates, 33.5M 1-byte owners (33.5 MB)", "GetRates",
         field(1, 2, b"\x01" * (33_554_432 - 16))),
    ]
    for binary in sys.argv[1:]:
        p, port = start(binary)
        ch = grpc.insecure_channel("127.0.0.1:%d" % port,
                                   options=[("grpc.max_send_message_length", -1),
                                            ("grpc.max_receive_message_length", -1)])
        ch.unary_unary(SERVICE + "RecordArrival")(field(1, 2, owners) + field(2, 0, 1),
                                                   timeout=60)
        print("%s (estimator: 2,000 owners)" % binary)
        for what, method, body in attacks:
            c, m, w, status = attack(p.pid, ch, method, body)
            print("  %-56s cpu %6.2f s  peak +%7.1f MB  wall %6.2f s  %s" % (what, c, m, w, status))
        ch.close()
        p.terminate()
        p.wait(30)


if __name__ == "__main__":
    main()
