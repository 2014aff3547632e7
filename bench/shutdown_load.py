#!/usr/bin/python3
"""Issue 30: where the time goes when the sidecar stops under load. Each
run starts SIDECAR with --shutdown-grace GRACE, loads it from 8 threads
(Route of 64 requests, RecordArrival of 1,000 owners, GetRates) for 2 s,
sends SIGTERM, and prints the time from the signal to each log line of the
shutdown and to the exit.

    bench/shutdown_load.py SIDECAR [GRACE [RUNS]]

Figures and dates: bench/README.md, "Shutdown under load"."""
import datetime
import json
import signal
import subprocess
import sys
import threading
import time

import grpc  # Debian's python3-grpcio

SERVICE = "/cacheroute.v1.CacheRoute/"


def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


ROUTE = b"".join(field(1, varint(1 << 3) + varint(i) + varint(2 << 3) + varint(4000))
                 for i in range(64))
RECORD = field(1, b"".join(varint(i) for i in range(1, 1001)))


def load(port, stop):
    ch = grpc.insecure_channel("127.0.0.1:%d" % port)
    calls = [(SERVICE + "Route", ROUTE), (SERVICE + "RecordArrival", RECORD),
             (SERVICE + "GetRates", b"")]
    k = 0
    while not stop.is_set():
        method, body = calls[k % 3]
        k += 1
        try:
            ch.unary_unary(method)(body, timeout=10)
        except grpc.RpcError:
            pass
    ch.close()


def ts(line):
    t = json.loads(line)["ts"]
    return datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def run(binary, grace):
    p = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--replan-interval", "0", "--shutdown-grace", str(grace)],
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        if '"serving"' in line:
            port = json.loads(line)["port"]
            break
    stop = threading.Event()
    threads = [threading.Thread(target=load, args=(port, stop)) for _ in range(8)]
    for t in threads:
        t.start()
    time.sleep(2)
    t0 = time.time()
    p.send_signal(signal.SIGTERM)
    lines = [line for line in p.stderr]
    p.wait()
    t_exit = time.time()
    stop.set()
    for t in threads:
        t.join()
    marks = []
    for line in lines:
        try:
            marks.append("%s +%.2f" % (json.loads(line)["msg"], ts(line) - t0))
        except (ValueError, KeyError):
            pass
    print("  exit +%.2f s (rc %d): %s" % (t_exit - t0, p.returncode, "; ".join(marks)))


def main():
    binary = sys.argv[1]
    grace = float(sys.argv[2]) if len(sys.argv) > 2 else 2
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    print("%s --shutdown-grace %g" % (binary, grace))
    for _ in range(runs):
        run(binary, grace)


if __name__ == "__main__":
    main()
