/* Rate estimator: lock-striped open-addressing tables of decayed counts.
 *
 * An entry is 16 bytes (owner, r). Tables are 64-byte aligned, whole lines,
 * and grow by 1.5x (rounded up to a line) at 3/4 full, so
 * they sit between 1/2 and 3/4 full: 21..32 bytes per owner. A slot is
 * empty when r == 0, which no tracked owner can have: every arrival adds
 * at least DBL_MIN to a non-negative value, and a renormalisation floors
 * at DBL_MIN. Forward decay (the seconds clock's epochs and scales) is
 * decay.c's, eviction evict.c's, batches
 * batch.c's, snapshots and restores snapshot.c's.
 * Not on htable.h: entries live in the slots, four to a line, sized 1.5x. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

_Static_assert(sizeof(cr_est_entry) == 16, "a slot is 16 bytes: four to a cache line");

void cr_estimator_config_default(cr_estimator_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_estimator_options, cfg);
}

cr_status cr_estimator_config_check(const cr_estimator_config *cfg, cr_error *err)
{
    return cr_options_check(&cr_estimator_options, cfg, "", err);
}

/* Small tables get fewer partitions so that each holds a couple of
 * thousand owners: eviction compares neighbours within one partition. */
static unsigned parts_for(uint64_t max_owners)
{
    unsigned p = 1;
    while (p < CR_EST_MAX_PARTS && (uint64_t)p * 2 * 1024 <= max_owners)
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
    e->inv_hl = 1.0 / cfg->half_life;
    e->n_parts = parts_for(cfg->max_owners);
    atomic_store(&e->empty_parts, e->n_parts);
    for (unsigned i = 0; i < e->n_parts; i++) {
        pthread_mutex_init(&e->parts[i].lock, NULL);
        cr_est_set_epoch(&e->parts[i], 0);
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

static cr_est_entry *insert_slot(cr_est_entry *slots, size_t cap, uint64_t h)
{
    size_t i = cr_est_home(h, cap);
    while (slots[i].r != 0)
        i = i + 1 == cap ? 0 : i + 1;
    return &slots[i];
}

cr_est_entry *cr_est_alloc_slots(size_t *cap)
{
    *cap = (*cap + CR_EST_LINE - 1) / CR_EST_LINE * CR_EST_LINE;
    cr_est_entry *slots = aligned_alloc(64, *cap * sizeof *slots);
    if (slots)
        memset(slots, 0, *cap * sizeof *slots);
    return slots;
}

static int grow(cr_est_part *p)
{
    size_t cap = p->cap ? p->cap + p->cap / 2 : 16;
    cr_est_entry *slots = cr_est_alloc_slots(&cap);
    if (!slots)
        return -1;
    for (size_t i = 0; i < p->cap; i++)
        if (p->slots[i].r != 0)
            *insert_slot(slots, cap, cr_mix64((uint64_t)p->slots[i].owner)) = p->slots[i];
    free(p->slots);
    p->slots = slots;
    p->cap = cap;
    p->hand = 0;
    cr_est_publish(p);
    return 0;
}

void cr_est_delete(cr_estimator *e, cr_est_part *p, cr_est_entry *victim)
{
    size_t hole = (size_t)(victim - p->slots);
    for (size_t i = hole + 1 == p->cap ? 0 : hole + 1;; i = i + 1 == p->cap ? 0 : i + 1) {
        if (p->slots[i].r == 0)
            break;
        size_t home = cr_est_home(cr_mix64((uint64_t)p->slots[i].owner), p->cap);
        /* Move i into the hole unless its home lies cyclically in (hole, i]. */
        int stays = hole <= i ? (hole < home && home <= i) : (hole < home || home <= i);
        if (!stays) {
            p->slots[hole] = p->slots[i];
            hole = i;
        }
    }
    p->slots[hole].r = 0;
    if (--p->count == 0)
        atomic_fetch_add(&e->empty_parts, 1);
}

/* Whether one more owner would take p over 3/4 full. */
static int full(const cr_est_part *p)
{
    return (p->count + 1) * 4 > p->cap * 3;
}

int cr_est_insert(cr_estimator *e, cr_est_part *p, cr_est_entry s, uint64_t h)
{
    if (full(p) && grow(p) != 0)
        return -1;
    *insert_slot(p->slots, p->cap, h) = s;
    if (p->count++ == 0)
        atomic_fetch_sub(&e->empty_parts, 1);
    return 0;
}

static int reserve(cr_estimator *e)
{
    uint64_t s = atomic_load(&e->size);
    while (s < e->cfg.max_owners)
        if (atomic_compare_exchange_weak(&e->size, &s, s + 1))
            return 1;
    return 0;
}

double cr_est_record_new(cr_estimator *e, cr_est_part *p, int64_t owner, uint64_t h,
                         double add, cr_est_scale sc)
{
    int reserved = reserve(e);
    if (!reserved && !p->count)
        return -1;
    double n = cr_est_floor(add * sc.f); /* calls clock: f is 1, and add >= DBL_MIN */
    if (!reserved) {
        if (cr_est_replace_on_walk(e, p, owner, h, n))
            return n * sc.g;
        cr_est_evict(e, p); /* one out, one in: size unchanged, and no growth */
    }
    if (cr_est_insert(e, p, (cr_est_entry){owner, n}, h) != 0) {
        /* Out of memory (only when reserved): drop the arrival, not the process. */
        atomic_fetch_sub(&e->size, 1);
        return 0;
    }
    return n * sc.g;
}

double cr_estimator_record(cr_estimator *e, int64_t owner, double now)
{
    return cr_estimator_record_weighted(e, owner, 1.0, now);
}

double cr_est_record_one(cr_estimator *e, int64_t owner, uint64_t h, double add, double now)
{
    cr_est_part *p = &e->parts[cr_est_part_index(e, h)];
    pthread_mutex_lock(&p->lock);
    double r;
    while ((r = cr_est_record_locked(e, p, owner, h, add, cr_est_scale_for(e, p, now))) < 0) {
        pthread_mutex_unlock(&p->lock);
        cr_est_evict_elsewhere(e);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return r;
}

double cr_estimator_record_weighted(cr_estimator *e, int64_t owner, double w, double now)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    cr_est_prefetch(&e->parts[cr_est_part_index(e, h)], h); /* the miss overlaps the lock */
    return cr_est_record_one(e, owner, h, cr_est_increment(e, w), now);
}

double cr_estimator_rate(const cr_estimator *e, int64_t owner, double now)
{
    return cr_est_rate_one(e, owner, cr_mix64((uint64_t)owner), now);
}

double cr_est_rate_one(const cr_estimator *e, int64_t owner, uint64_t h, double now)
{
    cr_est_part *p = (cr_est_part *)&e->parts[cr_est_part_index(e, h)];
    pthread_mutex_lock(&p->lock);
    const cr_est_entry *s = cr_est_find(p, owner, h);
    double r = s ? s->r * cr_est_read_g(e, p, now) : 0.0;
    pthread_mutex_unlock(&p->lock);
    return r;
}

int cr_estimator_forget(cr_estimator *e, int64_t owner)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    cr_est_part *p = &e->parts[cr_est_part_index(e, h)];
    pthread_mutex_lock(&p->lock);
    cr_est_entry *s = cr_est_find(p, owner, h);
    if (s) {
        cr_est_delete(e, p, s);
        atomic_fetch_sub(&e->size, 1);
    }
    pthread_mutex_unlock(&p->lock);
    return s != NULL;
}

int cr_estimator_lookup(const cr_estimator *e, int64_t owner, cr_estimator_entry *out)
{
    uint64_t h = cr_mix64((uint64_t)owner);
    cr_est_part *p = (cr_est_part *)&e->parts[cr_est_part_index(e, h)];
    pthread_mutex_lock(&p->lock);
    const cr_est_entry *s = cr_est_find(p, owner, h);
    if (s)
        *out = (cr_estimator_entry){s->owner, s->r, cr_est_export_time(e, p)};
    pthread_mutex_unlock(&p->lock);
    return s != NULL;
}
