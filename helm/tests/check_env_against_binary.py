#!/usr/bin/python3
"""The chart's CACHEROUTE_* variables against the real cacheroute-sidecar.

    /usr/bin/python3 helm/tests/check_env_against_binary.py BINARY

1. The variables the binary reads (its --help lists "env CACHEROUTE_...")
   are exactly those the chart can render: no flag without a value, no value
   the binary would ignore.
2. For the default values and every ci/*.yaml values file, the binary accepts
   the rendered environment: `env -i <vars> BINARY --check-config` loads and
   checks every variable and prints the effective configuration without
   serving, so exit 0 means each value parsed and was in range. A deliberately bad value must make it fail (the
   check is not vacuous).
3. The schema is no looser than the binary: every numeric config,
   stateBackend and epp value at the lowest and at the highest value
   values.schema.json allows is accepted by the binary.
4. The endpoints.json each ci/*.yaml file renders (endpoints.list) is taken
   whole by the binary, started on loopback with it as --endpoints-file
   (--check-config does not read the file); one with an id given twice
   stops it.
Needs helm (scripts/helm-tools.sh) and PyYAML (python3-yaml).
"""
import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import yaml

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_chart import (BACKEND_FLAGS, BACKEND_URL, CHART, CI, CONFIG_FLAGS, ENDPOINTS_FLAGS,  # noqa: E402
                        EPP_FLAGS, EPP_HOST_FLAGS, K8S_FLAGS, HOST_KEYS, POD_FLAGS, REPO, SECRET_FLAGS, env_name,
                        render, pod_spec)

passed = failed = 0


