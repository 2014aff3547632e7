"""Cheap resource attacks against the real sidecar (issue 12): descriptor
floods, clients that never read their answers or stall their uploads, calls
piling up on one method, heavy batches starving health probes, and
trickling /metrics connections. Each test bounds its own duration; the raw
HTTP/2 clients are framed by hand over a socket."""
import os
import re
import resource
import signal
import socket
import struct
import sys
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

# ---------------------------------------------------------------- helpers


def rss_bytes(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS for %d" % pid)


def small_quarantine_env():
    """ASan keeps freed memory in a 256 MB quarantine, which would read as
    held memory in RSS; a small one keeps the bounds meaningful there."""
    opts = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": (opts + ":" if opts else "") + "quarantine_size_mb=8"}


def raise_own_nofile(n):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < n:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(n, hard), hard))


def grpc_frame(body):
    return b"\x00" + struct.pack(">I", len(body)) + body


class RawH2:
    """A hand-framed HTTP/2 client connection (no HPACK state: every header
    is a literal without indexing), enough to start gRPC calls and then
    misbehave: never read the answer, or stall mid-upload."""

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, port, initial_window=None):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.next_stream = 1
        settings = b""
        if initial_window is not None:
            settings = struct.pack(">HI", 0x4, initial_window)  # SETTINGS_INITIAL_WINDOW_SIZE
        self.sock.sendall(self.PREFACE + self.frame(0x4, 0, 0, settings)
                          + self.frame(0x4, 0x1, 0, b""))  # ours, and an ACK of theirs

    @staticmethod
    def frame(ftype, flags, stream, payload):
        return (struct.pack(">I", len(payload))[1:] + bytes([ftype, flags])
                + struct.pack(">I", stream) + payload)

    @staticmethod
    def literal(name, value):
        name, value = name.encode(), value.encode()
        assert len(name) < 127 and len(value) < 127
        return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value

    def start(self, path):
        """Opens a stream for a gRPC call to path; returns its id."""
        sid = self.next_stream
        self.next_stream += 2
        block = b"".join(self.literal(k, v) for k, v in (
            (":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", "127.0.0.1"), ("content-type", "application/grpc"),
            ("te", "trailers")))
        self.sock.sendall(self.frame(0x1, 0x4, sid, block))  # END_HEADERS
        return sid

    def data(self, sid, payload, end=False):
        self.sock.sendall(self.frame(0x0, 0x1 if end else 0, sid, payload))

    def call(self, path, body):
        """A whole unary request; the answer is never read."""
        self.data(self.start(path), grpc_frame(body), end=True)

    def close(self):
        self.sock.close()

    def read_frames(self, timeout):
        """Reads what the server sent within timeout: yields (type, flags,
        stream, payload); stops at the timeout or when it closes."""
        self.sock.settimeout(timeout)
        buf = getattr(self, "_buf", b"")
        try:
            chunk = self.sock.recv(65536)
        except (socket.timeout, BlockingIOError):
            chunk = None
        except OSError:
            chunk = b""
        self.sock.settimeout(10)  # sends block again
        if chunk == b"":
            self.closed = True
        buf += chunk or b""
        while len(buf) >= 9:
            n = int.from_bytes(buf[:3], "big")
            if len(buf) < 9 + n:
                break
            yield buf[3], buf[4], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + n]
            buf = buf[9 + n:]
        self._buf = buf


def stall_uploads(port, streams, announce, upload, stall_s=1.5):
    """Opens streams calls on one connection, each announcing a message of
    announce bytes and sending upload bytes of it as the server's flow
    control allows, then stalls. Returns (bytes sent, the connection, which
    the caller closes)."""
    c = RawH2(port)
    c.closed = False
    conn_win, init_win = 65535, 65535
    wins, left = {}, {}
    for _ in range(streams):
        sid = c.start(h.SERVICE + "RecordArrival")
        c.data(sid, b"\x00" + struct.pack(">I", announce))
        wins[sid] = init_win - 5
        conn_win -= 5
        left[sid] = upload - 5
    sent, idle_since = 0, time.monotonic()
    while not c.closed and any(left.values()) and time.monotonic() - idle_since < stall_s:
        progressed = False
        for sid in wins:
            n = min(left[sid], wins[sid], conn_win, 16384)
            if n <= 0:
                continue
            try:
                c.data(sid, b"\x00" * n)
            except OSError:
                c.closed = True
                break
            wins[sid] -= n
            conn_win -= n
            left[sid] -= n
            sent += n
            progressed = True
        for ftype, flags, sid, payload in c.read_frames(0 if progressed else 0.2):
            if ftype == 0x8 and len(payload) == 4:  # WINDOW_UPDATE
                inc = int.from_bytes(payload, "big") & 0x7FFFFFFF
                if sid == 0:
                    conn_win += inc
                elif sid in wins:
                    wins[sid] += inc
                progressed = True
            elif ftype == 0x4 and not flags & 1:  # SETTINGS: a new initial window
                for i in range(0, len(payload) - 5, 6):
                    key, val = struct.unpack(">HI", payload[i:i + 6])
                    if key == 0x4:
                        for k in wins:
                            wins[k] += val - init_win
                        init_win = val
            elif (ftype == 0x3 or (ftype == 0x1 and flags & 1)) and sid in left:
                left[sid] = 0  # RST_STREAM, or trailers: the call is over
            elif ftype == 0x7:  # GOAWAY
                c.goaway = payload[8:]
        if progressed:
            idle_since = time.monotonic()
    return sent, c


