#include "sidecar.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"
#include "rpc.h"

cr_sidecar *cr_sidecar_new(const cr_config *cfg, cr_error *err)
{
    cr_sidecar *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err->msg, sizeof err->msg, "out of memory");
        return NULL;
    }
    s->cfg = cfg;
    s->epoch = cr_rpc_clock();
    s->estimator = cr_estimator_new(&cfg->estimator, err);
    if (!s->estimator) {
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->table_lock, NULL);
    pthread_mutex_init(&s->replan_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->replan_wake, &ca);
    pthread_condattr_destroy(&ca);
    return s;
}

void cr_sidecar_free(cr_sidecar *s)
{
    if (!s)
        return;
    cr_sidecar_stop_replanner(s);
    if (s->current)
        cr_installed_release(s->current);
    cr_estimator_free(s->estimator);
    pthread_mutex_destroy(&s->table_lock);
    pthread_mutex_destroy(&s->replan_lock);
    pthread_cond_destroy(&s->replan_wake);
    free(s);
}

double cr_sidecar_now(const cr_sidecar *s) { return cr_rpc_clock() - s->epoch; }

cr_installed *cr_sidecar_acquire(cr_sidecar *s)
{
    pthread_mutex_lock(&s->table_lock);
    cr_installed *t = s->current;
    if (t)
        atomic_fetch_add(&t->refs, 1);
    pthread_mutex_unlock(&s->table_lock);
    return t;
}

void cr_installed_release(cr_installed *t)
{
    if (t && atomic_fetch_sub(&t->refs, 1) == 1) {
        cr_table_free(t->table);
        free(t);
    }
}

cr_installed *cr_sidecar_install(cr_sidecar *s, cr_table *table)
{
    cr_installed *t = malloc(sizeof *t);
    if (!t) {
        cr_table_free(table);
        return NULL;
    }
    t->table = table;
    atomic_init(&t->refs, 2); /* the sidecar's and the caller's */
    pthread_mutex_lock(&s->table_lock);
    t->generation = ++s->generation;
    cr_installed *old = s->current;
    s->current = t;
    pthread_mutex_unlock(&s->table_lock);
    cr_installed_release(old);
    return t;
}

cr_status cr_sidecar_plan_estimator(cr_sidecar *s, const cr_planner_config *cfg, cr_table **out,
                                    cr_error *err)
{
    size_t n;
    cr_session_rate *rates = cr_estimator_rates(s->estimator, cr_sidecar_now(s), &n);
    if (!rates) {
        *out = NULL;
        snprintf(err->msg, sizeof err->msg, "out of memory taking the estimator snapshot");
        return CR_ENOMEM;
    }
    cr_status st = cr_planner_plan(cfg, rates, n, out, err);
    free(rates);
    return st;
}

void cr_sidecar_log_install(const cr_installed *t, const char *by, double seconds)
{
    cr_log(CR_LOG_INFO, "plan installed",
           json_pack("{s:s,s:I,s:I,s:f,s:f}", "by", by, "generation", (json_int_t)t->generation,
                     "admitted", (json_int_t)cr_table_n_placements(t->table), "imbalance",
                     cr_table_imbalance(t->table), "duration_ms", seconds * 1e3));
}

static void replan_once(cr_sidecar *s)
{
    double t0 = cr_sidecar_now(s);
    cr_table *table;
    cr_error err;
    if (cr_sidecar_plan_estimator(s, &s->cfg->planner, &table, &err) != CR_OK) {
        cr_log(CR_LOG_ERROR, "replan failed", json_pack("{s:s}", "error", err.msg));
        return;
    }
    cr_installed *t = cr_sidecar_install(s, table);
    cr_metrics_plan(s->metrics, cr_sidecar_now(s) - t0, t != NULL);
    if (!t) {
        cr_log(CR_LOG_ERROR, "replan failed", json_pack("{s:s}", "error", "out of memory"));
        return;
    }
    cr_sidecar_log_install(t, "replanner", cr_sidecar_now(s) - t0);
    cr_installed_release(t);
}

static void *replan_main(void *arg)
{
    cr_sidecar *s = arg;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    pthread_mutex_lock(&s->replan_lock);
    while (!s->stopping) {
        double at = next.tv_sec + next.tv_nsec * 1e-9 + s->cfg->replan_interval;
        next.tv_sec = (time_t)at;
        next.tv_nsec = (long)((at - (double)next.tv_sec) * 1e9);
        int rc = 0;
        while (!s->stopping && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&s->replan_wake, &s->replan_lock, &next);
        if (s->stopping)
            break;
        pthread_mutex_unlock(&s->replan_lock);
        replan_once(s);
        pthread_mutex_lock(&s->replan_lock);
    }
    pthread_mutex_unlock(&s->replan_lock);
    return NULL;
}

