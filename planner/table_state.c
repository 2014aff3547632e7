/* A routing table's section of the state file: written from the table as
 * it is, read back with every count checked against the bytes that are
 * left, then finished as a fresh plan is (rule 7, the owner index). */
#include "internal.h"

#include <math.h>
#include <stdlib.h>

#include "bytes.h"

void cr_table_save(const cr_table *t, cr_buf *b)
{
    uint64_t slots = 0;
    for (size_t i = 0; i < t->n_placements; i++)
        slots += t->placements[i].kb;
    cr_buf_reserve(b, 40 + 8 * (size_t)t->n_shards + 12 * t->n_placements + 4 * slots);
    cr_buf_u32(b, t->n_shards);
    cr_buf_u64(b, t->n_placements);
    cr_buf_u64(b, slots);
    cr_buf_f64(b, t->admitted_rate_total);
    cr_buf_f64(b, t->unadmitted_rate_total);
    for (uint32_t s = 0; s < t->n_shards; s++)
        cr_buf_f64(b, t->load[s]);
    for (size_t i = 0; i < t->n_placements; i++) {
        const cr_placement *p = &t->placements[i];
        cr_buf_u64(b, (uint64_t)p->owner);
        cr_buf_u32(b, p->kb);
        for (uint32_t j = 0; j < p->kb; j++)
            cr_buf_u32(b, t->shards[p->first + j]);
    }
}

static int good_rate(double v) { return isfinite(v) && v >= 0; }

/* The header and loads into a table allocated for them. */
static cr_status load_head(cr_cursor *c, cr_table **out, uint64_t *slots, cr_error *err)
{
    uint32_t r = cr_get_u32(c);
    uint64_t m = cr_get_u64(c);
    *slots = cr_get_u64(c);
    double admitted = cr_get_f64(c), unadmitted = cr_get_f64(c);
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "table header is truncated");
    if (r < 1 || r > CR_MAX_SHARDS)
        return cr_fail(err, CR_EINVAL, "table n_shards must be in 1..%u, got %u", CR_MAX_SHARDS,
                       r);
    /* A placement takes at least 16 bytes, a slot 4 of them. */
    if (!cr_cursor_holds(c, r, 8) || !cr_cursor_holds(c, m, 16) ||
        !cr_cursor_holds(c, *slots, 4) || *slots < m)
        return cr_fail(err, CR_EINVAL,
                       "table of %u shards, %llu placements and %llu slots does not fit the "
                       "%zu bytes left",
                       r, (unsigned long long)m, (unsigned long long)*slots, c->left);
    if (!good_rate(admitted) || !good_rate(unadmitted))
        return cr_fail(err, CR_EINVAL, "table rate totals must be finite and >= 0, got %g, %g",
                       admitted, unadmitted);
    cr_table *t = cr_plan_table_alloc(r, (size_t)m);
    if (t && !(t->shards = malloc((*slots ? *slots : 1) * sizeof *t->shards))) {
        cr_table_free(t);
        t = NULL;
    }
    if (!t)
        return cr_fail(err, CR_ENOMEM, "out of memory restoring a table of %llu placements",
                       (unsigned long long)m);
    t->n_placements = (size_t)m;
    t->admitted_rate_total = admitted;
    t->unadmitted_rate_total = unadmitted;
    *out = t;
    for (uint32_t s = 0; s < r; s++)
        if (!good_rate(t->load[s] = cr_get_f64(c)))
            return cr_fail(err, CR_EINVAL, "table load[%u] must be finite and >= 0, got %g", s,
                           t->load[s]);
    return CR_OK;
}

static cr_status load_placement(cr_cursor *c, cr_table *t, size_t i, uint64_t *used,
                                uint64_t slots, cr_error *err)
{
    cr_placement *p = &t->placements[i];
    p->owner = (int64_t)cr_get_u64(c);
    p->kb = cr_get_u32(c);
    p->first = *used;
    if (c->failed)
        return cr_fail(err, CR_EINVAL, "table placements[%zu] is truncated", i);
    if (p->kb < 1 || p->kb > t->n_shards || p->kb > slots - *used)
        return cr_fail(err, CR_EINVAL,
                       "table placements[%zu].kb must be in 1..%u within %llu slots, got %u", i,
                       t->n_shards, (unsigned long long)slots, p->kb);
    for (uint32_t j = 0; j < p->kb; j++) {
        uint32_t s = t->shards[*used + j] = cr_get_u32(c);
        if (c->failed)
            return cr_fail(err, CR_EINVAL, "table placements[%zu] is truncated", i);
        if (s >= t->n_shards || (j && s <= t->shards[*used + j - 1]))
            return cr_fail(err, CR_EINVAL,
                           "table placements[%zu].shards[%u] %u must be < n_shards %u and "
                           "ascend",
                           i, j, s, t->n_shards);
    }
    *used += p->kb;
    return CR_OK;
}

/* Rule 7 and the index; a repeated owner is an error. */
static cr_status finish(cr_table *t, cr_error *err)
{
    cr_plan_rule7(t);
    if (cr_plan_index_init(t) != CR_OK)
        return cr_fail(err, CR_ENOMEM, "out of memory indexing a restored table");
    for (size_t i = 0; i < t->n_placements; i++) {
        size_t at = cr_owner_index_insert(&t->index, i);
        if (at != i)
            return cr_fail(err, CR_EINVAL, "table placements[%zu].owner %lld repeats "
                           "placements[%zu]", i, (long long)t->placements[i].owner, at);
    }
    return CR_OK;
}

cr_status cr_table_load(cr_cursor *c, cr_table **out, cr_error *err)
{
    cr_table *t = NULL;
    uint64_t slots = 0, used = 0;
    *out = NULL;
    cr_status st = load_head(c, &t, &slots, err);
    for (size_t i = 0; st == CR_OK && i < t->n_placements; i++)
        st = load_placement(c, t, i, &used, slots, err);
    if (st == CR_OK && used != slots)
        st = cr_fail(err, CR_EINVAL, "table placements hold %llu slots, the header says %llu",
                     (unsigned long long)used, (unsigned long long)slots);
    if (st == CR_OK)
        st = finish(t, err);
    if (st != CR_OK) {
        cr_table_free(t);
        return st;
    }
    *out = t;
    return CR_OK;
}
