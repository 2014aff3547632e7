"""cacheroute.v1.CacheRoute over the wire: Plan, RecordArrival, GetRates,
Forget, against the real sidecar."""
import bisect
import math
import os
import random
import sys
import threading

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT

# (R, qcap, W) for the random comparisons: tight and loose budgets, kb from 1
# to R, fractional W.
CONFIGS = [(4, 50.0, 200.0), (1, 10.0, 1.0), (3, 7.5, 2.0), (16, 0.3, 1.5), (64, 25.0, 0.5),
           (7, 1e-3, 3.0), (5, 40.0, 1e6), (65536, 1e9, 1.0)]


def random_rates(rng, n):
    """n sessions with distinct owners (negative, huge, small), many tied
    rates, some zeros, and arbitrary doubles."""
    owners = rng.sample(range(-5000, 5000), n - 2) + [2**63 - 1, -2**63]
    rng.shuffle(owners)
    ties = [rng.uniform(0, 120) for _ in range(4)]
    rates = []
    for o in owners:
        k = rng.random()
        if k < 0.12:
            r = 0.0
        elif k < 0.45:
            r = rng.choice(ties)
        elif k < 0.6:
            r = float(rng.randint(1, 400))
        else:
            r = rng.expovariate(1 / 60.0)
        rates.append((o, r))
    return rates


