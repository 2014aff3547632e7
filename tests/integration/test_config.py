"""Sidecar configuration: flags, CACHEROUTE_* variables, --help, bind errors."""
import concurrent.futures
import json
import os
import re
import shutil
import socket
import sys
import tempfile
import time
import unittest

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import harness as h  # noqa: E402
from harness import P  # noqa: E402

# Every flag the server issue defines (others may add more).
FLAGS = ["listen", "threads", "n-shards", "qcap", "warm-slots-per-shard", "half-life", "window",
         "estimator-clock", "max-owners", "replan-interval", "max-message-bytes",
         "shutdown-grace", "metrics-listen", "log-level"]

# (flag, bad value) pairs; each must exit 2 with one line naming the flag.
BAD = [
    ("n-shards", "0"), ("n-shards", "65537"), ("n-shards", "-1"), ("n-shards", "1.5"),
    ("n-shards", "abc"), ("n-shards", ""), ("n-shards", "8 "), ("n-shards", " 8"),
    ("qcap", "-1"), ("qcap", "0"), ("qcap", "nan"), ("qcap", "inf"), ("qcap", "1e999"),
    ("qcap", "x5"),
    ("warm-slots-per-shard", "0"), ("warm-slots-per-shard", "-5"),
    ("warm-slots-per-shard", "inf"),
    ("half-life", "0"), ("half-life", "-1"), ("half-life", "NaN"),
    ("window", "0"), ("window", "4294967296"),
    ("estimator-clock", "hours"), ("estimator-clock", "Seconds"), ("estimator-clock", ""),
    ("threads", "abc"), ("threads", "-1"), ("threads", "1025"), ("threads", "2.5"),
    ("max-owners", "0"), ("max-owners", "1e300"),
    ("replan-interval", "-1"), ("replan-interval", "1e10"), ("replan-interval", "inf"),
    ("max-message-bytes", "100"), ("max-message-bytes", "65535"),
    ("max-message-bytes", "2147483648"),
    ("shutdown-grace", "-1"), ("shutdown-grace", "3601"),
    ("log-level", "loud"), ("log-level", "INFO"),
    ("listen", ""),
]


def env_name(flag):
    return "CACHEROUTE_" + flag.upper().replace("-", "_")


