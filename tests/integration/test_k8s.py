"""Kubernetes discovery (--endpoints-k8s-pool) against the real sidecar and
a fake API server (tests/k8s/fake_apiserver.py: Kubernetes v1.30's core/v1
Pod shapes, GIE v1's InferencePool, HTTPS with a self-signed CA, bearer
token checked), over loopback only: the first list, a watch's ADDED,
a BOOKMARK (the next watch starts from its resourceVersion), 410 Gone (a
relist), a pod going not ready (down), terminating (draining) and deleted
(gone), a rotated token the sidecar does not have yet (401: refused,
logged, the set kept; the file's new token read at the next try), a pool
left with no pod (the set kept), an oversized watch event (refused, the
set kept), a pool of two ports (IPv6 too) and the exclusion of
--endpoints-file. ListEndpoints is checked each time."""
import os
import shutil
import sys
import tempfile
import time
import urllib.request

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "k8s"))

import harness as h  # noqa: E402
from harness import P  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402

WAIT_S = 10  # each change shows within this (it takes a watch event, ms)


class K8sDiscoveryTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="cr-k8s-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.token_file = os.path.join(self.dir, "token")
        self.write_token("token-1")
        self.api = FakeApiServer(self.dir, "token-1").start()
        self.addCleanup(self.api.stop)
        self.api.add_pod("vllm-0", "10.1.0.1")
        self.api.add_pod("vllm-1", "10.1.0.2")
        self.api.add_pod("other", "10.1.0.9", labels={"app": "other"})  # not selected
        self.api.add_pod("vllm-pending", "")  # no IP yet: no endpoint

    def write_token(self, token):
        tmp = self.token_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(token + "\n")
        os.rename(tmp, self.token_file)  # as a projected token's update swaps it

    def start(self, *extra):
        return self.start_sidecar(
            "--endpoints-k8s-pool", "llm/vllm-pool", "--k8s-api", self.api.url,
            "--k8s-token-file", self.token_file, "--k8s-ca-file", self.api.cert,
            "--kv-events-template", "tcp://{ip}:5557", "--metrics-listen", "127.0.0.1:0",
            *extra, metrics=False)

    def listed(self):
        r = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        return [(e.id, e.address, e.state) for e in r.endpoints if e.state != "gone"]

    def wait_listed(self, want, what):
        h.poll(lambda: self.listed() == want, WAIT_S, what=what)

    def metrics(self):
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as resp:
            lines = resp.read().decode().splitlines()
        return {ln.split(" ")[0]: float(ln.split(" ")[1]) for ln in lines
                if ln.startswith("cacheroute_k8s_")}

    def pod_requests(self, watch):
        return [r for r in self.api.requests
                if r[1].endswith("/pods") and (r[2].get("watch") == "1") == watch]

    def test_list_watch_bookmark_gone_states_and_bad_token(self):
        started = time.monotonic()
        self.sc = self.start()
        self.stub = self.sc.stub()
        a = ("vllm-0", "10.1.0.1:8000", "active")
        b = ("vllm-1", "10.1.0.2:8000", "active")
        self.wait_listed([a, b], "the first list")

        # watch: a pod added
        c = ("vllm-2", "10.1.0.3:8000", "active")
        self.api.add_pod("vllm-2", "10.1.0.3")
        self.wait_listed([a, b, c], "vllm-2 added")

        # bookmark: the set stays, the next watch starts from its version
        self.api.bookmark()
        bookmark_rv = str(self.api.rv)
        h.poll(lambda: self.metrics().get("cacheroute_k8s_bookmarks_total") == 1, WAIT_S,
               what="the bookmark counted")
        watches = len(self.pod_requests(True))
        self.api.drop_watches()  # as at the watch's timeoutSeconds
        h.poll(lambda: len(self.pod_requests(True)) > watches, WAIT_S, what="a new watch")
        self.assertEqual(self.pod_requests(True)[-1][2]["resourceVersion"], bookmark_rv)
        self.assertEqual(self.listed(), [a, b, c])

        # 410 Gone: a relist, the set as the list says
        lists = len(self.pod_requests(False))
        self.api.expire()
        h.poll(lambda: len(self.pod_requests(False)) > lists, WAIT_S, what="a relist")
        h.poll(lambda: self.metrics().get("cacheroute_k8s_relists_total") == 1, WAIT_S,
               what="the relist counted")
        self.assertEqual(self.metrics()["cacheroute_k8s_gone_total"], 1)
        self.sc.wait_for(lambda e: e.get("msg") == "kubernetes discovery relists the pods",
                         WAIT_S, what="the relist's log line")
        self.assertEqual(self.listed(), [a, b, c])

        # not ready: down; terminating: draining; deleted: gone
        self.api.set_ready("vllm-1", False)
        self.wait_listed([a, ("vllm-1", "10.1.0.2:8000", "down"), c], "vllm-1 down")
        self.api.mark_deleting("vllm-1")
        self.wait_listed([a, ("vllm-1", "10.1.0.2:8000", "draining"), c], "vllm-1 draining")
        self.api.delete_pod("vllm-1")
        self.wait_listed([a, c], "vllm-1 gone")
        r = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertIn(("vllm-1", "gone"), [(e.id, e.state) for e in r.endpoints])

        # a rotated token the sidecar's file does not have yet: refused
        # (401), logged, the set kept; the next read of the file mends it
        start = self.sc.n_events()
        self.api.token = "token-2"
        self.api.drop_watches()
        failed = self.sc.wait_for(
            lambda e: e.get("msg") == "kubernetes discovery failed, the set stays", WAIT_S,
            what="the refusal's log line", start=start)
        self.assertIn("401", failed["detail"])
        self.assertEqual(failed["level"], "warn")
        self.assertGreaterEqual(self.metrics()["cacheroute_k8s_errors_total"], 1)
        self.assertEqual(self.listed(), [a, c])
        self.write_token("token-2")
        self.sc.wait_for(lambda e: e.get("msg") == "kubernetes discovery is reading the pool "
                         "again", WAIT_S, what="the recovery's log line", start=start)
        d = ("vllm-3", "10.1.0.4:8000", "active")
        self.api.add_pod("vllm-3", "10.1.0.4")
        self.wait_listed([a, c, d], "vllm-3 added after the token's rotation")
        # one failure logged, however many tries failed before the file changed
        self.assertEqual(len(self.sc.find_events(
            lambda e: e.get("msg") == "kubernetes discovery failed, the set stays")), 1)

        # a pool with no pod left: the last set stays, counted
        for name in ("vllm-0", "vllm-2", "vllm-3"):
            self.api.delete_pod(name)
        h.poll(lambda: self.metrics().get("cacheroute_k8s_empty_sets_total", 0) >= 1, WAIT_S,
               what="the empty set counted")
        self.assertEqual(self.listed(), [d])  # the set before the last pod left
        m = self.metrics()
        self.assertEqual(m["cacheroute_k8s_lists_total"], 2)
        self.assertGreaterEqual(m["cacheroute_k8s_events_total"], 6)
        self.assertEqual(m["cacheroute_k8s_pods"], 1)  # vllm-pending
        self.sc.assert_clean_exit(self)
        self.assertLess(time.monotonic() - started, 60)

    def test_oversized_event(self):
        """A watch line past 4 MiB is never kept: the watch is dropped,
        counted and logged, the set stays, and the next watch goes on."""
        self.sc = self.start()
        self.stub = self.sc.stub()
        a = ("vllm-0", "10.1.0.1:8000", "active")
        b = ("vllm-1", "10.1.0.2:8000", "active")
        self.wait_listed([a, b], "the first list")
        h.poll(lambda: self.api.watchers, WAIT_S, what="a watch open")
        self.api.raw_line('{"type":"ADDED","object":{"x":"' + "y" * (5 << 20) + '"}}')
        failed = self.sc.wait_for(
            lambda e: e.get("msg") == "kubernetes discovery failed, the set stays", WAIT_S,
            what="the oversized event's log line")
        self.assertIn("a watch event longer than 4194304 bytes", failed["detail"])
        self.assertEqual(self.metrics()["cacheroute_k8s_errors_total"], 1)
        self.assertEqual(self.listed(), [a, b])
        self.api.add_pod("vllm-2", "10.1.0.3")
        self.wait_listed([a, b, ("vllm-2", "10.1.0.3:8000", "active")], "vllm-2 added")
        self.sc.assert_clean_exit(self)

    def test_gone_as_http_status(self):
        """A watch answered HTTP 410 with a Status (not an ERROR event)
        relists too."""
        self.sc = self.start()
        self.stub = self.sc.stub()
        a = ("vllm-0", "10.1.0.1:8000", "active")
        b = ("vllm-1", "10.1.0.2:8000", "active")
        self.wait_listed([a, b], "the first list")
        h.poll(lambda: self.api.watchers, WAIT_S, what="a watch open")
        self.api.gone_as_status = True
        self.api.expire(notify=False)
        self.api.add_pod("vllm-2", "10.1.0.3", emit=False)  # only a relist sees it
        self.api.drop_watches()
        self.wait_listed([a, b, ("vllm-2", "10.1.0.3:8000", "active")], "the relist")
        m = self.metrics()
        self.assertEqual((m["cacheroute_k8s_gone_total"], m["cacheroute_k8s_relists_total"]),
                         (1, 1))
        self.assertEqual(m.get("cacheroute_k8s_errors_total"), 0)
        self.sc.assert_clean_exit(self)

    def test_two_ports_and_annotation(self):
        self.api.ports = [8000, 8001]
        self.api.add_pod("vllm-9", "fd00::9",
                         annotations={"cacheroute.io/kv-events": "tcp://kv-9:7000"})
        self.sc = self.start("--epp-listen", "127.0.0.1:0")
        self.stub = self.sc.stub()
        want = []
        for name, ip in (("vllm-0", "10.1.0.1"), ("vllm-1", "10.1.0.2"), ("vllm-9", "[fd00::9]")):
            want += [(name + ":8000", ip + ":8000", "active"),
                     (name + ":8001", ip + ":8001", "active")]
        self.wait_listed(want, "a pod per port")
        self.sc.assert_clean_exit(self)

    def test_exclusive_with_endpoints_file(self):
        path = os.path.join(self.dir, "endpoints.json")
        with open(path, "w") as f:
            f.write('{"endpoints": [{"id": "a", "address": "10.0.0.1:80"}]}')
        r = h.run_sidecar("--check-config", "--endpoints-file", path,
                          "--endpoints-k8s-pool", "llm/vllm-pool")
        self.assertEqual(r.returncode, 2)
        self.assertIn("--endpoints-file and --endpoints-k8s-pool are exclusive", r.stderr)
        r = h.run_sidecar("--check-config", "--endpoints-k8s-pool", "vllm-pool")
        self.assertEqual(r.returncode, 2)
        self.assertIn("NAMESPACE/NAME", r.stderr)


if __name__ == "__main__":
    h.main()
