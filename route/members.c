/* Which shards take requests (route.h, cr_router_members): an endpoint set's
 * usable slots and capacity weights, and what a departed engine's shard
 * leaves behind. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

uint32_t cr_router_usable_from(cr_router *r, int64_t key, uint32_t s, uint32_t n)
{
    const cr_ring *ring = cr_router_usable(r, s) ? NULL : cr_router_ring_for(r, n);
    if (!ring)
        return s; /* usable, or no ring to walk (out of memory) */
    size_t start = cr_ring_start(ring, key), points = cr_ring_n_points(ring);
    for (size_t i = 0; i < points; i++)
        if (cr_router_usable(r, cr_ring_shard(ring, start + i)))
            return cr_ring_shard(ring, start + i);
    return s;
}

/* r locked: drops what the router keeps of shard s. Sessions there keep
 * their shard with no tokens: nothing is predicted cached for them, and
 * their next request still counts as moved off a shard that left. */
static void forget_shard(cr_router *r, uint32_t s)
{
    if (r->index && s < cr_prefix_shards(r->index))
        cr_prefix_clear(r->index, s);
    if (r->cpu && s < cr_prefix_shards(r->cpu))
        cr_prefix_clear(r->cpu, s);
    if (s < CR_ROUTE_INDEX_MAX_SHARDS) {
        cr_kvmap_free(r->kvmaps[s]);
        r->kvmaps[s] = NULL;
        r->trust[s] = 1;
    }
    if (r->work)
        cr_inflight_clear_shard(r->work, s);
    cr_engine_forget(r, s);
    for (uint64_t i = 0; r->sessions.slots && i <= r->sessions.mask; i++)
        if (r->sessions.slots[i].shard == s)
            r->sessions.slots[i].tokens = 0;
}

int64_t cr_router_members(cr_router *r, uint32_t n, const uint8_t *usable, const double *speed,
                          const uint8_t *forget)
{
    uint8_t *u = NULL;
    double *w = NULL;
    if (n && ((usable && !(u = malloc(n))) || (speed && !(w = malloc(n * sizeof *w))))) {
        free(u);
        return -1;
    }
    if (u)
        memcpy(u, usable, n);
    if (w)
        memcpy(w, speed, n * sizeof *w);
    pthread_mutex_lock(&r->lock);
    uint8_t *old = r->usable; /* for who leaves with this change */
    uint32_t old_n = r->n_members;
    free(r->speed);
    r->usable = u;
    r->speed = w;
    r->n_members = n;
    int64_t leaving = 0;
    for (uint64_t i = 0; r->sessions.slots && i <= r->sessions.mask; i++) {
        uint32_t s = r->sessions.slots[i].shard;
        leaving += s != UINT32_MAX && cr_members_usable(old, old_n, s) &&
                   !cr_router_usable(r, s);
    }
    free(old);
    atomic_store_explicit(&r->has_members, 1, memory_order_release);
    for (uint32_t s = 0; forget && s < n; s++)
        if (forget[s])
            forget_shard(r, s);
    pthread_mutex_unlock(&r->lock);
    return leaving;
}
