/* RecordArrival (and each RecordArrivals message): the checks, the
 * estimator, then the route rule (route.h) over the installed table. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* In field order: owners, then weights (empty, or one each in range). */
static cr_status check_arrivals(size_t n, const double *weights, size_t n_weights, cr_error *err)
{
    if (n == 0)
        return cr_fail(err, CR_EINVAL, "owners must not be empty");
    if (n_weights && n_weights != n)
        return cr_fail(err, CR_EINVAL, "weights must be empty or one per owner (%zu), got %zu",
                       n, n_weights);
    for (size_t i = 0; i < n_weights; i++) {
        double w = weights[i];
        if (isfinite(w) && w > 0 && w <= CR_CORE_MAX_WEIGHT)
            continue;
        char got[32];
        cr_option_number_text(w, got, sizeof got);
        return cr_fail(err, CR_EINVAL, "weights[%zu] must be in (0, %g], got %s", i,
                       CR_CORE_MAX_WEIGHT, got);
    }
    return CR_OK;
}

cr_status cr_core_record(cr_core *c, const int64_t *owners, size_t n, const double *weights,
                         size_t n_weights, cr_route_answer *routes, uint64_t *generation,
                         cr_error *err)
{
    return cr_core_record_as(c, 0, owners, n, weights, n_weights, routes, generation, err);
}

cr_status cr_core_record_as(cr_core *c, uint64_t caller, const int64_t *owners, size_t n,
                            const double *weights, size_t n_weights, cr_route_answer *routes,
                            uint64_t *generation, cr_error *err)
{
    const double *w = weights && n_weights ? weights : NULL;
    cr_status st = check_arrivals(n, w, w ? n_weights : 0, err);
    if (st != CR_OK)
        return st;
    uint64_t gen;
    cr_installed *t = cr_core_acquire(c, &gen); /* one table for every route */
    double now = core_now(c), rates[CR_CORE_BATCH];
    for (size_t at = 0; at < n; at += CR_CORE_BATCH) {
        size_t m = n - at < CR_CORE_BATCH ? n - at : CR_CORE_BATCH;
        cr_estimator_record_batch(c->estimator, owners + at, w ? w + at : NULL, m, now,
                                  routes ? rates : NULL);
        for (size_t i = 0; routes && i < m; i++)
            routes[at + i] = (cr_route_answer){.owner = owners[at + i], .rate = rates[i]};
    }
    if (routes) { /* the rule is the router's to decide */
        cr_core_route_model_update(c);
        cr_router_route(c->router, t ? t->table : NULL, cr_core_shards(c, t), w, routes, n, now,
                        caller);
    }
    cr_installed_release(t);
    cr_touched *touched = atomic_load_explicit(&c->touched, memory_order_acquire);
    if (touched)
        cr_touched_add(touched, owners, n);
    if (generation)
        *generation = gen;
    if (c->hooks.recorded)
        c->hooks.recorded(c->hooks.ctx, n);
    return CR_OK;
}
