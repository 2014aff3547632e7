/* The Kubernetes watcher (discover.h): one thread that reads the pool,
 * lists its pods, then watches them from the list's resourceVersion,
 * applying each change of the endpoints they make to the core. A watch
 * that ends (its timeoutSeconds) is opened again from the last
 * resourceVersion, after the pool is read again (a changed selector or
 * port relists); 410 Gone relists; any failure keeps the set, waits (1 s,
 * doubling to 30 s) and tries again. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "k8s_internal.h"

struct cr_k8s {
    cr_core *core;
    cr_discover_hooks hooks;
    char *ns, *name, *token_file, *ca_file, *template;
    char base[1024];
    pthread_t thread;
    int started;
    atomic_int stop;
    pthread_mutex_t lock; /* guards stats; with wake, the waits */
    pthread_cond_t wake;
    cr_k8s_stats stats;
    /* the thread's own */
    k8s_http http;
    k8s_pool pool;
    k8s_pods pods;
    cr_endpoint_spec *specs;
    k8s_endpoint *ep;
    char *said_set;   /* the last set applied, as text; NULL none yet */
    double logged_at; /* when a failure was last logged; 0 never */
    int failing;      /* the last request failed */
    int listed_once;  /* a list was read: the next ones are relists */
};

enum { EV_LISTS, EV_RELISTS, EV_WATCHES, EV_EVENTS, EV_BOOKMARKS, EV_GONE, EV_ERRORS, EV_EMPTY,
       EV_APPLIED };

static void count(cr_k8s *k, int what)
{
    pthread_mutex_lock(&k->lock);
    uint64_t *f[] = {&k->stats.lists,  &k->stats.relists, &k->stats.watches,
                     &k->stats.events, &k->stats.bookmarks, &k->stats.gone,
                     &k->stats.errors, &k->stats.empty,   &k->stats.applied};
    ++*f[what];
    k->stats.pods = k->pods.n;
    pthread_mutex_unlock(&k->lock);
}

static void say(cr_k8s *k, int level, const char *what, const char *detail)
{
    if (k->hooks.log)
        k->hooks.log(k->hooks.ctx, level, what, "--endpoints-k8s-pool",
                     detail && *detail ? detail : NULL);
}

/* A failure: counted, logged at most once every CR_K8S_LOG_EVERY_S. */
static void failed(cr_k8s *k, int what, const char *msg, const char *why)
{
    double now = cr_mono_s();
    count(k, what);
    k->failing = 1;
    if (k->logged_at == 0 || now - k->logged_at >= CR_K8S_LOG_EVERY_S) {
        k->logged_at = now;
        say(k, 1, msg, why);
    }
}

/* Waits s seconds or until stopped; 1 when stopping. */
static int pause_s(cr_k8s *k, double s)
{
    struct timespec until = cr_timespec_of(cr_mono_s() + s);
    pthread_mutex_lock(&k->lock);
    while (!atomic_load(&k->stop) && pthread_cond_timedwait(&k->wake, &k->lock, &until) == 0)
        ;
    pthread_mutex_unlock(&k->lock);
    return atomic_load(&k->stop);
}

/* The endpoints of the pods now, applied when they differ from the last
 * set applied. A set of none is not applied (the core refuses it). */
static void apply(cr_k8s *k)
{
    size_t n, skipped, len = 0;
    cr_error err;
    k8s_endpoints(&k->pods, &k->pool, k->template, k->specs, k->ep, &n, &skipped);
    if (skipped)
        failed(k, EV_ERRORS, "kubernetes discovery left endpoints out",
               "a pod's name:port is longer than 128 bytes, or more than 1024 endpoints");
    char *text = malloc((size_t)n * sizeof(k8s_endpoint) + 1);
    if (!text) {
        failed(k, EV_ERRORS, "kubernetes discovery cannot apply the set", "out of memory");
        return;
    }
    text[0] = '\0';
    for (size_t i = 0; i < n; i++)
        len += (size_t)sprintf(text + len, "%s %s %s %d\n", k->specs[i].id,
                               k->specs[i].address, k->specs[i].kv_events, k->specs[i].state);
    if (k->said_set && !strcmp(text, k->said_set)) {
        free(text);
        return;
    }
    if (n == 0) {
        free(text);
        failed(k, EV_EMPTY, "kubernetes discovery found no endpoint, the set stays",
               "the pool selects no pod with an IP");
        return;
    }
    if (cr_core_set_endpoints(k->core, k->specs, n, NULL, &err) != CR_OK) {
        free(text);
        failed(k, EV_ERRORS, "kubernetes discovery's set was refused, the set stays", err.msg);
        return;
    }
    free(k->said_set);
    k->said_set = text;
    count(k, EV_APPLIED);
}

/* GET path into *body with a 200; else an error naming the answer. */
static cr_status get_ok(cr_k8s *k, const char *path, char **body, cr_error *err)
{
    long status;
    cr_status st = k8s_http_get(&k->http, path, CR_K8S_REQUEST_S, NULL, NULL, body, &status, err);
    if (st == CR_OK && status != 200) {
        char text[160];
        k8s_status_text(*body, text, sizeof text);
        st = cr_fail(err, CR_EINVAL, "GET %s: HTTP %ld %s", path, status, text);
        free(*body);
        *body = NULL;
    }
    return st;
}

