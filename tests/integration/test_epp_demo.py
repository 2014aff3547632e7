"""The EPP demo's parts (scripts/demo-epp.sh) against the real sidecar: the
fake engine (bench/epp/fake_engine.py, a test double for a vLLM engine)
keys its cache and its KV events as the picker's estimate keys a prompt,
so a prompt an engine reports holding draws the picker there with the
right predicted hit; and the driver (bench/epp/drive.py) writes the
workload the replay reads and plays it round-robin."""
import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "epp"))

import envoy_client as ec  # noqa: E402
import harness as h  # noqa: E402
import test_epp  # noqa: E402
from test_epp import scrape, metric  # noqa: E402

ENGINE = os.path.join(ROOT, "bench", "epp", "fake_engine.py")
DRIVE = os.path.join(ROOT, "bench", "epp", "drive.py")
BT = 16  # --block-tokens: 64 bytes a block


def wait_port(port):
    def up():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return True
        except OSError:
            return False
    h.poll(up, h.START_TIMEOUT, interval=0.05, what="port %d open" % port)


class Engines:
    """n fake engines with KV events, each on ports of its own."""

    def __init__(self, n, namespace="m"):
        self.ports = [(h.free_port(), h.free_port()) for _ in range(n)]
        self.procs = [subprocess.Popen(
            [sys.executable, ENGINE, "--port", str(p), "--kv-port", str(k), "--kv-namespace",
             namespace, "--block-tokens", str(BT), "--cache-blocks", "256",
             "--prefill", "1,0.001,0", "--model", "m"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for p, k in self.ports]
        for p, _ in self.ports:
            wait_port(p)
        self.addresses = ["127.0.0.1:%d" % p for p, _ in self.ports]

    def post(self, i, body):
        c = http.client.HTTPConnection("127.0.0.1", self.ports[i][0], timeout=h.RPC_TIMEOUT)
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"content-type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            p.wait(timeout=10)


def chat(blocks, extra=0):
    """A chat whose role + content is blocks whole blocks (and extra more)."""
    text = "".join("block %03d " % i + "x" * (4 * BT - 10) for i in range(blocks + extra))
    return json.dumps({"model": "m", "stream": True, "max_tokens": 2,
                       "messages": [{"role": "user", "content": text[4:]}]}).encode()


def usage(body):
    for line in body.split(b"\n"):
        if line.startswith(b"data: {") and b'"usage"' in line:
            return json.loads(line[6:])["usage"]
    return None


class EppDemoTest(h.SidecarTestCase):
    SHARED = False

    def test_engine_events_draw_the_picker(self):
        """A prompt sent to engine 2 behind the picker's back: its KV events
        name the blocks, so the picker sends the prompt's next turn there,
        predicts the hit the engine then reports, and is off by nothing."""
        engines = Engines(3)
        d = tempfile.mkdtemp(prefix="cr-epp-demo-")
        path = os.path.join(d, "endpoints.json")
        with open(path, "w") as f:
            json.dump({"endpoints": [{"id": "e%d" % i, "address": a}
                                     for i, a in enumerate(engines.addresses)]}, f)
        kv = []
        for i, (_, k) in enumerate(engines.ports):
            kv += ["--kv-events", "%d=tcp://127.0.0.1:%d" % (i, k)]
        epp = h.free_port()
        sc = h.Sidecar("--endpoints-file", path, "--epp-listen", "127.0.0.1:%d" % epp,
                       "--metrics-listen", "127.0.0.1:0", "--n-shards", "3", "--block-tokens",
                       str(BT), *kv, metrics=False)
        client = ec.EnvoyClient("127.0.0.1:%d" % epp, test_epp.EPP, timeout=h.RPC_TIMEOUT)
        try:
            mport = sc.config["metrics_port"]
            time.sleep(0.5)  # the subscriptions (a PUB socket drops what no one hears)
            status, body = engines.post(2, chat(40))
            self.assertEqual(status, 200)
            self.assertEqual(usage(body)["prompt_tokens"], 40 * BT)
            h.poll(lambda: (metric(scrape(mport), "cacheroute_kv_events_applied_total",
                                   shard="2") or 0) >= 1, 10, what="engine 2's events applied")
            res = client.exchange(chat(40, extra=8))
            self.assertIsNone(res.immediate)
            self.assertEqual(res.destinations()[0], engines.addresses[2])
            u = usage(res.upstream_body)
            self.assertEqual((u["prompt_tokens"], u["prompt_tokens_details"]["cached_tokens"]),
                             (48 * BT, 40 * BT))
            m = scrape(mport)
            self.assertEqual(metric(m, "cacheroute_route_hit_predictions_checked_total",
                                    kv_events="yes"), 1)
            self.assertEqual(metric(m, "cacheroute_route_hit_prediction_error_tokens_total",
                                    kv_events="yes"), 0)
        finally:
            client.close()
            sc.stop()
            engines.stop()

    def test_driver_workload_and_round_robin(self):
        """drive.py --write-trace keeps the slice with whole-block lengths;
        --mode rr sends request i to engine i mod n and reads each usage."""
        d = tempfile.mkdtemp(prefix="cr-epp-drive-")
        trace = os.path.join(d, "t.jsonl")
        with open(trace, "w") as f:
            for i, ids in enumerate([[0, 1, 2], [0, 3], [0, 1, 2, 4], [0, 3, 5]]):
                f.write(json.dumps({"timestamp": 100 * i, "input_length": 500 * len(ids) - 7,
                                    "output_length": 3, "hash_ids": ids}) + "\n")
        out = os.path.join(d, "w.jsonl")
        subprocess.run([sys.executable, DRIVE, "--trace", trace, "--requests", "3",
                        "--block-tokens", str(BT), "--write-trace", out], check=True, timeout=60)
        with open(out) as f:
            rows = [json.loads(line) for line in f]
        self.assertEqual([r["input_length"] for r in rows], [3 * BT, 2 * BT, 4 * BT])
        engines = Engines(2)
        try:
            r = subprocess.run([sys.executable, DRIVE, "--trace", trace, "--mode", "rr",
                                "--engines", ",".join(engines.addresses), "--block-tokens",
                                str(BT), "--time-scale", "1", "--model", "m", "--out", d],
                               check=True, timeout=120, capture_output=True, text=True)
        finally:
            engines.stop()
        s = json.loads(r.stdout)
        self.assertEqual((s["ok"], s["errors"]), (4, 0))
        self.assertEqual(list(s["per_engine"].values()), [2, 2])
        # engine 0 serves [0,1,2] then [0,1,2,4]: the second hits 3 blocks of 4;
        # engine 1 serves [0,3] then [0,3,5]: 2 of 3
        self.assertAlmostEqual(s["hit_ratio"], 5 / 12)  # of 3 + 2 + 4 + 3 blocks


if __name__ == "__main__":
    test_epp.main()  # the envoy protos (test_epp.EPP), then this module's tests
