"""The endpoint picker (--epp-listen) against the real sidecar, driven by
an Envoy-like ext_proc client (tests/epp/envoy_client.py, a test double for
Envoy) that forwards each request to small fake OpenAI engines
(tests/epp/fake_http.py, a test double for the GPU engines):

- the full-duplex sequence, every echoed byte checked, request and response,
  in uneven chunks (one over 62,000 bytes); the destination is the best
  endpoint and two fallbacks, the same value in dynamic metadata; one
  conversation stays on one endpoint;
- the gateway's subset hint; 400, 413, 429 and 503 answers with the
  x-cacheroute-error header;
- every way a stream ends (completed, abandoned mid-body, reset after its
  route, half-closed after it, a protocol error, an immediate answer) leaves
  no stream open and no route outstanding (cacheroute_epp_streams_open,
  cacheroute_route_outstanding);
- 1,000 concurrent streams; BUFFERED mode (flag and announced); request
  trailers; a path routed at its headers; --epp-tokens engine;
- the response phase closes the loop (outcomes, served tokens per shard,
  the served endpoint after a fallback); a 5xx marks the endpoint down;
  EPP routes leave receipts; health on the EPP port."""
import asyncio
import concurrent.futures
import json
import os
import re
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "epp"))

import grpc  # noqa: E402

import envoy_client as ec  # noqa: E402
import fake_http  # noqa: E402
import harness as h  # noqa: E402
from harness import P  # noqa: E402

MAX_BODY = 1 << 20  # --epp-max-body-bytes of the shared sidecars
CHUNKS = (4093, 17, 65536, 1000, 333)  # request body pieces, cycled: one over 62,000
EPP = None  # envoy_client.Protos, loaded in main


def chat(text, model="m", stream=True, user=None, turns=1):
    msgs = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs.append({"role": "user", "content": "%s (turn %d)" % (text, i)})
        msgs.append({"role": "assistant", "content": "noted %d" % i})
    body = {"model": model, "messages": msgs[:-1], "stream": stream, "max_tokens": 8}
    if user:
        body["user"] = user
    return json.dumps(body).encode()


