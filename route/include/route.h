/* cacheroute route: where each arrival goes. The route rule over an
 * installed table (--route-by) and the outstanding work per shard it
 * weighs; bounded and live walk the consistent-hash ring (ring.h). The
 * core holds one router and calls it on every RecordArrival and
 * ReportOutcome.
 *
 * Weights: each arrival may weigh its work (its prompt tokens, say, or its
 * predicted prefill ms) instead of 1; outstanding work is in that unit.
 *
 * The route rule, by --route-by:
 *   plan     an owner admitted in the table goes to its preferred shard;
 *            any other owner to cr_route_fallback_shard over the table's
 *            shards. No state.
 *   bounded  affinity with a load bound. Every route answered adds its
 *            weight as outstanding work on its shard; the work goes when
 *            a ReportOutcome gives that owner and shard (its oldest there),
 *            when --inflight-ttl seconds have passed, or at the cap below.
 *            A shard takes a route while its outstanding work is at most
 *            c x the mean over the table's shards (c = --load-bound; the
 *            mean counting this arrival's weight, so with weights of 1 a
 *            shard takes up to ceil(c (m + 1) / R) of m outstanding, as
 *            consistent hashing with bounded loads does). An admitted
 *            session tries its preferred shard, then its other shards (by
 *            id, cyclically after the preferred), then the shards of its
 *            consistent-hash ring from its point on; an unadmitted session
 *            walks its ring alone, so its cold tail is a stable shard per
 *            owner rather than owner mod R. Some shard always takes it (the
 *            least loaded is at most the mean); a walk looks at each shard
 *            once, at most R of them.
 *   live     the shard with the least outstanding work of all, tracked as
 *            under bounded; a tie with the session's first choice (its
 *            preferred shard, or its ring's first) keeps it, other ties
 *            go to the lowest id. O(R) a route; kept for comparison.
 *   ttft     the least predicted queue wait plus --miss-weight times the
 *            predicted prefill, from the prefix index (Route's block
 *            hashes) or the owner's session (RecordArrival, weights read
 *            as prompt tokens): "per-request routes" below.
 * Deterministic: the same calls in the same order give the same routes.
 *
 * Memory: outstanding work is a FIFO of at most --inflight-max (default
 * 100,000) items of 56 B (expiry, owner, request id, caller, shard,
 * weight, predicted hit), allocated up front, each linked into its shard's
 * chain; 28 B per shard; 16 B per identified caller; and the ring (1.5 KB
 * per shard at most), rebuilt when the shard count changes: 5.6 MB at the
 * defaults on 8 shards; under ttft
 * 16 B a session (as many as --inflight-max, rounded up to a power of
 * two), 8 B an item for the request-id index once an id comes, and the
 * prefix index (below). At the cap the oldest item is retired first, its
 * work counted as done (evicted). A release by owner looks for the
 * owner's oldest item from its shard's oldest, at most
 * CR_ROUTE_RELEASE_DEPTH items deep (a shard serves about in arrival
 * order): deeper work waits for the ttl; a release by request id finds its
 * item at once. plan, bounded and live hash nothing on a route's path; one
 * short lock per batch of routes.
 */
#ifndef CR_ROUTE_H
#define CR_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "cost.h" /* cr_prefill_cost, cr_load_cost */
#include "options.h"
#include "planner.h"
#include "request.h"

/* --route-by, in its choices' order. */
typedef enum cr_route_by {
    CR_ROUTE_PLAN,
    CR_ROUTE_BOUNDED,
    CR_ROUTE_LIVE,
    CR_ROUTE_TTFT
} cr_route_by;

#define CR_ROUTE_MAX_INFLIGHT 10000000 /* --inflight-max's upper bound */
#define CR_ROUTE_RELEASE_DEPTH 256     /* items a release looks through */
#define CR_ROUTE_INDEX_MAX_SHARDS 64   /* shards the prefix index tells apart */
#define CR_ROUTE_MAX_INDEX_BLOCKS (1u << 25) /* --index-blocks' upper bound */
#define CR_ROUTE_MAX_HASHES 65536      /* --max-route-hashes' upper bound */
/* The ttft rule's miss weight is halfway down to 1 for a prefix this many
 * recent requests share (route.h, "per-request routes"). */
