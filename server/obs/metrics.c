/* Counters and histograms, and the exposition-format renderer. */
#include "metrics.h"

#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_internal.h"
#include "wire.h"

#define N_CODES CR_WIRE_N_STATUS /* gRPC status codes 0..16, named by cr_wire_status_name */


/* Latency buckets from 50 µs (a RecordArrival) to 10 s (a large Plan). */
static const double rpc_bounds[] = {5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2,
                                    2.5e-2, 5e-2, 0.1,   0.25,   0.5,  1,    2.5,    5, 10};
/* Predicted injection latencies: 1 ms to 60 s. */
static const double inject_bounds[] = {1e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
                                       0.5,  1,    2.5,  5,      10,   30,  60};

/* The endpoint picker's added time: 10 µs to 1 s (an engine /tokenize at
 * --epp-tokenize-timeout). */
static const double epp_bounds[] = {1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                    5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1};

typedef struct histogram {
    const double *bounds;
    size_t n;
    _Atomic uint64_t *buckets; /* n + 1, not cumulative; the last is +Inf */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_bits; /* a double, updated by compare-and-swap */
} histogram;

struct cr_metrics {
    const char *const *paths;
    size_t n_methods;
    _Atomic uint64_t *rpc_calls; /* [method][code] */
    histogram *rpc_seconds;      /* [method] */
    _Atomic uint64_t arrivals;
    _Atomic uint64_t plans, plans_installed;
    _Atomic uint64_t churn[3]; /* moved, admitted_in, admitted_out */
    histogram plan_seconds;
    _Atomic uint64_t decisions[CR_INJECT_N_REASONS]; /* a reason implies its mode */
    histogram predicted[2];                   /* text, kv */
    _Atomic double tls_not_after;             /* Unix seconds; 0 = no TLS */
    histogram epp_decision;                   /* --epp-listen's decisions */
    _Atomic int epp_on;
    cr_metrics_http *http;
};

static int histogram_init(histogram *h, const double *bounds, size_t n)
{
    h->bounds = bounds;
    h->n = n;
    h->buckets = calloc(n + 1, sizeof *h->buckets);
    return h->buckets ? 0 : -1;
}

