/* The prober: re-probes on its own thread and publishes snapshots.
 *
 * The mutex guards the current pointer and the stop flag only, never a
 * probe, so cr_prober_acquire waits at most for a pointer swap. The same
 * mutex backs the condvar the thread sleeps on, which is what lets
 * cr_prober_stop cut a long interval short. */
#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cr_prober {
    cr_probe_config cfg; /* its strings point at the copies below */
    char *sysfs_root, *cuda_library;
    char **nic_names;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC: wall-clock jumps don't matter */
    int sync_ready;
    int stopping;
    const cr_node_snapshot *current;
    pthread_t thread;
    int has_thread;
};

static int copy_config(cr_prober *p, const cr_probe_config *cfg)
{
    p->cfg = *cfg;
    p->sysfs_root = strdup(cfg->sysfs_root ? cfg->sysfs_root : "/sys");
    p->cuda_library = strdup(cfg->cuda_library ? cfg->cuda_library : "libcuda.so.1");
    p->nic_names = calloc(cfg->n_nic_names + 1, sizeof *p->nic_names);
    if (!p->sysfs_root || !p->cuda_library || !p->nic_names)
        return -1;
    for (size_t i = 0; i < cfg->n_nic_names; i++) {
        if (!(p->nic_names[i] = strdup(cfg->nic_names[i])))
            return -1;
    }
    p->cfg.sysfs_root = p->sysfs_root;
    p->cfg.cuda_library = p->cuda_library;
    p->cfg.nic_names = (const char *const *)p->nic_names;
    return 0;
}

static int init_sync(cr_prober *p)
{
    pthread_condattr_t attr;
    if (pthread_condattr_init(&attr))
        return -1;
    int rc =
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) || pthread_cond_init(&p->wake, &attr);
    pthread_condattr_destroy(&attr);
    if (rc)
        return -1;
    if (pthread_mutex_init(&p->lock, NULL)) {
        pthread_cond_destroy(&p->wake);
        return -1;
    }
    p->sync_ready = 1;
    return 0;
}

static void destroy(cr_prober *p)
{
    if (!p)
        return;
    cr_node_snapshot_release(p->current);
    for (size_t i = 0; p->nic_names && p->nic_names[i]; i++)
        free(p->nic_names[i]);
    free(p->nic_names);
    free(p->sysfs_root);
    free(p->cuda_library);
    if (p->sync_ready) {
        pthread_cond_destroy(&p->wake);
        pthread_mutex_destroy(&p->lock);
    }
    free(p);
}

/* The prober's cr_wait_fn: a timed wait that stop interrupts. */
static int wait_or_stop(void *ctx, double deadline_s)
{
    cr_prober *p = ctx;
    struct timespec ts = cr_timespec_of(deadline_s);
    pthread_mutex_lock(&p->lock);
    /* 0 is a wake-up (maybe spurious): look again; anything else ends it. */
    while (!p->stopping && pthread_cond_timedwait(&p->wake, &p->lock, &ts) == 0)
        ;
    int stop = p->stopping;
    pthread_mutex_unlock(&p->lock);
    return stop;
}

static void publish(cr_prober *p, const cr_node_snapshot *s)
{
    pthread_mutex_lock(&p->lock);
    const cr_node_snapshot *old = p->current;
    p->current = s;
    pthread_mutex_unlock(&p->lock);
    cr_node_snapshot_release(old); /* freed here only if no reader holds it */
}

static void *run(void *arg)
{
    cr_prober *p = arg;
    uint64_t generation = p->current->generation; /* only this thread publishes */
    while (!wait_or_stop(p, cr_mono_s() + p->cfg.interval_s)) {
        cr_error err;
        const cr_node_snapshot *s = cr_probe_node(&p->cfg, wait_or_stop, p, generation + 1, &err);
        if (s) { /* out of memory: keep serving the last snapshot */
            generation++;
            publish(p, s);
            if (p->cfg.on_snapshot) /* only this thread replaces s */
                p->cfg.on_snapshot(p->cfg.on_snapshot_ctx, s);
        }
    }
    return NULL;
}

cr_prober *cr_prober_start(const cr_probe_config *cfg, cr_error *err)
{
    if (cr_probe_config_check(cfg, err) != CR_OK)
        return NULL;
    cr_prober *p = calloc(1, sizeof *p);
    if (!p || copy_config(p, cfg) || init_sync(p)) {
        snprintf(err->msg, sizeof err->msg, "out of memory starting the prober");
        destroy(p);
        return NULL;
    }
    if (!(p->current = cr_probe_node(&p->cfg, wait_or_stop, p, 1, err))) {
        destroy(p);
        return NULL;
    }
    if (p->cfg.on_snapshot)
        p->cfg.on_snapshot(p->cfg.on_snapshot_ctx, p->current);
    if (p->cfg.interval_s > 0) {
        int rc = pthread_create(&p->thread, NULL, run, p);
        if (rc) {
            snprintf(err->msg, sizeof err->msg, "cannot start the prober thread: %s", strerror(rc));
            destroy(p);
            return NULL;
        }
        p->has_thread = 1;
    }
    return p;
}

const cr_node_snapshot *cr_prober_acquire(cr_prober *p)
{
    pthread_mutex_lock(&p->lock);
    const cr_node_snapshot *s = p->current;
    cr_snapshot_retain(s);
    pthread_mutex_unlock(&p->lock);
    return s;
}

void cr_prober_stop(cr_prober *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->stopping = 1;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    if (p->has_thread)
        pthread_join(p->thread, NULL);
    destroy(p);
}
