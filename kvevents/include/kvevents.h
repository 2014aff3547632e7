/* cacheroute kvevents: what the serving engines say they cache. vLLM (and
 * SGLang, in the same format) publish KV events on a ZeroMQ PUB socket,
 * each message [topic, seq, payload]: seq an 8-byte big-endian counter per
 * publisher, payload msgpack of an EventBatch. This component decodes
 * those payloads (decode.c) and runs the subscriber (subscriber.c): one
 * SUB connection per shard's engine, on a thread of its own, its events
 * applied to the core's prefix index (cr_core_kv_events), gaps replayed
 * from the engine's ROUTER socket.
 *
 * The format, from vLLM's kv_events.py (both encodings are accepted):
 *   batch   [ts, events, data_parallel_rank]  or  {"ts", "events",
 *           "data_parallel_rank"}; ts a number, the rank an int or nil
 *   event   ["BlockStored", block_hashes, parent_block_hash, token_ids,
 *            block_size, lora_id, medium, lora_name, ...]
 *           ["BlockRemoved", block_hashes, medium, ...]
 *           ["AllBlocksCleared"]
 *           or the same as maps with a "type" tag; fields past these
 *           (group_idx, kv_cache_spec_*) are ignored; of extra_keys only
 *           the cache salt is read (below)
 *   hashes  ints (int64 or uint64), or bytes (taken as their XXH3-64)
 * Blocks in the GPU tier (medium "GPU", or none given) and in host memory
 * (medium "CPU": KV offloading) are indexed, each in its tier (route.h,
 * "Tiers"); other tiers' events (a disk, a remote store), and events of a
 * type this release does not know (a later engine's), are counted and
 * skipped. The namespace is the LoRA adapter (lora_name, else lora_id in
 * decimal) and the cache salt (in the first block's extra_keys: its str
 * after the adapter's), alone or joined as "ADAPTER\x1fSALT"; blocks after
 * a parent inherit the parent's (route.h).
 */
#ifndef CR_KVEVENTS_H
#define CR_KVEVENTS_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "core.h"
#include "endpoints.h"

/* ---- decoding ------------------------------------------------------------- */

/* What a payload may hold at most: past any of these it is refused whole. */
#define CR_KV_MAX_EVENTS 10000      /* events in one batch */
#define CR_KV_MAX_HASHES 65536      /* hashes in one event */
#define CR_KV_MAX_TOKENS (1u << 24) /* tokens in one event */
#define CR_KV_DECODE_BYTES_PER_BYTE 33 /* peak bytes decoding takes a payload byte (32.04
                                        * measured: one-byte hashes of BlockRemoved) */

/* A decoded batch: events pointing into arrays it owns. */
typedef struct cr_kv_batch {
    cr_kv_event *events; /* shard left 0: the caller's to set */
    size_t n;
    uint64_t skipped;    /* events of another tier or an unknown type: not indexed */
    double ts;
    /* owned storage the events point into */
    uint64_t *hashes;
    uint32_t *tokens;
    char *names;
} cr_kv_batch;

/* Decodes one payload (len bytes at data) into *out. CR_EINVAL with err
 * saying why ("event 3: block_size must be an int, got str") for bytes
 * that are not msgpack, trailing bytes, a shape that is neither encoding,
 * a field of the wrong type, or anything past the bounds above; a walk of
 * the raw bytes first refuses nesting deeper than 31, containers that
 * claim more items than bytes are left, and events, hashes or tokens past
 * the bounds above, so msgpack-c never allocates for what the payload does
 * not hold or what would be refused. CR_ENOMEM. Memory, at its peak: at
 * most CR_KV_DECODE_BYTES_PER_BYTE a payload byte (msgpack-c's 24 B
 * objects, one an item, and out's arrays; bench/kv_frame_memory), freed
 * before returning but for out's arrays (cr_kv_batch_free). Thread-safe. */
cr_status cr_kv_decode(const uint8_t *data, size_t len, cr_kv_batch *out, cr_error *err);
void cr_kv_batch_free(cr_kv_batch *b);

