/* Rate estimator: lock-striped open-addressing tables of decayed counts.
 *
 * An entry is 24 bytes (owner, r, t_last). Tables grow by 1.5x at 3/4 full,
 * so they sit between 1/2 and 3/4 full: 32..48 bytes per owner. A slot is
 * empty when r == 0, which no tracked owner can have: every arrival adds
 * w ln(2)/H (or w), at least DBL_MIN, to a non-negative value. */
#include "estimator.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARTS 64
#define EVICTION_SAMPLES 8

typedef struct entry {
    int64_t owner;
    double r;      /* decayed count at t_last; 0 = empty slot */
    double t_last; /* seconds; unused in calls mode */
} entry;

typedef struct part {
    pthread_mutex_t lock;
    entry *slots;
    size_t cap;
    size_t count;
    uint64_t rng;
} __attribute__((aligned(64))) part;

struct cr_estimator {
    cr_estimator_config cfg;
    double inc;   /* added per arrival of weight 1: ln(2)/H, or 1 in calls mode */
    double decay; /* calls mode: 0.5^(1/H) */
    unsigned n_parts;
    _Atomic uint64_t size;
    _Atomic uint64_t evictions;
    _Atomic unsigned evict_cursor;
    part parts[MAX_PARTS];
};

void cr_estimator_config_default(cr_estimator_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_estimator_options, cfg);
}

cr_status cr_estimator_config_check(const cr_estimator_config *cfg, cr_error *err)
{
    return cr_options_check(&cr_estimator_options, cfg, "", err);
}

/* Small tables get fewer partitions so that sampled eviction still compares
 * owners from a pool of about a thousand. */
static unsigned parts_for(uint64_t max_owners)
{
    unsigned p = 1;
    while (p < MAX_PARTS && (uint64_t)p * 2 * 1024 <= max_owners)
        p *= 2;
    return p;
}

cr_estimator *cr_estimator_new(const cr_estimator_config *cfg, cr_error *err)
{
    if (cr_estimator_config_check(cfg, err) != CR_OK)
        return NULL;
    cr_estimator *e = aligned_alloc(64, sizeof *e);
    if (!e) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    memset(e, 0, sizeof *e);
    e->cfg = *cfg;
    e->inc = cfg->clock == CR_CLOCK_SECONDS ? M_LN2 / cfg->half_life : 1.0;
    e->decay = pow(0.5, 1.0 / cfg->half_life);
    e->n_parts = parts_for(cfg->max_owners);
    for (unsigned i = 0; i < e->n_parts; i++) {
        pthread_mutex_init(&e->parts[i].lock, NULL);
        e->parts[i].rng = cr_mix64(i + 1);
    }
    return e;
}

void cr_estimator_free(cr_estimator *e)
{
    if (!e)
        return;
    for (unsigned i = 0; i < e->n_parts; i++) {
        pthread_mutex_destroy(&e->parts[i].lock);
        free(e->parts[i].slots);
    }
    free(e);
}

const cr_estimator_config *cr_estimator_get_config(const cr_estimator *e) { return &e->cfg; }
uint64_t cr_estimator_size(const cr_estimator *e) { return atomic_load(&e->size); }
uint64_t cr_estimator_evictions(const cr_estimator *e) { return atomic_load(&e->evictions); }

/* The partition takes the low bits of the hash, the slot the high bits
 * (multiply-shift range reduction, so capacities need not be powers of 2). */
static part *part_of(const cr_estimator *e, uint64_t h)
{
    return (part *)&e->parts[h & (e->n_parts - 1)];
}

static size_t home_slot(uint64_t h, size_t cap)
{
    return (size_t)(((unsigned __int128)h * cap) >> 64);
}

static entry *find(const part *p, int64_t owner, uint64_t h)
{
    if (!p->count)
        return NULL;
    for (size_t i = home_slot(h, p->cap);; i = i + 1 == p->cap ? 0 : i + 1) {
        entry *s = &p->slots[i];
        if (s->r == 0)
            return NULL;
        if (s->owner == owner)
            return s;
    }
}