def report(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("PASS", what)
    else:
        failed += 1
        print("FAIL", what)
        if detail:
            print("    " + detail.replace("\n", "\n    "))


def run_binary(binary, env, flag):
    base = {"PATH": "/usr/bin:/bin", "LC_ALL": "C"}
    base.update(env)
    return subprocess.run([binary, flag], env=base, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=60)


def run_help(binary, env):
    return run_binary(binary, env, "--help")


def run_check(binary, env):
    return run_binary(binary, env, "--check-config")


# --model-config names a file in the pod; the binary reads it at start-up,
# so here the tree's fixture of the same model stands in for it.
MODEL_CONFIG = os.path.join(REPO, "tests", "fixtures", "model-configs", "Llama-3.1-70B.json")


# --state-backend-password-file names a Secret's file in the pod, read by
# --check-config too: a fixture stands in for it.
REDIS_PASSWORD = os.path.join(REPO, "tests", "fixtures", "redis-password")


# --endpoints-file names the mounted ConfigMap's file in the pod: the
# rendered endpoints.json is written here instead (an existingConfigMap's
# stand-in is a one-endpoint file).
ENDPOINTS_DIR = tempfile.mkdtemp(prefix="cr-endpoints-")
atexit.register(shutil.rmtree, ENDPOINTS_DIR, True)


def endpoints_file(by_kind):
    text = '{"endpoints": [{"id": "stand-in", "address": "127.0.0.1:8000"}]}'
    for cm in by_kind.get("ConfigMap", []):
        if cm["metadata"]["name"].endswith("-endpoints") and "endpoints.json" in cm.get("data", {}):
            text = cm["data"]["endpoints.json"]
    fd, path = tempfile.mkstemp(suffix=".json", dir=ENDPOINTS_DIR)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def cacheroute_env(by_kind):
    spec = pod_spec(by_kind)
    for c in spec.get("containers", []) + spec.get("initContainers", []):
        if c["name"] == "cacheroute":
            env = {e["name"]: e["value"] for e in c.get("env", [])
                   if e["name"].startswith("CACHEROUTE_") and "value" in e}
            if "CACHEROUTE_MODEL_CONFIG" in env:
                env["CACHEROUTE_MODEL_CONFIG"] = MODEL_CONFIG
            if "CACHEROUTE_STATE_BACKEND_PASSWORD_FILE" in env:
                env["CACHEROUTE_STATE_BACKEND_PASSWORD_FILE"] = REDIS_PASSWORD
            if "CACHEROUTE_ENDPOINTS_FILE" in env:
                env["CACHEROUTE_ENDPOINTS_FILE"] = endpoints_file(by_kind)
            return env
    raise AssertionError("no cacheroute container")


def start_with_endpoints(binary, path, n, timeout=30):
    """Starts the sidecar on loopback with --endpoints-file path until it
    logs the set ("endpoints changed" with n shards: True) or exits (False),
    then stops it. Returns (ok, its output)."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "CACHEROUTE_LISTEN": "127.0.0.1:0",
           "CACHEROUTE_METRICS_LISTEN": "", "CACHEROUTE_ENDPOINTS_FILE": path}
    p = subprocess.Popen([binary], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    lines, ok = [], False
    timer = threading.Timer(timeout, p.kill)
    timer.start()
    try:
        for line in p.stdout:
            lines.append(line.rstrip("\n"))
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict) and ev.get("msg") == "endpoints changed":
                ok = n is not None and ev.get("shards") == n and ev.get("joined") == n
                break
    finally:
        timer.cancel()
        if p.poll() is None:
            p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        p.stdout.close()
    return ok, "\n".join(lines[-5:])


def check_schema_bounds(binary, section, props):
    """The binary accepts each numeric value of cacheroute.<section> (or of
    the top-level epp) at the lowest and at the highest the schema allows
    (the state backend's with a url, the picker's in mode epp, without which
    they are not rendered)."""
    lows, highs = {}, {}
    for key, prop in props.items():
        types = prop.get("type", [])
        types = [types] if isinstance(types, str) else types
        numeric = "integer" if "integer" in types else "number" if "number" in types else None
        if not numeric:
            continue
        if "minimum" in prop:
            lows[key] = prop["minimum"]
        elif "exclusiveMinimum" in prop:
            lows[key] = prop["exclusiveMinimum"] + (1 if numeric == "integer" else 0.001)
        if "maximum" in prop:
            highs[key] = int(prop["maximum"]) if numeric == "integer" else prop["maximum"]
    if section == "stateBackend":
        lows["url"] = highs["url"] = BACKEND_URL
    for name, values in (("lowest", lows), ("highest", highs)):
        if section == "epp":
            values["inferencePool"] = {"matchLabels": {"app": "vllm"}}
            doc = {"mode": "epp", "epp": values}
        else:
            doc = {"cacheroute": {section: values}}
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
            yaml.safe_dump(doc, f)
            f.flush()
            env = cacheroute_env(render("-f", f.name)[1])
        p = run_check(binary, env)
        report(p.returncode == 0, "binary accepts the %s %s values the schema allows (%d values)"
               % (name, section, len(values)), p.stderr.strip())



def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = sys.argv[1]

    p = run_help(binary, {})
    report(p.returncode == 0, "%s --help exits 0" % os.path.basename(binary), p.stderr)
    binary_vars = set(re.findall(r"\benv (CACHEROUTE_[A-Z0-9_]+)", p.stdout))
    chart_vars = {env_name(f) for f in
                  list(CONFIG_FLAGS.values()) + list(HOST_KEYS.values()) + SECRET_FLAGS
                  + list(BACKEND_FLAGS.values()) + POD_FLAGS + ENDPOINTS_FLAGS
                  + list(EPP_FLAGS.values()) + EPP_HOST_FLAGS + list(K8S_FLAGS.values())}
    report(binary_vars - chart_vars == set(),
           "every variable the binary reads has a chart value",
           "no chart value for: %s" % " ".join(sorted(binary_vars - chart_vars)))
    report(chart_vars - binary_vars == set(),
           "every variable the chart renders is read by the binary",
           "the binary does not read: %s" % " ".join(sorted(chart_vars - binary_vars)))

    cases = [("default", [])]
    for f in sorted(glob.glob(os.path.join(CI, "*.yaml"))):
        cases.append((os.path.basename(f)[:-5], ["-f", f]))
    cases.append(("all-options-standalone", ["-f", os.path.join(CI, "all-options-values.yaml"),
                                             "--set", "mode=standalone"]))
    cases.append(("all-options-epp", ["-f", os.path.join(CI, "all-options-values.yaml"),
                                      "--set", "mode=epp", "--set", "endpoints.enabled=false"]))
    for name, args in cases:
        env = cacheroute_env(render(*args)[1])
        p = run_check(binary, env)
        report(p.returncode == 0, "binary accepts the %s environment (%d variables)" % (name, len(env)),
               p.stderr.strip())

    env = cacheroute_env(render("-f", os.path.join(CI, "all-options-values.yaml"))[1])
    for var, bad in (("CACHEROUTE_N_SHARDS", "0"), ("CACHEROUTE_ESTIMATOR_CLOCK", "minutes"),
                     ("CACHEROUTE_MFU", "1.5"), ("CACHEROUTE_STATE_BACKEND", "http://r:6379"),
                     ("CACHEROUTE_LEASE_TTL", "0.1"), ("CACHEROUTE_BACKEND_START", "maybe"),
                     ("CACHEROUTE_EPP_MAX_BODY_BYTES", "16777217"), ("CACHEROUTE_EPP_TOKENS", "model")):
        if var not in binary_vars:
            continue
        p = run_check(binary, dict(env, **{var: bad}))
        report(p.returncode != 0 and var in p.stderr,
               "binary rejects %s=%s" % (var, bad), "exit %d: %s" % (p.returncode, p.stderr.strip()))

    # --check-config names the endpoints file without reading it: the
    # sidecar reads it when it starts. Start it (loopback, no metrics) on
    # each endpoints.json the ci files render, and see it take every
    # endpoint; a file with an id given twice (which the chart refuses to
    # render) must stop it, or that acceptance says nothing.
    if env_name("endpoints-file") in binary_vars:
        for name, args in cases:
            _, by_kind = render(*args)
            lists = [cm["data"]["endpoints.json"] for cm in by_kind.get("ConfigMap", [])
                     if cm["metadata"]["name"].endswith("-endpoints")]
            for text in lists:
                path = os.path.join(ENDPOINTS_DIR, name + ".json")
                with open(path, "w") as f:
                    f.write(text)
                n = len(json.loads(text)["endpoints"])
                ok, out = start_with_endpoints(binary, path, n)
                report(ok, "binary takes the %d endpoints of the %s endpoints.json" % (n, name), out)
        bad = os.path.join(ENDPOINTS_DIR, "duplicate.json")
        with open(bad, "w") as f:
            json.dump({"endpoints": [{"id": "a", "address": "x:1"}, {"id": "a", "address": "y:1"}]}, f)
        ok, out = start_with_endpoints(binary, bad, None)
        report(not ok and "given twice" in out,
               "binary refuses an endpoints file with an id given twice", out)

    with open(os.path.join(CHART, "values.schema.json")) as f:
        schema = json.load(f)
    sections = schema["properties"]["cacheroute"]["properties"]
    for section in ("config", "stateBackend"):
        check_schema_bounds(binary, section, sections[section]["properties"])
    check_schema_bounds(binary, "epp", schema["properties"]["epp"]["properties"])

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
