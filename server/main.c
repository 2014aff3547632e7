/* cacheroute-sidecar: loads the configuration, builds the core, serves it
 * over gRPC until SIGTERM, SIGINT or SIGQUIT (signals.h says what the
 * others do). */
#include <grpc/grpc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "arena.h"
#include "authz.h"
#include "config.h"
#include "descriptor_set.h"
#include "handlers.h"
#include "health.h"
#include "log.h"
#include "memory.h"
#include "metrics.h"
#include "observe.h"
#include "reflection.h"
#include "rpc.h"
#include "security.h"
#include "signals.h"
#include "watch_decisions.h"

#define SERVICE "/cacheroute.v1.CacheRoute/"
#define HEALTH "/grpc.health.v1.Health/" /* served on its own lane: probes never wait */
#define EXT_PROC "/envoy.service.ext_proc.v3.ExternalProcessor/Process" /* --epp-listen */

/* After --shutdown-grace, handlers still running get this much longer to
 * return; then the process ends without them (docs/operating.md,
 * "Shutdown": the sidecar exits within the grace + 1 s, this and the final
 * snapshot included). */
#define SHUTDOWN_MARGIN_S 0.5
/* The whole exit, teardown included, within the grace and this. */
#define EXIT_WITHIN_GRACE_S 0.9

/* What the sidecar serves; each handler's ctx is filled before serving. */
typedef struct sidecar {
    cr_handlers handlers;
    cr_health *health;
    cr_reflection *reflection;
    cr_metrics *metrics;
    cr_watch_hub *watch; /* WatchDecisions */
    cr_watch_hub *members; /* WatchEndpoints */
    cr_observer observer;
    cr_security security;
    cr_rpc *rpc;             /* while serving */
    cr_epp *epp;             /* --epp-listen's picker; NULL when off */
    cr_duplex_ops epp_ops;   /* its Process stream's */
    cr_rpc *epp_rpc;         /* its listener, while serving */
    size_t epp_index[3];     /* its methods' indexes in the metrics' paths */
    cr_signal_hooks signals; /* SIGHUP, SIGUSR1, SIGUSR2 */
    json_t *nofile;          /* the descriptor limits at start, for the log */
} sidecar;

enum { N_METHODS = 23 };

/* The last columns say who may call (rpc.h cr_access): state-changing calls
 * are an admin's once authorization is on. */
#define OPEN CR_ACCESS_OPEN, NULL, NULL
#define ADMIN CR_ACCESS_ADMIN, NULL, NULL
#define ADMIN_TO_INSTALL CR_ACCESS_ADMIN_IF, cr_authz_plan_installs, "with install=true"
#define ADMIN_TO_RESERVE CR_ACCESS_ADMIN_IF, cr_authz_select_reserves, "with dry_run=false"

/* --route-access: who may route (docs/threat-model.md): routes count
 * toward the outstanding work every client's routes are weighed by. The
 * endpoint picker's streams route too. */
static cr_access route_access(const cr_config *cfg)
{
    return cfg->server.route_access == CR_ROUTE_ACCESS_ANYONE ? CR_ACCESS_OPEN
                                                              : CR_ACCESS_IDENTIFIED;
}