def metrics_get(port, timeout):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=timeout) as r:
        return r.status, r.read()


def finished_calls(sc, method):
    """{status code name: calls of method finished}, from the sidecar's
    /metrics (cacheroute_rpc_requests_total)."""
    _, body = metrics_get(sc.config["metrics_port"], h.RPC_TIMEOUT)
    ended = {}
    for m in re.finditer(r'^cacheroute_rpc_requests_total\{[^}]*method="%s"[^}]*'
                         r'code="([A-Z_]+)"\} ([0-9.e+]+)$' % method, body.decode(), re.M):
        if float(m.group(2)) > 0:  # OK is shown at 0 too
            ended[m.group(1)] = ended.get(m.group(1), 0) + int(float(m.group(2)))
    return ended


def closed_by_peer(sock, timeout):
    """Whether the peer closes sock within timeout seconds."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(4096):
                return True
    except socket.timeout:
        return False
    except OSError:
        return True


def stats_line(sc):
    """SIGUSR2's 'current stats' log line (a new one)."""
    start = sc.n_events()
    sc.send(signal.SIGUSR2)
    return sc.wait_for(lambda e: e.get("msg") == "current stats", 20, start=start,
                       what="the 'current stats' line")


def record_owners(stub, n, batch=200000):
    for lo in range(0, n, batch):
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=range(lo, min(n, lo + batch)),
                                                     omit_routes=True), timeout=60)


# ---------------------------------------------------------------- connections


class ConnectionTest(h.SidecarTestCase):
    SHARED = False

    def test_listener_survives_fd_flood_under_prlimit(self):
        # Soft nofile 1,024 (hard 4,096): 1,100 idle TCP connections made
        # accept fail with EMFILE and gRPC core's listener never came back.
        # The sidecar now takes the hard limit, and closes connections that
        # never speak HTTP/2 after --handshake-timeout.
        n = 1100
        raise_own_nofile(n + 256)
        sc = self.start_sidecar("--replan-interval", "0", "--handshake-timeout", "3",
                                prefix=["prlimit", "--nofile=1024:4096", "--"])
        self.assertEqual(sc.config["nofile"]["soft_at_start"], 1024, sc.config["nofile"])
        self.assertEqual(sc.config["nofile"]["soft"], 4096, sc.config["nofile"])
        self.assertEqual(sc.config["nofile"]["hard"], 4096, sc.config["nofile"])
        flood = []
        try:
            for _ in range(n):
                s = socket.socket()
                s.setblocking(False)
                s.connect_ex(("127.0.0.1", sc.port))
                flood.append(s)
            time.sleep(1.0)  # let gRPC core accept them all
        finally:
            for s in flood:
                s.close()
        # New clients are served once the flood has closed.
        def served():
            ch = grpc.insecure_channel(sc.target, options=[("grpc.enable_retries", 0)])
            try:
                P.cr_grpc.CacheRouteStub(ch).GetRates(P.cr.GetRatesRequest(), timeout=2)
                return True
            except grpc.RpcError:
                return False
            finally:
                ch.close()
        h.poll(served, 20, interval=0.2, what="a new client to be served after the flood")
        sc.assert_clean_exit(self)

    def test_handshake_timeout_closes_silent_connections(self):
        sc = self.start_sidecar("--replan-interval", "0", "--handshake-timeout", "1")
        s = socket.create_connection(("127.0.0.1", sc.port), timeout=5)
        try:
            t0 = time.monotonic()
            self.assertTrue(closed_by_peer(s, 10), "a silent connection was kept open")
            self.assertLess(time.monotonic() - t0, 8)
        finally:
            s.close()
        sc.assert_clean_exit(self)


    def test_stream_and_idle_limits_reach_the_wire(self):
        # --max-concurrent-streams is the server's HTTP/2 setting, and a
        # connection without calls is sent GOAWAY after --max-connection-idle.
        sc = self.start_sidecar("--replan-interval", "0", "--max-concurrent-streams", "7",
                                "--max-connection-idle", "1")
        c = RawH2(sc.port)
        c.closed = False
        settings, goaway = {}, None
        deadline = time.monotonic() + 15
        try:
            while goaway is None and not c.closed and time.monotonic() < deadline:
                for ftype, flags, sid, payload in c.read_frames(0.5):
                    if ftype == 0x4 and not flags & 1:
                        for i in range(0, len(payload) - 5, 6):
                            key, val = struct.unpack(">HI", payload[i:i + 6])
                            settings[key] = val
                    elif ftype == 0x7:
                        goaway = time.monotonic()
        finally:
            c.close()
        self.assertEqual(settings.get(0x3), 7, settings)  # SETTINGS_MAX_CONCURRENT_STREAMS
        self.assertIsNotNone(goaway, "no GOAWAY on an idle connection within 15 s")
        sc.assert_clean_exit(self)


