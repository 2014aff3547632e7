/* The Kubernetes watcher's private parts: the HTTP client (k8s_http.c),
 * the pods and the pool read from JSON (k8s_pods.c), the set they make. */
#ifndef CR_K8S_INTERNAL_H
#define CR_K8S_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>

#include "discover.h"

/* ---- HTTP (k8s_http.c) ---- */

typedef struct k8s_http {
    void *curl;             /* one easy handle: the connection is kept between requests */
    const char *base;       /* the API server's URL */
    const char *token_file; /* re-read for each request */
    const char *ca_file;
    atomic_int *stop;       /* set: a request in flight ends within about a second */
} k8s_http;

/* Called with each line of a watch (NUL-terminated, no newline), and
 * first with NULL once a 200 answer's headers are read (the watch is
 * open); nonzero ends the watch. */
typedef int (*k8s_line_fn)(void *ctx, char *line, size_t len);

/* GET base+path. With line NULL the whole answer (at most CR_K8S_MAX_BODY
 * bytes) is in *body (malloc'd, NUL-terminated; the caller frees it);
 * with line, a 200 answer is handed to it line by line (each at most
 * CR_K8S_MAX_LINE bytes) and any other answer is in *body. *status is the
 * HTTP status. CR_OK when the answer was read to its end (or line ended
 * it); CR_EINVAL with err when the token cannot be read, the request
 * fails (connection, TLS, timeout: timeout_s in all), or an answer or line
 * is too long. */
cr_status k8s_http_get(k8s_http *h, const char *path, long timeout_s, k8s_line_fn line,
                       void *ctx, char **body, long *status, cr_error *err);

/* value escaped for a URL query (curl_easy_escape) into out. */
cr_status k8s_http_escape(k8s_http *h, const char *value, char *out, size_t cap, cr_error *err);

/* ---- the pool and its pods (k8s_pods.c) ---- */

#define K8S_NAME_MAX 253
#define K8S_IP_MAX 45
#define K8S_RV_MAX 128
#define K8S_SELECTOR_MAX 4096

typedef struct k8s_pool {
    char selector[K8S_SELECTOR_MAX]; /* matchLabels as a labelSelector: "a=b,c=d" */
    uint32_t ports[CR_K8S_MAX_PORTS];
    size_t n_ports;
} k8s_pool;

typedef struct k8s_pod {
    char name[K8S_NAME_MAX + 1];
    char ip[K8S_IP_MAX + 1]; /* "" not yet given one */
    char kv[CR_ENDPOINT_ADDRESS_MAX + 1]; /* the annotation's, "" none */
    int ready, deleting, done; /* Ready True, a deletionTimestamp, phase Succeeded/Failed */
} k8s_pod;

typedef struct k8s_pods {
    k8s_pod *v; /* CR_K8S_MAX_PODS places */
    size_t n;
    char rv[K8S_RV_MAX + 1]; /* the resourceVersion the pods are at */
} k8s_pods;

/* An InferencePool's JSON into *out. CR_EINVAL naming what is missing or
 * bad (spec.selector.matchLabels, spec.targetPorts[].number). Pure. */
cr_status k8s_pool_parse(const char *json, k8s_pool *out, cr_error *err);

/* A PodList's JSON: its items replace p's pods, p->rv its
 * metadata.resourceVersion. CR_EINVAL (p unchanged) when it is no list,
 * has more than CR_K8S_MAX_PODS items or an item without a name. */
cr_status k8s_pods_list(k8s_pods *p, const char *json, cr_error *err);

typedef enum k8s_event {
    K8S_EVENT_CHANGED,  /* ADDED, MODIFIED or DELETED: p changed */
    K8S_EVENT_BOOKMARK, /* only p->rv moved */
    K8S_EVENT_GONE,     /* an ERROR of code 410: relist */
    K8S_EVENT_ERROR     /* any other ERROR, or a bad line: err says */
} k8s_event;

/* One watch line applied to p (p->rv from its object). */
k8s_event k8s_pods_event(k8s_pods *p, const char *line, cr_error *err);

/* A Status answer's "reason: message" (or the first bytes of any other
 * body) into out. */
void k8s_status_text(const char *body, char *out, size_t cap);

/* One endpoint's strings. */
typedef struct k8s_endpoint {
    char id[CR_ENDPOINT_ID_MAX + 1];
    char address[CR_ENDPOINT_ADDRESS_MAX + 1];
    char kv[CR_ENDPOINT_ADDRESS_MAX + 1];
} k8s_endpoint;

/* The endpoints of p's pods on pool's ports, sorted by id, into specs and
 * their strings into ep (both CR_ENDPOINTS_MAX places), *n of them: one a
 * pod with an IP (not done) and port; id the pod's name (NAME:PORT with
 * several ports), address IP:PORT, kv_events the pod's annotation else
 * template with its IP; stated: deleting DRAINING, else ready ACTIVE, else
 * DOWN. *skipped counts the endpoints left out (an id too long, past
 * CR_ENDPOINTS_MAX). */
void k8s_endpoints(const k8s_pods *p, const k8s_pool *pool, const char *template,
                   cr_endpoint_spec *specs, k8s_endpoint *ep, size_t *n, size_t *skipped);

#endif
