#!/usr/bin/python3
"""RecordArrivals (streaming) against RecordArrival (unary) on the same
sidecar, one owner per message (issue 14).

    bench/stream_bench.py SIDECAR [--load h2load|python] [--rounds 3]
                          [--cpu 0] [--seconds 5] [--clients 4] [-- FLAGS...]

The sidecar runs with --threads 1 (plus FLAGS), pinned to --cpu (taskset)
when there is more than one core; the load runs on the other cores. Rounds
interleave a unary phase and a streaming phase.

--load h2load (the default when h2load is installed) saturates the
sidecar: unary is h2load -c 8 -m 32 -n 100000 posting one RecordArrival
body (h2load sends the same body every time: one owner); streaming is
h2load -c 4 -m 1 -n 200 posting a body of 1,000 framed RecordArrivalRequests
(owners uniform over 1M ids), each request one RecordArrivals stream of
1,000 messages. --load python uses python3-grpcio clients (--clients
threads for --seconds; uniform owners both ways), which cannot keep the
sidecar busy: its figures are per-message costs at a light load.

Two figures per phase: messages per second of wall time, and the
sidecar's CPU time per message (utime + stime from /proc/PID/stat over the
phase), whose inverse is what its one core could serve flat out. Every
phase is checked: h2load must report every request succeeded, and a
python3-grpcio RecordArrivals stream after each round must answer in
order. Results and dates: bench/README.md, under `bench/stream_bench.py`."""
import argparse
import json
import os
import random
import shutil
import subprocess
import struct
import sys
import tempfile
import threading
import time

import grpc  # Debian's python3-grpcio

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
sys.dont_write_bytecode = True
from harness import varint  # noqa: E402

SERVICE = "/cacheroute.v1.CacheRoute/"
TICK = os.sysconf("SC_CLK_TCK")


def body(owner):
    """A RecordArrivalRequest with one owner (field 1, packed)."""
    v = varint(owner)
    return b"\x0a" + varint(len(v)) + v


def frame(msg):
    return b"\x00" + struct.pack(">I", len(msg)) + msg


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime


def start_sidecar(binary, cpu, flags):
    argv = [binary, "--listen", "127.0.0.1:0", "--metrics-listen", "", "--threads", "1",
            "--replan-interval", "0"] + flags
    if cpu is not None and shutil.which("taskset"):
        argv = ["taskset", "-c", str(cpu)] + argv
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        ev = json.loads(line) if line.startswith("{") else {}
        if ev.get("msg") == "serving":
            threading.Thread(target=lambda: [None for _ in p.stderr], daemon=True).start()
            return p, "127.0.0.1:%d" % ev["port"]
    raise SystemExit("sidecar exited: %s" % p.wait())


def channel(target):
    return grpc.insecure_channel(target, options=[("grpc.enable_retries", 0)])


