/* Private to the route component: the outstanding work per shard
 * (inflight.c) that the router (router.c) weighs under bounded and live. */
#ifndef CR_ROUTE_INTERNAL_H
#define CR_ROUTE_INTERNAL_H

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

/* Adds weight of owner on shard (reserved), expiring at now + ttl_s. A
 * full FIFO first retires its oldest item (counted evicted: at the cap the
 * oldest work counts as done). O(1). */
void cr_inflight_add(cr_inflight *w, int64_t owner, uint32_t shard, double weight, double now);

/* Retires owner's oldest outstanding item on shard, counted released,
 * looking CR_ROUTE_RELEASE_DEPTH items deep from the shard's oldest: 1, or
 * 0 when there is none that deep. */
int cr_inflight_release(cr_inflight *w, int64_t owner, uint32_t shard);

/* Outstanding work per shard (cr_inflight_reserve'd entries; exactly 0 on
 * a shard with no items) and in all. */
const double *cr_inflight_loads(const cr_inflight *w);
double cr_inflight_total(const cr_inflight *w);

/* The counters, outstanding items and allocation into out's fields. */
void cr_inflight_stats(const cr_inflight *w, cr_route_stats *out);

/* Shards reserved so far (cr_inflight_loads has this many). */
uint32_t cr_inflight_shards(const cr_inflight *w);

#endif
