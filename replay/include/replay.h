/* cacheroute replay: run routing policies over a request trace against a
 * simulated cluster, in virtual time, and measure what each does to the
 * served prefix-cache hit ratio, time to first token and shard balance.
 *
 * A trace is a list of requests (a Mooncake JSON-lines file, or the seeded
 * generator). The cluster is R shards, each with an LRU prefix cache of
 * shard_blocks blocks and a FIFO prefill queue served one request at a
 * time; a request's hit is the longest prefix of its blocks present on the
 * shard it is sent to, and its service time comes from a "true" cost model
 * (deliberately not the sidecar's), with optional multiplicative noise:
 *
 *   hit_tokens   = min(input_tokens, hit_blocks * block_tokens)
 *   prefill_ms   = (a + b (L - s) + c (L^2 - s^2)) * noise, s = hit_tokens,
 *                  L = input_tokens
 *   start        = max(arrival, shard busy until);  ttft = start - arrival
 *                  + prefill_ms (+ KV transfer and load on a KV path)
 *
 * The hit is looked up at the request's arrival and its blocks are inserted
 * at once (at dispatch): a shard serves its queue in order, one request at
 * a time, so what a request finds at its arrival after every earlier
 * dispatch to the shard is inserted is exactly what it would find at its
 * service start with inserts at completion. Blocks are inserted last to
 * first, so a request's leading blocks are the most recently used and a
 * prefix is evicted from its tail (as vLLM does). Time is seconds of virtual
 * time: a request's arrival is its trace timestamp divided by the load
 * scale.
 *
 * Everything here is deterministic for a given trace, configuration and
 * seed: the same inputs give byte-identical results. Single-threaded; no
 * function here keeps global state.
 */
#ifndef CR_REPLAY_H
#define CR_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "admit.h"
#include "core.h"
#include "cost.h"

#define CR_REPLAY_BLOCK_TOKENS 512 /* Mooncake's block size */
#define CR_REPLAY_LINE_MAX (1u << 20) /* longest trace line read, bytes */
/* The owner key that finds sessions in both Mooncake traces (trace.c has
 * the measurements): block 0 is a system prompt on the conversation trace,
 * so prefix:1 makes one session of everything; prefix:2 splits it into its
 * conversations and keeps all their reuse but the shared block's first
 * fetch per conversation; on the synthetic trace it is prefix:1 but for
 * 13 owners. */
#define CR_REPLAY_OWNER_KEY_DEFAULT "prefix:2"

/* ---- traces ------------------------------------------------------------- */

typedef struct cr_replay_request {
    double t_ms;               /* arrival, ms from the trace start, unscaled */
    uint32_t input_tokens;     /* prompt tokens, knowledge included */
    uint32_t output_tokens;
    uint32_t knowledge_tokens; /* retrieved knowledge at the prompt's end; 0 = none */
    uint32_t n_blocks;
    size_t first_block;        /* index of its first block id in the trace's pool */
    int64_t owner;             /* the session it belongs to (see the owner key) */
} cr_replay_request;

typedef struct cr_replay_trace {
    cr_replay_request *reqs; /* sorted by t_ms (ties in file order) */
    size_t n;
    uint64_t *blocks; /* every request's block ids, concatenated */
    size_t n_blocks;
} cr_replay_trace;

/* How a request maps to an owner: a hash (cr_mix64 chain, >= 0) of its
 * first n block ids (CR_OWNER_PREFIX; all of them when it has fewer), or
 * the id of its block number n, 0-based (CR_OWNER_BLOCK; requests with
 * fewer blocks use their last one). */
typedef enum cr_owner_key_kind { CR_OWNER_PREFIX, CR_OWNER_BLOCK } cr_owner_key_kind;
typedef struct cr_owner_key {
    cr_owner_key_kind kind;
    uint32_t n; /* PREFIX: >= 1 */
} cr_owner_key;

/* Parses "prefix:N" or "block:N"; CR_EINVAL naming the text otherwise. */
cr_status cr_owner_key_parse(const char *text, cr_owner_key *out, cr_error *err);

/* Reads a Mooncake JSON-lines trace (parsed with jansson), streamed line
 * by line. Each line is an object with timestamp (a number of ms, >= 0),
 * input_length (an integer >= 1), output_length (an integer >= 0) and
 * hash_ids (a non-empty array of integers >= 0); every number below 2^53,
 * lengths below 2^32, other keys ignored, blank lines skipped, the
 * requests sorted by timestamp (ties in file order). A malformed line (bad
 * JSON, a key missing or of the wrong type or range, a line over
 * CR_REPLAY_LINE_MAX) is CR_EINVAL with err "PATH:LINE: why", naming the
 * key, and nothing kept; so is a file without requests; never a crash.
 * CR_EINVAL when the file cannot be read, CR_ENOMEM. Owners from key. */
cr_status cr_replay_trace_load(const char *path, const cr_owner_key *key, cr_replay_trace *out,
                               cr_error *err);
/* The same from a buffer (name is used in errors). */
cr_status cr_replay_trace_parse(const char *name, const char *text, size_t len,
                                const cr_owner_key *key, cr_replay_trace *out, cr_error *err);
