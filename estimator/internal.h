/* Private to the estimator's files: the lock-striped partitions and the
 * steps of a record that estimator.c, batch.c and
 * snapshot.c share. */
#ifndef CR_ESTIMATOR_INTERNAL_H
#define CR_ESTIMATOR_INTERNAL_H

#include <float.h>
#include <pthread.h>
#include <stdatomic.h>

#include "estimator.h"


#define CR_EST_MAX_PARTS 64

/* Slots per 64-byte line: tables are 64-aligned, their capacity a multiple of it. */
#define CR_EST_LINE 4

/* 16 bytes, four to a cache line: no time per owner (forward decay). */
typedef struct cr_est_entry {
    int64_t owner;
    /* Seconds clock: the forward-decayed count N, the owner's rate at t
     * being N 2^(-(t - epoch)/H) with its partition's epoch; calls clock:
     * the count r itself. 0 marks an empty slot. */
    double r;
} cr_est_entry;

/* Seconds clock, for one time now of one partition: f = 2^((now - epoch)/H)
 * is what an arrival's increment weighs in N, g = 2^(-(now - epoch)/H) turns
 * N into a rate (g = 1 for now <= epoch: a rate is never read before its
 * partition's epoch, so it never grows). Both 1 on the calls clock. */
typedef struct cr_est_scale {
    double f, g;
} cr_est_scale;

/* The largest (now - epoch)/H an arrival may weigh at: past it the
 * partition is renormalised first (every N times 2^(-(now - epoch)/H),
 * epoch = now). 2^512 ~ 1.3e154, so N stays finite for any rate below
 * ~1e154 (weights are at most 1e9), and a renormalisation, O(partition),
 * happens at most once per 512 half-lives per partition (2.8 hours at the
 * default 20 s). A half-life far below the clock's spacing of arrivals
 * renormalises on nearly every arrival: correct, at O(partition) each. */
#define CR_EST_RENORM_AT 512.0

typedef struct cr_est_part {
    pthread_mutex_t lock;
    cr_est_entry *slots;
    size_t cap;
    size_t count;
    size_t hand; /* the CLOCK hand: where the next eviction starts looking */
    double epoch;    /* seconds clock: the time every N is relative to */
    double at;       /* the time sc is for (sc and at always agree with epoch) */
    cr_est_scale sc; /* the last scale computed, kept for arrivals at the same time */
    /* slots and cap as last published, read without the lock only to
     * prefetch a home slot before taking it (a stale pair costs a useless
     * prefetch, never a read). */
    _Atomic uintptr_t hint_slots;
    _Atomic size_t hint_cap;
} __attribute__((aligned(64))) cr_est_part;

struct cr_estimator {
    cr_estimator_config cfg;
    double inc;    /* added per arrival of weight 1: ln(2)/H, or 1 in calls mode */
    double decay;  /* calls mode: 0.5^(1/H) */
    double inv_hl; /* 1/H (0 for H = infinity: nothing decays) */
    unsigned n_parts;
    _Atomic uint64_t size;
    _Atomic uint64_t evictions;
    _Atomic unsigned evict_cursor;
    _Atomic unsigned empty_parts; /* partitions with count 0 (for batches) */
    cr_est_part parts[CR_EST_MAX_PARTS];
};

/* The partition takes the low bits of the hash, the slot the high bits
 * (multiply-shift range reduction, so capacities need not be powers of 2). */
static inline unsigned cr_est_part_index(const cr_estimator *e, uint64_t h)
{
    return (unsigned)(h & (e->n_parts - 1));
}

static inline size_t cr_est_home(uint64_t h, size_t cap)
{
    return (size_t)(((unsigned __int128)h * cap) >> 64);
}

/* A zeroed, 64-aligned table of at least *cap slots; *cap is rounded up
 * to whole lines. NULL when out of memory. */
cr_est_entry *cr_est_alloc_slots(size_t *cap);

/* Starts loading the home slot of hash h in p, locked or not. */
static inline void cr_est_prefetch(const cr_est_part *p, uint64_t h)
{
    size_t cap = atomic_load_explicit(&p->hint_cap, memory_order_relaxed);
    uintptr_t slots = atomic_load_explicit(&p->hint_slots, memory_order_relaxed);
    __builtin_prefetch((const void *)(slots + cr_est_home(h, cap) * sizeof(cr_est_entry)));
}

/* Publishes p's slots and cap (p locked) for cr_est_prefetch. */
static inline void cr_est_publish(cr_est_part *p)
{
    atomic_store_explicit(&p->hint_slots, (uintptr_t)p->slots, memory_order_relaxed);
    atomic_store_explicit(&p->hint_cap, p->cap, memory_order_relaxed);
}

/* v, or DBL_MIN when v is below it or NaN: what keeps a count from 0
 * (r == 0 marks an empty slot). A compare, not fmax: this is on every
 * arrival's path and fmax is a libm call. */
static inline double cr_est_floor(double v)
{
    return v > DBL_MIN ? v : DBL_MIN;
}

/* An arrival's increment: w * inc, never 0. */
static inline double cr_est_increment(const cr_estimator *e, double w)
{
    return cr_est_floor(w * e->inc);
}