static void method_table(sidecar *s, const cr_config *cfg, cr_method_spec out[N_METHODS])
{
    const cr_access routes = route_access(cfg);
    /* --reservations: who may make SelectInjection reserve (docs/security.md,
     * docs/threat-model.md); the others may dry-run. */
    const cr_method_spec select =
        cfg->server.reservations == CR_RESERVATIONS_ANYONE
            ? (cr_method_spec){SERVICE "SelectInjection", &cr_unary_kind, 0,
                               cr_handle_select_injection, &s->handlers, OPEN}
            : (cr_method_spec){SERVICE "SelectInjection", &cr_unary_kind, 0,
                               cr_handle_select_injection, &s->handlers, ADMIN_TO_RESERVE};
    const cr_method_spec methods[N_METHODS] = {
        {SERVICE "Plan", &cr_unary_kind, 1, cr_handle_plan, &s->handlers, ADMIN_TO_INSTALL},
        {SERVICE "RecordArrival", &cr_unary_kind, 0, cr_handle_record_arrival, &s->handlers,
         routes, NULL, NULL},
        select,
        {SERVICE "GetRates", &cr_unary_kind, 1, cr_handle_get_rates, &s->handlers, OPEN},
        {SERVICE "Forget", &cr_unary_kind, 0, cr_handle_forget, &s->handlers, ADMIN},
        {SERVICE "GetNodeProfile", &cr_unary_kind, 0, cr_handle_get_node_profile, &s->handlers,
         OPEN},
        {SERVICE "ReportOutcome", &cr_unary_kind, 1, cr_handle_report_outcome, &s->handlers,
         ADMIN},
        {SERVICE "GetDecision", &cr_unary_kind, 0, cr_handle_get_decision, &s->handlers, OPEN},
        {SERVICE "WatchDecisions", &cr_watch_kind, 0, NULL, s->watch, OPEN},
        {SERVICE "GetStats", &cr_unary_kind, 1, cr_handle_get_stats, &s->handlers, OPEN},
        {SERVICE "ClearReservations", &cr_unary_kind, 0, cr_handle_clear_reservations,
         &s->handlers, ADMIN},
        {SERVICE "RecordArrivals", &cr_bidi_each_kind, 0, cr_handle_record_arrival,
         &s->handlers, routes, NULL, NULL},
        {SERVICE "Route", &cr_unary_kind, 0, cr_handle_route, &s->handlers, routes, NULL, NULL},
        {SERVICE "Routes", &cr_bidi_each_kind, 0, cr_handle_route, &s->handlers, routes, NULL,
         NULL},
        {SERVICE "ReportKvEvents", &cr_unary_kind, 1, cr_handle_report_kv_events, &s->handlers,
         ADMIN},
        {SERVICE "SetEndpoints", &cr_unary_kind, 0, cr_handle_set_endpoints, &s->handlers,
         ADMIN},
        {SERVICE "DrainEndpoint", &cr_unary_kind, 0, cr_handle_drain_endpoint, &s->handlers,
         ADMIN},
        {SERVICE "ListEndpoints", &cr_unary_kind, 0, cr_handle_list_endpoints, &s->handlers,
         ADMIN},
        {SERVICE "WatchEndpoints", &cr_watch_kind, 0, NULL, s->members, ADMIN},
        {"/grpc.health.v1.Health/Check", &cr_unary_kind, 0, cr_health_check, s->health, OPEN},
        {"/grpc.health.v1.Health/Watch", &cr_health_watch_kind, 0, NULL, s->health, OPEN},
        {"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo", &cr_bidi_each_kind, 0,
         cr_reflection_handle, s->reflection, OPEN},
        {"/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cr_bidi_each_kind, 0,
         cr_reflection_handle, s->reflection, OPEN},
    };
    memcpy(out, methods, sizeof methods);
}

static void observe_rpc(void *ctx, size_t method, grpc_status_code status, double seconds)
{
    cr_metrics_rpc(ctx, method, (int)status, seconds);
}

/* --epp-listen: what the picker's open streams may hold, bytes: the
 * request bodies being gathered (--epp-max-buffered-bytes in all), as much
 * again as answers not yet sent (their echo), and each stream's headers
 * and response tail. */
static uint64_t epp_bounds(const cr_config *cfg)
{
    if (!*cfg->epp.listen)
        return 0;
    return 2 * cfg->epp.max_buffered_bytes +
           (uint64_t)cfg->epp.max_requests * (CR_EPP_MAX_HEADER_BYTES + CR_EPP_USAGE_TAIL_BYTES);
}

/* The KV-event frame bound when a link may be opened: --kv-events, or an
 * endpoints file or a discovery template whose endpoints may carry
 * kv_events. (A set given only through SetEndpoints is not foreseen
 * here.) */
static long kv_frame_bound(const cr_config *cfg)
{
    const cr_server_config *s = &cfg->server;
    return s->n_kv_events || *s->endpoints_file || *cfg->discover.kv_events_template
               ? s->kv_events_max_frame_bytes
               : 0;
}

/* The bounds on what clients can make the sidecar hold, added up, against
 * the cgroup's memory limit: past it, clients could get the process killed
 * before any bound refused them. */
static void warn_memory(const cr_config *cfg, int check_config)
{
    uint64_t need = cr_memory_bounds(cfg->server.memory_quota_bytes,
                                     cfg->server.max_pending_reply_bytes,
                                     cfg->server.max_decode_bytes,
                                     kv_frame_bound(cfg),
                                     &cfg->core) +
                    epp_bounds(cfg),
             limit = cfg->memory_limit;
    if (!limit || need <= limit)
        return;
    const char *why = "the bounds on what clients can make the sidecar hold add up past the "
                      "cgroup memory limit: lower --memory-quota-bytes, "
                      "--max-pending-reply-bytes, --max-decode-bytes, --max-owners, --receipts, "
                      "--inflight-max, --epp-max-buffered-bytes or --epp-max-requests";
    if (check_config)
        fprintf(stderr, "cacheroute-sidecar: warning: %s (%llu bytes, limit %llu)\n", why,
                (unsigned long long)need, (unsigned long long)limit);
    else
        cr_log(CR_LOG_WARN, "memory bounds past the limit",
               json_pack("{s:s,s:I,s:I}", "why", why, "bounds_bytes", (json_int_t)need,
                         "limit_bytes", (json_int_t)limit));
}

