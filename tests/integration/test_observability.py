"""Prometheus /metrics and JSON logs of the real sidecar: scrapes after real
RPCs, parsed with Debian's python3-prometheus-client, checking each value
moved by the right amount; and the log lines a sidecar's life produces."""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

SERVICE = "cacheroute.v1.CacheRoute"


def scrape(port):
    """{(sample name, frozenset(labels)): value} and the content type."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        body, ctype = r.read().decode(), r.headers.get("Content-Type")
    samples, types = {}, {}
    for family in text_string_to_metric_families(body):
        types[family.name] = family.type
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, types, ctype


def key(name, **labels):
    return (name, frozenset(labels.items()))


def rpc(method, code="OK"):
    return key("cacheroute_rpc_requests_total", service=SERVICE, method=method, code=code)


class MetricsTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.sc = self.start_sidecar("--metrics-listen", "127.0.0.1:0", "--estimator-clock",
                                     "calls", "--replan-interval", "0", metrics=False)
        self.port = self.sc.config["metrics_port"]
        self.assertGreater(self.port, 0)
        self.stub = self.sc.stub()

    def delta(self, before, after, k):
        return after.get(k, 0.0) - before.get(k, 0.0)

    def test_values_move_by_the_right_amounts(self):
        before, types, ctype = scrape(self.port)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        self.assertEqual(types["cacheroute_rpc_requests"], "counter")
        self.assertEqual(types["cacheroute_rpc_duration_seconds"], "histogram")
        self.assertEqual(types["cacheroute_tracked_owners"], "gauge")
        self.assertEqual(before[key("cacheroute_tracked_owners")], 0)
        self.assertEqual(before[key("cacheroute_table_generation")], 0)

        for _ in range(2):
            self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 2, 3, 4, 5]),
                                    timeout=h.RPC_TIMEOUT)
        table = self.stub.Plan(h.plan_request(from_estimator=True, install=True),
                               timeout=h.RPC_TIMEOUT).table
        self.stub.Plan(h.plan_request(rates=[(9, 5.0)]), timeout=h.RPC_TIMEOUT)  # not installed
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.stub.Plan,
                            h.plan_request(rates=[(1, -1.0)]))
        self.stub.Forget(P.cr.ForgetRequest(owners=[5, 6]), timeout=h.RPC_TIMEOUT)
        self.stub.SelectInjection(P.cr.SelectInjectionRequest(prompt_tokens=10, dry_run=True),
                                  timeout=h.RPC_TIMEOUT)
        self.stub.SelectInjection(P.cr.SelectInjectionRequest(
            prompt_tokens=10, knowledge_tokens=20, dry_run=True), timeout=h.RPC_TIMEOUT)
        # A call is counted once the server has finished it, which can be just
        # after the client has its answer: scrape until the last one is in.
        deadline = time.monotonic() + 10
        while True:
            after, _, _ = scrape(self.port)
            if (self.delta(before, after, rpc("SelectInjection")) >= 2
                    or time.monotonic() > deadline):
                break
            time.sleep(0.02)

        d = lambda k: self.delta(before, after, k)  # noqa: E731
        self.assertEqual(d(rpc("RecordArrival")), 2)
        self.assertEqual(d(rpc("Plan")), 2)
        self.assertEqual(d(rpc("Plan", "INVALID_ARGUMENT")), 1)
        self.assertEqual(d(rpc("Forget")), 1)
        self.assertEqual(d(rpc("SelectInjection")), 2)
        self.assertEqual(d(rpc("GetRates")), 0)
        dur = key("cacheroute_rpc_duration_seconds_count", service=SERVICE, method="Plan")
        self.assertEqual(d(dur), 3)
        inf = key("cacheroute_rpc_duration_seconds_bucket", service=SERVICE,
                  method="RecordArrival", le="+Inf")
        self.assertEqual(d(inf), 2)
        self.assertEqual(d(key("cacheroute_arrivals_recorded_total")), 10)
        self.assertEqual(d(key("cacheroute_plans_total")), 2)
        self.assertEqual(d(key("cacheroute_plans_installed_total")), 1)
        self.assertEqual(d(key("cacheroute_plan_duration_seconds_count")), 2)
        self.assertEqual(after[key("cacheroute_tracked_owners")], 4)
        self.assertEqual(after[key("cacheroute_table_generation")], 1)
        self.assertEqual(after[key("cacheroute_table_admitted_sessions")], 5)
        # Five owners with two calls each (calls clock, H = 20): 5 * (1 + d).
        rate = h.calls_rate_exact(2, 20.0)
        self.assertAlmostEqual(after[key("cacheroute_table_admitted_requests_per_second")],
                               5 * rate, places=9)
        self.assertEqual(after[key("cacheroute_table_imbalance_ratio")], table.imbalance)
        no_k = key("cacheroute_injection_decisions_total", mode="text", reason="no_knowledge")
        no_kv = key("cacheroute_injection_decisions_total", mode="text", reason="no_kv_available")
        self.assertEqual((d(no_k), d(no_kv)), (1, 1))
        self.assertEqual(d(key("cacheroute_injection_predicted_seconds_count", path="text")), 2)
        self.assertEqual(d(key("cacheroute_injection_predicted_seconds_count", path="kv_cache")), 0)
        # The probe's view: no driver here, and the cost model's bandwidths.
        self.assertEqual(after[key("cacheroute_cuda_available")], 0)
        self.assertEqual(after[key("cacheroute_cost_model_h2d_bytes_per_second")], 25e9)
        self.sc.assert_clean_exit(self)

    def test_histogram_buckets_are_cumulative(self):
        for _ in range(3):
            self.stub.GetRates(P.cr.GetRatesRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
        # A call is counted once the server has finished it, which can be just
        # after the client has its answer: scrape until the third is in.
        deadline = time.monotonic() + 10
        while True:
            samples, _, _ = scrape(self.port)
            buckets = sorted((float(dict(k[1])["le"]), v) for k, v in samples.items()
                             if k[0] == "cacheroute_rpc_duration_seconds_bucket"
                             and dict(k[1]).get("method") == "GetRates")
            if (buckets and buckets[-1][1] >= 3) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        counts = [v for _, v in buckets]
        self.assertEqual(counts, sorted(counts))
        self.assertEqual(buckets[-1], (float("inf"), 3))
        total = samples[key("cacheroute_rpc_duration_seconds_sum", service=SERVICE,
                            method="GetRates")]
        self.assertGreater(total, 0)
        self.assertLess(total, 10)

    def test_other_paths(self):
        for path, code in (("/", 404), ("/metricsx", 404), ("/metrics/", 404)):
            with self.subTest(path=path):
                with self.assertRaises(urllib.error.HTTPError) as cm:
                    urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path), timeout=10)
                self.assertEqual(cm.exception.code, code)
        req = urllib.request.Request("http://127.0.0.1:%d/metrics" % self.port, data=b"x",
                                     method="POST")
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(req, timeout=10)
        self.assertEqual(cm.exception.code, 405)


class MetricsListenTest(h.SidecarTestCase):
    SHARED = False

    def test_bad_or_busy_metrics_address(self):
        p = h.run_sidecar("--listen", "127.0.0.1:0", "--metrics-listen", "nonsense")
        self.assertEqual(p.returncode, 2)
        self.assertIn("--metrics-listen", p.stderr)
        sc = self.start_sidecar("--metrics-listen", "127.0.0.1:0", "--replan-interval", "0",
                                metrics=False)
        busy = "127.0.0.1:%d" % sc.config["metrics_port"]
        p = h.run_sidecar("--listen", "127.0.0.1:0", "--metrics-listen", busy)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--metrics-listen: cannot listen on '%s'" % busy, p.stderr)
        sc.assert_clean_exit(self)


class LogsTest(h.SidecarTestCase):
    SHARED = False

    def test_a_life_in_log_lines(self):
        sc = self.start_sidecar("--replan-interval", "0.2", "--estimator-clock", "calls")
        stub = sc.stub()
        for _ in range(20):
            stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 2]), timeout=h.RPC_TIMEOUT)
        stub.Plan(h.plan_request(rates=[(1, 3.0)], install=True), timeout=h.RPC_TIMEOUT)
        sc.wait_for(lambda e: e.get("msg") == "plan installed" and e.get("by") == "replanner",
                    10, what="a replanner install")
        sc.assert_clean_exit(self)
        # Every line is one JSON object with ts, level and msg.
        self.assertEqual(sc.stray, [])
        for e in sc.events:
            self.assertTrue({"ts", "level", "msg"} <= set(e), e)
            self.assertRegex(e["ts"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
            self.assertIn(e["level"], ("info", "warn", "error"))
        msgs = [e["msg"] for e in sc.events]
        self.assertEqual(msgs[-2:], ["shutting down", "stopped"])
        for m in ("probe", "serving", "plan installed"):
            self.assertIn(m, msgs)
        serving = next(e for e in sc.events if e["msg"] == "serving")
        self.assertEqual(serving["estimator"]["clock"], "calls")
        self.assertEqual(serving["replan_interval_s"], 0.2)
        rpc_install = next(e for e in sc.events
                           if e["msg"] == "plan installed" and e["by"] == "rpc")
        self.assertEqual((rpc_install["admitted"], rpc_install["imbalance"]), (1, 8.0))
        self.assertGreaterEqual(rpc_install["duration_ms"], 0)
        # Each installed generation is logged once (RPC and replanner installs
        # may log in either order).
        gens = sorted(e["generation"] for e in sc.events if e["msg"] == "plan installed")
        self.assertEqual(gens, list(range(1, len(gens) + 1)))
        # No line per request at info.
        self.assertNotIn("call started", msgs)
        self.assertNotIn("call finished", msgs)

    def test_debug_has_a_line_per_call(self):
        sc = self.start_sidecar("--log-level", "debug", "--replan-interval", "0")
        sc.stub().Forget(P.cr.ForgetRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
        done = sc.wait_for(lambda e: e.get("msg") == "call finished"
                           and e.get("method") == h.SERVICE + "Forget", 10)
        self.assertEqual((done["level"], done["status"]), ("debug", 0))
        sc.assert_clean_exit(self)

    def test_warn_level_is_quiet(self):
        # No "serving" line to wait for at warn: poll health, then /metrics
        # until the replanner has installed plans, so the silence below is
        # that of a sidecar that did its periodic work, not of one that had
        # no time to do any.
        port, metrics_port = h.free_port(), h.free_port()
        proc = subprocess.Popen([h.ARGS.sidecar, "--listen", "127.0.0.1:%d" % port,
                                 "--metrics-listen", "127.0.0.1:%d" % metrics_port,
                                 "--log-level", "warn", "--replan-interval", "0.1"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=h.clean_env(),
                                universal_newlines=True)
        self.addCleanup(proc.kill)
        ch = grpc.insecure_channel("127.0.0.1:%d" % port)
        grpc.channel_ready_future(ch).result(timeout=h.START_TIMEOUT)
        stub = P.cr_grpc.CacheRouteStub(ch)
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
        installed = key("cacheroute_plans_installed_total")

        def replans_ran():
            if proc.poll() is not None:
                _, err = proc.communicate(timeout=h.STOP_TIMEOUT)
                raise AssertionError("sidecar exited (rc=%s) before two replans; stderr:\n%s"
                                     % (proc.returncode, err))
            try:
                samples, _, _ = scrape(metrics_port)
            except (urllib.error.URLError, ConnectionError):
                return None  # the metrics listener is not up yet
            # No Plan RPC here: every install is the replanner's.
            return samples.get(installed, 0) >= 2

        h.poll(replans_ran, h.START_TIMEOUT, interval=0.05,
               what="two replanner installs on /metrics")
        ch.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=h.STOP_TIMEOUT)
        self.assertEqual(proc.returncode, 0, err)
        # Neither the replans nor the scrapes logged at warn: the one line is
        # the start-up notice that this plaintext sidecar has every call open.
        lines = [json.loads(line) for line in err.splitlines()]
        self.assertEqual([(e["level"], e["msg"]) for e in lines],
                         [("warn", "no transport security and no authorization: every call is "
                                   "open")], err)


if __name__ == "__main__":
    h.main()
