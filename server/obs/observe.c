/* The core's reports as metrics and log lines, and the gauges a scrape
 * reads from the core. */
#include "observe.h"

#include <stdio.h>
#include <string.h>

#include "handlers.h" /* cr_receipt_pack */
#include "log.h"

static void planned(void *ctx, const cr_core_plan_event *ev)
{
    if (ev->error) {
        cr_log(CR_LOG_ERROR, "replan failed", json_pack("{s:s}", "error", ev->error));
        return;
    }
    cr_metrics *m = ((cr_observer *)ctx)->metrics;
    const cr_churn *c = &ev->churn;
    cr_metrics_plan(m, ev->seconds, ev->installed);
    if (!ev->installed)
        return;
    cr_metrics_plan_churn(m, c->moved, c->admitted_in, c->admitted_out);
    cr_log(CR_LOG_INFO, "plan installed",
           json_pack("{s:s,s:I,s:I,s:f,s:f,s:{s:I,s:I,s:I,s:I}}", "by", ev->by, "generation",
                     (json_int_t)ev->generation, "admitted", (json_int_t)ev->admitted,
                     "imbalance", ev->imbalance, "duration_ms", ev->seconds * 1e3, "churn",
                     "moved", (json_int_t)c->moved, "admitted_in", (json_int_t)c->admitted_in,
                     "admitted_out", (json_int_t)c->admitted_out, "compared_generation",
                     (json_int_t)ev->churn_generation));
}

static void recorded(void *ctx, uint64_t arrivals)
{
    cr_metrics_arrivals(((cr_observer *)ctx)->metrics, arrivals);
}

static void selected(void *ctx, const cr_inject_response *r)
{
    cr_metrics_injection(((cr_observer *)ctx)->metrics, r->reason, r->text.total_ms / 1e3,
                         r->has_kv ? r->kv.total_ms / 1e3 : -1);
}