void cr_replay_trace_free(cr_replay_trace *t);

/* Seeded synthetic workload. Each request belongs to a session drawn by
 * Zipf popularity (rank k, 0-based, has weight 1 / (k + 1)^zipf_s); each
 * session is a conversation whose prompt is its own first prompt plus every
 * turn so far (multi-turn: each turn appends blocks), behind a shared
 * system prompt (block ids 0 .. system_blocks - 1); all other block ids are
 * fresh per session and turn. input_tokens = n_blocks * block size (the
 * last block is full) + knowledge_tokens: the knowledge is retrieved per
 * request, so it has no blocks and never hits. Arrivals are Poisson, or
 * on/off bursty: a fixed cycle of burst_on_s with arrivals then burst_off_s
 * without, starting "on" at 0. With gini >= 0 the exponent is solved (a
 * walk up in steps of 0.25, then bisection) so the trace's request-count
 * Gini per popularity rank, over the ranks that get requests, lands on it
 * (to 0.001 where the counts allow; a target out of reach gets exponent 0
 * or the Gini's peak); without drift that is cr_replay_owner_gini of the
 * trace, with drift each session's requests spread over ranks and the
 * owner Gini is lower. The same config gives the same trace, on every
 * platform.
 *
 * Shared documents (documents > 0; the knowledge-intensive, RAG setting):
 * K documents of document_blocks blocks each, document d (0-based) drawn
 * with weight 1 / (d + 1)^document_zipf. A request's blocks are the system
 * prompt, then one document (block j of document d has the fixed id
 * system_blocks + d * document_blocks + j, so sessions that use a document
 * share its blocks right behind the system prompt), then its session's own
 * first prompt and turns, whose ids come after every document's. A
 * session draws its document at each conversation start and keeps it for
 * every turn (CR_REPLAY_DOC_PER_SESSION: a conversation about one
 * document), or draws one per request (CR_REPLAY_DOC_PER_REQUEST). A
 * block's KV depends on everything before it, so a session's block has
 * one id per document it follows: per request, a session's turns hit only
 * behind a document they followed before. The document's blocks count towards max_blocks.
 * Owners are session ids, or with owners CR_REPLAY_OWNER_DOCUMENT the
 * request's document, as a client that keys the sidecar by document
 * would send. */
typedef enum cr_replay_doc_per {
    CR_REPLAY_DOC_PER_SESSION, /* drawn at each conversation start */
    CR_REPLAY_DOC_PER_REQUEST  /* drawn for every request */
} cr_replay_doc_per;
typedef enum cr_replay_gen_owner {
    CR_REPLAY_OWNER_SESSION, /* the session's id */
    CR_REPLAY_OWNER_DOCUMENT /* the request's document, d (needs documents) */
} cr_replay_gen_owner;
typedef struct cr_replay_gen_config {
    uint64_t seed;
    size_t n_requests;
    size_t n_sessions;
    double zipf_s;          /* popularity exponent, >= 0; ignored when gini >= 0 */
    double gini;            /* target Gini of requests per session in [0, 1), or < 0 */
    double rate_per_s;      /* mean arrivals per second, > 0 */
    double burst_on_s;      /* on/off bursts: both > 0 to enable; arrivals only */
    double burst_off_s;     /* during "on", at rate_per_s * (on + off) / on */
    uint32_t system_blocks; /* shared leading blocks, every request */
    uint32_t first_blocks;  /* a session's first prompt */
    uint32_t turn_blocks;   /* appended per turn */
    uint32_t max_blocks;    /* a session restarts (new blocks) past this */
    double drift_per_s;     /* popularity ranks rotate by this many per second; 0 = none */
    uint32_t knowledge_tokens; /* per request; 0 = none */
    uint32_t output_tokens;
    uint32_t documents;       /* shared documents K; 0 = none (the workload above) */
    uint32_t document_blocks; /* D, >= 1 with documents, 0 without */
    double document_zipf;     /* documents' popularity exponent, >= 0 */
    cr_replay_doc_per document_per;
    cr_replay_gen_owner owners;
} cr_replay_gen_config;

/* The defaults (gen.c says why): seed 1, 100000 requests over 1000
 * sessions at 500/s Poisson, Gini 0.76, a 2-block system prompt, first
 * prompts of 4 blocks growing by 1 per turn up to 32, no drift, no
 * knowledge, 256 output tokens; no documents (exponent 1, one per
 * session, owners by session once some are given). */
void cr_replay_gen_default(cr_replay_gen_config *cfg);
/* CR_EINVAL naming the field for a bad config. Owners are session ids. */
cr_status cr_replay_generate(const cr_replay_gen_config *cfg, cr_replay_trace *out,
                             cr_error *err);

/* Request-count Gini of the trace's owners (0 = even, -> 1 = one owner),
 * over the owners that have requests; NaN when out of memory. */
double cr_replay_owner_gini(const cr_replay_trace *t);

/* ---- the simulated cluster ------------------------------------------------ */

