/* cacheroute discover: endpoint sets found rather than written. A source
 * (DNS now; Kubernetes next) runs on a thread of its own, never on a
 * request's path, and gives each set it finds to the core through the
 * same path as the endpoints file (cr_core_set_endpoints: joins, removals,
 * the same reporting and churn rules). A source that fails keeps the last
 * set it gave.
 *
 * The shared part: the sources' options (one struct, one table; one source
 * at most, --endpoints-file included: server/config.c) and the KV-event
 * address template that gives each found endpoint its kv_events. Then one
 * section a source. */
#ifndef CR_DISCOVER_H
#define CR_DISCOVER_H

#include <stddef.h>
#include <stdint.h>

#include "core.h"
#include "endpoints.h"
#include "options.h"

typedef struct cr_discover_config {
    char *kv_events_template; /* --kv-events-template, "" = none */
    /* ---- DNS ---- */
    char *endpoints_dns;      /* --endpoints-dns NAME:PORT, "" = off */
    double dns_interval_s;    /* --dns-interval */
    char *dns_server;         /* --dns-server IP:PORT, "" = resolv.conf's */
    /* ---- Kubernetes ---- */
    char *endpoints_k8s_pool; /* --endpoints-k8s-pool NAMESPACE/NAME, "" = off */
    char *k8s_api;            /* --k8s-api https://host:port, "" = in-cluster */
    char *k8s_token_file;     /* --k8s-token-file */
    char *k8s_ca_file;        /* --k8s-ca-file */
} cr_discover_config;

/* Its rows (top-level keys of the effective configuration); the table's
 * check refuses --kv-events-template without a source. */
extern const cr_option_table cr_discover_options;

/* The flags of the sources c gives ("--endpoints-dns"), at most max into
 * names; returns how many are given. */
size_t cr_discover_sources(const cr_discover_config *c, const char **names, size_t max);

/* Called on a source's thread; must not block (log and return). level:
 * 0 info, 1 warn. what: the log line's message; why: the detail, or
 * NULL. */
typedef struct cr_discover_hooks {
    void (*log)(void *ctx, int level, const char *what, const char *source, const char *why);
    void *ctx;
} cr_discover_hooks;

/* The KV-event address of an endpoint at ip: tmpl with each "{ip}"
 * replaced by ip, an IPv6 one (holding ':') in brackets
 * ("tcp://{ip}:5557", "fd00::5" gives "tcp://[fd00::5]:5557"). tmpl ""
 * gives "". CR_EINVAL "--kv-events-template ..." when tmpl names no
 * {ip}, holds another brace or a byte that is no printable ASCII, or the
 * address would pass CR_ENDPOINT_ADDRESS_MAX bytes or len - 1. Pure. */
cr_status cr_discover_kv_address(const char *tmpl, const char *ip, char *out, size_t len,
                                 cr_error *err);

/* ---- DNS ------------------------------------------------------------------ */

/* --endpoints-dns NAME:PORT (a Kubernetes headless Service): every
 * --dns-interval, the A and AAAA records of NAME (the resolver's search
 * domains apply, /etc/hosts does not) with c-ares; each address is an
 * endpoint with id = address = ip:port ([v6]:port), in address order, and
 * its kv_events from the template. A set that differs from the last one
 * given is given to the core. A failure (a timeout, SERVFAIL, NXDOMAIN,
 * no address) or a refused set (the core's refusal, or more than
 * CR_ENDPOINTS_MAX addresses) keeps the last set: counted, and logged at
 * most once every CR_DNS_LOG_EVERY_S; the first answer after failures is
 * logged too. At start the name is resolved once before serving; a
 * failure then is logged, not fatal (pods may not be up yet). */
#define CR_DNS_NAME_MAX 253
#define CR_DNS_LOG_EVERY_S 60.0
#define CR_DNS_TIMEOUT_MAX_MS 2000 /* a query's first try; the second waits twice that */

/* NAME:PORT parsed: NAME 1..CR_DNS_NAME_MAX bytes of letters, digits,
 * '-', '_' and '.', PORT 1..65535. CR_EINVAL "--endpoints-dns must be
 * NAME:PORT ..." otherwise. name needs CR_DNS_NAME_MAX + 1 bytes. Pure. */
cr_status cr_dns_target_parse(const char *value, char *name, uint16_t *port, cr_error *err);

/* IP:PORT (IPv4 a.b.c.d:port or [v6]:port, port 1..65535): 1, else 0. */
int cr_dns_is_ip_port(const char *value);

/* An address as an answer gives it. */
typedef struct cr_dns_addr {
    uint8_t v6;        /* 0: IPv4, bytes[0..4); 1: IPv6, bytes[0..16) */
    uint8_t bytes[16];
} cr_dns_addr;

