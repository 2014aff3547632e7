/* The route rule, once (see route.h): plan keeps no state; bounded and
 * live read the outstanding work per shard (inflight.c) and walk the
 * owner's ring (ring.c), under one lock; ttft (the default) is ttft.c's. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint32_t cr_route_fallback_shard(int64_t owner, uint32_t n_shards)
{
    return (uint32_t)(cr_mix64((uint64_t)owner) % n_shards);
}

/* Routes are found in chunks of this many, so a batch lookup's reads
 * overlap without a heap buffer per call. */
#define CHUNK 256

/* placed[i] = the placement of routes[i].owner under t (NULL: none, or no
 * table) for the first min(n, CHUNK) routes, in one batch lookup; returns
 * how many. */
static size_t find_chunk(const cr_table *t, const cr_route_answer *routes, size_t n,
                         const cr_placement **placed)
{
    int64_t owners[CHUNK];
    n = n < CHUNK ? n : CHUNK;
    if (!t) {
        memset(placed, 0, n * sizeof *placed);
        return n;
    }
    for (size_t i = 0; i < n; i++)
        owners[i] = routes[i].owner;
    cr_table_find_batch(t, owners, n, placed);
    return n;
}

cr_router *cr_router_new(const cr_route_config *cfg)
{
    cr_router *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    if ((cfg->by != CR_ROUTE_PLAN &&
         !(r->work = cr_inflight_new(cfg->inflight_max, cfg->inflight_ttl_s))) ||
        (cfg->by == CR_ROUTE_TTFT && (cr_sessions_init(&r->sessions, cfg->inflight_max) != 0 ||
                                      cr_popular_init(&r->popular) != 0))) {
        cr_sessions_free(&r->sessions);
        cr_inflight_free(r->work);
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->lock, NULL);
    r->by = cfg->by;
    r->c = cfg->load_bound;
    r->block_tokens = cfg->block_tokens ? cfg->block_tokens : 1;
    r->index_blocks = cfg->index_blocks ? cfg->index_blocks : 1;
    r->g = cfg->miss_weight;
    r->planned = cfg->planned;
    r->model = (cr_prefill_model){.prefill = {.ms_per_token = 1}}; /* tokens as ms */
    r->max_work_ms = cfg->max_route_work_ms;
    r->stale_s = 2 * (cfg->scrape_interval_s > 0 ? cfg->scrape_interval_s : 0.1);
    if (r->work)
        cr_inflight_set_caller_max(r->work, cfg->inflight_per_caller
                                                ? cfg->inflight_per_caller
                                                : (cfg->inflight_max + 3) / 4);
    for (uint32_t s = 0; s < CR_ROUTE_INDEX_MAX_SHARDS; s++)
        r->trust[s] = 1;
    return r;
}

void cr_router_free(cr_router *r)
{
    if (!r)
        return;
    pthread_mutex_destroy(&r->lock);
    cr_inflight_free(r->work);
    cr_ring_free(r->ring);
    cr_ring_free(r->other);
    free(r->seen);
    cr_prefix_free(r->index);
    cr_prefix_free(r->cpu);
    free(r->extra);
    cr_sessions_free(&r->sessions);
    cr_popular_free(&r->popular);
    for (uint32_t s = 0; s < CR_ROUTE_INDEX_MAX_SHARDS; s++)
        cr_kvmap_free(r->kvmaps[s]);
    free(r->depth);
    free(r->keys);
    free(r->usable);
    free(r->speed);
    free(r->engines);
    free(r);
}

int cr_router_prepare(cr_router *r, uint32_t n)
{
    if (r->work && cr_inflight_reserve(r->work, n) != 0)
        return -1;
    if (r->ring && cr_ring_n_shards(r->ring) == n)
        return 0;
    int swap = r->other && cr_ring_n_shards(r->other) == n;
    cr_ring *ring = swap ? r->other : cr_ring_new(n);
    uint32_t *seen = ring ? calloc(n, sizeof *seen) : NULL;
    if (!seen) {
        if (!swap)
            cr_ring_free(ring);
        return -1;
    }
    if (swap)
        r->other = r->ring;
    else
        cr_ring_free(r->ring);
    free(r->seen);
    r->ring = ring;
    r->seen = seen;
    r->walk = 0;
    return 0;
}

