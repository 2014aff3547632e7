"""What engines say they cache, against the real sidecar: ReportKvEvents
(admin) feeds the prefix index that Route reads. Block keys are computed
here independently (python3-xxhash) as route.h documents them: XXH3-64 of
a block's token ids as little-endian uint32, seeded with the key of the
block before it (0 for a prompt's first)."""
import os
import struct
import sys

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import grpc  # noqa: E402
import xxhash  # noqa: E402

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


def stored(shard, prompt, first, n, parent=None, lora=None):
    toks = tokens_of(prompt, first + n)[first * BT:]
    m = P.cr.KvBlockStored(block_hashes=engine_hashes(prompt, n, first), token_ids=toks,
                           block_size=BT)
    if parent is not None:
        m.parent_block_hash = parent
    if lora is not None:
        m.lora_name = lora
    return P.cr.KvEvent(shard=shard, block_stored=m)


def removed(shard, hashes):
    return P.cr.KvEvent(shard=shard, block_removed=P.cr.KvBlockRemoved(block_hashes=hashes))


def cleared(shard):
    return P.cr.KvEvent(shard=shard, all_blocks_cleared=P.cr.KvAllBlocksCleared())


class ReportKvEventsTest(h.SidecarTestCase):
    def setUp(self):
        self.sc = self.start_sidecar("--n-shards", str(SHARDS), "--block-tokens", str(BT),
                                     "--index-blocks", "4096")
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

    def test_too_many_events_are_refused_before_decoding(self):
        many = P.cr.ReportKvEventsRequest(events=[cleared(0)] * 10001)
        self.assertRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED, self.stub.ReportKvEvents,
                            many, timeout=h.RPC_TIMEOUT, details_re="events")
        r = self.stub.ReportKvEvents(P.cr.ReportKvEventsRequest(events=[cleared(0)] * 10000),
                                     timeout=h.RPC_TIMEOUT)
        self.assertEqual(r.stored, 0)


if __name__ == "__main__":
    h.main()
