"""What engines say they cache, against the real sidecar: ReportKvEvents
(admin) and the --kv-events ZeroMQ subscriber feed the prefix index that
Route reads, and outcomes measure its predictions. Block keys are computed
here independently (python3-xxhash) as route.h documents them: XXH3-64 of
a block's token ids as little-endian uint32, seeded with the key of the
block before it (0 for a prompt's first)."""
import hashlib
import json
import os
import re
import struct
import sys
import tempfile
import threading
import time
import urllib.request

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import msgpack  # noqa: E402
import xxhash  # noqa: E402
import zmq  # noqa: E402

import harness as h  # noqa: E402
from harness import P  # noqa: E402

BT = 16  # --block-tokens, the engines' block size here
SHARDS = 8


def tokens_of(prompt, n_blocks):
    """n_blocks blocks of BT token ids, distinct per prompt."""
    return [(prompt * 7919 + i) % 150000 for i in range(n_blocks * BT)]


def keys_of(tokens, parent=0):
    """The router's chained key of each full block of tokens."""
    keys = []
    for b in range(len(tokens) // BT):
        parent = xxhash.xxh3_64_intdigest(
            struct.pack("<%dI" % BT, *tokens[b * BT:(b + 1) * BT]), seed=parent)
        keys.append(parent)
    return keys


def engine_hashes(prompt, n_blocks, first=0):
    """The engine's own hashes: anything, unrelated to the router's keys
    (vLLM's are int64, some negative: sent as their two's complement)."""
    return [(prompt * 1000003 + first + i) * 0x9E3779B97F4A7C15 % 2**64
            for i in range(n_blocks)]


def stored(shard, prompt, first, n, parent=None, lora=None, medium=None):
    toks = tokens_of(prompt, first + n)[first * BT:]
    m = P.cr.KvBlockStored(block_hashes=engine_hashes(prompt, n, first), token_ids=toks,
                           block_size=BT)
    if parent is not None:
        m.parent_block_hash = parent
    if lora is not None:
        m.lora_name = lora
    if medium is not None:
        m.medium = medium
    return P.cr.KvEvent(shard=shard, block_stored=m)


def removed(shard, hashes, medium=None):
    m = P.cr.KvBlockRemoved(block_hashes=hashes)
    if medium is not None:
        m.medium = medium
    return P.cr.KvEvent(shard=shard, block_removed=m)


def cleared(shard):
    return P.cr.KvEvent(shard=shard, all_blocks_cleared=P.cr.KvAllBlocksCleared())


class ReportKvEventsTest(h.SidecarTestCase):
    def setUp(self):
        self.sc = self.start_sidecar("--n-shards", str(SHARDS), "--block-tokens", str(BT),
                                     "--index-blocks", "4096", "--metrics-listen",
                                     "127.0.0.1:0", metrics=False)
        self.stub = self.sc.stub()

    def report(self, *events):
        return self.stub.ReportKvEvents(P.cr.ReportKvEventsRequest(events=events),
                                        timeout=h.RPC_TIMEOUT)

    def route(self, prompt, n_blocks, namespace=None):
        item = P.cr.RouteItem(block_hashes=keys_of(tokens_of(prompt, n_blocks)),
                              prompt_tokens=n_blocks * BT)
        if namespace is not None:
            item.namespace = namespace
        return self.stub.Route(P.cr.RouteRequest(requests=[item]),
                               timeout=h.RPC_TIMEOUT).routes[0]

    def test_stored_blocks_route_there_and_children_chain(self):
        r = self.report(stored(5, 1, 0, 3))
        self.assertEqual((r.stored, r.removed, r.orphans, r.unknown), (3, 0, 0, 0))
        # (A route is itself a prediction: the blocks it sends are indexed
        # on its shard, so each question asks only for what is known.)
        d = self.route(1, 3)
        self.assertEqual((d.shard, d.cached_tokens, d.reason), (5, 3 * BT, "prefix"))
        # The engine's next blocks name their parent by the engine's hash.
        parent = engine_hashes(1, 3)[-1]
        r = self.report(stored(5, 1, 3, 2, parent=parent))
        self.assertEqual((r.stored, r.orphans), (2, 0))
        self.assertEqual(self.route(1, 5).cached_tokens, 5 * BT)
        # A parent the sidecar never saw stored: orphans, nothing indexed.
        r = self.report(stored(2, 9, 2, 2, parent=12345))
        self.assertEqual((r.stored, r.orphans), (0, 2))
        self.assertEqual(self.route(9, 4).cached_tokens, 0)

    def test_removed_and_cleared_blocks_are_no_longer_hits(self):
        self.report(stored(3, 2, 0, 4), stored(6, 4, 0, 2))
        self.assertEqual(self.route(2, 4).cached_tokens, 4 * BT)
        # Dropping the third block keeps the first two as the prefix.
        r = self.report(removed(3, engine_hashes(2, 4)[2:3]), removed(3, [777]))
        self.assertEqual((r.removed, r.unknown), (1, 1))
        d = self.route(2, 4)
        self.assertEqual((d.shard, d.cached_tokens), (3, 2 * BT))
        r = self.report(cleared(3))
        self.assertEqual(self.route(2, 4).cached_tokens, 0)
        # Another shard's blocks are untouched by shard 3's clear.
        d = self.route(4, 2)
        self.assertEqual((d.shard, d.cached_tokens), (6, 2 * BT))

    def test_namespaces_only_match_their_own(self):
        self.report(stored(1, 3, 0, 2, lora="adapter-a"))
        self.assertEqual(self.route(3, 2).cached_tokens, 0)
        self.assertEqual(self.route(3, 2, namespace="adapter-b").cached_tokens, 0)
        d = self.route(3, 2, namespace="adapter-a")
        self.assertEqual((d.shard, d.cached_tokens), (1, 2 * BT))

    def test_offloaded_blocks_are_hits_that_load(self):
        """medium CPU: predicted cached, its load in the prefill; the GPU
        copy of the same blocks elsewhere wins; the CPU copy outlives the
        GPU's removal; an unknown medium is refused naming it."""
        self.report(stored(2, 11, 0, 30, medium="CPU"))
        cpu = self.route(11, 30)
        self.assertEqual((cpu.shard, cpu.cached_tokens), (2, 30 * BT))
        self.report(stored(3, 12, 0, 30, medium="GPU"))
        gpu = self.route(12, 30)
        self.assertEqual((gpu.shard, gpu.cached_tokens), (3, 30 * BT))
        self.assertGreater(cpu.prefill_ms, gpu.prefill_ms)
        self.report(stored(4, 13, 0, 30), stored(4, 13, 0, 30, medium="CPU"),
                    removed(4, engine_hashes(13, 30), medium="GPU"))
        d = self.route(13, 30)
        self.assertEqual((d.shard, d.cached_tokens), (4, 30 * BT))
        self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT, self.stub.ReportKvEvents,
                            P.cr.ReportKvEventsRequest(events=[
                                stored(5, 14, 0, 2), removed(5, [1], medium="DISK")]),
                            details='events[1].block_removed.medium must be GPU or CPU, '
                                    'got "DISK"')
        self.assertEqual(self.route(14, 2).cached_tokens, 0)
        scraped = self.scrape()
        self.assertEqual(scraped["cacheroute_route_index_cpu_blocks"], 60)

    def test_a_bad_event_applies_nothing(self):
        bad = [
            (stored(SHARDS, 1, 0, 1), "events[1].shard must be below the 8 shards, got 8"),
            (P.cr.KvEvent(shard=0), "events[1] must be one of block_stored"),
            (P.cr.KvEvent(shard=0, block_stored=P.cr.KvBlockStored(
                block_hashes=[1, 2], token_ids=[1] * BT, block_size=BT)), "events[1]"),
            (P.cr.KvEvent(shard=0, block_stored=P.cr.KvBlockStored(
                block_hashes=[1], token_ids=[1] * BT)), "events[1]"),
        ]
        for k, (ev, words) in enumerate(bad):
            self.assertRpcError(grpc.StatusCode.INVALID_ARGUMENT,
                                self.stub.ReportKvEvents,
                                P.cr.ReportKvEventsRequest(events=[stored(4, 8 + k, 0, 2), ev]),
                                timeout=h.RPC_TIMEOUT, details_re=words.replace("[", r"\[")
                                .replace("]", r"\]"))
            # The good event before it was not applied either.
            self.assertEqual(self.route(8 + k, 2).cached_tokens, 0)

    def test_hit_prediction_error_by_kv_events(self):
        """A Route with a request_id predicts cached tokens; the outcome's
        cached_tokens is the truth: the error is counted by whether the
        shard's engine had sent events."""
        def served(prompt, n, rid, cached):
            item = P.cr.RouteItem(block_hashes=keys_of(tokens_of(prompt, n)),
                                  prompt_tokens=n * BT, request_id=rid)
            d = self.stub.Route(P.cr.RouteRequest(requests=[item]),
                                timeout=h.RPC_TIMEOUT).routes[0]
            self.stub.ReportOutcome(P.cr.ReportOutcomeRequest(outcomes=[P.cr.Outcome(
                request_id=rid, cached_tokens=cached)]), timeout=h.RPC_TIMEOUT)
            return d
        # Shard 2 reported 3 blocks; the engine then says it served 1.
        self.report(stored(2, 21, 0, 3))
        d = served(21, 3, "with-events", BT)
        self.assertEqual((d.shard, d.cached_tokens), (2, 3 * BT))
        # A prompt no shard holds goes to a shard without events; predicted 0.
        d = served(22, 2, "without-events", 2 * BT)
        self.assertEqual(d.cached_tokens, 0)
        self.assertNotEqual(d.shard, 2)
        body = self.scrape()
        self.assertEqual(body['cacheroute_route_hit_predictions_checked_total{kv_events="yes"}'], 1)
        self.assertEqual(body['cacheroute_route_hit_prediction_error_tokens_total{kv_events="yes"}'],
                         2 * BT)
        self.assertEqual(body['cacheroute_route_hit_predictions_checked_total{kv_events="no"}'], 1)
        self.assertEqual(body['cacheroute_route_hit_prediction_error_tokens_total{kv_events="no"}'],
                         2 * BT)
        self.assertEqual(body['cacheroute_routes_placed_total{reason="prefix"}'], 1)
        self.assertGreaterEqual(body["cacheroute_route_index_blocks"], 5)
        # Both outcomes released their routes' predicted work.
        self.assertEqual(body['cacheroute_route_outstanding_work{shard="2"}'], 0)
        self.assertEqual(body["cacheroute_route_outstanding"], 0)

    def scrape(self):
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as r:
            lines = r.read().decode().splitlines()
        return {k: float(v) for k, v in (line.rsplit(" ", 1) for line in lines
                                          if line and not line.startswith("#"))}

    def test_too_many_events_are_refused_before_decoding(self):
        many = P.cr.ReportKvEventsRequest(events=[cleared(0)] * 10001)
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub.ReportKvEvents,
                            many, timeout=h.RPC_TIMEOUT, details_re="events")
        r = self.stub.ReportKvEvents(P.cr.ReportKvEventsRequest(events=[cleared(0)] * 10000),
                                     timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.stored, 0)



