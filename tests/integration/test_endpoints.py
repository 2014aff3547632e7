"""Named endpoints against the real sidecar: --endpoints-file read at
start and re-read when it changes (and on SIGHUP) while RecordArrival and
Route load runs; answers name the endpoint; a removed or drained endpoint
takes no new request within a second of the change; SetEndpoints,
DrainEndpoint and ListEndpoints; bad files and bad sets change nothing;
errors reported in outcomes mark an endpoint down, and it comes back."""
import json
import os
import signal
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
SWITCH_S = 1.0  # a change applies within the poller's period (0.5 s); answers after this are new


def endpoints_doc(*ids):
    return {"endpoints": [{"id": i, "address": "10.0.0.%d:8000" % k} for k, i in enumerate(ids)]}


def write_atomically(path, text):
    """As a ConfigMap update does: a new file renamed over the old."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


class EndpointsFileTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cr-endpoints-")
        self.path = os.path.join(self.dir, "endpoints.json")
        write_atomically(self.path, json.dumps(endpoints_doc("a", "b", "c")))
        self.sc = self.start_sidecar("--endpoints-file", self.path, "--n-shards", "8")
        self.stub = self.sc.stub()

    def listed(self):
        r = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        return r.version, [(e.shard, e.id, e.address, e.state) for e in r.endpoints]

    def record(self, owners):
        r = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners),
                                    timeout=h.RPC_TIMEOUT)
        return r.routes

    def test_start_names_every_answer(self):
        version, rows = self.listed()
        self.assertEqual(version, 1)
        self.assertEqual(rows, [(0, "a", "10.0.0.0:8000", "active"),
                                (1, "b", "10.0.0.1:8000", "active"),
                                (2, "c", "10.0.0.2:8000", "active")])
        names = {0: ("a", "10.0.0.0:8000"), 1: ("b", "10.0.0.1:8000"),
                 2: ("c", "10.0.0.2:8000")}
        for r in self.record(list(range(1, 200))):
            self.assertIn(r.preferred_shard, names)  # three shards, not --n-shards' eight
            self.assertEqual((r.endpoint_id, r.endpoint_address), names[r.preferred_shard])
        req = P.cr.RouteRequest(requests=[P.cr.RouteItem(owner=7, block_hashes=[1, 2, 3])])
        d = self.stub.Route(req, timeout=h.RPC_TIMEOUT).routes[0]
        self.assertEqual((d.endpoint_id, d.endpoint_address), names[d.shard])

    def test_changes_under_load(self):
        """The file changes three times under RecordArrival and Route load:
        no call fails, and within a second of each change no new request
        goes to an endpoint that left."""
        stop = threading.Event()
        seen = []  # (time, endpoint id) of every answer
        failures = []
        lock = threading.Lock()

        def load(kind):
            stub = self.sc.stub()
            owner = 1000 if kind == "record" else 5000
            while not stop.is_set():
                owner += 1
                try:
                    if kind == "record":
                        ids = [r.endpoint_id for r in stub.RecordArrival(
                            P.cr.RecordArrivalRequest(owners=[owner, owner % 37]),
                            timeout=h.RPC_TIMEOUT).routes]
                    else:
                        ids = [d.endpoint_id for d in stub.Route(P.cr.RouteRequest(
                            requests=[P.cr.RouteItem(owner=owner % 53,
                                                     block_hashes=[owner % 11, owner])]),
                            timeout=h.RPC_TIMEOUT).routes]
                except grpc.RpcError as e:
                    with lock:
                        failures.append(e.details())
                    continue
                now = time.monotonic()
                with lock:
                    seen.extend((now, i) for i in ids)

        threads = [threading.Thread(target=load, args=(k,)) for k in ("record", "route")]
        for t in threads:
            t.start()
        try:
            changes = []
            for ids in (("a", "b", "c", "d", "e"), ("a", "c", "d", "e"), ("c", "d", "e")):
                time.sleep(1.0)
                write_atomically(self.path, json.dumps(endpoints_doc(*ids)))
                changes.append((time.monotonic(), set(ids)))
            time.sleep(2.5)
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(failures, [])
        ends = [at for at, _ in changes[1:]] + [float("inf")]
        for (at, ids), end in zip(changes, ends):
            late = [i for t, i in seen if at + SWITCH_S < t < end and i not in ids]
            self.assertEqual(late, [], "answers named endpoints that had left")
        final = [i for t, i in seen if t > changes[-1][0] + SWITCH_S]
        self.assertTrue(final and set(final) <= {"c", "d", "e"})
        self.assertIn("d", final)  # a joined endpoint takes requests
        version, rows = self.listed()
        self.assertEqual(version, 4)
        states = {i: s for _, i, _, s in rows}
        self.assertEqual(states, {"a": "gone", "b": "gone", "c": "active", "d": "active",
                                  "e": "active"})
        self.assertEqual([s for s, i, _, _ in rows if i == "c"], [2])  # kept its shard

    def test_bad_file_keeps_the_set(self):
        write_atomically(self.path, '{"endpoints": [\n  {"id": "a", "address": "x"},\n'
                                    '  {"id": "a", "address": "y"}\n]}\n')
        self.sc.wait_for(lambda e: e.get("msg") == "endpoints file refused, the set stays",
                         10, "the refusal")
        ev = self.sc.find_events(lambda e: e.get("msg") == "endpoints file refused, the set stays")
        self.assertRegex(ev[-1]["error"], r"endpoints\.json:3: endpoints\[1\]\.id \"a\" is given "
                                          r"twice \(endpoints\[0\]\)")
        self.assertEqual(self.listed()[0], 1)
        write_atomically(self.path, "endpoints:\n  - id: z\n    address: 'h:1'\n    weight: 2\n")
        h.poll(lambda: self.listed()[0] == 2, 10, what="the YAML file applied")
        rows = self.listed()[1]
        self.assertEqual([(s, i, st) for s, i, _, st in rows],
                         [(0, "a", "gone"), (1, "b", "gone"), (2, "c", "gone"), (3, "z", "active")])
        # SIGHUP re-reads an unchanged file: a new version, the same set
        self.sc.send(signal.SIGHUP)
        h.poll(lambda: self.listed()[0] == 3, 10, what="the SIGHUP re-read")
        self.sc.assert_clean_exit(self)

    def refusal(self, pred, what):
        msg = "endpoints file refused, the set stays"
        return self.sc.wait_for(lambda e: e.get("msg") == msg and pred(e["error"]), 10, what)

    def test_renaming_every_endpoint_applies(self):
        """R3-5: 600 endpoints renamed at once needed 1,203 slots and were
        refused for ever; the removals now free slots for the joins."""
        write_atomically(self.path, json.dumps(endpoints_doc(*["p%d" % i for i in range(600)])))
        h.poll(lambda: self.listed()[0] == 2, 10, what="600 endpoints applied")
        new = ["q%d" % i for i in range(600)]
        write_atomically(self.path, json.dumps(endpoints_doc(*new)))
        h.poll(lambda: self.listed()[0] == 3, 10, what="600 endpoints renamed")
        rows = self.listed()[1]
        self.assertEqual(sorted(i for _, i, _, st in rows if st == "active"), sorted(new))
        self.assertLessEqual(len(rows), 1024)
        self.sc.assert_clean_exit(self)

    def test_refused_file_is_retried(self):
        """R3-5: a refused file is read again every few seconds even when it
        looks unchanged (here rewritten in place, its mtime put back: a
        coarse clock, or a permission fixed), and applies once it can."""
        bad = '{"endpoints": [{"id": "a", "address": "x"}, {"id": "a", "address": "y"}]}\n'
        good = '{"endpoints": [{"id": "a", "address": "x"}, {"id": "z", "address": "y"}]}\n'
        self.assertEqual(len(bad), len(good))
        write_atomically(self.path, bad)
        self.refusal(lambda e: "is given twice" in e, "the refusal")
        st = os.stat(self.path)
        self.sc.send(signal.SIGSTOP)  # the poller sees no in-between state
        try:
            with open(self.path, "r+") as f:
                f.write(good)
            os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns))
        finally:
            self.sc.send(signal.SIGCONT)
        self.assertEqual(os.stat(self.path).st_mtime_ns, st.st_mtime_ns)
        h.poll(lambda: self.listed()[0] == 2, 15, what="the refused file read again")
        self.assertIn((0, "a", "x", "active"), [(s, i, a, t) for s, i, a, t in self.listed()[1]])
        self.sc.assert_clean_exit(self)

    def test_fifo_swapped_in(self):
        """R3-6: a FIFO renamed over the file is refused at once, naming it
        (opening it blocked the poller, and SIGTERM after it), and the
        sidecar still stops within its grace."""
        fifo = os.path.join(self.dir, "fifo")
        os.mkfifo(fifo)
        os.rename(fifo, self.path)
        self.refusal(lambda e: e == self.path + ": cannot read: it must be a regular file, "
                     "not a FIFO", "the FIFO refused")
        self.assertEqual(self.listed()[0], 1)
        t0 = time.monotonic()
        self.sc.assert_clean_exit(self)
        self.assertLess(time.monotonic() - t0, 5)

    def test_check_config_reads_the_file(self):
        """--check-config refuses a bad endpoints file as a start would,
        naming file and line, and passes a good one."""
        bad = os.path.join(self.dir, "bad.json")
        with open(bad, "w") as f:
            f.write('{"endpoints": [\n {"id": "a", "address": "x"},\n'
                    ' {"id": "a", "address": "y"}]}\n')
        p = h.run_sidecar("--check-config", "--endpoints-file", bad)
        self.assertEqual(p.returncode, 2)
        self.assertIn('bad.json:3: endpoints[1].id "a" is given twice (endpoints[0])', p.stderr)
        p = h.run_sidecar("--check-config", "--endpoints-file", self.path)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["endpoints_file"], self.path)

    def test_unreadable_file_at_start_is_an_error(self):
        missing = os.path.join(self.dir, "none.json")
        p = h.run_sidecar("--endpoints-file", missing, "--listen", "127.0.0.1:0",
                          "--metrics-listen", "")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(missing, p.stderr)


class EndpointsRpcTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.sc = self.start_sidecar("--endpoint-fail-errors", "3", "--endpoint-fail-window", "5",
                                     "--endpoint-down-for", "1", "--metrics-listen",
                                     "127.0.0.1:0", metrics=False)
        self.stub = self.sc.stub()

    def set(self, *ids, timeout=h.RPC_TIMEOUT):
        return self.stub.SetEndpoints(P.cr.SetEndpointsRequest(endpoints=[
            P.cr.Endpoint(id=i, address=i + ":80") for i in ids]), timeout=timeout)

    def test_watch_sees_each_change(self):
        """WatchEndpoints: every change from the watch's start, in order,
        with what it changed and the sessions it forces."""
        self.set("p", "q")
        watch = self.stub.WatchEndpoints(P.cr.WatchEndpointsRequest(), timeout=30)
        h.poll(lambda: "cacheroute_endpoint_changes_total" in self.metrics_text(), 5,
               what="the sidecar up")
        time.sleep(0.2)  # the watch is registered before the first change
        on_q = sum(1 for r in self.stub.RecordArrival(P.cr.RecordArrivalRequest(
            owners=list(range(1, 60))), timeout=h.RPC_TIMEOUT).routes if r.endpoint_id == "q")
        self.set("p", "q", "r")
        self.stub.DrainEndpoint(P.cr.DrainEndpointRequest(id="q"), timeout=h.RPC_TIMEOUT)
        got = [next(watch) for _ in range(2)]
        watch.cancel()
        self.assertEqual([(m.by, m.endpoint, m.shards, m.lost) for m in got],
                         [("set", "", 3, 0), ("drain", "q", 3, 0)])
        self.assertEqual(got[0].change.joined, 1)
        self.assertEqual((got[1].change.drained, got[1].change.sessions_to_move), (1, on_q))
        self.assertEqual(got[1].version, got[0].version + 1)

    def metrics_text(self):
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode()

    def test_set_drain_list_and_errors(self):
        r = self.set("p", "q", "r")
        self.assertEqual(r.change.joined, 3)
        base = r.version
        # bad sets: nothing changes
        self.assertRpcError(INVALID, self.set, "p", "p",
                            details='endpoints[1].id "p" is given twice (endpoints[0])')
        self.assertRpcError(INVALID, self.stub.SetEndpoints, P.cr.SetEndpointsRequest(),
                            details="endpoints must not be empty")
        self.assertRpcError(INVALID, self.stub.SetEndpoints, P.cr.SetEndpointsRequest(
            endpoints=[P.cr.Endpoint(id="p", address="p:80", weight=-1)]),
            details="endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got -1")
        # one rule with the file's: the smallest double is no weight
        self.assertRpcError(INVALID, self.stub.SetEndpoints, P.cr.SetEndpointsRequest(
            endpoints=[P.cr.Endpoint(id="p", address="p:80", weight=5e-324)]),
            details="endpoints[0].weight must be in [0.001, 1000] or 0 (for 1), got "
                    "4.94066e-324")
        self.assertRpcError(INVALID, self.stub.DrainEndpoint,
                            P.cr.DrainEndpointRequest(id="nope"),
                            details='endpoint "nope" is not in the set')
        listed = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(listed.version, base)
        # sessions on q, then q drains: they move, no new request goes there
        owners = list(range(1, 120))
        before = {r.owner: r.endpoint_id for r in self.stub.RecordArrival(
            P.cr.RecordArrivalRequest(owners=owners), timeout=h.RPC_TIMEOUT).routes}
        on_q = sum(1 for v in before.values() if v == "q")
        self.assertGreater(on_q, 0)
        d = self.stub.DrainEndpoint(P.cr.DrainEndpointRequest(id="q"), timeout=h.RPC_TIMEOUT)
        self.assertEqual((d.change.drained, d.change.sessions_to_move), (1, on_q))
        self.assertEqual([e.state for e in d.endpoints], ["active", "draining", "active"])
        after = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners),
                                        timeout=h.RPC_TIMEOUT).routes
        self.assertNotIn("q", {r.endpoint_id for r in after})
        on_r = sum(1 for r in after if r.endpoint_id == "r")
        self.stub.DrainEndpoint(P.cr.DrainEndpointRequest(id="q", undrain=True),
                                timeout=h.RPC_TIMEOUT)
        # three errors on r within the window: down; back after --endpoint-down-for
        shard_r = 2
        out = P.cr.Outcome(shard=shard_r, error="connection refused")
        for _ in range(3):
            self.stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[out]),
                                    timeout=h.RPC_TIMEOUT)
        states = [e.state for e in self.stub.ListEndpoints(
            P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT).endpoints]
        self.assertEqual(states, ["active", "active", "down"])
        routes = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners),
                                         timeout=h.RPC_TIMEOUT).routes
        self.assertNotIn("r", {x.endpoint_id for x in routes})
        h.poll(lambda: [e.state for e in self.stub.ListEndpoints(
            P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT).endpoints][2] == "active",
            10, what="r tried again")
        self.assertRpcError(INVALID, self.stub.ReportOutcome, P.cr.ReportOutcomeRequest(
            outcomes=[P.cr.Outcome(shard=0, error="x" * 257)]),
            details="outcomes[0].error must be at most 256 bytes, got 257")
        lines = set(self.metrics_text().splitlines())
        for want in ('cacheroute_endpoint_changes_total{change="failed"} 1',
                     'cacheroute_endpoint_changes_total{change="recovered"} 1',
                     # the drain's sessions, then those on r when it went down
                     'cacheroute_endpoint_sessions_to_move_total %d' % (on_q + on_r),
                     'cacheroute_route_sessions_moved_total{cause="left"} %d' % (on_q + on_r)):
            self.assertIn(want, lines)


if __name__ == "__main__":
    h.main()
