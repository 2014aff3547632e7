"""The cacheroute CLI against the real sidecar: JSON answers, exit codes."""
import concurrent.futures
import json
import math
import os
import socket
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402


def rates_text(rates):
    return "".join("%d,%r\n" % (o, float(r)) for o, r in rates)


def cli_table(t):
    """The CLI's JSON RoutingTable in plan_dump's shape (int64 are strings)."""
    return {
        "n_shards": t["n_shards"],
        "admitted_rate_total": float(t["admitted_rate_total"]),
        "unadmitted_rate_total": float(t["unadmitted_rate_total"]),
        "imbalance": float(t["imbalance"]),
        "expected_load": [float(x) for x in t["expected_load"]],
        "placements": [{"owner": int(p["owner"]), "preferred_shard": p["preferred_shard"],
                        "shards": p["shards"]} for p in t["placements"]],
    }


class CliTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--n-shards", "6", "--qcap", "10", "--warm-slots-per-shard", "2",
                     "--estimator-clock", "calls", "--half-life", "5", "--replan-interval", "0",
                     "--route-by", "plan")
    H = 5.0

    def cli(self, *args, rc=0, **kw):
        return self.cli_at(self.sidecar, *args, rc=rc, **kw)

    def cli_at(self, sc, *args, rc=0, **kw):
        p = h.run_cli("--target", sc.target, *args, **kw)
        self.assertEqual(p.returncode, rc, "cacheroute %s: stderr %r" % (args, p.stderr))
        if rc == 0:
            self.assertEqual(p.stderr, "")
            return json.loads(p.stdout)
        self.assertEqual(p.stdout, "")
        self.assertTrue(p.stderr.startswith("cacheroute: "), p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        return p.stderr

    def test_plan_from_file_and_stdin(self):
        rates = [(1, 10.0), (2, 80.0), (-3, 0.0), (4, 33.3), (2**63 - 1, 12.5)]
        text = "# owner,rate\n\n" + rates_text(rates)
        with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        # No config flag: the sidecar's own config (6, 10, 2).
        a = self.cli("plan", "--file", f.name)
        b = self.cli("plan", stdin=text)
        c = self.cli("plan", "--file", "-", stdin=text)
        self.assertEqual(a, b)
        self.assertEqual(a, c)
        self.assertEqual(h.bits(cli_table(a["table"])), h.bits(h.plan_dump(6, 10, 2, rates)))
        self.assertEqual(a["table"]["generation"], "0")
        self.assertIsInstance(a["table"]["placements"][0]["owner"], str)
        # Config flags: each one given replaces the sidecar's value, the ones
        # not given keep the sidecar's (6, 10, 2), not the CLI's idea of a
        # default (only the given fields go on the wire).
        a = self.cli("plan", "--n-shards", "4", stdin=text)
        self.assertEqual(h.bits(cli_table(a["table"])), h.bits(h.plan_dump(4, 10, 2, rates)))
        a = self.cli("plan", "--qcap", "5", "--warm-slots-per-shard", "1.5", stdin=text)
        self.assertEqual(h.bits(cli_table(a["table"])), h.bits(h.plan_dump(6, 5, 1.5, rates)))
        # The seed example, values checked as numbers.
        a = self.cli("plan", "--n-shards", "4", "--qcap", "50", "--warm-slots-per-shard", "200",
                     stdin="1,10\n2,80\n")["table"]
        self.assertEqual(a["expected_load"], [40.0, 40.0, 10.0, 0.0])
        self.assertEqual([(p["owner"], p["shards"], p["preferred_shard"])
                          for p in a["placements"]], [("2", [0, 1], 0), ("1", [2], 2)])
        self.assertEqual(a["imbalance"], 40.0 / 22.5)

    def test_plan_install_and_from_estimator(self):
        sc = self.start_sidecar("--estimator-clock", "calls", "--half-life", "5",
                                "--replan-interval", "0", "--n-shards", "3", "--route-by", "plan")

        def cli(*args, **kw):
            p = h.run_cli("--target", sc.target, *args, **kw)
            self.assertEqual(p.returncode, 0, p.stderr)
            return json.loads(p.stdout)

        t = cli("plan", "--install", stdin="5,1\n6,2\n")["table"]
        self.assertEqual(t["generation"], "1")
        r = cli("record", "6", "7")
        self.assertEqual(r["table_generation"], "1")
        self.assertEqual([x["admitted"] for x in r["routes"]], [True, False])
        self.assertEqual(r["routes"][1]["preferred_shard"], h.fallback_shard(7, 3))
        cli("record", "--omit-routes", "7", "7", "8")
        t = cli("plan", "--from-estimator")["table"]
        self.assertEqual(t["generation"], "0")
        snapshot = [(6, 1.0), (7, h.calls_rate_exact(3, 5.0)), (8, 1.0)]
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(3, 50, 200, snapshot)))
        t = cli("plan", "--from-estimator", "--install", "--n-shards", "2")["table"]
        self.assertEqual(t["generation"], "2")
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(2, 50, 200, snapshot)))
        sc.assert_clean_exit(self)

    def test_record_rates_forget(self):
        r = self.cli("record", "--", "-5", "7", "-5", str(2**63 - 1), str(-2**63))
        self.assertEqual(r["recorded"], 5)
        self.assertEqual(r["table_generation"], "0")
        want = [("-5", 1.0), ("7", 1.0), ("-5", h.calls_rate_exact(2, self.H)),
                (str(2**63 - 1), 1.0), (str(-2**63), 1.0)]
        self.assertEqual([(x["owner"], x["rate"]) for x in r["routes"]], want)
        self.assertEqual([x["preferred_shard"] for x in r["routes"]],
                         [h.fallback_shard(int(o), 6) for o, _ in want])
        self.assertEqual([x["admitted"] for x in r["routes"]], [False] * 5)
        r = self.cli("record", "--omit-routes", "7")
        self.assertEqual((r["routes"], r["recorded"]), ([], 1))
        r = self.cli("rates", "--", "7", "-5", "123456")
        self.assertEqual([(x["owner"], x["rate"]) for x in r["rates"]],
                         [("7", h.calls_rate_exact(2, self.H)), ("-5", h.calls_rate_exact(2, self.H)),
                          ("123456", 0.0)])
        tracked = int(r["tracked_owners"])
        self.assertGreaterEqual(tracked, 4)
        r = self.cli("rates")
        owners = [int(x["owner"]) for x in r["rates"]]
        self.assertEqual(owners, sorted(owners))
        self.assertTrue({-5, 7, 2**63 - 1, -2**63} <= set(owners))
        self.assertEqual(r["tracked_owners"], str(len(owners)))
        r = self.cli("forget", "--", "-5", "424242")
        self.assertEqual(r, {"forgotten": 1})
        r = self.cli("rates", "--", "-5")
        self.assertEqual(r["rates"], [{"owner": "-5", "rate": 0.0}])

    def test_endpoints_drain_undrain(self):
        """The endpoint set over the CLI (a sidecar of its own: a set changes
        every route): none at first; then, set by SetEndpoints, listed,
        drained and undrained by id; an unknown id exits 1 with the
        sidecar's words, a missing one exits 2."""
        sc = self.start_sidecar()
        none = self.cli_at(sc, "endpoints")  # no set: version 0, nothing listed
        self.assertEqual((none["version"], none["endpoints"]), ("0", []))
        sc.stub().SetEndpoints(P.cr.SetEndpointsRequest(endpoints=[
            P.cr.Endpoint(id="a", address="h:1"), P.cr.Endpoint(id="b", address="h:2")]),
            timeout=h.RPC_TIMEOUT)
        listed = self.cli_at(sc, "endpoints")
        self.assertEqual([(e["shard"], e["id"], e["state"]) for e in listed["endpoints"]],
                         [(0, "a", "active"), (1, "b", "active")])
        drained = self.cli_at(sc, "drain", "b")
        self.assertEqual(drained["change"]["drained"], 1)
        self.assertEqual([e["state"] for e in drained["endpoints"]], ["active", "draining"])
        self.assertEqual([e["state"] for e in self.cli_at(sc, "undrain", "b")["endpoints"]],
                         ["active", "active"])
        self.assertIn('endpoint "zz" is not in the set', self.cli_at(sc, "drain", "zz", rc=1))
        self.assertIn("drain needs exactly one endpoint ID", self.cli_at(sc, "drain", rc=2))
        sc.assert_clean_exit(self)

    def test_health(self):
        r = self.cli("health")
        self.assertEqual(r, {"status": "SERVING"})
        r = self.cli("health", "--service", "cacheroute.v1.CacheRoute")
        self.assertEqual(r, {"status": "SERVING"})
        err = self.cli("health", "--service", "nope", rc=1)
        self.assertIn("NOT_FOUND", err)
        self.assertIn("nope", err)

    def test_grpc_errors_exit_1(self):
        err = self.cli("plan", rc=1, stdin="1,1\n2,-1\n")
        self.assertEqual(err, "cacheroute: INVALID_ARGUMENT: rates[1].rate must be finite and "
                              ">= 0, got -1\n")
        err = self.cli("plan", rc=1, stdin="1,nan\n")
        self.assertIn("rates[0].rate must be finite and >= 0, got nan", err)
        err = self.cli("plan", rc=1, stdin="7,1\n7,2\n")
        self.assertIn("rates[1].owner 7 duplicates rates[0].owner", err)
        err = self.cli("plan", "--n-shards", "0", rc=1, stdin="1,1\n")
        self.assertIn("config.n_shards must be in 1..65536, got 0", err)
        err = self.cli("plan", "--qcap", "-3", rc=1, stdin="1,1\n")
        self.assertIn("config.qcap must be finite and > 0, got -3", err)
        err = self.cli("plan", rc=1, stdin="")  # no rates at all
        self.assertIn("INVALID_ARGUMENT", err)

    def test_usage_errors_exit_2(self):
        cases = [
            (), ("bogus",), ("record",), ("forget",), ("record", "abc"), ("record", "1.5"),
            ("rates", "99999999999999999999"), ("plan", "extra"), ("health", "extra"),
            ("--timeout", "0", "rates"), ("--timeout", "-1", "rates"),
            ("--timeout", "abc", "rates"), ("--nope", "rates"), ("plan", "--qcap", "abc"),
            ("plan", "--file", "/nonexistent/rates.csv"),
        ]
        for args in cases:
            with self.subTest(args=args):
                p = h.run_cli("--target", self.sidecar.target, *args, stdin="")
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertTrue(p.stderr.strip(), "no message")
        p = h.run_cli("--target", self.sidecar.target, "plan", stdin="1,10\nnot a line\n")
        self.assertEqual(p.returncode, 2)
        self.assertIn("line 2", p.stderr)
        p = h.run_cli("--help")
        self.assertEqual(p.returncode, 0)
        for word in ("plan", "record", "rates", "forget", "health", "--target", "--timeout"):
            self.assertIn(word, p.stdout)

    def test_long_comment_line(self):
        # BUG (reported): lines are read with fgets into 256 bytes, so a
        # '#' comment longer than that is split and its tail parsed as a
        # rate line: "line 2: expected 'owner,rate', got '0000...'", exit 2.
        text = "# " + "0" * 300 + "\n1,10\n2,80\n"
        a = self.cli("plan", "--n-shards", "4", stdin=text)
        self.assertEqual([p["owner"] for p in a["table"]["placements"]], ["2", "1"])

    def test_huge_timeout(self):
        # BUG (reported): --timeout accepts any finite number > 0, but
        # client/call.c converts timeout * 1e3 to int64 without a bound: from
        # ~9.2e15 s on that is undefined behaviour (UBSan: "1e+303 is outside
        # the range of representable values of type 'long'"), and on x86 the
        # deadline lands in the past: DEADLINE_EXCEEDED at once, exit 1.
        for t in ("1e300", "1e16"):
            with self.subTest(timeout=t):
                p = h.run_cli("--target", self.sidecar.target, "--timeout", t, "health")
                self.assertNotIn("runtime error", p.stderr)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(json.loads(p.stdout), {"status": "SERVING"})
        p = h.run_cli("--target", self.sidecar.target, "--timeout", "1e6", "health")
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_target_from_environment(self):
        p = h.run_cli("rates", "--", "-5", env={"CACHEROUTE_TARGET": self.sidecar.target})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout)["rates"][0]["owner"], "-5")
        # --target wins over the variable.
        p = h.run_cli("--target", self.sidecar.target, "health",
                      env={"CACHEROUTE_TARGET": "127.0.0.1:%d" % h.free_port()})
        self.assertEqual(p.returncode, 0, p.stderr)