#define CR_ROUTE_SHARED_HALF 32.0

typedef struct cr_route_config {
    cr_route_by by;        /* --route-by */
    double load_bound;     /* --load-bound: c */
    double inflight_ttl_s; /* --inflight-ttl */
    uint64_t inflight_max; /* --inflight-max */
    uint32_t block_tokens; /* --block-tokens: tokens per block hash */
    uint32_t index_blocks; /* --index-blocks: blocks indexed per shard */
    uint32_t max_hashes;   /* --max-route-hashes: per Route request */
    double miss_weight;    /* --miss-weight: the ttft rule's g */
    int planned;           /* --route-planned: admitted owners among their shards */
    /* --inflight-per-caller: outstanding routes one identified caller may
     * hold (0: a quarter of inflight_max). */
    uint64_t inflight_per_caller;
    /* The most predicted prefill, ms, one route adds to its shard's
     * outstanding work under ttft (0: no bound); not a row of its own: the
     * core sets it to --max-reservation-ms. */
    double max_route_work_ms;
    /* --scrape-interval: how often the engines' loads come (the scraper
     * reads it too); a load older than twice this is ignored ("The
     * engines' own load"). 0: no scrapes (a load given anyway is judged
     * by 0.1 s). */
    double scrape_interval_s;
} cr_route_config;

/* The rows of cr_route_config (--route-by, --load-bound, --inflight-ttl,
 * --inflight-max, --block-tokens, --index-blocks, --max-route-hashes,
 * --miss-weight, --route-planned, --inflight-per-caller, --scrape-interval);
 * top-level keys of the effective configuration. */
extern const cr_option_table cr_route_options;

/* Where plan sends an owner without warm slots: cr_mix64(owner) % n_shards.
 * Pure. */
uint32_t cr_route_fallback_shard(int64_t owner, uint32_t n_shards);

/* ---- the router --------------------------------------------------------- */

typedef struct cr_router cr_router;

/* A router for cfg (checked by the caller against cr_route_options): under
 * bounded and live its FIFO of cfg->inflight_max items is allocated here.
 * NULL when out of memory. */
cr_router *cr_router_new(const cr_route_config *cfg);
void cr_router_free(cr_router *r); /* NULL is ignored */

/* The model the ttft rule predicts with (cost.h): the prefill of L prompt
 * tokens of which s are cached, plus, when some of the cached ones are on
 * the CPU tier (KV events, below), their load into the GPU, their KV bytes
 * over the host-to-GPU bandwidth. The core sets its calibrated model of
 * GPU 0 (the fleet is taken to be uniform), converted once each time that
 * model changes. */
typedef struct cr_prefill_model {
    cr_prefill_cost prefill;
    cr_load_cost load;         /* a CPU-tier load */
    double kv_bytes_per_token; /* what one cached token loads */
} cr_prefill_model;

/* Makes m the model routes predict with from now on. Until the first
 * call: 1 ms a prompt token, loads free (tokens stand in for ms).
 * Thread-safe. */
void cr_router_set_model(cr_router *r, const cr_prefill_model *m);

/* The route rule, by --route-by, for n arrivals at now (seconds, any
 * monotonic origin) under table t (NULL: none installed) over n_shards
 * shards (t's, or the configured count before the first table): sets
 * routes[i].admitted and shard for routes[i].owner (its other fields
 * kept), weights[i] (NULL = 1 each) being added as outstanding work under
 * bounded and live, all in one lock. Under ttft each arrival is placed
 * straight as cr_router_place places a request of that owner without
 * hashes, its weight read as its prompt tokens, with the router's model
 * (cr_router_set_model), and its predictions answered too. Out of
 * memory for the ring or the counters of a new shard count: the plan
 * rule, nothing added. caller as in cr_router_place. Thread-safe. */
void cr_router_route(cr_router *r, const cr_table *t, uint32_t n_shards, const double *weights,
                     cr_route_answer *routes, size_t n, double now, uint64_t caller);


/* owner's home under t before any load is weighed: its preferred shard
 * when t admits it, else cr_router_home over n_shards; *admitted = whether
 * t admits it. Under plan, the whole route rule. Thread-safe. */
uint32_t cr_router_shard(cr_router *r, const cr_table *t, uint32_t n_shards, int64_t owner,
                         int *admitted);

