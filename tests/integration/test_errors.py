"""Bad input over the wire: exact INVALID_ARGUMENT messages, size limits,
malformed bytes, unknown methods; rejected calls change no state and the
sidecar keeps serving and exits 0 at the end."""
import math
import os
import random
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
NAN = float("nan")
INF = float("inf")

LIMIT = 65536  # the sidecar's floor for --max-message-bytes
# Every RecordArrival entry may need 28 response bytes (+32 for the rest).
MAX_ROUTED = (LIMIT - 32) // 28


class ErrorsTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--max-message-bytes", str(LIMIT), "--estimator-clock", "calls",
                     "--half-life", "8", "--replan-interval", "0", "--route-by", "plan")

    def plan_error(self, code, details, **kw):
        return self.assertRpcError(code, self.stub.Plan, h.plan_request(**kw), details=details)

    def rates(self, owners):
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=owners), timeout=h.RPC_TIMEOUT)
        return [x.rate for x in g.rates]

    def tracked(self):
        return self.stub.GetRates(P.cr.GetRatesRequest(owners=[0]),
                                  timeout=h.RPC_TIMEOUT).tracked_owners

    def test_rates_bounded_so_sums_stay_finite(self):
        # N11: finite rates of DBL_MAX gave expected_load Infinity and
        # imbalance NaN.
        self.plan_error(INVALID, "rates[0].rate must be at most 1e+15, got "
                        "1.7976931348623157e+308", rates=[(1, 1.7976931348623157e308)])
        self.plan_error(INVALID, "rates[1].rate must be at most 1e+15, got 1000000000000001",
                        rates=[(1, 1.0), (2, 1.000000000000001e15)])
        # At the bound every figure of the answer is finite.
        resp = self.stub.Plan(P.cr.PlanRequest(
            rates=[P.cr.SessionRate(owner=k, rate=1e15) for k in range(64)]),
            timeout=h.RPC_TIMEOUT)
        t = resp.table
        for x in list(t.expected_load) + [t.imbalance, t.admitted_rate_total,
                                          t.unadmitted_rate_total]:
            self.assertTrue(math.isfinite(x), t)

    def test_rate_messages(self):
        self.plan_error(INVALID, "rates[3].rate must be finite and >= 0, got -1",
                        rates=[(1, 1.0), (2, 2.0), (3, 0.0), (4, -1.0)])
        self.plan_error(INVALID, "rates[0].rate must be finite and >= 0, got nan",
                        rates=[(1, NAN)])
        self.plan_error(INVALID, "rates[1].rate must be finite and >= 0, got inf",
                        rates=[(1, 1.0), (2, INF)])
        self.plan_error(INVALID, "rates[2].rate must be finite and >= 0, got -inf",
                        rates=[(1, 1.0), (2, 1.0), (3, -INF)])
        self.plan_error(INVALID, "rates[0].rate must be finite and >= 0, got -2.5e-300",
                        rates=[(1, -2.5e-300)])
        self.plan_error(INVALID, "rates[4].owner 7 duplicates rates[1].owner",
                        rates=[(1, 1.0), (7, 2.0), (3, 0.0), (4, 1.0), (7, 1.0)])
        # Duplicates count even at rate 0 (validation comes first).
        self.plan_error(INVALID, "rates[1].owner -9223372036854775808 duplicates rates[0].owner",
                        rates=[(-2**63, 0.0), (-2**63, 1.0)])
        # The first bad entry in input order is reported.
        self.plan_error(INVALID, "rates[1].rate must be finite and >= 0, got -3",
                        rates=[(5, 1.0), (6, -3.0), (5, 1.0), (8, NAN)])

    def test_config_messages(self):
        ok = [(1, 1.0)]
        cases = [
            ((0, 50.0, 200.0), "config.n_shards must be in 1..65536, got 0"),
            ((65537, 50.0, 200.0), "config.n_shards must be in 1..65536, got 65537"),
            ((4294967295, 50.0, 200.0), "config.n_shards must be in 1..65536, got 4294967295"),
            ((4, NAN, 200.0), "config.qcap must be finite and > 0, got nan"),
            ((4, INF, 200.0), "config.qcap must be finite and > 0, got inf"),
            ((4, -INF, 200.0), "config.qcap must be finite and > 0, got -inf"),
            ((4, 0.0, 200.0), "config.qcap must be finite and > 0, got 0"),
            ((4, -1.0, 200.0), "config.qcap must be finite and > 0, got -1"),
            ((4, 50.0, NAN), "config.warm_slots_per_shard must be finite and > 0, got nan"),
            ((4, 50.0, INF), "config.warm_slots_per_shard must be finite and > 0, got inf"),
            ((4, 50.0, 0.0), "config.warm_slots_per_shard must be finite and > 0, got 0"),
            ((4, 50.0, -2.5), "config.warm_slots_per_shard must be finite and > 0, got -2.5"),
        ]
        for cfg, msg in cases:
            with self.subTest(cfg=cfg):
                self.plan_error(INVALID, msg, rates=ok, config=cfg)
                self.plan_error(INVALID, msg, from_estimator=True, config=cfg)
        # (A present but empty config used to be taken as is and refused; its
        # fields are proto3 `optional` now, so unset fields take the flags:
        # see test_empty_config_is_no_config.)

    def test_set_invalid_field_alone_is_named(self):
        # An explicitly set invalid value is an error naming the field, even
        # with the other fields unset (taken from the sidecar): proto3
        # `optional` puts an explicit 0 on the wire, so it is never "unset".
        ok = [(1, 1.0)]
        cases = [
            (dict(n_shards=0), "config.n_shards must be in 1..65536, got 0"),
            (dict(n_shards=65537), "config.n_shards must be in 1..65536, got 65537"),
            (dict(qcap=0.0), "config.qcap must be finite and > 0, got 0"),
            (dict(qcap=NAN), "config.qcap must be finite and > 0, got nan"),
            (dict(warm_slots_per_shard=0.0),
             "config.warm_slots_per_shard must be finite and > 0, got 0"),
            (dict(warm_slots_per_shard=-INF),
             "config.warm_slots_per_shard must be finite and > 0, got -inf"),
            (dict(n_shards=0, qcap=30.0), "config.n_shards must be in 1..65536, got 0"),
            (dict(qcap=30.0, warm_slots_per_shard=-2.5),
             "config.warm_slots_per_shard must be finite and > 0, got -2.5"),
        ]
        for fields, msg in cases:
            for kw in (dict(rates=ok), dict(from_estimator=True)):
                with self.subTest(fields=fields, via=next(iter(kw))):
                    req = h.plan_request(**kw)
                    req.config.CopyFrom(P.cr.PlannerConfig(**fields))
                    self.assertRpcError(INVALID, self.stub.Plan, req, details=msg)
        # The same as raw bytes: config { n_shards: 0 } (tag 1, varint 0),
        # from_estimator true.
        body = b"\x0a\x02\x08\x00" + b"\x18\x01"
        self.assertRpcError(INVALID, h.raw_call, self.sidecar.channel(), h.SERVICE + "Plan", body,
                            details="config.n_shards must be in 1..65536, got 0")

    def test_rejected_plans_install_nothing(self):
        sc = self.start_sidecar("--max-message-bytes", str(LIMIT), "--n-shards", "8",
                                "--replan-interval", "0", "--route-by", "plan")
        stub = sc.stub()
        t = stub.Plan(h.plan_request(rates=[(1, 10.0), (2, 80.0)], config=(4, 50.0, 200.0),
                                     install=True), timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 1)
        probe = P.cr.RecordArrivalRequest(owners=[2, 1, 3])

        def routes():
            r = stub.RecordArrival(probe, timeout=h.RPC_TIMEOUT)
            return r.table_generation, [(x.admitted, x.preferred_shard) for x in r.routes]

        before = routes()
        self.assertEqual(before, (1, [(True, 0), (True, 2), (False, h.fallback_shard(3, 4))]))
        bad = [
            dict(rates=[(3, 1.0), (4, -1.0)]),
            dict(rates=[(3, 1.0), (3, 1.0)]),
            dict(rates=[(3, 1.0)], config=(0, 50.0, 200.0)),
            dict(rates=[(3, 1.0)], config=(2, NAN, 200.0)),
            dict(rates=[(3, 1.0)], from_estimator=True),
            dict(),
            dict(from_estimator=True, config=(2, 50.0, -1.0)),
        ]
        for kw in bad:
            with self.subTest(kw=kw):
                self.assertRpcError(INVALID, stub.Plan, h.plan_request(install=True, **kw))
        # A plan whose answer would not fit the send limit is refused, and
        # not installed either.
        e = self.assertRpcError(EXHAUSTED, stub.Plan,
                                h.plan_request(rates=[(3, 1.0)], config=(10000, 50.0, 1.0),
                                               install=True))
        self.assertIn(f"over the {LIMIT}-byte message limit", e.details())
        # A request over the receive limit is refused by the transport.
        self.assertRpcError(EXHAUSTED, stub.Plan,
                            h.plan_request(rates=[(i, 1.0) for i in range(8000)], install=True))
        self.assertEqual(routes(), before)
        t = stub.Plan(h.plan_request(rates=[(3, 1.0)], config=(2, 50.0, 1.0), install=True),
                      timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 2)
        self.assertEqual(routes(), (2, [(False, h.fallback_shard(2, 2)),
                                        (False, h.fallback_shard(1, 2)), (True, 0)]))
        sc.assert_clean_exit(self)

    def test_rejected_record_arrival_records_nothing(self):
        owners = list(range(5000, 5000 + MAX_ROUTED + 1))
        tracked = self.tracked()
        e = self.assertRpcError(EXHAUSTED, self.stub.RecordArrival,
                                P.cr.RecordArrivalRequest(owners=owners))
        self.assertIn("omit_routes", e.details())
        self.assertIn(str(LIMIT), e.details())
        self.assertEqual(self.rates(owners[:5] + owners[-5:]), [0.0] * 10)
        self.assertEqual(self.tracked(), tracked)
        # Over the receive limit (the transport refuses it).
        big = list(range(-2**63, -2**63 + 8000))  # 10-byte varints: ~80 KB
        self.assertRpcError(EXHAUSTED, self.stub.RecordArrival,
                            P.cr.RecordArrivalRequest(owners=big, omit_routes=True))
        self.assertEqual(self.tracked(), tracked)
        # One fewer fits: the limit is exact, not approximate.
        r = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners[:-1]),
                                    timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.recorded, len(r.routes)), (MAX_ROUTED, MAX_ROUTED))
        # Negative owners take the widest routes: still within the limit.
        neg = [-2**63 + i for i in range(MAX_ROUTED)]
        r = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=neg), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.recorded, MAX_ROUTED)
        # With omit_routes the whole list is accepted.
        r = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners, omit_routes=True),
                                    timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.recorded, len(owners))
        self.assertEqual(self.rates(owners[:1] + owners[-1:]), [h.calls_rate_exact(2, 8.0), 1.0])

    def test_get_rates_listed_over_limit(self):
        owners = list(range(16000))  # ~80 KB of answer
        e = self.assertRpcError(EXHAUSTED, self.stub.GetRates, P.cr.GetRatesRequest(owners=owners))
        self.assertIn(f"over the {LIMIT}-byte message limit", e.details())

    def test_malformed_bytes(self):
        ch = self.sidecar.channel()
        bodies = [b"\xff\xff\xff", b"\x0a\x05\x01", b"\x08", b"\x12\x80", b"\x09" + b"\x07" * 8,
                  b"\x12\x03\x08\x01", b"\x0b"]
        for method in ("Plan", "RecordArrival", "GetRates", "Forget"):
            for body in bodies:
                with self.subTest(method=method, body=body):
                    e = self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + method, body)
                    self.assertIn("malformed cacheroute.v1.", e.details())
        for path in ("/grpc.health.v1.Health/Check",):
            self.assertRpcError(INVALID, h.raw_call, ch, path, b"\xff\xff")
        # No message at all on a unary method.
        self.assertRpcError(INVALID, ch.stream_unary(h.SERVICE + "RecordArrival"), iter([]),
                            details="missing request message")

    def test_malformed_changes_nothing(self):
        ch = self.sidecar.channel()
        self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[6001]), timeout=h.RPC_TIMEOUT)
        tracked = self.tracked()
        # A valid owners list followed by garbage: nothing is recorded.
        body = P.cr.RecordArrivalRequest(owners=[6001, 6002]).SerializeToString() + b"\xff"
        self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + "RecordArrival", body)
        body = P.cr.ForgetRequest(owners=[6001]).SerializeToString() + b"\x0a\x05"
        self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + "Forget", body)
        self.assertEqual(self.rates([6001, 6002]), [1.0, 0.0])
        self.assertEqual(self.tracked(), tracked)

    def test_wire_compatibility(self):
        ch = self.sidecar.channel()
        # Unknown fields are skipped; unpacked repeated int64 is accepted.
        body = b"\xf8\x06\x05" + P.cr.RecordArrivalRequest(owners=[10001]).SerializeToString()
        r = P.cr.RecordArrivalResponse.FromString(
            h.raw_call(ch, h.SERVICE + "RecordArrival", body))
        self.assertEqual([x.owner for x in r.routes], [10001])
        r = P.cr.RecordArrivalResponse.FromString(
            h.raw_call(ch, h.SERVICE + "RecordArrival", b"\x08\x90\x4e\x08\x90\x4e\x08\x07"))
        self.assertEqual([(x.owner, x.rate) for x in r.routes],
                         [(10000, 1.0), (10000, h.calls_rate_exact(2, 8.0)), (7, 1.0)])

    def test_unknown_methods(self):
        ch = self.sidecar.channel()
        for path in (h.SERVICE + "Nope", "/foo.Bar/Baz", "/cacheroute.v1.CacheRoute/plan",
                     "/grpc.health.v1.Health/List"):
            with self.subTest(path=path):
                e = self.assertRpcError(grpc.StatusCode.UNIMPLEMENTED, h.raw_call, ch, path, b"")
                self.assertIn(path, e.details())

    def test_random_garbage_never_crashes(self):
        # 1500 seeded random bodies (some valid-looking) on every method; only
        # well-defined answers come back.
        ch = self.sidecar.channel()
        rng = random.Random(99)
        paths = [h.SERVICE + m for m in ("Plan", "RecordArrival", "GetRates", "Forget")]
        paths.append("/grpc.health.v1.Health/Check")
        allowed = {grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.RESOURCE_EXHAUSTED,
                   grpc.StatusCode.NOT_FOUND}
        for i in range(1500):
            n = rng.randrange(0, 48)
            body = bytes(rng.randrange(256) for _ in range(n))
            if i % 3 == 0:  # plausible tags with random payloads
                body = bytes([rng.choice([0x08, 0x0a, 0x11, 0x12, 0x18, 0x20, 0x1a])]) + body
            path = paths[i % len(paths)]
            try:
                h.raw_call(ch, path, body)
            except grpc.RpcError as e:
                self.assertIn(e.code(), allowed, (path, body, e.details()))
        self.assertEqual(self.sidecar.proc.poll(), None)

    def test_zz_still_serving(self):
        # Named to run last in this class: after all the bad input above.
        hs = self.sidecar.health_stub()
        r = hs.Check(P.health.HealthCheckRequest(service=""), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.status, P.health.HealthCheckResponse.SERVING)
        t = self.stub.Plan(h.plan_request(rates=[(1, 10.0), (2, 80.0)], config=(4, 50.0, 200.0)),
                           timeout=h.RPC_TIMEOUT).table
        self.assertEqual(list(t.expected_load), [40.0, 40.0, 10.0, 0.0])