class CliPartialConfigTest(h.SidecarTestCase):
    """Only the config flags given go over the wire: against a sidecar with
    --n-shards 16, `plan --qcap 30` must plan 16 shards (it used to send the
    CLI's own 8 and 200 for the flags not given)."""
    SIDECAR_FLAGS = ("--n-shards", "16", "--replan-interval", "0")
    RATE_SETS = [
        [(1, 100.0), (2, 65.0), (3, 29.0), (4, 240.0), (5, 0.0), (6, 30.0), (7, 30.5)],
        [(o, float(7 * o % 97)) for o in range(-20, 40)],
        [(2**63 - 1, 1000.0), (-2**63, 12.0), (42, 90.0)],
    ]

    def cli(self, *args, sidecar=None, **kw):
        p = h.run_cli("--target", (sidecar or self.sidecar).target, *args, **kw)
        self.assertEqual(p.returncode, 0, "cacheroute %s: stderr %r" % (args, p.stderr))
        self.assertEqual(p.stderr, "")
        return json.loads(p.stdout)["table"]

    def test_qcap_alone_keeps_the_sidecars_shards_and_slots(self):
        for rates in self.RATE_SETS:
            with self.subTest(rates=rates[:3]):
                t = self.cli("plan", "--qcap", "30", stdin=rates_text(rates))
                self.assertEqual(t["n_shards"], 16)
                self.assertEqual(len(t["expected_load"]), 16)
                # kb from the given qcap: min(R, max(1, ceil(rate / 30))).
                kb = {str(o): min(16, max(1, math.ceil(r / 30.0))) for o, r in rates if r}
                self.assertEqual({p["owner"]: len(p["shards"]) for p in t["placements"]}, kb)
                # W is the sidecar's 200 (nothing left out at this budget).
                self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(16, 30, 200, rates)))

    def test_n_shards_alone_keeps_the_sidecars_qcap_and_slots(self):
        rates = self.RATE_SETS[0]
        t = self.cli("plan", "--n-shards", "4", stdin=rates_text(rates))
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(4, 50, 200, rates)))
        # The same against a sidecar whose qcap and W are not the defaults: a
        # 1-slot-per-shard budget of 4 slots, kb from qcap 20.
        sc = self.start_sidecar("--n-shards", "16", "--qcap", "20", "--warm-slots-per-shard", "1",
                                "--replan-interval", "0")
        t = self.cli("plan", "--n-shards", "4", stdin=rates_text(rates), sidecar=sc)
        self.assertEqual(t["n_shards"], 4)
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(4, 20, 1, rates)))
        self.assertGreater(float(t["unadmitted_rate_total"]), 0)
        # No flag at all: the sidecar's own config throughout.
        t = self.cli("plan", stdin=rates_text(rates), sidecar=sc)
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(16, 20, 1, rates)))
        sc.assert_clean_exit(self)

    def test_from_estimator_with_one_flag(self):
        sc = self.start_sidecar("--n-shards", "16", "--estimator-clock", "calls",
                                "--half-life", "5", "--replan-interval", "0")
        self.assertEqual(h.run_cli("--target", sc.target, "record", "--omit-routes",
                                   "1", "1", "2").returncode, 0)
        snapshot = [(1, h.calls_rate_exact(2, 5.0)), (2, 1.0)]
        t = self.cli("plan", "--from-estimator", "--qcap", "0.5", sidecar=sc)
        self.assertEqual(h.bits(cli_table(t)), h.bits(h.plan_dump(16, 0.5, 200, snapshot)))
        sc.assert_clean_exit(self)