class PlanTest(h.SidecarTestCase):
    # The configured planner differs from the defaults, so an absent config is
    # observable.
    SIDECAR_FLAGS = ("--n-shards", "5", "--qcap", "7", "--warm-slots-per-shard", "3",
                     "--replan-interval", "0")

    def plan(self, **kw):
        return self.stub.Plan(h.plan_request(**kw), timeout=h.RPC_TIMEOUT).table

    def test_seed_example(self):
        t = self.plan(rates=[(1, 10.0), (2, 80.0)], config=(4, 50.0, 200.0))
        self.assertEqual(t.n_shards, 4)
        self.assertEqual([(p.owner, list(p.shards), p.preferred_shard) for p in t.placements],
                         [(2, [0, 1], 0), (1, [2], 2)])
        self.assertEqual(list(t.expected_load), [40.0, 40.0, 10.0, 0.0])
        self.assertEqual(t.admitted_rate_total, 90.0)
        self.assertEqual(t.unadmitted_rate_total, 0.0)
        self.assertEqual(t.imbalance, 40.0 / 22.5)
        self.assertAlmostEqual(t.imbalance, 1.7777777777777777, places=15)
        self.assertEqual(t.generation, 0)
        self.assertEqual(h.bits(h.table_dict(t)),
                         h.bits(h.plan_dump(4, 50, 200, [(1, 10.0), (2, 80.0)])))

    def test_absent_config_uses_sidecar_flags(self):
        rates = [(i, float(i % 9)) for i in range(1, 40)]
        t = self.plan(rates=rates)
        self.assertEqual(t.n_shards, 5)
        self.assertEqual(h.bits(h.table_dict(t)), h.bits(h.plan_dump(5, 7, 3, rates)))

    def test_partial_config_takes_the_rest_from_the_sidecar(self):
        # PlannerConfig's fields are proto3 `optional`: each one set replaces
        # the sidecar's value (here --n-shards 5 --qcap 7
        # --warm-slots-per-shard 3), each unset one keeps it.
        self.assertFalse(P.cr.PlannerConfig(qcap=30.0).HasField("n_shards"))
        self.assertTrue(P.cr.PlannerConfig(n_shards=0).HasField("n_shards"))
        rates = [(i, float(3 * i % 23)) for i in range(1, 40)] + [(-7, 31.0), (2**63 - 1, 9.5)]
        cases = [
            (dict(qcap=30.0), (5, 30, 3)),
            (dict(n_shards=9), (9, 7, 3)),
            (dict(warm_slots_per_shard=1.5), (5, 7, 1.5)),
            (dict(n_shards=2, qcap=4.0), (2, 4, 3)),
            (dict(qcap=2.0, warm_slots_per_shard=0.5), (5, 2, 0.5)),
            (dict(n_shards=3, qcap=5.0, warm_slots_per_shard=2.0), (3, 5, 2)),
        ]
        for fields, (R, qcap, W) in cases:
            with self.subTest(fields=fields):
                req = h.plan_request(rates=rates)
                req.config.CopyFrom(P.cr.PlannerConfig(**fields))
                t = self.stub.Plan(req, timeout=h.RPC_TIMEOUT).table
                self.assertEqual(t.n_shards, R)
                self.assertEqual(h.bits(h.table_dict(t)), h.bits(h.plan_dump(R, qcap, W, rates)))

    def test_empty_config_is_no_config(self):
        # A present config message with no field set behaves as no config:
        # the sidecar's (5, 7, 3) throughout.
        rates = [(i, float(i % 9)) for i in range(1, 40)]
        want = h.bits(h.plan_dump(5, 7, 3, rates))
        req = h.plan_request(rates=rates)
        req.config.SetInParent()
        self.assertTrue(req.HasField("config"))
        self.assertTrue(req.SerializeToString().startswith(b"\x0a\x00"))  # config {} on the wire
        self.assertEqual(h.bits(h.table_dict(self.stub.Plan(req, timeout=h.RPC_TIMEOUT).table)),
                         want)
        self.assertEqual(h.bits(h.table_dict(self.plan(rates=rates))), want)
        # The same as raw bytes, field by field: config {} then the rates.
        body = b"\x0a\x00" + h.plan_request(rates=rates).SerializeToString()
        raw = h.raw_call(self.sidecar.channel(), h.SERVICE + "Plan", body)
        t = P.cr.PlanResponse.FromString(raw).table
        self.assertEqual(h.bits(h.table_dict(t)), want)

    def test_large_answer_bytes_are_canonical(self):
        # Thousands of placements, owners of every varint width (hashes, half
        # negative), one-byte shard ids (64 shards) and two-byte ones (200),
        # Zipf rates so the first placements are the widest: the answer the
        # sidecar writes itself (answer/plan_answer.c) is byte for byte the
        # canonical encoding of what it decodes to, and the library's plan.
        owners = list(dict.fromkeys(h.splitmix64(i) >> (i % 64) for i in range(20000)))
        n = len(owners)  # distinct: the widest shifts leave small duplicates
        rates = [(o - (1 << 64) if o >> 63 else o, 4000.0 / (i + 1))
                 for i, o in enumerate(owners)]
        for R in (64, 200):
            with self.subTest(R=R):
                body = h.plan_request(rates=rates, config=(R, 10.0, 1e12)).SerializeToString()
                raw = h.raw_call(self.sidecar.channel(), h.SERVICE + "Plan", body)
                answer = P.cr.PlanResponse.FromString(raw)
                self.assertEqual(len(answer.table.placements), n)
                self.assertEqual(raw, answer.SerializeToString())
                self.assertEqual(h.bits(h.table_dict(answer.table)),
                                 h.bits(h.plan_dump(R, 10.0, 1e12, rates)))

    def test_default_config_is_8_50_200(self):
        sc = self.start_sidecar()
        rates = [(i, float(i)) for i in range(1, 30)]
        t = sc.stub().Plan(h.plan_request(rates=rates), timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.n_shards, 8)
        self.assertEqual(h.bits(h.table_dict(t)), h.bits(h.plan_dump(8, 50, 200, rates)))
        sc.assert_clean_exit(self)

    def test_matches_library_bit_for_bit(self):
        rng = random.Random(20240611)
        for k, (R, qcap, W) in enumerate(CONFIGS):
            for n in (3, 57, 400):
                rates = random_rates(rng, n)
                with self.subTest(R=R, qcap=qcap, W=W, n=n):
                    t = self.plan(rates=rates, config=(R, qcap, W))
                    self.assertEqual(h.bits(h.table_dict(t)),
                                     h.bits(h.plan_dump(R, qcap, W, rates)))
                    self.assertEqual(t.generation, 0)

    def test_matches_the_readme_rules(self):
        # An independent planner written from docs/decisions.md's rules (ties by
        # input order, zeros ignored, kb, admission, LPT on (load, id),
        # preferred shard, imbalance). Structure exactly, doubles to 1e-12.
        rng = random.Random(7)
        for R, qcap, W in CONFIGS[:7]:
            rates = random_rates(rng, 120)
            with self.subTest(R=R, qcap=qcap, W=W):
                got = h.table_dict(self.plan(rates=rates, config=(R, qcap, W)))
                want = h.ref_plan(R, qcap, W, rates)
                self.assertEqual(got["placements"], want["placements"])
                self.assertEqual(got["n_shards"], want["n_shards"])
                for key in ("admitted_rate_total", "unadmitted_rate_total", "imbalance"):
                    self.assertTrue(math.isclose(got[key], want[key], rel_tol=1e-12,
                                                 abs_tol=1e-12), (key, got[key], want[key]))
                for a, b in zip(got["expected_load"], want["expected_load"]):
                    self.assertTrue(math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-12), (a, b))

    def test_ties_zeros_budget_by_hand(self):
        # R=2, W=1: budget 2 slots. Ties keep input order; zero is ignored;
        # owner 5 (kb 2) no longer fits after 3 and 4 and is unadmitted.
        rates = [(3, 10.0), (9, 0.0), (4, 10.0), (5, 10.0), (6, 10.0)]
        t = self.plan(rates=rates, config=(2, 50.0, 1.0))
        self.assertEqual([p.owner for p in t.placements], [3, 4])
        self.assertEqual(t.unadmitted_rate_total, 20.0)
        self.assertEqual(t.admitted_rate_total, 20.0)
        self.assertEqual(list(t.expected_load), [20.0, 20.0])
        self.assertEqual(t.imbalance, 1.0)
        # kb = ceil(rate / qcap), capped at R; a session bigger than the
        # budget is skipped and smaller ones after it still get in.
        t = self.plan(rates=[(1, 120.0), (2, 30.0), (3, 20.0)], config=(3, 50.0, 1.0))
        self.assertEqual([(p.owner, list(p.shards)) for p in t.placements],
                         [(1, [0, 1, 2])])
        self.assertEqual(t.unadmitted_rate_total, 50.0)
        # Only zeros: nothing admitted, imbalance 1.0 (mean 0).
        t = self.plan(rates=[(1, 0.0), (2, 0.0)], config=(3, 50.0, 1.0))
        self.assertEqual(len(t.placements), 0)
        self.assertEqual(list(t.expected_load), [0.0, 0.0, 0.0])
        self.assertEqual(t.imbalance, 1.0)

    def test_rates_and_from_estimator_exclusive(self):
        e = self.assertRpcError(INVALID, self.stub.Plan,
                                h.plan_request(rates=[(1, 1.0)], from_estimator=True))
        self.assertIn("rates", e.details())
        self.assertIn("from_estimator", e.details())
        e = self.assertRpcError(INVALID, self.stub.Plan, h.plan_request())
        self.assertIn("rates", e.details())
        self.assertIn("from_estimator", e.details())
        e = self.assertRpcError(INVALID, self.stub.Plan,
                                h.plan_request(config=(4, 50.0, 200.0), install=True))
        self.assertIn("from_estimator", e.details())


