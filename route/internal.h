/* Private to the route component: the router's handle (router.c, ttft.c),
 * the outstanding work per shard (inflight.c) that bounded, live and ttft
 * weigh, the prefix index (prefix.c) and the sessions (sessions.c) that
 * ttft reads. */
#ifndef CR_ROUTE_INTERNAL_H
#define CR_ROUTE_INTERNAL_H

#include <pthread.h>

#include "ring.h"
#include "route.h"

/* Work routed and not yet done: a FIFO of at most cap items (expiry,
 * owner, shard, weight) in arrival order, each in its shard's chain, and
 * per shard the outstanding work and items. Not thread-safe: the router's
 * lock guards it. */
typedef struct cr_inflight cr_inflight;

/* cap in 1..CR_ROUTE_MAX_INFLIGHT; ttl_s > 0. The FIFO is allocated here
 * (cap items), the shard counters as they are reserved. NULL when out of
 * memory. */
cr_inflight *cr_inflight_new(uint64_t cap, double ttl_s);
void cr_inflight_free(cr_inflight *w);

/* Shard counters for shards 0..n-1 (they are never shrunk); -1 when out of
 * memory. */
int cr_inflight_reserve(cr_inflight *w, uint32_t n);

/* Retires every item whose expiry is <= now (counted expired), oldest
 * first, and drops released ones met on the way. Amortised O(1). */
void cr_inflight_expire(cr_inflight *w, double now);

/* Items one identified caller may hold at once: most (0 or over the cap:
 * the cap). */
void cr_inflight_set_caller_max(cr_inflight *w, uint64_t most);

/* Adds weight of owner on shard (reserved), routed by caller (0: nobody in
 * particular), expiring at now + ttl_s. A full FIFO first retires its
 * oldest item (counted evicted: at the cap the oldest work counts as
 * done) when that item is caller's or nobody's. The shard's timeline grows
 * by weight ms. Returns 1, or 0 with nothing added (counted refused) when
 * caller holds its quota already or the oldest item at the cap is another
 * caller's. O(1) + O(callers). */
int cr_inflight_add(cr_inflight *w, int64_t owner, uint32_t shard, double weight, double now,
                    uint64_t caller);

/* The same for a request whose id has key id (0 = none; an id outstanding
 * already is kept by owner instead), with the cached tokens predicted for
 * it. O(1) expected + O(callers). */
int cr_inflight_add_id(cr_inflight *w, int64_t owner, uint64_t id, uint32_t cached,
                       uint32_t shard, double weight, double now, uint64_t caller);

/* Retires owner's oldest outstanding item on shard that has no id and
 * that caller routed, counted released, looking CR_ROUTE_RELEASE_DEPTH
 * items deep from the shard's oldest: 1, or 0 when there is none that
 * deep. The shard's timeline restarts at now with the work left there. */
int cr_inflight_release(cr_inflight *w, int64_t owner, uint32_t shard, double now,
                        uint64_t caller);

/* Retires the item with id key id as cr_inflight_release does: 1 with its
 * shard and predicted cached tokens, or 0 when none is outstanding. O(1)
 * expected. */
int cr_inflight_release_id(cr_inflight *w, uint64_t id, double now, uint32_t *shard,
                           uint32_t *cached);

/* Retires every outstanding item on shard (its engine went; counted
 * evicted) and empties its timeline. O(its items). */
void cr_inflight_clear_shard(cr_inflight *w, uint32_t shard);

/* How long a request routed to shard at now would wait, ms: its timeline
 * past now, at most the work outstanding there (so expired work no longer
 * counts), or 0. */
double cr_inflight_wait_ms(const cr_inflight *w, uint32_t shard, double now);

/* Outstanding work per shard (cr_inflight_reserve'd entries; exactly 0 on
 * a shard with no items) and in all. */
const double *cr_inflight_loads(const cr_inflight *w);
double cr_inflight_total(const cr_inflight *w);