class CliDeadTargetTest(h.SidecarTestCase):
    SHARED = False

    def test_refused(self):
        port = h.free_port()
        for cmd in (["rates"], ["health"], ["record", "1"]):
            t0 = time.monotonic()
            p = h.run_cli("--target", "127.0.0.1:%d" % port, "--timeout", "2", *cmd, timeout=30)
            took = time.monotonic() - t0
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertIn("UNAVAILABLE", p.stderr)
            self.assertEqual(p.stdout, "")
            self.assertLess(took, 2 + 5, "exit took %.1fs with --timeout 2" % took)

    def test_black_hole_honours_timeout(self):
        # A listener that never speaks HTTP/2: only the deadline ends the call.
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        self.addCleanup(s.close)
        t0 = time.monotonic()
        p = h.run_cli("--target", "127.0.0.1:%d" % s.getsockname()[1], "--timeout", "1",
                      "rates", timeout=30)
        took = time.monotonic() - t0
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("DEADLINE_EXCEEDED", p.stderr)
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 1 + 5, "exit took %.1fs with --timeout 1" % took)

    def test_health_not_serving_exits_1(self):
        # A stand-in health server answering NOT_SERVING (the sidecar only
        # says so while it shuts down, when it also stops taking calls).
        status = {"": P.health.HealthCheckResponse.NOT_SERVING,
                  "x": P.health.HealthCheckResponse.SERVING}

        def check(req, ctx):
            return P.health.HealthCheckResponse(status=status[req.service])

        server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            "grpc.health.v1.Health", {"Check": grpc.unary_unary_rpc_method_handler(
                check, request_deserializer=P.health.HealthCheckRequest.FromString,
                response_serializer=P.health.HealthCheckResponse.SerializeToString)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        self.addCleanup(server.stop, None)
        p = h.run_cli("--target", "127.0.0.1:%d" % port, "health")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(json.loads(p.stdout), {"status": "NOT_SERVING"})
        p = h.run_cli("--target", "127.0.0.1:%d" % port, "health", "--service", "x")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(json.loads(p.stdout), {"status": "SERVING"})


if __name__ == "__main__":
    h.main()
