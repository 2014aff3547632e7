#!/usr/bin/python3
"""The demo's load driver (scripts/demo-epp.sh): a multi-turn chat workload
made from a Mooncake trace, played open-loop against the fake engines
(bench/epp/fake_engine.py), either through cacheroute's endpoint picker with
the Envoy-like ext_proc client (tests/epp/envoy_client.py: headers, body
chunks, the destination, the upstream leg, the response echoed), or
round-robin straight to the engines (the picker ignored).

The workload: the trace's first --requests requests by timestamp. Each of
a request's 512-token blocks (hash_ids) becomes one chat message whose role
and content take exactly 4 x --block-tokens bytes (role "system" for the
first block, then "user" and "assistant" in turn; the content ASCII text
made from the block id), so that under the picker's estimate (4 bytes per
pseudo-token) every trace block is one block key, equal ids give equal
keys, and a conversation's next turn repeats its earlier messages: the
prompt grows by turns as in the trace. So a request's prompt is n_blocks x
block_tokens pseudo-tokens (the trace's input_length rounded to whole
blocks). --write-trace writes the slice as a Mooncake file with those
input lengths, which is the trace the replay is given. The session header
(x-session-id) is the request's first two block ids, the replay's owner key
prefix:2.

Arrivals: the trace's timestamp / --time-scale seconds from the start; a
pool of --concurrency workers sends them. TTFT is from the request's
scheduled arrival to the end of the engine's response (the fake engine
streams everything right after its prefill: decode is not simulated, so
that is its first token), so a late send (every worker busy) counts.
Hit ratio is the engines' own: sum cached_tokens / sum prompt_tokens from
each response's usage. Writes DIR/NAME.csv (one row a request) and prints
one JSON line of figures.
"""
import argparse
import concurrent.futures
import http.client
import json
import os
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def load_slice(path, n):
    reqs = []
    with open(path) as f:
        for line in f:
            if line.strip():
                reqs.append(json.loads(line))
    reqs.sort(key=lambda r: r["timestamp"])  # stable: ties in file order, as the replay
    return reqs[:n]


