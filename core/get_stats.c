/* GetStats and the scrape-time figures: the closed loop's (receipts,
 * outcomes, served hits, errors, regret, calibration), the route rule's,
 * and the table's. */
#include <string.h>

#include "internal.h"

void cr_core_stats_read(cr_core *c, cr_core_stats *out)
{
    memset(out, 0, sizeof *out);
    out->tracked_owners = cr_estimator_size(c->estimator);
    out->evictions = cr_estimator_evictions(c->estimator);
    out->imbalance = 1.0;
    cr_installed *t = cr_core_acquire(c, &out->generation);
    if (t) {
        out->admitted = cr_table_n_placements(t->table);
        out->admitted_rate = cr_table_admitted_rate_total(t->table);
        out->unadmitted_rate = cr_table_unadmitted_rate_total(t->table);
        out->imbalance = cr_table_imbalance(t->table);
    }
    cr_installed_release(t);
}

void cr_core_route_stats_read(cr_core *c, cr_route_stats *out, double *work,
                              uint32_t max_shards)
{
    cr_router_stats(c->router, core_now(c), out, work, max_shards);
}

void cr_core_loop_stats_read(cr_core *c, cr_loop_stats *out, cr_loop_shard_stats *shards,
                             uint32_t max_shards, cr_inject_calibration *gpus, uint32_t max_gpus)
{
    memset(out, 0, sizeof *out);
    if (c->receipts)
        cr_receipts_stats(c->receipts, out);
    cr_loop_figures_read(c->figures, core_now(c), out, shards, max_shards);
    out->n_gpus = cr_core_gpu_count(c);
    out->reservations_expired = cr_injector_expired(c->injector);
    for (uint32_t g = 0; g < max_gpus && g < out->n_gpus; g++)
        cr_injector_calibration(c->injector, g, &gpus[g]);
}
