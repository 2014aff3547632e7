"""An Envoy-like ext_proc client: a test double for Envoy's ext_proc HTTP
filter in front of a GIE endpoint picker (there is no Envoy package on
Debian). It plays one HTTP request through a processor's
envoy.service.ext_proc.v3.ExternalProcessor/Process stream, as Envoy does.

What it models (Envoy 1.33+, the ext_proc filter as GIE configures it):
  - processing_mode: request and response headers SEND, bodies
    FULL_DUPLEX_STREAMED (or BUFFERED), trailers SEND;
  - header values in raw_value (Envoy's send_header_raw_value), the pseudo
    headers :method :path :authority :scheme, x-request-id, content-type,
    content-length; an optional owner header;
  - metadata_context on the first message: the gateway's subset hint under
    filter_metadata["envoy.lb.subset_hint"]["x-gateway-destination-endpoint-subset"]
    (a list of ip:port);
  - full duplex: the headers, then the body chunks as they arrive (sizes the
    caller picks), without waiting for any answer, the last with
    end_of_stream; then it takes the HeadersResponse (the destination header
    mutation, clear_route_cache, dynamic_metadata) and the echoed body as
    streamed_response chunks until end_of_stream;
  - BUFFERED: the headers, wait for their answer, the whole body in one
    message, wait for the BodyResponse (which carries the destination);
  - an ImmediateResponse at any point ends the exchange (what Envoy sends
    downstream);
  - the upstream leg: the request, with the header mutation applied and the
    echoed body, sent to the first address of x-gateway-destination-endpoint
    (optionally the next on a refused connection, the served one then
    reported in metadata_context filter_metadata["envoy.lb"]
    ["x-gateway-destination-endpoint-served"] with the response headers);
  - the response: :status and headers, the body chunks as the upstream's
    reads give them, optional trailers, each echoed back (full duplex:
    streamed_response chunks; BUFFERED: the headers answered, then the whole
    body in one message);
  - the data plane leaving: cancel() resets the stream (a downstream reset);
  - a ProcessingResponse with no response set and override_message_timeout:
    Envoy's timer for the awaited answer restarted at that duration (with
    max_message_timeout configured); recorded, and the answer awaited.

What it does not model: Envoy's retry and timeout policies (message_timeout
and its cap max_message_timeout are not enforced; the route's retries), failure_mode_allow, observability and async modes,
route cache re-resolution, the HTTP/1 and HTTP/2 codecs (the upstream leg is
Python's http.client over HTTP/1.1), header or body mutation other than the
destination, and flow control.

Checks: every answer is checked against the protocol as it comes (order,
kind, streamed chunk size <= 62,000 bytes); a violation raises
ProtocolViolation. The caller compares the echoed bytes.

Use as a module (load_protos, EnvoyClient.exchange / open) or from the
command line for one request:
  python3 envoy_client.py --target 127.0.0.1:9002 --proto-dir proto \\
      --body '{"model":"m","messages":[{"role":"user","content":"hi"}]}'
Needs Debian's python3-grpcio and python3-protobuf (/usr/bin/python3) and
protoc; message classes are generated at run time from proto/envoy/.
"""
import atexit
import glob
import http.client
import importlib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import grpc

METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
DEST_HEADER = "x-gateway-destination-endpoint"
SERVED_KEY = "x-gateway-destination-endpoint-served"
SUBSET_FILTER = "envoy.lb.subset_hint"
SUBSET_KEY = "x-gateway-destination-endpoint-subset"
ERROR_HEADER = "x-cacheroute-error"
MAX_ECHO_CHUNK = 62000  # llm-d's largest streamed_response chunk
FULL_DUPLEX, BUFFERED = "full_duplex", "buffered"


class ProtocolViolation(AssertionError):
    """The processor answered something Envoy would not accept."""


class Protos:
    """The generated modules: pb (external_processor_pb2), core (base_pb2),
    mode (processing_mode_pb2), struct (google.protobuf.struct_pb2)."""

    def __init__(self, pb, core, mode, struct, json_format):
        self.pb, self.core, self.mode, self.struct = pb, core, mode, struct
        self.json_format = json_format


_PROTOS = {}