class InstallTest(h.SidecarTestCase):
    SHARED = False

    def test_install_generation_and_routes(self):
        sc = self.start_sidecar("--n-shards", "8", "--estimator-clock", "calls",
                                "--half-life", "4", "--replan-interval", "0", "--route-by", "plan")
        stub = sc.stub()
        # No table yet: generation 0, nobody admitted, fallback over the
        # configured 8 shards.
        owners = [1, 2, 3, -17, 2**63 - 1, -2**63]
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.table_generation, 0)
        self.assertEqual([(x.owner, x.admitted, x.preferred_shard) for x in r.routes],
                         [(o, False, h.fallback_shard(o, 8)) for o in owners])

        # A plan that is not installed changes nothing.
        t = stub.Plan(h.plan_request(rates=[(1, 10.0), (2, 80.0)], config=(4, 50.0, 200.0)),
                      timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 0)
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.table_generation, 0)
        self.assertFalse(r.routes[0].admitted)

        # Installed: generation 1; admitted owners get the table's preferred
        # shard; others fall back modulo the TABLE's n_shards (4, not 8).
        t = stub.Plan(h.plan_request(rates=[(1, 10.0), (2, 80.0)], config=(4, 50.0, 200.0),
                                     install=True), timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 1)
        pref = {p.owner: p.preferred_shard for p in t.placements}
        self.assertEqual(pref, {2: 0, 1: 2})
        owners = [2, 1, 3, 2, -17, 2**63 - 1, -2**63, 99]
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.table_generation, 1)
        self.assertEqual(r.recorded, len(owners))
        self.assertEqual([(x.owner, x.admitted, x.preferred_shard) for x in r.routes],
                         [(o, o in pref, pref[o] if o in pref else h.fallback_shard(o, 4))
                          for o in owners])

        # Each install bumps the generation by one.
        for gen in (2, 3):
            t = stub.Plan(h.plan_request(rates=[(7, 1.0)], config=(3, 50.0, 1.0), install=True),
                          timeout=h.RPC_TIMEOUT).table
            self.assertEqual(t.generation, gen)
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[7, 2]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.table_generation, 3)
        self.assertEqual([(x.admitted, x.preferred_shard) for x in r.routes],
                         [(True, 0), (False, h.fallback_shard(2, 3))])
        # A non-installed plan in between does not count.
        t = stub.Plan(h.plan_request(rates=[(7, 1.0)]), timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 0)
        t = stub.Plan(h.plan_request(rates=[(7, 1.0)], install=True), timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 4)
        self.assertEqual(t.n_shards, 8)
        sc.assert_clean_exit(self)

    def test_from_estimator(self):
        H = 3.0
        sc = self.start_sidecar("--estimator-clock", "calls", "--half-life", "3",
                                "--n-shards", "3", "--qcap", "2", "--warm-slots-per-shard", "2",
                                "--replan-interval", "0")
        stub = sc.stub()
        counts = {10: 1, 11: 5, -12: 3, 13: 2, 14: 8, 15: 1}
        owners = [o for o, n in counts.items() for _ in range(n)]
        random.Random(3).shuffle(owners)
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners, omit_routes=True),
                           timeout=h.RPC_TIMEOUT)
        snapshot = [(o, h.calls_rate_exact(counts[o], H)) for o in sorted(counts)]
        rates = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual([(x.owner, x.rate) for x in rates.rates], snapshot)
        # Absent config: the sidecar's (3, 2, 2). The estimator's snapshot is
        # sorted by owner id, which decides ties.
        t = stub.Plan(h.plan_request(from_estimator=True, install=True),
                      timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 1)
        self.assertEqual(h.bits(h.table_dict(t)), h.bits(h.plan_dump(3, 2, 2, snapshot)))
        # A given config is used as is.
        t = stub.Plan(h.plan_request(from_estimator=True, config=(2, 1.0, 100.0)),
                      timeout=h.RPC_TIMEOUT).table
        self.assertEqual(t.generation, 0)
        self.assertEqual(h.bits(h.table_dict(t)), h.bits(h.plan_dump(2, 1, 100, snapshot)))
        # From an empty estimator: an empty table, not an error.
        for o in counts:
            stub.Forget(P.cr.ForgetRequest(owners=[o]), timeout=h.RPC_TIMEOUT)
        t = stub.Plan(h.plan_request(from_estimator=True), timeout=h.RPC_TIMEOUT).table
        self.assertEqual((len(t.placements), list(t.expected_load), t.imbalance),
                         (0, [0.0, 0.0, 0.0], 1.0))
        sc.assert_clean_exit(self)


