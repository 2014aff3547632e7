/* Batches: a call's owners grouped by partition, in chunks of CHUNK, so
 * each partition's lock is taken once per chunk, its decay factor computed
 * once (no exp2 per arrival) and the home slots of the next few owners are
 * loading while one is probed. */
#include "internal.h"

#define CHUNK 1024 /* entries grouped at a time: about 10 KB of stack */
#define AHEAD 8    /* owners whose home slot is prefetched ahead of the probe */

typedef struct group {
    uint64_t h[CHUNK];
    uint16_t order[CHUNK];                 /* chunk positions, by partition, stable */
    uint16_t start[CR_EST_MAX_PARTS + 1];  /* partition k's run in order */
} group;

static void group_chunk(const cr_estimator *e, const int64_t *owners, size_t m, group *g)
{
    uint16_t next[CR_EST_MAX_PARTS] = {0};
    for (size_t i = 0; i < m; i++) {
        g->h[i] = cr_mix64((uint64_t)owners[i]);
        next[cr_est_part_index(e, g->h[i])]++;
    }
    unsigned sum = 0;
    for (unsigned k = 0; k < e->n_parts; k++) {
        g->start[k] = (uint16_t)sum;
        sum += next[k];
        next[k] = g->start[k];
    }
    g->start[e->n_parts] = (uint16_t)sum;
    for (size_t i = 0; i < m; i++)
        g->order[next[cr_est_part_index(e, g->h[i])]++] = (uint16_t)i;
}

/* Prefetches the home slot of the owner at position pos of g's order,
 * whichever partition it is in. */
static void prefetch_at(const cr_estimator *e, const group *g, unsigned pos)
{
    uint64_t h = g->h[g->order[pos]];
    cr_est_prefetch(&e->parts[cr_est_part_index(e, h)], h);
}

/* Work on one partition's run [begin, end) of g's order, p locked; it
 * calls prefetch_at(e, g, j + AHEAD) before working on position j, so the
 * pipeline runs on across partitions. */
typedef void (*run_fn)(cr_estimator *e, cr_est_part *p, const group *g, unsigned begin,
                       unsigned end, void *ctx);

static void for_each_run(cr_estimator *e, const group *g, run_fn fn, void *ctx)
{
    unsigned total = g->start[e->n_parts];
    for (unsigned j = 0; j < total && j < AHEAD; j++)
        prefetch_at(e, g, j);
    for (unsigned k = 0; k < e->n_parts; k++) {
        unsigned begin = g->start[k], end = g->start[k + 1];
        if (begin == end)
            continue;
        cr_est_part *p = &e->parts[k];
        pthread_mutex_lock(&p->lock);
        fn(e, p, g, begin, end, ctx);
        pthread_mutex_unlock(&p->lock);
    }
}

typedef struct record_ctx {
    const int64_t *owners;
    const double *weights; /* NULL: 1 each */
    double now;
    double *rates; /* NULL when not wanted */
} record_ctx;

static void record_run(cr_estimator *e, cr_est_part *p, const group *g, unsigned begin,
                       unsigned end, void *ctx)
{
    const record_ctx *c = ctx;
    cr_est_scale sc = cr_est_scale_for(e, p, c->now);
    for (unsigned j = begin; j < end; j++) {
        if (j + AHEAD < g->start[e->n_parts])
            prefetch_at(e, g, j + AHEAD);
        unsigned i = g->order[j];
        double add = cr_est_increment(e, c->weights ? c->weights[i] : 1.0), r;
        while ((r = cr_est_record_locked(e, p, c->owners[i], g->h[i], add, sc)) < 0) {
            /* Only when other threads emptied p meanwhile (see grouped_exact);
             * they may have moved its epoch too. */
            pthread_mutex_unlock(&p->lock);
            cr_est_evict_elsewhere(e);
            pthread_mutex_lock(&p->lock);
            sc = cr_est_scale_for(e, p, c->now);
        }
        if (c->rates)
            c->rates[i] = r;
    }
}