/* Sorts v[0..n) (IPv4 first, then by bytes) and drops repeats; returns
 * how many are left. Pure. */
size_t cr_dns_addrs_sort(cr_dns_addr *v, size_t n);

/* The address alone ("10.0.0.5", "fd00::5") into out (46 bytes are
 * enough). Pure. */
void cr_dns_ip_text(const cr_dns_addr *a, char *out, size_t len);

/* Addresses v[0..n) (sorted) as specs: id = address = ip:port, kv_events
 * from tmpl (cr_discover_kv_address), state the set's own. One malloc'd
 * block holding the specs and their strings (the caller frees it); NULL
 * with err on a template error or out of memory. Pure. */
cr_endpoint_spec *cr_dns_specs(const cr_dns_addr *v, size_t n, uint16_t port, const char *tmpl,
                               cr_error *err);

typedef struct cr_dns_watch cr_dns_watch;

/* Resolves c->endpoints_dns once (giving the core its first set, or
 * logging why not) and starts the thread resolving every
 * c->dns_interval_s. NULL with err on a bad flag value (cr_dns_target_parse,
 * --dns-server), when the resolver cannot start, or out of memory. c is
 * copied; core and hooks->ctx must outlive the watch; hooks may be NULL. */
cr_dns_watch *cr_dns_watch_start(const cr_discover_config *c, cr_core *core,
                                 const cr_discover_hooks *hooks, cr_error *err);

typedef struct cr_dns_stats {
    uint64_t resolved; /* answers with at least one address */
    uint64_t failed;   /* resolutions that gave none (the set kept) */
    uint64_t applied;  /* sets given to the core */
    uint64_t refused;  /* sets the core refused (the set kept) */
    uint32_t found;    /* addresses in the last answer; 0 before one */
} cr_dns_stats;

/* The figures since start. Thread-safe; w NULL gives zeros. */
void cr_dns_watch_stats(cr_dns_watch *w, cr_dns_stats *out);

/* Stops the thread (a resolution in progress is cancelled within about
 * 50 ms) and frees w. NULL ignored. Call before freeing the core. */
void cr_dns_watch_stop(cr_dns_watch *w);

/* ---- Kubernetes ------------------------------------------------------------ */

/* --endpoints-k8s-pool NAMESPACE/NAME: the InferencePool's selector and
 * target ports (GIE v1, inference.networking.k8s.io/v1), then the pods it
 * selects, listed and watched over HTTPS with the service account's token
 * (re-read for each request: it rotates) and CA. Each pod with an IP and
 * target port is an endpoint: id the pod's name (NAME:PORT with several
 * ports), address IP:PORT, stated (endpoints.h): ready ACTIVE, a
 * deletionTimestamp DRAINING, not ready DOWN; kv_events the pod's
 * CR_K8S_POD_ANNOTATION, else the template with its IP. */
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

/* NAMESPACE/NAME, each part 1..253 of [a-z0-9.-]: CR_OK, else CR_EINVAL
 * "--endpoints-k8s-pool must be NAMESPACE/NAME ...". "" is CR_OK (off). */
cr_status cr_k8s_pool_check(const char *value, cr_error *err);

/* The API server's base URL (no trailing slash) into out: c->k8s_api,
 * else https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT (an IPv6
 * host in brackets). CR_EINVAL "--endpoints-k8s-pool needs --k8s-api or
 * KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT" when neither is
 * set, or when it does not fit cap. */
cr_status cr_k8s_api_url(const cr_discover_config *c, char *out, size_t cap, cr_error *err);

/* Its figures since start. */
typedef struct cr_k8s_stats {
    uint64_t lists;     /* pod lists read (the first and each relist) */
    uint64_t relists;   /* lists after the first: 410 Gone, a changed pool */
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

/* Starts the watcher of c->endpoints_k8s_pool for core on its own thread
 * and returns at once: the first set applies when the first list has been
 * read (until then the core has whatever it had). Its reports go to hooks
 * with source "--endpoints-k8s-pool"; failures at most once every
 * CR_K8S_LOG_EVERY_S. NULL with err for a bad pool name or API URL, out of
 * memory, or no thread. c is copied; core and hooks->ctx must outlive the
 * watcher; hooks may be NULL. */
cr_k8s *cr_k8s_start(const cr_discover_config *c, cr_core *core, const cr_discover_hooks *hooks,
                     cr_error *err);

/* Its figures. Thread-safe. */
void cr_k8s_stats_read(cr_k8s *k, cr_k8s_stats *out);

/* Stops the thread (a request in flight is cut within about a second),
 * frees. NULL is ignored. Call before freeing the core. */
void cr_k8s_stop(cr_k8s *k);

#endif
