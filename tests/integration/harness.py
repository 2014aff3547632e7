"""Shared helpers for the cacheroute integration suites.

Each suite is a standalone unittest file run by ctest as

    /usr/bin/python3 test_x.py --sidecar BIN --cli BIN --plan-dump BIN --proto-dir DIR

It starts the REAL sidecar binary on 127.0.0.1:0, reads the bound port from
its JSON log on stderr, and talks to it with Debian's python3-grpcio using
stubs generated here, at run time, from proto/ and /usr/share/grpc-proto
(never committed).

Every sidecar started here is killed when the test that started it ends, when
the process exits, and (PR_SET_PDEATHSIG) when the Python process dies.
"""
import argparse
import atexit
import faulthandler
import importlib
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.dont_write_bytecode = True

import grpc  # noqa: E402  (Debian's python3-grpcio)

ARGS = None  # argparse namespace: sidecar, sidecar_hooked, cli, plan_dump, proto_dir


class _Protos:
    """Generated modules, filled in by main() before any test runs."""
    cr = None          # cacheroute.v1.cacheroute_pb2
    cr_grpc = None     # cacheroute.v1.cacheroute_pb2_grpc
    health = None      # grpc.health.v1 (as crpb.health.v1.health_pb2)
    health_grpc = None
    refl = None        # grpc.reflection.v1
    refl_grpc = None
    refl_alpha = None  # grpc.reflection.v1alpha
    refl_alpha_grpc = None


P = _Protos()

SERVICE = "/cacheroute.v1.CacheRoute/"
GRPC_PROTO_DIR = "/usr/share/grpc-proto"
STUB_DIR = None

# Timeouts are generous: the same suites run under ASan/UBSan on 2 cores.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 30.0
RPC_TIMEOUT = 20.0


# ---------------------------------------------------------------- stubs

def _generate_stubs(proto_dir):
    """protoc --python_out/--grpc_python_out into a temp dir; returns it.

    Python's `grpc` package name collides with the health/reflection protos'
    `grpc/...` paths, so those are copied under `crpb/` first."""
    out = tempfile.mkdtemp(prefix="cr-it-stubs-")
    src = os.path.join(out, "src")
    copies = {
        "grpc/health/v1/health.proto": "crpb/health/v1/health.proto",
        "grpc/reflection/v1/reflection.proto": "crpb/reflection/v1/reflection.proto",
        "grpc/reflection/v1alpha/reflection.proto": "crpb/reflection/v1alpha/reflection.proto",
    }
    for orig, dst in copies.items():
        os.makedirs(os.path.dirname(os.path.join(src, dst)), exist_ok=True)
        shutil.copyfile(os.path.join(GRPC_PROTO_DIR, orig), os.path.join(src, dst))
    gen = os.path.join(out, "gen")
    os.makedirs(gen)
    base = ["protoc", "--python_out=" + gen, "--grpc_python_out=" + gen,
            "--plugin=protoc-gen-grpc_python=/usr/bin/grpc_python_plugin"]
    subprocess.run(base + ["-I", src] + list(copies.values()), check=True, timeout=60)
    subprocess.run(base + ["-I", proto_dir, "cacheroute/v1/cacheroute.proto"], check=True,
                   timeout=60)
    sys.path.insert(0, gen)
    P.cr = importlib.import_module("cacheroute.v1.cacheroute_pb2")
    P.cr_grpc = importlib.import_module("cacheroute.v1.cacheroute_pb2_grpc")
    P.health = importlib.import_module("crpb.health.v1.health_pb2")
    P.health_grpc = importlib.import_module("crpb.health.v1.health_pb2_grpc")
    P.refl = importlib.import_module("crpb.reflection.v1.reflection_pb2")
    P.refl_grpc = importlib.import_module("crpb.reflection.v1.reflection_pb2_grpc")
    P.refl_alpha = importlib.import_module("crpb.reflection.v1alpha.reflection_pb2")
    P.refl_alpha_grpc = importlib.import_module("crpb.reflection.v1alpha.reflection_pb2_grpc")
    return out


