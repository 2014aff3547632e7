#!/usr/bin/python3
"""Helpers for bench/grpc/run.sh (Python 3 standard library + Debian's
python3-grpcio for the `wait` and `call` commands).

  freeport                       print a free TCP port on 127.0.0.1
  bodies PROTO_ROOT OUTDIR       write the request bodies of every scenario,
                                 encoded by `protoc --encode`: NAME.pb (the
                                 message) and NAME.grpc (gRPC length-prefixed;
                                 a stream's body: the message several times)
  wait ADDR PID SECONDS          poll until the server at ADDR answers a gRPC
                                 call (any status but UNAVAILABLE) or PID dies
  call ADDR METHOD BODY [--expect SPEC]
                                 one real gRPC call with BODY: unary with a
                                 .pb, a stream of its messages with a .grpc
                                 (each answer checked); exit 0 when
                                 grpc-status is OK (and SPEC holds)
  h2load OUTPUT N LOG|- [--min-bytes B]
                                 check an h2load run (N requests all succeeded,
                                 all 2xx, each response carried a message) and
                                 print: rps p50_us p99_us resp_bytes
  loadgen JSON RC STDERR         check a cacheroute-grpc-loadgen run (exit
                                 status RC, no error) and print: calls_per_s
                                 p50_us p99_us arrivals_per_s
  report RESULTS.tsv META.json   print the Markdown results table
"""

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time

PROTO_FILE = "cacheroute/v1/cacheroute.proto"
PKG = "cacheroute.v1"

# Scenario request bodies: name -> (message type, protobuf text format[,
# messages per stream]).
BATCH_OWNERS = 1000
ROUTE_HASHES = 64        # block hashes per Route request (r, s)
ROUTE_BLOCK_TOKENS = 16  # the sidecar's default --block-tokens
ROUTES_PER_STREAM = 16   # Route messages per Routes stream (s)
MASK64, GOLDEN = (1 << 64) - 1, 0x9E3779B97F4A7C15
# RouteDecision.reason's names (cacheroute.proto).
ROUTE_REASONS = {"prefix", "session", "planned", "spill", "least_loaded", "rule"}


def _owner(i):
    """Deterministic, hash-like positive int64 owner ids (splitmix64 of i,
    top bit cleared): session ids are usually hashes, so every owner costs a
    full-size varint on the wire."""
    return _mix64((i + 1) * GOLDEN & MASK64) & 0x7FFFFFFFFFFFFFFF


