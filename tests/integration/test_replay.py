"""cacheroute-replay, the real binary: determinism, errors, a hand-computed
replay, the cacheroute policy's routes against a real sidecar over gRPC,
the knowledge variants, and the plots.

Run as the other suites, plus the tool:

    /usr/bin/python3 test_replay.py --replay BIN --sidecar BIN --cli BIN \\
        --plan-dump BIN --proto-dir DIR
"""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
from harness import P  # noqa: E402

REPLAY = None  # the cacheroute-replay binary, taken out of argv before harness.main


def replay(*args, env=None, timeout=120):
    """Runs the tool; returns CompletedProcess with text out/err."""
    return subprocess.run([REPLAY] + [str(a) for a in args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=h.clean_env(env), timeout=timeout,
                          universal_newlines=True)


def trace_text(rows):
    """Mooncake JSON lines from (timestamp_ms, input_length, hash_ids)."""
    return "".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1,
                               "hash_ids": ids}) + "\n" for t, n, ids in rows)


def read_dump(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class ReplayTest(unittest.TestCase):
    maxDiff = None

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cr-replay-it-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def path(self, name):
        return os.path.join(self.dir, name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)

    def ok(self, *args, **kw):
        p = replay(*args, **kw)
        self.assertEqual(p.returncode, 0, "cacheroute-replay %s: %s" % (args, p.stderr))
        return p

    def bad(self, *args, contains=()):
        """Exit 2, nothing on stdout, exactly one line on stderr naming it."""
        p = replay(*args)
        self.assertEqual(p.returncode, 2, "%s: rc %d, stderr %r" % (args, p.returncode,
                                                                    p.stderr))
        self.assertEqual(p.stdout, "")
        self.assertTrue(p.stderr.startswith("cacheroute-replay: "), p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        for c in contains:
            self.assertIn(c, p.stderr)
        return p.stderr

    # ------------------------------------------------------------ determinism

    def test_same_seed_same_bytes(self):
        args = ["--generate", "--requests", "4000", "--sessions", "200", "--rate", "400",
                "--knowledge-tokens", "1500", "--shards", "8", "--scale", "0.5,1",
                "--noise", "0.2", "--replan-interval", "2", "--sweep", "--sweep-qcap", "20,60",
                "--sweep-warm-slots", "10"]
        a = self.ok(*args, "--seed", "7", "--json", self.path("a.json"))
        b = self.ok(*args, "--seed", "7", "--json", self.path("b.json"))
        c = self.ok(*args, "--seed", "8", "--json", self.path("c.json"))
        with open(self.path("a.json"), "rb") as f:
            ja = f.read()
        with open(self.path("b.json"), "rb") as f:
            jb = f.read()
        with open(self.path("c.json"), "rb") as f:
            jc = f.read()
        self.assertEqual(ja, jb)
        self.assertEqual(a.stdout, b.stdout)
        self.assertNotEqual(ja, jc)  # the seed reaches the trace and the noise
        self.assertNotEqual(a.stdout, c.stdout)
        doc = json.loads(ja)
        names = [r["policy"] for r in doc["results"]]
        # The knowledge variants join the default policies: 9 policies x 2 scales.
        self.assertEqual(len(names), 18)
        self.assertEqual(set(names), {"cacheroute", "flat-lb", "sticky", "chwbl", "least-loaded",
                                      "random", "always-text", "always-kv", "oracle"})
        self.assertEqual(len(doc["sweep"]["points"]), 2 * 1 * 3)  # margins 0, 100, 400
        best = doc["sweep"]["best"]
        for pt in doc["sweep"]["points"]:  # best: highest capacity, ties by hit ratio
            self.assertGreaterEqual((best["capacity_req_per_s"], best["hit_ratio_mean"]),
                                    (pt["capacity_req_per_s"], pt["hit_ratio_mean"]))
        by = {(r["policy"], r["scale"]): r for r in doc["results"]}
        self.assertEqual(by[("always-text", 1.0)]["kv_share"], 0.0)
        self.assertEqual(by[("always-kv", 1.0)]["kv_share"], 1.0)
        self.assertEqual(by[("flat-lb", 1.0)]["n_replans"], 0)
        self.assertGreater(by[("cacheroute", 1.0)]["n_replans"], 0)
        self.assertEqual(doc["inputs"]["cluster"]["seed"], 7)

    def test_documents_reach_the_generator(self):
        """The shared-document flags reach the generator: the JSON's inputs
        show them (only when there are documents), owners by document are
        at most the documents, and the same flags give the same bytes."""
        base = ["--generate", "--requests", "3000", "--sessions", "100", "--rate", "300",
                "--shards", "4", "--policies", "sticky,least-loaded"]
        docs = ["--documents", "20", "--document-blocks", "4", "--document-zipf", "1.2",
                "--document-per", "request", "--owners", "document"]
        a = self.ok(*base, *docs, "--json", self.path("a.json"))
        self.ok(*base, *docs, "--json", self.path("b.json"))
        self.ok(*base, "--json", self.path("off.json"))
        with open(self.path("a.json"), "rb") as f:
            ja = f.read()
        with open(self.path("b.json"), "rb") as f:
            self.assertEqual(ja, f.read())
        gen = json.loads(ja)["inputs"]["generator"]
        self.assertEqual((gen["documents"], gen["document-blocks"], gen["document-zipf"],
                          gen["document-per"], gen["owners"]),
                         (20, 4, 1.2, "request", "document"))
        stats = json.loads(ja)["inputs"]["trace_stats"]
        self.assertLessEqual(stats["owners"], 20)
        self.assertIn("- documents: 20 x 4 blocks, Zipf 1.2, one per request; owners by "
                      "document", a.stdout)
        with open(self.path("off.json")) as f:
            off = json.load(f)
        self.assertNotIn("documents", off["inputs"]["generator"])
        self.assertGreater(off["inputs"]["trace_stats"]["owners"], 20)  # sessions
        # Documents and their blocks come together; a bad choice names the flag.
        self.bad(*base, "--documents", "20", contains=("document_blocks",))
        self.bad(*base, "--document-blocks", "4", contains=("documents",))
        self.bad(*base, "--owners", "document", contains=("owners", "documents"))
        self.bad(*base, "--documents", "20", "--document-blocks", "40",
                 contains=("max_blocks", "document_blocks"))
        self.bad(*base, "--document-per", "turn", contains=("--document-per", "turn"))

    def test_peers_run_when_named(self):
        """The six peers run when --policies names them (never by default),
        every request routed, and repeat byte for byte."""
        peers = ["llmd-scorer", "sglang-cache-aware", "dynamo-kv", "aibrix-prefix",
                 "min-ttft-exact", "round-robin"]
        args = ["--generate", "--requests", "3000", "--sessions", "100", "--rate", "300",
                "--shards", "4", "--scale", "0.5,1", "--policies", ",".join(peers)]
        self.ok(*args, "--json", self.path("a.json"), "--dump-routes", self.path("d.csv"))
        self.ok(*args, "--json", self.path("b.json"))
        with open(self.path("a.json"), "rb") as f:
            ja = f.read()
        with open(self.path("b.json"), "rb") as f:
            self.assertEqual(ja, f.read())
        doc = json.loads(ja)
        self.assertEqual([r["policy"] for r in doc["results"]], [n for n in peers for _ in "ab"])
        for r in doc["results"]:
            self.assertEqual(r["requests"], 3000)
            self.assertGreater(r["hit_ratio"], 0)
        self.assertEqual(len(read_dump(self.path("d.csv"))), len(peers) * 2 * 3000)

    # ------------------------------------------------------------ errors

    def test_malformed_trace_line_names_it(self):
        good = trace_text([(0, 600, [1, 2]), (5, 700, [1, 3])])
        line3 = '{"timestamp": 9, "input_length": 5, "output_length": 1}\n'  # no hash_ids
        path = self.write("bad.jsonl", good + line3)
        err = self.bad("--trace", path, contains=(path + ":3:", "hash_ids"))
        self.assertNotIn(":2:", err)
        path = self.write("junk.jsonl", good + "\n{not json\n")  # blank line 3 skipped
        self.bad("--trace", path, contains=(path + ":4:",))
        self.bad("--trace", self.path("missing.jsonl"), contains=("missing.jsonl",))

    def test_bad_flags_name_flag_and_value(self):
        t = self.write("t.jsonl", trace_text([(0, 600, [1, 2])]))
        self.bad("--trace", t, "--scale", "1,0", contains=("--scale", '"1,0"'))
        self.bad("--trace", t, "--policies", "sticky,nope", contains=("--policies", "nope"))
        self.bad("--trace", t, "--true-prefill", "1,2", contains=("--true-prefill", '"1,2"'))
        self.bad("--trace", t, "--owner-key", "suffix:2", contains=("--owner-key", "suffix:2"))
        self.bad("--trace", t, "--shards", "0", contains=("--shards", '"0"'))
        self.bad("--trace", t, "--frobnicate", "1", contains=("--frobnicate",))
        self.bad("--trace", t, "--slo-p99-ms", contains=("--slo-p99-ms", "missing value"))
        self.bad("--generate", "--trace", t, contains=("--trace", "--generate"))
        self.bad("--generate", "--gini", "1.5", contains=("--gini", '"1.5"'))
        # The sidecar's own rows, with the sidecar's own messages.
        self.bad("--trace", t, "--qcap", "0", contains=('--qcap must be finite and > 0, got "0"',))
        self.bad("--trace", t, "--estimator-clock", "hours",
                 contains=("--estimator-clock", "hours"))
        self.bad("--trace", t, "--decision-margin-ms", "-1", contains=("--decision-margin-ms",))

    # ------------------------------------------------------------ hand-computed sticky

    def sticky_shards(self, owners):
        """Which of 2 shards sticky sends each owner to (block:0 keys)."""
        rows = [(1000 * i, 512, [o]) for i, o in enumerate(owners)]
        t = self.write("probe.jsonl", trace_text(rows))
        self.ok("--trace", t, "--owner-key", "block:0", "--shards", "2", "--policies", "sticky",
                "--dump-routes", self.path("probe.csv"))
        return {int(r["owner"]): int(r["shard"]) for r in read_dump(self.path("probe.csv"))}

    def test_membership_events(self):
        """--events: bad lines exit 2 naming FILE:LINE; a good file adds the
        per-event figures to the JSON and the Markdown, and an empty one
        changes no route (the JSON's inputs show the flag only when given)."""
        bad = self.write("bad.txt", "# two joins then nonsense\n1 join x\n2 boot y\n")
        self.bad("--generate", "--events", bad, contains=("bad.txt:3: unknown kind \"boot\"",))
        args = ["--generate", "--requests", "3000", "--sessions", "100", "--rate", "500",
                "--shards", "4", "--policies", "cacheroute,sticky,llmd-scorer"]
        ev = self.write("ev.txt", "1 join e4\n2 drain e1\n4 fail e2\n")
        p = self.ok(*args, "--events", ev, "--json", self.path("ev.json"))
        self.assertIn("Membership events", p.stdout)
        doc = json.load(open(self.path("ev.json")))
        self.assertEqual(doc["inputs"]["replay"]["events"], ev)
        for r in doc["results"]:
            self.assertEqual([e["kind"] for e in r["events"]], ["join", "drain", "fail"])
            self.assertEqual(r["events"][2]["endpoint"], "e2")
            self.assertIn("failed_requests", r)
        empty = self.write("empty.txt", "# nothing\n")
        self.ok(*args, "--dump-routes", self.path("a.csv"), "--json", self.path("a.json"))
        self.ok(*args, "--events", empty, "--dump-routes", self.path("b.csv"))
        with open(self.path("a.csv")) as a, open(self.path("b.csv")) as b:
            self.assertEqual(a.read(), b.read())
        plain = json.load(open(self.path("a.json")))
        self.assertNotIn("events", plain["inputs"]["replay"])
        self.assertNotIn("events", plain["results"][0])

    def test_sticky_hand_computed(self):
        shards = self.sticky_shards(range(100, 116))
        a = min(o for o, s in shards.items() if s == 0)
        b = min(o for o, s in shards.items() if s == 1)
        # Two sessions (owner = block 0, so A = a and B = b) on different
        # shards; 512-token blocks, 3 blocks per shard, prefill = 10 + 1 ms
        # per uncached token (c = 0), no noise. Caches insert a request's
        # blocks last to first, so its first block is the most recent and
        # a prefix is evicted from its tail.
        #  r0 t=0    A 1024 [a,11]       cold: 10+1024 = 1034 ms. SA: a,11
        #  r1 t=100  B 1024 [b,21]       cold, other shard: 1034.  SB: b,21
        #  r2 t=500  A 1536 [a,11,12]    SA busy until 1034: waits 534; hit
        #            a,11 = 1024 tokens; 10+512 = 522; ttft 1056; SA busy
        #            until 1556. SA: a,11,12 (full)
        #  r3 t=3000 B 2048 [b,21,22,23] hit b,21 = 1024; 10+1024 = 1034.
        #            Inserting 23,22,21,b into 3 blocks keeps b,21,22
        #  r4 t=5000 B 2048 [b,21,22,23] hit b,21,22 = 1536; 10+512 = 522.
        #            SB keeps b,21,22 again
        #  r5 t=6000 A 1800 [a,11,12,13] hit a,11,12 = 1536; 10+264 = 274
        # Hit ratio = (0+0+1024+1024+1536+1536) / (1024+1024+1536+2048+2048
        # +1800) = 5120/9480. TTFTs 1034,1034,1056,1034,522,274: mean
        # 4954/6, p50 (nearest rank 3 of 6) 1034, p99 (rank 6) 1056.
        rows = [(0, 1024, [a, 11]), (100, 1024, [b, 21]), (500, 1536, [a, 11, 12]),
                (3000, 2048, [b, 21, 22, 23]), (5000, 2048, [b, 21, 22, 23]),
                (6000, 1800, [a, 11, 12, 13])]
        t = self.write("hand.jsonl", trace_text(rows))
        self.ok("--trace", t, "--owner-key", "block:0", "--shards", "2", "--shard-blocks", "3",
                "--true-prefill", "10,1,0", "--noise", "0", "--policies", "sticky",
                "--json", self.path("hand.json"), "--dump-routes", self.path("hand.csv"))
        with open(self.path("hand.json")) as f:
            res = json.load(f)["results"][0]
        self.assertEqual(res["policy"], "sticky")
        self.assertEqual(res["requests"], 6)
        self.assertAlmostEqual(res["hit_ratio"], 5120 / 9480, places=9)
        self.assertAlmostEqual(res["ttft_mean_ms"], 4954 / 6, places=6)
        self.assertAlmostEqual(res["ttft_p50_ms"], 1034, places=6)
        self.assertAlmostEqual(res["ttft_p99_ms"], 1056, places=6)
        dump = read_dump(self.path("hand.csv"))
        self.assertEqual([int(r["shard"]) for r in dump], [0, 1, 0, 1, 1, 0])
        self.assertEqual([int(r["hit_tokens"]) for r in dump], [0, 0, 1024, 1024, 1536, 1536])
        for r, want in zip(dump, [1034, 1034, 1056, 1034, 522, 274]):
            self.assertAlmostEqual(float(r["ttft_ms"]), want, places=6)
        self.assertAlmostEqual(float(dump[2]["queue_wait_ms"]), 534, places=6)

    # ------------------------------------------------------------ KV events

    def test_kv_events_take_evictions_out_of_the_prediction(self):
        """One shard of 3 blocks: A [1], B [1], C [2,3], D [4] queued behind
        C, E [1]. D's dispatch evicts block 1 (LRU) while the core's CLOCK
        index keeps it (B touched it) and ages out 3: without events E is
        predicted 512 cached tokens and hits none; with them the eviction's
        REMOVED takes 1 out. The error is in the JSON (null for a policy
        that predicts nothing) and in the Markdown."""
        rows = [(0, 512, [1]), (1000, 512, [1]), (2000, 1024, [2, 3]), (2001, 512, [4]),
                (5000, 512, [1])]
        t = self.write("evict.jsonl", trace_text(rows))
        args = ["--trace", t, "--owner-key", "block:0", "--shards", "1", "--shard-blocks", "3",
                "--true-prefill", "10,1,0", "--noise", "0", "--policies", "cacheroute,random"]
        err = {}
        for mode in ("off", "on"):
            p = self.ok(*args, "--kv-events", mode, "--json", self.path(mode + ".json"))
            self.assertIn("Hit prediction error", p.stdout)
            with open(self.path(mode + ".json")) as f:
                doc = json.load(f)
            self.assertEqual(doc["inputs"]["replay"]["kv-events"], mode)
            by = {r["policy"]: r for r in doc["results"]}
            self.assertIsNone(by["random"]["hit_error_tokens"])
            err[mode] = by["cacheroute"]["hit_error_tokens"]
            self.assertAlmostEqual(by["cacheroute"]["hit_error_share"], err[mode] * 5 / 3072,
                                   places=9)
        self.assertAlmostEqual(err["off"], 512 / 5, places=9)
        self.assertEqual(err["on"], 0)
        self.bad(*args, "--kv-events", "maybe", contains=("--kv-events", "maybe"))

    # ------------------------------------------------------------ against the sidecar

    def test_cacheroute_routes_equal_the_sidecars(self):
        # The estimator's calls clock makes rates independent of time, so a
        # sidecar that is sent the same arrivals and plans at the same
        # points (Plan from_estimator + install where the tool's replanner
        # installed) must answer the same preferred shard for every
        # arrival: admitted owners and fallbacks alike. Plan calls plan
        # fresh, so the tool's replanner does too here.
        planner = ["--qcap", "2", "--warm-slots-per-shard", "3", "--estimator-clock", "calls",
                   "--half-life", "5", "--replan", "fresh", "--route-by", "plan"]
        self.ok("--generate", "--requests", "3000", "--sessions", "40", "--gini", "0.6",
                "--rate", "100", "--shards", "6", "--replan-interval", "2", "--policies",
                "cacheroute", "--dump-routes", self.path("routes.csv"),
                "--json", self.path("routes.json"), *planner)
        dump = read_dump(self.path("routes.csv"))
        self.assertEqual(len(dump), 3000)
        replans = sum(int(r["replanned"]) for r in dump)
        self.assertGreaterEqual(replans, 10)
        sc = h.Sidecar("--n-shards", "6", "--replan-interval", "0", *planner)
        self.addCleanup(sc.kill)
        stub = sc.stub()
        got, batch = [], []

        def flush():
            if batch:
                resp = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=batch),
                                          timeout=h.RPC_TIMEOUT)
                got.extend(r.preferred_shard for r in resp.routes)
                batch.clear()

        admitted_seen = 0
        tables = []  # every installed table: {owner: shards}
        for r in dump:
            if r["replanned"] == "1":
                flush()
                plan = stub.Plan(P.cr.PlanRequest(from_estimator=True, install=True),
                                 timeout=h.RPC_TIMEOUT)
                tables.append({p.owner: list(p.shards) for p in plan.table.placements})
                admitted_seen = max(admitted_seen, len(plan.table.placements))
            batch.append(int(r["owner"]))
        flush()
        self.assertEqual(got, [int(r["shard"]) for r in dump])
        # Churn from the sidecar's own tables: per install, of the owners it
        # admits, the share whose shards differ from the table before (an
        # owner not admitted there was on its fallback shard; so was
        # everyone before the first table).
        shares, before = [], {}
        for t in tables:
            moved = sum(1 for o, sh in t.items()
                        if before.get(o, [h.fallback_shard(o, 6)]) != sh)
            shares.append(moved / len(t) if t else 0.0)
            before = t
        with open(self.path("routes.json")) as f:
            res = json.load(f)["results"][0]
        self.assertEqual(res["n_replans"], len(tables))
        self.assertAlmostEqual(res["churn_mean"], sum(shares) / len(shares), places=9)
        self.assertGreater(res["churn_mean"], 0)
        # Meaningful: some owners were admitted, some spread over kb > 1
        # shards, and the budget (6 x 3 slots) left others on fallbacks.
        self.assertGreater(admitted_seen, 0)
        self.assertGreater(len({int(r["shard"]) for r in dump}), 3)
        problem = sc.exit_problems(sc.stop())
        self.assertIsNone(problem, problem)

    # Route's answers depend on the prefix index and on predicted waits.
    # With prefills predicted at 1e-6 ms a token (no calibration) no wait
    # outlasts the gap between two calls, so both sides place each request
    # by its hits alone, ties to its home; caches larger than the trace
    # keep the index and the simulated LRU equal. Prompts: 20 documents,
    # each followed by its conversation's turns, so placement by prefix
    # across owners matters (no shared system block: with waits out of the
    # picture it would draw everything to the first shard that holds it).
    RULE = ("--route-by", "ttft", "--prefill-coeffs", "0,1e-6,0", "--calibrate", "off",
            "--miss-weight", "1", "--replan-interval", "0")

    def documents_trace(self, interleaved=False):
        """(rows, trace path): rows of (timestamp ms, prompt tokens, block
        ids), each conversation's turns in a row, or interleaved: every
        conversation's first turn, then every second one, ... (so its owner
        has requests across the whole trace)."""
        rows, t = [], 0.0
        turns = [(conv, turn) for conv in range(60) for turn in range(1 + conv % 4)]
        if interleaved:
            turns.sort(key=lambda ct: (ct[1], ct[0]))
        for conv, turn in turns:
            doc = [100 + conv % 20 * 10 + 1, 100 + conv % 20 * 10 + 2]
            own = [10000 + conv * 10 + k for k in range(turn + 1)]
            t += 37.0 + conv % 7
            rows.append((t, 512 * (len(doc) + len(own)) - 100, doc + own))
        return rows, self.write("docs.jsonl", trace_text(rows))

    def route_like_the_replay(self, rows, dump, before=None):
        """Sends each row's request to a fresh sidecar's Route as the replay's
        cacheroute policy did (before(i, stub) first, when given); checks the
        predicted hit against the dump's; returns (shards, reasons, sidecar)."""
        sc = h.Sidecar("--n-shards", "5", "--block-tokens", "512", "--index-blocks", "4096",
                       *self.RULE)
        self.addCleanup(sc.kill)
        stub = sc.stub()
        got, reasons = [], set()
        for i, ((_, n, ids), r) in enumerate(zip(rows, dump)):
            if before:
                before(i, stub)
            chained, prev = [], 0
            for b in ids:
                prev = h.splitmix64(prev ^ b)
                chained.append(prev)
            resp = stub.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
                owner=int(r["owner"]), prompt_tokens=n, block_hashes=chained)]),
                timeout=h.RPC_TIMEOUT)
            d = resp.routes[0]
            got.append(d.shard)
            reasons.add(d.reason)
            self.assertEqual(d.cached_tokens, int(r["hit_tokens"]), r)
        return got, reasons, sc

    def replay_docs(self, trace, *extra):
        self.ok("--trace", trace, "--owner-key", "prefix:3", "--shards", "5", "--shard-blocks",
                "4096", "--noise", "0", "--policies", "cacheroute", "--dump-routes",
                self.path("routes.csv"), *self.RULE, *extra)
        return read_dump(self.path("routes.csv"))

    def test_route_answers_equal_the_replays(self):
        rows, trace = self.documents_trace()
        dump = self.replay_docs(trace)
        self.assertEqual(len(dump), len(rows))
        got, reasons, sc = self.route_like_the_replay(rows, dump)
        self.assertEqual(got, [int(r["shard"]) for r in dump])
        # Meaningful: requests went by their prefixes to more than one shard.
        self.assertIn("prefix", reasons)
        self.assertGreater(len(set(got)), 2)
        problem = sc.exit_problems(sc.stop())
        self.assertIsNone(problem, problem)

    def test_membership_answers_equal_the_replays(self):
        """The same sequence with a join, a drain and a fail: the sidecar,
        given SetEndpoints and DrainEndpoint where the replay's events fall,
        answers every Route as the replay routed it, and the owners each
        event moved (the replay's figure) are the ones its answers moved."""
        rows, trace = self.documents_trace(interleaved=True)
        end = rows[-1][0] / 1000
        events = [(0.3 * end, "join", "e5"), (0.55 * end, "drain", "e1"),
                  (0.8 * end, "fail", "e3")]
        path = self.write("ev.txt", "".join("%.3f %s %s\n" % e for e in events))
        dump = self.replay_docs(trace, "--events", path, "--json", self.path("ev.json"))
        listed = ["e0", "e1", "e2", "e3", "e4"]

        def put(stub):
            stub.SetEndpoints(P.cr.SetEndpointsRequest(endpoints=[
                P.cr.Endpoint(id=e, address="sim:%s" % e[1:]) for e in listed]),
                timeout=h.RPC_TIMEOUT)

        def before(i, stub):
            if i == 0:
                put(stub)
            for at, kind, ep in events:
                if rows[i][0] / 1000 >= at and (i == 0 or rows[i - 1][0] / 1000 < at):
                    if kind == "drain":
                        stub.DrainEndpoint(P.cr.DrainEndpointRequest(id=ep),
                                           timeout=h.RPC_TIMEOUT)
                        continue
                    if kind == "join":
                        listed.append(ep)
                    else:
                        listed.remove(ep)
                    put(stub)

        got, _, sc = self.route_like_the_replay(rows, dump, before)
        self.assertEqual(got, [int(r["shard"]) for r in dump])
        now = sc.stub().ListEndpoints(P.cr.ListEndpointsRequest(),
                                      timeout=h.RPC_TIMEOUT).endpoints
        self.assertEqual([(e.id, e.state) for e in now],
                         [("e0", "active"), ("e1", "draining"), ("e2", "active"),
                          ("e3", "gone"), ("e4", "active"), ("e5", "active")])
        times = [t / 1000 for t, _, _ in rows]
        self.assertFalse([s for t, s in zip(times, got) if t >= events[1][0] and s == 1])
        self.assertFalse([s for t, s in zip(times, got) if t >= events[2][0] and s == 3])
        # each event's moved owners, from the sidecar's answers, as the replay counts them
        figures = json.load(open(self.path("ev.json")))["results"][0]["events"]
        bounds = [0.0] + [at for at, _, _ in events] + [float("inf")]
        for k, (at, _, _) in enumerate(events):
            last, first = {}, {}
            for t, s, r in zip(times, got, dump):
                if bounds[k] <= t < at:
                    last[r["owner"]] = s
                elif at <= t < bounds[k + 2] and r["owner"] not in first:
                    first[r["owner"]] = s
            moved = sum(1 for o in last if o in first and first[o] != last[o])
            self.assertEqual(moved, figures[k]["moved"], events[k])
        self.assertGreater(sum(f["moved"] for f in figures), 0)
        problem = sc.exit_problems(sc.stop())
        self.assertIsNone(problem, problem)

    # ------------------------------------------------------------ knowledge

    def test_oracle_takes_the_faster_true_path(self):
        # With no noise the oracle's choice per request must be the faster
        # of text and KV under the true model, given the prefix hit.
        a, b, c, kv_fixed, kv_tok = 3.0, 0.01, 2e-6, 40.0, 0.004
        self.ok("--generate", "--requests", "600", "--sessions", "30", "--rate", "50",
                "--knowledge-tokens", "3000", "--shards", "4", "--noise", "0",
                "--true-prefill", "%r,%r,%r" % (a, b, c), "--true-kv", "%r,%r" % (kv_fixed, kv_tok),
                "--policies", "oracle,always-text,always-kv,cacheroute",
                "--dump-routes", self.path("kv.csv"), "--route-by", "plan")
        dump = read_dump(self.path("kv.csv"))

        def prefill(L, s):
            return a + b * (L - s) + c * (L * L - s * s)

        mixed = set()
        for r in (r for r in dump if r["policy"] == "oracle"):
            L, K, hit = int(r["input_tokens"]), int(r["knowledge_tokens"]), int(r["hit_tokens"])
            text = prefill(L, hit)
            kv = prefill(L, min(L, hit + K)) + kv_fixed + kv_tok * K
            self.assertEqual(r["used_kv"], "1" if kv < text else "0", r)
            mixed.add(r["used_kv"])
        self.assertEqual(mixed, {"0", "1"})  # the case is one where both paths win sometimes
        for r in dump:
            if r["policy"] == "always-text":
                self.assertEqual(r["used_kv"], "0")
            if r["policy"] == "always-kv":
                self.assertEqual(r["used_kv"], "1")
        # The variants route like cacheroute: under plan (routes that do not
        # follow the queues) the same shards request by request.
        shards = {}
        for r in dump:
            shards.setdefault(r["policy"], []).append(r["shard"])
        self.assertEqual(shards["oracle"], shards["cacheroute"])
        self.assertEqual(shards["always-kv"], shards["cacheroute"])

    # ------------------------------------------------------------ plots

    def plot_args(self, out):
        t = self.write("p.jsonl", trace_text([(i * 200, 1024 + 512 * (i % 3), [1, 2 + i % 5])
                                              for i in range(60)]))
        return ["--trace", t, "--shards", "2", "--scale", "1,2", "--series-window", "1",
                "--plots", out, "--json", os.path.join(out + ".json")]

    def test_plots_are_pngs(self):
        if not shutil.which("gnuplot"):
            self.skipTest("gnuplot is not installed (Debian package gnuplot-nox)")
        out = self.path("plots")
        p = self.ok(*self.plot_args(out))
        self.assertEqual(p.stderr, "")
        for name in ("hit_ratio_0.png", "ttft_cdf_0.png", "hit_ratio_1.png", "ttft_cdf_1.png",
                     "capacity.png"):
            with open(os.path.join(out, name), "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n", name)

    def test_without_gnuplot_json_and_markdown_still_come(self):
        out = self.path("plots")
        p = self.ok(*self.plot_args(out), env={"PATH": self.dir})  # no gnuplot on PATH
        self.assertIn("warning: gnuplot not found", p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertIn("| sticky | 1 |", p.stdout)
        self.assertTrue(os.path.exists(out + ".json"))
        self.assertTrue(os.path.exists(os.path.join(out, "plots.gp")))
        self.assertFalse(os.path.exists(os.path.join(out, "capacity.png")))


if __name__ == "__main__":
    if "--replay" not in sys.argv:
        sys.exit("usage: test_replay.py --replay BIN --sidecar BIN --cli BIN --plan-dump BIN "
                 "--proto-dir DIR")
    i = sys.argv.index("--replay")
    REPLAY = sys.argv[i + 1]
    del sys.argv[i:i + 2]
    h.main()
