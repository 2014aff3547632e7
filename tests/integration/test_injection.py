"""SelectInjection and GetNodeProfile over the wire: decisions against an
independent Python model of the cost formulas (and a few numbers worked out
by hand), reservations, every bad input, the no-driver path, and the NIC
probe on fake sysfs trees given with --sysfs-root."""
import math
import os
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

INVALID = grpc.StatusCode.INVALID_ARGUMENT
TEXT, KV = 1, 2

# A fixed cost model, so every number below follows from these flags.
A, B, C2 = 10.0, 0.1, 2e-6          # --prefill-coeffs (ms, ms/token, ms/token^2)
KV_BYTES = 131072.0                 # --kv-bytes-per-token
EFF, H2D, LOAD_FIXED = 0.825, 25.0, 2.0
MARGIN, PENALTY, LINK = 100.0, 0.5, 10.0
SOURCES = {"fast": (100.0, 0.5), "slow": (10.0, 1.0)}  # name: (Gb/s, rtt ms)
DEFAULT_RTT = 0.2                   # for sources without --kv-source


def model_flags(sysfs):
    flags = ["--prefill-coeffs", "%g,%g,%g" % (A, B, C2), "--kv-bytes-per-token", "131072",
             "--h2d-gbps", "25", "--load-fixed-ms", "2", "--link-efficiency", "0.825",
             "--decision-margin-ms", "100", "--link-queue-penalty", "0.5", "--link-gbps", "10",
             "--sysfs-root", sysfs, "--replan-interval", "0"]
    for name, (gbps, rtt) in SOURCES.items():
        flags += ["--kv-source", "%s=%g,%g" % (name, gbps, rtt)]
    return flags


# ---- the cost model, written independently of inject/ ----

def prefill(s, l):
    return A + B * (l - s) + C2 * (l * l - s * s)


def transfer(c, name):
    gbps, rtt = SOURCES.get(name, (LINK, DEFAULT_RTT))
    return rtt + c * KV_BYTES * 8 / (gbps * 1e9 * EFF) * 1e3


def load(c):
    return LOAD_FIXED + c * KV_BYTES / (H2D * 1e9) * 1e3


def decide(p, k, sources, w, lw=None):
    """(mode, source, reason, text_total, kv_total) for explicit waits."""
    lw = lw or {}
    l = p + k
    text = w + prefill(0, l)
    if k == 0:
        return TEXT, "", "no_knowledge", text, None
    best = None
    for name, c in sources:
        if c == 0:
            continue
        wait = lw.get(name, 0.0)
        kv = max(w, wait + transfer(c, name)) + load(c) + prefill(c, l)
        key = (kv + PENALTY * wait, name)
        if best is None or key < best[0]:
            best = (key, name, kv, wait, transfer(c, name))
    if best is None:
        return TEXT, "", "no_kv_available", text, None
    (score, _), name, kv, wait, tr = best
    if score + MARGIN < text:
        return KV, name, ("kv_hidden_by_queue" if wait + tr <= w else "kv_faster"), text, kv
    # Text: because of the links, if KV would win with every link idle.
    idle = min(max(w, transfer(c, n)) + load(c) + prefill(c, l) for n, c in sources if c)
    return TEXT, name, ("link_congested" if idle + MARGIN < text else "text_faster"), text, kv


def request(p, k, sources=(), w=None, dry=True, gpu=0, rid="r"):
    req = P.cr.SelectInjectionRequest(request_id=rid, prompt_tokens=p, knowledge_tokens=k,
                                      gpu=gpu, dry_run=dry)
    for name, c in sources:
        req.sources.add(name=name, cached_tokens=c)
    if w is not None:
        req.queue_wait_ms = w
    return req


class InjectionTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.sysfs = tempfile.mkdtemp(prefix="cr-sysfs-")  # empty: no NICs
        self.addCleanup(lambda: os.rmdir(self.sysfs))
        self.sc = self.start_sidecar(*model_flags(self.sysfs))
        self.stub = self.sc.stub()

    def select(self, *args, **kw):
        return self.stub.SelectInjection(request(*args, **kw), timeout=h.RPC_TIMEOUT)

    def test_worked_example(self):
        # P=2000, K=8000 from "fast" (100 Gb/s, rtt 0.5 ms), no queue:
        # text  = 10 + 0.1*10000 + 2e-6*10000^2              = 1210 ms
        # xfer  = 0.5 + 8000*131072*8 bits / 82.5 Gb/s         = 102.180097 ms
        # load  = 2 + 8000*131072 B / 25 GB/s                  = 43.94304 ms
        # kv pf = 10 + 0.1*2000 + 2e-6*(10000^2 - 8000^2)      = 282 ms
        # kv    = 102.180097 + 43.94304 + 282                  = 428.123137 ms
        r = self.select(2000, 8000, [("fast", 8000)], w=0.0, rid="worked")
        self.assertEqual((r.mode, r.source, r.reason, r.request_id),
                         (KV, "fast", "kv_faster", "worked"))
        self.assertAlmostEqual(r.text.total_ms, 1210.0, places=9)
        self.assertAlmostEqual(r.text.prefill_ms, 1210.0, places=9)
        self.assertAlmostEqual(r.kv.transfer_ms, 102.18009696969697, places=9)
        self.assertAlmostEqual(r.kv.load_ms, 43.94304, places=9)
        self.assertAlmostEqual(r.kv.prefill_ms, 282.0, places=9)
        self.assertAlmostEqual(r.kv.total_ms, 428.12313696969697, places=9)
        self.assertAlmostEqual(r.saving_ms, 1210.0 - 428.12313696969697, places=9)
        # The same with 500 ms of queue: the transfer hides inside it.
        r = self.select(2000, 8000, [("fast", 8000)], w=500.0)
        self.assertEqual((r.mode, r.reason), (KV, "kv_hidden_by_queue"))
        self.assertAlmostEqual(r.kv.total_ms, 500 + 43.94304 + 282, places=9)
        self.assertAlmostEqual(r.text.total_ms, 1710.0, places=9)

    def test_table_of_cases_against_the_model(self):
        cases = [
            (2000, 0, [("fast", 0)], 0.0),                  # no_knowledge
            (2000, 8000, [], 0.0),                          # no_kv_available
            (2000, 8000, [("fast", 0), ("slow", 0)], 3.0),  # no_kv_available
            (2000, 8000, [("slow", 8000)], 0.0),            # text_faster
            (2000, 8000, [("slow", 8000), ("fast", 8000)], 0.0),
            (2000, 8000, [("fast", 4000), ("slow", 8000)], 250.0),
            (100, 300, [("fast", 300)], 0.0),               # small: margin keeps text
            (100, 300, [("elsewhere", 300)], 0.0),           # --link-gbps default
            (0, 100000, [("fast", 100000)], 0.0),
            (50000, 50000, [("fast", 50000), ("slow", 1)], 2000.0),
            (1, 9999999, [("fast", 9999999)], 0.0),          # P + K = 10^7 exactly
        ]
        for p, k, src, w in cases:
            with self.subTest(p=p, k=k, src=src, w=w):
                r = self.select(p, k, src, w=w)
                mode, source, reason, text, kv = decide(p, k, src, w)
                self.assertEqual((r.mode, r.reason), (mode, reason))
                if mode == KV or kv is not None:
                    self.assertEqual(r.source, source)
                    self.assertTrue(math.isclose(r.kv.total_ms, kv, rel_tol=1e-12))
                    loser, winner = (text, kv) if mode == KV else (kv, text)
                    self.assertTrue(math.isclose(r.saving_ms, loser - winner, rel_tol=1e-9,
                                                 abs_tol=1e-9))
                else:
                    self.assertFalse(r.HasField("kv"))
                    self.assertEqual(r.saving_ms, 0.0)
                self.assertTrue(math.isclose(r.text.total_ms, text, rel_tol=1e-12))

    def test_ties_go_to_the_first_name(self):
        # Identical sources (both unlisted, so the same link): "a" beats "b".
        r = self.select(2000, 8000, [("b", 8000), ("a", 8000)], w=5000.0)
        self.assertEqual((r.mode, r.source), (KV, "a"))

    def test_queue_reservations(self):
        # Two identical text decisions, back to back, no queue_wait_ms: the
        # second waits for the first's reserved prefill (1210 ms, minus the
        # time between the calls).
        first = self.select(2000, 8000, [], dry=False)
        second = self.select(2000, 8000, [], dry=False)
        self.assertEqual(first.text.queue_wait_ms, 0.0)
        self.assertGreater(second.text.queue_wait_ms, 1210.0 - 1000.0)
        self.assertLessEqual(second.text.queue_wait_ms, 1210.0)
        # A dry run sees the queue but adds nothing to it.
        d1 = self.select(2000, 8000, [], dry=True)
        d2 = self.select(2000, 8000, [], dry=True)
        self.assertGreater(d1.text.queue_wait_ms, second.text.queue_wait_ms)
        self.assertLessEqual(d2.text.queue_wait_ms, d1.text.queue_wait_ms)
        # Another GPU index is out of range here (no GPU: only GPU 0).
        self.assertRpcError(INVALID, self.stub.SelectInjection, request(10, 10, gpu=1),
                            details_re=r"gpu")

    def test_link_reservations_end_in_link_congested(self):
        # KV decisions on "fast" reserve its link (~101.7 ms each). With an
        # explicit queue wait the GPU queue plays no part, so only the link
        # wait grows, until text wins because of it.
        seen, waits = [], []
        for _ in range(40):
            r = self.select(2000, 8000, [("fast", 8000)], w=0.0, dry=False)
            seen.append(r.reason)
            waits.append(r.kv.link_wait_ms)
            if r.reason == "link_congested":
                break
        self.assertEqual(seen[0], "kv_faster")
        self.assertEqual(seen[-1], "link_congested", seen)
        self.assertEqual(waits[0], 0.0)
        self.assertEqual(waits, sorted(waits))
        # The model agrees at the link wait the sidecar reported, and with an
        # idle link the same request goes KV.
        mode, _, reason, _, kv = decide(2000, 8000, [("fast", 8000)], 0.0, {"fast": waits[-1]})
        self.assertEqual((mode, reason), (TEXT, "link_congested"))
        self.assertTrue(math.isclose(r.kv.total_ms, kv, rel_tol=1e-12))
        self.assertEqual(decide(2000, 8000, [("fast", 8000)], 0.0)[2], "kv_faster")
        # Another source's link is idle.
        r = self.select(2000, 8000, [("fast", 8000), ("slow", 8000)], w=0.0)
        self.assertEqual(r.kv.link_wait_ms if r.source == "slow" else 0.0, 0.0)

    def test_bad_inputs_reserve_nothing(self):
        long_name = "x" * 129
        bad = [
            (request(10, 100, [("fast", 101)], dry=False), "sources[0].cached_tokens"),
            (request(10, 100, [("ok", 1), ("fast", 101)], dry=False), "sources[1]"),
            (request(10, 100, w=-1.0, dry=False), "queue_wait_ms"),
            (request(10, 100, w=float("nan"), dry=False), "queue_wait_ms"),
            (request(10, 100, w=float("inf"), dry=False), "queue_wait_ms"),
            (request(10, 100, gpu=1, dry=False), "gpu"),
            (request(10, 100, gpu=4294967295, dry=False), "gpu"),
            (request(10, 100, [("s%d" % i, 1) for i in range(65)], dry=False), "sources"),
            (request(10, 100, [("", 1)], dry=False), "sources[0].name"),
            (request(10, 100, [(long_name, 1)], dry=False), "sources[0].name"),
            (request(5000000, 5000001, dry=False), "10000000"),
            (request(4294967295, 4294967295, dry=False), "10000000"),
        ]
        for req, field in bad:
            with self.subTest(field=field):
                e = self.assertRpcError(INVALID, self.stub.SelectInjection, req)
                self.assertIn(field, e.details())
        # Nothing was reserved: the queue is still empty.
        r = self.select(2000, 8000, [("fast", 8000)])
        self.assertEqual((r.text.queue_wait_ms, r.kv.link_wait_ms), (0.0, 0.0))
        # The limits themselves are fine.
        ok = self.select(10, 100, [("s%d" % i, 1) for i in range(64)])
        self.assertEqual(ok.mode, TEXT)
        self.select(10, 100, [("y" * 128, 100)])
        self.sc.assert_clean_exit(self)

    def test_node_profile_without_a_driver(self):
        # This machine has no libcuda: the sidecar serves on what it was given.
        n = self.stub.GetNodeProfile(P.cr.GetNodeProfileRequest(), timeout=h.RPC_TIMEOUT)
        self.assertFalse(n.cuda_available)
        self.assertEqual(len(n.gpus), 0)
        self.assertEqual(len(n.nics), 0)  # empty --sysfs-root
        m = n.cost_model
        self.assertEqual((m.prefill_fixed_ms, m.prefill_ms_per_token, m.prefill_ms_per_token2),
                         (A, B, C2))
        self.assertEqual((m.kv_bytes_per_token, m.link_gbps, m.h2d_gbps), (KV_BYTES, LINK, H2D))
        self.assertEqual((m.decision_margin_ms, m.link_queue_penalty), (MARGIN, PENALTY))
        src = dict(part.split("=") for part in m.source.split())
        self.assertEqual(src, {"prefill": "fitted", "kv_bytes": "flag", "link": "flag",
                               "h2d": "flag", "margin": "flag", "penalty": "flag"})
        self.assertTrue(any(e.get("msg") == "probe" and e.get("cuda_available") is False
                            for e in self.sc.events))


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