def main():
    """Entry point of every suite: parse our flags, generate stubs, run
    unittest on the rest of argv."""
    global ARGS, STUB_DIR
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--sidecar", required=True)
    # The test build of the sidecar (tests/hooks/): the same main with its
    # test hooks set from CACHEROUTE_TEST_* variables.
    ap.add_argument("--sidecar-hooked")
    ap.add_argument("--cli", required=True)
    ap.add_argument("--plan-dump", required=True)
    ap.add_argument("--proto-dir", required=True)
    ARGS, rest = ap.parse_known_args()
    # ctest kills a suite at 300 s (tests/integration.cmake) and shows only
    # its output: a suite still running at 280 s prints every thread's stack
    # first, so a hang says where it is.
    faulthandler.dump_traceback_later(280, exit=False)
    STUB_DIR = _generate_stubs(ARGS.proto_dir)
    atexit.register(shutil.rmtree, STUB_DIR, True)
    unittest.main(module="__main__", argv=[sys.argv[0], "-v"] + rest)


# ---------------------------------------------------------------- sidecar

def clean_env(extra=None):
    """os.environ without any CACHEROUTE_* variable, plus extra."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CACHEROUTE_")}
    env.update(extra or {})
    return env


_LIVE = []  # every Sidecar not yet reaped, killed at exit whatever happens


def _kill_leftovers():
    for s in list(_LIVE):
        s.kill()


atexit.register(_kill_leftovers)


def _dying_with_parent(argv):
    """argv run so that it is killed when this process dies (setpriv's
    PR_SET_PDEATHSIG, kept across its exec). Not a preexec_fn: that makes
    subprocess fork() rather than vfork(), and a fork runs gRPC core's
    pre-fork handler, which waits for its thread pool to go idle and, with
    this process's channels busy, could wait for ever (seen in CI)."""
    return ["setpriv", "--pdeathsig", "KILL", "--"] + list(argv)


SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "WARNING: ThreadSanitizer")