# ---- the ZeroMQ subscriber (--kv-events), against a Python publisher --------
#
# The engine's side as vLLM's kv_events.py describes it: a PUB socket sending
# [topic, seq as 8 bytes big-endian, msgpack EventBatch], and a ROUTER replay
# socket answering [b"", start_seq] with [b"", seq, payload] per buffered
# batch from start_seq, then [b"", -1, b""].

KV_SHARD = 5


class Publisher:
    """One engine's KV-event sockets on 127.0.0.1, on ports of their own;
    silent: its replay socket reads requests and never answers."""

    def __init__(self, shard=KV_SHARD, silent=False, port=None, topic=b"kv-events"):
        self.shard = shard
        self.silent = silent
        self.topic = topic
        self.ctx = zmq.Context()
        self.pub = self.ctx.socket(zmq.PUB)
        if port is None:
            self.port = self.pub.bind_to_random_port("tcp://127.0.0.1")
        else:  # a given one (a data-parallel rank's): ZMQError when taken
            self.port = port
            try:
                self.pub.bind("tcp://127.0.0.1:%d" % port)
            except zmq.ZMQError:
                self.pub.close(0)
                self.ctx.term()
                raise
        self.router = self.ctx.socket(zmq.ROUTER)
        self.replay_port = self.router.bind_to_random_port("tcp://127.0.0.1")
        self.seq = 0
        self.buffer = {}  # seq -> payload: what the replay socket can answer
        self.lock = threading.Lock()
        self.stopping = False
        self.thread = threading.Thread(target=self._serve_replays, daemon=True)
        self.thread.start()

    def address(self, replay=True):
        """Its sockets as an endpoint's kv_events."""
        v = "tcp://127.0.0.1:%d" % self.port
        return v + (",replay=tcp://127.0.0.1:%d" % self.replay_port if replay else "")

    def flag(self, replay=True):
        return "%d=%s" % (self.shard, self.address(replay))

    def send(self, payload, deliver=True, keep=True):
        """Publishes payload as the next seq; deliver=False skips the PUB
        (a message lost on the way), keep=False keeps it out of the replay
        buffer (one the engine no longer holds)."""
        with self.lock:
            seq, self.seq = self.seq, self.seq + 1
            if keep:
                self.buffer[seq] = payload
        if deliver:
            self.pub.send_multipart([self.topic, struct.pack(">Q", seq), payload])
        return seq

    def restart(self):
        """The engine restarted: seq from 0, nothing buffered."""
        with self.lock:
            self.seq = 0
            self.buffer.clear()

    def _serve_replays(self):
        while not self.stopping:
            if not self.router.poll(50):
                continue
            frames = self.router.recv_multipart()
            if self.silent:
                continue
            ident, start = frames[0], struct.unpack(">Q", frames[-1])[0]
            with self.lock:
                batches = sorted((k, v) for k, v in self.buffer.items() if k >= start)
            for seq, payload in batches:
                self.router.send_multipart([ident, b"", struct.pack(">Q", seq), payload])
            self.router.send_multipart([ident, b"", struct.pack(">q", -1), b""])

    def close(self):
        self.stopping = True
        self.thread.join()
        self.pub.close(0)
        self.router.close(0)
        self.ctx.term()


