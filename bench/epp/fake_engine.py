#!/usr/bin/python3
"""A fake OpenAI engine: a test double for one GPU serving engine (vLLM)
behind cacheroute's endpoint picker, for scripts/demo-epp.sh. There is no
GPU here, so it serves no model; it models what routing changes.

The model (the replay's, replay/include/replay.h, so that the demo can be
held against cacheroute-replay's prediction):
  - Tokens: a chat prompt's bytes are each message's role then its content,
    in order (a completions prompt: its string), packed 4 bytes to a 32-bit
    pseudo-token, little endian, a last partial one padded with zeros:
    exactly what the picker's --epp-tokens estimate does (epp/keys.h). So
    prompt_tokens = ceil(bytes / 4), and /tokenize gives the same ids.
  - Blocks: the prompt's full blocks of --block-tokens pseudo-tokens, each
    keyed by the router's chained hash (route.h, cr_route_block_hash):
    XXH3-64 of the block's tokens as little-endian uint32, seeded with the
    key of the block before (0 for the first). Tokens packed little endian
    from bytes are those bytes, so a key is XXH3-64 of the block's bytes.
    The same key is the block's engine hash in the KV events.
  - Prefix cache: an LRU of --cache-blocks blocks. A request's hit is the
    longest run of its leading blocks held when its prefill starts; when
    the prefill ends its blocks are inserted last to first (so a prefix is
    evicted from its tail, as vLLM and the replay do), evicting the least
    recently used.
  - Queue: one FIFO prefill queue served one request at a time (the
    replay's shard: `start = max(arrival, busy until)`). A prefill of L
    tokens with s = min(L, hit blocks x block tokens) cached takes
    `a + b (L - s) + c (L^2 - s^2)` ms (--prefill a,b,c, the replay's
    --true-prefill), slept for real; no noise.
  - Decode is not simulated (the replay assumes disaggregated decode): right
    after the prefill the response streams its SSE chunks (a few content
    deltas, then a usage chunk with prompt_tokens and
    prompt_tokens_details.cached_tokens, then [DONE]) without delay, so the
    response's first byte is its time to first token.
  - KV events (vLLM's format, what kvevents/ decodes): when a prefill ends,
    one batch on a ZeroMQ PUB socket (--kv-port), the message [topic,
    8-byte big-endian seq from 0, msgpack payload], the payload the array
    batch [ts, events, None]: ["BlockStored", hashes, parent, token_ids,
    block_size, None, "GPU", lora_name] for the request's blocks from its
    first uncached one on, then ["BlockRemoved", hashes, "GPU"] for the
    blocks evicted (and not reinserted) by that insert. lora_name is
    --kv-namespace (None when empty): the picker's namespace for the model.
    No replay socket: on loopback a PUB socket loses nothing while its
    subscriber keeps up.
  - /metrics: vllm:num_requests_running (0 or 1: the prefill in service),
    vllm:num_requests_waiting (queued behind it), vllm:kv_cache_usage_perc,
    vllm:prefix_cache_queries_total and vllm:prefix_cache_hits_total.
What it does not model: a model, batching of several prefills, decode and
its memory, chunked prefill, a waiting request's blocks pinned (as the
replay: a block is inserted at its prefill's end), preemption.

Endpoints: POST /v1/chat/completions and /v1/completions (stream or not),
POST /tokenize ({"tokens": [...], "count": n, "max_model_len": m}),
GET /metrics, /health, /v1/models. 127.0.0.1 only. Needs Debian's
python3-xxhash, python3-zmq and python3-msgpack (/usr/bin/python3).
"""
import argparse
import collections
import json
import queue
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import msgpack
import xxhash
import zmq

MAX_BODY = 64 << 20


def prompt_bytes(body, chat):
    """The bytes the picker's estimate packs (epp/openai.h): each message's
    role then its content (a string, or its "text" parts), or the
    completions prompt (a string or a list of strings)."""
    if chat:
        out = []
        for m in body.get("messages") or []:
            out.append(str(m.get("role", "")).encode())
            c = m.get("content", "")
            if isinstance(c, list):
                c = "".join(p.get("text", "") for p in c if p.get("type") == "text")
            out.append(str(c).encode())
        return b"".join(out)
    p = body.get("prompt", "")
    if isinstance(p, list):
        p = "".join(x for x in p if isinstance(x, str))
    return str(p).encode()


