"""Route and Routes over the wire, against the real sidecar: a request's
every encoding (packed or unpacked hashes, fields in any order, unknown
fields) means the same routes, and every bad field is refused naming it,
with nothing routed. The sidecar decodes Route straight from the wire and
falls back to protobuf-c when unsure; these pin what callers see."""
import os
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import urllib.request  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
BT = 16
ROUTE = h.SERVICE + "Route"


def item_bytes(hashes, packed=True, owner=None, prompt_tokens=None, extra=b""):
    """A RouteItem by hand: hashes packed (one length-delimited field 3) or
    unpacked (one varint field 3 each), then owner and prompt tokens after
    them (out of field order), then extra."""
    if packed:
        body = h.wire_field(3, 2, b"".join(h.varint(x) for x in hashes))
    else:
        body = b"".join(h.wire_field(3, 0, x) for x in hashes)
    if owner is not None:
        body += h.wire_field(1, 0, owner)
    if prompt_tokens is not None:
        body += h.wire_field(2, 0, prompt_tokens)
    return body + extra


def request_bytes(*items):
    return b"".join(h.wire_field(1, 2, i) for i in items)


class RouteTest(h.SidecarTestCase):
    def setUp(self):
        self.sc = self.start_sidecar("--n-shards", "8", "--block-tokens", str(BT),
                                     "--max-route-hashes", "64")
        self.stub = self.sc.stub()
        self.ch = self.sc.channel()

    def raw(self, body):
        return P.cr.RouteResponse.FromString(h.raw_call(self.ch, ROUTE, body))

    def test_every_encoding_routes_the_same(self):
        hashes = [(7 << 60) + i * 0x9E3779B97F4A7C15 % 2**60 for i in range(40)]
        first = self.raw(request_bytes(item_bytes(hashes, owner=3, prompt_tokens=40 * BT)))
        shard = first.routes[0].shard
        # The same blocks, unpacked, fields reordered, an unknown field and
        # an unknown wire type 5 field on top: the same prompt, now cached there.
        unknown = h.wire_field(99, 0, 5) + h.varint(100 << 3 | 5) + b"\x01\x02\x03\x04"
        again = self.raw(request_bytes(item_bytes(hashes, packed=False, prompt_tokens=40 * BT,
                                                  owner=3, extra=unknown)))
        d = again.routes[0]
        self.assertEqual((d.shard, d.cached_tokens, d.reason), (shard, 40 * BT, "prefix"))
        # And the generated stub's own encoding agrees.
        d = self.stub.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
            owner=3, prompt_tokens=40 * BT, block_hashes=hashes)]),
            timeout=h.RPC_TIMEOUT).routes[0]
        self.assertEqual((d.shard, d.cached_tokens), (shard, 40 * BT))

    def test_bad_fields_are_named_and_nothing_is_routed(self):
        good = P.cr.RouteItem(block_hashes=[11, 12, 13], prompt_tokens=3 * BT)
        cases = [
            (P.cr.RouteItem(prompt_tokens=20000000),
             r"^requests\[1\]\.prompt_tokens must be at most 10000000, got 20000000$"),
            (P.cr.RouteItem(namespace="n" * 257),
             r"^requests\[1\]\.namespace must be at most 256 bytes, got 257$"),
            (P.cr.RouteItem(request_id="r" * 129),
             r"^requests\[1\]\.request_id must be at most 128 bytes, got 129$"),
            (P.cr.RouteItem(block_hashes=list(range(1, 66))),
             r"^requests\[1\]\.block_hashes has 65 hashes, at most 64 \(--max-route-hashes\)$"),
            (P.cr.RouteItem(ttft_slo_ms=-1),
             r"^requests\[1\]\.ttft_slo_ms must be in \[0, 86400000\], got -1$"),
            (P.cr.RouteItem(priority=2000),
             r"^requests\[1\]\.priority must be in \[-1000, 1000\], got 2000$"),
            (P.cr.RouteItem(objective="o" * 64),
             r"^requests\[1\]\.objective must be at most 63 bytes, got 64$"),
            (P.cr.RouteItem(fairness_id="f" * 64),
             r"^requests\[1\]\.fairness_id must be at most 63 bytes, got 64$"),
        ]
        for bad, words in cases:
            self.assertRpcError(INVALID, self.stub.Route,
                                P.cr.RouteRequest(requests=[good, bad]), details_re=words)
        self.assertRpcError(INVALID, self.stub.Route, P.cr.RouteRequest(),
                            details="requests must not be empty")
        # Nothing of the refused calls was indexed: the good item is cold.
        d = self.stub.Route(P.cr.RouteRequest(requests=[good]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(d.routes[0].cached_tokens, 0)

    def test_bytes_protobuf_refuses_are_refused(self):
        # A namespace that is not UTF-8, a truncated packed run, a length
        # past the end: INVALID_ARGUMENT, whichever decoder saw them.
        bad_utf8 = request_bytes(item_bytes([1, 2]) + h.wire_field(4, 2, b"\xff\xfe"))
        truncated = request_bytes(h.wire_field(3, 2, b"\x80\x80"))
        past_end = h.varint(1 << 3 | 2) + h.varint(50) + b"\x08\x01"
        for body in (bad_utf8, truncated, past_end):
            with self.assertRaises(grpc.RpcError) as cm:
                h.raw_call(self.ch, ROUTE, body)
            self.assertEqual(cm.exception.code(), INVALID, body)
        self.assertEqual(self.raw(request_bytes(item_bytes([1, 2]))).routes[0].cached_tokens, 0)

    def test_too_many_requests_are_refused_before_decoding(self):
        self.assertRpcError(EXHAUSTED, self.stub.Route,
                            P.cr.RouteRequest(requests=[P.cr.RouteItem()] * 4097),
                            details_re="requests")

    def test_a_stream_ends_naming_its_bad_message(self):
        ok = P.cr.RouteRequest(requests=[P.cr.RouteItem(block_hashes=[5, 6])])
        bad = P.cr.RouteRequest(requests=[P.cr.RouteItem(prompt_tokens=20000000)])
        call = self.stub.Routes(iter([ok, ok, bad, ok]), timeout=h.RPC_TIMEOUT)
        got = []
        with self.assertRaises(grpc.RpcError) as cm:
            for resp in call:
                got.append(resp)
        self.assertEqual(len(got), 2)
        self.assertEqual(got[1].routes[0].cached_tokens, 2 * BT)
        self.assertEqual(cm.exception.code(), INVALID)
        self.assertRegex(cm.exception.details(), r"^message 2: requests\[0\]\.prompt_tokens")


class RouteDoorTest(h.SidecarTestCase):
    """--objectives: the door's word in RouteDecision.door, and its counts on
    /metrics. With --admit-pressure 0 the door acts at once: an SLO of
    0.001 ms no prefill meets, so a sheddable request is shed, a critical
    one routed, one without an objective never looked at."""

    def setUp(self):
        self.sc = self.start_sidecar("--n-shards", "4", "--block-tokens", str(BT),
                                     "--objectives", "interactive:0:2000,batch:-1:30000",
                                     "--admit-pressure", "0",
                                     "--metrics-listen", "127.0.0.1:0")
        self.stub = self.sc.stub()

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def test_the_door_sheds_only_the_sheddable(self):
        hashes = list(range(1, 41))
        items = [P.cr.RouteItem(block_hashes=hashes, objective="batch", ttft_slo_ms=0.001,
                                fairness_id="tenant-b"),
                 P.cr.RouteItem(block_hashes=hashes, objective="interactive",
                                ttft_slo_ms=0.001, fairness_id="tenant-a"),
                 P.cr.RouteItem(block_hashes=hashes)]
        routes = self.stub.Route(P.cr.RouteRequest(requests=items),
                                 timeout=h.RPC_TIMEOUT).routes
        self.assertEqual([d.door for d in routes], ["shed", "", ""])
        self.assertFalse(routes[0].admitted)
        self.assertGreater(routes[0].queue_wait_ms + routes[0].prefill_ms, 0.001)
        page = self.metrics()
        for want in ('cacheroute_door_requests_total{objective="batch",verdict="shed"} 1',
                     'cacheroute_door_requests_total{objective="interactive",verdict="admitted"} 1',
                     'cacheroute_door_fairness_requests_total{fairness_id="tenant-b",'
                     'verdict="shed"} 1',
                     'cacheroute_door_bound{bound="max_queued"} 0',
                     'cacheroute_door_bound{bound="budget_ms"} 1000'):
            self.assertIn(want, page)

    def test_receipts_and_attainment(self):
        # Routes that meet the door leave receipts with their objective and
        # the door's word; an outcome's TTFT counts toward the attainment.
        items = [P.cr.RouteItem(block_hashes=[7, 8], objective="interactive",
                                fairness_id="t", request_id="met"),
                 P.cr.RouteItem(block_hashes=[7, 8], objective="batch", ttft_slo_ms=0.001,
                                request_id="shed")]
        routes = self.stub.Route(P.cr.RouteRequest(requests=items),
                                 timeout=h.RPC_TIMEOUT).routes
        self.assertEqual([d.door for d in routes], ["", "shed"])
        r = self.stub.GetDecision(P.cr.GetDecisionRequest(request_id="shed"),
                                  timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.objective, r.door, r.ttft_slo_ms), ("batch", "shed", 0.001))
        self.stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(request_id="met", ttft_ms=150)]), timeout=h.RPC_TIMEOUT)
        r = self.stub.GetDecision(P.cr.GetDecisionRequest(request_id="met"),
                                  timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.objective, r.fairness_id, r.door, r.outcomes),
                         ("interactive", "t", "", 1))
        page = self.metrics()
        self.assertIn('cacheroute_door_slo_met_total{objective="interactive"} 1', page)
        self.assertIn('cacheroute_door_slo_attainment_ratio{objective="interactive"} 1', page)