class SwapTest(h.SidecarTestCase):
    SHARED = False

    def test_routes_match_the_generation_they_name(self):
        for threads in ("1", "4"):
            with self.subTest(threads=threads):
                self.check_swaps(threads)

    def check_swaps(self, threads):
        # One thread installs tables A and B in turn (different owners and
        # shard counts) while four threads record arrivals. Every answer must
        # be computed from exactly the table whose generation it names (the
        # swap is atomic), and generations never go back within a thread.
        sc = self.start_sidecar("--replan-interval", "0", "--n-shards", "8", "--threads", threads,
                                "--route-by", "plan")
        tables = {}
        plans = [
            (h.plan_request(rates=[(o, 10.0 + o) for o in range(1, 11)], config=(4, 50.0, 200.0),
                            install=True)),
            (h.plan_request(rates=[(o, 10.0 + o) for o in range(11, 21)], config=(5, 50.0, 200.0),
                            install=True)),
        ]
        stop = threading.Event()
        errors = []
        answers = []

        def installer():
            try:
                stub = sc.stub()
                for i in range(200):
                    t = stub.Plan(plans[i % 2], timeout=h.RPC_TIMEOUT).table
                    tables[t.generation] = t
            except Exception as e:
                errors.append(repr(e))
            finally:
                stop.set()

        def recorder(k):
            try:
                stub = sc.stub()
                mine = []
                while not stop.is_set():
                    r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 11, 5, 15, 99]),
                                           timeout=h.RPC_TIMEOUT)
                    mine.append(r)
                answers.append(mine)
            except Exception as e:
                errors.append(repr(e))

        ts = [threading.Thread(target=installer)]
        ts += [threading.Thread(target=recorder, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in ts))
        self.assertEqual(errors, [])
        self.assertEqual(sorted(tables), list(range(1, 201)))
        checked = 0
        for mine in answers:
            gens = [r.table_generation for r in mine]
            self.assertEqual(gens, sorted(gens), "generation went back")
            for r in mine:
                if r.table_generation == 0:
                    want = [(False, h.fallback_shard(o, 8)) for o in (1, 11, 5, 15, 99)]
                else:
                    t = tables[r.table_generation]
                    pref = {p.owner: p.preferred_shard for p in t.placements}
                    want = [(o in pref, pref.get(o, h.fallback_shard(o, t.n_shards)))
                            for o in (1, 11, 5, 15, 99)]
                    checked += 1
                self.assertEqual([(x.admitted, x.preferred_shard) for x in r.routes], want,
                                 "generation %d" % r.table_generation)
        self.assertGreater(checked, 0)
        sc.assert_clean_exit(self)


