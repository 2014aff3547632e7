"""A small fake Kubernetes API server, for cacheroute's Kubernetes discovery
tests (--endpoints-k8s-pool). There is no API server on these machines.

Shapes follow the Kubernetes API as of v1.30: core/v1 Pod (metadata.name,
metadata.resourceVersion, metadata.deletionTimestamp, metadata.annotations,
status.phase, status.podIP, status.conditions[type=Ready]), a PodList with
metadata.resourceVersion, a watch (?watch=1&resourceVersion=RV
&allowWatchBookmarks=true&timeoutSeconds=N) answered as JSON lines
{"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": ...}, a BOOKMARK's
object a Pod with only metadata.resourceVersion, a watch replaying the
events after its resourceVersion, a watch from a compacted
resourceVersion answered 200 with one ERROR event whose object is a Status
of code 410 (reason "Expired"), as the real server does, and 401 with a
Status (reason "Unauthorized") for a missing or wrong bearer token. The
InferencePool is GIE's v1 (inference.networking.k8s.io/v1):
spec.selector.matchLabels and spec.targetPorts[].number.

What it does not model: label selectors beyond a=b,c=d (matchLabels),
field selectors, pagination (limit/continue), namespaces other than the
pool's, RBAC beyond the one token, HTTP/2, and the real server's timing.

HTTPS with a self-signed certificate for 127.0.0.1 made by the openssl CLI
at start (its PEM is the CA the client trusts).

Used in-process: FakeApiServer(tmpdir, token).start(); then add_pod,
set_ready, mark_deleting, delete_pod, bookmark, expire (compact: open
watches get 410), drop_watches (they end, as at their timeoutSeconds),
raw_line (any bytes as one watch line: an oversized event).
"""
import copy
import http.server
import json
import os
import queue
import socketserver
import ssl
import subprocess
import threading
import urllib.parse