/* Makes t p's epoch (p locked, empty or just renormalised onto t). */
static inline void cr_est_set_epoch(cr_est_part *p, double t)
{
    p->epoch = p->at = t;
    p->sc = (cr_est_scale){1, 1};
}

/* The t_last an exported count of p (locked) goes with: its N is the rate
 * as of the epoch (seconds clock); 0, unused, on the calls clock. */
static inline double cr_est_export_time(const cr_estimator *e, const cr_est_part *p)
{
    return e->cfg.clock == CR_CLOCK_SECONDS ? p->epoch : 0;
}

/* The scale for arrivals at now in p (locked): resets p's epoch to now
 * when p is empty, renormalises p first when now is more than
 * CR_EST_RENORM_AT half-lives past its epoch. Valid while p stays locked. */
cr_est_scale cr_est_scale_for(cr_estimator *e, cr_est_part *p, double now);

/* The g of the scale at now in p (locked) for reading rates: changes nothing. */
double cr_est_read_g(const cr_estimator *e, const cr_est_part *p, double now);

/* owner's slot in p (locked), or NULL. Inline, with cr_est_record_locked:
 * a batch's per-arrival work is these few instructions and one miss. */
static inline cr_est_entry *cr_est_find(const cr_est_part *p, int64_t owner, uint64_t h)
{
    if (!p->count)
        return NULL;
    for (size_t i = cr_est_home(h, p->cap);; i = i + 1 == p->cap ? 0 : i + 1) {
        cr_est_entry *s = &p->slots[i];
        if (s->r == 0)
            return NULL;
        if (s->owner == owner)
            return s;
    }
}

/* Adds an arrival adding add (with sc) to a tracked slot s; its rate just after. */
static inline double cr_est_update(const cr_estimator *e, cr_est_entry *s, double add,
                                   cr_est_scale sc)
{
    if (e->cfg.clock == CR_CLOCK_CALLS) {
        s->r = s->r * e->decay + add;
        return s->r;
    }
    s->r += cr_est_floor(add * sc.f); /* an arrival far before the epoch: DBL_MIN */
    return s->r * sc.g;
}

/* cr_est_record_locked for an owner p does not track. */
double cr_est_record_new(cr_estimator *e, cr_est_part *p, int64_t owner, uint64_t h,
                         double add, cr_est_scale sc);

/* One arrival of owner (hash h) adding add with sc (cr_est_scale_for at
 * its time), p locked. Returns the rate just after, 0 when the arrival was
 * dropped (out of memory), or -1 when the table is full and p is empty:
 * the caller unlocks p, calls cr_est_evict_elsewhere and tries again with
 * a new scale. */
static inline double cr_est_record_locked(cr_estimator *e, cr_est_part *p, int64_t owner,
                                          uint64_t h, double add, cr_est_scale sc)
{
    cr_est_entry *s = cr_est_find(p, owner, h);
    return s ? cr_est_update(e, s, add, sc) : cr_est_record_new(e, p, owner, h, add, sc);
}

/* One arrival of owner (hash h) adding add at now, its partition not
 * locked: cr_est_record_locked under the partition's lock, evicting
 * elsewhere when it must. Returns the rate just after (0: dropped). */
double cr_est_record_one(cr_estimator *e, int64_t owner, uint64_t h, double add, double now);

/* owner's rate (hash h) at now, 0 when not tracked: cr_estimator_rate. */
double cr_est_rate_one(const cr_estimator *e, int64_t owner, uint64_t h, double now);

/* Evicts one owner with about the lowest rate from p (locked, not empty):
 * N (seconds) or r (calls) compared as they are, one epoch per partition. */
void cr_est_evict(cr_estimator *e, cr_est_part *p);

/* For a new owner (hash h, count n) at a full table, p locked: puts it in
 * place of the coldest owner on the walk a lookup of h takes (from its
 * home slot to the first empty one) when that owner's count is at most n,
 * and returns 1; 0 (nothing changed) when the walk is empty or every owner
 * on it is hotter than n. An empty walk (an empty home slot) takes the
 * place of the coldest owner in the home's line that ends a run instead,
 * on the same terms. */
int cr_est_replace_on_walk(cr_estimator *e, cr_est_part *p, int64_t owner, uint64_t h, double n);

/* Makes room in a full table by evicting from the next non-empty
 * partition; called with no partition locked. */
void cr_est_evict_elsewhere(cr_estimator *e);

/* Puts s (not tracked yet, hash h) into p (locked), growing p's table
 * at 3/4 full; -1 when out of memory (nothing changed then). */
int cr_est_insert(cr_estimator *e, cr_est_part *p, cr_est_entry s, uint64_t h);

/* Backward-shift deletion of a tracked slot of p (locked). */
void cr_est_delete(cr_estimator *e, cr_est_part *p, cr_est_entry *victim);

/* The N of count as of t_last in p (locked) at p's epoch, as an arrival
 * at t_last adding count would weigh it (never 0). */
double cr_est_forward(const cr_estimator *e, const cr_est_part *p, double count, double t_last);

#endif