class RouteMeetTest(h.SidecarTestCase):
    """--admit-meet-slo: a request with an SLO whose pick (its prefix's
    shard, behind a queue the cache is worth at --miss-weight 32) would
    miss it goes to the idle shard, cold but within it, when the door
    acts (pressed: here --admit-pressure 0) or always; off, or pressed by
    a door that is idle (the default pressure bound, no sample above it),
    to the pick. The prefill model is fixed at 1 ms a token (no calibration): a prefix
    of 40 blocks of 16 tokens is 640 ms cold, so the numbers are the
    rule's own and wall time between the calls (milliseconds) is far
    inside the margins."""

    def with_meet(self, meet, *flags):
        return self.start_sidecar("--n-shards", "2", "--block-tokens", str(BT),
                                  "--prefill-coeffs", "0,1,0", "--calibrate", "off",
                                  "--objectives", "interactive:0:2000",
                                  "--admit-meet-slo", meet, *flags).stub()

    def route(self, stub, **kw):
        item = P.cr.RouteItem(block_hashes=list(range(100, 140)), **kw)
        return stub.Route(P.cr.RouteRequest(requests=[item]), timeout=h.RPC_TIMEOUT).routes[0]

    def cached_then_loaded(self, stub):
        """The prefix cached on one shard, 3.6 s of work queued there; then
        the prefix asked again, interactive: its home and its answer."""
        first = self.route(stub, prompt_tokens=640, request_id="first")
        self.assertAlmostEqual(first.prefill_ms, 640, delta=1)
        load = self.route(stub, prompt_tokens=3640, request_id="load")
        self.assertEqual(load.shard, first.shard)  # 3000 tokens cold: the cache is worth it
        return first.shard, self.route(stub, prompt_tokens=640, objective="interactive",
                                       request_id="asked")

    def test_placed_to_meet_its_slo(self):
        for meet, flags, moved in (("off", ("--admit-pressure", "0"), False),
                                   ("pressed", (), False),
                                   ("pressed", ("--admit-pressure", "0"), True),
                                   ("always", (), True)):
            with self.subTest(meet=meet, flags=flags):
                home, a = self.cached_then_loaded(self.with_meet(meet, *flags))
                self.assertEqual(a.door, "")  # routed
                if not moved:
                    self.assertEqual(a.shard, home)
                    self.assertGreater(a.queue_wait_ms + a.prefill_ms, 3000)  # misses 2 s
                    continue
                self.assertEqual(a.shard, 1 - home)
                self.assertEqual(a.cached_tokens, 0)
                self.assertLess(a.queue_wait_ms + a.prefill_ms, 2000)


if __name__ == "__main__":
    h.main()