/* The counters, outstanding items and allocation into out's fields. */
void cr_inflight_stats(const cr_inflight *w, cr_route_stats *out);

/* Shards reserved so far (cr_inflight_loads has this many). */
uint32_t cr_inflight_shards(const cr_inflight *w);

/* Items outstanding on shard (0 past the reserved ones) that were added
 * at or before t: walked back from its newest, O(the items after t). */
uint32_t cr_inflight_items_by(const cr_inflight *w, uint32_t shard, double t);

/* ---- the prefix index (prefix.c) ---------------------------------------- */

typedef struct cr_prefix cr_prefix;

/* An empty index of n_shards (1..CR_ROUTE_INDEX_MAX_SHARDS) shards, each
 * holding at most blocks_per_shard (>= 1) blocks; it grows as blocks come.
 * NULL when out of memory or out of range. Not thread-safe. */
cr_prefix *cr_prefix_new(uint32_t n_shards, uint32_t blocks_per_shard);
void cr_prefix_free(cr_prefix *p); /* NULL is ignored */
uint32_t cr_prefix_shards(const cr_prefix *p);

/* Marks keys[0..n) held by shard (< cr_prefix_shards), the last first (so
 * the prefix's tail ages first), evicting the shard's oldest unreferenced
 * blocks past its bound; a key held already is touched. -1 when out of
 * memory (some keys may be in). O(n) expected. */
int cr_prefix_insert(cr_prefix *p, uint32_t shard, const uint64_t *keys, uint32_t n);

/* Whether shard holds key. O(1) expected. */
int cr_prefix_holds(const cr_prefix *p, uint32_t shard, uint64_t key);

/* Takes key away from shard (an engine evicted it): 1 when the shard held
 * it. Its ring place stays a ghost until the hand reclaims it. O(1)
 * expected. */
int cr_prefix_forget(cr_prefix *p, uint32_t shard, uint64_t key);

/* Bounds shard's blocks at blocks (at least 1, at most the index's
 * blocks_per_shard), evicting CLOCK-wise down to it at once. O(the
 * blocks evicted), each sweep of the hand at most twice the ring. */
void cr_prefix_set_cap(cr_prefix *p, uint32_t shard, uint32_t blocks);

/* Empties shard (an engine cleared its cache). O(its blocks). */
void cr_prefix_clear(cr_prefix *p, uint32_t shard);

/* depth[s] for s < min(n_shards, shards): how many leading keys of
 * keys[0..n) shard s holds. Returns the largest. Changes nothing; O(the
 * longest depth + n_shards). */
uint32_t cr_prefix_match(const cr_prefix *p, const uint64_t *keys, uint32_t n, uint32_t n_shards,
                         uint32_t *depth);

/* Blocks held over all shards, bytes allocated. */
void cr_prefix_stats(const cr_prefix *p, uint64_t *blocks, uint64_t *bytes);

/* ---- sessions (sessions.c) ------------------------------------------------ */

/* Per owner, the shard its last request went to and that request's prompt
 * tokens: a direct-mapped table (an owner may push another out), 16 B a
 * slot, a power of two of them. Not thread-safe. */
typedef struct cr_session {
    int64_t owner;
    uint32_t shard;  /* UINT32_MAX: empty */
    uint32_t tokens;
} cr_session;

typedef struct cr_sessions {
    cr_session *slots;
    uint64_t mask;
} cr_sessions;

/* At least n slots; -1 when out of memory. */
int cr_sessions_init(cr_sessions *s, uint64_t n);
void cr_sessions_free(cr_sessions *s);
/* owner's session, or NULL. */
const cr_session *cr_sessions_find(const cr_sessions *s, int64_t owner);
void cr_sessions_put(cr_sessions *s, int64_t owner, uint32_t shard, uint32_t tokens);

/* ---- popular prefixes (popular.c) ------------------------------------------ */

/* Requests that matched up to a block key, lately: a count-min sketch
 * (CR_POPULAR_ROWS rows of 2^14 16-bit counters, 128 KB), every counter
 * halved each CR_POPULAR_HALF counts. Not thread-safe. */