class ConfigTest(h.SidecarTestCase):
    SHARED = False

    def assertOneLineError(self, p, *names):
        self.assertEqual(p.returncode, 2, "exit code; stderr: %r" % p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertTrue(p.stderr.endswith("\n"), repr(p.stderr))
        self.assertEqual(p.stderr.count("\n"), 1, "want one line, got %r" % p.stderr)
        self.assertTrue(p.stderr.startswith("cacheroute-sidecar: "), repr(p.stderr))
        for n in names:
            self.assertIn(n, p.stderr)

    def assertBindError(self, p, *names):
        """Exit 2 and a last line naming --listen. Before it come the
        sidecar's JSON log lines (the start-up probe) and gRPC core's own
        reason (an 'E<date> ... chttp2_server.cc' line, not JSON) --
        tolerated here, reported to the lead."""
        self.assertEqual(p.returncode, 2, "exit code; stderr: %r" % p.stderr)
        lines = p.stderr.rstrip("\n").split("\n")
        self.assertTrue(lines[-1].startswith("cacheroute-sidecar: --listen"), repr(p.stderr))
        for n in names:
            self.assertIn(n, lines[-1])
        for extra in lines[:-1]:
            self.assertRegex(extra, r"^([EWI]\d{4} |\{\"ts\":)", "unexpected stderr line")

    def test_bad_flags(self):
        base = ["--listen", "127.0.0.1:0", "--metrics-listen", ""]
        for flag, value in BAD:
            with self.subTest(flag=flag, value=value):
                p = h.run_sidecar(*base, "--" + flag, value)
                self.assertOneLineError(p, "--" + flag)
                if value.strip():
                    self.assertIn(value.strip(), p.stderr)
                # --flag=value is the same flag.
                p = h.run_sidecar(*base, "--%s=%s" % (flag, value))
                self.assertOneLineError(p, "--" + flag)

    def test_bad_env(self):
        for flag, value in BAD:
            with self.subTest(env=env_name(flag), value=value):
                argv = [] if flag == "listen" else ["--listen", "127.0.0.1:0"]
                p = h.run_sidecar(*argv, "--metrics-listen", "",
                                  env={env_name(flag): value})
                self.assertOneLineError(p, env_name(flag))

    def test_usage_errors(self):
        base = ["--listen", "127.0.0.1:0", "--metrics-listen", ""]
        p = h.run_sidecar(*base, "--bogus", "1")
        self.assertOneLineError(p, "--bogus")
        p = h.run_sidecar(*base, "--n-shard", "8")
        self.assertOneLineError(p, "--n-shard")
        p = h.run_sidecar(*base, "--qcap")
        self.assertOneLineError(p, "--qcap")
        p = h.run_sidecar(*base, "serve")
        self.assertOneLineError(p, "serve")
        p = h.run_sidecar(*base, "-x")
        self.assertOneLineError(p, "-x")

    def test_help_lists_every_flag_with_its_variable(self):
        for arg in ("--help", "-h"):
            p = h.run_sidecar(arg)
            self.assertEqual(p.returncode, 0, p.stderr)
            text = p.stdout
            listed = re.findall(r"^\s+--([a-z0-9-]+)\s", text, re.M)
            self.assertEqual(len(listed), len(set(listed)), listed)
            for flag in FLAGS:
                self.assertIn(flag, listed)
            # Each flag's block names its variable, derived from its name.
            blocks = re.split(r"^\s+--(?=[a-z0-9-]+\s)", text, flags=re.M)[1:]
            self.assertEqual(len(blocks), len(listed))
            for flag, block in zip(listed, blocks):
                self.assertIn(env_name(flag), block, "--%s: %r" % (flag, block))
        p = h.run_sidecar("--version")
        self.assertEqual(p.returncode, 0)
        self.assertTrue(p.stdout.startswith("cacheroute-sidecar "), p.stdout)

    def test_env_and_flag_precedence(self):
        env = {
            "CACHEROUTE_LISTEN": "127.0.0.1:0", "CACHEROUTE_THREADS": "3",
            "CACHEROUTE_N_SHARDS": "3", "CACHEROUTE_QCAP": "7.5",
            "CACHEROUTE_WARM_SLOTS_PER_SHARD": "2", "CACHEROUTE_HALF_LIFE": "6",
            "CACHEROUTE_WINDOW": "9", "CACHEROUTE_ESTIMATOR_CLOCK": "calls",
            "CACHEROUTE_MAX_OWNERS": "1000", "CACHEROUTE_REPLAN_INTERVAL": "0",
            "CACHEROUTE_MAX_MESSAGE_BYTES": "70000", "CACHEROUTE_SHUTDOWN_GRACE": "4",
            "CACHEROUTE_METRICS_LISTEN": "", "CACHEROUTE_LOG_LEVEL": "debug",
        }
        sc = self.start_sidecar(env=env, listen=None, metrics=False)
        c = sc.config
        self.assertEqual((c["threads"], c["planner"], c["estimator"]),
                         (3, {"n_shards": 3, "qcap": 7.5, "warm_slots_per_shard": 2.0},
                          {"clock": "calls", "half_life": 6.0, "window": 9, "max_owners": 1000}))
        self.assertEqual((c["replan_interval_s"], c["max_message_bytes"], c["shutdown_grace_s"],
                          c["metrics_listen"], c["log_level"]), (0.0, 70000, 4.0, "", "debug"))
        # The environment's planner is the one an absent config uses.
        t = sc.stub().Plan(h.plan_request(rates=[(1, 20.0), (2, 5.0)]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(h.bits(h.table_dict(t.table)),
                         h.bits(h.plan_dump(3, 7.5, 2, [(1, 20.0), (2, 5.0)])))
        r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[4, 4]),
                                    timeout=h.RPC_TIMEOUT)
        self.assertEqual([x.rate for x in r.routes], [1.0, h.calls_rate_exact(2, 6.0)])
        sc.assert_clean_exit(self)

        # Every flag wins over its variable.
        sc = self.start_sidecar("--threads", "2", "--n-shards", "5", "--qcap", "9",
                                "--warm-slots-per-shard", "4", "--half-life", "3",
                                "--window", "11", "--estimator-clock", "seconds",
                                "--max-owners", "77", "--replan-interval", "0.5",
                                "--max-message-bytes", "70000", "--shutdown-grace", "5",
                                "--log-level", "info", "--route-by", "plan", env=env)
        c = sc.config
        self.assertEqual((c["threads"], c["planner"], c["estimator"]),
                         (2, {"n_shards": 5, "qcap": 9.0, "warm_slots_per_shard": 4.0},
                          {"clock": "seconds", "half_life": 3.0, "window": 11,
                           "max_owners": 77}))
        self.assertEqual((c["replan_interval_s"], c["max_message_bytes"], c["shutdown_grace_s"],
                          c["metrics_listen"], c["log_level"]), (0.5, 70000, 5.0, "", "info"))
        r = sc.stub().RecordArrival(P.cr.RecordArrivalRequest(owners=[4]), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.routes[0].preferred_shard, h.fallback_shard(4, 5))
        sc.assert_clean_exit(self)

    def test_flag_overrides_a_bad_variable(self):
        # BUG (reported, arguable): the variables are validated before the
        # flags are read, so a flag cannot override a bad variable:
        # CACHEROUTE_QCAP=-1 cacheroute-sidecar --qcap 5 exits 2 with
        # "CACHEROUTE_QCAP: must be a finite number > 0, got '-1'". "A flag
        # overrides the env var" should mean the variable's value no longer
        # matters.
        sc = self.start_sidecar("--qcap", "5", "--replan-interval", "0",
                                env={"CACHEROUTE_QCAP": "-1"})
        self.assertEqual(sc.config["planner"]["qcap"], 5.0)
        sc.assert_clean_exit(self)

    def test_every_file_flag_refuses_a_fifo_at_once(self):
        """R3-6: a FIFO named by a flag whose file the sidecar reads is
        refused at once, naming flag and file (opening one for reading
        blocked the start for ever, deaf to SIGTERM); --check-config too
        where it reads the file."""
        d = tempfile.mkdtemp(prefix="cr-fifo-")
        self.addCleanup(shutil.rmtree, d, True)
        fifo = os.path.join(d, "fifo")
        os.mkfifo(fifo)
        serve = ("--listen", "127.0.0.1:0", "--metrics-listen", "")
        for argv, name in (
                (("--endpoints-file", fifo) + serve, fifo),
                (("--endpoints-file", fifo, "--check-config"), fifo),
                (("--model-config", fifo, "--check-config"), "--model-config " + fifo),
                (("--state-backend", "redis://127.0.0.1:1", "--state-backend-password-file",
                  fifo, "--check-config"), "--state-backend-password-file " + fifo),
                (("--tls-cert", fifo, "--tls-key", fifo) + serve, "--tls-cert " + fifo),
                (("--admin-token-file", fifo) + serve, "--admin-token-file " + fifo)):
            t0 = time.monotonic()
            p = h.run_sidecar(*argv, timeout=10)
            self.assertLess(time.monotonic() - t0, 5, argv)
            self.assertEqual(p.returncode, 2, (argv, p.stderr))
            self.assertIn(name + ": cannot read: it must be a regular file, not a FIFO",
                          p.stderr)

    def test_port_in_use(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        try:
            p = h.run_sidecar("--listen", "127.0.0.1:%d" % port, "--metrics-listen", "")
            self.assertBindError(p, "--listen", str(port))
        finally:
            s.close()
        # A second sidecar on a running sidecar's port fails too.
        sc = self.start_sidecar("--replan-interval", "0")
        p = h.run_sidecar("--listen", sc.target, "--metrics-listen", "")
        self.assertBindError(p, "--listen", sc.target)
        # Same when the address comes from the environment.
        p = h.run_sidecar("--metrics-listen", "", env={"CACHEROUTE_LISTEN": sc.target})
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(sc.target, p.stderr)
        # The first one was not disturbed.
        r = sc.health_stub().Check(P.health.HealthCheckRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.status, P.health.HealthCheckResponse.SERVING)
        sc.assert_clean_exit(self)

    def test_bad_listen_address(self):
        for addr in ("999.1.1.1:80", "nonsense-host-!:1", "127.0.0.1:-1"):
            with self.subTest(addr=addr):
                p = h.run_sidecar("--listen", addr, "--metrics-listen", "", timeout=10)
                self.assertBindError(p, "--listen", addr)

    def test_listen_must_be_host_and_port(self):
        # BUG (reported): --listen is not checked as host:port with a port in
        # 0..65535. gRPC takes 99999 modulo 65536 and serves on 34463, 65536
        # becomes 0 (any port), and with no port it serves on 443. Each must
        # exit 2 naming --listen. (Run side by side: a wrongly accepted one
        # costs the 5 s timeout.)
        addrs = ("127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1")
        with concurrent.futures.ThreadPoolExecutor(len(addrs)) as pool:
            runs = {a: pool.submit(h.run_sidecar, "--listen", a, "--metrics-listen", "",
                                   "--replan-interval", "0", timeout=5) for a in addrs}
        for addr, fut in runs.items():
            with self.subTest(addr=addr):
                p = fut.result()
                self.assertEqual(p.returncode, 2, p.stderr)
                self.assertIn("--listen", p.stderr.rstrip("\n").split("\n")[-1])

    def test_every_help_flag_is_in_the_effective_configuration(self):
        # Every flag --help lists (cost-model ones included) is one entry of
        # --check-config's "options" and of the "serving" line's, in --help
        # order, with its variable, value and where the value came from.
        p = h.run_sidecar("--help")
        self.assertEqual(p.returncode, 0, p.stderr)
        listed = re.findall(r"^\s+--([a-z0-9-]+)\s", p.stdout, re.M)
        flags = ["--replan-interval", "0", "--mfu", "0.4", "--kv-source", "kv1=40,0.5",
                 "--metrics-listen", "", "--listen", "127.0.0.1:0"]
        env = {"CACHEROUTE_LINK_GBPS": "25", "CACHEROUTE_NIC": "eth7 eth9",
               "CACHEROUTE_QCAP": "-1"}  # overridden by --qcap below
        p = h.run_sidecar("--check-config", "--qcap", "7", *flags, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr, "")
        checked = json.loads(p.stdout)
        sc = self.start_sidecar("--qcap", "7", *flags, env=env, listen=None, metrics=False)
        for what, cfg in (("--check-config", checked), ("serving", sc.config)):
            with self.subTest(what=what):
                opts = cfg["options"]
                self.assertEqual([o["flag"] for o in opts], listed)
                by_flag = {o["flag"]: o for o in opts}
                for o in opts:
                    self.assertEqual(sorted(o), ["env", "flag", "source", "value"], o)
                    self.assertEqual(o["env"], env_name(o["flag"]))
                    self.assertIn(o["source"], ("default", "env", "flag"))
                want = {"mfu": (0.4, "flag"), "link-gbps": (25.0, "env"),
                        "qcap": (7.0, "flag"), "replan-interval": (0.0, "flag"),
                        "kv-source": ("kv1=40,0.5", "flag"), "nic": (["eth7", "eth9"], "env"),
                        "n-shards": (8, "default"), "half-life": (20.0, "default"),
                        "prefill-coeffs": (None, "default"),
                        "kv-bytes-per-token": (None, "default"),
                        "model-params-b": (8.03, "default"), "sysfs-root": ("/sys", "default"),
                        "estimator-clock": ("seconds", "default")}
                for flag, (value, source) in want.items():
                    self.assertEqual((by_flag[flag]["value"], by_flag[flag]["source"]),
                                     (value, source), flag)
                sources = {o["flag"] for o in opts if o["source"] != "default"}
                self.assertEqual(sources, {"mfu", "link-gbps", "qcap", "replan-interval",
                                           "kv-source", "nic", "metrics-listen", "listen"})
                # The same values, by key, in each component's object.
                self.assertEqual((cfg["inject"]["mfu"], cfg["inject"]["link_gbps"],
                                  cfg["inject"]["kv_sources"], cfg["inject"]["prefill_coeffs"]),
                                 (0.4, 25.0, "kv1=40,0.5", None))
                self.assertEqual(cfg["probe"], {"interval_s": 300.0,
                                                "nic_names": ["eth7", "eth9"],
                                                "sysfs_root": "/sys"})
                self.assertEqual(cfg["planner"]["qcap"], 7.0)
                self.assertEqual(by_flag["threads"]["value"], cfg["threads"])
        sc.assert_clean_exit(self)

    def test_help_with_a_bad_environment(self):
        # --help must work when the environment is broken: usage on stdout,
        # exit 0, and one warning line naming each bad variable.
        good = h.run_sidecar("--help")
        self.assertEqual((good.returncode, good.stderr), (0, ""))
        p = h.run_sidecar("--help", env={"CACHEROUTE_N_SHARDS": "0"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stdout, good.stdout)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        self.assertTrue(p.stderr.startswith("cacheroute-sidecar: warning: "), p.stderr)
        self.assertIn("CACHEROUTE_N_SHARDS", p.stderr)
        self.assertIn("refuse to start", p.stderr)
        p = h.run_sidecar("-h", env={"CACHEROUTE_N_SHARDS": "0", "CACHEROUTE_MFU": "2",
                                     "CACHEROUTE_LOG_LEVEL": "loud"})
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(p.stderr.count("\n"), 1, p.stderr)
        for var in ("CACHEROUTE_N_SHARDS", "CACHEROUTE_MFU", "CACHEROUTE_LOG_LEVEL"):
            self.assertIn(var, p.stderr)
        # --check-config does validate it.
        p = h.run_sidecar("--check-config", env={"CACHEROUTE_N_SHARDS": "0"})
        self.assertOneLineError(p, "CACHEROUTE_N_SHARDS", "--n-shards")



class MemoryLimitTest(unittest.TestCase):
    """N4: the defaults (--max-pending-reply-bytes 2 GiB, --memory-quota-bytes
    4 GiB) exceeded the chart's 1 GiB memory limit, so about 140 small calls
    that never read their answers OOM-killed the pod. Under a cgroup limit
    the defaults fit it, and --check-config warns when the bounds add up
    past it. The cgroup is a fake one the test build reads (tests/hooks/)."""

    def cgroup(self, limit, v1=False):
        d = tempfile.mkdtemp(prefix="cr-it-cgroup-")
        self.addCleanup(shutil.rmtree, d, True)
        if v1:
            os.makedirs(os.path.join(d, "memory", "kubepods", "pod1"))
            with open(os.path.join(d, "memory", "kubepods", "memory.limit_in_bytes"), "w") as f:
                f.write("%d\n" % limit)
            with open(os.path.join(d, "memory", "kubepods", "pod1",
                                   "memory.limit_in_bytes"), "w") as f:
                f.write("9223372036854771712\n")  # unlimited: the parent's counts
            own = "12:memory:/kubepods/pod1\n"
        else:
            os.makedirs(os.path.join(d, "pod"))
            with open(os.path.join(d, "pod", "memory.max"), "w") as f:
                f.write("%d\n" % limit)
            own = "0::/pod\n"
        with open(os.path.join(d, "self"), "w") as f:
            f.write(own)
        return {"CACHEROUTE_TEST_CGROUP_ROOT": d,
                "CACHEROUTE_TEST_SELF_CGROUP": os.path.join(d, "self")}

    def check(self, *flags, env=None):
        p = h.run_sidecar("--check-config", *flags, env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        return json.loads(p.stdout), p.stderr

    def test_defaults_fit_the_limit(self):
        gib = 1 << 30
        for v1 in (False, True):
            cfg, err = self.check(env=self.cgroup(gib, v1=v1))
            self.assertEqual(cfg["memory_quota_bytes"], gib // 4)
            self.assertEqual(cfg["max_pending_reply_bytes"], gib // 4)
            self.assertEqual(cfg["max_message_bytes"], 64 << 20)
            self.assertEqual(err, "")  # the defaults fit: no warning
            # A KV-event frame's decoding (34 B a byte, the frame too) within an eighth.
            self.assertEqual(cfg["kv_events_max_frame_bytes"], gib // 8 // 34)
        # A smaller pod: the message limit comes down too.
        cfg, _ = self.check(env=self.cgroup(256 << 20))
        self.assertEqual((cfg["memory_quota_bytes"], cfg["max_message_bytes"],
                          cfg["kv_events_max_frame_bytes"]),
                         (64 << 20, 32 << 20, (256 << 20) // 8 // 34))
        # Flags and variables still win, and say where they came from.
        env = self.cgroup(gib)
        env["CACHEROUTE_MAX_PENDING_REPLY_BYTES"] = str(128 << 20)
        cfg, _ = self.check("--memory-quota-bytes", str(512 << 20), env=env)
        self.assertEqual((cfg["memory_quota_bytes"], cfg["max_pending_reply_bytes"]),
                         (512 << 20, 128 << 20))
        sources = {o["flag"]: o["source"] for o in cfg["options"]}
        self.assertEqual((sources["memory-quota-bytes"], sources["max-pending-reply-bytes"],
                          sources["max-message-bytes"]), ("flag", "env", "default"))
        # No limit (the real cgroup of this test, or none): the old defaults.
        cfg, _ = self.check(env=self.cgroup(0))
        self.assertEqual((cfg["memory_quota_bytes"], cfg["max_pending_reply_bytes"],
                          cfg["kv_events_max_frame_bytes"]), (4 << 30, 2 << 30, 4 << 20))

    def test_warns_when_the_bounds_add_up_past_the_limit(self):
        cfg, err = self.check("--max-owners", "20000000", env=self.cgroup(1 << 30))
        self.assertEqual(err.count("\n"), 1, err)
        self.assertTrue(err.startswith("cacheroute-sidecar: warning: the bounds"), err)
        self.assertIn("past the cgroup memory limit", err)
        self.assertIn("limit 1073741824", err)
        # Serving, it says so once in the log.
        sc = h.Sidecar("--max-owners", "20000000", env=self.cgroup(1 << 30))
        self.addCleanup(sc.kill)
        warns = sc.find_events(lambda e: e.get("msg") == "memory bounds past the limit")
        self.assertEqual(len(warns), 1)
        self.assertEqual(sc.config["memory_limit_bytes"], 1 << 30)
        sc.assert_clean_exit(self)

    def test_picker_streams_count_in_the_bounds(self):
        """--epp-listen's streams hold the bodies they gather and as much
        again in echoes (2 x --epp-max-buffered-bytes) and 80 KiB a stream:
        at the defaults (512 MiB, 10,000 streams) that passes 4 GiB with the
        other bounds; 64 MiB of bodies and 1,000 streams fit."""
        env = self.cgroup(4 << 30)
        _, err = self.check(env=env)
        self.assertEqual(err, "")
        _, err = self.check("--epp-listen", "127.0.0.1:0", env=env)
        self.assertIn("--epp-max-buffered-bytes", err)
        _, err = self.check("--epp-listen", "127.0.0.1:0", "--epp-max-buffered-bytes",
                            "67108864", "--epp-max-requests", "1000", env=env)
        self.assertEqual(err, "")


if __name__ == "__main__":
    h.main()