class RecordArrivalTest(h.SidecarTestCase):
    # The plan rule: routes worked out from the table and splitmix64.
    H = 4.0
    SIDECAR_FLAGS = ("--estimator-clock", "calls", "--half-life", "4", "--n-shards", "6",
                     "--replan-interval", "0", "--route-by", "plan")

    def record(self, owners, **kw):
        return self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners, **kw),
                                       timeout=h.RPC_TIMEOUT)

    def test_one_arrival_per_entry_in_order(self):
        owners = [100, 101, 100, 100, -100, 101, 100]
        r = self.record(owners)
        self.assertEqual(r.recorded, 7)
        self.assertEqual(r.table_generation, 0)
        seen = {}
        want = []
        for o in owners:
            seen[o] = seen.get(o, 0) + 1
            want.append((o, h.calls_rate_exact(seen[o], self.H), False, h.fallback_shard(o, 6)))
        self.assertEqual([(x.owner, x.rate, x.admitted, x.preferred_shard) for x in r.routes],
                         want)
        # Rate after n arrivals = (1 - d^n) / (1 - d), d = 0.5^(1/H).
        self.assertTrue(math.isclose(r.routes[6].rate, h.calls_rate_closed(4, self.H),
                                     rel_tol=1e-12))
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[100, 101, -100]),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates],
                         [h.calls_rate_exact(n, self.H) for n in (4, 2, 1)])

    def test_omit_routes(self):
        r = self.record([200, 201, 200], omit_routes=True)
        self.assertEqual(len(r.routes), 0)
        self.assertEqual(r.recorded, 3)
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[200, 201]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [h.calls_rate_exact(2, self.H), 1.0])

    def test_empty_is_invalid(self):
        e = self.assertRpcError(INVALID, self.stub.RecordArrival, P.cr.RecordArrivalRequest())
        self.assertIn("owners", e.details())
        self.assertRpcError(INVALID, self.stub.RecordArrival,
                            P.cr.RecordArrivalRequest(omit_routes=True))

    def test_fallback_is_splitmix64(self):
        owners = list(range(300, 340)) + [0, -1, 2**63 - 1, -2**63, 0x9e3779b97f4a7c15 - 2**64]
        r = self.record(owners)
        self.assertEqual([x.preferred_shard for x in r.routes],
                         [h.fallback_shard(o, 6) for o in owners])
        # Known values of the finalizer, so the reference itself is checked.
        self.assertEqual(h.splitmix64(0), 0xe220a8397b1dcdaf)
        self.assertEqual(h.splitmix64(1), 0x910a2dec89025cc1)

    def test_concurrent_exact_counts(self):
        # 8 client threads x 500 calls over overlapping owner sets (20 owners
        # shared by all, 2 of each thread's own), half the threads on one
        # shared channel and half on their own. Calls clock with H = 1e5, so
        # the rate is ~n for these counts: an arrival lost or counted twice
        # shows at once. The recurrence does not depend on the order of
        # arrivals, so the rate is bit-identical to r = r * d + 1, n times.
        H = 100000.0
        sc = self.start_sidecar("--estimator-clock", "calls", "--half-life", "100000",
                                "--replan-interval", "0", "--threads", "4")
        threads, calls = 8, 500
        shared = sc.channel()
        errors = []
        per_thread = []

        def worker(k):
            try:
                stub = sc.stub(shared if k % 2 == 0 else sc.channel())
                rng = random.Random(100 + k)
                mine = {}
                for i in range(calls):
                    owners = [rng.randrange(20) for _ in range(rng.randint(1, 4))]
                    owners.append(1000 + 10 * k + i % 2)
                    r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners,
                                                                     omit_routes=i % 3 == 0),
                                           timeout=h.RPC_TIMEOUT)
                    if r.recorded != len(owners):
                        raise AssertionError("recorded %d of %d" % (r.recorded, len(owners)))
                    for o in owners:
                        mine[o] = mine.get(o, 0) + 1
                per_thread.append(mine)
            except Exception as e:  # reported by the main thread
                errors.append(repr(e))

        ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        self.assertFalse(any(t.is_alive() for t in ts), "workers still running")
        self.assertEqual(errors, [])
        total = {}
        for c in per_thread:
            for o, n in c.items():
                total[o] = total.get(o, 0) + n
        self.assertEqual(len(total), 20 + 2 * threads)
        g = sc.stub().GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(g.tracked_owners, len(total))
        self.assertEqual([x.owner for x in g.rates], sorted(total))
        for x in g.rates:
            n = total[x.owner]
            self.assertTrue(math.isclose(x.rate, h.calls_rate_closed(n, H), rel_tol=1e-12),
                            (x.owner, n, x.rate))
            self.assertEqual(x.rate, h.calls_rate_exact(n, H), (x.owner, n))
        sc.assert_clean_exit(self)

    def test_seconds_clock_first_arrival(self):
        # default: seconds, H = 20; the plan rule's fallback shards
        sc = self.start_sidecar("--replan-interval", "0", "--route-by", "plan")
        r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[5, 6]),
                                    timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in r.routes], [math.log(2) / 20] * 2)
        self.assertEqual([x.preferred_shard for x in r.routes],
                         [h.fallback_shard(5, 8), h.fallback_shard(6, 8)])
        # Rates decay with time, never grow without arrivals.
        g = sc.stub().GetRates(P.cr.GetRatesRequest(owners=[5]), timeout=h.RPC_TIMEOUT)
        self.assertLessEqual(g.rates[0].rate, math.log(2) / 20)
        self.assertGreater(g.rates[0].rate, 0.9 * math.log(2) / 20)
        sc.assert_clean_exit(self)

    def test_weights_change_rates_exactly(self):
        # Calls clock: r = r * d + w per arrival, so the weights show bit for
        # bit; routes are plan's as ever.
        owners = [400, 401, 400, 400]
        weights = [1000.0, 0.5, 2500.0, 1.0]
        r = self.record(owners, weights=weights)
        d, acc, want = h.calls_decay(self.H), {}, []
        for o, w in zip(owners, weights):
            acc[o] = acc.get(o, 0.0) * d + w
            want.append(acc[o])
        self.assertEqual([x.rate for x in r.routes], want)
        self.assertEqual([x.preferred_shard for x in r.routes],
                         [h.fallback_shard(o, 6) for o in owners])
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=[400, 401]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [acc[400], acc[401]])
        # Empty weights are weights of 1: the same as no field.
        r = self.record([402, 402], weights=[])
        self.assertEqual([x.rate for x in r.routes], [1.0, h.calls_rate_exact(2, self.H)])

    def test_bad_weights_name_the_index_and_record_nothing(self):
        owners = [500, 501, 502]
        cases = [([1, 2, -1], "weights[2] must be in (0, 1e+09], got -1"),
                 ([1, 0, 1], "weights[1] must be in (0, 1e+09], got 0"),
                 ([math.nan, 1, 1], "weights[0] must be in (0, 1e+09], got nan"),
                 ([1, 1, math.inf], "weights[2] must be in (0, 1e+09], got inf"),
                 ([1, 1e9 + 1, 1], "weights[1] must be in (0, 1e+09], got 1000000001"),
                 ([1, 2], "weights must be empty or one per owner (3), got 2"),
                 ([1, 2, 3, 4], "weights must be empty or one per owner (3), got 4")]
        for weights, msg in cases:
            for omit in (False, True):
                e = self.assertRpcError(INVALID, self.stub.RecordArrival,
                                        P.cr.RecordArrivalRequest(owners=owners, weights=weights,
                                                                  omit_routes=omit))
                self.assertEqual(e.details(), msg)
        g = self.stub.GetRates(P.cr.GetRatesRequest(owners=owners), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [0.0] * 3)
        # Owners come first: empty owners with weights is the owners error.
        e = self.assertRpcError(INVALID, self.stub.RecordArrival,
                                P.cr.RecordArrivalRequest(weights=[1.0]))
        self.assertEqual(e.details(), "owners must not be empty")


