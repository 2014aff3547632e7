/* The core's reports as metrics and log lines, and the gauges a scrape
 * reads from the core. */
#include "observe.h"

#include "log.h"

static void planned(void *ctx, const cr_core_plan_event *ev)
{
    if (ev->error) {
        cr_log(CR_LOG_ERROR, "replan failed", json_pack("{s:s}", "error", ev->error));
        return;
    }
    cr_metrics_plan(ctx, ev->seconds, ev->installed);
    if (ev->installed)
        cr_log(CR_LOG_INFO, "plan installed",
               json_pack("{s:s,s:I,s:I,s:f,s:f}", "by", ev->by, "generation",
                         (json_int_t)ev->generation, "admitted", (json_int_t)ev->admitted,
                         "imbalance", ev->imbalance, "duration_ms", ev->seconds * 1e3));
}

static void recorded(void *ctx, uint64_t arrivals) { cr_metrics_arrivals(ctx, arrivals); }

static void selected(void *ctx, const cr_inject_response *r)
{
    cr_metrics_injection(ctx, r->reason, r->text.total_ms / 1e3,
                         r->has_kv ? r->kv.total_ms / 1e3 : -1);
}

static void gpu_gauges(const cr_node_snapshot *snap, cr_page *p)
{
    char label[160], index[16];
    cr_page_family(p, "cacheroute_cuda_available", "gauge",
                   "1 when the CUDA driver loaded and initialised at the last probe.");
    cr_page_sample(p, "cacheroute_cuda_available", NULL, snap->cuda_available);
    cr_page_family(p, "cacheroute_gpu_h2d_bytes_per_second", "gauge",
                   "Measured host-to-GPU copy bandwidth (pinned memory), per GPU.");
    for (size_t i = 0; i < snap->n_gpus; i++) {
        snprintf(index, sizeof index, "%u", snap->gpus[i].index);
        cr_page_label(label, sizeof label, "gpu", index);
        cr_page_sample(p, "cacheroute_gpu_h2d_bytes_per_second", label,
                       snap->gpus[i].h2d_gbps * 1e9);
    }
}

static void nic_gauges(const cr_node_snapshot *snap, cr_page *p)
{
    char label[160];
    cr_page_family(p, "cacheroute_nic_speed_bits_per_second", "gauge",
                   "Probed link speed per interface (RDMA ports as rdma:<dev>/<port>); 0 unknown.");
    for (size_t i = 0; i < snap->n_nics; i++) {
        cr_page_label(label, sizeof label, "nic", snap->nics[i].name);
        cr_page_sample(p, "cacheroute_nic_speed_bits_per_second", label,
                       snap->nics[i].speed_gbps * 1e9);
    }
    cr_page_family(p, "cacheroute_nic_utilization_ratio", "gauge",
                   "Fraction of link speed in use (max of rx, tx) over the last probe sample.");
    for (size_t i = 0; i < snap->n_nics; i++) {
        cr_page_label(label, sizeof label, "nic", snap->nics[i].name);
        cr_page_sample(p, "cacheroute_nic_utilization_ratio", label, snap->nics[i].utilization);
    }
}

/* The probed node and the bandwidths the cost model uses for GPU 0. */
static void probe_gauges(cr_core *core, cr_page *p)
{
    const cr_node_snapshot *snap;
    cr_inject_model m;
    cr_error err;
    cr_status st = cr_core_profile(core, &snap, &m, &err);
    gpu_gauges(snap, p);
    nic_gauges(snap, p);
    if (st == CR_OK) {
        cr_page_family(p, "cacheroute_cost_model_link_bits_per_second", "gauge",
                       "Link bandwidth the injection cost model uses for unlisted KV sources.");
        cr_page_sample(p, "cacheroute_cost_model_link_bits_per_second", NULL, m.link_gbps * 1e9);
        cr_page_family(p, "cacheroute_cost_model_h2d_bytes_per_second", "gauge",
                       "Host-to-GPU bandwidth the injection cost model uses for GPU 0.");
        cr_page_sample(p, "cacheroute_cost_model_h2d_bytes_per_second", NULL, m.h2d_gbps * 1e9);
    }
    cr_node_snapshot_release(snap);
}

static void log_probe(void *ctx, const cr_node_snapshot *snap)
{
    (void)ctx;
    json_t *gpus = json_array(), *nics = json_array();
    for (size_t i = 0; i < snap->n_gpus; i++) {
        const cr_gpu_info *g = &snap->gpus[i];
        json_array_append_new(gpus, json_pack("{s:i,s:s,s:s,s:i,s:f,s:f}", "index", (int)g->index,
                                              "name", g->name, "uuid", g->uuid, "sm_count",
                                              (int)g->sm_count, "h2d_gbps", g->h2d_gbps,
                                              "peak_tflops", g->peak_tflops));
    }
    for (size_t i = 0; i < snap->n_nics; i++) {
        const cr_nic_info *n = &snap->nics[i];
        json_array_append_new(nics, json_pack("{s:s,s:f,s:b,s:f}", "name", n->name, "speed_gbps",
                                              n->speed_gbps, "up", n->up, "utilization",
                                              n->utilization));
    }
    cr_log(CR_LOG_INFO, "probe",
           json_pack("{s:I,s:b,s:s,s:o,s:o}", "generation", (json_int_t)snap->generation,
                     "cuda_available", snap->cuda_available, "cuda_reason", snap->reason, "gpus",
                     gpus, "nics", nics));
}


cr_core_hooks cr_observe_hooks(cr_metrics *m)
{
    return (cr_core_hooks){planned, recorded, selected, log_probe, m};
}

void cr_observe_gauges(void *ctx, cr_page *p)
{
    cr_core *core = ctx;
    cr_core_stats st;
    cr_core_stats_read(core, &st);
    cr_page_family(p, "cacheroute_tracked_owners", "gauge", "Owners the rate estimator tracks.");
    cr_page_sample(p, "cacheroute_tracked_owners", NULL, (double)st.tracked_owners);
    cr_page_family(p, "cacheroute_estimator_evictions_total", "counter",
                   "Owners evicted to keep the estimator within --max-owners.");
    cr_page_sample(p, "cacheroute_estimator_evictions_total", NULL,
                   (double)st.evictions);
    cr_page_family(p, "cacheroute_table_generation", "gauge",
                   "Generation of the installed routing table; 0 before the first.");
    cr_page_sample(p, "cacheroute_table_generation", NULL, (double)st.generation);
    cr_page_family(p, "cacheroute_table_admitted_sessions", "gauge",
                   "Sessions holding warm slots in the installed table.");
    cr_page_sample(p, "cacheroute_table_admitted_sessions", NULL,
                   (double)st.admitted);
    cr_page_family(p, "cacheroute_table_admitted_requests_per_second", "gauge",
                   "Sum of the admitted sessions' rates in the installed table.");
    cr_page_sample(p, "cacheroute_table_admitted_requests_per_second", NULL,
                   st.admitted_rate);
    cr_page_family(p, "cacheroute_table_unadmitted_requests_per_second", "gauge",
                   "Sum of the rates that did not fit the warm-slot budget.");
    cr_page_sample(p, "cacheroute_table_unadmitted_requests_per_second", NULL,
                   st.unadmitted_rate);
    cr_page_family(p, "cacheroute_table_imbalance_ratio", "gauge",
                   "Max over mean expected shard load in the installed table.");
    cr_page_sample(p, "cacheroute_table_imbalance_ratio", NULL,
                   st.imbalance);
    probe_gauges(core, p);
}