typedef struct cr_replay_cost {
    cr_prefill_cost prefill; /* the true prefill's coefficients (--true-prefill) */
    double noise;         /* multiplicative noise: service * lognormal(0, noise); 0 = none */
    double kv_ms_per_token; /* KV transfer + load per cached knowledge token (KV path) */
    double kv_fixed_ms;
} cr_replay_cost;
/* A request with knowledge_tokens > 0 that the policy's kv hook sends as
 * KV is prefilled without them (s = min(L, hit_tokens + knowledge_tokens))
 * and waits kv_fixed_ms + kv_ms_per_token * knowledge_tokens more for its
 * first token: kv_ms, on the request's own path (a transfer), not on the
 * shard's. hit_tokens and the hit ratio count prefix-cache hits only. */
/* The simulation charges cr_prefill_ms(&truth.prefill, s, L) (cost.h)
 * times the noise for a prefill of L tokens with the first s of them
 * already there; policies that know the truth predict with the same. */

/* ---- membership events ------------------------------------------------------ */

/* Endpoints joining and leaving the cluster during a run (--events). The
 * R initial endpoints are e0 .. e{R-1} on slots (shards) 0 .. R-1; a join
 * names a new endpoint and takes the next slot (R, R+1, ...), so a slot
 * keeps its endpoint for the run and slots = R + joins. At an event's
 * time T, before any request arriving at or after T is routed:
 *   join   a new empty shard that takes requests from T on;
 *   drain  the shard takes no new requests; those already queued there
 *          finish; its cache stays until it has no work left (then gone);
 *   fail   the shard takes no new requests; its cache is lost; the
 *          requests queued or in service there at T are not served (the
 *          result's failed_requests, left out of its hit ratio and TTFTs).
 * A drained or failed endpoint never comes back; its id is not reused.
 *   mark   nothing changes (ENDPOINT is a free label): the figures below
 *          at a time without a change, as a control: what a policy moves
 *          on its own (spills, rebalancing) over the same kind of span. */
#define CR_REPLAY_EVENTS_MAX 1024     /* events in one file */
#define CR_REPLAY_ENDPOINT_ID_MAX 63  /* bytes in an endpoint id */
#define CR_REPLAY_EVENTS_FILE_MAX (1u << 20) /* bytes in an events file */

typedef enum cr_replay_member_kind {
    CR_REPLAY_JOIN,
    CR_REPLAY_DRAIN,
    CR_REPLAY_FAIL,
    CR_REPLAY_MARK, /* no change: the same figures at a quiet time, as a control */
    CR_REPLAY_N_KINDS
} cr_replay_member_kind;

/* "join", "drain", "fail", "mark". */
const char *cr_replay_member_kind_name(cr_replay_member_kind k);

typedef struct cr_replay_member_event {
    double at_s; /* virtual seconds, the arrivals' time base (after the scale) */
    cr_replay_member_kind kind;
    uint32_t slot; /* the joining, drained or failed endpoint's shard */
    char id[CR_REPLAY_ENDPOINT_ID_MAX + 1];
} cr_replay_member_event;

typedef struct cr_replay_events {
    cr_replay_member_event *ev; /* n of them, at_s ascending (ties in file order) */
    size_t n;
    uint32_t shards; /* the initial endpoints (the cluster's shards) */
    uint32_t slots;  /* shards + joins */
} cr_replay_events;

/* Parses an events file's text for a cluster of shards initial endpoints:
 * one event a line, "AT_S KIND ENDPOINT" separated by blanks (AT_S a
 * finite number >= 0, KIND join, drain or fail), "#" to the line's end a
 * comment, blank lines skipped (KIND may also be mark). CR_EINVAL with err
 * "NAME:LINE: why" for an unknown kind, a bad or extra field, an id of more than
 * CR_REPLAY_ENDPOINT_ID_MAX bytes, a join of an id in use or used before,
 * a drain or fail of an endpoint not serving (unknown, drained or failed),
 * one that would leave none serving, a time before the previous event's,
 * more than CR_REPLAY_EVENTS_MAX events, or more than CR_MAX_SHARDS slots;
 * nothing kept then. No events (an empty file) is valid. CR_ENOMEM. */
cr_status cr_replay_events_parse(const char *name, const char *text, size_t len, uint32_t shards,
                                 cr_replay_events *out, cr_error *err);
/* The same from a file (at most CR_REPLAY_EVENTS_FILE_MAX bytes);
 * CR_EINVAL "PATH: cannot read: why" when it cannot be read. */
cr_status cr_replay_events_load(const char *path, uint32_t shards, cr_replay_events *out,
                                cr_error *err);
void cr_replay_events_free(cr_replay_events *e);
/* The id of slot's endpoint ("e3", or its join's id) into buf;
 * snprintf's return. */
int cr_replay_endpoint_id(const cr_replay_events *e, uint32_t slot, char *buf, size_t len);