def big_chat(n_bytes, seed="x"):
    """A chat body of about n_bytes (the prompt's text repeated)."""
    unit = ("%s lorem ipsum dolor sit amet " % seed) * 8
    return chat(unit * (n_bytes // len(unit) + 1))


# ---------------------------------------------------------------- metrics

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$')


def scrape(port):
    """{(name, frozenset(labels)): value} of one /metrics page."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            raise AssertionError("unparsable /metrics line: %r" % line)
        labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def metric(samples, name, **labels):
    """The sum of name's samples whose labels include labels; None when
    there is no such family at all."""
    want = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and want <= ls]
    return sum(found) if found else None


def usage_of(body):
    """usage from an SSE stream's last chunk that has one, or a JSON body."""
    if body.startswith(b"data: "):
        events = [json.loads(line[6:]) for line in body.split(b"\n")
                  if line.startswith(b"data: {")]
        return [e["usage"] for e in events if e.get("usage")][-1]
    return json.loads(body)["usage"]


def delta(m0, m1, name, **labels):
    """How much name's samples (with labels) moved from m0 to m1."""
    return (metric(m1, name, **labels) or 0) - (metric(m0, name, **labels) or 0)


# ---------------------------------------------------------------- fixture

class EppCluster:
    """n fake engines, an endpoints file naming them, and a sidecar with
    --epp-listen (and flags)."""

    def __init__(self, n=4, flags=(), env=None, with_file=True):
        self.engines = [fake_http.FakeEngine("e%d" % i) for i in range(n)]
        self.dir = tempfile.mkdtemp(prefix="cr-epp-")
        self.path = os.path.join(self.dir, "endpoints.json")
        with open(self.path, "w") as f:
            json.dump({"endpoints": [{"id": "e%d" % i, "address": e.address}
                                     for i, e in enumerate(self.engines)]}, f)
        self.epp_port = h.free_port()
        try:
            self.sc = h.Sidecar(*(("--endpoints-file", self.path) if with_file else ()),
                                "--epp-listen", "127.0.0.1:%d" % self.epp_port,
                                "--metrics-listen", "127.0.0.1:0", *flags, env=env,
                                metrics=False)
        except BaseException:
            for e in self.engines:
                e.stop()
            raise
        if "epp_port" in self.sc.config:
            self.epp_port = self.sc.config["epp_port"]
        self.epp_target = "127.0.0.1:%d" % self.epp_port
        self.client = ec.EnvoyClient(self.epp_target, EPP, timeout=h.RPC_TIMEOUT)
        self.addresses = [e.address for e in self.engines]
        self.by_address = {e.address: e for e in self.engines}
        self.shard_of = {e.address: i for i, e in enumerate(self.engines)}
        self._wait_serving()

    def _wait_serving(self):
        def up():
            try:
                return self.health("envoy.service.ext_proc.v3.ExternalProcessor") == \
                    P.health.HealthCheckResponse.SERVING
            except grpc.RpcError:
                return False
        h.poll(up, h.START_TIMEOUT, interval=0.1, what="the EPP port serving")

    def health(self, service):
        """The EPP port's health status for service."""
        ch = grpc.insecure_channel(self.epp_target)
        try:
            return P.health_grpc.HealthStub(ch).Check(
                P.health.HealthCheckRequest(service=service), timeout=h.RPC_TIMEOUT).status
        finally:
            ch.close()

    def metrics(self):
        return scrape(self.sc.config["metrics_port"])

    def stop(self):
        """Stops everything; what is wrong with the sidecar's exit, or None."""
        self.client.close()
        rc = self.sc.stop()
        for e in self.engines:
            e.stop()
        return self.sc.exit_problems(rc)


class EppTestCase(h.SidecarTestCase):
    SHARED = False
    FLAGS = ("--epp-max-body-bytes", str(MAX_BODY))
    N = 4
    WITH_FILE = True

    @classmethod
    def setUpClass(cls):
        cls.sidecar = None
        cls.cl = EppCluster(cls.N, cls.FLAGS, with_file=cls.WITH_FILE)

    @classmethod
    def tearDownClass(cls):
        problem = cls.cl.stop()
        if problem:
            raise AssertionError("sidecar %s: %s" % (cls.FLAGS, problem))

    def assertImmediate(self, res, status, reason=None):
        self.assertIsNotNone(res.immediate, "want an immediate %d, got destination %r" % (
            status, res.destination))
        self.assertEqual(res.immediate["status"], status, res.immediate)
        self.assertIn(ec.ERROR_HEADER, res.immediate["headers"], res.immediate)
        if reason is not None:  # docs/operating.md: details names the reason
            self.assertEqual(res.immediate["details"], "cacheroute_epp_" + reason)
        self.assertEqual(res.grpc_code, grpc.StatusCode.OK)
        return res.immediate

    def assertRouted(self, res, body, n_dest=3):
        """The destination is n_dest distinct addresses of the set, the same
        value in dynamic metadata, clear_route_cache, every echoed byte."""
        self.assertIsNone(res.immediate, res.immediate)
        dest = res.destinations()
        self.assertEqual(len(dest), n_dest, res.destination)
        self.assertEqual(len(set(dest)), n_dest, res.destination)
        self.assertTrue(set(dest) <= set(self.cl.addresses), res.destination)
        self.assertTrue(res.clear_route_cache)
        self.assertEqual(res.dynamic_metadata,
                         {"envoy.lb": {ec.DEST_HEADER: res.destination}})
        self.assertEqual(len(res.request_echo), len(body))
        self.assertTrue(res.request_echo == body, "the echoed request body differs")
        self.assertEqual(res.grpc_code, grpc.StatusCode.OK)

    def settled(self, what="no stream open and no outstanding route"):
        """Waits until the EPP has no stream open and the core no route
        outstanding; returns the metrics then."""
        def quiet():
            m = self.cl.metrics()
            return m if (metric(m, "cacheroute_epp_streams_open") == 0 and
                         metric(m, "cacheroute_route_outstanding") == 0) else None
        return h.poll(quiet, 10, interval=0.05, what=what)


# ---------------------------------------------------------------- full duplex

class FullDuplexTest(EppTestCase):

    def test_full_duplex_every_byte(self):
        body = big_chat(150000)
        self.cl.engines[0].pad_bytes = self.cl.engines[1].pad_bytes = 70000
        self.cl.engines[2].pad_bytes = self.cl.engines[3].pad_bytes = 70000
        try:
            res = self.cl.client.exchange(body, chunks=CHUNKS, trailers=True)
        finally:
            for e in self.cl.engines:
                e.pad_bytes = 0
        self.assertRouted(res, body)
        self.assertTrue(any(len(c) == ec.MAX_ECHO_CHUNK for c in res.request_echo_chunks),
                        [len(c) for c in res.request_echo_chunks])
        # the engine got the echoed body and the destination header
        engine = self.cl.by_address[res.served]
        self.assertEqual(res.served, res.destinations()[0])
        path, headers, got = engine.requests[-1]
        self.assertEqual(path, "/v1/chat/completions")
        self.assertEqual(headers[ec.DEST_HEADER], res.destination)
        self.assertTrue(got == body)
        # the response: headers answered, every byte echoed, trailers answered
        self.assertEqual(res.upstream_status, 200)
        self.assertTrue(res.response_headers_answered)
        self.assertGreater(len(res.upstream_body), 70000)
        self.assertTrue(res.response_echo == res.upstream_body, "the echoed response differs")
        self.assertTrue(all(len(c) <= ec.MAX_ECHO_CHUNK for c in res.response_echo_chunks))
        self.assertTrue(res.trailers_answered)
        self.assertIn(b'"usage"', res.upstream_body)

    def test_small_and_empty_bodies(self):
        for body in (chat("hi", stream=False), b'{"model":"m","prompt":"x"}'):
            res = self.cl.client.exchange(body, chunks=(1, 2, 3),
                                          path="/v1/completions" if b"prompt" in body
                                          else "/v1/chat/completions")
            self.assertRouted(res, body)
            self.assertTrue(res.response_echo == res.upstream_body)
        # a GET has no body: routed at its headers by load alone
        res = self.cl.client.exchange(b"", method="GET", path="/v1/models",
                                      response=(200, [("content-type", "application/json")],
                                                [b'{"data":[]}']), upstream=False)
        self.assertRouted(res, b"")
        self.assertEqual(res.response_echo, b'{"data":[]}')

    def test_request_trailers_end_the_body(self):
        """An HTTP/2 request with trailers: the body's end is the trailers."""
        body = big_chat(70000)
        res = self.cl.client.exchange(body, chunks=CHUNKS, request_trailers=True, trailers=True)
        self.assertRouted(res, body)
        self.assertTrue(res.response_echo == res.upstream_body)
        self.assertTrue(res.trailers_answered)
        self.settled()

    def test_other_path_routed_at_headers(self):
        """A path that is no completion is routed by load at its headers;
        its body then passes through, echoed as it comes."""
        body = b'{"input": "' + b"e" * 90000 + b'"}'
        res = self.cl.client.exchange(body, path="/v1/embeddings", chunks=CHUNKS)
        self.assertRouted(res, body)
        self.assertTrue(res.response_echo == res.upstream_body)
        self.settled()

    def test_protocol_errors(self):
        """Garbage or out-of-order messages end the stream INVALID_ARGUMENT;
        one after the route releases its work."""
        c = self.cl.client
        m0 = self.settled()
        body = chat("protocol")
        cases = [
            [Raw(b"\xff\xff\xff\xff")],
            [c.body_msg(body, True)],
            [c.request_headers("POST", "/v1/chat/completions", body), c.body_msg(body, True),
             c.request_headers("POST", "/v1/chat/completions", body)],
            [c.request_headers("POST", "/v1/chat/completions", body), c.body_msg(body, True),
             c.body_msg(b"more", True)],
        ]
        for msgs in cases:
            s = c.open()
            for m in msgs:
                s.send(m)
            with self.assertRaises(grpc.RpcError) as cm:
                while s.recv() is not None:
                    pass
            self.assertEqual(cm.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
            s.cancel()
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_epp_errors_total", reason="protocol"),
                         len(cases))
        self.assertEqual(delta(m0, m1, "cacheroute_epp_routed_total"), 2)
        self.assertEqual(delta(m0, m1, "cacheroute_epp_outcomes_total"), 2)

    def test_half_close_after_route(self):
        """The data plane closes the stream after the request phase (no
        response through the processor): the route's work is released."""
        c = self.cl.client
        m0 = self.settled()
        body = chat("half close")
        s = c.open()
        s.send(c.request_headers("POST", "/v1/chat/completions", body))
        s.send(c.body_msg(body, True))
        res = ec.Result()
        self.assertIsNotNone(c._expect(s, ("request_headers",), res, "the headers"))
        self.assertTrue(c._collect_echo(s, "request_body", res, res.request_echo_chunks))
        s.close()
        self.assertIsNone(s.recv())
        self.assertEqual(s.call.code(), grpc.StatusCode.OK)
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_epp_outcomes_total"), 1)

    def test_same_conversation_same_endpoint(self):
        for owner in (None, "conv-7"):
            headers = [("x-session-id", owner)] if owner else []
            first = None
            for turns in (1, 2, 3):
                body = chat("the same conversation %s " % owner * 40, turns=turns)
                res = self.cl.client.exchange(body, headers=headers)
                self.assertRouted(res, body)
                if first is None:
                    first = res.destinations()[0]
                self.assertEqual(res.destinations()[0], first, "turn %d moved" % turns)
        self.settled()

    def test_subset_hint(self):
        subset = self.cl.addresses[1:3]
        for i in range(6):
            body = chat("subset %d" % i)
            res = self.cl.client.exchange(body, subset=subset)
            self.assertRouted(res, body, n_dest=2)  # only the two named: best, one fallback
            self.assertEqual(set(res.destinations()), set(subset))
            self.assertIn(res.served, subset)
        # an address outside the set is never picked; only such -> 503
        res = self.cl.client.exchange(chat("subset out"), subset=["127.0.0.1:1", "10.9.9.9:80"])
        self.assertImmediate(res, 503, "no_endpoint")
        res = self.cl.client.exchange(chat("subset mixed"),
                                      subset=["10.9.9.9:80", self.cl.addresses[3]])
        self.assertRouted(res, chat("subset mixed"), n_dest=1)
        self.assertEqual(res.destinations(), [self.cl.addresses[3]])
        self.settled()

    def test_bad_body_400(self):
        cases = [(b'{"model": "m", "messages": ', None),
                 (b'{"model": "m", "messages": 5}', "messages"),
                 (b'{"model": 7, "messages": []}', "model"),
                 (b'{"model": "m", "prompt": {"a": 1}}', "prompt"),
                 (b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe"}]}', None),
                 (b'{"model": "m", "messages": [' + b"[" * 5000 + b"]" * 5000 + b"]}", None)]
        m0 = self.cl.metrics()
        for body, field in cases:
            path = "/v1/completions" if b"prompt" in body else "/v1/chat/completions"
            res = self.cl.client.exchange(body, path=path, chunks=(5, 7))
            ir = self.assertImmediate(res, 400, "bad_body")
            if field:
                self.assertIn(field, ir["body"] + ir["headers"][ec.ERROR_HEADER], ir)
        m1 = self.settled()
        self.assertEqual(metric(m1, "cacheroute_epp_errors_total", reason="bad_body") -
                         metric(m0, "cacheroute_epp_errors_total", reason="bad_body"),
                         len(cases))

    def test_too_large_413(self):
        body = b'{"model":"m","prompt":"' + b"a" * (MAX_BODY - 24) + b'"}'
        self.assertEqual(len(body), MAX_BODY + 1)
        res = self.cl.client.exchange(body, path="/v1/completions", chunks=(300000, 7))
        self.assertImmediate(res, 413, "too_large")
        res = self.cl.client.exchange(body * 10, path="/v1/completions", chunks=(1 << 20,))
        self.assertImmediate(res, 413, "too_large")  # 10 MB
        body = body[:MAX_BODY - 2] + b'"}'  # exactly the limit: routed
        res = self.cl.client.exchange(body, path="/v1/completions", chunks=(300000, 7),
                                      upstream=False)
        self.assertRouted(res, body)
        self.settled()

    def test_abandoned_mid_body(self):
        m0 = self.settled()
        body = big_chat(200000)
        pieces = ec.split_uneven(body, [70000])
        for n_sent in (0, 1, 2):  # headers only; one chunk; two chunks
            before = self.cl.metrics()
            s = self.cl.client.open()
            s.send(self.cl.client.request_headers("POST", "/v1/chat/completions", body))
            for p in pieces[:n_sent]:
                s.send(self.cl.client.body_msg(p, False))
            # the chunks read (bytes in), or for headers only the stream open:
            # whether its headers were read before the cancel is a race
            want = sum(len(p) for p in pieces[:n_sent])
            h.poll(lambda: (metric(self.cl.metrics(), "cacheroute_epp_streams_open") >= 1 and
                            delta(before, self.cl.metrics(), "cacheroute_epp_body_bytes_total",
                                  direction="in") >= want), 5, what="the chunks read")
            s.cancel()
        m1 = self.settled("the abandoned streams closed")
        self.assertIn(delta(m0, m1, "cacheroute_epp_errors_total", reason="abandoned"), (2, 3))
        self.assertEqual(metric(m1, "cacheroute_epp_routed_total"),
                         metric(m0, "cacheroute_epp_routed_total"))
        # the sidecar is still healthy and serves
        self.assertEqual(self.cl.health("readiness"), P.health.HealthCheckResponse.SERVING)
        res = self.cl.client.exchange(chat("after abandon"))
        self.assertRouted(res, chat("after abandon"))

    def test_abandoned_after_route(self):
        """Routed, then the data plane leaves mid response: the route's
        work is released (and the reset counted)."""
        m0 = self.settled()
        body = chat("leaves mid response")
        c = self.cl.client
        s = c.open()
        s.send(c.request_headers("POST", "/v1/chat/completions", body))
        s.send(c.body_msg(body, True))
        r = s.recv()
        self.assertEqual(r.WhichOneof("response"), "request_headers")
        h.poll(lambda: metric(self.cl.metrics(), "cacheroute_route_outstanding") >= 1, 5,
               what="the route outstanding")
        m = c.header_map([(":status", "200")])
        msg = EPP.pb.ProcessingRequest()
        msg.response_headers.headers.CopyFrom(m)
        s.send(msg)
        s.send(c.body_msg(b"data: {\"choices\":[]}\n\n", False, response=True))
        s.cancel()
        m1 = self.settled("the route released")
        self.assertEqual(metric(m1, "cacheroute_epp_errors_total", reason="reset") -
                         metric(m0, "cacheroute_epp_errors_total", reason="reset"), 1)

    def test_response_loop_outcomes(self):
        """Each response's usage (the final SSE chunk, or the JSON body)
        becomes an outcome booked on the shard that served it: per shard,
        the served tokens move by exactly what the engines reported."""
        m0 = self.settled()
        want = {}  # shard -> [prompt tokens, cached tokens]
        for i in range(8):
            body = chat("loop %d" % (i % 2), turns=1 + i // 2, stream=i % 3 != 2)
            res = self.cl.client.exchange(body, report_served=True)
            self.assertRouted(res, body)
            usage = usage_of(res.upstream_body)
            w = want.setdefault(str(self.cl.shard_of[res.served]), [0, 0])
            w[0] += usage["prompt_tokens"]
            w[1] += usage["prompt_tokens_details"]["cached_tokens"]
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_epp_outcomes_total"), 8)
        self.assertEqual(delta(m0, m1, "cacheroute_outcomes_total"), 8)
        self.assertEqual(delta(m0, m1, "cacheroute_route_hit_predictions_checked_total"), 8)
        got = {shard: [delta(m0, m1, "cacheroute_shard_served_prompt_tokens_total",
                             shard=shard),
                       delta(m0, m1, "cacheroute_shard_served_prompt_tokens_total",
                             shard=shard, cache="hit")] for shard in want}
        self.assertEqual(got, want)
        self.assertGreater(sum(w[1] for w in want.values()), 0)  # later turns hit
        self.assertIsNotNone(metric(m1, "cacheroute_served_hit_ratio"))
        self.assertEqual(delta(m0, m1, "cacheroute_epp_decision_seconds_count"), 8)

    def test_routes_leave_receipts(self):
        """Issue 31: receipts and WatchDecisions show EPP routes like any
        other, and the response phase's outcomes match them."""
        stub = self.cl.sc.stub()
        watch = stub.WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=h.RPC_TIMEOUT)
        watch.initial_metadata()  # the watch is in place
        m0 = self.settled()
        try:
            for i in range(4):
                body = chat("receipt %d" % i)
                self.assertRouted(self.cl.client.exchange(body), body)
            seen = [next(watch) for _ in range(8)]  # each made, then matched
        finally:
            watch.cancel()
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_decision_receipts_made_total"), 4)
        self.assertEqual(delta(m0, m1, "cacheroute_outcomes_total", result="matched"), 4)
        ids = {r.request_id for r in seen}
        self.assertEqual(len(ids), 4, [r.request_id for r in seen])
        for rid in ids:
            self.assertTrue(rid.startswith("epp-"), rid)
            self.assertEqual(sorted(r.outcomes for r in seen if r.request_id == rid), [0, 1])
            got = stub.GetDecision(P.cr.GetDecisionRequest(request_id=rid),
                                   timeout=h.RPC_TIMEOUT)
            self.assertEqual(got.outcomes, 1)
            self.assertGreater(got.request.prompt_tokens, 0)

    def test_buffered_announced(self):
        """protocol_config announcing BUFFERED wins over the flag."""
        for body in (big_chat(100000), chat("buffered small")):
            res = self.cl.client.exchange(body, mode=ec.BUFFERED, announce=ec.BUFFERED)
            self.assertRouted(res, body)
            self.assertTrue(res.response_headers_answered)
            self.assertEqual(res.response_echo, res.upstream_body)
        self.settled()

    def test_health(self):
        for svc in ("envoy.service.ext_proc.v3.ExternalProcessor", "liveness", "readiness"):
            self.assertEqual(self.cl.health(svc), P.health.HealthCheckResponse.SERVING, svc)

    def test_concurrent_full_exchanges(self):
        """64 whole exchanges (through the engines, SSE echoed) from 32
        threads at once: every byte echoed, every outcome booked."""
        m0 = self.settled()

        def one(i):
            body = big_chat(3000 + 997 * i, seed="t%d" % i)
            res = self.cl.client.exchange(body, chunks=(1000 + i, 77))
            ok = (res.request_echo == body and res.upstream_status == 200 and
                  res.response_echo == res.upstream_body and len(res.destinations()) == 3)
            return None if ok else (i, res.destination, res.immediate, res.upstream_status)

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            bad = [r for r in pool.map(one, range(64)) if r]
        self.assertEqual(bad, [])
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_epp_outcomes_total"), 64)

    def test_concurrent_1000(self):
        """1,000 streams open at once over 4 connections (asyncio gRPC), each
        routed, its body and a synthetic response echoed byte for byte."""
        n, conns = 1000, 4
        errors = []

        async def one(ch, i, barrier):
            body = chat("concurrent %d" % i, stream=False)
            c = self.cl.client
            call = ch.stream_stream(ec.METHOD,
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=EPP.pb.ProcessingResponse.FromString)()
            await call.write(c.request_headers("POST", "/v1/chat/completions", body))
            await barrier.wait()  # every stream open before any body
            half = len(body) // 3
            await call.write(c.body_msg(body[:half], False))
            await call.write(c.body_msg(body[half:], True))
            r = await call.read()
            if r.WhichOneof("response") != "request_headers":
                errors.append((i, "first answer %s" % r.WhichOneof("response")))
                call.cancel()
                return
            dest = [x.header.raw_value.decode() or x.header.value
                    for x in r.request_headers.response.header_mutation.set_headers
                    if x.header.key == ec.DEST_HEADER]
            echo = b""
            while True:
                r = await call.read()
                sr = r.request_body.response.body_mutation.streamed_response
                echo += sr.body
                if sr.end_of_stream:
                    break
            resp = b'{"usage":{"prompt_tokens":%d}}' % i
            m = EPP.pb.ProcessingRequest()
            m.response_headers.headers.CopyFrom(c.header_map([(":status", "200")]))
            await call.write(m)
            await call.write(c.body_msg(resp, True, response=True))
            r = await call.read()
            ok_h = r.WhichOneof("response") == "response_headers"
            r = await call.read()
            sr = r.response_body.response.body_mutation.streamed_response
            await call.done_writing()
            tail = await call.read()
            code = await call.code()
            if not (len(dest) == 1 and len(dest[0].split(",")) == 3 and echo == body and ok_h
                    and sr.body == resp and sr.end_of_stream and
                    tail is grpc.aio.EOF and code == grpc.StatusCode.OK):
                errors.append((i, dest, echo == body, ok_h, sr.body == resp, code))

        async def run():
            chans = [grpc.aio.insecure_channel(self.cl.epp_target) for _ in range(conns)]
            barrier = Barrier(n)
            try:
                await asyncio.wait_for(asyncio.gather(
                    *(one(chans[i % conns], i, barrier) for i in range(n))), 120)
            finally:
                for ch in chans:
                    await ch.close()

        t0 = time.monotonic()
        aio_run(run())
        self.assertEqual(errors[:5], [])
        self.assertLess(time.monotonic() - t0, 120)
        m = self.settled()
        self.assertGreaterEqual(metric(m, "cacheroute_epp_streams_total"), n)


class Raw(bytes):
    """Bytes sent as they are where a message goes."""

    def SerializeToString(self):
        return bytes(self)


_AIO_LOOP = None


def aio_run(coro):
    """Runs coro on one event loop kept for the whole suite, on which
    grpc.aio's runtime is held open from the first call.

    Debian 12's grpcio (1.51) can hang the process when its aio runtime
    shuts down, which it does as the last aio channel is freed: its poller
    thread writes a byte to a socketpair per completion while the loop reads
    one per wake-up, so after a burst (1,000 streams) the pair is full; the
    shutdown stops reading and then joins the poller, which is blocked on
    that write for good (grpc/grpc#40989, fixed upstream in 2025). CI hung
    here once for 280 s. Holding one reference (init_grpc_aio) means the
    shutdown never runs while the suite does; the runtime's queue is tied
    to the loop it was made on, hence the one loop."""
    global _AIO_LOOP
    if _AIO_LOOP is None:
        _AIO_LOOP = asyncio.new_event_loop()

        async def hold():
            grpc.aio.init_grpc_aio()
        _AIO_LOOP.run_until_complete(hold())
    return _AIO_LOOP.run_until_complete(coro)


class Barrier:
    """asyncio.Barrier for Python < 3.11."""

    def __init__(self, n):
        self.n, self.count, self.ev = n, 0, asyncio.Event()

    async def wait(self):
        self.count += 1
        if self.count >= self.n:
            self.ev.set()
        await self.ev.wait()


# ---------------------------------------------------------------- other flags

class EngineTokensTest(EppTestCase):
    FLAGS = ("--epp-tokens", "engine", "--epp-tokenize-timeout", "2")

    def test_engine_tokens(self):
        """Keys from the engines' /tokenize; a failing /tokenize falls back
        to the estimate for that request (counted), still routed."""
        m0 = self.settled()
        first = None
        for turns in (1, 2, 3):
            body = chat("engine tokens " * 40, turns=turns)
            res = self.cl.client.exchange(body)
            self.assertRouted(res, body)
            first = first or res.destinations()[0]
            self.assertEqual(res.destinations()[0], first, "turn %d moved" % turns)
        self.assertGreater(sum(e.tokenized for e in self.cl.engines), 0)
        m1 = self.settled()
        self.assertEqual(delta(m0, m1, "cacheroute_epp_tokenize_fallbacks_total"), 0)
        for e in self.cl.engines:
            e.tokenize_status = 500
        try:
            body = chat("tokenize fails")
            res = self.cl.client.exchange(body)
            self.assertRouted(res, body)
        finally:
            for e in self.cl.engines:
                e.tokenize_status = None
        m2 = self.settled()
        self.assertEqual(delta(m1, m2, "cacheroute_epp_tokenize_fallbacks_total"), 1)


class BufferedModeTest(EppTestCase):
    FLAGS = ("--epp-body-mode", "buffered", "--epp-fallbacks", "1")

    def test_buffered(self):
        for body in (big_chat(120000), chat("buffered flag")):
            res = self.cl.client.exchange(body, mode=ec.BUFFERED)
            self.assertRouted(res, body, n_dest=2)
            self.assertTrue(res.response_headers_answered)
            self.assertTrue(res.response_echo == res.upstream_body)
            self.assertEqual(res.served, res.destinations()[0])
        res = self.cl.client.exchange(b'{"model": "m", "messages": 5}', mode=ec.BUFFERED)
        self.assertImmediate(res, 400, "bad_body")
        self.settled()
        # announced full duplex wins over the flag
        body = chat("announced full duplex")
        res = self.cl.client.exchange(body, announce=ec.FULL_DUPLEX)
        self.assertRouted(res, body, n_dest=2)
        self.assertTrue(res.response_echo == res.upstream_body)
        self.settled()


class ShedTest(EppTestCase):
    FLAGS = ("--epp-max-requests", "2")

    def test_shed_429(self):
        c = self.cl.client
        held = []
        for i in range(2):
            s = c.open()
            s.send(c.request_headers("POST", "/v1/chat/completions", chat("held %d" % i)))
            held.append(s)
        h.poll(lambda: metric(self.cl.metrics(), "cacheroute_epp_streams_open") >= 2, 5,
               what="two streams held")
        res = c.exchange(chat("third"))
        self.assertImmediate(res, 429, "shed")
        for s in held:
            s.cancel()
        self.settled()
        body = chat("after the held ones")
        res = c.exchange(body)
        self.assertRouted(res, body)
        m = self.cl.metrics()
        self.assertGreaterEqual(metric(m, "cacheroute_epp_errors_total", reason="shed"), 1)


class DoorCase(EppTestCase):
    """A picker with --objectives: requests by objective, the door's counts."""

    def send(self, objective, text):
        headers = [("x-gateway-inference-objective", objective),
                   ("x-gateway-inference-fairness-id", "tenant-" + objective)]
        return self.cl.client.exchange(chat(text), headers=headers)

    def assertCounts(self, m, objective, **want):
        """cacheroute_door_requests_total{objective} by verdict, as want says."""
        for verdict, n in want.items():
            self.assertEqual(metric(m, "cacheroute_door_requests_total", objective=objective,
                                    verdict=verdict), n, (objective, verdict))


class DoorTest(DoorCase):
    """--objectives through the picker, the door at its defaults: overload
    is many outstanding routes (Route calls with request ids, never
    reported) on two endpoints, so every prediction passes the interactive
    objective's 2 s SLO. Before it, batch is routed; under it, interactive
    requests (critical: routed) are predicted to miss for the queues. The
    first sample of a fresh door weighs nothing (one miss at a start must
    not press it); the next, 50 ms later with a 10 ms time constant,
    presses the door (cacheroute_door_pressed 1), and from then on batch
    gets 429 with x-cacheroute-shed: slo while interactive is still
    routed; no 429 for anything but the sheddable objective."""
    FLAGS = ("--objectives", "interactive:0:2000,batch:-1:1000",
             "--admit-pressure-tau-s", "0.01")
    N = 2

    def test_429_only_for_the_sheddable_objective_under_overload(self):
        body = chat("calm batch")
        res = self.send("batch", "calm batch")
        self.assertRouted(res, body, n_dest=2)
        stub = self.cl.sc.stub()
        items = [P.cr.RouteItem(prompt_tokens=200000, request_id="load-%d" % i)
                 for i in range(32)]
        stub.Route(P.cr.RouteRequest(requests=items), timeout=h.RPC_TIMEOUT)
        self.assertEqual(metric(self.cl.metrics(), "cacheroute_door_pressed"), 0)
        res = self.send("interactive", "first interactive")
        self.assertRouted(res, chat("first interactive"), n_dest=2)
        m = self.cl.metrics()
        self.assertEqual(metric(m, "cacheroute_door_pressed"), 0)
        self.assertEqual(metric(m, "cacheroute_door_pressure"), 0)
        time.sleep(0.05)
        for i in range(5):
            res = self.send("interactive", "overload interactive %d" % i)
            self.assertRouted(res, chat("overload interactive %d" % i), n_dest=2)
            res = self.send("batch", "overload batch %d" % i)
            im = self.assertImmediate(res, 429, "shed")
            self.assertEqual(im["headers"].get("x-cacheroute-shed"), "slo", im)
        m = self.cl.metrics()
        self.assertEqual(metric(m, "cacheroute_door_pressed"), 1)
        self.assertGreater(metric(m, "cacheroute_door_pressure"), 0.15)
        self.assertCounts(m, "batch", shed=5, admitted=1)
        self.assertCounts(m, "interactive", shed=0)
        self.assertEqual(metric(m, "cacheroute_door_fairness_requests_total",
                                fairness_id="tenant-batch", verdict="shed"), 5)
        self.assertEqual(metric(m, "cacheroute_epp_errors_total", reason="shed"), 5)


class HoldTest(DoorCase):
    """--admit-max-queued: the picker holds what the door queues. The door
    acts by its budget alone (--admit-pressure 0; the budget is half the
    interactive 2 s SLO); overload is many outstanding routes (Route calls
    with request ids) on two endpoints. A batch request is then held on its
    stream, answered only with override_message_timeout, and routed once
    those routes' outcomes come (the work falls); one held past
    --admit-max-wait-ms is answered 429 slo; one whose stream is reset is
    taken out of the door; an interactive request is never held."""
    FLAGS = ("--objectives", "interactive:0:2000,batch:-1", "--admit-pressure", "0",
             "--admit-max-queued", "8", "--admit-max-wait-ms", "1500")
    N = 2

    def load(self, tag):
        items = [P.cr.RouteItem(prompt_tokens=200000, request_id="%s-%d" % (tag, i))
                 for i in range(32)]
        self.cl.sc.stub().Route(P.cr.RouteRequest(requests=items), timeout=h.RPC_TIMEOUT)

    def unload(self, tag):
        self.cl.sc.stub().ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(request_id="%s-%d" % (tag, i)) for i in range(32)]),
            timeout=h.RPC_TIMEOUT)

    def held(self, want):
        deadline = time.monotonic() + 10
        while metric(self.cl.metrics(), "cacheroute_door_held") != want:
            self.assertLess(time.monotonic(), deadline, "cacheroute_door_held never %d" % want)
            time.sleep(0.02)

    def in_thread(self, fn):
        out = {}

        def run():
            try:
                out["res"] = fn()
            except BaseException as e:  # re-raised on the test's thread
                out["error"] = e
        t = threading.Thread(target=run)
        t.start()
        return t, out

    def test_held_then_routed_dropped_or_cancelled(self):
        self.load("a")
        res = self.send("interactive", "interactive under load")
        self.assertRouted(res, chat("interactive under load"), n_dest=2)
        t, out = self.in_thread(lambda: self.send("batch", "held batch"))
        self.held(1)
        time.sleep(0.2)
        self.assertTrue(t.is_alive(), "the held request was answered under load")
        self.unload("a")
        t.join(h.RPC_TIMEOUT)
        self.assertNotIn("error", out)
        res = out["res"]
        self.assertRouted(res, chat("held batch"), n_dest=2)
        self.assertEqual(len(res.timeout_overrides), 1)
        self.assertAlmostEqual(res.timeout_overrides[0], 1.5 + 0.02 + 1, places=3)
        self.held(0)
        # past its deadline: 429 slo, after the wait
        self.load("b")
        start = time.monotonic()
        res = self.send("batch", "dropped batch")
        self.assertGreaterEqual(time.monotonic() - start, 1.4)
        im = self.assertImmediate(res, 429, "shed")
        self.assertEqual(im["headers"].get("x-cacheroute-shed"), "slo", im)
        self.assertIn("at the door", im["headers"].get(ec.ERROR_HEADER), im)
        # reset while held: out of the door
        s = self.cl.client.open()
        body = chat("cancelled batch")
        s.send(self.cl.client.request_headers(
            "POST", "/v1/chat/completions", body,
            [("x-gateway-inference-objective", "batch")]))
        s.send(self.cl.client.body_msg(body, True))
        r = s.recv()
        self.assertIsNone(r.WhichOneof("response"))
        self.assertTrue(r.HasField("override_message_timeout"))
        self.held(1)
        s.cancel()
        self.held(0)
        self.unload("b")
        m = self.cl.metrics()
        self.assertCounts(m, "batch", queued=3, dropped=2, admitted=1)
        self.assertCounts(m, "interactive", queued=0, shed=0)
        self.settled()


