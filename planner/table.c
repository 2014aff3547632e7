/* Routing-table accessors, lookups and churn. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Why a mapping of its own: a freed mapping's pages go back to the kernel
 * at once, where a freed heap block can stay resident under the next
 * arrays (a replan frees its sorted items before it builds the index, and
 * the peak is what the memory budget counts). Huge pages where the kernel
 * grants them on request (THP "madvise"): a lookup into tens of megabytes
 * then misses one cache line rather than also the TLB. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HEAD ((size_t)64) /* the size of the mapping (0: malloc'd); keeps 64-B alignment */

static void *mapped(size_t want)
{
    size_t len = (want + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    char *m = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (m == MAP_FAILED)
        return NULL;
    size_t lead = (HUGE_PAGE - (uintptr_t)m % HUGE_PAGE) % HUGE_PAGE;
    if (lead)
        munmap(m, lead);
    munmap(m + lead + len, HUGE_PAGE - lead); /* aligned both ends: huge pages fit */
#ifdef MADV_HUGEPAGE
    (void)madvise(m + lead, len, MADV_HUGEPAGE); /* refused: only slower */
#endif
    memcpy(m + lead, &len, sizeof len);
    return m + lead + HEAD;
}

void *cr_plan_alloc(size_t bytes)
{
    if (bytes > SIZE_MAX / 2)
        return NULL;
    if (bytes + HEAD >= HUGE_PAGE)
        return mapped(bytes + HEAD);
    void *p = NULL;
    if (posix_memalign(&p, HEAD, bytes + HEAD) != 0)
        return NULL;
    memset(p, 0, sizeof(size_t));
    return (char *)p + HEAD;
}

void cr_plan_free(void *p)
{
    if (!p)
        return;
    char *base = (char *)p - HEAD;
    size_t len;
    memcpy(&len, base, sizeof len);
    if (len)
        munmap(base, len);
    else
        free(base);
}

void cr_table_free(cr_table *t)
{
    if (!t)
        return;
    cr_table_index_free(&t->index);
    cr_plan_free(t->placements);
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
    const cr_table_slot *s = cr_table_index_find(&t->index, owner);
    return s ? &t->placements[s->pos1 - 1] : NULL;
}

/* slots[j] = owners[j]'s index slot (NULL: not admitted) for j < n <=
 * CR_TABLE_INDEX_GROUP. */
static void find_group(const cr_table *t, const int64_t *owners, size_t n,
                       const cr_table_slot **slots)
{
    if (n == 1) /* the common RPC: nothing to overlap, so no staging */
        slots[0] = cr_table_index_find(&t->index, owners[0]);
    else
        cr_table_index_find_group(&t->index, owners, n, slots);
}

void cr_table_find_batch(const cr_table *t, const int64_t *owners, size_t n,
                         const cr_placement **out)
{
    const cr_table_slot *slots[CR_TABLE_INDEX_GROUP];
    for (size_t i = 0; i < n; i += CR_TABLE_INDEX_GROUP) {
        size_t m = n - i < CR_TABLE_INDEX_GROUP ? n - i : CR_TABLE_INDEX_GROUP;
        find_group(t, owners + i, m, slots);
        for (size_t j = 0; j < m; j++)
            out[i + j] = slots[j] ? &t->placements[slots[j]->pos1 - 1] : NULL;
    }
}

void cr_table_preferred_batch(const cr_table *t, const int64_t *owners, size_t n,
                              uint32_t *out)
{
    const cr_table_slot *slots[CR_TABLE_INDEX_GROUP];
    for (size_t i = 0; i < n; i += CR_TABLE_INDEX_GROUP) {
        size_t m = n - i < CR_TABLE_INDEX_GROUP ? n - i : CR_TABLE_INDEX_GROUP;
        find_group(t, owners + i, m, slots);
        for (size_t j = 0; j < m; j++)
            out[i + j] = slots[j] ? slots[j]->shard : CR_TABLE_NO_SHARD;
    }
}

int cr_table_is_admitted(const cr_table *t, int64_t owner)
{
    return cr_table_index_find(&t->index, owner) != NULL;
}

uint32_t cr_table_preferred_shard(const cr_table *t, int64_t owner, uint32_t fallback)
{
    const cr_table_slot *s = cr_table_index_find(&t->index, owner);
    return s ? s->shard : fallback;
}

static int same_shards(const cr_table *a, const cr_placement *p, const cr_table *b,
                       const cr_placement *q)
{
    return p->kb == q->kb &&
           memcmp(a->shards + p->first, b->shards + q->first, p->kb * sizeof *a->shards) == 0;
}

cr_churn cr_table_churn(const cr_table *prev, const cr_table *next)
{
    cr_churn c = {0, 0, 0};
    size_t both = 0;
    for (size_t i = 0; i < next->n_placements; i++) {
        const cr_placement *p = &next->placements[i];
        const cr_placement *q = prev ? cr_table_find(prev, p->owner) : NULL;
        if (!q) {
            c.admitted_in++;
            continue;
        }
        both++;
        c.moved += !same_shards(next, p, prev, q);
    }
    c.admitted_out = (prev ? prev->n_placements : 0) - both;
    return c;
}

void cr_fmt_double(char *buf, size_t len, double v)
{
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (prec == 17 || strtod(buf, NULL) == v || v != v)
            return;
    }
}
