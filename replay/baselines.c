/* The baseline policies (rules in replay.h). Each is one route function
 * over a shared state: the shard count, the seed and, for the two
 * consistent-hashing ones, the ring (the core's, ring.h: 64 virtual nodes
 * per shard). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "route.h"

#define CHWBL_C_NUM 5 /* c = 5/4, kept as a fraction so the bound is exact */
#define CHWBL_C_DEN 4

typedef struct baseline {
    uint32_t shards;
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
    if (b->shards == 1)
        return 0;
    uint64_t x = draw(b, r);
    uint32_t first = below(x >> 32, b->shards);
    uint32_t second = below(x & 0xffffffffu, b->shards - 1);
    second += second >= first; /* distinct from the first */
    return v->queued[second] < v->queued[first] ? second : first;
}

static uint32_t route_sticky(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    (void)v;
    return cr_ring_shard(b->ring, cr_ring_start(b->ring, r->owner));
}

/* Walks the owner's ring to the first shard below the load bound. One
 * always is (the mean is below the bound), so the walk ends within a lap. */
static uint32_t route_chwbl(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    uint64_t total = 0;
    for (uint32_t s = 0; s < b->shards; s++)
        total += v->queued[s];
    uint64_t den = (uint64_t)CHWBL_C_DEN * b->shards;
    uint64_t bound = ((total + 1) * CHWBL_C_NUM + den - 1) / den;
    size_t n = cr_ring_n_points(b->ring), start = cr_ring_start(b->ring, r->owner);
    for (size_t i = 0; i < n; i++) {
        uint32_t s = cr_ring_shard(b->ring, start + i);
        if (v->queued[s] < bound)
            return s;
    }
    return cr_ring_shard(b->ring, start);
}

static uint32_t route_least_loaded(void *state, const cr_replay_request *r,
                                   const cr_replay_view *v)
{
    (void)state;
    (void)r;
    uint32_t best = 0;
    for (uint32_t s = 1; s < v->shards; s++)
        if (v->backlog_ms[s] < v->backlog_ms[best])
            best = s;
    return best;
}

static uint32_t route_random(void *state, const cr_replay_request *r, const cr_replay_view *v)
{
    const baseline *b = state;
    (void)v;
    return below(draw(b, r) >> 32, b->shards);
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
        *b = (baseline){.shards = c->shards, .seed = c->seed};
    if (!b || (kinds[k].ring && !(b->ring = cr_ring_new(c->shards)))) {
        baseline_free(b);
        return cr_fail(err, CR_ENOMEM, "out of memory for policy %s", kinds[k].name);
    }
    *out = (cr_replay_policy){
        .name = kinds[k].name, .state = b, .route = kinds[k].route, .free = baseline_free};
    return CR_OK;
}
