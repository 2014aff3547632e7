/* --endpoints-dns (discover.h): a ticker thread that resolves the name
 * with c-ares, one channel a resolution (so a changed resolv.conf is
 * read), and gives the core each set that differs from the last. */
#include <ares.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "discover.h"

#define SLICE_MS 50 /* a resolution looks at stopping this often */

struct cr_dns_watch {
    char name[CR_DNS_NAME_MAX + 1];
    uint16_t port;
    char *server;   /* --dns-server, "" = resolv.conf's */
    char *tmpl;     /* --kv-events-template */
    int timeout_ms; /* a query's first try */
    cr_core *core;
    cr_discover_hooks hooks;
    atomic_int stopping;
    cr_ticker *ticker;
    int ares_ready; /* ares_library_init done, to be undone */
    /* the ticker's own (and the start's, before it runs) */
    cr_dns_addr *given; /* the addresses of the last set given, sorted */
    size_t n_given;
    int failing;        /* the last resolution failed or was refused */
    double logged_s;    /* cr_mono_s of the last failure logged; 0 none */
    pthread_mutex_t lock; /* guards stats */
    cr_dns_stats stats;
};

/* One resolution's answer. */
typedef struct lookup {
    int done, status;
    size_t n, more; /* addresses kept, and those past v's room */
    cr_dns_addr v[CR_ENDPOINTS_MAX];
} lookup;

static void on_answer(void *arg, int status, int timeouts, struct ares_addrinfo *res)
{
    (void)timeouts;
    lookup *l = arg;
    l->done = 1;
    l->status = status;
    for (struct ares_addrinfo_node *a = res ? res->nodes : NULL; a; a = a->ai_next) {
        if (l->n == CR_ENDPOINTS_MAX) { /* repeats or not: a set too large */
            l->more++;
            continue;
        }
        cr_dns_addr *d = &l->v[l->n];
        memset(d, 0, sizeof *d);
        if (a->ai_family == AF_INET) {
            memcpy(d->bytes, &((struct sockaddr_in *)(void *)a->ai_addr)->sin_addr, 4);
        } else if (a->ai_family == AF_INET6) {
            d->v6 = 1;
            memcpy(d->bytes, &((struct sockaddr_in6 *)(void *)a->ai_addr)->sin6_addr, 16);
        } else {
            continue;
        }
        l->n++;
    }
    if (res)
        ares_freeaddrinfo(res);
}

/* Drives ch until l is answered or the watch stops (then cancelled). */
static void drive(cr_dns_watch *w, ares_channel ch, lookup *l)
{
    while (!l->done) {
        if (atomic_load(&w->stopping)) {
            ares_cancel(ch); /* answers l with ARES_ECANCELLED */
            return;
        }
        ares_socket_t socks[ARES_GETSOCK_MAXNUM];
        struct pollfd pf[ARES_GETSOCK_MAXNUM];
        /* ares_getsock's bits read as unsigned: c-ares' own macros shift a
         * signed 1 into the sign bit for the last socket. */
        unsigned bits = (unsigned)ares_getsock(ch, socks, ARES_GETSOCK_MAXNUM);
        int n = 0;
        for (int i = 0; i < ARES_GETSOCK_MAXNUM; i++) {
            short ev = (short)((bits >> i & 1u ? POLLIN : 0) |
                               (bits >> (i + ARES_GETSOCK_MAXNUM) & 1u ? POLLOUT : 0));
            if (ev)
                pf[n++] = (struct pollfd){.fd = socks[i], .events = ev};
        }
        struct timeval most = {0, SLICE_MS * 1000}, tv;
        struct timeval *t = ares_timeout(ch, &most, &tv);
        int ms = (int)(t->tv_sec * 1000 + (t->tv_usec + 999) / 1000);
        if (poll(pf, (nfds_t)n, ms) <= 0) {
            ares_process_fd(ch, ARES_SOCKET_BAD, ARES_SOCKET_BAD); /* timeouts */
            continue;
        }
        for (int i = 0; i < n; i++)
            ares_process_fd(ch, pf[i].revents & (POLLIN | POLLERR | POLLHUP) ? pf[i].fd
                                                                              : ARES_SOCKET_BAD,
                            pf[i].revents & POLLOUT ? pf[i].fd : ARES_SOCKET_BAD);
    }
}

