/* Prometheus metrics: lock-free counters and histograms updated on the hot
 * path, rendered in the text exposition format (0.0.4) on scrape, and served
 * at /metrics by libmicrohttpd. Names follow Prometheus conventions: base
 * units (seconds, bytes, bits), counters end in _total. */
#ifndef CR_METRICS_H
#define CR_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "inject.h" /* cr_inject_reason */

typedef struct cr_metrics cr_metrics;
typedef struct cr_page cr_page;

/* method_paths[i] names the method the rpc layer reports as index i
 * ("/cacheroute.v1.CacheRoute/Plan"); the array must outlive m. */
cr_metrics *cr_metrics_new(const char *const *method_paths, size_t n_methods);
void cr_metrics_free(cr_metrics *m);

/* Thread-safe, wait-free updates. */
void cr_metrics_rpc(cr_metrics *m, size_t method, int grpc_code, double seconds);
void cr_metrics_arrivals(cr_metrics *m, uint64_t n);
void cr_metrics_plan(cr_metrics *m, double seconds, int installed);
/* An installed plan's churn (cr_churn), added to
 * cacheroute_plan_churn_sessions_total{kind}. */
void cr_metrics_plan_churn(cr_metrics *m, uint64_t moved, uint64_t admitted_in,
                           uint64_t admitted_out);
/* One decision: its reason (which implies its mode; one out of range counts
 * in the histograms only), the predicted totals in seconds, kv_s < 0 when
 * there was no KV option. */
void cr_metrics_injection(cr_metrics *m, cr_inject_reason reason, double text_s, double kv_s);

/* --epp-listen: cacheroute_epp_decision_seconds is shown (from now on),
 * and one routed request's seconds from its headers in to its destination
 * out go into it (m is the cr_metrics, typed void * for cr_epp_config's
 * decided hook). */
void cr_metrics_epp_on(cr_metrics *m);
void cr_metrics_epp_decided(void *m, double seconds);

/* The serving TLS certificate's notAfter, Unix seconds, shown as
 * cacheroute_tls_cert_expiry_timestamp_seconds (absent until set). m is
 * the cr_metrics, typed void * so that this is a cr_tls_loaded_fn. */
void cr_metrics_tls_expiry(void *m, double not_after);

/* Scrape-time values (estimator size, the installed table, probes) come from
 * a callback that writes families onto the page being rendered. */
typedef void (*cr_metrics_sample_fn)(void *ctx, cr_page *page);
void cr_page_family(cr_page *p, const char *name, const char *type, const char *help);
/* One sample; labels is the text inside the braces (escaped by the caller's
 * choice of values: use cr_page_label for arbitrary text) or NULL. */
void cr_page_sample(cr_page *p, const char *name, const char *labels, double value);
/* Writes key="value" with the value escaped per the exposition format. */
void cr_page_label(char *buf, size_t len, const char *key, const char *value);

/* The whole page (malloc'd, *len bytes, NUL-terminated), or NULL. */
char *cr_metrics_render(cr_metrics *m, cr_metrics_sample_fn sample, void *ctx, size_t *len);

/* What a scraper, or anyone who can reach the port, may hold: a
 * connection silent for timeout_s is closed; at most max_connections are
 * open, at most per_ip_connections from one address (so a trickling client
 * cannot lock the others out). 0 in a field: libmicrohttpd's default. */
typedef struct cr_metrics_http_limits {
    unsigned timeout_s, max_connections, per_ip_connections;
} cr_metrics_http_limits;

/* Serves GET /metrics on listen ("host:port", "[v6]:port") on one thread of
 * its own, within limits (NULL: the defaults). Returns 0, or -1 with err
 * naming --metrics-listen. */
int cr_metrics_serve(cr_metrics *m, const char *listen, const cr_metrics_http_limits *limits,
                     cr_metrics_sample_fn sample, void *ctx, cr_error *err);
void cr_metrics_stop(cr_metrics *m);
/* The bound port while serving (useful with port 0), else 0. */
int cr_metrics_port(const cr_metrics *m);

#endif