static entry *insert_slot(entry *slots, size_t cap, uint64_t h)
{
    size_t i = home_slot(h, cap);
    while (slots[i].r != 0)
        i = i + 1 == cap ? 0 : i + 1;
    return &slots[i];
}

static int grow(part *p)
{
    size_t cap = p->cap ? p->cap + p->cap / 2 : 16;
    entry *slots = calloc(cap, sizeof *slots);
    if (!slots)
        return -1;
    for (size_t i = 0; i < p->cap; i++)
        if (p->slots[i].r != 0)
            *insert_slot(slots, cap, cr_mix64((uint64_t)p->slots[i].owner)) = p->slots[i];
    free(p->slots);
    p->slots = slots;
    p->cap = cap;
    return 0;
}

/* Backward-shift deletion keeps probe chains intact without tombstones. */
static void delete_slot(part *p, entry *victim)
{
    size_t hole = (size_t)(victim - p->slots);
    for (size_t i = hole + 1 == p->cap ? 0 : hole + 1;; i = i + 1 == p->cap ? 0 : i + 1) {
        if (p->slots[i].r == 0)
            break;
        size_t home = home_slot(cr_mix64((uint64_t)p->slots[i].owner), p->cap);
        /* Move i into the hole unless its home lies cyclically in (hole, i]. */
        int stays = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
        if (!stays) {
            p->slots[hole] = p->slots[i];
            hole = i;
        }
    }
    p->slots[hole].r = 0;
    p->count--;
}

static double rate_at(const cr_estimator *e, const entry *s, double now)
{
    if (e->cfg.clock == CR_CLOCK_CALLS)
        return s->r;
    double dt = now - s->t_last;
    return dt > 0 ? s->r * exp2(-dt / e->cfg.half_life) : s->r;
}

static uint64_t next_random(part *p)
{
    p->rng ^= p->rng << 13;
    p->rng ^= p->rng >> 7;
    p->rng ^= p->rng << 17;
    return p->rng;
}

/* Evicts the lowest-rate owner among a few sampled ones; p is locked and
 * not empty. */
static void evict_sampled(cr_estimator *e, part *p, double now)
{
    entry *victim = NULL;
    double low = 0;
    for (int k = 0; k < EVICTION_SAMPLES; k++) {
        size_t i = home_slot(next_random(p), p->cap);
        while (p->slots[i].r == 0)
            i = i + 1 == p->cap ? 0 : i + 1;
        double r = rate_at(e, &p->slots[i], now);
        if (!victim || r < low) {
            victim = &p->slots[i];
            low = r;
        }
    }
    delete_slot(p, victim);
    atomic_fetch_add(&e->evictions, 1);
}

/* Makes room for one owner in a full table when the caller's own partition
 * is empty: evicts from the next non-empty partition. Called unlocked. */
static void evict_elsewhere(cr_estimator *e, double now)
{
    unsigned start = atomic_fetch_add(&e->evict_cursor, 1);
    for (unsigned k = 0; k < e->n_parts; k++) {
        part *q = &e->parts[(start + k) & (e->n_parts - 1)];
        pthread_mutex_lock(&q->lock);
        if (q->count) {
            evict_sampled(e, q, now);
            atomic_fetch_sub(&e->size, 1);
            pthread_mutex_unlock(&q->lock);
            return;
        }
        pthread_mutex_unlock(&q->lock);
    }
}

static int reserve(cr_estimator *e)
{
    uint64_t s = atomic_load(&e->size);
    while (s < e->cfg.max_owners)
        if (atomic_compare_exchange_weak(&e->size, &s, s + 1))
            return 1;
    return 0;
}

/* add: the arrival's increment, w * inc (so w = 1 adds inc exactly). */
static double update(const cr_estimator *e, entry *s, double add, double now)
{
    if (e->cfg.clock == CR_CLOCK_CALLS) {
        s->r = s->r * e->decay + add;
        return s->r;
    }
    double dt = now - s->t_last;
    if (dt > 0) {
        s->r = s->r * exp2(-dt / e->cfg.half_life);
        s->t_last = now;
    }
    s->r += add;
    return s->r;
}

