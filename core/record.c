/* RecordArrival, GetRates and Forget: the checks and the estimator; the
 * route rule is the router's (route.h). */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

/* Owners handed to the estimator per batch: their rates fit on the stack,
 * and it groups as many at a time. */
#define BATCH 1024

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
                         size_t n_weights, cr_route *routes, uint64_t *generation,
                         cr_error *err)
{
    const double *w = weights && n_weights ? weights : NULL;
    cr_status st = check_arrivals(n, w, w ? n_weights : 0, err);
    if (st != CR_OK)
        return st;
    uint64_t gen;
    cr_installed *t = cr_core_acquire(c, &gen); /* one table for every route */
    double now = cr_core_now(c), rates[BATCH];
    for (size_t at = 0; at < n; at += BATCH) {
        size_t m = n - at < BATCH ? n - at : BATCH;
        cr_estimator_record_batch(c->estimator, owners + at, w ? w + at : NULL, m, now,
                                  routes ? rates : NULL);
        for (size_t i = 0; routes && i < m; i++)
            routes[at + i] = (cr_route){.owner = owners[at + i], .rate = rates[i]};
    }
    if (routes)
        cr_router_route(c->router, t ? t->table : NULL, cr_core_shards(c, t), w, routes, n,
                        now);
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

static cr_session_rate *listed_rates(cr_core *c, const int64_t *owners, size_t n, double now)
{
    cr_session_rate *r = malloc(n * sizeof *r);
    double rates[BATCH];
    for (size_t at = 0; r && at < n; at += BATCH) {
        size_t m = n - at < BATCH ? n - at : BATCH;
        cr_estimator_rate_batch(c->estimator, owners + at, m, now, rates);
        for (size_t i = 0; i < m; i++)
            r[at + i] = (cr_session_rate){owners[at + i], rates[i]};
    }
    return r;
}

cr_status cr_core_rates(cr_core *c, const int64_t *owners, size_t n, cr_session_rate **out,
                        size_t *n_out, uint64_t *tracked, cr_error *err)
{
    double now = cr_core_now(c);
    size_t listed = n;
    *out = n ? listed_rates(c, owners, n, now) : cr_estimator_rates(c->estimator, now, &n);
    if (!*out)
        return listed ? cr_fail(err, CR_ENOMEM, "out of memory for %zu rates", listed)
                      : cr_fail(err, CR_ENOMEM, "out of memory taking the snapshot");
    *n_out = n;
    *tracked = cr_estimator_size(c->estimator);
    return CR_OK;
}

uint32_t cr_core_forget(cr_core *c, const int64_t *owners, size_t n)
{
    uint32_t forgotten = 0;
    for (size_t i = 0; i < n; i++)
        forgotten += (uint32_t)cr_estimator_forget(c->estimator, owners[i]);
    return forgotten;
}