/* Runs inside the decision or report: encode once, hand over, return. */
static void receipted(void *ctx, const cr_receipt *r)
{
    cr_observer *o = ctx;
    uint8_t *body;
    size_t len;
    if (o->watch && cr_watch_active(o->watch) && cr_receipt_pack(r, &body, &len) == 0)
        cr_watch_publish(o->watch, body, len);
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
        cr_page_sample(p, "cacheroute_cost_model_h2d_bytes_per_second", NULL,
                       m.load.h2d_gbps * 1e9);
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

/* Restores: a clean start at info, a refused file at warn naming why;
 * snapshots at debug but the final one (info), a failed one at warn. */
static void state(void *ctx, const cr_core_state_event *ev)
{
    (void)ctx;
    static const char *const what[] = {"state restored", "state file absent, starting empty",
                                       "state file refused, starting empty", "state written",
                                       "state snapshot failed"};
    static const cr_log_level level[] = {CR_LOG_INFO, CR_LOG_INFO, CR_LOG_WARN, CR_LOG_DEBUG,
                                         CR_LOG_WARN};
    json_t *f = json_pack("{s:s,s:s,s:f,s:I,s:I,s:I,s:I}", "path", ev->path, "by", ev->by,
                          "duration_ms", ev->seconds * 1e3, "bytes", (json_int_t)ev->bytes,
                          "owners", (json_int_t)ev->owners, "placements",
                          (json_int_t)ev->placements, "generation", (json_int_t)ev->generation);
    if (ev->result == CR_STATE_RESTORED)
        json_object_set_new(f, "age_s", json_real(ev->age_s));
    if (ev->error)
        json_object_set_new(f, "error", json_string(ev->error));
    if (ev->result == CR_STATE_REJECTED)
        json_object_set_new(f, "moved_to", ev->moved_to ? json_string(ev->moved_to) : json_null());
    /* Periodic writes stay at debug; the final one and those asked for
     * (SIGUSR1, cr_core_snapshot) are worth a line. */
    int asked = ev->result == CR_STATE_WRITTEN && strcmp(ev->by, "ticker") != 0;
    cr_log(asked ? CR_LOG_INFO : level[ev->result], what[ev->result], f);
}

cr_core_hooks cr_observe_hooks(cr_observer *o)
{
    return (cr_core_hooks){.planned = planned,
                           .recorded = recorded,
                           .selected = selected,
                           .probed = log_probe,
                           .receipted = receipted,
                           .state = state,
                           .members = cr_observe_members,
                           .block_size = cr_observe_block_size,
                           .ctx = o};
}

void cr_observe_rows(cr_page *p, const cr_observe_row *rows, size_t n, const void *figures)
{
    for (size_t i = 0; i < n; i++) {
        const char *at = (const char *)figures + rows[i].at;
        double v = rows[i].kind == CR_OBSERVE_INT   ? *(const int *)at
                   : rows[i].kind == CR_OBSERVE_U64 ? (double)*(const uint64_t *)at
                                                    : *(const double *)at;
        cr_page_family(p, rows[i].name, rows[i].type, rows[i].help);
        cr_page_sample(p, rows[i].name, NULL, v);
    }
}

void cr_observe_shard(cr_page *p, const char *name, uint32_t shard, double v)
{
    char label[32];
    snprintf(label, sizeof label, "shard=\"%u\"", shard);
    cr_page_sample(p, name, label, v);
}

#define LOOP_ROW(field, name, type, help) CR_OBSERVE_ROW(cr_loop_stats, field, name, type, help)
static const cr_observe_row served_rows[] = {
    LOOP_ROW(hit_ratio, "cacheroute_served_hit_ratio", "gauge",
             "Rolling token-weighted prefix-cache hit ratio of served requests "
             "(half-life 60 s)."),
};
static const cr_observe_row receipt_rows[] = {
    LOOP_ROW(receipts, "cacheroute_decision_receipts", "gauge", "Decision receipts kept now."),
    LOOP_ROW(receipts_capacity, "cacheroute_decision_receipts_capacity", "gauge",
             "Decision receipts kept at most (--receipts)."),
    LOOP_ROW(receipts_made, "cacheroute_decision_receipts_made_total", "counter",
             "Decision receipts made (decisions with a request_id, not dry runs)."),
    LOOP_ROW(receipts_evicted, "cacheroute_decision_receipts_evicted_total", "counter",
             "Decision receipts evicted, oldest first, at the --receipts bound."),
    LOOP_ROW(receipts_replaced, "cacheroute_decision_receipts_replaced_total", "counter",
             "Decision receipts replaced by a later decision with the same request_id."),
    LOOP_ROW(receipt_bytes, "cacheroute_decision_receipt_bytes", "gauge",
             "Memory of the receipt store now."),
};
static const cr_observe_row calibration_rows[] = {
    LOOP_ROW(observations, "cacheroute_calibration_observations_total", "counter",
             "Outcome measurements fed to the cost model's calibration."),
    LOOP_ROW(reservations_expired, "cacheroute_reservations_expired_total", "counter",
             "GPU reservations no ReportOutcome confirmed by their predicted end plus "
             "--reservation-confirm-s: their time given back."),
};
#undef LOOP_ROW

#define WATCH_ROW(field, name, type, help) CR_OBSERVE_ROW(cr_watch_stats, field, name, type, help)
static const cr_observe_row watch_rows[] = {
    WATCH_ROW(watchers, "cacheroute_decision_watchers", "gauge", "Open WatchDecisions streams."),
    WATCH_ROW(sent, "cacheroute_decision_watch_sent_total", "counter",
              "Receipts sent to WatchDecisions streams, over every watcher."),
    WATCH_ROW(lost, "cacheroute_decision_watch_lost_total", "counter",
              "Receipts dropped from slow watchers' full buffers, over every watcher."),
    WATCH_ROW(refused, "cacheroute_decision_watch_refused_total", "counter",
              "WatchDecisions calls refused at the watcher limit."),
};
#undef WATCH_ROW

static void served_gauges(const cr_loop_stats *st, cr_page *p)
{
    static const char *const cache[2] = {"miss", "hit"}, *const admitted[2] = {"false", "true"};
    char labels[64];
    cr_page_family(p, "cacheroute_served_prompt_tokens_total", "counter",
                   "Prompt tokens served (ReportOutcome), by whether the engine's prefix cache "
                   "held them and whether the owner held warm slots.");
    for (int a = 0; a < 2; a++)
        for (int c = 0; c < 2; c++) {
            snprintf(labels, sizeof labels, "cache=\"%s\",admitted=\"%s\"", cache[c],
                     admitted[a]);
            cr_page_sample(p, "cacheroute_served_prompt_tokens_total", labels,
                           (double)st->served_tokens[a][c]);
        }
    cr_observe_rows(p, served_rows, CR_OBSERVE_N(served_rows), st);
}

static void prediction_gauges(const cr_loop_stats *st, cr_page *p)
{
    static const char *const names[3] = {"cacheroute_prediction_error_ratio",
                                         "cacheroute_prediction_bias_seconds",
                                         "cacheroute_prediction_samples_total"};
    static const char *const types[3] = {"gauge", "gauge", "counter"};
    static const char *const helps[3] = {
        "Rolling mean absolute percentage error of each path's predicted term, a fraction.",
        "Rolling mean of measured minus predicted, per path and term.",
        "Matched outcomes that measured the term, per path."};
    char labels[96];
    for (int k = 0; k < 3; k++) {
        cr_page_family(p, names[k], types[k], helps[k]);
        for (int path = 0; path < CR_N_PATHS; path++)
            for (int t = 0; t < CR_N_TERMS; t++) {
                const cr_loop_error_stats *e = &st->errors[path][t];
                snprintf(labels, sizeof labels, "path=\"%s\",term=\"%s\"",
                         cr_loop_path_name((cr_loop_path)path), cr_loop_term_name((cr_loop_term)t));
                cr_page_sample(p, names[k], labels,
                               k == 0 ? e->ape : k == 1 ? e->bias_ms / 1e3 : (double)e->samples);
            }
    }
    char label[32];
    cr_page_family(p, "cacheroute_injection_regret_total", "counter",
                   "Decisions whose measured total exceeded the other path's prediction, by the "
                   "path chosen.");
    for (int path = 0; path < CR_N_PATHS; path++) {
        cr_page_label(label, sizeof label, "path", cr_loop_path_name((cr_loop_path)path));
        cr_page_sample(p, "cacheroute_injection_regret_total", label, (double)st->regrets[path]);
    }
    cr_page_family(p, "cacheroute_injection_regret_seconds_total", "counter",
                   "Time those decisions lost: measured total minus the other path's prediction.");
    for (int path = 0; path < CR_N_PATHS; path++) {
        cr_page_label(label, sizeof label, "path", cr_loop_path_name((cr_loop_path)path));
        cr_page_sample(p, "cacheroute_injection_regret_seconds_total", label,
                       st->regret_ms[path] / 1e3);
    }
}

static void receipt_gauges(const cr_loop_stats *st, cr_page *p)
{
    cr_observe_rows(p, receipt_rows, CR_OBSERVE_N(receipt_rows), st);
    cr_page_family(p, "cacheroute_outcomes_total", "counter",
                   "ReportOutcome entries: matched to a receipt, accepted unmatched, rejected.");
    cr_page_sample(p, "cacheroute_outcomes_total", "result=\"matched\"",
                   (double)st->outcomes_matched);
    cr_page_sample(p, "cacheroute_outcomes_total", "result=\"unmatched\"",
                   (double)(st->outcomes_accepted - st->outcomes_matched));
    cr_page_sample(p, "cacheroute_outcomes_total", "result=\"rejected\"",
                   (double)st->outcomes_rejected);
    cr_observe_rows(p, calibration_rows, CR_OBSERVE_N(calibration_rows), st);
}

static void watch_gauges(cr_watch_hub *hub, cr_page *p)
{
    cr_watch_stats ws;
    cr_watch_stats_read(hub, &ws);
    cr_observe_rows(p, watch_rows, CR_OBSERVE_N(watch_rows), &ws);
}

/* Served tokens and the rolling hit ratio of the first CR_OBSERVE_SHARDS
 * shards with outcomes (a scrape stays small on a large fleet). */
#define CR_OBSERVE_SHARDS 64

static void shard_gauges(const cr_loop_stats *st, const cr_loop_shard_stats *sh, cr_page *p)
{
    const char *tokens = "cacheroute_shard_served_prompt_tokens_total",
               *ratio = "cacheroute_shard_served_hit_ratio";
    uint32_t n = st->n_shards < CR_OBSERVE_SHARDS ? st->n_shards : CR_OBSERVE_SHARDS;
    char labels[48];
    cr_page_family(p, tokens, "counter",
                   "Prompt tokens served on the shard (ReportOutcome), by whether the engine's "
                   "prefix cache held them.");
    for (uint32_t s = 0; s < n; s++) {
        snprintf(labels, sizeof labels, "shard=\"%u\",cache=\"hit\"", s);
        cr_page_sample(p, tokens, labels, (double)sh[s].cached_tokens);
        snprintf(labels, sizeof labels, "shard=\"%u\",cache=\"miss\"", s);
        uint64_t miss = sh[s].prompt_tokens > sh[s].cached_tokens
                            ? sh[s].prompt_tokens - sh[s].cached_tokens : 0;
        cr_page_sample(p, tokens, labels, (double)miss);
    }
    cr_page_family(p, ratio, "gauge",
                   "Rolling token-weighted prefix-cache hit ratio of the shard's served requests "
                   "(half-life 60 s).");
    for (uint32_t s = 0; s < n; s++)
        cr_observe_shard(p, ratio, s, sh[s].hit_ratio);
}

static void loop_gauges(const cr_observer *o, cr_page *p)
{
    cr_loop_stats st;
    cr_loop_shard_stats shards[CR_OBSERVE_SHARDS];
    cr_core_loop_stats_read(o->core, &st, shards, CR_OBSERVE_SHARDS, NULL, 0);
    served_gauges(&st, p);
    shard_gauges(&st, shards, p);
    prediction_gauges(&st, p);
    receipt_gauges(&st, p);
    if (o->watch)
        watch_gauges(o->watch, p);
}

void cr_observe_gauges(void *ctx, cr_page *p)
{
    const cr_observer *o = ctx;
    cr_core *core = o->core;
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
    loop_gauges(o, p);
    cr_observe_route_gauges(core, p);
    cr_observe_endpoint_gauges(o, p);
    cr_observe_door_gauges(core, p);
    cr_observe_discover_gauges(o, p);
    if (o->replica)
        cr_observe_replica_gauges(o->replica, p);
    if (o->kv)
        cr_observe_kv_gauges(o->kv, p);
    if (o->epp)
        cr_observe_epp_gauges(o->epp, p);
    if (o->scrape)
        cr_observe_scrape_gauges(o->scrape, p);
}
