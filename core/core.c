/* The core's handle: construction from the components (parts.c), the
 * clock, and the background work's start and stop (the replanner, the
 * state file's snapshots). */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static double real_clock(void *ctx)
{
    const cr_core *c = ctx;
    return cr_mono_s() - c->epoch;
}

double cr_core_now(const cr_core *c) { return core_now(c); }

/* A new snapshot may change GPU 0's cost model; then the hook. */
static void probed(void *ctx, const cr_node_snapshot *snap)
{
    cr_core *c = ctx;
    cr_core_route_model_changed(c, 0);
    if (c->hooks.probed)
        c->hooks.probed(c->hooks.ctx, snap);
}

/* The components; NULL members on failure, err filled. */
static cr_status create_parts(cr_core *c, const cr_core_config *cfg, cr_error *err)
{
    cr_probe_config pc = cfg->probe;
    pc.on_snapshot = probed;
    pc.on_snapshot_ctx = c;
    if (!(c->estimator = cr_estimator_new(&cfg->estimator, err)) ||
        !(c->injector = cr_injector_new(&cfg->inject, err)) ||
        !(c->probe = cr_probe_start(&pc, err)))
        return CR_EINVAL;
    if ((cfg->receipts && !(c->receipts = cr_receipts_new(cfg->receipts))) ||
        !(c->figures = cr_loop_figures_new()))
        return cr_fail(err, CR_ENOMEM, "out of memory for %llu receipts",
                       (unsigned long long)cfg->receipts);
    c->route = cfg->route;
    /* one route adds at most the prefill one decision may reserve */
    c->route.max_route_work_ms = cfg->inject.max_reservation_ms;
    if (!(c->router = cr_router_new(&c->route)))
        return cr_fail(err, CR_ENOMEM, "out of memory for %llu outstanding routes",
                       (unsigned long long)cfg->route.inflight_max);
    return CR_OK;
}

/* The state file's settings, its lock (one process writes it), then its
 * restore (which reports itself). Something there that is not a regular
 * file is not the sidecar's to move aside: the start fails. */
static cr_status init_state(cr_core *c, const cr_core_config *cfg, cr_error *err)
{
    c->snapshot_interval_s = cfg->snapshot_interval_s;
    cr_state_fingerprint_of(cfg, &c->fingerprint);
    if (!cfg->state_file || !*cfg->state_file)
        return CR_OK;
    struct stat st;
    if (stat(cfg->state_file, &st) == 0 && !S_ISREG(st.st_mode))
        return cr_fail(err, CR_EINVAL, "--state-file %s must be a regular file", cfg->state_file);
    if ((c->state_lock_fd = cr_state_lock(cfg->state_file, err)) < 0)
        return CR_ESTATE;
    cr_state_sweep_temporaries(cfg->state_file);
    if (!(c->state_path = strdup(cfg->state_file)) || cr_state_restore(c, cfg) != 0)
        return cr_fail(err, CR_ENOMEM, "out of memory restoring %s", cfg->state_file);
    return CR_OK;
}

cr_core *cr_core_new(const cr_core_config *cfg, const cr_core_hooks *hooks,
                     const cr_clock_source *clock, cr_error *err)
{
    if (cr_core_config_check(cfg, err) != CR_OK)
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
    cr_members_init(c, &cfg->endpoints);
    pthread_mutex_init(&c->tick_lock, NULL);
    pthread_mutex_init(&c->install_lock, NULL);
    c->last_replan = core_now(c);
    pthread_mutex_init(&c->state_lock, NULL);
    pthread_mutex_init(&c->model_lock, NULL);
    atomic_init(&c->model_stale, 1); /* converted at the first route */
    c->state_lock_fd = -1;
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
    cr_probe_stop(c->probe);
    cr_receipts_free(c->receipts);
    cr_loop_figures_free(c->figures);
    cr_core_door_free(c);
    cr_router_free(c->router);
    cr_injector_free(c->injector);
    cr_estimator_free(c->estimator);
    cr_published_destroy(&c->table);
    cr_members_destroy(c);
    pthread_mutex_destroy(&c->tick_lock);
    pthread_mutex_destroy(&c->install_lock);
    pthread_mutex_destroy(&c->state_lock);
    pthread_mutex_destroy(&c->model_lock);
    free(c->state_path);
    if (c->state_lock_fd >= 0)
        close(c->state_lock_fd); /* the lock goes with it */
    cr_touched_free(atomic_load(&c->touched));
    free(c);
}

cr_status cr_core_start(cr_core *c, cr_error *err)
{
    if (cr_state_start(c, err) != CR_OK)
        return CR_ENOMEM;
    return cr_replanner_start(c, err);
}

void cr_core_stop(cr_core *c)
{
    cr_replanner_stop(c);
    cr_state_stop(c);
}

int cr_core_tick(cr_core *c) { return cr_replan_if_due(c); }

uint32_t cr_core_gpu_count(cr_core *c)
{
    const cr_node_snapshot *snap = cr_probe_acquire(c->probe);
    uint32_t n = snap && snap->n_gpus ? (uint32_t)snap->n_gpus : 1;
    cr_node_snapshot_release(snap);
    return n;
}
