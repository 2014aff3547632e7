"""Replicas over one real redis-server (--state-backend): three sidecars given
arrivals at random merge to exactly one sidecar's rates and answer the same
table generation and routes; the leader's published plans count and log as
plans, a follower's installs do not; a follower merges while merged rates
are asked for and stops after; a killed leader is replaced within its
lease; with Redis killed every replica keeps serving and recovers when it
returns; a restarted replica answers the published routes at once; bad
URLs, an unreachable Redis and the calls clock are refused or degrade, as
the flags say, and never crash; with a password file they AUTH, and a wrong
or unreadable one is a backend that is down, or exit 2 at start. The
leader's endpoint set is every replica's, shard for shard, whatever each
one's own history; a follower's DrainEndpoint and SetEndpoints are checked
there and forwarded to the leader."""
import json
import os
import random
import re
import signal
import struct
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
from harness import P  # noqa: E402

H = 1e9  # --half-life: ms between the replicas' and the reference's calls cost < 1e-12
OFFSETS_S = 2e-3  # two sidecars' wall-clock offsets, each held within 1 ms
LEASE = 1.0
OWNERS = list(range(-20, 40))
QUIET = 999
FAST = ("--half-life", "%g" % H, "--sync-interval", "0.1", "--lease-ttl", "%g" % LEASE,
        "--replica-ttl", "5", "--backend-timeout", "200", "--n-shards", "4",
        "--warm-slots-per-shard", "4", "--route-by", "plan")


def scrape(sc):
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % sc.config["metrics_port"],
                                timeout=10) as r:
        text = r.read().decode()
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(cacheroute_\w+) (\S+)$", text, re.M)}


def replica(redis, rid, *flags, cluster="t", env=None):
    return h.Sidecar("--state-backend", redis.url, "--replica-id", rid, "--cluster", cluster,
                     "--metrics-listen", "127.0.0.1:0", *(FAST + flags), metrics=False,
                     env=env)


def routes(sc, owners=OWNERS):
    """The table generation and each owner's route, asked with arrivals of
    weight 1e-300: rates (and so replans) stay as they were."""
    r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=owners,
                                                          weights=[1e-300] * len(owners)),
                                timeout=h.RPC_TIMEOUT)
    return r.table_generation, [(x.owner, x.admitted, x.preferred_shard) for x in r.routes]


def pushed_owners(redis, rid, cluster="t"):
    """The owners in a replica's list of pushed chunks (replica.h)."""
    owners = set()
    for chunk in redis.cmd("LRANGE", "cr:{%s}:r:%s" % (cluster, rid), 0, -1) or ():
        version, n = struct.unpack_from("<IQ", chunk)
        assert version == 1 and len(chunk) == 12 + 24 * n, (version, n, len(chunk))
        owners.update(struct.unpack_from("<q", chunk, 12 + 24 * k)[0] for k in range(n))
    return owners


def own_rate(sc, owner=OWNERS[0]):
    return sc.stub().GetRates(P.cr.GetRatesRequest(owners=[owner]),
                              timeout=h.RPC_TIMEOUT).rates[0].rate


def leader_of(scs):
    lead = [sc for sc in scs if scrape(sc).get("cacheroute_replica_leader") == 1]
    return lead[0] if len(lead) == 1 else None


def agree(scs, admitting=False):
    """Same generation (> 0) and same routes on every replica (admitting
    some owner, when asked), or None."""
    got = [routes(sc) for sc in scs]
    if admitting and not any(adm for _, adm, _ in got[0][1]):
        return None
    return got[0] if got[0][0] > 0 and all(g == got[0] for g in got) else None


class ReplicaTestCase(h.SidecarTestCase):
    SHARED = False

    def redis(self, **kw):
        r = h.Redis(**kw)
        self.addCleanup(r.kill)
        return r

    def replicas(self, redis, n=3, *flags, cluster="t"):
        out = []
        for i in range(n):
            sc = replica(redis, "r%d" % i, *flags, cluster=cluster)
            self.addCleanup(sc.kill)
            out.append(sc)
        return out