/* ---- the subscriber (subscriber.c) ------------------------------------------
 *
 * One thread for every link (never on an RPC's path), one SUB socket per
 * link (a --kv-events shard's engine, or a followed endpoint's rank:
 * below), subscribed to the topic prefix (cr_kv_options; "" every topic),
 * polled with a short timeout so that a stop is prompt. Per link it keeps
 * the last seq seen (what follows says shard for a link: a reset empties
 * the link's whole shard):
 *   seq > last + 1  a gap: with a replay endpoint, a DEALER asks the
 *                   engine's ROUTER for the batches from last + 1 and
 *                   applies those in (last, seq) in order, then the
 *                   message that found the gap; meanwhile the shard's
 *                   later messages wait in its socket and every other
 *                   shard is served as before. A gap the replay cannot
 *                   cover (no replay endpoint, no whole answer within
 *                   CR_KV_REPLAY_WAIT_S, its first batch past last + 1, a
 *                   hole in it) resets the shard's view
 *   seq <= last     the publisher restarted: the view is reset
 * A frame past the frame bound (cr_kv_start's max_frame, ZMQ_MAXMSGSIZE)
 * is never read: libzmq ends the link, which the subscriber re-opens
 * (within about a second), and the view is reset; any other drop of the
 * link (the engine gone) does the same, as what was sent meanwhile is
 * lost. A reset is a CR_KV_CLEARED event for the shard (the index cannot
 * say which of its blocks the engine still holds), counted and reported
 * (a dropped link's at most once a CR_KV_DROP_LOG_S). Each batch is
 * decoded (cr_kv_decode), given its shard and applied (cr_core_kv_events);
 * a message that is not [topic, 8-byte seq, payload], a payload that does
 * not decode and a batch the core refuses are dropped whole, counted, and
 * reported at most once a CR_KV_DROP_LOG_S per shard: they never touch the
 * index.
 *
 * Memory a publisher can make it hold: one frame decoded at a time, at
 * most (1 + CR_KV_DECODE_BYTES_PER_BYTE) x max_frame at the peak, plus up
 * to CR_KV_RCV_HWM frames queued a link (libzmq counts messages, not
 * bytes) and one held a link while its replay runs; at most
 * CR_KV_MAX_LINKS links. */

#define CR_KV_MAX_ENGINES 64            /* shards configured with --kv-events */
#define CR_KV_MAX_LINKS 256             /* SUB sockets in all: --kv-events and every followed
                                         * endpoint's ranks (below) */
#define CR_KV_MAX_DP 64                 /* --kv-events-dp-size's most */
#define CR_KV_TOPIC_MAX 256             /* bytes of --kv-events-topic, NUL included */
#define CR_KV_ENDPOINT_MAX 256          /* bytes of an endpoint, NUL included */
#define CR_KV_MAX_FRAME_BYTES (4 << 20) /* the frame bound without a memory limit */
#define CR_KV_MIN_FRAME_BYTES (64 << 10) /* ... and its least under one */
#define CR_KV_FRAME_SHARE 8             /* a frame's decoding: at most 1/8 of the memory limit */
#define CR_KV_RCV_HWM 10000             /* ZMQ_RCVHWM: messages queued per socket */
#define CR_KV_POLL_MS 100               /* the thread notices a stop within this */
#define CR_KV_REPLAY_WAIT_S 2.0         /* a replay's whole answer, at most */
#define CR_KV_DROP_LOG_S 60.0           /* drops reported at most this often a shard */

/* The frame bound (--kv-events-max-frame-bytes' default) for a memory
 * limit in bytes (0: none): the largest frame whose decoding, frame
 * included, takes at most 1/CR_KV_FRAME_SHARE of the limit, within
 * [CR_KV_MIN_FRAME_BYTES, CR_KV_MAX_FRAME_BYTES]; CR_KV_MAX_FRAME_BYTES
 * without a limit (a 1 GiB limit derives 3.76 MiB). Pure. */
uint64_t cr_kv_frame_bound(uint64_t memory_limit);

