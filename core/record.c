/* RecordArrival, GetRates and Forget: the estimator, and the route rule. */
#include <stdlib.h>

#include "internal.h"

uint32_t cr_core_fallback_shard(int64_t owner, uint32_t n_shards)
{
    return (uint32_t)(cr_mix64((uint64_t)owner) % n_shards);
}

uint32_t cr_core_shards(const cr_core *c, const cr_installed *t)
{
    return t ? cr_table_n_shards(t->table) : c->planner.n_shards;
}

/* The route rule: an admitted owner's preferred shard, else the fallback
 * over the table's shards (the configured count before the first table). */
uint32_t cr_core_route_shard(const cr_core *c, const cr_installed *t, int64_t owner,
                             int *admitted)
{
    const cr_placement *p = t ? cr_table_find(t->table, owner) : NULL;
    *admitted = p != NULL;
    return p ? p->preferred_shard : cr_core_fallback_shard(owner, cr_core_shards(c, t));
}

static cr_route route_of(const cr_core *c, const cr_installed *t, int64_t owner, double rate)
{
    int admitted;
    uint32_t shard = cr_core_route_shard(c, t, owner, &admitted);
    return (cr_route){owner, rate, admitted, shard};
}

cr_status cr_core_record(cr_core *c, const int64_t *owners, size_t n, cr_route *routes,
                         uint64_t *generation, cr_error *err)
{
    if (n == 0)
        return cr_fail(err, CR_EINVAL, "owners must not be empty");
    uint64_t gen;
    cr_installed *t = cr_core_acquire(c, &gen); /* one table for every route */
    double now = cr_core_now(c);
    for (size_t i = 0; i < n; i++) {
        double rate = cr_estimator_record(c->estimator, owners[i], now);
        if (routes)
            routes[i] = route_of(c, t, owners[i], rate);
    }
    cr_installed_release(t);
    if (generation)
        *generation = gen;
    if (c->hooks.recorded)
        c->hooks.recorded(c->hooks.ctx, n);
    return CR_OK;
}

static cr_session_rate *listed_rates(cr_core *c, const int64_t *owners, size_t n, double now)
{
    cr_session_rate *r = malloc(n * sizeof *r);
    for (size_t i = 0; r && i < n; i++)
        r[i] = (cr_session_rate){owners[i], cr_estimator_rate(c->estimator, owners[i], now)};
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
