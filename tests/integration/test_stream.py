"""RecordArrivals, the streaming RecordArrival (issue 14), against the real
sidecar: the same answers as unary calls, in order; a bad message ends the
stream naming its index with the messages before it applied; and the
bounds: flow control (a client that does not read is not read from), the
per-message size limit, the per-method call cap, the idle timeout, and
shutdown ending streams UNAVAILABLE. Every stream has a deadline and every
wait is bounded."""
import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
DEADLINE = grpc.StatusCode.DEADLINE_EXCEEDED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE
CALLS = ("--estimator-clock", "calls", "--half-life", "4", "--n-shards", "6",
         "--replan-interval", "0", "--route-by", "plan")


class Stream:
    """One RecordArrivals call fed from a queue, so a test decides when each
    message goes and when each response is read."""

    def __init__(self, stub, timeout=60, **kw):
        self.q = queue.Queue()
        self.call = stub.RecordArrivals(iter(self.q.get, None), timeout=timeout, **kw)

    def send(self, owners, **kw):
        self.q.put(P.cr.RecordArrivalRequest(owners=owners, **kw))

    def close(self):
        self.q.put(None)

    def next(self):
        return next(self.call)

    def rest(self):
        """Every response left, then the status: (responses, error or None)."""
        got = []
        try:
            for r in self.call:
                got.append(r)
        except grpc.RpcError as e:
            return got, e
        return got, None


def workload(n):
    """n RecordArrivalRequests with owners repeating across and within
    messages, some with weights, some without routes."""
    reqs = []
    for i in range(n):
        owners = [(i * 7 + k * 3) % 23 - 5 for k in range(1 + i % 4)]
        kw = {}
        if i % 5 == 1:
            kw["weights"] = [1.0 + (i + k) % 3 for k in range(len(owners))]
        if i % 7 == 3:
            kw["omit_routes"] = True
        reqs.append(P.cr.RecordArrivalRequest(owners=owners, **kw))
    return reqs


def tracked(stub):
    return stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT).tracked_owners


class SameAnswersTest(h.SidecarTestCase):
    SHARED = False

    def test_stream_answers_as_unary_calls(self):
        # Two sidecars on the calls clock (rates depend only on the order
        # of arrivals) with the same table installed: N messages on one
        # stream and N unary calls must give bit-identical responses.
        plan = h.plan_request(rates=[(o, 10.0 + o) for o in range(-5, 18)],
                              config=(6, 50.0, 4), install=True)
        sides = [self.start_sidecar(*CALLS) for _ in range(2)]
        for sc in sides:
            sc.stub().Plan(plan, timeout=h.RPC_TIMEOUT)
        reqs = workload(60)
        unary = [sides[0].stub().RecordArrival(r, timeout=h.RPC_TIMEOUT) for r in reqs]
        got = list(sides[1].stub().RecordArrivals(iter(reqs), timeout=60))
        self.assertEqual(len(got), len(reqs))
        self.assertEqual(got, unary)
        self.assertTrue(any(x.admitted for r in got for x in r.routes))
        self.assertEqual([r.recorded for r in got], [len(r.owners) for r in reqs])
        self.assertEqual({r.table_generation for r in got}, {1})
        rates = [sc.stub().GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
                 for sc in sides]
        self.assertEqual(rates[0], rates[1])
        for sc in sides:
            sc.assert_clean_exit(self)