def run_clients(run, clients, done):
    """Runs run(k) on a thread per client k; the sum of what they counted."""
    threads = [threading.Thread(target=run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(done)


def unary_phase(target, bodies, clients, seconds):
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(k):
        ch = channel(target)
        call = ch.unary_unary(SERVICE + "RecordArrival", request_serializer=None,
                              response_deserializer=None)
        n, i = 0, k
        while time.monotonic() < stop:
            call(bodies[i % len(bodies)], timeout=30)
            n, i = n + 1, i + clients
        done[k] = n
        ch.close()

    return run_clients(run, clients, done)


def stream_phase(target, bodies, clients, seconds):
    done = [0] * clients
    stop = time.monotonic() + seconds

    def run(k):
        ch = channel(target)
        call = ch.stream_stream(SERVICE + "RecordArrivals", request_serializer=None,
                                response_deserializer=None)

        def requests():
            i = k
            while time.monotonic() < stop:
                yield bodies[i % len(bodies)]
                i += clients

        n = 0
        for _ in call(requests(), timeout=seconds + 30):
            n += 1
        done[k] = n
        ch.close()

    return run_clients(run, clients, done)


H2_HEADERS = ["-H", "content-type: application/grpc", "-H", "te: trailers"]


def h2load(target, path, body_file, conns, streams, n, cpus):
    """One h2load run; returns the requests done (every one must succeed)."""
    argv = ["h2load"] + H2_HEADERS + ["-c", str(conns), "-m", str(streams), "-n", str(n),
                                      "-t", str(min(conns, len(cpus))), "-d", body_file,
                                      "http://%s%s%s" % (target, SERVICE, path)]
    if shutil.which("taskset"):
        argv = ["taskset", "-c", ",".join(map(str, sorted(cpus)))] + argv
    out = subprocess.run(argv, stdout=subprocess.PIPE, text=True, timeout=300).stdout
    line = next(x for x in out.splitlines() if x.startswith("requests:"))
    if "%d succeeded" % n not in line:
        raise SystemExit("h2load: not every request succeeded: %s" % line)
    return n


def h2_phases(files, cpus):
    def unary(target, *_):
        return h2load(target, "RecordArrival", files["unary"], 8, 32, 100000, cpus)

    def stream(target, *_):
        return 1000 * h2load(target, "RecordArrivals", files["stream"], 4, 1, 200, cpus)
    return unary, stream


def write_bodies(rng, owners, tmp):
    files = {"unary": os.path.join(tmp, "unary.bin"), "stream": os.path.join(tmp, "stream.bin")}
    with open(files["unary"], "wb") as f:
        f.write(frame(body(rng.randrange(owners))))
    with open(files["stream"], "wb") as f:
        f.write(b"".join(frame(body(rng.randrange(owners))) for _ in range(1000)))
    return files


def check(target):
    """A real RecordArrivals stream: 100 answers, in order."""
    ch = channel(target)
    call = ch.stream_stream(SERVICE + "RecordArrivals", request_serializer=None,
                            response_deserializer=None)
    want = [body(7 + i) for i in range(100)]
    got = list(call(iter(want), timeout=30))
    ch.close()
    # A Route starts with its owner (field 1): the response's routes[0]
    # is field 1 too, so the request's owner varint shows in the answer.
    if len(got) != 100 or any(varint(7 + i) not in g for i, g in enumerate(got)):
        raise SystemExit("check stream: wrong answers")


def measure(pid, phase, *args):
    c0, t0 = cpu_seconds(pid), time.monotonic()
    n = phase(*args)
    return n, time.monotonic() - t0, cpu_seconds(pid) - c0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sidecar")
    ap.add_argument("--load", choices=("h2load", "python"),
                    default="h2load" if shutil.which("h2load") else "python")
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--owners", type=int, default=1000000)
    ap.add_argument("--cpu", type=int, default=0 if os.cpu_count() > 1 else None)
    ap.add_argument("flags", nargs="*", help="more sidecar flags (after --)")
    a = ap.parse_args()
    rng = random.Random(14)
    cpus = set(range(os.cpu_count())) - ({a.cpu} if a.cpu is not None else set())
    cpus = cpus or {0}
    os.sched_setaffinity(0, cpus)
    tmp = tempfile.mkdtemp(prefix="cr-stream-bench-")
    if a.load == "h2load":
        phases = h2_phases(write_bodies(rng, a.owners, tmp), cpus)
    else:
        phases = (unary_phase, stream_phase)
    bodies = [body(rng.randrange(a.owners)) for _ in range(100000)]
    p, target = start_sidecar(a.sidecar, a.cpu, a.flags)
    try:
        print("load %s, sidecar on cpu %s, load on %s" % (a.load, a.cpu, sorted(cpus)))
        print("%-6s %-7s %10s %12s %11s" % ("round", "mode", "messages", "msg/s wall",
                                              "us/msg cpu"))
        ratios = []
        for r in range(a.rounds):
            got = {}
            for mode, phase in zip(("unary", "stream"), phases):
                n, wall, cpu = measure(p.pid, phase, target, bodies, a.clients, a.seconds)
                got[mode] = (n / wall, cpu / n * 1e6 if n else float("inf"))
                print("%-6d %-7s %10d %12.0f %11.2f" % (r, mode, n, n / wall, got[mode][1]))
            check(target)
            ratios.append((got["stream"][0] / got["unary"][0], got["unary"][1] / got["stream"][1]))
            print("round %d: stream / unary = %.2fx wall, %.2fx per sidecar CPU second" %
                  (r, *ratios[-1]))
        mid = len(ratios) // 2
        print("medians over %d rounds: %.2fx wall, %.2fx per sidecar CPU second" %
              (len(ratios), sorted(x[0] for x in ratios)[mid], sorted(x[1] for x in ratios)[mid]))
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(tmp, True)


if __name__ == "__main__":
    main()
