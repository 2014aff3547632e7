/* The plan: validate, order by rate, admit within the budget, place (LPT).
 *
 * Memory and memory traffic are what matter at a million sessions: sessions
 * are radix-sorted as 16-byte (rate key, owner) pairs, and everything after
 * the sort walks arrays front to back. The peak stays under 50 bytes per
 * session (measured by `planner_bench 1000000 64 3`). */
#include "internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void set_error(cr_error *err, const char *fmt_field, const char *what, double v)
{
    char num[40];
    cr_fmt_double(num, sizeof num, v);
    snprintf(err->msg, sizeof err->msg, "%s %s, got %s", fmt_field, what, num);
}

cr_status cr_planner_config_check(const cr_planner_config *cfg, cr_error *err)
{
    return cr_options_check(&cr_planner_options, cfg, "config.", err);
}

/* Rule 1: at most CR_PLAN_MAX_ENTRIES entries, every rate finite, >= 0 and
 * at most CR_PLAN_MAX_RATE (so every sum of rates is finite), no owner
 * twice. Reports the first bad entry in input order. */
cr_status cr_plan_check_rates(const cr_session_rate *rates, size_t n, cr_error *err)
{
    char field[48];
    if (n > CR_PLAN_MAX_ENTRIES) {
        snprintf(err->msg, sizeof err->msg, "rates: %zu entries, at most %zu", n,
                 CR_PLAN_MAX_ENTRIES);
        return CR_ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(rates[i].rate) || rates[i].rate < 0) {
            snprintf(field, sizeof field, "rates[%zu].rate", i);
            set_error(err, field, "must be finite and >= 0", rates[i].rate);
            return CR_EINVAL;
        }
        if (rates[i].rate > CR_PLAN_MAX_RATE) {
            snprintf(field, sizeof field, "rates[%zu].rate", i);
            set_error(err, field, "must be at most 1e+15", rates[i].rate);
            return CR_EINVAL;
        }
    }
    return CR_OK;
}

/* Strictly ascending owners (an estimator snapshot) hold no duplicate:
 * one pass instead of an index of every owner. */
static int owners_ascend(const cr_session_rate *rates, size_t n)
{
    for (size_t i = 1; i < n; i++)
        if (rates[i].owner <= rates[i - 1].owner)
            return 0;
    return 1;
}

cr_status cr_plan_validate(const cr_session_rate *rates, size_t n, cr_error *err)
{
    cr_status st = cr_plan_check_rates(rates, n, err);
    if (st != CR_OK || owners_ascend(rates, n))
        return st;
    cr_owner_index ix;
    if (cr_owner_index_init(&ix, n, n, rates, sizeof *rates) != CR_OK) {
        snprintf(err->msg, sizeof err->msg, "out of memory validating %zu rates", n);
        return CR_ENOMEM;
    }
    for (size_t i = 0; i < n && st == CR_OK; i++) {
        size_t first = cr_owner_index_insert(&ix, i);
        if (first != i) {
            snprintf(err->msg, sizeof err->msg, "rates[%zu].owner %lld duplicates rates[%zu].owner",
                     i, (long long)rates[i].owner, first);
            st = CR_EINVAL;
        }
    }
    cr_owner_index_free(&ix);
    return st;
}

/* Sessions are sorted in rate order as cr_plan_items: the rate is kept as
 * the sort key, so the planner walks the sorted array front to back and
 * never goes back to the input. */
double cr_plan_item_rate(const cr_plan_item *it)
{
    uint64_t bits = ~(it->key | (UINT64_C(1) << 63));
    double rate;
    memcpy(&rate, &bits, sizeof rate);
    return rate;
}

/* Rules 2 and 3: the non-zero rates by decreasing rate, ties in input order
 * (the radix sort is stable). Returns a malloc'd array of *m items, or NULL. */
static cr_plan_item *order_by_rate(const cr_session_rate *rates, size_t n, size_t *m)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += rates[i].rate > 0;
    *m = k;
    cr_plan_item *a = malloc((k ? k : 1) * sizeof *a);
    cr_plan_item *tmp = malloc((k ? k : 1) * sizeof *tmp);
    if (!a || !tmp) {
        free(a);
        free(tmp);
        return NULL;
    }
    k = 0;
    for (size_t i = 0; i < n; i++) {
        if (rates[i].rate > 0) {
            uint64_t bits;
            memcpy(&bits, &rates[i].rate, sizeof bits);
            a[k++] = (cr_plan_item){.key = ~bits, .owner = rates[i].owner};
        }
    }
    cr_plan_item *sorted = k ? cr_sort_records(a, tmp, k) : a;
    if (!sorted) {
        free(a);
        free(tmp);
        return NULL;
    }
    free(sorted == a ? tmp : a);
    return sorted;
}