class MergeTest(ReplicaTestCase):
    def test_merged_rates_are_one_sidecars_and_tables_agree(self):
        redis = self.redis()
        scs = self.replicas(redis, 3, "--replan-interval", "0.2")
        ref = self.start_sidecar("--half-life", "%g" % H, "--replan-interval", "0")
        rng = random.Random(13)
        arrivals = [rng.choice(OWNERS) for _ in range(600)]
        parts = [[], [], []]
        for o in arrivals:
            parts[rng.randrange(3)].append(o)
        for sc, part in zip(scs, parts):
            sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=part, omit_routes=True),
                                    timeout=h.RPC_TIMEOUT)
        ref.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=arrivals, omit_routes=True),
                                 timeout=h.RPC_TIMEOUT)
        lead = h.poll(lambda: leader_of(scs), 5, what="one leader")
        want = {r.owner: r.rate for r in
                ref.stub().GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT).rates}

        def merged_matches():
            try:
                got = lead.stub().GetRates(P.cr.GetRatesRequest(merged=True),
                                           timeout=h.RPC_TIMEOUT)
            except h.grpc.RpcError:
                return None
            rates = {r.owner: r.rate for r in got.rates}
            if set(rates) != set(want):
                return None
            worst = max(abs(rates[o] - want[o]) / want[o] for o in want)
            return worst <= 1e-9 and (worst,)
        h.poll(merged_matches, 10, interval=0.1, what="merged rates within 1e-9 of one sidecar's")
        # Every owner's route, from one generation on every replica.
        gen, got = h.poll(lambda: agree(scs, admitting=True), 10, interval=0.05,
                          what="tables that agree")
        self.assertEqual(len(got), len(OWNERS))
        m = scrape(lead)
        self.assertEqual(m["cacheroute_state_backend_up"], 1)
        self.assertEqual(m["cacheroute_replica_replicas_seen"], 3)
        self.assertGreaterEqual(m["cacheroute_replica_tables_published_total"], 1)
        follower = [sc for sc in scs if sc is not lead][0]
        self.assertGreaterEqual(scrape(follower)["cacheroute_replica_tables_installed_total"], 1)
        for sc in scs:
            sc.assert_clean_exit(self)
        ref.assert_clean_exit(self)

    def check_skew(self, skew, weight):
        """A replica whose wall clock is skew seconds off: the leader's merge
        weighs its counts by weight, and it warns about the skew once."""
        redis = self.redis()
        lead = replica(redis, "r0", "--replan-interval", "0")
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 5, what="one leader")
        skewed = h.Sidecar("--state-backend", redis.url, "--replica-id", "r1", "--cluster", "t",
                           *FAST, env={"CACHEROUTE_TEST_CLOCK_SKEW_S": "%g" % skew})
        self.addCleanup(skewed.kill)
        ref = self.start_sidecar("--half-life", "%g" % H, "--replan-interval", "0")
        for sc in (skewed, ref):
            sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS * 2),
                                    timeout=h.RPC_TIMEOUT)
        want = own_rate(ref) * weight

        def skewed_merge():
            try:
                got = lead.stub().GetRates(P.cr.GetRatesRequest(owners=[OWNERS[0]], merged=True),
                                           timeout=h.RPC_TIMEOUT).rates[0].rate
            except h.grpc.RpcError:
                return None
            return abs(got / want - 1) <= 1e-9 and got
        h.poll(skewed_merge, 10, interval=0.1, what="the merge weighed by %.12g" % weight)
        warned = skewed.wait_for(lambda e: e.get("msg", "").startswith("wall clock skewed"), 5)
        self.assertAlmostEqual(warned["skew_s"], skew, delta=1)
        self.assertEqual(len(skewed.find_events(
            lambda e: e.get("msg", "").startswith("wall clock skewed"))), 1)
        for sc in (lead, skewed, ref):
            sc.assert_clean_exit(self)

    def test_a_skewed_replica_is_weighed_2_to_the_skew_over_h(self):
        # 1000 s behind: its arrivals weigh 2^(-1000/H), 1 - 6.9e-7.
        self.check_skew(-1000.0, 2 ** (-1000.0 / H))

    def test_a_replica_ahead_counts_as_of_the_merge(self):
        # 1000 s ahead: a time past the merge's counts as the merge's, so its
        # counts weigh 1, not 2^(1000/H) (which the 1e-9 bound would catch).
        self.check_skew(1000.0, 1.0)

    def test_merged_needs_a_backend(self):
        sc = self.start_sidecar("--replan-interval", "0")
        self.assertRpcError(h.grpc.StatusCode.FAILED_PRECONDITION, sc.stub().GetRates,
                            P.cr.GetRatesRequest(merged=True), details_re="--state-backend")
        sc.assert_clean_exit(self)


class PlanReportTest(ReplicaTestCase):
    def test_the_leaders_cluster_plans_count_and_log_as_plans(self):
        """The leader's published plans are plans (metrics and the plan
        line, with the published generation); a follower's install of one
        is not."""
        redis = self.redis()
        scs = self.replicas(redis, 2, "--replan-interval", "0.2")
        lead = h.poll(lambda: leader_of(scs), 5, what="one leader")
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS, omit_routes=True),
                                  timeout=h.RPC_TIMEOUT)
        gen, _ = h.poll(lambda: agree(scs, admitting=True), 10, interval=0.05,
                        what="tables that agree and admit")
        line = lead.wait_for(lambda e: e.get("msg") == "plan installed" and
                             e.get("generation") == gen, 5, what="the plan line of %d" % gen)
        self.assertEqual(line["by"], "leader")
        m = scrape(lead)
        self.assertGreaterEqual(m["cacheroute_plans_installed_total"], 1)
        self.assertGreaterEqual(m["cacheroute_plans_total"], m["cacheroute_plans_installed_total"])
        self.assertGreaterEqual(m["cacheroute_plan_duration_seconds_count"], 1)
        follower = [sc for sc in scs if sc is not lead][0]
        f = scrape(follower)
        self.assertGreaterEqual(f["cacheroute_replica_tables_installed_total"], 1)
        self.assertEqual(f["cacheroute_plans_total"], 0)
        self.assertEqual(follower.find_events(lambda e: e.get("msg") == "plan installed"), [])
        for sc in scs:
            sc.assert_clean_exit(self)