typedef struct cr_replay_cluster {
    uint32_t shards;       /* R, >= 1 */
    uint64_t shard_blocks; /* LRU capacity per shard, blocks, >= 1 */
    uint32_t block_tokens; /* CR_REPLAY_BLOCK_TOKENS */
    cr_replay_cost truth;
    double scale;          /* arrivals at t_ms / 1000 / scale seconds; > 0 */
    uint64_t seed;         /* noise and random policies */
    uint64_t warmup;       /* the first warmup requests are served but left out
                            * of the result's hit ratio, TTFTs and imbalance
                            * (a cluster measured once warm); < the requests */
    /* Membership changes during the run (above), parsed for shards; NULL:
     * the shards serve throughout, as before events existed. */
    const cr_replay_events *events;
    /* Objectives per request (admission.c, docs/admission.md); NULL: none,
     * every run as before they existed. */
    const struct cr_replay_admission *admission;
    /* Foreign traffic (--foreign-share): this share of the requests,
     * chosen from the seed (cr_replay_foreign), reach the engines around
     * the router: each goes to the next serving shard round-robin, is
     * queued, served and cached like any request, but the policy never
     * routes it, never hears of it (no route, no served, no predicted) and
     * the result's figures leave it out (foreign_requests counts them). A
     * second gateway, a batch job, replicas that share no outstanding
     * work. 0: none, every run as before the option existed. Not with
     * events. */
    double foreign_share;
    /* The engines' /metrics scraped every this many seconds of virtual
     * time, on the grid 0, s, 2s, ... (--scrape-interval): the view's
     * scrape. 0: none (the view's scrape is NULL). */
    double scrape_interval_s;
} cr_replay_cluster;

/* Whether request i (trace order) of a run on c is foreign: a draw from
 * the seed and i below c->foreign_share; 0 for every i without. */
int cr_replay_foreign(const cr_replay_cluster *c, size_t i);

/* The slots a run on c may use: shards, plus the joins of its events.
 * Per-shard state is sized by this. */
static inline uint32_t cr_replay_slots(const cr_replay_cluster *c)
{
    return c->events ? c->events->slots : c->shards;
}

/* The defaults (sim.c says why): 64 shards of 1024 blocks, 512-token
 * blocks, a = 4 ms, b = 0.02 ms/token, c = 5e-7 ms/token^2, noise 0.1, KV
 * at 2 ms + 0.002 ms/token, scale 1, seed 1. */
void cr_replay_cluster_default(cr_replay_cluster *c);
/* CR_EINVAL naming the first bad field: shards in 1..CR_MAX_SHARDS,
 * shard_blocks and block_tokens >= 1, every cost finite and >= 0, scale
 * finite and > 0, events (when given) parsed for these shards,
 * foreign_share in [0, 1) and not with events, scrape_interval_s finite
 * and >= 0. */
cr_status cr_replay_cluster_check(const cr_replay_cluster *c, cr_error *err);

/* The engines' own load as their last scrape read it, per slot, what
 * vLLM's /metrics says: num_requests_waiting (queued, not in service),
 * num_requests_running (in service: 0 or 1, a shard prefills one request
 * at a time) and the KV blocks in use (kv_cache_usage_perc times the
 * shard's blocks). Every request counts, foreign ones too. */
typedef struct cr_replay_scrape {
    uint64_t seq; /* 1 for the run's first scrape, + 1 each */
    double at_s;  /* when it was read (a grid point at or before now) */
    const uint32_t *waiting, *running, *blocks_held;
} cr_replay_scrape;

/* What a policy may look at when routing: the cluster as it stands at the
 * request's arrival. Every member after queued may be NULL or 0 in a view
 * not made by cr_replay_run (a test's); a policy reading one says what it
 * does without it. */
typedef struct cr_replay_view {
    uint32_t shards; /* slots so far: the initial shards and those joined */
    double now_s;
    /* Which shards take requests: usable[k] per slot, and the serving
     * ones in index order (n_serving >= 1). A policy must route to a
     * usable shard. NULL (a view without events, a test's): all do. */
    const uint8_t *usable;
    const uint32_t *serving;
    uint32_t n_serving;
    /* Per shard: work queued and in service, ms (every request's: the
     * truth, for the baselines and the reference). */
    const double *backlog_ms;
    /* Per shard: requests queued and in service that the policy routed
     * (what a router counts of itself); without foreign traffic, every
     * request queued and in service. */
    const uint32_t *queued;
    /* The trace's block pool: request r's ids are blocks[r->first_block ..
     * + r->n_blocks), for policies that index prompts. */
    const uint64_t *blocks;
    /* Per shard: blocks its cache holds, of shard_blocks (KV-cache usage,
     * as an engine's metrics report it). */
    const uint32_t *blocks_held;
    uint64_t shard_blocks;
    /* The prefix hit r would get on shard now, in blocks, read from the
     * true cache without changing it; O(blocks). Only for policies that
     * are told the truth (min-ttft-exact): a router in front of real
     * engines sees only what they report, so a peer reads its own record
     * of what it routed or of prefills completed before the request. */
    uint32_t (*hit_blocks)(const void *ctx, uint32_t shard, const cr_replay_request *r);
    const void *hit_ctx;
    /* The last scrape (the cluster's scrape_interval_s > 0), else NULL. */
    const cr_replay_scrape *scrape;
} cr_replay_view;