/* Resolves the name into l: CR_OK with l->n > 0, else CR_EINVAL with why. */
static cr_status resolve(cr_dns_watch *w, lookup *l, cr_error *err)
{
    struct ares_options o = {.timeout = w->timeout_ms, .tries = 2, .lookups = "b"};
    ares_channel ch;
    int st = ares_init_options(&ch, &o, ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_LOOKUPS);
    if (st != ARES_SUCCESS)
        return cr_fail(err, CR_EINVAL, "the resolver cannot start: %s", ares_strerror(st));
    if (*w->server && (st = ares_set_servers_ports_csv(ch, w->server)) != ARES_SUCCESS) {
        ares_destroy(ch);
        return cr_fail(err, CR_EINVAL, "--dns-server %s: %s", w->server, ares_strerror(st));
    }
    struct ares_addrinfo_hints hints = {.ai_family = AF_UNSPEC};
    l->done = 0;
    l->n = l->more = 0;
    ares_getaddrinfo(ch, w->name, NULL, &hints, on_answer, l);
    drive(w, ch, l);
    ares_destroy(ch); /* answers a lookup still open, so l is settled */
    if (l->status != ARES_SUCCESS)
        return cr_fail(err, CR_EINVAL, "%s", ares_strerror(l->status));
    if (l->n == 0)
        return cr_fail(err, CR_EINVAL, "no A or AAAA address");
    return CR_OK;
}

static void say(cr_dns_watch *w, int level, const char *what, const char *why)
{
    if (w->hooks.log)
        w->hooks.log(w->hooks.ctx, level, what, "--endpoints-dns", why);
}

/* A failure (resolved 0: of the resolver, else of the set): counted, the
 * set kept, logged at most once every CR_DNS_LOG_EVERY_S. */
static void failed(cr_dns_watch *w, int resolved, const char *why)
{
    pthread_mutex_lock(&w->lock);
    if (resolved)
        w->stats.refused++;
    else
        w->stats.failed++;
    pthread_mutex_unlock(&w->lock);
    double now = cr_mono_s();
    w->failing = 1;
    if (w->logged_s > 0 && now - w->logged_s < CR_DNS_LOG_EVERY_S)
        return;
    w->logged_s = now;
    char text[CR_ERRLEN + CR_DNS_NAME_MAX + 8];
    snprintf(text, sizeof text, "%s: %s", w->name, why);
    say(w, 1, resolved ? "dns endpoint set refused, the set stays"
                       : "dns resolution failed, the set stays",
        text);
}

/* Gives the core the set of addresses v[0..n) (sorted) when it differs
 * from the last given. */
static void apply(cr_dns_watch *w, const cr_dns_addr *v, size_t n)
{
    cr_error err;
    if (n == w->n_given && memcmp(v, w->given, n * sizeof *v) == 0)
        return;
    cr_endpoint_spec *specs = cr_dns_specs(v, n, w->port, w->tmpl, &err);
    cr_dns_addr *copy = specs ? malloc(n * sizeof *copy) : NULL;
    cr_status st = CR_ENOMEM;
    if (specs && !copy)
        cr_fail(&err, CR_ENOMEM, "out of memory for %zu endpoints", n);
    else if (specs)
        st = cr_core_set_endpoints(w->core, specs, n, NULL, &err);
    free(specs);
    if (st != CR_OK) {
        free(copy);
        failed(w, 1, err.msg);
        return;
    }
    memcpy(copy, v, n * sizeof *copy);
    free(w->given);
    w->given = copy;
    w->n_given = n;
    pthread_mutex_lock(&w->lock);
    w->stats.applied++;
    pthread_mutex_unlock(&w->lock);
}

