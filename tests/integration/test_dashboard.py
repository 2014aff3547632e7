"""The Grafana dashboard the Helm chart ships (helm/cacheroute/dashboards/
cacheroute.json) against the real sidecar: every metric a panel queries is
exported by a running cacheroute-sidecar, with the labels the query uses.

The sidecar runs with a real redis-server as its state backend (the
cacheroute_replica_* and cacheroute_state_backend_up families), an endpoints
file (the cacheroute_endpoint* families, and the engine scrapes'
cacheroute_engine_scrape* ones), --objectives (the door's
cacheroute_door_* families), --epp-listen (the endpoint picker's
cacheroute_epp_* families) and --kv-events
on a ZeroMQ PUB socket bound here with python3-zmq (the cacheroute_kv_*
families, which exist only for shards with an engine). Two more sidecars
export the discovery families, which exist only with their source (each
excludes an endpoints file): one with --endpoints-dns against Debian's
dnsmasq (test_discover's), one with --endpoints-k8s-pool against the fake
API server (tests/k8s). A few Route,
ReportOutcome, Plan and SelectInjection calls make the families that appear
with traffic show up. Then each panel's PromQL is parsed and each metric name
it reads, each label it matches or groups by, and each literal value an `=`
matcher asks for must be in /metrics. A query naming a metric the sidecar does
not export fails with the panel's title."""
import json
import os
import re
import shutil
import sys
import tempfile
import time
import unittest
import urllib.request

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "k8s"))

import grpc  # noqa: E402
import zmq  # noqa: E402

import harness as h  # noqa: E402
from fake_apiserver import FakeApiServer  # noqa: E402
from harness import P  # noqa: E402
from test_discover import NAME, Dnsmasq  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(REPO, "helm", "cacheroute", "dashboards", "cacheroute.json")
SHARDS = 4
KV_SHARD = 1

# Labels Prometheus adds at scrape time (target labels, kube-prometheus'
# relabelings), not the sidecar's: a query may match or group by them.
TARGET_LABELS = {"namespace", "job", "pod", "instance", "service", "container", "endpoint",
                 "node"}
# PromQL words that look like names but are not metrics.
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "le", "inf", "nan"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


# ---------------------------------------------------------------- PromQL

def _strip_strings(expr):
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)