/* One --kv-events value: SHARD=ENDPOINT[,replay=ENDPOINT]; or one rank
 * of a followed endpoint (below). */
typedef struct cr_kv_engine {
    uint32_t shard;
    uint32_t rank;                     /* its data-parallel rank; 0 for --kv-events */
    char endpoint[CR_KV_ENDPOINT_MAX]; /* the engine's PUB socket */
    char replay[CR_KV_ENDPOINT_MAX];   /* its ROUTER replay socket; "" = none */
} cr_kv_engine;

/* Parses an endpoint's KV-event address, ENDPOINT[,replay=ENDPOINT] (the
 * endpoints file's and SetEndpoints' kv_events), into *out's endpoint and
 * replay (shard and rank 0), by the rules of cr_kv_engine_parse. Pure. */
cr_status cr_kv_address_parse(const char *text, cr_kv_engine *out, cr_error *err);

/* Parses text as SHARD=ENDPOINT[,replay=ENDPOINT] into *out: SHARD a
 * decimal below CR_KV_MAX_ENGINES, each endpoint tcp://... or ipc://...
 * and shorter than CR_KV_ENDPOINT_MAX. CR_EINVAL with err saying what is
 * wrong ("the shard must be a decimal in 0..63") without quoting text, so
 * that the caller names its flag and value. Pure. */
cr_status cr_kv_engine_parse(const char *text, cr_kv_engine *out, cr_error *err);

/* ---- following the endpoint set (follow.c) -----------------------------------
 *
 * With follow set (cr_kv_options), the subscriber also keeps one link per
 * data-parallel rank of every endpoint of the core's set that has a
 * kv_events address and is not GONE (draining and down ones too: their
 * engines still cache), its events applied to the endpoint's slot, which
 * is its shard. cr_kv_endpoints_changed (the core's members hook) only
 * raises a flag; the subscriber's thread, within CR_KV_POLL_MS, reads the
 * set (cr_core_endpoints) and makes the links match: a link no longer
 * wanted (the endpoint left, or its address changed) is closed and its
 * shard's view reset, as the events that kept it true stop; a new one is
 * opened with a fresh seq chain. Rank r of an address is vLLM's: tcp://
 * with its port + r, ipc:// with "_dp<r>" appended, its replay likewise.
 * A shard that --kv-events names is never followed: the static link wins.
 * Past CR_KV_MAX_LINKS links in all, the rest are not opened (reported
 * once a change, counted in refused) until links free up. */

/* Endpoint base as data-parallel rank's, into out (CR_KV_ENDPOINT_MAX
 * bytes): rank 0 as is; tcp://HOST:PORT with PORT + rank; ipc://PATH as
 * PATH_dpRANK. CR_EINVAL "... has no port to offset" (tcp:// without a
 * decimal port), "... port PORT + RANK is past 65535", or too long. Pure. */
cr_status cr_kv_rank_endpoint(const char *base, uint32_t rank, char *out, cr_error *err);

/* The links set e wants: for each slot not GONE with a kv_events address
 * whose shard is not in taken (a bit a shard below CR_KV_MAX_ENGINES: the
 * --kv-events shards), dp_size links (ranks 0..dp_size-1), in slot order,
 * into out (room for max). Returns how many were written; *refused (may
 * be NULL) gets how many were wanted past max, *bad how many slots' kv_events
 * do not parse or offset (skipped; the first's message in err when not
 * NULL). e NULL: none. Pure. */
size_t cr_kv_wanted(const cr_endpoints *e, uint32_t dp_size, uint64_t taken, cr_kv_engine *out,
                    size_t max, size_t *refused, size_t *bad, cr_error *err);

