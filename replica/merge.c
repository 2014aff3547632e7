/* The merge: the one place that adds replicas' counts (replica.h says why
 * the sum is exact). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "replica.h"

#include <stddef.h>

_Static_assert(offsetof(cr_estimator_entry, owner) == 0, "cr_sort_i64 reads owners first");

double cr_replica_decayed(double count, double t_i, double t, double half_life)
{
    double dt = t - t_i;
    return dt > 0 ? count * exp2(-dt / half_life) : count;
}

cr_status cr_replica_merge(const cr_estimator_entry *v, size_t n, double t, double half_life,
                           cr_session_rate **out, size_t *n_out, cr_error *err)
{
    *out = malloc((n ? n : 1) * sizeof **out);
    *n_out = 0;
    cr_sorted_i64 *order = *out ? cr_sort_i64(v, sizeof *v, n) : NULL;
    if (!order) {
        free(*out);
        *out = NULL;
        return cr_fail(err, CR_ENOMEM, "out of memory merging %zu counts", n);
    }
    for (size_t k = 0; k < n; k++) {
        const cr_estimator_entry *e = &v[order[k].at];
        /* a foreign entry's count (1e300) is no session's rate: bounded
         * here as Plan bounds rates, so no sum overflows and no plan sees it */
        double r = fmin(cr_replica_decayed(e->count, e->t_last, t, half_life), CR_PLAN_MAX_RATE);
        if (*n_out && (*out)[*n_out - 1].owner == e->owner)
            (*out)[*n_out - 1].rate = fmin((*out)[*n_out - 1].rate + r, CR_PLAN_MAX_RATE);
        else
            (*out)[(*n_out)++] = (cr_session_rate){e->owner, r};
    }
    free(order);
    return CR_OK;
}

long cr_replica_keep_latest(cr_estimator_entry *v, size_t n)
{
    cr_sorted_i64 *order = cr_sort_i64(v, sizeof *v, n); /* by owner, v's order kept */
    cr_estimator_entry *kept = order ? malloc((n ? n : 1) * sizeof *kept) : NULL;
    if (!kept) {
        free(order);
        return -1;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) /* an owner's last record is its latest push */
        if (i + 1 == n || order[i + 1].key != order[i].key)
            kept[k++] = v[order[i].at];
    if (k) /* v may be NULL when n is 0 */
        memcpy(v, kept, k * sizeof *v);
    free(kept);
    free(order);
    return (long)k;
}
