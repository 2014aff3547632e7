/* Routing-table accessors, lookups and churn. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Huge pages where the kernel grants them on request (THP "madvise"): a
 * lookup into tens of megabytes then misses one cache line rather than
 * also the TLB. Only the whole huge pages inside the array are advised, so
 * it holds no more memory than malloc's would. */
#define HUGE_PAGE ((size_t)2 << 20)

void *cr_plan_alloc_lookup(size_t bytes)
{
    void *p = NULL;
    if (bytes < HUGE_PAGE)
        return malloc(bytes ? bytes : 1);
    if (posix_memalign(&p, HUGE_PAGE, bytes) != 0)
        return NULL;
#ifdef MADV_HUGEPAGE
    (void)madvise(p, bytes & ~(HUGE_PAGE - 1), MADV_HUGEPAGE); /* refused: only slower */
#endif
    return p;
}

void cr_table_free(cr_table *t)
{
    if (!t)
        return;
    cr_owner_index_free(&t->index);
    free(t->owners);
    free(t->placements);
    free(t->shards);
    free(t->load);
    free(t);
}

uint32_t cr_table_n_shards(const cr_table *t) { return t->n_shards; }
size_t cr_table_n_placements(const cr_table *t) { return t->n_placements; }
const double *cr_table_expected_load(const cr_table *t) { return t->load; }
double cr_table_admitted_rate_total(const cr_table *t) { return t->admitted_rate_total; }
double cr_table_unadmitted_rate_total(const cr_table *t) { return t->unadmitted_rate_total; }
double cr_table_imbalance(const cr_table *t) { return t->imbalance; }

const cr_placement *cr_table_placement(const cr_table *t, size_t i)
{
    return &t->placements[i];
}

const uint32_t *cr_table_shards(const cr_table *t, const cr_placement *p)
{
    return t->shards + p->first;
}

const cr_placement *cr_table_find(const cr_table *t, int64_t owner)
{
    size_t i = cr_owner_index_find(&t->index, owner);
    return i == SIZE_MAX ? NULL : &t->placements[i];
}

void cr_table_find_batch(const cr_table *t, const int64_t *owners, size_t n,
                         const cr_placement **out)
{
    size_t pos[CR_OWNER_INDEX_GROUP];
    if (n == 1) { /* the common RPC: nothing to overlap, so no staging */
        out[0] = cr_table_find(t, owners[0]);
        return;
    }
    for (size_t i = 0; i < n; i += CR_OWNER_INDEX_GROUP) {
        size_t m = n - i < CR_OWNER_INDEX_GROUP ? n - i : CR_OWNER_INDEX_GROUP;
        cr_owner_index_find_group(&t->index, owners + i, m, pos, t->placements,
                                  sizeof *t->placements);
        for (size_t j = 0; j < m; j++)
            out[i + j] = pos[j] == SIZE_MAX ? NULL : &t->placements[pos[j]];
    }
}

int cr_table_is_admitted(const cr_table *t, int64_t owner)
{
    return cr_table_find(t, owner) != NULL;
}

uint32_t cr_table_preferred_shard(const cr_table *t, int64_t owner, uint32_t fallback)
{
    const cr_placement *p = cr_table_find(t, owner);
    return p ? p->preferred_shard : fallback;
}

static int same_shards(const cr_table *a, const cr_placement *p, const cr_table *b,
                       const cr_placement *q)
{
    return p->kb == q->kb &&
           memcmp(a->shards + p->first, b->shards + q->first, p->kb * sizeof *a->shards) == 0;
}

cr_churn cr_table_churn_homed(const cr_table *prev, const cr_table *next,
                              uint32_t (*home)(void *ctx, int64_t owner, uint32_t n_shards),
                              void *ctx)
{
    cr_churn c = {0, 0, 0, 0};
    size_t both = 0;
    uint32_t shards = prev ? prev->n_shards : next->n_shards;
    for (size_t i = 0; i < next->n_placements; i++) {
        const cr_placement *p = &next->placements[i];
        const cr_placement *q = prev ? cr_table_find(prev, p->owner) : NULL;
        if (!q) {
            c.admitted_in++;
            c.left_home += home && (p->kb != 1 || next->shards[p->first] !=
                                                     home(ctx, p->owner, shards));
            continue;
        }
        both++;
        c.moved += !same_shards(next, p, prev, q);
    }
    c.admitted_out = (prev ? prev->n_placements : 0) - both;
    return c;
}

cr_churn cr_table_churn(const cr_table *prev, const cr_table *next)
{
    return cr_table_churn_homed(prev, next, NULL, NULL);
}

void cr_fmt_double(char *buf, size_t len, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v || v != v)
            return;
    }
}