/* Eq. 1: shards a session of this rate needs, at most R. */
uint32_t cr_plan_kb(double rate, double qcap, uint32_t r)
{
    double q = ceil(rate / qcap);
    if (q >= (double)r)
        return r;
    return q < 1 ? 1 : (uint32_t)q;
}

/* Rule 4: fills t->placements (owner, kb) in admission order and keeps the
 * admitted items at the front of items, in order. Returns the total number
 * of shard slots they hold. */
static uint64_t admit(cr_table *t, const cr_planner_config *cfg, cr_plan_item *items, size_t m)
{
    double budget = (double)cfg->n_shards * cfg->warm_slots_per_shard;
    uint64_t used = 0;
    size_t n_adm = 0;
    for (size_t i = 0; i < m; i++) {
        double rate = cr_plan_item_rate(&items[i]);
        uint32_t kb = cr_plan_kb(rate, cfg->qcap, cfg->n_shards);
        if ((double)(used + kb) <= budget) {
            t->placements[n_adm] = (cr_placement){items[i].owner, used, kb, 0};
            used += kb;
            t->admitted_rate_total += rate;
            items[n_adm++] = items[i];
        } else {
            t->unadmitted_rate_total += rate;
        }
    }
    t->n_placements = n_adm;
    return used;
}

static int heap_less(const cr_shard_heap *h, uint32_t a, uint32_t b)
{
    return h->load[a] < h->load[b] || (h->load[a] == h->load[b] && a < b);
}

static void heap_sift_down(cr_shard_heap *h, uint32_t i)
{
    uint32_t x = h->id[i];
    for (;;) {
        uint32_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && heap_less(h, h->id[c + 1], h->id[c]))
            c++;
        if (!heap_less(h, h->id[c], x))
            break;
        h->id[i] = h->id[c];
        i = c;
    }
    h->id[i] = x;
}

void cr_shard_heap_push(cr_shard_heap *h, uint32_t x)
{
    uint32_t i = h->n++;
    while (i > 0) {
        uint32_t p = (i - 1) / 2;
        if (!heap_less(h, x, h->id[p]))
            break;
        h->id[i] = h->id[p];
        i = p;
    }
    h->id[i] = x;
}

