/* The consistent-hash ring (ring.h): points sorted by position, ties by
 * shard, so the same shard count gives the same ring everywhere. A walk's
 * start is found through buckets of the position's top bits (at least as
 * many as points, so about one point each) rather than by bisection: the
 * route's hot path, and a bisection's branches mispredict. */
#include "ring.h"

#include <stdlib.h>

#include "common.h"

typedef struct point {
    uint64_t h;
    uint32_t shard;
} point;

struct cr_ring {
    uint32_t n_shards;
    size_t n;
    point *points;
    uint32_t *bucket; /* per top-bits value: the first point at or after it */
    unsigned shift;   /* 64 - log2(buckets) */
};

static int by_point(const void *pa, const void *pb)
{
    const point *a = pa, *b = pb;
    if (a->h != b->h)
        return a->h < b->h ? -1 : 1;
    return (a->shard > b->shard) - (a->shard < b->shard);
}

/* A virtual node's position. Hashed twice: owners are hashed once
 * (cr_mix64(owner)), and small owner ids (session numbers) would otherwise
 * land exactly on shard 0's points, all of them. */
static uint64_t point_hash(uint32_t shard, uint32_t k)
{
    return cr_mix64(cr_mix64((uint64_t)shard << 32 | k) + 1);
}

/* Fills the buckets of r's sorted points. */
static void index_points(cr_ring *r, size_t n_buckets)
{
    size_t i = 0;
    for (size_t b = 0; b < n_buckets; b++) {
        uint64_t lowest = (uint64_t)b << r->shift;
        while (i < r->n && r->points[i].h < lowest)
            i++;
        r->bucket[b] = (uint32_t)i;
    }
}

cr_ring *cr_ring_new(uint32_t n_shards)
{
    size_t n = (size_t)n_shards * CR_RING_VNODES, n_buckets = 1;
    unsigned bits = 0;
    while (n_buckets < n) {
        n_buckets *= 2;
        bits++;
    }
    cr_ring *r = calloc(1, sizeof *r);
    if (!r || !(r->points = malloc(n * sizeof *r->points)) ||
        !(r->bucket = malloc(n_buckets * sizeof *r->bucket))) {
        cr_ring_free(r);
        return NULL;
    }
    for (uint32_t s = 0; s < n_shards; s++)
        for (uint32_t k = 0; k < CR_RING_VNODES; k++)
            r->points[(size_t)s * CR_RING_VNODES + k] = (point){point_hash(s, k), s};
    qsort(r->points, n, sizeof *r->points, by_point);
    r->n_shards = n_shards;
    r->n = n;
    r->shift = 64 - bits; /* n >= 64 points, so bits >= 6 */
    index_points(r, n_buckets);
    return r;
}

void cr_ring_free(cr_ring *r)
{
    if (r) {
        free(r->points);
        free(r->bucket);
    }
    free(r);
}

uint32_t cr_ring_n_shards(const cr_ring *r) { return r->n_shards; }
size_t cr_ring_n_points(const cr_ring *r) { return r->n; }
size_t cr_ring_bytes(const cr_ring *r)
{
    return r ? sizeof *r + r->n * sizeof *r->points +
                   ((size_t)1 << (64 - r->shift)) * sizeof *r->bucket
             : 0;
}

size_t cr_ring_start(const cr_ring *r, int64_t owner)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    size_t i = r->bucket[h >> r->shift];
    while (i < r->n && r->points[i].h < h)
        i++;
    return i == r->n ? 0 : i;
}

uint32_t cr_ring_shard(const cr_ring *r, size_t i)
{
    if (i >= r->n) /* a walk's start + k: rarely past the end, and a division is slow */
        i %= r->n;
    return r->points[i].shard;
}