/* What the subscriber tells its owner, for logs. */
typedef enum cr_kv_report_kind {
    CR_KV_REPORT_DROPPED,  /* count messages dropped since the last report; detail: the
                            * latest's reason */
    CR_KV_REPORT_REPLAYED, /* a gap filled: count batches, from first to last seq */
    CR_KV_REPORT_RESET,    /* the shard's view reset; detail: why */
    CR_KV_REPORT_SUBSCRIBED,   /* a followed endpoint's link opened; detail: its endpoint,
                                * first: its rank */
    CR_KV_REPORT_UNSUBSCRIBED, /* ... closed: the endpoint left or its address changed */
    CR_KV_REPORT_REFUSED       /* a change wants links it cannot open; count of them,
                                * detail: why (past CR_KV_MAX_LINKS, a bad address) */
} cr_kv_report_kind;

typedef struct cr_kv_report {
    cr_kv_report_kind kind;
    uint32_t shard;
    const char *detail; /* valid for the call; "" when none */
    uint64_t count;
    uint64_t first, last; /* REPLAYED: the seqs applied */
} cr_kv_report;

/* Called on the subscriber's thread; must not block (log and return). */
typedef struct cr_kv_hooks {
    void (*report)(void *ctx, const cr_kv_report *r);
    void *ctx;
} cr_kv_hooks;

typedef struct cr_kv_subscriber cr_kv_subscriber;

/* How the subscriber runs. */
typedef struct cr_kv_options {
    uint64_t max_frame; /* a frame past it is never read; 0: CR_KV_MAX_FRAME_BYTES */
    const char *topic;  /* the SUB sockets' topic prefix; NULL or "": every topic */
    uint32_t dp_size;   /* ranks a followed endpoint publishes on; 0 = 1; at most CR_KV_MAX_DP */
    int follow;         /* 1: follow the core's endpoint set (above) */
} cr_kv_options;

/* Connects a SUB socket (and nothing else yet: replays connect when a gap
 * needs one) to each of the n sources, which must name distinct shards,
 * and starts the thread applying their events to core, following the
 * core's endpoint set when opt->follow (its first links opened on the
 * thread, from the set current then). n at most CR_KV_MAX_ENGINES; n 0
 * without follow gives NULL with no error (nothing to run). NULL with err
 * ("--kv-events 3=tcp://x:1: cannot connect: why") when a socket cannot
 * be made or connected, or out of memory. sources and opt's strings are
 * copied; core and hooks->ctx must outlive the subscriber; hooks may be
 * NULL. */
cr_kv_subscriber *cr_kv_start(const cr_kv_engine *sources, size_t n, const cr_kv_options *opt,
                              cr_core *core, const cr_kv_hooks *hooks, cr_error *err);

/* The core's endpoint set changed: the subscriber's thread re-reads it
 * within CR_KV_POLL_MS. Any thread; never blocks (an atomic flag), so the
 * core's members hook may call it. NULL ignored. */
void cr_kv_endpoints_changed(cr_kv_subscriber *s);

/* Stops the thread (within about CR_KV_POLL_MS, replays in progress
 * abandoned), closes the sockets without lingering, frees. NULL ignored.
 * Call before freeing the core. */
void cr_kv_stop(cr_kv_subscriber *s);

/* One shard's figures since start. */
typedef struct cr_kv_stats {
    uint32_t shard;
    uint64_t batches;   /* messages received live, counted once handled (applied or dropped) */
    uint64_t applied;   /* events applied (live and replayed) */
    uint64_t dropped;   /* messages dropped: malformed, or refused by the core */
    uint64_t replayed;  /* batches applied from replays */
    uint64_t gaps;      /* seq gaps seen (replayed or not) */
    uint64_t resets;    /* views reset: unreplayed gaps, publisher restarts, dropped links */
    uint64_t reconnects; /* links dropped and re-opened (a frame too large, the engine gone) */
    double last_event_s; /* cr_mono_s of the last batch applied; -1 before the first */
} cr_kv_stats;

/* Copies each subscribed shard's figures into out (room for max), a
 * shard's links (its ranks) added up, last_event_s the latest; returns
 * how many shards there are (0 for NULL). A followed shard's figures go
 * with its links: they start from 0 when it is subscribed again.
 * Thread-safe: any thread, while the subscriber runs. */
size_t cr_kv_stats_read(cr_kv_subscriber *s, cr_kv_stats *out, size_t max);

#endif