static uint32_t heap_pop(cr_shard_heap *h)
{
    uint32_t top = h->id[0];
    h->id[0] = h->id[--h->n];
    if (h->n)
        heap_sift_down(h, 0);
    return top;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

static void sort_shards(uint32_t *s, uint32_t k)
{
    if (k > 32) {
        qsort(s, k, sizeof *s, cmp_u32);
        return;
    }
    for (uint32_t i = 1; i < k; i++) {
        uint32_t x = s[i], j = i;
        for (; j > 0 && s[j - 1] > x; j--)
            s[j] = s[j - 1];
        s[j] = x;
    }
}

void cr_plan_lpt(cr_shard_heap *h, double *load, uint32_t *mine, uint32_t kb, double share)
{
    if (kb == 1) {
        mine[0] = h->id[0];
        load[mine[0]] += share;
        heap_sift_down(h, 0);
        return;
    }
    for (uint32_t j = 0; j < kb; j++)
        mine[j] = heap_pop(h);
    for (uint32_t j = 0; j < kb; j++) {
        load[mine[j]] += share;
        cr_shard_heap_push(h, mine[j]);
    }
    sort_shards(mine, kb);
}

/* Rules 5 and 6. */
static void place(cr_table *t, const cr_plan_item *items, uint32_t *heap_ids)
{
    uint32_t r = t->n_shards;
    double start = t->unadmitted_rate_total > 0 ? t->unadmitted_rate_total / r : 0.0;
    cr_shard_heap h = {heap_ids, 0, t->load};
    for (uint32_t s = 0; s < r; s++) {
        t->load[s] = start;
        h.id[h.n++] = s; /* equal loads: ascending ids already form a heap */
    }
    for (size_t i = 0; i < t->n_placements; i++) {
        const cr_placement *p = &t->placements[i];
        cr_plan_lpt(&h, t->load, t->shards + p->first, p->kb, cr_plan_item_rate(&items[i]) / p->kb);
    }
}

/* Rule 7, plus each placement's preferred shard. */
void cr_plan_rule7(cr_table *t)
{
    double max = 0, sum = 0;
    for (uint32_t s = 0; s < t->n_shards; s++) {
        sum += t->load[s];
        if (t->load[s] > max)
            max = t->load[s];
    }
    double mean = sum / t->n_shards;
    t->imbalance = mean > 0 ? max / mean : 1.0;
    for (size_t i = 0; i < t->n_placements; i++) {
        cr_placement *p = &t->placements[i];
        const uint32_t *s = t->shards + p->first;
        uint32_t best = s[0];
        for (uint32_t j = 1; j < p->kb; j++)
            if (t->load[s[j]] < t->load[best])
                best = s[j]; /* ids ascend, so ties keep the smaller id */
        p->preferred_shard = best;
    }
}

cr_status cr_plan_index_init(cr_table *t)
{
    size_t n = t->n_placements;
    if (!(t->owners = cr_plan_alloc_lookup(n * sizeof *t->owners)))
        return CR_ENOMEM;
    for (size_t i = 0; i < n; i++)
        t->owners[i] = t->placements[i].owner;
    return cr_owner_index_init(&t->index, n, n, t->owners, sizeof *t->owners);
}

cr_status cr_plan_finish(cr_table *t)
{
    cr_plan_rule7(t);
    if (cr_plan_index_init(t) != CR_OK)
        return CR_ENOMEM;
    for (size_t i = 0; i < t->n_placements; i++)
        cr_owner_index_insert(&t->index, i);
    return CR_OK;
}

/* The table with room for m placements; shards come after admission. */
cr_table *cr_plan_table_alloc(uint32_t r, size_t m)
{
    cr_table *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->n_shards = r;
    t->load = malloc(r * sizeof *t->load);
    t->placements = cr_plan_alloc_lookup(m * sizeof *t->placements);
    if (!t->load || !t->placements) {
        cr_table_free(t);
        return NULL;
    }
    return t;
}

/* A plan build() gave up on: refused by the size check (err filled), or
 * out of memory. */
typedef struct size_gate {
    cr_plan_size_check check;
    void *ctx;
    cr_error *err;
    int refused;
} size_gate;

/* Rules 4 to 7 over the sorted items; frees nothing it was given. */
static cr_table *build(const cr_planner_config *cfg, cr_plan_item *items, size_t m, size_gate *g)
{
    uint32_t *heap_ids = malloc(cfg->n_shards * sizeof *heap_ids);
    cr_table *t = cr_plan_table_alloc(cfg->n_shards, m);
    if (!heap_ids || !t)
        goto fail;
    uint64_t total_kb = admit(t, cfg, items, m);
    cr_plan_size size = {cfg->n_shards, t->n_placements, total_kb};
    if (g->check && g->check(g->ctx, &size, g->err) != 0) {
        g->refused = 1;
        goto fail;
    }
    if (total_kb > SIZE_MAX / sizeof *t->shards)
        goto fail;
    t->shards = malloc((total_kb ? total_kb : 1) * sizeof *t->shards);
    if (!t->shards)
        goto fail;
    place(t, items, heap_ids);
    free(heap_ids);
    return t;
fail:
    free(heap_ids);
    cr_table_free(t);
    return NULL;
}

cr_status cr_planner_plan_checked(const cr_planner_config *cfg, const cr_session_rate *rates,
                                  size_t n, cr_plan_size_check check, void *ctx, cr_table **out,
                                  cr_error *err)
{
    *out = NULL;
    err->msg[0] = '\0';
    cr_status st = cr_planner_config_check(cfg, err);
    if (st != CR_OK || (st = cr_plan_validate(rates, n, err)) != CR_OK)
        return st;
    size_t m;
    size_gate gate = {check, ctx, err, 0};
    cr_plan_item *items = order_by_rate(rates, n, &m);
    cr_table *t = items ? build(cfg, items, m, &gate) : NULL;
    free(items); /* before the owner index: it bounds the peak */
    if (t && cr_plan_finish(t) != CR_OK) {
        cr_table_free(t);
        t = NULL;
    }
    if (!t) {
        if (!gate.refused)
            snprintf(err->msg, sizeof err->msg, "out of memory planning %zu sessions", n);
        return CR_ENOMEM;
    }
    *out = t;
    return CR_OK;
}

cr_status cr_planner_plan(const cr_planner_config *cfg, const cr_session_rate *rates, size_t n,
                          cr_table **out, cr_error *err)
{
    return cr_planner_plan_checked(cfg, rates, n, NULL, NULL, out, err);
}