def content(block_id, size):
    unit = "b%d " % block_id
    return (unit * (size // len(unit) + 1))[:size]


def messages(hash_ids, block_tokens):
    size = 4 * block_tokens
    out = []
    for i, b in enumerate(hash_ids):
        role = "system" if i == 0 else ("user" if i % 2 else "assistant")
        out.append({"role": role, "content": content(b, size - len(role))})
    return out


def body_of(r, model, block_tokens):
    return json.dumps({"model": model, "messages": messages(r["hash_ids"], block_tokens),
                       "stream": True, "stream_options": {"include_usage": True},
                       "max_tokens": max(1, int(r["output_length"]))}).encode()


def write_trace(reqs, path, block_tokens):
    with open(path, "w") as f:
        for r in reqs:
            f.write(json.dumps({"timestamp": r["timestamp"],
                                "input_length": len(r["hash_ids"]) * block_tokens,
                                "output_length": r["output_length"],
                                "hash_ids": r["hash_ids"]}) + "\n")


def usage_of(body):
    """prompt_tokens and cached_tokens from the last SSE event with usage."""
    for line in reversed(body.split(b"\n")):
        if line.startswith(b"data: {") and b'"usage"' in line:
            u = json.loads(line[6:])["usage"]
            return u["prompt_tokens"], u.get("prompt_tokens_details", {}).get("cached_tokens", 0)
    return None, None


class Sender:
    """One way of sending a request: through the picker, or round-robin."""

    def __init__(self, a):
        self.a = a
        self.engines = a.engines.split(",") if a.engines else []
        self.turn = 0
        self.lock = threading.Lock()
        if a.mode == "epp":
            sys.path.insert(0, os.path.join(ROOT, "tests", "epp"))
            import envoy_client as ec

            class Timed(ec.EnvoyClient):
                # the upstream leg's end: every byte of the engine's answer in
                def _forward(self, res, *args, **kw):
                    out = super()._forward(res, *args, **kw)
                    res.upstream_done = time.monotonic()
                    return out

            self.client = Timed(a.target, ec.load_protos(os.path.join(ROOT, "proto")),
                                timeout=a.timeout)

    def send(self, body, session):
        """(engine, status, engine headers, response body, done time)."""
        headers = [("x-session-id", session)]
        if self.a.mode == "epp":
            res = self.client.exchange(body, headers=headers, chunks=(16384, 4093, 65536))
            if res.immediate is not None:
                return None, res.immediate["status"], {}, b"", time.monotonic()
            if res.request_echo != body or res.response_echo != res.upstream_body:
                raise AssertionError("the picker's echo differs from the bytes sent")
            return (res.served, res.upstream_status, dict(res.upstream_headers),
                    res.upstream_body, res.upstream_done)
        with self.lock:
            engine = self.engines[self.turn % len(self.engines)]
            self.turn += 1
        host, port = engine.rsplit(":", 1)
        c = http.client.HTTPConnection(host, int(port), timeout=self.a.timeout)
        c.request("POST", "/v1/chat/completions", body=body,
                  headers={"content-type": "application/json", "x-session-id": session})
        r = c.getresponse()
        data = r.read()
        done = time.monotonic()
        c.close()
        return engine, r.status, {k.lower(): v for k, v in r.getheaders()}, data, done


def pct(xs, p):
    """Nearest rank, as the replay's."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(-(-p * len(s) // 100)) - 1))
    return s[k]


def run(a, reqs):
    sender = Sender(a)
    bodies = [body_of(r, a.model, a.block_tokens) for r in reqs]
    rows = [None] * len(reqs)
    late = [0.0]

    def one(i, due):
        r = reqs[i]
        started = time.monotonic()
        late[0] = max(late[0], started - due)
        ids = r["hash_ids"]
        session = "s-%d-%d" % (ids[0], ids[1] if len(ids) > 1 else -1)
        try:
            engine, status, hdrs, data, done = sender.send(bodies[i], session)
        except Exception as e:  # counted, not fatal: the run goes on
            rows[i] = {"i": i, "error": repr(e)[:200]}
            return
        prompt, cached = usage_of(data) if status == 200 else (None, None)
        rows[i] = {"i": i, "due": due, "done": done, "ttft_ms": (done - due) * 1e3,
                   "engine": engine, "status": status, "prompt": prompt, "cached": cached,
                   "queue_ms": float(hdrs.get("x-fake-engine-queue-ms", "nan")),
                   "prefill_ms": float(hdrs.get("x-fake-engine-prefill-ms", "nan"))}

    t0 = time.monotonic() + 0.5
    first_ms = reqs[0]["timestamp"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=a.concurrency) as pool:
        futs = []
        for i, r in enumerate(reqs):
            due = t0 + (r["timestamp"] - first_ms) / 1000.0 / a.time_scale
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            futs.append(pool.submit(one, i, due))
        for f in futs:
            f.result()
    return rows, late[0], t0


def summarize(rows, late, t0, name):
    ok = [r for r in rows if r and "error" not in r and r["status"] == 200 and r["prompt"]]
    errors = len(rows) - len(ok)
    ttft = [r["ttft_ms"] for r in ok]
    prompt = sum(r["prompt"] for r in ok)
    cached = sum(r["cached"] for r in ok)
    span = max(r["done"] for r in ok) - t0 if ok else float("nan")
    per_engine = {}
    for r in ok:
        per_engine[r["engine"]] = per_engine.get(r["engine"], 0) + 1
    return {"policy": name, "requests": len(rows), "ok": len(ok), "errors": errors,
            "hit_ratio": cached / prompt if prompt else float("nan"),
            "ttft_p50_ms": pct(ttft, 50), "ttft_p99_ms": pct(ttft, 99),
            "ttft_mean_ms": sum(ttft) / len(ttft) if ttft else float("nan"),
            "throughput_req_s": len(ok) / span if ok else 0.0,
            "throughput_prompt_tok_s": prompt / span if ok else 0.0,
            "span_s": span, "max_send_late_ms": late * 1e3,
            "per_engine": dict(sorted(per_engine.items(), key=lambda kv: str(kv[0])))}


def main():
    ap = argparse.ArgumentParser(description="The EPP demo's load driver.")
    ap.add_argument("--trace", required=True, help="a Mooncake JSON-lines trace")
    ap.add_argument("--requests", type=int, default=600, help="the first N requests")
    ap.add_argument("--block-tokens", type=int, default=512)
    ap.add_argument("--write-trace", help="write the slice as the replay reads it, and exit")
    ap.add_argument("--mode", choices=("epp", "rr"), help="through the picker, or round-robin")
    ap.add_argument("--target", default="127.0.0.1:9002", help="the picker (epp mode)")
    ap.add_argument("--engines", default="", help="ip:port,... (rr mode)")
    ap.add_argument("--time-scale", type=float, default=2.0,
                    help="arrivals at trace time / this")
    ap.add_argument("--concurrency", type=int, default=64, help="requests in flight, at most")
    ap.add_argument("--timeout", type=float, default=120.0, help="one request, seconds")
    ap.add_argument("--model", default="demo-model")
    ap.add_argument("--out", default=".", help="results directory")
    ap.add_argument("--name", help="the run's name (files DIR/NAME.csv, NAME.json)")
    a = ap.parse_args()
    reqs = load_slice(a.trace, a.requests)
    if not reqs:
        ap.error("no requests in " + a.trace)
    if a.write_trace:
        write_trace(reqs, a.write_trace, a.block_tokens)
        return 0
    if not a.mode:
        ap.error("--mode or --write-trace is required")
    name = a.name or ("cacheroute" if a.mode == "epp" else "round-robin")
    rows, late, t0 = run(a, reqs)
    s = summarize(rows, late, t0, name)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, name + ".csv"), "w") as f:
        f.write("i,arrival_s,ttft_ms,engine,status,prompt_tokens,cached_tokens,queue_ms,"
                "prefill_ms\n")
        for r in rows:
            if r and "error" not in r:
                f.write("%d,%.3f,%.1f,%s,%s,%s,%s,%.1f,%.1f\n" % (
                    r["i"], r["due"] - t0, r["ttft_ms"], r["engine"], r["status"], r["prompt"],
                    r["cached"], r["queue_ms"], r["prefill_ms"]))
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump(s, f, indent=1)
    first_err = next((r["error"] for r in rows if r and "error" in r), None)
    if first_err:
        s["first_error"] = first_err
    print(json.dumps(s))
    return 0


if __name__ == "__main__":
    sys.exit(main())
