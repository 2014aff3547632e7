"""The closed loop over the wire: ReportOutcome, GetDecision, WatchDecisions
and GetStats against the real sidecar, with python3-grpcio and the CLI:
measured vs predicted per term, live receipts (a slow watcher is told what it
lost and never slows a decision), served-token counters on /metrics, every
bad input refused whole, and receipts bounded by --receipts."""
import json
import math
import os
import signal
import subprocess
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
NOT_FOUND = grpc.StatusCode.NOT_FOUND
TEXT, KV = 1, 2
TERMS = ("queue_wait", "prefill", "transfer", "load", "total")
FIELD_OF = {"queue_wait": "queue_wait_ms", "prefill": "prefill_ms", "transfer": "transfer_ms",
            "load": "load_ms", "total": "total_ms"}
# A fixed cost model (as in test_injection) and 4 shards.
# The suites' reservations stack past the default 600 s horizon, and their
# outcomes come long after: neither bound is what they test.
FLAGS = ("--prefill-coeffs", "10,0.1,2e-6", "--kv-bytes-per-token", "131072",
         "--kv-source", "fast=100,0.5", "--decision-margin-ms", "100", "--n-shards", "4",
         "--replan-interval", "0", "--reservation-horizon-s", "86400",
         "--reservation-confirm-s", "0", "--route-by", "plan")


def select(stub, rid, p=2000, k=8000, cached=8000, wait=0.0, dry=False):
    req = P.cr.SelectInjectionRequest(request_id=rid, prompt_tokens=p, knowledge_tokens=k,
                                      dry_run=dry)
    if cached:
        req.sources.add(name="fast", cached_tokens=cached)
    if wait is not None:
        req.queue_wait_ms = wait
    return stub.SelectInjection(req, timeout=h.RPC_TIMEOUT)


def report(stub, *outcomes):
    return stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=list(outcomes)),
                              timeout=h.RPC_TIMEOUT)


def stats(stub):
    return stub.GetStats(P.cr.GetStatsRequest(), timeout=h.RPC_TIMEOUT)


def scrape(port):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        body = r.read().decode()
    out = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def served_key(cache, admitted):
    return 'cacheroute_served_prompt_tokens_total{cache="%s",admitted="%s"}' % (cache, admitted)


def counters(s):
    """GetStats without its rolling figures (decayed ratios may round
    differently from one reading to the next)."""
    return (
        [(x.hit_tokens, x.miss_tokens) for x in (s.served.all, s.served.admitted,
                                                 s.served.not_admitted)],
        [(x.shard, x.outcomes, x.prompt_tokens, x.cached_tokens) for x in s.served.shards],
        [(e.path, e.term, e.samples) for e in s.errors],
        [(r.path, r.count, r.ms) for r in s.regret],
        [(c.gpu, c.samples) for c in s.calibration],
        s.receipts, s.outcomes)


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS for %d" % pid)