class ShutdownTest(h.SidecarTestCase):
    SHARED = False

    def test_sigterm_with_streams_open(self):
        """SIGTERM while one stream is mid-body and one mid-response: the
        streams end within --shutdown-grace and the sidecar exits 0, clean."""
        cl = EppCluster(2, ("--shutdown-grace", "2"))
        try:
            c = cl.client
            body = chat("shutdown")
            mid_body = c.open()
            mid_body.send(c.request_headers("POST", "/v1/chat/completions", body))
            mid_body.send(c.body_msg(body[:10], False))
            routed = c.open()
            routed.send(c.request_headers("POST", "/v1/chat/completions", body))
            routed.send(c.body_msg(body, True))
            self.assertEqual(routed.recv().WhichOneof("response"), "request_headers")
            h.poll(lambda: metric(cl.metrics(), "cacheroute_epp_streams_open") == 2, 5,
                   what="two streams open")
            t0 = time.monotonic()
            cl.sc.send(signal.SIGTERM)
            for s in (mid_body, routed):
                try:
                    while s.recv() is not None:
                        pass
                except grpc.RpcError:
                    pass
                s.cancel()
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            problem = cl.stop()
        self.assertIsNone(problem)

    def test_sigterm_with_a_request_held(self):
        """SIGTERM while the door holds a request on its stream: the stream
        ends (UNAVAILABLE) within --shutdown-grace, the held request is
        taken out of the door, and the sidecar exits 0, clean."""
        cl = EppCluster(2, ("--shutdown-grace", "2", "--objectives", "interactive:0:2000,batch:-1",
                            "--admit-pressure", "0", "--admit-max-queued", "4"))
        try:
            cl.sc.stub().Route(P.cr.RouteRequest(requests=[
                P.cr.RouteItem(prompt_tokens=200000, request_id="load-%d" % i)
                for i in range(32)]), timeout=h.RPC_TIMEOUT)
            c = cl.client
            body = chat("held at shutdown")
            s = c.open()
            s.send(c.request_headers("POST", "/v1/chat/completions", body,
                                     [("x-gateway-inference-objective", "batch")]))
            s.send(c.body_msg(body, True))
            self.assertTrue(s.recv().HasField("override_message_timeout"))
            h.poll(lambda: metric(cl.metrics(), "cacheroute_door_held") == 1, 5,
                   what="one request held")
            t0 = time.monotonic()
            cl.sc.send(signal.SIGTERM)
            with self.assertRaises(grpc.RpcError) as e:
                while s.recv() is not None:
                    pass
            self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
            s.cancel()
            self.assertLess(time.monotonic() - t0, 10)
        finally:
            problem = cl.stop()
        self.assertIsNone(problem)