/* The routes' ring or another kept for this. */
const cr_ring *cr_router_ring_for(cr_router *r, uint32_t n)
{
    if (r->ring && cr_ring_n_shards(r->ring) == n)
        return r->ring;
    if (!(r->other && cr_ring_n_shards(r->other) == n)) {
        cr_ring *other = cr_ring_new(n);
        if (!other)
            return NULL;
        cr_ring_free(r->other);
        r->other = other;
    }
    return r->other;
}

uint32_t cr_router_ring_home(cr_router *r, int64_t owner, uint32_t n)
{
    const cr_ring *ring = cr_router_ring_for(r, n);
    return ring ? cr_ring_shard(ring, cr_ring_start(ring, owner)) : UINT32_MAX;
}

uint32_t cr_router_home(cr_router *r, int64_t owner, uint32_t n_shards)
{
    uint32_t s = UINT32_MAX;
    if (r->work) {
        pthread_mutex_lock(&r->lock);
        s = cr_router_ring_home(r, owner, n_shards);
        pthread_mutex_unlock(&r->lock);
    }
    return s != UINT32_MAX ? s : cr_route_fallback_shard(owner, n_shards);
}
/* owner's shard under the plan rule, p its placement (NULL: none), over
 * shards when it has none; when that one does not serve, the first that
 * does on owner's ring (so a drained shard's owners spread over the others
 * as consistent hashing spreads them), else, the ring out of memory, the
 * next serving one by id; *admitted = whether it has one. locked: the
 * caller holds r's lock (the mask is read under it). */
static uint32_t plan_shard(cr_router *r, const cr_placement *p, int64_t owner, uint32_t shards,
                           int *admitted, int locked)
{
    *admitted = p != NULL;
    uint32_t s = p ? p->preferred_shard : cr_router_home(r, owner, shards);
    if (!atomic_load_explicit(&r->has_members, memory_order_acquire))
        return s; /* no endpoint set: every shard serves, and no lock is taken */
    if (!locked)
        pthread_mutex_lock(&r->lock);
    s = cr_router_usable_from(r, owner, s, shards);
    for (uint32_t k = 0; k < shards && !cr_router_usable(r, s); k++)
        s = s + 1 < shards ? s + 1 : 0;
    if (!locked)
        pthread_mutex_unlock(&r->lock);
    return s;
}

uint32_t cr_router_shard(cr_router *r, const cr_table *t, uint32_t n_shards, int64_t owner,
                         int *admitted)
{
    const cr_placement *p = t ? cr_table_find(t, owner) : NULL;
    return plan_shard(r, p, owner, n_shards, admitted, 0);
}


/* One bounded walk: shards looked at once each, the first under the limit
 * taken, the least loaded seen kept in case none is. */
typedef struct walk {
    cr_router *r;
    const double *loads;
    double limit;
    uint32_t looked, best;
} walk;

/* A walk over n shards' marks, taking the first shard at most limit. */
static walk walk_begin(cr_router *r, uint32_t n_shards, double limit)
{
    if (++r->walk == 0) { /* the marks wrapped: clear them */
        memset(r->seen, 0, n_shards * sizeof *r->seen);
        r->walk = 1;
    }
    return (walk){r, cr_inflight_loads(r->work), limit, 0, UINT32_MAX};
}

/* 1 when shard s takes the work: not looked at yet on this walk, and its
 * outstanding work at most the limit. */