static void histogram_observe(histogram *h, double v)
{
    size_t i = 0;
    while (i < h->n && v > h->bounds[i])
        i++;
    atomic_fetch_add_explicit(&h->buckets[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->count, 1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&h->sum_bits, memory_order_relaxed), next;
    do {
        double sum;
        memcpy(&sum, &old, sizeof sum);
        sum += v;
        memcpy(&next, &sum, sizeof next);
    } while (!atomic_compare_exchange_weak(&h->sum_bits, &old, next));
}

cr_metrics *cr_metrics_new(const char *const *paths, size_t n_methods)
{
    cr_metrics *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->paths = paths;
    m->n_methods = n_methods;
    m->rpc_calls = calloc(n_methods * N_CODES + 1, sizeof *m->rpc_calls);
    m->rpc_seconds = calloc(n_methods + 1, sizeof *m->rpc_seconds);
    int bad = !m->rpc_calls || !m->rpc_seconds;
    for (size_t i = 0; !bad && i < n_methods; i++)
        bad = histogram_init(&m->rpc_seconds[i], rpc_bounds, sizeof rpc_bounds / sizeof *rpc_bounds);
    bad = bad || histogram_init(&m->plan_seconds, rpc_bounds, sizeof rpc_bounds / sizeof *rpc_bounds);
    for (int k = 0; !bad && k < 2; k++)
        bad = histogram_init(&m->predicted[k], inject_bounds,
                             sizeof inject_bounds / sizeof *inject_bounds);
    bad = bad || histogram_init(&m->epp_decision, epp_bounds, sizeof epp_bounds / sizeof *epp_bounds);
    if (bad) {
        cr_metrics_free(m);
        return NULL;
    }
    return m;
}

void cr_metrics_free(cr_metrics *m)
{
    if (!m)
        return;
    cr_metrics_stop(m);
    for (size_t i = 0; m->rpc_seconds && i < m->n_methods; i++)
        free(m->rpc_seconds[i].buckets);
    free(m->rpc_seconds);
    free(m->rpc_calls);
    free(m->plan_seconds.buckets);
    free(m->predicted[0].buckets);
    free(m->predicted[1].buckets);
    free(m->epp_decision.buckets);
    free(m);
}

void cr_metrics_rpc(cr_metrics *m, size_t method, int code, double seconds)
{
    if (method >= m->n_methods)
        return;
    if (code < 0 || code >= N_CODES)
        code = 2; /* UNKNOWN */
    atomic_fetch_add_explicit(&m->rpc_calls[method * N_CODES + (size_t)code], 1,
                              memory_order_relaxed);
    histogram_observe(&m->rpc_seconds[method], seconds);
}

void cr_metrics_arrivals(cr_metrics *m, uint64_t n)
{
    atomic_fetch_add_explicit(&m->arrivals, n, memory_order_relaxed);
}

void cr_metrics_plan_churn(cr_metrics *m, uint64_t moved, uint64_t admitted_in,
                          uint64_t admitted_out)
{
    atomic_fetch_add_explicit(&m->churn[0], moved, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->churn[1], admitted_in, memory_order_relaxed);
    atomic_fetch_add_explicit(&m->churn[2], admitted_out, memory_order_relaxed);
}

void cr_metrics_plan(cr_metrics *m, double seconds, int installed)
{
    atomic_fetch_add(&m->plans, 1);
    if (installed)
        atomic_fetch_add(&m->plans_installed, 1);
    histogram_observe(&m->plan_seconds, seconds);
}

void cr_metrics_injection(cr_metrics *m, cr_inject_reason reason, double text_s, double kv_s)
{
    if ((unsigned)reason < CR_INJECT_N_REASONS)
        atomic_fetch_add_explicit(&m->decisions[reason], 1, memory_order_relaxed);
    histogram_observe(&m->predicted[0], text_s);
    if (kv_s >= 0)
        histogram_observe(&m->predicted[1], kv_s);
}

/* ---- rendering ---- */

struct cr_page {
    char *buf;
    size_t len, cap;
    int failed;
};

static void page_printf(cr_page *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void page_printf(cr_page *p, const char *fmt, ...)
{
    for (int attempt = 0; attempt < 2 && !p->failed; attempt++) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p->buf + p->len, p->cap - p->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            p->failed = 1;
        } else if ((size_t)n < p->cap - p->len) {
            p->len += (size_t)n;
            return;
        } else {
            size_t cap = 2 * p->cap + (size_t)n;
            char *grown = realloc(p->buf, cap);
            if (!grown)
                p->failed = 1;
            else {
                p->buf = grown;
                p->cap = cap;
            }
        }
    }
}