class NoEndpointTest(EppTestCase):
    """No endpoint set at all (no --endpoints-file): 503 for every request."""
    WITH_FILE = False

    def test_no_endpoint_503(self):
        for body in (chat("nobody home"), b""):
            res = self.cl.client.exchange(body, method="POST" if body else "GET")
            self.assertImmediate(res, 503, "no_endpoint")
            self.assertIsNone(res.destination)
        m = self.settled()
        self.assertEqual(metric(m, "cacheroute_epp_errors_total", reason="no_endpoint"), 2)


class DrainedTest(EppTestCase):
    N = 2

    def test_all_drained_still_routed(self):
        """docs/decisions.md: with no active endpoint, new requests go to
        draining ones (no 503)."""
        stub = self.cl.sc.stub()
        for i in range(self.N):
            stub.DrainEndpoint(P.cr.DrainEndpointRequest(id="e%d" % i), timeout=h.RPC_TIMEOUT)
        body = chat("nobody active")
        res = self.cl.client.exchange(body)
        self.assertRouted(res, body, n_dest=2)
        self.settled()


class EndpointErrorTest(EppTestCase):
    FLAGS = ("--endpoint-fail-errors", "1", "--endpoint-fail-window", "60",
             "--endpoint-down-for", "60")
    N = 3

    def states(self):
        r = self.cl.sc.stub().ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        return {e.address: e.state for e in r.endpoints}

    def test_5xx_marks_the_endpoint_down(self):
        for e in self.cl.engines:
            e.fail_status = 503
        res = self.cl.client.exchange(chat("fails"))
        self.assertRouted(res, chat("fails"))
        self.assertEqual(res.upstream_status, 503)
        self.assertTrue(res.response_echo == res.upstream_body)
        bad = res.served
        h.poll(lambda: self.states()[bad] == "down", 5, what="%s marked down" % bad)
        m = self.settled()
        self.assertGreaterEqual(metric(m, "cacheroute_epp_errors_total", reason="upstream_5xx"),
                                1)
        for e in self.cl.engines:
            e.fail_status = None
        for i in range(4):  # a down endpoint is picked no more
            res = self.cl.client.exchange(chat("after %d" % i))
            self.assertNotIn(bad, res.destinations())
            self.assertEqual(len(res.destinations()), 2)