static int takes(walk *w, uint32_t s)
{
    if (w->r->seen[s] == w->r->walk)
        return 0;
    w->r->seen[s] = w->r->walk;
    if (!cr_router_usable(w->r, s))
        return 0; /* looked at: it takes nothing */
    w->looked++;
    if (w->loads[s] <= w->limit)
        return 1;
    if (w->best == UINT32_MAX || w->loads[s] < w->loads[w->best])
        w->best = s;
    return 0;
}

/* bounded: the first choice (the preferred shard, or the ring's first),
 * the session's other shards after it (by id, cyclically), then the ring
 * from the owner's point. The limit is c x the mean with this arrival's
 * weight counted in it, so with unit weights a shard takes up to
 * ceil(c (m + 1) / R) routes of m outstanding (CHWBL's bound) rather than
 * none above the mean. With c >= 1 the least loaded shard is at most the
 * mean, so the walk always ends on a shard under the limit; the least
 * loaded seen is there for rounding. */
static uint32_t bounded(cr_router *r, const cr_table *t, const cr_placement *p, int64_t owner,
                        uint32_t first, double weight)
{
    uint32_t n = cr_ring_n_shards(r->ring);
    double limit = r->c * (cr_inflight_total(r->work) + weight) / n;
    if (cr_inflight_loads(r->work)[first] <= limit && cr_router_usable(r, first))
        return first; /* the common case, without a walk */
    walk w = walk_begin(r, n, limit);
    if (p) {
        const uint32_t *own = cr_table_shards(t, p);
        uint32_t at = 0;
        while (at + 1 < p->kb && own[at] != p->preferred_shard)
            at++;
        for (uint32_t j = 0; j < p->kb; j++)
            if (takes(&w, own[(at + j) % p->kb]))
                return own[(at + j) % p->kb];
    }
    size_t start = cr_ring_start(r->ring, owner), points = cr_ring_n_points(r->ring);
    for (size_t i = 0; i < points && w.looked < n; i++)
        if (takes(&w, cr_ring_shard(r->ring, start + i)))
            return cr_ring_shard(r->ring, start + i);
    return w.best;
}

/* live: the least outstanding work of all; a tie with the first choice
 * keeps it, other ties go to the lowest id. O(shards). */
static uint32_t live(const cr_router *r, uint32_t first)
{
    const double *loads = cr_inflight_loads(r->work);
    uint32_t best = first, n = cr_ring_n_shards(r->ring);
    best = cr_router_usable(r, best) ? best : UINT32_MAX;
    for (uint32_t s = 0; s < n; s++)
        if (cr_router_usable(r, s) && (best == UINT32_MAX || loads[s] < loads[best]))
            best = s;
    return best != UINT32_MAX ? best : first;
}

/* r locked: out's route under bounded or live, p its placement. */
static void route_one(cr_router *r, const cr_table *t, const cr_placement *p,
                      cr_route_answer *out, double weight, double now, uint64_t caller)
{
    uint32_t first = p ? p->preferred_shard
                       : cr_ring_shard(r->ring, cr_ring_start(r->ring, out->owner));
    uint32_t s = r->by == CR_ROUTE_LIVE ? live(r, first)
                                        : bounded(r, t, p, out->owner, first, weight);
    r->diverted += s != first;
    cr_inflight_add(r->work, out->owner, s, weight, now, caller);
    out->admitted = p != NULL;
    out->shard = s;
}

/* Under bounded or live; 0, or -1 (nothing routed) when out of memory. */
static int route_moving(cr_router *r, const cr_table *t, uint32_t shards,
                        const double *weights, cr_route_answer *routes, size_t n, double now,
                        uint64_t caller)
{
    pthread_mutex_lock(&r->lock);
    int st = cr_router_prepare(r, shards);
    if (st == 0)
        cr_inflight_expire(r->work, now);
    const cr_placement *placed[CHUNK];
    for (size_t i = 0, m; st == 0 && i < n; i += m) {
        m = find_chunk(t, routes + i, n - i, placed);
        for (size_t j = 0; j < m; j++)
            route_one(r, t, placed[j], &routes[i + j], weights ? weights[i + j] : 1.0, now,
                      caller);
    }
    pthread_mutex_unlock(&r->lock);
    return st;
}