/* The home of an owner without warm slots, where the route rule sends it
 * while no shard is over the bound: cr_route_fallback_shard under plan, the
 * first shard of its ring over n_shards under bounded and live. A stable
 * replan admitting an owner should keep it here (its cache is here).
 * Thread-safe; under bounded and live one short lock (the ring for another
 * shard count than the routes' is built once and kept). */
uint32_t cr_router_home(cr_router *r, int64_t owner, uint32_t n_shards);

/* A ReportOutcome from caller for owner on shard at now: retires the
 * oldest outstanding work caller routed for owner there. 1 when there was
 * some; 0 too under plan. Thread-safe. */
int cr_router_release(cr_router *r, int64_t owner, uint32_t shard, double now, uint64_t caller);


/* The route rule's figures: under plan only by, placed (by request.h's
 * cr_route_reason) and the index's. */
typedef struct cr_route_stats {
    cr_route_by by;
    uint64_t outstanding; /* routes whose work is counted now */
    uint64_t queued;      /* FIFO places taken: outstanding, and released
                           * items not yet at its head */
    uint64_t capacity;    /* --inflight-max */
    double work;          /* outstanding work, in the weights' unit */
    /* Routes whose work went: by a release, by --inflight-ttl, at the cap. */
    uint64_t released, expired, evicted;
    /* Routes whose work was not kept: their caller at its quota, or the
     * oldest at the cap another caller's. */
    uint64_t refused;
    uint64_t diverted;    /* routes to another shard than the first choice */
    uint64_t bytes;       /* the FIFO, index, counters and ring allocated now */
    uint32_t n_shards;    /* shards with counters (the most routed over) */
    /* Routes placed one request at a time (Route; RecordArrival under
     * ttft), by reason; the prefix index's blocks held over all shards and
     * bytes allocated (in bytes too). */
    uint64_t placed[CR_ROUTE_N_WHY];
    uint64_t index_blocks, index_bytes;
    uint64_t index_cpu_blocks; /* of the CPU tier's index (KV events), in index_bytes too */
    /* Outcomes that reported cached tokens for an outstanding route with a
     * request id, and the sum of |reported - predicted| cached tokens over
     * them: [1] where the route's shard had sent KV events by then, [0]
     * where it had not (the index knows only what was routed there). */
    uint64_t hit_checked[2];
    double hit_error_tokens[2];
    /* Requests of an owner with a session (ttft) that went to another
     * shard than its last: [0] the last one could still take it (a spill,
     * a rebalance), [1] it had left service (cr_router_members). */
    uint64_t moved[2];
    /* The engines' own loads (below): taken, found stale by a route (over
     * two --scrape-interval old: ignored from then on), and engines whose
     * block size disagreed with --block-tokens (once per engine in its
     * shard). */
    uint64_t engine_loads, engine_stale, engine_block_mismatch;
} cr_route_stats;

/* The figures at now into *out and each shard's outstanding work into
 * work[0..max_shards-1] (0 past n_shards; work may be NULL with max_shards
 * 0). Thread-safe; one short lock, O(max_shards). */
void cr_router_stats(cr_router *r, double now, cr_route_stats *out, double *work,
                     uint32_t max_shards);