def batch(events, as_map=False):
    if as_map:
        return msgpack.packb({"ts": time.time(), "events": events, "data_parallel_rank": None})
    return msgpack.packb([time.time(), events, None])


def bytes_hashes(prompt, n_blocks, first=0):
    """Current vLLM releases' hashes: bytes."""
    return [hashlib.sha256(b"%d/%d" % (prompt, first + i)).digest() for i in range(n_blocks)]


def block_stored(prompt, first, n, as_map=False, parent=None):
    toks = tokens_of(prompt, first + n)[first * BT:]
    if as_map:
        return {"type": "BlockStored", "block_hashes": bytes_hashes(prompt, n, first),
                "parent_block_hash": parent, "token_ids": toks, "block_size": BT,
                "lora_id": None, "medium": "GPU", "lora_name": None}
    return ["BlockStored", engine_hashes(prompt, n, first), parent, toks, BT, None, "GPU", None]


class KvMetrics:
    """The subscriber's figures by shard, for a test with self.sc."""

    def metric(self, name, shard=KV_SHARD, missing=False):
        """The sample; None when missing is allowed and there is none."""
        url = "http://127.0.0.1:%d/metrics" % self.sc.config["metrics_port"]
        with urllib.request.urlopen(url, timeout=10) as r:
            body = r.read().decode()
        m = re.search(r'^%s\{shard="%d"\} (\S+)$' % (name, shard), body, re.M)
        if m is None and missing:
            return None
        self.assertIsNotNone(m, name)
        return float(m.group(1))

    def wait_subscribed(self, pub=None):
        """A SUB socket misses what was published before it joined: empty
        batches until the sidecar counts one, then the count once settled
        is where the test's own messages start."""
        pub = pub or self.pub
        def seen():
            pub.send(batch([]))
            n = self.metric("cacheroute_kv_event_batches_total", pub.shard, missing=True)
            return n is not None and n >= 1
        h.poll(seen, 10, interval=0.1, what="the sidecar subscribed to shard %d" % pub.shard)
        time.sleep(0.3)  # a probe still on its way
        self.delivered = self.metric("cacheroute_kv_event_batches_total", pub.shard)