class MergePacingTest(ReplicaTestCase):
    DEMAND_S = 1.0  # CACHEROUTE_TEST_MERGE_DEMAND_S, for the default 30 s

    def test_the_first_merged_call_waits_for_a_merge(self):
        # GetRates(merged=true) answered UNAVAILABLE until a merge had run on
        # that replica, so every client's first call failed. Now it waits for
        # one (bounded), with syncs 2 s apart.
        redis = self.redis()
        lead = replica(redis, "r0", "--replan-interval", "0", "--sync-interval", "2")
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 10, what="one leader")
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS, omit_routes=True),
                                  timeout=h.RPC_TIMEOUT)
        h.poll(lambda: pushed_owners(redis, "r0") == set(OWNERS), 10, what="the leader's push")
        follower = replica(redis, "r1", "--replan-interval", "0", "--sync-interval", "2")
        self.addCleanup(follower.kill)
        h.poll(lambda: scrape(follower)["cacheroute_state_backend_up"] == 1, 10,
               what="backend_up 1")
        t0 = time.monotonic()
        r = follower.stub().GetRates(P.cr.GetRatesRequest(merged=True), timeout=h.RPC_TIMEOUT)
        self.assertLess(time.monotonic() - t0, 2.0)  # woken at once, not the next sync
        self.assertEqual(r.tracked_owners, len(OWNERS))
        for sc in (lead, follower):
            sc.assert_clean_exit(self)

    def test_a_follower_merges_while_merged_rates_are_asked_for(self):
        """A follower never plans: it merges only while GetRates(merged)
        demand lasts, then stops."""
        redis = self.redis()
        lead = replica(redis, "r0", "--replan-interval", "0")
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 5, what="one leader")
        follower = replica(redis, "r1", "--replan-interval", "0",
                           env={"CACHEROUTE_TEST_MERGE_DEMAND_S": "%g" % self.DEMAND_S})
        self.addCleanup(follower.kill)
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS, omit_routes=True),
                                  timeout=h.RPC_TIMEOUT)
        h.poll(lambda: scrape(follower)["cacheroute_state_backend_up"] == 1, 5,
               what="backend_up 1")
        time.sleep(0.5)  # five syncs without demand
        merges = lambda: scrape(follower)["cacheroute_replica_merges_total"]  # noqa: E731
        self.assertEqual(merges(), 0)

        def merged():
            try:
                return follower.stub().GetRates(P.cr.GetRatesRequest(merged=True),
                                                timeout=h.RPC_TIMEOUT).rates
            except h.grpc.RpcError:
                return None
        self.assertEqual(len(h.poll(merged, 5, interval=0.05, what="merged rates")),
                         len(OWNERS))
        asked = time.monotonic()
        first = merges()
        self.assertGreaterEqual(first, 1)
        h.poll(lambda: merges() >= first + 2, self.DEMAND_S, interval=0.05,
               what="merges at each sync while asked")
        time.sleep(max(0.0, asked + self.DEMAND_S + 0.3 - time.monotonic()))
        done = merges()
        time.sleep(0.5)  # five syncs after the demand ended
        self.assertEqual(merges(), done)
        self.assertLessEqual(done, first + self.DEMAND_S / 0.1 + 2)  # at most one a sync
        for sc in (lead, follower):
            sc.assert_clean_exit(self)