class Sidecar:
    """One real cacheroute-sidecar process on 127.0.0.1:0."""

    def __init__(self, *flags, env=None, listen="127.0.0.1:0", metrics=True, prefix=()):
        """prefix: a command the sidecar runs under (["prlimit", ...])."""
        self.flags = list(flags)
        hooked = any(k.startswith("CACHEROUTE_TEST_") for k in (env or {}))
        if hooked and not ARGS.sidecar_hooked:
            raise RuntimeError("CACHEROUTE_TEST_* hooks need --sidecar-hooked")
        argv = list(prefix) + [ARGS.sidecar_hooked if hooked else ARGS.sidecar]
        if listen is not None:
            argv += ["--listen", listen]
        if metrics:
            argv += ["--metrics-listen", ""]
        self.argv = argv + self.flags
        full_env = clean_env(env)
        self.lines = []   # every stderr line, as text
        self.events = []  # the lines that are JSON objects
        self.stray = []   # the lines that are not
        self._cond = threading.Condition()
        self._eof = False
        self._channels = []
        self.returncode = None
        self.proc = subprocess.Popen(_dying_with_parent(self.argv), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=full_env)
        _LIVE.append(self)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            serving = self.wait_for(lambda e: e.get("msg") == "serving", START_TIMEOUT,
                                    what="the 'serving' log line")
        except BaseException:
            self.kill()
            raise
        self.port = serving["port"]
        self.config = serving
        self.target = "127.0.0.1:%d" % self.port

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            ev = None
            if line.startswith("{"):
                try:
                    ev = json.loads(line)
                except ValueError:
                    ev = None
            with self._cond:
                self.lines.append(line)
                if isinstance(ev, dict):
                    self.events.append(ev)
                else:
                    self.stray.append(line)
                self._cond.notify_all()
        self.proc.stderr.close()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def stderr_text(self, last=60):
        with self._cond:
            return "\n".join(self.lines[-last:])

    def wait_for(self, pred, timeout, what="a log line", start=0):
        """Waits for a JSON log line (index >= start) matching pred; returns it."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                if self._eof:
                    raise AssertionError("sidecar exited (rc=%s) before %s; stderr:\n%s" % (
                        self.proc.poll(), what, "\n".join(self.lines[-60:])))
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError("timed out after %.0fs waiting for %s; stderr:\n%s" % (
                        timeout, what, "\n".join(self.lines[-60:])))
                self._cond.wait(min(left, 0.5))

    def n_events(self):
        with self._cond:
            return len(self.events)

    def find_events(self, pred):
        with self._cond:
            return [e for e in self.events if pred(e)]

    # -- channels and stubs

    def channel(self, **options):
        opts = {"grpc.max_receive_message_length": -1, "grpc.max_send_message_length": -1,
                "grpc.enable_retries": 0}
        opts.update(options)
        ch = grpc.insecure_channel(self.target, options=list(opts.items()))
        self._channels.append(ch)
        return ch

    def stub(self, channel=None):
        return P.cr_grpc.CacheRouteStub(channel or self.channel())

    def health_stub(self, channel=None):
        return P.health_grpc.HealthStub(channel or self.channel())

    # -- ending

    def send(self, sig):
        self.proc.send_signal(sig)

    def wait(self, timeout=STOP_TIMEOUT):
        try:
            self.returncode = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError("sidecar did not exit within %.0fs; stderr:\n%s" % (
                timeout, self.stderr_text()))
        self._reader.join(10)
        self._close_channels()
        if self in _LIVE:
            _LIVE.remove(self)
        return self.returncode

    def stop(self, sig=signal.SIGTERM, timeout=STOP_TIMEOUT, close_channels=True):
        """Sends sig, waits for the exit, returns the exit code.

        Our channels are closed first unless asked not to: gRPC Python polls
        an idle channel only while it has a call, so the sidecar's graceful
        GOAWAY (a PING it waits on) would go unanswered and shutdown would
        wait ~5 s (bounded by --shutdown-grace) for every idle connection."""
        if close_channels:
            self._close_channels()
        if self.proc.poll() is None:
            self.send(sig)
        return self.wait(timeout)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self._close_channels()
        if self in _LIVE:
            _LIVE.remove(self)

    def _close_channels(self):
        for ch in self._channels:
            try:
                ch.close()
            except Exception:
                pass
        self._channels = []

    def sanitizer_report(self):
        with self._cond:
            for i, line in enumerate(self.lines):
                if any(m in line for m in SANITIZER_MARKS):
                    return "\n".join(self.lines[i:i + 80])
        return None

    def exit_problems(self, rc, sig=signal.SIGTERM):
        """What is wrong with how the sidecar ended (rc: its exit code), as
        text; None when it exited 0, with no sanitizer report, a 'stopped'
        line, and nothing but JSON objects on stderr."""
        report = self.sanitizer_report()
        if report:
            return "sanitizer report from the sidecar:\n%s" % report
        if rc != 0:
            name = signal.Signals(sig).name if sig in signal.Signals._value2member_map_ else sig
            return "sidecar exit code %s after %s (want 0); stderr:\n%s" % (
                rc, name, self.stderr_text())
        with self._cond:
            stray = list(self.stray)
        if stray:
            # The log is one JSON object per line, gRPC core's lines included.
            return "non-JSON lines on the sidecar's stderr: %r" % stray[:10]
        if not any(e.get("msg") == "stopped" for e in self.events):
            return "no 'stopped' log line:\n%s" % self.stderr_text()
        return None

    def assert_clean_exit(self, tc, sig=signal.SIGTERM, close_channels=True):
        """Stops the sidecar with sig and asserts a clean exit (see
        exit_problems; ASan/UBSan/LSan abort or exit non-zero)."""
        rc = self.stop(sig, close_channels=close_channels)
        problem = self.exit_problems(rc, sig)
        if problem:
            tc.fail(problem)


class SidecarTestCase(unittest.TestCase):
    """A test class sharing one sidecar (class attribute `sidecar`, started
    with SIDECAR_FLAGS); it must exit 0 on SIGTERM when the class ends.
    Tests that need fresh state start their own with self.start_sidecar()."""

    SIDECAR_FLAGS = ()
    SHARED = True
    maxDiff = None

    @classmethod
    def setUpClass(cls):
        cls.sidecar = None
        if cls.SHARED:
            cls.sidecar = Sidecar(*cls.SIDECAR_FLAGS)
            cls.stub = cls.sidecar.stub()

    @classmethod
    def tearDownClass(cls):
        sc = cls.sidecar
        if sc is None:
            return
        cls.sidecar = None
        problem = sc.exit_problems(sc.stop())
        if problem:
            raise AssertionError("shared sidecar %s: %s" % (sc.flags, problem))

    def start_sidecar(self, *flags, **kw):
        """A sidecar for this test only; killed when the test ends (its exit
        code is checked by assert_clean_exit, which tests call themselves)."""
        sc = Sidecar(*flags, **kw)
        self.addCleanup(sc.kill)
        return sc

    def assertRpcError(self, code, fn, *args, details=None, details_re=None, **kw):
        """Calls fn, expects grpc.RpcError with code; checks details exactly
        (details=) or by regex (details_re=). Returns the error."""
        kw.setdefault("timeout", RPC_TIMEOUT)
        try:
            resp = fn(*args, **kw)
        except grpc.RpcError as e:
            self.assertEqual(e.code(), code, "wrong status; details: %r" % e.details())
            if details is not None:
                self.assertEqual(e.details(), details)
            if details_re is not None:
                self.assertRegex(e.details(), details_re)
            return e
        self.fail("expected %s, got OK: %.300r" % (code, resp))


def raw_call(channel, path, body, timeout=RPC_TIMEOUT):
    """Unary call with raw bytes in and out (no (de)serializer)."""
    return channel.unary_unary(path)(body, timeout=timeout)


def varint(n):
    """n >= 0 as a protobuf varint."""
    out = bytearray()
    while True:
        b = n & 0x7f
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def wire_field(number, wire_type, payload):
    """One field on the wire: payload is the varint's value (wire type 0)
    or the bytes of a length-delimited field (wire type 2)."""
    key = varint(number << 3 | wire_type)
    return key + (varint(payload) if wire_type == 0 else varint(len(payload)) + payload)


# ---------------------------------------------------------------- references

MASK64 = (1 << 64) - 1


def splitmix64(owner):
    """The splitmix64 finalizer on the owner as uint64 (the spec's fallback hash)."""
    x = owner & MASK64
    x = (x + 0x9e3779b97f4a7c15) & MASK64
    x = ((x ^ (x >> 30)) * 0xbf58476d1ce4e5b9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94d049bb133111eb) & MASK64
    return x ^ (x >> 31)


def fallback_shard(owner, n_shards):
    return splitmix64(owner) % n_shards


def calls_decay(half_life):
    return 0.5 ** (1.0 / half_life)  # C's pow(0.5, 1.0 / H)


def calls_rate_closed(n, half_life):
    """Rate after n arrivals of one owner with --estimator-clock calls."""
    d = calls_decay(half_life)
    return (1.0 - d ** n) / (1.0 - d)


def calls_rate_exact(n, half_life):
    """The same, computed as the estimator does (r = r * d + 1 per arrival),
    so it is bit-identical to the sidecar's double."""
    d = calls_decay(half_life)
    r = 0.0
    for _ in range(n):
        r = r * d + 1.0
    return r


def ref_plan(R, qcap, W, rates):
    """The planner written from docs/decisions.md's rules, independently of the
    library (exact structure; doubles in the same order of operations)."""
    live = [(o, r, i) for i, (o, r) in enumerate(rates) if r != 0]
    live.sort(key=lambda t: (-t[1], t[2]))  # decreasing rate, ties in input order
    budget = R * W
    used = 0
    admitted = []
    unadmitted = 0.0
    admitted_total = 0.0
    for owner, rate, _ in live:
        kb = min(R, max(1, math.ceil(rate / qcap)))
        if used + kb <= budget:
            used += kb
            admitted.append((owner, rate, kb))
            admitted_total += rate
        else:
            unadmitted += rate
    load = [unadmitted / R] * R
    shards_of = []
    for owner, rate, kb in admitted:
        chosen = sorted(sorted(range(R), key=lambda s: (load[s], s))[:kb])
        for s in chosen:
            load[s] += rate / kb
        shards_of.append((owner, chosen))
    placements = [{"owner": o, "shards": sh,
                   "preferred_shard": min(sh, key=lambda s: (load[s], s))}
                  for o, sh in shards_of]
    mean = sum(load) / R
    return {"n_shards": R, "placements": placements, "expected_load": load,
            "admitted_rate_total": admitted_total, "unadmitted_rate_total": unadmitted,
            "imbalance": max(load) / mean if mean > 0 else 1.0}


def plan_dump(R, qcap, W, rates):
    """The planner LIBRARY's plan (tests/plan_dump) for the same input, as a
    dict with exact doubles; raises on a planner error."""
    text = "".join("%d,%s\n" % (o, repr(float(r))) for o, r in rates)
    p = subprocess.run([ARGS.plan_dump, str(R), repr(float(qcap)), repr(float(W))],
                       input=text.encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    if p.returncode != 0:
        raise AssertionError("plan_dump failed (%d): %s" % (p.returncode, p.stderr.decode()))
    # Integers stay text so "-0" style doubles keep their sign when converted.
    d = json.loads(p.stdout.decode(), parse_int=str, parse_float=str)
    return {
        "n_shards": int(d["n_shards"]),
        "admitted_rate_total": float(d["admitted_rate_total"]),
        "unadmitted_rate_total": float(d["unadmitted_rate_total"]),
        "imbalance": float(d["imbalance"]),
        "expected_load": [float(x) for x in d["expected_load"]],
        "placements": [{"owner": int(pl["owner"]), "preferred_shard": int(pl["preferred_shard"]),
                        "shards": [int(s) for s in pl["shards"]]} for pl in d["placements"]],
    }


def table_dict(table):
    """A RoutingTable message as the same dict shape as plan_dump's."""
    return {
        "n_shards": table.n_shards,
        "admitted_rate_total": table.admitted_rate_total,
        "unadmitted_rate_total": table.unadmitted_rate_total,
        "imbalance": table.imbalance,
        "expected_load": list(table.expected_load),
        "placements": [{"owner": p.owner, "preferred_shard": p.preferred_shard,
                        "shards": list(p.shards)} for p in table.placements],
    }


def bits(d):
    """Doubles replaced by float.hex(), so assertEqual compares them bit for bit
    (sign of zero included)."""
    if isinstance(d, float):
        return d.hex()
    if isinstance(d, list):
        return [bits(x) for x in d]
    if isinstance(d, dict):
        return {k: bits(v) for k, v in d.items()}
    return d


def plan_request(rates=None, config=None, install=False, from_estimator=False):
    req = P.cr.PlanRequest(install=install, from_estimator=from_estimator)
    if config is not None:
        R, qcap, W = config
        req.config.CopyFrom(P.cr.PlannerConfig(n_shards=R, qcap=qcap, warm_slots_per_shard=W))
    for o, r in rates or ():
        req.rates.add(owner=o, rate=r)
    return req


def free_port():
    """A loopback port nothing listens on (bound then closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def run_cli(*args, stdin=None, env=None, timeout=60):
    """Runs the cacheroute CLI; returns CompletedProcess with text out/err."""
    return subprocess.run([ARGS.cli] + [str(a) for a in args], input=stdin,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(env),
                          timeout=timeout, universal_newlines=True)


def run_sidecar(*argv, env=None, timeout=20):
    """Runs the sidecar expecting it to exit by itself (bad config, --help);
    returns CompletedProcess with text out/err. A sidecar that starts serving
    instead is killed at the timeout and reported."""
    hooked = any(k.startswith("CACHEROUTE_TEST_") for k in (env or {}))
    p = subprocess.Popen(_dying_with_parent([ARGS.sidecar_hooked if hooked else ARGS.sidecar] +
                                            list(argv)),
                         stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=clean_env(env),
                         universal_newlines=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("sidecar %s did not exit within %ds (it accepted the config?); "
                             "stderr:\n%s" % (argv, timeout, err))
    return subprocess.CompletedProcess(p.args, p.returncode, out, err)


def poll(fn, timeout, interval=0.02, what="a condition"):
    """Calls fn until it returns a truthy value; returns it, or fails."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# ---------------------------------------------------------------- redis

class Redis:
    """A real redis-server for the replica suites: on a free loopback port
    (or the given one, to bring one back where it was) and, with unix, also
    on that socket; no persistence (--save "", no AOF); with requirepass,
    clients must AUTH with it (cmd does). Killed at exit."""

    def __init__(self, port=None, unix=None, requirepass=None):
        self.port = port or free_port()
        self.unix = unix
        self.requirepass = requirepass
        argv = ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--daemonize", "no", "--protected-mode", "no"]
        if unix:
            argv += ["--unixsocket", unix, "--unixsocketperm", "700"]
        if requirepass:
            argv += ["--requirepass", requirepass]
        self.proc = subprocess.Popen(_dying_with_parent(argv), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _LIVE.append(self)
        self.url = "redis://127.0.0.1:%d" % self.port
        poll(lambda: self._ping(), START_TIMEOUT, what="redis-server answering PING")

    def _ping(self):
        try:
            return self.cmd("PING") == "PONG"
        except OSError:
            return False

    def cmd(self, *args):
        """One command over a fresh connection (AUTHed first with
        requirepass); the reply decoded (RESP)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            f = s.makefile("rb")
            if self.requirepass:
                s.sendall(_resp_command(("AUTH", self.requirepass)))
                _resp(f)
            s.sendall(_resp_command(args))
            return _resp(f)

    def kill(self):
        """SIGKILL and reap (idempotent)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self in _LIVE:
            _LIVE.remove(self)


def _resp_command(args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def _resp(f):
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_resp(f) for _ in range(n)]
    raise OSError("bad RESP reply %r" % line)
