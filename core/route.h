/* Internal to the core: the route rules' state. The outstanding work per
 * shard (inflight.c), and the router that applies --route-by over it and
 * the ring (route.c). */
#ifndef CR_CORE_ROUTE_H
#define CR_CORE_ROUTE_H

#include "core.h"

typedef struct cr_installed cr_installed; /* internal.h */
typedef struct cr_router cr_router;

/* ---- inflight.c: outstanding work ---- */

/* Work routed and not yet done: a FIFO of at most cap items (expiry,
 * owner, shard, weight) in arrival order, each in its shard's chain, and
 * per shard the outstanding work and items. Not thread-safe: the router's
 * lock guards it. */
typedef struct cr_inflight cr_inflight;

/* cap in 1..CR_CORE_MAX_INFLIGHT; ttl_s > 0. The FIFO is allocated here
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
 * looking CR_CORE_RELEASE_DEPTH items deep from the shard's oldest: 1, or
 * 0 when there is none that deep. */
int cr_inflight_release(cr_inflight *w, int64_t owner, uint32_t shard);

/* Outstanding work per shard (cr_inflight_reserve'd entries; exactly 0 on
 * a shard with no items) and in all. */
const double *cr_inflight_loads(const cr_inflight *w);
double cr_inflight_total(const cr_inflight *w);

/* The counters, outstanding items and allocation into out's fields. */
void cr_inflight_stats(const cr_inflight *w, cr_core_route_stats *out);

/* Shards reserved so far (cr_inflight_loads has this many). */
uint32_t cr_inflight_shards(const cr_inflight *w);

/* ---- route.c: the router ---- */

/* The state of --route-by bounded or live (plan keeps none): the
 * outstanding work, the ring and the walk's marks. NULL when out of
 * memory. */
cr_router *cr_router_new(const cr_core_config *cfg);
void cr_router_free(cr_router *r);

/* The route rule for n arrivals at now under t (NULL = no table): sets
 * routes[i].admitted and preferred_shard for routes[i].owner, weights[i]
 * (NULL = 1 each) being added as outstanding work under bounded and live,
 * all in one lock. Out of memory for the ring or the counters of a new
 * shard count: the plan rule, nothing added. */
void cr_core_route(cr_core *c, const cr_installed *t, const double *weights, cr_route *routes,
                   size_t n, double now);

/* A ReportOutcome for owner on shard: retires its oldest outstanding work
 * there. 1 when there was some; 0 too under plan. */
int cr_core_route_release(cr_core *c, int64_t owner, uint32_t shard, double now);

#endif