/* ---- per-request routes (Route) ---------------------------------------------
 *
 * The ttft rule places one request at a time from what each shard holds of
 * its prompt and how long it would wait there:
 *
 *   hit_s   = the tokens of the request's leading blocks that were sent to
 *             shard s and are still in its index (below), at most L
 *   wait_s  = shard s's predicted queue: the prefills routed there and not
 *             yet reported done, each its predicted ms, one after another
 *   g'      = 1 + (g - 1) H / (H + n)    g = --miss-weight, H =
 *             CR_ROUTE_SHARED_HALF, n = the requests that lately matched
 *             up to the deepest block any shard holds of this one
 *   cost_s  = wait_s + g' x prefill(L, hit_s)
 *
 * and takes the cheapest shard (ties: the request's home, the first shard
 * of its owner's ring or of its first hash's, then the lowest id). With
 * g' = 1 that is the request's predicted TTFT; g' > 1 also charges the work
 * a miss adds for every request queued behind it, so a session stays where
 * its prefix is until another shard's queue is shorter by g' times the
 * extra prefill. A prefix many requests share (a document, a system
 * prompt) is charged less for its misses: a copy on another shard is work
 * that many will reuse, so a hot one spreads over shards as its queue
 * grows, where a session's own prefix stays put (popular.c counts them).
 * Without hashes, an owner's session (the shard its last request went to
 * and that request's prompt tokens) stands for its prefix: a
 * conversation's prompt repeats its last one. --route-planned restricts an
 * admitted owner to its placement's shards.
 *
 * The prefix index: per shard, the block keys sent there (each block's
 * chained hash, mixed with its namespace), at most --index-blocks of them,
 * aged out CLOCK-wise (close to LRU), like the shard's KV cache. A route
 * adds every block of its request to its shard. At most
 * CR_ROUTE_INDEX_MAX_SHARDS shards are indexed; past them a shard is
 * weighed by its wait and sessions alone.
 *
 * The timeline: each route adds its predicted prefill to its shard's
 * queue as outstanding work; an outcome for its request id (or its owner
 * and shard) releases it, and the shard's queue restarts from the work
 * still outstanding there (so every prediction is corrected by what was
 * measured); --inflight-ttl and --inflight-max bound what is kept. */

/* A stable key of a text (XXH3 64), never 0; 0 for the empty text. For
 * namespaces and request ids. Pure. */
uint64_t cr_route_text_key(const char *s, size_t n);

/* The key of request id s (n bytes) routed by caller: its text key,
 * mixed with caller unless 0, so that one caller's ids never meet
 * another's. Never 0 unless n is. Pure. */
uint64_t cr_route_request_key(const char *s, size_t n, uint64_t caller);

/* Places n requests (request.h; checked by the caller: at most
 * --max-route-hashes hashes each) at now under table t over n_shards
 * shards with the router's model (cr_router_set_model), in order, each
 * seeing the ones before it: a request's prompt tokens are L (0: its
 * hashes x --block-tokens, at most CR_REQUEST_MAX_TOKENS), its namespace is
 * keyed by cr_route_text_key and its request id by cr_route_request_key
 * with its caller. Under --route-by ttft as above; under the other rules
 * each request goes where the rule sends its owner (without one, its first
 * hash's or request id's key stands in), weighing 1, with the same
 * predictions and reason "rule". Its work counts against its caller's
 * quota, and only that caller's outcomes release it. Sets out[i]'s shard,
 * admitted, predictions and reason (owner and rate kept). Out of memory
 * for the index: the request is placed as if nothing were cached.
 * Thread-safe; one lock per 64 requests. */
void cr_router_place(cr_router *r, const cr_table *t, uint32_t n_shards,
                     const cr_route_request *q, cr_route_answer *out, size_t n, double now);

/* q's answer as cr_router_place would give it at now, with nothing of q
 * remembered: no blocks in the index, no session, no outstanding work.
 * So a caller may weigh the answer first and place q only if it keeps it
 * (the door, core.h): placed then, in the same state, it goes where this
 * said. Thread-safe. */
void cr_router_predict(cr_router *r, const cr_table *t, uint32_t n_shards,
                       const cr_route_request *q, cr_route_answer *out, double now);

/* 1 when one of the first n_shards usable shards has no predicted queue
 * wait at now (nothing outstanding there, or all of it predicted done,
 * and no engine load besides): the cluster has room, whatever one
 * shard's queue. Thread-safe. */
int cr_router_any_idle(cr_router *r, uint32_t n_shards, double now);

/* An outcome for the request whose id has key request, at now: releases
 * its outstanding work (its shard's queue restarts then) and, when
 * has_cached, corrects the shard's hit predictions by what was measured.
 * *shard = where it had gone. 1 when the request was outstanding.
 * Thread-safe. */
int cr_router_release_request(cr_router *r, uint64_t request, double now, int has_cached,
                              uint32_t cached_tokens, uint32_t *shard);

/* The prefix index's figures: blocks held over all shards, bytes
 * allocated. Thread-safe. */
void cr_router_index_stats(cr_router *r, uint64_t *blocks, uint64_t *bytes);

