/* cacheroute discover: endpoints that find themselves. A discovery source
 * turns what it finds into an endpoint set and applies it through
 * cr_core_set_endpoints, as the endpoints file does, from a thread of its
 * own (never on a route's path). A source that cannot reach what it reads
 * keeps the last set, counts the failure and logs it at most once a minute.
 *
 * Kubernetes (--endpoints-k8s-pool NAMESPACE/NAME): the InferencePool's
 * selector and target ports (GIE v1, inference.networking.k8s.io/v1), then
 * the pods it selects, listed and watched over HTTPS with the service
 * account's token (re-read for each request: it rotates) and CA. */
#ifndef CR_DISCOVER_H
#define CR_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"
#include "core.h"
#include "options.h"

/* An endpoint's KV-event address from --kv-events-template for an engine at
 * ip: each "{ip}" in template becomes ip (an IPv6 one in brackets), so
 * "tcp://{ip}:5557" gives "tcp://10.0.0.5:5557". "" (no template) gives "".
 * CR_EINVAL when the result does not fit cap bytes with its NUL. Pure. */
cr_status cr_discover_kv_address(const char *template, const char *ip, char *out, size_t cap,
                                 cr_error *err);

/* ---- Kubernetes ------------------------------------------------------------ */

#define CR_K8S_POD_ANNOTATION "cacheroute.io/kv-events" /* a pod's own KV-event address */
#define CR_K8S_MAX_PODS CR_ENDPOINTS_MAX    /* pods listed at once; more are an error */
#define CR_K8S_MAX_PORTS 8                  /* a pool's targetPorts (GIE's bound) */
#define CR_K8S_MAX_BODY (64u << 20)         /* bytes of a list or pool answer */
#define CR_K8S_MAX_LINE (4u << 20)          /* bytes of one watch event */
#define CR_K8S_WATCH_S 60                   /* a watch's timeoutSeconds; then re-watched */
#define CR_K8S_REQUEST_S 30                 /* a list or get's whole time */
#define CR_K8S_RETRY_S 1.0                  /* the first wait after a failure, doubled */
#define CR_K8S_RETRY_MAX_S 30.0             /* up to this */
#define CR_K8S_LOG_EVERY_S 60.0             /* failures are logged at most this often */

/* Its flags (cr_k8s_options; top-level keys). */
typedef struct cr_k8s_config {
    char *pool;       /* --endpoints-k8s-pool NAMESPACE/NAME, "" = off */
    char *api;        /* --k8s-api https://host:port, "" = KUBERNETES_SERVICE_HOST/PORT */
    char *token_file; /* --k8s-token-file */
    char *ca_file;    /* --k8s-ca-file */
    char *kv_events_template; /* --kv-events-template, "" = none */
} cr_k8s_config;

extern const cr_option_table cr_k8s_options;

/* The API server's base URL (no trailing slash) into out: c->api, else
 * https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6 host
 * in brackets). CR_EINVAL "--endpoints-k8s-pool needs --k8s-api or
 * KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT" when neither is
 * set, or when it does not fit cap. */
cr_status cr_k8s_api_url(const cr_k8s_config *c, char *out, size_t cap, cr_error *err);

/* What the watcher reports for the logs: level 0 info, 1 warn; what is the
 * message, detail the reason ("" none). Called on the watcher's thread. */
typedef struct cr_k8s_hooks {
    void (*log)(void *ctx, int level, const char *what, const char *detail);
    void *ctx;
} cr_k8s_hooks;

/* Its figures since start. */
typedef struct cr_k8s_stats {
    uint64_t lists;     /* pod lists read (the first and each relist) */
    uint64_t relists;   /* lists after the first: 410 Gone, a failed or ended watch's gap */
    uint64_t watches;   /* watch requests opened */
    uint64_t events;    /* ADDED, MODIFIED, DELETED events applied to the pods */
    uint64_t bookmarks; /* BOOKMARK events (the resourceVersion moved on) */
    uint64_t gone;      /* 410 Gone answers (the resourceVersion too old) */
    uint64_t errors;    /* failed requests and refused answers: the set kept */
    uint64_t empty;     /* sets of no endpoint, not applied (the last set kept) */
    uint64_t applied;   /* sets applied to the core */
    uint64_t pods;      /* pods known now (gauge) */
} cr_k8s_stats;

typedef struct cr_k8s cr_k8s;

/* Starts the watcher of c->pool for core on its own thread and returns at
 * once: the first set applies when the first list has been read (until
 * then the core has whatever it had). NULL with err for a bad pool name or
 * API URL, or out of memory, or no thread. c is copied; core and
 * hooks->ctx must outlive the watcher; hooks may be NULL. */
cr_k8s *cr_k8s_start(const cr_k8s_config *c, cr_core *core, const cr_k8s_hooks *hooks,
                     cr_error *err);

/* Its figures. Thread-safe. */
void cr_k8s_stats_read(cr_k8s *k, cr_k8s_stats *out);

/* Stops the thread (a request in flight is cut within about a second),
 * frees. NULL is ignored. Call before freeing the core. */
void cr_k8s_stop(cr_k8s *k);

#endif