static cr_status read_pool(cr_k8s *k, k8s_pool *pool, cr_error *err)
{
    char path[1024], *body;
    snprintf(path, sizeof path,
             "/apis/inference.networking.k8s.io/v1/namespaces/%s/inferencepools/%s", k->ns,
             k->name);
    cr_status st = get_ok(k, path, &body, err);
    if (st == CR_OK)
        st = k8s_pool_parse(body, pool, err);
    free(body);
    return st;
}

/* The pods' path with query (after the selector). */
static cr_status pods_path(cr_k8s *k, char *path, size_t cap, const char *query, cr_error *err)
{
    char sel[3 * K8S_SELECTOR_MAX];
    if (k8s_http_escape(&k->http, k->pool.selector, sel, sizeof sel, err) != CR_OK)
        return CR_EINVAL;
    int n = snprintf(path, cap, "/api/v1/namespaces/%s/pods?labelSelector=%s%s", k->ns, sel,
                     query);
    return n > 0 && (size_t)n < cap ? CR_OK : cr_fail(err, CR_EINVAL, "the pods' URL is too long");
}

/* The pool read, its pods listed and applied. */
static cr_status list(cr_k8s *k, cr_error *err)
{
    char path[4 * K8S_SELECTOR_MAX], *body;
    cr_status st = read_pool(k, &k->pool, err);
    if (st == CR_OK)
        st = pods_path(k, path, sizeof path, "", err);
    if (st == CR_OK)
        st = get_ok(k, path, &body, err);
    if (st == CR_OK) {
        st = k8s_pods_list(&k->pods, body, err);
        free(body);
    }
    if (st != CR_OK)
        return st;
    count(k, EV_LISTS);
    if (k->listed_once)
        count(k, EV_RELISTS);
    k->listed_once = 1;
    apply(k);
    return CR_OK;
}

typedef enum { WATCH_ENDED, WATCH_RELIST, WATCH_FAILED } watch_end;

typedef struct watching {
    cr_k8s *k;
    k8s_event last; /* K8S_EVENT_GONE or _ERROR stop the watch */
    cr_error err;
    int events;
} watching;

static void recovered(cr_k8s *k);

static int on_line(void *ctx, char *line, size_t len)
{
    (void)len;
    watching *w = ctx;
    if (!line) {
        recovered(w->k); /* the watch is open */
        return 0;
    }
    w->last = k8s_pods_event(&w->k->pods, line, &w->err);
    w->events++;
    if (w->last == K8S_EVENT_CHANGED) {
        count(w->k, EV_EVENTS);
        apply(w->k);
    } else if (w->last == K8S_EVENT_BOOKMARK) {
        count(w->k, EV_BOOKMARKS);
    }
    return w->last == K8S_EVENT_GONE || w->last == K8S_EVENT_ERROR;
}

static watch_end watch(cr_k8s *k, int *events, cr_error *err)
{
    char query[K8S_RV_MAX * 3 + 128], rv[K8S_RV_MAX * 3 + 1], path[4 * K8S_SELECTOR_MAX];
    watching w = {.k = k, .last = K8S_EVENT_BOOKMARK};
    char *body;
    long status;
    *events = 0;
    if (k8s_http_escape(&k->http, k->pods.rv, rv, sizeof rv, err) != CR_OK)
        return WATCH_FAILED;
    snprintf(query, sizeof query,
             "&watch=1&resourceVersion=%s&allowWatchBookmarks=true&timeoutSeconds=%d", rv,
             CR_K8S_WATCH_S);
    if (pods_path(k, path, sizeof path, query, err) != CR_OK)
        return WATCH_FAILED;
    count(k, EV_WATCHES);
    cr_status st = k8s_http_get(&k->http, path, CR_K8S_WATCH_S + 30, on_line, &w, &body, &status,
                                err);
    *events = w.events;
    if (st == CR_OK && status != 200) {
        char text[160];
        k8s_status_text(body, text, sizeof text);
        cr_fail(err, CR_EINVAL, "watch: HTTP %ld %s", status, text);
    }
    free(body);
    if (st != CR_OK)
        return WATCH_FAILED;
    if (status == 410)
        return WATCH_RELIST;
    if (w.last == K8S_EVENT_GONE) {
        *err = w.err;
        return WATCH_RELIST;
    }
    if (status != 200)
        return WATCH_FAILED;
    if (w.last == K8S_EVENT_ERROR) {
        *err = w.err;
        return WATCH_FAILED;
    }
    return WATCH_ENDED;
}

static void recovered(cr_k8s *k)
{
    if (k->failing)
        say(k, 0, "kubernetes discovery is reading the pool again", "");
    k->failing = 0;
}