class InjectionSmokeTest(h.SidecarTestCase):
    """SelectInjection and GetNodeProfile are specified and tested by their own
    suites; here only that they answer over the wire and survive bad bytes."""
    SIDECAR_FLAGS = ("--replan-interval", "0")

    def test_select_injection_answers(self):
        r = self.stub.SelectInjection(P.cr.SelectInjectionRequest(request_id="r1",
                                                                   prompt_tokens=10),
                                      timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.request_id, "r1")
        self.assertIn(r.reason, ("no_knowledge", "no_kv_available", "kv_faster",
                                 "kv_hidden_by_queue", "text_faster", "link_congested"))
        self.assertIn(r.mode, (P.cr.INJECTION_MODE_TEXT, P.cr.INJECTION_MODE_KV_CACHE))

    def test_get_node_profile_answers(self):
        r = self.stub.GetNodeProfile(P.cr.GetNodeProfileRequest(), timeout=h.RPC_TIMEOUT)
        self.assertTrue(r.HasField("cost_model"))
        self.assertGreater(r.cost_model.kv_bytes_per_token, 0)

    def test_malformed(self):
        ch = self.sidecar.channel()
        for m in ("SelectInjection", "GetNodeProfile"):
            for body in (b"\xff\xff\xff", b"\x0a\x05\x01"):
                with self.subTest(method=m, body=body):
                    self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + m, body)


if __name__ == "__main__":
    h.main()
