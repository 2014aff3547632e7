#!/usr/bin/python3
"""Assertions on the rendered cacheroute chart (helm template output).

Runs on Debian's python3 with PyYAML (python3-yaml) and the helm binary that
scripts/helm-tools.sh installs ($CR_HELM, else $CR_TOOLS_DIR/bin/helm, else
<repo>/.tools/bin/helm).

    /usr/bin/python3 helm/tests/test_chart.py [-v]
"""
import decimal
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHART = os.path.join(REPO, "helm", "cacheroute")
CI = os.path.join(CHART, "ci")
TOOLS = os.environ.get("CR_TOOLS_DIR") or os.path.join(REPO, ".tools")
HELM = os.environ.get("CR_HELM") or os.path.join(TOOLS, "bin", "helm")

# Every flag of cacheroute-sidecar (name -> default), from its --help.
SIDECAR_FLAGS = [
    "listen", "threads", "max-message-bytes", "shutdown-grace", "replan-interval", "receipts",
    "replan", "max-imbalance", "admit-hysteresis", "route-by", "load-bound", "inflight-ttl",
    "inflight-max", "inflight-per-caller", "block-tokens", "index-blocks", "max-route-hashes", "miss-weight",
    "route-planned", "scrape-interval", "scrape-timeout", "scrape-path", "scrape-port",
    "scrape-max-bytes", "state-file", "snapshot-interval",
    "metrics-listen", "log-level", "reservations", "compressed-requests",
    "handshake-timeout", "max-connection-idle", "max-connection-age", "max-connection-age-grace",
    "max-concurrent-streams", "memory-quota-bytes", "max-calls-per-method", "max-arrivals-per-call",
    "request-deadline",
    "reply-deadline", "max-pending-reply-bytes", "max-decode-bytes", "stream-idle-timeout", "metrics-timeout", "metrics-max-connections", "metrics-per-ip-connections",
    "n-shards", "qcap", "warm-slots-per-shard",
    "half-life", "window", "estimator-clock", "max-owners",
    "model-config", "model-layers", "model-kv-heads", "model-head-dim", "kv-dtype-bytes",
    "tensor-parallel", "kv-bytes-per-token", "model-params-b", "model-d-model",
    "mfu", "peak-tflops", "prefill-fixed-ms", "prefill-coeffs", "kv-source",
    "link-gbps", "link-efficiency", "h2d-gbps", "load-fixed-ms",
    "link-queue-penalty", "decision-margin-ms",
    "calibrate", "calibration-half-life", "calibration-min-samples",
    "max-reservation-ms", "reservation-horizon-s", "reservation-confirm-s",
    "probe-interval", "nic", "sysfs-root",
    "tls-cert", "tls-key", "tls-client-ca", "health-listen", "admin-identity", "route-identity",
    "route-access", "kv-events", "kv-events-max-frame-bytes", "kv-events-topic",
    "kv-events-dp-size",
    "admin-token-file",
    "state-backend", "replica-id", "cluster", "sync-interval", "lease-ttl", "replica-ttl",
    "backend-timeout", "backend-start", "state-backend-password-file",
    "endpoints-file", "endpoint-fail-errors", "endpoint-fail-window", "endpoint-down-for",
    "epp-listen", "epp-fallbacks", "epp-tokens", "epp-owner-header", "epp-max-body-bytes",
    "epp-tokenize-timeout", "epp-body-mode", "epp-max-requests", "epp-max-buffered-bytes",
    "epp-base-model",
    "objectives", "admit-budget-ms", "admit-pressure", "admit-pressure-off",
    "admit-pressure-tau-s", "admit-meet-slo",
    "admit-max-queued", "admit-max-per-id", "admit-max-held-bytes", "admit-max-wait-ms",
    "admit-tracked-ids",
    "kv-events-template", "endpoints-dns", "dns-interval", "dns-server",
    "endpoints-k8s-pool", "k8s-api", "k8s-token-file", "k8s-ca-file",
]

# cacheroute.config key -> flag, kept apart from the chart's own table on
# purpose: the test checks the chart against this list.
CONFIG_FLAGS = {
    "threads": "threads",
    "reservations": "reservations",
    "compressedRequests": "compressed-requests",
    "maxMessageBytes": "max-message-bytes",
    "shutdownGrace": "shutdown-grace",
    "replanInterval": "replan-interval",
    "receipts": "receipts",
    "replan": "replan",
    "maxImbalance": "max-imbalance",
    "admitHysteresis": "admit-hysteresis",
    "routeBy": "route-by",
    "loadBound": "load-bound",
    "inflightTtl": "inflight-ttl",
    "inflightMax": "inflight-max",
    "inflightPerCaller": "inflight-per-caller",
    "objectives": "objectives",
    "admitBudgetMs": "admit-budget-ms",
    "admitPressure": "admit-pressure",
    "admitPressureOff": "admit-pressure-off",
    "admitPressureTauS": "admit-pressure-tau-s",
    "admitMeetSlo": "admit-meet-slo",
    "admitMaxQueued": "admit-max-queued",
    "admitMaxPerId": "admit-max-per-id",
    "admitMaxHeldBytes": "admit-max-held-bytes",
    "admitMaxWaitMs": "admit-max-wait-ms",
    "admitTrackedIds": "admit-tracked-ids",
    "blockTokens": "block-tokens",
    "indexBlocks": "index-blocks",
    "maxRouteHashes": "max-route-hashes",
    "missWeight": "miss-weight",
    "routePlanned": "route-planned",
    "scrapeInterval": "scrape-interval",
    "scrapeTimeout": "scrape-timeout",
    "scrapePath": "scrape-path",
    "scrapePort": "scrape-port",
    "scrapeMaxBytes": "scrape-max-bytes",
    "stateFile": "state-file",
    "snapshotInterval": "snapshot-interval",
    "logLevel": "log-level",
    "handshakeTimeout": "handshake-timeout",
    "maxConnectionIdle": "max-connection-idle",
    "maxConnectionAge": "max-connection-age",
    "maxConnectionAgeGrace": "max-connection-age-grace",
    "maxConcurrentStreams": "max-concurrent-streams",
    "memoryQuotaBytes": "memory-quota-bytes",
    "maxCallsPerMethod": "max-calls-per-method",
    "maxArrivalsPerCall": "max-arrivals-per-call",
    "requestDeadline": "request-deadline",
    "replyDeadline": "reply-deadline",
    "maxPendingReplyBytes": "max-pending-reply-bytes",
    "maxDecodeBytes": "max-decode-bytes",
    "streamIdleTimeout": "stream-idle-timeout",
    "metricsTimeout": "metrics-timeout",
    "metricsMaxConnections": "metrics-max-connections",
    "metricsPerIpConnections": "metrics-per-ip-connections",
    "nShards": "n-shards",
    "qcap": "qcap",
    "warmSlotsPerShard": "warm-slots-per-shard",
    "halfLife": "half-life",
    "window": "window",
    "estimatorClock": "estimator-clock",
    "maxOwners": "max-owners",
    "modelConfig": "model-config",
    "modelLayers": "model-layers",
    "modelKvHeads": "model-kv-heads",
    "modelHeadDim": "model-head-dim",
    "kvDtypeBytes": "kv-dtype-bytes",
    "tensorParallel": "tensor-parallel",
    "kvBytesPerToken": "kv-bytes-per-token",
    "modelParamsB": "model-params-b",
    "modelDModel": "model-d-model",
    "mfu": "mfu",
    "peakTflops": "peak-tflops",
    "prefillFixedMs": "prefill-fixed-ms",
    "prefillCoeffs": "prefill-coeffs",
    "kvSources": "kv-source",
    "linkGbps": "link-gbps",
    "linkEfficiency": "link-efficiency",
    "h2dGbps": "h2d-gbps",
    "loadFixedMs": "load-fixed-ms",
    "linkQueuePenalty": "link-queue-penalty",
    "decisionMarginMs": "decision-margin-ms",
    "calibrate": "calibrate",
    "calibrationHalfLife": "calibration-half-life",
    "calibrationMinSamples": "calibration-min-samples",
    "maxReservationMs": "max-reservation-ms",
    "reservationHorizonS": "reservation-horizon-s",
    "reservationConfirmS": "reservation-confirm-s",
    "probeInterval": "probe-interval",
    "nics": "nic",
    "sysfsRoot": "sysfs-root",
    "adminIdentities": "admin-identity",
    "routeIdentities": "route-identity",
    "routeAccess": "route-access",
    "kvEvents": "kv-events",
    "kvEventsMaxFrameBytes": "kv-events-max-frame-bytes",
    "kvEventsTopic": "kv-events-topic",
    "kvEventsDpSize": "kv-events-dp-size",
    "endpointFailErrors": "endpoint-fail-errors",
    "endpointFailWindow": "endpoint-fail-window",
    "endpointDownFor": "endpoint-down-for",
}
# Keys that compose a flag with a port.
HOST_KEYS = {"listenHost": "listen", "metricsListenHost": "metrics-listen",
             "healthListenHost": "health-listen"}
# Flags rendered from cacheroute.tls, cacheroute.adminToken and
# cacheroute.stateBackend.passwordSecret (files in mounted Secrets), not from
# cacheroute.config.
SECRET_FLAGS = ["tls-cert", "tls-key", "tls-client-ca", "admin-token-file",
                "state-backend-password-file"]
# cacheroute.stateBackend key -> flag, rendered only when url is set.
BACKEND_FLAGS = {
    "url": "state-backend",
    "cluster": "cluster",
    "syncInterval": "sync-interval",
    "leaseTtl": "lease-ttl",
    "replicaTtl": "replica-ttl",
    "timeoutMs": "backend-timeout",
    "start": "backend-start",
}
# Flags from the pod itself (the downward API), not from a value.
POD_FLAGS = ["replica-id"]
# Flags rendered from the top-level endpoints values (the mounted ConfigMap's
# file), not from cacheroute.config.
ENDPOINTS_FLAGS = ["endpoints-file", "endpoints-dns", "dns-interval", "dns-server",
                   "kv-events-template"]
# epp key -> flag, rendered in mode epp only (--epp-listen from listenHost
# and port).
EPP_FLAGS = {
    "fallbacks": "epp-fallbacks",
    "tokens": "epp-tokens",
    "ownerHeader": "epp-owner-header",
    "maxBodyBytes": "epp-max-body-bytes",
    "tokenizeTimeout": "epp-tokenize-timeout",
    "bodyMode": "epp-body-mode",
    "maxRequests": "epp-max-requests",
    "maxBufferedBytes": "epp-max-buffered-bytes",
    "baseModel": "epp-base-model",
}
EPP_HOST_FLAGS = ["epp-listen"]
# epp.discovery key -> flag, rendered in mode epp with discovery on
# (--endpoints-k8s-pool from pool, else the release's InferencePool;
# --kv-events-template from endpoints.kvEventsTemplate, as for dns).
K8S_FLAGS = {
    "pool": "endpoints-k8s-pool",
    "api": "k8s-api",
    "tokenFile": "k8s-token-file",
    "caFile": "k8s-ca-file",
}
BACKEND_URL = "redis://redis.serving.svc:6379/1"


def env_name(flag):
    return "CACHEROUTE_" + flag.upper().replace("-", "_")


