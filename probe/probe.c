/* The prober: re-probes on a cr_ticker and publishes snapshots.
 *
 * The current snapshot is a cr_published (its mutex guards the pointer swap
 * only, never a probe), so cr_probe_acquire waits at most for a swap. The
 * ticker's thread runs the re-probes, and its wait, handed to the probe,
 * is what lets cr_probe_stop cut a NIC sampling window short as well as an
 * interval. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct cr_probe {
    cr_probe_config cfg; /* its strings point at the copies below */
    char *sysfs_root, *cuda_library;
    char **nic_names;
    cr_published current; /* of cr_snapshot_ref(snapshot) */
    int current_ready;
    uint64_t generation; /* of the newest snapshot; only the ticker's thread
                          * changes it once the ticker runs */
    cr_ticker *ticker;   /* NULL when interval_s is 0 */
};

static int copy_config(cr_probe *p, const cr_probe_config *cfg)
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

/* Frees p; the ticker, if any, is stopped already. */
static void destroy(cr_probe *p)
{
    if (!p)
        return;
    if (p->current_ready)
        cr_published_destroy(&p->current); /* drops the prober's reference */
    for (size_t i = 0; p->nic_names && p->nic_names[i]; i++)
        free(p->nic_names[i]);
    free(p->nic_names);
    free(p->sysfs_root);
    free(p->cuda_library);
    free(p);
}

/* Makes s current (taking over its reference) and tells on_snapshot. s stays
 * valid for the call: only this thread (the starter, then the ticker's)
 * replaces it. */
static void publish(cr_probe *p, const cr_node_snapshot *s)
{
    cr_published_swap(&p->current, cr_snapshot_ref(s));
    if (p->cfg.on_snapshot)
        p->cfg.on_snapshot(p->cfg.on_snapshot_ctx, s);
}

/* One re-probe, on the ticker's thread. The probe's NIC sampling window
 * waits on the ticker, so a stop cuts it short. */
static void reprobe(void *ctx, cr_ticker *ticker)
{
    cr_probe *p = ctx;
    cr_error err;
    const cr_node_snapshot *s =
        cr_probe_node(&p->cfg, cr_ticker_wait, ticker, p->generation + 1, &err);
    if (s) { /* out of memory: keep serving the last snapshot */
        p->generation++;
        publish(p, s);
    }
}

cr_probe *cr_probe_start(const cr_probe_config *cfg, cr_error *err)
{
    if (cr_probe_config_check(cfg, err) != CR_OK)
        return NULL;
    cr_probe *p = calloc(1, sizeof *p);
    if (!p || copy_config(p, cfg)) {
        cr_fail(err, CR_ENOMEM, "out of memory starting the prober");
        destroy(p);
        return NULL;
    }
    cr_published_init(&p->current);
    p->current_ready = 1;
    /* No ticker yet: the first probe's NIC window is a plain sleep. */
    const cr_node_snapshot *first = cr_probe_node(&p->cfg, cr_ticker_wait, NULL, 1, err);
    if (!first) {
        destroy(p);
        return NULL;
    }
    p->generation = 1;
    publish(p, first);
    if (p->cfg.interval_s > 0) {
        cr_error terr;
        if (!(p->ticker = cr_ticker_start(p->cfg.interval_s, reprobe, p, &terr))) {
            cr_fail(err, CR_ENOMEM, "cannot start the prober thread: %s", terr.msg);
            destroy(p);
            return NULL;
        }
    }
    return p;
}

const cr_node_snapshot *cr_probe_acquire(cr_probe *p)
{
    return cr_snapshot_of_ref(cr_published_acquire(&p->current, NULL));
}

void cr_probe_stop(cr_probe *p)
{
    if (!p)
        return;
    cr_ticker_stop(p->ticker); /* NULL is ignored; joins the thread */
    destroy(p);
}

cr_ticker *cr_probe_test_ticker(cr_probe *p)
{
    return p->ticker;
}