/* Which shards may take requests, for n shards (an endpoint set's slots,
 * endpoints.h): usable[s] = 0 keeps every rule's new requests off shard s
 * (its sessions go where the rule sends them when they next arrive);
 * usable NULL: all may. speed[s] (NULL: 1 each) is shard s's capacity
 * weight: the ttft rule divides its predicted wait and prefill by it.
 * forget[s] = 1 (NULL: none) drops what the router keeps of shard s (its
 * prefix index, KV-event map, outstanding work and sessions there): its
 * engine went, or a new one took its slot. Returns the sessions whose last
 * shard is now unusable (before any forget: the sessions a change forces
 * to move). n at most CR_ENDPOINTS_MAX (endpoints.h); -1 when out of
 * memory (nothing changed). Thread-safe; O(sessions) when forgetting or
 * counting, once per change. */
int64_t cr_router_members(cr_router *r, uint32_t n, const uint8_t *usable, const double *speed,
                          const uint8_t *forget);

/* ---- what the engines hold (KV events) ----------------------------------------
 *
 * Engines that publish KV events (vLLM, SGLang) say which blocks they
 * stored and removed, each under the engine's own hash. The router keys a
 * block by the chained hash below, the one Route's callers compute, so a
 * stored block's key is computed from its tokens and its parent's key,
 * and each shard keeps a map from the engine's hashes to the router's keys
 * (for removals and parents; each with its namespace, which the blocks
 * after it inherit): 2 x --index-blocks places of 24 B per shard that has
 * sent events, made at its first; a place taken by
 * another block loses the older mapping (its removal then waits for the
 * index's own ageing). Stored blocks enter the prefix index as a route's
 * do; removed ones leave it; a cleared shard's index is emptied.
 *
 * Tiers: blocks an engine holds in host memory (vLLM's KV offloading,
 * medium "CPU") go to a second index of the same shape and bound (made at
 * the first such block), and leave it when removed there. A request's
 * predicted hit on a shard is the blocks it holds on the GPU from the
 * first, then the blocks right after them it holds on the CPU: both are
 * cached (not prefilled), and the CPU ones cost their load, --miss-weight
 * times, like the prefill they replace (cr_prefill_model). So a GPU block
 * beats a CPU block, and a CPU block beats none while its load is cheaper
 * than its prefill. A removal takes the block's mapping away only once no
 * tier holds it; a clear empties both tiers. */

/* The router's key of a block of n tokens after the block keyed parent (0
 * for a prompt's first block): XXH3-64 of the token ids as little-endian
 * uint32, seeded with parent. What a Route caller computes for
 * block_hashes so that engines' events match them. Pure. */
uint64_t cr_route_block_hash(uint64_t parent, const uint32_t *tokens, size_t n);

/* One event of one engine (shard), as vLLM's names them. */
typedef enum cr_kv_kind { CR_KV_STORED = 1, CR_KV_REMOVED, CR_KV_CLEARED } cr_kv_kind;

/* The tier an engine holds blocks in (vLLM's medium): GPU memory, or host
 * memory it loads them back from (KV offloading). */
typedef enum cr_kv_tier { CR_KV_GPU = 0, CR_KV_CPU = 1 } cr_kv_tier;

typedef struct cr_kv_event {
    cr_kv_kind kind;
    uint32_t shard;
    /* STORED and REMOVED: the engine's hash of each block */
    const uint64_t *engine;
    size_t n;
    /* STORED: the engine's hash of the block before the first (has_parent
     * 0: they start a prompt); n x block_size tokens; the namespace (LoRA
     * adapter, cache salt; space_len 0 = none), as Route's namespace */
    int has_parent;
    uint64_t parent;
    const uint32_t *tokens;
    size_t n_tokens;
    uint32_t block_size;
    const char *space;
    size_t space_len;
    cr_kv_tier tier; /* STORED and REMOVED: where (0, GPU, when not said) */
} cr_kv_event;

/* What the events did, for counters. */
typedef struct cr_kv_applied {
    uint64_t stored, removed;  /* blocks the index took in and let go */
    uint64_t orphans;          /* stored blocks whose parent the map did not know:
                                * their keys cannot be chained, so they are skipped */
    uint64_t unknown;          /* removals the map did not know */
} cr_kv_applied;