static void log_config(const cr_config *c, const sidecar *s, int port, int metrics_port,
                       int health_port, int epp_port)
{
    json_t *fields = cr_config_json(c);
    json_object_set_new(fields, "memory_limit_bytes",
                        c->memory_limit ? json_integer((json_int_t)c->memory_limit)
                                        : json_null());
    json_object_set_new(fields, "port", json_integer(port));
    json_object_set_new(fields, "metrics_port", json_integer(metrics_port));
    json_object_set_new(fields, "health_port", json_integer(health_port));
    json_object_set_new(fields, "epp_port", json_integer(epp_port));
    json_object_set(fields, "nofile", s->nofile);
    cr_log(CR_LOG_INFO, "serving", fields);
}

static json_t *rlim_json(rlim_t v)
{
    return v == RLIM_INFINITY ? json_string("unlimited") : json_integer((json_int_t)v);
}

/* gRPC core's listener stops for good when accept fails with EMFILE
 * (Debian's 1.51), so the sidecar takes every descriptor the hard limit
 * allows. Returns the limits before and after, for the start-up log. */
static json_t *raise_nofile(void)
{
    struct rlimit r;
    if (getrlimit(RLIMIT_NOFILE, &r) != 0)
        return json_null();
    rlim_t before = r.rlim_cur;
    r.rlim_cur = r.rlim_max;
    if (r.rlim_max == RLIM_INFINITY) { /* the kernel still caps it at nr_open */
        FILE *f = fopen("/proc/sys/fs/nr_open", "r");
        unsigned long nr = 1048576;
        if (f && fscanf(f, "%lu", &nr) != 1)
            nr = 1048576;
        if (f)
            fclose(f);
        r.rlim_cur = (rlim_t)nr;
    }
    int raised = setrlimit(RLIMIT_NOFILE, &r) == 0;
    getrlimit(RLIMIT_NOFILE, &r);
    return json_pack("{s:o,s:o,s:o,s:b}", "soft_at_start", rlim_json(before), "soft",
                     rlim_json(r.rlim_cur), "hard", rlim_json(r.rlim_max), "raised", raised);
}

/* SIGUSR2: what the sidecar holds right now, in one line. */
static void log_stats(void *ctx)
{
    sidecar *s = ctx;
    cr_core_stats st;
    cr_core_stats_read(s->handlers.core, &st);
    json_t *f = json_pack("{s:I,s:o,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f}", "in_flight",
                          (json_int_t)cr_rpc_in_flight(s->rpc), "in_flight_by_method",
                          cr_rpc_describe_running(s->rpc), "refused_calls",
                          (json_int_t)cr_rpc_refused(s->rpc), "request_timeouts",
                          (json_int_t)cr_rpc_request_timeouts(s->rpc), "stream_timeouts",
                          (json_int_t)cr_rpc_stream_timeouts(s->rpc), "pending_reply_bytes",
                          (json_int_t)cr_rpc_pending_reply_bytes(s->rpc), "reply_timeouts",
                          (json_int_t)cr_rpc_reply_timeouts(s->rpc), "tracked_owners",
                          (json_int_t)st.tracked_owners, "generation", (json_int_t)st.generation,
                          "admitted", (json_int_t)st.admitted, "imbalance", st.imbalance);
    if (f && s->epp_rpc) /* --epp-listen's calls (Process streams and health) */
        json_object_set_new(f, "epp", json_pack("{s:I,s:I,s:I}", "in_flight",
                                                (json_int_t)cr_rpc_in_flight(s->epp_rpc),
                                                "refused_calls",
                                                (json_int_t)cr_rpc_refused(s->epp_rpc),
                                                "stream_timeouts",
                                                (json_int_t)cr_rpc_stream_timeouts(s->epp_rpc)));
    cr_log(CR_LOG_INFO, "current stats", f);
}

/* Handlers outlived the grace and its margin: they are not waited for, and
 * nothing they may use is freed; the process ends here, its log lines
 * written (each cr_log line is one write(2), so nothing is buffered). The
 * state file is written first, by cr_core_snapshot rather than
 * cr_core_stop, which would also wait for a replan in progress; without
 * --state-file it does nothing (CR_EINVAL), and a failure is reported
 * through the core's hooks. */
static void forced_exit(sidecar *s, cr_rpc *rpc, long stuck, double waited)
{
    cr_error e;
    (void)cr_core_snapshot(s->handlers.core, &e);
    cr_log(CR_LOG_WARN, "exiting with calls still running",
           json_pack("{s:I,s:o,s:f}", "calls", (json_int_t)stuck, "methods",
                     cr_rpc_describe_running(rpc), "margin_s", SHUTDOWN_MARGIN_S));
    cr_log(CR_LOG_INFO, "stopped", json_pack("{s:f,s:b}", "drain_s", waited, "forced", 1));
    _exit(0);
}

/* SIGHUP: re-read the TLS files and the admin token file. */
static void reload_security(void *ctx)
{
    sidecar *s = ctx;
    cr_security_reload(&s->security);
}

