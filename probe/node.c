/* One probe of the node: NIC scan, CUDA devices, second NIC sample. The CUDA
 * probe runs between the two counter samples, so its second or so of
 * driver start-up overlaps the utilization window instead of adding to it. */
#include "internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_NIC_SAMPLE_S 10.0

void cr_probe_config_default(cr_probe_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cr_options_defaults(&cr_probe_options, cfg);
    cfg->cuda_library = "libcuda.so.1";
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
    /* interval_s, nic_names[i] and sysfs_root: the rows' bounds. */
    if (cr_options_check(&cr_probe_options, cfg, "", err) != CR_OK)
        return CR_EINVAL;
    if (!(cfg->nic_sample_s >= 0 && cfg->nic_sample_s <= MAX_NIC_SAMPLE_S)) {
        snprintf(err->msg, sizeof err->msg, "nic_sample_s must be in 0..%g, got %g",
                 MAX_NIC_SAMPLE_S, cfg->nic_sample_s);
        return CR_EINVAL;
    }
    if (cfg->cuda_library && check_name("cuda_library", cfg->cuda_library, CR_PROBE_PATH_MAX, err))
        return CR_EINVAL;
    return CR_OK;
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
    return cr_probe_node(cfg, cr_ticker_wait, NULL, 0, err); /* NULL: a plain sleep */
}
