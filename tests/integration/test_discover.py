"""--endpoints-dns against a real DNS server: Debian's dnsmasq on a free
loopback port, serving a hosts file that the test rewrites (SIGHUP makes
dnsmasq read it again). The real sidecar resolves the name every
--dns-interval; joins and removals show in ListEndpoints within two
intervals while a thread keeps calling Route, with no failed call. With
dnsmasq stopped the set stays, the failure is counted and logged once;
back, the set follows the file again. And the flags' checks."""
import os
import shutil
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

NAME = "vllm.cacheroute.test"
INTERVAL = 0.25  # --dns-interval; a change must show within two
DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"


class Dnsmasq:
    """dnsmasq on 127.0.0.1:port (UDP and TCP) answering NAME from a hosts
    file only: no upstream, no /etc/hosts; in the foreground, killed at the
    end."""

    def __init__(self, folder, addrs, port=None):
        self.hosts = os.path.join(folder, "hosts")
        self.write(addrs)
        for _ in range(5):  # a free TCP port may be a taken UDP one
            self.port = port or h.free_port()
            self.proc = subprocess.Popen(
                [DNSMASQ, "--no-daemon", "--port=%d" % self.port, "--listen-address=127.0.0.1",
                 "--bind-interfaces", "--no-resolv", "--no-hosts", "--addn-hosts=" + self.hosts,
                 "--pid-file=", "--cache-size=0", "--user=" + _user()],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                universal_newlines=True)
            line = self.proc.stderr.readline()
            if "started" in line:
                self.proc.stderr.close()  # no more reading: dnsmasq logs little, to a pipe
                return
            self.proc.kill()
            self.proc.wait()
        raise AssertionError("dnsmasq did not start: %s" % line)

    def write(self, addrs):
        tmp = self.hosts + ".tmp"
        with open(tmp, "w") as f:
            f.writelines("%s %s\n" % (a, NAME) for a in addrs)
        os.rename(tmp, self.hosts)

    def serve(self, addrs):
        """The name's addresses become addrs."""
        self.write(addrs)
        self.proc.send_signal(signal.SIGHUP)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _user():
    import pwd
    return pwd.getpwuid(os.getuid()).pw_name


def ids(addrs, port=8000):
    return sorted("[%s]:%d" % (a, port) if ":" in a else "%s:%d" % (a, port) for a in addrs)


class DnsDiscoveryTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cr-dns-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.dns = Dnsmasq(self.dir, ["127.0.0.12", "127.0.0.11"])
        self.addCleanup(lambda: self.dns.stop())
        self.sc = self.start_sidecar("--endpoints-dns", NAME + ":8000",
                                     "--dns-server", "127.0.0.1:%d" % self.dns.port,
                                     "--dns-interval", str(INTERVAL),
                                     "--kv-events-template", "tcp://{ip}:5557",
                                     "--metrics-listen", "127.0.0.1:0", metrics=False)
        self.stub = self.sc.stub()

    def listed(self):
        r = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        return r.version, {e.id: (e.address, e.state) for e in r.endpoints}

    def active(self):
        return sorted(i for i, (_, s) in self.listed()[1].items() if s == "active")

    def metrics_text(self):
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode()

    def metric(self, sample):
        for line in self.metrics_text().splitlines():
            if line.startswith(sample + " "):
                return float(line.split()[-1])
        return None

    def change_within(self, addrs, limit):
        """Serves addrs; returns the seconds until ListEndpoints' active
        endpoints are exactly theirs (failing past limit)."""
        want = ids(addrs)
        t0 = time.monotonic()
        self.dns.serve(addrs)
        h.poll(lambda: self.active() == want, limit, interval=0.01,
               what="the endpoints %s within %.2f s" % (want, limit))
        return time.monotonic() - t0

    def test_start_lists_the_answer(self):
        version, rows = self.listed()
        self.assertEqual(version, 1)
        self.assertEqual(rows, {"127.0.0.11:8000": ("127.0.0.11:8000", "active"),
                                "127.0.0.12:8000": ("127.0.0.12:8000", "active")})
        # answers stay the same set: no new version per resolution
        time.sleep(4 * INTERVAL)
        self.assertEqual(self.listed()[0], 1)
        self.assertGreaterEqual(self.metric('cacheroute_dns_resolutions_total{result="ok"}'), 3)
        self.assertEqual(self.metric('cacheroute_dns_sets_total{result="applied"}'), 1)
        self.assertEqual(self.metric("cacheroute_dns_endpoints"), 2)
        self.sc.assert_clean_exit(self)  # the resolver's thread stops, nothing leaks

    def test_joins_and_removals_under_route_load(self):
        stop = threading.Event()
        failures, answered = [], []

        def load():
            stub = self.sc.stub()
            owner = 0
            while not stop.is_set():
                owner += 1
                try:
                    r = stub.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
                        owner=owner % 97, block_hashes=[owner % 13, owner])]),
                        timeout=h.RPC_TIMEOUT)
                    answered.append(r.routes[0].endpoint_id)
                except grpc.RpcError as e:
                    failures.append(e.details())

        t = threading.Thread(target=load)
        t.start()
        try:
            took = [self.change_within(a, 2 * INTERVAL) for a in (
                ["127.0.0.11", "127.0.0.12", "127.0.0.13", "fd00::5"],  # two join, one IPv6
                ["127.0.0.12", "127.0.0.13", "fd00::5"],                # one leaves
                ["fd00::5", "127.0.0.14"])]                             # two leave, one joins
        finally:
            stop.set()
            t.join()
        self.assertEqual(failures, [])
        self.assertGreater(len(answered), 10)
        self.assertTrue(all(s < 2 * INTERVAL for s in took), took)
        version, rows = self.listed()
        # Three changes; a resolution whose A and AAAA answers straddle a
        # reload may add a mixed set between two (DNS is not atomic across
        # record types), so at least three versions after the first.
        self.assertGreaterEqual(version, 4)
        self.assertEqual(rows["[fd00::5]:8000"], ("[fd00::5]:8000", "active"))
        for gone in ("127.0.0.11:8000", "127.0.0.12:8000", "127.0.0.13:8000"):
            self.assertEqual(rows[gone][1], "gone")
        self.assertIn("[fd00::5]:8000", answered)
        self.assertEqual(self.metric('cacheroute_dns_sets_total{result="applied"}'), version)

    def test_server_down_keeps_the_set(self):
        before = self.listed()
        self.dns.stop()
        failed = 'cacheroute_dns_resolutions_total{result="failed"}'
        h.poll(lambda: (self.metric(failed) or 0) >= 3, 10, what="three failures counted")
        self.assertEqual(self.listed(), before)
        said = self.sc.find_events(lambda e: e.get("msg") == "dns resolution failed, the set stays")
        self.assertEqual(len(said), 1, "logged once a minute")
        self.assertEqual(said[0]["level"], "warn")
        self.assertIn(NAME, said[0]["detail"])
        # back on the same port with another answer: followed again, and said
        self.dns = Dnsmasq(self.dir, ["127.0.0.15"], port=self.dns.port)
        h.poll(lambda: self.active() == ["127.0.0.15:8000"], 10, what="the set after the outage")
        self.sc.wait_for(lambda e: e.get("msg") == "dns resolution works again", 5)
        self.sc.assert_clean_exit(self)

    def test_unknown_name_keeps_the_set(self):
        before = self.listed()
        self.dns.serve([])  # the name gone: dnsmasq refuses it
        h.poll(lambda: (self.metric('cacheroute_dns_resolutions_total{result="failed"}') or 0)
               >= 2, 10, what="failures counted")
        self.assertEqual(self.listed(), before)
        self.assertEqual(self.metric("cacheroute_dns_endpoints"), 2)  # the last answer's

    def test_too_many_addresses_keep_the_set(self):
        """1,030 addresses (over TCP: too many for a UDP answer) pass the
        1,024 endpoints a set holds: refused whole, the set kept, said."""
        before = self.listed()
        self.dns.serve(["127.1.%d.%d" % (i // 250, i % 250 + 1) for i in range(1030)])
        refused = 'cacheroute_dns_sets_total{result="refused"}'
        h.poll(lambda: (self.metric(refused) or 0) >= 1, 10, what="the set refused")
        self.assertEqual(self.listed(), before)
        self.assertEqual(self.metric("cacheroute_dns_endpoints"), 1030)
        said = self.sc.wait_for(lambda e: e.get("msg") == "dns endpoint set refused, the set stays",
                                5)
        self.assertIn("more than 1024 addresses (1030)", said["detail"])


class DnsFlagsTest(h.SidecarTestCase):
    SHARED = False

    def refused(self, *argv):
        r = h.run_sidecar("--check-config", *argv)
        self.assertEqual(r.returncode, 2, r.stderr)
        return r.stderr

    def test_one_source(self):
        path = os.path.join(tempfile.mkdtemp(prefix="cr-dns-"), "e.json")
        with open(path, "w") as f:
            f.write('{"endpoints": [{"id": "a", "address": "10.0.0.1:8000"}]}')
        err = self.refused("--endpoints-file", path, "--endpoints-dns", "vllm:8000")
        self.assertIn("--endpoints-file and --endpoints-dns are exclusive", err)

    def test_values(self):
        self.assertIn("--endpoints-dns must be NAME:PORT", self.refused("--endpoints-dns", "vllm"))
        self.assertIn("--dns-server must be IP:PORT",
                      self.refused("--endpoints-dns", "vllm:1", "--dns-server", "localhost:53"))
        self.assertIn("--dns-interval", self.refused("--dns-interval", "0"))
        self.assertIn("must name the endpoint's {ip}",
                      self.refused("--endpoints-dns", "vllm:1", "--kv-events-template", "tcp://x:1"))
        self.assertIn("--kv-events-template needs a discovery source",
                      self.refused("--kv-events-template", "tcp://{ip}:5557"))

    def test_check_config_shows_them(self):
        import json
        r = h.run_sidecar("--check-config", "--endpoints-dns", "vllm.default.svc:8000",
                          "--dns-interval", "2", "--kv-events-template", "tcp://{ip}:5557")
        self.assertEqual(r.returncode, 0, r.stderr)
        cfg = json.loads(r.stdout)
        self.assertEqual((cfg["endpoints_dns"], cfg["dns_interval_s"], cfg["dns_server"],
                          cfg["kv_events_template"]),
                         ("vllm.default.svc:8000", 2, "", "tcp://{ip}:5557"))

    def test_no_server_at_start_still_serves(self):
        """Pods may not be up yet: a failed first resolution is logged and
        retried, the sidecar serves."""
        sc = self.start_sidecar("--endpoints-dns", NAME + ":8000",
                                "--dns-server", "127.0.0.1:%d" % h.free_port(),
                                "--dns-interval", str(INTERVAL))
        self.assertTrue(sc.find_events(
            lambda e: e.get("msg") == "dns resolution failed, the set stays"))
        r = sc.stub().ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual(len(r.endpoints), 0)
        sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