class FaultTest(ReplicaTestCase):
    def test_leader_killed_is_replaced_within_the_lease(self):
        redis = self.redis()
        scs = self.replicas(redis, 3, "--replan-interval", "0.2")
        lead = h.poll(lambda: leader_of(scs), 5, what="one leader")
        h.poll(lambda: agree(scs), 10, interval=0.05, what="tables that agree")
        rest = [sc for sc in scs if sc is not lead]
        t0 = time.monotonic()
        lead.kill()
        new = h.poll(lambda: leader_of(rest), LEASE * 4, interval=0.02, what="a new leader")
        took = time.monotonic() - t0
        # The lease expires within LEASE of the kill; a follower tries every LEASE / 3.
        self.assertLess(took, LEASE * 4 / 3 + 0.3, "takeover took %.2fs" % took)
        gen, _ = h.poll(lambda: agree(rest), 10, interval=0.05, what="tables that agree")
        self.assertGreater(scrape(new)["cacheroute_replica_tables_published_total"], 0)
        for sc in rest:
            sc.assert_clean_exit(self)

    def test_redis_killed_every_replica_serves_then_recovers(self):
        redis = self.redis()
        # --replica-ttl 60: no periodic full push (every 30 s) within the test.
        scs = self.replicas(redis, 3, "--replan-interval", "0.2", "--replica-ttl", "60")
        h.poll(lambda: agree(scs), 10, interval=0.05, what="tables that agree")
        for sc in scs:  # an owner touched only before Redis goes
            sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[QUIET]),
                                    timeout=h.RPC_TIMEOUT)
        time.sleep(0.3)
        redis.kill()
        for sc in scs:
            h.poll(lambda: scrape(sc)["cacheroute_state_backend_up"] == 0, 5,
                   what="backend_up 0")
        for sc in scs:
            t0 = time.monotonic()
            gen, got = routes(sc)
            self.assertGreater(gen, 0)
            self.assertEqual(len(got), len(OWNERS))
            sc.stub().SelectInjection(P.cr.SelectInjectionRequest(request_id="x",
                                                                  prompt_tokens=10),
                                      timeout=h.RPC_TIMEOUT)
            plan = sc.stub().Plan(h.plan_request(from_estimator=True), timeout=h.RPC_TIMEOUT)
            self.assertEqual(plan.table.generation, 0)  # not installed
            self.assertRpcError(h.grpc.StatusCode.FAILED_PRECONDITION, sc.stub().Plan,
                                h.plan_request(from_estimator=True, install=True),
                                details_re="leader's published table")
            self.assertLess(time.monotonic() - t0, 1.0, "an RPC waited on Redis")
            self.assertEqual(len([e for e in sc.events
                                  if e.get("msg", "").startswith("state backend down")]), 1)
        self.assertRpcError(h.grpc.StatusCode.UNAVAILABLE, scs[0].stub().GetRates,
                            P.cr.GetRatesRequest(merged=True), details_re="down")
        back = self.redis(port=redis.port)  # empty: generations go on from the replicas'
        for sc in scs:
            h.poll(lambda: scrape(sc)["cacheroute_state_backend_up"] == 1, 10,
                   what="backend_up 1")
        # A table published to the new Redis, above every generation before.
        h.poll(lambda: (lambda a: a and a[0] > gen)(agree(scs)), 10, interval=0.05,
               what="tables that agree, newer than Redis's loss")
        # The new, empty Redis gets every replica's counts back (a full push),
        # the owner untouched since too.
        for i in range(3):
            h.poll(lambda: QUIET in pushed_owners(back, "r%d" % i), 5,
                   what="replica r%d's counts pushed again" % i)
            self.assertEqual(pushed_owners(back, "r%d" % i), set(OWNERS) | {QUIET})
        self.assertIsNotNone(back.cmd("HGET", "cr:{t}:table", "generation"))
        for sc in scs:
            sc.assert_clean_exit(self)

    def test_restarted_replica_answers_the_published_routes_at_once(self):
        redis = self.redis()
        scs = self.replicas(redis, 2, "--replan-interval", "0.3")
        lead = h.poll(lambda: leader_of(scs), 5, what="one leader")
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS + OWNERS[:5] * 3),
                                  timeout=h.RPC_TIMEOUT)
        follower = [sc for sc in scs if sc is not lead][0]
        follower.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[OWNERS[0]] * 4),
                                      timeout=h.RPC_TIMEOUT)
        gen, want = h.poll(lambda: agree(scs, admitting=True), 10, interval=0.05,
                           what="tables that agree and admit")
        # The clock starts before the first read and stops after the
        # second, so the interval it measures holds the sidecars' own; each
        # sidecar holds its wall-minus-monotonic offset to within 1 ms
        # (OFFSET_SLACK_S), so the two may disagree by up to 2 ms more.
        t_own = time.time()
        own = own_rate(follower)
        time.sleep(0.3)  # a push after the last arrival
        follower.assert_clean_exit(self)
        published = int(redis.cmd("HGET", "cr:{t}:table", "generation"))
        again = replica(redis, "r%d" % scs.index(follower), "--replan-interval", "0.3")
        self.addCleanup(again.kill)
        gen2, got = routes(again)  # the first call after serving
        self.assertGreaterEqual(gen2, published)
        self.assertEqual(got, want)  # the same rates replan to the same table
        # Its own counts came back too (not the merged ones: it had none).
        # Decayed by the time the restart took, no more (H = 1e9 s).
        ratio = own_rate(again) / own
        elapsed = time.time() - t_own
        self.assertLessEqual(ratio, 2 ** (OFFSETS_S / H) + 1e-12)
        self.assertGreaterEqual(ratio, 2 ** (-(elapsed + OFFSETS_S) / H) - 1e-12)
        again.assert_clean_exit(self)
        lead.assert_clean_exit(self)


class NotifyTest(ReplicaTestCase):
    def test_followers_install_a_publish_at_once(self):
        """With syncs 3 s apart a follower that only polled would lag the
        leader's publish by 1.5 s on average; notified, it is there within
        a round trip."""
        redis = self.redis()
        flags = ("--sync-interval", "3", "--lease-ttl", "10", "--replica-ttl", "20",
                 "--replan-interval", "0.1")
        lead = replica(redis, "r0", *flags)
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 10, what="one leader")
        time.sleep(1.0)  # the follower's syncs about half a period after the leader's
        follower = replica(redis, "r1", *flags)
        self.addCleanup(follower.kill)
        scs = [lead, follower]
        lags = []
        for _ in range(3):
            before = routes(lead)[0]
            gen = h.poll(lambda: (lambda g: g if g > before else None)(routes(lead)[0]), 8,
                         interval=0.01, what="a new publish")
            t0 = time.monotonic()
            h.poll(lambda: routes(follower)[0] >= gen, 5, interval=0.01,
                   what="the follower at generation %d" % gen)
            lags.append(time.monotonic() - t0)
        self.assertLess(max(lags), 0.5, lags)
        for sc in scs:
            sc.assert_clean_exit(self)


