/* Snapshots (rates, export) and restores (import) of every tracked owner.
 * A snapshot copies each partition under its lock as 16-byte (owner key,
 * payload) items and sorts them by owner (cr_sort_records: radix);
 * rates carry their rate and become the answer in place, an export carries
 * positions in a copy of the slots and is gathered from it after. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

/* The snapshot's sort item of a slot: the owner with its sign bit flipped
 * (unsigned order of the keys is signed order of the owners) and, in prev,
 * the bits of its rate at now (rates) or its position in a copy of the
 * slots (export). */
static uint64_t owner_key(int64_t owner) { return (uint64_t)owner ^ (UINT64_C(1) << 63); }

/* A cr_sort_records record (common.h): the key first, 16 bytes. */
typedef struct est_item {
    uint64_t key;
    uint64_t prev;
} est_item;
_Static_assert(sizeof(est_item) == CR_SORT_RECORD_BYTES, "est_item is a cr_sort_records record");

typedef struct gathered {
    est_item *items;
    cr_estimator_entry *raw; /* export only: the slots, items[i].prev = i */
    size_t len, cap;
} gathered;

static int reserve_room(gathered *g, size_t more)
{
    if (g->len + more <= g->cap)
        return 0;
    size_t cap = (g->len + more) * 2;
    est_item *items = realloc(g->items, cap * sizeof *items);
    if (items)
        g->items = items;
    cr_estimator_entry *raw = g->raw ? realloc(g->raw, cap * sizeof *raw) : NULL;
    if (raw)
        g->raw = raw;
    if (!items || (g->raw && !raw))
        return -1;
    g->cap = cap;
    return 0;
}

/* s into g: its rate, N times scale (rates), or its count N with t_last
 * the partition's epoch, which mean the same rate (export). */
static void take(gathered *g, const cr_est_entry *s, double scale, double t_last)
{
    est_item *it = &g->items[g->len];
    it->key = owner_key(s->owner);
    if (g->raw) {
        g->raw[g->len] = (cr_estimator_entry){s->owner, s->r, t_last};
        it->prev = g->len;
    } else {
        double rate = s->r * scale;
        memcpy(&it->prev, &rate, sizeof rate);
    }
    g->len++;
}

/* Every tracked slot into g (raw set by the caller for an export), one
 * partition at a time under its lock; -1 when out of memory. */
static int gather(const cr_estimator *e, double now, gathered *g)
{
    for (unsigned i = 0; i < e->n_parts; i++) {
        cr_est_part *p = (cr_est_part *)&e->parts[i];
        pthread_mutex_lock(&p->lock);
        int ok = reserve_room(g, p->count) == 0;
        double scale = g->raw ? 1 : cr_est_read_g(e, p, now), t_last = cr_est_export_time(e, p);
        for (size_t j = 0; ok && j < p->cap; j++)
            if (p->slots[j].r != 0)
                take(g, &p->slots[j], scale, t_last);
        pthread_mutex_unlock(&p->lock);
        if (!ok)
            return -1;
    }
    return 0;
}

/* g's items sorted by key in a malloc'd array (g's own items, or the
 * scratch, the other one freed); NULL when out of memory (g's items freed). */
static est_item *sorted_items(gathered *g)
{
    if (g->len < 2)
        return g->items;
    est_item *tmp = malloc(g->len * sizeof *tmp);
    est_item *sorted = tmp ? cr_sort_records(g->items, tmp, g->len) : NULL;
    if (!sorted) {
        free(tmp);
        free(g->items);
        return NULL;
    }
    free(sorted == g->items ? tmp : g->items);
    return sorted;
}

static int start(const cr_estimator *e, gathered *g, int raw)
{
    *g = (gathered){.cap = atomic_load(&e->size) + 16};
    g->items = malloc(g->cap * sizeof *g->items);
    g->raw = raw ? malloc(g->cap * sizeof *g->raw) : NULL;
    return g->items && (!raw || g->raw) ? 0 : -1;
}

cr_session_rate *cr_estimator_rates(const cr_estimator *e, double now, size_t *n)
{
    gathered g;
    est_item *it = NULL;
    if (start(e, &g, 0) == 0 && gather(e, now, &g) == 0)
        it = sorted_items(&g);
    else
        free(g.items);
    if (!it)
        return NULL;
    /* In place: an item and a rate are both 16 bytes, owner then payload. */
    _Static_assert(sizeof(est_item) == sizeof(cr_session_rate), "same size");
    cr_session_rate *out = (cr_session_rate *)(void *)it;
    for (size_t i = 0; i < g.len; i++) {
        est_item x;
        memcpy(&x, &it[i], sizeof x);
        cr_session_rate r = {(int64_t)(x.key ^ (UINT64_C(1) << 63)), 0};
        memcpy(&r.rate, &x.prev, sizeof r.rate);
        memcpy(&out[i], &r, sizeof r);
    }
    *n = g.len;
    return out;
}

cr_estimator_entry *cr_estimator_export(const cr_estimator *e, size_t *n)
{
    gathered g;
    est_item *it = NULL;
    if (start(e, &g, 1) == 0 && gather(e, 0, &g) == 0)
        it = sorted_items(&g);
    else
        free(g.items);
    cr_estimator_entry *out = it ? malloc((g.len ? g.len : 1) * sizeof *out) : NULL;
    enum { AHEAD = 16 }; /* the copies are read in owner order: random */
    for (size_t k = 0; out && k < g.len; k++) {
        if (k + AHEAD < g.len)
            __builtin_prefetch(&g.raw[it[k + AHEAD].prev]);
        out[k] = g.raw[it[k].prev];
    }
    free(it);
    free(g.raw);
    *n = out ? g.len : 0;
    return out;
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
        cr_est_publish(&e->parts[i]);
    }
    atomic_store(&e->size, 0);
    atomic_store(&e->empty_parts, e->n_parts);
}

/* Sizes each partition for its share of v at once, so inserting never
 * grows a table, and makes its latest t_last its epoch (so no N is
 * weighed up: nothing overflows); -1 when out of memory. */
static int presize(cr_estimator *e, const cr_estimator_entry *v, size_t n)
{
    size_t want[CR_EST_MAX_PARTS] = {0};
    double latest[CR_EST_MAX_PARTS];
    for (unsigned i = 0; i < e->n_parts; i++)
        latest[i] = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        unsigned k = cr_est_part_index(e, cr_mix64((uint64_t)v[i].owner));
        want[k]++;
        latest[k] = fmax(latest[k], v[i].t_last);
    }
    for (unsigned i = 0; i < e->n_parts; i++) {
        if (want[i] && e->cfg.clock == CR_CLOCK_SECONDS)
            cr_est_set_epoch(&e->parts[i], latest[i]);
        size_t cap = want[i] + want[i] / 3 + 16; /* under 3/4 full after the inserts */
        if (!want[i] || cap <= e->parts[i].cap)
            continue;
        cr_est_entry *slots = cr_est_alloc_slots(&cap);
        if (!slots)
            return -1;
        free(e->parts[i].slots); /* empty: import_check saw no owner */
        e->parts[i].slots = slots;
        e->parts[i].cap = cap;
        cr_est_publish(&e->parts[i]);
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
        double count = cr_est_forward(e, p, v[i].count, v[i].t_last);
        if (cr_est_insert(e, p, (cr_est_entry){v[i].owner, count}, h) != 0) {
            clear_all(e);
            return cr_fail(err, CR_ENOMEM, "out of memory restoring %zu owners", n);
        }
    }
    atomic_store(&e->size, n);
    return CR_OK;
}