class KvEventSubscriberTest(KvMetrics, h.SidecarTestCase):
    SHARED = False

    def setUp(self):
        self.pub = Publisher()
        self.addCleanup(self.pub.close)

    def start(self, replay=True, others=()):
        """The sidecar subscribed to self.pub and to each of others."""
        flags = ["--kv-events", self.pub.flag(replay)]
        for p in others:
            flags += ["--kv-events", p.flag()]
        self.sc = self.start_sidecar("--n-shards", str(SHARDS), "--block-tokens", str(BT),
                                     "--index-blocks", "4096", "--metrics-listen",
                                     "127.0.0.1:0", *flags, metrics=False)
        self.stub = self.sc.stub()
        for p in others:
            self.wait_subscribed(p)
        self.wait_subscribed()

    def send(self, events, as_map=False, deliver=True, keep=True, payload=None):
        """Publishes one batch and waits until the sidecar has taken it."""
        self.pub.send(payload if payload is not None else batch(events, as_map), deliver, keep)
        if deliver:
            self.delivered += 1
            h.poll(lambda: self.metric("cacheroute_kv_event_batches_total") >= self.delivered,
                   10, what="batch %d taken" % self.delivered)

    def route(self, prompt, n_blocks):
        item = P.cr.RouteItem(block_hashes=keys_of(tokens_of(prompt, n_blocks)),
                              prompt_tokens=n_blocks * BT)
        d = self.stub.Route(P.cr.RouteRequest(requests=[item]), timeout=h.RPC_TIMEOUT).routes[0]
        return d.shard, d.cached_tokens

    def assertBlocks(self, prompt, n_blocks):
        """Each leading run of the prompt's blocks is a hit on the shard."""
        for k in range(1, n_blocks + 1):
            self.assertEqual(self.route(prompt, k), (KV_SHARD, k * BT), "block %d" % k)

    def test_both_encodings_block_by_block_and_cleared(self):
        self.start()
        self.send([block_stored(1, 0, 3)])
        self.assertBlocks(1, 3)
        self.send([block_stored(2, 0, 2, as_map=True)], as_map=True)
        self.assertBlocks(2, 2)
        # A child names its parent by the engine's (bytes) hash.
        self.send([block_stored(2, 2, 1, as_map=True, parent=bytes_hashes(2, 2)[1])],
                  as_map=True)
        self.assertBlocks(2, 3)
        self.send([["AllBlocksCleared"]])
        self.assertEqual(self.route(2, 3)[1], 0)
        self.assertEqual(self.metric("cacheroute_kv_events_applied_total"), 4)
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 0)

    def test_a_gap_is_replayed(self):
        self.start()
        self.send([block_stored(3, 0, 2)])
        self.send([block_stored(4, 0, 2)], deliver=False)  # lost on the way
        self.send([block_stored(5, 0, 2, as_map=True)], as_map=True)
        self.assertBlocks(4, 2)
        self.assertBlocks(3, 2)
        self.assertBlocks(5, 2)
        self.assertEqual(self.metric("cacheroute_kv_replayed_batches_total"), 1)
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 0)
        self.sc.wait_for(lambda e: e.get("msg") == "kv events replayed", 5)

    def test_a_gap_the_replay_cannot_cover_resets(self):
        self.start()
        self.send([block_stored(6, 0, 2)])
        self.send([block_stored(7, 0, 2)], deliver=False, keep=False)  # gone for good
        self.send([block_stored(8, 0, 2)])
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 1)
        self.assertEqual(self.route(6, 2)[1], 0)
        self.assertBlocks(8, 2)  # the batch after the gap applies to the fresh view
        ev = self.sc.wait_for(lambda e: e.get("msg", "").startswith("kv events view reset"), 5)
        self.assertEqual(ev["shard"], KV_SHARD)

    def test_a_gap_without_a_replay_endpoint_resets(self):
        self.start(replay=False)
        self.send([block_stored(12, 0, 2)])
        self.send([block_stored(13, 0, 2)], deliver=False)
        self.send([block_stored(14, 0, 1)])
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 1)
        self.assertEqual(self.route(12, 2)[1], 0)
        self.assertEqual(self.route(13, 2)[1], 0)

    def test_a_publisher_restart_resets(self):
        self.start()
        self.send([block_stored(9, 0, 2)])
        self.assertBlocks(9, 2)
        self.pub.restart()
        self.send([block_stored(10, 0, 2, as_map=True)], as_map=True)
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 1)
        self.assertEqual(self.route(9, 2)[1], 0)
        self.assertBlocks(10, 2)

    def test_malformed_payloads_are_dropped(self):
        self.start()
        self.send([block_stored(11, 0, 2)])
        bad = [b"\xc1 not msgpack", msgpack.packb([1.0, [["BlockStored", [1], None, [1] * BT,
                                                          "sixteen", None, None, None]], None]),
               msgpack.packb({"ts": 1.0}),
               msgpack.packb([1.0, [["BlockRemoved", "not a list", None]], None])]
        for payload in bad:
            self.send(None, payload=payload)
        self.assertEqual(self.metric("cacheroute_kv_events_dropped_total"), len(bad))
        ev = self.sc.wait_for(lambda e: e.get("msg") == "kv events dropped", 5)
        self.assertEqual(ev["shard"], KV_SHARD)
        self.assertIn("decode", ev["reason"])
        # Logged once a minute a shard, not once a message.
        self.assertEqual(len(self.sc.find_events(lambda e: e.get("msg") == "kv events dropped")),
                         1)
        self.assertBlocks(11, 2)
        self.assertEqual(self.metric("cacheroute_kv_resets_total"), 0)
        health = self.sc.health_stub().Check(P.health.HealthCheckRequest(),
                                             timeout=h.RPC_TIMEOUT)
        self.assertEqual(health.status, P.health.HealthCheckResponse.SERVING)
        self.sc.assert_clean_exit(self)

    def vm_hwm(self):
        """The sidecar's peak RSS so far, bytes."""
        with open("/proc/%d/status" % self.sc.proc.pid) as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
        self.fail("no VmHWM")

    def assertLinkBack(self, prompt):
        """The shard's link takes batches again: a new chain of blocks is
        applied (the messages sent while it re-opens are lost, or
        replayed) and is a hit."""
        applied = self.metric("cacheroute_kv_events_applied_total")
        def back():
            self.pub.send(batch([block_stored(prompt, 0, 2)]))
            return self.metric("cacheroute_kv_events_applied_total") > applied
        h.poll(back, 20, interval=0.2, what="the link back")
        self.assertBlocks(prompt, 2)

    def test_an_oversized_frame_reopens_the_link_and_resets(self):
        """R3-3: one frame over the bound made libzmq end the session for
        good (ZMQ_MAXMSGSIZE is a protocol error: no reconnect). The link
        comes back, the shard's view is reset, counted and logged."""
        self.start()
        self.send([block_stored(20, 0, 2)])
        self.assertBlocks(20, 2)
        self.pub.send(b"\x00" * ((64 << 20) + 1), keep=False)  # past any bound
        h.poll(lambda: self.metric("cacheroute_kv_resets_total") == 1, 20,
               what="the view reset")
        self.assertEqual(self.route(20, 2)[1], 0)
        self.assertLinkBack(21)
        self.assertEqual(self.metric("cacheroute_kv_reconnects_total"), 1)
        ev = self.sc.wait_for(lambda e: "link" in e.get("reason", ""), 5)
        self.assertEqual(ev["shard"], KV_SHARD)
        self.sc.assert_clean_exit(self)

    def test_a_large_frame_costs_no_decoding_memory(self):
        """R3-4: the red team's 51 MB batch (3 events of 2^24 one-byte
        tokens, 65,536 hashes) took the sidecar from 25 MB to 1,418 MB;
        past the frame bound (--kv-events-max-frame-bytes, 4 MiB by
        default) it is never decoded."""
        self.start()
        hashes = b"\xdd" + struct.pack(">I", 65536) + b"\x01" * 65536
        tokens = b"\xdd" + struct.pack(">I", 1 << 24) + b"\x01" * (1 << 24)
        event = (b"\x98" + msgpack.packb("BlockStored") + hashes + b"\xc0" + tokens +
                 msgpack.packb(256) + b"\xc0" * 3)
        payload = b"\x93" + msgpack.packb(1.0) + b"\x93" + event * 3 + b"\xc0"
        self.assertGreater(len(payload), 50 * 10**6)
        before = self.vm_hwm()
        self.pub.send(payload, keep=False)
        h.poll(lambda: self.metric("cacheroute_kv_resets_total") >= 1 or
               self.metric("cacheroute_kv_event_batches_total") > self.delivered, 60,
               what="the frame dealt with")
        self.assertLinkBack(22)
        self.assertLess(self.vm_hwm() - before, 64 << 20)

    def test_a_silent_replay_delays_no_other_shard(self):
        """R3-9: a gap whose replay endpoint never answers stalled every
        shard for CR_KV_REPLAY_WAIT_S (2 s). Another shard's batch is
        applied while that replay still waits."""
        silent = Publisher(shard=6, silent=True)
        self.addCleanup(silent.close)
        self.start(others=[silent])
        silent.send(batch([block_stored(30, 0, 2)]))
        silent.send(batch([block_stored(31, 0, 2)]), deliver=False)
        silent.send(batch([block_stored(32, 0, 2)]))
        h.poll(lambda: self.metric("cacheroute_kv_gaps_total", 6) == 1, 10, what="the gap")
        self.send([block_stored(33, 0, 2)])
        self.assertEqual(self.metric("cacheroute_kv_resets_total", 6), 0,
                         "shard 6's replay was over before shard 5's batch")
        self.assertBlocks(33, 2)
        h.poll(lambda: self.metric("cacheroute_kv_resets_total", 6) == 1, 10,
               what="the silent replay given up")
        self.assertEqual(self.route(32, 2), (6, 2 * BT))  # applied after the reset
        self.sc.assert_clean_exit(self)