class StreamTest(h.SidecarTestCase):
    SIDECAR_FLAGS = CALLS

    def test_responses_in_order_one_at_a_time(self):
        s = Stream(self.stub)
        for i in range(20):
            s.send([1000 + i, 1000 + i])
            r = s.next()
            self.assertEqual(([x.owner for x in r.routes], r.recorded), ([1000 + i] * 2, 2))
            self.assertEqual(r.routes[1].rate, h.calls_rate_exact(2, 4.0))
        s.close()
        self.assertEqual(s.rest(), ([], None))

    def test_big_message_is_handled_on_the_pool_in_order(self):
        # A message of 1 MiB or more is handled on the pool (as a unary
        # one would be), the small ones around it inline: still in order.
        big = [2**40 + i for i in range(250000)]  # ~1.5 MB on the wire
        self.assertGreater(P.cr.RecordArrivalRequest(owners=big).ByteSize(), 1 << 20)
        reqs = [P.cr.RecordArrivalRequest(owners=[2300]),
                P.cr.RecordArrivalRequest(owners=big, omit_routes=True),
                P.cr.RecordArrivalRequest(owners=[2301]),
                P.cr.RecordArrivalRequest(owners=big[:3])]
        got = list(self.stub.RecordArrivals(iter(reqs), timeout=60))
        self.assertEqual([r.recorded for r in got], [1, 250000, 1, 3])
        self.assertEqual([r.owner for r in got[3].routes], big[:3])
        self.assertEqual(got[3].routes[0].rate, h.calls_rate_exact(2, 4.0))

    def test_empty_stream_ends_ok(self):
        self.assertEqual(list(self.stub.RecordArrivals(iter(()), timeout=h.RPC_TIMEOUT)), [])

    def test_bad_message_ends_the_stream_naming_its_index(self):
        # Messages 0-2 are applied and answered; 3 is empty; 4 is never read.
        s = Stream(self.stub)
        for i in range(3):
            s.send([2000 + i])
        s.send([])
        s.send([2004])
        s.close()
        got, err = s.rest()
        self.assertEqual([r.routes[0].owner for r in got], [2000, 2001, 2002])
        self.assertIsNotNone(err)
        self.assertEqual((err.code(), err.details()),
                         (INVALID, "message 3: owners must not be empty"))
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[2000, 2001, 2002, 2004]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [1.0, 1.0, 1.0, 0.0])

    def test_bad_weights_name_message_and_entry(self):
        s = Stream(self.stub)
        s.send([2100])
        s.send([2101, 2102], weights=[1.0, -1.0])
        s.close()
        got, err = s.rest()
        self.assertEqual(len(got), 1)
        self.assertEqual(err.code(), INVALID)
        self.assertRegex(err.details(), r"^message 1: weights\[1\] must be in")
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[2100, 2101]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [1.0, 0.0])

    def test_malformed_bytes(self):
        ch = self.sidecar.channel()
        call = ch.stream_stream(h.SERVICE + "RecordArrivals",
                                request_serializer=lambda b: b,
                                response_deserializer=lambda b: b)
        good = P.cr.RecordArrivalRequest(owners=[2200]).SerializeToString()
        it = call(iter([good, b"\x0a\xff"]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(P.cr.RecordArrivalResponse.FromString(next(it)).recorded, 1)
        with self.assertRaises(grpc.RpcError) as cm:
            next(it)
        self.assertEqual(cm.exception.code(), INVALID)
        self.assertRegex(cm.exception.details(), r"^message 1: ")


class AccessTest(h.SidecarTestCase):
    SHARED = False

    def test_an_identity_when_authorization_is_on(self):
        # R3-1: routes count toward every client's, so with authorization
        # on a stream of them needs an identity (here the token).
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d, True)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("a-long-enough-admin-token-0123456789\n")
        os.chmod(token, 0o600)
        sc = self.start_sidecar(*CALLS, "--admin-token-file", token)
        stub = sc.stub()
        self.assertRpcError(grpc.StatusCode.PERMISSION_DENIED, stub.Forget,
                            P.cr.ForgetRequest(owners=[1]))
        with self.assertRaises(grpc.RpcError) as cm:
            list(stub.RecordArrivals(iter([P.cr.RecordArrivalRequest(owners=[1])]),
                                     timeout=h.RPC_TIMEOUT))
        self.assertEqual(cm.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertIn("--route-identity", cm.exception.details())
        md = (("authorization", "Bearer a-long-enough-admin-token-0123456789"),)
        got = list(stub.RecordArrivals(iter([P.cr.RecordArrivalRequest(owners=[1])] * 3),
                                       metadata=md, timeout=h.RPC_TIMEOUT))
        self.assertEqual([r.routes[0].rate for r in got],
                         [h.calls_rate_exact(n, 4.0) for n in (1, 2, 3)])
        sc.assert_clean_exit(self)


class CliTest(h.SidecarTestCase):
    SIDECAR_FLAGS = CALLS

    def cli(self, stdin, *args):
        return h.run_cli("--target", self.sidecar.target, "record", "--stream", *args,
                         stdin=stdin)

    def test_one_json_line_per_message_as_unary(self):
        # Lines as messages: the answers are what the same RecordArrival
        # calls would give (rates on the calls clock; weights after '=').
        p = self.cli("7000 7001,7000\n# a comment\n\n7002=2.5 7000=1\n7003\n")
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        lines = [json.loads(x) for x in p.stdout.splitlines()]
        self.assertEqual([x["recorded"] for x in lines], [3, 2, 1])
        self.assertEqual([[r["owner"] for r in x["routes"]] for x in lines],
                         [["7000", "7001", "7000"], ["7002", "7000"], ["7003"]])
        self.assertEqual(lines[1]["routes"][0]["rate"], 2.5)
        self.assertEqual(lines[1]["routes"][1]["rate"], h.calls_rate_exact(3, 4.0))
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[7000, 7001, 7003]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [h.calls_rate_exact(3, 4.0), 1.0, 1.0])

    def test_many_lines_pipelined(self):
        n = 3000
        p = self.cli("".join("%d\n" % (8000 + i % 50) for i in range(n)), "--omit-routes")
        self.assertEqual((p.returncode, p.stderr), (0, ""))
        lines = p.stdout.splitlines()
        self.assertEqual(len(lines), n)
        self.assertEqual({json.loads(x)["recorded"] for x in lines}, {1})

    def test_errors(self):
        # The sidecar's: the stream ends naming the message; those before
        # it were printed. A bad line: usage, after the lines before it.
        p = self.cli("7100\n7101=-1\n7102\n", "--omit-routes")
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stdout.splitlines()), 1)
        self.assertIn("INVALID_ARGUMENT: message 1: weights[0] must be in", p.stderr)
        p = self.cli("7110\n7111 x\n7112\n", "--omit-routes")
        self.assertEqual(p.returncode, 2)
        self.assertEqual(len(p.stdout.splitlines()), 1)
        self.assertIn("line 2: owner must be a 64-bit integer, got 'x'", p.stderr)
        p = self.cli("7120=1 7121\n")
        self.assertEqual((p.returncode, p.stdout), (2, ""))
        self.assertIn("line 1: give a weight for every owner or for none", p.stderr)
        p = self.cli("", "7130")
        self.assertEqual(p.returncode, 2)
        self.assertIn("reads owners from --file or stdin", p.stderr)
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[7100, 7101, 7102, 7110, 7112]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [1.0, 0.0, 0.0, 1.0, 0.0])