/* What happened to one request. */
typedef struct cr_replay_outcome {
    uint32_t shard;
    uint32_t hit_tokens;
    double queue_wait_ms, prefill_ms, kv_ms, ttft_ms;
    int used_kv; /* the knowledge came as KV */
} cr_replay_outcome;

/* ---- policies ---------------------------------------------------------- */

/* A routing policy. route picks the shard for r (below v->shards; anything
 * else fails the run); optional hooks: kv decides text (0) or KV (1) for a
 * request with knowledge (NULL = text), given the shard route chose and
 * the request's prefix hit there (hit_tokens, as its outcome will say);
 * served sees each outcome (to feed outcomes back); tick runs before each
 * request with the virtual clock (replanning); replans, called once after
 * a run, gives the policy's replans so far (n, and per replan the changed
 * share and virtual time, arrays the policy owns) and returns 0, or
 * nonzero to fail the run with CR_ENOMEM. The view and request are valid
 * only during the call. */
typedef struct cr_replay_policy {
    const char *name;
    void *state;
    uint32_t (*route)(void *state, const cr_replay_request *r, const cr_replay_view *v);
    int (*kv)(void *state, const cr_replay_request *r, const cr_replay_view *v, uint32_t shard,
              uint32_t hit_tokens);
    void (*served)(void *state, const cr_replay_request *r, const cr_replay_outcome *o);
    void (*tick)(void *state, double now_s);
    void (*free)(void *state);
    /* churn: filled by policies that install tables (see cr_replay_result) */
    int (*replans)(void *state, size_t *n, const double **changed_share, const double **at_s);
    /* Optional. predicted: the cached tokens the policy predicted for the
     * request route just placed, asked right after route: 1 with *tokens,
     * 0 when it made no prediction (the result's hit_error counts only
     * the requests it predicted). evicted: the routed shard's LRU cache
     * evicted block id while serving the request route just placed (what
     * an engine publishes as BlockRemoved), called before served. */
    int (*predicted)(void *state, uint32_t *tokens);
    void (*evicted)(void *state, uint32_t shard, uint64_t id);
    /* Optional (a policy whose state does not depend on the serving set
     * reads the view's and leaves it NULL). Runs with events only: at the
     * run's start with ev NULL (the initial set), then at each event, in
     * virtual time before the first request at or after it: usable[0 ..
     * n_slots) as the next view's. A drain and a fail are both removals
     * from the candidate set; what the policy keeps of the shard goes
     * with it (a fail's cache is gone, a drained shard takes no more). */
    void (*members)(void *state, const uint8_t *usable, uint32_t n_slots,
                    const cr_replay_member_event *ev);
    /* Optional: a policy with a door (cacheroute-door). route may answer
     * CR_REPLAY_SHED (refused: never served) or CR_REPLAY_HELD (held: the
     * policy sends it later). dispatch, called at every arrival after
     * tick (and after the last arrival as time runs on), answers 1 with a
     * held request *r going now to *shard (or dropped: CR_REPLAY_SHED)
     * after held_ms, 0 when none goes now, -1 when none is held. A
     * dispatched request is served at the dispatch: its queue wait is the
     * shard's from then, its TTFT counted from its arrival. */
    int (*dispatch)(void *state, const cr_replay_request **r, uint32_t *shard, double *held_ms);
} cr_replay_policy;

#define CR_REPLAY_SHED UINT32_MAX        /* route: refused at the door */
#define CR_REPLAY_HELD (UINT32_MAX - 1u) /* route: held at the door */

/* The baselines, each its own rule:
 *   flat-lb       power of two choices on queued requests (seeded): two
 *                 distinct uniform shards, the one with fewer queued (the
 *                 first drawn on a tie)
 *   sticky        consistent hash of the owner (ring, 64 virtual nodes per shard)
 *   chwbl         consistent hashing with bounded loads, c = 1.25: the first
 *                 shard on the owner's ring walk whose queued count is below
 *                 ceil(c * (total queued + 1) / R)
 *   least-loaded  the smallest backlog_ms (ties by id)
 *   random        uniform (seeded)
 * The seeded ones draw from cr_mix64 of the seed and the request's
 * first_block (a counter-based stream), so no baseline keeps state between
 * requests and every run of one gives the same choices. The ring does not
 * depend on the seed. CR_EINVAL for an unknown name or a bad shard count;
 * CR_ENOMEM. */
cr_status cr_replay_baseline(const char *name, const cr_replay_cluster *c, cr_replay_policy *out,
                             cr_error *err);