/* SIGHUP: the replica re-reads its Redis password file and AUTHs again. */
static void reload_replica(void *ctx)
{
    sidecar *s = ctx;
    cr_replica_reload(s->handlers.replica);
}

/* SIGHUP: re-read --endpoints-file. */
static void reload_endpoints(void *ctx)
{
    sidecar *s = ctx;
    cr_endpoints_watch_reload(s->observer.endpoints);
}

/* SIGUSR1: write the state file now. A failed write is logged through the
 * core's state hook; only "no --state-file" is said here. */
static void snapshot_now(void *ctx)
{
    sidecar *s = ctx;
    cr_error e;
    if (cr_core_snapshot(s->handlers.core, &e) == CR_EINVAL)
        cr_log(CR_LOG_INFO, "no state file to write", json_pack("{s:s}", "reason", e.msg));
}

/* One listener's drain, on a thread of its own. */
typedef struct drain_job {
    cr_rpc *rpc;
    double grace;
    long stuck;
    double waited;
} drain_job;

static void *drain_main(void *arg)
{
    drain_job *j = arg;
    j->waited = cr_rpc_shutdown(j->rpc, j->grace, SHUTDOWN_MARGIN_S, &j->stuck);
    return NULL;
}

static void wait_and_drain(const cr_config *cfg, sidecar *s, cr_rpc *rpc)
{
    int sig = cr_signals_wait(&s->signals);
    /* docs/operating.md: the process exits within the grace + 1 s of the signal. */
    double exit_by = cr_mono_s() + cfg->server.shutdown_grace_s + EXIT_WITHIN_GRACE_S;
    cr_log(CR_LOG_INFO, "shutting down",
           json_pack("{s:s,s:f,s:I}", "signal", cr_signal_name(sig), "grace_s",
                     cfg->server.shutdown_grace_s, "in_flight", (json_int_t)cr_rpc_in_flight(rpc)));
    cr_health_set_serving(s->health, 0);
    cr_health_end_watches(s->health);
    cr_watch_end(s->watch);
    cr_watch_end(s->members);
    /* The picker's listener drains alongside, within the same grace. */
    drain_job epp = {s->epp_rpc, cfg->server.shutdown_grace_s, 0, 0};
    pthread_t t;
    int apart = epp.rpc && pthread_create(&t, NULL, drain_main, &epp) == 0;
    if (epp.rpc && !apart)
        drain_main(&epp);
    long stuck = 0;
    double waited = cr_rpc_shutdown(rpc, cfg->server.shutdown_grace_s, SHUTDOWN_MARGIN_S, &stuck);
    if (apart)
        pthread_join(t, NULL);
    if (stuck || epp.stuck)
        forced_exit(s, stuck ? rpc : epp.rpc, stuck + epp.stuck,
                    waited > epp.waited ? waited : epp.waited);
    s->rpc = NULL;
    cr_rpc_free(rpc);
    if (epp.rpc) { /* its streams are closed: the picker can go */
        s->epp_rpc = NULL;
        cr_rpc_free(epp.rpc);
    }
    cr_core_stop(s->handlers.core); /* the replanner, then the final snapshot */
    cr_log(CR_LOG_INFO, "stopped", json_pack("{s:f}", "drain_s", waited));
    cr_exit_watchdog(exit_by); /* the state is saved: what is left may be cut short */
}

static cr_rpc_limits rpc_limits(const cr_server_config *sc)
{
    return (cr_rpc_limits){sc->handshake_timeout_s,   sc->max_connection_idle_s,
                           sc->max_connection_age_s,  sc->max_connection_age_grace_s,
                           sc->max_concurrent_streams, sc->memory_quota_bytes,
                           sc->max_calls_per_method,  sc->request_deadline_s,
                           sc->reply_deadline_s,      sc->max_pending_reply_bytes,
                           sc->stream_idle_timeout_s};
}

/* A server with nothing left worth waiting for: no grace. */
static void stop_now(cr_rpc *rpc)
{
    long stuck = 0;
    cr_rpc_shutdown(rpc, 0, SHUTDOWN_MARGIN_S, &stuck);
    cr_rpc_free(rpc);
}

/* --health-listen: grpc.health.v1 alone, plaintext (kubelet gRPC probes
 * cannot speak TLS), sharing the main server's cr_health. NULL when off;
 * on error NULL with err set and *failed. */
static cr_rpc *start_health(const cr_server_config *sc, const cr_method_spec *methods,
                            int *failed, cr_error *err)
{
    cr_method_spec health[2];
    size_t n = 0;
    *failed = 0;
    if (!*sc->health_listen)
        return NULL;
    for (size_t i = 0; i < N_METHODS && n < 2; i++)
        if (strncmp(methods[i].path, HEALTH, strlen(HEALTH)) == 0)
            health[n++] = methods[i];
    cr_rpc_options opt = {.listen = sc->health_listen, .threads = 1, .max_message_bytes = 65536,
                          .listen_flag = "--health-listen", .limits = rpc_limits(sc)};
    cr_rpc *rpc = cr_rpc_start(&opt, health, n, err);
    *failed = rpc == NULL;
    return rpc;
}

