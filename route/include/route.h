/* cacheroute route: where each arrival goes. The route rule over an
 * installed table (--route-by), the outstanding work per shard it weighs,
 * the consistent-hash ring it walks, and the owners recorded since a
 * replica's last push. The core holds one router and calls it on every
 * RecordArrival and ReportOutcome; the replay tool's sticky and chwbl
 * baselines walk the same ring.
 *
 * Weights: each arrival may weigh its work (its prompt tokens, say, or its
 * predicted prefill ms) instead of 1; outstanding work is in that unit.
 *
 * The route rule, by --route-by:
 *   plan     an owner admitted in the table goes to its preferred shard;
 *            any other owner to cr_route_fallback_shard over the table's
 *            shards. No state.
 *   bounded  affinity with a load bound. Every route answered adds its
 *            weight as outstanding work on its shard; the work goes when
 *            a ReportOutcome gives that owner and shard (its oldest there),
 *            when --inflight-ttl seconds have passed, or at the cap below.
 *            A shard takes a route while its outstanding work is at most
 *            c x the mean over the table's shards (c = --load-bound; the
 *            mean counting this arrival's weight, so with weights of 1 a
 *            shard takes up to ceil(c (m + 1) / R) of m outstanding, as
 *            consistent hashing with bounded loads does). An admitted
 *            session tries its preferred shard, then its other shards (by
 *            id, cyclically after the preferred), then the shards of its
 *            consistent-hash ring from its point on; an unadmitted session
 *            walks its ring alone, so its cold tail is a stable shard per
 *            owner rather than owner mod R. Some shard always takes it (the
 *            least loaded is at most the mean); a walk looks at each shard
 *            once, at most R of them.
 *   live     the shard with the least outstanding work of all, tracked as
 *            under bounded; a tie with the session's first choice (its
 *            preferred shard, or its ring's first) keeps it, other ties
 *            go to the lowest id. O(R) a route; kept for comparison.
 * Deterministic: the same calls in the same order give the same routes.
 *
 * Memory: outstanding work is a FIFO of at most --inflight-max (default
 * 100,000) items of 32 B (expiry, owner, shard, weight), allocated up
 * front, each linked into its shard's chain; 20 B per shard; and the ring
 * (1.5 KB per shard at most), rebuilt when the shard count changes: 3.2 MB
 * at the defaults on 8 shards. At the cap the oldest item is retired
 * first, its work counted as done (evicted). A release looks for the
 * owner's oldest item from its shard's oldest, at most
 * CR_ROUTE_RELEASE_DEPTH items deep (a shard serves about in arrival
 * order): deeper work waits for the ttl. Nothing is hashed on a route's
 * path; one short lock per batch of routes.
 */
#ifndef CR_ROUTE_H
#define CR_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "options.h"
#include "planner.h"

/* --route-by, in its choices' order. */
typedef enum cr_route_by { CR_ROUTE_PLAN, CR_ROUTE_BOUNDED, CR_ROUTE_LIVE } cr_route_by;

#define CR_ROUTE_MAX_INFLIGHT 10000000 /* --inflight-max's upper bound */
#define CR_ROUTE_RELEASE_DEPTH 256     /* items a release looks through */

typedef struct cr_route_config {
    cr_route_by by;        /* --route-by */
    double load_bound;     /* --load-bound: c */
    double inflight_ttl_s; /* --inflight-ttl */
    uint64_t inflight_max; /* --inflight-max */
} cr_route_config;

/* The rows of cr_route_config (--route-by, --load-bound, --inflight-ttl,
 * --inflight-max); top-level keys of the effective configuration. */
extern const cr_option_table cr_route_options;

/* One arrival's route. */
typedef struct cr_route {
    int64_t owner;
    double rate;              /* just after this arrival (the estimator's) */
    int admitted;             /* in the table the routes were read from */
    uint32_t preferred_shard; /* where to send it: see the rule above */
} cr_route;

/* Where plan sends an owner without warm slots: cr_mix64(owner) % n_shards.
 * Pure. */
uint32_t cr_route_fallback_shard(int64_t owner, uint32_t n_shards);

/* ---- the router --------------------------------------------------------- */

typedef struct cr_router cr_router;

/* A router for cfg (checked by the caller against cr_route_options): under
 * bounded and live its FIFO of cfg->inflight_max items is allocated here.
 * NULL when out of memory. */
cr_router *cr_router_new(const cr_route_config *cfg);
void cr_router_free(cr_router *r); /* NULL is ignored */

/* The route rule for n arrivals at now (seconds, any monotonic origin)
 * under table t (NULL: none installed) over n_shards shards (t's, or the
 * configured count before the first table): sets routes[i].admitted and
 * preferred_shard for routes[i].owner, weights[i] (NULL = 1 each) being
 * added as outstanding work under bounded and live, all in one lock. Out of
 * memory for the ring or the counters of a new shard count: the plan rule,
 * nothing added. Thread-safe. */
void cr_router_route(cr_router *r, const cr_table *t, uint32_t n_shards, const double *weights,
                     cr_route *routes, size_t n, double now);