class ServedFallbackTest(EppTestCase):
    N = 3

    def test_served_fallback_books_the_served_endpoint(self):
        """The first destination refuses: the client falls back and reports
        the served endpoint; the outcome is booked there."""
        gone = self.cl.engines[0]
        try:
            gone.stop()
        except Exception:
            pass
        m0 = self.settled()
        fell_back = 0
        for i in range(12):
            body = chat("fallback %d" % i, user="u%d" % i)
            res = self.cl.client.exchange(body, fallback=True, report_served=True)
            self.assertRouted(res, body)
            self.assertNotEqual(res.served, gone.address)
            self.assertEqual(res.upstream_status, 200)
            fell_back += res.destinations()[0] == gone.address
        self.assertGreater(fell_back, 0, "the stopped endpoint was never first")
        m1 = self.settled()
        shard = str(self.cl.shard_of[gone.address])
        before = sum(metric(m0, "cacheroute_shard_served_prompt_tokens_total", shard=shard,
                            cache=c) or 0 for c in ("hit", "miss"))
        after = sum(metric(m1, "cacheroute_shard_served_prompt_tokens_total", shard=shard,
                           cache=c) or 0 for c in ("hit", "miss"))
        self.assertEqual(after, before, "tokens booked on the endpoint that refused")


def main():
    global EPP
    # envoy protos first: harness.main then runs the tests
    import argparse
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--proto-dir", required=True)
    a, _ = ap.parse_known_args()
    EPP = ec.load_protos(a.proto_dir)
    h.main()


if __name__ == "__main__":
    main()