def ring_order(owner, n_shards, vnodes=64):
    """The shards of owner's consistent-hash ring walk, each once (ring.h)."""
    points = sorted((h.splitmix64((h.splitmix64((s << 32) | k) + 1) & h.MASK64), s)
                    for s in range(n_shards) for k in range(vnodes))
    i = bisect.bisect_left(points, (h.splitmix64(owner), -1))
    order = []
    for j in range(len(points)):
        s = points[(i + j) % len(points)][1]
        if s not in order:
            order.append(s)
    return order


class BoundedRouteTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--route-by", "bounded", "--n-shards", "4", "--replan-interval", "0")

    def route(self, owner, weight):
        r = self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[owner], weights=[weight]),
                                    timeout=h.RPC_TIMEOUT)
        return r.routes[0].preferred_shard

    def test_outstanding_work_moves_routes_and_outcomes_release_it(self):
        order = ring_order(7, 4)
        # A cold owner walks its ring: its first shard, not owner mod R...
        self.assertEqual(self.route(7, 100), order[0])
        # ...and past it while that shard holds 100 > 1.25 x 100 / 4.
        self.assertEqual(self.route(7, 100), order[1])
        r = self.stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(owner=7, shard=order[0]), P.cr.Outcome(owner=7, shard=order[1])]),
            timeout=h.RPC_TIMEOUT)
        self.assertEqual((r.accepted, r.rejected), (2, 0))
        # Both done: back to its first shard. Released twice is nothing left.
        self.assertEqual(self.route(7, 1), order[0])
        r = self.stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[
            P.cr.Outcome(owner=7, shard=order[1])]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.rejected, 1)