/* owner's home under t before any load is weighed: its preferred shard
 * when t admits it, else cr_router_home over n_shards; *admitted = whether
 * t admits it. Under plan, the whole route rule. Thread-safe. */
uint32_t cr_router_shard(cr_router *r, const cr_table *t, uint32_t n_shards, int64_t owner,
                         int *admitted);

/* The home of an owner without warm slots, where the route rule sends it
 * while no shard is over the bound: cr_route_fallback_shard under plan, the
 * first shard of its ring over n_shards under bounded and live. A stable
 * replan admitting an owner should keep it here (its cache is here).
 * Thread-safe; under bounded and live one short lock (the ring for another
 * shard count than the routes' is built once and kept). */
uint32_t cr_router_home(cr_router *r, int64_t owner, uint32_t n_shards);

/* A ReportOutcome for owner on shard at now: retires its oldest
 * outstanding work there. 1 when there was some; 0 too under plan.
 * Thread-safe. */
int cr_router_release(cr_router *r, int64_t owner, uint32_t shard, double now);

/* The route rule's figures: all 0 but by under plan. */
typedef struct cr_route_stats {
    cr_route_by by;
    uint64_t outstanding; /* routes whose work is counted now */
    uint64_t queued;      /* FIFO places taken: outstanding, and released
                           * items not yet at its head */
    uint64_t capacity;    /* --inflight-max */
    double work;          /* outstanding work, in the weights' unit */
    /* Routes whose work went: by a release, by --inflight-ttl, at the cap. */
    uint64_t released, expired, evicted;
    uint64_t diverted;    /* routes to another shard than the first choice */
    uint64_t bytes;       /* the FIFO, index, counters and ring allocated now */
    uint32_t n_shards;    /* shards with counters (the most routed over) */
} cr_route_stats;

/* The figures at now into *out and each shard's outstanding work into
 * work[0..max_shards-1] (0 past n_shards; work may be NULL with max_shards
 * 0). Thread-safe; one short lock, O(max_shards). */
void cr_router_stats(cr_router *r, double now, cr_route_stats *out, double *work,
                     uint32_t max_shards);

/* ---- the consistent-hash ring --------------------------------------------
 *
 * CR_RING_VNODES virtual nodes per shard at cr_mix64 positions, sorted
 * once. An owner's walk starts at the first point at or after
 * cr_mix64(owner) and goes round clockwise; adding or removing a shard
 * moves only the owners whose walk meets its points first. The bounded
 * and live routes walk it, and the replay tool's sticky and chwbl
 * baselines use the same ring, so a cold owner's first shard is the same
 * under all three.
 *
 * Memory: 16 bytes per point and 4 to 8 bytes of start index, at most
 * CR_RING_VNODES * 24 = 1.5 KB per shard (96 MB at CR_MAX_SHARDS).
 * Immutable once built: any number of threads may read one ring. */

#define CR_RING_VNODES 64

typedef struct cr_ring cr_ring;

/* The ring of shards 0..n_shards-1 (n_shards >= 1); NULL when out of
 * memory. O(n log n) in the n_shards * CR_RING_VNODES points. */
cr_ring *cr_ring_new(uint32_t n_shards);
void cr_ring_free(cr_ring *r); /* NULL is ignored */

uint32_t cr_ring_n_shards(const cr_ring *r);
size_t cr_ring_n_points(const cr_ring *r);
size_t cr_ring_bytes(const cr_ring *r); /* its allocation; 0 for NULL */

/* Where owner's walk starts: the index of the first point at or after
 * cr_mix64(owner), wrapping to 0 past the last. O(1) expected. */
size_t cr_ring_start(const cr_ring *r, int64_t owner);

/* The shard of point i, taken modulo the points (so a walk reads start,
 * start + 1, ... without wrapping itself). */
uint32_t cr_ring_shard(const cr_ring *r, size_t i);

/* ---- touched owners --------------------------------------------------------
 *
 * The owners recorded since the last take, for a replica's push. On the hot
 * path an add only appends the owners to its thread's stripe (one short
 * lock per call, sequential writes, no hashing: a set with an index cost a
 * cache miss per owner and halved cr_core_record's throughput); repeats are
 * dropped at the take, on the replica's thread. Bounded: at most
 * max_entries owners (repeats counted) between two takes, 8 B each; past
 * that it only remembers that it overflowed, and the taker pushes every
 * owner instead. */

typedef struct cr_touched cr_touched;

/* Room for max_entries (>= 1) owners, allocated here; NULL when out of
 * memory. */
cr_touched *cr_touched_new(size_t max_entries);
void cr_touched_free(cr_touched *t);

/* Appends the n owners. Thread-safe; one lock of the calling thread's
 * stripe, O(n). */
void cr_touched_add(cr_touched *t, const int64_t *owners, size_t n);

/* Empties the set into a malloc'd array of *n distinct owners, ascending
 * (the caller frees it; NULL with *n 0 when empty); *overflowed = 1 when
 * owners were lost since the last take (or memory ran out now). Thread-safe;
 * adds racing with it land in this take or the next. */
int64_t *cr_touched_take(cr_touched *t, size_t *n, int *overflowed);

#endif