def load_protos(proto_dir):
    """Generates Python classes for proto_dir/envoy/** with protoc (into a
    temp dir removed at exit) and imports them; once per process."""
    proto_dir = os.path.abspath(proto_dir)
    if proto_dir in _PROTOS:
        return _PROTOS[proto_dir]
    if _PROTOS:
        raise RuntimeError("envoy protos already loaded from another directory")
    out = tempfile.mkdtemp(prefix="cr-envoy-pb-")
    atexit.register(shutil.rmtree, out, True)
    files = sorted(os.path.relpath(p, proto_dir) for p in
                   glob.glob(os.path.join(proto_dir, "envoy", "**", "*.proto"), recursive=True))
    subprocess.run(["protoc", "--python_out=" + out, "-I", proto_dir, "-I", "/usr/include"]
                   + files, check=True, timeout=60)
    sys.path.insert(0, out)
    from google.protobuf import json_format, struct_pb2
    p = Protos(importlib.import_module("envoy.service.ext_proc.v3.external_processor_pb2"),
               importlib.import_module("envoy.config.core.v3.base_pb2"),
               importlib.import_module("envoy.extensions.filters.http.ext_proc.v3."
                                       "processing_mode_pb2"),
               struct_pb2, json_format)
    _PROTOS[proto_dir] = p
    return p


def split_uneven(data, sizes):
    """data cut into pieces of the given sizes, cycling through them; the
    rest in the last piece. An empty body is one empty piece."""
    if not data:
        return [b""]
    out, i, k = [], 0, 0
    while i < len(data):
        n = max(1, sizes[k % len(sizes)])
        out.append(data[i:i + n])
        i += n
        k += 1
    return out


class Result:
    """What one exchange gave. immediate is set (and the rest mostly empty)
    when the processor answered an ImmediateResponse."""

    def __init__(self):
        self.immediate = None        # {"status", "headers", "body", "details"}
        self.destination = None      # the x-gateway-destination-endpoint value
        self.set_headers = {}        # the request header mutation, key -> value
        self.clear_route_cache = False
        self.dynamic_metadata = {}   # as a dict
        self.request_echo = b""      # the echoed request body
        self.request_echo_chunks = []
        self.served = None           # the address the upstream leg reached
        self.upstream_status = None
        self.upstream_headers = []
        self.upstream_body = b""     # the bytes the upstream sent
        self.response_headers_answered = False
        self.response_echo = b""     # the echoed response body
        self.response_echo_chunks = []
        self.trailers_answered = False
        self.decision_s = None       # last request byte sent -> destination in
        self.timeout_overrides = []  # override_message_timeout seconds, in order
        self.grpc_code = None        # the stream's status at its end

    def destinations(self):
        return self.destination.split(",") if self.destination else []


class Stream:
    """One ext_proc stream, driven by hand: send() messages, recv() answers,
    close() half-closes, cancel() resets. Used by EnvoyClient and by tests
    that stop half way."""

    def __init__(self, channel, protos, timeout):
        self.P = protos
        self._q = queue.Queue()
        self._closed = False
        rpc = channel.stream_stream(METHOD,
                                    request_serializer=lambda m: m.SerializeToString(),
                                    response_deserializer=protos.pb.ProcessingResponse.FromString)
        self.call = rpc(self._requests(), timeout=timeout)

    def _requests(self):
        while True:
            m = self._q.get()
            if m is None:
                return
            yield m

    def send(self, msg):
        if self._closed:
            raise RuntimeError("send after close")
        self._q.put(msg)

    def close(self):
        if not self._closed:
            self._closed = True
            self._q.put(None)

    def cancel(self):
        self.close()
        self.call.cancel()

    def recv(self):
        """The next ProcessingResponse; None when the processor ended the
        stream (its status is then in self.call)."""
        try:
            return next(self.call)
        except StopIteration:
            return None


