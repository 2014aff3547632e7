/* The core's handle: construction, the clock, the installed table, and the
 * calls that only pass through to one component. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static double real_clock(void *ctx)
{
    const cr_core *c = ctx;
    return cr_mono_s() - c->epoch;
}

double cr_core_now(const cr_core *c) { return c->clock.now(c->clock.ctx); }

static void installed_free(cr_ref *ref)
{
    cr_installed *t = (cr_installed *)ref; /* ref is the first member */
    cr_table_free(t->table);
    free(t);
}

cr_installed *cr_core_acquire(cr_core *c, uint64_t *generation)
{
    return (cr_installed *)cr_published_acquire(&c->table, generation);
}

void cr_installed_release(cr_installed *t) { cr_ref_release(t ? &t->ref : NULL); }

cr_installed *cr_installed_new(cr_table *table)
{
    cr_installed *t = malloc(sizeof *t);
    if (!t) {
        cr_table_free(table);
        return NULL;
    }
    cr_ref_init(&t->ref, installed_free);
    t->table = table;
    return t;
}

uint64_t cr_core_install(cr_core *c, cr_installed *t, uint64_t as)
{
    cr_ref_retain(&t->ref); /* the published slot's own */
    if (!as)
        return cr_published_swap(&c->table, &t->ref);
    cr_published_swap_as(&c->table, &t->ref, as);
    return as;
}

static cr_status check_config(const cr_core_config *cfg, cr_error *err)
{
    cr_status st = cr_planner_config_check(&cfg->planner, err);
    if (st == CR_OK)
        st = cr_replan_config_check(&cfg->replan, err);
    if (st == CR_OK)
        st = cr_options_check(&cr_core_options, cfg, "", err);
    if (st == CR_OK)
        st = cr_options_check(&cr_route_options, &cfg->route, "", err);
    if (st == CR_OK)
        st = cr_options_check(&cr_core_state_options, cfg, "", err);
    return st;
}

/* The components; NULL members on failure, err filled. */
static cr_status create_parts(cr_core *c, const cr_core_config *cfg, cr_error *err)
{
    cr_probe_config pc = cfg->probe;
    pc.on_snapshot = c->hooks.probed;
    pc.on_snapshot_ctx = c->hooks.ctx;
    if (!(c->estimator = cr_estimator_new(&cfg->estimator, err)) ||
        !(c->injector = cr_injector_new(&cfg->inject, err)) ||
        !(c->prober = cr_prober_start(&pc, err)))
        return CR_EINVAL;
    if ((cfg->receipts && !(c->receipts = cr_receipts_new(cfg->receipts))) ||
        !(c->figures = cr_loop_figures_new()))
        return cr_fail(err, CR_ENOMEM, "out of memory for %llu receipts",
                       (unsigned long long)cfg->receipts);
    if (!(c->router = cr_router_new(&cfg->route)))
        return cr_fail(err, CR_ENOMEM, "out of memory for %llu outstanding routes",
                       (unsigned long long)cfg->route.inflight_max);
    return CR_OK;
}

/* The state file's settings, then its restore (which reports itself). */
static cr_status init_state(cr_core *c, const cr_core_config *cfg, cr_error *err)
{
    c->snapshot_interval_s = cfg->snapshot_interval_s;
    cr_state_fingerprint_of(cfg, &c->fingerprint);
    if (!cfg->state_file || !*cfg->state_file)
        return CR_OK;
    if (!(c->state_path = strdup(cfg->state_file)) || cr_state_restore(c, cfg) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory restoring %s", cfg->state_file);
    return CR_OK;
}

cr_core *cr_core_new(const cr_core_config *cfg, const cr_core_hooks *hooks,
                     const cr_clock_source *clock, cr_error *err)
{
    if (check_config(cfg, err) != CR_OK)
        return NULL;
    cr_core *c = calloc(1, sizeof *c);
    if (!c) {
        cr_fail(err, CR_ENOMEM, "out of memory creating the core");
        return NULL;
    }
    c->planner = cfg->planner;
    c->replan = cfg->replan;
    c->replan_interval_s = cfg->replan_interval_s;
    if (hooks)
        c->hooks = *hooks;
    c->epoch = cr_mono_s();
    c->clock = clock ? *clock : (cr_clock_source){real_clock, c};
    cr_published_init(&c->table);
    pthread_mutex_init(&c->tick_lock, NULL);
    pthread_mutex_init(&c->install_lock, NULL);
    c->last_replan = cr_core_now(c);
    pthread_mutex_init(&c->state_lock, NULL);
    if (create_parts(c, cfg, err) != CR_OK || init_state(c, cfg, err) != CR_OK) {
        cr_core_free(c);
        return NULL;
    }
    return c;
}

void cr_core_free(cr_core *c)
{
    if (!c)
        return;
    cr_core_stop(c);
    cr_prober_stop(c->prober);
    cr_receipts_free(c->receipts);
    cr_loop_figures_free(c->figures);
    cr_router_free(c->router);
    cr_injector_free(c->injector);
    cr_estimator_free(c->estimator);
    cr_published_destroy(&c->table);
    pthread_mutex_destroy(&c->tick_lock);
    pthread_mutex_destroy(&c->install_lock);
    pthread_mutex_destroy(&c->state_lock);
    free(c->state_path);
    cr_touched_free(atomic_load(&c->touched));
    free(c);
}

cr_status cr_core_profile(cr_core *c, const cr_node_snapshot **snap, cr_inject_model *model,
                          cr_error *err)
{
    *snap = cr_prober_acquire(c->prober);
    return cr_injector_model(c->injector, *snap, 0, model, err);
}

cr_status cr_core_clear_reservations(cr_core *c, const cr_inject_clear *which,
                                     cr_inject_cleared *out, cr_error *err)
{
    const cr_node_snapshot *snap = cr_prober_acquire(c->prober);
    cr_status st = cr_injector_clear(c->injector, snap, which, cr_core_now(c) * 1e3, out, err);
    cr_node_snapshot_release(snap);
    return st;
}

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

uint32_t cr_core_shards(const cr_core *c, const cr_installed *t)
{
    return t ? cr_table_n_shards(t->table) : c->planner.n_shards;
}

uint32_t cr_core_home_shard(cr_core *c, int64_t owner, uint32_t n_shards)
{
    return cr_router_home(c->router, owner, n_shards);
}

void cr_core_route_stats_read(cr_core *c, cr_route_stats *out, double *work,
                              uint32_t max_shards)
{
    cr_router_stats(c->router, cr_core_now(c), out, work, max_shards);
}