# ---------------------------------------------------------------- memory


class MemoryTest(h.SidecarTestCase):
    SHARED = False

    def test_unread_answers_are_cancelled_and_freed(self):
        # Twenty full GetRates whose clients never read (HTTP/2 stream
        # window 0) used to pin their answers (~7.5 MB each here) for good:
        # three rounds held 450 MB. Now each answer is cancelled after
        # --reply-deadline and its call released, so the rounds reuse the
        # same memory (the allocator keeps it, hence a bound, not a drop).
        owners, calls, rounds = 500000, 20, 3
        sc = self.start_sidecar("--replan-interval", "0", "--reply-deadline", "1",
                                env=small_quarantine_env())
        record_owners(sc.stub(), owners)
        base = rss_bytes(sc.proc.pid)
        body = P.cr.GetRatesRequest().SerializeToString()
        conns = []
        try:
            for k in range(1, rounds + 1):
                batch = [RawH2(sc.port, initial_window=0) for _ in range(calls)]
                conns += batch
                for c in batch:
                    c.call(h.SERVICE + "GetRates", body)
                st = h.poll(lambda: (lambda st: st if st["reply_timeouts"] >= calls * k
                                     and st["in_flight"] == 0 else None)(stats_line(sc)),
                            30, interval=0.5, what="round %d's answers to be cancelled" % k)
                self.assertEqual(st["in_flight_by_method"], {})
            grown = rss_bytes(sc.proc.pid) - base
            self.assertLess(grown, 250 << 20, "RSS grew by %d MB over %d rounds" % (
                grown >> 20, rounds))
            r = sc.stub().GetRates(P.cr.GetRatesRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
            self.assertEqual(len(r.rates), 1)
        finally:
            for c in conns:
                c.close()
        sc.assert_clean_exit(self)

    def test_unread_answers_share_a_byte_budget(self):
        # However many calls a method may have, answers nobody reads hold at
        # most --max-pending-reply-bytes: past it an answer is refused, not
        # queued, and the budget comes back as the unread ones are cancelled.
        owners = 500000  # a full GetRates answer is ~7.5 MB
        sc = self.start_sidecar("--replan-interval", "0", "--reply-deadline", "2",
                                "--max-message-bytes", str(16 << 20),
                                "--max-pending-reply-bytes", str(20 << 20))
        stub = sc.stub()
        record_owners(stub, owners)
        body = P.cr.GetRatesRequest().SerializeToString()
        conns = [RawH2(sc.port, initial_window=0) for _ in range(2)]
        try:
            for c in conns:
                c.call(h.SERVICE + "GetRates", body)
            h.poll(lambda: stats_line(sc)["pending_reply_bytes"] > 14 << 20, 20, interval=0.2,
                   what="two unread answers to be pending")
            e = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.GetRates,
                                    P.cr.GetRatesRequest())
            self.assertRegex(e.details(), r"^/cacheroute.v1.CacheRoute/GetRates: answers not yet "
                             r"read .*--max-pending-reply-bytes")
            # Small answers still fit; full ones again once the unread are gone.
            self.assertEqual(len(stub.GetRates(P.cr.GetRatesRequest(owners=[3]),
                                               timeout=h.RPC_TIMEOUT).rates), 1)
            h.poll(lambda: stats_line(sc)["pending_reply_bytes"] == 0, 20, interval=0.3,
                   what="the unread answers to be cancelled")
            r = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
            self.assertEqual(len(r.rates), owners)
        finally:
            for c in conns:
                c.close()
        sc.assert_clean_exit(self)

    def test_stalled_uploads_are_bounded(self):
        # Streams announcing a big message and stalling after 1 MB used to
        # hold 1 MB each for good (1,100 of them held 1.1 GB; gRPC core's
        # resource quota does not reclaim them in Debian's 1.51). Unary calls
        # now read their own request: a stalled upload counts against
        # --max-calls-per-method (here 100 of 600 are taken) and is
        # cancelled after --request-deadline.
        conns, streams, cap = 6, 100, 100
        sc = self.start_sidecar("--replan-interval", "0", "--max-calls-per-method", str(cap),
                                "--request-deadline", "2", "--metrics-listen", "127.0.0.1:0",
                                env=small_quarantine_env(), metrics=False)
        base = rss_bytes(sc.proc.pid)
        results, peak = [], [0]

        def attack():
            results.append(stall_uploads(sc.port, streams, 60 << 20, 1 << 20))
        ts = [threading.Thread(target=attack, daemon=True) for _ in range(conns)]
        for t in ts:
            t.start()
        while any(t.is_alive() for t in ts):
            peak[0] = max(peak[0], rss_bytes(sc.proc.pid))
            time.sleep(0.05)
        try:
            for t in ts:
                t.join(60)
            # Every stream ended: refused at once (over the cap), or taken
            # and cancelled by --request-deadline, or (a few, more under
            # load: 38 of 600 in one CI run) taken and ended CANCELLED by
            # gRPC core first. The server's own per-status count of finished
            # calls says all 600 ended; its stats say how.
            total, last = conns * streams, [None]

            def settled():
                st, ended = stats_line(sc), finished_calls(sc, "RecordArrival")
                last[0] = (st, ended)
                return (st, ended) if st["in_flight"] == 0 and \
                    sum(ended.values()) >= total else None
            try:
                st, ended = h.poll(settled, 30, interval=0.5,
                                   what="every stalled upload ended")
            except AssertionError as e:
                raise AssertionError("%s; last stats and ends %s; clients sent %r bytes" % (
                    e, last[0], [r[0] for r in results])) from None
            self.assertEqual(sum(ended.values()), total, ended)
            self.assertLessEqual(set(ended), {"RESOURCE_EXHAUSTED", "DEADLINE_EXCEEDED",
                                              "CANCELLED"}, ended)
            self.assertLessEqual(ended.get("RESOURCE_EXHAUSTED", 0), st["refused_calls"],
                                 (st, ended))
            self.assertLessEqual(st["refused_calls"] + st["request_timeouts"], total, st)
            self.assertGreater(st["request_timeouts"], cap // 4, st)
            self.assertLessEqual(st["request_timeouts"], cap, st)
            peak[0] = max(peak[0], rss_bytes(sc.proc.pid))
            sent = sum(r[0] for r in results)
            grown = peak[0] - base
            # Unbounded, the 600 streams would hold 600 MB; bounded, the 100
            # taken hold 100 MB plus what gRPC core buffers of the refused
            # ones before it drops them (~150 MB more under ASan: 250.8 MB
            # once, hence half the unbounded figure as the bound).
            self.assertLess(grown, 300 << 20, "RSS grew by %d MB while clients had sent %d MB" % (
                grown >> 20, sent >> 20))
            # And it keeps serving.
            r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[5]),
                                        timeout=h.RPC_TIMEOUT)
            self.assertEqual(r.recorded, 1)
        finally:
            for r in results:
                r[1].close()
        sc.assert_clean_exit(self)

    def test_calls_per_method_are_capped(self):
        sc = self.start_sidecar("--replan-interval", "0", "--max-calls-per-method", "2",
                                "--log-level", "debug")
        stub = sc.stub()
        req = P.cr.WatchDecisionsRequest()
        watches = [stub.WatchDecisions(req, timeout=60) for _ in range(2)]
        started = lambda: len(sc.find_events(
            lambda e: e.get("msg") == "call started"
            and e.get("method") == h.SERVICE + "WatchDecisions")) >= 2
        h.poll(started, 20, what="two watches in flight")
        e = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED,
                                lambda **kw: next(stub.WatchDecisions(req, **kw)))
        self.assertEqual(e.details(), "/cacheroute.v1.CacheRoute/WatchDecisions: 2 calls in "
                         "flight already, the most --max-calls-per-method allows")
        # Other methods are not held back by this one's cap.
        self.assertEqual(stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
                         .tracked_owners, 0)
        for w in watches:
            w.cancel()
        # Once they ended, a new watch is taken (and waits for receipts).
        def taken():
            try:
                next(stub.WatchDecisions(req, timeout=0.5))
            except grpc.RpcError as err:
                return err.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            return False
        h.poll(taken, 20, interval=0.1, what="a new watch to be accepted")
        self.assertGreaterEqual(stats_line(sc)["refused_calls"], 1)
        sc.assert_clean_exit(self)