class EnvoyClient:
    """Plays HTTP requests through the ext_proc processor at target."""

    def __init__(self, target, protos, channel=None, timeout=20.0, authority="model.example"):
        self.P = protos
        self.target = target
        self.channel = channel or grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", -1),
                             ("grpc.max_send_message_length", -1),
                             ("grpc.enable_retries", 0)])
        self.timeout = timeout
        self.authority = authority

    def close(self):
        self.channel.close()

    # ------------------------------------------------------------ messages

    def header_map(self, pairs):
        hm = self.P.core.HeaderMap()
        for k, v in pairs:
            hm.headers.add(key=k, raw_value=v.encode() if isinstance(v, str) else v)
        return hm

    def request_headers(self, method, path, body, headers=(), subset=None, announce=None,
                        metadata=None):
        """The first message: the request's headers (end_of_stream when there
        is no body), with metadata_context and protocol_config."""
        pairs = [(":method", method), (":path", path), (":authority", self.authority),
                 (":scheme", "http"), ("x-request-id", str(uuid.uuid4())),
                 ("x-forwarded-proto", "http")]
        if body:
            pairs += [("content-type", "application/json"), ("content-length", str(len(body)))]
        pairs += list(headers)
        m = self.P.pb.ProcessingRequest()
        m.request_headers.headers.CopyFrom(self.header_map(pairs))
        m.request_headers.end_of_stream = not body
        md = dict(metadata or {})
        if subset is not None:
            md.setdefault(SUBSET_FILTER, {})[SUBSET_KEY] = list(subset)
        for name, fields in md.items():
            m.metadata_context.filter_metadata[name].update(fields)
        if announce:
            mode = {FULL_DUPLEX: self.P.mode.ProcessingMode.FULL_DUPLEX_STREAMED,
                    BUFFERED: self.P.mode.ProcessingMode.BUFFERED}[announce]
            m.protocol_config.request_body_mode = mode
            m.protocol_config.response_body_mode = mode
        return m

    def body_msg(self, data, eos, response=False):
        m = self.P.pb.ProcessingRequest()
        b = m.response_body if response else m.request_body
        b.body = data
        b.end_of_stream = eos
        return m

    def trailers_msg(self, response):
        m = self.P.pb.ProcessingRequest()
        t = m.response_trailers if response else m.request_trailers
        t.trailers.CopyFrom(self.header_map([("grpc-status", "0")] if response
                                            else [("x-checksum", "0")]))
        return m

    # ------------------------------------------------------------ checking

    def _immediate(self, r, res):
        ir = r.immediate_response
        res.immediate = {"status": ir.status.code,
                         "headers": {h.header.key: (h.header.raw_value.decode("utf-8", "replace")
                                                    or h.header.value)
                                     for h in ir.headers.set_headers},
                         "body": ir.body, "details": ir.details}

    def _take_headers_answer(self, common, res):
        for opt in common.header_mutation.set_headers:
            hv = opt.header
            res.set_headers[hv.key] = hv.raw_value.decode() if hv.raw_value else hv.value
        res.clear_route_cache = res.clear_route_cache or common.clear_route_cache
        if DEST_HEADER in res.set_headers:
            res.destination = res.set_headers[DEST_HEADER]

    def _take_metadata(self, r, res):
        if r.HasField("dynamic_metadata"):
            res.dynamic_metadata = self.P.json_format.MessageToDict(r.dynamic_metadata)

    def _expect(self, s, kinds, res, what):
        """The next answer, which must be one of kinds or an immediate
        response (then None is returned after recording it)."""
        r = s.recv()
        while r is not None and r.WhichOneof("response") is None and \
                r.HasField("override_message_timeout"):
            d = r.override_message_timeout  # the timer restarted; the answer still awaited
            res.timeout_overrides.append(d.seconds + d.nanos / 1e9)
            r = s.recv()
        if r is None:
            raise ProtocolViolation("stream ended (%s) waiting for %s" % (
                s.call.code(), what))
        kind = r.WhichOneof("response")
        if kind == "immediate_response":
            self._immediate(r, res)
            return None
        if kind not in kinds:
            raise ProtocolViolation("got %s, want %s (%s)" % (kind, "/".join(kinds), what))
        return r

    def _streamed_chunk(self, r, kind):
        common = getattr(r, kind).response
        bm = common.body_mutation
        if bm.WhichOneof("mutation") != "streamed_response":
            raise ProtocolViolation("%s answer without streamed_response in full duplex: %s" % (
                kind, bm.WhichOneof("mutation")))
        chunk = bm.streamed_response.body
        if len(chunk) > MAX_ECHO_CHUNK:
            raise ProtocolViolation("streamed chunk of %d bytes > %d" % (len(chunk),
                                                                          MAX_ECHO_CHUNK))
        return chunk, bm.streamed_response.end_of_stream

    def _collect_echo(self, s, kind, res, chunks):
        """streamed_response chunks of kind until end_of_stream; returns
        False on an immediate response."""
        while True:
            r = self._expect(s, (kind,), res, "the echoed body")
            if r is None:
                return False
            chunk, eos = self._streamed_chunk(r, kind)
            chunks.append(chunk)
            if eos:
                return True

    def _collect_len(self, s, kind, res, chunks, total):
        """Streamed chunks of kind until total bytes came (the end is the
        trailers, so no chunk need carry end_of_stream); False on an
        immediate response."""
        got = 0
        while got < total:
            r = self._expect(s, (kind,), res, "the echoed body")
            if r is None:
                return False
            chunk, _ = self._streamed_chunk(r, kind)
            chunks.append(chunk)
            got += len(chunk)
        return True

    # ------------------------------------------------------------ one request

    def open(self):
        return Stream(self.channel, self.P, self.timeout)

    def exchange(self, body, path="/v1/chat/completions", method="POST", headers=(),
                 chunks=(4093, 17, 65536, 1000), subset=None, mode=FULL_DUPLEX, announce=None,
                 upstream=True, fallback=False, report_served=False, trailers=False,
                 response=None, metadata=None, request_trailers=False):
        """One HTTP request through the processor. body: bytes (b"" = none);
        chunks: request body piece sizes, cycled; mode: FULL_DUPLEX or
        BUFFERED (what this client does); announce: the mode put in
        protocol_config (None: not sent, as Envoy before 1.33).
        upstream: forward to the destination over HTTP (else response is
        (status, headers, [body pieces]) played as if an upstream gave it);
        fallback: on a refused connection try the next address;
        report_served: send the reached address in metadata_context;
        trailers / request_trailers: the response / request ends with
        trailers (an HTTP/2 stream's), not with end_of_stream on its body.
        Returns a Result; raises ProtocolViolation."""
        res = Result()
        s = self.open()
        try:
            if self._request_phase(s, res, body, path, method, headers, chunks, subset, mode,
                                   announce, metadata, request_trailers) and \
                    res.destination is not None:
                if upstream:
                    status, rheaders, pieces = self._forward(res, method, path, headers,
                                                             fallback)
                else:
                    status, rheaders, pieces = response or (200, [], [b""])
                    res.served = res.destinations()[0]
                    res.upstream_status, res.upstream_headers = status, rheaders
                self._response_phase(s, res, mode, status, rheaders, pieces, trailers,
                                     report_served)
            s.close()
            tail = s.recv()
            if tail is not None:
                raise ProtocolViolation("answer after the exchange: %s" % tail)
            res.grpc_code = s.call.code()
        except grpc.RpcError as e:
            res.grpc_code = e.code()
            raise
        finally:
            s.cancel()
        return res

    def _request_phase(self, s, res, body, path, method, headers, chunks, subset, mode,
                       announce, metadata, request_trailers=False):
        """True when the request got a destination (res.destination)."""
        s.send(self.request_headers(method, path, body, headers, subset, announce, metadata))
        if mode == BUFFERED:
            r = self._expect(s, ("request_headers",), res, "the headers' answer")
            if r is None:
                return False
            self._take_headers_answer(r.request_headers.response, res)
            self._take_metadata(r, res)
            if body:
                s.send(self.body_msg(body, True))
                sent = time.monotonic()
                r = self._expect(s, ("request_body",), res, "the body's answer")
                if r is None:
                    return False
                res.decision_s = time.monotonic() - sent
                common = r.request_body.response
                if common.body_mutation.WhichOneof("mutation") is not None:
                    raise ProtocolViolation("BUFFERED body answer mutates the body")
                self._take_headers_answer(common, res)
                self._take_metadata(r, res)
            res.request_echo = body
            return True
        pieces = split_uneven(body, list(chunks)) if body else []
        for i, p in enumerate(pieces):
            s.send(self.body_msg(p, i == len(pieces) - 1 and not request_trailers))
        if request_trailers:
            s.send(self.trailers_msg(False))
        sent = time.monotonic()
        r = self._expect(s, ("request_headers",), res, "the held headers' answer")
        if r is None:
            return False
        res.decision_s = time.monotonic() - sent
        self._take_headers_answer(r.request_headers.response, res)
        self._take_metadata(r, res)
        if request_trailers:
            if not self._collect_len(s, "request_body", res, res.request_echo_chunks, len(body)):
                return False
            if self._expect(s, ("request_trailers",), res, "the trailers' answer") is None:
                return False
        elif body and not self._collect_echo(s, "request_body", res, res.request_echo_chunks):
            return False
        res.request_echo = b"".join(res.request_echo_chunks)
        return True

    def _forward(self, res, method, path, headers, fallback):
        """The upstream leg over HTTP/1.1; returns (status, headers, pieces)."""
        addrs = res.destinations() if fallback else res.destinations()[:1]
        last = None
        for addr in addrs:
            host, port = addr.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
            hdrs = {k: v for k, v in headers}
            hdrs.update(res.set_headers)
            hdrs["content-type"] = "application/json"
            try:
                conn.request(method, path, body=res.request_echo or None, headers=hdrs)
                resp = conn.getresponse()
            except ConnectionRefusedError as e:
                conn.close()
                last = e
                continue
            res.served = addr
            pieces = []
            while True:
                p = resp.read1(1 << 20)
                if not p:
                    break
                pieces.append(p)
            conn.close()
            res.upstream_status = resp.status
            res.upstream_headers = [(k.lower(), v) for k, v in resp.getheaders()]
            res.upstream_body = b"".join(pieces)
            return resp.status, res.upstream_headers, pieces or [b""]
        raise last

    def _response_phase(self, s, res, mode, status, rheaders, pieces, trailers, report_served):
        m = self.P.pb.ProcessingRequest()
        hop = {"connection", "transfer-encoding", "keep-alive"}
        pairs = [(":status", str(status))] + [(k, v) for k, v in rheaders if k not in hop]
        m.response_headers.headers.CopyFrom(self.header_map(pairs))
        if report_served and res.served:
            m.metadata_context.filter_metadata["envoy.lb"].update({SERVED_KEY: res.served})
        body = b"".join(pieces)
        if not res.upstream_body:
            res.upstream_body = body
        m.response_headers.end_of_stream = not body and not trailers
        s.send(m)
        if mode == BUFFERED:
            if self._expect(s, ("response_headers",), res, "the response headers' answer") is None:
                return
            res.response_headers_answered = True
            if body:
                s.send(self.body_msg(body, not trailers, response=True))
                if self._expect(s, ("response_body",), res, "the response body's answer") is None:
                    return
                res.response_echo = body
        else:
            if body:
                for i, p in enumerate(pieces):
                    s.send(self.body_msg(p, i == len(pieces) - 1 and not trailers,
                                         response=True))
            if self._expect(s, ("response_headers",), res, "the response headers' answer") is None:
                return
            res.response_headers_answered = True
            if body:
                if trailers:
                    if not self._collect_len(s, "response_body", res, res.response_echo_chunks,
                                             len(body)):
                        return
                elif not self._collect_echo(s, "response_body", res, res.response_echo_chunks):
                    return
            res.response_echo = b"".join(res.response_echo_chunks)
        if trailers:
            s.send(self.trailers_msg(True))
            if self._expect(s, ("response_trailers",), res, "the trailers' answer") is None:
                return
            res.trailers_answered = True