static void *run(void *arg)
{
    cr_k8s *k = arg;
    double backoff = CR_K8S_RETRY_S;
    int listed = 0;
    while (!atomic_load(&k->stop)) {
        cr_error err = {0};
        int events = 0, ok = 0;
        double began = cr_mono_s();
        if (!listed) {
            ok = listed = list(k, &err) == CR_OK;
        } else {
            watch_end end = watch(k, &events, &err);
            k8s_pool pool;
            ok = end != WATCH_FAILED;
            if (end == WATCH_RELIST) {
                count(k, EV_GONE);
                say(k, 0, "kubernetes discovery relists the pods", err.msg);
                listed = 0;
            } else if (end == WATCH_ENDED && (ok = read_pool(k, &pool, &err) == CR_OK) &&
                       memcmp(&pool, &k->pool, sizeof pool) != 0) {
                listed = 0; /* the selector or the ports changed */
            }
        }
        if (atomic_load(&k->stop))
            break;
        if (ok) {
            recovered(k);
            backoff = CR_K8S_RETRY_S;
            /* a watch that ends at once, again and again, must not spin */
            if (listed && events == 0 && cr_mono_s() - began < 1 && pause_s(k, CR_K8S_RETRY_S))
                break;
            continue;
        }
        failed(k, EV_ERRORS, "kubernetes discovery failed, the set stays", err.msg);
        if (pause_s(k, backoff))
            break;
        backoff = backoff * 2 < CR_K8S_RETRY_MAX_S ? backoff * 2 : CR_K8S_RETRY_MAX_S;
    }
    return NULL;
}

void cr_k8s_stop(cr_k8s *k)
{
    if (!k)
        return;
    if (k->started) {
        pthread_mutex_lock(&k->lock);
        atomic_store(&k->stop, 1);
        pthread_cond_signal(&k->wake);
        pthread_mutex_unlock(&k->lock);
        pthread_join(k->thread, NULL);
    }
    if (k->http.curl)
        curl_easy_cleanup(k->http.curl);
    pthread_cond_destroy(&k->wake);
    pthread_mutex_destroy(&k->lock);
    free(k->ns);
    free(k->token_file);
    free(k->ca_file);
    free(k->template);
    free(k->pods.v);
    free(k->specs);
    free(k->ep);
    free(k->said_set);
    free(k);
}

cr_k8s *cr_k8s_start(const cr_discover_config *c, cr_core *core, const cr_discover_hooks *hooks,
                     cr_error *err)
{
    const char *pool = c->endpoints_k8s_pool;
    const char *slash = pool && cr_k8s_pool_check(pool, err) == CR_OK ? strchr(pool, '/') : NULL;
    if (!slash)
        return cr_fail(err, CR_EINVAL, "--endpoints-k8s-pool must be NAMESPACE/NAME"), NULL;
    /* here, before the thread: libcurl's global set-up is counted, never
     * undone (the endpoint picker's tokenizer shares it) */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return cr_fail(err, CR_EINVAL, "libcurl cannot start"), NULL;
    cr_k8s *k = calloc(1, sizeof *k);
    if (!k)
        return cr_fail(err, CR_ENOMEM, "out of memory for --endpoints-k8s-pool"), NULL;
    pthread_mutex_init(&k->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&k->wake, &ca);
    pthread_condattr_destroy(&ca);
    k->core = core;
    if (hooks)
        k->hooks = *hooks;
    k->ns = strdup(pool);
    k->token_file = strdup(c->k8s_token_file ? c->k8s_token_file : "");
    k->ca_file = strdup(c->k8s_ca_file ? c->k8s_ca_file : "");
    k->template = strdup(c->kv_events_template ? c->kv_events_template : "");
    k->pods.v = malloc(CR_K8S_MAX_PODS * sizeof *k->pods.v);
    k->specs = malloc(CR_ENDPOINTS_MAX * sizeof *k->specs);
    k->ep = malloc(CR_ENDPOINTS_MAX * sizeof *k->ep);
    if (!k->ns || !k->token_file || !k->ca_file || !k->template || !k->pods.v || !k->specs ||
        !k->ep) {
        cr_k8s_stop(k);
        return cr_fail(err, CR_ENOMEM, "out of memory for --endpoints-k8s-pool"), NULL;
    }
    k->ns[slash - pool] = '\0';
    k->name = k->ns + (slash - pool) + 1;
    k->http = (k8s_http){.base = k->base, .token_file = k->token_file, .ca_file = k->ca_file,
                         .stop = &k->stop};
    if (cr_k8s_api_url(c, k->base, sizeof k->base, err) != CR_OK) {
        cr_k8s_stop(k);
        return NULL;
    }
    if (pthread_create(&k->thread, NULL, run, k) != 0) {
        cr_k8s_stop(k);
        return cr_fail(err, CR_EINVAL, "cannot start the Kubernetes watcher's thread"), NULL;
    }
    k->started = 1;
    return k;
}

void cr_k8s_stats_read(cr_k8s *k, cr_k8s_stats *out)
{
    pthread_mutex_lock(&k->lock);
    *out = k->stats;
    pthread_mutex_unlock(&k->lock);
}