class RefusedTableTest(ReplicaTestCase):
    """Red team, round two: what a follower installs from Redis."""

    def refusal(self, sc):
        return sc.wait_for(lambda e: e.get("msg") == "published table refused", 10,
                           what="the refusal line")

    def test_generations_only_move_forward(self):
        # N12: a Redis generation of "-5" was installed as 2^64 - 5, and
        # followers installed any generation that differed, lower ones too.
        redis = self.redis()
        lead = replica(redis, "r0", "--replan-interval", "0.2")
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 5, what="one leader")
        follower = replica(redis, "r1", "--replan-interval", "0")
        self.addCleanup(follower.kill)
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS),
                                  timeout=h.RPC_TIMEOUT)
        gen, _ = h.poll(lambda: agree([lead, follower], admitting=True), 10, interval=0.05,
                        what="tables that agree")
        # Nobody publishes from now on: the lease is someone else's.
        redis.cmd("SET", "cr:{t}:lease", "intruder", "PX", "600000")
        h.poll(lambda: scrape(lead).get("cacheroute_replica_leader") == 0, 5,
               what="the leader to step down")
        gen = routes(lead)[0]
        for bad in ("-5", str(gen - 1), "18446744073709551611", "1e3"):
            redis.cmd("HSET", "cr:{t}:table", "generation", bad)
            ev = self.refusal(follower)
            self.assertIn('generation "%s" is refused' % bad, ev["reason"])
            self.assertEqual(routes(follower)[0], gen)
            follower.events.clear()
        time.sleep(0.5)  # many polls: each refusal said and counted once
        self.assertEqual(scrape(follower)["cacheroute_replica_tables_refused_total"], 4)
        for sc in (lead, follower):
            sc.assert_clean_exit(self)

    def test_a_replica_of_another_shard_count_installs_nothing(self):
        # N10: a replica started with --n-shards 4 installed the cluster's
        # 8-shard table and routed to shards 4-7.
        redis = self.redis()
        lead = replica(redis, "r0", "--replan-interval", "0.2", "--n-shards", "8")
        self.addCleanup(lead.kill)
        h.poll(lambda: leader_of([lead]), 5, what="one leader")
        follower = replica(redis, "r1", "--replan-interval", "0")  # FAST's 4 shards
        self.addCleanup(follower.kill)
        lead.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS),
                                  timeout=h.RPC_TIMEOUT)
        ev = self.refusal(follower)
        self.assertIn("routes over 8 shards, this replica's --n-shards is 4", ev["reason"])
        gen, got = routes(follower)
        self.assertEqual(gen, 0)
        self.assertTrue(all(shard < 4 for _, _, shard in got), got)
        # The leader replans every 0.2 s: later generations are the same
        # refusal, said and counted once.
        h.poll(lambda: routes(lead)[0] >= 3, 10, what="two more generations")
        time.sleep(0.5)
        self.assertEqual(scrape(follower)["cacheroute_replica_tables_refused_total"], 1)
        for sc in (lead, follower):
            sc.assert_clean_exit(self)


def endpoints_doc(*ids):
    return json.dumps({"endpoints": [{"id": i, "address": "%s.svc:8000" % i} for i in ids]})


def write_atomically(path, text):
    """As a ConfigMap update does: a new file renamed over the old."""
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.rename(path + ".tmp", path)


def listed(sc):
    r = sc.stub().ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
    return r.version, [(e.shard, e.id, e.address, e.state) for e in r.endpoints]


