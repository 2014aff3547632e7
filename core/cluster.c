/* What a replica's sync thread asks of the core (core.h, "replicas"): the
 * owners touched since its last push, plans from the cluster's rates, and
 * installs of the leader's table under the leader's generation. */
#include <stdlib.h>

#include "internal.h"

cr_status cr_core_track_touched(cr_core *c, size_t max_entries, cr_error *err)
{
    if (atomic_load(&c->touched))
        return cr_fail(err, CR_EINVAL, "the core already tracks touched owners");
    cr_touched *t = cr_touched_new(max_entries ? max_entries : 1);
    if (!t)
        return cr_fail(err, CR_ENOMEM, "out of memory tracking %zu touched owners", max_entries);
    atomic_store_explicit(&c->touched, t, memory_order_release);
    return CR_OK;
}

cr_estimator_entry *cr_core_export(cr_core *c, size_t *n)
{
    return cr_estimator_export(c->estimator, n);
}

cr_estimator_entry *cr_core_touched_take(cr_core *c, size_t *n, int *all)
{
    cr_touched *t = atomic_load_explicit(&c->touched, memory_order_acquire);
    size_t k = 0;
    *n = 0;
    *all = 0;
    int64_t *owners = t ? cr_touched_take(t, &k, all) : NULL;
    if (*all) {
        free(owners);
        return cr_core_export(c, n);
    }
    cr_estimator_entry *out = k ? malloc(k * sizeof *out) : NULL;
    if (k && !out) { /* lost the set: push everything next time */
        free(owners);
        *all = 1;
        return cr_core_export(c, n);
    }
    for (size_t i = 0; i < k; i++)
        *n += (size_t)cr_estimator_lookup(c->estimator, owners[i], &out[*n]);
    free(owners);
    return out;
}

static uint32_t home_of(void *ctx, int64_t owner, uint32_t n_shards)
{
    return cr_core_home_shard(ctx, owner, n_shards);
}

cr_status cr_core_cluster_plan(cr_core *c, const cr_session_rate *rates, size_t n,
                               cr_table **out, cr_error *err)
{
    cr_installed *prev = cr_core_acquire(c, NULL);
    cr_replan_prev from = {prev ? prev->table : NULL, home_of, c};
    cr_status st = cr_planner_replan(&c->planner, &c->replan, &from, rates, n, out, err);
    cr_installed_release(prev);
    return st;
}

/* Both installs: t current as generation, reported to hooks->planned by
 * by (NULL: not reported) as a plan started at started_s. */
static cr_status install(cr_core *c, cr_table *t, uint64_t generation, const char *by,
                         double started_s, cr_error *err)
{
    uint64_t now;
    cr_installed_release(cr_core_acquire(c, &now));
    if (!generation || generation > CR_CORE_MAX_GENERATION || generation <= now) {
        cr_table_free(t);
        if (!generation || generation > CR_CORE_MAX_GENERATION)
            return cr_fail(err, CR_EINVAL, "generation must be in 1..%llu, got %llu",
                           (unsigned long long)CR_CORE_MAX_GENERATION,
                           (unsigned long long)generation);
        return cr_fail(err, CR_ESTATE,
                       "generation %llu does not move forward from the installed %llu",
                       (unsigned long long)generation, (unsigned long long)now);
    }
    cr_installed *held = cr_installed_new(t);
    if (!held)
        return cr_fail(err, CR_ENOMEM, "out of memory installing generation %llu",
                       (unsigned long long)generation);
    cr_core_plan_result res = {.hold = &held->ref, .table = held->table};
    double done = cr_core_publish(c, held, 1, generation, by ? &res : NULL);
    if (by)
        cr_core_report_plan(c, by, done - started_s, &res, NULL);
    cr_core_plan_result_free(&res);
    return CR_OK;
}

cr_status cr_core_install_as(cr_core *c, cr_table *t, uint64_t generation, cr_error *err)
{
    return install(c, t, generation, NULL, 0, err);
}

cr_status cr_core_install_planned(cr_core *c, cr_table *t, uint64_t generation,
                                  double started_s, cr_error *err)
{
    return install(c, t, generation, "leader", started_s, err);
}

cr_status cr_core_seed(cr_core *c, const cr_estimator_entry *v, size_t n, cr_error *err)
{
    if (cr_estimator_size(c->estimator))
        return cr_fail(err, CR_EINVAL, "the estimator already tracks %llu owners",
                       (unsigned long long)cr_estimator_size(c->estimator));
    return cr_estimator_import(c->estimator, v, n, err);
}

const cr_estimator_config *cr_core_estimator_config(const cr_core *c)
{
    return cr_estimator_get_config(c->estimator);
}

uint32_t cr_core_n_shards(const cr_core *c) { return c->planner.n_shards; }
