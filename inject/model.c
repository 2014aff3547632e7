/* Resolving the cost model for one GPU: each coefficient from the best
 * source available, and a note of which one it was. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

size_t cr_inject_n_gpus(const cr_node_snapshot *snap)
{
    size_t n = snap && snap->n_gpus ? snap->n_gpus : 1;
    return n > CR_PROBE_MAX_GPUS ? CR_PROBE_MAX_GPUS : n;
}

cr_status cr_inject_check_gpu(const cr_node_snapshot *snap, uint32_t gpu, cr_error *err)
{
    size_t n_gpus = cr_inject_n_gpus(snap);
    if (gpu < n_gpus)
        return CR_OK;
    snprintf(err->msg, sizeof err->msg, "gpu must be in 0..%zu, got %u", n_gpus - 1, gpu);
    return CR_EINVAL;
}

static const char *flag_or_default(const cr_inject_config *cfg, unsigned bit)
{
    return (cfg->set & bit) ? "flag" : "default";
}

/* b and c price a token's FLOPs at the achievable rate peak * mfu: 2 FLOPs
 * per parameter per token, and 2 * layers * d_model per token pair of
 * attention. Seconds become ms. */
static const char *resolve_prefill(const cr_inject_config *cfg, const cr_gpu_info *gpu,
                                   cr_inject_model *m)
{
    if (cfg->set & CR_INJECT_SET_PREFILL_COEFFS) {
        m->prefill = cfg->prefill_coeffs;
        return "fitted";
    }
    const char *src;
    if (gpu && gpu->arch_known && gpu->peak_tflops > 0) {
        m->peak_tflops = gpu->peak_tflops;
        src = "probe";
    } else {
        m->peak_tflops = cfg->peak_tflops;
        src = flag_or_default(cfg, CR_INJECT_SET_PEAK);
    }
    double flops = m->peak_tflops * 1e12 * cfg->mfu;
    m->prefill.fixed_ms = cfg->prefill_fixed_ms;
    m->prefill.ms_per_token = 2 * cfg->model_params_b * 1e9 / flops * 1e3;
    m->prefill.ms_per_token2 = 2.0 * cfg->model_layers * cfg->model_d_model / flops * 1e3;
    return src;
}

/* K and V (the 2), per layer, per KV head, per head dimension; tensor
 * parallelism splits the heads across GPUs. */
static const char *resolve_kv_bytes(const cr_inject_config *cfg, cr_inject_model *m)
{
    if (cfg->set & CR_INJECT_SET_KV_BYTES) {
        m->kv_bytes_per_token = cfg->kv_bytes_per_token;
        return "flag";
    }
    m->kv_bytes_per_token = 2.0 * cfg->model_layers * cfg->model_kv_heads * cfg->model_head_dim *
                            cfg->kv_dtype_bytes / cfg->tensor_parallel;
    if (cfg->set & CR_INJECT_SET_MODEL_CONFIG)
        return "model-config";
    return (cfg->set & CR_INJECT_SET_MODEL_SHAPE) ? "model-shape" : "default";
}

static const char *resolve_link(const cr_inject_config *cfg, const cr_node_snapshot *snap,
                                cr_inject_model *m)
{
    double best = 0;
    for (size_t i = 0; snap && i < snap->n_nics; i++) {
        if (snap->nics[i].up && snap->nics[i].speed_gbps > best)
            best = snap->nics[i].speed_gbps;
    }
    if (best > 0) {
        m->link_gbps = best;
        return "nic";
    }
    m->link_gbps = cfg->link_gbps;
    return flag_or_default(cfg, CR_INJECT_SET_LINK);
}

static const char *resolve_h2d(const cr_inject_config *cfg, const cr_gpu_info *gpu,
                               cr_inject_model *m)
{
    if (gpu && gpu->h2d_gbps > 0) {
        m->load.h2d_gbps = gpu->h2d_gbps;
        return "probe";
    }
    m->load.h2d_gbps = cfg->h2d_gbps;
    return flag_or_default(cfg, CR_INJECT_SET_H2D);
}

cr_status cr_inject_model_resolve_labels(const cr_inject_config *cfg,
                                         const cr_node_snapshot *snap, uint32_t gpu,
                                         cr_inject_model *m, cr_inject_labels *l, cr_error *err)
{
    if (cr_inject_check_gpu(snap, gpu, err) != CR_OK)
        return CR_EINVAL;
    const cr_gpu_info *g = snap && gpu < snap->n_gpus ? &snap->gpus[gpu] : NULL;
    memset(m, 0, sizeof *m);
    memset(l, 0, sizeof *l);
    l->prefill = resolve_prefill(cfg, g, m);
    l->kv_bytes = resolve_kv_bytes(cfg, m);
    l->link = resolve_link(cfg, snap, m);
    l->h2d = resolve_h2d(cfg, g, m);
    l->margin = flag_or_default(cfg, CR_INJECT_SET_MARGIN);
    l->penalty = flag_or_default(cfg, CR_INJECT_SET_PENALTY);
    m->link_rtt_ms = CR_INJECT_DEFAULT_RTT_MS;
    m->link_efficiency = cfg->link_efficiency;
    m->load.fixed_ms = cfg->load_fixed_ms;
    m->decision_margin_ms = cfg->decision_margin_ms;
    m->link_queue_penalty = cfg->link_queue_penalty;
    return CR_OK;
}

void cr_inject_model_write_source(cr_inject_model *m, const cr_inject_labels *l)
{
    char fitted[64];
    const char *prefill = l->prefill;
    if (l->fit_n) {
        snprintf(fitted, sizeof fitted, "fitted(n=%llu,mape=%.1f%%)",
                 (unsigned long long)l->fit_n, 100 * l->fit_mape);
        prefill = fitted;
    }
    snprintf(m->source, sizeof m->source,
             "prefill=%s kv_bytes=%s link=%s h2d=%s margin=%s penalty=%s", prefill, l->kv_bytes,
             l->link, l->h2d, l->margin, l->penalty);
}

cr_status cr_inject_model_resolve(const cr_inject_config *cfg, const cr_node_snapshot *snap,
                                  uint32_t gpu, cr_inject_model *m, cr_error *err)
{
    cr_inject_labels labels;
    if (cr_inject_model_resolve_labels(cfg, snap, gpu, m, &labels, err) != CR_OK)
        return CR_EINVAL;
    cr_inject_model_write_source(m, &labels);
    return CR_OK;
}