/* The picker listener's calls, counted as the main one's (Process under
 * its own path, health under the main one's health methods). */
static void observe_epp_rpc(void *ctx, size_t method, grpc_status_code status, double seconds)
{
    sidecar *s = ctx;
    if (method < sizeof s->epp_index / sizeof *s->epp_index)
        cr_metrics_rpc(s->metrics, s->epp_index[method], (int)status, seconds);
}

/* --epp-listen: the endpoint picker's ext_proc Process, with grpc.health.v1
 * on its own lane (gateways probe the picker there), the gRPC port's TLS,
 * authorization and limits, sharing the main server's cr_health. NULL when
 * off; on error NULL with err set and *failed. */
static cr_rpc *start_epp(const cr_config *cfg, sidecar *s, const cr_method_spec *methods,
                         int *failed, cr_error *err)
{
    const cr_server_config *sc = &cfg->server;
    cr_method_spec specs[3] = {
        {EXT_PROC, &cr_duplex_kind, 0, NULL, &s->epp_ops, route_access(cfg), NULL, NULL}};
    size_t n = 1;
    *failed = 0;
    if (!s->epp)
        return NULL;
    s->epp_index[0] = N_METHODS;
    for (size_t i = 0; i < N_METHODS && n < 3; i++)
        if (strncmp(methods[i].path, HEALTH, strlen(HEALTH)) == 0) {
            s->epp_index[n] = i;
            specs[n++] = methods[i];
        }
    /* Process' messages are HTTP body chunks (Envoy's are 64 KiB at
     * most; a BUFFERED body up to --epp-max-body-bytes and its framing). */
    long max_message = (long)cfg->epp.max_body_bytes + 65536;
    /* A stream over --epp-max-requests is answered 429 by the picker, which
     * a gateway passes on; one refused by the call cap fails the filter,
     * and a FailOpen gateway then picks an endpoint itself. So the cap
     * leaves room for the picker's answer: a shed stream lasts one message. */
    cr_rpc_limits limits = rpc_limits(sc);
    long picker = (long)cfg->epp.max_requests + (long)cfg->epp.max_requests / 4 + 64;
    if (limits.max_calls_per_method && limits.max_calls_per_method < picker)
        limits.max_calls_per_method = picker;
    cr_rpc_options opt = {.listen = cfg->epp.listen, .threads = (int)sc->threads,
                          .max_message_bytes = max_message > sc->max_message_bytes
                                                   ? max_message
                                                   : sc->max_message_bytes,
                          .listen_flag = "--epp-listen", .limits = limits,
                          .observe = observe_epp_rpc, .observe_ctx = s,
                          .own_lane_prefix = HEALTH,
                          .accept_compressed = sc->compressed_requests == 1,
                          .max_inflating = sc->memory_quota_bytes / 4 / sc->max_message_bytes};
    cr_security_apply(&s->security, &opt);
    cr_rpc *rpc = cr_rpc_start(&opt, specs, n, err);
    *failed = rpc == NULL;
    return rpc;
}

