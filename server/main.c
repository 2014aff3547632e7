/* cacheroute-sidecar: wires the components to the gRPC server and runs
 * until SIGTERM or SIGINT. */
#include <grpc/grpc.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "descriptor_set.h"
#include "handlers.h"
#include "health.h"
#include "log.h"
#include "metrics.h"
#include "reflection.h"
#include "rpc.h"
#include "sidecar.h"

#define SERVICE "/cacheroute.v1.CacheRoute/"
/* NIC utilization is sampled over this window at every probe; short, since
 * the first probe delays readiness by it. */
#define PROBE_NIC_SAMPLE_S 0.25

static void log_config(const cr_config *c, int port, int metrics_port)
{
    json_t *fields = cr_config_json(c);
    json_object_set_new(fields, "port", json_integer(port));
    json_object_set_new(fields, "metrics_port", json_integer(metrics_port));
    cr_log(CR_LOG_INFO, "serving", fields);
}

/* The injection cost model and the node prober; the first probe runs here,
 * before the sidecar reports SERVING. */
static int start_probes(const cr_config *cfg, cr_sidecar *s)
{
    cr_error e;
    cr_probe_config pc;
    cr_probe_config_default(&pc);
    pc.sysfs_root = cfg->sysfs_root;
    pc.nic_names = (const char *const *)cfg->nics.items;
    pc.n_nic_names = cfg->nics.n;
    pc.interval_s = cfg->probe_interval;
    pc.nic_sample_s = PROBE_NIC_SAMPLE_S;
    pc.on_snapshot = cr_sidecar_log_probe;
    if (!(s->injector = cr_injector_new(&cfg->inject, &e)) ||
        !(s->prober = cr_prober_start(&pc, &e))) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", e.msg);
        return -1;
    }
    return 0;
}

static void observe_rpc(void *ctx, size_t method, grpc_status_code status, double seconds)
{
    cr_metrics_rpc(ctx, method, (int)status, seconds);
}

static int serve(const cr_config *cfg, cr_sidecar *s, cr_health *h, cr_reflection *refl,
                 const sigset_t *signals)
{
    const cr_method_spec methods[] = {
        {SERVICE "Plan", &cr_unary_kind, 1, cr_handle_plan, s},
        {SERVICE "RecordArrival", &cr_unary_kind, 0, cr_handle_record_arrival, s},
        {SERVICE "SelectInjection", &cr_unary_kind, 0, cr_handle_select_injection, s},
        {SERVICE "GetRates", &cr_unary_kind, 1, cr_handle_get_rates, s},
        {SERVICE "Forget", &cr_unary_kind, 0, cr_handle_forget, s},
        {SERVICE "GetNodeProfile", &cr_unary_kind, 0, cr_handle_get_node_profile, s},
        {"/grpc.health.v1.Health/Check", &cr_unary_kind, 0, cr_health_check, h},
        {"/grpc.health.v1.Health/Watch", &cr_health_watch_kind, 0, NULL, h},
        {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", &cr_bidi_each_kind, 0,
         cr_reflection_handle, refl},
        {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cr_bidi_each_kind, 0,
         cr_reflection_handle, refl},
    };
    enum { N_METHODS = sizeof methods / sizeof methods[0] };
    const char *paths[N_METHODS];
    for (size_t i = 0; i < N_METHODS; i++)
        paths[i] = methods[i].path;
    char err[512];
    cr_metrics *metrics = cr_metrics_new(paths, N_METHODS);
    if (!metrics) {
        fprintf(stderr, "cacheroute-sidecar: out of memory\n");
        return 2;
    }
    s->metrics = metrics;
    if (*cfg->metrics_listen &&
        cr_metrics_serve(metrics, cfg->metrics_listen, cr_sidecar_gauges, s, err, sizeof err)) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", err);
        cr_metrics_free(metrics);
        return 2;
    }
    cr_rpc_options opt = {cfg->listen, (int)cfg->threads, cfg->max_message_bytes, observe_rpc,
                          metrics};
    cr_rpc *rpc = cr_rpc_start(&opt, methods, N_METHODS, err, sizeof err);
    if (!rpc) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", err);
        cr_metrics_free(metrics);
        return 2;
    }
    cr_health_set_serving(h, 1);
    if (cr_sidecar_start_replanner(s) != 0)
        cr_log(CR_LOG_ERROR, "cannot start the replanner thread", NULL);
    log_config(cfg, cr_rpc_port(rpc), cr_metrics_port(metrics));

    int sig = 0;
    sigwait(signals, &sig);
    cr_log(CR_LOG_INFO, "shutting down",
           json_pack("{s:s,s:f,s:I}", "signal", sig == SIGTERM ? "SIGTERM" : "SIGINT", "grace_s",
                     cfg->shutdown_grace, "in_flight", (json_int_t)cr_rpc_in_flight(rpc)));
    cr_health_set_serving(h, 0);
    cr_health_end_watches(h);
    double waited = cr_rpc_shutdown(rpc, cfg->shutdown_grace);
    cr_rpc_free(rpc);
    cr_sidecar_stop_replanner(s);
    cr_metrics_free(metrics);
    cr_log(CR_LOG_INFO, "stopped", json_pack("{s:f}", "drain_s", waited));
    return 0;
}

int main(int argc, char **argv)
{
    /* Block the shutdown signals in every thread (gRPC's included); the main
     * thread takes them with sigwait. */
    sigset_t signals;
    sigemptyset(&signals);
    sigaddset(&signals, SIGTERM);
    sigaddset(&signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &signals, NULL);
    signal(SIGPIPE, SIG_IGN);

    cr_config cfg;
    char err[512];
    int rc = cr_config_load(&cfg, argc, argv, err, sizeof err);
    if (rc == 2) { /* --check-config */
        json_t *j = cr_config_json(&cfg);
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
        json_decref(j);
    } else if (rc < 0) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", err);
    }
    if (rc != 0) {
        cr_config_free(&cfg);
        return rc < 0 ? 2 : 0;
    }
    cr_log_set_level(cfg.log_level);
    cr_log_capture_grpc();

    cr_error e;
    cr_sidecar *s = cr_sidecar_new(&cfg, &e);
    cr_health *h = cr_health_new();
    cr_reflection *refl = cr_reflection_new(cr_descriptor_set, cr_descriptor_set_len);
    if (!s || !h || !refl) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", s ? "out of memory" : e.msg);
        rc = 2;
    } else if (start_probes(&cfg, s) != 0) {
        rc = 2;
    } else {
        grpc_init();
        rc = serve(&cfg, s, h, refl, &signals);
        grpc_shutdown();
    }
    cr_prober_stop(s ? s->prober : NULL);
    cr_injector_free(s ? s->injector : NULL);
    cr_reflection_free(refl);
    cr_health_free(h);
    cr_sidecar_free(s);
    cr_config_free(&cfg);
    return rc;
}