class RatesForgetTest(h.SidecarTestCase):
    SHARED = False

    def test_get_rates_and_forget(self):
        H = 2.0
        sc = self.start_sidecar("--estimator-clock", "calls", "--half-life", "2",
                                "--replan-interval", "0")
        stub = sc.stub()
        g = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual((len(g.rates), g.tracked_owners), (0, 0))
        owners = [50, -3, 7, 50, 2**62, 7, 50]
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners), timeout=h.RPC_TIMEOUT)
        n = {50: 3, -3: 1, 7: 2, 2**62: 1}
        # Listed owners in request order, 0.0 for unknown ones, repeats kept.
        g = stub.GetRates(P.cr.GetRatesRequest(owners=[7, 999, 50, -3, 7]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([(x.owner, x.rate) for x in g.rates],
                         [(7, h.calls_rate_exact(2, H)), (999, 0.0),
                          (50, h.calls_rate_exact(3, H)), (-3, 1.0),
                          (7, h.calls_rate_exact(2, H))])
        self.assertEqual(g.tracked_owners, 4)
        # Empty list: every tracked owner, sorted by id.
        g = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual([(x.owner, x.rate) for x in g.rates],
                         [(o, h.calls_rate_exact(n[o], H)) for o in sorted(n)])
        self.assertEqual(g.tracked_owners, 4)
        # Forget counts the listed owners that were tracked.
        f = stub.Forget(P.cr.ForgetRequest(owners=[7, 12345, -3]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(f.forgotten, 2)
        f = stub.Forget(P.cr.ForgetRequest(owners=[7]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(f.forgotten, 0)
        f = stub.Forget(P.cr.ForgetRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(f.forgotten, 0)
        g = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.owner for x in g.rates], [50, 2**62])
        self.assertEqual(g.tracked_owners, 2)
        g = stub.GetRates(P.cr.GetRatesRequest(owners=[7, -3]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in g.rates], [0.0, 0.0])
        # A forgotten owner starts over.
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[7]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.routes[0].rate, 1.0)
        sc.assert_clean_exit(self)

    def test_max_owners_evicts(self):
        sc = self.start_sidecar("--max-owners", "3", "--estimator-clock", "calls",
                                "--replan-interval", "0")
        stub = sc.stub()
        stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 1, 1, 2, 2, 2, 3, 3]),
                           timeout=h.RPC_TIMEOUT)
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[4, 5, 6]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in r.routes], [1.0, 1.0, 1.0])  # new owners start at 1
        g = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(g.tracked_owners, 3)
        self.assertEqual(len(g.rates), 3)
        sc.assert_clean_exit(self)

    def test_compressed_requests(self):
        # Refused by default (red team N3: 61 KB of gzip inflated to 60 MiB);
        # with --compressed-requests inflate, inflated within the limit.
        sc = self.start_sidecar("--max-message-bytes", "65536", "--estimator-clock", "calls",
                                "--replan-interval", "0", "--compressed-requests", "inflate")
        ch = grpc.insecure_channel(sc.target, compression=grpc.Compression.Gzip)
        self.addCleanup(ch.close)
        stub = sc.stub(ch)
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[3, 3]), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in r.routes], [1.0, h.calls_rate_exact(2, 20.0)])
        # The limit applies to the decompressed size: 100,000 zeros gzip to a
        # few hundred bytes but are 100 KB.
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.RecordArrival,
                            P.cr.RecordArrivalRequest(owners=[0] * 100000, omit_routes=True))
        g = stub.GetRates(P.cr.GetRatesRequest(owners=[0]), timeout=h.RPC_TIMEOUT)
        self.assertEqual((g.rates[0].rate, g.tracked_owners), (0.0, 1))
        ch.close()
        sc.assert_clean_exit(self)

    def test_get_rates_over_send_limit(self):
        sc = self.start_sidecar("--max-message-bytes", "65536", "--estimator-clock", "calls",
                                "--replan-interval", "0")
        stub = sc.stub()
        owners = list(range(1000, 7000))  # ~6000 x 14 bytes: over 65536 when listed in full
        r = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=owners, omit_routes=True),
                               timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.recorded, 6000)
        e = self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.GetRates,
                                P.cr.GetRatesRequest())
        self.assertIn("65536", e.details())
        self.assertIn("max-message-bytes", e.details())
        # Listing owners still works, and so does the whole list once it fits.
        g = stub.GetRates(P.cr.GetRatesRequest(owners=owners[:50]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(len(g.rates), 50)
        self.assertEqual(g.tracked_owners, 6000)
        f = stub.Forget(P.cr.ForgetRequest(owners=owners[:5000]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(f.forgotten, 5000)
        g = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.owner for x in g.rates], owners[5000:])
        self.assertEqual(g.tracked_owners, 1000)
        sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
