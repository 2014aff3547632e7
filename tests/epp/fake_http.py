"""A minimal OpenAI-like HTTP server for the EPP tests: a test double for an
inference engine (vLLM's OpenAI API), on 127.0.0.1:0.

What it models: POST /v1/chat/completions and /v1/completions answered
with SSE chunks (stream: true; HTTP/1.1 chunked, one write per event) ending
with a usage chunk and "data: [DONE]", or one JSON body with usage
(stream: false). usage.prompt_tokens is the prompt's bytes / 4 (the EPP's
estimate); prompt_tokens_details.cached_tokens is the longest prefix this
server has seen before, in the same units (a prefix cache that never
forgets). POST /tokenize (vLLM's: {"model", "prompt" or "messages"})
answers {"tokens": [...]}, the prompt's bytes packed 4 to a token id (so its
keys differ from the EPP's estimate only by the packing); tokenize_status
answers it with that status instead. fail_status answers every request with
that status instead;
pad_bytes adds one content chunk of that size (to test large echoes).
GET /metrics answers vLLM's load families in the Prometheus text format
(num_requests_waiting, num_requests_running, kv_cache_usage_perc,
cache_config_info), their values the attributes waiting, running,
kv_usage and gpu_blocks as a test sets them (not the requests it serves);
metrics_body answers those bytes instead (garbage), metrics_delay_s sleeps
first (a slow engine); scrapes counts them. Scrapes are not in requests.
It does not model timing, tokenizers, KV events or cache eviction (the demo's
fake engine does).
"""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def prompt_text(req):
    """The prompt's bytes as the EPP's estimate reads them: each message's
    role and content in order, or the prompt string(s)."""
    if "messages" in req:
        return "".join(str(m.get("role", "")) + str(m.get("content", ""))
                       for m in req["messages"]).encode()
    p = req.get("prompt", "")
    return ("".join(p) if isinstance(p, list) and all(isinstance(x, str) for x in p)
            else str(p)).encode()


class FakeEngine:
    def __init__(self, name="engine"):
        self.name = name
        self.fail_status = None
        self.tokenize_status = None
        self.tokenized = 0  # /tokenize calls answered
        self.pad_bytes = 0
        self.requests = []  # (path, headers dict, body bytes)
        self.waiting, self.running, self.kv_usage, self.gpu_blocks = 0, 0, 0.0, 1000
        self.metrics_body = None
        self.metrics_delay_s = 0
        self.scrapes = 0
        self._seen = []
        self._lock = threading.Lock()
        engine = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("content-length", "0"))
                body = self.rfile.read(n)
                engine._serve(self, body)

            def do_GET(self):
                engine._serve(self, b"")

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.address = "127.0.0.1:%d" % self.port
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    def _cached(self, prompt):
        with self._lock:
            best = 0
            for p in self._seen:
                n = 0
                for a, b in zip(p, prompt):
                    if a != b:
                        break
                    n += 1
                best = max(best, n)
            self._seen.append(prompt)
        return best // 4

    def _metrics(self, h):
        with self._lock:
            self.scrapes += 1
        if self.metrics_delay_s:
            time.sleep(self.metrics_delay_s)
        labels = 'engine="0",model_name="fake"'
        data = self.metrics_body if self.metrics_body is not None else (
            "# TYPE vllm:num_requests_waiting gauge\n"
            "vllm:num_requests_waiting{%s} %s\n"
            "vllm:num_requests_running{%s} %s\n"
            "vllm:kv_cache_usage_perc{%s} %s\n"
            'vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="%d"} 1.0\n'
            % (labels, float(self.waiting), labels, float(self.running), labels,
               float(self.kv_usage), self.gpu_blocks)).encode()
        try:
            h.send_response(200)
            h.send_header("content-type", "text/plain; version=0.0.4")
            h.send_header("content-length", str(len(data)))
            h.end_headers()
            h.wfile.write(data)
        except OSError:
            pass  # the scraper gave up on us

    def _serve(self, h, body):
        if h.command == "GET" and h.path == "/metrics":
            return self._metrics(h)
        with self._lock:
            self.requests.append((h.path, dict((k.lower(), v) for k, v in h.headers.items()),
                                  body))
        if h.path == "/tokenize":
            return self._tokenize(h, body)
        if self.fail_status:
            self._json(h, self.fail_status, {"error": {"message": "failing on purpose",
                                                       "code": self.fail_status}})
            return
        try:
            req = json.loads(body or b"{}")
        except ValueError:
            req = {}
        prompt = prompt_text(req)
        usage = {"prompt_tokens": len(prompt) // 4, "completion_tokens": 3,
                 "total_tokens": len(prompt) // 4 + 3,
                 "prompt_tokens_details": {"cached_tokens": self._cached(prompt)}}
        if not req.get("stream"):
            self._json(h, 200, {"id": "cmpl-1", "object": "chat.completion",
                                "model": req.get("model", ""),
                                "choices": [{"index": 0, "message": {
                                    "role": "assistant", "content": "ok " + self.name}}],
                                "usage": usage})
            return
        h.send_response(200)
        h.send_header("content-type", "text/event-stream")
        h.send_header("transfer-encoding", "chunked")
        h.end_headers()
        words = ["Hello", " from ", self.name] + (["x" * self.pad_bytes] if self.pad_bytes else [])
        events = [{"id": "c1", "object": "chat.completion.chunk",
                   "choices": [{"index": 0, "delta": {"content": w}}]} for w in words]
        events.append({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                       "usage": usage})
        for ev in events:
            self._chunk(h, b"data: " + json.dumps(ev).encode() + b"\n\n")
        self._chunk(h, b"data: [DONE]\n\n")
        self._chunk(h, b"")

    def _tokenize(self, h, body):
        if self.tokenize_status:
            self._json(h, self.tokenize_status, {"error": "tokenize failing on purpose"})
            return
        p = prompt_text(json.loads(body or b"{}"))
        with self._lock:
            self.tokenized += 1
        ids = [int.from_bytes(p[i:i + 4], "little") for i in range(0, len(p), 4)]
        self._json(h, 200, {"tokens": ids, "count": len(ids), "max_model_len": 1 << 20})

    @staticmethod
    def _json(h, status, doc):
        data = json.dumps(doc).encode()
        h.send_response(status)
        h.send_header("content-type", "application/json")
        h.send_header("content-length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    @staticmethod
    def _chunk(h, data):
        h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        h.wfile.flush()