# ---- endpoints that carry their KV-event address (kv_events) ---------------


class KvEventsFollowTest(KvMetrics, h.SidecarTestCase):
    """The endpoints file names each engine's KV-event sockets: the sidecar
    subscribes while the endpoint is listed, each publisher's events landing
    in its endpoint's shard (slot), and unsubscribes when it leaves."""
    SHARED = False
    ADDRESS = {"a": "10.0.0.1:8000", "b": "10.0.0.2:8000"}

    def setUp(self):
        self.pubs = {"a": Publisher(shard=0), "b": Publisher(shard=1)}
        for p in self.pubs.values():
            self.addCleanup(p.close)
        self.dir = tempfile.mkdtemp(prefix="cr-kv-follow-")
        self.path = os.path.join(self.dir, "endpoints.json")
        self.write("a", "b")
        self.sc = self.start_sidecar("--endpoints-file", self.path, "--n-shards", str(SHARDS),
                                     "--block-tokens", str(BT), "--index-blocks", "4096",
                                     "--metrics-listen", "127.0.0.1:0", metrics=False)
        self.stub = self.sc.stub()

    def write(self, *ids):
        doc = {"endpoints": [{"id": i, "address": self.ADDRESS[i],
                              "kv_events": self.pubs[i].address()} for i in ids]}
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, self.path)  # as a ConfigMap update does

    def logged(self, msg, shard):
        return len(self.sc.find_events(lambda e: e.get("msg") == msg and
                                       e.get("shard") == shard))

    def publish(self, pub, prompt, n):
        """One batch of n blocks from pub, waited for until applied."""
        applied = self.metric("cacheroute_kv_events_applied_total", pub.shard)
        pub.send(batch([block_stored(prompt, 0, n)]))
        h.poll(lambda: self.metric("cacheroute_kv_events_applied_total", pub.shard) > applied,
               10, what="prompt %d applied on shard %d" % (prompt, pub.shard))

    def route(self, prompt, n_blocks):
        item = P.cr.RouteItem(block_hashes=keys_of(tokens_of(prompt, n_blocks)),
                              prompt_tokens=n_blocks * BT)
        d = self.stub.Route(P.cr.RouteRequest(requests=[item]), timeout=h.RPC_TIMEOUT).routes[0]
        return d.shard, d.cached_tokens

    def test_subscribed_while_listed(self):
        a, b = self.pubs["a"], self.pubs["b"]
        self.wait_subscribed(a)
        self.wait_subscribed(b)
        self.publish(a, 41, 3)
        self.publish(b, 42, 3)
        self.assertEqual(self.route(41, 3), (0, 3 * BT))
        self.assertEqual(self.route(42, 3), (1, 3 * BT))
        rows = self.stub.ListEndpoints(P.cr.ListEndpointsRequest(), timeout=h.RPC_TIMEOUT)
        self.assertEqual([(e.id, e.kv_events) for e in rows.endpoints],
                         [("a", a.address()), ("b", b.address())])
        # b leaves: its link closes; what it publishes meanwhile is not applied.
        self.write("a")
        h.poll(lambda: self.logged("kv events unsubscribed", 1) == 1, 10,
               what="b unsubscribed")
        self.assertIsNone(self.metric("cacheroute_kv_event_batches_total", 1, missing=True))
        for _ in range(5):
            b.send(batch([block_stored(43, 0, 2)]))
            time.sleep(0.05)
        self.publish(a, 44, 2)  # a's link is untouched
        self.assertEqual(self.route(44, 2), (0, 2 * BT))
        # b back (its own slot): subscribed again, from a fresh count.
        self.write("a", "b")
        h.poll(lambda: self.logged("kv events subscribed", 1) == 2, 10,
               what="b subscribed again")
        self.wait_subscribed(b)
        self.assertEqual(self.metric("cacheroute_kv_events_applied_total", 1), 0)
        self.assertEqual(self.route(43, 2)[1], 0)  # sent while b was out: never applied
        self.publish(b, 45, 2)
        self.assertEqual(self.route(45, 2), (1, 2 * BT))
        # SetEndpoints carries kv_events too: b listed without one is unsubscribed.
        req = P.cr.SetEndpointsRequest(endpoints=[
            P.cr.Endpoint(id="a", address=self.ADDRESS["a"], kv_events=a.address()),
            P.cr.Endpoint(id="b", address=self.ADDRESS["b"])])
        r = self.stub.SetEndpoints(req, timeout=h.RPC_TIMEOUT)
        self.assertEqual([e.kv_events for e in r.endpoints], [a.address(), ""])
        h.poll(lambda: self.logged("kv events unsubscribed", 1) == 2, 10,
               what="b unsubscribed by SetEndpoints")
        self.assertEqual(self.logged("kv events unsubscribed", 0), 0)
        self.sc.assert_clean_exit(self)