/* Applies n events (checked by the caller: block_size >= 1, tokens as
 * many as the blocks need) in order, one lock, adding what they did to
 * *out. A shard at or past CR_ROUTE_INDEX_MAX_SHARDS is not indexed: its
 * blocks count as orphans or unknown. CLEARED (the engine emptied its
 * cache, or its view cannot be trusted: a gap no replay covered, a
 * publisher restart) empties the shard's index and map. -1 when out of
 * memory (the index or a map could not grow: some blocks left out).
 * Thread-safe. */
int cr_router_kv_apply(cr_router *r, const cr_kv_event *ev, size_t n, cr_kv_applied *out);

/* ---- The engines' own load ------------------------------------------------
 * What an engine says of itself on its /metrics (vLLM's, SGLang's names:
 * scrape.h), scraped every --scrape-interval. The route rule predicts a
 * shard's queue from the routes it made; an engine that other traffic
 * also reaches (a second gateway, a batch job) holds more than that, and
 * the scrape is how the rule sees it (docs/routing.md, "Engine load").
 * A field the engine does not report is NAN (a count) or 0 (a size). */
#define CR_ENGINE_LORA_MAX 16     /* adapters one load names */
#define CR_ENGINE_LORA_NAME_MAX 64 /* bytes of an adapter's name, NUL included */

typedef struct cr_engine_load {
    double at_s;     /* when it was scraped, on the core's clock */
    double waiting;  /* requests queued (vllm:num_requests_waiting, sglang:num_queue_reqs) */
    double running;  /* requests running (vllm:num_requests_running, sglang:num_running_reqs) */
    double kv_usage; /* KV cache in use, 0..1 (vllm:kv_cache_usage_perc, sglang:token_usage) */
    uint32_t block_size; /* tokens per KV block (vllm:cache_config_info) */
    uint64_t gpu_blocks; /* KV blocks on the GPUs (vllm:cache_config_info num_gpu_blocks) */
    uint32_t max_lora;   /* adapter slots (vllm:lora_requests_info max_lora) */
    uint32_t n_lora;     /* adapters loaded (running or waiting ones), named in lora */
    char lora[CR_ENGINE_LORA_MAX][CR_ENGINE_LORA_NAME_MAX];
} cr_engine_load;

/* How the rule uses it (docs/routing.md, "Engine load"), on shard s:
 *   foreign_s = max(0, waiting + running - ours), ours = the requests the
 *               router has outstanding on s that it routed by at_s: what
 *               the engine held that the router did not send it
 *   wait_s    = the shard's own predicted queue (above) + foreign_s x the
 *               mean prefill of the rule's recent routes' prompts on a
 *               shard picked without looking (the mean over the usable
 *               shards): a request it did not place lands anywhere
 * so routes made since the scrape count at once, through the shard's own
 * queue, and traffic the router never saw counts within a scrape. A load
 * older than 2 x --scrape-interval (on the route's clock) is ignored from
 * then on, counted once, until the next. gpu_blocks (in the index's
 * blocks: x block_size / --block-tokens when block_size is given) bounds
 * the shard's prefix index below --index-blocks for as long as the shard
 * keeps its engine. A request's adapter is its namespace up to its first
 * byte 0x1f (decisions.md, "Namespaces"); while some shard's fresh load
 * lists it loaded, a shard that has it neither loaded nor a free slot
 * (n_lora >= max_lora > 0) costs CR_ROUTE_LORA_EVICT_MS more, weighed as
 * a prefill (the miss weight times): the swap stalls its batch, like a
 * prefill, for every request behind it. An adapter no shard lists (a
 * cold adapter, or a base model's name) is weighed by nothing here.
 * Memory: 168 B per shard up to the highest one a load named, made then. */
#define CR_ROUTE_LORA_EVICT_MS 25.0

/* Takes load (checked by the caller: shard among those routed over,
 * counts NAN or finite and >= 0, n_lora <= CR_ENGINE_LORA_MAX, names
 * NUL-terminated) as shard's at now, replacing its last. Returns 1 when
 * its block_size is the first on this shard (since its engine came) to
 * disagree with --block-tokens, for the caller to report once; 0 when
 * not; -1 when out of memory (nothing kept). Thread-safe; one short
 * lock, O(n_lora), O(the blocks evicted) when the shard's index shrinks. */
int cr_router_engine_load(cr_router *r, uint32_t shard, const cr_engine_load *load, double now);

#endif