def status_body(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


class FakeApiServer:
    def __init__(self, tmpdir, token, namespace="llm", pool="vllm-pool",
                 labels=None, ports=(8000,)):
        self.dir = tmpdir
        self.token = token
        self.namespace = namespace
        self.pool_name = pool
        self.labels = labels or {"app": "vllm"}
        self.ports = list(ports)
        self.lock = threading.Lock()
        self.rv = 100
        self.compacted = 0       # a watch from below this gets 410
        self.pods = {}           # name -> Pod object
        self.watchers = []       # queues of open watches
        self.history = []        # (resourceVersion, event) since the last compaction
        self.requests = []       # (method, path, query, authorized) seen
        self.gone_as_status = False  # a watch from a compacted version: HTTP 410
        self.cert = os.path.join(tmpdir, "apiserver.pem")
        self.key = os.path.join(tmpdir, "apiserver.key")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", self.key, "-out", self.cert, "-days", "1",
                        "-subj", "/CN=fake-apiserver",
                        "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)

    # ---- state changes (each one event to every open watch) ----

    def _next_rv(self):
        self.rv += 1
        return str(self.rv)

    def _emit(self, type_, obj, keep=True):
        ev = {"type": type_, "object": copy.deepcopy(obj)}
        if keep:  # a watch from an older version replays it
            self.history.append((self.rv, ev))
        for q in list(self.watchers):
            q.put(ev)

    def add_pod(self, name, ip, ready=True, labels=None, annotations=None, emit=True):
        """emit False: no watch hears of it (as if compacted away)."""
        with self.lock:
            pod = {"kind": "Pod", "apiVersion": "v1",
                   "metadata": {"name": name, "namespace": self.namespace,
                                "labels": labels or dict(self.labels),
                                "resourceVersion": self._next_rv(),
                                "annotations": annotations or {}},
                   "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
                   "status": {"phase": "Running", "podIP": ip,
                              "podIPs": [{"ip": ip}],
                              "conditions": [{"type": "Ready",
                                              "status": "True" if ready else "False"}]}}
            self.pods[name] = pod
            if self._selected(pod) and emit:
                self._emit("ADDED", pod)

    def _modify(self, name, fn):
        with self.lock:
            pod = self.pods[name]
            fn(pod)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("MODIFIED", pod)

    def set_ready(self, name, ready):
        def fn(pod):
            pod["status"]["conditions"] = [{"type": "Ready",
                                            "status": "True" if ready else "False"}]
        self._modify(name, fn)

    def mark_deleting(self, name):
        def fn(pod):
            pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
        self._modify(name, fn)

    def delete_pod(self, name):
        with self.lock:
            pod = self.pods.pop(name)
            pod["metadata"]["resourceVersion"] = self._next_rv()
            self._emit("DELETED", pod)

    def bookmark(self):
        with self.lock:
            rv = self._next_rv()
            self._emit("BOOKMARK", {"kind": "Pod", "apiVersion": "v1",
                                    "metadata": {"resourceVersion": rv}}, keep=False)

    def expire(self, notify=True):
        """Compacts history: every open watch (notify) and any watch from an
        older resourceVersion is answered 410 Gone, as an ERROR event (or,
        with gone_as_status, a new watch as HTTP 410 with a Status, as some
        servers and proxies do)."""
        with self.lock:
            self.compacted = self.rv + 1
            self.history = []
            self._next_rv()
            for q in list(self.watchers) if notify else ():
                q.put("gone")

    def raw_line(self, text):
        """Sends text as one line to every open watch (not kept: a watch
        from an older version does not see it again)."""
        with self.lock:
            for q in list(self.watchers):
                q.put(("raw", text))

    def drop_watches(self):
        with self.lock:
            for q in list(self.watchers):
                q.put(None)

    def counts(self, pred):
        with self.lock:
            return sum(1 for r in self.requests if pred(r))

    # ---- serving ----

    def _selected(self, pod):
        labels = pod["metadata"].get("labels", {})
        return all(labels.get(k) == v for k, v in self.labels.items())

    def pool_object(self):
        return {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool",
                "metadata": {"name": self.pool_name, "namespace": self.namespace,
                             "resourceVersion": "7"},
                "spec": {"selector": {"matchLabels": dict(self.labels)},
                         "targetPorts": [{"number": p} for p in self.ports],
                         "endpointPickerRef": {"name": "cacheroute-epp",
                                               "port": {"number": 9002}}}}

    def start(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _send(self, code, obj):
                body = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                url = urllib.parse.urlsplit(self.path)
                q = dict(urllib.parse.parse_qsl(url.query))
                ok = self.headers.get("Authorization") == "Bearer " + fake.token
                with fake.lock:
                    fake.requests.append(("GET", url.path, q, ok))
                if not ok:
                    return self._send(401, status_body(401, "Unauthorized", "Unauthorized"))
                ns = fake.namespace
                if url.path == ("/apis/inference.networking.k8s.io/v1/namespaces/%s/"
                                "inferencepools/%s" % (ns, fake.pool_name)):
                    return self._send(200, fake.pool_object())
                if url.path != "/api/v1/namespaces/%s/pods" % ns:
                    return self._send(404, status_body(404, "NotFound", "not found"))
                want = dict(kv.split("=", 1) for kv in q.get("labelSelector", "").split(",")
                            if "=" in kv)
                if want != fake.labels:
                    return self._send(400, status_body(400, "BadRequest",
                                                       "unexpected labelSelector"))
                if q.get("watch") in ("1", "true"):
                    return self._watch(q)
                with fake.lock:
                    items = [copy.deepcopy(p) for p in fake.pods.values() if fake._selected(p)]
                    body = {"kind": "PodList", "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(fake.rv)}, "items": items}
                self._send(200, body)

            def _line(self, obj):
                data = (json.dumps(obj) + "\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _watch(self, q):
                rv = int(q.get("resourceVersion") or 0)
                timeout = float(q.get("timeoutSeconds", 1800))
                events = queue.Queue()
                with fake.lock:
                    gone = rv < fake.compacted
                    if gone and fake.gone_as_status:
                        return self._send(410, status_body(410, "Gone", "too old resource "
                                                           "version: %d" % rv))
                    if not gone:
                        for at, ev in fake.history:
                            if at > rv:
                                events.put(ev)
                        fake.watchers.append(events)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    if gone:
                        self._line({"type": "ERROR", "object": status_body(
                            410, "Expired", "too old resource version: %d (%d)"
                            % (rv, fake.compacted))})
                        return
                    while True:
                        try:
                            ev = events.get(timeout=timeout)
                        except queue.Empty:
                            break
                        if ev is None:
                            break
                        if isinstance(ev, tuple):
                            data = (ev[1] + "\n").encode()
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                            self.wfile.flush()
                            continue
                        if ev == "gone":
                            self._line({"type": "ERROR", "object": status_body(
                                410, "Expired", "too old resource version")})
                            break
                        self._line(ev)
                except OSError:
                    pass  # the client went away (an oversized line, a stop)
                finally:
                    with fake.lock:
                        if events in fake.watchers:
                            fake.watchers.remove(events)
                    try:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                    except OSError:
                        pass
                    self.close_connection = True

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

        self.httpd = Server(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(self.cert, self.key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.url = "https://127.0.0.1:%d" % self.port
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def stop(self):
        self.drop_watches()
        self.httpd.shutdown()
        self.httpd.server_close()
