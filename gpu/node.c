/* One probe of the node: NIC scan, CUDA devices, second NIC sample. The CUDA
 * probe runs between the two counter samples, so its second or so of
 * driver start-up overlaps the utilization window instead of adding to it. */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_NIC_SAMPLE_S 10.0
#define MAX_INTERVAL_S 1e9 /* keeps deadlines inside time_t */

void cr_probe_config_default(cr_probe_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->sysfs_root = "/sys";
    cfg->cuda_library = "libcuda.so.1";
    cfg->interval_s = 300;
    cfg->nic_sample_s = 1;
    cfg->measure_h2d = 1;
}

static cr_status check_name(const char *what, const char *s, size_t max, cr_error *err)
{
    size_t len = s ? strlen(s) : 0;
    if (len >= 1 && len <= max)
        return CR_OK;
    snprintf(err->msg, sizeof err->msg, "%s must be 1..%zu bytes, got %zu", what, max, len);
    return CR_EINVAL;
}

cr_status cr_probe_config_check(const cr_probe_config *cfg, cr_error *err)
{
    if (!(cfg->interval_s >= 0 && cfg->interval_s <= MAX_INTERVAL_S)) {
        snprintf(err->msg, sizeof err->msg, "interval_s must be in 0..%g, got %g", MAX_INTERVAL_S,
                 cfg->interval_s);
        return CR_EINVAL;
    }
    if (!(cfg->nic_sample_s >= 0 && cfg->nic_sample_s <= MAX_NIC_SAMPLE_S)) {
        snprintf(err->msg, sizeof err->msg, "nic_sample_s must be in 0..%g, got %g",
                 MAX_NIC_SAMPLE_S, cfg->nic_sample_s);
        return CR_EINVAL;
    }
    if (cfg->sysfs_root && check_name("sysfs_root", cfg->sysfs_root, 4000, err))
        return CR_EINVAL;
    if (cfg->cuda_library && check_name("cuda_library", cfg->cuda_library, 4000, err))
        return CR_EINVAL;
    for (size_t i = 0; i < cfg->n_nic_names; i++) {
        char what[48];
        snprintf(what, sizeof what, "nic_names[%zu]", i);
        if (check_name(what, cfg->nic_names[i], CR_NIC_NAME_LEN - 1, err))
            return CR_EINVAL;
    }
    return CR_OK;
}

double cr_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct timespec cr_timespec_of(double s)
{
    struct timespec ts;
    ts.tv_sec = (time_t)s;
    ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

static int sleep_until(void *ctx, double deadline_s)
{
    (void)ctx;
    struct timespec ts = cr_timespec_of(deadline_s);
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
    return 0;
}

const cr_node_snapshot *cr_probe_node(const cr_probe_config *cfg, cr_wait_fn wait, void *ctx,
                                      uint64_t generation, cr_error *err)
{
    const char *root = cfg->sysfs_root ? cfg->sysfs_root : "/sys";
    const char *lib = cfg->cuda_library ? cfg->cuda_library : "libcuda.so.1";
    char reason[CR_PROBE_REASON_LEN] = "";
    size_t n_gpus = 0;
    cr_nic_set nics;
    double t0 = cr_mono_s();
    if (cr_nic_scan(root, cfg->nic_names, cfg->n_nic_names, t0, &nics, err) != CR_OK)
        return NULL;
    cr_gpu_info *gpus = malloc(CR_PROBE_MAX_GPUS * sizeof *gpus);
    int cuda_ok =
        gpus && cr_cuda_probe(lib, cfg->measure_h2d, gpus, &n_gpus, reason, sizeof reason);
    if (gpus && cfg->nic_sample_s > 0 && !wait(ctx, t0 + cfg->nic_sample_s))
        cr_nic_sample(&nics, cr_mono_s());
    cr_node_snapshot *s = gpus ? cr_snapshot_new(gpus, n_gpus, nics.nics, nics.n) : NULL;
    if (s) {
        s->cuda_available = cuda_ok;
        memcpy(s->reason, reason, sizeof reason);
        s->generation = generation;
    } else {
        snprintf(err->msg, sizeof err->msg, "out of memory building a node snapshot");
    }
    free(gpus);
    cr_nic_set_free(&nics);
    return s;
}

const cr_node_snapshot *cr_node_probe(const cr_probe_config *cfg, cr_error *err)
{
    if (cr_probe_config_check(cfg, err) != CR_OK)
        return NULL;
    return cr_probe_node(cfg, sleep_until, NULL, 0, err);
}