/* One resolution, and the set it gives. */
static void once(cr_dns_watch *w)
{
    lookup *l = malloc(sizeof *l);
    cr_error err;
    if (!l) {
        failed(w, 0, "out of memory");
        return;
    }
    if (resolve(w, l, &err) != CR_OK) {
        if (!atomic_load(&w->stopping))
            failed(w, 0, err.msg);
        free(l);
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->stats.resolved++;
    w->stats.found = (uint32_t)(l->n + l->more);
    pthread_mutex_unlock(&w->lock);
    if (l->more) {
        snprintf(err.msg, sizeof err.msg, "more than %d addresses (%zu)", CR_ENDPOINTS_MAX,
                 l->n + l->more);
        failed(w, 1, err.msg);
        free(l);
        return;
    }
    size_t n = cr_dns_addrs_sort(l->v, l->n);
    int was_failing = w->failing;
    w->failing = 0;
    apply(w, l->v, n);
    if (was_failing && !w->failing) {
        char text[CR_DNS_NAME_MAX + 32];
        snprintf(text, sizeof text, "%s: %zu addresses", w->name, n);
        say(w, 0, "dns resolution works again", text);
        w->logged_s = 0;
    }
    free(l);
}

static void tick(void *ctx, cr_ticker *t)
{
    (void)t;
    once(ctx);
}

cr_dns_watch *cr_dns_watch_start(const cr_discover_config *c, cr_core *core,
                                 const cr_discover_hooks *hooks, cr_error *err)
{
    cr_dns_watch *w = calloc(1, sizeof *w);
    if (!w) {
        cr_fail(err, CR_ENOMEM, "out of memory for --endpoints-dns");
        return NULL;
    }
    pthread_mutex_init(&w->lock, NULL);
    w->core = core;
    if (hooks)
        w->hooks = *hooks;
    /* Both tries (the second waits twice the first) take at most three
     * quarters of an interval. */
    double ms = c->dns_interval_s * 1000 / 4;
    w->timeout_ms = ms < 10 ? 10 : ms > CR_DNS_TIMEOUT_MAX_MS ? CR_DNS_TIMEOUT_MAX_MS : (int)ms;
    cr_status ok = CR_ENOMEM;
    int st;
    if (!(w->server = strdup(c->dns_server)) || !(w->tmpl = strdup(c->kv_events_template)))
        cr_fail(err, CR_ENOMEM, "out of memory for --endpoints-dns");
    else if ((ok = cr_dns_target_parse(c->endpoints_dns, w->name, &w->port, err)) == CR_OK &&
             *w->server && !cr_dns_is_ip_port(w->server))
        ok = cr_fail(err, CR_EINVAL, "--dns-server must be IP:PORT, got \"%s\"", w->server);
    if (ok == CR_OK && (st = ares_library_init(ARES_LIB_INIT_ALL)) != ARES_SUCCESS)
        ok = cr_fail(err, CR_EINVAL, "--endpoints-dns: c-ares: %s", ares_strerror(st));
    if (ok == CR_OK) {
        w->ares_ready = 1;
        once(w); /* the first set before serving, or why not, logged */
        if ((w->ticker = cr_ticker_start(c->dns_interval_s, tick, w, err)))
            return w;
    }
    cr_dns_watch_stop(w);
    return NULL;
}

void cr_dns_watch_stats(cr_dns_watch *w, cr_dns_stats *out)
{
    memset(out, 0, sizeof *out);
    if (!w)
        return;
    pthread_mutex_lock(&w->lock);
    *out = w->stats;
    pthread_mutex_unlock(&w->lock);
}

void cr_dns_watch_stop(cr_dns_watch *w)
{
    if (!w)
        return;
    atomic_store(&w->stopping, 1);
    cr_ticker_stop(w->ticker);
    if (w->ares_ready)
        ares_library_cleanup();
    pthread_mutex_destroy(&w->lock);
    free(w->given);
    free(w->server);
    free(w->tmpl);
    free(w);
}