def parse_expr(expr):
    """(metric names, [(name or None, label, op, value)], grouping labels) of
    a PromQL expression: names are the identifiers left once strings, label
    matchers, range selectors and by/without/on/ignoring lists are removed and
    function calls (a name before '(') are skipped."""
    matchers = []
    for m in re.finditer(r'([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}', expr):
        name = m.group(1)
        if name in KEYWORDS:
            name = None
        for lm in re.finditer(r'([A-Za-z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"', m.group(2)):
            matchers.append((name, lm.group(1), lm.group(2), lm.group(3)))
    grouping = []
    for m in re.finditer(r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)',
                         expr):
        grouping += [g.strip() for g in m.group(1).split(",") if g.strip()]
    rest = _strip_strings(expr)
    rest = re.sub(r'\{[^}]*\}', ' ', rest)
    rest = re.sub(r'\[[^\]]*\]', ' ', rest)
    rest = re.sub(r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', rest)
    names = []
    for m in re.finditer(r'(?<![\w.$])([A-Za-z_:][\w:]*)(\s*\()?', rest):
        word, call = m.group(1), m.group(2)
        if call or word.lower() in KEYWORDS:
            continue
        names.append(word)
    return names, matchers, grouping


def queries(dashboard):
    """(panel title, expr) for every target of every panel, rows' nested
    panels included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((p.get("title", "?"), t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    return out


def all_panels(dashboard):
    out = []

    def walk(panels):
        for p in panels:
            out.append(p)
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    return out


# ---------------------------------------------------------------- /metrics

def scrape(port):
    """({family: type}, {sample name: [labels dict]}) of one /metrics page."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        body = r.read().decode()
    types, samples = {}, {}
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(None, 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            m = re.match(r'([A-Za-z_:][\w:]*)(?:\{(.*)\})? \S+$', line)
            if not m:
                raise AssertionError("unparsable /metrics line: %r" % line)
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
            samples.setdefault(m.group(1), []).append(labels)
    return types, samples


def sample_value(port, name):
    """The value of name's first sample on port's /metrics, or None."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        m = re.search(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), r.read().decode(), re.M)
    return float(m.group(1)) if m else None


def merge(pages):
    """One (types, samples) of several /metrics pages: what the sidecars
    export between them."""
    types, samples = {}, {}
    for t, s in pages:
        types.update(t)
        for name, labels in s.items():
            samples.setdefault(name, []).extend(labels)
    return types, samples


def family_of(name, types):
    """The family a sample name belongs to, and whether that is allowed:
    _bucket/_sum/_count only on a histogram (or summary), and a histogram
    only through them."""
    if name in types:
        return name, types[name] not in ("histogram", "summary")
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[:-len(suffix)] if name.endswith(suffix) else None
        if base and types.get(base) in ("histogram", "summary"):
            return base, True
    return None, False


def check_expr(title, expr, types, samples):
    """Problems with one query, as messages naming the panel."""
    problems = []
    names, matchers, grouping = parse_expr(expr)
    if not names:
        problems.append("panel %r: no metric name in %r" % (title, expr))
    for name in names:
        fam, ok = family_of(name, types)
        if fam is None:
            problems.append("panel %r: %s is not exported by the sidecar" % (title, name))
        elif not ok:
            problems.append("panel %r: %s is a %s; query it through _bucket/_sum/_count"
                            % (title, name, types[fam]))
        elif not samples.get(name):
            problems.append("panel %r: %s is declared but has no sample" % (title, name))
    known = {}
    for name in names:
        for labels in samples.get(name, []):
            for k, v in labels.items():
                known.setdefault(k, set()).add(v)
    for name, label, op, value in matchers:
        if label in TARGET_LABELS or label == "__name__":
            continue
        scope = samples.get(name, []) if name else [lab for n in names
                                                     for lab in samples.get(n, [])]
        if not any(label in lab for lab in scope):
            problems.append("panel %r: %s has no label %r" % (title, name or names, label))
        elif op == "=" and not any(lab.get(label) == value for lab in scope):
            problems.append("panel %r: %s never has %s=%r (it has %s)"
                            % (title, name, label, value,
                               sorted({lab.get(label) for lab in scope})))
    for label in grouping:
        if label in TARGET_LABELS:
            continue
        if label not in known:
            problems.append("panel %r: groups by %r, which none of %s has"
                            % (title, label, sorted(set(names))))
    return problems


class ParserTest(unittest.TestCase):
    """The extraction itself, so that a query cannot pass by being misread."""

    def test_names_functions_and_labels(self):
        names, matchers, grouping = parse_expr(
            'histogram_quantile(0.99, sum by (le, method) (rate(cacheroute_rpc_duration_seconds_bucket'
            '{namespace=~"$namespace", code!="OK"}[$__rate_interval]))) / '
            'sum without (shard) (cacheroute_x_total{a="b{c}"} offset 5m) * 1e3')
        self.assertEqual(names, ["cacheroute_rpc_duration_seconds_bucket", "cacheroute_x_total"])
        self.assertIn(("cacheroute_rpc_duration_seconds_bucket", "code", "!=", "OK"), matchers)
        self.assertEqual(grouping, ["le", "method", "shard"])

    def test_unknown_names_and_labels_fail(self):
        types = {"cacheroute_a_total": "counter", "cacheroute_h_seconds": "histogram"}
        samples = {"cacheroute_a_total": [{"reason": "prefix"}],
                   "cacheroute_h_seconds_bucket": [{"le": "1"}]}
        self.assertEqual(check_expr("ok", 'sum by (reason) (rate(cacheroute_a_total'
                                    '{reason="prefix"}[5m]))', types, samples), [])
        self.assertEqual(check_expr("ok", "rate(cacheroute_h_seconds_bucket[5m])", types,
                                    samples), [])
        for expr, words in (("rate(cacheroute_b_total[5m])", "not exported"),
                            ("cacheroute_a_total_count", "not exported"),
                            ("cacheroute_h_seconds", "histogram"),
                            ('cacheroute_a_total{shard="1"}', "no label 'shard'"),
                            ('cacheroute_a_total{reason="nope"}', "never has"),
                            ("sum by (code) (cacheroute_a_total)", "groups by 'code'")):
            problems = check_expr("Panel X", expr, types, samples)
            self.assertTrue(problems, expr)
            self.assertIn("Panel X", problems[0])
            self.assertIn(words, problems[0], expr)


class DashboardFileTest(unittest.TestCase):
    def setUp(self):
        with open(DASHBOARD) as f:
            self.text = f.read()
        self.dash = json.loads(self.text)

    def test_valid_json_with_unique_panel_ids(self):
        ids = [p.get("id") for p in all_panels(self.dash)]
        self.assertTrue(ids)
        self.assertNotIn(None, ids, "a panel without an id")
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        self.assertEqual(dupes, [], "duplicate panel ids")
        self.assertTrue(self.dash.get("uid"))
        self.assertGreaterEqual(self.dash["schemaVersion"], 36)

    def test_datasource_is_a_variable(self):
        tvars = {v["name"]: v for v in self.dash["templating"]["list"]}
        self.assertEqual(tvars["datasource"]["type"], "datasource")
        self.assertEqual(tvars["datasource"]["query"], "prometheus")
        # No hard-coded datasource uid anywhere: every reference is the variable.
        for p in all_panels(self.dash):
            for holder in [p] + p.get("targets", []):
                ds = holder.get("datasource")
                if ds is not None:
                    self.assertEqual(ds, {"type": "prometheus", "uid": "${datasource}"},
                                     p.get("title"))
        uids = set(re.findall(r'"uid":\s*"([^"]*)"', self.text))
        self.assertLessEqual(uids, {"${datasource}", "-- Grafana --", self.dash["uid"]}, uids)

    def test_every_panel_queries_something(self):
        for p in all_panels(self.dash):
            if p.get("type") == "row":
                continue
            self.assertTrue([t for t in p.get("targets", []) if t.get("expr")], p.get("title"))
            refs = [t["refId"] for t in p["targets"]]
            self.assertEqual(len(refs), len(set(refs)), p.get("title"))


def served(stub, rid, prompt, blocks, cached, shard_hint=None):
    item = P.cr.RouteItem(block_hashes=[prompt * 1000 + b for b in range(blocks)],
                          prompt_tokens=blocks * 16, request_id=rid)
    d = stub.Route(P.cr.RouteRequest(requests=[item]), timeout=h.RPC_TIMEOUT).routes[0]
    stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[P.cr.Outcome(
        request_id=rid, shard=d.shard, prompt_tokens=blocks * 16, cached_tokens=cached)]),
        timeout=h.RPC_TIMEOUT)
    return d


@unittest.skipUnless(shutil.which("redis-server"), "needs redis-server")
class DashboardAgainstSidecarTest(h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        with open(DASHBOARD) as f:
            self.dash = json.load(f)
        self.redis = h.Redis()
        self.addCleanup(self.redis.kill)
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        self.addCleanup(self.ctx.term)
        self.addCleanup(self.pub.close, 0)
        # named endpoints: the cacheroute_endpoint* families exist once a set does
        endpoints = os.path.join(self.make_dir(), "endpoints.json")
        with open(endpoints, "w") as f:
            json.dump({"endpoints": [{"id": "e%d" % k, "address": "10.0.0.%d:8000" % k}
                                     for k in range(SHARDS)]}, f)
        self.sc = self.start_sidecar(
            "--n-shards", str(SHARDS), "--metrics-listen", "127.0.0.1:0",
            "--endpoints-file", endpoints,
            "--kv-events", "%d=tcp://127.0.0.1:%d" % (KV_SHARD, port),
            "--state-backend", self.redis.url, "--replica-id", "dash-0",
            "--cluster", "dashboard", "--sync-interval", "0.1", "--lease-ttl", "1",
            "--objectives", "interactive:0:2000,batch:-1:30000",
            "--epp-listen", "127.0.0.1:0",
            metrics=False)
        self.port = self.sc.config["metrics_port"]
        self.stub = self.sc.stub()

    def make_dir(self):
        d = tempfile.mkdtemp(prefix="cr-dashboard-")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def drive(self):
        """Traffic of every kind the panels look at."""
        for i in range(8):
            served(self.stub, "dash-%d" % i, i % 3, 4, 16 * (i % 2))
        # a request with an objective and a fairness id: the door's families
        self.stub.Route(P.cr.RouteRequest(requests=[P.cr.RouteItem(
            block_hashes=[7001, 7002], prompt_tokens=32, request_id="dash-door",
            objective="batch", fairness_id="tenant-a")]), timeout=h.RPC_TIMEOUT)
        # Arrivals for the estimator (the leader plans from the merged
        # counts), and a plan that only answers (replicas install the
        # leader's table, never their own).
        self.stub.RecordArrival(P.cr.RecordArrivalRequest(owners=[1, 1, 2, 3, 1, 4]),
                                timeout=h.RPC_TIMEOUT)
        self.stub.Plan(h.plan_request(rates=[(1, 12.0), (2, 3.0), (3, 0.5)]),
                       timeout=h.RPC_TIMEOUT)
        try:
            self.stub.SelectInjection(P.cr.SelectInjectionRequest(), timeout=h.RPC_TIMEOUT)
        except grpc.RpcError:
            pass  # a refusal is counted by code, which a panel shows too
        # The leader's first push and lease: the replica families fill in.
        h.poll(lambda: self.value("cacheroute_replica_leader") == 1, 15,
               what="the replica to take the lease")

    def discovery_ports(self):
        """The metrics ports of a DNS-discovery sidecar and a Kubernetes-
        discovery one, each once its source has answered."""
        d = self.make_dir()
        dns = Dnsmasq(d, ["127.0.0.21", "127.0.0.22"])
        self.addCleanup(dns.stop)
        token = os.path.join(d, "token")
        with open(token, "w") as f:
            f.write("token-1\n")
        api = FakeApiServer(d, "token-1").start()
        self.addCleanup(api.stop)
        api.add_pod("vllm-0", "10.1.0.1")
        ports = []
        for flags, family in (
                (("--endpoints-dns", NAME + ":8000", "--dns-server",
                  "127.0.0.1:%d" % dns.port), "cacheroute_dns_endpoints"),
                (("--endpoints-k8s-pool", "llm/vllm-pool", "--k8s-api", api.url,
                  "--k8s-token-file", token, "--k8s-ca-file", api.cert), "cacheroute_k8s_pods")):
            sc = self.start_sidecar("--metrics-listen", "127.0.0.1:0", *flags, metrics=False)
            port = sc.config["metrics_port"]
            h.poll(lambda: (sample_value(port, family) or 0) > 0, 15, what=family + " set")
            ports.append(port)
        return ports

    def value(self, name):
        return sample_value(self.port, name)

    def test_every_queried_metric_is_exported(self):
        self.drive()
        types, samples = merge([scrape(p) for p in [self.port] + self.discovery_ports()])
        qs = queries(self.dash)
        self.assertGreater(len(qs), 20)
        problems = []
        for title, expr in qs:
            problems += check_expr(title, expr, types, samples)
        self.assertEqual(problems, [], "\n".join(problems))
        # The families the brief names are all on the dashboard.
        queried = {n for _, e in qs for n in parse_expr(e)[0]}
        for name in ("cacheroute_routes_placed_total", "cacheroute_served_prompt_tokens_total",
                     "cacheroute_route_hit_prediction_error_tokens_total",
                     "cacheroute_route_hit_predictions_checked_total",
                     "cacheroute_prediction_error_ratio", "cacheroute_prediction_bias_seconds",
                     "cacheroute_route_outstanding_work", "cacheroute_plan_churn_sessions_total",
                     "cacheroute_replica_leader", "cacheroute_replica_last_sync_age_seconds",
                     "cacheroute_state_backend_up", "cacheroute_rpc_requests_total",
                     "cacheroute_kv_event_batches_total", "cacheroute_route_index_blocks"):
            self.assertIn(name, queried)
        # The KV-event families are per shard, for the shard with an engine.
        self.assertEqual([lab["shard"] for lab in samples["cacheroute_kv_event_batches_total"]],
                         [str(KV_SHARD)])


if __name__ == "__main__":
    h.main()
