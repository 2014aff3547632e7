/* The merge: the one place that adds replicas' counts (replica.h says why
 * the sum is exact). */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

double cr_replica_decayed(double count, double t_i, double t, double half_life)
{
    double dt = t - t_i;
    return dt > 0 ? count * exp2(-dt / half_life) : count;
}

int cr_replica_by_owner(const void *a, const void *b)
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
    qsort(v, n, sizeof *v, cr_replica_by_owner);
    for (size_t i = 0; i < n; i++) {
        double r = cr_replica_decayed(v[i].count, v[i].t_last, t, half_life);
        if (*n_out && (*out)[*n_out - 1].owner == v[i].owner)
            (*out)[*n_out - 1].rate += r;
        else
            (*out)[(*n_out)++] = (cr_session_rate){v[i].owner, r};
    }
    return CR_OK;
}