/* The routers platform teams deploy, each as its public source describes
 * its default, plus an exact reference. "In flight" is the view's queued:
 * routed to the shard and not yet through its prefill. Cache-reading
 * peers never read the simulator's caches: each keeps its own record of
 * what it routed where, or (dynamo-kv) of the prefills completed before
 * the request arrives, as a router in front of real engines must.
 *   llmd-scorer         llm-d inference scheduler (Gateway API Inference
 *                       Extension), default profile: score = 2 queue +
 *                       2 kv + 3 prefix, the highest wins, ties drawn.
 *                       queue = (max - waiting) / (max - min) over the pods
 *                       (1 when all are equal), waiting = queued but the one
 *                       in service; kv = 1 - blocks held / shard_blocks;
 *                       both from a snapshot of the view refreshed when 50
 *                       ms of virtual time have passed since the last (the
 *                       metrics scrape), or with the cluster's scrapes
 *                       (scrape_interval_s) from the view's scrape. prefix = the leading run of the
 *                       prompt's first 4096 tokens' blocks (256 blocks of
 *                       64 characters at 4 a token: 8 blocks of 512)
 *                       found in the pod's LRU index of the blocks it was
 *                       routed, shard_blocks long, over how many of them
 *                       the prompt has.
 *   sglang-cache-aware  SGLang model gateway, command-line defaults: load =
 *                       in flight. When max - min > 64 and max > 1.5 min,
 *                       the least loaded (lowest index on a tie). Else the
 *                       prompt is matched in one trie of block ids routed,
 *                       each node with its workers (last use, held since):
 *                       when the match is over 0.3 of the prompt's tokens,
 *                       the deepest matched node's worker that has held it
 *                       longest (lowest index on a tie); else the least
 *                       loaded. The prompt is inserted for the worker
 *                       chosen. Every 120 s of virtual time each worker's
 *                       least recently used leaves are evicted down to
 *                       2^26 characters (2^24 tokens: 32768 blocks of 512);
 *                       a worker past twice that is evicted at once, which
 *                       bounds the trie.
 *   dynamo-kv           NVIDIA Dynamo KV router (prefill): per worker, cost
 *                       = (queued prefill tokens + prompt tokens - overlap
 *                       blocks * block_tokens) / block_tokens; the lowest
 *                       wins, ties to the smaller cache (fewer blocks
 *                       held), then drawn. Queued prefill tokens: what the
 *                       router charged each request in flight there (its
 *                       prompt less the overlap seen when routed). The
 *                       overlap is the prompt's leading blocks in a shadow
 *                       LRU per worker, shard_blocks long, fed with each
 *                       request's blocks at its completion (arrival + queue
 *                       wait + prefill), as KV events report them: a block
 *                       routed but not yet completed is no overlap.
 *   aibrix-prefix       AIBrix gateway: load = in flight. When max - min >
 *                       8, a least loaded pod, drawn. Else the prompt's
 *                       blocks are walked in one table of 200,000 block ids
 *                       (each: the pods it was routed to, its last use;
 *                       unused for 20 minutes of virtual time it expires;
 *                       LRU past 200,000) while some pod holds every block
 *                       so far; of the pods that held the first, ranked by
 *                       blocks matched, then fewer in flight, then index,
 *                       the first whose load is at most mean + 1 population
 *                       std of the loads; none: a least loaded pod, drawn.
 *                       The prompt's blocks are recorded for the pod.
 *   min-ttft-exact      not a router: the reference told the truth. The
 *                       shard with the least backlog_ms + true prefill
 *                       (cr_prefill_ms of the truth, noise aside) given
 *                       its true hit (the view's hit_blocks); ties to the
 *                       lowest index.
 *   round-robin         what a gateway does with no picker (Envoy's default
 *                       lb_policy): the next serving shard in index order,
 *                       request after request; blind to prompts and loads.
 * Draws come from the seed and the request's first block, like the
 * baselines'. A run whose clock starts behind the last one's end starts
 * the policy afresh (as the cacheroute policy), so a policy may be run
 * again; every run of one gives the same choices. Memory is bounded: the
 * tables above, plus what is in flight. CR_EINVAL for an unknown name or a
 * bad cluster; CR_ENOMEM. */
cr_status cr_replay_peer(const char *name, const cr_replay_cluster *c, cr_replay_policy *out,
                         cr_error *err);

/* What each of the cacheroute policy's arrivals weighs (--weight): 1, so
 * rates count requests (the sidecar's default), or the request's input
 * tokens, so rates are tokens/s and --qcap is tokens/s per shard. */
typedef enum cr_replay_weight { CR_REPLAY_WEIGHT_REQUESTS, CR_REPLAY_WEIGHT_TOKENS } cr_replay_weight;

/* What the cacheroute policy calls per request (--call): Route
 * (cr_core_route) with its owner, prompt tokens, its blocks' chained
 * hashes (h_0 = cr_mix64(id_0), h_i = cr_mix64(h_{i-1} ^ id_i)) and a
 * request id, its outcome reported by that id; or RecordArrival
 * (cr_core_record) with its owner and weight, its outcome by owner and
 * shard. */
typedef enum cr_replay_call { CR_REPLAY_CALL_ROUTE, CR_REPLAY_CALL_RECORD } cr_replay_call;

