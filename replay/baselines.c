/* The baseline policies (rules in replay.h). Each is one route function
 * over a shared state: the seed and, for the two consistent-hashing ones,
 * the ring (the core's, ring.h: 64 virtual nodes per shard).
 *
 * Each chooses among the view's serving shards. The ring holds every slot
 * a run may open and a walk skips the slots not serving: a point's place
 * depends only on its shard and virtual node, so that is the ring rebuilt
 * over the serving shards, and a join or a removal moves only the owners
 * whose walk meets its points first. Without events every shard serves
 * and each rule is what it was before them. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "ring.h"
#include "route.h"

#define CHWBL_C_NUM 5 /* c = 5/4, kept as a fraction so the bound is exact */
#define CHWBL_C_DEN 4

typedef struct baseline {
    uint64_t seed;
    cr_ring *ring; /* NULL when not needed */
} baseline;

/* A uniform integer below n from 32 random bits (multiply-shift). */
static uint32_t below(uint64_t bits32, uint32_t n) { return (uint32_t)((bits32 * n) >> 32); }

static uint64_t draw(const baseline *b, const cr_replay_request *r)
{
    return cr_replay_draw(b->seed, r->first_block);
}

static uint32_t route_flat_lb(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    uint32_t n = cr_replay_n_serving(v);
    if (n == 1)
        return cr_replay_serving_at(v, 0);
    uint64_t x = draw(b, r);
    uint32_t first = below(x >> 32, n);
    uint32_t second = below(x & 0xffffffffu, n - 1);
    second += second >= first; /* distinct from the first */
    first = cr_replay_serving_at(v, first);
    second = cr_replay_serving_at(v, second);
    return v->queued[second] < v->queued[first] ? second : first;
}

#define ANY_LOAD UINT64_MAX

/* The first serving shard on the walk from point start whose queue is
 * below bound (ANY_LOAD: the first serving one); UINT32_MAX when a lap
 * finds none. */
static uint32_t walk(const baseline *b, const cr_replay_view *v, size_t start, uint64_t bound)
{
    for (size_t i = 0, n = cr_ring_n_points(b->ring); i < n; i++) {
        uint32_t s = cr_ring_shard(b->ring, start + i);
        if (cr_replay_usable(v, s) && (bound == ANY_LOAD || v->queued[s] < bound))
            return s;
    }
    return UINT32_MAX;
}

static uint32_t route_sticky(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    return walk(b, v, cr_ring_start(b->ring, r->owner), ANY_LOAD);
}

/* Walks the owner's ring to the first serving shard below the load bound.
 * One always is (their mean is below the bound), so the walk ends within a
 * lap. */
static uint32_t route_chwbl(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    uint64_t total = 0;
    CR_REPLAY_FOR_SERVING(v, s)
        total += v->queued[s];
    uint64_t den = (uint64_t)CHWBL_C_DEN * cr_replay_n_serving(v);
    uint64_t bound = ((total + 1) * CHWBL_C_NUM + den - 1) / den;
    size_t start = cr_ring_start(b->ring, r->owner);
    uint32_t s = walk(b, v, start, bound);
    return s != UINT32_MAX ? s : walk(b, v, start, ANY_LOAD);
}

static uint32_t route_least_loaded(void *state, const cr_replay_request *r,
                                   const cr_replay_view *v)
{
    (void)state;
    (void)r;
    uint32_t best = cr_replay_serving_at(v, 0);
    CR_REPLAY_FOR_SERVING(v, s)
        if (v->backlog_ms[s] < v->backlog_ms[best])
            best = s;
    return best;
}

static uint32_t route_random(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    return cr_replay_serving_at(v, below(draw(b, r) >> 32, cr_replay_n_serving(v)));
}

static void baseline_free(void *state)
{
    baseline *b = state;
    if (b)
        cr_ring_free(b->ring);
    free(b);
}

static const struct {
    const char *name;
    uint32_t (*route)(void *, const cr_replay_request *, const cr_replay_view *);
    int ring;
} kinds[] = {
    {"flat-lb", route_flat_lb, 0},           {"sticky", route_sticky, 1},
    {"chwbl", route_chwbl, 1},               {"least-loaded", route_least_loaded, 0},
    {"random", route_random, 0},
};

cr_status cr_replay_baseline(const char *name, const cr_replay_cluster *c, cr_replay_policy *out,
                             cr_error *err)
{
    memset(out, 0, sizeof *out);
    size_t k = 0, n = sizeof kinds / sizeof kinds[0];
    while (k < n && strcmp(kinds[k].name, name) != 0)
        k++;
    if (k == n)
        return cr_fail(err, CR_EINVAL,
                       "unknown policy \"%.32s\" (flat-lb, sticky, chwbl, least-loaded, random)",
                       name);
    cr_status st = cr_replay_cluster_check(c, err);
    if (st != CR_OK)
        return st;
    baseline *b = calloc(1, sizeof *b);
    if (b)
        *b = (baseline){.seed = c->seed};
    if (!b || (kinds[k].ring && !(b->ring = cr_ring_new(cr_replay_slots(c))))) {
        baseline_free(b);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy %s", kinds[k].name);
    }
    *out = (cr_replay_policy){
        .name = kinds[k].name, .state = b, .route = kinds[k].route, .free = baseline_free};
    return CR_OK;
}
