/* The merge: the one place that adds replicas' counts (replica.h says why
 * the sum is exact). */
#include <math.h>
#include <stdlib.h>

#include "replica.h"

double cr_replica_decayed(double count, double t_i, double t, double half_life)
{
    double dt = t - t_i;
    return dt > 0 ? count * exp2(-dt / half_life) : count;
}

static int by_owner(const void *a, const void *b)
{
    int64_t x = ((const cr_estimator_entry *)a)->owner;
    int64_t y = ((const cr_estimator_entry *)b)->owner;
    return (x > y) - (x < y);
}

cr_status cr_replica_merge(cr_estimator_entry *v, size_t n, double t, double half_life,
                           cr_session_rate **out, size_t *n_out, cr_error *err)
{
    *out = malloc((n ? n : 1) * sizeof **out);
    *n_out = 0;
    if (!*out)
        return cr_fail(err, CR_ENOMEM, "out of memory merging %zu counts", n);
    qsort(v, n, sizeof *v, by_owner);
    for (size_t i = 0; i < n; i++) {
        double r = cr_replica_decayed(v[i].count, v[i].t_last, t, half_life);
        if (*n_out && (*out)[*n_out - 1].owner == v[i].owner)
            (*out)[*n_out - 1].rate += r;
        else
            (*out)[(*n_out)++] = (cr_session_rate){v[i].owner, r};
    }
    return CR_OK;
}

/* An entry and its place in push order, for keeping the last. */
typedef struct placed {
    cr_estimator_entry e;
    size_t at;
} placed;

static int by_owner_then_latest(const void *a, const void *b)
{
    const placed *x = a, *y = b;
    if (x->e.owner != y->e.owner)
        return (x->e.owner > y->e.owner) - (x->e.owner < y->e.owner);
    return (x->at < y->at) - (x->at > y->at);
}

long cr_replica_keep_latest(cr_estimator_entry *v, size_t n)
{
    placed *p = malloc((n ? n : 1) * sizeof *p);
    if (!p)
        return -1;
    for (size_t i = 0; i < n; i++)
        p[i] = (placed){v[i], i};
    qsort(p, n, sizeof *p, by_owner_then_latest);
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (!k || v[k - 1].owner != p[i].e.owner)
            v[k++] = p[i].e;
    free(p);
    return (long)k;
}