class KvEventsRanksAndTopicTest(KvMetrics, h.SidecarTestCase):
    """--kv-events-dp-size 2: an endpoint's rank 1 publishes on its
    kv_events port + 1 (vLLM's data-parallel offset), into the same shard;
    --kv-events-topic kv@ keeps only publishers whose topic starts so."""
    SHARED = False

    def ranks(self):
        """Rank 0 and rank 1 publishers on two consecutive free ports."""
        for _ in range(20):
            r0 = Publisher(shard=0, topic=b"kv@a@model")
            try:
                r1 = Publisher(shard=0, port=r0.port + 1, topic=b"kv@a@model")
                return r0, r1
            except zmq.ZMQError:
                r0.close()
        self.fail("no two consecutive free ports")

    def test_ranks_feed_one_shard_and_the_topic_filters(self):
        r0, r1 = self.ranks()
        other = Publisher(shard=1, topic=b"other")
        for p in (r0, r1, other):
            self.addCleanup(p.close)
        path = os.path.join(tempfile.mkdtemp(prefix="cr-kv-ranks-"), "endpoints.json")
        with open(path, "w") as f:
            json.dump({"endpoints": [
                {"id": "a", "address": "10.0.0.1:8000", "kv_events": r0.address(replay=False)},
                {"id": "b", "address": "10.0.0.2:8000",
                 "kv_events": other.address(replay=False)}]}, f)
        self.sc = self.start_sidecar("--endpoints-file", path, "--n-shards", str(SHARDS),
                                     "--block-tokens", str(BT), "--index-blocks", "4096",
                                     "--kv-events-dp-size", "2", "--kv-events-topic", "kv@",
                                     "--metrics-listen", "127.0.0.1:0", metrics=False)
        self.stub = self.sc.stub()
        h.poll(lambda: len(self.sc.find_events(
            lambda e: e.get("msg") == "kv events subscribed")) == 4, 10,
            what="two ranks of two endpoints subscribed")
        ranks = sorted((e["shard"], e["rank"], e["endpoint"]) for e in self.sc.find_events(
            lambda e: e.get("msg") == "kv events subscribed"))
        self.assertEqual(ranks, [(0, 0, r0.address(False)), (0, 1, r1.address(False)),
                                 (1, 0, other.address(False)),
                                 (1, 1, "tcp://127.0.0.1:%d" % (other.port + 1))])
        for prompt, pub in ((61, r1), (62, r0)):
            applied = self.metric("cacheroute_kv_events_applied_total", 0, missing=True) or 0
            def landed():  # sent again until the link has joined: the same blocks again
                pub.send(batch([block_stored(prompt, 0, 2)]))
                n = self.metric("cacheroute_kv_events_applied_total", 0, missing=True)
                return n is not None and n > applied
            h.poll(landed, 10, interval=0.1, what="prompt %d applied" % prompt)
        # b's publisher's topic is not kv@...: nothing of it is ever received.
        for _ in range(10):
            other.send(batch([block_stored(63, 0, 2)]))
            time.sleep(0.05)
        self.assertEqual(self.metric("cacheroute_kv_event_batches_total", 1), 0)
        stub = self.stub
        for prompt, want in ((61, (0, 2 * BT)), (62, (0, 2 * BT))):
            item = P.cr.RouteItem(block_hashes=keys_of(tokens_of(prompt, 2)),
                                  prompt_tokens=2 * BT)
            d = stub.Route(P.cr.RouteRequest(requests=[item]), timeout=h.RPC_TIMEOUT).routes[0]
            self.assertEqual((d.shard, d.cached_tokens), want)
        self.sc.assert_clean_exit(self)


if __name__ == "__main__":
    h.main()