double cr_estimator_record(cr_estimator *e, int64_t owner, double now)
{
    return cr_estimator_record_weighted(e, owner, 1.0, now);
}

double cr_estimator_record_weighted(cr_estimator *e, int64_t owner, double w, double now)
{
    double add = fmax(w * e->inc, DBL_MIN); /* never 0: r == 0 marks an empty slot */
    uint64_t h = cr_mix64((uint64_t)owner);
    part *p = part_of(e, h);
    for (;;) {
        pthread_mutex_lock(&p->lock);
        entry *s = find(p, owner, h);
        if (s) {
            double r = update(e, s, add, now);
            pthread_mutex_unlock(&p->lock);
            return r;
        }
        int reserved = reserve(e);
        if (!reserved && !p->count) {
            pthread_mutex_unlock(&p->lock);
            evict_elsewhere(e, now);
            continue;
        }
        if ((p->count + 1) * 4 > p->cap * 3 && grow(p) != 0) {
            /* Out of memory: drop the arrival rather than the process. */
            if (reserved)
                atomic_fetch_sub(&e->size, 1);
            pthread_mutex_unlock(&p->lock);
            return 0;
        }
        if (!reserved)
            evict_sampled(e, p, now); /* one out, one in: size unchanged */
        *insert_slot(p->slots, p->cap, h) = (entry){owner, add, now};
        p->count++;
        pthread_mutex_unlock(&p->lock);
        return add;
    }
}

double cr_estimator_rate(const cr_estimator *e, int64_t owner, double now)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    part *p = part_of(e, h);
    pthread_mutex_lock(&p->lock);
    const entry *s = find(p, owner, h);
    double r = s ? rate_at(e, s, now) : 0.0;
    pthread_mutex_unlock(&p->lock);
    return r;
}

int cr_estimator_forget(cr_estimator *e, int64_t owner)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    part *p = part_of(e, h);
    pthread_mutex_lock(&p->lock);
    entry *s = find(p, owner, h);
    if (s) {
        delete_slot(p, s);
        atomic_fetch_sub(&e->size, 1);
    }
    pthread_mutex_unlock(&p->lock);
    return s != NULL;
}

static int cmp_owner(const void *a, const void *b)
{
    int64_t x = ((const cr_session_rate *)a)->owner, y = ((const cr_session_rate *)b)->owner;
    return (x > y) - (x < y);
}

/* Writes one tracked slot as an element of a snapshot array. */
typedef void (*put_fn)(void *dst, const cr_estimator *e, const entry *s, double now);

/* Every tracked slot through put into a malloc'd array of elements of size
 * bytes (each starting with an int64 owner), sorted by owner. */
static void *gather(const cr_estimator *e, size_t size, put_fn put, double now, size_t *n)
{
    size_t cap = atomic_load(&e->size) + 16, len = 0;
    char *out = malloc(cap * size);
    if (!out)
        return NULL;
    for (unsigned i = 0; i < e->n_parts; i++) {
        part *p = (part *)&e->parts[i];
        pthread_mutex_lock(&p->lock);
        if (len + p->count > cap) {
            size_t ncap = (len + p->count) * 2;
            char *grown = realloc(out, ncap * size);
            if (!grown) {
                pthread_mutex_unlock(&p->lock);
                free(out);
                return NULL;
            }
            out = grown;
            cap = ncap;
        }
        for (size_t j = 0; j < p->cap; j++)
            if (p->slots[j].r != 0)
                put(out + size * len++, e, &p->slots[j], now);
        pthread_mutex_unlock(&p->lock);
    }
    qsort(out, len, size, cmp_owner); /* both element types start with the owner */
    *n = len;
    return out;
}

static void put_rate(void *dst, const cr_estimator *e, const entry *s, double now)
{
    *(cr_session_rate *)dst = (cr_session_rate){s->owner, rate_at(e, s, now)};
}

static void put_entry(void *dst, const cr_estimator *e, const entry *s, double now)
{
    (void)e;
    (void)now;
    *(cr_estimator_entry *)dst = (cr_estimator_entry){s->owner, s->r, s->t_last};
}