int cr_sidecar_start_replanner(cr_sidecar *s)
{
    if (s->cfg->replan_interval <= 0)
        return 0;
    if (pthread_create(&s->replan_thread, NULL, replan_main, s) != 0)
        return -1;
    s->replan_started = 1;
    return 0;
}

void cr_sidecar_stop_replanner(cr_sidecar *s)
{
    if (!s->replan_started)
        return;
    pthread_mutex_lock(&s->replan_lock);
    s->stopping = 1;
    pthread_cond_signal(&s->replan_wake);
    pthread_mutex_unlock(&s->replan_lock);
    pthread_join(s->replan_thread, NULL);
    s->replan_started = 0;
}

uint32_t cr_fallback_shard(int64_t owner, uint32_t n_shards)
{
    return (uint32_t)(cr_mix64((uint64_t)owner) % n_shards);
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
static void probe_gauges(cr_sidecar *s, cr_page *p)
{
    const cr_node_snapshot *snap = cr_prober_acquire(s->prober);
    gpu_gauges(snap, p);
    nic_gauges(snap, p);
    cr_inject_model m;
    cr_error err;
    if (cr_injector_model(s->injector, snap, 0, &m, &err) == CR_OK) {
        cr_page_family(p, "cacheroute_cost_model_link_bits_per_second", "gauge",
                       "Link bandwidth the injection cost model uses for unlisted KV sources.");
        cr_page_sample(p, "cacheroute_cost_model_link_bits_per_second", NULL, m.link_gbps * 1e9);
        cr_page_family(p, "cacheroute_cost_model_h2d_bytes_per_second", "gauge",
                       "Host-to-GPU bandwidth the injection cost model uses for GPU 0.");
        cr_page_sample(p, "cacheroute_cost_model_h2d_bytes_per_second", NULL, m.h2d_gbps * 1e9);
    }
    cr_node_snapshot_release(snap);
}

void cr_sidecar_log_probe(void *ctx, const cr_node_snapshot *snap)
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

void cr_sidecar_gauges(void *ctx, cr_page *p)
{
    cr_sidecar *s = ctx;
    cr_page_family(p, "cacheroute_tracked_owners", "gauge", "Owners the rate estimator tracks.");
    cr_page_sample(p, "cacheroute_tracked_owners", NULL, (double)cr_estimator_size(s->estimator));
    cr_page_family(p, "cacheroute_estimator_evictions_total", "counter",
                   "Owners evicted to keep the estimator within --max-owners.");
    cr_page_sample(p, "cacheroute_estimator_evictions_total", NULL,
                   (double)cr_estimator_evictions(s->estimator));
    cr_installed *t = cr_sidecar_acquire(s);
    cr_page_family(p, "cacheroute_table_generation", "gauge",
                   "Generation of the installed routing table; 0 before the first.");
    cr_page_sample(p, "cacheroute_table_generation", NULL, t ? (double)t->generation : 0);
    cr_page_family(p, "cacheroute_table_admitted_sessions", "gauge",
                   "Sessions holding warm slots in the installed table.");
    cr_page_sample(p, "cacheroute_table_admitted_sessions", NULL,
                   t ? (double)cr_table_n_placements(t->table) : 0);
    cr_page_family(p, "cacheroute_table_admitted_requests_per_second", "gauge",
                   "Sum of the admitted sessions' rates in the installed table.");
    cr_page_sample(p, "cacheroute_table_admitted_requests_per_second", NULL,
                   t ? cr_table_admitted_rate_total(t->table) : 0);
    cr_page_family(p, "cacheroute_table_unadmitted_requests_per_second", "gauge",
                   "Sum of the rates that did not fit the warm-slot budget.");
    cr_page_sample(p, "cacheroute_table_unadmitted_requests_per_second", NULL,
                   t ? cr_table_unadmitted_rate_total(t->table) : 0);
    cr_page_family(p, "cacheroute_table_imbalance_ratio", "gauge",
                   "Max over mean expected shard load in the installed table.");
    cr_page_sample(p, "cacheroute_table_imbalance_ratio", NULL,
                   t ? cr_table_imbalance(t->table) : 1.0);
    cr_installed_release(t);
    if (s->prober)
        probe_gauges(s, p);
}