class MembershipTest(ReplicaTestCase):
    """The leader's endpoint set is every replica's: same shard numbers,
    states and version; a follower's calls are forwarded to the leader."""

    def start(self, redis, rid, ids):
        """A replica with its own copy of the endpoints file (a pod's
        ConfigMap mount)."""
        path = os.path.join(self.dir, rid + ".json")
        write_atomically(path, endpoints_doc(*ids))
        sc = replica(redis, rid, "--endpoints-file", path, "--replan-interval", "0.2")
        self.addCleanup(sc.kill)
        return sc

    def write_all(self, rids, ids):
        for rid in rids:
            write_atomically(os.path.join(self.dir, rid + ".json"), endpoints_doc(*ids))

    def same_everywhere(self, scs, want_ids=None):
        got = [listed(sc) for sc in scs]
        if any(g != got[0] for g in got):
            return None
        live = [i for _, i, _, state in got[0][1] if state != "gone"]
        return got[0] if want_ids is None or sorted(live) == sorted(want_ids) else None

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="cr-members-")
        self.redis_ = self.redis()
        # The leader alone first: a, b, c; b removed; d joins within b's
        # quarantine, so d takes a new shard (3) where a fresh replica's own
        # history of the same file would give it shard 2.
        self.lead = self.start(self.redis_, "r0", ["a", "b", "c"])
        h.poll(lambda: leader_of([self.lead]), 5, what="r0 leads")
        self.write_all(["r0"], ["a", "c"])
        h.poll(lambda: len([e for e in listed(self.lead)[1] if e[3] == "gone"]) == 1, 5,
               what="b gone on the leader")
        self.write_all(["r0"], ["a", "c", "d"])
        h.poll(lambda: any(e[1] == "d" for e in listed(self.lead)[1]), 5, what="d joined")
        self.followers = [self.start(self.redis_, rid, ["a", "c", "d"]) for rid in ("r1", "r2")]
        self.all = [self.lead] + self.followers

    def test_the_leaders_set_and_its_changes_are_every_replicas(self):
        version, rows = h.poll(lambda: self.same_everywhere(self.all, ["a", "c", "d"]), 10,
                               interval=0.05, what="one endpoint set on every replica")
        self.assertEqual([(r[0], r[1]) for r in rows if r[3] != "gone"],
                         [(0, "a"), (2, "c"), (3, "d")])
        self.assertEqual(rows[1][1:], ("b", "b.svc:8000", "gone"))
        for sc in self.followers:
            m = scrape(sc)
            self.assertEqual(m["cacheroute_replica_leader"], 0)
            self.assertGreaterEqual(m["cacheroute_replica_endpoint_sets_installed_total"], 1)
            self.assertEqual(m["cacheroute_replica_endpoint_set_version"], version)
        # the ConfigMap changes on every pod: e joins at one shard everywhere
        self.write_all(["r0", "r1", "r2"], ["a", "c", "d", "e"])
        v2, rows2 = h.poll(lambda: self.same_everywhere(self.all, ["a", "c", "d", "e"]), 10,
                           interval=0.05, what="e on every replica")
        self.assertGreater(v2, version)
        self.assertEqual([r[1] for r in rows2][:4], ["a", "b", "c", "d"])
        self.assertEqual(rows2[4][1], "e")
        # a bad file on a follower is refused there and changes nothing
        write_atomically(os.path.join(self.dir, "r1.json"), '{"endpoints": []}')
        self.followers[0].wait_for(
            lambda e: e.get("msg") == "endpoints file refused, the set stays", 5)
        self.assertEqual(listed(self.followers[0]), (v2, rows2))

    def test_a_drain_through_a_follower_reaches_every_replica(self):
        h.poll(lambda: self.same_everywhere(self.all, ["a", "c", "d"]), 10, interval=0.05,
               what="one endpoint set on every replica")
        f = self.followers[0]
        d = f.stub().DrainEndpoint(P.cr.DrainEndpointRequest(id="c"), timeout=h.RPC_TIMEOUT)
        self.assertTrue(d.forwarded)
        self.assertEqual((d.change.drained, d.change.sessions_to_move), (0, 0))

        def drained():
            got = self.same_everywhere(self.all)
            return got if got and ("c", "draining") in [(r[1], r[3]) for r in got[1]] else None
        h.poll(drained, 5, interval=0.05, what="c draining on every replica")
        for sc in self.all:
            routes = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=list(range(60))),
                                             timeout=h.RPC_TIMEOUT).routes
            self.assertTrue(routes)
            self.assertNotIn("c", {r.endpoint_id for r in routes})
        self.assertGreaterEqual(scrape(f)["cacheroute_replica_forwarded_total"], 1)
        self.assertGreaterEqual(scrape(self.lead)["cacheroute_replica_forwards_applied_total"], 1)
        # the leader's own DrainEndpoint applies at once, not forwarded
        u = self.lead.stub().DrainEndpoint(P.cr.DrainEndpointRequest(id="c", undrain=True),
                                           timeout=h.RPC_TIMEOUT)
        self.assertFalse(u.forwarded)
        self.assertEqual(u.change.undrained, 1)

    def test_bad_calls_on_a_follower_are_refused_and_not_forwarded(self):
        h.poll(lambda: self.same_everywhere(self.all, ["a", "c", "d"]), 10, interval=0.05,
               what="one endpoint set on every replica")
        f = self.followers[1]
        before = listed(self.lead)
        self.assertRpcError(h.grpc.StatusCode.INVALID_ARGUMENT, f.stub().SetEndpoints,
                            P.cr.SetEndpointsRequest(endpoints=[
                                P.cr.Endpoint(id="p", address="p:80"),
                                P.cr.Endpoint(id="p", address="q:80")]),
                            details='endpoints[1].id "p" is given twice (endpoints[0])')
        self.assertRpcError(h.grpc.StatusCode.INVALID_ARGUMENT, f.stub().DrainEndpoint,
                            P.cr.DrainEndpointRequest(id="nope"),
                            details='endpoint "nope" is not in the set')
        time.sleep(0.5)  # several syncs
        self.assertEqual(scrape(f)["cacheroute_replica_forwarded_total"], 0)
        self.assertEqual(self.redis_.cmd("LLEN", "cr:{t}:forward"), 0)
        self.assertEqual(listed(self.lead), before)
        # a good one is forwarded and lands everywhere
        r = f.stub().SetEndpoints(P.cr.SetEndpointsRequest(endpoints=[
            P.cr.Endpoint(id="a", address="a.svc:8000"),
            P.cr.Endpoint(id="z", address="z.svc:8000")]), timeout=h.RPC_TIMEOUT)
        self.assertTrue(r.forwarded)
        h.poll(lambda: self.same_everywhere(self.all, ["a", "z"]), 5, interval=0.05,
               what="the forwarded set on every replica")