def pseudo_tokens(data):
    """4 bytes to a little-endian uint32, the last padded with zeros."""
    pad = (-len(data)) % 4
    data += b"\0" * pad
    return list(struct.unpack("<%dI" % (len(data) // 4), data))


def block_keys(data, block_tokens):
    """The chained keys of data's full blocks (cr_route_block_hash)."""
    step = 4 * block_tokens
    keys, parent = [], 0
    for at in range(0, len(data) - step + 1, step):
        parent = xxhash.xxh3_64_intdigest(data[at:at + step], seed=parent)
        keys.append(parent)
    return keys


class Job:
    def __init__(self, data, keys, n_tokens):
        self.data, self.keys, self.n_tokens = data, keys, n_tokens
        self.arrival = time.monotonic()
        self.done = threading.Event()
        self.cached = 0
        self.queue_ms = self.prefill_ms = 0.0


class Engine:
    """The cache, the FIFO prefill queue (one worker thread) and the KV-event
    publisher (used from the worker thread only: ZeroMQ sockets are not
    thread-safe)."""

    def __init__(self, a):
        self.a = a
        self.coef = [float(x) for x in a.prefill.split(",")]
        self.cache = collections.OrderedDict()  # key -> None, most recent last
        self.jobs = queue.Queue()
        self.lock = threading.Lock()
        self.waiting = 0
        self.running = 0
        self.queries = self.hits = 0
        self.seq = 0
        self.pub = None
        if a.kv_port:
            self.ctx = zmq.Context()
            self.pub = self.ctx.socket(zmq.PUB)
            self.pub.setsockopt(zmq.SNDHWM, 100000)
            self.pub.bind("tcp://127.0.0.1:%d" % a.kv_port)
        threading.Thread(target=self.worker, daemon=True).start()

    def prefill_ms(self, total, cached):
        a, b, c = self.coef
        return a + b * (total - cached) + c * (total * total - cached * cached)

    def submit(self, job):
        with self.lock:
            self.waiting += 1
        self.jobs.put(job)
        job.done.wait()

    def worker(self):
        while True:
            job = self.jobs.get()
            with self.lock:
                self.waiting -= 1
                self.running = 1
            start = time.monotonic()
            hit = 0
            while hit < len(job.keys) and job.keys[hit] in self.cache:
                hit += 1
            bt = self.a.block_tokens
            job.cached = min(job.n_tokens, hit * bt)
            job.queue_ms = (start - job.arrival) * 1e3
            job.prefill_ms = self.prefill_ms(job.n_tokens, job.cached)
            end = start + job.prefill_ms / 1e3
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    break
                time.sleep(left)
            evicted = self.insert(job.keys)
            with self.lock:
                self.running = 0
                self.queries += job.n_tokens
                self.hits += job.cached
            self.publish(job, hit, evicted)
            job.done.set()

    def insert(self, keys):
        """keys inserted last to first; returns the keys evicted and not
        held at the end."""
        evicted = []
        for k in reversed(keys):
            if k in self.cache:
                self.cache.move_to_end(k)
                continue
            self.cache[k] = None
            if len(self.cache) > self.a.cache_blocks:
                evicted.append(self.cache.popitem(last=False)[0])
        return [k for k in evicted if k not in self.cache]

    def publish(self, job, hit, evicted):
        if not self.pub or (hit == len(job.keys) and not evicted):
            return
        bt = self.a.block_tokens
        events = []
        if hit < len(job.keys):
            stored = job.keys[hit:]
            tokens = pseudo_tokens(job.data[4 * bt * hit:4 * bt * len(job.keys)])
            events.append(["BlockStored", stored, job.keys[hit - 1] if hit else None, tokens,
                           bt, None, "GPU", self.a.kv_namespace or None])
        if evicted:
            events.append(["BlockRemoved", evicted, "GPU"])
        payload = msgpack.packb([time.time(), events, None], use_bin_type=True)
        self.pub.send_multipart([b"kv-events", struct.pack(">Q", self.seq), payload])
        self.seq += 1

    def metrics(self):
        with self.lock:
            w, r, q, h = self.waiting, self.running, self.queries, self.hits
        usage = len(self.cache) / self.a.cache_blocks
        m = self.a.model
        return ("# TYPE vllm:num_requests_running gauge\n"
                'vllm:num_requests_running{model_name="%s"} %d\n'
                "# TYPE vllm:num_requests_waiting gauge\n"
                'vllm:num_requests_waiting{model_name="%s"} %d\n'
                "# TYPE vllm:kv_cache_usage_perc gauge\n"
                'vllm:kv_cache_usage_perc{model_name="%s"} %.6f\n'
                "# TYPE vllm:prefix_cache_queries_total counter\n"
                'vllm:prefix_cache_queries_total{model_name="%s"} %d\n'
                "# TYPE vllm:prefix_cache_hits_total counter\n"
                'vllm:prefix_cache_hits_total{model_name="%s"} %d\n'
                % (m, r, m, w, m, usage, m, q, m, h))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"  # the response ends when the connection closes
    engine = None

    def log_message(self, fmt, *args):
        pass

    def reply(self, status, body, ctype="application/json", headers=()):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/metrics":
            return self.reply(200, self.engine.metrics().encode(), "text/plain; version=0.0.4")
        if self.path == "/health":
            return self.reply(200, b"")
        if self.path == "/v1/models":
            return self.reply(200, json.dumps({"object": "list", "data": [
                {"id": self.engine.a.model, "object": "model"}]}).encode())
        self.reply(404, b'{"error": "not found"}')

    def read_json(self):
        n = int(self.headers.get("content-length") or 0)
        if n <= 0 or n > MAX_BODY:
            raise ValueError("a JSON body of 1..%d bytes is required" % MAX_BODY)
        body = json.loads(self.rfile.read(n))
        if not isinstance(body, dict):
            raise ValueError("body must be a JSON object")
        return body

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        try:
            body = self.read_json()
        except ValueError as e:
            return self.reply(400, json.dumps({"error": str(e)}).encode())
        if path == "/tokenize":
            ids = pseudo_tokens(prompt_bytes(body, "messages" in body))
            return self.reply(200, json.dumps({"tokens": ids, "count": len(ids),
                                               "max_model_len": 1 << 20}).encode())
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self.reply(404, b'{"error": "not found"}')
        self.complete(body, path == "/v1/chat/completions")

    def complete(self, body, chat):
        e = self.engine
        data = prompt_bytes(body, chat)
        n_tokens = (len(data) + 3) // 4
        job = Job(data, block_keys(data, e.a.block_tokens), n_tokens)
        e.submit(job)
        out_tokens = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        usage = {"prompt_tokens": n_tokens, "completion_tokens": out_tokens,
                 "total_tokens": n_tokens + out_tokens,
                 "prompt_tokens_details": {"cached_tokens": job.cached}}
        timing = [("x-fake-engine-queue-ms", "%.3f" % job.queue_ms),
                  ("x-fake-engine-prefill-ms", "%.3f" % job.prefill_ms),
                  ("x-fake-engine-cached-tokens", str(job.cached))]
        kind = "chat.completion" if chat else "text_completion"
        rid = "cmpl-%x" % id(job)
        if not body.get("stream"):
            msg = ({"role": "assistant", "content": "ok"} if chat else None)
            choice = {"index": 0, "finish_reason": "length"}
            choice.update({"message": msg} if chat else {"text": "ok"})
            return self.reply(200, json.dumps({"id": rid, "object": kind, "model": e.a.model,
                                               "choices": [choice], "usage": usage}).encode(),
                              headers=timing)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        for k, v in timing:
            self.send_header(k, v)
        self.end_headers()
        kind += ".chunk" if chat else ""
        for i in range(min(out_tokens, 4)):
            piece = {"index": 0, "finish_reason": None}
            piece.update({"delta": {"content": "tok%d " % i}} if chat else {"text": "tok%d " % i})
            self.sse({"id": rid, "object": kind, "model": e.a.model, "choices": [piece]})
        self.sse({"id": rid, "object": kind, "model": e.a.model, "choices": [], "usage": usage})
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()

    def sse(self, obj):
        self.wfile.write(b"data: " + json.dumps(obj).encode() + b"\n\n")
        self.wfile.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, required=True, help="HTTP port on 127.0.0.1")
    ap.add_argument("--kv-port", type=int, default=0, help="ZeroMQ PUB port for KV events "
                                                            "(0: none)")
    ap.add_argument("--kv-namespace", default="", help="lora_name in BlockStored (the "
                                                       "picker's namespace); empty: None")
    ap.add_argument("--cache-blocks", type=int, default=1024, help="LRU prefix cache, blocks")
    ap.add_argument("--block-tokens", type=int, default=512, help="pseudo-tokens per block")
    ap.add_argument("--prefill", default="20,0.08,2e-6",
                    help="a,b,c: a prefill takes a + b (L - s) + c (L^2 - s^2) ms")
    ap.add_argument("--model", default="demo-model")
    a = ap.parse_args()
    if a.cache_blocks < 1 or a.block_tokens < 1 or len(a.prefill.split(",")) != 3:
        ap.error("--cache-blocks and --block-tokens must be >= 1, --prefill a,b,c")
    Handler.engine = Engine(a)
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    srv.daemon_threads = True
    srv.request_queue_size = 256
    print("fake engine on 127.0.0.1:%d (kv events :%d)" % (a.port, a.kv_port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