def fmt_scalar(v):
    """A value as the chart must render it (Go JSON number formatting)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v.is_integer() and abs(v) < 1e21:
            return str(int(v))
        r = repr(v)
        if "e" in r and 1e-6 <= abs(v) < 1e21:
            return format(decimal.Decimal(r), "f")
        return r
    return str(v)


def expected_flag_value(key, v):
    if key == "kvSources":
        items = []
        for s in v:
            if isinstance(s, dict):
                item = "%s=%s" % (s["name"], fmt_scalar(s["gbps"]))
                if s.get("rttMs") is not None:
                    item += "," + fmt_scalar(s["rttMs"])
                items.append(item)
            else:
                items.append(s)
        return " ".join(items)
    if key == "prefillCoeffs" and isinstance(v, list):
        return ",".join(fmt_scalar(x) for x in v)
    if key == "calibrate" and isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, list):
        return " ".join(fmt_scalar(x) for x in v)
    return fmt_scalar(v)


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def helm(*args, check=True):
    p = subprocess.run([HELM, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True)
    if check and p.returncode != 0:
        raise AssertionError("helm %s failed (%d):\n%s" % (" ".join(args), p.returncode, p.stderr))
    return p


def render(*args, chart=CHART):
    out = helm("template", "cr", chart, "--namespace", "serving", *args).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    by_kind = {}
    for d in docs:
        by_kind.setdefault(d["kind"], []).append(d)
    return docs, by_kind


def is_redis(obj):
    """One of the chart's Redis objects (redis.enabled)."""
    return obj["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "redis"


def one(by_kind, kind, redis=False):
    """The one object of a kind: cacheroute's own, or with redis=True the
    chart's Redis'."""
    objs = [o for o in by_kind.get(kind, []) if is_redis(o) == redis]
    if len(objs) != 1:
        raise AssertionError("expected one %s%s, got %d" % ("Redis " if redis else "", kind,
                                                            len(objs)))
    return objs[0]


def configmap(by_kind, name):
    """The ConfigMap called name."""
    objs = [o for o in by_kind.get("ConfigMap", []) if o["metadata"]["name"] == name]
    if len(objs) != 1:
        raise AssertionError("expected one ConfigMap %s, got %d" % (name, len(objs)))
    return objs[0]


def pod_spec(by_kind):
    return one(by_kind, "Deployment")["spec"]["template"]["spec"]


def containers(spec):
    return {c["name"]: c for c in spec.get("containers", [])}


def env_of(container):
    names = [e["name"] for e in container.get("env", [])]
    dupes = {n for n in names if names.count(n) > 1}
    if dupes:
        raise AssertionError("duplicate env vars: %s" % sorted(dupes))
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def env_from_values(text):
    """The cacheroute container's environment rendered from a values file
    holding text."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        f.write(text)
        f.flush()
        _, by_kind = render("-f", f.name)
    return env_of(containers(pod_spec(by_kind))["cacheroute"])


def leaf_paths(d, prefix=()):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from leaf_paths(v, prefix + (k,))
        else:
            yield prefix + (k,)


class ChartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not os.access(HELM, os.X_OK):
            raise unittest.SkipTest("no helm at %s: run scripts/helm-tools.sh" % HELM)
        cls.defaults = load_yaml(os.path.join(CHART, "values.yaml"))
        cls.all_values = load_yaml(os.path.join(CI, "all-options-values.yaml"))
        cls.chart_meta = load_yaml(os.path.join(CHART, "Chart.yaml"))
        cls.all_docs, cls.all = render("-f", os.path.join(CI, "all-options-values.yaml"))
        cls.def_docs, cls.default = render()

    # --- the values files -------------------------------------------------
    def test_flags_table_covers_every_sidecar_flag(self):
        flags = (set(CONFIG_FLAGS.values()) | set(HOST_KEYS.values()) | set(SECRET_FLAGS)
                 | set(BACKEND_FLAGS.values()) | set(POD_FLAGS) | set(ENDPOINTS_FLAGS)
                 | set(EPP_FLAGS.values()) | set(EPP_HOST_FLAGS) | set(K8S_FLAGS.values()))
        self.assertEqual(flags, set(SIDECAR_FLAGS))
        self.assertEqual(set(self.defaults["cacheroute"]["config"]),
                         set(CONFIG_FLAGS) | set(HOST_KEYS))
        self.assertEqual(set(self.defaults["cacheroute"]["stateBackend"]),
                         set(BACKEND_FLAGS) | {"passwordSecret"})
        self.assertEqual(set(self.defaults["epp"]),
                         set(EPP_FLAGS) | {"listenHost", "port", "servicePort", "inferencePool",
                                           "discovery"})
        self.assertEqual(set(self.defaults["epp"]["discovery"]), set(K8S_FLAGS) | {"enabled"})

    def test_all_options_file_sets_every_value(self):
        missing = []
        for path in leaf_paths(self.defaults):
            node = self.all_values
            for k in path:
                if not isinstance(node, dict) or k not in node:
                    missing.append(".".join(path))
                    break
                node = node[k]
        self.assertEqual(missing, [], "values missing from ci/all-options-values.yaml")
        cfg = self.all_values["cacheroute"]["config"]
        unset = [k for k, v in cfg.items() if v in (None, "", [])]
        self.assertEqual(unset, [], "config values left unset in the all-options file")

    def test_chart_metadata(self):
        self.assertEqual(self.chart_meta["apiVersion"], "v2")
        self.assertEqual(self.chart_meta["version"], "0.1.0")
        self.assertEqual(self.chart_meta["appVersion"], "0.1.0")

    # --- sidecar mode, all options ----------------------------------------
    def test_sidecar_pod_has_both_containers(self):
        spec = pod_spec(self.all)
        self.assertEqual([c["name"] for c in spec["containers"]], ["vllm", "cacheroute"])
        self.assertNotIn("initContainers", spec)
        vllm = containers(spec)["vllm"]
        inf = self.all_values["inference"]
        self.assertEqual(vllm["image"], "vllm/vllm-openai:v0.6.3")
        for field in ("command", "args", "env", "envFrom", "ports", "resources", "volumeMounts",
                      "livenessProbe", "readinessProbe", "startupProbe", "securityContext",
                      "workingDir"):
            self.assertEqual(vllm[field], inf[field], field)

    def test_cacheroute_image_and_ports(self):
        c = containers(pod_spec(self.all))["cacheroute"]
        img = self.all_values["image"]
        self.assertEqual(c["image"], "%s:%s" % (img["repository"], img["tag"]))
        self.assertEqual(c["imagePullPolicy"], img["pullPolicy"])
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports, self.all_values["cacheroute"]["ports"])

    def test_grpc_probes(self):
        c = containers(pod_spec(self.all))["cacheroute"]
        cr = self.all_values["cacheroute"]
        port = cr["ports"]["health"]  # TLS is on: the plaintext health port
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            want = cr[probe]
            got = c[probe]
            self.assertEqual(got["grpc"], {"port": port, "service": want["service"]}, probe)
            for k in ("initialDelaySeconds", "periodSeconds", "timeoutSeconds", "failureThreshold"):
                self.assertEqual(got[k], want[k], "%s.%s" % (probe, k))
            self.assertNotIn("httpGet", got)
        self.assertEqual(c["livenessProbe"]["grpc"]["service"], "")
        self.assertEqual(c["readinessProbe"]["grpc"]["service"], "cacheroute.v1.CacheRoute")

    def test_env_for_every_config_value(self):
        c = containers(pod_spec(self.all))["cacheroute"]
        env = env_of(c)
        cr = self.all_values["cacheroute"]
        cfg = cr["config"]
        expected = {
            "CACHEROUTE_LISTEN": "%s:%d" % (cfg["listenHost"], cr["ports"]["grpc"]),
            "CACHEROUTE_METRICS_LISTEN": "%s:%d" % (cfg["metricsListenHost"], cr["ports"]["metrics"]),
            "CACHEROUTE_HEALTH_LISTEN": "%s:%d" % (cfg["healthListenHost"], cr["ports"]["health"]),
            "CACHEROUTE_TLS_CERT": cr["tls"]["mountPath"] + "/tls.crt",
            "CACHEROUTE_TLS_KEY": cr["tls"]["mountPath"] + "/tls.key",
            "CACHEROUTE_TLS_CLIENT_CA": cr["tls"]["mountPath"] + "-ca/ca.crt",
            "CACHEROUTE_ADMIN_TOKEN_FILE": "%s/%s" % (cr["adminToken"]["mountPath"],
                                                      cr["adminToken"]["key"]),
            "CACHEROUTE_STATE_BACKEND_PASSWORD_FILE": "%s/%s" % (
                cr["stateBackend"]["passwordSecret"]["mountPath"],
                cr["stateBackend"]["passwordSecret"]["key"]),
            "CACHEROUTE_ENDPOINTS_FILE": self.all_values["endpoints"]["mountPath"] + "/endpoints.json",
        }
        for key, flag in CONFIG_FLAGS.items():
            expected[env_name(flag)] = expected_flag_value(key, cfg[key])
        for key, flag in BACKEND_FLAGS.items():
            expected[env_name(flag)] = expected_flag_value(key, cr["stateBackend"][key])
        expected["CACHEROUTE_REPLICA_ID"] = None  # valueFrom: test_state_backend_env
        for name, value in sorted(expected.items()):
            self.assertIn(name, env, name)
            self.assertEqual(env[name], value, name)
        rendered = {n for n in env if n.startswith("CACHEROUTE_")}
        self.assertEqual(rendered, set(expected), "unexpected CACHEROUTE_* variables")
        # Every value is a string (Kubernetes rejects numbers in env values).
        for e in c["env"]:
            if "value" in e:
                self.assertIsInstance(e["value"], str, e["name"])
        # Spot checks of the formatting rules.
        self.assertEqual(env["CACHEROUTE_MAX_MESSAGE_BYTES"], "134217728")
        self.assertEqual(env["CACHEROUTE_MAX_OWNERS"], "2000000")
        self.assertEqual(env["CACHEROUTE_QCAP"], "40.5")
        self.assertEqual(env["CACHEROUTE_KV_SOURCE"], "s3=25,2 local-nvme=50 peer=100,0.5")
        self.assertEqual(env["CACHEROUTE_NIC"], "eth0 ib0")
        self.assertEqual(env["TZ"], "UTC")

    def test_nvidia_env_without_gpu_request(self):
        spec = pod_spec(self.all)
        c = containers(spec)["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "0,1,2,3")
        self.assertEqual(env["NVIDIA_DRIVER_CAPABILITIES"], "compute,utility")
        for section in ("requests", "limits"):
            self.assertNotIn("nvidia.com/gpu", c.get("resources", {}).get(section, {}))
        # The GPUs belong to the inference container.
        self.assertEqual(containers(spec)["vllm"]["resources"]["limits"]["nvidia.com/gpu"], 4)
        # Default values: NVIDIA_VISIBLE_DEVICES=all, no GPU resource either.
        c = containers(pod_spec(self.default))["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["NVIDIA_VISIBLE_DEVICES"], "all")
        self.assertEqual(env["NVIDIA_DRIVER_CAPABILITIES"], "compute,utility")
        self.assertNotIn("nvidia.com/gpu", json.dumps(c.get("resources", {})))

    def test_security_context(self):
        for by_kind in (self.all, self.default):
            sc = containers(pod_spec(by_kind))["cacheroute"]["securityContext"]
            self.assertIs(sc["runAsNonRoot"], True)
            self.assertIsInstance(sc["runAsUser"], int)
            self.assertNotEqual(sc["runAsUser"], 0)
            self.assertEqual(sc["runAsUser"], 65532)
            self.assertIs(sc["readOnlyRootFilesystem"], True)
            self.assertIs(sc["allowPrivilegeEscalation"], False)
            self.assertIn("ALL", sc["capabilities"]["drop"])
            self.assertEqual(sc["seccompProfile"]["type"], "RuntimeDefault")
        # A writable /tmp, since the root filesystem is read-only.
        c = containers(pod_spec(self.default))["cacheroute"]
        self.assertIn("/tmp", [m["mountPath"] for m in c["volumeMounts"]])

    def test_termination_grace_exceeds_shutdown_grace(self):
        spec = pod_spec(self.all)
        grace = self.all_values["cacheroute"]["config"]["shutdownGrace"]
        self.assertEqual(spec["terminationGracePeriodSeconds"], 120)
        self.assertGreater(spec["terminationGracePeriodSeconds"], grace)
        env = env_of(containers(spec)["cacheroute"])
        self.assertEqual(env["CACHEROUTE_SHUTDOWN_GRACE"], "30")
        # Computed: shutdownGrace + 5.
        spec = pod_spec(self.default)
        self.assertEqual(spec["terminationGracePeriodSeconds"], 15)
        _, by_kind = render("--set", "cacheroute.config.shutdownGrace=42")
        self.assertEqual(pod_spec(by_kind)["terminationGracePeriodSeconds"], 47)
        _, by_kind = render("--set-json", "cacheroute.config.shutdownGrace=7.5")
        self.assertEqual(pod_spec(by_kind)["terminationGracePeriodSeconds"], 13)
        # A user value not above the grace fails rendering, with a message.
        p = helm("template", "cr", CHART, "--set", "terminationGracePeriodSeconds=10", check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("must be greater than cacheroute.config.shutdownGrace", p.stderr)

    def test_scheduling_and_pod_settings(self):
        spec = pod_spec(self.all)
        v = self.all_values
        self.assertEqual(spec["nodeSelector"], {"nvidia.com/gpu.present": "true"})
        self.assertEqual(spec["tolerations"], v["tolerations"])
        self.assertEqual(spec["affinity"], v["affinity"])
        self.assertEqual(spec["topologySpreadConstraints"], v["topologySpreadConstraints"])
        self.assertEqual(spec["runtimeClassName"], "nvidia")
        self.assertEqual(spec["priorityClassName"], "gpu-serving")
        self.assertEqual(spec["serviceAccountName"], "cacheroute-sa")
        self.assertEqual(spec["imagePullSecrets"], [{"name": "regcred"}, {"name": "regcred-2"}])
        self.assertEqual(spec["securityContext"], {"fsGroup": 1000})
        vols = {vol["name"]: vol for vol in spec["volumes"]}
        self.assertEqual(vols["host-sys"]["hostPath"]["path"], "/sys")
        self.assertEqual(vols["cacheroute-tmp"]["emptyDir"]["sizeLimit"], "128Mi")
        self.assertIn("dshm", vols)
        dep = one(self.all, "Deployment")
        self.assertEqual(dep["spec"]["replicas"], 2)
        self.assertEqual(dep["spec"]["strategy"], v["strategy"])
        labels = dep["spec"]["template"]["metadata"]["labels"]
        self.assertEqual(labels["app.kubernetes.io/name"], "cr")
        self.assertEqual(labels["app.kubernetes.io/instance"], "cr")
        self.assertEqual(labels["app.kubernetes.io/managed-by"], "Helm")
        self.assertEqual(labels["tier"], "serving")
        self.assertEqual(labels["team"], "inference")
        for k, val in dep["spec"]["selector"]["matchLabels"].items():
            self.assertEqual(labels[k], val)

    def test_service_servicemonitor_pdb(self):
        svc = one(self.all, "Service")
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        self.assertEqual(ports["grpc"]["port"], 50051)
        self.assertEqual(ports["grpc"]["targetPort"], "grpc")
        self.assertEqual(ports["metrics"]["targetPort"], "metrics")
        self.assertEqual(ports["http"]["port"], 8000)
        sm = one(self.all, "ServiceMonitor")
        self.assertEqual(sm["apiVersion"], "monitoring.coreos.com/v1")
        self.assertEqual(sm["metadata"]["namespace"], "monitoring")
        self.assertEqual(sm["metadata"]["labels"]["release"], "prometheus")
        self.assertEqual(sm["spec"]["namespaceSelector"], {"matchNames": ["serving"]})
        ep = sm["spec"]["endpoints"][0]
        self.assertEqual((ep["port"], ep["interval"], ep["scrapeTimeout"]), ("metrics", "15s", "5s"))
        self.assertEqual(sm["spec"]["selector"]["matchLabels"],
                         {k: svc["metadata"]["labels"][k] for k in sm["spec"]["selector"]["matchLabels"]})
        pdb = one(self.all, "PodDisruptionBudget")
        self.assertEqual(pdb["spec"]["minAvailable"], 1)
        self.assertNotIn("maxUnavailable", pdb["spec"])
        self.assertEqual(pdb["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow")
        # Off by default.
        self.assertNotIn("ServiceMonitor", self.default)
        self.assertEqual(one(self.default, "PodDisruptionBudget")["spec"], {
            "maxUnavailable": 1,
            "selector": one(self.default, "Deployment")["spec"]["selector"]})

    # --- defaults -----------------------------------------------------------
    def test_defaults_render_only_required_env(self):
        c = containers(pod_spec(self.default))["cacheroute"]
        env = env_of(c)
        # Sidecar mode: gRPC and metrics on loopback (the engine is in the
        # pod), plaintext health on the pod IP for the kubelet.
        self.assertEqual({n: v for n, v in env.items() if n.startswith("CACHEROUTE_")}, {
            "CACHEROUTE_LISTEN": "127.0.0.1:50051",
            "CACHEROUTE_METRICS_LISTEN": "127.0.0.1:9090",
            "CACHEROUTE_HEALTH_LISTEN": "0.0.0.0:8081",
            "CACHEROUTE_SHUTDOWN_GRACE": "10",
        })
        self.assertEqual(c["image"], "cacheroute/cacheroute-sidecar:%s" % self.chart_meta["appVersion"])
        self.assertEqual({p["name"]: p["containerPort"] for p in c["ports"]},
                         {"grpc": 50051, "metrics": 9090, "health": 8081})
        self.assertEqual(c["livenessProbe"]["grpc"], {"port": 8081, "service": ""})
        self.assertEqual(c["readinessProbe"]["grpc"], {"port": 8081, "service": "cacheroute.v1.CacheRoute"})
        self.assertNotIn("Service", self.default)  # not unless asked, in sidecar mode
        self.assertNotIn("NetworkPolicy", self.default)
        self.assertEqual([x["name"] for x in pod_spec(self.default)["containers"]],
                         ["inference", "cacheroute"])

    def test_number_formatting(self):
        # helm --set keeps floats as strings (the schema rejects them):
        # fractional values go through --set-json.
        _, by_kind = render("--set", "cacheroute.config.maxMessageBytes=67108864",
                            "--set-json", "cacheroute.config.mfu=0.5",
                            "--set-json", "cacheroute.config.prefillCoeffs=[10,0.05,0.000002]",
                            "--set-json", 'cacheroute.config.kvSources=[{"name":"s3","gbps":12.5}]')
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_MAX_MESSAGE_BYTES"], "67108864")
        self.assertEqual(env["CACHEROUTE_MFU"], "0.5")
        self.assertEqual(env["CACHEROUTE_PREFILL_COEFFS"], "10,0.05,0.000002")
        self.assertEqual(env["CACHEROUTE_KV_SOURCE"], "s3=12.5")
        # From a values file, where YAML integers arrive as float64.
        env = env_from_values("cacheroute:\n  config:\n    maxMessageBytes: 67108864\n"
                              "    maxOwners: 1000000\n    linkEfficiency: 0.825\n")
        self.assertEqual(env["CACHEROUTE_MAX_MESSAGE_BYTES"], "67108864")
        self.assertEqual(env["CACHEROUTE_MAX_OWNERS"], "1000000")
        self.assertEqual(env["CACHEROUTE_LINK_EFFICIENCY"], "0.825")

    def test_calibrate_and_model_config(self):
        # An unquoted on/off is a YAML boolean: it renders as the binary's word.
        for value, want in (("false", "off"), ("true", "on")):
            _, by_kind = render("--set", "cacheroute.config.calibrate=" + value)
            self.assertEqual(env_of(containers(pod_spec(by_kind))["cacheroute"])["CACHEROUTE_CALIBRATE"], want)
        env = env_from_values("cacheroute:\n  config:\n    calibrate: off\n"
                              "    modelConfig: /models/m/config.json\n")
        self.assertEqual(env["CACHEROUTE_CALIBRATE"], "off")
        self.assertEqual(env["CACHEROUTE_MODEL_CONFIG"], "/models/m/config.json")
        p = helm("template", "cr", CHART, "--set", "cacheroute.config.calibrate=maybe", check=False)
        self.assertNotEqual(p.returncode, 0)

    def test_metrics_disabled(self):
        _, by_kind = render("--set", "metrics.enabled=false", "--set", "service.enabled=true")
        c = containers(pod_spec(by_kind))["cacheroute"]
        self.assertEqual(env_of(c)["CACHEROUTE_METRICS_LISTEN"], "")
        self.assertEqual([p["name"] for p in c["ports"]], ["grpc", "health"])
        self.assertNotIn("metrics", [p["name"] for p in one(by_kind, "Service")["spec"]["ports"]])

    def test_ipv6_listen(self):
        _, by_kind = render("--set", "cacheroute.config.listenHost=::")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_LISTEN"], "[::]:50051")

    # --- other modes --------------------------------------------------------
    def test_standalone_mode(self):
        _, by_kind = render("-f", os.path.join(CI, "standalone-values.yaml"))
        self.assertEqual(set(by_kind), {"Deployment", "Service", "ServiceAccount",
                                        "PodDisruptionBudget", "ServiceMonitor"})
        spec = pod_spec(by_kind)
        self.assertEqual([c["name"] for c in spec["containers"]], ["cacheroute"])
        self.assertNotIn("initContainers", spec)
        env = env_of(spec["containers"][0])
        self.assertEqual(env["CACHEROUTE_QCAP"], "40")
        self.assertEqual(env["CACHEROUTE_KV_SOURCE"], "s3=25,2")
        svc = one(by_kind, "Service")
        self.assertEqual(sorted(p["name"] for p in svc["spec"]["ports"]), ["grpc", "metrics"])
        self.assertEqual(one(by_kind, "Deployment")["spec"]["replicas"], 2)
        self.assertEqual(spec["nodeSelector"], {"nvidia.com/gpu.present": "true"})

    def test_all_options_in_standalone_mode(self):
        _, by_kind = render("-f", os.path.join(CI, "all-options-values.yaml"), "--set", "mode=standalone")
        spec = pod_spec(by_kind)
        self.assertEqual([c["name"] for c in spec["containers"]], ["cacheroute"])
        self.assertEqual(sorted(p["name"] for p in one(by_kind, "Service")["spec"]["ports"]),
                         ["grpc", "metrics"])
        self.assertEqual(env_of(spec["containers"][0])["CACHEROUTE_N_SHARDS"], "16")

    def test_native_sidecar(self):
        _, by_kind = render("-f", os.path.join(CI, "native-sidecar-values.yaml"))
        spec = pod_spec(by_kind)
        self.assertEqual([c["name"] for c in spec["containers"]], ["inference"])
        self.assertEqual([c["name"] for c in spec["initContainers"]], ["cacheroute"])
        cr = spec["initContainers"][0]
        self.assertEqual(cr["restartPolicy"], "Always")
        self.assertIn("readinessProbe", cr)
        env = env_of(cr)
        self.assertEqual(env["CACHEROUTE_SYSFS_ROOT"], "/host/sys")
        mounts = {m["name"]: m for m in cr["volumeMounts"]}
        self.assertEqual(mounts["host-sys"], {"name": "host-sys", "mountPath": "/host/sys", "readOnly": True})
        self.assertEqual(one(by_kind, "Service")["spec"]["clusterIP"], "None")
        self.assertEqual(one(by_kind, "PodDisruptionBudget")["spec"]["minAvailable"], "50%")

    def test_state_volume(self):
        # emptyDir: --state-file at mountPath/fileName, the volume mounted.
        _, by_kind = render("--set", "cacheroute.state.enabled=true")
        spec = pod_spec(by_kind)
        c = containers(spec)["cacheroute"]
        self.assertEqual(env_of(c)["CACHEROUTE_STATE_FILE"], "/var/lib/cacheroute/state")
        self.assertIn({"name": "cacheroute-state", "mountPath": "/var/lib/cacheroute"},
                      c["volumeMounts"])
        volumes = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(volumes["cacheroute-state"],
                         {"name": "cacheroute-state", "emptyDir": {"sizeLimit": "256Mi"}})
        self.assertNotIn("PersistentVolumeClaim", by_kind)
        # pvc: the chart's own claim (all options), or an existing one.
        pvc = one(self.all, "PersistentVolumeClaim")
        claim = one(self.all, "Deployment")["metadata"]["name"] + "-state"
        self.assertEqual(pvc["metadata"]["name"], claim)
        self.assertEqual(pvc["spec"], {"accessModes": ["ReadWriteOnce"],
                                       "storageClassName": "fast-ssd",
                                       "resources": {"requests": {"storage": "2Gi"}}})
        volumes = {v["name"]: v for v in pod_spec(self.all)["volumes"]}
        self.assertEqual(volumes["cacheroute-state"]["persistentVolumeClaim"],
                         {"claimName": claim})
        _, by_kind = render("--set", "cacheroute.state.enabled=true",
                            "--set", "cacheroute.state.volume=pvc",
                            "--set", "cacheroute.state.pvc.existingClaim=mine")
        self.assertNotIn("PersistentVolumeClaim", by_kind)
        volumes = {v["name"]: v for v in pod_spec(by_kind)["volumes"]}
        self.assertEqual(volumes["cacheroute-state"]["persistentVolumeClaim"],
                         {"claimName": "mine"})
        # Off by default: no variable, no volume.
        spec = pod_spec(self.default)
        self.assertNotIn("CACHEROUTE_STATE_FILE", env_of(containers(spec)["cacheroute"]))
        self.assertNotIn("cacheroute-state", {v["name"] for v in spec["volumes"]})

    def test_render_failures(self):
        cases = [
            (["--set", "mode=daemonset"], "mode"),
            (["--set", "inference.name=cacheroute"], "inference.name must not be \"cacheroute\""),
            (["--set", "cacheroute.extraEnv[0].name=NVIDIA_VISIBLE_DEVICES",
              "--set-string", "cacheroute.extraEnv[0].value=0"], "cacheroute.extraEnv sets NVIDIA_VISIBLE_DEVICES"),
            (["--set", "podDisruptionBudget.maxUnavailable=null"], "podDisruptionBudget: set one of"),
            (["--set", "service.enabled=true", "--set", "inference.ports[0].name=grpc",
              "--set", "inference.ports[0].containerPort=8000"],
             "clashes with a cacheroute port"),
        ]
        for args, message in cases:
            p = helm("template", "cr", CHART, *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)

    # --- security -----------------------------------------------------------
    def test_tls_secrets_and_admins(self):
        spec = pod_spec(self.all)
        c = containers(spec)["cacheroute"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        self.assertEqual(mounts["cacheroute-tls"],
                         {"name": "cacheroute-tls", "mountPath": "/etc/cr/tls", "readOnly": True})
        self.assertEqual(mounts["cacheroute-tls-ca"]["mountPath"], "/etc/cr/tls-ca")
        self.assertEqual(mounts["cacheroute-admin-token"]["mountPath"], "/etc/cr/admin")
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(vols["cacheroute-tls"]["secret"], {
            "secretName": "cacheroute-tls",
            "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]})
        self.assertEqual(vols["cacheroute-tls-ca"]["secret"], {
            "secretName": "cacheroute-client-ca", "items": [{"key": "ca.crt", "path": "ca.crt"}]})
        self.assertEqual(vols["cacheroute-admin-token"]["secret"], {
            "secretName": "cacheroute-admin",
            "items": [{"key": "admin-token", "path": "admin-token"}]})
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_ADMIN_IDENTITY"],
                         "spiffe://cluster.local/ns/serving/sa/operator ops.example.com")
        # mTLS with the CA from the certificate's own Secret (cert-manager's ca.crt).
        _, by_kind = render("--set", "cacheroute.tls.enabled=true",
                            "--set", "cacheroute.tls.secretName=s", "--set", "cacheroute.tls.mutual=true")
        spec = pod_spec(by_kind)
        env = env_of(containers(spec)["cacheroute"])
        self.assertEqual(env["CACHEROUTE_TLS_CLIENT_CA"], "/etc/cacheroute/tls/ca.crt")
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertIn({"key": "ca.crt", "path": "ca.crt"}, vols["cacheroute-tls"]["secret"]["items"])
        self.assertNotIn("cacheroute-tls-ca", vols)
        self.assertNotIn("CACHEROUTE_ADMIN_TOKEN_FILE", env)

    def test_probes_use_health_listen_with_tls(self):
        # Standalone without TLS: the gRPC port binds every address; probes use it.
        _, by_kind = render("--set", "mode=standalone")
        c = containers(pod_spec(by_kind))["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_LISTEN"], "0.0.0.0:50051")
        self.assertEqual(env["CACHEROUTE_METRICS_LISTEN"], "0.0.0.0:9090")
        self.assertNotIn("CACHEROUTE_HEALTH_LISTEN", env)
        self.assertEqual(c["readinessProbe"]["grpc"]["port"], 50051)
        self.assertIn("Service", by_kind)
        # With TLS the kubelet (which cannot speak TLS) probes the health port.
        _, by_kind = render("--set", "mode=standalone", "--set", "cacheroute.tls.enabled=true",
                            "--set", "cacheroute.tls.secretName=s")
        c = containers(pod_spec(by_kind))["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_HEALTH_LISTEN"], "0.0.0.0:8081")
        self.assertEqual(env["CACHEROUTE_TLS_CERT"], "/etc/cacheroute/tls/tls.crt")
        self.assertNotIn("CACHEROUTE_TLS_CLIENT_CA", env)
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertEqual(c[probe]["grpc"]["port"], 8081, probe)
        self.assertIn({"name": "health", "containerPort": 8081, "protocol": "TCP"}, c["ports"])
        # Sidecar mode with a ServiceMonitor: metrics on every address, and a Service.
        _, by_kind = render("--set", "metrics.serviceMonitor.enabled=true")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_METRICS_LISTEN"], "0.0.0.0:9090")
        self.assertEqual(env["CACHEROUTE_LISTEN"], "127.0.0.1:50051")
        self.assertIn("Service", by_kind)

    def test_network_policy(self):
        np = one(self.all, "NetworkPolicy")
        dep = one(self.all, "Deployment")
        self.assertEqual(np["spec"]["podSelector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"])
        self.assertEqual(np["spec"]["policyTypes"], ["Ingress"])
        rules = {r["ports"][0]["port"]: r for r in np["spec"]["ingress"]}
        self.assertEqual(rules["grpc"]["from"], self.all_values["networkPolicy"]["grpcFrom"])
        self.assertEqual(rules["metrics"]["from"], self.all_values["networkPolicy"]["metricsFrom"])
        self.assertNotIn("from", rules["health"])  # the kubelet's probes
        _, by_kind = render("--set", "mode=standalone", "--set", "networkPolicy.enabled=true")
        rules = {r["ports"][0]["port"]: r for r in one(by_kind, "NetworkPolicy")["spec"]["ingress"]}
        self.assertEqual(rules["grpc"]["from"], [{"podSelector": {}}])
        self.assertEqual(set(rules), {"grpc", "metrics"})

    def test_security_render_failures(self):
        cases = [
            (["--set", "cacheroute.tls.enabled=true"], "needs cacheroute.tls.secretName"),
            (["--set", "cacheroute.config.adminIdentities[0]=x"], "adminIdentities needs"),
            (["--set", "cacheroute.tls.enabled=true", "--set", "cacheroute.tls.secretName=s",
              "--set", "cacheroute.config.adminIdentities[0]=x"], "adminIdentities needs"),
            (["--set", "cacheroute.extraEnv[0].name=CACHEROUTE_TLS_CERT",
              "--set-string", "cacheroute.extraEnv[0].value=/x"], "cacheroute.extraEnv sets"),
        ]
        for args, message in cases:
            p = helm("template", "cr", CHART, *args, check=False)
            self.assertNotEqual(p.returncode, 0, args)
            self.assertIn(message, p.stderr, args)

    # --- replicas over a state backend (docs/replicas.md) ---------------
    def render_fails(self, args, message):
        p = helm("template", "cr", CHART, *args, check=False)
        self.assertNotEqual(p.returncode, 0, args)
        self.assertIn(message, p.stderr, args)

    def test_state_backend_env(self):
        _, by_kind = render("-f", os.path.join(CI, "standalone-values.yaml"))
        c = containers(pod_spec(by_kind))["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_STATE_BACKEND"],
                         "redis://redis.serving.svc.cluster.local:6379/0")
        # Default cluster name: namespace and release, so that two releases
        # sharing one Redis never merge.
        self.assertEqual(env["CACHEROUTE_CLUSTER"], "serving.cr-cacheroute")
        # Unset tunables are left to the binary.
        for flag in ("sync-interval", "lease-ttl", "replica-ttl", "backend-timeout", "backend-start"):
            self.assertNotIn(env_name(flag), env)
        # The replica id is the pod's name, from the downward API.
        rid = [e for e in c["env"] if e["name"] == "CACHEROUTE_REPLICA_ID"]
        self.assertEqual(rid, [{"name": "CACHEROUTE_REPLICA_ID",
                                "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}])
        # Every key of the all-options file, and its own cluster name.
        env = env_of(containers(pod_spec(self.all))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_CLUSTER"], "llama-serving")
        self.assertEqual(env["CACHEROUTE_SYNC_INTERVAL"], "0.5")
        self.assertEqual(env["CACHEROUTE_BACKEND_TIMEOUT"], "100")
        self.assertEqual(env["CACHEROUTE_BACKEND_START"], "require")
        self.assertIn("CACHEROUTE_REPLICA_ID", env)

    def test_state_backend_password_secret(self):
        # The Secret's key mounted read-only, its path passed, the password
        # itself nowhere in the rendered objects.
        spec = pod_spec(self.all)
        c = containers(spec)["cacheroute"]
        mounts = {m["name"]: m for m in c["volumeMounts"]}
        self.assertEqual(mounts["cacheroute-state-backend-password"],
                         {"name": "cacheroute-state-backend-password",
                          "mountPath": "/etc/cr/redis", "readOnly": True})
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(vols["cacheroute-state-backend-password"]["secret"], {
            "secretName": "redis-auth",
            "items": [{"key": "redis-password", "path": "redis-password"}]})
        self.assertEqual(env_of(c)["CACHEROUTE_STATE_BACKEND_PASSWORD_FILE"],
                         "/etc/cr/redis/redis-password")
        # Defaults: the key "password" under /etc/cacheroute/state-backend.
        _, by_kind = render("--set", "cacheroute.stateBackend.url=" + BACKEND_URL,
                            "--set", "cacheroute.stateBackend.passwordSecret.name=r")
        spec = pod_spec(by_kind)
        c = containers(spec)["cacheroute"]
        self.assertEqual(env_of(c)["CACHEROUTE_STATE_BACKEND_PASSWORD_FILE"],
                         "/etc/cacheroute/state-backend/password")
        vols = {v["name"]: v for v in spec["volumes"]}
        self.assertEqual(vols["cacheroute-state-backend-password"]["secret"], {
            "secretName": "r", "items": [{"key": "password", "path": "password"}]})
        # No Secret name, or no url: no file, no mount, no volume.
        for args in (["--set", "cacheroute.stateBackend.url=" + BACKEND_URL],
                     ["--set", "cacheroute.stateBackend.passwordSecret.name=r"]):
            _, by_kind = render(*args)
            spec = pod_spec(by_kind)
            c = containers(spec)["cacheroute"]
            self.assertNotIn("CACHEROUTE_STATE_BACKEND_PASSWORD_FILE", env_of(c), args)
            self.assertNotIn("cacheroute-state-backend-password",
                             [m["name"] for m in c["volumeMounts"]], args)
            self.assertNotIn("cacheroute-state-backend-password",
                             [v["name"] for v in spec.get("volumes", [])], args)
        # extraEnv cannot set it behind the chart's back.
        self.render_fails(["--set", "cacheroute.extraEnv[0].name=CACHEROUTE_STATE_BACKEND_PASSWORD_FILE",
                           "--set-string", "cacheroute.extraEnv[0].value=/x"],
                          "CACHEROUTE_STATE_BACKEND_PASSWORD_FILE")

    def test_state_backend_off_by_default(self):
        # No url: no backend flag and no replica id, even with tunables set.
        for args in ([], ["--set", "mode=standalone"],
                     ["--set", "cacheroute.stateBackend.leaseTtl=3",
                      "--set", "cacheroute.stateBackend.cluster=x"]):
            _, by_kind = render(*args)
            env = env_of(containers(pod_spec(by_kind))["cacheroute"])
            for flag in list(BACKEND_FLAGS.values()) + POD_FLAGS:
                self.assertNotIn(env_name(flag), env, args)

    def test_standalone_replicas_need_a_backend(self):
        for n in ("2", "3"):
            self.render_fails(["--set", "mode=standalone", "--set", "replicaCount=" + n],
                              "replicaCount %s in standalone mode needs cacheroute.stateBackend.url" % n)
        # One standalone replica plans alone, as before; so does each pod of
        # sidecar mode without a backend.
        for args in (["--set", "mode=standalone"], ["--set", "replicaCount=3"]):
            _, by_kind = render(*args)
            self.assertNotIn("CACHEROUTE_STATE_BACKEND",
                             env_of(containers(pod_spec(by_kind))["cacheroute"]))
        _, by_kind = render("--set", "mode=standalone", "--set", "replicaCount=3",
                            "--set", "cacheroute.stateBackend.url=" + BACKEND_URL)
        self.assertEqual(one(by_kind, "Deployment")["spec"]["replicas"], 3)

    def test_sidecar_mode_with_a_backend(self):
        # One cacheroute per engine pod, all sharing one Redis and one table.
        for extra, where in (([], "containers"), (["--set", "cacheroute.nativeSidecar=true"], "initContainers")):
            _, by_kind = render("--set", "replicaCount=4",
                                "--set", "cacheroute.stateBackend.url=" + BACKEND_URL, *extra)
            spec = pod_spec(by_kind)
            c = {x["name"]: x for x in spec[where]}["cacheroute"]
            env = env_of(c)
            self.assertEqual(env["CACHEROUTE_STATE_BACKEND"], BACKEND_URL, where)
            self.assertIn("CACHEROUTE_REPLICA_ID", env, where)
            self.assertNotIn("CACHEROUTE_STATE_BACKEND", env_of(containers(spec)["inference"]))

    def test_backend_refuses_calls_clock(self):
        self.render_fails(["--set", "cacheroute.stateBackend.url=" + BACKEND_URL,
                           "--set", "cacheroute.config.estimatorClock=calls"],
                          "cacheroute.stateBackend.url needs cacheroute.config.estimatorClock seconds")
        _, by_kind = render("--set", "cacheroute.config.estimatorClock=calls")  # no backend: fine
        self.assertEqual(env_of(containers(pod_spec(by_kind))["cacheroute"])["CACHEROUTE_ESTIMATOR_CLOCK"],
                         "calls")

    def test_pdb_keeps_one_replica_serving(self):
        base = ["--set", "mode=standalone", "--set", "cacheroute.stateBackend.url=" + BACKEND_URL]
        for n in (2, 3, 5):
            _, by_kind = render(*base, "--set", "replicaCount=%d" % n)
            spec = one(by_kind, "PodDisruptionBudget")["spec"]
            self.assertEqual(spec["selector"], one(by_kind, "Deployment")["spec"]["selector"])
            self.assertGreaterEqual(n - spec["maxUnavailable"], 1, n)
        # The quorum of one exactly, and the toggle.
        _, by_kind = render(*base, "--set", "replicaCount=3", "--set", "podDisruptionBudget.minAvailable=1")
        spec = one(by_kind, "PodDisruptionBudget")["spec"]
        self.assertEqual(spec["minAvailable"], 1)
        self.assertNotIn("maxUnavailable", spec)
        _, by_kind = render(*base, "--set", "replicaCount=3", "--set", "podDisruptionBudget.enabled=false")
        self.assertNotIn("PodDisruptionBudget", by_kind)

    def test_backend_values_schema(self):
        for url in ("redis://r:6379", "redis://10.0.0.7:6380/15", "redis://[fd00::1]:6379/0",
                    "unix:/run/redis/redis.sock"):
            _, by_kind = render("--set", "cacheroute.stateBackend.url=" + url)
            self.assertEqual(env_of(containers(pod_spec(by_kind))["cacheroute"])["CACHEROUTE_STATE_BACKEND"], url)
        # A password in the URL would sit in plain text in the values and the
        # pod spec: refused, as are other schemes and a missing port.
        for url in ("redis://:secret@r:6379", "redis://user:secret@r:6379", "rediss://r:6379",
                    "http://r:6379", "redis://r", "redis://r:6379/x", "unix:", "r:6379"):
            self.render_fails(["--set", "cacheroute.stateBackend.url=" + url],
                              "cacheroute.stateBackend.url")
        good = {"syncInterval": (0.05, 60), "leaseTtl": (0.5, 300), "replicaTtl": (0.5, 86400),
                "timeoutMs": (1, 60000)}
        bad = {"syncInterval": (0.04, 61), "leaseTtl": (0.4, 301), "replicaTtl": (0.4, 86401),
               "timeoutMs": (0, 60001, 1.5)}
        for key, values in good.items():
            for v in values:
                env = env_from_values("cacheroute:\n  stateBackend:\n    url: %s\n    %s: %s\n"
                                      % (BACKEND_URL, key, v))
                self.assertEqual(env[env_name(BACKEND_FLAGS[key])], fmt_scalar(v), key)
        for key, values in bad.items():
            for v in values:
                self.render_fails(["--set", "cacheroute.stateBackend.url=" + BACKEND_URL,
                                   "--set-json", "cacheroute.stateBackend.%s=%s" % (key, v)],
                                  "cacheroute.stateBackend.%s" % key)
        self.render_fails(["--set", "cacheroute.stateBackend.start=maybe"], "cacheroute.stateBackend.start")
        self.render_fails(["--set", "cacheroute.stateBackend.cluster=a b"], "cacheroute.stateBackend.cluster")
        self.render_fails(["--set", "cacheroute.stateBackend.typo=1"], "typo")

    def test_backend_env_names_are_the_charts(self):
        for name in ("CACHEROUTE_REPLICA_ID", "CACHEROUTE_STATE_BACKEND", "CACHEROUTE_LEASE_TTL"):
            self.render_fails(["--set", "cacheroute.extraEnv[0].name=" + name,
                               "--set-string", "cacheroute.extraEnv[0].value=x"],
                              "cacheroute.extraEnv sets " + name)

    # --- the chart's Redis (redis.enabled) -----------------------------------
    def test_redis_objects(self):
        docs, by_kind = render("-f", os.path.join(CI, "router-redis-values.yaml"))
        dep, svc, np = (one(by_kind, k, redis=True) for k in ("Deployment", "Service", "NetworkPolicy"))
        for obj in (dep, svc, np):
            self.assertEqual(obj["metadata"]["name"], "cr-cacheroute-redis")
            self.assertEqual(obj["metadata"]["namespace"], "serving")
        # The replicas point at it.
        cr = one(by_kind, "Deployment")
        self.assertEqual(cr["spec"]["replicas"], 3)
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_STATE_BACKEND"], "redis://cr-cacheroute-redis.serving.svc:6379/0")
        self.assertEqual(env["CACHEROUTE_CLUSTER"], "serving.cr-cacheroute")
        self.assertEqual(env["CACHEROUTE_SYNC_INTERVAL"], "0.5")
        self.assertIn("CACHEROUTE_REPLICA_ID", env)
        self.assertNotIn("CACHEROUTE_STATE_BACKEND_PASSWORD_FILE", env)
        # Neither Deployment's selector matches the other's pods.
        def matches(selector, labels):
            return all(labels.get(k) == v for k, v in selector.items())
        cr_sel, r_sel = cr["spec"]["selector"]["matchLabels"], dep["spec"]["selector"]["matchLabels"]
        cr_pod, r_pod = (d["spec"]["template"]["metadata"]["labels"] for d in (cr, dep))
        self.assertTrue(matches(r_sel, r_pod))
        self.assertFalse(matches(r_sel, cr_pod))
        self.assertFalse(matches(cr_sel, r_pod))
        self.assertEqual(svc["spec"]["selector"], r_sel)
        self.assertFalse(matches(one(by_kind, "Service")["spec"]["selector"], r_pod))
        self.assertEqual(svc["spec"]["ports"], [{"name": "redis", "port": 6379, "targetPort": "redis",
                                                 "protocol": "TCP", "appProtocol": "redis"}])
        # Hardened: non-root, read-only root filesystem, resources, probes.
        spec = dep["spec"]["template"]["spec"]
        self.assertEqual(dep["spec"]["replicas"], 1)
        self.assertEqual(dep["spec"]["strategy"], {"type": "Recreate"})
        self.assertIs(spec["automountServiceAccountToken"], False)
        self.assertNotIn("tolerations", spec)  # not the GPU nodes' toleration
        (c,) = spec["containers"]
        self.assertEqual(c["image"], "redis:7.4.2-alpine")
        self.assertRegex(c["image"], r":\d+\.\d+\.\d+-alpine$")  # a pinned tag
        sc = c["securityContext"]
        self.assertIs(sc["runAsNonRoot"], True)
        self.assertNotEqual(sc["runAsUser"], 0)
        self.assertIs(sc["readOnlyRootFilesystem"], True)
        self.assertIs(sc["allowPrivilegeEscalation"], False)
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        self.assertEqual(sc["seccompProfile"]["type"], "RuntimeDefault")
        self.assertEqual(c["resources"]["limits"]["memory"], "256Mi")
        self.assertIn("cpu", c["resources"]["requests"])
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            self.assertIn(probe, c)
        self.assertEqual(c["readinessProbe"]["exec"]["command"], ["redis-cli", "-p", "6379", "ping"])
        self.assertEqual(c["command"], ["redis-server"])
        args = c["args"]
        self.assertEqual(args[:2], ["--port", "6379"])
        self.assertEqual(args[args.index("--save") + 1], "")
        self.assertEqual(args[args.index("--appendonly") + 1], "no")
        self.assertEqual(args[-2:], ["--maxmemory", "200mb"])
        self.assertNotIn("--requirepass", args)
        self.assertNotIn("env", c)
        # The writable places are emptyDirs (read-only root filesystem).
        self.assertEqual({m["mountPath"] for m in c["volumeMounts"]}, {"/data", "/tmp"})
        self.assertTrue(all("emptyDir" in v for v in spec["volumes"]))
        # Only this release's cacheroute pods reach it.
        self.assertEqual(np["spec"]["podSelector"]["matchLabels"], r_sel)
        self.assertEqual(np["spec"]["policyTypes"], ["Ingress"])
        self.assertEqual(np["spec"]["ingress"], [{
            "ports": [{"port": "redis", "protocol": "TCP"}],
            "from": [{"podSelector": {"matchLabels": cr_sel}}]}])
        # cacheroute's own NetworkPolicy still selects only cacheroute's pods.
        self.assertEqual(one(by_kind, "NetworkPolicy")["spec"]["podSelector"]["matchLabels"], cr_sel)

    def test_redis_values(self):
        _, by_kind = render("--set", "mode=standalone", "--set", "replicaCount=2",
                            "--set", "redis.enabled=true", "--set", "redis.port=6380",
                            "--set", "redis.db=3", "--set", "redis.networkPolicy.enabled=false",
                            "--set", "redis.image.digest=sha256:" + "a" * 64,
                            "--set", "redis.nodeSelector.pool=system",
                            "--set", "fullnameOverride=router")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_STATE_BACKEND"], "redis://router-redis.serving.svc:6380/3")
        dep = one(by_kind, "Deployment", redis=True)
        c = dep["spec"]["template"]["spec"]["containers"][0]
        self.assertEqual(c["image"], "redis@sha256:" + "a" * 64)
        self.assertEqual(c["ports"][0]["containerPort"], 6380)
        self.assertEqual(dep["spec"]["template"]["spec"]["nodeSelector"], {"pool": "system"})
        self.assertEqual(one(by_kind, "Service", redis=True)["spec"]["ports"][0]["port"], 6380)
        self.assertNotIn("NetworkPolicy", by_kind)
        # Off by default, and with an existing Redis: no Redis objects.
        for args in ([], ["-f", os.path.join(CI, "standalone-values.yaml")],
                     ["-f", os.path.join(CI, "all-options-values.yaml")]):
            docs, _ = render(*args)
            self.assertEqual([d["kind"] for d in docs if is_redis(d)], [], args)
        # In sidecar mode too (the engine pods' sidecars are the replicas).
        _, by_kind = render("--set", "replicaCount=4", "--set", "redis.enabled=true")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_STATE_BACKEND"], "redis://cr-cacheroute-redis.serving.svc:6379/0")
        # Both an existing Redis and the chart's: refused.
        self.render_fails(["--set", "redis.enabled=true", "--set", "cacheroute.stateBackend.url=" + BACKEND_URL],
                          "redis.enabled and cacheroute.stateBackend.url")
        # The calls clock is refused with the chart's Redis as with any.
        self.render_fails(["--set", "redis.enabled=true", "--set", "cacheroute.config.estimatorClock=calls"],
                          "needs cacheroute.config.estimatorClock seconds")
        self.render_fails(["--set", "redis.db=16"], "redis.db")
        self.render_fails(["--set", "redis.typo=1"], "typo")

    def test_redis_password(self):
        # One Secret for both sides: Redis requires it, cacheroute AUTHs with it.
        _, by_kind = render("--set", "mode=standalone", "--set", "replicaCount=2",
                            "--set", "redis.enabled=true",
                            "--set", "cacheroute.stateBackend.passwordSecret.name=redis-auth")
        c = one(by_kind, "Deployment", redis=True)["spec"]["template"]["spec"]["containers"][0]
        ref = {"secretKeyRef": {"name": "redis-auth", "key": "password"}}
        self.assertEqual(c["env"], [{"name": "REDIS_PASSWORD", "valueFrom": ref},
                                    {"name": "REDISCLI_AUTH", "valueFrom": ref}])
        self.assertEqual(c["args"][c["args"].index("--requirepass") + 1], "$(REDIS_PASSWORD)")
        self.assertNotIn("--protected-mode", c["args"])
        cr = containers(pod_spec(by_kind))["cacheroute"]
        self.assertEqual(env_of(cr)["CACHEROUTE_STATE_BACKEND_PASSWORD_FILE"],
                         "/etc/cacheroute/state-backend/password")
        self.assertIn("cacheroute-state-backend-password", [m["name"] for m in cr["volumeMounts"]])

    # --- the Grafana dashboard (dashboards.enabled) -------------------------
    def test_dashboard_configmap(self):
        with open(os.path.join(CHART, "dashboards", "cacheroute.json")) as f:
            text = f.read()
        dash = json.loads(text)
        self.assertNotIn("ConfigMap", self.default)  # off by default
        _, by_kind = render("-f", os.path.join(CI, "router-redis-values.yaml"))
        cm = one(by_kind, "ConfigMap")
        self.assertEqual(cm["metadata"]["name"], "cr-cacheroute-dashboards")
        self.assertEqual(cm["metadata"]["namespace"], "serving")
        self.assertEqual(cm["metadata"]["labels"]["grafana_dashboard"], "1")
        self.assertEqual(cm["metadata"]["labels"]["app.kubernetes.io/instance"], "cr")
        self.assertEqual(cm["metadata"]["annotations"], {"grafana_folder": "LLM serving"})
        self.assertEqual(list(cm["data"]), ["cacheroute.json"])
        self.assertEqual(json.loads(cm["data"]["cacheroute.json"]), dash)
        self.assertEqual(cm["data"]["cacheroute.json"].strip(), text.strip())
        # All options: another namespace, the label overridable, extra labels
        # win over commonLabels without a duplicate key.
        cm = configmap(self.all, "cacheroute-llama-dashboards")
        self.assertEqual(cm["metadata"]["namespace"], "monitoring")
        self.assertEqual(cm["metadata"]["labels"]["team"], "observability")
        _, by_kind = render("--set", "dashboards.enabled=true", "--set", "dashboards.label=dashboards",
                            "--set-string", "dashboards.labelValue=cacheroute")
        labels = one(by_kind, "ConfigMap")["metadata"]["labels"]
        self.assertEqual(labels["dashboards"], "cacheroute")
        self.assertNotIn("grafana_dashboard", labels)
        # The dashboard itself: a datasource variable, no hard-coded uid,
        # unique panel ids (tests/integration/test_dashboard.py checks every
        # query against a running sidecar).
        self.assertEqual(dash["templating"]["list"][0]["type"], "datasource")
        self.assertNotRegex(text, r'"uid":\s*"(?!\$\{datasource\}|-- Grafana --|%s")' % dash["uid"])
        ids = [p["id"] for p in dash["panels"]]
        self.assertEqual(len(ids), len(set(ids)))
        self.render_fails(["--set", "dashboards.label=bad label"], "dashboards.label")

    # --- endpoints (--endpoints-file) ----------------------------------------
    def render_values(self, values, *args):
        """helm template with a values file holding values (a dict)."""
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(values, f)
            f.flush()
            return render("-f", f.name, *args)

    def check_endpoints_mounted(self, by_kind, cm_name, mount_path, container="cacheroute"):
        """The endpoints ConfigMap mounted read-only as a directory (never a
        subPath: those are not updated) in the cacheroute container only, and
        --endpoints-file naming endpoints.json in it."""
        spec = pod_spec(by_kind)
        all_containers = spec.get("containers", []) + spec.get("initContainers", [])
        c = [x for x in all_containers if x["name"] == container][0]
        self.assertEqual(env_of(c)["CACHEROUTE_ENDPOINTS_FILE"], mount_path + "/endpoints.json")
        mounts = [m for m in c["volumeMounts"] if m["name"] == "cacheroute-endpoints"]
        self.assertEqual(mounts, [{"name": "cacheroute-endpoints", "mountPath": mount_path,
                                   "readOnly": True}])
        for other in all_containers:
            if other is not c:
                self.assertNotIn("cacheroute-endpoints",
                                 [m["name"] for m in other.get("volumeMounts", [])], other["name"])
        vols = [v for v in spec["volumes"] if v["name"] == "cacheroute-endpoints"]
        self.assertEqual(vols, [{"name": "cacheroute-endpoints", "configMap": {
            "name": cm_name, "items": [{"key": "endpoints.json", "path": "endpoints.json"}]}}])

    def check_endpoints_file(self, cm, values_list):
        """endpoints.json is the file the sidecar reads: JSON, exactly
        {"endpoints": the list}, with no other keys."""
        self.assertEqual(list(cm["data"]), ["endpoints.json"])
        doc = json.loads(cm["data"]["endpoints.json"])
        self.assertEqual(list(doc), ["endpoints"])
        self.assertEqual(doc["endpoints"], values_list)
        for e in doc["endpoints"]:
            self.assertLessEqual(set(e), {"id", "address", "weight"})
            self.assertIsInstance(e["id"], str)
            self.assertIsInstance(e["address"], str)

    def test_endpoints_router(self):
        values = load_yaml(os.path.join(CI, "router-endpoints-values.yaml"))
        _, by_kind = render("-f", os.path.join(CI, "router-endpoints-values.yaml"))
        cm = configmap(by_kind, "cr-cacheroute-endpoints")
        self.assertEqual(cm["metadata"]["namespace"], "serving")
        self.assertEqual(cm["metadata"]["labels"]["app.kubernetes.io/instance"], "cr")
        self.check_endpoints_file(cm, values["endpoints"]["list"])
        self.assertEqual(len(values["endpoints"]["list"]), 3)
        self.check_endpoints_mounted(by_kind, "cr-cacheroute-endpoints", "/etc/cacheroute/endpoints")
        # Standalone, two replicas agreeing over the chart's Redis.
        dep = one(by_kind, "Deployment")
        self.assertEqual(dep["spec"]["replicas"], 2)
        self.assertEqual([c["name"] for c in pod_spec(by_kind)["containers"]], ["cacheroute"])
        one(by_kind, "Deployment", redis=True)
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_STATE_BACKEND"], "redis://cr-cacheroute-redis.serving.svc:6379/0")
        # No checksum of the list on the pods: the sidecar re-reads the file,
        # so a changed list must leave the Deployment as it is (no restart).
        self.assertNotIn("annotations", dep["spec"]["template"]["metadata"])
        changed = dict(values, endpoints={"list": values["endpoints"]["list"][:1] + [
            {"id": "vllm-9", "address": "10.0.0.9:8000", "weight": 3}]})
        _, by_kind2 = self.render_values(changed)
        self.assertEqual(one(by_kind2, "Deployment"), dep)
        self.check_endpoints_file(configmap(by_kind2, "cr-cacheroute-endpoints"),
                                  changed["endpoints"]["list"])

    def test_endpoints_all_options(self):
        # Sidecar mode: mounted in the cacheroute container, not the engine's;
        # characters JSON-encoded as they are (no \u0026 for "&").
        want = self.all_values["endpoints"]["list"]
        cm = configmap(self.all, "cacheroute-llama-endpoints")
        self.check_endpoints_file(cm, want)
        self.assertIn("&tier=<gold>", cm["data"]["endpoints.json"])
        self.assertIn('"id":"7"', cm["data"]["endpoints.json"])
        self.check_endpoints_mounted(self.all, "cacheroute-llama-endpoints", "/etc/cr/endpoints")
        # The same in standalone mode and as a native sidecar.
        _, by_kind = render("-f", os.path.join(CI, "all-options-values.yaml"), "--set", "mode=standalone")
        self.check_endpoints_file(configmap(by_kind, "cacheroute-llama-endpoints"), want)
        self.check_endpoints_mounted(by_kind, "cacheroute-llama-endpoints", "/etc/cr/endpoints")
        _, by_kind = render("-f", os.path.join(CI, "native-sidecar-values.yaml"),
                            "--set", "endpoints.list[0].id=e0", "--set", "endpoints.list[0].address=a:1")
        self.check_endpoints_mounted(by_kind, "cr-cacheroute-endpoints", "/etc/cacheroute/endpoints")
        self.assertEqual([c["name"] for c in pod_spec(by_kind)["initContainers"]], ["cacheroute"])

    def test_endpoints_sources(self):
        # Off by default: no ConfigMap, variable, mount or volume.
        for args in ([], ["--set", "mode=standalone"],
                     ["-f", os.path.join(CI, "router-redis-values.yaml")]):
            docs, by_kind = render(*args)
            self.assertEqual([d["metadata"]["name"] for d in docs
                              if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-endpoints")],
                             [], args)
            spec = pod_spec(by_kind)
            self.assertNotIn("CACHEROUTE_ENDPOINTS_FILE", env_of(containers(spec)["cacheroute"]), args)
            self.assertNotIn("cacheroute-endpoints", [v["name"] for v in spec["volumes"]], args)
        one_ep = [{"id": "e0", "address": "10.0.0.5:8000"}]
        # enabled null or true with a list: the chart's ConfigMap; false: off.
        for enabled in (None, True):
            _, by_kind = self.render_values({"endpoints": {"enabled": enabled, "list": one_ep}})
            self.check_endpoints_file(configmap(by_kind, "cr-cacheroute-endpoints"), one_ep)
            self.check_endpoints_mounted(by_kind, "cr-cacheroute-endpoints", "/etc/cacheroute/endpoints")
        _, by_kind = self.render_values({"endpoints": {"enabled": False, "list": one_ep}})
        self.assertNotIn("ConfigMap", by_kind)
        self.assertNotIn("CACHEROUTE_ENDPOINTS_FILE", env_of(containers(pod_spec(by_kind))["cacheroute"]))
        # An existing ConfigMap: mounted, the chart renders none.
        for enabled in (None, True):
            _, by_kind = self.render_values({"mode": "standalone",
                                             "endpoints": {"enabled": enabled, "existingConfigMap": "fleet",
                                                           "mountPath": "/srv/endpoints/"}})
            self.assertNotIn("ConfigMap", by_kind)
            self.check_endpoints_mounted(by_kind, "fleet", "/srv/endpoints/".rstrip("/"))
        # A weight is passed as given (a whole number stays one); none = absent.
        _, by_kind = self.render_values({"endpoints": {"list": [
            {"id": "a", "address": "x:1", "weight": 1000}, {"id": "b", "address": "y:1", "weight": 0.001},
            {"id": "c", "address": 'q"uote\\back'}]}})
        text = configmap(by_kind, "cr-cacheroute-endpoints")["data"]["endpoints.json"]
        self.assertIn('"weight":1000}', text)
        self.assertEqual([e.get("weight") for e in json.loads(text)["endpoints"]], [1000, 0.001, None])
        self.assertEqual(json.loads(text)["endpoints"][2]["address"], 'q"uote\\back')
        # The most the sidecar takes: 1024 endpoints, 128-byte ids, 256-byte addresses.
        big = [{"id": ("%d-" % i).ljust(128, "x"), "address": ("h%d:" % i).ljust(256, "9")}
               for i in range(1024)]
        _, by_kind = self.render_values({"endpoints": {"list": big}})
        self.check_endpoints_file(configmap(by_kind, "cr-cacheroute-endpoints"), big)

    def test_endpoints_dns(self):
        """endpoints.dns renders --endpoints-dns and its flags, no ConfigMap;
        one source only; the template only with dns."""
        _, by_kind = self.render_values({"mode": "standalone", "endpoints": {
            "dns": "vllm.serving.svc.cluster.local:8000", "dnsInterval": 2,
            "dnsServer": "[fd00::53]:53", "kvEventsTemplate": "tcp://{ip}:5557"}})
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual({k: v for k, v in env.items() if "DNS" in k or "TEMPLATE" in k},
                         {"CACHEROUTE_ENDPOINTS_DNS": "vllm.serving.svc.cluster.local:8000",
                          "CACHEROUTE_DNS_INTERVAL": "2",
                          "CACHEROUTE_DNS_SERVER": "[fd00::53]:53",
                          "CACHEROUTE_KV_EVENTS_TEMPLATE": "tcp://{ip}:5557"})
        self.assertNotIn("CACHEROUTE_ENDPOINTS_FILE", env)
        self.assertNotIn("ConfigMap", by_kind)
        _, by_kind = self.render_values({"endpoints": {"dns": "vllm:8000"}})
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_ENDPOINTS_DNS"], "vllm:8000")
        for unset in ("CACHEROUTE_DNS_INTERVAL", "CACHEROUTE_DNS_SERVER",
                      "CACHEROUTE_KV_EVENTS_TEMPLATE"):
            self.assertNotIn(unset, env)
        ep = {"id": "vllm-0", "address": "10.0.0.5:8000"}
        for endpoints, message in [
                ({"dns": "vllm:8000", "list": [ep]}, "give one endpoint source"),
                ({"dns": "vllm:8000", "existingConfigMap": "fleet"}, "give one endpoint source"),
                ({"kvEventsTemplate": "tcp://{ip}:1"}, "endpoints.kvEventsTemplate needs endpoints.dns"),
                ({"dns": "vllm"}, "endpoints.dns: Does not match pattern"),
                ({"dns": "vllm:1", "dnsInterval": 0}, "endpoints.dnsInterval"),
                ({"dns": "vllm:1", "dnsServer": "localhost:53"}, "endpoints.dnsServer"),
                ({"dns": "vllm:1", "kvEventsTemplate": "tcp://x:1"}, "endpoints.kvEventsTemplate")]:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                yaml.safe_dump({"endpoints": endpoints}, f)
                f.flush()
                p = helm("template", "cr", CHART, "-f", f.name, check=False)
            self.assertNotEqual(p.returncode, 0, endpoints)
            self.assertIn(message, p.stderr, endpoints)

    def test_endpoints_render_failures(self):
        ep = {"id": "vllm-0", "address": "10.0.0.5:8000"}
        cases = [
            ({"list": [ep, dict(ep, id="vllm-1", address="b:1"), ep]},
             'endpoints.list[2].id "vllm-0" is given twice (endpoints.list[0])'),
            ({"list": [ep, dict(ep, id="vllm-0 ")]}, None),  # distinct ids
            ({"enabled": True}, "endpoints.enabled is true but endpoints.list is empty"),
            ({"enabled": True, "list": []}, "endpoints.enabled is true but endpoints.list is empty"),
            ({"list": [ep], "existingConfigMap": "fleet"},
             "endpoints.list and endpoints.existingConfigMap (fleet) are both set"),
            ({"enabled": False, "list": [ep], "existingConfigMap": "fleet"}, "are both set"),
            ({"list": [dict(ep, weight=0)]}, "endpoints.list.0.weight: Must be greater than or equal to 0.001"),
            ({"list": [dict(ep, weight=-1)]}, "endpoints.list.0.weight: Must be greater than or equal to 0.001"),
            ({"list": [dict(ep, weight=1000.5)]}, "endpoints.list.0.weight: Must be less than or equal to 1000"),
            ({"list": [dict(ep, weight="1")]}, "endpoints.list.0.weight: Invalid type"),
            ({"list": [dict(ep, id="")]}, "endpoints.list.0.id: String length must be greater than or equal to 1"),
            ({"list": [dict(ep, id="x" * 129)]}, "endpoints.list.0.id: String length must be less than or equal to 128"),
            ({"list": [dict(ep, address="x" * 257)]},
             "endpoints.list.0.address: String length must be less than or equal to 256"),
            ({"list": [dict(ep, address="caf\u00e9:80")]}, "endpoints.list.0.address: Does not match pattern"),
            ({"list": [dict(ep, id="a\nb")]}, "endpoints.list.0.id: Does not match pattern"),
            ({"list": [{"id": "a"}]}, "address is required"),
            ({"list": [dict(ep, port=1)]}, "Additional property port is not allowed"),
            ({"list": [dict(ep, id="e%d" % i) for i in range(1025)]}, "endpoints.list: Array must have at most 1024 items"),
            ({"existingConfigMap": "Bad_Name"}, "endpoints.existingConfigMap: Does not match pattern"),
            ({"mountPath": "relative"}, "endpoints.mountPath"),
            ({"typo": 1}, "Additional property typo is not allowed"),
        ]
        for endpoints, message in cases:
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                yaml.safe_dump({"endpoints": endpoints}, f)
                f.flush()
                p = helm("template", "cr", CHART, "-f", f.name, check=False)
            if message is None:
                self.assertEqual(p.returncode, 0, p.stderr)
                continue
            self.assertNotEqual(p.returncode, 0, endpoints)
            self.assertIn(message, p.stderr, str(endpoints)[:200])
        # extraEnv cannot set the file behind the chart's back.
        self.render_fails(["--set", "cacheroute.extraEnv[0].name=CACHEROUTE_ENDPOINTS_FILE",
                           "--set-string", "cacheroute.extraEnv[0].value=/x"],
                          "cacheroute.extraEnv sets CACHEROUTE_ENDPOINTS_FILE")

    # --- NOTES.txt ----------------------------------------------------------
    # --- mode epp ------------------------------------------------------------
    def test_epp_mode(self):
        _, by_kind = render("-f", os.path.join(CI, "epp-values.yaml"))
        spec = pod_spec(by_kind)
        self.assertEqual([c["name"] for c in spec["containers"]], ["cacheroute"])
        c = containers(spec)["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_EPP_LISTEN"], "0.0.0.0:9002")
        self.assertEqual(env["CACHEROUTE_LISTEN"], "0.0.0.0:50051")
        self.assertEqual(env["CACHEROUTE_EPP_TOKENS"], "engine")
        self.assertEqual(env["CACHEROUTE_EPP_FALLBACKS"], "2")
        self.assertEqual(env["CACHEROUTE_EPP_MAX_REQUESTS"], "2048")
        self.assertEqual(env["CACHEROUTE_EPP_MAX_BODY_BYTES"], "1048576")
        self.assertEqual(env["CACHEROUTE_MAX_CALLS_PER_METHOD"], "4096")
        self.assertEqual({n for n in env if n.startswith("CACHEROUTE_EPP_")},
                         {"CACHEROUTE_EPP_LISTEN", "CACHEROUTE_EPP_TOKENS", "CACHEROUTE_EPP_FALLBACKS",
                          "CACHEROUTE_EPP_MAX_REQUESTS", "CACHEROUTE_EPP_MAX_BODY_BYTES",
                          "CACHEROUTE_EPP_MAX_BUFFERED_BYTES", "CACHEROUTE_EPP_BASE_MODEL"})
        self.assertEqual(env["CACHEROUTE_EPP_MAX_BUFFERED_BYTES"], "268435456")
        self.assertEqual(env["CACHEROUTE_ENDPOINTS_FILE"], "/etc/cacheroute/endpoints/endpoints.json")
        self.assertIn("CACHEROUTE_STATE_BACKEND", env)  # two replicas over the chart's Redis
        self.assertIn({"name": "grpc-ext-proc", "containerPort": 9002, "protocol": "TCP"}, c["ports"])
        # GIE's health services, on the port the chart probes in every mode.
        for probe, service in (("startupProbe", "liveness"), ("livenessProbe", "liveness"),
                               ("readinessProbe", "readiness")):
            self.assertEqual(c[probe]["grpc"], {"port": 50051, "service": service}, probe)
        svc = one(by_kind, "Service")
        ports = {p["name"]: p for p in svc["spec"]["ports"]}
        self.assertEqual(ports["grpc-ext-proc"], {"name": "grpc-ext-proc", "port": 9002,
                                                  "targetPort": "grpc-ext-proc", "protocol": "TCP",
                                                  "appProtocol": "kubernetes.io/h2c"})
        pool = one(by_kind, "InferencePool")
        self.assertEqual(pool["apiVersion"], "inference.networking.k8s.io/v1")
        self.assertEqual(pool["metadata"]["name"], "cr-cacheroute")
        self.assertEqual(pool["spec"], {
            "selector": {"matchLabels": {"app": "vllm-llama3-8b"}},
            "targetPorts": [{"number": 8000}],
            "endpointPickerRef": {"kind": "Service", "name": svc["metadata"]["name"],
                                  "port": {"number": 9002}, "failureMode": "FailOpen"},
        })
        np = one(by_kind, "NetworkPolicy")
        rules = {r["ports"][0]["port"]: r for r in np["spec"]["ingress"]}
        self.assertEqual(rules["grpc-ext-proc"]["from"], [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "envoy-gateway-system"}}}])

    def test_epp_all_options(self):
        _, by_kind = render("-f", os.path.join(CI, "all-options-values.yaml"), "--set", "mode=epp",
                            "--set", "endpoints.enabled=false")
        epp = self.all_values["epp"]
        c = containers(pod_spec(by_kind))["cacheroute"]
        env = env_of(c)
        self.assertEqual(env["CACHEROUTE_EPP_LISTEN"], "[::]:9102")
        for key, flag in EPP_FLAGS.items():
            self.assertEqual(env[env_name(flag)], fmt_scalar(epp[key]), flag)
        self.assertIn({"name": "grpc-ext-proc", "containerPort": 9102, "protocol": "TCP"}, c["ports"])
        # TLS is on: the kubelet probes the plaintext health port, and the
        # Service does not call the picker's port h2c.
        self.assertEqual(c["readinessProbe"]["grpc"]["port"], self.all_values["cacheroute"]["ports"]["health"])
        # The file's own service names win over the mode's.
        self.assertEqual(c["readinessProbe"]["grpc"]["service"],
                         self.all_values["cacheroute"]["readinessProbe"]["service"])
        ports = {p["name"]: p for p in one(by_kind, "Service")["spec"]["ports"]}
        self.assertEqual(ports["grpc-ext-proc"]["port"], 9002)
        self.assertEqual(ports["grpc-ext-proc"]["targetPort"], "grpc-ext-proc")
        self.assertNotIn("appProtocol", ports["grpc-ext-proc"])
        pool = one(by_kind, "InferencePool")
        self.assertEqual(pool["metadata"]["name"], "llama-pool")
        self.assertEqual(pool["spec"]["endpointPickerRef"], {
            "kind": "Service", "name": "cacheroute-llama", "port": {"number": 9002},
            "failureMode": "FailClose"})
        self.assertEqual(pool["spec"]["selector"], {"matchLabels": {"app": "vllm-llama"}})
        # The pool can be left to the user.
        _, by_kind = render("--set", "mode=epp", "--set", "epp.inferencePool.enabled=false")
        self.assertNotIn("InferencePool", by_kind)

    def test_epp_discovery(self):
        """Mode epp without endpoints listed: the pool's pods are discovered,
        with the RBAC that needs and the token mounted; with a list, or
        epp.discovery.enabled=false, neither."""
        _, by_kind = render("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v")
        spec = pod_spec(by_kind)
        env = env_of(containers(spec)["cacheroute"])
        self.assertEqual(env["CACHEROUTE_ENDPOINTS_K8S_POOL"], "serving/cr-cacheroute")
        self.assertNotIn("CACHEROUTE_ENDPOINTS_FILE", env)
        self.assertNotIn("CACHEROUTE_KV_EVENTS_TEMPLATE", env)  # "" = the binary's default
        self.assertIs(spec["automountServiceAccountToken"], True)
        role, binding = one(by_kind, "Role"), one(by_kind, "RoleBinding")
        self.assertEqual(role["metadata"]["namespace"], "serving")
        self.assertEqual(role["rules"], [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"],
             "verbs": ["get", "list", "watch"]}])
        self.assertEqual(binding["roleRef"], {"apiGroup": "rbac.authorization.k8s.io",
                                              "kind": "Role", "name": role["metadata"]["name"]})
        self.assertEqual(binding["subjects"], [{"kind": "ServiceAccount",
                                                "name": spec["serviceAccountName"],
                                                "namespace": "serving"}])
        # every key, and a pool in another namespace (the Role goes there)
        _, by_kind = render("-f", os.path.join(CI, "all-options-values.yaml"), "--set", "mode=epp",
                            "--set", "endpoints.enabled=false")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        d = self.all_values["epp"]["discovery"]
        for key, flag in K8S_FLAGS.items():
            self.assertEqual(env[env_name(flag)], d[key], flag)
        self.assertNotIn("CACHEROUTE_KV_EVENTS_TEMPLATE", env)
        self.assertEqual(one(by_kind, "Role")["metadata"]["namespace"], "llm")
        _, by_kind = render("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v",
                            "--set-string", "endpoints.kvEventsTemplate=tcp://{ip}:5557")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertEqual(env["CACHEROUTE_KV_EVENTS_TEMPLATE"], "tcp://{ip}:5557")
        self.assertEqual(one(by_kind, "RoleBinding")["subjects"][0]["namespace"], "serving")
        # a list is the source, or discovery is off: no RBAC, no token
        for args in (("-f", os.path.join(CI, "epp-values.yaml")),
                     ("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v",
                      "--set", "epp.discovery.enabled=false"),
                     ("--set", "epp.discovery.enabled=true")):  # mode sidecar
            _, by_kind = render(*args)
            spec = pod_spec(by_kind)
            self.assertNotIn("Role", by_kind, args)
            self.assertNotIn("RoleBinding", by_kind, args)
            self.assertNotIn("CACHEROUTE_ENDPOINTS_K8S_POOL", env_of(containers(spec)["cacheroute"]))
            self.assertIs(spec["automountServiceAccountToken"], False, args)
        self.render_fails(["-f", os.path.join(CI, "epp-values.yaml"),
                           "--set", "epp.discovery.enabled=true"],
                          "epp.discovery.enabled is true and another endpoint source is set")
        # endpoints.dns is a source too: discovery stays off beside it
        _, by_kind = render("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v",
                            "--set", "endpoints.dns=vllm:8000")
        env = env_of(containers(pod_spec(by_kind))["cacheroute"])
        self.assertNotIn("CACHEROUTE_ENDPOINTS_K8S_POOL", env)
        self.assertEqual(env["CACHEROUTE_ENDPOINTS_DNS"], "vllm:8000")
        self.assertNotIn("Role", by_kind)

    def test_epp_only_in_mode_epp(self):
        for args in ((), ("-f", os.path.join(CI, "all-options-values.yaml")),
                     ("-f", os.path.join(CI, "all-options-values.yaml"), "--set", "mode=standalone")):
            _, by_kind = render(*args)
            self.assertNotIn("InferencePool", by_kind, args)
            env = env_of(containers(pod_spec(by_kind))["cacheroute"])
            self.assertEqual([n for n in env if n.startswith("CACHEROUTE_EPP_")], [], args)
            for svc in by_kind.get("Service", []):
                self.assertNotIn("grpc-ext-proc", [p["name"] for p in svc["spec"]["ports"]], args)
        # The probes' services by mode when left null.
        c = containers(pod_spec(self.default))["cacheroute"]
        self.assertEqual(c["livenessProbe"]["grpc"]["service"], "")
        self.assertEqual(c["startupProbe"]["grpc"]["service"], "")
        self.assertEqual(c["readinessProbe"]["grpc"]["service"], "cacheroute.v1.CacheRoute")
        # The flags are the chart's, in any mode.
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump({"cacheroute": {"extraEnv": [{"name": "CACHEROUTE_EPP_TOKENS",
                                                         "value": "engine"}]}}, f)
            f.flush()
            p = helm("template", "cr", CHART, "-f", f.name, check=False)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("cacheroute.extraEnv sets CACHEROUTE_EPP_TOKENS", p.stderr)

    def test_epp_notes(self):
        notes = self.render_notes("-f", os.path.join(CI, "epp-values.yaml"))
        self.assertIn("listens on 0.0.0.0:9002 (--epp-listen)", notes)
        self.assertIn("Service serving/cr-cacheroute, port 9002 (grpc-ext-proc, plaintext h2c)", notes)
        self.assertIn("InferencePool serving/cr-cacheroute (inference.networking.k8s.io/v1)", notes)
        self.assertIn("labelled app=vllm-llama3-8b on port 8000", notes)
        self.assertIn("failureMode FailOpen", notes)
        # The HTTPRoute printed is one object the user can apply as it is.
        m = re.search(r"<<'EOF'\n(.*?)\n  EOF", notes, re.S)
        self.assertIsNotNone(m, notes)
        route = yaml.safe_load("\n".join(line[2:] for line in m.group(1).splitlines()))
        self.assertEqual(route["kind"], "HTTPRoute")
        self.assertEqual(route["apiVersion"], "gateway.networking.k8s.io/v1")
        self.assertEqual(route["spec"]["rules"][0]["backendRefs"], [
            {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "cr-cacheroute"}])
        self.assertIn("keep the endpoints list", notes)
        notes = self.render_notes("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v")
        self.assertIn("Endpoints are discovered", notes)
        self.assertIn("InferencePool serving/cr-cacheroute selects (--endpoints-k8s-pool", notes)
        notes = self.render_notes("--set", "mode=epp", "--set", "epp.inferencePool.matchLabels.app=v",
                                  "--set", "epp.discovery.enabled=false")
        self.assertIn("No endpoints are listed", notes)
        self.assertIn("epp.discovery is off", notes)
        notes = self.render_notes("--set", "mode=epp", "--set", "epp.inferencePool.enabled=false")
        self.assertIn("No InferencePool is rendered", notes)
        self.assertIn("endpointPickerRef: {kind: Service, name: cr-cacheroute, port: {number: 9002}", notes)
        self.assertNotIn("HTTPRoute", self.render_notes())
        self.assertNotIn("max_message_timeout", notes)  # no door queue: nothing held
        notes = self.render_notes("--set", "mode=epp", "--set", "epp.inferencePool.enabled=false",
                                  "--set", "cacheroute.config.admitMaxQueued=64",
                                  "--set", "cacheroute.config.admitMaxWaitMs=5000")
        self.assertIn("holds up to 64 sheddable requests", notes)
        self.assertIn("max_message_timeout to at least admitMaxWaitMs + 2 s (7 s)", notes)

    def render_notes(self, *args):
        """helm template does not render NOTES.txt: render it through tpl
        from a ConfigMap in a scratch copy of the chart."""
        tmp = tempfile.mkdtemp()
        try:
            chart = os.path.join(tmp, "cacheroute")
            shutil.copytree(CHART, chart)
            shutil.copy(os.path.join(chart, "templates", "NOTES.txt"), os.path.join(chart, "notes-source.txt"))
            with open(os.path.join(chart, "templates", "zz-notes-test.yaml"), "w") as f:
                f.write("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: notes\ndata:\n"
                        "  notes: {{ tpl (.Files.Get \"notes-source.txt\") . | toJson }}\n")
            _, by_kind = render(*args, chart=chart)
            return [c for c in by_kind["ConfigMap"] if c["metadata"]["name"] == "notes"][0]["data"]["notes"]
        finally:
            shutil.rmtree(tmp)

    def check_plan_request_json(self, text):
        """The Plan body in NOTES parses as a cacheroute.v1.PlanRequest (when
        protoc and python3-protobuf are installed)."""
        req = self.parse_request_json(text, "PlanRequest")
        if req is not None:
            self.assertEqual(len(req.rates), 2)
            self.assertEqual(req.rates[0].owner, 1)

    def parse_request_json(self, text, message):
        """text parsed as the JSON of cacheroute.v1.<message>, or None when
        protoc or python3-protobuf is missing."""
        protoc = shutil.which("protoc")
        try:
            from google.protobuf import json_format
        except ImportError:
            json_format = None
        if not protoc or json_format is None:
            return None
        tmp = tempfile.mkdtemp()
        try:
            subprocess.run([protoc, "-I", os.path.join(REPO, "proto"), "--python_out", tmp,
                            "cacheroute/v1/cacheroute.proto"], check=True)
            sys.path.insert(0, tmp)
            try:
                for name in [m for m in sys.modules if m == "cacheroute" or m.startswith("cacheroute.")]:
                    del sys.modules[name]
                from cacheroute.v1 import cacheroute_pb2
                return json_format.Parse(text, getattr(cacheroute_pb2, message)())
            finally:
                sys.path.remove(tmp)
        finally:
            shutil.rmtree(tmp)

    def test_notes(self):
        notes = self.render_notes()
        self.assertIn("kubectl -n serving port-forward deployment/cr-cacheroute 50051:50051", notes)
        self.assertIn("grpcurl -plaintext 127.0.0.1:50051 list", notes)
        self.assertIn("grpc.health.v1.Health/Check", notes)
        m = re.search(r"grpcurl -plaintext -d '([^']*)' \\\n\s*127\.0\.0\.1:50051 cacheroute\.v1\.CacheRoute/Plan",
                      notes)
        self.assertIsNotNone(m, notes)
        body = json.loads(m.group(1))
        self.assertTrue(body["rates"])
        self.check_plan_request_json(m.group(1))
        self.assertIn("curl -s http://127.0.0.1:9090/metrics", notes)
        self.assertNotIn("share routing state", notes)
        notes = self.render_notes("-f", os.path.join(CI, "standalone-values.yaml"))
        self.assertIn("kubectl -n serving port-forward svc/cr-cacheroute 50051:50051", notes)
        self.assertIn('2 replica(s) share routing state through '
                      'redis://redis.serving.svc.cluster.local:6379/0 as cluster "serving.cr-cacheroute"', notes)
        notes = self.render_notes("-f", os.path.join(CI, "standalone-values.yaml"),
                                  "--set", "service.enabled=false",
                                  "--set", "metrics.serviceMonitor.enabled=false")
        self.assertIn("port-forward deployment/cr-cacheroute 50051:50051", notes)
        self.assertIn("standalone", notes)
        self.assertIn("Every call is open", notes)
        self.assertIn("That Redis is yours", notes)
        notes = self.render_notes("-f", os.path.join(CI, "router-redis-values.yaml"))
        self.assertIn('3 replica(s) share routing state through '
                      'redis://cr-cacheroute-redis.serving.svc:6379/0', notes)
        self.assertIn("Deployment and Service serving/cr-cacheroute-redis", notes)
        self.assertIn("reachable only from this release's cacheroute pods", notes)
        self.assertIn("ConfigMap serving/cr-cacheroute-dashboards, labelled grafana_dashboard=\"1\"", notes)
        notes = self.render_notes("-f", os.path.join(CI, "all-options-values.yaml"))
        self.assertNotIn("-plaintext", notes)
        self.assertIn("grpcurl -cacert ca.crt -cert client.crt -key client.key 127.0.0.1:50051 list",
                      notes)
        self.assertIn("cacheroute --target 127.0.0.1:8082 health", notes)
        self.assertNotIn("Every call is open", notes)
        # Endpoints: how routes name them, how to change the list, how to drain one.
        self.assertIn("each shard is an endpoint of ConfigMap serving/cacheroute-llama-endpoints "
                      "(3 listed in endpoints.list)", notes)
        self.assertIn("-H \"authorization: Bearer $TOKEN\" -d '{\"id\": \"vllm-0\"}' "
                      "127.0.0.1:50051 cacheroute.v1.CacheRoute/DrainEndpoint", notes)
        self.assertIn("get secret cacheroute-admin -o jsonpath='{.data.admin-token}'", notes)
        self.assertNotIn("DrainEndpoint", self.render_notes())
        notes = self.render_notes("-f", os.path.join(CI, "router-endpoints-values.yaml"))
        self.assertIn("Endpoints: each shard is an endpoint of ConfigMap serving/cr-cacheroute-endpoints "
                      "(3 listed in endpoints.list), which every pod mounts at "
                      "/etc/cacheroute/endpoints/endpoints.json (--endpoints-file).", notes)
        self.assertIn("Service serving/cr-cacheroute:50051", notes)
        self.assertIn("edit endpoints.list and run helm upgrade", notes)
        self.assertIn("no pod restarts", notes)
        m = re.search(r"grpcurl -plaintext -d '([^']*)' 127\.0\.0\.1:50051 cacheroute\.v1\.CacheRoute/DrainEndpoint",
                      notes)
        self.assertIsNotNone(m, notes)
        self.assertEqual(json.loads(m.group(1)), {"id": "vllm-0"})
        req = self.parse_request_json(m.group(1), "DrainEndpointRequest")
        if req is not None:
            self.assertEqual((req.id, req.undrain), ("vllm-0", False))
        undrain = re.findall(r"-d '([^']*)' 127\.0\.0\.1:50051 cacheroute\.v1\.CacheRoute/DrainEndpoint", notes)
        self.assertEqual([json.loads(b) for b in undrain], [{"id": "vllm-0"}, {"id": "vllm-0", "undrain": True}])
        req = self.parse_request_json(undrain[1], "DrainEndpointRequest")
        if req is not None:
            self.assertEqual((req.id, req.undrain), ("vllm-0", True))
        self.assertIn("grpcurl -plaintext -d '{}' 127.0.0.1:50051 cacheroute.v1.CacheRoute/ListEndpoints", notes)
        self.assertIn("endpoint_id and endpoint_address", notes)
        self.assertIn("with 2 pods, send it to each", notes)
        notes = self.render_notes("--set", "endpoints.existingConfigMap=fleet")
        self.assertIn("your ConfigMap serving/fleet (endpoints.existingConfigMap, key endpoints.json)", notes)
        self.assertIn("kubectl -n serving edit configmap fleet.", notes)
        self.assertIn("asks its own sidecar at 127.0.0.1:50051", notes)
        self.assertNotIn("send it to each", notes)


if __name__ == "__main__":
    unittest.main(verbosity=2)