#define CR_POPULAR_ROWS 4
#define CR_POPULAR_HALF 16384

typedef struct cr_popular {
    uint16_t *counts; /* NULL: none (every count 0) */
    uint32_t n;       /* counts since the last halving */
} cr_popular;

int cr_popular_init(cr_popular *p); /* -1 when out of memory */
void cr_popular_free(cr_popular *p);
/* key's count: at least its true count since the halvings, and rarely
 * more (a count-min sketch overestimates only on collisions). */
uint32_t cr_popular_count(const cr_popular *p, uint64_t key);
void cr_popular_touch(cr_popular *p, uint64_t key);

/* ---- the engines' hashes (kv.c) ------------------------------------------ */

typedef struct cr_kvmap cr_kvmap;
void cr_kvmap_free(cr_kvmap *m); /* NULL is ignored */
uint64_t cr_kvmap_bytes(const cr_kvmap *m); /* 0 for NULL */

/* ---- the engines' own load (engine_load.c) ------------------------------------ */

/* What the router keeps of one shard's latest engine load. */
typedef struct cr_engine_view {
    double at_s;       /* when it was scraped */
    double foreign;    /* requests the engine held that the router had not sent */
    int fresh;         /* a load is kept and no route has found it stale */
    uint32_t max_lora, n_lora;
    uint64_t lora[CR_ENGINE_LORA_MAX]; /* loaded adapters' cr_route_text_key */
    uint32_t index_cap; /* its GPU index's bound; 0: --index-blocks */
    int mismatch;       /* its block size disagreed with --block-tokens (reported) */
} cr_engine_view;

/* ---- the router ------------------------------------------------------------ */

struct cr_router {
    pthread_mutex_t lock; /* guards everything below */
    cr_route_by by;
    double c;             /* --load-bound */
    cr_inflight *work;    /* NULL under plan */
    double max_work_ms;   /* the most one ttft route adds to work; 0: no bound */
    cr_ring *ring;        /* over the latest route's shard count; NULL before */
    cr_ring *other;       /* the last other count cr_router_home asked for */
    uint32_t *seen;       /* per ring shard: the walk that last looked at it */
    uint32_t walk;
    uint64_t diverted;
    /* ttft (ttft.c); the index exists under every rule, for Route */
    cr_prefix *index;     /* NULL until the first block */
    cr_prefix *cpu;       /* the CPU tier's (kv.c); NULL until its first block */
    uint32_t *extra;      /* per shard: scratch, the CPU blocks after a match's depth */
    cr_sessions sessions; /* ttft only */
    cr_popular popular;   /* ttft only: how shared each matched prefix is */
    double trust[CR_ROUTE_INDEX_MAX_SHARDS]; /* measured / predicted hits */
    uint32_t block_tokens, index_blocks;
    double g;             /* --miss-weight */
    int planned;          /* --route-planned */
    cr_prefill_model model; /* cr_router_set_model's */
    uint32_t *depth;      /* per shard: scratch for a match */
    uint64_t *keys;       /* scratch for a request's namespaced keys */
    uint32_t n_depth, n_keys;
    uint64_t why[CR_ROUTE_N_WHY]; /* routes placed, by reason */
    uint64_t hit_checked[2];      /* cr_route_stats' */
    double hit_error[2];
    cr_kvmap *kvmaps[CR_ROUTE_INDEX_MAX_SHARDS]; /* kv.c: per shard, NULL until its
                                                  * first event */
    /* members.c: which shards take requests (NULL: all) and each one's
     * capacity weight (NULL: 1 each), n_members of them */
    uint8_t *usable;
    double *speed;
    uint32_t n_members;
    atomic_int has_members; /* set once a mask came: plan's lock-free path checks it */
    uint64_t moved[2]; /* cr_route_stats' */
    /* engine_load.c: per shard, n_engines of them (NULL until the first
     * load: then nothing of it is read on a route's path) */
    cr_engine_view *engines;
    uint32_t n_engines;
    double stale_s;    /* 2 x --scrape-interval */
    double blind_ms;   /* a foreign request's price, ms: the moving mean of the recent
                        * ttft routes' prompts' prefill on a shard picked blind */
    int lora_listed;   /* some load named an adapter: requests' adapters are looked for */
    uint64_t engine_loads, engine_stale, engine_mismatch; /* cr_route_stats' */
};