class BoundsTest(h.SidecarTestCase):
    SHARED = False

    def test_a_client_that_does_not_read_is_not_read_from(self):
        # 200 messages, each answered with 8,000 routes (~150 KB), sent
        # by a client that reads nothing: the sidecar stops reading once the
        # connection's windows are full, so only a few get applied (each
        # message a new owner: tracked owners count them). Reading then
        # lets the rest through, in order.
        sc = self.start_sidecar(*CALLS)
        stub = sc.stub()
        lazy = sc.channel(**{"grpc.http2.bdp_probe": 0})
        n, per = 200, 8000
        s = Stream(P.cr_grpc.CacheRouteStub(lazy), timeout=120)
        for i in range(n):
            s.send([10_000 + i] * per)
        seen = h.poll(lambda: tracked(stub) or None, 30, what="the first message applied")
        time.sleep(1.5)  # time enough to apply all of them, were it read
        held = tracked(stub)
        self.assertGreaterEqual(held, seen)
        self.assertLess(held, 40, "the sidecar kept reading a stream nobody reads")
        s.close()
        got, err = s.rest()
        self.assertIsNone(err)
        self.assertEqual([r.routes[0].owner for r in got], [10_000 + i for i in range(n)])
        self.assertEqual(tracked(stub), n)
        sc.assert_clean_exit(self)

    def test_message_size_limit(self):
        sc = self.start_sidecar(*CALLS, "--max-message-bytes", "65536")
        s = Stream(sc.stub())
        s.send([3000])
        s.send(list(range(1 << 20, (1 << 20) + 20000)))  # ~80 KB
        s.send([3001])
        s.close()
        got, err = s.rest()
        self.assertEqual(len(got), 1)
        self.assertEqual(err.code(), EXHAUSTED)
        self.assertEqual(tracked(sc.stub()), 1)
        sc.assert_clean_exit(self)

    def test_call_cap_counts_streams(self):
        sc = self.start_sidecar(*CALLS, "--max-calls-per-method", "2")
        stub = sc.stub()
        open_ = []
        for i in range(2):
            s = Stream(stub)
            s.send([4000 + i])
            self.assertEqual(s.next().recorded, 1)
            open_.append(s)
        third = Stream(stub)
        third.send([4010])
        got, err = third.rest()
        self.assertEqual(got, [])
        self.assertEqual(err.code(), EXHAUSTED)
        self.assertIn("--max-calls-per-method", err.details())
        # Unary RecordArrival is another method: its own cap.
        self.assertEqual(stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[4020]),
                                            timeout=h.RPC_TIMEOUT).recorded, 1)
        open_[0].close()
        self.assertEqual(open_[0].rest(), ([], None))
        # One fewer open: a new stream is served (the release may trail
        # the status by a moment).
        def fourth():
            s = Stream(stub)
            s.send([4030])
            s.close()
            got, err = s.rest()
            return got if err is None else None
        self.assertEqual(h.poll(fourth, 10, what="a stream under the cap")[0].recorded, 1)
        open_[1].close()
        open_[1].rest()
        sc.assert_clean_exit(self)

    def test_idle_stream_ends_deadline_exceeded(self):
        sc = self.start_sidecar(*CALLS, "--stream-idle-timeout", "1")
        stub = sc.stub()
        # A busy stream lives past the timeout: every message restarts it.
        busy = Stream(stub)
        t0 = time.monotonic()
        for i in range(12):
            busy.send([5000])
            self.assertEqual(busy.next().recorded, 1)
            time.sleep(0.25)
        self.assertGreater(time.monotonic() - t0, 2.5)
        busy.close()
        self.assertEqual(busy.rest(), ([], None))
        # An idle one ends, after one answer and with none.
        for first in ([5001], None):
            s = Stream(stub)
            if first:
                s.send(first)
                self.assertEqual(s.next().recorded, 1)
            t0 = time.monotonic()
            got, err = s.rest()
            waited = time.monotonic() - t0
            self.assertEqual(got, [])
            self.assertEqual(err.code(), DEADLINE, err.details())
            self.assertIn("--stream-idle-timeout", err.details())
            self.assertGreater(waited, 0.5)
            self.assertLess(waited, 10)
        sc.assert_clean_exit(self)

    def test_shutdown_ends_streams_unavailable_within_the_grace(self):
        sc = self.start_sidecar(*CALLS, "--shutdown-grace", "20")
        streams = []
        for i in range(3):
            s = Stream(sc.stub(), timeout=60)
            s.send([6000 + i])
            self.assertEqual(s.next().recorded, 1)
            streams.append(s)
        t0 = time.monotonic()
        sc.send(signal.SIGTERM)
        for s in streams:
            got, err = s.rest()
            self.assertEqual(got, [])
            self.assertEqual((err.code(), err.details()), (UNAVAILABLE, "server shutting down"))
        self.assertLess(time.monotonic() - t0, 10, "streams waited for the grace")
        sc.assert_clean_exit(self, close_channels=False)
        self.assertLess(time.monotonic() - t0, 15)

    def test_shutdown_with_a_client_that_does_not_read(self):
        # Its reply cannot go out, nor the status behind it: the grace ends
        # it (cancelled), and the sidecar still exits in time, cleanly.
        sc = self.start_sidecar(*CALLS, "--shutdown-grace", "2")
        lazy = sc.channel(**{"grpc.http2.bdp_probe": 0})
        s = Stream(P.cr_grpc.CacheRouteStub(lazy), timeout=60)
        for i in range(20):
            s.send([9000 + i] * 8000)
        h.poll(lambda: tracked(sc.stub()) or None, 30, what="the first message applied")
        t0 = time.monotonic()
        sc.assert_clean_exit(self, close_channels=False)
        self.assertLess(time.monotonic() - t0, 2 + 5)
        got, err = s.rest()
        self.assertLess(len(got), 20)
        self.assertIsNotNone(err)


if __name__ == "__main__":
    h.main()