def main():
    import argparse
    ap = argparse.ArgumentParser(description="One HTTP request through an ext_proc processor, "
                                             "as Envoy sends it.")
    ap.add_argument("--target", required=True, help="the processor's host:port")
    ap.add_argument("--proto-dir", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                        "proto"))
    ap.add_argument("--body", default="", help="the request body (JSON text); @FILE reads one")
    ap.add_argument("--path", default="/v1/chat/completions")
    ap.add_argument("--method", default="POST")
    ap.add_argument("--header", action="append", default=[], help="name:value, repeatable")
    ap.add_argument("--subset", help="the subset hint, ip:port,ip:port")
    ap.add_argument("--mode", choices=(FULL_DUPLEX, BUFFERED), default=FULL_DUPLEX)
    ap.add_argument("--no-upstream", action="store_true",
                    help="do not forward; play an empty 200 response")
    a = ap.parse_args()
    body = a.body
    if body.startswith("@"):
        with open(body[1:], "rb") as f:
            body = f.read()
    body = body.encode() if isinstance(body, str) else body
    headers = [tuple(x.split(":", 1)) for x in a.header]
    c = EnvoyClient(a.target, load_protos(a.proto_dir))
    res = c.exchange(body, path=a.path, method=a.method, headers=headers,
                     subset=a.subset.split(",") if a.subset else None, mode=a.mode,
                     upstream=not a.no_upstream, report_served=True)
    print(json.dumps({"immediate": res.immediate, "destination": res.destination,
                      "dynamic_metadata": res.dynamic_metadata,
                      "request_echo_ok": res.request_echo == body, "served": res.served,
                      "upstream_status": res.upstream_status,
                      "response_echo_ok": res.response_echo == res.upstream_body,
                      "response_bytes": len(res.upstream_body),
                      "decision_ms": None if res.decision_s is None else res.decision_s * 1e3,
                      "grpc_code": str(res.grpc_code)}, indent=2))
    c.close()
    return 0 if res.immediate is None else 1


if __name__ == "__main__":
    sys.exit(main())