class ProbeTest(h.SidecarTestCase):
    SHARED = False

    def fake_tree(self):
        root = tempfile.mkdtemp(prefix="cr-sysfs-")
        self.addCleanup(lambda: __import__("shutil").rmtree(root))
        dev = os.path.join(root, "devices", "pci0000:00", "0000:00:03.0")
        os.makedirs(dev)
        for name, speed, state in (("eth0", "25000", "up"), ("eth1", "100000", "down"),
                                   ("eth2", "-1", "up")):
            net = os.path.join(root, "class", "net", name)
            write(os.path.join(net, "speed"), speed + "\n")
            write(os.path.join(net, "operstate"), state + "\n")
            write(os.path.join(net, "statistics", "rx_bytes"), "1000\n")
            write(os.path.join(net, "statistics", "tx_bytes"), "2000\n")
            os.symlink(dev, os.path.join(net, "device"))
        veth = os.path.join(root, "class", "net", "veth0")  # virtual: no device link
        write(os.path.join(veth, "speed"), "10000\n")
        write(os.path.join(veth, "operstate"), "up\n")
        port = os.path.join(root, "class", "infiniband", "mlx5_0", "ports", "1")
        write(os.path.join(port, "rate"), "100 Gb/sec (4X EDR)\n")
        write(os.path.join(port, "state"), "4: ACTIVE\n")
        return root

    def profile(self, *flags):
        sc = self.start_sidecar(*flags)
        n = sc.stub().GetNodeProfile(P.cr.GetNodeProfileRequest(), timeout=h.RPC_TIMEOUT)
        sc.assert_clean_exit(self)
        return n

    def test_nics_and_rdma_from_sysfs(self):
        root = self.fake_tree()
        n = self.profile("--sysfs-root", root, "--replan-interval", "0")
        nics = {x.name: (x.speed_gbps, x.up) for x in n.nics}
        self.assertEqual(nics, {"eth0": (25.0, True), "eth1": (100.0, False),
                                "eth2": (0.0, True), "rdma:mlx5_0/1": (100.0, True)})
        # The fastest link that is up: the RDMA port.
        self.assertEqual(n.cost_model.link_gbps, 100.0)
        self.assertIn("link=nic", n.cost_model.source)
        # --nic names exactly the interfaces to probe, virtual ones included.
        n = self.profile("--sysfs-root", root, "--nic", "eth0", "--nic", "veth0",
                         "--replan-interval", "0")
        self.assertEqual(sorted(x.name for x in n.nics), ["eth0", "veth0"])
        self.assertEqual(n.cost_model.link_gbps, 25.0)

    def test_peak_flag_sets_prefill_without_a_gpu(self):
        empty = tempfile.mkdtemp(prefix="cr-sysfs-")
        self.addCleanup(lambda: os.rmdir(empty))
        n = self.profile("--sysfs-root", empty, "--peak-tflops", "100", "--model-params-b", "8",
                         "--mfu", "0.5", "--model-layers", "32", "--model-d-model", "4096",
                         "--replan-interval", "0")
        m = n.cost_model
        # b = 2 * 8e9 / (100e12 * 0.5) s = 0.32 ms; c = 2*32*4096 / 5e13 s.
        self.assertTrue(math.isclose(m.prefill_ms_per_token, 0.32, rel_tol=1e-12))
        self.assertTrue(math.isclose(m.prefill_ms_per_token2, 2 * 32 * 4096 / 5e13 * 1e3,
                                     rel_tol=1e-12))
        self.assertEqual(m.prefill_fixed_ms, 10.0)
        # 2 * 32 layers * 8 heads * 128 dims * 2 bytes, tensor parallel 1.
        self.assertEqual(m.kv_bytes_per_token, 131072.0)
        src = dict(part.split("=") for part in m.source.split())
        self.assertEqual((src["prefill"], src["link"], src["h2d"]), ("flag", "default", "default"))


class CliInjectionTest(h.SidecarTestCase):
    SIDECAR_FLAGS = ("--kv-source", "fast=100,0.5", "--replan-interval", "0")

    def test_select_and_profile(self):
        import json
        t = ("--target", self.sidecar.target)
        p = h.run_cli(*t, "select", "2000", "8000", "--source", "fast=8000", "--dry-run",
                      "--queue-wait-ms", "0", "--request-id", "cli-1")
        self.assertEqual(p.returncode, 0, p.stderr)
        out = json.loads(p.stdout)
        self.assertEqual((out["mode"], out["source"], out["request_id"]),
                         ("INJECTION_MODE_KV_CACHE", "fast", "cli-1"))
        p = h.run_cli(*t, "select", "10", "100", "--source", "fast=200")
        self.assertEqual(p.returncode, 1)
        self.assertIn("INVALID_ARGUMENT", p.stderr)
        self.assertIn("sources[0].cached_tokens", p.stderr)
        p = h.run_cli(*t, "select", "10")
        self.assertEqual(p.returncode, 2)
        p = h.run_cli(*t, "profile")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("cost_model", json.loads(p.stdout))


if __name__ == "__main__":
    h.main()
