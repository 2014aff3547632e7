/* Snapshots (rates, export) and restores (import) of every tracked owner.
 * A snapshot copies each partition under its lock, then sorts by owner with
 * the planner's radix sort: (owner key, position) pairs, then one pass that
 * moves each element to its place. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "estimator_parts.h"
#include "internal.h"

/* Writes one tracked slot as an element of a snapshot array. */
typedef void (*put_fn)(void *dst, const cr_estimator *e, const cr_est_entry *s, double now);

/* Every tracked slot through put into a malloc'd array of elements of size
 * bytes (each starting with an int64 owner), in table order. */
static char *gather(const cr_estimator *e, size_t size, put_fn put, double now, size_t *n)
{
    size_t cap = atomic_load(&e->size) + 16, len = 0;
    char *out = malloc(cap * size);
    if (!out)
        return NULL;
    for (unsigned i = 0; i < e->n_parts; i++) {
        cr_est_part *p = (cr_est_part *)&e->parts[i];
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
    *n = len;
    return out;
}

/* v's n elements of size bytes, each starting with an int64 owner, in a
 * new malloc'd array sorted by owner; v is freed either way. NULL when
 * out of memory. */
static void *sort_by_owner(char *v, size_t n, size_t size)
{
    cr_plan_item *a = malloc((n ? n : 1) * sizeof *a), *tmp = malloc((n ? n : 1) * sizeof *tmp);
    cr_plan_item *sorted = a && tmp ? a : NULL;
    for (size_t i = 0; sorted && i < n; i++) {
        int64_t owner;
        memcpy(&owner, v + i * size, sizeof owner);
        /* The sign bit flipped: unsigned order of the keys is signed order. */
        a[i] = (cr_plan_item){.key = (uint64_t)owner ^ (UINT64_C(1) << 63), .prev = i};
    }
    if (sorted && n)
        sorted = cr_plan_radix_sort(a, tmp, n);
    if (sorted) {
        free(sorted == a ? tmp : a);
        a = sorted;
        tmp = NULL;
    }
    char *out = sorted ? malloc((n ? n : 1) * size) : NULL;
    enum { AHEAD = 16 };
    for (size_t k = 0; out && k < n; k++) {
        if (k + AHEAD < n)
            __builtin_prefetch(v + sorted[k + AHEAD].prev * size);
        memcpy(out + k * size, v + sorted[k].prev * size, size);
    }
    free(a);
    free(tmp);
    free(v);
    return out;
}

static void *snapshot(const cr_estimator *e, size_t size, put_fn put, double now, size_t *n)
{
    char *v = gather(e, size, put, now, n);
    return v ? sort_by_owner(v, *n, size) : NULL;
}

static void put_rate(void *dst, const cr_estimator *e, const cr_est_entry *s, double now)
{
    *(cr_session_rate *)dst = (cr_session_rate){s->owner, cr_est_rate_at(e, s, now)};
}

static void put_entry(void *dst, const cr_estimator *e, const cr_est_entry *s, double now)
{
    (void)e;
    (void)now;
    *(cr_estimator_entry *)dst = (cr_estimator_entry){s->owner, s->r, s->t_last};
}

cr_session_rate *cr_estimator_rates(const cr_estimator *e, double now, size_t *n)
{
    return snapshot(e, sizeof(cr_session_rate), put_rate, now, n);
}

cr_estimator_entry *cr_estimator_export(const cr_estimator *e, size_t *n)
{
    return snapshot(e, sizeof(cr_estimator_entry), put_entry, 0, n);
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
    atomic_store(&e->empty_parts, e->n_parts);
}

/* Sizes each partition for its share of v at once, so inserting never
 * grows a table; -1 when out of memory. */
static int presize(cr_estimator *e, const cr_estimator_entry *v, size_t n)
{
    size_t want[CR_EST_MAX_PARTS] = {0};
    for (size_t i = 0; i < n; i++)
        want[cr_mix64((uint64_t)v[i].owner) & (e->n_parts - 1)]++;
    for (unsigned i = 0; i < e->n_parts; i++) {
        size_t cap = want[i] + want[i] / 3 + 16; /* under 3/4 full after the inserts */
        if (!want[i] || cap <= e->parts[i].cap)
            continue;
        cr_est_entry *slots = calloc(cap, sizeof *slots);
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
        cr_est_part *p = &e->parts[cr_est_part_index(e, h)];
        if (cr_est_insert(e, p, (cr_est_entry){v[i].owner, v[i].count, v[i].t_last}, h) != 0) {
            clear_all(e);
            return cr_fail(err, CR_ENOMEM, "out of memory restoring %zu owners", n);
        }
    }
    atomic_store(&e->size, n);
    return CR_OK;
}