def _mix64(z):
    """splitmix64's finalizer: a full 64-bit value."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def _block_hashes(n, seed=1):
    """n chained block hashes as an engine makes them, h_i = H(h_(i-1),
    block i): full 64-bit values (about half of them take a 10-byte varint,
    as real hashes do)."""
    out, h = [], _mix64(seed)
    for i in range(n):
        h = _mix64(h ^ ((i + 1) * GOLDEN & MASK64))
        out.append(h)
    return out


def _bodies():
    select = ('request_id: "bench-req-000001" prompt_tokens: 2000 '
              'knowledge_tokens: 8000 '
              'sources { name: "kvstore-a" cached_tokens: 8000 } gpu: 0 ')
    # One request of one owner and 64 blocks (1,024 tokens), no request_id:
    # h2load sends the same body every time, so a fixed id would be
    # outstanding already from the second call on (kept by owner instead),
    # a path no gateway takes; without one each route's work is kept by
    # owner and shard, as for a gateway that reports outcomes without ids.
    route = ("requests { owner: %d prompt_tokens: %d %s }"
             % (_owner(0), ROUTE_HASHES * ROUTE_BLOCK_TOKENS,
                " ".join("block_hashes: %d" % h for h in _block_hashes(ROUTE_HASHES))))
    return {
        "ra1": ("RecordArrivalRequest", "owners: %d" % _owner(0)),
        "route64": ("RouteRequest", route),
        "routes64": ("RouteRequest", route, ROUTES_PER_STREAM),
        "ra1000": ("RecordArrivalRequest",
                   " ".join("owners: %d" % _owner(i) for i in range(BATCH_OWNERS))
                   + " omit_routes: true"),
        "sel_dry": ("SelectInjectionRequest", select + "dry_run: true"),
        "sel_live": ("SelectInjectionRequest", select + "dry_run: false"),
    }


def cmd_freeport(_args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()
    return 0


def cmd_bodies(args):
    proto_root, outdir = args[0], args[1]
    protoc = os.environ.get("PROTOC", "protoc")
    os.makedirs(outdir, exist_ok=True)
    for name, (msg, text, *per_stream) in _bodies().items():
        pb = subprocess.run(
            [protoc, "--encode=%s.%s" % (PKG, msg), "-I", proto_root,
             os.path.join(proto_root, PROTO_FILE)],
            input=text.encode(), stdout=subprocess.PIPE, check=True).stdout
        with open(os.path.join(outdir, name + ".pb"), "wb") as f:
            f.write(pb)
        with open(os.path.join(outdir, name + ".grpc"), "wb") as f:
            f.write((b"\x00" + len(pb).to_bytes(4, "big") + pb) * (per_stream or [1])[0])
    return 0


def _grpc():
    try:
        import grpc  # Debian: python3-grpcio
        return grpc
    except ImportError:
        sys.stderr.write("grpc_bench.py: the grpc module is missing; install "
                         "Debian's python3-grpcio and run with /usr/bin/python3\n")
        sys.exit(3)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); look at its state.
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def cmd_wait(args):
    grpc = _grpc()
    addr, pid, seconds = args[0], int(args[1]), float(args[2])
    deadline = time.monotonic() + seconds
    # An empty RecordArrivalRequest: a server that answers it at all (OK from
    # the ceiling, INVALID_ARGUMENT from the sidecar) is up; nothing recorded.
    with grpc.insecure_channel(addr) as ch:
        fn = ch.unary_unary("/%s.CacheRoute/RecordArrival" % PKG,
                            request_serializer=None, response_deserializer=None)
        while time.monotonic() < deadline:
            if not _pid_alive(pid):
                return 1
            try:
                fn(b"", timeout=1.0)
                return 0
            except grpc.RpcError as e:
                if e.code() not in (grpc.StatusCode.UNAVAILABLE,
                                    grpc.StatusCode.DEADLINE_EXCEEDED):
                    return 0
            time.sleep(0.1)
    return 2


def _varint(buf, i):
    v = shift = 0
    while True:
        b = buf[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def _fields(buf):
    """Top-level fields of a protobuf message: {number: [values]} (varints as
    int, length-delimited as bytes, fixed as raw bytes)."""
    out, i = {}, 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            v, i = buf[i:i + n], i + n
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wt)
        out.setdefault(num, []).append(v)
    return out


def _check_response(spec, resp):
    """SPEC: 'recorded=N[,routes=M]' for RecordArrival, 'select=REQUEST_ID'
    for SelectInjection, 'decided=N' for Route (N decisions, each with a
    known reason); '' = grpc-status OK is enough (ceiling)."""
    if not spec:
        return None
    f = _fields(resp)
    for item in spec.split(","):
        key, _, want = item.partition("=")
        if key == "recorded":
            got = f.get(2, [0])[-1]
            if got != int(want):
                return "recorded=%d, expected %s" % (got, want)
        elif key == "routes":
            got = len(f.get(1, []))
            if got != int(want):
                return "%d routes, expected %s" % (got, want)
        elif key == "decided":
            got = f.get(1, [])
            if len(got) != int(want):
                return "%d route decisions, expected %s" % (len(got), want)
            for i, d in enumerate(got):
                reason = _fields(d).get(6, [b""])[-1].decode(errors="replace")
                if reason not in ROUTE_REASONS:
                    return "routes[%d].reason %r, expected one of %s" % (
                        i, reason, ", ".join(sorted(ROUTE_REASONS)))
        elif key == "select":
            mode = f.get(1, [0])[-1]
            reason = f.get(6, [b""])[-1].decode(errors="replace")
            rid = f.get(7, [b""])[-1].decode(errors="replace")
            if mode not in (1, 2):
                return "mode=%d, expected TEXT or KV_CACHE" % mode
            if not reason:
                return "empty reason"
            if rid != want:
                return "request_id %r, expected %r" % (rid, want)
        else:
            return "unknown expectation %r" % key
    return None


def _frames(data):
    """The messages of a gRPC length-prefixed body."""
    out, i = [], 0
    while i < len(data):
        n = int.from_bytes(data[i + 1:i + 5], "big")
        out.append(data[i + 5:i + 5 + n])
        i += 5 + n
    return out


def cmd_call(args):
    grpc = _grpc()
    addr, method, body = args[0], args[1], args[2]
    spec = ""
    if len(args) >= 5 and args[3] == "--expect":
        spec = args[4]
    with open(body, "rb") as f:
        req = f.read()
    stream = body.endswith(".grpc")
    path = "/%s.CacheRoute/%s" % (PKG, method)
    with grpc.insecure_channel(addr) as ch:
        try:
            if stream:  # one answer per message, in order
                reqs = _frames(req)
                fn = ch.stream_stream(path, request_serializer=None,
                                      response_deserializer=None)
                resps = list(fn(iter(reqs), timeout=10.0))
            else:
                fn = ch.unary_unary(path, request_serializer=None,
                                    response_deserializer=None)
                reqs, resps = [req], [fn(req, timeout=10.0)]
        except grpc.RpcError as e:
            print("grpc-status %s: %s" % (e.code().name, e.details()))
            return 1
    err = None
    if len(resps) != len(reqs):
        err = "%d answers to %d messages" % (len(resps), len(reqs))
    for i, resp in enumerate(resps):
        if err:
            break
        err = _check_response(spec, resp)
        if err and stream:
            err = "message %d: %s" % (i, err)
    if err:
        print("grpc-status OK but unexpected response: %s" % err)
        return 1
    # the response's size in bytes (a stream's: its messages, framed but the first)
    print("OK %d" % (sum(5 + len(r) for r in resps) - 5))
    return 0


def _percentile(sorted_vals, p):
    """Nearest-rank percentile."""
    if not sorted_vals:
        return float("nan")
    k = max(0, min(len(sorted_vals) - 1, int(-(-p * len(sorted_vals) // 100)) - 1))
    return sorted_vals[k]


def cmd_h2load(args):
    out_path, n, log = args[0], int(args[1]), args[2]
    min_bytes = 5
    if len(args) >= 5 and args[3] == "--min-bytes":
        min_bytes = int(args[4])
    with open(out_path, errors="replace") as f:
        text = f.read()
    m_fin = re.search(r"finished in [^,]+, ([0-9.]+) req/s", text)
    m_req = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                      r"(\d+) succeeded, (\d+) failed, (\d+) errored, (\d+) timeout",
                      text)
    m_st = re.search(r"status codes: (\d+) 2xx", text)
    m_data = re.search(r"traffic: .*?, .*? headers .*?, [^(]*\((\d+)\) data", text)
    if not (m_fin and m_req and m_st and m_data):
        print("FAIL h2load output incomplete (killed or timed out?)")
        return 1
    succeeded, ok2xx, data = int(m_req.group(4)), int(m_st.group(1)), int(m_data.group(1))
    if succeeded != n or ok2xx != n:
        print("FAIL %d/%d succeeded, %d 2xx (failed %s, errored %s, timeout %s)"
              % (succeeded, n, ok2xx, m_req.group(5), m_req.group(6), m_req.group(7)))
        return 1
    # h2load cannot see grpc-status; a gRPC error is an HTTP 200 with no
    # message. Each OK response carries at least its 5-byte prefix + message.
    if data < n * min_bytes:
        print("FAIL only %d response bytes for %d requests (expected >= %d each): "
              "some calls ended with a gRPC error" % (data, n, min_bytes))
        return 1
    p50 = p99 = float("nan")
    if log != "-":
        durs = []
        with open(log) as f:
            for line in f:
                cols = line.split("\t")
                if len(cols) >= 3 and cols[1] == "200":
                    durs.append(int(cols[2]))
        durs.sort()
        if len(durs) != n:
            print("FAIL log has %d of %d requests with status 200" % (len(durs), n))
            return 1
        p50, p99 = _percentile(durs, 50), _percentile(durs, 99)
    print("OK %s %s %s %.1f" % (m_fin.group(1), p50, p99, data / n))
    return 0


def cmd_loadgen(args):
    path, rc, err_path = args[0], int(args[1]), args[2]
    with open(err_path, errors="replace") as f:
        err = " ".join(f.read().split())[-300:]
    try:
        with open(path) as f:
            r = json.loads(f.read().strip().splitlines()[-1])
    except (OSError, ValueError, IndexError):
        print("FAIL no result line (exit status %d): %s" % (rc, err))
        return 1
    if rc == 124:
        print("FAIL timed out")
        return 1
    if rc != 0 or r["errors"] or r["calls"] == 0:
        print("FAIL exit status %d, %d of the calls failed: %s %s"
              % (rc, r["errors"], r["first_error"], err))
        return 1
    print("OK %.0f %.1f %.1f %.0f" % (r["calls_per_s"], r["p50_us"], r["p99_us"],
                                      r["arrivals_per_s"]))
    return 0


# ---- report -----------------------------------------------------------------

SCENARIOS = [
    # key, title, method, unit
    ("a", "a. RecordArrival, 1 owner/call, throughput"),
    ("b_ra", "b. RecordArrival, 1 call in flight (latency)"),
    ("b_sel", "b. SelectInjection dry_run, 1 call in flight (latency)"),
    ("c", "c. RecordArrival, 1,000 owners/call, omit_routes (batch ingestion)"),
    ("d_dry", "d. SelectInjection dry_run=true, throughput"),
    ("d_live", "d. SelectInjection dry_run=false, throughput"),
    ("r", "r. Route, 1 request of %d block hashes/call, throughput" % ROUTE_HASHES),
    ("s", "s. Routes streams of %d messages (each as r's), throughput" % ROUTES_PER_STREAM),
]

# Scenarios whose calls carry several items: key -> (items a call, the row).
PER_CALL = {
    "c": (BATCH_OWNERS, "arrivals/s (calls/s x %d)" % BATCH_OWNERS),
    "s": (ROUTES_PER_STREAM, "routes/s (streams/s x %d)" % ROUTES_PER_STREAM),
}


# Scenarios e..k (varied.sh): key, title.
VARIED = [
    ("e", "e. 1 owner/call, the same owner (as a)"),
    ("f", "f. 1 owner/call, uniform over 1M tracked"),
    ("g", "g. 16 owners/call, uniform over 1M tracked"),
    ("h", "h. 1,000 owners/call, uniform over 1M tracked, omit_routes"),
    ("i", "i. 1,000 owners/call, uniform over 10M ids, --max-owners 1M (evicts)"),
    ("j", "j. 1,000 owners/call, uniform over 1M tracked, routes on"),
    ("k", "k. RecordArrivals stream, 1 owner/message, the same owner"),
]


def _varied_table(meta, cell, ratio, idx):
    """The loadgen scenarios' table (empty when none ran)."""
    RPS, P50, P99, CPU, APS, EFF = idx
    keys = [(k, t) for k, t in VARIED if k in meta["params"]]
    if not keys:
        return []
    L = ["", "#### Varied owners (cacheroute-grpc-loadgen, a new body per call)", "",
         "| Scenario | loadgen parameters | Metric | sidecar | ceiling | sidecar/ceiling |",
         "|---|---|---|---:|---:|---:|"]
    for key, title in keys:
        ks, kc = (key, "sidecar"), (key, "ceiling")
        rows = [("calls/s", cell(ks, RPS, 1, True), cell(kc, RPS, 1, True),
                 ratio(key, RPS, True)),
                ("arrivals/s", cell(ks, APS), cell(kc, APS), ratio(key, APS)),
                ("p50 / p99 latency, µs", "%s / %s" % (cell(ks, P50), cell(ks, P99)),
                 "%s / %s" % (cell(kc, P50), cell(kc, P99)), ""),
                ("server CPU use, %", cell(ks, CPU), cell(kc, CPU), ""),
                ("calls per server CPU-second", cell(ks, EFF), cell(kc, EFF),
                 ratio(key, EFF))]
        if key == "j":
            kt = (key, "sidecar_t")
            rows[1:1] = [("calls/s, 1M-session table installed", cell(kt, RPS, 1, True),
                          cell(kc, RPS, 1, True), ratio(key, RPS, True, "sidecar_t")),
                         ("with the table / without", "", "",
                          ratio(key, RPS, True, "sidecar_t", "sidecar")),
                         ("with / without, per server CPU-second", cell(kt, EFF), "",
                          ratio(key, EFF, False, "sidecar_t", "sidecar"))]
        if key == "k" and "e" in meta["params"]:
            for metric, i in (("calls/s", RPS), ("per server CPU-second", EFF)):
                rows.append(("stream / unary (e), " + metric, "", "",
                             ratio(key, i, False, "sidecar", "sidecar", "e") + " (ceiling " +
                             ratio(key, i, False, "ceiling", "ceiling", "e") + ")"))
        first = "| %s | `%s` |" % (title, meta["params"][key])
        for i, (metric, a, b, r) in enumerate(rows):
            L.append("%s %s | %s | %s | %s |" % (first if i == 0 else "| | |", metric, a, b, r))
    L.append("")
    L.append("Each loadgen run: `--threads %s` (one per client CPU), a warm-up, then "
             "the measured seconds; every call must end OK, and the sidecar's "
             "answers are checked (`--check`: recorded = owners, one route per "
             "owner unless omit_routes). Bodies are built per call from seeded "
             "draws (hash-like ids, splitmix64 of the index). Where a server's CPU "
         "use is well below 100%%, the client was the limit: compare the calls "
         "per server CPU-second (calls/s over the server's CPU use) instead; "
         "that ratio is the servers' cost per call, though a server that is "
         "not saturated batches less and pays a little more per call."
         % meta["h2load_threads"])
    return L