/* Whether the cacheroute policy's prefix index is also fed the simulated
 * shards' caches as engines publish them (--kv-events). With ON, Route's
 * hashes are the router's chain (cr_route_block_hash) over each block id
 * as a 2-token pseudo-block {(uint32_t)id, (uint32_t)(id >> 32)}, so that
 * events match them; each prefill's end (when its outcome is reported)
 * sends a STORED event of all its blocks on its shard (engine hash = block
 * id, block_size 2, no parent: the chain starts at its first block), and
 * each block its shard's cache evicts a REMOVED event, sent with the other
 * evictions of the same request before the next request is routed. With
 * OFF, the splitmix chain above and no events. DISPATCH is ON with each
 * STORED sent when the request is served (dispatched: when the simulated
 * cache takes its blocks) rather than at its prefill's end: a diagnostic
 * of what the delay costs, since a block the cache evicts while its
 * request waits is stored again at its end under ON (an engine pins a
 * waiting request's blocks; the simulated cache does not). */
typedef enum cr_replay_kv_events {
    CR_REPLAY_KV_EVENTS_OFF,
    CR_REPLAY_KV_EVENTS_ON,
    CR_REPLAY_KV_EVENTS_DISPATCH
} cr_replay_kv_events;

/* The cacheroute policy: the sidecar's own core (core/) run in-process in
 * virtual time. Each request is one call (above; a RecordArrival weighing
 * what weight says), sent to the shard it answers; the core's --block-tokens
 * and --index-blocks are set to the cluster's block_tokens and
 * shard_blocks (what a deployer sets them to); cr_core_tick
 * before each request lets the core's replanner install a plan every
 * cfg->replan_interval_s of virtual time; requests with knowledge go
 * through cr_core_select. The core is told when each request's prefill
 * ends: served pushes (its arrival + queue wait + prefill, owner, shard,
 * request) on a min-heap, and tick reports every finish due by then, each
 * at its own finish time (cr_core_report), as an engine reporting each
 * outcome at once would; that releases the route's outstanding work under
 * bounded, live and ttft; --inflight-ttl still applies. cfg is copied
 * (its probe is replaced by one that finds nothing). replans reports churn;
 * predicted gives each Route answer's cached_tokens (none under --call
 * record); events says whether the index also takes the shards' KV events
 * (cr_replay_kv_events). */
cr_status cr_replay_cacheroute_policy(const cr_core_config *cfg, cr_replay_weight weight,
                                      cr_replay_call call, cr_replay_kv_events events,
                                      const cr_replay_cluster *c, cr_replay_policy *out,
                                      cr_error *err);

/* ---- runs ------------------------------------------------------------ */

/* Around one membership event at T (requests by arrival, every served one,
 * the warm-up's too, as the replan dip): */
#define CR_REPLAY_EVENT_WINDOW_S 60.0   /* the spans before and after T */
#define CR_REPLAY_RECOVERY_STEP_S 5.0   /* recovery is looked for at T + 0, 5, ... 60 */
#define CR_REPLAY_RECOVERY_SPAN_S 30.0  /* over this long */
#define CR_REPLAY_RECOVERY_POINTS 0.02  /* within this of the hit ratio before */
typedef struct cr_replay_event_result {
    cr_replay_member_event event;
    double hit_before;                 /* token-weighted over [T - 60, T) */
    double p99_before_ms, p99_after_ms; /* nearest-rank over [T - 60, T), [T, T + 60) */
    /* The first t in 0, 5, ..., 60 whose [T + t, T + t + 30) hits at least
     * hit_before - 0.02; NaN when none does, when that span runs past the
     * last arrival first, or without hit_before. */
    double recovered_s;
    /* Owners with requests on both sides of T, between the events either
     * side of this one (so each event is charged its own moves), whose
     * first request from T on went to another shard than their last one
     * before T; forced: of the owners with requests on both sides, the
     * ones whose last shard was the drained or failed one (0 for a join):
     * the fewest any policy must move. */
    uint64_t moved, forced;
} cr_replay_event_result;
/* Every double above is NaN when its span has no served request. */

typedef struct cr_replay_result {
    char policy[32];
    size_t requests;
    double hit_ratio;          /* token-weighted: sum hit_tokens / sum input_tokens */
    double ttft_p50_ms, ttft_p99_ms, ttft_mean_ms;
    double imbalance;          /* max / mean prefill work per shard */
    double kv_share;           /* of requests with knowledge, those whose knowledge
                                * came as KV; 0 when none has knowledge */
    /* Per replan (policies that install tables): the share of admitted
     * sessions whose shard set changed, and the hit ratio in the window_s
     * after it minus the window_s before (dip_mean over the replans with
     * requests on both sides; 0 when none has). */
    size_t n_replans;
    double churn_mean, dip_mean;
    /* Hit prediction (policies with a predicted hook): over the measured
     * requests it predicted, the mean |predicted cached tokens - the
     * hit_tokens served|, in tokens and over the mean prompt tokens of
     * those requests; NaN when it predicted none. */
    double hit_error_tokens, hit_error_share;
    /* Hit ratio per window_s of virtual time from 0 (by arrival; a window
     * without requests repeats the one before, 0 at the start), and every
     * TTFT sorted (for a CDF; p50 and p99 are nearest-rank); owned by the
     * result. */
    double window_s;
    double *hit_series;
    size_t n_windows;
    double *ttft_sorted_ms;
    /* With events (the cluster's; all 0 and NULL without): the measured
     * requests that failed (queued on a failed shard; requests and every
     * figure above count only the served), the hit ratio over [first
     * event - 60, last event + 60), and per event its figures. */
    size_t failed_requests;
    double hit_ratio_events;
    cr_replay_event_result *events;
    size_t n_events;
    /* With the cluster's admission: the figures per objective (requests
     * shed or dropped count in failed_requests too). */
    struct cr_replay_admission_result *admission;
    /* Foreign requests from the warm-up on: served, never routed by the
     * policy, left out of every figure above (0 without). */
    size_t foreign_requests;
} cr_replay_result;