/* The core is running (first probe done); serve it until a signal. */
static int serve(const cr_config *cfg, sidecar *s, const cr_method_spec *methods)
{
    cr_error err;
    const cr_server_config *sc = &cfg->server;
    cr_metrics_http_limits ml = {(unsigned)sc->metrics_timeout_s,
                                 (unsigned)sc->metrics_max_connections,
                                 (unsigned)sc->metrics_per_ip_connections};
    if (*sc->metrics_listen && cr_metrics_serve(s->metrics, sc->metrics_listen, &ml,
                                                cr_observe_gauges, &s->observer, &err)) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", err.msg);
        return 2;
    }
    cr_rpc_options opt = {.listen = sc->listen, .threads = (int)sc->threads,
                          .max_message_bytes = sc->max_message_bytes, .observe = observe_rpc,
                          .observe_ctx = s->metrics, .limits = rpc_limits(sc),
                          .own_lane_prefix = HEALTH,
                          .accept_compressed = sc->compressed_requests == 1,
                          .max_inflating = sc->memory_quota_bytes / 4 / sc->max_message_bytes};
    cr_security_apply(&s->security, &opt);
    cr_arena_set_budget((size_t)sc->max_decode_bytes);
    int failed = 0;
    cr_rpc *rpc = cr_rpc_start(&opt, methods, N_METHODS, &err);
    cr_rpc *health = rpc ? start_health(sc, methods, &failed, &err) : NULL;
    cr_rpc *epp = rpc && !failed ? start_epp(cfg, s, methods, &failed, &err) : NULL;
    if (!rpc || failed) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", err.msg);
        if (health)
            stop_now(health);
        if (rpc)
            stop_now(rpc);
        return 2;
    }
    s->rpc = rpc;
    s->epp_rpc = epp;
    cr_signals_on(&s->signals, CR_SIGNAL_STATS, "stats", log_stats, s);
    cr_signals_on(&s->signals, CR_SIGNAL_RELOAD, "tls", reload_security, s);
    cr_signals_on(&s->signals, CR_SIGNAL_RELOAD, "state-backend", reload_replica, s);
    cr_signals_on(&s->signals, CR_SIGNAL_RELOAD, "endpoints", reload_endpoints, s);
    cr_signals_on(&s->signals, CR_SIGNAL_SNAPSHOT, "state", snapshot_now, s);
    cr_health_set_serving(s->health, 1);
    cr_error e;
    if (cr_core_start(s->handlers.core, &e) != CR_OK)
        cr_log(CR_LOG_ERROR, "cannot start the replanner", json_pack("{s:s}", "error", e.msg));
    log_config(cfg, s, cr_rpc_port(rpc), cr_metrics_port(s->metrics),
               health ? cr_rpc_port(health) : 0, epp ? cr_rpc_port(epp) : 0);
    wait_and_drain(cfg, s, rpc);
    if (health) /* it answered NOT_SERVING through the drain */
        stop_now(health);
    cr_metrics_stop(s->metrics);
    return 0;
}

/* With --state-backend, the replica over the built core: the published
 * table installed before serving (or a degraded start); 0, or -1 with e. */
static int start_replica(const cr_config *cfg, sidecar *s, cr_error *e)
{
    if (!*cfg->replica.state_backend)
        return 0;
    cr_replica_hooks hooks = cr_observe_replica_hooks(&s->observer);
    cr_core_set_tables_external(s->handlers.core, 1); /* the leader's table only */
    cr_error unused; /* following changes nothing, so it cannot fail */
    cr_core_follow_endpoints(s->handlers.core, 1, NULL, &unused); /* and its endpoint set */
    s->handlers.replica =
        cr_replica_start(&cfg->replica, s->handlers.core, cfg->core.replan_interval_s, &hooks, e);
    s->observer.replica = s->handlers.replica;
    return s->handlers.replica ? 0 : -1;
}

/* The KV-event subscriber over the built core (its own thread, never on
 * an RPC's path): --kv-events' shards, and the endpoints' kv_events as the
 * set changes (the members hook tells it, through kv_follow). Started
 * before any thread that changes the set, so that none misses it; 0, or
 * -1 with e. */
static int start_kv(const cr_config *cfg, sidecar *s, cr_error *e)
{
    cr_kv_engine engines[CR_KV_MAX_ENGINES];
    size_t n;
    if (cr_config_kv_engines(cfg, engines, &n, e) != CR_OK)
        return -1;
    cr_kv_hooks hooks = cr_observe_kv_hooks(&s->observer);
    cr_kv_options opt = {.max_frame = (uint64_t)cfg->server.kv_events_max_frame_bytes,
                         .topic = cfg->server.kv_events_topic,
                         .dp_size = (uint32_t)cfg->server.kv_events_dp_size,
                         .follow = 1};
    s->observer.kv = cr_kv_start(engines, n, &opt, s->handlers.core, &hooks, e);
    atomic_store(&s->observer.kv_follow, s->observer.kv);
    return s->observer.kv ? 0 : -1;
}

/* With --scrape-interval above 0, the engines' /metrics scraper over the
 * built core (its own thread, never on an RPC's path); 0, or -1 with e. */
static int start_scrape(const cr_config *cfg, sidecar *s, cr_error *e)
{
    cr_scrape_config sc = cfg->scrape;
    sc.interval_s = cfg->core.route.scrape_interval_s; /* the rule's row: one flag */
    if (sc.interval_s <= 0)
        return 0;
    cr_scrape_hooks hooks = cr_observe_scrape_hooks(&s->observer);
    s->observer.scrape = cr_scrape_start(&sc, s->handlers.core, &hooks, e);
    return s->observer.scrape ? 0 : -1;
}

/* With --endpoints-file, the set read and watched; 0, or -1 with e. */
static int start_endpoints(const cr_config *cfg, sidecar *s, cr_error *e)
{
    if (!*cfg->server.endpoints_file)
        return 0;
    s->observer.endpoints = cr_endpoints_watch_start(cfg->server.endpoints_file,
                                                     *cfg->epp.listen != '\0', s->handlers.core, e);
    return s->observer.endpoints ? 0 : -1;
}

