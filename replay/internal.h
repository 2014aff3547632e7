/* Internal to the replay library (and read by its CLI): small shared
 * words, the seeded random numbers, the per-shard LRU prefix cache
 * (cache.c), the trace builder the parser and the generator share
 * (builder.c), the owners' counts (trace.c) and a run's statistics
 * (stats.c). */
#ifndef CR_REPLAY_INTERNAL_H
#define CR_REPLAY_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "replay.h"
#include "htable.h"

/* ---- small shared words ---------------------------------------------------- */

static inline int cr_replay_finite_ge0(double x) { return isfinite(x) && x >= 0; }

/* qsort's ascending order of doubles. */
static inline int cr_replay_cmp_double(const void *pa, const void *pb)
{
    double a = *(const double *)pa, b = *(const double *)pb;
    return (a > b) - (a < b);
}

/* ---- random numbers ------------------------------------------------------ */

/* splitmix64: a sequential stream from a seed, the same on every platform.
 * Never rand(): a replay must not depend on the libc or on global state. */
typedef struct cr_replay_rng {
    uint64_t s;
} cr_replay_rng;

static inline uint64_t cr_replay_rng_next(cr_replay_rng *g)
{
    g->s += 0x9e3779b97f4a7c15ULL;
    return cr_mix64(g->s); /* cr_mix64 adds the constant once more: still a bijection */
}

/* A double in [0, 1) from the top 53 bits of x. */
static inline double cr_replay_unit(uint64_t x) { return (double)(x >> 11) * 0x1.0p-53; }

/* A draw of the counter-based stream (seed, counter): random access, so a
 * draw for request i does not depend on what came before it. */
static inline uint64_t cr_replay_draw(uint64_t seed, uint64_t counter)
{
    return cr_mix64(seed ^ cr_mix64(counter));
}

/* A standard normal from two independent 64-bit draws (Box-Muller; the
 * first is moved into (0, 1] so the log is finite). */