cr_session_rate *cr_estimator_rates(const cr_estimator *e, double now, size_t *n)
{
    return gather(e, sizeof(cr_session_rate), put_rate, now, n);
}

cr_estimator_entry *cr_estimator_export(const cr_estimator *e, size_t *n)
{
    return gather(e, sizeof(cr_estimator_entry), put_entry, 0, n);
}

static cr_status import_check(const cr_estimator *e, const cr_estimator_entry *v, size_t n,
                              cr_error *err)
{
    if (atomic_load(&e->size))
        return cr_fail(err, CR_EINVAL, "the estimator must be empty, it tracks %llu owners",
                       (unsigned long long)atomic_load(&e->size));
    if (n > e->cfg.max_owners)
        return cr_fail(err, CR_EINVAL, "%zu owners exceed max_owners %llu", n,
                       (unsigned long long)e->cfg.max_owners);
    for (size_t i = 0; i < n; i++) {
        if (i && v[i].owner <= v[i - 1].owner)
            return cr_fail(err, CR_EINVAL, "owners[%zu] %lld must exceed owners[%zu] %lld", i,
                           (long long)v[i].owner, i - 1, (long long)v[i - 1].owner);
        if (!(isfinite(v[i].count) && v[i].count > 0))
            return cr_fail(err, CR_EINVAL, "owners[%zu].count must be finite and > 0, got %g",
                           i, v[i].count);
        if (!isfinite(v[i].t_last))
            return cr_fail(err, CR_EINVAL, "owners[%zu].t_last must be finite, got %g", i,
                           v[i].t_last);
    }
    return CR_OK;
}

/* Empties every partition (after a failed import). */
static void clear_all(cr_estimator *e)
{
    for (unsigned i = 0; i < e->n_parts; i++) {
        free(e->parts[i].slots);
        e->parts[i].slots = NULL;
        e->parts[i].cap = e->parts[i].count = 0;
    }
    atomic_store(&e->size, 0);
}

/* Sizes each partition for its share of v at once, so inserting never
 * grows a table; -1 when out of memory. */
static int presize(cr_estimator *e, const cr_estimator_entry *v, size_t n)
{
    size_t want[MAX_PARTS] = {0};
    for (size_t i = 0; i < n; i++)
        want[cr_mix64((uint64_t)v[i].owner) & (e->n_parts - 1)]++;
    for (unsigned i = 0; i < e->n_parts; i++) {
        size_t cap = want[i] + want[i] / 3 + 16; /* under 3/4 full after the inserts */
        if (!want[i] || cap <= e->parts[i].cap)
            continue;
        entry *slots = calloc(cap, sizeof *slots);
        if (!slots)
            return -1;
        free(e->parts[i].slots); /* empty: import_check saw no owner */
        e->parts[i].slots = slots;
        e->parts[i].cap = cap;
    }
    return 0;
}

cr_status cr_estimator_import(cr_estimator *e, const cr_estimator_entry *v, size_t n,
                              cr_error *err)
{
    cr_status st = import_check(e, v, n, err);
    if (st != CR_OK)
        return st;
    if (presize(e, v, n) != 0) {
        clear_all(e);
        return cr_fail(err, CR_ENOMEM, "out of memory restoring %zu owners", n);
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t h = cr_mix64((uint64_t)v[i].owner);
        part *p = part_of(e, h);
        if ((p->count + 1) * 4 > p->cap * 3 && grow(p) != 0) {
            clear_all(e);
            return cr_fail(err, CR_ENOMEM, "out of memory restoring %zu owners", n);
        }
        *insert_slot(p->slots, p->cap, h) = (entry){v[i].owner, v[i].count, v[i].t_last};
        p->count++;
    }
    atomic_store(&e->size, n);
    return CR_OK;
}

int cr_estimator_lookup(const cr_estimator *e, int64_t owner, cr_estimator_entry *out)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    part *p = part_of(e, h);
    pthread_mutex_lock(&p->lock);
    const entry *s = find(p, owner, h);
    if (s)
        *out = (cr_estimator_entry){s->owner, s->r, s->t_last};
    pthread_mutex_unlock(&p->lock);
    return s != NULL;
}