/* With --objectives, the door around the core's routes; 0, or -1 with e. */
static int start_door(const cr_config *cfg, sidecar *s, cr_error *e)
{
    cr_admit_config door;
    cr_admit_objective t[CR_ADMIT_MAX_OBJECTIVES];
    size_t n;
    int on = cr_config_door(&cfg->admit, &door, t, &n, e);
    if (on <= 0)
        return on;
    return cr_core_set_door(s->handlers.core, &door, t, n, e) == CR_OK ? 0 : -1;
}

/* With --endpoints-dns, the set resolved once and then every
 * --dns-interval (its own thread); 0, or -1 with e. */
static int start_dns(const cr_config *cfg, sidecar *s, cr_error *e)
{
    if (!*cfg->discover.endpoints_dns)
        return 0;
    cr_discover_hooks hooks = cr_observe_discover_hooks(&s->observer);
    s->observer.dns = cr_dns_watch_start(&cfg->discover, s->handlers.core, &hooks, e);
    return s->observer.dns ? 0 : -1;
}

/* With --endpoints-k8s-pool, the pool's pods watched into the set on a
 * thread of their own (the first set comes once they are listed); 0, or
 * -1 with e. */
static int start_k8s(const cr_config *cfg, sidecar *s, cr_error *e)
{
    if (!*cfg->discover.endpoints_k8s_pool)
        return 0;
    cr_discover_hooks hooks = cr_observe_discover_hooks(&s->observer);
    s->observer.k8s = cr_k8s_start(&cfg->discover, s->handlers.core, &hooks, e);
    return s->observer.k8s ? 0 : -1;
}

/* With --epp-listen, the endpoint picker over the built core; 0, or -1
 * with e. */
static int start_picker(const cr_config *cfg, sidecar *s, cr_error *e)
{
    const cr_epp_server_config *c = &cfg->epp;
    if (!*c->listen)
        return 0;
    cr_admit *door = cr_core_door(s->handlers.core);
    double wait_s = door ? cr_admit_config_of(door)->max_wait_ms / 1000 : 0;
    double idle_s = cfg->server.stream_idle_timeout_s;
    if (door && cr_admit_config_of(door)->max_queued > 0 && idle_s > 0 && idle_s <= wait_s) {
        cr_fail(e, CR_EINVAL,
                "--stream-idle-timeout (%g s) must be longer than --admit-max-wait-ms (%g s) "
                "when the picker holds requests (--admit-max-queued > 0)",
                idle_s, wait_s);
        return -1;
    }
    cr_epp_config ec = {.fallbacks = c->fallbacks,
                        .owner_header = c->owner_header,
                        .max_body_bytes = (size_t)c->max_body_bytes,
                        .tokens = (cr_epp_tokens)c->tokens,
                        .tokenize_timeout_s = c->tokenize_timeout_s,
                        .body_mode = (cr_epp_body_mode)c->body_mode,
                        .block_tokens = cfg->core.route.block_tokens,
                        .max_hashes = cfg->core.route.max_hashes,
                        .max_requests = c->max_requests,
                        .max_buffered_bytes = c->max_buffered_bytes,
                        .base_model = c->base_model,
                        .dispatch_s = 0.01,
                        .decided = cr_metrics_epp_decided,
                        .ctx = s->metrics};
    s->epp = cr_epp_new(&ec, s->handlers.core, e);
    s->epp_ops = cr_epp_ops(s->epp);
    s->observer.epp = s->epp;
    if (s->epp)
        cr_metrics_epp_on(s->metrics);
    return s->epp ? 0 : -1;
}