/* Replays t through policy p on cluster c. Consumes nothing: t and p are
 * reusable (p's state is the policy's to reset). CR_EINVAL naming the field
 * for a bad cluster, window_s (> 0, at most 2^24 windows) or trace (a
 * request out of time order, without blocks or past the block pool, or
 * with more knowledge than input) or a route out of range or to a shard
 * not taking requests (events); CR_ENOMEM.
 * *out is zeroed on failure. */
cr_status cr_replay_run(const cr_replay_trace *t, const cr_replay_cluster *c,
                        const cr_replay_policy *p, double window_s, cr_replay_result *out,
                        cr_error *err);
void cr_replay_result_free(cr_replay_result *r);

/* ---- admission: objectives per request (admission.c) ------------------------
 *
 * Each session (a request's owner) draws an objective and a tenant from
 * the seed (so every policy and run sees the same, and a session's turns
 * share both, as a deployment's do): interactive (priority 0,
 * TTFT SLO interactive_slo_ms) with probability interactive_share, else
 * batch (priority -1, SLO batch_slo_ms, 0 = none); tenant 0 with
 * probability heavy_share (the heavy tenant), else tenant 1. Policies
 * without a door route everything; cacheroute-door hands the objectives to
 * the core's door. */
#define CR_REPLAY_CLASSES 2 /* 0 interactive, 1 batch */
#define CR_REPLAY_TENANTS 2 /* 0 heavy, 1 light */

typedef struct cr_replay_admission {
    uint64_t seed;
    double interactive_share;   /* 0.6 */
    double interactive_slo_ms;  /* 2000 */
    double batch_slo_ms;        /* 30000; 0 = none */
    double heavy_share;         /* 0.75: three times the other's rate */
    cr_admit_config door;       /* cacheroute-door's bounds */
    int shed_at_once;           /* 0: the gateway waits, the door holds; 1: it
                                 * sheds what it would hold (Route, or a
                                 * picker without --admit-max-queued) */
} cr_replay_admission;

/* The defaults above; the door's bounds cr_admit_config_default's with a
 * budget of half the interactive SLO. */
void cr_replay_admission_default(cr_replay_admission *a);
/* The objective class and tenant of owner's session: every request of a
 * session shares them, as a deployment's do. Pure. */
void cr_replay_admission_of(const cr_replay_admission *a, int64_t owner,
                            unsigned *cls, unsigned *tenant);
/* The objectives' table text the door is given ("interactive:0:2000,
 * batch:-1:30000") into buf. */
void cr_replay_admission_table(const cr_replay_admission *a, char *buf, size_t len);

/* Per objective class, over the measured requests (from the warm-up on). */
typedef struct cr_replay_class_result {
    size_t requests, served, met;  /* met: served with TTFT <= the class's SLO */
    size_t shed, dropped, held;    /* refused at once; held, then refused; held at all */
    double goodput_per_s;          /* met / the measured span */
    double attainment;             /* met / requests (shed ones miss) */
    double ttft_p99_ms;            /* over the served; NaN with none */
    size_t tenant_requests[CR_REPLAY_TENANTS], tenant_served[CR_REPLAY_TENANTS];
    /* the served requests' true prefill with nothing cached, ms: the
     * capacity each tenant took, in work rather than requests */
    double tenant_work_ms[CR_REPLAY_TENANTS];
    /* the same over all the class's requests, served or not: what each
     * tenant asked for (a max-min fair share follows from it) */
    double tenant_asked_ms[CR_REPLAY_TENANTS];
    /* the work of the held requests each tenant was dispatched (the
     * capacity the door's round robin shares), and the heavy tenant's
     * max-min fair share of it: at each dispatch, of the work sent then,
     * half each, or all that a tenant had held when less */
    double dispatched_work_ms[CR_REPLAY_TENANTS], heavy_fair_dispatched_ms;
} cr_replay_class_result;

typedef struct cr_replay_admission_result {
    double span_s;
    /* every measured request's shard, TTFT and door, in trace order,
     * folded into one hash: equal for equal routes */
    uint64_t routes;
    cr_replay_class_result cls[CR_REPLAY_CLASSES];
} cr_replay_admission_result;

/* The cacheroute policy (cr_replay_cacheroute_policy's, named
 * "cacheroute-door") with the core's door on: every request carries its
 * objective and tenant (c->admission, required) into Route; held requests
 * are dispatched through the policy's dispatch hook, outcomes feed the
 * door's attainment. */
cr_status cr_replay_cacheroute_door_policy(const cr_core_config *cfg, const cr_replay_cluster *c,
                                           cr_replay_policy *out, cr_error *err);

#endif