class DecisionTest(h.SidecarTestCase):
    SIDECAR_FLAGS = FLAGS

    def decision(self, rid):
        return self.stub.GetDecision(P.cr.GetDecisionRequest(request_id=rid),
                                     timeout=h.RPC_TIMEOUT)

    def assert_errors(self, receipt, breakdown, measured):
        """receipt.errors: exactly the measured terms, in term order, each
        against the used path's breakdown."""
        self.assertEqual([e.term for e in receipt.errors],
                         [t for t in TERMS if t in measured])
        for e in receipt.errors:
            predicted = getattr(breakdown, FIELD_OF[e.term])
            self.assertEqual(e.measured_ms, measured[e.term], e.term)
            self.assertAlmostEqual(e.predicted_ms, predicted, delta=1e-9 * max(1, predicted))
            self.assertAlmostEqual(e.error_ms, measured[e.term] - predicted, delta=1e-9 * max(
                1, predicted))

    def test_kv_decision_measured_vs_predicted(self):
        r = select(self.stub, "kv-1")
        self.assertEqual(r.mode, KV, r)
        d = self.decision("kv-1")
        profile = self.stub.GetNodeProfile(P.cr.GetNodeProfileRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(d.request_id, "kv-1")
        self.assertGreater(d.seq, 0)
        self.assertEqual((d.mode, d.reason, d.source, d.cached_tokens, d.saving_ms),
                         (r.mode, r.reason, r.source, 8000, r.saving_ms))
        self.assertEqual(d.text, r.text)
        self.assertEqual(d.kv, r.kv)
        self.assertEqual((d.request.prompt_tokens, d.request.knowledge_tokens, d.request.gpu,
                          d.request.n_sources), (2000, 8000, 0, 1))
        self.assertEqual(d.request.WhichOneof("queue"), "queue_wait_ms")
        self.assertEqual(d.request.queue_wait_ms, 0.0)
        self.assertEqual(d.cost_model, profile.cost_model)
        self.assertEqual((d.cost_model.prefill_fixed_ms, d.cost_model.prefill_ms_per_token,
                          d.cost_model.prefill_ms_per_token2), (10.0, 0.1, 2e-6))
        self.assertTrue(d.cost_model.source.startswith("prefill=fitted "), d.cost_model.source)
        self.assertEqual((d.outcomes, len(d.errors), d.used, d.lost), (0, 0, 0, 0))

        measured = {"queue_wait": 3.0, "prefill": r.kv.prefill_ms + 5, "transfer":
                    r.kv.transfer_ms * 2, "load": r.kv.load_ms + 1.5,
                    "total": r.kv.total_ms + 20}
        a = report(self.stub, P.cr.Outcome(
            request_id="kv-1", mode=KV, queue_wait_ms=measured["queue_wait"],
            prefill_ms=measured["prefill"], prefilled_from=8000, prefilled_to=10000,
            transfer_ms=measured["transfer"], load_ms=measured["load"],
            ttft_ms=measured["total"], prompt_tokens=10000, cached_tokens=8000))
        self.assertEqual((a.accepted, a.matched, a.rejected, a.first_rejection), (1, 1, 0, ""))
        d = self.decision("kv-1")
        self.assertEqual((d.outcomes, d.used), (1, KV))
        self.assertGreaterEqual(d.reported_at_s, d.decided_at_s)
        self.assert_errors(d, r.kv, measured)
        # The latest outcome wins; fields not given are not terms.
        report(self.stub, P.cr.Outcome(request_id="kv-1", ttft_ms=1.0))
        d = self.decision("kv-1")
        self.assertEqual(d.outcomes, 2)
        self.assert_errors(d, r.kv, {"total": 1.0})

    def test_text_decision_and_the_path_used(self):
        r = select(self.stub, "text-1", cached=0, wait=None)
        self.assertEqual((r.mode, r.reason), (TEXT, "no_kv_available"))
        d = self.decision("text-1")
        self.assertFalse(d.HasField("kv"))
        self.assertEqual(d.request.WhichOneof("queue"), None)
        measured = {"queue_wait": 0.0, "prefill": 2000.0, "total": 2100.0}
        # Transfer and load are not terms of the text path.
        report(self.stub, P.cr.Outcome(request_id="text-1", queue_wait_ms=0.0, prefill_ms=2000,
                                       transfer_ms=5, load_ms=5, ttft_ms=2100))
        d = self.decision("text-1")
        self.assertEqual(d.used, TEXT)
        self.assert_errors(d, r.text, measured)
        # A KV decision the engine served as text compares with text.
        r = select(self.stub, "kv-as-text")
        self.assertEqual(r.mode, KV)
        report(self.stub, P.cr.Outcome(request_id="kv-as-text", mode=TEXT, ttft_ms=900))
        d = self.decision("kv-as-text")
        self.assertEqual(d.used, TEXT)
        self.assert_errors(d, r.text, {"total": 900.0})

    def test_not_found(self):
        select(self.stub, "dry-1", dry=True)
        select(self.stub, "")
        for rid in ("never-decided", "dry-1", "", "x" * 300):
            with self.subTest(rid=rid[:20]):
                e = self.assertRpcError(NOT_FOUND, self.stub.GetDecision,
                                        P.cr.GetDecisionRequest(request_id=rid))
                self.assertIn("no receipt for request_id '%s" % rid[:128], e.details())

    def test_counts_unmatched_and_rejected(self):
        a = report(self.stub,
                   P.cr.Outcome(request_id="nobody", prompt_tokens=10, cached_tokens=3),
                   P.cr.Outcome(request_id="nobody"),
                   P.cr.Outcome())
        self.assertEqual((a.accepted, a.matched, a.rejected), (1, 0, 2))
        self.assertTrue(a.first_rejection.startswith("outcomes[1]: "), a.first_rejection)
        a = report(self.stub)
        self.assertEqual((a.accepted, a.matched, a.rejected), (0, 0, 0))

    def test_bad_input_changes_nothing(self):
        r = select(self.stub, "bad-1")
        good = P.cr.Outcome(request_id="bad-1", prompt_tokens=100, cached_tokens=50, ttft_ms=5)
        before = counters(stats(self.stub))
        profile = self.stub.GetNodeProfile(P.cr.GetNodeProfileRequest(), timeout=h.RPC_TIMEOUT)
        gpus = max(1, len(profile.gpus))
        cases = [
            ({"queue_wait_ms": -1.0}, "queue_wait_ms must be finite and >= 0, got -1"),
            ({"prefill_ms": math.nan}, "prefill_ms must be finite and >= 0, got nan"),
            ({"transfer_ms": math.inf}, "transfer_ms must be finite and >= 0, got inf"),
            ({"load_ms": -math.inf}, "load_ms must be finite and >= 0, got -inf"),
            ({"ttft_ms": -0.5}, "ttft_ms must be finite and >= 0, got -0.5"),
            ({"prompt_tokens": 100, "cached_tokens": 120},
             "cached_tokens must be <= prompt_tokens (100), got 120"),
            ({"prefilled_from": 10, "prefilled_to": 5},
             "prefilled_from must be <= prefilled_to (5), got 10"),
            ({"mode": 7}, "mode must be 0 (unset), 1 (text) or 2 (kv_cache), got 7"),
            ({"shard": 4}, "shard must be in 0..3, got 4"),
            ({"gpu": gpus}, "gpu must be in 0..%d, got %d" % (gpus - 1, gpus)),
            ({"request_id": "r" * 129}, "request_id must be at most 128 bytes, got 129"),
            ({"source": "s" * 129}, "source must be at most 128 bytes, got 129"),
        ]
        for fields, message in cases:
            with self.subTest(fields=str(fields)[:60]):
                bad = P.cr.Outcome(**fields)
                self.assertRpcError(INVALID, self.stub.ReportOutcome,
                                    P.cr.ReportOutcomeRequest(outcomes=[good, good, bad]),
                                    details="outcomes[2]." + message)
        big = P.cr.ReportOutcomeRequest(outcomes=[good] * 10001)
        self.assertRpcError(INVALID, self.stub.ReportOutcome, big,
                            details="outcomes must hold at most 10000 entries, got 10001")
        self.assertRpcError(INVALID, h.raw_call, self.sidecar.channel(),
                            h.SERVICE + "ReportOutcome", b"\x0a\x05\x01",
                            details="malformed cacheroute.v1.ReportOutcomeRequest message "
                                    "(3 bytes)")
        # Nothing of any of those batches was applied.
        self.assertEqual(counters(stats(self.stub)), before)
        self.assertEqual(self.decision("bad-1").outcomes, 0)
        self.assertEqual(r.request_id, "bad-1")


    def test_malformed_requests(self):
        ch = self.sidecar.channel()
        for m in ("GetDecision", "GetStats"):
            self.assertRpcError(INVALID, h.raw_call, ch, h.SERVICE + m, b"\xff\xff\xff")
        it = ch.unary_stream(h.SERVICE + "WatchDecisions")(b"\xff\xff\xff",
                                                           timeout=h.RPC_TIMEOUT)
        with self.assertRaises(grpc.RpcError) as e:
            next(it)
        self.assertEqual(e.exception.code(), INVALID)
        self.assertEqual(e.exception.details(),
                         "malformed cacheroute.v1.WatchDecisionsRequest message (3 bytes)")


class MetricsTest(h.SidecarTestCase):
    SHARED = False

    def test_served_tokens_move_exactly(self):
        sc = self.start_sidecar(*FLAGS, "--metrics-listen", "127.0.0.1:0", metrics=False)
        stub, port = sc.stub(), sc.config["metrics_port"]
        stub.Plan(h.plan_request(rates=[(1, 10.0)], install=True), timeout=h.RPC_TIMEOUT)
        m0, s0 = scrape(port), stats(stub)
        self.assertEqual(m0["cacheroute_decision_watchers"], 0)
        a = report(stub,
                   P.cr.Outcome(owner=1, prompt_tokens=1000, cached_tokens=600),  # admitted
                   P.cr.Outcome(owner=2, prompt_tokens=500, cached_tokens=100),
                   P.cr.Outcome(prompt_tokens=300, cached_tokens=0, shard=3),
                   P.cr.Outcome(prompt_tokens=7))  # no cached_tokens: not served tokens
        self.assertEqual((a.accepted, a.rejected), (3, 1))
        m1, s1 = scrape(port), stats(stub)
        delta = {k: m1[k] - m0[k] for k in
                 (served_key(c, a) for c in ("hit", "miss") for a in ("true", "false"))}
        self.assertEqual(delta, {served_key("hit", "true"): 600, served_key("miss", "true"): 400,
                                 served_key("hit", "false"): 100,
                                 served_key("miss", "false"): 700})
        self.assertEqual((s1.served.admitted.hit_tokens, s1.served.admitted.miss_tokens),
                         (600, 400))
        self.assertEqual((s1.served.not_admitted.hit_tokens, s1.served.not_admitted.miss_tokens),
                         (100, 700))
        self.assertEqual((s1.served.all.hit_tokens, s1.served.all.miss_tokens), (700, 1100))
        self.assertAlmostEqual(s1.served.all.total_ratio, 700 / 1800)
        # Shards: the one given, else the owner's route (owner 1 is admitted
        # alone, on shard 0; owner 2 falls back), listed up to the highest.
        self.assertEqual(len(s0.served.shards), 0)
        self.assertEqual([x.shard for x in s1.served.shards], [0, 1, 2, 3])
        tokens, outcomes = [0] * 4, [0] * 4
        for shard, n in ((0, 1000), (h.fallback_shard(2, 4), 500), (3, 300)):
            tokens[shard] += n
            outcomes[shard] += 1
        self.assertEqual([x.prompt_tokens for x in s1.served.shards], tokens)
        self.assertEqual([x.outcomes for x in s1.served.shards], outcomes)
        # The same per shard on /metrics, tokens split by the cache.
        hits = [0] * 4
        for shard, n in ((0, 600), (h.fallback_shard(2, 4), 100)):
            hits[shard] += n
        for shard in range(4):
            key = 'cacheroute_shard_served_prompt_tokens_total{shard="%d",cache="%s"}'
            self.assertEqual((m1[key % (shard, "hit")], m1[key % (shard, "miss")]),
                             (hits[shard], tokens[shard] - hits[shard]), shard)
            self.assertAlmostEqual(m1['cacheroute_shard_served_hit_ratio{shard="%d"}' % shard],
                                   s1.served.shards[shard].rolling_ratio, places=6)
        self.assertEqual(m1['cacheroute_outcomes_total{result="rejected"}'], 1)
        self.assertEqual(m1['cacheroute_outcomes_total{result="unmatched"}'], 3)

        # A matched outcome moves the per-term error and the regret figures.
        r = select(stub, "m-1")
        report(stub, P.cr.Outcome(request_id="m-1", ttft_ms=r.kv.total_ms + 10_000))
        m2, s2 = scrape(port), stats(stub)
        err = {(e.path, e.term): e for e in s2.errors}
        self.assertEqual(sorted(err), sorted((p, t) for p in ("text", "kv") for t in TERMS))
        self.assertEqual(err["kv", "total"].samples, 1)
        self.assertAlmostEqual(err["kv", "total"].bias_ms, 10_000)
        self.assertAlmostEqual(
            m2['cacheroute_prediction_error_ratio{path="kv",term="total"}'],
            err["kv", "total"].ape)
        self.assertEqual(m2['cacheroute_prediction_samples_total{path="kv",term="total"}'], 1)
        self.assertEqual([x.path for x in s2.regret], ["text", "kv"])
        self.assertEqual(s2.regret[1].count, 1)
        self.assertEqual(m2['cacheroute_injection_regret_total{path="kv"}'], 1)
        self.assertAlmostEqual(m2['cacheroute_injection_regret_seconds_total{path="kv"}'],
                               s2.regret[1].ms / 1e3)
        self.assertEqual(m2['cacheroute_outcomes_total{result="matched"}'], 1)
        self.assertEqual(m2["cacheroute_decision_receipts"], 1)
        self.assertEqual(s2.receipts.kept, 1)
        self.assertEqual(len(s2.calibration), 1)
        self.assertEqual(s2.calibration[0].gpu, 0)
        sc.assert_clean_exit(self)


def watch_stub(sc):
    """A stub on a channel of its own that reads no faster than asked (no BDP
    probing, so the receive window stays small)."""
    return sc.stub(sc.channel(**{"grpc.http2.bdp_probe": 0}))


def next_receipt(it, timeout=h.RPC_TIMEOUT):
    """The stream's next message (or its error, raised), or a failure after
    timeout."""
    box = []

    def take():
        try:
            box.append((next(it), None))
        except Exception as e:  # noqa: BLE001 (re-raised below)
            box.append((None, e))

    t = threading.Thread(target=take, daemon=True)
    t.start()
    t.join(timeout)
    if not box:
        raise AssertionError("no receipt within %.0fs" % timeout)
    if box[0][1] is not None:
        raise box[0][1]
    return box[0][0]


class WatchTest(h.SidecarTestCase):
    SHARED = False

    def test_watch_sees_decisions_and_outcomes(self):
        sc = self.start_sidecar(*FLAGS)
        stub = sc.stub()
        call = stub.WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=120)
        call.initial_metadata()  # sent once the watch is listed
        r1 = select(stub, "w-1")
        select(stub, "w-2", cached=0)
        select(stub, "w-dry", dry=True)  # no receipt, nothing streamed
        report(stub, P.cr.Outcome(request_id="w-1", ttft_ms=r1.kv.total_ms + 1))
        got = [next_receipt(call) for _ in range(3)]
        self.assertEqual([(g.request_id, g.outcomes, g.lost) for g in got],
                         [("w-1", 0, 0), ("w-2", 0, 0), ("w-1", 1, 0)])
        self.assertLess(got[0].seq, got[1].seq)
        self.assertEqual(got[2].seq, got[0].seq)
        self.assertEqual([e.term for e in got[2].errors], ["total"])
        self.assertEqual(got[0].kv, r1.kv)
        call.cancel()
        sc.assert_clean_exit(self)

    def test_cli_watch_count_and_ctrl_c(self):
        sc = self.start_sidecar(*FLAGS, "--metrics-listen", "127.0.0.1:0", metrics=False)
        stub, port = sc.stub(), sc.config["metrics_port"]

        def watchers(n):
            return lambda: scrape(port)["cacheroute_decision_watchers"] == n

        p = subprocess.Popen([h.ARGS.cli, "--target", sc.target, "watch", "--count", "3"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=h.clean_env(), universal_newlines=True)
        self.addCleanup(p.kill)
        h.poll(watchers(1), 20, what="the CLI's watch")
        r = select(stub, "c-1")
        select(stub, "c-2")
        report(stub, P.cr.Outcome(request_id="c-1", ttft_ms=r.kv.total_ms, queue_wait_ms=0))
        select(stub, "c-3")  # after the count: not printed
        out, err = p.communicate(timeout=30)
        self.assertEqual((p.returncode, err), (0, ""))
        lines = [json.loads(line) for line in out.splitlines()]
        self.assertEqual([(x["request_id"], x["outcomes"]) for x in lines],
                         [("c-1", 0), ("c-2", 0), ("c-1", 1)])
        self.assertEqual([e["term"] for e in lines[2]["errors"]], ["queue_wait", "total"])
        self.assertEqual(lines[0]["mode"], "INJECTION_MODE_KV_CACHE")
        self.assertIsInstance(lines[0]["seq"], str)  # 64-bit: a JSON string
        h.poll(watchers(0), 20, what="the watch to close")

        # Without --count: until Ctrl-C, then exit 0.
        p = subprocess.Popen([h.ARGS.cli, "--target", sc.target, "watch"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             env=h.clean_env(), universal_newlines=True)
        self.addCleanup(p.kill)
        h.poll(watchers(1), 20, what="the CLI's watch")
        select(stub, "c-4")
        self.assertEqual(json.loads(p.stdout.readline())["request_id"], "c-4")
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=10)
        self.assertEqual((p.returncode, out, err), (0, "", ""))
        h.poll(watchers(0), 20, what="the watch to close")
        sc.assert_clean_exit(self)

    def test_slow_watcher_loses_receipts_not_decisions(self):
        sc = self.start_sidecar(*FLAGS, "--metrics-listen", "127.0.0.1:0", metrics=False)
        stub, port = sc.stub(), sc.config["metrics_port"]
        n = 3000

        def decide(prefix):
            t0 = time.monotonic()
            for i in range(n):
                select(stub, "%s-%d" % (prefix, i), dry=False)
            return time.monotonic() - t0

        baseline = decide("base")  # nobody watching
        slow = watch_stub(sc).WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=300)
        slow.initial_metadata()
        watched = decide("slow")  # a watcher that reads nothing meanwhile
        # Decisions are not slowed by a watcher that does not read.
        self.assertLess(watched, 3 * baseline + 2.0, (watched, baseline))
        lost = scrape(port)["cacheroute_decision_watch_lost_total"]
        self.assertGreater(lost, 0)
        # Now read: every receipt arrived or was counted as lost, in order.
        got, told = [], 0
        while len(got) + told < n:
            g = next_receipt(slow)
            told += g.lost
            got.append(g)
        self.assertEqual(told, lost)
        self.assertGreater(sum(1 for g in got if g.lost), 0)
        seqs = [g.seq for g in got]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual(got[-1].request_id, "slow-%d" % (n - 1))
        slow.cancel()
        sc.assert_clean_exit(self)

    def test_watcher_limit_and_shutdown(self):
        sc = self.start_sidecar(*FLAGS, "--metrics-listen", "127.0.0.1:0", metrics=False)
        stub, port = sc.stub(), sc.config["metrics_port"]
        calls = [stub.WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=120)
                 for _ in range(64)]
        for c in calls:
            c.initial_metadata()
        extra = stub.WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=120)
        with self.assertRaises(grpc.RpcError) as e:
            next(extra)
        self.assertEqual(e.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertIn("at most 64 streams", e.exception.details())
        self.assertEqual(scrape(port)["cacheroute_decision_watch_refused_total"], 1)
        calls.pop().cancel()
        h.poll(lambda: scrape(port)["cacheroute_decision_watchers"] == 63, 20)
        again = stub.WatchDecisions(P.cr.WatchDecisionsRequest(), timeout=120)
        again.initial_metadata()
        select(stub, "s-1")
        self.assertEqual(next_receipt(again).request_id, "s-1")
        # Shutdown sends what is queued, then ends every watch UNAVAILABLE.
        select(stub, "s-2")
        stopper = threading.Thread(target=sc.stop, kwargs={"close_channels": False})
        stopper.start()
        self.assertEqual(next_receipt(again).request_id, "s-2")
        with self.assertRaises(grpc.RpcError) as e:
            next_receipt(again)
        self.assertEqual(e.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(e.exception.details(), "server shutting down")
        stopper.join(60)
        problem = sc.exit_problems(sc.returncode)
        self.assertIsNone(problem, problem)


class CliTest(h.SidecarTestCase):
    SIDECAR_FLAGS = FLAGS

    def cli(self, *args, rc=0, **kw):
        """The answer as JSON (rc 0), else the one line on stderr."""
        p = h.run_cli("--target", self.sidecar.target, *args, **kw)
        quiet = p.stderr if rc == 0 else p.stdout
        self.assertEqual((p.returncode, quiet), (rc, ""), p.stderr)
        if rc:
            self.assertRegex(p.stderr, "^cacheroute: [^\n]*\n$")
        return json.loads(p.stdout) if rc == 0 else p.stderr

    def test_report_decision_stats(self):
        r = select(self.stub, "cli-1")
        lines = [
            {"requestId": "cli-1", "mode": "INJECTION_MODE_KV_CACHE", "queueWaitMs": 2,
             "ttftMs": r.kv.total_ms + 3, "promptTokens": 10000, "cachedTokens": 8000},
            {},  # an empty outcome: valid, usable by nothing, so rejected
            {"request_id": "nobody", "owner": "-5", "prompt_tokens": 10, "cached_tokens": 4,
             "transfer_bytes": "18446744073709551615"},
        ]
        text = "\n".join(json.dumps(x) for x in lines) + "\n\n"
        with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
            f.write(text)
        self.addCleanup(os.unlink, f.name)
        a = self.cli("report", "--file", f.name)
        self.assertEqual((a["accepted"], a["matched"], a["rejected"]), (2, 1, 1))
        self.assertTrue(a["first_rejection"].startswith("outcomes[1]: "))
        d = self.cli("decision", "cli-1")
        self.assertEqual(d["request_id"], "cli-1")
        self.assertEqual(d["outcomes"], 1)
        self.assertEqual([(e["term"], e["measured_ms"]) for e in d["errors"]],
                         [("queue_wait", 2.0), ("total", r.kv.total_ms + 3)])
        self.assertEqual(d["used"], "INJECTION_MODE_KV_CACHE")
        s = self.cli("stats")
        self.assertGreaterEqual(int(s["served"]["all"]["hit_tokens"]), 8004)
        self.assertEqual(len(s["errors"]), 10)
        e = self.cli("decision", "nope", rc=1)
        self.assertTrue(e.startswith("cacheroute: NOT_FOUND: no receipt for request_id 'nope'"))

    def test_report_stdin_batches_and_errors(self):
        s0 = stats(self.stub)
        text = '{"promptTokens": 10, "cachedTokens": 1}\n' * 10001
        a = self.cli("report", stdin=text)  # two batches: 10,000 and 1
        self.assertEqual((a["accepted"], a["matched"], a["rejected"]), (10001, 0, 0))
        s1 = stats(self.stub)
        self.assertEqual(s1.served.all.hit_tokens - s0.served.all.hit_tokens, 10001)
        # Bad input: the line named, nothing of its batch applied.
        e = self.cli("report", stdin='{"ttftMs": 1}\n{"ttftMs": -1}\n', rc=1)
        self.assertEqual(e, "cacheroute: INVALID_ARGUMENT: outcomes[1].ttft_ms must be finite "
                            "and >= 0, got -1 (line 2)\n")
        e = self.cli("report", stdin='{"ttftMs": "NaN"}\n', rc=1)
        self.assertIn("outcomes[0].ttft_ms must be finite and >= 0, got nan (line 1)", e)
        for bad, why in (('{"nope": 1}', "unknown field nope"),
                         ('{"promptTokens": -1}', "promptTokens must be an integer in "
                                                  "0..4294967295, got -1"),
                         ('{"mode": "FAST"}', "mode must be one of the enum's value names"),
                         ("[1]", "expected a JSON object"), ("{", "not JSON")):
            with self.subTest(bad=bad):
                e = self.cli("report", stdin="\n" + bad + "\n", rc=2)
                self.assertIn("line 2: ", e)
                self.assertIn(why, e)
        self.assertEqual(counters(stats(self.stub)), counters(s1))
        self.cli("report", "extra", rc=2)
        self.cli("decision", rc=2)
        self.cli("watch", "--count", "0", rc=2)


class ReceiptBoundTest(h.SidecarTestCase):
    SHARED = False

    def test_receipts_evicted_at_the_bound_memory_flat(self):
        # Under ASan, freed memory waits in a quarantine (256 MB) that would
        # read as growth: none for this sidecar (ignored by other builds).
        asan = os.environ.get("ASAN_OPTIONS")
        sc = self.start_sidecar(*FLAGS, "--receipts", "100", env={
            "ASAN_OPTIONS": (asan + ":" if asan else "") + "quarantine_size_mb=0"})
        stub = sc.stub()
        for i in range(1000):
            select(stub, "b-%d" % i)
        s = stats(stub)
        self.assertEqual((s.receipts.kept, s.receipts.capacity, s.receipts.made,
                          s.receipts.evicted, s.receipts.replaced), (100, 100, 1000, 900, 0))
        for rid in ("b-0", "b-899"):
            self.assertRpcError(NOT_FOUND, stub.GetDecision, P.cr.GetDecisionRequest(
                request_id=rid))
        for rid in ("b-900", "b-999"):
            self.assertEqual(stub.GetDecision(P.cr.GetDecisionRequest(request_id=rid),
                                              timeout=h.RPC_TIMEOUT).request_id, rid)
        # An evicted id's outcome is no error: it counts unmatched.
        a = report(stub, P.cr.Outcome(request_id="b-0", prompt_tokens=5, cached_tokens=5),
                   P.cr.Outcome(request_id="b-999", ttft_ms=1))
        self.assertEqual((a.accepted, a.matched), (2, 1))
        select(stub, "b-999")
        self.assertEqual(stats(stub).receipts.replaced, 1)
        # Many more decisions: RSS, the count and the store's bytes stay flat,
        # and the later decisions take no longer than the earlier ones.
        bytes_at_bound = stats(stub).receipts.bytes
        rss0 = rss_kb(sc.proc.pid)
        times = []
        for rnd in range(4):
            t0 = time.monotonic()
            for i in range(2500):
                select(stub, "m-%d-%d" % (rnd, i))
            times.append(time.monotonic() - t0)
        s = stats(stub)
        self.assertEqual(s.receipts.kept, 100)
        self.assertEqual(s.receipts.bytes, bytes_at_bound)
        self.assertLess(rss_kb(sc.proc.pid) - rss0, 8 * 1024)
        self.assertLess(times[-1], 3 * times[0] + 1.0, times)
        sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
