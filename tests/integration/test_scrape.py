"""The engines' /metrics scraped by the real sidecar (--scrape-interval),
from fake engines on 127.0.0.1 (tests/epp/fake_http.py: vLLM's names, the
loads a test sets; a test double for a GPU engine): the scrapes are counted;
a garbage, slow, oversized or unreachable /metrics is counted by reason and
never delays a Route call while concurrent Route calls keep answering; and
a long queue scraped on one endpoint moves routes away from it."""
import json
import os
import re
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "epp"))

import harness as h  # noqa: E402
from fake_http import FakeEngine  # noqa: E402
from harness import P  # noqa: E402

INTERVAL = "0.05"
ROUTE_BOUND_S = 1.0  # a Route answered later than this waited on a scrape (they take 3 s)


def metrics(port):
    """{name: {labels text: value}} of the sidecar's /metrics."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for m in re.finditer(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$', text, re.M):
        out.setdefault(m.group(1), {})[m.group(2) or ""] = float(m.group(3))
    return out


def failures(port):
    fam = metrics(port).get("cacheroute_engine_scrape_failures_total", {})
    return {re.search(r'reason="(\w+)"', k).group(1): v for k, v in fam.items()}


class ScrapeTest(h.SidecarTestCase):
    SHARED = False

    def start(self, engines, *flags):
        """A sidecar whose endpoints are engines (FakeEngine, or an address)."""
        d = tempfile.mkdtemp(prefix="cr-scrape-")
        path = os.path.join(d, "endpoints.json")
        doc = {"endpoints": [{"id": "e%d" % i,
                              "address": e if isinstance(e, str) else e.address}
                             for i, e in enumerate(engines)]}
        with open(path, "w") as f:
            json.dump(doc, f)
        sc = self.start_sidecar("--endpoints-file", path, "--metrics-listen", "127.0.0.1:0",
                                "--scrape-interval", INTERVAL, *flags)
        return sc, sc.config["metrics_port"]

    def engines(self, n):
        out = [FakeEngine("e%d" % i) for i in range(n)]
        for e in out:
            e.httpd.handle_error = lambda *a: None  # a scrape abandoned mid-answer
            self.addCleanup(e.stop)
        return out

    def test_scrapes_counted(self):
        engines = self.engines(3)
        sc, port = self.start(engines, "--scrape-timeout", "2")  # slow builds (TSan) too
        h.poll(lambda: all(e.scrapes >= 5 for e in engines), 10, what="5 scrapes an engine")
        m = metrics(port)
        self.assertGreaterEqual(m["cacheroute_engine_scrapes_total"][""], 12)
        self.assertGreaterEqual(m["cacheroute_engine_scrape_rounds_total"][""], 4)
        self.assertEqual(sum(failures(port).values()), 0, failures(port))
        self.assertEqual(set(failures(port)),
                         {"connect", "timeout", "too_big", "status", "parse", "refused"})
        sc.assert_clean_exit(self)

    def test_host_names_are_not_scraped(self):
        """An address naming a host (localhost here, a real engine behind it)
        is never fetched: counted as connect, the sidecar exits clean (a
        lookup abandoned mid-way would leave libcurl's resolver thread
        unjoined, which TSan reports)."""
        engines = self.engines(2)
        named = "localhost:%d" % engines[1].port
        sc, port = self.start([engines[0], named], "--scrape-timeout", "2")
        h.poll(lambda: engines[0].scrapes >= 5 and failures(port)["connect"] >= 5, 10,
               what="5 scrapes of the IP, 5 refusals of the name")
        self.assertEqual(engines[1].scrapes, 0)
        sc.assert_clean_exit(self)

    def test_off(self):
        engines = self.engines(1)
        sc, port = self.start(engines, "--scrape-interval", "0")
        time.sleep(0.3)
        self.assertEqual(engines[0].scrapes, 0)
        self.assertNotIn("cacheroute_engine_scrapes_total", metrics(port))
        sc.assert_clean_exit(self)

    def test_bad_metrics_never_delay_routes(self):
        """Garbage, a 3 s answer (timeout 0.2 s), a body past the bound and a
        closed port, under 4 threads of Route calls: every call answers
        within ROUTE_BOUND_S, each failure is counted by its reason, and the
        good engine keeps being scraped."""
        garbage, slow, big, good = self.engines(4)
        garbage.metrics_body = b"<html><body>Not Found</body></html>\n"
        slow.metrics_delay_s = 3.0
        big.metrics_body = b"vllm:num_requests_waiting 1\n" * 4000  # 112 KB
        closed = "127.0.0.1:%d" % h.free_port()
        sc, port = self.start([garbage, slow, big, good, closed], "--scrape-timeout", "0.2",
                              "--scrape-max-bytes", "65536")
        stub = sc.stub()
        stop = threading.Event()
        slowest, errors, calls = [0.0], [], [0]
        lock = threading.Lock()

        def load(k):
            owner = k * 100000
            while not stop.is_set():
                owner += 1
                req = P.cr.RouteRequest(requests=[P.cr.RouteItem(owner=owner,
                                                                 block_hashes=[owner, 7])])
                t0 = time.monotonic()
                try:
                    stub.Route(req, timeout=h.RPC_TIMEOUT)
                except Exception as e:  # noqa: BLE001: counted and reported
                    errors.append(repr(e))
                took = time.monotonic() - t0
                with lock:
                    slowest[0] = max(slowest[0], took)
                    calls[0] += 1

        threads = [threading.Thread(target=load, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        try:
            h.poll(lambda: all(failures(port).get(r, 0) >= 2
                               for r in ("parse", "timeout", "too_big", "connect")),
                   15, what="every reason counted twice")
            time.sleep(1.0)  # and Route calls through more rounds
        finally:
            stop.set()
            for t in threads:
                t.join()
        self.assertEqual(errors, [])
        self.assertGreater(calls[0], 100)
        self.assertLess(slowest[0], ROUTE_BOUND_S)
        self.assertGreaterEqual(good.scrapes, 5)  # a round lasts the 0.2 s timeout
        f = failures(port)
        self.assertEqual((f["status"], f["refused"]), (0, 0))
        # one log line a shard a minute, naming the reason
        logged = {e.get("reason") for e in sc.events if e.get("msg", "").startswith(
            "engine scrape failed")}
        self.assertEqual(logged, {"parse", "timeout", "too_big", "connect"})
        sc.assert_clean_exit(self)

    def test_long_queue_moves_routes(self):
        """docs/routing.md, "Engine load": an engine that says it holds 200
        requests the router did not send takes (almost) no new route while
        its load is fresh; once its /metrics stops answering sense, the load
        goes stale within two intervals and the router's own view (which
        sees little on it) sends it routes again."""
        engines = self.engines(3)
        sc, port = self.start(engines, "--route-by", "ttft")
        stub = sc.stub()
        owner = [0]

        def shards(n):
            """The shards of n Route calls, each a new owner and prompt."""
            got = [0, 0, 0]
            for _ in range(n):
                owner[0] += 1
                o = owner[0]
                req = P.cr.RouteRequest(requests=[P.cr.RouteItem(
                    owner=o, block_hashes=[o * 1000 + k for k in range(8)])])
                got[stub.Route(req, timeout=h.RPC_TIMEOUT).routes[0].shard] += 1
            return got

        def scraped_again(times=3):
            base = [e.scrapes for e in engines]
            h.poll(lambda: all(e.scrapes >= b + times for e, b in zip(engines, base)), 10,
                   what="%d more scrapes an engine" % times)

        scraped_again()
        before = shards(30)
        self.assertGreaterEqual(before[0], 5, before)  # all idle: shard 0 takes its share
        engines[0].waiting = 200
        scraped_again()
        busy = shards(60)
        self.assertLessEqual(busy[0], 2, busy)
        engines[0].metrics_body = b"garbage\n"  # its load now stales
        scraped_again()
        after = shards(30)
        self.assertGreaterEqual(after[0], 10, after)
        self.assertGreater(failures(port)["parse"], 0)
        sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