/* Builds the parts, serves, and tears down in reverse. */
static int run(const cr_config *cfg, json_t *nofile)
{
    sidecar s = {.handlers.max_message = (size_t)cfg->server.max_message_bytes,
                 .handlers.max_arrivals = (size_t)cfg->server.max_arrivals_per_call,
                 .nofile = nofile};
    cr_method_spec methods[N_METHODS];
    const char *paths[N_METHODS + 1]; /* and Process, on --epp-listen */
    s.health = cr_health_new();
    s.reflection = cr_reflection_new(cr_descriptor_set, cr_descriptor_set_len);
    s.watch = cr_watch_hub_new(&(cr_watch_config){
        .request = &cacheroute__v1__watch_decisions_request__descriptor,
        .lost_field = protobuf_c_message_descriptor_get_field_by_name(
                          &cacheroute__v1__decision_receipt__descriptor, "lost")
                          ->id,
        .max_watchers = CR_WATCH_MAX_WATCHERS,
        .queue_len = CR_WATCH_QUEUE_LEN});
    s.members = cr_watch_hub_new(&(cr_watch_config){
        .request = &cacheroute__v1__watch_endpoints_request__descriptor,
        .lost_field = protobuf_c_message_descriptor_get_field_by_name(
                          &cacheroute__v1__endpoint_change__descriptor, "lost")
                          ->id,
        .max_watchers = CR_WATCH_MAX_WATCHERS,
        .queue_len = CR_WATCH_QUEUE_LEN});
    method_table(&s, cfg, methods);
    for (size_t i = 0; i < N_METHODS; i++)
        paths[i] = methods[i].path;
    paths[N_METHODS] = EXT_PROC;
    s.metrics = cr_metrics_new(paths, N_METHODS + 1);
    int rc = 2;
    cr_error e;
    cr_core_hooks hooks;
    cr_core_config core_cfg = cfg->core;
    if (*cfg->replica.state_backend) /* the leader's replans are the cluster's */
        core_cfg.replan_interval_s = 0;
    s.observer = (cr_observer){.metrics = s.metrics, .watch = s.watch, .members = s.members};
    if (!s.health || !s.reflection || !s.metrics || !s.watch || !s.members) {
        fprintf(stderr, "cacheroute-sidecar: out of memory\n");
    } else if (hooks = cr_observe_hooks(&s.observer),
               !(s.handlers.core = cr_core_new(&core_cfg, &hooks, NULL, &e))) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", e.msg);
    } else if (s.observer.core = s.handlers.core,
               start_door(cfg, &s, &e) != 0 || start_kv(cfg, &s, &e) != 0 ||
                   start_endpoints(cfg, &s, &e) != 0 ||
                   start_dns(cfg, &s, &e) != 0 || start_k8s(cfg, &s, &e) != 0 ||
                   start_replica(cfg, &s, &e) != 0 || start_picker(cfg, &s, &e) != 0 ||
                   start_scrape(cfg, &s, &e) != 0) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", e.msg);
    } else {
        grpc_init();
        if (cr_security_open(&s.security, &cfg->server, cr_metrics_tls_expiry, s.metrics, &e) != 0)
            fprintf(stderr, "cacheroute-sidecar: %s\n", e.msg);
        else
            rc = serve(cfg, &s, methods);
        cr_security_close(&s.security);
        grpc_shutdown();
    }
    cr_epp_free(s.epp);                  /* before the core it routes with */
    cr_scrape_stop(s.observer.scrape);   /* before the core it feeds */
    cr_endpoints_watch_stop(s.observer.endpoints); /* likewise */
    cr_dns_watch_stop(s.observer.dns);             /* likewise */
    cr_k8s_stop(s.observer.k8s);                   /* likewise */
    cr_replica_stop(s.handlers.replica); /* before the core it reads */
    /* After every thread that changes the set (RPCs, the replanner, the
     * picker, the file, DNS, Kubernetes, the replica), whose members hook
     * tells it. */
    atomic_store(&s.observer.kv_follow, NULL);
    cr_kv_stop(s.observer.kv); /* before the core it feeds */
    cr_core_free(s.handlers.core);
    cr_watch_hub_free(s.watch); /* after the core: its hook publishes there */
    cr_watch_hub_free(s.members);
    cr_metrics_free(s.metrics);
    cr_reflection_free(s.reflection);
    cr_health_free(s.health);
    return rc;
}

/* --endpoints-file as a start would read it: CR_EINVAL with err naming
 * the file and line (or, with --epp-listen, the entry whose address is no
 * ip:port); CR_OK without one. */
static cr_status check_endpoints_file(const cr_config *cfg, cr_error *err)
{
    cr_endpoint_spec *v;
    size_t n;
    if (!*cfg->server.endpoints_file)
        return CR_OK;
    cr_status st = cr_endpoints_read_file(cfg->server.endpoints_file, &v, &n, err);
    if (st == CR_OK && *cfg->epp.listen)
        st = cr_endpoints_check_ip_ports(cfg->server.endpoints_file, v, n, err);
    free(v);
    return st;
}

int main(int argc, char **argv)
{
    /* Blocked in every thread (gRPC's included); the main thread takes
     * them with sigwait. */
    cr_signals_block();

    cr_config cfg;
    cr_error e;
    int rc = cr_config_load(&cfg, argc, argv, &e);
    if (rc == 2 && check_endpoints_file(&cfg, &e) != CR_OK)
        rc = -1; /* --check-config reads the file a start would */
    if (rc == 2) { /* --check-config */
        warn_memory(&cfg, 1);
        json_t *j = cr_config_json(&cfg);
        json_dumpf(j, stdout, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        putchar('\n');
        json_decref(j);
    } else if (rc < 0) {
        fprintf(stderr, "cacheroute-sidecar: %s\n", e.msg);
    }
    if (rc == 0) {
        cr_log_set_level(cfg.server.log_level);
        cr_log_capture_grpc();
        warn_memory(&cfg, 0);
        json_t *nofile = raise_nofile();
        rc = run(&cfg, nofile);
        json_decref(nofile);
    } else {
        rc = rc < 0 ? 2 : 0;
    }
    cr_config_free(&cfg);
    cr_exit_watchdog_disarm();
    return rc;
}