static inline double cr_replay_normal(uint64_t x1, uint64_t x2)
{
    double u1 = 1.0 - cr_replay_unit(x1), u2 = cr_replay_unit(x2);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- the serving shards ---------------------------------------------------- */

/* Whether shard k of v takes requests (a view without events: all do). */
static inline int cr_replay_usable(const cr_replay_view *v, uint32_t k)
{
    return !v->usable || v->usable[k];
}

/* The serving shards, in index order: how many, and the j-th. */
static inline uint32_t cr_replay_n_serving(const cr_replay_view *v)
{
    return v->serving ? v->n_serving : v->shards;
}
static inline uint32_t cr_replay_serving_at(const cr_replay_view *v, uint32_t j)
{
    return v->serving ? v->serving[j] : j;
}

/* A loop over v's serving shards k, in index order: without events the
 * loop over 0 .. shards - 1 that the policies ran before them. */
#define CR_REPLAY_FOR_SERVING(v, k)                                                               \
    for (uint32_t k##_j = 0, k = 0;                                                              \
         k##_j < cr_replay_n_serving(v) && ((k = cr_replay_serving_at(v, k##_j)), 1); k##_j++)

/* ---- the prefix cache ------------------------------------------------------ */

/* One shard's LRU set of block ids: a doubly linked list of nodes (most
 * recent first) indexed by an open-addressing hash of the id. Nodes and
 * slots grow geometrically up to the capacity, so a large capacity costs
 * only what is used; every operation is O(1) per block. */
typedef struct cr_replay_cache {
    uint32_t cap;     /* blocks held at most */
    uint32_t n, n_alloc;
    struct cr_replay_node *nodes;
    uint32_t head, tail; /* most and least recently used; CR_REPLAY_NIL when empty */
    cr_htable index;      /* nodes by id */
    /* Called with evict_ctx for each id evicted to make room (not for ids
     * touched again); NULL = none. The simulator sets it so a policy can
     * hear of evictions as an engine's KV events would tell a router. */
    void (*on_evict)(void *evict_ctx, const struct cr_replay_cache *c, uint64_t id);
    void *evict_ctx;
} cr_replay_cache;

#define CR_REPLAY_NIL UINT32_MAX
_Static_assert(CR_REPLAY_NIL == CR_HTABLE_NONE, "a miss in an index reads as no node");
#define CR_REPLAY_CACHE_MAX (UINT32_MAX / 4) /* blocks: keeps the slot count in range */

/* An empty cache of cap blocks (1 .. CR_REPLAY_CACHE_MAX), without an
 * eviction hook; allocates nothing yet. */
void cr_replay_cache_init(cr_replay_cache *c, uint32_t cap);
void cr_replay_cache_free(cr_replay_cache *c);

/* How many leading blocks of ids[0 .. n) are held. Changes nothing. */
uint32_t cr_replay_cache_prefix(const cr_replay_cache *c, const uint64_t *ids, uint32_t n);

/* Makes ids[0 .. n) the most recently used, inserted last to first (so
 * ids[0] is the most recent and a prefix is evicted from its tail),
 * evicting the least recently used when full. -1 when out of memory (the
 * cache is then as if only some of them were inserted), else 0. */
int cr_replay_cache_insert(cr_replay_cache *c, const uint64_t *ids, uint32_t n);

/* For a side table indexed by node (a payload per id, as the peers'
 * tables keep): the node holding id, or CR_REPLAY_NIL; a node's index stays
 * the id's while the id is held, and is below cap. Changes nothing. */
uint32_t cr_replay_cache_find(const cr_replay_cache *c, uint64_t id);

/* Makes id the most recently used (inserting it, evicting the least
 * recently used when full) and gives its node through *node: 1 when id was
 * not held (the node is a new one or the evicted id's, so its payload is
 * stale), 0 when it was, -1 when out of memory (nothing changed). */
int cr_replay_cache_use(cr_replay_cache *c, uint64_t id, uint32_t *node);

/* Whether id is held, and its recency rank (0 = most recent) through
 * *rank when not NULL; O(n). For tests. */
int cr_replay_cache_rank(const cr_replay_cache *c, uint64_t id, uint32_t *rank);

/* ---- building a trace ------------------------------------------------------ */

/* A trace under construction: requests and blocks appended, arrays grown
 * geometrically. */
typedef struct cr_replay_builder {
    cr_replay_trace t;
    size_t cap_reqs, cap_blocks;
} cr_replay_builder;

/* Room for n more blocks; -1 when out of memory. */
int cr_replay_builder_reserve(cr_replay_builder *b, size_t n);
/* Appends r (its first_block set to the pool's end) and its n blocks
 * (already in the pool's spare room when ids is NULL); -1 when out of
 * memory. */
int cr_replay_builder_add(cr_replay_builder *b, const cr_replay_request *r, const uint64_t *ids,
                          uint32_t n);
/* Sorts the requests by t_ms (ties by first_block: the order they were
 * added) and hands the trace over to *out. */
void cr_replay_builder_finish(cr_replay_builder *b, cr_replay_trace *out);

/* The Gini of n counts (sorted in place): sum (2i - n - 1) c_i / (n sum c)
 * over the ascending c_1 .. c_n; 0 when all are 0. */
double cr_replay_gini_of(size_t *counts, size_t n);

/* The owner of n blocks under key. */
int64_t cr_replay_owner_of(const cr_owner_key *key, const uint64_t *ids, uint32_t n);

/* Requests per owner, one count per owner with requests (*n of them, in
 * owner order): a malloc'd array, or NULL when out of memory. */
size_t *cr_replay_owner_counts(const cr_replay_trace *t, size_t *n);

/* ---- requests in service by finish time (finishes.c) ---------------------- */

/* A min-heap of (finish, owner, shard): the cacheroute policy's and the
 * dynamo-kv peer's record of prefills not yet done. Zero-initialised is
 * empty. */
/* A served request as its engine would report it once its prefill ends
 * (its blocks too: the KV events a router's indexer reads). */
typedef struct cr_replay_finish {
    double at_s;
    size_t request; /* its first_block: unique per request, its id */
    int64_t owner;
    uint32_t shard;
    uint32_t prompt_tokens, cached_tokens, prefilled_from;
    double queue_wait_ms, prefill_ms, ttft_ms;
    size_t first_block; /* its blocks in the trace's pool */
    uint32_t n_blocks;
} cr_replay_finish;

typedef struct cr_replay_finishes {
    cr_replay_finish *heap;
    size_t n, cap;
} cr_replay_finishes;

/* Adds x; -1 when out of memory (nothing added). O(log n). */
int cr_replay_finishes_push(cr_replay_finishes *f, cr_replay_finish x);
/* Takes the earliest finish at or before now_s into *out: 1, or 0 when
 * none is due. The same pushes give the same order. O(log n). */
int cr_replay_finishes_pop_due(cr_replay_finishes *f, double now_s, cr_replay_finish *out);
void cr_replay_finishes_free(cr_replay_finishes *f); /* and empty again */

/* ---- a run's statistics (stats.c) --------------------------------------- */

/* When request r arrives on cluster c, seconds of virtual time. */
static inline double cr_replay_arrival_s(const cr_replay_request *r, const cr_replay_cluster *c)
{
    return r->t_ms / 1000.0 / c->scale;
}

/* ---- admission.c ---- */

/* What the door did with a request (the run's per-request record). */
enum { CR_REPLAY_DOOR_ROUTED, CR_REPLAY_DOOR_HELD, CR_REPLAY_DOOR_SHED, CR_REPLAY_DOOR_DROPPED };

/* The figures per objective class from the run's per-request TTFTs and
 * shards (in trace order, before the summary sorts them), door and
 * left_s, when each left the door (both NULL: every request routed at
 * its arrival); malloc'd, NULL when out of memory. */
cr_replay_admission_result *cr_replay_admission_figures(const cr_replay_trace *t,
                                                        const cr_replay_cluster *c,
                                                        const double *ttft_ms,
                                                        const uint32_t *shard,
                                                        const uint8_t *door,
                                                        const double *left_s);

/* What a run records as it goes, for cr_replay_summarize. */
typedef struct cr_replay_tally {
    uint32_t shards;
    size_t warmup;    /* requests before this index add no work */
    uint32_t *hits;   /* per request, trace order */
    double *ttft_ms;  /* per request; summarize hands it to the result, sorted */
    /* With events only (else NULL): per request, its shard, and whether it
     * failed (queued on a shard when it failed). */
    uint32_t *shard;
    uint8_t *failed;
    /* With foreign traffic only (else NULL): per request, whether it is
     * foreign (never routed by the policy, left out of every figure). */
    uint8_t *foreign;
    double *work_ms;  /* per shard, prefill */
    size_t with_knowledge, as_kv;
    /* measured requests the policy predicted a hit for: how many, the sum
     * of |predicted - served| and of their input tokens */
    size_t predicted;
    double predicted_error, predicted_input;
} cr_replay_tally;

/* Room for n requests on shards (with events: their shards and failures
 * too); -1 when out of memory. */
int cr_replay_tally_init(cr_replay_tally *t, size_t n, uint32_t shards, int events);
void cr_replay_tally_add(cr_replay_tally *t, size_t i, const cr_replay_request *r,
                         const cr_replay_outcome *o);
/* Request i (r) was predicted to hit predicted tokens and hit hit_tokens;
 * counted from the warm-up on. */
void cr_replay_tally_predicted(cr_replay_tally *t, size_t i, const cr_replay_request *r,
                               uint32_t predicted, uint32_t hit_tokens);
void cr_replay_tally_free(cr_replay_tally *t);

/* Where a line of an input file is, for "PATH:LINE: why". */
typedef struct cr_replay_line {
    const char *name;
    size_t line;
} cr_replay_line;

/* CR_EINVAL with err "PATH:LINE: " and the formatted why (trace.c; the
 * trace's lines and the events file's). */
cr_status cr_replay_line_fail(const cr_replay_line *at, cr_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* CR_EINVAL unless window_s is finite, > 0 and cuts the trace (not empty)
 * into at most CR_REPLAY_WINDOWS_MAX windows. */
#define CR_REPLAY_WINDOWS_MAX (1u << 24)
cr_status cr_replay_window_check(const cr_replay_trace *t, const cr_replay_cluster *c,
                                 double window_s, cr_error *err);

/* The result of a finished run: the figures from the tally, and the
 * replans' churn and dips from p->replans. Takes the tally's TTFTs. */
cr_status cr_replay_summarize(const cr_replay_trace *t, const cr_replay_cluster *c,
                              const cr_replay_policy *p, double window_s, cr_replay_tally *tally,
                              cr_replay_result *out, cr_error *err);

#endif