void cr_page_family(cr_page *p, const char *name, const char *type, const char *help)
{
    page_printf(p, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void format_value(char *buf, size_t len, double v)
{
    if (isnan(v))
        snprintf(buf, len, "NaN");
    else if (isinf(v))
        snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
    else
        snprintf(buf, len, "%.17g", v);
}

void cr_page_sample(cr_page *p, const char *name, const char *labels, double value)
{
    char v[40];
    format_value(v, sizeof v, value);
    if (labels && *labels)
        page_printf(p, "%s{%s} %s\n", name, labels, v);
    else
        page_printf(p, "%s %s\n", name, v);
}

void cr_page_label(char *buf, size_t len, const char *key, const char *value)
{
    size_t i = (size_t)snprintf(buf, len, "%s=\"", key);
    for (const char *c = value; *c && i + 3 < len; c++) {
        if (*c == '\\' || *c == '"' || *c == '\n') {
            buf[i++] = '\\';
            buf[i++] = *c == '\n' ? 'n' : *c;
        } else {
            buf[i++] = *c;
        }
    }
    if (i + 1 < len)
        buf[i++] = '"';
    buf[i < len ? i : len - 1] = '\0';
}

static void render_histogram(cr_page *p, const char *name, const char *labels, const histogram *h)
{
    char lb[256], with_le[320];
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= h->n; i++) {
        cumulative += atomic_load_explicit(&h->buckets[i], memory_order_relaxed);
        if (i < h->n)
            snprintf(lb, sizeof lb, "%.6g", h->bounds[i]);
        else
            snprintf(lb, sizeof lb, "+Inf");
        snprintf(with_le, sizeof with_le, "%s%sle=\"%s\"", labels ? labels : "",
                 labels && *labels ? "," : "", lb);
        page_printf(p, "%s_bucket{%s} %llu\n", name, with_le, (unsigned long long)cumulative);
    }
    double sum;
    uint64_t bits = atomic_load(&h->sum_bits);
    memcpy(&sum, &bits, sizeof sum);
    snprintf(lb, sizeof lb, "%s_sum", name);
    cr_page_sample(p, lb, labels, sum);
    snprintf(lb, sizeof lb, "%s_count", name);
    cr_page_sample(p, lb, labels, (double)atomic_load(&h->count));
}

/* "/cacheroute.v1.CacheRoute/Plan" -> service="cacheroute.v1.CacheRoute",method="Plan" */
static void method_labels(char *buf, size_t len, const char *path)
{
    const char *slash = strrchr(path, '/');
    char service[160], a[200], b[120];
    snprintf(service, sizeof service, "%.*s", slash ? (int)(slash - path - 1) : 0, path + 1);
    cr_page_label(a, sizeof a, "service", service);
    cr_page_label(b, sizeof b, "method", slash ? slash + 1 : path);
    snprintf(buf, len, "%s,%s", a, b);
}

static void render_rpcs(cr_metrics *m, cr_page *p)
{
    char labels[400], full[480];
    cr_page_family(p, "cacheroute_rpc_requests_total", "counter",
                   "gRPC calls finished, by service, method and status code.");
    for (size_t i = 0; i < m->n_methods; i++) {
        method_labels(labels, sizeof labels, m->paths[i]);
        for (int c = 0; c < N_CODES; c++) {
            uint64_t v = atomic_load(&m->rpc_calls[i * N_CODES + (size_t)c]);
            if (v == 0 && c != 0)
                continue; /* every method shows OK; other codes once seen */
            snprintf(full, sizeof full, "%s,code=\"%s\"", labels,
                     cr_wire_status_name((grpc_status_code)c));
            cr_page_sample(p, "cacheroute_rpc_requests_total", full, (double)v);
        }
    }
    cr_page_family(p, "cacheroute_rpc_duration_seconds", "histogram",
                   "gRPC call latency in the sidecar, from arrival to the last byte sent.");
    for (size_t i = 0; i < m->n_methods; i++) {
        method_labels(labels, sizeof labels, m->paths[i]);
        render_histogram(p, "cacheroute_rpc_duration_seconds", labels, &m->rpc_seconds[i]);
    }
}

static void render_planner(cr_metrics *m, cr_page *p)
{
    cr_page_family(p, "cacheroute_arrivals_recorded_total", "counter",
                   "Arrivals recorded by RecordArrival.");
    cr_page_sample(p, "cacheroute_arrivals_recorded_total", NULL, (double)atomic_load(&m->arrivals));
    cr_page_family(p, "cacheroute_plans_total", "counter",
                   "Plans made (by RPC, the replanner, or a replica leader's cluster plans).");
    cr_page_sample(p, "cacheroute_plans_total", NULL, (double)atomic_load(&m->plans));
    cr_page_family(p, "cacheroute_plans_installed_total", "counter",
                   "Plans installed as the current routing table.");
    cr_page_sample(p, "cacheroute_plans_installed_total", NULL,
                   (double)atomic_load(&m->plans_installed));
    static const char *const kinds[3] = {"kind=\"moved\"", "kind=\"admitted_in\"",
                                         "kind=\"admitted_out\""};
    cr_page_family(p, "cacheroute_plan_churn_sessions_total", "counter",
                   "Sessions installed plans changed against the tables they replaced: moved "
                   "(admitted in both, another shard set), admitted_in, admitted_out.");
    for (int k = 0; k < 3; k++)
        cr_page_sample(p, "cacheroute_plan_churn_sessions_total", kinds[k],
                       (double)atomic_load(&m->churn[k]));
    cr_page_family(p, "cacheroute_plan_duration_seconds", "histogram",
                   "Time to plan, from the estimator snapshot or request to the table.");
    render_histogram(p, "cacheroute_plan_duration_seconds", NULL, &m->plan_seconds);
}

static void render_injection(cr_metrics *m, cr_page *p)
{
    static const char *const modes[3] = {"unspecified", "text", "kv_cache"};
    char labels[128];
    cr_page_family(p, "cacheroute_injection_decisions_total", "counter",
                   "SelectInjection decisions (dry runs included), by mode and reason.");
    for (int r = 0; r < CR_INJECT_N_REASONS; r++) {
        snprintf(labels, sizeof labels, "mode=\"%s\",reason=\"%s\"",
                 modes[cr_inject_reason_mode((cr_inject_reason)r)],
                 cr_inject_reason_name((cr_inject_reason)r));
        cr_page_sample(p, "cacheroute_injection_decisions_total", labels,
                       (double)atomic_load(&m->decisions[r]));
    }
    cr_page_family(p, "cacheroute_injection_predicted_seconds", "histogram",
                   "Predicted total latency of each injection path per decision.");
    render_histogram(p, "cacheroute_injection_predicted_seconds", "path=\"text\"",
                     &m->predicted[0]);
    render_histogram(p, "cacheroute_injection_predicted_seconds", "path=\"kv_cache\"",
                     &m->predicted[1]);
}

void cr_metrics_epp_on(cr_metrics *m) { atomic_store(&m->epp_on, 1); }

void cr_metrics_epp_decided(void *m, double seconds)
{
    histogram_observe(&((cr_metrics *)m)->epp_decision, seconds);
}

static void render_epp(cr_metrics *m, cr_page *p)
{
    if (!atomic_load(&m->epp_on))
        return;
    cr_page_family(p, "cacheroute_epp_decision_seconds", "histogram",
                   "The endpoint picker's added time per routed request, from its request "
                   "headers in to its destination out.");
    render_histogram(p, "cacheroute_epp_decision_seconds", NULL, &m->epp_decision);
}

void cr_metrics_tls_expiry(void *m, double not_after)
{
    atomic_store(&((cr_metrics *)m)->tls_not_after, not_after);
}

static void render_tls(cr_metrics *m, cr_page *p)
{
    double t = atomic_load(&m->tls_not_after);
    if (t == 0)
        return;
    cr_page_family(p, "cacheroute_tls_cert_expiry_timestamp_seconds", "gauge",
                   "notAfter of the TLS certificate the gRPC port serves, Unix seconds");
    cr_page_sample(p, "cacheroute_tls_cert_expiry_timestamp_seconds", NULL, t);
}

char *cr_metrics_render(cr_metrics *m, cr_metrics_sample_fn sample, void *ctx, size_t *len)
{
    cr_page p = {malloc(16384), 0, 16384, 0};
    if (!p.buf)
        return NULL;
    render_rpcs(m, &p);
    render_planner(m, &p);
    render_injection(m, &p);
    render_tls(m, &p);
    render_epp(m, &p);
    if (sample)
        sample(ctx, &p);
    if (p.failed) {
        free(p.buf);
        return NULL;
    }
    *len = p.len;
    return p.buf;
}

cr_metrics_http **cr_metrics_http_slot(cr_metrics *m) { return &m->http; }