def _fmt(v, nd=0):
    if v is None:
        return "-"
    return "{:,.{nd}f}".format(v, nd=nd)


def cmd_report(args):
    results, meta_path = args[0], args[1]
    with open(meta_path) as f:
        meta = json.load(f)
    # results.tsv: scenario target round OK|FAIL rps p50 p99 cpu note other
    runs, fails, other = {}, {}, []
    with open(results) as f:
        for line in f:
            c = line.rstrip("\n").split("\t")
            if len(c) < 9:
                continue
            key = (c[0], c[1])
            if c[3] != "OK":
                fails.setdefault(key, c[8])
                continue
            noisy = len(c) > 10 and c[10] == "1"
            rps, p50, p99, cpu = (float(x) for x in c[4:8])
            aps = float(c[11]) if len(c) > 11 and c[11] else float("nan")
            # Calls per second of server CPU: the server's own cost per call,
            # comparable even when the client, not the server, was the limit.
            eff = rps * 100 / cpu if cpu > 0 else float("nan")
            runs.setdefault(key, []).append((noisy, (rps, p50, p99, cpu, aps, eff)))
            if len(c) > 9 and c[9]:
                other.append(float(c[9]))
    # Runs disturbed by other programs count only where no clean run exists.
    tainted = set()
    for key, rs in list(runs.items()):
        clean = [r for noisy, r in rs if not noisy]
        if not clean:
            tainted.add(key)
        runs[key] = clean or [r for _, r in rs]
    has_sidecar = "sidecar" in meta["targets"]
    RPS, P50, P99, CPU, APS, EFF = range(6)

    def vals(key, idx):
        return [r[idx] for r in runs.get(key, []) if r[idx] == r[idx]]

    def med(key, idx):
        v = vals(key, idx)
        return statistics.median(v) if v else None

    def cell(key, idx, scale=1, spread=False):
        if key[1] == "sidecar" and not has_sidecar:
            return "not run"
        if key in fails:
            return "FAILED"
        v = vals(key, idx)
        if not v:
            return "-"
        s = _fmt(statistics.median(v) * scale)
        if spread and len(v) > 1:
            s += " (%s..%s)" % (_fmt(min(v) * scale), _fmt(max(v) * scale))
        if key in tainted:
            s += " †"
        return s

    def ratio(key, idx, best=False, num="sidecar", den="ceiling", den_key=None):
        ks, kc = (key, num), (den_key or key, den)
        if not has_sidecar or ks in fails or kc in fails:
            return "-"
        s, c = med(ks, idx), med(kc, idx)
        if not s or not c:
            return "-"
        out = "%.2f" % (s / c)
        if best and len(vals(ks, idx)) > 1:
            out += " (best runs %.2f)" % (max(vals(ks, idx)) / max(vals(kc, idx)))
        return out

    L = []
    L.append("### gRPC benchmark: cacheroute-sidecar vs the C++ async ceiling")
    L.append("")
    L.append("- Date: %s" % meta["date"])
    L.append("- Machine: %s CPUs (nproc), %s, Linux %s" % (
        meta["nproc"], meta["cpu_model"], meta["kernel"]))
    L.append("- Software: %s; gRPC C++ %s (ceiling); tree %s" % (
        meta["h2load_version"], meta["grpcpp_version"], meta["git"]))
    if meta["pinned"]:
        L.append("- Placement: both servers `--threads %s`, pinned to CPU(s) %s; "
                 "h2load (at most `-t %s`) pinned to CPU(s) %s (%s)" % (
                     meta["threads"], meta["server_cpus"], meta["h2load_threads"],
                     meta["client_cpus"], meta["pin_note"]))
    else:
        L.append("- Placement: both servers `--threads %s`, h2load at most `-t %s`, "
                 "%s %s" % (meta["threads"], meta["h2load_threads"],
                            meta["pin_note"], meta["server_cpus"]))
    L.append("- Sidecar: `%s`" % meta.get("sidecar_cmd", "not run"))
    L.append("- Ceiling: `%s`" % meta["ceiling_cmd"])
    L.append("- Method: %s measured round(s) per scenario and server, servers "
             "interleaved in alternating order, each run preceded by a "
             "discarded warm-up run (1/%s of -n); figures are medians over "
             "rounds, (min..max) where shown; latency percentiles from "
             "h2load --log-file (nearest rank)" % (meta["rounds"], meta["warm_div"]))
    if other and meta["quick"]:
        L.append("- Other programs: not checked (--quick runs are too short); "
                 "largest load they added to a run: %.2f CPUs" % max(other))
    elif other:
        L.append("- Other programs: a run counts as noisy when they used more "
                 "than %s CPUs during it (machine busy time minus the server's "
                 "and h2load's); %s run(s) measured again, %.0f s spent waiting "
                 "for quiet (budget %s s), %d noisy run(s) kept; medians use "
                 "clean runs only, except cells marked † (no clean run). Largest "
                 "other load in a kept run: %.2f CPUs. Total time %d s" % (
                     meta["other_limit"], meta["retries"], meta["waited"],
                     meta["quiet_budget"], meta["noisy"], max(other), meta["elapsed"]))
    if meta.get("exit"):
        L.append("- Server shutdown: %s" % meta["exit"])
    L.append("- Command: `%s`" % meta["command"])
    L.append("")
    L.append("| Scenario | h2load parameters | Metric | sidecar | ceiling | sidecar/ceiling |")
    L.append("|---|---|---|---:|---:|---:|")
    for key, title in SCENARIOS:
        if key not in meta["params"]:
            continue
        ks, kc = (key, "sidecar"), (key, "ceiling")
        first = "| %s | `%s` |" % (title, meta["params"][key])
        rows = []
        if key.startswith("b_"):
            rows.append(("p50 latency, µs", cell(ks, P50), cell(kc, P50), ratio(key, P50)))
            rows.append(("p99 latency, µs", cell(ks, P99), cell(kc, P99), ratio(key, P99)))
            rows.append(("calls/s", cell(ks, RPS), cell(kc, RPS), ratio(key, RPS)))
        else:
            k, metric = PER_CALL.get(key, (1, "calls/s"))
            rows.append((metric, cell(ks, RPS, k, True), cell(kc, RPS, k, True),
                         ratio(key, RPS, True)))
            rows.append(("p50 latency under load, µs", cell(ks, P50), cell(kc, P50), ratio(key, P50)))
            rows.append(("p99 latency under load, µs", cell(ks, P99), cell(kc, P99), ratio(key, P99)))
        rows.append(("server CPU use, % of its CPUs", cell(ks, CPU), cell(kc, CPU), ""))
        for i, (metric, a, b, r) in enumerate(rows):
            L.append("%s %s | %s | %s | %s |" % (first if i == 0 else "| | |", metric, a, b, r))
    L.extend(_varied_table(meta, cell, ratio, (RPS, P50, P99, CPU, APS, EFF)))
    if fails:
        L.append("")
        L.append("Failed (reported as FAILED, not as numbers):")
        for key in sorted(fails):
            L.append("- %s on %s: %s" % (key[0], key[1], fails[key]))
    L.append("")
    L.append("Ratios are sidecar/ceiling of the medians (and of the best runs): "
             "for calls/s higher is better, 1.00 = as fast as the gRPC stack "
             "alone; for latency lower is better. Every kept run had all "
             "requests succeed with HTTP 2xx and each response carrying a gRPC "
             "message; each scenario began and ended with a real gRPC call "
             "(python3-grpcio) checking grpc-status OK%s. h2load sends the same "
             "body on every request (one owner id; one fixed batch of 1,000 "
             "hash-like owner ids for c; one request of 64 fixed block hashes "
             "for r and s, so after the first call every Route hits a cached "
             "prefix). In a throughput row, server CPU use "
             "well below 100%% means the client, not the server, was the limit."
             % (" and the sidecar's answer" if meta.get("response_check") else ""))
    print("\n".join(L))
    return 1 if fails else 0


def main():
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        return 2
    cmd = {"freeport": cmd_freeport, "bodies": cmd_bodies, "wait": cmd_wait,
           "call": cmd_call, "h2load": cmd_h2load, "loadgen": cmd_loadgen,
           "report": cmd_report}.get(sys.argv[1])
    if cmd is None:
        sys.stderr.write(__doc__)
        return 2
    return cmd(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