# ---------------------------------------------------------------- health


def heavy_batch(size):
    """A RecordArrivalRequest with omit_routes of about size bytes, built by
    hand (65,536 owners over and over, each a 3-byte varint)."""
    block = b"".join(h.varint(o) for o in range(16384, 16384 + 65536))  # all 3-byte
    owners = block * ((size - 64) // len(block))
    return h.wire_field(1, 2, owners) + h.wire_field(2, 0, 1)  # owners (packed); omit_routes


class HealthStarvationTest(h.SidecarTestCase):
    SHARED = False

    def test_health_answers_during_heavy_batches(self):
        # Two 64 MiB omit_routes batches used to delay a Check by 2-2.6 s,
        # past the chart's 2 s probe timeout.
        # ~22M owners a batch: over --max-arrivals-per-call's default.
        sc = self.start_sidecar("--replan-interval", "0", "--threads", "2",
                                "--max-arrivals-per-call", "30000000")
        body = heavy_batch(63 << 20)
        health = sc.health_stub()
        health.Check(P.health.HealthCheckRequest(), timeout=h.RPC_TIMEOUT)
        errors, done = [], []

        def send():
            ch = sc.channel()
            try:
                for _ in range(2):
                    h.raw_call(ch, h.SERVICE + "RecordArrival", body, timeout=120)
            except grpc.RpcError as e:
                errors.append(e)
            finally:
                done.append(1)
        senders = [threading.Thread(target=send, daemon=True) for _ in range(2)]
        for t in senders:
            t.start()
        worst = 0.0
        deadline = time.monotonic() + 90
        while len(done) < len(senders) and time.monotonic() < deadline:
            t0 = time.monotonic()
            r = health.Check(P.health.HealthCheckRequest(), timeout=10)
            worst = max(worst, time.monotonic() - t0)
            self.assertEqual(r.status, P.health.HealthCheckResponse.SERVING)
            time.sleep(0.05)
        for t in senders:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertLess(worst, 1.0, "a health Check took %.2f s during heavy batches" % worst)
        sc.assert_clean_exit(self)


# ---------------------------------------------------------------- metrics


class MetricsLockoutTest(h.SidecarTestCase):
    SHARED = False

    def start(self, *flags):
        sc = self.start_sidecar("--metrics-listen", "127.0.0.1:0", "--replan-interval", "0",
                                *flags, metrics=False)
        return sc, sc.config["metrics_port"]

    def trickler(self, port, source="127.0.0.2"):
        s = socket.socket()
        s.bind((source, 0))
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(b"GET /metr")
        except OSError:
            pass  # refused at the limit: what the limits are for
        return s

    def test_tricklers_do_not_lock_out_scrapes(self):
        # 64 half-sent requests (trickled one byte at a time) used to take
        # every connection slot.
        sc, port = self.start("--metrics-timeout", "20")
        socks = [self.trickler(port) for _ in range(64)]
        stop = threading.Event()

        def trickle():
            while not stop.wait(1.0):
                for s in socks:
                    try:
                        s.send(b"i")
                    except OSError:
                        pass
        t = threading.Thread(target=trickle, daemon=True)
        t.start()
        try:
            for _ in range(3):
                t0 = time.monotonic()
                status, body = metrics_get(port, timeout=5)
                self.assertEqual(status, 200)
                self.assertIn(b"cacheroute_rpc_requests_total", body)
                self.assertLess(time.monotonic() - t0, 2.0)
                time.sleep(1.0)
        finally:
            stop.set()
            t.join(5)
            for s in socks:
                s.close()
        sc.assert_clean_exit(self)

    def test_silent_connection_is_closed_after_metrics_timeout(self):
        sc, port = self.start("--metrics-timeout", "1")
        s = self.trickler(port, source="127.0.0.1")
        try:
            t0 = time.monotonic()
            self.assertTrue(closed_by_peer(s, 10), "a silent /metrics connection was kept")
            self.assertLess(time.monotonic() - t0, 5)
        finally:
            s.close()
        self.assertEqual(metrics_get(port, timeout=5)[0], 200)
        sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
