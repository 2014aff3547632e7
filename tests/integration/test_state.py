"""State that survives a restart (--state-file): the real sidecar restarted
with its file gives the same rates decayed exactly by the wall time that
passed (read from the file), the same routes and table generation and the
same calibration; kill -9 in the middle of a snapshot write leaves the
previous file whole; a corrupt, truncated, foreign-version or other-config
file is moved to PATH.corrupt and the sidecar serves empty."""
import glob
import hashlib
import os
import shutil
import signal
import struct
import sys
import tempfile
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
from harness import P  # noqa: E402

H = 20.0  # --half-life
OWNERS = list(range(-5, 45))
BASE = ("--replan-interval", "0", "--half-life", str(H))


def parse_state(data):
    """The file's header time and owners {owner: (count, age)}, checking
    its SHA-256 and generation; see core.h "state" for the layout."""
    assert data[:8] == b"CRSTATE\0", data[:8]
    assert hashlib.sha256(data[:-32]).digest() == data[-32:]
    version, sections, written_at, _clock = struct.unpack_from("<IIdd", data, 8)
    assert (version, sections) == (1, 4)
    at, payload = 32, {}
    for tag in range(1, 5):
        got, length = struct.unpack_from("<IQ", data, at)
        assert got == tag
        payload[tag] = data[at + 12:at + 12 + length]
        at += 12 + length
    est = payload[2]
    _clock_kind, n = struct.unpack_from("<IQ", est, 0)
    owners = {}
    for i in range(n):
        o, count, age = struct.unpack_from("<qdd", est, 12 + 24 * i)
        owners[o] = (count, age)
    generation = struct.unpack_from("<Q", payload[3], 0)[0]
    return written_at, owners, generation


def reseal(data):
    return data[:-32] + hashlib.sha256(data[:-32]).digest()


class StateTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cr-it-state-")
        self.path = os.path.join(self.dir, "state")

    def tearDown(self):
        shutil.rmtree(self.dir, True)

    def start(self, *flags, env=None):
        return self.start_sidecar("--state-file", self.path, *(BASE + flags), env=env)

    def restore_event(self, sc):
        return sc.wait_for(lambda e: e.get("msg", "").startswith("state "), 30,
                           what="the state restore line")

    def fill(self, stub):
        """Arrivals (owner k arrives 1 + k % 4 times), two installs, and
        outcomes that feed GPU 0's prefill fit."""
        req = P.cr.RecordArrivalRequest(omit_routes=True)
        for k in OWNERS:
            req.owners.extend([k] * (1 + k % 4))
        stub.RecordArrival(req, timeout=h.RPC_TIMEOUT)
        for _ in range(2):
            stub.Plan(P.cr.PlanRequest(from_estimator=True, install=True,
                                       config=P.cr.PlannerConfig(qcap=0.05)),
                      timeout=h.RPC_TIMEOUT)
        outcomes = [P.cr.Outcome(prefill_ms=40.0 + 10 * i, prefilled_from=0,
                                 prefilled_to=1000 + 500 * i) for i in range(8)]
        stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=outcomes), timeout=h.RPC_TIMEOUT)

    def rates(self, stub):
        """{owner: rate} and the wall times just before and after the call."""
        t0 = time.time()
        resp = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        t1 = time.time()
        return {r.owner: r.rate for r in resp.rates}, t0, t1

    def routes(self, stub):
        resp = stub.RecordArrival(P.cr.RecordArrivalRequest(owners=OWNERS),
                                  timeout=h.RPC_TIMEOUT)
        return [(r.owner, r.admitted, r.preferred_shard) for r in resp.routes], \
            resp.table_generation

    def calibration(self, stub):
        cal = stub.GetStats(P.cr.GetStatsRequest(), timeout=h.RPC_TIMEOUT).calibration
        return [(c.gpu, c.samples, c.adopted, c.prefill_fixed_ms, c.prefill_ms_per_token,
                 c.prefill_ms_per_token2) for c in cal if c.samples]

    def assert_decayed_exactly(self, rates, t0, t1, written_at, owners):
        """Each rate is the file's count decayed by its age plus the wall
        time from the file's stamp to the call (somewhere in [t0, t1])."""
        self.assertEqual(sorted(rates), sorted(owners))
        for o, rate in rates.items():
            count, age = owners[o]
            hi = count * 2 ** (-(age + t0 - written_at) / H)
            lo = count * 2 ** (-(age + t1 - written_at) / H)
            self.assertTrue(lo * (1 - 1e-9) <= rate <= hi * (1 + 1e-9),
                            (o, lo, rate, hi))

    def test_restart_keeps_rates_routes_generation_calibration(self):
        sc = self.start()
        ev = self.restore_event(sc)
        self.assertEqual((ev["msg"], ev["level"]), ("state file absent, starting empty", "info"))
        stub = sc.stub()
        self.fill(stub)
        routes, generation = self.routes(stub)
        self.assertEqual(generation, 2)
        self.assertTrue(any(admitted for _, admitted, _ in routes))
        before, b0, b1 = self.rates(stub)
        cal = self.calibration(stub)
        self.assertEqual(cal[0][1], 8)
        sc.assert_clean_exit(self)
        written = sc.find_events(lambda e: e.get("msg") == "state written")
        self.assertEqual([(e["by"], e["level"], e["owners"], e["generation"]) for e in written],
                         [("stop", "info", len(OWNERS), 2)])
        written_at, owners, file_generation = parse_state(open(self.path, "rb").read())
        self.assertEqual(file_generation, 2)
        self.assertLessEqual(b1, written_at)
        time.sleep(1.0)  # a second of decay, a twentieth of H

        sc = self.start()
        ev = self.restore_event(sc)
        self.assertEqual(ev["msg"], "state restored", ev)
        self.assertEqual((ev["owners"], ev["generation"], ev["placements"] > 0),
                         (len(OWNERS), 2, True))
        self.assertGreaterEqual(ev["age_s"], 1.0)
        stub = sc.stub()
        after, c0, c1 = self.rates(stub)
        self.assert_decayed_exactly(after, c0, c1, written_at, owners)
        for o, r in after.items():  # and against the rates read before the stop
            self.assertTrue(before[o] * 2 ** (-(c1 - b0) / H) * (1 - 1e-9) <= r
                            <= before[o] * 2 ** (-(c0 - b1) / H) * (1 + 1e-9), o)
        self.assertEqual(self.calibration(stub), cal)
        self.assertEqual(self.routes(stub), (routes, 2))
        plan = stub.Plan(P.cr.PlanRequest(from_estimator=True, install=True),
                         timeout=h.RPC_TIMEOUT)
        self.assertEqual(plan.table.generation, 3)
        sc.assert_clean_exit(self)

    def test_sigusr1_writes_a_snapshot_now(self):
        """SIGUSR1 writes the file at once (no interval, no stop), and a
        kill -9 afterwards loses nothing it held: the restart restores it."""
        sc = self.start("--snapshot-interval", "0")
        self.restore_event(sc)
        self.fill(sc.stub())
        self.assertFalse(os.path.exists(self.path))
        sc.send(signal.SIGUSR1)
        ev = sc.wait_for(lambda e: e.get("msg") == "state written", 30,
                         what="the snapshot SIGUSR1 asks for")
        self.assertEqual((ev["by"], ev["owners"], ev["generation"]), ("call", len(OWNERS), 2))
        _, owners, generation = parse_state(open(self.path, "rb").read())
        self.assertEqual((len(owners), generation), (len(OWNERS), 2))
        sc.kill()
        sc = self.start()
        ev = self.restore_event(sc)
        self.assertEqual((ev["msg"], ev["owners"], ev["generation"]),
                         ("state restored", len(OWNERS), 2))
        sc.assert_clean_exit(self)

    def test_kill_during_snapshot_keeps_previous_file(self):
        sc = self.start()
        self.fill(sc.stub())
        sc.assert_clean_exit(self)
        previous = open(self.path, "rb").read()
        written_at, owners, _ = parse_state(previous)

        # The ticker's snapshot stalls after half of its temporary
        # (PATH.tmp.<pid>.<n>): kill it there.
        sc = self.start("--snapshot-interval", "0.2",
                        env={"CACHEROUTE_TEST_SNAPSHOT_STALL_S": "60"})
        self.assertEqual(self.restore_event(sc)["msg"], "state restored")
        sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[1000, 1001]),
                                timeout=h.RPC_TIMEOUT)
        def temporary():
            found = glob.glob(self.path + ".tmp.%d.*" % sc.proc.pid)
            return found[0] if found and os.path.getsize(found[0]) > 0 else None
        h.poll(temporary, 30, what="a half-written temporary of " + self.path)
        tmp = temporary()
        sc.kill()
        self.assertEqual(sc.proc.returncode, -signal.SIGKILL)
        self.assertEqual(open(self.path, "rb").read(), previous)
        self.assertLess(os.path.getsize(tmp), len(previous))

        sc = self.start()
        ev = self.restore_event(sc)
        self.assertEqual((ev["msg"], ev["owners"]), ("state restored", len(owners)), ev)
        after, c0, c1 = self.rates(sc.stub())
        self.assert_decayed_exactly(after, c0, c1, written_at, owners)
        self.assertFalse(os.path.exists(self.path + ".corrupt"))
        self.assertFalse(os.path.exists(tmp))  # the killed writer's temporary, swept
        sc.assert_clean_exit(self)

    def expect_refused(self, data, reason, *flags):
        with open(self.path, "wb") as f:
            f.write(data)
        sc = self.start(*flags)
        ev = self.restore_event(sc)
        self.assertEqual((ev["msg"], ev["level"]), ("state file refused, starting empty", "warn"))
        self.assertIn(reason, ev["error"])
        self.assertEqual(ev["moved_to"], self.path + ".corrupt")
        self.assertEqual(open(self.path + ".corrupt", "rb").read(), data)
        stub = sc.stub()
        empty = stub.GetRates(P.cr.GetRatesRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(empty.tracked_owners, 0)
        self.assertEqual(self.routes(stub)[1], 0)
        sc.assert_clean_exit(self)
        os.unlink(self.path + ".corrupt")
        # What it wrote at stop is its own (empty but for the routes' arrivals) state.
        self.assertEqual(parse_state(open(self.path, "rb").read())[2], 0)

    def test_bad_files_are_moved_aside(self):
        sc = self.start()
        self.fill(sc.stub())
        sc.assert_clean_exit(self)
        good = open(self.path, "rb").read()
        flipped = bytearray(good)
        flipped[len(good) // 2] ^= 0x40
        self.expect_refused(bytes(flipped), "checksum mismatch")
        # A truncated file's sections run past its end: refused before it is read whole.
        self.expect_refused(good[:len(good) // 2], "runs past the end of the file")
        self.expect_refused(b"not a state file at all, just some text of some length....",
                            "truncated")
        self.expect_refused(b"\0" * 100, "bad magic")
        other = bytearray(good)
        other[8] = 7
        self.expect_refused(reseal(bytes(other)), "foreign version 7, this build reads 1")
        self.expect_refused(good, "other config: estimator.half_life is 20 in the file, 30 now",
                            "--half-life", "30")
        self.expect_refused(good, "other config: planner.n_shards is 8 in the file, 4 now",
                            "--n-shards", "4")


    # ---- red team, round two (N6-N9): the state file's own hazards

    def test_second_sidecar_on_one_state_file_exits_2(self):
        # N6: two sidecars on one --state-file corrupted it 5 of 5 times.
        sc = self.start()
        p = h.run_sidecar("--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--state-file", self.path, *BASE)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("in use by another process (pid %d" % sc.proc.pid, p.stderr)
        sc.assert_clean_exit(self)
        # Once it is gone the file is free again.
        self.start().assert_clean_exit(self)

    def test_planted_link_at_a_temporary_is_never_followed(self):
        # N7: `ln -s victim PATH.tmp` then SIGUSR1 overwrote the victim.
        victim = os.path.join(self.dir, "victim")
        with open(victim, "wb") as f:
            f.write(b"precious")
        sc = self.start()
        for name in [self.path + ".tmp"] + [self.path + ".tmp.%d.%d" % (sc.proc.pid, k)
                                            for k in range(16)]:
            os.symlink(victim, name)
        sc.proc.send_signal(signal.SIGUSR1)
        ev = sc.wait_for(lambda e: e.get("msg") in ("state written", "state snapshot failed"),
                         30, what="the snapshot line")
        self.assertEqual(ev["msg"], "state written", ev)
        self.assertEqual(open(victim, "rb").read(), b"precious")
        self.assertEqual(parse_state(open(self.path, "rb").read())[2], 0)
        self.assertFalse(os.path.islink(self.path))
        sc.assert_clean_exit(self)
        self.assertEqual(open(victim, "rb").read(), b"precious")

    def test_huge_sparse_file_is_refused_unread(self):
        # N8: a 3 GiB sparse file was read whole (3.1 GB, 16.5 s) before the
        # checksum refused it. A valid header, then 3 GiB of holes.
        with open(self.path, "wb") as f:
            f.write(b"CRSTATE\0" + struct.pack("<IIdd", 1, 4, time.time(), 0.0))
            f.truncate(3 << 30)
        t0 = time.monotonic()
        sc = self.start()
        ev = self.restore_event(sc)
        self.assertLess(time.monotonic() - t0, 10)
        self.assertEqual(ev["msg"], "state file refused, starting empty", ev)
        self.assertIn("over the", ev["error"])
        self.assertIn("this configuration reads", ev["error"])
        rss_kb = int(open("/proc/%d/status" % sc.proc.pid).read()
                     .split("VmHWM:")[1].split()[0])
        self.assertLess(rss_kb, 512 * 1024)  # it never held the file
        sc.assert_clean_exit(self)
        os.unlink(self.path + ".corrupt")
        # Within the ceiling, sections that run past the end: refused before reading.
        with open(self.path, "wb") as f:
            f.write(b"CRSTATE\0" + struct.pack("<IIdd", 1, 4, time.time(), 0.0))
            f.write(struct.pack("<IQ", 1, 1 << 40))
            f.truncate(64 << 20)
        sc = self.start()
        ev = self.restore_event(sc)
        self.assertIn("section 1 (config) runs past the end of the file", ev["error"])
        sc.assert_clean_exit(self)

    def test_fifo_as_state_file_refused_at_once(self):
        # N9: a FIFO as --state-file blocked the start forever, silently.
        os.mkfifo(self.path)
        t0 = time.monotonic()
        p = h.run_sidecar("--listen", "127.0.0.1:0", "--metrics-listen", "",
                          "--state-file", self.path, *BASE, timeout=10)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("--state-file %s must be a regular file" % self.path, p.stderr)
        self.assertTrue(os.path.exists(self.path))  # not moved aside: not ours to move


if __name__ == "__main__":
    h.main()
