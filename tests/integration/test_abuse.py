"""Cheap attacks on the real sidecar (issue 12): requests that would make it
spend far more than they cost to send, reservations that poison every later
decision, failed calls that change state, and strings the C side or a
proto3 client cannot take. Each is refused up front, named, with no state
changed; bounds on CPU and memory are asserted generously (the same suite
runs under ASan), never as performance figures."""
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
TEXT, KV = 1, 2
A, B, C2 = 10.0, 0.1, 2e-6  # --prefill-coeffs: prefill(L) = A + B L + C2 L^2 ms
MODEL = ("--prefill-coeffs", "%g,%g,%g" % (A, B, C2), "--kv-source", "store=100,0.5",
         "--sysfs-root", "/nonexistent", "--replan-interval", "0")


def prefill(l):
    return A + B * l + C2 * l * l


varint, field = h.varint, h.wire_field


def proc_status(pid, key):
    """A /proc/PID/status figure in kB (VmRSS, VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError("no %s for pid %d" % (key, pid))


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Spent:
    """The sidecar's CPU seconds, its peak RSS growth (MB) and the wall
    seconds over a with-block."""

    def __init__(self, sc):
        self.pid = sc.proc.pid

    def __enter__(self):
        self.cpu0, self.hwm0, self.t0 = cpu_seconds(self.pid), proc_status(self.pid, "VmHWM"), \
            time.monotonic()
        return self

    def __exit__(self, *exc):
        self.cpu = cpu_seconds(self.pid) - self.cpu0
        self.hwm_mb = (proc_status(self.pid, "VmHWM") - self.hwm0) / 1024.0
        self.wall = time.monotonic() - self.t0
        return False


class AbuseTest(h.SidecarTestCase):
    SIDECAR_FLAGS = MODEL

    def select(self, stub=None, timeout=h.RPC_TIMEOUT, **kw):
        return (stub or self.stub).SelectInjection(P.cr.SelectInjectionRequest(**kw),
                                                   timeout=timeout)

    def queue_wait(self, stub=None, gpu=0):
        """The GPU's reserved prefill left, as a dry run sees it."""
        return self.select(stub, prompt_tokens=10, dry_run=True, gpu=gpu).text.queue_wait_ms

    def receipts_made(self, stub=None):
        return (stub or self.stub).GetStats(P.cr.GetStatsRequest(),
                                            timeout=h.RPC_TIMEOUT).receipts.made

    def raw_refused(self, sc, ch, method, body):
        """A raw call of body that must end RESOURCE_EXHAUSTED: its error,
        and what the sidecar spent on it."""
        with Spent(sc) as spent:
            with self.assertRaises(grpc.RpcError) as cm:
                h.raw_call(ch, h.SERVICE + method, body, timeout=60)
        self.assertEqual(cm.exception.code(), EXHAUSTED, cm.exception.details())
        return cm.exception, spent

    # ---- 1. plan amplification ----

    def test_plan_refused_before_placing(self):
        sc = self.start_sidecar("--replan-interval", "0")
        stub = sc.stub()
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=list(range(1, 2001)),
                                                     omit_routes=True), timeout=h.RPC_TIMEOUT)
        # 26 bytes: every session takes all 65,536 shards; 1,000 of them fit
        # the budget, 65.5M shard slots, an answer of ~180 MB.
        req = h.plan_request(from_estimator=True, config=(65536, 1e-9, 1000))
        self.assertLess(len(req.SerializeToString()), 32)
        with Spent(sc) as spent:
            e = self.assertRpcError(EXHAUSTED, stub.Plan, req)
        self.assertIn("admits 1000 sessions holding 65536000 shard slots over 65536 shards",
                      e.details())
        self.assertIn("over the 67108864-byte message limit (--max-message-bytes)", e.details())
        # Placing them took ~6 s of CPU and ~250 MB before the fix.
        self.assertLess(spent.cpu, 2.0)
        self.assertLess(spent.hwm_mb, 100.0)
        # Explicit rates (a ~28 KB request) are sized the same way.
        rates = h.plan_request(rates=[(o, 1.0) for o in range(1, 2001)],
                               config=(65536, 1e-9, 1000))
        self.assertLess(len(rates.SerializeToString()), 42000)
        with Spent(sc) as spent:
            e = self.assertRpcError(EXHAUSTED, stub.Plan, rates)
        self.assertIn("65536000 shard slots", e.details())
        self.assertLess(spent.cpu, 2.0)
        # Nothing was installed; a plan that fits is still answered.
        self.assertEqual(stub.Plan(h.plan_request(rates=[(1, 10.0), (2, 80.0)],
                                                  config=(4, 50, 200), install=True),
                                   timeout=h.RPC_TIMEOUT).table.generation, 1)
        sc.assert_clean_exit(self)

    def test_plan_bound_follows_the_limit(self):
        sc = self.start_sidecar("--replan-interval", "0", "--max-message-bytes", "65536")
        stub = sc.stub()
        # 8,192 shards alone (8 bytes of expected load each) overflow 64 KiB.
        e = self.assertRpcError(EXHAUSTED, stub.Plan,
                                h.plan_request(rates=[(1, 1.0)], config=(8192, 50, 1)))
        self.assertIn("admits 1 sessions holding 1 shard slots over 8192 shards", e.details())
        self.assertIn("65536-byte message limit", e.details())
        r = stub.Plan(h.plan_request(rates=[(1, 1.0)], config=(4096, 50, 1)),
                      timeout=h.RPC_TIMEOUT)
        self.assertEqual(len(r.table.expected_load), 4096)
        sc.assert_clean_exit(self)

    # ---- 4. GetRates amplification ----

    def test_get_rates_counted_before_decoding(self):
        sc = self.start_sidecar("--replan-interval", "0")
        ch = sc.channel()
        n = 33_554_432 - 16  # 1-byte owners: a ~33.5 MB request, under the 64 MiB limit
        packed = field(1, 2, b"\x01" * n)
        e, spent = self.raw_refused(sc, ch, "GetRates", packed)
        limit = (67108864 - 32) // 22
        self.assertEqual(e.details(),
                         "owners has %d entries, at most %d allowed: their answer could need %d "
                         "bytes, over the 67108864-byte message limit (--max-message-bytes); "
                         "list fewer owners" % (n, limit, n * 22 + 32))
        # Decoding them took ~1.9 GB before the fix.
        self.assertLess(spent.hwm_mb, 300.0)
        # Unpacked (two bytes each) counts the same.
        unpacked = b"".join([field(1, 0, 1)] * 4_000_000)
        e, _ = self.raw_refused(sc, ch, "GetRates", unpacked)
        self.assertIn("owners has 4000000 entries", e.details())
        # One under the bound is answered.
        r = sc.stub().GetRates(P.cr.GetRatesRequest(owners=[1, 2]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(len(r.rates), 2)
        sc.assert_clean_exit(self)

    def test_record_arrival_routes_counted_before_decoding(self):
        sc = self.start_sidecar("--replan-interval", "0")
        ch = sc.channel()
        n = 60_000_000  # 1-byte owners: 60 MB, 480 MB once decoded
        body = field(1, 2, b"\x01" * n)
        e, spent = self.raw_refused(sc, ch, "RecordArrival", body)
        self.assertEqual(e.details(),
                         "%d owners could need %d response bytes, over the 67108864-byte message "
                         "limit (--max-message-bytes); set omit_routes or send fewer owners"
                         % (n, n * 28 + 32))
        self.assertLess(spent.hwm_mb, 300.0)
        # omit_routes (the last value on the wire wins) lets a batch through.
        ok = field(1, 2, b"\x01\x02") + field(2, 0, 0) + field(2, 0, 1)
        r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest.FromString(ok),
                                    timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.recorded, len(r.routes)), (2, 0))
        self.assertRpcError(EXHAUSTED, h.raw_call, ch, h.SERVICE + "RecordArrival",
                            field(2, 0, 1) + body + field(2, 0, 0))
        sc.assert_clean_exit(self)

    def test_record_arrival_owners_bounded_before_decoding(self):
        # With omit_routes nothing but the message limit bounded a call: 60 MB
        # of 1-byte owners took 480 MB of arena to decode (and were recorded).
        sc = self.start_sidecar("--replan-interval", "0")
        ch = sc.channel()
        n = 60_000_000
        body = field(1, 2, b"\x01" * n) + field(2, 0, 1)
        e, spent = self.raw_refused(sc, ch, "RecordArrival", body)
        self.assertEqual(e.details(),
                         "owners has %d entries, at most 1000000 allowed: the limit of "
                         "--max-arrivals-per-call; send them in several calls" % n)
        self.assertLess(spent.hwm_mb, 300.0)
        stub = sc.stub()
        self.assertEqual(stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
                         .tracked_owners, 0)
        sc.assert_clean_exit(self)

    def test_max_arrivals_per_call(self):
        sc = self.start_sidecar("--replan-interval", "0", "--max-arrivals-per-call", "1000")
        stub = sc.stub()
        over = list(range(1, 1002))
        why = ("owners has 1001 entries, at most 1000 allowed: the limit of "
               "--max-arrivals-per-call; send them in several calls")
        for omit in (True, False):  # routes or not, unpacked on the wire or packed
            self.assertRpcError(EXHAUSTED, stub.RecordArrival,
                                P.cr.RecordArrivalRequest(owners=over, omit_routes=omit),
                                details=why)
        unpacked = b"".join(field(1, 0, o) for o in over)
        self.assertRpcError(EXHAUSTED, h.raw_call, sc.channel(), h.SERVICE + "RecordArrival",
                            unpacked, details=why)
        # A stream's message over the bound ends it there, the ones before applied.
        reqs = [P.cr.RecordArrivalRequest(owners=[5000]),
                P.cr.RecordArrivalRequest(owners=over, omit_routes=True),
                P.cr.RecordArrivalRequest(owners=[5001])]
        got = []
        with self.assertRaises(grpc.RpcError) as cm:
            for r in stub.RecordArrivals(iter(reqs), timeout=h.RPC_TIMEOUT):
                got.append(r.recorded)
        self.assertEqual(got, [1])
        self.assertEqual((cm.exception.code(), cm.exception.details()),
                         (EXHAUSTED, "message 1: " + why))
        # Nothing of the refused calls was recorded.
        rates = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(([x.owner for x in rates.rates], rates.tracked_owners), ([5000], 1))
        # At the bound: answered, routes and all.
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=over[:-1]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.recorded, len(r.routes)), (1000, 1000))
        sc.assert_clean_exit(self)

    def test_repeated_messages_counted_before_decoding(self):
        # Empty entries are 2 bytes on the wire and ~50 in memory each.
        sources = field(4, 2, b"") * 65
        self.assertRpcError(INVALID, h.raw_call, self.sidecar.channel(),
                            h.SERVICE + "SelectInjection", sources,
                            details="sources has 65 entries, at most 64 allowed")
        outcomes = field(1, 2, b"") * 10001
        self.assertRpcError(INVALID, h.raw_call, self.sidecar.channel(),
                            h.SERVICE + "ReportOutcome", outcomes,
                            details="outcomes must hold at most 10000 entries, got 10001")
        sc = self.start_sidecar("--replan-interval", "0", "--max-message-bytes", "65536")
        rates = field(2, 2, b"") * 30000  # 60 KB that would decode to ~1.7 MB
        e = self.assertRpcError(EXHAUSTED, h.raw_call, sc.channel(), h.SERVICE + "Plan", rates)
        self.assertIn("rates has 30000 entries, at most", e.details())
        sc.assert_clean_exit(self)

    # ---- 5. reservation poisoning ----

    def test_one_request_cannot_reserve_hours(self):
        sc = self.start_sidecar(*MODEL)
        stub = sc.stub()
        ms = prefill(9_999_999)
        e = self.assertRpcError(INVALID, self.select, stub, prompt_tokens=9_999_999,
                                request_id="huge")
        self.assertEqual(e.details(),
                         "prompt_tokens 9999999 + knowledge_tokens 0 would reserve %.0f ms of "
                         "prefill on GPU 0, over --max-reservation-ms 600000; nothing reserved"
                         % ms)
        # Nothing reserved, kept or counted: the next decision sees an idle GPU.
        self.assertEqual(self.queue_wait(stub), 0.0)
        self.assertEqual(self.receipts_made(stub), 0)
        self.assertRpcError(grpc.StatusCode.NOT_FOUND, stub.GetDecision,
                            P.cr.GetDecisionRequest(request_id="huge"))
        # A dry run still answers what it would cost.
        r = self.select(stub, prompt_tokens=9_999_999, dry_run=True)
        self.assertAlmostEqual(r.text.prefill_ms, ms, delta=ms * 1e-9)
        sc.assert_clean_exit(self)

    def test_horizon_caps_a_timeline(self):
        sc = self.start_sidecar(*MODEL, "--reservation-horizon-s", "4")
        stub = sc.stub()
        one = prefill(20000)  # 2,810 ms
        self.select(stub, prompt_tokens=20000, request_id="a")
        e = self.assertRpcError(EXHAUSTED, self.select, stub, prompt_tokens=20000,
                                request_id="b")
        self.assertRegex(e.details(), r"^reserved prefill on GPU 0 would reach 5\.\d s ahead, "
                         r"past --reservation-horizon-s 4; nothing reserved")
        self.assertLessEqual(self.queue_wait(stub), one)
        self.assertEqual(self.receipts_made(stub), 1)
        # Outcomes move timelines too, within the same horizon.
        stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(gpu=0, queue_wait_ms=1e15)]), timeout=h.RPC_TIMEOUT)
        self.assertLessEqual(self.queue_wait(stub), 4000.0)
        sc.assert_clean_exit(self)

    def test_a_flood_of_reservations_cannot_poison_the_queue(self):
        # N5: 145 anonymous non-dry-run SelectInjection calls of 567,688
        # prompt tokens (0.01 s in all) made every later decision see a 24 h
        # GPU queue until an admin cleared it.
        sc = self.start_sidecar(*MODEL)
        stub = sc.stub()
        refused = 0
        for _ in range(145):
            try:
                self.select(stub, prompt_tokens=50_000)  # ~ 5.5 s of prefill each
            except grpc.RpcError as e:
                self.assertEqual(e.code(), EXHAUSTED)
                refused += 1
        self.assertGreater(refused, 0)
        self.assertLessEqual(self.queue_wait(stub), 600_000.0)  # the 600 s horizon
        sc.assert_clean_exit(self)
        # Reservations no outcome confirms give their time back once past
        # their predicted end and the margin: the stack behind the first
        # falls with it.
        sc = self.start_sidecar(*MODEL, "--reservation-confirm-s", "0.2")
        stub = sc.stub()
        one = prefill(9000)  # ~1 s
        for _ in range(10):
            self.select(stub, prompt_tokens=9000)
        self.assertGreater(self.queue_wait(stub), 8 * one)
        time.sleep((one + 400) / 1e3)
        self.assertEqual(self.queue_wait(stub), 0.0)  # ~8.5 s before
        # One an outcome confirmed keeps its place (it was served).
        self.select(stub, prompt_tokens=9000, request_id="served")
        self.select(stub, prompt_tokens=9000)
        stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(request_id="served", prefill_ms=one)]), timeout=h.RPC_TIMEOUT)
        self.assertGreater(self.queue_wait(stub), one)
        sc.assert_clean_exit(self)

    def test_clear_reservations(self):
        sc = self.start_sidecar(*MODEL)
        stub = sc.stub()
        for _ in range(2):
            self.select(stub, prompt_tokens=20000)
        kv = self.select(stub, prompt_tokens=100, knowledge_tokens=30000,
                         sources=[P.cr.KvSource(name="store", cached_tokens=30000)])
        self.assertEqual(kv.mode, KV)
        self.assertGreater(self.queue_wait(stub), prefill(20000))
        # Only the link: the GPU keeps its queue.
        r = stub.ClearReservations(P.cr.ClearReservationsRequest(source="store"),
                                   timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.gpus_cleared, r.links_cleared), (0, 1))
        self.assertGreater(r.cleared_ms, 0)
        self.assertGreater(self.queue_wait(stub), prefill(20000))
        # Bad filters name the field and clear nothing.
        self.assertRpcError(INVALID, stub.ClearReservations,
                            P.cr.ClearReservationsRequest(gpu=3),
                            details="gpu must be in 0..0, got 3")
        self.assertRpcError(INVALID, stub.ClearReservations,
                            P.cr.ClearReservationsRequest(source="x" * 129),
                            details="source must be 1..128 bytes, got 129")
        self.assertGreater(self.queue_wait(stub), prefill(20000))
        # Everything: the GPU's two prefills (and a bit of the KV one's) go.
        r = stub.ClearReservations(P.cr.ClearReservationsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.gpus_cleared, r.links_cleared), (1, 0))
        self.assertGreater(r.cleared_ms, prefill(20000))
        self.assertEqual(self.queue_wait(stub), 0.0)
        r = stub.ClearReservations(P.cr.ClearReservationsRequest(gpu=0), timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.gpus_cleared, r.links_cleared, r.cleared_ms), (0, 0, 0.0))
        sc.assert_clean_exit(self)

    # ---- 6. failed calls change nothing ----

    def test_refused_select_changes_nothing(self):
        sc = self.start_sidecar(*MODEL)
        stub = sc.stub()
        self.assertRpcError(INVALID, self.select, stub, prompt_tokens=20000,
                            request_id="r" * 129,
                            details="request_id must be at most 128 bytes, got 129")
        self.assertRpcError(INVALID, self.select, stub, prompt_tokens=9_000_000,
                            request_id="r1")
        self.assertEqual(self.queue_wait(stub), 0.0)
        self.assertEqual(self.receipts_made(stub), 0)
        sc.assert_clean_exit(self)
        # An answer that could not be sent is refused before the decision,
        # naming request_id's length.
        sc = self.start_sidecar(*MODEL, "--max-message-bytes", "65536")
        stub = sc.stub()
        e = self.assertRpcError(EXHAUSTED, self.select, stub, prompt_tokens=20000,
                                request_id="r" * 65300)
        self.assertRegex(e.details(), r"^the answer could need 65\d{3} bytes, over the "
                         r"65536-byte message limit \(--max-message-bytes\), with a 65300-byte "
                         r"request_id; nothing was reserved$")
        self.assertEqual(self.queue_wait(stub), 0.0)
        self.assertEqual(self.receipts_made(stub), 0)
        sc.assert_clean_exit(self)

    # ---- 7. strings ----

    def gzip_flood(self, sc, n, body):
        """n concurrent anonymous GetNodeProfile calls of body, gzip-compressed
        on the wire: their status codes, and what the sidecar spent."""
        import threading
        ch = grpc.insecure_channel(sc.target, compression=grpc.Compression.Gzip)
        self.addCleanup(ch.close)
        codes = []
        def one():
            try:
                h.raw_call(ch, h.SERVICE + "GetNodeProfile", body, timeout=120)
                codes.append(grpc.StatusCode.OK)
            except grpc.RpcError as e:
                codes.append(e.code())
        with Spent(sc) as spent:
            threads = [threading.Thread(target=one) for _ in range(n)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
        return codes, spent

    def test_gzip_cannot_amplify(self):
        # N3: 16 concurrent anonymous GetNodeProfile calls, 61 KB of gzip each
        # on the wire and 60 MiB inflated (an unknown field of zeros), raised
        # the sidecar's memory by 1.2 GB.
        body = field(15, 2, b"\0" * (60 << 20))
        sc = self.start_sidecar(*MODEL)
        codes, spent = self.gzip_flood(sc, 16, body)
        self.assertEqual(codes, [grpc.StatusCode.UNIMPLEMENTED] * 16)
        self.assertLess(spent.hwm_mb, 64, spent.hwm_mb)  # refused without inflating
        sc.assert_clean_exit(self)
        # Inflated on request: each within --max-message-bytes, at once at
        # most a quarter of --memory-quota-bytes at that size (here 1).
        # Under ASan freed buffers sit in its quarantine (256 MiB by default)
        # and count in the RSS; a small one keeps the bound about the sidecar.
        sc = self.start_sidecar(*MODEL, "--compressed-requests", "inflate",
                                "--memory-quota-bytes", str(256 << 20),
                                env={"ASAN_OPTIONS": ":".join(filter(None, [
                                    os.environ.get("ASAN_OPTIONS"), "quarantine_size_mb=16"]))})
        codes, spent = self.gzip_flood(sc, 16, body)
        self.assertTrue(set(codes) <= {grpc.StatusCode.OK, EXHAUSTED}, codes)
        self.assertIn(grpc.StatusCode.OK, codes)
        self.assertLess(spent.hwm_mb, 400, spent.hwm_mb)  # 1.2 GB before
        over = field(15, 2, b"\0" * (65 << 20))  # inflates past the 64 MiB limit
        codes, _ = self.gzip_flood(sc, 1, over)
        self.assertEqual(codes, [EXHAUSTED])
        sc.stub().GetStats(P.cr.GetStatsRequest(), timeout=h.RPC_TIMEOUT)
        sc.assert_clean_exit(self)

    def test_invalid_utf8_and_nul_are_named(self):
        ch = self.sidecar.channel()
        before = self.receipts_made()
        cases = [
            ("SelectInjection", field(1, 2, b"\xff\xfe") + field(2, 0, 100),
             "request_id must be valid UTF-8, not at byte 0 of 2"),
            ("SelectInjection", field(2, 0, 100) + field(4, 2, field(1, 2, b"ok")) +
             field(4, 2, field(1, 2, b"ab\xc3")),
             "sources[1].name must be valid UTF-8, not at byte 2 of 3"),
            ("SelectInjection", field(2, 0, 100) + field(4, 2, field(1, 2, b"a\x00b")),
             "sources[0].name must not contain a NUL byte, found at byte 1 of 3"),
            # Overlong and surrogate forms are not UTF-8 either.
            ("SelectInjection", field(1, 2, b"id\xc0\xaf"),
             "request_id must be valid UTF-8, not at byte 2 of 4"),
            ("SelectInjection", field(1, 2, b"\xed\xa0\x80"),
             "request_id must be valid UTF-8, not at byte 0 of 3"),
            ("ReportOutcome", field(1, 2, b"") + field(1, 2, field(11, 2, b"s\x00")),
             "outcomes[1].source must not contain a NUL byte, found at byte 1 of 2"),
            ("GetDecision", field(1, 2, b"\x80"),
             "request_id must be valid UTF-8, not at byte 0 of 1"),
            ("ClearReservations", field(2, 2, b"st\x00re"),
             "source must not contain a NUL byte, found at byte 2 of 5"),
        ]
        for method, body, details in cases:
            with self.subTest(method=method, details=details):
                self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + method, body,
                                    details=details)
        # The health service's strings too.
        self.assertRpcError(INVALID, h.raw_call, ch, "/grpc.health.v1.Health/Check",
                            field(1, 2, b"\xff"),
                            details="service must be valid UTF-8, not at byte 0 of 1")
        self.assertEqual(self.receipts_made(), before)
        self.assertEqual(self.queue_wait(), 0.0)
        # Valid multi-byte UTF-8 is echoed back as it came.
        r = self.select(prompt_tokens=10, dry_run=True, request_id="r\u00e9\u4e2d\U0001f600",
                        sources=[P.cr.KvSource(name="s\u00e9", cached_tokens=0)])
        self.assertEqual(r.request_id, "r\u00e9\u4e2d\U0001f600")

    def test_health_watch_of_a_cut_name_is_unknown(self):
        """A Watch for "cacheroute.v1.CacheRoute\\0x" must not pass for the
        CacheRoute service once C cuts it at the NUL; nor may a name that
        is not UTF-8 pass for the server as a whole."""
        ch = self.sidecar.channel()
        watch = ch.unary_stream("/grpc.health.v1.Health/Watch",
                                request_serializer=lambda b: b,
                                response_deserializer=P.health.HealthCheckResponse.FromString)
        unknown = P.health.HealthCheckResponse.SERVICE_UNKNOWN
        serving = P.health.HealthCheckResponse.SERVING
        for name, want in [(b"cacheroute.v1.CacheRoute\x00x", unknown), (b"\xff", unknown),
                           (b"cacheroute.v1.CacheRoute", serving)]:
            with self.subTest(name=name):
                stream = watch(field(1, 2, name), timeout=h.RPC_TIMEOUT)
                self.assertEqual(next(stream).status, want)
                stream.cancel()


if __name__ == "__main__":
    h.main()