class StartTest(ReplicaTestCase):
    def test_bad_urls_are_config_errors(self):
        for url in ("http://x:1", "redis://", "redis://host", "redis://:6379", "redis://h:0",
                    "redis://h:65536", "redis://h:1/x", "redis://u@h:1", "unix:",
                    "unix:/tmp/s?db=x", "unix:/tmp/s?x=1", "unix:" + "a" * 200):
            for extra in ((), ("--check-config",)):
                r = h.run_sidecar("--state-backend", url, *extra)
                self.assertEqual(r.returncode, 2, (url, r.stderr))
                self.assertIn("--state-backend", r.stderr)
                self.assertIn('"%s' % url[:100], r.stderr)
        r = h.run_sidecar("--state-backend", "redis://127.0.0.1:1", "--replica-id", "a b",
                          "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--replica-id", r.stderr)
        r = h.run_sidecar("--lease-ttl", "10", "--replica-ttl", "5", "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--replica-ttl must be at least --lease-ttl", r.stderr)

    def test_calls_clock_is_refused_with_a_backend(self):
        for extra in ((), ("--check-config",)):
            r = h.run_sidecar("--state-backend", "redis://127.0.0.1:1", "--estimator-clock",
                              "calls", *extra)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("not linear", r.stderr)
        r = h.run_sidecar("--state-backend", "redis://127.0.0.1:1", "--check-config")
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_unreachable_redis_degraded_or_required(self):
        url = "redis://127.0.0.1:%d" % h.free_port()
        r = h.run_sidecar("--state-backend", url, "--backend-start", "require")
        self.assertEqual(r.returncode, 2)
        self.assertIn("cannot reach Redis", r.stderr)
        self.assertIn("--backend-start require", r.stderr)
        with tempfile.TemporaryDirectory() as d:
            r = h.run_sidecar("--state-backend", "unix:%s/none.sock" % d, "--backend-start",
                              "require")
            self.assertEqual(r.returncode, 2)
            self.assertIn("cannot reach Redis", r.stderr)
        sc = h.Sidecar("--state-backend", url, "--metrics-listen", "127.0.0.1:0", *FAST,
                       metrics=False)
        self.addCleanup(sc.kill)
        self.assertEqual(scrape(sc)["cacheroute_state_backend_up"], 0)
        gen, got = routes(sc)
        self.assertEqual((gen, len(got)), (0, len(OWNERS)))
        self.assertRpcError(h.grpc.StatusCode.UNAVAILABLE, sc.stub().GetRates,
                            P.cr.GetRatesRequest(merged=True))
        sc.assert_clean_exit(self)

    def test_unix_socket_backend(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.sock")
            redis = self.redis(unix=path)
            sc = h.Sidecar("--state-backend", "unix:%s?db=3" % path, "--replica-id", "u",
                           "--replan-interval", "0.2", *FAST)
            self.addCleanup(sc.kill)
            h.poll(lambda: routes(sc)[0] > 0, 5, what="a published table")
            self.assertIsNone(redis.cmd("HGET", "cr:{cacheroute}:table", "generation"))
            sc.assert_clean_exit(self)


PASS = "pw-3b1f-s3cret"  # never in a log line or --check-config


class AuthTest(ReplicaTestCase):
    """--state-backend-password-file against a redis-server with
    requirepass."""

    def pw_file(self, text):
        """A file holding text; its path (removed at the end)."""
        fd, path = tempfile.mkstemp(prefix="cr-redis-pw-")
        os.write(fd, text.encode())
        os.close(fd)
        self.addCleanup(lambda: os.path.exists(path) and os.unlink(path))
        return path

    def assert_no_password(self, text):
        self.assertNotIn(PASS, text)
        self.assertNotIn("wrong-" + PASS, text)

    def refused(self, sc):
        return sc.find_events(lambda e: e.get("msg", "").startswith("state backend down")
                              and "state backend refused AUTH: WRONGPASS" in e.get("error", ""))

    def test_the_right_password_syncs(self):
        redis = self.redis(requirepass=PASS)
        good = self.pw_file(PASS + "\n")
        scs = self.replicas(redis, 2, "--state-backend-password-file", good,
                            "--replan-interval", "0.2")
        for sc in scs:
            sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[OWNERS[0]]),
                                    timeout=h.RPC_TIMEOUT)
        want = sum(own_rate(sc) for sc in scs)

        def merged():
            try:
                got = scs[0].stub().GetRates(P.cr.GetRatesRequest(owners=[OWNERS[0]], merged=True),
                                             timeout=h.RPC_TIMEOUT).rates[0].rate
            except h.grpc.RpcError:
                return None
            return abs(got / want - 1) <= 1e-9
        h.poll(merged, 10, interval=0.05, what="merged rates over an AUTHed Redis")
        h.poll(lambda: agree(scs), 10, interval=0.05, what="tables that agree")
        self.assertEqual(scrape(scs[1])["cacheroute_state_backend_up"], 1)
        # Both connections AUTHed: an unauthenticated one could not SUBSCRIBE.
        h.poll(lambda: redis.cmd("PUBSUB", "NUMSUB", "cr:{t}:notify")[1] == 2, 5,
               what="both replicas subscribed")
        for sc in scs:
            self.assert_no_password("\n".join(sc.lines))
            sc.assert_clean_exit(self)

    def test_a_wrong_password_serves_locally_and_retries(self):
        redis = self.redis(requirepass=PASS)
        path = self.pw_file("wrong-" + PASS + "\n")
        sc = replica(redis, "w", "--state-backend-password-file", path)
        self.addCleanup(sc.kill)
        self.assertEqual(scrape(sc)["cacheroute_state_backend_up"], 0)
        gen, got = routes(sc)  # served from local state
        self.assertEqual((gen, len(got)), (0, len(OWNERS)))
        self.assertRpcError(h.grpc.StatusCode.UNAVAILABLE, sc.stub().GetRates,
                            P.cr.GetRatesRequest(merged=True), details_re="refused AUTH")
        time.sleep(1.5)  # several retries (backoff from 0.1 s): still one log line
        self.assertEqual(len(self.refused(sc)), 1, sc.stderr_text())
        self.assertEqual(len(sc.find_events(
            lambda e: e.get("msg", "").startswith("state backend down"))), 1)
        # Fixed in place (a rotated Secret): read again at the next connect.
        with open(path, "w") as f:
            f.write(PASS + "\n")
        h.poll(lambda: scrape(sc)["cacheroute_state_backend_up"] == 1, 10, what="backend_up 1")
        self.assertIsNotNone(h.poll(lambda: redis.cmd("LRANGE", "cr:{t}:r:w", 0, -1), 5,
                                    what="a push"))
        # Wrong again, and SIGHUP: AUTHed again at once, refused, down.
        with open(path, "w") as f:
            f.write("wrong-" + PASS)
        sc.send(signal.SIGHUP)
        h.poll(lambda: scrape(sc)["cacheroute_state_backend_up"] == 0, 5, what="backend_up 0")
        # the gauge may drop a moment before the replica thread's log line
        # is written (seen under TSan): wait for the line, then no third one
        h.poll(lambda: len(self.refused(sc)) >= 2, 5, what="the second refusal logged")
        self.assertEqual(len(self.refused(sc)), 2, sc.stderr_text())
        self.assert_no_password("\n".join(sc.lines))
        sc.assert_clean_exit(self)

    def test_password_file_errors_exit_2(self):
        redis = self.redis(requirepass=PASS)
        with tempfile.TemporaryDirectory() as d:
            missing = os.path.join(d, "none")
            empty = self.pw_file("\n")
            three = self.pw_file("a b " + PASS)
            for path, why in ((missing, "cannot read"), (empty, "empty"),
                              (three, "three words"), (d, "cannot read")):
                for extra in ((), ("--check-config",)):
                    r = h.run_sidecar("--state-backend", redis.url,
                                      "--state-backend-password-file", path, *extra)
                    self.assertEqual(r.returncode, 2, (path, r.stderr))
                    self.assertIn("--state-backend-password-file %s: %s" % (path, why), r.stderr)
                    self.assert_no_password(r.stderr + r.stdout)
            # The variable too; --check-config reads the file, never Redis.
            good = self.pw_file(PASS)
            r = h.run_sidecar("--state-backend", "redis://127.0.0.1:1", "--check-config",
                              env={"CACHEROUTE_STATE_BACKEND_PASSWORD_FILE": good})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn(good, r.stdout)
            self.assert_no_password(r.stdout + r.stderr)
            r = h.run_sidecar("--state-backend", redis.url, "--check-config",
                              env={"CACHEROUTE_STATE_BACKEND_PASSWORD_FILE": missing})
            self.assertEqual(r.returncode, 2)
            self.assertIn("--state-backend-password-file %s: cannot read" % missing, r.stderr)
            # Without a backend the file is not used, so not read.
            r = h.run_sidecar("--state-backend-password-file", missing, "--check-config")
            self.assertEqual(r.returncode, 0, r.stderr)
        # require: a refused AUTH is an unreachable backend.
        wrong = self.pw_file("wrong-" + PASS)
        r = h.run_sidecar("--state-backend", redis.url, "--state-backend-password-file", wrong,
                          "--backend-start", "require")
        self.assertEqual(r.returncode, 2)
        self.assertIn("state backend refused AUTH: WRONGPASS", r.stderr)
        self.assert_no_password(r.stderr)


if __name__ == "__main__":
    h.main()