uint32_t cr_router_rule_one(cr_router *r, const cr_table *t, uint32_t n, int64_t owner,
                            double weight, double now, int *admitted, uint64_t caller)
{
    const cr_placement *p = t ? cr_table_find(t, owner) : NULL;
    if (!r->work)
        return plan_shard(r, p, owner, n, admitted, 1);
    cr_route_answer out = {.owner = owner};
    route_one(r, t, p, &out, weight, now, caller);
    *admitted = out.admitted;
    return out.shard;
}

void cr_router_route(cr_router *r, const cr_table *t, uint32_t shards, const double *weights,
                     cr_route_answer *routes, size_t n, double now, uint64_t caller)
{
    if (r->by == CR_ROUTE_TTFT) {
        cr_router_place_arrivals(r, t, shards, weights, routes, n, now, caller);
        return;
    }
    if (r->work && route_moving(r, t, shards, weights, routes, n, now, caller) == 0)
        return;
    const cr_placement *placed[CHUNK];
    for (size_t i = 0, k; i < n; i += k) {
        k = find_chunk(t, routes + i, n - i, placed);
        for (size_t j = 0; j < k; j++) {
            cr_route_answer *o = &routes[i + j];
            o->shard = plan_shard(r, placed[j], o->owner, shards, &o->admitted, 0);
        }
    }
}

int cr_router_release(cr_router *r, int64_t owner, uint32_t shard, double now, uint64_t caller)
{
    if (!r->work)
        return 0;
    pthread_mutex_lock(&r->lock);
    cr_inflight_expire(r->work, now);
    int released = cr_inflight_release(r->work, owner, shard, now, caller);
    pthread_mutex_unlock(&r->lock);
    return released;
}

void cr_router_stats(cr_router *r, double now, cr_route_stats *out, double *work,
                     uint32_t max_shards)
{
    memset(out, 0, sizeof *out);
    if (work)
        memset(work, 0, max_shards * sizeof *work);
    out->by = r->by;
    pthread_mutex_lock(&r->lock);
    if (r->work) {
        cr_inflight_expire(r->work, now);
        cr_inflight_stats(r->work, out);
        out->n_shards = cr_inflight_shards(r->work);
        for (uint32_t s = 0; work && s < max_shards && s < out->n_shards; s++)
            work[s] = cr_inflight_loads(r->work)[s];
        out->bytes += cr_ring_bytes(r->ring) + cr_ring_bytes(r->other) +
                      (r->ring ? cr_ring_n_shards(r->ring) : 0) * sizeof *r->seen;
    }
    out->diverted = r->diverted;
    memcpy(out->placed, r->why, sizeof out->placed);
    memcpy(out->hit_checked, r->hit_checked, sizeof out->hit_checked);
    memcpy(out->moved, r->moved, sizeof out->moved);
    memcpy(out->hit_error_tokens, r->hit_error, sizeof out->hit_error_tokens);
    out->engine_loads = r->engine_loads;
    out->engine_stale = r->engine_stale;
    out->engine_block_mismatch = r->engine_mismatch;
    if (r->index)
        cr_prefix_stats(r->index, &out->index_blocks, &out->index_bytes);
    if (r->cpu) {
        uint64_t bytes;
        cr_prefix_stats(r->cpu, &out->index_cpu_blocks, &bytes);
        out->index_bytes += bytes;
    }
    out->bytes += out->index_bytes +
                  (r->sessions.slots ? (r->sessions.mask + 1) * sizeof *r->sessions.slots : 0) +
                  (r->popular.counts ? CR_POPULAR_ROWS * (1u << 14) * sizeof(uint16_t) : 0);
    for (uint32_t s = 0; s < CR_ROUTE_INDEX_MAX_SHARDS; s++)
        out->bytes += cr_kvmap_bytes(r->kvmaps[s]);
    pthread_mutex_unlock(&r->lock);
}