/* Whether recording m arrivals partition by partition gives what recording
 * them in order would: yes while no arrival can fill the table (every new
 * owner reserves room), or once it is full with no partition empty (a new
 * owner evicts in its own partition). Near the bound, the order in which
 * new owners reserve the last room matters. */
static int grouped_exact(const cr_estimator *e, size_t m)
{
    uint64_t size = atomic_load(&e->size);
    if (size + m <= e->cfg.max_owners)
        return 1;
    return size == e->cfg.max_owners && atomic_load(&e->empty_parts) == 0;
}

/* Below this many owners a batch is recorded in order, each home slot
 * loading from the start: grouping would cost a pass over every partition
 * and save no lock (a few owners seldom share a partition). */
#define SMALL 16

/* The hashes of n <= SMALL owners into h, each home slot starting to load. */
static void hash_and_prefetch(const cr_estimator *e, const int64_t *owners, size_t n,
                              uint64_t *h)
{
    for (size_t i = 0; i < n; i++) {
        h[i] = cr_mix64((uint64_t)owners[i]);
        cr_est_prefetch(&e->parts[cr_est_part_index(e, h[i])], h[i]);
    }
}

/* n <= SMALL arrivals in order, as cr_estimator_record_weighted would
 * record them, with every home slot prefetched first. */
static void record_small(cr_estimator *e, const int64_t *owners, const double *weights,
                         size_t n, double now, double *rates_out)
{
    uint64_t h[SMALL];
    hash_and_prefetch(e, owners, n, h);
    for (size_t i = 0; i < n; i++) {
        double add = cr_est_increment(e, weights ? weights[i] : 1.0);
        double r = cr_est_record_one(e, owners[i], h[i], add, now);
        if (rates_out)
            rates_out[i] = r;
    }
}

void cr_estimator_record_batch(cr_estimator *e, const int64_t *owners, const double *weights,
                               size_t n, double now, double *rates_out)
{
    group g;
    if (n <= SMALL) {
        record_small(e, owners, weights, n, now, rates_out);
        return;
    }
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        const double *w = weights ? weights + at : NULL;
        double *out = rates_out ? rates_out + at : NULL;
        if (!grouped_exact(e, m)) {
            for (size_t i = 0; i < m; i++) {
                double r = cr_estimator_record_weighted(e, owners[at + i], w ? w[i] : 1.0, now);
                if (out)
                    out[i] = r;
            }
            continue;
        }
        group_chunk(e, owners + at, m, &g);
        record_ctx c = {owners + at, w, now, out};
        for_each_run(e, &g, record_run, &c);
    }
}

typedef struct rate_ctx {
    const int64_t *owners;
    double now;
    double *rates;
} rate_ctx;

static void rate_run(cr_estimator *e, cr_est_part *p, const group *g, unsigned begin,
                     unsigned end, void *ctx)
{
    const rate_ctx *c = ctx;
    double scale = cr_est_read_g(e, p, c->now);
    for (unsigned j = begin; j < end; j++) {
        if (j + AHEAD < g->start[e->n_parts])
            prefetch_at(e, g, j + AHEAD);
        unsigned i = g->order[j];
        const cr_est_entry *s = cr_est_find(p, c->owners[i], g->h[i]);
        c->rates[i] = s ? s->r * scale : 0.0;
    }
}

void cr_estimator_rate_batch(const cr_estimator *e, const int64_t *owners, size_t n,
                             double now, double *rates_out)
{
    group g;
    if (n <= SMALL) { /* as record_small, for the same reason */
        uint64_t h[SMALL];
        hash_and_prefetch(e, owners, n, h);
        for (size_t i = 0; i < n; i++)
            rates_out[i] = cr_est_rate_one(e, owners[i], h[i], now);
        return;
    }
    for (size_t at = 0; at < n; at += CHUNK) {
        size_t m = n - at < CHUNK ? n - at : CHUNK;
        group_chunk(e, owners + at, m, &g);
        rate_ctx c = {owners + at, now, rates_out + at};
        /* Reads only: the cast lets lookups share the locking walk. */
        for_each_run((cr_estimator *)e, &g, rate_run, &c);
    }
}