/* Whether shard s may take a new request under mask u of n shards
 * (NULL: all may). */
static inline int cr_members_usable(const uint8_t *u, uint32_t n, uint32_t s)
{
    return !u || (s < n && u[s]);
}

/* r locked: the same under r's mask. */
static inline int cr_router_usable(const cr_router *r, uint32_t s)
{
    return cr_members_usable(r->usable, r->n_members, s);
}

/* r locked: shard s's capacity weight. */
static inline double cr_router_speed(const cr_router *r, uint32_t s)
{
    return r->speed && s < r->n_members ? r->speed[s] : 1.0;
}

/* r locked: the first usable shard of key's ring over n shards (s when it
 * is usable); s itself when none is or the ring cannot be built. */
uint32_t cr_router_usable_from(cr_router *r, int64_t key, uint32_t s, uint32_t n);

/* r locked: the ring and the counters for n shards, built when n changes;
 * -1 (the old ones kept) when out of memory. */
int cr_router_prepare(cr_router *r, uint32_t n);

/* r locked: a ring over n shards: the routes' own, or the other one kept
 * (built when n is new to it); NULL when out of memory. */
const cr_ring *cr_router_ring_for(cr_router *r, uint32_t n);

/* r locked: the first shard of owner's ring over n shards; UINT32_MAX when
 * out of memory. */
uint32_t cr_router_ring_home(cr_router *r, int64_t owner, uint32_t n);

/* r locked, prepared for n shards: owner's shard under plan, bounded or
 * live at now under t, weighing weight; *admitted = whether t admits it. */
uint32_t cr_router_rule_one(cr_router *r, const cr_table *t, uint32_t n, int64_t owner,
                            double weight, double now, int *admitted, uint64_t caller);

/* engine_load.c, r locked: the wait shard s's engine adds to its own
 * predicted queue at now, ms (0 without a fresh load; a stale one is
 * marked and counted here). */
double cr_engine_foreign_ms(cr_router *r, uint32_t s, double now);

/* r locked: whether some shard below n has a fresh load listing the
 * adapter keyed adapter (0: none) loaded. */
int cr_engine_adapter_seen(cr_router *r, uint64_t adapter, uint32_t n, double now);

/* r locked: 1 when shard s would have to evict an adapter at now to load
 * the adapter keyed adapter: its fresh load lists it not loaded and every
 * slot taken. */
int cr_engine_must_evict(cr_router *r, uint32_t s, uint64_t adapter, double now);

/* r locked: the GPU tier's prefix index, made on first use with each
 * shard's bound (cr_engine_view's index_cap); NULL when out of memory. */
cr_prefix *cr_router_gpu_index(cr_router *r);

/* r locked: notes what a ttft route's prompt would cost on a shard picked
 * without looking, ms (bounded as its work is), into what a foreign
 * request costs. */
void cr_engine_note_blind(cr_router *r, double ms);

/* r locked: forgets shard s's engine load (a new engine takes its slot). */
void cr_engine_forget(cr_router *r, uint32_t s);

/* ttft.c: cr_router_route under ttft: each arrival placed as a request of
 * its owner without hashes, weights[i] (NULL: 1 each) its prompt tokens,
 * straight into routes[i], with the router's model. */
void cr_router_place_arrivals(cr_router *r, const cr_table *t, uint32_t n_shards,
                              const double *weights, cr_route_answer *routes, size_t n,
                              double now, uint64_t caller);

#endif
